//! tdsl-loop: the loop IR, the one contract between tdsl's planner and every backend.
//!
//! - [`ir`]: the types (buffers, kernels, loops, accumulators, strided loads and stores,
//!   elementwise expressions, library calls, sparse level iteration, GPU mapping).
//! - [`launch`]: launch units, the cut of a kernel every backend launches (runs of loops
//!   between library calls, with the parallel split of each).
//! - [`passes`]: the program-free rewrites the planner runs on each kernel, listed in order
//!   ([`passes::KERNEL_PASSES`]); [`walk`]: queries over statements.
//! - [`print`](mod@print): the stable text form (`tdsl plan`, snapshots, the kernel cache key).
//! - [`read`]: the reader of that text form, for tests written as text files.
//! - [`verify`]: well-formedness and bounds, run after planning in debug builds and tests.
//! - [`backend`]: the seam every backend implements ([`Backend`], [`Executable`], [`Target`]),
//!   and the evaluator behind it ([`EvalBackend`]).
//! - [`eval`]: a plain evaluator, so a wrong result bisects itself: interpreter ≠ evaluator is a
//!   planner bug, evaluator ≠ JIT is a backend bug.
//!
//! This crate knows nothing of the tdsl language: it never sees the AST or the typed program.

#![forbid(unsafe_code)]

pub mod backend;
pub mod data;
pub mod entries;
pub mod eval;
pub mod expand;
pub mod ir;
pub mod launch;
pub mod passes;
pub mod print;
pub mod read;
pub mod scalar;
pub mod stats;
pub mod verify;
pub mod walk;

pub use backend::{Backend, BackendError, EvalBackend, Executable, RunOptions, RunStats, Target};
pub use data::Data;
pub use ir::*;
