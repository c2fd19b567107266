//! Reductions over outer axes, accumulated in the output while the input is read in memory
//! order, and the small fill and map kernels around them.

use super::*;

/// For an outer reduction: the input's innermost elementary axis of extent > 1 (kept, and at
/// least 8 long) and the output's elementary axes of extent > 1, in order, ending with it;
/// `None` when the reduction is not of that shape.
fn outer_reduce_axes(r: &Recipe) -> Option<(usize, Vec<usize>)> {
    let big = |i: usize| r.in_elems[i] > 1;
    let inner = r
        .in_groups
        .iter()
        .flatten()
        .copied()
        .rev()
        .find(|&i| big(i))?;
    if r.reduced.contains(&inner) || !r.reduced.iter().any(|&i| big(i)) {
        return None;
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
    (out_elems.last() == Some(&inner) && r.in_elems[inner] >= 8).then_some((inner, out_elems))
}

/// `ix` with variable `v` split into `vo·t + vi`.
pub(super) fn split_var(ix: &Index, v: VarId, (vo, vi, t): (VarId, VarId, u64)) -> Index {
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
}

/// `ix` at `v = 4·vo + j`.
fn step_var(ix: &Index, v: VarId, vo: VarId, j: i64) -> Index {
    let sv = ix.stride_of(v);
    let mut terms: Vec<(VarId, i64)> = ix.terms.iter().filter(|t| t.0 != v).copied().collect();
    if sv != 0 {
        terms.push((vo, 4 * sv));
    }
    Index {
        offset: ix.offset + j * sv,
        terms,
    }
}

/// The loops of an outer reduction ([`Planner::outer_reduce_order`]): in order, the split of a
/// variable into a tile `(var, outer, inner, tile)`, whether the outermost loop may run in
/// parallel, and the one reduced loop a tile of kept rows sits inside.
struct OuterOrder {
    order: Vec<(VarId, u64)>,
    subst: Option<(VarId, VarId, VarId, u64)>,
    parallel_ok: bool,
    one_reduced: Option<(VarId, u64)>,
    /// With no kept outer axis: the outermost reduced loop cut into parts, each summing its
    /// slab of rows into its own partial result (the part's variable and the count of parts).
    parts: Option<(VarId, u64)>,
}

/// The most parts an outer reduction with no kept outer axis is cut into ([`OuterOrder::parts`]):
/// enough for 16 threads, each part at least [`PART_ROWS`] rows.
const PARTS: u64 = 16;
const PART_ROWS: u64 = 4;

impl Planner<'_> {
    /// A reduction over axes that are not the input's innermost one, where the output's innermost
    /// axis is the input's innermost: instead of one strided accumulator per output element, the
    /// output itself accumulates while the loops walk the input in memory order (kept axes, then
    /// reduced axes, then the innermost axis, vectorised). Three kernels: the identity, the
    /// accumulation, and for `mean` the division. Only for f32/f64 outputs, which can hold the
    /// running value without losing precision.
    pub(super) fn try_outer_reduce(&mut self, id: NodeId) -> Result<Option<Vec<Kernel>>, Retry> {
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
        let Some((inner, out_elems)) = outer_reduce_axes(r) else {
            return Ok(None);
        };
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
        let OuterOrder {
            mut order,
            subst,
            parallel_ok,
            one_reduced,
            parts,
        } = self.outer_reduce_order(r, &out_elems, inner, &var);
        let mut out_index = out_index;
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
            let split = |ix: &Index| split_var(ix, v, (vo, vi, t));
            xe = xe.map_indices(&split);
            out_index = split(&out_index);
        }
        if nest.pre.iter().any(|p| !p.is_empty()) {
            // Nested reductions inside: leave it to the general path.
            return Ok(None);
        }
        if let Some(one) = one_reduced {
            xe = self.four_steps(xe, bop, one, &mut order);
        }
        // With parts, each part accumulates into its own row of a partial buffer.
        let total: u64 = self.extents(id).iter().product();
        let (acc_buf, acc_index) = match parts {
            Some((vo, p)) => {
                let b = self.add_temp(node.ty.dtype, p * total);
                let mut ix = out_index.clone();
                ix.terms.push((vo, total as i64));
                (b, ix)
            }
            None => (buf, out_index.clone()),
        };
        let acc = Stmt::Store {
            buf: acc_buf,
            index: acc_index.clone(),
            value: Expr::Binary(
                bop,
                Box::new(Expr::Load {
                    buf: acc_buf,
                    index: acc_index,
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
        let Some((_, p)) = parts else {
            return Ok(Some(self.outer_reduce_kernels(
                id,
                buf,
                (init, *op, count),
                accumulate,
            )));
        };
        // The parts' identity, their accumulation, then the output as the reduction of the
        // parts (in part order), and for `mean` the division.
        let origin = self.origin(id);
        let parts_init = self.fill_kernel(
            acc_buf,
            &[p, total],
            Expr::Const(init),
            &format!("{origin} (parts init)"),
        );
        let combine = self.combine_kernel(buf, acc_buf, (p, total), bop, &origin);
        let mut kernels = vec![parts_init, accumulate];
        kernels.extend(self.outer_reduce_kernels(id, buf, (init, *op, count), combine));
        Ok(Some(kernels))
    }

    /// `out[c] = op(out[c], parts[q, c])` for each part `q` in order, over `c` of `total`.
    fn combine_kernel(
        &mut self,
        out: BufId,
        parts: BufId,
        (p, total): (u64, u64),
        bop: BinOp,
        origin: &str,
    ) -> Kernel {
        self.next_var = 0;
        let (nest, coords) = self.plain_nest(&[p, total]);
        let part = coord_index(&coords, &row_major(&[p, total]), 0);
        let at = coord_index(&coords[1..], &[1], 0);
        let ty = self.out.buffers[out.0 as usize].ty;
        let value = Expr::Binary(
            bop,
            Box::new(Expr::Load {
                buf: out,
                index: at.clone(),
            }),
            Box::new(Expr::Load {
                buf: parts,
                index: part,
            }),
        );
        Kernel {
            name: String::new(),
            origin: format!("{origin} (combine parts)"),
            source: None,
            // The part loop is outermost and carries the output: not split across threads.
            body: close_nest(
                nest,
                vec![Stmt::Store {
                    buf: out,
                    index: at,
                    value,
                }],
                false,
                ty,
            ),
        }
    }

    /// The loops of an outer reduction: kept outer axes, reduced axes, then the innermost
    /// axis. With no kept outer axis, the innermost is tiled so the outermost loop can still be
    /// split across threads; with reduced axes outside the last kept one, a tile of kept rows
    /// moves inside them.
    fn outer_reduce_order(
        &mut self,
        r: &Recipe,
        out_elems: &[usize],
        inner: usize,
        var: &BTreeMap<usize, (VarId, u64)>,
    ) -> OuterOrder {
        let mut order: Vec<(VarId, u64)> = out_elems[..out_elems.len() - 1]
            .iter()
            .map(|i| var[i])
            .collect();
        let mut reduced: Vec<(VarId, u64)> = r
            .reduced
            .iter()
            .filter(|&&i| r.in_elems[i] > 1)
            .map(|i| var[i])
            .collect();
        let (iv, ie) = var[&inner];
        let mut inner_loops = vec![(iv, ie)];
        let mut subst = None;
        let mut row_tile = false;
        // No kept outer axis (`b c -> c`): the outermost reduced loop is cut into parts that
        // threads take whole, each reading a contiguous slab of rows into its own partial
        // result (tiles of 64 output columns had every thread read every row in 256-byte
        // pieces at the row stride: about half the bandwidth of a stream).
        let cut = match (order.is_empty(), reduced.first()) {
            (true, Some(&(rv, re))) => (2..=PARTS.min(re / PART_ROWS))
                .rev()
                .find(|p| re.is_multiple_of(*p))
                .map(|p| (rv, re, p)),
            _ => None,
        };
        let mut parts = None;
        if let Some((rv, re, p)) = cut {
            let (vo, vi) = (self.fresh_var(), self.fresh_var());
            order.push((vo, p));
            reduced[0] = (vi, re / p);
            subst = Some((rv, vo, vi, re / p));
            parts = Some((vo, p));
        } else if order.is_empty() && ie.is_multiple_of(64) && ie >= 128 {
            let (vo, vi) = (self.fresh_var(), self.fresh_var());
            order.push((vo, ie / 64));
            inner_loops = vec![(vi, 64)];
            subst = Some((iv, vo, vi, 64));
        } else if let Some((kv, t)) = self.kept_row_tile(r, out_elems, var) {
            // The reduced axes lie outside the last kept one in memory (`a b c -> b c`): walking
            // kept, reduced, inner would jump a whole slab per row. A tile of `t` kept rows
            // moves inside the reduced loops, so each step reads `t` adjacent rows.
            let (vo, vi) = (self.fresh_var(), self.fresh_var());
            let last = order.pop().map_or(0, |(_, e)| e);
            order.push((vo, last / t));
            inner_loops.insert(0, (vi, t));
            subst = Some((kv, vo, vi, t));
            row_tile = true;
        }
        let parallel_ok = !order.is_empty();
        let one_reduced = match reduced.as_slice() {
            [r] if row_tile => Some(*r),
            _ => None,
        };
        order.extend(reduced);
        order.extend(inner_loops);
        OuterOrder {
            order,
            subst,
            parallel_ok,
            one_reduced,
            parts,
        }
    }

    /// A tile of kept rows inside one reduced loop `(rv, re)`: that loop takes 4 of its steps
    /// at a time, combined pairwise before the accumulator, so the tile is read and written a
    /// quarter as often and 4 input rows stream at once (`reduce_axes`' `ra`). `xe` unchanged
    /// when the loop is too short or not a multiple of 4.
    fn four_steps(
        &mut self,
        xe: Expr,
        bop: BinOp,
        (rv, re): (VarId, u64),
        order: &mut [(VarId, u64)],
    ) -> Expr {
        if re % 4 != 0 || re < 8 {
            return xe;
        }
        let ro = self.fresh_var();
        let part = |j: i64| Box::new(xe.map_indices(&|ix| step_var(ix, rv, ro, j)));
        for o in order.iter_mut().filter(|o| o.0 == rv) {
            *o = (ro, re / 4);
        }
        Expr::Binary(
            bop,
            Box::new(Expr::Binary(bop, part(0), part(1))),
            Box::new(Expr::Binary(bop, part(2), part(3))),
        )
    }

    /// For an outer reduction whose reduced axes lie outside its last kept axis in the input's
    /// memory order: that axis's variable and a tile of its rows (a divisor of its extent, the
    /// tile about 64 KiB of input, at least two tiles) to walk inside the reduced loops. The
    /// accumulator tile lives in L2; each reduced step then reads 64 KiB in a row, which the
    /// prefetchers keep up with better than 16 KiB runs (`reduce_axes`' `ra`: 2.4 → 2.0 ms;
    /// 32 KiB measured 2.3, 128 KiB 2.0–2.1).
    fn kept_row_tile(
        &self,
        r: &Recipe,
        out_elems: &[usize],
        var: &BTreeMap<usize, (VarId, u64)>,
    ) -> Option<(VarId, u64)> {
        let [.., kept, inner] = out_elems else {
            return None;
        };
        let pos = |i: usize| r.in_groups.iter().flatten().position(|&e| e == i);
        let reduced_outside = r
            .reduced
            .iter()
            .filter(|&&i| r.in_elems[i] > 1)
            .all(|&i| pos(i) < pos(*kept));
        let (kv, ke) = var[kept];
        let row_bytes = r.in_elems[*inner] * 4;
        let want = (65536 / row_bytes.max(1)).max(2);
        let t = (2..=want.min(ke / 2))
            .rev()
            .find(|t| ke.is_multiple_of(*t))?;
        reduced_outside.then_some((kv, t))
    }

    /// The identity fill before an outer reduction's accumulation and, for `mean`, the
    /// division after it.
    fn outer_reduce_kernels(
        &mut self,
        id: NodeId,
        buf: BufId,
        (init, op, count): (f64, ReduceOp, u64),
        accumulate: Kernel,
    ) -> Vec<Kernel> {
        let init_kernel = self.fill_kernel(
            buf,
            &self.extents(id),
            Expr::Const(init),
            &format!("{} (init)", self.origin(id)),
        );
        let mut kernels = vec![init_kernel, accumulate];
        if op == ReduceOp::Mean {
            let ext = self.extents(id);
            let scale = self.map_kernel(
                buf,
                &ext,
                count as f64,
                &format!("{} (mean)", self.origin(id)),
            );
            kernels.push(scale);
        }
        kernels
    }

    /// `buf[...] = value` over a row-major buffer of extents `ext`.
    pub(super) fn fill_kernel(
        &mut self,
        buf: BufId,
        ext: &[u64],
        value: Expr,
        origin: &str,
    ) -> Kernel {
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
    pub(super) fn map_kernel(
        &mut self,
        buf: BufId,
        ext: &[u64],
        divisor: f64,
        origin: &str,
    ) -> Kernel {
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
    pub(super) fn plain_nest(&mut self, ext: &[u64]) -> (Nest, Vec<Coord>) {
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
}

/// Iterations a kernel's loops run, all nests counted (a sparse level as one iteration).
fn iterations(stmts: &[Stmt]) -> u64 {
    stmts
        .iter()
        .map(|s| match s {
            Stmt::Loop(l) => {
                let n = match l.iter {
                    Iter::Range { extent } => extent,
                    _ => 1,
                };
                n.saturating_mul(iterations(&l.body).max(1))
            }
            _ => 1,
        })
        .fold(0u64, |a, b| a.saturating_add(b))
}

/// The most rows a reduction to a single value is cut into one part each
/// ([`Planner::reduction_parts`]); with more, into at most [`SLAB_PARTS`] slabs of rows.
const ROW_PARTS: u64 = 1 << 16;
const SLAB_PARTS: u64 = 4096;

/// The fewest iterations for which a reduction to a single value is cut into parts
/// ([`Planner::reduction_parts`]): below, the second kernel and the thread pool's wake-up cost
/// more than a second thread saves.
const PARTS_MIN_WORK: u64 = 1 << 16;

impl Planner<'_> {
    /// A kernel that reduces everything to single values runs its one loop on one thread:
    /// `let a = 0; for n { … a += … }; out[0] = f(a)` (a loss, a global norm). When it does
    /// enough work, it is cut into parts, one row of its outer loop each (slabs of rows past
    /// [`ROW_PARTS`] rows), each accumulating from the identity into its own element of a
    /// partial buffer per accumulator (the parts run side by side: chunks of them on the CPU's
    /// threads, a block each on a GPU), and a second kernel combines the parts in order from
    /// the accumulators' initial values, then stores what the first stored. The loop IR lets a
    /// reduction's updates run in any order. Any other kernel is returned as it is.
    pub(super) fn reduction_parts(&mut self, k: Kernel) -> Vec<Kernel> {
        let Some(split) = self.parts_of(&k) else {
            return vec![k];
        };
        let (lets, l, tail, reduced, p) = split;
        let rows = match l.iter {
            Iter::Range { extent } => extent / p,
            _ => unreachable!("parts_of takes range loops"),
        };
        // Fresh variables for the part and the row within it.
        let mut next = walk::stmt_vars(&k.body)
            .iter()
            .chain([l.var].iter())
            .map(|v| v.0 + 1)
            .max()
            .unwrap_or(0);
        let mut fresh = || {
            next += 1;
            VarId(next - 1)
        };
        let (q, r) = (fresh(), fresh());
        let split_rows = |ix: &Index| split_var(ix, l.var, (q, r, rows));
        let one_row = |ix: &Index| Index {
            offset: ix.offset,
            terms: ix
                .terms
                .iter()
                .map(|&(v, st)| (if v == l.var { q } else { v }, st))
                .collect(),
        };
        let body: Vec<Stmt> = match rows {
            1 => l.body.iter().map(|s| s.map_all_indices(&one_row)).collect(),
            _ => l
                .body
                .iter()
                .map(|s| s.map_all_indices(&split_rows))
                .collect(),
        };
        let mut part = Vec::new();
        let mut combine = Vec::new();
        let mut stores = Vec::new();
        for s in &lets {
            let Stmt::Let { acc, ty, .. } = s else {
                unreachable!("parts_of takes lets")
            };
            match reduced.iter().find(|(a, _)| a == acc) {
                Some(&(_, op)) => {
                    let buf = self.add_temp(ty.dtype().unwrap_or(DType::F32), p);
                    part.push(Stmt::Let {
                        acc: *acc,
                        ty: *ty,
                        init: Expr::Const(identity(op)),
                    });
                    stores.push(Stmt::Store {
                        buf,
                        index: Index {
                            offset: 0,
                            terms: vec![(q, 1)],
                        },
                        value: Expr::Acc(*acc),
                    });
                    combine.push((*acc, op, buf));
                }
                None => part.push(s.clone()),
            }
        }
        match rows {
            1 => part.extend(body),
            _ => part.push(Stmt::Loop(Loop {
                var: r,
                iter: Iter::Range { extent: rows },
                parallel: false,
                vector: l.vector,
                gpu: None,
                body,
            })),
        }
        part.extend(stores);
        let parts = Kernel {
            name: String::new(),
            origin: format!("{} (parts)", k.origin),
            source: k.source,
            body: vec![Stmt::Loop(Loop {
                var: q,
                iter: Iter::Range { extent: p },
                parallel: true,
                vector: 1,
                gpu: None,
                body: part,
            })],
        };
        // The combination: every `let` as it was, then the parts in order, then the stores.
        let q2 = fresh();
        let mut body: Vec<Stmt> = lets.clone();
        body.push(Stmt::Loop(Loop {
            var: q2,
            iter: Iter::Range { extent: p },
            parallel: false,
            vector: 1,
            gpu: None,
            body: combine
                .iter()
                .map(|(acc, op, buf)| Stmt::Update {
                    acc: *acc,
                    op: *op,
                    value: Expr::Load {
                        buf: *buf,
                        index: Index {
                            offset: 0,
                            terms: vec![(q2, 1)],
                        },
                    },
                })
                .collect(),
        }));
        body.extend(tail);
        let combined = Kernel {
            name: String::new(),
            origin: format!("{} (combine parts)", k.origin),
            source: k.source,
            body,
        };
        vec![parts, combined]
    }

    /// The pieces of a kernel [`Planner::reduction_parts`] cuts: its leading `let`s, its one
    /// loop (a range of enough rows, not parallel), the statements after it (no loops), the
    /// accumulators the loop updates (each declared by a leading `let`, combined one way, not
    /// read inside), and the count of parts.
    #[allow(clippy::type_complexity)]
    fn parts_of(
        &self,
        k: &Kernel,
    ) -> Option<(Vec<Stmt>, Loop, Vec<Stmt>, Vec<(AccId, AccOp)>, u64)> {
        let n_lets = k
            .body
            .iter()
            .take_while(|s| matches!(s, Stmt::Let { .. }))
            .count();
        let (lets, rest) = k.body.split_at(n_lets);
        let [Stmt::Loop(l), tail @ ..] = rest else {
            return None;
        };
        let Iter::Range { extent } = l.iter else {
            return None;
        };
        if l.parallel
            || tail
                .iter()
                .any(|s| matches!(s, Stmt::Loop(_) | Stmt::Call(_)))
        {
            return None;
        }
        if iterations(&k.body) < PARTS_MIN_WORK {
            return None;
        }
        // One row a part (a GPU runs each on a block, the CPU chunks them over threads), or
        // for very many rows, slabs of rows.
        let p = match extent {
            2..=ROW_PARTS => extent,
            _ => (2..=SLAB_PARTS).rev().find(|p| extent.is_multiple_of(*p))?,
        };
        let declared: BTreeMap<AccId, &Stmt> = lets
            .iter()
            .filter_map(|s| match s {
                Stmt::Let { acc, .. } => Some((*acc, s)),
                _ => None,
            })
            .collect();
        let mut reduced: Vec<(AccId, AccOp)> = Vec::new();
        let mut ok = true;
        l.body.iter().for_each(|s| {
            s.visit(&mut |s| {
                if let Stmt::Update { acc, op, .. } = s {
                    if !declared.contains_key(acc) {
                        return;
                    }
                    match reduced.iter().find(|(a, _)| a == acc) {
                        Some((_, o)) => ok &= o == op,
                        None => reduced.push((*acc, *op)),
                    }
                    ok &= *op != AccOp::Set;
                }
            })
        });
        let read = walk::stmt_accs(&l.body);
        ok &= !reduced.iter().any(|(a, _)| read.contains(a));
        // The `let`s that are not reductions must not read one (they are copied to both).
        for s in lets {
            if let Stmt::Let { acc, init, .. } = s {
                if !reduced.iter().any(|(a, _)| a == acc) {
                    init.visit(&mut |x| {
                        ok &= !matches!(x, Expr::Acc(a) if reduced.iter().any(|r| r.0 == *a))
                    });
                }
            }
        }
        (ok && !reduced.is_empty()).then(|| (lets.to_vec(), l.clone(), tail.to_vec(), reduced, p))
    }
}

/// The identity of an accumulator's combination (`+` from −0, as the dot products sum).
fn identity(op: AccOp) -> f64 {
    match op {
        AccOp::Add => -0.0,
        AccOp::Mul => 1.0,
        AccOp::Max => f64::NEG_INFINITY,
        AccOp::Min => f64::INFINITY,
        AccOp::Set => unreachable!("parts_of refuses `Set`"),
    }
}
