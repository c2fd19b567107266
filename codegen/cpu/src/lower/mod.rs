//! Loop IR → Cranelift IR. One *segment* (a run of top-level statements without library calls)
//! becomes one function `extern "C" fn(bufs: *const *mut u8, lo: u64, hi: u64)`: `bufs[i]` is
//! the base of buffer `i`, and when the segment is a single parallel `Range` loop that loop runs
//! only iterations `lo..min(hi, extent)` (the caller splits the range across threads).
//!
//! Values are computed in f32 (f32, f16, bf16 and i32 loads) or f64; f16 and bf16 are widened on
//! load and narrowed on store with round-to-nearest-even, by integer bit manipulation (the x64
//! backend has no `fpromote`/`fdemote` for F16). In vector loops the transcendentals are inline
//! vector code (`math.rs`), or, for f32 `exp`, `log`, `tanh`, `sigmoid`, `gelu`, `silu`, `erf`,
//! `gelu_erf`, `sin` and `cos` on a CPU with AVX-512 or AVX2 + FMA, the loop runs in chunks around the
//! ahead-of-time vector math (`chunked.rs`, `vmath.rs`: Cranelift's vectors are 128 bits wide);
//! elsewhere, and for the few without a vector form, they call scalar helpers (`helpers.rs`).
//! An innermost `Range` loop marked `vector >= 2` runs four f32 (two f64) lanes at a time:
//! unit-stride accesses are vector loads and stores, broadcasts are splats, other strides are
//! gathered and scattered lane by lane. Reductions get one vector accumulator per unrolled
//! step (a horizontal reduction follows), then a one-vector loop and a scalar tail finish.
//!
//! This module only builds IR: it assumes `check::validate_kernel` accepted the kernel, and it
//! emits no bounds checks (`check::check_bounds` runs before any generated code).

use std::collections::HashMap;

use cranelift_codegen::ir::{
    condcodes::{FloatCC, IntCC},
    types, AbiParam, Endianness, FuncRef, Function, InstBuilder, MemFlagsData, Type, Value,
};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_module::{Linkage, Module};
use tdsl_loop::{
    AccId, AccOp, BinOp, BufId, ElemType, Expr, Index, Iter, Loop, LoopProgram, Stmt, UnOp, VarId,
};

use crate::error::CodegenError;
use crate::helpers;

mod chunked;
mod dot;
mod expr;
mod math;
mod memory;
mod transpose;
mod vector;
mod wide;

/// Code generation choices (part of the kernel cache key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct LowerOptions {
    /// Unroll factor of vector loops, and the number of vector accumulators per reduction.
    pub n_acc: usize,
    /// Fuse `acc += a * b` into `fma` (only when the ISA has AVX and FMA: TOOLCHAIN.md §1e).
    pub use_fma: bool,
    pub vectorize: bool,
    /// Run f32 vector loops that call a function of `vmath::VOp` (`exp`, `log`, `tanh`, …) in
    /// chunks around the ahead-of-time vector math (`chunked.rs`, `vmath.rs`).
    pub vmath: bool,
    /// Run the two innermost loops of a transposing f32 copy as one call to the register
    /// transposes (`lower/transpose.rs`, `transpose.rs`).
    pub transpose: bool,
    /// Run an innermost f32 loop that only sums products of unit-stride loads (a
    /// matrix-vector row) as one call to the wide dot product (`lower/dot.rs`, `dot.rs`).
    pub dot: bool,
}

/// The compute type of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ct {
    F32,
    F64,
}

impl Ct {
    fn of(t: ElemType) -> Ct {
        match t {
            ElemType::F64 => Ct::F64,
            _ => Ct::F32,
        }
    }
    fn scalar(self) -> Type {
        match self {
            Ct::F32 => types::F32,
            Ct::F64 => types::F64,
        }
    }
    fn vector(self) -> Type {
        match self {
            Ct::F32 => types::F32X4,
            Ct::F64 => types::F64X2,
        }
    }
    fn lanes(self) -> i64 {
        match self {
            Ct::F32 => 4,
            Ct::F64 => 2,
        }
    }
}

fn join(a: Option<Ct>, b: Option<Ct>) -> Option<Ct> {
    match (a, b) {
        (Some(Ct::F64), _) | (_, Some(Ct::F64)) => Some(Ct::F64),
        (Some(Ct::F32), _) | (_, Some(Ct::F32)) => Some(Ct::F32),
        _ => None,
    }
}

/// The loop of a segment that runs only `lo..hi`: the segment's single statement, when it is a
/// parallel `Range` loop.
pub(crate) fn split_loop(stmts: &[Stmt]) -> Option<&Loop> {
    tdsl_loop::launch::split_loop(stmts)
}

fn is_innermost(l: &Loop) -> bool {
    !l.body.iter().any(|s| matches!(s, Stmt::Loop(_)))
}

/// Every (buffer, index) a loop body loads or stores.
fn accesses(stmts: &[Stmt], out: &mut Vec<(BufId, Index)>) {
    fn expr(e: &Expr, out: &mut Vec<(BufId, Index)>) {
        e.visit(&mut |x| {
            if let Expr::Load { buf, index } = x {
                out.push((*buf, index.clone()));
            }
        });
    }
    for s in stmts {
        match s {
            Stmt::Loop(_) | Stmt::Call(_) => {}
            Stmt::Let { init, .. } => expr(init, out),
            Stmt::Update { value, .. } => expr(value, out),
            Stmt::Store { buf, index, value } => {
                out.push((*buf, index.clone()));
                expr(value, out);
            }
        }
    }
}

/// Builds the function for one segment into `func` (whose signature the caller has set).
pub(crate) fn lower_segment<M: Module>(
    module: &mut M,
    func: &mut Function,
    fctx: &mut FunctionBuilderContext,
    p: &LoopProgram,
    stmts: &[Stmt],
    opts: &LowerOptions,
) -> Result<(), CodegenError> {
    let mut b = FunctionBuilder::new(func, fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let params = b.block_params(entry).to_vec();
    let (bufs, lo, hi) = (params[0], params[1], params[2]);
    let used = tdsl_loop::walk::stmt_buffers(stmts);
    let mut bases = HashMap::new();
    for id in used {
        let flags = MemFlagsData::trusted().with_readonly();
        let base = b.ins().load(types::I64, flags, bufs, (id.0 as i32) * 8);
        bases.insert(id, base);
    }
    let mut l = Lower {
        b,
        module,
        p,
        opts,
        bases,
        vars: HashMap::new(),
        accs: HashMap::new(),
        helpers: HashMap::new(),
        partials: None,
        vec: None,
        vaccs: HashMap::new(),
    };
    match split_loop(stmts) {
        Some(lp) => l.loop_(lp, Some((lo, hi)))?,
        None => l.block(stmts)?,
    }
    l.b.ins().return_(&[]);
    l.b.seal_all_blocks();
    let config = l.module.target_config();
    l.b.finalize(config);
    Ok(())
}

/// Vector mode: the loop variable and which unrolled step is being emitted.
#[derive(Clone, Copy)]
struct VecMode {
    var: VarId,
    ct: Ct,
    /// Index of the unrolled step; its lanes start `step · lanes` after the loop variable.
    step: i64,
}

struct VecPlan {
    ct: Ct,
    reductions: Vec<(AccId, AccOp)>,
}

/// Addresses of the accesses of an innermost loop, less the loop variable's term: computed once
/// before the loop.
struct Partials {
    var: VarId,
    pre: HashMap<(BufId, Index), Value>,
}

struct Lower<'a, 'f, M: Module> {
    b: FunctionBuilder<'f>,
    module: &'a mut M,
    p: &'a LoopProgram,
    opts: &'a LowerOptions,
    bases: HashMap<BufId, Value>,
    vars: HashMap<VarId, Variable>,
    accs: HashMap<AccId, (Variable, Ct)>,
    helpers: HashMap<&'static str, FuncRef>,
    partials: Option<Partials>,
    vec: Option<VecMode>,
    vaccs: HashMap<AccId, Vec<Variable>>,
}

/// An open loop: the variable, the header to branch back to and the exit block.
struct Frame {
    var: Variable,
    header: cranelift_codegen::ir::Block,
    exit: cranelift_codegen::ir::Block,
    step: i64,
}

fn bad(msg: String) -> CodegenError {
    CodegenError::Invalid(msg)
}

impl<M: Module> Lower<'_, '_, M> {
    // ---- Statements -------------------------------------------------------------------------

    fn block(&mut self, stmts: &[Stmt]) -> Result<(), CodegenError> {
        let mut declared = Vec::new();
        for s in stmts {
            if let Stmt::Let { acc, .. } = s {
                declared.push(*acc);
            }
            self.stmt(s)?;
        }
        for a in declared {
            self.accs.remove(&a);
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), CodegenError> {
        match s {
            Stmt::Loop(l) => self.loop_(l, None),
            Stmt::Let { acc, ty, init } => {
                let ct = Ct::of(*ty);
                let v = self.expr(init, ct)?;
                let var = self.b.declare_var(ct.scalar());
                self.b.def_var(var, v);
                self.accs.insert(*acc, (var, ct));
                Ok(())
            }
            Stmt::Update { acc, op, value } => self.update(*acc, *op, value),
            Stmt::Store { buf, index, value } => self.store(*buf, index, value),
            Stmt::Call(_) => Err(CodegenError::Unsupported(
                "a library call inside generated code".into(),
            )),
        }
    }

    fn acc(&self, a: AccId) -> Result<(Variable, Ct), CodegenError> {
        self.accs
            .get(&a)
            .copied()
            .ok_or_else(|| bad(format!("accumulator a{} used outside its block", a.0)))
    }

    fn update(&mut self, acc: AccId, op: AccOp, value: &Expr) -> Result<(), CodegenError> {
        let (var, ct) = self.acc(acc)?;
        if let Some(mode) = self.vec {
            let vvar = self.vaccs[&acc][mode.step as usize];
            let cur = self.b.use_var(vvar);
            let new = self.combine_value(op, cur, value, ct)?;
            self.b.def_var(vvar, new);
        } else {
            let cur = self.b.use_var(var);
            let new = self.combine_value(op, cur, value, ct)?;
            self.b.def_var(var, new);
        }
        Ok(())
    }

    /// `op(cur, value)`, with `acc += a * b` fused when FMA is on and `a * b` computes in the
    /// accumulator's type.
    fn combine_value(
        &mut self,
        op: AccOp,
        cur: Value,
        value: &Expr,
        ct: Ct,
    ) -> Result<Value, CodegenError> {
        if let (AccOp::Add, Expr::Binary(BinOp::Mul, x, y), true) = (op, value, self.opts.use_fma) {
            if self.infer(value).is_none_or(|c| c == ct) {
                let xv = self.expr(x, ct)?;
                let yv = self.expr(y, ct)?;
                return Ok(self.b.ins().fma(xv, yv, cur));
            }
        }
        let v = self.expr(value, ct)?;
        Ok(self.combine(op, cur, v))
    }

    fn combine(&mut self, op: AccOp, cur: Value, v: Value) -> Value {
        match op {
            AccOp::Set => v,
            AccOp::Add => self.b.ins().fadd(cur, v),
            AccOp::Mul => self.b.ins().fmul(cur, v),
            AccOp::Max => self.b.ins().fmax(cur, v),
            AccOp::Min => self.b.ins().fmin(cur, v),
        }
    }

    fn store(&mut self, buf: BufId, index: &Index, value: &Expr) -> Result<(), CodegenError> {
        let ty = self.buf_ty(buf);
        let nat = self.infer(value).unwrap_or(Ct::of(ty));
        let v = self.expr(value, nat)?;
        let (addr, off) = self.addr(buf, index);
        match self.vec.map(|m| index.stride_of(m.var)) {
            None => self.store_scalar(ty, nat, v, addr, off),
            Some(1) => {
                self.store_vector(ty, v, addr, off);
                Ok(())
            }
            Some(stride) => {
                // Scatter, lane by lane in iteration order.
                let size = ty.size_bytes() as i64;
                for lane in 0..nat.lanes() {
                    let x = self.b.ins().extractlane(v, lane as u8);
                    let o = off as i64 + lane * stride.wrapping_mul(size);
                    let (a, o) = self.with_offset(addr, o);
                    self.store_scalar(ty, nat, x, a, o)?;
                }
                Ok(())
            }
        }
    }

    // ---- Loops ------------------------------------------------------------------------------

    /// Opens a loop running a fresh variable from `start` while `var + step <= end` (`var < end`
    /// for step 1), compared signed (values stay below 2^63). Leaves the builder in the loop body.
    fn loop_begin(&mut self, start: Value, end: Value, step: i64) -> Frame {
        let var = self.b.declare_var(types::I64);
        self.b.def_var(var, start);
        let header = self.b.create_block();
        let body = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(header);
        let i = self.b.use_var(var);
        // The branch names the exit first: Cranelift's elaborator walks the dominator tree and
        // forgets a loop it left for a sibling subtree, so when the exit (and everything after
        // the loop, which it dominates) was visited before the body, nothing in the body of an
        // *enclosing* loop was hoisted out of an inner loop any more: a layer norm recomputed
        // its `1/sqrt(var + eps)` and row address in every iteration (0.9 of its 1.2 ms).
        let done = if step == 1 {
            self.b.ins().icmp(IntCC::SignedGreaterThanOrEqual, i, end)
        } else {
            let last = self.b.ins().iadd_imm_s(i, step);
            self.b.ins().icmp(IntCC::SignedGreaterThan, last, end)
        };
        self.b.ins().brif(done, exit, &[], body, &[]);
        self.b.switch_to_block(body);
        Frame {
            var,
            header,
            exit,
            step,
        }
    }

    /// Closes a loop and leaves the builder after it; returns the variable's final value.
    fn loop_end(&mut self, f: Frame) -> Value {
        let i = self.b.use_var(f.var);
        let next = self.b.ins().iadd_imm_s(i, f.step);
        self.loop_end_at(f, next)
    }

    /// [`Lower::loop_end`] with the variable's next value given (a chunk's end).
    fn loop_end_at(&mut self, f: Frame, next: Value) -> Value {
        self.b.def_var(f.var, next);
        self.b.ins().jump(f.header, &[]);
        self.b.switch_to_block(f.exit);
        self.b.use_var(f.var)
    }

    fn loop_(&mut self, l: &Loop, split: Option<(Value, Value)>) -> Result<(), CodegenError> {
        match &l.iter {
            Iter::Range { extent } => {
                if *extent == 0 {
                    return Ok(());
                }
                let ext = self.b.ins().iconst(types::I64, *extent as i64);
                let (start, end) = match split {
                    // Clamp so that any (lo, hi) stays inside 0..extent.
                    Some((lo, hi)) => {
                        let end = self.b.ins().umin(hi, ext);
                        let start = self.b.ins().umin(lo, end);
                        (start, end)
                    }
                    None => (self.b.ins().iconst(types::I64, 0), ext),
                };
                if is_innermost(l) {
                    self.precompute_partials(l);
                    let r = match self.vec_plan(l) {
                        Some(plan) => {
                            if let Some(d) = self.dot_loop(l, &plan) {
                                self.dot_call(l, &d, start, end)
                            } else if let Some(x) = self.axpy_loop(l, &plan) {
                                self.axpy_call(l, &x, start, end)
                            } else if let Some(cp) = self.chunk_plan(l, &plan) {
                                self.chunked_loop(l, &cp, start, end)
                            } else {
                                self.vector_loop(l, &plan, start, end)
                            }
                        }
                        None => self.scalar_range(l, start, end),
                    };
                    self.partials = None;
                    r
                } else if let Some(block) = self.transpose_block(l).filter(|_| split.is_none()) {
                    self.transpose_call(&block)
                } else if let Some(rows) = self.axpy_rows(l) {
                    self.axpy_rows_call(l, rows, start, end)
                } else {
                    self.scalar_range(l, start, end)
                }
            }
            Iter::Compressed {
                ptr,
                ptr_index,
                crd,
                coord,
            } => {
                let (a, off) = self.addr(*ptr, ptr_index);
                let flags = MemFlagsData::trusted();
                let s = self.b.ins().sload32(flags, a, off);
                let e = self.b.ins().sload32(flags, a, off + 4);
                let f = self.loop_begin(s, e, 1);
                self.bind(l.var, f.var)?;
                let pos = self.b.use_var(f.var);
                let crd_base = self.bases[crd];
                let scaled = self.b.ins().ishl_imm_u(pos, 2);
                let ca = self.b.ins().iadd(crd_base, scaled);
                let c = self.b.ins().sload32(flags, ca, 0);
                let cvar = self.b.declare_var(types::I64);
                self.b.def_var(cvar, c);
                self.bind(*coord, cvar)?;
                let r = self.block(&l.body);
                self.vars.remove(coord);
                self.vars.remove(&l.var);
                r?;
                self.loop_end(f);
                Ok(())
            }
            Iter::Singleton { crd, pos_index } => {
                let (a, off) = self.addr(*crd, pos_index);
                let c = self.b.ins().sload32(MemFlagsData::trusted(), a, off);
                let var = self.b.declare_var(types::I64);
                self.b.def_var(var, c);
                self.bind(l.var, var)?;
                let r = self.block(&l.body);
                self.vars.remove(&l.var);
                r
            }
            Iter::TwoFour {
                groups,
                meta,
                meta_index,
                coord,
            } => {
                if *groups == 0 {
                    return Ok(());
                }
                // Kept value `v` sits in group v / 2 at the 2-bit position stored in bits
                // 2·(v % 16) of word `meta[I + v / 16]` (spec/loop-ir.md §3).
                let (a, off) = self.addr(*meta, meta_index);
                let zero = self.b.ins().iconst(types::I64, 0);
                let end = self.b.ins().iconst(types::I64, 2 * *groups as i64);
                let f = self.loop_begin(zero, end, 1);
                self.bind(l.var, f.var)?;
                let v = self.b.use_var(f.var);
                let word_ix = self.b.ins().ushr_imm_u(v, 4);
                let word_off = self.b.ins().ishl_imm_u(word_ix, 2);
                let wa = self.b.ins().iadd(a, word_off);
                let word = self.b.ins().uload32(MemFlagsData::trusted(), wa, off);
                let lane = self.b.ins().band_imm_u(v, 15);
                let shift = self.b.ins().ishl_imm_u(lane, 1);
                let bits = self.b.ins().ushr(word, shift);
                let pos = self.b.ins().band_imm_u(bits, 3);
                let group = self.b.ins().ushr_imm_u(v, 1);
                let group_start = self.b.ins().ishl_imm_u(group, 2);
                let c = self.b.ins().iadd(group_start, pos);
                let cvar = self.b.declare_var(types::I64);
                self.b.def_var(cvar, c);
                self.bind(*coord, cvar)?;
                let r = self.block(&l.body);
                self.vars.remove(coord);
                self.vars.remove(&l.var);
                r?;
                self.loop_end(f);
                Ok(())
            }
        }
    }

    fn bind(&mut self, v: VarId, var: Variable) -> Result<(), CodegenError> {
        if self.vars.insert(v, var).is_some() {
            return Err(bad(format!(
                "loop variable v{} bound twice in one nest",
                v.0
            )));
        }
        Ok(())
    }

    fn scalar_range(&mut self, l: &Loop, start: Value, end: Value) -> Result<(), CodegenError> {
        let f = self.loop_begin(start, end, 1);
        self.bind(l.var, f.var)?;
        let r = self.block(&l.body);
        self.vars.remove(&l.var);
        r?;
        self.loop_end(f);
        Ok(())
    }

    fn precompute_partials(&mut self, l: &Loop) {
        let mut acc = Vec::new();
        accesses(&l.body, &mut acc);
        let mut pre = HashMap::new();
        for (buf, index) in acc {
            if pre.contains_key(&(buf, index.clone())) {
                continue;
            }
            let size = self.buf_ty(buf).size_bytes() as i64;
            let mut a = self.bases[&buf];
            for (v, s) in &index.terms {
                if *v == l.var || *s == 0 {
                    continue;
                }
                let x = self.b.use_var(self.vars[v]);
                let t = self.b.ins().imul_imm_s(x, s.wrapping_mul(size));
                a = self.b.ins().iadd(a, t);
            }
            if index.offset != 0 {
                a = self.b.ins().iadd_imm_s(a, index.offset.wrapping_mul(size));
            }
            pre.insert((buf, index), a);
        }
        self.partials = Some(Partials { var: l.var, pre });
    }

    /// The address of `buf[index]` as a base value and an immediate byte offset. In vector mode
    /// the offset includes the unrolled step's lanes.
    fn addr(&mut self, buf: BufId, index: &Index) -> (Value, i32) {
        let size = self.buf_ty(buf).size_bytes() as i64;
        let step_elems = |mode: Option<VecMode>, ix: &Index| match mode {
            Some(m) => m.step * m.ct.lanes() * ix.stride_of(m.var),
            None => 0,
        };
        let extra = step_elems(self.vec, index).wrapping_mul(size);
        if let Some(pt) = &self.partials {
            if let Some(pre) = pt.pre.get(&(buf, index.clone())).copied() {
                let s = index.stride_of(pt.var);
                let var = self.vars[&pt.var];
                let mut a = pre;
                if s != 0 {
                    let i = self.b.use_var(var);
                    let t = self.b.ins().imul_imm_s(i, s.wrapping_mul(size));
                    a = self.b.ins().iadd(pre, t);
                }
                return self.with_offset(a, extra);
            }
        }
        let mut a = self.bases[&buf];
        for (v, s) in &index.terms {
            if *s == 0 {
                continue;
            }
            let x = self.b.use_var(self.vars[v]);
            let t = self.b.ins().imul_imm_s(x, s.wrapping_mul(size));
            a = self.b.ins().iadd(a, t);
        }
        let off = index.offset.wrapping_mul(size).wrapping_add(extra);
        self.with_offset(a, off)
    }

    fn with_offset(&mut self, a: Value, off: i64) -> (Value, i32) {
        match i32::try_from(off) {
            Ok(o) => (a, o),
            Err(_) => (self.b.ins().iadd_imm_s(a, off), 0),
        }
    }

    // ---- Vector loops -----------------------------------------------------------------------

    // ---- Expressions ------------------------------------------------------------------------

    // ---- Loads and element conversions ------------------------------------------------------
}
