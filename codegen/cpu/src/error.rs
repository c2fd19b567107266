//! Errors of the CPU backend: [`CodegenError`] while compiling a loop program, [`RuntimeError`]
//! while running one. Both are plain data; the CLI renders them.

use thiserror::Error;

/// Why a loop program could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CodegenError {
    /// The program uses something this backend does not implement yet (2:4 iteration, a library
    /// call nested inside a loop, …).
    #[error("unsupported by the CPU backend: {0}")]
    Unsupported(String),
    /// The program breaks a rule of the loop IR (an unknown buffer, an unbound loop variable, an
    /// accumulator used outside its block, …). This is a planner bug.
    #[error("malformed loop program: {0}")]
    Invalid(String),
    /// A load, store or library-call view can reach outside its buffer for some iteration.
    #[error("out-of-bounds access: {0}")]
    OutOfBounds(String),
    /// The host ISA could not be configured.
    #[error("cannot set up the host target: {0}")]
    Target(String),
    /// Cranelift rejected the generated function (a backend bug).
    #[error("Cranelift failed on kernel `{kernel}`: {message}")]
    Cranelift { kernel: String, message: String },
    /// `kernel` is not an index into the program's kernels.
    #[error("no kernel number {0}")]
    NoSuchKernel(usize),
}

/// Why an executable refused to run, or stopped.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RuntimeError {
    #[error("expected {expected} buffers, got {got}")]
    BufferCount { expected: usize, got: usize },
    #[error("buffer {index} (`{name}`) should be {expected}, got {got}")]
    BufferType {
        index: usize,
        name: String,
        expected: String,
        got: String,
    },
    #[error("buffer {index} (`{name}`) should have {expected} elements, got {got}")]
    BufferLen {
        index: usize,
        name: String,
        expected: u64,
        got: usize,
    },
    /// Sparse index data (positions or coordinates) would make an access leave its buffer, or is
    /// not well formed (positions not monotone).
    #[error("kernel `{kernel}`: bad sparse index data: {message}")]
    BadSparseData { kernel: String, message: String },
    /// A bounds check that depends on run-time data failed.
    #[error("kernel `{kernel}`: out-of-bounds access: {message}")]
    OutOfBounds { kernel: String, message: String },
}
