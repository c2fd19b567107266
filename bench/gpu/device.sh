#!/usr/bin/env bash
# One device session's checks, in the order GPU time is worth spending (README "GPU"):
# the fragment probe, the GPU tests against the interpreter, the example, then the bench.
# Expects the release binaries in .dev/ (tdsl and the `it` test binary: bench/gpu/pack.sh builds
# them on a CPU machine);
# writes logs to $OUT (or /tmp/out). Knobs (environment): PROBE=0 skips the probe; TESTS picks
# the test filter (default "gpu diff"), TEST_S and BENCH_S cap their seconds; ONLY restricts the
# bench to workloads matching a regex; .dev/tdsl-base, if present, is benched on BASE_ONLY for
# before/after; VARIANTS lists TDSL_TC_GEMM=BKxSTAGES settings (mma.sync) to bench besides;
# MAIN=0 skips the GPU tests, the example and the main bench (a second call for the variants);
# SP_WGMMA=0 skips the tests and bench of 2:4 on wgmma.sp (TDSL_TC_SP=wgmma, not yet the default);
# BSR_WGMMA=0 skips the bench of BSR on wgmma (TDSL_TC_BSR=wgmma, not yet the default; its GPU
# tests run with wgmma.sp's), BSR_WG_ONLY picks its rows (default every bsr_bf16 row);
# BSR_VARIANTS=0 skips the BSR comparison of one block row per thread block against groups;
# WG_VARIANTS=0 skips the comparisons of dense wgmma tile widths and of split-K on short
# products, of x @ W [in, out] with and without its copy to k-contiguous, and of f64 on the
# f64 tensor cores against the FMA units.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/device.txt"
# The test binary reads examples/ and tests/corpus/ through the path it was built in.
mkdir -p /work && { [ -e /work/main ] || ln -s "$PWD" /work/main; }
mkdir -p target/release && cp .dev/tdsl target/release/tdsl
if [ "${PROBE:-1}" = 1 ] && command -v nvcc >/dev/null; then
  nvcc -arch=sm_90 -o /tmp/probe_mma bench/gpu/probe_mma.cu && /tmp/probe_mma 2>&1 | tee "$OUT/probe.txt"
fi
if [ "${MAIN:-1}" = 1 ]; then
  timeout "${TEST_S:-150}" env TDSL_REQUIRE_GPU=1 .dev/it ${TESTS:-gpu diff} --test-threads 8 2>&1 | tee "$OUT/tests.txt" | tail -40
  .dev/tdsl run --device cuda examples/quickstart.tdsl 2>&1 | tail -5
fi
# 2:4 on wgmma.mma_async.sp, BSR on wgmma and f64 on the f64 tensor cores (mma.sync m8n8k4):
# written from the PTX ISA and checked in emulation only; the GPU tests (every tc_* corpus
# script, the 2:4, BSR and f64 products) must pass with them before they become the default. A
# failure names its script: 2:4, BSR or f64.
if [ "${SP_WGMMA:-1}" = 1 ]; then
  echo "## TDSL_TC_SP=wgmma TDSL_TC_BSR=wgmma TDSL_TC_DMMA=1: GPU tests" | tee "$OUT/tests_wgmma_sp.txt"
  timeout "${SP_TEST_S:-60}" env TDSL_REQUIRE_GPU=1 TDSL_TC_SP=wgmma TDSL_TC_BSR=wgmma TDSL_TC_DMMA=1 .dev/it gpu_ --test-threads 8 2>&1 | tee -a "$OUT/tests_wgmma_sp.txt" | tail -15
fi
if [ "${MAIN:-1}" = 1 ]; then
  timeout "${BENCH_S:-120}" python3 bench/gpu/run.py --tdsl .dev/tdsl --runs 10 --no-compile --only "${ONLY:-.}" 2>&1 | tee "$OUT/bench.txt"
fi
# The previous commit's binary on the same device, for before/after figures (optional).
if [ -x .dev/tdsl-base ]; then
  echo "## baseline: .dev/tdsl-base" | tee -a "$OUT/bench.txt"
  timeout 60 python3 bench/gpu/run.py --tdsl .dev/tdsl-base --runs 10 --no-compile --only "${BASE_ONLY:-layernorm|softmax}" 2>&1 | tee -a "$OUT/bench.txt"
fi
# Tile variants of the dense template (TDSL_TC_GEMM=BKxSTAGES), tdsl only.
for v in ${VARIANTS:-}; do
  echo "## TDSL_TC_GEMM=$v" | tee -a "$OUT/bench.txt"
  TDSL_TC_GEMM=$v timeout 60 python3 bench/gpu/run.py --tdsl .dev/tdsl --runs 10 --no-compile --only '^gemm_bf16' --no-anchors 2>&1 | tee -a "$OUT/bench.txt"
done
# 2:4 on wgmma.sp against the mma.sp figures above (tdsl only; the anchors are in the table above):
# the default tiles (256 rows where they fill the SMs, else 128), then 128-row tiles at 8192 rows.
if [ "${SP_WGMMA:-1}" = 1 ]; then
  echo "## TDSL_TC_SP=wgmma" | tee -a "$OUT/bench.txt"
  TDSL_TC_SP=wgmma timeout 60 python3 bench/gpu/run.py --tdsl .dev/tdsl --runs 10 --no-compile --only '^sp24' --no-anchors 2>&1 | tee -a "$OUT/bench.txt"
  echo "## TDSL_TC_SP=wgmma TDSL_TC_SP_BM=128" | tee -a "$OUT/bench.txt"
  TDSL_TC_SP=wgmma TDSL_TC_SP_BM=128 timeout 40 python3 bench/gpu/run.py --tdsl .dev/tdsl --runs 10 --no-compile --only '^sp24_bf16$' --no-anchors 2>&1 | tee -a "$OUT/bench.txt"
fi
# BSR on wgmma (the stored blocks as wgmma's B, m64nRk16 each) against the default's rows above.
if [ "${BSR_WGMMA:-1}" = 1 ]; then
  echo "## TDSL_TC_BSR=wgmma" | tee -a "$OUT/bench.txt"
  TDSL_TC_BSR=wgmma timeout 60 python3 bench/gpu/run.py --tdsl .dev/tdsl --runs 10 --no-compile --only "${BSR_WG_ONLY:-^bsr_bf16}" --no-anchors 2>&1 | tee -a "$OUT/bench.txt"
fi
# BSR: the default (groups of block rows walking the union of their columns for large launches)
# against one block row per thread block, and groups where the default takes rows (256 rows).
if [ "${BSR_VARIANTS:-1}" = 1 ]; then
  echo "## TDSL_TC_BSR=rows" | tee -a "$OUT/bench.txt"
  TDSL_TC_BSR=rows timeout 60 python3 bench/gpu/run.py --tdsl .dev/tdsl --runs 10 --no-compile --only '^bsr_bf16_d(25|50)$' --no-anchors 2>&1 | tee -a "$OUT/bench.txt"
  echo "## TDSL_TC_BSR=union" | tee -a "$OUT/bench.txt"
  TDSL_TC_BSR=union timeout 60 python3 bench/gpu/run.py --tdsl .dev/tdsl --runs 10 --no-compile --only '^bsr_bf16_d(25|50)_256$' --no-anchors 2>&1 | tee -a "$OUT/bench.txt"
fi
# Dense wgmma tile widths on short products: the default (64 wide when 128-wide tiles would not
# cover the SMs) against the 128-wide tiles the previous commits used.
if [ "${WG_VARIANTS:-1}" = 1 ]; then
  echo "## TDSL_TC_WG_BN=128" | tee -a "$OUT/bench.txt"
  TDSL_TC_WG_BN=128 timeout 40 python3 bench/gpu/run.py --tdsl .dev/tdsl --runs 10 --no-compile --only '^gemm_bf16_(16|256)$' --no-anchors 2>&1 | tee -a "$OUT/bench.txt"
  # Short batches without split-K (the default splits K when the tiles leave SMs idle).
  echo "## TDSL_TC_SPLIT_K=1" | tee -a "$OUT/bench.txt"
  TDSL_TC_SPLIT_K=1 timeout 40 python3 bench/gpu/run.py --tdsl .dev/tdsl --runs 10 --no-compile --only '^(gemm|sp24)_bf16_16$' --no-anchors 2>&1 | tee -a "$OUT/bench.txt"
  # f64 on the f64 tensor cores (opt-in until confirmed), against the default (FMA units).
  echo "## TDSL_TC_DMMA=1" | tee -a "$OUT/bench.txt"
  TDSL_TC_DMMA=1 timeout 40 python3 bench/gpu/run.py --tdsl .dev/tdsl --runs 10 --no-compile --only '^gemm_f64$' --no-anchors 2>&1 | tee -a "$OUT/bench.txt"
  # x @ W [in, out] on mma.sync as stored, against the default (copied k-contiguous, wgmma).
  echo "## TDSL_TC_STAGE_B=0" | tee -a "$OUT/bench.txt"
  TDSL_TC_STAGE_B=0 timeout 40 python3 bench/gpu/run.py --tdsl .dev/tdsl --runs 10 --no-compile --only '^gemm_bf16_kn$' --no-anchors 2>&1 | tee -a "$OUT/bench.txt"
fi
