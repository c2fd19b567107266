//! An innermost f32 loop that only adds products of two unit-stride loads, or one such load,
//! into one accumulator (`for v { a += x[… + v]·y[… + v] }`: a matrix-vector row, a row's sum,
//! an f16 weight's row times a vector) as one call to `tdsl_dot_f32`, `_f16` or `_bf16`
//! (`dot.rs`), whose 512-bit loads read memory faster than the JIT's 128-bit ones.

use super::*;

/// The shortest loop worth a call.
const MIN_EXTENT: u64 = 64;

/// A dot-product loop: the accumulator and the operands (`y` absent for a plain sum; `x` may
/// be f32, f16 or bf16, `y` is f32).
pub(super) struct Dot {
    acc: AccId,
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
        let [Stmt::Update {
            acc,
            op: AccOp::Add,
            value,
        }] = l.body.as_slice()
        else {
            return None;
        };
        let load = |e: &Expr| match e {
            Expr::Load { buf, index } if index.stride_of(l.var) == 1 => {
                Some((*buf, index.clone(), self.buf_ty(*buf)))
            }
            _ => None,
        };
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
            x: (x.0, x.1),
            y: y.map(|y| (y.0, y.1)),
        })
    }

    /// `a = a + tdsl_dot_T(&x[start], &y[start] or null, end − start)`, `T` being `x`'s type.
    pub(super) fn dot_call(
        &mut self,
        l: &Loop,
        d: &Dot,
        start: Value,
        end: Value,
    ) -> Result<(), CodegenError> {
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
        Ok(())
    }
}
