#!/usr/bin/env python3
"""Model layers as people write them, side by side: tdsl against numpy and jax.jit (XLA CPU).

Each row is `bench/layers/NAME.tdsl` (the rows of issue 15: a mixed-precision projection in
torch layout with bias and gelu, a language-model-head softmax, a 2:4 linear layer in torch
layout, layer norm written with reduce, a low-rank chain, a gated MLP, multi-head attention
split by rearrange; batch norm, whose statistics reduce over the batch axis; masked attention probabilities,
grouped-query attention, a cross-entropy loss, a bf16 SwiGLU block, a bf16 RMS norm, rotary
position embeddings, and a whole LLaMA-style decoder block in bf16). The anchors compute the same layer on inputs of the same shapes and dtypes
(the f16 weight stays f16 and is converted inside the timed call, as the layer does; the 2:4
weight is the pruned dense matrix, since neither numpy nor XLA's CPU compiler has a 2:4 kernel).

tdsl's figure is the `run_ms_median` of `tdsl bench --json --runs N --threads 2` (compile time
excluded); each anchor is the median of N calls after a warm-up, in this process, 2 threads.
ratio = best anchor / tdsl (above 1: tdsl is faster). jax.jit's result is compared with numpy's
before it is timed (a warning when they disagree); tdsl's correctness is the conformance and
property tests' job, not this script's.

    python3 bench/layers.py [--tdsl target/release/tdsl] [--runs 15] [--only NAME,...] [--also OLD_TDSL]
"""

import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")
os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402

from timing import median_ms as _median, tdsl_bench  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def prune_24(w):
    """Keeps the 2 largest magnitudes of every 4 consecutive values along the last axis."""
    g = w.reshape(*w.shape[:-1], w.shape[-1] // 4, 4)
    order = np.argsort(-np.abs(g), axis=-1, kind="stable")
    keep = np.zeros_like(g, dtype=bool)
    np.put_along_axis(keep, order[..., :2], True, axis=-1)
    return np.where(keep, g, 0).reshape(w.shape).astype(w.dtype)


def llama_block(xp, lax, x, g1, wq, wk, wv, wo, cos, sin, g2, w1, w3, w2):
    """bench/layers/llama_block_bf16.tdsl in numpy (`lax` None: f32 throughout) or jax.numpy
    (bf16 activations and weights, f32 statistics and rotary tables, as the script)."""
    f32 = xp.float32
    S = x.shape[0]

    def rsqrt(v):
        return lax.rsqrt(v) if lax is not None else 1 / xp.sqrt(v)

    def rms(t, g):
        tf = t.astype(f32)
        return (tf * rsqrt((tf * tf).mean(-1, keepdims=True) + 1e-6)).astype(t.dtype) * g

    def ein(spec, a, b):
        return xp.einsum(spec, a, b) if lax is not None else np.einsum(spec, a, b, optimize=True)

    h = rms(x, g1)
    q = (h @ wq.T).reshape(S, 16, 64)
    k = (h @ wk.T).reshape(S, 4, 64)
    v = (h @ wv.T).reshape(S, 4, 64)
    c = cos.astype(f32)[:, None, :]
    sn = sin.astype(f32)[:, None, :]

    def rope(t):
        t1, t2 = t[..., :32], t[..., 32:]
        return xp.concatenate([t1 * c - t2 * sn, t2 * c + t1 * sn], axis=-1)

    qg = rope(q).reshape(S, 4, 4, 64).transpose(1, 2, 0, 3)
    sc = ein("kgse,tke->kgst", qg, rope(k)) / 8
    sc = xp.where(xp.arange(S)[None, :] <= xp.arange(S)[:, None], sc, -xp.inf)
    e = xp.exp(sc - sc.max(-1, keepdims=True))
    a = (e / e.sum(-1, keepdims=True)).astype(x.dtype)
    o = ein("kgst,tke->skge", a, v).reshape(S, -1)
    x2 = x + o @ wo.T
    h2 = rms(x2, g2)
    u = h2 @ w1.T
    return x2 + ((u / (1 + xp.exp(-u))) * (h2 @ w3.T)) @ w2.T


def layers(jnp, nn, jax=None):
    """(name, numpy fn, jax fn or None, inputs transform) per script; inputs come in script order."""
    c = np.float32(np.sqrt(2.0 / np.pi))

    def gelu_np(v):
        return 0.5 * v * (1 + np.tanh(c * (v + np.float32(0.044715) * v * v * v)))

    def sig_np(v):
        return 1.0 / (1.0 + np.exp(-v))

    def softmax_np(s):
        e = np.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def ln_np(x, g, b):
        mu = x.mean(-1, keepdims=True)
        xc = x - mu
        return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + np.float32(1e-5)) * g + b

    def bn_np(x, g, b):
        mu = x.mean(0, keepdims=True)
        xc = x - mu
        return xc / np.sqrt((xc * xc).mean(0, keepdims=True) + np.float32(1e-5)) * g + b

    def attn_np(q, k, v):
        B, S, E = q.shape
        h = 8
        d = E // h
        qh, kh, vh = (t.reshape(B, S, h, d).transpose(0, 2, 1, 3) for t in (q, k, v))
        s = qh @ kh.transpose(0, 1, 3, 2) / np.float32(np.sqrt(d))
        o = softmax_np(s) @ vh
        return np.ascontiguousarray(o.transpose(0, 2, 1, 3).reshape(B, S, E))

    def silu_np(v):
        return v * sig_np(v)

    def gqa_np(q, k, v):
        B, S, HQ, D = q.shape
        HK = k.shape[2]
        qg = q.reshape(B, S, HK, HQ // HK, D).transpose(0, 2, 3, 1, 4)
        kt = k.transpose(0, 2, 3, 1)[:, :, None]
        p = softmax_np(qg @ kt / np.float32(8))
        o = p @ v.transpose(0, 2, 1, 3)[:, :, None]
        return np.ascontiguousarray(o.transpose(0, 3, 1, 2, 4).reshape(B, S, HQ * D))

    def xent_np(logits, target):
        m = logits.max(-1, keepdims=True)
        lse = np.log(np.exp(logits - m).sum(-1, keepdims=True)) + m
        return (target * (lse - logits)).sum(-1).mean(keepdims=True)

    def rms_np(x, w):
        return x * (1 / np.sqrt((x * x).mean(-1, keepdims=True) + np.float32(1e-6))) * w

    def rope_np(q, c, s):
        h = q.shape[-1] // 2
        q1, q2 = q[..., :h], q[..., h:]
        c, s = c[:, None, :], s[:, None, :]
        return np.concatenate([q1 * c - q2 * s, q2 * c + q1 * s], axis=-1)

    rows = [
        ("llama_block_bf16", lambda *a: llama_block(np, None, *a), "bf16"),
        ("mixed_gelu", lambda x, w, b: gelu_np(x @ w.astype(np.float32).T + b), None),
        ("lm_softmax", softmax_np, None),
        ("linear_2to4", lambda x, w: x @ w.T, "prune"),
        ("layernorm", ln_np, None),
        ("batchnorm", bn_np, None),
        ("lowrank", lambda a, b, c: a @ (b @ c), None),
        (
            "gated_mlp",
            lambda x, w1, w3, w2: ((lambda u: u * sig_np(u))(x @ w1.T) * (x @ w3.T)) @ w2.T,
            None,
        ),
        ("attention_heads", attn_np, None),
        ("decode_f16", lambda w, x: w.astype(np.float32) @ x, None),
        ("vecmat", lambda x, w: x @ w, None),
        (
            "masked_scores",
            lambda q, k, m: softmax_np(q @ k.transpose(0, 2, 1) / np.float32(8) + m),
            None,
        ),
        ("gqa_attention", gqa_np, None),
        ("cross_entropy", xent_np, None),
        # numpy has no bf16: its row computes in f32; jax.jit's in bf16, as the layer does.
        ("swiglu_bf16", lambda x, w1, w3, w2: (silu_np(x @ w1.T) * (x @ w3.T)) @ w2.T, "bf16"),
        ("rmsnorm_bf16", rms_np, "bf16"),
        ("rope", rope_np, None),
    ]
    if jnp is None:
        return [(n, f, None, t) for n, f, t in rows]

    def gelu_j(v):
        return nn.gelu(v, approximate=True)

    def softmax_j(s):
        return nn.softmax(s, axis=-1)

    def ln_j(x, g, b):
        mu = x.mean(-1, keepdims=True)
        xc = x - mu
        return xc / jnp.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5) * g + b

    def bn_j(x, g, b):
        mu = x.mean(0, keepdims=True)
        xc = x - mu
        return xc / jnp.sqrt((xc * xc).mean(0, keepdims=True) + 1e-5) * g + b

    def attn_j(q, k, v):
        B, S, E = q.shape
        h = 8
        d = E // h
        qh, kh, vh = (t.reshape(B, S, h, d).transpose(0, 2, 1, 3) for t in (q, k, v))
        s = jnp.einsum("bhid,bhjd->bhij", qh, kh) / np.float32(np.sqrt(d))
        o = jnp.einsum("bhij,bhjd->bhid", softmax_j(s), vh)
        return o.transpose(0, 2, 1, 3).reshape(B, S, E)

    def gqa_j(q, k, v):
        B, S, HQ, D = q.shape
        HK = k.shape[2]
        qg = q.reshape(B, S, HK, HQ // HK, D).transpose(0, 2, 3, 1, 4)
        p = softmax_j(jnp.einsum("bkgsd,btkd->bkgst", qg, k) / 8)
        return jnp.einsum("bkgst,btkd->bskgd", p, v).reshape(B, S, HQ * D)

    def rms_j(x, w):
        xf = x.astype(jnp.float32)
        y = xf * jax.lax.rsqrt((xf * xf).mean(-1, keepdims=True) + 1e-6)
        return y.astype(x.dtype) * w

    def rope_j(q, c, s):
        h = q.shape[-1] // 2
        q1, q2 = q[..., :h], q[..., h:]
        c, s = c[:, None, :], s[:, None, :]
        return jnp.concatenate([q1 * c - q2 * s, q2 * c + q1 * s], axis=-1)

    jf = {
        "llama_block_bf16": lambda *a: llama_block(jnp, jax.lax, *a),
        "mixed_gelu": lambda x, w, b: gelu_j(x @ w.astype(jnp.float32).T + b),
        "lm_softmax": softmax_j,
        "linear_2to4": lambda x, w: x @ w.T,
        "layernorm": ln_j,
        "batchnorm": bn_j,
        "lowrank": lambda a, b, c: a @ (b @ c),
        "gated_mlp": lambda x, w1, w3, w2: (nn.silu(x @ w1.T) * (x @ w3.T)) @ w2.T,
        "attention_heads": attn_j,
        "decode_f16": lambda w, x: w.astype(jnp.float32) @ x,
        "vecmat": lambda x, w: x @ w,
        "masked_scores": lambda q, k, m: softmax_j(jnp.einsum("hse,hte->hst", q, k) / 8 + m),
        "gqa_attention": gqa_j,
        "cross_entropy": lambda logits, t: (
            t * (nn.logsumexp(logits, axis=-1, keepdims=True) - logits)
        ).sum(-1).mean(keepdims=True),
        "swiglu_bf16": lambda x, w1, w3, w2: (nn.silu(x @ w1.T) * (x @ w3.T)) @ w2.T,
        "rmsnorm_bf16": rms_j,
        "rope": rope_j,
    }
    return [(n, f, jf[n], t) for n, f, t in rows]


def inputs(binary, script):
    """The script's inputs as numpy arrays, in declaration order (`tdsl cost --json` shapes)."""
    d = json.loads(
        subprocess.run([binary, "cost", script, "--json"], check=True, capture_output=True, text=True).stdout
    )
    rng = np.random.default_rng(0)
    out = []
    for inp in d["inputs"]:
        dt = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "bf16": np.float32}[inp["dtype"]]
        out.append(rng.standard_normal(inp["shape"]).astype(dt))
    return out


def median_ms(f, runs):
    return _median(f, runs, warm_s=0.3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tdsl", default=os.path.join(HERE, "..", "target", "release", "tdsl"))
    ap.add_argument("--also", help="a second tdsl binary (before/after)")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--only", help="comma-separated row names")
    a = ap.parse_args()
    try:
        import jax
        import jax.numpy as jnp
        import jax.nn as nn
    except ImportError:
        jax = jnp = nn = None
    only = set(a.only.split(",")) if a.only else None
    print(f"numpy {np.__version__}, jax {jax.__version__ if jax else 'absent'}; 2 threads, median of {a.runs}")
    head = "| layer | shapes | tdsl ms |"
    if a.also:
        head += " other tdsl ms |"
    head += " numpy ms | jax.jit ms | ratio (best anchor / tdsl) | tdsl GFLOP/s | tdsl GB/s |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name, fnp, fj, how in layers(jnp, nn, jax):
        if only and name not in only:
            continue
        script = os.path.join(HERE, "layers", f"{name}.tdsl")
        args = inputs(a.tdsl, script)
        if how == "prune":
            args = [args[0]] + [prune_24(w) for w in args[1:]]
        shapes = "; ".join("×".join(map(str, v.shape)) + (" f16" if v.dtype == np.float16 else "") for v in args)
        d = tdsl_bench(a.tdsl, script, a.runs)
        t = d["run_ms_median"]
        other = tdsl_bench(a.also, script, a.runs)["run_ms_median"] if a.also else None
        ref = fnp(*args)
        npm = median_ms(lambda: fnp(*args), a.runs)
        jm = None
        if fj is not None:
            jx = [jnp.asarray(v, dtype=jnp.bfloat16 if how == "bf16" else None) for v in args]
            jfn = jax.jit(fj)
            got = np.asarray(jfn(*jx))
            err = np.max(np.abs(got - ref)) / (np.max(np.abs(ref)) + 1e-30)
            if err > 1e-2:
                print(f"warning: jax and numpy disagree on {name} (rel {err:.1e})", file=sys.stderr)
            jm = median_ms(lambda: jfn(*jx).block_until_ready(), a.runs)
        best = min(v for v in (npm, jm) if v is not None)
        fl = d.get("flops") or 0
        by = d.get("bytes") or 0
        line = f"| `{name}` | {shapes} | {t:.2f} |"
        if a.also:
            line += f" {other:.2f} |"
        jtxt = f"{jm:.2f}" if jm is not None else "—"
        line += f" {npm:.2f} | {jtxt} | {best / t:.2f}× | {fl / t / 1e6:.1f} | {by / t / 1e6:.1f} |"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
