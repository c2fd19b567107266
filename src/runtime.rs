//! Running a plan: input tensors → loop-IR buffers → a backend → output tensors.
//!
//! Buffers are allocated here from the plan's declarations (inputs are moved in, outputs and
//! temporaries start zeroed); the backend only runs kernels over them. Every backend is checked
//! against the reference interpreter (`crate::interp`).

use crate::diag::{Code, Diagnostic};
use crate::plan::lower::Plan;
use crate::tensor::{Storage, Tensor};
use tdsl_loop::{Data, Part, Role};

use std::cell::RefCell;
use std::time::{Duration, Instant};
use tdsl_cpu::{CpuBackend, Executable};

thread_local! {
    /// One JIT backend per thread: its kernel cache makes a second compile of the same kernel
    /// free (`CpuBackend` owns JIT memory and is not shared across threads).
    static CPU: RefCell<Option<CpuBackend>> = const { RefCell::new(None) };
}

/// Compiles a plan with this thread's CPU backend (kernels already compiled are reused).
/// Returns the executable and how many kernels had to be compiled.
pub fn compile_jit(plan: &Plan) -> Result<(Executable, usize), Diagnostic> {
    CPU.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(
                CpuBackend::new()
                    .map_err(|e| internal(format!("the CPU backend could not start: {e}")))?,
            );
        }
        let be = slot
            .as_mut()
            .ok_or_else(|| internal("the CPU backend is missing".into()))?;
        let before = be.n_compiled();
        let exe = be
            .compile(&plan.loops)
            .map_err(|e| internal(format!("JIT compilation failed: {e}")))?;
        Ok((exe, be.n_compiled() - before))
    })
}

fn internal(message: String) -> Diagnostic {
    Diagnostic::new(Code::Internal, message)
        .help("this is a tdsl bug: please report it with the script")
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
        .run(&mut bufs, threads)
        .map_err(|e| internal(format!("running compiled kernels failed: {e}")))?;
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

/// Buffers for a plan, with the inputs bound: sparse inputs are compressed into their
/// layout's arrays here (the one conversion per run; kernels see only compressed storage).
pub fn buffers(plan: &Plan, inputs: &[Tensor]) -> Result<Vec<Data>, Diagnostic> {
    bind_buffers(
        plan,
        inputs.iter().map(|t| Some(t.data.clone())).collect(),
        inputs,
    )
}

/// Like [`buffers`], moving dense input data in without a copy (`data[i]` is taken); only
/// the sparse inputs are read from `inputs` (and compressed).
pub fn bind_buffers(
    plan: &Plan,
    mut data: Vec<Option<Storage>>,
    inputs: &[Tensor],
) -> Result<Vec<Data>, Diagnostic> {
    let mut compressed: Vec<Option<[Option<Data>; 3]>> = Vec::new();
    for (i, layout) in plan.input_layouts.iter().enumerate() {
        compressed.push(match layout {
            Some(l) => {
                let t = inputs
                    .get(i)
                    .ok_or_else(|| internal(format!("input {i} has no data")))?;
                let s = crate::sparse::compress(t, *l).map_err(|e| {
                    Diagnostic::new(
                        Code::SparseData,
                        format!("input {i} cannot be stored sparse: {e}"),
                    )
                })?;
                Some([
                    Some(Data::I32(s.ptr)),
                    Some(Data::I32(s.idx)),
                    Some(Data::from(s.values)),
                ])
            }
            None => None,
        });
    }
    let mut out = Vec::with_capacity(plan.loops.buffers.len());
    for b in &plan.loops.buffers {
        out.push(match b.role {
            Role::Input(i) => {
                let s = data
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
                let d = compressed
                    .get_mut(input as usize)
                    .and_then(Option::as_mut)
                    .and_then(|parts| parts[k].take())
                    .ok_or_else(|| internal(format!("sparse input {input} is not bound")))?;
                let pad = plan.padded_inputs.get(input as usize) == Some(&true);
                if pad && part != Part::Ptr {
                    pad_to(d, b.elems as usize)
                } else {
                    d
                }
            }
            Role::Output(_) | Role::Temp => Data::zeros(b.ty, b.elems as usize),
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
    let mut bufs = buffers(plan, inputs)?;
    tdsl_loop::eval::eval(&plan.loops, &mut bufs).map_err(|e| {
        Diagnostic::new(Code::Internal, format!("the loop-IR evaluator failed: {e}"))
            .help("this is a tdsl bug: please report it with the script")
    })?;
    Ok(outputs(plan, shapes, bufs))
}

/// The Cranelift IR of kernel `kernel` of a plan (for `:emit clif` and debugging).
pub fn emit_clif(plan: &Plan, kernel: usize) -> Result<String, Diagnostic> {
    CPU.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(
                CpuBackend::new()
                    .map_err(|e| internal(format!("the CPU backend could not start: {e}")))?,
            );
        }
        let be = slot
            .as_ref()
            .ok_or_else(|| internal("the CPU backend is missing".into()))?;
        be.clif(&plan.loops, kernel)
            .map_err(|e| internal(format!("CLIF for kernel {kernel} failed: {e}")))
    })
}
