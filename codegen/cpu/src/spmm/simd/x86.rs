//! The kernels. Every function here is `unsafe`: callers (above) guarantee that the
//! pointers they derive stay within the checked slices and that the ISA is supported.
// Register tiles read best as index loops over their constant extents.
#![allow(clippy::needless_range_loop)]

use super::Isa;
use super::{ColIndex, Mat, MatMut, ValSlice};
use half::{bf16, f16};
use std::arch::x86_64::*;

/// A vector of f32 lanes.
pub(super) trait Vf: Copy {
    const W: usize;
    /// Rows of the register-blocked micro-kernel.
    const MR: usize;
    unsafe fn zero() -> Self;
    unsafe fn splat(x: f32) -> Self;
    unsafe fn load(p: *const f32) -> Self;
    /// Loads `n < W` lanes, zero-filling the rest.
    unsafe fn load_n(p: *const f32, n: usize) -> Self;
    unsafe fn load_h(p: *const u16) -> Self;
    unsafe fn load_b(p: *const u16) -> Self;
    unsafe fn store(self, p: *mut f32);
    unsafe fn store_n(self, p: *mut f32, n: usize);
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
    unsafe fn hsum(self) -> f32;
}

#[derive(Clone, Copy)]
pub(super) struct Z(__m512);
#[derive(Clone, Copy)]
pub(super) struct Y(__m256);

impl Vf for Z {
    const W: usize = 16;
    const MR: usize = 8;
    #[inline(always)]
    unsafe fn zero() -> Self {
        Z(_mm512_setzero_ps())
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Z(_mm512_set1_ps(x))
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        Z(_mm512_loadu_ps(p))
    }
    #[inline(always)]
    unsafe fn load_n(p: *const f32, n: usize) -> Self {
        Z(_mm512_maskz_loadu_ps(((1u32 << n) - 1) as u16, p))
    }
    #[inline(always)]
    unsafe fn load_h(p: *const u16) -> Self {
        Z(_mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)))
    }
    #[inline(always)]
    unsafe fn load_b(p: *const u16) -> Self {
        let w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p as *const __m256i));
        Z(_mm512_castsi512_ps(_mm512_slli_epi32::<16>(w)))
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        _mm512_storeu_ps(p, self.0)
    }
    #[inline(always)]
    unsafe fn store_n(self, p: *mut f32, n: usize) {
        _mm512_mask_storeu_ps(p, ((1u32 << n) - 1) as u16, self.0)
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        Z(_mm512_fmadd_ps(a.0, b.0, c.0))
    }
    #[inline(always)]
    unsafe fn hsum(self) -> f32 {
        _mm512_reduce_add_ps(self.0)
    }
}

#[inline(always)]
unsafe fn ymask(n: usize) -> __m256i {
    _mm256_cmpgt_epi32(
        _mm256_set1_epi32(n as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    )
}

impl Vf for Y {
    const W: usize = 8;
    const MR: usize = 4;
    #[inline(always)]
    unsafe fn zero() -> Self {
        Y(_mm256_setzero_ps())
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Y(_mm256_set1_ps(x))
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        Y(_mm256_loadu_ps(p))
    }
    #[inline(always)]
    unsafe fn load_n(p: *const f32, n: usize) -> Self {
        Y(_mm256_maskload_ps(p, ymask(n)))
    }
    #[inline(always)]
    unsafe fn load_h(p: *const u16) -> Self {
        Y(_mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)))
    }
    #[inline(always)]
    unsafe fn load_b(p: *const u16) -> Self {
        let w = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
        Y(_mm256_castsi256_ps(_mm256_slli_epi32::<16>(w)))
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        _mm256_storeu_ps(p, self.0)
    }
    #[inline(always)]
    unsafe fn store_n(self, p: *mut f32, n: usize) {
        _mm256_maskstore_ps(p, ymask(n), self.0)
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        Y(_mm256_fmadd_ps(a.0, b.0, c.0))
    }
    #[inline(always)]
    unsafe fn hsum(self) -> f32 {
        let lo = _mm256_castps256_ps128(self.0);
        let hi = _mm256_extractf128_ps::<1>(self.0);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
        _mm_cvtss_f32(s)
    }
}

/// A stored value type the kernels load as f32 vectors.
pub(super) trait Ld: Copy {
    unsafe fn ld<V: Vf>(p: *const Self) -> V;
    unsafe fn ld_n<V: Vf>(p: *const Self, n: usize) -> V;
    unsafe fn get(p: *const Self) -> f32;
}

impl Ld for f32 {
    #[inline(always)]
    unsafe fn ld<V: Vf>(p: *const Self) -> V {
        V::load(p)
    }
    #[inline(always)]
    unsafe fn ld_n<V: Vf>(p: *const Self, n: usize) -> V {
        V::load_n(p, n)
    }
    #[inline(always)]
    unsafe fn get(p: *const Self) -> f32 {
        *p
    }
}

#[inline(always)]
unsafe fn copy16(p: *const u16, n: usize) -> [u16; 16] {
    let mut buf = [0u16; 16];
    std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n);
    buf
}

impl Ld for f16 {
    #[inline(always)]
    unsafe fn ld<V: Vf>(p: *const Self) -> V {
        V::load_h(p as *const u16)
    }
    #[inline(always)]
    unsafe fn ld_n<V: Vf>(p: *const Self, n: usize) -> V {
        let buf = copy16(p as *const u16, n);
        V::load_h(buf.as_ptr())
    }
    #[inline(always)]
    unsafe fn get(p: *const Self) -> f32 {
        let bits = *(p as *const u16);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }
}

impl Ld for bf16 {
    #[inline(always)]
    unsafe fn ld<V: Vf>(p: *const Self) -> V {
        V::load_b(p as *const u16)
    }
    #[inline(always)]
    unsafe fn ld_n<V: Vf>(p: *const Self, n: usize) -> V {
        let buf = copy16(p as *const u16, n);
        V::load_b(buf.as_ptr())
    }
    #[inline(always)]
    unsafe fn get(p: *const Self) -> f32 {
        f32::from_bits((*(p as *const u16) as u32) << 16)
    }
}

/// Instantiates `$body::<V>` (a generic inline function) for each ISA behind a
/// `#[target_feature]` wrapper and dispatches on `$isa`.
macro_rules! isa_dispatch {
    ($isa:expr, $name:ident, ($($arg:ident : $ty:ty),*), $body:ident) => {{
        #[target_feature(enable = "avx512f,avx2,fma,f16c")]
        unsafe fn z_impl($($arg: $ty),*) {
            $body::<Z>($($arg),*)
        }
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn y_impl($($arg: $ty),*) {
            $body::<Y>($($arg),*)
        }
        match $isa {
            Isa::Avx512 => z_impl($($arg),*),
            _ => y_impl($($arg),*),
        }
    }};
}

/// [`super::max_index`] compiled for AVX2: `vpmaxud` where the SSE2 baseline emulates
/// an unsigned max with several instructions per lane (that check cost as much as the
/// CSR mat-vec it guards).
#[target_feature(enable = "avx2")]
pub(super) unsafe fn max_index_avx2(idx: &[i32]) -> u32 {
    idx.iter().fold(0u32, |m, &i| m.max(i as u32))
}

// ---------------------------------------------------------------- widening

pub(super) unsafe fn widen(isa: Isa, vals: ValSlice, out: &mut [f32]) {
    isa_dispatch!(isa, widen, (vals: ValSlice, out: &mut [f32]), widen_impl)
}

#[inline(always)]
unsafe fn widen_impl<V: Vf>(vals: ValSlice, out: &mut [f32]) {
    let n = out.len();
    let o = out.as_mut_ptr();
    match vals {
        ValSlice::F32(v) => out.copy_from_slice(&v[..n]),
        ValSlice::F16(v) => widen_ptr::<V, f16>(v.as_ptr(), o, n),
        ValSlice::BF16(v) => widen_ptr::<V, bf16>(v.as_ptr(), o, n),
    }
}

#[inline(always)]
unsafe fn widen_ptr<V: Vf, E: Ld>(src: *const E, dst: *mut f32, n: usize) {
    let mut i = 0;
    while i + V::W <= n {
        E::ld::<V>(src.add(i)).store(dst.add(i));
        i += V::W;
    }
    if i < n {
        E::ld_n::<V>(src.add(i), n - i).store_n(dst.add(i), n - i);
    }
}

// ---------------------------------------------------------------- micro-kernel

/// `acc[r][v] += Σ_k b[r·bs_m + k] · l[k·l_k + v·W]` for `k < kk`: broadcast one operand,
/// load rows of the other. With `MASK`, the last vector has `rem` lanes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn ukr<V: Vf, const MR: usize, const NV: usize, const MASK: bool>(
    acc: &mut [[V; NV]; MR],
    kk: usize,
    b: *const f32,
    bs_m: usize,
    l: *const f32,
    l_k: usize,
    rem: usize,
) {
    let mut lp = l;
    for k in 0..kk {
        let mut lv = [V::zero(); NV];
        for (v, x) in lv.iter_mut().enumerate() {
            *x = if MASK && v == NV - 1 {
                V::load_n(lp.add(v * V::W), rem)
            } else {
                V::load(lp.add(v * V::W))
            };
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let s = V::splat(*b.add(r * bs_m + k));
            for v in 0..NV {
                row[v] = V::fma(s, lv[v], row[v]);
            }
        }
        lp = lp.add(l_k);
    }
}

#[inline(always)]
unsafe fn init_acc<V: Vf, const MR: usize, const NV: usize, const MASK: bool>(
    c: *mut f32,
    ldc: usize,
    rem: usize,
    accumulate: bool,
) -> [[V; NV]; MR] {
    let mut acc = [[V::zero(); NV]; MR];
    if accumulate {
        for (r, row) in acc.iter_mut().enumerate() {
            for (v, x) in row.iter_mut().enumerate() {
                let p = c.add(r * ldc + v * V::W);
                *x = if MASK && v == NV - 1 {
                    V::load_n(p, rem)
                } else {
                    V::load(p)
                };
            }
        }
    }
    acc
}

#[inline(always)]
unsafe fn store_acc<V: Vf, const MR: usize, const NV: usize, const MASK: bool>(
    acc: &[[V; NV]; MR],
    c: *mut f32,
    ldc: usize,
    rem: usize,
) {
    for (r, row) in acc.iter().enumerate() {
        for (v, x) in row.iter().enumerate() {
            let p = c.add(r * ldc + v * V::W);
            if MASK && v == NV - 1 {
                x.store_n(p, rem)
            } else {
                x.store(p)
            }
        }
    }
}

mod bsr;
mod csr;
mod two_four;

pub(super) use bsr::{bsr_left, bsr_right};
pub(super) use csr::csr_left;
pub(super) use two_four::{two_four_bcast, two_four_small};
