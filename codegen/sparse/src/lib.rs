//! Sparse tensors for tdsl: compressed storage, conversion from and to dense, pruning
//! (`sparsify`), validation of untrusted data, and the CPU kernels that multiply a sparse
//! matrix with a dense one at GEMM speed.
//!
//! The storage layouts are specified in `spec/formats.md`; every array here is exactly what a
//! loop-IR buffer of the same name holds at run time (indices and offsets are `i32`).
//!
//! This crate depends on no other tdsl crate: the planner (`tdsl`) describes sparse operands
//! in the loop IR, and the CPU backend (`tdsl-cpu`) calls [`kernels`] on the buffers.

pub mod kernels;
pub mod prune;
#[allow(unsafe_code)]
mod simd;
pub mod storage;
pub mod validate;

pub use storage::{Layout, SparseRef, SparseTensor, Values, ValuesMut, ValuesRef};
