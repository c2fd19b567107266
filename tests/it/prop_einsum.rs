//! Property tests of `einsum`.
//!
//! Each case is a random einsum: 1 to 4 operands over labels drawn from a small pool (multi-
//! letter names, extents 1..=5), with occasional diagonals (a label twice in one operand),
//! compositions `(a b)` in operands and output, and `...` with numpy broadcasting (an operand
//! may have fewer `...` axes, or extent 1 where the others have more). The output is a random
//! subset of the labels in random order, possibly empty (a scalar). The script is run through
//! the library and compared with a naive sum over every combination of label values written
//! in this file. Further properties: the cost model's FLOPs for a 2-operand einsum equal the
//! documented formula, and inconsistent extents fail with their documented codes.
//!
//! Cases come from a list of random `u32` choices read by [`Draw`]; choice 0 always means the
//! simplest option, so proptest's shrinking of that list shrinks the case.

use crate::common::{codes, compile, run};
use crate::draw::{config, Draw};
use proptest::prelude::*;
use tdsl::DType;

/// The raw choices a case is built from.
fn choices() -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(any::<u32>(), 0..128)
}

/// Label names.
const POOL: [&str; 6] = ["i", "j", "k", "bb", "c2", "dim"];
/// Extents to draw from: 1 and primes first.
const EXTS: [usize; 5] = [2, 1, 3, 5, 4];
/// Cap on the number of label combinations the naive sum visits.
const MAX_COMBOS: usize = 3000;

/// One token of an output slot.
#[derive(Debug, Clone, Copy, PartialEq)]
enum OutTok {
    Label(usize),
    Ellipsis,
}

/// One operand: its slots (each one label, or a composition of distinct labels) and, if it
/// has `...`, where it stands among the slots and the operand's extents there.
#[derive(Debug, Clone)]
struct Operand {
    slots: Vec<Vec<usize>>,
    ell: Option<(usize, Vec<usize>)>,
}

#[derive(Debug, Clone)]
struct Case {
    /// Each operand's dtype.
    dtypes: Vec<DType>,
    inits: Vec<String>,
    /// Label names and extents.
    labels: Vec<(String, usize)>,
    /// Extents of the broadcast `...` axes (right-aligned, numpy style); its length is the
    /// widest operand `...`.
    ell: Vec<usize>,
    operands: Vec<Operand>,
    /// Output slots; a slot with several tokens is a composition.
    output: Vec<Vec<OutTok>>,
}

impl Case {
    /// The result dtype: the widest operand's; f16 with bf16 (or either with f32) is f32.
    fn dtype(&self) -> DType {
        let mut ds = self.dtypes.clone();
        ds.dedup();
        match ds.as_slice() {
            [one] => *one,
            _ if self.dtypes.contains(&DType::F64) => DType::F64,
            _ => DType::F32,
        }
    }

    fn operand_shape(&self, op: &Operand) -> Vec<usize> {
        let mut shape: Vec<usize> = op
            .slots
            .iter()
            .map(|g| g.iter().map(|&l| self.labels[l].1).product())
            .collect();
        if let Some((at, ext)) = &op.ell {
            shape.splice(*at..*at, ext.iter().copied());
        }
        shape
    }

    fn operand_text(&self, op: &Operand) -> String {
        let mut toks: Vec<String> = op
            .slots
            .iter()
            .map(|g| {
                let names: Vec<&str> = g.iter().map(|&l| self.labels[l].0.as_str()).collect();
                if g.len() == 1 {
                    names[0].to_string()
                } else {
                    format!("({})", names.join(" "))
                }
            })
            .collect();
        if let Some((at, _)) = &op.ell {
            toks.insert(*at, "...".to_string());
        }
        toks.join(" ")
    }

    fn tok_text(&self, t: OutTok) -> &str {
        match t {
            OutTok::Label(l) => &self.labels[l].0,
            OutTok::Ellipsis => "...",
        }
    }

    fn pattern(&self) -> String {
        let ins: Vec<String> = self.operands.iter().map(|o| self.operand_text(o)).collect();
        let out: Vec<String> = self
            .output
            .iter()
            .map(|g| {
                let names: Vec<&str> = g.iter().map(|&t| self.tok_text(t)).collect();
                if g.len() == 1 {
                    names[0].to_string()
                } else {
                    format!("({})", names.join(" "))
                }
            })
            .collect();
        format!("{} -> {}", ins.join(", "), out.join(" "))
    }

    fn script(&self) -> String {
        let mut s = String::new();
        let mut names = Vec::new();
        for (k, op) in self.operands.iter().enumerate() {
            let dims: Vec<String> = self
                .operand_shape(op)
                .iter()
                .map(|e| e.to_string())
                .collect();
            s += &format!(
                "input x{k}: {}[{}] = {}\n",
                self.dtypes[k].name(),
                dims.join(", "),
                self.inits[k]
            );
            names.push(format!("x{k}"));
        }
        s += &format!(
            "y = einsum({}, \"{}\")\noutput y\n",
            names.join(", "),
            self.pattern()
        );
        s
    }

    /// Labels used by some operand.
    fn used(&self) -> Vec<usize> {
        (0..self.labels.len())
            .filter(|l| {
                self.operands
                    .iter()
                    .any(|o| o.slots.iter().flatten().any(|x| x == l))
            })
            .collect()
    }

    fn out_shape(&self) -> Vec<usize> {
        let mut shape = Vec::new();
        for g in &self.output {
            if g.as_slice() == [OutTok::Ellipsis] {
                shape.extend(&self.ell);
            } else {
                shape.push(
                    g.iter()
                        .map(|&t| match t {
                            OutTok::Label(l) => self.labels[l].1,
                            OutTok::Ellipsis => self.ell.iter().product(),
                        })
                        .product(),
                );
            }
        }
        shape
    }
}

/// Calls `f` with every coordinate tuple of `exts`, row-major.
fn for_each_index(exts: &[usize], mut f: impl FnMut(&[usize])) {
    let n: usize = exts.iter().product();
    let mut c = vec![0usize; exts.len()];
    for _ in 0..n {
        f(&c);
        for k in (0..exts.len()).rev() {
            c[k] += 1;
            if c[k] < exts[k] {
                break;
            }
            c[k] = 0;
        }
    }
}

/// The naive einsum: for every value of every label (named ones, then the `...` axes), the
/// product of the operands' elements there, added to the output element there. Returns the
/// output shape, the sums and the sums of absolute values (for tolerances).
fn oracle(case: &Case, xs: &[Vec<f64>]) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    let n_lab = case.labels.len();
    let n_ell = case.ell.len();
    // Labels no operand uses take the single value 0.
    let used = case.used();
    let mut exts: Vec<usize> = (0..n_lab)
        .map(|l| {
            if used.contains(&l) {
                case.labels[l].1
            } else {
                1
            }
        })
        .collect();
    exts.extend(&case.ell);
    let out_shape = case.out_shape();
    let n_out: usize = out_shape.iter().product();
    let mut sum = vec![0.0; n_out];
    let mut mag = vec![0.0; n_out];
    let shapes: Vec<Vec<usize>> = case
        .operands
        .iter()
        .map(|o| case.operand_shape(o))
        .collect();
    for_each_index(&exts, |c| {
        let mut p = 1.0;
        for (k, op) in case.operands.iter().enumerate() {
            // Coordinates of the operand's axes, in order.
            let mut coords: Vec<usize> = op
                .slots
                .iter()
                .map(|g| g.iter().fold(0, |a, &l| a * case.labels[l].1 + c[l]))
                .collect();
            if let Some((at, ext)) = &op.ell {
                let w = ext.len();
                let ell_coords = ext.iter().enumerate().map(|(j, &e)| {
                    // Right-aligned; an extent-1 axis broadcasts (always index 0).
                    if e == 1 {
                        0
                    } else {
                        c[n_lab + n_ell - w + j]
                    }
                });
                coords.splice(*at..*at, ell_coords);
            }
            let flat = coords
                .iter()
                .zip(&shapes[k])
                .fold(0, |a, (&x, &e)| a * e + x);
            p *= xs[k][flat];
        }
        // The output index; a bare `...` is one output axis per broadcast axis.
        let mut o = 0;
        let mut slot = 0;
        for g in &case.output {
            if g.as_slice() == [OutTok::Ellipsis] {
                for j in 0..n_ell {
                    o = o * case.ell[j] + c[n_lab + j];
                    slot += 1;
                }
                continue;
            }
            let x = g.iter().fold(0, |a, &t| match t {
                OutTok::Label(l) => a * case.labels[l].1 + c[l],
                OutTok::Ellipsis => (0..n_ell).fold(a, |a, j| a * case.ell[j] + c[n_lab + j]),
            });
            o = o * out_shape[slot] + x;
            slot += 1;
        }
        sum[o] += p;
        mag[o] += p.abs();
    });
    (out_shape, sum, mag)
}

/// Relative precision of a dtype (one unit in the last place at 1) and its smallest positive
/// (subnormal) value.
fn precision(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F64 => (f64::EPSILON, f64::MIN_POSITIVE),
        DType::F32 => (f32::EPSILON as f64, 1e-45),
        DType::F16 => (2f64.powi(-10), 2f64.powi(-24)),
        DType::BF16 => (2f64.powi(-7), 1e-40),
    }
}

/// `got` equals `exact` rounded to `dtype`, up to one ulp and the f64 error of adding terms of
/// total magnitude `mag` in another order.
fn close(dtype: DType, got: f64, exact: f64, mag: f64) -> bool {
    if got == dtype.round(exact) || got == exact {
        return true;
    }
    let (eps, tiny) = precision(dtype);
    (got - exact).abs() <= eps * exact.abs() + 1e-12 * mag + tiny
}

// ---------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------

/// Whether the checker can learn every label's extent: from a plain slot, or as the one
/// unknown label of a composed slot (to a fixed point).
fn inferable(ops: &[Operand]) -> bool {
    let groups: Vec<&Vec<usize>> = ops.iter().flat_map(|o| o.slots.iter()).collect();
    let mut known: Vec<usize> = groups
        .iter()
        .filter(|g| g.len() == 1)
        .map(|g| g[0])
        .collect();
    loop {
        let mut changed = false;
        for g in &groups {
            let unknown: Vec<usize> = g.iter().copied().filter(|l| !known.contains(l)).collect();
            if let [l] = unknown.as_slice() {
                known.push(*l);
                changed = true;
            }
        }
        if !changed {
            return groups
                .iter()
                .flat_map(|g| g.iter())
                .all(|l| known.contains(l));
        }
    }
}

/// A random valid einsum with `min_ops..=max_ops` operands.
fn gen_case(d: &mut Draw, min_ops: usize, max_ops: usize) -> Case {
    let gen_dtype = |d: &mut Draw| match d.below(8) {
        0..=4 => DType::F64,
        5 => DType::F32,
        6 => DType::F16,
        _ => DType::BF16,
    };
    let dtype = gen_dtype(d);
    let n_labels = 1 + d.below(POOL.len());
    let mut names = POOL.to_vec();
    d.shuffle(&mut names);
    let mut labels: Vec<(String, usize)> = names
        .into_iter()
        .take(n_labels)
        .map(|n| (n.to_string(), EXTS[d.below(EXTS.len())]))
        .collect();
    let n_ops = min_ops + d.below(max_ops + 1 - min_ops);

    // Plain slots (a label drawn twice into one operand is a diagonal).
    let mut operands: Vec<Operand> = (0..n_ops)
        .map(|_| Operand {
            slots: (0..1 + d.below(3))
                .map(|_| vec![d.below(n_labels)])
                .collect(),
            ell: None,
        })
        .collect();

    // Compositions of 2 or 3 labels, kept only when every extent can be inferred: a label
    // with a plain slot is known, and a group with one unknown label makes it known.
    for k in (0..n_ops).chain(0..n_ops) {
        if !d.chance(20) {
            continue;
        }
        let s = d.below(operands[k].slots.len());
        let extra = d.below(n_labels);
        if operands[k].slots[s].contains(&extra) {
            continue;
        }
        let mut trial = operands.clone();
        let at = d.below(trial[k].slots[s].len() + 1);
        trial[k].slots[s].insert(at, extra);
        if inferable(&trial) {
            operands = trial;
        }
    }

    // `...`: global broadcast extents, each operand with `...` takes a right-aligned suffix,
    // with extent 1 (broadcast) here and there.
    let mut ell: Vec<usize> = Vec::new();
    let mut any_ell = false;
    if d.chance(30) {
        let global: Vec<usize> = (0..1 + d.below(2)).map(|_| 1 + d.below(4)).collect();
        for op in operands.iter_mut() {
            if !d.chance(70) {
                continue;
            }
            any_ell = true;
            let w = d.below(global.len() + 1);
            let ext: Vec<usize> = global[global.len() - w..]
                .iter()
                .map(|&e| if d.chance(25) { 1 } else { e })
                .collect();
            let at = d.below(op.slots.len() + 1);
            op.ell = Some((at, ext));
        }
        let width = operands
            .iter()
            .filter_map(|o| o.ell.as_ref().map(|e| e.1.len()))
            .max()
            .unwrap_or(0);
        ell = vec![1; width];
        for op in &operands {
            if let Some((_, ext)) = &op.ell {
                for (j, &e) in ext.iter().enumerate() {
                    let g = width - ext.len() + j;
                    ell[g] = ell[g].max(e);
                }
            }
        }
    }

    // Usually one dtype for all operands, sometimes a mix.
    let mixed = d.chance(20);
    let dtypes = (0..n_ops)
        .map(|_| if mixed { gen_dtype(d) } else { dtype })
        .collect();
    let mut case = Case {
        dtypes,
        inits: Vec::new(),
        labels: Vec::new(),
        ell,
        operands,
        output: Vec::new(),
    };
    // Keep the naive sum small.
    loop {
        let combos: usize =
            labels.iter().map(|l| l.1).product::<usize>() * case.ell.iter().product::<usize>();
        if combos <= MAX_COMBOS {
            break;
        }
        let big = (0..labels.len()).max_by_key(|&l| labels[l].1).unwrap_or(0);
        labels[big].1 -= 1;
    }
    case.labels = labels;

    // Output: a random subset of the used labels in random order, `...` if any operand has it.
    let mut toks: Vec<OutTok> = case
        .used()
        .into_iter()
        .filter(|_| d.chance(50))
        .map(OutTok::Label)
        .collect();
    // `...` covering no axis may be left out of the output.
    if any_ell && (!case.ell.is_empty() || !d.chance(30)) {
        toks.push(OutTok::Ellipsis);
    }
    d.shuffle(&mut toks);
    let mut output: Vec<Vec<OutTok>> = Vec::new();
    let mut it = toks.into_iter().peekable();
    while let Some(t) = it.next() {
        let mut g = vec![t];
        if it.peek().is_some() && d.chance(15) {
            g.extend(it.next());
        }
        output.push(g);
    }
    case.output = output;
    case.inits = (0..case.operands.len())
        .map(|k| match d.below(4) {
            1 => format!("rand(seed={})", d.below(1000)),
            2 if matches!(case.dtypes[k], DType::F64 | DType::F32) => "arange".to_string(),
            _ => format!("randn(seed={})", d.below(1000)),
        })
        .collect();
    case
}

fn input_values(script: &str) -> Vec<Vec<f64>> {
    let p = compile(script).expect("the script compiles");
    let inputs = tdsl::bind::bind_inputs(&p, Default::default()).expect("inputs bind");
    inputs.iter().map(|t| t.to_f64()).collect()
}

fn check_case(case: &Case) -> Result<(), TestCaseError> {
    let script = case.script();
    let xs = input_values(&script);
    let (shape, exact, mag) = oracle(case, &xs);
    let out = run(&script).map_err(|e| TestCaseError::fail(format!("{e}\nscript:\n{script}")))?;
    prop_assert_eq!(&out[0].shape(), &shape, "script:\n{}", script);
    let dtype = case.dtype();
    prop_assert_eq!(out[0].dtype(), dtype, "script:\n{}", script);
    let got = out[0].to_f64();
    for (k, &g) in got.iter().enumerate() {
        prop_assert!(
            close(dtype, g, exact[k], mag[k]),
            "element {}: got {}, expected {} (exact {})\nscript:\n{}",
            k,
            g,
            dtype.round(exact[k]),
            exact[k],
            script
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// A random einsum equals the naive sum over every combination of label values.
    #[test]
    fn prop_einsum_matches_naive_sum(v in choices()) {
        check_case(&gen_case(&mut Draw::new(&v), 1, 4))?;
    }

    /// The FLOPs of a 2-operand einsum are the product of the extents of all its labels
    /// (each `...` axis is a label), doubled if some label is summed.
    #[test]
    fn prop_two_operand_cost_is_the_documented_formula(v in choices()) {
        let d = &mut Draw::new(&v);
        let case = gen_case(d, 2, 2);
        let used = case.used();
        let script = case.script();
        let program = compile(&script).map_err(|e| TestCaseError::fail(format!("{e}\n{script}")))?;
        let stored: Vec<_> = program
            .inputs
            .iter()
            .map(|i| tdsl::plan::cost::stored(&i.ty, None))
            .collect();
        let cost = tdsl::plan::cost::program_cost(&program, &stored);
        let out_labels: Vec<usize> = case.output.iter().flatten().filter_map(|t| match t {
            OutTok::Label(l) => Some(*l),
            OutTok::Ellipsis => None,
        }).collect();
        let summed = used.iter().any(|l| !out_labels.contains(l));
        let size: u128 = used.iter().map(|&l| case.labels[l].1 as u128).product::<u128>()
            * case.ell.iter().map(|&e| e as u128).product::<u128>();
        let want = size * (1 + u128::from(summed));
        prop_assert_eq!(cost.total_flops(), want, "script:\n{}", script);
        prop_assert_eq!(cost.total_dense_flops(), want, "script:\n{}", script);
        // And it still computes the right thing.
        check_case(&case)?;
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// A valid case with a fresh label `z` added as a plain slot to operands 0 and 1 (and maybe
/// the output), of extent `ext0` in operand 0 and `ext1` in operand 1; `same_operand` puts both
/// in operand 0 (a diagonal).
fn with_label(d: &mut Draw, ext0: usize, ext1: usize, same_operand: bool) -> String {
    let mut case = gen_case(d, 2, 4);
    // Two table entries with one name: the script only sees the name and the extents.
    case.labels.push(("z".to_string(), ext0));
    case.labels.push(("z".to_string(), ext1));
    let (z0, z1) = (case.labels.len() - 2, case.labels.len() - 1);
    let at = d.below(case.operands[0].slots.len() + 1);
    case.operands[0].slots.insert(at, vec![z0]);
    let second = if same_operand { 0 } else { 1 };
    let at = d.below(case.operands[second].slots.len() + 1);
    case.operands[second].slots.insert(at, vec![z1]);
    if d.chance(50) {
        case.output.push(vec![OutTok::Label(z0)]);
    }
    case.script()
}

proptest! {
    #![proptest_config(config())]

    /// A label of extent 1 in one place and more elsewhere is `size1_broadcast`, also within
    /// one operand (a diagonal).
    #[test]
    fn prop_named_size1_broadcast_is_rejected(v in choices()) {
        let d = &mut Draw::new(&v);
        let big = 2 + d.below(4);
        let same = d.chance(30);
        let src = if d.chance(50) {
            with_label(d, 1, big, same)
        } else {
            with_label(d, big, 1, same)
        };
        prop_assert_eq!(codes(&src), vec!["tdsl::pattern::size1_broadcast"], "{}", src);
    }

    /// A label with two different extents (both above 1) is `extent_mismatch`.
    #[test]
    fn prop_label_extent_mismatch_is_rejected(v in choices()) {
        let d = &mut Draw::new(&v);
        let a = 2 + d.below(4);
        let b = 2 + (a - 2 + 1 + d.below(3)) % 4;
        let same = d.chance(30);
        let src = with_label(d, a, b, same);
        prop_assert_eq!(codes(&src), vec!["tdsl::check::extent_mismatch"], "{}", src);
    }

    /// `...` axes that numpy cannot broadcast (different extents, neither 1) are
    /// `broadcast_mismatch`.
    #[test]
    fn prop_ellipsis_broadcast_mismatch_is_rejected(v in choices()) {
        let d = &mut Draw::new(&v);
        let mut case = gen_case(d, 2, 4);
        let a = 2 + d.below(4);
        let b = 2 + (a - 2 + 1 + d.below(3)) % 4;
        for op in &mut case.operands {
            op.ell = None;
        }
        let w0 = 1 + d.below(2);
        let w1 = 1 + d.below(2);
        let at0 = d.below(case.operands[0].slots.len() + 1);
        let at1 = d.below(case.operands[1].slots.len() + 1);
        case.operands[0].ell = Some((at0, std::iter::repeat_n(a, w0).collect()));
        case.operands[1].ell = Some((at1, std::iter::repeat_n(b, w1).collect()));
        case.output.retain(|g| !g.contains(&OutTok::Ellipsis));
        case.output.push(vec![OutTok::Ellipsis]);
        let src = case.script();
        prop_assert_eq!(codes(&src), vec!["tdsl::check::broadcast_mismatch"], "{}", src);
    }

    /// `...` covering at least one axis with no `...` in the output is `ellipsis`; an output
    /// label in no operand is `axis_one_side`; a wrong operand count is `operand_count`.
    #[test]
    fn prop_malformed_einsums_are_rejected(v in choices()) {
        let d = &mut Draw::new(&v);
        let mut case = gen_case(d, 1, 4);
        let base = case.clone();

        let k = d.below(case.operands.len());
        let at = d.below(case.operands[k].slots.len() + 1);
        case.operands[k].ell = Some((at, vec![1 + d.below(4)]));
        case.output.retain(|g| !g.contains(&OutTok::Ellipsis));
        let src = case.script();
        prop_assert_eq!(codes(&src), vec!["tdsl::pattern::ellipsis"], "{}", src);

        let mut case = base.clone();
        case.labels.push(("zz".to_string(), 2));
        let zz = case.labels.len() - 1;
        let at = d.below(case.output.len() + 1);
        case.output.insert(at, vec![OutTok::Label(zz)]);
        let src = case.script();
        prop_assert_eq!(codes(&src), vec!["tdsl::pattern::axis_one_side"], "{}", src);

        let src = base.script();
        let pattern = base.pattern();
        let (ins, outs) = pattern.split_once(" -> ").unwrap_or((&pattern, ""));
        let fewer = match ins.rsplit_once(", ") {
            Some((rest, _)) => format!("{rest} -> {outs}"),
            None => format!("{ins}, {ins} -> {outs}"),
        };
        let src = src.replace(&pattern, &fewer);
        prop_assert_eq!(codes(&src), vec!["tdsl::pattern::operand_count"], "{}", src);
    }
}
