#!/usr/bin/env python3
"""Generate the expected-cost table for the tests in `src/plan/order.rs`.

Regenerate with:

    pip install opt_einsum numpy        # tested with opt_einsum 3.4.0
    python3 tests/python/gen_order_cases.py > /tmp/cases.rs
    # then paste the printed rows over the `OPT_EINSUM_CASES` table in
    # src/plan/order.rs (the output is deterministic: fixed seed).

    python3 tests/python/gen_order_cases.py --selfcheck   # oracle self-test

Every row is `(inputs, output, extents, naive, oe_optimal, exact_optimal)`:

* labels are single letters `a`..`z` (label id = letter - 'a'), `extents[id]`
  is the extent of that label;
* `naive`       = opt_einsum.contract_path(..., optimize='optimal')[1].naive_cost
* `oe_optimal`  = opt_einsum.contract_path(..., optimize='optimal')[1].opt_cost
* `exact_optimal` = the true minimum, over every pairwise contraction order, of
  the path cost exactly as opt_einsum's `contract_path` reports it for an
  explicit path (`helpers.flop_count(idx_contract, bool(idx_removed), 2, ...)`
  per step).  Computed by a dynamic programme over operand subsets below and,
  with `--selfcheck`, cross-checked against brute-force enumeration of every
  path fed to `opt_einsum.contract_path(optimize=<explicit path>)`.

For ordinary einsums (every label in at most two operands, or one operand and
the output) `oe_optimal == exact_optimal`.  opt_einsum 3.4's `optimal` search
is NOT exact when a label occurs in three or more operands or in a single
operand only (known upstream bugs: dgasmith/opt_einsum#167 -- `result_cache`
is keyed on the two operands' label sets only, ignoring which other operands
remain -- and #112/#114/#254 -- the search's `calc_k12_flops` adds the extra
"inner" factor only for removed labels shared by both operands, unlike the
cost `contract_path` reports).  Five rows of the table hit this (the #254
example and four of the final "hyper" rows); there `exact_optimal < oe_optimal`
and the Rust optimizer returns `exact_optimal`.
"""

import itertools
import random
import sys

import opt_einsum as oe

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def size(labels, sz):
    p = 1
    for c in labels:
        p *= sz[c]
    return p


def flop(labels, inner, n_terms, sz):
    return size(labels, sz) * (max(1, n_terms - 1) + (1 if inner else 0))


def exact_optimal(inputs, output, sz):
    """min over all binary contraction trees of the contract_path-reported cost."""
    n = len(inputs)
    if n <= 2:
        return None
    sets = [frozenset(x) for x in inputs]
    out = frozenset(output)
    full = (1 << n) - 1
    union = {}
    for m in range(full + 1):
        union[m] = frozenset().union(*[sets[i] for i in range(n) if m >> i & 1])

    def labels_of(m):
        if bin(m).count("1") == 1:
            return sets[m.bit_length() - 1]
        return union[m] & (out | union[full ^ m])

    best = {}
    for m in range(1, full + 1):
        if bin(m).count("1") == 1:
            best[m] = 0
            continue
        keep = out | union[full ^ m]
        b = None
        a = (m - 1) & m
        while a:
            o = m ^ a
            if a > o:
                either = labels_of(a) | labels_of(o)
                c = best[a] + best[o] + flop(either, bool(either - keep), 2, sz)
                b = c if b is None or c < b else b
            a = (a - 1) & m
        best[m] = b
    return best[full]


def all_linear_paths(n):
    if n == 1:
        yield []
        return
    for i, j in itertools.combinations(range(n), 2):
        for rest in all_linear_paths(n - 1):
            yield [(i, j)] + rest


def oe_info(inputs, output, sz, optimize="optimal"):
    shapes = [tuple(sz[c] for c in t) for t in inputs]
    eq = ",".join(inputs) + "->" + output
    return oe.contract_path(eq, *shapes, shapes=True, optimize=optimize)[1]


def random_case(rng, n, mode):
    """mode: 'std' ordinary einsum, 'hyper' labels shared by 3+ operands and
    single-operand labels allowed."""
    while True:
        nl = rng.randint(n, min(26, 2 * n + 2))
        labs = LETTERS[:nl]
        ops = [[] for _ in range(n)]
        output = []
        for c in labs:
            occ = rng.randint(1, 2) if mode == "std" else rng.randint(1, min(n, 4))
            for w in rng.sample(range(n), occ):
                ops[w].append(c)
            if occ == 1 and (mode == "std" or rng.random() < 0.5):
                output.append(c)
            elif rng.random() < 0.12:
                output.append(c)
        if all(ops) and len(set(map(frozenset, ops))) == n:
            break
    for o in ops:
        rng.shuffle(o)
    rng.shuffle(output)
    sz = {c: rng.choice([1, 2, 3, 4, 5, 7, 8, 10, 16, 32, 64, 100]) for c in labs}
    return ["".join(o) for o in ops], "".join(output), sz


def hand_cases():
    # (inputs, output, extents-by-letter)
    return [
        (["ab", "bc", "cd"], "ad", {"a": 10, "b": 1000, "c": 10, "d": 1000}),
        (["ab", "bc", "cd", "de"], "ae", {"a": 2, "b": 50, "c": 3, "d": 40, "e": 5}),
        (["ea", "fb", "abcd", "gc", "hd"], "efgh", {c: 10 for c in "abcdefgh"}),
        (["a", "b", "c"], "abc", {"a": 3, "b": 4, "c": 5}),
        (["ab", "ab", "ab"], "", {"a": 6, "b": 7}),          # opt_einsum#167-style
        (["ij", "j", "jk"], "", {"i": 5, "j": 6, "k": 7}),    # the example in #167
        (["bgk", "bkd", "bk"], "bgd", {"b": 64, "g": 8, "k": 4096, "d": 128}),  # #254
        (["aab", "bc", "c"], "a", {"a": 4, "b": 5, "c": 6}),
        (["ab", "", "", "b"], "a", {"a": 9, "b": 5}),
    ]


def letters_to_ids_extents(inputs, output, sz):
    used = set("".join(inputs) + output)
    top = max((LETTERS.index(c) for c in used), default=-1)
    return [sz.get(LETTERS[i], 1) for i in range(top + 1)]


def rename(inputs, output, sz):
    """Map labels onto a..z in order of first appearance (hand cases use i, j, ...)."""
    order = []
    for c in "".join(inputs) + output:
        if c not in order:
            order.append(c)
    m = {c: LETTERS[i] for i, c in enumerate(order)}
    return (["".join(m[c] for c in t) for t in inputs], "".join(m[c] for c in output),
            {m[c]: v for c, v in sz.items() if c in m})


def main():
    rng = random.Random(20240611)
    cases = [rename(*c) for c in hand_cases()]
    for n in [3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7, 8, 8, 8, 8, 8]:
        cases.append(random_case(rng, n, "std"))
    for n in [3, 4, 5, 5, 6, 6, 7, 8]:
        cases.append(random_case(rng, n, "hyper"))

    print("// generated by tests/python/gen_order_cases.py (opt_einsum %s)" % oe.__version__)
    print("// (inputs, output, extents, naive, oe_optimal, exact_optimal)")
    for inputs, output, sz in cases:
        info = oe_info(inputs, output, sz)
        ex = exact_optimal(inputs, output, sz)
        assert ex <= int(info.opt_cost), (inputs, output, sz)
        ext = letters_to_ids_extents(inputs, output, sz)
        print('    ("%s", "%s", &%s, %d, %d, %d),' % (
            ",".join(inputs), output, "[" + ", ".join(map(str, ext)) + "]",
            int(info.naive_cost), int(info.opt_cost), ex))


def selfcheck():
    rng = random.Random(1)
    for t in range(150):
        n = rng.randint(3, 5)
        inputs, output, sz = random_case(rng, n, rng.choice(["std", "hyper"]))
        ex = exact_optimal(inputs, output, sz)
        brute = min(int(oe_info(inputs, output, sz, optimize=p).opt_cost)
                    for p in all_linear_paths(n))
        assert ex == brute, (inputs, output, sz, ex, brute)
    print("selfcheck ok: DP optimum == brute force over all opt_einsum-costed paths")


if __name__ == "__main__":
    if "--selfcheck" in sys.argv:
        selfcheck()
    else:
        main()
