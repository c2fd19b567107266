//! `TDSL_ISA` narrows tdsl's kernels to what an older CPU runs: the same binary, capped at AVX2
//! or at scalar code, must compute what it computes uncapped (up to the summation order of the
//! GEMM micro-kernels), and report the narrowed peak.

use crate::common::{repo, tdsl_in};
use std::path::Path;
use std::process::Command;

/// Runs `tdsl ARGS` in `dir` with `TDSL_ISA` set to `cap` (unset for `None`).
fn tdsl_capped(dir: &Path, cap: Option<&str>, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tdsl"));
    cmd.args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("TDSL_MACHINE", "nominal");
    match cap {
        Some(c) => cmd.env("TDSL_ISA", c),
        None => cmd.env_remove("TDSL_ISA"),
    };
    cmd.output().expect("the tdsl binary runs")
}

/// Every fast path a cap changes: the packing GEMM with a transposed f16 weight (and the
/// `gemm` crate's row-major one, which a cap reroutes), the chunked vector math, a 2:4 weight
/// in torch's layout (expanded into the GEMM), a block-sparse product (the SIMD kernels), a
/// transpose (the AVX2 register transpose), a vector times `W[in, out]` (the row axpys), a
/// row's maximum and minimum (the wide extreme kernels).
const SCRIPT: &str = r#"
input x: f32[b=70, i=264] = randn(seed=0)
input w: f16[o=136, i] = randn(seed=1)
input v: f32[i, o] = randn(seed=2)
input d: f32[o, i] = randn(seed=3)
input e: f32[i, o] = randn(seed=4)
input q: f32[i] = randn(seed=5)
w24 = sparsify(d, "2:4")
wb = sparsify(e, bsr(8, 8), density=0.5)
h = gelu(einsum(x, w, "b i, o i -> b o") / 16)
g = einsum(x, v, "b i, i o -> b o") / 16
s = einsum(x, w24, "b i, o i -> b o") / 16
t = einsum(x, wb, "b i, i o -> b o") / 16
u = sigmoid(h) * tanh(s) + log(abs(t) + 1) + sin(g) + silu(g) + exp(-abs(h))
ut = rearrange(u, "b o -> o b")
m = einsum(q, v, "i, i o -> o")
mx = reduce(u, "b o -> b", "max") - reduce(u, "b o -> b", "min")
output u, ut, h, g, s, t, m, mx
"#;

fn outputs(dir: &Path, cap: Option<&str>) -> Vec<(String, Vec<f64>)> {
    let name = cap.unwrap_or("none");
    let out = tdsl_capped(dir, cap, &["run", "script.tdsl", "--out", name]);
    assert!(
        out.status.success(),
        "TDSL_ISA={name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ["u", "ut", "h", "g", "s", "t", "m", "mx"]
        .iter()
        .map(|o| {
            let path = dir.join(name).join(format!("{o}.npy"));
            let t = tdsl::io::read_npy(&path).unwrap_or_else(|d| panic!("{path:?}: {d:?}"));
            (o.to_string(), t.to_f64())
        })
        .collect()
}

#[test]
fn every_cap_computes_the_same_values() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("script.tdsl"), SCRIPT).expect("write script");
    let base = outputs(dir.path(), None);
    for cap in ["avx2", "scalar"] {
        for ((name, want), (_, got)) in base.iter().zip(outputs(dir.path(), Some(cap))) {
            assert_eq!(want.len(), got.len(), "{name} under TDSL_ISA={cap}");
            for (k, (a, b)) in want.iter().zip(&got).enumerate() {
                // The products sum in a different order per micro-kernel; the vector math is
                // the same algorithm on every instruction set.
                assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + a.abs()),
                    "{name}[{k}] under TDSL_ISA={cap}: {b} against {a} uncapped"
                );
            }
        }
    }
}

#[test]
fn a_cap_narrows_the_reported_peak_and_a_bad_one_is_named() {
    let dir = repo();
    let lanes = |cap: Option<&str>| -> String {
        let out = tdsl_capped(&dir, cap, &["machine"]);
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let at = text.find(" f32 FLOP/cycle").expect("a FLOP/cycle figure");
        text[..at]
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .to_string()
    };
    if lanes(None) == "64" {
        assert_eq!(lanes(Some("avx2")), "32", "AVX2 has half AVX-512's lanes");
    }
    let scalar: f64 = lanes(Some("scalar")).parse().expect("a number");
    assert!(scalar <= 16.0, "scalar code: {scalar} FLOP/cycle");
    let out = tdsl_capped(&dir, Some("avx9000"), &["machine"]);
    assert!(out.status.success(), "an unknown cap is ignored");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("TDSL_ISA=\"avx9000\""), "{err}");
    assert!(!tdsl_in(&dir, &["machine"]).stderr.contains("TDSL_ISA"));
}
