//! Parser tests: statements, precedence, spans, errors, and a print/parse round-trip property.

use crate::ast::*;
use crate::{parse_expr, parse_repl_line, parse_script, pretty, Span};
use proptest::prelude::*;

fn roundtrip(src: &str) -> String {
    let s = parse_script(src).unwrap_or_else(|e| panic!("{src:?}: {}", e.message));
    pretty::script(&s)
}

#[test]
fn statements_parse_and_print() {
    let src = "let d = 64\n\
               input x: f32[batch, seq=8, d] = randn(seed=0)\n\
               input w: f16[d, 128] @ bsr(32, 32)\n\
               input m: bf16[k, n] @ 2:4(k) = zeros\n\
               h = einsum(x, w, \"batch seq d, d hidden -> batch seq hidden\")\n\
               y = reduce(rearrange(h, \"b s (g k) -> b s g k\", g=8), \"b s g k -> b s g\", \"max\")\n\
               output y, h\n";
    assert_eq!(roundtrip(src), src);
}

#[test]
fn comments_blank_lines_semicolons_and_continuations() {
    let src = "# header\n\n let n = 3 # trailing\n;input a: f32[n]; b = a *\n  2\noutput b";
    assert_eq!(
        roundtrip(src),
        "let n = 3\ninput a: f32[n]\nb = a * 2\noutput b\n"
    );
    let src = "y = einsum(\n  a,\n  b,\n  \"i j, j k -> i k\"\n)\n";
    assert_eq!(roundtrip(src), "y = einsum(a, b, \"i j, j k -> i k\")\n");
}

#[test]
fn precedence_and_parentheses() {
    for (src, printed) in [
        ("y = a + b * c", "y = a + b * c"),
        ("y = (a + b) * c", "y = (a + b) * c"),
        ("y = a - (b - c)", "y = a - (b - c)"),
        ("y = a - b - c", "y = a - b - c"),
        ("y = -a * b", "y = -a * b"),
        ("y = -(a * b)", "y = -(a * b)"),
        ("y = a / sqrt(d) / 2.5e-3", "y = a / sqrt(d) / 2.5e-3"),
        ("y = a - -b", "y = a - -b"),
    ] {
        assert_eq!(roundtrip(src).trim_end(), printed, "{src}");
    }
}

#[test]
fn spans_point_at_the_source() {
    let src = "input x: f32[b, 3]\ny = exp(x)";
    let s = parse_script(src).unwrap();
    let StmtKind::Input(d) = &s.stmts[0].kind else {
        panic!("not an input")
    };
    assert_eq!(&src[d.dtype.span.range()], "f32");
    assert_eq!(&src[d.axes[1].span().range()], "3");
    let StmtKind::Assign { value, .. } = &s.stmts[1].kind else {
        panic!("not an assignment")
    };
    assert_eq!(&src[value.span.range()], "exp(x)");
    let e = parse_expr("einsum(a, \"i j -> j\")").unwrap();
    let ExprKind::Call { args, .. } = &e.kind else {
        panic!("not a call")
    };
    let Arg::Positional(p) = &args[1] else {
        panic!("not positional")
    };
    assert_eq!(p.str_contents_span(), Some(Span::new(11, 19)));
}

#[test]
fn repl_lines() {
    assert!(matches!(parse_repl_line("").unwrap(), ReplLine::Empty));
    assert!(matches!(
        parse_repl_line("x * 2").unwrap(),
        ReplLine::Expr(_)
    ));
    assert!(matches!(
        parse_repl_line("y = x * 2").unwrap(),
        ReplLine::Stmt(_)
    ));
    assert!(matches!(
        parse_repl_line("let n = 4").unwrap(),
        ReplLine::Stmt(_)
    ));
}

#[test]
fn errors_have_positions_and_expectations() {
    let src = "input x: f32[b\ny = x";
    let e = parse_script(src).unwrap_err();
    assert_eq!(e.span.start, 15, "{}", e.message);
    assert!(e.message.contains("expected `,`, `]`"), "{}", e.message);

    let e = parse_script("y = x +").unwrap_err();
    assert_eq!(e.span.start, 7);
    assert!(e.message.contains("end of input"), "{}", e.message);

    let e = parse_script("let n = 999999999999999999999999").unwrap_err();
    assert_eq!(e.kind, crate::SyntaxErrorKind::BadNumber);

    let e = parse_script("y = 1e999").unwrap_err();
    assert_eq!(e.kind, crate::SyntaxErrorKind::BadNumber);

    // Keywords are not names.
    assert!(parse_script("input = 3").is_err());
    // But names may start with a keyword.
    assert!(parse_script("inputs = 3\nletter = 2\noutput_x = 1").is_ok());
}

#[test]
fn bad_input_never_panics() {
    for src in [
        "",
        "\n\n",
        "(",
        ")",
        "\"",
        "input",
        "input x",
        "input x:",
        "input x: f32[",
        "y = f(",
        "y = f(a,,b)",
        "@",
        "output",
        "let",
        "let x =",
        "y = \"abc",
        "é = 1",
        "y = x @ 2:4",
        "input x: f32[b] @",
        "input x: f32[b] @ bsr(",
        "y = ((((((((x",
    ] {
        let _ = parse_script(src);
        let _ = parse_repl_line(src);
        let _ = parse_expr(src);
    }
}

// ---- property: print(parse(print(ast))) is stable and parse(print(ast)) == ast up to spans ----

fn ident() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,5}".prop_filter("not a keyword", |s| {
        !["let", "input", "output"].contains(&s.as_str())
    })
}

fn id(name: String) -> Ident {
    Ident {
        name,
        span: Span::default(),
    }
}

fn ex(kind: ExprKind) -> Expr {
    Expr {
        kind,
        span: Span::default(),
    }
}

fn arb_expr() -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![
        (0u32..1000).prop_map(|n| ex(ExprKind::Number {
            value: n as f64,
            text: n.to_string()
        })),
        (0u32..100, 1u32..100).prop_map(|(a, b)| {
            let text = format!("{a}.{b}");
            ex(ExprKind::Number {
                value: text.parse().unwrap(),
                text,
            })
        }),
        ident().prop_map(|n| ex(ExprKind::Name(id(n)))),
        "[a-z ,.()>-]{0,12}".prop_map(|s| ex(ExprKind::Str { value: s })),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| ex(ExprKind::Neg(Box::new(e)))),
            (
                inner.clone(),
                inner.clone(),
                prop_oneof![
                    Just(BinOp::Add),
                    Just(BinOp::Sub),
                    Just(BinOp::Mul),
                    Just(BinOp::Div)
                ]
            )
                .prop_map(|(l, r, op)| ex(ExprKind::Binary {
                    op,
                    lhs: Box::new(l),
                    rhs: Box::new(r)
                })),
            (
                ident(),
                prop::collection::vec((prop::option::of(ident()), inner), 0..4)
            )
                .prop_map(|(f, args)| ex(ExprKind::Call {
                    func: id(f),
                    args: args
                        .into_iter()
                        .map(|(k, v)| match k {
                            Some(k) => Arg::Keyword {
                                name: id(k),
                                value: v
                            },
                            None => Arg::Positional(v),
                        })
                        .collect()
                })),
        ]
    })
}

/// Zeroes every span, so two ASTs compare by structure only.
fn strip(e: &mut Expr) {
    e.span = Span::default();
    match &mut e.kind {
        ExprKind::Name(i) => i.span = Span::default(),
        ExprKind::Neg(x) => strip(x),
        ExprKind::Binary { lhs, rhs, .. } => {
            strip(lhs);
            strip(rhs);
        }
        ExprKind::Call { func, args } => {
            func.span = Span::default();
            for a in args {
                match a {
                    Arg::Positional(x) => strip(x),
                    Arg::Keyword { name, value } => {
                        name.span = Span::default();
                        strip(value);
                    }
                }
            }
        }
        ExprKind::Number { .. } | ExprKind::Str { .. } => {}
    }
}

proptest! {
    #[test]
    fn expressions_round_trip(e in arb_expr()) {
        let printed = pretty::expr(&e);
        let mut back = parse_expr(&printed).map_err(|err| TestCaseError::fail(format!("{printed}: {}", err.message)))?;
        strip(&mut back);
        prop_assert_eq!(&back, &e, "printed: {}", printed);
        let src = format!("y = {printed}\n");
        prop_assert_eq!(roundtrip(&src), src);
    }

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,40}") {
        let _ = parse_script(&s);
        let _ = parse_repl_line(&s);
        let _ = parse_expr(&s);
    }
}

#[test]
fn texts_parsed_at_a_base_have_spans_and_errors_there() {
    let Ok(crate::ast::ReplLine::Stmt(s)) =
        crate::parse_repl_line_at("y = einsum(a, b, \"i, i ->\")", 10)
    else {
        panic!("a statement")
    };
    assert_eq!(s.span.start, 10);
    let crate::ast::StmtKind::Assign { value, .. } = &s.kind else {
        panic!()
    };
    let crate::ast::ExprKind::Call { func, .. } = &value.kind else {
        panic!()
    };
    assert_eq!(func.span, Span::new(14, 20));
    let err = crate::parse_script_at("x = (1 +", 100).unwrap_err();
    let at = crate::parse_script("x = (1 +").unwrap_err();
    assert_eq!(
        err.span,
        Span::new(at.span.start as usize + 100, at.span.end as usize + 100)
    );
    let deep = format!("x = {}1", "(".repeat(10_000));
    let err = crate::parse_script_at(&deep, 7).unwrap_err();
    assert!(err.span.start >= 7);
}
