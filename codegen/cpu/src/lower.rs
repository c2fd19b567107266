//! Loop IR → Cranelift IR. One *segment* (a run of top-level statements without library calls)
//! becomes one function `extern "C" fn(bufs: *const *mut u8, lo: u64, hi: u64)`: `bufs[i]` is
//! the base of buffer `i`, and when the segment is a single parallel `Range` loop that loop runs
//! only iterations `lo..min(hi, extent)` (the caller splits the range across threads).
//!
//! Values are computed in f32 (f32, f16, bf16 and i32 loads) or f64; f16 and bf16 are widened on
//! load and narrowed on store with round-to-nearest-even, by integer bit manipulation (the x64
//! backend has no `fpromote`/`fdemote` for F16). Transcendentals call scalar helpers
//! (`helpers.rs`), except exp and sigmoid in f32 vector loops, which are inline polynomials.
//! An innermost `Range` loop marked `vector >= 2` runs four f32 (two f64) lanes at a time:
//! unit-stride accesses are vector loads and stores, broadcasts are splats, other strides are
//! gathered and scattered lane by lane. Reductions get one vector accumulator per unrolled
//! step (a horizontal reduction follows), then a one-vector loop and a scalar tail finish.
//!
//! This module only builds IR: it assumes `check::validate_kernel` accepted the kernel, and it
//! emits no bounds checks (`check::check_bounds` runs before any generated code).

use std::collections::{HashMap, HashSet};

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

/// Code generation choices (part of the kernel cache key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct LowerOptions {
    /// Unroll factor of vector loops, and the number of vector accumulators per reduction.
    pub n_acc: usize,
    /// Fuse `acc += a * b` into `fma` (only when the ISA has AVX and FMA: TOOLCHAIN.md §1e).
    pub use_fma: bool,
    pub vectorize: bool,
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

/// The buffers a list of statements touches.
fn used_buffers(stmts: &[Stmt], out: &mut HashSet<BufId>) {
    fn expr(e: &Expr, out: &mut HashSet<BufId>) {
        e.visit(&mut |x| {
            if let Expr::Load { buf, .. } = x {
                out.insert(*buf);
            }
        });
    }
    for s in stmts {
        match s {
            Stmt::Loop(l) => {
                match &l.iter {
                    Iter::Range { .. } => {}
                    Iter::Compressed { ptr, crd, .. } => {
                        out.insert(*ptr);
                        out.insert(*crd);
                    }
                    Iter::Singleton { crd, .. } => {
                        out.insert(*crd);
                    }
                    Iter::TwoFour { meta, .. } => {
                        out.insert(*meta);
                    }
                }
                used_buffers(&l.body, out);
            }
            Stmt::Let { init, .. } => expr(init, out),
            Stmt::Update { value, .. } => expr(value, out),
            Stmt::Store { buf, value, .. } => {
                out.insert(*buf);
                expr(value, out);
            }
            Stmt::Call(_) => {}
        }
    }
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
    let mut used = HashSet::new();
    used_buffers(stmts, &mut used);
    let mut used: Vec<BufId> = used.into_iter().collect();
    used.sort();
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
        let ty = self.p.buffer(buf).ty;
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

    /// Stores one scalar of compute type `nat`, narrowed to `ty`.
    fn store_scalar(
        &mut self,
        ty: ElemType,
        nat: Ct,
        v: Value,
        addr: Value,
        off: i32,
    ) -> Result<(), CodegenError> {
        let flags = MemFlagsData::trusted();
        let v = match (ty, nat) {
            (ElemType::F32, Ct::F64) => self.b.ins().fdemote(types::F32, v),
            (ElemType::F64, Ct::F32) => self.b.ins().fpromote(types::F64, v),
            (ElemType::I32, _) => self.b.ins().fcvt_to_sint_sat(types::I32, v),
            (ElemType::F16, Ct::F32) => self.f32_to_f16_bits(v),
            (ElemType::BF16, Ct::F32) => self.f32_to_bf16_bits(v),
            (ElemType::F16, Ct::F64) => self.call1(helpers::F64_TO_F16, v, types::I32)?,
            (ElemType::BF16, Ct::F64) => self.call1(helpers::F64_TO_BF16, v, types::I32)?,
            _ => v,
        };
        if matches!(ty, ElemType::F16 | ElemType::BF16) {
            self.b.ins().istore16(flags, v, addr, off);
        } else {
            self.b.ins().store(flags, v, addr, off);
        }
        Ok(())
    }

    /// Stores a vector of the buffer's compute type to consecutive elements.
    fn store_vector(&mut self, ty: ElemType, v: Value, addr: Value, off: i32) {
        let flags = MemFlagsData::new().with_notrap();
        match ty {
            ElemType::F32 | ElemType::F64 => {
                self.b.ins().store(flags, v, addr, off);
            }
            ElemType::I32 => {
                let n = self.b.ins().fcvt_to_sint_sat(types::I32X4, v);
                self.b.ins().store(flags, n, addr, off);
            }
            ElemType::F16 | ElemType::BF16 => {
                let bits = if ty == ElemType::F16 {
                    self.f32_to_f16_bits(v)
                } else {
                    self.f32_to_bf16_bits(v)
                };
                // Pack the four 16-bit values into the low 64 bits and store those.
                let packed = self.b.ins().unarrow(bits, bits);
                let le = MemFlagsData::new().with_endianness(Endianness::Little);
                let wide = self.b.ins().bitcast(types::I64X2, le, packed);
                let lo = self.b.ins().extractlane(wide, 0);
                self.b.ins().store(flags, lo, addr, off);
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
        let cond = if step == 1 {
            self.b.ins().icmp(IntCC::SignedLessThan, i, end)
        } else {
            let last = self.b.ins().iadd_imm_s(i, step);
            self.b.ins().icmp(IntCC::SignedLessThanOrEqual, last, end)
        };
        self.b.ins().brif(cond, body, &[], exit, &[]);
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
                        Some(plan) => self.vector_loop(l, &plan, start, end),
                        None => self.scalar_range(l, start, end),
                    };
                    self.partials = None;
                    r
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
            let size = self.p.buffer(buf).ty.size_bytes() as i64;
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
        let size = self.p.buffer(buf).ty.size_bytes() as i64;
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

    fn vec_plan(&self, l: &Loop) -> Option<VecPlan> {
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
                    if index.stride_of(l.var) == 0 || !unify(Ct::of(self.p.buffer(*buf).ty)) {
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

    fn vec_expr_ok(&self, e: &Expr, ct: Ct, reds: &[(AccId, AccOp)]) -> bool {
        match e {
            Expr::Const(_) => true,
            Expr::Load { buf, .. } => Ct::of(self.p.buffer(*buf).ty) == ct,
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

    fn identity(&mut self, op: AccOp, ty: Type) -> Value {
        let x = match op {
            AccOp::Mul => 1.0,
            AccOp::Max => f64::NEG_INFINITY,
            AccOp::Min => f64::INFINITY,
            // -0.0 + x == x for every x, including -0.0.
            _ => -0.0,
        };
        self.fconst(ty, x)
    }

    fn fconst(&mut self, ty: Type, x: f64) -> Value {
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

    fn vector_loop(
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

    // ---- Expressions ------------------------------------------------------------------------

    /// The compute type of an expression: `None` when it holds only constants.
    fn infer(&self, e: &Expr) -> Option<Ct> {
        match e {
            Expr::Const(_) => None,
            Expr::Load { buf, .. } => Some(Ct::of(self.p.buffer(*buf).ty)),
            Expr::Acc(a) => self.accs.get(a).map(|x| x.1),
            Expr::Unary(_, x) => self.infer(x),
            Expr::Binary(_, x, y) | Expr::Select(_, x, y) => join(self.infer(x), self.infer(y)),
            Expr::Cast(t, _) => Some(Ct::of(*t)),
            Expr::Iota(_) => None,
        }
    }

    fn vmode_ty(&self, ct: Ct) -> Type {
        if self.vec.is_some() {
            ct.vector()
        } else {
            ct.scalar()
        }
    }

    /// `e` evaluated in its compute type, then converted to `want`.
    fn expr(&mut self, e: &Expr, want: Ct) -> Result<Value, CodegenError> {
        let nat = self.infer(e).unwrap_or(want);
        let v = self.expr_nat(e, nat)?;
        Ok(self.convert(v, nat, want))
    }

    fn convert(&mut self, v: Value, from: Ct, to: Ct) -> Value {
        match (from, to) {
            (Ct::F32, Ct::F64) => self.b.ins().fpromote(types::F64, v),
            (Ct::F64, Ct::F32) => self.b.ins().fdemote(types::F32, v),
            _ => v,
        }
    }

    fn expr_nat(&mut self, e: &Expr, nat: Ct) -> Result<Value, CodegenError> {
        let ty = self.vmode_ty(nat);
        match e {
            Expr::Const(c) => Ok(self.fconst(ty, *c)),
            Expr::Load { buf, index } => Ok(self.load(*buf, index)),
            Expr::Acc(a) => {
                let (var, _) = self.acc(*a)?;
                let v = self.b.use_var(var);
                Ok(if ty.is_vector() {
                    self.b.ins().splat(ty, v)
                } else {
                    v
                })
            }
            Expr::Unary(op, x) => {
                let xv = self.expr(x, nat)?;
                self.unary(*op, xv, nat)
            }
            Expr::Binary(op, x, y) => {
                let xv = self.expr(x, nat)?;
                let yv = self.expr(y, nat)?;
                self.binary(*op, xv, yv, nat)
            }
            Expr::Cast(t, x) => {
                let inner = self.infer(x).unwrap_or(Ct::of(*t));
                let xv = self.expr(x, inner)?;
                self.cast(*t, xv, inner)
            }
            Expr::Select(c, x, y) => {
                let cv = self.expr(c, self.infer(c).unwrap_or(nat))?;
                let xv = self.expr(x, nat)?;
                let yv = self.expr(y, nat)?;
                let zero = self.fconst(ty, 0.0);
                // NotEqual is unordered-or-not-equal: a NaN condition selects `x`, as numpy.
                let mask = self.b.ins().fcmp(FloatCC::NotEqual, cv, zero);
                Ok(self.choose(mask, xv, yv, ty))
            }
            Expr::Iota(index) => Ok(self.iota(index, nat)),
        }
    }

    /// `mask ? x : y`, lane by lane in vector mode (`mask` from an `fcmp` of type `ty`).
    fn choose(&mut self, mask: Value, x: Value, y: Value, ty: Type) -> Value {
        if ty.is_vector() {
            let m = self.bitcast(ty, mask);
            self.b.ins().bitselect(m, x, y)
        } else {
            self.b.ins().select(mask, x, y)
        }
    }

    /// The value of an affine index as a number of compute type `ct`; in vector mode each lane
    /// holds its own element's index.
    fn iota(&mut self, index: &Index, ct: Ct) -> Value {
        let mut a = self.b.ins().iconst(types::I64, index.offset);
        for (v, s) in &index.terms {
            let x = self.b.use_var(self.vars[v]);
            let t = self.b.ins().imul_imm_s(x, *s);
            a = self.b.ins().iadd(a, t);
        }
        let x = self.b.ins().fcvt_from_sint(ct.scalar(), a);
        let Some(m) = self.vec else {
            return x;
        };
        let stride = index.stride_of(m.var);
        let vty = ct.vector();
        let mut lanes = self.b.ins().splat(vty, x);
        let first = m.step * m.ct.lanes();
        for lane in 0..ct.lanes() {
            let d = ((first + lane) * stride) as f64;
            let dv = self.fconst(ct.scalar(), d);
            let cur = self.b.ins().extractlane(lanes, lane as u8);
            let sum = self.b.ins().fadd(cur, dv);
            lanes = self.b.ins().insertlane(lanes, sum, lane as u8);
        }
        lanes
    }

    fn cast(&mut self, t: ElemType, v: Value, from: Ct) -> Result<Value, CodegenError> {
        let vector = self.vec.is_some();
        Ok(match t {
            ElemType::F32 => self.convert(v, from, Ct::F32),
            ElemType::F64 => self.convert(v, from, Ct::F64),
            ElemType::F16 => {
                let bits = match from {
                    Ct::F32 => self.f32_to_f16_bits(v),
                    Ct::F64 => self.call1(helpers::F64_TO_F16, v, types::I32)?,
                };
                self.f16_bits_to_f32(bits)
            }
            ElemType::BF16 => {
                let bits = match from {
                    Ct::F32 => self.f32_to_bf16_bits(v),
                    Ct::F64 => self.call1(helpers::F64_TO_BF16, v, types::I32)?,
                };
                self.bf16_bits_to_f32(bits)
            }
            ElemType::I32 => {
                let (ity, fty) = if vector {
                    (types::I32X4, types::F32X4)
                } else {
                    (types::I32, types::F32)
                };
                let i = self.b.ins().fcvt_to_sint_sat(ity, v);
                self.b.ins().fcvt_from_sint(fty, i)
            }
        })
    }

    fn unary(&mut self, op: UnOp, x: Value, ct: Ct) -> Result<Value, CodegenError> {
        let ty = self.vmode_ty(ct);
        Ok(match op {
            UnOp::Neg => self.b.ins().fneg(x),
            UnOp::Sqrt => self.b.ins().sqrt(x),
            UnOp::Rsqrt => {
                let s = self.b.ins().sqrt(x);
                let one = self.fconst(ty, 1.0);
                self.b.ins().fdiv(one, s)
            }
            UnOp::Abs => self.b.ins().fabs(x),
            UnOp::Relu => {
                // fmax propagates NaN, as relu must.
                let zero = self.fconst(ty, 0.0);
                self.b.ins().fmax(x, zero)
            }
            UnOp::Square => self.b.ins().fmul(x, x),
            UnOp::Exp if ty == types::F32X4 => self.exp_f32x4(x),
            UnOp::Floor => self.b.ins().floor(x),
            UnOp::Ceil => self.b.ins().ceil(x),
            UnOp::Round => self.b.ins().nearest(x),
            UnOp::Silu if ty == types::F32X4 => {
                let s = self.unary(UnOp::Sigmoid, x, ct)?;
                self.b.ins().fmul(x, s)
            }
            UnOp::Sigmoid if ty == types::F32X4 => {
                // With e = exp(-|x|): 1 / (1 + e) for x >= 0, e / (1 + e) below, which keeps
                // tiny results (subnormal for x < -87) instead of overflowing exp(-x).
                let ax = self.b.ins().fabs(x);
                let nax = self.b.ins().fneg(ax);
                let e = self.exp_f32x4(nax);
                let one = self.fconst(ty, 1.0);
                let zero = self.fconst(ty, 0.0);
                let d = self.b.ins().fadd(one, e);
                let neg = self.b.ins().fcmp(FloatCC::LessThan, x, zero);
                let neg = self.bitcast(ty, neg);
                let num = self.b.ins().bitselect(neg, e, one);
                self.b.ins().fdiv(num, d)
            }
            _ => {
                let name = helpers::unary_helper(op, ct == Ct::F64)
                    .ok_or_else(|| bad(format!("no helper for {op:?}")))?;
                self.lanewise(name, &[x], ct)?
            }
        })
    }

    fn binary(&mut self, op: BinOp, x: Value, y: Value, ct: Ct) -> Result<Value, CodegenError> {
        Ok(match op {
            BinOp::Add => self.b.ins().fadd(x, y),
            BinOp::Sub => self.b.ins().fsub(x, y),
            BinOp::Mul => self.b.ins().fmul(x, y),
            BinOp::Div => self.b.ins().fdiv(x, y),
            BinOp::Max => self.b.ins().fmax(x, y),
            BinOp::Min => self.b.ins().fmin(x, y),
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => {
                let cc = match op {
                    BinOp::Lt => FloatCC::LessThan,
                    BinOp::Le => FloatCC::LessThanOrEqual,
                    BinOp::Gt => FloatCC::GreaterThan,
                    BinOp::Ge => FloatCC::GreaterThanOrEqual,
                    BinOp::Eq => FloatCC::Equal,
                    _ => FloatCC::NotEqual,
                };
                let ty = self.vmode_ty(ct);
                let mask = self.b.ins().fcmp(cc, x, y);
                let (one, zero) = (self.fconst(ty, 1.0), self.fconst(ty, 0.0));
                self.choose(mask, one, zero, ty)
            }
            BinOp::Pow => {
                let name = if ct == Ct::F64 {
                    helpers::POW.1
                } else {
                    helpers::POW.0
                };
                self.lanewise(name, &[x, y], ct)?
            }
        })
    }

    fn helper(
        &mut self,
        name: &'static str,
        n_args: usize,
        arg: Type,
        ret: Type,
    ) -> Result<FuncRef, CodegenError> {
        if let Some(f) = self.helpers.get(name) {
            return Ok(*f);
        }
        let mut sig = self.module.make_signature();
        for _ in 0..n_args {
            sig.params.push(AbiParam::new(arg));
        }
        sig.returns.push(AbiParam::new(ret));
        let id = self
            .module
            .declare_function(name, Linkage::Import, &sig)
            .map_err(|e| bad(format!("declaring helper {name}: {e}")))?;
        let f = self.module.declare_func_in_func(id, self.b.func);
        self.helpers.insert(name, f);
        Ok(f)
    }

    /// A scalar helper of one argument returning `ret`.
    fn call1(&mut self, name: &'static str, x: Value, ret: Type) -> Result<Value, CodegenError> {
        let arg = self.b.func.dfg.value_type(x);
        let f = self.helper(name, 1, arg, ret)?;
        let call = self.b.ins().call(f, &[x]);
        Ok(self.b.inst_results(call)[0])
    }

    /// Calls a scalar helper on every lane (or once in scalar mode).
    fn lanewise(
        &mut self,
        name: &'static str,
        args: &[Value],
        ct: Ct,
    ) -> Result<Value, CodegenError> {
        let sty = ct.scalar();
        let f = self.helper(name, args.len(), sty, sty)?;
        if self.vec.is_none() {
            let call = self.b.ins().call(f, args);
            return Ok(self.b.inst_results(call)[0]);
        }
        let mut out = args[0];
        for lane in 0..ct.lanes() as u8 {
            let xs: Vec<Value> = args
                .iter()
                .map(|a| self.b.ins().extractlane(*a, lane))
                .collect();
            let call = self.b.ins().call(f, &xs);
            let r = self.b.inst_results(call)[0];
            out = self.b.ins().insertlane(out, r, lane);
        }
        Ok(out)
    }

    /// `a·b + c`, fused when the host has FMA.
    fn mul_add(&mut self, a: Value, b: Value, c: Value) -> Value {
        if self.opts.use_fma {
            self.b.ins().fma(a, b, c)
        } else {
            let p = self.b.ins().fmul(a, b);
            self.b.ins().fadd(p, c)
        }
    }

    /// `x > k ? k : x` (or `<` with `below`), lane-wise; NaN lanes stay NaN.
    fn clamp_lanes(&mut self, x: Value, k: f64, below: bool) -> Value {
        let ty = types::F32X4;
        let kv = self.fconst(ty, k);
        let cc = if below {
            FloatCC::LessThan
        } else {
            FloatCC::GreaterThan
        };
        let m = self.b.ins().fcmp(cc, x, kv);
        let m = self.bitcast(ty, m);
        self.b.ins().bitselect(m, kv, x)
    }

    /// e^x on four f32 lanes without a call (Cephes `expf`: Cody–Waite range reduction and a
    /// degree-6 polynomial, within 2 ulp). NaN stays NaN, overflow gives +inf and underflow 0 or
    /// a subnormal: the scale 2^n is applied in two halves so that both stay normal.
    fn exp_f32x4(&mut self, x: Value) -> Value {
        let ty = types::F32X4;
        let x = self.clamp_lanes(x, 89.0, false);
        let x = self.clamp_lanes(x, -104.0, true);
        // n = round(x·log2 e): adding 1.5·2^23 rounds to an integer (nearest even), which then
        // sits in the low mantissa bits.
        let log2e = self.fconst(ty, std::f64::consts::LOG2_E);
        let magic_i = self.ic(types::I32X4, 0x4b40_0000);
        let magic = self.bitcast(ty, magic_i);
        let t = self.mul_add(x, log2e, magic);
        let z = self.b.ins().fsub(t, magic);
        let ti = self.bitcast(types::I32X4, t);
        let n = self.b.ins().isub(ti, magic_i);
        // r = x − n·ln 2, with ln 2 split so that n·C1 is exact.
        let c1 = self.fconst(ty, -0.693359375);
        let c2 = self.fconst(ty, 2.12194440e-4);
        let r = self.mul_add(z, c1, x);
        let r = self.mul_add(z, c2, r);
        let mut p = self.fconst(ty, 1.9875691500e-4);
        for k in [
            1.3981999507e-3,
            8.3334519073e-3,
            4.1665795894e-2,
            1.6666665459e-1,
            5.0000001201e-1,
        ] {
            let kk = self.fconst(ty, k);
            p = self.mul_add(p, r, kk);
        }
        let r2 = self.b.ins().fmul(r, r);
        let p = self.mul_add(p, r2, r);
        let one = self.fconst(ty, 1.0);
        let p = self.b.ins().fadd(p, one);
        // 2^n = 2^n1 · 2^n2 with n1 = n >> 1 and n2 = n − n1, both in the normal range.
        let one_i = self.b.ins().iconst(types::I32, 1);
        let n1 = self.b.ins().sshr(n, one_i);
        let n2 = self.b.ins().isub(n, n1);
        let mut out = p;
        for ni in [n1, n2] {
            let biased = self.add_c(ni, 127);
            let bits = self.shl(biased, 23);
            let scale = self.bitcast(ty, bits);
            out = self.b.ins().fmul(out, scale);
        }
        out
    }

    // ---- Loads and element conversions ------------------------------------------------------

    fn load(&mut self, buf: BufId, index: &Index) -> Value {
        let ty = self.p.buffer(buf).ty;
        let ct = Ct::of(ty);
        let (addr, off) = self.addr(buf, index);
        match self.vec.map(|m| index.stride_of(m.var)) {
            None => self.load_scalar(ty, addr, off),
            Some(0) => {
                let s = self.load_scalar(ty, addr, off);
                self.b.ins().splat(ct.vector(), s)
            }
            Some(1) => self.load_vector(ty, addr, off),
            Some(stride) => {
                // Gather, lane by lane.
                let size = ty.size_bytes() as i64;
                let first = self.load_scalar(ty, addr, off);
                let mut v = self.b.ins().splat(ct.vector(), first);
                for lane in 1..ct.lanes() {
                    let o = off as i64 + lane * stride.wrapping_mul(size);
                    let (a, o) = self.with_offset(addr, o);
                    let x = self.load_scalar(ty, a, o);
                    v = self.b.ins().insertlane(v, x, lane as u8);
                }
                v
            }
        }
    }

    /// One element, widened to its compute type.
    fn load_scalar(&mut self, ty: ElemType, addr: Value, off: i32) -> Value {
        let flags = MemFlagsData::trusted();
        match ty {
            ElemType::F32 => self.b.ins().load(types::F32, flags, addr, off),
            ElemType::F64 => self.b.ins().load(types::F64, flags, addr, off),
            ElemType::I32 => {
                let i = self.b.ins().load(types::I32, flags, addr, off);
                self.b.ins().fcvt_from_sint(types::F32, i)
            }
            ElemType::F16 => {
                let h = self.b.ins().uload16(types::I32, flags, addr, off);
                self.f16_bits_to_f32(h)
            }
            ElemType::BF16 => {
                let h = self.b.ins().uload16(types::I32, flags, addr, off);
                self.bf16_bits_to_f32(h)
            }
        }
    }

    /// Consecutive elements as one vector of their compute type.
    fn load_vector(&mut self, ty: ElemType, addr: Value, off: i32) -> Value {
        let flags = MemFlagsData::new().with_notrap();
        match ty {
            ElemType::F32 => self.b.ins().load(types::F32X4, flags, addr, off),
            ElemType::F64 => self.b.ins().load(types::F64X2, flags, addr, off),
            ElemType::I32 => {
                let i = self.b.ins().load(types::I32X4, flags, addr, off);
                self.b.ins().fcvt_from_sint(types::F32X4, i)
            }
            ElemType::F16 => {
                let h = self.b.ins().uload16x4(flags, addr, off);
                self.f16_bits_to_f32(h)
            }
            ElemType::BF16 => {
                let h = self.b.ins().uload16x4(flags, addr, off);
                self.bf16_bits_to_f32(h)
            }
        }
    }

    /// An i32 constant of type `ity` (i32 or i32x4).
    fn ic(&mut self, ity: Type, c: u32) -> Value {
        let s = self.b.ins().iconst(types::I32, c as i64);
        if ity.is_vector() {
            self.b.ins().splat(ity, s)
        } else {
            s
        }
    }

    fn shl(&mut self, x: Value, n: u32) -> Value {
        let amt = self.b.ins().iconst(types::I32, n as i64);
        self.b.ins().ishl(x, amt)
    }

    fn shr(&mut self, x: Value, n: u32) -> Value {
        let amt = self.b.ins().iconst(types::I32, n as i64);
        self.b.ins().ushr(x, amt)
    }

    fn band_c(&mut self, x: Value, c: u32) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let k = self.ic(ty, c);
        self.b.ins().band(x, k)
    }

    fn bor_c(&mut self, x: Value, c: u32) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let k = self.ic(ty, c);
        self.b.ins().bor(x, k)
    }

    fn add_c(&mut self, x: Value, c: u32) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let k = self.ic(ty, c);
        self.b.ins().iadd(x, k)
    }

    fn cmp_c(&mut self, cc: IntCC, x: Value, c: u32) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let k = self.ic(ty, c);
        self.b.ins().icmp(cc, x, k)
    }

    /// `cond ? a : b` for a scalar condition or a vector lane mask.
    fn sel(&mut self, cond: Value, a: Value, b: Value) -> Value {
        if self.b.func.dfg.value_type(cond).is_vector() {
            self.b.ins().bitselect(cond, a, b)
        } else {
            self.b.ins().select(cond, a, b)
        }
    }

    fn float_ty(ity: Type) -> Type {
        if ity.is_vector() {
            types::F32X4
        } else {
            types::F32
        }
    }

    fn bitcast(&mut self, ty: Type, v: Value) -> Value {
        self.b.ins().bitcast(ty, MemFlagsData::new(), v)
    }

    /// f16 bits (zero-extended in an i32 lane) → f32, exactly (subnormals, inf and NaN too).
    fn f16_bits_to_f32(&mut self, h: Value) -> Value {
        let ity = self.b.func.dfg.value_type(h);
        let fty = Self::float_ty(ity);
        let mag = self.band_c(h, 0x7fff);
        let o = self.shl(mag, 13);
        let e = self.band_c(o, 0x0f80_0000);
        // Rebias the exponent from 15 to 127.
        let o = self.add_c(o, 0x3800_0000);
        let inf_nan = self.cmp_c(IntCC::Equal, e, 0x0f80_0000);
        let o_inf = self.add_c(o, 0x3800_0000);
        let o = self.sel(inf_nan, o_inf, o);
        // Zero and subnormals: renormalise through a float subtraction (exact).
        let den = self.cmp_c(IntCC::Equal, e, 0);
        let t = self.add_c(o, 0x0080_0000);
        let tf = self.bitcast(fty, t);
        let magic_i = self.ic(ity, 0x3880_0000);
        let magic = self.bitcast(fty, magic_i);
        let d = self.b.ins().fsub(tf, magic);
        let di = self.bitcast(ity, d);
        let o = self.sel(den, di, o);
        let sign = self.band_c(h, 0x8000);
        let sign = self.shl(sign, 16);
        let o = self.b.ins().bor(o, sign);
        self.bitcast(fty, o)
    }

    /// f32 → f16 bits, rounded to nearest even; NaN stays NaN (quiet, payload truncated) as in
    /// `half::f16::from_f32`.
    fn f32_to_f16_bits(&mut self, x: Value) -> Value {
        let fty = self.b.func.dfg.value_type(x);
        let ity = if fty.is_vector() {
            types::I32X4
        } else {
            types::I32
        };
        let f = self.bitcast(ity, x);
        let sign = self.band_c(f, 0x8000_0000);
        let a = self.b.ins().bxor(f, sign);
        // Overflow to infinity, or NaN.
        let big = self.cmp_c(IntCC::SignedGreaterThanOrEqual, a, 0x4780_0000);
        let is_nan = self.cmp_c(IntCC::SignedGreaterThan, a, 0x7f80_0000);
        let man = self.band_c(a, 0x007f_ffff);
        let man = self.shr(man, 13);
        let nan = self.bor_c(man, 0x7e00);
        let inf = self.ic(ity, 0x7c00);
        let r_big = self.sel(is_nan, nan, inf);
        // Subnormal results: let the FPU round by adding 0.5 (exponent aligns the mantissa).
        let small = self.cmp_c(IntCC::SignedLessThan, a, 0x3880_0000);
        let af = self.bitcast(fty, a);
        let magic_i = self.ic(ity, 0x3f00_0000);
        let magic = self.bitcast(fty, magic_i);
        let s = self.b.ins().fadd(af, magic);
        let si = self.bitcast(ity, s);
        let r_small = self.b.ins().isub(si, magic_i);
        // Normal results: rebias and round to nearest even.
        let odd = self.shr(a, 13);
        let odd = self.band_c(odd, 1);
        let t = self.add_c(a, 0xc800_0fff);
        let t = self.b.ins().iadd(t, odd);
        let r_norm = self.shr(t, 13);
        let r = self.sel(small, r_small, r_norm);
        let r = self.sel(big, r_big, r);
        let sign16 = self.shr(sign, 16);
        self.b.ins().bor(r, sign16)
    }

    fn bf16_bits_to_f32(&mut self, h: Value) -> Value {
        let ity = self.b.func.dfg.value_type(h);
        let w = self.shl(h, 16);
        self.bitcast(Self::float_ty(ity), w)
    }

    /// f32 → bf16 bits, rounded to nearest even; NaN stays NaN (as `half::bf16::from_f32`).
    fn f32_to_bf16_bits(&mut self, x: Value) -> Value {
        let fty = self.b.func.dfg.value_type(x);
        let ity = if fty.is_vector() {
            types::I32X4
        } else {
            types::I32
        };
        let f = self.bitcast(ity, x);
        let hi = self.shr(f, 16);
        let lsb = self.band_c(hi, 1);
        let t = self.add_c(f, 0x7fff);
        let t = self.b.ins().iadd(t, lsb);
        let r = self.shr(t, 16);
        let mag = self.band_c(f, 0x7fff_ffff);
        let is_nan = self.cmp_c(IntCC::SignedGreaterThan, mag, 0x7f80_0000);
        let nan = self.bor_c(hi, 0x40);
        self.sel(is_nan, nan, r)
    }
}
