//! Every target for 2,000 inputs with a fixed seed, from the checked-in corpus: no crash, no
//! hang. Keeps the targets compiling and CI honest in a few seconds; the long runs are in
//! bench/RESULTS.md.

use tdsl_fuzz::{fuzz, target, Config};

fn smoke(name: &str, runs: u64) {
    let t = target(name).expect("a target");
    let dir = std::env::temp_dir().join(format!("tdsl-fuzz-smoke-{}-{name}", std::process::id()));
    let cfg = Config {
        runs,
        seed: 7,
        // Crash files of this test go to a temporary folder, not into the checkout.
        crash_dir: dir.clone(),
        ..Config::default()
    };
    let s = fuzz(t, &cfg);
    let findings: Vec<String> = s
        .findings
        .iter()
        .map(|(p, w)| format!("{}: {w}", p.display()))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(s.inputs, runs, "{s}");
    assert!(!s.failed(), "{s}\n{}", findings.join("\n"));
    assert!(s.outcomes > 1, "the target reached a single outcome: {s}");
}

#[test]
fn script() {
    smoke("script", 2_000);
}

#[test]
fn pattern() {
    smoke("pattern", 2_000);
}

#[test]
fn repl() {
    smoke("repl", 2_000);
}

#[test]
fn npy() {
    smoke("npy", 2_000);
}

#[test]
fn npz() {
    smoke("npz", 2_000);
}

#[test]
fn safetensors() {
    smoke("safetensors", 2_000);
}

#[test]
fn replay_reports_no_crash_for_a_seed() {
    let t = target("pattern").expect("a target");
    let (r, _) = tdsl_fuzz::engine::replay(t, b"einsum\ni k, k j -> i j\n\n2 3; 3 4".to_vec());
    assert!(matches!(r, tdsl_fuzz::engine::Run::Done(_)), "{r:?}");
}
