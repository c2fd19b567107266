//! Differential tests of the planner: random multi-statement programs are evaluated by the
//! reference interpreter (the oracle), by the planner's loop IR run by its evaluator, and by the
//! Cranelift JIT (every backend in [`backends`]); the results must agree.
//!
//! A program is generated shape first: to build a value of a given shape the generator picks
//! an input or an earlier statement of that shape (so names are reused and the planner's
//! sharing and recompute decisions matter), or an operation whose operands it then builds
//! recursively: elementwise functions and arithmetic with numpy broadcasting, weak literals and
//! sizes, casts, `rearrange` (permutations, splits into two or three, merges, unit axes, `...`
//! and `(...)`), `reduce` (every op, pooling, kept unit axes, `...`), `repeat`, `einsum` with 1
//! to 4 operands (diagonals, compositions, `()`, `...` broadcasting, scalar outputs) whose
//! operands are themselves strided views or expressions, and the fused patterns of real models
//! (`x - max`, softmax, layer norm, one value used many times, chains of statements). Inputs
//! have every dtype, extents 1 to 9 (1 and primes included), sometimes a sparse format. Four
//! families weight these differently: [`Family::Small`] (everything), [`Family::Gemm`]
//! (extents 8 to 24 and matrix products, so contractions become GEMM calls with strided or
//! relayouted operands), [`Family::Fused`] and [`Family::Views`].
//!
//! Tolerances: the same program is also run by the interpreter in f64 (each input read at its
//! own dtype, then widened; each cast rounding, then widening again); the difference between the two interpreter runs measures how
//! sensitive each output is to the interpreter's roundings (f16 and bf16 values round at every
//! node in the interpreter but only at stores in the planner). A backend may differ from the
//! interpreter by a few times that sensitivity, plus a floor of about two ulps of the least
//! precise dtype in the program relative to the output's magnitude (f64-only programs: 1e-9),
//! plus an ulp times the square root of the longest reduction (accumulation order and f32
//! accumulators). Cases whose interpreter outputs are not finite are skipped. The mismatches
//! found so far are the `tests/corpus/diff_*.tdsl` scripts.
//!
//! Cases come from a list of random `u32` choices read by [`Draw`]; choice 0 always means the
//! simplest option, so proptest's shrinking of that list shrinks the program. Two tests are tools
//! that do nothing unless their environment variable is set: `diff_soak` runs thousands of unshrunk cases and groups the failures, and
//! `diff_script` runs one script file through every backend.

use crate::draw::{config, Draw};
use proptest::prelude::*;
use std::collections::BTreeSet;
use tdsl::check::{NodeKind, Program};
use tdsl::{DType, Tensor};

/// The raw choices a case is built from.
fn choices() -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(any::<u32>(), 0..400)
}

// ---------------------------------------------------------------------------------------------
// Backends
// ---------------------------------------------------------------------------------------------

/// Each backend evaluates a checked program on bound inputs, given the output extents.
type Backend = fn(&Program, &[Tensor], &[Vec<usize>]) -> Result<Vec<Tensor>, String>;

/// Every backend compared with the interpreter.
fn backends() -> Vec<(&'static str, Backend)> {
    let mut out: Vec<(&'static str, Backend)> = vec![
        ("loop-eval", loop_eval),
        ("jit", jit),
        ("expanded-calls", expanded_calls),
    ];
    if cxx().is_some() {
        out.push(("cuda-emulated", cuda_emulated));
    }
    if crate::gpu::device().is_some() {
        out.push(("cuda", cuda));
    }
    out
}

/// The plan on the GPU (`Engine::Cuda`), when this machine has one.
fn cuda(p: &Program, inputs: &[Tensor], shapes: &[Vec<usize>]) -> Result<Vec<Tensor>, String> {
    let plan = tdsl::plan::lower::plan_program(p).map_err(|d| d.to_string())?;
    tdsl::runtime::run_on(tdsl::session::Engine::Cuda, &plan, inputs, shapes)
        .map_err(|d| d.to_string())
}

/// The host's C++ compiler, found once (`None`: the CUDA emulation is skipped, and said so).
pub(crate) fn cxx() -> Option<&'static std::path::PathBuf> {
    static CXX: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    CXX.get_or_init(|| {
        let c = tdsl_cuda::emulate::compiler();
        if c.is_none() {
            eprintln!("skipped: the CUDA emulation (no C++ compiler: set CXX or install g++)");
        }
        c
    })
    .as_ref()
}

/// The CUDA backend's generated kernels (the text NVRTC compiles), compiled for the host with
/// the emulation prelude and run thread by thread (`tdsl_cuda::emulate`).
pub(crate) fn cuda_emulated(
    p: &Program,
    inputs: &[Tensor],
    shapes: &[Vec<usize>],
) -> Result<Vec<Tensor>, String> {
    let plan = tdsl::plan::lower::plan_program(p).map_err(|d| d.to_string())?;
    let cxx = cxx().ok_or("no C++ compiler")?;
    let emu = tdsl_cuda::emulate::Emulator::compile(&plan.loops, cxx)?;
    let mut bufs = tdsl::runtime::buffers(&plan, inputs).map_err(|d| d.to_string())?;
    emu.run(&mut bufs)?;
    Ok(tdsl::runtime::outputs(&plan, shapes, bufs))
}

/// The plan with its library calls written as loop nests (`tdsl_loop::expand`, the generic
/// kernels a GPU backend renders), verified and run by the evaluator.
fn expanded_calls(
    p: &Program,
    inputs: &[Tensor],
    shapes: &[Vec<usize>],
) -> Result<Vec<Tensor>, String> {
    let mut plan = tdsl::plan::lower::plan_program(p).map_err(|d| d.to_string())?;
    plan.loops = tdsl_loop::expand::expand_calls(&plan.loops);
    tdsl_loop::verify::verify(&plan.loops).map_err(|e| format!("{e:?}"))?;
    tdsl::runtime::run_eval(&plan, inputs, shapes).map_err(|d| d.to_string())
}

/// The planner's loop IR run by its evaluator: a mismatch with the interpreter is a planner bug.
fn loop_eval(p: &Program, inputs: &[Tensor], shapes: &[Vec<usize>]) -> Result<Vec<Tensor>, String> {
    let plan = tdsl::plan::lower::plan_program(p).map_err(|d| d.to_string())?;
    tdsl::runtime::run_eval(&plan, inputs, shapes).map_err(|d| d.to_string())
}

/// The plan compiled by the Cranelift JIT: if it differs from the interpreter and loop-eval
/// agrees, the bug is in the backend.
fn jit(p: &Program, inputs: &[Tensor], shapes: &[Vec<usize>]) -> Result<Vec<Tensor>, String> {
    let plan = tdsl::plan::lower::plan_program(p).map_err(|d| d.to_string())?;
    tdsl::runtime::run_jit(&plan, inputs, shapes).map_err(|d| d.to_string())
}

/// Whether two runs' outputs agree: every element within `tol` of the largest magnitude of its
/// output in `want` (NaN against NaN agrees). `Ok` gives the worst difference (as a fraction of
/// that scale); `Err` names the worst element (`got` `engine`, `want` in the reference: the
/// interpreter, or for the larger GPU products the CPU JIT).
pub(crate) fn agree(
    got: &[Tensor],
    want: &[Tensor],
    tol: f64,
    engine: &str,
) -> Result<f64, String> {
    if got.len() != want.len() {
        return Err(format!("{} outputs against {}", got.len(), want.len()));
    }
    let (mut worst, mut at) = (0.0f64, String::new());
    for (o, (g, w)) in got.iter().zip(want).enumerate() {
        if g.shape() != w.shape() {
            return Err(format!(
                "output {o} is {:?} against {:?}",
                g.shape(),
                w.shape()
            ));
        }
        let (g, w) = (g.to_f64(), w.to_f64());
        let scale = w.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
        for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
            let d = match (a.is_nan(), b.is_nan()) {
                (true, true) => 0.0,
                (false, false) => (a - b).abs() / scale,
                _ => f64::INFINITY,
            };
            if d > worst {
                worst = d;
                at = format!("output {o} element {i} is {a} {engine}, {b} in the reference");
            }
        }
    }
    if worst > tol {
        return Err(format!(
            "{at} (difference {worst:.3e} of the scale, tolerance {tol:.0e})"
        ));
    }
    Ok(worst)
}

#[test]
fn agree_names_the_worst_element_and_takes_nan_for_nan() {
    let t = |v: &[f64]| Tensor::from_f64(DType::F32, vec![v.len()], v);
    let want = [t(&[1.0, -4.0, f64::NAN])];
    assert_eq!(
        agree(&[t(&[1.0, -4.0, f64::NAN])], &want, 0.0, "here"),
        Ok(0.0)
    );
    let e = agree(&[t(&[1.1, -3.0, f64::NAN])], &want, 0.1, "here").unwrap_err();
    assert!(
        e.starts_with("output 0 element 1 is -3 here, -4 in the reference"),
        "{e}"
    );
    assert!(agree(&[t(&[1.0, -4.0, 0.0])], &want, 1.0, "here").is_err());
    assert!(agree(&[t(&[1.0, -4.0])], &want, 1.0, "here").is_err());
}

/// The extents of every output of a checked program.
pub(crate) fn output_shapes(p: &Program) -> Vec<Vec<usize>> {
    p.outputs
        .iter()
        .map(|o| {
            p.tensor_type(o.tensor)
                .shape
                .extents()
                .iter()
                .map(|&e| e as usize)
                .collect()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Comparison
// ---------------------------------------------------------------------------------------------

/// Relative floor of the tolerance for a program whose least precise dtype is `d`: about two
/// ulps of `d` (f64: 1e-9, which covers summation order).
fn floor(d: DType) -> f64 {
    match d {
        DType::F64 => 1e-9,
        DType::F32 => 4e-6,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
    }
}

/// The longest reduction in a program: summed label combinations per einsum output element,
/// reduced elements per reduce output element.
fn longest_reduction(p: &Program) -> f64 {
    let elems = |id: tdsl::check::NodeId| -> u64 { p.node(id).ty.shape.extents().iter().product() };
    (0..p.nodes.len())
        .map(|i| {
            let id = tdsl::check::NodeId(i as u32);
            match &p.node(id).kind {
                NodeKind::Einsum { spec, .. } => {
                    spec.labels.iter().map(|l| l.1).product::<u64>() / elems(id).max(1)
                }
                NodeKind::Pattern {
                    reduce: Some(_), x, ..
                } => elems(*x) / elems(id).max(1),
                _ => 1,
            }
        })
        .max()
        .unwrap_or(1) as f64
}

/// Compiles and binds a script, or says why not.
fn load(script: &str) -> Result<(Program, Vec<Tensor>), String> {
    let p = tdsl::compile(script, &Default::default())
        .map_err(|d| format!("the generated script does not compile: {d}"))?;
    let inputs = tdsl::bind::bind_inputs(&p, Default::default())
        .map_err(|d| format!("the generated script does not bind: {d}"))?;
    Ok((p, inputs))
}

fn finite(ts: &[Tensor]) -> bool {
    ts.iter().all(|t| t.to_f64().iter().all(|x| x.is_finite()))
}

/// Runs `script` by the interpreter and every backend and compares. `wide` is the same
/// program in f64 (the rounding-sensitivity reference); `low` the least precise dtype in it.
/// `Ok(false)`: skipped (an output is not finite).
fn differ(script: &str, wide: &str, low: DType) -> Result<bool, String> {
    let (p, inputs) = load(script)?;
    let want = tdsl::interp::run(&p, &inputs);
    let (pw, inputs_w) = load(wide)?;
    let reference = tdsl::interp::run(&pw, &inputs_w);
    if !finite(&want) || !finite(&reference) {
        return Ok(false);
    }
    let shapes = output_shapes(&p);
    // Roundings at different places (f32 accumulators and f16/bf16 values rounded at stores
    // in the planner, f64 accumulators and values rounded at every node in the interpreter)
    // add up over a reduction as a random walk: about an ulp times the square root of its
    // length, relative to O(1) terms.
    let acc = match low {
        DType::F64 => 0.0,
        DType::F32 => 2e-6,
        DType::F16 => 1e-3,
        DType::BF16 => 8e-3,
    } * longest_reduction(&p).sqrt();
    for (backend, run) in backends() {
        let got = std::panic::catch_unwind(|| run(&p, &inputs, &shapes))
            .map_err(|e| {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                format!("[{backend}] panicked: {msg}")
            })?
            .map_err(|e| format!("[{backend}] failed: {e}"))?;
        for (k, o) in p.outputs.iter().enumerate() {
            let (g, w, r) = (&got[k], &want[k], &reference[k]);
            if g.shape() != w.shape() || g.dtype() != w.dtype() {
                return Err(format!(
                    "[{backend}] output `{}`: {} {:?}, the interpreter gives {} {:?}",
                    o.name,
                    g.dtype(),
                    g.shape(),
                    w.dtype(),
                    w.shape()
                ));
            }
            let (g, w, r) = (g.to_f64(), w.to_f64(), r.to_f64());
            let sens: Vec<f64> = if low == DType::F64 {
                vec![0.0; w.len()]
            } else {
                w.iter().zip(&r).map(|(a, b)| (a - b).abs()).collect()
            };
            let max_sens = sens.iter().fold(0.0f64, |m, &x| m.max(x));
            let scale = w.iter().fold(0.0f64, |m, &x| m.max(x.abs()));
            for i in 0..w.len() {
                let tol = 8.0 * sens[i]
                    + 2.0 * max_sens
                    + floor(low) * (1.0 + w[i].abs() + 0.25 * scale)
                    + acc * (1.0 + w[i].abs() + scale);
                let ok = (g[i] - w[i]).abs() <= tol;
                if !ok {
                    return Err(format!(
                        "[{backend}] output `{}`{:?} element {i}: {} = {}, interpreter = {} \
                         (f64 interpreter {}, tolerance {tol:.3e})\n{backend}: {:?}\ninterp: {:?}",
                        o.name,
                        w.len(),
                        backend,
                        g[i],
                        w[i],
                        r[i],
                        short(&g),
                        short(&w)
                    ));
                }
            }
        }
    }
    Ok(true)
}

/// The first values of a tensor, for messages.
fn short(v: &[f64]) -> Vec<f64> {
    v.iter().take(12).copied().collect()
}

/// Generates a program from choices, runs it both ways, and fails with the script.
fn check(v: &[u32], family: Family) -> Result<(), TestCaseError> {
    let g = Gen::program(v, false, family);
    let script = g.script();
    let wide = Gen::program(v, true, family).script();
    let low = g.low();
    match differ(&script, &wide, low) {
        Ok(_) => Ok(()),
        Err(e) => Err(TestCaseError::fail(format!(
            "{e}\n--- script ---\n{script}"
        ))),
    }
}

/// The script of case `v` in the family `which` picks (0 small, 1 GEMM-like, 2 fused, 3 views),
/// for tests that run the generator's programs elsewhere (`races.rs`).
pub(crate) fn random_script(v: &[u32], which: u32) -> String {
    let family = [Family::Small, Family::Gemm, Family::Fused, Family::Views][which as usize % 4];
    Gen::program(v, false, family).script()
}

// ---------------------------------------------------------------------------------------------
// The program generator
// ---------------------------------------------------------------------------------------------

/// Which kind of programs to generate.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Family {
    /// Extents 1 to 9, every operation.
    Small,
    /// Extents up to 24 and einsum-heavy statements, so contractions become GEMM calls.
    Gemm,
    /// Statements built from the fused patterns: `x - max`, softmax, normalisation, reuse.
    Fused,
    /// Layout operations: rearrange, repeat and pooling chains, merges of one axis split two
    /// ways, einsums over strided views.
    Views,
}

/// Small extents: 1 and primes early.
const SMALL: [usize; 9] = [2, 1, 3, 5, 4, 7, 6, 8, 9];
/// Extents for the GEMM family (each at least 8).
const BIG: [usize; 10] = [8, 12, 16, 9, 24, 11, 13, 17, 20, 23];
/// Names of elementary axes in einops patterns.
const AXES: [&str; 14] = [
    "a", "b", "c", "h", "w", "g", "k2", "dd", "e_f", "z", "u", "v", "seq", "t3",
];
/// einsum labels (multi-letter ones included).
const LABELS: [&str; 14] = [
    "i", "j", "k", "l", "m", "p", "q", "r", "s", "bb", "c2", "hd", "dim", "x_y",
];
/// Cap on einsum label combinations (the interpreter visits each).
const MAX_COMBOS: usize = 8_000;
/// The same for the GEMM family.
const MAX_COMBOS_GEMM: usize = 20_000;
/// Cap on the elements of an einsum operand.
const MAX_OPERAND: usize = 12_000;

/// One elementary axis of an einops pattern: a name or a numeric literal, and its extent.
#[derive(Debug, Clone)]
struct Ax {
    text: String,
    ext: usize,
    named: bool,
}

/// One slot of a pattern side.
#[derive(Debug, Clone)]
enum Slot {
    Unit(&'static str),
    Ell,
    /// `(...)`: the ellipsis axes merged into one (right side only).
    EllGroup,
    /// Axes (indices into the pattern's axes); parenthesised if the flag is set.
    Group(Vec<usize>, bool),
}

/// An einops pattern under construction.
#[derive(Debug, Default)]
struct Pat {
    axes: Vec<Ax>,
    left: Vec<Slot>,
    right: Vec<Slot>,
    /// Extents of the input axes the left `...` covers.
    left_ell: Vec<usize>,
    kwargs: Vec<(String, String)>,
}

impl Pat {
    fn named(&mut self, ext: usize) -> usize {
        let i = self.axes.len();
        let text = if i < AXES.len() {
            AXES[i].to_string()
        } else {
            format!("ax{i}")
        };
        self.axes.push(Ax {
            text,
            ext,
            named: true,
        });
        i
    }
    fn numeric(&mut self, ext: usize) -> usize {
        self.axes.push(Ax {
            text: ext.to_string(),
            ext,
            named: false,
        });
        self.axes.len() - 1
    }
    fn side(&self, slots: &[Slot]) -> String {
        slots
            .iter()
            .map(|s| match s {
                Slot::Unit(u) => u.to_string(),
                Slot::Ell => "...".to_string(),
                Slot::EllGroup => "(...)".to_string(),
                Slot::Group(items, paren) => {
                    let inner: Vec<&str> =
                        items.iter().map(|&i| self.axes[i].text.as_str()).collect();
                    if *paren || items.len() != 1 {
                        format!("({})", inner.join(" "))
                    } else {
                        inner[0].to_string()
                    }
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
    fn in_shape(&self) -> Vec<usize> {
        let mut shape = Vec::new();
        for s in &self.left {
            match s {
                Slot::Unit(_) | Slot::EllGroup => shape.push(1),
                Slot::Ell => shape.extend(self.left_ell.iter().copied()),
                Slot::Group(items, _) => {
                    shape.push(items.iter().map(|&i| self.axes[i].ext).product())
                }
            }
        }
        shape
    }
    fn call(&self, op: &str, x: &str, reduce: Option<&str>) -> String {
        let red = reduce.map(|r| format!(", \"{r}\"")).unwrap_or_default();
        let kw: String = self
            .kwargs
            .iter()
            .map(|(k, v)| format!(", {k}={v}"))
            .collect();
        format!(
            "{op}({x}, \"{} -> {}\"{red}{kw})",
            self.side(&self.left),
            self.side(&self.right)
        )
    }
}

/// A factorisation `e = a·b` with both factors above 1 (random order), if `e` is composite.
fn factor(d: &mut Draw, e: usize) -> Option<(usize, usize)> {
    let divs: Vec<usize> = (2..e).filter(|&k| e.is_multiple_of(k)).collect();
    if divs.is_empty() {
        return None;
    }
    let a = d.pick(&divs);
    Some((a, e / a))
}

/// An einsum operand slot: one label, a composition of labels, a unit `()` or `...`.
#[derive(Debug, Clone)]
enum ESlot {
    Labels(Vec<usize>),
    Unit,
    /// `...` and the extents it covers in this operand.
    Ell(Vec<usize>),
}

/// Whether every label of the operands can be learnt by the checker: from a plain slot, or as
/// the one unknown label of a composed slot (to a fixed point).
fn inferable(ops: &[Vec<ESlot>]) -> bool {
    let groups: Vec<&Vec<usize>> = ops
        .iter()
        .flatten()
        .filter_map(|s| match s {
            ESlot::Labels(g) => Some(g),
            ESlot::Ell(_) | ESlot::Unit => None,
        })
        .collect();
    let mut known: BTreeSet<usize> = groups
        .iter()
        .filter(|g| g.len() == 1)
        .map(|g| g[0])
        .collect();
    loop {
        let mut changed = false;
        for g in &groups {
            let unknown: Vec<usize> = g.iter().copied().filter(|l| !known.contains(l)).collect();
            if let [l] = unknown.as_slice() {
                known.insert(*l);
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

/// A named tensor available to later statements.
#[derive(Debug, Clone)]
struct Named {
    name: String,
    shape: Vec<usize>,
    scale: f64,
    dtype: DType,
}

/// A generated expression: its text (always a primary: a name, a call or parenthesised), a
/// rough magnitude of its values (to keep `exp`, `square` and `prod` finite) and its dtype.
#[derive(Debug, Clone)]
struct Ex {
    t: String,
    s: f64,
    d: DType,
}

fn ex(t: String, s: f64, d: DType) -> Ex {
    Ex { t, s, d }
}

struct Gen<'a> {
    d: Draw<'a>,
    /// Render every dtype as f64 (the rounding-sensitivity reference).
    wide: bool,
    family: Family,
    main: DType,
    /// Extents with `let` names `n0`, `n1`, … (input axes and sizes used as numbers).
    dims: Vec<usize>,
    decls: Vec<String>,
    stmts: Vec<String>,
    pool: Vec<Named>,
    temps: Vec<String>,
    n_inputs: usize,
    /// Every dtype the program names (drawn, not rendered).
    dtypes: BTreeSet<DType>,
    /// Operations generated so far (a budget).
    nodes: usize,
    outputs: BTreeSet<String>,
    /// In the wide program: the statements widening each input to f64.
    widen: Vec<String>,
}

fn prod(s: &[usize]) -> usize {
    s.iter().product()
}

const DTYPES: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

impl<'a> Gen<'a> {
    /// The program of choices `v`.
    fn program(v: &'a [u32], wide: bool, family: Family) -> Gen<'a> {
        let mut d = Draw::new(v);
        let main = d.pick(&DTYPES);
        let n_dims = 2 + d.below(3);
        let dims: Vec<usize> = (0..n_dims)
            .map(|_| match family {
                Family::Gemm => d.pick(&BIG),
                _ => d.pick(&SMALL),
            })
            .collect();
        let mut g = Gen {
            d,
            wide,
            family,
            main,
            dims,
            decls: Vec::new(),
            stmts: Vec::new(),
            pool: Vec::new(),
            temps: Vec::new(),
            n_inputs: 0,
            dtypes: BTreeSet::new(),
            nodes: 0,
            outputs: BTreeSet::new(),
            widen: Vec::new(),
        };
        g.dtypes.insert(main);
        for (i, &e) in g.dims.clone().iter().enumerate() {
            g.decls.push(format!("let n{i} = {e}"));
        }
        let n_stmts = 1 + g.d.below(5);
        for _ in 0..n_stmts {
            g.statement();
        }
        if g.n_inputs > 0 && g.d.chance(5) {
            g.output("x0");
        }
        let last = g.temps.last().cloned().unwrap_or_default();
        g.output(&last);
        g
    }

    fn script(&self) -> String {
        let mut s = self.decls.join("\n");
        s.push('\n');
        for st in self.widen.iter().chain(&self.stmts) {
            s += st;
            s.push('\n');
        }
        s
    }

    /// The least precise dtype the program names.
    fn low(&self) -> DType {
        *self
            .dtypes
            .iter()
            .max_by(|a, b| floor(**a).total_cmp(&floor(**b)))
            .unwrap_or(&DType::F64)
    }

    fn max_elems(&self) -> usize {
        match self.family {
            Family::Gemm => 1200,
            _ => 720,
        }
    }

    fn draw_dtype(&mut self) -> DType {
        if self.d.chance(15) {
            self.d.pick(&DTYPES)
        } else {
            self.main
        }
    }

    /// A size name for extent `e` if one exists.
    fn size_name(&self, e: usize) -> Option<String> {
        self.dims
            .iter()
            .position(|&x| x == e)
            .map(|i| format!("n{i}"))
    }

    /// A kwarg value: the literal, or a size of that extent.
    fn len_text(&mut self, e: usize) -> String {
        match self.size_name(e) {
            Some(n) if self.d.chance(25) => n,
            _ => e.to_string(),
        }
    }

    /// A random shape of rank 0..=4 over the case's extents, within the element cap.
    fn shape(&mut self) -> Vec<usize> {
        let max_rank = if self.family == Family::Gemm { 3 } else { 4 };
        let rank = self.d.pick(&[2, 1, 3, 0, 4]).min(max_rank);
        let mut s: Vec<usize> = (0..rank).map(|_| self.d.pick(&self.dims)).collect();
        while prod(&s) > self.max_elems() {
            s.remove(0);
        }
        s
    }

    /// A new input of this shape.
    fn input(&mut self, shape: &[usize]) -> Ex {
        let name = format!("x{}", self.n_inputs);
        self.n_inputs += 1;
        let t = self.draw_dtype();
        self.dtypes.insert(t);
        let axes: Vec<String> = shape
            .iter()
            .map(|&e| match self.size_name(e) {
                Some(n) => n,
                None => e.to_string(),
            })
            .collect();
        let seed = self.d.below(1000);
        // Sometimes a sparse format (the planner reads the dense values), with `density=`
        // where the format allows it.
        let rank = shape.len();
        let divisor = |d: &mut Draw, e: usize| {
            let ds: Vec<usize> = (1..=e).filter(|&k| e.is_multiple_of(k)).collect();
            d.pick(&ds)
        };
        let (format, density) = match self.d.below(16) {
            10 if rank >= 1 && shape[rank - 1].is_multiple_of(4) => (" @ 2:4".to_string(), false),
            11 if rank >= 1 => (" @ coo".to_string(), true),
            12 if rank == 2 => (" @ csr".to_string(), true),
            13 if rank == 2 => (" @ csc".to_string(), true),
            14 if rank == 2 => {
                let (r, c) = (
                    divisor(&mut self.d, shape[0]),
                    divisor(&mut self.d, shape[1]),
                );
                (format!(" @ bsr({r}, {c})"), true)
            }
            15 => match (0..rank).find(|&i| shape[i].is_multiple_of(4) && axes[i].starts_with('n'))
            {
                Some(i) => (format!(" @ 2:4({})", axes[i]), false),
                None => (String::new(), false),
            },
            _ => (String::new(), false),
        };
        let density = if density && self.d.chance(60) {
            format!(", density={}", self.d.pick(&["0.5", "0.25", "0.8"]))
        } else {
            String::new()
        };
        let (init, scale) = match self.d.below(10) {
            7 | 8 => (format!("rand(seed={seed}{density})"), 0.6),
            9 if prod(shape) <= 64 && density.is_empty() => {
                ("arange".to_string(), prod(shape) as f64)
            }
            _ => (format!("randn(seed={seed}{density})"), 1.0),
        };
        // The wide program reads the same values: the input keeps its dtype and is widened.
        let decl = if self.wide {
            self.widen.push(format!("{name} = cast({name}_in, f64)"));
            format!(
                "input {name}_in: {}[{}]{format} = {init}",
                t.name(),
                axes.join(", ")
            )
        } else {
            format!(
                "input {name}: {}[{}]{format} = {init}",
                t.name(),
                axes.join(", ")
            )
        };
        self.decls.push(decl);
        self.pool.push(Named {
            name: name.clone(),
            shape: shape.to_vec(),
            scale,
            dtype: t,
        });
        ex(name, scale, t)
    }

    /// Names `e` with a new statement.
    fn hoist(&mut self, e: Ex, shape: &[usize]) -> Ex {
        let name = format!("t{}", self.temps.len());
        self.stmts.push(format!("{name} = {}", e.t));
        self.temps.push(name.clone());
        self.pool.push(Named {
            name: name.clone(),
            shape: shape.to_vec(),
            scale: e.s,
            dtype: e.d,
        });
        ex(name, e.s, e.d)
    }

    /// An existing tensor of this shape, if any (and if drawn).
    fn reuse(&mut self, shape: &[usize], pct: u32) -> Option<Ex> {
        let cands: Vec<Named> = self
            .pool
            .iter()
            .filter(|n| n.shape == shape)
            .cloned()
            .collect();
        if cands.is_empty() || !self.d.chance(pct) {
            return None;
        }
        let n = &cands[self.d.below(cands.len())];
        Some(ex(n.name.clone(), n.scale, n.dtype))
    }

    fn leaf(&mut self, shape: &[usize]) -> Ex {
        match self.reuse(shape, 55) {
            Some(r) => r,
            None => self.input(shape),
        }
    }

    /// A named tensor of this shape: an existing one, or a new statement or input.
    fn named(&mut self, shape: &[usize], depth: usize) -> Ex {
        if let Some(r) = self.reuse(shape, 60) {
            return r;
        }
        if depth > 0 && self.d.chance(60) {
            let e = self.gen(shape, depth - 1);
            if !is_name(&e.t) {
                return self.hoist(e, shape);
            }
            return e;
        }
        self.input(shape)
    }

    /// One statement (and whatever statements its operands need), then maybe an output.
    fn statement(&mut self) {
        let depth = 2 + self.d.below(2);
        let kind = match self.family {
            Family::Small => [0, 1, 2, 3, 4, 5, 7, 8, 9][self.d.below(9)],
            Family::Gemm => [6, 2, 0, 3, 1, 4, 6, 6, 9][self.d.below(9)],
            Family::Fused => [3, 5, 3, 1, 5, 2, 9, 9, 7][self.d.below(9)],
            Family::Views => [0, 1, 0, 4, 7, 2, 9][self.d.below(7)],
        };
        let (e, shape) = match kind {
            1 if !self.pool.is_empty() => {
                let k = self.d.below(self.pool.len());
                let shape = self.pool[k].shape.clone();
                (self.gen(&shape, depth), shape)
            }
            2 if self.pool.iter().any(|n| !n.shape.is_empty()) => self.einsum_over_pool(),
            3 => {
                let shape = self.nonscalar_shape();
                (self.normalise(&shape, depth), shape)
            }
            4 => {
                let shape = self.shape();
                (self.einsum(&shape, depth), shape)
            }
            5 => {
                let shape = self.shape();
                (self.reuse_many(&shape, depth), shape)
            }
            6 => {
                let mut shape = self.shape();
                while shape.len() < 2 {
                    shape.push(self.d.pick(&self.dims));
                }
                (self.matmul(&shape, depth), shape)
            }
            // A bare alias of an earlier tensor (outputs that alias are copied).
            7 if !self.pool.is_empty() => {
                let n = self.pool[self.d.below(self.pool.len())].clone();
                (ex(n.name, n.scale, n.dtype), n.shape)
            }
            // A statement of weak scalars only: an f32 tensor of shape [] afterwards.
            8 => {
                let k = self.d.below(self.dims.len());
                let e = ex(
                    format!("(2.5 * n{k} - 1 / 3)"),
                    2.5 * self.dims[k] as f64,
                    DType::F32,
                );
                self.dtypes.insert(DType::F32);
                (e, Vec::new())
            }
            // The next link of a chain: the last statement used several times.
            9 if !self.temps.is_empty() => {
                let last = self.temps.last().cloned().unwrap_or_default();
                let n = self
                    .pool
                    .iter()
                    .find(|n| n.name == last)
                    .cloned()
                    .expect("a statement");
                let x = ex(n.name, n.scale, n.dtype);
                (self.reuse_of(x, &n.shape, depth), n.shape)
            }
            _ => {
                let shape = self.shape();
                (self.gen(&shape, depth), shape)
            }
        };
        let named = self.hoist(e, &shape);
        if self.d.chance(35) {
            self.output(&named.t);
        }
    }

    /// Lists `name` as an output (once).
    fn output(&mut self, name: &str) {
        if self.outputs.insert(name.to_string()) {
            self.stmts.push(format!("output {name}"));
        }
    }

    fn nonscalar_shape(&mut self) -> Vec<usize> {
        let mut s = self.shape();
        if s.is_empty() {
            s.push(self.d.pick(&self.dims));
        }
        s
    }

    /// An expression of this shape.
    fn gen(&mut self, shape: &[usize], depth: usize) -> Ex {
        if depth == 0 || self.nodes > 40 || prod(shape) > self.max_elems() {
            return self.leaf(shape);
        }
        self.nodes += 1;
        let k = match self.family {
            Family::Gemm => [0, 11, 1, 2, 8, 16, 3, 12, 13, 5, 16][self.d.below(11)],
            Family::Views => [0, 8, 8, 9, 10, 10, 17, 17, 11, 3, 5][self.d.below(11)],
            _ => self.d.below(18),
        };
        match k {
            0..=2 => self.leaf(shape),
            3 | 4 => self.unary(shape, depth),
            5 | 6 => self.binary(shape, depth),
            7 => self.weak(shape, depth),
            8 => self.rearrange(shape, depth),
            9 => self.reduce(shape, depth),
            10 => self.repeat(shape, depth),
            11 | 12 => self.einsum(shape, depth),
            13 => self.cast(shape, depth),
            14 => self.normalise(shape, depth),
            16 if self.family == Family::Gemm => self.matmul(shape, depth),
            17 => self.conflict(shape, depth),
            _ => self.reuse_many(shape, depth),
        }
    }

    fn unary(&mut self, shape: &[usize], depth: usize) -> Ex {
        let Ex { t: x, s, d } = self.gen(shape, depth - 1);
        let (t, s) = match self.d.below(14) {
            0 => (format!("tanh({x})"), 1.0),
            1 if s <= 2.0 => (format!("exp({x})"), s.exp()),
            1 => (format!("exp(tanh({x}))"), 2.8),
            2 => (format!("log(abs({x}) + 1)"), (s + 1.0).ln()),
            3 => (format!("sqrt(abs({x}))"), s.sqrt()),
            4 => (format!("sigmoid({x})"), 1.0),
            5 => (format!("relu({x})"), s),
            6 => (format!("gelu({x})"), s),
            7 => (format!("sin({x})"), 1.0),
            8 => (format!("cos({x})"), 1.0),
            9 if s <= 30.0 => (format!("square({x})"), s * s),
            10 => (format!("pow(abs({x}) + 0.5, 1.5)"), (s + 0.5).powf(1.5)),
            11 => (format!("abs({x})"), s),
            12 => (format!("(-{x})"), s),
            13 => (format!("rsqrt(abs({x}) + 1)"), 1.0),
            _ => (format!("tanh({x})"), 1.0),
        };
        ex(t, s, d)
    }

    /// A shape that broadcasts to `shape`: a suffix of it, with some axes set to 1, avoiding
    /// the axes in `full` (which must keep their extent).
    fn broadcast_shape(&mut self, shape: &[usize], full: &[usize]) -> Vec<usize> {
        let min_full = full.iter().copied().min().unwrap_or(shape.len());
        let start = if self.d.chance(30) {
            self.d.below(min_full + 1)
        } else {
            0
        };
        (start..shape.len())
            .map(|i| {
                if !full.contains(&i) && shape[i] > 1 && self.d.chance(25) {
                    1
                } else {
                    shape[i]
                }
            })
            .collect()
    }

    fn binary(&mut self, shape: &[usize], depth: usize) -> Ex {
        // The left operand may itself be broadcast along some axes, which the right one fills.
        let mut a_shape = shape.to_vec();
        let mut ones = Vec::new();
        for (i, e) in a_shape.iter_mut().enumerate() {
            if *e > 1 && self.d.chance(12) {
                *e = 1;
                ones.push(i);
            }
        }
        let b_shape = self.broadcast_shape(shape, &ones);
        let a = self.gen(&a_shape, depth - 1);
        let b = self.gen(&b_shape, depth - 1);
        let (a, b) = if self.d.chance(30) { (b, a) } else { (a, b) };
        let d = DType::promote(a.d, b.d);
        let (sa, sb) = (a.s, b.s);
        let (a, b) = (a.t, b.t);
        let (t, s) = match self.d.below(9) {
            0 => (format!("({a} + {b})"), sa + sb),
            1 => (format!("({a} - {b})"), sa + sb),
            2 => (format!("({a} * {b})"), sa * sb),
            3 => (format!("({a} / (abs({b}) + 1))"), sa),
            4 => (format!("max({a}, {b})"), sa.max(sb)),
            5 => (format!("min({a}, {b})"), sa.max(sb)),
            6 => (
                format!("pow(abs({a}) + 0.5, sigmoid({b}))"),
                (sa + 0.5).max(1.0),
            ),
            7 => (format!("({a} * sigmoid({b}))"), sa),
            _ => (format!("({a} - {b} * 0.5)"), sa + sb),
        };
        ex(t, s, d)
    }

    /// Arithmetic with weak scalars: literals and sizes.
    fn weak(&mut self, shape: &[usize], depth: usize) -> Ex {
        let Ex { t: x, s, d } = self.gen(shape, depth - 1);
        let k = self.d.below(self.dims.len());
        let n = format!("n{k}");
        let ne = self.dims[k] as f64;
        let (t, s) = match self.d.below(12) {
            0 => (format!("({x} * 0.5)"), s * 0.5),
            1 => (format!("({x} + 1.5)"), s + 1.5),
            2 => (format!("(2 - {x})"), s + 2.0),
            3 => (format!("({x} / {n})"), s / ne),
            4 => (format!("({x} * sqrt({n}))"), s * ne.sqrt()),
            5 => (format!("({x} - 0.25 * {n})"), s + 0.25 * ne),
            6 => (format!("max({x}, 0)"), s),
            7 => (format!("min({x}, 0.75)"), s),
            // Literals no narrow dtype holds exactly (rounded to the tensor's dtype first).
            8 => (format!("({x} * 0.1 + 0.3)"), 0.1 * s + 0.3),
            9 => (format!("({x} * (1 / {n}) - 1.7)"), s + 1.7),
            10 => (format!("(3.14159 * {x} / (1 + 2 * {n}))"), s),
            _ => (format!("(-{x} * 3 + 1 / {n})"), 3.0 * s + 1.0),
        };
        ex(t, s, d)
    }

    /// `cast(x, T)`; in the wide program `cast(cast(x, T), f64)`, which rounds as the cast
    /// does but computes on in f64 (so `x - cast(x, T)` has its true sensitivity).
    fn cast(&mut self, shape: &[usize], depth: usize) -> Ex {
        let x = self.gen(shape, depth - 1);
        let d = self.d.pick(&DTYPES);
        self.dtypes.insert(d);
        let t = if self.wide {
            format!("cast(cast({}, {}), f64)", x.t, d.name())
        } else {
            format!("cast({}, {})", x.t, d.name())
        };
        ex(t, x.s, d)
    }

    /// Groups `items` into adjacent slots of 1 to 3, with unit slots sprinkled in if `units`.
    fn group(&mut self, items: Vec<usize>, units: bool) -> Vec<Slot> {
        let mut slots = Vec::new();
        let mut it = items.into_iter().peekable();
        loop {
            if units && self.d.chance(8) {
                slots.push(Slot::Unit(self.d.pick(&["1", "()"])));
            }
            if it.peek().is_none() {
                break;
            }
            let size = match self.d.below(10) {
                0..=6 => 1,
                7 | 8 => 2,
                _ => 3,
            };
            let g: Vec<usize> = it.by_ref().take(size).collect();
            let paren = g.len() > 1 || self.d.chance(8);
            slots.push(Slot::Group(g, paren));
        }
        slots
    }

    /// Keyword lengths for the left groups: all named axes of a group but at most one.
    fn left_kwargs(&mut self, pat: &mut Pat) {
        let mut kw = Vec::new();
        for s in &pat.left {
            if let Slot::Group(items, _) = s {
                let named: Vec<usize> = items
                    .iter()
                    .copied()
                    .filter(|&i| pat.axes[i].named)
                    .collect();
                let unknown = if named.len() == 1 && !self.d.chance(10) {
                    0
                } else {
                    self.d.below(named.len() + 1)
                };
                for (k, &i) in named.iter().enumerate() {
                    if k != unknown {
                        kw.push(i);
                    }
                }
            }
        }
        self.d.shuffle(&mut kw);
        for i in kw {
            let v = self.len_text(pat.axes[i].ext);
            pat.kwargs.push((pat.axes[i].text.clone(), v));
        }
    }

    /// The right side of a pattern producing `shape`: one slot per axis (split into two named
    /// axes if `split` and composite; a unit if extent 1 and drawn), `...` over `ell`.
    fn right_side(
        &mut self,
        pat: &mut Pat,
        shape: &[usize],
        split: bool,
        ell: Option<(usize, usize)>,
    ) -> Vec<Slot> {
        let mut slots = Vec::new();
        for (i, &e) in shape.iter().enumerate() {
            if let Some((p, w)) = ell {
                if i == p {
                    slots.push(Slot::Ell);
                }
                if i >= p && i < p + w {
                    continue;
                }
            }
            if e == 1 && self.d.chance(35) {
                slots.push(Slot::Unit(self.d.pick(&["1", "()"])));
                continue;
            }
            if split && self.d.chance(20) {
                if let Some((a, b)) = factor(&mut self.d, e) {
                    let mut g = vec![pat.named(a)];
                    // Sometimes three factors: `(a b c)`.
                    match factor(&mut self.d, b) {
                        Some((b, c)) if self.d.chance(35) => {
                            g.extend([pat.named(b), pat.named(c)]);
                        }
                        _ => g.push(pat.named(b)),
                    }
                    slots.push(Slot::Group(g, true));
                    continue;
                }
            }
            let x = pat.named(e);
            let paren = self.d.chance(8);
            slots.push(Slot::Group(vec![x], paren));
        }
        slots
    }

    /// A `...` range `(position, width)` in `shape`, if drawn.
    fn ell_range(&mut self, shape: &[usize], pct: u32) -> Option<(usize, usize)> {
        if shape.is_empty() || !self.d.chance(pct) {
            return None;
        }
        let w = 1 + self.d.below(shape.len().min(2));
        let p = self.d.below(shape.len() - w + 1);
        Some((p, w))
    }

    fn rearrange(&mut self, shape: &[usize], depth: usize) -> Ex {
        if !shape.is_empty() && self.d.chance(10) {
            return self.rearrange_ell_group(shape, depth);
        }
        let mut pat = Pat::default();
        let ell = self.ell_range(shape, 15);
        pat.right = self.right_side(&mut pat, shape, true, ell);
        let mut items: Vec<usize> = (0..pat.axes.len()).collect();
        self.d.shuffle(&mut items);
        pat.left = self.group(items, true);
        if let Some((p, w)) = ell {
            let at = self.d.below(pat.left.len() + 1);
            pat.left.insert(at, Slot::Ell);
            pat.left_ell = shape[p..p + w].to_vec();
        }
        self.left_kwargs(&mut pat);
        let x = self.gen(&pat.in_shape(), depth - 1);
        ex(pat.call("rearrange", &x.t, None), x.s, x.d)
    }

    /// `rearrange(x, "a ... b -> b (...) a")`-like: one axis of `shape` is the `...` axes merged.
    fn rearrange_ell_group(&mut self, shape: &[usize], depth: usize) -> Ex {
        let p = self.d.below(shape.len());
        let mut pat = Pat::default();
        let mut right = Vec::new();
        for (i, &e) in shape.iter().enumerate() {
            if i == p {
                right.push(Slot::EllGroup);
            } else {
                right.push(Slot::Group(vec![pat.named(e)], false));
            }
        }
        pat.right = right;
        pat.left_ell = match factor(&mut self.d, shape[p]) {
            Some((a, b)) if self.d.chance(60) => vec![a, b],
            _ => vec![shape[p]],
        };
        let mut items: Vec<usize> = (0..pat.axes.len()).collect();
        self.d.shuffle(&mut items);
        pat.left = items
            .into_iter()
            .map(|i| Slot::Group(vec![i], false))
            .collect();
        let at = self.d.below(pat.left.len() + 1);
        pat.left.insert(at, Slot::Ell);
        let x = self.gen(&pat.in_shape(), depth - 1);
        ex(pat.call("rearrange", &x.t, None), x.s, x.d)
    }

    fn reduce(&mut self, shape: &[usize], depth: usize) -> Ex {
        let mut pat = Pat::default();
        let ell_kept = self.ell_range(shape, 10);
        pat.right = self.right_side(&mut pat, shape, true, ell_kept);
        let kept = pat.axes.len();
        // Reduced axes: named ones and numeric (pooling) ones, within the element cap.
        let mut room = self.max_elems() / prod(shape).max(1);
        let n_red = 1 + self.d.below(2);
        for _ in 0..n_red {
            let e = self.d.pick(&SMALL[..6]);
            if e <= room {
                room /= e;
                pat.named(e);
            }
        }
        if self.d.chance(30) {
            let e = self.d.pick(&[2, 3]);
            if e <= room {
                room /= e;
                pat.numeric(e);
            }
        }
        // `...` on the left only: reduced as a whole.
        let mut ell_reduced = Vec::new();
        if ell_kept.is_none() && self.d.chance(12) {
            for _ in 0..1 + self.d.below(2) {
                let e = self.d.pick(&SMALL[..5]);
                if e <= room {
                    room /= e;
                    ell_reduced.push(e);
                }
            }
        }
        let reduced_count: usize =
            pat.axes[kept..].iter().map(|a| a.ext).product::<usize>() * prod(&ell_reduced);
        let mut items: Vec<usize> = (0..pat.axes.len()).collect();
        self.d.shuffle(&mut items);
        pat.left = self.group(items, true);
        let ell_at = self.d.below(pat.left.len() + 1);
        if let Some((p, w)) = ell_kept {
            pat.left.insert(ell_at, Slot::Ell);
            pat.left_ell = shape[p..p + w].to_vec();
        } else if !ell_reduced.is_empty() {
            pat.left.insert(ell_at, Slot::Ell);
            pat.left_ell = ell_reduced;
        }
        self.left_kwargs(&mut pat);
        let x = self.gen(&pat.in_shape(), depth - 1);
        let n = reduced_count as f64;
        let mut op = self.d.pick(&["sum", "max", "mean", "min", "prod"]);
        if op == "prod" && (x.s > 1.5 || reduced_count > 6) {
            op = "sum";
        }
        let scale = match op {
            "sum" => x.s * n,
            "prod" => x.s.powf(n).max(1.0),
            _ => x.s,
        };
        ex(pat.call("reduce", &x.t, Some(op)), scale, x.d)
    }

    fn repeat(&mut self, shape: &[usize], depth: usize) -> Ex {
        let mut pat = Pat::default();
        let mut inputs = Vec::new();
        let mut right = Vec::new();
        let mut new_named = Vec::new();
        for &e in shape {
            if e == 1 && self.d.chance(30) {
                right.push(Slot::Unit(self.d.pick(&["1", "()"])));
                continue;
            }
            match self.d.below(8) {
                // A new axis: named (with a keyword) or numeric.
                5 | 6 => {
                    let x = if e > 1 && self.d.chance(40) {
                        pat.numeric(e)
                    } else {
                        let x = pat.named(e);
                        new_named.push(x);
                        x
                    };
                    right.push(Slot::Group(vec![x], false));
                }
                // An input axis repeated in place: `(h 2)` or `(2 h)`.
                7 if e % 2 == 0 || e % 3 == 0 => {
                    let r = if e % 2 == 0 { 2 } else { 3 };
                    let x = pat.named(e / r);
                    let y = pat.numeric(r);
                    inputs.push(x);
                    let g = if self.d.chance(50) {
                        vec![y, x]
                    } else {
                        vec![x, y]
                    };
                    right.push(Slot::Group(g, true));
                }
                _ => {
                    let x = pat.named(e);
                    inputs.push(x);
                    right.push(Slot::Group(vec![x], false));
                }
            }
        }
        if inputs.is_empty() {
            return self.leaf(shape);
        }
        pat.right = right;
        self.d.shuffle(&mut inputs);
        pat.left = self.group(inputs, false);
        self.left_kwargs(&mut pat);
        for x in new_named {
            let v = self.len_text(pat.axes[x].ext);
            pat.kwargs.push((pat.axes[x].text.clone(), v));
        }
        let x = self.gen(&pat.in_shape(), depth - 1);
        ex(pat.call("repeat", &x.t, None), x.s, x.d)
    }

    /// einsum's dtype for these operands, and their texts.
    fn einsum_args(&mut self, args: &[Ex]) -> (DType, Vec<String>) {
        let d = args
            .iter()
            .map(|a| a.d)
            .reduce(DType::promote)
            .unwrap_or(DType::F32);
        (d, args.iter().map(|a| a.t.clone()).collect())
    }

    /// `rearrange(x, "… a b … -> … (a b) …")` producing `shape`, with axis `i` merged from a
    /// random factorisation of its extent.
    fn merged(&mut self, shape: &[usize], i: usize, depth: usize) -> Ex {
        let Some((p, q)) = factor(&mut self.d, shape[i]) else {
            return self.gen(shape, depth - 1);
        };
        let mut inner = shape.to_vec();
        inner.splice(i..=i, [p, q]);
        let names: Vec<&str> = AXES[..inner.len()].to_vec();
        let mut right: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        right.splice(i..i + 2, [format!("({} {})", names[i], names[i + 1])]);
        let x = self.gen(&inner, depth - 1);
        let t = format!(
            "rearrange({}, \"{} -> {}\")",
            x.t,
            names.join(" "),
            right.join(" ")
        );
        ex(t, x.s, x.d)
    }

    /// Two values of `shape` whose axis `i` is merged from different factorisations, combined:
    /// a consumer loop nest cannot split one loop both ways.
    fn conflict(&mut self, shape: &[usize], depth: usize) -> Ex {
        let composite: Vec<usize> = (0..shape.len())
            .filter(|&i| (2..shape[i]).any(|k| shape[i].is_multiple_of(k)))
            .collect();
        if composite.is_empty() {
            return self.binary(shape, depth);
        }
        let i = composite[self.d.below(composite.len())];
        let a = self.merged(shape, i, depth);
        let b = if self.d.chance(50) {
            self.merged(shape, i, depth)
        } else {
            let r = self.reduce(shape, depth);
            self.hoist_maybe(r, shape)
        };
        let d = DType::promote(a.d, b.d);
        let t = match self.d.below(3) {
            0 => format!("({} + {})", a.t, b.t),
            1 => format!("({} * tanh({}))", a.t, b.t),
            _ => format!("max({}, {})", a.t, b.t),
        };
        ex(t, a.s + b.s, d)
    }

    /// `e`, or a new statement naming it.
    fn hoist_maybe(&mut self, e: Ex, shape: &[usize]) -> Ex {
        if self.d.chance(30) && !is_name(&e.t) {
            self.hoist(e, shape)
        } else {
            e
        }
    }

    /// An einsum producing `shape`.
    fn einsum(&mut self, shape: &[usize], depth: usize) -> Ex {
        let gemm = self.family == Family::Gemm;
        let max_combos = if gemm { MAX_COMBOS_GEMM } else { MAX_COMBOS };
        let ell = self.ell_range(shape, 12);
        let mut labels: Vec<usize> = Vec::new(); // extents
        let mut out: Vec<ESlot> = Vec::new();
        for (i, &e) in shape.iter().enumerate() {
            if let Some((p, w)) = ell {
                if i == p {
                    out.push(ESlot::Ell(shape[p..p + w].to_vec()));
                }
                if i >= p && i < p + w {
                    continue;
                }
            }
            if e == 1 && self.d.chance(25) {
                out.push(ESlot::Unit);
                continue;
            }
            if self.d.chance(10) {
                if let Some((a, b)) = factor(&mut self.d, e) {
                    labels.extend([a, b]);
                    out.push(ESlot::Labels(vec![labels.len() - 2, labels.len() - 1]));
                    continue;
                }
            }
            labels.push(e);
            out.push(ESlot::Labels(vec![labels.len() - 1]));
        }
        let n_out_labels = labels.len();
        // Summed labels.
        let n_sum = if gemm {
            1 + self.d.below(2)
        } else {
            self.d.below(3)
        };
        let ell_ext: Vec<usize> = ell
            .map(|(p, w)| shape[p..p + w].to_vec())
            .unwrap_or_default();
        for _ in 0..n_sum {
            let e = if gemm {
                self.d.pick(&BIG)
            } else {
                self.d.pick(&SMALL)
            };
            if prod(&labels) * e * prod(&ell_ext) <= max_combos {
                labels.push(e);
            }
        }
        if labels.is_empty() && ell.is_none() {
            // A scalar result needs some label to sum.
            labels.push(self.d.pick(&SMALL[..5]));
        }
        let n_ops = if gemm {
            2 + self.d.below(3)
        } else {
            1 + self.d.below(4)
        };
        let mut ops: Vec<Vec<ESlot>> = vec![Vec::new(); n_ops];
        for l in 0..labels.len() {
            let first = self.d.below(n_ops);
            for (k, op) in ops.iter_mut().enumerate() {
                if k == first || self.d.chance(35) {
                    op.push(ESlot::Labels(vec![l]));
                }
            }
        }
        for op in ops.iter_mut() {
            if op.is_empty() && !labels.is_empty() {
                let l = self.d.below(labels.len());
                op.push(ESlot::Labels(vec![l]));
            }
            self.d.shuffle(op);
            if !op.is_empty() && self.d.chance(8) {
                let at = self.d.below(op.len() + 1);
                op.insert(at, ESlot::Unit);
            }
            // A diagonal: a label twice in one operand.
            if !op.is_empty() && self.d.chance(12) {
                let s = op[self.d.below(op.len())].clone();
                if matches!(&s, ESlot::Labels(g) if labels[g[0]] <= 9) {
                    let at = self.d.below(op.len() + 1);
                    op.insert(at, s);
                }
            }
        }
        // Compositions of two adjacent plain slots, where the checker can still infer them.
        for k in 0..n_ops {
            if ops[k].len() < 2 || !self.d.chance(15) {
                continue;
            }
            let at = self.d.below(ops[k].len() - 1);
            let (ESlot::Labels(a), ESlot::Labels(b)) = (&ops[k][at], &ops[k][at + 1]) else {
                continue;
            };
            if a.len() != 1 || b.len() != 1 || a[0] == b[0] {
                continue;
            }
            let mut trial = ops.clone();
            trial[k].splice(at..at + 2, [ESlot::Labels(vec![a[0], b[0]])]);
            if inferable(&trial) {
                ops = trial;
            }
        }
        // `...`: operand 0 covers every broadcast axis; others a suffix, with 1s here and there.
        if let Some((_, w)) = ell {
            for (k, op) in ops.iter_mut().enumerate() {
                let ext: Vec<usize> = if k == 0 {
                    ell_ext.clone()
                } else if self.d.chance(60) {
                    let n = 1 + self.d.below(w);
                    ell_ext[w - n..]
                        .iter()
                        .map(|&e| if self.d.chance(25) { 1 } else { e })
                        .collect()
                } else {
                    continue;
                };
                let at = self.d.below(op.len() + 1);
                op.insert(at, ESlot::Ell(ext));
            }
        }
        if ops.iter().any(|o| o.is_empty()) {
            return self.leaf(shape);
        }
        let slot_text = |s: &ESlot| match s {
            ESlot::Ell(_) => "...".to_string(),
            ESlot::Unit => "()".to_string(),
            ESlot::Labels(g) if g.len() == 1 => label_text(g[0]),
            ESlot::Labels(g) => format!(
                "({})",
                g.iter()
                    .map(|&l| label_text(l))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        };
        let shapes: Vec<Vec<usize>> = ops
            .iter()
            .map(|op| {
                op.iter()
                    .flat_map(|s| match s {
                        ESlot::Ell(e) => e.clone(),
                        ESlot::Unit => vec![1],
                        ESlot::Labels(g) => vec![g.iter().map(|&l| labels[l]).product()],
                    })
                    .collect()
            })
            .collect();
        if shapes.iter().any(|s| prod(s) > MAX_OPERAND) {
            return self.leaf(shape);
        }
        let args: Vec<Ex> = shapes.iter().map(|s| self.gen(s, depth - 1)).collect();
        let summed: usize = labels[n_out_labels..].iter().product();
        let scale = args.iter().map(|a| a.s.max(0.5)).product::<f64>() * (summed as f64).sqrt();
        let (d, texts) = self.einsum_args(&args);
        let pattern = format!(
            "{} -> {}",
            ops.iter()
                .map(|o| o.iter().map(slot_text).collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
                .join(", "),
            out.iter().map(slot_text).collect::<Vec<_>>().join(" ")
        );
        ex(
            format!("einsum({}, \"{pattern}\")", texts.join(", ")),
            scale,
            d,
        )
    }

    /// A (batched, chained) matrix product producing `shape`: the einsums the planner turns
    /// into GEMM calls, with operand axes in any order (strided or relayouted operands).
    fn matmul(&mut self, shape: &[usize], depth: usize) -> Ex {
        let rank = shape.len();
        if rank < 2 {
            return self.einsum(shape, depth);
        }
        let mut pos: Vec<usize> = (0..rank).collect();
        self.d.shuffle(&mut pos);
        // Output roles: m (one or two labels), n, and batch labels for the rest.
        let two_m = rank >= 3 && self.d.chance(35);
        let m: Vec<usize> = if two_m {
            vec![pos[0], pos[2]]
        } else {
            vec![pos[0]]
        };
        let n = pos[1];
        let batch: Vec<usize> = pos[2 + usize::from(two_m)..].to_vec();
        let mut ext: Vec<usize> = shape.to_vec();
        let mut room = MAX_COMBOS_GEMM / prod(shape).max(1);
        let mut ks = Vec::new();
        for _ in 0..1 + usize::from(self.d.chance(45)) {
            let e = self.d.pick(&BIG);
            if e <= room {
                room /= e;
                ext.push(e);
                ks.push(ext.len() - 1);
            }
        }
        if ks.is_empty() {
            ext.push(2);
            ks.push(ext.len() - 1);
        }
        let mut ops: Vec<Vec<usize>> = Vec::new();
        if self.d.chance(30) && room >= 8 {
            // A chain: (batch m k) · (batch k p) · (batch p n).
            let e = self.d.pick(&BIG).min(room);
            ext.push(e);
            let p = ext.len() - 1;
            ops.push([batch.clone(), m.clone(), ks.clone()].concat());
            ops.push([batch.clone(), ks.clone(), vec![p]].concat());
            ops.push([batch.clone(), vec![p, n]].concat());
        } else {
            ops.push([batch.clone(), m.clone(), ks.clone()].concat());
            ops.push([batch.clone(), ks.clone(), vec![n]].concat());
        }
        for op in ops.iter_mut() {
            if self.d.chance(50) {
                self.d.shuffle(op);
            }
        }
        let args: Vec<Ex> = ops
            .iter()
            .map(|op| {
                let s: Vec<usize> = op.iter().map(|&l| ext[l]).collect();
                self.gen(&s, depth - 1)
            })
            .collect();
        let summed: usize = ext[rank..].iter().product();
        let scale = args.iter().map(|a| a.s.max(0.5)).product::<f64>() * (summed as f64).sqrt();
        let (d, texts) = self.einsum_args(&args);
        let text = |ls: &[usize]| {
            ls.iter()
                .map(|&l| label_text(l))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let pattern = format!(
            "{} -> {}",
            ops.iter().map(|o| text(o)).collect::<Vec<_>>().join(", "),
            text(&(0..rank).collect::<Vec<_>>())
        );
        ex(
            format!("einsum({}, \"{pattern}\")", texts.join(", ")),
            scale,
            d,
        )
    }

    /// An einsum statement over existing tensors, labelling their axes afresh.
    fn einsum_over_pool(&mut self) -> (Ex, Vec<usize>) {
        let cands: Vec<Named> = self
            .pool
            .iter()
            .filter(|n| !n.shape.is_empty())
            .cloned()
            .collect();
        let n_ops = 1 + self.d.below(3);
        let mut labels: Vec<usize> = Vec::new();
        let mut ops: Vec<(Named, Vec<usize>)> = Vec::new();
        for _ in 0..n_ops {
            let n = cands[self.d.below(cands.len())].clone();
            let mut ls = Vec::new();
            for &e in &n.shape {
                let same: Vec<usize> = (0..labels.len()).filter(|&l| labels[l] == e).collect();
                let l = match same.as_slice() {
                    [] => None,
                    _ if self.d.chance(55) => Some(same[self.d.below(same.len())]),
                    _ => None,
                };
                let l = l.unwrap_or_else(|| {
                    labels.push(e);
                    labels.len() - 1
                });
                ls.push(l);
            }
            if prod(&labels) > MAX_COMBOS || prod(&n.shape) > MAX_OPERAND {
                break;
            }
            ops.push((n, ls));
        }
        if ops.is_empty() {
            let shape = self.shape();
            return (self.gen(&shape, 1), shape);
        }
        let used: BTreeSet<usize> = ops.iter().flat_map(|o| o.1.iter().copied()).collect();
        let mut out: Vec<usize> = used.into_iter().filter(|_| self.d.chance(50)).collect();
        self.d.shuffle(&mut out);
        while prod(&out.iter().map(|&l| labels[l]).collect::<Vec<_>>()) > self.max_elems() {
            out.pop();
        }
        let shape: Vec<usize> = out.iter().map(|&l| labels[l]).collect();
        let text = |ls: &[usize]| {
            ls.iter()
                .map(|&l| label_text(l))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let scale = ops.iter().map(|o| o.0.scale.max(0.5)).product::<f64>()
            * (prod(&labels) as f64 / prod(&shape).max(1) as f64).sqrt();
        let args: Vec<Ex> = ops
            .iter()
            .map(|o| ex(o.0.name.clone(), o.0.scale, o.0.dtype))
            .collect();
        let (d, texts) = self.einsum_args(&args);
        let expr = format!(
            "einsum({}, \"{} -> {}\")",
            texts.join(", "),
            ops.iter()
                .map(|o| text(&o.1))
                .collect::<Vec<_>>()
                .join(", "),
            text(&out)
        );
        (ex(expr, scale, d), shape)
    }

    /// The keep-dims reduce pattern over a random nonempty set of `shape`'s axes.
    fn keep_pattern(&mut self, shape: &[usize]) -> String {
        let rank = shape.len();
        let mut red: Vec<bool> = (0..rank).map(|_| self.d.chance(35)).collect();
        if !red.iter().any(|&r| r) {
            red[rank - 1] = true;
        }
        let left: Vec<&str> = AXES[..rank].to_vec();
        let right: Vec<&str> = (0..rank)
            .map(|i| if red[i] { "1" } else { AXES[i] })
            .collect();
        format!("{} -> {}", left.join(" "), right.join(" "))
    }

    /// The fused patterns of models over a (usually named) tensor of `shape`: `x - max`,
    /// softmax, layer norm, `x / sum |x|`.
    fn normalise(&mut self, shape: &[usize], depth: usize) -> Ex {
        if shape.is_empty() {
            return self.unary(shape, depth.max(1));
        }
        let Ex { t: x, s, d } = if self.d.chance(75) {
            self.named(shape, depth - 1)
        } else {
            let e = self.gen(shape, depth - 1);
            ex(format!("({})", e.t), e.s, e.d)
        };
        let pat = self.keep_pattern(shape);
        let (t, s) = match self.d.below(5) {
            0 => (format!("({x} - reduce({x}, \"{pat}\", \"max\"))"), 2.0 * s),
            1 | 2 => {
                let e = format!("exp({x} - reduce({x}, \"{pat}\", \"max\"))");
                if self.d.chance(50) {
                    let e = self.hoist(ex(e, 1.0, d), shape).t;
                    (format!("({e} / reduce({e}, \"{pat}\", \"sum\"))"), 1.0)
                } else {
                    (format!("({e} / reduce({e}, \"{pat}\", \"sum\"))"), 1.0)
                }
            }
            3 => {
                let m = format!("reduce({x}, \"{pat}\", \"mean\")");
                (
                    format!(
                        "(({x} - {m}) / sqrt(reduce(square({x} - {m}), \"{pat}\", \"mean\") + 0.001))"
                    ),
                    3.0,
                )
            }
            _ => (
                format!("({x} / (reduce(abs({x}), \"{pat}\", \"sum\") + 1))"),
                1.0,
            ),
        };
        ex(t, s, d)
    }

    /// An expression using one tensor several times: `f(x) * x + g(x)`-like.
    fn reuse_many(&mut self, shape: &[usize], depth: usize) -> Ex {
        let x = self.named(shape, depth - 1);
        self.reuse_of(x, shape, depth)
    }

    /// An expression using `x` (of `shape`) several times.
    fn reuse_of(&mut self, x: Ex, shape: &[usize], depth: usize) -> Ex {
        let Ex { t: x, s, d: dx } = x;
        let Ex { t: y, s: sy, d: dy } = self.gen(shape, depth.max(1) - 1);
        let d = DType::promote(dx, dy);
        let (t, s, d) = match self.d.below(5) {
            0 => (format!("(tanh({x}) * {x} + {x})"), 2.0 * s, dx),
            1 => (format!("({x} * sigmoid({x}) - {y} * {x})"), s + sy * s, d),
            2 => (
                format!("(max({x}, {y}) + min({x}, {y}) * {x})"),
                s + s * sy,
                d,
            ),
            3 => (
                format!("(({x} - {y}) * ({x} + {y}))"),
                (s + sy) * (s + sy),
                d,
            ),
            _ => (format!("(gelu({x}) + relu(-{x}) * {y})"), s + s * sy, d),
        };
        ex(t, s, d)
    }
}

/// The text of einsum label `l`.
fn label_text(l: usize) -> String {
    match l / LABELS.len() {
        0 => LABELS[l].to_string(),
        n => format!("{}{n}", LABELS[l % LABELS.len()]),
    }
}

fn is_name(e: &str) -> bool {
    e.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    /// Random programs over extents 1 to 9 and every operation agree with the interpreter.
    #[test]
    fn prop_programs_agree(v in choices()) {
        check(&v, Family::Small)?;
    }

    /// Einsum-heavy programs with extents 8 to 24 (GEMM calls, relayouts, contraction paths,
    /// fused epilogues) agree with the interpreter.
    #[test]
    fn prop_gemm_programs_agree(v in choices()) {
        check(&v, Family::Gemm)?;
    }

    /// Programs of model-like fused patterns (`x - max`, softmax, normalisation, one tensor
    /// used many times) agree with the interpreter.
    #[test]
    fn prop_fused_programs_agree(v in choices()) {
        check(&v, Family::Fused)?;
    }

    /// Layout-heavy programs (rearrange, repeat and pooling chains, an axis merged from two
    /// different splits, einsums over strided views) agree with the interpreter.
    #[test]
    fn prop_view_programs_agree(v in choices()) {
        check(&v, Family::Views)?;
    }

    /// Contractions whose largest operand is contiguous along a long result axis (`x @ W`
    /// and its relatives: the result accumulates in place, in partial sums when it has one
    /// axis), with random extents, operand orders and dtypes, agree with the interpreter.
    #[test]
    fn prop_contractions_in_the_result_agree(
        i in 1u64..40, j in 1u64..4, c in 1u64..4, o in 60u64..140,
        form in 0usize..6, types in 0usize..4,
    ) {
        let (t, w) = [("f32", "f32"), ("f32", "f16"), ("f64", "f64"), ("f32", "bf16")][types];
        let (decl, pattern) = match form {
            0 => (format!("x: {{t}}[i={i}] = randn(seed=1)\ninput w: {{w}}[i, o={o}]"), "i, i o -> o"),
            1 => (format!("x: {{t}}[i={i}, j={j}] = randn(seed=1)\ninput w: {{w}}[i, j, o={o}]"), "i j, i j o -> o"),
            2 => (format!("x: {{t}}[c={c}, i={i}] = randn(seed=1)\ninput w: {{w}}[i, o={o}]"), "c i, i o -> c o"),
            3 => (format!("x: {{t}}[i={i}] = randn(seed=1)\ninput w: {{w}}[j={j}, i, o={o}]"), "i, j i o -> j o"),
            4 => (format!("x: {{t}}[i={i}] = randn(seed=1)\ninput w: {{w}}[o={o}, i]"), "i, o i -> o"),
            _ => (format!("x: {{t}}[i={i}] = randn(seed=1)\ninput w: {{w}}[i, o={o}]"), "i, i o -> o"),
        };
        let script = |t: &str, w: &str| {
            let head = decl.replace("{t}", t).replace("{w}", w);
            // The last form takes the operands the other way round.
            let args = if form == 5 { "w, x" } else { "x, w" };
            let pattern = if form == 5 { "i o, i -> o" } else { pattern };
            format!(
                "input {head} = randn(seed=2)\ny = einsum({args}, \"{pattern}\")\noutput y\n"
            )
        };
        let text = script(t, w);
        let low = match (t, w) {
            (_, "f16") => DType::F16,
            (_, "bf16") => DType::BF16,
            ("f64", _) => DType::F64,
            _ => DType::F32,
        };
        match differ(&text, &script("f64", "f64"), low) {
            Ok(_) => {}
            Err(e) => return Err(TestCaseError::fail(format!("{text}\n{e}"))),
        }
    }
}

/// `n` generated scripts of each family (a fixed seed): a corpus of the kernel shapes the
/// planner makes, for checks that need programs but not the interpreter (NVRTC compiles).
pub(crate) fn generated_scripts(n: usize) -> Vec<String> {
    let mut state = 0xC0DA;
    let mut out = Vec::new();
    for family in [Family::Small, Family::Gemm, Family::Fused, Family::Views] {
        for _ in 0..n {
            let len = (splitmix(&mut state) % 400) as usize;
            let v: Vec<u32> = (0..len).map(|_| splitmix(&mut state) as u32).collect();
            out.push(Gen::program(&v, false, family).script());
        }
    }
    out
}

/// What the planner did with a program, counted for [`generated_programs_reach_the_planner_paths`].
#[derive(Debug, Default)]
struct Reach {
    programs: usize,
    gemm_calls: usize,
    relayouts: usize,
    contraction_loops: usize,
    multi_step_einsums: usize,
    fused_reductions: usize,
    temps: usize,
}

fn count_stmts(stmts: &[tdsl_loop::Stmt], origin: &str, r: &mut Reach) {
    for s in stmts {
        match s {
            tdsl_loop::Stmt::Loop(l) => count_stmts(&l.body, origin, r),
            tdsl_loop::Stmt::Call(_) => r.gemm_calls += 1,
            tdsl_loop::Stmt::Let { .. } if origin.contains("einsum") => r.contraction_loops += 1,
            tdsl_loop::Stmt::Let { .. } => r.fused_reductions += 1,
            _ => {}
        }
    }
}

/// Every generated program is valid tdsl, and the three families between them reach the
/// planner's paths: GEMM calls, relayout copies, contraction loops, multi-step contraction
/// paths, fused reductions and temporaries.
#[test]
fn generated_programs_reach_the_planner_paths() {
    let mut state = 0x5EED;
    let mut r = Reach::default();
    for family in [Family::Small, Family::Gemm, Family::Fused, Family::Views] {
        for _ in 0..150 {
            let len = (splitmix(&mut state) % 400) as usize;
            let v: Vec<u32> = (0..len).map(|_| splitmix(&mut state) as u32).collect();
            let script = Gen::program(&v, false, family).script();
            let (p, _) = load(&script).unwrap_or_else(|e| panic!("{e}\n{script}"));
            load(&Gen::program(&v, true, family).script()).expect("the wide program loads");
            // A planner panic is a finding of the properties above, not of this census.
            let Ok(Ok(plan)) = std::panic::catch_unwind(|| tdsl::plan::lower::plan_program(&p))
            else {
                continue;
            };
            r.programs += 1;
            for k in &plan.loops.kernels {
                count_stmts(&k.body, &k.origin, &mut r);
                r.relayouts += usize::from(k.origin.contains("relayout"));
                r.multi_step_einsums += usize::from(k.origin.contains("step 2/"));
            }
            r.temps += plan
                .loops
                .buffers
                .iter()
                .filter(|b| b.role == tdsl_loop::Role::Temp)
                .count();
        }
    }
    eprintln!("{r:?}");
    assert!(r.programs >= 300, "{r:?}");
    assert!(r.gemm_calls >= 10, "{r:?}");
    assert!(r.relayouts >= 1, "{r:?}");
    assert!(r.contraction_loops >= 100, "{r:?}");
    assert!(r.multi_step_einsums >= 20, "{r:?}");
    assert!(r.fused_reductions >= 100, "{r:?}");
    assert!(r.temps >= 50, "{r:?}");
}

// ---------------------------------------------------------------------------------------------
// Tools (run only when their variable is set): a long random soak, one script through every
// backend
// ---------------------------------------------------------------------------------------------

/// SplitMix64, for the soak's choice lists.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `DIFF_SOAK=N cargo test --test it diff_soak -- --nocapture`: N unshrunk cases per family
/// (`DIFF_FAMILY=gemm` for one family, `DIFF_SEED` for another stream), failures grouped by
/// their first line, the shortest script of each. Without `DIFF_SOAK` it returns at once: the
/// property tests above are the everyday run.
#[test]
fn diff_soak() {
    let Some(n) = std::env::var("DIFF_SOAK")
        .ok()
        .and_then(|c| c.parse::<usize>().ok())
    else {
        return;
    };
    let seed: u64 = std::env::var("DIFF_SEED")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1);
    // Panics are caught and reported per case; keep the default hook's backtraces quiet.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut state = seed;
    let mut groups: std::collections::BTreeMap<String, (usize, String)> = Default::default();
    let mut skipped = 0;
    let only = std::env::var("DIFF_FAMILY").unwrap_or_default();
    for family in [Family::Small, Family::Gemm, Family::Fused, Family::Views] {
        if !only.is_empty() && !format!("{family:?}").eq_ignore_ascii_case(&only) {
            continue;
        }
        for _ in 0..n {
            let len = (splitmix(&mut state) % 400) as usize;
            let v: Vec<u32> = (0..len).map(|_| splitmix(&mut state) as u32).collect();
            let g = Gen::program(&v, false, family);
            let script = g.script();
            let wide = Gen::program(&v, true, family).script();
            if std::env::var("DIFF_SHOW").is_ok() {
                eprintln!("--- {family:?}\n{script}");
            }
            match differ(&script, &wide, g.low()) {
                Ok(true) => {}
                Ok(false) => skipped += 1,
                Err(e) => {
                    let key: String = e
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .chars()
                        .take(90)
                        .collect();
                    let full = format!("{e}\n--- script ---\n{script}");
                    let entry = groups.entry(key).or_insert((0, full.clone()));
                    entry.0 += 1;
                    if full.len() < entry.1.len() {
                        entry.1 = full;
                    }
                }
            }
        }
    }
    std::panic::set_hook(hook);
    eprintln!("skipped (non-finite): {skipped}");
    for (key, (count, example)) in &groups {
        eprintln!("=== {count}x {key}\n{example}\n");
    }
    assert!(groups.is_empty(), "{} kinds of mismatch", groups.len());
}

/// `DIFF_SCRIPT=path cargo test --test it diff_script -- --nocapture`: every output of one
/// script from the interpreter and every backend, with the largest difference. Without
/// `DIFF_SCRIPT` it returns at once.
#[test]
fn diff_script() {
    let Ok(path) = std::env::var("DIFF_SCRIPT") else {
        return;
    };
    std::panic::set_hook(Box::new(|info| eprintln!("panic: {info}")));
    let text = std::fs::read_to_string(path).expect("read DIFF_SCRIPT");
    let (p, inputs) = load(&text).expect("the script compiles and binds");
    let shapes = output_shapes(&p);
    let want = tdsl::interp::run(&p, &inputs);
    for (k, o) in p.outputs.iter().enumerate() {
        eprintln!(
            "{} interp {:?}: {:?}",
            o.name,
            want[k].shape(),
            want[k].to_f64()
        );
    }
    for (backend, run) in backends() {
        match std::panic::catch_unwind(|| run(&p, &inputs, &shapes)) {
            Ok(Ok(got)) => {
                for (k, o) in p.outputs.iter().enumerate() {
                    let (g, w) = (got[k].to_f64(), want[k].to_f64());
                    let worst = g
                        .iter()
                        .zip(&w)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0.0f64, f64::max);
                    eprintln!("{} {backend} (max diff {worst:e}): {g:?}", o.name);
                }
            }
            Ok(Err(e)) => eprintln!("{backend}: error {e}"),
            Err(_) => eprintln!("{backend}: panicked"),
        }
    }
}

/// Contractions whose largest operand is contiguous along a result label (`x @ W` for one
/// vector) accumulate in the result, in partial sums split across threads when the result has
/// one label: every form agrees with the interpreter, and the plan walks the operand in memory
/// order (no loop strides across its rows).
#[test]
fn contractions_accumulated_in_the_result_agree() {
    let cases = [
        // (inputs, einsum pattern, expected plan text)
        (
            "x: {t}[i=96] = randn(seed=1)\ninput w: {w}[i, o=80]",
            "i, i o -> o",
            "6 partial sums",
        ),
        (
            "x: {t}[i=17] = randn(seed=1)\ninput w: {w}[i, o=64]",
            "i, i o -> o",
            "(init)",
        ),
        (
            "x: {t}[i=32, j=4] = randn(seed=1)\ninput w: {w}[i, j, o=96]",
            "i j, i j o -> o",
            "partial sums",
        ),
        (
            "x: {t}[c=2, i=3] = randn(seed=1)\ninput w: {w}[i, o=64]",
            "c i, i o -> c o",
            "(init)",
        ),
    ];
    for (inputs, pattern, form) in cases {
        for (t, w) in [("f32", "f32"), ("f32", "f16"), ("f64", "f64")] {
            let script = |t: &str, w: &str| {
                let head = inputs.replace("{t}", t).replace("{w}", w);
                format!("input {head} = randn(seed=2)\ny = einsum(x, w, \"{pattern}\")\noutput y\n")
            };
            let text = script(t, w);
            let low = match (t, w) {
                (_, "f16") => DType::F16,
                ("f64", _) => DType::F64,
                _ => DType::F32,
            };
            match differ(&text, &script("f64", "f64"), low) {
                Ok(ran) => assert!(ran, "{text}: not finite"),
                Err(e) => panic!("{text}\n{e}"),
            }
            let p = tdsl::compile(&text, &Default::default()).expect("compiles");
            let plan = tdsl::plan::lower::plan_program(&p).expect("plans");
            let plan = tdsl_loop::print::print_program(&plan.loops);
            assert!(plan.contains(form), "{text}\n{plan}");
        }
    }
}
