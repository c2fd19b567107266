//! Vector loops: which innermost loops vectorise (f32x4 / f64x2 with several accumulators),
//! and their code.

use super::*;

impl<M: Module> Lower<'_, '_, M> {
    pub(super) fn vec_plan(&self, l: &Loop) -> Option<VecPlan> {
        if !self.opts.vectorize || l.vector < 2 || !matches!(l.iter, Iter::Range { .. }) {
            return None;
        }
        let mut ct: Option<Ct> = None;
        let mut unify = |c: Ct| match ct {
            None => {
                ct = Some(c);
                true
            }
            Some(x) => x == c,
        };
        let mut reductions: Vec<(AccId, AccOp)> = Vec::new();
        for s in &l.body {
            match s {
                Stmt::Store { buf, index, .. } => {
                    if index.stride_of(l.var) == 0 || !unify(Ct::of(self.buf_ty(*buf))) {
                        return None;
                    }
                }
                Stmt::Update { acc, op, .. } => {
                    if !matches!(op, AccOp::Add | AccOp::Mul | AccOp::Max | AccOp::Min) {
                        return None;
                    }
                    let (_, act) = self.accs.get(acc)?;
                    if !unify(*act) {
                        return None;
                    }
                    match reductions.iter().find(|(a, _)| a == acc) {
                        Some((_, o)) if o != op => return None,
                        Some(_) => {}
                        None => reductions.push((*acc, *op)),
                    }
                }
                _ => return None,
            }
        }
        let ct = ct?;
        // Running lanes together must not change what a load sees: a buffer the loop stores to
        // is stored at one index and loaded only at that index (the same element, the same
        // iteration). Different buffers never overlap.
        let mut stores: HashMap<BufId, &Index> = HashMap::new();
        for s in &l.body {
            if let Stmt::Store { buf, index, .. } = s {
                if stores.insert(*buf, index).is_some_and(|i| i != index) {
                    return None;
                }
            }
        }
        let mut acc = Vec::new();
        accesses(&l.body, &mut acc);
        if acc
            .iter()
            .any(|(b, ix)| stores.get(b).is_some_and(|s| *s != ix))
        {
            return None;
        }
        for s in &l.body {
            let value = match s {
                Stmt::Store { value, .. } | Stmt::Update { value, .. } => value,
                _ => return None,
            };
            if !self.vec_expr_ok(value, ct, &reductions) {
                return None;
            }
        }
        Some(VecPlan { ct, reductions })
    }

    pub(super) fn vec_expr_ok(&self, e: &Expr, ct: Ct, reds: &[(AccId, AccOp)]) -> bool {
        match e {
            Expr::Const(_) => true,
            Expr::Load { buf, .. } => Ct::of(self.buf_ty(*buf)) == ct,
            Expr::Acc(a) => {
                !reds.iter().any(|(r, _)| r == a) && self.accs.get(a).is_some_and(|x| x.1 == ct)
            }
            Expr::Unary(_, x) => self.vec_expr_ok(x, ct, reds),
            Expr::Binary(_, x, y) => self.vec_expr_ok(x, ct, reds) && self.vec_expr_ok(y, ct, reds),
            // The condition is computed in its own type and only its lanes' truth is used.
            Expr::Select(c, x, y) => {
                self.infer(c).is_none_or(|t| t == ct)
                    && [c, x, y].iter().all(|e| self.vec_expr_ok(e, ct, reds))
            }
            Expr::Iota(_) => true,
            Expr::Cast(t, x) => {
                Ct::of(*t) == ct
                    && self.infer(x).is_none_or(|c| c == ct)
                    && self.vec_expr_ok(x, ct, reds)
            }
        }
    }

    pub(super) fn identity(&mut self, op: AccOp, ty: Type) -> Value {
        let x = match op {
            AccOp::Mul => 1.0,
            AccOp::Max => f64::NEG_INFINITY,
            AccOp::Min => f64::INFINITY,
            // -0.0 + x == x for every x, including -0.0.
            _ => -0.0,
        };
        self.fconst(ty, x)
    }

    pub(super) fn fconst(&mut self, ty: Type, x: f64) -> Value {
        let lane = ty.lane_type();
        let s = if lane == types::F64 {
            self.b.ins().f64const(x)
        } else {
            self.b.ins().f32const(x as f32)
        };
        if ty.is_vector() {
            self.b.ins().splat(ty, s)
        } else {
            s
        }
    }

    pub(super) fn vector_loop(
        &mut self,
        l: &Loop,
        plan: &VecPlan,
        start: Value,
        end: Value,
    ) -> Result<(), CodegenError> {
        let ct = plan.ct;
        let lanes = ct.lanes();
        // Reductions need independent accumulators to hide the add/fma latency; elementwise
        // loops only save loop overhead, and a smaller body compiles faster.
        let unroll = if plan.reductions.is_empty() {
            self.opts.n_acc.clamp(1, 2)
        } else {
            self.opts.n_acc.max(1)
        } as i64;
        let vty = ct.vector();
        for (acc, op) in &plan.reductions {
            let mut vs = Vec::new();
            for _ in 0..unroll {
                let v = self.b.declare_var(vty);
                let init = self.identity(*op, vty);
                self.b.def_var(v, init);
                vs.push(v);
            }
            self.vaccs.insert(*acc, vs);
        }
        // Main loop: `unroll` vectors per trip; then one vector per trip.
        let mut next = start;
        let mut trips = vec![unroll];
        if unroll > 1 {
            trips.push(1);
        }
        for n in trips {
            let f = self.loop_begin(next, end, lanes * n);
            self.bind(l.var, f.var)?;
            for step in 0..n {
                self.vec = Some(VecMode {
                    var: l.var,
                    ct,
                    step,
                });
                let r = self.block(&l.body);
                self.vec = None;
                r?;
            }
            self.vars.remove(&l.var);
            next = self.loop_end(f);
        }
        // Horizontal reductions into the scalar accumulators.
        for (acc, op) in &plan.reductions {
            let vs = self.vaccs.remove(acc).unwrap_or_default();
            let mut vals: Vec<Value> = vs.iter().map(|v| self.b.use_var(*v)).collect();
            while vals.len() > 1 {
                let mut out = Vec::new();
                for pair in vals.chunks(2) {
                    out.push(match pair {
                        [a, b] => self.combine(*op, *a, *b),
                        [a] => *a,
                        _ => unreachable!(),
                    });
                }
                vals = out;
            }
            let v = vals[0];
            let mut lane_vals: Vec<Value> = (0..lanes as u8)
                .map(|i| self.b.ins().extractlane(v, i))
                .collect();
            while lane_vals.len() > 1 {
                let b2 = lane_vals.pop().unwrap_or(v);
                let a2 = lane_vals.pop().unwrap_or(v);
                let c = self.combine(*op, a2, b2);
                lane_vals.insert(0, c);
            }
            let (svar, _) = self.acc(*acc)?;
            let cur = self.b.use_var(svar);
            let new = self.combine(*op, cur, lane_vals[0]);
            self.b.def_var(svar, new);
        }
        // Scalar tail.
        let f = self.loop_begin(next, end, 1);
        self.bind(l.var, f.var)?;
        let r = self.block(&l.body);
        self.vars.remove(&l.var);
        r?;
        self.loop_end(f);
        Ok(())
    }
}
