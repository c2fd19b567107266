//! Running a plan: input tensors → loop-IR buffers → a backend → output tensors.
//!
//! Buffers are allocated here from the plan's declarations (inputs are moved in, outputs and
//! temporaries start zeroed); the backend only runs kernels over them. Every backend is checked
//! against the reference interpreter (`crate::interp`).

use crate::bind::Value;
use crate::diag::{Code, Diagnostic};
use crate::plan::lower::Plan;
use crate::tensor::{Storage, Tensor};
use tdsl_loop::{Data, Part, Role};

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tdsl_loop::backend::{Backend, BackendError, ErrorKind, EvalBackend, Executable};
use tdsl_loop::RunOptions;

use crate::session::Engine;

thread_local! {
    /// One CPU JIT backend per thread: its kernel cache makes a second compile of the same
    /// kernel free (`CpuBackend` owns JIT memory and is not shared across threads).
    static CPU: RefCell<Option<tdsl_cpu::CpuBackend>> = const { RefCell::new(None) };
    /// One CUDA backend per thread (device 0), or why there is none (asked once).
    static CUDA: RefCell<Option<Result<tdsl_cuda::CudaBackend, BackendError>>> =
        const { RefCell::new(None) };
}

/// Runs `f` with the backend of `engine` (created on first use, one per thread). The
/// interpreter has no backend (a diagnostic); a machine without a usable GPU, driver or NVRTC
/// is a `tdsl::backend::unavailable` diagnostic that says what was looked for.
fn with_backend<R>(
    engine: Engine,
    plan: &Plan,
    f: impl FnOnce(&mut dyn Backend) -> Result<R, BackendError>,
) -> Result<R, Diagnostic> {
    let fail = |e: BackendError| backend_diagnostic(e, plan);
    match engine {
        Engine::Jit => CPU.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = Some(
                    tdsl_cpu::CpuBackend::new()
                        .map_err(|e| internal(format!("the CPU backend could not start: {e}")))?,
                );
            }
            let be = slot
                .as_mut()
                .ok_or_else(|| internal("the CPU backend is missing".into()))?;
            f(be).map_err(fail)
        }),
        Engine::Eval => f(&mut EvalBackend).map_err(fail),
        Engine::Interp => Err(internal(
            "the reference interpreter runs the checked program, not a plan".into(),
        )),
        Engine::Cuda => CUDA.with(|cell| {
            let mut slot = cell.borrow_mut();
            let be = slot.get_or_insert_with(|| tdsl_cuda::CudaBackend::new(0));
            match be {
                Ok(be) => f(be).map_err(fail),
                Err(e) => Err(fail(e.clone())),
            }
        }),
    }
}

/// Compiles a plan with this thread's backend for `engine` (kernels already compiled are
/// reused). Returns the executable and how many kernels had to be compiled.
pub fn compile(engine: Engine, plan: &Plan) -> Result<(Arc<dyn Executable>, usize), Diagnostic> {
    with_backend(engine, plan, |be| {
        let before = be.n_compiled();
        let exe = be.compile(&plan.loops)?;
        Ok((exe, be.n_compiled() - before))
    })
}

/// Compiles a plan on the CPU JIT.
pub fn compile_jit(plan: &Plan) -> Result<(Arc<dyn Executable>, usize), Diagnostic> {
    compile(Engine::Jit, plan)
}

/// The GPU's name and measured ceilings (f32 GFLOP/s, copy GB/s), measured once per thread.
pub fn cuda_ceilings(plan: &Plan) -> Result<(String, f64, f64), Diagnostic> {
    thread_local! {
        static CEIL: RefCell<Option<(String, f64, f64)>> = const { RefCell::new(None) };
    }
    if let Some(c) = CEIL.with(|c| c.borrow().clone()) {
        return Ok(c);
    }
    let c = CUDA.with(|cell| {
        let mut slot = cell.borrow_mut();
        let be = slot.get_or_insert_with(|| tdsl_cuda::CudaBackend::new(0));
        match be {
            Ok(be) => {
                let c = be.ceilings().map_err(|e| backend_diagnostic(e, plan))?;
                Ok((be.info().describe(), c.peak_gflops, c.bandwidth_gbps))
            }
            Err(e) => Err(backend_diagnostic(e.clone(), plan)),
        }
    })?;
    CEIL.with(|cell| *cell.borrow_mut() = Some(c.clone()));
    Ok(c)
}

fn internal(message: String) -> Diagnostic {
    Diagnostic::new(Code::Internal, message)
        .help("this is a tdsl bug: please report it with the script")
}

/// A backend error as a diagnostic: the user's environment (`tdsl::backend::unavailable`), bad
/// sparse data (`tdsl::data::sparse`), or a tdsl bug (`tdsl::internal::error`), pointing at
/// the statement the failing kernel came from where there is one.
pub fn backend_diagnostic(e: BackendError, plan: &Plan) -> Diagnostic {
    let d = match e.kind {
        ErrorKind::Unavailable => Diagnostic::new(Code::BackendUnavailable, e.message.clone())
            .help(
                "run on the CPU (`--backend jit`, the default); `tdsl emit --target cuda` prints \
                 the CUDA without a GPU",
            ),
        ErrorKind::BadData => Diagnostic::new(Code::SparseData, e.message.clone()),
        ErrorKind::Compile => internal(format!("compilation failed: {}", e.message)),
        ErrorKind::Buffers | ErrorKind::Run => {
            internal(format!("running compiled kernels failed: {}", e.message))
        }
    };
    let Some(kernel) = e.kernel.and_then(|k| plan.loops.kernels.get(k)) else {
        return d;
    };
    let d = match kernel.source {
        Some(s) => d.label(
            tdsl_syntax::Span {
                start: s.start,
                end: s.end,
            },
            format!("kernel {} computes this", kernel.name),
        ),
        None => d,
    };
    let help = match &d.help {
        Some(h) => format!("{h} (the kernel computes `{}`)", kernel.origin),
        None => format!("the kernel computes `{}`", kernel.origin),
    };
    d.help(help)
}

/// Timings of one JIT run.
#[derive(Debug, Clone, Default)]
pub struct JitTimes {
    pub compile: Duration,
    pub n_compiled: usize,
    pub run: Duration,
    pub kernel_times: Vec<Duration>,
}

/// Compiles (or reuses) and runs a plan on the CPU JIT with `threads` threads.
pub fn run_jit_timed(
    plan: &Plan,
    inputs: &[Tensor],
    shapes: &[Vec<usize>],
    threads: usize,
) -> Result<(Vec<Tensor>, JitTimes), Diagnostic> {
    let t0 = Instant::now();
    let (exe, n_compiled) = compile_jit(plan)?;
    let compile = t0.elapsed();
    let mut bufs = buffers(plan, inputs)?;
    let t1 = Instant::now();
    let stats = exe
        .run(&mut bufs, &RunOptions { threads })
        .map_err(|e| backend_diagnostic(e, plan))?;
    let run = t1.elapsed();
    let times = JitTimes {
        compile,
        n_compiled,
        run,
        kernel_times: stats.kernel_times,
    };
    Ok((outputs(plan, shapes, bufs), times))
}

/// Runs a plan on the CPU JIT using every core.
pub fn run_jit(
    plan: &Plan,
    inputs: &[Tensor],
    shapes: &[Vec<usize>],
) -> Result<Vec<Tensor>, Diagnostic> {
    let threads = rayon::current_num_threads();
    Ok(run_jit_timed(plan, inputs, shapes, threads)?.0)
}

/// Buffers for a plan with `inputs` (one value per program input) moved in: dense data without
/// a copy; sparse inputs as the arrays of their layout, taken as they are when the value is
/// already stored in that layout (read from a file), else compressed from dense data (the one
/// conversion per run; kernels see only compressed storage).
pub fn bind_owned(plan: &Plan, inputs: Vec<Value>) -> Result<Vec<Data>, Diagnostic> {
    let bad = |i: usize, e: tdsl_sparse::SparseError| {
        let mut d = Diagnostic::from(e);
        d.message = format!("input {i} cannot be stored sparse: {}", d.message);
        d
    };
    let mut dense: Vec<Option<Storage>> = Vec::with_capacity(inputs.len());
    let mut parts: Vec<Option<[Option<Data>; 3]>> = Vec::with_capacity(inputs.len());
    for (i, v) in inputs.into_iter().enumerate() {
        match plan.input_layouts.get(i).copied().flatten() {
            None => {
                dense.push(Some(v.into_dense().map_err(|e| bad(i, e))?.data));
                parts.push(None);
            }
            Some(layout) => {
                let s = match v {
                    Value::Sparse(s) if s.layout == layout => s,
                    other => {
                        let t = other.into_dense().map_err(|e| bad(i, e))?;
                        crate::sparse::compress(&t, layout).map_err(|e| bad(i, e))?
                    }
                };
                dense.push(None);
                parts.push(Some([
                    Some(Data::I32(s.ptr)),
                    Some(Data::I32(s.idx)),
                    Some(Data::from(s.values)),
                ]));
            }
        }
    }
    assemble(plan, dense, parts)
}

/// Buffers for a plan with dense `inputs` (copied; sparse inputs compressed).
pub fn buffers(plan: &Plan, inputs: &[Tensor]) -> Result<Vec<Data>, Diagnostic> {
    bind_owned(plan, inputs.iter().cloned().map(Value::Dense).collect())
}

/// The plan's buffer set: input buffers from `dense` (taken) and sparse input arrays from
/// `parts` (taken, padded to capacity where the plan says so); outputs and temporaries zeroed.
fn assemble(
    plan: &Plan,
    mut dense: Vec<Option<Storage>>,
    mut parts: Vec<Option<[Option<Data>; 3]>>,
) -> Result<Vec<Data>, Diagnostic> {
    let mut out = Vec::with_capacity(plan.loops.buffers.len());
    for b in &plan.loops.buffers {
        out.push(match b.role {
            Role::Input(i) => {
                let s = dense
                    .get_mut(i as usize)
                    .and_then(Option::take)
                    .ok_or_else(|| internal(format!("input buffer {i} is bound twice")))?;
                storage_to_data(s)
            }
            Role::InputPart { input, part } => {
                let k = match part {
                    Part::Ptr => 0,
                    Part::Idx => 1,
                    Part::Values => 2,
                };
                let d = parts
                    .get_mut(input as usize)
                    .and_then(Option::as_mut)
                    .and_then(|p| p[k].take())
                    .ok_or_else(|| internal(format!("sparse input {input} is not bound")))?;
                let pad = plan.padded_inputs.get(input as usize) == Some(&true);
                if pad && part != Part::Ptr {
                    pad_to(d, b.elems as usize)
                } else {
                    d
                }
            }
            Role::Output(_) | Role::Temp => usize::try_from(b.elems)
                .ok()
                .and_then(|n| Data::try_zeros(b.ty, n))
                .ok_or_else(|| {
                    Diagnostic::new(
                        Code::TooLarge,
                        format!(
                            "buffer `{}` ({} elements of {}) does not fit in this machine's memory",
                            b.name, b.elems, b.ty
                        ),
                    )
                    .help("reduce the extents, or look at `tdsl cost` to see where the bytes go")
                })?,
        });
    }
    Ok(out)
}

/// `d` followed by zeros up to `n` elements (a capacity; `d` is never longer).
fn pad_to(d: Data, n: usize) -> Data {
    fn pad<T: Default + Clone>(mut v: Vec<T>, n: usize) -> Vec<T> {
        if v.len() < n {
            v.resize(n, T::default());
        }
        v
    }
    match d {
        Data::I32(v) => Data::I32(pad(v, n)),
        Data::F32(v) => Data::F32(pad(v, n)),
        Data::F64(v) => Data::F64(pad(v, n)),
        Data::F16(v) => Data::F16(pad(v, n)),
        Data::BF16(v) => Data::BF16(pad(v, n)),
    }
}

pub(crate) fn storage_to_data(s: Storage) -> Data {
    match s {
        Storage::F32(v) => Data::F32(v),
        Storage::F64(v) => Data::F64(v),
        Storage::F16(v) => Data::F16(v),
        Storage::BF16(v) => Data::BF16(v),
    }
}

fn data_to_storage(d: Data) -> Storage {
    match d {
        Data::F32(v) => Storage::F32(v),
        Data::F64(v) => Storage::F64(v),
        Data::F16(v) => Storage::F16(v),
        Data::BF16(v) => Storage::BF16(v),
        // Index buffers are never outputs.
        Data::I32(v) => Storage::F64(v.into_iter().map(f64::from).collect()),
    }
}

/// The output tensors of a plan run, shaped like the program's outputs.
pub fn outputs(plan: &Plan, shapes: &[Vec<usize>], mut bufs: Vec<Data>) -> Vec<Tensor> {
    plan.output_bufs
        .iter()
        .zip(shapes)
        .map(|(b, shape)| {
            let data = std::mem::replace(&mut bufs[b.0 as usize], Data::F32(Vec::new()));
            Tensor::new(shape.clone(), data_to_storage(data))
        })
        .collect()
}

/// Runs a plan with the loop-IR evaluator.
pub fn run_eval(
    plan: &Plan,
    inputs: &[Tensor],
    shapes: &[Vec<usize>],
) -> Result<Vec<Tensor>, Diagnostic> {
    run_on(Engine::Eval, plan, inputs, shapes)
}

/// Runs a plan on `engine`'s backend (not the interpreter) and returns its outputs.
pub fn run_on(
    engine: Engine,
    plan: &Plan,
    inputs: &[Tensor],
    shapes: &[Vec<usize>],
) -> Result<Vec<Tensor>, Diagnostic> {
    let (exe, _) = compile(engine, plan)?;
    let mut bufs = buffers(plan, inputs)?;
    exe.run(&mut bufs, &RunOptions::default())
        .map_err(|e| backend_diagnostic(e, plan))?;
    Ok(outputs(plan, shapes, bufs))
}

/// The code kernel `kernel` of a plan becomes on `engine`'s backend (`Backend::emit`:
/// Cranelift IR for the JIT, loop IR for the evaluator).
pub fn emit(engine: Engine, plan: &Plan, kernel: usize) -> Result<String, Diagnostic> {
    // CUDA C++ is generated without a device.
    if engine == Engine::Cuda {
        return Ok(tdsl_cuda::cuda_kernel(&plan.loops, kernel));
    }
    with_backend(engine, plan, |be| be.emit(&plan.loops, kernel))
}

/// The machine code kernel `kernel` of a plan compiles to on `engine`'s backend
/// (`Backend::disasm`: the JIT's x86-64 listing).
pub fn disasm(engine: Engine, plan: &Plan, kernel: usize) -> Result<String, Diagnostic> {
    with_backend(engine, plan, |be| be.disasm(&plan.loops, kernel))
}
