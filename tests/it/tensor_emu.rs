//! The tensor-core templates (`kernels/mma.cuh`: dense `mma.sync`, dense `wgmma`, 2:4 `mma.sp`,
//! BSR) run without a GPU: the host emulation performs their warp- and warpgroup-wide
//! instructions in software (`kernels/mma_host.h`), and the results must agree with the
//! interpreter. The lane maps the emulation uses are the ones the fragment probe checked on an
//! H200 (but f64's m8n8k4, from the PTX ISA, whose probe case has not run yet), and the
//! templates it runs passed on that device, so a mismatch here is a bug in a template's index,
//! swizzle or pipeline logic (or in a template not yet run on a device).

use proptest::prelude::*;
use tdsl_cuda::emulate::{Copies, Order, Schedule};
use tdsl_cuda::tensor::{BsrWalk, TensorCores, Variants};

/// The instruction sets and template variants the emulation runs: `mma.sync`/`mma.sp` (BSR one
/// block row per thread block at these sizes) with K split in 2 parts, `wgmma` for dense
/// products (64-wide tiles at these sizes; `mma.sync` where B is n-contiguous) with `wgmma.sp`
/// 128-row tiles for 2:4, and the same with 128- and 256-wide dense tiles, an n-contiguous B
/// copied k-contiguous for `wgmma`, 256-row 2:4 tiles, BSR over groups of block rows, and K in
/// 3 parts for the 128-wide one.
pub(crate) fn configs() -> [(TensorCores, Variants); 4] {
    let other = |wg_cols, split_k, bsr| Variants {
        bsr: Some(bsr),
        sp_rows: Some(256),
        wg_cols: Some(wg_cols),
        stage_b: Some(true),
        split_k,
        // f64 on the f64 tensor cores (the first two configurations keep the FMA units).
        dmma: Some(true),
    };
    let split = |tc, split_k| {
        (
            tc,
            Variants {
                split_k,
                ..Variants::default()
            },
        )
    };
    [
        split(TensorCores::Mma, Some(2)),
        (TensorCores::WgmmaSparse, Variants::default()),
        (
            TensorCores::WgmmaSparse,
            other(128, Some(3), BsrWalk::Union),
        ),
        (
            TensorCores::Wgmma,
            other(256, None, BsrWalk::Wgmma { cols: 256 }),
        ),
    ]
}

/// The scripts: the tensor-core corpus, and products whose edges in M, N and K are not
/// multiples of the tiles.
pub(crate) fn scripts() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("tc_") && n.ends_with(".tdsl"))
        })
        .filter_map(|p| Some((p.display().to_string(), std::fs::read_to_string(&p).ok()?)))
        .collect();
    out.sort();
    let inline = [
        // Rows and columns past a 128 x 128 tile; K = 72 ends mid-stage.
        "input x: bf16[n=150, i=72] = randn(seed=0)\ninput w: bf16[o=136, i] = randn(seed=1)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        // f16 in, f16 out, K over several stages.
        "input x: f16[n=40, i=520] = randn(seed=2)\ninput w: f16[o=24, i] = randn(seed=3)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        // Batched, bf16 out, added to a bias after.
        "input x: bf16[b=2, n=72, i=128] = randn(seed=4)\ninput w: bf16[o=40, i] = randn(seed=5)\ninput c: f32[o] = randn(seed=6)\ny = einsum(x, w, 'b n i, o i -> b n o') + c\noutput y\n",
        // 2:4 in torch layout over 5 stages of 128 (wgmma.sp) or 10 of 64 (mma.sp), two tiles of
        // rows, the second mostly past M.
        "input x: bf16[m=200, k=640] = randn(seed=7)\ninput w: bf16[n=136, k] @ 2:4(k) = randn(seed=8)\ny = einsum(x, w, 'm k, n k -> m n')\noutput y\n",
        // f16, K = 320: wgmma.sp's last stage is half past K.
        "input x: f16[m=40, k=320] = randn(seed=9)\ninput w: f16[n=72, k] @ 2:4(k) = randn(seed=10)\ny = einsum(x, w, 'm k, n k -> m n')\noutput y\n",
        // Epilogues fused into the store: a bias and gelu after a bf16 product (rounded to bf16
        // first, as the unfused kernels do), a per-batch scale, relu after 2:4 and silu after BSR
        // (torch layout: the template computes the transposed product).
        "input x: bf16[n=150, i=72] = randn(seed=11)\ninput w: bf16[o=136, i] = randn(seed=12)\ninput b: f32[o] = randn(seed=13)\ny = gelu(einsum(x, w, 'n i, o i -> n o') + b)\noutput y\n",
        "input x: f16[b=3, n=40, i=64] = randn(seed=14)\ninput w: f16[o=24, i] = randn(seed=15)\ninput s: f32[b, o] = randn(seed=16)\ny = einsum(x, w, 'b n i, o i -> b n o') * rearrange(s, 'b o -> b 1 o')\noutput y\n",
        "input x: bf16[m=100, k=128] = randn(seed=17)\ninput w: bf16[n=72, k] @ 2:4(k) = randn(seed=18)\ninput b: f32[n] = randn(seed=19)\ny = relu(einsum(x, w, 'm k, n k -> m n') - b)\noutput y\n",
        "input x: bf16[m=100, k=128] = randn(seed=20)\ninput w: bf16[n=96, k] @ bsr(32, 32) = randn(seed=21, density=0.5)\ny = silu(einsum(x, w, 'm k, n k -> m n'))\noutput y\n",
        // A residual added to the product (another tensor read at the same element).
        "input x: bf16[n=130, i=64] = randn(seed=29)\ninput w: bf16[o=72, i] = randn(seed=30)\ninput r: f32[n, o] = randn(seed=31)\ny = einsum(x, w, 'n i, o i -> n o') + r\noutput y\n",
        // f32 on the SIMT template: edges past the 128 x 128 tile, K not a multiple of 8, B
        // n-contiguous, batched with a bias, and an f32 activation times a bf16 weight (the
        // planner's widening copy read as it is).
        "input x: f32[n=150, i=37] = randn(seed=22)\ninput w: f32[o=136, i] = randn(seed=23)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        "input x: f32[n=70, i=20] = randn(seed=24)\ninput w: f32[i, o=200] = randn(seed=25)\ninput b: f32[o] = randn(seed=26)\ny = tanh(einsum(x, w, 'n i, i o -> n o') + b)\noutput y\n",
        "input x: f32[b=2, n=30, i=16] = randn(seed=27)\ninput w: bf16[o=40, i] = randn(seed=28)\ny = einsum(x, w, 'b n i, o i -> b n o')\noutput y\n",
        // B n-contiguous (`x @ W` with W [in, out]; attention's P·V, B varying per batch).
        "input x: bf16[n=150, i=72] = randn(seed=36)\ninput w: bf16[i, o=136] = randn(seed=37)\ny = einsum(x, w, 'n i, i o -> n o')\noutput y\n",
        "input p: f16[b=2, s=40, t=64] = randn(seed=38)\ninput v: f16[b, t, d=48] = randn(seed=39)\ny = einsum(p, v, 'b s t, b t d -> b s d')\noutput y\n",
        // Two rows: the CPU planner's relayout of x is one loop of two stores (its short axis
        // unrolled), folded into the launch all the same.
        "input x: bf16[n=2, i=64] = randn(seed=40)\ninput w: bf16[o=96, i] @ bsr(32, 32) = randn(seed=41, density=0.5)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        "input x: bf16[n=2, i=128] = randn(seed=42)\ninput w: bf16[o=72, i] @ 2:4(i) = randn(seed=43)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        // BSR on wgmma (the stored blocks as B): three tiles of dense rows, 17 block rows (the
        // last group of 8 partial), 20 block columns (stages of two); 16 x 16 blocks (four
        // columns per stage, 128-wide tiles); 64 x 64 blocks (one per stage), f16 out.
        "input x: bf16[n=300, i=640] = randn(seed=44)\ninput w: bf16[o=544, i] @ bsr(32, 32) = randn(seed=45, density=0.3)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        "input x: f16[n=130, i=96] = randn(seed=46)\ninput w: f16[o=144, i] @ bsr(16, 16) = randn(seed=47, density=0.4)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        "input x: bf16[n=64, i=256] = randn(seed=48)\ninput w: bf16[o=192, i] @ bsr(64, 64) = randn(seed=49, density=0.5)\ny = einsum(x, w, 'n i, o i -> n o')\ny16 = cast(y, f16)\noutput y16\n",
        // BSR built by `sparsify` (on the host) whose first 300 rows are zero: the first groups
        // of block rows store no block at all (an empty union: no steps, zeros stored).
        "input x: bf16[n=130, i=128] = randn(seed=50)\ninput wd: bf16[o=544, i] = randn(seed=51)\ninput s: f32[o] = arange\nw = sparsify(cast(wd * rearrange(relu(s - 300), 'o -> o 1'), bf16), bsr(32, 32))\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        // f64 on the SIMT template: edges, K not a multiple of 8, B n-contiguous, batched.
        "input x: f64[n=150, i=37] = randn(seed=32)\ninput w: f64[o=136, i] = randn(seed=33)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        "input x: f64[b=2, n=70, i=20] = randn(seed=34)\ninput w: f64[i, o=140] = randn(seed=35)\ny = einsum(x, w, 'b n i, i o -> b n o')\noutput y\n",
    ];
    for (i, t) in inline.iter().enumerate() {
        out.push((format!("inline product {i}"), t.to_string()));
    }
    out
}

#[test]
fn tensor_core_templates_agree_with_the_interpreter_in_emulation() {
    let Some(cxx) = crate::diff::cxx() else {
        return;
    };
    let mut launches = 0;
    for (tc, v) in configs() {
        for (name, text) in scripts() {
            let p =
                tdsl::compile(&text, &Default::default()).unwrap_or_else(|d| panic!("{name}: {d}"));
            let inputs = tdsl::bind::bind_inputs(&p, Default::default()).expect("binds");
            let plan = tdsl::plan::lower::plan_program(&p).expect("plans");
            let (_, steps) = tdsl_cuda::map_program_variants(&plan.loops, tc, v);
            let here = steps
                .iter()
                .filter(|s| matches!(s, tdsl_cuda::Step::Launch(l) if l.lib.is_some()))
                .count();
            assert!(here > 0, "{name}: no product runs on tensor cores ({tc:?})");
            launches += here;
            let emu = tdsl_cuda::emulate::Emulator::compile_variants(&plan.loops, cxx, tc, v)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let shapes = crate::diff::output_shapes(&p);
            let want = tdsl::interp::run(&p, &inputs);
            for (copies, seed) in [(Copies::Late, 1), (Copies::Early, 2)] {
                let mut bufs = tdsl::runtime::buffers(&plan, &inputs).expect("buffers");
                let order = Order::Shuffled(seed);
                emu.run_with(&mut bufs, Schedule { copies, order })
                    .unwrap_or_else(|e| panic!("{name} ({tc:?}, {copies:?}): {e}"));
                let got = tdsl::runtime::outputs(&plan, &shapes, bufs);
                if let Err(e) = crate::diff::agree(&got, &want, 1e-2, "in emulation") {
                    panic!("{name} ({tc:?}, copies {copies:?}): {e}");
                }
            }
        }
    }
    eprintln!("{launches} tensor-core launches agree with the interpreter in emulation");
}

/// What no value shows, the emulation checks: a `wgmma` whose operands a thread's `cp.async`
/// wrote without that thread's `fence.proxy.async` after it, or one issued with no
/// `wgmma.fence` since the thread last waited for `wgmma` groups, stops the run with its
/// message. The unit of a dense product on `wgmma` runs as shipped, then with each fence
/// dropped from its text (zero operands: the checks look at when, not what).
#[test]
fn a_wgmma_pipeline_without_its_fences_stops_the_emulation() {
    let Some(cxx) = crate::diff::cxx() else {
        return;
    };
    let text = "input x: bf16[n=150, i=72] = randn(seed=0)\ninput w: bf16[o=136, i] = randn(seed=1)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n";
    let p = tdsl::compile(text, &Default::default()).expect("compiles");
    let plan = tdsl::plan::lower::plan_program(&p).expect("plans");
    let (program, steps) =
        tdsl_cuda::map_program_variants(&plan.loops, TensorCores::Wgmma, Variants::default());
    let src =
        tdsl_cuda::emulate::emulator_source(&program, &steps, tdsl_cuda::emulate::Check::Results);
    let bytes: u64 = program
        .buffers
        .iter()
        .map(|b| b.elems * b.ty.size_bytes())
        .sum();
    let dir = tempfile::tempdir().expect("temp dir");
    for (dropped, message) in [
        (None, None),
        (
            Some("tdsl_fence_async_smem();"),
            Some("with no fence.proxy.async"),
        ),
        (
            Some("tdsl_wg_fence();"),
            Some("a wgmma with no wgmma.fence"),
        ),
    ] {
        let unit = match dropped {
            Some(call) => {
                assert!(src.contains(call), "the unit has no `{call}`");
                src.replace(call, "")
            }
            None => src.clone(),
        };
        let (cpp, exe, bin) = (
            dir.path().join("unit.cpp"),
            dir.path().join("unit"),
            dir.path().join("buffers.bin"),
        );
        std::fs::write(&cpp, unit).expect("writes");
        std::fs::write(&bin, vec![0u8; bytes as usize]).expect("writes");
        let mut cc = std::process::Command::new(cxx);
        cc.args(["-O1", "-std=c++17", "-w"]);
        if cfg!(target_arch = "x86_64") {
            cc.arg("-fcf-protection=none");
        }
        let built = cc
            .arg("-o")
            .arg(&exe)
            .arg(&cpp)
            .arg("-lm")
            .output()
            .expect("runs");
        assert!(
            built.status.success(),
            "{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let ran = std::process::Command::new(&exe)
            .env("TDSL_EMU_COPIES", "late")
            .arg(&bin)
            .arg("0")
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&ran.stderr);
        match message {
            None => assert!(ran.status.success(), "the shipped template: {err}"),
            Some(m) => assert!(
                !ran.status.success() && err.contains(m),
                "without `{}`: {}, {err}",
                dropped.unwrap_or_default(),
                ran.status
            ),
        }
    }
}

/// f64 products run on the FMA units by default and on the f64 tensor cores (`mma.sync` m8n8k4,
/// DMMA) when the variant says so; both agree with the interpreter to f64 rounding (1e-12 of
/// the output's largest value; a wrong lane or a skipped step of K is off by far more): partial
/// tiles, K of 11 and 37 (not multiples of 8), B either way contiguous, a transposed A,
/// batches, a fused epilogue.
#[test]
fn f64_products_agree_on_the_f64_tensor_cores_and_on_the_fma_units() {
    use tdsl_cuda::tensor::Kind;
    let Some(cxx) = crate::diff::cxx() else {
        return;
    };
    let scripts = [
        "input x: f64[n=150, i=37] = randn(seed=60)\ninput w: f64[o=136, i] = randn(seed=61)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        "input x: f64[b=2, n=70, i=20] = randn(seed=62)\ninput w: f64[i, o=140] = randn(seed=63)\ny = einsum(x, w, 'b n i, i o -> b n o')\nz = tanh(y) * 2 + y\noutput z\n",
        "input x: f64[i=24, n=130] = randn(seed=64)\ninput w: f64[o=40, i] = randn(seed=65)\ny = einsum(x, w, 'i n, o i -> n o')\noutput y\n",
        "input x: f64[n=5, i=11] = randn(seed=66)\ninput w: f64[o=200, i] = randn(seed=67)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
    ];
    for text in scripts {
        let p = tdsl::compile(text, &Default::default()).unwrap_or_else(|d| panic!("{text}: {d}"));
        let inputs = tdsl::bind::bind_inputs(&p, Default::default()).expect("binds");
        let plan = tdsl::plan::lower::plan_program(&p).expect("plans");
        let shapes = crate::diff::output_shapes(&p);
        let want = tdsl::interp::run(&p, &inputs);
        for dmma in [true, false] {
            let v = Variants {
                dmma: Some(dmma),
                ..Variants::default()
            };
            let (_, steps) = tdsl_cuda::map_program_variants(&plan.loops, TensorCores::Mma, v);
            let kinds: Vec<_> = steps
                .iter()
                .filter_map(|s| match s {
                    tdsl_cuda::Step::Launch(l) => l.lib.as_ref().map(|t| t.kind.clone()),
                    _ => None,
                })
                .collect();
            assert_eq!(kinds, [Kind::Simt { dmma }], "{text}");
            let emu = tdsl_cuda::emulate::Emulator::compile_variants(
                &plan.loops,
                cxx,
                TensorCores::Mma,
                v,
            )
            .unwrap_or_else(|e| panic!("{text}: {e}"));
            let mut bufs = tdsl::runtime::buffers(&plan, &inputs).expect("buffers");
            emu.run(&mut bufs)
                .unwrap_or_else(|e| panic!("{text} (dmma {dmma}): {e}"));
            let got = tdsl::runtime::outputs(&plan, &shapes, bufs);
            crate::diff::agree(&got, &want, 1e-12, "in emulation")
                .unwrap_or_else(|e| panic!("{text} (dmma {dmma}): {e}"));
        }
    }
}

/// One compiled emulator run over three patterns in turn (A, B, A), as
/// `gpu::gpu_index_tables_follow_the_pattern_from_run_to_run` runs one executable on a device:
/// the run-time tables (CSR row bins, BSR group tables on `mma.sync` and on `wgmma`) are kept
/// from run to run with the pattern they were built from ([`tdsl_cuda`]'s step walk, the
/// device's), and must be rebuilt when the pattern changes.
#[test]
fn index_tables_follow_the_pattern_from_run_to_run_in_emulation() {
    let Some(cxx) = crate::diff::cxx() else {
        return;
    };
    // A BSR weight whose stored blocks differ by seed; values multiples of 1/8 within ±2, so
    // every sum is exact.
    let bsr_case = |seed: u64| {
        let (n, o, i, r) = (70, 544, 256, 32);
        let mut next = crate::cuda::draws(seed);
        let keep: Vec<bool> = (0..(o / r) * (i / r)).map(|_| next(10) < 3).collect();
        let mut w = vec![0.0f64; o * i];
        for (at, v) in w.iter_mut().enumerate() {
            let (row, col) = (at / i, at % i);
            if keep[(row / r) * (i / r) + col / r] {
                *v = (next(33) as f64 - 16.0) / 8.0;
            }
        }
        let x: Vec<f64> = (0..n * i).map(|_| (next(33) as f64 - 16.0) / 8.0).collect();
        let text = format!(
            "input x: bf16[n={n}, i={i}]\ninput w: bf16[o={o}, i] @ bsr({r}, {r})\n\
             y = einsum(x, w, 'n i, o i -> n o')\noutput y\n"
        );
        let inputs = vec![
            tdsl::Tensor::from_f64(tdsl::DType::BF16, vec![n, i], &x),
            tdsl::Tensor::from_f64(tdsl::DType::BF16, vec![o, i], &w),
        ];
        (text, inputs)
    };
    type Case = Box<dyn Fn(u64) -> (String, Vec<tdsl::Tensor>)>;
    let union = Variants {
        bsr: Some(BsrWalk::Union),
        ..Variants::default()
    };
    let wgmma = Variants {
        bsr: Some(BsrWalk::Wgmma { cols: 0 }),
        ..Variants::default()
    };
    let csr: Case =
        Box::new(|seed| crate::cuda::csr_rows_case(40, 1500, &[3, 1, 0, 2, 3], 3, false, seed));
    let cases: [(&str, Case, TensorCores, Variants); 3] = [
        ("CSR row bins", csr, TensorCores::None, Variants::default()),
        (
            "BSR groups, mma.sync",
            Box::new(bsr_case),
            TensorCores::Mma,
            union,
        ),
        (
            "BSR groups, wgmma",
            Box::new(bsr_case),
            TensorCores::Wgmma,
            wgmma,
        ),
    ];
    for (name, case, tc, v) in cases {
        let (text, _) = case(0);
        let p = tdsl::compile(&text, &Default::default()).expect("compiles");
        let plan = tdsl::plan::lower::plan_program(&p).expect("plans");
        let (_, steps) = tdsl_cuda::map_program_variants(&plan.loops, tc, v);
        assert!(
            steps
                .iter()
                .any(|s| matches!(s, tdsl_cuda::Step::Table { .. })),
            "{name}: no index table"
        );
        let shapes = crate::diff::output_shapes(&p);
        let emu = tdsl_cuda::emulate::Emulator::compile_variants(&plan.loops, cxx, tc, v)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for seed in [1, 2, 1] {
            let (again, inputs) = case(seed);
            assert_eq!(again, text);
            let want = tdsl::interp::run(&p, &inputs);
            let mut bufs = tdsl::runtime::buffers(&plan, &inputs).expect("binds");
            emu.run(&mut bufs)
                .unwrap_or_else(|e| panic!("{name}, pattern {seed}: {e}"));
            let got = tdsl::runtime::outputs(&plan, &shapes, bufs);
            if let Err(e) = crate::diff::agree(&got, &want, 1e-6, "in emulation") {
                panic!("{name}, pattern {seed}: {e}");
            }
        }
    }
}

/// f32 products where the program allows TF32 (`--tf32`): on `mma.sync` m16n8k8 and on `wgmma`
/// m64nNk8, the f32 operands passed as pairs of halves; an n-contiguous B (`x @ W` with W
/// [in, out], P·V per batch) copied k-contiguous first. Within TF32's rounding of the
/// interpreter's exact f32.
#[test]
fn tf32_products_agree_with_the_interpreter_in_emulation() {
    let Some(cxx) = crate::diff::cxx() else {
        return;
    };
    let scripts = [
        // Edges past the tiles; K = 36 ends mid-stage (a multiple of 4: 16-byte chunks).
        "input x: f32[n=150, i=36] = randn(seed=0)\ninput w: f32[o=136, i] = randn(seed=1)\ny = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        // B n-contiguous, a bias and gelu fused into the store.
        "input x: f32[n=70, i=100] = randn(seed=2)\ninput w: f32[i, o=72] = randn(seed=3)\ninput b: f32[o] = randn(seed=4)\ny = gelu(einsum(x, w, 'n i, i o -> n o') + b)\noutput y\n",
        // Batched, B varying per batch element (P·V).
        "input p: f32[b=2, s=40, t=64] = randn(seed=5)\ninput v: f32[b, t, d=48] = randn(seed=6)\ny = einsum(p, v, 'b s t, b t d -> b s d')\noutput y\n",
    ];
    for text in scripts {
        let p = tdsl::compile(text, &Default::default()).expect("compiles");
        let inputs = tdsl::bind::bind_inputs(&p, Default::default()).expect("binds");
        let mut plan = tdsl::plan::lower::plan_program(&p).expect("plans");
        plan.loops.tf32 = true;
        let shapes = crate::diff::output_shapes(&p);
        let want = tdsl::interp::run(&p, &inputs);
        for tc in [TensorCores::Mma, TensorCores::Wgmma] {
            let sel = tdsl_cuda::tensor::select_with(&plan.loops, tc, Variants::default());
            assert!(
                sel.calls.values().any(|t| t.describe().contains("tf32")),
                "{text}: no TF32 launch ({tc:?})"
            );
            let emu = tdsl_cuda::emulate::Emulator::compile_variants(
                &plan.loops,
                cxx,
                tc,
                Variants::default(),
            )
            .unwrap_or_else(|e| panic!("{text}: {e}"));
            let mut bufs = tdsl::runtime::buffers(&plan, &inputs).expect("buffers");
            let early = Schedule {
                copies: Copies::Early,
                ..Default::default()
            };
            emu.run_with(&mut bufs, early)
                .unwrap_or_else(|e| panic!("{text} ({tc:?}): {e}"));
            let got = tdsl::runtime::outputs(&plan, &shapes, bufs);
            // TF32 keeps 10 of f32's 23 mantissa bits: far from exact, far within 1e-2 ...
            let worst = crate::diff::agree(&got, &want, 1e-2, "in emulation")
                .unwrap_or_else(|e| panic!("{text} ({tc:?}): {e}"));
            // ... and beyond f32's summation-order noise (~1e-7): TF32 was used.
            assert!(
                worst > 1e-5,
                "{text} ({tc:?}): worst difference {worst:.1e} of the scale: f32, not TF32"
            );
        }
    }
}

/// One random tensor-core product's script: the extents are rounded up to what each form
/// needs to run on tensor cores.
#[allow(clippy::too_many_arguments)]
pub(crate) fn product_script(
    form: usize,
    rows: u64,
    cols: u64,
    depth: u64,
    ty: usize,
    out: usize,
    epilogue: usize,
    blk: usize,
    seed: u64,
) -> String {
    let t = ["f16", "bf16", "f32", "f64"][ty];
    let (r, c) = [(16, 32), (32, 32), (64, 16)][blk];
    // K: a multiple of 8 (16-byte chunks), of 64 for 2:4, of the block for BSR; N a multiple
    // of 8 where B is n-contiguous, of the block rows for BSR.
    let (k, n) = match form {
        3 | 4 => (64 * depth.min(5), cols.next_multiple_of(8)),
        5 => (c * depth.min(6), cols.next_multiple_of(r)),
        _ => (
            8 * depth,
            if form == 1 {
                cols.next_multiple_of(8)
            } else {
                cols
            },
        ),
    };
    let (decl, product) = match form {
        0 => (
            format!("input x: {t}[n={rows}, i={k}] = randn(seed={seed})\ninput w: {t}[o={n}, i] = randn(seed={})", seed + 1),
            "einsum(x, w, 'n i, o i -> n o')".to_string(),
        ),
        1 => (
            format!("input x: {t}[n={rows}, i={k}] = randn(seed={seed})\ninput w: {t}[i, o={n}] = randn(seed={})", seed + 1),
            "einsum(x, w, 'n i, i o -> n o')".to_string(),
        ),
        2 => (
            format!("input x: {t}[b=2, n={rows}, i={k}] = randn(seed={seed})\ninput w: {t}[o={n}, i] = randn(seed={})", seed + 1),
            "einsum(x, w, 'b n i, o i -> b n o')".to_string(),
        ),
        3 => (
            format!("input x: {t}[n={rows}, i={k}] = randn(seed={seed})\ninput w: {t}[o={n}, i] @ 2:4(i) = randn(seed={})", seed + 1),
            "einsum(x, w, 'n i, o i -> n o')".to_string(),
        ),
        4 => (
            format!("input w: {t}[o={rows}, i={k}] @ 2:4(i) = randn(seed={seed})\ninput x: {t}[i, n={n}] = randn(seed={})", seed + 1),
            "einsum(w, x, 'o i, i n -> o n')".to_string(),
        ),
        _ => (
            format!("input x: {t}[n={rows}, i={k}] = randn(seed={seed})\ninput w: {t}[o={n}, i] @ bsr({r}, {c}) = randn(seed={}, density=0.5)", seed + 1),
            "einsum(x, w, 'n i, o i -> n o')".to_string(),
        ),
    };
    // The last axis of every form's result has extent `n` except form 4 (o n: n too).
    let value = match epilogue {
        0 => product,
        1 => format!("{product} + b"),
        2 => format!("gelu({product} + b)"),
        _ => format!("relu({product} * b)"),
    };
    let value = match out {
        0 => value,
        1 => format!("cast({value}, f32)"),
        _ => format!("cast({value}, {})", ["bf16", "f16", "bf16", "f32"][ty]),
    };
    format!(
        "{decl}\ninput b: f32[{n}] = randn(seed={})\ny = {value}\noutput y\n",
        seed + 2
    )
}

fn tc_config() -> ProptestConfig {
    cases_from("TDSL_TC_CASES", 8)
}

/// A property test's config: `default` cases, or as many as the environment variable `var`
/// says; no failure files (the failing script is in the message).
pub(crate) fn cases_from(var: &str, default: u32) -> ProptestConfig {
    let cases = std::env::var(var)
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(tc_config())]

    /// Random tensor-core products (dense in torch and [in, out] layouts, batched, 2:4 on
    /// either side, BSR of three block shapes; f16 and bf16, f32 on the SIMT template or on
    /// TF32 tensor cores, and f64 on the SIMT template;
    /// odd extents; an elementwise
    /// epilogue or none; f32, f16 or bf16 results) agree with the interpreter when the
    /// templates run in emulation, for every instruction set tdsl targets.
    #[test]
    fn prop_tensor_core_products_agree_in_emulation(
        form in 0usize..6, rows in 1u64..300, cols in 1u64..300, depth in 1u64..40,
        ty in 0usize..4, out in 0usize..3, epilogue in 0usize..4, blk in 0usize..3,
        seed in 0u64..1000, tf32 in any::<bool>(),
    ) {
        let Some(cxx) = crate::diff::cxx() else { return Ok(()) };
        let text = product_script(form, rows, cols, depth, ty, out, epilogue, blk, seed);
        let p = tdsl::compile(&text, &Default::default())
            .map_err(|d| TestCaseError::fail(format!("{text}\n{d}")))?;
        let inputs = tdsl::bind::bind_inputs(&p, Default::default()).expect("binds");
        let mut plan = tdsl::plan::lower::plan_program(&p).expect("plans");
        // f32 products on TF32 tensor cores (`--tf32`) half the time.
        plan.loops.tf32 = tf32;
        // A product so small that the planner writes it as loops has nothing to run on tensor
        // cores: such cases are skipped (the corpus test requires its products to run there).
        let on_tensor_cores = |tc, v| {
            let (_, steps) = tdsl_cuda::map_program_variants(&plan.loops, tc, v);
            steps.iter().any(|s| matches!(s, tdsl_cuda::Step::Launch(l) if l.lib.is_some()))
        };
        prop_assume!(on_tensor_cores(TensorCores::Mma, Variants::default()));
        let shapes = crate::diff::output_shapes(&p);
        let want = tdsl::interp::run(&p, &inputs);
        for (tc, v) in configs() {
            prop_assert!(on_tensor_cores(tc, v), "{text}: no tensor-core launch ({tc:?})");
            let emu = tdsl_cuda::emulate::Emulator::compile_variants(&plan.loops, cxx, tc, v)
                .map_err(TestCaseError::fail)?;
            let mut bufs = tdsl::runtime::buffers(&plan, &inputs).expect("buffers");
            // Threads in an order drawn with the case.
            let early = Schedule { copies: Copies::Early, order: Order::Shuffled(seed + 1) };
            emu.run_with(&mut bufs, early)
                .map_err(|e| TestCaseError::fail(format!("{text} ({tc:?}): {e}")))?;
            let got = tdsl::runtime::outputs(&plan, &shapes, bufs);
            crate::diff::agree(&got, &want, 1e-2, "in emulation")
                .map_err(|e| TestCaseError::fail(format!("{text} ({tc:?}): {e}")))?;
        }
    }
}
