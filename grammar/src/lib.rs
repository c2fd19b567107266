//! tdsl-syntax: text → AST.
//!
//! `grammar/tdsl.pest` is the one definition of the syntax. [`parse_script`] reads a whole
//! script, [`parse_repl_line`] one REPL line and [`parse_expr`] a lone expression (what the Rust
//! macros embed); [`pattern`] checks pattern strings as far as no shapes are needed (what the
//! Rust macros do at compile time). Every AST node carries a byte [`Span`]. This crate infers
//! nothing: it does not know extents, dtypes, formats or which functions exist (that is
//! `tdsl::check`), and it depends on pest alone, so the pest boundary stays thin enough to
//! replace.

#![forbid(unsafe_code)]

pub mod ast;
pub mod depth;
pub mod error;
mod lower;
pub mod pattern;
pub mod pretty;
pub mod span;
pub mod suggest;

pub use error::{SyntaxError, SyntaxErrorKind};
pub use span::{line_col, SourceFile, SourceMap, Span};

use pest::Parser;

/// The pest parser generated from `tdsl.pest`.
#[derive(pest_derive::Parser)]
#[grammar = "tdsl.pest"]
pub struct TdslParser;

/// Parses a whole script.
pub fn parse_script(text: &str) -> Result<ast::Script, SyntaxError> {
    parse_script_at(text, 0)
}

/// Parses a whole script that lies at offset `base` of a session's source space (a
/// [`SourceMap`]): every span of the AST and of the error is `base` plus its offset in `text`.
pub fn parse_script_at(text: &str, base: u32) -> Result<ast::Script, SyntaxError> {
    let lower = lower::Lower {
        base: base as usize,
    };
    let mut pairs = parse_with_detail(Rule::script, text, base)?;
    match pairs.next() {
        Some(p) => lower.lower_script(p),
        None => Ok(ast::Script::default()),
    }
}

/// Parses one REPL line: a statement, a bare expression, or nothing.
pub fn parse_repl_line(text: &str) -> Result<ast::ReplLine, SyntaxError> {
    parse_repl_line_at(text, 0)
}

/// Parses one REPL line that lies at offset `base` of a session's source space.
pub fn parse_repl_line_at(text: &str, base: u32) -> Result<ast::ReplLine, SyntaxError> {
    let lower = lower::Lower {
        base: base as usize,
    };
    let mut pairs = parse_with_detail(Rule::repl_line, text, base)?;
    match pairs.next() {
        Some(p) => lower.lower_repl_line(p),
        None => Ok(ast::ReplLine::Empty),
    }
}

/// Parses a lone expression such as `einsum(a, b, "i j, j k -> i k")`.
pub fn parse_expr(text: &str) -> Result<ast::Expr, SyntaxError> {
    let mut pairs = parse_with_detail(Rule::expr_only, text, 0)?;
    match pairs.next() {
        Some(p) => lower::Lower { base: 0 }.lower_expr_only(p),
        None => Err(SyntaxError {
            kind: SyntaxErrorKind::Unexpected,
            message: "expected an expression".into(),
            span: Span::new(0, 0),
            expected: vec!["an expression".into()],
        }),
    }
}

/// Words for the rules a user might be expecting at an error position.
fn rule_words(rule: Rule) -> Option<&'static str> {
    Some(match rule {
        Rule::EOI => "end of input",
        Rule::ident => "a name",
        Rule::int => "an integer",
        Rule::number => "a number",
        Rule::string => "a string",
        Rule::expr | Rule::paren | Rule::call | Rule::neg => "an expression",
        Rule::add | Rule::sub | Rule::mul | Rule::div => "an operator",
        Rule::lt | Rule::le | Rule::gt | Rule::ge | Rule::eq | Rule::ne => "an operator",
        Rule::let_stmt | Rule::input_stmt | Rule::output_stmt | Rule::assign_stmt => "a statement",
        Rule::kw_let => "`let`",
        Rule::kw_input => "`input`",
        Rule::kw_output => "`output`",
        Rule::axis_decl | Rule::axis_sized => "an axis",
        Rule::format_ann => "`@ FORMAT`",
        Rule::format_arg => "a format argument",
        Rule::init => "`= INIT`",
        Rule::kwarg => "a keyword argument",
        _ => return None,
    })
}

fn parse_with_detail(
    rule: Rule,
    text: &str,
    base: u32,
) -> Result<pest::iterators::Pairs<'_, Rule>, SyntaxError> {
    // Detailed attempts let errors point at the furthest position any rule reached and name the
    // literal tokens expected there (`,` or `]`), not just the last rule tried.
    static DETAIL: std::sync::Once = std::sync::Once::new();
    DETAIL.call_once(|| pest::set_error_detail(true));
    let at_base = |mut e: SyntaxError| {
        e.span = Span::new(
            base as usize + e.span.start as usize,
            base as usize + e.span.end as usize,
        );
        e
    };
    depth::check(text).map_err(at_base)?;
    TdslParser::parse(rule, text).map_err(|e| at_base(convert(e, text)))
}

fn convert(e: pest::error::Error<Rule>, text: &str) -> SyntaxError {
    use pest::error::{ErrorVariant, InputLocation};
    let (mut start, mut end) = match e.location {
        InputLocation::Pos(p) => (p, p),
        InputLocation::Span((s, e)) => (s, e),
    };
    let mut tokens: Vec<String> = Vec::new();
    if let Some(att) = e.parse_attempts() {
        if att.max_position >= start && att.max_position <= text.len() {
            if att.max_position > start {
                start = att.max_position;
                end = start;
            }
            tokens = att
                .expected_tokens()
                .iter()
                .map(|t| match t.to_string().as_str() {
                    "\n" | "\r\n" | "\r" => "a line break".to_string(),
                    other => format!("`{other}`"),
                })
                .filter(|t| {
                    !matches!(
                        t.as_str(),
                        "`BUILTIN_RULE`" | "` `" | "`\t`" | "`#`" | "`\\`"
                    )
                })
                .collect();
            for cs in att.call_stacks() {
                if let Some(w) = cs.deepest.get_rule().and_then(|r| rule_words(*r)) {
                    tokens.push(w.to_string());
                }
            }
        }
    }
    // Underline the offending token (up to the next whitespace), or one character.
    let rest = &text[start.min(text.len())..];
    let tok_len = rest
        .char_indices()
        .find(|&(_, c)| c.is_whitespace() || c == ',' || c == ')' || c == '(')
        .map(|(i, _)| i)
        .unwrap_or(rest.len());
    let tok_len = if tok_len == 0 {
        rest.chars().next().map(|c| c.len_utf8()).unwrap_or(0)
    } else {
        tok_len
    };
    let end = end.max(start + tok_len).min(text.len());
    let found = if start >= text.len() {
        "end of input".to_string()
    } else {
        let t = &text[start..end];
        if t.trim().is_empty() {
            "a line break".to_string()
        } else {
            format!("`{t}`")
        }
    };
    let mut expected: Vec<String> = if !tokens.is_empty() {
        tokens
    } else {
        match &e.variant {
            ErrorVariant::ParsingError { positives, .. } => positives
                .iter()
                .filter_map(|r| rule_words(*r))
                .map(String::from)
                .collect(),
            ErrorVariant::CustomError { message } => vec![message.clone()],
        }
    };
    // Character classes (`a..z`, `0..9`, `"`) say less than the thing they start.
    let starts_expr = expected.iter().any(|t| t == "`0..9`");
    let starts_name = expected.iter().any(|t| t == "`a..z`");
    if starts_expr || starts_name {
        expected.retain(|t| {
            !matches!(
                t.as_str(),
                "`0..9`" | "`a..z`" | "`A..Z`" | "`_`" | "`\"`" | "`'`" | "`(`" | "`-`" | "`.`"
            )
        });
        expected.push(
            if starts_expr {
                "an expression"
            } else {
                "a name"
            }
            .to_string(),
        );
    }
    // A statement can only start after a line break, which is already in the list.
    if expected.iter().any(|t| t.starts_with('`')) {
        expected.retain(|t| t != "a statement");
    }
    expected.sort();
    expected.dedup();
    let message = if expected.is_empty() {
        format!("unexpected {found}")
    } else {
        format!("unexpected {found}; expected {}", join_or(&expected))
    };
    SyntaxError {
        kind: SyntaxErrorKind::Unexpected,
        message,
        span: Span::new(start, end),
        expected,
    }
}

fn join_or(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [a] => a.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests;
