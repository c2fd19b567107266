//! Work and traffic of kernels, read off the loop IR: what `bench` divides time by.
//!
//! FLOPs count every arithmetic operation the kernel executes (unary and binary ops, and the
//! combine of each accumulator update; casts are free), times the iterations of the loops around
//! it; a GEMM call counts `2·m·n·k` per batch element. Bytes count each buffer the kernel reads or
//! writes once in full — the compulsory traffic, not cache misses. Loops over sparse levels have
//! data-dependent trip counts and are counted as one iteration.

use crate::ir::*;
use std::collections::BTreeSet;

/// FLOPs and compulsory bytes of one kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelStats {
    pub flops: u128,
    pub bytes_read: u128,
    pub bytes_written: u128,
}

impl KernelStats {
    pub fn bytes(&self) -> u128 {
        self.bytes_read + self.bytes_written
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

fn stmts(
    body: &[Stmt],
    mult: u128,
    reads: &mut BTreeSet<BufId>,
    writes: &mut BTreeSet<BufId>,
    data: Option<&[crate::Data]>,
) -> u128 {
    let mut flops = 0u128;
    for s in body {
        flops = flops.saturating_add(match s {
            Stmt::Loop(l) => {
                let n = match l.iter {
                    Iter::Range { extent } => extent as u128,
                    Iter::TwoFour { groups, .. } => 2 * groups as u128,
                    Iter::Compressed { .. } | Iter::Singleton { .. } => 1,
                };
                stmts(&l.body, mult.saturating_mul(n), reads, writes, data)
            }
            Stmt::Let { init, .. } => mult.saturating_mul(expr_ops(init, reads)),
            Stmt::Update { op, value, .. } => {
                let combine = u128::from(*op != AccOp::Set);
                mult.saturating_mul(expr_ops(value, reads) + combine)
            }
            Stmt::Store { buf, value, .. } => {
                writes.insert(*buf);
                mult.saturating_mul(expr_ops(value, reads))
            }
            Stmt::Call(call) => {
                reads.extend(call.reads());
                writes.extend(call.writes());
                mult.saturating_mul(call_flops(call, data))
            }
        });
    }
    flops
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
    let mut reads = BTreeSet::new();
    let mut writes = BTreeSet::new();
    let flops = stmts(&k.body, 1, &mut reads, &mut writes, data);
    let size = |b: &BufId| {
        let buf = p.buffer(*b);
        let n = data
            .and_then(|d| d.get(b.0 as usize))
            .map_or(buf.elems as u128, |d| d.len() as u128);
        n * buf.ty.size_bytes() as u128
    };
    KernelStats {
        flops,
        bytes_read: reads.iter().map(size).sum(),
        bytes_written: writes.iter().map(size).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_sum_counts_one_flop_per_element() {
        let p = LoopProgram {
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
        assert_eq!(
            s,
            KernelStats {
                flops: 12,
                bytes_read: 48,
                bytes_written: 12
            }
        );
    }
}
