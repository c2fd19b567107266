//! Sparse values: which are stored compressed, where a dense copy is needed, the buffers of
//! the compressed arrays, and sparse × dense products as `SpMM` library calls.

use super::*;

impl Planner<'_> {
    /// Whether node `id` (resolved) is stored sparse.
    pub(super) fn sparse_stored(&self, id: NodeId) -> bool {
        stored_sparse(self.p, self.resolve(id)).is_some()
    }

    /// Decides which stored-sparse values are also needed densely (every use that is not a
    /// sparse product or a view of the same storage, and outputs), and which values `sparsify`
    /// reads (materialised, row-major).
    pub(super) fn find_dense_uses(&mut self, live: &[NodeId]) {
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
    pub(super) fn sparse_buffers(
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
    pub(super) fn push_call(&mut self, call: LibCall, origin: &str) {
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
    pub(super) fn lower_sparse(&mut self, id: NodeId) -> Result<(), Retry> {
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
                let name = self.temp_name();
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

    /// A sparse-dense product as one `SpMM` call. Dense operands are first copied (and cast)
    /// where the kernel's layout needs it: unit stride along the columns of `d` and `c`, in
    /// the compute type (f32, or f64 when the result is f64).
    pub(super) fn lower_spmm(&mut self, id: NodeId, sp: &SparseProduct) -> Result<(), Retry> {
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
        // 2:4 products take any strides (the backends expand or transpose as they need): no
        // relayout copies for them, only views that flatten.
        let any_stride = matches!(s.layout, SparseLayout::TwoFour { axis: 1 });
        let unit = |o: &Operand, order: &[usize]| -> bool {
            // The trailing label (or group) has stride 1 and the leading part flattens.
            let (rows, cols) = match sp.side {
                Side::Left => (&order[..1], &order[1..]),
                Side::Right => (&order[..order.len() - 1], &order[order.len() - 1..]),
            };
            let c_ok = cols.iter().all(|&l| ext[l] <= 1)
                || o.flat(cols, &ext) == Some(1)
                || (any_stride && o.flat(cols, &ext).is_some());
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
}
