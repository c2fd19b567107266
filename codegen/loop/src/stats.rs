//! Work and traffic of kernels, read off the loop IR: what `bench` divides time by.
//!
//! FLOPs count every arithmetic operation the kernel executes (unary and binary ops, and the
//! combine of each accumulator update; casts are free), times the iterations of the loops around
//! it; a GEMM call counts `2·m·n·k` per batch element. Bytes count each buffer the kernel reads or
//! writes once in full — the compulsory traffic, not cache misses. Loops over sparse levels have
//! data-dependent trip counts and are counted as one iteration.

use crate::ir::*;
use std::collections::BTreeSet;

/// FLOPs and compulsory bytes of one kernel, and the work a time prediction weighs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KernelStats {
    pub flops: u128,
    pub bytes_read: u128,
    pub bytes_written: u128,
    /// GEMM calls: FLOPs, the narrower of the destination's extents (`min(m, n)`) and the
    /// number of products (batch elements).
    pub gemm: Vec<(u128, u64, u128)>,
    /// FLOPs inside sparse products, with the sparse operand's layout and the width of the
    /// dense side (its columns, or rows for a sparse operand on the right).
    pub sparse_flops: Vec<(SparseLayout, u128, u64)>,
    /// Core cycles of the generated loops ([`op_cycles`] per operation and element) under a
    /// parallel loop, and outside any.
    pub loop_cycles_parallel: f64,
    pub loop_cycles_serial: f64,
}

impl KernelStats {
    pub fn bytes(&self) -> u128 {
        self.bytes_read + self.bytes_written
    }
}

/// Core cycles per element of one operation in a loop with `lanes` vector lanes (1: scalar
/// code), as the CPU JIT generates it. Calibrated on a Zen 5 core with 16M f32 values
/// (bench/nonlinear.py), where f32 vector loops run `exp`, `log`, `tanh`, `sigmoid`, `gelu`,
/// `silu`, `erf`, `gelu_erf`, `sin` and `cos` through the chunked AVX-512 math (`tdsl-cpu`'s
/// `vmath.rs`: `exp` 1.3 cycles per element over 4 lanes, `tanh` 1.6, `gelu` 3.0, `gelu_erf`
/// 5.0, since its blocks stopped calling `memcpy` (2026-11-27); the inline f32x4 code a CPU
/// without FMA runs takes 2–5× as long); f64 lanes cost twice as much per element; scalar code
/// calls a helper per transcendental (about 20 cycles). Good to a factor of ~1.5, which is what a time prediction needs (bench/predict.py
/// checks it within 2×).
pub fn op_cycles(op: Op, lanes: u32) -> f64 {
    use BinOp as B;
    use UnOp as U;
    let f32x4 = match op {
        Op::Unary(U::Neg | U::Abs | U::Relu | U::Square | U::Sign) => 0.1,
        Op::Unary(U::Floor | U::Ceil | U::Round) => 0.15,
        Op::Unary(U::Sqrt | U::Rsqrt) => 0.8,
        Op::Unary(U::Exp) => 1.3,
        Op::Unary(U::Sigmoid) => 1.4,
        Op::Unary(U::Tanh) => 1.6,
        Op::Unary(U::Log) => 2.1,
        Op::Unary(U::Silu | U::Sin | U::Cos) => 2.6,
        Op::Unary(U::Log1p | U::Expm1 | U::Softplus) => 10.0,
        Op::Unary(U::Gelu) => 3.0,
        Op::Unary(U::Erf) => 4.5,
        Op::Unary(U::GeluErf) => 5.0,
        Op::Binary(B::Div) => 0.8,
        Op::Binary(B::Pow) => 15.0,
        Op::Binary(B::Max | B::Min) => 0.4,
        Op::Binary(_) | Op::Select => 0.15,
    };
    // Transcendentals in scalar code are a call each.
    let call = f32x4 >= 1.0;
    match lanes {
        0 | 1 if call => 20.0_f64.max(f32x4),
        0 | 1 => f32x4 * 4.0,
        2 => f32x4 * 2.0,
        _ => f32x4 * 4.0 / lanes as f64,
    }
}

/// An operation as [`op_cycles`] weighs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Unary(UnOp),
    Binary(BinOp),
    Select,
}

/// Core cycles per element of a load or store that strides through memory along the
/// innermost loop by more than [`NEAR_STRIDE`] elements: a transposing copy of 4096² f32
/// elements measured about 3 (a cache line and often a TLB entry per element; the bandwidth
/// term counts only the bytes).
pub const STRIDED_ACCESS_CYCLES: f64 = 3.0;

/// Strides up to this many elements still use most of each cache line (a 2×2 max pool reads
/// with stride 2) and cost nothing extra.
pub const NEAR_STRIDE: i64 = 4;

/// The loop a statement sits in, as [`expr_cycles`] weighs it.
#[derive(Clone, Copy)]
struct Inner {
    lanes: u32,
    var: Option<VarId>,
}

impl Inner {
    /// Cycles of one access through `index`.
    fn access(&self, index: &Index) -> f64 {
        match self.var.map(|v| index.stride_of(v)) {
            Some(s) if s.abs() > NEAR_STRIDE => STRIDED_ACCESS_CYCLES,
            _ => 0.0,
        }
    }
}

/// Cycles of evaluating `e` once per element in the loop `inner`.
fn expr_cycles(e: &Expr, inner: Inner) -> f64 {
    let lanes = inner.lanes;
    match e {
        Expr::Const(_) | Expr::Acc(_) | Expr::Iota(_) => 0.0,
        Expr::Load { index, .. } => inner.access(index),
        Expr::Cast(_, x) => expr_cycles(x, inner),
        Expr::Unary(op, x) => op_cycles(Op::Unary(*op), lanes) + expr_cycles(x, inner),
        Expr::Binary(op, a, b) => {
            op_cycles(Op::Binary(*op), lanes) + expr_cycles(a, inner) + expr_cycles(b, inner)
        }
        Expr::Select(c, a, b) => {
            op_cycles(Op::Select, lanes)
                + expr_cycles(c, inner)
                + expr_cycles(a, inner)
                + expr_cycles(b, inner)
        }
    }
}

fn expr_ops(e: &Expr, reads: &mut BTreeSet<BufId>) -> u128 {
    match e {
        Expr::Const(_) | Expr::Acc(_) => 0,
        Expr::Load { buf, .. } => {
            reads.insert(*buf);
            0
        }
        Expr::Cast(_, x) => expr_ops(x, reads),
        Expr::Unary(_, x) => 1 + expr_ops(x, reads),
        Expr::Binary(_, a, b) => 1 + expr_ops(a, reads) + expr_ops(b, reads),
        Expr::Select(c, a, b) => 1 + expr_ops(c, reads) + expr_ops(a, reads) + expr_ops(b, reads),
        Expr::Iota(_) => 0,
    }
}

/// FLOPs of one library call. A sparse product counts 2 per stored value and column of the
/// dense operand: stored entries come from the bound `ptr` array when `data` is given, else
/// from the values buffer's capacity.
fn call_flops(call: &LibCall, data: Option<&[crate::Data]>) -> u128 {
    match call {
        LibCall::Gemm { m, n, k, batch, .. } => {
            let nb: u128 = batch.iter().map(|&x| x as u128).product();
            2 * (*m as u128) * (*n as u128) * (*k as u128) * nb
        }
        LibCall::SpMM { m, n, s, side, .. } => {
            let free = match side {
                Side::Left => *n,
                Side::Right => *m,
            };
            2 * stored_values(s, data) * free as u128
        }
        LibCall::Sparsify { .. } | LibCall::Densify { .. } => 0,
    }
}

/// How many values a sparse operand stores (capacity when its data is not known).
pub fn stored_values(s: &SparseOperand, data: Option<&[crate::Data]>) -> u128 {
    let len = |b: BufId| {
        data.and_then(|d| d.get(b.0 as usize))
            .map(|d| d.len() as u128)
    };
    let per_entry = match s.layout {
        SparseLayout::Bsr { br, bc } => (br * bc) as u128,
        _ => 1,
    };
    let from_ptr = s.ptr.and_then(|p| {
        data.and_then(|d| match d.get(p.0 as usize) {
            Some(crate::Data::I32(v)) => v.last().map(|&n| n.max(0) as u128 * per_entry),
            _ => None,
        })
    });
    from_ptr
        .or_else(|| len(s.values))
        .unwrap_or_else(|| s.shape.iter().map(|&e| e as u128).product())
}

/// What a walk over a kernel's statements collects.
#[derive(Default)]
struct Walk {
    reads: BTreeSet<BufId>,
    writes: BTreeSet<BufId>,
    stats: KernelStats,
}

/// Walks `body` executed `mult` times, inside loop `inner`, under a parallel loop or not.
fn stmts(
    body: &[Stmt],
    mult: u128,
    (inner, parallel): (Inner, bool),
    w: &mut Walk,
    data: Option<&[crate::Data]>,
) {
    let lanes = inner.lanes;
    for s in body {
        let (ops, cycles) = match s {
            Stmt::Loop(l) => {
                let n = match l.iter {
                    Iter::Range { extent } => extent as u128,
                    Iter::TwoFour { groups, .. } => 2 * groups as u128,
                    Iter::Compressed { .. } | Iter::Singleton { .. } => 1,
                };
                let inner = Inner {
                    lanes: l.vector.max(1),
                    var: Some(l.var),
                };
                let at = (inner, parallel || l.parallel);
                stmts(&l.body, mult.saturating_mul(n), at, w, data);
                continue;
            }
            Stmt::Let { init, .. } => (expr_ops(init, &mut w.reads), expr_cycles(init, inner)),
            Stmt::Update { op, value, .. } => {
                let combine = u128::from(*op != AccOp::Set);
                let c = if *op == AccOp::Set {
                    0.0
                } else {
                    op_cycles(Op::Binary(BinOp::Add), lanes)
                };
                (
                    expr_ops(value, &mut w.reads) + combine,
                    expr_cycles(value, inner) + c,
                )
            }
            Stmt::Store { buf, index, value } => {
                w.writes.insert(*buf);
                let c = expr_cycles(value, inner) + inner.access(index);
                (expr_ops(value, &mut w.reads), c)
            }
            Stmt::Call(call) => {
                w.reads.extend(call.reads());
                w.writes.extend(call.writes());
                let f = mult.saturating_mul(call_flops(call, data));
                match call {
                    LibCall::Gemm { m, n, batch, .. } => {
                        let products = batch.iter().map(|&b| b as u128).product::<u128>();
                        w.stats
                            .gemm
                            .push((f, (*m).min(*n), mult.saturating_mul(products)))
                    }
                    LibCall::SpMM { s, m, n, side, .. } => {
                        let free = match side {
                            Side::Left => *n,
                            Side::Right => *m,
                        };
                        w.stats.sparse_flops.push((s.layout, f, free))
                    }
                    LibCall::Sparsify { .. } | LibCall::Densify { .. } => {}
                }
                (call_flops(call, data), 0.0)
            }
        };
        w.stats.flops = w.stats.flops.saturating_add(mult.saturating_mul(ops));
        let c = mult as f64 * cycles;
        if parallel {
            w.stats.loop_cycles_parallel += c;
        } else {
            w.stats.loop_cycles_serial += c;
        }
    }
}

/// FLOPs and bytes of kernel `k` of program `p`.
pub fn kernel_stats(p: &LoopProgram, k: &Kernel) -> KernelStats {
    stats(p, k, None)
}

/// Like [`kernel_stats`], with sparse operands counted by what the bound buffers `data` store
/// (buffer bytes are their actual lengths).
pub fn kernel_stats_bound(p: &LoopProgram, k: &Kernel, data: &[crate::Data]) -> KernelStats {
    stats(p, k, Some(data))
}

fn stats(p: &LoopProgram, k: &Kernel, data: Option<&[crate::Data]>) -> KernelStats {
    let mut w = Walk::default();
    let top = Inner {
        lanes: 1,
        var: None,
    };
    stmts(&k.body, 1, (top, false), &mut w, data);
    let size = |b: &BufId| {
        let buf = p.buffer(*b);
        let n = data
            .and_then(|d| d.get(b.0 as usize))
            .map_or(buf.elems as u128, |d| d.len() as u128);
        n * buf.ty.size_bytes() as u128
    };
    KernelStats {
        bytes_read: w.reads.iter().map(size).sum(),
        bytes_written: w.writes.iter().map(size).sum(),
        ..w.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_sum_counts_one_flop_per_element() {
        let p = LoopProgram {
            tf32: false,
            buffers: vec![
                Buffer {
                    name: "x".into(),
                    ty: ElemType::F32,
                    elems: 12,
                    role: Role::Input(0),
                },
                Buffer {
                    name: "y".into(),
                    ty: ElemType::F32,
                    elems: 3,
                    role: Role::Output(0),
                },
            ],
            kernels: vec![Kernel {
                name: "k0".into(),
                origin: String::new(),
                source: None,
                body: vec![Stmt::Loop(Loop {
                    var: VarId(0),
                    iter: Iter::Range { extent: 3 },
                    parallel: true,
                    vector: 1,
                    gpu: None,
                    body: vec![
                        Stmt::Let {
                            acc: AccId(0),
                            ty: ElemType::F32,
                            init: Expr::Const(0.0),
                        },
                        Stmt::Loop(Loop {
                            var: VarId(1),
                            iter: Iter::Range { extent: 4 },
                            parallel: false,
                            vector: 4,
                            gpu: None,
                            body: vec![Stmt::Update {
                                acc: AccId(0),
                                op: AccOp::Add,
                                value: Expr::Load {
                                    buf: BufId(0),
                                    index: Index {
                                        offset: 0,
                                        terms: vec![(VarId(0), 4), (VarId(1), 1)],
                                    },
                                },
                            }],
                        }),
                        Stmt::Store {
                            buf: BufId(1),
                            index: Index {
                                offset: 0,
                                terms: vec![(VarId(0), 1)],
                            },
                            value: Expr::Acc(AccId(0)),
                        },
                    ],
                })],
            }],
        };
        let s = kernel_stats(&p, &p.kernels[0]);
        assert_eq!((s.flops, s.bytes_read, s.bytes_written), (12, 48, 12));
        // 12 vector adds at 4 lanes, all under the parallel loop.
        let add = op_cycles(Op::Binary(BinOp::Add), 4);
        assert!((s.loop_cycles_parallel - 12.0 * add).abs() < 1e-9);
        assert_eq!(s.loop_cycles_serial, 0.0);
        assert!(s.gemm.is_empty());
    }
}
