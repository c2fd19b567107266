//! tdsl-cpu: the CPU backend. A [`LoopProgram`] goes in; an [`Executable`] that runs its kernels
//! on host buffers ([`tdsl_loop::Data`]) comes out.
//!
//! - `lower.rs`: loop IR → Cranelift IR (scalar loops, f32x4/f64x2 vector loops with several
//!   accumulators, f16/bf16 conversions, compressed, singleton and 2:4 sparse levels);
//! - `jit.rs`: JIT modules, function pointers, GEMM calls (`unsafe`, as `sgemm.rs`,
//!   `vmath.rs` and `spmm/simd/`);
//! - `check.rs`: well-formedness and bounds (checked at compile time, and again at run time on
//!   the actual buffers before any generated code runs);
//! - `gemm.rs`: `LibCall::Gemm` through the `gemm` crate or `sgemm.rs` (tdsl's own packing
//!   GEMM: any layout, f16/bf16 operands widened while packing; `unsafe` for its AVX
//!   micro-kernels);
//! - `helpers.rs`: scalar transcendental helpers the generated code calls;
//! - `vmath.rs`: the chunked vector math vector loops call (`exp`, `log`, `tanh`, `sigmoid`,
//!   `gelu`, `silu`, `erf`, `gelu_erf`, `sin`, `cos` over a stack buffer, compiled for AVX-512
//!   and AVX2 + FMA and chosen at run time: Cranelift's vectors are 128 bits wide); `unsafe`
//!   like `jit.rs`;
//! - `key.rs`: the kernel cache key;
//! - `spmm/`: the sparse × dense kernels (`spmm`: register-blocked BSR and 2:4 kernels, CSR
//!   balanced by nonzeros; `simd/`: AVX2/AVX-512 micro-kernels chosen at run time, with
//!   `sgemm.rs` the only `unsafe` besides `jit.rs`; `tests.rs` against a brute-force decoder).
//!
//! Each kernel is cut into the launch units of the loop IR (`tdsl_loop::launch`): every run of
//! statements between library calls is one generated function `extern "C" fn(bufs, lo, hi)`. A
//! unit with a `Split` (a single parallel, race-free `Range` loop) runs iterations `lo..hi`, so
//! [`Executable::run`] splits it across rayon tasks.

#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod alloc;
mod check;
#[allow(unsafe_code)]
mod dot;
mod error;
mod gemm;
mod helpers;
#[allow(unsafe_code)]
mod jit;
mod key;
mod lower;
mod seam;
#[allow(unsafe_code)]
mod sgemm;
mod sparse;
pub mod spmm;
#[allow(unsafe_code)]
mod transpose;
#[allow(unsafe_code)]
mod varith;
#[allow(unsafe_code)]
mod vmath;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cranelift_codegen::ir::{types, AbiParam, Signature, UserFuncName};
use cranelift_frontend::FunctionBuilderContext;
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Linkage, Module};
use rayon::prelude::*;
use tdsl_loop::launch::{launch_units, LaunchUnit, Split};
use tdsl_loop::{Data, Kernel, LibCall, LoopProgram, Stmt};

pub use alloc::CacheLineAlloc;
pub use error::{CodegenError, RuntimeError};

use jit::{BufPtrs, KernelFn, Target};
use lower::LowerOptions;

/// Total work (element operations) below which a kernel stays on one thread.
const MIN_PARALLEL_WORK: u64 = 32 * 1024;

/// Cranelift's optimisation level for generated code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptLevel {
    /// Program order kept: no e-graph rewrites, no code motion.
    None,
    /// E-graph optimisation (GVN, LICM, rewrites).
    Speed,
}

/// Code generation settings. [`Default`] is what [`CpuBackend::new`] uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuOptions {
    pub opt_level: OptLevel,
    /// Vector accumulators (and unroll factor) of vectorised reduction loops; elementwise
    /// vector loops unroll by at most 2. 4 is fastest with `Speed` (8 spills, TOOLCHAIN.md §1c).
    pub n_acc: usize,
    /// Vectorise innermost loops marked `vector >= 2`.
    pub vectorize: bool,
    /// Fuse `acc += a * b` into `fma` when the host has AVX and FMA.
    pub fma: bool,
    /// Run f32 vector loops that call `exp`, `log`, `tanh`, `sigmoid`, `gelu`, `silu`, `erf`,
    /// `gelu_erf`, `sin` or `cos` in chunks around the ahead-of-time AVX-512/AVX2 vector math
    /// (`vmath.rs`) when the host has it (and `TDSL_VMATH=0` is not set); else inline f32x4.
    pub vmath: bool,
    /// Run an innermost loop that only sums products of unit-stride f32 loads (a matrix-vector
    /// row, a row's sum) as one call to the ahead-of-time AVX-512/AVX2 dot product (`dot.rs`)
    /// when the host has it (and `TDSL_DOT=0` is not set); else the loop's own f32x4 code.
    pub dot: bool,
}

impl Default for CpuOptions {
    fn default() -> CpuOptions {
        CpuOptions {
            opt_level: OptLevel::Speed,
            n_acc: 4,
            vectorize: true,
            fma: true,
            vmath: true,
            dot: true,
        }
    }
}

enum Segment {
    Jit {
        f: KernelFn,
        split: Option<Split>,
    },
    /// The library call at this index of the kernel body.
    Call {
        stmt: usize,
    },
}

/// The compiled form of one kernel, shared between executables through the cache.
struct CompiledKernel {
    /// `key::signature` of the kernel it was compiled from.
    signature: String,
    segments: Vec<Segment>,
}

/// The CPU backend: the host target, and a cache of compiled kernels keyed by kernel text,
/// touched buffers and target.
pub struct CpuBackend {
    target: Target,
    opts: LowerOptions,
    /// Canonical kernel text → the kernels compiled under it (normally one; see `key.rs`).
    cache: HashMap<String, Vec<Arc<CompiledKernel>>>,
    n_compiled: usize,
}

/// A compiled program. Cheap to share: the code is reference-counted.
pub struct Executable {
    program: LoopProgram,
    kernels: Vec<Arc<CompiledKernel>>,
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunStats {
    /// Kernels run.
    pub kernels: usize,
    /// Calls of generated functions (one per rayon task).
    pub tasks: usize,
    /// GEMM library calls.
    pub gemm_calls: usize,
    /// Sparse library calls run (products, sparsify, densify).
    pub sparse_calls: usize,
    /// Wall time of each kernel, in order.
    pub kernel_times: Vec<Duration>,
}

fn kernel_signature(module: &JITModule) -> Signature {
    let mut sig = module.make_signature();
    for _ in 0..3 {
        sig.params.push(AbiParam::new(types::I64));
    }
    sig
}

/// Whether this CPU runs the wide dot product (`CpuOptions::dot`: AVX-512F, or AVX2 with FMA,
/// and `TDSL_DOT=0` not set).
pub fn dot_product_available() -> bool {
    dot::available()
}

/// Whether this CPU runs the chunked vector math (`CpuOptions::vmath`: AVX-512F, or AVX2 with
/// FMA, and `TDSL_VMATH=0` not set).
pub fn chunked_math_available() -> bool {
    vmath::available()
}

impl CpuBackend {
    /// A backend for the host ISA (`cranelift_native`), with default options.
    pub fn new() -> Result<CpuBackend, CodegenError> {
        CpuBackend::with_options(CpuOptions::default())
    }

    pub fn with_options(o: CpuOptions) -> Result<CpuBackend, CodegenError> {
        let level = match o.opt_level {
            OptLevel::None => "none",
            OptLevel::Speed => "speed",
        };
        let target = jit::host_target(level)?;
        let opts = LowerOptions {
            n_acc: o.n_acc.clamp(1, 8),
            use_fma: o.fma && target.has_fma,
            vectorize: o.vectorize,
            vmath: o.vmath && o.vectorize && target.has_fma && crate::vmath::available(),
            transpose: o.vectorize && crate::transpose::available(),
            dot: o.dot && o.vectorize && crate::dot::available(),
        };
        Ok(CpuBackend {
            target,
            opts,
            cache: HashMap::new(),
            n_compiled: 0,
        })
    }

    /// Whether generated code uses `vfmadd` (the host has AVX and FMA, and FMA is enabled).
    pub fn uses_fma(&self) -> bool {
        self.opts.use_fma
    }

    /// How many kernels this backend has compiled (cache hits compile nothing).
    pub fn n_compiled(&self) -> usize {
        self.n_compiled
    }

    /// The verifier's checks of `k` (ids, scopes, types, races, static bounds), then this
    /// backend's limits: nothing reaches code generation unchecked, in every build.
    fn validate(&self, p: &LoopProgram, k: &Kernel) -> Result<(), CodegenError> {
        tdsl_loop::verify::verify_kernel(p, k).map_err(|errs| {
            let all: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
            let all = all.join("; ");
            if errs
                .iter()
                .any(|e| e.kind == tdsl_loop::verify::Problem::Bounds)
            {
                CodegenError::OutOfBounds(all)
            } else {
                CodegenError::Invalid(all)
            }
        })?;
        check::supported(p, k)
    }

    /// Compiles every kernel of `p` that is not in the cache yet (one JIT module for all of
    /// them) and returns an executable.
    pub fn compile(&mut self, p: &LoopProgram) -> Result<Executable, CodegenError> {
        let mut keys = Vec::with_capacity(p.kernels.len());
        let mut missing: Vec<(usize, (String, String))> = Vec::new();
        for (i, k) in p.kernels.iter().enumerate() {
            self.validate(p, k)?;
            let key = (
                key::kernel_key(p, k, &self.target.key, &self.opts),
                key::signature(p, k),
            );
            if self.lookup(&key).is_none() && !missing.iter().any(|(_, m)| *m == key) {
                missing.push((i, key.clone()));
            }
            keys.push(key);
        }
        if !missing.is_empty() {
            let mut module = jit::new_module(&self.target);
            let mut ids = Vec::new();
            let mut plans = Vec::new();
            let defined = missing.iter().try_for_each(|(i, _)| {
                let plan = self.define_kernel(&mut module, p, &p.kernels[*i], &mut ids)?;
                plans.push(plan);
                Ok::<(), CodegenError>(())
            });
            if let Err(e) = defined {
                jit::discard_module(module);
                return Err(e);
            }
            let mut fns = jit::finalize(module, &ids)?.into_iter();
            for ((_, (key, signature)), plan) in missing.iter().zip(plans) {
                let segments = plan
                    .into_iter()
                    .map(|s| match s {
                        PlannedSegment::Jit { split } => Segment::Jit {
                            f: fns.next().expect("one function per generated segment"),
                            split,
                        },
                        PlannedSegment::Call { stmt } => Segment::Call { stmt },
                    })
                    .collect();
                self.cache
                    .entry(key.clone())
                    .or_default()
                    .push(Arc::new(CompiledKernel {
                        signature: signature.clone(),
                        segments,
                    }));
                self.n_compiled += 1;
            }
        }
        let kernels = keys
            .iter()
            .map(|key| {
                self.lookup(key)
                    .expect("every kernel is compiled or cached")
            })
            .collect();
        Ok(Executable {
            program: p.clone(),
            kernels,
        })
    }

    /// The cached kernel for a (key, signature) pair: a key can hold several kernels when
    /// different kernels print alike.
    fn lookup(&self, (key, signature): &(String, String)) -> Option<Arc<CompiledKernel>> {
        self.cache
            .get(key)?
            .iter()
            .find(|c| c.signature == *signature)
            .cloned()
    }

    /// Lowers and defines every generated segment of `k` in `module`, appending their ids.
    fn define_kernel(
        &self,
        module: &mut JITModule,
        p: &LoopProgram,
        k: &Kernel,
        ids: &mut Vec<FuncId>,
    ) -> Result<Vec<PlannedSegment>, CodegenError> {
        let mut fctx = FunctionBuilderContext::new();
        let mut ctx = module.make_context();
        let sig = kernel_signature(module);
        let mut plan = Vec::new();
        for unit in launch_units(k) {
            let (start, end, split) = match unit {
                LaunchUnit::Call { stmt } => {
                    plan.push(PlannedSegment::Call { stmt });
                    continue;
                }
                LaunchUnit::Loops { start, end, split } => (start, end, split),
            };
            let stmts = &k.body[start..end];
            let name = format!("tdsl_fn{}", ids.len());
            let id = module
                .declare_function(&name, Linkage::Local, &sig)
                .map_err(|e| cranelift_err(k, e.to_string()))?;
            ctx.func.signature = sig.clone();
            ctx.func.name = UserFuncName::user(0, id.as_u32());
            lower::lower_segment(module, &mut ctx.func, &mut fctx, p, stmts, &self.opts)?;
            module
                .define_function(id, &mut ctx)
                .map_err(|e| cranelift_err(k, format!("{e:?}")))?;
            module.clear_context(&mut ctx);
            ids.push(id);
            plan.push(PlannedSegment::Jit { split });
        }
        Ok(plan)
    }

    /// The Cranelift IR of kernel `kernel` (every generated segment; library calls as comments).
    pub fn clif(&self, p: &LoopProgram, kernel: usize) -> Result<String, CodegenError> {
        self.emit_text(p, kernel, false)
    }

    /// The machine code (Cranelift's VCode listing) of kernel `kernel`.
    pub fn disasm(&self, p: &LoopProgram, kernel: usize) -> Result<String, CodegenError> {
        self.emit_text(p, kernel, true)
    }

    fn emit_text(
        &self,
        p: &LoopProgram,
        kernel: usize,
        disasm: bool,
    ) -> Result<String, CodegenError> {
        let k = p
            .kernels
            .get(kernel)
            .ok_or(CodegenError::NoSuchKernel(kernel))?;
        self.validate(p, k)?;
        let mut module = jit::new_module(&self.target);
        let r = self.emit_text_in(&mut module, p, k, disasm);
        jit::discard_module(module);
        r
    }

    fn emit_text_in(
        &self,
        module: &mut JITModule,
        p: &LoopProgram,
        k: &Kernel,
        disasm: bool,
    ) -> Result<String, CodegenError> {
        let mut out = String::new();
        let mut fctx = FunctionBuilderContext::new();
        let mut ctx = module.make_context();
        let sig = kernel_signature(module);
        for (n, unit) in launch_units(k).into_iter().enumerate() {
            let (start, end) = match unit {
                LaunchUnit::Call { stmt } => {
                    out.push_str(&format!(
                        "; segment {n}: library call {:?}\n\n",
                        k.body[stmt]
                    ));
                    continue;
                }
                LaunchUnit::Loops { start, end, .. } => (start, end),
            };
            let stmts = &k.body[start..end];
            let name = format!("{}_s{n}", k.name);
            ctx.func.signature = sig.clone();
            lower::lower_segment(module, &mut ctx.func, &mut fctx, p, stmts, &self.opts)?;
            if disasm {
                let id = module
                    .declare_function(&name, Linkage::Local, &sig)
                    .map_err(|e| cranelift_err(k, e.to_string()))?;
                ctx.func.name = UserFuncName::user(0, id.as_u32());
                ctx.set_disasm(true);
                module
                    .define_function(id, &mut ctx)
                    .map_err(|e| cranelift_err(k, format!("{e:?}")))?;
                let vcode = ctx
                    .compiled_code()
                    .and_then(|c| c.vcode.clone())
                    .unwrap_or_default();
                out.push_str(&format!("; segment {n}: {name}\n{vcode}\n"));
            } else {
                ctx.func.name = UserFuncName::testcase(&name);
                out.push_str(&format!("{}\n", ctx.func.display()));
            }
            module.clear_context(&mut ctx);
        }
        Ok(out)
    }
}

enum PlannedSegment {
    Jit { split: Option<Split> },
    Call { stmt: usize },
}

fn cranelift_err(k: &Kernel, message: String) -> CodegenError {
    CodegenError::Cranelift {
        kernel: k.name.clone(),
        message,
    }
}

impl Executable {
    /// The program this executable runs.
    pub fn program(&self) -> &LoopProgram {
        &self.program
    }

    /// Checks buffer count, types and lengths against the program's buffers before running any
    /// generated code, then runs the kernels in order on up to `threads` threads (0: as many as
    /// rayon has). Bounds that depend on sparse index data are checked before each kernel.
    pub fn run(&self, bufs: &mut [Data], threads: usize) -> Result<RunStats, RuntimeError> {
        let p = &self.program;
        if bufs.len() != p.buffers.len() {
            return Err(RuntimeError::BufferCount {
                expected: p.buffers.len(),
                got: bufs.len(),
            });
        }
        for (i, (d, b)) in bufs.iter().zip(&p.buffers).enumerate() {
            if d.ty() != b.ty {
                return Err(RuntimeError::BufferType {
                    index: i,
                    name: b.name.clone(),
                    expected: b.ty.to_string(),
                    got: d.ty().to_string(),
                });
            }
            // Sparse input arrays hold the stored entries: at most the buffer's capacity.
            let fits = match b.role {
                tdsl_loop::Role::InputPart { .. } => d.len() as u64 <= b.elems,
                _ => d.len() as u64 == b.elems,
            };
            if !fits {
                return Err(RuntimeError::BufferLen {
                    index: i,
                    name: b.name.clone(),
                    expected: b.elems,
                    got: d.len(),
                });
            }
        }
        let threads = if threads == 0 {
            rayon::current_num_threads()
        } else {
            threads
        };
        let mut stats = RunStats::default();
        for (k, ck) in p.kernels.iter().zip(&self.kernels) {
            let t0 = Instant::now();
            let checked = check::check_bounds(p, k, bufs).map_err(|v| {
                if v.sparse_data {
                    RuntimeError::BadSparseData {
                        kernel: k.name.clone(),
                        message: v.message,
                    }
                } else {
                    RuntimeError::OutOfBounds {
                        kernel: k.name.clone(),
                        message: v.message,
                    }
                }
            })?;
            for seg in &ck.segments {
                match seg {
                    Segment::Jit { f, split } => {
                        let ptrs = BufPtrs::new(bufs);
                        let chunks = match split {
                            Some(s) if threads > 1 => {
                                let total = s.extent.saturating_mul(s.work_per_iter);
                                (total / MIN_PARALLEL_WORK)
                                    .min(threads as u64)
                                    .min(s.extent)
                                    .max(1)
                            }
                            _ => 1,
                        };
                        if chunks <= 1 {
                            f.call(&ptrs, &checked, 0, u64::MAX);
                            stats.tasks += 1;
                        } else {
                            let extent = split.map_or(1, |s| s.extent);
                            (0..chunks).into_par_iter().for_each(|c| {
                                let lo = (extent as u128 * c as u128 / chunks as u128) as u64;
                                let hi = (extent as u128 * (c + 1) as u128 / chunks as u128) as u64;
                                f.call(&ptrs, &checked, lo, hi);
                            });
                            stats.tasks += chunks as usize;
                        }
                    }
                    Segment::Call { stmt } => {
                        let Some(Stmt::Call(call)) = k.body.get(*stmt) else {
                            unreachable!("segment {stmt} of `{}` is a library call", k.name);
                        };
                        let fail = |message| RuntimeError::OutOfBounds {
                            kernel: k.name.clone(),
                            message,
                        };
                        match call {
                            LibCall::Gemm {
                                m,
                                n,
                                k: kk,
                                batch,
                                a,
                                b,
                                c,
                                accumulate,
                            } => {
                                let call = gemm::GemmCall {
                                    m: *m,
                                    n: *n,
                                    k: *kk,
                                    batch,
                                    a,
                                    b,
                                    c,
                                    accumulate: *accumulate,
                                };
                                gemm::run(&call, bufs, threads).map_err(fail)?;
                                stats.gemm_calls += 1;
                            }
                            _ => {
                                sparse::run(call, bufs, threads).map_err(|message| {
                                    RuntimeError::BadSparseData {
                                        kernel: k.name.clone(),
                                        message,
                                    }
                                })?;
                                stats.sparse_calls += 1;
                            }
                        }
                    }
                }
            }
            stats.kernels += 1;
            stats.kernel_times.push(t0.elapsed());
        }
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_is_send_and_sync() {
        fn assert<T: Send + Sync>() {}
        assert::<Executable>();
    }
}
