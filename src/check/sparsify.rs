//! `sparsify`, `sparsify(x, auto)` and `dense`: formats chosen in the script.

use super::*;

impl Checker {
    /// `sparsify(x, FORMAT[, threshold=T | density=D])`: FORMAT is `coo`, `csr`, `csc`,
    /// `bsr(R, C)`, `"2:4"` (along the last axis) or `"2:4(axis)"`.
    pub(super) fn sparsify(
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
    pub(super) fn sparsify_select(
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
    pub(super) fn sparsify_auto(
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
}

pub(super) const SPARSIFY_USAGE: &str = "write `sparsify(w, csr, density=0.1)`, `sparsify(w, bsr(32, 32), threshold=0.5)`, `sparsify(w, \"2:4\")` or `sparsify(w, auto, density=0.1)`";

/// A format written as an expression (`csr`, `bsr(16, 8)`, `"2:4"`, `"2:4(k)"`), as an
/// annotation; `None` if the expression is not one.
pub(super) fn format_expr(f: &Expr) -> Option<ast::FormatAnn> {
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
