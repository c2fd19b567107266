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

    fn input(&mut self, d: &ast::InputDecl, span: Span) {
        let name = &d.name;
        if let Some(prev) = self.defined_span(&name.name) {
            self.diags.push(
                Diagnostic::new(
                    Code::DuplicateName,
                    format!("`{}` is declared twice", name.name),
                )
                .label(name.span, "declared again here")
                .label(prev, "first defined here"),
            );
            return;
        }
        let n_diags = self.diags.0.len();
        let dtype = match DType::parse(&d.dtype.name) {
            Some(t) => Some(t),
            None => {
                let names = DType::ALL.map(|t| t.name());
                let mut diag = Diagnostic::new(
                    Code::UnknownDtype,
                    format!("unknown dtype `{}`", d.dtype.name),
                )
                .label(d.dtype.span, "not a dtype");
                diag = match closest(&d.dtype.name, names.iter().copied()) {
                    Some(c) => diag.help(format!(
                        "did you mean `{c}`? dtypes are f32, f64, f16 and bf16"
                    )),
                    None => diag.help("dtypes are f32, f64, f16 and bf16"),
                };
                self.diags.push(diag);
                None
            }
        };
        let binding = self.bound.get(&name.name).cloned();
        let mut axes = Vec::new();
        for (slot, a) in d.axes.iter().enumerate() {
            let bound_ext = binding
                .as_ref()
                .filter(|b| b.shape.len() == d.axes.len())
                .map(|b| b.shape[slot] as u64);
            match a {
                AxisDecl::Named(n) => match self.axes.get(&n.name) {
                    // Extent 0 was already reported where it was given.
                    Some(&(0, _)) => {}
                    Some(&(ext, _)) => axes.push(Axis::named(&n.name, ext)),
                    None => {
                        self.diags.push(
                            Diagnostic::new(
                                Code::UnknownExtent,
                                format!("the extent of axis `{}` is not known", n.name),
                            )
                            .label(n.span, "extent unknown")
                            .help(match self.entry {
                                Entry::Cli => format!(
                                    "give it with `{}=N` here, `let {} = N`, or bind data with `--input {}=FILE`",
                                    n.name, n.name, name.name
                                ),
                                Entry::Api => format!(
                                    "give it with `{}=N` here or `let {} = N`, or {}",
                                    n.name,
                                    n.name,
                                    Entry::Api.bind_hint(&name.name)
                                ),
                            }),
                        );
                    }
                },
                AxisDecl::Fixed(v) | AxisDecl::Sized(_, v) => {
                    let axis = match a {
                        AxisDecl::Sized(n, _) => Axis::named(&n.name, v.value),
                        _ => Axis::anon(v.value),
                    };
                    if v.value == 0 && matches!(a, AxisDecl::Sized(..)) {
                        // Reported by `collect_extents` with the axis name.
                    } else if v.value == 0 {
                        self.diags.push(
                            Diagnostic::new(Code::ZeroExtent, "an axis has extent 0")
                                .label(v.span, "extent 0")
                                .help("every axis needs at least one element"),
                        );
                    } else if let (Some(b), Some(be)) = (&binding, bound_ext) {
                        if be != v.value {
                            self.diags.push(
                                Diagnostic::new(
                                    Code::ShapeMismatch,
                                    format!(
                                        "input `{}` declares extent {} here, but the data from {} has {}",
                                        name.name, v.value, b.source, be
                                    ),
                                )
                                .label(a.span(), format!("declared {}", v.value)),
                            );
                        }
                    }
                    axes.push(axis);
                }
            }
        }
        if let (Some(b), Some(dt)) = (&binding, dtype) {
            if b.shape.len() != d.axes.len() {
                self.diags.push(
                    Diagnostic::new(
                        Code::ShapeMismatch,
                        format!(
                            "input `{}` is declared with rank {}, but the data from {} has shape {:?} (rank {})",
                            name.name,
                            d.axes.len(),
                            b.source,
                            b.shape,
                            b.shape.len()
                        ),
                    )
                    .label(span, format!("rank {}", d.axes.len())),
                );
            }
            if b.dtype != dt {
                self.diags.push(
                    Diagnostic::new(
                        Code::DtypeMismatch,
                        format!(
                            "input `{}` is declared {}, but the data from {} is {}",
                            name.name, dt, b.source, b.dtype
                        ),
                    )
                    .label(d.dtype.span, format!("declared {dt}"))
                    .help(format!(
                        "declare it as `{}`, or convert the file to {dt}",
                        b.dtype
                    )),
                );
            }
        }
        let shape = Shape(axes);
        let format = d
            .format
            .as_ref()
            .and_then(|f| self.format(f, &shape, d.axes.len()));
        let init = d.init.as_ref().and_then(|i| self.init(i));
        if let (Some(i), fmt) = (&init, format) {
            let takes_density = matches!(
                fmt,
                Some(Format::Coo | Format::Csr | Format::Csc | Format::Bsr { .. })
            );
            if i.density.is_some() && !takes_density {
                self.diags.push(
                    Diagnostic::new(
                        Code::BadArgument,
                        "`density=` applies only to inputs annotated coo, csr, csc or bsr",
                    )
                    .label(i.span, "density of a dense or 2:4 input")
                    .help("2:4 always keeps 2 of every 4 values; a dense input keeps all of them"),
                );
            }
        }
        if self.diags.0.len() > n_diags || shape.rank() != d.axes.len() || dtype.is_none() {
            self.names.insert(name.name.clone(), NameRef::Poisoned);
            return;
        }
        let dtype = dtype.unwrap_or(DType::F32);
        let ty = TensorType {
            dtype,
            shape,
            format: format.unwrap_or(Format::Dense),
        };
        if self.check_size(&ty, span).is_none() {
            self.names.insert(name.name.clone(), NameRef::Poisoned);
            return;
        }
        self.prog.inputs.push(Input {
            name: name.name.clone(),
            ty,
            init,
            span,
            format_span: d.format.as_ref().map(|f| f.span),
        });
        let r = TensorRef::Input(self.prog.inputs.len() - 1);
        self.names.insert(name.name.clone(), NameRef::Tensor(r));
    }

    fn format(&mut self, f: &ast::FormatAnn, shape: &Shape, rank: usize) -> Option<Format> {
        let name = f.name.name.as_str();
        let ints: Vec<Option<u64>> = f
            .args
            .iter()
            .map(|a| match a {
                FormatArg::Int(n) => Some(n.value),
                FormatArg::Name(_) => None,
            })
            .collect();
        let bad_args = |this: &mut Checker, want: &str| {
            this.diags.push(
                Diagnostic::new(Code::BadArgument, format!("format `{name}` takes {want}"))
                    .label(f.span, "bad format arguments"),
            );
            None
        };
        let need_rank = |this: &mut Checker, want: usize| -> bool {
            if rank != want {
                this.diags.push(
                    Diagnostic::new(
                        Code::FormatRank,
                        format!("format `{name}` needs a rank-{want} tensor, but this one has rank {rank}"),
                    )
                    .label(f.span, format!("needs rank {want}")),
                );
                false
            } else {
                true
            }
        };
        match name {
            "coo" | "csr" | "csc" => {
                if !f.args.is_empty() {
                    return bad_args(self, "no arguments");
                }
                if name == "coo" {
                    if rank == 0 {
                        self.diags.push(
                            Diagnostic::new(Code::FormatRank, "format `coo` needs rank 1 or more")
                                .label(f.span, "scalar"),
                        );
                        return None;
                    }
                    return Some(Format::Coo);
                }
                if !need_rank(self, 2) {
                    return None;
                }
                Some(if name == "csr" {
                    Format::Csr
                } else {
                    Format::Csc
                })
            }
            "bsr" => {
                let (Some(Some(br)), Some(Some(bc)), 2) = (ints.first(), ints.get(1), ints.len())
                else {
                    return bad_args(self, "two block extents: `bsr(ROWS, COLS)`");
                };
                let (br, bc) = (*br, *bc);
                if !need_rank(self, 2) {
                    return None;
                }
                if br == 0 || bc == 0 {
                    return bad_args(self, "block extents of at least 1");
                }
                if shape.rank() == 2 {
                    for (slot, b) in [(0usize, br), (1, bc)] {
                        let ext = shape.0[slot].extent;
                        if !ext.is_multiple_of(b) {
                            let axis = shape.0[slot]
                                .name
                                .as_deref()
                                .map(|n| format!("axis `{n}`"))
                                .unwrap_or_else(|| format!("axis {slot}"));
                            self.diags.push(
                                Diagnostic::new(
                                    Code::FormatBlock,
                                    format!(
                                        "block extent {b} does not divide {axis} of extent {ext}"
                                    ),
                                )
                                .label(f.span, format!("{b} does not divide {ext}"))
                                .help("choose a block shape whose extents divide the tensor's"),
                            );
                            return None;
                        }
                    }
                }
                Some(Format::Bsr { rows: br, cols: bc })
            }
            "2:4" => {
                if rank == 0 {
                    self.diags.push(
                        Diagnostic::new(Code::FormatRank, "format `2:4` needs rank 1 or more")
                            .label(f.span, "scalar"),
                    );
                    return None;
                }
                let slot = match f.args.as_slice() {
                    [] => rank - 1,
                    [FormatArg::Name(n)] => {
                        match shape
                            .0
                            .iter()
                            .position(|a| a.name.as_deref() == Some(&n.name))
                        {
                            Some(s) => s,
                            None => {
                                self.diags.push(
                                    Diagnostic::new(
                                        Code::BadArgument,
                                        format!(
                                            "`2:4({})` names an axis this input does not have",
                                            n.name
                                        ),
                                    )
                                    .label(n.span, "not an axis of this input"),
                                );
                                return None;
                            }
                        }
                    }
                    _ => return bad_args(self, "at most one axis name: `2:4` or `2:4(k)`"),
                };
                if let Some(a) = shape.0.get(slot) {
                    if !a.extent.is_multiple_of(4) {
                        self.diags.push(
                            Diagnostic::new(
                                Code::FormatTwoFour,
                                format!(
                                    "2:4 sparsity needs the axis extent to be a multiple of 4, but {} is {}",
                                    a.name.as_deref().map(|n| format!("`{n}`")).unwrap_or_else(|| format!("axis {slot}")),
                                    a.extent
                                ),
                            )
                            .label(f.span, format!("extent {} is not a multiple of 4", a.extent)),
                        );
                        return None;
                    }
                }
                Some(Format::TwoFour { slot })
            }
            _ => {
                let known = ["coo", "csr", "csc", "bsr", "2:4"];
                let mut d =
                    Diagnostic::new(Code::UnknownFormat, format!("unknown format `{name}`"))
                        .label(f.name.span, "not a format");
                d = match closest(name, known.iter().copied()) {
                    Some(c) => d.help(format!(
                        "did you mean `{c}`? formats are coo, csr, csc, bsr(R, C) and 2:4"
                    )),
                    None => d.help("formats are coo, csr, csc, bsr(R, C) and 2:4"),
                };
                self.diags.push(d);
                None
            }
        }
    }

    fn init(&mut self, init: &ast::Init) -> Option<Init> {
        let kind = match init.func.name.as_str() {
            "randn" => InitKind::Randn { seed: 0 },
            "rand" => InitKind::Rand { seed: 0 },
            "zeros" => InitKind::Zeros,
            "ones" => InitKind::Ones,
            "arange" => InitKind::Arange,
            other => {
                let known = ["randn", "rand", "zeros", "ones", "arange"];
                let mut d =
                    Diagnostic::new(Code::UnknownInit, format!("unknown initialiser `{other}`"))
                        .label(init.func.span, "not an initialiser");
                d = match closest(other, known.iter().copied()) {
                    Some(c) => d.help(format!(
                        "did you mean `{c}`? initialisers are randn, rand, zeros, ones and arange"
                    )),
                    None => d.help("initialisers are randn, rand, zeros, ones and arange"),
                };
                self.diags.push(d);
                return None;
            }
        };
        let mut out = Init {
            kind,
            density: None,
            span: init.span,
        };
        for a in &init.args {
            match a {
                Arg::Keyword { name, value } if name.name == "seed" => {
                    let seed = self.const_int(value)?;
                    match &mut out.kind {
                        InitKind::Randn { seed: s } | InitKind::Rand { seed: s } => *s = seed,
                        _ => {
                            self.diags.push(
                                Diagnostic::new(
                                    Code::BadArgument,
                                    format!("`{}` takes no seed", init.func.name),
                                )
                                .label(a.span(), "not used"),
                            );
                            return None;
                        }
                    }
                }
                Arg::Keyword { name, value } if name.name == "density" => {
                    let d = match &value.kind {
                        ExprKind::Number { value: v, .. } if (0.0..=1.0).contains(v) => *v,
                        _ => {
                            self.diags.push(
                                Diagnostic::new(
                                    Code::BadArgument,
                                    "`density` must be a number between 0 and 1",
                                )
                                .label(value.span, "not in [0, 1]"),
                            );
                            return None;
                        }
                    };
                    out.density = Some(d);
                }
                _ => {
                    self.diags.push(
                        Diagnostic::new(
                            Code::BadArgument,
                            format!(
                                "`{}` takes only `seed=` and `density=` keyword arguments",
                                init.func.name
                            ),
                        )
                        .label(a.span(), "unexpected argument"),
                    );
                    return None;
                }
            }
        }
        Some(out)
    }

    /// A non-negative integer constant: a literal, a size or an axis name with known extent.
    fn const_int(&mut self, e: &Expr) -> Option<u64> {
        match &e.kind {
            ExprKind::Number { value, .. }
                if value.fract() == 0.0 && *value >= 0.0 && *value < 1.8e19 =>
            {
                Some(*value as u64)
            }
            ExprKind::Name(n)
                if self.axes.contains_key(&n.name) && !self.names.contains_key(&n.name) =>
            {
                self.axes.get(&n.name).map(|a| a.0)
            }
            _ => {
                self.diags.push(
                    Diagnostic::new(Code::BadArgument, "expected a non-negative integer")
                        .label(e.span, "not an integer constant")
                        .help("write an integer, or the name of a size defined with `let`"),
                );
                None
            }
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
                self.unary(UnaryFn::Neg, x, e.span)
            }
            ExprKind::Binary { op, lhs, rhs } => {
                let (a, b) = (self.expr(lhs), self.expr(rhs));
                let f = match op {
                    ast::BinOp::Add => BinaryFn::Add,
                    ast::BinOp::Sub => BinaryFn::Sub,
                    ast::BinOp::Mul => BinaryFn::Mul,
                    ast::BinOp::Div => BinaryFn::Div,
                    ast::BinOp::Lt => BinaryFn::Lt,
                    ast::BinOp::Le => BinaryFn::Le,
                    ast::BinOp::Gt => BinaryFn::Gt,
                    ast::BinOp::Ge => BinaryFn::Ge,
                    ast::BinOp::Eq => BinaryFn::Eq,
                    ast::BinOp::Ne => BinaryFn::Ne,
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

    fn unary(&mut self, f: UnaryFn, x: NodeId, span: Span) -> Option<NodeId> {
        // A function with f(0) = 0 keeps a sparse operand's format: it runs on the stored
        // entries (spec/language.md §8.2).
        let xf = self.prog.node(x).ty.format;
        let keep = xf.is_sparse() && keeps_zero(f);
        if xf.is_sparse() && !keep {
            let t = self.prog.node(x).ty.clone();
            self.note_dense(span, &format!("`{}`", f.name()), t.format, &t.shape);
        }
        let xn = self.prog.node(x);
        let ty = TensorType {
            format: if keep { xf } else { Format::Dense },
            ..xn.ty.clone()
        };
        let weak = xn.weak;
        self.push_node(NodeKind::Unary(f, x), ty, weak, span)
    }

    fn binary(&mut self, f: BinaryFn, a: NodeId, b: NodeId, span: Span) -> Option<NodeId> {
        let kept = self.kept_format(f, a, b);
        for o in [a, b] {
            if kept.is_none() && self.prog.node(o).ty.format.is_sparse() {
                let t = self.prog.node(o).ty.clone();
                self.note_dense(span, &format!("`{}`", f.name()), t.format, &t.shape);
                break;
            }
        }
        let (na, nb) = (self.prog.node(a), self.prog.node(b));
        let dtype = match (na.weak, nb.weak) {
            (true, false) => nb.ty.dtype,
            (false, true) => na.ty.dtype,
            _ => DType::promote(na.ty.dtype, nb.ty.dtype),
        };
        let weak = na.weak && nb.weak;
        let (sa, sb, pa, pb) = (na.ty.shape.clone(), nb.ty.shape.clone(), na.span, nb.span);
        let shape = self.broadcast_shapes(&sa, pa, &sb, pb)?;
        let ty = TensorType {
            dtype,
            shape,
            format: kept.unwrap_or(Format::Dense),
        };
        self.push_node(NodeKind::Binary(f, a, b), ty, weak, span)
    }

    /// Two shapes broadcast together (numpy's rule, right-aligned); the spans are the operands'.
    fn broadcast_shapes(&mut self, sa: &Shape, pa: Span, sb: &Shape, pb: Span) -> Option<Shape> {
        let rank = sa.rank().max(sb.rank());
        let mut axes = Vec::with_capacity(rank);
        for i in 0..rank {
            // Right-aligned, as numpy: slot i of the result meets slot i-(rank-r) of each operand.
            let ax = |s: &Shape| {
                let off = rank - s.rank();
                (i >= off).then(|| s.0[i - off].clone())
            };
            let (xa, xb) = (ax(sa), ax(sb));
            let axis = match (xa, xb) {
                (Some(x), None) | (None, Some(x)) => x,
                (Some(x), Some(y)) => {
                    if x.extent == y.extent {
                        if x.name.is_some() {
                            x
                        } else {
                            y
                        }
                    } else if y.extent == 1 {
                        x
                    } else if x.extent == 1 {
                        y
                    } else {
                        let show = |a: &Axis| match &a.name {
                            Some(n) => format!("`{n}`={}", a.extent),
                            None => a.extent.to_string(),
                        };
                        self.diags.push(
                            Diagnostic::new(
                                Code::BroadcastMismatch,
                                format!(
                                    "shapes {} and {} do not broadcast: {} against {}",
                                    sa,
                                    sb,
                                    show(&x),
                                    show(&y)
                                ),
                            )
                            .label(pa, format!("shape {sa}"))
                            .label(pb, format!("shape {sb}"))
                            .help("numpy's rule: aligned from the right, extents must be equal or 1; rearrange or reduce one side first"),
                        );
                        return None;
                    }
                }
                (None, None) => unreachable_axis(),
            };
            axes.push(axis);
        }
        Some(Shape(axes))
    }

    /// `where(cond, a, b)`: the three broadcast together; the dtype is `a`'s and `b`'s, by the
    /// same rules as arithmetic (a weak scalar side yields to the other).
    fn where_(&mut self, c: NodeId, a: NodeId, b: NodeId, span: Span) -> Option<NodeId> {
        let (nc, na, nb) = (self.prog.node(c), self.prog.node(a), self.prog.node(b));
        let (sc, sa, sb) = (
            nc.ty.shape.clone(),
            na.ty.shape.clone(),
            nb.ty.shape.clone(),
        );
        let (pc, pa, pb) = (nc.span, na.span, nb.span);
        let ab = self.broadcast_shapes(&sa, pa, &sb, pb)?;
        let shape = self.broadcast_shapes(&sc, pc, &ab, pa.join(pb))?;
        let (na, nb) = (self.prog.node(a), self.prog.node(b));
        let dtype = match (na.weak, nb.weak) {
            (true, false) => nb.ty.dtype,
            (false, true) => na.ty.dtype,
            _ => DType::promote(na.ty.dtype, nb.ty.dtype),
        };
        let weak = na.weak && nb.weak && self.prog.node(c).weak;
        for o in [c, a, b] {
            if self.prog.node(o).ty.format.is_sparse() {
                let t = self.prog.node(o).ty.clone();
                self.note_dense(span, "`where`", t.format, &t.shape);
                break;
            }
        }
        let ty = TensorType {
            dtype,
            shape,
            format: Format::Dense,
        };
        self.push_node(NodeKind::Where(c, a, b), ty, weak, span)
    }

    /// The format `a f b` keeps: a sparse operand's, when the result is zero wherever that
    /// operand is (`s * d`, `d * s`, `s / d`) and the sparse side does not broadcast (the result
    /// has its shape, which `binary` checks). The product of two sparse values keeps the left
    /// one's format. Otherwise `None`: the result is dense.
    fn kept_format(&self, f: BinaryFn, a: NodeId, b: NodeId) -> Option<Format> {
        let (ta, tb) = (&self.prog.node(a).ty, &self.prog.node(b).ty);
        // The other operand broadcasts to the sparse one's shape (right-aligned).
        let fits = |s: &TensorType, d: &TensorType| {
            d.shape.rank() <= s.shape.rank()
                && d.shape
                    .0
                    .iter()
                    .rev()
                    .zip(s.shape.0.iter().rev())
                    .all(|(x, y)| x.extent == y.extent || x.extent == 1)
        };
        let sides: &[(&TensorType, &TensorType)] = match f {
            BinaryFn::Mul => &[(ta, tb), (tb, ta)],
            BinaryFn::Div => &[(ta, tb)],
            _ => &[],
        };
        sides
            .iter()
            .find(|(s, d)| s.format.is_sparse() && fits(s, d))
            .map(|(s, _)| s.format)
    }

    fn call(&mut self, func: &ast::Ident, args: &[Arg], span: Span) -> Option<NodeId> {
        let name = func.name.as_str();
        let positional: Vec<&Expr> = args
            .iter()
            .filter_map(|a| match a {
                Arg::Positional(e) => Some(e),
                _ => None,
            })
            .collect();
        let kwargs: Vec<(&ast::Ident, &Expr)> = args
            .iter()
            .filter_map(|a| match a {
                Arg::Keyword { name, value } => Some((name, value)),
                _ => None,
            })
            .collect();
        let no_kwargs = |this: &mut Checker| -> Option<()> {
            if let Some((k, v)) = kwargs.first() {
                this.diags.push(
                    Diagnostic::new(
                        Code::BadArgument,
                        format!("`{name}` takes no keyword arguments"),
                    )
                    .label(k.span.join(v.span), "unexpected keyword argument"),
                );
                return None;
            }
            Some(())
        };
        let arity = |this: &mut Checker, want: &str| -> Option<NodeId> {
            let usage = match name {
                "max" | "min" | "pow" => format!("write `{name}(a, b)`"),
                "cast" => "write `cast(x, f16)`".to_string(),
                "einsum" => {
                    "write `einsum(a, b, \"i j, j k -> i k\")`: operands first, the pattern last"
                        .to_string()
                }
                _ => format!("write `{name}(x)`"),
            };
            this.diags.push(
                Diagnostic::new(
                    Code::Arity,
                    format!("`{name}` takes {want}, but {} were given", positional.len()),
                )
                .label(span, format!("{} arguments", positional.len()))
                .help(usage),
            );
            None
        };
        if name == "gelu" && !kwargs.is_empty() {
            // torch's spelling: gelu(x, approximate="none" | "tanh").
            let (k, v) = kwargs[0];
            let choice = match (&v.kind, kwargs.len()) {
                (ExprKind::Str { value }, 1) if k.name == "approximate" => match value.as_str() {
                    "none" => Some(UnaryFn::GeluErf),
                    "tanh" => Some(UnaryFn::Gelu),
                    _ => None,
                },
                _ => None,
            };
            let Some(f) = choice else {
                self.diags.push(
                    Diagnostic::new(
                        Code::BadArgument,
                        "`gelu` takes one keyword argument, approximate=\"none\" or approximate=\"tanh\"",
                    )
                    .label(k.span.join(v.span), "not approximate=\"none\" or \"tanh\"")
                    .help("gelu(x) is the tanh approximation; gelu(x, approximate=\"none\") and gelu_erf(x) are the exact erf form"),
                );
                return None;
            };
            if positional.len() != 1 {
                return arity(self, "1 argument");
            }
            let x = self.expr(positional[0])?;
            return self.unary(f, x, span);
        }
        if let Some(f) = UnaryFn::ALL
            .iter()
            .find(|f| f.name() == name && **f != UnaryFn::Neg)
        {
            no_kwargs(self)?;
            if positional.len() != 1 {
                return arity(self, "1 argument");
            }
            let x = self.expr(positional[0])?;
            return self.unary(*f, x, span);
        }
        match name {
            "max" | "min" | "pow" => {
                no_kwargs(self)?;
                if positional.len() != 2 {
                    return arity(self, "2 arguments");
                }
                let f = match name {
                    "max" => BinaryFn::Max,
                    "min" => BinaryFn::Min,
                    _ => BinaryFn::Pow,
                };
                let (a, b) = (self.expr(positional[0]), self.expr(positional[1]));
                self.binary(f, a?, b?, span)
            }
            "cast" => {
                no_kwargs(self)?;
                if positional.len() != 2 {
                    return arity(self, "2 arguments: `cast(x, DTYPE)`");
                }
                let x = self.expr(positional[0]);
                let dtype = match &positional[1].kind {
                    ExprKind::Name(n) => DType::parse(&n.name),
                    _ => None,
                };
                let Some(dtype) = dtype else {
                    self.diags.push(
                        Diagnostic::new(
                            Code::UnknownDtype,
                            "the second argument of `cast` must be a dtype",
                        )
                        .label(positional[1].span, "not a dtype")
                        .help("dtypes are f32, f64, f16 and bf16"),
                    );
                    return None;
                };
                let x = x?;
                let shape = self.prog.node(x).ty.shape.clone();
                // A cast keeps the format: it runs on the stored entries.
                let format = self.prog.node(x).ty.format;
                let ty = TensorType {
                    dtype,
                    shape,
                    format,
                };
                self.push_node(NodeKind::Cast(x), ty, false, span)
            }
            "rearrange" | "reduce" | "repeat" => {
                self.pattern_call(name, &positional, &kwargs, span)
            }
            "clamp" | "clip" => self.clamp(name, &positional, &kwargs, span),
            "where" => {
                no_kwargs(self)?;
                if positional.len() != 3 {
                    return arity(self, "3 arguments: `where(cond, a, b)`");
                }
                let ids: Vec<Option<NodeId>> = positional.iter().map(|e| self.expr(e)).collect();
                let (c, a, b) = (ids[0]?, ids[1]?, ids[2]?);
                self.where_(c, a, b, span)
            }
            "index" => self.axis_index(&positional, span, &arity, &no_kwargs),
            "sparsify" => self.sparsify(&positional, &kwargs, span),
            "dense" => {
                no_kwargs(self)?;
                if positional.len() != 1 {
                    return arity(self, "1 argument");
                }
                let x = self.expr(positional[0])?;
                let ty = TensorType {
                    format: Format::Dense,
                    ..self.prog.node(x).ty.clone()
                };
                let weak = self.prog.node(x).weak;
                self.push_node(NodeKind::Dense(x), ty, weak, span)
            }
            "einsum" => {
                let Some((pat, operands)) = positional.split_last() else {
                    return arity(
                        self,
                        "operands then a pattern: `einsum(a, b, \"i j, j k -> i k\")`",
                    );
                };
                let (pattern, pspan) = match (&pat.kind, pat.str_contents_span()) {
                    (ExprKind::Str { value }, Some(s)) => (value.clone(), s),
                    _ => {
                        self.diags.push(
                            Diagnostic::new(Code::BadArgument, "the last argument of `einsum` must be its pattern string")
                                .label(pat.span, "expected a string such as \"i j, j k -> i k\"")
                                .help("operands come first and the pattern last, as in einops: einsum(a, b, \"i j, j k -> i k\")"),
                        );
                        return None;
                    }
                };
                if operands.is_empty() {
                    return arity(self, "at least one operand before the pattern");
                }
                let ids: Vec<Option<NodeId>> = operands.iter().map(|o| self.expr(o)).collect();
                let mut lengths = Vec::new();
                for (k, v) in &kwargs {
                    let n = self.const_int(v)?;
                    lengths.push((k.name.clone(), n, k.span.join(v.span)));
                }
                let ids: Vec<NodeId> = ids.into_iter().collect::<Option<_>>()?;
                let shapes: Vec<Shape> = ids
                    .iter()
                    .map(|&i| self.prog.node(i).ty.shape.clone())
                    .collect();
                let spec = match resolve_einsum(&pattern, pspan, &shapes, &lengths) {
                    Ok(s) => s,
                    Err(d) => {
                        self.diags.push(d);
                        return None;
                    }
                };
                let nodes: Vec<&Node> = ids.iter().map(|&i| self.prog.node(i)).collect();
                let strong: Vec<DType> = nodes
                    .iter()
                    .filter(|n| !n.weak)
                    .map(|n| n.ty.dtype)
                    .collect();
                let all: Vec<DType> = nodes.iter().map(|n| n.ty.dtype).collect();
                let pool = if strong.is_empty() { all } else { strong };
                let dtype = pool
                    .into_iter()
                    .reduce(DType::promote)
                    .unwrap_or(WEAK_DTYPE);
                let out_shape = Shape(
                    spec.output
                        .iter()
                        .map(|g| {
                            let ext = g.iter().map(|&l| spec.labels[l].1).product();
                            match g.as_slice() {
                                [l] if !spec.labels[*l].0.starts_with("...") => {
                                    Axis::named(&spec.labels[*l].0, ext)
                                }
                                _ => Axis::anon(ext),
                            }
                        })
                        .collect(),
                );
                // A sampled product (SDDMM) keeps its sparse operand's format.
                let formats: Vec<Format> =
                    ids.iter().map(|&i| self.prog.node(i).ty.format).collect();
                let format = sampled_operand(&spec, &formats).map_or(Format::Dense, |i| formats[i]);
                let ty = TensorType {
                    dtype,
                    shape: out_shape,
                    format,
                };
                self.push_node(
                    NodeKind::Einsum {
                        operands: ids,
                        spec,
                    },
                    ty,
                    false,
                    span,
                )
            }
            "randn" | "rand" | "zeros" | "ones" | "arange" => {
                self.diags.push(
                    Diagnostic::new(
                        Code::UnknownFunction,
                        format!("`{name}` is an initialiser, not a function"),
                    )
                    .label(func.span, "only valid after `=` in an `input` declaration")
                    .help(format!("write `input x: f32[...] = {name}(seed=0)`")),
                );
                None
            }
            _ => {
                let mut known: Vec<&str> = UnaryFn::ALL
                    .iter()
                    .filter(|f| **f != UnaryFn::Neg)
                    .map(|f| f.name())
                    .collect();
                known.extend([
                    "max",
                    "min",
                    "pow",
                    "clamp",
                    "clip",
                    "where",
                    "index",
                    "cast",
                    "rearrange",
                    "reduce",
                    "repeat",
                    "einsum",
                    "sparsify",
                    "dense",
                ]);
                let d =
                    Diagnostic::new(Code::UnknownFunction, format!("unknown function `{name}`"))
                        .label(func.span, "not a function");
                let d = match closest(name, known.iter().copied()) {
                    Some(c) => d.help(format!("did you mean `{c}`?")),
                    None => d.help(format!("functions are {}", known.join(", "))),
                };
                self.diags.push(d);
                None
            }
        }
    }

    /// `clamp(x, lo, hi)` / `clip(x, lo, hi)`, or with `min=`/`max=` keywords (either may be
    /// left out): `min(max(x, lo), hi)`, as numpy's `clip` (NaN propagates).
    fn clamp(
        &mut self,
        name: &str,
        positional: &[&Expr],
        kwargs: &[(&ast::Ident, &Expr)],
        span: Span,
    ) -> Option<NodeId> {
        let usage = format!("write `{name}(x, lo, hi)` or `{name}(x, min=lo, max=hi)`");
        let mut bounds: [Option<&Expr>; 2] =
            [positional.get(1).copied(), positional.get(2).copied()];
        let mut bad = positional.len() > 3 || positional.is_empty();
        for (k, v) in kwargs {
            let slot = match k.name.as_str() {
                "min" => 0,
                "max" => 1,
                _ => {
                    self.diags.push(
                        Diagnostic::new(
                            Code::BadArgument,
                            format!("`{name}` takes keyword arguments `min` and `max`"),
                        )
                        .label(k.span, "unknown keyword")
                        .help(usage.clone()),
                    );
                    return None;
                }
            };
            if bounds[slot].is_some() {
                bad = true;
            }
            bounds[slot] = Some(v);
        }
        if bad || bounds.iter().all(|b| b.is_none()) {
            self.diags.push(
                Diagnostic::new(
                    Code::Arity,
                    format!("`{name}` takes a tensor and at least one bound, each given once"),
                )
                .label(span, "here")
                .help(usage),
            );
            return None;
        }
        let x = self.expr(positional[0]);
        let lo = bounds[0].map(|e| self.expr(e));
        let hi = bounds[1].map(|e| self.expr(e));
        let mut v = x?;
        if let Some(lo) = lo {
            v = self.binary(BinaryFn::Max, v, lo?, span)?;
        }
        if let Some(hi) = hi {
            v = self.binary(BinaryFn::Min, v, hi?, span)?;
        }
        Some(v)
    }

    /// `index(x, AXIS)`: the position along one axis of `x`, named (`"j"`, or a bare name that
    /// is an axis of `x`) or by position (`-1` is the last). See [`NodeKind::AxisIndex`].
    fn axis_index(
        &mut self,
        positional: &[&Expr],
        span: Span,
        arity: &dyn Fn(&mut Checker, &str) -> Option<NodeId>,
        no_kwargs: &dyn Fn(&mut Checker) -> Option<()>,
    ) -> Option<NodeId> {
        no_kwargs(self)?;
        if positional.len() != 2 {
            return arity(self, "2 arguments: `index(x, \"axis\")`");
        }
        let x = self.expr(positional[0])?;
        let shape = self.prog.node(x).ty.shape.clone();
        let dtype = match self.prog.node(x).ty.dtype {
            DType::F64 => DType::F64,
            _ => DType::F32,
        };
        let arg = positional[1];
        let names: Vec<String> = shape.0.iter().filter_map(|a| a.name.clone()).collect();
        let slot = match &arg.kind {
            ExprKind::Str { value } => shape
                .0
                .iter()
                .position(|a| a.name.as_deref() == Some(value)),
            ExprKind::Name(n) => shape
                .0
                .iter()
                .position(|a| a.name.as_deref() == Some(&n.name)),
            ExprKind::Number { value, .. } if value.fract() == 0.0 => {
                let r = shape.rank() as f64;
                let k = if *value < 0.0 { r + value } else { *value };
                (k >= 0.0 && k < r).then_some(k as usize)
            }
            ExprKind::Neg(inner) => match &inner.kind {
                ExprKind::Number { value, .. } if value.fract() == 0.0 => {
                    let r = shape.rank() as f64;
                    let k = r - value;
                    (k >= 0.0 && k < r).then_some(k as usize)
                }
                _ => None,
            },
            _ => None,
        };
        let Some(axis) = slot else {
            let d = Diagnostic::new(
                Code::BadArgument,
                format!("the second argument of `index` must be an axis of {shape}"),
            )
            .label(arg.span, "not an axis of the first argument");
            let d = match (&arg.kind, names.is_empty()) {
                (ExprKind::Str { value }, false) => match closest(value, names.iter().map(|s| s.as_str())) {
                    Some(c) => d.help(format!("did you mean \"{c}\"?")),
                    None => d.help(format!("its named axes are {}", names.join(", "))),
                },
                _ => d.help(format!(
                    "name an axis in quotes (\"{}\") or give its position (0 to {}, or -1 for the last)",
                    names.first().map_or("i", |s| s.as_str()),
                    shape.rank().saturating_sub(1)
                )),
            };
            self.diags.push(d);
            return None;
        };
        let axes = shape
            .0
            .iter()
            .enumerate()
            .map(|(k, a)| if k == axis { a.clone() } else { Axis::anon(1) })
            .collect();
        let ty = TensorType {
            dtype,
            shape: Shape(axes),
            format: Format::Dense,
        };
        self.push_node(NodeKind::AxisIndex { axis }, ty, false, span)
    }

    /// `sparsify(x, FORMAT[, threshold=T | density=D])`: FORMAT is `coo`, `csr`, `csc`,
    /// `bsr(R, C)`, `"2:4"` (along the last axis) or `"2:4(axis)"`.
    fn sparsify(
        &mut self,
        positional: &[&Expr],
        kwargs: &[(&ast::Ident, &Expr)],
        span: Span,
    ) -> Option<NodeId> {
        if positional.len() != 2 {
            self.diags.push(
                Diagnostic::new(
                    Code::Arity,
                    format!(
                        "`sparsify` takes a tensor and a format, but {} arguments were given",
                        positional.len()
                    ),
                )
                .label(span, format!("{} arguments", positional.len()))
                .help(SPARSIFY_USAGE),
            );
            return None;
        }
        let x = self.expr(positional[0]);
        let f = positional[1];
        let auto_args = match &f.kind {
            ExprKind::Name(n) if n.name == "auto" => Some(Vec::new()),
            ExprKind::Call { func, args } if func.name == "auto" => Some(args.iter().collect()),
            _ => None,
        };
        if let Some(args) = auto_args {
            return self.sparsify_auto(x?, f, &args, kwargs, span);
        }
        let ann = format_expr(f);
        let Some(ann) = ann else {
            self.diags.push(
                Diagnostic::new(
                    Code::UnknownFormat,
                    "the second argument of `sparsify` must be a format",
                )
                .label(f.span, "not a format")
                .help("formats are coo, csr, csc, bsr(R, C) and \"2:4\" (or \"2:4(axis)\")"),
            );
            return None;
        };
        if ann.name.name == "dense" {
            self.diags.push(
                Diagnostic::new(Code::UnknownFormat, "`sparsify` needs a sparse format")
                    .label(f.span, "dense")
                    .help("use `dense(x)` to store a tensor densely"),
            );
            return None;
        }
        let x = x?;
        let xty = self.prog.node(x).ty.clone();
        let format = self.format(&ann, &xty.shape, xty.shape.rank())?;
        let select = self.sparsify_select(kwargs, matches!(format, Format::TwoFour { .. }))?;
        let ty = TensorType { format, ..xty };
        self.push_node(NodeKind::Sparsify { x, select }, ty, false, span)
    }

    /// The `threshold=` or `density=` of a `sparsify` (`two_four`: the format is, or may be,
    /// 2:4, which takes no `density=`).
    fn sparsify_select(
        &mut self,
        kwargs: &[(&ast::Ident, &Expr)],
        two_four: bool,
    ) -> Option<Select> {
        let mut select = Select::All;
        for (k, v) in kwargs {
            let value = match &v.kind {
                ExprKind::Number { value, .. } => Some(*value),
                ExprKind::Neg(inner) => match &inner.kind {
                    ExprKind::Number { value, .. } => Some(-*value),
                    _ => None,
                },
                _ => None,
            };
            let bad = |this: &mut Checker, msg: &str| {
                this.diags.push(
                    Diagnostic::new(Code::BadArgument, msg.to_string())
                        .label(k.span.join(v.span), "here")
                        .help(SPARSIFY_USAGE),
                );
            };
            if select != Select::All {
                bad(self, "`sparsify` takes one of `threshold=` and `density=`");
                return None;
            }
            match (k.name.as_str(), value) {
                ("threshold", Some(t)) if t.is_finite() && t >= 0.0 => {
                    select = Select::Threshold(t)
                }
                ("threshold", _) => {
                    bad(self, "`threshold=` must be a number of at least 0");
                    return None;
                }
                ("density", _) if two_four => {
                    bad(
                        self,
                        "2:4 always keeps 2 of every 4 values: it takes no `density=`",
                    );
                    return None;
                }
                ("density", Some(d)) if (0.0..=1.0).contains(&d) => select = Select::Density(d),
                ("density", _) => {
                    bad(self, "`density=` must be a number between 0 and 1");
                    return None;
                }
                (other, _) => {
                    bad(self, &format!("`sparsify` has no argument `{other}=`"));
                    return None;
                }
            }
        }
        Some(select)
    }

    /// `sparsify(x, auto, …)` or `sparsify(x, auto(F, …), …)`: the format is chosen after
    /// checking, by predicted time (`plan::auto`). Until then the value is `dense(x)`, so a
    /// program nobody resolves means the dense choice. Candidates: the listed formats (a bare
    /// `bsr` means the default block sizes), else `bsr(32, 32)` and `bsr(16, 16)` where they
    /// divide the shape, and `csr`; 2:4 only when listed. Sparse products need rank 2, so other
    /// ranks have no candidates and stay dense.
    fn sparsify_auto(
        &mut self,
        x: NodeId,
        f: &Expr,
        args: &[&Arg],
        kwargs: &[(&ast::Ident, &Expr)],
        span: Span,
    ) -> Option<NodeId> {
        let xty = self.prog.node(x).ty.clone();
        let ext = xty.shape.extents();
        let default_bsr = |out: &mut Vec<Format>| {
            if let [r, c] = ext.as_slice() {
                for b in [32, 16] {
                    if r.is_multiple_of(b) && c.is_multiple_of(b) && *r > 0 && *c > 0 {
                        out.push(Format::Bsr { rows: b, cols: b });
                    }
                }
            }
        };
        let mut candidates = Vec::new();
        if args.is_empty() {
            default_bsr(&mut candidates);
            if xty.shape.rank() == 2 {
                candidates.push(Format::Csr);
            }
        }
        for a in args {
            let ann = match a {
                Arg::Positional(e) => format_expr(e),
                Arg::Keyword { .. } => None,
            };
            let Some(ann) = ann else {
                self.diags.push(
                    Diagnostic::new(
                        Code::UnknownFormat,
                        "the arguments of `auto` must be sparse formats",
                    )
                    .label(f.span, "not a list of formats")
                    .help("write `auto`, or list candidates: `auto(csr, bsr(16, 16), \"2:4\")`"),
                );
                return None;
            };
            if ann.name.name == "bsr" && ann.args.is_empty() {
                default_bsr(&mut candidates);
                continue;
            }
            if ann.name.name == "dense" {
                continue;
            }
            let format = self.format(&ann, &xty.shape, xty.shape.rank())?;
            if !candidates.contains(&format) {
                candidates.push(format);
            }
        }
        let two_four = candidates
            .iter()
            .any(|c| matches!(c, Format::TwoFour { .. }));
        let select = self.sparsify_select(kwargs, two_four)?;
        let ty = TensorType {
            format: Format::Dense,
            ..xty
        };
        let weak = self.prog.node(x).weak;
        let node = self.push_node(NodeKind::Dense(x), ty, weak, span)?;
        self.prog.auto_formats.push(AutoFormat {
            node,
            x,
            select,
            candidates,
            span,
            choice: None,
        });
        Some(node)
    }

    fn pattern_call(
        &mut self,
        name: &str,
        positional: &[&Expr],
        kwargs: &[(&ast::Ident, &Expr)],
        span: Span,
    ) -> Option<NodeId> {
        let op = match name {
            "rearrange" => PatternOp::Rearrange,
            "reduce" => PatternOp::Reduce,
            _ => PatternOp::Repeat,
        };
        let want = if op == PatternOp::Reduce { 3 } else { 2 };
        if positional.len() != want {
            let usage = match op {
                PatternOp::Reduce => "3 arguments: `reduce(x, \"PATTERN\", \"OP\")`",
                PatternOp::Rearrange => {
                    "2 arguments and axis lengths: `rearrange(x, \"PATTERN\", h=8)`"
                }
                PatternOp::Repeat => "2 arguments and axis lengths: `repeat(x, \"PATTERN\", c=3)`",
            };
            self.diags.push(
                Diagnostic::new(
                    Code::Arity,
                    format!(
                        "`{name}` takes {usage}, but {} positional arguments were given",
                        positional.len()
                    ),
                )
                .label(span, format!("{} positional arguments", positional.len())),
            );
            return None;
        }
        let x = self.expr(positional[0]);
        let pat = positional[1];
        let (pattern, pspan) = match (&pat.kind, pat.str_contents_span()) {
            (ExprKind::Str { value }, Some(s)) => (value.clone(), s),
            _ => {
                self.diags.push(
                    Diagnostic::new(
                        Code::BadArgument,
                        format!("the second argument of `{name}` must be a pattern string"),
                    )
                    .label(pat.span, "expected a string such as \"b h w -> b (h w)\""),
                );
                return None;
            }
        };
        let reduce = if op == PatternOp::Reduce {
            let r = positional[2];
            let (text, rspan) = match &r.kind {
                ExprKind::Str { value } => (value.clone(), r.span),
                ExprKind::Name(n) => (n.name.clone(), n.span),
                _ => (String::new(), r.span),
            };
            match ReduceOp::parse(&text) {
                Some(op) => Some(op),
                None => {
                    let names = ReduceOp::ALL.map(|o| o.name());
                    let d = Diagnostic::new(
                        Code::UnknownReduceOp,
                        format!("unknown reduce op `{text}`"),
                    )
                    .label(rspan, "not a reduce op");
                    let d = match closest(&text, names.iter().copied()) {
                        Some(c) => d.help(format!("did you mean \"{c}\"? ops are \"sum\", \"mean\", \"max\", \"min\" and \"prod\"")),
                        None => d.help("ops are \"sum\", \"mean\", \"max\", \"min\" and \"prod\""),
                    };
                    self.diags.push(d);
                    return None;
                }
            }
        } else {
            None
        };
        let mut lengths = Vec::new();
        for (k, v) in kwargs {
            let n = self.const_int(v)?;
            lengths.push((k.name.clone(), n, k.span.join(v.span)));
        }
        let x = x?;
        let xn = self.prog.node(x);
        let dtype = xn.ty.dtype;
        let recipe = match resolve_pattern(op, &pattern, pspan, &xn.ty.shape, &lengths) {
            Ok(r) => r,
            Err(d) => {
                self.diags.push(d);
                return None;
            }
        };
        let shape = Shape(
            recipe
                .out_extents()
                .into_iter()
                .zip(&recipe.out_names)
                .map(|(ext, n)| Axis {
                    name: n.clone(),
                    extent: ext,
                })
                .collect(),
        );
        let xfmt = self.prog.node(x).ty.format;
        let format = if op == PatternOp::Rearrange {
            flow_through_rearrange(xfmt, &recipe)
        } else {
            Format::Dense
        };
        if xfmt.is_sparse() && !format.is_sparse() && reduce.is_none() {
            self.note_dense(
                span,
                &format!("`{name}`"),
                xfmt,
                &self.prog.node(x).ty.shape.clone(),
            );
        }
        let ty = TensorType {
            dtype,
            shape,
            format,
        };
        self.push_node(
            NodeKind::Pattern {
                op,
                reduce,
                x,
                recipe,
            },
            ty,
            false,
            span,
        )
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
pub fn keeps_zero(f: UnaryFn) -> bool {
    matches!(
        f,
        UnaryFn::Neg
            | UnaryFn::Abs
            | UnaryFn::Relu
            | UnaryFn::Sqrt
            | UnaryFn::Square
            | UnaryFn::Tanh
            | UnaryFn::Sin
            | UnaryFn::Gelu
            | UnaryFn::Erf
            | UnaryFn::GeluErf
            | UnaryFn::Silu
            | UnaryFn::Log1p
            | UnaryFn::Expm1
            | UnaryFn::Floor
            | UnaryFn::Ceil
            | UnaryFn::Round
            | UnaryFn::Sign
    )
}

const SPARSIFY_USAGE: &str = "write `sparsify(w, csr, density=0.1)`, `sparsify(w, bsr(32, 32), threshold=0.5)`, `sparsify(w, \"2:4\")` or `sparsify(w, auto, density=0.1)`";

/// A format written as an expression (`csr`, `bsr(16, 8)`, `"2:4"`, `"2:4(k)"`), as an
/// annotation; `None` if the expression is not one.
fn format_expr(f: &Expr) -> Option<ast::FormatAnn> {
    match &f.kind {
        ExprKind::Name(n) => Some(ast::FormatAnn {
            name: n.clone(),
            args: Vec::new(),
            span: f.span,
        }),
        ExprKind::Call { func, args } => {
            let args: Option<Vec<FormatArg>> = args
                .iter()
                .map(|a| match a {
                    Arg::Positional(Expr {
                        kind: ExprKind::Number { value, .. },
                        span,
                    }) if value.fract() == 0.0 && *value >= 0.0 && *value < 1e15 => {
                        Some(FormatArg::Int(ast::IntLit {
                            value: *value as u64,
                            span: *span,
                        }))
                    }
                    Arg::Positional(Expr {
                        kind: ExprKind::Name(n),
                        ..
                    }) => Some(FormatArg::Name(n.clone())),
                    _ => None,
                })
                .collect();
            args.map(|args| ast::FormatAnn {
                name: func.clone(),
                args,
                span: f.span,
            })
        }
        ExprKind::Str { value } => {
            let inner = f.str_contents_span().unwrap_or(f.span);
            let v = value.trim();
            if v == "2:4" {
                Some(ast::FormatAnn {
                    name: ast::Ident {
                        name: "2:4".into(),
                        span: inner,
                    },
                    args: Vec::new(),
                    span: f.span,
                })
            } else {
                let axis = v.strip_prefix("2:4(").and_then(|r| r.strip_suffix(')'));
                axis.map(|axis| ast::FormatAnn {
                    name: ast::Ident {
                        name: "2:4".into(),
                        span: inner,
                    },
                    args: vec![FormatArg::Name(ast::Ident {
                        name: axis.trim().to_string(),
                        span: inner,
                    })],
                    span: f.span,
                })
            }
        }
        _ => None,
    }
}
