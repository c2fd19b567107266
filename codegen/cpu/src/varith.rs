//! Arithmetic over chunks in mixed precision, compiled ahead of time for the widest vectors the
//! CPU has.
//!
//! A chunked vector loop (`lower/chunked.rs`) runs its statements over 512 iterations at a
//! time. Where every statement is arithmetic on unit-stride loads and loop invariants, the
//! statements need no 128-bit Cranelift loop: `lower/wide.rs` turns each into a few passes of
//! [`tdsl_varith_f32`] over the chunk, 16 or 8 lanes at a time, each pass one operation whose
//! operands are f32, f16 or bf16 arrays (widened as they are read) or one scalar, and whose
//! result is stored as f32 (optionally rounded to f16 or bf16 first, a `cast` inside an f32
//! expression) or narrowed into an f16 or bf16 array. So a bf16 `cast(x * r, bf16) * w` is two
//! passes, where the 128-bit loop widened, multiplied, rounded and narrowed four values at a
//! time.
//!
//! Every operation is the IEEE operation the inline code does (`Lower::binary`,
//! `Lower::unary`), with no contraction into FMA: results are bit for bit the same, NaN
//! payloads aside. `max` and `min` propagate NaN and order −0 below +0, as Cranelift's `fmax`
//! and `fmin` and the evaluator's `scalar::max`; the roundings to f16 and bf16 are those of
//! `vmath.rs` (nearest even; a NaN stays NaN, made quiet).

use crate::vmath::{width, Width};

/// The symbol generated code calls (see [`tdsl_varith_f32`]).
pub(crate) const SYMBOL: &str = "tdsl_varith_f32";

/// The symbols this module registers with the JIT.
pub(crate) fn symbols() -> [(&'static str, *const u8); 1] {
    [(SYMBOL, tdsl_varith_f32 as *const u8)]
}

/// The operations, by their number in bits 0..8 of a code. The unary ones read only `a`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum AOp {
    Add = 0,
    Sub = 1,
    Mul = 2,
    Div = 3,
    Max = 4,
    Min = 5,
    Neg = 6,
    Abs = 7,
    Sqrt = 8,
    /// `1 / sqrt(a)`, two rounded operations, as the inline code.
    Rsqrt = 9,
    /// `a` as it is (widened, rounded or narrowed only by its kinds).
    Copy = 10,
}

/// Where an operand comes from: an array of f32, f16 or bf16 values (widened exactly as they
/// are read), or the call's scalar `k`. Bits 8..10 (`a`) and 10..12 (`b`) of a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Src {
    F32 = 0,
    F16 = 1,
    Bf16 = 2,
    Scalar = 3,
}

/// How a result is stored (bits 12..15 of a code): as f32; as f32 rounded to the nearest f16
/// or bf16; or narrowed into an f16 or bf16 array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Dst {
    F32 = 0,
    RoundF16 = 1,
    RoundBf16 = 2,
    F16 = 3,
    Bf16 = 4,
}

/// The code of one pass.
pub(crate) fn code(op: AOp, a: Src, b: Src, d: Dst) -> u32 {
    op as u32 | (a as u32) << 8 | (b as u32) << 10 | (d as u32) << 12
}

/// Bytes per element of an operand (0 for the scalar: its pointer does not move).
fn src_size(s: u32) -> usize {
    [4, 2, 2, 0][s as usize & 3]
}

/// Bytes per element of a result.
fn dst_size(d: u32) -> usize {
    if d >= Dst::F16 as u32 {
        2
    } else {
        4
    }
}

type Kernel = unsafe fn(u32, *const u8, *const u8, *mut u8, usize, f32);

fn kernel() -> Option<Kernel> {
    match width()? {
        #[cfg(target_arch = "x86_64")]
        Width::Avx512 => Some(x86::avx512 as Kernel),
        #[cfg(target_arch = "x86_64")]
        Width::Avx2 => Some(x86::avx2 as Kernel),
        #[cfg(not(target_arch = "x86_64"))]
        _ => None,
    }
}

/// `y[i] = op(a[i], b[i])` for `i` in `0..n`, as `code` says (see [`code`]); a scalar operand
/// is `k`. Registered with the JIT under [`SYMBOL`]; generated code calls it only when
/// `vmath::available` said so (the same CPUs).
///
/// # Safety
/// `a` and `b` must be valid for reads of `n` elements of their kinds (or anything, for a
/// scalar operand, and for `b` of a unary operation), `y` for writes of `n` results. `y` may be
/// `a` or `b` (the same kind, in place) but must not otherwise overlap them.
pub(crate) unsafe extern "C" fn tdsl_varith_f32(
    code: u32,
    a: *const u8,
    b: *const u8,
    y: *mut u8,
    n: u64,
    k: f32,
) {
    if let Some(f) = kernel() {
        // SAFETY: the caller's contract, and `kernel` chose a variant this CPU runs.
        unsafe { f(code, a, b, y, n as usize, k) }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{dst_size, src_size, AOp, Src};

    /// One vector of f32 lanes and the operations on it, for each width.
    trait Lanes: Copy {
        const W: usize;
        unsafe fn splat(k: f32) -> Self;
        /// `W` operands of kind `s` from `p` (`k` for the scalar).
        unsafe fn load(s: u32, p: *const u8, k: Self) -> Self;
        /// The result stored as kind `d` at `p`.
        unsafe fn store(self, d: u32, p: *mut u8);
        unsafe fn op(op: u32, a: Self, b: Self) -> Self;
    }

    /// The pass over `n` elements, block by block; the last partial block runs on padded
    /// copies, so the loop has one shape. The operation and the operand and result kinds are
    /// constants of each instance: a `match` on them per block cost more than the operation.
    #[inline(always)]
    unsafe fn run<V: Lanes, const SA: u32, const SB: u32, const D: u32, const OP: u32>(
        a: *const u8,
        b: *const u8,
        y: *mut u8,
        n: usize,
        k: f32,
    ) {
        let unary = OP >= AOp::Neg as u32;
        let (za, zb, zy) = (
            src_size(SA),
            if unary { 0 } else { src_size(SB) },
            dst_size(D),
        );
        // SAFETY (the whole body): the caller's contract bounds `a`, `b` and `y` by `n`
        // elements; the padded copies hold one block.
        unsafe {
            let kv = V::splat(k);
            let block = |pa: *const u8, pb: *const u8, py: *mut u8| {
                let va = V::load(SA, pa, kv);
                let vb = if unary { va } else { V::load(SB, pb, kv) };
                V::op(OP, va, vb).store(D, py);
            };
            let full = n / V::W * V::W;
            let mut i = 0;
            while i < full {
                block(a.add(i * za), b.add(i * zb), y.add(i * zy));
                i += V::W;
            }
            if full < n {
                let rest = n - full;
                let (mut ta, mut tb, mut ty) = ([0u8; 64], [0u8; 64], [0u8; 64]);
                std::ptr::copy_nonoverlapping(a.add(full * za), ta.as_mut_ptr(), rest * za);
                std::ptr::copy_nonoverlapping(b.add(full * zb), tb.as_mut_ptr(), rest * zb);
                block(ta.as_ptr(), tb.as_ptr(), ty.as_mut_ptr());
                std::ptr::copy_nonoverlapping(ty.as_ptr(), y.add(full * zy), rest * zy);
            }
        }
    }

    /// [`run`] for operation `op`: the binary ones for every kind of `b`, the unary ones only
    /// for the kind that stands for none.
    #[inline(always)]
    unsafe fn pass<V: Lanes, const SA: u32, const SB: u32, const D: u32>(
        op: u32,
        a: *const u8,
        b: *const u8,
        y: *mut u8,
        n: usize,
        k: f32,
    ) {
        macro_rules! ops {
            ($($o:literal)*) => {
                match op {
                    $($o => run::<V, SA, SB, D, $o>(a, b, y, n, k),)*
                    _ => {}
                }
            };
        }
        // SAFETY: the caller's contract.
        unsafe {
            if SB == Src::Scalar as u32 {
                ops!(0 1 2 3 4 5 6 7 8 9 10)
            } else {
                ops!(0 1 2 3 4 5)
            }
        }
    }

    /// [`pass`] for the kinds of `code`: one instance per kind of `a`, `b` and result.
    #[inline(always)]
    unsafe fn kinds<V: Lanes>(code: u32, a: *const u8, b: *const u8, y: *mut u8, n: usize, k: f32) {
        let op = code & 0xff;
        // A unary operation reads no `b`: its kind is moot (the scalar's, which reads nothing).
        let sb = if op >= AOp::Neg as u32 {
            Src::Scalar as u32
        } else {
            code >> 10 & 3
        };
        macro_rules! by_d {
            ($sa:literal, $sb:literal) => {
                match code >> 12 & 7 {
                    0 => pass::<V, $sa, $sb, 0>(op, a, b, y, n, k),
                    1 => pass::<V, $sa, $sb, 1>(op, a, b, y, n, k),
                    2 => pass::<V, $sa, $sb, 2>(op, a, b, y, n, k),
                    3 => pass::<V, $sa, $sb, 3>(op, a, b, y, n, k),
                    _ => pass::<V, $sa, $sb, 4>(op, a, b, y, n, k),
                }
            };
        }
        macro_rules! by_b {
            ($sa:literal) => {
                match sb {
                    0 => by_d!($sa, 0),
                    1 => by_d!($sa, 1),
                    2 => by_d!($sa, 2),
                    _ => by_d!($sa, 3),
                }
            };
        }
        // SAFETY: the caller's contract.
        unsafe {
            match code >> 8 & 3 {
                0 => by_b!(0),
                1 => by_b!(1),
                2 => by_b!(2),
                _ => by_b!(3),
            }
        }
    }

    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn avx512(
        code: u32,
        a: *const u8,
        b: *const u8,
        y: *mut u8,
        n: usize,
        k: f32,
    ) {
        // SAFETY: the caller's contract.
        unsafe { kinds::<Z>(code, a, b, y, n, k) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn avx2(code: u32, a: *const u8, b: *const u8, y: *mut u8, n: usize, k: f32) {
        // SAFETY: the caller's contract.
        unsafe { kinds::<Y>(code, a, b, y, n, k) }
    }

    /// 16 lanes (AVX-512F).
    #[derive(Clone, Copy)]
    struct Z(__m512);

    /// 8 lanes (AVX2).
    #[derive(Clone, Copy)]
    struct Y(__m256);

    impl Lanes for Z {
        const W: usize = 16;

        #[inline]
        #[target_feature(enable = "avx512f,avx2,fma,f16c")]
        unsafe fn splat(k: f32) -> Z {
            Z(_mm512_set1_ps(k))
        }

        #[inline]
        #[target_feature(enable = "avx512f,avx2,fma,f16c")]
        unsafe fn load(s: u32, p: *const u8, k: Z) -> Z {
            // SAFETY: the caller's pointer holds 16 elements of kind `s`.
            unsafe {
                Z(match s {
                    0 => _mm512_loadu_ps(p as *const f32),
                    1 => _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)),
                    2 => {
                        let h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p as *const __m256i));
                        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(h))
                    }
                    _ => k.0,
                })
            }
        }

        #[inline]
        #[target_feature(enable = "avx512f,avx2,fma,f16c")]
        unsafe fn store(self, d: u32, p: *mut u8) {
            const R: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
            let v = self.0;
            // SAFETY: the caller's pointer has room for 16 results of kind `d`.
            unsafe {
                match d {
                    0 => _mm512_storeu_ps(p as *mut f32, v),
                    1 => _mm512_storeu_ps(p as *mut f32, _mm512_cvtph_ps(_mm512_cvtps_ph::<R>(v))),
                    2 => {
                        let r = _mm512_slli_epi32::<16>(bf16_bits_z(v));
                        _mm512_storeu_ps(p as *mut f32, _mm512_castsi512_ps(r))
                    }
                    3 => _mm256_storeu_si256(p as *mut __m256i, _mm512_cvtps_ph::<R>(v)),
                    _ => _mm256_storeu_si256(
                        p as *mut __m256i,
                        _mm512_cvtepi32_epi16(bf16_bits_z(v)),
                    ),
                }
            }
        }

        #[inline]
        #[target_feature(enable = "avx512f,avx2,fma,f16c")]
        unsafe fn op(op: u32, a: Z, b: Z) -> Z {
            let (a, b) = (a.0, b.0);
            let sign = _mm512_set1_epi32(i32::MIN);
            let bits = _mm512_castps_si512;
            Z(match op {
                0 => _mm512_add_ps(a, b),
                1 => _mm512_sub_ps(a, b),
                2 => _mm512_mul_ps(a, b),
                3 => _mm512_div_ps(a, b),
                4 | 5 => {
                    // `vmaxps` gives `b` for NaNs and for equal values (±0): equal values take
                    // the AND (max) or OR (min) of their bits, NaNs the sum (a NaN).
                    let (m, both) = if op == 4 {
                        (_mm512_max_ps(a, b), _mm512_and_si512(bits(a), bits(b)))
                    } else {
                        (_mm512_min_ps(a, b), _mm512_or_si512(bits(a), bits(b)))
                    };
                    let eq = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(a, b);
                    let m = _mm512_mask_blend_ps(eq, m, _mm512_castsi512_ps(both));
                    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, b);
                    _mm512_mask_blend_ps(nan, m, _mm512_add_ps(a, b))
                }
                6 => _mm512_castsi512_ps(_mm512_xor_si512(bits(a), sign)),
                7 => _mm512_castsi512_ps(_mm512_andnot_si512(sign, bits(a))),
                8 => _mm512_sqrt_ps(a),
                9 => _mm512_div_ps(_mm512_set1_ps(1.0), _mm512_sqrt_ps(a)),
                _ => a,
            })
        }
    }

    /// Each lane's bf16 bits (in its low half), rounded to nearest even; a NaN made quiet
    /// (as `vmath::bf16_bits`).
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    fn bf16_bits_z(v: __m512) -> __m512i {
        let f = _mm512_castps_si512(v);
        let hi = _mm512_srli_epi32::<16>(f);
        let lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
        let bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb);
        let r = _mm512_srli_epi32::<16>(_mm512_add_epi32(f, bias));
        let abs = _mm512_and_si512(f, _mm512_set1_epi32(0x7fff_ffff));
        let nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7f80_0000));
        _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)))
    }

    impl Lanes for Y {
        const W: usize = 8;

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn splat(k: f32) -> Y {
            Y(_mm256_set1_ps(k))
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn load(s: u32, p: *const u8, k: Y) -> Y {
            // SAFETY: the caller's pointer holds 8 elements of kind `s`.
            unsafe {
                Y(match s {
                    0 => _mm256_loadu_ps(p as *const f32),
                    1 => _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
                    2 => {
                        let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
                        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
                    }
                    _ => k.0,
                })
            }
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn store(self, d: u32, p: *mut u8) {
            const R: i32 = _MM_FROUND_TO_NEAREST_INT;
            let v = self.0;
            // SAFETY: the caller's pointer has room for 8 results of kind `d`.
            unsafe {
                match d {
                    0 => _mm256_storeu_ps(p as *mut f32, v),
                    1 => _mm256_storeu_ps(p as *mut f32, _mm256_cvtph_ps(_mm256_cvtps_ph::<R>(v))),
                    2 => {
                        let r = _mm256_slli_epi32::<16>(bf16_bits_y(v));
                        _mm256_storeu_ps(p as *mut f32, _mm256_castsi256_ps(r))
                    }
                    3 => _mm_storeu_si128(p as *mut __m128i, _mm256_cvtps_ph::<R>(v)),
                    _ => {
                        // The bits fit 16 bits, so the saturating pack keeps them.
                        let r = bf16_bits_y(v);
                        let lo = _mm256_castsi256_si128(r);
                        let hi = _mm256_extracti128_si256::<1>(r);
                        _mm_storeu_si128(p as *mut __m128i, _mm_packus_epi32(lo, hi))
                    }
                }
            }
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn op(op: u32, a: Y, b: Y) -> Y {
            let (a, b) = (a.0, b.0);
            let sign = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN));
            Y(match op {
                0 => _mm256_add_ps(a, b),
                1 => _mm256_sub_ps(a, b),
                2 => _mm256_mul_ps(a, b),
                3 => _mm256_div_ps(a, b),
                4 | 5 => {
                    // As in `Z::op`.
                    let (m, both) = if op == 4 {
                        (_mm256_max_ps(a, b), _mm256_and_ps(a, b))
                    } else {
                        (_mm256_min_ps(a, b), _mm256_or_ps(a, b))
                    };
                    let eq = _mm256_cmp_ps::<_CMP_EQ_OQ>(a, b);
                    let m = _mm256_blendv_ps(m, both, eq);
                    let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(a, b);
                    _mm256_blendv_ps(m, _mm256_add_ps(a, b), nan)
                }
                6 => _mm256_xor_ps(a, sign),
                7 => _mm256_andnot_ps(sign, a),
                8 => _mm256_sqrt_ps(a),
                9 => _mm256_div_ps(_mm256_set1_ps(1.0), _mm256_sqrt_ps(a)),
                _ => a,
            })
        }
    }

    /// [`bf16_bits_z`] 8 lanes wide.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn bf16_bits_y(v: __m256) -> __m256i {
        let f = _mm256_castps_si256(v);
        let hi = _mm256_srli_epi32::<16>(f);
        let lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
        let bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
        let r = _mm256_srli_epi32::<16>(_mm256_add_epi32(f, bias));
        let abs = _mm256_and_si256(f, _mm256_set1_epi32(0x7fff_ffff));
        let nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f80_0000));
        let quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
        _mm256_blendv_epi8(r, quiet, nan)
    }

    #[cfg(test)]
    pub(super) fn variants() -> Vec<(&'static str, super::Kernel)> {
        use std::arch::is_x86_feature_detected as has;
        let mut v: Vec<(&str, super::Kernel)> = Vec::new();
        if has!("avx512f") && has!("fma") && has!("f16c") {
            v.push(("avx512", avx512 as super::Kernel));
        }
        if has!("avx2") && has!("fma") && has!("f16c") {
            v.push(("avx2", avx2 as super::Kernel));
        }
        v
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use half::{bf16, f16};

    /// Operands around everything the operations treat apart: zeros of both signs, NaN,
    /// infinities, subnormals, f16 and bf16 rounding points, and spread-out bit patterns.
    fn values() -> Vec<f32> {
        let mut v = vec![
            0.0,
            -0.0,
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001),
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-40,
            -1e-40,
            1.0,
            -1.0,
            65504.0,
            65520.0,
            f32::from_bits(0x3f80_8000),
            f32::from_bits(0x3f81_8000),
            f32::from_bits(0x3f80_1000),
            f32::MAX,
        ];
        let mut b = 7u32;
        while v.len() < 1500 {
            b = b.wrapping_mul(2_654_435_761).wrapping_add(0x9e37_79b9);
            let x = f32::from_bits(b);
            v.push(if x.is_nan() { 3.5 } else { x });
        }
        v
    }

    fn reference(op: AOp, a: f32, b: f32) -> f32 {
        let (a64, b64) = (a as f64, b as f64);
        match op {
            AOp::Add => a + b,
            AOp::Sub => a - b,
            AOp::Mul => a * b,
            AOp::Div => a / b,
            AOp::Max => tdsl_loop::scalar::max(a64, b64) as f32,
            AOp::Min => tdsl_loop::scalar::min(a64, b64) as f32,
            AOp::Neg => -a,
            AOp::Abs => a.abs(),
            AOp::Sqrt => a.sqrt(),
            AOp::Rsqrt => 1.0 / a.sqrt(),
            AOp::Copy => a,
        }
    }

    /// The operand as the kernel reads it: its kind's value.
    fn read(s: Src, x: f32, k: f32) -> f32 {
        match s {
            Src::F32 => x,
            Src::F16 => f16::from_f32(x).to_f32(),
            Src::Bf16 => bf16::from_f32(x).to_f32(),
            Src::Scalar => k,
        }
    }

    /// The bytes of `xs` as an array of kind `s`.
    fn bytes(s: Src, xs: &[f32]) -> Vec<u8> {
        xs.iter()
            .flat_map(|&x| match s {
                Src::F32 => x.to_bits().to_le_bytes().to_vec(),
                Src::F16 => f16::from_f32(x).to_bits().to_le_bytes().to_vec(),
                Src::Bf16 => bf16::from_f32(x).to_bits().to_le_bytes().to_vec(),
                Src::Scalar => Vec::new(),
            })
            .collect()
    }

    /// Result `i` of an output array of kind `d`, as f32.
    fn result(d: Dst, y: &[u8], i: usize) -> f32 {
        match d {
            Dst::F32 | Dst::RoundF16 | Dst::RoundBf16 => {
                f32::from_le_bytes(y[4 * i..4 * i + 4].try_into().unwrap())
            }
            Dst::F16 => f16::from_bits(u16::from_le_bytes([y[2 * i], y[2 * i + 1]])).to_f32(),
            Dst::Bf16 => bf16::from_bits(u16::from_le_bytes([y[2 * i], y[2 * i + 1]])).to_f32(),
        }
    }

    /// The result `r` stored as kind `d` and read back.
    fn stored(d: Dst, r: f32) -> f32 {
        match d {
            Dst::F32 => r,
            Dst::RoundF16 | Dst::F16 => f16::from_f32(r).to_f32(),
            Dst::RoundBf16 | Dst::Bf16 => bf16::from_f32(r).to_f32(),
        }
    }

    /// Every operation, operand kind and result kind, for both widths this CPU runs, over
    /// lengths with and without a partial last block, against the scalar operations: bit for
    /// bit, a NaN for a NaN (of the same bits, where the operation moves bits).
    #[test]
    fn passes_match_the_scalar_operations_bit_for_bit() {
        use AOp::*;
        let xs = values();
        // `b` is `xs` rotated, so every value meets many others.
        let ys: Vec<f32> = xs
            .iter()
            .cycle()
            .skip(389)
            .take(xs.len())
            .copied()
            .collect();
        let k = -0.0f32;
        let srcs = [Src::F32, Src::F16, Src::Bf16, Src::Scalar];
        let dsts = [Dst::F32, Dst::RoundF16, Dst::RoundBf16, Dst::F16, Dst::Bf16];
        let ops = [Add, Sub, Mul, Div, Max, Min, Neg, Abs, Sqrt, Rsqrt, Copy];
        let variants = x86::variants();
        assert!(!variants.is_empty() || kernel().is_none());
        for (name, f) in variants {
            for &op in &ops {
                let bitwise = matches!(op, Neg | Abs | Copy);
                for &sa in &srcs {
                    let bsrcs: &[Src] = if op as u32 >= Neg as u32 {
                        &[Src::F32]
                    } else {
                        &srcs
                    };
                    for &sb in bsrcs {
                        for &d in &dsts {
                            for n in [xs.len(), 37, 16, 5, 0] {
                                let (a, b) = (bytes(sa, &xs[..n]), bytes(sb, &ys[..n]));
                                let mut y = vec![0xa5u8; n * dst_size(d as u32) + 8];
                                let c = code(op, sa, sb, d);
                                // SAFETY: `a`, `b` and `y` hold `n` elements of their kinds
                                // (and `y` 8 bytes more, which must stay as they are).
                                unsafe { f(c, a.as_ptr(), b.as_ptr(), y.as_mut_ptr(), n, k) };
                                let end = n * dst_size(d as u32);
                                assert!(
                                    y[end..].iter().all(|&x| x == 0xa5),
                                    "{op:?} wrote past {n}"
                                );
                                for i in 0..n {
                                    let (va, vb) = (read(sa, xs[i], k), read(sb, ys[i], k));
                                    let want = stored(d, reference(op, va, vb));
                                    let got = result(d, &y, i);
                                    // (The bitwise operations keep a NaN's payload too.)
                                    let nan = got.is_nan() && want.is_nan() && !bitwise;
                                    assert!(
                                        got.to_bits() == want.to_bits() || nan,
                                        "{op:?} {sa:?} {sb:?} -> {d:?} ({name}, n {n}) of {va:e}, {vb:e}: {got:e}, not {want:e}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// In place: the result replaces an f32 operand.
    #[test]
    fn a_pass_runs_in_place() {
        let xs = values();
        for (name, f) in x86::variants() {
            let mut y = bytes(Src::F32, &xs);
            let c = code(AOp::Mul, Src::F32, Src::Scalar, Dst::RoundBf16);
            // SAFETY: `y` holds `len` f32 values, read and written in place.
            unsafe { f(c, y.as_ptr(), y.as_ptr(), y.as_mut_ptr(), xs.len(), 3.0) };
            for (i, x) in xs.iter().enumerate() {
                let want = bf16::from_f32(x * 3.0).to_f32();
                let got = result(Dst::F32, &y, i);
                assert!(
                    got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(),
                    "{name}"
                );
            }
        }
    }
}
