//! Fused loop nests: a materialised value's kernel, with every injective value it reads
//! inlined as an expression and single-use reductions as accumulators placed where their loop
//! variables are bound.

use super::*;

/// Where a kernel stores: a buffer laid out as node `node`'s value, from element `offset` on.
pub(super) struct Target {
    buf: BufId,
    node: NodeId,
    offset: i64,
}

impl Planner<'_> {
    /// Root atoms for a materialised node: one per output slot, split further where the node
    /// itself is a pattern whose output slots compose several elementary axes.
    pub(super) fn root_atoms(&self, id: NodeId) -> Vec<Vec<u64>> {
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

    pub(super) fn lower_fused(&mut self, id: NodeId) -> Result<(), Retry> {
        if let Some(kernels) = self.try_outer_reduce(id)? {
            self.out.kernels.extend(kernels);
            return Ok(());
        }
        let target = Target {
            buf: self.mat[&id],
            node: id,
            offset: 0,
        };
        self.lower_into(id, true, target)
    }

    /// `pack`: one kernel per part, each storing the part's values at its offset along the
    /// packed axis of the concatenation's buffer.
    pub(super) fn lower_concat(
        &mut self,
        id: NodeId,
        axis: usize,
        parts: &[NodeId],
    ) -> Result<(), Retry> {
        let strides = row_major(&self.extents(id));
        let mut start = 0i64;
        for &part in parts {
            let part = self.resolve(part);
            let target = Target {
                buf: self.mat[&id],
                node: id,
                offset: start * strides[axis],
            };
            self.lower_into(part, false, target)?;
            start += self.extents(part)[axis] as i64;
        }
        Ok(())
    }

    /// The kernel computing `value` (all of it; `root` when it is the node being materialised)
    /// and storing it into `target`, splitting loops where patterns need finer axes.
    fn lower_into(&mut self, value: NodeId, root: bool, target: Target) -> Result<(), Retry> {
        let mut atoms = self.root_atoms(value);
        // Every split adds an atom; more than an axis list can hold means no progress.
        for _ in 0..MAX_SPLITS {
            match self.try_fused(value, root, &target, &atoms) {
                Ok(k) => {
                    let kernels = self.reduction_parts(k);
                    self.out.kernels.extend(kernels);
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

    pub(super) fn try_fused(
        &mut self,
        id: NodeId,
        root: bool,
        target: &Target,
        atoms: &[Vec<u64>],
    ) -> Result<Kernel, Retry> {
        self.next_var = 0;
        self.next_acc = 0;
        self.reductions.clear();
        self.acc_place.clear();
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
        let value = self.build(id, &coords, root);
        let nest = self.env.pop().expect("root nest");
        let value = value?;
        // Store index: row-major over the target's slots, each slot row-major over its atoms.
        let slot_strides = row_major(&self.extents(target.node));
        let index = coord_index(&coords, &slot_strides, target.offset);
        let dtype = elem_type(self.p.node(target.node).ty.dtype);
        let store = Stmt::Store {
            buf: target.buf,
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
        let body = passes::reuse_stored_values(body, &|b| self.out.buffers[b.0 as usize].ty);
        Ok(Kernel {
            name: format!("k{}", self.out.kernels.len()),
            origin: self.origin(target.node),
            source: None,
            body,
        })
    }

    /// Compute type of a node's value inside a kernel.
    pub(super) fn expr_ty(&self, id: NodeId) -> ElemType {
        elem_type(self.p.node(id).ty.dtype).compute()
    }

    /// The expression for node `id` at slot coordinates `coords`. `root` is true for the node
    /// being materialised by this kernel (which must be computed, not loaded).
    pub(super) fn build(
        &mut self,
        id: NodeId,
        coords: &[Coord],
        root: bool,
    ) -> Result<Expr, Retry> {
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
                self.once_per_element(id, root, Expr::Unary(*f, Box::new(xe)))
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
                self.once_per_element(id, root, Expr::Binary(*f, Box::new(ea), Box::new(eb)))
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
            NodeKind::Slice { x, axis, start } => {
                // A window of a materialised value: a load at an offset.
                let x = self.resolve(*x);
                let Some(&b) = self.mat.get(&x) else {
                    return Err(Retry::Materialise(x));
                };
                let strides = row_major(&self.extents(x));
                Ok(Expr::Load {
                    buf: b,
                    index: coord_index(coords, &strides, *start as i64 * strides[*axis]),
                })
            }
            NodeKind::Einsum { .. } | NodeKind::Sparsify { .. } | NodeKind::Concat { .. } => {
                Err(Retry::Materialise(id))
            }
        }
    }

    /// `e`, the value of elementwise node `id`, unless it is costly (a transcendental function,
    /// a square root, a division or a power) and the loops around it repeat it: loops of 8 or
    /// more iterations in all whose variables it does not use (`around` below), as `sqrt(var + eps)` of a
    /// channel's variance inside the loop over the batch. Such a node gets its own buffer, one
    /// evaluation per element of its value, and is loaded here (XLA sinks the broadcast below
    /// the operation for the same reason). A value that reads an accumulator is left to the
    /// loop passes, which hoist it to where the accumulator is complete.
    fn once_per_element(&mut self, id: NodeId, root: bool, e: Expr) -> Result<Expr, Retry> {
        const REPEATS: u64 = 8;
        let costly = match &self.p.node(id).kind {
            NodeKind::Unary(f, _) => f.is_costly(),
            NodeKind::Binary(f, _, _) => matches!(f, BinOp::Div | BinOp::Pow),
            _ => false,
        };
        if root || !costly || self.must.contains(&id) || self.mat.contains_key(&id) {
            return Ok(e);
        }
        let (mut used, mut reads_acc) = (BTreeSet::new(), false);
        e.visit(&mut |x| match x {
            Expr::Acc(_) => reads_acc = true,
            Expr::Load { index, .. } | Expr::Iota(index) => {
                used.extend(index.terms.iter().filter(|t| t.1 != 0).map(|t| t.0))
            }
            _ => {}
        });
        // The loops around it: outside any reduction, every loop of the kernel's nest; inside
        // one, the reduction's own loops and those enclosing the place its accumulator goes,
        // taken as the deepest enclosing loop this value uses (views.rs places a reduction
        // there, and gives it a buffer when other loops would repeat it). The loops of an
        // enclosing reduction that the value does not use are not around it: `lse`'s sum of
        // `exp(x − m)` inside the sum over the vocabulary that reads `lse` is placed before it.
        let last = self.env.len() - 1;
        let mut place = (0usize, 0usize);
        for (k, n) in self.env[..last].iter().enumerate() {
            for (d, (v, _)) in n.vars.iter().enumerate() {
                if used.contains(v) {
                    place = place.max((k, d + 1));
                }
            }
        }
        let around: Vec<(VarId, u64)> = match last {
            0 => self.env[0].vars.clone(),
            _ => {
                let (k, d) = place;
                let enclosing = self.env[..=k].iter().enumerate().flat_map(|(j, n)| {
                    let upto = if j == k { d } else { n.vars.len() };
                    n.vars[..upto].iter().copied()
                });
                enclosing
                    .chain(self.env[last].vars.iter().copied())
                    .collect()
            }
        };
        let repeats = around
            .iter()
            .filter(|(v, _)| !used.contains(v))
            .fold(1u64, |r, (_, e)| r.saturating_mul(*e));
        match repeats >= REPEATS && !reads_acc {
            true => Err(Retry::Materialise(id)),
            false => Ok(e),
        }
    }

    /// The value of a weak scalar expression (literals, sizes and arithmetic on them), computed
    /// exactly as the reference interpreter does.
    pub(super) fn weak_value(&self, id: NodeId) -> Option<f64> {
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
    pub(super) fn build_operand(
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
    pub(super) fn load(&self, buf: BufId, id: NodeId, coords: &[Coord]) -> Expr {
        let strides = row_major(&self.extents(id));
        Expr::Load {
            buf,
            index: coord_index(coords, &strides, 0),
        }
    }
}
