//! The AST: statements and expressions exactly as written, each with its [`Span`].
//!
//! Nothing here is inferred: dtype names, format names and function names are kept as
//! identifiers and validated by the checker (`tdsl::check`), so this crate never needs to know
//! what a valid dtype or function is.

use crate::span::Span;

/// A name as written, with its span.
#[derive(Debug, Clone, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// A whole script: statements in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Script {
    pub stmts: Vec<Stmt>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum StmtKind {
    /// `let d = 64`
    Let { name: Ident, value: IntLit },
    /// `input x: f32[b, 3] @ csr = randn(seed=0)`
    Input(InputDecl),
    /// `y = expr`
    Assign { name: Ident, value: Expr },
    /// `a, b = expr` (two or more names): the tensors an `unpack` returns, in order.
    AssignMany { names: Vec<Ident>, value: Expr },
    /// `output y, z`
    Output { names: Vec<Ident> },
}

/// An integer literal with its span.
#[derive(Debug, Clone, PartialEq)]
pub struct IntLit {
    pub value: u64,
    pub span: Span,
}

/// `input NAME: DTYPE[AXES] [@ FORMAT] [= INIT]`
#[derive(Debug, Clone, PartialEq)]
pub struct InputDecl {
    pub name: Ident,
    pub dtype: Ident,
    pub axes: Vec<AxisDecl>,
    pub format: Option<FormatAnn>,
    pub init: Option<Init>,
}

/// One axis of an input declaration.
#[derive(Debug, Clone, PartialEq)]
pub enum AxisDecl {
    /// `batch`: the extent comes from data, a `let`, or another declaration.
    Named(Ident),
    /// `64`: an anonymous axis of fixed extent.
    Fixed(IntLit),
    /// `seq=128`: a named axis with its extent.
    Sized(Ident, IntLit),
}

impl AxisDecl {
    pub fn span(&self) -> Span {
        match self {
            AxisDecl::Named(i) => i.span,
            AxisDecl::Fixed(n) => n.span,
            AxisDecl::Sized(i, n) => i.span.join(n.span),
        }
    }
}

/// `@ bsr(32, 32)`, `@ 2:4(k)`, `@ csr`: the name and arguments as written.
#[derive(Debug, Clone, PartialEq)]
pub struct FormatAnn {
    pub name: Ident,
    pub args: Vec<FormatArg>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum FormatArg {
    Int(IntLit),
    Name(Ident),
}

/// `= randn(seed=0)` or `= zeros`: a function name with optional arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Init {
    pub func: Ident,
    pub args: Vec<Arg>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    /// Comparisons: 1 where true, 0 where false (and false where either side is NaN, except
    /// `!=`), as numpy's comparison operators.
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl BinOp {
    /// `< <= > >= == !=`: these do not chain (`a < b < c` is a syntax error).
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne
        )
    }

    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// A numeric literal; `text` is kept as written so printing round-trips.
    Number { value: f64, text: String },
    /// A string literal (a pattern or an op name); `value` excludes the quotes.
    Str { value: String },
    /// A tensor, size or dtype name.
    Name(Ident),
    /// `-x`
    Neg(Box<Expr>),
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// `f(args)`
    Call { func: Ident, args: Vec<Arg> },
}

/// A call argument: positional or `name=value`.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    Positional(Expr),
    Keyword { name: Ident, value: Expr },
}

impl Arg {
    pub fn span(&self) -> Span {
        match self {
            Arg::Positional(e) => e.span,
            Arg::Keyword { name, value } => name.span.join(value.span),
        }
    }
}

impl Expr {
    /// For a string literal, the span of its contents (without the quotes).
    pub fn str_contents_span(&self) -> Option<Span> {
        match &self.kind {
            ExprKind::Str { .. } => Some(Span {
                start: self.span.start + 1,
                end: self.span.end.saturating_sub(1).max(self.span.start + 1),
            }),
            _ => None,
        }
    }
}

/// A parsed REPL line: a statement, a bare expression, or nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplLine {
    Stmt(Stmt),
    Expr(Expr),
    Empty,
}
