//! `repl`: lines as `tdsl repl` reads them from a pipe.
//!
//! The REPL's session (`tdsl::cli::repl`) is private, so this target does what its line handler
//! does with the public pieces it is built from: `parse_repl_line` (several statements on one
//! line parsed as a script), one session-long `Checker` that each line is checked on a copy of
//! (kept only when the line had no errors), bare expressions checked on a scratch copy, and the
//! cost of the session's program after each statement. Commands (`:time`, `:load`, …) are
//! skipped: they read and write files and run kernels. Spans are not shifted into the session's
//! transcript (that code is private too): diagnostics are rendered against their own line.

use std::collections::BTreeMap;

use tdsl::check::{Assign, Checker, Program};
use tdsl::plan::cost::stored;
use tdsl_syntax::ast::{Expr, ReplLine, Stmt, StmtKind};

use super::Ctx;

/// Lines per input (the rest is ignored).
const MAX_LINES: usize = 64;

pub fn run(input: &[u8], ctx: &mut Ctx) {
    let text = String::from_utf8_lossy(input);
    let mut checker = Checker::new(BTreeMap::new());
    for line in text.split('\n').take(MAX_LINES) {
        let line = line.trim_end_matches('\r');
        if line.trim_start().starts_with(':') {
            ctx.stage("command");
            continue;
        }
        match tdsl_syntax::parse_repl_line(line) {
            Ok(ReplLine::Empty) => ctx.stage("empty"),
            Ok(ReplLine::Stmt(s)) => stmt(&mut checker, s, line, ctx),
            Ok(ReplLine::Expr(e)) => bare_expr(&checker, &e, line, ctx),
            Err(e) => match tdsl_syntax::parse_script(line) {
                Ok(script) if script.stmts.len() > 1 => {
                    ctx.stage("several");
                    for s in script.stmts {
                        stmt(&mut checker, s, line, ctx);
                    }
                }
                _ => {
                    ctx.stage("syntax-error");
                    if e.kind == tdsl_syntax::SyntaxErrorKind::TooDeep {
                        ctx.stage("too-deep");
                    }
                    ctx.diag(&tdsl::syntax_diagnostic(e), "<repl>", line);
                }
            },
        }
    }
}

fn cost(p: &Program, ctx: &mut Ctx) {
    let mut p = p.clone();
    let st: Vec<_> = p.inputs.iter().map(|i| stored(&i.ty, None)).collect();
    ctx.cli.resolve_auto(&mut p, &st, &[]);
    let c = ctx.cli.cost(&p, &st, &[]);
    if c.statements.iter().any(|s| !s.sparse_ops.is_empty()) {
        ctx.stage("sparse-ops");
    }
}

fn stmt(checker: &mut Checker, s: Stmt, line: &str, ctx: &mut Ctx) {
    let mut next = checker.clone();
    next.collect_extents(std::slice::from_ref(&s));
    next.stmt(&s);
    let diags = next.take_diagnostics();
    if !diags.is_empty() {
        ctx.stage("stmt-error");
        ctx.diags(&diags, "<repl>", line);
        return;
    }
    ctx.stage("stmt");
    *checker = next;
    if let StmtKind::Assign { .. } = s.kind {
        cost(&checker.prog, ctx);
    }
}

fn bare_expr(checker: &Checker, e: &Expr, line: &str, ctx: &mut Ctx) {
    let mut scratch = checker.clone();
    let node = scratch.expr(e);
    let diags = scratch.take_diagnostics();
    if !diags.is_empty() {
        ctx.stage("expr-error");
        ctx.diags(&diags, "<repl>", line);
        return;
    }
    let Some(node) = node else {
        ctx.stage("no-value");
        return;
    };
    ctx.stage("expr");
    let mut p = scratch.prog;
    p.assigns.push(Assign {
        name: "_".into(),
        node,
        span: e.span,
        name_span: e.span,
    });
    cost(&p, ctx);
}
