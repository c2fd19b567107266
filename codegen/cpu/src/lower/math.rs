//! Inline vector math: the transcendental functions of vector loops as straight-line code, no
//! calls. (On a CPU with AVX-512, or AVX2 with FMA, f32 loops calling `exp`, `log`, `tanh`,
//! `sigmoid`, `gelu`, `silu`, `erf`, `gelu_erf`, `sin` or `cos` use `vmath.rs`'s ahead-of-time
//! copies of these kernels instead, through `chunked.rs`; both are tested against the
//! evaluator.)
//!
//! - f32x4 `exp`, `sigmoid` and `log` are native f32 (Cephes `expf` and `logf`, within 2 ulp).
//!   (A native `silu` as x·sigmoid(x) reaches 3 ulp, so it is not one.)
//! - The other f32x4 functions (`tanh`, `gelu`, `gelu_erf`, `erf`, `silu`, `log1p`,
//!   `expm1`, `softplus`, `sin`, `cos`, `pow`) widen the four lanes to two f64x2 halves, evaluate there with the f64
//!   kernels below, and round once back to f32. f64 leaves every ill-conditioned step (the
//!   argument of gelu's tail, `1 − tanh`, `y·log x`) enough spare bits that the f32 result is
//!   within 1 ulp of the f64 function rounded once: the evaluator's definition
//!   (spec/loop-ir.md §2).
//! - f64x2 `exp`, `log`, `sigmoid`, `silu` and `gelu` run the same kernels at full precision
//!   (fdlibm's `log`, a degree-13 Taylor `exp` after Cody–Waite reduction: within 4 ulp).
//!
//! Lanes the fast path does not cover (`sin`/`cos` of |x| > 2^18, `pow` of a non-positive or
//! non-finite base, …) take a guarded slow path: when any lane needs it, the whole vector goes
//! through the scalar helper, which is exact by definition. f64 `tanh`, `log1p`, `expm1`,
//! `softplus`, `sin`, `cos`, `pow`, `erf` and `gelu_erf` still call their scalar helper lane by
//! lane.

// The constants are written as fdlibm and Cephes publish them.
#![allow(clippy::excessive_precision)]

use cranelift_codegen::ir::{ConstantData, Immediate};

use super::*;
use crate::vmath::{COS_P, ERFC_P, ERF_SMALL, EXPF_P, LOGF_P, PIO2_PARTS, SIN_P, TANHF_P};

/// 1.5·2^52: adding it to an f64 of magnitude below 2^51 rounds to an integer, which then sits in
/// the low mantissa bits.
const MAGIC_F64: f64 = 6_755_399_441_055_744.0;

impl<M: Module> Lower<'_, '_, M> {
    /// The inline vector form of a unary operation, when it has one for vector type `ty`.
    pub(super) fn vector_unary(
        &mut self,
        op: UnOp,
        x: Value,
        ty: Type,
    ) -> Result<Option<Value>, CodegenError> {
        if ty == types::F32X4 {
            let f: fn(&mut Self, Value, bool) -> Value = match op {
                UnOp::Exp => return Ok(Some(self.exp_f32x4(x))),
                UnOp::Sigmoid => return Ok(Some(self.sigmoid_f32x4(x))),
                UnOp::Log => return Ok(Some(self.log_f32x4(x))),
                UnOp::Sin | UnOp::Cos => return self.sin_cos_f32x4(op, x).map(Some),
                UnOp::Tanh => return Ok(Some(self.tanh_f32x4(x))),
                UnOp::Gelu => Self::gelu_d,
                UnOp::Log1p => Self::log1p_d,
                UnOp::Expm1 => Self::expm1_d,
                UnOp::Silu => Self::silu_d,
                UnOp::Softplus => Self::softplus_d,
                UnOp::Erf => Self::erf_d,
                UnOp::GeluErf => Self::gelu_erf_d,
                _ => return Ok(None),
            };
            return Ok(Some(self.via_f64(x, f)));
        }
        if ty == types::F64X2 {
            return Ok(match op {
                UnOp::Exp => Some(self.exp_d(x, true)),
                UnOp::Log => Some(self.log_d(x, true)),
                UnOp::Sigmoid => Some(self.sigmoid_d(x, true)),
                UnOp::Silu => Some(self.silu_d(x, true)),
                UnOp::Gelu => Some(self.gelu_d(x, true)),
                _ => None,
            });
        }
        Ok(None)
    }

    // ---- f32x4 <-> two f64x2 -----------------------------------------------------------------

    fn shuffle_bytes(&mut self, a: Value, b: Value, mask: [u8; 16]) -> Value {
        let ty = self.b.func.dfg.value_type(a);
        let le = MemFlagsData::new().with_endianness(Endianness::Little);
        let a = self.b.ins().bitcast(types::I8X16, le, a);
        let b = self.b.ins().bitcast(types::I8X16, le, b);
        let imm: Immediate = self
            .b
            .func
            .dfg
            .immediates
            .push(ConstantData::from(mask.to_vec()));
        let s = self.b.ins().shuffle(a, b, imm);
        self.b.ins().bitcast(ty, le, s)
    }

    /// Lanes 0–1 and 2–3 of an f32x4, widened exactly.
    fn widen(&mut self, x: Value) -> (Value, Value) {
        let lo = self.b.ins().fvpromote_low(x);
        let mut m = [0u8; 16];
        for (i, b) in m.iter_mut().enumerate() {
            *b = (8 + i % 8) as u8;
        }
        let high = self.shuffle_bytes(x, x, m);
        let hi = self.b.ins().fvpromote_low(high);
        (lo, hi)
    }

    /// Two f64x2 rounded once to f32 and packed into one f32x4.
    fn narrow(&mut self, lo: Value, hi: Value) -> Value {
        let l = self.b.ins().fvdemote(lo);
        let h = self.b.ins().fvdemote(hi);
        let mut m = [0u8; 16];
        for (i, b) in m.iter_mut().enumerate() {
            *b = if i < 8 { i as u8 } else { (16 + i - 8) as u8 };
        }
        self.shuffle_bytes(l, h, m)
    }

    /// An f64 kernel on the two halves of an f32x4, at the precision f32 results need.
    fn via_f64(&mut self, x: Value, f: fn(&mut Self, Value, bool) -> Value) -> Value {
        let (lo, hi) = self.widen(x);
        let lo = f(self, lo, false);
        let hi = f(self, hi, false);
        self.narrow(lo, hi)
    }

    /// `fast` unless some lane of `bad` (an fcmp mask of `x`'s type) is set; then every lane
    /// comes from the scalar helper `name` (exact by definition, and rare).
    fn guarded(
        &mut self,
        bad: Value,
        fast: Value,
        name: &'static str,
        args: &[Value],
    ) -> Result<Value, CodegenError> {
        let ty = self.b.func.dfg.value_type(fast);
        let out = self.b.declare_var(ty);
        self.b.def_var(out, fast);
        let slow = self.b.create_block();
        let done = self.b.create_block();
        let any = self.b.ins().vany_true(bad);
        self.b.ins().brif(any, slow, &[], done, &[]);
        self.b.switch_to_block(slow);
        let ct = if ty == types::F64X2 { Ct::F64 } else { Ct::F32 };
        // Called in vector mode only, so `lanewise` calls the helper once per lane.
        let v = self.lanewise(name, args, ct)?;
        self.b.def_var(out, v);
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(done);
        Ok(self.b.use_var(out))
    }

    // ---- small helpers on f64x2 --------------------------------------------------------------

    fn kd(&mut self, x: f64) -> Value {
        self.fconst(types::F64X2, x)
    }

    fn ki(&mut self, c: i64) -> Value {
        let s = self.b.ins().iconst(types::I64, c);
        self.b.ins().splat(types::I64X2, s)
    }

    /// `c[0]·x^(n-1) + … + c[n-1]` by Horner's rule.
    fn horner(&mut self, x: Value, c: &[f64]) -> Value {
        let mut p = self.kd(c[0]);
        for &k in &c[1..] {
            let kv = self.kd(k);
            p = self.mul_add(p, x, kv);
        }
        p
    }

    /// `c[0] + c[1]·x + … + c[n-1]·x^(n-1)` by Estrin's scheme: pairs `c[2i] + c[2i+1]·x`
    /// combined with x², x⁴, …, so the dependency chain is about log2(n) multiply-adds long
    /// instead of n (the lanes of an elementwise loop are latency-bound, not port-bound).
    fn estrin(&mut self, x: Value, c: &[f64]) -> Value {
        let mut terms: Vec<Value> = c
            .chunks(2)
            .map(|pair| match pair {
                [a, b] => {
                    let (a, b) = (self.kd(*a), self.kd(*b));
                    self.mul_add(b, x, a)
                }
                [a] => self.kd(*a),
                _ => unreachable!(),
            })
            .collect();
        let mut pw = x;
        while terms.len() > 1 {
            pw = self.b.ins().fmul(pw, pw);
            terms = terms
                .chunks(2)
                .map(|pair| match pair {
                    [a, b] => self.mul_add(*b, pw, *a),
                    [a] => *a,
                    _ => unreachable!(),
                })
                .collect();
        }
        terms[0]
    }

    /// `x <cc> k ? then : x`, lane-wise, for a vector of any float type.
    fn replace_if(&mut self, cc: FloatCC, x: Value, k: f64, then: Value) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let kv = self.fconst(ty, k);
        let m = self.b.ins().fcmp(cc, x, kv);
        let m = self.bitcast(ty, m);
        self.b.ins().bitselect(m, then, x)
    }

    /// `cond ? a : b` with an fcmp mask of f64x2 operands.
    fn pick(&mut self, cond: Value, a: Value, b: Value) -> Value {
        let m = self.bitcast(types::F64X2, cond);
        self.b.ins().bitselect(m, a, b)
    }

    /// `n` (integer-valued f64 lanes, |n| < 2^51) as i64 lanes, and as the rounded f64.
    fn round_to_int(&mut self, t: Value) -> (Value, Value) {
        let magic = self.kd(MAGIC_F64);
        let s = self.b.ins().fadd(t, magic);
        let z = self.b.ins().fsub(s, magic);
        let si = self.bitcast(types::I64X2, s);
        let mi = self.ki(MAGIC_F64.to_bits() as i64);
        (self.b.ins().isub(si, mi), z)
    }

    // ---- f64x2 kernels -----------------------------------------------------------------------

    /// e^x: n = round(x/ln 2), r = x − n·ln 2 (Cody–Waite, two parts), e^r by its Taylor series
    /// (|r| ≤ ln2/2) to degree 13 for f64 results (remainder below 2^-57) or degree 9 for f32
    /// results (below 2^-37), times 2^n applied in two halves so that subnormal results round
    /// once. NaN stays NaN; x > 709.8 gives +inf, x < −745.2 gives 0.
    pub(super) fn exp_d(&mut self, x: Value, full: bool) -> Value {
        let (top, bottom) = if full {
            (710.0, -746.0)
        } else {
            (710.0, -708.0)
        };
        let hi = self.kd(top);
        let x = self.replace_if(FloatCC::GreaterThan, x, top, hi);
        let lo = self.kd(bottom);
        let x = self.replace_if(FloatCC::LessThan, x, bottom, lo);
        let log2e = self.kd(std::f64::consts::LOG2_E);
        let t = self.b.ins().fmul(x, log2e);
        let (n, z) = if full {
            self.round_to_int(t)
        } else {
            // f32 results never need an f64 subnormal: one scale 2^n, its exponent field
            // (n + 1023) read straight from the rounding's low bits.
            let magic = self.kd(MAGIC_F64 + 1023.0);
            let s = self.b.ins().fadd(t, magic);
            let z = self.b.ins().fsub(s, magic);
            (self.bitcast(types::I64X2, s), z)
        };
        let nz = self.b.ins().fneg(z);
        let c1 = self.kd(6.931_471_803_691_238_164_90e-1);
        let c2 = self.kd(1.908_214_929_270_587_700_02e-10);
        let r = self.mul_add(nz, c1, x);
        let r = self.mul_add(nz, c2, r);
        let degree = if full { 13 } else { 9 };
        let mut c = vec![1.0f64];
        for k in 1..=degree {
            c.push(c[k - 1] / k as f64);
        }
        // f64 results keep Horner's rule (its rounding is within 1 ulp here; Estrin's reaches
        // 4); f32 results take the shorter dependency chain.
        if full {
            c.reverse();
            let p = self.horner(r, &c);
            return self.scale_pow2(p, n);
        }
        let p = self.estrin(r, &c);
        let sh = self.b.ins().iconst(types::I32, 52);
        let bits = self.b.ins().ishl(n, sh);
        let scale = self.bitcast(types::F64X2, bits);
        self.b.ins().fmul(p, scale)
    }

    /// `p · 2^n` for i64 lanes `n` in [−1100, 1100], as two multiplications by normal powers
    /// of two.
    fn scale_pow2(&mut self, p: Value, n: Value) -> Value {
        let one = self.b.ins().iconst(types::I32, 1);
        let n1 = self.b.ins().sshr(n, one);
        let n2 = self.b.ins().isub(n, n1);
        let mut out = p;
        for ni in [n1, n2] {
            let bias = self.ki(1023);
            let biased = self.b.ins().iadd(ni, bias);
            let sh = self.b.ins().iconst(types::I32, 52);
            let bits = self.b.ins().ishl(biased, sh);
            let scale = self.bitcast(types::F64X2, bits);
            out = self.b.ins().fmul(out, scale);
        }
        out
    }

    /// ln x (fdlibm's `__ieee754_log`: x = 2^k·m with m in [√2/2, √2), f = m − 1,
    /// s = f/(2+f), a degree-14 odd series in s). ln 0 = −inf, ln of a negative number or NaN
    /// is NaN, ln +inf = +inf; subnormals are scaled by 2^54 first.
    pub(super) fn log_d(&mut self, x: Value, _full: bool) -> Value {
        let ty = types::F64X2;
        let min_normal = self.kd(f64::MIN_POSITIVE);
        let tiny = self.b.ins().fcmp(FloatCC::LessThan, x, min_normal);
        let two54 = self.kd(18_014_398_509_481_984.0);
        let scaled = self.b.ins().fmul(x, two54);
        let xs = self.pick(tiny, scaled, x);
        let m54 = self.kd(-54.0);
        let zero = self.kd(0.0);
        let kadj = self.pick(tiny, m54, zero);
        let hx = self.bitcast(types::I64X2, xs);
        let sh = self.b.ins().iconst(types::I32, 52);
        let e = self.b.ins().ushr(hx, sh);
        let mant_mask = self.ki(0x000f_ffff_ffff_ffff);
        let one_bits = self.ki(0x3ff0_0000_0000_0000);
        let mb = self.b.ins().band(hx, mant_mask);
        let mb = self.b.ins().bor(mb, one_bits);
        let m = self.bitcast(ty, mb);
        let sqrt2 = self.kd(std::f64::consts::SQRT_2);
        let big = self.b.ins().fcmp(FloatCC::GreaterThan, m, sqrt2);
        let half = self.kd(0.5);
        let mh = self.b.ins().fmul(m, half);
        let m = self.pick(big, mh, m);
        // The biased exponent as a float: OR it into the mantissa of 2^52, subtract 2^52.
        let two52_bits = self.ki(0x4330_0000_0000_0000);
        let ef = self.b.ins().bor(e, two52_bits);
        let ef = self.bitcast(ty, ef);
        let two52 = self.kd(4_503_599_627_370_496.0);
        let ef = self.b.ins().fsub(ef, two52);
        let onef = self.kd(1.0);
        let bump = self.pick(big, onef, zero);
        let bias = self.kd(-1023.0);
        let k = self.b.ins().fadd(ef, bias);
        let k = self.b.ins().fadd(k, kadj);
        let k = self.b.ins().fadd(k, bump);
        let f = self.b.ins().fsub(m, onef);
        let two = self.kd(2.0);
        let d = self.b.ins().fadd(two, f);
        let s = self.b.ins().fdiv(f, d);
        let z = self.b.ins().fmul(s, s);
        let w = self.b.ins().fmul(z, z);
        let t1 = self.horner(
            w,
            &[
                1.531_383_769_920_937_332e-1,
                2.222_219_843_214_978_396e-1,
                3.999_999_999_940_941_908e-1,
            ],
        );
        let t1 = self.b.ins().fmul(w, t1);
        let t2 = self.horner(
            w,
            &[
                1.479_819_860_511_658_591e-1,
                1.818_357_216_161_805_012e-1,
                2.857_142_874_366_239_149e-1,
                6.666_666_666_666_735_130e-1,
            ],
        );
        let t2 = self.b.ins().fmul(z, t2);
        let r = self.b.ins().fadd(t2, t1);
        let hf = self.b.ins().fmul(half, f);
        let hfsq = self.b.ins().fmul(hf, f);
        let ln2_hi = self.kd(6.931_471_803_691_238_164_90e-1);
        let ln2_lo = self.kd(1.908_214_929_270_587_700_02e-10);
        let a = self.b.ins().fadd(hfsq, r);
        let a = self.b.ins().fmul(s, a);
        let klo = self.b.ins().fmul(k, ln2_lo);
        let a = self.b.ins().fadd(a, klo);
        let a = self.b.ins().fsub(hfsq, a);
        let a = self.b.ins().fsub(a, f);
        let khi = self.b.ins().fmul(k, ln2_hi);
        let out = self.b.ins().fsub(khi, a);
        // Specials, last one wins: +inf, negatives (NaN), zeros (−inf), NaN itself.
        let inf = self.kd(f64::INFINITY);
        let out = self.replace_at(FloatCC::Equal, x, f64::INFINITY, inf, out);
        let nan = self.kd(f64::NAN);
        let out = self.replace_at(FloatCC::LessThan, x, 0.0, nan, out);
        let ninf = self.kd(f64::NEG_INFINITY);
        let out = self.replace_at(FloatCC::Equal, x, 0.0, ninf, out);
        let isnan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        self.pick(isnan, x, out)
    }

    /// `x <cc> k ? then : other`, lane-wise on f64x2.
    fn replace_at(&mut self, cc: FloatCC, x: Value, k: f64, then: Value, other: Value) -> Value {
        let kv = self.kd(k);
        let m = self.b.ins().fcmp(cc, x, kv);
        self.pick(m, then, other)
    }

    /// 1 / (1 + e^−x), as the evaluator writes it.
    fn sigmoid_d(&mut self, x: Value, full: bool) -> Value {
        let one = self.kd(1.0);
        let nx = self.b.ins().fneg(x);
        let e = self.exp_d(nx, full);
        let d = self.b.ins().fadd(one, e);
        self.b.ins().fdiv(one, d)
    }

    /// x / (1 + e^−x), as the evaluator writes it.
    fn silu_d(&mut self, x: Value, full: bool) -> Value {
        let one = self.kd(1.0);
        let nx = self.b.ins().fneg(x);
        let e = self.exp_d(nx, full);
        let d = self.b.ins().fadd(one, e);
        self.b.ins().fdiv(x, d)
    }

    /// gelu's tanh form as `x / (1 + e^(−2u))`, u = √(2/π)·(x + 0.044715·x³): the evaluator's
    /// operations in its order (`tdsl_loop::scalar::gelu_tanh`), so both round u alike.
    fn gelu_d(&mut self, x: Value, full: bool) -> Value {
        let k = self.kd(0.044715);
        let kx = self.b.ins().fmul(k, x);
        let kx2 = self.b.ins().fmul(kx, x);
        let kx3 = self.b.ins().fmul(kx2, x);
        let inner = self.b.ins().fadd(x, kx3);
        let c = self.kd((2.0 / std::f64::consts::PI).sqrt());
        let u = self.b.ins().fmul(c, inner);
        let m2 = self.kd(-2.0);
        let a = self.b.ins().fmul(m2, u);
        let e = self.exp_d(a, full);
        let one = self.kd(1.0);
        let d = self.b.ins().fadd(one, e);
        self.b.ins().fdiv(x, d)
    }

    /// ln(1 + x) for f32 inputs: 1 + x is exact in f64 when |x| ≥ 2^-28, and below that
    /// ln(1 + x) rounds to x in f32.
    fn log1p_d(&mut self, x: Value, full: bool) -> Value {
        let one = self.kd(1.0);
        let u = self.b.ins().fadd(one, x);
        let l = self.log_d(u, full);
        let a = self.b.ins().fabs(x);
        let small = self.kd(1.0 / 268_435_456.0);
        let m = self.b.ins().fcmp(FloatCC::LessThan, a, small);
        self.pick(m, x, l)
    }

    /// e^x − 1 for f32 results: its series to x³ below |x| < 2^-20.
    fn expm1_d(&mut self, x: Value, full: bool) -> Value {
        let e = self.exp_d(x, full);
        let one = self.kd(1.0);
        let big = self.b.ins().fsub(e, one);
        // x + x²/2 + x³/6: without the cubic term, x = 2^-23 would land on an f32 midpoint.
        let p = self.horner(x, &[1.0 / 6.0, 0.5]);
        let px = self.b.ins().fmul(p, x);
        let sm = self.mul_add(px, x, x);
        let a = self.b.ins().fabs(x);
        let small = self.kd(1.0 / 1_048_576.0);
        let m = self.b.ins().fcmp(FloatCC::LessThan, a, small);
        let r = self.pick(m, sm, big);
        // expm1(−0) = −0, which x + x²/2 loses.
        self.replace_at(FloatCC::Equal, x, 0.0, x, r)
    }

    /// max(x, 0) + ln(1 + e^−|x|), with ln(1 + y) as ln(u)·y/(u − 1), u = 1 + y (exact when u
    /// rounds to 1: then it is y).
    fn softplus_d(&mut self, x: Value, full: bool) -> Value {
        let a = self.b.ins().fabs(x);
        let na = self.b.ins().fneg(a);
        let y = self.exp_d(na, full);
        let one = self.kd(1.0);
        let u = self.b.ins().fadd(one, y);
        let lu = self.log_d(u, full);
        let um1 = self.b.ins().fsub(u, one);
        let q = self.b.ins().fdiv(y, um1);
        let l = self.b.ins().fmul(lu, q);
        let m = self.b.ins().fcmp(FloatCC::Equal, u, one);
        let l = self.pick(m, y, l);
        let zero = self.kd(0.0);
        let pos = self.b.ins().fmax(x, zero);
        self.b.ins().fadd(pos, l)
    }

    /// erf(a) and erfc(a) for a = |z| ≥ 0 (or NaN), to about 1e-12 relative: below 1 the
    /// Taylor series of erf in a² to degree 13 (then erfc = 1 − erf ≥ 0.157); from 1 to 11
    /// erfc(a) = e^(−a²)·t·P(u) with t = 1/(1 + a/2), u linear in t and P a degree-12 fit of
    /// erfcx(a)/t (relative error 7e-13); above 11, erfc is 0 (below every f32 result).
    fn erf_parts(&mut self, a: Value) -> (Value, Value) {
        let one = self.kd(1.0);
        let a2 = self.b.ins().fmul(a, a);
        let q = self.estrin(a2, &ERF_SMALL);
        let e_small = self.b.ins().fmul(a, q);
        let c_small = self.b.ins().fsub(one, e_small);
        let half = self.kd(0.5);
        let d = self.mul_add(a, half, one);
        let t = self.b.ins().fdiv(one, d);
        let k1 = self.kd(3.9);
        let k0 = self.kd(-1.6);
        let u = self.mul_add(t, k1, k0);
        let pu = self.estrin(u, &ERFC_P);
        let na2 = self.b.ins().fneg(a2);
        let g = self.exp_d(na2, false);
        let c_big = self.b.ins().fmul(g, t);
        let c_big = self.b.ins().fmul(c_big, pu);
        let zero = self.kd(0.0);
        let c_big = self.replace_at(FloatCC::GreaterThan, a, 11.0, zero, c_big);
        let e_big = self.b.ins().fsub(one, c_big);
        let lim = self.kd(1.0);
        let small = self.b.ins().fcmp(FloatCC::LessThan, a, lim);
        let e = self.pick(small, e_small, e_big);
        let c = self.pick(small, c_small, c_big);
        (e, c)
    }

    /// erf for f32 results (`erf_parts` with the sign of z).
    fn erf_d(&mut self, z: Value, _full: bool) -> Value {
        let a = self.b.ins().fabs(z);
        let (e, _) = self.erf_parts(a);
        self.with_sign_of(e, z)
    }

    /// The exact gelu for f32 results: 0.5·x·erfc(−x/√2), as the evaluator writes it, with
    /// erfc(z) = 2 − erfc(|z|) for z < 0.
    fn gelu_erf_d(&mut self, x: Value, _full: bool) -> Value {
        let nx = self.b.ins().fneg(x);
        let r2 = self.kd(std::f64::consts::SQRT_2);
        let z = self.b.ins().fdiv(nx, r2);
        let a = self.b.ins().fabs(z);
        let (_, c) = self.erf_parts(a);
        let two = self.kd(2.0);
        let flipped = self.b.ins().fsub(two, c);
        let c = self.replace_at(FloatCC::LessThan, z, 0.0, flipped, c);
        let half = self.kd(0.5);
        let hx = self.b.ins().fmul(half, x);
        self.b.ins().fmul(hx, c)
    }

    /// `v` (non-negative or NaN) with the sign bit of `s`.
    fn with_sign_of(&mut self, v: Value, s: Value) -> Value {
        let sign = self.ki(i64::MIN);
        let si = self.bitcast(types::I64X2, s);
        let sb = self.b.ins().band(si, sign);
        let vi = self.bitcast(types::I64X2, v);
        let vi = self.b.ins().bor(vi, sb);
        self.bitcast(types::F64X2, vi)
    }

    // ---- f32x4 -------------------------------------------------------------------------------

    /// 1/(1 + e) for x ≥ 0 and e/(1 + e) below, e = e^−|x|: tiny results (subnormal for
    /// x < −87) stay instead of overflowing e^−x.
    fn sigmoid_f32x4(&mut self, x: Value) -> Value {
        let ty = types::F32X4;
        let ax = self.b.ins().fabs(x);
        let nax = self.b.ins().fneg(ax);
        let e = self.exp_f32x4(nax);
        let one = self.fconst(ty, 1.0);
        let zero = self.fconst(ty, 0.0);
        let d = self.b.ins().fadd(one, e);
        let neg = self.b.ins().fcmp(FloatCC::LessThan, x, zero);
        let neg = self.bitcast(ty, neg);
        let num = self.b.ins().bitselect(neg, e, one);
        self.b.ins().fdiv(num, d)
    }

    /// tanh on four f32 lanes, without leaving f32: below 0.625 in magnitude Cephes' `tanhf`
    /// polynomial x + x·z·P(z), z = x² (no cancellation near 0; tiny x comes back unchanged); above, 1 − 2/(e^(2|x|) + 1) with the native exp and x's sign, where the
    /// result is at least 0.55 so the subtraction loses nothing. NaN stays NaN, ±inf gives ±1.
    fn tanh_f32x4(&mut self, x: Value) -> Value {
        let ty = types::F32X4;
        let a = self.b.ins().fabs(x);
        let twoa = self.b.ins().fadd(a, a);
        let e = self.exp_f32x4(twoa);
        let one = self.fconst(ty, 1.0);
        let two = self.fconst(ty, 2.0);
        let d = self.b.ins().fadd(e, one);
        let q = self.b.ins().fdiv(two, d);
        let big = self.b.ins().fsub(one, q);
        let z = self.b.ins().fmul(a, a);
        let mut p = self.fconst(ty, TANHF_P[0]);
        for &k in &TANHF_P[1..] {
            let kk = self.fconst(ty, k);
            p = self.mul_add(p, z, kk);
        }
        let az = self.b.ins().fmul(a, z);
        let small = self.mul_add(az, p, a);
        let lim = self.fconst(ty, 0.625);
        let m = self.b.ins().fcmp(FloatCC::LessThan, a, lim);
        let m = self.bitcast(ty, m);
        let r = self.b.ins().bitselect(m, small, big);
        // tanh is odd: x's sign on |tanh x| (so −0 stays −0).
        let xi = self.bitcast(types::I32X4, x);
        let sign = self.band_c(xi, 0x8000_0000);
        let ri = self.bitcast(types::I32X4, r);
        let ri = self.b.ins().bor(ri, sign);
        self.bitcast(ty, ri)
    }

    /// ln x on four f32 lanes (Cephes `logf`: x = 2^e·m with m in [√2/2, √2), ln(1 + f) by a
    /// degree-9 polynomial, e·ln 2 added in two parts). Subnormals are scaled by 2^23 first;
    /// ln 0 = −inf, negative and NaN give NaN, ln +inf = +inf.
    fn log_f32x4(&mut self, x: Value) -> Value {
        let ty = types::F32X4;
        let ity = types::I32X4;
        let tiny_k = self.fconst(ty, f32::MIN_POSITIVE as f64);
        let tiny = self.b.ins().fcmp(FloatCC::LessThan, x, tiny_k);
        let tinym = self.bitcast(ty, tiny);
        let scale = self.fconst(ty, 8_388_608.0);
        let xs = self.b.ins().fmul(x, scale);
        let xs = self.b.ins().bitselect(tinym, xs, x);
        let m23 = self.fconst(ty, -23.0);
        let zero = self.fconst(ty, 0.0);
        let kadj = self.b.ins().bitselect(tinym, m23, zero);
        let bits = self.bitcast(ity, xs);
        // m in [0.5, 1): the exponent field set to 126; e = field − 126.
        let e = self.shr(bits, 23);
        let mb = self.band_c(bits, 0x007f_ffff);
        let half_bits = self.ic(ity, 0x3f00_0000);
        let mb = self.b.ins().bor(mb, half_bits);
        let m = self.bitcast(ty, mb);
        let e = self.b.ins().fcvt_from_sint(ty, e);
        let bias = self.fconst(ty, -126.0);
        let e = self.b.ins().fadd(e, bias);
        let e = self.b.ins().fadd(e, kadj);
        // m < √2/2: e − 1 and f = 2m − 1, else f = m − 1.
        let sqrthf = self.fconst(ty, std::f64::consts::FRAC_1_SQRT_2);
        let lowm = self.b.ins().fcmp(FloatCC::LessThan, m, sqrthf);
        let lowm = self.bitcast(ty, lowm);
        let one = self.fconst(ty, 1.0);
        let m2 = self.b.ins().fadd(m, m);
        let mm = self.b.ins().bitselect(lowm, m2, m);
        let f = self.b.ins().fsub(mm, one);
        let e1 = self.b.ins().fsub(e, one);
        let e = self.b.ins().bitselect(lowm, e1, e);
        let z = self.b.ins().fmul(f, f);
        let mut p = self.fconst(ty, LOGF_P[0]);
        for &k in &LOGF_P[1..] {
            let kk = self.fconst(ty, k);
            p = self.mul_add(p, f, kk);
        }
        let fz = self.b.ins().fmul(f, z);
        let y = self.b.ins().fmul(fz, p);
        let c2 = self.fconst(ty, -2.121_944_40e-4);
        let y = self.mul_add(e, c2, y);
        let mh = self.fconst(ty, -0.5);
        let y = self.mul_add(z, mh, y);
        let r = self.b.ins().fadd(f, y);
        let c1 = self.fconst(ty, 0.693_359_375);
        let r = self.mul_add(e, c1, r);
        // Specials, last one wins: +inf, negatives (NaN), zeros (−inf), NaN itself.
        let inf = self.fconst(ty, f64::INFINITY);
        let r = self.replace_at_f32(FloatCC::Equal, x, f64::INFINITY, inf, r);
        let nan = self.fconst(ty, f64::NAN);
        let r = self.replace_at_f32(FloatCC::LessThan, x, 0.0, nan, r);
        let ninf = self.fconst(ty, f64::NEG_INFINITY);
        let r = self.replace_at_f32(FloatCC::Equal, x, 0.0, ninf, r);
        let isnan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        let isnan = self.bitcast(ty, isnan);
        self.b.ins().bitselect(isnan, x, r)
    }

    fn replace_at_f32(
        &mut self,
        cc: FloatCC,
        x: Value,
        k: f64,
        then: Value,
        other: Value,
    ) -> Value {
        let ty = types::F32X4;
        let kv = self.fconst(ty, k);
        let m = self.b.ins().fcmp(cc, x, kv);
        let m = self.bitcast(ty, m);
        self.b.ins().bitselect(m, then, other)
    }

    /// sin or cos: the f64 reduction by π/2 (three-part Cody–Waite, exact products for
    /// |x| ≤ 2^18) and fdlibm's kernels; lanes beyond 2^18 (and ±inf) take the scalar helper.
    fn sin_cos_f32x4(&mut self, op: UnOp, x: Value) -> Result<Value, CodegenError> {
        let cos = op == UnOp::Cos;
        let (lo, hi) = self.widen(x);
        let lo = self.sin_cos_d(lo, cos);
        let hi = self.sin_cos_d(hi, cos);
        let fast = self.narrow(lo, hi);
        let ax = self.b.ins().fabs(x);
        let lim = self.fconst(types::F32X4, 262_144.0);
        let far = self.b.ins().fcmp(FloatCC::GreaterThan, ax, lim);
        let name =
            helpers::unary_helper(op, false).ok_or_else(|| bad(format!("no helper for {op:?}")))?;
        self.guarded(far, fast, name, &[x])
    }

    fn sin_cos_d(&mut self, x: Value, cos: bool) -> Value {
        let two_over_pi = self.kd(std::f64::consts::FRAC_2_PI);
        let t = self.b.ins().fmul(x, two_over_pi);
        let (n, z) = self.round_to_int(t);
        let nz = self.b.ins().fneg(z);
        let mut r = x;
        for part in PIO2_PARTS {
            let pv = self.kd(part);
            r = self.mul_add(nz, pv, r);
        }
        let z2 = self.b.ins().fmul(r, r);
        // sin r = r + r³·S(r²)
        let sp = self.horner(z2, &SIN_P);
        let r3 = self.b.ins().fmul(z2, r);
        let sin = self.mul_add(r3, sp, r);
        // cos r = 1 − r²/2 + r⁴·C(r²)
        let cp = self.horner(z2, &COS_P);
        let z4 = self.b.ins().fmul(z2, z2);
        let mhalf = self.kd(-0.5);
        let one = self.kd(1.0);
        let c = self.mul_add(mhalf, z2, one);
        let cos_r = self.mul_add(z4, cp, c);
        // Quadrant q = n mod 4 (cos x = sin(x + π/2): q + 1). sin x: q=0 sin r, 1 cos r,
        // 2 −sin r, 3 −cos r.
        let q = if cos {
            let one_i = self.ki(1);
            self.b.ins().iadd(n, one_i)
        } else {
            n
        };
        let one_i = self.ki(1);
        let two_i = self.ki(2);
        let b0 = self.b.ins().band(q, one_i);
        let odd = self.b.ins().icmp(IntCC::Equal, b0, one_i);
        let odd = self.bitcast(types::F64X2, odd);
        let v = self.b.ins().bitselect(odd, cos_r, sin);
        let b1 = self.b.ins().band(q, two_i);
        let sh = self.b.ins().iconst(types::I32, 62);
        let signbit = self.b.ins().ishl(b1, sh);
        let vi = self.bitcast(types::I64X2, v);
        let vi = self.b.ins().bxor(vi, signbit);
        self.bitcast(types::F64X2, vi)
    }

    /// a^b in f32: e^(b·ln|a|) in f64, negated for a negative base and an odd integer
    /// exponent. Lanes with a zero, infinite or NaN base, a non-finite exponent or a negative
    /// base with a non-integer exponent take the scalar helper.
    pub(super) fn pow_f32x4(&mut self, a: Value, b: Value) -> Result<Value, CodegenError> {
        let (alo, ahi) = self.widen(a);
        let (blo, bhi) = self.widen(b);
        let lo = self.pow_d(alo, blo);
        let hi = self.pow_d(ahi, bhi);
        let fast = self.narrow(lo, hi);
        let ty = types::F32X4;
        let aa = self.b.ins().fabs(a);
        let ab = self.b.ins().fabs(b);
        let zero = self.fconst(ty, 0.0);
        let inf = self.fconst(ty, f32::INFINITY as f64);
        // NaN compares false, so "not (0 < |a| < inf and |b| < inf)" catches it.
        let a_pos = self.b.ins().fcmp(FloatCC::GreaterThan, aa, zero);
        let a_fin = self.b.ins().fcmp(FloatCC::LessThan, aa, inf);
        let b_fin = self.b.ins().fcmp(FloatCC::LessThan, ab, inf);
        let ok = self.b.ins().band(a_pos, a_fin);
        let ok = self.b.ins().band(ok, b_fin);
        // A negative base needs an integer exponent.
        let a_neg = self.b.ins().fcmp(FloatCC::LessThan, a, zero);
        let bn = self.b.ins().nearest(b);
        let b_int = self.b.ins().fcmp(FloatCC::Equal, bn, b);
        let neg_ok = self.b.ins().bnot(a_neg);
        let neg_ok = self.b.ins().bor(neg_ok, b_int);
        let ok = self.b.ins().band(ok, neg_ok);
        let bad = self.b.ins().bnot(ok);
        self.guarded(bad, fast, helpers::POW.0, &[a, b])
    }

    fn pow_d(&mut self, a: Value, b: Value) -> Value {
        let aa = self.b.ins().fabs(a);
        let l = self.log_d(aa, false);
        let t = self.b.ins().fmul(b, l);
        let e = self.exp_d(t, false);
        // Odd integer exponent: b/2 is not an integer. Its sign goes onto the result when the
        // base is negative (the sign bit of a).
        let half = self.kd(0.5);
        let hb = self.b.ins().fmul(b, half);
        let hbn = self.b.ins().nearest(hb);
        let odd = self.b.ins().fcmp(FloatCC::NotEqual, hbn, hb);
        let oddm = self.bitcast(types::I64X2, odd);
        let ai = self.bitcast(types::I64X2, a);
        let sign = self.ki(i64::MIN);
        let s = self.b.ins().band(ai, sign);
        let s = self.b.ins().band(s, oddm);
        let ei = self.bitcast(types::I64X2, e);
        let ei = self.b.ins().bor(ei, s);
        self.bitcast(types::F64X2, ei)
    }

    /// `x > k ? k : x` (or `<` with `below`), lane-wise; NaN lanes stay NaN.
    fn clamp_lanes(&mut self, x: Value, k: f64, below: bool) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let kv = self.fconst(ty, k);
        let cc = if below {
            FloatCC::LessThan
        } else {
            FloatCC::GreaterThan
        };
        self.replace_if(cc, x, k, kv)
    }

    /// e^x on four f32 lanes without a call (Cephes `expf`: Cody–Waite range reduction and a
    /// degree-6 polynomial, within 2 ulp). NaN stays NaN, overflow gives +inf and underflow 0 or
    /// a subnormal: the scale 2^n is applied in two halves so that both stay normal.
    pub(super) fn exp_f32x4(&mut self, x: Value) -> Value {
        let ty = types::F32X4;
        let x = self.clamp_lanes(x, 89.0, false);
        let x = self.clamp_lanes(x, -104.0, true);
        // n = round(x·log2 e): adding 1.5·2^23 rounds to an integer (nearest even), which then
        // sits in the low mantissa bits.
        let log2e = self.fconst(ty, std::f64::consts::LOG2_E);
        let magic_i = self.ic(types::I32X4, 0x4b40_0000);
        let magic = self.bitcast(ty, magic_i);
        let t = self.mul_add(x, log2e, magic);
        let z = self.b.ins().fsub(t, magic);
        let ti = self.bitcast(types::I32X4, t);
        let n = self.b.ins().isub(ti, magic_i);
        // r = x − n·ln 2, with ln 2 split so that n·C1 is exact.
        let c1 = self.fconst(ty, -0.693359375);
        let c2 = self.fconst(ty, 2.12194440e-4);
        let r = self.mul_add(z, c1, x);
        let r = self.mul_add(z, c2, r);
        let mut p = self.fconst(ty, EXPF_P[0]);
        for &k in &EXPF_P[1..] {
            let kk = self.fconst(ty, k);
            p = self.mul_add(p, r, kk);
        }
        let r2 = self.b.ins().fmul(r, r);
        let p = self.mul_add(p, r2, r);
        let one = self.fconst(ty, 1.0);
        let p = self.b.ins().fadd(p, one);
        // 2^n = 2^n1 · 2^n2 with n1 = n >> 1 and n2 = n − n1, both in the normal range.
        let one_i = self.b.ins().iconst(types::I32, 1);
        let n1 = self.b.ins().sshr(n, one_i);
        let n2 = self.b.ins().isub(n, n1);
        let mut out = p;
        for ni in [n1, n2] {
            let biased = self.add_c(ni, 127);
            let bits = self.shl(biased, 23);
            let scale = self.bitcast(ty, bits);
            out = self.b.ins().fmul(out, scale);
        }
        out
    }
}
