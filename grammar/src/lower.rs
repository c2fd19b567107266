//! pest pairs → AST, one function per grammar rule, operators through a Pratt parser.
//!
//! The grammar guarantees the shape of each pair sequence; where this module still meets
//! something it did not expect, it returns a `SyntaxError` rather than panicking, so a grammar
//! change can never turn into a crash on user input.

use crate::ast::*;
use crate::error::{SyntaxError, SyntaxErrorKind};
use crate::span::Span;
use crate::Rule;
use pest::iterators::{Pair, Pairs};
use pest::pratt_parser::{Assoc, Op, PrattParser};
use std::sync::OnceLock;

type Result<T> = std::result::Result<T, SyntaxError>;

/// An internal inconsistency between grammar and lowering, reported as a syntax error.
fn shape_error(span: Span, what: &str) -> SyntaxError {
    SyntaxError {
        kind: SyntaxErrorKind::Unexpected,
        message: format!("unexpected syntax: {what}"),
        span,
        expected: Vec::new(),
    }
}

fn next<'i>(pairs: &mut Pairs<'i, Rule>, parent: Span, what: &str) -> Result<Pair<'i, Rule>> {
    pairs.next().ok_or_else(|| shape_error(parent, what))
}

/// Lowering of one parsed text that starts at offset `base` of a session's source space (0
/// for a text of its own; a `SourceMap` gives each text its base), so every span comes out
/// pointing where the text lies and no pass shifts spans afterwards.
pub(crate) struct Lower {
    pub base: usize,
}

impl Lower {
    /// The pair's span without trailing whitespace (pest includes implicit whitespace consumed
    /// while trying an optional tail, e.g. before a missing `(`).
    fn span_of(&self, pair: &Pair<'_, Rule>) -> Span {
        let s = pair.as_span();
        let trimmed = pair.as_str().trim_end_matches([' ', '\t']).len();
        Span::new(self.base + s.start(), self.base + s.start() + trimmed)
    }

    pub(crate) fn lower_script(&self, pair: Pair<'_, Rule>) -> Result<Script> {
        let mut stmts = Vec::new();
        for p in pair.into_inner() {
            if p.as_rule() == Rule::EOI {
                continue;
            }
            stmts.push(self.lower_stmt(p)?);
        }
        Ok(Script { stmts })
    }

    pub(crate) fn lower_repl_line(&self, pair: Pair<'_, Rule>) -> Result<ReplLine> {
        for p in pair.into_inner() {
            match p.as_rule() {
                Rule::EOI => {}
                Rule::expr => return Ok(ReplLine::Expr(self.lower_expr(p)?)),
                _ => return Ok(ReplLine::Stmt(self.lower_stmt(p)?)),
            }
        }
        Ok(ReplLine::Empty)
    }

    pub(crate) fn lower_expr_only(&self, pair: Pair<'_, Rule>) -> Result<Expr> {
        let span = self.span_of(&pair);
        let mut inner = pair.into_inner();
        self.lower_expr(next(&mut inner, span, "expression")?)
    }

    fn lower_stmt(&self, pair: Pair<'_, Rule>) -> Result<Stmt> {
        let span = self.span_of(&pair);
        let rule = pair.as_rule();
        let mut inner = pair.into_inner();
        let kind = match rule {
            Rule::let_stmt => {
                let _kw = next(&mut inner, span, "let")?;
                let name = self.lower_ident(next(&mut inner, span, "name")?);
                let value = self.lower_int(next(&mut inner, span, "integer")?)?;
                StmtKind::Let { name, value }
            }
            Rule::input_stmt => {
                let _kw = next(&mut inner, span, "input")?;
                let name = self.lower_ident(next(&mut inner, span, "name")?);
                let dtype = self.lower_ident(next(&mut inner, span, "dtype")?);
                let mut axes = Vec::new();
                let mut format = None;
                let mut init = None;
                for p in inner {
                    match p.as_rule() {
                        Rule::axis_decl => axes.push(self.lower_axis_decl(p)?),
                        Rule::format_ann => format = Some(self.lower_format(p)?),
                        Rule::init => init = Some(self.lower_init(p)?),
                        _ => return Err(shape_error(self.span_of(&p), "input declaration")),
                    }
                }
                StmtKind::Input(InputDecl {
                    name,
                    dtype,
                    axes,
                    format,
                    init,
                })
            }
            Rule::output_stmt => {
                let names = inner
                    .filter(|p| p.as_rule() == Rule::ident)
                    .map(|p| self.lower_ident(p))
                    .collect();
                StmtKind::Output { names }
            }
            Rule::assign_stmt => {
                let name = self.lower_ident(next(&mut inner, span, "name")?);
                let value = self.lower_expr(next(&mut inner, span, "expression")?)?;
                StmtKind::Assign { name, value }
            }
            Rule::assign_many_stmt => {
                let mut names = Vec::new();
                let mut value = None;
                for p in inner {
                    match p.as_rule() {
                        Rule::ident => names.push(self.lower_ident(p)),
                        _ => value = Some(self.lower_expr(p)?),
                    }
                }
                let value = value.ok_or_else(|| shape_error(span, "expression"))?;
                StmtKind::AssignMany { names, value }
            }
            _ => return Err(shape_error(span, "statement")),
        };
        Ok(Stmt { kind, span })
    }

    fn lower_ident(&self, pair: Pair<'_, Rule>) -> Ident {
        Ident {
            name: pair.as_str().to_string(),
            span: self.span_of(&pair),
        }
    }

    fn lower_int(&self, pair: Pair<'_, Rule>) -> Result<IntLit> {
        let span = self.span_of(&pair);
        let value = pair.as_str().parse::<u64>().map_err(|_| SyntaxError {
            kind: SyntaxErrorKind::BadNumber,
            message: format!("integer `{}` does not fit in 64 bits", pair.as_str()),
            span,
            expected: Vec::new(),
        })?;
        Ok(IntLit { value, span })
    }

    fn lower_axis_decl(&self, pair: Pair<'_, Rule>) -> Result<AxisDecl> {
        let span = self.span_of(&pair);
        let mut inner = pair.into_inner();
        let p = next(&mut inner, span, "axis")?;
        Ok(match p.as_rule() {
            Rule::ident => AxisDecl::Named(self.lower_ident(p)),
            Rule::int => AxisDecl::Fixed(self.lower_int(p)?),
            Rule::axis_sized => {
                let pspan = self.span_of(&p);
                let mut i = p.into_inner();
                let name = self.lower_ident(next(&mut i, pspan, "axis name")?);
                let n = self.lower_int(next(&mut i, pspan, "extent")?)?;
                AxisDecl::Sized(name, n)
            }
            _ => return Err(shape_error(span, "axis")),
        })
    }

    fn lower_format(&self, pair: Pair<'_, Rule>) -> Result<FormatAnn> {
        let span = self.span_of(&pair);
        let mut inner = pair.into_inner();
        let name = self.lower_ident(next(&mut inner, span, "format name")?);
        let mut args = Vec::new();
        for p in inner {
            let pspan = self.span_of(&p);
            let a = next(&mut p.into_inner(), pspan, "format argument")?;
            args.push(match a.as_rule() {
                Rule::int => FormatArg::Int(self.lower_int(a)?),
                _ => FormatArg::Name(self.lower_ident(a)),
            });
        }
        Ok(FormatAnn { name, args, span })
    }

    fn lower_init(&self, pair: Pair<'_, Rule>) -> Result<Init> {
        let span = self.span_of(&pair);
        let mut inner = pair.into_inner();
        let p = next(&mut inner, span, "initialiser")?;
        match p.as_rule() {
            Rule::ident => Ok(Init {
                func: self.lower_ident(p),
                args: Vec::new(),
                span,
            }),
            Rule::call => {
                let (func, args) = self.lower_call(p)?;
                Ok(Init { func, args, span })
            }
            _ => Err(shape_error(span, "initialiser")),
        }
    }

    fn lower_call(&self, pair: Pair<'_, Rule>) -> Result<(Ident, Vec<Arg>)> {
        let span = self.span_of(&pair);
        let mut inner = pair.into_inner();
        let func = self.lower_ident(next(&mut inner, span, "function name")?);
        let mut args = Vec::new();
        for p in inner {
            match p.as_rule() {
                Rule::kwarg => {
                    let pspan = self.span_of(&p);
                    let mut i = p.into_inner();
                    let name = self.lower_ident(next(&mut i, pspan, "keyword")?);
                    let value = self.lower_expr(next(&mut i, pspan, "value")?)?;
                    args.push(Arg::Keyword { name, value });
                }
                Rule::expr => args.push(Arg::Positional(self.lower_expr(p)?)),
                _ => return Err(shape_error(self.span_of(&p), "argument")),
            }
        }
        Ok((func, args))
    }

    fn lower_expr(&self, pair: Pair<'_, Rule>) -> Result<Expr> {
        pratt()
        .map_primary(|p| self.lower_primary(p))
        .map_prefix(|op, rhs| {
            let rhs = rhs?;
            let span = self.span_of(&op).join(rhs.span);
            Ok(Expr {
                kind: ExprKind::Neg(Box::new(rhs)),
                span,
            })
        })
        .map_infix(|lhs, op, rhs| {
            let (lhs, rhs) = (lhs?, rhs?);
            let op_span = self.span_of(&op);
            let op = match op.as_rule() {
                Rule::add => BinOp::Add,
                Rule::sub => BinOp::Sub,
                Rule::mul => BinOp::Mul,
                Rule::div => BinOp::Div,
                Rule::lt => BinOp::Lt,
                Rule::le => BinOp::Le,
                Rule::gt => BinOp::Gt,
                Rule::ge => BinOp::Ge,
                Rule::eq => BinOp::Eq,
                Rule::ne => BinOp::Ne,
                _ => return Err(shape_error(self.span_of(&op), "operator")),
            };
            if op.is_comparison() && is_bare_comparison(&lhs) {
                return Err(SyntaxError {
                    kind: SyntaxErrorKind::ChainedComparison,
                    message: format!(
                        "comparisons do not chain: `a {0} b {1} c` is neither `(a {0} b) {1} c` nor Python's `a {0} b and b {1} c`",
                        comparison_text(&lhs),
                        op.symbol()
                    ),
                    span: lhs.span.join(op_span),
                    expected: Vec::new(),
                });
            }
            let span = lhs.span.join(rhs.span);
            Ok(Expr {
                kind: ExprKind::Binary {
                    op,
                    lhs: Box::new(lhs),
                    rhs: Box::new(rhs),
                },
                span,
            })
        })
        .parse(pair.into_inner())
    }

    fn lower_primary(&self, pair: Pair<'_, Rule>) -> Result<Expr> {
        let span = self.span_of(&pair);
        let kind = match pair.as_rule() {
            Rule::number => {
                let text = pair.as_str().to_string();
                let value = text.parse::<f64>().map_err(|_| SyntaxError {
                    kind: SyntaxErrorKind::BadNumber,
                    message: format!("`{text}` is not a number"),
                    span,
                    expected: Vec::new(),
                })?;
                if !value.is_finite() {
                    return Err(SyntaxError {
                        kind: SyntaxErrorKind::BadNumber,
                        message: format!("`{text}` is too large to be a finite number"),
                        span,
                        expected: Vec::new(),
                    });
                }
                ExprKind::Number { value, text }
            }
            Rule::string => {
                let body = pair.into_inner().next().map(|p| p.as_str()).unwrap_or("");
                ExprKind::Str {
                    value: body.to_string(),
                }
            }
            Rule::ident => ExprKind::Name(self.lower_ident(pair)),
            Rule::paren => {
                let mut inner = pair.into_inner();
                let e = self.lower_expr(next(&mut inner, span, "expression")?)?;
                // Parentheses only group; the inner expression keeps its own span, widened to
                // cover the parentheses so diagnostics underline what the user wrote.
                return Ok(Expr { kind: e.kind, span });
            }
            Rule::call => {
                let (func, args) = self.lower_call(pair)?;
                ExprKind::Call { func, args }
            }
            _ => return Err(shape_error(span, "expression")),
        };
        Ok(Expr { kind, span })
    }
}

fn pratt() -> &'static PrattParser<Rule> {
    static PRATT: OnceLock<PrattParser<Rule>> = OnceLock::new();
    PRATT.get_or_init(|| {
        PrattParser::new()
            .op(Op::infix(Rule::lt, Assoc::Left)
                | Op::infix(Rule::le, Assoc::Left)
                | Op::infix(Rule::gt, Assoc::Left)
                | Op::infix(Rule::ge, Assoc::Left)
                | Op::infix(Rule::eq, Assoc::Left)
                | Op::infix(Rule::ne, Assoc::Left))
            .op(Op::infix(Rule::add, Assoc::Left) | Op::infix(Rule::sub, Assoc::Left))
            .op(Op::infix(Rule::mul, Assoc::Left) | Op::infix(Rule::div, Assoc::Left))
            .op(Op::prefix(Rule::neg))
    })
}

/// A comparison written without parentheses around it (parentheses widen a node's span past
/// its operands').
fn is_bare_comparison(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Binary { op, lhs, rhs } => {
            op.is_comparison() && e.span == lhs.span.join(rhs.span)
        }
        _ => false,
    }
}

/// The operator of a comparison node, as written.
fn comparison_text(e: &Expr) -> &'static str {
    match &e.kind {
        ExprKind::Binary { op, .. } => op.symbol(),
        _ => "<",
    }
}
