#!/usr/bin/env python3
"""GPU side-by-side: `tdsl bench --device cuda` against torch on the same device, one process.

For every bench/gpu/NAME.tdsl: the tdsl figure is `tdsl bench --device cuda --json` (the
device's time from the first launch's start to the last one's end, by CUDA events, so the gaps
between launches count as they do for torch; median of --runs; copies reported apart), the anchor is the
same computation written in torch (eager, and torch.compile when it works), timed with CUDA
events, median of --runs after warm-up. Prints a markdown table with the device, driver and
date for bench/RESULTS.md.

Usage: python3 bench/gpu/run.py [--tdsl PATH] [--runs N]
"""

import argparse, datetime, json, os, re, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))


def torch_cases(torch):
    F = torch.nn.functional
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)

    def randn(*s, dtype=torch.float32):
        return torch.randn(*s, generator=g, device=dev, dtype=dtype)

    x = randn(8192, 4096)
    w, b = randn(4096), randn(4096)
    xb, bb = randn(16384, 4096, dtype=torch.bfloat16), randn(4096, dtype=torch.bfloat16)
    xt = randn(8192, 8192)
    xc = randn(16384, 4096)
    img = randn(128, 64, 56, 56)
    proj = randn(32, 1024, 2048)
    # CSR 8192² at density 0.02 (rows of ~164 entries) times a vector (cuSPARSE).
    keep = torch.rand(8192, 8192, generator=g, device=dev) < 0.02
    csr = torch.where(keep, randn(8192, 8192), torch.zeros((), device=dev)).to_sparse_csr()
    vec = randn(8192)
    return {
        "spmv_csr": lambda: csr @ vec,
        "transpose": lambda: xt.t().contiguous(),
        "permute_nhwc": lambda: img.permute(0, 2, 3, 1).contiguous(),
        "split_heads": lambda: proj.view(32, 16, 64, 2048).transpose(2, 3).contiguous(),
        "layernorm": lambda: F.layer_norm(x, (4096,), w, b, eps=1e-5),
        "softmax": lambda: torch.softmax(x, dim=-1),
        "batch_center": lambda: xc - xc.mean(0, keepdim=True),
        "scale_bias_gelu": lambda: F.gelu(xb * 0.5 + bb, approximate="tanh"),
    }


def gemm_cases(torch):
    """Tensor-core products: name -> (FLOP of the dense product, {anchor name: fn})."""
    F = torch.nn.functional
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    out = {}
    w = torch.randn(8192, 8192, generator=g, device=dev, dtype=torch.bfloat16)
    # 2:4 along `in`: keep the two largest magnitudes of every group of 4.
    groups = w.view(-1, 4)
    keep = groups.abs().topk(2, dim=1).indices
    w24 = torch.zeros_like(groups).scatter_(1, keep, groups.gather(1, keep)).view(8192, 8192)
    try:
        from torch.sparse import to_sparse_semi_structured
        w24s = to_sparse_semi_structured(w24)
    except Exception as e:  # noqa: BLE001
        w24s = None
        print(f"(no semi-structured sparse anchor: {e})", file=sys.stderr)
    for rows in (8192, 256, 16, 1):
        x = torch.randn(rows, 8192, generator=g, device=dev, dtype=torch.bfloat16)
        flop = 2 * rows * 8192 * 8192
        suffix = "" if rows == 8192 else f"_{rows}"
        out[f"gemm_bf16{suffix}"] = (flop, {"cuBLAS": lambda x=x: F.linear(x, w)})
        anchors = {"cuBLAS dense": lambda x=x: F.linear(x, w24)}
        if w24s is not None:
            anchors["cuSPARSELt"] = lambda x=x: F.linear(x, w24s)
        out[f"sp24_bf16{suffix}"] = (flop, anchors)
    # x @ W with W stored [in, out] (cuBLAS takes either layout).
    xk = torch.randn(8192, 8192, generator=g, device=dev, dtype=torch.bfloat16)
    out["gemm_bf16_kn"] = (2 * 8192 ** 3, {"cuBLAS": lambda: torch.matmul(xk, w)})
    x1 = torch.randn(1, 8192, generator=g, device=dev, dtype=torch.bfloat16)
    out["gemm_bf16_kn_1"] = (2 * 8192 ** 2, {"cuBLAS": lambda: torch.matmul(x1, w)})
    # f32 exactly (torch's default "highest" precision: no TF32), 4096³.
    xf = torch.randn(4096, 4096, generator=g, device=dev)
    wf = torch.randn(4096, 4096, generator=g, device=dev)
    out["gemm_f32"] = (2 * 4096 ** 3, {"cuBLAS SGEMM": lambda: F.linear(xf, wf)})
    # f64, 4096³: cuBLAS DGEMM (on the f64 tensor cores of sm_80 and later, as tdsl's template).
    xd, wd = xf.double(), wf.double()
    out["gemm_f64"] = (2 * 4096 ** 3, {"cuBLAS DGEMM": lambda: F.linear(xd, wd)})

    # The same with TF32 allowed: tdsl's `--tf32` against torch's allow_tf32 (cuBLAS on TF32
    # tensor cores).
    def tf32_linear():
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return F.linear(xf, wf)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
    out["gemm_f32_tf32"] = (2 * 4096 ** 3, {"cuBLAS TF32": tf32_linear, "cuBLAS SGEMM": lambda: F.linear(xf, wf)})
    # The product with its bias and gelu (fused into tdsl's store; cuBLAS's bias epilogue and a
    # separate gelu kernel in torch).
    x = torch.randn(8192, 8192, generator=g, device=dev, dtype=torch.bfloat16)
    bias = torch.randn(8192, generator=g, device=dev, dtype=torch.bfloat16)
    out["linear_gelu_bf16"] = (2 * 8192 ** 3, {
        "F.gelu(F.linear(x, w, b))": lambda: F.gelu(F.linear(x, w, bias), approximate="tanh"),
        "F.linear(x, w) alone": lambda: F.linear(x, w),
    })
    # Block-sparse 32×32 at densities 0.25 and 0.5: a random block mask of that density (tdsl
    # keeps the largest-norm blocks of its own randn: the same count of stored blocks).
    for d in (25, 50):
        nb = 8192 // 32
        keep = torch.rand(nb, nb, generator=g, device=dev) < d / 100
        mask = keep.repeat_interleave(32, 0).repeat_interleave(32, 1)
        wb = torch.where(mask, w, torch.zeros_like(w))
        try:
            w_bsr = wb.to_sparse_bsr((32, 32))
        except Exception as e:  # noqa: BLE001
            w_bsr = None
            print(f"(no BSR anchor: {e})", file=sys.stderr)
        try:
            from torch.sparse._triton_ops import bsr_dense_mm
        except Exception:  # noqa: BLE001
            bsr_dense_mm = None
        for rows in (8192, 256, 16, 1):
            x = torch.randn(rows, 8192, generator=g, device=dev, dtype=torch.bfloat16)
            flop = 2 * rows * 8192 * 8192
            suffix = "" if rows == 8192 else f"_{rows}"
            anchors = {"cuBLAS dense": lambda x=x: F.linear(x, wb)}
            if w_bsr is not None:
                xt = x.t().contiguous()
                if bsr_dense_mm is not None:
                    anchors["torch BSR (Triton)"] = lambda xt=xt: bsr_dense_mm(w_bsr, xt)
                anchors["torch BSR (w @ x^T)"] = lambda xt=xt: w_bsr @ xt
            out[f"bsr_bf16_d{d}{suffix}"] = (flop, anchors)
    return out


def cost_verdict(tdsl, script):
    """The sparse-or-dense verdict `tdsl cost --device cuda` gives before anything runs (its
    predicted times for the nominal H200), or "" for a dense product."""
    r = subprocess.run([tdsl, "cost", script, "--device", "cuda"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.startswith("y ") and ("sparse," in line or "dense," in line):
            cells = line.split()
            i = next((k for k, c in enumerate(cells) if c in ("sparse,", "dense,")), None)
            if i is not None:
                return (f"sparse {cells[i - 4]} {cells[i - 3]}, dense {cells[i - 2]} {cells[i - 1]}: "
                        + " ".join(cells[i:i + 3]))
    return ""


def time_torch(torch, f, runs):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(runs):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        f()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tdsl", default="target/release/tdsl")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to warm up)")
    ap.add_argument("--only", default="", help="run only the workloads whose name matches this regex")
    ap.add_argument("--no-anchors", action="store_true", help="tdsl only (a variant's rerun)")
    a = ap.parse_args()
    import torch

    cases = torch_cases(torch)
    props = torch.cuda.get_device_properties(0)
    drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    print(f"device: {props.name} ({props.multi_processor_count} SMs), driver {drv}, "
          f"torch {torch.__version__}, {datetime.date.today()}")
    print("| workload | tdsl ms | torch eager ms | torch.compile ms | speedup vs eager (eager / tdsl) | tdsl GB/s | % bandwidth | copies ms |")
    print("|---|---|---|---|---|---|---|---|")
    for name, f in cases.items():
        if not re.search(a.only, name):
            continue
        script = os.path.join(HERE, f"{name}.tdsl")
        r = subprocess.run([a.tdsl, "bench", script, "--device", "cuda", "--json",
                            "--runs", str(a.runs)], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"| {name} | failed: {r.stderr.strip()[:200]} |")
            continue
        j = json.loads(r.stdout)
        eager = time_torch(torch, f, a.runs)
        compiled = float("nan")
        if not a.no_compile:
            try:
                compiled = time_torch(torch, torch.compile(f), a.runs)
            except Exception:  # noqa: BLE001 (inductor may be missing)
                pass
        t = j["run_ms_median"]
        print(f"| {name} | {t:.3f} | {eager:.3f} | {compiled:.3f} | {eager / t:.2f}x | "
              f"{j['gbps']:.0f} | {j['pct_bandwidth']:.0f}% | {j.get('transfer_ms_median') or 0:.1f} |")

    print()
    print("| product (bf16, FLOP of the dense product) | tdsl ms | tdsl TFLOP/s | anchor | anchor ms | anchor TFLOP/s | tdsl speedup | cost model's verdict (before running) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (flop, anchors) in gemm_cases(torch).items():
        if not re.search(a.only, name):
            continue
        if a.no_anchors:
            anchors = {}
        # NAME_tf32: the script NAME.tdsl run with `--tf32`.
        tf32 = name.endswith("_tf32")
        script = os.path.join(HERE, f"{name[:-5] if tf32 else name}.tdsl")
        r = subprocess.run([a.tdsl, "bench", script, "--device", "cuda", "--json",
                            "--runs", str(a.runs)] + (["--tf32"] if tf32 else []),
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"| {name} | failed: {r.stderr.strip()[:300]} |")
            continue
        t = json.loads(r.stdout)["run_ms_median"]
        verdict = cost_verdict(a.tdsl, script)
        if not anchors:
            print(f"| {name} | {t:.3f} | {flop / t / 1e9:.0f} | | | | | {verdict} |")
        for an, f in anchors.items():
            try:
                at = time_torch(torch, f, a.runs)
            except Exception as e:  # noqa: BLE001
                print(f"| {name} | {t:.3f} | {flop / t / 1e9:.0f} | {an} | failed: {str(e)[:120]} | | |")
                continue
            print(f"| {name} | {t:.3f} | {flop / t / 1e9:.0f} | {an} | {at:.3f} | "
                  f"{flop / at / 1e9:.0f} | {at / t:.2f}x | {verdict} |")


if __name__ == "__main__":
    sys.exit(main())
