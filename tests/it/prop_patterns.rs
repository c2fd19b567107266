//! Property tests of `rearrange`, `reduce` and `repeat`.
//!
//! Each case is a random einops pattern built from a list of named (or, for `reduce` pooling,
//! numeric) elementary axes with extents 1..=5: some adjacent ones are composed into input
//! groups, units `1` / `()` are sprinkled in, and the output is a random permutation and
//! grouping (rearrange), a random subset under a random op (reduce) or the input axes mixed
//! with new named or numeric axes (repeat). The pattern text and a whole script are written
//! from the case, run through the library (`compile`, `bind_inputs`, the reference
//! interpreter), and compared with an independent oracle in this file that walks every
//! elementary coordinate and does the index arithmetic by hand. Further properties: a
//! rearrange followed by its inverse is the identity, `reduce "sum"` of a `repeat` multiplies
//! by the repeat count, `...` patterns equal their explicit spellings, and some malformed
//! patterns fail with their documented codes.
//!
//! Cases come from a list of random `u32` choices read by [`Draw`]; choice 0 always means the
//! simplest option, so proptest's shrinking of that list shrinks the case.

use crate::common::{codes, run};
use crate::draw::{config, Draw};
use proptest::prelude::*;
use tdsl::DType;

/// The raw choices a case is built from.
fn choices() -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(any::<u32>(), 0..96)
}

/// Axis extents to draw from: 1 and primes first.
const EXTS: [usize; 5] = [2, 1, 3, 5, 4];
/// Names of input axes (multi-letter and with digits or `_` inside).
const NAMES: [&str; 8] = ["a", "b", "hh", "w2", "dim", "k", "seq", "x_y"];
/// Names of new repeat axes, disjoint from [`NAMES`].
const NEW_NAMES: [&str; 3] = ["c", "rep", "n3"];
/// Cap on the number of input elements, to keep the debug build fast.
const MAX_ELEMS: usize = 360;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Rearrange,
    Reduce,
    Repeat,
}

/// One elementary input axis: a name, or `None` for a numeric (anonymous) axis.
#[derive(Debug, Clone)]
struct Elem {
    name: Option<String>,
    ext: usize,
}

/// One elementary output axis: an input axis, or a new one (named or numeric) from repeat.
#[derive(Debug, Clone)]
enum OutItem {
    Keep(usize),
    New(Option<String>, usize),
}

/// One slot of a pattern side: a unit (`1` or `()`) or a group, parenthesised or bare.
#[derive(Debug, Clone)]
enum Slot<T> {
    Unit(&'static str),
    Group(Vec<T>, bool),
}

#[derive(Debug, Clone)]
struct Case {
    op: Op,
    reduce: &'static str,
    dtype: DType,
    init: String,
    elems: Vec<Elem>,
    left: Vec<Slot<usize>>,
    right: Vec<Slot<OutItem>>,
    kwargs: Vec<(String, usize)>,
}

fn render<T>(slots: &[Slot<T>], atom: impl Fn(&T) -> String) -> String {
    slots
        .iter()
        .map(|s| match s {
            Slot::Unit(u) => u.to_string(),
            Slot::Group(items, paren) => {
                let inner: Vec<String> = items.iter().map(&atom).collect();
                if *paren || items.len() != 1 {
                    format!("({})", inner.join(" "))
                } else {
                    inner[0].clone()
                }
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn slot_extent<T>(s: &Slot<T>, ext: impl Fn(&T) -> usize) -> usize {
    match s {
        Slot::Unit(_) => 1,
        Slot::Group(items, _) => items.iter().map(ext).product(),
    }
}

impl Case {
    fn elem_text(&self, i: usize) -> String {
        let e = &self.elems[i];
        e.name.clone().unwrap_or_else(|| e.ext.to_string())
    }

    fn out_text(&self, it: &OutItem) -> String {
        match it {
            OutItem::Keep(i) => self.elem_text(*i),
            OutItem::New(Some(n), _) => n.clone(),
            OutItem::New(None, e) => e.to_string(),
        }
    }

    fn out_ext(&self, it: &OutItem) -> usize {
        match it {
            OutItem::Keep(i) => self.elems[*i].ext,
            OutItem::New(_, e) => *e,
        }
    }

    fn left_text(&self) -> String {
        render(&self.left, |&i| self.elem_text(i))
    }

    fn right_text(&self) -> String {
        render(&self.right, |it| self.out_text(it))
    }

    fn pattern(&self) -> String {
        format!("{} -> {}", self.left_text(), self.right_text())
    }

    fn in_shape(&self) -> Vec<usize> {
        self.left
            .iter()
            .map(|s| slot_extent(s, |&i| self.elems[i].ext))
            .collect()
    }

    fn out_shape(&self) -> Vec<usize> {
        self.right
            .iter()
            .map(|s| slot_extent(s, |it| self.out_ext(it)))
            .collect()
    }

    fn call(&self, x: &str) -> String {
        let (name, op) = match self.op {
            Op::Rearrange => ("rearrange", String::new()),
            Op::Reduce => ("reduce", format!(", \"{}\"", self.reduce)),
            Op::Repeat => ("repeat", String::new()),
        };
        format!(
            "{name}({x}, \"{}\"{op}{})",
            self.pattern(),
            kwargs_text(&self.kwargs)
        )
    }

    fn script(&self) -> String {
        format!(
            "{}\ny = {}\noutput y\n",
            input_decl(self.dtype, &self.in_shape(), &self.init),
            self.call("x")
        )
    }
}

fn kwargs_text(kwargs: &[(String, usize)]) -> String {
    kwargs.iter().map(|(n, v)| format!(", {n}={v}")).collect()
}

fn input_decl(dtype: DType, shape: &[usize], init: &str) -> String {
    let dims: Vec<String> = shape.iter().map(|e| e.to_string()).collect();
    format!("input x: {}[{}] = {init}", dtype.name(), dims.join(", "))
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

/// The oracle: the expected output shape and values (in f64, before rounding to the dtype)
/// and, per output element, the scale of the computation (for tolerances).
fn oracle(case: &Case, x: &[f64]) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    let n_in = case.elems.len();
    // Coordinates: the input's elementary axes, then every new axis in output order.
    let mut exts: Vec<usize> = case.elems.iter().map(|e| e.ext).collect();
    for s in &case.right {
        if let Slot::Group(items, _) = s {
            for it in items {
                if let OutItem::New(_, e) = it {
                    exts.push(*e);
                }
            }
        }
    }
    let in_shape = case.in_shape();
    let out_shape = case.out_shape();
    let n_out: usize = out_shape.iter().product();
    let mut acc: Vec<Option<f64>> = vec![None; n_out];
    let mut scale = vec![0.0f64; n_out];
    let mut count = vec![0usize; n_out];
    for_each_index(&exts, |c| {
        let mut flat_in = 0;
        for (s, &ext) in case.left.iter().zip(&in_shape) {
            let coord = match s {
                Slot::Unit(_) => 0,
                Slot::Group(items, _) => items.iter().fold(0, |a, &i| a * case.elems[i].ext + c[i]),
            };
            flat_in = flat_in * ext + coord;
        }
        let mut new_k = n_in;
        let mut flat_out = 0;
        for (s, &ext) in case.right.iter().zip(&out_shape) {
            let coord = match s {
                Slot::Unit(_) => 0,
                Slot::Group(items, _) => items.iter().fold(0, |a, it| match it {
                    OutItem::Keep(i) => a * case.elems[*i].ext + c[*i],
                    OutItem::New(_, e) => {
                        new_k += 1;
                        a * e + c[new_k - 1]
                    }
                }),
            };
            flat_out = flat_out * ext + coord;
        }
        let v = x[flat_in];
        let cell = &mut acc[flat_out];
        count[flat_out] += 1;
        *cell = Some(match (case.op, case.reduce, *cell) {
            (Op::Reduce, "sum" | "mean", a) => a.unwrap_or(0.0) + v,
            (Op::Reduce, "prod", a) => a.unwrap_or(1.0) * v,
            (Op::Reduce, "max", a) => a.map_or(v, |a| a.max(v)),
            (Op::Reduce, "min", a) => a.map_or(v, |a| a.min(v)),
            (_, _, None) => v,
            // Rearrange and repeat read exactly one input value per output element.
            (_, _, Some(old)) => {
                assert_eq!(old, v, "oracle: two values for one output element");
                v
            }
        });
        scale[flat_out] = match case.reduce {
            "prod" => scale[flat_out].max(1.0) * v.abs().max(1.0),
            _ => scale[flat_out] + v.abs(),
        };
    });
    let values = acc
        .iter()
        .zip(&count)
        .map(|(a, &n)| {
            let a = a.expect("oracle: every output element is written");
            if case.op == Op::Reduce && case.reduce == "mean" {
                a / n as f64
            } else {
                a
            }
        })
        .collect();
    (out_shape, values, scale)
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

/// `got` equals `exact` rounded to `dtype`, up to one ulp and the f64 error of summing values
/// of total magnitude `scale` in another order.
fn close(dtype: DType, got: f64, exact: f64, scale: f64) -> bool {
    if got == dtype.round(exact) || got == exact {
        return true;
    }
    let (eps, tiny) = precision(dtype);
    (got - exact).abs() <= eps * exact.abs() + 1e-12 * scale + tiny
}

/// Runs `script` and compares its single output with the expected shape and values.
fn check_values(
    script: &str,
    dtype: DType,
    shape: &[usize],
    exact: &[f64],
    scale: &[f64],
) -> Result<(), TestCaseError> {
    let out = run(script).map_err(|d| TestCaseError::fail(format!("{d}\nscript:\n{script}")))?;
    prop_assert_eq!(out.len(), 1);
    prop_assert_eq!(&out[0].shape(), &shape.to_vec(), "script:\n{}", script);
    prop_assert_eq!(out[0].dtype(), dtype);
    let got = out[0].to_f64();
    prop_assert_eq!(got.len(), exact.len());
    for (k, (&g, &e)) in got.iter().zip(exact).enumerate() {
        prop_assert!(
            close(dtype, g, e, scale[k]),
            "element {}: got {}, expected {} (exact {})\nscript:\n{}",
            k,
            g,
            dtype.round(e),
            e,
            script
        );
    }
    Ok(())
}

/// The input values the script will see (its initialiser, bound by the library).
fn input_values(script: &str) -> Vec<f64> {
    let p = crate::common::compile(script).expect("the script compiles");
    let inputs = tdsl::bind::bind_inputs(&p, Default::default()).expect("inputs bind");
    inputs[0].to_f64()
}

/// Runs a case through tdsl and checks it against the oracle.
fn check_case(case: &Case) -> Result<(), TestCaseError> {
    let script = case.script();
    let x = input_values(&script);
    let (shape, exact, scale) = oracle(case, &x);
    check_values(&script, case.dtype, &shape, &exact, &scale)
}

// ---------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------

fn gen_dtype(d: &mut Draw) -> DType {
    match d.below(8) {
        0..=4 => DType::F64,
        5 => DType::F32,
        6 => DType::F16,
        _ => DType::BF16,
    }
}

fn gen_init(d: &mut Draw, dtype: DType) -> String {
    match d.below(4) {
        2 if matches!(dtype, DType::F64 | DType::F32) => "arange".to_string(),
        3 => format!("rand(seed={})", d.below(1000)),
        _ => format!("randn(seed={})", d.below(1000)),
    }
}

/// 1..=`max` named elementary axes with distinct names.
fn gen_elems(d: &mut Draw, max: usize) -> Vec<Elem> {
    let n = 1 + d.below(max);
    let mut names = NAMES.to_vec();
    d.shuffle(&mut names);
    names
        .into_iter()
        .take(n)
        .map(|name| Elem {
            name: Some(name.to_string()),
            ext: EXTS[d.below(EXTS.len())],
        })
        .collect()
}

/// Shrinks the largest named extents until the input has at most [`MAX_ELEMS`] elements.
fn cap_size(elems: &mut [Elem]) {
    while elems.iter().map(|e| e.ext).product::<usize>() > MAX_ELEMS {
        let big = (0..elems.len())
            .filter(|&i| elems[i].name.is_some())
            .max_by_key(|&i| elems[i].ext)
            .expect("a named axis");
        elems[big].ext -= 1;
    }
}

fn gen_unit(d: &mut Draw) -> &'static str {
    if d.chance(50) {
        "()"
    } else {
        "1"
    }
}

/// Splits `items` into adjacent groups of 1..=3, sometimes parenthesising single items, and
/// sprinkles unit slots in.
fn group<T>(d: &mut Draw, items: Vec<T>) -> Vec<Slot<T>> {
    let mut slots = Vec::new();
    let mut it = items.into_iter().peekable();
    loop {
        if d.chance(8) {
            slots.push(Slot::Unit(gen_unit(d)));
        }
        if it.peek().is_none() {
            break;
        }
        let size = 1 + d.below(3);
        let g: Vec<T> = it.by_ref().take(size).collect();
        let paren = g.len() > 1 || d.chance(10);
        slots.push(Slot::Group(g, paren));
    }
    slots
}

/// Axis lengths for the input groups: every named axis of a group but at most one.
fn left_kwargs(d: &mut Draw, elems: &[Elem], left: &[Slot<usize>]) -> Vec<(String, usize)> {
    let mut kw = Vec::new();
    for s in left {
        if let Slot::Group(items, _) = s {
            let named: Vec<usize> = items
                .iter()
                .copied()
                .filter(|&i| elems[i].name.is_some())
                .collect();
            // `unknown == named.len()`: every length is given.
            let unknown = d.below(named.len() + 1);
            for (k, &i) in named.iter().enumerate() {
                if k != unknown {
                    kw.push((elems[i].name.clone().unwrap_or_default(), elems[i].ext));
                }
            }
        }
    }
    d.shuffle(&mut kw);
    kw
}

fn gen_rearrange(d: &mut Draw) -> Case {
    let dtype = gen_dtype(d);
    let init = gen_init(d, dtype);
    let mut elems = gen_elems(d, 5);
    cap_size(&mut elems);
    let left = group(d, (0..elems.len()).collect());
    let kwargs = left_kwargs(d, &elems, &left);
    let mut out: Vec<OutItem> = (0..elems.len()).map(OutItem::Keep).collect();
    d.shuffle(&mut out);
    let right = group(d, out);
    Case {
        op: Op::Rearrange,
        reduce: "",
        dtype,
        init,
        elems,
        left,
        right,
        kwargs,
    }
}

fn gen_reduce(d: &mut Draw) -> Case {
    let dtype = gen_dtype(d);
    let init = gen_init(d, dtype);
    let reduce = ["sum", "mean", "max", "min", "prod"][d.below(5)];
    let mut elems = gen_elems(d, 4);
    // Numeric axes pool: `(h 2)` or a bare `3`.
    for _ in 0..2 {
        if d.chance(30) {
            let at = d.below(elems.len() + 1);
            elems.insert(
                at,
                Elem {
                    name: None,
                    ext: 2 + d.below(2),
                },
            );
        }
    }
    cap_size(&mut elems);
    let left = group(d, (0..elems.len()).collect());
    let kwargs = left_kwargs(d, &elems, &left);
    let mut kept: Vec<OutItem> = (0..elems.len())
        .filter(|&i| elems[i].name.is_some())
        .filter(|_| !d.chance(40))
        .map(OutItem::Keep)
        .collect();
    d.shuffle(&mut kept);
    let right = group(d, kept);
    Case {
        op: Op::Reduce,
        reduce,
        dtype,
        init,
        elems,
        left,
        right,
        kwargs,
    }
}

fn gen_repeat(d: &mut Draw) -> Case {
    let dtype = gen_dtype(d);
    let init = gen_init(d, dtype);
    let mut elems = gen_elems(d, 4);
    cap_size(&mut elems);
    let left = group(d, (0..elems.len()).collect());
    let mut kwargs = left_kwargs(d, &elems, &left);
    let mut out: Vec<OutItem> = (0..elems.len()).map(OutItem::Keep).collect();
    let mut new_names = NEW_NAMES.to_vec();
    d.shuffle(&mut new_names);
    for name in new_names.into_iter().take(d.below(3)) {
        if d.chance(30) {
            out.push(OutItem::New(None, 2 + d.below(3)));
        } else {
            let ext = EXTS[d.below(EXTS.len())];
            kwargs.push((name.to_string(), ext));
            out.push(OutItem::New(Some(name.to_string()), ext));
        }
    }
    d.shuffle(&mut out);
    let right = group(d, out);
    Case {
        op: Op::Repeat,
        reduce: "",
        dtype,
        init,
        elems,
        left,
        right,
        kwargs,
    }
}

// ---------------------------------------------------------------------------------------------
// Properties against the oracle
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    /// A random rearrange (permutation, composition, decomposition, units) moves every value
    /// where index arithmetic says it goes.
    #[test]
    fn prop_rearrange_matches_oracle(v in choices()) {
        check_case(&gen_rearrange(&mut Draw::new(&v)))?;
    }

    /// A random reduce (any op, any subset of axes, numeric pooling, units, scalar output)
    /// combines exactly the values the oracle combines.
    #[test]
    fn prop_reduce_matches_oracle(v in choices()) {
        check_case(&gen_reduce(&mut Draw::new(&v)))?;
    }

    /// A random repeat (new named and numeric axes anywhere, in any group) copies the input
    /// where index arithmetic says.
    #[test]
    fn prop_repeat_matches_oracle(v in choices()) {
        check_case(&gen_repeat(&mut Draw::new(&v)))?;
    }

    /// `rearrange(rearrange(x, "L -> R"), "R -> L")` is `x`.
    #[test]
    fn prop_rearrange_then_inverse_is_identity(v in choices()) {
        let d = &mut Draw::new(&v);
        let case = gen_rearrange(d);
        // The inverse needs every length of its input groups but one.
        let mut inv_kwargs = Vec::new();
        for s in &case.right {
            if let Slot::Group(items, _) = s {
                let skip = d.below(items.len() + 1);
                for (k, it) in items.iter().enumerate() {
                    if let (true, OutItem::Keep(i)) = (k != skip, it) {
                        let e = &case.elems[*i];
                        inv_kwargs.push((e.name.clone().unwrap_or_default(), e.ext));
                    }
                }
            }
        }
        let script = format!(
            "{}\ny = {}\nz = rearrange(y, \"{} -> {}\"{})\noutput z\n",
            input_decl(case.dtype, &case.in_shape(), &case.init),
            case.call("x"),
            case.right_text(),
            case.left_text(),
            kwargs_text(&inv_kwargs),
        );
        let x = input_values(&script);
        let out = run(&script).map_err(|e| TestCaseError::fail(format!("{e}\n{script}")))?;
        prop_assert_eq!(&out[0].shape(), &case.in_shape(), "script:\n{}", script);
        prop_assert_eq!(out[0].to_f64(), x, "script:\n{}", script);
    }

    /// `reduce(repeat(x, "L -> R"), "R -> L", "sum")` is `x` times the number of copies.
    #[test]
    fn prop_sum_of_repeat_multiplies_by_the_count(v in choices()) {
        let d = &mut Draw::new(&v);
        let case = gen_repeat(d);
        // Every length is given to the reduce: its groups may hold several new axes.
        let mut kw: Vec<(String, usize)> = case
            .elems
            .iter()
            .filter_map(|e| Some((e.name.clone()?, e.ext)))
            .collect();
        let mut copies = 1usize;
        for s in &case.right {
            if let Slot::Group(items, _) = s {
                for it in items {
                    if let OutItem::New(name, e) = it {
                        copies *= e;
                        if let Some(n) = name {
                            kw.push((n.clone(), *e));
                        }
                    }
                }
            }
        }
        d.shuffle(&mut kw);
        let script = format!(
            "{}\ny = {}\nz = reduce(y, \"{} -> {}\", \"sum\"{})\noutput z\n",
            input_decl(case.dtype, &case.in_shape(), &case.init),
            case.call("x"),
            case.right_text(),
            case.left_text(),
            kwargs_text(&kw),
        );
        let x = input_values(&script);
        let exact: Vec<f64> = x.iter().map(|v| v * copies as f64).collect();
        let scale: Vec<f64> = exact.iter().map(|v| v.abs()).collect();
        check_values(&script, case.dtype, &case.in_shape(), &exact, &scale)?;
    }
}

// ---------------------------------------------------------------------------------------------
// Ellipsis
// ---------------------------------------------------------------------------------------------

/// `...` patterns: (op, left, right, whether `h` is given as a length, whether `c` is).
const ELLIPSIS_TEMPLATES: [(&str, &str, &str, bool, bool); 12] = [
    ("rearrange", "... h w", "... (h w)", false, false),
    ("rearrange", "... h w", "w (... h)", false, false),
    ("rearrange", "h ... w", "(w h) ...", false, false),
    ("rearrange", "... h w", "(...) h w", false, false),
    ("rearrange", "... (h w)", "w ... h", true, false),
    ("reduce", "... h w", "... h", false, false),
    ("reduce", "... h w", "h w", false, false),
    ("reduce", "h ... w", "(...)", false, false),
    ("reduce", "... (h w)", "... w", true, false),
    ("repeat", "... h", "... h c", false, true),
    ("repeat", "h ...", "c (... h)", false, true),
    ("repeat", "... h w", "(c ...) w h", false, true),
];

/// Replaces `...` by the explicit axis names and tidies the spaces.
fn explicit(side: &str, names: &[String]) -> String {
    let s = side.replace("...", &names.join(" "));
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    s.replace("( ", "(").replace(" )", ")")
}

proptest! {
    #![proptest_config(config())]

    /// A pattern with `...` (covering 0 to 3 axes) gives the same shape and values as the same
    /// pattern with those axes named.
    #[test]
    fn prop_ellipsis_equals_explicit_axes(v in choices()) {
        let d = &mut Draw::new(&v);
        let (op, left, right, h_kw, c_kw) = ELLIPSIS_TEMPLATES[d.below(ELLIPSIS_TEMPLATES.len())];
        let dtype = gen_dtype(d);
        let init = gen_init(d, dtype);
        let prefix: Vec<usize> = (0..d.below(4)).map(|_| EXTS[d.below(EXTS.len())]).collect();
        let names: Vec<String> = (0..prefix.len()).map(|i| format!("e{i}")).collect();
        let (h, w, c) = (EXTS[d.below(5)], EXTS[d.below(5)], EXTS[d.below(5)]);
        let reduce = ["sum", "mean", "max", "min", "prod"][d.below(5)];
        let mut shape = Vec::new();
        for tok in left.replace("(h w)", "hw").split(' ') {
            match tok {
                "..." => shape.extend(&prefix),
                "h" => shape.push(h),
                "w" => shape.push(w),
                _ => shape.push(h * w),
            }
        }
        let mut kw = Vec::new();
        if h_kw {
            kw.push(("h".to_string(), h));
        }
        if c_kw {
            kw.push(("c".to_string(), c));
        }
        let op_arg = if op == "reduce" { format!(", \"{reduce}\"") } else { String::new() };
        let script = |l: &str, r: &str| {
            format!(
                "{}\ny = {op}(x, \"{l} -> {r}\"{op_arg}{})\noutput y\n",
                input_decl(dtype, &shape, &init),
                kwargs_text(&kw)
            )
        };
        let with = script(left, right);
        let without = script(&explicit(left, &names), &explicit(right, &names));
        let a = run(&with).map_err(|e| TestCaseError::fail(format!("{e}\n{with}")))?;
        let b = run(&without).map_err(|e| TestCaseError::fail(format!("{e}\n{without}")))?;
        prop_assert_eq!(&a[0].shape(), &b[0].shape(), "{}\nvs\n{}", with, without);
        let (ga, gb) = (a[0].to_f64(), b[0].to_f64());
        for (x, y) in ga.iter().zip(&gb) {
            prop_assert!(
                x == y || (x - y).abs() <= 1e-12 * x.abs().max(1.0),
                "{} vs {}\n{}\nvs\n{}", x, y, with, without
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    /// Dropping an input axis from a valid rearrange's output is `axis_one_side`.
    #[test]
    fn prop_rearrange_dropping_an_axis_is_rejected(v in choices()) {
        let d = &mut Draw::new(&v);
        let mut case = gen_rearrange(d);
        let drop = d.below(case.elems.len());
        for s in &mut case.right {
            if let Slot::Group(items, _) = s {
                items.retain(|it| !matches!(it, OutItem::Keep(i) if *i == drop));
            }
        }
        case.right.retain(|s| !matches!(s, Slot::Group(items, _) if items.is_empty()));
        let script = case.script();
        prop_assert_eq!(codes(&script), vec!["tdsl::pattern::axis_one_side"], "{}", script);
    }

    /// Splitting an axis by a length that does not divide it is `indivisible`; splitting it
    /// into two unknown lengths is `two_unknowns`; a new repeat axis without a length is
    /// `unknown_extent`.
    #[test]
    fn prop_bad_splits_are_rejected(v in choices()) {
        let d = &mut Draw::new(&v);
        let k = 2 + d.below(4);
        let e = (1 + d.below(12)) * k + 1 + d.below(k - 1);
        let f = EXTS[d.below(5)];
        let (call, rest) = match d.below(3) {
            0 => ("rearrange", "(p q) r -> q (r p)"),
            1 => ("reduce", "(p q) r -> r"),
            _ => ("repeat", "(p q) r -> r q z p"),
        };
        let extra = match call {
            "reduce" => ", \"max\"".to_string(),
            "repeat" => ", z=2".to_string(),
            _ => String::new(),
        };
        let src = |kw: &str| {
            format!(
                "input x: f32[{e}, {f}] = zeros\ny = {call}(x, \"{rest}\"{extra}{kw})\noutput y\n"
            )
        };
        let which = if d.chance(50) { "p" } else { "q" };
        let s = src(&format!(", {which}={k}"));
        prop_assert_eq!(codes(&s), vec!["tdsl::pattern::indivisible"], "{}", s);
        let s = src("");
        prop_assert_eq!(codes(&s), vec!["tdsl::pattern::two_unknowns"], "{}", s);
        if call == "repeat" {
            let s = format!("input x: f32[{e}, {f}] = zeros\ny = repeat(x, \"a b -> b z a\")\noutput y\n");
            prop_assert_eq!(codes(&s), vec!["tdsl::check::unknown_extent"], "{}", s);
        }
    }
}
