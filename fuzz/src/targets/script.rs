//! `script`: text through the front half of `tdsl check`, and `tdsl cost` / `tdsl plan` for
//! programs small enough to bind and plan quickly; a planned program is mapped and rendered as
//! CUDA for sm_80 and sm_90 (`tdsl plan --device cuda`, `tdsl emit --target cuda`), and on the
//! slow route (every 50th input) JIT-compiled and run on its bound data (`tdsl run`).

use std::collections::BTreeMap;

use tdsl::bind::{bind_available, Value};
use tdsl::plan::cost::stored_value;
use tdsl::session::MemoryUse;
use tdsl::Tensor;

use super::Ctx;

/// `n` in powers of two (0 for 0, 1 for 1, 2 for 2–3, …): a new order of magnitude is a new
/// outcome, a new count is not.
fn bucket(n: usize) -> u8 {
    n.checked_ilog2().map_or(0, |l| l as u8 + 1)
}

/// Largest value (in elements) of a program the target binds and plans.
const SMALL: u64 = 1 << 12;

/// Script tokens.
pub const DICT: &[&[u8]] = &[
    b"input",
    b"output",
    b"let",
    b"einsum",
    b"rearrange",
    b"reduce",
    b"repeat",
    b"sparsify",
    b"where",
    b"index",
    b"clamp",
    b"clip",
    b"cast",
    b"pack",
    b"unpack",
    b"dense",
    b"auto",
    b"density",
    b"approximate",
    b"f32",
    b"f64",
    b"f16",
    b"bf16",
    b"i8",
    b"i32",
    b"bool",
    b"@ csr",
    b"@ csc",
    b"@ coo",
    b"@ bsr(2, 2)",
    b"@ 2:4",
    b"@ 2:4(k)",
    b"csr",
    b"bsr(2, 2)",
    b"2:4",
    b"= randn(seed=0)",
    b"= randn(seed=1, density=0.5)",
    b"= rand",
    b"= zeros",
    b"= ones",
    b"= arange",
    b"seed=",
    b"exp",
    b"log",
    b"sqrt",
    b"rsqrt",
    b"tanh",
    b"relu",
    b"gelu",
    b"sigmoid",
    b"softplus",
    b"abs",
    b"pow",
    b"max",
    b"min",
    b"sum",
    b"mean",
    b"prod",
    b"\"sum\"",
    b"\"max\"",
    b"\"mean\"",
    b"->",
    b"...",
    b"(",
    b")",
    b"[",
    b"]",
    b"\"",
    b"'",
    b"=",
    b":",
    b",",
    b";",
    b"#",
    b"\\\n",
    b"\n",
    b"+",
    b"-",
    b"*",
    b"/",
    b"<",
    b"<=",
    b"==",
    b"!=",
    b">",
    b"0",
    b"1",
    b"2",
    b"-1",
    b"1e308",
    b"18446744073709551616",
    b"x",
    b"y",
    b"w",
    b"n",
    b"k",
    b"b h i d",
    b"\"i j -> j i\"",
    b"\"i k, k j -> i j\"",
    b"\"b (h d) -> b h d\"",
    b"\"... i -> ...\"",
    b"\"ij,jk->ik\"",
    b"h=2",
    b"output y",
    b"input x: f32[n=4]",
    b"input w: f32[n, m=8] @ csr = randn(seed=0, density=0.5)",
    b"y = einsum(x, w, \"n, n m -> m\")",
    // Repeated by the mutator into deep nesting and long operator chains, at and past the
    // depth guard's limits (`tdsl_syntax::depth::MAX_NESTING` = 200, `MAX_OPERATORS` = 1000).
    b"(((((",
    b")))))",
    b"-(",
    b"exp(",
    b"x+",
    b"x*",
    b"- ",
];

/// Runs `input` as `tdsl check FILE` would (the file read as UTF-8, lossily), then cost and
/// plan when the program is small.
pub fn run(input: &[u8], ctx: &mut Ctx) {
    let text = String::from_utf8_lossy(input);
    script_text(&text, ctx);
}

pub(super) fn script_text(text: &str, ctx: &mut Ctx) {
    const NAME: &str = "fuzz.tdsl";
    let pipe = tdsl::session::Pipeline::new(*ctx.cli.options());
    let script = match pipe.parse(text) {
        Ok(s) => s,
        Err(d) => {
            ctx.stage("parse-error");
            if d.iter().any(|d| d.code == tdsl::Code::TooDeep) {
                ctx.stage("too-deep");
            }
            ctx.diags(&d, NAME, text);
            return;
        }
    };
    ctx.stage("parsed");
    // The shape-free pattern checks (what `Program::compile` reports when extents come from data).
    for e in tdsl_syntax::pattern::check_script_patterns(&script) {
        ctx.mark(e.error.code.as_str().as_bytes());
    }
    let program = match pipe.check(&script, &BTreeMap::new()) {
        Ok(p) => p,
        Err(d) => {
            ctx.stage("check-error");
            ctx.diags(&d, NAME, text);
            return;
        }
    };
    ctx.stage("checked");
    if let Err(d) = pipe.check_memory(&program, MemoryUse::SparseInputs) {
        ctx.stage("too-large");
        ctx.diag(&d, NAME, text);
        return;
    }
    let small = program.inputs.len() <= 64
        && program.nodes.len() <= 4096
        && program
            .nodes
            .iter()
            .all(|n| n.ty.shape.n_elems().is_some_and(|e| e <= SMALL))
        && program
            .inputs
            .iter()
            .all(|i| i.ty.shape.n_elems().is_some_and(|e| e <= SMALL));
    let mut program = program;
    // Initialisers generate data only for small programs (a big one would spend the time
    // filling memory, not testing tdsl).
    let data: Vec<Option<Value>> = if small {
        match bind_available(&program, BTreeMap::new(), false) {
            Ok(d) => {
                ctx.stage("bound");
                d
            }
            Err(d) => {
                ctx.stage("bind-error");
                ctx.diags(&d, NAME, text);
                return;
            }
        }
    } else {
        vec![None; program.inputs.len()]
    };
    let stored: Vec<_> = program
        .inputs
        .iter()
        .zip(&data)
        .map(|(i, d)| stored_value(&i.ty, d.as_ref()))
        .collect();
    let dense: Vec<Option<&Tensor>> = data
        .iter()
        .map(|v| v.as_ref().and_then(Value::as_dense))
        .collect();
    pipe.resolve_auto(&mut program, &stored, &dense);
    let cost = pipe.cost(&program, &stored, &dense);
    ctx.stage("costed");
    ctx.mark(&[1, bucket(cost.statements.len())]);
    if !small {
        return;
    }
    let plan = match pipe.plan(&program) {
        Ok(plan) => plan,
        Err(d) => {
            ctx.stage("plan-error");
            ctx.diag(&d, NAME, text);
            return;
        }
    };
    ctx.stage("planned");
    let printed = tdsl_loop::print::print_program(&plan.loops);
    ctx.mark(&[2, bucket(plan.loops.kernels.len())]);
    if ctx.verbose {
        print!("{printed}");
    }
    cuda(&plan.loops, ctx);
    if ctx.heavy && data.iter().all(Option::is_some) {
        compile_and_run(&pipe, program, data, ctx, text);
    }
}

/// What `tdsl plan --device cuda` and `tdsl emit --target cuda` do with a plan: the GPU's
/// launches (printed as loop IR), and the CUDA unit for an Ampere and a Hopper device (their
/// tensor-core templates differ).
fn cuda(loops: &tdsl_loop::LoopProgram, ctx: &mut Ctx) {
    let (mapped, steps) = tdsl_cuda::map_program(loops);
    std::hint::black_box(tdsl_loop::print::print_program(&mapped));
    ctx.stage("cuda-mapped");
    ctx.mark(&[3, bucket(steps.len())]);
    for sm in [80, 90] {
        let unit = tdsl_cuda::cuda_unit_for(loops, sm);
        if unit.contains("tdsl_tc_") {
            ctx.stage("cuda-tensor-cores");
        }
        std::hint::black_box(unit);
    }
    ctx.stage("cuda-rendered");
}

/// What `tdsl run` does with a small program whose inputs all have data: compile for the JIT
/// and run. A failure must be a diagnostic of the run, not a panic; an internal error is a bug.
fn compile_and_run(
    pipe: &tdsl::session::Pipeline,
    program: tdsl::check::Program,
    data: Vec<Option<Value>>,
    ctx: &mut Ctx,
    text: &str,
) {
    const NAME: &str = "fuzz.tdsl";
    let compiled = match pipe.compile(program) {
        Ok(c) => c,
        Err(d) => {
            ctx.stage("compile-error");
            ctx.diag(&d, NAME, text);
            return;
        }
    };
    ctx.stage("compiled");
    let dense: Option<Vec<Tensor>> = data
        .iter()
        .map(|v| v.clone().and_then(|v| v.into_dense().ok()))
        .collect();
    let inputs = data.into_iter().flatten().collect();
    match compiled.run(inputs, &tdsl_loop::RunOptions::default()) {
        Ok((outputs, _)) => {
            ctx.stage("ran");
            if let Some(dense) = dense {
                let want = tdsl::interp::run(compiled.program(), &dense);
                if let Some(what) = disagree(compiled.program(), &outputs, &want) {
                    ctx.internal(format!("the JIT and the interpreter disagree: {what}"));
                }
            }
        }
        Err(d) => {
            ctx.stage("run-error");
            ctx.diag(&d, NAME, text);
        }
    }
}

/// Where the JIT's outputs `got` differ from the interpreter's `want` by more than rounding
/// explains: an element off by more than a tolerance (by the program's least precise dtype) of
/// its output's largest magnitude, or NaN on one side only. Outputs that are not finite in
/// the reference are skipped (overflow depends on the order of operations).
fn disagree(p: &tdsl::check::Program, got: &[Tensor], want: &[Tensor]) -> Option<String> {
    use tdsl::DType;
    let low = |d: DType| match d {
        DType::F64 => 0,
        DType::F32 => 1,
        DType::F16 => 2,
        DType::BF16 => 3,
    };
    let least = p
        .nodes
        .iter()
        .map(|n| n.ty.dtype)
        .chain(p.inputs.iter().map(|i| i.ty.dtype))
        .max_by_key(|d| low(*d))?;
    let tol = match least {
        DType::F64 | DType::F32 => 1e-3,
        DType::F16 => 2e-2,
        DType::BF16 => 1e-1,
    };
    if got.len() != want.len() {
        return Some(format!("{} outputs against {}", got.len(), want.len()));
    }
    for (o, (g, w)) in got.iter().zip(want).enumerate() {
        if g.shape() != w.shape() {
            return Some(format!(
                "output {o} is {:?} against {:?}",
                g.shape(),
                w.shape()
            ));
        }
        let (g, w) = (g.to_f64(), w.to_f64());
        if w.iter().any(|x| !x.is_finite()) {
            continue;
        }
        let scale = w.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            if !a.is_finite() || (a - b).abs() > tol * scale {
                return Some(format!(
                    "output {o} element {i} is {a} in the JIT, {b} in the interpreter (scale {scale:e}, tolerance {tol:e})"
                ));
            }
        }
    }
    None
}
