//! Conversion from dense (`sparsify`, pruning included) and back (`to_dense`), CSR <-> CSC
//! conversion, and the array lengths a runtime allocates for a pruned tensor (`capacity`).
//!
//! Every rule here is deterministic and specified in `spec/formats.md` ("Pruning"):
//!
//! * magnitudes are `|v|` widened to f64; a block's magnitude is its L2 norm (sum of squares
//!   in f64, then the square root). NaN counts as nonzero and, for ranking, as larger than
//!   every number;
//! * ranking ties go to the lower flat (row-major) index, or the lower block index (block
//!   rows major), or the lower position in a 2:4 group;
//! * zeros are never stored for `All` and `Threshold` (except as 2:4 padding); `Density`
//!   stores exactly `round(d · count)` entries, zeros included if they rank that high.

use crate::error::SparseError;
use crate::storage::{
    element_count, Layout, SparseRef, SparseTensor, TwoFourDims, Values, ValuesMut, ValuesRef,
};
use crate::validate::validate;

/// Which entries (or blocks) `sparsify` keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Select {
    /// Every nonzero (every block with a nonzero; for 2:4 the two largest of each group).
    All,
    /// Entries with `|v| > t` (blocks with L2 norm `> t`; for 2:4 the two largest of each
    /// group, those with `|v| <= t` then set to zero in place).
    Threshold(f64),
    /// Exactly `round(d · count)` entries (blocks) of largest magnitude; not for 2:4.
    Density(f64),
}

/// The largest count an `i32` offset can hold.
const I32_MAX: usize = i32::MAX as usize;

fn check_select(select: Select, layout: Layout) -> Result<(), SparseError> {
    match select {
        Select::All => Ok(()),
        Select::Threshold(t) if t.is_nan() => {
            Err(SparseError::select("the pruning threshold is NaN"))
        }
        Select::Threshold(_) => Ok(()),
        Select::Density(_) if matches!(layout, Layout::TwoFour { .. }) => Err(SparseError::select(
            "2:4 sparsity fixes the density at 1/2; select by density is not allowed",
        )),
        Select::Density(d) if !(0.0..=1.0).contains(&d) => Err(SparseError::select(format!(
            "the density {d} is not between 0 and 1"
        ))),
        Select::Density(_) => Ok(()),
    }
}

/// `round(d · count)`, at most `count`.
fn density_count(d: f64, count: usize) -> usize {
    ((d * count as f64).round() as usize).min(count)
}

/// Indices `0..mags.len()` of the `k` largest magnitudes (ties: lower index), ascending.
fn top_k(mags: &[f64], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..mags.len()).collect();
    let cmp = |a: &usize, b: &usize| mags[*b].total_cmp(&mags[*a]).then(a.cmp(b));
    if k == 0 {
        return Vec::new();
    }
    if k < order.len() {
        order.select_nth_unstable_by(k - 1, cmp);
        order.truncate(k);
    }
    order.sort_unstable();
    order
}

/// `|v|` with NaN made positive (so it ranks above every number under `total_cmp`).
fn magnitude(v: f64) -> f64 {
    v.abs()
}

/// Prunes (or exactly converts) a dense row-major tensor into `layout`.
///
/// Values keep the input dtype. Errors: the shape does not fit the layout or does not match
/// the data's length, a NaN threshold, a density outside `[0, 1]` or with 2:4, or a count or
/// index that does not fit in `i32`.
pub fn sparsify(
    dense: ValuesRef,
    shape: &[usize],
    layout: Layout,
    select: Select,
) -> Result<SparseTensor, SparseError> {
    layout.check_shape(shape)?;
    let count = element_count(shape)?;
    if dense.len() != count {
        return Err(SparseError::shape(format!(
            "shape {shape:?} has {count} elements but the data has {}",
            dense.len()
        )));
    }
    check_select(select, layout)?;
    match layout {
        Layout::Coo | Layout::Csr | Layout::Csc => elementwise(dense, shape, layout, select),
        Layout::Bsr { br, bc } => blocks(dense, shape, br, bc, select),
        Layout::TwoFour { .. } => {
            let dims = layout
                .two_four_dims(shape)
                .ok_or_else(|| SparseError::shape("2:4 axis out of range"))?;
            two_four(dense, shape, layout, dims, select)
        }
    }
}

/// `sparsify` with [`Select::All`], and for 2:4 an error (naming the group) if any group has
/// more than two nonzeros, so the result always holds exactly the dense tensor.
pub fn from_dense_exact(
    dense: ValuesRef,
    shape: &[usize],
    layout: Layout,
) -> Result<SparseTensor, SparseError> {
    if let Layout::TwoFour { axis } = layout {
        layout.check_shape(shape)?;
        if let Some(at) = two_four_violation(&dense.to_f64(), shape, axis)? {
            return Err(SparseError::invalid(format!(
                "the group of 4 along axis {axis} starting at flat index {at} has more than 2 \
                 nonzeros, so the tensor is not 2:4 sparse"
            )));
        }
    }
    sparsify(dense, shape, layout, Select::All)
}

/// The flat index of the first element of the first group of 4 along `axis` (in row-major
/// order of those first elements) holding more than two nonzeros, if any. Errors if the shape
/// does not fit 2:4 along `axis` or does not match the data.
pub fn two_four_violation(
    dense: &[f64],
    shape: &[usize],
    axis: usize,
) -> Result<Option<usize>, SparseError> {
    let layout = Layout::TwoFour { axis };
    layout.check_shape(shape)?;
    let count = element_count(shape)?;
    if dense.len() != count {
        return Err(SparseError::shape(format!(
            "shape {shape:?} has {count} elements but the data has {}",
            dense.len()
        )));
    }
    let d = layout
        .two_four_dims(shape)
        .ok_or_else(|| SparseError::shape("2:4 axis out of range"))?;
    // Row-major order of first elements: o, then group, then i.
    for o in 0..d.outer {
        for g in 0..d.ext / 4 {
            for i in 0..d.inner {
                let row = o * d.inner + i;
                let nz = (0..4)
                    .filter(|&p| dense[d.flat(row, 4 * g + p)] != 0.0)
                    .count();
                if nz > 2 {
                    return Ok(Some(d.flat(row, 4 * g)));
                }
            }
        }
    }
    Ok(None)
}

/// COO, CSR and CSC.
/// Flat indices of the values for which `keep` holds, reading the typed slice in order.
fn flat_where(dense: ValuesRef, keep: impl Fn(f64) -> bool) -> Vec<usize> {
    fn scan<V: Copy>(v: &[V], to: impl Fn(V) -> f64, keep: impl Fn(f64) -> bool) -> Vec<usize> {
        v.iter()
            .enumerate()
            .filter(|(_, &x)| keep(to(x)))
            .map(|(i, _)| i)
            .collect()
    }
    match dense {
        ValuesRef::F32(v) => scan(v, |x| x as f64, keep),
        ValuesRef::F64(v) => scan(v, |x| x, keep),
        ValuesRef::F16(v) => scan(v, f64::from, keep),
        ValuesRef::BF16(v) => scan(v, f64::from, keep),
    }
}

fn elementwise(
    dense: ValuesRef,
    shape: &[usize],
    layout: Layout,
    select: Select,
) -> Result<SparseTensor, SparseError> {
    let count = dense.len();
    let kept: Vec<usize> = match select {
        Select::All => flat_where(dense, |v| v != 0.0),
        Select::Threshold(t) => flat_where(dense, |v| v != 0.0 && magnitude(v) > t),
        Select::Density(d) => {
            let mags: Vec<f64> = (0..count).map(|i| magnitude(dense.get(i))).collect();
            top_k(&mags, density_count(d, count))
        }
    };
    let nnz = kept.len();
    if nnz > I32_MAX {
        return Err(SparseError::too_large(format!(
            "{nnz} stored entries do not fit in i32 offsets"
        )));
    }
    for (axis, &e) in shape.iter().enumerate() {
        if e > I32_MAX + 1 {
            return Err(SparseError::too_large(format!(
                "extent {e} of axis {axis} is too large for i32 indices"
            )));
        }
    }
    match layout {
        Layout::Coo => {
            let rank = shape.len();
            let mut idx = Vec::with_capacity(nnz * rank);
            let mut coord = vec![0usize; rank];
            for &f in &kept {
                let mut rest = f;
                for k in (0..rank).rev() {
                    coord[k] = rest % shape[k];
                    rest /= shape[k];
                }
                idx.extend(coord.iter().map(|&c| c as i32));
            }
            let picks: Vec<Option<usize>> = kept.iter().map(|&f| Some(f)).collect();
            Ok(SparseTensor {
                shape: shape.to_vec(),
                layout,
                ptr: vec![0, nnz as i32],
                idx,
                values: dense.gather(&picks),
            })
        }
        Layout::Csr | Layout::Csc => {
            let (rows, cols) = (shape[0], shape[1]);
            let csc = layout == Layout::Csc;
            let outer = if csc { cols } else { rows };
            // Counting sort by the outer coordinate keeps the inner coordinates ascending,
            // because `kept` is in row-major order.
            let split = |f: usize| -> (usize, usize) {
                let (r, c) = (f / cols, f % cols);
                if csc {
                    (c, r)
                } else {
                    (r, c)
                }
            };
            let mut ptr = vec![0i32; outer + 1];
            for &f in &kept {
                ptr[split(f).0 + 1] += 1;
            }
            for k in 0..outer {
                ptr[k + 1] += ptr[k];
            }
            let mut next: Vec<usize> = ptr[..outer].iter().map(|&p| p as usize).collect();
            let mut idx = vec![0i32; nnz];
            let mut picks = vec![None; nnz];
            for &f in &kept {
                let (o, i) = split(f);
                let slot = next[o];
                next[o] += 1;
                idx[slot] = i as i32;
                picks[slot] = Some(f);
            }
            Ok(SparseTensor {
                shape: shape.to_vec(),
                layout,
                ptr,
                idx,
                values: dense.gather(&picks),
            })
        }
        _ => Err(SparseError::internal(format!(
            "internal: {layout} is not elementwise"
        ))),
    }
}

/// BSR.
fn blocks(
    dense: ValuesRef,
    shape: &[usize],
    br: usize,
    bc: usize,
    select: Select,
) -> Result<SparseTensor, SparseError> {
    let (rows, cols) = (shape[0], shape[1]);
    let (nbr, nbc) = (rows / br, cols / bc);
    let nblocks = nbr * nbc;
    // One row-major pass over the data, typed: every block's "has a nonzero" and (when the
    // selection needs it) its sum of squares.
    let need_norm = !matches!(select, Select::All);
    let (sums, nonzero) = match dense {
        ValuesRef::F32(v) => block_scan(v, |x| x as f64, shape, br, bc, need_norm),
        ValuesRef::F64(v) => block_scan(v, |x| x, shape, br, bc, need_norm),
        ValuesRef::F16(v) => block_scan(v, f64::from, shape, br, bc, need_norm),
        ValuesRef::BF16(v) => block_scan(v, f64::from, shape, br, bc, need_norm),
    };
    let norms: Vec<f64> = sums.iter().map(|s| s.sqrt().abs()).collect();
    let kept: Vec<usize> = match select {
        Select::All => (0..nblocks).filter(|&b| nonzero[b]).collect(),
        Select::Threshold(t) => (0..nblocks)
            .filter(|&b| nonzero[b] && norms[b] > t)
            .collect(),
        Select::Density(d) => top_k(&norms, density_count(d, nblocks)),
    };
    let nnzb = kept.len();
    if nnzb > I32_MAX {
        return Err(SparseError::too_large(format!(
            "{nnzb} stored blocks do not fit in i32 offsets"
        )));
    }
    if nbc > I32_MAX + 1 {
        return Err(SparseError::too_large(format!(
            "{nbc} block columns do not fit in i32 indices"
        )));
    }
    let mut ptr = vec![0i32; nbr + 1];
    let mut idx = Vec::with_capacity(nnzb);
    let mut picks = Vec::with_capacity(nnzb * br * bc);
    for &b in &kept {
        let (bi, bj) = (b / nbc, b % nbc);
        ptr[bi + 1] += 1;
        idx.push(bj as i32);
        for r in 0..br {
            for c in 0..bc {
                picks.push(Some((bi * br + r) * cols + bj * bc + c));
            }
        }
    }
    for k in 0..nbr {
        ptr[k + 1] += ptr[k];
    }
    Ok(SparseTensor {
        shape: shape.to_vec(),
        layout: Layout::Bsr { br, bc },
        ptr,
        idx,
        values: dense.gather(&picks),
    })
}

/// Per block (block rows major): the sum of squares (when `need_norm`; else 0) and whether it
/// holds a nonzero (NaN counts), reading `v` (row-major `rows × cols`) once in memory order.
fn block_scan<V: Copy>(
    v: &[V],
    to_f64: impl Fn(V) -> f64,
    shape: &[usize],
    br: usize,
    bc: usize,
    need_norm: bool,
) -> (Vec<f64>, Vec<bool>) {
    let (rows, cols) = (shape[0], shape[1]);
    let nbc = cols / bc;
    let nblocks = (rows / br) * nbc;
    let mut sums = vec![0.0f64; nblocks];
    let mut nonzero = vec![false; nblocks];
    for (r, row) in v.chunks_exact(cols.max(1)).take(rows).enumerate() {
        let base = (r / br) * nbc;
        for (bj, seg) in row.chunks_exact(bc).enumerate() {
            let b = base + bj;
            if need_norm {
                let mut s = 0.0;
                for &x in seg {
                    let x = to_f64(x);
                    s += x * x;
                    nonzero[b] |= x != 0.0;
                }
                sums[b] += s;
            } else if !nonzero[b] {
                nonzero[b] = seg.iter().any(|&x| to_f64(x) != 0.0);
            }
        }
    }
    (sums, nonzero)
}

/// 2:4 along an axis.
fn two_four(
    dense: ValuesRef,
    shape: &[usize],
    layout: Layout,
    d: TwoFourDims,
    select: Select,
) -> Result<SparseTensor, SparseError> {
    let rows = d.rows();
    let words = d.words();
    let half = d.ext / 2;
    let mut meta = vec![0u32; rows * words];
    let mut picks = Vec::with_capacity(rows * half);
    for row in 0..rows {
        for g in 0..d.ext / 4 {
            let flat = |p: usize| d.flat(row, 4 * g + p);
            let vals: [f64; 4] = std::array::from_fn(|p| dense.get(flat(p)));
            let mags = vals.map(magnitude);
            // The two largest nonzeros (ties: lower position), then the lowest unused
            // positions as zero padding; no allocation per group (this runs per element).
            let mut order = [0usize, 1, 2, 3];
            order.sort_by(|&a, &b| mags[b].total_cmp(&mags[a]).then(a.cmp(&b)));
            let mut chosen = [(0usize, false); 2];
            let mut n = 0;
            for &p in &order {
                if n < 2 && vals[p] != 0.0 {
                    chosen[n] = (p, true);
                    n += 1;
                }
            }
            for p in 0..4 {
                if n < 2 && !chosen[..n].iter().any(|&(q, _)| q == p) {
                    chosen[n] = (p, false);
                    n += 1;
                }
            }
            if chosen[0].0 > chosen[1].0 {
                chosen.swap(0, 1);
            }
            for (slot, &(p, real)) in chosen.iter().enumerate() {
                let keep = real
                    && match select {
                        Select::Threshold(t) => mags[p] > t,
                        _ => true,
                    };
                picks.push(keep.then(|| flat(p)));
                let v = 2 * g + slot;
                meta[row * words + v / 16] |= (p as u32) << (2 * (v % 16));
            }
        }
    }
    Ok(SparseTensor {
        shape: shape.to_vec(),
        layout,
        ptr: Vec::new(),
        idx: meta.into_iter().map(|w| w as i32).collect(),
        values: dense.gather(&picks),
    })
}

/// The array lengths `(ptr, idx, values)` a runtime allocates so that `sparsify` with this
/// `select` fits for any data: exact for `Density` and 2:4, the worst case (every entry or
/// block stored) for `All` and `Threshold`. Errors as `sparsify` does for shape and select.
pub fn capacity(
    shape: &[usize],
    layout: Layout,
    select: Select,
) -> Result<(usize, usize, usize), SparseError> {
    layout.check_shape(shape)?;
    check_select(select, layout)?;
    let count = element_count(shape)?;
    let overflow = || {
        SparseError::too_large(format!(
            "the capacity for shape {shape:?} as {layout} overflows"
        ))
    };
    let stored = |n: usize| match select {
        Select::Density(d) => density_count(d, n),
        _ => n,
    };
    match layout {
        Layout::Coo => {
            let n = stored(count);
            let idx = n.checked_mul(shape.len()).ok_or_else(overflow)?;
            Ok((2, idx, n))
        }
        Layout::Csr => Ok((shape[0] + 1, stored(count), stored(count))),
        Layout::Csc => Ok((shape[1] + 1, stored(count), stored(count))),
        Layout::Bsr { br, bc } => {
            let (nbr, nbc) = (shape[0] / br, shape[1] / bc);
            let n = stored(nbr * nbc);
            let values = n.checked_mul(br * bc).ok_or_else(overflow)?;
            Ok((nbr + 1, n, values))
        }
        Layout::TwoFour { .. } => {
            let d = layout.two_four_dims(shape).ok_or_else(overflow)?;
            let idx = d.rows().checked_mul(d.words()).ok_or_else(overflow)?;
            Ok((0, idx, count / 2))
        }
    }
}

/// Writes `s` into capacity-sized buffers: `ptr` must have exactly `s.ptr`'s length, `idx`
/// and `values` at least `s`'s; their tails are zeroed.
pub fn write_padded(
    s: &SparseTensor,
    ptr: &mut [i32],
    idx: &mut [i32],
    mut values: ValuesMut,
) -> Result<(), SparseError> {
    if ptr.len() != s.ptr.len() {
        return Err(SparseError::shape(format!(
            "the offsets buffer has {} entries, the tensor {}",
            ptr.len(),
            s.ptr.len()
        )));
    }
    if idx.len() < s.idx.len() {
        return Err(SparseError::shape(format!(
            "the index buffer has {} entries, fewer than the tensor's {}",
            idx.len(),
            s.idx.len()
        )));
    }
    values.fill_padded(s.values.as_ref())?;
    ptr.copy_from_slice(&s.ptr);
    idx[..s.idx.len()].copy_from_slice(&s.idx);
    idx[s.idx.len()..].fill(0);
    Ok(())
}

/// The stored `(flat dense index, value index)` pairs of a validated tensor.
fn entries(s: SparseRef) -> Vec<(usize, usize)> {
    let shape = s.shape;
    let end = |ptr: &[i32]| ptr.last().map_or(0, |&p| p as usize);
    let mut out = Vec::new();
    match s.layout {
        Layout::Coo => {
            let rank = shape.len();
            for e in 0..end(s.ptr) {
                let flat = s.idx[e * rank..(e + 1) * rank]
                    .iter()
                    .zip(shape)
                    .fold(0usize, |acc, (&c, &n)| acc * n + c as usize);
                out.push((flat, e));
            }
        }
        Layout::Csr | Layout::Csc => {
            let cols = shape[1];
            for o in 0..s.ptr.len().saturating_sub(1) {
                for e in s.ptr[o] as usize..s.ptr[o + 1] as usize {
                    let i = s.idx[e] as usize;
                    let flat = if s.layout == Layout::Csr {
                        o * cols + i
                    } else {
                        i * cols + o
                    };
                    out.push((flat, e));
                }
            }
        }
        Layout::Bsr { br, bc } => {
            let cols = shape[1];
            for bi in 0..s.ptr.len().saturating_sub(1) {
                for b in s.ptr[bi] as usize..s.ptr[bi + 1] as usize {
                    let bj = s.idx[b] as usize;
                    for r in 0..br {
                        for c in 0..bc {
                            let flat = (bi * br + r) * cols + bj * bc + c;
                            out.push((flat, (b * br + r) * bc + c));
                        }
                    }
                }
            }
        }
        Layout::TwoFour { .. } => {
            if let Some(d) = s.layout.two_four_dims(shape) {
                let words = d.words();
                let half = d.ext / 2;
                for row in 0..d.rows() {
                    for v in 0..half {
                        let word = s.idx[row * words + v / 16] as u32;
                        let p = ((word >> (2 * (v % 16))) & 3) as usize;
                        let a = 4 * (v / 2) + p;
                        out.push((d.flat(row, a), row * half + v));
                    }
                }
            }
        }
    }
    out
}

/// The dense row-major tensor (same dtype) a sparse one stands for. Validates first (so bad
/// data is an error, never a panic); entries past `ptr`'s last offset (capacity padding) are
/// ignored.
pub fn to_dense(s: SparseRef) -> Result<Values, SparseError> {
    validate(s)?;
    let count = element_count(s.shape)?;
    Ok(s.values.scatter(count, &entries(s)))
}

/// [`to_dense`] widened to f64.
pub fn to_dense_f64(s: SparseRef) -> Result<Vec<f64>, SparseError> {
    validate(s)?;
    let count = element_count(s.shape)?;
    let mut out = vec![0.0; count];
    for (flat, e) in entries(s) {
        out[flat] = s.values.get(e);
    }
    Ok(out)
}

/// The same matrix in the other compressed layout: CSR of `A` -> CSC of `A`, and CSC -> CSR
/// (the arrays of one are those of the other for `Aᵀ`). Validates first; other layouts are an
/// error. Capacity padding is dropped.
pub fn transpose(s: SparseRef) -> Result<SparseTensor, SparseError> {
    validate(s)?;
    let (to, outer_new) = match s.layout {
        Layout::Csr => (Layout::Csc, s.shape[1]),
        Layout::Csc => (Layout::Csr, s.shape[0]),
        other => {
            return Err(SparseError::shape(format!(
                "only csr and csc convert into each other, not {other}"
            )))
        }
    };
    let outer_old = s.ptr.len() - 1;
    let nnz = s.ptr[outer_old] as usize;
    let mut ptr = vec![0i32; outer_new + 1];
    for &i in &s.idx[..nnz] {
        ptr[i as usize + 1] += 1;
    }
    for k in 0..outer_new {
        ptr[k + 1] += ptr[k];
    }
    let mut next: Vec<usize> = ptr[..outer_new].iter().map(|&p| p as usize).collect();
    let mut idx = vec![0i32; nnz];
    let mut picks = vec![None; nnz];
    for o in 0..outer_old {
        for e in s.ptr[o] as usize..s.ptr[o + 1] as usize {
            let i = s.idx[e] as usize;
            let slot = next[i];
            next[i] += 1;
            idx[slot] = o as i32;
            picks[slot] = Some(e);
        }
    }
    Ok(SparseTensor {
        shape: s.shape.to_vec(),
        layout: to,
        ptr,
        idx,
        values: s.values.gather(&picks),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DTYPES: [&str; 4] = ["f32", "f64", "f16", "bf16"];

    /// Dense values of a dtype from f64 values (exactly representable in all four in tests).
    fn vals(dtype: &str, v: &[f64]) -> Values {
        let like = match dtype {
            "f32" => ValuesRef::F32(&[]),
            "f64" => ValuesRef::F64(&[]),
            "f16" => ValuesRef::F16(&[]),
            _ => ValuesRef::BF16(&[]),
        };
        Values::from_f64_like(like, v)
    }

    // ---- The brute-force reference: which dense entries survive -------------------------

    /// `rank_of(mags, p)`: how many indices beat `p` (larger magnitude, or equal and lower).
    fn beaten_by(mags: &[f64], p: usize) -> usize {
        (0..mags.len())
            .filter(|&q| {
                mags[q].total_cmp(&mags[p]) == std::cmp::Ordering::Greater
                    || (mags[q].total_cmp(&mags[p]) == std::cmp::Ordering::Equal && q < p)
            })
            .count()
    }

    fn reference(dense: &[f64], shape: &[usize], layout: Layout, select: Select) -> Vec<f64> {
        let n = dense.len();
        match layout {
            Layout::Coo | Layout::Csr | Layout::Csc => {
                let mags: Vec<f64> = dense.iter().map(|v| v.abs()).collect();
                (0..n)
                    .map(|i| {
                        let v = dense[i];
                        let keep = match select {
                            Select::All => v != 0.0,
                            Select::Threshold(t) => v != 0.0 && v.abs() > t,
                            Select::Density(d) => {
                                beaten_by(&mags, i) < (d * n as f64).round() as usize
                            }
                        };
                        if keep {
                            v
                        } else {
                            0.0
                        }
                    })
                    .collect()
            }
            Layout::Bsr { br, bc } => {
                let (rows, cols) = (shape[0], shape[1]);
                let nbc = cols / bc;
                let nb = (rows / br) * nbc;
                let block_of = |i: usize| (i / cols / br) * nbc + (i % cols) / bc;
                let mut norms = vec![0.0f64; nb];
                let mut nz = vec![false; nb];
                for i in 0..n {
                    norms[block_of(i)] += dense[i] * dense[i];
                    nz[block_of(i)] |= dense[i] != 0.0;
                }
                let norms: Vec<f64> = norms.iter().map(|x| x.sqrt()).collect();
                (0..n)
                    .map(|i| {
                        let b = block_of(i);
                        let keep = match select {
                            Select::All => nz[b],
                            Select::Threshold(t) => nz[b] && norms[b] > t,
                            Select::Density(d) => {
                                beaten_by(&norms, b) < (d * nb as f64).round() as usize
                            }
                        };
                        if keep {
                            dense[i]
                        } else {
                            0.0
                        }
                    })
                    .collect()
            }
            Layout::TwoFour { axis } => {
                let inner: usize = shape[axis + 1..].iter().product();
                let ext = shape[axis];
                (0..n)
                    .map(|i| {
                        let a = (i / inner) % ext;
                        let first = i - (a % 4) * inner;
                        let group: Vec<f64> = (0..4).map(|p| dense[first + p * inner]).collect();
                        let mags: Vec<f64> = group
                            .iter()
                            .map(|v| if *v == 0.0 { -1.0 } else { v.abs() })
                            .collect();
                        let v = dense[i];
                        let keep = v != 0.0
                            && beaten_by(&mags, a % 4) < 2
                            && match select {
                                Select::Threshold(t) => v.abs() > t,
                                _ => true,
                            };
                        if keep {
                            v
                        } else {
                            0.0
                        }
                    })
                    .collect()
            }
        }
    }

    /// Everything a sparsified tensor must satisfy, against the reference.
    fn check(dense: &[f64], shape: &[usize], layout: Layout, select: Select, dtype: &str) {
        let input = vals(dtype, dense);
        let s = sparsify(input.as_ref(), shape, layout, select).expect("sparsify");
        let ctx = format!("{layout} {select:?} {dtype} {shape:?} {dense:?}\n{s:?}");
        assert_eq!(s.values.dtype_name(), dtype, "{ctx}");
        validate(s.as_ref()).unwrap_or_else(|e| panic!("invalid: {e}\n{ctx}"));
        let want = reference(dense, shape, layout, select);
        assert_eq!(to_dense_f64(s.as_ref()).expect("to_dense"), want, "{ctx}");
        assert_eq!(
            to_dense(s.as_ref()).expect("to_dense"),
            vals(dtype, &want),
            "{ctx}"
        );
        // Zeros stored only where the rules allow it.
        let stored: Vec<f64> = s.values.to_f64();
        match (layout, select) {
            (Layout::Coo | Layout::Csr | Layout::Csc, Select::All | Select::Threshold(_)) => {
                assert!(stored.iter().all(|&v| v != 0.0), "stored zero\n{ctx}")
            }
            (_, Select::Density(d)) => {
                let total = match layout {
                    Layout::Bsr { br, bc } => dense.len() / (br * bc),
                    _ => dense.len(),
                };
                let k = (d * total as f64).round() as usize;
                let per = match layout {
                    Layout::Bsr { br, bc } => br * bc,
                    _ => 1,
                };
                assert_eq!(stored.len(), k * per, "exact count\n{ctx}");
            }
            _ => {}
        }
        // Capacity: exact for density and 2:4, an upper bound otherwise; padded buffers read
        // back the same.
        let (cp, ci, cv) = capacity(shape, layout, select).expect("capacity");
        assert_eq!(cp, s.ptr.len(), "{ctx}");
        let exact =
            matches!(select, Select::Density(_)) || matches!(layout, Layout::TwoFour { .. });
        if exact {
            assert_eq!((ci, cv), (s.idx.len(), s.values.len()), "{ctx}");
        } else {
            assert!(ci >= s.idx.len() && cv >= s.values.len(), "{ctx}");
        }
        let mut ptr = vec![-7; cp];
        let mut idx = vec![-7; ci];
        let mut padded = vals(dtype, &vec![9.0; cv]);
        let pm = match &mut padded {
            Values::F32(v) => ValuesMut::F32(v),
            Values::F64(v) => ValuesMut::F64(v),
            Values::F16(v) => ValuesMut::F16(v),
            Values::BF16(v) => ValuesMut::BF16(v),
        };
        write_padded(&s, &mut ptr, &mut idx, pm).expect("write_padded");
        assert!(idx[s.idx.len()..].iter().all(|&x| x == 0), "{ctx}");
        assert!(padded.to_f64()[s.values.len()..].iter().all(|&x| x == 0.0));
        let p = SparseRef {
            shape,
            layout,
            ptr: &ptr,
            idx: &idx,
            values: padded.as_ref(),
        };
        validate(p).unwrap_or_else(|e| panic!("padded invalid: {e}\n{ctx}"));
        assert_eq!(to_dense_f64(p).expect("padded to_dense"), want, "{ctx}");
        // CSR <-> CSC keeps the matrix, from padded buffers too.
        if matches!(layout, Layout::Csr | Layout::Csc) {
            let t = transpose(p).expect("transpose");
            validate(t.as_ref()).expect("transposed valid");
            assert_ne!(t.layout, layout);
            assert_eq!(to_dense_f64(t.as_ref()).expect("to_dense"), want, "{ctx}");
            assert_eq!(transpose(t.as_ref()).expect("back"), s, "{ctx}");
        }
    }

    fn all_selects() -> Vec<Select> {
        vec![
            Select::All,
            Select::Threshold(-1.0),
            Select::Threshold(0.0),
            Select::Threshold(1.0),
            Select::Threshold(2.5),
            Select::Density(0.0),
            Select::Density(0.3),
            Select::Density(0.5),
            Select::Density(1.0),
        ]
    }

    #[test]
    fn fixed_cases_every_layout_dtype_and_select() {
        // Ties, zeros, an empty row, an all-zero tensor, single rows and columns.
        let m = [
            0.0, 2.0, -2.0, 0.0, 1.0, 0.0, //
            0.0, 0.0, 0.0, 0.0, 0.0, 0.0, //
            3.0, -1.0, 0.5, 2.0, 0.0, -3.0, //
            1.0, 1.0, 1.0, 1.0, 0.0, 0.0,
        ];
        let cases: Vec<(Vec<f64>, Vec<usize>)> = vec![
            (m.to_vec(), vec![4, 6]),
            (vec![0.0; 24], vec![4, 6]),
            (m[..6].to_vec(), vec![1, 6]),
            (m[..4].to_vec(), vec![4, 1]),
            (vec![], vec![0, 6]),
        ];
        for (dense, shape) in &cases {
            for dtype in DTYPES {
                for select in all_selects() {
                    let mut layouts = vec![Layout::Coo, Layout::Csr, Layout::Csc];
                    for (br, bc) in [(1, 1), (2, 3), (4, 4), (2, 2), (1, 6), (4, 1)] {
                        if shape[0].is_multiple_of(br) && shape[1].is_multiple_of(bc) {
                            layouts.push(Layout::Bsr { br, bc });
                        }
                    }
                    if !matches!(select, Select::Density(_)) {
                        for (axis, &e) in shape.iter().enumerate() {
                            if e.is_multiple_of(4) {
                                layouts.push(Layout::TwoFour { axis });
                            }
                        }
                    }
                    for layout in layouts {
                        check(dense, shape, layout, select, dtype);
                    }
                }
            }
        }
    }

    #[test]
    fn csr_and_csc_arrays() {
        let d = [0.0, 5.0, 0.0, 7.0, 0.0, 0.0, 1.0, 0.0, 2.0];
        let r = sparsify(ValuesRef::F64(&d), &[3, 3], Layout::Csr, Select::All).unwrap();
        assert_eq!(r.ptr, [0, 1, 2, 4]);
        assert_eq!(r.idx, [1, 0, 0, 2]);
        assert_eq!(r.values, Values::F64(vec![5.0, 7.0, 1.0, 2.0]));
        let c = sparsify(ValuesRef::F64(&d), &[3, 3], Layout::Csc, Select::All).unwrap();
        assert_eq!(c.ptr, [0, 2, 3, 4]);
        assert_eq!(c.idx, [1, 2, 0, 2]);
        assert_eq!(c.values, Values::F64(vec![7.0, 1.0, 5.0, 2.0]));
        assert_eq!(transpose(r.as_ref()).unwrap(), c);
        let o = sparsify(ValuesRef::F64(&d), &[3, 3], Layout::Coo, Select::All).unwrap();
        assert_eq!(o.ptr, [0, 4]);
        assert_eq!(o.idx, [0, 1, 1, 0, 2, 0, 2, 2]);
    }

    #[test]
    fn bsr_arrays() {
        #[rustfmt::skip]
        let d = [
            1.0, 2.0, 0.0, 0.0,
            3.0, 4.0, 0.0, 0.0,
            0.0, 0.0, 0.0, 5.0,
            0.0, 0.0, 0.0, 0.0,
        ];
        let b = sparsify(
            ValuesRef::F32(&d.map(|x| x as f32)),
            &[4, 4],
            Layout::Bsr { br: 2, bc: 2 },
            Select::All,
        )
        .unwrap();
        assert_eq!(b.ptr, [0, 1, 2]);
        assert_eq!(b.idx, [0, 1]);
        assert_eq!(
            b.values,
            Values::F32(vec![1.0, 2.0, 3.0, 4.0, 0.0, 5.0, 0.0, 0.0])
        );
        // Density: the single largest block (norm sqrt(30) beats 5).
        let k = sparsify(
            ValuesRef::F64(&d),
            &[4, 4],
            Layout::Bsr { br: 2, bc: 2 },
            Select::Density(0.25),
        )
        .unwrap();
        assert_eq!(
            (k.ptr.as_slice(), k.idx.as_slice()),
            (&[0, 1, 1][..], &[0][..])
        );
    }

    #[test]
    fn two_four_metadata_bits() {
        // Group 0 keeps positions 1 and 3 (0b11_01); group 1 has one nonzero at 0 and pads
        // with the lowest unused position, 1 (0b01_00). Group 2 ties: positions 0 and 1.
        let d = [0.0, 3.0, 0.0, 5.0, 1.0, 0.0, 0.0, 0.0, 2.0, -2.0, 2.0, 0.0];
        let s = sparsify(
            ValuesRef::F64(&d),
            &[1, 12],
            Layout::TwoFour { axis: 1 },
            Select::All,
        )
        .unwrap();
        assert!(s.ptr.is_empty());
        assert_eq!(s.idx, [0b0100_0100_1101]);
        assert_eq!(s.values, Values::F64(vec![3.0, 5.0, 1.0, 0.0, 2.0, -2.0]));
        // A threshold zeroes a kept value in place but keeps both slots.
        let t = sparsify(
            ValuesRef::F64(&d),
            &[1, 12],
            Layout::TwoFour { axis: 1 },
            Select::Threshold(4.0),
        )
        .unwrap();
        assert_eq!(t.idx, s.idx);
        assert_eq!(t.values, Values::F64(vec![0.0, 5.0, 0.0, 0.0, 0.0, 0.0]));
        // Two words per row past 32 elements; the unused bits of the last word are ignored.
        let long: Vec<f64> = (0..2 * 36).map(|i| (i % 5) as f64).collect();
        let s = sparsify(
            ValuesRef::F64(&long),
            &[2, 36],
            Layout::TwoFour { axis: 1 },
            Select::All,
        )
        .unwrap();
        assert_eq!(s.idx.len(), 4);
        let dense = to_dense_f64(s.as_ref()).unwrap();
        let mut junk = s.clone();
        junk.idx[1] |= !0xff;
        junk.idx[3] |= !0xff;
        assert_eq!(to_dense_f64(junk.as_ref()).unwrap(), dense);
    }

    #[test]
    fn density_stores_exact_counts_zeros_included() {
        let s = sparsify(
            ValuesRef::F64(&[0.0; 4]),
            &[2, 2],
            Layout::Csr,
            Select::Density(0.5),
        )
        .unwrap();
        assert_eq!(
            (s.ptr.as_slice(), s.idx.as_slice()),
            (&[0, 2, 2][..], &[0, 1][..])
        );
        assert_eq!(s.values, Values::F64(vec![0.0, 0.0]));
    }

    #[test]
    fn exact_conversion_rejects_two_four_violations() {
        let d = [1.0, 0.0, 2.0, 0.0, 1.0, 1.0, 1.0, 0.0];
        assert_eq!(two_four_violation(&d, &[8], 0), Ok(Some(4)));
        assert_eq!(two_four_violation(&d[..4], &[4], 0), Ok(None));
        // Along axis 0 of a 4x2 matrix, column 1 is the group 0,1,0,0 -> fine; column 0 bad.
        let m = [1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0];
        assert_eq!(two_four_violation(&m, &[4, 2], 0), Ok(Some(0)));
        let err = from_dense_exact(ValuesRef::F64(&d), &[8], Layout::TwoFour { axis: 0 });
        assert!(err.unwrap_err().message.contains("flat index 4"));
        assert!(two_four_violation(&d, &[8], 1).is_err());
        assert!(two_four_violation(&d, &[2, 4], 1).is_ok());
        assert!(two_four_violation(&d, &[6], 0).is_err());
        let ok = from_dense_exact(ValuesRef::F64(&d[..4]), &[4], Layout::TwoFour { axis: 0 });
        assert_eq!(to_dense_f64(ok.unwrap().as_ref()).unwrap(), &d[..4]);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let d = ValuesRef::F64(&[1.0; 8]);
        let e = |r: Result<SparseTensor, SparseError>| r.unwrap_err().message;
        assert!(e(sparsify(d, &[2, 3], Layout::Csr, Select::All)).contains("6 elements"));
        let kind = |r: Result<SparseTensor, SparseError>| r.unwrap_err().kind;
        use crate::error::SparseErrorKind as K;
        assert_eq!(kind(sparsify(d, &[8], Layout::Csr, Select::All)), K::Shape);
        let nan = Select::Threshold(f64::NAN);
        assert_eq!(kind(sparsify(d, &[2, 4], Layout::Csr, nan)), K::Select);
        assert!(e(sparsify(d, &[8], Layout::Csr, Select::All)).contains("rank 2"));
        assert!(e(sparsify(d, &[], Layout::Coo, Select::All)).contains("rank"));
        assert!(e(sparsify(
            d,
            &[2, 4],
            Layout::Bsr { br: 3, bc: 1 },
            Select::All
        ))
        .contains("divide"));
        assert!(e(sparsify(
            d,
            &[2, 4],
            Layout::Bsr { br: 0, bc: 1 },
            Select::All
        ))
        .contains("empty"));
        assert!(e(sparsify(
            d,
            &[4, 2],
            Layout::TwoFour { axis: 1 },
            Select::All
        ))
        .contains("multiple of 4"));
        assert!(e(sparsify(
            d,
            &[4, 2],
            Layout::TwoFour { axis: 2 },
            Select::All
        ))
        .contains("out of range"));
        let tf = Layout::TwoFour { axis: 0 };
        assert!(e(sparsify(d, &[8], tf, Select::Density(0.5))).contains("density"));
        assert!(e(sparsify(d, &[8], Layout::Coo, Select::Density(1.5))).contains("between"));
        assert!(e(sparsify(d, &[8], Layout::Coo, Select::Density(f64::NAN))).contains("NaN"));
        assert!(e(sparsify(d, &[8], Layout::Coo, Select::Threshold(f64::NAN))).contains("NaN"));
        assert!(capacity(&[usize::MAX, 2], Layout::Csr, Select::All).is_err());
        assert!(capacity(&[1 << 40, 1 << 40], Layout::Coo, Select::All).is_err());
        assert!(transpose(
            sparsify(d, &[8], Layout::Coo, Select::All)
                .unwrap()
                .as_ref()
        )
        .is_err());
        // Buffers of the wrong size or dtype.
        let s = sparsify(d, &[2, 4], Layout::Csr, Select::All).unwrap();
        let mut v32 = vec![0f32; 8];
        let mut v64 = vec![0f64; 7];
        assert!(write_padded(&s, &mut [0; 3], &mut [0; 8], ValuesMut::F64(&mut [0.0; 8])).is_ok());
        assert!(write_padded(&s, &mut [0; 2], &mut [0; 8], ValuesMut::F64(&mut [0.0; 8])).is_err());
        assert!(write_padded(&s, &mut [0; 3], &mut [0; 7], ValuesMut::F64(&mut [0.0; 8])).is_err());
        assert!(write_padded(&s, &mut [0; 3], &mut [0; 8], ValuesMut::F32(&mut v32)).is_err());
        assert!(write_padded(&s, &mut [0; 3], &mut [0; 8], ValuesMut::F64(&mut v64)).is_err());
    }

    #[test]
    fn nan_is_nonzero_and_ranks_highest() {
        let d = [0.0, f64::NAN, 5.0, 1.0];
        let s = sparsify(ValuesRef::F64(&d), &[4], Layout::Coo, Select::Density(0.25)).unwrap();
        assert_eq!(s.idx, [1]);
        let s = sparsify(ValuesRef::F64(&d), &[4], Layout::Coo, Select::All).unwrap();
        assert_eq!(s.idx, [1, 2, 3]);
        let s = sparsify(
            ValuesRef::F64(&d),
            &[4],
            Layout::Coo,
            Select::Threshold(0.0),
        )
        .unwrap();
        assert_eq!(s.idx, [2, 3]);
    }

    // ---- Property tests -----------------------------------------------------------------

    fn small_value() -> impl Strategy<Value = f64> {
        prop_oneof![
            3 => Just(0.0),
            1 => prop::sample::select(vec![-3.0, -2.0, -1.5, -1.0, -0.5, 0.5, 1.0, 1.5, 2.0, 3.0]),
        ]
    }

    fn select() -> impl Strategy<Value = Select> {
        prop_oneof![
            Just(Select::All),
            prop::sample::select(vec![-1.0, 0.0, 0.75, 1.0, 1.5, 2.5]).prop_map(Select::Threshold),
            (0u32..=8).prop_map(|k| Select::Density(f64::from(k) / 8.0)),
        ]
    }

    /// (shape, layout) for every layout family.
    fn shape_layout() -> impl Strategy<Value = (Vec<usize>, Layout)> {
        prop_oneof![
            prop::collection::vec(0usize..5, 1..4).prop_map(|s| (s, Layout::Coo)),
            (0usize..7, 0usize..7).prop_map(|(r, c)| (vec![r, c], Layout::Csr)),
            (0usize..7, 0usize..7).prop_map(|(r, c)| (vec![r, c], Layout::Csc)),
            (1usize..5, 1usize..5, 0usize..4, 0usize..4)
                .prop_map(|(br, bc, m, n)| (vec![br * m, bc * n], Layout::Bsr { br, bc })),
            (
                prop::collection::vec(1usize..4, 1..4),
                0usize..11,
                0usize..3
            )
                .prop_map(|(mut s, m, a)| {
                    let axis = a % s.len();
                    s[axis] = 4 * m;
                    (s, Layout::TwoFour { axis })
                }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

        #[test]
        fn sparsify_then_to_dense_matches_the_reference(
            (shape, layout) in shape_layout(),
            select in select(),
            dtype in prop::sample::select(DTYPES.to_vec()),
            seed in prop::collection::vec(small_value(), 0..200),
        ) {
            let n: usize = shape.iter().product();
            let dense: Vec<f64> = (0..n).map(|i| seed.get(i % seed.len().max(1)).copied().unwrap_or(0.0)).collect();
            let select = match (layout, select) {
                (Layout::TwoFour { .. }, Select::Density(_)) => Select::All,
                (_, s) => s,
            };
            check(&dense, &shape, layout, select, dtype);
        }
    }
}
