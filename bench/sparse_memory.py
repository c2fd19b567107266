#!/usr/bin/env python3
"""Peak memory of `tdsl run` on a sparse .npz input: a 1%-dense 20000 x 20000 CSR matrix times a
dense 20000 x 64 matrix (issue: sparse data stays compressed from file to kernel).

    python3 bench/sparse_memory.py [--tdsl target/release/tdsl] [--baseline OTHER_TDSL]

Needs numpy and scipy (tests/python/requirements.txt). Writes the inputs to a temporary
directory, runs each binary once per engine it is asked for, and prints peak RSS (the
maximum resident set size that /usr/bin/time reports) against the budget: 3 x (file size + dense operands + output).
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import scipy.sparse as sp

N, K, DENSITY = 20000, 64, 0.01

SCRIPT = f"""input w: f32[o={N}, i={N}] @ csr
input x: f32[i, b={K}]
y = einsum(w, x, "o i, i b -> o b")
output y
"""


def peak_rss(cmd):
    """Runs `cmd` under /usr/bin/time and returns (exit code, its peak RSS in bytes). (Python's
    own RUSAGE_CHILDREN would count the forked interpreter's pages before `exec`.)"""
    r = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    lines = r.stderr.strip().splitlines()
    if r.returncode != 0:
        sys.stderr.write("\n".join(lines[:-1]) + "\n")
    return r.returncode, int(lines[-1]) * 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tdsl", default="target/release/tdsl")
    ap.add_argument("--backend", default="jit")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d:
        w = sp.random(N, N, density=DENSITY, format="csr", dtype=np.float32, random_state=rng)
        x = rng.standard_normal((N, K), dtype=np.float32)
        sp.save_npz(os.path.join(d, "w.npz"), w, compressed=False)
        np.save(os.path.join(d, "x.npy"), x)
        with open(os.path.join(d, "s.tdsl"), "w") as f:
            f.write(SCRIPT)
        file_bytes = os.path.getsize(os.path.join(d, "w.npz"))
        dense_bytes = x.nbytes + N * K * 4
        budget = 3 * (file_bytes + dense_bytes)
        code, rss = peak_rss([
            args.tdsl, "run", os.path.join(d, "s.tdsl"),
            "--input", f"w={os.path.join(d, 'w.npz')}",
            "--input", f"x={os.path.join(d, 'x.npy')}",
            "--backend", args.backend,
            "--out", os.path.join(d, "out"),
        ])
        print(f"{args.tdsl} --backend {args.backend}: exit {code}, peak RSS {rss / 2**20:.0f} MiB; "
              f"file {file_bytes / 2**20:.1f} MiB, dense operands + output {dense_bytes / 2**20:.1f} MiB, "
              f"budget 3x = {budget / 2**20:.0f} MiB -> {'within' if rss <= budget else 'OVER'} "
              f"({rss / budget:.2f}x of budget); dense w would be {N * N * 4 / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
