//! f32 dot products and sums for the JIT (`lower/dot.rs`): an innermost loop `a += x[i]·y[i]`
//! or `a += x[i]` over unit-stride f32 loads becomes one call that reads 64 values a step on
//! AVX-512 (32 on AVX2) into four accumulators. Cranelift's x86 vectors stop at 128 bits, and
//! with 128-bit loads a core cannot keep enough of memory in flight: a 4096² matrix-vector
//! product read 53 GB/s through 128-bit loads against 84 GB/s through 512-bit ones (C, two
//! threads, the 2-core Zen 5 of bench/RESULTS.md).
//!
//! The sum's order differs from the JIT's own vector loop (which also reassociates: 4 lanes ×
//! its accumulators); the loop IR allows any order for a reduction's updates.

use std::sync::OnceLock;

use crate::spmm::Isa;

/// The symbol generated code calls: `fn(x, y, n) -> f32`.
pub(crate) const SYMBOL: &str = "tdsl_dot_f32";

type Kernel = unsafe fn(*const f32, *const f32, usize) -> f32;

fn kernel() -> Option<Kernel> {
    static K: OnceLock<Option<Kernel>> = OnceLock::new();
    *K.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if Isa::Avx512.supported() {
                return Some(x86::dot_avx512 as Kernel);
            }
            if Isa::Avx2.supported() {
                return Some(x86::dot_avx2 as Kernel);
            }
        }
        None
    })
}

/// Whether this CPU runs the wide dot products (AVX-512F, or AVX2 with FMA), unless
/// `TDSL_DOT=0` keeps the JIT's own loops (to compare the two).
pub(crate) fn available() -> bool {
    kernel().is_some() && std::env::var("TDSL_DOT").map_or(true, |v| v != "0")
}

/// `Σ x[i]·y[i]` for `i < n`, or `Σ x[i]` when `y` is null; −0 for `n ≤ 0` (the identity of
/// `+`, so that `a + tdsl_dot_f32(…)` is `a` for an empty loop, −0 included). Registered with
/// the JIT under [`SYMBOL`]; generated code calls it only when [`available`] said so.
///
/// # Safety
/// `x[0..n]` (and `y[0..n]` unless `y` is null) are in bounds of their buffers (the loop-IR
/// verifier proved it for the loop the call replaces).
pub(crate) unsafe extern "C" fn tdsl_dot_f32(x: *const f32, y: *const f32, n: i64) -> f32 {
    let n = n.max(0) as usize;
    match kernel() {
        // SAFETY: the caller's contract; the kernel's instruction set is present.
        Some(k) => unsafe { k(x, y, n) },
        None => (0..n).fold(-0.0, |s, i| {
            // SAFETY: the caller's contract.
            unsafe {
                s + if y.is_null() {
                    *x.add(i)
                } else {
                    *x.add(i) * *y.add(i)
                }
            }
        }),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// One wide dot product: four accumulators of `$w` lanes, then one of them over the whole
    /// vectors left, then the last `n mod $w` values one at a time into a scalar.
    macro_rules! dot_kernel {
        (
            $name:ident, $feature:literal, $w:expr,
            $splat:ident, $load:ident, $add:ident, $fma:ident, $reduce:expr
        ) => {
            /// # Safety
            /// The instruction set is present; `tdsl_dot_f32`'s contract.
            #[target_feature(enable = $feature)]
            pub unsafe fn $name(x: *const f32, y: *const f32, n: usize) -> f32 {
                // The first values one at a time until `x` is aligned to the vector width:
                // a wide load that straddles two cache lines costs two, and an allocator's
                // 16-byte alignment made every 512-bit load of a matrix row straddle (a 4096²
                // matrix-vector product on one thread, in C: 1.58 ms aligned, 2.10 ms not).
                let mut head = -0.0f32;
                let mut i = 0;
                let lead = (x as usize).wrapping_neg() % (4 * $w) / 4;
                if (x as usize) % 4 == 0 {
                    while i < lead.min(n) {
                        head += if y.is_null() {
                            *x.add(i)
                        } else {
                            *x.add(i) * *y.add(i)
                        };
                        i += 1;
                    }
                }
                let mut acc = [$splat(-0.0); 4];
                if y.is_null() {
                    while i + 4 * $w <= n {
                        for (k, a) in acc.iter_mut().enumerate() {
                            *a = $add(*a, $load(x.add(i + k * $w)));
                        }
                        i += 4 * $w;
                    }
                    while i + $w <= n {
                        acc[0] = $add(acc[0], $load(x.add(i)));
                        i += $w;
                    }
                } else {
                    while i + 4 * $w <= n {
                        for (k, a) in acc.iter_mut().enumerate() {
                            let j = i + k * $w;
                            *a = $fma($load(x.add(j)), $load(y.add(j)), *a);
                        }
                        i += 4 * $w;
                    }
                    while i + $w <= n {
                        acc[0] = $fma($load(x.add(i)), $load(y.add(i)), acc[0]);
                        i += $w;
                    }
                }
                let v = $add($add(acc[0], acc[1]), $add(acc[2], acc[3]));
                let mut s: f32 = $reduce(v) + head;
                while i < n {
                    s += if y.is_null() {
                        *x.add(i)
                    } else {
                        *x.add(i) * *y.add(i)
                    };
                    i += 1;
                }
                s
            }
        };
    }

    dot_kernel!(
        dot_avx512,
        "avx512f",
        16,
        _mm512_set1_ps,
        _mm512_loadu_ps,
        _mm512_add_ps,
        _mm512_fmadd_ps,
        |v| _mm512_reduce_add_ps(v)
    );

    dot_kernel!(
        dot_avx2,
        "avx2,fma",
        8,
        _mm256_set1_ps,
        _mm256_loadu_ps,
        _mm256_add_ps,
        _mm256_fmadd_ps,
        |v: __m256| {
            let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps::<1>(h, h)))
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant this CPU runs against an f64 sum, over lengths around every step.
    #[test]
    fn wide_dot_products_match_an_f64_sum() {
        let mut kernels: Vec<(&str, Kernel)> = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if Isa::Avx512.supported() {
                kernels.push(("avx512", x86::dot_avx512 as Kernel));
            }
            if Isa::Avx2.supported() {
                kernels.push(("avx2", x86::dot_avx2 as Kernel));
            }
        }
        if kernels.is_empty() {
            eprintln!("skipped: this CPU has neither AVX-512F nor AVX2 with FMA");
            return;
        }
        let n_max = 300;
        let x: Vec<f32> = (0..n_max)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let y: Vec<f32> = (0..n_max)
            .map(|i| ((i * 53 % 89) as f32 - 44.0) / 5.0)
            .collect();
        for (name, k) in kernels {
            for n in 0..n_max {
                for with_y in [false, true] {
                    let want: f64 = (0..n)
                        .map(|i| x[i] as f64 * if with_y { y[i] as f64 } else { 1.0 })
                        .sum();
                    let yp = if with_y { y.as_ptr() } else { std::ptr::null() };
                    // SAFETY: both slices hold `n_max ≥ n` values; the CPU runs `k`.
                    let got = unsafe { k(x.as_ptr(), yp, n) } as f64;
                    let scale: f64 = (0..n).map(|i| (x[i] * y[i]).abs() as f64 + 1.0).sum();
                    assert!(
                        (got - want).abs() <= 1e-5 * scale,
                        "{name}, n = {n}, y: {with_y}: {got} against {want}"
                    );
                }
            }
            // SAFETY: n = 0 reads nothing.
            let empty = unsafe { k(x.as_ptr(), std::ptr::null(), 0) };
            assert!(
                empty == 0.0 && empty.is_sign_negative(),
                "{name}: the empty sum is −0"
            );
        }
    }
}
