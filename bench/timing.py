"""Timing helpers shared by the side-by-side bench scripts (nonlinear.py, layers.py)."""

import json
import subprocess
import time


def median_ms(f, runs, warm_s=0.0):
    """Median of `runs` calls of `f` in milliseconds, after one call and `warm_s` seconds of warm-up."""
    f()
    t_end = time.perf_counter() + warm_s
    while time.perf_counter() < t_end:
        f()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2] * 1e3


def tdsl_bench(binary, script, runs):
    """`tdsl bench SCRIPT --json --runs N --threads 2`, parsed."""
    out = subprocess.run(
        [binary, "bench", script, "--json", "--runs", str(runs), "--threads", "2"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)
