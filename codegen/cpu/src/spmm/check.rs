//! Argument checks of `spmm`: views inside their slices, destinations injective, sparse arrays
//! well formed for their layout. Every kernel relies on them; they run before any kernel.

use super::*;

/// Strides of extent-1 axes do not matter; give them canonical values.
pub(super) fn canonical_ref<T>(mut d: DenseRef<T>) -> DenseRef<T> {
    if d.cols <= 1 {
        d.cs = 1;
    }
    if d.rows <= 1 {
        d.rs = d.cols.max(1) as isize * d.cs.abs().max(1);
    }
    d
}

pub(super) fn canonical_mut<T>(mut c: DenseMut<T>) -> DenseMut<T> {
    if c.cols <= 1 {
        c.cs = 1;
    }
    if c.rows <= 1 {
        c.rs = c.cols.max(1) as isize * c.cs.abs().max(1);
    }
    c
}

/// Every element of the view lies inside `len`.
pub(super) fn check_view(
    name: &str,
    len: usize,
    offset: usize,
    rows: usize,
    cols: usize,
    rs: isize,
    cs: isize,
) -> Result<(), SparseError> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let r = (rows - 1) as i128 * rs as i128;
    let c = (cols - 1) as i128 * cs as i128;
    let lo = offset as i128 + r.min(0) + c.min(0);
    let hi = offset as i128 + r.max(0) + c.max(0);
    if lo < 0 || hi >= len as i128 {
        return Err(SparseError::shape(format!(
            "{name}: a {rows}x{cols} view at offset {offset} with strides ({rs}, {cs}) reaches \
             elements {lo}..={hi}, outside its {len} elements"
        )));
    }
    Ok(())
}

/// The output view maps distinct coordinates to distinct, separable elements: one axis's
/// whole span fits within one step of the other.
pub(super) fn check_injective(
    rows: usize,
    cols: usize,
    rs: isize,
    cs: isize,
) -> Result<(), SparseError> {
    let (ars, acs) = (rs.unsigned_abs(), cs.unsigned_abs());
    let ok = if rows == 0 || cols == 0 || (rows <= 1 && cols <= 1) {
        true
    } else if rows <= 1 {
        acs > 0
    } else if cols <= 1 {
        ars > 0
    } else {
        (acs > 0 && (cols - 1).saturating_mul(acs) < ars)
            || (ars > 0 && (rows - 1).saturating_mul(ars) < acs)
    };
    if ok {
        Ok(())
    } else {
        Err(SparseError::shape(format!(
            "c: a {rows}x{cols} view with strides ({rs}, {cs}) overlaps itself"
        )))
    }
}

/// Checks the sparse arrays enough that no access can go out of range; returns the stored
/// matrix's `(rows, cols)`.
pub(super) fn check_sparse(s: &SparseRef) -> Result<(usize, usize), SparseError> {
    let rank2 = || -> Result<(usize, usize), SparseError> {
        if s.shape.len() != 2 {
            return Err(SparseError::shape(format!(
                "spmm needs a rank-2 sparse matrix, not shape {:?}",
                s.shape
            )));
        }
        Ok((s.shape[0], s.shape[1]))
    };
    let (rows, cols) = rank2()?;
    let nvals = s.values.len();
    match s.layout {
        Layout::Coo => {
            if s.ptr.len() != 2 || s.ptr[0] != 0 || s.ptr[1] < 0 {
                return Err(SparseError::invalid(format!(
                    "coo indptr must be [0, nnz], not {:?}",
                    s.ptr
                )));
            }
            let nnz = s.ptr[1] as usize;
            if s.idx.len() < 2 * nnz || nvals < nnz {
                return Err(SparseError::shape(format!(
                    "coo with {nnz} entries needs {} coordinates and {nnz} values, has {} and \
                     {nvals}",
                    2 * nnz,
                    s.idx.len()
                )));
            }
        }
        Layout::Csr | Layout::Csc => {
            let outer = if s.layout == Layout::Csr { rows } else { cols };
            let nnz = check_offsets(s.ptr, outer)?;
            if s.idx.len() < nnz || nvals < nnz {
                return Err(SparseError::invalid(format!(
                    "{nnz} stored entries but only {} indices and {nvals} values",
                    s.idx.len()
                )));
            }
        }
        Layout::Bsr { br, bc } => {
            if br == 0 || bc == 0 || !rows.is_multiple_of(br) || !cols.is_multiple_of(bc) {
                return Err(SparseError::shape(format!(
                    "bsr blocks {br}x{bc} do not tile the {rows}x{cols} matrix"
                )));
            }
            let nnzb = check_offsets(s.ptr, rows / br)?;
            if s.idx.len() < nnzb {
                return Err(SparseError::invalid(format!(
                    "{nnzb} stored blocks but only {} indices",
                    s.idx.len()
                )));
            }
            let need = nnzb
                .checked_mul(br * bc)
                .ok_or_else(|| SparseError::shape("bsr value count overflows"))?;
            if nvals < need {
                return Err(SparseError::shape(format!(
                    "{nnzb} stored {br}x{bc} blocks need {need} values, have {nvals}"
                )));
            }
        }
        Layout::TwoFour { axis } => {
            if axis > 1 {
                return Err(SparseError::shape(format!(
                    "2:4 axis {axis} of a rank-2 matrix"
                )));
            }
            let (nrows, ext) = if axis == 1 {
                (rows, cols)
            } else {
                (cols, rows)
            };
            if !ext.is_multiple_of(4) {
                return Err(SparseError::shape(format!(
                    "2:4 axis extent {ext} is not a multiple of 4"
                )));
            }
            let words = ext.div_ceil(32);
            if nvals < nrows * (ext / 2) || s.idx.len() < nrows * words {
                return Err(SparseError::invalid(format!(
                    "2:4 with {nrows} rows of {ext} needs {} values and {} meta words, has \
                     {nvals} and {}",
                    nrows * (ext / 2),
                    nrows * words,
                    s.idx.len()
                )));
            }
        }
    }
    Ok((rows, cols))
}

/// `ptr` has `outer + 1` non-decreasing offsets from 0; returns the last.
pub(super) fn check_offsets(ptr: &[i32], outer: usize) -> Result<usize, SparseError> {
    if ptr.len() != outer + 1 {
        return Err(SparseError::invalid(format!(
            "indptr has {} entries, {outer} rows need {}",
            ptr.len(),
            outer + 1
        )));
    }
    if ptr[0] != 0 {
        return Err(SparseError::invalid(format!(
            "indptr[0] = {} is not 0",
            ptr[0]
        )));
    }
    if let Some(k) = (1..ptr.len()).find(|&k| ptr[k] < ptr[k - 1]) {
        return Err(SparseError::invalid(format!("indptr decreases at {k}")));
    }
    Ok(ptr[outer] as usize)
}

/// Every stored index lies within its extent (the arrays passed `check_sparse`). The SIMD
/// paths skip this: they check the indices of their own piece, in parallel.
pub(super) fn check_sparse_indices(s: &SparseRef) -> Result<(), SparseError> {
    let (rows, cols) = (s.shape[0], s.shape[1]);
    let end = s.ptr.last().map_or(0, |&p| p as usize);
    match s.layout {
        Layout::Coo => {
            for e in 0..end {
                let (r, c) = (s.idx[2 * e], s.idx[2 * e + 1]);
                if r < 0 || r as usize >= rows || c < 0 || c as usize >= cols {
                    return Err(SparseError::shape(format!(
                        "coo entry {e} at ({r}, {c}) is outside the {rows}x{cols} matrix"
                    )));
                }
            }
            Ok(())
        }
        Layout::Csr => check_indices(&s.idx[..end], cols),
        Layout::Csc => check_indices(&s.idx[..end], rows),
        Layout::Bsr { bc, .. } => check_indices(&s.idx[..end], cols / bc),
        Layout::TwoFour { .. } => Ok(()),
    }
}

pub(super) fn check_indices(idx: &[i32], extent: usize) -> Result<(), SparseError> {
    if simd::max_index(idx) as usize >= extent {
        let e = idx
            .iter()
            .position(|&i| i < 0 || i as usize >= extent)
            .unwrap_or(0);
        return Err(SparseError::invalid(format!(
            "indices[{e}] = {} is out of range for extent {extent}",
            idx[e]
        )));
    }
    Ok(())
}
