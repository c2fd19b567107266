//! The statements of a chunked loop as wide passes over the chunk (`varith.rs`).
//!
//! `chunked.rs` runs a vector loop 512 iterations at a time. What is left of its body once the
//! calls are hoisted (and a call's argument, before the call) ran as a 128-bit Cranelift loop:
//! four f32 lanes, with every f16 or bf16 operand widened and every 16-bit result rounded
//! lane by lane in integer code. [`Passes::stores`] turns statements that are plain arithmetic
//! instead into passes of `tdsl_varith_f32`, each one operation over the whole chunk, 16 or
//! 8 lanes at a time, with 16-bit operands widened as they are read and results rounded or
//! narrowed as they are stored:
//!
//! - a statement is a store at unit stride (into an f32, f16 or bf16 buffer, or a chunk
//!   buffer) of `+ - * / max min`, `-x`, `abs`, `sqrt`, `rsqrt`, `square`, `relu`, a `cast` to
//!   f32 or a plain load;
//! - an operand is a unit-stride load of an f32, f16 or bf16 buffer, one value for the whole
//!   loop (a constant, an accumulator the loop does not update, a load that does not move
//!   with it), or another such expression, computed first into a chunk buffer of its own.
//!
//! Anything else (a comparison, `where`, `pow`, an index, a gather, a reduction) leaves the
//! statements to the Cranelift loop.

use tdsl_loop::{AccId, BinOp, BufId, ElemType, Expr, Index, Stmt, UnOp, VarId};

use crate::varith::{code, AOp, Dst, Src};

/// Where a pass reads an operand.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Opnd {
    /// `buf[index]`, `index` of unit stride in the loop's variable (a chunk buffer, or a
    /// program buffer of f32, f16 or bf16).
    Mem(BufId, Index),
    /// One value for the whole loop, computed once before it.
    Scalar(Expr),
}

/// One pass: `dst[index] = op(a, b)` over the chunk, rounded to `round` (f16 or bf16) when
/// the destination is f32.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Pass {
    pub op: AOp,
    pub a: Opnd,
    /// `None` for a unary operation.
    pub b: Option<Opnd>,
    pub dst: BufId,
    pub index: Index,
    pub round: Option<ElemType>,
}

impl Pass {
    /// The operands it reads from memory.
    pub fn reads(&self) -> impl Iterator<Item = (&BufId, &Index)> {
        [Some(&self.a), self.b.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|o| match o {
                Opnd::Mem(b, i) => Some((b, i)),
                Opnd::Scalar(_) => None,
            })
    }

    /// The scalar operand, if there is one (at most one: a value with two would be one for
    /// the whole loop, and is copied as one scalar).
    pub fn scalar(&self) -> Option<&Expr> {
        [Some(&self.a), self.b.as_ref()]
            .into_iter()
            .flatten()
            .find_map(|o| match o {
                Opnd::Scalar(e) => Some(e),
                Opnd::Mem(..) => None,
            })
    }

    /// Its `tdsl_varith_f32` code, given the element type of each buffer.
    pub fn code(&self, ty: &dyn Fn(BufId) -> ElemType) -> u32 {
        let src = |o: &Opnd| match o {
            Opnd::Scalar(_) => Src::Scalar,
            Opnd::Mem(b, _) => match ty(*b) {
                ElemType::F16 => Src::F16,
                ElemType::BF16 => Src::Bf16,
                _ => Src::F32,
            },
        };
        let b = self.b.as_ref().map_or(Src::F32, src);
        let d = match (ty(self.dst), self.round) {
            (ElemType::F16, _) => Dst::F16,
            (ElemType::BF16, _) => Dst::Bf16,
            (_, Some(ElemType::F16)) => Dst::RoundF16,
            (_, Some(ElemType::BF16)) => Dst::RoundBf16,
            _ => Dst::F32,
        };
        code(self.op, src(&self.a), b, d)
    }
}

/// The translation of one loop's statements into passes.
pub(super) struct Passes<'a> {
    /// The loop's variable.
    pub var: VarId,
    /// A buffer's element type (chunk buffers are f32).
    pub ty: &'a dyn Fn(BufId) -> ElemType,
    /// The accumulators the loop updates (not invariant in it).
    pub updated: &'a [AccId],
    /// Chunk buffers that hold a widened f16 load: passes read the load itself.
    pub widened: &'a [(BufId, BufId, Index)],
    /// The chunk buffers for intermediate values: the next unused one, the number's buffer,
    /// and those free again (each intermediate value is read by one pass, after which its
    /// buffer is free).
    pub next: usize,
    pub scratch: &'a dyn Fn(usize) -> BufId,
    pub free: Vec<BufId>,
    /// Every chunk buffer taken for an intermediate value.
    pub temps: Vec<BufId>,
    pub out: Vec<Pass>,
}

impl Passes<'_> {
    /// `body` as passes appended to `self.out`, if every statement translates; a store into a
    /// program buffer that the body also reads at another index (a dependence between
    /// iterations the chunk would reorder) does not.
    pub fn stores(&mut self, body: &[Stmt]) -> Option<()> {
        for s in body {
            let Stmt::Store { buf, index, value } = s else {
                return None;
            };
            self.store(*buf, index, value)?;
        }
        // Each pass runs over the whole chunk before the next: a buffer stored at one index
        // and read or stored at another would see the iterations in another order.
        let stored: Vec<(&BufId, &Index)> = self.out.iter().map(|p| (&p.dst, &p.index)).collect();
        let mut touched = self
            .out
            .iter()
            .flat_map(Pass::reads)
            .chain(stored.iter().copied());
        let clash = touched.any(|(b, i)| stored.iter().any(|(sb, si)| *sb == b && *si != i));
        (!clash).then_some(())
    }

    /// `buf[index] = value` as passes.
    fn store(&mut self, buf: BufId, index: &Index, value: &Expr) -> Option<()> {
        if index.stride_of(self.var) != 1 || !wide_type((self.ty)(buf)) {
            return None;
        }
        // One value for the whole loop (`relu(s[0])`): copied from the scalar, so no pass
        // has two scalar operands (its kernel has one).
        let invariant_value = invariant(value, self.var, self.updated);
        let (op, a, b) = match value {
            _ if invariant_value => (AOp::Copy, Opnd::Scalar(value.clone()), None),
            Expr::Binary(op, x, y) => {
                let op = match op {
                    BinOp::Add => AOp::Add,
                    BinOp::Sub => AOp::Sub,
                    BinOp::Mul => AOp::Mul,
                    BinOp::Div => AOp::Div,
                    BinOp::Max => AOp::Max,
                    BinOp::Min => AOp::Min,
                    _ => return None,
                };
                let a = self.operand(x)?;
                let b = self.operand(y)?;
                if matches!((&a, &b), (Opnd::Scalar(_), Opnd::Scalar(_))) {
                    return None;
                }
                (op, a, Some(b))
            }
            Expr::Unary(op, x) => {
                let a = self.operand(x)?;
                match op {
                    UnOp::Neg => (AOp::Neg, a, None),
                    UnOp::Abs => (AOp::Abs, a, None),
                    UnOp::Sqrt => (AOp::Sqrt, a, None),
                    UnOp::Rsqrt => (AOp::Rsqrt, a, None),
                    UnOp::Square => (AOp::Mul, a.clone(), Some(a)),
                    // `fmax(x, 0)`, as the inline code.
                    UnOp::Relu => (AOp::Max, a, Some(Opnd::Scalar(Expr::Const(0.0)))),
                    _ => return None,
                }
            }
            Expr::Cast(ElemType::F32, x) => return self.store(buf, index, x),
            e => (AOp::Copy, self.operand(e)?, None),
        };
        let pass = Pass {
            op,
            a,
            b,
            dst: buf,
            index: index.clone(),
            round: None,
        };
        // The intermediate values this pass reads are dead after it.
        let mut temps: Vec<BufId> = pass
            .reads()
            .map(|(b, _)| *b)
            .filter(|b| self.temps.contains(b))
            .collect();
        temps.dedup();
        self.free.extend(temps);
        self.out.push(pass);
        Some(())
    }

    /// Where a pass reads `e`: where it lies, as one value, or from a chunk buffer the passes
    /// computing it store into first.
    fn operand(&mut self, e: &Expr) -> Option<Opnd> {
        if invariant(e, self.var, self.updated) {
            return Some(Opnd::Scalar(e.clone()));
        }
        match e {
            Expr::Load { buf, index } => {
                if let Some((_, b, i)) = self.widened.iter().find(|(s, ..)| s == buf) {
                    return Some(Opnd::Mem(*b, i.clone()));
                }
                (index.stride_of(self.var) == 1 && wide_type((self.ty)(*buf)))
                    .then(|| Opnd::Mem(*buf, index.clone()))
            }
            Expr::Cast(ElemType::F32, x) => self.operand(x),
            Expr::Binary(..) | Expr::Unary(..) => {
                let buf = match self.free.pop() {
                    Some(b) => b,
                    None => {
                        self.next += 1;
                        let b = (self.scratch)(self.next - 1);
                        self.temps.push(b);
                        b
                    }
                };
                let index = Index {
                    offset: 0,
                    terms: vec![(self.var, 1)],
                };
                self.store(buf, &index, e)?;
                Some(Opnd::Mem(buf, index))
            }
            _ => None,
        }
    }
}

/// The element types a pass reads and writes.
fn wide_type(t: ElemType) -> bool {
    matches!(t, ElemType::F32 | ElemType::F16 | ElemType::BF16)
}

/// Whether `e` has one value for the whole loop over `var`: it loads nothing that moves with
/// `var` and reads no accumulator in `updated`.
pub(super) fn invariant(e: &Expr, var: VarId, updated: &[AccId]) -> bool {
    let mut ok = true;
    e.visit(&mut |x| {
        ok &= match x {
            Expr::Load { index, .. } => index.terms.iter().all(|(v, _)| *v != var),
            Expr::Iota(_) => false,
            Expr::Acc(a) => !updated.contains(a),
            _ => true,
        }
    });
    ok
}
