//! The Rust API and the macros: compile-time errors (trybuild cases in `tests/trybuild/`, with
//! their committed `.stderr`), run-time results against hand values and the reference
//! interpreter, the per-call-site kernel cache, run-time extent errors, and a differential test
//! showing that the macros' compile-time pattern checks (`tdsl_syntax::pattern`) reject only
//! what the checker (`tdsl::check::pattern`) rejects for every shape.
//!
//! Refresh the `.stderr` files with `TRYBUILD=overwrite cargo test --test macros`.

use proptest::prelude::*;
use std::collections::BTreeSet;
use tdsl::check::pattern::{resolve_einsum, resolve_pattern, PatternOp};
use tdsl::check::{Axis, Shape};
use tdsl::{Code, DType, Program, Tensor, TensorView};
use tdsl_syntax::pattern as syn_pattern;
use tdsl_syntax::Span;

type Result<T = (), E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

#[test]
fn compile_errors_point_into_the_pattern() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/trybuild/*.rs");
}

// ---------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------

fn arange(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| i as f32).collect(), shape).expect("shape")
}

/// Deterministic values in [-1, 1) that are not integers.
fn wavy(shape: &[usize], seed: u32) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 2000) as f32 / 1000.0 - 1.0)
        .collect();
    Tensor::from_vec(v, shape).expect("shape")
}

fn close(a: &Tensor, b: &Tensor) {
    assert_eq!(a.shape(), b.shape());
    assert_eq!(a.dtype(), b.dtype());
    for (x, y) in a.to_f64().iter().zip(b.to_f64()) {
        assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "{x} vs {y}");
    }
}

#[test]
fn einsum_matmul_by_hand() -> Result {
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    let b = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2])?;
    let c = tdsl::einsum!("i k, k j -> i j", a, b)?;
    assert_eq!(c.shape(), [2, 2]);
    assert_eq!(c.as_slice::<f32>(), Some(&[4.0, 5.0, 10.0, 11.0][..]));
    // Operands may be references and views.
    let view = TensorView::new(b.as_slice::<f32>().unwrap_or_default(), &[3, 2])?;
    let d = tdsl::einsum!("i k, k j -> i j", &a, view)?;
    assert_eq!(c, d);
    Ok(())
}

#[test]
fn einsum_matches_the_interpreter() -> Result {
    let a = wavy(&[2, 3, 4], 1);
    let b = wavy(&[2, 4, 5], 2);
    let got = tdsl::einsum!("b i k, b k j -> b i j", a, b)?;
    let p = Program::compile(
        "input a: f32[b, i, k]\ninput c: f32[b, k, j]\ny = einsum(a, c, \"b i k, b k j -> b i j\")\noutput y",
    )?;
    let want = p.bind("a", &a).bind("c", &b).run_reference()?;
    close(&got, &want["y"]);
    // Three operands and a trace-like contraction.
    let v = wavy(&[4], 3);
    let got = tdsl::einsum!("b i k, b k j, k -> i", a, b, v)?;
    let p = Program::compile(
        "input a: f32[b, i, k]\ninput c: f32[b, k, j]\ninput v: f32[k]\ny = einsum(a, c, v, \"b i k, b k j, k -> i\")\noutput y",
    )?;
    let want = p
        .bind("a", &a)
        .bind("c", &b)
        .bind("v", &v)
        .run_reference()?;
    close(&got, &want["y"]);
    Ok(())
}

#[test]
fn einsum_takes_axis_lengths_as_scripts_do() -> Result {
    // Heads split inside the einsum: `h` only appears in groups, so its length is a keyword.
    let x = wavy(&[2, 3, 8], 4);
    let k = wavy(&[2, 5, 8], 5);
    let heads = 2u64;
    let got = tdsl::einsum!("b s (h d), b t (h d) -> b h s t", x, k, h = heads)?;
    assert_eq!(got.shape(), [2, 2, 3, 5]);
    let p = Program::compile(
        "input x: f32[b, s, e]\ninput k: f32[b, t, e]\ny = einsum(x, k, \"b s (h d), b t (h d) -> b h s t\", h=2)\noutput y",
    )?;
    let want = p.bind("x", &x).bind("k", &k).run_reference()?;
    close(&got, &want["y"]);
    // A length the operands contradict is a run-time diagnostic with the script's code.
    let e = tdsl::einsum!("b s (h d), b t (h d) -> b h s t", x, k, h = 3u64).expect_err("8 % 3");
    assert_eq!(e.0[0].code, Code::PatternIndivisible, "{e}");
    Ok(())
}

#[test]
fn rearrange_splits_and_merges() -> Result {
    let x = arange(&[2, 6]);
    let y = tdsl::rearrange!(x, "b (h d) -> b h d", h = 3)?;
    assert_eq!(y.shape(), [2, 3, 2]);
    assert_eq!(y.as_slice::<f32>(), x.as_slice::<f32>());
    let t = tdsl::rearrange!(y, "b h d -> d (b h)")?;
    assert_eq!(t.shape(), [2, 6]);
    assert_eq!(
        t.as_slice::<f32>(),
        Some(&[0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 1.0, 3.0, 5.0, 7.0, 9.0, 11.0][..])
    );
    // Axis lengths are any integer expressions.
    let z = tdsl::rearrange!(x, "b (h d) -> b h d", h = x.shape()[1] / 3)?;
    assert_eq!(z.shape(), [2, 2, 3]);
    Ok(())
}

#[test]
fn reduce_ops_by_hand() -> Result {
    let x = arange(&[2, 2, 3]);
    let m = tdsl::reduce!(x, "b s d -> b d", mean)?;
    assert_eq!(
        m.as_slice::<f32>(),
        Some(&[1.5, 2.5, 3.5, 7.5, 8.5, 9.5][..])
    );
    let mx = tdsl::reduce!(x, "b s d -> b", "max")?;
    assert_eq!(mx.as_slice::<f32>(), Some(&[5.0, 11.0][..]));
    let pool = tdsl::reduce!(x, "b (s 2) d -> b d", sum)?;
    assert_eq!(
        pool.as_slice::<f32>(),
        Some(&[3.0, 5.0, 7.0, 15.0, 17.0, 19.0][..])
    );
    let total = tdsl::reduce!(x, "b s d -> ", sum)?;
    assert_eq!(total.shape(), Vec::<usize>::new());
    assert_eq!(total.as_slice::<f32>(), Some(&[66.0][..]));
    Ok(())
}

#[test]
fn repeat_adds_axes() -> Result {
    let x = arange(&[2, 2]);
    let y = tdsl::repeat!(x, "h w -> h w c", c = 3)?;
    assert_eq!(y.shape(), [2, 2, 3]);
    assert_eq!(
        y.as_slice::<f32>(),
        Some(&[0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0][..])
    );
    let up = tdsl::repeat!(x, "h w -> (h 2) w")?;
    assert_eq!(
        up.as_slice::<f32>(),
        Some(&[0.0, 1.0, 0.0, 1.0, 2.0, 3.0, 2.0, 3.0][..])
    );
    Ok(())
}

#[test]
fn other_dtypes_keep_their_dtype() -> Result {
    let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    let s = tdsl::reduce!(a, "i j -> j", sum)?;
    assert_eq!(s.as_slice::<f64>(), Some(&[4.0, 6.0][..]));
    let h: Vec<tdsl::f16> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .map(|&v| tdsl::f16::from_f32(v))
        .collect();
    let h = Tensor::from_vec(h, &[4])?;
    let r = tdsl::repeat!(h, "n -> n k", k = 2)?;
    assert_eq!(r.dtype(), DType::F16);
    assert_eq!(r.to_f64(), [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Caching
// ---------------------------------------------------------------------------------------------

#[test]
fn a_loop_of_calls_compiles_once() -> Result {
    let a = wavy(&[4, 8], 5);
    let b = wavy(&[8, 3], 6);
    // One call site, reached with whatever `x` is.
    let matmul = |x: &Tensor| tdsl::einsum!("i k, k j -> i j", x, b);
    let before = tdsl::jit_stats();
    let first = matmul(&a)?;
    let after_first = tdsl::jit_stats();
    for _ in 1..100 {
        assert_eq!(matmul(&a)?, first);
    }
    let after = tdsl::jit_stats();
    assert_eq!(after.runs - before.runs, 100);
    assert_eq!(after.plans - before.plans, 1, "one plan for one shape");
    assert_eq!(
        after.kernels_compiled, after_first.kernels_compiled,
        "no kernel compiled after the first call"
    );
    // A new shape at the same call site plans once more; the old one stays cached.
    for rows in [2, 4, 2, 4] {
        matmul(&wavy(&[rows, 8], 7))?;
    }
    assert_eq!(tdsl::jit_stats().plans - after.plans, 1);
    Ok(())
}

#[test]
fn programs_cache_per_signature() -> Result {
    let p = Program::compile(
        "input x: f32[b, d]\ny = reduce(exp(x), \"b d -> b\", \"sum\")\noutput y",
    )?;
    assert!(p.checked().is_none(), "extents come from the data");
    for _ in 0..10 {
        p.run([("x", &arange(&[2, 3]))])?;
    }
    assert_eq!(p.stats().plans, 1);
    assert_eq!(p.stats().runs, 10);
    let out = p.run([("x", arange(&[4, 3]))])?;
    assert_eq!(out["y"].shape(), [4]);
    assert_eq!(out.ty("y").map(|t| t.to_string()), Some("f32[b=4]".into()));
    assert_eq!(p.stats().plans, 2);
    // Clones share the cache.
    let q = p.clone();
    q.run([("x", arange(&[4, 3]))])?;
    assert_eq!(p.stats().plans, 2);
    Ok(())
}

#[test]
fn call_sites_are_shared_across_threads() -> Result {
    let a = wavy(&[3, 5], 8);
    let want = tdsl::reduce!(a, "i j -> i", max)?;
    let results: Vec<Tensor> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| tdsl::reduce!(a, "i j -> i", max)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread").expect("reduce"))
            .collect()
    });
    for r in results {
        assert_eq!(r, want);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Run-time errors
// ---------------------------------------------------------------------------------------------

#[test]
fn extents_are_checked_when_the_call_runs() -> Result {
    let a = arange(&[2, 3]);
    let b = arange(&[4, 2]);
    let e = tdsl::einsum!("i k, k j -> i j", a, b).expect_err("k disagrees");
    let d = &e.0[0];
    assert_eq!(d.code, Code::ExtentMismatch);
    assert!(d.message.contains("label `k`"), "{}", d.message);
    assert!(d.message.contains("einsum!"), "{}", d.message);
    assert!(d.message.contains(file!()), "{}", d.message);
    // Labels are byte ranges of the pattern string.
    let pattern = "i k, k j -> i j";
    let spans: BTreeSet<&str> = d
        .labels
        .iter()
        .map(|l| &pattern[l.span.start as usize..l.span.end as usize])
        .collect();
    assert_eq!(spans, BTreeSet::from(["k"]));

    let x = arange(&[2, 3, 4]);
    let e = tdsl::rearrange!(x, "b (h d) -> b h d", h = 2).expect_err("rank");
    assert_eq!(e.0[0].code, Code::PatternRank);
    let x = arange(&[2, 9]);
    let e = tdsl::rearrange!(x, "b (h d) -> b h d", h = 2).expect_err("9 / 2");
    assert_eq!(e.0[0].code, Code::PatternIndivisible);
    let e = tdsl::rearrange!(x, "b (h d) -> b h d", h = -3).expect_err("negative");
    assert_eq!(e.0[0].code, Code::PatternBadKwarg);
    let zero = 0;
    let e = tdsl::rearrange!(x, "b (h d) -> b h d", h = zero).expect_err("zero");
    assert_eq!(e.0[0].code, Code::PatternBadKwarg);
    Ok(())
}

#[test]
fn program_errors_come_back_as_diagnostics() -> Result {
    let p = Program::compile(
        "input x: f32[n]\ninput w: f32[n, m=3]\ny = einsum(x, w, \"n, n m -> m\")\noutput y",
    )?;
    let x = arange(&[4]);
    let e = p
        .run([("x", &x), ("w", &arange(&[5, 3]))])
        .expect_err("n disagrees");
    assert_eq!(e.0[0].code, Code::ExtentMismatch);
    let e = p.run([("x", &x)]).expect_err("w missing");
    assert_eq!(e.0[0].code, Code::MissingInput);
    let e = p.run([("x", &x), ("x", &x)]).expect_err("bound twice");
    assert_eq!(e.0[0].code, Code::BadArgument);
    let e = p
        .run([("x", &x), ("w", &arange(&[4, 3])), ("wq", &x)])
        .expect_err("unknown");
    assert_eq!(e.0[0].code, Code::UnknownInput);
    assert!(e.0[0].help.as_deref().unwrap_or("").contains("`w`"));
    let e = p
        .run([
            ("x", Tensor::from_vec(vec![1.0f64; 4], &[4])?),
            ("w", arange(&[4, 3])),
        ])
        .expect_err("dtype");
    assert_eq!(e.0[0].code, Code::DtypeMismatch);
    // A deferred program still checks its patterns when it compiles.
    let e =
        Program::compile("input x: f32[b, d]\ny = reduce(x, \"b d -> b e\", \"sum\")\noutput y")
            .expect_err("e");
    assert_eq!(e.0[0].code, Code::PatternAxisOneSide);
    Ok(())
}

#[test]
fn program_macro_builds_once_and_reports_check_errors_on_run() -> Result {
    let mut programs = Vec::new();
    for _ in 0..3 {
        programs.push(tdsl::program!(
            r#"
            input x: f32[n]
            input w: f32[n, k=2] = ones
            y = einsum(x, w, "n, n k -> k")
            output y
            "#
        ));
    }
    let x = arange(&[3]);
    for p in &programs {
        assert_eq!(
            p.run([("x", &x)])?["y"].as_slice::<f32>(),
            Some(&[3.0, 3.0][..])
        );
    }
    assert_eq!(programs[0].stats().plans, 1, "one Program per call site");
    let bad = tdsl::program!("input x: f32[n=2] = ones\ny = sqroot(x)\noutput y");
    let e = bad.runner().run().expect_err("unknown function");
    assert_eq!(e.0[0].code, Code::UnknownFunction);
    assert_eq!(
        bad.check().map_err(|d| d.0[0].code),
        Err(Code::UnknownFunction)
    );
    Ok(())
}

#[test]
fn outputs_by_name_and_in_order() -> Result {
    let p = Program::compile(
        "input x: f32[r=2, c=3] = arange\ns = reduce(x, \"r c -> c\", \"sum\")\nt = rearrange(x, \"r c -> c r\")\noutput t, s",
    )?;
    assert_eq!(p.input_names(), ["x"]);
    assert_eq!(p.output_names(), ["t", "s"]);
    assert!(p.checked().is_some());
    let mut out = p.runner().run()?;
    assert_eq!(out.names().collect::<Vec<_>>(), ["t", "s"]);
    assert_eq!(out[1].as_slice::<f32>(), Some(&[3.0, 5.0, 7.0][..]));
    assert_eq!(
        out.ty("t").map(|t| t.to_string()),
        Some("f32[c=3, r=2]".into())
    );
    let reference = p.runner().run_reference()?;
    assert_eq!(out, reference);
    let s = out.remove("s").expect("s");
    assert_eq!(s.shape(), [3]);
    assert_eq!(out.into_vec().len(), 1);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Compile-time checks reject only what the checker rejects
// ---------------------------------------------------------------------------------------------

fn shape(extents: &[u64]) -> Shape {
    Shape(extents.iter().map(|&e| Axis::anon(e)).collect())
}

fn code_of(text: &str) -> Code {
    Code::ALL
        .iter()
        .copied()
        .find(|c| c.as_str() == text)
        .unwrap_or_else(|| panic!("unknown code {text}"))
}

/// Keyword spans for the checker: far away from the pattern, one per keyword.
fn kw_span(i: usize) -> Span {
    Span::new(1000 + 20 * i, 1005 + 20 * i)
}

fn where_(at: syn_pattern::At) -> Span {
    match at {
        syn_pattern::At::Pattern(p) => p.span(),
        syn_pattern::At::Keyword(i) => kw_span(i),
    }
}

/// Codes the checker may add once it knows shapes.
const SHAPE_CODES: [Code; 7] = [
    Code::PatternRank,
    Code::ExtentMismatch,
    Code::PatternIndivisible,
    Code::SizeOverflow,
    Code::PatternEllipsis,
    Code::BroadcastMismatch,
    Code::PatternBroadcast,
];

fn einops_case(op: u8, left: &[&str], right: &[&str], arrow: u8, kwargs: &[(&str, u64)]) {
    let (op, syn_op) = match op % 3 {
        0 => (PatternOp::Rearrange, syn_pattern::PatternOp::Rearrange),
        1 => (PatternOp::Reduce, syn_pattern::PatternOp::Reduce),
        _ => (PatternOp::Repeat, syn_pattern::PatternOp::Repeat),
    };
    let arrow = match arrow % 8 {
        0 => " ",
        1 => " -> -> ",
        _ => " -> ",
    };
    let pattern = format!("{}{arrow}{}", left.join(" "), right.join(" "));
    let kw: Vec<syn_pattern::Keyword> = kwargs
        .iter()
        .map(|&(name, v)| syn_pattern::Keyword {
            name,
            value: Some(v),
        })
        .collect();
    let lengths: Vec<(String, u64, Span)> = kwargs
        .iter()
        .enumerate()
        .map(|(i, &(n, v))| (n.to_string(), v, kw_span(i)))
        .collect();
    let early = syn_pattern::parse_einops(syn_op, &pattern, &kw).map(|_| ());
    let mut matched = false;
    for rank in 0..=6 {
        let got = resolve_pattern(
            op,
            &pattern,
            Span::new(0, pattern.len()),
            &shape(&vec![12; rank]),
            &lengths,
        );
        match (&early, got) {
            (Err(e), Err(d)) => {
                if d.code == code_of(e.code.as_str()) && d.span() == Some(where_(e.at)) {
                    matched = true;
                } else {
                    assert_eq!(
                        d.code,
                        Code::PatternRank,
                        "{pattern:?} {kwargs:?}: {e:?} vs {d:?}"
                    );
                }
            }
            (Err(e), Ok(_)) => {
                panic!("{pattern:?} {kwargs:?} rank {rank}: early {e:?}, checker accepts")
            }
            (Ok(()), Err(d)) => assert!(
                SHAPE_CODES.contains(&d.code),
                "{pattern:?} {kwargs:?} rank {rank}: missed early: {d:?}"
            ),
            (Ok(()), Ok(_)) => {}
        }
    }
    if let Err(e) = early {
        assert!(
            matched,
            "{pattern:?} {kwargs:?}: {e:?} never reported by the checker"
        );
    }
}

fn einsum_case(operands: &[Vec<&str>], out: &[&str], arrow: bool, extra: u8, widths: u8) {
    let pattern = format!(
        "{}{}{}",
        operands
            .iter()
            .map(|o| o.join(" "))
            .collect::<Vec<_>>()
            .join(", "),
        if arrow { " -> " } else { " " },
        out.join(" ")
    );
    let n = match extra % 6 {
        0 => operands.len() + 1,
        1 => operands.len().saturating_sub(1),
        _ => operands.len(),
    };
    let early = syn_pattern::check_einsum(&pattern, Some(n), &[]);
    // Ranks that fit each operand: one axis per plain group, 0 or 1 under `...`.
    let shapes: Vec<Shape> = (0..n)
        .map(|k| {
            let tokens = operands.get(k).cloned().unwrap_or_default();
            let plain = tokens.iter().filter(|t| **t != "...").count();
            let ell = usize::from(tokens.contains(&"...") && (widths >> (k % 8)) & 1 == 1);
            shape(&vec![6; plain + ell])
        })
        .collect();
    let got = resolve_einsum(&pattern, Span::new(0, pattern.len()), &shapes, &[]);
    match (early, got) {
        (Err(e), Err(d)) => {
            assert_eq!(
                (d.code, d.span()),
                (code_of(e.code.as_str()), Some(where_(e.at))),
                "{pattern:?} with {n} operands: {e:?} vs {d:?}"
            );
        }
        (Err(e), Ok(_)) => panic!("{pattern:?} with {n} operands: early {e:?}, checker accepts"),
        (Ok(_), Err(d)) => assert!(
            SHAPE_CODES.contains(&d.code),
            "{pattern:?} with {n} operands: missed early: {d:?}"
        ),
        (Ok(_), Ok(_)) => {}
    }
}

const EINOPS_TOKENS: [&str; 17] = [
    "a", "b", "c", "h", "d", "1", "2", "3", "0", "...", "(", ")", "()", "(h d)", "(a 2)", "_x",
    "a.",
];
const EINSUM_TOKENS: [&str; 13] = [
    "i", "j", "k", "l", "(i j)", "(j k)", "(k l)", "...", "1", "()", "(", ")", "i.",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn einops_compile_time_errors_are_checker_errors(
        op in 0u8..3,
        left in prop::collection::vec(prop::sample::select(&EINOPS_TOKENS[..]), 0..5),
        right in prop::collection::vec(prop::sample::select(&EINOPS_TOKENS[..]), 0..5),
        arrow in 0u8..8,
        kwargs in prop::collection::vec(
            (prop::sample::select(&["h", "d", "c", "z", "_q"][..]), 0u64..4), 0..3),
    ) {
        einops_case(op, &left, &right, arrow, &kwargs);
    }

    #[test]
    fn einsum_compile_time_errors_are_checker_errors(
        operands in prop::collection::vec(
            prop::collection::vec(prop::sample::select(&EINSUM_TOKENS[..]), 0..4), 1..4),
        out in prop::collection::vec(prop::sample::select(&EINSUM_TOKENS[..]), 0..3),
        arrow in prop::bool::weighted(0.9),
        extra in 0u8..6,
        widths in any::<u8>(),
    ) {
        einsum_case(&operands, &out, arrow, extra, widths);
    }
}

#[test]
fn differential_cases_by_hand() {
    einops_case(0, &["b", "(h", "d)"], &["b", "h", "d"], 2, &[("h", 2)]);
    einops_case(0, &["b", "(h d)"], &["b", "h"], 2, &[("h", 2)]);
    einops_case(2, &["h", "w"], &["h", "w", "c"], 2, &[("c", 3), ("k", 2)]);
    einops_case(1, &["(h d)"], &["h"], 2, &[]);
    einsum_case(&[vec!["(i j)"]], &["i"], true, 2, 0);
    einsum_case(&[vec!["i", "..."], vec!["(i j)"]], &["j"], true, 2, 1);
}
