//! Loop-IR rewrites that need nothing but the loop IR: the planner builds a kernel's loop
//! nest, then runs [`KERNEL_PASSES`] over it, in order. Each pass is a function from statements
//! to statements that keeps the kernel's meaning; the evaluator and the JIT see only the result.
//!
//! | pass | what it does |
//! |---|---|
//! | `unroll-small-loops` | innermost loops of ≤ 4 iterations become straight-line code |
//! | `fold-accumulators` | an accumulator updated in straight-line code becomes one expression |
//! | `mark-vector` | innermost loops get the vector hint (lanes of the compute type) |
//! | `tile-transpose` | a transposing map is cache-blocked (tiles of both axes move outward) |
//! | `hoist-invariants` | arithmetic on accumulators final before a loop moves out of it |
//! | `exact-reciprocals` | `x / c` with `c` a power of two becomes `x * (1 / c)` (the same rounding) |
//!
//! One pass runs over the whole program once the planner has built it: `forward-copies`
//! ([`forward_copies`]) drops a kernel that copies a temporary whole into an output, the
//! temporary's writers writing the output instead.

use std::collections::{BTreeMap, BTreeSet};

use crate::ir::{
    AccId, AccOp, BinOp, BufId, ElemType, Expr, Index, Iter, Kernel, Loop, LoopProgram, Role, Stmt,
    VarId,
};
use crate::walk;

/// What a pass may need to know about the kernel it rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassContext {
    /// The compute type of the values the kernel stores (vector lanes follow from it).
    pub compute: ElemType,
    /// The first loop variable no statement of the kernel uses (passes that add loops take
    /// fresh variables from here).
    pub first_free_var: u32,
}

/// One named rewrite.
pub struct Pass {
    pub name: &'static str,
    pub run: fn(Vec<Stmt>, &PassContext) -> Vec<Stmt>,
}

/// The passes run on every fused kernel, in order.
pub const KERNEL_PASSES: [Pass; 6] = [
    Pass {
        name: "unroll-small-loops",
        run: |b, _| unroll_small_loops(b),
    },
    Pass {
        name: "fold-accumulators",
        run: |b, _| fold_accumulators(b),
    },
    Pass {
        name: "mark-vector",
        run: |b, cx| mark_vector(b, lanes(cx.compute)),
    },
    Pass {
        name: "tile-transpose",
        run: |b, cx| tile_transpose(b, cx.first_free_var),
    },
    Pass {
        name: "hoist-invariants",
        run: |b, _| hoist_invariants(b),
    },
    Pass {
        name: "exact-reciprocals",
        run: |b, _| exact_reciprocals(b),
    },
];

/// Runs [`KERNEL_PASSES`] over a kernel body.
pub fn run_kernel_passes(body: Vec<Stmt>, cx: &PassContext) -> Vec<Stmt> {
    KERNEL_PASSES.iter().fold(body, |b, p| (p.run)(b, cx))
}

/// Vector lanes of a 128-bit register for a compute type (f64: 2, else 4).
pub fn lanes(compute: ElemType) -> u32 {
    if compute == ElemType::F64 {
        2
    } else {
        4
    }
}

/// Cache-blocks a transposing map: when a perfect loop nest ends in one store that is
/// unit-stride in the innermost variable `v`, while some load walks `v` with a large stride and is
/// unit-stride in another variable `u`, both `u` and `v` are split into tiles and the
/// tile loops move outward. Every cache line a tile touches, read or written, is then used whole
/// before it is evicted. Nests that are not such maps, or whose extents the tile does not
/// divide, are returned unchanged.
pub fn tile_transpose(body: Vec<Stmt>, first_free_var: u32) -> Vec<Stmt> {
    // Peel the perfect nest.
    let mut loops: Vec<(VarId, u64)> = Vec::new();
    let mut cur = &body;
    let store = loop {
        match cur.as_slice() {
            [Stmt::Loop(l)] => {
                let Iter::Range { extent } = l.iter else {
                    return body;
                };
                loops.push((l.var, extent));
                cur = &l.body;
            }
            [s @ Stmt::Store { .. }] => break s.clone(),
            _ => return body,
        }
    };
    let Stmt::Store { buf, index, value } = store else {
        return body;
    };
    let Some(&(v, v_ext)) = loops.last() else {
        return body;
    };
    if index.stride_of(v) != 1 {
        return body;
    }
    let loads = value.indices();
    let u = loads.iter().find_map(|ix| {
        let sv = ix.stride_of(v);
        if sv == 0 || sv == 1 {
            return None;
        }
        loops
            .iter()
            .find(|(w, _)| *w != v && ix.stride_of(*w) == 1)
            .copied()
    });
    let Some((u, mut u_ext)) = u else { return body };
    // Loops that continue `u` in every index (`h` outside `w` in `b c h w -> b h w c`: strides
    // 56 and 1 in the source, 56·64 and 64 in the result) merge into it, so the tile runs
    // along the whole contiguous span (3136) rather than one short row (56).
    let mut merged: Vec<VarId> = Vec::new();
    let mut indices: Vec<&Index> = loads.clone();
    indices.push(&index);
    while let Some(&(w, e)) = loops.iter().find(|(w, _)| {
        *w != u
            && *w != v
            && !merged.contains(w)
            && indices
                .iter()
                .all(|ix| ix.stride_of(*w) == ix.stride_of(u) * u_ext as i64)
    }) {
        merged.push(w);
        u_ext *= e;
    }
    // Tile edges, measured on transpose 4096² and NHWC permutes (bench/RESULTS.md): long runs
    // along `u`, whose loads are contiguous, and short runs along `v` when `v`'s load stride is
    // a multiple of 4 KiB — then every row of a tile maps to the same L1 set, and more than 8
    // rows thrash it.
    let fit = |e: u64, sizes: &[u64]| {
        sizes
            .iter()
            .copied()
            .find(|&t| e.is_multiple_of(t) && e >= 2 * t)
    };
    let aliasing = loads
        .iter()
        .any(|ix| ix.stride_of(v).unsigned_abs().is_multiple_of(1024));
    let Some(tu) = fit(u_ext, &[256, 128, 64, 32, 16, 8, 4]) else {
        return body;
    };
    let tv = if aliasing {
        fit(v_ext, &[8, 4])
    } else {
        Some(fit(v_ext, &[64, 32, 16, 8]).unwrap_or(v_ext))
    };
    let Some(tv) = tv else {
        return body;
    };
    let (uo, ui, vo, vi) = (
        VarId(first_free_var),
        VarId(first_free_var + 1),
        VarId(first_free_var + 2),
        VarId(first_free_var + 3),
    );
    let split = |ix: &Index| -> Index {
        let mut terms = Vec::new();
        for &(w, s) in &ix.terms {
            if merged.contains(&w) {
                // Folded into `u`'s span.
            } else if w == u {
                terms.push((uo, s * tu as i64));
                terms.push((ui, s));
            } else if w == v {
                terms.push((vo, s * tv as i64));
                terms.push((vi, s));
            } else {
                terms.push((w, s));
            }
        }
        Index {
            offset: ix.offset,
            terms,
        }
    };
    let store = Stmt::Store {
        buf,
        index: split(&index),
        value: value.map_indices(&split),
    };
    let mut order: Vec<(VarId, u64)> = loops
        .iter()
        .copied()
        .filter(|(w, _)| *w != u && *w != v && !merged.contains(w))
        .collect();
    order.extend([(uo, u_ext / tu), (vo, v_ext / tv), (ui, tu), (vi, tv)]);
    let mut out = vec![store];
    let n = order.len();
    for (d, (w, e)) in order.into_iter().enumerate().rev() {
        out = vec![Stmt::Loop(Loop {
            var: w,
            iter: Iter::Range { extent: e },
            parallel: d == 0,
            vector: 1,
            gpu: None,
            body: out,
        })];
        let _ = n;
    }
    out
}

/// Gives innermost loops (after unrolling) the vector hint; the backend vectorises only where
/// strides allow.
pub fn mark_vector(body: Vec<Stmt>, lanes: u32) -> Vec<Stmt> {
    body.into_iter()
        .map(|s| match s {
            Stmt::Loop(mut l) => {
                l.body = mark_vector(l.body, lanes);
                if !l.body.iter().any(|s| matches!(s, Stmt::Loop(_))) && l.vector == 1 {
                    l.vector = lanes;
                }
                Stmt::Loop(l)
            }
            other => other,
        })
        .collect()
}

/// Loops of at most this many iterations, with no loops inside, are unrolled.
const UNROLL: u64 = 4;

/// Unrolls short innermost loops (the 2×2 window of a pooling reduce, a unit of 3 colours): each
/// copy of the body has the loop variable replaced by its value, folded into index offsets.
pub fn unroll_small_loops(body: Vec<Stmt>) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(body.len());
    for s in body {
        match s {
            Stmt::Loop(mut l) => {
                l.body = unroll_small_loops(l.body);
                let small = match l.iter {
                    Iter::Range { extent } if extent <= UNROLL => Some(extent),
                    _ => None,
                };
                let leaf = !l
                    .body
                    .iter()
                    .any(|s| matches!(s, Stmt::Loop(_) | Stmt::Let { .. } | Stmt::Call(_)));
                if let (Some(extent), true, false) = (small, leaf, l.parallel) {
                    for i in 0..extent {
                        for st in &l.body {
                            out.push(subst_var(st, l.var, i as i64));
                        }
                    }
                } else {
                    out.push(Stmt::Loop(l));
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// A statement with loop variable `v` replaced by the constant `value`.
pub fn subst_var(s: &Stmt, v: VarId, value: i64) -> Stmt {
    let fix = |ix: &Index| -> Index {
        let mut out = Index {
            offset: ix.offset,
            terms: Vec::new(),
        };
        for &(w, st) in &ix.terms {
            if w == v {
                out.offset += st * value;
            } else {
                out.terms.push((w, st));
            }
        }
        out
    };
    s.map_exprs(&mut |e| e.map_indices(&fix), &fix)
}

/// Replaces an accumulator that is declared, updated a few times in straight-line code and then
/// read by straight-line statements with the expression it computes, so a pooling window becomes
/// one expression (`max(max(a, b), max(c, d))`) and its loop a plain vectorisable map.
pub fn fold_accumulators(body: Vec<Stmt>) -> Vec<Stmt> {
    let mut body: Vec<Stmt> = body
        .into_iter()
        .map(|s| match s {
            Stmt::Loop(mut l) => {
                l.body = fold_accumulators(l.body);
                Stmt::Loop(l)
            }
            other => other,
        })
        .collect();
    let mut i = 0;
    while i < body.len() {
        let Stmt::Let { acc, ty, init } = &body[i] else {
            i += 1;
            continue;
        };
        let (acc, ty) = (*acc, *ty);
        let mut expr: Option<Expr> = None;
        let mut j = i + 1;
        while let Some(Stmt::Update { acc: a, op, value }) = body.get(j) {
            if *a != acc || crate::walk::stmt_accs(std::slice::from_ref(&body[j])).contains(&acc) {
                break;
            }
            let prev = expr.take();
            expr = Some(match (op, prev) {
                (AccOp::Set, _) => value.clone(),
                (_, None) if matches!(init, Expr::Const(_)) && is_identity(*op, init) => {
                    value.clone()
                }
                (op, prev) => {
                    let base = prev.unwrap_or_else(|| init.clone());
                    let bop = match op {
                        AccOp::Add => BinOp::Add,
                        AccOp::Mul => BinOp::Mul,
                        AccOp::Max => BinOp::Max,
                        AccOp::Min => BinOp::Min,
                        AccOp::Set => BinOp::Add,
                    };
                    Expr::Binary(bop, Box::new(base), Box::new(value.clone()))
                }
            });
            j += 1;
        }
        let Some(folded) = expr else {
            i += 1;
            continue;
        };
        // Every later reader must be straight-line (not inside a loop, which would recompute).
        let rest = &body[j..];
        let in_loops = rest.iter().any(|s| {
            matches!(s, Stmt::Loop(_))
                && crate::walk::stmt_accs(std::slice::from_ref(s)).contains(&acc)
        });
        let updated_later = rest
            .iter()
            .any(|s| matches!(s, Stmt::Update { acc: a, .. } if *a == acc));
        if in_loops || updated_later {
            i += 1;
            continue;
        }
        let _ = ty;
        let replaced: Vec<Stmt> = rest.iter().map(|s| replace_acc(s, acc, &folded)).collect();
        body.splice(i.., replaced);
    }
    body
}

fn is_identity(op: AccOp, init: &Expr) -> bool {
    match (op, init) {
        (AccOp::Add, Expr::Const(c)) => *c == 0.0,
        (AccOp::Mul, Expr::Const(c)) => *c == 1.0,
        (AccOp::Max, Expr::Const(c)) => *c == f64::NEG_INFINITY,
        (AccOp::Min, Expr::Const(c)) => *c == f64::INFINITY,
        _ => false,
    }
}

fn replace_acc(s: &Stmt, acc: AccId, with: &Expr) -> Stmt {
    fn e(x: &Expr, acc: AccId, with: &Expr) -> Expr {
        match x {
            Expr::Acc(a) if *a == acc => with.clone(),
            other => other.map_children(|y| e(y, acc, with)),
        }
    }
    s.map_exprs(&mut |x| e(x, acc, with), &|ix| ix.clone())
}

/// `1 / c` when `c` is a power of two, `±2^k` with `|k| ≤ 100`: its reciprocal is exact in f32
/// and f64 (normal in both), so `x * (1 / c)` is the exact `x / c` rounded once, as the division
/// rounds it, for every `x` (subnormal results, infinities, NaN and signed zeros included).
pub fn exact_reciprocal(c: f64) -> Option<f64> {
    const MANTISSA: u64 = (1 << 52) - 1;
    let exp = ((c.to_bits() >> 52) & 0x7ff) as i64 - 1023;
    (c.is_normal() && c.to_bits() & MANTISSA == 0 && exp.abs() <= 100).then(|| 1.0 / c)
}

/// Whether power of two `c` and its reciprocal are normal f16 and bf16 values (`2^±14`).
fn in_half(c: f64) -> bool {
    (2f64.powi(-14)..=2f64.powi(14)).contains(&c.abs())
}

/// Divisions by a constant power of two become multiplications by its exact reciprocal
/// ([`exact_reciprocal`]): a division takes 3–5 times a multiplication's cycles on x86 (an
/// attention score's `/ 8`, a mean's `/ 1024`), and the results are bit-identical.
pub fn exact_reciprocals(body: Vec<Stmt>) -> Vec<Stmt> {
    fn expr(e: &Expr) -> Expr {
        let e = e.map_children(expr);
        let Expr::Binary(BinOp::Div, x, c) = &e else {
            return e;
        };
        // A constant, or one cast to a type that holds it and its reciprocal exactly.
        let r = match &**c {
            Expr::Const(c) => exact_reciprocal(*c).map(Expr::Const),
            Expr::Cast(t, c) => match **c {
                Expr::Const(c) => exact_reciprocal(c)
                    .filter(|_| matches!(t, ElemType::F32 | ElemType::F64) || in_half(c))
                    .map(|r| Expr::Cast(*t, Box::new(Expr::Const(r)))),
                _ => None,
            },
            _ => None,
        };
        match r {
            Some(r) => Expr::Binary(BinOp::Mul, x.clone(), Box::new(r)),
            None => e,
        }
    }
    fn stmt(s: Stmt) -> Stmt {
        match s {
            Stmt::Loop(mut l) => {
                l.body = l.body.into_iter().map(stmt).collect();
                Stmt::Loop(l)
            }
            other => other.map_exprs(&mut expr, &|ix| ix.clone()),
        }
    }
    body.into_iter().map(stmt).collect()
}

/// Stores a costly value once where a row's reduction and the row's store both compute it.
/// Softmax's `exp(x − max)` is summed by one loop and divided by that sum in the next: fused,
/// both loops evaluate the `exp`. When a loop's only statement updates an accumulator with a
/// costly value `V` (a transcendental function, a root, a division), and a later loop of the
/// same range stores `W` containing the same `V` at an index that moves with it, into a buffer
/// of `V`'s own compute type (f32 or f64: the round trip is exact) that nothing in between
/// touches, the first loop stores `V` there and updates the accumulator with the stored value,
/// and the second reads it back instead of computing it: `for i { y[i] = exp(…); a += y[i] }
/// … for i { y[i] = y[i] / a }`. The values are the same bits; the second loop loads what it
/// would have computed. `buf_ty` gives each buffer's element type.
pub fn reuse_stored_values(body: Vec<Stmt>, buf_ty: &dyn Fn(BufId) -> ElemType) -> Vec<Stmt> {
    let mut accs = BTreeMap::new();
    for s in &body {
        s.visit(&mut |x| {
            if let Stmt::Let { acc, ty, .. } = x {
                accs.insert(*acc, ty.compute());
            }
        });
    }
    reuse_in(body, &Types { buf: buf_ty, accs })
}

/// Element types for [`reuse_stored_values`]: of buffers, and of accumulators by their `Let`.
struct Types<'a> {
    buf: &'a dyn Fn(BufId) -> ElemType,
    accs: BTreeMap<AccId, ElemType>,
}

impl Types<'_> {
    /// The compute type of `e` on its own (`None` for constants and positions, which take the
    /// type of the place they are used).
    fn of(&self, e: &Expr) -> Option<ElemType> {
        match e {
            Expr::Const(_) | Expr::Iota(_) => None,
            Expr::Load { buf, .. } => Some((self.buf)(*buf).compute()),
            Expr::Acc(a) => self.accs.get(a).copied(),
            Expr::Cast(t, _) => Some(t.compute()),
            Expr::Unary(_, x) => self.of(x),
            Expr::Binary(_, a, b) | Expr::Select(_, a, b) => match (self.of(a), self.of(b)) {
                (Some(ElemType::F64), _) | (_, Some(ElemType::F64)) => Some(ElemType::F64),
                (x, y) => x.or(y),
            },
        }
    }
}

fn reuse_in(stmts: Vec<Stmt>, t: &Types) -> Vec<Stmt> {
    let mut stmts: Vec<Stmt> = stmts
        .into_iter()
        .map(|s| match s {
            Stmt::Loop(mut l) => {
                l.body = reuse_in(l.body, t);
                Stmt::Loop(l)
            }
            s => s,
        })
        .collect();
    // Each storing loop takes the reduction whose value costs most (softmax's `exp(x / t − m)`
    // rather than the `x / t` its maximum already computed), the nearest of equals.
    for j in 0..stmts.len() {
        let mut best: Option<(usize, usize, Stmt, Stmt)> = None;
        for i in 0..j {
            if let Some((r, f, cost)) = reuse_pair(&stmts[i], &stmts[j], &stmts[i + 1..j], t) {
                if best.as_ref().is_none_or(|b| cost >= b.1) {
                    best = Some((i, cost, r, f));
                }
            }
        }
        if let Some((i, _, r, f)) = best {
            stmts[i] = r;
            stmts[j] = f;
        }
    }
    stmts
}

/// How many costly operations `e` computes: costly functions ([`crate::ir::UnOp::is_costly`]),
/// divisions and powers.
fn costly(e: &Expr) -> usize {
    let mut n = 0;
    e.visit(&mut |x| {
        n += match x {
            Expr::Unary(f, _) => f.is_costly() as usize,
            Expr::Binary(f, _, _) => matches!(f, BinOp::Div | BinOp::Pow) as usize,
            _ => 0,
        }
    });
    n
}

/// `e` with loop variable `from` renamed `to` in every index.
fn rename(e: &Expr, from: VarId, to: VarId) -> Expr {
    e.map_indices(&|ix| rename_index(ix, from, to))
}

fn rename_index(ix: &Index, from: VarId, to: VarId) -> Index {
    Index {
        offset: ix.offset,
        terms: ix
            .terms
            .iter()
            .map(|&(v, s)| (if v == from { to } else { v }, s))
            .collect(),
    }
}

/// `e` with every occurrence of `what` replaced by `with`, and whether there was one.
fn replace(e: &Expr, what: &Expr, with: &Expr) -> (Expr, bool) {
    if e == what {
        return (with.clone(), true);
    }
    let mut found = false;
    let out = e.map_children(|x| {
        let (y, f) = replace(x, what, with);
        found |= f;
        y
    });
    (out, found)
}

/// The two loops of [`reuse_stored_values`] rewritten, and what the value reused costs
/// ([`costly`]), when `red` and `fin` (with `between` them) have its shape.
fn reuse_pair(red: &Stmt, fin: &Stmt, between: &[Stmt], t: &Types) -> Option<(Stmt, Stmt, usize)> {
    let (Stmt::Loop(r), Stmt::Loop(f)) = (red, fin) else {
        return None;
    };
    let (Iter::Range { extent: n }, Iter::Range { extent: m }) = (&r.iter, &f.iter) else {
        return None;
    };
    let [Stmt::Update { acc, op, value }] = r.body.as_slice() else {
        return None;
    };
    let [Stmt::Store {
        buf,
        index,
        value: w,
    }] = f.body.as_slice()
    else {
        return None;
    };
    let ty = (t.buf)(*buf);
    let moves = index.stride_of(f.var) != 0 && index.stride_of(r.var) == 0;
    let cost = costly(value);
    if n != m || !moves || cost == 0 || t.of(value) != Some(ty) || ty.compute() != ty {
        return None;
    }
    // Nothing in between, nor `V` nor `W`, touches the buffer, and what `V` reads does not
    // change in between.
    let reads = |e: &Expr, b: BufId| {
        let mut found = false;
        e.visit(&mut |x| found |= matches!(x, Expr::Load { buf, .. } if *buf == b));
        found
    };
    let (touched, writes) = crate::walk::stmt_reads_writes(between);
    if reads(value, *buf) || reads(w, *buf) || touched.contains(buf) || writes.contains(buf) {
        return None;
    }
    if writes.iter().any(|b| reads(value, *b)) {
        return None;
    }
    let mut changing = crate::walk::stmt_lets(between);
    changing.insert(*acc);
    for s in between {
        s.visit(&mut |x| {
            if let Stmt::Update { acc, .. } = x {
                changing.insert(*acc);
            }
        });
    }
    let mut reads_changing = false;
    value.visit(&mut |x| reads_changing |= matches!(x, Expr::Acc(a) if changing.contains(a)));
    if reads_changing {
        return None;
    }
    let stored = |ix: Index| Expr::Load {
        buf: *buf,
        index: ix,
    };
    let (w, found) = replace(w, &rename(value, r.var, f.var), &stored(index.clone()));
    if !found {
        return None;
    }
    let at = rename_index(index, f.var, r.var);
    let mut r = r.clone();
    r.body = vec![
        Stmt::Store {
            buf: *buf,
            index: at.clone(),
            value: value.clone(),
        },
        Stmt::Update {
            acc: *acc,
            op: *op,
            value: stored(at),
        },
    ];
    let mut f = f.clone();
    f.body = vec![Stmt::Store {
        buf: *buf,
        index: index.clone(),
        value: w,
    }];
    Some((Stmt::Loop(r), Stmt::Loop(f), cost))
}

/// Moves loop-invariant arithmetic on accumulators out of loops: a sub-expression of a loop's
/// body that reads only accumulators final before the loop (and constants), and computes
/// something (not a bare leaf), becomes a `Let` just before the loop, evaluated once instead of
/// once per iteration. A layer norm's `x - a0 / n` and `/ sqrt(a1 / n + eps)` then divide and
/// take the root once per row, not once per element. The same operations run in the same
/// order on the same values, so results are bit-identical.
pub fn hoist_invariants(body: Vec<Stmt>) -> Vec<Stmt> {
    let mut next = crate::walk::stmt_lets(&body)
        .iter()
        .chain(&crate::walk::stmt_accs(&body))
        .map(|a| a.0 + 1)
        .max()
        .unwrap_or(0);
    hoist_block(body, &mut next)
}

fn hoist_block(body: Vec<Stmt>, next: &mut u32) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(body.len());
    for s in body {
        let Stmt::Loop(mut l) = s else {
            out.push(s);
            continue;
        };
        l.body = hoist_block(l.body, next);
        // Accumulators the loop declares or updates are not final before it.
        let mut changing = crate::walk::stmt_lets(&l.body);
        l.body.iter().for_each(|st| {
            st.visit(&mut |x| {
                if let Stmt::Update { acc, .. } = x {
                    changing.insert(*acc);
                }
            })
        });
        let mut types: BTreeMap<AccId, ElemType> = BTreeMap::new();
        out.iter()
            .chain(std::iter::once(&Stmt::Loop(l.clone())))
            .for_each(|st: &Stmt| {
                st.visit(&mut |x| {
                    if let Stmt::Let { acc, ty, .. } = x {
                        types.insert(*acc, *ty);
                    }
                })
            });
        let mut lets = Vec::new();
        l.body = hoist_in(l.body, &changing, &types, next, &mut lets);
        out.extend(lets);
        out.push(Stmt::Loop(l));
    }
    out
}

/// Rewrites the expressions of `stmts` (and of nested loops), replacing each maximal invariant
/// sub-expression by a new accumulator whose `Let` is pushed to `lets`.
fn hoist_in(
    stmts: Vec<Stmt>,
    changing: &BTreeSet<AccId>,
    types: &BTreeMap<AccId, ElemType>,
    next: &mut u32,
    lets: &mut Vec<Stmt>,
) -> Vec<Stmt> {
    stmts
        .into_iter()
        .map(|s| match s {
            Stmt::Loop(mut l) => {
                l.body = hoist_in(l.body, changing, types, next, lets);
                Stmt::Loop(l)
            }
            other => other.map_exprs(&mut |e| hoist_expr(e, changing, types, next, lets), &|ix| {
                ix.clone()
            }),
        })
        .collect()
}

fn hoist_expr(
    e: &Expr,
    changing: &BTreeSet<AccId>,
    types: &BTreeMap<AccId, ElemType>,
    next: &mut u32,
    lets: &mut Vec<Stmt>,
) -> Expr {
    let mut reads_acc = false;
    e.visit(&mut |x| reads_acc |= matches!(x, Expr::Acc(_)));
    // Constant-only expressions are left to the backends' constant folding.
    if reads_acc && !matches!(e, Expr::Acc(_)) {
        if let Some(Some(ty)) = invariant_type(e, changing, types) {
            // The same expression hoisted to the same place once (`x - mean` read twice).
            let same = lets.iter().find_map(|s| match s {
                Stmt::Let { acc, ty: t, init } if *t == ty && init == e => Some(*acc),
                _ => None,
            });
            if let Some(acc) = same {
                return Expr::Acc(acc);
            }
            let acc = AccId(*next);
            *next += 1;
            lets.push(Stmt::Let {
                acc,
                ty,
                init: e.clone(),
            });
            return Expr::Acc(acc);
        }
    }
    e.map_children(|c| hoist_expr(c, changing, types, next, lets))
}

/// `None` when `e` is not invariant (it loads, reads an index or a changing accumulator);
/// `Some(ty)` with the compute type it has on its own (`Some(None)`: only constants, whose type
/// comes from where they are used, so not hoisted).
fn invariant_type(
    e: &Expr,
    changing: &BTreeSet<AccId>,
    types: &BTreeMap<AccId, ElemType>,
) -> Option<Option<ElemType>> {
    let join = |a: Option<ElemType>, b: Option<ElemType>| match (a, b) {
        (Some(ElemType::F64), _) | (_, Some(ElemType::F64)) => Some(ElemType::F64),
        (Some(t), _) | (_, Some(t)) => Some(t),
        (None, None) => None,
    };
    match e {
        Expr::Const(_) => Some(None),
        Expr::Acc(a) => {
            if changing.contains(a) {
                None
            } else {
                Some(Some(*types.get(a)?))
            }
        }
        Expr::Load { .. } | Expr::Iota(_) => None,
        Expr::Cast(t, x) => {
            invariant_type(x, changing, types)?;
            Some(Some(t.compute()))
        }
        Expr::Unary(_, x) => invariant_type(x, changing, types),
        Expr::Binary(_, a, b) => Some(join(
            invariant_type(a, changing, types)?,
            invariant_type(b, changing, types)?,
        )),
        // The condition's type does not decide the result's.
        Expr::Select(c, a, b) => {
            invariant_type(c, changing, types)?;
            Some(join(
                invariant_type(a, changing, types)?,
                invariant_type(b, changing, types)?,
            ))
        }
    }
}

// ---- Program passes ----------------------------------------------------------------------------

/// The copy a kernel makes, when all it does is copy every element of one buffer into the same
/// position of another of the same type and size (`y[i] = t[i]`, as a rearrange that moves no
/// element leaves behind the kernel that computed `t`): `(destination, source)`.
fn whole_copy(p: &LoopProgram, k: &Kernel) -> Option<(BufId, BufId)> {
    let mut extents: BTreeMap<VarId, u64> = BTreeMap::new();
    let mut body = k.body.as_slice();
    let (dst, src, index) = loop {
        match body {
            [Stmt::Loop(Loop {
                var,
                iter: Iter::Range { extent },
                body: inner,
                ..
            })] => {
                extents.insert(*var, *extent);
                body = inner;
            }
            [Stmt::Store {
                buf,
                index,
                value:
                    Expr::Load {
                        buf: src,
                        index: si,
                    },
            }] if same_elements(index, si) => break (*buf, *src, index),
            _ => return None,
        }
    };
    let (d, s) = (p.buffer(dst), p.buffer(src));
    if dst == src || d.ty != s.ty || d.elems != s.elems || index.offset != 0 {
        return None;
    }
    // Every loop steps one index term, and the terms, smallest stride first, lay the elements
    // end to end: each element once.
    let mut terms = index.terms.clone();
    terms.sort_by_key(|t| t.1);
    let mut next = 1i64;
    for (v, stride) in &terms {
        let e = extents.remove(v)?;
        if *stride != next {
            return None;
        }
        next = next.checked_mul(i64::try_from(e).ok()?)?;
    }
    (extents.is_empty() && u64::try_from(next).ok()? == d.elems).then_some((dst, src))
}

/// Whether two indices reach the same element for every value of their variables: the same
/// offset and the same stride per variable.
fn same_elements(a: &Index, b: &Index) -> bool {
    let strides = |i: &Index| {
        let mut m: BTreeMap<VarId, i64> = BTreeMap::new();
        for (v, s) in &i.terms {
            *m.entry(*v).or_default() += s;
        }
        m.retain(|_, s| *s != 0);
        m
    };
    a.offset == b.offset && strides(a) == strides(b)
}

/// Drops kernels that only copy a temporary whole into another buffer in place (see
/// [`whole_copy`]): the kernels that wrote the temporary write the destination instead, and
/// later reads of it read the destination. Only where nothing else touches the destination and
/// nothing after the copy writes the temporary. Then removes the temporaries no kernel uses
/// and renumbers the other buffers; returns each old buffer's new id (`None`: removed).
pub fn forward_copies(p: &mut LoopProgram) -> Vec<Option<BufId>> {
    'search: loop {
        for (i, k) in p.kernels.iter().enumerate() {
            let Some((dst, src)) = whole_copy(p, k) else {
                continue;
            };
            if p.buffer(src).role != Role::Temp
                || !matches!(p.buffer(dst).role, Role::Temp | Role::Output(_))
            {
                continue;
            }
            let others = p.kernels.iter().enumerate().filter(|(j, _)| *j != i);
            if others
                .clone()
                .any(|(_, o)| walk::stmt_buffers(&o.body).contains(&dst))
                || others
                    .filter(|(j, _)| *j > i)
                    .any(|(_, o)| walk::stmt_reads_writes(&o.body).1.contains(&src))
            {
                continue;
            }
            p.kernels.remove(i);
            let rename = |b: BufId| if b == src { dst } else { b };
            for k in &mut p.kernels {
                k.body = k.body.iter().map(|s| s.map_buffers(&rename)).collect();
            }
            continue 'search;
        }
        break;
    }
    let mut used = BTreeSet::new();
    for k in &p.kernels {
        used.extend(walk::stmt_buffers(&k.body));
    }
    let mut map = Vec::with_capacity(p.buffers.len());
    let mut kept = Vec::new();
    for (i, b) in p.buffers.drain(..).enumerate() {
        if b.role == Role::Temp && !used.contains(&BufId(i as u32)) {
            map.push(None);
        } else {
            map.push(Some(BufId(kept.len() as u32)));
            kept.push(b);
        }
    }
    p.buffers = kept;
    if map
        .iter()
        .enumerate()
        .any(|(i, m)| *m != Some(BufId(i as u32)))
    {
        let renumber = |b: BufId| map[b.0 as usize].unwrap_or(b);
        for k in &mut p.kernels {
            k.body = k.body.iter().map(|s| s.map_buffers(&renumber)).collect();
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{BufId, UnOp};

    fn range(var: u32, extent: u64, body: Vec<Stmt>) -> Stmt {
        Stmt::Loop(Loop {
            var: VarId(var),
            iter: Iter::Range { extent },
            parallel: false,
            vector: 1,
            gpu: None,
            body,
        })
    }

    fn load(var: u32) -> Expr {
        Expr::Load {
            buf: BufId(0),
            index: Index {
                offset: 0,
                terms: vec![(VarId(var), 1)],
            },
        }
    }

    fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }

    fn let_(acc: u32, ty: ElemType, init: Expr) -> Stmt {
        Stmt::Let {
            acc: AccId(acc),
            ty,
            init,
        }
    }

    fn store(var: u32, value: Expr) -> Stmt {
        Stmt::Store {
            buf: BufId(1),
            index: Index {
                offset: 0,
                terms: vec![(VarId(var), 1)],
            },
            value,
        }
    }

    /// `a0 = Σ x; a1 = Σ (x - a0/n)²; y = (x - a0/n) / sqrt(a1/n + eps)`, a layer norm's row.
    fn norm_row(ty: ElemType) -> Vec<Stmt> {
        let mean = || bin(BinOp::Div, Expr::Acc(AccId(0)), Expr::Const(8.0));
        let centred = |v| bin(BinOp::Sub, load(v), mean());
        vec![
            let_(0, ty, Expr::Const(0.0)),
            range(
                1,
                8,
                vec![Stmt::Update {
                    acc: AccId(0),
                    op: AccOp::Add,
                    value: load(1),
                }],
            ),
            let_(1, ty, Expr::Const(0.0)),
            range(
                2,
                8,
                vec![Stmt::Update {
                    acc: AccId(1),
                    op: AccOp::Add,
                    value: bin(BinOp::Mul, centred(2), centred(2)),
                }],
            ),
            range(
                3,
                8,
                vec![store(
                    3,
                    bin(
                        BinOp::Div,
                        centred(3),
                        Expr::Unary(
                            UnOp::Sqrt,
                            Box::new(bin(
                                BinOp::Add,
                                bin(BinOp::Div, Expr::Acc(AccId(1)), Expr::Const(8.0)),
                                Expr::Const(1e-5),
                            )),
                        ),
                    ),
                )],
            ),
        ]
    }

    #[test]
    fn hoists_per_row_statistics_once_per_loop() {
        let out = hoist_invariants(vec![range(0, 4, norm_row(ElemType::F32))]);
        let Stmt::Loop(row) = &out[0] else {
            panic!("{out:?}")
        };
        let text: Vec<String> = row
            .body
            .iter()
            .map(|s| match s {
                Stmt::Let { acc, ty, init } => format!("let a{}: {ty:?} = {init:?}", acc.0),
                Stmt::Loop(l) => format!("loop v{}", l.var.0),
                other => format!("{other:?}"),
            })
            .collect();
        // One mean before the squares (used twice there), one mean and one root before the map.
        assert_eq!(text.len(), 8, "{text:#?}");
        assert!(
            text[3].starts_with("let a2: F32 = Binary(Div, Acc(AccId(0))"),
            "{text:#?}"
        );
        assert_eq!(text[4], "loop v2");
        assert!(text[5].starts_with("let a3: F32 = Binary(Div"), "{text:#?}");
        assert!(text[6].starts_with("let a4: F32 = Unary(Sqrt"), "{text:#?}");
        assert_eq!(text[7], "loop v3");
        // The squares read a2 twice; nothing inside a loop divides any more.
        let Stmt::Loop(sq) = &row.body[4] else {
            panic!()
        };
        let Stmt::Update { value, .. } = &sq.body[0] else {
            panic!()
        };
        assert_eq!(
            *value,
            bin(
                BinOp::Mul,
                bin(BinOp::Sub, load(2), Expr::Acc(AccId(2))),
                bin(BinOp::Sub, load(2), Expr::Acc(AccId(2)))
            )
        );
    }

    #[test]
    fn keeps_what_changes_loads_and_constants_in_the_loop() {
        // a0 is updated inside the loop that reads it; loads and constant-only arithmetic stay.
        let body = vec![
            let_(0, ElemType::F64, Expr::Const(0.0)),
            range(
                1,
                8,
                vec![
                    Stmt::Update {
                        acc: AccId(0),
                        op: AccOp::Add,
                        value: bin(BinOp::Mul, Expr::Acc(AccId(0)), Expr::Const(0.5)),
                    },
                    store(
                        1,
                        bin(
                            BinOp::Add,
                            load(1),
                            bin(BinOp::Mul, Expr::Const(2.0), Expr::Const(3.0)),
                        ),
                    ),
                ],
            ),
        ];
        assert_eq!(hoist_invariants(body.clone()), body);
        // An f64 accumulator gives an f64 `Let`.
        let out = hoist_invariants(norm_row(ElemType::F64));
        assert!(out
            .iter()
            .any(|s| matches!(s, Stmt::Let { ty: ElemType::F64, acc, .. } if acc.0 == 2)));
    }

    /// Only powers of two within `2^±100` have an exact reciprocal here; with one, dividing and
    /// multiplying by the reciprocal agree bit for bit in f32 and f64 on every kind of value.
    #[test]
    fn exact_reciprocals_round_as_the_division_does() {
        assert_eq!(exact_reciprocal(8.0), Some(0.125));
        assert_eq!(exact_reciprocal(-0.5), Some(-2.0));
        assert_eq!(exact_reciprocal(1024.0), Some(1.0 / 1024.0));
        for c in [
            3.0,
            0.1,
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NAN,
            2f64.powi(101),
            1e-310,
        ] {
            assert_eq!(exact_reciprocal(c), None, "{c}");
        }
        let xs32 = [
            0.0f32,
            -0.0,
            1.0,
            -3.7,
            f32::MIN_POSITIVE,
            f32::MIN_POSITIVE * 0.75,
            1e-45,
            f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1.2345678e30,
            -7.0e-39,
        ];
        for k in -100..=100 {
            for sign in [1.0, -1.0] {
                let c = sign * 2f64.powi(k);
                let r = exact_reciprocal(c).expect("a power of two");
                for &x in &xs32 {
                    let (d, m) = (x / c as f32, x * r as f32);
                    assert!(
                        d.to_bits() == m.to_bits() || d.is_nan() && m.is_nan(),
                        "{x} / {c}"
                    );
                    let x = x as f64 * 1.0000001;
                    let (d, m) = (x / c, x * r);
                    assert!(
                        d.to_bits() == m.to_bits() || d.is_nan() && m.is_nan(),
                        "{x} / {c}"
                    );
                }
            }
        }
        let body = vec![range(
            0,
            8,
            vec![Stmt::Store {
                buf: BufId(1),
                index: Index {
                    offset: 0,
                    terms: vec![(VarId(0), 1)],
                },
                value: bin(
                    BinOp::Div,
                    bin(BinOp::Div, load(0), Expr::Const(8.0)),
                    Expr::Const(3.0),
                ),
            }],
        )];
        let Stmt::Loop(l) = &exact_reciprocals(body)[0] else {
            unreachable!()
        };
        let Stmt::Store { value, .. } = &l.body[0] else {
            unreachable!()
        };
        let want = bin(
            BinOp::Div,
            bin(BinOp::Mul, load(0), Expr::Const(0.125)),
            Expr::Const(3.0),
        );
        assert_eq!(value, &want);
    }

    /// Softmax's two loops over a row: the sum of `exp(x)`, then `exp(x) / sum`.
    fn softmax_row(between: Vec<Stmt>) -> Vec<Stmt> {
        let e = |v| Expr::Unary(UnOp::Exp, Box::new(load(v)));
        let mut body = vec![
            let_(0, ElemType::F32, Expr::Const(0.0)),
            range(
                1,
                64,
                vec![Stmt::Update {
                    acc: AccId(0),
                    op: AccOp::Add,
                    value: e(1),
                }],
            ),
        ];
        body.extend(between);
        body.push(range(
            2,
            64,
            vec![store(2, bin(BinOp::Div, e(2), Expr::Acc(AccId(0))))],
        ));
        body
    }

    /// The sum's loop stores `exp(x)` where the second loop would store its result, and the
    /// second loop reads it back; only into a buffer of the value's own type, and only when
    /// nothing in between touches that buffer.
    #[test]
    fn a_costly_value_summed_and_stored_is_computed_once() {
        let f32s = |_: BufId| ElemType::F32;
        let got = reuse_stored_values(softmax_row(vec![]), &f32s);
        let y = |v: u32| Expr::Load {
            buf: BufId(1),
            index: Index {
                offset: 0,
                terms: vec![(VarId(v), 1)],
            },
        };
        let want = vec![
            let_(0, ElemType::F32, Expr::Const(0.0)),
            range(
                1,
                64,
                vec![
                    store(1, Expr::Unary(UnOp::Exp, Box::new(load(1)))),
                    Stmt::Update {
                        acc: AccId(0),
                        op: AccOp::Add,
                        value: y(1),
                    },
                ],
            ),
            range(
                2,
                64,
                vec![store(2, bin(BinOp::Div, y(2), Expr::Acc(AccId(0))))],
            ),
        ];
        assert_eq!(got, want);
        // An f16 result would round the stored value.
        let halves = |b: BufId| {
            if b.0 == 1 {
                ElemType::F16
            } else {
                ElemType::F32
            }
        };
        assert_eq!(
            reuse_stored_values(softmax_row(vec![]), &halves),
            softmax_row(vec![])
        );
        // Something in between writes the buffer.
        let between = vec![range(3, 64, vec![store(3, Expr::Const(0.0))])];
        assert_eq!(
            reuse_stored_values(softmax_row(between.clone()), &f32s),
            softmax_row(between)
        );
    }

    /// `offset + Σ stride·var`.
    fn at(offset: i64, terms: &[(u32, i64)]) -> Index {
        Index {
            offset,
            terms: terms.iter().map(|(v, s)| (VarId(*v), *s)).collect(),
        }
    }

    fn copy_kernel(dst: u32, d: Index, src: u32, s: Index, extents: &[u64]) -> Kernel {
        let mut body = vec![Stmt::Store {
            buf: BufId(dst),
            index: d,
            value: Expr::Load {
                buf: BufId(src),
                index: s,
            },
        }];
        for (v, e) in extents.iter().enumerate().rev() {
            body = vec![range(v as u32, *e, body)];
        }
        Kernel {
            name: String::new(),
            origin: String::new(),
            source: None,
            body,
        }
    }

    /// `x` (input 0) → `t` (temp, by kernel 0: `t = x`) → `y` (output, by kernel 1: a copy
    /// of `t` through `copy`), over a 4×6 array.
    fn program(copy: Kernel, extra: Option<Kernel>) -> LoopProgram {
        let buf = |name: &str, role| crate::ir::Buffer {
            name: name.into(),
            ty: ElemType::F32,
            elems: 24,
            role,
        };
        // t[i] = x[i], standing in for the product that computes `t`.
        let twice = copy_kernel(1, at(0, &[(0, 1)]), 0, at(0, &[(0, 1)]), &[24]);
        let mut kernels = vec![twice, copy];
        kernels.extend(extra);
        LoopProgram {
            buffers: vec![
                buf("x", Role::Input(0)),
                buf("t", Role::Temp),
                buf("y", Role::Output(0)),
            ],
            kernels,
            tf32: false,
        }
    }

    #[test]
    fn a_whole_copy_of_a_temporary_is_forwarded_to_its_writer() {
        // y[6i + j] = t[j + 6i]: the same elements, terms in another order.
        let copy = copy_kernel(
            2,
            at(0, &[(0, 6), (1, 1)]),
            1,
            at(0, &[(1, 1), (0, 6)]),
            &[4, 6],
        );
        let mut p = program(copy, None);
        let map = forward_copies(&mut p);
        assert_eq!(map, vec![Some(BufId(0)), None, Some(BufId(1))]);
        assert_eq!(p.buffers.len(), 2);
        assert_eq!(p.kernels.len(), 1);
        assert_eq!(
            walk::stmt_reads_writes(&p.kernels[0].body).1,
            [BufId(1)].into()
        );
        // Column-major over the same elements is still every element once.
        let copy = copy_kernel(
            2,
            at(0, &[(1, 4), (0, 1)]),
            1,
            at(0, &[(0, 1), (1, 4)]),
            &[4, 6],
        );
        let mut p = program(copy, None);
        forward_copies(&mut p);
        assert_eq!(p.kernels.len(), 1);
    }

    #[test]
    fn copies_that_move_or_skip_elements_or_share_their_buffers_stay() {
        let whole = || {
            copy_kernel(
                2,
                at(0, &[(0, 6), (1, 1)]),
                1,
                at(0, &[(0, 6), (1, 1)]),
                &[4, 6],
            )
        };
        let cases = [
            // A transpose.
            (
                copy_kernel(
                    2,
                    at(0, &[(0, 1), (1, 4)]),
                    1,
                    at(0, &[(0, 6), (1, 1)]),
                    &[4, 6],
                ),
                None,
            ),
            // Half the elements.
            (
                copy_kernel(
                    2,
                    at(0, &[(0, 6), (1, 1)]),
                    1,
                    at(0, &[(0, 6), (1, 1)]),
                    &[2, 6],
                ),
                None,
            ),
            // Shifted by one.
            (
                copy_kernel(2, at(1, &[(0, 1)]), 1, at(1, &[(0, 1)]), &[23]),
                None,
            ),
            // Every element twice over a loop the index does not use.
            (
                copy_kernel(2, at(0, &[(0, 1)]), 1, at(0, &[(0, 1)]), &[24, 2]),
                None,
            ),
            // The output is read by a later kernel.
            (
                whole(),
                Some(copy_kernel(1, at(0, &[(0, 1)]), 2, at(0, &[(0, 1)]), &[24])),
            ),
            // The temporary is written after the copy.
            (
                whole(),
                Some(copy_kernel(1, at(0, &[(0, 1)]), 0, at(0, &[(0, 1)]), &[24])),
            ),
        ];
        for (i, (copy, extra)) in cases.into_iter().enumerate() {
            let mut p = program(copy, extra);
            let before = p.clone();
            let map = forward_copies(&mut p);
            assert_eq!(p, before, "case {i}");
            assert!(map
                .iter()
                .enumerate()
                .all(|(i, m)| *m == Some(BufId(i as u32))));
        }
        // A copy from an input is not forwarded either.
        let mut p = program(whole(), None);
        p.buffers[1].role = Role::Input(1);
        let before = p.clone();
        forward_copies(&mut p);
        assert_eq!(p, before);
    }
}
