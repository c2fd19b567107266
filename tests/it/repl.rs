//! `tdsl repl` as a pipe: statements and commands on stdin, plain text out. Each statement's
//! one-line summary, the session commands and the error handling are snapshot-tested; `:time`
//! depends on the machine, so only its shape is checked.

use crate::common::{repo, tdsl_in};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `tdsl repl` in `dir` with `input` on stdin. Returns the exit status and stdout and
/// stderr interleaved as they were written (both go to one pipe).
pub(crate) fn repl_in(dir: &Path, input: &str) -> (i32, String) {
    let (mut reader, writer) = std::io::pipe().expect("a pipe");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tdsl"))
        .arg("repl")
        .current_dir(dir)
        .env("NO_COLOR", "1")
        // Predicted times are for the nominal machine, so snapshots do not depend on this one.
        .env("TDSL_MACHINE", "nominal")
        .stdin(Stdio::piped())
        .stdout(writer.try_clone().expect("clone the pipe"))
        .stderr(writer)
        .spawn()
        .expect("the tdsl binary runs");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_string();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let mut out = String::new();
    reader.read_to_string(&mut out).expect("read the output");
    feeder.join().unwrap();
    let status = child.wait().expect("tdsl exits");
    (status.code().unwrap_or(-1), out)
}

fn repl(input: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    repl_in(dir.path(), input)
}

fn attention() -> String {
    std::fs::read_to_string(repo().join("examples/attention.tdsl")).unwrap()
}

/// The output of `commands` typed after the attention example (without the example's own
/// lines of output).
fn after_attention(commands: &str) -> String {
    let (code, base) = repl(&attention());
    assert_eq!(code, 0, "{base}");
    let (code, out) = repl(&format!("{}{commands}", attention()));
    assert!(out.starts_with(&base), "{out}");
    assert!(code == 0 || code == 1, "{out}");
    out[base.len()..].to_string()
}

#[test]
fn attention_pasted_line_by_line() {
    let (code, out) = repl(&attention());
    assert_eq!(code, 0, "{out}");
    insta::assert_snapshot!("repl_attention", out);
}

#[test]
fn cost_shows_every_statement_and_totals() {
    insta::assert_snapshot!("repl_cost", after_attention(":cost\n"));
}

#[test]
fn sparse_products_show_predictions_and_auto_choices() {
    let input = "input x: f32[i=256, b=64] = randn(seed=0)\n\
                 input w: f32[o=256, i] @ bsr(32, 32) = randn(seed=1, density=0.25)\n\
                 y = einsum(w, x, \"o i, i b -> o b\")\n\
                 input u: f32[o, i] = randn(seed=2)\n\
                 a = sparsify(u, auto, density=0.02)\n\
                 z = einsum(a, x, \"o i, i b -> o b\")\n\
                 einsum(a, x, \"o i, i b -> o b\")\n\
                 :cost\n";
    let (code, out) = repl(input);
    assert_eq!(code, 0, "{out}");
    insta::assert_snapshot!("repl_sparse_predictions", out);
}

#[test]
fn cost_shows_contraction_paths_and_sparse_flops() {
    let input = "input a: f32[i=64, j=8] = randn(seed=0)\n\
                 input b: f32[j, k=64] @ csr = randn(seed=1, density=0.25)\n\
                 input c: f32[k, l=4] = randn(seed=2)\n\
                 y = einsum(a, b, c, \"i j, j k, k l -> i l\")\n\
                 :cost\n";
    let (code, out) = repl(input);
    assert_eq!(code, 0, "{out}");
    insta::assert_snapshot!("repl_cost_path", out);
}

#[test]
fn plan_of_one_statement() {
    let out = after_attention(":plan scores\n");
    assert!(out.contains("kernel k3 (scores: einsum step 1/1)"), "{out}");
    assert!(!out.contains("kernel k4"), "{out}");
    insta::assert_snapshot!("repl_plan_scores", out);
}

#[test]
fn vars_lists_the_session() {
    insta::assert_snapshot!("repl_vars", after_attention(":vars\n"));
}

#[test]
fn mem_counts_tensors_and_training_state() {
    insta::assert_snapshot!("repl_mem", after_attention(":mem\n:set dtype bf16\n:mem\n"));
}

#[test]
fn train_flops_and_mfu() {
    let out = after_attention(":train 1000000 10\n:train 1000000 10 100\n:train 2e6\n");
    // The default peak is this machine's measured one: keep the line, drop its numbers.
    let out: String = out
        .lines()
        .map(|l| {
            if l.ends_with("(measured on this machine)") {
                let head = l.split(':').next().unwrap_or("");
                format!("{head}: [depends on this machine] (measured on this machine)\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    // 6 · 12,288 parameters · 1,000,000 tokens.
    assert!(out.contains("73,728,000,000 FLOPs"), "{out}");
    insta::assert_snapshot!("repl_train", out);
}

#[test]
fn an_error_keeps_the_session() {
    let input = "input x: f32[n=4] = arange\n\
                 y = x + nope\n\
                 y = x * 2\n\
                 z = einsum(x, y, \"n, m -> \")\n\
                 z = y + x\n\
                 :vars\n";
    let (code, out) = repl(input);
    assert_eq!(code, 1, "a failed line makes the piped session fail: {out}");
    insta::assert_snapshot!("repl_error_then_good", out);
}

#[test]
fn reset_forgets_everything() {
    let input = "input x: f32[n=4] = arange\ny = x * 2\n:reset\n:vars\ny = x\n";
    let (code, out) = repl(input);
    assert_eq!(code, 1, "{out}");
    insta::assert_snapshot!("repl_reset", out);
}

#[test]
fn help_lists_the_commands() {
    let (code, out) = repl(":help\n");
    assert_eq!(code, 0, "{out}");
    for cmd in [
        ":cost",
        ":plan",
        ":emit",
        ":time",
        ":load",
        ":save",
        ":vars",
        ":reset",
        ":set",
        ":mem",
        ":train",
        ":plot",
        ":sparsity",
        ":quit",
    ] {
        assert!(out.contains(cmd), "{cmd} missing from :help");
    }
    insta::assert_snapshot!("repl_help", out);
}

#[test]
fn multi_line_input_bare_expressions_and_several_statements() {
    let input = "input x: f32[n=4, m=6] = randn(seed=0)\n\
                 y = einsum(x,\n\
                 \x20   x,\n\
                 \x20   \"n m, n k -> m k\")\n\
                 z = y *\n\
                 \x20   2\n\
                 reduce(z, \"m k -> m\", \"sum\") + 1\n\
                 a = z; b = a + 1\n\
                 :vars\n\
                 output b\n\
                 :quit\n\
                 this line is never read\n";
    let (code, out) = repl(input);
    assert_eq!(code, 0, "{out}");
    insta::assert_snapshot!("repl_multi_line", out);
}

#[test]
fn syntax_errors_point_at_the_input_line() {
    let (code, out) = repl("input x: f32[n=4] = ones\n:vars\n\ny = x +* 2\n");
    assert_eq!(code, 1);
    assert!(out.contains("<repl>:4:8:"), "{out}");
    insta::assert_snapshot!("repl_syntax_error", out);
}

#[test]
fn save_and_load_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = repl_in(
        dir.path(),
        &format!("{}:save s.tdsl\n:save missing/dir/s.tdsl\n", attention()),
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("saved 16 statements to s.tdsl"), "{out}");
    assert!(out.contains("tdsl::io::write"), "{out}");
    // The saved script checks like the original.
    let saved = tdsl_in(dir.path(), &["check", "s.tdsl"]);
    let original = tdsl_in(&repo(), &["check", "examples/attention.tdsl"]);
    assert_eq!(saved.code, 0, "{}", saved.stderr);
    assert_eq!(saved.stdout, original.stdout);
    let (code, out) = repl_in(
        dir.path(),
        ":load s.tdsl\n:load nope.tdsl\ny2 = relu(out)\n",
    );
    assert_eq!(code, 1, "{out}");
    insta::assert_snapshot!("repl_load", out);
}

#[test]
fn emit_plot_and_sparsity() {
    let dir = tempfile::tempdir().unwrap();
    let input = format!(
        "{}input w: f32[r=64, c=128] @ bsr(16, 32) = randn(seed=4, density=0.5)\n\
         :emit cuda\n:emit clif out\n:plot roof.svg\n:sparsity w w.svg\n:sparsity x x.svg\n\
         :plot no/such/dir/roof.svg\n",
        attention()
    );
    let (code, out) = repl_in(dir.path(), &input);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("// kernel k6 (out: pattern)"), "{out}");
    // The projections run on the f32 template, the last one storing straight into `out` (its
    // relayout k6 folded into the store); the softmax is a kernel of its own.
    assert!(out.contains("TDSL_KERNEL k4_0("), "CUDA text: {out}");
    assert!(out.contains("f32 FMA (no tensor cores"), "CUDA text: {out}");
    assert!(!out.contains("TDSL_KERNEL k6_0("), "CUDA text: {out}");
    assert!(out.contains("; kernel k6 (out: pattern)"), "{out}");
    assert!(out.contains("function"), "CLIF text: {out}");
    assert!(
        out.contains("wrote roofline of 9 statements to roof.svg"),
        "{out}"
    );
    assert!(
        out.contains("wrote the bsr(16, 32) pattern of `w`"),
        "{out}"
    );
    assert!(out.contains("`x` is dense"), "{out}");
    assert!(out.contains("tdsl::io::write"), "{out}");
    for f in ["roof.svg", "w.svg"] {
        let svg = std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert!(
            svg.starts_with("<svg"),
            "{f}: {}",
            &svg[..svg.len().min(80)]
        );
    }
}

/// Checks `:time`'s report line by line: the machine, the run summary, a header, one row per
/// kernel (time, rates, fractions of peak and bandwidth, intensity, bound) and a total row.
#[test]
fn time_reports_every_kernel_against_the_machine() {
    let out = after_attention(":time\n:time scores\n:set backend interp\n:time\n:plot roof.svg\n");
    let lines: Vec<&str> = out.lines().collect();
    let mut i = 0;
    let mut expect_run = |want_rows: &[&str], total: &str| {
        assert!(lines[i].starts_with("machine: "), "{}", lines[i]);
        assert!(lines[i].contains("GFLOP/s peak"), "{}", lines[i]);
        let run = lines[i + 1];
        assert!(run.starts_with("JIT: 7 kernels ("), "{run}");
        assert!(
            run.contains("median of") && run.contains("threads:"),
            "{run}"
        );
        assert!(
            lines[i + 2].starts_with("ridge point: "),
            "{}",
            lines[i + 2]
        );
        let header: Vec<&str> = lines[i + 3].split_whitespace().collect();
        assert_eq!(
            header,
            [
                "kernel", "origin", "time", "GFLOP/s", "%", "peak", "GB/s", "%", "bw", "FLOP/B",
                "bound"
            ]
        );
        i += 4;
        for (row, kernel) in want_rows.iter().enumerate() {
            let l = lines[i + row];
            assert!(l.starts_with(kernel), "row {row}: {l}");
            check_numbers(l);
        }
        i += want_rows.len();
        assert!(lines[i].starts_with(total), "{}", lines[i]);
        check_numbers(lines[i]);
        i += 1;
    };
    expect_run(&["k0 ", "k1 ", "k2 ", "k3 ", "k4 ", "k5 ", "k6 "], "total ");
    expect_run(&["k3 "], "selected ");
    assert!(
        lines[i].starts_with("threads "),
        "the :set line: {}",
        lines[i]
    );
    i += 1;
    assert!(lines[i].starts_with("machine: "), "{}", lines[i]);
    assert!(
        lines[i + 1].starts_with("reference interpreter: median of "),
        "{}",
        lines[i + 1]
    );
    check_numbers(lines[i + 3]);
    assert!(
        lines[i + 4].starts_with("wrote roofline of 9 statements to roof.svg (7 measured"),
        "{}",
        lines[i + 4]
    );
}

/// The last seven columns of a `:time` row: a duration, GFLOP/s, a percentage, GB/s, a
/// percentage, FLOP/B and `compute` or `memory`.
fn check_numbers(line: &str) {
    let cols: Vec<&str> = line.split_whitespace().collect();
    let n = cols.len();
    assert!(n >= 9, "{line}");
    let (unit, rest) = (cols[n - 7], &cols[n - 6..]);
    assert!(["s", "ms", "µs"].contains(&unit), "{line}");
    assert!(cols[n - 8].parse::<f64>().is_ok(), "{line}");
    let num = |s: &str| s.trim_end_matches('%').parse::<f64>().is_ok();
    assert!(num(rest[0]) && num(rest[2]) && num(rest[4]), "{line}");
    assert!(rest[1].ends_with('%') && num(rest[1]), "{line}");
    assert!(rest[3].ends_with('%') && num(rest[3]), "{line}");
    assert!(["compute", "memory"].contains(&rest[5]), "{line}");
}

/// The sparse examples typed into the REPL: each statement shows its format, `:plan` the
/// sparse calls, and `:time` runs them.
#[test]
fn sparse_examples_in_the_repl() {
    for ex in ["block_sparse_mlp", "linear_2to4"] {
        let text =
            std::fs::read_to_string(repo().join("examples").join(format!("{ex}.tdsl"))).unwrap();
        let (code, out) = repl(&format!("{text}:plan y\n:time\n"));
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains("@ bsr(32, 32)") || out.contains("@ 2:4"),
            "{out}"
        );
        assert!(out.contains("spmm "), "{out}");
        assert!(out.contains("sparsify "), "{out}");
        assert!(out.lines().any(|l| l.starts_with("machine: ")), "{out}");
    }
}

/// `:set tf32 on` lets the session's f32 products run on the GPU's TF32 tensor cores, as
/// `tdsl --tf32 repl` does: `:emit cuda` shows the TF32 template, `:set` the setting, and
/// changing the backend keeps it.
#[test]
fn set_tf32_reaches_the_cuda_code() {
    let product =
        "input x: f32[n=256, i=64]\ninput w: f32[o=128, i]\ny = einsum(x, w, 'n i, o i -> n o')\n";
    let (code, out) = repl(&format!("{product}:emit cuda y\n"));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("f32 FMA") && !out.contains("k8 tf32"), "{out}");
    let (code, out) = repl(&format!(
        "{product}:set tf32 on\n:set backend eval\n:set\n:emit cuda y\n:set tf32 maybe\n"
    ));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("backend eval") && out.contains("tf32 on"),
        "{out}"
    );
    assert!(out.contains("k8 tf32"), "{out}");
    assert!(out.contains("tf32 on|off"), "the usage line: {out}");
}
