//! FLOPs, bytes and arithmetic intensity of every statement; the numbers `cost`, `check` and the
//! REPL print. For every sparse-dense product it also predicts the time of the sparse kernel
//! and of the dense GEMM it replaces, and says which is faster.
//!
//! Conventions (spec/language.md, "Cost model"): an einsum step follows opt_einsum's count
//! (`order::flop_count`), multi-operand einsums are costed along the contraction order that
//! `order::contraction_path` chooses (the one later executed), a reduce costs one FLOP per input
//! element, an elementwise op one per output element, and rearrange, repeat and cast cost none.
//! Counts follow what runs (`plan::sparse`): an einsum that is a sparse product costs
//! `2 · stored values · n` FLOPs and reads the stored values and indices; every other use of a
//! sparse value reads its dense expansion and costs the dense count. Counts are u128.
//!
//! Predicted times are `max(flops / (ceiling · efficiency), bytes / bandwidth)` with the
//! per-kernel efficiencies of [`efficiency`], all in one place so that they can be calibrated
//! against measurements (bench/RESULTS.md).

use super::order::{contraction_path, format_path, ContractionPath};
use super::sparse::{resolve, sparse_product, stored_sparse, SparseProduct, SparseSource};
use crate::check::{format_name, Format, NodeId, NodeKind, Program, Select, TensorType};
use crate::dtype::DType;
use crate::machine::Machine;
use crate::tensor::Tensor;
use std::collections::BTreeSet;

/// What is known about the stored entries of one sparse value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stored {
    /// Values the format stores (nonzeros, or whole blocks for BSR, or half for 2:4).
    pub values: u64,
    /// Bytes of values plus indices and metadata.
    pub bytes: u64,
    /// Whether `values` was counted from data or is exact by construction (false: assumed
    /// fully stored, for lack of data).
    pub measured: bool,
}

/// Stored entries of a tensor of type `ty`, counted from its data when there is any.
/// Indices are 32-bit; 2:4 metadata is 2 bits per kept value.
pub fn stored(ty: &TensorType, data: Option<&Tensor>) -> Stored {
    let n = ty.shape.n_elems().unwrap_or(u64::MAX);
    let values_f64 = data.map(|t| t.to_f64());
    let nnz = values_f64
        .as_ref()
        .map(|v| v.iter().filter(|x| **x != 0.0).count() as u64);
    let measured = data.is_some();
    match ty.format {
        Format::Dense | Format::TwoFour { .. } => stored_count(ty, n, true),
        Format::Coo | Format::Csr | Format::Csc => stored_count(ty, nnz.unwrap_or(n), measured),
        Format::Bsr { rows, cols } => {
            let ext = ty.shape.extents();
            let (r, c) = (ext[0], ext[1]);
            let (nbr, nbc) = (r / rows, c / cols);
            let blocks = match &values_f64 {
                Some(v) => {
                    let mut count = 0u64;
                    for bi in 0..nbr as usize {
                        for bj in 0..nbc as usize {
                            let any = (0..rows as usize).any(|i| {
                                (0..cols as usize).any(|j| {
                                    v[(bi * rows as usize + i) * c as usize
                                        + bj * cols as usize
                                        + j]
                                        != 0.0
                                })
                            });
                            count += u64::from(any);
                        }
                    }
                    count
                }
                None => nbr * nbc,
            };
            stored_count(ty, blocks.saturating_mul(rows * cols), measured)
        }
    }
}

/// [`stored`] of bound data: dense data is counted as [`stored`] counts it; sparse data stored
/// in the format of `ty` is counted from its arrays (no expansion), other sparse data from its
/// dense values.
pub fn stored_value(ty: &TensorType, data: Option<&crate::bind::Value>) -> Stored {
    use crate::bind::Value;
    let s = match data {
        None => return stored(ty, None),
        Some(Value::Dense(t)) => return stored(ty, Some(t)),
        Some(Value::Sparse(s)) => s,
    };
    let same_layout =
        crate::sparse::layout(ty.format, ty.shape.rank()).is_some_and(|l| l == s.layout);
    if !same_layout {
        return match crate::sparse::decompress(s) {
            Ok(t) => stored(ty, Some(&t)),
            Err(_) => stored(ty, None),
        };
    }
    let values = s.values.as_ref().to_f64();
    match ty.format {
        Format::Bsr { rows, cols } => {
            let block = (rows * cols) as usize;
            let blocks = values
                .chunks(block.max(1))
                .filter(|b| b.iter().any(|&x| x != 0.0))
                .count() as u64;
            stored_count(ty, blocks.saturating_mul(rows * cols), true)
        }
        Format::Coo | Format::Csr | Format::Csc => stored_count(
            ty,
            values.iter().filter(|&&x| x != 0.0).count() as u64,
            true,
        ),
        Format::Dense | Format::TwoFour { .. } => stored(ty, None),
    }
}

/// Storage of `values` stored values in `ty`'s format (for BSR a multiple of the block size;
/// for dense and 2:4 the count is fixed by the shape and `values` is ignored).
pub fn stored_count(ty: &TensorType, values: u64, measured: bool) -> Stored {
    let n = ty.shape.n_elems().unwrap_or(u64::MAX);
    let esz = ty.dtype.size_bytes();
    let ext = ty.shape.extents();
    let sat = |a: u64, b: u64| a.saturating_mul(b);
    match ty.format {
        Format::Dense => Stored {
            values: n,
            bytes: sat(n, esz),
            measured: true,
        },
        Format::TwoFour { .. } => {
            let kept = n / 2;
            Stored {
                values: kept,
                bytes: sat(kept, esz).saturating_add(kept.div_ceil(4)),
                measured: true,
            }
        }
        Format::Coo => Stored {
            values,
            bytes: sat(values, esz + 4 * ext.len() as u64),
            measured,
        },
        Format::Csr | Format::Csc => {
            let major = if ty.format == Format::Csr {
                ext[0]
            } else {
                ext[1]
            };
            Stored {
                values,
                bytes: sat(values, esz + 4).saturating_add(sat(major + 1, 4)),
                measured,
            }
        }
        Format::Bsr { rows, cols } => {
            let blocks = values / (rows * cols).max(1);
            Stored {
                values,
                bytes: sat(values, esz)
                    .saturating_add(sat(blocks, 4))
                    .saturating_add(sat(ext[0] / rows.max(1) + 1, 4)),
                measured,
            }
        }
    }
}

/// Stored entries of `sparsify(x, FORMAT, select)` with result type `ty`. `density=` fixes the
/// count exactly (`tdsl_sparse::prune`: `round(d · count)` entries or blocks); `threshold=` and
/// the default count from `x`'s data when there is some (the pruning is run on it), and are
/// otherwise assumed to keep everything.
pub fn sparsify_stored(ty: &TensorType, select: Select, x: Option<&Tensor>) -> Stored {
    let n = ty.shape.n_elems().unwrap_or(u64::MAX);
    match (ty.format, select) {
        (Format::Dense | Format::TwoFour { .. }, _) => stored_count(ty, n, true),
        (Format::Bsr { rows, cols }, Select::Density(d)) => {
            let blocks = n / (rows * cols).max(1);
            let kept = ((d * blocks as f64).round() as u64).min(blocks);
            stored_count(ty, kept * rows * cols, true)
        }
        (_, Select::Density(d)) => stored_count(ty, ((d * n as f64).round() as u64).min(n), true),
        (f, _) => {
            let pruned = x.and_then(|t| {
                let layout = crate::sparse::layout(f, t.shape.len())?;
                let s = tdsl_sparse::prune::sparsify(
                    crate::sparse::values_ref(t),
                    &t.shape,
                    layout,
                    select,
                )
                .ok()?;
                let dense = tdsl_sparse::prune::to_dense_f64(s.as_ref()).ok()?;
                Some(Tensor::from_f64(ty.dtype, t.shape.clone(), &dense))
            });
            stored(ty, pruned.as_ref())
        }
    }
}

/// Stored entries of every stored-sparse node (`plan::sparse::stored_sparse`), indexed by node:
/// sparse inputs from `stored_inputs`, `sparsify` results from [`sparsify_stored`] (with the
/// data of `x` when `x` is an input whose data is in `data`), and views and names of them from
/// the storage they reuse.
pub fn stored_nodes(
    program: &Program,
    stored_inputs: &[Stored],
    data: &[Option<&Tensor>],
) -> Vec<Option<Stored>> {
    let mut out: Vec<Option<Stored>> = vec![None; program.nodes.len()];
    for (i, node) in program.nodes.iter().enumerate() {
        let id = NodeId(i as u32);
        let r = resolve(program, id);
        if r != id {
            out[i] = out[r.idx()];
            continue;
        }
        out[i] = match stored_sparse(program, id) {
            None => None,
            Some(SparseSource::Input(k)) => Some(
                stored_inputs
                    .get(k)
                    .copied()
                    .unwrap_or_else(|| stored(&node.ty, None)),
            ),
            Some(SparseSource::View(src) | SparseSource::Map(src)) => out[src.idx()],
            Some(SparseSource::Sparsify) => {
                let NodeKind::Sparsify { x, select } = &node.kind else {
                    continue;
                };
                let x_data = match program.node(resolve(program, *x)).kind {
                    NodeKind::Input(k) => data.get(k).copied().flatten(),
                    _ => None,
                };
                Some(sparsify_stored(&node.ty, *select, x_data))
            }
        };
    }
    out
}

/// Compute efficiencies of the kernels `cost` predicts times for: the fraction of the machine's
/// GEMM ceiling ([`gemm_ceiling_gflops`]) each reaches on large operands. Memory traffic is
/// assumed to stream at the measured copy bandwidth for every kernel. These are the constants to
/// calibrate from `bench/RESULTS.md` and the `spmm_bench` example (spec/language.md, "Sparse
/// cost model").
pub mod efficiency {
    /// Dense GEMM (tdsl's packing GEMM or the `gemm` crate): 0.84 of the peak measured at
    /// 2048³ and 4096² × 256 on the Zen 5 VM with AVX-512 (bench/RESULTS.md).
    pub const DENSE_GEMM: f64 = 0.9;
    /// BSR with both block extents at least [`BSR_LARGE_BLOCK`]: each block is a small GEMM
    /// (measured 0.42–0.69 of the AVX-512 peak at densities 0.5 to 0.1).
    pub const BSR_LARGE: f64 = 0.5;
    /// BSR with both block extents at least [`BSR_MEDIUM_BLOCK`] (scaled with `BSR_LARGE` when
    /// the GEMM ceiling stopped being capped at the AVX2 rate; not measured since).
    pub const BSR_MEDIUM: f64 = 0.3;
    /// BSR with a smaller block: short inner loops, one index per few FMAs (scaled likewise).
    pub const BSR_SMALL: f64 = 0.13;
    pub const BSR_LARGE_BLOCK: u64 = 16;
    pub const BSR_MEDIUM_BLOCK: u64 = 8;
    /// 2:4: half the FMAs of a dense GEMM, decoded into the GEMM's panels (measured 0.36–0.41
    /// of the peak: the decoding costs about what the skipped FMAs save, so on a CPU a 2:4
    /// product is predicted, and measured, a little slower than dense).
    pub const TWO_FOUR: f64 = 0.4;
    /// CSR and CSC: one index load and an indirect row of the dense operand per value.
    pub const CSR: f64 = 0.12;
    /// COO: CSR's work plus a second index and scattered writes.
    pub const COO: f64 = 0.06;
}

/// Efficiencies of the CUDA backend's kernels (`--device cuda`), as fractions of the GPU's dense
/// 16-bit tensor-core peak ([`NOMINAL_GPU`]), measured on an H200 at 8192 × 8192 weights and
/// 8192 rows (bench/RESULTS.md, 2026-11-27). f16/bf16 products run on tensor cores; dense f32
/// and f64 ones on the SIMT template (f32 on TF32 tensor cores with `--tf32`); sparse f32 and
/// f64 products, CSR, CSC, COO and BSR
/// blocks other than 16, 32 or 64 run the generic loop-nest kernels.
pub mod gpu_efficiency {
    /// Dense on `wgmma` (sm_90a; 541 TFLOP/s at 8192³, cuBLAS 734 in the same run). Devices
    /// without `wgmma` run the `mma.sync` template at 0.31.
    pub const DENSE: f64 = 0.55;
    /// BSR on tensor cores over the stored blocks (222 TFLOP/s of stored work at 32×32, density
    /// 0.25: bound by L2 reads of the dense operand).
    pub const BSR: f64 = 0.22;
    /// 2:4 on `mma.sp` (151 TFLOP/s of the half the products it does).
    pub const TWO_FOUR: f64 = 0.15;
    /// The generic kernels (one thread per output element, no shared-memory tiling): an
    /// estimate, not measured; it scales dense and sparse alike, so their verdicts follow the
    /// FLOP ratio.
    pub const GENERIC: f64 = 0.002;
    /// Dense f32 (and f32 × 16-bit) on the SIMT template (`tdsl_sgemm`): an estimate, not
    /// measured: 60% of an H100's 67 TFLOP/s f32 FMA peak, as 128 × 128 SGEMM tiles reach.
    pub const SIMT: f64 = 0.04;
    /// Dense f32 on TF32 tensor cores (`--tf32`): the dense templates unchanged but for the
    /// instruction, at half the 16-bit peak (the H100's and H200's TF32 peak is half their
    /// bf16 one). Not measured.
    pub const TF32: f64 = DENSE / 2.0;
    /// Dense f64 on the SIMT template in f64: an estimate, not measured: 60% of an H100's 34
    /// TFLOP/s f64 FMA peak. (On the f64 tensor cores, `TDSL_TC_DMMA=1` until a device has
    /// confirmed them, it should about double.)
    pub const SIMT_DOUBLE: f64 = 0.02;

    /// Fractions of the HBM bandwidth the tensor-core products reach when a small batch makes
    /// them read-bound (16 rows × 8192 × 8192 bf16 on an H200: dense 90 µs for its 128 MiB
    /// weight, 2:4 124 µs for 72 MiB of values and metadata).
    pub const DENSE_BANDWIDTH: f64 = 0.30;
    pub const TWO_FOUR_BANDWIDTH: f64 = 0.12;
    /// BSR's: not measured at small batches; taken as dense's.
    pub const BSR_BANDWIDTH: f64 = 0.30;
    /// A product with one row of activations (a matrix times a vector), dense or 2:4: no
    /// tensor-core tile, a block or warp per row of the weight splitting it between its
    /// threads. An estimate, not measured: the block-row kernels reached 42–62% of an H200's
    /// bandwidth (softmax, layer norm), and a product's row also gathers the vector.
    pub const ROWS_BANDWIDTH: f64 = 0.50;
}

/// The GPU `--device cuda` predicts for: an H200 (and H100 SXM), 989 TFLOP/s dense bf16 on
/// tensor cores (132 SMs at 1.98 GHz) and 4.8 TB/s of HBM bandwidth (NVIDIA's figures; the
/// device's own f32 peak and copy bandwidth are measured by `kernels/ceilings.cu` for `bench`).
pub const NOMINAL_GPU: Machine = Machine {
    target: crate::machine::Target::Cuda,
    cores: 132,
    clock_ghz: 1.98,
    flops_per_cycle: 3784.0,
    peak_gflops: 989_000.0,
    bandwidth_gbps: 4800.0,
};

/// A product's operand types, as the GPU's kernels tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operands {
    /// All f16 or all bf16: tensor cores.
    Sixteen,
    /// All f32: the f32 SIMT template for a dense product, or TF32 tensor cores with `--tf32`.
    F32,
    /// f32 with 16-bit operands: the f32 SIMT template for a dense product.
    Wide,
    /// All f64: the SIMT template in f64 for a dense product, else the generic kernels.
    Double,
    /// f64 with other types: the generic kernels (the SIMT template takes f64 only with f64).
    MixedDouble,
}

impl Operands {
    pub fn of(types: &[DType]) -> Operands {
        let first = types.first().copied().unwrap_or(DType::F32);
        if first.size_bytes() == 2 && types.iter().all(|&t| t == first) {
            Operands::Sixteen
        } else if types.iter().all(|&t| t == DType::F64) {
            Operands::Double
        } else if types.contains(&DType::F64) {
            Operands::MixedDouble
        } else if types.iter().all(|&t| t == DType::F32) {
            Operands::F32
        } else {
            Operands::Wide
        }
    }
}

/// The efficiency of a product in format `f` (dense included) on machine `m`, whose operands
/// are `ops` (the GPU's tensor cores take only 16-bit ones).
pub fn product_efficiency(f: Format, ops: Operands, m: &Machine) -> f64 {
    if m.target == crate::machine::Target::Cpu {
        return format_efficiency(f);
    }
    use gpu_efficiency::*;
    let tc_block = |x: u64| [16, 32, 64].contains(&x);
    let tf32 = m.target == crate::machine::Target::CudaTf32;
    match f {
        Format::Dense if ops == Operands::F32 && tf32 => TF32,
        Format::Dense if ops == Operands::F32 || ops == Operands::Wide => SIMT,
        Format::Dense if ops == Operands::Double => SIMT_DOUBLE,
        _ if ops != Operands::Sixteen => GENERIC,
        Format::Dense => DENSE,
        Format::Bsr { rows, cols } if tc_block(rows) && tc_block(cols) => BSR,
        Format::TwoFour { .. } => TWO_FOUR,
        _ => GENERIC,
    }
}

/// The fraction of machine `m`'s bandwidth a product in format `f` with `rows` rows of
/// activations (the dense operand's free extent) reaches when memory bounds it: 1 on the CPU
/// (its ceilings are what the kernels measured), the tensor-core kernels' small-batch figures
/// on the GPU ([`gpu_efficiency::DENSE_BANDWIDTH`] and the others), and the row kernels' for a
/// dense or 2:4 weight times one vector ([`gpu_efficiency::ROWS_BANDWIDTH`]).
pub fn product_bandwidth(f: Format, ops: Operands, m: &Machine, rows: u128) -> f64 {
    let tf32 = m.target == crate::machine::Target::CudaTf32 && ops == Operands::F32;
    if m.target == crate::machine::Target::Cpu || (ops != Operands::Sixteen && !tf32) {
        return 1.0;
    }
    use gpu_efficiency::*;
    match f {
        Format::Dense | Format::TwoFour { .. } if rows == 1 => ROWS_BANDWIDTH,
        Format::Dense => DENSE_BANDWIDTH,
        Format::TwoFour { .. } => TWO_FOUR_BANDWIDTH,
        Format::Bsr { .. } => BSR_BANDWIDTH,
        _ => 1.0,
    }
}

/// The machine `cost` predicts for when none is given (deterministic reports and tests):
/// 8 cores at 3.0 GHz with AVX2 + FMA (768 GFLOP/s) and 40 GB/s of copy bandwidth.
pub const NOMINAL_MACHINE: Machine = Machine {
    target: crate::machine::Target::Cpu,
    cores: 8,
    clock_ghz: 3.0,
    flops_per_cycle: 32.0,
    peak_gflops: 768.0,
    bandwidth_gbps: 40.0,
};

/// The GEMM ceiling in GFLOP/s: the machine's peak. (It was capped at the AVX2 FMA rate while
/// the GEMM ran without AVX-512 kernels; both GEMM paths and the sparse micro-kernels now run
/// 16-lane FMAs where the CPU has them.)
pub fn gemm_ceiling_gflops(m: &Machine) -> f64 {
    m.peak_gflops
}

/// The compute efficiency of a sparse product kernel for stored format `f`.
pub fn format_efficiency(f: Format) -> f64 {
    use efficiency::*;
    match f {
        Format::Dense => DENSE_GEMM,
        Format::Bsr { rows, cols } if rows.min(cols) >= BSR_LARGE_BLOCK => BSR_LARGE,
        Format::Bsr { rows, cols } if rows.min(cols) >= BSR_MEDIUM_BLOCK => BSR_MEDIUM,
        Format::Bsr { .. } => BSR_SMALL,
        Format::TwoFour { .. } => TWO_FOUR,
        Format::Csr | Format::Csc => CSR,
        Format::Coo => COO,
    }
}

/// Predicted seconds of a kernel doing `flops` at `eff` of the GEMM ceiling and moving `bytes`.
pub fn predict_secs(flops: f64, bytes: f64, eff: f64, m: &Machine) -> f64 {
    predict_product_secs(flops, bytes, (eff, 1.0), m)
}

/// [`predict_secs`] with the fraction of the bandwidth the kernel reaches as well:
/// `(compute efficiency, bandwidth efficiency)`.
pub fn predict_product_secs(flops: f64, bytes: f64, (eff, bw_eff): (f64, f64), m: &Machine) -> f64 {
    let compute = flops / (gemm_ceiling_gflops(m) * 1e9 * eff);
    let memory = bytes / (m.bandwidth_gbps * 1e9 * bw_eff);
    compute.max(memory)
}

/// Fixed cost of one kernel on the CPU (buffer checks, rayon's fork and join), in seconds.
const LAUNCH_SECS: f64 = 5e-6;

/// Fixed cost of each product of a (batched) GEMM call: setting up, packing buffers, edges
/// (64 products of 128×128 by depth 1 took 0.55 ms).
const GEMM_CALL_SECS: f64 = 8e-6;

/// The share of the copy bandwidth a CSR, CSC or COO product reaches.
const GATHER_BANDWIDTH: f64 = 0.35;

/// The compute efficiency of the CPU's sparse product kernel for a stored layout (as
/// [`format_efficiency`] for the format it stores).
fn layout_efficiency(l: tdsl_loop::SparseLayout) -> f64 {
    use efficiency::*;
    use tdsl_loop::SparseLayout as L;
    match l {
        L::Bsr { br, bc } if br.min(bc) as u64 >= BSR_LARGE_BLOCK => BSR_LARGE,
        L::Bsr { br, bc } if br.min(bc) as u64 >= BSR_MEDIUM_BLOCK => BSR_MEDIUM,
        L::Bsr { .. } => BSR_SMALL,
        L::TwoFour { .. } => TWO_FOUR,
        L::Csr | L::Csc => CSR,
        L::Coo => COO,
    }
}

/// Predicted seconds of one kernel of a plan on the CPU `m` with `threads` threads: its
/// generated loops by their cycles ([`tdsl_loop::stats::op_cycles`]; loops under a parallel
/// loop spread over the threads), its GEMM calls at [`efficiency::DENSE_GEMM`] of the GEMM
/// ceiling, its sparse products at their layout's efficiency; the sum, or the compulsory bytes
/// over the bandwidth if that is longer; plus a fixed launch cost. `bench` prints it beside
/// the measured time and bench/predict.py checks it.
pub fn kernel_secs(s: &tdsl_loop::stats::KernelStats, m: &Machine, threads: usize) -> f64 {
    let cores = m.cores.max(1);
    let t = threads.clamp(1, cores) as f64;
    let hz = m.clock_ghz * 1e9;
    let ceiling = gemm_ceiling_gflops(m) * 1e9 * t / cores as f64;
    let loops = s.loop_cycles_parallel / (hz * t) + s.loop_cycles_serial / hz;
    // A product narrower than a micro-kernel tile leaves lanes and registers idle (measured:
    // 4096² by 8 columns at about a fifth of the peak).
    let gemm: f64 = s
        .gemm
        .iter()
        .map(|&(f, narrow, products)| {
            let eff = efficiency::DENSE_GEMM * (narrow as f64 / 32.0).min(1.0);
            f as f64 / (ceiling * eff.max(1e-3)) + products as f64 * GEMM_CALL_SECS / t
        })
        .sum();
    // A 2:4 product with a narrow dense side (2 to 31 columns) runs the permute kernel, which
    // keeps lanes idle as a narrow GEMM does (measured: 4096² by 8 columns at about a fifth of
    // the peak); one column is a matrix-vector product, bound by memory.
    let narrow = |l: tdsl_loop::SparseLayout, free: u64| match l {
        tdsl_loop::SparseLayout::TwoFour { .. } if free >= 2 => {
            (free as f64 / 32.0).clamp(0.4, 1.0)
        }
        _ => 1.0,
    };
    let sparse: f64 = s
        .sparse_flops
        .iter()
        .map(|&(l, f, free)| f as f64 / (ceiling * layout_efficiency(l) * narrow(l, free)))
        .sum();
    // Index-chasing formats gather the dense operand row by row: a CSR product reaches about
    // a third of the copy bandwidth (bench/RESULTS.md, sparse kernels).
    let gathers = s.sparse_flops.iter().any(|(l, _, _)| {
        matches!(
            l,
            tdsl_loop::SparseLayout::Csr
                | tdsl_loop::SparseLayout::Csc
                | tdsl_loop::SparseLayout::Coo
        )
    });
    let bw = m.bandwidth_gbps * 1e9 * if gathers { GATHER_BANDWIDTH } else { 1.0 };
    let memory = s.bytes() as f64 / bw;
    LAUNCH_SECS + (loops + gemm + sparse).max(memory)
}

/// Which of the two ways to run a sparse product is predicted faster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Sparse,
    Dense,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Sparse => "sparse",
            Verdict::Dense => "dense",
        }
    }
}

/// One sparse-dense product (`plan::sparse::sparse_product`): what runs on the stored entries,
/// its dense equivalent, and both predicted times.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseOpCost {
    pub node: NodeId,
    /// The stored format of the sparse operand, as written (`bsr(32, 32)`).
    pub format: String,
    pub stored: Stored,
    /// Stored values over the sparse operand's elements.
    pub density: f64,
    pub flops: u128,
    pub bytes: u128,
    pub dense_flops: u128,
    pub dense_bytes: u128,
    pub sparse_secs: f64,
    pub dense_secs: f64,
    /// The density at which both predictions are equal, for this format and shape: sparse is
    /// faster below it. `None` if sparse is slower even with nothing stored; above 1 if it is
    /// faster even fully stored.
    pub break_even: Option<f64>,
    /// Whether the density was fixed by the format (2:4) rather than chosen.
    pub fixed_density: bool,
}

impl SparseOpCost {
    pub fn verdict(&self) -> Verdict {
        if self.sparse_secs < self.dense_secs {
            Verdict::Sparse
        } else {
            Verdict::Dense
        }
    }
    /// How many times faster the winner is predicted to be.
    pub fn speedup(&self) -> f64 {
        let (a, b) = (self.sparse_secs, self.dense_secs);
        if a <= 0.0 || b <= 0.0 {
            1.0
        } else {
            a.max(b) / a.min(b)
        }
    }
}

/// Costs einsum node `id`, which runs as the sparse product `sp`, on machine `m`.
pub fn sparse_op_cost(
    program: &Program,
    id: NodeId,
    sp: &SparseProduct,
    stored_of: &[Option<Stored>],
    m: &Machine,
) -> Option<SparseOpCost> {
    let NodeKind::Einsum { operands, spec } = &program.node(id).kind else {
        return None;
    };
    let s_node = resolve(program, operands[sp.sparse]);
    let d_node = resolve(program, operands[1 - sp.sparse]);
    let s_ty = &program.node(s_node).ty;
    let s = stored_of.get(s_node.idx()).copied().flatten()?;
    let n_s = s_ty.shape.n_elems()?.max(1);
    let n: u128 = sp
        .dense_free
        .iter()
        .map(|&l| spec.labels[l].1 as u128)
        .product();
    let (path, ..) = einsum_path(program, id)?;
    let other = bytes_of(&program.node(d_node).ty) + bytes_of(&program.node(id).ty);
    let flops = 2 * s.values as u128 * n;
    let bytes = s.bytes as u128 + other;
    let dense_flops = path.opt_flops;
    let dense_bytes = bytes_of(s_ty) + other;
    let d_ty = &program.node(d_node).ty;
    let ops = Operands::of(&[s_ty.dtype, d_ty.dtype]);
    let eff = product_efficiency(s_ty.format, ops, m);
    let bw_eff = product_bandwidth(s_ty.format, ops, m, n);
    let sparse_secs = predict_product_secs(flops as f64, bytes as f64, (eff, bw_eff), m);
    let dense_secs = predict_product_secs(
        dense_flops as f64,
        dense_bytes as f64,
        (
            product_efficiency(Format::Dense, ops, m),
            product_bandwidth(Format::Dense, ops, m, n),
        ),
        m,
    );
    // t_sparse(ρ) = max(a1·ρ, a2·ρ + b2) is increasing in ρ; it equals t_dense where the
    // larger of the two terms does.
    let full = stored_count(s_ty, n_s, true);
    let fixed = (full.bytes as f64 - full.values as f64 * per_value_bytes(s_ty)).max(0.0);
    let a1 = 2.0 * n_s as f64 * n as f64 / (gemm_ceiling_gflops(m) * 1e9 * eff);
    let bw = m.bandwidth_gbps * 1e9 * bw_eff;
    let a2 = n_s as f64 * per_value_bytes(s_ty) / bw;
    let b2 = (fixed + other as f64) / bw;
    let rho = (dense_secs / a1).min((dense_secs - b2) / a2);
    Some(SparseOpCost {
        node: id,
        format: format_name(s_ty.format, &s_ty.shape),
        stored: s,
        density: s.values as f64 / n_s as f64,
        flops,
        bytes,
        dense_flops,
        dense_bytes,
        sparse_secs,
        dense_secs,
        break_even: (rho > 0.0).then_some(rho),
        fixed_density: matches!(s_ty.format, Format::TwoFour { .. }),
    })
}

/// Bytes per stored value: the value and the indices that grow with it.
fn per_value_bytes(ty: &TensorType) -> f64 {
    let esz = ty.dtype.size_bytes() as f64;
    match ty.format {
        Format::Dense => esz,
        Format::TwoFour { .. } => esz + 0.25,
        Format::Coo => esz + 4.0 * ty.shape.rank() as f64,
        Format::Csr | Format::Csc => esz + 4.0,
        Format::Bsr { rows, cols } => esz + 4.0 / (rows * cols).max(1) as f64,
    }
}

/// The contraction path of one einsum node, with its report.
#[derive(Debug, Clone)]
pub struct EinsumPath {
    pub node: NodeId,
    pub path: ContractionPath,
    /// numpy `einsum_path`-style text.
    pub report: String,
}

/// The cost of one assignment.
#[derive(Debug, Clone)]
pub struct StatementCost {
    pub name: String,
    pub ty: TensorType,
    /// FLOPs counted by stored entries (equal to `dense_flops` when nothing is sparse).
    pub flops: u128,
    pub dense_flops: u128,
    pub bytes_read: u128,
    pub bytes_written: u128,
    /// Largest value materialised inside the statement (not counting its result), in bytes.
    pub largest_intermediate_bytes: u128,
    /// Paths of einsums with 3 or more operands.
    pub paths: Vec<EinsumPath>,
    /// True if a sparse operand's stored entries had to be assumed (no data to count from).
    pub density_assumed: bool,
    /// Every sparse-dense product in the statement, with its predictions.
    pub sparse_ops: Vec<SparseOpCost>,
}

impl StatementCost {
    pub fn bytes(&self) -> u128 {
        self.bytes_read + self.bytes_written
    }
    /// FLOPs per byte moved.
    pub fn intensity(&self) -> f64 {
        if self.bytes() == 0 {
            0.0
        } else {
            self.flops as f64 / self.bytes() as f64
        }
    }
}

/// Costs of every assignment and their sum.
#[derive(Debug, Clone)]
pub struct ProgramCost {
    pub statements: Vec<StatementCost>,
    /// The machine the sparse products' times are predicted for.
    pub machine: Machine,
}

impl ProgramCost {
    pub fn total_flops(&self) -> u128 {
        self.statements.iter().map(|s| s.flops).sum()
    }
    pub fn total_dense_flops(&self) -> u128 {
        self.statements.iter().map(|s| s.dense_flops).sum()
    }
    pub fn total_bytes(&self) -> u128 {
        self.statements.iter().map(|s| s.bytes()).sum()
    }
}

fn bytes_of(ty: &TensorType) -> u128 {
    ty.shape.n_elems().unwrap_or(u64::MAX) as u128 * ty.dtype.size_bytes() as u128
}

/// The path an einsum node is executed along (also for 1 and 2 operands: one step).
pub fn einsum_path(
    program: &Program,
    node: NodeId,
) -> Option<(ContractionPath, Vec<Vec<usize>>, Vec<usize>)> {
    let NodeKind::Einsum { spec, .. } = &program.node(node).kind else {
        return None;
    };
    let inputs: Vec<Vec<usize>> = (0..spec.operands.len())
        .map(|k| spec.operand_labels(k))
        .collect();
    let output = spec.output_labels();
    let extents: Vec<u64> = spec.labels.iter().map(|l| l.1).collect();
    let path = layout_aware_path(&inputs, &output, &extents);
    Some((path, inputs, output))
}

/// What one element of a relayout copy (a strided read and a write, cache lines half used) is
/// worth in FLOPs of a GEMM on the same machine: at ~400 GFLOP/s against a ~20 GB/s transposing
/// copy of 8-byte round trips, about 150; 100 keeps the FLOP count the first concern.
const RELAYOUT_FLOPS: u128 = 100;

/// The fewest-FLOP contraction order of three operands, unless another order within 10% of its
/// FLOPs costs less once its relayout copies are counted ([`relayout_elems`], [`RELAYOUT_FLOPS`]
/// per element): a
/// bilinear form `b i, i j k, b k -> b j` ties on FLOPs between contracting `x` with `z` first
/// (whose second GEMM needs `w` as `[j, (i k)]`, a copy of all of `w`) and `x` with `w` first
/// (`w` read in place as `[i, (j k)]`, numpy's order); the second is the faster one. Other
/// operand counts keep [`contraction_path`].
pub fn layout_aware_path(
    inputs: &[Vec<usize>],
    output: &[usize],
    extents: &[u64],
) -> ContractionPath {
    let best = contraction_path(inputs, output, extents);
    let repeated = |l: &Vec<usize>| l.iter().collect::<BTreeSet<_>>().len() != l.len();
    if inputs.len() != 3
        || best.overflow
        || inputs.iter().any(repeated)
        || repeated(&output.to_vec())
    {
        return best;
    }
    let score = |p: &ContractionPath| {
        p.opt_flops
            .saturating_add(RELAYOUT_FLOPS.saturating_mul(relayout_elems(p, inputs, extents)))
    };
    let mut chosen = (score(&best), best.clone());
    for first in [vec![0, 1], vec![0, 2], vec![1, 2]] {
        let Some(p) =
            crate::plan::order::evaluate_path(inputs, output, extents, &[first, vec![0, 1]])
        else {
            continue;
        };
        let s = score(&p);
        // Never more than 10% over the fewest FLOPs: copies matter only near a tie.
        let near = p.opt_flops.saturating_mul(10) <= best.opt_flops.saturating_mul(11);
        if near && s < chosen.0 {
            chosen = (s, p);
        }
    }
    let (_, mut path) = chosen;
    if path.steps != best.steps {
        path.for_layout = true;
        path.optimal = best.optimal;
    }
    path
}

/// The label groups of a pairwise contraction `a, b -> out` as a batched GEMM (labels of extent
/// 1 dropped): batch (in both and kept) and m (only in `a`) and n (only in `b`), each in
/// `out`'s order, and k (in both and summed) in `a`'s order. `None` when a label is summed in
/// only one operand (that needs a pass of its own: not a GEMM).
pub struct GemmGroups {
    pub batch: Vec<usize>,
    pub m: Vec<usize>,
    pub n: Vec<usize>,
    pub k: Vec<usize>,
}

impl GemmGroups {
    pub fn of(a: &[usize], b: &[usize], out: &[usize], ext: &[u64]) -> Option<GemmGroups> {
        let (la, lb, lo): (BTreeSet<usize>, BTreeSet<usize>, BTreeSet<usize>) = (
            a.iter().copied().collect(),
            b.iter().copied().collect(),
            out.iter().copied().collect(),
        );
        if la
            .iter()
            .chain(lb.iter())
            .any(|l| !(lo.contains(l) || (la.contains(l) && lb.contains(l))))
        {
            return None;
        }
        let group = |from: &[usize], keep: &dyn Fn(&usize) -> bool| -> Vec<usize> {
            from.iter()
                .copied()
                .filter(|l| keep(l) && ext.get(*l).copied().unwrap_or(1) > 1)
                .collect()
        };
        Some(GemmGroups {
            batch: group(out, &|l| la.contains(l) && lb.contains(l)),
            m: group(out, &|l| la.contains(l) && !lb.contains(l)),
            n: group(out, &|l| lb.contains(l) && !la.contains(l)),
            k: group(a, &|l| lb.contains(l) && !lo.contains(l)),
        })
    }
}

/// The fewest rows (or columns) a GEMM keeps when [`GemmGroups::rebatch`] moves labels into
/// its batch.
const REBATCH_MIN: u64 = 32;

impl GemmGroups {
    /// Moves one label of `m` into the batch when without it `m` flattens to one stride in
    /// both `A` and `C` where it did not (`a_flat`, `c_flat`), and likewise one of `n` for `B`
    /// and `C`, so a product needs no copy into another layout: grouped-query attention's
    /// `b hk g s t, b t hk d -> b s hk g d` has rows `(s, g)` that neither the probabilities
    /// `[b hk g s t]` nor the output `[b s hk g d]` lay out as one axis, and runs batched over
    /// `g` instead of copying both. The other operand's stride for the moved label is 0 (it
    /// does not have it). Taken only while at least [`REBATCH_MIN`] rows (columns) remain, the
    /// label leaving the most.
    pub fn rebatch(
        &mut self,
        ext: &[u64],
        a_flat: &dyn Fn(&[usize]) -> bool,
        b_flat: &dyn Fn(&[usize]) -> bool,
        c_flat: &dyn Fn(&[usize]) -> bool,
    ) {
        let size = |g: &[usize]| g.iter().map(|&l| ext[l]).product::<u64>();
        for (rows, flat) in [(true, a_flat), (false, b_flat)] {
            let group = if rows { &self.m } else { &self.n };
            if flat(group) && c_flat(group) {
                continue;
            }
            let best = (0..group.len())
                .map(|i| {
                    let mut rest = group.clone();
                    let l = rest.remove(i);
                    (rest, l)
                })
                .filter(|(rest, _)| size(rest) >= REBATCH_MIN && flat(rest) && c_flat(rest))
                .max_by_key(|(rest, _)| size(rest));
            if let Some((rest, l)) = best {
                self.batch.push(l);
                if rows {
                    self.m = rest;
                } else {
                    self.n = rest;
                }
            }
        }
    }
}

/// Elements the planner copies into another layout along `path` (`plan::lower::einsum`'s
/// `gemm_step`): for each pairwise step it would run as a GEMM, each operand whose m (or n) and k
/// labels do not each flatten to one stride in its row-major layout, and a result whose m and n
/// do not. Inputs are row-major in their label order, intermediates in their `result_labels`.
fn relayout_elems(path: &ContractionPath, inputs: &[Vec<usize>], extents: &[u64]) -> u128 {
    let ext = |l: usize| extents.get(l).copied().unwrap_or(1);
    let elems = |ls: &[usize]| ls.iter().map(|&l| ext(l) as u128).product::<u128>();
    // Whether `g` (in that order, size-1 labels dropped) is one stride of row-major `ls`.
    let flat = |ls: &[usize], g: &[usize]| {
        let pos: Vec<usize> = g
            .iter()
            .filter(|&&l| ext(l) > 1)
            .filter_map(|l| ls.iter().position(|x| x == l))
            .collect();
        pos.windows(2)
            .all(|w| w[1] > w[0] && ls[w[0] + 1..w[1]].iter().all(|&l| ext(l) == 1))
    };
    let mut ops: Vec<Vec<usize>> = inputs.to_vec();
    let mut total = 0u128;
    for step in &path.steps {
        let taken: Vec<Vec<usize>> = step
            .operands
            .iter()
            .filter_map(|&i| ops.get(i).cloned())
            .collect();
        if let [a, b] = taken.as_slice() {
            let out = &step.result_labels;
            // Only steps the planner runs as a GEMM (`gemm_step`'s size rule): smaller ones
            // are loop nests, which take any layout.
            let gemm = |g: &GemmGroups| {
                let (m, n, k, b) = (elems(&g.m), elems(&g.n), elems(&g.k), elems(&g.batch));
                m > 1 && n > 1 && m * n * k * b >= 16 * 16 * 16 && m * n * k >= 8 * 8 * 8
            };
            let groups = GemmGroups::of(a, b, out, extents).map(|mut g| {
                g.rebatch(extents, &|x| flat(a, x), &|x| flat(b, x), &|x| flat(out, x));
                g
            });
            if let Some(GemmGroups { m, n, k, .. }) = groups.filter(gemm) {
                if !(flat(a, &m) && flat(a, &k)) {
                    total += elems(a);
                }
                if !(flat(b, &k) && flat(b, &n)) {
                    total += elems(b);
                }
                if !(flat(out, &m) && flat(out, &n)) {
                    total += elems(out);
                }
            }
        }
        let mut pos = step.operands.clone();
        pos.sort_unstable();
        for &i in pos.iter().rev() {
            if i < ops.len() {
                ops.remove(i);
            }
        }
        ops.push(step.result_labels.clone());
    }
    total
}

/// What [`program_cost_with`] needs besides the program.
#[derive(Debug, Clone)]
pub struct CostInputs<'a> {
    /// `stored[i]` describes input i (see [`stored`]).
    pub stored: &'a [Stored],
    /// Data of input i where there is some: `sparsify` results are counted from it.
    pub data: &'a [Option<&'a Tensor>],
    /// The machine predicted times are for.
    pub machine: Machine,
}

/// Costs every assignment, predicting for [`NOMINAL_MACHINE`] and counting `sparsify` results
/// without data. `stored[i]` describes input i (see [`stored`]).
pub fn program_cost(program: &Program, stored_inputs: &[Stored]) -> ProgramCost {
    program_cost_with(
        program,
        &CostInputs {
            stored: stored_inputs,
            data: &[],
            machine: NOMINAL_MACHINE,
        },
    )
}

/// Costs every assignment.
pub fn program_cost_with(program: &Program, inputs: &CostInputs) -> ProgramCost {
    let stored_of = stored_nodes(program, inputs.stored, inputs.data);
    let machine = inputs.machine;
    let mut statements = Vec::new();
    for (a, assign) in program.assigns.iter().enumerate() {
        let nodes = program.statement_nodes(a);
        let root = assign.node;
        let mut flops = 0u128;
        let mut dense_flops = 0u128;
        let mut bytes_read = 0u128;
        let mut largest = 0u128;
        let mut paths = Vec::new();
        let mut density_assumed = false;
        let mut sparse_ops = Vec::new();
        let mut read: Vec<(bool, usize)> = Vec::new();
        // What reading a name costs: its stored bytes if it is stored sparse.
        let read_bytes = |id: NodeId| -> u128 {
            match stored_of[id.idx()] {
                Some(s) => s.bytes as u128,
                None => bytes_of(&program.node(id).ty),
            }
        };
        for &id in &nodes {
            let node = program.node(id);
            let out_elems = node.ty.shape.n_elems().unwrap_or(u64::MAX) as u128;
            match &node.kind {
                NodeKind::Input(i) => {
                    if !read.contains(&(true, *i)) {
                        read.push((true, *i));
                        bytes_read += read_bytes(id);
                    }
                }
                NodeKind::Var(v) => {
                    if !read.contains(&(false, *v)) {
                        read.push((false, *v));
                        bytes_read += read_bytes(id);
                    }
                }
                NodeKind::Scalar(_)
                | NodeKind::Cast(_)
                | NodeKind::Dense(_)
                | NodeKind::AxisIndex { .. }
                | NodeKind::Concat { .. }
                | NodeKind::Slice { .. }
                | NodeKind::Sparsify { .. } => {}
                NodeKind::Unary(..) | NodeKind::Binary(..) | NodeKind::Where(..) => {
                    flops += out_elems;
                    dense_flops += out_elems;
                }
                NodeKind::Pattern { reduce, x, .. } => {
                    if reduce.is_some() {
                        let dense = program.node(*x).ty.shape.n_elems().unwrap_or(u64::MAX) as u128;
                        dense_flops += dense;
                        flops += dense;
                    }
                }
                NodeKind::Einsum { operands, spec } => {
                    if let Some((path, inputs, output)) = einsum_path(program, id) {
                        dense_flops += path.opt_flops;
                        let op = sparse_product(program, id)
                            .and_then(|sp| sparse_op_cost(program, id, &sp, &stored_of, &machine));
                        match op {
                            Some(op) => {
                                flops += op.flops;
                                density_assumed |= !op.stored.measured;
                                sparse_ops.push(op);
                            }
                            None => flops += path.opt_flops,
                        }
                        let esz = node.ty.dtype.size_bytes() as u128;
                        largest = largest.max(path.largest_intermediate_elems * esz);
                        if operands.len() >= 3 {
                            let names: Vec<&str> =
                                spec.labels.iter().map(|l| l.0.as_str()).collect();
                            let extents: Vec<u64> = spec.labels.iter().map(|l| l.1).collect();
                            let report = format_path(&path, &inputs, &output, &names, &extents);
                            paths.push(EinsumPath {
                                node: id,
                                path,
                                report,
                            });
                        }
                    }
                }
            }
            let materialised = !matches!(
                node.kind,
                NodeKind::Input(_) | NodeKind::Var(_) | NodeKind::Scalar(_)
            );
            if id != root && materialised {
                largest = largest.max(match stored_of[id.idx()] {
                    Some(s) if matches!(node.kind, NodeKind::Sparsify { .. }) => s.bytes as u128,
                    _ => bytes_of(&node.ty),
                });
            }
        }
        statements.push(StatementCost {
            name: assign.name.clone(),
            ty: program.node(root).ty.clone(),
            flops,
            dense_flops,
            bytes_read,
            bytes_written: match stored_of[root.idx()] {
                Some(s) if matches!(program.node(root).kind, NodeKind::Sparsify { .. }) => {
                    s.bytes as u128
                }
                _ => bytes_of(&program.node(root).ty),
            },
            largest_intermediate_bytes: largest,
            paths,
            density_assumed,
            sparse_ops,
        });
    }
    ProgramCost {
        statements,
        machine,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{Axis, Shape};
    use crate::dtype::DType;

    fn ty(format: Format) -> TensorType {
        TensorType {
            dtype: DType::F32,
            shape: Shape(vec![Axis::named("o", 64), Axis::named("i", 128)]),
            format,
        }
    }

    /// The GPU prices a dense f64 product on the f64 template only when every operand is f64;
    /// f64 with f32 runs the generic kernels, as `tdsl_cuda::tensor` maps it.
    #[test]
    fn gpu_prices_f64_products_by_the_kernel_their_operand_types_take() {
        let gpu = &NOMINAL_GPU;
        let eff = |types: &[DType]| product_efficiency(Format::Dense, Operands::of(types), gpu);
        assert_eq!(Operands::of(&[DType::F64, DType::F64]), Operands::Double);
        assert_eq!(eff(&[DType::F64, DType::F64]), gpu_efficiency::SIMT_DOUBLE);
        assert_eq!(
            Operands::of(&[DType::F64, DType::F32]),
            Operands::MixedDouble
        );
        assert_eq!(eff(&[DType::F64, DType::F32]), gpu_efficiency::GENERIC);
        assert_eq!(eff(&[DType::F32, DType::BF16]), gpu_efficiency::SIMT);
        assert_eq!(eff(&[DType::BF16, DType::BF16]), gpu_efficiency::DENSE);
    }

    #[test]
    fn three_operand_paths_count_relayout_copies() {
        // b i, i j k, b k -> b j (labels b=0 i=1 j=2 k=3): contracting x with z first is 1M
        // FLOPs cheaper but makes the second GEMM copy all of w into [j, (i k)]; x with w first
        // reads w in place as [i, (j k)].
        let (b, i, j, k) = (0, 1, 2, 3);
        let inputs = vec![vec![b, i], vec![i, j, k], vec![b, k]];
        let ext = [64, 128, 128, 128];
        let fewest = contraction_path(&inputs, &[b, j], &ext);
        assert_eq!(fewest.linear_path(), vec![vec![0, 2], vec![0, 1]]);
        assert_eq!(relayout_elems(&fewest, &inputs, &ext), 128 * 128 * 128);
        let chosen = layout_aware_path(&inputs, &[b, j], &ext);
        assert_eq!(chosen.linear_path(), vec![vec![0, 1], vec![0, 1]]);
        assert_eq!(relayout_elems(&chosen, &inputs, &ext), 0);
        assert!(chosen.for_layout && chosen.opt_flops > fewest.opt_flops);
        // A matrix chain whose fewest-FLOP order needs no copy keeps it.
        let chain = vec![vec![0, 1], vec![1, 2], vec![2, 3]];
        let ext = [256, 32, 256, 8];
        let kept = layout_aware_path(&chain, &[0, 3], &ext);
        assert_eq!(kept, contraction_path(&chain, &[0, 3], &ext));
        assert!(!kept.for_layout);
    }

    #[test]
    fn density_fixes_the_stored_count() {
        let bsr = ty(Format::Bsr { rows: 16, cols: 16 });
        // 32 blocks; round(0.1 · 32) = 3 kept.
        let s = sparsify_stored(&bsr, Select::Density(0.1), None);
        assert_eq!((s.values, s.measured), (3 * 256, true));
        assert_eq!(s.bytes, 3 * 256 * 4 + 3 * 4 + (64 / 16 + 1) * 4);
        let csr = sparsify_stored(&ty(Format::Csr), Select::Density(0.25), None);
        assert_eq!(csr.values, 2048);
        assert_eq!(csr.bytes, 2048 * 8 + 65 * 4);
        // Without data a threshold keeps everything, and says it assumed so.
        let t = sparsify_stored(&ty(Format::Csr), Select::Threshold(0.5), None);
        assert_eq!((t.values, t.measured), (64 * 128, false));
    }

    #[test]
    fn threshold_counts_from_data() {
        let data: Vec<f64> = (0..64 * 128).map(|k| (k % 4) as f64).collect();
        let t = Tensor::from_f64(DType::F32, vec![64, 128], &data);
        // |v| > 1.5 keeps the 2s and 3s: half.
        let s = sparsify_stored(&ty(Format::Csr), Select::Threshold(1.5), Some(&t));
        assert_eq!((s.values, s.measured), (64 * 128 / 2, true));
    }

    #[test]
    fn break_even_is_where_the_predictions_meet() {
        // The prediction of the sparse kernel at the break-even density equals the dense one.
        let m = NOMINAL_MACHINE;
        for format in [
            Format::Csr,
            Format::Bsr { rows: 32, cols: 32 },
            Format::Bsr { rows: 4, cols: 4 },
            Format::Coo,
        ] {
            let t = ty(format);
            let n = 256u128;
            let (ns, other) = (64 * 128u64, (128 * 256 + 64 * 256) * 4);
            let dense = predict_secs(
                (2 * 64 * 128 * n) as f64,
                (ns * 4 + other) as f64,
                efficiency::DENSE_GEMM,
                &m,
            );
            let eff = format_efficiency(format);
            let full = stored_count(&t, ns, true);
            let fixed = full.bytes as f64 - ns as f64 * per_value_bytes(&t);
            let at = |rho: f64| {
                let values = rho * ns as f64;
                predict_secs(
                    2.0 * values * n as f64,
                    values * per_value_bytes(&t) + fixed + other as f64,
                    eff,
                    &m,
                )
            };
            let a1 = 2.0 * ns as f64 * n as f64 / (gemm_ceiling_gflops(&m) * 1e9 * eff);
            let bw = m.bandwidth_gbps * 1e9;
            let rho = (dense / a1).min(
                (dense - (fixed + other as f64) / bw) / (ns as f64 * per_value_bytes(&t) / bw),
            );
            assert!((at(rho) - dense).abs() <= 1e-9 * dense, "{format:?}");
            assert!(at(rho * 0.9) < dense && at(rho * 1.1) > dense, "{format:?}");
        }
    }

    #[test]
    fn efficiencies_rank_the_kernels() {
        use efficiency::*;
        const {
            assert!(DENSE_GEMM > BSR_LARGE && BSR_LARGE > BSR_MEDIUM && BSR_MEDIUM > BSR_SMALL);
            assert!(BSR_LARGE > TWO_FOUR && TWO_FOUR > CSR && CSR > COO);
        }
        assert_eq!(
            format_efficiency(Format::Bsr { rows: 16, cols: 32 }),
            BSR_LARGE
        );
        assert_eq!(
            format_efficiency(Format::Bsr { rows: 8, cols: 32 }),
            BSR_MEDIUM
        );
        // An AVX-512 machine's peak counts 64 FLOPs per cycle, and the kernels use them.
        let m = Machine {
            flops_per_cycle: 64.0,
            peak_gflops: 1536.0,
            ..NOMINAL_MACHINE
        };
        assert_eq!(gemm_ceiling_gflops(&m), 1536.0);
    }
}
