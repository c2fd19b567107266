//! The kernel cache key, and the exact signature a cache hit is checked against.
//!
//! The key is the kernel's canonical text, `tdsl_loop::print::print_kernel` (the touched
//! buffers with their types and lengths, then the body), printed with the kernel's name and
//! origin and the buffers' names and roles blanked (they do not change the code, so renamed
//! copies share an entry), followed by the target (triple, ISA flags, optimisation level) and
//! the code generation options.
//!
//! Running generated code safely must not rest on the printer never printing two different
//! kernels alike (spec/loop-ir.md §5 names one such case), so each cache entry also keeps an
//! exact [`signature`]: the `Debug` form of the body, which is derived and complete, and the id,
//! type and length of every touched buffer. A key holds every kernel compiled under it, and a
//! lookup must match the signature too.

use std::collections::BTreeSet;
use std::fmt::Write;

use tdsl_loop::{BufId, Buffer, Kernel, LoopProgram, Role};

use crate::lower::LowerOptions;

/// Every buffer a kernel reads or writes, in id order.
pub(crate) fn kernel_buffers(k: &Kernel) -> BTreeSet<BufId> {
    tdsl_loop::walk::stmt_buffers(&k.body)
}

/// The cache key of `k` in `p` for a target and options.
pub(crate) fn kernel_key(p: &LoopProgram, k: &Kernel, target: &str, opts: &LowerOptions) -> String {
    let blank = LoopProgram {
        buffers: p
            .buffers
            .iter()
            .map(|b| Buffer {
                name: String::new(),
                ty: b.ty,
                elems: b.elems,
                role: Role::Temp,
            })
            .collect(),
        kernels: Vec::new(),
        tf32: false,
    };
    let k = Kernel {
        name: String::new(),
        origin: String::new(),
        source: None,
        body: k.body.clone(),
    };
    let mut s = tdsl_loop::print::print_kernel(&blank, &k);
    let _ = write!(s, "target {target}\noptions {opts:?}\n");
    s
}

/// What the generated code of `k` depends on, exactly: touched buffers (id, type, length) and
/// the body's `Debug` form.
pub(crate) fn signature(p: &LoopProgram, k: &Kernel) -> String {
    let mut s = String::new();
    for b in kernel_buffers(k) {
        match p.buffers.get(b.0 as usize) {
            Some(buf) => {
                let _ = writeln!(s, "b{} {} {}", b.0, buf.ty, buf.elems);
            }
            None => {
                let _ = writeln!(s, "b{} missing", b.0);
            }
        }
    }
    let _ = write!(s, "{:?}", k.body);
    s
}
