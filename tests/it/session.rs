//! The one pipeline (`tdsl::session`): the CLI, the REPL and the Rust API check, choose `auto`
//! formats, plan and run a script the same way, and every engine goes through the backend seam.

use crate::common::{tdsl_in, tdsl_script};
use tdsl::session::{Engine, MachineModel, Options, Pipeline};
use tdsl::{Code, Program};

/// A script whose `auto` requests resolve to different formats (and one to dense).
const AUTO: &str = "input w: f32[o=512, i=512] = randn(seed=1)\n\
                    input x: f32[i, b=64] = randn(seed=2)\n\
                    ws = sparsify(w, auto, density=0.05)\n\
                    y = einsum(ws, x, \"o i, i b -> o b\")\n\
                    wl = sparsify(w, auto(csr, \"2:4\"))\n\
                    u = einsum(wl, x, \"o i, i b -> o b\")\n\
                    output y, u, ws, wl\n";

fn nominal(engine: Engine) -> Options {
    Options {
        engine,
        machine: MachineModel::Nominal,
        ..Options::default()
    }
}

#[test]
fn one_script_picks_the_same_auto_formats_through_cli_repl_and_api() {
    let dir = tempfile::tempdir().unwrap();
    // The CLI (`TDSL_MACHINE=nominal`, as every CLI test runs).
    let cost = tdsl_script(dir.path(), "cost", AUTO, &["--json"]);
    assert_eq!(cost.code, 0, "{}", cost.stderr);
    let v: serde_json::Value = serde_json::from_str(&cost.stdout).unwrap();
    let cli: Vec<String> = v["auto"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["format"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(cli.len(), 2);
    let plan = tdsl_script(dir.path(), "plan", AUTO, &[]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);

    // The REPL: the same statements, then `:plan` prints the same loop IR.
    let (code, out) = crate::repl::repl_in(dir.path(), &format!("{AUTO}:plan\n"));
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&plan.stdout),
        "REPL plan differs:\n{out}\nCLI:\n{}",
        plan.stdout
    );

    // The API, on the same (nominal) machine: the outputs carry the chosen formats.
    let p = Program::compile_with(AUTO, nominal(Engine::Jit)).unwrap();
    let out = p.runner().run().unwrap();
    let api: Vec<String> = ["ws", "wl"]
        .iter()
        .map(|n| {
            let ty = out.ty(n).unwrap().to_string();
            ty.split(" @ ").nth(1).unwrap_or("dense").to_string()
        })
        .collect();
    assert_eq!(api, cli, "API formats differ from the CLI's");
}

#[test]
fn every_engine_gives_the_same_values() {
    let src = "input a: f32[i=5, k=7] = randn(seed=3)\n\
               input b: f16[k, j=3] = randn(seed=4)\n\
               c = tanh(einsum(a, b, \"i k, k j -> i j\"))\n\
               m = reduce(exp(c), \"i j -> i\", \"sum\")\n\
               output c, m\n";
    let want = Program::compile_with(src, nominal(Engine::Interp))
        .unwrap()
        .runner()
        .run()
        .unwrap();
    let want = want["c"].to_f64();
    for engine in [Engine::Eval, Engine::Jit] {
        let got = Program::compile_with(src, nominal(engine))
            .unwrap()
            .runner()
            .run()
            .unwrap();
        for (g, w) in got["c"].to_f64().iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                "{engine:?}: {g} vs {w}"
            );
        }
    }
}

#[test]
fn the_cuda_slot_is_a_diagnostic_everywhere() {
    let src = "input x: f32[n=4] = arange\ny = x * 2\noutput y\n";
    let err = Program::compile_with(src, nominal(Engine::Cuda))
        .unwrap()
        .runner()
        .run()
        .unwrap_err();
    assert_eq!(err.0[0].code, Code::BackendUnavailable, "{err:?}");
    let dir = tempfile::tempdir().unwrap();
    let run = tdsl_script(dir.path(), "run", src, &["--backend", "cuda"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("tdsl::backend::unavailable"),
        "{}",
        run.stderr
    );
    let (code, out) = crate::repl::repl_in(dir.path(), &format!("{src}:set backend cuda\n:time\n"));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("tdsl::backend::unavailable"), "{out}");
    assert!(!out.contains("panicked"), "{out}");
}

#[test]
fn engines_have_one_list_of_names() {
    for e in Engine::ALL {
        assert_eq!(Engine::from_name(e.name()), Some(e));
    }
    let dir = tempfile::tempdir().unwrap();
    let help = tdsl_in(dir.path(), &["run", "--help"]);
    for e in Engine::ALL {
        assert!(help.stdout.contains(e.name()), "{}", help.stdout);
    }
}

#[test]
fn oversized_programs_are_refused_by_the_api_before_anything_is_allocated() {
    // An input of 10^18 elements with an initialiser: compiling works, running must refuse
    // with a diagnostic instead of aborting the process.
    let src = "input x: f32[a=1000000, b=1000000, c=1000000] = ones\n\
               y = reduce(x, \"a b c -> a\", \"sum\")\noutput y\n";
    for engine in [Engine::Jit, Engine::Interp, Engine::Eval] {
        let p = Program::compile_with(src, nominal(engine)).unwrap();
        let err = p.runner().run().unwrap_err();
        assert_eq!(err.0[0].code, Code::TooLarge, "{engine:?}: {err:?}");
    }
    // A product whose output would not fit, from small inputs.
    let src = "input x: f32[i=1000, j=1000] = ones\n\
               y = einsum(x, x, \"i j, k l -> i j k l\")\noutput y\n";
    let err = Program::compile_with(src, nominal(Engine::Jit))
        .unwrap()
        .runner()
        .run()
        .unwrap_err();
    assert_eq!(err.0[0].code, Code::TooLarge, "{err:?}");
}

#[test]
fn the_pipeline_runs_each_stage_on_its_own() {
    let pipe = Pipeline::new(nominal(Engine::Eval));
    let script = pipe
        .parse("input x: f32[n=3] = arange\ny = reduce(x, \"n -> \", \"sum\")\noutput y")
        .unwrap();
    let program = pipe.check(&script, &Default::default()).unwrap();
    let plan = pipe.plan(&program).unwrap();
    assert!(!plan.loops.kernels.is_empty());
    let inputs = tdsl::bind::bind_values(&program, Default::default()).unwrap();
    let compiled = pipe.compile(program).unwrap();
    assert!(compiled.plan().is_some());
    let (out, stats) = compiled.run(inputs, &Default::default()).unwrap();
    assert_eq!(out[0].to_f64(), vec![3.0]);
    assert_eq!(
        stats.kernel_times.len(),
        compiled.plan().unwrap().loops.kernels.len()
    );
    // The evaluator emits the loop IR of a kernel through the same seam as the JIT's CLIF.
    let text = tdsl::runtime::emit(Engine::Eval, compiled.plan().unwrap(), 0).unwrap();
    assert!(text.contains("kernel k0"), "{text}");
    let clif = tdsl::runtime::emit(Engine::Jit, compiled.plan().unwrap(), 0).unwrap();
    assert!(clif.contains("function"), "{clif}");
}

/// Sparse data bound as it was read stays compressed: a CSR tensor bound to an input declared
/// `@ csr` is used as it is, one bound to `@ csc` or to a dense input is converted; every engine
/// gives the dense product's values.
#[test]
fn sparse_values_bind_compressed_in_any_declared_layout() {
    use tdsl::bind::{Provided, Value};
    use tdsl_sparse::{Layout, SparseTensor, Values};
    // w = [[1, 0, 2], [0, 0, 3]] in CSR.
    let w = SparseTensor {
        shape: vec![2, 3],
        layout: Layout::Csr,
        ptr: vec![0, 2, 3],
        idx: vec![0, 2, 2],
        values: Values::F32(vec![1.0, 2.0, 3.0]),
    };
    let x = tdsl::Tensor::from_slice(&[1.0f32, 10.0, 100.0], &[3]).unwrap();
    for format in [" @ csr", " @ csc", " @ coo", ""] {
        let src = format!(
            "input w: f32[o=2, i=3]{format}\ninput x: f32[i]\ny = einsum(w, x, \"o i, i -> o\")\noutput y\n"
        );
        for engine in [Engine::Jit, Engine::Eval, Engine::Interp] {
            let pipe = Pipeline::new(nominal(engine));
            let program = pipe
                .check(&pipe.parse(&src).unwrap(), &Default::default())
                .unwrap();
            let provided = [
                (
                    "w".to_string(),
                    Provided {
                        tensor: Value::Sparse(w.clone()),
                        source: "w".into(),
                    },
                ),
                ("x".to_string(), Provided::dense(x.clone(), "x")),
            ]
            .into_iter()
            .collect();
            let values = tdsl::bind::bind_values(&program, provided).unwrap();
            let (out, _) = pipe
                .compile(program)
                .unwrap()
                .run(values, &Default::default())
                .unwrap();
            assert_eq!(out[0].to_f64(), vec![201.0, 300.0], "{format:?} {engine:?}");
        }
    }
}
