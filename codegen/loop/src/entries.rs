//! Loops over the stored entries of a sparse operand: the one description of how each layout's
//! arrays are walked (spec/formats.md), used by the planner (format-keeping maps, sampled
//! products) and by backends that expand library calls into loop nests (`crate::expand`).

use crate::ir::{Index, Iter, Loop, SparseLayout, SparseOperand, VarId};

/// A coordinate along one axis: `Σ var·weight` over atoms in row-major order (each atom's
/// weight is the product of the extents after it); empty = the constant 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coord {
    /// (variable, extent) from most to least significant.
    pub atoms: Vec<(VarId, u64)>,
}

impl Coord {
    /// The extent the coordinate ranges over.
    pub fn extent(&self) -> u64 {
        self.atoms.iter().map(|a| a.1).product()
    }

    /// The coordinate as index terms, scaled by `stride`.
    pub fn terms(&self, stride: i64) -> Vec<(VarId, i64)> {
        let mut w = stride;
        let mut out = Vec::new();
        for &(v, e) in self.atoms.iter().rev() {
            out.push((v, w));
            w *= e as i64;
        }
        out
    }
}

/// Loops over the stored entries of `s`, outermost first: each loop's variable and
/// iteration (the first range loop is parallel where iterations write disjoint entries),
/// the position of the entry in `s.values`, and the coordinate of each axis.
pub fn stored_loops(
    s: &SparseOperand,
    fresh: &mut impl FnMut() -> VarId,
) -> (Vec<Loop>, Index, Vec<Coord>) {
    let shape = s.shape.clone();
    let ptr = s.ptr.unwrap_or(s.idx);
    match s.layout {
        SparseLayout::Csr | SparseLayout::Csc => {
            // CSR: rows then the stored columns of each row; CSC the other way round.
            let (outer, inner) = if s.layout == SparseLayout::Csr {
                (0, 1)
            } else {
                (1, 0)
            };
            let (o, p, c) = (fresh(), fresh(), fresh());
            let loops = vec![
                lp(o, range(shape[outer]), true),
                lp(
                    p,
                    Iter::Compressed {
                        ptr,
                        ptr_index: var_ix(o, 1, 0),
                        crd: s.idx,
                        coord: c,
                    },
                    false,
                ),
            ];
            let mut coords = vec![Coord::default(); 2];
            coords[outer] = one(o, shape[outer]);
            coords[inner] = one(c, shape[inner]);
            (loops, var_ix(p, 1, 0), coords)
        }
        SparseLayout::Bsr { br, bc } => {
            let (br, bc) = (br as u64, bc as u64);
            let (bi, p, bj) = (fresh(), fresh(), fresh());
            let (r, c) = (fresh(), fresh());
            let loops = vec![
                lp(bi, range(shape[0] / br), true),
                lp(
                    p,
                    Iter::Compressed {
                        ptr,
                        ptr_index: var_ix(bi, 1, 0),
                        crd: s.idx,
                        coord: bj,
                    },
                    false,
                ),
                lp(r, range(br), false),
                lp(c, range(bc), false),
            ];
            let pos = Index {
                offset: 0,
                terms: vec![(p, (br * bc) as i64), (r, bc as i64), (c, 1)],
            };
            let coords = vec![
                Coord {
                    atoms: vec![(bi, shape[0] / br), (r, br)],
                },
                Coord {
                    atoms: vec![(bj, shape[1] / bc), (c, bc)],
                },
            ];
            (loops, pos, coords)
        }
        SparseLayout::Coo => coo_loops(s, ptr, fresh),
        SparseLayout::TwoFour { axis } => two_four_loops(s, axis, fresh),
    }
}

fn lp(var: VarId, iter: Iter, parallel: bool) -> Loop {
    Loop {
        var,
        iter,
        parallel,
        vector: 1,
        gpu: None,
        body: Vec::new(),
    }
}

fn range(e: u64) -> Iter {
    Iter::Range { extent: e }
}

fn one(v: VarId, e: u64) -> Coord {
    Coord {
        atoms: vec![(v, e)],
    }
}

fn var_ix(v: VarId, stride: i64, offset: i64) -> Index {
    Index {
        offset,
        terms: vec![(v, stride)],
    }
}

/// [`stored_loops`] for COO: the entries, then a singleton level per axis.
fn coo_loops(
    s: &SparseOperand,
    ptr: crate::BufId,
    fresh: &mut impl FnMut() -> VarId,
) -> (Vec<Loop>, Index, Vec<Coord>) {
    let shape = &s.shape;
    // Entries `ptr[0] .. ptr[1]`; each coordinate is a singleton level reading the
    // entry's row of `idx` (the compressed level's own coordinate is unused).
    let n = shape.len() as i64;
    let (p, unused) = (fresh(), fresh());
    let mut loops = vec![lp(
        p,
        Iter::Compressed {
            ptr,
            ptr_index: Index {
                offset: 0,
                terms: Vec::new(),
            },
            crd: s.idx,
            coord: unused,
        },
        false,
    )];
    let mut coords = Vec::new();
    for (k, &e) in shape.iter().enumerate() {
        let v = fresh();
        loops.push(lp(
            v,
            Iter::Singleton {
                crd: s.idx,
                pos_index: var_ix(p, n, k as i64),
            },
            false,
        ));
        coords.push(one(v, e));
    }
    (loops, var_ix(p, 1, 0), coords)
}

/// [`stored_loops`] for 2:4 along `axis`: range loops over the other axes, then the kept values.
fn two_four_loops(
    s: &SparseOperand,
    axis: usize,
    fresh: &mut impl FnMut() -> VarId,
) -> (Vec<Loop>, Index, Vec<Coord>) {
    let shape = &s.shape;
    // Range loops over the other axes (the rows, row-major), then the kept values.
    let ext = shape[axis];
    let words = ext.div_ceil(32) as i64;
    let mut loops = Vec::new();
    let mut coords = vec![Coord::default(); shape.len()];
    let mut row = Index {
        offset: 0,
        terms: Vec::new(),
    };
    let others: Vec<usize> = (0..shape.len()).filter(|&a| a != axis).collect();
    let mut weight = 1i64;
    let mut row_terms = Vec::new();
    for &a in others.iter().rev() {
        let v = fresh();
        row_terms.push((v, weight, a));
        weight *= shape[a] as i64;
    }
    row_terms.reverse();
    for (i, &(v, w, a)) in row_terms.iter().enumerate() {
        loops.push(lp(v, range(shape[a]), i == 0));
        row.terms.push((v, w));
        coords[a] = one(v, shape[a]);
    }
    let (kv, k) = (fresh(), fresh());
    let scale = |ix: &Index, by: i64| Index {
        offset: ix.offset * by,
        terms: ix.terms.iter().map(|&(v, w)| (v, w * by)).collect(),
    };
    loops.push(lp(
        kv,
        Iter::TwoFour {
            groups: ext / 4,
            meta: s.idx,
            meta_index: scale(&row, words),
            coord: k,
        },
        false,
    ));
    coords[axis] = one(k, ext);
    let mut pos = scale(&row, (ext / 2) as i64);
    pos.terms.push((kv, 1));
    (loops, pos, coords)
}
