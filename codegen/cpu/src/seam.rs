//! The CPU backend behind the backend seam (`tdsl_loop::backend`): [`CpuBackend`] is a
//! `Backend` for `Target::Host`, [`Executable`] an `Executable`; their errors map to
//! `BackendError` kinds.

use std::sync::Arc;

use tdsl_loop::backend::{self as seam, BackendError, ErrorKind};
use tdsl_loop::{Data, LoopProgram};

use crate::{CodegenError, CpuBackend, Executable, RuntimeError};

fn codegen_error(e: CodegenError) -> BackendError {
    let kind = match e {
        CodegenError::Target(_) => ErrorKind::Unavailable,
        _ => ErrorKind::Compile,
    };
    BackendError::new(kind, e.to_string())
}

impl seam::Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn target(&self) -> seam::Target {
        seam::Target::Host
    }

    fn compile(&mut self, p: &LoopProgram) -> Result<Arc<dyn seam::Executable>, BackendError> {
        let exe = CpuBackend::compile(self, p).map_err(codegen_error)?;
        Ok(Arc::new(exe))
    }

    fn n_compiled(&self) -> usize {
        self.n_compiled()
    }

    fn emit(&self, p: &LoopProgram, kernel: usize) -> Result<String, BackendError> {
        self.clif(p, kernel).map_err(codegen_error)
    }

    fn disasm(&self, p: &LoopProgram, kernel: usize) -> Result<String, BackendError> {
        CpuBackend::disasm(self, p, kernel).map_err(codegen_error)
    }
}

impl seam::Executable for Executable {
    fn program(&self) -> &LoopProgram {
        Executable::program(self)
    }

    fn run(
        &self,
        bufs: &mut [Data],
        opts: &seam::RunOptions,
    ) -> Result<seam::RunStats, BackendError> {
        let stats = Executable::run(self, bufs, opts.threads).map_err(|e| {
            let (kind, kernel) = match &e {
                RuntimeError::BufferCount { .. }
                | RuntimeError::BufferType { .. }
                | RuntimeError::BufferLen { .. } => (ErrorKind::Buffers, None),
                RuntimeError::BadSparseData { kernel, .. } => (ErrorKind::BadData, Some(kernel)),
                RuntimeError::OutOfBounds { kernel, .. } => (ErrorKind::Run, Some(kernel)),
            };
            let err = BackendError::new(kind, e.to_string());
            match kernel.and_then(|name| {
                Executable::program(self)
                    .kernels
                    .iter()
                    .position(|k| &k.name == name)
            }) {
                Some(k) => err.in_kernel(k),
                None => err,
            }
        })?;
        Ok(seam::RunStats {
            kernel_times: stats.kernel_times,
            transfer: std::time::Duration::ZERO,
            device_span: None,
        })
    }
}
