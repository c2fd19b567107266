//! Library calls as loop nests: the generic form of `gemm`, `spmm` and `densify` for backends
//! that have no tuned kernel for a call (a GPU backend's first, correct kernels), written in the
//! loop IR so that every backend renders them as it renders any other nest and the evaluator
//! checks them against the calls they replace.
//!
//! Each expansion owns its output elements thread by thread, so its parallel loops carry
//! `gpu: Some(GpuAxis::Grid)` (iterations write disjoint elements by construction, which a
//! GPU mapping pass may trust without proving it again):
//! - `gemm`: one iteration per `c` element (batch, row, column), an accumulator over `k`
//!   in the operands' compute type (f32 for f32/f16/bf16, f64 for f64), as the CPU's calls.
//! - `spmm`: one iteration per (group of output rows, dense column) when the sparse operand's
//!   outer loop walks the output's sparse-side axis (CSR, BSR and 2:4 rows; CSC transposed),
//!   else one per dense column; each adds the stored entries' products into `c`.
//! - `densify`: zero the destination, then one iteration per outer level of stored entries.
//!
//! `sparsify` (pruning by magnitude, with ties broken by position) stays a call.

use crate::entries::{stored_loops, Coord};
use crate::ir::{
    AccId, AccOp, BinOp, BufId, Expr, GpuAxis, Index, Iter, Kernel, LibCall, Loop, LoopProgram,
    MatView, Side, SparseOperand, Stmt, VarId,
};

/// `p` with every `gemm`, `spmm` and `densify` call replaced by its loop nest.
pub fn expand_calls(p: &LoopProgram) -> LoopProgram {
    let kernels = p
        .kernels
        .iter()
        .map(|k| {
            let mut ids = Fresh::after(&k.body);
            let body = k
                .body
                .iter()
                .flat_map(|s| match s {
                    Stmt::Call(call) => expand_call(p, call, &mut ids),
                    other => vec![other.clone()],
                })
                .collect();
            Kernel { body, ..k.clone() }
        })
        .collect();
    LoopProgram {
        buffers: p.buffers.clone(),
        kernels,
        tf32: p.tf32,
    }
}

/// The statements that replace `call` (the call itself for `sparsify`).
pub fn expand_call(p: &LoopProgram, call: &LibCall, ids: &mut Fresh) -> Vec<Stmt> {
    match call {
        LibCall::Gemm {
            m,
            n,
            k,
            batch,
            a,
            b,
            c,
            accumulate,
        } => vec![gemm(p, [*m, *n, *k], batch, [a, b, c], *accumulate, ids)],
        LibCall::SpMM {
            m,
            n,
            k,
            s,
            transposed,
            side,
            d,
            c,
            accumulate,
        } => spmm(
            p,
            [*m, *n, *k],
            s,
            *transposed,
            *side,
            d,
            c,
            *accumulate,
            ids,
        ),
        LibCall::Densify { s, dst } => densify(p, s, *dst, ids),
        LibCall::Sparsify { .. } => vec![Stmt::Call(call.clone())],
    }
}

/// Fresh loop variables and accumulators for one kernel.
#[derive(Debug, Clone)]
pub struct Fresh {
    var: u32,
    acc: u32,
}

impl Fresh {
    /// Ids after every variable and accumulator `body` uses.
    pub fn after(body: &[Stmt]) -> Fresh {
        let (mut var, mut acc) = (0u32, 0u32);
        for s in body {
            s.visit(&mut |s| match s {
                Stmt::Loop(l) => {
                    var = var.max(l.var.0 + 1);
                    if let Iter::Compressed { coord, .. } | Iter::TwoFour { coord, .. } = l.iter {
                        var = var.max(coord.0 + 1);
                    }
                }
                Stmt::Let { acc: a, .. } => acc = acc.max(a.0 + 1),
                _ => {}
            });
        }
        Fresh { var, acc }
    }

    pub fn var(&mut self) -> VarId {
        self.var += 1;
        VarId(self.var - 1)
    }

    pub fn acc(&mut self) -> AccId {
        self.acc += 1;
        AccId(self.acc - 1)
    }
}

fn owned_loop(var: VarId, extent: u64, body: Vec<Stmt>) -> Stmt {
    Stmt::Loop(Loop {
        var,
        iter: Iter::Range { extent },
        parallel: true,
        vector: 1,
        gpu: Some(GpuAxis::Grid),
        body,
    })
}

fn serial_loop(var: VarId, extent: u64, body: Vec<Stmt>) -> Stmt {
    Stmt::Loop(Loop {
        var,
        iter: Iter::Range { extent },
        parallel: false,
        vector: 1,
        gpu: None,
        body,
    })
}

/// Element `[batch…, r, c]` of a view.
fn at(v: &MatView, batch: &[VarId], r: Option<VarId>, c: Option<VarId>) -> Index {
    let mut terms: Vec<(VarId, i64)> = batch.iter().copied().zip(v.batch_strides.clone()).collect();
    terms.extend(r.map(|r| (r, v.row_stride)));
    terms.extend(c.map(|c| (c, v.col_stride)));
    Index {
        offset: v.offset,
        terms,
    }
}

fn load(buf: BufId, index: Index) -> Expr {
    Expr::Load { buf, index }
}

fn mul(a: Expr, b: Expr) -> Expr {
    Expr::Binary(BinOp::Mul, Box::new(a), Box::new(b))
}

fn add(a: Expr, b: Expr) -> Expr {
    Expr::Binary(BinOp::Add, Box::new(a), Box::new(b))
}

fn gemm(
    p: &LoopProgram,
    [m, n, k]: [u64; 3],
    batch: &[u64],
    [a, b, c]: [&MatView; 3],
    accumulate: bool,
    ids: &mut Fresh,
) -> Stmt {
    let bv: Vec<VarId> = batch.iter().map(|_| ids.var()).collect();
    let (i, j, kk, acc) = (ids.var(), ids.var(), ids.var(), ids.acc());
    let ty = p.buffer(c.buf).ty.compute();
    let product = mul(
        load(a.buf, at(a, &bv, Some(i), Some(kk))),
        load(b.buf, at(b, &bv, Some(kk), Some(j))),
    );
    let c_at = at(c, &bv, Some(i), Some(j));
    let value = if accumulate {
        add(load(c.buf, c_at.clone()), Expr::Acc(acc))
    } else {
        Expr::Acc(acc)
    };
    let body = vec![
        Stmt::Let {
            acc,
            ty,
            init: Expr::Const(0.0),
        },
        serial_loop(
            kk,
            k,
            vec![Stmt::Update {
                acc,
                op: AccOp::Add,
                value: product,
            }],
        ),
        Stmt::Store {
            buf: c.buf,
            index: c_at,
            value,
        },
    ];
    let mut nest = owned_loop(j, n, body);
    nest = owned_loop(i, m, vec![nest]);
    for (v, &e) in bv.iter().zip(batch).rev() {
        nest = owned_loop(*v, e, vec![nest]);
    }
    nest
}

/// A coordinate as index terms along a view axis of stride `stride`.
fn coord_index(offset: i64, parts: &[(&Coord, i64)]) -> Index {
    Index {
        offset,
        terms: parts.iter().flat_map(|(c, s)| c.terms(*s)).collect(),
    }
}

#[allow(clippy::too_many_arguments)]
fn spmm(
    p: &LoopProgram,
    [m, n, _k]: [u64; 3],
    s: &SparseOperand,
    transposed: bool,
    side: Side,
    d: &MatView,
    c: &MatView,
    accumulate: bool,
    ids: &mut Fresh,
) -> Vec<Stmt> {
    let (mut loops, pos, coords) = stored_loops(s, &mut || ids.var());
    // The stored operand's axes, in the roles of S's rows and columns.
    let (s_row, s_col) = if transposed {
        (&coords[1], &coords[0])
    } else {
        (&coords[0], &coords[1])
    };
    // Left: c[i, j] += S[i, k]·d[k, j]: i from S's rows, the dense axis j.
    // Right: c[i, j] += d[i, k]·S[k, j]: j from S's columns, the dense axis i.
    let (sparse_out, contracted, dense_extent) = match side {
        Side::Left => (s_row, s_col, n),
        Side::Right => (s_col, s_row, m),
    };
    let dense = ids.var();
    let dense_coord = Coord {
        atoms: vec![(dense, dense_extent)],
    };
    let (c_sparse_stride, c_dense_stride) = match side {
        Side::Left => (c.row_stride, c.col_stride),
        Side::Right => (c.col_stride, c.row_stride),
    };
    let (d_k_stride, d_dense_stride) = match side {
        Side::Left => (d.row_stride, d.col_stride),
        Side::Right => (d.col_stride, d.row_stride),
    };
    let c_at = coord_index(
        c.offset,
        &[
            (sparse_out, c_sparse_stride),
            (&dense_coord, c_dense_stride),
        ],
    );
    let d_at = coord_index(
        d.offset,
        &[(contracted, d_k_stride), (&dense_coord, d_dense_stride)],
    );
    let v = load(s.values, pos);
    let dv = load(d.buf, d_at);
    let product = match side {
        Side::Left => mul(v, dv),
        Side::Right => mul(dv, v),
    };
    let ty = p.buffer(c.buf).ty.compute();
    let product = if p.buffer(s.values).ty.compute() == ty {
        product
    } else {
        Expr::Cast(ty, Box::new(product))
    };
    let update = Stmt::Store {
        buf: c.buf,
        index: c_at.clone(),
        value: add(load(c.buf, c_at.clone()), product.clone()),
    };
    // Owned rows: the outer stored loop walks the output's sparse-side axis.
    let outer = loops.first().and_then(|l| match l.iter {
        Iter::Range { extent } if sparse_out.atoms.first().map(|a| a.0) == Some(l.var) => {
            Some((l.var, extent))
        }
        _ => None,
    });
    // Zero what this iteration owns of c (all of the sparse-side axis, or the outer group's
    // rows), unless accumulating.
    let zero = |ids: &mut Fresh, fixed: Option<VarId>| -> Vec<Stmt> {
        if accumulate {
            return Vec::new();
        }
        let atoms: Vec<(VarId, u64)> = sparse_out
            .atoms
            .iter()
            .map(|&(v, e)| {
                if Some(v) == fixed {
                    (v, e)
                } else {
                    (ids.var(), e)
                }
            })
            .collect();
        let rows = Coord {
            atoms: atoms.clone(),
        };
        let mut nest = Stmt::Store {
            buf: c.buf,
            index: coord_index(
                c.offset,
                &[(&rows, c_sparse_stride), (&dense_coord, c_dense_stride)],
            ),
            value: Expr::Const(0.0),
        };
        for &(v, e) in atoms.iter().rev() {
            if Some(v) != fixed {
                nest = serial_loop(v, e, vec![nest]);
            }
        }
        vec![nest]
    };
    let nest_in = |loops: Vec<Loop>, innermost: Vec<Stmt>| -> Vec<Stmt> {
        let mut body = innermost;
        for mut l in loops.into_iter().rev() {
            l.parallel = false;
            l.body = body;
            body = vec![Stmt::Loop(l)];
        }
        body
    };
    match outer {
        // One compressed or 2:4 loop inside the owned row (CSR, 2:4 rows): the element's sum in
        // an accumulator, stored once, as GEMM accumulates (f32 for 16-bit results), and a row
        // a GPU warp or block can split between its threads.
        Some((o, extent))
            if loops.len() == 2
                && matches!(
                    loops[1].iter,
                    Iter::Compressed { .. } | Iter::TwoFour { .. }
                )
                && c_at.terms.iter().all(|t| t.0 == o || t.0 == dense) =>
        {
            let mut inner = loops.pop().expect("two loops");
            let acc = ids.acc();
            let init = if accumulate {
                load(c.buf, c_at.clone())
            } else {
                Expr::Const(0.0)
            };
            inner.parallel = false;
            inner.body = vec![Stmt::Update {
                acc,
                op: AccOp::Add,
                value: product,
            }];
            let body = vec![
                Stmt::Let { acc, ty, init },
                Stmt::Loop(inner),
                Stmt::Store {
                    buf: c.buf,
                    index: c_at,
                    value: Expr::Acc(acc),
                },
            ];
            vec![owned_loop(
                o,
                extent,
                vec![owned_loop(dense, dense_extent, body)],
            )]
        }
        Some((o, extent)) => {
            let rest = loops.split_off(1);
            let mut body = zero(ids, Some(o));
            body.extend(nest_in(rest, vec![update]));
            vec![owned_loop(
                o,
                extent,
                vec![owned_loop(dense, dense_extent, body)],
            )]
        }
        None => {
            let mut body = zero(ids, None);
            body.extend(nest_in(loops, vec![update]));
            vec![owned_loop(dense, dense_extent, body)]
        }
    }
}

fn densify(p: &LoopProgram, s: &SparseOperand, dst: BufId, ids: &mut Fresh) -> Vec<Stmt> {
    let all = ids.var();
    let elems: u64 = s.shape.iter().product();
    let zero = owned_loop(
        all,
        elems,
        vec![Stmt::Store {
            buf: dst,
            index: Index {
                offset: 0,
                terms: vec![(all, 1)],
            },
            value: Expr::Const(0.0),
        }],
    );
    let (loops, pos, coords) = stored_loops(s, &mut || ids.var());
    let mut stride = 1i64;
    let mut parts = Vec::new();
    for (c, &e) in coords.iter().zip(&s.shape).rev() {
        parts.push((c, stride));
        stride *= e as i64;
    }
    let value = load(s.values, pos);
    let value = match (p.buffer(s.values).ty, p.buffer(dst).ty) {
        (a, b) if a == b => value,
        (_, b) => Expr::Cast(b, Box::new(value)),
    };
    let mut body = vec![Stmt::Store {
        buf: dst,
        index: coord_index(0, &parts),
        value,
    }];
    // Entries are unique, so the outer range loop's iterations write disjoint elements.
    let n = loops.len();
    for (depth, mut l) in loops.into_iter().rev().enumerate() {
        let first = depth + 1 == n;
        l.parallel = first && matches!(l.iter, Iter::Range { .. });
        if l.parallel {
            l.gpu = Some(GpuAxis::Grid);
        }
        l.body = body;
        body = vec![Stmt::Loop(l)];
    }
    let mut out = vec![zero];
    out.extend(body);
    out
}
