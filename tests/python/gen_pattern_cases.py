#!/usr/bin/env python3
"""Reference table for tdsl's pattern engine (src/check/pattern.rs), produced by real einops.

Runs every case below through einops (rearrange / reduce with 'sum' / repeat) on a numpy array of
the given shape and prints, as Rust source, whether einops accepts the pattern and the output
shape it produces. The Rust test `tests::einops_reference_table` checks that `resolve_pattern`
makes the same accept/reject decision and computes the same output extents.

Regenerate (einops 0.8.2 and numpy 2.x were used for the checked-in table):

    pip install einops numpy
    python3 tests/python/gen_pattern_cases.py > /tmp/einops_cases.rs

and replace the tables between the `BEGIN GENERATED` / `END GENERATED` markers in
src/check/pattern.rs with the output.

It also runs single-letter einsum patterns through numpy's `einsum` (spaces removed, default
`optimize=False`) for `tests::numpy_einsum_reference_table`.

Cases in DEVIATIONS / EINSUM_DEVIATIONS are ones where tdsl rejects on purpose although
einops / numpy accept; they are emitted into separate tables whose tests assert that tdsl
rejects them.
"""

import warnings

import einops
import numpy as np

warnings.simplefilter("ignore")

# (operation, pattern, input shape, axis-length keyword arguments)
CASES = [
    # --- rearrange, accepted ---
    ("rearrange", "b h w c -> b c h w", (2, 3, 4, 5), {}),
    ("rearrange", "b h w c -> (b h) w c", (2, 3, 4, 5), {}),
    ("rearrange", "b h w c -> b (c h w)", (2, 3, 4, 5), {}),
    ("rearrange", "b (h1 h) (w1 w) c -> (b h1 w1) h w c", (2, 4, 6, 3), {"h1": 2, "w1": 2}),
    ("rearrange", "b (h h1) (w w1) c -> b h w (c h1 w1)", (2, 4, 6, 3), {"h1": 2, "w1": 2}),
    ("rearrange", "(a b) -> a b", (6,), {"a": 2}),
    ("rearrange", "b (h w) -> b h w", (2, 6), {"h": 2, "w": 3}),
    ("rearrange", "a b -> b a", (2, 3), {"a": 2}),
    ("rearrange", "... -> ...", (2, 3), {}),
    ("rearrange", "b ... -> ... b", (2, 3, 4), {}),
    ("rearrange", "b ... c -> b (...) c", (2, 3, 4, 5), {}),
    ("rearrange", "b ... -> b (...)", (2,), {}),
    ("rearrange", "... h w -> ... (h w)", (2, 3, 4), {}),
    ("rearrange", "... h w -> ... (h w)", (3, 4), {}),
    ("rearrange", "b ... -> (... b)", (2, 3, 4), {}),
    ("rearrange", "h w -> w h 1", (3, 4), {}),
    ("rearrange", "h w -> w () h", (3, 4), {}),
    ("rearrange", "1 h w -> h w", (1, 3, 4), {}),
    ("rearrange", "() h w -> h w", (1, 3, 4), {}),
    ("rearrange", "(h 1) w -> h (1 w)", (3, 4), {}),
    ("rearrange", "01 h -> h", (1, 3), {}),
    ("rearrange", "h w -> (w h)", (3, 4), {}),
    ("rearrange", "->", (), {}),
    ("rearrange", "h -> h 1 1", (5,), {}),
    ("rearrange", "a_b c1 -> c1 a_b", (2, 3), {}),
    ("rearrange", "batch seq -> seq batch", (2, 3), {}),
    ("rearrange", "(a b) c -> a b c", (0, 3), {"b": 2}),
    ("rearrange", "  b   h  ->  h b ", (2, 3), {}),
    ("rearrange", "b(h w)->b h w", (2, 6), {"h": 3}),
    # --- rearrange, rejected ---
    ("rearrange", "b h w -> b h", (2, 3, 4), {}),
    ("rearrange", "b h -> b h w", (2, 3), {}),
    ("rearrange", "b h w -> b h w", (2, 3), {}),
    ("rearrange", "b h -> b h h", (2, 3), {}),
    ("rearrange", "b b -> b", (2, 2), {}),
    ("rearrange", "(h w) -> h w", (6,), {}),
    ("rearrange", "(h w) -> h w", (6,), {"h": 4}),
    ("rearrange", "(h w) -> h w", (6,), {"h": 2, "w": 4}),
    ("rearrange", "(h w) -> h w", (6,), {"h": 0}),
    ("rearrange", "b (h 2) -> b h", (2, 6), {}),
    ("rearrange", "b h -> b h 2", (2, 3), {}),
    ("rearrange", "b ((h w)) -> b h w", (2, 6), {}),
    ("rearrange", "b (h w -> b h w", (2, 6), {}),
    ("rearrange", "b h) -> b h", (2, 6), {}),
    ("rearrange", "b h -> b h", (2, 3), {"c": 3}),
    ("rearrange", "b .. -> b", (2, 3), {}),
    ("rearrange", "b ... ... -> b", (2, 3), {}),
    ("rearrange", "b .... -> b ....", (2, 3), {}),
    ("rearrange", "b a...  -> b a...", (2, 3), {}),
    ("rearrange", "b (...) -> b ...", (2, 3), {}),
    ("rearrange", "b h -> b ... h", (2, 3), {}),
    ("rearrange", "... h -> h", (2, 3), {}),
    ("rearrange", "b h", (2, 3), {}),
    ("rearrange", "b -> h -> b", (2,), {}),
    ("rearrange", "_b h -> h _b", (2, 3), {}),
    ("rearrange", "b_ h -> h b_", (2, 3), {}),
    ("rearrange", "2b h -> h 2b", (2, 3), {}),
    ("rearrange", "b\th -> h\tb", (2, 3), {}),
    ("rearrange", "b-h -> b", (2, 3), {}),
    ("rearrange", "1 h -> h", (2, 3), {}),
    ("rearrange", "h -> h 0", (2,), {}),
    ("rearrange", "... a b -> ... b a", (2,), {}),
    ("rearrange", "h w -> w h", (4, 5), {"h": 3}),
    ("rearrange", "h w -> w h", (4, 5), {"_": 3}),
    ("rearrange", "h w -> w h", (4, 5), {"h_": 4}),
    # --- reduce, accepted ---
    ("reduce", "t b c -> b c", (2, 3, 4), {}),
    ("reduce", "b c (h1 h2) (w1 w2) -> b c h1 w1", (2, 3, 4, 6), {"h2": 2, "w2": 2}),
    ("reduce", "b c (h1 2) (w1 2) -> b c h1 w1", (2, 3, 4, 6), {}),
    ("reduce", "b c (h1 h2) (w1 w2) -> b c h1 w1", (2, 3, 6, 8), {"h1": 3, "w1": 4}),
    ("reduce", "b c h w -> b c", (2, 3, 4, 5), {}),
    ("reduce", "b c h w -> 1 c 1 1", (2, 3, 4, 5), {}),
    ("reduce", "b c h w -> b c () ()", (2, 3, 4, 5), {}),
    ("reduce", "b ... -> b", (2, 3, 4), {}),
    ("reduce", "... c -> c", (2, 3, 4), {}),
    ("reduce", "b h w ->", (2, 3, 4), {}),
    ("reduce", "b (h 2) -> b", (2, 6), {}),
    ("reduce", "b (2 h) -> b h", (2, 6), {}),
    ("reduce", "b (h 2) (w 2) -> b (h w)", (2, 4, 6), {}),
    ("reduce", "b (h 2) (w 2) -> b (w h)", (2, 4, 6), {}),
    ("reduce", "b h -> b h", (2, 3), {}),
    ("reduce", "b ... -> b ...", (2, 3, 4), {}),
    ("reduce", "(b 1) h -> b", (2, 3), {}),
    ("reduce", "b h -> h", (2, 3), {"b": 2}),
    ("reduce", "b (h 2 3) -> h b", (2, 12), {}),
    # --- reduce, rejected ---
    ("reduce", "b h -> b w", (2, 3), {}),
    ("reduce", "b h -> b 2", (2, 3), {}),
    ("reduce", "b (h 3) -> b h", (2, 4), {}),
    ("reduce", "b h -> b h", (2, 3, 4), {}),
    ("reduce", "b h -> b ...", (2, 3), {}),
    ("reduce", "b (h 0) -> b", (2, 3), {}),
    ("reduce", "b h w -> b", (2, 3, 4), {"c": 2}),
    ("reduce", "b (h w) -> b", (2, 6), {}),
    ("reduce", "b h -> b b", (2, 3), {}),
    # --- repeat, accepted ---
    ("repeat", "h w -> h w c", (2, 3), {"c": 3}),
    ("repeat", "h w -> (repeat h) w", (2, 3), {"repeat": 2}),
    ("repeat", "h w -> h (w 2)", (2, 3), {}),
    ("repeat", "h w -> h w 3", (2, 3), {}),
    ("repeat", "... -> ... c", (2, 3), {"c": 2}),
    ("repeat", "b ... -> b c ...", (2, 3, 4), {"c": 2}),
    ("repeat", "h w -> h w 1", (2, 3), {}),
    ("repeat", "() h -> c h", (1, 4), {"c": 3}),
    ("repeat", "1 h -> c h", (1, 4), {"c": 3}),
    ("repeat", "h -> h", (3,), {}),
    ("repeat", "h w -> (h 2) (w 2)", (2, 3), {}),
    ("repeat", "h -> h c", (3,), {"c": 1}),
    ("repeat", "h -> (c h)", (3,), {"c": 2, "h": 3}),
    ("repeat", "b ... -> b (... c)", (2, 3, 4), {"c": 2}),
    ("repeat", "h -> 2 h 3", (3,), {}),
    ("repeat", "-> a b", (), {"a": 2, "b": 3}),
    # --- repeat, rejected ---
    ("repeat", "h w -> h c", (2, 3), {"c": 2}),
    ("repeat", "h w -> h w c", (2, 3), {}),
    ("repeat", "h (w 2) -> h w", (2, 6), {}),
    ("repeat", "h -> h c", (3,), {"c": 2, "d": 2}),
    ("repeat", "... h -> h c", (2, 3), {"c": 2}),
    ("repeat", "h -> h h", (3,), {}),
    ("repeat", "h -> h c c", (3,), {"c": 2}),
    ("repeat", "h -> h c", (3,), {"h": 2, "c": 2}),
    ("repeat", "h -> (h c)", (3,), {}),
    ("repeat", "(h w) -> h w c", (6,), {"c": 2}),
]

# tdsl rejects these on purpose although einops accepts them.
DEVIATIONS = [
    # axis lengths must be >= 1 (einops builds an empty new axis)
    ("repeat", "h w -> h w c", (2, 3), {"c": 0}),
    # axis names are ASCII identifiers (einops accepts any Python identifier)
    ("rearrange", "\u00e9 h -> h \u00e9", (2, 3), {}),
]


# einsum patterns with single-letter labels, so that numpy can run them after the spaces are
# removed: (tdsl pattern, operand shapes). numpy's default `optimize=False` path is the reference.
EINSUM_CASES = [
    ("i j, j k -> i k", [(2, 3), (3, 4)]),
    ("b h i d, b h j d -> b h i j", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("i i ->", [(3, 3)]),
    ("i i -> i", [(3, 3)]),
    ("i j -> j i", [(2, 3)]),
    ("i j ->", [(2, 3)]),
    ("a b, b c, c d -> a d", [(2, 3), (3, 4), (4, 5)]),
    ("i, i ->", [(3,), (3,)]),
    ("i, j -> i j", [(2,), (3,)]),
    ("... i j, ... j k -> ... i k", [(5, 1, 2, 3), (4, 3, 4)]),
    ("... i j, ... j k -> ... i k", [(5, 2, 2, 3), (4, 3, 4)]),
    ("... i, ... i -> ... i", [(2, 3), (4, 3)]),
    ("... i, ... i -> ... i", [(2, 1, 3), (4, 3)]),
    ("... i -> i", [(2, 3)]),
    ("... i -> i", [(3,)]),
    ("... i -> ...", [(4, 1, 3)]),
    ("i j -> ... i j", [(2, 3)]),
    ("i ... -> ... i", [(2, 3, 4)]),
    ("i i i -> i", [(2, 2, 2)]),
    ("i i -> i", [(2, 3)]),
    ("i j, j k -> i k", [(2, 3), (4, 5)]),
    ("i j -> i k", [(2, 3)]),
    ("i j -> i i", [(2, 3)]),
    ("i j -> i", [(2,)]),
    ("i j, j k -> i k", [(2, 3)]),
    ("i j k -> k j i", [(2, 3, 4)]),
    ("b i j, b j -> b i", [(2, 3, 4), (2, 4)]),
]

# tdsl rejects these although numpy accepts them: a named label of extent 1 is never broadcast.
EINSUM_DEVIATIONS = [
    ("i j, j k -> i k", [(2, 1), (3, 4)]),
    ("i, i -> i", [(1,), (3,)]),
]


def run_einsum(pattern, shapes):
    try:
        r = np.einsum(pattern.replace(" ", ""), *[np.zeros(s) for s in shapes], optimize=False)
        return tuple(np.shape(r)), None
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"


def einsum_row(pattern, shapes):
    out, err = run_einsum(pattern, shapes)
    shapes_s = "&[" + ", ".join("&[" + ", ".join(str(d) for d in s) + "]" for s in shapes) + "]"
    if out is None:
        res, comment = "None", "  // " + err[:90]
    else:
        res, comment = "Some(&[" + ", ".join(str(d) for d in out) + "])", ""
    return f"    ({rust_str(pattern)}, {shapes_s}, {res}),{comment}"


def run(op, pattern, shape, kwargs):
    x = np.zeros(shape)
    try:
        if op == "rearrange":
            y = einops.rearrange(x, pattern, **kwargs)
        elif op == "reduce":
            y = einops.reduce(x, pattern, "sum", **kwargs)
        else:
            y = einops.repeat(x, pattern, **kwargs)
        return tuple(y.shape), None
    # einops raises EinopsError; some malformed patterns surface as ValueError (no `->`) or
    # ZeroDivisionError (axis length 0). All of them are rejections.
    except Exception as e:  # noqa: BLE001
        lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
        return None, f"{type(e).__name__}: {lines[-1] if lines else ''}"


def rust_str(s):
    out = '"'
    for ch in s:
        if ch == '"':
            out += '\\"'
        elif ch == "\\":
            out += "\\\\"
        elif ch == "\t":
            out += "\\t"
        elif ch == "\n":
            out += "\\n"
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            out += "\\u{%x}" % ord(ch)
        else:
            out += ch
    return out + '"'


def rust_row(op, pattern, shape, kwargs):
    out, err = run(op, pattern, shape, kwargs)
    shape_s = "&[" + ", ".join(str(d) for d in shape) + "]"
    kw_s = "&[" + ", ".join(f"({rust_str(k)}, {v})" for k, v in kwargs.items()) + "]"
    if out is None:
        res = "None"
        comment = "  // " + "".join(c if " " <= c <= "~" else "?" for c in err)[:90]
    else:
        res = "Some(&[" + ", ".join(str(d) for d in out) + "])"
        comment = ""
    return f"    ({rust_str(op)}, {rust_str(pattern)}, {shape_s}, {kw_s}, {res}),{comment}"


def main():
    lines = [f"// einops {einops.__version__}, numpy {np.__version__}"]
    tables = [
        ("EINOPS_CASES", "EinopsCase", [rust_row(*c) for c in CASES]),
        ("EINOPS_DEVIATIONS", "EinopsCase", [rust_row(*c) for c in DEVIATIONS]),
        ("EINSUM_CASES", "EinsumCase", [einsum_row(*c) for c in EINSUM_CASES]),
        ("EINSUM_DEVIATIONS", "EinsumCase", [einsum_row(*c) for c in EINSUM_DEVIATIONS]),
    ]
    for name, ty, rows in tables:
        lines += ["#[rustfmt::skip]", f"const {name}: &[{ty}] = &[", *rows, "];"]
    # Indented for pasting into `mod tests`.
    for line in lines:
        print("    " + line)


if __name__ == "__main__":
    main()
