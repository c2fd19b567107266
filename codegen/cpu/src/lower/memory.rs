//! Loads and stores of every element type (f16 and bf16 converted in registers), and the
//! integer helpers the conversions use.

use super::*;

impl<M: Module> Lower<'_, '_, M> {
    pub(super) fn load(&mut self, buf: BufId, index: &Index) -> Value {
        let ty = self.buf_ty(buf);
        let ct = Ct::of(ty);
        let (addr, off) = self.addr(buf, index);
        match self.vec.map(|m| index.stride_of(m.var)) {
            None => self.load_scalar(ty, addr, off),
            Some(0) => {
                let s = self.load_scalar(ty, addr, off);
                self.b.ins().splat(ct.vector(), s)
            }
            Some(1) => self.load_vector(ty, addr, off),
            Some(stride) => {
                // Gather, lane by lane.
                let size = ty.size_bytes() as i64;
                let first = self.load_scalar(ty, addr, off);
                let mut v = self.b.ins().splat(ct.vector(), first);
                for lane in 1..ct.lanes() {
                    let o = off as i64 + lane * stride.wrapping_mul(size);
                    let (a, o) = self.with_offset(addr, o);
                    let x = self.load_scalar(ty, a, o);
                    v = self.b.ins().insertlane(v, x, lane as u8);
                }
                v
            }
        }
    }

    /// One element, widened to its compute type.
    pub(super) fn load_scalar(&mut self, ty: ElemType, addr: Value, off: i32) -> Value {
        let flags = MemFlagsData::trusted();
        match ty {
            ElemType::F32 => self.b.ins().load(types::F32, flags, addr, off),
            ElemType::F64 => self.b.ins().load(types::F64, flags, addr, off),
            ElemType::I32 => {
                let i = self.b.ins().load(types::I32, flags, addr, off);
                self.b.ins().fcvt_from_sint(types::F32, i)
            }
            ElemType::F16 => {
                let h = self.b.ins().uload16(types::I32, flags, addr, off);
                self.f16_bits_to_f32(h)
            }
            ElemType::BF16 => {
                let h = self.b.ins().uload16(types::I32, flags, addr, off);
                self.bf16_bits_to_f32(h)
            }
        }
    }

    /// Consecutive elements as one vector of their compute type.
    pub(super) fn load_vector(&mut self, ty: ElemType, addr: Value, off: i32) -> Value {
        let flags = MemFlagsData::new().with_notrap();
        match ty {
            ElemType::F32 => self.b.ins().load(types::F32X4, flags, addr, off),
            ElemType::F64 => self.b.ins().load(types::F64X2, flags, addr, off),
            ElemType::I32 => {
                let i = self.b.ins().load(types::I32X4, flags, addr, off);
                self.b.ins().fcvt_from_sint(types::F32X4, i)
            }
            ElemType::F16 => {
                let h = self.b.ins().uload16x4(flags, addr, off);
                self.f16_bits_to_f32(h)
            }
            ElemType::BF16 => {
                let h = self.b.ins().uload16x4(flags, addr, off);
                self.bf16_bits_to_f32(h)
            }
        }
    }

    /// Stores one scalar of compute type `nat`, narrowed to `ty`.
    pub(super) fn store_scalar(
        &mut self,
        ty: ElemType,
        nat: Ct,
        v: Value,
        addr: Value,
        off: i32,
    ) -> Result<(), CodegenError> {
        let flags = MemFlagsData::trusted();
        let v = match (ty, nat) {
            (ElemType::F32, Ct::F64) => self.b.ins().fdemote(types::F32, v),
            (ElemType::F64, Ct::F32) => self.b.ins().fpromote(types::F64, v),
            (ElemType::I32, _) => self.b.ins().fcvt_to_sint_sat(types::I32, v),
            (ElemType::F16, Ct::F32) => self.f32_to_f16_bits(v),
            (ElemType::BF16, Ct::F32) => self.f32_to_bf16_bits(v),
            (ElemType::F16, Ct::F64) => self.call1(helpers::F64_TO_F16, v, types::I32)?,
            (ElemType::BF16, Ct::F64) => self.call1(helpers::F64_TO_BF16, v, types::I32)?,
            _ => v,
        };
        if matches!(ty, ElemType::F16 | ElemType::BF16) {
            self.b.ins().istore16(flags, v, addr, off);
        } else {
            self.b.ins().store(flags, v, addr, off);
        }
        Ok(())
    }

    /// Stores a vector of the buffer's compute type to consecutive elements.
    pub(super) fn store_vector(&mut self, ty: ElemType, v: Value, addr: Value, off: i32) {
        let flags = MemFlagsData::new().with_notrap();
        match ty {
            ElemType::F32 | ElemType::F64 => {
                self.b.ins().store(flags, v, addr, off);
            }
            ElemType::I32 => {
                let n = self.b.ins().fcvt_to_sint_sat(types::I32X4, v);
                self.b.ins().store(flags, n, addr, off);
            }
            ElemType::F16 | ElemType::BF16 => {
                let bits = if ty == ElemType::F16 {
                    self.f32_to_f16_bits(v)
                } else {
                    self.f32_to_bf16_bits(v)
                };
                // Pack the four 16-bit values into the low 64 bits and store those.
                let packed = self.b.ins().unarrow(bits, bits);
                let le = MemFlagsData::new().with_endianness(Endianness::Little);
                let wide = self.b.ins().bitcast(types::I64X2, le, packed);
                let lo = self.b.ins().extractlane(wide, 0);
                self.b.ins().store(flags, lo, addr, off);
            }
        }
    }

    /// An i32 constant of type `ity` (i32 or i32x4).
    pub(super) fn ic(&mut self, ity: Type, c: u32) -> Value {
        let s = self.b.ins().iconst(types::I32, c as i64);
        if ity.is_vector() {
            self.b.ins().splat(ity, s)
        } else {
            s
        }
    }

    pub(super) fn shl(&mut self, x: Value, n: u32) -> Value {
        let amt = self.b.ins().iconst(types::I32, n as i64);
        self.b.ins().ishl(x, amt)
    }

    pub(super) fn shr(&mut self, x: Value, n: u32) -> Value {
        let amt = self.b.ins().iconst(types::I32, n as i64);
        self.b.ins().ushr(x, amt)
    }

    pub(super) fn band_c(&mut self, x: Value, c: u32) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let k = self.ic(ty, c);
        self.b.ins().band(x, k)
    }

    pub(super) fn bor_c(&mut self, x: Value, c: u32) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let k = self.ic(ty, c);
        self.b.ins().bor(x, k)
    }

    pub(super) fn add_c(&mut self, x: Value, c: u32) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let k = self.ic(ty, c);
        self.b.ins().iadd(x, k)
    }

    pub(super) fn cmp_c(&mut self, cc: IntCC, x: Value, c: u32) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let k = self.ic(ty, c);
        self.b.ins().icmp(cc, x, k)
    }

    /// `cond ? a : b` for a scalar condition or a vector lane mask.
    pub(super) fn sel(&mut self, cond: Value, a: Value, b: Value) -> Value {
        if self.b.func.dfg.value_type(cond).is_vector() {
            self.b.ins().bitselect(cond, a, b)
        } else {
            self.b.ins().select(cond, a, b)
        }
    }

    pub(super) fn float_ty(ity: Type) -> Type {
        if ity.is_vector() {
            types::F32X4
        } else {
            types::F32
        }
    }

    pub(super) fn bitcast(&mut self, ty: Type, v: Value) -> Value {
        self.b.ins().bitcast(ty, MemFlagsData::new(), v)
    }

    /// f16 bits (zero-extended in an i32 lane) → f32, exactly (subnormals, inf and NaN too).
    pub(super) fn f16_bits_to_f32(&mut self, h: Value) -> Value {
        let ity = self.b.func.dfg.value_type(h);
        let fty = Self::float_ty(ity);
        let mag = self.band_c(h, 0x7fff);
        let o = self.shl(mag, 13);
        let e = self.band_c(o, 0x0f80_0000);
        // Rebias the exponent from 15 to 127.
        let o = self.add_c(o, 0x3800_0000);
        let inf_nan = self.cmp_c(IntCC::Equal, e, 0x0f80_0000);
        let o_inf = self.add_c(o, 0x3800_0000);
        let o = self.sel(inf_nan, o_inf, o);
        // Zero and subnormals: renormalise through a float subtraction (exact).
        let den = self.cmp_c(IntCC::Equal, e, 0);
        let t = self.add_c(o, 0x0080_0000);
        let tf = self.bitcast(fty, t);
        let magic_i = self.ic(ity, 0x3880_0000);
        let magic = self.bitcast(fty, magic_i);
        let d = self.b.ins().fsub(tf, magic);
        let di = self.bitcast(ity, d);
        let o = self.sel(den, di, o);
        let sign = self.band_c(h, 0x8000);
        let sign = self.shl(sign, 16);
        let o = self.b.ins().bor(o, sign);
        self.bitcast(fty, o)
    }

    /// f32 → f16 bits, rounded to nearest even; NaN stays NaN (quiet, payload truncated) as in
    /// `half::f16::from_f32`.
    pub(super) fn f32_to_f16_bits(&mut self, x: Value) -> Value {
        let fty = self.b.func.dfg.value_type(x);
        let ity = if fty.is_vector() {
            types::I32X4
        } else {
            types::I32
        };
        let f = self.bitcast(ity, x);
        let sign = self.band_c(f, 0x8000_0000);
        let a = self.b.ins().bxor(f, sign);
        // Overflow to infinity, or NaN.
        let big = self.cmp_c(IntCC::SignedGreaterThanOrEqual, a, 0x4780_0000);
        let is_nan = self.cmp_c(IntCC::SignedGreaterThan, a, 0x7f80_0000);
        let man = self.band_c(a, 0x007f_ffff);
        let man = self.shr(man, 13);
        let nan = self.bor_c(man, 0x7e00);
        let inf = self.ic(ity, 0x7c00);
        let r_big = self.sel(is_nan, nan, inf);
        // Subnormal results: let the FPU round by adding 0.5 (exponent aligns the mantissa).
        let small = self.cmp_c(IntCC::SignedLessThan, a, 0x3880_0000);
        let af = self.bitcast(fty, a);
        let magic_i = self.ic(ity, 0x3f00_0000);
        let magic = self.bitcast(fty, magic_i);
        let s = self.b.ins().fadd(af, magic);
        let si = self.bitcast(ity, s);
        let r_small = self.b.ins().isub(si, magic_i);
        // Normal results: rebias and round to nearest even.
        let odd = self.shr(a, 13);
        let odd = self.band_c(odd, 1);
        let t = self.add_c(a, 0xc800_0fff);
        let t = self.b.ins().iadd(t, odd);
        let r_norm = self.shr(t, 13);
        let r = self.sel(small, r_small, r_norm);
        let r = self.sel(big, r_big, r);
        let sign16 = self.shr(sign, 16);
        self.b.ins().bor(r, sign16)
    }

    pub(super) fn bf16_bits_to_f32(&mut self, h: Value) -> Value {
        let ity = self.b.func.dfg.value_type(h);
        let w = self.shl(h, 16);
        self.bitcast(Self::float_ty(ity), w)
    }

    /// f32 → bf16 bits, rounded to nearest even; NaN stays NaN (as `half::bf16::from_f32`).
    pub(super) fn f32_to_bf16_bits(&mut self, x: Value) -> Value {
        let fty = self.b.func.dfg.value_type(x);
        let ity = if fty.is_vector() {
            types::I32X4
        } else {
            types::I32
        };
        let f = self.bitcast(ity, x);
        let hi = self.shr(f, 16);
        let lsb = self.band_c(hi, 1);
        let t = self.add_c(f, 0x7fff);
        let t = self.b.ins().iadd(t, lsb);
        let r = self.shr(t, 16);
        let mag = self.band_c(f, 0x7fff_ffff);
        let is_nan = self.cmp_c(IntCC::SignedGreaterThan, mag, 0x7f80_0000);
        let nan = self.bor_c(hi, 0x40);
        self.sel(is_nan, nan, r)
    }
}
