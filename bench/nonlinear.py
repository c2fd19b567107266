#!/usr/bin/env python3
"""Elementwise nonlinearities side by side: tdsl against numpy and jax.jit (XLA CPU), one run.

Each row is `bench/nonlinear/NAME.tdsl` (16M f32 values, randn) and the same function in numpy
and in jax.jit. tdsl's figure is the `run_ms_median` of `tdsl bench --json --runs N --threads 2`;
the anchors are the median of N calls after a warm-up, in this process, with 2 threads allowed
(numpy's elementwise loops use one). ratio = best anchor / tdsl (above 1: tdsl is faster).
GB/s counts one f32 read and one f32 write per element, against the bandwidth `tdsl machine`
measured.

    python3 bench/nonlinear.py [--tdsl target/release/tdsl] [--runs 15] [--also OLD_TDSL]

`--also` runs a second tdsl binary on the same scripts (before/after comparisons).
"""

import argparse
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2")

import numpy as np  # noqa: E402

from timing import median_ms, tdsl_bench  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
N = 16_777_216


def rows():
    """(name, numpy function, jax function builder) per script."""

    def sig(v):
        return 1.0 / (1.0 + np.exp(-v))

    def erf_np(v):
        from scipy.special import erf

        return erf(v)

    c = np.float32(np.sqrt(2.0 / np.pi))
    return [
        ("exp", np.exp, lambda jnp, nn: jnp.exp),
        ("log", lambda v: np.log(np.abs(v)), lambda jnp, nn: lambda v: jnp.log(jnp.abs(v))),
        ("tanh", np.tanh, lambda jnp, nn: jnp.tanh),
        ("sigmoid", sig, lambda jnp, nn: nn.sigmoid),
        ("silu", lambda v: v * sig(v), lambda jnp, nn: nn.silu),
        ("sin", np.sin, lambda jnp, nn: jnp.sin),
        (
            "gelu",
            lambda v: 0.5 * v * (1 + np.tanh(c * (v + np.float32(0.044715) * v * v * v))),
            lambda jnp, nn: lambda v: nn.gelu(v, approximate=True),
        ),
        (
            "gelu_erf",
            lambda v: 0.5 * v * (1 + erf_np(v / np.float32(np.sqrt(2.0)))),
            lambda jnp, nn: lambda v: nn.gelu(v, approximate=False),
        ),
        (
            "chain",
            lambda v: v * sig(v) + np.tanh(v) * np.float32(0.5),
            lambda jnp, nn: lambda v: v * nn.sigmoid(v) + jnp.tanh(v) * 0.5,
        ),
    ]


def tdsl_ms(binary, script, runs):
    d = tdsl_bench(binary, script, runs)
    return d["run_ms_median"], d.get("peak_gbps")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tdsl", default=os.path.join(HERE, "..", "target", "release", "tdsl"))
    ap.add_argument("--also", help="a second tdsl binary (before/after)")
    ap.add_argument("--runs", type=int, default=15)
    a = ap.parse_args()
    try:
        import jax
        import jax.numpy as jnp
        import jax.nn as nn
    except ImportError:
        jax = None
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    xj = jnp.asarray(x) if jax else None
    print(f"numpy {np.__version__}, jax {jax.__version__ if jax else 'absent'}; {N} f32 values, 2 threads")
    head = "| function | tdsl ms |"
    if a.also:
        head += " other tdsl ms |"
    head += " numpy ms | jax.jit ms | ratio (best anchor / tdsl) | tdsl GB/s (% of bandwidth) |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name, fnp, fj in rows():
        script = os.path.join(HERE, "nonlinear", f"{name}.tdsl")
        t, peak = tdsl_ms(a.tdsl, script, a.runs)
        other = tdsl_ms(a.also, script, a.runs)[0] if a.also else None
        npm = median_ms(lambda: fnp(x), a.runs)
        jm = None
        if jax:
            jf = jax.jit(fj(jnp, nn))
            jm = median_ms(lambda: jf(xj).block_until_ready(), a.runs)
        best = min(v for v in (npm, jm) if v is not None)
        gbs = 8 * N / (t * 1e-3) / 1e9
        pct = f" ({100 * gbs / peak:.0f}%)" if peak else ""
        line = f"| `{name}` | {t:.2f} |"
        if a.also:
            line += f" {other:.2f} |"
        jtxt = f"{jm:.2f}" if jm is not None else "—"
        line += f" {npm:.2f} | {jtxt} | {best / t:.2f}× | {gbs:.1f}{pct} |"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
