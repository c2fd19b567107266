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

use super::cost::einsum_path;
use super::sparse::{
    sparse_map_operand, sparse_product, stored_sparse, SparseProduct, SparseSource,
};
use crate::check::{
    BinaryFn, EinsumSlot, EinsumSpec, Format, NodeId, NodeKind, OutElem, Program, Recipe, ReduceOp,
    TensorRef, UnaryFn,
};
use crate::diag::{Code, Diagnostic};
use crate::dtype::DType;
use std::collections::{BTreeMap, BTreeSet};
use tdsl_loop::{passes, walk};
use tdsl_loop::{
    AccId, AccOp, BinOp, BufId, Buffer, ElemType, Expr, Index, Iter, Kernel, LibCall, Loop,
    LoopProgram, MatView, Part, Role, Side, SourceRef, SparseLayout, SparseOperand, Stmt, UnOp,
    VarId,
};

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
    match d {
        DType::F32 => ElemType::F32,
        DType::F64 => ElemType::F64,
        DType::F16 => ElemType::F16,
        DType::BF16 => ElemType::BF16,
    }
}

/// Plans a checked program. The loop IR is checked by `tdsl_loop::verify` before it is
/// returned (in every build); a planner invariant that fails is `tdsl::internal::error`,
/// naming the statement, never a panic or a hang.
pub fn plan_program(p: &Program) -> Result<Plan, Diagnostic> {
    let mut pl = Planner::new(p);
    pl.run()?;
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

/// A slot coordinate: `Σ var·weight` over atoms in row-major order; empty = the constant 0.
#[derive(Debug, Clone, Default)]
struct Coord {
    /// (variable, extent) from most to least significant.
    atoms: Vec<(VarId, u64)>,
}

impl Coord {
    fn extent(&self) -> u64 {
        self.atoms.iter().map(|a| a.1).product()
    }
}

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

    fn run(&mut self) -> Result<(), Diagnostic> {
        let p = self.p;
        for (i, inp) in p.inputs.iter().enumerate() {
            let elems = inp.ty.shape.n_elems().unwrap_or(0);
            let layout = crate::sparse::layout(inp.ty.format, inp.ty.shape.rank());
            self.input_layouts.push(layout);
            match layout {
                Some(layout) => {
                    let shape = inp.ty.shape.extents();
                    let role = |part| Role::InputPart {
                        input: i as u32,
                        part,
                    };
                    let op = self.sparse_buffers(
                        &inp.name,
                        inp.ty.dtype,
                        &shape,
                        layout,
                        tdsl_loop::Select::All,
                        role,
                    );
                    self.input_bufs.push(op.values);
                    self.sparse_inputs.push(Some(op));
                }
                None => {
                    let b = self.add_buffer(
                        inp.name.clone(),
                        inp.ty.dtype,
                        elems,
                        Role::Input(i as u32),
                    );
                    self.input_bufs.push(b);
                    self.sparse_inputs.push(None);
                }
            }
        }
        // Consumers of every node, counted once per use, through `Var`s.
        let live = self.live_nodes();
        for &id in &live {
            for o in self.operands(id) {
                self.consumers[o.idx()] += 1;
            }
        }
        for (i, n) in p.nodes.iter().enumerate() {
            let id = NodeId(i as u32);
            if let NodeKind::Input(k) = n.kind {
                match &self.sparse_inputs[k] {
                    Some(op) => {
                        self.sparse.insert(id, op.clone());
                    }
                    None => {
                        self.mat.insert(id, self.input_bufs[k]);
                    }
                }
            }
        }
        self.find_dense_uses(&live);
        // Outputs: each output gets its own buffer; an output that is an input is copied.
        let mut out_nodes: Vec<(usize, Option<NodeId>)> = Vec::new();
        for (k, o) in p.outputs.iter().enumerate() {
            let (name, ty) = (o.name.clone(), p.tensor_type(o.tensor).clone());
            let b = self.add_buffer(
                name,
                ty.dtype,
                ty.shape.n_elems().unwrap_or(0),
                Role::Output(k as u32),
            );
            self.output_bufs.push(b);
            match o.tensor {
                TensorRef::Assign(a) => {
                    let root = self.resolve(p.assigns[a].node);
                    if let std::collections::btree_map::Entry::Vacant(e) = self.mat.entry(root) {
                        e.insert(b);
                        self.must.insert(root);
                    } else {
                        // An alias of an input or of another output: copy it below.
                        out_nodes.push((k, Some(root)));
                    }
                }
                TensorRef::Input(_) => out_nodes.push((k, None)),
            }
        }
        for &id in &live {
            let n = self.p.node(id);
            let multi = self.consumers[id.idx()] > 1;
            match &n.kind {
                NodeKind::Einsum { .. } => {
                    self.must.insert(id);
                }
                NodeKind::Pattern {
                    reduce: Some(_), ..
                } if multi => {
                    self.must.insert(id);
                }
                _ => {}
            }
        }
        self.limit_recompute(&live);
        // Plan materialised nodes in evaluation order; retries may add more.
        let mut done: BTreeSet<NodeId> = self
            .mat
            .iter()
            .filter(|(_, b)| matches!(self.out.buffers[b.0 as usize].role, Role::Input(_)))
            .map(|(n, _)| *n)
            .collect();
        loop {
            let next = live
                .iter()
                .copied()
                .find(|id| self.must.contains(id) && !done.contains(id));
            let Some(id) = next else { break };
            // Everything it reads that must be materialised comes first (live is in order).
            // A stored-sparse value gets a dense buffer only if something reads it densely.
            if !self.sparse_stored(id) || self.needs_dense.contains(&id) {
                self.ensure_buffer(id);
            }
            let kernels_before = self.out.kernels.len();
            let buffers_before = self.out.buffers.len();
            match self.lower_node(id) {
                Ok(()) => {
                    self.tag_sources(kernels_before, self.source_of(id));
                    done.insert(id);
                }
                Err(Retry::Materialise(m)) => {
                    self.out.kernels.truncate(kernels_before);
                    self.out.buffers.truncate(buffers_before);
                    // A request that adds nothing would be asked again forever.
                    if !self.must.insert(m) {
                        return Err(self.stuck(id, "asked again to materialise a value"));
                    }
                }
                Err(Retry::Split { .. }) => {
                    // Splits are handled inside `lower_fused`.
                    return Err(self.stuck(id, "a loop split escaped the fused kernel"));
                }
            }
        }
        // Outputs that alias inputs or other outputs: copies.
        for (k, src) in out_nodes {
            let before = self.out.kernels.len();
            self.output_copy(k, src);
            let span = p.outputs[k].span;
            let source = SourceRef {
                statement: None,
                start: span.start,
                end: span.end,
            };
            self.tag_sources(before, source);
        }
        Ok(())
    }

    /// The copy (or expansion) into output `k`'s buffer of the value it aliases.
    fn output_copy(&mut self, k: usize, src: Option<NodeId>) {
        let p = self.p;
        {
            let src_buf = match src {
                Some(n) => self.mat[&n],
                None => match p.outputs[k].tensor {
                    TensorRef::Input(i) => match self.sparse_inputs[i].clone() {
                        Some(s) => {
                            let dst = self.output_bufs[k];
                            let origin = format!("output {}", p.outputs[k].name);
                            self.push_call(LibCall::Densify { s, dst }, &origin);
                            return;
                        }
                        None => self.input_bufs[i],
                    },
                    TensorRef::Assign(_) => return,
                },
            };
            let dst = self.output_bufs[k];
            let ext = p.tensor_type(p.outputs[k].tensor).shape.extents();
            let kernel =
                self.copy_kernel(src_buf, dst, &ext, &format!("output {}", p.outputs[k].name));
            self.out.kernels.push(kernel);
        }
    }

    /// Where node `id` is in the source: its assignment and its span.
    fn source_of(&self, id: NodeId) -> SourceRef {
        let statement = self
            .p
            .assigns
            .iter()
            .position(|a| a.node.idx() >= id.idx())
            .map(|i| i as u32);
        let span = self.p.node(id).span;
        SourceRef {
            statement,
            start: span.start,
            end: span.end,
        }
    }

    /// Gives the kernels from index `from` on that have no source yet `source`.
    fn tag_sources(&mut self, from: usize, source: SourceRef) {
        for k in self.out.kernels.iter_mut().skip(from) {
            k.source.get_or_insert(source);
        }
    }

    /// The diagnostic for a planner invariant that failed while lowering node `id`.
    fn stuck(&self, id: NodeId, what: &str) -> Diagnostic {
        planner_bug(format!("planning stopped: {what}"))
            .label(self.p.node(id).span, "while planning this expression")
    }

    /// Nodes reachable from the outputs, in evaluation order.
    fn live_nodes(&self) -> Vec<NodeId> {
        let mut live = vec![false; self.p.nodes.len()];
        let mut stack: Vec<NodeId> = Vec::new();
        for o in &self.p.outputs {
            if let TensorRef::Assign(a) = o.tensor {
                stack.push(self.resolve(self.p.assigns[a].node));
            }
        }
        while let Some(id) = stack.pop() {
            if live[id.idx()] {
                continue;
            }
            live[id.idx()] = true;
            stack.extend(self.operands(id));
        }
        (0..self.p.nodes.len())
            .filter(|&i| live[i])
            .map(|i| NodeId(i as u32))
            .collect()
    }

    /// Materialises shared injective values whose recomputation would grow too large: the
    /// inlined size of every node (counting each use) stays under a budget.
    fn limit_recompute(&mut self, live: &[NodeId]) {
        const BUDGET: usize = 48;
        let mut size = vec![1usize; self.p.nodes.len()];
        for &id in live {
            if self.must.contains(&id) || self.mat.contains_key(&id) {
                size[id.idx()] = 1;
                continue;
            }
            let s: usize = 1 + self
                .operands(id)
                .iter()
                .map(|o| {
                    if self.must.contains(o) {
                        1
                    } else {
                        size[o.idx()]
                    }
                })
                .sum::<usize>();
            if s > BUDGET {
                // Materialise the operand contributing most, if shared; else this node.
                let ops = self.operands(id);
                let worst = ops
                    .iter()
                    .copied()
                    .filter(|o| !self.must.contains(o) && !self.mat.contains_key(o))
                    .max_by_key(|o| size[o.idx()] * self.consumers[o.idx()]);
                match worst {
                    Some(o) if self.consumers[o.idx()] > 1 => {
                        self.must.insert(o);
                    }
                    _ => {
                        self.must.insert(id);
                    }
                }
                size[id.idx()] = 1;
            } else {
                size[id.idx()] = s;
            }
        }
    }

    /// Gives a node that must be materialised its buffer (outputs already have one).
    fn ensure_buffer(&mut self, id: NodeId) -> BufId {
        if let Some(&b) = self.mat.get(&id) {
            return b;
        }
        let ty = &self.p.node(id).ty;
        let name = format!("t{}", self.n_temps);
        self.n_temps += 1;
        let b = self.add_buffer(name, ty.dtype, ty.shape.n_elems().unwrap_or(0), Role::Temp);
        self.mat.insert(id, b);
        b
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
            _ => "value",
        };
        format!("{stmt}: {what}")
    }

    fn lower_node(&mut self, id: NodeId) -> Result<(), Retry> {
        if self.sparse_stored(id) {
            return self.lower_sparse(id);
        }
        if let Some(sp) = sparse_product(self.p, id) {
            return self.lower_spmm(id, &sp);
        }
        match &self.p.node(id).kind {
            NodeKind::Einsum { operands, spec } => {
                let ops: Vec<NodeId> = operands.iter().map(|&o| self.resolve(o)).collect();
                let spec = spec.clone();
                self.lower_einsum(id, &ops, &spec)
            }
            _ => self.lower_fused(id),
        }
    }

    // ---------------------------------------------------------------------------------------
    // Fused loop nests
    // ---------------------------------------------------------------------------------------

    /// Root atoms for a materialised node: one per output slot, split further where the node
    /// itself is a pattern whose output slots compose several elementary axes.
    fn root_atoms(&self, id: NodeId) -> Vec<Vec<u64>> {
        let ext = self.extents(id);
        match &self.p.node(id).kind {
            NodeKind::Pattern { recipe, .. } => recipe
                .out_groups
                .iter()
                .zip(&ext)
                .map(|(g, &e)| {
                    let parts: Vec<u64> = g
                        .iter()
                        .map(|o| match *o {
                            OutElem::In(i) => recipe.in_elems[i],
                            OutElem::New(n) => n,
                        })
                        .filter(|&x| x > 1)
                        .collect();
                    if parts.is_empty() {
                        vec![e]
                    } else {
                        parts
                    }
                })
                .collect(),
            _ => ext.iter().map(|&e| vec![e]).collect(),
        }
    }

    fn lower_fused(&mut self, id: NodeId) -> Result<(), Retry> {
        if let Some(kernels) = self.try_outer_reduce(id)? {
            self.out.kernels.extend(kernels);
            return Ok(());
        }
        let mut atoms = self.root_atoms(id);
        // Every split adds an atom; more than an axis list can hold means no progress.
        for _ in 0..MAX_SPLITS {
            match self.try_fused(id, &atoms) {
                Ok(k) => {
                    self.out.kernels.push(k);
                    return Ok(());
                }
                Err(Retry::Split { slot, atom, outer }) => {
                    let a = atoms[slot][atom];
                    atoms[slot].splice(atom..=atom, [outer, a / outer]);
                }
                Err(e) => return Err(e),
            }
        }
        Err(Retry::Split {
            slot: usize::MAX,
            atom: 0,
            outer: 0,
        })
    }

    /// A reduction over axes that are not the input's innermost one, where the output's innermost
    /// axis is the input's innermost: instead of one strided accumulator per output element, the
    /// output itself accumulates while the loops walk the input in memory order (kept axes, then
    /// reduced axes, then the innermost axis, vectorised). Three kernels: the identity, the
    /// accumulation, and for `mean` the division. Only for f32/f64 outputs, which can hold the
    /// running value without losing precision.
    fn try_outer_reduce(&mut self, id: NodeId) -> Result<Option<Vec<Kernel>>, Retry> {
        let node = self.p.node(id).clone();
        let NodeKind::Pattern {
            reduce: Some(op),
            x,
            recipe: r,
            ..
        } = &node.kind
        else {
            return Ok(None);
        };
        if !matches!(node.ty.dtype, DType::F32 | DType::F64) {
            return Ok(None);
        }
        let big = |i: usize| r.in_elems[i] > 1;
        // The input's innermost elementary axis (of extent > 1).
        let Some(inner) = r
            .in_groups
            .iter()
            .flatten()
            .copied()
            .rev()
            .find(|&i| big(i))
        else {
            return Ok(None);
        };
        if r.reduced.contains(&inner) || !r.reduced.iter().any(|&i| big(i)) {
            return Ok(None);
        }
        let out_elems: Vec<usize> = r
            .out_groups
            .iter()
            .flatten()
            .filter_map(|o| match *o {
                OutElem::In(i) if big(i) => Some(i),
                _ => None,
            })
            .collect();
        if out_elems.last() != Some(&inner) || r.in_elems[inner] < 8 {
            return Ok(None);
        }
        let x = self.resolve(*x);
        let buf = self.mat[&id];
        let dtype = elem_type(node.ty.dtype);
        let count: u64 = r.reduced.iter().map(|&i| r.in_elems[i]).product();
        let (init, bop) = match op {
            ReduceOp::Sum | ReduceOp::Mean => (0.0, BinOp::Add),
            ReduceOp::Prod => (1.0, BinOp::Mul),
            ReduceOp::Max => (f64::NEG_INFINITY, BinOp::Max),
            ReduceOp::Min => (f64::INFINITY, BinOp::Min),
        };
        self.next_var = 0;
        self.next_acc = 0;
        self.reductions.clear();
        self.acc_place.clear();
        self.root_pos.clear();
        // Variables: one per elementary axis of extent > 1.
        let mut var: BTreeMap<usize, (VarId, u64)> = BTreeMap::new();
        for i in (0..r.in_elems.len()).filter(|&i| big(i)) {
            let v = self.fresh_var();
            var.insert(i, (v, r.in_elems[i]));
        }
        let coord = |i: usize| Coord {
            atoms: var.get(&i).map(|&a| vec![a]).unwrap_or_default(),
        };
        // Output coordinates (slot → atoms) and the output index.
        let out_coords: Vec<Coord> = r
            .out_groups
            .iter()
            .map(|g| Coord {
                atoms: g
                    .iter()
                    .filter_map(|o| match *o {
                        OutElem::In(i) => var.get(&i).copied(),
                        OutElem::New(_) => None,
                    })
                    .collect(),
            })
            .collect();
        let out_index = coord_index(&out_coords, &row_major(&self.extents(id)), 0);
        // Loop order: kept outer axes, reduced axes, then the innermost axis. With no kept outer
        // axis, the innermost is tiled so the outermost loop can still be split across threads.
        let mut order: Vec<(VarId, u64)> = out_elems[..out_elems.len() - 1]
            .iter()
            .map(|i| var[i])
            .collect();
        let reduced: Vec<(VarId, u64)> = r
            .reduced
            .iter()
            .filter(|&&i| big(i))
            .map(|i| var[i])
            .collect();
        let (iv, ie) = var[&inner];
        let mut out_index = out_index;
        let mut inner_loops = vec![(iv, ie)];
        let mut subst: Option<(VarId, VarId, VarId, u64)> = None;
        if order.is_empty() && ie.is_multiple_of(64) && ie >= 128 {
            let (vo, vi) = (self.fresh_var(), self.fresh_var());
            order.push((vo, ie / 64));
            inner_loops = vec![(vi, 64)];
            subst = Some((iv, vo, vi, 64));
        }
        let parallel_ok = !order.is_empty();
        order.extend(reduced);
        order.extend(inner_loops);
        let xin: Vec<Coord> = r
            .in_groups
            .iter()
            .map(|g| Coord {
                atoms: g.iter().flat_map(|&e| coord(e).atoms).collect(),
            })
            .collect();
        let n = order.len();
        self.env = vec![Nest {
            vars: order.clone(),
            pre: vec![Vec::new(); n + 1],
        }];
        let xe = self.build(x, &xin, false);
        let nest = self.env.pop().expect("root nest");
        let mut xe = cast_to(xe?, self.expr_ty(x), dtype.compute());
        if let Some((v, vo, vi, t)) = subst {
            let split = |ix: &Index| -> Index {
                let mut terms = Vec::new();
                for &(w, s) in &ix.terms {
                    if w == v {
                        terms.push((vo, s * t as i64));
                        terms.push((vi, s));
                    } else {
                        terms.push((w, s));
                    }
                }
                Index {
                    offset: ix.offset,
                    terms,
                }
            };
            xe = xe.map_indices(&split);
            out_index = split(&out_index);
        }
        if nest.pre.iter().any(|p| !p.is_empty()) {
            // Nested reductions inside: leave it to the general path.
            return Ok(None);
        }
        let acc = Stmt::Store {
            buf,
            index: out_index.clone(),
            value: Expr::Binary(
                bop,
                Box::new(Expr::Load {
                    buf,
                    index: out_index.clone(),
                }),
                Box::new(xe),
            ),
        };
        let accumulate = Kernel {
            name: String::new(),
            origin: self.origin(id),
            source: None,
            // The outermost loop may be split across threads only if it is a kept axis: a
            // reduced axis outermost would have iterations writing the same outputs.
            body: close_nest(
                Nest {
                    vars: order,
                    pre: vec![Vec::new(); n + 1],
                },
                vec![acc],
                parallel_ok,
                dtype,
            ),
        };
        let init_kernel = self.fill_kernel(
            buf,
            &self.extents(id),
            Expr::Const(init),
            &format!("{} (init)", self.origin(id)),
        );
        let mut kernels = vec![init_kernel, accumulate];
        if *op == ReduceOp::Mean {
            let ext = self.extents(id);
            let scale = self.map_kernel(
                buf,
                &ext,
                count as f64,
                &format!("{} (mean)", self.origin(id)),
            );
            kernels.push(scale);
        }
        Ok(Some(kernels))
    }

    /// `buf[...] = value` over a row-major buffer of extents `ext`.
    fn fill_kernel(&mut self, buf: BufId, ext: &[u64], value: Expr, origin: &str) -> Kernel {
        self.next_var = 0;
        let (nest, coords) = self.plain_nest(ext);
        let index = coord_index(&coords, &row_major(ext), 0);
        let ty = self.out.buffers[buf.0 as usize].ty;
        Kernel {
            name: String::new(),
            origin: origin.to_string(),
            source: None,
            body: close_nest(nest, vec![Stmt::Store { buf, index, value }], true, ty),
        }
    }

    /// `buf[...] /= divisor` over a row-major buffer of extents `ext`.
    fn map_kernel(&mut self, buf: BufId, ext: &[u64], divisor: f64, origin: &str) -> Kernel {
        self.next_var = 0;
        let (nest, coords) = self.plain_nest(ext);
        let index = coord_index(&coords, &row_major(ext), 0);
        let ty = self.out.buffers[buf.0 as usize].ty;
        let value = Expr::Binary(
            BinOp::Div,
            Box::new(Expr::Load {
                buf,
                index: index.clone(),
            }),
            Box::new(Expr::Const(divisor)),
        );
        Kernel {
            name: String::new(),
            origin: origin.to_string(),
            source: None,
            body: close_nest(nest, vec![Stmt::Store { buf, index, value }], true, ty),
        }
    }

    /// A loop per extent above 1, in order, and the slot coordinates they give.
    fn plain_nest(&mut self, ext: &[u64]) -> (Nest, Vec<Coord>) {
        let mut vars = Vec::new();
        let mut coords = Vec::new();
        for &e in ext {
            let mut c = Coord::default();
            if e > 1 {
                let v = self.fresh_var();
                c.atoms.push((v, e));
                vars.push((v, e));
            }
            coords.push(c);
        }
        let n = vars.len();
        (
            Nest {
                vars,
                pre: vec![Vec::new(); n + 1],
            },
            coords,
        )
    }

    fn try_fused(&mut self, id: NodeId, atoms: &[Vec<u64>]) -> Result<Kernel, Retry> {
        self.next_var = 0;
        self.next_acc = 0;
        self.reductions.clear();
        self.acc_place.clear();
        let buf = self.mat[&id];
        let mut coords = Vec::new();
        let mut vars = Vec::new();
        self.root_pos.clear();
        for (si, slot) in atoms.iter().enumerate() {
            let mut c = Coord::default();
            for (ai, &e) in slot.iter().enumerate() {
                if e > 1 {
                    let v = self.fresh_var();
                    self.root_pos.insert(v, (si, ai));
                    c.atoms.push((v, e));
                    vars.push((v, e));
                }
            }
            coords.push(c);
        }
        let n = vars.len();
        self.env = vec![Nest {
            vars: vars.clone(),
            pre: vec![Vec::new(); n + 1],
        }];
        let value = self.build(id, &coords, true);
        let nest = self.env.pop().expect("root nest");
        let value = value?;
        // Store index: row-major over slots, each slot row-major over its atoms.
        let slot_strides = row_major(&self.extents(id));
        let index = coord_index(&coords, &slot_strides, 0);
        let dtype = elem_type(self.p.node(id).ty.dtype);
        let store = Stmt::Store {
            buf,
            index,
            value: cast_to(value, self.expr_ty(id), dtype.compute()),
        };
        let body = close_nest(nest, vec![store], true, dtype);
        let body = passes::run_kernel_passes(
            body,
            &passes::PassContext {
                compute: dtype.compute(),
                first_free_var: self.next_var,
            },
        );
        Ok(Kernel {
            name: format!("k{}", self.out.kernels.len()),
            origin: self.origin(id),
            source: None,
            body,
        })
    }

    /// Compute type of a node's value inside a kernel.
    fn expr_ty(&self, id: NodeId) -> ElemType {
        elem_type(self.p.node(id).ty.dtype).compute()
    }

    /// The expression for node `id` at slot coordinates `coords`. `root` is true for the node
    /// being materialised by this kernel (which must be computed, not loaded).
    fn build(&mut self, id: NodeId, coords: &[Coord], root: bool) -> Result<Expr, Retry> {
        let id = self.resolve(id);
        if !root {
            if let Some(&b) = self.mat.get(&id) {
                return Ok(self.load(b, id, coords));
            }
            if self.must.contains(&id) {
                // Not planned yet: plan it first.
                return Err(Retry::Materialise(id));
            }
        }
        let node = self.p.node(id).clone();
        if node.weak {
            // Literals and sizes fold to one constant at plan time.
            if let Some(v) = self.weak_value(id) {
                return Ok(Expr::Const(v));
            }
        }
        match &node.kind {
            NodeKind::Input(_) | NodeKind::Var(_) => {
                let b = self.mat[&id];
                Ok(self.load(b, id, coords))
            }
            NodeKind::Scalar(v) => {
                // A weak scalar takes the dtype of what it meets; rounding to a narrow dtype
                // happens where it is combined (see `Binary`).
                Ok(Expr::Const(*v))
            }
            NodeKind::Unary(f, x) => {
                let xe = self.build_operand(*x, id, coords)?;
                Ok(Expr::Unary(un_op(*f), Box::new(xe)))
            }
            NodeKind::Binary(f, a, b) => {
                let dtype = node.ty.dtype;
                let mut ea = self.build_operand(*a, id, coords)?;
                let mut eb = self.build_operand(*b, id, coords)?;
                // Weak scalars round to the result's dtype first (NEP 50), as the interpreter.
                for (e, o) in [(&mut ea, *a), (&mut eb, *b)] {
                    if self.p.node(self.resolve(o)).weak
                        && !node.weak
                        && matches!(dtype, DType::F16 | DType::BF16)
                    {
                        *e = Expr::Cast(
                            elem_type(dtype),
                            Box::new(std::mem::replace(e, Expr::Const(0.0))),
                        );
                    }
                }
                Ok(Expr::Binary(bin_op(*f), Box::new(ea), Box::new(eb)))
            }
            NodeKind::Cast(x) => {
                let xe = self.build_operand(*x, id, coords)?;
                Ok(Expr::Cast(elem_type(node.ty.dtype), Box::new(xe)))
            }
            NodeKind::Where(c, a, b) => {
                let dtype = node.ty.dtype;
                // The condition keeps its own compute type; only its truth is used.
                let ec = self.build_operand(*c, *c, coords)?;
                let mut ea = self.build_operand(*a, id, coords)?;
                let mut eb = self.build_operand(*b, id, coords)?;
                for (e, o) in [(&mut ea, *a), (&mut eb, *b)] {
                    if self.p.node(self.resolve(o)).weak
                        && !node.weak
                        && matches!(dtype, DType::F16 | DType::BF16)
                    {
                        *e = Expr::Cast(
                            elem_type(dtype),
                            Box::new(std::mem::replace(e, Expr::Const(0.0))),
                        );
                    }
                }
                Ok(Expr::Select(Box::new(ec), Box::new(ea), Box::new(eb)))
            }
            NodeKind::AxisIndex { axis } => {
                let c = coords.get(*axis).cloned().unwrap_or_default();
                Ok(Expr::Iota(coord_index(&[c], &[1], 0)))
            }
            NodeKind::Pattern {
                reduce, x, recipe, ..
            } => {
                let x = self.resolve(*x);
                self.build_pattern(id, x, recipe, *reduce, coords)
            }
            NodeKind::Dense(x) => self.build_operand(*x, id, coords),
            NodeKind::Einsum { .. } | NodeKind::Sparsify { .. } => Err(Retry::Materialise(id)),
        }
    }

    /// The value of a weak scalar expression (literals, sizes and arithmetic on them), computed
    /// exactly as the reference interpreter does.
    fn weak_value(&self, id: NodeId) -> Option<f64> {
        let id = self.resolve(id);
        let n = self.p.node(id);
        if !n.weak {
            return None;
        }
        match &n.kind {
            NodeKind::Scalar(v) => Some(*v),
            NodeKind::Unary(f, x) => Some(crate::interp::unary(*f, self.weak_value(*x)?)),
            NodeKind::Binary(f, a, b) => Some(crate::interp::binary(
                *f,
                self.weak_value(*a)?,
                self.weak_value(*b)?,
            )),
            _ => None,
        }
    }

    /// An operand of an elementwise node: right-aligned, numpy broadcasting, converted to the
    /// consumer's compute type.
    fn build_operand(
        &mut self,
        x: NodeId,
        consumer: NodeId,
        coords: &[Coord],
    ) -> Result<Expr, Retry> {
        let x = self.resolve(x);
        let xe = self.extents(x);
        let rank = coords.len();
        let off = rank - xe.len();
        let sub: Vec<Coord> = xe
            .iter()
            .enumerate()
            .map(|(k, &e)| {
                let c = &coords[k + off];
                if e == 1 && c.extent() != 1 {
                    Coord::default()
                } else {
                    c.clone()
                }
            })
            .collect();
        let e = self.build(x, &sub, false)?;
        Ok(cast_to(e, self.expr_ty(x), self.expr_ty(consumer)))
    }

    /// A load of materialised node `id` at `coords` (row-major buffer).
    fn load(&self, buf: BufId, id: NodeId, coords: &[Coord]) -> Expr {
        let strides = row_major(&self.extents(id));
        Expr::Load {
            buf,
            index: coord_index(coords, &strides, 0),
        }
    }

    fn build_pattern(
        &mut self,
        id: NodeId,
        x: NodeId,
        r: &Recipe,
        reduce: Option<ReduceOp>,
        coords: &[Coord],
    ) -> Result<Expr, Retry> {
        // Output slot coordinates → elementary coordinates.
        let mut elem: Vec<Option<Coord>> = vec![None; r.in_elems.len()];
        for (slot, g) in r.out_groups.iter().enumerate() {
            let exts: Vec<u64> = g
                .iter()
                .map(|o| match *o {
                    OutElem::In(i) => r.in_elems[i],
                    OutElem::New(n) => n,
                })
                .collect();
            let parts = self.split_coord(&coords[slot], &exts, id)?;
            for (o, c) in g.iter().zip(parts) {
                if let OutElem::In(i) = *o {
                    elem[i] = Some(c);
                }
            }
        }
        let in_coords = |elem: &[Option<Coord>]| -> Vec<Coord> {
            r.in_groups
                .iter()
                .map(|g| Coord {
                    atoms: g
                        .iter()
                        .flat_map(|&e| elem[e].clone().unwrap_or_default().atoms)
                        .collect(),
                })
                .collect()
        };
        let Some(op) = reduce else {
            let xin = in_coords(&elem);
            let e = self.build(x, &xin, false)?;
            return Ok(e);
        };
        let key = (
            id,
            coords.iter().map(|c| c.atoms.clone()).collect::<Vec<_>>(),
        );
        if let Some(e) = self.reductions.get(&key) {
            return Ok(e.clone());
        }
        // A reduction: fresh loops over the reduced elementary axes, an accumulator placed
        // where its free variables are bound.
        let mut own = Vec::new();
        for &i in &r.reduced {
            let ext = r.in_elems[i];
            if ext > 1 {
                let v = self.fresh_var();
                own.push((v, ext));
                elem[i] = Some(Coord {
                    atoms: vec![(v, ext)],
                });
            } else {
                elem[i] = Some(Coord::default());
            }
        }
        let count: u64 = r.reduced.iter().map(|&i| r.in_elems[i]).product();
        let xin = in_coords(&elem);
        let acc_ty = self.expr_ty(id);
        let n_own = own.len();
        self.env.push(Nest {
            vars: own.clone(),
            pre: vec![Vec::new(); n_own + 1],
        });
        let body = self.build(x, &xin, false);
        let nest = self.env.pop().expect("reduction nest");
        let body = cast_to(body?, self.expr_ty(x), acc_ty);
        let acc = self.fresh_acc();
        let (init, aop) = match op {
            ReduceOp::Sum | ReduceOp::Mean => (0.0, AccOp::Add),
            ReduceOp::Prod => (1.0, AccOp::Mul),
            ReduceOp::Max => (f64::NEG_INFINITY, AccOp::Max),
            ReduceOp::Min => (f64::INFINITY, AccOp::Min),
        };
        let update = Stmt::Update {
            acc,
            op: aop,
            value: body,
        };
        let loops = close_nest(nest, vec![update], false, acc_ty);
        let mut stmts = vec![Stmt::Let {
            acc,
            ty: acc_ty,
            init: Expr::Const(init),
        }];
        stmts.extend(loops);
        // Placement: the deepest enclosing loop whose variable the statements use.
        let used = walk::stmt_vars(&stmts);
        let mut place = (0usize, 0usize);
        for (k, n) in self.env.iter().enumerate() {
            for (d, (v, _)) in n.vars.iter().enumerate() {
                if used.contains(v) {
                    place = place.max((k, d + 1));
                }
            }
        }
        // It must also follow the accumulators it reads (a reduction of a reduction).
        let declared = walk::stmt_lets(&stmts);
        for a in walk::stmt_accs(&stmts) {
            if declared.contains(&a) {
                continue;
            }
            if let Some(&p) = self.acc_place.get(&a) {
                if p.0 < self.env.len() {
                    place = place.max(p);
                }
            }
        }
        let (k, d) = place;
        self.env[k].pre[d].extend(stmts);
        self.acc_place.insert(acc, place);
        let value = Expr::Acc(acc);
        let value = if op == ReduceOp::Mean {
            Expr::Binary(
                BinOp::Div,
                Box::new(value),
                Box::new(Expr::Const(count as f64)),
            )
        } else {
            value
        };
        self.reductions.insert(key, value.clone());
        Ok(value)
    }

    /// Splits a slot coordinate into consecutive parts of the given extents. Root atoms are
    /// split by restarting with finer root loops; other atoms cannot be split, so the pattern
    /// node is materialised instead.
    fn split_coord(&self, c: &Coord, exts: &[u64], pattern: NodeId) -> Result<Vec<Coord>, Retry> {
        let mut atoms: Vec<(VarId, u64)> = c.atoms.clone();
        let mut out = Vec::new();
        for &e in exts {
            let mut part = Coord::default();
            let mut have = 1u64;
            while have < e {
                let Some(&(v, a)) = atoms.first() else {
                    return Err(Retry::Materialise(pattern));
                };
                if have * a <= e {
                    if !e.is_multiple_of(have * a) {
                        return self.refine(v, a, e / have, pattern);
                    }
                    part.atoms.push((v, a));
                    have *= a;
                    atoms.remove(0);
                } else {
                    // The atom is larger than what is left of this part: split it.
                    let need = e / have;
                    return self.refine(v, a, need, pattern);
                }
            }
            out.push(part);
        }
        if !atoms.is_empty() {
            return Err(Retry::Materialise(pattern));
        }
        Ok(out)
    }

    /// Asks for root atom `v` (extent `a`) to be split as `(outer, a / outer)`, where `outer`
    /// must divide `a`; only root loop variables can be split.
    fn refine(&self, v: VarId, a: u64, need: u64, pattern: NodeId) -> Result<Vec<Coord>, Retry> {
        if need == 0 || !a.is_multiple_of(need) {
            return Err(Retry::Materialise(pattern));
        }
        match self.root_pos.get(&v) {
            Some(&(slot, atom)) => Err(Retry::Split {
                slot,
                atom,
                outer: need,
            }),
            None => Err(Retry::Materialise(pattern)),
        }
    }

    /// A copy kernel `dst = src` over `ext` (both row-major).
    fn copy_kernel(&mut self, src: BufId, dst: BufId, ext: &[u64], origin: &str) -> Kernel {
        self.next_var = 0;
        let mut vars = Vec::new();
        let mut coords = Vec::new();
        for &e in ext {
            let mut c = Coord::default();
            if e > 1 {
                let v = self.fresh_var();
                c.atoms.push((v, e));
                vars.push((v, e));
            }
            coords.push(c);
        }
        let strides = row_major(ext);
        let index = coord_index(&coords, &strides, 0);
        let ty = self.out.buffers[dst.0 as usize].ty;
        let n = vars.len();
        let nest = Nest {
            vars,
            pre: vec![Vec::new(); n + 1],
        };
        let store = Stmt::Store {
            buf: dst,
            index: index.clone(),
            value: Expr::Load { buf: src, index },
        };
        Kernel {
            name: format!("k{}", self.out.kernels.len()),
            origin: origin.to_string(),
            source: None,
            body: close_nest(nest, vec![store], true, ty),
        }
    }

    // ---------------------------------------------------------------------------------------
    // Einsum
    // ---------------------------------------------------------------------------------------

    /// A strided view of a node for einsum: its buffer if materialised, or a rearrange of a
    /// view. Anything else must be materialised first.
    fn view_of(&self, id: NodeId) -> Result<View, Retry> {
        let id = self.resolve(id);
        if let Some(&b) = self.mat.get(&id) {
            return Ok(View {
                buf: b,
                offset: 0,
                strides: row_major(&self.extents(id)),
            });
        }
        if let NodeKind::Pattern {
            reduce: None,
            x,
            recipe,
            ..
        } = &self.p.node(id).kind
        {
            if recipe
                .out_groups
                .iter()
                .flatten()
                .all(|o| matches!(o, OutElem::In(_)))
            {
                let xv = self.view_of(*x)?;
                // Elementary strides of the input.
                let mut es = vec![0i64; recipe.in_elems.len()];
                for (slot, g) in recipe.in_groups.iter().enumerate() {
                    let mut s = xv.strides[slot];
                    for &e in g.iter().rev() {
                        es[e] = s;
                        s *= recipe.in_elems[e] as i64;
                    }
                }
                // Each output slot must be a mergeable run of elementary axes.
                let mut strides = Vec::new();
                for g in &recipe.out_groups {
                    let elems: Vec<usize> = g
                        .iter()
                        .filter_map(|o| match *o {
                            OutElem::In(i) if recipe.in_elems[i] > 1 => Some(i),
                            _ => None,
                        })
                        .collect();
                    let Some(&last) = elems.last() else {
                        strides.push(0);
                        continue;
                    };
                    for w in elems.windows(2) {
                        if es[w[0]] != es[w[1]] * recipe.in_elems[w[1]] as i64 {
                            return Err(Retry::Materialise(id));
                        }
                    }
                    strides.push(es[last]);
                }
                return Ok(View {
                    buf: xv.buf,
                    offset: xv.offset,
                    strides,
                });
            }
        }
        Err(Retry::Materialise(id))
    }

    fn lower_einsum(&mut self, id: NodeId, ops: &[NodeId], spec: &EinsumSpec) -> Result<(), Retry> {
        let Some((path, _inputs, _output)) = einsum_path(self.p, id) else {
            return Err(Retry::Materialise(id));
        };
        let ext: Vec<u64> = spec.labels.iter().map(|l| l.1).collect();
        let mut cur: Vec<Operand> = Vec::new();
        for (k, &o) in ops.iter().enumerate() {
            cur.push(self.einsum_operand(o, &spec.operands[k], spec.operand_labels(k), &ext)?);
        }
        let out_dtype = self.p.node(id).ty.dtype;
        let out_buf = self.mat[&id];
        let n_steps = path.steps.len();
        for (si, step) in path.steps.iter().enumerate() {
            let last = si + 1 == n_steps;
            let mut taken: Vec<Operand> = Vec::new();
            let mut positions = step.operands.clone();
            positions.sort_unstable_by(|a, b| b.cmp(a));
            for p in positions {
                taken.push(cur.remove(p));
            }
            taken.reverse();
            let result = if last {
                self.einsum_result(id, out_buf, spec, &ext)
            } else {
                // An intermediate: row-major over its labels in the step's order.
                let labels = step.result_labels.clone();
                let le: Vec<u64> = labels.iter().map(|&l| ext[l]).collect();
                let rm = row_major(&le);
                let elems = le.iter().product::<u64>();
                let name = format!("t{}", self.n_temps);
                self.n_temps += 1;
                // Intermediates carry the einsum's result dtype (f64 if any operand is f64).
                let dtype = out_dtype;
                let buf = self.add_buffer(name, dtype, elems, Role::Temp);
                Operand {
                    buf,
                    offset: 0,
                    strides: labels.iter().copied().zip(rm).collect(),
                    labels,
                    dtype,
                }
            };
            let origin = format!("{} step {}/{}", self.origin(id), si + 1, n_steps);
            match self.gemm_step(&taken, &result, &ext, &origin) {
                Some(kernels) => self.out.kernels.extend(kernels),
                None => {
                    let k = self.contraction_loops(&taken, &result, &ext, origin);
                    self.out.kernels.push(k);
                }
            }
            cur.push(result);
        }
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // Sparse values and products
    // ---------------------------------------------------------------------------------------

    /// Whether node `id` (resolved) is stored sparse.
    fn sparse_stored(&self, id: NodeId) -> bool {
        stored_sparse(self.p, self.resolve(id)).is_some()
    }

    /// Decides which stored-sparse values are also needed densely (every use that is not a
    /// sparse product or a view of the same storage, and outputs), and which values `sparsify`
    /// reads (materialised, row-major).
    fn find_dense_uses(&mut self, live: &[NodeId]) {
        for &id in live {
            if self.sparse_stored(id) && !matches!(self.p.node(id).kind, NodeKind::Input(_)) {
                self.must.insert(id);
            }
            let product = sparse_product(self.p, id);
            let view = match stored_sparse(self.p, id) {
                Some(SparseSource::View(src)) => Some(src),
                _ => None,
            };
            // A format-keeping elementwise op reads its sparse operand's stored entries.
            let map_pos = match stored_sparse(self.p, id) {
                Some(SparseSource::Map(_)) => sparse_map_operand(self.p, id).map(|m| m.0),
                _ => None,
            };
            for (pos, o) in self.operands(id).into_iter().enumerate() {
                if !self.sparse_stored(o) {
                    if matches!(self.p.node(id).kind, NodeKind::Sparsify { .. })
                        && !matches!(self.p.node(o).kind, NodeKind::Input(_))
                    {
                        self.must.insert(o);
                    }
                    continue;
                }
                let sparse_use = product.as_ref().is_some_and(|sp| sp.sparse == pos)
                    || view == Some(o)
                    || map_pos == Some(pos);
                if !sparse_use {
                    self.needs_dense.insert(o);
                }
            }
        }
        for o in &self.p.outputs {
            if let TensorRef::Assign(a) = o.tensor {
                let root = self.resolve(self.p.assigns[a].node);
                if self.sparse_stored(root) {
                    self.needs_dense.insert(root);
                }
            }
        }
        // Sparse inputs read densely: expand each once, before any other kernel.
        let mut expanded: BTreeMap<usize, BufId> = BTreeMap::new();
        for id in self.needs_dense.clone() {
            let NodeKind::Input(i) = self.p.node(id).kind else {
                continue;
            };
            let b = match expanded.get(&i) {
                Some(&b) => b,
                None => {
                    let Some(s) = self.sparse_inputs[i].clone() else {
                        continue;
                    };
                    self.mat.remove(&id);
                    let b = self.ensure_buffer(id);
                    let origin = format!("{}: dense", self.p.inputs[i].name);
                    self.push_call(LibCall::Densify { s, dst: b }, &origin);
                    let span = self.p.inputs[i].span;
                    let source = SourceRef {
                        statement: None,
                        start: span.start,
                        end: span.end,
                    };
                    self.tag_sources(self.out.kernels.len() - 1, source);
                    expanded.insert(i, b);
                    b
                }
            };
            self.mat.insert(id, b);
        }
        // Every `Input` node of an expanded input reads the same buffer.
        for (k, n) in self.p.nodes.iter().enumerate() {
            if let NodeKind::Input(i) = n.kind {
                if let Some(&b) = expanded.get(&i) {
                    self.mat.insert(NodeId(k as u32), b);
                    self.needs_dense.insert(NodeId(k as u32));
                }
            }
        }
    }

    /// Buffers for a sparse tensor of `shape` in `layout`, sized for what `select` can keep
    /// (for inputs: the most any data can store; inputs bind only what they store).
    fn sparse_buffers(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[u64],
        layout: SparseLayout,
        select: tdsl_loop::Select,
        role: impl Fn(Part) -> Role,
    ) -> SparseOperand {
        let ushape: Vec<usize> = shape.iter().map(|&e| e as usize).collect();
        let (n_ptr, n_idx, n_val) =
            tdsl_sparse::prune::capacity(&ushape, layout, select).unwrap_or((0, 0, 0));
        let ptr = (!matches!(layout, SparseLayout::TwoFour { .. })).then(|| {
            let b = self.add_buffer(format!("{name}.ptr"), dtype, n_ptr as u64, role(Part::Ptr));
            self.out.buffers[b.0 as usize].ty = ElemType::I32;
            b
        });
        let idx = self.add_buffer(format!("{name}.idx"), dtype, n_idx as u64, role(Part::Idx));
        self.out.buffers[idx.0 as usize].ty = ElemType::I32;
        let values = self.add_buffer(
            format!("{name}.values"),
            dtype,
            n_val as u64,
            role(Part::Values),
        );
        SparseOperand {
            layout,
            shape: shape.to_vec(),
            ptr,
            idx,
            values,
        }
    }

    /// A kernel that is one library call.
    fn push_call(&mut self, call: LibCall, origin: &str) {
        self.out.kernels.push(Kernel {
            name: format!("k{}", self.out.kernels.len()),
            origin: origin.to_string(),
            source: None,
            body: vec![Stmt::Call(call)],
        });
    }

    /// Plans a stored-sparse value: `sparsify` prunes its dense operand into new arrays; a
    /// view reuses its source's arrays in the transposed layout. Then, if anything reads it
    /// densely, it is expanded into its dense buffer.
    fn lower_sparse(&mut self, id: NodeId) -> Result<(), Retry> {
        let node = self.p.node(id).clone();
        let shape = node.ty.shape.extents();
        let origin = self.origin(id);
        let op = match (&node.kind, stored_sparse(self.p, id)) {
            (NodeKind::Sparsify { x, select }, _) => {
                let x = self.resolve(*x);
                let Some(&src) = self.mat.get(&x) else {
                    return Err(Retry::Materialise(x));
                };
                let Some(layout) = crate::sparse::layout(node.ty.format, shape.len()) else {
                    return Err(Retry::Materialise(id));
                };
                let name = format!("t{}", self.n_temps);
                self.n_temps += 1;
                let out =
                    self.sparse_buffers(&name, node.ty.dtype, &shape, layout, *select, |_| {
                        Role::Temp
                    });
                self.push_call(
                    LibCall::Sparsify {
                        src,
                        out: out.clone(),
                        select: *select,
                    },
                    &origin,
                );
                out
            }
            (_, Some(SparseSource::View(src))) => {
                let Some(s) = self.sparse.get(&src).cloned() else {
                    return Err(Retry::Materialise(src));
                };
                // The same arrays read in the view's layout (CSR ↔ CSC, 2:4 on the other axis).
                let Some(layout) = crate::sparse::layout(node.ty.format, shape.len()) else {
                    return Err(Retry::Materialise(id));
                };
                SparseOperand {
                    layout,
                    shape: shape.clone(),
                    ..s
                }
            }
            (_, Some(SparseSource::Map(src))) => self.lower_map(id, src)?,
            _ => return Err(Retry::Materialise(id)),
        };
        self.sparse.insert(id, op.clone());
        if self.needs_dense.contains(&id) {
            let dst = self.ensure_buffer(id);
            self.push_call(
                LibCall::Densify { s: op, dst },
                &format!("{origin} (dense)"),
            );
        }
        Ok(())
    }

    /// Loops over the stored entries of `s`, outermost first: each loop's variable and
    /// iteration (the first range loop is parallel where iterations write disjoint entries),
    /// the position of the entry in `s.values`, and the coordinate of each axis.
    fn stored_loops(&mut self, s: &SparseOperand) -> (Vec<Loop>, Index, Vec<Coord>) {
        let shape = s.shape.clone();
        let lp = |var: VarId, iter: Iter, parallel: bool| Loop {
            var,
            iter,
            parallel,
            vector: 1,
            gpu: None,
            body: Vec::new(),
        };
        let range = |e: u64| Iter::Range { extent: e };
        let one = |v: VarId, e: u64| Coord {
            atoms: vec![(v, e)],
        };
        let var_ix = |v: VarId, stride: i64, offset: i64| Index {
            offset,
            terms: vec![(v, stride)],
        };
        let ptr = s.ptr.unwrap_or(s.idx);
        match s.layout {
            SparseLayout::Csr | SparseLayout::Csc => {
                // CSR: rows then the stored columns of each row; CSC the other way round.
                let (outer, inner) = if s.layout == SparseLayout::Csr {
                    (0, 1)
                } else {
                    (1, 0)
                };
                let (o, p, c) = (self.fresh_var(), self.fresh_var(), self.fresh_var());
                let loops = vec![
                    lp(o, range(shape[outer]), true),
                    lp(
                        p,
                        Iter::Compressed {
                            ptr,
                            ptr_index: var_ix(o, 1, 0),
                            crd: s.idx,
                            coord: c,
                        },
                        false,
                    ),
                ];
                let mut coords = vec![Coord::default(); 2];
                coords[outer] = one(o, shape[outer]);
                coords[inner] = one(c, shape[inner]);
                (loops, var_ix(p, 1, 0), coords)
            }
            SparseLayout::Bsr { br, bc } => {
                let (br, bc) = (br as u64, bc as u64);
                let (bi, p, bj) = (self.fresh_var(), self.fresh_var(), self.fresh_var());
                let (r, c) = (self.fresh_var(), self.fresh_var());
                let loops = vec![
                    lp(bi, range(shape[0] / br), true),
                    lp(
                        p,
                        Iter::Compressed {
                            ptr,
                            ptr_index: var_ix(bi, 1, 0),
                            crd: s.idx,
                            coord: bj,
                        },
                        false,
                    ),
                    lp(r, range(br), false),
                    lp(c, range(bc), false),
                ];
                let pos = Index {
                    offset: 0,
                    terms: vec![(p, (br * bc) as i64), (r, bc as i64), (c, 1)],
                };
                let coords = vec![
                    Coord {
                        atoms: vec![(bi, shape[0] / br), (r, br)],
                    },
                    Coord {
                        atoms: vec![(bj, shape[1] / bc), (c, bc)],
                    },
                ];
                (loops, pos, coords)
            }
            SparseLayout::Coo => {
                // Entries `ptr[0] .. ptr[1]`; each coordinate is a singleton level reading the
                // entry's row of `idx` (the compressed level's own coordinate is unused).
                let n = shape.len() as i64;
                let (p, unused) = (self.fresh_var(), self.fresh_var());
                let mut loops = vec![lp(
                    p,
                    Iter::Compressed {
                        ptr,
                        ptr_index: Index {
                            offset: 0,
                            terms: Vec::new(),
                        },
                        crd: s.idx,
                        coord: unused,
                    },
                    false,
                )];
                let mut coords = Vec::new();
                for (k, &e) in shape.iter().enumerate() {
                    let v = self.fresh_var();
                    loops.push(lp(
                        v,
                        Iter::Singleton {
                            crd: s.idx,
                            pos_index: var_ix(p, n, k as i64),
                        },
                        false,
                    ));
                    coords.push(one(v, e));
                }
                (loops, var_ix(p, 1, 0), coords)
            }
            SparseLayout::TwoFour { axis } => {
                // Range loops over the other axes (the rows, row-major), then the kept values.
                let ext = shape[axis];
                let words = ext.div_ceil(32) as i64;
                let mut loops = Vec::new();
                let mut coords = vec![Coord::default(); shape.len()];
                let mut row = Index {
                    offset: 0,
                    terms: Vec::new(),
                };
                let others: Vec<usize> = (0..shape.len()).filter(|&a| a != axis).collect();
                let mut weight = 1i64;
                let mut row_terms = Vec::new();
                for &a in others.iter().rev() {
                    let v = self.fresh_var();
                    row_terms.push((v, weight, a));
                    weight *= shape[a] as i64;
                }
                row_terms.reverse();
                for (i, &(v, w, a)) in row_terms.iter().enumerate() {
                    loops.push(lp(v, range(shape[a]), i == 0));
                    row.terms.push((v, w));
                    coords[a] = one(v, shape[a]);
                }
                let (kv, k) = (self.fresh_var(), self.fresh_var());
                let scale = |ix: &Index, by: i64| Index {
                    offset: ix.offset * by,
                    terms: ix.terms.iter().map(|&(v, w)| (v, w * by)).collect(),
                };
                loops.push(lp(
                    kv,
                    Iter::TwoFour {
                        groups: ext / 4,
                        meta: s.idx,
                        meta_index: scale(&row, words),
                        coord: k,
                    },
                    false,
                ));
                coords[axis] = one(k, ext);
                let mut pos = scale(&row, (ext / 2) as i64);
                pos.terms.push((kv, 1));
                (loops, pos, coords)
            }
        }
    }

    /// A format-keeping elementwise op of stored-sparse `of` (`SparseSource::Map`): one loop
    /// nest over `of`'s stored entries writes new values; `ptr` and `idx` are `of`'s. The dense
    /// operand of a binary op is read where each entry lies (broadcast as numpy does).
    fn lower_map(&mut self, id: NodeId, of: NodeId) -> Result<SparseOperand, Retry> {
        let Some(s) = self.sparse.get(&of).cloned() else {
            return Err(Retry::Materialise(of));
        };
        let Some((_, dense_at)) = sparse_map_operand(self.p, id) else {
            return Err(Retry::Materialise(id));
        };
        let node = self.p.node(id).clone();
        let ops = self.p.operands(id);
        // The dense operand: a folded constant or a strided view.
        let dense = match dense_at {
            None => None,
            Some(k) => {
                let d = self.resolve(ops[k]);
                match self.weak_value(d) {
                    Some(v) => Some((d, None, Some(v))),
                    None => Some((d, Some(self.view_of(d)?), None)),
                }
            }
        };
        let name = format!("t{}", self.n_temps);
        self.n_temps += 1;
        let cap = self.out.buffers[s.values.0 as usize].elems;
        let values = self.add_buffer(format!("{name}.values"), node.ty.dtype, cap, Role::Temp);
        let out = SparseOperand {
            values,
            ..s.clone()
        };
        if let Role::InputPart { input, .. } = self.out.buffers[s.idx.0 as usize].role {
            self.padded_inputs[input as usize] = true;
        }
        self.next_var = 0;
        self.next_acc = 0;
        let (loops, pos, coords) = self.stored_loops(&s);
        let ct = self.expr_ty(id);
        let sv = cast_to(
            Expr::Load {
                buf: s.values,
                index: pos.clone(),
            },
            self.expr_ty(of),
            ct,
        );
        let dv = match &dense {
            None => None,
            Some((_, _, Some(v))) => Some(
                if matches!(node.ty.dtype, DType::F16 | DType::BF16) && !node.weak {
                    Expr::Cast(elem_type(node.ty.dtype), Box::new(Expr::Const(*v)))
                } else {
                    Expr::Const(*v)
                },
            ),
            Some((d, Some(view), None)) => {
                let dext = self.extents(*d);
                let off = coords.len() - dext.len();
                let strides: Vec<i64> = dext
                    .iter()
                    .enumerate()
                    .map(|(k, &e)| {
                        if e == 1 && s.shape[k + off] != 1 {
                            0
                        } else {
                            view.strides[k]
                        }
                    })
                    .collect();
                let load = Expr::Load {
                    buf: view.buf,
                    index: coord_index(&coords[off..], &strides, view.offset),
                };
                Some(cast_to(load, self.expr_ty(*d), ct))
            }
            Some(_) => return Err(Retry::Materialise(id)),
        };
        let mut pre = Vec::new();
        let value = match (&node.kind, dv, dense_at) {
            (NodeKind::Einsum { operands, spec }, None, None) => {
                let (operands, spec) = (operands.clone(), spec.clone());
                let (acc, stmts) = self.sampled_sum(&operands, &spec, &coords, ct)?;
                pre = stmts;
                Expr::Binary(BinOp::Mul, Box::new(sv), Box::new(Expr::Acc(acc)))
            }
            (NodeKind::Unary(f, _), None, _) => Expr::Unary(un_op(*f), Box::new(sv)),
            (NodeKind::Cast(_), None, _) => Expr::Cast(elem_type(node.ty.dtype), Box::new(sv)),
            (NodeKind::Binary(f, _, _), Some(dv), Some(k)) => {
                let (a, b) = if k == 1 { (sv, dv) } else { (dv, sv) };
                Expr::Binary(bin_op(*f), Box::new(a), Box::new(b))
            }
            _ => return Err(Retry::Materialise(id)),
        };
        let dtype = elem_type(node.ty.dtype);
        pre.push(Stmt::Store {
            buf: values,
            index: pos,
            value: cast_to(value, ct, dtype.compute()),
        });
        let mut body = pre;
        for mut l in loops.into_iter().rev() {
            l.body = body;
            body = vec![Stmt::Loop(l)];
        }
        self.out.kernels.push(Kernel {
            name: format!("k{}", self.out.kernels.len()),
            origin: self.origin(id),
            source: None,
            body,
        });
        Ok(out)
    }

    /// The sum of a sampled einsum (SDDMM) at one stored entry: `Σ Π` of every operand but the
    /// sparse one, over the labels other than the output's two, whose coordinates `coords`
    /// binds. Returns the accumulator (of compute type `ct`) and the statements computing it:
    /// its `let`, then loops over the summed labels (the innermost vectorisable).
    fn sampled_sum(
        &mut self,
        operands: &[NodeId],
        spec: &EinsumSpec,
        coords: &[Coord],
        ct: ElemType,
    ) -> Result<(AccId, Vec<Stmt>), Retry> {
        let formats: Vec<Format> = operands.iter().map(|&o| self.p.node(o).ty.format).collect();
        let Some(at) = crate::check::sampled_operand(spec, &formats) else {
            return Err(Retry::Materialise(operands[0]));
        };
        let ext: Vec<u64> = spec.labels.iter().map(|l| l.1).collect();
        let out = spec.output_labels();
        // The summed labels, each with a loop variable.
        let mut summed: Vec<(usize, VarId)> = Vec::new();
        for k in (0..operands.len()).filter(|&k| k != at) {
            for l in spec.operand_labels(k) {
                if !out.contains(&l) && ext[l] > 1 && !summed.iter().any(|s| s.0 == l) {
                    summed.push((l, self.fresh_var()));
                }
            }
        }
        let mut prod: Option<Expr> = None;
        for (k, &o) in operands.iter().enumerate() {
            if k == at {
                continue;
            }
            let o = self.resolve(o);
            let op = self.einsum_operand(o, &spec.operands[k], spec.operand_labels(k), &ext)?;
            let mut index = Index {
                offset: op.offset,
                terms: Vec::new(),
            };
            for (&l, &st) in &op.strides {
                if st == 0 {
                    continue;
                }
                if let Some(slot) = out.iter().position(|&x| x == l) {
                    index
                        .terms
                        .extend(coord_index(&coords[slot..=slot], &[st], 0).terms);
                } else if let Some(&(_, v)) = summed.iter().find(|s| s.0 == l) {
                    index.terms.push((v, st));
                }
            }
            let e = cast_to(
                Expr::Load { buf: op.buf, index },
                elem_type(op.dtype).compute(),
                ct,
            );
            prod = Some(match prod {
                None => e,
                Some(p) => Expr::Binary(BinOp::Mul, Box::new(p), Box::new(e)),
            });
        }
        let acc = self.fresh_acc();
        let mut body = vec![Stmt::Update {
            acc,
            op: AccOp::Add,
            value: prod.unwrap_or(Expr::Const(1.0)),
        }];
        let lanes = if ct == ElemType::F64 { 2 } else { 4 };
        for (i, &(l, v)) in summed.iter().enumerate().rev() {
            body = vec![Stmt::Loop(Loop {
                var: v,
                iter: Iter::Range { extent: ext[l] },
                parallel: false,
                vector: if i + 1 == summed.len() { lanes } else { 1 },
                gpu: None,
                body,
            })];
        }
        let mut stmts = vec![Stmt::Let {
            acc,
            ty: ct,
            init: Expr::Const(0.0),
        }];
        stmts.extend(body);
        Ok((acc, stmts))
    }

    /// A sparse-dense product as one `SpMM` call. Dense operands are first copied (and cast)
    /// where the kernel's layout needs it: unit stride along the columns of `d` and `c`, in
    /// the compute type (f32, or f64 when the result is f64).
    fn lower_spmm(&mut self, id: NodeId, sp: &SparseProduct) -> Result<(), Retry> {
        let NodeKind::Einsum { operands, spec } = &self.p.node(id).kind else {
            return Err(Retry::Materialise(id));
        };
        let (operands, spec) = (operands.clone(), spec.clone());
        let s_node = self.resolve(operands[sp.sparse]);
        let Some(s) = self.sparse.get(&s_node).cloned() else {
            return Err(Retry::Materialise(s_node));
        };
        let d_at = 1 - sp.sparse;
        let ext: Vec<u64> = spec.labels.iter().map(|l| l.1).collect();
        let d_node = self.resolve(operands[d_at]);
        let d = self.einsum_operand(
            d_node,
            &spec.operands[d_at],
            spec.operand_labels(d_at),
            &ext,
        )?;
        let out = self.einsum_result(id, self.mat[&id], &spec, &ext);
        let compute = if out.dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let origin = self.origin(id);
        let big: Vec<usize> = sp
            .dense_free
            .iter()
            .copied()
            .filter(|&l| ext[l] > 1)
            .collect();
        let (free, kk) = (sp.free, sp.contracted);
        // Row-major orders the kernel wants: Left d[k, N], c[free, N]; Right d[N, k], c[N, free].
        let cat = |a: &[usize], b: &[usize]| -> Vec<usize> { a.iter().chain(b).copied().collect() };
        let (d_order, c_order) = match sp.side {
            Side::Left => (cat(&[kk], &big), cat(&[free], &big)),
            Side::Right => (cat(&big, &[kk]), cat(&big, &[free])),
        };
        let unit = |o: &Operand, order: &[usize]| -> bool {
            // The trailing label (or group) has stride 1 and the leading part flattens.
            let (rows, cols) = match sp.side {
                Side::Left => (&order[..1], &order[1..]),
                Side::Right => (&order[..order.len() - 1], &order[order.len() - 1..]),
            };
            let c_ok = cols.iter().all(|&l| ext[l] <= 1) || o.flat(cols, &ext) == Some(1);
            o.dtype == compute && o.flat(rows, &ext).is_some() && c_ok
        };
        let mut kernels = Vec::new();
        let d = if unit(&d, &d_order) {
            d
        } else {
            let t = self.temp_operand(&d_order, &ext, compute);
            kernels.push(self.copy_operand(&d, &t, &ext, &origin));
            t
        };
        let (c, copy_back) = if unit(&out, &c_order) {
            (out.clone(), false)
        } else {
            (self.temp_operand(&c_order, &ext, compute), true)
        };
        let prod = |g: &[usize]| -> u64 { g.iter().map(|&l| ext[l]).product() };
        let view = |o: &Operand, rows: &[usize], cols: &[usize]| MatView {
            buf: o.buf,
            offset: o.offset,
            row_stride: o.flat(rows, &ext).unwrap_or(0),
            col_stride: if prod(cols) <= 1 {
                1
            } else {
                o.flat(cols, &ext).unwrap_or(1)
            },
            batch_strides: Vec::new(),
        };
        let (m, n, k, dv, cv) = match sp.side {
            Side::Left => (
                ext[free],
                prod(&big),
                ext[kk],
                view(&d, &[kk], &big),
                view(&c, &[free], &big),
            ),
            Side::Right => (
                prod(&big),
                ext[free],
                ext[kk],
                view(&d, &big, &[kk]),
                view(&c, &big, &[free]),
            ),
        };
        self.out.kernels.extend(kernels);
        self.push_call(
            LibCall::SpMM {
                m,
                n,
                k,
                s,
                transposed: sp.transposed,
                side: sp.side,
                d: dv,
                c: cv,
                accumulate: false,
            },
            &origin,
        );
        if copy_back {
            let kern = self.copy_operand(&c, &out, &ext, &origin);
            self.out.kernels.push(kern);
        }
        Ok(())
    }

    /// An einsum operand as labels with strides (a repeated label adds its strides: a
    /// diagonal; a broadcast slot has none).
    fn einsum_operand(
        &self,
        o: NodeId,
        slots: &[EinsumSlot],
        labels: Vec<usize>,
        ext: &[u64],
    ) -> Result<Operand, Retry> {
        let v = self.view_of(o)?;
        let mut strides: BTreeMap<usize, i64> = BTreeMap::new();
        for (slot, s) in slots.iter().enumerate() {
            if s.broadcast {
                continue;
            }
            let mut st = v.strides[slot];
            for &l in s.labels.iter().rev() {
                *strides.entry(l).or_insert(0) += st;
                st *= ext[l] as i64;
            }
        }
        for &l in &labels {
            strides.entry(l).or_insert(0);
        }
        Ok(Operand {
            buf: v.buf,
            offset: v.offset,
            labels,
            strides,
            dtype: self.p.node(o).ty.dtype,
        })
    }

    /// The einsum's own buffer, row-major over output slots of composed labels.
    fn einsum_result(&self, id: NodeId, buf: BufId, spec: &EinsumSpec, ext: &[u64]) -> Operand {
        let mut strides = BTreeMap::new();
        let slot_strides = row_major(&self.extents(id));
        for (slot, g) in spec.output.iter().enumerate() {
            let mut st = slot_strides[slot];
            for &l in g.iter().rev() {
                strides.insert(l, st);
                st *= ext[l] as i64;
            }
        }
        Operand {
            buf,
            offset: 0,
            labels: spec.output_labels(),
            strides,
            dtype: self.p.node(id).ty.dtype,
        }
    }

    /// A pairwise step as a batched GEMM: labels group into batch / m / n / k. An operand whose
    /// m/k (or k/n) labels do not flatten to one stride each is first copied into that layout;
    /// so is the result, through a temporary. Returns the kernels (copies and the call), or
    /// `None` when the step is not a matrix product worth a library call.
    fn gemm_step(
        &mut self,
        ops: &[Operand],
        out: &Operand,
        ext: &[u64],
        origin: &str,
    ) -> Option<Vec<Kernel>> {
        let [a, b] = ops else { return None };
        if a.dtype != b.dtype || a.dtype != out.dtype {
            return None;
        }
        let (la, lb, lo): (BTreeSet<usize>, BTreeSet<usize>, BTreeSet<usize>) = (
            a.labels.iter().copied().collect(),
            b.labels.iter().copied().collect(),
            out.labels.iter().copied().collect(),
        );
        // Labels summed in only one operand need a separate pass: not a GEMM.
        if la
            .iter()
            .chain(lb.iter())
            .any(|l| !(lo.contains(l) || (la.contains(l) && lb.contains(l))))
        {
            return None;
        }
        let big =
            |g: &[usize]| -> Vec<usize> { g.iter().copied().filter(|&l| ext[l] > 1).collect() };
        let batch = big(&out
            .labels
            .iter()
            .copied()
            .filter(|l| la.contains(l) && lb.contains(l))
            .collect::<Vec<_>>());
        let m = big(&out
            .labels
            .iter()
            .copied()
            .filter(|l| la.contains(l) && !lb.contains(l))
            .collect::<Vec<_>>());
        let n = big(&out
            .labels
            .iter()
            .copied()
            .filter(|l| lb.contains(l) && !la.contains(l))
            .collect::<Vec<_>>());
        let k = big(&a
            .labels
            .iter()
            .copied()
            .filter(|l| lb.contains(l) && !lo.contains(l))
            .collect::<Vec<_>>());
        let prod = |g: &[usize]| -> u64 { g.iter().map(|&l| ext[l]).product() };
        let (mm, nn, kk, bb) = (prod(&m), prod(&n), prod(&k), prod(&batch));
        // Small products run faster as plain loops than through a library call.
        // Matrix-vector products are memory-bound: a vectorised dot-product loop streams the
        // matrix once, as fast as any library call.
        if mm == 1 || nn == 1 {
            return None;
        }
        if mm * nn * kk * bb < 16 * 16 * 16 || mm * nn * kk < 8 * 8 * 8 {
            return None;
        }
        let flat = |o: &Operand, g: &[usize]| o.flat(g, ext);
        let mut kernels = Vec::new();
        let cat = |x: &[usize], y: &[usize], z: &[usize]| -> Vec<usize> {
            x.iter().chain(y).chain(z).copied().collect()
        };
        let a = match (flat(a, &m), flat(a, &k)) {
            (Some(_), Some(_)) => a.clone(),
            _ => {
                let (t, kern) = self.relayout(a, &cat(&batch, &m, &k), ext, origin);
                kernels.push(kern);
                t
            }
        };
        let b = match (flat(b, &k), flat(b, &n)) {
            (Some(_), Some(_)) => b.clone(),
            _ => {
                let (t, kern) = self.relayout(b, &cat(&batch, &k, &n), ext, origin);
                kernels.push(kern);
                t
            }
        };
        let (c, copy_back) = match (flat(out, &m), flat(out, &n)) {
            (Some(_), Some(_)) => (out.clone(), None),
            _ => {
                let labels = cat(&batch, &m, &n);
                let t = self.temp_operand(&labels, ext, out.dtype);
                (t.clone(), Some(t))
            }
        };
        let bs = |o: &Operand| batch.iter().map(|l| o.strides[l]).collect::<Vec<i64>>();
        let view = |o: &Operand, r: &[usize], c: &[usize]| MatView {
            buf: o.buf,
            offset: o.offset,
            row_stride: flat(o, r).unwrap_or(0),
            col_stride: flat(o, c).unwrap_or(0),
            batch_strides: bs(o),
        };
        let call = LibCall::Gemm {
            m: mm,
            n: nn,
            k: kk,
            batch: batch.iter().map(|&l| ext[l]).collect(),
            a: view(&a, &m, &k),
            b: view(&b, &k, &n),
            c: view(&c, &m, &n),
            accumulate: false,
        };
        kernels.push(Kernel {
            name: format!("k{}", self.out.kernels.len() + kernels.len()),
            origin: origin.to_string(),
            source: None,
            body: vec![Stmt::Call(call)],
        });
        if let Some(t) = copy_back {
            let kern = self.copy_operand(&t, out, ext, origin);
            kernels.push(kern);
        }
        Some(kernels)
    }

    /// A temporary buffer laid out row-major over `labels`.
    fn temp_operand(&mut self, labels: &[usize], ext: &[u64], dtype: DType) -> Operand {
        let le: Vec<u64> = labels.iter().map(|&l| ext[l]).collect();
        let rm = row_major(&le);
        let name = format!("t{}", self.n_temps);
        self.n_temps += 1;
        let buf = self.add_buffer(name, dtype, le.iter().product(), Role::Temp);
        Operand {
            buf,
            offset: 0,
            strides: labels.iter().copied().zip(rm).collect(),
            labels: labels.to_vec(),
            dtype,
        }
    }

    /// Copies `src` into a new temporary laid out row-major over `order` (the transposing copy
    /// a library call needs when a view does not flatten).
    fn relayout(
        &mut self,
        src: &Operand,
        order: &[usize],
        ext: &[u64],
        origin: &str,
    ) -> (Operand, Kernel) {
        let mut labels = order.to_vec();
        // Labels of extent 1 are not in `order`; keep them so the operand stays complete.
        for &l in &src.labels {
            if !labels.contains(&l) {
                labels.push(l);
            }
        }
        let t = self.temp_operand(&labels, ext, src.dtype);
        let k = self.copy_operand(src, &t, ext, origin);
        (t, k)
    }

    /// `dst = src` over the labels of `dst`, looping in `dst`'s memory order.
    fn copy_operand(&mut self, src: &Operand, dst: &Operand, ext: &[u64], origin: &str) -> Kernel {
        self.next_var = 0;
        let mut labels: Vec<usize> = dst.labels.iter().copied().filter(|&l| ext[l] > 1).collect();
        labels.sort_by_key(|l| std::cmp::Reverse(dst.strides[l]));
        let mut vars = Vec::new();
        let mut var_of = BTreeMap::new();
        for &l in &labels {
            let v = self.fresh_var();
            var_of.insert(l, v);
            vars.push((v, ext[l]));
        }
        let index = |o: &Operand| Index {
            offset: o.offset,
            terms: o
                .strides
                .iter()
                .filter_map(|(l, &s)| var_of.get(l).filter(|_| s != 0).map(|&v| (v, s)))
                .collect(),
        };
        let store = Stmt::Store {
            buf: dst.buf,
            index: index(dst),
            value: Expr::Load {
                buf: src.buf,
                index: index(src),
            },
        };
        let n = vars.len();
        let nest = Nest {
            vars,
            pre: vec![Vec::new(); n + 1],
        };
        Kernel {
            name: format!("k{}", self.out.kernels.len()),
            origin: format!("{origin} (relayout)"),
            source: None,
            body: close_nest(nest, vec![store], true, elem_type(dst.dtype)),
        }
    }

    /// A contraction step as loops: over the result's labels (its memory order), then over the
    /// summed labels, accumulating the product of the operands.
    fn contraction_loops(
        &mut self,
        ops: &[Operand],
        out: &Operand,
        ext: &[u64],
        origin: String,
    ) -> Kernel {
        self.next_var = 0;
        self.next_acc = 0;
        let mut out_labels: Vec<usize> =
            out.labels.iter().copied().filter(|&l| ext[l] > 1).collect();
        out_labels.dedup();
        // Outer loops in decreasing stride of the result, so the innermost store is unit-stride.
        out_labels.sort_by_key(|l| std::cmp::Reverse(out.strides[l]));
        let all: BTreeSet<usize> = ops.iter().flat_map(|o| o.labels.iter().copied()).collect();
        let summed: Vec<usize> = all
            .iter()
            .copied()
            .filter(|l| !out.labels.contains(l) && ext[*l] > 1)
            .collect();
        let mut var_of: BTreeMap<usize, VarId> = BTreeMap::new();
        let mut outer = Vec::new();
        for &l in &out_labels {
            let v = self.fresh_var();
            var_of.insert(l, v);
            outer.push((v, ext[l]));
        }
        let mut inner = Vec::new();
        for &l in &summed {
            let v = self.fresh_var();
            var_of.insert(l, v);
            inner.push((v, ext[l]));
        }
        let index = |o: &Operand| Index {
            offset: o.offset,
            terms: o
                .strides
                .iter()
                .filter_map(|(l, &s)| var_of.get(l).filter(|_| s != 0).map(|&v| (v, s)))
                .collect(),
        };
        let acc_ty = elem_type(out.dtype).compute();
        let mut prod: Option<Expr> = None;
        for o in ops {
            let e = cast_to(
                Expr::Load {
                    buf: o.buf,
                    index: index(o),
                },
                elem_type(o.dtype).compute(),
                acc_ty,
            );
            prod = Some(match prod {
                None => e,
                Some(p) => Expr::Binary(BinOp::Mul, Box::new(p), Box::new(e)),
            });
        }
        let acc = self.fresh_acc();
        let value = prod.unwrap_or(Expr::Const(1.0));
        let n_in = inner.len();
        let reduce_nest = Nest {
            vars: inner,
            pre: vec![Vec::new(); n_in + 1],
        };
        let mut body = vec![Stmt::Let {
            acc,
            ty: acc_ty,
            init: Expr::Const(0.0),
        }];
        body.extend(close_nest(
            reduce_nest,
            vec![Stmt::Update {
                acc,
                op: AccOp::Add,
                value,
            }],
            false,
            elem_type(out.dtype),
        ));
        body.push(Stmt::Store {
            buf: out.buf,
            index: index(out),
            value: Expr::Acc(acc),
        });
        let n_out = outer.len();
        let nest = Nest {
            vars: outer,
            pre: vec![Vec::new(); n_out + 1],
        };
        Kernel {
            name: format!("k{}", self.out.kernels.len()),
            origin,
            source: None,
            body: close_nest(nest, body, true, elem_type(out.dtype)),
        }
    }
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

/// `Σ var·weight·slot_stride + offset` for slot coordinates.
fn coord_index(coords: &[Coord], slot_strides: &[i64], offset: i64) -> Index {
    let mut terms = Vec::new();
    for (c, &s) in coords.iter().zip(slot_strides) {
        let mut w = s;
        for &(v, e) in c.atoms.iter().rev() {
            terms.push((v, w));
            w *= e as i64;
        }
    }
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

fn un_op(f: UnaryFn) -> UnOp {
    match f {
        UnaryFn::Neg => UnOp::Neg,
        UnaryFn::Exp => UnOp::Exp,
        UnaryFn::Log => UnOp::Log,
        UnaryFn::Sqrt => UnOp::Sqrt,
        UnaryFn::Rsqrt => UnOp::Rsqrt,
        UnaryFn::Abs => UnOp::Abs,
        UnaryFn::Tanh => UnOp::Tanh,
        UnaryFn::Sigmoid => UnOp::Sigmoid,
        UnaryFn::Relu => UnOp::Relu,
        UnaryFn::Gelu => UnOp::Gelu,
        UnaryFn::Sin => UnOp::Sin,
        UnaryFn::Cos => UnOp::Cos,
        UnaryFn::Square => UnOp::Square,
        UnaryFn::Erf => UnOp::Erf,
        UnaryFn::GeluErf => UnOp::GeluErf,
        UnaryFn::Silu => UnOp::Silu,
        UnaryFn::Softplus => UnOp::Softplus,
        UnaryFn::Log1p => UnOp::Log1p,
        UnaryFn::Expm1 => UnOp::Expm1,
        UnaryFn::Floor => UnOp::Floor,
        UnaryFn::Ceil => UnOp::Ceil,
        UnaryFn::Round => UnOp::Round,
        UnaryFn::Sign => UnOp::Sign,
    }
}

fn bin_op(f: BinaryFn) -> BinOp {
    match f {
        BinaryFn::Add => BinOp::Add,
        BinaryFn::Sub => BinOp::Sub,
        BinaryFn::Mul => BinOp::Mul,
        BinaryFn::Div => BinOp::Div,
        BinaryFn::Max => BinOp::Max,
        BinaryFn::Min => BinOp::Min,
        BinaryFn::Pow => BinOp::Pow,
        BinaryFn::Lt => BinOp::Lt,
        BinaryFn::Le => BinOp::Le,
        BinaryFn::Gt => BinOp::Gt,
        BinaryFn::Ge => BinOp::Ge,
        BinaryFn::Eq => BinOp::Eq,
        BinaryFn::Ne => BinOp::Ne,
    }
}

/// Sparse formats are evaluated on dense values for now: the planner reads them as dense
/// buffers. (Kept as a function so the sparse issue has one place to change.)
pub fn dense_storage(f: Format) -> bool {
    let _ = f;
    true
}
