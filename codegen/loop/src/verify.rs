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
//!   holds no library call (a call's views do not depend on loop variables); a store may depend
//!   instead on the position of a nested compressed level whose `ptr_index` is a multiple of the
//!   loop's variable alone (a CSR row's entries belong to that row). Loops that run once
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
//! on them (and a compressed level's `crd[var]` read) are not bounds-checked here. Whatever binds
//! sparse data must validate it (monotone `ptr`, coordinates below the axis extent, 2:4
//! positions) before a backend runs; the evaluator checks every access as it goes. Races between
//! different variables and overlapping library-call operands are not detected either.

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
    pub kind: Problem,
    pub message: String,
}

/// What kind of problem a [`VerifyError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// Ids, scopes, types, roles, extents: the program is not well formed.
    Malformed,
    /// Iterations of a parallel loop would write the same place.
    Race,
    /// An access or a call's view reaches outside its buffer.
    Bounds,
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
                kind: Problem::Malformed,
                message: format!("two kernels are named `{}`", k.name),
            });
        }
    }
    for k in &p.kernels {
        errors.extend(kernel_errors(p, k));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Checks one kernel of `p` (everything [`verify`] checks but the program's buffer roles and
/// kernel names): what every backend runs before it compiles a kernel, so a hand-built or
/// rewritten program never reaches code generation unchecked.
pub fn verify_kernel(p: &LoopProgram, k: &Kernel) -> Result<(), Vec<VerifyError>> {
    let errors = kernel_errors(p, k);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn kernel_errors(p: &LoopProgram, k: &Kernel) -> Vec<VerifyError> {
    let mut c = Checker::new(p, k);
    c.block(&k.body);
    c.errors
}

fn check_roles(p: &LoopProgram, errors: &mut Vec<VerifyError>) {
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    // The arrays of each sparse input: one buffer per part, and no plain buffer beside them.
    let mut parts: std::collections::BTreeMap<u32, Vec<crate::ir::Part>> = Default::default();
    for (id, b) in p.buffers.iter().enumerate() {
        match b.role {
            Role::Input(n) => inputs.push((n, id)),
            Role::Output(n) => outputs.push((n, id)),
            Role::Temp => {}
            Role::InputPart { input, part } => {
                let list = parts.entry(input).or_default();
                if list.is_empty() {
                    inputs.push((input, id));
                }
                if list.contains(&part) {
                    errors.push(VerifyError {
                        kernel: String::new(),
                        kind: Problem::Malformed,
                        message: format!("input {input}.{} is bound twice", part.name()),
                    });
                }
                list.push(part);
            }
        }
    }
    for (what, mut list) in [("input", inputs), ("output", outputs)] {
        list.sort();
        for w in list.windows(2) {
            if w[0].0 == w[1].0 {
                errors.push(VerifyError {
                    kernel: String::new(),
                    kind: Problem::Malformed,
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
                kind: Problem::Malformed,
                message: format!(
                    "{what}s are numbered {}, not 0..{}",
                    shown.join(", "),
                    numbers.len()
                ),
            });
        }
    }
}

/// The program input a buffer belongs to, if it is bound by the caller.
fn input_number(r: Role) -> Option<u32> {
    match r {
        Role::Input(n) | Role::InputPart { input: n, .. } => Some(n),
        Role::Output(_) | Role::Temp => None,
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
    /// Positions of compressed levels nested in the loop whose `ptr_index` is a non-zero
    /// multiple of the loop's variable alone: distinct iterations read disjoint position
    /// ranges `ptr[I] .. ptr[I+1]` (`ptr` is monotone), so a store through one does not race.
    owned: Vec<VarId>,
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
        self.problem(Problem::Malformed, message);
    }

    fn problem(&mut self, kind: Problem, message: String) {
        self.errors.push(VerifyError {
            kernel: self.kernel.to_string(),
            kind,
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
                                self.problem(
                                    Problem::Race,
                                    format!(
                                        "parallel loop v{v} updates accumulator a{} declared \
                                         outside it: iterations race",
                                        acc.0
                                    ),
                                );
                            }
                        }
                    }
                }
            }
            Stmt::Store { buf, index, value } => {
                self.expr(value);
                let what = format!("store %{}[{}]", buf.0, index_text(index));
                let b = self.float_buffer(*buf, &what);
                if let Some(n) = b.and_then(|b| input_number(b.role)) {
                    self.error(format!("{what} writes input {n}; inputs are read-only"));
                }
                self.access(*buf, index, &what, b.is_some());
                let races: Vec<String> = (self.parallel.iter())
                    .filter(|par| {
                        index.stride_of(par.var) == 0
                            && par.coord.is_none_or(|c| index.stride_of(c) == 0)
                            && par.owned.iter().all(|&p| index.stride_of(p) == 0)
                    })
                    .map(|par| {
                        format!(
                            "{what} does not depend on parallel loop v{}: iterations race",
                            par.var.0
                        )
                    })
                    .collect();
                for message in races {
                    self.problem(Problem::Race, message);
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
                if let [(pv, stride)] = ptr_index.terms.as_slice() {
                    for par in self.parallel.iter_mut() {
                        if *stride != 0 && (*pv == par.var || par.owned.contains(pv)) {
                            par.owned.push(l.var);
                        }
                    }
                }
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
        if let Some(axis) = l.gpu.filter(|a| *a != GpuAxis::Grid) {
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
                owned: Vec::new(),
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
        if let Some(par) = self.parallel.last() {
            let v = par.var.0;
            let name = match call {
                LibCall::Gemm { .. } => "gemm",
                LibCall::SpMM { .. } => "spmm",
                LibCall::Sparsify { .. } => "sparsify",
                LibCall::Densify { .. } => "densify",
            };
            self.problem(
                Problem::Race,
                format!("{name} inside parallel loop v{v}: every iteration writes the same output"),
            );
        }
        let (m, n, k, batch, a, b, c) = match call {
            LibCall::Gemm {
                m,
                n,
                k,
                batch,
                a,
                b,
                c,
                ..
            } => (m, n, k, batch, a, b, c),
            LibCall::SpMM {
                m,
                n,
                k,
                s,
                transposed,
                side,
                d,
                c,
                ..
            } => {
                self.spmm(*m, *n, *k, s, *transposed, *side, d, c);
                return;
            }
            LibCall::Sparsify { src, out, .. } => {
                let what = format!("sparsify source %{}", src.0);
                if let Some(buf) = self.float_buffer(*src, &what) {
                    let want: u64 = out.shape.iter().product();
                    if buf.elems != want {
                        self.error(format!("{what} has {} elements, not {want}", buf.elems));
                    }
                }
                self.sparse_operand(out, true, "sparsify result");
                return;
            }
            LibCall::Densify { s, dst } => {
                self.sparse_operand(s, false, "densify source");
                let what = format!("densify result %{}", dst.0);
                if let Some(buf) = self.float_buffer(*dst, &what) {
                    let want: u64 = s.shape.iter().product();
                    if buf.elems != want {
                        self.error(format!("{what} has {} elements, not {want}", buf.elems));
                    }
                    if input_number(buf.role).is_some() {
                        self.error(format!("{what} is an input; inputs are read-only"));
                    }
                }
                return;
            }
        };
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
                if let Some(i) = input_number(buf.role) {
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
    }

    /// A sparse operand: layout fits the shape, arrays are buffers of the right types, and
    /// (when `written`) none is an input.
    fn sparse_operand(&mut self, s: &crate::ir::SparseOperand, written: bool, what: &str) {
        use crate::ir::SparseLayout as L;
        let rank = s.shape.len();
        let ok = match s.layout {
            L::Coo => rank >= 1,
            L::Csr | L::Csc => rank == 2,
            L::Bsr { br, bc } => {
                rank == 2
                    && br > 0
                    && bc > 0
                    && s.shape[0].is_multiple_of(br as u64)
                    && s.shape[1].is_multiple_of(bc as u64)
            }
            L::TwoFour { axis } => axis < rank && s.shape[axis].is_multiple_of(4),
        };
        if !ok {
            self.error(format!(
                "{what} has layout {} that does not fit shape {:?}",
                crate::print::layout_text(s.layout),
                s.shape
            ));
        }
        if s.ptr.is_some() == matches!(s.layout, L::TwoFour { .. }) {
            self.error(format!("{what}: only 2:4 has no ptr array"));
        }
        for (b, part) in s.ptr.iter().map(|&p| (p, "ptr")).chain([(s.idx, "idx")]) {
            self.index_buffer(b, &format!("{what} {part} %{}", b.0));
        }
        let vwhat = format!("{what} values %{}", s.values.0);
        self.float_buffer(s.values, &vwhat);
        if written {
            for b in s.buffers() {
                if let Some(i) = self
                    .p
                    .buffers
                    .get(b.0 as usize)
                    .and_then(|b| input_number(b.role))
                {
                    self.error(format!("{what} writes input {i}; inputs are read-only"));
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn spmm(
        &mut self,
        m: u64,
        n: u64,
        k: u64,
        s: &crate::ir::SparseOperand,
        transposed: bool,
        side: crate::ir::Side,
        d: &MatView,
        c: &MatView,
    ) {
        self.sparse_operand(s, false, "spmm sparse operand");
        if s.shape.len() == 2 {
            let (r, cc) = if transposed {
                (s.shape[1], s.shape[0])
            } else {
                (s.shape[0], s.shape[1])
            };
            let want = match side {
                crate::ir::Side::Left => (m, k),
                crate::ir::Side::Right => (k, n),
            };
            if (r, cc) != want {
                self.error(format!(
                    "spmm sparse operand is {r}×{cc} (as used), not {}×{}",
                    want.0, want.1
                ));
            }
        }
        let (dr, dc) = match side {
            crate::ir::Side::Left => (k, n),
            crate::ir::Side::Right => (m, k),
        };
        for (view, rows, cols, name) in [(d, dr, dc, "d"), (c, m, n, "c")] {
            let what = format!("spmm operand {name} = {}", view_text(view));
            let Some(buf) = self.float_buffer(view.buf, &what) else {
                continue;
            };
            if name == "c" {
                if let Some(i) = input_number(buf.role) {
                    self.error(format!("{what} writes input {i}; inputs are read-only"));
                }
            }
            if buf.ty != buf.ty.compute() && buf.ty != ElemType::F32 {
                self.error(format!("{what} is {}, not f32 or f64", buf.ty));
            }
            if !view.batch_strides.is_empty() {
                self.error(format!("{what} has batch strides"));
            } else if m > 0 && n > 0 && k > 0 {
                self.view_bounds(view, &[], rows, cols, &what);
            }
        }
        if let (Some(db), Some(cb)) = (
            self.p.buffers.get(d.buf.0 as usize),
            self.p.buffers.get(c.buf.0 as usize),
        ) {
            if db.ty != cb.ty {
                self.error(format!(
                    "spmm operands d (%{}) and c (%{}) differ in type: {} and {}",
                    d.buf.0, c.buf.0, db.ty, cb.ty
                ));
            }
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
            Expr::Select(c, x, y) => {
                self.expr(c);
                self.expr(x);
                self.expr(y);
            }
            Expr::Iota(index) => {
                let what = format!("iota[{}]", index_text(index));
                self.index_range(index, &what);
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
            self.problem(
                Problem::Bounds,
                format!(
                    "{what} reaches elements {lo}..={hi} of {}, outside 0..{}",
                    buffer_text(buf.0, b),
                    b.elems
                ),
            );
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
    fn fixtures_verify() {
        for p in fixtures() {
            check(&p, &[]);
        }
        // A reversed view (negative stride) and a broadcast (zero stride) stay in bounds.
        let reversed = store(1, ix(15, &[(0, -1)]), ld(0, ix(3, &[(1, 0), (0, 0)])));
        check(
            &kernel(vec![range(0, 16, vec![range(1, 4, vec![reversed])])]),
            &[],
        );
    }

    #[test]
    fn unknown_buffers() {
        check(
            &kernel(vec![range(0, 16, vec![store(7, v(0), ld(9, v(1)))])]),
            &[
                "kernel k: load %9[v1]: buffer %9 does not exist (4 buffers)",
                "kernel k: load %9[v1]: variable v1 is not bound by an enclosing loop",
                "kernel k: store %7[v0]: buffer %7 does not exist (4 buffers)",
            ],
        );
    }

    #[test]
    fn variables_must_be_in_scope() {
        check(
            &kernel(vec![range(0, 16, vec![]), copy(0)]),
            &[
                "kernel k: load %0[v0]: variable v0 is not bound by an enclosing loop",
                "kernel k: store %1[v0]: variable v0 is not bound by an enclosing loop",
            ],
        );
        // A compressed level's coordinate is bound only inside its loop, and its ptr index only
        // sees enclosing variables.
        let level = Stmt::Loop(loop_(
            1,
            Iter::Compressed {
                ptr: BufId(2),
                ptr_index: v(1),
                crd: BufId(2),
                coord: VarId(2),
            },
            vec![],
        ));
        check(
            &kernel(vec![range(0, 4, vec![level, store(1, v(2), k(0.0))])]),
            &[
                "kernel k: compressed level of loop v1 reads ptr %2: variable v1 is not bound by an enclosing loop",
                "kernel k: store %1[v2]: variable v2 is not bound by an enclosing loop",
            ],
        );
    }

    #[test]
    fn accumulators_must_be_declared_in_an_enclosing_block() {
        check(
            &kernel(vec![update(0, AccOp::Add, k(1.0))]),
            &["kernel k: accumulator a0 is updated but not declared in an enclosing block"],
        );
        // a0 lives until the end of the loop body that declares it.
        check(
            &kernel(vec![
                range(0, 16, vec![let_(0, F32, k(0.0)), store(1, v(0), acc(0))]),
                store(1, ix(0, &[]), acc(0)),
            ]),
            &["kernel k: accumulator a0 is read but not declared in an enclosing block"],
        );
        // A Let's initial value cannot read the accumulator it declares.
        check(
            &kernel(vec![let_(0, F32, bin(BinOp::Add, acc(0), k(1.0)))]),
            &["kernel k: accumulator a0 is read but not declared in an enclosing block"],
        );
    }

    #[test]
    fn ids_are_defined_once_per_kernel() {
        check(
            &kernel(vec![
                range(0, 16, vec![let_(0, F32, k(0.0))]),
                range(0, 16, vec![let_(0, F32, k(0.0)), copy(0)]),
            ]),
            &[
                "kernel k: variable v0 is defined twice",
                "kernel k: accumulator a0 is declared twice",
            ],
        );
        let level = Stmt::Loop(loop_(
            1,
            Iter::TwoFour {
                groups: 2,
                meta: BufId(2),
                meta_index: ix(0, &[]),
                coord: VarId(1),
            },
            vec![],
        ));
        check(
            &kernel(vec![level]),
            &["kernel k: variable v1 is defined twice"],
        );
        // The same ids in two kernels are fine.
        let mut p = kernel(vec![range(0, 16, vec![let_(0, F32, k(0.0)), copy(0)])]);
        let mut second = p.kernels[0].clone();
        second.name = "k2".into();
        p.kernels.push(second);
        check(&p, &[]);
    }

    #[test]
    fn accumulator_types_are_f32_or_f64() {
        check(
            &kernel(vec![let_(0, F16, k(0.0)), let_(1, I32, k(0.0))]),
            &[
                "kernel k: accumulator a0 has type f16; accumulators are f32 or f64",
                "kernel k: accumulator a1 has type i32; accumulators are f32 or f64",
            ],
        );
        check(
            &kernel(vec![store(1, ix(0, &[]), cast(I32, k(1.5)))]),
            &["kernel k: `cast<i32>(1.5)` casts to i32; casts are to float types"],
        );
    }

    #[test]
    fn inputs_are_read_only() {
        check(
            &kernel(vec![range(0, 16, vec![store(0, v(0), k(1.0))])]),
            &["kernel k: store %0[v0] writes input 0; inputs are read-only"],
        );
        check(
            &kernel(vec![gemm(
                4,
                4,
                4,
                &[],
                view(1, 0, &[], 4, 1),
                view(1, 0, &[], 4, 1),
                view(0, 0, &[], 4, 1),
            )]),
            &["kernel k: gemm operand c = %0[4*r + 1*c] writes input 0; inputs are read-only"],
        );
    }

    #[test]
    fn i32_buffers_hold_only_sparse_indices() {
        check(
            &kernel(vec![range(0, 5, vec![store(1, v(0), ld(2, v(0)))])]),
            &["kernel k: load %2[v0]: %2 (ptr: i32[5]) holds sparse indices, not values"],
        );
        check(
            &kernel(vec![range(0, 5, vec![store(2, v(0), k(0.0))])]),
            &["kernel k: store %2[v0]: %2 (ptr: i32[5]) holds sparse indices, not values"],
        );
        let level = Stmt::Loop(loop_(
            1,
            Iter::Compressed {
                ptr: BufId(0),
                ptr_index: ix(0, &[]),
                crd: BufId(3),
                coord: VarId(2),
            },
            vec![],
        ));
        check(
            &kernel(vec![level]),
            &[
                "kernel k: compressed level of loop v1 reads ptr %0: %0 (x: f32[16]) must be i32 to hold sparse indices",
                "kernel k: compressed level of loop v1 reads crd %3: %3 (t: f32[16]) must be i32 to hold sparse indices",
            ],
        );
        check(
            &kernel(vec![gemm(1, 1, 1, &[], view(2, 0, &[], 1, 1), view(0, 0, &[], 1, 1), view(1, 0, &[], 1, 1))]),
            &["kernel k: gemm operand a = %2[1*r + 1*c]: %2 (ptr: i32[5]) holds sparse indices, not values"],
        );
    }

    #[test]
    fn extents_and_vector_widths() {
        check(
            &kernel(vec![
                range(0, 0, vec![copy(0)]),
                vector(range(1, 16, vec![copy(1)]), 0),
            ]),
            &[
                "kernel k: loop v0 has extent 0",
                "kernel k: loop v1 has vector width 0",
            ],
        );
        let level = Stmt::Loop(loop_(
            1,
            Iter::TwoFour {
                groups: 0,
                meta: BufId(2),
                meta_index: ix(0, &[]),
                coord: VarId(2),
            },
            vec![],
        ));
        check(
            &kernel(vec![level]),
            &["kernel k: 2:4 loop v1 has 0 groups"],
        );
        // Only innermost loops are vectorised.
        check(
            &kernel(vec![vector(
                range(
                    0,
                    4,
                    vec![range(
                        1,
                        4,
                        vec![store(1, ix(0, &[(0, 4), (1, 1)]), k(0.0))],
                    )],
                ),
                4,
            )]),
            &["kernel k: loop v0 is vectorised (4 lanes) but is not innermost"],
        );
        let call = gemm(
            1,
            1,
            1,
            &[],
            view(0, 0, &[], 1, 1),
            view(0, 0, &[], 1, 1),
            view(1, 0, &[], 1, 1),
        );
        check(
            &kernel(vec![vector(range(0, 4, vec![call]), 4)]),
            &["kernel k: loop v0 is vectorised (4 lanes) but is not innermost"],
        );
    }

    #[test]
    fn parallel_loops_do_not_race() {
        // Updating an accumulator declared outside the loop.
        check(
            &kernel(vec![
                let_(0, F32, k(0.0)),
                par(range(0, 16, vec![update(0, AccOp::Add, ld(0, v(0)))])),
                store(1, ix(0, &[]), acc(0)),
            ]),
            &["kernel k: parallel loop v0 updates accumulator a0 declared outside it: iterations race"],
        );
        // An accumulator declared between two parallel loops races in the inner one.
        check(
            &kernel(vec![par(range(
                0,
                4,
                vec![
                    let_(0, F32, k(0.0)),
                    par(range(1, 4, vec![update(0, AccOp::Add, ld(0, ix(0, &[(0, 4), (1, 1)])))])),
                    store(1, v(0), acc(0)),
                ],
            ))]),
            &["kernel k: parallel loop v1 updates accumulator a0 declared outside it: iterations race"],
        );
        // Every iteration storing to the same element.
        check(
            &kernel(vec![par(range(
                0,
                4,
                vec![range(
                    1,
                    4,
                    vec![store(1, v(1), ld(0, ix(0, &[(0, 4), (1, 1)])))],
                )],
            ))]),
            &["kernel k: store %1[v1] does not depend on parallel loop v0: iterations race"],
        );
        check(
            &kernel(vec![par(range(
                0,
                2,
                vec![gemm(
                    1,
                    1,
                    1,
                    &[],
                    view(0, 0, &[], 1, 1),
                    view(0, 0, &[], 1, 1),
                    view(1, 0, &[], 1, 1),
                )],
            ))]),
            &["kernel k: gemm inside parallel loop v0: every iteration writes the same output"],
        );
        // A parallel loop that runs once cannot race; one over a sparse level may store through
        // its coordinate.
        check(
            &kernel(vec![
                let_(0, F32, k(0.0)),
                par(range(
                    0,
                    1,
                    vec![update(0, AccOp::Add, k(1.0)), store(1, ix(0, &[]), acc(0))],
                )),
            ]),
            &[],
        );
        let mut level = loop_(
            1,
            Iter::Compressed {
                ptr: BufId(2),
                ptr_index: v(0),
                crd: BufId(2),
                coord: VarId(2),
            },
            vec![store(1, v(2), k(1.0))],
        );
        level.parallel = true;
        check(&kernel(vec![range(0, 4, vec![Stmt::Loop(level)])]), &[]);
        // A parallel row loop may store through the positions of its rows (disjoint ranges of
        // a monotone `ptr`), but not through those of a level indexed by something else.
        let rows = |ptr_index: Index| {
            par(range(
                0,
                4,
                vec![Stmt::Loop(loop_(
                    1,
                    Iter::Compressed {
                        ptr: BufId(2),
                        ptr_index,
                        crd: BufId(2),
                        coord: VarId(2),
                    },
                    vec![store(1, v(1), k(1.0))],
                ))],
            ))
        };
        check(&kernel(vec![rows(v(0))]), &[]);
        check(
            &kernel(vec![rows(ix(0, &[]))]),
            &["kernel k: store %1[v1] does not depend on parallel loop v0: iterations race"],
        );
    }

    #[test]
    fn gpu_axes_are_mapped_once_per_nest() {
        let mut inner = loop_(
            1,
            Iter::Range { extent: 4 },
            vec![store(1, ix(0, &[(0, 4), (1, 1)]), k(0.0))],
        );
        inner.gpu = Some(GpuAxis::ThreadX);
        let mut outer = loop_(
            0,
            Iter::Range { extent: 4 },
            vec![Stmt::Loop(inner.clone())],
        );
        outer.gpu = Some(GpuAxis::ThreadX);
        check(
            &kernel(vec![Stmt::Loop(outer.clone())]),
            &["kernel k: loops v0 and v1 are both mapped to gpu thread.x"],
        );
        outer.gpu = Some(GpuAxis::BlockX);
        check(&kernel(vec![Stmt::Loop(outer)]), &[]);
    }

    #[test]
    fn dense_accesses_stay_in_bounds() {
        check(
            &kernel(vec![range(0, 4, vec![range(1, 5, vec![store(1, ix(0, &[(0, 4), (1, 1)]), ld(0, ix(-1, &[(0, 4), (1, 1)])))])])]),
            &[
                "kernel k: load %0[4*v0 + v1 - 1] reaches elements -1..=15 of %0 (x: f32[16]), outside 0..16",
                "kernel k: store %1[4*v0 + v1] reaches elements 0..=16 of %1 (y: f32[16]), outside 0..16",
            ],
        );
        check(
            &kernel(vec![range(0, 16, vec![store(1, ix(14, &[(0, -1)]), k(0.0))])]),
            &["kernel k: store %1[-v0 + 14] reaches elements -1..=14 of %1 (y: f32[16]), outside 0..16"],
        );
        // Strides and offsets near i64's limits do not overflow.
        check(
            &kernel(vec![range(0, 16, vec![store(1, ix(i64::MAX, &[(0, i64::MAX)]), k(0.0))])]),
            &["kernel k: store %1[9223372036854775807*v0 + 9223372036854775807] reaches elements 9223372036854775807..=147573952589676412912 of %1 (y: f32[16]), outside 0..16"],
        );
    }

    #[test]
    fn sparse_level_reads_stay_in_bounds() {
        // ptr has 5 elements: rows 0..4 read ptr[v0] and ptr[v0 + 1].
        let compressed = |rows| {
            range(
                0,
                rows,
                vec![Stmt::Loop(loop_(
                    1,
                    Iter::Compressed {
                        ptr: BufId(2),
                        ptr_index: v(0),
                        crd: BufId(2),
                        coord: VarId(2),
                    },
                    // Accesses through sparse positions and coordinates are not checked.
                    vec![store(1, ix(0, &[(2, 1000), (1, -7)]), k(1.0))],
                ))],
            )
        };
        check(&kernel(vec![compressed(4)]), &[]);
        check(
            &kernel(vec![compressed(5)]),
            &["kernel k: compressed level of loop v1 reads ptr %2 reaches elements 0..=5 of %2 (ptr: i32[5]), outside 0..5"],
        );
        let singleton = |offset| {
            range(
                0,
                4,
                vec![Stmt::Loop(loop_(
                    1,
                    Iter::Singleton {
                        crd: BufId(2),
                        pos_index: ix(offset, &[(0, 1)]),
                    },
                    vec![],
                ))],
            )
        };
        check(&kernel(vec![singleton(1)]), &[]);
        check(
            &kernel(vec![singleton(2)]),
            &["kernel k: singleton level of loop v1 reads crd %2 reaches elements 2..=5 of %2 (ptr: i32[5]), outside 0..5"],
        );
        // 2:4 with 20 groups keeps 40 values: 3 metadata words a row. Its variable runs over
        // 0..40 and its coordinate over 0..80, both checked statically.
        let two_four = |rows, x_stride| {
            range(
                0,
                rows,
                vec![Stmt::Loop(loop_(
                    1,
                    Iter::TwoFour {
                        groups: 20,
                        meta: BufId(2),
                        meta_index: ix(0, &[(0, 2)]),
                        coord: VarId(2),
                    },
                    vec![store(1, ix(0, &[(2, x_stride)]), ld(0, ix(0, &[(1, 0)])))],
                ))],
            )
        };
        let mut p = kernel(vec![two_four(2, 0)]);
        check(&p, &[]);
        p.kernels[0].body = vec![two_four(3, 0)];
        check(
            &p,
            &["kernel k: 2:4 level of loop v1 reads meta %2 reaches elements 0..=6 of %2 (ptr: i32[5]), outside 0..5"],
        );
        p.buffers[1].elems = 80;
        p.kernels[0].body = vec![two_four(2, 1)];
        check(&p, &[]);
        p.buffers[1].elems = 79;
        check(
            &p,
            &["kernel k: store %1[v2] reaches elements 0..=79 of %1 (y: f32[79]), outside 0..79"],
        );
    }

    #[test]
    fn gemm_views_stay_in_bounds() {
        // Two 2×2 batches of a (row-major) times a shared b into c, all in 16-element buffers;
        // a third batch still fits in a but not in c.
        let a = view(0, 0, &[4], 2, 1);
        let shared = view(3, 12, &[0], 1, 2);
        let c = view(1, 8, &[4], 2, 1);
        check(
            &kernel(vec![gemm(
                2,
                2,
                2,
                &[2],
                a.clone(),
                shared.clone(),
                c.clone(),
            )]),
            &[],
        );
        check(
            &kernel(vec![gemm(2, 2, 2, &[3], a.clone(), shared.clone(), c.clone())]),
            &["kernel k: gemm operand c = %1[4*b0 + 2*r + 1*c + 8] reaches elements 8..=19 of %1 (y: f32[16]), outside 0..16"],
        );
        check(
            &kernel(vec![gemm(
                0,
                2,
                2,
                &[0],
                a.clone(),
                shared.clone(),
                c.clone(),
            )]),
            &[
                "kernel k: gemm has m = 0",
                "kernel k: gemm has a batch extent of 0",
            ],
        );
        check(
            &kernel(vec![gemm(2, 2, 2, &[2], view(0, 0, &[], 2, 1), shared, c)]),
            &["kernel k: gemm operand a = %0[2*r + 1*c] has 0 batch strides for 1 batch axes"],
        );
        let reversed = view(0, 15, &[], -4, -1);
        check(
            &kernel(vec![gemm(
                4,
                4,
                4,
                &[],
                reversed.clone(),
                reversed,
                view(1, 0, &[], 4, 1),
            )]),
            &[],
        );
    }

    #[test]
    fn roles_and_kernel_names_are_distinct() {
        let mut p = kernel(vec![]);
        p.buffers[2].role = Role::Input(0);
        p.buffers[3].role = Role::Output(2);
        p.kernels.push(p.kernels[0].clone());
        check(
            &p,
            &[
                "program: input 0 is both %0 and %2",
                "program: outputs are numbered 0, 2, not 0..2",
                "program: two kernels are named `k`",
            ],
        );
    }

    #[test]
    fn errors_display_their_kernel() {
        let e = VerifyError {
            kernel: "k0".into(),
            kind: Problem::Malformed,
            message: "m".into(),
        };
        assert_eq!(e.to_string(), "kernel k0: m");
        let e = VerifyError {
            kernel: String::new(),
            kind: Problem::Malformed,
            message: "m".into(),
        };
        assert_eq!(e.to_string(), "program: m");
    }

    #[test]
    fn every_problem_is_reported() {
        let body = vec![
            let_(0, F16, k(0.0)),
            range(0, 0, vec![store(0, v(0), acc(5))]),
            Stmt::Loop(Loop {
                vector: 0,
                ..loop_(0, Iter::Range { extent: 20 }, vec![store(1, v(0), k(0.0))])
            }),
        ];
        let errors = verify(&kernel(body)).unwrap_err();
        assert_eq!(errors.len(), 7, "{errors:#?}");
    }
}
