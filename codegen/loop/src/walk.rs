//! Queries over statements, written once on `Stmt::visit` / `Stmt::exprs` and `Expr::visit`.

use crate::ir::{AccId, BufId, Expr, Iter, Stmt, VarId};
use std::collections::BTreeSet;

/// Accumulators declared (by `Let`) anywhere in statements.
pub fn stmt_lets(stmts: &[Stmt]) -> BTreeSet<AccId> {
    let mut out = BTreeSet::new();
    for s in stmts {
        s.visit(&mut |s| {
            if let Stmt::Let { acc, .. } = s {
                out.insert(*acc);
            }
        });
    }
    out
}

/// Accumulators read by statements' expressions.
pub fn stmt_accs(stmts: &[Stmt]) -> BTreeSet<AccId> {
    let mut out = BTreeSet::new();
    for s in stmts {
        s.visit(&mut |s| {
            for e in s.exprs() {
                e.visit(&mut |x| {
                    if let Expr::Acc(a) = x {
                        out.insert(*a);
                    }
                });
            }
        });
    }
    out
}

/// Variables used by statements' indices (stores' and the loads' and iotas' of their
/// expressions).
pub fn stmt_vars(stmts: &[Stmt]) -> BTreeSet<VarId> {
    let mut out = BTreeSet::new();
    for s in stmts {
        s.visit(&mut |s| {
            if let Stmt::Store { index, .. } = s {
                out.extend(index.terms.iter().map(|t| t.0));
            }
            for e in s.exprs() {
                for index in e.indices() {
                    out.extend(index.terms.iter().map(|t| t.0));
                }
            }
        });
    }
    out
}

/// Every buffer statements read or write (loads, stores, sparse level arrays, library calls), in
/// id order.
pub fn stmt_buffers(stmts: &[Stmt]) -> BTreeSet<BufId> {
    let mut out = BTreeSet::new();
    for s in stmts {
        s.visit(&mut |s| {
            match s {
                Stmt::Loop(l) => match &l.iter {
                    Iter::Range { .. } => {}
                    Iter::Compressed { ptr, crd, .. } => {
                        out.insert(*ptr);
                        out.insert(*crd);
                    }
                    Iter::Singleton { crd, .. } => {
                        out.insert(*crd);
                    }
                    Iter::TwoFour { meta, .. } => {
                        out.insert(*meta);
                    }
                },
                Stmt::Store { buf, .. } => {
                    out.insert(*buf);
                }
                Stmt::Call(call) => out.extend(call.buffers()),
                Stmt::Let { .. } | Stmt::Update { .. } => {}
            }
            for e in s.exprs() {
                e.visit(&mut |x| {
                    if let Expr::Load { buf, .. } = x {
                        out.insert(*buf);
                    }
                });
            }
        });
    }
    out
}

/// The buffers statements read and the buffers they write, each in id order: loads, sparse
/// level arrays and call operands are reads; stores and call results are writes (an
/// accumulating call's result is both).
pub fn stmt_reads_writes(stmts: &[Stmt]) -> (BTreeSet<BufId>, BTreeSet<BufId>) {
    let mut writes = BTreeSet::new();
    let mut reads = BTreeSet::new();
    for s in stmts {
        s.visit(&mut |s| {
            match s {
                Stmt::Store { buf, .. } => {
                    writes.insert(*buf);
                }
                Stmt::Call(call) => {
                    reads.extend(call.reads());
                    writes.extend(call.writes());
                }
                Stmt::Loop(l) => match &l.iter {
                    Iter::Range { .. } => {}
                    Iter::Compressed { ptr, crd, .. } => {
                        reads.insert(*ptr);
                        reads.insert(*crd);
                    }
                    Iter::Singleton { crd, .. } => {
                        reads.insert(*crd);
                    }
                    Iter::TwoFour { meta, .. } => {
                        reads.insert(*meta);
                    }
                },
                Stmt::Let { .. } | Stmt::Update { .. } => {}
            }
            for e in s.exprs() {
                e.visit(&mut |x| {
                    if let Expr::Load { buf, .. } = x {
                        reads.insert(*buf);
                    }
                });
            }
        });
    }
    (reads, writes)
}
