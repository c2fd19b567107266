//! The shape-free pattern checks over every pattern call of a script.

use super::{check_einsum, check_reduce_op, parse_einops, At, Keyword, PatternError, PatternOp};
use crate::ast::{Arg, Expr, ExprKind, Ident, Script, StmtKind};
use crate::span::Span;

/// A pattern error found in a script, with spans into the script.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptPatternError {
    pub error: PatternError,
    /// The primary location: inside the pattern string, the keyword argument or the reduce op.
    pub span: Span,
    /// [`PatternError::others`], moved into the script.
    pub others: Vec<(Span, String)>,
}

/// Runs the pattern parser on every `rearrange`, `reduce`, `repeat` and `einsum` call of a
/// script whose pattern is a string literal (one error per call at most). Calls the checker
/// would reject for other reasons (wrong argument count, a pattern that is not a string) are
/// skipped: the checker reports those.
pub fn check_script_patterns(script: &Script) -> Vec<ScriptPatternError> {
    let mut out = Vec::new();
    for stmt in &script.stmts {
        if let StmtKind::Assign { value, .. } | StmtKind::AssignMany { value, .. } = &stmt.kind {
            check_expr_patterns(value, &mut out);
        }
    }
    out
}

fn check_expr_patterns(e: &Expr, out: &mut Vec<ScriptPatternError>) {
    match &e.kind {
        ExprKind::Neg(x) => check_expr_patterns(x, out),
        ExprKind::Binary { lhs, rhs, .. } => {
            check_expr_patterns(lhs, out);
            check_expr_patterns(rhs, out);
        }
        ExprKind::Call { func, args } => {
            for a in args {
                match a {
                    Arg::Positional(x) | Arg::Keyword { value: x, .. } => {
                        check_expr_patterns(x, out)
                    }
                }
            }
            if let Some(error) = check_call(&func.name, args) {
                out.push(error);
            }
        }
        ExprKind::Number { .. } | ExprKind::Str { .. } | ExprKind::Name(_) => {}
    }
}

/// The first pattern error of one call, if it is a pattern call.
fn check_call(func: &str, args: &[Arg]) -> Option<ScriptPatternError> {
    let positional: Vec<&Expr> = args
        .iter()
        .filter_map(|a| match a {
            Arg::Positional(x) => Some(x),
            Arg::Keyword { .. } => None,
        })
        .collect();
    let keywords: Vec<(&Ident, &Expr, Span)> = args
        .iter()
        .filter_map(|a| match a {
            Arg::Keyword { name, value } => Some((name, value, a.span())),
            Arg::Positional(_) => None,
        })
        .collect();
    let string = |x: &Expr| match (&x.kind, x.str_contents_span()) {
        (ExprKind::Str { value }, Some(s)) => Some((value.clone(), s)),
        _ => None,
    };
    let kw: Vec<Keyword<'_>> = keywords
        .iter()
        .map(|(name, value, _)| Keyword {
            name: &name.name,
            value: match &value.kind {
                ExprKind::Number { value, text } if text.bytes().all(|b| b.is_ascii_digit()) => {
                    Some(*value as u64)
                }
                _ => None,
            },
        })
        .collect();
    let spans: Vec<Span> = keywords.iter().map(|k| k.2).collect();
    let op = match func {
        "rearrange" => PatternOp::Rearrange,
        "reduce" => PatternOp::Reduce,
        "repeat" => PatternOp::Repeat,
        "einsum" => {
            let last = positional.last()?;
            let (pattern, base) = string(last)?;
            let error = check_einsum(&pattern, Some(positional.len() - 1), &kw).err()?;
            return Some(place(error, base, &spans));
        }
        _ => return None,
    };
    let want = if op == PatternOp::Reduce { 3 } else { 2 };
    if positional.len() != want {
        return None;
    }
    let (pattern, base) = string(positional[1])?;
    // The checker reads the reduce op before it resolves the pattern.
    if op == PatternOp::Reduce {
        let r = positional[2];
        let name = match &r.kind {
            ExprKind::Str { value } => Some(value.as_str()),
            ExprKind::Name(n) => Some(n.name.as_str()),
            _ => None,
        };
        if let Some(Err(error)) = name.map(check_reduce_op) {
            return Some(ScriptPatternError {
                error,
                span: r.span,
                others: Vec::new(),
            });
        }
    }
    let error = parse_einops(op, &pattern, &kw).err()?;
    Some(place(error, base, &spans))
}

/// Moves an error's pattern offsets to the script, where the pattern starts at `base`.
fn place(error: PatternError, base: Span, keywords: &[Span]) -> ScriptPatternError {
    let at = |a: At| match a {
        At::Pattern(p) => base.sub(p.lo, p.hi),
        At::Keyword(i) => keywords.get(i).copied().unwrap_or(base),
    };
    let span = at(error.at);
    let others = error
        .others
        .iter()
        .map(|(a, t)| (at(*a), t.clone()))
        .collect();
    ScriptPatternError {
        error,
        span,
        others,
    }
}
