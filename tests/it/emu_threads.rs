//! The host emulation's threads (`kernels/threads_host.h`) on hand-written kernels: that its
//! schedule exposes the races a missing barrier leaves (a warp running ahead of the others, a
//! warp's lanes in any order) while correct kernels agree under every schedule, and that a
//! barrier some threads never reach stops the run with a message instead of a wrong result.
//! The generated kernels rely on this: `tests/loop/split_rows_meet.loop` fails in emulation
//! when any of the split kernels' barriers is dropped.

use std::process::Command;

/// Kernels that exchange values between threads, each with its barrier or without (`RACY`).
/// `main` runs each as 2 blocks of 256 threads and prints, per kernel, how many threads saw a
/// value other than the one a correct kernel gives.
const KERNELS: &str = r#"
static float out[2][256];
// Lane 0 of each warp stores a value the warp's other lanes then read.
TDSL_KERNEL lane_zero_stores() {
  __shared__ float s[8];
  const int t = (int)threadIdx.x, w = t / 32;
  if (t % 32 == 0) s[w] = (float)(blockIdx.x * 100 + w);
  if (!RACY) tdsl_syncwarp();
  out[blockIdx.x][t] = s[w];
}
// Three rounds through the same shared slots: every warp stores its slot, all meet, every
// thread reads its neighbour warp's slot, and (without the second barrier) a warp that runs
// ahead overwrites its slot with the next round's value before the others have read it.
TDSL_KERNEL slots_reused() {
  __shared__ float s[8];
  const int t = (int)threadIdx.x, w = t / 32;
  float sum = 0;
  for (int r = 0; r < 3; r++) {
    if (t % 32 == 0) s[w] = (float)(r * 10 + w);
    tdsl_syncblock();
    sum += s[(w + 1) % 8];
    if (!RACY) tdsl_syncblock();
  }
  out[blockIdx.x][t] = sum;
}
// Every lane of a warp stores the same value where lane 0 alone should: the value is right
// whatever the order, so only the race check sees it.
TDSL_KERNEL same_value_stores() {
  __shared__ float s[8];
  const int t = (int)threadIdx.x, w = t / 32;
  if (RACY || t % 32 == 0) s[w] = (float)w;
  tdsl_syncwarp();
  out[blockIdx.x][t] = s[w];
}
// Every thread adds one to a block's count where one thread should count: threads run whole
// between the instructions that gather them, so no update is lost in emulation, and only the
// race check sees it.
static float count[2];
TDSL_KERNEL lost_updates() {
  const int t = (int)threadIdx.x;
  if (RACY) count[blockIdx.x] += 1.0f;
  else if (t == 0) for (int u = 0; u < 256; u++) count[blockIdx.x] += 1.0f;
  tdsl_syncblock();
  out[blockIdx.x][t] = count[blockIdx.x];
}
static float want(int kernel, int b, int t) {
  const int w = t / 32;
  switch (kernel) {
    case 0: return (float)(b * 100 + w);
    case 1: return (float)(30 + 3 * ((w + 1) % 8));
    case 2: return (float)w;
    default: return 256.0f;
  }
}
// TDSL_KERNEL=k runs kernel k alone (the race check stops at the first race).
int main() {
  const char *only = getenv("TDSL_KERNEL");
  for (int kernel = 0; kernel < 4; kernel++) {
    if (only && atoi(only) != kernel) continue;
    memset(out, 0, sizeof out);
    tdsl_emu_launch(2, 256, [&] {
      switch (kernel) {
        case 0: lane_zero_stores(); break;
        case 1: slots_reused(); break;
        case 2: same_value_stores(); break;
        default: lost_updates();
      }
    });
    int wrong = 0;
    for (int b = 0; b < 2; b++)
      for (int t = 0; t < 256; t++) wrong += out[b][t] != want(kernel, b, t);
    printf("%d\n", wrong);
  }
  return 0;
}
"#;

/// Compiles `main` after the host preludes (thread indices, the fibers) with `RACY` set, and
/// runs it with `TDSL_EMU_SEED=seed`: exit status, stdout, stderr.
fn emulate(main: &str, racy: bool, seed: u64) -> Option<(i32, String, String)> {
    emulate_with(main, racy, seed, None)
}

/// [`emulate`], race-checked (ThreadSanitizer) with only kernel `k` running when `checked` is
/// `Some(k)`.
fn emulate_with(
    main: &str,
    racy: bool,
    seed: u64,
    checked: Option<u32>,
) -> Option<(i32, String, String)> {
    let cxx = match checked {
        Some(_) => crate::races::checker()?,
        None => crate::diff::cxx()?,
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let src = format!(
        "{}\n{}\n#define RACY {}\n{main}",
        tdsl_cuda::render::HOST_PRELUDE,
        tdsl_cuda::render::THREADS_HOST,
        racy as i32
    );
    let (cpp, exe) = (dir.path().join("k.cpp"), dir.path().join("k"));
    std::fs::write(&cpp, src).expect("writes");
    let mut cc = Command::new(cxx);
    cc.args(["-O1", "-std=c++17", "-w"]);
    if cfg!(target_arch = "x86_64") {
        cc.arg("-fcf-protection=none");
    }
    if checked.is_some() {
        cc.args(["-fsanitize=thread", "-g1"]);
    }
    let built = cc.arg("-o").arg(&exe).arg(&cpp).output().expect("runs");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let mut run = Command::new(&exe);
    if let Some(k) = checked {
        run.env("TDSL_KERNEL", k.to_string()).env(
            "TSAN_OPTIONS",
            "halt_on_error=1:exitcode=66:atexit_sleep_ms=0",
        );
    }
    let ran = run
        .env("TDSL_EMU_SEED", seed.to_string())
        .output()
        .expect("runs");
    Some((
        ran.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&ran.stdout).into_owned(),
        String::from_utf8_lossy(&ran.stderr).into_owned(),
    ))
}

/// The wrong-thread counts of [`KERNELS`] under `seed`.
fn wrong(racy: bool, seed: u64) -> Option<Vec<u32>> {
    let (code, out, err) = emulate(KERNELS, racy, seed)?;
    assert_eq!(code, 0, "{err}");
    Some(out.lines().map(|l| l.parse().expect("a count")).collect())
}

#[test]
fn the_emulated_schedule_exposes_missing_barriers_and_keeps_correct_kernels_right() {
    if crate::diff::cxx().is_none() {
        return;
    }
    // With their barriers, every schedule gives the right values, thread order included.
    for seed in [0, 1, 2, 3, 77] {
        assert_eq!(wrong(false, seed), Some(vec![0; 4]), "seed {seed}");
    }
    // Thread order hides the missing __syncwarp (lane 0 runs first) ...
    let in_order = wrong(true, 0).expect("ran");
    assert_eq!(in_order[0], 0, "thread order runs lane 0 first");
    // ... and every shuffled schedule shows both missing barriers; the same-value stores and
    // the lost updates give right values under any schedule (only the race check sees them).
    for seed in [1, 2, 3, 77] {
        let counts = wrong(true, seed).expect("ran");
        assert!(
            counts[..2].iter().all(|&c| c > 0),
            "seed {seed}: a race went unseen: {counts:?} wrong threads"
        );
        assert_eq!(counts[2..], [0, 0], "seed {seed}");
    }
}

#[test]
fn the_race_check_reports_every_race_under_every_schedule_and_passes_correct_kernels() {
    for kernel in 0..4 {
        for seed in [0, 1, 5] {
            let Some((code, out, err)) = emulate_with(KERNELS, false, seed, Some(kernel)) else {
                return;
            };
            assert_eq!(code, 0, "kernel {kernel}, seed {seed}: {err}");
            assert_eq!(out.trim(), "0", "kernel {kernel}, seed {seed}");
            let (code, _, err) = emulate_with(KERNELS, true, seed, Some(kernel)).expect("ran");
            assert_eq!(
                code, 66,
                "kernel {kernel}, seed {seed}: no race reported\n{err}"
            );
            assert!(
                err.contains("WARNING: ThreadSanitizer: data race") && err.contains("block "),
                "kernel {kernel}, seed {seed}: {err}"
            );
        }
    }
}

#[test]
fn a_barrier_some_threads_never_reach_stops_the_emulation_with_a_message() {
    let main = r#"
TDSL_KERNEL divergent() {
  if (threadIdx.x < 100) tdsl_syncblock();
}
TDSL_KERNEL split_warp() {
  if (threadIdx.x % 2) tdsl_syncwarp();
}
int main(int argc, char **argv) {
  if (RACY) tdsl_emu_launch(1, 256, [&] { divergent(); });
  else tdsl_emu_launch(1, 64, [&] { split_warp(); });
  return 0;
}
"#;
    for (which, seed) in [(true, 0), (true, 5), (false, 0), (false, 5)] {
        let Some((code, _, err)) = emulate(main, which, seed) else {
            return;
        };
        assert_eq!(code, 7, "seed {seed}: {err}");
        assert!(err.contains("can never complete"), "{err}");
    }
}
