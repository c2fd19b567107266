//! `pattern`: pattern strings as the macros (at compile time and at run time), the API and the
//! checker take them.
//!
//! An input is up to four lines: `OP [REDUCE_OP]`, the pattern, the axis-length keywords
//! (`h=2 w=3`, a name alone is a keyword whose value is not known at compile time) and the
//! operand shapes (`2 12; 12 3`). Missing lines are filled in: an unknown op is chosen from the
//! bytes of the op line, missing shapes are the ranks 0 to 5 (einops) or the ranks the pattern
//! names (einsum), every extent 12.

use tdsl::check::pattern::{resolve_einsum, resolve_pattern, PatternOp};
use tdsl::check::{Axis, Shape};
use tdsl::session::{MachineModel, Options};
use tdsl::Program;
use tdsl_syntax::pattern::{self as syn, At, Keyword, PatternError};
use tdsl_syntax::Span;

use super::Ctx;

/// Pattern tokens.
pub const DICT: &[&[u8]] = &[
    b"a",
    b"b",
    b"c",
    b"h",
    b"w",
    b"i",
    b"j",
    b"k",
    b"d",
    b"batch",
    b"h2",
    b"_",
    b"(",
    b")",
    b"()",
    b"(h w)",
    b"(b 2)",
    b"...",
    b"->",
    b" -> ",
    b",",
    b", ",
    b" ",
    b"  ",
    b"1",
    b"2",
    b"3",
    b"0",
    b"12",
    b"18446744073709551615",
    b"18446744073709551616",
    b"\n",
    b"rearrange",
    b"reduce",
    b"reduce max",
    b"reduce mean",
    b"repeat",
    b"einsum",
    b"h=2",
    b"w=3",
    b"c=0",
    b"c=4",
    b"b=18446744073709551615",
    b"x=1",
    b";",
    b"ij,jk->ik",
    b"ii->i",
    b"...ij->...ji",
    b"i j, j k -> i k",
    b"b (h d) -> b h d",
    b"\"",
];

const EXTENT: u64 = 12;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Einops(PatternOp, &'static str),
    Einsum,
}

fn parse_op(line: &str) -> Op {
    let mut words = line.split_whitespace();
    let first = words.next().unwrap_or("");
    let reduce_op = |w: Option<&str>| -> &'static str {
        let w = w.unwrap_or("sum");
        syn::REDUCE_OPS
            .iter()
            .copied()
            .find(|o| *o == w)
            // An unknown name stands for itself in the checks below; the scripts get "sum".
            .unwrap_or(if w.is_empty() { "sum" } else { "nosuchop" })
    };
    match first {
        "rearrange" => Op::Einops(PatternOp::Rearrange, ""),
        "reduce" => Op::Einops(PatternOp::Reduce, reduce_op(words.next())),
        "repeat" => Op::Einops(PatternOp::Repeat, ""),
        "einsum" => Op::Einsum,
        _ => match line.bytes().map(u32::from).sum::<u32>() % 4 {
            0 => Op::Einops(PatternOp::Rearrange, ""),
            1 => Op::Einops(PatternOp::Reduce, "max"),
            2 => Op::Einops(PatternOp::Repeat, ""),
            _ => Op::Einsum,
        },
    }
}

/// `h=2 w=3 c`: names and values (`None` for a name alone or a value that is no u64).
fn parse_kwargs(line: &str) -> Vec<(String, Option<u64>)> {
    line.split(|c: char| c.is_whitespace() || c == ',')
        .filter(|t| !t.is_empty())
        .take(16)
        .map(|t| match t.split_once('=') {
            Some((n, v)) => (n.to_string(), v.parse().ok()),
            None => (t.to_string(), None),
        })
        .collect()
}

fn shape(extents: &[u64]) -> Shape {
    Shape(extents.iter().map(|&e| Axis::anon(e)).collect())
}

/// `2 12; 12 3`: one shape per operand (at most 8 operands of rank 8).
fn parse_shapes(line: &str) -> Vec<Shape> {
    line.split(';')
        .take(8)
        .map(|op| {
            let e: Vec<u64> = op
                .split_whitespace()
                .filter_map(|t| t.parse().ok())
                .take(8)
                .collect();
            shape(&e)
        })
        .collect()
}

/// The operand ranks an einsum pattern names (tdsl's spaced form: one per token but `...`).
fn einsum_ranks(pattern: &str) -> Vec<usize> {
    let lhs = pattern.split("->").next().unwrap_or("");
    lhs.split(',')
        .take(8)
        .map(|op| {
            op.split(|c: char| c.is_whitespace() || c == '(' || c == ')')
                .filter(|t| !t.is_empty() && *t != "...")
                .count()
                .min(8)
        })
        .collect()
}

/// A pattern error the macros render at compile time: its positions must be character
/// boundaries of the pattern (the macro slices the string there).
fn check_positions(e: &PatternError, pattern: &str, n_kw: usize, ctx: &mut Ctx) {
    ctx.mark(e.code.as_str().as_bytes());
    let places = std::iter::once(&e.at).chain(e.others.iter().map(|(a, _)| a));
    for at in places {
        match *at {
            At::Pattern(p) => {
                if p.lo > p.hi || p.hi > pattern.len() || !pattern.is_char_boundary(p.lo) {
                    ctx.internal(format!(
                        "pattern error {} at bytes {}..{} of a {}-byte pattern {pattern:?} (not a character range): {}",
                        e.code.as_str(),
                        p.lo,
                        p.hi,
                        pattern.len(),
                        e.message
                    ));
                }
            }
            At::Keyword(i) if i >= n_kw => ctx.internal(format!(
                "pattern error {} points at keyword {i} of {n_kw}: {}",
                e.code.as_str(),
                e.message
            )),
            At::Keyword(_) => {}
        }
    }
}

/// `y = OP(x, "PATTERN", k=v, …)`: a script line to render the checker's diagnostics against,
/// with the pattern's span and each keyword's span, as the script checker would pass them.
fn call_text(
    func: &str,
    n_operands: usize,
    pattern: &str,
    reduce_op: Option<&str>,
    kwargs: &[(String, u64)],
) -> (String, Span, Vec<(String, u64, Span)>) {
    let mut s = format!("y = {func}(");
    for i in 0..n_operands {
        s.push_str(&format!("x{}, ", i + 1));
    }
    s.push('"');
    let at = s.len();
    s.push_str(pattern);
    let pattern_span = Span::new(at, at + pattern.len());
    s.push('"');
    if let Some(op) = reduce_op {
        s.push_str(&format!(", \"{op}\""));
    }
    let mut kws = Vec::new();
    for (n, v) in kwargs {
        s.push_str(", ");
        let lo = s.len();
        s.push_str(&format!("{n}={v}"));
        kws.push((n.clone(), *v, Span::new(lo, s.len())));
    }
    s.push(')');
    (s, pattern_span, kws)
}

pub fn run(input: &[u8], ctx: &mut Ctx) {
    let text = String::from_utf8_lossy(input);
    let mut lines = text.split('\n');
    let op = parse_op(lines.next().unwrap_or(""));
    let pattern = lines.next().unwrap_or("");
    let kwargs = parse_kwargs(lines.next().unwrap_or(""));
    let shapes_line = lines.next();
    let keywords: Vec<Keyword> = kwargs
        .iter()
        .map(|(n, v)| Keyword { name: n, value: *v })
        .collect();
    let known: Vec<(String, u64)> = kwargs
        .iter()
        .filter_map(|(n, v)| v.map(|v| (n.clone(), v)))
        .collect();
    let n_kw = keywords.len();

    // The syntax crate, as the macros call it at compile time: every op, both kinds of keyword
    // lists (values known, values unknown).
    let unknown: Vec<Keyword> = keywords
        .iter()
        .map(|k| Keyword {
            name: k.name,
            value: None,
        })
        .collect();
    for o in [PatternOp::Rearrange, PatternOp::Reduce, PatternOp::Repeat] {
        for kw in [&keywords, &unknown] {
            match syn::parse_einops(o, pattern, kw) {
                Ok(p) => ctx.mark(&[1, p.left.groups.len().min(255) as u8]),
                Err(e) => check_positions(&e, pattern, n_kw, ctx),
            }
        }
    }
    for n in [None, Some(1), Some(2), Some(3)] {
        match syn::check_einsum(pattern, n, &keywords) {
            Ok(k) => ctx.mark(&[2, k.min(255) as u8]),
            Err(e) => check_positions(&e, pattern, n_kw, ctx),
        }
    }
    if let Err(e) = syn::parse_einsum(pattern, None, &unknown) {
        check_positions(&e, pattern, n_kw, ctx);
    }
    for name in kwargs.iter().map(|(n, _)| n) {
        let _ = syn::check_axis_name(name);
    }
    if let Op::Einops(PatternOp::Reduce, r) = op {
        if let Err(e) = syn::check_reduce_op(r) {
            ctx.mark(e.code.as_str().as_bytes());
        }
    }
    let _ = syn::numpy_like(pattern);

    // The checker, with shapes.
    let given: Option<Vec<Shape>> = shapes_line.map(parse_shapes);
    let reduce_op = match op {
        Op::Einops(PatternOp::Reduce, r) => Some(if r == "nosuchop" { "sum" } else { r }),
        _ => None,
    };
    let mut compile_shapes: Vec<Shape> = Vec::new();
    match op {
        Op::Einops(o, _) => {
            let (line, span, kws) = call_text(o.name(), 1, pattern, reduce_op, &known);
            let candidates: Vec<Shape> = match &given {
                Some(s) => s.iter().take(1).cloned().collect(),
                None => (0..=5).map(|r| shape(&vec![EXTENT; r])).collect(),
            };
            for s in &candidates {
                match resolve_pattern(o, pattern, span, s, &kws) {
                    Ok(recipe) => {
                        ctx.stage("resolved");
                        std::hint::black_box(&recipe);
                        if compile_shapes.is_empty() {
                            compile_shapes.push(s.clone());
                        }
                    }
                    Err(d) => ctx.diag(&d, "<pattern>", &line),
                }
            }
            if compile_shapes.is_empty() {
                compile_shapes.extend(candidates.into_iter().take(1));
            }
        }
        Op::Einsum => {
            let shapes: Vec<Shape> = match &given {
                Some(s) => s.clone(),
                None => einsum_ranks(pattern)
                    .into_iter()
                    .map(|r| shape(&vec![EXTENT; r]))
                    .collect(),
            };
            let ranks: Vec<usize> = shapes.iter().map(Shape::rank).collect();
            if let Some(sub) = syn::numpy_subscripts(pattern, &ranks) {
                ctx.stage("numpy-subscripts");
                std::hint::black_box(sub);
            }
            let (line, span, kws) = call_text("einsum", shapes.len(), pattern, None, &known);
            match resolve_einsum(pattern, span, &shapes, &kws) {
                Ok(spec) => {
                    ctx.stage("resolved-einsum");
                    std::hint::black_box(&spec);
                }
                Err(d) => ctx.diag(&d, "<pattern>", &line),
            }
            compile_shapes = shapes;
        }
    }

    // The macros' run-time route (and the API's): `Program::compile` of the script a call site
    // builds, its diagnostics moved into the pattern and printed. Slow: every 50th input.
    if ctx.heavy {
        macro_route(op, pattern, reduce_op, &known, &compile_shapes, ctx);
    }
}

/// What `tdsl::api::macros::CallSite::call` does before it runs anything.
fn macro_route(
    op: Op,
    pattern: &str,
    reduce_op: Option<&str>,
    known: &[(String, u64)],
    shapes: &[Shape],
    ctx: &mut Ctx,
) {
    let (func, names): (&str, Vec<String>) = match op {
        Op::Einsum => (
            "einsum",
            (1..=shapes.len().max(1)).map(|i| format!("x{i}")).collect(),
        ),
        Op::Einops(o, _) => (o.name(), vec!["x".to_string()]),
    };
    let mut s = String::new();
    for (i, name) in names.iter().enumerate() {
        let extents: Vec<String> = shapes
            .get(i)
            .map(|sh| sh.extents().iter().map(u64::to_string).collect())
            .unwrap_or_default();
        s.push_str(&format!("input {name}: f32[{}]\n", extents.join(", ")));
    }
    s.push_str(&format!("y = {func}("));
    if op == Op::Einsum {
        for name in &names {
            s.push_str(&format!("{name}, "));
        }
    } else {
        s.push_str("x, ");
    }
    s.push('"');
    let at = s.len();
    s.push_str(pattern);
    s.push('"');
    if let Some(r) = reduce_op {
        s.push_str(&format!(", \"{r}\""));
    }
    for (n, v) in known {
        s.push_str(&format!(", {n}={v}"));
    }
    s.push_str(")\noutput y\n");
    let opts = Options {
        machine: MachineModel::Nominal,
        ..Options::default()
    };
    match Program::compile_with(&s, opts) {
        Ok(p) => {
            ctx.stage("compiled");
            std::hint::black_box(p.checked().is_some());
        }
        Err(d) => {
            ctx.stage("compile-error");
            for x in d.iter() {
                ctx.mark(x.code.as_str().as_bytes());
            }
            // As `CallSite::remap` moves them: labels inside the pattern, relative to it.
            let (lo, hi) = (at as u32, (at + pattern.len()) as u32);
            let mut moved = tdsl::Diagnostics::default();
            for x in d.iter() {
                let mut x = x.clone();
                x.labels.retain(|l| lo <= l.span.start && l.span.end <= hi);
                for l in &mut x.labels {
                    l.span.start -= lo;
                    l.span.end -= lo;
                }
                moved.push(x);
            }
            let shown = moved.with_source("einsum! pattern", pattern);
            let text = format!("{shown}\n{d}");
            if ctx.verbose {
                println!("{text}");
            }
            std::hint::black_box(text);
        }
    }
}
