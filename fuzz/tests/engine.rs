//! The engine's own machinery, on toy targets: a panic is caught, counted and saved, the saved
//! file replays as a crash and minimises to the byte that causes it, and a slow input is a hang.

use std::time::Duration;

use tdsl_fuzz::engine::{minimize, replay, Run};
use tdsl_fuzz::targets::{Ctx, Outcome};
use tdsl_fuzz::{fuzz, Config, Target};

fn boom(input: &[u8], _ctx: &mut Ctx) -> Outcome {
    if input.contains(&b'!') {
        panic!("boom");
    }
    Outcome {
        sig: input.len() as u64,
        ..Outcome::default()
    }
}

fn slow(input: &[u8], _ctx: &mut Ctx) -> Outcome {
    if input.contains(&b'#') {
        std::thread::sleep(Duration::from_millis(30));
    }
    Outcome::default()
}

static BOOM: Target = Target {
    name: "test-boom",
    about: "panics on `!`",
    dict: &[b"!"],
    text: true,
    max_len: 64,
    run: boom,
    mutate: None,
    fixup: None,
};

static SLOW: Target = Target {
    name: "test-slow",
    about: "sleeps on `#`",
    dict: &[b"#"],
    text: true,
    max_len: 64,
    run: slow,
    mutate: None,
    fixup: None,
};

fn config(name: &str, runs: u64) -> (Config, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tdsl-fuzz-engine-{}-{name}", std::process::id()));
    let cfg = Config {
        runs,
        seed: 3,
        corpus_dir: dir.join("corpus"),
        crash_dir: dir.join("crashes"),
        ..Config::default()
    };
    (cfg, dir)
}

#[test]
fn panics_are_caught_saved_replayed_and_minimised() {
    let (cfg, dir) = config("boom", 2_000);
    let s = fuzz(&BOOM, &cfg);
    assert_eq!(s.inputs, 2_000, "{s}");
    assert!(s.crashes > 0, "{s}");
    assert!(s.failed());
    // One panic location: one file saved, with the message beside it.
    assert_eq!(s.findings.len(), 1, "{:?}", s.findings);
    let (path, what) = &s.findings[0];
    assert!(what.contains("boom"), "{what}");
    let input = std::fs::read(path).expect("the crash file");
    assert!(input.contains(&b'!'));
    let note = std::fs::read_to_string(path.with_extension("txt")).expect("the note");
    assert!(note.contains("tests/engine.rs"), "{note}");
    let (r, _) = replay(&BOOM, input.clone());
    assert!(matches!(r, Run::Panicked(_, ref m) if m == "boom"), "{r:?}");
    let (min, loc) = minimize(&BOOM, input).expect("it panics");
    assert_eq!(min, b"!");
    assert!(loc.contains("tests/engine.rs"), "{loc}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn slow_inputs_are_hangs() {
    let (mut cfg, dir) = config("slow", 300);
    cfg.hang = Duration::from_millis(10);
    let s = fuzz(&SLOW, &cfg);
    assert!(s.hangs > 0, "{s}");
    assert_eq!(s.crashes, 0, "{s}");
    assert!(s.failed());
    assert!(s.slowest >= Duration::from_millis(30), "{s}");
    let _ = std::fs::remove_dir_all(&dir);
}
