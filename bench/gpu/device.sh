#!/usr/bin/env bash
# One device session's checks, in the order GPU time is worth spending (README "GPU"):
# the fragment probe, the GPU tests against the interpreter, the example, then the bench.
# Expects the release binaries in .dev/ (tdsl and the `it` test binary, built on a CPU machine);
# writes logs to $OUT (or /tmp/out).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/device.txt"
# The test binary reads examples/ and tests/corpus/ through the path it was built in.
mkdir -p /work && { [ -e /work/main ] || ln -s "$PWD" /work/main; }
mkdir -p target/release && cp .dev/tdsl target/release/tdsl
if [ "${PROBE:-1}" = 1 ] && command -v nvcc >/dev/null; then
  nvcc -arch=sm_90 -o /tmp/probe_mma bench/gpu/probe_mma.cu && /tmp/probe_mma 2>&1 | tee "$OUT/probe.txt"
fi
timeout "${TEST_S:-150}" env TDSL_REQUIRE_GPU=1 .dev/it gpu diff --test-threads 8 2>&1 | tee "$OUT/tests.txt" | tail -40
.dev/tdsl run --device cuda examples/quickstart.tdsl 2>&1 | tail -5
timeout "${BENCH_S:-120}" python3 bench/gpu/run.py --tdsl .dev/tdsl --runs 10 --no-compile 2>&1 | tee "$OUT/bench.txt"
