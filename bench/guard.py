"""Speed guard: the current tdsl binary against an earlier one, on workloads that cover every
fast path (GEMM, the vector math, permutes, reductions, softmax, matvec, the layer shapes).

CI runs no benchmarks (its machines are shared and noisy), so a change that keeps every result
right but makes a kernel 4x slower lands unseen: a refactor of `vmath.rs`'s `estrin` did, for a
session (bench/RESULTS.md, 2026-11-27). Run this before stopping whenever code generation,
`vmath.rs`, `sgemm.rs` or a planner pass changed:

    git worktree add /tmp/base HEAD~N && CARGO_TARGET_DIR=target-base cargo build --release \
        --manifest-path /tmp/base/Cargo.toml
    python3 bench/guard.py --base target-base/release/tdsl

Each workload is timed by `tdsl bench` (2 threads), the two binaries alternating `--rounds`
times; each binary's best median counts, so one noisy round does not fail the guard. A workload
is flagged when the new binary takes more than `--factor` (default 1.3) times the old one's
time. Exit status 1 when any is flagged.
"""

import argparse
import os
import sys

from timing import tdsl_bench

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

WORKLOADS = [
    "gemm_1024",
    "attention",
    "softmax",
    "matvec",
    "permute_nhwc",
    "split_heads",
    "reduce_axes",
    "bilinear",
    "nonlinear/exp",
    "nonlinear/log",
    "nonlinear/silu",
    "nonlinear/sin",
    "nonlinear/gelu_erf",
    "nonlinear/chain",
    "layers/layernorm",
    "layers/lm_softmax",
    "layers/mixed_gelu",
    "layers/linear_2to4",
    "layers/decode_f16",
    "layers/vecmat",
]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the earlier tdsl binary")
    ap.add_argument("--tdsl", default=os.path.join(REPO, "target/release/tdsl"))
    ap.add_argument("--runs", type=int, default=10, help="`tdsl bench --runs`")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the two binaries")
    ap.add_argument("--factor", type=float, default=1.3)
    ap.add_argument("--only", help="comma-separated workloads")
    a = ap.parse_args(argv)
    names = a.only.split(",") if a.only else WORKLOADS
    flagged = []
    print("| workload | new ms | base ms | new / base | |")
    print("|---|---:|---:|---:|---|")
    for name in names:
        script = os.path.join(HERE, f"{name}.tdsl")
        best = {"new": float("inf"), "base": float("inf")}
        for _ in range(a.rounds):
            for key, binary in (("new", a.tdsl), ("base", a.base)):
                ms = tdsl_bench(binary, script, a.runs)["run_ms_median"]
                best[key] = min(best[key], ms)
        ratio = best["new"] / best["base"]
        bad = ratio > a.factor
        if bad:
            flagged.append(name)
        mark = f"**slower than {a.factor}x**" if bad else ""
        print(f"| `{name}` | {best['new']:.3f} | {best['base']:.3f} | {ratio:.2f} | {mark} |",
              flush=True)
    if flagged:
        print(f"\n{len(flagged)} workload(s) slower: {', '.join(flagged)}")
        return 1
    print(f"\nno workload slower than {a.factor}x the base")
    return 0


if __name__ == "__main__":
    sys.exit(main())
