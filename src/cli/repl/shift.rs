//! Session offsets: statements and diagnostics of a line are shifted to where the line sits in
//! the session's transcript (or a `:load`ed file), so every span is unique in the session.

use super::*;

pub(super) fn shift_span(s: &mut Span, by: u32) {
    s.start += by;
    s.end += by;
}

pub(super) fn shift_ident(i: &mut Ident, by: u32) {
    shift_span(&mut i.span, by);
}

pub(super) fn shift_args(args: &mut [Arg], by: u32) {
    for a in args {
        match a {
            Arg::Positional(e) => shift_expr(e, by),
            Arg::Keyword { name, value } => {
                shift_ident(name, by);
                shift_expr(value, by);
            }
        }
    }
}

pub(super) fn shift_expr(e: &mut Expr, by: u32) {
    shift_span(&mut e.span, by);
    match &mut e.kind {
        ExprKind::Number { .. } | ExprKind::Str { .. } => {}
        ExprKind::Name(i) => shift_ident(i, by),
        ExprKind::Neg(x) => shift_expr(x, by),
        ExprKind::Binary { lhs, rhs, .. } => {
            shift_expr(lhs, by);
            shift_expr(rhs, by);
        }
        ExprKind::Call { func, args } => {
            shift_ident(func, by);
            shift_args(args, by);
        }
    }
}

pub(super) fn shift_stmt(s: &mut Stmt, by: u32) {
    shift_span(&mut s.span, by);
    match &mut s.kind {
        StmtKind::Let { name, value } => {
            shift_ident(name, by);
            shift_span(&mut value.span, by);
        }
        StmtKind::Input(d) => {
            shift_ident(&mut d.name, by);
            shift_ident(&mut d.dtype, by);
            for a in &mut d.axes {
                match a {
                    AxisDecl::Named(i) => shift_ident(i, by),
                    AxisDecl::Fixed(n) => shift_span(&mut n.span, by),
                    AxisDecl::Sized(i, n) => {
                        shift_ident(i, by);
                        shift_span(&mut n.span, by);
                    }
                }
            }
            if let Some(f) = &mut d.format {
                shift_ident(&mut f.name, by);
                shift_span(&mut f.span, by);
                for a in &mut f.args {
                    match a {
                        FormatArg::Int(n) => shift_span(&mut n.span, by),
                        FormatArg::Name(i) => shift_ident(i, by),
                    }
                }
            }
            if let Some(init) = &mut d.init {
                shift_ident(&mut init.func, by);
                shift_span(&mut init.span, by);
                shift_args(&mut init.args, by);
            }
        }
        StmtKind::Assign { name, value } => {
            shift_ident(name, by);
            shift_expr(value, by);
        }
        StmtKind::AssignMany { names, value } => {
            for n in names {
                shift_ident(n, by);
            }
            shift_expr(value, by);
        }
        StmtKind::Output { names } => {
            for n in names {
                shift_ident(n, by);
            }
        }
    }
}

pub(super) fn shift_diag(mut d: Diagnostic, by: u32) -> Diagnostic {
    for l in &mut d.labels {
        shift_span(&mut l.span, by);
    }
    d
}
