//! Launch units: how a kernel is cut into the pieces a backend launches. Every backend sees the
//! same cut: runs of statements between top-level library calls (one CPU function, one CUDA
//! `__global__`), and the calls themselves. A run that is a single parallel range loop whose
//! iterations store to distinct elements carries a [`Split`]: its iterations may be divided
//! among threads (CPU) or blocks (GPU).

use crate::ir::{Iter, Kernel, LibCall, Loop, Stmt};
use std::collections::HashMap;

/// One launch of a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchUnit {
    /// Statements `start..end` of the kernel body, none of them a library call.
    Loops {
        start: usize,
        end: usize,
        split: Option<Split>,
    },
    /// The library call at index `stmt` of the kernel body.
    Call { stmt: usize },
}

/// A parallel loop whose iterations may run concurrently: its extent and a rough count of the
/// element operations of one iteration (to choose how many pieces to cut it into).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    pub extent: u64,
    pub work_per_iter: u64,
}

/// The launch units of `k`, in order.
pub fn launch_units(k: &Kernel) -> Vec<LaunchUnit> {
    let mut out = Vec::new();
    let mut start = 0;
    let loops = |start: usize, end: usize, out: &mut Vec<LaunchUnit>| {
        if start < end {
            out.push(LaunchUnit::Loops {
                start,
                end,
                split: split(&k.body[start..end]),
            });
        }
    };
    for (i, s) in k.body.iter().enumerate() {
        if matches!(s, Stmt::Call(_)) {
            loops(start, i, &mut out);
            out.push(LaunchUnit::Call { stmt: i });
            start = i + 1;
        }
    }
    loops(start, k.body.len(), &mut out);
    out
}

/// The loop of a run of statements that is one parallel range loop.
pub fn split_loop(stmts: &[Stmt]) -> Option<&Loop> {
    match stmts {
        [Stmt::Loop(l)] if l.parallel && matches!(l.iter, Iter::Range { .. }) => Some(l),
        _ => None,
    }
}

fn split(stmts: &[Stmt]) -> Option<Split> {
    let l = split_loop(stmts).filter(|l| race_free(l))?;
    let Iter::Range { extent } = l.iter else {
        return None;
    };
    Some(Split {
        extent,
        work_per_iter: work(&l.body).max(1),
    })
}

/// Element operations of one run of `stmts` (a rough count for choosing a task count).
pub fn work(stmts: &[Stmt]) -> u64 {
    fn expr_size(e: &crate::ir::Expr) -> u64 {
        let mut n = 0;
        e.visit(&mut |_| n += 1);
        n
    }
    stmts
        .iter()
        .map(|s| match s {
            Stmt::Loop(l) => {
                let body = work(&l.body).max(1);
                match l.iter {
                    Iter::Range { extent } => extent.saturating_mul(body),
                    Iter::Singleton { .. } => body,
                    Iter::TwoFour { groups, .. } => groups.saturating_mul(2).saturating_mul(body),
                    Iter::Compressed { .. } => body.saturating_mul(16),
                }
            }
            Stmt::Let { init: e, .. } | Stmt::Update { value: e, .. } => expr_size(e),
            Stmt::Store { value, .. } => expr_size(value),
            Stmt::Call(LibCall::Gemm { m, n, k, batch, .. }) => batch
                .iter()
                .fold(m.saturating_mul(*n).saturating_mul(*k), |a, b| {
                    a.saturating_mul(*b)
                }),
            Stmt::Call(LibCall::SpMM { m, n, k, .. }) => m.saturating_mul(*n).saturating_mul(*k),
            Stmt::Call(LibCall::Sparsify { out: s, .. } | LibCall::Densify { s, .. }) => {
                s.shape.iter().product()
            }
        })
        .fold(0u64, |a, b| a.saturating_add(b))
}

/// Whether distinct iterations of `l` store to distinct elements, so that its iterations can
/// run on different threads: per buffer, every store has the same nonzero stride `S` in the
/// loop's variable, and the elements one iteration stores (each store's offset plus the range
/// of its other terms, whose variables need static extents) lie within fewer than `|S|`
/// consecutive elements; then iteration `p` stays inside its own window `S·p + [lo, hi]`.
/// (A buffer may be stored at several indices: a partial sum's row zeroed, then accumulated.)
pub fn race_free(l: &Loop) -> bool {
    use crate::ir::{BufId, VarId};
    /// Per buffer: the stride of the split variable and the lowest and highest element one
    /// iteration stores, relative to `S·p`.
    type Windows = HashMap<BufId, (i128, i128, i128)>;
    fn block(
        stmts: &[Stmt],
        var: VarId,
        ext: &mut HashMap<VarId, Option<u64>>,
        win: &mut Windows,
    ) -> bool {
        stmts.iter().all(|s| match s {
            Stmt::Loop(inner) => {
                let bound: Vec<(VarId, Option<u64>)> = match &inner.iter {
                    Iter::Range { extent } => vec![(inner.var, Some(*extent))],
                    Iter::TwoFour { groups, coord, .. } => vec![
                        (inner.var, Some(groups.saturating_mul(2))),
                        (*coord, Some(groups.saturating_mul(4))),
                    ],
                    Iter::Compressed { coord, .. } => vec![(inner.var, None), (*coord, None)],
                    Iter::Singleton { .. } => vec![(inner.var, None)],
                };
                ext.extend(bound.iter().copied());
                let ok = block(&inner.body, var, ext, win);
                for (v, _) in bound {
                    ext.remove(&v);
                }
                ok
            }
            Stmt::Store { buf, index, .. } => {
                let stride = index.stride_of(var) as i128;
                let (mut lo, mut hi) = (index.offset as i128, index.offset as i128);
                for (v, st) in &index.terms {
                    if *v == var || *st == 0 {
                        continue;
                    }
                    match ext.get(v).copied().flatten() {
                        Some(e) => {
                            let reach = *st as i128 * (e.max(1) as i128 - 1);
                            lo += reach.min(0);
                            hi += reach.max(0);
                        }
                        None => return false,
                    }
                }
                let w = win.entry(*buf).or_insert((stride, lo, hi));
                if w.0 != stride || stride == 0 {
                    return false;
                }
                w.1 = w.1.min(lo);
                w.2 = w.2.max(hi);
                w.2 - w.1 < stride.abs()
            }
            Stmt::Call(_) => false,
            Stmt::Let { .. } | Stmt::Update { .. } => true,
        })
    }
    block(&l.body, l.var, &mut HashMap::new(), &mut HashMap::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{BufId, Expr, Index, MatView, VarId};

    fn store_loop(var: u32, extent: u64, stride: i64) -> Stmt {
        Stmt::Loop(Loop {
            var: VarId(var),
            iter: Iter::Range { extent },
            parallel: true,
            vector: 1,
            gpu: None,
            body: vec![Stmt::Store {
                buf: BufId(0),
                index: Index {
                    offset: 0,
                    terms: vec![(VarId(var), stride)],
                },
                value: Expr::Const(1.0),
            }],
        })
    }

    fn gemm() -> Stmt {
        let v = |b: u32| MatView {
            buf: BufId(b),
            offset: 0,
            row_stride: 2,
            col_stride: 1,
            batch_strides: Vec::new(),
        };
        Stmt::Call(LibCall::Gemm {
            m: 2,
            n: 2,
            k: 2,
            batch: Vec::new(),
            a: v(1),
            b: v(2),
            c: v(0),
            accumulate: false,
        })
    }

    #[test]
    fn kernels_are_cut_at_library_calls_and_split_only_when_race_free() {
        let k = Kernel {
            name: "k0".into(),
            origin: String::new(),
            source: None,
            body: vec![
                store_loop(0, 8, 1),
                gemm(),
                store_loop(1, 8, 0),
                store_loop(2, 4, 1),
            ],
        };
        let units = launch_units(&k);
        assert_eq!(
            units,
            vec![
                LaunchUnit::Loops {
                    start: 0,
                    end: 1,
                    split: Some(Split {
                        extent: 8,
                        work_per_iter: 1
                    })
                },
                LaunchUnit::Call { stmt: 1 },
                // Two loops in one run: not a single parallel loop, so no split.
                LaunchUnit::Loops {
                    start: 2,
                    end: 4,
                    split: None
                },
            ]
        );
        // Every iteration stores to element 0: a race, so no split.
        let racy = Kernel {
            body: vec![store_loop(0, 8, 0)],
            ..k
        };
        assert_eq!(
            launch_units(&racy),
            vec![LaunchUnit::Loops {
                start: 0,
                end: 1,
                split: None
            }]
        );
    }

    /// A row per iteration stored at two indices (zeroed, then accumulated) is race-free; two
    /// indices whose windows reach into the next row, or with different strides, are not.
    #[test]
    fn several_stores_to_one_buffer_split_when_each_iteration_keeps_to_its_row() {
        let ix = |offset: i64, terms: &[(u32, i64)]| Index {
            offset,
            terms: terms.iter().map(|&(v, s)| (VarId(v), s)).collect(),
        };
        let inner = |var: u32, extent: u64, index: Index| {
            Stmt::Loop(Loop {
                var: VarId(var),
                iter: Iter::Range { extent },
                parallel: false,
                vector: 1,
                gpu: None,
                body: vec![Stmt::Store {
                    buf: BufId(0),
                    index,
                    value: Expr::Const(0.0),
                }],
            })
        };
        let outer = |body: Vec<Stmt>| Loop {
            var: VarId(0),
            iter: Iter::Range { extent: 8 },
            parallel: true,
            vector: 1,
            gpu: None,
            body,
        };
        // Row `v0` of 64: `[64·v0 + v1]` for v1 < 64, then `[64·v0 + v2]` for v2 < 64.
        let rows = outer(vec![
            inner(1, 64, ix(0, &[(0, 64), (1, 1)])),
            inner(2, 64, ix(0, &[(0, 64), (2, 1)])),
        ]);
        assert!(race_free(&rows));
        // The second store reaches one element into the next row.
        let spill = outer(vec![
            inner(1, 64, ix(0, &[(0, 64), (1, 1)])),
            inner(2, 64, ix(1, &[(0, 64), (2, 1)])),
        ]);
        assert!(!race_free(&spill));
        // Different strides of the split variable: windows of different iterations can meet.
        let strides = outer(vec![
            inner(1, 4, ix(0, &[(0, 64), (1, 1)])),
            inner(2, 4, ix(0, &[(0, 32), (2, 1)])),
        ]);
        assert!(!race_free(&strides));
        // A reversed row (negative strides) is still one row.
        let reversed = outer(vec![inner(1, 64, ix(63, &[(0, 64), (1, -1)]))]);
        assert!(race_free(&reversed));
    }
}
