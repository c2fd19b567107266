//! Resolves `sparsify(x, auto, …)`: the pass between checking and planning that picks, for
//! every request in `Program::auto_formats`, dense or one of its candidate formats by the
//! predicted time of the value's einsum uses (`cost::sparse_op_cost` for the sparse products a
//! candidate makes possible, the dense GEMM prediction for everything else).
//!
//! The checker leaves each request as `dense(x)`; choosing a sparse format rewrites the node to
//! `Sparsify { x, select }` with that format and refreshes the formats that flow from it (names
//! and rearrange views), so the interpreter, planner and reports all see the choice. Requests are
//! resolved in program order, each seeing the earlier choices. Ties keep dense.

use super::cost::{
    predict_product_secs, product_bandwidth, product_efficiency, sparse_op_cost, stored_nodes,
    CostInputs,
};
use super::sparse::{resolve, sparse_product};
use crate::check::{
    flow_through_rearrange, format_name, AutoChoice, Format, NodeId, NodeKind, PatternOp, Program,
};

/// Chooses the format of every `auto` request in `program`, in place.
pub fn resolve_auto(program: &mut Program, inputs: &CostInputs) {
    for r in 0..program.auto_formats.len() {
        let req = program.auto_formats[r].clone();
        // Dense keeps every value, so it is a candidate only when the request prunes nothing
        // (no `threshold=` / `density=`): the values never depend on the machine's choice
        // beyond the pruning rule of the format chosen.
        let keeps_all = req.select == crate::check::Select::All;
        let mut best = (
            Format::Dense,
            if keeps_all || req.candidates.is_empty() {
                use_secs(program, req.node, inputs)
            } else {
                f64::INFINITY
            },
        );
        let mut times = Vec::new();
        for &f in &req.candidates {
            let mut p = program.clone();
            apply(&mut p, req.node, req.x, req.select, f);
            let mut t = use_secs(&p, req.node, inputs);
            // Pruning reads x and writes the stored arrays once.
            let stored = stored_nodes(&p, inputs.stored, inputs.data)[req.node.idx()];
            let x_bytes = bytes_of(&p, req.x);
            let s_bytes = stored.map_or(0.0, |s| s.bytes as f64);
            t += (x_bytes + s_bytes) / (inputs.machine.bandwidth_gbps * 1e9);
            times.push(format!(
                "{} {}",
                format_name(f, &p.node(req.node).ty.shape),
                secs_text(t)
            ));
            if t < best.1 {
                best = (f, t);
            }
        }
        let dense_secs = use_secs(program, req.node, inputs);
        let reason = if req.candidates.is_empty() {
            "no sparse format fits this shape".to_string()
        } else if !has_einsum_use(program, req.node) {
            "no einsum uses the value".to_string()
        } else {
            format!(
                "predicted: dense {}, {}",
                secs_text(dense_secs),
                times.join(", ")
            )
        };
        let reason = if keeps_all || req.candidates.is_empty() {
            reason
        } else {
            format!("{reason}; pruning was asked for, so dense is not a candidate")
        };
        apply(program, req.node, req.x, req.select, best.0);
        program.auto_formats[r].choice = Some(AutoChoice {
            format: best.0,
            secs: best.1,
            dense_secs,
            reason,
        });
    }
}

/// Gives node `node` format `f`: `Sparsify { x, select }` for a sparse format, `Dense(x)` for
/// dense; then refreshes the formats of names and rearranges that follow it.
fn apply(p: &mut Program, node: NodeId, x: NodeId, select: crate::check::Select, f: Format) {
    let n = &mut p.nodes[node.idx()];
    n.ty.format = f;
    n.kind = if f.is_sparse() {
        n.weak = false;
        NodeKind::Sparsify { x, select }
    } else {
        NodeKind::Dense(x)
    };
    for i in node.idx() + 1..p.nodes.len() {
        let format = match &p.nodes[i].kind {
            NodeKind::Var(a) => p.node(p.assigns[*a].node).ty.format,
            NodeKind::Pattern {
                op: PatternOp::Rearrange,
                x,
                recipe,
                ..
            } => flow_through_rearrange(p.node(*x).ty.format, recipe),
            _ => continue,
        };
        p.nodes[i].ty.format = format;
    }
}

/// Nodes that hold `node`'s value: itself, names of it, and rearranges of those.
fn holders(p: &Program, node: NodeId) -> Vec<NodeId> {
    let mut out = vec![node];
    for i in node.idx() + 1..p.nodes.len() {
        let id = NodeId(i as u32);
        let r = resolve(p, id);
        let held = match &p.node(r).kind {
            NodeKind::Pattern {
                op: PatternOp::Rearrange,
                x,
                ..
            } => out.contains(&resolve(p, *x)),
            _ => false,
        };
        if out.contains(&r) || held {
            out.push(id);
        }
    }
    out
}

fn einsum_uses(p: &Program, node: NodeId) -> Vec<NodeId> {
    let held = holders(p, node);
    (0..p.nodes.len())
        .map(|i| NodeId(i as u32))
        .filter(|&id| match &p.node(id).kind {
            NodeKind::Einsum { operands, .. } => operands.iter().any(|o| held.contains(o)),
            _ => false,
        })
        .collect()
}

fn has_einsum_use(p: &Program, node: NodeId) -> bool {
    !einsum_uses(p, node).is_empty()
}

/// Predicted seconds of the einsums that use `node`'s value, as `p` stands. A dense product is
/// predicted as `cost::sparse_op_cost` predicts the dense alternative of a sparse one (on the
/// GPU, at the bandwidth its kernel reaches with that many rows of activations), so that the
/// choice agrees with `tdsl cost`'s verdict.
fn use_secs(p: &Program, node: NodeId, inputs: &CostInputs) -> f64 {
    let stored_of = stored_nodes(p, inputs.stored, inputs.data);
    let m = &inputs.machine;
    let held = holders(p, node);
    einsum_uses(p, node)
        .into_iter()
        .map(|e| {
            if let Some(op) =
                sparse_product(p, e).and_then(|sp| sparse_op_cost(p, e, &sp, &stored_of, m))
            {
                return op.sparse_secs;
            }
            let NodeKind::Einsum { operands, spec } = &p.node(e).kind else {
                return 0.0;
            };
            // The rows of activations: the output's extents that `node` does not index.
            let rows: u128 = match operands.iter().position(|o| held.contains(o)) {
                Some(i) => {
                    let own: Vec<usize> = spec.operands[i]
                        .iter()
                        .flat_map(|s| s.labels.iter().copied())
                        .collect();
                    spec.output_labels()
                        .into_iter()
                        .filter(|l| !own.contains(l))
                        .map(|l| spec.labels[l].1 as u128)
                        .product()
                }
                None => 0,
            };
            let flops = super::cost::einsum_path(p, e).map_or(0, |(path, ..)| path.opt_flops);
            let bytes: f64 = operands
                .iter()
                .map(|&o| bytes_of(p, o))
                .chain([bytes_of(p, e)])
                .sum();
            let types: Vec<_> = operands.iter().map(|&o| p.node(o).ty.dtype).collect();
            let ops = super::cost::Operands::of(&types);
            let eff = product_efficiency(crate::check::Format::Dense, ops, m);
            let bw = product_bandwidth(crate::check::Format::Dense, ops, m, rows);
            predict_product_secs(flops as f64, bytes, (eff, bw), m)
        })
        .sum()
}

fn bytes_of(p: &Program, id: NodeId) -> f64 {
    let ty = &p.node(id).ty;
    ty.shape.n_elems().unwrap_or(u64::MAX) as f64 * ty.dtype.size_bytes() as f64
}

/// `1.23 µs`, `4.5 ms`: predicted times in reports.
pub fn secs_text(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else if s >= 1e-6 {
        format!("{:.2} µs", s * 1e6)
    } else {
        format!("{:.1} ns", s * 1e9)
    }
}
