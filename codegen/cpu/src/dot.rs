//! Dot products and sums for the JIT (`lower/dot.rs`): an innermost loop `a += x[i]·y[i]` or
//! `a += x[i]` over unit-stride loads, with `x` f32, f16 or bf16 and `y` f32, becomes one call
//! that reads 64 values a step on AVX-512 (32 on AVX2) into four f32 accumulators, widening
//! f16/bf16 in registers. Cranelift's x86 vectors stop at 128 bits, and with 128-bit loads a
//! core cannot keep enough of memory in flight: a 4096² matrix-vector product read 53 GB/s
//! through 128-bit loads against 84 GB/s through 512-bit ones (C, two threads, the 2-core Zen 5
//! of bench/RESULTS.md); and the JIT widens an f16 element at a time (an f16 weight times a
//! vector, the step of a language model's decoding, ran at 13 GB/s).
//!
//! The sum's order differs from the JIT's own vector loop (which also reassociates: 4 lanes ×
//! its accumulators); the loop IR allows any order for a reduction's updates.

use std::sync::OnceLock;

use half::{bf16, f16};

use crate::spmm::Isa;

/// The symbols generated code calls, `fn(x, y, n) -> f32`, by the element type of `x`.
pub(crate) const SYMBOL: &str = "tdsl_dot_f32";
pub(crate) const SYMBOL_F16: &str = "tdsl_dot_f16";
pub(crate) const SYMBOL_BF16: &str = "tdsl_dot_bf16";

pub(crate) const SYMBOL_AXPY: &str = "tdsl_axpy_f32";
pub(crate) const SYMBOL_AXPY_ROWS: &str = "tdsl_axpy_rows_f32";
pub(crate) const SYMBOL_MAX: &str = "tdsl_max_f32";
pub(crate) const SYMBOL_MIN: &str = "tdsl_min_f32";

/// How many rows of `w` one [`tdsl_axpy_rows_f32`] call adds.
pub(crate) const AXPY_ROWS: usize = 4;

/// The symbols this module registers with the JIT.
pub(crate) fn symbols() -> [(&'static str, *const u8); 7] {
    [
        (SYMBOL, tdsl_dot_f32 as *const u8),
        (SYMBOL_F16, tdsl_dot_f16 as *const u8),
        (SYMBOL_BF16, tdsl_dot_bf16 as *const u8),
        (SYMBOL_AXPY, tdsl_axpy_f32 as *const u8),
        (SYMBOL_AXPY_ROWS, tdsl_axpy_rows_f32 as *const u8),
        (SYMBOL_MAX, tdsl_max_f32 as *const u8),
        (SYMBOL_MIN, tdsl_min_f32 as *const u8),
    ]
}

type Kernel<T> = unsafe fn(*const T, *const f32, usize) -> f32;
type Axpy = unsafe fn(*mut f32, *const f32, f32, usize);
type AxpyRows = unsafe fn(*mut f32, *const f32, isize, &[f32; AXPY_ROWS], usize);
type Extreme = unsafe fn(*const f32, usize) -> f32;

/// One kernel per element type of `x`, for one instruction set.
#[derive(Clone, Copy)]
struct Kernels {
    f32: Kernel<f32>,
    f16: Kernel<u16>,
    bf16: Kernel<u16>,
    axpy: Axpy,
    axpy_rows: AxpyRows,
    max: Extreme,
    min: Extreme,
}

fn kernels() -> Option<Kernels> {
    static K: OnceLock<Option<Kernels>> = OnceLock::new();
    *K.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if Isa::Avx512.supported() {
                return Some(x86::AVX512);
            }
            if Isa::Avx2.supported() {
                return Some(x86::AVX2);
            }
        }
        None
    })
}

/// Whether this CPU runs the wide dot products (AVX-512F, or AVX2 with FMA and F16C), unless
/// `TDSL_DOT=0` keeps the JIT's own loops (to compare the two).
pub(crate) fn available() -> bool {
    kernels().is_some() && std::env::var("TDSL_DOT").map_or(true, |v| v != "0")
}

/// `Σ x[i]·y[i]` for `i < n`, or `Σ x[i]` when `y` is null, summed in f32 from −0 (the
/// identity of `+`, so that `a + dot(…)` is `a` for an empty loop, −0 included); each product
/// is fused into its partial sum. `widen` is the scalar form of `x`'s elements.
unsafe fn scalar<T: Copy>(x: *const T, y: *const f32, n: usize, widen: fn(T) -> f32) -> f32 {
    (0..n).fold(-0.0, |s, i| {
        // SAFETY: the caller's contract.
        let (a, b) = unsafe { (widen(*x.add(i)), if y.is_null() { 1.0 } else { *y.add(i) }) };
        a.mul_add(b, s)
    })
}

/// `Σ x[i]·y[i]` over f32 `x`; see [`scalar`]. Registered with the JIT under [`SYMBOL`];
/// generated code calls it only when [`available`] said so.
///
/// # Safety
/// `x[0..n]` (and `y[0..n]` unless `y` is null) are in bounds of their buffers (the loop-IR
/// verifier proved it for the loop the call replaces).
pub(crate) unsafe extern "C" fn tdsl_dot_f32(x: *const f32, y: *const f32, n: i64) -> f32 {
    let n = n.max(0) as usize;
    match kernels() {
        // SAFETY: the caller's contract; the kernel's instruction set is present.
        Some(k) => unsafe { (k.f32)(x, y, n) },
        // SAFETY: the caller's contract.
        None => unsafe { scalar(x, y, n, |v| v) },
    }
}

/// [`tdsl_dot_f32`] with `x` f16 (its bits), registered under [`SYMBOL_F16`].
///
/// # Safety
/// As for [`tdsl_dot_f32`].
pub(crate) unsafe extern "C" fn tdsl_dot_f16(x: *const u16, y: *const f32, n: i64) -> f32 {
    let n = n.max(0) as usize;
    match kernels() {
        // SAFETY: the caller's contract; the kernel's instruction set is present.
        Some(k) => unsafe { (k.f16)(x, y, n) },
        // SAFETY: the caller's contract.
        None => unsafe { scalar(x, y, n, |b| f16::from_bits(b).to_f32()) },
    }
}

/// [`tdsl_dot_f32`] with `x` bf16 (its bits), registered under [`SYMBOL_BF16`].
///
/// # Safety
/// As for [`tdsl_dot_f32`].
pub(crate) unsafe extern "C" fn tdsl_dot_bf16(x: *const u16, y: *const f32, n: i64) -> f32 {
    let n = n.max(0) as usize;
    match kernels() {
        // SAFETY: the caller's contract; the kernel's instruction set is present.
        Some(k) => unsafe { (k.bf16)(x, y, n) },
        // SAFETY: the caller's contract.
        None => unsafe { scalar(x, y, n, |b| bf16::from_bits(b).to_f32()) },
    }
}

/// `y[i] = y[i] + a·w[i]` for `i < n`, the product and the sum each rounded to f32 (as the
/// loop it replaces computes them: no fused multiply-add). Registered under [`SYMBOL_AXPY`];
/// generated code calls it only when [`available`] said so.
///
/// # Safety
/// `y[0..n]` and `w[0..n]` are in bounds of their buffers; `y` and `w` are the same elements
/// or do not overlap.
pub(crate) unsafe extern "C" fn tdsl_axpy_f32(y: *mut f32, w: *const f32, a: f32, n: i64) {
    let n = n.max(0) as usize;
    match kernels() {
        // SAFETY: the caller's contract; the kernel's instruction set is present.
        Some(k) => unsafe { (k.axpy)(y, w, a, n) },
        None => {
            for i in 0..n {
                // SAFETY: the caller's contract.
                unsafe { *y.add(i) += a * *w.add(i) };
            }
        }
    }
}

/// `y[i] = (…((y[i] + a[0]·w[i]) + a[1]·w[ws + i]) + …) + a[3]·w[3·ws + i]` for `i < n`: four
/// rows of `w`, `ws` elements apart, added into `y` in row order, each product and each sum
/// rounded to f32 as four [`tdsl_axpy_f32`] calls (or the loop they replace) round them. `y`
/// is read and written once for the four rows instead of four times: a vector times
/// `W[in, out]` streamed `W` at two thirds of the memory's rate while every row of it also
/// read and wrote a row of partial sums. Registered under [`SYMBOL_AXPY_ROWS`].
///
/// # Safety
/// `y[0..n]` and `w[r·ws..r·ws + n]` for `r < 4` are in bounds of their buffers, and `y` does
/// not overlap any of those rows.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn tdsl_axpy_rows_f32(
    y: *mut f32,
    w: *const f32,
    ws: i64,
    a0: f32,
    a1: f32,
    a2: f32,
    a3: f32,
    n: i64,
) {
    let n = n.max(0) as usize;
    let a = [a0, a1, a2, a3];
    match kernels() {
        // SAFETY: the caller's contract; the kernel's instruction set is present.
        Some(k) => unsafe { (k.axpy_rows)(y, w, ws as isize, &a, n) },
        None => {
            for (r, &ar) in a.iter().enumerate() {
                // SAFETY: the caller's contract.
                let row = unsafe { w.offset(r as isize * ws as isize) };
                for i in 0..n {
                    // SAFETY: the caller's contract.
                    unsafe { *y.add(i) += ar * *row.add(i) };
                }
            }
        }
    }
}

/// `max(a, b)` (`max`) or `min(a, b)` as the JIT's `fmax` and `fmin` compute them
/// (WebAssembly's rule): NaN when either is NaN, and `+0` above `−0`.
fn extreme_exact(a: f32, b: f32, max: bool) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a == b {
        // Equal zeros: the maximum keeps a `+0`, the minimum a `−0`.
        if a.is_sign_negative() == max {
            b
        } else {
            a
        }
    } else if (a > b) == max {
        a
    } else {
        b
    }
}

pub(crate) fn max_exact(a: f32, b: f32) -> f32 {
    extreme_exact(a, b, true)
}

pub(crate) fn min_exact(a: f32, b: f32) -> f32 {
    extreme_exact(a, b, false)
}

/// The largest of `x[0..n]` by [`max_exact`] (−∞ for none): a row's maximum, softmax's first
/// pass. The JIT's `fmax` on 128-bit vectors is eight instructions (x86's `maxps` neither
/// propagates NaN nor orders zeros), so a row maximum ran at half a row sum's speed. Registered
/// under [`SYMBOL_MAX`]; generated code calls it only when [`available`] said so.
///
/// # Safety
/// `x[0..n]` is in bounds of its buffer.
pub(crate) unsafe extern "C" fn tdsl_max_f32(x: *const f32, n: i64) -> f32 {
    let n = n.max(0) as usize;
    match kernels() {
        // SAFETY: the caller's contract; the kernel's instruction set is present.
        Some(k) => unsafe { (k.max)(x, n) },
        // SAFETY: the caller's contract.
        None => (0..n).fold(f32::NEG_INFINITY, |m, i| max_exact(m, unsafe { *x.add(i) })),
    }
}

/// The smallest of `x[0..n]` by [`min_exact`] (+∞ for none). Registered under [`SYMBOL_MIN`].
///
/// # Safety
/// As for [`tdsl_max_f32`].
pub(crate) unsafe extern "C" fn tdsl_min_f32(x: *const f32, n: i64) -> f32 {
    let n = n.max(0) as usize;
    match kernels() {
        // SAFETY: the caller's contract; the kernel's instruction set is present.
        Some(k) => unsafe { (k.min)(x, n) },
        // SAFETY: the caller's contract.
        None => (0..n).fold(f32::INFINITY, |m, i| min_exact(m, unsafe { *x.add(i) })),
    }
}

/// Completes a vector maximum or minimum `r` of `x[0..n]` whose vector part saw no NaN (the
/// caller checked): the last `n − from` values one at a time, then, when the result is a zero,
/// its sign (the vector instructions return either zero of an equal pair).
///
/// # Safety
/// `x[0..n]` is in bounds of its buffer.
unsafe fn extreme_tail(x: *const f32, from: usize, n: usize, mut r: f32, max: bool) -> f32 {
    let exact = if max { max_exact } else { min_exact };
    for i in from..n {
        // SAFETY: the caller's contract.
        r = exact(r, unsafe { *x.add(i) });
    }
    if r == 0.0 {
        // The maximum is +0 when any value is +0; the minimum −0 when any is −0.
        let want: u32 = if max { 0 } else { 0x8000_0000 };
        // SAFETY: the caller's contract.
        let any = (0..n).any(|i| unsafe { (*x.add(i)).to_bits() } == want);
        r = match (max, any) {
            (true, true) | (false, false) => 0.0,
            _ => -0.0,
        };
    }
    r
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{bf16, f16, Kernels};
    use std::arch::x86_64::*;

    /// One wide dot product over `x` of element type `$t`: the first values one at a time
    /// until `x` is aligned to a vector's worth of its elements, then four accumulators of
    /// `$w` lanes, one accumulator over the whole vectors left, and the last `n mod $w` values
    /// one at a time. `$wide(p)` loads `$w` elements of `x` at `p` as f32 lanes; `$narrow`
    /// widens one.
    macro_rules! dot_kernel {
        (
            $name:ident, $feature:literal, $w:expr, $t:ty, $wide:expr, $narrow:expr,
            $splat:ident, $loadf:ident, $add:ident, $fma:ident, $reduce:expr
        ) => {
            /// # Safety
            /// The instruction set is present; `tdsl_dot_f32`'s contract.
            #[target_feature(enable = $feature)]
            pub unsafe fn $name(x: *const $t, y: *const f32, n: usize) -> f32 {
                let one = |i: usize| -> f32 {
                    let a: f32 = $narrow(*x.add(i));
                    if y.is_null() {
                        a
                    } else {
                        a * *y.add(i)
                    }
                };
                // A wide load that straddles two cache lines costs two, and an allocator's
                // 16-byte alignment made every 512-bit load of a matrix row straddle (a 4096²
                // matrix-vector product on one thread, in C: 1.58 ms aligned, 2.10 ms not).
                let size = std::mem::size_of::<$t>();
                let mut head = -0.0f32;
                let mut i = 0;
                if (x as usize) % size == 0 {
                    let lead = (x as usize).wrapping_neg() % (size * $w) / size;
                    while i < lead.min(n) {
                        head += one(i);
                        i += 1;
                    }
                }
                let mut acc = [$splat(-0.0); 4];
                if y.is_null() {
                    while i + 4 * $w <= n {
                        for (k, a) in acc.iter_mut().enumerate() {
                            *a = $add(*a, $wide(x.add(i + k * $w)));
                        }
                        i += 4 * $w;
                    }
                    while i + $w <= n {
                        acc[0] = $add(acc[0], $wide(x.add(i)));
                        i += $w;
                    }
                } else {
                    while i + 4 * $w <= n {
                        for (k, a) in acc.iter_mut().enumerate() {
                            let j = i + k * $w;
                            *a = $fma($wide(x.add(j)), $loadf(y.add(j)), *a);
                        }
                        i += 4 * $w;
                    }
                    while i + $w <= n {
                        acc[0] = $fma($wide(x.add(i)), $loadf(y.add(i)), acc[0]);
                        i += $w;
                    }
                }
                let v = $add($add(acc[0], acc[1]), $add(acc[2], acc[3]));
                let mut s: f32 = $reduce(v) + head;
                while i < n {
                    s += one(i);
                    i += 1;
                }
                s
            }
        };
    }

    /// The AVX-512 kernels.
    pub(super) const AVX512: Kernels = Kernels {
        f32: dot_f32_avx512,
        f16: dot_f16_avx512,
        bf16: dot_bf16_avx512,
        axpy: axpy_avx512,
        axpy_rows: axpy_rows_avx512,
        max: max_avx512,
        min: min_avx512,
    };

    /// The AVX2 + FMA (+ F16C) kernels.
    pub(super) const AVX2: Kernels = Kernels {
        f32: dot_f32_avx2,
        f16: dot_f16_avx2,
        bf16: dot_bf16_avx2,
        axpy: axpy_avx2,
        axpy_rows: axpy_rows_avx2,
        max: max_avx2,
        min: min_avx2,
    };

    /// `y += a·w` over `n` values, `$w` lanes at a time, four vectors a step: the product
    /// rounded, then the sum (no fused multiply-add, as the loop it replaces).
    macro_rules! axpy_kernel {
        ($name:ident, $feature:literal, $w:expr, $splat:ident, $load:ident, $store:ident,
         $mul:ident, $add:ident) => {
            /// # Safety
            /// The instruction set is present; `tdsl_axpy_f32`'s contract.
            #[target_feature(enable = $feature)]
            pub unsafe fn $name(y: *mut f32, w: *const f32, a: f32, n: usize) {
                let av = $splat(a);
                let mut i = 0;
                while i + 4 * $w <= n {
                    for k in 0..4 {
                        let j = i + k * $w;
                        $store(y.add(j), $add($load(y.add(j)), $mul(av, $load(w.add(j)))));
                    }
                    i += 4 * $w;
                }
                while i + $w <= n {
                    $store(y.add(i), $add($load(y.add(i)), $mul(av, $load(w.add(i)))));
                    i += $w;
                }
                while i < n {
                    *y.add(i) += a * *w.add(i);
                    i += 1;
                }
            }
        };
    }

    /// `y += a[0]·w_0 + … + a[3]·w_3` over `n` values in row order, `$w` lanes at a time,
    /// four vectors a step (16 loads of `w` in flight), each product and sum rounded.
    macro_rules! axpy_rows_kernel {
        ($name:ident, $feature:literal, $w:expr, $splat:ident, $load:ident, $store:ident,
         $mul:ident, $add:ident) => {
            /// # Safety
            /// The instruction set is present; `tdsl_axpy_rows_f32`'s contract.
            #[target_feature(enable = $feature)]
            pub unsafe fn $name(y: *mut f32, w: *const f32, ws: isize, a: &[f32; 4], n: usize) {
                let av = a.map(|x| $splat(x));
                let rows = [0, 1, 2, 3].map(|r| w.offset(r * ws));
                let step = |j: usize| {
                    let mut v = $load(y.add(j));
                    for (r, row) in rows.iter().enumerate() {
                        v = $add(v, $mul(av[r], $load(row.add(j))));
                    }
                    $store(y.add(j), v);
                };
                let mut i = 0;
                while i + 4 * $w <= n {
                    for k in 0..4 {
                        step(i + k * $w);
                    }
                    i += 4 * $w;
                }
                while i + $w <= n {
                    step(i);
                    i += $w;
                }
                while i < n {
                    let mut s = *y.add(i);
                    for (r, row) in rows.iter().enumerate() {
                        s += a[r] * *row.add(i);
                    }
                    *y.add(i) = s;
                    i += 1;
                }
            }
        };
    }

    /// The maximum (`$op` max) or minimum over `n` values, four vectors of `$w` lanes a step
    /// into four accumulators, NaNs noted in a mask (x86's max and min drop them); the rest
    /// by [`super::extreme_tail`].
    macro_rules! extreme_kernel {
        ($name:ident, $feature:literal, $w:expr, $max:expr, $splat:ident, $load:ident,
         $op:ident, $nan:expr, $store:ident) => {
            /// # Safety
            /// The instruction set is present; `tdsl_max_f32`'s contract.
            #[target_feature(enable = $feature)]
            pub unsafe fn $name(x: *const f32, n: usize) -> f32 {
                let init = if $max {
                    f32::NEG_INFINITY
                } else {
                    f32::INFINITY
                };
                let mut acc = [$splat(init); 4];
                let mut nan = false;
                let mut i = 0;
                while i + 4 * $w <= n {
                    for (k, a) in acc.iter_mut().enumerate() {
                        let v = $load(x.add(i + k * $w));
                        nan |= $nan(v);
                        *a = $op(*a, v);
                    }
                    i += 4 * $w;
                }
                while i + $w <= n {
                    let v = $load(x.add(i));
                    nan |= $nan(v);
                    acc[0] = $op(acc[0], v);
                    i += $w;
                }
                if nan {
                    return f32::NAN;
                }
                let v = $op($op(acc[0], acc[1]), $op(acc[2], acc[3]));
                let mut lanes = [0f32; $w];
                $store(lanes.as_mut_ptr(), v);
                let exact = if $max {
                    super::max_exact
                } else {
                    super::min_exact
                };
                let r = lanes.iter().fold(init, |m, &l| exact(m, l));
                super::extreme_tail(x, i, n, r, $max)
            }
        };
    }

    #[inline(always)]
    unsafe fn nan512(v: __m512) -> bool {
        _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v) != 0
    }

    #[inline(always)]
    unsafe fn nan256(v: __m256) -> bool {
        _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v)) != 0
    }

    extreme_kernel!(
        max_avx512,
        "avx512f",
        16,
        true,
        _mm512_set1_ps,
        _mm512_loadu_ps,
        _mm512_max_ps,
        nan512,
        _mm512_storeu_ps
    );
    extreme_kernel!(
        min_avx512,
        "avx512f",
        16,
        false,
        _mm512_set1_ps,
        _mm512_loadu_ps,
        _mm512_min_ps,
        nan512,
        _mm512_storeu_ps
    );
    extreme_kernel!(
        max_avx2,
        "avx2,fma",
        8,
        true,
        _mm256_set1_ps,
        _mm256_loadu_ps,
        _mm256_max_ps,
        nan256,
        _mm256_storeu_ps
    );
    extreme_kernel!(
        min_avx2,
        "avx2,fma",
        8,
        false,
        _mm256_set1_ps,
        _mm256_loadu_ps,
        _mm256_min_ps,
        nan256,
        _mm256_storeu_ps
    );

    axpy_rows_kernel!(
        axpy_rows_avx512,
        "avx512f",
        16,
        _mm512_set1_ps,
        _mm512_loadu_ps,
        _mm512_storeu_ps,
        _mm512_mul_ps,
        _mm512_add_ps
    );
    axpy_rows_kernel!(
        axpy_rows_avx2,
        "avx2,fma",
        8,
        _mm256_set1_ps,
        _mm256_loadu_ps,
        _mm256_storeu_ps,
        _mm256_mul_ps,
        _mm256_add_ps
    );

    axpy_kernel!(
        axpy_avx512,
        "avx512f",
        16,
        _mm512_set1_ps,
        _mm512_loadu_ps,
        _mm512_storeu_ps,
        _mm512_mul_ps,
        _mm512_add_ps
    );
    axpy_kernel!(
        axpy_avx2,
        "avx2,fma",
        8,
        _mm256_set1_ps,
        _mm256_loadu_ps,
        _mm256_storeu_ps,
        _mm256_mul_ps,
        _mm256_add_ps
    );

    /// A zmm of the 16 bf16 values at `p`, widened (a bf16 is an f32's upper half).
    #[inline(always)]
    unsafe fn bf16x16(p: *const u16) -> __m512 {
        let h = _mm256_loadu_si256(p as *const __m256i);
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }

    /// A ymm of the 8 bf16 values at `p`, widened.
    #[inline(always)]
    unsafe fn bf16x8(p: *const u16) -> __m256 {
        let h = _mm_loadu_si128(p as *const __m128i);
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }

    fn f16_one(b: u16) -> f32 {
        f16::from_bits(b).to_f32()
    }

    fn bf16_one(b: u16) -> f32 {
        bf16::from_bits(b).to_f32()
    }

    fn reduce256(v: __m256) -> f32 {
        // SAFETY: only called from `avx2` kernels (the CPU has AVX).
        unsafe {
            let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps::<1>(h, h)))
        }
    }

    /// [`dot_kernel`] on zmm registers: name, `x`'s element type, its wide and scalar loads.
    macro_rules! dot512 {
        ($name:ident, $t:ty, $wide:expr, $narrow:expr) => {
            dot_kernel!(
                $name,
                "avx512f",
                16,
                $t,
                $wide,
                $narrow,
                _mm512_set1_ps,
                _mm512_loadu_ps,
                _mm512_add_ps,
                _mm512_fmadd_ps,
                |v| _mm512_reduce_add_ps(v)
            );
        };
    }

    /// [`dot_kernel`] on ymm registers, with the features `$features` (AVX2 and FMA at least).
    macro_rules! dot256 {
        ($name:ident, $features:literal, $t:ty, $wide:expr, $narrow:expr) => {
            dot_kernel!(
                $name,
                $features,
                8,
                $t,
                $wide,
                $narrow,
                _mm256_set1_ps,
                _mm256_loadu_ps,
                _mm256_add_ps,
                _mm256_fmadd_ps,
                reduce256
            );
        };
    }

    dot512!(dot_f32_avx512, f32, |p| _mm512_loadu_ps(p), |v: f32| v);
    dot512!(
        dot_f16_avx512,
        u16,
        |p: *const u16| _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)),
        f16_one
    );
    dot512!(dot_bf16_avx512, u16, |p| bf16x16(p), bf16_one);
    dot256!(
        dot_f32_avx2,
        "avx2,fma",
        f32,
        |p| _mm256_loadu_ps(p),
        |v: f32| v
    );
    dot256!(
        dot_f16_avx2,
        "avx2,fma,f16c",
        u16,
        |p: *const u16| _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
        f16_one
    );
    dot256!(dot_bf16_avx2, "avx2,fma", u16, |p| bf16x8(p), bf16_one);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant this CPU runs, for each element type of `x`, against an f64 sum of the
    /// same (widened) values, over lengths around every step and alignments of `x`.
    #[test]
    fn wide_dot_products_match_an_f64_sum() {
        let Some(k) = kernels() else {
            eprintln!("skipped: this CPU has neither AVX-512F nor AVX2 with FMA");
            return;
        };
        let mut sets = vec![("best", k)];
        #[cfg(target_arch = "x86_64")]
        if Isa::Avx512.supported() && Isa::Avx2.supported() {
            sets.push(("avx2", x86::AVX2));
        }
        let n_max = 300;
        let x: Vec<f32> = (0..n_max + 8)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 8.0)
            .collect();
        let y: Vec<f32> = (0..n_max)
            .map(|i| ((i * 53 % 89) as f32 - 44.0) / 4.0)
            .collect();
        // Exactly representable in f16 and bf16 (multiples of 1/8 below 64).
        let h: Vec<u16> = x.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
        let b: Vec<u16> = x.iter().map(|&v| bf16::from_f32(v).to_bits()).collect();
        for (name, k) in sets {
            for shift in 0..3 {
                for n in 0..n_max {
                    for with_y in [false, true] {
                        let want: f64 = (0..n)
                            .map(|i| x[shift + i] as f64 * if with_y { y[i] as f64 } else { 1.0 })
                            .sum();
                        let yp = if with_y { y.as_ptr() } else { std::ptr::null() };
                        // SAFETY: `x`, `h`, `b` hold `n_max + 8 ≥ shift + n` values and `y`
                        // `n_max ≥ n`; the CPU runs `k`.
                        let got = unsafe {
                            [
                                (k.f32)(x.as_ptr().add(shift), yp, n),
                                (k.f16)(h.as_ptr().add(shift), yp, n),
                                (k.bf16)(b.as_ptr().add(shift), yp, n),
                            ]
                        };
                        let scale: f64 = (0..n)
                            .map(|i| (x[shift + i] * y[i]).abs() as f64 + 1.0)
                            .sum();
                        for (t, g) in ["f32", "f16", "bf16"].iter().zip(got) {
                            assert!(
                                (g as f64 - want).abs() <= 1e-5 * scale,
                                "{name} {t}, n = {n}, shift {shift}, y: {with_y}: {g} against {want}"
                            );
                        }
                    }
                }
            }
            // SAFETY: n = 0 reads nothing.
            let empty = unsafe { (k.f32)(x.as_ptr(), std::ptr::null(), 0) };
            assert!(
                empty == 0.0 && empty.is_sign_negative(),
                "{name}: the empty sum is −0"
            );
        }
    }
}
