//! Checked program → loop IR: fusion, views, contraction steps and library calls.
//!
//! The planner decides which values are *materialised* (get a buffer) and lowers each one to a
//! kernel:
//!
//! - Inputs, outputs, einsum results and values that would be too costly to recompute are
//!   materialised. Everything else (elementwise ops, broadcasts, casts, rearranges, repeats and
//!   reductions with a single consumer) is fused into its consumer's loop nest: injective
//!   values are inlined as expressions (recomputed where used), and a reduction becomes an
//!   accumulator computed at the loop depth where all the loop variables it depends on are
//!   bound (Halide's `compute_at`). So `reduce(x * y, "b d -> b", "sum")` is one pass over `x` and
//!   `y`, and a softmax is two passes (max, sum of exp) plus the write.
//! - A rearrange only changes strides: loads through it are affine in the consumer's loop
//!   variables, so it is never copied unless a loop nest cannot express it (conflicting splits
//!   of one axis), in which case it is materialised.
//! - A kernel's loops run over its output's elementary axes in row-major order, so the store is
//!   unit-stride in the innermost loop; the outermost loop is parallel.
//! - An einsum runs along the contraction path of `order::contraction_path` (the one `cost`
//!   reports). Each pairwise step that is a (batched) matrix product of strided views becomes a
//!   `Gemm` library call; other steps become loop nests with an accumulator.
//!
//! Files, by concern (all extend one `Planner`, whose shared builder state is here):
//! - `materialise.rs`: the main loop (`run`): live values, which get a buffer, the recompute
//!   limit, output copies, and the `SourceRef` of every kernel;
//! - `fusion.rs`: a materialised value's fused loop nest and the expressions inlined into it;
//! - `views.rs`: rearranges as strided loads, coordinate splits, plain copies;
//! - `reduce.rs`: reductions over outer axes accumulated in the output, fill and map kernels;
//! - `einsum.rs`: contraction steps as GEMM calls, relayouts or loop nests;
//! - `sparse.rs`: compressed storage, dense copies, sparse × dense products as `SpMM` calls;
//! - `stored.rs`: loop nests over stored entries (format-keeping maps, sampled einsums).

use super::cost::einsum_path;
use super::sparse::{
    sparse_map_operand, sparse_product, stored_sparse, SparseProduct, SparseSource,
};
use crate::check::{
    EinsumSlot, EinsumSpec, Format, NodeId, NodeKind, OutElem, Program, Recipe, ReduceOp, TensorRef,
};
use crate::diag::{Code, Diagnostic};
use crate::dtype::DType;
use std::collections::{BTreeMap, BTreeSet};
use tdsl_loop::{passes, walk};
use tdsl_loop::{
    AccId, AccOp, BinOp, BufId, Buffer, ElemType, Expr, Index, Iter, Kernel, LibCall, Loop,
    LoopProgram, MatView, Part, Role, Side, SourceRef, SparseLayout, SparseOperand, Stmt, VarId,
};

mod einsum;
mod fusion;
mod materialise;
mod reduce;
mod sparse;
mod stored;
mod views;

/// A reduction placed in a kernel: the node and the atoms of its output coordinates.
type ReductionKey = (NodeId, Vec<Vec<(VarId, u64)>>);

/// A planned program: the loop IR plus how program inputs and outputs map to its buffers.
#[derive(Debug, Clone)]
pub struct Plan {
    pub loops: LoopProgram,
    /// Buffer of each program input, in declaration order (the values of a sparse input).
    pub input_bufs: Vec<BufId>,
    /// The storage layout of each sparse input (`None` for dense ones): the runtime compresses
    /// the input's data into it and binds the arrays to the `InputPart` buffers.
    pub input_layouts: Vec<Option<SparseLayout>>,
    /// Buffer of each program output, in `output` order.
    pub output_bufs: Vec<BufId>,
    /// Sparse inputs whose `idx` and `values` must be bound padded with zeros to their
    /// buffers' capacity (not just the stored entries): a value computed on their stored
    /// entries shares their `idx` with a new `values` buffer of that capacity, and the
    /// arrays of one sparse operand must have consistent lengths (spec/formats.md).
    pub padded_inputs: Vec<bool>,
}

/// The loop-IR element type of a dtype.
pub fn elem_type(d: DType) -> ElemType {
    ElemType::from(d)
}

/// Plans a checked program. The loop IR is checked by `tdsl_loop::verify` before it is
/// returned (in every build); a planner invariant that fails is `tdsl::internal::error`,
/// naming the statement, never a panic or a hang.
pub fn plan_program(p: &Program) -> Result<Plan, Diagnostic> {
    let mut pl = Planner::new(p);
    pl.run()?;
    // A kernel that only copies a temporary into an output goes: its writers write the output.
    let map = tdsl_loop::passes::forward_copies(&mut pl.out);
    let renumber = |b: &mut BufId| {
        if let Some(Some(n)) = map.get(b.0 as usize) {
            *b = *n;
        }
    };
    pl.input_bufs.iter_mut().for_each(renumber);
    pl.output_bufs.iter_mut().for_each(renumber);
    // Kernels are named by their position in the final program.
    for (i, k) in pl.out.kernels.iter_mut().enumerate() {
        k.name = format!("k{i}");
    }
    let plan = Plan {
        loops: pl.out,
        input_bufs: pl.input_bufs,
        input_layouts: pl.input_layouts,
        output_bufs: pl.output_bufs,
        padded_inputs: pl.padded_inputs,
    };
    if let Err(errs) = tdsl_loop::verify::verify(&plan.loops) {
        let list: Vec<String> = errs.iter().take(3).map(|e| e.to_string()).collect();
        return Err(planner_bug(format!(
            "the planner produced invalid loop IR: {}",
            list.join("; ")
        )));
    }
    Ok(plan)
}

/// An internal-error diagnostic for a planner invariant that failed.
fn planner_bug(message: String) -> Diagnostic {
    Diagnostic::new(Code::Internal, message)
        .help("this is a tdsl bug: please report it with the script")
}

/// Splits of root atoms one fused kernel may ask for before planning gives up (a planner bug).
const MAX_SPLITS: usize = 64;

/// Why building a fused kernel must restart.
enum Retry {
    /// Materialise this node and plan again.
    Materialise(NodeId),
    /// Split root atom `atom` of slot `slot` into `(outer, extent / outer)`.
    Split {
        slot: usize,
        atom: usize,
        outer: u64,
    },
}

use tdsl_loop::entries::Coord;

/// A strided view of a buffer: per-slot strides (elements) and an offset.
#[derive(Debug, Clone)]
struct View {
    buf: BufId,
    offset: i64,
    strides: Vec<i64>,
}

fn row_major(extents: &[u64]) -> Vec<i64> {
    let mut s = vec![1i64; extents.len()];
    for i in (0..extents.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * extents[i + 1] as i64;
    }
    s
}

/// Loop nest under construction: its loop variables and the statements hoisted to each depth.
struct Nest {
    vars: Vec<(VarId, u64)>,
    /// `pre[d]` runs inside the first `d` loops, before loop `d`.
    pre: Vec<Vec<Stmt>>,
}

struct Planner<'a> {
    p: &'a Program,
    out: LoopProgram,
    input_bufs: Vec<BufId>,
    output_bufs: Vec<BufId>,
    /// Materialised nodes and their buffers (after resolving `Var`).
    mat: BTreeMap<NodeId, BufId>,
    /// Nodes that must be materialised (decided up front or by a retry).
    must: BTreeSet<NodeId>,
    consumers: Vec<usize>,
    next_var: u32,
    next_acc: u32,
    env: Vec<Nest>,
    /// Root loop variable → (slot, atom) of the kernel being built, for split requests.
    root_pos: BTreeMap<VarId, (usize, usize)>,
    /// Reductions already placed in the kernel being built, by node and coordinates: a value
    /// inlined in two places (softmax's `exp(x - max)`) reuses one accumulator.
    reductions: BTreeMap<ReductionKey, Expr>,
    /// Where each accumulator of the kernel being built was placed: (nest, depth).
    acc_place: BTreeMap<AccId, (usize, usize)>,
    n_temps: usize,
    input_layouts: Vec<Option<SparseLayout>>,
    /// The arrays of each sparse input.
    sparse_inputs: Vec<Option<SparseOperand>>,
    /// Stored-sparse nodes (resolved) and their arrays, once planned.
    sparse: BTreeMap<NodeId, SparseOperand>,
    /// Stored-sparse nodes that some consumer reads densely: they get a dense buffer too.
    needs_dense: BTreeSet<NodeId>,
    padded_inputs: Vec<bool>,
}

impl<'a> Planner<'a> {
    fn new(p: &'a Program) -> Planner<'a> {
        Planner {
            p,
            out: LoopProgram::default(),
            input_bufs: Vec::new(),
            output_bufs: Vec::new(),
            mat: BTreeMap::new(),
            must: BTreeSet::new(),
            consumers: vec![0; p.nodes.len()],
            next_var: 0,
            next_acc: 0,
            env: Vec::new(),
            root_pos: BTreeMap::new(),
            reductions: BTreeMap::new(),
            acc_place: BTreeMap::new(),
            n_temps: 0,
            input_layouts: Vec::new(),
            sparse_inputs: Vec::new(),
            sparse: BTreeMap::new(),
            needs_dense: BTreeSet::new(),
            padded_inputs: vec![false; p.inputs.len()],
        }
    }

    /// A node with `Var` references followed to the assignment's root.
    fn resolve(&self, mut id: NodeId) -> NodeId {
        while let NodeKind::Var(a) = self.p.node(id).kind {
            id = self.p.assigns[a].node;
        }
        id
    }

    fn operands(&self, id: NodeId) -> Vec<NodeId> {
        self.p
            .operands(id)
            .into_iter()
            .map(|o| self.resolve(o))
            .collect()
    }

    fn add_buffer(&mut self, name: String, d: DType, elems: u64, role: Role) -> BufId {
        self.out.buffers.push(Buffer {
            name,
            ty: elem_type(d),
            elems,
            role,
        });
        BufId(self.out.buffers.len() as u32 - 1)
    }

    fn extents(&self, id: NodeId) -> Vec<u64> {
        self.p.node(id).ty.shape.extents()
    }

    /// Gives a node that must be materialised its buffer (outputs already have one).
    fn ensure_buffer(&mut self, id: NodeId) -> BufId {
        if let Some(&b) = self.mat.get(&id) {
            return b;
        }
        let ty = &self.p.node(id).ty;
        let (dtype, elems) = (ty.dtype, ty.shape.n_elems().unwrap_or(0));
        let b = self.add_temp(dtype, elems);
        self.mat.insert(id, b);
        b
    }

    /// The next temporary's name: `t0`, `t1`, …
    fn temp_name(&mut self) -> String {
        self.n_temps += 1;
        format!("t{}", self.n_temps - 1)
    }

    /// A new temporary buffer of `elems` values of `d`, named by [`Planner::temp_name`].
    fn add_temp(&mut self, d: DType, elems: u64) -> BufId {
        let name = self.temp_name();
        self.add_buffer(name, d, elems, Role::Temp)
    }

    fn fresh_var(&mut self) -> VarId {
        self.next_var += 1;
        VarId(self.next_var - 1)
    }

    fn fresh_acc(&mut self) -> AccId {
        self.next_acc += 1;
        AccId(self.next_acc - 1)
    }

    fn origin(&self, id: NodeId) -> String {
        // The assignment whose statement contains this node.
        let stmt = self
            .p
            .assigns
            .iter()
            .find(|a| a.node.idx() >= id.idx())
            .map(|a| a.name.clone())
            .unwrap_or_default();
        let what = match &self.p.node(id).kind {
            NodeKind::Einsum { .. } => "einsum",
            NodeKind::Pattern {
                reduce: Some(_), ..
            } => "reduce",
            NodeKind::Pattern { .. } if self.p.node(id).ty.format.is_sparse() => "sparse view",
            NodeKind::Pattern { .. } => "pattern",
            NodeKind::Unary(..)
            | NodeKind::Binary(..)
            | NodeKind::Cast(_)
            | NodeKind::Where(..) => "elementwise",
            NodeKind::Sparsify { .. } => "sparsify",
            NodeKind::Concat { .. } => "pack",
            NodeKind::Slice { .. } => "unpack",
            _ => "value",
        };
        format!("{stmt}: {what}")
    }

    // ---------------------------------------------------------------------------------------
    // Fused loop nests
    // ---------------------------------------------------------------------------------------

    // ---------------------------------------------------------------------------------------
    // Einsum
    // ---------------------------------------------------------------------------------------

    // ---------------------------------------------------------------------------------------
    // Sparse values and products
    // ---------------------------------------------------------------------------------------
}

/// `Σ var·weight·slot_stride + offset` for slot coordinates.
fn coord_index(coords: &[Coord], slot_strides: &[i64], offset: i64) -> Index {
    let terms = coords
        .iter()
        .zip(slot_strides)
        .flat_map(|(c, &s)| c.terms(s))
        .collect();
    Index { offset, terms }
}

/// Wraps `e` (of compute type `from`) so it has compute type `to`.
fn cast_to(e: Expr, from: ElemType, to: ElemType) -> Expr {
    if from == to {
        e
    } else {
        Expr::Cast(to, Box::new(e))
    }
}

/// Builds the loops of a nest around `inner`, interleaving each depth's hoisted statements.
/// The outermost loop of a root nest is parallel; the innermost loop gets a vector hint.
fn close_nest(nest: Nest, inner: Vec<Stmt>, root: bool, ty: ElemType) -> Vec<Stmt> {
    let Nest { vars, mut pre } = nest;
    let lanes = passes::lanes(ty.compute());
    let mut body = pre.pop().unwrap_or_default();
    body.extend(inner);
    let n = vars.len();
    for (d, (v, e)) in vars.into_iter().enumerate().rev() {
        let innermost = d + 1 == n && !body.iter().any(|s| matches!(s, Stmt::Loop(_)));
        let lp = Stmt::Loop(Loop {
            var: v,
            iter: Iter::Range { extent: e },
            parallel: root && d == 0,
            vector: if innermost { lanes } else { 1 },
            gpu: None,
            body,
        });
        body = pre.pop().unwrap_or_default();
        body.push(lp);
    }
    body
}

/// Sparse formats are evaluated on dense values for now: the planner reads them as dense
/// buffers. (Kept as a function so the sparse issue has one place to change.)
pub fn dense_storage(f: Format) -> bool {
    let _ = f;
    true
}

/// One operand of a contraction step: a buffer, its labels and each label's stride.
#[derive(Debug, Clone)]
struct Operand {
    buf: BufId,
    offset: i64,
    labels: Vec<usize>,
    strides: BTreeMap<usize, i64>,
    dtype: DType,
}

impl Operand {
    /// The one stride of labels `g` taken together (row-major), if they flatten: 0 for none.
    fn flat(&self, g: &[usize], ext: &[u64]) -> Option<i64> {
        let Some(&last) = g.last() else {
            return Some(0);
        };
        for w in g.windows(2) {
            if self.strides[&w[0]] != self.strides[&w[1]] * ext[w[1]] as i64 {
                return None;
            }
        }
        Some(self.strides[&last])
    }
}
