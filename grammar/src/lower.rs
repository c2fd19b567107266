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

/// The pair's span without trailing whitespace (pest includes implicit whitespace consumed
/// while trying an optional tail, e.g. before a missing `(`).
fn span_of(pair: &Pair<'_, Rule>) -> Span {
    let s = pair.as_span();
    let trimmed = pair.as_str().trim_end_matches([' ', '\t']).len();
    Span::new(s.start(), s.start() + trimmed)
}

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

pub fn lower_script(pair: Pair<'_, Rule>) -> Result<Script> {
    let mut stmts = Vec::new();
    for p in pair.into_inner() {
        if p.as_rule() == Rule::EOI {
            continue;
        }
        stmts.push(lower_stmt(p)?);
    }
    Ok(Script { stmts })
}

pub fn lower_repl_line(pair: Pair<'_, Rule>) -> Result<ReplLine> {
    for p in pair.into_inner() {
        match p.as_rule() {
            Rule::EOI => {}
            Rule::expr => return Ok(ReplLine::Expr(lower_expr(p)?)),
            _ => return Ok(ReplLine::Stmt(lower_stmt(p)?)),
        }
    }
    Ok(ReplLine::Empty)
}

pub fn lower_expr_only(pair: Pair<'_, Rule>) -> Result<Expr> {
    let span = span_of(&pair);
    let mut inner = pair.into_inner();
    lower_expr(next(&mut inner, span, "expression")?)
}

fn lower_stmt(pair: Pair<'_, Rule>) -> Result<Stmt> {
    let span = span_of(&pair);
    let rule = pair.as_rule();
    let mut inner = pair.into_inner();
    let kind = match rule {
        Rule::let_stmt => {
            let _kw = next(&mut inner, span, "let")?;
            let name = lower_ident(next(&mut inner, span, "name")?);
            let value = lower_int(next(&mut inner, span, "integer")?)?;
            StmtKind::Let { name, value }
        }
        Rule::input_stmt => {
            let _kw = next(&mut inner, span, "input")?;
            let name = lower_ident(next(&mut inner, span, "name")?);
            let dtype = lower_ident(next(&mut inner, span, "dtype")?);
            let mut axes = Vec::new();
            let mut format = None;
            let mut init = None;
            for p in inner {
                match p.as_rule() {
                    Rule::axis_decl => axes.push(lower_axis_decl(p)?),
                    Rule::format_ann => format = Some(lower_format(p)?),
                    Rule::init => init = Some(lower_init(p)?),
                    _ => return Err(shape_error(span_of(&p), "input declaration")),
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
                .map(lower_ident)
                .collect();
            StmtKind::Output { names }
        }
        Rule::assign_stmt => {
            let name = lower_ident(next(&mut inner, span, "name")?);
            let value = lower_expr(next(&mut inner, span, "expression")?)?;
            StmtKind::Assign { name, value }
        }
        Rule::assign_many_stmt => {
            let mut names = Vec::new();
            let mut value = None;
            for p in inner {
                match p.as_rule() {
                    Rule::ident => names.push(lower_ident(p)),
                    _ => value = Some(lower_expr(p)?),
                }
            }
            let value = value.ok_or_else(|| shape_error(span, "expression"))?;
            StmtKind::AssignMany { names, value }
        }
        _ => return Err(shape_error(span, "statement")),
    };
    Ok(Stmt { kind, span })
}

fn lower_ident(pair: Pair<'_, Rule>) -> Ident {
    Ident {
        name: pair.as_str().to_string(),
        span: span_of(&pair),
    }
}

fn lower_int(pair: Pair<'_, Rule>) -> Result<IntLit> {
    let span = span_of(&pair);
    let value = pair.as_str().parse::<u64>().map_err(|_| SyntaxError {
        kind: SyntaxErrorKind::BadNumber,
        message: format!("integer `{}` does not fit in 64 bits", pair.as_str()),
        span,
        expected: Vec::new(),
    })?;
    Ok(IntLit { value, span })
}

fn lower_axis_decl(pair: Pair<'_, Rule>) -> Result<AxisDecl> {
    let span = span_of(&pair);
    let mut inner = pair.into_inner();
    let p = next(&mut inner, span, "axis")?;
    Ok(match p.as_rule() {
        Rule::ident => AxisDecl::Named(lower_ident(p)),
        Rule::int => AxisDecl::Fixed(lower_int(p)?),
        Rule::axis_sized => {
            let pspan = span_of(&p);
            let mut i = p.into_inner();
            let name = lower_ident(next(&mut i, pspan, "axis name")?);
            let n = lower_int(next(&mut i, pspan, "extent")?)?;
            AxisDecl::Sized(name, n)
        }
        _ => return Err(shape_error(span, "axis")),
    })
}

fn lower_format(pair: Pair<'_, Rule>) -> Result<FormatAnn> {
    let span = span_of(&pair);
    let mut inner = pair.into_inner();
    let name = lower_ident(next(&mut inner, span, "format name")?);
    let mut args = Vec::new();
    for p in inner {
        let pspan = span_of(&p);
        let a = next(&mut p.into_inner(), pspan, "format argument")?;
        args.push(match a.as_rule() {
            Rule::int => FormatArg::Int(lower_int(a)?),
            _ => FormatArg::Name(lower_ident(a)),
        });
    }
    Ok(FormatAnn { name, args, span })
}

fn lower_init(pair: Pair<'_, Rule>) -> Result<Init> {
    let span = span_of(&pair);
    let mut inner = pair.into_inner();
    let p = next(&mut inner, span, "initialiser")?;
    match p.as_rule() {
        Rule::ident => Ok(Init {
            func: lower_ident(p),
            args: Vec::new(),
            span,
        }),
        Rule::call => {
            let (func, args) = lower_call(p)?;
            Ok(Init { func, args, span })
        }
        _ => Err(shape_error(span, "initialiser")),
    }
}

fn lower_call(pair: Pair<'_, Rule>) -> Result<(Ident, Vec<Arg>)> {
    let span = span_of(&pair);
    let mut inner = pair.into_inner();
    let func = lower_ident(next(&mut inner, span, "function name")?);
    let mut args = Vec::new();
    for p in inner {
        match p.as_rule() {
            Rule::kwarg => {
                let pspan = span_of(&p);
                let mut i = p.into_inner();
                let name = lower_ident(next(&mut i, pspan, "keyword")?);
                let value = lower_expr(next(&mut i, pspan, "value")?)?;
                args.push(Arg::Keyword { name, value });
            }
            Rule::expr => args.push(Arg::Positional(lower_expr(p)?)),
            _ => return Err(shape_error(span_of(&p), "argument")),
        }
    }
    Ok((func, args))
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

fn lower_expr(pair: Pair<'_, Rule>) -> Result<Expr> {
    pratt()
        .map_primary(lower_primary)
        .map_prefix(|op, rhs| {
            let rhs = rhs?;
            let span = span_of(&op).join(rhs.span);
            Ok(Expr {
                kind: ExprKind::Neg(Box::new(rhs)),
                span,
            })
        })
        .map_infix(|lhs, op, rhs| {
            let (lhs, rhs) = (lhs?, rhs?);
            let op_span = span_of(&op);
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
                _ => return Err(shape_error(span_of(&op), "operator")),
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

fn lower_primary(pair: Pair<'_, Rule>) -> Result<Expr> {
    let span = span_of(&pair);
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
        Rule::ident => ExprKind::Name(lower_ident(pair)),
        Rule::paren => {
            let mut inner = pair.into_inner();
            let e = lower_expr(next(&mut inner, span, "expression")?)?;
            // Parentheses only group; the inner expression keeps its own span, widened to
            // cover the parentheses so diagnostics underline what the user wrote.
            return Ok(Expr { kind: e.kind, span });
        }
        Rule::call => {
            let (func, args) = lower_call(pair)?;
            ExprKind::Call { func, args }
        }
        _ => return Err(shape_error(span, "expression")),
    };
    Ok(Expr { kind, span })
}
