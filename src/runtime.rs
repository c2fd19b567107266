//! Running a plan: input tensors → loop-IR buffers → a backend → output tensors.
//!
//! Buffers are allocated here from the plan's declarations (inputs are moved in, outputs and
//! temporaries start zeroed); the backend only runs kernels over them. Every backend is checked
//! against the reference interpreter (`crate::interp`).

use crate::diag::{Code, Diagnostic};
use crate::plan::lower::Plan;
use crate::tensor::{Storage, Tensor};
use tdsl_loop::{Data, Role};

/// Which engine runs the loop IR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// `tdsl_loop::eval`: the loop-IR evaluator (slow; for bisecting planner and backend bugs).
    LoopEval,
}

/// Buffers for a plan, with the inputs bound.
pub fn buffers(plan: &Plan, inputs: &[Tensor]) -> Vec<Data> {
    plan.loops
        .buffers
        .iter()
        .map(|b| match b.role {
            Role::Input(i) => storage_to_data(&inputs[i as usize].data),
            Role::Output(_) | Role::Temp => Data::zeros(b.ty, b.elems as usize),
        })
        .collect()
}

fn storage_to_data(s: &Storage) -> Data {
    match s {
        Storage::F32(v) => Data::F32(v.clone()),
        Storage::F64(v) => Data::F64(v.clone()),
        Storage::F16(v) => Data::F16(v.clone()),
        Storage::BF16(v) => Data::BF16(v.clone()),
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
    let mut bufs = buffers(plan, inputs);
    tdsl_loop::eval::eval(&plan.loops, &mut bufs).map_err(|e| {
        Diagnostic::new(Code::Internal, format!("the loop-IR evaluator failed: {e}"))
            .help("this is a tdsl bug: please report it with the script")
    })?;
    Ok(outputs(plan, shapes, bufs))
}
