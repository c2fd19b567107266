#!/usr/bin/env python3
"""The cost model against the clock: predicted and measured time of every benchmark workload.

For every script under bench/ (the benchmark-shaped kernels, bench/layers/, bench/nonlinear/ and
bench/sparse/), runs `tdsl bench SCRIPT --json --threads 2` and prints the measured median, the
cost model's prediction for this machine (`predicted_ms`: the sum over kernels of
`plan::cost::kernel_secs`) and their ratio, and marks every workload whose prediction is off by
more than 2× (issue 15's bound). With --kernels it prints the kernels of those workloads too.
The sparse-or-dense verdicts are checked against measured times by bench/sparse.py.

Usage: python3 bench/predict.py [--tdsl PATH] [--runs N] [--only SUBSTR] [--kernels]
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import tdsl_bench  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRS = ["bench", "bench/layers", "bench/nonlinear", "bench/sparse"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tdsl", default=os.path.join(REPO, "target", "release", "tdsl"))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--only", default="")
    ap.add_argument("--kernels", action="store_true", help="list the kernels of rows off by >2x")
    args = ap.parse_args()

    scripts = []
    for d in DIRS:
        scripts += sorted(glob.glob(os.path.join(REPO, d, "*.tdsl")))
    scripts = [s for s in scripts if args.only in s]

    rows = []
    machine = ""
    for s in scripts:
        name = os.path.relpath(s, os.path.join(REPO, "bench"))
        r = tdsl_bench(args.tdsl, s, args.runs)
        machine = r["machine"]
        meas, pred = r["run_ms_median"], r.get("predicted_ms")
        ratio = pred / meas if pred and meas > 0 else float("nan")
        rows.append((name, meas, pred, ratio, r))
        print(f"{name}: measured {meas:.3f} ms, predicted {pred:.3f} ms ({ratio:.2f}x)",
              file=sys.stderr)

    print(f"machine: {machine}; 2 threads, median of {args.runs}\n")
    print("| workload | measured ms | predicted ms | predicted / measured | within 2×? |")
    print("|---|---|---|---|---|")
    off = []
    for name, meas, pred, ratio, r in rows:
        ok = 0.5 <= ratio <= 2.0
        if not ok:
            off.append((name, r))
        print(f"| `{name}` | {meas:.3f} | {pred:.3f} | {ratio:.2f} | {'yes' if ok else '**no**'} |")
    inside = len(rows) - len(off)
    print(f"\n{inside} of {len(rows)} workloads predicted within 2× of the measured time.")
    if args.kernels:
        for name, r in off:
            print(f"\n{name}:")
            for k in r["kernels"]:
                print(f"  {k['name']}: measured {k['run_ms_median']:.3f} ms, "
                      f"predicted {k['predicted_ms']:.3f} ms  ({k['origin']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
