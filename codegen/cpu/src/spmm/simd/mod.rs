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

/// Runs an x86 kernel once the checks before it have passed (its `// SAFETY:` comment stands
/// just above); on other architectures there are no SIMD kernels, and `$unused` are the
/// arguments only the kernel would read.
macro_rules! on_x86 {
    ($unused:expr; $call:expr) => {{
        #[cfg(target_arch = "x86_64")]
        {
            $call;
            Ok(())
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = $unused;
            Err(SparseError::internal("simd: not x86_64"))
        }
    }};
}

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
    // SAFETY: all block columns index rows of `d`, all offsets lie within `idx` and the
    // values, and both views are in range (checked above); the ISA is supported.
    on_x86!((isa, accumulate); unsafe { x86::bsr_left(isa, ptr, idx, vals, br, bc, d, c, accumulate) })
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
    let d = Mat {
        off: d.off + r0 * d.ld,
        rows: c.rows,
        ..d
    };
    // SAFETY: every entry's block row lies within d's columns and its block within the
    // values; d's rows r0..r0+c.rows exist; c is in range (checked above).
    on_x86!((isa, accumulate, d); unsafe { x86::bsr_right(isa, col, vals, br, bc, d, c, accumulate) })
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
    // SAFETY: values and meta cover every row of c, xt has n rows of k, c is in range.
    on_x86!(accumulate; unsafe { x86::two_four_small(vals, meta, k, xt, c, accumulate) })
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
    // SAFETY: decoded columns are < k = d.rows (2-bit positions within groups of 4 of a
    // multiple of 4); values and meta cover every row of c; the views are in range.
    on_x86!(accumulate; unsafe { x86::two_four_bcast(isa, vals, meta, k, d, c, accumulate) })
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
    // SAFETY: offsets within idx and values, columns within d's rows, views in range.
    on_x86!(accumulate; unsafe { x86::csr_left(isa, ptr, idx, vals, d, c, accumulate) })
}

#[cfg(target_arch = "x86_64")]
mod x86;
