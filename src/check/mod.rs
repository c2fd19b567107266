//! The checker: AST → checked, typed [`Program`].
//!
//! It infers and enforces every axis extent, dtype and format, and resolves pattern strings
//! (`pattern.rs`). Declarations are order-independent for extents: a first pass collects what
//! `let`, `name=INT` axes and bound data say about each axis name, and any disagreement is an
//! error. Then statements are checked in order. The checker collects every diagnostic it can
//! rather than stopping at the first; a statement that fails poisons its name so that later uses
//! do not repeat the same error.

pub mod pattern;
pub mod program;
pub mod types;

pub use program::*;
pub use types::*;

use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::dtype::DType;
use pattern::{resolve_einsum, resolve_pattern};
use std::collections::{BTreeMap, HashMap};
use tdsl_syntax::ast::{self, Arg, AxisDecl, Expr, ExprKind, FormatArg, StmtKind};
pub use tdsl_syntax::suggest::closest;
use tdsl_syntax::Span;

mod call;
mod decl;
mod ops;
mod pack;
mod sparsify;

/// What is known about data bound to an input before checking (from `--input`, `--weights` or
/// the API): its dtype, shape and where it came from (for messages).
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub source: String,
}

/// Which entry point is checking, so that help lines say how *its* user binds data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Entry {
    /// `tdsl run|check|…` and the REPL: `--input NAME=FILE`.
    #[default]
    Cli,
    /// The Rust API: `program.bind("NAME", &tensor)`.
    Api,
}

impl Entry {
    /// How to bind data to input `name`, as a help line fragment.
    pub fn bind_hint(self, name: &str) -> String {
        match self {
            Entry::Cli => format!("pass `--input {name}=FILE.npy`"),
            Entry::Api => format!("bind a tensor to it: `program.bind(\"{name}\", &tensor)`"),
        }
    }
}

/// Checks a parsed script. `bound` maps input names to the data bound to them.
pub fn check_script(
    script: &ast::Script,
    bound: &BTreeMap<String, Binding>,
) -> Result<Program, Diagnostics> {
    check_script_for(script, bound, Entry::Cli)
}

/// [`check_script`] with help lines for entry point `entry`.
pub fn check_script_for(
    script: &ast::Script,
    bound: &BTreeMap<String, Binding>,
    entry: Entry,
) -> Result<Program, Diagnostics> {
    let mut c = Checker::new(bound.clone());
    c.entry = entry;
    c.collect_extents(&script.stmts);
    for stmt in &script.stmts {
        c.stmt(stmt);
    }
    let declared: Vec<&str> = script
        .stmts
        .iter()
        .filter_map(|s| match &s.kind {
            StmtKind::Input(d) => Some(d.name.name.as_str()),
            _ => None,
        })
        .collect();
    for name in bound.keys() {
        if !declared.contains(&name.as_str()) {
            c.diags.push(
                Diagnostic::new(
                    Code::UnknownInput,
                    format!(
                        "data was given for `{name}`, but the script declares no input `{name}`"
                    ),
                )
                .help(match closest(name, declared.iter().copied()) {
                    Some(n) => format!("did you mean `{n}`?"),
                    None => "declare it with `input NAME: DTYPE[AXES]`".to_string(),
                }),
            );
        }
    }
    c.finish()
}

/// What a name stands for while checking.
#[derive(Debug, Clone, Copy, PartialEq)]
enum NameRef {
    Tensor(TensorRef),
    /// A statement that failed: uses are silently skipped to avoid cascades.
    Poisoned,
}

/// The checker's state; the REPL keeps one alive across lines.
#[derive(Debug, Clone, Default)]
pub struct Checker {
    pub prog: Program,
    bound: BTreeMap<String, Binding>,
    /// Axis name → extent and where it was first given.
    axes: BTreeMap<String, (u64, Span)>,
    names: HashMap<String, NameRef>,
    diags: Diagnostics,
    /// Whose help lines to write (`--input` or `program.bind`).
    pub entry: Entry,
}

impl Checker {
    pub fn new(bound: BTreeMap<String, Binding>) -> Checker {
        Checker {
            bound,
            ..Checker::default()
        }
    }

    /// The checked program and every diagnostic, or the program alone if there were none.
    pub fn finish(self) -> Result<Program, Diagnostics> {
        if self.diags.is_empty() {
            Ok(self.prog)
        } else {
            Err(self.diags)
        }
    }

    /// Takes the diagnostics gathered so far, leaving the state (the REPL's way to recover).
    pub fn take_diagnostics(&mut self) -> Diagnostics {
        std::mem::take(&mut self.diags)
    }

    /// Known axis extents by name.
    pub fn axis_extents(&self) -> impl Iterator<Item = (&str, u64)> {
        self.axes.iter().map(|(k, v)| (k.as_str(), v.0))
    }

    fn set_axis(&mut self, name: &str, extent: u64, span: Span, source: &str) {
        if extent == 0 {
            self.diags.push(
                Diagnostic::new(
                    Code::ZeroExtent,
                    format!("axis `{name}` has extent 0{source}"),
                )
                .label(span, "extent 0")
                .help("every axis needs at least one element"),
            );
            // Remember it as extent 0 (reported): later uses are skipped silently.
            self.axes.entry(name.to_string()).or_insert((0, span));
            return;
        }
        match self.axes.get(name) {
            Some(&(0, _)) => {}
            Some(&(old, old_span)) if old != extent => {
                let mut d = Diagnostic::new(
                    Code::ExtentMismatch,
                    format!("axis `{name}` is {extent} here{source}, but {old} elsewhere"),
                )
                .label(span, format!("`{name}` = {extent}"));
                if old_span != span {
                    d = d.label(old_span, format!("`{name}` = {old} here"));
                }
                self.diags.push(d.help(
                    "one axis name has one extent in a whole program; rename one of the axes if they are different things",
                ));
            }
            Some(_) => {}
            None => {
                self.axes.insert(name.to_string(), (extent, span));
            }
        }
    }

    /// First pass: what `let`, `name=INT` and bound data say about axis extents.
    pub fn collect_extents(&mut self, stmts: &[ast::Stmt]) {
        let mut lets: HashMap<String, Span> = HashMap::new();
        for stmt in stmts {
            match &stmt.kind {
                StmtKind::Let { name, value } => {
                    if let Some(prev) = lets.insert(name.name.clone(), name.span) {
                        self.diags.push(
                            Diagnostic::new(
                                Code::DuplicateName,
                                format!("size `{}` is defined twice", name.name),
                            )
                            .label(name.span, "defined again here")
                            .label(prev, "first defined here"),
                        );
                        continue;
                    }
                    self.set_axis(&name.name, value.value, value.span, "");
                }
                StmtKind::Input(d) => {
                    for a in &d.axes {
                        if let AxisDecl::Sized(n, v) = a {
                            self.set_axis(&n.name, v.value, v.span, "");
                        }
                    }
                    if let Some(b) = self.bound.get(&d.name.name).cloned() {
                        if b.shape.len() == d.axes.len() {
                            for (a, &ext) in d.axes.iter().zip(&b.shape) {
                                if let AxisDecl::Named(n) = a {
                                    let src = format!(" in the data from {}", b.source);
                                    self.set_axis(&n.name, ext as u64, n.span, &src);
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Checks one statement and records its effects.
    pub fn stmt(&mut self, stmt: &ast::Stmt) {
        match &stmt.kind {
            StmtKind::Let { name, .. } => {
                if let Some(NameRef::Tensor(_)) = self.names.get(&name.name) {
                    self.diags.push(
                        Diagnostic::new(
                            Code::DuplicateName,
                            format!("`{}` is already a tensor", name.name),
                        )
                        .label(name.span, "a size may not reuse a tensor's name"),
                    );
                }
                if !self.prog.sizes.iter().any(|s| s.name == name.name) {
                    if let Some(&(value, _)) = self.axes.get(&name.name) {
                        self.prog.sizes.push(SizeConst {
                            name: name.name.clone(),
                            value,
                            span: stmt.span,
                        });
                    }
                }
            }
            StmtKind::Input(d) => self.input(d, stmt.span),
            StmtKind::Assign { name, value } => {
                if let Some(prev) = self.defined_span(&name.name) {
                    self.diags.push(
                        Diagnostic::new(
                            Code::DuplicateName,
                            format!("`{}` is assigned twice", name.name),
                        )
                        .label(name.span, "assigned again here")
                        .label(prev, "first defined here")
                        .help("tdsl names are single-assignment; pick a new name"),
                    );
                    return;
                }
                match self.expr(value) {
                    Some(node) => {
                        self.prog.assigns.push(Assign {
                            name: name.name.clone(),
                            node,
                            span: stmt.span,
                            name_span: name.span,
                        });
                        let r = TensorRef::Assign(self.prog.assigns.len() - 1);
                        self.names.insert(name.name.clone(), NameRef::Tensor(r));
                    }
                    None => {
                        self.names.insert(name.name.clone(), NameRef::Poisoned);
                    }
                }
            }
            StmtKind::AssignMany { names, value } => self.assign_many(names, value, stmt.span),
            StmtKind::Output { names } => {
                for n in names {
                    if let Some(prev) = self.prog.outputs.iter().find(|o| o.name == n.name) {
                        let prev = prev.span;
                        self.diags.push(
                            Diagnostic::new(
                                Code::DuplicateOutput,
                                format!("`{}` is listed as an output twice", n.name),
                            )
                            .label(n.span, "listed again here")
                            .label(prev, "first listed here")
                            .help("list each output once"),
                        );
                        continue;
                    }
                    match self.names.get(&n.name) {
                        Some(NameRef::Tensor(r)) => self.prog.outputs.push(Output {
                            name: n.name.clone(),
                            tensor: *r,
                            span: n.span,
                        }),
                        Some(NameRef::Poisoned) => {}
                        None => self.diags.push(self.undefined(&n.name, n.span)),
                    }
                }
            }
        }
    }

    fn defined_span(&self, name: &str) -> Option<Span> {
        if let Some(s) = self.prog.sizes.iter().find(|s| s.name == name) {
            return Some(s.span);
        }
        match self.names.get(name)? {
            NameRef::Tensor(TensorRef::Input(i)) => Some(self.prog.inputs[*i].span),
            NameRef::Tensor(TensorRef::Assign(i)) => Some(self.prog.assigns[*i].name_span),
            NameRef::Poisoned => Some(Span::default()),
        }
    }

    fn undefined(&self, name: &str, span: Span) -> Diagnostic {
        let d = Diagnostic::new(Code::UndefinedName, format!("`{name}` is not defined"))
            .label(span, "not defined");
        // Tensors are the likelier intent; sizes and axis names come second.
        let tensor = closest(name, self.names.keys().map(String::as_str));
        match tensor.or_else(|| closest(name, self.axes.keys().map(String::as_str))) {
            Some(c) => d.help(format!("did you mean `{c}`?")),
            None => d.help("define it with `input`, `let` or an assignment before this line"),
        }
    }

    fn push_node(
        &mut self,
        kind: NodeKind,
        ty: TensorType,
        weak: bool,
        span: Span,
    ) -> Option<NodeId> {
        self.check_size(&ty, span)?;
        self.prog.nodes.push(Node {
            kind,
            ty,
            weak,
            span,
        });
        Some(NodeId(self.prog.nodes.len() as u32 - 1))
    }

    /// The element count and byte size of a type must fit in u64.
    fn check_size(&mut self, ty: &TensorType, span: Span) -> Option<()> {
        let bytes = ty
            .shape
            .n_elems()
            .and_then(|n| n.checked_mul(ty.dtype.size_bytes()));
        if bytes.is_none() {
            self.diags.push(
                Diagnostic::new(
                    Code::SizeOverflow,
                    format!(
                        "a tensor of shape {} and dtype {} has more bytes than fit in 64 bits",
                        ty.shape, ty.dtype
                    ),
                )
                .label(span, "too large")
                .help("reduce the extents; every tensor's byte size must fit in 64 bits"),
            );
            return None;
        }
        Some(())
    }

    fn scalar(&mut self, v: f64, span: Span) -> Option<NodeId> {
        let ty = TensorType {
            dtype: WEAK_DTYPE,
            shape: Shape::default(),
            format: Format::Dense,
        };
        self.push_node(NodeKind::Scalar(v), ty, true, span)
    }

    /// Checks an expression; `None` means a diagnostic was recorded (or a poisoned name used).
    pub fn expr(&mut self, e: &Expr) -> Option<NodeId> {
        match &e.kind {
            ExprKind::Number { value, .. } => self.scalar(*value, e.span),
            ExprKind::Str { value } => {
                self.diags.push(
                    Diagnostic::new(Code::NotATensor, format!("the string \"{value}\" is not a value"))
                        .label(e.span, "a string")
                        .help("strings are patterns and op names inside rearrange, reduce, repeat and einsum"),
                );
                None
            }
            ExprKind::Name(n) => self.name(n),
            ExprKind::Neg(x) => {
                let x = self.expr(x)?;
                self.unary(UnOp::Neg, x, e.span)
            }
            ExprKind::Binary { op, lhs, rhs } => {
                let (a, b) = (self.expr(lhs), self.expr(rhs));
                let f = match op {
                    ast::BinOp::Add => BinOp::Add,
                    ast::BinOp::Sub => BinOp::Sub,
                    ast::BinOp::Mul => BinOp::Mul,
                    ast::BinOp::Div => BinOp::Div,
                    ast::BinOp::Lt => BinOp::Lt,
                    ast::BinOp::Le => BinOp::Le,
                    ast::BinOp::Gt => BinOp::Gt,
                    ast::BinOp::Ge => BinOp::Ge,
                    ast::BinOp::Eq => BinOp::Eq,
                    ast::BinOp::Ne => BinOp::Ne,
                };
                self.binary(f, a?, b?, e.span)
            }
            ExprKind::Call { func, args } => self.call(func, args, e.span),
        }
    }

    fn name(&mut self, n: &ast::Ident) -> Option<NodeId> {
        match self.names.get(&n.name).copied() {
            Some(NameRef::Tensor(r)) => {
                let ty = self.prog.tensor_type(r).clone();
                let kind = match r {
                    TensorRef::Input(i) => NodeKind::Input(i),
                    TensorRef::Assign(i) => NodeKind::Var(i),
                };
                self.push_node(kind, ty, false, n.span)
            }
            Some(NameRef::Poisoned) => None,
            None => match self.axes.get(&n.name) {
                Some(&(ext, _)) => self.scalar(ext as f64, n.span),
                // The IEEE constants, unless a script defines the names itself.
                None if n.name == "inf" => self.scalar(f64::INFINITY, n.span),
                None if n.name == "nan" => self.scalar(f64::NAN, n.span),
                None => {
                    let d = self.undefined(&n.name, n.span);
                    let d = if DType::parse(&n.name).is_some() {
                        d.help("a dtype name is only valid as the second argument of `cast`")
                    } else {
                        d
                    };
                    self.diags.push(d);
                    None
                }
            },
        }
    }

    /// Records that a sparse operand of `what` gives a dense result.
    fn note_dense(&mut self, span: Span, what: &str, f: Format, shape: &Shape) {
        self.prog.format_notes.push(FormatNote {
            span,
            message: format!(
                "{what} of a {} tensor is dense: the sparse operand is expanded to dense first",
                format_name(f, shape)
            ),
        });
    }
}

/// The format of a rearrange of a sparse tensor, when storage can be reused as it is: the
/// identity keeps the format, and transposing a matrix turns CSR into CSC (and back) and moves
/// 2:4 to the other axis. Anything else is dense.
pub fn flow_through_rearrange(f: Format, recipe: &Recipe) -> Format {
    if !f.is_sparse() || !recipe.reduced.is_empty() {
        return Format::Dense;
    }
    // A permutation of whole input slots (no splits, merges or new axes).
    let whole = recipe.in_groups.iter().all(|g| g.len() == 1);
    let perm: Option<Vec<usize>> = recipe
        .out_groups
        .iter()
        .map(|g| match g.as_slice() {
            [OutElem::In(i)] => recipe.in_groups.iter().position(|gr| gr == &[*i]),
            _ => None,
        })
        .collect();
    match (whole, perm.as_deref()) {
        (true, Some(p)) if p.iter().enumerate().all(|(i, &j)| i == j) => f,
        (true, Some([1, 0])) => match f {
            Format::Csr => Format::Csc,
            Format::Csc => Format::Csr,
            Format::TwoFour { slot } => Format::TwoFour { slot: 1 - slot },
            _ => Format::Dense,
        },
        _ => Format::Dense,
    }
}

fn unreachable_axis() -> Axis {
    // Both operands lack slot i only if i >= rank, which the loop bound excludes.
    Axis::anon(1)
}

/// The sparse operand of a *sampled* einsum (SDDMM), if it is one: of two or more operands,
/// exactly one is sparse, of rank 2 with two distinct labels, and the output is exactly those
/// two labels in its order. Then `out[i, j] = s[i, j] · Σ Π others`, zero wherever `s` is, so
/// the result keeps `s`'s format and runs on its stored entries (spec/language.md §8.2).
pub fn sampled_operand(spec: &EinsumSpec, formats: &[Format]) -> Option<usize> {
    if formats.len() < 2 || spec.labels.iter().any(|l| l.1 == 0) {
        return None;
    }
    let mut sparse = formats.iter().enumerate().filter(|(_, f)| f.is_sparse());
    let (at, _) = sparse.next()?;
    if sparse.next().is_some() {
        return None;
    }
    let [a, b] = spec.operands[at].as_slice() else {
        return None;
    };
    let (&[l0], &[l1]) = (a.labels.as_slice(), b.labels.as_slice()) else {
        return None;
    };
    let ok = !a.broadcast && !b.broadcast && l0 != l1 && spec.output == [vec![l0], vec![l1]];
    ok.then_some(at)
}

/// Whether `f(0) = 0` (up to the sign of zero), so that `f` of a sparse value keeps its format.
pub fn keeps_zero(f: UnOp) -> bool {
    matches!(
        f,
        UnOp::Neg
            | UnOp::Abs
            | UnOp::Relu
            | UnOp::Sqrt
            | UnOp::Square
            | UnOp::Tanh
            | UnOp::Sin
            | UnOp::Gelu
            | UnOp::Erf
            | UnOp::GeluErf
            | UnOp::Silu
            | UnOp::Log1p
            | UnOp::Expm1
            | UnOp::Floor
            | UnOp::Ceil
            | UnOp::Round
            | UnOp::Sign
    )
}
