//! The CUDA backend on a GPU: every example, bench and corpus script runs on the device and
//! agrees with the reference interpreter, and (through `diff.rs`, whose backend list gains
//! `cuda` when a device is present) so do the random programs of the differential tests.
//!
//! Every test here passes with a printed reason on a machine without a usable GPU (no driver,
//! no device, no NVRTC), unless `TDSL_REQUIRE_GPU` is set, which turns the skip into a failure
//! (for runs on a GPU machine that must not silently skip).

use std::path::Path;
use std::sync::OnceLock;

use proptest::prelude::*;

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
        if let Err(e) = crate::diff::agree(&got, &want, 2e-2, "on the GPU") {
            panic!("{name}: {e}");
        }
        ran += 1;
    }
    eprintln!("{ran} scripts agree on {dev}");
}

/// A run's launches queue without waiting; each kernel's time and the span from the first
/// launch to the last are read from their events when the run ends: every kernel launched is
/// timed, and the span (which `tdsl bench` reports) covers them all, as they run one after
/// another on one stream.
#[test]
fn gpu_runs_time_each_kernel_and_the_span_from_first_launch_to_last() {
    use tdsl_loop::Backend as _;
    if device().is_none() {
        return;
    }
    let text = "input x: f32[r=256, c=4096] = randn(seed=0)\nm = reduce(x, 'r c -> r 1', 'mean')\n\
                y = gelu(x - m)\nz = reduce(y, 'r c -> r', 'max')\noutput z\n";
    let p = tdsl::compile(text, &Default::default()).expect("compiles");
    let inputs = tdsl::bind::bind_inputs(&p, Default::default()).expect("binds");
    let plan = tdsl::plan::lower::plan_program(&p).expect("plans");
    let mut gpu = tdsl_cuda::CudaBackend::new(0).expect("a device");
    let exe = gpu.compile(&plan.loops).expect("compiles for the device");
    let mut bufs = tdsl::runtime::buffers(&plan, &inputs).expect("buffers");
    let stats = exe.run(&mut bufs, &Default::default()).expect("runs");
    assert_eq!(stats.kernel_times.len(), plan.loops.kernels.len());
    assert!(stats.kernel_times.iter().all(|t| !t.is_zero()), "{stats:?}");
    let span = stats.device_span.expect("a device run has a span");
    let sum: std::time::Duration = stats.kernel_times.iter().sum();
    assert!(span.as_secs_f64() >= 0.95 * sum.as_secs_f64(), "{stats:?}");
    assert!(span.as_secs_f64() < 1.0, "{stats:?}");
}

/// Dense products on `wgmma` (sm_90a) in every tile width, with edges in M, N and K that are
/// not multiples of the tile (the scripts of `gpu_runs_every_script_like_the_interpreter` are
/// too small for 128 × 256 and 128 × 128 tiles), BSR products large enough for the grouped and
/// `wgmma` walks, and f64 on the SIMT template: compared with the CPU JIT, whose GEMM and sparse
/// kernels the differential tests hold to the interpreter.
#[test]
fn gpu_products_in_every_tile_width_agree_with_the_cpu() {
    let Some(dev) = device() else { return };
    let scripts = [
        // 18 × 16 tiles of 128 × 256: wide tiles; K = 72 ends mid-stage.
        "input x: bf16[n=2200, i=72] = randn(seed=0)\ninput w: bf16[o=4000, i] = randn(seed=1)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        // 9 × 16 tiles of 128 × 128 (too few of 128 × 256); N = 2000 ends mid-tile.
        "input x: bf16[n=1100, i=136] = randn(seed=7)\ninput w: bf16[o=2000, i] = randn(seed=8)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        // Few rows: 128 × 64 tiles; f16 in, f16 out.
        "input x: f16[n=200, i=520] = randn(seed=2)\ninput w: f16[o=1000, i] = randn(seed=3)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        // B n-contiguous with enough rows to copy it k-contiguous for wgmma: `x @ W` with W
        // [in, out], and attention's P·V (a copy of V per batch element).
        "input x: bf16[n=600, i=136] = randn(seed=11)\ninput w: bf16[i, o=1000] = randn(seed=12)\ny = einsum(x, w, 'n i, i o -> n o')\noutput y\n",
        "input p: f16[b=2, s=520, t=72] = randn(seed=13)\ninput v: f16[b, t, d=64] = randn(seed=14)\ny = einsum(p, v, 'b s t, b t d -> b s d')\noutput y\n",
        // f32 allowed TF32 (`--tf32`, the first line: set on the plan below), torch layout and
        // `x @ W`: within TF32's rounding of the CPU's exact f32.
        "#tf32\ninput x: f32[n=600, i=136] = randn(seed=15)\ninput w: f32[o=1000, i] = randn(seed=16)\ninput v: f32[i, p=264] = randn(seed=17)\ny = einsum(x, w, 'n i, o i -> n o')\nz = einsum(x, v, 'n i, i p -> n p')\noutput y, z\n",
        // Short and deep: K split in parts (split-K) with a bias and gelu in the reduce launch's
        // store; 2:4 likewise.
        "input x: bf16[n=24, i=4160] = randn(seed=18)\ninput w: bf16[o=1000, i] = randn(seed=19)\ninput b: f32[o] = randn(seed=20)\ny = gelu(einsum(x, w, 'n i, o i -> n o') + b)\noutput y\n",
        "input x: bf16[n=24, i=4160] = randn(seed=21)\ninput w: bf16[o=1000, i] @ 2:4(i) = randn(seed=22)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        // f64 (the SIMT template in f64), B n-contiguous, edges past the 128 × 128 tile.
        "input x: f64[n=300, i=100] = randn(seed=9)\ninput w: f64[i, o=260] = randn(seed=10)\ny = einsum(x, w, 'n i, i o -> n o')\noutput y\n",
        // BSR in torch's layout, large enough for groups of block rows over the union of their
        // columns (and, with `TDSL_TC_BSR=wgmma`, 256-wide wgmma tiles: 16 × 9); 16 × 16 and
        // 64 × 64 blocks (128-wide wgmma tiles), f16 out.
        "input x: bf16[n=1100, i=320] = randn(seed=23)\ninput w: bf16[o=4096, i] @ bsr(32, 32) = randn(seed=24, density=0.3)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        "input x: f16[n=300, i=192] = randn(seed=25)\ninput w: f16[o=528, i] @ bsr(16, 16) = randn(seed=26, density=0.2)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        "input x: bf16[n=200, i=512] = randn(seed=27)\ninput w: bf16[o=640, i] @ bsr(64, 64) = randn(seed=28, density=0.4)\ny = cast(einsum(x, w, 'n i, o i -> n o'), f16)\noutput y\n",
        // Batched, bf16 out, added to a bias after.
        "input x: bf16[b=3, n=300, i=128] = randn(seed=4)\ninput w: bf16[o=520, i] = randn(seed=5)\ninput c: f32[o] = randn(seed=6)\ny = einsum(x, w, 'b n i, o i -> b n o') + c\noutput y\n",
    ];
    for text in scripts {
        let p = tdsl::compile(text, &Default::default()).expect("compiles");
        let inputs = tdsl::bind::bind_inputs(&p, Default::default()).expect("binds");
        let mut plan = tdsl::plan::lower::plan_program(&p).expect("plans");
        plan.loops.tf32 = text.starts_with("#tf32");
        let shapes = crate::diff::output_shapes(&p);
        let want = tdsl::runtime::run_jit(&plan, &inputs, &shapes).expect("the JIT runs");
        let got = tdsl::runtime::run_on(Engine::Cuda, &plan, &inputs, &shapes)
            .unwrap_or_else(|d| panic!("{text}: {d}"));
        if let Err(e) = crate::diff::agree(&got, &want, 1e-2, "on the GPU") {
            panic!("{text} on {dev}: {e} (the reference: the CPU JIT)");
        }
    }
}

/// One compiled program run on three CSR patterns in turn (A, B, A): the executable caches the
/// index tables it builds per pattern, and must rebuild them when the pattern changes.
#[test]
fn gpu_index_tables_follow_the_pattern_from_run_to_run() {
    let Some(dev) = device() else { return };
    let case = |seed| crate::cuda::csr_rows_case(200, 3000, &[3, 1, 0, 2, 3], 3, false, seed);
    let (text, _) = case(0);
    let p = tdsl::compile(&text, &Default::default()).expect("compiles");
    let plan = tdsl::plan::lower::plan_program(&p).expect("plans");
    let shapes = crate::diff::output_shapes(&p);
    let (exe, _) = tdsl::runtime::compile(Engine::Cuda, &plan).expect("compiles for the GPU");
    for seed in [1, 2, 1] {
        let (again, inputs) = case(seed);
        assert_eq!(again, text);
        let want = tdsl::interp::run(&p, &inputs);
        let mut bufs = tdsl::runtime::buffers(&plan, &inputs).expect("binds");
        exe.run(&mut bufs, &Default::default())
            .unwrap_or_else(|e| panic!("seed {seed}: {e:?}"));
        let got = tdsl::runtime::outputs(&plan, &shapes, bufs);
        if let Err(e) = crate::diff::agree(&got, &want, 1e-6, "on the GPU") {
            panic!("pattern {seed} on {dev}: {e}");
        }
    }
}

fn gpu_config() -> ProptestConfig {
    crate::tensor_emu::cases_from("TDSL_GPU_CASES", 16)
}

proptest! {
    #![proptest_config(gpu_config())]

    /// CSR rows of every length class (`cuda::csr_rows_case`), binned at run time
    /// (`tdsl_cuda::Bins`): long ones on blocks, the rest on warps, or listed longest first for
    /// a thread per element; the row offsets read from the input; exact sums, so any order
    /// agrees with the interpreter.
    #[test]
    fn gpu_prop_csr_rows_of_any_length_agree(
        rows in 1usize..200, cols in 1024usize..4000,
        classes in prop::collection::vec(0usize..4, 1..6),
        n in prop::sample::select(vec![1usize, 2, 3, 7, 40]),
        f16 in any::<bool>(), seed in 0u64..1000,
    ) {
        let Some(dev) = device() else { return Ok(()) };
        let (text, inputs) = crate::cuda::csr_rows_case(rows, cols, &classes, n, f16, seed);
        let p = tdsl::compile(&text, &Default::default()).expect("compiles");
        let plan = tdsl::plan::lower::plan_program(&p).expect("plans");
        let shapes = crate::diff::output_shapes(&p);
        let want = tdsl::interp::run(&p, &inputs);
        let got = tdsl::runtime::run_on(Engine::Cuda, &plan, &inputs, &shapes)
            .map_err(|d| TestCaseError::fail(format!("{text}: {d}")))?;
        crate::diff::agree(&got, &want, 1e-6, "on the GPU")
            .map_err(|e| TestCaseError::fail(format!("{text} on {dev}: {e}")))?;
    }

    /// The emulation's random tensor-core products (`tensor_emu::product_script`: dense in both
    /// layouts, batched, 2:4 on either side, BSR of three block shapes, every dtype, TF32 half
    /// the time, an epilogue or none) at sizes that reach the wide tiles, the grouped BSR walks
    /// and split-K, on the device against the interpreter. The template variants are the
    /// environment's (`TDSL_TC_SP=wgmma`, `TDSL_TC_BSR=wgmma`, ...), so `device.sh` runs this
    /// with each path it is confirming. `TDSL_GPU_CASES` sets the number of cases.
    #[test]
    fn gpu_prop_tensor_core_products_agree(
        form in 0usize..6, rows in 1u64..600, cols in 1u64..600, depth in 1u64..100,
        ty in 0usize..4, out in 0usize..3, epilogue in 0usize..4, blk in 0usize..3,
        seed in 0u64..1000, tf32 in any::<bool>(),
    ) {
        let Some(dev) = device() else { return Ok(()) };
        let text = crate::tensor_emu::product_script(form, rows, cols, depth, ty, out, epilogue, blk, seed);
        let p = tdsl::compile(&text, &Default::default())
            .map_err(|d| TestCaseError::fail(format!("{text}\n{d}")))?;
        let inputs = tdsl::bind::bind_inputs(&p, Default::default()).expect("binds");
        let mut plan = tdsl::plan::lower::plan_program(&p).expect("plans");
        plan.loops.tf32 = tf32;
        let shapes = crate::diff::output_shapes(&p);
        // The CPU JIT as the reference (the differential tests hold it to the interpreter, which
        // would take seconds on the larger of these products).
        let want = tdsl::runtime::run_jit(&plan, &inputs, &shapes).expect("the JIT runs");
        let got = tdsl::runtime::run_on(Engine::Cuda, &plan, &inputs, &shapes)
            .map_err(|d| TestCaseError::fail(format!("{text}: {d}")))?;
        crate::diff::agree(&got, &want, 2e-2, "on the GPU")
            .map_err(|e| TestCaseError::fail(format!("{text} (tf32 {tf32}) on {dev}: {e} (the reference: the CPU JIT)")))?;
    }
}
