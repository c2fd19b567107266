//! Loop-IR filetests: programs written as text in `tests/loop/*.loop`, read by
//! `tdsl_loop::read`, verified, and run by the evaluator, the CPU JIT, the evaluator on the
//! program with its library calls expanded to loop nests (what a GPU renders), and, where a C++
//! compiler is present, the CUDA code through its host emulation. All must agree (Cranelift's
//! filetests are the model). Directives are `;` comments:
//!
//! - `; input N = [v, …]` / `; input N.ptr = [...]`: the data bound to an input (a sparse input's
//!   arrays must be given; a dense input without one gets small deterministic values).
//! - `; expect output N = [v, …]`: the output's values, within 1e-5 relative (1e-2 for 16-bit
//!   outputs) of the largest.
//! - `; verify: TEXT`: the verifier rejects the program with a message containing TEXT (nothing
//!   runs).
//! - `; read: TEXT`: reading fails with exactly this `line:col: message`.
//!
//! Every plan the planner makes for the examples, the benchmarks and the corpus also reads back
//! to the same program, so the reader covers everything the printer writes.

use tdsl_loop::{read::read_program, Backend, Data, ElemType, LoopProgram, Part, Role};

fn loop_files() -> Vec<std::path::PathBuf> {
    crate::common::files_in("tests/loop", "loop")
}

#[derive(Default)]
struct Directives {
    inputs: Vec<(String, Vec<f64>)>,
    expect: Vec<(u32, Vec<f64>)>,
    verify: Option<String>,
    read: Option<String>,
}

fn numbers(text: &str) -> Vec<f64> {
    let inner = text.trim().trim_start_matches('[').trim_end_matches(']');
    inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            _ => s.parse().unwrap_or_else(|_| panic!("not a number: {s}")),
        })
        .collect()
}

fn directives(text: &str) -> Directives {
    let mut d = Directives::default();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix(';') else {
            continue;
        };
        let rest = rest.trim();
        if let Some(v) = rest.strip_prefix("verify:") {
            d.verify = Some(v.trim().to_string());
        } else if let Some(v) = rest.strip_prefix("read:") {
            d.read = Some(v.trim().to_string());
        } else if let Some((key, vals)) = rest.split_once('=') {
            // `expect output N = [...]` and `input N[.part] = [...]`; other comments are prose.
            let key = key.trim();
            if let Some(n) = key.strip_prefix("expect output ") {
                d.expect
                    .push((n.trim().parse().expect("output number"), numbers(vals)));
            } else if let Some(n) = key.strip_prefix("input ") {
                d.inputs.push((n.trim().to_string(), numbers(vals)));
            }
        }
    }
    d
}

/// The host buffer set: bound inputs from the directives (or deterministic values), every
/// other buffer zeroed.
fn buffers(p: &LoopProgram, d: &Directives, file: &str) -> Vec<Data> {
    p.buffers
        .iter()
        .map(|b| {
            let name = match b.role {
                Role::Input(n) => n.to_string(),
                Role::InputPart { input, part } => format!("{input}.{}", part.name()),
                Role::Output(_) | Role::Temp => return Data::zeros(b.ty, b.elems as usize),
            };
            let given = d.inputs.iter().find(|(n, _)| *n == name);
            let values: Vec<f64> = match (given, b.role) {
                (Some((_, v)), _) => v.clone(),
                (None, Role::Input(n)) => (0..b.elems)
                    .map(|i| ((i * 7 + 3 * n as u64) % 17) as f64 / 8.0 - 1.0)
                    .collect(),
                (None, _) => panic!("{file}: sparse input {name} needs `; input {name} = [...]`"),
            };
            let mut data = Data::zeros(b.ty, values.len());
            for (i, v) in values.iter().enumerate() {
                data.set(i, *v);
            }
            if matches!(
                b.role,
                Role::InputPart {
                    part: Part::Ptr,
                    ..
                }
            ) {
                assert_eq!(b.ty, ElemType::I32, "{file}: ptr arrays are i32");
            }
            data
        })
        .collect()
}

fn run(backend: &mut dyn Backend, p: &LoopProgram, d: &Directives, file: &str) -> Vec<Data> {
    let exe = backend
        .compile(p)
        .unwrap_or_else(|e| panic!("{file}: {} compile: {e}", backend.name()));
    let mut bufs = buffers(p, d, file);
    exe.run(&mut bufs, &Default::default())
        .unwrap_or_else(|e| panic!("{file}: {} run: {e}", backend.name()));
    bufs
}

fn close(a: &[f64], b: &[f64], tol: f64) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("{} values against {}", a.len(), b.len()));
    }
    let scale = b.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let same = (x - y).abs() <= tol * scale || (x.is_nan() && y.is_nan()) || x == y;
        if !same {
            return Err(format!("element {i} is {x}, expected {y}"));
        }
    }
    Ok(())
}

/// Whether the emulation runs `p` on `tc`: the generic kernels always, a tensor-core
/// configuration where a product takes its templates.
fn emulated_on(p: &LoopProgram, tc: tdsl_cuda::tensor::TensorCores) -> bool {
    let (_, steps) = tdsl_cuda::map_program_variants(p, tc, Default::default());
    tc == tdsl_cuda::tensor::TensorCores::None
        || steps
            .iter()
            .any(|s| matches!(s, tdsl_cuda::Step::Launch(l) if l.lib.is_some()))
}

fn run_file(path: &std::path::Path) -> Result<usize, String> {
    let file = path.file_name().unwrap().to_string_lossy().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let d = directives(&text);
    let p = match (read_program(&text), &d.read) {
        (Err(e), Some(want)) if e.to_string() == *want => return Ok(0),
        (Err(e), _) => return Err(format!("read: {e}")),
        (Ok(_), Some(want)) => return Err(format!("read, expected the error {want}")),
        (Ok(p), None) => p,
    };
    let printed = tdsl_loop::print::print_program(&p);
    let again = read_program(&printed).map_err(|e| format!("reprinted text: {e}"))?;
    if format!("{again:?}") != format!("{p:?}") {
        return Err("the printed program reads back differently".into());
    }
    match (tdsl_loop::verify::verify(&p), &d.verify) {
        (Err(errs), Some(want)) => {
            let msgs: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
            return if msgs.iter().any(|m| m.contains(want.as_str())) {
                Ok(0)
            } else {
                Err(format!("verifier said {msgs:?}, expected {want:?}"))
            };
        }
        (Err(errs), None) => return Err(format!("verify: {errs:?}")),
        (Ok(()), Some(want)) => return Err(format!("verified, expected {want:?}")),
        (Ok(()), None) => {}
    }
    let eval = run(&mut tdsl_loop::EvalBackend, &p, &d, &file);
    let mut cpu = tdsl_cpu::CpuBackend::new().map_err(|e| e.to_string())?;
    let jit = run(&mut cpu, &p, &d, &file);
    let expanded = tdsl_loop::expand::expand_calls(&p);
    tdsl_loop::verify::verify(&expanded).map_err(|e| format!("expanded: {e:?}"))?;
    let mut others = vec![
        ("the JIT", jit),
        (
            "the expanded calls",
            run(&mut tdsl_loop::EvalBackend, &expanded, &d, &file),
        ),
    ];
    if let Some(cxx) = crate::diff::cxx() {
        use tdsl_cuda::tensor::TensorCores;
        // The generic kernels, then the tensor-core templates where a product takes them (with
        // the copies and elementwise kernels around it folded into its loads and stores).
        let engines = [
            (TensorCores::None, "the CUDA emulation"),
            (TensorCores::Mma, "the CUDA emulation on mma.sync"),
            (TensorCores::Wgmma, "the CUDA emulation on wgmma"),
        ];
        for (tc, engine) in engines {
            if !emulated_on(&p, tc) {
                continue;
            }
            let emu = tdsl_cuda::emulate::Emulator::compile_with(&p, cxx, tc)?;
            let mut bufs = buffers(&p, &d, &file);
            emu.run(&mut bufs)?;
            others.push((engine, bufs));
        }
    }
    let mut checked = 0;
    for (i, b) in p.buffers.iter().enumerate() {
        let Role::Output(n) = b.role else { continue };
        let tol = if b.ty.size_bytes() == 2 { 1e-2 } else { 1e-5 };
        let e = eval[i].to_f64();
        for (engine, bufs) in &others {
            close(&bufs[i].to_f64(), &e, tol)
                .map_err(|m| format!("output {n}: {engine} against the evaluator: {m}"))?;
        }
        if let Some((_, want)) = d.expect.iter().find(|(o, _)| *o == n) {
            close(&e, want, tol).map_err(|m| format!("output {n}: {m}"))?;
            checked += 1;
        }
    }
    if checked != d.expect.len() {
        return Err("an `expect output` names no output".into());
    }
    Ok(1)
}

#[test]
fn loop_filetests_agree_on_the_evaluator_and_the_jit() {
    let paths = loop_files();
    assert!(paths.len() >= 8, "tests/loop should not shrink");
    let mut ran = 0;
    let failures: Vec<String> = paths
        .iter()
        .filter_map(|p| match run_file(p) {
            Ok(n) => {
                ran += n;
                None
            }
            Err(e) => Some(format!("{}: {e}", p.display())),
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ran >= 6, "most filetests run programs");
}

/// Every loop file that runs, race-checked in emulation (`races.rs`): generic kernels, then the
/// tensor-core templates where a product takes them; no race, and the evaluator's results.
#[test]
fn loop_filetests_have_no_data_races() {
    use tdsl_cuda::emulate::{Check, Emulator};
    use tdsl_cuda::tensor::{TensorCores, Variants};
    let Some(cxx) = crate::races::checker() else {
        return;
    };
    let mut ran = 0;
    let mut failures = Vec::new();
    for path in loop_files() {
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).expect("reads");
        let d = directives(&text);
        let Ok(p) = read_program(&text) else { continue };
        if d.verify.is_some() || tdsl_loop::verify::verify(&p).is_err() {
            continue;
        }
        let eval = run(&mut tdsl_loop::EvalBackend, &p, &d, &file);
        for tc in [TensorCores::None, TensorCores::Mma, TensorCores::Wgmma] {
            if !emulated_on(&p, tc) {
                continue;
            }
            let outcome = Emulator::compile_checked(&p, cxx, tc, Variants::default(), Check::Races)
                .and_then(|emu| {
                    let mut bufs = buffers(&p, &d, &file);
                    emu.run(&mut bufs)?;
                    for (i, b) in p.buffers.iter().enumerate() {
                        if let Role::Output(n) = b.role {
                            let tol = if b.ty.size_bytes() == 2 { 1e-2 } else { 1e-5 };
                            close(&bufs[i].to_f64(), &eval[i].to_f64(), tol)
                                .map_err(|m| format!("output {n}: {m}"))?;
                        }
                    }
                    Ok(())
                });
            match outcome {
                Ok(()) => ran += 1,
                Err(e) => failures.push(format!("{file} ({tc:?}): {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(ran >= 12, "most filetests run: {ran}");
}

/// Every plan of the examples, benchmarks and corpus reads back from its text to the same
/// program (less the source spans, which the text does not hold).
#[test]
fn every_plan_reads_back_from_its_text() {
    let paths: Vec<_> = ["examples", "bench", "bench/layers", "tests/corpus"]
        .iter()
        .flat_map(|d| crate::common::files_in(d, "tdsl"))
        .collect();
    let mut read = 0;
    for path in &paths {
        let text = std::fs::read_to_string(path).unwrap();
        let Ok(program) = tdsl::compile(&text, &Default::default()) else {
            continue;
        };
        let Ok(plan) = tdsl::plan::lower::plan_program(&program) else {
            continue;
        };
        let printed = tdsl_loop::print::print_program(&plan.loops);
        let back =
            read_program(&printed).unwrap_or_else(|e| panic!("{}: {e}\n{printed}", path.display()));
        let mut want = plan.loops.clone();
        want.kernels.iter_mut().for_each(|k| k.source = None);
        // Debug text compares NaN constants as equal and -0 as unlike 0.
        assert_eq!(
            format!("{back:?}"),
            format!("{want:?}"),
            "{} reads back differently",
            path.display()
        );
        read += 1;
    }
    assert!(read >= 60, "only {read} plans read back");
}
