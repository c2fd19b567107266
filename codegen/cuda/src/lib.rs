//! tdsl-cuda: the CUDA backend. A [`LoopProgram`] goes in; CUDA C++ comes out, compiled at run
//! time by NVRTC to a CUBIN for the device's exact `sm_XX`, and run through cudarc.
//!
//! - `map.rs`: the GPU mapping pass (library calls as loop nests, launches, grid loops);
//! - `render.rs`: the one C-style renderer (launches → CUDA C++), with the preludes under
//!   `kernels/` (`cuda.cuh` for the device, `host.h` for emulation, `common.cuh` shared);
//! - `walk.rs`: the walk over a mapped program's steps (launches, index tables, host steps),
//!   one for the device and the emulation;
//! - `device.rs`: the driver half (cudarc): buffers, launches and copies on a GPU;
//! - `emulate.rs`: the same text compiled by the host C++ compiler and run on the host (a
//!   block's threads as fibers where they work together), which is how machines with no GPU
//!   test the generated kernels.

#![deny(unsafe_code)]

pub mod device;
pub mod emulate;
pub mod map;
pub mod nvrtc;
pub mod render;
pub mod tensor;
mod walk;

use tdsl_loop::{data, Data, LibCall, LoopProgram};

pub use device::CudaBackend;
pub use map::{
    map_program, map_program_variants, map_program_with, Bins, Groups, Launch, Rows, Split, Step,
    Table,
};

/// The CUDA C++ translation unit of `p`: every kernel of the program, each launch with its
/// shape as a comment, after the device prelude. What `tdsl emit --target cuda` prints and
/// NVRTC compiles.
pub fn cuda_unit(p: &LoopProgram) -> String {
    let (mapped, steps) = map_program(p);
    render::render_unit(&mapped, &steps, render::UnitTarget::Device)
}

/// [`cuda_unit`] for a device of compute capability `sm` (86 for 8.6): its tensor-core
/// instructions only ([`tensor::TensorCores::of`]).
pub fn cuda_unit_for(p: &LoopProgram, sm: u32) -> String {
    let (mapped, steps) = map_program_with(p, tensor::TensorCores::of(sm));
    render::render_unit(&mapped, &steps, render::UnitTarget::Device)
}

/// [`cuda_unit`] with the tensor-core instructions `tc` and the template variants `v` (what
/// NVRTC compiles for a device that has them).
pub fn cuda_unit_with(p: &LoopProgram, tc: tensor::TensorCores, v: tensor::Variants) -> String {
    let (mapped, steps) = map_program_variants(p, tc, v);
    render::render_unit(&mapped, &steps, render::UnitTarget::Device)
}

/// The launches of kernel `kernel` of `p`, as CUDA C++ (no prelude).
pub fn cuda_kernel(p: &LoopProgram, kernel: usize) -> String {
    let (mapped, steps) = map_program(p);
    let mut out = String::new();
    for s in &steps {
        match s {
            Step::Launch(l) if l.kernel == kernel => {
                out.push_str(&render::render_launch(&mapped, l))
            }
            Step::Table { kernel: k, table } if *k == kernel => {
                out.push_str(&render::table_comment(&mapped, table));
                out.push('\n');
            }
            Step::Host { kernel: k, .. } if *k == kernel => {
                out.push_str("// sparsify runs on the host between launches\n")
            }
            _ => {}
        }
    }
    out
}

/// The buffers a mapped program has beyond the program it was mapped from: device-only scratch
/// that the launches write before they read it ([`tensor::Staging`]); the caller binds none.
pub fn scratch<'a>(p: &LoopProgram, mapped: &'a LoopProgram) -> &'a [tdsl_loop::Buffer] {
    mapped.buffers.get(p.buffers.len()..).unwrap_or(&[])
}

pub(crate) fn check_buffers(buffers: &[tdsl_loop::Buffer], bufs: &[Data]) -> Result<(), String> {
    if bufs.len() != buffers.len() {
        return Err(format!(
            "{} buffers were given for a program with {}",
            bufs.len(),
            buffers.len()
        ));
    }
    for (i, (d, b)) in bufs.iter().zip(buffers).enumerate() {
        // A sparse input's arrays are bound as stored: up to their capacity.
        let fits = match b.role {
            tdsl_loop::Role::InputPart { .. } => d.len() as u64 <= b.elems,
            _ => d.len() as u64 == b.elems,
        };
        if d.ty() != b.ty || !fits {
            return Err(format!(
                "buffer %{i} is {}[{}], the program declares {}[{}]",
                d.ty(),
                d.len(),
                b.ty,
                b.elems
            ));
        }
    }
    Ok(())
}

/// Runs a call the device has no kernel for (`sparsify`) on host buffers.
pub(crate) fn host_call(call: &LibCall, bufs: &mut [Data]) -> Result<(), String> {
    match call {
        LibCall::Sparsify { src, out, select } => data::sparsify_into(*src, out, *select, bufs),
        other => Err(format!(
            "{other:?} has a kernel on the device and is not run on the host"
        )),
    }
}
