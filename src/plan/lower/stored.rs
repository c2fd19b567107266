//! Loop nests over stored entries: format-keeping elementwise maps and sampled einsums (SDDMM)
//! that walk a sparse operand's compressed, singleton or 2:4 levels.

use super::*;

impl Planner<'_> {
    /// A format-keeping elementwise op of stored-sparse `of` (`SparseSource::Map`): one loop
    /// nest over `of`'s stored entries writes new values; `ptr` and `idx` are `of`'s. The dense
    /// operand of a binary op is read where each entry lies (broadcast as numpy does).
    pub(super) fn lower_map(&mut self, id: NodeId, of: NodeId) -> Result<SparseOperand, Retry> {
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
        let name = self.temp_name();
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
        let (loops, pos, coords) = tdsl_loop::entries::stored_loops(&s, &mut || self.fresh_var());
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
            (NodeKind::Unary(f, _), None, _) => Expr::Unary(*f, Box::new(sv)),
            (NodeKind::Cast(_), None, _) => Expr::Cast(elem_type(node.ty.dtype), Box::new(sv)),
            (NodeKind::Binary(f, _, _), Some(dv), Some(k)) => {
                let (a, b) = if k == 1 { (sv, dv) } else { (dv, sv) };
                Expr::Binary(*f, Box::new(a), Box::new(b))
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
    pub(super) fn sampled_sum(
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
}
