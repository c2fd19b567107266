//! FLOPs, bytes and arithmetic intensity of every statement; the numbers `cost`, `check` and the
//! REPL print.
//!
//! Conventions (spec/language.md, "Cost"): an einsum step follows opt_einsum's count
//! (`order::flop_count`), multi-operand einsums are costed along the contraction order that
//! `order::contraction_path` chooses (the one later executed), a reduce costs one FLOP per input
//! element, an elementwise op one per output element, and rearrange, repeat and cast cost none.
//! Sparse inputs count by their stored entries: an einsum reading a sparse input is scaled by its
//! stored fraction, and its bytes are its stored values plus indices. Counts are u128.

use super::order::{contraction_path, format_path, ContractionPath};
use crate::check::{Format, NodeId, NodeKind, Program, TensorType};
use crate::tensor::Tensor;

/// What is known about the stored entries of one input.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stored {
    /// Values the format stores (nonzeros, or whole blocks for BSR, or half for 2:4).
    pub values: u64,
    /// Bytes of values plus indices and metadata.
    pub bytes: u64,
    /// Whether `values` was counted from data (false: assumed fully dense).
    pub measured: bool,
}

/// Stored entries of a tensor of type `ty`, counted from its data when there is any.
/// Indices are 32-bit; 2:4 metadata is 2 bits per kept value.
pub fn stored(ty: &TensorType, data: Option<&Tensor>) -> Stored {
    let n = ty.shape.n_elems().unwrap_or(u64::MAX);
    let esz = ty.dtype.size_bytes();
    let ext = ty.shape.extents();
    let values_f64 = data.map(|t| t.to_f64());
    let nnz = values_f64
        .as_ref()
        .map(|v| v.iter().filter(|x| **x != 0.0).count() as u64);
    let measured = data.is_some();
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
        Format::Coo => {
            let nz = nnz.unwrap_or(n);
            Stored {
                values: nz,
                bytes: sat(nz, esz + 4 * ext.len() as u64),
                measured,
            }
        }
        Format::Csr | Format::Csc => {
            let nz = nnz.unwrap_or(n);
            let major = if ty.format == Format::Csr {
                ext[0]
            } else {
                ext[1]
            };
            Stored {
                values: nz,
                bytes: sat(nz, esz + 4).saturating_add(sat(major + 1, 4)),
                measured,
            }
        }
        Format::Bsr { rows, cols } => {
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
            let values = sat(blocks, rows * cols);
            Stored {
                values,
                bytes: sat(values, esz)
                    .saturating_add(sat(blocks, 4))
                    .saturating_add(sat(nbr + 1, 4)),
                measured,
            }
        }
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
    /// True if a sparse input's stored fraction had to be assumed (no data to count from).
    pub density_assumed: bool,
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
    Some((contraction_path(&inputs, &output, &extents), inputs, output))
}

/// Costs every assignment. `stored[i]` describes input i (see [`stored`]).
pub fn program_cost(program: &Program, stored_inputs: &[Stored]) -> ProgramCost {
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
        let mut read: Vec<(bool, usize)> = Vec::new();
        // The stored fraction of a node that reads a sparse input directly.
        let density = |id: NodeId| -> Option<(f64, bool)> {
            match program.node(id).kind {
                NodeKind::Input(i) if program.inputs[i].ty.format.is_sparse() => {
                    let s = stored_inputs.get(i)?;
                    let n = program.inputs[i].ty.shape.n_elems()?.max(1);
                    Some((s.values as f64 / n as f64, !s.measured))
                }
                _ => None,
            }
        };
        for &id in &nodes {
            let node = program.node(id);
            let out_elems = node.ty.shape.n_elems().unwrap_or(u64::MAX) as u128;
            match &node.kind {
                NodeKind::Input(i) => {
                    if !read.contains(&(true, *i)) {
                        read.push((true, *i));
                        bytes_read += match stored_inputs.get(*i) {
                            Some(s) => s.bytes as u128,
                            None => bytes_of(&node.ty),
                        };
                    }
                }
                NodeKind::Var(v) => {
                    if !read.contains(&(false, *v)) {
                        read.push((false, *v));
                        bytes_read += bytes_of(&node.ty);
                    }
                }
                NodeKind::Scalar(_)
                | NodeKind::Cast(_)
                | NodeKind::Dense(_)
                | NodeKind::Sparsify { .. } => {}
                NodeKind::Unary(..) | NodeKind::Binary(..) => {
                    flops += out_elems;
                    dense_flops += out_elems;
                }
                NodeKind::Pattern { reduce, x, .. } => {
                    if reduce.is_some() {
                        let dense = program.node(*x).ty.shape.n_elems().unwrap_or(u64::MAX) as u128;
                        dense_flops += dense;
                        flops += match density(*x) {
                            Some((d, assumed)) => {
                                density_assumed |= assumed;
                                (dense as f64 * d).round() as u128
                            }
                            None => dense,
                        };
                    }
                }
                NodeKind::Einsum { operands, spec } => {
                    if let Some((path, inputs, output)) = einsum_path(program, id) {
                        dense_flops += path.opt_flops;
                        let mut scale = 1.0;
                        for &o in operands {
                            if let Some((d, assumed)) = density(o) {
                                scale *= d;
                                density_assumed |= assumed;
                            }
                        }
                        flops += if scale == 1.0 {
                            path.opt_flops
                        } else {
                            (path.opt_flops as f64 * scale).round() as u128
                        };
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
                largest = largest.max(bytes_of(&node.ty));
            }
        }
        statements.push(StatementCost {
            name: assign.name.clone(),
            ty: program.node(root).ty.clone(),
            flops,
            dense_flops,
            bytes_read,
            bytes_written: bytes_of(&program.node(root).ty),
            largest_intermediate_bytes: largest,
            paths,
            density_assumed,
        });
    }
    ProgramCost { statements }
}
