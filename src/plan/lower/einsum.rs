//! Einsums along the contraction path `cost` reports: GEMM library calls for steps that are
//! (batched) matrix products of strided views, relayouts where a view is not, loop nests with an
//! accumulator otherwise.

use super::reduce::split_var;
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
                // Intermediates carry the einsum's result dtype (f64 if any operand is f64).
                let buf = self.add_temp(out_dtype, elems);
                Operand {
                    buf,
                    offset: 0,
                    strides: labels.iter().copied().zip(rm).collect(),
                    labels,
                    dtype: out_dtype,
                }
            };
            let origin = format!("{} step {}/{}", self.origin(id), si + 1, n_steps);
            match self.gemm_step(&taken, &result, &ext, &origin) {
                Some(kernels) => self.out.kernels.extend(kernels),
                None => {
                    let ks = self.contraction_loops(&taken, &result, &ext, origin);
                    self.out.kernels.extend(ks);
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
        let mut groups = GemmGroups::of(&a.labels, &b.labels, &out.labels, ext)?;
        groups.rebatch(
            ext,
            &|g| a.flat(g, ext).is_some(),
            &|g| b.flat(g, ext).is_some(),
            &|g| out.flat(g, ext).is_some(),
        );
        let GemmGroups { batch, m, n, k } = groups;
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
        // A batch label one operand lacks (moved there by `rebatch`) is not in its copy.
        let own = |o: &Operand| -> Vec<usize> {
            batch
                .iter()
                .copied()
                .filter(|l| o.strides.contains_key(l))
                .collect()
        };
        let a = match (flat(a, &m), flat(a, &k)) {
            (Some(_), Some(_)) => a.clone(),
            _ => {
                let (t, kern) = self.relayout(a, &cat(&own(a), &m, &k), ext, origin);
                kernels.push(kern);
                t
            }
        };
        let b = match (flat(b, &k), flat(b, &n)) {
            (Some(_), Some(_)) => b.clone(),
            _ => {
                let (t, kern) = self.relayout(b, &cat(&own(b), &k, &n), ext, origin);
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
        let bs = |o: &Operand| {
            batch
                .iter()
                .map(|l| o.strides.get(l).copied().unwrap_or(0))
                .collect::<Vec<i64>>()
        };
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
        let buf = self.add_temp(dtype, le.iter().product());
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
    /// summed labels, accumulating the product of the operands; or, when the largest operand
    /// is contiguous along a result label, [`Planner::contraction_in_output`].
    pub(super) fn contraction_loops(
        &mut self,
        ops: &[Operand],
        out: &Operand,
        ext: &[u64],
        origin: String,
    ) -> Vec<Kernel> {
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
        if let Some(l) = streaming_label(ops, ext) {
            let holds_sums = matches!(out.dtype, DType::F32 | DType::F64);
            // (Below 64 the inner loop is too short to pay for a second kernel.)
            let long = ext[l] >= 64;
            if out_labels.contains(&l)
                && out.strides[&l] == 1
                && !summed.is_empty()
                && holds_sums
                && long
            {
                return self.contraction_in_output(
                    ops,
                    out,
                    ext,
                    &origin,
                    (&out_labels, &summed),
                    l,
                );
            }
        }
        let mut var_of: BTreeMap<usize, VarId> = BTreeMap::new();
        let outer = self.label_vars(&out_labels, ext, &mut var_of);
        let inner = self.label_vars(&summed, ext, &mut var_of);
        let index = |o: &Operand| operand_index(o, &var_of);
        let acc_ty = elem_type(out.dtype).compute();
        let value = product(ops, acc_ty, &index);
        let acc = self.fresh_acc();
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
        vec![Kernel {
            name: format!("k{}", self.out.kernels.len()),
            origin,
            source: None,
            body: close_nest(nest, body, true, elem_type(out.dtype)),
        }]
    }

    /// A contraction whose largest operand is contiguous along result label `inner` (`x @ W`
    /// for one vector `x`: `i, i o -> o`): summing into one accumulator per result element
    /// would walk that operand across its rows, one element per cache line (a 4096² `x @ W`
    /// took 51 ms). Instead the result accumulates in place while the loops walk the operand in
    /// memory order: the other result labels (split across threads), the summed labels, then
    /// `inner`, vectorised. With no other result label, [`Planner::split_sum`] splits the
    /// outermost summed label across threads instead. Only for f32/f64 results, which hold
    /// the running sums.
    fn contraction_in_output(
        &mut self,
        ops: &[Operand],
        out: &Operand,
        ext: &[u64],
        origin: &str,
        (out_labels, summed): (&[usize], &[usize]),
        inner: usize,
    ) -> Vec<Kernel> {
        let ty = elem_type(out.dtype);
        // The summed labels in the streaming operand's memory order.
        let big = largest(ops, ext);
        let mut summed = summed.to_vec();
        summed.sort_by_key(|l| {
            std::cmp::Reverse(big.and_then(|o| o.strides.get(l)).map_or(0, |s| s.abs()))
        });
        if out_labels == [inner] {
            if let Some(ks) = self.split_sum(ops, out, ext, origin, &summed, inner) {
                return ks;
            }
        }
        let mut var_of = BTreeMap::new();
        let vars = self.label_vars(out_labels, ext, &mut var_of);
        let fill = self.zero_kernel(out, &var_of, vars, &format!("{origin} (init)"));
        self.next_var = 0;
        let mut var_of = BTreeMap::new();
        let others: Vec<usize> = out_labels.iter().copied().filter(|&l| l != inner).collect();
        let parallel = !others.is_empty();
        let mut order = self.label_vars(&others, ext, &mut var_of);
        order.extend(self.label_vars(&summed, ext, &mut var_of));
        order.extend(self.label_vars(&[inner], ext, &mut var_of));
        let index = |o: &Operand| operand_index(o, &var_of);
        let at = index(out);
        let step = accumulate(out.buf, at, product(ops, ty.compute(), &index));
        let accumulate = Kernel {
            name: format!("k{}", self.out.kernels.len() + 1),
            origin: origin.to_string(),
            source: None,
            body: close_nest(flat_nest(order), vec![step], parallel, ty),
        };
        vec![fill, accumulate]
    }

    /// [`Planner::contraction_in_output`] for a result with one label (`inner`): the outermost
    /// summed label is cut into `P` chunks that run side by side, each summing into its own row
    /// of a `P × inner` temporary (zeroed by the same thread, and small enough for L1/L2), and a
    /// second kernel adds the `P` rows into the result. Each thread then streams whole rows of
    /// the operand (a 4096² `x @ W`: 2.2 ms on one thread walking rows, against 3.5 ms on two
    /// threads each walking a column tile, 4 KiB of every 16 KiB row). `None` when the label's
    /// extent has no divisor from 2 to 8 leaving chunks of at least 16.
    fn split_sum(
        &mut self,
        ops: &[Operand],
        out: &Operand,
        ext: &[u64],
        origin: &str,
        summed: &[usize],
        inner: usize,
    ) -> Option<Vec<Kernel>> {
        let (&first, rest) = summed.split_first()?;
        let k = ext[first];
        let parts = (2..=8u64)
            .rev()
            .find(|p| k.is_multiple_of(*p) && k / p >= 16)?;
        let (e, ty) = (ext[inner], elem_type(out.dtype));
        let part = self.add_temp(out.dtype, parts * e);
        self.next_var = 0;
        let mut var_of = BTreeMap::new();
        let (vp, vz) = (self.fresh_var(), self.fresh_var());
        let mut order = vec![(vp, parts)];
        let chunk = self.label_vars(&[first], ext, &mut var_of)[0].0;
        order.push((chunk, k / parts));
        order.extend(self.label_vars(rest, ext, &mut var_of));
        order.extend(self.label_vars(&[inner], ext, &mut var_of));
        let vi = var_of[&inner];
        let row = |v: VarId| Index {
            offset: 0,
            terms: vec![(vp, e as i64), (v, 1)],
        };
        // The chunk's own label at `vp·(k/P) + chunk`.
        let index =
            |o: &Operand| split_var(&operand_index(o, &var_of), chunk, (vp, chunk, k / parts));
        let step = accumulate(part, row(vi), product(ops, ty.compute(), &index));
        let zero = close_nest(
            flat_nest(vec![(vz, e)]),
            vec![Stmt::Store {
                buf: part,
                index: row(vz),
                value: Expr::Const(0.0),
            }],
            false,
            ty,
        );
        let mut nest = flat_nest(order);
        nest.pre[1] = zero;
        let partial = Kernel {
            name: format!("k{}", self.out.kernels.len()),
            origin: format!("{origin} ({parts} partial sums)"),
            source: None,
            body: close_nest(nest, vec![step], true, ty),
        };
        // out[o] = part[0, o] + … + part[P − 1, o]
        self.next_var = 0;
        let mut var_of = BTreeMap::new();
        let vars = self.label_vars(&[inner], ext, &mut var_of);
        let vo = var_of[&inner];
        let sum = (0..parts as i64)
            .map(|p| Expr::Load {
                buf: part,
                index: Index {
                    offset: p * e as i64,
                    terms: vec![(vo, 1)],
                },
            })
            .reduce(|a, b| Expr::Binary(BinOp::Add, Box::new(a), Box::new(b)))?;
        let combine = Kernel {
            name: format!("k{}", self.out.kernels.len() + 1),
            origin: origin.to_string(),
            source: None,
            body: close_nest(
                flat_nest(vars),
                vec![Stmt::Store {
                    buf: out.buf,
                    index: operand_index(out, &var_of),
                    value: sum,
                }],
                true,
                ty,
            ),
        };
        Some(vec![partial, combine])
    }

    /// `out = 0` over the variables `vars` (bound to `out`'s labels in `var_of`).
    fn zero_kernel(
        &self,
        out: &Operand,
        var_of: &BTreeMap<usize, VarId>,
        vars: Vec<(VarId, u64)>,
        origin: &str,
    ) -> Kernel {
        let zero = Stmt::Store {
            buf: out.buf,
            index: operand_index(out, var_of),
            value: Expr::Const(0.0),
        };
        Kernel {
            name: format!("k{}", self.out.kernels.len()),
            origin: origin.to_string(),
            source: None,
            body: close_nest(flat_nest(vars), vec![zero], true, elem_type(out.dtype)),
        }
    }
}

/// A nest of `vars` with nothing hoisted.
fn flat_nest(vars: Vec<(VarId, u64)>) -> Nest {
    let n = vars.len();
    Nest {
        vars,
        pre: vec![Vec::new(); n + 1],
    }
}

/// `buf[at] = buf[at] + value`.
fn accumulate(buf: BufId, at: Index, value: Expr) -> Stmt {
    Stmt::Store {
        buf,
        index: at.clone(),
        value: Expr::Binary(
            BinOp::Add,
            Box::new(Expr::Load { buf, index: at }),
            Box::new(value),
        ),
    }
}

/// The product of the operands' loads, each widened (or cast) to `ty`.
fn product(ops: &[Operand], ty: ElemType, index: &impl Fn(&Operand) -> Index) -> Expr {
    ops.iter()
        .map(|o| {
            let load = Expr::Load {
                buf: o.buf,
                index: index(o),
            };
            cast_to(load, elem_type(o.dtype).compute(), ty)
        })
        .reduce(|p, e| Expr::Binary(BinOp::Mul, Box::new(p), Box::new(e)))
        .unwrap_or(Expr::Const(1.0))
}

/// The operand with the most elements (the one whose memory order the loops should follow).
fn largest<'a>(ops: &'a [Operand], ext: &[u64]) -> Option<&'a Operand> {
    ops.iter()
        .max_by_key(|o| o.labels.iter().map(|&l| ext[l]).product::<u64>())
}

/// The label along which the largest operand is contiguous, if any.
fn streaming_label(ops: &[Operand], ext: &[u64]) -> Option<usize> {
    let big = largest(ops, ext)?;
    big.strides
        .iter()
        .find(|&(&l, &s)| s == 1 && ext[l] > 1)
        .map(|(&l, _)| l)
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
