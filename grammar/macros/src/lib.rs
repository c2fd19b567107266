//! tdsl-macros: `einsum!`, `rearrange!`, `reduce!`, `repeat!` and `program!`, re-exported by
//! `tdsl`. Use them through `tdsl::einsum!` and friends; this crate is not meant to be used alone.
//!
//! At compile time each macro parses its string literal with tdsl-syntax, the crate that holds
//! the grammar (`parse_script` for `program!`, `tdsl_syntax::pattern` for patterns), and turns
//! every error that needs no shapes into a `compile_error!` on the literal: syntax, an axis on one
//! side only, a duplicate axis, bad parentheses or `...`, an unknown reduce op, an axis length
//! that names no axis, and the number of einsum operands. Stable Rust cannot point inside a
//! string literal, so the message gives the line and column inside the string and repeats that
//! line with a caret under the offending axis.
//!
//! The expansion calls into `::tdsl::api::__private`: a `static` call site that builds a
//! one-statement program for the operands' dtypes and shapes on first use, checks it (extents,
//! ranks) and JIT-compiles it, and reuses it on every later call with the same shapes. The
//! pattern macros evaluate to `Result<tdsl::Tensor, tdsl::Diagnostics>`; `program!` to a
//! `tdsl::Program` built once per call site.
//!
//! This crate depends on tdsl-syntax only (never on `tdsl`, which re-exports it).

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, Ident, LitStr, Token};
use tdsl_syntax::pattern::{self, At, Keyword, PatternError, PatternOp};

/// One macro argument: `name = value` or an expression.
enum Arg {
    Keyword { name: Ident, value: Expr },
    Positional(Expr),
}

impl Parse for Arg {
    fn parse(input: ParseStream) -> syn::Result<Arg> {
        if input.peek(Ident) && input.peek2(Token![=]) && !input.peek2(Token![==]) {
            let name: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            let value: Expr = input.parse()?;
            return Ok(Arg::Keyword { name, value });
        }
        Ok(Arg::Positional(input.parse()?))
    }
}

struct Args(Vec<Arg>);

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Args> {
        let list = Punctuated::<Arg, Token![,]>::parse_terminated(input)?;
        Ok(Args(list.into_iter().collect()))
    }
}

/// The string literal an expression is, if it is one.
fn as_lit_str(e: &Expr) -> Option<&LitStr> {
    match e {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        }) => Some(s),
        Expr::Group(g) => as_lit_str(&g.expr),
        _ => None,
    }
}

fn error(span: Span, message: impl std::fmt::Display) -> TokenStream {
    syn::Error::new(span, message).to_compile_error().into()
}

/// `line L, column C` of byte `offset` in `text`, and that line with a caret line under
/// `offset..end`.
fn locate(text: &str, offset: usize, end: usize) -> (String, String) {
    let (line, col) = tdsl_syntax::line_col(text, offset);
    let line_start = text[..offset.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let line_end = text[line_start..]
        .find('\n')
        .map_or(text.len(), |i| line_start + i);
    let shown = &text[line_start..line_end];
    let width = text
        .get(offset..end.min(line_end).max(offset))
        .map_or(1, |s| s.chars().count().max(1));
    let pad: String = shown
        .chars()
        .take(col - 1)
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    (
        format!("line {line}, column {col}"),
        format!("    {shown}\n    {pad}{}", "^".repeat(width)),
    )
}

/// The text of an error pointing inside a string literal (`what` names the string): the
/// message and code, the line with a caret under `span` and its label, the other places
/// (`others`, in the same text) and the help.
fn render(
    e: &PatternError,
    text: &str,
    span: tdsl_syntax::Span,
    others: &[(tdsl_syntax::Span, String)],
    what: &str,
) -> String {
    let (at, snippet) = locate(text, span.start as usize, span.end as usize);
    let mut m = format!(
        "{} [{}]\n  at {at} of the {what}:\n{snippet} {}",
        e.message, e.code, e.label
    );
    for (s, label) in others {
        let (at, _) = locate(text, s.start as usize, s.end as usize);
        m.push_str(&format!("\n  {label}: {at}"));
    }
    if let Some(h) = &e.help {
        m.push_str(&format!("\n  help: {h}"));
    }
    m
}

/// A compile error for a pattern error: on the keyword for keyword errors, else on the literal.
fn pattern_error(
    e: &PatternError,
    lit: &LitStr,
    text: &str,
    keywords: &[&Ident],
    macro_name: &str,
) -> TokenStream {
    let others: Vec<(tdsl_syntax::Span, String)> = e
        .others
        .iter()
        .filter_map(|(a, label)| match a {
            At::Pattern(p) => Some((p.span(), label.clone())),
            At::Keyword(_) => None,
        })
        .collect();
    match e.at {
        At::Pattern(p) => error(
            lit.span(),
            render(e, text, p.span(), &others, &format!("{macro_name} pattern")),
        ),
        At::Keyword(i) => {
            let mut m = format!("{} [{}]", e.message, e.code);
            if let Some(h) = &e.help {
                m.push_str(&format!("\n  help: {h}"));
            }
            error(keywords.get(i).map_or(lit.span(), |k| k.span()), m)
        }
    }
}

/// Axis-length keywords: their names and values (when literals), in order.
struct Lengths<'a> {
    idents: Vec<&'a Ident>,
    values: Vec<&'a Expr>,
    owned: Vec<(String, Option<u64>)>,
}

impl<'a> Lengths<'a> {
    fn new(keywords: &[(&'a Ident, &'a Expr)]) -> Lengths<'a> {
        Lengths {
            idents: keywords.iter().map(|(n, _)| *n).collect(),
            values: keywords.iter().map(|(_, v)| *v).collect(),
            owned: keywords
                .iter()
                .map(|(n, v)| (n.unraw().to_string(), literal_u64(v)))
                .collect(),
        }
    }

    /// As the pattern parser takes them.
    fn keywords(&self) -> Vec<Keyword<'_>> {
        self.owned
            .iter()
            .map(|(name, value)| Keyword {
                name,
                value: *value,
            })
            .collect()
    }

    /// `("h", axis_len(4))` for the call site.
    fn tokens(&self) -> Vec<TokenStream2> {
        self.owned
            .iter()
            .zip(&self.values)
            .map(|((s, _), v)| {
                let v = u64_literal(v);
                quote_spanned! {v.span()=>
                    (#s, ::tdsl::api::__private::axis_len(#v))
                }
            })
            .collect()
    }
}

fn call_site(op: TokenStream2, pattern: &str, macro_name: &str) -> TokenStream2 {
    quote! {
        static __TDSL_CALL_SITE: ::tdsl::api::__private::CallSite =
            ::tdsl::api::__private::CallSite::new(
                #op,
                #pattern,
                #macro_name,
                ::core::file!(),
                ::core::line!(),
                ::core::column!(),
            );
    }
}

fn operand(e: &Expr) -> TokenStream2 {
    quote_spanned! {e.span()=>
        ::tdsl::api::__private::AsInput::as_input(&(#e))
    }
}

/// `tdsl::einsum!("b i k, b k j -> b i j", a, b)`: numpy's einsum over named labels, the
/// pattern first, then one operand per comma-separated operand pattern, then axis lengths for
/// labels that only appear inside groups (`einsum!("b (h d), (h d) o -> b h o", x, w, h = 4)`).
/// Evaluates to `Result<tdsl::Tensor, tdsl::Diagnostics>`.
#[proc_macro]
pub fn einsum(input: TokenStream) -> TokenStream {
    let Args(args) = syn::parse_macro_input!(input as Args);
    let usage = "einsum! takes the pattern string first, then the operands: einsum!(\"i k, k j -> i j\", a, b)";
    let Some(Arg::Positional(first)) = args.first() else {
        return error(Span::call_site(), usage);
    };
    let Some(lit) = as_lit_str(first) else {
        let hint = match args.last() {
            Some(Arg::Positional(e)) if as_lit_str(e).is_some() => {
                " (in einsum! the pattern comes first, unlike in scripts)"
            }
            _ => " (it must be a string literal, so that it can be checked at compile time)",
        };
        return error(first.span(), format!("{usage}{hint}"));
    };
    let mut operands = Vec::new();
    let mut keywords: Vec<(&Ident, &Expr)> = Vec::new();
    for a in &args[1..] {
        match a {
            Arg::Positional(e) if keywords.is_empty() => operands.push(e),
            Arg::Positional(e) => {
                return error(
                    e.span(),
                    format!("{usage} (axis lengths such as `h = 4` come last)"),
                )
            }
            Arg::Keyword { name, value } => keywords.push((name, value)),
        }
    }
    let text = lit.value();
    let lengths = Lengths::new(&keywords);
    if let Err(e) = pattern::check_einsum(&text, Some(operands.len()), &lengths.keywords()) {
        return pattern_error(&e, lit, &text, &lengths.idents, "einsum!");
    }
    let site = call_site(quote!(::tdsl::api::__private::Op::Einsum), &text, "einsum!");
    let ops = operands.iter().map(|e| operand(e));
    let lengths = lengths.tokens();
    quote! {{
        #site
        __TDSL_CALL_SITE.call(::std::vec![#(#ops),*], &[#(#lengths),*])
    }}
    .into()
}

/// An unsuffixed integer literal as a `u64` literal (`c = 1000000000000` would otherwise be
/// typed `i32` by Rust and not compile); any other expression as it is.
fn u64_literal(v: &Expr) -> TokenStream2 {
    if let Expr::Lit(syn::ExprLit {
        lit: syn::Lit::Int(i),
        ..
    }) = v
    {
        if i.suffix().is_empty() {
            let lit = syn::LitInt::new(&format!("{}u64", i.base10_digits()), i.span());
            return quote!(#lit);
        }
    }
    quote!(#v)
}

/// `tdsl::rearrange!(x, "b (h d) -> b h d", h = 8)`: einops' rearrange. Axis lengths are
/// integer expressions. Evaluates to `Result<tdsl::Tensor, tdsl::Diagnostics>`.
#[proc_macro]
pub fn rearrange(input: TokenStream) -> TokenStream {
    einops(input, PatternOp::Rearrange)
}

/// `tdsl::reduce!(x, "b s d -> b d", mean)`: einops' reduce with `sum`, `mean`, `max`, `min` or
/// `prod` (a name or a string). Evaluates to `Result<tdsl::Tensor, tdsl::Diagnostics>`.
#[proc_macro]
pub fn reduce(input: TokenStream) -> TokenStream {
    einops(input, PatternOp::Reduce)
}

/// `tdsl::repeat!(x, "h w -> h w c", c = 3)`: einops' repeat; every new named axis needs a
/// length. Evaluates to `Result<tdsl::Tensor, tdsl::Diagnostics>`.
#[proc_macro]
pub fn repeat(input: TokenStream) -> TokenStream {
    einops(input, PatternOp::Repeat)
}

fn einops(input: TokenStream, op: PatternOp) -> TokenStream {
    let Args(args) = syn::parse_macro_input!(input as Args);
    let name = op.name();
    let macro_name = format!("{name}!");
    let usage = match op {
        PatternOp::Reduce => "reduce! takes a tensor, a pattern string, a reduce op and axis lengths: reduce!(x, \"b s d -> b d\", mean)",
        PatternOp::Rearrange => "rearrange! takes a tensor, a pattern string and axis lengths: rearrange!(x, \"b (h d) -> b h d\", h = 8)",
        PatternOp::Repeat => "repeat! takes a tensor, a pattern string and axis lengths: repeat!(x, \"h w -> h w c\", c = 3)",
    };
    let mut positional = Vec::new();
    let mut keywords: Vec<(&Ident, &Expr)> = Vec::new();
    for a in &args {
        match a {
            Arg::Positional(e) if keywords.is_empty() => positional.push(e),
            Arg::Positional(e) => {
                return error(e.span(), format!("{usage} (axis lengths come last)"))
            }
            Arg::Keyword { name, value } => keywords.push((name, value)),
        }
    }
    let want = if op == PatternOp::Reduce { 3 } else { 2 };
    if positional.len() != want {
        let span = positional.get(want).map_or(Span::call_site(), |e| e.span());
        return error(
            span,
            format!(
                "{usage}, but {} positional arguments were given",
                positional.len()
            ),
        );
    }
    let Some(lit) = as_lit_str(positional[1]) else {
        return error(
            positional[1].span(),
            format!("the pattern of {macro_name} must be a string literal, so that it can be checked at compile time"),
        );
    };
    let text = lit.value();
    let reduce_op = if op == PatternOp::Reduce {
        let r = positional[2];
        let (op_name, span) = match r {
            Expr::Path(p) if p.path.get_ident().is_some() => (
                p.path.get_ident().map(Ident::to_string).unwrap_or_default(),
                r.span(),
            ),
            _ => match as_lit_str(r) {
                Some(s) => (s.value(), s.span()),
                None => {
                    return error(
                        r.span(),
                        "the reduce op is one of sum, mean, max, min, prod (a name or a string literal)",
                    )
                }
            },
        };
        if let Err(e) = pattern::check_reduce_op(&op_name) {
            let mut m = format!("{} [{}]", e.message, e.code);
            if let Some(h) = &e.help {
                m.push_str(&format!("\n  help: {h}"));
            }
            return error(span, m);
        }
        Some(op_name)
    } else {
        None
    };
    let lengths = Lengths::new(&keywords);
    if let Err(e) = pattern::parse_einops(op, &text, &lengths.keywords()) {
        return pattern_error(&e, lit, &text, &lengths.idents, &macro_name);
    }
    let op_tokens = match (&reduce_op, op) {
        (Some(r), _) => quote!(::tdsl::api::__private::Op::Reduce(#r)),
        (None, PatternOp::Rearrange) => quote!(::tdsl::api::__private::Op::Rearrange),
        (None, _) => quote!(::tdsl::api::__private::Op::Repeat),
    };
    let site = call_site(op_tokens, &text, &macro_name);
    let x = operand(positional[0]);
    let lengths = lengths.tokens();
    quote! {{
        #site
        __TDSL_CALL_SITE.call(::std::vec![#x], &[#(#lengths),*])
    }}
    .into()
}

/// The value of an unsuffixed or integer-suffixed literal, known at compile time.
fn literal_u64(e: &Expr) -> Option<u64> {
    match e {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(i),
            ..
        }) => i.base10_parse::<u64>().ok(),
        Expr::Group(g) => literal_u64(&g.expr),
        Expr::Paren(p) => literal_u64(&p.expr),
        _ => None,
    }
}

/// `tdsl::program!(r#"...script..."#)`: a `tdsl::Program`, built once per call site. The script
/// is parsed and its patterns checked at compile time; the rest of the checking (names, dtypes,
/// extents) happens when it is built, and any error there is returned by every run (see
/// `tdsl::Program::check`).
#[proc_macro]
pub fn program(input: TokenStream) -> TokenStream {
    let lit = match syn::parse::<LitStr>(input) {
        Ok(l) => l,
        Err(e) => {
            return error(
                e.span(),
                "program! takes one string literal holding a script: program!(r#\"...\"#)",
            )
        }
    };
    let text = lit.value();
    let script = match tdsl_syntax::parse_script(&text) {
        Ok(s) => s,
        Err(e) => {
            let (at, snippet) = locate(&text, e.span.start as usize, e.span.end as usize);
            let code = match e.kind {
                tdsl_syntax::SyntaxErrorKind::Unexpected => "tdsl::syntax::unexpected",
                tdsl_syntax::SyntaxErrorKind::BadNumber => "tdsl::syntax::bad_number",
                tdsl_syntax::SyntaxErrorKind::TooDeep => "tdsl::syntax::too_deep",
                tdsl_syntax::SyntaxErrorKind::ChainedComparison => {
                    "tdsl::syntax::chained_comparison"
                }
            };
            return error(
                lit.span(),
                format!(
                    "{} [{code}]\n  at {at} of the script:\n{snippet}",
                    e.message
                ),
            );
        }
    };
    if let Some(e) = pattern::check_script_patterns(&script).first() {
        return error(
            lit.span(),
            render(&e.error, &text, e.span, &e.others, "script"),
        );
    }
    quote! {{
        static __TDSL_PROGRAM: ::std::sync::OnceLock<::tdsl::Program> =
            ::std::sync::OnceLock::new();
        ::std::clone::Clone::clone(
            __TDSL_PROGRAM.get_or_init(|| ::tdsl::Program::__from_macro(#text)),
        )
    }}
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_gives_line_column_and_caret() {
        let (at, snippet) = locate("a b\nc dd e", 6, 8);
        assert_eq!(at, "line 2, column 3");
        assert_eq!(snippet, "    c dd e\n      ^^");
    }

    #[test]
    fn render_names_the_axis_and_its_place() {
        let text = "a b -> b a c";
        let e = pattern::parse_einops(PatternOp::Rearrange, text, &[]).expect_err("one side");
        let At::Pattern(p) = e.at else {
            panic!("{e:?}")
        };
        let m = render(&e, text, p.span(), &[], "rearrange! pattern");
        assert!(m.starts_with("axis `c` is on the right side"), "{m}");
        assert!(m.contains("[tdsl::pattern::axis_one_side]"), "{m}");
        assert!(m.contains("line 1, column 12"), "{m}");
        assert!(
            m.contains("    a b -> b a c\n               ^ only on the right"),
            "{m}"
        );
    }

    #[test]
    fn literals_are_read_through_groups_and_parens() {
        let e: Expr = syn::parse_str("(8)").expect("expr");
        assert_eq!(literal_u64(&e), Some(8));
        let e: Expr = syn::parse_str("h * 2").expect("expr");
        assert_eq!(literal_u64(&e), None);
        let e: Expr = syn::parse_str("\"b -> b\"").expect("expr");
        assert!(as_lit_str(&e).is_some());
    }

    #[test]
    fn arguments_split_into_keywords_and_expressions() {
        let Args(args) = syn::parse_str("x, \"a -> a\", h = 8, c == d").expect("args");
        assert!(matches!(args[0], Arg::Positional(_)));
        assert!(matches!(args[2], Arg::Keyword { .. }));
        assert!(matches!(args[3], Arg::Positional(_)));
    }
}
