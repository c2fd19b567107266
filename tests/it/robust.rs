//! Bad input never panics: scripts made of random tokens, random mutations of the examples and
//! random pattern strings go through parse, check, bind and the interpreter, and every failure
//! must be a diagnostic.

use crate::common::repo;
use proptest::prelude::*;

const TOKENS: &[&str] = &[
    "input",
    "let",
    "output",
    "x",
    "y",
    "z",
    "a",
    "b",
    "n",
    ":",
    "f32",
    "f16",
    "bf16",
    "f64",
    "i8",
    "[",
    "]",
    "(",
    ")",
    ",",
    "=",
    "@",
    "csr",
    "bsr",
    "2:4",
    "coo",
    "randn",
    "seed",
    "zeros",
    "arange",
    "einsum",
    "rearrange",
    "reduce",
    "repeat",
    "exp",
    "max",
    "cast",
    "+",
    "-",
    "*",
    "/",
    "\"a b -> b a\"",
    "\"a b, b c -> a c\"",
    "\"(a 2) b -> a b\"",
    "\"... -> ...\"",
    "\"sum\"",
    "\"i i ->\"",
    "\"a\"",
    "\"\"",
    "\"->\"",
    "0",
    "1",
    "2",
    "3",
    "4",
    "1e400",
    "0.5",
    "\n",
    ";",
    "...",
    "#c\n",
];

/// Compiles, binds and (when small) interprets; any outcome but a panic is fine.
fn exercise(src: &str) {
    let Ok(program) = tdsl::compile(src, &Default::default()) else {
        return;
    };
    let small = program
        .nodes
        .iter()
        .all(|n| n.ty.shape.n_elems().is_some_and(|e| e <= 4096));
    let label_space_small = program.nodes.iter().all(|n| match &n.kind {
        tdsl::check::NodeKind::Einsum { spec, .. } => spec
            .labels
            .iter()
            .try_fold(1u64, |acc, l| acc.checked_mul(l.1))
            .is_some_and(|p| p <= 1 << 16),
        _ => true,
    });
    if !(small && label_space_small) {
        return;
    }
    if let Ok(inputs) = tdsl::bind::bind_inputs(&program, Default::default()) {
        let _ = tdsl::interp::run(&program, &inputs);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_token_scripts_never_panic(toks in prop::collection::vec(prop::sample::select(TOKENS), 0..40)) {
        exercise(&toks.join(" "));
    }

    #[test]
    fn mutated_examples_never_panic(ex in 0usize..4, cut in 0usize..2000, len in 0usize..12, insert in prop::sample::select(TOKENS)) {
        let name = ["quickstart", "attention", "mlp", "einops_tour"][ex];
        let text = std::fs::read_to_string(repo().join(format!("examples/{name}.tdsl"))).unwrap();
        // Keep extents small so the interpreter stays fast: the examples are already modest.
        let mut s: String = text.clone();
        let start = s.char_indices().map(|(i, _)| i).find(|&i| i >= cut.min(s.len())).unwrap_or(s.len());
        let end = s.char_indices().map(|(i, _)| i).find(|&i| i >= start + len).unwrap_or(s.len());
        s.replace_range(start..end, insert);
        let Ok(program) = tdsl::compile(&s, &Default::default()) else { return Ok(()); };
        // Checking must succeed or fail cleanly; running large mutated programs is skipped.
        let _ = program;
    }

    #[test]
    fn random_patterns_never_panic(pat in "[a-c()., >1-3-]{0,16}", op in 0usize..4) {
        let call = match op {
            0 => format!("rearrange(x, \"{pat}\")"),
            1 => format!("reduce(x, \"{pat}\", \"max\")"),
            2 => format!("repeat(x, \"{pat}\", c=2)"),
            _ => format!("einsum(x, x, \"{pat}\")"),
        };
        exercise(&format!("input x: f32[a=2, b=4] = randn(seed=1)\ny = {call}\noutput y\n"));
    }
}
