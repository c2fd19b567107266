//! SVG plots: a roofline and sparsity patterns are drawn to files, checked to be well-formed
//! (balanced tags), and snapshot-tested by structure — which elements appear and every text
//! label — not by coordinates.

use crate::common::{compile, repo};
use std::path::Path;
use tdsl::check::Format;
use tdsl::machine::Machine;
use tdsl::{Code, DType, Tensor};

/// A fixed machine, so the plots do not depend on the one running the tests.
fn machine() -> Machine {
    Machine {
        target: tdsl::machine::Target::Cpu,
        cores: 8,
        clock_ghz: 3.0,
        flops_per_cycle: 32.0,
        peak_gflops: 768.0,
        bandwidth_gbps: 48.0,
    }
}

/// Element names and text contents of an SVG, in document order, after checking that every
/// tag is closed in order. Runs of the same element are counted rather than repeated.
fn structure(svg: &str) -> String {
    let mut stack: Vec<String> = Vec::new();
    let mut elements: Vec<(String, usize)> = Vec::new();
    let mut texts: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(open) = rest.find('<') {
        let text = rest[..open].trim();
        if !text.is_empty() {
            assert_eq!(
                stack.last().map(String::as_str),
                Some("text"),
                "character data outside <text>: {text}"
            );
            texts.push(text.to_string());
        }
        let close = rest[open..].find('>').expect("an unterminated tag") + open;
        let tag = &rest[open + 1..close];
        rest = &rest[close + 1..];
        if tag.starts_with('?') || tag.starts_with('!') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            let top = stack.pop().expect("a closing tag with nothing open");
            assert_eq!(top, name.trim(), "tags closed out of order");
            continue;
        }
        let name = tag
            .split(|c: char| c.is_whitespace() || c == '/')
            .next()
            .unwrap()
            .to_string();
        match elements.last_mut() {
            Some((last, n)) if *last == name => *n += 1,
            _ => elements.push((name.clone(), 1)),
        }
        if !tag.ends_with('/') {
            stack.push(name);
        }
    }
    assert!(rest.trim().is_empty(), "text after the last tag");
    assert!(stack.is_empty(), "unclosed tags: {stack:?}");
    let mut out = String::from("elements:\n");
    for (name, n) in elements {
        if n == 1 {
            out.push_str(&format!("  {name}\n"));
        } else {
            out.push_str(&format!("  {name} ×{n}\n"));
        }
    }
    out.push_str("texts:\n");
    for t in texts {
        out.push_str(&format!("  {t}\n"));
    }
    out
}

#[test]
fn roofline_of_attention() {
    let text = std::fs::read_to_string(repo().join("examples/attention.tdsl")).unwrap();
    let program = compile(&text).unwrap();
    let stored: Vec<_> = program
        .inputs
        .iter()
        .map(|i| tdsl::plan::cost::stored(&i.ty, None))
        .collect();
    let cost = tdsl::plan::cost::program_cost(&program, &stored);
    // Measured times for the einsums; the softmax statements stay predicted.
    let measured: Vec<Option<f64>> = cost
        .statements
        .iter()
        .map(|s| match s.name.as_str() {
            "q" | "k" | "v" => Some(2e-5),
            "scores" => Some(4e-5),
            "attn" => Some(8e-5),
            _ => None,
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("roof.svg");
    tdsl::cli::plot::roofline(&path, &program, &cost, &machine(), &measured).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg"));
    let s = structure(&svg);
    // Every statement with arithmetic is labelled; q, k and v coincide and share a label.
    for label in [
        "q, k, v",
        "scores",
        "attn",
        "m",
        "e",
        "p",
        "peak 768 GFLOP/s",
        "ridge 16 FLOP/B",
    ] {
        assert!(
            s.lines().any(|l| l.trim() == label),
            "{label} missing:\n{s}"
        );
    }
    insta::assert_snapshot!("plot_roofline_attention", s);
}

#[test]
fn roofline_without_measurements_is_all_predicted() {
    let program = compile(
        "input a: f32[i=64, j=32] = ones\ninput b: f32[j, k=16] = ones\n\
         y = einsum(a, b, \"i j, j k -> i k\")\nz = rearrange(y, \"i k -> k i\")\n",
    )
    .unwrap();
    let cost = tdsl::plan::cost::program_cost(&program, &[]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("roof.svg");
    tdsl::cli::plot::roofline(&path, &program, &cost, &machine(), &[None, None]).unwrap();
    let s = structure(&std::fs::read_to_string(&path).unwrap());
    assert!(s.contains("predicted: attainable bound"), "{s}");
    assert!(!s.contains("measured: achieved"), "{s}");
    assert!(s.contains("no intensity on a log axis): z"), "{s}");
}

#[test]
fn sparsity_of_bsr_and_csr() {
    let dir = tempfile::tempdir().unwrap();
    // 8×16 with 4×4 blocks: blocks (0,0) full, (1,2) a quarter full, the rest empty.
    let mut v = vec![0.0; 8 * 16];
    for i in 0..4 {
        for j in 0..4 {
            v[i * 16 + j] = 1.0;
        }
    }
    v[4 * 16 + 8] = 2.0;
    v[5 * 16 + 9] = 2.0;
    v[6 * 16 + 10] = 2.0;
    v[7 * 16 + 11] = 2.0;
    let t = Tensor::from_f64(DType::F32, vec![8, 16], &v);
    let path = dir.path().join("bsr.svg");
    tdsl::cli::plot::sparsity(
        &path,
        &t,
        Format::Bsr { rows: 4, cols: 4 },
        "w: f32[8, 16] @ bsr(4, 4)",
    )
    .unwrap();
    let s = structure(&std::fs::read_to_string(&path).unwrap());
    assert!(
        s.contains("2 of 8 blocks stored (25.0%), 20 nonzeros"),
        "{s}"
    );
    insta::assert_snapshot!("plot_sparsity_bsr", s);

    // A 600×300 CSR matrix is downsampled to cells of 3×2 elements.
    let n = 600 * 300;
    let v: Vec<f64> = (0..n).map(|i| if i % 7 == 0 { 1.0 } else { 0.0 }).collect();
    let t = Tensor::from_f64(DType::F32, vec![600, 300], &v);
    let path = dir.path().join("csr.svg");
    tdsl::cli::plot::sparsity(&path, &t, Format::Csr, "c: f32[600, 300] @ csr").unwrap();
    let s = structure(&std::fs::read_to_string(&path).unwrap());
    assert!(s.contains("one cell per 3×2 elements"), "{s}");
    insta::assert_snapshot!("plot_sparsity_csr", s);
}

#[test]
fn unwritable_plots_are_file_write_diagnostics() {
    let program = compile("input a: f32[i=4] = ones\ny = a * 2\n").unwrap();
    let cost = tdsl::plan::cost::program_cost(&program, &[]);
    let bad = Path::new("/nonexistent-dir-for-tdsl-tests/roof.svg");
    let e = tdsl::cli::plot::roofline(bad, &program, &cost, &machine(), &[None]).unwrap_err();
    assert_eq!(e.code, Code::FileWrite);
    let t = Tensor::from_f64(
        DType::F32,
        vec![2, 4],
        &[1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0],
    );
    let e = tdsl::cli::plot::sparsity(bad, &t, Format::TwoFour { slot: 1 }, "t").unwrap_err();
    assert_eq!(e.code, Code::FileWrite);
}
