//! An innermost f32 loop that only adds products of two unit-stride loads, or one such load,
//! into one accumulator (`for v { a += x[… + v]·y[… + v] }`: a matrix-vector row, a row's sum,
//! an f16 weight's row times a vector) as one call to `tdsl_dot_f32`, `_f16` or `_bf16`
//! (`dot.rs`), whose 512-bit loads read memory faster than the JIT's 128-bit ones; a row's
//! maximum or minimum of an f32 load as one call to `tdsl_max_f32` or `tdsl_min_f32`.

use super::*;

/// The shortest loop worth a call.
const MIN_EXTENT: u64 = 64;

/// A dot-product loop: the accumulator and the operands (`y` absent for a plain sum; `x` may
/// be f32, f16 or bf16, `y` is f32), or a maximum or minimum of f32 `x` (`op`).
pub(super) struct Dot {
    acc: AccId,
    op: AccOp,
    x: (BufId, Index),
    y: Option<(BufId, Index)>,
}

impl<M: Module> Lower<'_, '_, M> {
    /// `l` as a [`Dot`] when the CPU runs the wide dot products (`LowerOptions::dot`) and `l`'s
    /// whole body is `a += x[…]·y[…]` (either order) or `a += x[…]` on an f32 accumulator, over
    /// buffers read with stride 1 in `l`'s variable (`x` f32, f16 or bf16; `y` f32), for at
    /// least [`MIN_EXTENT`] iterations.
    pub(super) fn dot_loop(&self, l: &Loop, plan: &VecPlan) -> Option<Dot> {
        let Iter::Range { extent } = l.iter else {
            return None;
        };
        if !self.opts.dot || plan.ct != Ct::F32 || extent < MIN_EXTENT {
            return None;
        }
        let [Stmt::Update { acc, op, value }] = l.body.as_slice() else {
            return None;
        };
        let load = |e: &Expr| match e {
            Expr::Load { buf, index } if index.stride_of(l.var) == 1 => {
                Some((*buf, index.clone(), self.buf_ty(*buf)))
            }
            _ => None,
        };
        if matches!(op, AccOp::Max | AccOp::Min) {
            let x = load(value).filter(|x| x.2 == ElemType::F32)?;
            return Some(Dot {
                acc: *acc,
                op: *op,
                x: (x.0, x.1),
                y: None,
            });
        }
        if *op != AccOp::Add {
            return None;
        }
        let narrow = |t: ElemType| matches!(t, ElemType::F32 | ElemType::F16 | ElemType::BF16);
        let (x, y) = match value {
            Expr::Binary(BinOp::Mul, a, b) => {
                let (a, b) = (load(a)?, load(b)?);
                // The f32 one is `y` (both f32: as written).
                let (x, y) = if b.2 == ElemType::F32 { (a, b) } else { (b, a) };
                if !(narrow(x.2) && y.2 == ElemType::F32) {
                    return None;
                }
                (x, Some(y))
            }
            e => Some(load(e)?).filter(|x| narrow(x.2)).map(|x| (x, None))?,
        };
        Some(Dot {
            acc: *acc,
            op: AccOp::Add,
            x: (x.0, x.1),
            y: y.map(|y| (y.0, y.1)),
        })
    }

    /// `a = a + tdsl_dot_T(&x[start], &y[start] or null, end − start)`, `T` being `x`'s type;
    /// `a = max(a, tdsl_max_f32(&x[start], end − start))` (or `min`).
    pub(super) fn dot_call(
        &mut self,
        l: &Loop,
        d: &Dot,
        start: Value,
        end: Value,
    ) -> Result<(), CodegenError> {
        if d.op != AccOp::Add {
            let symbol = match d.op {
                AccOp::Max => crate::dot::SYMBOL_MAX,
                _ => crate::dot::SYMBOL_MIN,
            };
            let f = self.import(symbol, &[types::I64; 2], Some(types::F32))?;
            let first = self.b.declare_var(types::I64);
            self.b.def_var(first, start);
            self.bind(l.var, first)?;
            let (a, off) = self.addr(d.x.0, &d.x.1);
            let x = self.b.ins().iadd_imm_s(a, off as i64);
            let n = self.b.ins().isub(end, start);
            let call = self.b.ins().call(f, &[x, n]);
            let r = self.b.inst_results(call)[0];
            let (var, _) = self.acc(d.acc)?;
            let cur = self.b.use_var(var);
            let new = self.combine(d.op, cur, r);
            self.b.def_var(var, new);
            self.vars.remove(&l.var);
            return Ok(());
        }
        let symbol = match self.buf_ty(d.x.0) {
            ElemType::F16 => crate::dot::SYMBOL_F16,
            ElemType::BF16 => crate::dot::SYMBOL_BF16,
            _ => crate::dot::SYMBOL,
        };
        let f = self.import(symbol, &[types::I64; 3], Some(types::F32))?;
        // The operands' addresses at the first iteration.
        let first = self.b.declare_var(types::I64);
        self.b.def_var(first, start);
        self.bind(l.var, first)?;
        let mut ptr = |(buf, ix): &(BufId, Index)| {
            let (a, off) = self.addr(*buf, ix);
            self.b.ins().iadd_imm_s(a, off as i64)
        };
        let x = ptr(&d.x);
        let y = match &d.y {
            Some(y) => ptr(y),
            None => self.b.ins().iconst(types::I64, 0),
        };
        let n = self.b.ins().isub(end, start);
        let call = self.b.ins().call(f, &[x, y, n]);
        let sum = self.b.inst_results(call)[0];
        let (var, _) = self.acc(d.acc)?;
        let cur = self.b.use_var(var);
        let new = self.b.ins().fadd(cur, sum);
        self.b.def_var(var, new);
        self.vars.remove(&l.var);
        Ok(())
    }
}

/// An axpy loop: `y[… + v] = y[… + v] + a·w[… + v]` with `a` the same in every iteration.
pub(super) struct Axpy {
    y: (BufId, Index),
    w: (BufId, Index),
    a: Expr,
}

/// Whether `e` loads from `buf`.
fn reads(e: &Expr, buf: BufId) -> bool {
    let mut found = false;
    e.visit(&mut |x| found |= matches!(x, Expr::Load { buf: b, .. } if *b == buf));
    found
}

/// Whether `e` has the same value in every iteration of the loop over `var` (it loads nothing
/// that moves with `var` and does not read `var`'s iota).
fn invariant(e: &Expr, var: VarId) -> bool {
    let mut ok = true;
    e.visit(&mut |x| match x {
        Expr::Load { index, .. } => ok &= index.stride_of(var) == 0,
        Expr::Iota(ix) => ok &= ix.stride_of(var) == 0,
        _ => {}
    });
    ok
}

impl<M: Module> Lower<'_, '_, M> {
    /// `l` as an [`Axpy`] when the CPU runs the wide dot products (`LowerOptions::dot`) and
    /// `l`'s whole body is `y[i] = y[i] + a·w[j]` (either product order) over f32 buffers read
    /// and written with stride 1 in `l`'s variable, `a` invariant, for at least
    /// [`MIN_EXTENT`] iterations: a row of `x @ W` accumulated into the result.
    pub(super) fn axpy_loop(&self, l: &Loop, plan: &VecPlan) -> Option<Axpy> {
        let Iter::Range { extent } = l.iter else {
            return None;
        };
        if !self.opts.dot || plan.ct != Ct::F32 || extent < MIN_EXTENT {
            return None;
        }
        let [Stmt::Store { buf, index, value }] = l.body.as_slice() else {
            return None;
        };
        let Expr::Binary(BinOp::Add, cur, prod) = value else {
            return None;
        };
        let f32_unit =
            |b: BufId, ix: &Index| self.buf_ty(b) == ElemType::F32 && ix.stride_of(l.var) == 1;
        let same = matches!(&**cur, Expr::Load { buf: b, index: i } if b == buf && i == index);
        let Expr::Binary(BinOp::Mul, p, q) = &**prod else {
            return None;
        };
        let (w, a) = match (&**p, &**q) {
            (Expr::Load { buf: b, index: i }, a) | (a, Expr::Load { buf: b, index: i })
                if f32_unit(*b, i) && invariant(a, l.var) =>
            {
                ((*b, i.clone()), a.clone())
            }
            _ => return None,
        };
        // `a` computes in f32 like the product (no f64 operand inside it), and does not read
        // the `y` that the loop writes (the call computes `a` once).
        if !(same
            && f32_unit(*buf, index)
            && self.infer(&a).is_none_or(|c| c == Ct::F32)
            && !reads(&a, *buf))
        {
            return None;
        }
        Some(Axpy {
            y: (*buf, index.clone()),
            w,
            a,
        })
    }

    /// `tdsl_axpy_f32(&y[start], &w[start], a, end − start)`.
    pub(super) fn axpy_call(
        &mut self,
        l: &Loop,
        x: &Axpy,
        start: Value,
        end: Value,
    ) -> Result<(), CodegenError> {
        let f = self.import(
            crate::dot::SYMBOL_AXPY,
            &[types::I64, types::I64, types::F32, types::I64],
            None,
        )?;
        let first = self.b.declare_var(types::I64);
        self.b.def_var(first, start);
        self.bind(l.var, first)?;
        let a = self.expr(&x.a, Ct::F32)?;
        let mut ptr = |(buf, ix): &(BufId, Index)| {
            let (p, off) = self.addr(*buf, ix);
            self.b.ins().iadd_imm_s(p, off as i64)
        };
        let y = ptr(&x.y);
        let w = ptr(&x.w);
        let n = self.b.ins().isub(end, start);
        self.b.ins().call(f, &[y, w, a, n]);
        self.vars.remove(&l.var);
        Ok(())
    }

    /// `l` as rows of an axpy when its whole body is one axpy loop (see [`Lower::axpy_loop`])
    /// that writes the same `y` in every iteration of `l` and reads `w` from a buffer other
    /// than `y`'s: `for i { for o { y[o] = y[o] + x[i]·w[i, o] } }`, a vector times `W[in,
    /// out]` accumulated in the result. Returns the inner loop, its axpy and `w`'s stride in
    /// `l`'s variable.
    pub(super) fn axpy_rows<'l>(&self, l: &'l Loop) -> Option<(&'l Loop, Axpy, i64)> {
        let Iter::Range { extent } = l.iter else {
            return None;
        };
        let [Stmt::Loop(inner)] = l.body.as_slice() else {
            return None;
        };
        if extent < crate::dot::AXPY_ROWS as u64 || !is_innermost(inner) {
            return None;
        }
        let x = self.axpy_loop(inner, &self.vec_plan(inner)?)?;
        let ok = x.y.1.stride_of(l.var) == 0 && x.y.0 != x.w.0;
        ok.then(|| {
            let ws = x.w.1.stride_of(l.var);
            (inner, x, ws)
        })
    }

    /// Rows `start..end` of [`Lower::axpy_rows`]: `tdsl_axpy_rows_f32` over each four
    /// consecutive rows (their `a`s computed first, in row order), then `tdsl_axpy_f32` over
    /// each row left.
    pub(super) fn axpy_rows_call(
        &mut self,
        l: &Loop,
        (inner, x, ws): (&Loop, Axpy, i64),
        start: Value,
        end: Value,
    ) -> Result<(), CodegenError> {
        const ROWS: i64 = crate::dot::AXPY_ROWS as i64;
        let Iter::Range { extent } = inner.iter else {
            return Err(bad("an axpy row loop that is not a range".into()));
        };
        let rows = self.import(
            crate::dot::SYMBOL_AXPY_ROWS,
            &[
                types::I64,
                types::I64,
                types::I64,
                types::F32,
                types::F32,
                types::F32,
                types::F32,
                types::I64,
            ],
            None,
        )?;
        let one = self.import(
            crate::dot::SYMBOL_AXPY,
            &[types::I64, types::I64, types::F32, types::I64],
            None,
        )?;
        let n = self.b.ins().iconst(types::I64, extent as i64);
        let ws = self.b.ins().iconst(types::I64, ws);
        // Row `i + k`'s `a` and, for `k = 0`, the addresses of `y` and of `w`'s row.
        let row = |this: &mut Self, i: Value, k: i64| -> Result<_, CodegenError> {
            let (var, first) = (
                this.b.declare_var(types::I64),
                this.b.declare_var(types::I64),
            );
            let ik = this.b.ins().iadd_imm_s(i, k);
            this.b.def_var(var, ik);
            let zero = this.b.ins().iconst(types::I64, 0);
            this.b.def_var(first, zero);
            this.bind(l.var, var)?;
            this.bind(inner.var, first)?;
            let a = this.expr(&x.a, Ct::F32);
            let mut ptr = |(buf, ix): &(BufId, Index)| {
                let (p, off) = this.addr(*buf, ix);
                this.b.ins().iadd_imm_s(p, off as i64)
            };
            let (y, w) = (ptr(&x.y), ptr(&x.w));
            this.vars.remove(&l.var);
            this.vars.remove(&inner.var);
            Ok((a?, y, w))
        };
        let f = self.loop_begin(start, end, ROWS);
        let i = self.b.use_var(f.var);
        let (a0, y, w) = row(self, i, 0)?;
        let mut args = vec![y, w, ws, a0];
        for k in 1..ROWS {
            args.push(row(self, i, k)?.0);
        }
        args.push(n);
        self.b.ins().call(rows, &args);
        let rest = self.loop_end(f);
        let f = self.loop_begin(rest, end, 1);
        let i = self.b.use_var(f.var);
        let (a, y, w) = row(self, i, 0)?;
        self.b.ins().call(one, &[y, w, a, n]);
        self.loop_end(f);
        Ok(())
    }
}
