//! The command line as users and scripts meet it: snapshots of `check` and `cost` on every
//! example, `run` with files in and out, the JSON contract, and exit statuses.

use crate::common::{repo, tdsl_in, tdsl_script};
use std::path::Path;
use tdsl::io::npy::{read_npy, write_npy};
use tdsl::Tensor;

fn example(name: &str) -> String {
    repo().join("examples").join(name).display().to_string()
}

/// Replaces the absolute repository path so snapshots do not depend on the checkout.
fn scrub(s: &str) -> String {
    s.replace(&repo().display().to_string(), "<repo>")
}

#[test]
fn check_snapshots_of_every_example() {
    for ex in ["quickstart", "attention", "mlp", "einops_tour"] {
        let out = tdsl_in(&repo(), &["check", &example(&format!("{ex}.tdsl"))]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        insta::assert_snapshot!(format!("check_{ex}"), out.stdout);
    }
}

#[test]
fn cost_snapshots_of_every_example() {
    for ex in ["quickstart", "attention", "mlp", "einops_tour"] {
        let out = tdsl_in(&repo(), &["cost", &example(&format!("{ex}.tdsl"))]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        insta::assert_snapshot!(format!("cost_{ex}"), out.stdout);
    }
}

#[test]
fn cost_shows_the_contraction_path_like_einsum_path() {
    let dir = tempfile::tempdir().unwrap();
    let script = "input a: f32[i=1024, j=64]\ninput b: f32[j, k=1024]\ninput c: f32[k, l=64]\n\
                  y = einsum(a, b, c, \"i j, j k, k l -> i l\")\n";
    let out = tdsl_script(dir.path(), "cost", script, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    insta::assert_snapshot!("cost_chain_path", out.stdout);
    // The good order contracts b with c first: 2·64·1024·64 + 2·1024·64·64 FLOPs.
    let json = tdsl_script(dir.path(), "cost", script, &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["total_flops"], 2 * 64 * 1024 * 64 + 2 * 1024 * 64 * 64);
}

#[test]
fn cost_json_contract() {
    let dir = tempfile::tempdir().unwrap();
    let script = "input x: f32[b=2, d=3] = randn(seed=0)\ninput w: f32[d, h=4]\n\
                  y = einsum(x, w, \"b d, d h -> b h\")\nz = reduce(y, \"b h -> b\", \"max\")\noutput z\n";
    let out = tdsl_script(dir.path(), "cost", script, &["--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let st = v["statements"].as_array().unwrap();
    assert_eq!(st.len(), 2, "assignments only, not inputs");
    assert_eq!(st[0]["name"], "y");
    assert_eq!(st[0]["shape"], serde_json::json!([2, 4]));
    assert_eq!(st[0]["dtype"], "f32");
    assert_eq!(st[0]["flops"], 2 * 2 * 3 * 4);
    assert_eq!(st[0]["bytes"], (2 * 3 + 3 * 4 + 2 * 4) * 4);
    assert_eq!(st[1]["flops"], 8);
    assert_eq!(v["total_flops"], 2 * 2 * 3 * 4 + 8);
}

/// Every way to get a stored-sparse operand (sparse inputs, `sparsify` by density and by
/// threshold, a transposed view) in sparse products, with predictions for the nominal machine.
const SPARSE_COST_SCRIPT: &str = "\
input x: f32[i=256, b=64] = randn(seed=0)
input w: f32[o=256, i] = randn(seed=1)
input s: f32[o, i] @ csr = randn(seed=2, density=0.02)
ws = sparsify(w, bsr(32, 32), density=0.1)
y1 = einsum(ws, x, \"o i, i b -> o b\")
wc = sparsify(w, csr, threshold=1.0)
y2 = einsum(wc, x, \"o i, i b -> o b\")
wt = rearrange(wc, \"o i -> i o\")
y3 = einsum(x, wt, \"i b, i o -> b o\")
y4 = einsum(s, x, \"o i, i b -> o b\")
w24 = sparsify(w, \"2:4\")
y5 = einsum(w24, x, \"o i, i b -> o b\")
d = dense(ws)
output y1, y2, y3, y4, y5, d
";

#[test]
fn cost_predicts_sparse_products_with_a_verdict_and_break_even() {
    let dir = tempfile::tempdir().unwrap();
    let out = tdsl_script(dir.path(), "cost", SPARSE_COST_SCRIPT, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    insta::assert_snapshot!("cost_sparse_products", out.stdout);
    let json = tdsl_script(dir.path(), "cost", SPARSE_COST_SCRIPT, &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["machine"]["nominal"], true);
    let st = v["statements"].as_array().unwrap();
    let op = |name: &str| -> serde_json::Value {
        let s = st.iter().find(|s| s["name"] == name).unwrap();
        let ops = s["sparse_ops"].as_array().unwrap();
        assert_eq!(ops.len(), 1, "{name}: {s}");
        ops[0].clone()
    };
    // density=0.1 of 64 blocks keeps round(6.4) = 6 blocks of 32·32 values, exactly.
    let y1 = op("y1");
    assert_eq!(y1["stored_values"], 6 * 32 * 32);
    assert_eq!(y1["flops"], 2 * 6 * 32 * 32 * 64);
    assert_eq!(y1["dense_flops"], 2 * 256 * 256 * 64);
    assert_eq!(y1["density_assumed"], false);
    assert_eq!(y1["format"], "bsr(32, 32)");
    // threshold= is counted from w's data, and the transposed view reuses the same storage.
    let (y2, y3) = (op("y2"), op("y3"));
    assert_eq!(y2["density_assumed"], false);
    assert_eq!(y3["format"], "csc");
    assert_eq!(y2["stored_values"], y3["stored_values"]);
    let kept = y2["stored_values"].as_u64().unwrap();
    assert!(kept > 256 * 256 / 4 && kept < 256 * 256 / 2, "{kept}");
    // A verdict agrees with the times, and the break-even density separates the two answers.
    for name in ["y1", "y2", "y3", "y4", "y5"] {
        let o = op(name);
        let (ts, td) = (
            o["sparse_seconds"].as_f64().unwrap(),
            o["dense_seconds"].as_f64().unwrap(),
        );
        let verdict = if ts < td { "sparse" } else { "dense" };
        assert_eq!(o["verdict"], verdict, "{name}: {o}");
        if let Some(be) = o["break_even_density"].as_f64() {
            let density = o["density"].as_f64().unwrap();
            assert_eq!(density < be, verdict == "sparse", "{name}: {o}");
        }
    }
    // Only sparse products count stored entries: `d = dense(ws)` costs nothing.
    let d = st.iter().find(|s| s["name"] == "d").unwrap();
    assert_eq!(d["flops"], 0);
    assert_eq!(d["sparse_ops"], serde_json::json!([]));
}

#[test]
fn auto_picks_the_format_predicted_faster() {
    let dir = tempfile::tempdir().unwrap();
    let script = "input w: f32[o=512, i=512] = randn(seed=1)\n\
                  input x: f32[i, b=64] = randn(seed=2)\n\
                  ws = sparsify(w, auto, density=0.05)\n\
                  y = einsum(ws, x, \"o i, i b -> o b\")\n\
                  wd = sparsify(w, auto, density=0.9)\n\
                  z = einsum(wd, x, \"o i, i b -> o b\")\n\
                  wl = sparsify(w, auto(csr, \"2:4\"))\n\
                  u = einsum(wl, x, \"o i, i b -> o b\")\n\
                  n = sparsify(w, auto, density=0.1)\n\
                  q = relu(n)\n\
                  output y, z, u, q\n";
    let check = tdsl_script(dir.path(), "check", script, &[]);
    assert_eq!(check.code, 0, "{}", check.stderr);
    insta::assert_snapshot!("check_auto", check.stdout);
    let cost = tdsl_script(dir.path(), "cost", script, &[]);
    assert_eq!(cost.code, 0, "{}", cost.stderr);
    insta::assert_snapshot!("cost_auto", cost.stdout);
    // The choice is the program that runs: the sparse choices used by einsums are SpMMs (with
    // `density=`, dense is no candidate: pruning was asked for).
    let plan = tdsl_script(dir.path(), "plan", script, &[]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    assert_eq!(plan.stdout.matches("spmm ").count(), 2, "{}", plan.stdout);
    let json = tdsl_script(dir.path(), "cost", script, &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let formats: Vec<&str> = v["auto"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["format"].as_str().unwrap())
        .collect();
    assert_eq!(
        formats,
        ["bsr(16, 16)", "bsr(32, 32)", "dense", "bsr(16, 16)"]
    );
}

#[test]
fn auto_rejects_what_is_not_a_format() {
    let dir = tempfile::tempdir().unwrap();
    let script = "input w: f32[o=8, i=8] = randn(seed=1)\nws = sparsify(w, auto(1.5))\noutput ws\n";
    let out = tdsl_script(dir.path(), "check", script, &[]);
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("format::unknown"), "{}", out.stderr);
    let script = "input w: f32[o=8, i=8] = randn(seed=1)\nws = sparsify(w, auto(\"2:4\"), density=0.5)\noutput ws\n";
    let out = tdsl_script(dir.path(), "check", script, &[]);
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("check::bad_argument"), "{}", out.stderr);
}

#[test]
fn run_writes_npy_outputs_and_reads_npy_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let x = Tensor::from_f64(
        tdsl::DType::F32,
        vec![2, 3],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
    );
    write_npy(&dir.path().join("x.npy"), &x).unwrap();
    let script = "input x: f32[a, b] = zeros\ny = rearrange(x, \"a b -> b a\")\ns = reduce(x, \"a b ->\", \"sum\")\noutput y, s\n";
    let out = tdsl_script(
        dir.path(),
        "run",
        script,
        &["--input", "x=x.npy", "--out", "out/nested"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "");
    let y = read_npy(&dir.path().join("out/nested/y.npy")).unwrap();
    assert_eq!(y.shape(), vec![3, 2]);
    assert_eq!(y.to_f64(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    let s = read_npy(&dir.path().join("out/nested/s.npy")).unwrap();
    assert_eq!(
        s.shape(),
        Vec::<usize>::new(),
        "a scalar is written with shape ()"
    );
    assert_eq!(s.to_f64(), vec![21.0]);
}

#[test]
fn run_summary_without_out() {
    let dir = tempfile::tempdir().unwrap();
    let out = tdsl_script(
        dir.path(),
        "run",
        "input x: f64[n=5] = arange\ny = x * 2\noutput y\n",
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let text: String = out
        .stdout
        .lines()
        .filter(|l| !l.starts_with("time:"))
        .map(|l| format!("{l}\n"))
        .collect();
    insta::assert_snapshot!("run_summary", text);
    assert!(out.stdout.contains("time:"));
}

#[test]
fn safetensors_inputs_and_weights() {
    let dir = tempfile::tempdir().unwrap();
    let w = Tensor::from_f64(tdsl::DType::F32, vec![2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = Tensor::from_f64(tdsl::DType::F32, vec![2], &[10.0, 20.0]);
    tdsl::io::safetensors::write_safetensors(
        &dir.path().join("m.safetensors"),
        &[("w", &w), ("b", &b)],
    )
    .unwrap();
    let script =
        "input w: f32[i, j]\ninput b: f32[j]\ny = reduce(w, \"i j -> j\", \"sum\") + b\noutput y\n";
    let out = tdsl_script(
        dir.path(),
        "run",
        script,
        &["--weights", "m.safetensors", "--out", "o"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        read_npy(&dir.path().join("o/y.npy")).unwrap().to_f64(),
        vec![14.0, 26.0]
    );
    let out = tdsl_script(
        dir.path(),
        "run",
        script,
        &[
            "--input",
            "w=m.safetensors:w",
            "--input",
            "b=m.safetensors:b",
            "--out",
            "o2",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        read_npy(&dir.path().join("o2/y.npy")).unwrap().to_f64(),
        vec![14.0, 26.0]
    );
}

#[test]
fn input_overrides_initialiser_and_extents_come_from_data() {
    let dir = tempfile::tempdir().unwrap();
    let x = Tensor::from_f64(tdsl::DType::F64, vec![4], &[1.0, 2.0, 3.0, 4.0]);
    write_npy(&dir.path().join("x.npy"), &x).unwrap();
    let script = "input x: f64[n] = zeros\ny = reduce(x, \"n ->\", \"sum\")\noutput y\n";
    let out = tdsl_script(
        dir.path(),
        "run",
        script,
        &["--input", "x=x.npy", "--out", "o"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        read_npy(&dir.path().join("o/y.npy")).unwrap().to_f64(),
        vec![10.0]
    );
}

fn assert_empty_or_missing(dir: &Path) {
    if dir.exists() {
        let n = std::fs::read_dir(dir).unwrap().count();
        assert_eq!(n, 0, "nothing may be left in {}", dir.display());
    }
}

#[test]
fn errors_exit_1_and_leave_no_output() {
    let dir = tempfile::tempdir().unwrap();
    for script in [
        "input x: f32[a=2, b=3] = ones\ny = rearrange(x, \"a b -> a\")\noutput y\n",
        "input x: f32[a=2, b=3] = ones\ny = x\n",
        "input x: f32[a=2, b=3]\noutput x\n",
        "y = ",
    ] {
        let out = tdsl_script(dir.path(), "run", script, &["--out", "o"]);
        assert_eq!(out.code, 1, "{script}: {}", out.stderr);
        assert!(out.stderr.contains("tdsl::"), "{}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
        assert_empty_or_missing(&dir.path().join("o"));
    }
}

#[test]
fn bad_command_lines_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.tdsl"),
        "input x: f32[n=2] = ones\noutput x\n",
    )
    .unwrap();
    for args in [
        vec!["frobnicate"],
        vec!["run"],
        vec!["run", "missing.tdsl"],
        vec!["run", "s.tdsl", "--input", "novalue"],
        vec!["run", "s.tdsl", "--backend", "warp"],
    ] {
        let out = tdsl_in(dir.path(), &args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
    }
}

#[test]
fn json_diagnostics_name_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let out = tdsl_script(
        dir.path(),
        "check",
        "input x: f32[a=2]\ny = exq(x)\n",
        &["--message-format", "json"],
    );
    assert_eq!(out.code, 1);
    let v: serde_json::Value = serde_json::from_str(out.stderr.lines().next().unwrap()).unwrap();
    assert_eq!(v["code"], "tdsl::check::unknown_function");
    assert_eq!(v["line"], 2);
    assert_eq!(v["column"], 5);
    assert!(scrub(&out.stderr).contains("did you mean `exp`"));
}

/// The sparse examples run on compressed storage through the CLI: the JIT (spmm on stored
/// blocks / 2:4 values) agrees with the reference interpreter, and `check` says which einsums
/// run sparse.
#[test]
fn sparse_examples_run_on_stored_entries() {
    for ex in ["block_sparse_mlp", "linear_2to4"] {
        let dir = tempfile::tempdir().unwrap();
        let script = example(&format!("{ex}.tdsl"));
        let check = tdsl_in(dir.path(), &["check", &script]);
        assert_eq!(check.code, 0, "{}", check.stderr);
        assert!(check.stdout.contains("sparse: "), "{}", check.stdout);
        let plan = tdsl_in(dir.path(), &["plan", &script]);
        assert!(plan.stdout.contains("spmm "), "{}", plan.stdout);
        assert!(!plan.stdout.contains("densify"), "{}", plan.stdout);
        for be in ["jit", "interp"] {
            let out = tdsl_in(dir.path(), &["run", "--backend", be, &script, "--out", be]);
            assert_eq!(out.code, 0, "{}", out.stderr);
        }
        for f in std::fs::read_dir(dir.path().join("jit")).unwrap() {
            let f = f.unwrap().path();
            let name = f.file_name().unwrap();
            let (a, b) = (
                read_npy(&f).unwrap().to_f64(),
                read_npy(&dir.path().join("interp").join(name))
                    .unwrap()
                    .to_f64(),
            );
            let scale = b.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
            for (x, y) in a.iter().zip(&b) {
                assert!((x - y).abs() <= 1e-5 * scale, "{ex} {name:?}: {x} vs {y}");
            }
        }
    }
}

/// A scipy-style `.npz` input is read, validated and compressed into the declared format, and
/// an output typed csr comes back as `.npz` with the same entries.
#[test]
fn npz_inputs_and_sparse_outputs_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let t = tdsl_sparse::SparseTensor {
        shape: vec![3, 4],
        layout: tdsl_sparse::Layout::Csr,
        ptr: vec![0, 2, 2, 3],
        idx: vec![1, 3, 0],
        values: tdsl_sparse::Values::F32(vec![1.5, -2.0, 4.0]),
    };
    tdsl::io::npz::write_npz(&dir.path().join("w.npz"), &t).unwrap();
    let script = "input w: f32[r=3, c=4] @ csr\ninput x: f32[c=4] = ones\n\
                  y = einsum(w, x, \"r c, c -> r\")\nw2 = rearrange(w, \"r c -> c r\")\noutput y, w\n";
    let out = tdsl_script(
        dir.path(),
        "run",
        script,
        &["--input", "w=w.npz", "--out", "o"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let y = read_npy(&dir.path().join("o/y.npy")).unwrap().to_f64();
    assert_eq!(y, vec![-0.5, 0.0, 4.0]);
    let back = tdsl::io::npz::read_npz(&dir.path().join("o/w.npz")).unwrap();
    assert_eq!(back, t);
    // A malformed file is a diagnostic, and no output is written.
    std::fs::write(dir.path().join("bad.npz"), b"not a zip").unwrap();
    let out = tdsl_script(
        dir.path(),
        "run",
        script,
        &["--input", "w=bad.npz", "--out", "p"],
    );
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(!dir.path().join("p").exists());
}

/// `tdsl machine` shows the ceilings every verdict uses; a cached measurement taken under load
/// (a clock far below the nominal one) is measured again and replaced, and `--remeasure` always
/// measures.
#[test]
fn machine_replaces_an_implausible_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("tdsl").join("machine.txt");
    std::fs::create_dir_all(cache.parent().unwrap()).unwrap();
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::fs::write(
        &cache,
        format!(
            "model={model}\nthreads={threads}\ncores={threads}\nclock_ghz=0.01\nflops_per_cycle=32\npeak_gflops=0.64\nbandwidth_gbps=1\nmeasured_at=0\n"
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tdsl"))
            .args(args)
            .env("XDG_CACHE_HOME", dir.path())
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let first = run(&["machine"]);
    assert!(first.contains("implausible clock (0.01 GHz)"), "{first}");
    let text = std::fs::read_to_string(&cache).unwrap();
    if first.contains("warning:") {
        // A busy machine (or an unoptimised test build, whose clock loop runs slow) measured
        // implausibly again: that result must not be cached.
        assert!(text.contains("clock_ghz=0.01"), "{text}");
    } else {
        assert!(!text.contains("clock_ghz=0.01"), "{text}");
        assert!(text.contains("measured_at="), "{text}");
        let second = run(&["machine"]);
        assert!(second.contains("cached"), "{second}");
    }
    let third = run(&["machine", "--remeasure"]);
    assert!(third.contains("--remeasure"), "{third}");
}

#[test]
fn emit_asm_prints_the_machine_code_of_every_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let script = "input x: f32[r=8, c=40] = randn(seed=0)\n\
                  y = x / sqrt(reduce(x * x, 'r c -> r 1', 'sum'))\n\
                  output y\n";
    let out = tdsl_script(dir.path(), "emit", script, &["--target", "asm"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("; kernel k0"), "{}", out.stdout);
    if cfg!(target_arch = "x86_64") {
        assert!(out.stdout.contains("ret"), "{}", out.stdout);
        // The row statistic is computed once per row, not in the loops over its elements.
        assert_eq!(out.stdout.matches("sqrt").count(), 1, "{}", out.stdout);
    }
}

#[test]
fn cost_and_auto_predict_for_the_gpu_with_device_cuda() {
    // A bf16 weight in 32×32 blocks at density 0.5: the CPU's BSR kernel (0.5 of its GEMM
    // ceiling against 0.9 for dense) breaks even at 56%, the GPU's tensor-core BSR (0.22 against
    // 0.55 for dense wgmma) at 40%. Neither needs a GPU to predict.
    let dir = tempfile::tempdir().unwrap();
    let script = "input x: bf16[n=2048, i=2048] = randn(seed=0)\n\
                  input w: bf16[o=2048, i] @ bsr(32, 32) = randn(seed=1, density=0.5)\n\
                  y = einsum(x, w, 'n i, o i -> n o')\n\
                  output y\n";
    let cpu = tdsl_script(dir.path(), "cost", script, &[]);
    assert_eq!(cpu.code, 0, "{}", cpu.stderr);
    let gpu = tdsl_script(dir.path(), "cost", script, &["--device", "cuda"]);
    assert_eq!(gpu.code, 0, "{}", gpu.stderr);
    let line = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("y ") && l.contains("bsr(32, 32)"))
            .unwrap_or_else(|| panic!("no verdict line in\n{out}"))
            .to_string()
    };
    assert!(line(&cpu.stdout).contains("sparse, "), "{}", cpu.stdout);
    assert!(line(&gpu.stdout).contains("dense, "), "{}", gpu.stdout);
    assert!(gpu.stdout.contains("nominal GPU"), "{}", gpu.stdout);
    // 16 rows: both products only read their weight, at the kernels' measured fractions of the
    // bandwidth; 2:4 reads half the bytes at 0.12 against dense's 0.30 and loses (an H200
    // measured 124 µs against 90), BSR at 0.25 reads a quarter and wins. One row: 2:4 and dense
    // both run row kernels (no tensor-core tile), at one rate, and 2:4's fewer bytes win.
    for (rows, format, verdict) in [
        (16, "2:4(i) = randn(seed=1)", "dense, "),
        (16, "bsr(32, 32) = randn(seed=1, density=0.25)", "sparse, "),
        (1, "2:4(i) = randn(seed=1)", "sparse, "),
    ] {
        let small = format!(
            "input x: bf16[n={rows}, i=2048] = randn(seed=0)\n\
             input w: bf16[o=2048, i] @ {format}\n\
             y = einsum(x, w, 'n i, o i -> n o')\n\
             output y\n"
        );
        let out = tdsl_script(dir.path(), "cost", &small, &["--device", "cuda"]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let l = out
            .stdout
            .lines()
            .find(|l| l.starts_with("y ") && l.contains(" faster"))
            .unwrap_or_else(|| panic!("no verdict line in\n{}", out.stdout))
            .to_string();
        assert!(l.contains(verdict), "{rows} rows, {format}: {l}");
    }
    // An f32 weight: its BSR product runs the generic kernels; the dense product the exact f32
    // template, or, with `--tf32`, TF32 tensor cores, predicted faster still.
    let f32 = script.replace("bf16", "f32");
    let dense_ms = |extra: &[&str]| {
        let mut args = vec!["--device", "cuda"];
        args.extend_from_slice(extra);
        let out = tdsl_script(dir.path(), "cost", &f32, &args);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let l = line(&out.stdout);
        assert!(l.contains("dense, "), "{l}");
        (l, out.stdout)
    };
    let (exact, _) = dense_ms(&[]);
    let (tf32, out) = dense_ms(&["--tf32"]);
    assert!(out.contains("f32 products on TF32"), "{out}");
    let faster = |l: &str| -> f64 {
        let i = l.find("× faster").expect("a ratio");
        l[..i].rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(faster(&tf32) > 4.0 * faster(&exact), "{exact}\n{tf32}");
}
