//! Validation of sparse data from outside (files, API callers).
//!
//! [`validate`] checks every invariant of `spec/formats.md` that the kernels, `to_dense` and
//! `transpose` rely on, so that after it passes no index can be out of range. Messages name the
//! array as the format's spec does (`indptr`, `indices`, `coords`, `meta`, `values`) and the
//! first bad position.

use crate::error::SparseError;
use crate::storage::{Layout, SparseRef, SparseTensor, Values};

/// Checks a sparse tensor's arrays against its shape and layout.
///
/// * the shape fits the layout (rank, block extents dividing it, 2:4 axis extent);
/// * `indptr`: the right length, `indptr[0] = 0`, non-decreasing, last offset at most the
///   capacity of `indices` and `values`;
/// * `indices` and `values` capacities consistent with each other (capacity padding allowed);
/// * every stored index in range, sorted and unique within its row (column, block row); COO
///   coordinates sorted row-major and unique;
/// * 2:4: `values` is `rows × ext/2`, `meta` is `rows × ceil(ext/32)` words, and every group's
///   two 2-bit positions strictly increase. Unused bits of a row's last word may be anything.
pub fn validate(s: SparseRef) -> Result<(), SparseError> {
    s.layout.check_shape(s.shape)?;
    match s.layout {
        Layout::Coo => coo(s, true),
        Layout::Csr | Layout::Csc | Layout::Bsr { .. } => compressed(s, true),
        Layout::TwoFour { .. } => two_four(s),
    }
}

/// Puts data from a source that allows unsorted indices and duplicates (scipy) into the
/// canonical form [`validate`] demands: within each row (column, block row) of CSR, CSC and
/// BSR the entries are sorted by index and duplicates summed (blockwise for BSR); COO entries
/// are sorted row-major and duplicates summed. Sorting is stable; sums are taken in f64 and
/// rounded once to the dtype (entries without duplicates are kept bit for bit). Capacity
/// padding is dropped. Offsets and index ranges are checked first (errors as `validate`'s);
/// 2:4 tensors are only validated. The result passes `validate`.
pub fn canonicalize(s: SparseTensor) -> Result<SparseTensor, SparseError> {
    let r = s.as_ref();
    r.layout.check_shape(r.shape)?;
    // Data already canonical (what scipy writes after `sum_duplicates`/`sort_indices`, and
    // what tdsl writes) is returned as it is: no copy, no per-entry bookkeeping.
    if unpadded(&r) && validate(r).is_ok() {
        return Ok(s);
    }
    // For each output slot: the input entries summed into it, and the output index arrays.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut ptr: Vec<i32>;
    let mut idx: Vec<i32> = Vec::new();
    let per_entry;
    match r.layout {
        Layout::TwoFour { .. } => {
            validate(r)?;
            return Ok(s);
        }
        Layout::Coo => {
            coo(r, false)?;
            per_entry = 1;
            let rank = r.shape.len();
            let nnz = r.ptr[1] as usize;
            let coords = |e: usize| &r.idx[e * rank..(e + 1) * rank];
            let mut order: Vec<usize> = (0..nnz).collect();
            order.sort_by(|&a, &b| coords(a).cmp(coords(b)));
            for e in order {
                match groups.last_mut() {
                    Some(g) if coords(g[0]) == coords(e) => g.push(e),
                    _ => {
                        groups.push(vec![e]);
                        idx.extend_from_slice(coords(e));
                    }
                }
            }
            ptr = vec![0, groups.len() as i32];
        }
        Layout::Csr | Layout::Csc | Layout::Bsr { .. } => {
            compressed(r, false)?;
            let (outer, _, p, _, _) = geometry(&r)?;
            per_entry = p;
            ptr = vec![0i32; outer + 1];
            for o in 0..outer {
                let mut row: Vec<usize> = (r.ptr[o] as usize..r.ptr[o + 1] as usize).collect();
                row.sort_by_key(|&e| r.idx[e]);
                for e in row {
                    match groups.last_mut() {
                        Some(g) if ptr[o + 1] > 0 && r.idx[g[0]] == r.idx[e] => g.push(e),
                        _ => {
                            groups.push(vec![e]);
                            idx.push(r.idx[e]);
                            ptr[o + 1] += 1;
                        }
                    }
                }
                ptr[o + 1] += ptr[o];
            }
        }
    }
    let values = if groups.iter().all(|g| g.len() == 1) {
        let picks: Vec<Option<usize>> = groups
            .iter()
            .flat_map(|g| (0..per_entry).map(move |k| Some(g[0] * per_entry + k)))
            .collect();
        r.values.gather(&picks)
    } else {
        let sums: Vec<f64> = groups
            .iter()
            .flat_map(|g| {
                (0..per_entry)
                    .map(move |k| g.iter().map(|&e| r.values.get(e * per_entry + k)).sum())
            })
            .collect();
        Values::from_f64_like(r.values, &sums)
    };
    let out = SparseTensor {
        shape: s.shape.clone(),
        layout: s.layout,
        ptr,
        idx,
        values,
    };
    validate(out.as_ref())?;
    Ok(out)
}

/// Whether the index and value arrays hold exactly the stored entries (no capacity padding).
fn unpadded(r: &SparseRef) -> bool {
    let per_entry = match r.layout {
        Layout::Bsr { br, bc } => br.saturating_mul(bc),
        _ => 1,
    };
    match r.layout {
        Layout::TwoFour { .. } => true,
        Layout::Coo => {
            let nnz = r.ptr.get(1).map_or(0, |&n| n.max(0) as usize);
            r.idx.len() == nnz.saturating_mul(r.shape.len()) && r.values.len() == nnz
        }
        _ => {
            let nnz = r.ptr.last().map_or(0, |&n| n.max(0) as usize);
            r.idx.len() == nnz && r.values.len() == nnz.saturating_mul(per_entry)
        }
    }
}

/// Checks `indptr` of length `outer + 1`; returns the last offset.
fn offsets(ptr: &[i32], outer: usize, idx_cap: usize) -> Result<usize, SparseError> {
    if ptr.len() != outer + 1 {
        return Err(SparseError::invalid(format!(
            "indptr has {} entries, but {outer} rows (of the compressed axis) need {}",
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
    for k in 1..ptr.len() {
        if ptr[k] < ptr[k - 1] {
            return Err(SparseError::invalid(format!(
                "indptr[{k}] = {} is less than indptr[{}] = {}",
                ptr[k],
                k - 1,
                ptr[k - 1]
            )));
        }
    }
    let last = ptr[outer] as usize; // >= ptr[0] = 0
    if last > idx_cap {
        return Err(SparseError::invalid(format!(
            "indptr[{outer}] = {last} exceeds the {idx_cap} entries of indices"
        )));
    }
    Ok(last)
}

/// The geometry of a compressed layout: outer and inner extents, values per stored index,
/// and the names of both axes for messages.
fn geometry(
    s: &SparseRef,
) -> Result<(usize, usize, usize, &'static str, &'static str), SparseError> {
    Ok(match s.layout {
        Layout::Csr => (s.shape[0], s.shape[1], 1, "row", "column"),
        Layout::Csc => (s.shape[1], s.shape[0], 1, "column", "row"),
        Layout::Bsr { br, bc } => (
            s.shape[0] / br,
            s.shape[1] / bc,
            br.checked_mul(bc).ok_or_else(|| {
                SparseError::too_large(format!("bsr blocks of {br}x{bc} are too large"))
            })?,
            "block row",
            "block column",
        ),
        other => {
            return Err(SparseError::internal(format!(
                "internal: {other} is not a compressed layout"
            )))
        }
    })
}

/// CSR, CSC and BSR (`per_entry = br·bc` values per stored block). With `sorted` false, only
/// the offsets and index ranges are checked.
fn compressed(s: SparseRef, sorted: bool) -> Result<(), SparseError> {
    let (outer, inner, per_entry, outer_name, inner_name) = geometry(&s)?;
    let cap = s.idx.len();
    match cap.checked_mul(per_entry) {
        Some(n) if n == s.values.len() => {}
        _ => {
            return Err(SparseError::invalid(format!(
                "values has {} entries, but indices has {cap}{}",
                s.values.len(),
                if per_entry == 1 {
                    String::new()
                } else {
                    format!(" blocks of {per_entry} values")
                }
            )))
        }
    }
    offsets(s.ptr, outer, cap)?;
    for o in 0..outer {
        let (start, end) = (s.ptr[o] as usize, s.ptr[o + 1] as usize);
        for e in start..end {
            let i = s.idx[e];
            if i < 0 || i as usize >= inner {
                return Err(SparseError::invalid(format!(
                    "indices[{e}] = {i} is out of range for {inner} {inner_name}s \
                     ({outer_name} {o})"
                )));
            }
            if sorted && e > start && i <= s.idx[e - 1] {
                return Err(SparseError::invalid(format!(
                    "indices[{e}] = {i} does not come after indices[{}] = {} in {outer_name} \
                     {o} (indices must be sorted and unique within a {outer_name})",
                    e - 1,
                    s.idx[e - 1]
                )));
            }
        }
    }
    Ok(())
}

fn coo(s: SparseRef, sorted: bool) -> Result<(), SparseError> {
    let rank = s.shape.len();
    if s.ptr.len() != 2 {
        return Err(SparseError::invalid(format!(
            "indptr has {} entries, but a coo tensor has exactly 2: [0, nnz]",
            s.ptr.len()
        )));
    }
    if s.ptr[0] != 0 {
        return Err(SparseError::invalid(format!(
            "indptr[0] = {} is not 0",
            s.ptr[0]
        )));
    }
    if s.ptr[1] < 0 {
        return Err(SparseError::invalid(format!(
            "indptr[1] = {} is negative",
            s.ptr[1]
        )));
    }
    let cap = s.values.len();
    if cap.checked_mul(rank) != Some(s.idx.len()) {
        return Err(SparseError::invalid(format!(
            "coords has {} entries, but values has {cap} (coords needs {rank} per value)",
            s.idx.len()
        )));
    }
    let nnz = s.ptr[1] as usize;
    if nnz > cap {
        return Err(SparseError::invalid(format!(
            "indptr[1] = {nnz} exceeds the {cap} entries of values"
        )));
    }
    for e in 0..nnz {
        let c = &s.idx[e * rank..(e + 1) * rank];
        for (k, (&x, &n)) in c.iter().zip(s.shape).enumerate() {
            if x < 0 || x as usize >= n {
                return Err(SparseError::invalid(format!(
                    "coords[{}] = {x} (entry {e}) is out of range for axis {k} of extent {n}",
                    e * rank + k
                )));
            }
        }
        if sorted && e > 0 {
            let prev = &s.idx[(e - 1) * rank..e * rank];
            if c <= prev {
                return Err(SparseError::invalid(format!(
                    "coo entry {e} at {c:?} does not come after entry {} at {prev:?} \
                     (entries must be sorted row-major and unique)",
                    e - 1
                )));
            }
        }
    }
    Ok(())
}

fn two_four(s: SparseRef) -> Result<(), SparseError> {
    let d = s
        .layout
        .two_four_dims(s.shape)
        .ok_or_else(|| SparseError::shape("2:4 axis out of range"))?;
    if !s.ptr.is_empty() {
        return Err(SparseError::invalid(format!(
            "indptr has {} entries, but a 2:4 tensor has none",
            s.ptr.len()
        )));
    }
    let (rows, words, half) = (d.rows(), d.words(), d.ext / 2);
    // rows × ext fits: it is the element count (checked by check_shape).
    if s.values.len() != rows * half {
        return Err(SparseError::invalid(format!(
            "values has {} entries, but {rows} rows of {} along the 2:4 axis keep {}",
            s.values.len(),
            d.ext,
            rows * half
        )));
    }
    let need = rows
        .checked_mul(words)
        .ok_or_else(|| SparseError::too_large("the 2:4 metadata size overflows"))?;
    if s.idx.len() != need {
        return Err(SparseError::invalid(format!(
            "meta has {} words, but {rows} rows need {words} each ({need})",
            s.idx.len()
        )));
    }
    for row in 0..rows {
        for g in 0..d.ext / 4 {
            let w = row * words + g / 8;
            let bits = ((s.idx[w] as u32) >> (4 * (g % 8))) & 0xf;
            let (p0, p1) = (bits & 3, bits >> 2);
            if p0 >= p1 {
                return Err(SparseError::invalid(format!(
                    "meta[{w}]: group {g} of row {row} keeps positions {p0} and {p1}, which do \
                     not strictly increase"
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::ValuesRef;

    fn csr<'a>(shape: &'a [usize], ptr: &'a [i32], idx: &'a [i32], v: &'a [f32]) -> SparseRef<'a> {
        SparseRef {
            shape,
            layout: Layout::Csr,
            ptr,
            idx,
            values: ValuesRef::F32(v),
        }
    }

    fn err(s: SparseRef) -> String {
        validate(s).expect_err("expected invalid").message
    }

    #[test]
    fn accepts_valid_and_padded_data() {
        let v = [1.0; 4];
        assert_eq!(
            validate(csr(&[2, 3], &[0, 2, 3], &[0, 2, 1], &v[..3])),
            Ok(())
        );
        // Capacity padding past the last offset may hold anything.
        assert_eq!(
            validate(csr(&[2, 3], &[0, 1, 1], &[2, 0, 0, 9], &v)),
            Ok(())
        );
        assert_eq!(validate(csr(&[0, 3], &[0], &[], &[])), Ok(()));
    }

    #[test]
    fn rejects_bad_compressed_arrays() {
        let v = [1.0; 4];
        let shape = [2, 3];
        assert!(err(csr(&shape, &[0, 2], &[0, 1], &v[..2])).contains("indptr has 2 entries"));
        assert!(err(csr(&shape, &[1, 2, 2], &[0, 1], &v[..2])).contains("indptr[0] = 1"));
        assert_eq!(
            err(csr(&shape, &[0, 2, 1], &[0, 1], &v[..2])),
            "indptr[2] = 1 is less than indptr[1] = 2"
        );
        assert!(err(csr(&shape, &[0, 2, 3], &[0, 1], &v[..2]))
            .contains("indptr[2] = 3 exceeds the 2 entries of indices"));
        assert!(err(csr(&shape, &[0, 1, 2], &[0, 3], &v[..2]))
            .contains("indices[1] = 3 is out of range for 3 columns (row 1)"));
        assert!(err(csr(&shape, &[0, 1, 2], &[0, -1], &v[..2])).contains("indices[1] = -1"));
        assert!(err(csr(&shape, &[0, 2, 2], &[1, 0], &v[..2]))
            .contains("indices[1] = 0 does not come after indices[0] = 1 in row 0"));
        assert!(err(csr(&shape, &[0, 2, 2], &[1, 1], &v[..2])).contains("sorted and unique"));
        assert!(err(csr(&shape, &[0, 1, 2], &[0, 1], &v[..3]))
            .contains("values has 3 entries, but indices has 2"));
        assert!(err(csr(&[6], &[0, 1], &[0], &v[..1])).contains("rank 2"));
        let csc = SparseRef {
            layout: Layout::Csc,
            ..csr(&shape, &[0, 1, 1, 1], &[2], &v[..1])
        };
        assert!(err(csc).contains("out of range for 2 rows (column 0)"));
    }

    #[test]
    fn rejects_bad_bsr() {
        let v = [1.0f32; 12];
        let bsr =
            |shape: &'static [usize], ptr: &'static [i32], idx: &'static [i32], n| SparseRef {
                shape,
                layout: Layout::Bsr { br: 2, bc: 3 },
                ptr,
                idx,
                values: ValuesRef::F32(&v[..n]),
            };
        assert_eq!(validate(bsr(&[4, 6], &[0, 1, 2], &[1, 0], 12)), Ok(()));
        assert!(err(bsr(&[4, 5], &[0, 1, 2], &[1, 0], 12)).contains("do not divide"));
        assert!(err(bsr(&[4, 6], &[0, 1, 2], &[1, 0], 11))
            .contains("values has 11 entries, but indices has 2 blocks of 6 values"));
        assert!(err(bsr(&[4, 6], &[0, 1, 2], &[2, 0], 12))
            .contains("indices[0] = 2 is out of range for 2 block columns (block row 0)"));
        assert!(err(bsr(&[4, 6], &[0, 1], &[1, 0], 12)).contains("indptr has 2 entries"));
    }

    #[test]
    fn rejects_bad_coo() {
        let v = [1.0f64; 3];
        let coo =
            |shape: &'static [usize], ptr: &'static [i32], idx: &'static [i32], n| SparseRef {
                shape,
                layout: Layout::Coo,
                ptr,
                idx,
                values: ValuesRef::F64(&v[..n]),
            };
        assert_eq!(
            validate(coo(&[2, 3], &[0, 2], &[0, 2, 1, 0, 0, 0], 3)),
            Ok(())
        );
        assert!(err(coo(&[2, 3], &[0, 2, 2], &[0, 2, 1, 0], 2)).contains("exactly 2"));
        assert!(err(coo(&[2, 3], &[1, 2], &[0, 2, 1, 0], 2)).contains("indptr[0] = 1"));
        assert!(err(coo(&[2, 3], &[0, -1], &[0, 2, 1, 0], 2)).contains("negative"));
        assert!(err(coo(&[2, 3], &[0, 3], &[0, 2, 1, 0], 2)).contains("exceeds the 2"));
        assert!(err(coo(&[2, 3], &[0, 2], &[0, 2, 1], 2)).contains("coords has 3 entries"));
        assert!(err(coo(&[2, 3], &[0, 2], &[0, 2, 2, 0], 2))
            .contains("coords[2] = 2 (entry 1) is out of range for axis 0 of extent 2"));
        assert!(err(coo(&[2, 3], &[0, 2], &[1, 0, 0, 2], 2)).contains("sorted row-major"));
        assert!(err(coo(&[2, 3], &[0, 2], &[1, 0, 1, 0], 2)).contains("unique"));
        assert!(err(coo(&[], &[0, 0], &[], 0)).contains("rank"));
    }

    #[test]
    fn rejects_bad_two_four() {
        let v = [1.0f32; 40];
        let tf = |shape: &'static [usize], ptr: &'static [i32], idx: &'static [i32], n| SparseRef {
            shape,
            layout: Layout::TwoFour { axis: 1 },
            ptr,
            idx,
            values: ValuesRef::F32(&v[..n]),
        };
        // Groups (0,1),(2,3): 0b1110_0100; unused bits of the last word are free.
        const GOOD: i32 = 0b1110_0100;
        assert_eq!(validate(tf(&[1, 8], &[], &[GOOD], 4)), Ok(()));
        assert_eq!(validate(tf(&[1, 8], &[], &[GOOD | !0xff], 4)), Ok(()));
        assert!(err(tf(&[1, 8], &[], &[0b1110_0101], 4))
            .contains("meta[0]: group 0 of row 0 keeps positions 1 and 1"));
        assert!(err(tf(&[1, 8], &[], &[0b0100_0100_0111], 4)).contains("positions 3 and 1"));
        assert!(err(tf(&[1, 8], &[], &[GOOD], 5)).contains("values has 5 entries"));
        assert!(err(tf(&[1, 8], &[], &[GOOD, 0], 4)).contains("meta has 2 words"));
        assert!(err(tf(&[1, 8], &[0], &[GOOD], 4)).contains("indptr has 1"));
        assert!(err(tf(&[1, 6], &[], &[GOOD], 3)).contains("multiple of 4"));
        // 36 along the axis: two words per row; group 8 lives in word 1.
        let mut words = vec![0x_e4e4_e4e4_u32 as i32, 0b1110_0100];
        let long = |words: &[i32]| {
            validate(SparseRef {
                shape: &[1, 36],
                layout: Layout::TwoFour { axis: 1 },
                ptr: &[],
                idx: words,
                values: ValuesRef::F32(&v[..18]),
            })
        };
        assert_eq!(long(&words), Ok(()));
        words[1] = 0;
        assert!(long(&words)
            .unwrap_err()
            .message
            .contains("meta[1]: group 8"));
    }

    #[test]
    fn canonicalize_sorts_and_sums_duplicates() {
        use crate::storage::Values;
        let s = SparseTensor {
            shape: vec![2, 4],
            layout: Layout::Csr,
            ptr: vec![0, 3, 5],
            idx: vec![3, 1, 3, 2, 0, 9],
            values: Values::F32(vec![1.0, 2.0, 4.0, 8.0, 16.0, 0.0]),
        };
        let c = canonicalize(s).unwrap();
        assert_eq!((c.ptr, c.idx), (vec![0, 2, 4], vec![1, 3, 0, 2]));
        assert_eq!(c.values, Values::F32(vec![2.0, 5.0, 16.0, 8.0]));
        // Blockwise sums for BSR; kept values exact without duplicates.
        let b = SparseTensor {
            shape: vec![2, 4],
            layout: Layout::Bsr { br: 2, bc: 2 },
            ptr: vec![0, 3],
            idx: vec![1, 0, 1],
            values: Values::F64((0..12).map(f64::from).collect()),
        };
        let c = canonicalize(b).unwrap();
        assert_eq!((c.ptr, c.idx), (vec![0, 2], vec![0, 1]));
        assert_eq!(
            c.values,
            Values::F64(vec![4.0, 5.0, 6.0, 7.0, 8.0, 10.0, 12.0, 14.0])
        );
        let o = SparseTensor {
            shape: vec![2, 3],
            layout: Layout::Coo,
            ptr: vec![0, 3],
            idx: vec![1, 2, 0, 1, 1, 2],
            values: Values::F64(vec![1.0, 2.0, 3.0]),
        };
        let c = canonicalize(o).unwrap();
        assert_eq!((c.ptr, c.idx), (vec![0, 2], vec![0, 1, 1, 2]));
        assert_eq!(c.values, Values::F64(vec![2.0, 4.0]));
        // Range errors still reported; unsorted-only data is fine.
        let bad = SparseTensor {
            shape: vec![2, 4],
            layout: Layout::Csr,
            ptr: vec![0, 1, 2],
            idx: vec![1, 4],
            values: Values::F32(vec![1.0, 1.0]),
        };
        assert!(canonicalize(bad)
            .unwrap_err()
            .message
            .contains("indices[1] = 4"));
    }
}
