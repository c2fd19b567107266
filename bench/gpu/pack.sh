#!/usr/bin/env bash
# Builds, on the CPU machine, what a device session carries into `.dev/` (the device has no Rust
# toolchain): the release `tdsl` binary and the `it` integration-test binary, stripped, and,
# with BASE=<commit>, that commit's `tdsl` as `.dev/tdsl-base` for before/after figures.
# Then: run(command='... bash bench/gpu/device.sh', carry=['.dev']) — see device.sh's knobs.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --bin tdsl
it=$(cargo test --release --test it --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "it" and m.get("executable"):
        print(m["executable"])' | tail -1)
mkdir -p .dev
cp target/release/tdsl .dev/tdsl
cp "$it" .dev/it
if [ -n "${BASE:-}" ]; then
  rm -rf /tmp/tdsl-base && git worktree add -f /tmp/tdsl-base "$BASE" >/dev/null
  root=$PWD; (cd /tmp/tdsl-base && CARGO_TARGET_DIR="$root/target-base" cargo build --release --bin tdsl)
  cp target-base/release/tdsl .dev/tdsl-base
  git worktree remove --force /tmp/tdsl-base
fi
strip .dev/* 2>/dev/null || true
ls -la .dev
du -sh .dev
