#!/usr/bin/env python3
"""Sparse benchmarks side by side: tdsl's sparse kernels against dense numpy and scipy.sparse.

For every workload bench/sparse/NAME.tdsl (a 4096×4096 weight `w` in some format times a dense
`x` of 1, 8 or 256 columns) this script, in one process on one machine:

  * runs `tdsl bench bench/sparse/NAME.tdsl --json --runs R --threads 2` (the sparse product on
    compressed storage; compressing the input happens at bind time and is not timed) and
    `tdsl cost --json` for the predicted times and the verdict;
  * times the anchors on the same shapes and density: dense `W @ X` in numpy (OpenBLAS, 2
    threads) and scipy.sparse's `bsr_matrix` / `csr_matrix` product (single-threaded, as scipy
    is), with the same block size, density and dtype (f16 weights: scipy gets f32, since it has
    no f16 kernels);
  * checks each target of the sparse issue and prints a table; with --write it replaces the
    part of bench/RESULTS.md between the SPARSE markers (added at the end if missing).

Usage: python3 bench/sparse.py [--tdsl PATH] [--runs N] [--only SUBSTR] [--write]
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPARSE_DIR = os.path.join(REPO, "bench", "sparse")
RESULTS_MD = os.path.join(REPO, "bench", "RESULTS.md")
BEGIN = "<!-- BEGIN SPARSE by bench/sparse.py: rewritten by `python3 bench/sparse.py --write` -->"
END = "<!-- END SPARSE -->"

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "2"
import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.sparse as sp  # noqa: E402

N = 4096


def wait_quiet(max_wait: float = 60.0) -> float:
    """Waits until the 1-minute load average drops under 0.5 (or max_wait passes)."""
    t0 = time.time()
    while time.time() - t0 < max_wait:
        load = os.getloadavg()[0]
        if load < 0.5:
            return load
        time.sleep(2)
    return os.getloadavg()[0]


def median_ms(fn, runs: int, min_time: float = 0.5) -> float:
    fn()
    times = []
    t_start = time.perf_counter()
    while len(times) < runs or time.perf_counter() - t_start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        if len(times) > 200:
            break
    return statistics.median(times)


def parse(name: str):
    """(kind, block, density, n, dtype) from a workload name."""
    n = 1 if name.endswith("spmv") or name.endswith("_n1") else (8 if name.endswith("_n8") else 256)
    m = re.match(r"(bsr32f16|bsr32|bsr16|csr|twofour|dense)", name)
    kind = m.group(1) if m else "dense"
    d = re.search(r"_([0-9.]+)pct", name)
    density = float(d.group(1)) / 100 if d else (0.5 if kind == "twofour" else 1.0)
    block = 16 if kind == "bsr16" else 32
    dtype = np.float16 if kind == "bsr32f16" else np.float32
    return kind, block, density, n, dtype


def build_weight(kind: str, block: int, density: float, dtype, rng):
    """A dense weight with the workload's sparsity pattern (random blocks / entries / 2:4)."""
    w = rng.standard_normal((N, N), dtype=np.float32)
    if kind.startswith("bsr"):
        nb = (N // block) ** 2
        keep = np.zeros(nb, dtype=bool)
        keep[rng.choice(nb, int(round(density * nb)), replace=False)] = True
        mask = keep.reshape(N // block, N // block).repeat(block, 0).repeat(block, 1)
        w *= mask
    elif kind == "csr":
        w *= rng.random((N, N)) < density
    elif kind == "twofour":
        g = np.abs(w).reshape(N, N // 4, 4)
        order = np.argsort(-g, axis=2, kind="stable")
        drop = np.zeros_like(g, dtype=bool)
        np.put_along_axis(drop, order[:, :, 2:], True, axis=2)
        w = np.where(drop.reshape(N, N), 0, w).astype(np.float32)
    return w.astype(dtype)


def tdsl_bench(tdsl: str, path: str, runs: int) -> dict:
    out = subprocess.run([tdsl, "bench", path, "--json", "--runs", str(runs), "--threads", "2"],
                         capture_output=True, text=True, timeout=900, cwd=REPO)
    if out.returncode != 0:
        raise RuntimeError(f"tdsl bench {path} failed: {out.stderr.strip()[:500]}")
    return json.loads(out.stdout)


def tdsl_predicted(tdsl: str, path: str) -> dict:
    """The cost model's prediction for the workload's product (`tdsl cost --json`)."""
    out = subprocess.run([tdsl, "cost", path, "--json"], capture_output=True, text=True,
                         timeout=600, cwd=REPO)
    if out.returncode != 0:
        return {}
    try:
        doc = json.loads(out.stdout)
    except json.JSONDecodeError:
        return {}
    for st in doc.get("statements", []):
        for op in st.get("sparse_ops", []):
            return {k: op.get(k) for k in ("sparse_seconds", "dense_seconds", "verdict",
                                           "break_even_density", "density")}
    return {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tdsl", default=os.path.join(REPO, "target", "release", "tdsl"))
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--only", default="")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--from-json", action="store_true",
                    help="re-render bench/SPARSE.json (the last run) without measuring")
    args = ap.parse_args()
    if args.from_json:
        rows = json.load(open(os.path.join(REPO, "bench", "SPARSE.json")))
        table = render(rows)
        print(table)
        if args.write:
            write(table)
        return 0
    rng = np.random.default_rng(0)
    names = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(SPARSE_DIR, "*.tdsl")))
    names = [n for n in names if args.only in n]
    x_by_n = {n: rng.standard_normal((N, n), dtype=np.float32) for n in (1, 8, 256)}
    dense_ms = {}
    rows = []
    for name in sorted(names, key=lambda n: (not n.startswith("dense"), n)):
        kind, block, density, n, dtype = parse(name)
        path = os.path.join(SPARSE_DIR, name + ".tdsl")
        x = x_by_n[n]
        w = build_weight(kind, block, density, dtype, rng)
        load = wait_quiet()
        wf = w.astype(np.float32)
        xv = x[:, 0] if n == 1 else x
        if kind == "dense":
            dense_ms[n] = median_ms(lambda: wf @ xv, args.runs)
        scipy_ms = None
        if kind.startswith("bsr"):
            s = sp.bsr_matrix(wf, blocksize=(block, block))
            scipy_ms = median_ms(lambda: s @ xv, max(5, args.runs // 3))
        elif kind in ("csr", "twofour"):
            s = sp.csr_matrix(wf)
            scipy_ms = median_ms(lambda: s @ xv, max(5, args.runs // 3))
        wait_quiet()
        res = tdsl_bench(args.tdsl, path, args.runs)
        pred = tdsl_predicted(args.tdsl, path)
        rows.append(dict(name=name, kind=kind, density=density, n=n, block=block,
                         dtype="f16" if dtype == np.float16 else "f32",
                         tdsl_ms=res["run_ms_median"], scipy_ms=scipy_ms,
                         dense_ms=dense_ms.get(n), load=load, gflops=res.get("gflops"),
                         gbps=res.get("gbps"), predicted=pred))
        r = rows[-1]
        print(f"{name:24s} tdsl {r['tdsl_ms']:9.3f} ms  dense {r['dense_ms'] or float('nan'):9.3f} ms  "
              f"scipy {scipy_ms or float('nan'):9.3f} ms  {pred}", flush=True)
    with open(os.path.join(REPO, "bench", "SPARSE.json"), "w") as f:
        json.dump(rows, f, indent=1)
    table = render(rows)
    print(table)
    if args.write:
        write(table)
    return 0


def target(r) -> tuple[str, str]:
    """(target text, met?) for one row."""
    d, kind, n = r["density"], r["kind"], r["n"]
    t, dn, sc = r["tdsl_ms"], r["dense_ms"], r["scipy_ms"]
    if kind.startswith("bsr") and dn:
        lim = 1.25 * d * dn
        return f"≤ {lim:.3g} ms (1.25·d·dense)", "met" if t <= lim else "missed"
    if kind == "twofour" and dn:
        want = 1.5 if n <= 8 else 1.2
        return f"≥ {want}× dense", "met" if dn / t >= want else "missed"
    if kind == "csr" and sc:
        return "≥ 3× scipy", "met" if sc / t >= 3 else "missed"
    return "", ""


def render(rows) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## Sparse kernels (issue: sparse storage and kernels)",
        "",
        f"Generated by `python3 bench/sparse.py --write` on {now}; numpy {np.__version__}, "
        f"scipy {scipy.__version__}. W is 4096×4096, X is 4096×n; tdsl and numpy on 2 threads, "
        "scipy single-threaded (it has no threaded sparse products). tdsl figures are the median "
        "`run_ms_median` of `tdsl bench --threads 2` (the spmm call on compressed storage; "
        "compression happens once at bind time). Dense is numpy's `W @ X` (OpenBLAS) in the same "
        "run. Ratios above 1 mean tdsl is faster.",
        "",
        "| workload | format | density | n | tdsl ms | dense ms | dense/tdsl | scipy ms | scipy/tdsl | target | |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t = r["tdsl_ms"]
        dn = r["dense_ms"]
        sc = r["scipy_ms"]
        fmt = {"bsr32": "bsr 32×32", "bsr16": "bsr 16×16", "bsr32f16": "bsr 32×32 f16",
               "csr": "csr", "twofour": "2:4", "dense": "dense"}[r["kind"]]
        tgt, met = target(r)
        lines.append(
            f"| {r['name']} | {fmt} | {r['density']:g} | {r['n']} | {t:.3f} | "
            f"{dn:.3f} | {dn / t:.2f} | " if dn else
            f"| {r['name']} | {fmt} | {r['density']:g} | {r['n']} | {t:.3f} | – | – | ")
        lines[-1] += (f"{sc:.3f} | {sc / t:.2f} | " if sc else "– | – | ") + f"{tgt} | {met} |"
    preds = [r for r in rows if r["predicted"]]
    if preds:
        lines += [
            "",
            "Cost model (`tdsl cost --json`, this machine's measured ceilings) next to the "
            "measured times. The verdict is right when it names the faster of tdsl's sparse "
            "kernel and the measured dense product.",
            "",
            "| workload | measured sparse ms | predicted sparse ms | measured/predicted | "
            "measured dense ms | predicted dense ms | verdict | right? | break-even density |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in preds:
            p = r["predicted"]
            ps = (p.get("sparse_seconds") or 0) * 1e3
            pd = (p.get("dense_seconds") or 0) * 1e3
            dn = r["dense_ms"]
            right = "–"
            if dn and p.get("verdict") in ("sparse", "dense"):
                faster = "sparse" if r["tdsl_ms"] < dn else "dense"
                right = "yes" if faster == p["verdict"] else "**no**"
            be = p.get("break_even_density")
            lines.append(
                f"| {r['name']} | {r['tdsl_ms']:.3f} | {ps:.3f} | "
                f"{r['tdsl_ms'] / ps if ps else float('nan'):.2f} | "
                f"{dn if dn else float('nan'):.3f} | {pd:.3f} | {p.get('verdict')} | {right} | "
                f"{be if isinstance(be, str) else format(be or 0, '.3g')} |")
    return "\n".join(lines) + "\n"


def write(table: str) -> None:
    text = open(RESULTS_MD).read() if os.path.exists(RESULTS_MD) else ""
    block = f"{BEGIN}\n\n{table}\n{END}"
    if BEGIN in text and END in text:
        a, b = text.index(BEGIN), text.index(END) + len(END)
        text = text[:a] + block + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    with open(RESULTS_MD, "w") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
