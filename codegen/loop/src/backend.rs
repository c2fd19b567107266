//! The backend seam: what every backend implements, and what the pipeline (`tdsl::session`)
//! calls.
//!
//! A [`Backend`] compiles a [`LoopProgram`] for its [`Target`] into an [`Executable`], and
//! prints the code it would run ([`Backend::emit`]). An executable runs over the program's
//! *host buffer set*: one [`Data`] per [`Buffer`](crate::Buffer) of the program, in order, with
//! inputs bound and everything else zeroed ([`allocate`] builds the non-input part). A backend
//! whose memory is elsewhere (a GPU) copies inputs in and outputs out inside `run`; it keeps
//! temporaries on its side and leaves their host buffers alone.
//!
//! Errors are [`BackendError`]s: data with a [`ErrorKind`] and, where one is to blame, the
//! kernel, so the caller can point at the statement the kernel came from (`Kernel::origin`).
//!
//! Two backends live outside this crate's knowledge (tdsl-cpu's Cranelift JIT; a CUDA one later);
//! one lives here: [`EvalBackend`], the plain evaluator behind the same trait, so an engine
//! switch never needs a special case for it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::data::Data;
use crate::ir::{LoopProgram, Role};

/// What a backend generates code for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// The CPU this process runs on (its ISA found at run time).
    Host,
    /// An NVIDIA GPU of compute capability `sm` (e.g. 90 for sm_90).
    Cuda { sm: u32 },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Host => f.write_str("host"),
            Target::Cuda { sm } => write!(f, "cuda sm_{sm}"),
        }
    }
}

/// What went wrong, in the terms a caller acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The backend cannot run here (no device, no driver, no compiler library): the user's
    /// environment, not their script.
    Unavailable,
    /// The program could not be compiled (a planner or backend bug).
    Compile,
    /// The buffers handed to `run` do not match the program (a caller bug).
    Buffers,
    /// Data bound to an input is malformed in a way only a run can see (sparse index data).
    BadData,
    /// A kernel failed while running.
    Run,
}

/// An error of a backend, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendError {
    pub kind: ErrorKind,
    pub message: String,
    /// The kernel to blame (an index into `LoopProgram::kernels`), when there is one.
    pub kernel: Option<usize>,
}

impl BackendError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> BackendError {
        BackendError {
            kind,
            message: message.into(),
            kernel: None,
        }
    }

    /// The same error, blamed on kernel `k`.
    pub fn in_kernel(mut self, k: usize) -> BackendError {
        self.kernel = Some(k);
        self
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BackendError {}

/// How to run an executable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunOptions {
    /// CPU threads; 0 lets the backend choose (every core, or one for small work).
    pub threads: usize,
}

/// What a run measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunStats {
    /// Wall time of each kernel, in program order. On a device, a kernel the host runs between
    /// launches (`sparsify`) counts its host time, as it would on the CPU.
    pub kernel_times: Vec<Duration>,
    /// Time spent moving data between host and device, and preparing what is moved (the index
    /// tables a GPU builds from a sparse operand's pattern); zero on the host.
    pub transfer: Duration,
    /// On a device: from the first launch's start to the last launch's end by the device's
    /// clock, so the gaps between launches (and any step the host runs between them) count, as
    /// they do when one times a sequence of library calls; `None` on the host.
    pub device_span: Option<Duration>,
}

/// A compiled program, ready to run many times. Shared between threads.
pub trait Executable: Send + Sync {
    /// The program this executable runs.
    fn program(&self) -> &LoopProgram;

    /// Runs every kernel, in order, over the host buffer set `bufs` (see the module docs).
    /// Buffer counts, types and lengths are checked before any generated code runs.
    fn run(&self, bufs: &mut [Data], opts: &RunOptions) -> Result<RunStats, BackendError>;
}

/// A code generator for one target.
pub trait Backend {
    /// A short name for messages ("cpu", "eval", "cuda").
    fn name(&self) -> &'static str;

    /// What this backend generates code for.
    fn target(&self) -> Target;

    /// Compiles `p` (the verifier has accepted it). Kernels compiled before may be reused.
    fn compile(&mut self, p: &LoopProgram) -> Result<Arc<dyn Executable>, BackendError>;

    /// Kernels compiled so far (cache hits compile nothing).
    fn n_compiled(&self) -> usize;

    /// The code kernel `kernel` of `p` becomes, as text (Cranelift IR, CUDA C++, loop IR).
    fn emit(&self, p: &LoopProgram, kernel: usize) -> Result<String, BackendError>;

    /// The machine code kernel `kernel` of `p` compiles to, as an assembly listing, where the
    /// backend produces machine code itself (the default says it does not).
    fn disasm(&self, p: &LoopProgram, kernel: usize) -> Result<String, BackendError> {
        let _ = (p, kernel);
        Err(BackendError::new(
            ErrorKind::Unavailable,
            format!("the {} backend has no machine-code listing", self.name()),
        ))
    }
}

/// Runs the verifier on every kernel of `p` ([`crate::verify::verify_kernel`]): what a backend
/// calls first in `compile`, so that no program reaches code generation unchecked, in any
/// build. The error blames the first kernel that fails.
pub fn verified(p: &LoopProgram) -> Result<(), BackendError> {
    for (i, k) in p.kernels.iter().enumerate() {
        crate::verify::verify_kernel(p, k).map_err(|errs| {
            let all: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
            BackendError::new(
                ErrorKind::Compile,
                format!("the loop IR does not verify: {}", all.join("; ")),
            )
            .in_kernel(i)
        })?;
    }
    Ok(())
}

/// The host buffers of `p` that are not inputs, zeroed: outputs and temporaries. Index `i` is
/// `None` for input buffers (the caller binds them).
pub fn allocate(p: &LoopProgram) -> Vec<Option<Data>> {
    p.buffers
        .iter()
        .map(|b| match b.role {
            Role::Input(_) | Role::InputPart { .. } => None,
            Role::Output(_) | Role::Temp => Some(Data::zeros(b.ty, b.elems as usize)),
        })
        .collect()
}

/// The loop-IR evaluator as a backend: no compilation, every run interprets the program.
#[derive(Debug, Default)]
pub struct EvalBackend;

struct EvalExecutable {
    program: LoopProgram,
}

impl Executable for EvalExecutable {
    fn program(&self) -> &LoopProgram {
        &self.program
    }

    fn run(&self, bufs: &mut [Data], _opts: &RunOptions) -> Result<RunStats, BackendError> {
        let kernel_times = crate::eval::eval_timed(&self.program, bufs).map_err(|e| {
            BackendError::new(ErrorKind::Run, format!("the loop-IR evaluator failed: {e}"))
        })?;
        Ok(RunStats {
            kernel_times,
            transfer: Duration::ZERO,
            device_span: None,
        })
    }
}

impl Backend for EvalBackend {
    fn name(&self) -> &'static str {
        "eval"
    }

    fn target(&self) -> Target {
        Target::Host
    }

    fn compile(&mut self, p: &LoopProgram) -> Result<Arc<dyn Executable>, BackendError> {
        verified(p)?;
        Ok(Arc::new(EvalExecutable { program: p.clone() }))
    }

    fn n_compiled(&self) -> usize {
        0
    }

    fn emit(&self, p: &LoopProgram, kernel: usize) -> Result<String, BackendError> {
        let k = p.kernels.get(kernel).ok_or_else(|| {
            BackendError::new(ErrorKind::Compile, format!("no kernel number {kernel}"))
        })?;
        Ok(crate::print::print_kernel(p, k))
    }
}
