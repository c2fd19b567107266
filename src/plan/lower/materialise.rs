//! Which values get a buffer, and the order they are planned in: the planner's main loop
//! (`run`), live values, the recompute limit, output copies, and the source of every kernel.

use super::*;

impl Planner<'_> {
    /// A buffer per dense input, and the part buffers of each sparse one.
    fn input_buffers(&mut self) {
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
    }

    pub(super) fn run(&mut self) -> Result<(), Diagnostic> {
        let p = self.p;
        self.input_buffers();
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
                NodeKind::Einsum { .. } | NodeKind::Concat { .. } => {
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
    pub(super) fn output_copy(&mut self, k: usize, src: Option<NodeId>) {
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
    pub(super) fn source_of(&self, id: NodeId) -> SourceRef {
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
    pub(super) fn tag_sources(&mut self, from: usize, source: SourceRef) {
        for k in self.out.kernels.iter_mut().skip(from) {
            k.source.get_or_insert(source);
        }
    }

    /// The diagnostic for a planner invariant that failed while lowering node `id`.
    pub(super) fn stuck(&self, id: NodeId, what: &str) -> Diagnostic {
        planner_bug(format!("planning stopped: {what}"))
            .label(self.p.node(id).span, "while planning this expression")
    }

    /// Nodes reachable from the outputs, in evaluation order.
    pub(super) fn live_nodes(&self) -> Vec<NodeId> {
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
    pub(super) fn limit_recompute(&mut self, live: &[NodeId]) {
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

    pub(super) fn lower_node(&mut self, id: NodeId) -> Result<(), Retry> {
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
            NodeKind::Concat { axis, parts } => {
                let (axis, parts) = (*axis, parts.clone());
                self.lower_concat(id, axis, &parts)
            }
            _ => self.lower_fused(id),
        }
    }
}
