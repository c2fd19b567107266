//! The CUDA backend on a machine with no GPU: the generated CUDA C++ of every example, bench
//! script, corpus script and a set of generated programs compiles with NVRTC to CUBIN for
//! sm_80 and sm_90 (which runs ptxas over every kernel, inline PTX included) without spills;
//! a few small kernels are snapshots. The differential tests (`diff.rs`) run the same kernels
//! through the host emulation; `gpu.rs` runs them on a device when there is one.
//!
//! Without NVRTC the compile check prints why and passes, unless `TDSL_REQUIRE_NVRTC` is set
//! (CI sets it, after installing the pip wheel).

use std::path::Path;

fn nvrtc_or_skip(test: &str) -> bool {
    match tdsl_cuda::nvrtc::nvrtc() {
        Ok(_) => true,
        Err(e) => {
            assert!(
                std::env::var_os("TDSL_REQUIRE_NVRTC").is_none(),
                "TDSL_REQUIRE_NVRTC is set but NVRTC is missing: {e}"
            );
            eprintln!("skipped {test}: {e}");
            false
        }
    }
}

/// Scripts from a directory (`.tdsl` files), with their names.
fn scripts_in(dir: &str) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut out: Vec<(String, String)> = std::fs::read_dir(&root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "tdsl"))
        .filter_map(|p| Some((p.display().to_string(), std::fs::read_to_string(&p).ok()?)))
        .collect();
    out.sort();
    out
}

fn plan(script: &str) -> Option<tdsl::plan::lower::Plan> {
    let p = tdsl::compile(script, &Default::default()).ok()?;
    tdsl::plan::lower::plan_program(&p).ok()
}

/// The kernels of a compiled unit, each checked lean: no spills, and no `wgmma` pipeline that
/// ptxas serialized (a branch around a `wgmma`, or registers of a group in flight touched).
fn lean(
    what: &str,
    sm: u32,
    c: &tdsl_cuda::nvrtc::Cubin,
) -> Vec<tdsl_cuda::nvrtc::KernelResources> {
    let r = tdsl_cuda::nvrtc::resources(&c.log);
    for k in &r {
        assert_eq!(
            (k.spill_stores, k.spill_loads),
            (0, 0),
            "{what}: kernel {} spills on sm_{sm} ({} registers)",
            k.name,
            k.registers
        );
        assert!(
            !k.wgmma_serialized,
            "{what}: ptxas serialized the wgmma pipeline of kernel {} on sm_{sm}:\n{}",
            k.name, c.log
        );
    }
    r
}

#[test]
fn nvrtc_compiles_every_kernel_shape_for_sm80_and_sm90_without_spills() {
    if !nvrtc_or_skip("the NVRTC compile check") {
        return;
    }
    let mut programs: Vec<(String, String)> = Vec::new();
    for dir in ["examples", "bench", "tests/corpus"] {
        programs.extend(scripts_in(dir));
    }
    for (i, s) in crate::diff::generated_scripts(10).into_iter().enumerate() {
        programs.push((format!("generated #{i}"), s));
    }
    let (mut units, mut kernels, mut max_regs) = (0, 0, 0);
    for (name, script) in &programs {
        let Some(plan) = plan(script) else { continue };
        for sm in [80, 90] {
            let unit = tdsl_cuda::cuda_unit_for(&plan.loops, sm);
            let c = tdsl_cuda::nvrtc::compile(&unit, sm, true)
                .unwrap_or_else(|e| panic!("{name} does not compile for sm_{sm}:\n{e}\n{unit}"));
            for k in lean(name, sm, &c) {
                max_regs = max_regs.max(k.registers);
                kernels += 1;
            }
        }
        units += 1;
    }
    assert!(units >= 40, "only {units} programs planned");
    eprintln!("NVRTC: {units} units, {kernels} kernel compiles, at most {max_regs} registers");
}

#[test]
fn nvrtc_compiles_the_device_ceiling_probes() {
    if !nvrtc_or_skip("the ceiling probes") {
        return;
    }
    for sm in [80, 90] {
        let c = tdsl_cuda::nvrtc::compile(tdsl_cuda::device::CEILINGS_SOURCE, sm, true)
            .unwrap_or_else(|e| panic!("sm_{sm}: {e}"));
        let r = tdsl_cuda::nvrtc::resources(&c.log);
        assert_eq!(r.len(), 2, "{}", c.log);
        assert!(r.iter().all(|k| k.spill_stores == 0), "{}", c.log);
    }
}

/// The kernel text of `script`'s kernel `k`.
fn kernel_text(script: &str, k: usize) -> String {
    let plan = plan(script).expect("the script plans");
    tdsl_cuda::cuda_kernel(&plan.loops, k)
}

#[test]
fn snapshot_softmax_rows_one_warp_per_row() {
    insta::assert_snapshot!(kernel_text(
        "input x: f32[a=4, b=6, c=32] = randn(seed=0)\n\
         e = exp(x - reduce(x, 'a b c -> a b 1', 'max'))\n\
         y = e / reduce(e, 'a b c -> a b 1', 'sum')\n\
         output y\n",
        0
    ));
}

#[test]
fn snapshot_layer_norm_rows_one_block_per_row() {
    // Rows of 1024 or more elements are one block's: the warps' partial sums meet in shared
    // memory.
    insta::assert_snapshot!(kernel_text(
        "input x: f32[n=3, d=1024] = randn(seed=0)\n\
         c = x - reduce(x, 'n d -> n 1', 'mean')\n\
         y = c / sqrt(reduce(c * c, 'n d -> n 1', 'mean') + 1e-5)\n\
         output y\n",
        0
    ));
}

#[test]
fn snapshot_column_blocks_for_a_vector_times_w_in_out_and_a_transposed_column_map() {
    // A block per 32 outputs, its 16 warps splitting each output's row. Then a column's
    // maximum divided into the column, written transposed: the warps also store inside the
    // loop they split, and 40 columns leave the second block's last 24 past the grid.
    insta::assert_snapshot!(kernel_text(
        "input x: bf16[n=1, i=256] = randn(seed=0)\n\
         input w: bf16[i, o=64] = randn(seed=1)\n\
         y = einsum(x, w, 'n i, i o -> n o')\n\
         output y\n",
        0
    ));
    insta::assert_snapshot!(kernel_text(
        "input u: f32[q=300, j=40] = randn(seed=5)\n\
         t = rearrange(u / reduce(u, 'q j -> 1 j', 'max'), 'q j -> j q')\n\
         output t\n",
        0
    ));
}

/// The kernels of every statement of `script`, without the prelude.
fn all_kernels(script: &str) -> String {
    let plan = plan(script).expect("plans");
    (0..plan.loops.kernels.len())
        .map(|k| tdsl_cuda::cuda_kernel(&plan.loops, k))
        .collect()
}

#[test]
fn snapshot_mixed_precision_gemm_with_bias_and_gelu() {
    let script = "input x: bf16[16, 32] = randn(seed=0)\n\
                  input w: bf16[24, 32] = randn(seed=1)\n\
                  input b: f32[24] = randn(seed=2)\n\
                  y = gelu(einsum(x, w, 'n i, o i -> n o') + b)\n\
                  output y\n";
    insta::assert_snapshot!(all_kernels(script));
}

/// Split-K (16 rows × K = 1024: 4 tiles, K in 2 parts; the reduce launch stores through the
/// fused bias) and `x @ W` with W [in, out] copied k-contiguous for `wgmma` (1024 rows).
#[test]
fn snapshot_split_k_and_a_staged_operand() {
    let split = "input x: bf16[16, 1024] = randn(seed=0)\n\
                 input w: bf16[256, 1024] = randn(seed=1)\n\
                 input b: f32[256] = randn(seed=2)\n\
                 y = einsum(x, w, 'n i, o i -> n o') + b\n\
                 output y\n";
    let staged = "input x: bf16[1024, 64] = randn(seed=0)\n\
                  input w: bf16[64, 128] = randn(seed=1)\n\
                  y = einsum(x, w, 'n i, i o -> n o')\n\
                  output y\n";
    insta::assert_snapshot!(format!("{}\n{}", all_kernels(split), all_kernels(staged)));
}

/// A BSR weight in torch's layout on `wgmma` (`TDSL_TC_BSR=wgmma`): the stored blocks are the
/// template's B, so it computes the transposed product and its `put` is the call's.
#[test]
fn snapshot_bsr_on_wgmma() {
    use tdsl_cuda::tensor::{BsrWalk, TensorCores, Variants};
    let script = "input x: bf16[300, 256] = randn(seed=0)\n\
                  input w: bf16[512, 256] @ bsr(32, 32) = randn(seed=1, density=0.25)\n\
                  input b: f32[512] = randn(seed=2)\n\
                  y = relu(einsum(x, w, 'n i, o i -> n o') + b)\n\
                  output y\n";
    let plan = plan(script).expect("plans");
    let v = Variants {
        bsr: Some(BsrWalk::Wgmma { cols: 0 }),
        ..Variants::default()
    };
    let unit = tdsl_cuda::cuda_unit_with(&plan.loops, TensorCores::Wgmma, v);
    // The launches, after the prelude: from the line before the first launch's shape.
    let launch = unit.find("\n// launch:").expect("a launch");
    let at = unit[..launch].rfind('\n').expect("a line before it");
    insta::assert_snapshot!(&unit[at + 1..]);
}

#[test]
fn snapshot_csr_times_dense() {
    let script = "input a: f32[8, 16] @ csr = rand(seed=0, density=0.3)\n\
                  input x: f32[16, 4] = randn(seed=1)\n\
                  y = einsum(a, x, 'i k, k j -> i j')\n\
                  output y\n";
    insta::assert_snapshot!(all_kernels(script));
}

#[test]
fn cli_emit_prints_one_unit_with_every_kernel_and_plan_shows_the_gpu_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let script = "input x: f32[n=64, d=48] = randn(seed=0)\n\
                  input w: f32[d, h=16] = randn(seed=1)\n\
                  e = exp(x - reduce(x, 'n d -> n 1', 'max'))\n\
                  y = einsum(e / reduce(e, 'n d -> n 1', 'sum'), w, 'n d, d h -> n h')\n\
                  output y\n";
    let out = crate::common::tdsl_script(dir.path(), "emit", script, &["--target", "cuda"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // The prelude once, then every launch with its shape.
    assert_eq!(out.stdout.matches("#define TDSL_KERNEL").count(), 1);
    let plan = plan(script).expect("plans");
    for k in &plan.loops.kernels {
        assert!(
            out.stdout.contains(&format!("TDSL_KERNEL {}_0(", k.name)),
            "kernel {} missing:\n{}",
            k.name,
            out.stdout
        );
    }
    assert!(out.stdout.contains("// launch: <<<"), "{}", out.stdout);
    assert!(out.stdout.contains("one warp each"), "{}", out.stdout);
    // The softmax's loops spread over the grid; the GEMM call runs on the f32 template.
    let p = crate::common::tdsl_script(dir.path(), "plan", script, &["--device", "cuda"]);
    assert_eq!(p.code, 0, "{}", p.stderr);
    assert!(p.stdout.contains("gpu grid"), "{}", p.stdout);
    assert!(p.stdout.contains("f32 FMA"), "{}", p.stdout);
    let cpu = crate::common::tdsl_script(dir.path(), "plan", script, &[]);
    assert!(cpu.stdout.contains("gemm m="), "{}", cpu.stdout);
    // `--tf32` lets the f32 product take TF32 tensor cores (W [in, out] copied k-contiguous
    // first); the plan says so.
    let t = crate::common::tdsl_script(dir.path(), "plan", script, &["--device", "cuda", "--tf32"]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(
        t.stdout.starts_with("f32 products: tf32 allowed\n"),
        "{}",
        t.stdout
    );
    assert!(
        t.stdout.contains("m16n8k8 tf32") || t.stdout.contains("k8 tf32"),
        "{}",
        t.stdout
    );
    assert!(t.stdout.contains("transposing copy"), "{}", t.stdout);
    assert!(!t.stdout.contains("f32 FMA"), "{}", t.stdout);
    // Without a GPU, running there is a diagnostic with exit status 1, never a panic.
    if crate::gpu::device().is_none() {
        let r = crate::common::tdsl_script(dir.path(), "run", script, &["--device", "cuda"]);
        assert_eq!(r.code, 1, "{}", r.stderr);
        assert!(
            r.stderr.contains("tdsl::backend::unavailable"),
            "{}",
            r.stderr
        );
    }
}

/// The tensor-core launches of `script` on an H100 or H200: (kernel, description) of each, and
/// the folded kernels.
fn tensor_cores(script: &str) -> (Vec<(usize, String)>, Vec<usize>) {
    tensor_cores_on(script, tdsl_cuda::tensor::TensorCores::Wgmma)
}

fn tensor_cores_on(
    script: &str,
    tc: tdsl_cuda::tensor::TensorCores,
) -> (Vec<(usize, String)>, Vec<usize>) {
    let plan = plan(script).expect("plans");
    let sel = tdsl_cuda::tensor::select(&plan.loops, tc);
    (
        sel.calls.iter().map(|(k, t)| (*k, t.describe())).collect(),
        sel.dead.into_iter().collect(),
    )
}

#[test]
fn tensor_cores_take_16_bit_products_and_fold_the_copies_around_them() {
    // torch layout, bf16: one launch, B read k-contiguous straight from the weight; `wgmma` on
    // sm_90a (64-wide tiles: too few for wider ones), `mma.sync` before.
    let linear = "input x: bf16[n=200, i=264] = randn(seed=0)\n\
         input w: bf16[o=136, i] = randn(seed=1)\n\
         y = einsum(x, w, 'n i, o i -> n o')\n\
         output y\n";
    let (calls, dead) = tensor_cores(linear);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(
        calls[0].1.contains("wgmma.mma_async m64n64k16 bf16"),
        "{calls:?}"
    );
    assert!(calls[0].1.contains("B k-contiguous"), "{calls:?}");
    assert!(dead.is_empty());
    let (calls, _) = tensor_cores_on(linear, tdsl_cuda::tensor::TensorCores::Mma);
    assert!(calls[0].1.contains("mma.sync m16n8k16 bf16"), "{calls:?}");
    // Enough tiles for every SM: 128 × 256.
    let (calls, _) = tensor_cores(
        "input x: bf16[n=4096, i=64] = randn(seed=0)\n\
         input w: bf16[o=4096, i] = randn(seed=1)\n\
         y = einsum(x, w, 'n i, o i -> n o')\n\
         output y\n",
    );
    assert!(calls[0].1.contains("m64n256k16"), "{calls:?}");
    assert!(calls[0].1.contains("tiles 128x256x64"), "{calls:?}");
    // B n-contiguous (`x @ W`, W [in, out]): copied k-contiguous for `wgmma` first when A has
    // enough rows to repay the copy (STAGE_ROWS), else `mma.sync` reading B as stored.
    for (rows, staged) in [(1024, true), (256, false)] {
        let (calls, _) = tensor_cores(&format!(
            "input x: bf16[n={rows}, i=64] = randn(seed=0)\n\
             input w: bf16[i, o=512] = randn(seed=1)\n\
             y = einsum(x, w, 'n i, i o -> n o')\n\
             output y\n"
        ));
        let d = &calls[0].1;
        assert_eq!(d.contains("transposing copy"), staged, "{rows}: {d}");
        assert_eq!(d.contains("wgmma"), staged, "{rows}: {d}");
    }
    // Too few tiles for the SMs and a deep K: K in parts, each its own blocks, added by a
    // second launch (split-K); a product with enough tiles, or too shallow a K, is one launch.
    for (rows, k, parts) in [(16, 8192, Some(3)), (8192, 8192, None), (16, 512, None)] {
        let (calls, _) = tensor_cores(&format!(
            "input x: bf16[n={rows}, i={k}] = randn(seed=0)\n\
             input w: bf16[o=8192, i] = randn(seed=1)\n\
             y = einsum(x, w, 'n i, o i -> n o')\n\
             output y\n"
        ));
        let d = &calls[0].1;
        match parts {
            Some(p) => assert!(d.contains(&format!("K in {p} parts")), "{rows} x {k}: {d}"),
            None => assert!(!d.contains("parts"), "{rows} x {k}: {d}"),
        }
    }
    // The widest tiles that still cover the SMs (132): 128 wide for 1024 rows × 4096 (256
    // tiles; 128 of 128 × 256), 64 wide for 256 rows × 8192 (256; 128 of 128 × 128).
    for (rows, cols, width) in [(1024, 4096, 128), (256, 8192, 64)] {
        let (calls, _) = tensor_cores(&format!(
            "input x: bf16[n={rows}, i=64] = randn(seed=0)\n\
             input w: bf16[o={cols}, i] = randn(seed=1)\n\
             y = einsum(x, w, 'n i, o i -> n o')\n\
             output y\n"
        ));
        assert!(
            calls[0].1.contains(&format!("m64n{width}k16")),
            "{rows} x {cols}: {calls:?}"
        );
    }
    // 2:4 in torch layout: the CPU planner's widening copy of x and the transposing copy of the
    // result are folded into the launch.
    let (calls, dead) = tensor_cores(
        "input x: bf16[m=100, k=128] = randn(seed=0)\n\
         input w: bf16[n=72, k] @ 2:4(k) = randn(seed=1)\n\
         y = einsum(x, w, 'm k, n k -> m n')\n\
         output y\n",
    );
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(calls[0].1.contains("mma.sp::ordered_metadata"), "{calls:?}");
    assert_eq!(dead.len(), 2, "{dead:?}");
    // 2:4 and BSR on the left of an n-contiguous f16 operand: its widening copy and the result's
    // narrowing copy are row-major loop pairs (not cache tiles), folded all the same.
    for layout in ["2:4(i)", "bsr(16, 64)"] {
        let (calls, dead) = tensor_cores(&format!(
            "input v: f16[o=48, i=192] @ {layout} = randn(seed=2)
             input a: f16[i, c=40] = randn(seed=3)
             z = einsum(v, a, 'o i, i c -> o c')
             output z
"
        ));
        assert_eq!(calls.len(), 1, "{layout}: {calls:?}");
        assert!(calls[0].1.contains("B n-contiguous"), "{calls:?}");
        assert_eq!(dead.len(), 2, "{layout}: {dead:?}");
    }
    // BSR in torch layout, 32×32 blocks: one block row by 256 columns per thread block.
    let (calls, _) = tensor_cores(
        "input x: bf16[m=100, k=128] = randn(seed=0)
         input w: bf16[n=96, k] @ bsr(32, 32) = randn(seed=1, density=0.5)
         y = einsum(x, w, 'm k, n k -> m n')
         output y
",
    );
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(calls[0].1.contains("BSR 32x32 blocks"), "{calls:?}");
    assert!(calls[0].1.contains("tiles 32x256x32"), "{calls:?}");
    // f32 products (and an f32 activation times a bf16 weight, widened by the planner) run on
    // the f32 template, exact in f32: no TF32 unless asked.
    for script in [
        "input x: f32[n=64, i=64] = randn(seed=0)\ninput w: f32[o=64, i] = randn(seed=1)\n\
         y = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        "input x: f32[n=64, i=64] = randn(seed=0)\ninput w: bf16[o=64, i] = randn(seed=1)\n\
         y = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
    ] {
        let (calls, _) = tensor_cores(script);
        assert_eq!(calls.len(), 1, "{script}: {calls:?}");
        assert!(calls[0].1.contains("f32 FMA (no tensor cores"), "{calls:?}");
    }
    // What stays on the generic kernel: 16-bit products with K not a multiple of 8 (16-byte
    // chunks), 2:4 with K not a multiple of 64, BSR blocks that are not 16, 32 or 64, and BSR
    // whose block rows are not the output's rows.
    for script in [
        "input x: bf16[n=64, i=60] = randn(seed=0)\ninput w: bf16[o=64, i] = randn(seed=1)\n\
         y = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        "input x: bf16[m=16, k=96] = randn(seed=0)\ninput w: bf16[n=8, k] @ 2:4(k) = randn(seed=1)\n\
         y = einsum(x, w, 'm k, n k -> m n')\noutput y\n",
        "input x: bf16[n=64, i=64] = randn(seed=0)\ninput w: bf16[o=64, i] @ bsr(8, 8) = randn(seed=1)\n\
         y = einsum(x, w, 'n i, o i -> n o')\noutput y\n",
        "input x: bf16[n=64, i=64] = randn(seed=0)\ninput w: bf16[i, o=64] @ bsr(16, 16) = randn(seed=1)\n\
         y = einsum(x, w, 'n i, i o -> n o')\noutput y\n",
    ] {
        let (calls, dead) = tensor_cores(script);
        assert!(calls.is_empty() && dead.is_empty(), "{script}: {calls:?}");
    }
}

#[test]
fn every_product_of_the_tensor_core_corpus_runs_on_tensor_cores() {
    // The GPU tests compare values only, so a product that silently fell back to the generic
    // kernel would pass them (2:4 on the left did, for a session): the tc_* scripts are
    // written so that every gemm and spmm qualifies.
    let mut products = 0;
    for (name, text) in scripts_in("tests/corpus") {
        if !name.contains("/tc_") {
            continue;
        }
        let plan = plan(&text).expect("plans");
        for tc in [
            tdsl_cuda::tensor::TensorCores::Mma,
            tdsl_cuda::tensor::TensorCores::Wgmma,
        ] {
            let sel = tdsl_cuda::tensor::select(&plan.loops, tc);
            for (ki, k) in plan.loops.kernels.iter().enumerate() {
                if let [tdsl_loop::Stmt::Call(
                    tdsl_loop::LibCall::Gemm { .. } | tdsl_loop::LibCall::SpMM { .. },
                )] = k.body.as_slice()
                {
                    products += 1;
                    assert!(
                        sel.calls.contains_key(&ki),
                        "{name}: kernel {ki} ({}) is not on tensor cores",
                        k.origin
                    );
                }
            }
        }
    }
    assert!(
        products >= 18,
        "only {products} products in the tc_* corpus"
    );
}

#[test]
fn snapshot_two_four_torch_layout_on_tensor_cores() {
    let script = "input x: bf16[m=100, k=128] = randn(seed=0)\n\
                  input w: bf16[n=72, k] @ 2:4(k) = randn(seed=1)\n\
                  y = einsum(x, w, 'm k, n k -> m n')\n\
                  output y\n";
    let plan = plan(script).expect("plans");
    let unit = tdsl_cuda::cuda_unit(&plan.loops);
    let from = unit
        .find("\n// k0:")
        .or_else(|| unit.find("\n// k1_0"))
        .unwrap();
    insta::assert_snapshot!(&unit[from..]);
}

/// Every corpus script's kernels, run by the host emulation (the text NVRTC compiles, one
/// thread at a time), agree with the interpreter: the corpus names the kernel shapes the
/// mapping pass makes (block rows, transposing tiles), which random programs reach rarely.
#[test]
fn emulation_runs_every_corpus_script_like_the_interpreter() {
    if crate::diff::cxx().is_none() {
        return;
    }
    let mut ran = 0;
    for (name, text) in scripts_in("tests/corpus") {
        let Ok(p) = tdsl::compile(&text, &Default::default()) else {
            continue;
        };
        let Ok(inputs) = tdsl::bind::bind_inputs(&p, Default::default()) else {
            continue;
        };
        let shapes = crate::diff::output_shapes(&p);
        let want = tdsl::interp::run(&p, &inputs);
        let got = crate::diff::cuda_emulated(&p, &inputs, &shapes)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        crate::corpus::assert_agrees(&name, &text, "the CUDA emulation", &got, &want);
        ran += 1;
    }
    assert!(ran >= 20, "only {ran} corpus scripts ran");
}

#[test]
fn snapshot_transpose_through_a_shared_memory_tile() {
    // Sides that are not multiples of the tile: the tile's edges are guarded.
    insta::assert_snapshot!(kernel_text(
        "input x: f32[a=40, b=70] = randn(seed=0)\n\
         y = rearrange(x, 'a b -> b a')\n\
         output y\n",
        0
    ));
}

/// The templates not chosen by default: 2:4 on `wgmma.mma_async.sp` (sm_90a; chosen on a
/// device only with `TDSL_TC_SP=wgmma` until a device run confirms it), BSR over groups of
/// block rows and dense `wgmma` tiles 128 and 256 wide (chosen for large launches; the corpus's
/// are small): the tensor-core corpus
/// compiles for sm_90a and sm_80 with them, without spills, and its products take them.
/// Two products of `ty` operands: in torch layout (x · wᵀ, both k-contiguous) and `x @ v` (v
/// n-contiguous), 300 rows, K of 136.
fn two_products(ty: &str) -> String {
    format!(
        "input x: {ty}[n=300, i=136] = randn(seed=0)\n\
         input w: {ty}[o=200, i] = randn(seed=1)\n\
         input v: {ty}[i, p=72] = randn(seed=2)\n\
         y = einsum(x, w, 'n i, o i -> n o')\n\
         z = einsum(x, v, 'n i, i p -> n p')\n\
         output y, z\n"
    )
}

/// f32 products allowed TF32 (`--tf32`) compile for sm_80 (`mma.sync` m16n8k8) and sm_90a
/// (`wgmma` m64nNk8, every tile width) without spills, torch layout and `x @ W` alike; without
/// the opt-in they stay on the exact f32 template.
#[test]
fn nvrtc_compiles_tf32_products_without_spills() {
    use tdsl_cuda::tensor::{select_with, TensorCores, Variants};
    let script = two_products("f32");
    let mut plan = plan(&script).expect("plans");
    let exact = select_with(&plan.loops, TensorCores::Wgmma, Variants::default());
    assert!(exact
        .calls
        .values()
        .all(|t| t.describe().contains("f32 FMA")));
    plan.loops.tf32 = true;
    let tf32 = select_with(&plan.loops, TensorCores::Wgmma, Variants::default());
    assert_eq!(tf32.calls.len(), 2);
    for t in tf32.calls.values() {
        assert!(
            t.describe().contains("wgmma.mma_async m64n64k8 tf32"),
            "{}",
            t.describe()
        );
    }
    assert_eq!(tf32.scratch.len(), 1, "one copy of v, k-contiguous");
    if !nvrtc_or_skip("the TF32 compile check") {
        return;
    }
    for (sm, tc, cols) in [
        (80, TensorCores::Mma, None),
        (90, TensorCores::Wgmma, None),
        (90, TensorCores::Wgmma, Some(128)),
        (90, TensorCores::Wgmma, Some(256)),
    ] {
        let v = Variants {
            wg_cols: cols,
            ..Variants::default()
        };
        let unit = tdsl_cuda::cuda_unit_with(&plan.loops, tc, v);
        let c = tdsl_cuda::nvrtc::compile(&unit, sm, true)
            .unwrap_or_else(|e| panic!("TF32 does not compile for sm_{sm}:\n{e}"));
        lean("TF32", sm, &c);
    }
}

/// f64 products take the FMA units, or the f64 tensor cores (`mma.sync` m8n8k4) on sm_80 and
/// sm_90a when the variant says so; both compile without spills, torch layout and `x @ W`
/// alike.
#[test]
fn nvrtc_compiles_f64_products_on_the_f64_tensor_cores_without_spills() {
    use tdsl_cuda::tensor::{select_with, TensorCores, Variants};
    let script = two_products("f64");
    let plan = plan(&script).expect("plans");
    let dmma = Variants {
        dmma: Some(true),
        ..Variants::default()
    };
    for (tc, v, what) in [
        (TensorCores::Mma, dmma, "mma.sync m8n8k4"),
        (TensorCores::Wgmma, dmma, "mma.sync m8n8k4"),
        (TensorCores::Wgmma, Variants::default(), "f64 FMA"),
    ] {
        let calls = select_with(&plan.loops, tc, v).calls;
        assert_eq!(calls.len(), 2);
        for t in calls.values() {
            assert!(t.describe().contains(what), "{}", t.describe());
        }
    }
    if !nvrtc_or_skip("the f64 compile check") {
        return;
    }
    for (sm, tc, v) in [
        (80, TensorCores::Mma, dmma),
        (90, TensorCores::Wgmma, dmma),
        (90, TensorCores::Wgmma, Variants::default()),
    ] {
        let unit = tdsl_cuda::cuda_unit_with(&plan.loops, tc, v);
        let c = tdsl_cuda::nvrtc::compile(&unit, sm, true)
            .unwrap_or_else(|e| panic!("f64 does not compile for sm_{sm}:\n{e}"));
        for k in lean("f64", sm, &c) {
            eprintln!("f64 sm_{sm} ({v:?}): {} {} registers", k.name, k.registers);
        }
    }
}

#[test]
fn nvrtc_compiles_the_other_tensor_core_templates_without_spills() {
    if !nvrtc_or_skip("the compile check of the other templates") {
        return;
    }
    use tdsl_cuda::tensor::{select_with, BsrWalk, TensorCores, Variants};
    let union = Variants {
        bsr: Some(BsrWalk::Union),
        wg_cols: Some(128),
        split_k: Some(2),
        ..Variants::default()
    };
    let wide = Variants {
        sp_rows: Some(256),
        wg_cols: Some(256),
        stage_b: Some(true),
        bsr: Some(BsrWalk::Wgmma { cols: 256 }),
        ..union
    };
    let (mut sparse, mut groups, mut wg_bsr) = (0, 0, 0);
    for (name, text) in scripts_in("tests/corpus") {
        if !name.contains("/tc_") {
            continue;
        }
        let plan = plan(&text).expect("plans");
        let count = |tc: TensorCores, what: &str| {
            select_with(&plan.loops, tc, union)
                .calls
                .values()
                .filter(|t| t.describe().contains(what))
                .count()
        };
        sparse += count(TensorCores::WgmmaSparse, "wgmma.mma_async.sp m64n128k32");
        groups += count(TensorCores::Mma, "over the union");
        wg_bsr += select_with(&plan.loops, TensorCores::Wgmma, wide)
            .calls
            .values()
            .filter(|t| t.describe().contains("as wgmma's B"))
            .count();
        for (sm, tc, v) in [
            (90, TensorCores::WgmmaSparse, union),
            (90, TensorCores::WgmmaSparse, wide),
            (80, TensorCores::Mma, union),
        ] {
            let unit = tdsl_cuda::cuda_unit_with(&plan.loops, tc, v);
            let c = tdsl_cuda::nvrtc::compile(&unit, sm, true)
                .unwrap_or_else(|e| panic!("{name} does not compile for sm_{sm}:\n{e}"));
            for k in lean(&name, sm, &c) {
                eprintln!("{name} sm_{sm}: {} {} registers", k.name, k.registers);
            }
        }
    }
    assert!(sparse >= 1, "no 2:4 product of the corpus took wgmma.sp");
    assert!(
        wg_bsr >= 2,
        "only {wg_bsr} BSR products of the corpus took wgmma"
    );
    assert!(
        groups >= 2,
        "only {groups} BSR products of the corpus took the grouped template"
    );
}

#[test]
fn elementwise_kernels_after_a_tensor_core_product_fuse_into_its_store() {
    // A bias and gelu; a per-batch scale over rows the planner flattened (`b n` into one); relu
    // after 2:4 in torch layout, through the transposing copy of the result; a residual.
    for script in [
        "input x: bf16[n=150, i=72] = randn(seed=0)\ninput w: bf16[o=136, i] = randn(seed=1)\n\
         input b: f32[o] = randn(seed=2)\ny = gelu(einsum(x, w, 'n i, o i -> n o') + b)\noutput y\n",
        "input x: f16[b=3, n=40, i=64] = randn(seed=3)\ninput w: f16[o=24, i] = randn(seed=4)\n\
         input s: f32[b, o] = randn(seed=5)\n\
         y = einsum(x, w, 'b n i, o i -> b n o') * rearrange(s, 'b o -> b 1 o')\noutput y\n",
        "input x: bf16[m=100, k=128] = randn(seed=6)\ninput w: bf16[n=72, k] @ 2:4(k) = randn(seed=7)\n\
         input b: f32[n] = randn(seed=8)\ny = relu(einsum(x, w, 'm k, n k -> m n') - b)\noutput y\n",
        "input x: bf16[n=130, i=64] = randn(seed=9)\ninput w: bf16[o=72, i] = randn(seed=10)\n\
         input r: f32[n, o] = randn(seed=11)\ny = einsum(x, w, 'n i, o i -> n o') + r\noutput y\n",
    ] {
        let (calls, dead) = tensor_cores(script);
        assert_eq!(calls.len(), 1, "{script}: {calls:?}");
        assert!(calls[0].1.contains("fused into the store"), "{script}: {calls:?}");
        assert!(!dead.is_empty(), "{script}");
    }
    // Not fused: a result read twice, a reduction of the result, an elementwise kernel that
    // reads what a kernel between computes.
    for script in [
        "input x: bf16[n=64, i=64] = randn(seed=0)\ninput w: bf16[o=64, i] = randn(seed=1)\n\
         h = einsum(x, w, 'n i, o i -> n o')\ny = gelu(h)\nz = reduce(h, 'n o -> o', 'max')\n\
         output y\noutput z\n",
        "input x: bf16[n=64, i=64] = randn(seed=0)\ninput w: bf16[o=64, i] = randn(seed=1)\n\
         y = reduce(einsum(x, w, 'n i, o i -> n o'), 'n o -> n', 'sum')\noutput y\n",
    ] {
        let (calls, _) = tensor_cores(script);
        assert!(
            !calls.iter().any(|c| c.1.contains("fused")),
            "{script}: {calls:?}"
        );
    }
}

#[test]
fn sparse_rows_are_binned_at_run_time_onto_blocks_and_warps_unless_a_wide_dense_axis_follows() {
    use tdsl_cuda::{Split, Step};
    let steps = |script: &str| {
        let plan = plan(script).expect("plans");
        let (_, steps) = tdsl_cuda::map_program(&plan.loops);
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Launch(l) if !l.grid.is_empty() => Some(match (l.split, l.rows) {
                    (Split::Block, Some(r)) if r.long => "long rows, a block each",
                    (Split::Warp, Some(r)) if !r.long => "short rows, a warp each",
                    (Split::Thread, None) => "a thread per element",
                    (Split::Thread, Some(r)) if r.inner == 64 => "rows, a thread per element",
                    _ => "something else",
                }),
                Step::Table { .. } => Some("bin"),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    // CSR times a vector: the host bins the rows by their stored entries, then long rows run on
    // a block each and the rest on a warp each, its lanes over the row's entries. Lengths are
    // data, so both launches are always there (an empty list is not launched on the device).
    for (rows, cols) in [(64, 300), (8, 40000)] {
        assert_eq!(
            steps(&format!(
                "input w: f32[{rows}, {cols}] @ csr = randn(seed=1, density=0.05)\n\
                 input x: f32[{cols}] = randn(seed=2)\n\
                 y = einsum(w, x, 'o i, i -> o')\noutput y\n"
            )),
            ["bin", "long rows, a block each", "short rows, a warp each"]
        );
    }
    // CSR times 7 columns (fewer than a warp's lanes): a row per grid iteration, as for a
    // vector, the 7 columns unrolled into the row's one walk of its entries
    // (`tdsl_cuda::map::columns_into_rows`).
    assert_eq!(
        steps(
            "input w: f32[64, 300] @ csr = randn(seed=1, density=0.2)\ninput x: f32[300, 7] = randn(seed=2)\n\
             y = einsum(w, x, 'o i, i c -> o c')\noutput y\n"
        ),
        ["bin", "long rows, a block each", "short rows, a warp each"]
    );
    // CSR times 64 columns: consecutive threads share a row and read the columns contiguously;
    // the rows are listed longest first, each expanded into its 64 columns.
    assert_eq!(
        steps(
            "input w: f32[64, 300] @ csr = randn(seed=1, density=0.2)\ninput x: f32[300, 64] = randn(seed=2)\n\
             y = einsum(w, x, 'o i, i c -> o c')\noutput y\n"
        ),
        ["bin", "rows, a thread per element"]
    );
    // Too small an operand for a long row: no list.
    assert_eq!(
        steps(
            "input w: f32[8, 100] @ csr = randn(seed=1, density=0.2)\ninput x: f32[100, 64] = randn(seed=2)\n\
             y = einsum(w, x, 'o i, i c -> o c')\noutput y\n"
        ),
        ["a thread per element"]
    );
}

/// Numbers drawn from `seed` (xorshift): each call gives one below its argument (0 for 0).
pub(crate) fn draws(seed: u64) -> impl FnMut(usize) -> usize {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move |m: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % m.max(1) as u64) as usize
    }
}

/// A CSR matrix times a vector or `n` columns, its rows of lengths drawn from four classes
/// (empty, under a warp, under [`tdsl_cuda::map::BLOCK_ROW`], at or over it) so that the run-time
/// bins of sparse-row launches ([`tdsl_cuda::Bins`]) get both lists, unsorted lengths and empty
/// lists. Fewer columns than a warp's lanes unroll into the row's walk (one accumulator each,
/// `tdsl_cuda::map::columns_into_rows`); more take a thread per element. Returns the script and
/// its inputs (the matrix given dense, stored as CSR when bound).
/// Values are multiples of 1/8 within ±2, so every sum is exact in f32 in any order.
pub(crate) fn csr_rows_case(
    rows: usize,
    cols: usize,
    classes: &[usize],
    n: usize,
    f16: bool,
    seed: u64,
) -> (String, Vec<tdsl::Tensor>) {
    use tdsl::DType;
    let mut next = draws(seed);
    let block = tdsl_cuda::map::BLOCK_ROW as usize;
    let mut w = vec![0.0f64; rows * cols];
    for r in 0..rows {
        let len = match classes[r % classes.len()] % 4 {
            0 => 0,
            1 => 1 + next(31),
            2 => 32 + next(block - 32),
            _ => block + next(cols + 1 - block),
        }
        .min(cols);
        // `len` distinct columns: a random start, then a stride coprime to nothing in
        // particular; collisions are skipped, so a row may store a few fewer.
        let start = next(cols);
        for j in 0..len {
            let c = (start + j * 7) % cols;
            w[r * cols + c] = (next(33) as f64 - 16.0) / 8.0;
        }
    }
    let x: Vec<f64> = (0..cols * n)
        .map(|_| (next(33) as f64 - 16.0) / 8.0)
        .collect();
    let wt = if f16 { "f16" } else { "f32" };
    let (x_shape, x_ty, spec) = match n {
        1 => (vec![cols], "f32[i]".to_string(), "o i, i -> o"),
        _ => (vec![cols, n], format!("f32[i, n={n}]"), "o i, i n -> o n"),
    };
    let script = format!(
        "input w: {wt}[o={rows}, i={cols}] @ csr\ninput x: {x_ty}\n\
         y = einsum(w, x, \"{spec}\")\nz = relu(y) * 2\noutput y\noutput z\n"
    );
    let dt = if f16 { DType::F16 } else { DType::F32 };
    let inputs = vec![
        tdsl::Tensor::from_f64(dt, vec![rows, cols], &w),
        tdsl::Tensor::from_f64(DType::F32, x_shape, &x),
    ];
    (script, inputs)
}

proptest::proptest! {
    #![proptest_config(crate::tensor_emu::cases_from("TDSL_EMU_CASES", 6))]

    /// CSR rows of every length class, binned at run time onto blocks and warps, run by the
    /// host emulation exactly like the interpreter. `TDSL_EMU_CASES` sets the number of cases.
    #[test]
    fn emulated_csr_rows_of_any_length_agree_with_the_interpreter(
        rows in 1usize..24, cols in 1024usize..2600,
        classes in proptest::collection::vec(0usize..4, 1..6),
        n in proptest::sample::select(vec![1usize, 2, 3, 7, 31, 40]),
        f16 in proptest::prelude::any::<bool>(), seed in 0u64..1000,
    ) {
        if crate::diff::cxx().is_none() {
            return Ok(());
        }
        let (text, inputs) = csr_rows_case(rows, cols, &classes, n, f16, seed);
        let p = tdsl::compile(&text, &Default::default()).expect("compiles");
        let shapes = crate::diff::output_shapes(&p);
        let want = tdsl::interp::run(&p, &inputs);
        let got = crate::diff::cuda_emulated(&p, &inputs, &shapes)
            .map_err(proptest::test_runner::TestCaseError::fail)?;
        crate::diff::agree(&got, &want, 1e-6, "on the CUDA emulation")
            .map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{text}: {e}")))?;
    }
}

/// The reductions the row and column properties draw.
fn reduce_ops() -> impl proptest::strategy::Strategy<Value = &'static str> {
    proptest::sample::select(vec!["sum", "mean", "max", "min", "prod"])
}

/// The floating dtypes the row and column properties draw.
fn float_dtypes() -> impl proptest::strategy::Strategy<Value = tdsl::DType> {
    use tdsl::DType::*;
    proptest::sample::select(vec![F32, F64, F16, BF16])
}

/// `text` on `inputs` by the host emulation agrees with the interpreter: within a few units in
/// the last place of the storage type `dtype` (the softmax's `exp` is the host's).
fn emulation_agrees(
    text: &str,
    inputs: &[tdsl::Tensor],
    dtype: tdsl::DType,
) -> Result<(), proptest::test_runner::TestCaseError> {
    let p = tdsl::compile(text, &Default::default()).expect("compiles");
    let shapes = crate::diff::output_shapes(&p);
    let want = tdsl::interp::run(&p, inputs);
    let got = crate::diff::cuda_emulated(&p, inputs, &shapes)
        .map_err(proptest::test_runner::TestCaseError::fail)?;
    let tol = match dtype {
        tdsl::DType::F16 => 2e-3,
        tdsl::DType::BF16 => 1.6e-2,
        _ => 1e-5,
    };
    crate::diff::agree(&got, &want, tol, "on the CUDA emulation")
        .map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{text}: {e}")))?;
    Ok(())
}

/// Rows reduced by a warp or a block on the GPU, their lengths drawn from three classes (under a
/// warp, under [`tdsl_cuda::map::BLOCK_ROW`], at or over it): `op` over each row, its result
/// subtracted from the row again (a second pass over it after the combine), and the row's
/// softmax. Returns the script and its input. Values are multiples of 1/8 within ±2 (for
/// `prod`, ±1 with a few 2s and halves), so sums, products, maxima and minima are exact in f32
/// in any order, and differ from the interpreter's only by the storage type's rounding.
pub(crate) fn rows_case(
    rows: usize,
    class: usize,
    op: &str,
    dtype: tdsl::DType,
    seed: u64,
) -> (String, Vec<tdsl::Tensor>) {
    let mut next = draws(seed);
    let block = tdsl_cuda::map::BLOCK_ROW as usize;
    let len = match class % 3 {
        0 => 1 + next(31),
        1 => 32 + next(block - 32),
        _ => block + next(block + 600),
    };
    let x: Vec<f64> = (0..rows * len)
        .map(|i| match op {
            "prod" => match (i * 7 + next(5)) % 97 {
                0 => 2.0,
                1 => 0.5,
                k if k % 2 == 0 => -1.0,
                _ => 1.0,
            },
            _ => (next(33) as f64 - 16.0) / 8.0,
        })
        .collect();
    let script = format!(
        "input x: {dtype}[r={rows}, k={len}]\n\
         s = reduce(x, \"r k -> r\", \"{op}\")\n\
         d = x - reduce(x, \"r k -> r 1\", \"{op}\")\n\
         e = exp(x - reduce(x, \"r k -> r 1\", \"max\"))\n\
         p = e / reduce(e, \"r k -> r 1\", \"sum\")\n\
         output s, d, p\n"
    );
    (
        script,
        vec![tdsl::Tensor::from_f64(dtype, vec![rows, len], &x)],
    )
}

proptest::proptest! {
    #![proptest_config(crate::tensor_emu::cases_from("TDSL_EMU_CASES", 6))]

    /// Row reductions of every length class on warps and blocks of the emulation's 32-lane warps
    /// and 256-thread blocks (the lane splits, the shuffle butterflies and the block's combine
    /// through shared memory) agree with the interpreter: exactly for the reductions, to the
    /// host's `exp` for the softmax and to the storage type's rounding.
    #[test]
    fn emulated_row_reductions_of_any_length_agree_with_the_interpreter(
        rows in 1usize..12, class in 0usize..3,
        op in reduce_ops(), dtype in float_dtypes(), seed in 0u64..1000,
    ) {
        if crate::diff::cxx().is_none() {
            return Ok(());
        }
        let (text, inputs) = rows_case(rows, class, op, dtype, seed);
        emulation_agrees(&text, &inputs, dtype)?;
    }
}

/// Reductions over the outer axis of `x[r, c]` (the rows of the result are columns of `x`), which
/// a GPU block takes 32 columns at a time, its 16 warps splitting the `r` steps
/// ([`tdsl_cuda::Split::Cols`]): `op` over `r`, its result subtracted from `x` again (a reduction
/// the planner gives its own buffer, accumulated in registers on the device), the softmax over
/// `r`, and a vector times `x` (`x @ W` at one row, `W[in, out]`). `c` from 32 up, rarely a
/// multiple of 32, so a block's last columns often lie past the grid. Values as [`rows_case`]'s.
pub(crate) fn columns_case(
    rows: usize,
    cols: usize,
    op: &str,
    dtype: tdsl::DType,
    seed: u64,
) -> (String, Vec<tdsl::Tensor>) {
    let mut next = draws(seed);
    let mut value = |i: usize| match op {
        "prod" => match (i * 7 + next(5)) % 97 {
            0 => 2.0,
            1 => 0.5,
            k if k % 2 == 0 => -1.0,
            _ => 1.0,
        },
        _ => (next(33) as f64 - 16.0) / 8.0,
    };
    let x: Vec<f64> = (0..rows * cols).map(&mut value).collect();
    let v: Vec<f64> = (0..rows).map(&mut value).collect();
    let script = format!(
        "input x: {dtype}[r={rows}, c={cols}]\n\
         input v: {dtype}[r]\n\
         s = reduce(x, \"r c -> c\", \"{op}\")\n\
         d = x - reduce(x, \"r c -> 1 c\", \"{op}\")\n\
         e = exp(x - reduce(x, \"r c -> 1 c\", \"max\"))\n\
         p = e / reduce(e, \"r c -> 1 c\", \"sum\")\n\
         y = einsum(v, x, \"r, r c -> c\")\n\
         output s, d, p, y\n"
    );
    (
        script,
        vec![
            tdsl::Tensor::from_f64(dtype, vec![rows, cols], &x),
            tdsl::Tensor::from_f64(dtype, vec![rows], &v),
        ],
    )
}

proptest::proptest! {
    #![proptest_config(crate::tensor_emu::cases_from("TDSL_EMU_CASES", 6))]

    /// Reductions over an outer axis on the emulation's column blocks (32 columns per block,
    /// the last ones often past the grid, 16 warps splitting the steps, the parts combined in
    /// shared memory) agree with the interpreter, as [`rows_case`]'s rows do.
    #[test]
    fn emulated_column_reductions_of_any_width_agree_with_the_interpreter(
        rows in 32usize..300, cols in 32usize..140,
        op in reduce_ops(), dtype in float_dtypes(), seed in 0u64..1000,
    ) {
        if crate::diff::cxx().is_none() {
            return Ok(());
        }
        let (text, inputs) = columns_case(rows, cols, op, dtype, seed);
        emulation_agrees(&text, &inputs, dtype)?;
    }
}

/// The launches that take column blocks ([`tdsl_cuda::Split::Cols`]): `x @ W` with `W[in, out]`
/// at one row, an f16 sum over the batch axis (a fused reduction), an f32 one (the CPU plan's
/// parts of whole rows, each summed in registers), a softmax over a middle axis; and the ones
/// that keep a warp or a block per row, whose operands are contiguous along it.
#[test]
fn column_blocks_take_rows_contiguous_across_outputs() {
    let cols = |script: &str| {
        let plan = plan(script).expect("plans");
        let unit = tdsl_cuda::cuda_unit_for(&plan.loops, 90);
        unit.matches("32 per block, its 16 warps").count()
    };
    let across = [
        "input x: bf16[n=1, i=4096] = randn(seed=0)\ninput w: bf16[i, o=4096] = randn(seed=1)\ny = einsum(x, w, \"n i, i o -> n o\")\noutput y\n",
        "input x: f16[b=4096, c=1024] = randn(seed=0)\ny = reduce(x, \"b c -> c\", \"sum\")\noutput y\n",
        "input x: f32[b=4096, c=1024] = randn(seed=0)\ny = x - reduce(x, \"b c -> 1 c\", \"mean\")\noutput y\n",
        "input x: f32[b=4, s=512, d=256] = randn(seed=0)\ne = exp(x - reduce(x, \"b s d -> b 1 d\", \"max\"))\ny = e / reduce(e, \"b s d -> b 1 d\", \"sum\")\noutput y\n",
    ];
    for script in across {
        assert!(cols(script) >= 1, "{script}");
    }
    let along = [
        "input x: bf16[n=1, i=4096] = randn(seed=0)\ninput w: bf16[o=4096, i] = randn(seed=1)\ny = einsum(x, w, \"n i, o i -> n o\")\noutput y\n",
        "input x: f32[b=512, d=4096] = randn(seed=0)\ne = exp(x - reduce(x, \"b d -> b 1\", \"max\"))\ny = e / reduce(e, \"b d -> b 1\", \"sum\")\noutput y\n",
    ];
    for script in along {
        assert_eq!(cols(script), 0, "{script}");
    }
}

/// The grouped BSR walks read a group table whose words hold a block column in 16 bits: a
/// product with 2^16 block columns or more walks one block row per thread block instead, with
/// no table; one with fewer takes the walk it is asked for.
#[test]
fn bsr_walks_over_groups_need_block_columns_that_fit_the_group_table() {
    use tdsl_cuda::tensor::{BsrWalk, TensorCores, Variants};
    let unit = |cols: u64| {
        let script = format!(
            "input x: bf16[n=64, i={cols}] = randn(seed=0)\n\
             input w: bf16[o=256, i] @ bsr(16, 16) = randn(seed=1, density=0.1)\n\
             y = einsum(x, w, 'n i, o i -> n o')\noutput y\n"
        );
        let plan = plan(&script).expect("plans");
        let v = Variants {
            bsr: Some(BsrWalk::Union),
            ..Variants::default()
        };
        tdsl_cuda::cuda_unit_with(&plan.loops, TensorCores::Wgmma, v)
    };
    let fits = unit(16 * 4096);
    assert!(fits.contains("tdsl_tc_bsr_union<"), "{fits}");
    assert!(fits.contains("// the host lists the union"), "{fits}");
    let wide = unit(16 << 16);
    assert!(wide.contains("tdsl_tc_bsr<"), "{wide}");
    assert!(!wide.contains("tdsl_tc_bsr_union<"), "{wide}");
    assert!(!wide.contains("// the host lists the union"), "{wide}");
}
