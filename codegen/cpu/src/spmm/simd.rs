//! SIMD micro-kernels for the f32 fast paths of [`super`] (`spmm`): the only module of this
//! crate with `unsafe` code.
//!
//! Every public function here is safe: it checks every index and range it will touch against
//! its slices first (returning `Err` on a mismatch), then enters one `unsafe` block that runs
//! a `#[target_feature]` kernel working on raw pointers. The CPU feature is checked by the
//! caller through [`supported`] (and again here).
//!
//! Kernels are written once over a small vector trait [`x86::Vf`] (`Z` = AVX-512 `__m512`,
//! `Y` = AVX2 `__m256`) and instantiated inside `#[target_feature]` wrappers, so the
//! intrinsics inline into code compiled for that ISA.

use half::{bf16, f16};

use super::Isa;
use tdsl_sparse::SparseError;

/// Values as the kernels load them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ValSlice<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
}

impl<'a> ValSlice<'a> {
    pub(crate) fn len(&self) -> usize {
        match self {
            ValSlice::F32(v) => v.len(),
            ValSlice::F16(v) => v.len(),
            ValSlice::BF16(v) => v.len(),
        }
    }

    /// Values `a..b`, clamped to the slice (the callee checks lengths).
    pub(crate) fn slice(&self, a: usize, b: usize) -> ValSlice<'a> {
        let n = self.len();
        let (a, b) = (a.min(n), b.min(n));
        let (a, b) = (a.min(b), b);
        match *self {
            ValSlice::F32(v) => ValSlice::F32(&v[a..b]),
            ValSlice::F16(v) => ValSlice::F16(&v[a..b]),
            ValSlice::BF16(v) => ValSlice::BF16(&v[a..b]),
        }
    }
}

/// A row-major f32 matrix view: `(r, c)` at `data[off + r·ld + c]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub data: &'a [f32],
    pub off: usize,
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
}

/// A mutable row-major f32 matrix view.
#[derive(Debug)]
pub(crate) struct MatMut<'a> {
    pub data: &'a mut [f32],
    pub off: usize,
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
}

/// Whether every element of a `rows × cols` view with leading dimension `ld` at `off` lies
/// inside `len`, with rows not overlapping.
fn view_ok(len: usize, off: usize, rows: usize, cols: usize, ld: usize) -> bool {
    if rows == 0 || cols == 0 {
        return true;
    }
    if rows > 1 && ld < cols {
        return false;
    }
    (rows - 1)
        .checked_mul(ld)
        .and_then(|x| x.checked_add(off))
        .and_then(|x| x.checked_add(cols))
        .is_some_and(|end| end <= len)
}

impl Mat<'_> {
    fn check(&self, name: &str) -> Result<(), SparseError> {
        if view_ok(self.data.len(), self.off, self.rows, self.cols, self.ld) {
            Ok(())
        } else {
            Err(SparseError::invalid(format!(
                "simd: view {name} out of range"
            )))
        }
    }
}

impl MatMut<'_> {
    fn check(&self, name: &str) -> Result<(), SparseError> {
        if view_ok(self.data.len(), self.off, self.rows, self.cols, self.ld) {
            Ok(())
        } else {
            Err(SparseError::invalid(format!(
                "simd: view {name} out of range"
            )))
        }
    }
}

/// A BSR column index: block column `j` holds `entries[ptr[j]..ptr[j + 1]]`, each
/// `(block row, block position)`.
pub(crate) struct ColIndex<'a> {
    pub ptr: &'a [usize],
    pub entries: &'a [(u32, u32)],
}

/// The largest `n` the 2:4 permute kernel takes.
pub(crate) const TWO_FOUR_SMALL_N: usize = 8;

/// Whether this CPU runs code for `isa`.
pub(crate) fn supported(isa: Isa) -> bool {
    match isa {
        Isa::Scalar => true,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        }
        #[cfg(not(target_arch = "x86_64"))]
        _ => false,
    }
}

fn simd_isa(isa: Isa) -> Result<Isa, SparseError> {
    if isa == Isa::Scalar || !supported(isa) {
        Err(SparseError::shape(format!(
            "simd: {isa:?} is not a usable SIMD instruction set here"
        )))
    } else {
        Ok(isa)
    }
}

/// Checks `ptr` (a window of offsets, non-decreasing) against `idx` and the values: returns
/// the first and last offsets.
fn check_window(
    ptr: &[i32],
    idx: &[i32],
    nvals: usize,
    per: usize,
) -> Result<(usize, usize), SparseError> {
    if ptr.is_empty() || ptr[0] < 0 {
        return Err(SparseError::invalid("simd: bad offsets"));
    }
    if ptr.windows(2).any(|w| w[1] < w[0]) {
        return Err(SparseError::invalid("simd: offsets decrease"));
    }
    let (a, b) = (ptr[0] as usize, ptr[ptr.len() - 1] as usize);
    if b > idx.len() || b.checked_mul(per).is_none_or(|x| x > nvals) {
        return Err(SparseError::invalid("simd: offsets exceed the arrays"));
    }
    Ok((a, b))
}

/// The largest index as `u32` (a negative index counts as larger than any valid one); 0 for
/// none. Written as a fold so that it vectorises.
pub(crate) fn max_index(idx: &[i32]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if supported(Isa::Avx2) {
        // SAFETY: AVX2 is available (checked just above); the function only reads `idx`.
        return unsafe { x86::max_index_avx2(idx) };
    }
    idx.iter().fold(0u32, |m, &i| m.max(i as u32))
}

/// `vals[..len]` widened to f32.
pub(crate) fn widen(isa: Isa, vals: ValSlice, len: usize) -> Vec<f32> {
    let len = len.min(vals.len());
    let mut out = vec![0f32; len];
    let scalar = |out: &mut [f32]| match vals {
        ValSlice::F32(v) => out.copy_from_slice(&v[..len]),
        ValSlice::F16(v) => out.iter_mut().zip(v).for_each(|(o, x)| *o = x.to_f32()),
        ValSlice::BF16(v) => out.iter_mut().zip(v).for_each(|(o, x)| *o = x.to_f32()),
    };
    #[cfg(target_arch = "x86_64")]
    if let Ok(isa) = simd_isa(isa) {
        // SAFETY: `out` has `len` elements and `vals` at least `len`; the ISA is supported.
        unsafe { x86::widen(isa, vals, &mut out) };
        return out;
    }
    let _ = isa;
    scalar(&mut out);
    out
}

/// BSR times row-major `d`, for the block rows of `ptr` (a window of the offsets, one more
/// than the block rows); `c` holds exactly those block rows' rows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn bsr_left(
    isa: Isa,
    ptr: &[i32],
    idx: &[i32],
    vals: ValSlice,
    br: usize,
    bc: usize,
    d: Mat,
    c: MatMut,
    accumulate: bool,
) -> Result<(), SparseError> {
    let isa = simd_isa(isa)?;
    let per = br
        .checked_mul(bc)
        .ok_or_else(|| SparseError::shape("simd: block too large"))?;
    check_window(ptr, idx, vals.len(), per)?;
    let nbr = ptr.len() - 1;
    d.check("d")?;
    c.check("c")?;
    if c.rows != nbr * br || c.cols != d.cols || br == 0 || bc == 0 {
        return Err(SparseError::shape("simd: bsr_left shapes"));
    }
    let (a, b) = (ptr[0] as usize, ptr[nbr] as usize);
    if !idx[a..b].is_empty() && (max_index(&idx[a..b]) as usize + 1) * bc > d.rows {
        return Err(SparseError::invalid("simd: block column out of range"));
    }
    if c.rows == 0 || c.cols == 0 {
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: all block columns index rows of `d`, all offsets lie within `idx` and the
        // values, and both views are in range (checked above); the ISA is supported.
        unsafe { x86::bsr_left(isa, ptr, idx, vals, br, bc, d, c, accumulate) };
        Ok(())
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (isa, accumulate);
        Err(SparseError::internal("simd: not x86_64"))
    }
}

/// BSR on the right: `c[rows of this piece] (+)= d[r0.., :] · W`, W's blocks listed per block
/// column in `col`, values (f32) in `vals`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn bsr_right(
    isa: Isa,
    col: &ColIndex,
    vals: &[f32],
    br: usize,
    bc: usize,
    d: Mat,
    r0: usize,
    c: MatMut,
    accumulate: bool,
) -> Result<(), SparseError> {
    let isa = simd_isa(isa)?;
    d.check("d")?;
    c.check("c")?;
    let nbc = col.ptr.len().saturating_sub(1);
    if br == 0
        || bc == 0
        || c.cols != nbc * bc
        || r0 + c.rows > d.rows
        || col.ptr.is_empty()
        || col.ptr.windows(2).any(|w| w[1] < w[0])
        || col.ptr[nbc] > col.entries.len()
    {
        return Err(SparseError::shape("simd: bsr_right shapes"));
    }
    let per = br * bc;
    if col.entries[..col.ptr[nbc]].iter().any(|&(i, p)| {
        (i as usize + 1) * br > d.cols
            || (p as usize + 1)
                .checked_mul(per)
                .is_none_or(|x| x > vals.len())
    }) {
        return Err(SparseError::invalid("simd: bsr_right entry out of range"));
    }
    if c.rows == 0 || c.cols == 0 {
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    {
        let d = Mat {
            off: d.off + r0 * d.ld,
            rows: c.rows,
            ..d
        };
        // SAFETY: every entry's block row lies within d's columns and its block within the
        // values; d's rows r0..r0+c.rows exist; c is in range (checked above).
        unsafe { x86::bsr_right(isa, col, vals, br, bc, d, c, accumulate) };
        Ok(())
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (isa, accumulate);
        Err(SparseError::internal("simd: not x86_64"))
    }
}

fn check_two_four(vals: &ValSlice, meta: &[i32], k: usize, rows: usize) -> Result<(), SparseError> {
    if !k.is_multiple_of(4) || vals.len() < rows * (k / 2) || meta.len() < rows * k.div_ceil(32) {
        return Err(SparseError::shape("simd: 2:4 arrays too short"));
    }
    Ok(())
}

/// 2:4 along k (rows of `vals`/`meta` are the rows of `c`), `n ≤ 8`, with `xt = dᵀ` (n × k).
pub(crate) fn two_four_small(
    isa: Isa,
    vals: ValSlice,
    meta: &[i32],
    k: usize,
    xt: Mat,
    c: MatMut,
    accumulate: bool,
) -> Result<(), SparseError> {
    let isa = simd_isa(isa)?;
    xt.check("xt")?;
    c.check("c")?;
    check_two_four(&vals, meta, k, c.rows)?;
    if isa != Isa::Avx512 || xt.cols != k || xt.rows != c.cols || c.cols > TWO_FOUR_SMALL_N {
        return Err(SparseError::shape("simd: two_four_small shapes"));
    }
    if c.rows == 0 || c.cols == 0 {
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: values and meta cover every row of c, xt has n rows of k, c is in range.
        unsafe { x86::two_four_small(vals, meta, k, xt, c, accumulate) };
        Ok(())
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = accumulate;
        Err(SparseError::internal("simd: not x86_64"))
    }
}

/// 2:4 along k, any n: broadcast kept values against rows of `d` (k × n).
pub(crate) fn two_four_bcast(
    isa: Isa,
    vals: ValSlice,
    meta: &[i32],
    k: usize,
    d: Mat,
    c: MatMut,
    accumulate: bool,
) -> Result<(), SparseError> {
    let isa = simd_isa(isa)?;
    d.check("d")?;
    c.check("c")?;
    check_two_four(&vals, meta, k, c.rows)?;
    if d.rows != k || d.cols != c.cols {
        return Err(SparseError::shape("simd: two_four_bcast shapes"));
    }
    if c.rows == 0 || c.cols == 0 {
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: decoded columns are < k = d.rows (2-bit positions within groups of 4 of a
        // multiple of 4); values and meta cover every row of c; the views are in range.
        unsafe { x86::two_four_bcast(isa, vals, meta, k, d, c, accumulate) };
        Ok(())
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = accumulate;
        Err(SparseError::internal("simd: not x86_64"))
    }
}

/// CSR rows of `ptr` (a window) times row-major `d`.
pub(crate) fn csr_left(
    isa: Isa,
    ptr: &[i32],
    idx: &[i32],
    vals: ValSlice,
    d: Mat,
    c: MatMut,
    accumulate: bool,
) -> Result<(), SparseError> {
    let isa = simd_isa(isa)?;
    check_window(ptr, idx, vals.len(), 1)?;
    d.check("d")?;
    c.check("c")?;
    let m = ptr.len() - 1;
    if c.rows != m || c.cols != d.cols {
        return Err(SparseError::shape("simd: csr_left shapes"));
    }
    let (a, b) = (ptr[0] as usize, ptr[m] as usize);
    if !idx[a..b].is_empty() && max_index(&idx[a..b]) as usize >= d.rows {
        return Err(SparseError::invalid("simd: column out of range"));
    }
    if c.rows == 0 || c.cols == 0 {
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: offsets within idx and values, columns within d's rows, views in range.
        unsafe { x86::csr_left(isa, ptr, idx, vals, d, c, accumulate) };
        Ok(())
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = accumulate;
        Err(SparseError::internal("simd: not x86_64"))
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
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

    // ---------------------------------------------------------------- BSR left

    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn bsr_left(
        isa: Isa,
        ptr: &[i32],
        idx: &[i32],
        vals: ValSlice,
        br: usize,
        bc: usize,
        d: Mat,
        c: MatMut,
        accumulate: bool,
    ) {
        isa_dispatch!(
            isa,
            bsr_left,
            (
                ptr: &[i32],
                idx: &[i32],
                vals: ValSlice,
                br: usize,
                bc: usize,
                d: Mat,
                c: MatMut,
                accumulate: bool
            ),
            bsr_left_impl
        )
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn bsr_left_impl<V: Vf>(
        ptr: &[i32],
        idx: &[i32],
        vals: ValSlice,
        br: usize,
        bc: usize,
        d: Mat,
        c: MatMut,
        accumulate: bool,
    ) {
        let nbr = ptr.len() - 1;
        let n = d.cols;
        let per = br * bc;
        let dp = d.data.as_ptr().add(d.off);
        let cp = c.data.as_mut_ptr().add(c.off);
        let (ldd, ldc) = (d.ld, c.ld);
        if n == 1 && (d.rows <= 1 || ldd == 1) {
            match vals {
                ValSlice::F32(v) => {
                    bsr_mv::<V, f32>(ptr, idx, v.as_ptr(), br, bc, dp, cp, ldc, accumulate)
                }
                ValSlice::F16(v) => {
                    bsr_mv::<V, f16>(ptr, idx, v.as_ptr(), br, bc, dp, cp, ldc, accumulate)
                }
                ValSlice::BF16(v) => {
                    bsr_mv::<V, bf16>(ptr, idx, v.as_ptr(), br, bc, dp, cp, ldc, accumulate)
                }
            }
            return;
        }
        let mut buf: Vec<f32> = Vec::new();
        for ib in 0..nbr {
            let (b0, b1) = (ptr[ib] as usize, ptr[ib + 1] as usize);
            let nb = b1 - b0;
            let a: *const f32 = match vals {
                ValSlice::F32(v) => v.as_ptr().add(b0 * per),
                ValSlice::F16(v) => {
                    buf.resize(nb * per, 0.0);
                    widen_ptr::<V, f16>(v.as_ptr().add(b0 * per), buf.as_mut_ptr(), nb * per);
                    buf.as_ptr()
                }
                ValSlice::BF16(v) => {
                    buf.resize(nb * per, 0.0);
                    widen_ptr::<V, bf16>(v.as_ptr().add(b0 * per), buf.as_mut_ptr(), nb * per);
                    buf.as_ptr()
                }
            };
            let cols = idx.as_ptr().add(b0);
            let crow = cp.add(ib * br * ldc);
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn tile<V: Vf, const MR: usize, const NV: usize, const MASK: bool>(
                nb: usize,
                cols: *const i32,
                a: *const f32,
                per: usize,
                bc: usize,
                dp: *const f32,
                ldd: usize,
                c: *mut f32,
                ldc: usize,
                rem: usize,
                accumulate: bool,
            ) {
                let mut acc = init_acc::<V, MR, NV, MASK>(c, ldc, rem, accumulate);
                for b in 0..nb {
                    let jb = *cols.add(b) as usize * bc;
                    ukr::<V, MR, NV, MASK>(
                        &mut acc,
                        bc,
                        a.add(b * per),
                        bc,
                        dp.add(jb * ldd),
                        ldd,
                        rem,
                    );
                }
                store_acc::<V, MR, NV, MASK>(&acc, c, ldc, rem);
            }
            let w = V::W;
            let mut j0 = 0;
            while j0 < n {
                let left = n - j0;
                let (nv2, nvw, mask) = if left >= 2 * w {
                    (true, 2 * w, false)
                } else if left >= w {
                    (false, w, false)
                } else {
                    (false, left, true)
                };
                let mut r0 = 0;
                while r0 < br {
                    let mr = pick_mr::<V>(br - r0);
                    let ar = a.add(r0 * bc);
                    let dj = dp.add(j0);
                    let cr = crow.add(r0 * ldc + j0);
                    macro_rules! go {
                        ($mr:literal, $nv:literal, $m:literal) => {
                            tile::<V, $mr, $nv, $m>(
                                nb, cols, ar, per, bc, dj, ldd, cr, ldc, nvw, accumulate,
                            )
                        };
                    }
                    match (mr, nv2, mask) {
                        (8, true, _) => go!(8, 2, false),
                        (4, true, _) => go!(4, 2, false),
                        (2, true, _) => go!(2, 2, false),
                        (1, true, _) => go!(1, 2, false),
                        (8, false, false) => go!(8, 1, false),
                        (4, false, false) => go!(4, 1, false),
                        (2, false, false) => go!(2, 1, false),
                        (1, false, false) => go!(1, 1, false),
                        (8, false, true) => go!(8, 1, true),
                        (4, false, true) => go!(4, 1, true),
                        (2, false, true) => go!(2, 1, true),
                        _ => go!(1, 1, true),
                    }
                    r0 += mr;
                }
                j0 += nvw;
            }
        }
    }

    #[inline(always)]
    fn pick_mr<V: Vf>(left: usize) -> usize {
        let mr = left.min(V::MR);
        if mr >= 8 {
            8
        } else if mr >= 4 {
            4
        } else if mr >= 2 {
            2
        } else {
            1
        }
    }

    /// How many blocks ahead the BSR mat-vec prefetches (8 KiB for 32×32 f32 blocks).
    const PF_BLOCKS: usize = 2;

    /// BSR mat-vec: per block row, stream its blocks once, one vector accumulator per row
    /// (kept on the stack), reduced at the end.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn bsr_mv<V: Vf, E: Ld>(
        ptr: &[i32],
        idx: &[i32],
        a: *const E,
        br: usize,
        bc: usize,
        x: *const f32,
        y: *mut f32,
        ldy: usize,
        accumulate: bool,
    ) {
        const RG: usize = 64;
        let nbr = ptr.len() - 1;
        let per = br * bc;
        let full = bc / V::W * V::W;
        let rem = bc - full;
        let mut acc = [V::zero(); RG];
        for ib in 0..nbr {
            let (b0, b1) = (ptr[ib] as usize, ptr[ib + 1] as usize);
            let mut r0 = 0;
            while r0 < br {
                let rg = (br - r0).min(RG);
                for a in acc.iter_mut().take(rg) {
                    *a = V::zero();
                }
                for b in b0..b1 {
                    let xb = x.add(*idx.as_ptr().add(b) as usize * bc);
                    let ab = a.add(b * per + r0 * bc);
                    // Prefetch the values PF_BLOCKS blocks ahead, one line per 64 bytes (a
                    // prefetch past the array never faults).
                    let ahead = ab.wrapping_add(PF_BLOCKS * per) as *const i8;
                    let bytes = rg * bc * std::mem::size_of::<E>();
                    let mut off = 0;
                    while off < bytes {
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(off));
                        off += 64;
                    }
                    let mut q = 0;
                    while q < full {
                        let xv = V::load(xb.add(q));
                        for (r, acc_r) in acc.iter_mut().enumerate().take(rg) {
                            *acc_r = V::fma(E::ld::<V>(ab.add(r * bc + q)), xv, *acc_r);
                        }
                        q += V::W;
                    }
                    if rem > 0 {
                        let xv = V::load_n(xb.add(q), rem);
                        for (r, acc_r) in acc.iter_mut().enumerate().take(rg) {
                            *acc_r = V::fma(E::ld_n::<V>(ab.add(r * bc + q), rem), xv, *acc_r);
                        }
                    }
                }
                for (r, acc_r) in acc.iter().enumerate().take(rg) {
                    let p = y.add((ib * br + r0 + r) * ldy);
                    let s = acc_r.hsum();
                    *p = if accumulate { *p + s } else { s };
                }
                r0 += rg;
            }
        }
    }

    // ---------------------------------------------------------------- BSR right

    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn bsr_right(
        isa: Isa,
        col: &ColIndex,
        vals: &[f32],
        br: usize,
        bc: usize,
        d: Mat,
        c: MatMut,
        accumulate: bool,
    ) {
        isa_dispatch!(
            isa,
            bsr_right,
            (
                col: &ColIndex,
                vals: &[f32],
                br: usize,
                bc: usize,
                d: Mat,
                c: MatMut,
                accumulate: bool
            ),
            bsr_right_impl
        )
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn bsr_right_impl<V: Vf>(
        col: &ColIndex,
        vals: &[f32],
        br: usize,
        bc: usize,
        d: Mat,
        c: MatMut,
        accumulate: bool,
    ) {
        let nbc = col.ptr.len() - 1;
        let per = br * bc;
        let dp = d.data.as_ptr().add(d.off);
        let cp = c.data.as_mut_ptr().add(c.off);
        let (ldd, ldc) = (d.ld, c.ld);
        let rows = c.rows;
        let vp = vals.as_ptr();
        #[inline(always)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn tile<V: Vf, const MR: usize, const NV: usize, const MASK: bool>(
            ents: &[(u32, u32)],
            vp: *const f32,
            per: usize,
            br: usize,
            bc: usize,
            d: *const f32,
            ldd: usize,
            c: *mut f32,
            ldc: usize,
            rem: usize,
            accumulate: bool,
        ) {
            let mut acc = init_acc::<V, MR, NV, MASK>(c, ldc, rem, accumulate);
            for &(i, p) in ents {
                ukr::<V, MR, NV, MASK>(
                    &mut acc,
                    br,
                    d.add(i as usize * br),
                    ldd,
                    vp.add(p as usize * per),
                    bc,
                    rem,
                );
            }
            store_acc::<V, MR, NV, MASK>(&acc, c, ldc, rem);
        }
        for jb in 0..nbc {
            let ents = &col.entries[col.ptr[jb]..col.ptr[jb + 1]];
            let w = V::W;
            let mut q0 = 0;
            while q0 < bc {
                let left = bc - q0;
                let (nv2, nvw, mask) = if left >= 2 * w {
                    (true, 2 * w, false)
                } else if left >= w {
                    (false, w, false)
                } else {
                    (false, left, true)
                };
                let mut r0 = 0;
                while r0 < rows {
                    let mr = pick_mr::<V>(rows - r0);
                    let dr = dp.add(r0 * ldd);
                    let cr = cp.add(r0 * ldc + jb * bc + q0);
                    let vq = vp.add(q0);
                    macro_rules! go {
                        ($mr:literal, $nv:literal, $m:literal) => {
                            tile::<V, $mr, $nv, $m>(
                                ents, vq, per, br, bc, dr, ldd, cr, ldc, nvw, accumulate,
                            )
                        };
                    }
                    match (mr, nv2, mask) {
                        (8, true, _) => go!(8, 2, false),
                        (4, true, _) => go!(4, 2, false),
                        (2, true, _) => go!(2, 2, false),
                        (1, true, _) => go!(1, 2, false),
                        (8, false, false) => go!(8, 1, false),
                        (4, false, false) => go!(4, 1, false),
                        (2, false, false) => go!(2, 1, false),
                        (1, false, false) => go!(1, 1, false),
                        (8, false, true) => go!(8, 1, true),
                        (4, false, true) => go!(4, 1, true),
                        (2, false, true) => go!(2, 1, true),
                        _ => go!(1, 1, true),
                    }
                    r0 += mr;
                }
                q0 += nvw;
            }
        }
    }

    // ---------------------------------------------------------------- 2:4, small n

    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn two_four_small(
        vals: ValSlice,
        meta: &[i32],
        k: usize,
        xt: Mat,
        c: MatMut,
        accumulate: bool,
    ) {
        match vals {
            ValSlice::F32(v) => tf_small::<f32>(v.as_ptr(), meta, k, xt, c, accumulate),
            ValSlice::F16(v) => tf_small::<f16>(v.as_ptr(), meta, k, xt, c, accumulate),
            ValSlice::BF16(v) => tf_small::<bf16>(v.as_ptr(), meta, k, xt, c, accumulate),
        }
    }

    /// Two rows at a time share the loads of `xt` but read two streams of values and meta:
    /// for a mat-vec (memory-bound) one stream is faster, from n = 2 on pairs are.
    const TWO_ROWS_FROM_N: usize = 1;
    /// How many rows ahead the 2:4 kernel prefetches its values and meta.
    const PF_ROWS: usize = 4;

    #[inline(always)]
    unsafe fn tf_small<E: Ld>(
        vals: *const E,
        meta: &[i32],
        k: usize,
        xt: Mat,
        c: MatMut,
        accumulate: bool,
    ) {
        let n = c.cols;
        let rows = c.rows;
        let cp = (c.data.as_mut_ptr().add(c.off), c.ld);
        // Blocks of words (32 columns each) small enough that the n rows of xt they cover
        // stay in L1 (32 KiB) while every row of c passes over them.
        let words = k.div_ceil(32);
        let kw = (256 / n.max(1)).max(1);
        let mut w0 = 0;
        while w0 < words {
            let w1 = (w0 + kw).min(words);
            let first = w0 == 0 && !accumulate;
            let mut r = 0;
            macro_rules! go {
                ($r:literal, $n:literal) => {
                    tf_rows::<E, $r, $n>(vals, meta, k, &xt, cp, r, (w0, w1), first)
                };
            }
            while r < rows {
                if r + 2 <= rows && n > TWO_ROWS_FROM_N {
                    match n {
                        1 => go!(2, 1),
                        2 => go!(2, 2),
                        3 => go!(2, 3),
                        4 => go!(2, 4),
                        5 => go!(2, 5),
                        6 => go!(2, 6),
                        7 => go!(2, 7),
                        _ => go!(2, 8),
                    }
                    r += 2;
                } else {
                    match n {
                        1 => go!(1, 1),
                        2 => go!(1, 2),
                        3 => go!(1, 3),
                        4 => go!(1, 4),
                        5 => go!(1, 5),
                        6 => go!(1, 6),
                        7 => go!(1, 7),
                        _ => go!(1, 8),
                    }
                    r += 1;
                }
            }
            w0 = w1;
        }
    }

    /// Rows `r..r + R` of a 2:4 matrix (along k) times `xtᵀ` (N columns): per chunk of 16
    /// kept values (one meta word, 32 columns), decode the column of each lane, permute the
    /// 32-column window of every `xt` row into place and multiply-add.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tf_rows<E: Ld, const R: usize, const N: usize>(
        vals: *const E,
        meta: &[i32],
        k: usize,
        xt: &Mat,
        (cp, ldc): (*mut f32, usize),
        r: usize,
        (w0, w1): (usize, usize),
        overwrite: bool,
    ) {
        let half = k / 2;
        let words = k.div_ceil(32);
        let shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let base = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
        let three = _mm512_set1_epi32(3);
        let xp = xt.data.as_ptr().add(xt.off);
        let mp = meta.as_ptr();
        let mut acc = [[_mm512_setzero_ps(); N]; R];
        // A mat-vec row has a single FMA chain: alternate two accumulators over words.
        let dual = N * R == 1;
        let mut acc_b = [[_mm512_setzero_ps(); N]; R];
        for w in w0..w1 {
            let ncols = (k - 32 * w).min(32);
            let nkept = ncols / 2;
            let mut vv = [_mm512_setzero_ps(); R];
            let mut ix = [_mm512_setzero_si512(); R];
            for i in 0..R {
                let row = r + i;
                let vptr = vals.add(row * half + 16 * w);
                // The values stream is the bottleneck: fetch the same word of the rows
                // PF_ROWS further on (the next pass over this word block reads them; a
                // prefetch past the end of the array is harmless, it never faults).
                _mm_prefetch::<_MM_HINT_T0>(vptr.wrapping_add(PF_ROWS * half) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(
                    mp.wrapping_add((row + PF_ROWS) * words + w) as *const i8
                );
                vv[i] = if nkept == 16 {
                    E::ld::<Z>(vptr).0
                } else {
                    E::ld_n::<Z>(vptr, nkept).0
                };
                let word = _mm512_set1_epi32(*mp.add(row * words + w));
                let pos = _mm512_and_si512(_mm512_srlv_epi32(word, shifts), three);
                ix[i] = _mm512_add_epi32(pos, base);
            }
            for j in 0..N {
                let xr = xp.add(j * xt.ld + 32 * w);
                let (x0, x1) = if ncols == 32 {
                    (_mm512_loadu_ps(xr), _mm512_loadu_ps(xr.add(16)))
                } else if ncols > 16 {
                    (_mm512_loadu_ps(xr), Z::load_n(xr.add(16), ncols - 16).0)
                } else {
                    let lo = if ncols == 16 {
                        _mm512_loadu_ps(xr)
                    } else {
                        Z::load_n(xr, ncols).0
                    };
                    (lo, _mm512_setzero_ps())
                };
                for i in 0..R {
                    let g = _mm512_permutex2var_ps(x0, ix[i], x1);
                    if dual && w % 2 == 1 {
                        acc_b[i][j] = _mm512_fmadd_ps(vv[i], g, acc_b[i][j]);
                    } else {
                        acc[i][j] = _mm512_fmadd_ps(vv[i], g, acc[i][j]);
                    }
                }
            }
        }
        for i in 0..R {
            for j in 0..N {
                let p = cp.add((r + i) * ldc + j);
                let mut sum = acc[i][j];
                if dual {
                    sum = _mm512_add_ps(sum, acc_b[i][j]);
                }
                let s = _mm512_reduce_add_ps(sum);
                *p = if overwrite { s } else { *p + s };
            }
        }
    }

    // ---------------------------------------------------------------- 2:4, broadcast

    pub(super) unsafe fn two_four_bcast(
        isa: Isa,
        vals: ValSlice,
        meta: &[i32],
        k: usize,
        d: Mat,
        c: MatMut,
        accumulate: bool,
    ) {
        isa_dispatch!(
            isa,
            two_four_bcast,
            (
                vals: ValSlice,
                meta: &[i32],
                k: usize,
                d: Mat,
                c: MatMut,
                accumulate: bool
            ),
            tf_bcast_impl
        )
    }

    #[inline(always)]
    unsafe fn tf_bcast_impl<V: Vf>(
        vals: ValSlice,
        meta: &[i32],
        k: usize,
        d: Mat,
        c: MatMut,
        accumulate: bool,
    ) {
        // Half values are widened a block of rows at a time (reused across column tiles).
        const MB: usize = 64;
        let (half, words) = (k / 2, k.div_ceil(32));
        let mut buf: Vec<f32> = Vec::new();
        let mut m0 = 0;
        while m0 < c.rows {
            let mb = match vals {
                ValSlice::F32(_) => c.rows,
                _ => (c.rows - m0).min(MB),
            };
            let vp: *const f32 = match vals {
                ValSlice::F32(v) => v.as_ptr(),
                ValSlice::F16(v) => {
                    buf.resize(mb * half, 0.0);
                    widen_ptr::<V, f16>(v.as_ptr().add(m0 * half), buf.as_mut_ptr(), mb * half);
                    buf.as_ptr()
                }
                ValSlice::BF16(v) => {
                    buf.resize(mb * half, 0.0);
                    widen_ptr::<V, bf16>(v.as_ptr().add(m0 * half), buf.as_mut_ptr(), mb * half);
                    buf.as_ptr()
                }
            };
            let sub = MatMut {
                data: &mut *c.data,
                off: c.off + m0 * c.ld,
                rows: mb,
                cols: c.cols,
                ld: c.ld,
            };
            tf_bcast::<V, f32>(vp, &meta[m0 * words..], k, d, sub, accumulate);
            m0 += mb;
        }
    }

    #[inline(always)]
    unsafe fn tf_bcast<V: Vf, E: Ld>(
        vals: *const E,
        meta: &[i32],
        k: usize,
        d: Mat,
        c: MatMut,
        accumulate: bool,
    ) {
        const MB: usize = 64;
        const GB: usize = 32;
        let n = c.cols;
        let rows = c.rows;
        let dp = d.data.as_ptr().add(d.off);
        let cp = c.data.as_mut_ptr().add(c.off);
        let (ldd, ldc) = (d.ld, c.ld);
        let mp = meta.as_ptr();
        #[inline(always)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn tile<V: Vf, E: Ld, const R: usize, const NV: usize, const MASK: bool>(
            vals: *const E,
            mp: *const i32,
            k: usize,
            row: usize,
            dp: *const f32,
            ldd: usize,
            c: *mut f32,
            ldc: usize,
            rem: usize,
            groups: (usize, usize),
            load_c: bool,
        ) {
            let half = k / 2;
            let words = k.div_ceil(32);
            let mut acc = init_acc::<V, R, NV, MASK>(c, ldc, rem, load_c);
            for g in groups.0..groups.1 {
                for (i, acc_i) in acc.iter_mut().enumerate() {
                    let rr = row + i;
                    let word = *mp.add(rr * words + g / 8) as u32;
                    let nib = (word >> (4 * (g % 8))) as usize;
                    let c0 = 4 * g + (nib & 3);
                    let c1 = 4 * g + ((nib >> 2) & 3);
                    let s0 = V::splat(E::get(vals.add(rr * half + 2 * g)));
                    let s1 = V::splat(E::get(vals.add(rr * half + 2 * g + 1)));
                    let l0 = dp.add(c0 * ldd);
                    let l1 = dp.add(c1 * ldd);
                    for v in 0..NV {
                        let (x0, x1) = if MASK && v == NV - 1 {
                            (
                                V::load_n(l0.add(v * V::W), rem),
                                V::load_n(l1.add(v * V::W), rem),
                            )
                        } else {
                            (V::load(l0.add(v * V::W)), V::load(l1.add(v * V::W)))
                        };
                        acc_i[v] = V::fma(s0, x0, acc_i[v]);
                        acc_i[v] = V::fma(s1, x1, acc_i[v]);
                    }
                }
            }
            store_acc::<V, R, NV, MASK>(&acc, c, ldc, rem);
        }
        let w = V::W;
        let mut m0 = 0;
        while m0 < rows {
            let m1 = (m0 + MB).min(rows);
            let mut j0 = 0;
            while j0 < n {
                let left = n - j0;
                let (nv4, nvw, mask) = if left >= 4 * w {
                    (true, 4 * w, false)
                } else if left >= w {
                    (false, w, false)
                } else {
                    (false, left, true)
                };
                // Blocks of GB groups (4·GB rows of d) so the d tile stays in L1.
                let mut g0 = 0;
                while g0 < k / 4 {
                    let g1 = (g0 + GB).min(k / 4);
                    let load_c = accumulate || g0 > 0;
                    let mut r = m0;
                    while r < m1 {
                        let two = r + 2 <= m1;
                        let cr = cp.add(r * ldc + j0);
                        let dj = dp.add(j0);
                        macro_rules! go {
                            ($r:literal, $nv:literal, $m:literal) => {
                                tile::<V, E, $r, $nv, $m>(
                                    vals,
                                    mp,
                                    k,
                                    r,
                                    dj,
                                    ldd,
                                    cr,
                                    ldc,
                                    nvw,
                                    (g0, g1),
                                    load_c,
                                )
                            };
                        }
                        match (two, nv4, mask) {
                            (true, true, _) => go!(2, 4, false),
                            (false, true, _) => go!(1, 4, false),
                            (true, false, false) => go!(2, 1, false),
                            (false, false, false) => go!(1, 1, false),
                            (true, false, true) => go!(2, 1, true),
                            (false, false, true) => go!(1, 1, true),
                        }
                        r += if two { 2 } else { 1 };
                    }
                    g0 = g1;
                }
                j0 += nvw;
            }
            m0 = m1;
        }
    }

    // ---------------------------------------------------------------- CSR left

    pub(super) unsafe fn csr_left(
        isa: Isa,
        ptr: &[i32],
        idx: &[i32],
        vals: ValSlice,
        d: Mat,
        c: MatMut,
        accumulate: bool,
    ) {
        isa_dispatch!(
            isa,
            csr_left,
            (
                ptr: &[i32],
                idx: &[i32],
                vals: ValSlice,
                d: Mat,
                c: MatMut,
                accumulate: bool
            ),
            csr_left_impl
        )
    }

    #[inline(always)]
    unsafe fn csr_left_impl<V: Vf>(
        ptr: &[i32],
        idx: &[i32],
        vals: ValSlice,
        d: Mat,
        c: MatMut,
        accumulate: bool,
    ) {
        match vals {
            ValSlice::F32(v) => csr_rows::<V, f32>(ptr, idx, v.as_ptr(), d, c, accumulate),
            ValSlice::F16(v) => csr_rows::<V, f16>(ptr, idx, v.as_ptr(), d, c, accumulate),
            ValSlice::BF16(v) => csr_rows::<V, bf16>(ptr, idx, v.as_ptr(), d, c, accumulate),
        }
    }

    #[inline(always)]
    unsafe fn csr_rows<V: Vf, E: Ld>(
        ptr: &[i32],
        idx: &[i32],
        vals: *const E,
        d: Mat,
        c: MatMut,
        accumulate: bool,
    ) {
        let m = c.rows;
        let n = c.cols;
        let dp = d.data.as_ptr().add(d.off);
        let cp = c.data.as_mut_ptr().add(c.off);
        let (ldd, ldc) = (d.ld, c.ld);
        let ip = idx.as_ptr();
        if n == 1 {
            for r in 0..m {
                let (a, b) = (ptr[r] as usize, ptr[r + 1] as usize);
                let mut s = [0f32; 4];
                let mut e = a;
                while e + 4 <= b {
                    for (t, st) in s.iter_mut().enumerate() {
                        let kk = *ip.add(e + t) as usize;
                        *st += E::get(vals.add(e + t)) * *dp.add(kk * ldd);
                    }
                    e += 4;
                }
                while e < b {
                    s[0] += E::get(vals.add(e)) * *dp.add(*ip.add(e) as usize * ldd);
                    e += 1;
                }
                let sum = (s[0] + s[1]) + (s[2] + s[3]);
                let p = cp.add(r * ldc);
                *p = if accumulate { *p + sum } else { sum };
            }
            return;
        }
        #[inline(always)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn tile<V: Vf, E: Ld, const NV: usize, const MASK: bool>(
            a: usize,
            b: usize,
            ip: *const i32,
            vals: *const E,
            dp: *const f32,
            ldd: usize,
            c: *mut f32,
            rem: usize,
            accumulate: bool,
        ) {
            // Two sets of accumulators (even and odd entries) for twice the independent
            // FMA chains.
            let mut acc = init_acc::<V, 1, NV, MASK>(c, 0, rem, accumulate);
            let mut acc2 = [[V::zero(); NV]; 1];
            let step = |acc: &mut [[V; NV]; 1], e: usize| {
                let s = V::splat(E::get(vals.add(e)));
                let l = dp.add(*ip.add(e) as usize * ldd);
                for v in 0..NV {
                    let x = if MASK && v == NV - 1 {
                        V::load_n(l.add(v * V::W), rem)
                    } else {
                        V::load(l.add(v * V::W))
                    };
                    acc[0][v] = V::fma(s, x, acc[0][v]);
                }
            };
            let mut e = a;
            while e + 2 <= b {
                step(&mut acc, e);
                step(&mut acc2, e + 1);
                e += 2;
            }
            if e < b {
                step(&mut acc, e);
            }
            for v in 0..NV {
                acc[0][v] = V::fma(V::splat(1.0), acc2[0][v], acc[0][v]);
            }
            store_acc::<V, 1, NV, MASK>(&acc, c, 0, rem);
        }
        let w = V::W;
        let mut j0 = 0;
        while j0 < n {
            let left = n - j0;
            let (nv4, nvw, mask) = if left >= 4 * w {
                (true, 4 * w, false)
            } else if left >= w {
                (false, w, false)
            } else {
                (false, left, true)
            };
            let dj = dp.add(j0);
            for r in 0..m {
                let (a, b) = (ptr[r] as usize, ptr[r + 1] as usize);
                let cr = cp.add(r * ldc + j0);
                match (nv4, mask) {
                    (true, _) => {
                        tile::<V, E, 4, false>(a, b, ip, vals, dj, ldd, cr, nvw, accumulate)
                    }
                    (false, false) => {
                        tile::<V, E, 1, false>(a, b, ip, vals, dj, ldd, cr, nvw, accumulate)
                    }
                    (false, true) => {
                        tile::<V, E, 1, true>(a, b, ip, vals, dj, ldd, cr, nvw, accumulate)
                    }
                }
            }
            j0 += nvw;
        }
    }
}
