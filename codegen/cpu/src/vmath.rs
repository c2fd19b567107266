//! Vector math over chunks, compiled ahead of time for the widest vectors the CPU has.
//!
//! Cranelift's x86 backend stops at 128-bit vectors, so an inline f32x4 `tanh` or an f32 `gelu`
//! evaluated on two f64x2 halves leaves most of an AVX-512 core idle. A vector loop whose body
//! holds one of the functions of [`VOp`] is instead lowered in chunks (`lower/chunked.rs`):
//! the argument of each such function is computed for a chunk of iterations into a stack
//! buffer (or read where it lies, when it is a plain f32 load), [`tdsl_vmath_f32`] evaluates
//! the function from there into the buffer (or straight into the destination of a plain map),
//! and the rest of the body reads the results. This file holds those evaluators: the same algorithms, constants
//! and operation order as the inline kernels of `lower/math.rs` (so results agree with them and
//! with the evaluator's definition to the same bounds), written once as scalar Rust and compiled
//! twice, for AVX-512F and for AVX2 + FMA, where LLVM vectorises them 16 and 8 lanes wide. The
//! variant is chosen at run time ([`available`]); a CPU without FMA keeps the inline kernels.
//!
//! - `exp`, `tanh`, `sigmoid`, `log`: native f32 (Cephes `expf` and `logf`; `tanh` and
//!   `sigmoid` on `expf`), as `exp_f32x4`, `tanh_f32x4`, `sigmoid_f32x4` and `log_f32x4`;
//! - `gelu`, `silu`, `erf`, `gelu_erf`, `sin`, `cos`: evaluated in f64 and rounded once, as
//!   `via_f64` with `gelu_d`, `silu_d`, `erf_d`, `gelu_erf_d` and `sin_cos_d` (the degree-9
//!   `exp` for f32 results; `sin` and `cos` beyond 2^18 from the evaluator's definition).

// The constants are written as fdlibm and Cephes publish them.
#![allow(clippy::excessive_precision)]

use std::sync::OnceLock;

use tdsl_loop::{ElemType, UnOp};

/// The functions [`tdsl_vmath_f32`] evaluates, by their number in its `op` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum VOp {
    Exp = 0,
    Tanh = 1,
    Sigmoid = 2,
    Gelu = 3,
    Silu = 4,
    Erf = 5,
    GeluErf = 6,
    Log = 7,
    Sin = 8,
    Cos = 9,
    /// f32 → f32, rounded to the nearest f16 (a `cast(x, f16)` inside an f32 expression).
    RoundF16 = 10,
    /// f32 → f32, rounded to the nearest bf16.
    RoundBf16 = 11,
    /// f16 bits (`src` is a `u16` array) → f32, exactly.
    WidenF16 = 12,
    /// f32 → f16 bits (`dst` is a `u16` array), to nearest even: a store to an f16 buffer.
    NarrowF16 = 13,
    /// f32 → bf16 bits (`dst` is a `u16` array), to nearest even.
    NarrowBf16 = 14,
    /// `x / k`, `k` the call's scalar argument (a row's sum, a norm): the same IEEE division
    /// as the inline code, 16 or 8 lanes at a time.
    DivBy = 15,
}

impl VOp {
    /// The chunked function for an f32 unary operation, if it has one.
    pub(crate) fn of(op: UnOp) -> Option<VOp> {
        Some(match op {
            UnOp::Exp => VOp::Exp,
            UnOp::Tanh => VOp::Tanh,
            UnOp::Sigmoid => VOp::Sigmoid,
            UnOp::Gelu => VOp::Gelu,
            UnOp::Silu => VOp::Silu,
            UnOp::Erf => VOp::Erf,
            UnOp::GeluErf => VOp::GeluErf,
            UnOp::Log => VOp::Log,
            UnOp::Sin => VOp::Sin,
            UnOp::Cos => VOp::Cos,
            _ => return None,
        })
    }

    /// The rounding of `cast(x, t)` for an f32 `x`, when `t` is a 16-bit float.
    pub(crate) fn round(t: ElemType) -> Option<VOp> {
        match t {
            ElemType::F16 => Some(VOp::RoundF16),
            ElemType::BF16 => Some(VOp::RoundBf16),
            _ => None,
        }
    }

    /// The conversion a store of f32 values into a `t` buffer makes, when `t` is a 16-bit
    /// float.
    pub(crate) fn narrow(t: ElemType) -> Option<VOp> {
        match t {
            ElemType::F16 => Some(VOp::NarrowF16),
            ElemType::BF16 => Some(VOp::NarrowBf16),
            _ => None,
        }
    }
}

/// The symbol generated code calls: `fn(op, src, dst, n)` writes `op(src[0..n])` to
/// `dst[0..n]`.
pub(crate) const SYMBOL: &str = "tdsl_vmath_f32";

/// The symbols this module registers with the JIT.
pub(crate) fn symbols() -> [(&'static str, *const u8); 1] {
    [(SYMBOL, tdsl_vmath_f32 as *const u8)]
}

type Kernel = unsafe fn(u32, *const f32, *mut f32, usize, f32);

/// The vector width the ahead-of-time kernels (here and in `varith.rs`) run at on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Width {
    /// AVX-512F (with AVX2, FMA and F16C): 16 f32 lanes.
    Avx512,
    /// AVX2 with FMA and F16C: 8 f32 lanes.
    Avx2,
}

/// The widest [`Width`] this CPU runs (within `TDSL_ISA`), chosen once; `None` without AVX2,
/// FMA and F16C.
pub(crate) fn width() -> Option<Width> {
    static W: OnceLock<Option<Width>> = OnceLock::new();
    *W.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            use crate::spmm::Isa;
            // (Both include FMA and F16C.)
            if Isa::Avx512.supported() {
                return Some(Width::Avx512);
            }
            if Isa::Avx2.supported() {
                return Some(Width::Avx2);
            }
        }
        None
    })
}

fn kernel() -> Option<Kernel> {
    match width()? {
        #[cfg(target_arch = "x86_64")]
        Width::Avx512 => Some(avx512 as Kernel),
        #[cfg(target_arch = "x86_64")]
        Width::Avx2 => Some(avx2 as Kernel),
        #[cfg(not(target_arch = "x86_64"))]
        _ => None,
    }
}

/// Whether this CPU runs the chunked evaluators (AVX-512F, or AVX2 with FMA and F16C), and they are not
/// turned off by `TDSL_VMATH=0` (which keeps the inline kernels, to compare the two).
pub(crate) fn available() -> bool {
    kernel().is_some() && std::env::var("TDSL_VMATH").map_or(true, |v| v != "0")
}

/// Writes `op(src[0..n])` to `dst[0..n]`, `op` a [`VOp`] number (`k` is the divisor of
/// [`VOp::DivBy`], unused by the others). Registered with the JIT under
/// [`SYMBOL`]; generated code calls it only when [`available`] said so.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `n` f32 values (`u16` for the source
/// of [`VOp::WidenF16`] and the destination of [`VOp::NarrowF16`] and [`VOp::NarrowBf16`]);
/// the two are the same pointer (in place, f32 to f32 only) or do not overlap.
pub(crate) unsafe extern "C" fn tdsl_vmath_f32(
    op: u32,
    src: *const f32,
    dst: *mut f32,
    n: u64,
    k: f32,
) {
    if let Some(f) = kernel() {
        // SAFETY: the caller's contract, and `kernel` chose a variant this CPU runs.
        unsafe { f(op, src, dst, n as usize, k) }
    }
}

/// `dst[i] = src[i]` rounded to f16 to nearest even, with the vector conversions when this CPU
/// has them (else one value at a time through `half`, the same result).
pub(crate) fn narrow_f16(src: &[f32], dst: &mut [half::f16]) {
    let n = src.len().min(dst.len());
    match kernel() {
        // SAFETY: `src` holds `n` f32 and `dst` `n` f16 (u16-sized), and they are different
        // allocations; `kernel` chose a variant this CPU runs.
        Some(k) => unsafe {
            k(
                VOp::NarrowF16 as u32,
                src.as_ptr(),
                dst.as_mut_ptr() as *mut f32,
                n,
                0.0,
            )
        },
        None => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = half::f16::from_f32(*s);
            }
        }
    }
}

/// [`narrow_f16`] to bf16.
pub(crate) fn narrow_bf16(src: &[f32], dst: &mut [half::bf16]) {
    let n = src.len().min(dst.len());
    match kernel() {
        // SAFETY: as in `narrow_f16`.
        Some(k) => unsafe {
            k(
                VOp::NarrowBf16 as u32,
                src.as_ptr(),
                dst.as_mut_ptr() as *mut f32,
                n,
                0.0,
            )
        },
        None => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = half::bf16::from_f32(*s);
            }
        }
    }
}

macro_rules! variant {
    ($name:ident, $features:literal, $f16:ident) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $name(op: u32, x: *const f32, y: *mut f32, n: usize, k: f32) {
            // SAFETY (every arm): the caller's contract on `x` and `n`.
            unsafe {
                match op {
                    0 => each(x, y, n, exp_f32),
                    1 => each(x, y, n, tanh_f32),
                    2 => each(x, y, n, sigmoid_f32),
                    3 => each(x, y, n, |v| gelu_d(v as f64) as f32),
                    4 => each(x, y, n, |v| silu_d(v as f64) as f32),
                    5 => each(x, y, n, |v| erf_d(v as f64) as f32),
                    6 => each(x, y, n, |v| gelu_erf_d(v as f64) as f32),
                    7 => each(x, y, n, log_f32),
                    8 => each_far(x, y, n, |v| sin_cos_d(v as f64, false) as f32, UnOp::Sin),
                    9 => each_far(x, y, n, |v| sin_cos_d(v as f64, true) as f32, UnOp::Cos),
                    10 | 12 | 13 | 15 => $f16(op, x, y, n, k),
                    11 => each(x, y, n, |v| f32::from_bits((bf16_bits(v) as u32) << 16)),
                    14 => {
                        let y = y as *mut u16;
                        for i in 0..n {
                            *y.add(i) = bf16_bits(*x.add(i));
                        }
                    }
                    _ => {}
                }
            }
        }
    };
}

variant!(avx512, "avx512f,avx2,fma,f16c", by_hand_avx512);
variant!(avx2, "avx2,fma,f16c", by_hand_avx2);

/// f32 → bf16 bits, rounded to nearest even; a NaN stays NaN, made quiet (as
/// `Lower::f32_to_bf16_bits` and `half::bf16::from_f32`).
#[inline(always)]
fn bf16_bits(x: f32) -> u16 {
    let f = x.to_bits();
    let hi = f >> 16;
    if f & 0x7fff_ffff > 0x7f80_0000 {
        (hi | 0x40) as u16
    } else {
        (f.wrapping_add(0x7fff + (hi & 1)) >> 16) as u16
    }
}

/// `f` on every `W` values of `x[0..n]`, into `y[0..n]`; the last partial step runs on a padded
/// copy. `f` takes pointers to `W` values.
#[inline(always)]
unsafe fn steps<S: Copy + Default, D: Copy + Default, const W: usize>(
    x: *const S,
    y: *mut D,
    n: usize,
    f: impl Fn(*const S, *mut D),
) {
    let full = n / W * W;
    let mut i = 0;
    while i < full {
        // SAFETY: `x[i..i + W]` and `y[i..i + W]` lie inside `x[0..n]` and `y[0..n]`.
        f(unsafe { x.add(i) }, unsafe { y.add(i) });
        i += W;
    }
    if full < n {
        let mut a = [S::default(); W];
        let mut b = [D::default(); W];
        // SAFETY: `x[full..n]` and `y[full..n]` are the caller's, `n - full < W`.
        unsafe {
            std::ptr::copy_nonoverlapping(x.add(full), a.as_mut_ptr(), n - full);
            f(a.as_ptr(), b.as_mut_ptr());
            std::ptr::copy_nonoverlapping(b.as_ptr(), y.add(full), n - full);
        }
    }
}

/// The operations of [`VOp`] written with intrinsics, 16 lanes wide: the f16 conversions (10, 12,
/// 13), `vcvtps2ph` rounding to nearest even and `vcvtph2ps`, exact, as the inline
/// `f32_to_f16_bits` and `f16_bits_to_f32` (tested against `half` below, NaN payloads and
/// subnormals included); and the division by a scalar (15), which LLVM left scalar when
/// written as a closure for [`each`] (15 times slower).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn by_hand_avx512(op: u32, x: *const f32, y: *mut f32, n: usize, k: f32) {
    use std::arch::x86_64::*;
    const R: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    // SAFETY (every arm): `steps` hands out pointers to 16 readable and writable values.
    unsafe {
        match op {
            10 => steps::<f32, f32, 16>(x, y, n, |a, b| {
                let h = _mm512_cvtps_ph::<R>(_mm512_loadu_ps(a));
                _mm512_storeu_ps(b, _mm512_cvtph_ps(h));
            }),
            12 => steps::<u16, f32, 16>(x as *const u16, y, n, |a, b| {
                let h = _mm256_loadu_si256(a as *const __m256i);
                _mm512_storeu_ps(b, _mm512_cvtph_ps(h));
            }),
            13 => steps::<f32, u16, 16>(x, y as *mut u16, n, |a, b| {
                let h = _mm512_cvtps_ph::<R>(_mm512_loadu_ps(a));
                _mm256_storeu_si256(b as *mut __m256i, h);
            }),
            15 => {
                let d = _mm512_set1_ps(k);
                steps::<f32, f32, 16>(x, y, n, |a, b| {
                    _mm512_storeu_ps(b, _mm512_div_ps(_mm512_loadu_ps(a), d));
                })
            }
            _ => {}
        }
    }
}

/// [`by_hand_avx512`] 8 lanes wide, with F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn by_hand_avx2(op: u32, x: *const f32, y: *mut f32, n: usize, k: f32) {
    use std::arch::x86_64::*;
    const R: i32 = _MM_FROUND_TO_NEAREST_INT;
    // SAFETY (every arm): `steps` hands out pointers to 8 readable and writable values.
    unsafe {
        match op {
            10 => steps::<f32, f32, 8>(x, y, n, |a, b| {
                let h = _mm256_cvtps_ph::<R>(_mm256_loadu_ps(a));
                _mm256_storeu_ps(b, _mm256_cvtph_ps(h));
            }),
            12 => steps::<u16, f32, 8>(x as *const u16, y, n, |a, b| {
                let h = _mm_loadu_si128(a as *const __m128i);
                _mm256_storeu_ps(b, _mm256_cvtph_ps(h));
            }),
            13 => steps::<f32, u16, 8>(x, y as *mut u16, n, |a, b| {
                let h = _mm256_cvtps_ph::<R>(_mm256_loadu_ps(a));
                _mm_storeu_si128(b as *mut __m128i, h);
            }),
            15 => {
                let d = _mm256_set1_ps(k);
                steps::<f32, f32, 8>(x, y, n, |a, b| {
                    _mm256_storeu_ps(b, _mm256_div_ps(_mm256_loadu_ps(a), d));
                })
            }
            _ => {}
        }
    }
}

/// Lanes per block: one AVX-512 vector of f32.
const B: usize = 16;

/// `f` on each block of 16 values of `x[0..n]`, into `y[0..n]` (`y` is `x`, or does not
/// overlap it), through a local array (LLVM keeps it in registers and vectorises `f`). Every
/// block moves as one 64-byte read and write; the last partial block is first copied into a
/// padded array of its own, so the loop has one shape. (Copying each block with a variable
/// length was two `memcpy` calls per 16 values, which cost more than `exp` itself; and a loop
/// with two paths, or `f` inlined twice, is where LLVM stopped vectorising `sin` or `gelu_erf`.)
#[inline(always)]
unsafe fn blocks(x: *const f32, y: *mut f32, n: usize, f: impl Fn(&mut [f32; B])) {
    let full = n / B * B;
    let mut tail = [0.0f32; B];
    // SAFETY: `x[full..n]` lies inside `x[0..n]` (the caller's contract).
    unsafe { std::ptr::copy_nonoverlapping(x.add(full), tail.as_mut_ptr(), n - full) };
    let mut i = 0;
    while i < n {
        let (src, dst) = if i < full {
            // SAFETY: `x[i..i + B]` and `y[i..i + B]` lie inside `x[0..full]`, `y[0..full]`.
            unsafe { (x.add(i), y.add(i)) }
        } else {
            (tail.as_ptr(), tail.as_mut_ptr())
        };
        // SAFETY: `src` and `dst` point at 16 f32 values (of `x` and `y`, or of `tail`); arrays
        // of f32 need only f32 alignment.
        let mut v = unsafe { (src as *const [f32; B]).read() };
        f(&mut v);
        unsafe { (dst as *mut [f32; B]).write(v) };
        i += B;
    }
    // SAFETY: as above.
    unsafe { std::ptr::copy_nonoverlapping(tail.as_ptr(), y.add(full), n - full) };
}

/// `f` on every value of `x[0..n]`, into `y[0..n]`.
#[inline(always)]
unsafe fn each(x: *const f32, y: *mut f32, n: usize, f: impl Fn(f32) -> f32) {
    // SAFETY: the caller's contract.
    unsafe {
        blocks(x, y, n, |v| {
            for e in v.iter_mut() {
                *e = f(*e);
            }
        })
    }
}

/// [`each`] for `sin` and `cos`: lanes beyond 2^18 in magnitude, where the two-part reduction
/// by π/2 loses bits, come from the evaluator's definition (as `sin_cos_f32x4`'s guarded path).
#[inline(always)]
unsafe fn each_far(x: *const f32, y: *mut f32, n: usize, f: impl Fn(f32) -> f32, op: UnOp) {
    let far = |x: f32| x.abs() > 262_144.0;
    // SAFETY: the caller's contract.
    unsafe {
        blocks(x, y, n, |v| {
            let inp = *v;
            for e in v.iter_mut() {
                *e = f(*e);
            }
            if inp.iter().fold(false, |a, e| a | far(*e)) {
                for (e, x) in v.iter_mut().zip(&inp) {
                    if far(*x) {
                        *e = tdsl_loop::scalar::unary(op, *x as f64) as f32;
                    }
                }
            }
        })
    }
}

// ---- The kernels' constants (shared with `lower/math.rs`, which emits the same kernels inline) ----

/// Cephes `expf`: e^r − 1 − r ≈ r²·P(r), P highest degree first.
pub(crate) const EXPF_P: [f64; 6] = [
    1.9875691500e-4,
    1.3981999507e-3,
    8.3334519073e-3,
    4.1665795894e-2,
    1.6666665459e-1,
    5.0000001201e-1,
];
/// Cephes `tanhf` below 0.625: tanh x ≈ x + x·z·P(z), z = x², highest degree first.
pub(crate) const TANHF_P: [f64; 5] = [
    -5.704_988_727_45e-3,
    2.063_908_879_54e-2,
    -5.373_971_555_31e-2,
    1.333_144_220_36e-1,
    -3.333_328_194_22e-1,
];
/// Cephes `logf`: ln(1 + f) ≈ f − f²/2 + f³·P(f), highest degree first.
pub(crate) const LOGF_P: [f64; 9] = [
    7.037_683_629_2e-2,
    -1.151_461_031_0e-1,
    1.167_699_874_0e-1,
    -1.242_014_084_6e-1,
    1.424_932_278_7e-1,
    -1.666_805_766_5e-1,
    2.000_071_476_5e-1,
    -2.499_999_399_3e-1,
    3.333_333_117_4e-1,
];
/// erf(a) = a·Q(a²) below 1: the Taylor series to degree 13, lowest degree first (Estrin).
pub(crate) const ERF_SMALL: [f64; 14] = [
    std::f64::consts::FRAC_2_SQRT_PI,
    -0.376_126_389_031_837_54,
    0.112_837_916_709_551_26,
    -0.026_866_170_645_131_252,
    0.005_223_977_625_442_188,
    -0.000_854_832_702_345_085_2,
    0.000_120_553_329_817_896_64,
    -1.492_565_035_840_625e-5,
    1.646_211_436_588_924_6e-6,
    -1.636_584_469_123_492_4e-7,
    1.480_719_281_587_921_8e-8,
    -1.229_055_530_171_792_6e-9,
    9.422_759_064_650_411e-11,
    -6.711_366_855_164_110_5e-12,
];
/// erfc(a) = e^(−a²)·t·P(u) from 1 to 11, t = 1/(1 + a/2), u = 3.9·t − 1.6: a degree-12 fit of
/// erfcx(a)/t, lowest degree first (Estrin).
pub(crate) const ERFC_P: [f64; 13] = [
    0.453_508_903_293_486_8,
    0.151_492_326_728_924,
    0.033_676_574_756_834_68,
    0.003_336_413_716_318_687,
    -0.000_498_591_085_342_534_2,
    -0.000_160_277_104_890_168,
    1.355_679_218_315_978_6e-5,
    7.656_087_409_966_068e-6,
    -9.080_527_937_943_43e-7,
    -3.857_525_925_950_405e-7,
    8.559_411_552_547_531e-8,
    1.547_812_987_201_143_2e-8,
    -6.217_850_641_770_843e-9,
];
/// π/2 in three parts (fdlibm), so that n·part is exact for the reduction of sin and cos.
pub(crate) const PIO2_PARTS: [f64; 3] = [
    1.570_796_326_734_125_614_17e0,
    6.077_100_506_303_965_976_60e-11,
    2.022_266_248_711_166_455_80e-21,
];
/// fdlibm: sin r = r + r³·S(r²), highest degree first.
pub(crate) const SIN_P: [f64; 6] = [
    1.589_690_995_211_550_102_21e-10,
    -2.505_076_025_340_686_341_95e-8,
    2.755_731_370_707_006_767_89e-6,
    -1.984_126_982_985_794_931_34e-4,
    8.333_333_333_322_489_461_24e-3,
    -1.666_666_666_666_663_243_48e-1,
];
/// fdlibm: cos r = 1 − r²/2 + r⁴·C(r²), highest degree first.
pub(crate) const COS_P: [f64; 6] = [
    -1.135_964_755_778_819_482_65e-11,
    2.087_572_321_298_174_827_90e-9,
    -2.755_731_435_139_066_330_35e-7,
    2.480_158_728_947_672_941_78e-5,
    -1.388_888_888_887_410_957_49e-3,
    4.166_666_666_666_660_190_37e-2,
];

// ---- native f32 --------------------------------------------------------------------------------

/// `x > k ? k : x` (NaN stays NaN), as `clamp_lanes`.
#[inline(always)]
fn above(x: f32, k: f32) -> f32 {
    if x > k {
        k
    } else {
        x
    }
}

#[inline(always)]
fn below(x: f32, k: f32) -> f32 {
    if x < k {
        k
    } else {
        x
    }
}

/// Cephes `expf`, as `exp_f32x4`.
#[inline(always)]
fn exp_f32(x: f32) -> f32 {
    let x = below(above(x, 89.0), -104.0);
    const MAGIC_I: i32 = 0x4b40_0000;
    let magic = f32::from_bits(MAGIC_I as u32);
    let t = x.mul_add(std::f32::consts::LOG2_E, magic);
    let z = t - magic;
    let n = (t.to_bits() as i32).wrapping_sub(MAGIC_I);
    let r = z.mul_add(-0.693359375, x);
    let r = z.mul_add(2.12194440e-4, r);
    let mut p = EXPF_P[0] as f32;
    for k in &EXPF_P[1..] {
        p = p.mul_add(r, *k as f32);
    }
    let p = p.mul_add(r * r, r) + 1.0;
    let n1 = n >> 1;
    let n2 = n.wrapping_sub(n1);
    let s1 = f32::from_bits((n1.wrapping_add(127) << 23) as u32);
    let s2 = f32::from_bits((n2.wrapping_add(127) << 23) as u32);
    p * s1 * s2
}

/// `tanh_f32x4`: Cephes' odd polynomial below 0.625, 1 − 2/(e^(2|x|) + 1) above, x's sign.
#[inline(always)]
fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let e = exp_f32(a + a);
    let big = 1.0 - 2.0 / (e + 1.0);
    let z = a * a;
    let mut p = TANHF_P[0] as f32;
    for k in &TANHF_P[1..] {
        p = p.mul_add(z, *k as f32);
    }
    let small = (a * z).mul_add(p, a);
    let r = if a < 0.625 { small } else { big };
    f32::from_bits(r.to_bits() | (x.to_bits() & 0x8000_0000))
}

/// `sigmoid_f32x4`: 1/(1 + e) for x ≥ 0 and e/(1 + e) below, e = e^−|x|.
#[inline(always)]
fn sigmoid_f32(x: f32) -> f32 {
    let e = exp_f32(-x.abs());
    let num = if x < 0.0 { e } else { 1.0 };
    num / (1.0 + e)
}

/// Cephes `logf`, as `log_f32x4`: x = 2^e·m, m in [√2/2, √2), ln(1 + f) by a degree-9
/// polynomial, e·ln 2 in two parts; subnormals scaled by 2^23 first.
#[inline(always)]
fn log_f32(x: f32) -> f32 {
    let tiny = x < f32::MIN_POSITIVE;
    let xs = if tiny { x * 8_388_608.0 } else { x };
    let kadj = if tiny { -23.0 } else { 0.0 };
    let bits = xs.to_bits();
    let m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000);
    let e = ((bits >> 23) as i32) as f32 - 126.0 + kadj;
    let low = m < std::f32::consts::FRAC_1_SQRT_2;
    let f = if low { m + m } else { m } - 1.0;
    let e = if low { e - 1.0 } else { e };
    let z = f * f;
    let mut p = LOGF_P[0] as f32;
    for k in &LOGF_P[1..] {
        p = p.mul_add(f, *k as f32);
    }
    let y = f * z * p;
    let y = e.mul_add(-2.121_944_40e-4, y);
    let y = z.mul_add(-0.5, y);
    let r = e.mul_add(0.693_359_375, f + y);
    // Specials, last one wins: +inf, negatives (NaN), zeros (−inf), NaN itself.
    let r = if x == f32::INFINITY { f32::INFINITY } else { r };
    let r = if x < 0.0 { f32::NAN } else { r };
    let r = if x == 0.0 { f32::NEG_INFINITY } else { r };
    if x.is_nan() {
        x
    } else {
        r
    }
}

// ---- f64 for f32 results -----------------------------------------------------------------------

/// `c[0] + c[1]·x + …` by Estrin's scheme, paired as `lower/math.rs`'s `estrin`.
#[inline(always)]
fn estrin<const N: usize>(x: f64, c: [f64; N]) -> f64 {
    // Pairs `t[j] + t[j+1]·p` with p = x, then x², x⁴, … until one term is left. The first
    // level reads `c` and the rest their own terms: written as one loop over `len = N`, LLVM
    // no longer unrolled it and the f64 functions ran 4–6× slower (`silu` 5.8 → 26 ms on 16M
    // values), so the two stay apart.
    let mut terms = [0.0f64; N];
    let mut len = 0;
    let mut i = 0;
    while i < N {
        terms[len] = if i + 1 < N {
            c[i + 1].mul_add(x, c[i])
        } else {
            c[i]
        };
        len += 1;
        i += 2;
    }
    let mut pw = x;
    while len > 1 {
        pw *= pw;
        let mut out = 0;
        let mut j = 0;
        while j < len {
            terms[out] = if j + 1 < len {
                terms[j + 1].mul_add(pw, terms[j])
            } else {
                terms[j]
            };
            out += 1;
            j += 2;
        }
        len = out;
    }
    terms[0]
}

/// 1.5·2^52: adding it to an f64 of magnitude below 2^51 rounds to an integer in the low bits.
const MAGIC_F64: f64 = 6_755_399_441_055_744.0;

/// `exp_d` for f32 results: Cody–Waite reduction, degree-9 Taylor series by Estrin, one scale.
#[inline(always)]
fn exp_d(x: f64) -> f64 {
    let x = if x > 710.0 { 710.0 } else { x };
    let x = if x < -708.0 { -708.0 } else { x };
    let t = x * std::f64::consts::LOG2_E;
    let magic = MAGIC_F64 + 1023.0;
    let s = t + magic;
    let z = s - magic;
    let nz = -z;
    let r = nz.mul_add(6.931_471_803_691_238_164_90e-1, x);
    let r = nz.mul_add(1.908_214_929_270_587_700_02e-10, r);
    let p = estrin(
        r,
        [
            1.0,
            1.0,
            1.0 / 2.0,
            1.0 / 6.0,
            1.0 / 24.0,
            1.0 / 120.0,
            1.0 / 720.0,
            1.0 / 5040.0,
            1.0 / 40320.0,
            1.0 / 362880.0,
        ],
    );
    p * f64::from_bits(s.to_bits() << 52)
}

/// `c[0]·x^(n-1) + … + c[n-1]` by Horner's rule.
#[inline(always)]
fn horner<const N: usize>(x: f64, c: [f64; N]) -> f64 {
    let mut p = c[0];
    for k in &c[1..] {
        p = p.mul_add(x, *k);
    }
    p
}

/// `sin_cos_d`: n = round(2x/π), r = x − n·π/2 in three parts, sin r and cos r by fdlibm's
/// polynomials, the quadrant n mod 4 (n + 1 for cos) picking and signing them.
#[inline(always)]
fn sin_cos_d(x: f64, cos: bool) -> f64 {
    let t = x * std::f64::consts::FRAC_2_PI;
    let s = t + MAGIC_F64;
    let z = s - MAGIC_F64;
    let n = (s.to_bits() as i64).wrapping_sub(MAGIC_F64.to_bits() as i64);
    let nz = -z;
    let mut r = x;
    for part in PIO2_PARTS {
        r = nz.mul_add(part, r);
    }
    let z2 = r * r;
    let sp = horner(z2, SIN_P);
    let sin = (z2 * r).mul_add(sp, r);
    let cp = horner(z2, COS_P);
    let c = (-0.5f64).mul_add(z2, 1.0);
    let cos_r = (z2 * z2).mul_add(cp, c);
    let q = if cos { n.wrapping_add(1) } else { n };
    let v = if q & 1 == 1 { cos_r } else { sin };
    f64::from_bits(v.to_bits() ^ (((q & 2) as u64) << 62))
}

/// gelu's tanh form as `x / (1 + e^(−2u))`, in `gelu_d`'s operation order.
#[inline(always)]
fn gelu_d(x: f64) -> f64 {
    let kx = 0.044715 * x;
    let kx3 = kx * x * x;
    let u = 0.797_884_560_802_865_4 * (x + kx3);
    x / (1.0 + exp_d(-2.0 * u))
}

#[inline(always)]
fn silu_d(x: f64) -> f64 {
    x / (1.0 + exp_d(-x))
}

/// `erf_parts`: erf(a) and erfc(a) for a = |z| (or NaN).
#[inline(always)]
fn erf_parts(a: f64) -> (f64, f64) {
    let a2 = a * a;
    let q = estrin(a2, ERF_SMALL);
    let e_small = a * q;
    let c_small = 1.0 - e_small;
    let t = 1.0 / a.mul_add(0.5, 1.0);
    let u = t.mul_add(3.9, -1.6);
    let pu = estrin(u, ERFC_P);
    let c_big = exp_d(-a2) * t * pu;
    let c_big = if a > 11.0 { 0.0 } else { c_big };
    let e_big = 1.0 - c_big;
    if a < 1.0 {
        (e_small, c_small)
    } else {
        (e_big, c_big)
    }
}

#[inline(always)]
fn erf_d(z: f64) -> f64 {
    let (e, _) = erf_parts(z.abs());
    f64::from_bits(e.to_bits() | (z.to_bits() & (1 << 63)))
}

/// 0.5·x·erfc(−x/√2), with erfc(z) = 2 − erfc(|z|) for z < 0.
#[inline(always)]
fn gelu_erf_d(x: f64) -> f64 {
    let z = -x / std::f64::consts::SQRT_2;
    let (_, c) = erf_parts(z.abs());
    let c = if z < 0.0 { 2.0 - c } else { c };
    0.5 * x * c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between two f32 (0 for equal, both NaN).
    fn ulps(a: f32, b: f32) -> u32 {
        if a.is_nan() && b.is_nan() || a == b {
            return 0;
        }
        if a.is_nan() || b.is_nan() || a.is_sign_negative() != b.is_sign_negative() {
            return u32::MAX;
        }
        a.to_bits().abs_diff(b.to_bits())
    }

    fn inputs() -> Vec<f32> {
        let mut v = vec![
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            1e-40,
            -1e-40,
            f32::MAX,
            f32::MIN,
            88.7,
            -103.9,
            0.625,
            -0.625,
            11.0,
            -11.0,
        ];
        // Every 997th bit pattern below +inf, both signs: normals, subnormals, tiny and huge.
        let mut b = 0u32;
        while b < 0x7f80_0000 {
            let x = f32::from_bits(b);
            v.push(x);
            v.push(-x);
            b += 997;
        }
        v
    }

    /// Each chunked function against its f64 definition rounded once (the evaluator's), and,
    /// for the ones with a native f32 form, within that form's bound.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn chunked_functions_match_their_definitions() {
        if kernel().is_none() {
            eprintln!("skipped: this CPU has neither AVX-512F nor AVX2 with FMA");
            return;
        }
        let xs = inputs();
        let cases = [
            (UnOp::Exp, 2),
            (UnOp::Tanh, 2),
            (UnOp::Sigmoid, 2),
            (UnOp::Gelu, 1),
            (UnOp::Silu, 1),
            (UnOp::Erf, 1),
            (UnOp::GeluErf, 1),
            (UnOp::Log, 2),
            (UnOp::Sin, 1),
            (UnOp::Cos, 1),
        ];
        let variants = variants();
        for ((uop, bound), (name, k)) in cases
            .iter()
            .flat_map(|c| variants.iter().map(move |v| (*c, *v)))
        {
            let op = VOp::of(uop).expect("a chunked function");
            // In place, and from one array into another.
            let mut got = xs.clone();
            // SAFETY: `got` holds `len` values; the CPU runs variant `k`.
            unsafe { k(op as u32, got.as_ptr(), got.as_mut_ptr(), got.len(), 0.0) };
            let mut into = vec![0.0f32; xs.len()];
            // SAFETY: `xs` and `into` hold `len` values each and do not overlap.
            unsafe { k(op as u32, xs.as_ptr(), into.as_mut_ptr(), xs.len(), 0.0) };
            assert!(
                got.iter()
                    .zip(&into)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{uop:?} ({name}): in place and into another array differ"
            );
            let mut worst = (0u32, 0.0f32);
            for (&x, &g) in xs.iter().zip(&got) {
                let want = tdsl_loop::scalar::unary(uop, x as f64) as f32;
                let d = ulps(g, want);
                if d > worst.0 {
                    worst = (d, x);
                }
            }
            assert!(
                worst.0 <= bound,
                "{op:?}({}) is {} ulp from its definition ({name})",
                worst.1,
                worst.0
            );
        }
    }

    /// Every variant this CPU runs (an AVX-512 machine runs the AVX2 one too).
    #[cfg(target_arch = "x86_64")]
    fn variants() -> Vec<(&'static str, Kernel)> {
        use std::arch::is_x86_feature_detected as has;
        let mut v: Vec<(&str, Kernel)> = Vec::new();
        if has!("avx512f") && has!("fma") && has!("f16c") {
            v.push(("avx512", avx512 as Kernel));
        }
        if has!("avx2") && has!("fma") && has!("f16c") {
            v.push(("avx2", avx2 as Kernel));
        }
        v
    }

    /// f32 bit patterns for the conversions: every sign, exponent and top 7 mantissa bits,
    /// each with low halves at and around the f16 and bf16 rounding points.
    fn conversion_inputs() -> Vec<f32> {
        let lows = [
            0u32, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001,
            0xc000, 0xffff,
        ];
        (0..=u16::MAX as u32)
            .flat_map(|hi| lows.iter().map(move |lo| f32::from_bits(hi << 16 | lo)))
            .collect()
    }

    /// The 16-bit conversions agree with `half` bit for bit, NaNs included (made quiet, their
    /// payload kept), in place and not, over lengths whose tails take the padded path.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn half_conversions_match_half_bit_for_bit() {
        use half::{bf16, f16};
        let xs = conversion_inputs();
        for (name, k) in variants() {
            for n in [xs.len(), xs.len() - 1, 13, 1, 0] {
                let xs = &xs[..n];
                // Narrowing, into u16.
                for (op, want) in [
                    (
                        VOp::NarrowF16,
                        (|v| f16::from_f32(v).to_bits()) as fn(f32) -> u16,
                    ),
                    (VOp::NarrowBf16, |v| bf16::from_f32(v).to_bits()),
                ] {
                    let mut got = vec![0u16; n];
                    // SAFETY: `xs` holds `n` f32 and `got` `n` u16; the CPU runs `k`.
                    unsafe { k(op as u32, xs.as_ptr(), got.as_mut_ptr() as *mut f32, n, 0.0) };
                    for (x, g) in xs.iter().zip(&got) {
                        assert_eq!(*g, want(*x), "{op:?} ({name}) of {:#010x}", x.to_bits());
                    }
                }
                // Rounding, in place: the narrowed value widened again.
                for (op, want) in [
                    (
                        VOp::RoundF16,
                        (|v| f16::from_f32(v).to_f32()) as fn(f32) -> f32,
                    ),
                    (VOp::RoundBf16, |v| bf16::from_f32(v).to_f32()),
                ] {
                    let mut got = xs.to_vec();
                    // SAFETY: `got` holds `n` f32; the CPU runs `k`.
                    unsafe { k(op as u32, got.as_ptr(), got.as_mut_ptr(), n, 0.0) };
                    for (x, g) in xs.iter().zip(&got) {
                        let w = want(*x);
                        assert!(
                            g.to_bits() == w.to_bits() || g.is_nan() && w.is_nan(),
                            "{op:?} ({name}) of {:#010x}: {g:e}, not {w:e}",
                            x.to_bits()
                        );
                    }
                }
            }
            // Widening every f16, to the same value (NaN to a NaN with the same payload).
            let hs: Vec<u16> = (0..=u16::MAX).collect();
            let mut got = vec![0.0f32; hs.len()];
            // SAFETY: `hs` holds `len` u16 and `got` `len` f32; the CPU runs `k`.
            unsafe {
                k(
                    VOp::WidenF16 as u32,
                    hs.as_ptr() as *const f32,
                    got.as_mut_ptr(),
                    hs.len(),
                    0.0,
                )
            };
            for (h, g) in hs.iter().zip(&got) {
                let w = f16::from_bits(*h).to_f32();
                let quiet = |v: f32| v.to_bits() | 0x0040_0000;
                assert!(
                    g.to_bits() == w.to_bits() || w.is_nan() && quiet(*g) == quiet(w),
                    "WidenF16 ({name}) of {h:#06x}: {g:e}, not {w:e}"
                );
            }
        }
    }
}
