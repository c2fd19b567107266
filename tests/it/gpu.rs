//! The CUDA backend on a GPU: every example, bench and corpus script runs on the device and
//! agrees with the reference interpreter, and (through `diff.rs`, whose backend list gains
//! `cuda` when a device is present) so do the random programs of the differential tests.
//!
//! Every test here passes with a printed reason on a machine without a usable GPU (no driver,
//! no device, no NVRTC), unless `TDSL_REQUIRE_GPU` is set, which turns the skip into a failure
//! (for runs on a GPU machine that must not silently skip).

use std::path::Path;
use std::sync::OnceLock;

use tdsl::session::Engine;

/// The device's description, or `None` (with the reason printed once).
pub(crate) fn device() -> Option<&'static str> {
    static DEVICE: OnceLock<Option<String>> = OnceLock::new();
    DEVICE
        .get_or_init(|| match tdsl_cuda::CudaBackend::new(0) {
            Ok(b) => Some(b.info().describe()),
            Err(e) => {
                assert!(
                    std::env::var_os("TDSL_REQUIRE_GPU").is_none(),
                    "TDSL_REQUIRE_GPU is set but there is no usable GPU: {e}"
                );
                eprintln!("skipped: the GPU tests ({e})");
                None
            }
        })
        .as_deref()
}

fn scripts() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dir in ["examples", "bench", "tests/corpus"] {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        let mut files: Vec<_> = std::fs::read_dir(&root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "tdsl"))
            .collect();
        files.sort();
        for f in files {
            if let Ok(t) = std::fs::read_to_string(&f) {
                out.push((f.display().to_string(), t));
            }
        }
    }
    out
}

#[test]
fn gpu_runs_every_script_like_the_interpreter() {
    let Some(dev) = device() else { return };
    eprintln!("device: {dev}");
    let mut ran = 0;
    for (name, text) in scripts() {
        let Ok(p) = tdsl::compile(&text, &Default::default()) else {
            continue;
        };
        let Ok(inputs) = tdsl::bind::bind_inputs(&p, Default::default()) else {
            continue;
        };
        // Keep the interpreter's work small: the bench scripts are large.
        let elems: usize = inputs
            .iter()
            .map(|t| t.shape().iter().product::<usize>())
            .sum();
        if elems > 1 << 20 {
            continue;
        }
        let Ok(plan) = tdsl::plan::lower::plan_program(&p) else {
            continue;
        };
        let shapes = crate::diff::output_shapes(&p);
        let want = tdsl::interp::run(&p, &inputs);
        let got = tdsl::runtime::run_on(Engine::Cuda, &plan, &inputs, &shapes)
            .unwrap_or_else(|d| panic!("{name}: {d}"));
        for (g, w) in got.iter().zip(&want) {
            let (g, w) = (g.to_f64(), w.to_f64());
            let scale = w.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
            for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                assert!(
                    (a - b).abs() <= 2e-2 * scale || (a.is_nan() && b.is_nan()),
                    "{name}: element {i} is {a} on the GPU, {b} in the interpreter"
                );
            }
        }
        ran += 1;
    }
    eprintln!("{ran} scripts agree on {dev}");
}
