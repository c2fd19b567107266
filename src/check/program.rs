//! The checked, typed program: the single input of the interpreter, the cost model and (later)
//! the planner.
//!
//! Nodes live in one arena in definition order, so every node's operands have smaller ids and a
//! front-to-back walk is a valid evaluation order. Every node has a full [`TensorType`] (dtype,
//! shape with axis names and extents, format) and the span of the source text it came from.

use super::types::{EinsumSpec, Format, Recipe, TensorType};
use crate::dtype::DType;
pub use tdsl_sparse::prune::Select;
use tdsl_syntax::Span;

/// Index of a node in [`Program::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl NodeId {
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

/// Elementwise functions of one argument: the workspace's one vocabulary (`tdsl_sparse::ops`).
pub use tdsl_sparse::UnOp;

/// Elementwise functions of two arguments: the workspace's one vocabulary (`tdsl_sparse::ops`).
pub use tdsl_sparse::BinOp;

/// How `reduce` combines values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Prod => "prod",
        }
    }

    pub fn parse(s: &str) -> Option<ReduceOp> {
        ReduceOp::ALL.into_iter().find(|op| op.name() == s)
    }
}

/// Which einops operation a [`NodeKind::Pattern`] node is.
pub use super::pattern::PatternOp;

/// What a node computes.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    /// The value bound to input number `i`.
    Input(usize),
    /// The value of assignment number `i` (a name used again later).
    Var(usize),
    /// A numeric literal or a size used as a number: a rank-0 "weak" scalar whose dtype adapts
    /// to the tensor it meets.
    Scalar(f64),
    Unary(UnOp, NodeId),
    Binary(BinOp, NodeId, NodeId),
    /// `where(cond, a, b)`: `a` where `cond` is nonzero (NaN counts as nonzero), else `b`.
    Where(NodeId, NodeId, NodeId),
    /// `index(x, AXIS)`: the position along slot `axis` of `x`. The node's shape is `x`'s with
    /// every other slot of extent 1, so it broadcasts against `x` (numpy's
    /// `arange(n)[:, None]`); it does not read `x`.
    AxisIndex {
        axis: usize,
    },
    /// Conversion to the node's dtype.
    Cast(NodeId),
    /// `rearrange`, `reduce` (with its op) or `repeat`, resolved to one recipe.
    Pattern {
        op: PatternOp,
        reduce: Option<ReduceOp>,
        x: NodeId,
        recipe: Recipe,
    },
    Einsum {
        operands: Vec<NodeId>,
        spec: EinsumSpec,
    },
    /// `sparsify(x, FORMAT, …)`: `x` pruned to the node's format, keeping what `select` says
    /// (`tdsl_sparse::prune`). The values are `x`'s with the dropped entries zero.
    Sparsify {
        x: NodeId,
        select: Select,
    },
    /// `dense(x)`: the same values, stored densely.
    Dense(NodeId),
    /// `pack`: the parts laid end to end along slot `axis`; every other slot agrees. The parts
    /// are already flattened (one slot for einops' `*`) and cast to the node's dtype.
    Concat {
        axis: usize,
        parts: Vec<NodeId>,
    },
    /// A piece of an `unpack`: `x` from `start` along slot `axis`, for the node's extent there;
    /// every other slot is `x`'s.
    Slice {
        x: NodeId,
        axis: usize,
        start: u64,
    },
}

/// One node: what it computes, its type, and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub kind: NodeKind,
    pub ty: TensorType,
    /// True for literal numbers and sizes used as numbers (and arithmetic on only those): their
    /// dtype yields to any tensor they are combined with, as numpy's Python scalars do.
    pub weak: bool,
    pub span: Span,
}

/// An initialiser of an input, so scripts run without data files.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum InitKind {
    /// Standard normal values.
    Randn {
        seed: u64,
    },
    /// Uniform values in [0, 1).
    Rand {
        seed: u64,
    },
    Zeros,
    Ones,
    /// 0, 1, 2, … in row-major order.
    Arange,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Init {
    pub kind: InitKind,
    /// For sparse formats: the fraction of values (or blocks) kept. `None` keeps everything the
    /// format allows (2:4 keeps 2 of every 4).
    pub density: Option<f64>,
    pub span: Span,
}

/// An `input` declaration after checking.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub name: String,
    pub ty: TensorType,
    pub init: Option<Init>,
    /// The whole declaration.
    pub span: Span,
    /// The format annotation, if any.
    pub format_span: Option<Span>,
}

/// `name = expr` after checking.
#[derive(Debug, Clone, PartialEq)]
pub struct Assign {
    pub name: String,
    pub node: NodeId,
    pub span: Span,
    pub name_span: Span,
}

/// What a name refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorRef {
    Input(usize),
    Assign(usize),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub name: String,
    pub tensor: TensorRef,
    pub span: Span,
}

/// A size constant from `let`.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeConst {
    pub name: String,
    pub value: u64,
    pub span: Span,
}

/// A whole checked program.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Program {
    pub sizes: Vec<SizeConst>,
    pub inputs: Vec<Input>,
    pub nodes: Vec<Node>,
    pub assigns: Vec<Assign>,
    pub outputs: Vec<Output>,
    /// Where a sparse value meets an operation that cannot keep its format, so the result is
    /// dense: `check` and the REPL print these.
    pub format_notes: Vec<FormatNote>,
    /// Every `sparsify(x, auto, …)`, whose format is chosen after checking (`plan::auto`).
    pub auto_formats: Vec<AutoFormat>,
}

/// A `sparsify(x, auto, …)`: the checker leaves the node as `Dense(x)` and records the
/// request; `plan::auto::resolve_auto` turns it into `Sparsify { x, select }` with the chosen
/// format when a sparse format is predicted faster, and fills in `choice`.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoFormat {
    pub node: NodeId,
    pub x: NodeId,
    pub select: Select,
    /// The sparse formats to choose from (dense is always a candidate).
    pub candidates: Vec<Format>,
    pub span: Span,
    pub choice: Option<AutoChoice>,
}

/// What `auto` chose and why.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoChoice {
    pub format: Format,
    /// Predicted seconds of the value's einsum uses with the chosen format, and with dense.
    pub secs: f64,
    pub dense_secs: f64,
    /// One line for reports: the candidates' predicted times, or why dense was kept.
    pub reason: String,
}

/// A sparse format that stops flowing: the span of the operation and why.
#[derive(Debug, Clone, PartialEq)]
pub struct FormatNote {
    pub span: Span,
    pub message: String,
}

impl Program {
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.idx()]
    }

    /// The type of an input or assignment.
    pub fn tensor_type(&self, r: TensorRef) -> &TensorType {
        match r {
            TensorRef::Input(i) => &self.inputs[i].ty,
            TensorRef::Assign(i) => &self.node(self.assigns[i].node).ty,
        }
    }

    /// Nodes of assignment `a`'s expression tree that belong to it (not earlier statements),
    /// in evaluation order.
    pub fn statement_nodes(&self, a: usize) -> Vec<NodeId> {
        let lo = if a == 0 {
            0
        } else {
            self.assigns[a - 1].node.idx() + 1
        };
        let hi = self.assigns[a].node.idx();
        (lo..=hi).map(|i| NodeId(i as u32)).collect()
    }

    /// Operands of a node.
    pub fn operands(&self, id: NodeId) -> Vec<NodeId> {
        match &self.node(id).kind {
            NodeKind::Input(_)
            | NodeKind::Var(_)
            | NodeKind::Scalar(_)
            | NodeKind::AxisIndex { .. } => Vec::new(),
            NodeKind::Where(c, a, b) => vec![*c, *a, *b],
            NodeKind::Unary(_, x)
            | NodeKind::Cast(x)
            | NodeKind::Dense(x)
            | NodeKind::Sparsify { x, .. } => vec![*x],
            NodeKind::Binary(_, a, b) => vec![*a, *b],
            NodeKind::Pattern { x, .. } | NodeKind::Slice { x, .. } => vec![*x],
            NodeKind::Einsum { operands, .. } => operands.clone(),
            NodeKind::Concat { parts, .. } => parts.clone(),
        }
    }
}

/// The dtype-and-format part of a tensor type, for display.
pub fn type_summary(ty: &TensorType) -> String {
    let fmt = match ty.format {
        Format::Dense => String::new(),
        f => format!(" @ {}", format_name(f, &ty.shape)),
    };
    format!("{}{}{}", ty.dtype, ty.shape, fmt)
}

/// A format as written in a script: `csr`, `bsr(32, 32)`, `2:4(k)`.
pub fn format_name(f: Format, shape: &super::types::Shape) -> String {
    match f {
        Format::Dense => "dense".into(),
        Format::Coo => "coo".into(),
        Format::Csr => "csr".into(),
        Format::Csc => "csc".into(),
        Format::Bsr { rows, cols } => format!("bsr({rows}, {cols})"),
        Format::TwoFour { slot } => match shape.0.get(slot).and_then(|a| a.name.as_deref()) {
            Some(n) if slot + 1 != shape.rank() => format!("2:4({n})"),
            _ => "2:4".into(),
        },
    }
}

/// The element dtype a scalar computation of `weak` nodes defaults to.
pub const WEAK_DTYPE: DType = DType::F32;
