//! Differential tests of sparse storage and sparse kernels: random programs over every format
//! (COO, CSR, CSC, BSR with assorted block shapes, 2:4 along either axis), dtype and density
//! (empty and full included) are run by the reference interpreter (which evaluates sparse values
//! densely), by the loop-IR evaluator and by the JIT (whose sparse products run the tuned
//! `tdsl-sparse` kernels on compressed storage); all three must agree.
//!
//! A case has one sparse matrix `S` — a sparse input with a random initialiser density, or
//! `sparsify` of a dense input by `threshold=`, `density=` or (2:4) top-2 pruning — optionally
//! seen through a transposing `rearrange` (CSR ↔ CSC, 2:4 on the other axis), and multiplied
//! with a dense operand that has 0 to 2 further axes, on either side, with the output axes in
//! random order. Some cases also read `S` densely (an elementwise op) and output `S` itself, so
//! the expansion paths run too. Extents are not multiples of SIMD widths, and blocks include
//! 1×1, 2×3 and 4×4.

use crate::draw::{config, Draw};
use proptest::prelude::*;
use tdsl::{DType, Tensor};

fn choices() -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(any::<u32>(), 0..64)
}

/// A random sparse-product program (its text), built from `d`.
fn program(d: &mut Draw) -> String {
    let dtypes = ["f32", "f64", "f16", "bf16"];
    let s_dt = d.pick(&dtypes);
    let d_dt = d.pick(&dtypes);
    // Format and a shape it fits.
    let fmt = d.below(6);
    let (br, bc) = d.pick(&[(2, 3), (1, 1), (4, 4), (3, 2), (8, 4)]);
    let mult = |d: &mut Draw, unit: usize| unit * (1 + d.below(5));
    let (r, c, fmt_text) = match fmt {
        0 => (1 + d.below(13), 1 + d.below(13), "csr".to_string()),
        1 => (1 + d.below(13), 1 + d.below(13), "csc".to_string()),
        2 => (1 + d.below(13), 1 + d.below(13), "coo".to_string()),
        3 => (mult(d, br), mult(d, bc), format!("bsr({br}, {bc})")),
        4 => (1 + d.below(9), mult(d, 4), "2:4".to_string()),
        _ => (mult(d, 4), 1 + d.below(9), "2:4(p)".to_string()),
    };
    let mut src = format!(
        "input a: {s_dt}[p={r}, q={c}] = randn(seed={})\n",
        d.below(50)
    );
    let from_input = d.chance(40) && fmt < 4;
    if from_input {
        let density = d.pick(&["0", "0.1", "0.5", "1"]);
        let ann = match fmt {
            3 => format!("bsr({br}, {bc})"),
            _ => fmt_text.clone(),
        };
        src = format!(
            "input s: {s_dt}[p={r}, q={c}] @ {ann} = randn(seed={}, density={density})\n",
            d.below(50)
        );
    } else {
        let keep = match (fmt >= 4, d.below(3)) {
            (true, _) | (false, 0) => String::new(),
            (false, 1) => format!(", threshold={}", d.pick(&["0", "0.5", "1.5", "9"])),
            (false, _) => format!(", density={}", d.pick(&["0", "0.3", "0.7", "1"])),
        };
        let f = if fmt >= 4 {
            format!("\"{fmt_text}\"")
        } else {
            fmt_text.clone()
        };
        src.push_str(&format!("s = sparsify(a, {f}{keep})\n"));
    }
    // Optionally the transposed view (storage reused for CSR, CSC and 2:4).
    let transposed = matches!(fmt, 0 | 1 | 4 | 5) && d.chance(40);
    let (sname, sl) = if transposed {
        src.push_str("t = rearrange(s, \"p q -> q p\")\n");
        ("t", ["q", "p"])
    } else {
        ("s", ["p", "q"])
    };
    // Optionally a chain of format-keeping elementwise ops on the sparse operand: they run on
    // its stored entries (new values, the same pattern), and the product uses the new values.
    let chain = d.chance(50);
    let sname = if chain {
        let ext_of = |l: &str| if l == "p" { r } else { c };
        let mut cur = sname.to_string();
        for step in 0..1 + d.below(3) {
            let e = match d.below(9) {
                0 => format!(
                    "{}({cur})",
                    d.pick(&["relu", "abs", "tanh", "sin", "gelu", "square"])
                ),
                1 => format!("-{cur}"),
                2 => format!("sqrt(abs({cur}))"),
                3 => format!("{cur} * {}", d.pick(&["2", "0.5", "-3"])),
                4 => format!("{} * {cur}", d.pick(&["2", "-0.25"])),
                5 => format!("{cur} / {}", d.pick(&["4", "-1.5"])),
                6 => format!("cast({cur}, {})", d.pick(&["f32", "f64"])),
                7 => {
                    // A dense operand of the same shape, on either side.
                    src.push_str(&format!(
                        "input m{step}: {}[{}={}, {}={}] = randn(seed={})\n",
                        d.pick(&dtypes),
                        sl[0],
                        ext_of(sl[0]),
                        sl[1],
                        ext_of(sl[1]),
                        d.below(50)
                    ));
                    if d.chance(50) {
                        format!("{cur} * m{step}")
                    } else {
                        format!("m{step} * {cur}")
                    }
                }
                _ => {
                    // A broadcast row (or a column through an extent-1 axis), dividing by a
                    // computed dense value that is never zero.
                    let shape = if d.chance(50) {
                        format!("{}={}", sl[1], ext_of(sl[1]))
                    } else {
                        format!("{}={}, one=1", sl[0], ext_of(sl[0]))
                    };
                    src.push_str(&format!(
                        "input m{step}: {}[{shape}] = randn(seed={})\n",
                        d.pick(&dtypes),
                        d.below(50)
                    ));
                    if d.chance(50) {
                        format!("{cur} / (abs(m{step}) + 1)")
                    } else {
                        format!("{cur} * m{step}")
                    }
                }
            };
            src.push_str(&format!("e{step} = {e}\n"));
            cur = format!("e{step}");
        }
        cur
    } else {
        sname.to_string()
    };
    let sname = sname.as_str();
    // Contract one of the sparse labels with a dense operand with 0..=2 more axes.
    let contract = d.below(2);
    let (k, free) = (sl[contract], sl[1 - contract]);
    let n_extra = d.below(3);
    let extra: Vec<(&str, usize)> =
        [("x", 1 + d.below(7)), ("y", 1 + d.below(4))][..n_extra].to_vec();
    let mut dl: Vec<&str> = extra.iter().map(|e| e.0).collect();
    let k_at = d.below(dl.len() + 1);
    dl.insert(k_at, k);
    let ext = |l: &str| match l {
        "p" => r,
        "q" => c,
        _ => extra.iter().find(|e| e.0 == l).map_or(1, |e| e.1),
    };
    let decl: Vec<String> = dl.iter().map(|l| format!("{l}={}", ext(l))).collect();
    src.push_str(&format!(
        "input b: {d_dt}[{}] = randn(seed={})\n",
        decl.join(", "),
        d.below(50)
    ));
    let mut out: Vec<&str> = dl.iter().copied().filter(|&l| l != k).collect();
    out.push(free);
    d.shuffle(&mut out);
    let s_pat = format!("{} {}", sl[0], sl[1]);
    let b_pat = dl.join(" ");
    let pat = if d.chance(50) {
        format!(
            "einsum({sname}, b, \"{s_pat}, {b_pat} -> {}\")",
            out.join(" ")
        )
    } else {
        format!(
            "einsum(b, {sname}, \"{b_pat}, {s_pat} -> {}\")",
            out.join(" ")
        )
    };
    src.push_str(&format!("y = {pat}\noutput y\n"));
    if d.chance(30) {
        src.push_str("z = abs(s) * 2\noutput z\n");
    }
    if d.chance(30) {
        src.push_str("output s\n");
    }
    if chain && d.chance(20) {
        src.push_str(&format!("output {sname}\n"));
    }
    if d.chance(25) {
        // A sampled product (SDDMM) on the stored entries of the same operand.
        let ext_of = |l: &str| if l == "p" { r } else { c };
        let kk = 1 + d.below(9);
        src.push_str(&format!(
            "input u: {}[{a}={}, k={kk}] = randn(seed={})\ninput v: {}[k={kk}, {b}={}] = randn(seed={})\n",
            d.pick(&dtypes),
            ext_of(sl[0]),
            d.below(50),
            d.pick(&dtypes),
            ext_of(sl[1]),
            d.below(50),
            a = sl[0],
            b = sl[1],
        ));
        src.push_str(&format!(
            "w = einsum({sname}, u, v, \"{a} {b}, {a} k, k {b} -> {a} {b}\")\noutput w\n",
            a = sl[0],
            b = sl[1],
        ));
    }
    src
}

/// Relative tolerance for an output of `dt`, against the reference's largest magnitude.
fn tolerance(dt: DType) -> f64 {
    match dt {
        DType::F64 => 1e-12,
        DType::F32 => 2e-6,
        DType::F16 => 2e-3,
        DType::BF16 => 2e-2,
    }
}

/// The loosest tolerance among an output's dtype and every dtype the script computes in: a
/// value rounded to f16 on the way (an elementwise op, a cast) carries f16's error into an f64
/// output, and backends may round transcendental functions differently by an ulp.
fn loosest(src: &str, dt: DType) -> DType {
    [DType::BF16, DType::F16, DType::F32]
        .into_iter()
        .find(|t| src.contains(&format!("{t}[")) || src.contains(&format!("{t})")) || *t == dt)
        .unwrap_or(DType::F64)
}

fn close(name: &str, want: &Tensor, got: &Tensor, tol_dt: DType) -> Result<(), String> {
    if want.shape() != got.shape() || want.dtype() != got.dtype() {
        return Err(format!(
            "{name}: {:?} {:?} vs {:?} {:?}",
            want.dtype(),
            want.shape(),
            got.dtype(),
            got.shape()
        ));
    }
    let (w, g) = (want.to_f64(), got.to_f64());
    let scale = w.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    let tol = tolerance(tol_dt) * scale * 4.0;
    for (i, (a, b)) in w.iter().zip(&g).enumerate() {
        if (a - b).abs() > tol {
            return Err(format!("{name}[{i}]: want {a}, got {b} (tolerance {tol})"));
        }
    }
    Ok(())
}

fn check_case(src: &str) -> Result<(), String> {
    let p = tdsl::compile(src, &Default::default()).map_err(|d| format!("{d:?}"))?;
    let inputs = tdsl::bind::bind_inputs(&p, Default::default()).map_err(|d| format!("{d:?}"))?;
    let want = tdsl::interp::run(&p, &inputs);
    let shapes: Vec<Vec<usize>> = want.iter().map(|t| t.shape().to_vec()).collect();
    let plan = tdsl::plan::lower::plan_program(&p).map_err(|d| d.to_string())?;
    let text = tdsl_loop::print::print_program(&plan.loops);
    let product = text.contains("spmm ");
    let eval = tdsl::runtime::run_eval(&plan, &inputs, &shapes).map_err(|d| d.to_string())?;
    let jit = tdsl::runtime::run_jit(&plan, &inputs, &shapes).map_err(|d| d.to_string())?;
    for (i, w) in want.iter().enumerate() {
        let dt = loosest(src, w.dtype());
        close(&format!("eval output {i}"), w, &eval[i], dt)?;
        close(&format!("jit output {i}"), w, &jit[i], dt)?;
    }
    // Every generated product is a sparse product: the planner must not fall back.
    if !product {
        return Err(format!("no spmm in the plan:\n{text}"));
    }
    // Format-keeping elementwise ops run on the stored entries: loops over sparse levels, and
    // nothing is expanded to dense unless a sparse value is an output or read densely.
    let elementwise = src
        .lines()
        .any(|l| (l.starts_with('e') || l.starts_with("w =")) && l.contains(" = "));
    let reads_dense = src.contains("output s")
        || src.contains("output e")
        || src.contains("output w")
        || src.contains("z =");
    if elementwise {
        let levels = ["compressed", "singleton", "twofour"];
        if !levels.iter().any(|l| text.contains(l)) {
            return Err(format!("no loop over stored entries in the plan:\n{text}"));
        }
        if !reads_dense && text.contains("densify") {
            return Err(format!(
                "an elementwise op expands its sparse operand:\n{text}"
            ));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn sparse_products_match_the_interpreter(v in choices()) {
        let src = program(&mut Draw::new(&v));
        if let Err(e) = check_case(&src) {
            return Err(TestCaseError::fail(format!("{e}\n--- script ---\n{src}")));
        }
    }
}

/// Fixed edge cases: empty rows and blocks, all-zero tensors, a single entry, full density.
#[test]
fn sparse_edge_cases() {
    let cases = [
        // All-zero sparse matrices of every format.
        "input a: f32[p=4, q=8] = randn(seed=1)\ns = sparsify(a, csr, threshold=100)\ninput b: f32[q=8, x=3] = randn(seed=2)\ny = einsum(s, b, \"p q, q x -> p x\")\noutput y\noutput s\n",
        "input s: f32[p=4, q=6] @ bsr(2, 3) = randn(seed=1, density=0)\ninput b: f32[q=6, x=3] = randn(seed=2)\ny = einsum(s, b, \"p q, q x -> p x\")\noutput y\n",
        "input s: f16[p=6, q=4] @ coo = zeros\ninput b: f32[x=5, p=6] = randn(seed=2)\ny = einsum(b, s, \"x p, p q -> x q\")\noutput y\n",
        // One entry.
        "input a: f32[p=5, q=7] = randn(seed=3)\ns = sparsify(a, csc, density=0.03)\ninput b: f64[q=7] = randn(seed=2)\ny = einsum(s, b, \"p q, q -> p\")\noutput y\n",
        // Full density, f16 and bf16 values, mat-vec.
        "input s: bf16[p=8, q=8] @ bsr(4, 4) = randn(seed=1, density=1)\ninput b: f32[q=8] = randn(seed=2)\ny = einsum(s, b, \"p q, q -> p\")\noutput y\n",
        "input a: f16[p=3, q=12] = randn(seed=4)\ns = sparsify(a, \"2:4\")\ninput b: f16[q=12, x=9] = randn(seed=5)\ny = einsum(s, b, \"p q, q x -> p x\")\noutput y\noutput s\n",
    ];
    for src in cases {
        if let Err(e) = check_case(src) {
            panic!("{e}\n--- script ---\n{src}");
        }
    }
}
