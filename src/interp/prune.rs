//! The oracle's own `sparsify`: which entries a format and a selection keep, written plainly
//! from spec/language.md (§ sparsify) and sharing no code with `tdsl_sparse::prune`, which the
//! backends use. Values are f64 (already rounded to the value's dtype); the result is the dense
//! tensor with every dropped entry zero.
//!
//! The rules, for every format:
//! - magnitudes order with NaN above every number (`f64::total_cmp` on `|v|`), ties to the
//!   lower flat index (block index, position in the group);
//! - `density=d` keeps `min(round(d · n), n)` of the `n` entries (blocks) of largest magnitude;
//! - `threshold=t` keeps the nonzero entries (blocks with a nonzero) whose magnitude (L2 norm)
//!   is above `t`; with neither, every nonzero entry (block with a nonzero) is kept;
//! - 2:4 keeps, of every group of 4 along its axis, the two largest nonzeros (and with
//!   `threshold=t` only those above `t`).

use crate::check::{Format, Select};
use std::cmp::Ordering;

/// `x` (row-major, `shape`) pruned to `format` by `select`, as a dense tensor.
pub(super) fn sparsify(x: &[f64], shape: &[usize], format: Format, select: Select) -> Vec<f64> {
    let keep = match format {
        Format::Dense => return x.to_vec(),
        Format::Coo | Format::Csr | Format::Csc => entries(x, select),
        Format::Bsr { rows, cols } => blocks(x, shape, rows as usize, cols as usize, select),
        Format::TwoFour { slot } => two_four(x, shape, slot, select),
    };
    x.iter()
        .zip(&keep)
        .map(|(&v, &k)| if k { v } else { 0.0 })
        .collect()
}

/// Descending magnitude, ties to the lower index.
fn by_magnitude(mags: &[f64]) -> impl Fn(&usize, &usize) -> Ordering + '_ {
    |&a, &b| mags[b].total_cmp(&mags[a]).then(a.cmp(&b))
}

/// The `min(round(d · n), n)` indices of largest magnitude.
fn top(mags: &[f64], d: f64) -> Vec<usize> {
    let n = mags.len();
    let k = ((d * n as f64).round() as usize).min(n);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(by_magnitude(mags));
    order.truncate(k);
    order
}

fn entries(x: &[f64], select: Select) -> Vec<bool> {
    let mags: Vec<f64> = x.iter().map(|v| v.abs()).collect();
    match select {
        Select::All => x.iter().map(|&v| v != 0.0).collect(),
        Select::Threshold(t) => x.iter().map(|&v| v != 0.0 && v.abs() > t).collect(),
        Select::Density(d) => {
            let mut keep = vec![false; x.len()];
            for i in top(&mags, d) {
                keep[i] = true;
            }
            keep
        }
    }
}

fn blocks(x: &[f64], shape: &[usize], br: usize, bc: usize, select: Select) -> Vec<bool> {
    let (rows, cols) = (shape[0], shape[1]);
    let (nbr, nbc) = (rows / br.max(1), cols / bc.max(1));
    let at = |b: usize, r: usize, c: usize| ((b / nbc) * br + r) * cols + (b % nbc) * bc + c;
    let mut norms = Vec::with_capacity(nbr * nbc);
    let mut nonzero = Vec::with_capacity(nbr * nbc);
    for b in 0..nbr * nbc {
        let mut sum = 0.0;
        let mut any = false;
        for r in 0..br {
            let mut row = 0.0;
            for c in 0..bc {
                let v = x[at(b, r, c)];
                row += v * v;
                any |= v != 0.0;
            }
            sum += row;
        }
        norms.push(sum.sqrt().abs());
        nonzero.push(any);
    }
    let kept: Vec<bool> = match select {
        Select::All => nonzero.clone(),
        Select::Threshold(t) => (0..norms.len())
            .map(|b| nonzero[b] && norms[b] > t)
            .collect(),
        Select::Density(d) => {
            let mut k = vec![false; norms.len()];
            for b in top(&norms, d) {
                k[b] = true;
            }
            k
        }
    };
    let mut keep = vec![false; x.len()];
    for (b, _) in kept.iter().enumerate().filter(|(_, &k)| k) {
        for r in 0..br {
            for c in 0..bc {
                keep[at(b, r, c)] = true;
            }
        }
    }
    keep
}

fn two_four(x: &[f64], shape: &[usize], axis: usize, select: Select) -> Vec<bool> {
    let ext = shape.get(axis).copied().unwrap_or(1);
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let mut keep = vec![false; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            for g in 0..ext / 4 {
                let flat = |p: usize| (o * ext + 4 * g + p) * inner + i;
                let mags: Vec<f64> = (0..4).map(|p| x[flat(p)].abs()).collect();
                let mut order: Vec<usize> = (0..4).collect();
                order.sort_by(by_magnitude(&mags));
                for p in order.into_iter().filter(|&p| x[flat(p)] != 0.0).take(2) {
                    keep[flat(p)] = match select {
                        Select::Threshold(t) => mags[p] > t,
                        _ => true,
                    };
                }
            }
        }
    }
    keep
}

#[cfg(test)]
mod tests {
    //! The oracle's pruning and the backends' (`tdsl_sparse::prune`) are written independently;
    //! on random data full of ties, zeros and NaNs they keep exactly the same entries.

    use super::*;
    use proptest::prelude::*;

    fn backends(x: &[f64], shape: &[usize], format: Format, select: Select) -> Vec<f64> {
        let layout = crate::sparse::layout(format, shape.len()).expect("a sparse format");
        let t = tdsl_sparse::prune::sparsify(tdsl_sparse::ValuesRef::F64(x), shape, layout, select)
            .expect("a valid request");
        tdsl_sparse::prune::to_dense_f64(t.as_ref()).expect("dense")
    }

    fn same(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    proptest! {
        #[test]
        fn oracle_and_backend_pruning_agree(
            r in 1usize..5,
            c in 1usize..5,
            vals in proptest::collection::vec(-3i8..=3, 64),
            nan in proptest::option::of(0usize..64),
            fmt in 0usize..6,
            sel in 0usize..3,
            t in prop::sample::select(vec![0.0, 0.5, 1.0, 2.5]),
            d in prop::sample::select(vec![0.0, 0.25, 0.5, 0.7, 1.0]),
        ) {
            // Extents that every format accepts: blocks of 2×2, groups of 4 along the slot.
            let (rows, cols) = (2 * r, 4 * c);
            let mut x: Vec<f64> = vals.iter().cycle().take(rows * cols).map(|&v| v as f64).collect();
            if let Some(i) = nan {
                x[i % (rows * cols)] = f64::NAN;
            }
            let format = match fmt {
                0 => Format::Coo,
                1 => Format::Csr,
                2 => Format::Csc,
                3 => Format::Bsr { rows: 2, cols: 2 },
                4 => Format::TwoFour { slot: 1 },
                _ => Format::TwoFour { slot: 0 },
            };
            let shape = if fmt == 5 { vec![cols, rows] } else { vec![rows, cols] };
            let select = match (sel, fmt >= 4) {
                (0, _) | (2, true) => Select::All,
                (1, _) => Select::Threshold(t),
                _ => Select::Density(d),
            };
            let want = backends(&x, &shape, format, select);
            let got = sparsify(&x, &shape, format, select);
            prop_assert!(same(&got, &want), "{format:?} {select:?} {shape:?}\n{x:?}\noracle {got:?}\nbackend {want:?}");
        }
    }
}
