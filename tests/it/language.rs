//! The einops/numpy habits and the layer vocabulary (issue: write it the way einops and numpy
//! users do): single quotes, comparisons, `where`, `index`, `clamp`, the new functions, einsum
//! axis lengths and numpy subscripts, the depth guard, and exact integers in `cost --json`.
//! Every value is checked on all three engines (interpreter, loop-IR evaluator, JIT) against
//! numbers computed here.

use crate::common::tdsl_script;
use tdsl::io::npy::read_npy;

/// Runs `script` with every backend, writing outputs to `DIR/<backend>/NAME.npy`; returns the
/// values of output `name` from each.
fn run_all(script: &str, name: &str) -> Vec<Vec<f64>> {
    let dir = tempfile::tempdir().unwrap();
    let mut got = Vec::new();
    for backend in ["interp", "eval", "jit"] {
        let out_dir = dir.path().join(backend);
        let out = tdsl_script(
            dir.path(),
            "run",
            script,
            &["--backend", backend, "--out", out_dir.to_str().unwrap()],
        );
        assert_eq!(out.code, 0, "{backend}: {}", out.stderr);
        let t = read_npy(&out_dir.join(format!("{name}.npy"))).unwrap();
        got.push(t.to_f64());
    }
    got
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * w.abs().max(1.0);
        assert!(ok, "{what}[{i}]: got {g}, want {w}");
    }
}

#[test]
fn single_quotes_comparisons_where_index_and_clamp() {
    let script = "input x: f32[i=3, j=4] = arange\n\
                  m = where(index(x, 'j') <= index(x, \"i\"), x, -inf)\n\
                  c = clamp(x - 5, -2, 3) + clip(x, max=1) * (x >= 6)\n\
                  k = rearrange(x, 'i j -> j i') != 5\n\
                  output m, c, k\n";
    let x: Vec<f64> = (0..12).map(f64::from).collect();
    let m: Vec<f64> = (0..12)
        .map(|n| {
            if n % 4 <= n / 4 {
                x[n]
            } else {
                f64::NEG_INFINITY
            }
        })
        .collect();
    let c: Vec<f64> = x
        .iter()
        .map(|&v| (v - 5.0).clamp(-2.0, 3.0) + v.min(1.0) * f64::from(u8::from(v >= 6.0)))
        .collect();
    let k: Vec<f64> = (0..12)
        .map(|n| {
            let (j, i) = (n / 3, n % 3);
            f64::from(u8::from(x[i * 4 + j] != 5.0))
        })
        .collect();
    for (name, want) in [("m", &m), ("c", &c), ("k", &k)] {
        for got in run_all(script, name) {
            assert_close(&got, want, 0.0, name);
        }
    }
}

#[test]
fn new_functions_match_their_definitions() {
    let script = "input x: f64[n=9] = arange\n\
                  v = (x - 4) * 0.75\n\
                  e = erf(v)\ng = gelu(v, approximate='none')\ng2 = gelu_erf(v)\ns = silu(v)\n\
                  sp = softplus(v * 40)\nl = log1p(abs(v) * 1e-9)\nm = expm1(v * 1e-9)\n\
                  r = floor(v) + ceil(v) * 10 + round(v) * 100 + sign(v) * 1000\n\
                  output e, g, g2, s, sp, l, m, r\n";
    let v: Vec<f64> = (0..9).map(|i| (f64::from(i) - 4.0) * 0.75).collect();
    let erf = |x: f64| libm::erf(x);
    let cases: Vec<(&str, Vec<f64>)> = vec![
        ("e", v.iter().map(|&x| erf(x)).collect()),
        (
            "g",
            v.iter()
                .map(|&x| 0.5 * x * (1.0 + erf(x / 2f64.sqrt())))
                .collect(),
        ),
        (
            "g2",
            v.iter()
                .map(|&x| 0.5 * x * (1.0 + erf(x / 2f64.sqrt())))
                .collect(),
        ),
        ("s", v.iter().map(|&x| x / (1.0 + (-x).exp())).collect()),
        (
            "sp",
            v.iter()
                .map(|&x| (x * 40.0).max(0.0) + (-(x * 40.0).abs()).exp().ln_1p())
                .collect(),
        ),
        ("l", v.iter().map(|&x| (x.abs() * 1e-9).ln_1p()).collect()),
        ("m", v.iter().map(|&x| (x * 1e-9).exp_m1()).collect()),
        (
            "r",
            v.iter()
                .map(|&x| {
                    let sign = if x == 0.0 { 0.0 } else { x.signum() };
                    x.floor() + x.ceil() * 10.0 + x.round_ties_even() * 100.0 + sign * 1000.0
                })
                .collect(),
        ),
    ];
    for (name, want) in cases {
        for got in run_all(script, name) {
            assert_close(&got, &want, 1e-14, name);
        }
    }
}

#[test]
fn einsum_axis_lengths_whole_groups_and_numpy_subscripts() {
    let script = "input a: f32[m=3, hd=8] = arange\n\
                  input b: f32[hd, o=2] = ones\n\
                  x = einsum(a, b, 'm (h d), (h d) o -> m o')\n\
                  y = einsum(a, b, 'mk,ko->mo')\n\
                  z = einsum(a, b, 'mk,ko')\n\
                  w = einsum(a, a, 'm (h d), n (h d) -> h m n', h=4)\n\
                  output x, y, z, w\n";
    let a: Vec<f64> = (0..24).map(f64::from).collect();
    let row: Vec<f64> = (0..3)
        .flat_map(|m| {
            let s: f64 = a[m * 8..m * 8 + 8].iter().sum();
            [s, s]
        })
        .collect();
    for name in ["x", "y", "z"] {
        for got in run_all(script, name) {
            assert_close(&got, &row, 0.0, name);
        }
    }
    let w: Vec<f64> = (0..4)
        .flat_map(|h| {
            let a = &a;
            (0..3).flat_map(move |m| {
                (0..3).map(move |n| {
                    (0..2)
                        .map(|d| a[m * 8 + h * 2 + d] * a[n * 8 + h * 2 + d])
                        .sum()
                })
            })
        })
        .collect();
    for got in run_all(script, "w") {
        assert_close(&got, &w, 0.0, "w");
    }
}

#[test]
fn pack_and_unpack_as_einops() {
    // x: [b=2, n=3, c=2], y: [b=2, h=2, w=2, c=2], z: [b=2, c=2] (no `*` axes: one slot).
    let script = "input x: f32[b=2, n=3, c=2] = arange\n\
                  input y: f64[b=2, h=2, w=2, c=2] = arange\n\
                  input z: f32[b=2, c=2] = ones\n\
                  p = pack(x, y + 100, z, 'b * c')\n\
                  u, v, w = unpack(p * 2, \"b * c\", x, y, z)\n\
                  m, n = unpack(p, 'b * c', 7, 1)\n\
                  output p, u, v, w, m, n\n";
    let x: Vec<f64> = (0..12).map(f64::from).collect();
    let y: Vec<f64> = (0..16).map(|i| f64::from(i) + 100.0).collect();
    // p[b] = x[b] (3×2), y[b] (4×2), z[b] (1×2): 16 values per b.
    let mut p = Vec::new();
    for b in 0..2 {
        p.extend_from_slice(&x[b * 6..b * 6 + 6]);
        p.extend_from_slice(&y[b * 8..b * 8 + 8]);
        p.extend_from_slice(&[1.0, 1.0]);
    }
    let twice = |v: &[f64]| v.iter().map(|a| a * 2.0).collect::<Vec<f64>>();
    let y_back: Vec<f64> = (0..16).map(|i| (f64::from(i) + 100.0) * 2.0).collect();
    let m: Vec<f64> = (0..2)
        .flat_map(|b| p[b * 16..b * 16 + 14].to_vec())
        .collect();
    let n: Vec<f64> = (0..2)
        .flat_map(|b| p[b * 16 + 14..b * 16 + 16].to_vec())
        .collect();
    for (name, want) in [
        ("p", p.clone()),
        ("u", twice(&x)),
        ("v", y_back),
        ("w", vec![2.0; 4]),
        ("m", m),
        ("n", n),
    ] {
        for got in run_all(script, name) {
            assert_close(&got, &want, 0.0, name);
        }
    }
}

#[test]
fn pack_and_unpack_errors_have_codes() {
    let dir = tempfile::tempdir().unwrap();
    let head = "input x: f32[b=2, n=3, c=4] = ones\ninput y: f32[b=3, c=4] = ones\n";
    for (body, code) in [
        ("p = pack(x, 'b c')\noutput p", "tdsl::pattern::syntax"),
        ("p = pack(x, 'b * * c')\noutput p", "tdsl::pattern::syntax"),
        (
            "p = pack(x, 'b (n) * c')\noutput p",
            "tdsl::pattern::syntax",
        ),
        (
            "p = pack(x, 'b * b')\noutput p",
            "tdsl::pattern::duplicate_axis",
        ),
        (
            "p = pack(x, y, 'b * c')\noutput p",
            "tdsl::check::extent_mismatch",
        ),
        (
            "p = pack(x, 'b n * c k')\noutput p",
            "tdsl::pattern::rank_mismatch",
        ),
        (
            "a, b = unpack(x, 'b * c', 1, 1)\noutput a",
            "tdsl::check::extent_mismatch",
        ),
        (
            "a, b = unpack(x, 'b * c', 1, 1, 1)\noutput a",
            "tdsl::check::arity",
        ),
        (
            "a, b = unpack(x, 'b * c', 3, 0)\noutput a",
            "tdsl::check::zero_extent",
        ),
        (
            "a, b = unpack(x, 'b * c', 3)\noutput a",
            "tdsl::check::arity",
        ),
        (
            "a = unpack(x, 'b * c', 1, 2)\noutput a",
            "tdsl::check::bad_argument",
        ),
        ("a, b = x + 1\noutput a", "tdsl::check::bad_argument"),
        (
            "a, a = unpack(x, 'b * c', 1, 2)\noutput a",
            "tdsl::check::duplicate_name",
        ),
    ] {
        let script = format!("{head}{body}\n");
        let out = tdsl_script(dir.path(), "check", &script, &[]);
        assert_eq!(out.code, 1, "{body}: {}", out.stderr);
        assert!(
            out.stderr.contains(code),
            "{body}: want {code}: {}",
            out.stderr
        );
    }
}

#[test]
fn comparisons_do_not_chain() {
    let dir = tempfile::tempdir().unwrap();
    for chained in [
        "0 < x < 2",
        "x == x != 0",
        "(x) >= 1 <= 2",
        "x + 1 < x * 2 < 3",
    ] {
        let script = format!("input x: f32[n=3] = arange\ny = {chained}\noutput y\n");
        let out = tdsl_script(dir.path(), "check", &script, &[]);
        assert_eq!(out.code, 1, "{chained}: {}", out.stderr);
        assert!(
            out.stderr.contains("tdsl::syntax::chained_comparison"),
            "{chained}: {}",
            out.stderr
        );
    }
    // Parenthesized, either way round, they are two ordinary comparisons.
    let script = "input x: f32[n=3] = arange\n\
                  a = (0 < x) < 1\nb = 0 < (x < 2)\nc = (0 < x) * (x < 2)\n\
                  output a, b, c\n";
    for (name, want) in [
        ("a", [1.0, 0.0, 0.0]),
        ("b", [1.0, 1.0, 0.0]),
        ("c", [0.0, 1.0, 0.0]),
    ] {
        for got in run_all(script, name) {
            assert_close(&got, &want, 0.0, name);
        }
    }
}

#[test]
fn deep_input_is_a_diagnostic_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        format!(
            "input x: f32[n=2] = ones\ny = {}x{}\noutput y\n",
            "(".repeat(20_000),
            ")".repeat(20_000)
        ),
        format!(
            "input x: f32[n=2] = ones\ny = x{}\noutput y\n",
            " + x".repeat(50_000)
        ),
        format!(
            "input x: f32[n=2] = ones\ny = {}x\noutput y\n",
            "-".repeat(20_000)
        ),
    ];
    for script in &cases {
        let out = tdsl_script(dir.path(), "check", script, &[]);
        assert_eq!(out.code, 1, "{}", out.stderr);
        assert!(
            out.stderr.contains("tdsl::syntax::too_deep"),
            "{}",
            out.stderr
        );
    }
    // Just under the limits, everything (parse, check, plan, JIT) runs on a 2 MiB test stack.
    let ok = [
        format!(
            "input x: f32[n=2] = ones\ny = {}x{}\noutput y\n",
            "(".repeat(199),
            ")".repeat(199)
        ),
        format!(
            "input x: f32[n=2] = ones\ny = x{}\noutput y\n",
            " + x".repeat(1000)
        ),
        format!(
            "input x: f32[n=2] = ones\ny = {}x\noutput y\n",
            "-".repeat(200)
        ),
    ];
    for script in ok {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let p = tdsl::Program::compile(&script).expect("compiles");
                let none: [(&str, &tdsl::Tensor); 0] = [];
                p.run(none).expect("runs");
            })
            .unwrap()
            .join()
            .expect("no stack overflow");
    }
}

#[test]
fn cost_json_counts_stay_exact_past_2_64() {
    let dir = tempfile::tempdir().unwrap();
    let script = "input a: f32[i=2097152, j=2097152] = zeros\ninput b: f32[j, k=4194304] = zeros\n\
                  c = einsum(a, b, 'i j, j k -> i k')\noutput c\n";
    let out = tdsl_script(dir.path(), "cost", script, &["--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let want = 2u128 * 2097152 * 2097152 * 4194304;
    assert!(want > u64::MAX as u128);
    assert!(
        out.stdout.contains(&format!("\"total_flops\":{want}")),
        "{}",
        &out.stdout[..out.stdout.len().min(400)]
    );
}
