//! The kernel cache key: a deterministic text of everything the generated code depends on.
//!
//! That is the kernel body (not its name or origin), the id, type and length of every buffer it
//! touches (generated code indexes the buffer table by id and specialises on element types), the
//! target (triple, ISA flags, optimisation level) and the code generation options. The body is
//! written with `Debug`, which is derived and therefore deterministic and complete (floats print
//! in their shortest round-trip form). When `tdsl_loop::print` settles, its kernel text can
//! replace the `Debug` form here.

use std::collections::BTreeSet;
use std::fmt::Write;

use tdsl_loop::{BufId, Expr, Iter, Kernel, LibCall, LoopProgram, Stmt};

use crate::lower::LowerOptions;

/// Every buffer a kernel reads or writes, in id order.
pub(crate) fn kernel_buffers(k: &Kernel) -> BTreeSet<BufId> {
    fn expr(e: &Expr, out: &mut BTreeSet<BufId>) {
        match e {
            Expr::Const(_) | Expr::Acc(_) => {}
            Expr::Load { buf, .. } => {
                out.insert(*buf);
            }
            Expr::Unary(_, x) | Expr::Cast(_, x) => expr(x, out),
            Expr::Binary(_, x, y) => {
                expr(x, out);
                expr(y, out);
            }
        }
    }
    fn block(stmts: &[Stmt], out: &mut BTreeSet<BufId>) {
        for s in stmts {
            match s {
                Stmt::Loop(l) => {
                    match &l.iter {
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
                    }
                    block(&l.body, out);
                }
                Stmt::Let { init, .. } => expr(init, out),
                Stmt::Update { value, .. } => expr(value, out),
                Stmt::Store { buf, value, .. } => {
                    out.insert(*buf);
                    expr(value, out);
                }
                Stmt::Call(LibCall::Gemm { a, b, c, .. }) => {
                    out.insert(a.buf);
                    out.insert(b.buf);
                    out.insert(c.buf);
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    block(&k.body, &mut out);
    out
}

/// The cache key of `k` in `p` for a target and options.
pub(crate) fn kernel_key(p: &LoopProgram, k: &Kernel, target: &str, opts: &LowerOptions) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "target {target}");
    let _ = writeln!(s, "options {opts:?}");
    for b in kernel_buffers(k) {
        match p.buffers.get(b.0 as usize) {
            Some(buf) => {
                let _ = writeln!(s, "buffer b{} {} {}", b.0, buf.ty, buf.elems);
            }
            None => {
                let _ = writeln!(s, "buffer b{} missing", b.0);
            }
        }
    }
    let _ = write!(s, "{:?}", k.body);
    s
}
