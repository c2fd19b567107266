//! Einsum contraction-order optimizer and FLOP counting.
//!
//! Given the label lists of the operands of an einsum, the output labels and
//! the extent of every label, [`contraction_path`] chooses the order in which
//! to contract the operands pairwise and reports the cost of that order next to
//! the cost of the naive single-step evaluation, like numpy's `einsum_path` /
//! opt_einsum's `contract_path`.  [`format_path`] renders the report.
//!
//! # FLOP convention (opt_einsum's, exactly)
//!
//! Operand label lists are treated as *sets* (a repeated label, i.e. a
//! diagonal, counts once).  A step that contracts `k` operands whose labels
//! together form the set `S` costs
//!
//! ```text
//! prod(extent(l) for l in S) * (max(1, k - 1) + [the step sums a label away])
//! ```
//!
//! which is opt_einsum's `helpers.flop_count(idx_contract, bool(idx_removed),
//! k, size_dict)` as `contract_path` applies it to every step of a path.  A
//! label is summed away by the first step after which neither the output nor
//! any remaining operand carries it; in particular a label that occurs in one
//! operand only (and not in the output) is summed in the first step involving
//! that operand -- there is no separate pre-reduction step.  A step's result
//! keeps exactly the labels of `S` that are in the output or in some operand
//! not taking part in the step.  A 2-operand matmul `i j, j k -> i k` costs
//! `2·I·J·K`.
//!
//! The naive cost is opt_einsum's `naive_cost`: one step over all labels,
//! `flop_count(all labels, inner, n_operands)`, where (as in opt_einsum and
//! numpy) `inner` is true iff some label occurs in two or more operands.
//!
//! "Largest intermediate" ([`ContractionPath::largest_intermediate_elems`])
//! counts intermediates only: the largest result of any step but the last, so
//! 0 for a single-step path.  opt_einsum's and numpy's printouts also count the
//! final result; that figure is [`ContractionPath::largest_result_elems`].
//!
//! # Search
//!
//! * 0 operands: empty path, all counts zero.  1 operand: one step `[0]`.
//!   2 operands: one step `[0, 1]` (the path is trivial, as in opt_einsum).
//! * 3 ..= [`MAX_OPTIMAL_OPERANDS`] operands: exact minimum-FLOP pairwise order by
//!   dynamic programming over operand subsets.  Because a group of operands
//!   always contracts to the same label set (its labels that are in the output
//!   or outside the group), the cost of a path is the sum over the nodes of its
//!   contraction tree, and the DP over all binary trees (outer products
//!   included) finds the same minimum as opt_einsum's exhaustive `optimal`
//!   search over all pairwise orders.  `tests/python/gen_order_cases.py`
//!   checks that the DP equals brute-force enumeration of every path costed by
//!   opt_einsum itself.  Note: opt_einsum 3.4's `optimal` returns that minimum
//!   for ordinary einsums (each label in at most two operands, or in one
//!   operand and the output) but can return a *worse* path when a label occurs
//!   in three or more operands or in a single operand only (upstream issues
//!   dgasmith/opt_einsum#167, #254: its search caches pair costs by label sets
//!   and under-counts the summation of unshared labels).  There this module
//!   returns the true minimum, which is lower than opt_einsum's `opt_cost`.
//! * More operands: greedy, best of six variants.  Each variant repeatedly
//!   contracts one pair of current operands until one operand is left.  Phase 1
//!   considers the pairs that share a label -- any label, or (opt_einsum's rule)
//!   a label not in the output -- and takes the pair minimising one of three
//!   keys: `size(result) - size(a) - size(b)` then step FLOPs (opt_einsum's
//!   "memory-removed" cost), step FLOPs then memory removed, or `size(result)`
//!   then step FLOPs.  When no pair qualifies, phase 2 contracts the pair with
//!   the smallest result, then fewest FLOPs (outer products).  The variant
//!   path with the fewest total FLOPs wins; ties go to the smaller largest
//!   intermediate, then to the earlier variant (keys in the order listed, each
//!   first with the summable-label rule, then with any label).  `O(n^3)` pair
//!   evaluations per variant.
//!
//! # Tie-breaking (determinism)
//!
//! The DP minimises total FLOPs, then the largest step result (elements) within
//! the tree; remaining ties go to the split whose part containing the
//! lowest-numbered operand has the smallest operand bit mask.  The tree is
//! emitted in post-order, the part containing the lowest-numbered operand
//! first.  The greedy breaks remaining ties by the lowest pair of positions
//! `(i, j)` in lexicographic order.
//!
//! # Path format
//!
//! Steps use numpy/opt_einsum "linear" positions: `operands` lists positions in
//! the *current* operand list (ascending); those operands are removed and the
//! result is appended at the end.  An intermediate's `result_labels` are
//! ordered by first appearance in the step's operands (scanned in ascending
//! position order, each operand in its own label order); the final step's
//! `result_labels` are the output labels in output order (duplicates dropped).
//! `removed` is sorted ascending by label id.
//!
//! # Robustness
//!
//! Counts are `u128`; on overflow they saturate at `u128::MAX` and
//! [`ContractionPath::overflow`] is set.  No input panics: a label with no
//! entry in `extents` counts as extent 1, output labels that occur in no input
//! are ignored, zero extents simply give zero costs.

use std::fmt::Write as _;

/// Largest operand count for which [`contraction_path`] searches exhaustively
/// (dynamic programming); beyond it the greedy heuristic is used.
pub const MAX_OPTIMAL_OPERANDS: usize = 8;

/// One contraction step of a [`ContractionPath`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathStep {
    /// Positions in the CURRENT operand list, opt_einsum/numpy style: the two (or one) contracted
    /// operands are removed and the result is appended at the end.  Ascending.
    pub operands: Vec<usize>,
    /// Labels of the intermediate/output produced (order: see the module docs).
    pub result_labels: Vec<usize>,
    /// Labels summed away in this step, ascending.
    pub removed: Vec<usize>,
    /// FLOPs of this step (module-level convention).
    pub flops: u128,
    /// Number of elements of the result.
    pub result_elems: u128,
    /// Number of distinct labels taking part in the step (numpy's "scaling").
    pub scaling: usize,
}

/// A contraction order with its cost report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractionPath {
    pub steps: Vec<PathStep>,
    /// opt_einsum's `naive_cost`.
    pub naive_flops: u128,
    /// Sum of the step FLOPs (opt_einsum's `opt_cost`).
    pub opt_flops: u128,
    /// Largest intermediate in elements: the largest result of any step except
    /// the last (0 for 0- or 1-step paths).
    pub largest_intermediate_elems: u128,
    /// Largest result of any step, final output included, in elements: the
    /// figure opt_einsum's and numpy's reports call "Largest intermediate".
    pub largest_result_elems: u128,
    /// false when the greedy heuristic (or an explicit path) was used.
    pub optimal: bool,
    /// The planner chose this path over the fewest-FLOP one because it needs fewer relayout
    /// copies (`plan::cost::einsum_path`).
    pub for_layout: bool,
    /// Number of distinct input labels (numpy's "Naive scaling").
    pub naive_scaling: usize,
    /// Largest step `scaling` (numpy's "Optimized scaling").
    pub opt_scaling: usize,
    /// Some count exceeded `u128::MAX` and was saturated.
    pub overflow: bool,
}

impl ContractionPath {
    /// `naive_flops / max(opt_flops, 1)`, like opt_einsum's "Theoretical speedup".
    pub fn speedup(&self) -> f64 {
        self.naive_flops as f64 / self.opt_flops.max(1) as f64
    }

    /// The path as position lists (opt_einsum's `path` / numpy's `einsum_path`).
    pub fn linear_path(&self) -> Vec<Vec<usize>> {
        self.steps.iter().map(|s| s.operands.clone()).collect()
    }
}

/// opt_einsum's `flop_count(idx_contraction, inner, num_terms, size_dict)`:
/// `prod(extents of labels) * (max(1, n_terms - 1) + inner)`.  `labels` is
/// treated as a set (a repeated label counts once); a label without an extent
/// counts as 1.  Saturates at `u128::MAX` (see [`checked_flop_count`]).
pub fn flop_count(labels: &[usize], inner: bool, n_terms: usize, extents: &[u64]) -> u128 {
    checked_flop_count(labels, inner, n_terms, extents).unwrap_or(u128::MAX)
}

/// [`flop_count`], `None` on `u128` overflow.
pub fn checked_flop_count(
    labels: &[usize],
    inner: bool,
    n_terms: usize,
    extents: &[u64],
) -> Option<u128> {
    let mut set: Vec<usize> = labels.to_vec();
    set.sort_unstable();
    set.dedup();
    let size = set
        .iter()
        .try_fold(1u128, |acc, &l| acc.checked_mul(extent_of(extents, l)))?;
    size.checked_mul(op_factor(n_terms, inner))
}

fn extent_of(extents: &[u64], label: usize) -> u128 {
    extents.get(label).copied().map_or(1, u128::from)
}

fn op_factor(n_terms: usize, inner: bool) -> u128 {
    n_terms.saturating_sub(1).max(1) as u128 + u128::from(inner)
}

/// Chooses the contraction order (exact for up to [`MAX_OPTIMAL_OPERANDS`]
/// operands, greedy beyond) and reports its cost.  See the module docs.
pub fn contraction_path(
    inputs: &[Vec<usize>],
    output: &[usize],
    extents: &[u64],
) -> ContractionPath {
    let p = Problem::new(inputs, output, extents);
    let n = inputs.len();
    let (linear, optimal) = match n {
        0 => (Vec::new(), true),
        1 => (vec![vec![0]], true),
        2 => (vec![vec![0, 1]], true),
        _ if n <= MAX_OPTIMAL_OPERANDS => (optimal_linear(&p), true),
        _ => {
            // Best of the greedy variants: fewest FLOPs, then smallest largest
            // intermediate, then the first variant in GREEDY_KEYS order.
            let mut best: Option<ContractionPath> = None;
            for (key, summable) in GREEDY_KEYS
                .into_iter()
                .flat_map(|k| [(k, true), (k, false)])
            {
                if let Some(c) = p.evaluate(&greedy_linear(&p, key, summable), false) {
                    let better = best.as_ref().is_none_or(|b| {
                        (c.opt_flops, c.largest_intermediate_elems)
                            < (b.opt_flops, b.largest_intermediate_elems)
                    });
                    if better {
                        best = Some(c);
                    }
                }
            }
            if let Some(b) = best {
                return b;
            }
            (vec![(0..n).collect()], false)
        }
    };
    match p.evaluate(&linear, optimal) {
        Some(path) => path,
        // Unreachable for the paths built above; fall back to one step over
        // everything (always valid) rather than panic.
        None => p
            .evaluate(&[(0..n).collect()], false)
            .unwrap_or_else(|| p.empty_path()),
    }
}

/// Costs an explicit path (position lists, as in [`PathStep::operands`]; each
/// list may name one or more operands), like opt_einsum's
/// `contract_path(..., optimize=path)`.  `None` if the path is not valid:
/// a position out of range, an empty step, or more than one operand left at
/// the end.  The result has `optimal == false`.
pub fn evaluate_path(
    inputs: &[Vec<usize>],
    output: &[usize],
    extents: &[u64],
    path: &[Vec<usize>],
) -> Option<ContractionPath> {
    Problem::new(inputs, output, extents).evaluate(path, false)
}

// ---------------------------------------------------------------------------
// Label sets

/// A set of dense label indices.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(words: usize) -> Self {
        Bits(vec![0; words])
    }

    fn insert(&mut self, i: usize) {
        if let Some(w) = self.0.get_mut(i / 64) {
            *w |= 1u64 << (i % 64);
        }
    }

    fn contains(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| (w >> (i % 64)) & 1 == 1)
    }

    fn zip(&self, o: &Bits, f: impl Fn(u64, u64) -> u64) -> Bits {
        Bits(self.0.iter().zip(&o.0).map(|(&a, &b)| f(a, b)).collect())
    }

    fn union(&self, o: &Bits) -> Bits {
        self.zip(o, |a, b| a | b)
    }

    fn inter(&self, o: &Bits) -> Bits {
        self.zip(o, |a, b| a & b)
    }

    fn minus(&self, o: &Bits) -> Bits {
        self.zip(o, |a, b| a & !b)
    }

    fn union_with(&mut self, o: &Bits) {
        for (a, b) in self.0.iter_mut().zip(&o.0) {
            *a |= b;
        }
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    fn intersects(&self, o: &Bits) -> bool {
        self.0.iter().zip(&o.0).any(|(a, b)| a & b != 0)
    }

    fn is_subset(&self, o: &Bits) -> bool {
        self.0.iter().zip(&o.0).all(|(a, b)| a & !b == 0)
    }

    fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0
            .iter()
            .enumerate()
            .flat_map(|(wi, &w)| BitIter { w, base: wi * 64 })
    }
}

struct BitIter {
    w: u64,
    base: usize,
}

impl Iterator for BitIter {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.w == 0 {
            return None;
        }
        let tz = self.w.trailing_zeros() as usize;
        self.w &= self.w - 1;
        Some(self.base + tz)
    }
}

fn mul_sat(a: u128, b: u128, of: &mut bool) -> u128 {
    a.checked_mul(b).unwrap_or_else(|| {
        *of = true;
        u128::MAX
    })
}

fn add_sat(a: u128, b: u128, of: &mut bool) -> u128 {
    a.checked_add(b).unwrap_or_else(|| {
        *of = true;
        u128::MAX
    })
}

// ---------------------------------------------------------------------------
// Problem: labels remapped to dense indices 0..m (ascending label id).

struct Problem {
    /// dense index -> label id (ascending).
    ids: Vec<usize>,
    /// dense index -> extent.
    ext: Vec<u128>,
    words: usize,
    inputs: Vec<Bits>,
    /// Each input's labels as dense indices, in the caller's order (duplicates kept).
    input_orders: Vec<Vec<usize>>,
    output: Bits,
    /// Output labels as dense indices, caller's order, duplicates dropped.
    output_order: Vec<usize>,
}

impl Problem {
    fn new(inputs: &[Vec<usize>], output: &[usize], extents: &[u64]) -> Self {
        let mut ids: Vec<usize> = inputs.iter().flatten().chain(output).copied().collect();
        ids.sort_unstable();
        ids.dedup();
        let dense = |l: &usize| ids.binary_search(l).unwrap_or_default();
        let ext = ids.iter().map(|&l| extent_of(extents, l)).collect();
        let words = ids.len().div_ceil(64);
        let mk = |ls: &[usize]| {
            let mut b = Bits::new(words);
            for l in ls {
                b.insert(dense(l));
            }
            b
        };
        let input_orders: Vec<Vec<usize>> = inputs
            .iter()
            .map(|t| t.iter().map(dense).collect())
            .collect();
        let mut output_order: Vec<usize> = Vec::new();
        for d in output.iter().map(dense) {
            if !output_order.contains(&d) {
                output_order.push(d);
            }
        }
        Problem {
            inputs: inputs.iter().map(|t| mk(t)).collect(),
            output: mk(output),
            ext,
            words,
            input_orders,
            output_order,
            ids,
        }
    }

    fn size(&self, s: &Bits, of: &mut bool) -> u128 {
        s.iter().fold(1u128, |acc, i| {
            mul_sat(acc, self.ext.get(i).copied().unwrap_or(1), of)
        })
    }

    fn step_flops(&self, contract: &Bits, removes: bool, n_terms: usize, of: &mut bool) -> u128 {
        let size = self.size(contract, of);
        mul_sat(size, op_factor(n_terms, removes), of)
    }

    fn label_ids(&self, dense: impl IntoIterator<Item = usize>) -> Vec<usize> {
        dense
            .into_iter()
            .filter_map(|d| self.ids.get(d).copied())
            .collect()
    }

    fn empty_path(&self) -> ContractionPath {
        ContractionPath {
            for_layout: false,
            steps: Vec::new(),
            naive_flops: 0,
            opt_flops: 0,
            largest_intermediate_elems: 0,
            largest_result_elems: 0,
            optimal: true,
            naive_scaling: 0,
            opt_scaling: 0,
            overflow: false,
        }
    }

    /// Costs a linear path exactly as opt_einsum's `contract_path` does.
    fn evaluate(&self, path: &[Vec<usize>], optimal: bool) -> Option<ContractionPath> {
        let n = self.inputs.len();
        if n == 0 {
            return path.is_empty().then(|| self.empty_path());
        }
        let mut of = false;

        // Naive cost: one step over everything.
        let mut all = Bits::new(self.words);
        for s in &self.inputs {
            all.union_with(s);
        }
        let inner = self.inputs.iter().map(Bits::len).sum::<usize>() > all.len();
        let naive_flops = self.step_flops(&all, inner, n, &mut of);

        // (label set, display order as dense indices)
        let mut cur: Vec<(Bits, Vec<usize>)> = self
            .inputs
            .iter()
            .cloned()
            .zip(self.input_orders.iter().cloned())
            .collect();
        let mut steps = Vec::with_capacity(path.len());
        let (mut opt_flops, mut opt_scaling) = (0u128, 0usize);
        let (mut largest, mut largest_result) = (0u128, 0u128);
        for (si, step) in path.iter().enumerate() {
            let mut pos = step.clone();
            pos.sort_unstable();
            pos.dedup();
            match pos.last() {
                Some(&last) if last < cur.len() => {}
                _ => return None,
            }
            let mut taken: Vec<(Bits, Vec<usize>)> =
                pos.iter().rev().map(|&p| cur.remove(p)).collect();
            taken.reverse();
            let mut contract = Bits::new(self.words);
            for (s, _) in &taken {
                contract.union_with(s);
            }
            let mut keep = self.output.clone();
            for (s, _) in &cur {
                keep.union_with(s);
            }
            let result = contract.inter(&keep);
            let removed = contract.minus(&result);
            let flops = self.step_flops(&contract, !removed.is_empty(), pos.len(), &mut of);
            let result_elems = self.size(&result, &mut of);
            let order: Vec<usize> = if si + 1 == path.len() && cur.is_empty() {
                self.output_order
                    .iter()
                    .copied()
                    .filter(|&d| result.contains(d))
                    .collect()
            } else {
                let mut o: Vec<usize> = Vec::with_capacity(result.len());
                for &d in taken.iter().flat_map(|(_, ord)| ord) {
                    if result.contains(d) && !o.contains(&d) {
                        o.push(d);
                    }
                }
                o
            };
            opt_flops = add_sat(opt_flops, flops, &mut of);
            largest_result = largest_result.max(result_elems);
            if si + 1 < path.len() {
                largest = largest.max(result_elems);
            }
            opt_scaling = opt_scaling.max(contract.len());
            steps.push(PathStep {
                operands: pos,
                result_labels: self.label_ids(order.iter().copied()),
                removed: self.label_ids(removed.iter()),
                flops,
                result_elems,
                scaling: contract.len(),
            });
            cur.push((result, order));
        }
        if cur.len() != 1 {
            return None;
        }
        Some(ContractionPath {
            for_layout: false,
            steps,
            naive_flops,
            opt_flops,
            largest_intermediate_elems: largest,
            largest_result_elems: largest_result,
            optimal,
            naive_scaling: all.len(),
            opt_scaling,
            overflow: of,
        })
    }
}

// ---------------------------------------------------------------------------
// Exact search: DP over operand subsets (n <= MAX_OPTIMAL_OPERANDS).

fn optimal_linear(p: &Problem) -> Vec<Vec<usize>> {
    let n = p.inputs.len().min(MAX_OPTIMAL_OPERANDS);
    let full = (1usize << n) - 1;
    let mut of = false; // the final evaluation recomputes the overflow flag
    let mut union = vec![Bits::new(p.words); full + 1];
    for m in 1..=full {
        let low = m & m.wrapping_neg();
        let i = low.trailing_zeros() as usize;
        union[m] = union[m ^ low].union(&p.inputs[i]);
    }
    // keep[m]: labels needed outside group m; labels[m]: the group's tensor.
    let keep: Vec<Bits> = (0..=full)
        .map(|m| p.output.union(&union[full ^ m]))
        .collect();
    let labels: Vec<Bits> = (0..=full)
        .map(|m| {
            if m.is_power_of_two() {
                p.inputs[m.trailing_zeros() as usize].clone()
            } else {
                union[m].inter(&keep[m])
            }
        })
        .collect();
    let result_size: Vec<u128> = labels.iter().map(|s| p.size(s, &mut of)).collect();

    let mut best = vec![0u128; full + 1];
    let mut peak = vec![0u128; full + 1];
    let mut choice = vec![0usize; full + 1];
    for m in 1..=full {
        if m.is_power_of_two() {
            continue;
        }
        let low = m & m.wrapping_neg();
        let rest = m ^ low;
        let mut found: Option<(u128, u128, usize)> = None;
        // Submasks s of `rest` in increasing order; part a = s | low, b = m ^ a.
        let mut s = 0usize;
        while s != rest {
            let a = s | low;
            let b = m ^ a;
            let either = labels[a].union(&labels[b]);
            let removes = !either.is_subset(&keep[m]);
            let flops = p.step_flops(&either, removes, 2, &mut of);
            let total = add_sat(add_sat(best[a], best[b], &mut of), flops, &mut of);
            let pk = peak[a].max(peak[b]).max(result_size[m]);
            if found.is_none_or(|(bt, bp, _)| (total, pk) < (bt, bp)) {
                found = Some((total, pk, a));
            }
            s = s.wrapping_sub(rest) & rest;
        }
        if let Some((t, pk, a)) = found {
            best[m] = t;
            peak[m] = pk;
            choice[m] = a;
        }
    }

    let mut merges = Vec::with_capacity(n.saturating_sub(1));
    emit_post_order(full, &choice, &mut merges);
    let mut cur: Vec<usize> = (0..n).map(|i| 1usize << i).collect();
    let mut path = Vec::with_capacity(merges.len());
    for (a, b) in merges {
        let (Some(pa), Some(pb)) = (
            cur.iter().position(|&x| x == a),
            cur.iter().position(|&x| x == b),
        ) else {
            return vec![(0..n).collect()];
        };
        let (lo, hi) = (pa.min(pb), pa.max(pb));
        cur.remove(hi);
        cur.remove(lo);
        cur.push(a | b);
        path.push(vec![lo, hi]);
    }
    path
}

fn emit_post_order(m: usize, choice: &[usize], out: &mut Vec<(usize, usize)>) {
    if m.count_ones() < 2 {
        return;
    }
    let a = choice.get(m).copied().unwrap_or(0);
    if a == 0 || a & !m != 0 || a == m {
        return; // cannot happen for a filled table
    }
    let b = m ^ a;
    emit_post_order(a, choice, out);
    emit_post_order(b, choice, out);
    out.push((a, b));
}

// ---------------------------------------------------------------------------
// Greedy (n > MAX_OPTIMAL_OPERANDS).

fn clamp_i128(x: u128) -> i128 {
    x.min(u128::MAX >> 3) as i128
}

/// What the greedy minimises among pairs sharing a label (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GreedyKey {
    /// `size(result) - size(a) - size(b)`, then step FLOPs (opt_einsum's default).
    MemoryRemoved,
    /// Step FLOPs, then memory removed.
    Flops,
    /// `size(result)`, then step FLOPs.
    ResultSize,
}

const GREEDY_KEYS: [GreedyKey; 3] = [
    GreedyKey::MemoryRemoved,
    GreedyKey::Flops,
    GreedyKey::ResultSize,
];

/// `shared_summable`: a pair is a phase-1 candidate only if it shares a label
/// not in the output (opt_einsum's rule) instead of any label.
fn greedy_linear(p: &Problem, key: GreedyKey, shared_summable: bool) -> Vec<Vec<usize>> {
    let mut of = false;
    let mut cur: Vec<Bits> = p.inputs.clone();
    let mut sizes: Vec<u128> = cur.iter().map(|s| p.size(s, &mut of)).collect();
    // Number of current operands carrying each label.
    let mut count = vec![0usize; p.ext.len()];
    for s in &cur {
        for l in s.iter() {
            count[l] += 1;
        }
    }
    let mut path = Vec::with_capacity(cur.len().saturating_sub(1));
    while cur.len() > 1 {
        // (primary, secondary, i, j, k12, size12)
        let mut best_shared: Option<(i128, i128, usize, usize, Bits, u128)> = None;
        let mut best_outer: Option<(u128, u128, usize, usize, Bits, u128)> = None;
        for i in 0..cur.len() {
            for j in i + 1..cur.len() {
                let (ki, kj) = (&cur[i], &cur[j]);
                let either = ki.union(kj);
                let mut k12 = Bits::new(p.words);
                for l in either.iter() {
                    let inside = usize::from(ki.contains(l)) + usize::from(kj.contains(l));
                    if p.output.contains(l) || count[l] > inside {
                        k12.insert(l);
                    }
                }
                let removes = k12.len() != either.len();
                let flops = p.step_flops(&either, removes, 2, &mut of);
                let size12 = p.size(&k12, &mut of);
                let candidate = if shared_summable {
                    !ki.inter(kj).is_subset(&p.output)
                } else {
                    ki.intersects(kj)
                };
                if candidate {
                    let removed = clamp_i128(size12) - clamp_i128(sizes[i]) - clamp_i128(sizes[j]);
                    let (a, b) = match key {
                        GreedyKey::MemoryRemoved => (removed, clamp_i128(flops)),
                        GreedyKey::Flops => (clamp_i128(flops), removed),
                        GreedyKey::ResultSize => (clamp_i128(size12), clamp_i128(flops)),
                    };
                    if best_shared.as_ref().is_none_or(|x| (a, b) < (x.0, x.1)) {
                        best_shared = Some((a, b, i, j, k12, size12));
                    }
                } else if best_shared.is_none()
                    && best_outer
                        .as_ref()
                        .is_none_or(|b| (size12, flops) < (b.0, b.1))
                {
                    best_outer = Some((size12, flops, i, j, k12, size12));
                }
            }
        }
        let chosen = match (best_shared, best_outer) {
            (Some((_, _, i, j, k, s)), _) | (None, Some((_, _, i, j, k, s))) => (i, j, k, s),
            (None, None) => break, // unreachable: cur.len() > 1
        };
        let (i, j, k12, size12) = chosen;
        for idx in [j, i] {
            for l in cur[idx].iter() {
                count[l] = count[l].saturating_sub(1);
            }
            cur.remove(idx);
            sizes.remove(idx);
        }
        for l in k12.iter() {
            count[l] += 1;
        }
        cur.push(k12);
        sizes.push(size12);
        path.push(vec![i, j]);
    }
    path
}

// ---------------------------------------------------------------------------
// Report

fn ratio_3dp(num: u128, den: u128) -> String {
    let den = den.max(1);
    let (mut int, rem) = (num / den, num % den);
    let frac = match rem.checked_mul(1000) {
        Some(x) => {
            let (q, r) = (x / den, x % den);
            q + u128::from(r >= den - r)
        }
        None => ((rem as f64 / den as f64) * 1000.0).round() as u128,
    };
    let frac = if frac >= 1000 {
        int = int.saturating_add(1);
        frac - 1000
    } else {
        frac
    };
    format!("{int}.{frac:03}")
}

/// Renders `path` in the style of numpy's `einsum_path` printout.  Labels are
/// written with `label_names[id]` (or `#id` when missing), separated by spaces;
/// operands by `, `; an operand without labels (a scalar) as `()`.  Counts are
/// printed in full, the speed-up with three decimals.  "Largest intermediate"
/// is [`ContractionPath::largest_intermediate_elems`] (intermediates only).
/// `extents` is used for the "Label extents" line.  Never panics; a path that does not fit `inputs` gets
/// an `<invalid step>` row.
pub fn format_path(
    path: &ContractionPath,
    inputs: &[Vec<usize>],
    output: &[usize],
    label_names: &[&str],
    extents: &[u64],
) -> String {
    let name = |l: usize| -> String {
        match label_names.get(l) {
            Some(s) => (*s).to_string(),
            None => format!("#{l}"),
        }
    };
    let term = |ls: &[usize]| -> String {
        if ls.is_empty() {
            "()".to_string()
        } else {
            ls.iter().map(|&l| name(l)).collect::<Vec<_>>().join(" ")
        }
    };
    let terms = |ts: &[Vec<usize>]| ts.iter().map(|t| term(t)).collect::<Vec<_>>().join(", ");
    let out_str = term(output);

    let mut seen: Vec<usize> = Vec::new();
    for &l in inputs.iter().flatten().chain(output) {
        if !seen.contains(&l) {
            seen.push(l);
        }
    }
    let ext_str = seen
        .iter()
        .map(|&l| format!("{}={}", name(l), extent_of(extents, l)))
        .collect::<Vec<_>>()
        .join(" ");

    let mut s = String::new();
    let _ = writeln!(
        s,
        "  Complete contraction:  {} -> {}",
        terms(inputs),
        out_str
    );
    let _ = writeln!(s, "         Label extents:  {ext_str}");
    let _ = writeln!(s, "         Naive scaling:  {}", path.naive_scaling);
    let _ = writeln!(s, "     Optimized scaling:  {}", path.opt_scaling);
    let _ = writeln!(s, "      Naive FLOP count:  {}", path.naive_flops);
    let _ = writeln!(s, "  Optimized FLOP count:  {}", path.opt_flops);
    let _ = writeln!(
        s,
        "   Theoretical speedup:  {}",
        ratio_3dp(path.naive_flops, path.opt_flops)
    );
    let _ = writeln!(
        s,
        "  Largest intermediate:  {} elements",
        path.largest_intermediate_elems
    );
    let search = match (path.for_layout, path.optimal) {
        (true, _) => "layout (near the fewest FLOPs, without relayout copies)",
        (false, true) => "optimal",
        (false, false) => "greedy",
    };
    let _ = writeln!(s, "           Path search:  {search}");
    if path.overflow {
        let _ = writeln!(s, "              Overflow:  counts saturated at u128::MAX");
    }
    let _ = writeln!(s, "{}", "-".repeat(74));
    let _ = writeln!(s, "{:>6} {:>24} {:>40}", "scaling", "current", "remaining");
    let _ = write!(s, "{}", "-".repeat(74));

    let mut cur: Vec<Vec<usize>> = inputs.to_vec();
    for step in &path.steps {
        let mut pos = step.operands.clone();
        pos.sort_unstable();
        pos.dedup();
        if pos.is_empty() || pos.last().is_some_and(|&l| l >= cur.len()) {
            let _ = write!(s, "\n<invalid step>");
            break;
        }
        let mut taken: Vec<Vec<usize>> = pos.iter().rev().map(|&p| cur.remove(p)).collect();
        taken.reverse();
        let current = format!("{} -> {}", terms(&taken), term(&step.result_labels));
        cur.push(step.result_labels.clone());
        let remaining = format!("{} -> {}", terms(&cur), out_str);
        let _ = write!(
            s,
            "\n{:>4}    {:>24} {:>40}",
            step.scaling, current, remaining
        );
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Letters `a`..`z` -> label ids 0..26.
    fn lab(t: &str) -> Vec<usize> {
        t.bytes().map(|b| usize::from(b - b'a')).collect()
    }

    fn parse(inputs: &str) -> Vec<Vec<usize>> {
        if inputs.is_empty() {
            return vec![Vec::new()];
        }
        inputs.split(',').map(lab).collect()
    }

    fn set(v: &[usize]) -> Vec<usize> {
        let mut v = v.to_vec();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Every operand consumed exactly once, one operand left, final labels =
    /// output set, step flops add up, and an independent re-costing agrees.
    fn check_valid(path: &ContractionPath, inputs: &[Vec<usize>], output: &[usize], ext: &[u64]) {
        let n = inputs.len();
        let mut cur: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
        for step in &path.steps {
            assert!(!step.operands.is_empty());
            assert!(
                step.operands.windows(2).all(|w| w[0] < w[1]),
                "{:?}",
                step.operands
            );
            let mut merged = Vec::new();
            for &p in step.operands.iter().rev() {
                merged.extend(cur.remove(p));
            }
            cur.push(merged);
        }
        assert_eq!(cur.len(), 1);
        let mut all = cur[0].clone();
        all.sort_unstable();
        assert_eq!(all, (0..n).collect::<Vec<_>>());
        let last = path.steps.last().unwrap();
        assert_eq!(set(&last.result_labels), set(output));
        let sum: u128 = path.steps.iter().map(|s| s.flops).sum();
        assert_eq!(sum, path.opt_flops);
        let results: Vec<u128> = path.steps.iter().map(|s| s.result_elems).collect();
        let inner = &results[..results.len() - 1];
        assert_eq!(
            path.largest_intermediate_elems,
            inner.iter().copied().max().unwrap_or(0)
        );
        assert_eq!(
            path.largest_result_elems,
            results.iter().copied().max().unwrap()
        );
        let again = evaluate_path(inputs, output, ext, &path.linear_path()).unwrap();
        assert_eq!(again.opt_flops, path.opt_flops);
        assert_eq!(again.steps, path.steps);
    }

    /// Minimum over every pairwise linear path (brute force).
    fn brute_force(inputs: &[Vec<usize>], output: &[usize], ext: &[u64]) -> u128 {
        fn rec(
            left: usize,
            prefix: &mut Vec<Vec<usize>>,
            best: &mut u128,
            inputs: &[Vec<usize>],
            output: &[usize],
            ext: &[u64],
        ) {
            if left == 1 {
                let c = evaluate_path(inputs, output, ext, prefix)
                    .unwrap()
                    .opt_flops;
                *best = (*best).min(c);
                return;
            }
            for i in 0..left {
                for j in i + 1..left {
                    prefix.push(vec![i, j]);
                    rec(left - 1, prefix, best, inputs, output, ext);
                    prefix.pop();
                }
            }
        }
        let mut best = u128::MAX;
        rec(
            inputs.len(),
            &mut Vec::new(),
            &mut best,
            inputs,
            output,
            ext,
        );
        best
    }

    #[test]
    fn flop_count_matches_opt_einsum_doc_examples() {
        // flop_count('abc', False, 1, {'a': 2, 'b':3, 'c':5}) == 30
        assert_eq!(flop_count(&[0, 1, 2], false, 1, &[2, 3, 5]), 30);
        // flop_count('abc', True, 2, ...) == 60
        assert_eq!(flop_count(&[0, 1, 2], true, 2, &[2, 3, 5]), 60);
        // repeated labels count once; 4 terms -> factor 3 (+1 inner)
        assert_eq!(flop_count(&[0, 0, 1], true, 4, &[2, 3]), 24);
        // missing extent counts as 1; 0 terms behaves like 1
        assert_eq!(flop_count(&[7], false, 0, &[2]), 1);
        assert_eq!(
            flop_count(&[0], false, 1, &[u64::MAX]),
            u128::from(u64::MAX)
        );
        let big = vec![u64::MAX; 3];
        assert_eq!(checked_flop_count(&[0, 1, 2], false, 1, &big), None);
        assert_eq!(flop_count(&[0, 1, 2], false, 1, &big), u128::MAX);
    }

    #[test]
    fn matmul_costs_2ijk() {
        let (i, j, k) = (3u64, 4u64, 5u64);
        let inputs = vec![vec![0, 1], vec![1, 2]];
        let path = contraction_path(&inputs, &[0, 2], &[i, j, k]);
        let ijk = u128::from(i * j * k);
        assert_eq!(path.opt_flops, 2 * ijk);
        assert_eq!(path.naive_flops, 2 * ijk);
        assert_eq!(path.steps.len(), 1);
        let s = &path.steps[0];
        assert_eq!(s.operands, vec![0, 1]);
        assert_eq!(s.result_labels, vec![0, 2]);
        assert_eq!(s.removed, vec![1]);
        assert_eq!(s.result_elems, u128::from(i * k));
        assert_eq!(s.scaling, 3);
        assert_eq!(path.largest_intermediate_elems, 0);
        assert_eq!(path.largest_result_elems, 15);
        assert!(path.optimal);
        // output order is honoured on the final step
        let path = contraction_path(&inputs, &[2, 0], &[i, j, k]);
        assert_eq!(path.steps[0].result_labels, vec![2, 0]);
    }

    #[test]
    fn chain_of_three_order_matters() {
        // A[i=10, j=1000] B[j, k=10] C[k, l=1000] -> [i, l]
        // (AB)C = 2*10*1000*10 + 2*10*10*1000 = 400_000
        // A(BC) = 2*1000*10*1000 + 2*10*1000*1000 = 40_000_000
        // naive = 10*1000*10*1000 * (max(1, 3-1) + 1) = 300_000_000
        let inputs = parse("ab,bc,cd");
        let ext = [10, 1000, 10, 1000];
        let path = contraction_path(&inputs, &lab("ad"), &ext);
        assert_eq!(path.opt_flops, 400_000);
        assert_eq!(path.naive_flops, 300_000_000);
        assert_eq!(path.linear_path(), vec![vec![0, 1], vec![0, 1]]);
        assert_eq!(path.steps[0].result_labels, lab("ac"));
        assert_eq!(path.steps[0].removed, lab("b"));
        assert_eq!(path.largest_intermediate_elems, 100);
        assert_eq!(path.largest_result_elems, 10_000);
        let bad = evaluate_path(&inputs, &lab("ad"), &ext, &[vec![1, 2], vec![0, 1]]).unwrap();
        assert_eq!(bad.opt_flops, 40_000_000);
        assert!(!bad.optimal);
        check_valid(&path, &inputs, &lab("ad"), &ext);
    }

    #[test]
    fn four_operand_chain() {
        // ab,bc,cd,de->ae with a=2 b=50 c=3 d=40 e=5.
        // Best: (ab,bc)->ac: 2*2*50*3=600; (cd,de)->ce: 2*3*40*5=1200;
        // (ac,ce)->ae: 2*2*3*5=60. Total 1860 (opt_einsum agrees).
        let inputs = parse("ab,bc,cd,de");
        let ext = [2, 50, 3, 40, 5];
        let path = contraction_path(&inputs, &lab("ae"), &ext);
        assert_eq!(path.opt_flops, 1860);
        // naive: 2*50*3*40*5 = 60000 * (3 + 1)
        assert_eq!(path.naive_flops, 240_000);
        assert_eq!(path.linear_path(), vec![vec![0, 1], vec![0, 1], vec![0, 1]]);
        assert_eq!(path.largest_intermediate_elems, 15);
        assert_eq!(path.largest_result_elems, 15);
        check_valid(&path, &inputs, &lab("ae"), &ext);
        assert_eq!(brute_force(&inputs, &lab("ae"), &ext), 1860);
    }

    #[test]
    fn outer_products() {
        // i,j -> ij: 12 flops, nothing summed, no shared label.
        let p = contraction_path(&parse("a,b"), &lab("ab"), &[3, 4]);
        assert_eq!((p.opt_flops, p.naive_flops), (12, 12));
        assert!(p.steps[0].removed.is_empty());
        // a,b,c -> abc: best is (a,b)=12 then (ab,c)=60: 72; naive 60*2 = 120.
        let inputs = parse("a,b,c");
        let p = contraction_path(&inputs, &lab("abc"), &[3, 4, 5]);
        assert_eq!((p.opt_flops, p.naive_flops), (72, 120));
        assert_eq!(p.largest_intermediate_elems, 12);
        assert_eq!(p.largest_result_elems, 60);
        check_valid(&p, &inputs, &lab("abc"), &[3, 4, 5]);
        // a disconnected 3-operand case where an outer product is optimal:
        // a,a,b -> b  : (a,a)->() costs 2*a... and then () x b.
        let inputs = parse("a,a,b");
        let p = contraction_path(&inputs, &lab("b"), &[5, 7]);
        assert_eq!(p.opt_flops, 2 * 5 + 7);
        check_valid(&p, &inputs, &lab("b"), &[5, 7]);
    }

    #[test]
    fn trace_diagonal_and_scalar_outputs() {
        // trace "aa->": labels form {a}; step sums a: 4 * (1 + 1); naive has no
        // label shared between operands: 4 * 1 (opt_einsum: 4 / 8).
        let p = contraction_path(&[vec![0, 0]], &[], &[4]);
        assert_eq!(p.steps.len(), 1);
        assert_eq!(p.steps[0].operands, vec![0]);
        assert_eq!(p.steps[0].removed, vec![0]);
        assert!(p.steps[0].result_labels.is_empty());
        assert_eq!((p.opt_flops, p.naive_flops), (8, 4));
        assert_eq!(p.largest_intermediate_elems, 0);
        assert_eq!(p.largest_result_elems, 1);
        // diagonal "aa->a": nothing summed.
        let p = contraction_path(&[vec![0, 0]], &[0], &[4]);
        assert_eq!((p.opt_flops, p.naive_flops), (4, 4));
        assert_eq!(p.steps[0].result_labels, vec![0]);
        // dot product "a,a->": 2 * a; scalar output.
        let p = contraction_path(&parse("a,a"), &[], &[6]);
        assert_eq!((p.opt_flops, p.naive_flops), (12, 12));
        assert_eq!(p.steps[0].result_elems, 1);
        // "aab,bc,c->a" (opt_einsum: naive 360, optimal 100):
        // (bc,c)->b: 30*2 = 60; (aab,b)->a: 20*2 = 40.
        let inputs = parse("aab,bc,c");
        let p = contraction_path(&inputs, &lab("a"), &[4, 5, 6]);
        assert_eq!((p.opt_flops, p.naive_flops), (100, 360));
        check_valid(&p, &inputs, &lab("a"), &[4, 5, 6]);
        // full contraction to a scalar over four operands
        let inputs = parse("ab,bc,cd,da");
        let p = contraction_path(&inputs, &[], &[2, 3, 4, 5]);
        check_valid(&p, &inputs, &[], &[2, 3, 4, 5]);
        assert_eq!(p.opt_flops, brute_force(&inputs, &[], &[2, 3, 4, 5]));
        assert!(p.steps.last().unwrap().result_labels.is_empty());
    }

    #[test]
    fn single_operand_labels_are_summed_in_first_step() {
        // "abc,cd->ad": b only in operand 0, summed in the one step.
        let p = contraction_path(&parse("abc,cd"), &lab("ad"), &[2, 3, 4, 5]);
        assert_eq!(p.steps[0].removed, lab("bc"));
        assert_eq!(p.opt_flops, 2 * 3 * 4 * 5 * 2);
        // 3 operands: "ab,bc,cd->d" with a only in operand 0.
        let inputs = parse("ab,bc,cd");
        let ext = [7, 2, 3, 4];
        let p = contraction_path(&inputs, &lab("d"), &ext);
        assert_eq!(p.opt_flops, brute_force(&inputs, &lab("d"), &ext));
        check_valid(&p, &inputs, &lab("d"), &ext);
    }

    type Case = (&'static str, &'static str, &'static [u64], u128, u128, u128);

    /// Rows from tests/python/gen_order_cases.py (opt_einsum 3.4.0):
    /// (inputs, output, extents by letter, naive_cost, oe `optimal` opt_cost,
    /// exact minimum over all pairwise paths).
    #[rustfmt::skip]
    const OPT_EINSUM_CASES: &[Case] = &[
        // generated by tests/python/gen_order_cases.py (opt_einsum 3.4.0)
        ("ab,bc,cd", "ad", &[10, 1000, 10, 1000], 300000000, 400000, 400000),
        ("ab,bc,cd,de", "ae", &[2, 50, 3, 40, 5], 240000, 1860, 1860),
        ("ab,cd,bdef,ge,hf", "acgh", &[10, 10, 10, 10, 10, 10, 10, 10], 500000000, 800000, 800000),
        ("a,b,c", "abc", &[3, 4, 5], 120, 72, 72),
        ("ab,ab,ab", "", &[6, 7], 126, 126, 126),
        ("ab,b,bc", "", &[5, 6, 7], 630, 144, 144),
        ("abc,acd,ac", "abd", &[64, 8, 4096, 128], 805306368, 570425344, 538968064),
        ("aab,bc,c", "a", &[4, 5, 6], 360, 100, 100),
        ("ab,,,b", "a", &[9, 5], 180, 96, 96),
        ("fceba,dabg,cd", "efg", &[8, 4, 100, 1, 100, 32, 5], 153600000, 21504000, 21504000),
        ("ade,bead,c", "cb", &[64, 1, 64, 64, 5], 3932160, 41024, 41024),
        ("agchf,edhbg,ea", "bhdfc", &[3, 3, 5, 32, 1, 100, 16, 1], 6912000, 1584000, 1584000),
        ("cd,hdef,ag,cfabhi", "ihbeg", &[8, 7, 64, 4, 8, 64, 10, 100, 1], 29360128000, 207334400, 207334400),
        ("da,b,d,cbe", "ecda", &[1, 8, 64, 5, 4], 40960, 5381, 5381),
        ("bdjigc,iebf,cgh,ajefh", "dea", &[2, 1, 3, 1, 100, 16, 8, 64, 1, 5], 98304000, 2069760, 2069760),
        ("ebdg,e,af,bfc", "cbadg", &[10, 7, 10, 16, 2, 32, 32], 91750400, 417536, 417536),
        ("lk,fhdg,ac,febk,djcig", "iejhalb", &[32, 16, 4, 8, 7, 32, 2, 3, 16, 7, 64, 3], 2367600721920, 45760512, 45760512),
        ("b,efa,ab,cd,e", "cfd", &[7, 2, 1, 1, 10, 32], 22400, 4580, 4580),
        ("hijc,gbc,jf,dif,eah", "gabed", &[2, 7, 64, 1, 8, 8, 5, 10, 7, 4], 401408000, 92288, 92288),
        ("fd,gc,ge,bd,ba", "caef", &[64, 7, 32, 5, 10, 5, 5], 89600000, 110430, 110430),
        ("cge,fi,eg,b,jbhca,dk", "hfgijdak", &[4, 16, 16, 7, 4, 100, 7, 16, 100, 10, 32], 61656268800000, 10036675456, 10036675456),
        ("fca,e,ed,a,g,b", "gbdfc", &[10, 8, 64, 3, 7, 2, 5], 6451200, 18097, 18097),
        ("gh,fjch,egjdi,a,ebca,d", "fjib", &[5, 32, 4, 1, 32, 4, 16, 1, 2, 8], 125829120, 204805, 204805),
        ("ghk,bel,mjh,neclmfj,f,dicgab", "naikd", &[5, 64, 32, 8, 10, 5, 7, 5, 8, 3, 4, 1, 5, 1], 412876800000, 37574400, 37574400),
        ("laeifc,gf,dgah,ekb,bm,ikcj,jdmnh", "lfgcn", &[4, 100, 100, 7, 5, 32, 1, 16, 8, 32, 64, 8, 16, 7], 73658689126400000, 438590464, 438590464),
        ("l,mf,ecj,gmb,gha,dklj,idb", "eiafkhc", &[1, 5, 8, 2, 16, 3, 32, 4, 2, 100, 1, 5, 4], 13762560000, 71568, 71568),
        ("mnh,kbjf,c,kg,iheld,g,ia", "cfmndaelbj", &[32, 7, 16, 64, 64, 32, 1, 16, 3, 16, 10, 8, 3, 4], 2424423139246080, 721667880980, 721667880980),
        ("cmo,bj,b,ghl,kdaf,iconl,efmgh", "aidnecjhfk", &[2, 8, 10, 2, 5, 1, 5, 10, 2, 4, 10, 16, 16, 32, 32], 11744051200000, 32117984, 32117984),
        ("pljkb,fehp,da,aoni,cml,gmr,qkd,br", "nqcoeijlghf", &[10, 8, 8, 2, 100, 64, 5, 7, 3, 100, 100, 8, 5, 100, 64, 2, 3, 7], 739875225600000000000, 330316207900400, 330316207900400),
        ("c,lghd,jdakc,f,jb,eb,li,ik", "gaedfh", &[10, 100, 2, 5, 100, 100, 1, 8, 16, 32, 64, 100], 20971520000000000, 9457920, 9457920),
        ("a,ehk,cf,id,ifj,bg,ed,ck", "hjgab", &[32, 1, 10, 32, 16, 7, 2, 3, 3, 8, 2], 2642411520, 6472, 6472),
        ("j,lpf,hblgc,dmie,ajo,pn,aio,kfmnbq", "qcdekgh", &[1, 4, 4, 32, 64, 100, 5, 2, 2, 100, 2, 4, 4, 64, 4, 8, 1], 3435973836800000, 3402544, 3402544),
        ("qp,l,k,ofabec,gdehi,jb,ig,mnkqcp", "mkjolhafdn", &[4, 3, 64, 64, 64, 32, 8, 64, 100, 16, 4, 64, 5, 100, 7, 100, 64], 3783023686991216640000000, 11085506150592, 11085506150592),
        ("ef,fa,ecfbd", "ac", &[7, 8, 2, 2, 3, 64], 129024, 14080, 14080),
        ("ecbfg,hfgace,adfeg,heda", "", &[3, 64, 7, 100, 8, 4, 8, 5], 688128000, 1051136, 1051136),
        ("decag,edgbf,fadbe,hfdag,gbea", "deh", &[10, 1, 100, 100, 3, 10, 5, 3], 225000000, 4350000, 4140000),
        ("igfh,bi,ichdbfe,aibefh,hcbfa", "hg", &[10, 10, 2, 2, 10, 7, 4, 8, 10], 44800000, 2916480, 2703680),
        ("fkdb,bad,dfi,ciljegb,lbhif,efa", "fkgh", &[100, 4, 4, 64, 32, 16, 7, 64, 100, 2, 8, 7], 1578400481280000, 1842610176, 1842610176),
        ("cif,ba,bhj,ehb,gdbe,gie", "hif", &[100, 64, 16, 3, 8, 2, 1, 100, 4, 10], 117964800000, 1448448, 1258496),
        ("of,kpbec,jmnplh,alcip,njgf,okpdejnc,jlmaei", "ad", &[7, 16, 100, 100, 32, 100, 32, 3, 8, 3, 5, 7, 8, 16, 32, 100], 828660252672000000000, 606609408000, 606609408000),
        ("ichmab,flhigca,hnbld,ac,a,jf,iemkj,ihe", "elk", &[4, 3, 3, 8, 4, 1, 1, 32, 5, 32, 64, 3, 64, 32], 18554258718720, 9185024, 8810624),
    ];

    #[test]
    fn matches_opt_einsum_table() {
        let mut equal_to_oe = 0;
        for &(ins, out, ext, naive, oe_opt, exact) in OPT_EINSUM_CASES {
            let inputs = parse(ins);
            let output = lab(out);
            let p = contraction_path(&inputs, &output, ext);
            let case = format!("{ins}->{out} {ext:?}");
            assert_eq!(p.naive_flops, naive, "naive {case}");
            assert_eq!(p.opt_flops, exact, "optimal {case}");
            assert!(exact <= oe_opt, "{case}");
            assert!(p.optimal && !p.overflow, "{case}");
            if p.opt_flops == oe_opt {
                equal_to_oe += 1;
            }
            check_valid(&p, &inputs, &output, ext);
            if inputs.len() <= 6 {
                assert_eq!(
                    brute_force(&inputs, &output, ext),
                    exact,
                    "brute force {case}"
                );
            }
        }
        assert_eq!(OPT_EINSUM_CASES.len(), 41);
        // The five rows where opt_einsum's `optimal` is not optimal (see module docs).
        assert_eq!(equal_to_oe, 41 - 5);
    }

    #[test]
    fn greedy_beyond_eight_operands() {
        // 12-matrix chain with varying extents, open ends in the output.
        let dims: [u64; 13] = [30, 35, 15, 5, 10, 20, 25, 7, 40, 3, 12, 9, 21];
        let inputs: Vec<Vec<usize>> = (0..12).map(|i| vec![i, i + 1]).collect();
        let output = vec![0, 12];
        let p = contraction_path(&inputs, &output, &dims);
        assert!(!p.optimal);
        assert_eq!(p.steps.len(), 11);
        check_valid(&p, &inputs, &output, &dims);
        assert!(p.opt_flops < p.naive_flops);

        // Nine operands, a ring with a batch label everywhere plus two
        // disconnected scalars-to-be: exercises both greedy phases.
        let mut inputs: Vec<Vec<usize>> = (0..7).map(|i| vec![i, (i + 1) % 7, 20]).collect();
        inputs.push(vec![10, 11]);
        inputs.push(vec![12]);
        let output = vec![20, 12];
        let ext: Vec<u64> = (0..21).map(|l| 2 + (l as u64 % 5)).collect();
        let p = contraction_path(&inputs, &output, &ext);
        assert!(!p.optimal);
        check_valid(&p, &inputs, &output, &ext);

        // 8 operands still uses the exact search.
        let inputs: Vec<Vec<usize>> = (0..8).map(|i| vec![i, i + 1]).collect();
        let p = contraction_path(&inputs, &[0, 8], &dims);
        assert!(p.optimal);
        check_valid(&p, &inputs, &[0, 8], &dims);
        // Classic matrix-chain DP (scalar multiplications m) doubles to FLOPs.
        assert_eq!(p.opt_flops, 2 * matrix_chain(&dims[..9]));
    }

    /// Textbook O(n^3) matrix-chain multiplication count for dims p0..pn.
    fn matrix_chain(p: &[u64]) -> u128 {
        let n = p.len() - 1;
        let mut m = vec![vec![0u128; n]; n];
        for len in 2..=n {
            for i in 0..=n - len {
                let j = i + len - 1;
                m[i][j] = (i..j)
                    .map(|k| m[i][k] + m[k + 1][j] + u128::from(p[i] * p[k + 1] * p[j + 1]))
                    .min()
                    .unwrap();
            }
        }
        m[0][n - 1]
    }

    #[test]
    fn large_random_greedy_is_valid() {
        // Deterministic LCG; 9..=30 operands of 1..=4 labels.
        let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |m: u64| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) % m
        };
        for _ in 0..40 {
            let n = 9 + next(22) as usize;
            let nl = 4 + next(30) as usize;
            let inputs: Vec<Vec<usize>> = (0..n)
                .map(|_| (0..1 + next(4)).map(|_| next(nl as u64) as usize).collect())
                .collect();
            let mut output: Vec<usize> = inputs
                .iter()
                .flatten()
                .copied()
                .filter(|_| next(6) == 0)
                .collect();
            output.sort_unstable();
            output.dedup();
            let ext: Vec<u64> = (0..nl).map(|_| 1 + next(9)).collect();
            let p = contraction_path(&inputs, &output, &ext);
            assert!(!p.optimal);
            check_valid(&p, &inputs, &output, &ext);
        }
    }

    #[test]
    fn degenerate_inputs_do_not_panic() {
        let p = contraction_path(&[], &[], &[]);
        assert!(p.steps.is_empty());
        assert_eq!(
            (p.naive_flops, p.opt_flops, p.largest_intermediate_elems),
            (0, 0, 0)
        );
        let _ = format_path(&p, &[], &[], &[], &[]);
        // zero extents
        let inputs = parse("ab,bc,cd");
        let p = contraction_path(&inputs, &lab("ad"), &[0, 3, 0, 2]);
        assert_eq!(p.opt_flops, 0);
        check_valid(&p, &inputs, &lab("ad"), &[0, 3, 0, 2]);
        // labels without extents, huge label ids, duplicate output labels,
        // an output label that occurs in no input
        let inputs = vec![vec![usize::MAX, 5], vec![5, 1000], vec![1000]];
        let p = contraction_path(&inputs, &[usize::MAX, usize::MAX, 77], &[1, 2, 3]);
        assert_eq!(p.steps.last().unwrap().result_labels, vec![usize::MAX]);
        // overflow saturates and is flagged
        let ext = vec![u64::MAX; 8];
        let inputs: Vec<Vec<usize>> = (0..7).map(|i| vec![i, i + 1]).collect();
        let p = contraction_path(&inputs, &[], &ext);
        assert!(p.overflow);
        assert_eq!(p.naive_flops, u128::MAX);
        let text = format_path(&p, &inputs, &[], &["a"], &ext);
        assert!(text.contains("Overflow"));
        // empty operands (scalars)
        let inputs = vec![vec![], vec![], vec![0]];
        let p = contraction_path(&inputs, &[], &[3]);
        check_valid(&p, &inputs, &[], &[3]);
        // invalid explicit paths
        let inputs = parse("ab,bc");
        assert!(evaluate_path(&inputs, &[], &[2, 2, 2], &[vec![0, 2]]).is_none());
        assert!(evaluate_path(&inputs, &[], &[2, 2, 2], &[vec![]]).is_none());
        assert!(evaluate_path(&inputs, &[], &[2, 2, 2], &[vec![0]]).is_none());
        assert!(evaluate_path(&[], &[], &[], &[vec![0]]).is_none());
        // a path that does not fit the inputs still formats
        let p = contraction_path(&parse("ab,bc,cd"), &[], &[2, 2, 2, 2]);
        let text = format_path(&p, &parse("ab"), &[], &[], &[]);
        assert!(text.contains("<invalid step>"));
    }

    #[test]
    fn determinism_and_ties() {
        // All extents equal: many ties; same answer every time.
        let inputs = parse("ab,bc,cd,de,ef,fa");
        let ext = [4; 6];
        let a = contraction_path(&inputs, &[], &ext);
        for _ in 0..5 {
            assert_eq!(contraction_path(&inputs, &[], &ext), a);
        }
        check_valid(&a, &inputs, &[], &ext);
    }

    #[test]
    fn eight_operands_is_fast_enough() {
        let inputs = parse("abc,cde,efg,ghi,ija,bdf,hjb,acegi");
        let ext = [7, 3, 5, 2, 9, 4, 6, 8, 3, 5];
        let t = std::time::Instant::now();
        let p = contraction_path(&inputs, &lab("bh"), &ext);
        let dt = t.elapsed();
        check_valid(&p, &inputs, &lab("bh"), &ext);
        // Generous bound: this runs unoptimised under `cargo test`.
        assert!(dt.as_millis() < 200, "{dt:?}");
    }

    #[test]
    fn report_format() {
        let inputs = vec![vec![0, 1], vec![1, 2], vec![2, 3]];
        let output = vec![0, 3];
        let ext = [2, 2, 5, 2];
        let p = contraction_path(&inputs, &output, &ext);
        let text = format_path(&p, &inputs, &output, &["i", "j", "k", "l"], &ext);
        let expected = "  Complete contraction:  i j, j k, k l -> i l
         Label extents:  i=2 j=2 k=5 l=2
         Naive scaling:  4
     Optimized scaling:  3
      Naive FLOP count:  120
  Optimized FLOP count:  56
   Theoretical speedup:  2.143
  Largest intermediate:  4 elements
           Path search:  optimal
--------------------------------------------------------------------------
scaling                  current                                remaining
--------------------------------------------------------------------------
   3             j k, k l -> j l                          i j, j l -> i l
   3             i j, j l -> i l                               i l -> i l
";
        assert_eq!(text, expected);
        assert_eq!(ratio_3dp(2, 3), "0.667");
        assert_eq!(ratio_3dp(19_995, 10_000), "2.000");
        assert_eq!(ratio_3dp(5, 0), "5.000");
        assert_eq!(ratio_3dp(u128::MAX, 3), format!("{}.000", u128::MAX / 3));
        // multi-letter names and scalar operands
        let inputs = vec![vec![0, 1], vec![], vec![1]];
        let p = contraction_path(&inputs, &[0], &[3, 4]);
        let text = format_path(&p, &inputs, &[0], &["row", "col"], &[3, 4]);
        assert!(
            text.contains("  Complete contraction:  row col, (), col -> row\n"),
            "{text}"
        );
    }
}
