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
//! For each distinct call, in the order its argument needs them, the argument is stored into a
//! stack buffer and the call replaces the buffer by the function's values; then the loop's own
//! statements run over the chunk with each call read back from its buffer; then the narrowing
//! and extreme calls read the buffers the statements stored. An argument, and the statements,
//! run as wide passes of `varith.rs` where they are plain arithmetic (`wide.rs`: then a
//! rounding folds into the pass that stores its argument, a narrowing into the pass that
//! stores its value, and a widened f16 load is read where it lies); else as one f32x4 loop
//! over the chunk.
//! The buffers are pseudo-buffers of the loop IR (ids from [`SCRATCH_BASE`] up, based so that
//! the loop variable indexes them directly), so every stage is an ordinary vector loop
//! ([`Lower::vector_loop`]), reductions and tails included. An argument that is a unit-stride
//! f32 (or, to widen, f16) load needs no stage: the call reads it where it lies. A loop that
//! only stores one call's value into a unit-stride f32 destination (`y = exp(x)`, softmax's
//! `y = y / sum`) needs no buffer: the call writes the destination (after a stage that stores
//! its argument there, when it is not a plain load). The calls run before the statements, so
//! a loop whose call would read what an earlier statement of it stores keeps the inline code.

use cranelift_codegen::ir::{StackSlotData, StackSlotKind};

use super::wide::{Opnd, Pass, Passes};
use super::*;
use crate::vmath::VOp;

/// Iterations per chunk: 512 f32 (2 KiB) per buffer, so a chunk's buffers stay in L1.
const CHUNK: i64 = 512;

/// The first pseudo-buffer id of the chunk buffers (above any program's buffers).
pub(super) const SCRATCH_BASE: u32 = u32::MAX - 64;

/// At most this many distinct calls per loop are chunked (else the loop keeps the inline code).
const MAX_CALLS: usize = 16;

/// At most this many chunk buffers per loop (2 KiB of stack each), intermediate values of
/// the passes included.
const MAX_SCRATCH: usize = 24;

/// The shortest loop worth chunking.
const MIN_EXTENT: u64 = 64;

/// Where a call reads its argument in a chunk.
enum Arg {
    /// Where it lies: a unit-stride load of an f32 buffer (`sigmoid(x)`).
    Source(BufId, Index),
    /// From its destination, after a stage loop (and its vector plan) stored it there.
    Staged(Loop, VecPlan),
    /// From its destination, after wide passes (`wide.rs`) stored it there.
    Wide(Vec<Pass>),
}

/// How the loop's own statements run over a chunk.
enum Rest {
    /// As a 128-bit vector loop (with its vector plan).
    Inline(Loop, VecPlan),
    /// As wide passes (`wide.rs`).
    Wide(Vec<Pass>),
}

/// A loop's chunked form.
pub(super) struct ChunkPlan {
    /// The distinct calls in evaluation order: the function, where its argument comes from,
    /// and its scalar argument (the divisor of [`VOp::DivBy`]). Call `i` writes buffer
    /// `SCRATCH_BASE + i`, or the destination of `direct`.
    calls: Vec<(VOp, (Arg, Option<Expr>))>,
    /// Per call, whether it is left out: a rounding the passes of its argument do as they
    /// store, or a widening whose readers are all passes (which read the f16 load itself).
    skip: Vec<bool>,
    /// The loop with every call read from its buffer; `None` when the one call runs in place
    /// in the destination.
    rest: Option<Rest>,
    /// The destination the one call runs in place in (a unit-stride f32 store of its value).
    direct: Option<(BufId, Index)>,
    /// After the statements, per narrowed store: the conversion, the chunk buffer it reads
    /// and the f16 or bf16 destination it writes.
    narrows: Vec<(VOp, usize, BufId, Index)>,
    /// After the statements, per maximum or minimum: the accumulator, the operation and the
    /// chunk buffer the statements stored its values into.
    extremes: Vec<(AccId, AccOp, usize)>,
    /// How many chunk buffers the loop uses (the calls', the narrowed stores' and the passes'
    /// intermediate values).
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
        // Chunk buffers that hold a widened f16 load: passes read the load where it lies. (Not
        // for a call that runs in place in the destination: its value is the loop's result.)
        let widened: Vec<(BufId, BufId, Index)> = calls
            .iter()
            .enumerate()
            .filter(|_| direct.is_none())
            .filter_map(|(i, (op, arg))| match (op, arg) {
                (VOp::WidenF16, Expr::Load { buf, index }) => {
                    Some((scratch(i), *buf, index.clone()))
                }
                _ => None,
            })
            .collect();
        let updated: Vec<AccId> = h.updated.clone();
        // Statements as wide passes, their intermediate values in chunk buffers from `next` up.
        let mut next = scratch_n;
        let mut passes = |body: &[Stmt]| -> Option<Vec<Pass>> {
            let mut p = Passes {
                var: l.var,
                ty: &ty,
                updated: &updated,
                widened: &widened,
                next,
                scratch: &scratch,
                free: Vec::new(),
                temps: Vec::new(),
                out: Vec::new(),
            };
            p.stores(body)?;
            // (Past the limit, the statements keep the inline code.)
            if p.next > MAX_SCRATCH {
                return None;
            }
            next = p.next;
            Some(p.out)
        };
        // A plain load is read where it lies (f32, or f16 for the widening); anything else is
        // stored first, into the call's destination: by wide passes where it can be, else by
        // a stage loop.
        let mut arg_of =
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
                        let stage = vec![Stmt::Store {
                            buf,
                            index,
                            value: arg,
                        }];
                        match passes(&stage) {
                            Some(p) => Some(Arg::Wide(p)),
                            None => {
                                let stage = with_body(stage);
                                let p = self.vec_plan(&stage)?;
                                Some(Arg::Staged(stage, p))
                            }
                        }
                    }
                }?;
                Some((arg, k))
            };
        let (staged, direct) = match direct {
            Some((op, buf, index, arg)) => {
                let arg = arg_of(op, arg, buf, index.clone())?;
                (vec![(op, arg)], Some((buf, index)))
            }
            None => {
                let mut staged = Vec::new();
                for (i, (op, arg)) in calls.into_iter().enumerate() {
                    staged.push((op, arg_of(op, arg, scratch(i), unit(l.var))?));
                }
                (staged, None)
            }
        };
        let rest = if body.is_empty() || direct.is_some() {
            None
        } else {
            Some(match passes(&body) {
                Some(p) => Rest::Wide(p),
                None => {
                    let rest = with_body(body);
                    let rest_plan = self.vec_plan(&rest)?;
                    Rest::Inline(rest, rest_plan)
                }
            })
        };
        let mut cp = ChunkPlan {
            skip: vec![false; staged.len()],
            calls: staged,
            rest,
            direct,
            narrows,
            extremes,
            scratch: next,
        };
        cp.fuse(&widened);
        (cp.scratch <= MAX_SCRATCH).then_some(cp)
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
        // The calls' and the passes' scalars, once before the loop (invariant in it); 0 for
        // those without. (Their addresses from scratch: the loop's precomputed ones need its
        // variable.)
        let partials = self.partials.take();
        let mut scalars = Vec::new();
        for (_, (_, k)) in &cp.calls {
            scalars.push(match k {
                Some(k) => self.expr(k, Ct::F32),
                None => Ok(self.b.ins().f32const(0.0)),
            });
        }
        let mut pass_scalars = Vec::new();
        for p in cp.passes() {
            pass_scalars.push(match p.scalar() {
                Some(k) => self.expr(k, Ct::F32),
                None => Ok(self.b.ins().f32const(0.0)),
            });
        }
        self.partials = partials;
        let scalars = scalars.into_iter().collect::<Result<Vec<_>, _>>()?;
        let pass_scalars = pass_scalars.into_iter().collect::<Result<Vec<_>, _>>()?;
        let mut pass_scalars = pass_scalars.iter();
        let zero = self.b.ins().f32const(0.0);
        // for (c = start; c < end; c = min(c + CHUNK, end)).
        let f = self.loop_begin(start, end, 1);
        let c = self.b.use_var(f.var);
        let next = self.b.ins().iadd_imm_s(c, CHUNK);
        let cend = self.b.ins().smin(next, end);
        let len = self.b.ins().isub(cend, c);
        // Buffer i's base sits c elements before its slot: the loop variable indexes it.
        let back = self.b.ins().imul_imm_s(c, 4);
        let mut at = Vec::new();
        for (i, slot) in slots.iter().enumerate() {
            let a = self.b.ins().stack_addr(ptr, *slot, 0);
            let base = self.b.ins().isub(a, back);
            self.bases.insert(scratch(i), base);
            at.push(a);
        }
        // Each call's destination: its stack buffer, or the map's destination.
        let dsts = match &cp.direct {
            Some((buf, index)) => vec![self.chunk_addr(l, f.var, *buf, index)?],
            None => at[..cp.calls.len()].to_vec(),
        };
        let mut r = Ok(());
        for (i, (((op, (arg, _)), dst), k)) in cp.calls.iter().zip(&dsts).zip(&scalars).enumerate()
        {
            if cp.skip[i] && matches!(arg, Arg::Source(..)) {
                continue;
            }
            let src = match arg {
                Arg::Source(buf, index) => self.chunk_addr(l, f.var, *buf, index),
                Arg::Staged(stage, plan) => self.vector_loop(stage, plan, c, cend).map(|_| *dst),
                Arg::Wide(ps) => {
                    let ks: Vec<Value> = pass_scalars.by_ref().take(ps.len()).copied().collect();
                    self.passes(l, f.var, ps, &ks, &at, len).map(|_| *dst)
                }
            };
            let src = match src {
                Ok(s) => s,
                Err(e) => {
                    r = Err(e);
                    break;
                }
            };
            if cp.skip[i] {
                continue;
            }
            let opv = self.b.ins().iconst(types::I32, *op as i64);
            self.b.ins().call(vmath, &[opv, src, *dst, len, *k]);
        }
        r = r.and_then(|_| match &cp.rest {
            Some(Rest::Inline(rest, plan)) => self.vector_loop(rest, plan, c, cend),
            Some(Rest::Wide(ps)) => {
                let ks: Vec<Value> = pass_scalars.by_ref().take(ps.len()).copied().collect();
                self.passes(l, f.var, ps, &ks, &at, len)
            }
            None => Ok(()),
        });
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

    /// Calls `tdsl_varith_f32` for each pass over the chunk of `len` iterations starting at
    /// `l`'s variable = `var`: `ks` are the passes' scalars, `at` the chunk buffers' addresses.
    fn passes(
        &mut self,
        l: &Loop,
        var: Variable,
        ps: &[Pass],
        ks: &[Value],
        at: &[Value],
        len: Value,
    ) -> Result<(), CodegenError> {
        let f = self.import(
            crate::varith::SYMBOL,
            &[
                types::I32,
                types::I64,
                types::I64,
                types::I64,
                types::I64,
                types::F32,
            ],
            None,
        )?;
        for (p, k) in ps.iter().zip(ks) {
            let code = p.code(&|b| self.buf_ty(b));
            let mut addr = |o: Option<&Opnd>| -> Result<Option<Value>, CodegenError> {
                match o {
                    Some(Opnd::Mem(b, i)) => match scratch_no(b) {
                        Some(n) => Ok(Some(at[n])),
                        None => self.chunk_addr(l, var, *b, i).map(Some),
                    },
                    _ => Ok(None),
                }
            };
            let a = addr(Some(&p.a))?;
            let b = addr(p.b.as_ref())?;
            let y = match scratch_no(&p.dst) {
                Some(n) => at[n],
                None => self.chunk_addr(l, var, p.dst, &p.index)?,
            };
            // A scalar or absent operand gets a valid pointer it does not read.
            let any = a.or(b).unwrap_or(y);
            let code = self.b.ins().iconst(types::I32, code as i64);
            let args = [code, a.unwrap_or(any), b.unwrap_or(any), y, len, *k];
            self.b.ins().call(f, &args);
        }
        Ok(())
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

impl ChunkPlan {
    /// Every pass, in the order the chunk runs them: the calls' arguments', then the rest's.
    fn passes(&self) -> impl Iterator<Item = &Pass> {
        let args = self.calls.iter().flat_map(|(_, (arg, _))| match arg {
            Arg::Wide(ps) => ps.as_slice(),
            _ => &[],
        });
        let rest = match &self.rest {
            Some(Rest::Wide(ps)) => ps.as_slice(),
            _ => &[],
        };
        args.chain(rest)
    }

    /// Folds calls into the passes: a rounding into the pass that stores its argument; a
    /// narrowing into the pass that stores the value it narrows (into the f16 or bf16
    /// destination itself); and a widening whose buffer only passes read (they read the f16
    /// load, `widened`) is left out.
    fn fuse(&mut self, widened: &[(BufId, BufId, Index)]) {
        for (i, (op, (arg, _))) in self.calls.iter_mut().enumerate() {
            let t = match op {
                VOp::RoundF16 => ElemType::F16,
                VOp::RoundBf16 => ElemType::BF16,
                _ => continue,
            };
            if let Arg::Wide(ps) = arg {
                if let Some(last) = ps.last_mut().filter(|p| p.round.is_none()) {
                    last.round = Some(t);
                    self.skip[i] = true;
                }
            }
        }
        let n_calls = self.calls.len();
        if let Some(Rest::Wide(ps)) = &mut self.rest {
            self.narrows.retain(|(_, i, buf, index)| {
                let s = scratch(*i);
                let writers: Vec<usize> = (0..ps.len()).filter(|&w| ps[w].dst == s).collect();
                let read = ps.iter().any(|p| p.reads().any(|(b, _)| *b == s));
                match writers.as_slice() {
                    [w] if !read && *i >= n_calls => {
                        ps[*w].dst = *buf;
                        ps[*w].index = index.clone();
                        false
                    }
                    _ => true,
                }
            });
        }
        for (s, ..) in widened {
            let Some(j) = scratch_no(s) else {
                continue;
            };
            let loop_reads = |l: &Loop| {
                l.body.iter().any(|st| match st {
                    Stmt::Store { value, .. } | Stmt::Update { value, .. } => reads(value, *s),
                    _ => false,
                })
            };
            let by_call = self.calls.iter().any(|(_, (arg, _))| match arg {
                Arg::Source(b, _) => b == s,
                Arg::Staged(stage, _) => loop_reads(stage),
                Arg::Wide(_) => false,
            });
            let by_rest = matches!(&self.rest, Some(Rest::Inline(rest, _)) if loop_reads(rest));
            // (Extremes read buffers of their own.)
            let by_narrow = self.narrows.iter().any(|n| n.1 == j);
            if !(by_call || by_rest || by_narrow) {
                self.skip[j] = true;
            }
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
        super::wide::invariant(e, self.var, &self.updated)
    }
}
