//! f32 vector loops in chunks around the ahead-of-time vector math (`vmath.rs`).
//!
//! Cranelift's x86 vectors stop at 128 bits. A vector loop that holds work the wide code does
//! better runs [`CHUNK`] iterations at a time, that work done by calls to `tdsl_vmath_f32`
//! (16 or 8 lanes wide on AVX-512 or AVX2) or to the extreme kernels of `dot.rs`:
//!
//! - calls of a [`VOp`] function (`exp`, `log`, `tanh`, `sigmoid`, `gelu`, `silu`, `erf`,
//!   `gelu_erf`, `sin`, `cos`), the rounding of a cast to f16 or bf16, the widening of a
//!   unit-stride f16 load, and a division by a value the loop does not change;
//! - stores into f16 or bf16 buffers at unit stride (narrowed after the loop's statements);
//! - a row's maximum or minimum of an expression (its values stored, then reduced by one call).
//!
//! For each distinct call, in the order its argument needs them, one f32x4 loop over the chunk
//! stores the argument into a stack buffer and the call replaces the buffer by the function's
//! values; then the loop's own statements run over the chunk with each call read back from
//! its buffer; then the narrowing and extreme calls read the buffers the statements stored.
//! The buffers are pseudo-buffers of the loop IR (ids from [`SCRATCH_BASE`] up, based so that
//! the loop variable indexes them directly), so every stage is an ordinary vector loop
//! ([`Lower::vector_loop`]), reductions and tails included. An argument that is a unit-stride
//! f32 (or, to widen, f16) load needs no stage: the call reads it where it lies. A loop that
//! only stores one call's value into a unit-stride f32 destination (`y = exp(x)`, softmax's
//! `y = y / sum`) needs no buffer: the call writes the destination (after a stage that stores
//! its argument there, when it is not a plain load). The calls run before the statements, so
//! a loop whose call would read what an earlier statement of it stores keeps the inline code.

use cranelift_codegen::ir::{StackSlotData, StackSlotKind};

use super::*;
use crate::vmath::VOp;

/// Iterations per chunk: 512 f32 (2 KiB) per buffer, so a chunk's buffers stay in L1.
const CHUNK: i64 = 512;

/// The first pseudo-buffer id of the chunk buffers (above any program's buffers).
pub(super) const SCRATCH_BASE: u32 = u32::MAX - 64;

/// At most this many distinct calls per loop are chunked (else the loop keeps the inline code).
const MAX_CALLS: usize = 16;

/// The shortest loop worth chunking.
const MIN_EXTENT: u64 = 64;

/// Where a call reads its argument in a chunk.
enum Arg {
    /// Where it lies: a unit-stride load of an f32 buffer (`sigmoid(x)`).
    Source(BufId, Index),
    /// From its destination, after a stage loop (and its vector plan) stored it there.
    Staged(Loop, VecPlan),
}

/// A loop's chunked form.
pub(super) struct ChunkPlan {
    /// The distinct calls in evaluation order: the function, where its argument comes from,
    /// and its scalar argument (the divisor of [`VOp::DivBy`]). Call `i` writes buffer
    /// `SCRATCH_BASE + i`, or the destination of `direct`.
    calls: Vec<(VOp, (Arg, Option<Expr>))>,
    /// The loop with every call read from its buffer, and its vector plan; `None` when the
    /// one call runs in place in the destination.
    rest: Option<(Loop, VecPlan)>,
    /// The destination the one call runs in place in (a unit-stride f32 store of its value).
    direct: Option<(BufId, Index)>,
    /// After the statements, per narrowed store: the conversion, the chunk buffer it reads
    /// and the f16 or bf16 destination it writes.
    narrows: Vec<(VOp, usize, BufId, Index)>,
    /// After the statements, per maximum or minimum: the accumulator, the operation and the
    /// chunk buffer the statements stored its values into.
    extremes: Vec<(AccId, AccOp, usize)>,
    /// How many chunk buffers the loop uses (the calls' and the narrowed stores').
    scratch: usize,
}

impl<M: Module> Lower<'_, '_, M> {
    /// The chunked form of vector loop `l`, when it calls a [`VOp`] in f32 and the CPU runs the
    /// chunked math (`LowerOptions::vmath`).
    pub(super) fn chunk_plan(&self, l: &Loop, plan: &VecPlan) -> Option<ChunkPlan> {
        let Iter::Range { extent } = l.iter else {
            return None;
        };
        if !self.opts.vmath || plan.ct != Ct::F32 || extent < MIN_EXTENT {
            return None;
        }
        let ty = |b: BufId| self.buf_ty(b);
        let mut h = Hoist {
            var: l.var,
            ty: &ty,
            updated: l
                .body
                .iter()
                .filter_map(|s| match s {
                    Stmt::Update { acc, .. } => Some(*acc),
                    _ => None,
                })
                .collect(),
            calls: Vec::new(),
        };
        let mut body: Vec<Stmt> = l
            .body
            .iter()
            .map(|s| match s {
                Stmt::Store { buf, index, value } => Stmt::Store {
                    buf: *buf,
                    index: index.clone(),
                    value: h.expr(value),
                },
                Stmt::Update { acc, op, value } => Stmt::Update {
                    acc: *acc,
                    op: *op,
                    value: h.expr(value),
                },
                other => other.clone(),
            })
            .collect();
        let calls = h.calls;
        // Stores into f16 and bf16 buffers at unit stride that nothing else in the loop reads
        // are narrowed by a call after the loop's statements: from the buffer of the call
        // whose value they store, or from a buffer of their own.
        let mut narrows = Vec::new();
        let mut scratch_n = calls.len();
        let read: Vec<BufId> = l
            .body
            .iter()
            .flat_map(|s| match s {
                Stmt::Store { value, .. } | Stmt::Update { value, .. } => loads(value),
                _ => Vec::new(),
            })
            .collect();
        // The calls run before the loop's statements: none may read what an earlier statement
        // stores (reading what its own statement stores is reading it before the store).
        for (k, s) in body.iter().enumerate() {
            let (Stmt::Store { value, .. } | Stmt::Update { value, .. }) = s else {
                continue;
            };
            // The calls statement `k` reads, directly or through another call's argument, and
            // the buffers their arguments read.
            let mut pending: Vec<usize> = loads(value).iter().filter_map(scratch_no).collect();
            let mut seen = Vec::new();
            let mut bufs = Vec::new();
            while let Some(i) = pending.pop() {
                if seen.contains(&i) {
                    continue;
                }
                seen.push(i);
                for b in loads(&calls[i].1) {
                    match scratch_no(&b) {
                        Some(j) => pending.push(j),
                        None => bufs.push(b),
                    }
                }
            }
            let stored_before = |b: &BufId| {
                l.body[..k]
                    .iter()
                    .any(|s| matches!(s, Stmt::Store { buf, .. } if buf == b))
            };
            if bufs.iter().any(stored_before) {
                return None;
            }
        }
        body.retain_mut(|s| {
            let Stmt::Store { buf, index, value } = s else {
                return true;
            };
            let Some(op) = VOp::narrow(ty(*buf)) else {
                return true;
            };
            if index.stride_of(l.var) != 1 || read.contains(buf) {
                return true;
            }
            // A call's value is narrowed from the call's own buffer.
            if let Expr::Load { buf: b, index: ix } = value {
                if let (Some(i), true) = (scratch_no(b), *ix == unit(l.var)) {
                    narrows.push((op, i, *buf, index.clone()));
                    return false;
                }
            }
            narrows.push((op, scratch_n, *buf, index.clone()));
            *buf = scratch(scratch_n);
            *index = unit(l.var);
            scratch_n += 1;
            true
        });
        // A row's maximum or minimum of anything but a plain load (softmax's first loop, of
        // `x / 8 + mask`) stores the values into a buffer of their own, and one call to the
        // wide extreme kernel (`lower/dot.rs`) reduces it after the loop's statements: the
        // JIT's 128-bit NaN- and zero-exact `fmax` takes eight instructions a vector.
        let mut extremes = Vec::new();
        for s in body.iter_mut() {
            let Stmt::Update { acc, op, value } = s else {
                continue;
            };
            if !matches!(op, AccOp::Max | AccOp::Min) || !self.opts.dot {
                continue;
            }
            let (acc, op) = (*acc, *op);
            let staged = Stmt::Store {
                buf: scratch(scratch_n),
                index: unit(l.var),
                value: value.clone(),
            };
            extremes.push((acc, op, scratch_n));
            *s = staged;
            scratch_n += 1;
        }
        if calls.is_empty() && narrows.is_empty() && extremes.is_empty() || scratch_n > MAX_CALLS {
            return None;
        }
        let with_body = |body: Vec<Stmt>| Loop {
            body,
            parallel: false,
            gpu: None,
            ..l.clone()
        };
        // `dst[i] = f(arg)` alone, dst f32 and unit-stride, arg not reading dst: the argument
        // goes straight into dst and the call runs there.
        let direct = match (body.as_slice(), calls.as_slice()) {
            (
                [Stmt::Store {
                    buf,
                    index,
                    value: Expr::Load { buf: s, index: si },
                }],
                [(op, arg)],
            ) if *s == scratch(0)
                && *si == unit(l.var)
                && narrows.is_empty()
                && extremes.is_empty()
                && self.buf_ty(*buf) == ElemType::F32
                && index.stride_of(l.var) == 1
                && (!reads(arg, *buf) || split(arg).0 == load_of(*buf, index)) =>
            {
                Some((*op, *buf, index.clone(), arg.clone()))
            }
            _ => None,
        };
        // A division alone pays for its chunk only where it runs in place of the loop (in the
        // destination): staging its dividend and reading its quotient back cost a layer norm's
        // last loop more than the wider division saves.
        if direct.is_none()
            && narrows.is_empty()
            && extremes.is_empty()
            && calls.iter().all(|(op, _)| *op == VOp::DivBy)
        {
            return None;
        }
        // A plain load is read where it lies (f32, or f16 for the widening); anything else is
        // stored first, into the call's destination.
        let arg_of =
            |op: VOp, arg: Expr, buf: BufId, index: Index| -> Option<(Arg, Option<Expr>)> {
                let wants = if op == VOp::WidenF16 {
                    ElemType::F16
                } else {
                    ElemType::F32
                };
                let (arg, k) = split(&arg);
                let arg = match arg {
                    Expr::Load { buf: b, index: ix }
                        if self.buf_ty(b) == wants && ix.stride_of(l.var) == 1 =>
                    {
                        Some(Arg::Source(b, ix))
                    }
                    _ if op == VOp::WidenF16 => None,
                    arg => {
                        let stage = with_body(vec![Stmt::Store {
                            buf,
                            index,
                            value: arg,
                        }]);
                        let p = self.vec_plan(&stage)?;
                        Some(Arg::Staged(stage, p))
                    }
                }?;
                Some((arg, k))
            };
        if let Some((op, buf, index, arg)) = direct {
            return Some(ChunkPlan {
                calls: vec![(op, arg_of(op, arg, buf, index.clone())?)],
                rest: None,
                direct: Some((buf, index)),
                narrows,
                extremes,
                scratch: 0,
            });
        }
        let mut staged = Vec::new();
        for (i, (op, arg)) in calls.into_iter().enumerate() {
            staged.push((op, arg_of(op, arg, scratch(i), unit(l.var))?));
        }
        let rest = if body.is_empty() {
            None
        } else {
            let rest = with_body(body);
            let rest_plan = self.vec_plan(&rest)?;
            Some((rest, rest_plan))
        };
        Some(ChunkPlan {
            calls: staged,
            rest,
            direct: None,
            narrows,
            extremes,
            scratch: scratch_n,
        })
    }

    /// Runs `l` over `start..end` as `cp` says: chunk by chunk, each call's argument into its
    /// buffer, the call over the buffer, then the loop's statements.
    pub(super) fn chunked_loop(
        &mut self,
        l: &Loop,
        cp: &ChunkPlan,
        start: Value,
        end: Value,
    ) -> Result<(), CodegenError> {
        let ptr = self.module.target_config().pointer_type();
        // (A call that runs in place in its destination needs no buffer.)
        let slots: Vec<_> = (0..cp.scratch)
            .map(|_| {
                let data = StackSlotData::new(StackSlotKind::ExplicitSlot, CHUNK as u32 * 4, 6);
                self.b.create_sized_stack_slot(data)
            })
            .collect();
        let vmath = self.vmath_fn()?;
        // The calls' scalars, once before the loop (invariant in it); 0 for calls without.
        // (Their addresses from scratch: the loop's precomputed ones need its variable.)
        let partials = self.partials.take();
        let mut scalars = Vec::new();
        for (_, (_, k)) in &cp.calls {
            scalars.push(match k {
                Some(k) => self.expr(k, Ct::F32),
                None => Ok(self.b.ins().f32const(0.0)),
            });
        }
        self.partials = partials;
        let scalars = scalars.into_iter().collect::<Result<Vec<_>, _>>()?;
        let zero = self.b.ins().f32const(0.0);
        // for (c = start; c < end; c = min(c + CHUNK, end)).
        let f = self.loop_begin(start, end, 1);
        let c = self.b.use_var(f.var);
        let next = self.b.ins().iadd_imm_s(c, CHUNK);
        let cend = self.b.ins().smin(next, end);
        let len = self.b.ins().isub(cend, c);
        // Buffer i's base sits c elements before its slot: the loop variable indexes it.
        let back = self.b.ins().imul_imm_s(c, 4);
        // Each call's destination: its stack buffer, or the map's destination.
        let mut dsts = Vec::new();
        if let Some((buf, index)) = &cp.direct {
            dsts.push(self.chunk_addr(l, f.var, *buf, index)?);
        } else {
            for (i, slot) in slots.iter().enumerate() {
                let a = self.b.ins().stack_addr(ptr, *slot, 0);
                let base = self.b.ins().isub(a, back);
                self.bases.insert(scratch(i), base);
                dsts.push(a);
            }
        }
        let mut r = Ok(());
        for (((op, (arg, _)), dst), k) in cp.calls.iter().zip(&dsts).zip(&scalars) {
            let src = match arg {
                Arg::Source(buf, index) => self.chunk_addr(l, f.var, *buf, index),
                Arg::Staged(stage, plan) => self.vector_loop(stage, plan, c, cend).map(|_| *dst),
            };
            let src = match src {
                Ok(s) => s,
                Err(e) => {
                    r = Err(e);
                    break;
                }
            };
            let opv = self.b.ins().iconst(types::I32, *op as i64);
            self.b.ins().call(vmath, &[opv, src, *dst, len, *k]);
        }
        if let (true, Some((rest, plan))) = (r.is_ok(), &cp.rest) {
            r = self.vector_loop(rest, plan, c, cend);
        }
        for &(acc, op, i) in &cp.extremes {
            if r.is_err() {
                break;
            }
            let reduce = Loop {
                body: vec![Stmt::Update {
                    acc,
                    op,
                    value: load_of(scratch(i), &unit(l.var)),
                }],
                parallel: false,
                gpu: None,
                ..l.clone()
            };
            r = match self.vec_plan(&reduce) {
                Some(plan) => match self.dot_loop(&reduce, &plan) {
                    Some(d) => self.dot_call(&reduce, &d, c, cend),
                    None => self.vector_loop(&reduce, &plan, c, cend),
                },
                None => Err(bad("a chunked extreme without a vector plan".into())),
            };
        }
        for (op, i, buf, index) in &cp.narrows {
            if r.is_err() {
                break;
            }
            match self.chunk_addr(l, f.var, *buf, index) {
                Ok(dst) => {
                    let src = self.b.ins().stack_addr(ptr, slots[*i], 0);
                    let opv = self.b.ins().iconst(types::I32, *op as i64);
                    self.b.ins().call(vmath, &[opv, src, dst, len, zero]);
                }
                Err(e) => r = Err(e),
            }
        }
        for i in 0..slots.len() {
            self.bases.remove(&scratch(i));
        }
        r?;
        self.loop_end_at(f, cend);
        Ok(())
    }

    /// `tdsl_vmath_f32(op: u32, src: *const f32, dst: *mut f32, n: u64, k: f32)`, declared
    /// once per function.
    fn vmath_fn(&mut self) -> Result<FuncRef, CodegenError> {
        self.import(
            crate::vmath::SYMBOL,
            &[types::I32, types::I64, types::I64, types::I64, types::F32],
            None,
        )
    }

    /// The address of `buf[index]` at the chunk's first iteration (`l`'s variable at the
    /// chunk loop's `var`).
    fn chunk_addr(
        &mut self,
        l: &Loop,
        var: Variable,
        buf: BufId,
        index: &Index,
    ) -> Result<Value, CodegenError> {
        self.bind(l.var, var)?;
        let (a, off) = self.addr(buf, index);
        self.vars.remove(&l.var);
        Ok(self.b.ins().iadd_imm_s(a, off as i64))
    }

    /// A buffer's element type, the chunk buffers (f32) included.
    pub(super) fn buf_ty(&self, b: BufId) -> ElemType {
        if b.0 >= SCRATCH_BASE {
            ElemType::F32
        } else {
            self.p.buffer(b).ty
        }
    }
}

/// A call's argument as the part computed per iteration and the scalar: a division's
/// dividend and divisor for [`VOp::DivBy`] (whose argument is the division), else the argument.
fn split(arg: &Expr) -> (Expr, Option<Expr>) {
    match arg {
        Expr::Binary(BinOp::Div, a, b) => ((**a).clone(), Some((**b).clone())),
        a => (a.clone(), None),
    }
}

/// `buf[index]`.
fn load_of(buf: BufId, index: &Index) -> Expr {
    Expr::Load {
        buf,
        index: index.clone(),
    }
}

/// Whether `e` loads from `buf`.
fn reads(e: &Expr, buf: BufId) -> bool {
    let mut found = false;
    e.visit(&mut |x| found |= matches!(x, Expr::Load { buf: b, .. } if *b == buf));
    found
}

/// Which chunk buffer `b` is, if it is one.
fn scratch_no(b: &BufId) -> Option<usize> {
    (b.0 >= SCRATCH_BASE).then(|| (b.0 - SCRATCH_BASE) as usize)
}

fn scratch(i: usize) -> BufId {
    BufId(SCRATCH_BASE + i as u32)
}

/// `var`, stride 1.
fn unit(var: VarId) -> Index {
    Index {
        offset: 0,
        terms: vec![(var, 1)],
    }
}

/// The buffers `e` loads from.
fn loads(e: &Expr) -> Vec<BufId> {
    let mut out = Vec::new();
    e.visit(&mut |x| {
        if let Expr::Load { buf, .. } = x {
            out.push(*buf);
        }
    });
    out
}

/// What [`Hoist::expr`] needs to know about the loop, and the calls it found.
struct Hoist<'a> {
    var: VarId,
    /// A buffer's element type.
    ty: &'a dyn Fn(BufId) -> ElemType,
    /// The accumulators the loop updates (not invariant in it).
    updated: Vec<AccId>,
    /// The calls in evaluation order, equal calls once: the function and its argument (for
    /// [`VOp::DivBy`], the whole division, whose divisor is invariant in the loop).
    calls: Vec<(VOp, Expr)>,
}

impl Hoist<'_> {
    /// `e` with every call replaced by a load of its chunk buffer, the calls (innermost first)
    /// appended to `calls`. Besides the functions of [`VOp::of`], the calls are the roundings
    /// of casts to f16 and bf16, the widening of unit-stride f16 loads, and divisions by a
    /// value invariant in the loop.
    fn expr(&mut self, e: &Expr) -> Expr {
        match e {
            Expr::Unary(op, x) => {
                let arg = self.expr(x);
                match VOp::of(*op) {
                    Some(v) => self.call(v, arg),
                    None => Expr::Unary(*op, Box::new(arg)),
                }
            }
            Expr::Cast(t, x) => {
                let arg = self.expr(x);
                match VOp::round(*t) {
                    Some(v) => self.call(v, arg),
                    None => Expr::Cast(*t, Box::new(arg)),
                }
            }
            Expr::Load { buf, index }
                if (self.ty)(*buf) == ElemType::F16 && index.stride_of(self.var) == 1 =>
            {
                self.call(VOp::WidenF16, e.clone())
            }
            Expr::Binary(BinOp::Div, a, b) if self.invariant(b) => {
                let a = self.expr(a);
                self.call(VOp::DivBy, Expr::Binary(BinOp::Div, Box::new(a), b.clone()))
            }
            Expr::Binary(op, a, b) => {
                let a = self.expr(a);
                Expr::Binary(*op, Box::new(a), Box::new(self.expr(b)))
            }
            Expr::Select(c, a, b) => {
                let c = self.expr(c);
                let a = self.expr(a);
                Expr::Select(Box::new(c), Box::new(a), Box::new(self.expr(b)))
            }
            Expr::Const(_) | Expr::Load { .. } | Expr::Acc(_) | Expr::Iota(_) => e.clone(),
        }
    }

    /// A load of call `(op, arg)`'s chunk buffer, the call added unless an equal one is there.
    fn call(&mut self, op: VOp, arg: Expr) -> Expr {
        let i = match self.calls.iter().position(|(o, a)| *o == op && *a == arg) {
            Some(i) => i,
            None => {
                self.calls.push((op, arg));
                self.calls.len() - 1
            }
        };
        Expr::Load {
            buf: scratch(i),
            index: unit(self.var),
        }
    }

    /// Whether `e` has one value for the whole loop: it loads nothing that moves with the
    /// loop's variable and reads no accumulator the loop updates.
    fn invariant(&self, e: &Expr) -> bool {
        let mut ok = true;
        e.visit(&mut |x| {
            ok &= match x {
                Expr::Load { index, .. } => index.terms.iter().all(|(v, _)| *v != self.var),
                Expr::Iota(_) => false,
                Expr::Acc(a) => !self.updated.contains(a),
                _ => true,
            }
        });
        ok
    }
}
