//! AST → text. The printed form parses back to the same AST (up to spans), which a property
//! test checks; the REPL's `:save` and the macros' error messages use it too.

use crate::ast::*;
use std::fmt::Write;

/// Prints a script, one statement per line.
pub fn script(s: &Script) -> String {
    let mut out = String::new();
    for st in &s.stmts {
        out.push_str(&stmt(st));
        out.push('\n');
    }
    out
}

/// Prints one statement.
pub fn stmt(s: &Stmt) -> String {
    let mut out = String::new();
    match &s.kind {
        StmtKind::Let { name, value } => {
            let _ = write!(out, "let {} = {}", name.name, value.value);
        }
        StmtKind::Input(d) => {
            let _ = write!(out, "input {}: {}[", d.name.name, d.dtype.name);
            for (i, a) in d.axes.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                match a {
                    AxisDecl::Named(n) => out.push_str(&n.name),
                    AxisDecl::Fixed(n) => {
                        let _ = write!(out, "{}", n.value);
                    }
                    AxisDecl::Sized(n, v) => {
                        let _ = write!(out, "{}={}", n.name, v.value);
                    }
                }
            }
            out.push(']');
            if let Some(f) = &d.format {
                let _ = write!(out, " @ {}", f.name.name);
                if !f.args.is_empty() {
                    out.push('(');
                    for (i, a) in f.args.iter().enumerate() {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        match a {
                            FormatArg::Int(n) => {
                                let _ = write!(out, "{}", n.value);
                            }
                            FormatArg::Name(n) => out.push_str(&n.name),
                        }
                    }
                    out.push(')');
                }
            }
            if let Some(init) = &d.init {
                let _ = write!(out, " = {}", init.func.name);
                if !init.args.is_empty() {
                    out.push('(');
                    args(&mut out, &init.args);
                    out.push(')');
                }
            }
        }
        StmtKind::Assign { name, value } => {
            let _ = write!(out, "{} = {}", name.name, expr(value));
        }
        StmtKind::AssignMany { names, value } => {
            let names: Vec<&str> = names.iter().map(|n| n.name.as_str()).collect();
            let _ = write!(out, "{} = {}", names.join(", "), expr(value));
        }
        StmtKind::Output { names } => {
            out.push_str("output ");
            out.push_str(
                &names
                    .iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
    }
    out
}

/// Prints an expression with the fewest parentheses that keep its structure.
pub fn expr(e: &Expr) -> String {
    let mut out = String::new();
    write_expr(&mut out, e, 0);
    out
}

fn prec(op: BinOp) -> u8 {
    match op {
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => 1,
        BinOp::Add | BinOp::Sub => 2,
        BinOp::Mul | BinOp::Div => 3,
    }
}

/// `min_prec` is the binding strength the context requires: 0 anywhere, 4 under unary minus.
fn write_expr(out: &mut String, e: &Expr, min_prec: u8) {
    match &e.kind {
        ExprKind::Number { text, .. } => out.push_str(text),
        ExprKind::Str { value } => {
            // Strings have no escapes: quote with whichever quote the text does not hold.
            let q = if value.contains('"') { '\'' } else { '"' };
            out.push(q);
            out.push_str(value);
            out.push(q);
        }
        ExprKind::Name(n) => out.push_str(&n.name),
        ExprKind::Neg(inner) => {
            let paren = min_prec > 4;
            if paren {
                out.push('(');
            }
            out.push('-');
            write_expr(out, inner, 4);
            if paren {
                out.push(')');
            }
        }
        ExprKind::Binary { op, lhs, rhs } => {
            let p = prec(*op);
            let paren = p < min_prec;
            if paren {
                out.push('(');
            }
            // Comparisons do not chain: a comparison under another one is parenthesized.
            write_expr(out, lhs, if op.is_comparison() { p + 1 } else { p });
            let _ = write!(out, " {} ", op.symbol());
            // Left-associative: a right operand of equal precedence needs parentheses.
            write_expr(out, rhs, p + 1);
            if paren {
                out.push(')');
            }
        }
        ExprKind::Call { func, args: a } => {
            out.push_str(&func.name);
            out.push('(');
            args(out, a);
            out.push(')');
        }
    }
}

fn args(out: &mut String, a: &[Arg]) {
    for (i, arg) in a.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        match arg {
            Arg::Positional(e) => write_expr(out, e, 0),
            Arg::Keyword { name, value } => {
                out.push_str(&name.name);
                out.push('=');
                write_expr(out, value, 0);
            }
        }
    }
}
