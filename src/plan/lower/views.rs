//! Rearranges as strided views: loads through patterns, splits of loop coordinates when a
//! pattern needs finer axes, and plain copies.

use super::*;

impl Planner<'_> {
    pub(super) fn build_pattern(
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
        // Loops enclosing the placement that the reduction does not use would recompute it at
        // each of their iterations: `x - mean(x over b)` fused into the loop over `b` reads
        // all of `x` once per row. Such a reduction gets its own buffer instead (a pass over
        // its input, then a load), unless it is the value this kernel materialises.
        let repeats = self.env[..=k]
            .iter()
            .enumerate()
            .flat_map(|(j, n)| {
                let upto = if j == k { d } else { n.vars.len() };
                n.vars[..upto].iter().copied()
            })
            .filter(|(v, _)| !used.contains(v))
            .fold(1u64, |r, (_, e)| r.saturating_mul(e));
        if repeats > 1 && !self.must.contains(&id) && !self.mat.contains_key(&id) {
            return Err(Retry::Materialise(id));
        }
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
    pub(super) fn split_coord(
        &self,
        c: &Coord,
        exts: &[u64],
        pattern: NodeId,
    ) -> Result<Vec<Coord>, Retry> {
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
    pub(super) fn refine(
        &self,
        v: VarId,
        a: u64,
        need: u64,
        pattern: NodeId,
    ) -> Result<Vec<Coord>, Retry> {
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
    pub(super) fn copy_kernel(
        &mut self,
        src: BufId,
        dst: BufId,
        ext: &[u64],
        origin: &str,
    ) -> Kernel {
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

    /// A strided view of a node for einsum: its buffer if materialised, or a rearrange of a
    /// view. Anything else must be materialised first.
    pub(super) fn view_of(&self, id: NodeId) -> Result<View, Retry> {
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
}
