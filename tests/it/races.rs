//! The race check (`tdsl_cuda::emulate::Check::Races`): the generated kernels compiled with
//! ThreadSanitizer and run in emulation, every thread a fiber the race detector tells apart,
//! only barriers, warp instructions and launch boundaries ordering them. The corpus, the
//! tensor-core products of every template configuration and the loop filetests
//! (`filetests.rs`) must run without a race and agree with the interpreter; the hand-written
//! kernels of `emu_threads.rs` show that a missing barrier is reported whatever the schedule.
//! Skips, saying why, where the C++ compiler cannot build ThreadSanitizer programs; with
//! `TDSL_REQUIRE_RACES=1` (CI) that is a failure.

use proptest::prelude::*;
use tdsl_cuda::emulate::{Check, Emulator, Schedule};
use tdsl_cuda::tensor::{TensorCores, Variants};

/// The C++ compiler, if it builds race-checked emulators here.
pub(crate) fn checker() -> Option<&'static std::path::PathBuf> {
    static READY: std::sync::OnceLock<Option<&'static std::path::PathBuf>> =
        std::sync::OnceLock::new();
    *READY.get_or_init(|| {
        let why = match crate::diff::cxx() {
            None => "no C++ compiler".to_string(),
            Some(cxx) => match tdsl_cuda::emulate::race_check(cxx) {
                Ok(()) => return Some(cxx),
                Err(e) => e,
            },
        };
        if std::env::var_os("TDSL_REQUIRE_RACES").is_some_and(|v| v == "1") {
            panic!("TDSL_REQUIRE_RACES=1 but the race check cannot run: {why}");
        }
        eprintln!("skipped: the race check ({why})");
        None
    })
}

/// Plans `text`, runs it race-checked on `tc` with `v`, and compares with the interpreter.
/// Returns the launches it ran, or what went wrong.
fn race_checked(
    cxx: &std::path::Path,
    text: &str,
    tc: TensorCores,
    v: Variants,
) -> Result<usize, String> {
    race_checked_then(cxx, text, tc, v, true)
}

/// [`race_checked`], comparing with the interpreter only when `compare` (random programs need
/// `diff.rs`'s tolerances, and their values are checked there).
fn race_checked_then(
    cxx: &std::path::Path,
    text: &str,
    tc: TensorCores,
    v: Variants,
    compare: bool,
) -> Result<usize, String> {
    let p = tdsl::compile(text, &Default::default()).map_err(|d| d.to_string())?;
    let inputs = tdsl::bind::bind_inputs(&p, Default::default()).map_err(|d| d.to_string())?;
    let plan = tdsl::plan::lower::plan_program(&p).map_err(|d| d.to_string())?;
    let (_, steps) = tdsl_cuda::map_program_variants(&plan.loops, tc, v);
    let launches = steps
        .iter()
        .filter(|s| matches!(s, tdsl_cuda::Step::Launch(_)))
        .count();
    let emu = Emulator::compile_checked(&plan.loops, cxx, tc, v, Check::Races)?;
    let mut bufs = tdsl::runtime::buffers(&plan, &inputs).map_err(|d| d.to_string())?;
    emu.run_with(&mut bufs, Schedule::default())?;
    if !compare {
        return Ok(launches);
    }
    let got = tdsl::runtime::outputs(&plan, &crate::diff::output_shapes(&p), bufs);
    let want = tdsl::interp::run(&p, &inputs);
    crate::diff::agree(&got, &want, 1e-2, "race-checked")?;
    Ok(launches)
}

/// Race-checks every case (a name, a script, where it runs), failing with every failure;
/// returns the launches checked.
fn race_check_all(cases: impl Iterator<Item = (String, String, TensorCores, Variants)>) -> usize {
    let Some(cxx) = checker() else {
        return 0;
    };
    let t0 = std::time::Instant::now();
    let mut launches = 0;
    let mut failures = Vec::new();
    for (name, text, tc, v) in cases {
        match race_checked(cxx, &text, tc, v) {
            Ok(n) => launches += n,
            Err(e) => failures.push(format!("{name} ({tc:?}, {v:?}): {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    eprintln!("{launches} launches race-checked in {:?}", t0.elapsed());
    launches
}

#[test]
fn the_corpus_kernels_have_no_data_races() {
    if checker().is_none() {
        return;
    }
    // Scripts that are meant to fail do not run.
    let cases = crate::common::files_in("tests/corpus", "tdsl")
        .into_iter()
        .map(|path| {
            (
                path.display().to_string(),
                std::fs::read_to_string(&path).expect("reads"),
            )
        })
        .filter(|(_, text)| tdsl::compile(text, &Default::default()).is_ok())
        .map(|(name, text)| (name, text, TensorCores::None, Variants::default()));
    let launches = race_check_all(cases);
    assert!(
        launches > 40,
        "the corpus should not shrink: {launches} launches"
    );
}

/// The tensor-core templates in every configuration of `tensor_emu.rs`, on the corpus's
/// products and one product of each kind among its inline ones (dense bf16 past the tile
/// edges, 2:4 over five stages, f32 and f64 on the SIMT template, B n-contiguous, BSR 32 x 32
/// over three tiles, BSR 64 x 64, and BSR whose first groups store no block).
#[test]
fn the_tensor_core_templates_have_no_data_races() {
    let kinds = [0, 3, 10, 13, 17, 19, 20, 21].map(|i| format!("inline product {i}"));
    let scripts: Vec<_> = crate::tensor_emu::scripts()
        .into_iter()
        .filter(|(name, _)| !name.starts_with("inline") || kinds.contains(name))
        .collect();
    race_check_all(
        crate::tensor_emu::configs()
            .into_iter()
            .flat_map(|(tc, v)| {
                scripts
                    .iter()
                    .map(move |(name, text)| (name.clone(), text.clone(), tc, v))
            }),
    );
}

proptest! {
    #![proptest_config(crate::tensor_emu::cases_from("TDSL_RACE_CASES", 6))]

    /// `diff.rs`'s random programs (every family) have no race in their generic kernels.
    #[test]
    fn random_programs_have_no_data_races(
        v in prop::collection::vec(any::<u32>(), 0..400),
        family in 0u32..4,
    ) {
        let Some(cxx) = checker() else {
            return Ok(());
        };
        let script = crate::diff::random_script(&v, family);
        if tdsl::compile(&script, &Default::default()).is_err() {
            return Ok(());
        }
        if let Err(e) = race_checked_then(cxx, &script, TensorCores::None, Variants::default(), false) {
            // Only races fail here: a program the emulation cannot run is diff.rs's to report.
            prop_assert!(!e.contains("the race check"), "{}\n--- script ---\n{}", e, script);
        }
    }
}
