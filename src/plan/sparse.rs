//! Which values are stored sparse, and which einsums run as sparse-dense products.
//!
//! Shared by the planner (`lower.rs`) and the cost model (`cost.rs`), so that what `cost`
//! reports is what runs. A value is *stored sparse* when it is a sparse input, the result of
//! `sparsify`, or a rearrange that reuses such storage (a transposed CSR is a CSC view). An
//! einsum is a *sparse product* when it multiplies one stored-sparse matrix with one dense
//! operand along one shared label, every other label of the dense operand surviving into the
//! output: `c = S·d` or `c = d·S` (`tdsl_loop::LibCall::SpMM`). Any other use of a sparse value
//! reads its dense expansion.

use crate::check::{BinOp, Format, NodeId, NodeKind, PatternOp, Program};
use tdsl_loop::Side;

/// Follows `Var` references to the node that computes a value.
pub fn resolve(p: &Program, mut id: NodeId) -> NodeId {
    while let NodeKind::Var(a) = p.node(id).kind {
        id = p.assigns[a].node;
    }
    id
}

/// How a stored-sparse value gets its storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SparseSource {
    /// Sparse input number `i`.
    Input(usize),
    /// `sparsify(x, …)`.
    Sparsify,
    /// A rearrange of this stored-sparse node that reuses its arrays (`Format` says how).
    View(NodeId),
    /// An elementwise function of this stored-sparse node that keeps its format (`-s`,
    /// `relu(s)`, `cast(s, f16)`, `s * d`, `s / d`) or a sampled einsum (SDDMM,
    /// `check::sampled_operand`): the same `ptr`/`idx` arrays and new values, computed by a
    /// loop over the stored entries (`sparse_map_operand`).
    Map(NodeId),
}

/// Whether (and how) node `id` is stored sparse.
pub fn stored_sparse(p: &Program, id: NodeId) -> Option<SparseSource> {
    let id = resolve(p, id);
    let node = p.node(id);
    if !node.ty.format.is_sparse() {
        return None;
    }
    match &node.kind {
        NodeKind::Input(i) => Some(SparseSource::Input(*i)),
        NodeKind::Sparsify { .. } => Some(SparseSource::Sparsify),
        NodeKind::Pattern {
            op: PatternOp::Rearrange,
            x,
            ..
        } => {
            let x = resolve(p, *x);
            stored_sparse(p, x).map(|_| SparseSource::View(x))
        }
        NodeKind::Unary(..)
        | NodeKind::Cast(_)
        | NodeKind::Binary(..)
        | NodeKind::Einsum { .. } => {
            let (at, _) = sparse_map_operand(p, id)?;
            let x = resolve(p, p.operands(id)[at]);
            stored_sparse(p, x).map(|_| SparseSource::Map(x))
        }
        _ => None,
    }
}

/// For an elementwise node that the checker typed sparse (a format-keeping function of a
/// sparse operand, spec/language.md §8.2): the position of the operand whose stored entries
/// it runs over among `p.operands(id)`, and the position of the dense operand (binary only).
pub fn sparse_map_operand(p: &Program, id: NodeId) -> Option<(usize, Option<usize>)> {
    let node = p.node(id);
    if !node.ty.format.is_sparse() {
        return None;
    }
    let same = |o: NodeId| {
        let t = &p.node(resolve(p, o)).ty;
        t.format == node.ty.format && t.shape.extents() == node.ty.shape.extents()
    };
    match &node.kind {
        NodeKind::Unary(_, x) | NodeKind::Cast(x) if same(*x) => Some((0, None)),
        NodeKind::Binary(BinOp::Mul | BinOp::Div, a, _) if same(*a) => Some((0, Some(1))),
        NodeKind::Binary(BinOp::Mul, _, b) if same(*b) => Some((1, Some(0))),
        NodeKind::Einsum { operands, spec } => {
            let formats: Vec<Format> = operands.iter().map(|&o| p.node(o).ty.format).collect();
            let at = crate::check::sampled_operand(spec, &formats)?;
            same(operands[at]).then_some((at, None))
        }
        _ => None,
    }
}

/// A sparse-dense product: which operand is sparse, how the labels map onto the kernel's
/// `m × k` and `k × n` operands, and the side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SparseProduct {
    /// Position of the sparse operand among the einsum's operands (the other is dense).
    pub sparse: usize,
    /// The sparse operand's label that survives into the output.
    pub free: usize,
    /// The label the product sums over (shared with the dense operand).
    pub contracted: usize,
    /// The dense operand's other labels, in output order.
    pub dense_free: Vec<usize>,
    /// `Left`: `c[free, dense_free] = S·d`; `Right`: `c[dense_free, free] = d·S`.
    pub side: Side,
    /// Whether the stored matrix is used transposed.
    pub transposed: bool,
}

/// The sparse product einsum node `id` runs as, if it is one.
pub fn sparse_product(p: &Program, id: NodeId) -> Option<SparseProduct> {
    let NodeKind::Einsum { operands, spec } = &p.node(id).kind else {
        return None;
    };
    let [a, b] = operands.as_slice() else {
        return None;
    };
    let sparse_at = match (stored_sparse(p, *a), stored_sparse(p, *b)) {
        (Some(_), None) => 0,
        (None, Some(_)) => 1,
        _ => return None,
    };
    let s_node = p.node(resolve(p, operands[sparse_at]));
    if s_node.ty.shape.rank() != 2
        || matches!(s_node.ty.format, Format::Dense)
        || s_node.ty.shape.0.iter().any(|a| a.extent == 0)
    {
        return None;
    }
    // The sparse operand: two slots of one label each, distinct, not broadcast.
    let s_slots = &spec.operands[sparse_at];
    let [p0, p1] = s_slots.as_slice() else {
        return None;
    };
    let (&[l0], &[l1]) = (p0.labels.as_slice(), p1.labels.as_slice()) else {
        return None;
    };
    if p0.broadcast || p1.broadcast || l0 == l1 {
        return None;
    }
    let d_at = 1 - sparse_at;
    let d_slots = &spec.operands[d_at];
    if d_slots.iter().any(|s| s.broadcast) {
        return None;
    }
    let d_labels: Vec<usize> = d_slots.iter().flat_map(|s| s.labels.clone()).collect();
    // No diagonal in the dense operand.
    for (i, l) in d_labels.iter().enumerate() {
        if d_labels[..i].contains(l) {
            return None;
        }
    }
    let out = spec.output_labels();
    let in_d = |l: usize| d_labels.contains(&l);
    let in_out = |l: usize| out.contains(&l);
    // Exactly one sparse label is contracted with the dense operand; the other survives.
    let (free, contracted, stored_free_first) =
        match (in_d(l0) && !in_out(l0), in_d(l1) && !in_out(l1)) {
            (false, true) if in_out(l0) && !in_d(l0) => (l0, l1, true),
            (true, false) if in_out(l1) && !in_d(l1) => (l1, l0, false),
            _ => return None,
        };
    // Every other dense label survives into the output, and the output has nothing else.
    let dense_free: Vec<usize> = out.iter().copied().filter(|&l| l != free).collect();
    let mut want: Vec<usize> = d_labels
        .iter()
        .copied()
        .filter(|&l| l != contracted)
        .collect();
    let mut have = dense_free.clone();
    want.sort_unstable();
    have.sort_unstable();
    if want != have || out.iter().filter(|&&l| l == free).count() != 1 {
        return None;
    }
    if spec.labels.iter().any(|l| l.1 == 0) {
        return None;
    }
    // Keep the stored orientation: S[free, k] multiplies from the left, S[k, free] from the
    // right, so the kernels read the arrays in their natural order.
    let side = if stored_free_first {
        Side::Left
    } else {
        Side::Right
    };
    Some(SparseProduct {
        sparse: sparse_at,
        free,
        contracted,
        dense_free,
        side,
        transposed: false,
    })
}
