//! Sparse tensors for tdsl: compressed storage, conversion from and to dense, pruning
//! (`sparsify`) and validation of untrusted data. Safe code only, no threads: the loop IR, the
//! checker and every backend may use it. The CPU kernels that multiply a sparse matrix with a
//! dense one live in the CPU backend (`tdsl_cpu::spmm`).
//!
//! The storage layouts are specified in `spec/formats.md`; every array here is exactly what a
//! loop-IR buffer of the same name holds at run time (indices and offsets are `i32`).
//!
//! This crate depends on no other tdsl crate: the planner (`tdsl`) describes sparse operands
//! in the loop IR, and the backends run products on the arrays described here.

#![forbid(unsafe_code)]

pub mod dtype;
pub mod error;
pub mod ops;
pub mod prune;
pub mod storage;
pub mod validate;

pub use dtype::DType;
pub use error::{SparseError, SparseErrorKind};
pub use ops::{BinOp, UnOp};
pub use storage::{Layout, SparseRef, SparseTensor, Values, ValuesMut, ValuesRef};
