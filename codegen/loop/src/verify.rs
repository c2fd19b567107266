//! The loop IR verifier: [`verify`] checks that a [`LoopProgram`] is well formed and that every
//! access whose range is known statically stays in bounds. It runs after planning in debug
//! builds and tests; backends may assume what it checks.
//!
//! It collects every error rather than stopping at the first. What it checks:
//!
//! - **Buffers**: input numbers and output numbers are each distinct and numbered `0..n`;
//!   kernel names are distinct.
//! - **Ids and scope**: every [`BufId`] names a buffer; every [`VarId`] used is bound by an
//!   enclosing loop (its variable or its `coord`); every [`AccId`] used is declared by a `Let`
//!   earlier in the same or an enclosing block; no variable or accumulator is defined twice in a
//!   kernel (ids are unique per kernel, even across sibling loops).
//! - **Types**: `Let` types are f32 or f64; casts are to float types; `I32` buffers appear only
//!   as the `ptr`/`crd`/`meta` buffers of sparse levels, which must be `I32`, never in loads,
//!   stores or library calls; inputs are never stored to or written by a library call.
//! - **Loops**: range extents and 2:4 group counts are at least 1; `vector` is at least 1 and
//!   above 1 only on innermost loops (no nested loop or library call); a GPU axis is not mapped
//!   twice along one nest.
//! - **Races** in `parallel` loops (only for CPU `parallel`; GPU-mapped loops may legitimately
//!   reduce across lanes): the body updates no accumulator declared outside the loop, every store
//!   in the body depends on the loop's variable or its `coord` (a non-zero stride), and the body
//!   holds no library call (a call's views do not depend on loop variables). Loops that run once
//!   (extent 1, singleton) are exempt. Distinct iterations writing the same element through
//!   different variables (`v0 + v1` under two parallel loops) are not detected.
//! - **Bounds**: for every load, store and sparse-level read whose index uses only variables with
//!   a static range, the least and greatest index over those ranges (computed exactly in i128:
//!   an affine function over a box reaches its extremes at corners) lie in `[0, elems)`. Range
//!   variables run over `0..extent`; a 2:4 level's variable over `0..2·groups` and its `coord` over
//!   `0..4·groups`. A compressed level reads `ptr[ptr_index]` and `ptr[ptr_index + 1]`; a
//!   singleton reads `crd[pos_index]`; a 2:4 level reads the metadata words
//!   `meta_index + var / 16` (see `spec/loop-ir.md` for the bit layout). Library-call views are
//!   checked at every corner of (batch…, row, column), with all dimensions at least 1 and one
//!   batch stride per batch extent.
//!
//! What it cannot check: positions and coordinates read from sparse data (a compressed level's
//! variable and `coord`, a singleton's variable) have no static range, so accesses that depend
//! on them (and a compressed level's `crd[var]` read) are not bounds-checked here. The runtime
//! validates sparse buffers (monotone `ptr`, coordinates below the axis extent, 2:4 metadata)
//! before a program runs, and the evaluator checks every access as it goes.

use crate::ir::{
    AccId, BufId, ElemType, Expr, GpuAxis, Index, Iter, Kernel, LibCall, Loop, LoopProgram,
    MatView, Role, Stmt, VarId,
};
use crate::print::{buffer_text, expr_text, gpu_axis_name, index_text, view_text};
use std::collections::HashSet;
use std::fmt;

/// One problem found by [`verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyError {
    /// The kernel the problem is in; empty for problems of the program as a whole (buffer
    /// roles, kernel names).
    pub kernel: String,
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kernel.is_empty() {
            write!(f, "program: {}", self.message)
        } else {
            write!(f, "kernel {}: {}", self.kernel, self.message)
        }
    }
}

impl std::error::Error for VerifyError {}

/// Checks `p`; returns every problem found, in program order.
pub fn verify(p: &LoopProgram) -> Result<(), Vec<VerifyError>> {
    let mut errors = Vec::new();
    check_roles(p, &mut errors);
    let mut names = HashSet::new();
    for k in &p.kernels {
        if !names.insert(k.name.as_str()) {
            errors.push(VerifyError {
                kernel: String::new(),
                message: format!("two kernels are named `{}`", k.name),
            });
        }
    }
    for k in &p.kernels {
        let mut c = Checker::new(p, k);
        c.block(&k.body);
        errors.extend(c.errors);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn check_roles(p: &LoopProgram, errors: &mut Vec<VerifyError>) {
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    for (id, b) in p.buffers.iter().enumerate() {
        match b.role {
            Role::Input(n) => inputs.push((n, id)),
            Role::Output(n) => outputs.push((n, id)),
            Role::Temp => {}
        }
    }
    for (what, mut list) in [("input", inputs), ("output", outputs)] {
        list.sort();
        for w in list.windows(2) {
            if w[0].0 == w[1].0 {
                errors.push(VerifyError {
                    kernel: String::new(),
                    message: format!("{what} {} is both %{} and %{}", w[0].0, w[0].1, w[1].1),
                });
            }
        }
        let mut numbers: Vec<u32> = list.iter().map(|(n, _)| *n).collect();
        numbers.dedup();
        if numbers.iter().enumerate().any(|(i, n)| *n as usize != i) {
            let shown: Vec<String> = numbers.iter().map(|n| n.to_string()).collect();
            errors.push(VerifyError {
                kernel: String::new(),
                message: format!(
                    "{what}s are numbered {}, not 0..{}",
                    shown.join(", "),
                    numbers.len()
                ),
            });
        }
    }
}

/// A variable in scope with its static range (inclusive), if it has one.
struct VarScope {
    id: VarId,
    range: Option<(i128, i128)>,
}

/// An enclosing parallel loop that runs more than once.
struct Parallel {
    var: VarId,
    coord: Option<VarId>,
    /// Accumulators at positions below this were declared outside the loop.
    n_accs_outside: usize,
}

struct Checker<'a> {
    p: &'a LoopProgram,
    kernel: &'a str,
    errors: Vec<VerifyError>,
    vars: Vec<VarScope>,
    accs: Vec<AccId>,
    defined_vars: HashSet<VarId>,
    defined_accs: HashSet<AccId>,
    parallel: Vec<Parallel>,
    gpu: Vec<(GpuAxis, VarId)>,
}

impl<'a> Checker<'a> {
    fn new(p: &'a LoopProgram, k: &'a Kernel) -> Checker<'a> {
        Checker {
            p,
            kernel: &k.name,
            errors: Vec::new(),
            vars: Vec::new(),
            accs: Vec::new(),
            defined_vars: HashSet::new(),
            defined_accs: HashSet::new(),
            parallel: Vec::new(),
            gpu: Vec::new(),
        }
    }

    fn error(&mut self, message: String) {
        self.errors.push(VerifyError {
            kernel: self.kernel.to_string(),
            message,
        });
    }

    fn block(&mut self, stmts: &[Stmt]) {
        let n_accs = self.accs.len();
        for s in stmts {
            self.stmt(s);
        }
        self.accs.truncate(n_accs);
    }

    fn stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::Loop(l) => self.loop_(l),
            Stmt::Let { acc, ty, init } => {
                if !matches!(ty, ElemType::F32 | ElemType::F64) {
                    self.error(format!(
                        "accumulator a{} has type {ty}; accumulators are f32 or f64",
                        acc.0
                    ));
                }
                self.expr(init);
                if !self.defined_accs.insert(*acc) {
                    self.error(format!("accumulator a{} is declared twice", acc.0));
                }
                self.accs.push(*acc);
            }
            Stmt::Update { acc, value, .. } => {
                self.expr(value);
                match self.accs.iter().rposition(|a| a == acc) {
                    None => self.error(format!(
                        "accumulator a{} is updated but not declared in an enclosing block",
                        acc.0
                    )),
                    Some(pos) => {
                        if let Some(par) = self.parallel.last() {
                            if pos < par.n_accs_outside {
                                let v = par.var.0;
                                self.error(format!(
                                    "parallel loop v{v} updates accumulator a{} declared outside \
                                     it: iterations race",
                                    acc.0
                                ));
                            }
                        }
                    }
                }
            }
            Stmt::Store { buf, index, value } => {
                self.expr(value);
                let what = format!("store %{}[{}]", buf.0, index_text(index));
                let b = self.float_buffer(*buf, &what);
                if let Some(Role::Input(n)) = b.map(|b| b.role) {
                    self.error(format!("{what} writes input {n}; inputs are read-only"));
                }
                self.access(*buf, index, &what, b.is_some());
                for par in &self.parallel {
                    let depends = index.stride_of(par.var) != 0
                        || par.coord.is_some_and(|c| index.stride_of(c) != 0);
                    if !depends {
                        let message = format!(
                            "{what} does not depend on parallel loop v{}: iterations race",
                            par.var.0
                        );
                        self.errors.push(VerifyError {
                            kernel: self.kernel.to_string(),
                            message,
                        });
                    }
                }
            }
            Stmt::Call(call) => self.call(call),
        }
    }

    fn loop_(&mut self, l: &Loop) {
        let v = l.var.0;
        let mut var_range = None;
        let mut coord = None;
        let mut runs_once = false;
        match &l.iter {
            Iter::Range { extent } => {
                if *extent == 0 {
                    self.error(format!("loop v{v} has extent 0"));
                } else {
                    var_range = Some((0, *extent as i128 - 1));
                    runs_once = *extent == 1;
                }
            }
            Iter::Compressed {
                ptr,
                ptr_index,
                crd,
                coord: c,
            } => {
                let what = format!("compressed level of loop v{v} reads ptr %{}", ptr.0);
                if self.index_buffer(*ptr, &what) {
                    self.access_range(*ptr, ptr_index, 0, 1, &what);
                } else {
                    self.index_range(ptr_index, &what);
                }
                let what = format!("compressed level of loop v{v} reads crd %{}", crd.0);
                self.index_buffer(*crd, &what);
                coord = Some((*c, None));
            }
            Iter::Singleton { crd, pos_index } => {
                let what = format!("singleton level of loop v{v} reads crd %{}", crd.0);
                if self.index_buffer(*crd, &what) {
                    self.access_range(*crd, pos_index, 0, 0, &what);
                } else {
                    self.index_range(pos_index, &what);
                }
                runs_once = true;
            }
            Iter::TwoFour {
                groups,
                meta,
                meta_index,
                coord: c,
            } => {
                let what = format!("2:4 level of loop v{v} reads meta %{}", meta.0);
                if *groups == 0 {
                    self.error(format!("2:4 loop v{v} has 0 groups"));
                    self.index_range(meta_index, &what);
                } else {
                    let n_kept = 2 * *groups as i128;
                    var_range = Some((0, n_kept - 1));
                    coord = Some((*c, Some((0, 4 * *groups as i128 - 1))));
                    if self.index_buffer(*meta, &what) {
                        self.access_range(*meta, meta_index, 0, (n_kept - 1) / 16, &what);
                    } else {
                        self.index_range(meta_index, &what);
                    }
                }
            }
        }

        if l.vector == 0 {
            self.error(format!("loop v{v} has vector width 0"));
        } else if l.vector > 1
            && l.body
                .iter()
                .any(|s| matches!(s, Stmt::Loop(_) | Stmt::Call(_)))
        {
            self.error(format!(
                "loop v{v} is vectorised ({} lanes) but is not innermost",
                l.vector
            ));
        }
        if let Some(axis) = l.gpu {
            if let Some((_, outer)) = self.gpu.iter().find(|(a, _)| *a == axis) {
                let outer = outer.0;
                self.error(format!(
                    "loops v{outer} and v{v} are both mapped to gpu {}",
                    gpu_axis_name(axis)
                ));
            }
        }

        let n_vars = self.vars.len();
        self.define_var(l.var, var_range);
        if let Some((c, range)) = coord {
            self.define_var(c, range);
        }
        if let Some(axis) = l.gpu {
            self.gpu.push((axis, l.var));
        }
        let parallel = l.parallel && !runs_once;
        if parallel {
            self.parallel.push(Parallel {
                var: l.var,
                coord: coord.map(|(c, _)| c),
                n_accs_outside: self.accs.len(),
            });
        }
        self.block(&l.body);
        if parallel {
            self.parallel.pop();
        }
        if l.gpu.is_some() {
            self.gpu.pop();
        }
        self.vars.truncate(n_vars);
    }

    fn define_var(&mut self, id: VarId, range: Option<(i128, i128)>) {
        if !self.defined_vars.insert(id) {
            self.error(format!("variable v{} is defined twice", id.0));
        }
        self.vars.push(VarScope { id, range });
    }

    fn call(&mut self, call: &LibCall) {
        let LibCall::Gemm {
            m,
            n,
            k,
            batch,
            a,
            b,
            c,
            ..
        } = call;
        let mut dims_ok = true;
        for (name, d) in [("m", *m), ("n", *n), ("k", *k)] {
            if d == 0 {
                self.error(format!("gemm has {name} = 0"));
                dims_ok = false;
            }
        }
        if batch.contains(&0) {
            self.error("gemm has a batch extent of 0".into());
            dims_ok = false;
        }
        for (operand, view, rows, cols) in [("a", a, *m, *k), ("b", b, *k, *n), ("c", c, *m, *n)] {
            let what = format!("gemm operand {operand} = {}", view_text(view));
            let Some(buf) = self.float_buffer(view.buf, &what) else {
                continue;
            };
            if operand == "c" {
                if let Role::Input(i) = buf.role {
                    self.error(format!("{what} writes input {i}; inputs are read-only"));
                }
            }
            if view.batch_strides.len() != batch.len() {
                self.error(format!(
                    "{what} has {} batch strides for {} batch axes",
                    view.batch_strides.len(),
                    batch.len()
                ));
            } else if dims_ok {
                self.view_bounds(view, batch, rows, cols, &what);
            }
        }
        if let Some(par) = self.parallel.last() {
            let v = par.var.0;
            self.error(format!(
                "gemm inside parallel loop v{v}: every iteration writes the same output"
            ));
        }
    }

    fn view_bounds(&mut self, view: &MatView, batch: &[u64], rows: u64, cols: u64, what: &str) {
        let mut lo = view.offset as i128;
        let mut hi = lo;
        let dims = batch
            .iter()
            .zip(&view.batch_strides)
            .map(|(e, s)| (*e, *s))
            .chain([(rows, view.row_stride), (cols, view.col_stride)]);
        for (extent, stride) in dims {
            let span = stride as i128 * (extent as i128 - 1);
            lo += span.min(0);
            hi += span.max(0);
        }
        self.in_bounds(view.buf, lo, hi, what);
    }

    fn expr(&mut self, e: &Expr) {
        match e {
            Expr::Const(_) => {}
            Expr::Load { buf, index } => {
                let what = format!("load %{}[{}]", buf.0, index_text(index));
                let valid = self.float_buffer(*buf, &what).is_some();
                self.access(*buf, index, &what, valid);
            }
            Expr::Acc(a) => {
                if !self.accs.contains(a) {
                    self.error(format!(
                        "accumulator a{} is read but not declared in an enclosing block",
                        a.0
                    ));
                }
            }
            Expr::Unary(_, x) => self.expr(x),
            Expr::Binary(_, x, y) => {
                self.expr(x);
                self.expr(y);
            }
            Expr::Cast(ty, x) => {
                if *ty == ElemType::I32 {
                    self.error(format!(
                        "`{}` casts to i32; casts are to float types",
                        expr_text(e)
                    ));
                }
                self.expr(x);
            }
        }
    }

    /// The buffer `id`, if it exists and holds floats; reports otherwise.
    fn float_buffer(&mut self, id: BufId, what: &str) -> Option<&'a crate::ir::Buffer> {
        let p = self.p;
        match p.buffers.get(id.0 as usize) {
            None => {
                self.error(format!(
                    "{what}: buffer %{} does not exist ({} buffers)",
                    id.0,
                    p.buffers.len()
                ));
                None
            }
            Some(b) if b.ty == ElemType::I32 => {
                self.error(format!(
                    "{what}: {} holds sparse indices, not values",
                    buffer_text(id.0, b)
                ));
                None
            }
            Some(b) => Some(b),
        }
    }

    /// Whether `id` exists and is an `I32` buffer; reports otherwise.
    fn index_buffer(&mut self, id: BufId, what: &str) -> bool {
        let p = self.p;
        match p.buffers.get(id.0 as usize) {
            None => {
                self.error(format!(
                    "{what}: buffer %{} does not exist ({} buffers)",
                    id.0,
                    p.buffers.len()
                ));
                false
            }
            Some(b) if b.ty != ElemType::I32 => {
                self.error(format!(
                    "{what}: {} must be i32 to hold sparse indices",
                    buffer_text(id.0, b)
                ));
                false
            }
            Some(_) => true,
        }
    }

    /// The static range of `index` (inclusive), `None` if a variable is data-dependent or not in
    /// scope (reported).
    fn index_range(&mut self, index: &Index, what: &str) -> Option<(i128, i128)> {
        let mut lo = index.offset as i128;
        let mut hi = lo;
        let mut known = true;
        for (var, stride) in &index.terms {
            match self.vars.iter().rev().find(|s| s.id == *var) {
                None => {
                    self.error(format!(
                        "{what}: variable v{} is not bound by an enclosing loop",
                        var.0
                    ));
                    known = false;
                }
                Some(VarScope { range: None, .. }) => known = false,
                Some(VarScope {
                    range: Some((vlo, vhi)),
                    ..
                }) => {
                    let (a, b) = (*stride as i128 * vlo, *stride as i128 * vhi);
                    lo += a.min(b);
                    hi += a.max(b);
                }
            }
        }
        known.then_some((lo, hi))
    }

    /// Checks that `index`'s variables are in scope and, if `valid` (the buffer exists and
    /// has the right type), that `buf[index]` is in bounds where its range is static.
    fn access(&mut self, buf: BufId, index: &Index, what: &str, valid: bool) {
        if valid {
            self.access_range(buf, index, 0, 0, what);
        } else {
            self.index_range(index, what);
        }
    }

    /// Checks `buf[index + k]` for every `k` in `extra_lo..=extra_hi`.
    fn access_range(
        &mut self,
        buf: BufId,
        index: &Index,
        extra_lo: i128,
        extra_hi: i128,
        what: &str,
    ) {
        if let Some((lo, hi)) = self.index_range(index, what) {
            self.in_bounds(buf, lo + extra_lo, hi + extra_hi, what);
        }
    }

    fn in_bounds(&mut self, buf: BufId, lo: i128, hi: i128, what: &str) {
        let Some(b) = self.p.buffers.get(buf.0 as usize) else {
            return;
        };
        if lo < 0 || hi >= b.elems as i128 {
            self.error(format!(
                "{what} reaches elements {lo}..={hi} of {}, outside 0..{}",
                buffer_text(buf.0, b),
                b.elems
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    //! The shared fixtures verify; each class of ill-formed program is rejected with its
    //! message.

    use super::*;
    use crate::eval::tests::*;
    use crate::ir::{AccOp, BinOp, ElemType::*, Loop};

    /// Asserts that `p` fails with exactly the `expect` messages, in order.
    fn check(p: &LoopProgram, expect: &[&str]) {
        let got: Vec<String> = match verify(p) {
            Ok(()) => vec![],
            Err(errors) => errors.iter().map(|e| e.to_string()).collect(),
        };
        assert_eq!(got, expect, "\n{}", crate::print::print_program(p));
    }

    /// A kernel `k` over `x: f32[16]` (input 0), `y: f32[16]` (output 0),
    /// `ptr: i32[5]` (input 1) and `t: f32[16]` (temp).
    fn kernel(body: Vec<Stmt>) -> LoopProgram {
        program(
            vec![
                buffer("x", F32, 16, Role::Input(0)),
                buffer("y", F32, 16, Role::Output(0)),
                buffer("ptr", I32, 5, Role::Input(1)),
                buffer("t", F32, 16, Role::Temp),
            ],
            "k",
            "",
            body,
        )
    }

    fn v(var: u32) -> Index {
        ix(0, &[(var, 1)])
    }

    fn copy(var: u32) -> Stmt {
        store(1, v(var), ld(0, v(var)))
    }

    fn gemm(m: u64, n: u64, kk: u64, batch: &[u64], a: MatView, b: MatView, c: MatView) -> Stmt {
        Stmt::Call(LibCall::Gemm {
            m,
            n,
            k: kk,
            batch: batch.to_vec(),
            a,
            b,
            c,
            accumulate: false,
        })
    }

    #[test]
    fn dump() {
        let cases = vec![
            kernel(vec![range(0, 16, vec![store(7, v(0), ld(9, v(0)))])]),
            kernel(vec![range(0, 16, vec![]), copy(0)]),
        ];
        for p in cases {
            println!("{:?}", verify(&p));
        }
    }
}
