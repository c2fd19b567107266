//! The loop IR evaluator: [`eval`] runs a [`LoopProgram`] on host buffers ([`Data`]), one
//! statement at a time, with the semantics written in `ir.rs` and `spec/loop-ir.md`. It is the
//! oracle between tdsl's interpreter and its backends: interpreter ≠ evaluator is a planner bug,
//! evaluator ≠ backend is a backend bug. It favours obviousness over speed.
//!
//! Arithmetic is carried out in f64 and rounded to the *compute type* after every operation, so
//! an f32 program gets exactly the roundings of a backend computing in f32 (for `+ - * /`,
//! `sqrt` and casts the f64-then-round result is the correctly rounded f32 result; for
//! `exp`, `tanh`, `pow`, … it is the f64 function rounded once, within an ulp or so of a libm
//! or GPU intrinsic). Each IR operation rounds once: `rsqrt`, `sigmoid` and `gelu` are single
//! operations, not their expansions.
//!
//! Compute types, decided bottom-up: a load has its buffer's [`ElemType::compute`] (loads
//! widen exactly), an accumulator its `Let` type, a cast `Cast(t, _)` has `t.compute()`; a unary
//! operation has its operand's type; a binary operation is f64 if either operand is f64, else
//! f32. A subtree made only of constants takes its type from where it is used: the other
//! operand's, the accumulator's (for `Let` and updates), the stored buffer's compute type (for
//! stores) or `t.compute()` under `Cast(t, _)`. A constant is rounded to its type.
//!
//! - `Cast(t, e)` rounds `e` to `t` (round to nearest even) and widens it back.
//! - `Let` rounds its initial value to the accumulator's type; an update computes
//!   `op(acc, value)` in f64 and rounds the result to the accumulator's type.
//! - Stores narrow with [`Data::set`] (round to nearest even).
//! - `max`/`min` (operations and updates) return NaN if either side is NaN, and
//!   `max(-0, +0) = +0`, `min(-0, +0) = -0`. `relu(x)` is NaN for NaN, else `max(x, 0)`;
//!   `gelu(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`; `sigmoid(x) = 1/(1 + e^(−x))`;
//!   `rsqrt(x) = 1/√x`; `square(x) = x·x`; `pow` is `powf`.
//! - Loops run in order; `parallel`, `vector` and `gpu` do not change the result of a verified
//!   program and are ignored.
//! - A compressed level runs `var` over `ptr[ptr_index] .. ptr[ptr_index + 1]` and binds
//!   `coord = crd[var]`; a singleton binds `var = crd[pos_index]` and runs once; a 2:4 level runs
//!   `var` over `0 .. 2·groups` and binds `coord = 4·(var / 2) + m`, with `m` the 2-bit field at
//!   bits `2·(var % 16)` of the i32 word `meta[meta_index + var / 16]` (16 kept values a word,
//!   the first in the least significant bits).
//! - `gemm` multiplies and sums in f64 (more accurate than a backend's f32 accumulation, so
//!   compare with a tolerance), adds the old `c` element when `accumulate`, and stores each
//!   element as soon as it is computed, batch by batch, row by row.
//!
//! `bufs` holds every buffer of the program in order (inputs, outputs and temps alike); nothing
//! is cleared before the program runs. Every access is checked as it happens: a wrong buffer
//! count, type or length, an out-of-range index, malformed sparse data (a decreasing `ptr`) or a
//! program the verifier would reject (an unbound variable, a store to an input, an `I32` load)
//! returns an [`EvalError`]; the evaluator never panics. Buffers keep whatever was written before
//! the error.

use crate::data::Data;
use crate::ir::{
    AccId, AccOp, BinOp, BufId, ElemType, Expr, Index, Iter, LibCall, Loop, LoopProgram, MatView,
    Role, Side, SparseOperand, Stmt, UnOp, VarId,
};
use std::fmt;

/// Why [`eval`] stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum EvalError {
    /// `bufs` does not have one entry per buffer of the program.
    BufferCount { expected: usize, found: usize },
    /// `bufs[buf]` has the wrong element type.
    BufferType {
        buf: BufId,
        expected: ElemType,
        found: ElemType,
    },
    /// `bufs[buf]` has the wrong number of elements.
    BufferLen {
        buf: BufId,
        expected: u64,
        found: usize,
    },
    /// A kernel accessed `buf[index]` outside `0..elems`.
    OutOfBounds {
        kernel: String,
        buf: BufId,
        index: i128,
        elems: usize,
    },
    /// The program is not well formed (see [`verify`](crate::verify::verify)) or its sparse
    /// data is malformed.
    Invalid { kernel: String, message: String },
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalError::BufferCount { expected, found } => {
                write!(
                    f,
                    "the program has {expected} buffers but {found} were given"
                )
            }
            EvalError::BufferType {
                buf,
                expected,
                found,
            } => write!(
                f,
                "buffer %{} is {expected} but {found} data was given",
                buf.0
            ),
            EvalError::BufferLen {
                buf,
                expected,
                found,
            } => write!(
                f,
                "buffer %{} has {expected} elements but {found} were given",
                buf.0
            ),
            EvalError::OutOfBounds {
                kernel,
                buf,
                index,
                elems,
            } => write!(
                f,
                "kernel {kernel}: index {index} of buffer %{} is outside 0..{elems}",
                buf.0
            ),
            EvalError::Invalid { kernel, message } => write!(f, "kernel {kernel}: {message}"),
        }
    }
}

impl std::error::Error for EvalError {}

/// Runs every kernel of `p` in order on `bufs`, one [`Data`] per buffer of `p`.
pub fn eval(p: &LoopProgram, bufs: &mut [Data]) -> std::result::Result<(), EvalError> {
    eval_timed(p, bufs).map(|_| ())
}

/// [`eval`], returning the wall time of each kernel.
pub fn eval_timed(
    p: &LoopProgram,
    bufs: &mut [Data],
) -> std::result::Result<Vec<std::time::Duration>, EvalError> {
    if bufs.len() != p.buffers.len() {
        return Err(EvalError::BufferCount {
            expected: p.buffers.len(),
            found: bufs.len(),
        });
    }
    for (id, (b, data)) in p.buffers.iter().zip(bufs.iter()).enumerate() {
        let buf = BufId(id as u32);
        if data.ty() != b.ty {
            return Err(EvalError::BufferType {
                buf,
                expected: b.ty,
                found: data.ty(),
            });
        }
        // Sparse input arrays hold the stored entries only: their length is at most the
        // buffer's capacity.
        let fits = match b.role {
            Role::InputPart { .. } => data.len() as u64 <= b.elems,
            _ => data.len() as u64 == b.elems,
        };
        if !fits {
            return Err(EvalError::BufferLen {
                buf,
                expected: b.elems,
                found: data.len(),
            });
        }
    }
    let mut times = Vec::with_capacity(p.kernels.len());
    for k in &p.kernels {
        let t = std::time::Instant::now();
        let mut m = Machine {
            p,
            bufs: &mut *bufs,
            kernel: &k.name,
            vars: Vec::new(),
            accs: Vec::new(),
        };
        m.block(&k.body)?;
        times.push(t.elapsed());
    }
    Ok(times)
}

/// Element `(r, c)` of a view without batch axes.
fn at(v: &MatView, r: u64, c: u64) -> i128 {
    v.offset as i128 + r as i128 * v.row_stride as i128 + c as i128 * v.col_stride as i128
}

/// A live accumulator.
struct AccSlot {
    id: AccId,
    ty: ElemType,
    value: f64,
}

/// The state of one kernel's run: variables and accumulators in scope, innermost last.
struct Machine<'a> {
    p: &'a LoopProgram,
    bufs: &'a mut [Data],
    kernel: &'a str,
    vars: Vec<(VarId, i64)>,
    accs: Vec<AccSlot>,
}

type Result<T> = std::result::Result<T, EvalError>;

impl Machine<'_> {
    fn invalid(&self, message: impl ToString) -> EvalError {
        EvalError::Invalid {
            kernel: self.kernel.to_string(),
            message: message.to_string(),
        }
    }

    fn block(&mut self, stmts: &[Stmt]) -> Result<()> {
        let n_accs = self.accs.len();
        for s in stmts {
            self.stmt(s)?;
        }
        self.accs.truncate(n_accs);
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Result<()> {
        match s {
            Stmt::Loop(l) => self.loop_(l),
            Stmt::Let { acc, ty, init } => {
                if !matches!(ty, ElemType::F32 | ElemType::F64) {
                    return Err(self.invalid(format!("accumulator a{} has type {ty}", acc.0)));
                }
                let value = round(*ty, self.expr(init, *ty)?);
                self.accs.push(AccSlot {
                    id: *acc,
                    ty: *ty,
                    value,
                });
                Ok(())
            }
            Stmt::Update { acc, op, value } => {
                let Some(slot) = self.accs.iter().rposition(|a| a.id == *acc) else {
                    return Err(self.invalid(format!("accumulator a{} is not declared", acc.0)));
                };
                let ty = self.accs[slot].ty;
                let x = self.expr(value, ty)?;
                let old = self.accs[slot].value;
                let new = match op {
                    AccOp::Set => x,
                    AccOp::Add => old + x,
                    AccOp::Mul => old * x,
                    AccOp::Max => max(old, x),
                    AccOp::Min => min(old, x),
                };
                self.accs[slot].value = round(ty, new);
                Ok(())
            }
            Stmt::Store { buf, index, value } => {
                let i = self.index(index)?;
                let ty = self.buffer(*buf)?.ty.compute();
                let x = self.expr(value, ty)?;
                self.store(*buf, i, x)
            }
            Stmt::Call(call) => self.call(call),
        }
    }

    fn loop_(&mut self, l: &Loop) -> Result<()> {
        match &l.iter {
            Iter::Range { extent } => {
                let Ok(extent) = i64::try_from(*extent) else {
                    return Err(self.invalid(format!("loop v{} is too long", l.var.0)));
                };
                for i in 0..extent {
                    self.run_body(l, &[(l.var, i)])?;
                }
            }
            Iter::Compressed {
                ptr,
                ptr_index,
                crd,
                coord,
            } => {
                let at = self.index(ptr_index)?;
                let lo = self.load_i32(*ptr, at)?;
                let hi = self.load_i32(*ptr, at + 1)?;
                if hi < lo {
                    return Err(self.invalid(format!(
                        "compressed level of loop v{}: ptr %{}[{at}] = {lo} > %{}[{}] = {hi}",
                        l.var.0,
                        ptr.0,
                        ptr.0,
                        at + 1
                    )));
                }
                for pos in lo..hi {
                    let c = self.load_i32(*crd, pos as i128)?;
                    self.run_body(l, &[(l.var, pos), (*coord, c)])?;
                }
            }
            Iter::Singleton { crd, pos_index } => {
                let at = self.index(pos_index)?;
                let c = self.load_i32(*crd, at)?;
                self.run_body(l, &[(l.var, c)])?;
            }
            Iter::TwoFour {
                groups,
                meta,
                meta_index,
                coord,
            } => {
                let base = self.index(meta_index)?;
                let Some(n_kept) = groups.checked_mul(2).and_then(|n| i64::try_from(n).ok()) else {
                    return Err(self.invalid(format!("loop v{} is too long", l.var.0)));
                };
                for var in 0..n_kept {
                    let word = self.load_i32(*meta, base + (var / 16) as i128)? as u32;
                    let m = (word >> (2 * (var % 16))) & 3;
                    let c = 4 * (var / 2) + m as i64;
                    self.run_body(l, &[(l.var, var), (*coord, c)])?;
                }
            }
        }
        Ok(())
    }

    /// Runs `l`'s body once with `bound` variables in scope.
    fn run_body(&mut self, l: &Loop, bound: &[(VarId, i64)]) -> Result<()> {
        let n_vars = self.vars.len();
        self.vars.extend_from_slice(bound);
        let r = self.block(&l.body);
        self.vars.truncate(n_vars);
        r
    }

    /// A sparse operand's dense values (row-major, its value type), after validating its
    /// arrays (sparse input data comes from outside).
    fn dense_of(&self, s: &SparseOperand, shape: &[usize]) -> Result<tdsl_sparse::Values> {
        let r = crate::data::sparse_ref(s, self.bufs, shape).map_err(|e| self.invalid(e))?;
        tdsl_sparse::validate::validate(r).map_err(|e| self.invalid(e))?;
        tdsl_sparse::prune::to_dense(r).map_err(|e| self.invalid(e))
    }

    fn call(&mut self, call: &LibCall) -> Result<()> {
        let (m, n, k, batch, a, b, c, accumulate) = match call {
            LibCall::Gemm {
                m,
                n,
                k,
                batch,
                a,
                b,
                c,
                accumulate,
            } => (m, n, k, batch, a, b, c, accumulate),
            LibCall::SpMM {
                m,
                n,
                k,
                s,
                transposed,
                side,
                d,
                c,
                accumulate,
            } => {
                // Naive: S as dense f64, then the textbook triple loop.
                let shape: Vec<usize> = s.shape.iter().map(|&e| e as usize).collect();
                let dense = match self.dense_of(s, &shape)? {
                    tdsl_sparse::Values::F32(v) => v.iter().map(|&x| x as f64).collect(),
                    tdsl_sparse::Values::F64(v) => v,
                    tdsl_sparse::Values::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
                    tdsl_sparse::Values::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
                };
                let cols = shape.get(1).copied().unwrap_or(1);
                let sv = |r: u64, c: u64| -> f64 {
                    let (r, c) = if *transposed { (c, r) } else { (r, c) };
                    dense[r as usize * cols + c as usize]
                };
                for i in 0..*m {
                    for j in 0..*n {
                        let mut sum = 0.0;
                        for kk in 0..*k {
                            let (x, y) = match side {
                                Side::Left => (sv(i, kk), self.load(d.buf, at(d, kk, j))?),
                                Side::Right => (self.load(d.buf, at(d, i, kk))?, sv(kk, j)),
                            };
                            sum += x * y;
                        }
                        let o = at(c, i, j);
                        if *accumulate {
                            sum += self.load(c.buf, o)?;
                        }
                        self.store(c.buf, o, sum)?;
                    }
                }
                return Ok(());
            }
            LibCall::Sparsify { src, out, select } => {
                let shape: Vec<usize> = out.shape.iter().map(|&e| e as usize).collect();
                let src = self
                    .bufs
                    .get(src.0 as usize)
                    .and_then(Data::as_values)
                    .ok_or_else(|| {
                        self.invalid(format!("sparsify source %{} is not float", src.0))
                    })?;
                let t = tdsl_sparse::prune::sparsify(src, &shape, out.layout, *select)
                    .map_err(|e| self.invalid(e))?;
                return crate::data::store_sparse(&t, out, self.bufs).map_err(|e| self.invalid(e));
            }
            LibCall::Densify { s, dst } => {
                let shape: Vec<usize> = s.shape.iter().map(|&e| e as usize).collect();
                let dense = Data::from(self.dense_of(s, &shape)?);
                let target =
                    self.bufs
                        .get_mut(dst.0 as usize)
                        .ok_or_else(|| EvalError::Invalid {
                            kernel: String::new(),
                            message: format!("densify target %{} does not exist", dst.0),
                        })?;
                if target.ty() != dense.ty() || target.len() != dense.len() {
                    return Err(self.invalid(format!(
                        "densify target %{} is {}[{}], not {}[{}]",
                        dst.0,
                        self.bufs[dst.0 as usize].ty(),
                        self.bufs[dst.0 as usize].len(),
                        dense.ty(),
                        dense.len()
                    )));
                }
                *target = dense;
                return Ok(());
            }
        };
        for v in [a, b, c] {
            if v.batch_strides.len() != batch.len() {
                return Err(self.invalid(format!(
                    "gemm view of %{} has {} batch strides for {} batch axes",
                    v.buf.0,
                    v.batch_strides.len(),
                    batch.len()
                )));
            }
        }
        if batch.contains(&0) {
            return Ok(());
        }
        // An odometer over the batch axes, last axis fastest.
        let mut b_idx = vec![0u64; batch.len()];
        loop {
            let (a0, b0, c0) = (base(a, &b_idx), base(b, &b_idx), base(c, &b_idx));
            for r in 0..*m as i128 {
                for col in 0..*n as i128 {
                    let mut sum = 0.0;
                    for kk in 0..*k as i128 {
                        let x = self.load(
                            a.buf,
                            a0 + r * a.row_stride as i128 + kk * a.col_stride as i128,
                        )?;
                        let y = self.load(
                            b.buf,
                            b0 + kk * b.row_stride as i128 + col * b.col_stride as i128,
                        )?;
                        sum += x * y;
                    }
                    let at = c0 + r * c.row_stride as i128 + col * c.col_stride as i128;
                    if *accumulate {
                        sum += self.load(c.buf, at)?;
                    }
                    self.store(c.buf, at, sum)?;
                }
            }
            let mut axis = batch.len();
            loop {
                if axis == 0 {
                    return Ok(());
                }
                axis -= 1;
                b_idx[axis] += 1;
                if b_idx[axis] < batch[axis] {
                    break;
                }
                b_idx[axis] = 0;
            }
        }
    }

    /// Evaluates `e`; `ctx` is the type of a subtree made only of constants.
    fn expr(&self, e: &Expr, ctx: ElemType) -> Result<f64> {
        Ok(match e {
            Expr::Const(x) => round(ctx, *x),
            Expr::Load { buf, index } => {
                let i = self.index(index)?;
                self.load(*buf, i)?
            }
            Expr::Acc(a) => match self.accs.iter().rev().find(|s| s.id == *a) {
                Some(slot) => slot.value,
                None => return Err(self.invalid(format!("accumulator a{} is not declared", a.0))),
            },
            Expr::Unary(op, x) => {
                let t = self.ty(x).unwrap_or(ctx);
                round(t, unary(*op, self.expr(x, t)?))
            }
            Expr::Binary(op, x, y) => {
                let t = join(self.ty(x), self.ty(y)).unwrap_or(ctx);
                round(t, binary(*op, self.expr(x, t)?, self.expr(y, t)?))
            }
            Expr::Cast(ty, x) => {
                if *ty == ElemType::I32 {
                    return Err(self.invalid("cast to i32"));
                }
                let t = self.ty(x).unwrap_or(ty.compute());
                round(*ty, self.expr(x, t)?)
            }
            Expr::Select(c, x, y) => {
                let tc = self.ty(c).unwrap_or(ctx);
                let t = join(self.ty(x), self.ty(y)).unwrap_or(ctx);
                let pick = crate::scalar::select(self.expr(c, tc)?, 1.0, 0.0) != 0.0;
                // Both sides are evaluated, as a backend's vector select does.
                let (a, b) = (self.expr(x, t)?, self.expr(y, t)?);
                if pick {
                    a
                } else {
                    b
                }
            }
            Expr::Iota(index) => round(ctx, self.index(index)? as f64),
        })
    }

    /// The compute type of `e`, `None` if it is made only of constants.
    fn ty(&self, e: &Expr) -> Option<ElemType> {
        match e {
            Expr::Const(_) => None,
            Expr::Load { buf, .. } => self.p.buffers.get(buf.0 as usize).map(|b| b.ty.compute()),
            Expr::Acc(a) => self.accs.iter().rev().find(|s| s.id == *a).map(|s| s.ty),
            Expr::Unary(_, x) => self.ty(x),
            Expr::Binary(_, x, y) => join(self.ty(x), self.ty(y)),
            Expr::Cast(t, _) => Some(t.compute()),
            Expr::Select(_, x, y) => join(self.ty(x), self.ty(y)),
            Expr::Iota(_) => None,
        }
    }

    fn index(&self, index: &Index) -> Result<i128> {
        let mut at = index.offset as i128;
        for (var, stride) in &index.terms {
            let Some((_, value)) = self.vars.iter().rev().find(|(v, _)| v == var) else {
                return Err(self.invalid(format!("variable v{} is not bound", var.0)));
            };
            at = at.saturating_add(*stride as i128 * *value as i128);
        }
        Ok(at)
    }

    fn buffer(&self, buf: BufId) -> Result<&crate::ir::Buffer> {
        self.p
            .buffers
            .get(buf.0 as usize)
            .ok_or_else(|| self.invalid(format!("buffer %{} does not exist", buf.0)))
    }

    /// `at` as a position in `buf`, or an out-of-bounds error.
    fn slot(&self, buf: BufId, at: i128) -> Result<usize> {
        self.buffer(buf)?;
        let elems = self.bufs[buf.0 as usize].len();
        if at < 0 || at >= elems as i128 {
            return Err(EvalError::OutOfBounds {
                kernel: self.kernel.to_string(),
                buf,
                index: at,
                elems,
            });
        }
        Ok(at as usize)
    }

    fn load(&self, buf: BufId, at: i128) -> Result<f64> {
        if self.buffer(buf)?.ty == ElemType::I32 {
            return Err(self.invalid(format!("%{} holds i32 indices, not values", buf.0)));
        }
        let i = self.slot(buf, at)?;
        Ok(self.bufs[buf.0 as usize].get(i))
    }

    fn load_i32(&self, buf: BufId, at: i128) -> Result<i64> {
        let i = self.slot(buf, at)?;
        match &self.bufs[buf.0 as usize] {
            Data::I32(v) => Ok(v[i] as i64),
            other => Err(self.invalid(format!(
                "sparse level reads %{}, which is {}, not i32",
                buf.0,
                other.ty()
            ))),
        }
    }

    fn store(&mut self, buf: BufId, at: i128, x: f64) -> Result<()> {
        let b = self.buffer(buf)?;
        if let Role::Input(n) | Role::InputPart { input: n, .. } = b.role {
            return Err(self.invalid(format!("store to %{} (input {n})", buf.0)));
        }
        if b.ty == ElemType::I32 {
            return Err(self.invalid(format!("store to %{}, which holds i32 indices", buf.0)));
        }
        let i = self.slot(buf, at)?;
        self.bufs[buf.0 as usize].set(i, x);
        Ok(())
    }
}

/// The offset of batch `b_idx` in a view.
fn base(v: &MatView, b_idx: &[u64]) -> i128 {
    v.offset as i128
        + v.batch_strides
            .iter()
            .zip(b_idx)
            .map(|(s, b)| *s as i128 * *b as i128)
            .sum::<i128>()
}

fn join(a: Option<ElemType>, b: Option<ElemType>) -> Option<ElemType> {
    match (a, b) {
        (Some(ElemType::F64), _) | (_, Some(ElemType::F64)) => Some(ElemType::F64),
        (Some(t), _) | (None, Some(t)) => Some(t),
        (None, None) => None,
    }
}

/// `x` rounded to nearest even in `ty`, as an f64.
fn round(ty: ElemType, x: f64) -> f64 {
    match ty {
        ElemType::F32 => x as f32 as f64,
        ElemType::F16 => tdsl_sparse::dtype::f64_to_f16(x).to_f64(),
        ElemType::BF16 => tdsl_sparse::dtype::f64_to_bf16(x).to_f64(),
        ElemType::F64 | ElemType::I32 => x,
    }
}

use crate::scalar::{max, min};

fn unary(op: UnOp, x: f64) -> f64 {
    crate::scalar::unary(op, x)
}

fn binary(op: BinOp, a: f64, b: f64) -> f64 {
    crate::scalar::binary(op, a, b)
}

#[cfg(test)]
pub(crate) mod tests {
    //! Hand-built programs shared by the tests of `print`, `verify` and `eval`, and the
    //! evaluator's own tests: each program's result is computed directly in the test.

    use super::*;
    use crate::ir::{Buffer, Kernel};
    use half::{bf16, f16};
    use proptest::prelude::*;

    pub(crate) fn buffer(name: &str, ty: ElemType, elems: u64, role: Role) -> Buffer {
        Buffer {
            name: name.into(),
            ty,
            elems,
            role,
        }
    }

    pub(crate) fn ix(offset: i64, terms: &[(u32, i64)]) -> Index {
        Index {
            offset,
            terms: terms.iter().map(|(v, s)| (VarId(*v), *s)).collect(),
        }
    }

    pub(crate) fn ld(buf: u32, index: Index) -> Expr {
        Expr::Load {
            buf: BufId(buf),
            index,
        }
    }

    pub(crate) fn k(x: f64) -> Expr {
        Expr::Const(x)
    }

    pub(crate) fn acc(a: u32) -> Expr {
        Expr::Acc(AccId(a))
    }

    pub(crate) fn un(op: UnOp, x: Expr) -> Expr {
        Expr::Unary(op, Box::new(x))
    }

    pub(crate) fn bin(op: BinOp, x: Expr, y: Expr) -> Expr {
        Expr::Binary(op, Box::new(x), Box::new(y))
    }

    pub(crate) fn cast(ty: ElemType, x: Expr) -> Expr {
        Expr::Cast(ty, Box::new(x))
    }

    pub(crate) fn loop_(var: u32, iter: Iter, body: Vec<Stmt>) -> Loop {
        Loop {
            var: VarId(var),
            iter,
            parallel: false,
            vector: 1,
            gpu: None,
            body,
        }
    }

    pub(crate) fn range(var: u32, extent: u64, body: Vec<Stmt>) -> Stmt {
        Stmt::Loop(loop_(var, Iter::Range { extent }, body))
    }

    /// Marks a loop statement `parallel`.
    pub(crate) fn par(s: Stmt) -> Stmt {
        match s {
            Stmt::Loop(l) => Stmt::Loop(Loop {
                parallel: true,
                ..l
            }),
            s => s,
        }
    }

    /// Sets a loop statement's vector width.
    pub(crate) fn vector(s: Stmt, lanes: u32) -> Stmt {
        match s {
            Stmt::Loop(l) => Stmt::Loop(Loop { vector: lanes, ..l }),
            s => s,
        }
    }

    pub(crate) fn let_(a: u32, ty: ElemType, init: Expr) -> Stmt {
        Stmt::Let {
            acc: AccId(a),
            ty,
            init,
        }
    }

    pub(crate) fn update(a: u32, op: AccOp, value: Expr) -> Stmt {
        Stmt::Update {
            acc: AccId(a),
            op,
            value,
        }
    }

    pub(crate) fn store(buf: u32, index: Index, value: Expr) -> Stmt {
        Stmt::Store {
            buf: BufId(buf),
            index,
            value,
        }
    }

    pub(crate) fn program(
        buffers: Vec<Buffer>,
        name: &str,
        origin: &str,
        body: Vec<Stmt>,
    ) -> LoopProgram {
        LoopProgram {
            tf32: false,
            buffers,
            kernels: vec![Kernel {
                name: name.into(),
                origin: origin.into(),
                source: None,
                body,
            }],
        }
    }

    pub(crate) fn view(
        buf: u32,
        offset: i64,
        batch_strides: &[i64],
        row_stride: i64,
        col_stride: i64,
    ) -> MatView {
        MatView {
            buf: BufId(buf),
            offset,
            row_stride,
            col_stride,
            batch_strides: batch_strides.to_vec(),
        }
    }

    use ElemType::{BF16, F16, F32, F64, I32};

    /// `y[r] = Σ_c x[r, c]` over a `rows × cols` row-major `x`.
    pub(crate) fn row_sum(rows: u64, cols: u64) -> LoopProgram {
        program(
            vec![
                buffer("x", F32, rows * cols, Role::Input(0)),
                buffer("y", F32, rows, Role::Output(0)),
            ],
            "k0",
            "y = reduce(x, \"r c -> r\", \"sum\")",
            vec![par(range(
                0,
                rows,
                vec![
                    let_(0, F32, k(0.0)),
                    vector(
                        range(
                            1,
                            cols,
                            vec![update(
                                0,
                                AccOp::Add,
                                ld(0, ix(0, &[(0, cols as i64), (1, 1)])),
                            )],
                        ),
                        4,
                    ),
                    store(1, ix(0, &[(0, 1)]), acc(0)),
                ],
            ))],
        )
    }

    /// Softmax over the rows of `x`: a max pass, a sum pass and a write pass.
    pub(crate) fn softmax(rows: u64, cols: u64) -> LoopProgram {
        let c = cols as i64;
        let x = |v: u32| ld(0, ix(0, &[(0, c), (v, 1)]));
        let shifted = |v: u32| un(UnOp::Exp, bin(BinOp::Sub, x(v), acc(0)));
        program(
            vec![
                buffer("x", F32, rows * cols, Role::Input(0)),
                buffer("y", F32, rows * cols, Role::Output(0)),
            ],
            "softmax",
            "y = softmax(x, c)",
            vec![par(range(
                0,
                rows,
                vec![
                    let_(0, F32, k(f64::NEG_INFINITY)),
                    range(1, cols, vec![update(0, AccOp::Max, x(1))]),
                    let_(1, F32, k(0.0)),
                    range(2, cols, vec![update(1, AccOp::Add, shifted(2))]),
                    vector(
                        range(
                            3,
                            cols,
                            vec![store(
                                1,
                                ix(0, &[(0, c), (3, 1)]),
                                bin(BinOp::Div, shifted(3), acc(1)),
                            )],
                        ),
                        4,
                    ),
                ],
            ))],
        )
    }

    /// `y[c, r] = x[r, c]` for a `rows × cols` row-major `x`.
    pub(crate) fn transpose(rows: u64, cols: u64) -> LoopProgram {
        let (r, c) = (rows as i64, cols as i64);
        program(
            vec![
                buffer("x", F64, rows * cols, Role::Input(0)),
                buffer("y", F64, rows * cols, Role::Output(0)),
            ],
            "k0",
            "y = rearrange(x, \"r c -> c r\")",
            vec![range(
                0,
                cols,
                vec![range(
                    1,
                    rows,
                    vec![store(
                        1,
                        ix(0, &[(0, r), (1, 1)]),
                        ld(0, ix(0, &[(0, 1), (1, c)])),
                    )],
                )],
            )],
        )
    }

    /// `y[r, c] = x[r, c] + b[c]` with `b` broadcast by a zero stride, stored as f16.
    pub(crate) fn broadcast_add(rows: u64, cols: u64) -> LoopProgram {
        let c = cols as i64;
        program(
            vec![
                buffer("x", F32, rows * cols, Role::Input(0)),
                buffer("b", F32, cols, Role::Input(1)),
                buffer("y", F16, rows * cols, Role::Output(0)),
            ],
            "k0",
            "y = x + b",
            vec![par(range(
                0,
                rows,
                vec![vector(
                    range(
                        1,
                        cols,
                        vec![store(
                            2,
                            ix(0, &[(0, c), (1, 1)]),
                            bin(
                                BinOp::Add,
                                ld(0, ix(0, &[(0, c), (1, 1)])),
                                ld(1, ix(0, &[(0, 0), (1, 1)])),
                            ),
                        )],
                    ),
                    8,
                )],
            ))],
        )
    }

    /// `c[b] = a[b] · w` for `batch` matrices `a` (m×k, row-major) and one `w` (k×n) stored
    /// transposed (n×k), so it is read with strides (1, k) and broadcast with batch stride 0.
    pub(crate) fn batched_gemm(
        batch: u64,
        m: u64,
        n: u64,
        kk: u64,
        accumulate: bool,
    ) -> LoopProgram {
        let (mi, ni, ki) = (m as i64, n as i64, kk as i64);
        LoopProgram {
            tf32: false,
            buffers: vec![
                buffer("a", F32, batch * m * kk, Role::Input(0)),
                buffer("w", F32, kk * n, Role::Input(1)),
                buffer("c", F32, batch * m * n, Role::Output(0)),
            ],
            kernels: vec![Kernel {
                name: "k0".into(),
                origin: "c = einsum(a, w, \"b m k, k n -> b m n\")".into(),
                source: None,
                body: vec![Stmt::Call(LibCall::Gemm {
                    m,
                    n,
                    k: kk,
                    batch: vec![batch],
                    a: view(0, 0, &[mi * ki], ki, 1),
                    b: view(1, 0, &[0], 1, ki),
                    c: view(2, 0, &[mi * ni], ni, 1),
                    accumulate,
                })],
            }],
        }
    }

    /// `y = A·x` for a CSR matrix `A` (`m` rows, `n` columns, `nnz` stored values).
    pub(crate) fn csr_spmv(m: u64, n: u64, nnz: u64) -> LoopProgram {
        program(
            vec![
                buffer("a.ptr", I32, m + 1, Role::Input(0)),
                buffer("a.crd", I32, nnz, Role::Input(1)),
                buffer("a.val", F32, nnz, Role::Input(2)),
                buffer("x", F32, n, Role::Input(3)),
                buffer("y", F32, m, Role::Output(0)),
            ],
            "spmv",
            "y = einsum(a, x, \"i j, j -> i\")",
            vec![par(range(
                0,
                m,
                vec![
                    let_(0, F32, k(0.0)),
                    Stmt::Loop(loop_(
                        1,
                        Iter::Compressed {
                            ptr: BufId(0),
                            ptr_index: ix(0, &[(0, 1)]),
                            crd: BufId(1),
                            coord: VarId(2),
                        },
                        vec![update(
                            0,
                            AccOp::Add,
                            bin(BinOp::Mul, ld(2, ix(0, &[(1, 1)])), ld(3, ix(0, &[(2, 1)]))),
                        )],
                    )),
                    store(4, ix(0, &[(0, 1)]), acc(0)),
                ],
            ))],
        )
    }

    /// `y = W·x` for a 2:4 matrix `W` (`rows` × `4·groups`): `2·groups` kept values a row, one
    /// metadata word a row (so `groups ≤ 8`).
    pub(crate) fn two_four_matvec(rows: u64, groups: u64) -> LoopProgram {
        let kept = 2 * groups as i64;
        program(
            vec![
                buffer("w.val", F32, rows * 2 * groups, Role::Input(0)),
                buffer("w.meta", I32, rows, Role::Input(1)),
                buffer("x", F32, 4 * groups, Role::Input(2)),
                buffer("y", F32, rows, Role::Output(0)),
            ],
            "k0",
            "y = einsum(w, x, \"i j, j -> i\")",
            vec![range(
                0,
                rows,
                vec![
                    let_(0, F64, k(0.0)),
                    Stmt::Loop(loop_(
                        1,
                        Iter::TwoFour {
                            groups,
                            meta: BufId(1),
                            meta_index: ix(0, &[(0, 1)]),
                            coord: VarId(2),
                        },
                        vec![update(
                            0,
                            AccOp::Add,
                            bin(
                                BinOp::Mul,
                                ld(0, ix(0, &[(0, kept), (1, 1)])),
                                ld(2, ix(0, &[(2, 1)])),
                            ),
                        )],
                    )),
                    store(3, ix(0, &[(0, 1)]), acc(0)),
                ],
            )],
        )
    }

    /// Every fixture program, for tests that hold for all of them.
    pub(crate) fn fixtures() -> Vec<LoopProgram> {
        vec![
            row_sum(3, 5),
            softmax(2, 6),
            transpose(3, 4),
            broadcast_add(3, 4),
            batched_gemm(2, 3, 5, 4, false),
            csr_spmv(3, 4, 5),
            two_four_matvec(2, 2),
        ]
    }

    /// `n` reproducible values in `[-2, 2)` with a few repeats.
    pub(crate) fn values(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f64 / (1u64 << 24) as f64) * 4.0 - 2.0
            })
            .map(|x| (x * 64.0).round() / 64.0)
            .collect()
    }

    /// Zeroed buffers for `p`, with `inputs` copied into its input buffers in order.
    pub(crate) fn buffers(p: &LoopProgram, inputs: &[Data]) -> Vec<Data> {
        p.buffers
            .iter()
            .map(|b| match b.role {
                Role::Input(n) => inputs[n as usize].clone(),
                _ => Data::zeros(b.ty, b.elems as usize),
            })
            .collect()
    }

    fn f32s(v: &[f64]) -> Data {
        Data::F32(v.iter().map(|x| *x as f32).collect())
    }

    /// Runs `p` on `inputs` and returns output 0 widened to f64.
    fn run(p: &LoopProgram, inputs: &[Data]) -> Vec<f64> {
        crate::verify::verify(p).unwrap();
        let mut bufs = buffers(p, inputs);
        eval(p, &mut bufs).unwrap();
        let out = p
            .buffers
            .iter()
            .position(|b| b.role == Role::Output(0))
            .unwrap();
        bufs[out].to_f64()
    }

    fn close(got: &[f64], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "element {i}: got {g}, want {w}"
            );
        }
    }

    #[test]
    fn row_sum_adds_in_f32_in_order() {
        let x = values(15, 1);
        let got = run(&row_sum(3, 5), &[f32s(&x)]);
        let want: Vec<f64> = (0..3)
            .map(|r| {
                x[r * 5..r * 5 + 5]
                    .iter()
                    .fold(0.0f32, |a, v| a + *v as f32) as f64
            })
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn softmax_rows_sum_to_one() {
        let x = values(12, 2);
        let got = run(&softmax(2, 6), &[f32s(&x)]);
        let mut want = Vec::new();
        for row in x.chunks(6) {
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
            want.extend(row.iter().map(|v| (v - m).exp() / s));
        }
        close(&got, &want, 1e-6);
        for row in got.chunks(6) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-6);
        }
    }

    #[test]
    fn transpose_reads_with_strides() {
        let x = values(12, 3);
        let got = run(&transpose(3, 4), &[Data::F64(x.clone())]);
        let want: Vec<f64> = (0..4)
            .flat_map(|c| (0..3).map(move |r| (r, c)))
            .map(|(r, c)| x[r * 4 + c])
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn broadcast_add_narrows_to_f16() {
        let (x, b) = (values(12, 4), values(4, 5));
        let got = run(&broadcast_add(3, 4), &[f32s(&x), f32s(&b)]);
        let want: Vec<f64> = (0..12)
            .map(|i| f16::from_f32(x[i] as f32 + b[i % 4] as f32).to_f64())
            .collect();
        assert_eq!(got, want);
    }

    fn gemm_reference(
        a: &[f64],
        w: &[f64],
        c0: &[f64],
        (batch, m, n, kk): (usize, usize, usize, usize),
    ) -> Vec<f64> {
        let mut c = c0.to_vec();
        for b in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    let dot: f64 = (0..kk)
                        .map(|p| {
                            (a[b * m * kk + i * kk + p] as f32 as f64)
                                * (w[j * kk + p] as f32 as f64)
                        })
                        .sum();
                    c[b * m * n + i * n + j] += dot;
                }
            }
        }
        c
    }

    #[test]
    fn batched_gemm_broadcasts_the_shared_operand() {
        let (a, w) = (values(2 * 3 * 4, 6), values(4 * 5, 7));
        let got = run(&batched_gemm(2, 3, 5, 4, false), &[f32s(&a), f32s(&w)]);
        let want = gemm_reference(&a, &w, &[0.0; 30], (2, 3, 5, 4));
        close(&got, &want, 1e-6);
    }

    #[test]
    fn gemm_accumulates_into_c() {
        let p = batched_gemm(2, 3, 5, 4, true);
        let (a, w, c0) = (values(24, 8), values(20, 9), values(30, 10));
        let mut bufs = buffers(&p, &[f32s(&a), f32s(&w)]);
        bufs[2] = f32s(&c0);
        eval(&p, &mut bufs).unwrap();
        let c0: Vec<f64> = c0.iter().map(|v| *v as f32 as f64).collect();
        close(
            &bufs[2].to_f64(),
            &gemm_reference(&a, &w, &c0, (2, 3, 5, 4)),
            1e-6,
        );
    }

    /// A 3×4 CSR matrix with an empty middle row: [[1, 0, 2, 0], [0, 0, 0, 0], [0, 3, 0.5, -4]].
    fn csr_example() -> Vec<Data> {
        vec![
            Data::I32(vec![0, 2, 2, 5]),
            Data::I32(vec![0, 2, 1, 2, 3]),
            Data::F32(vec![1.0, 2.0, 3.0, 0.5, -4.0]),
            Data::F32(vec![1.0, 10.0, 100.0, 1000.0]),
        ]
    }

    #[test]
    fn csr_spmv_iterates_compressed_rows() {
        let got = run(&csr_spmv(3, 4, 5), &csr_example());
        assert_eq!(got, vec![201.0, 0.0, 30.0 + 50.0 - 4000.0]);
    }

    /// Packs 2-bit positions, 16 a word, the first in the low bits.
    fn pack_meta(positions: &[u32]) -> Vec<i32> {
        positions
            .chunks(16)
            .map(|c| {
                c.iter()
                    .enumerate()
                    .fold(0u32, |w, (i, p)| w | (p << (2 * i))) as i32
            })
            .collect()
    }

    #[test]
    fn two_four_matvec_decodes_metadata() {
        // Dense rows of W (8 columns, 2 groups), each group keeping two positions.
        let dense = [
            [0.0, 1.5, 0.0, -2.0, 3.0, 0.0, 0.25, 0.0],
            [7.0, 0.0, 0.0, 1.0, 0.0, 0.0, -1.0, 2.0],
        ];
        let mut vals = Vec::new();
        let mut meta = Vec::new();
        for row in &dense {
            let mut positions = Vec::new();
            for (g, group) in row.chunks(4).enumerate() {
                let kept: Vec<usize> = (0..4).filter(|i| group[*i] != 0.0).collect();
                assert_eq!(kept.len(), 2, "group {g}");
                for i in kept {
                    vals.push(group[i]);
                    positions.push(i as u32);
                }
            }
            meta.extend(pack_meta(&positions));
        }
        let x = values(8, 11);
        let got = run(
            &two_four_matvec(2, 2),
            &[f32s(&vals), Data::I32(meta), f32s(&x)],
        );
        let want: Vec<f64> = dense
            .iter()
            .map(|row| {
                row.iter()
                    .zip(&x)
                    .map(|(w, x)| w * (*x as f32 as f64))
                    .sum::<f64>() as f32 as f64
            })
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn two_four_metadata_spans_words() {
        // 10 groups keep 20 values: two metadata words, the second half full. Every group keeps
        // positions 1 and 3, so y = Σ x[4g + 1] + x[4g + 3] with unit weights.
        let groups = 10;
        let p = two_four_matvec(1, groups);
        let mut p = p;
        p.buffers[1].elems = 2;
        let meta = pack_meta(&[1, 3].repeat(groups as usize));
        assert_eq!(meta.len(), 2);
        let x = values(40, 12);
        let got = run(&p, &[f32s(&[1.0; 20]), Data::I32(meta), f32s(&x)]);
        let want: f64 = (0..10)
            .map(|g| x[4 * g + 1] as f32 as f64 + x[4 * g + 3] as f32 as f64)
            .sum();
        assert_eq!(got, vec![want as f32 as f64]);
    }

    #[test]
    fn singleton_binds_the_coordinate() {
        // COO-style: y[crd[p]] = v[p] for each stored position p.
        let p = program(
            vec![
                buffer("crd", I32, 3, Role::Input(0)),
                buffer("v", F32, 3, Role::Input(1)),
                buffer("y", F32, 5, Role::Output(0)),
            ],
            "k0",
            "",
            vec![range(
                0,
                3,
                vec![Stmt::Loop(loop_(
                    1,
                    Iter::Singleton {
                        crd: BufId(0),
                        pos_index: ix(0, &[(0, 1)]),
                    },
                    vec![store(2, ix(0, &[(1, 1)]), ld(1, ix(0, &[(0, 1)])))],
                ))],
            )],
        );
        let got = run(
            &p,
            &[Data::I32(vec![4, 0, 2]), Data::F32(vec![1.0, 2.0, 3.0])],
        );
        assert_eq!(got, vec![2.0, 0.0, 3.0, 0.0, 1.0]);
    }

    /// Evaluates `value` as the stored value of a one-element output of type `out`, with
    /// `x: f32[4] = inputs`.
    fn scalar(value: Expr, out: ElemType, inputs: &[f64]) -> f64 {
        let p = program(
            vec![
                buffer("x", F32, 4, Role::Input(0)),
                buffer("y", out, 1, Role::Output(0)),
            ],
            "k0",
            "",
            vec![store(1, ix(0, &[]), value)],
        );
        run(&p, &[f32s(inputs)])[0]
    }

    fn x(i: i64) -> Expr {
        ld(0, ix(i, &[]))
    }

    #[test]
    fn f32_compute_rounds_every_operation() {
        let inputs = [1e8, 0.0, 0.0, 0.0];
        // (1e8 + 1) - 1e8 is 0 in f32, 1 in f64.
        let e = bin(BinOp::Sub, bin(BinOp::Add, x(0), k(1.0)), x(0));
        assert_eq!(scalar(e.clone(), F32, &inputs), 0.0);
        assert_eq!(scalar(cast(F64, e.clone()), F64, &inputs), 0.0);
        // Widening the load first moves the whole expression to f64.
        let wide = bin(
            BinOp::Sub,
            bin(BinOp::Add, cast(F64, x(0)), k(1.0)),
            cast(F64, x(0)),
        );
        assert_eq!(scalar(wide, F64, &inputs), 1.0);
        // A constant-only expression takes the stored buffer's type.
        assert_eq!(scalar(k(0.1), F64, &inputs), 0.1);
        assert_eq!(scalar(k(0.1), F32, &inputs), 0.1f32 as f64);
        assert_eq!(
            scalar(bin(BinOp::Add, x(1), k(0.1)), F64, &inputs),
            0.1f32 as f64
        );
    }

    #[test]
    fn casts_round_to_their_type() {
        let inputs = [1.0 + 1.0 / 1024.0 + 1.0 / 4096.0, 0.0, 0.0, 0.0];
        // f16 keeps 10 fraction bits: 1 + 2^-10 + 2^-12 rounds down to 1 + 2^-10.
        assert_eq!(scalar(cast(F16, x(0)), F32, &inputs), 1.0 + 1.0 / 1024.0);
        // bf16 keeps 7: it rounds to 1.
        assert_eq!(scalar(cast(BF16, x(0)), F32, &inputs), 1.0);
        // A tie rounds to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
        assert_eq!(scalar(cast(F16, k(1.0 + 1.0 / 2048.0)), F32, &inputs), 1.0);
    }

    #[test]
    fn max_min_and_relu_propagate_nan() {
        let inputs = [f64::NAN, 1.0, -0.0, 0.0];
        for op in [BinOp::Max, BinOp::Min] {
            assert!(scalar(bin(op, x(0), x(1)), F32, &inputs).is_nan());
            assert!(scalar(bin(op, x(1), x(0)), F32, &inputs).is_nan());
        }
        assert!(scalar(un(UnOp::Relu, x(0)), F32, &inputs).is_nan());
        assert_eq!(scalar(un(UnOp::Relu, k(-3.0)), F32, &inputs), 0.0);
        let max0 = scalar(bin(BinOp::Max, x(2), x(3)), F32, &inputs);
        assert!(max0 == 0.0 && max0.is_sign_positive());
        let min0 = scalar(bin(BinOp::Min, x(3), x(2)), F32, &inputs);
        assert!(min0 == 0.0 && min0.is_sign_negative());
    }

    #[test]
    fn max_accumulator_propagates_nan() {
        let p = program(
            vec![
                buffer("x", F32, 4, Role::Input(0)),
                buffer("y", F32, 1, Role::Output(0)),
            ],
            "k0",
            "",
            vec![
                let_(0, F32, k(f64::NEG_INFINITY)),
                range(0, 4, vec![update(0, AccOp::Max, ld(0, ix(0, &[(0, 1)])))]),
                store(1, ix(0, &[]), acc(0)),
            ],
        );
        assert!(run(&p, &[f32s(&[1.0, f64::NAN, 3.0, 2.0])])[0].is_nan());
        assert_eq!(run(&p, &[f32s(&[1.0, 5.0, 3.0, 2.0])]), vec![5.0]);
    }

    #[test]
    fn unary_functions_follow_their_definitions() {
        let inputs = [0.75, 4.0, -1.5, 0.0];
        let f = |op, i| scalar(un(op, cast(F64, x(i))), F64, &inputs);
        let c = (2.0 / std::f64::consts::PI).sqrt();
        let gelu = |x: f64| x / (1.0 + (-2.0 * (c * (x + 0.044715 * x * x * x))).exp());
        assert_eq!(f(UnOp::Gelu, 0), gelu(0.75));
        assert_eq!(f(UnOp::Gelu, 2), gelu(-1.5));
        assert_eq!(f(UnOp::Sigmoid, 2), 1.0 / (1.0 + 1.5f64.exp()));
        assert_eq!(f(UnOp::Rsqrt, 1), 0.5);
        assert_eq!(f(UnOp::Square, 2), 2.25);
        assert_eq!(f(UnOp::Neg, 0), -0.75);
        assert_eq!(f(UnOp::Abs, 2), 1.5);
        assert_eq!(f(UnOp::Log, 1), 4f64.ln());
        assert_eq!(f(UnOp::Sqrt, 1), 2.0);
        assert_eq!(f(UnOp::Relu, 2), 0.0);
        assert_eq!(
            scalar(bin(BinOp::Pow, cast(F64, x(1)), k(0.5)), F64, &inputs),
            2.0
        );
        // In f32 the result is the f64 function rounded once.
        assert_eq!(
            scalar(un(UnOp::Exp, x(0)), F32, &inputs),
            0.75f64.exp() as f32 as f64
        );
    }

    #[test]
    fn f64_accumulator_sums_f32_values_exactly() {
        let p = program(
            vec![
                buffer("x", F32, 3, Role::Input(0)),
                buffer("y", F64, 1, Role::Output(0)),
            ],
            "k0",
            "",
            vec![
                let_(0, F64, k(0.0)),
                range(0, 3, vec![update(0, AccOp::Add, ld(0, ix(0, &[(0, 1)])))]),
                store(1, ix(0, &[]), acc(0)),
            ],
        );
        assert_eq!(run(&p, &[f32s(&[1e8, 1.0, -1e8])]), vec![1.0]);
        let mut p32 = p.clone();
        p32.kernels[0].body[0] = let_(0, F32, k(0.0));
        assert_eq!(run(&p32, &[f32s(&[1e8, 1.0, -1e8])]), vec![0.0]);
    }

    #[test]
    fn accumulator_set_and_mul() {
        let p = program(
            vec![
                buffer("x", F32, 3, Role::Input(0)),
                buffer("y", F32, 2, Role::Output(0)),
            ],
            "k0",
            "",
            vec![
                let_(0, F32, k(1.0)),
                let_(1, F32, k(0.0)),
                range(
                    0,
                    3,
                    vec![
                        update(0, AccOp::Mul, ld(0, ix(0, &[(0, 1)]))),
                        update(1, AccOp::Set, ld(0, ix(0, &[(0, 1)]))),
                    ],
                ),
                store(1, ix(0, &[]), acc(0)),
                store(1, ix(1, &[]), acc(1)),
            ],
        );
        assert_eq!(run(&p, &[f32s(&[2.0, -3.0, 0.5])]), vec![-3.0, 0.5]);
    }

    #[test]
    fn kernels_run_in_order_through_temps() {
        let mut p = row_sum(2, 3);
        p.buffers.push(buffer("t", F32, 2, Role::Temp));
        // k0 writes the row sums to the temp; k1 doubles them into y.
        let body = &mut p.kernels[0].body;
        let Stmt::Loop(l) = &mut body[0] else {
            unreachable!()
        };
        l.body[2] = store(2, ix(0, &[(0, 1)]), acc(0));
        p.kernels.push(Kernel {
            name: "k1".into(),
            origin: "y = 2 * t".into(),
            source: None,
            body: vec![range(
                0,
                2,
                vec![store(
                    1,
                    ix(0, &[(0, 1)]),
                    bin(BinOp::Mul, k(2.0), ld(2, ix(0, &[(0, 1)]))),
                )],
            )],
        });
        let got = run(&p, &[f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]);
        assert_eq!(got, vec![12.0, 30.0]);
    }

    #[test]
    fn rejects_wrong_buffers() {
        let p = row_sum(2, 3);
        let mut bufs = vec![Data::zeros(F32, 6)];
        assert_eq!(
            eval(&p, &mut bufs),
            Err(EvalError::BufferCount {
                expected: 2,
                found: 1
            })
        );
        let mut bufs = vec![Data::zeros(F64, 6), Data::zeros(F32, 2)];
        assert_eq!(
            eval(&p, &mut bufs),
            Err(EvalError::BufferType {
                buf: BufId(0),
                expected: F32,
                found: F64
            })
        );
        let mut bufs = vec![Data::zeros(F32, 6), Data::zeros(F32, 3)];
        assert_eq!(
            eval(&p, &mut bufs),
            Err(EvalError::BufferLen {
                buf: BufId(1),
                expected: 2,
                found: 3
            })
        );
    }

    fn eval_err(p: &LoopProgram, inputs: &[Data]) -> String {
        let mut bufs = buffers(p, inputs);
        eval(p, &mut bufs).unwrap_err().to_string()
    }

    #[test]
    fn out_of_bounds_access_is_an_error() {
        let mut p = row_sum(2, 3);
        p.buffers[0].elems = 5;
        let got = eval_err(&p, &[f32s(&[1.0; 5])]);
        assert_eq!(got, "kernel k0: index 5 of buffer %0 is outside 0..5");
        let mut p = transpose(3, 4);
        let Stmt::Loop(l) = &mut p.kernels[0].body[0] else {
            unreachable!()
        };
        let Stmt::Loop(inner) = &mut l.body[0] else {
            unreachable!()
        };
        inner.body[0] = store(1, ix(-1, &[(1, 1)]), k(0.0));
        let got = eval_err(&p, &[Data::F64(vec![0.0; 12])]);
        assert_eq!(got, "kernel k0: index -1 of buffer %1 is outside 0..12");
    }

    #[test]
    fn malformed_sparse_data_is_an_error() {
        let p = csr_spmv(3, 4, 5);
        let mut inputs = csr_example();
        inputs[0] = Data::I32(vec![0, 3, 2, 5]);
        assert_eq!(
            eval_err(&p, &inputs),
            "kernel spmv: compressed level of loop v1: ptr %0[1] = 3 > %0[2] = 2"
        );
        let mut inputs = csr_example();
        inputs[1] = Data::I32(vec![0, 2, 1, 2, 9]);
        assert_eq!(
            eval_err(&p, &inputs),
            "kernel spmv: index 9 of buffer %3 is outside 0..4"
        );
        let mut inputs = csr_example();
        inputs[0] = Data::I32(vec![0, 2, 2, 6]);
        assert_eq!(
            eval_err(&p, &inputs),
            "kernel spmv: index 5 of buffer %1 is outside 0..5"
        );
    }

    #[test]
    fn ill_formed_programs_are_errors_not_panics() {
        let unbound = program(
            vec![buffer("y", F32, 1, Role::Output(0))],
            "k0",
            "",
            vec![store(0, ix(0, &[(3, 1)]), acc(2))],
        );
        assert_eq!(
            eval_err(&unbound, &[]),
            "kernel k0: variable v3 is not bound"
        );
        let mut undeclared = unbound.clone();
        undeclared.kernels[0].body = vec![store(0, ix(0, &[]), acc(2))];
        assert_eq!(
            eval_err(&undeclared, &[]),
            "kernel k0: accumulator a2 is not declared"
        );
        let mut missing = unbound.clone();
        missing.kernels[0].body = vec![store(4, ix(0, &[]), k(1.0))];
        assert_eq!(
            eval_err(&missing, &[]),
            "kernel k0: buffer %4 does not exist"
        );
        let mut to_input = row_sum(1, 1);
        to_input.kernels[0].body = vec![store(0, ix(0, &[]), k(1.0))];
        assert_eq!(
            eval_err(&to_input, &[f32s(&[0.0])]),
            "kernel k0: store to %0 (input 0)"
        );
        let mut i32_load = csr_spmv(3, 4, 5);
        i32_load.kernels[0].body = vec![store(4, ix(0, &[]), ld(0, ix(0, &[])))];
        assert_eq!(
            eval_err(&i32_load, &csr_example()),
            "kernel spmv: %0 holds i32 indices, not values"
        );
    }

    // Random elementwise and reduction kernels, checked against a direct computation.

    /// A generated expression over `x[r, c]` (read through one of two layouts), `b[c]`
    /// (broadcast over rows) and constants.
    #[derive(Debug, Clone)]
    enum Gen {
        /// `x[r, c]`; `true` reads a column-major copy.
        X(bool),
        B,
        K(f64),
        Un(UnOp, Box<Gen>),
        Bin(BinOp, Box<Gen>, Box<Gen>),
        Cast(ElemType, Box<Gen>),
    }

    fn gen_expr(casts: bool) -> impl Strategy<Value = Gen> {
        let leaf = prop_oneof![
            any::<bool>().prop_map(Gen::X),
            Just(Gen::B),
            prop::sample::select(vec![0.0, 1.0, -1.0, 0.5, 0.1, 3.0]).prop_map(Gen::K),
        ];
        let unops = prop::sample::select(UnOp::ALL.to_vec());
        let binops = prop::sample::select(vec![
            BinOp::Add,
            BinOp::Sub,
            BinOp::Mul,
            BinOp::Div,
            BinOp::Max,
            BinOp::Min,
            BinOp::Pow,
            BinOp::Lt,
            BinOp::Le,
            BinOp::Gt,
            BinOp::Ge,
            BinOp::Eq,
            BinOp::Ne,
        ]);
        let cast_tys = prop::sample::select(if casts {
            vec![F16, BF16, F32]
        } else {
            vec![F64]
        });
        leaf.prop_recursive(3, 12, 2, move |inner| {
            prop_oneof![
                (unops.clone(), inner.clone()).prop_map(|(op, e)| Gen::Un(op, Box::new(e))),
                (binops.clone(), inner.clone(), inner.clone()).prop_map(|(op, a, b)| Gen::Bin(
                    op,
                    Box::new(a),
                    Box::new(b)
                )),
                (cast_tys.clone(), inner).prop_map(|(t, e)| Gen::Cast(t, Box::new(e))),
            ]
        })
    }

    /// The loop IR for `g` at row variable v0, column variable v1: `x` is buffer 0 (row-major)
    /// and 1 (column-major), `b` is buffer 2.
    fn to_expr(g: &Gen, rows: i64, cols: i64) -> Expr {
        match g {
            Gen::X(false) => ld(0, ix(0, &[(0, cols), (1, 1)])),
            Gen::X(true) => ld(1, ix(0, &[(0, 1), (1, rows)])),
            Gen::B => ld(2, ix(0, &[(0, 0), (1, 1)])),
            Gen::K(x) => k(*x),
            Gen::Un(op, e) => un(*op, to_expr(e, rows, cols)),
            Gen::Bin(op, a, b) => bin(*op, to_expr(a, rows, cols), to_expr(b, rows, cols)),
            Gen::Cast(t, e) => cast(*t, to_expr(e, rows, cols)),
        }
    }

    fn typed(g: &Gen) -> bool {
        match g {
            Gen::X(_) | Gen::B | Gen::Cast(..) => true,
            Gen::K(_) => false,
            Gen::Un(_, e) => typed(e),
            Gen::Bin(_, a, b) => typed(a) || typed(b),
        }
    }

    fn nan_max(a: f64, b: f64) -> f64 {
        if a.is_nan() || b.is_nan() {
            f64::NAN
        } else if a >= b {
            if a == b && a.is_sign_negative() {
                b
            } else {
                a
            }
        } else {
            b
        }
    }

    fn nan_min(a: f64, b: f64) -> f64 {
        if a.is_nan() || b.is_nan() {
            f64::NAN
        } else if a <= b {
            if a == b && b.is_sign_negative() {
                b
            } else {
                a
            }
        } else {
            b
        }
    }

    fn f64_unary(op: UnOp, x: f64) -> f64 {
        let c = (2.0 / std::f64::consts::PI).sqrt();
        match op {
            UnOp::Neg => -x,
            UnOp::Exp => x.exp(),
            UnOp::Log => x.ln(),
            UnOp::Sqrt => x.sqrt(),
            UnOp::Rsqrt => x.sqrt().recip(),
            UnOp::Abs => x.abs(),
            UnOp::Tanh => x.tanh(),
            UnOp::Sigmoid => (1.0 + (-x).exp()).recip(),
            UnOp::Relu => nan_max(x, 0.0),
            UnOp::Gelu => x / (1.0 + (-2.0 * (c * (x + 0.044715 * x * x * x))).exp()),
            UnOp::Sin => x.sin(),
            UnOp::Cos => x.cos(),
            UnOp::Square => x * x,
            UnOp::Erf => libm::erf(x),
            UnOp::GeluErf => 0.5 * x * libm::erfc(-x / std::f64::consts::SQRT_2),
            UnOp::Silu => x / (1.0 + (-x).exp()),
            UnOp::Softplus => {
                if x.is_nan() {
                    x
                } else {
                    x.max(0.0) + (-x.abs()).exp().ln_1p()
                }
            }
            UnOp::Log1p => x.ln_1p(),
            UnOp::Expm1 => x.exp_m1(),
            UnOp::Floor => x.floor(),
            UnOp::Ceil => x.ceil(),
            UnOp::Round => x.round_ties_even(),
            UnOp::Sign => {
                if x == 0.0 || x.is_nan() {
                    x
                } else {
                    x.signum()
                }
            }
        }
    }

    fn f64_binary(op: BinOp, a: f64, b: f64) -> f64 {
        match op {
            BinOp::Add => a + b,
            BinOp::Sub => a - b,
            BinOp::Mul => a * b,
            BinOp::Div => a / b,
            BinOp::Max => nan_max(a, b),
            BinOp::Min => nan_min(a, b),
            BinOp::Pow => a.powf(b),
            BinOp::Lt => f64::from(u8::from(a < b)),
            BinOp::Le => f64::from(u8::from(a <= b)),
            BinOp::Gt => f64::from(u8::from(a > b)),
            BinOp::Ge => f64::from(u8::from(a >= b)),
            BinOp::Eq => f64::from(u8::from(a == b)),
            BinOp::Ne => f64::from(u8::from(a != b)),
        }
    }

    /// `g` in native f32 arithmetic (f64 functions rounded once where f32 has none).
    fn ref_f32(g: &Gen, x: f64, b: f64) -> f32 {
        match g {
            Gen::X(_) => x as f32,
            Gen::B => b as f32,
            Gen::K(c) => *c as f32,
            Gen::Un(op, e) => {
                let v = ref_f32(e, x, b);
                match op {
                    UnOp::Neg => -v,
                    UnOp::Abs => v.abs(),
                    UnOp::Sqrt => v.sqrt(),
                    UnOp::Square => v * v,
                    _ => f64_unary(*op, v as f64) as f32,
                }
            }
            Gen::Bin(op, l, r) => {
                let (l, r) = (ref_f32(l, x, b), ref_f32(r, x, b));
                match op {
                    BinOp::Add => l + r,
                    BinOp::Sub => l - r,
                    BinOp::Mul => l * r,
                    BinOp::Div => l / r,
                    _ => f64_binary(*op, l as f64, r as f64) as f32,
                }
            }
            Gen::Cast(t, e) => {
                let v = ref_f32(e, x, b);
                match t {
                    F16 => f16::from_f32(v).to_f32(),
                    BF16 => bf16::from_f32(v).to_f32(),
                    _ => v,
                }
            }
        }
    }

    /// `g` in f64 arithmetic (generated only without narrowing casts).
    fn ref_f64(g: &Gen, x: f64, b: f64) -> f64 {
        match g {
            Gen::X(_) => x,
            Gen::B => b,
            Gen::K(c) => *c,
            Gen::Un(op, e) => f64_unary(*op, ref_f64(e, x, b)),
            Gen::Bin(op, l, r) => f64_binary(*op, ref_f64(l, x, b), ref_f64(r, x, b)),
            Gen::Cast(_, e) => ref_f64(e, x, b),
        }
    }

    /// `g` at one element, in the compute type the IR's rules give it (`ctx` when it is made
    /// only of constants).
    fn reference(g: &Gen, data: ElemType, ctx: ElemType, x: f64, b: f64) -> f64 {
        let ty = if typed(g) { data.compute() } else { ctx };
        match ty {
            F64 => ref_f64(g, x, b),
            _ => ref_f32(g, x, b) as f64,
        }
    }

    #[derive(Debug, Clone)]
    struct Case {
        rows: u64,
        cols: u64,
        data: ElemType,
        out: ElemType,
        /// `None`: elementwise; `Some`: a reduction over columns.
        reduce: Option<(AccOp, ElemType)>,
        lanes: u32,
        g: Gen,
        xs: Vec<f64>,
        bs: Vec<f64>,
    }

    fn gen_case() -> impl Strategy<Value = Case> {
        let types = prop::sample::select(vec![F32, F16, BF16, F64]);
        let reduce = prop::option::of((
            prop::sample::select(vec![
                AccOp::Add,
                AccOp::Mul,
                AccOp::Max,
                AccOp::Min,
                AccOp::Set,
            ]),
            prop::sample::select(vec![F32, F64]),
        ));
        (
            1u64..=5,
            1u64..=5,
            types.clone(),
            types,
            reduce,
            prop::sample::select(vec![1u32, 4]),
        )
            .prop_flat_map(|(rows, cols, data, out, reduce, lanes)| {
                let n = (rows * cols) as usize;
                let value = prop_oneof![
                    8 => -3.0f64..3.0,
                    1 => Just(0.0),
                    1 => Just(-0.0),
                    1 => Just(f64::NAN),
                ];
                (
                    gen_expr(data != F64),
                    prop::collection::vec(value.clone(), n),
                    prop::collection::vec(value, cols as usize),
                )
                    .prop_map(move |(g, xs, bs)| Case {
                        rows,
                        cols,
                        data,
                        out,
                        reduce,
                        lanes,
                        g,
                        xs,
                        bs,
                    })
            })
    }

    fn case_program(c: &Case) -> LoopProgram {
        let (r, n) = (c.rows as i64, c.cols as i64);
        let e = to_expr(&c.g, r, n);
        let buffers = vec![
            buffer("x", c.data, c.rows * c.cols, Role::Input(0)),
            buffer("xt", c.data, c.rows * c.cols, Role::Input(1)),
            buffer("b", c.data, c.cols, Role::Input(2)),
        ];
        match c.reduce {
            None => {
                let mut buffers = buffers;
                buffers.push(buffer("y", c.out, c.rows * c.cols, Role::Output(0)));
                let inner = vector(
                    range(1, c.cols, vec![store(3, ix(0, &[(0, n), (1, 1)]), e)]),
                    c.lanes,
                );
                program(
                    buffers,
                    "k0",
                    "generated",
                    vec![par(range(0, c.rows, vec![inner]))],
                )
            }
            Some((op, ty)) => {
                let mut buffers = buffers;
                buffers.push(buffer("y", c.out, c.rows, Role::Output(0)));
                let body = vec![
                    let_(0, ty, k(init(op))),
                    vector(range(1, c.cols, vec![update(0, op, e)]), c.lanes),
                    store(3, ix(0, &[(0, 1)]), acc(0)),
                ];
                program(
                    buffers,
                    "k0",
                    "generated",
                    vec![par(range(0, c.rows, body))],
                )
            }
        }
    }

    fn init(op: AccOp) -> f64 {
        match op {
            AccOp::Add | AccOp::Set => 0.0,
            AccOp::Mul => 1.0,
            AccOp::Max => f64::NEG_INFINITY,
            AccOp::Min => f64::INFINITY,
        }
    }

    fn round_to(ty: ElemType, v: f64) -> f64 {
        let mut d = Data::zeros(ty, 1);
        d.set(0, v);
        d.get(0)
    }

    /// The expected output, computed directly.
    fn case_expected(c: &Case, x: &[f64], b: &[f64]) -> Vec<f64> {
        let (rows, cols) = (c.rows as usize, c.cols as usize);
        let at = |i: usize, j: usize| (x[i * cols + j], b[j]);
        match c.reduce {
            None => (0..rows * cols)
                .map(|e| {
                    let (xv, bv) = at(e / cols, e % cols);
                    round_to(c.out, reference(&c.g, c.data, c.out.compute(), xv, bv))
                })
                .collect(),
            Some((op, ty)) => (0..rows)
                .map(|i| {
                    let mut a = round_to(ty, init(op));
                    for j in 0..cols {
                        let (xv, bv) = at(i, j);
                        let v = reference(&c.g, c.data, ty, xv, bv);
                        let combined = match op {
                            AccOp::Add => a + v,
                            AccOp::Mul => a * v,
                            AccOp::Max => nan_max(a, v),
                            AccOp::Min => nan_min(a, v),
                            AccOp::Set => v,
                        };
                        a = round_to(ty, combined);
                    }
                    round_to(c.out, a)
                })
                .collect(),
        }
    }

    fn data_of(ty: ElemType, v: &[f64]) -> Data {
        let mut d = Data::zeros(ty, v.len());
        for (i, x) in v.iter().enumerate() {
            d.set(i, *x);
        }
        d
    }

    proptest! {
        #[test]
        fn generated_kernels_verify_and_match_direct_computation(c in gen_case()) {
            let p = case_program(&c);
            prop_assert!(crate::verify::verify(&p).is_ok(), "{:?}", crate::verify::verify(&p));
            let (rows, cols) = (c.rows as usize, c.cols as usize);
            let x = data_of(c.data, &c.xs);
            let xt_vals: Vec<f64> = (0..rows * cols).map(|e| c.xs[(e % rows) * cols + e / rows]).collect();
            let xt = data_of(c.data, &xt_vals);
            let b = data_of(c.data, &c.bs);
            let want = case_expected(&c, &x.to_f64(), &b.to_f64());
            let mut bufs = buffers(&p, &[x, xt, b]);
            eval(&p, &mut bufs).unwrap();
            let got = bufs[3].to_f64();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                prop_assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "element {}: got {}, want {}\n{}", i, g, w, crate::print::print_program(&p)
                );
            }
        }

        /// For Range-only nests the verifier's bounds check is exact: it accepts a program
        /// exactly when the evaluator makes no out-of-bounds access.
        #[test]
        fn verifier_bounds_agree_with_evaluation(
            extents in prop::collection::vec(1u64..=4, 1..=3),
            load_strides in prop::collection::vec(-3i64..=3, 3),
            store_strides in prop::collection::vec(-3i64..=3, 3),
            load_offset in -6i64..=12,
            store_offset in -6i64..=12,
            x_elems in 1u64..=16,
            y_elems in 1u64..=16,
        ) {
            let n = extents.len();
            let terms = |s: &[i64]| (0..n).map(|v| (v as u32, s[v])).collect::<Vec<_>>();
            let mut body = vec![store(1, ix(store_offset, &terms(&store_strides)), ld(0, ix(load_offset, &terms(&load_strides))))];
            for v in (0..n).rev() {
                body = vec![range(v as u32, extents[v], body)];
            }
            let p = program(
                vec![buffer("x", F32, x_elems, Role::Input(0)), buffer("y", F32, y_elems, Role::Output(0))],
                "k0",
                "",
                body,
            );
            let mut bufs = buffers(&p, &[Data::zeros(F32, x_elems as usize)]);
            let evaluated = eval(&p, &mut bufs);
            let verified = crate::verify::verify(&p);
            prop_assert_eq!(verified.is_ok(), evaluated.is_ok(), "{:?} vs {:?}", verified, evaluated);
            if let Err(e) = evaluated {
                prop_assert!(matches!(e, EvalError::OutOfBounds { .. }), "{}", e);
            }
        }
    }
}
