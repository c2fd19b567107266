//! Einsums along the contraction path `cost` reports: GEMM library calls for steps that are
//! (batched) matrix products of strided views, relayouts where a view is not, loop nests with an
//! accumulator otherwise.

use super::*;
use crate::plan::cost::GemmGroups;

impl Planner<'_> {
    pub(super) fn lower_einsum(
        &mut self,
        id: NodeId,
        ops: &[NodeId],
        spec: &EinsumSpec,
    ) -> Result<(), Retry> {
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

    /// An einsum operand as labels with strides (a repeated label adds its strides: a
    /// diagonal; a broadcast slot has none).
    pub(super) fn einsum_operand(
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
    pub(super) fn einsum_result(
        &self,
        id: NodeId,
        buf: BufId,
        spec: &EinsumSpec,
        ext: &[u64],
    ) -> Operand {
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
    pub(super) fn gemm_step(
        &mut self,
        ops: &[Operand],
        out: &Operand,
        ext: &[u64],
        origin: &str,
    ) -> Option<Vec<Kernel>> {
        let [a, b] = ops else { return None };
        // Mixed dtypes (an f16 weight times f32 activations) are a GEMM too: the result has the
        // promoted dtype, and the backend converts the narrow operand once while packing it
        // (spec/loop-ir.md, `gemm`). Only a result narrower than its operands is not.
        if out.dtype != DType::promote(a.dtype, b.dtype) {
            return None;
        }
        // Labels summed in only one operand need a separate pass: not a GEMM.
        let GemmGroups { batch, m, n, k } = GemmGroups::of(&a.labels, &b.labels, &out.labels, ext)?;
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
    pub(super) fn temp_operand(&mut self, labels: &[usize], ext: &[u64], dtype: DType) -> Operand {
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
    pub(super) fn relayout(
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

    /// A fresh loop variable for each of `labels` (recorded in `var_of`), with its extent.
    fn label_vars(
        &mut self,
        labels: &[usize],
        ext: &[u64],
        var_of: &mut BTreeMap<usize, VarId>,
    ) -> Vec<(VarId, u64)> {
        labels
            .iter()
            .map(|&l| {
                let v = self.fresh_var();
                var_of.insert(l, v);
                (v, ext[l])
            })
            .collect()
    }

    /// `dst = src` over the labels of `dst`, looping in `dst`'s memory order.
    pub(super) fn copy_operand(
        &mut self,
        src: &Operand,
        dst: &Operand,
        ext: &[u64],
        origin: &str,
    ) -> Kernel {
        self.next_var = 0;
        let mut labels: Vec<usize> = dst.labels.iter().copied().filter(|&l| ext[l] > 1).collect();
        labels.sort_by_key(|l| std::cmp::Reverse(dst.strides[l]));
        let mut var_of = BTreeMap::new();
        let vars = self.label_vars(&labels, ext, &mut var_of);
        let index = |o: &Operand| operand_index(o, &var_of);
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
        let dtype = elem_type(dst.dtype);
        // The kernel passes cache-block a transposing copy (tile-transpose), as for a fused map.
        let body = passes::run_kernel_passes(
            close_nest(nest, vec![store], true, dtype),
            &passes::PassContext {
                compute: dtype.compute(),
                first_free_var: self.next_var,
            },
        );
        Kernel {
            name: format!("k{}", self.out.kernels.len()),
            origin: format!("{origin} (relayout)"),
            source: None,
            body,
        }
    }

    /// A contraction step as loops: over the result's labels (its memory order), then over the
    /// summed labels, accumulating the product of the operands.
    pub(super) fn contraction_loops(
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
        let outer = self.label_vars(&out_labels, ext, &mut var_of);
        let inner = self.label_vars(&summed, ext, &mut var_of);
        let index = |o: &Operand| operand_index(o, &var_of);
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

/// The index of operand `o` over the loop variables of its labels (labels without a variable,
/// of extent 1, and zero strides leave no term).
fn operand_index(o: &Operand, var_of: &BTreeMap<usize, VarId>) -> Index {
    Index {
        offset: o.offset,
        terms: o
            .strides
            .iter()
            .filter_map(|(l, &s)| var_of.get(l).filter(|_| s != 0).map(|&v| (v, s)))
            .collect(),
    }
}
