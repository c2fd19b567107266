//! Loop IR types.
//!
//! A [`LoopProgram`] is a list of [`Buffer`]s and a list of [`Kernel`]s run in order. A kernel
//! body is a tree of [`Stmt`]s: loops, scalar accumulators, strided stores and library calls.
//! Expressions ([`Expr`]) are pure scalar trees over loads, constants and accumulators.
//!
//! Values: loads of f16/bf16 widen to f32, f32 stays f32, f64 stays f64 (the *compute type* of an
//! expression is [`ElemType::compute`]); stores narrow to the buffer's type with round-to-nearest-
//! even. Accumulators have an explicit compute type, so the accumulator dtype of a reduction is
//! written in the IR. Indices are affine in loop variables with element strides, so a permuted
//! or broadcast view is only a different set of strides.

use std::fmt;
use tdsl_sparse::DType;

/// Element types of buffers: a value [`DType`], or `I32` for sparse indices and offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElemType {
    F32,
    F64,
    F16,
    BF16,
    I32,
}

impl ElemType {
    /// The value dtype of a float buffer type (`None` for `i32`): the facts of element types
    /// (names, sizes, the compute rule) live once, on `DType`.
    pub fn dtype(self) -> Option<DType> {
        match self {
            ElemType::F32 => Some(DType::F32),
            ElemType::F64 => Some(DType::F64),
            ElemType::F16 => Some(DType::F16),
            ElemType::BF16 => Some(DType::BF16),
            ElemType::I32 => None,
        }
    }

    pub fn name(self) -> &'static str {
        self.dtype().map_or("i32", DType::name)
    }

    pub fn size_bytes(self) -> u64 {
        self.dtype().map_or(4, DType::size_bytes)
    }

    /// The type arithmetic on loaded values runs in ([`DType::compute`]; f32 for indices).
    pub fn compute(self) -> ElemType {
        self.dtype().map_or(ElemType::F32, |d| d.compute().into())
    }
}

impl From<DType> for ElemType {
    fn from(d: DType) -> ElemType {
        match d {
            DType::F32 => ElemType::F32,
            DType::F64 => ElemType::F64,
            DType::F16 => ElemType::F16,
            DType::BF16 => ElemType::BF16,
        }
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A buffer id: index into [`LoopProgram::buffers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(pub u32);

/// A loop variable id, unique within a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub u32);

/// A scalar accumulator id, unique within a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccId(pub u32);

/// What a buffer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Bound by the caller: the program's input number `n`. Never written.
    Input(u32),
    /// Returned to the caller: the program's output number `n`.
    Output(u32),
    /// Allocated by the runtime for the duration of the program.
    Temp,
    /// One array of the program's sparse input number `input`. Read-only like an input; its
    /// `elems` is a capacity: the runtime binds the stored entries only (spec/formats.md).
    InputPart { input: u32, part: Part },
}

impl Role {
    /// Bound by the caller (never written).
    pub fn is_input(self) -> bool {
        matches!(self, Role::Input(_) | Role::InputPart { .. })
    }
}

/// Which array of a sparse tensor a buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Part {
    /// Offsets (`indptr`; `[0, nnz]` for COO).
    Ptr,
    /// Indices, coordinates, or 2:4 metadata words.
    Idx,
    /// Stored values.
    Values,
}

impl Part {
    pub fn name(self) -> &'static str {
        match self {
            Part::Ptr => "ptr",
            Part::Idx => "idx",
            Part::Values => "values",
        }
    }
}

/// Which entries pruning keeps (`tdsl_sparse::prune::Select`).
pub use tdsl_sparse::prune::Select;
/// How a sparse tensor is stored (`tdsl_sparse::Layout`; arrays in spec/formats.md).
pub use tdsl_sparse::Layout as SparseLayout;

/// A sparse tensor in buffers: its layout, logical shape and arrays. `ptr` is `None` for 2:4,
/// whose `idx` holds the metadata words. `idx` and `ptr` are `I32` buffers; `values` has the
/// tensor's element type. Buffer lengths are capacities: `ptr`'s last offset says how many
/// entries are stored.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SparseOperand {
    pub layout: SparseLayout,
    pub shape: Vec<u64>,
    pub ptr: Option<BufId>,
    pub idx: BufId,
    pub values: BufId,
}

impl SparseOperand {
    /// The buffers, in the order ptr, idx, values.
    pub fn buffers(&self) -> Vec<BufId> {
        self.ptr
            .iter()
            .copied()
            .chain([self.idx, self.values])
            .collect()
    }
}

/// Which side of a sparse-dense product the sparse operand is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// `c[m, n] = S[m, k] · d[k, n]`
    Left,
    /// `c[m, n] = d[m, k] · S[k, n]`
    Right,
}

/// A flat, typed array of `elems` elements.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Buffer {
    pub name: String,
    pub ty: ElemType,
    pub elems: u64,
    pub role: Role,
}

/// An affine element index: `offset + Σ stride·var`. Strides are in elements and may be zero
/// (broadcast) or negative (a reversed view); the verifier proves every access whose variables
/// have static ranges in bounds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Index {
    pub offset: i64,
    pub terms: Vec<(VarId, i64)>,
}

impl Index {
    pub fn constant(offset: i64) -> Index {
        Index {
            offset,
            terms: Vec::new(),
        }
    }

    /// The stride of `var` in this index (0 if absent).
    pub fn stride_of(&self, var: VarId) -> i64 {
        self.terms
            .iter()
            .filter(|(v, _)| *v == var)
            .map(|(_, s)| *s)
            .sum()
    }
}

/// Elementwise functions of one argument: the workspace's one vocabulary (`tdsl_sparse::ops`);
/// their f64 meaning here is [`crate::scalar::unary`] (spec/loop-ir.md §2).
pub use tdsl_sparse::UnOp;

/// Elementwise functions of two arguments (`tdsl_sparse::ops`); their f64 meaning here is
/// [`crate::scalar::binary`].
pub use tdsl_sparse::BinOp;

/// A pure scalar expression. Its compute type is decided bottom-up (spec/loop-ir.md §2): a load
/// has its buffer's compute type, an accumulator its `Let` type, a cast its target's compute
/// type, an operation the wider of its operands'; constant-only subtrees take the type of the
/// place they are used. The planner inserts explicit casts so that operands agree.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A constant, rounded to the expression's compute type.
    Const(f64),
    /// `buf[index]`, widened to its compute type.
    Load {
        buf: BufId,
        index: Index,
    },
    /// The current value of an accumulator.
    Acc(AccId),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// Rounds to `ty` and widens back to `ty.compute()`: an f32 → f16 cast inside a fused chain
    /// keeps f16's rounding; a cast between f32 and f64 changes the compute type.
    Cast(ElemType, Box<Expr>),
    /// `if cond != 0 { a } else { b }` (a NaN condition counts as true, as numpy's `where`);
    /// its compute type is that of `a` and `b`.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    /// The value of an affine index itself, as a number (the position along an axis): rounded
    /// to the compute type of the place it is used.
    Iota(Index),
}

impl Expr {
    /// The direct sub-expressions, in evaluation order.
    pub fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::Const(_) | Expr::Load { .. } | Expr::Acc(_) | Expr::Iota(_) => Vec::new(),
            Expr::Unary(_, x) | Expr::Cast(_, x) => vec![x],
            Expr::Binary(_, a, b) => vec![a, b],
            Expr::Select(c, a, b) => vec![c, a, b],
        }
    }

    /// Calls `f` on this expression and every sub-expression, parents first.
    pub fn visit(&self, f: &mut impl FnMut(&Expr)) {
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            f(e);
            stack.extend(e.children().into_iter().rev());
        }
    }

    /// A copy with every direct sub-expression replaced by `f(child)`.
    pub fn map_children(&self, mut f: impl FnMut(&Expr) -> Expr) -> Expr {
        let b = |x: &Expr, f: &mut dyn FnMut(&Expr) -> Expr| Box::new(f(x));
        match self {
            Expr::Const(_) | Expr::Load { .. } | Expr::Acc(_) | Expr::Iota(_) => self.clone(),
            Expr::Unary(op, x) => Expr::Unary(*op, b(x, &mut f)),
            Expr::Cast(t, x) => Expr::Cast(*t, b(x, &mut f)),
            Expr::Binary(op, x, y) => {
                let x = b(x, &mut f);
                Expr::Binary(*op, x, b(y, &mut f))
            }
            Expr::Select(c, x, y) => {
                let c = b(c, &mut f);
                let x = b(x, &mut f);
                Expr::Select(c, x, b(y, &mut f))
            }
        }
    }

    /// A copy with every index (of loads and of `Iota`) replaced by `f(index)`.
    pub fn map_indices(&self, f: &impl Fn(&Index) -> Index) -> Expr {
        match self {
            Expr::Load { buf, index } => Expr::Load {
                buf: *buf,
                index: f(index),
            },
            Expr::Iota(index) => Expr::Iota(f(index)),
            other => other.map_children(|x| x.map_indices(f)),
        }
    }

    /// Every index the expression reads: those of its loads and its `Iota`s.
    pub fn indices(&self) -> Vec<&Index> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            match e {
                Expr::Load { index, .. } | Expr::Iota(index) => out.push(index),
                _ => stack.extend(e.children().into_iter().rev()),
            }
        }
        out
    }
}

/// How an accumulator combines a new value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccOp {
    /// Overwrite.
    Set,
    Add,
    Mul,
    /// NaN-propagating maximum.
    Max,
    /// NaN-propagating minimum.
    Min,
}

/// How a loop's variable runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Iter {
    /// `var` takes 0, 1, …, extent−1.
    Range { extent: u64 },
    /// A compressed sparse level (CSR/CSC rows, BSR block rows): `var` runs over positions
    /// `ptr[ptr_index] .. ptr[ptr_index + 1]`, and `coord` is bound to `crd[var]` each iteration.
    /// `ptr` and `crd` are `I32` buffers.
    Compressed {
        ptr: BufId,
        ptr_index: Index,
        crd: BufId,
        coord: VarId,
    },
    /// A singleton level (COO's trailing coordinates): `var` is bound to `crd[pos_index]` and the
    /// body runs once.
    Singleton { crd: BufId, pos_index: Index },
    /// 2:4 groups along an axis of extent `4·groups`: `var` runs over the `2·groups` kept values
    /// and `coord` is bound to `4·(var / 2) + meta(var)`, where `meta` is the 2-bit position read
    /// from `meta`: 2 bits per kept value, 16 per i32 word, value `var` at bits `2·(var % 16)`
    /// of `meta[meta_index + var / 16]` (spec/loop-ir.md §3).
    TwoFour {
        groups: u64,
        meta: BufId,
        meta_index: Index,
        coord: VarId,
    },
}

impl Iter {
    /// This iteration with its buffers replaced by `buf(buffer)` and its positions' indices by
    /// `index(index)`.
    pub fn map_parts(
        &self,
        buf: &impl Fn(BufId) -> BufId,
        index: &impl Fn(&Index) -> Index,
    ) -> Iter {
        match self {
            Iter::Range { extent } => Iter::Range { extent: *extent },
            Iter::Compressed {
                ptr,
                ptr_index,
                crd,
                coord,
            } => Iter::Compressed {
                ptr: buf(*ptr),
                ptr_index: index(ptr_index),
                crd: buf(*crd),
                coord: *coord,
            },
            Iter::Singleton { crd, pos_index } => Iter::Singleton {
                crd: buf(*crd),
                pos_index: index(pos_index),
            },
            Iter::TwoFour {
                groups,
                meta,
                meta_index,
                coord,
            } => Iter::TwoFour {
                groups: *groups,
                meta: buf(*meta),
                meta_index: index(meta_index),
                coord: *coord,
            },
        }
    }
}

/// Where a loop runs on a GPU (ignored by CPU backends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuAxis {
    /// One thread of the whole grid per iteration: nested `Grid` loops form one flattened index
    /// space, which the backend walks with a grid-stride loop. The loop's iterations must write
    /// disjoint elements (a mapping pass proves it, or the loop was built that way).
    Grid,
    BlockX,
    BlockY,
    BlockZ,
    ThreadX,
    ThreadY,
    ThreadZ,
    /// One warp per iteration.
    Warp,
    /// One lane of a warp per iteration.
    Lane,
}

/// A loop.
#[derive(Debug, Clone, PartialEq)]
pub struct Loop {
    pub var: VarId,
    pub iter: Iter,
    /// Iterations are independent: a CPU backend may split them across threads.
    pub parallel: bool,
    /// The innermost loop is unit-stride for its stores and most loads: a backend may run it
    /// `vector` lanes at a time (1 = scalar).
    pub vector: u32,
    pub gpu: Option<GpuAxis>,
    pub body: Vec<Stmt>,
}

/// A view of a buffer as a (batched) matrix for library calls: element `[b…, r, c]` is at
/// `offset + Σ batch_strides·b + r·row_stride + c·col_stride`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MatView {
    pub buf: BufId,
    pub offset: i64,
    pub row_stride: i64,
    pub col_stride: i64,
    /// One stride per batch axis of the call (0 for a broadcast operand).
    pub batch_strides: Vec<i64>,
}

/// A call to a tuned library kernel.
#[derive(Debug, Clone, PartialEq)]
pub enum LibCall {
    /// `c[b…] = a[b…] · b[b…]` (or `+=` with `accumulate`), `a` is m×k, `b` is k×n, `c` is m×n,
    /// over the batch extents `batch`. `a`, `b` and `c` share one element type. Accumulates in
    /// f32 for f32/f16/bf16 operands.
    Gemm {
        m: u64,
        n: u64,
        k: u64,
        batch: Vec<u64>,
        a: MatView,
        b: MatView,
        c: MatView,
        accumulate: bool,
    },
    /// A sparse-dense matrix product, `c = S·d` (`Side::Left`) or `c = d·S` (`Side::Right`)
    /// (or `+=` with `accumulate`), where `S` is the rank-2 sparse operand `s`, transposed when
    /// `transposed` (no data moves). `c` is m×n; `S` is m×k (left) or k×n (right). `d` and `c`
    /// have the compute type (f32, or f64); values of any float type widen on load. Views have
    /// no batch axes.
    SpMM {
        m: u64,
        n: u64,
        k: u64,
        s: SparseOperand,
        transposed: bool,
        side: Side,
        d: MatView,
        c: MatView,
        accumulate: bool,
    },
    /// `out = sparsify(src)`: prunes the dense, row-major `src` (of `out`'s shape and value
    /// type) into `out`'s buffers, keeping the entries `select` says (tdsl_sparse::prune).
    Sparsify {
        src: BufId,
        out: SparseOperand,
        select: Select,
    },
    /// `dst = dense(s)`, row-major over `s`'s shape, in `s`'s value type.
    Densify { s: SparseOperand, dst: BufId },
}

impl LibCall {
    /// Buffers the call reads.
    pub fn reads(&self) -> Vec<BufId> {
        match self {
            LibCall::Gemm {
                a,
                b,
                c,
                accumulate,
                ..
            } => {
                let mut v = vec![a.buf, b.buf];
                if *accumulate {
                    v.push(c.buf);
                }
                v
            }
            LibCall::SpMM {
                s,
                d,
                c,
                accumulate,
                ..
            } => {
                let mut v = s.buffers();
                v.push(d.buf);
                if *accumulate {
                    v.push(c.buf);
                }
                v
            }
            LibCall::Sparsify { src, .. } => vec![*src],
            LibCall::Densify { s, .. } => s.buffers(),
        }
    }

    /// Buffers the call writes.
    pub fn writes(&self) -> Vec<BufId> {
        match self {
            LibCall::Gemm { c, .. } | LibCall::SpMM { c, .. } => vec![c.buf],
            LibCall::Sparsify { out, .. } => out.buffers(),
            LibCall::Densify { dst, .. } => vec![*dst],
        }
    }

    /// Every buffer the call touches, reads first.
    pub fn buffers(&self) -> Vec<BufId> {
        let mut v = self.reads();
        for b in self.writes() {
            if !v.contains(&b) {
                v.push(b);
            }
        }
        v
    }
}

/// A statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Stmt {
    Loop(Loop),
    /// Declares accumulator `acc` of compute type `ty` (F32 or F64) with an initial value; it
    /// lives until the end of the enclosing block.
    Let {
        acc: AccId,
        ty: ElemType,
        init: Expr,
    },
    /// `acc = op(acc, value)`.
    Update {
        acc: AccId,
        op: AccOp,
        value: Expr,
    },
    /// `buf[index] = value`, narrowed to the buffer's type.
    Store {
        buf: BufId,
        index: Index,
        value: Expr,
    },
    Call(LibCall),
}

impl Stmt {
    /// Calls `f` on this statement and, for loops, on every statement inside, pre-order.
    pub fn visit(&self, f: &mut impl FnMut(&Stmt)) {
        f(self);
        if let Stmt::Loop(l) = self {
            l.body.iter().for_each(|s| s.visit(f));
        }
    }

    /// The expressions this statement holds itself (not those of statements inside a loop).
    pub fn exprs(&self) -> Vec<&Expr> {
        match self {
            Stmt::Let { init, .. } => vec![init],
            Stmt::Update { value, .. } | Stmt::Store { value, .. } => vec![value],
            Stmt::Loop(_) | Stmt::Call(_) => Vec::new(),
        }
    }

    /// This statement with every index in it replaced by `f(index)`, deep: those of loads,
    /// `Iota`s and stores, and of the loops inside, their sparse levels' positions included
    /// (a library call's operands are left as they are).
    pub fn map_all_indices(&self, f: &impl Fn(&Index) -> Index) -> Stmt {
        match self {
            Stmt::Loop(l) => Stmt::Loop(Loop {
                var: l.var,
                iter: l.iter.map_parts(&|b| b, f),
                parallel: l.parallel,
                vector: l.vector,
                gpu: l.gpu,
                body: l.body.iter().map(|s| s.map_all_indices(f)).collect(),
            }),
            other => other.map_exprs(&mut |e| e.map_indices(f), f),
        }
    }

    /// This statement with every buffer it names replaced by `f(buffer)`, deep: loads, stores,
    /// sparse levels and library calls, in the loops inside too.
    pub fn map_buffers(&self, f: &impl Fn(BufId) -> BufId) -> Stmt {
        match self {
            Stmt::Loop(l) => Stmt::Loop(Loop {
                var: l.var,
                iter: l.iter.map_parts(f, &|i| i.clone()),
                parallel: l.parallel,
                vector: l.vector,
                gpu: l.gpu,
                body: l.body.iter().map(|s| s.map_buffers(f)).collect(),
            }),
            Stmt::Store { buf, index, value } => Stmt::Store {
                buf: f(*buf),
                index: index.clone(),
                value: value.map_buffers(f),
            },
            Stmt::Call(c) => Stmt::Call(c.map_buffers(f)),
            other => other.map_exprs(&mut |e| e.map_buffers(f), &|i| i.clone()),
        }
    }

    /// This statement with its own expressions replaced by `f(expr)` and a store's index by
    /// `index(index)`; loops and calls are returned unchanged (a shallow map).
    pub fn map_exprs(
        &self,
        f: &mut impl FnMut(&Expr) -> Expr,
        index: &impl Fn(&Index) -> Index,
    ) -> Stmt {
        match self {
            Stmt::Let { acc, ty, init } => Stmt::Let {
                acc: *acc,
                ty: *ty,
                init: f(init),
            },
            Stmt::Update { acc, op, value } => Stmt::Update {
                acc: *acc,
                op: *op,
                value: f(value),
            },
            Stmt::Store {
                buf,
                index: ix,
                value,
            } => Stmt::Store {
                buf: *buf,
                index: index(ix),
                value: f(value),
            },
            other => other.clone(),
        }
    }
}

impl Expr {
    /// A copy with every buffer it loads from replaced by `f(buffer)`.
    pub fn map_buffers(&self, f: &impl Fn(BufId) -> BufId) -> Expr {
        match self {
            Expr::Load { buf, index } => Expr::Load {
                buf: f(*buf),
                index: index.clone(),
            },
            other => other.map_children(|x| x.map_buffers(f)),
        }
    }
}

impl MatView {
    fn map_buffers(&self, f: &impl Fn(BufId) -> BufId) -> MatView {
        MatView {
            buf: f(self.buf),
            ..self.clone()
        }
    }
}

impl SparseOperand {
    /// A copy with every buffer replaced by `f(buffer)`.
    pub fn map_buffers(&self, f: &impl Fn(BufId) -> BufId) -> SparseOperand {
        SparseOperand {
            ptr: self.ptr.map(f),
            idx: f(self.idx),
            values: f(self.values),
            ..self.clone()
        }
    }
}

impl LibCall {
    /// A copy with every buffer replaced by `f(buffer)`.
    pub fn map_buffers(&self, f: &impl Fn(BufId) -> BufId) -> LibCall {
        let mut c = self.clone();
        match &mut c {
            LibCall::Gemm { a, b, c, .. } => {
                *a = a.map_buffers(f);
                *b = b.map_buffers(f);
                *c = c.map_buffers(f);
            }
            LibCall::SpMM { s, d, c, .. } => {
                *s = s.map_buffers(f);
                *d = d.map_buffers(f);
                *c = c.map_buffers(f);
            }
            LibCall::Sparsify { src, out, .. } => {
                *src = f(*src);
                *out = out.map_buffers(f);
            }
            LibCall::Densify { s, dst } => {
                *s = s.map_buffers(f);
                *dst = f(*dst);
            }
        }
        c
    }
}

/// Where in the source a kernel comes from, as data: the statement (an index into the typed
/// program's assignments, when the kernel computes one) and the byte range of the expression
/// it computes. Reports and backend errors point at source text through it, never by parsing
/// `Kernel::origin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SourceRef {
    pub statement: Option<u32>,
    pub start: u32,
    pub end: u32,
}

/// One compiled unit: a CPU function or (later) one CUDA `__global__`.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    pub name: String,
    /// What the kernel computes, in source terms (for reports; `source` is the typed form).
    pub origin: String,
    /// The source text the kernel computes (`None` for hand-built programs).
    pub source: Option<SourceRef>,
    pub body: Vec<Stmt>,
}

/// A whole planned program: buffers and kernels in execution order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoopProgram {
    pub buffers: Vec<Buffer>,
    pub kernels: Vec<Kernel>,
    /// f32 products may read their operands as TF32 (10 mantissa bits) on tensor cores: the
    /// user's opt-in (`--tf32`). The interpreter, the evaluator and the CPU compute f32
    /// exactly whatever it says; the CUDA backend's tensor-core templates take f32 products
    /// only when it is set.
    pub tf32: bool,
}

impl LoopProgram {
    pub fn buffer(&self, id: BufId) -> &Buffer {
        &self.buffers[id.0 as usize]
    }
}
