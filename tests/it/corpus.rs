//! The corpus: small scripts in `tests/corpus/` with their expected results, written as
//! directive comments at the top of each file:
//!
//! - `# expect: NAME = JSON` — the output's values (nested lists give the shape; a bare
//!   number is a scalar, shape `()`); compared within the output dtype's tolerance.
//! - `# shape: NAME = [2, 3]` — the output's extents only.
//! - `# dtype: NAME = f16` — the output's dtype.
//! - `# error: CODE` — checking (or binding) fails with this code.
//!
//! Every `run` expectation is checked by the reference interpreter; later backends add
//! themselves to `backends()`.

use crate::common::repo;
use tdsl::check::TensorRef;
use tdsl::{DType, Tensor};

#[derive(Debug, Default)]
struct Case {
    expect: Vec<(String, serde_json::Value)>,
    shapes: Vec<(String, Vec<usize>)>,
    dtypes: Vec<(String, String)>,
    error: Option<String>,
}

fn parse_case(text: &str) -> Case {
    let mut c = Case::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# ") else {
            continue;
        };
        let Some((key, val)) = rest.split_once(':') else {
            continue;
        };
        let val = val.trim();
        match key {
            "expect" | "shape" | "dtype" => {
                let (name, v) = val.split_once('=').expect("NAME = VALUE");
                let (name, v) = (name.trim().to_string(), v.trim());
                match key {
                    "expect" => c
                        .expect
                        .push((name, serde_json::from_str(v).expect("JSON value"))),
                    "shape" => c
                        .shapes
                        .push((name, serde_json::from_str(v).expect("JSON list"))),
                    _ => c.dtypes.push((name, v.to_string())),
                }
            }
            "error" => c.error = Some(val.to_string()),
            _ => {}
        }
    }
    c
}

/// Flattens a nested JSON list into (shape, values).
fn flatten(v: &serde_json::Value) -> (Vec<usize>, Vec<f64>) {
    match v {
        serde_json::Value::Array(items) => {
            let mut vals = Vec::new();
            let mut inner = Vec::new();
            for it in items {
                let (s, v) = flatten(it);
                inner = s;
                vals.extend(v);
            }
            let mut shape = vec![items.len()];
            shape.extend(inner);
            (shape, vals)
        }
        serde_json::Value::String(s) if s == "nan" => (vec![], vec![f64::NAN]),
        serde_json::Value::String(s) if s == "inf" => (vec![], vec![f64::INFINITY]),
        serde_json::Value::String(s) if s == "-inf" => (vec![], vec![f64::NEG_INFINITY]),
        other => (vec![], vec![other.as_f64().expect("a number")]),
    }
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 1e-5,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
    }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol * (1.0 + b.abs())
}

/// Each backend evaluates a checked program on bound inputs.
type Backend = fn(&tdsl::check::Program, &[Tensor]) -> Vec<Tensor>;

fn backends() -> Vec<(&'static str, Backend)> {
    vec![("interp", tdsl::interp::run), ("loop-eval", loop_eval)]
}

/// The planner's loop IR run by its evaluator: a mismatch with the interpreter is a planner bug.
fn loop_eval(program: &tdsl::check::Program, inputs: &[Tensor]) -> Vec<Tensor> {
    let plan = tdsl::plan::lower::plan_program(program).expect("the program plans");
    let shapes: Vec<Vec<usize>> = program
        .outputs
        .iter()
        .map(|o| {
            program
                .tensor_type(o.tensor)
                .shape
                .extents()
                .iter()
                .map(|&e| e as usize)
                .collect()
        })
        .collect();
    tdsl::runtime::run_eval(&plan, inputs, &shapes).expect("the loop-IR evaluator runs the plan")
}

fn run_case(path: &std::path::Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let case = parse_case(&text);
    let compiled = tdsl::compile(&text, &Default::default())
        .and_then(|p| tdsl::bind::bind_inputs(&p, Default::default()).map(|i| (p, i)));
    let (program, inputs) = match (compiled, &case.error) {
        (Err(d), Some(code)) => {
            let codes: Vec<&str> = d.iter().map(|d| d.code.as_str()).collect();
            return if codes.contains(&code.as_str()) {
                Ok(())
            } else {
                Err(format!("expected error {code}, got {codes:?}: {d}"))
            };
        }
        (Err(d), None) => return Err(format!("unexpected error: {d}")),
        (Ok(_), Some(code)) => {
            return Err(format!("expected error {code}, but it compiled and bound"))
        }
        (Ok(pi), None) => pi,
    };
    if case.expect.is_empty() && case.shapes.is_empty() && case.dtypes.is_empty() {
        return Err("no expectations".into());
    }
    for (backend, eval) in backends() {
        let outs = eval(&program, &inputs);
        let find = |name: &str| -> Result<(&Tensor, DType), String> {
            let i = program
                .outputs
                .iter()
                .position(|o| o.name == name)
                .ok_or_else(|| format!("`{name}` is not an output"))?;
            let dtype = match program.outputs[i].tensor {
                TensorRef::Input(k) => program.inputs[k].ty.dtype,
                TensorRef::Assign(a) => program.node(program.assigns[a].node).ty.dtype,
            };
            Ok((&outs[i], dtype))
        };
        for (name, want) in &case.expect {
            let (t, dtype) = find(name)?;
            let (shape, vals) = flatten(want);
            if t.shape() != shape {
                return Err(format!(
                    "[{backend}] {name}: shape {:?}, expected {shape:?}",
                    t.shape()
                ));
            }
            let got = t.to_f64();
            for (k, (g, w)) in got.iter().zip(&vals).enumerate() {
                if !close(*g, *w, tolerance(dtype)) {
                    return Err(format!(
                        "[{backend}] {name}[{k}] = {g}, expected {w}; all: {got:?}"
                    ));
                }
            }
        }
        for (name, want) in &case.shapes {
            let (t, _) = find(name)?;
            if t.shape() != want {
                return Err(format!(
                    "[{backend}] {name}: shape {:?}, expected {want:?}",
                    t.shape()
                ));
            }
        }
        for (name, want) in &case.dtypes {
            let (t, _) = find(name)?;
            if t.dtype().name() != want {
                return Err(format!(
                    "[{backend}] {name}: dtype {}, expected {want}",
                    t.dtype()
                ));
            }
        }
    }
    Ok(())
}

/// The `.tdsl` files of `tests/corpus/`, sorted.
fn corpus_paths() -> Vec<std::path::PathBuf> {
    crate::common::files_in("tests/corpus", "tdsl")
}

#[test]
fn corpus() {
    let paths = corpus_paths();
    assert!(paths.len() >= 20, "the corpus should not shrink");
    let failures: Vec<String> = paths
        .iter()
        .filter_map(|p| run_case(p).err().map(|e| format!("{}: {e}", p.display())))
        .collect();
    assert!(
        failures.is_empty(),
        "{} corpus failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_example_checks_and_runs() {
    let dir = repo().join("examples");
    for e in std::fs::read_dir(&dir).expect("examples/ exists") {
        let p = e.expect("dir entry").path();
        if p.extension().is_none_or(|x| x != "tdsl") {
            continue;
        }
        let text = std::fs::read_to_string(&p).expect("read example");
        let program = tdsl::compile(&text, &Default::default())
            .unwrap_or_else(|d| panic!("{}: {d}", p.display()));
        assert!(!program.outputs.is_empty(), "{} has outputs", p.display());
    }
}

/// Every output of `got` agrees with the interpreter's `want` for corpus script `name` (`text`):
/// within 1e-4 of the output's largest magnitude, or 2e-2 when the script has a 16-bit type
/// (an intermediate rounded where two accumulation orders differ moves by a 16-bit ulp).
pub(crate) fn assert_agrees(name: &str, text: &str, engine: &str, got: &[Tensor], want: &[Tensor]) {
    let tol = if text.contains("f16") { 2e-2 } else { 1e-4 };
    if let Err(e) = crate::diff::agree(got, want, tol, &format!("on {engine}")) {
        panic!("{name}: {e}");
    }
}

/// Every corpus script the planner takes, run by the CPU JIT, agrees with the interpreter on
/// every output (the `# expect:` lines check only what they name).
#[test]
fn jit_runs_every_corpus_script_like_the_interpreter() {
    let mut ran = 0;
    let paths = corpus_paths();
    for path in paths {
        let text = std::fs::read_to_string(&path).expect("readable");
        let Ok(p) = tdsl::compile(&text, &Default::default()) else {
            continue;
        };
        let Ok(inputs) = tdsl::bind::bind_inputs(&p, Default::default()) else {
            continue;
        };
        let plan = tdsl::plan::lower::plan_program(&p).expect("the program plans");
        let shapes = crate::diff::output_shapes(&p);
        let want = tdsl::interp::run(&p, &inputs);
        let got = tdsl::runtime::run_jit(&plan, &inputs, &shapes)
            .unwrap_or_else(|d| panic!("{}: {d}", path.display()));
        assert_agrees(&path.display().to_string(), &text, "the JIT", &got, &want);
        ran += 1;
    }
    assert!(ran >= 20, "only {ran} corpus scripts ran");
}
