//! The `tdsl` command: `run`, `check` and `cost`.
//!
//! Exit status: 0 on success, 1 for errors in the user's script or data (rendered diagnostics on
//! stderr), 2 for bad command-line use (clap's own errors, an unreadable script path, a malformed
//! `--input`). Only this module reads the environment and the terminal.

mod bench;
pub mod plot;
pub mod repl;
mod report;

use crate::bind::{bind_available, Provided, Value};
use crate::check::{Binding, Program};
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::io;
use crate::render::{self, Color};
use crate::session::{Engine, MemoryUse, Options, Pipeline};
use crate::tensor::Tensor;
use clap::{Parser, Subcommand, ValueEnum};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tdsl_syntax::ast::StmtKind;
use tdsl_syntax::Span;

#[derive(Parser, Debug)]
#[command(name = "tdsl", version, about = "A tensor language with named axes", long_about = None)]
struct Cli {
    /// Colour diagnostics: auto (when stderr is a terminal), always, never.
    #[arg(long, global = true, value_enum, default_value_t = ColorArg::Auto)]
    color: ColorArg,
    /// Diagnostic format: human (rendered) or json (one object per line).
    #[arg(long, global = true, value_enum, default_value_t = MessageFormat::Human)]
    message_format: MessageFormat,
    /// Let f32 products run on the GPU's TF32 tensor cores (operands read with 10 mantissa
    /// bits, f32 accumulation). Without it, f32 is exact on every device.
    #[arg(long, global = true)]
    tf32: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum ColorArg {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum MessageFormat {
    Human,
    Json,
}

/// `--backend`: the names of [`Engine`]s.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Backend {
    /// The Cranelift JIT on every core (the default).
    Jit,
    /// The reference interpreter.
    Interp,
    /// The planned loop IR, run by its evaluator (slow; bisects planner and backend bugs).
    Eval,
    /// An NVIDIA GPU: CUDA C++ compiled by NVRTC (same as `--device cuda`).
    Cuda,
}

/// `--device`: where a plan runs (`cuda` is `--backend cuda`).
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Device {
    /// This machine's CPU (the JIT, unless `--backend` says otherwise).
    Cpu,
    /// The first NVIDIA GPU.
    Cuda,
}

/// `emit --target`: which code to print.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum EmitTarget {
    /// One CUDA C++ translation unit with every kernel (what NVRTC compiles).
    Cuda,
    /// The Cranelift IR of every kernel (what the CPU JIT compiles).
    Clif,
    /// The machine code the CPU JIT generates for every kernel (Cranelift's listing).
    Asm,
    /// The loop IR (as `tdsl plan`).
    Loop,
}

/// The engine `--backend` and `--device` choose together.
fn chosen(backend: Backend, device: Option<Device>) -> Engine {
    match device {
        Some(Device::Cuda) => Engine::Cuda,
        _ => backend.engine(),
    }
}

impl Backend {
    fn engine(self) -> Engine {
        match self {
            Backend::Jit => Engine::Jit,
            Backend::Interp => Engine::Interp,
            Backend::Eval => Engine::Eval,
            Backend::Cuda => Engine::Cuda,
        }
    }
}

/// Data sources shared by every subcommand.
#[derive(clap::Args, Debug, Clone)]
struct DataArgs {
    /// Bind an input to a file: NAME=FILE.npy, NAME=FILE.npz (scipy sparse) or
    /// NAME=FILE.safetensors:TENSOR. Repeatable.
    #[arg(long = "input", value_name = "NAME=FILE")]
    inputs: Vec<String>,
    /// Bind every input whose name matches a tensor in this .safetensors file.
    #[arg(long, value_name = "FILE.safetensors")]
    weights: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a script and print or save its outputs.
    Run {
        script: PathBuf,
        #[command(flatten)]
        data: DataArgs,
        /// Write each output NAME to DIR/NAME.npy (DIR/NAME.npz, scipy sparse, for outputs typed
        /// csr, csc, coo or bsr); DIR is created when missing.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Which backend evaluates the program.
        #[arg(long, value_enum, default_value_t = Backend::Jit)]
        backend: Backend,
        /// Where it runs: `cuda` runs it on the GPU (same as `--backend cuda`).
        #[arg(long, value_enum)]
        device: Option<Device>,
    },
    /// Print the plan: the loop IR every backend compiles (`--device cuda`: after the GPU
    /// mapping, with library calls as loop nests and `gpu grid` loops).
    Plan {
        script: PathBuf,
        #[command(flatten)]
        data: DataArgs,
        #[arg(long, value_enum)]
        device: Option<Device>,
    },
    /// Print the code a backend generates for a script: one CUDA C++ translation unit with
    /// every kernel and its launch shape (`--target cuda`), the Cranelift IR, or the loop IR.
    Emit {
        script: PathBuf,
        #[command(flatten)]
        data: DataArgs,
        #[arg(long, value_enum, default_value_t = EmitTarget::Cuda)]
        target: EmitTarget,
    },
    /// JIT-compile a script, run it repeatedly and report times against this machine's peak.
    /// Inputs without data or initialiser get random values.
    Bench {
        script: PathBuf,
        #[command(flatten)]
        data: DataArgs,
        /// Timed runs (the median is reported).
        #[arg(long, default_value_t = 10)]
        runs: usize,
        /// Untimed runs first.
        #[arg(long, default_value_t = 2)]
        warmup: usize,
        /// Threads (default: every core).
        #[arg(long)]
        threads: Option<usize>,
        /// One JSON object: compile_ms, run_ms_median, gflops, and more.
        #[arg(long)]
        json: bool,
        /// Which engine's kernels are timed (jit, eval or cuda).
        #[arg(long, value_enum, default_value_t = Backend::Jit)]
        backend: Backend,
        /// `cuda` times the GPU's kernels (same as `--backend cuda`).
        #[arg(long, value_enum)]
        device: Option<Device>,
    },
    /// Check a script and print every statement's shape, dtype and format.
    Check {
        script: PathBuf,
        #[command(flatten)]
        data: DataArgs,
    },
    /// Print FLOPs, bytes, arithmetic intensity and contraction paths per statement
    /// (`--device cuda`: sparse-or-dense verdicts and `auto` choices for the GPU's kernels).
    Cost {
        script: PathBuf,
        #[command(flatten)]
        data: DataArgs,
        #[arg(long, value_enum)]
        device: Option<Device>,
        /// One JSON object: total_flops and a list of statements.
        #[arg(long)]
        json: bool,
        /// Also draw a roofline (FLOP/s against arithmetic intensity) to this SVG file.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
    },
    /// Explore shapes, FLOPs, bytes and plans interactively (reads statements from stdin when it
    /// is not a terminal).
    Repl,
    /// Show this machine's measured ceilings (peak FLOP/s, bandwidth) and their cache.
    Machine {
        /// Measure again now (best of up to three tries) and replace the cache.
        #[arg(long)]
        remeasure: bool,
    },
}

/// A failure of a whole command: diagnostics against the script (exit 1) or a usage error
/// (exit 2).
enum Failure {
    Diags(Diagnostics),
    Usage(String),
}

impl From<Diagnostics> for Failure {
    fn from(d: Diagnostics) -> Self {
        Failure::Diags(d)
    }
}

impl From<Diagnostic> for Failure {
    fn from(d: Diagnostic) -> Self {
        Failure::Diags(d.into())
    }
}

/// Entry point of the `tdsl` binary.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let color = match cli.color {
        ColorArg::Always => Color::Always,
        ColorArg::Never => Color::Never,
        ColorArg::Auto => {
            if std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none() {
                Color::Always
            } else {
                Color::Never
            }
        }
    };
    if let Ok(v) = std::env::var("TDSL_ISA") {
        if tdsl_cpu::spmm::Isa::parse(&v).is_none() {
            eprintln!("warning: TDSL_ISA={v:?} is not one of scalar, avx2, avx512; ignored");
        }
    }
    if let Cmd::Repl = cli.cmd {
        return repl::main(color, cli.tf32);
    }
    if let Cmd::Machine { remeasure } = cli.cmd {
        let mut stdout = std::io::stdout().lock();
        let _ = write!(stdout, "{}", machine_report(remeasure));
        return ExitCode::SUCCESS;
    }
    let script_path = match &cli.cmd {
        Cmd::Run { script, .. }
        | Cmd::Check { script, .. }
        | Cmd::Cost { script, .. }
        | Cmd::Plan { script, .. }
        | Cmd::Emit { script, .. }
        | Cmd::Bench { script, .. } => script.clone(),
        Cmd::Repl | Cmd::Machine { .. } => return ExitCode::SUCCESS,
    };
    let text = match std::fs::read_to_string(&script_path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read script {}: {e}", script_path.display());
            return ExitCode::from(2);
        }
    };
    let name = script_path.display().to_string();
    let mut stdout = std::io::stdout().lock();
    match execute(&cli.cmd, cli.tf32, &text, &mut stdout) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
        Err(Failure::Diags(diags)) => {
            let mut stderr = std::io::stderr().lock();
            for d in diags.iter() {
                let s = match cli.message_format {
                    MessageFormat::Human => render::render(d, &name, &text, color),
                    MessageFormat::Json => render::render_json(d, &name, &text) + "\n",
                };
                let _ = stderr.write_all(s.as_bytes());
            }
            if cli.message_format == MessageFormat::Human && diags.0.len() > 1 {
                let _ = writeln!(stderr, "{} errors", diags.0.len());
            }
            ExitCode::from(1)
        }
    }
}

fn execute(cmd: &Cmd, tf32: bool, text: &str, out: &mut dyn Write) -> Result<(), Failure> {
    let pipeline = |engine| pipeline_with(engine, tf32);
    match cmd {
        Cmd::Bench {
            data,
            runs,
            warmup,
            threads,
            json,
            backend,
            device,
            ..
        } => {
            let engine = chosen(*backend, *device);
            if engine == Engine::Interp {
                return Err(Failure::Usage(
                    "bench times the kernels of a plan: --backend jit, eval or cuda".into(),
                ));
            }
            let pipe = pipeline(engine);
            let t0 = Instant::now();
            let (program, inputs) = load(&pipe, text, data, Need::Random)?;
            let parse_check = t0.elapsed();
            let t1 = Instant::now();
            let plan = pipe.plan(&program)?;
            let plan_time = t1.elapsed();
            let inputs: Vec<Value> = inputs.into_iter().flatten().collect();
            let opts = bench::Options {
                engine,
                runs: *runs,
                warmup: *warmup,
                threads: threads.unwrap_or_else(rayon::current_num_threads),
                json: *json,
            };
            let front = bench::Front {
                parse_check,
                plan: plan_time,
            };
            let report = bench::bench(&program, &plan, &inputs, front, &opts)?;
            let _ = write!(out, "{report}");
            Ok(())
        }
        Cmd::Plan { data, device, .. } => {
            // `auto` formats are chosen for the device the plan is for.
            let pipe = pipeline(chosen(Backend::Jit, *device));
            let (program, _) = load(&pipe, text, data, Need::Sparse)?;
            let plan = pipe.plan(&program)?;
            let loops = match device {
                Some(Device::Cuda) => tdsl_cuda::map_program(&plan.loops).0,
                _ => plan.loops,
            };
            let _ = write!(out, "{}", tdsl_loop::print::print_program(&loops));
            Ok(())
        }
        Cmd::Emit { data, target, .. } => {
            let pipe = pipeline(Engine::Jit);
            let (program, _) = load(&pipe, text, data, Need::Sparse)?;
            let plan = pipe.plan(&program)?;
            let text = match target {
                EmitTarget::Cuda => tdsl_cuda::cuda_unit(&plan.loops),
                EmitTarget::Loop => tdsl_loop::print::print_program(&plan.loops),
                EmitTarget::Clif | EmitTarget::Asm => {
                    let mut t = String::new();
                    for (k, kern) in plan.loops.kernels.iter().enumerate() {
                        t.push_str(&format!("; kernel {} ({})\n", kern.name, kern.origin));
                        t.push_str(&if *target == EmitTarget::Asm {
                            crate::runtime::disasm(Engine::Jit, &plan, k)?
                        } else {
                            crate::runtime::emit(Engine::Jit, &plan, k)?
                        });
                        t.push('\n');
                    }
                    t
                }
            };
            let _ = write!(out, "{text}");
            Ok(())
        }
        Cmd::Run {
            data,
            out: dir,
            backend,
            device,
            ..
        } => {
            let pipe = pipeline(chosen(*backend, *device));
            let t0 = Instant::now();
            let (program, inputs) = load(&pipe, text, data, Need::All)?;
            if program.outputs.is_empty() {
                return Err(Diagnostic::new(
                    Code::NoOutput,
                    "the script has no `output` statement",
                )
                .help("add `output NAME` naming the tensors to produce")
                .into());
            }
            let inputs: Vec<Value> = inputs.into_iter().flatten().collect();
            let t1 = Instant::now();
            let compiled = pipe.compile(program)?;
            let (outputs, _) = compiled.run(inputs, &Default::default())?;
            let program = compiled.program();
            let engine = pipe.engine().describe();
            let run_time = t1.elapsed();
            match dir {
                Some(dir) => write_outputs(program, &outputs, dir)?,
                None => {
                    let _ = write!(out, "{}", report::run_summary(program, &outputs));
                    let _ = writeln!(
                        out,
                        "time: {} run ({engine}), {} total",
                        report::duration(run_time),
                        report::duration(t0.elapsed())
                    );
                }
            }
            Ok(())
        }
        Cmd::Check { data, .. } => {
            let (program, _) = load(&pipeline(Engine::Jit), text, data, Need::Sparse)?;
            let _ = write!(out, "{}", report::check_report(&program));
            for line in report::auto_lines(&program) {
                let _ = writeln!(out, "{line}");
            }
            Ok(())
        }
        Cmd::Repl | Cmd::Machine { .. } => Ok(()),
        Cmd::Cost {
            data,
            json,
            plot,
            device,
            ..
        } => {
            let pipe = pipeline(chosen(Backend::Jit, *device));
            let (program, inputs) = load(&pipe, text, data, Need::Sparse)?;
            let stored = stored_inputs(&program, &inputs);
            let cost = pipe.cost(&program, &stored, &dense_data(&inputs));
            if let Some(path) = plot {
                let machine = bench::machine_ceilings();
                let measured = vec![None; cost.statements.len()];
                plot::roofline(path, &program, &cost, &machine, &measured)?;
            }
            if *json {
                let _ = writeln!(out, "{}", report::cost_json(&program, &cost));
            } else {
                let _ = write!(out, "{}", report::cost_report(&program, &cost));
            }
            Ok(())
        }
    }
}

/// Which inputs need data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Every input: from files or initialisers (`run`).
    All,
    /// Every input, and inputs with neither get random values (`bench`).
    Random,
    /// Only sparse inputs, to validate and count them (`check`, `cost`, `plan`).
    Sparse,
}

/// Parses, loads bound data, checks, and binds inputs. With `need_all`, every input must have
/// data (files or initialisers); otherwise inputs without data are `None` (costs then assume
/// dense storage for sparse inputs without data).
fn load(
    pipe: &Pipeline,
    text: &str,
    data: &DataArgs,
    need: Need,
) -> Result<(Program, Vec<Option<Value>>), Failure> {
    let script = pipe.parse(text)?;
    let provided = read_data(&script, data)?;
    let bound: BTreeMap<String, Binding> = provided
        .iter()
        .map(|(k, p)| {
            (
                k.clone(),
                Binding {
                    dtype: p.tensor.dtype(),
                    shape: p.tensor.shape().to_vec(),
                    source: p.source.clone(),
                },
            )
        })
        .collect();
    let program = pipe.check(&script, &bound)?;
    let need_all = need != Need::Sparse;
    pipe.check_memory(
        &program,
        if need_all {
            MemoryUse::Run
        } else {
            MemoryUse::SparseInputs
        },
    )?;
    let provided = if need_all {
        provided
    } else {
        // `check` and `cost` need data only to validate and count sparse inputs, and to count
        // what `sparsify` keeps of an input.
        provided
            .into_iter()
            .filter(|(k, _)| {
                program
                    .inputs
                    .iter()
                    .enumerate()
                    .any(|(n, i)| &i.name == k && counted_input(&program, n))
            })
            .collect()
    };
    let mut program_for_bind = program.clone();
    if need == Need::Random {
        for (i, inp) in program_for_bind.inputs.iter_mut().enumerate() {
            if inp.init.is_none() && !provided.contains_key(&inp.name) {
                inp.init = Some(crate::check::Init {
                    kind: crate::check::InitKind::Randn { seed: i as u64 },
                    density: None,
                    span: inp.span,
                });
            }
        }
    }
    if !need_all {
        for (n, inp) in program_for_bind.inputs.iter_mut().enumerate() {
            if !counted_input(&program, n) {
                inp.init = None;
            }
        }
    }
    let inputs = bind_available(&program_for_bind, provided, need_all)?;
    let mut program = program;
    let stored = stored_inputs(&program, &inputs);
    let data = dense_data(&inputs);
    pipe.resolve_auto(&mut program, &stored, &data);
    Ok((program, inputs))
}

/// The data the command line binds: `--weights` tensors named like declared inputs (dense, and
/// sparse under the `NAME.values` convention), then `--input NAME=FILE`s. Read errors carry the
/// span of the input they were for.
fn read_data(
    script: &tdsl_syntax::ast::Script,
    data: &DataArgs,
) -> Result<BTreeMap<String, Provided>, Failure> {
    let decl_span = |name: &str| -> Option<Span> {
        script.stmts.iter().find_map(|s| match &s.kind {
            StmtKind::Input(d) if d.name.name == name => Some(d.name.span),
            _ => None,
        })
    };
    let mut provided: BTreeMap<String, Provided> = BTreeMap::new();
    let mut diags = Diagnostics::default();
    let with_span = |d: Diagnostic, name: &str| match decl_span(name) {
        Some(s) if d.labels.is_empty() => {
            d.label(s, format!("data for `{name}` comes from this file"))
        }
        _ => d,
    };
    let read = |name: &str, file: &str, provided: &mut BTreeMap<String, Provided>| {
        let t = read_tensor_file(file).map_err(|d| with_span(d, name))?;
        let p = Provided {
            tensor: t,
            source: file.to_string(),
        };
        provided.insert(name.to_string(), p);
        Ok::<(), Diagnostic>(())
    };
    if let Some(w) = &data.weights {
        match io::safetensors::safetensors_names(w) {
            Ok(names) => {
                // Dense tensors by their name; sparse ones stored as `NAME.values` and friends.
                let sparse = names.iter().filter_map(|n| n.strip_suffix(".values"));
                let wanted: Vec<&str> = names.iter().map(String::as_str).chain(sparse).collect();
                for n in wanted {
                    if decl_span(n).is_some() && !provided.contains_key(n) {
                        let file = format!("{}:{n}", w.display());
                        if let Err(d) = read(n, &file, &mut provided) {
                            diags.push(d);
                        }
                    }
                }
            }
            Err(d) => diags.push(d),
        }
    }
    for spec in &data.inputs {
        match spec.split_once('=') {
            Some((name, file)) if !name.is_empty() && !file.is_empty() => {
                if let Err(d) = read(name, file, &mut provided) {
                    diags.push(d);
                }
            }
            _ => {
                return Err(Failure::Usage(format!(
                    "--input expects NAME=FILE, got `{spec}`"
                )))
            }
        }
    }
    if diags.is_empty() {
        Ok(provided)
    } else {
        Err(diags.into())
    }
}

/// Largest dense input generated or read by `check` and `cost` to count what `sparsify` keeps.
const SPARSIFY_COUNT_LIMIT: u64 = 1 << 26;

/// Whether `check` and `cost` need input `n`'s data: sparse inputs (to validate and count
/// them), and inputs that `sparsify` prunes by threshold or keeps whole (to count what it keeps).
fn counted_input(p: &Program, n: usize) -> bool {
    use crate::check::{NodeKind, Select};
    let inp = &p.inputs[n];
    if inp.ty.format.is_sparse() {
        return true;
    }
    let small = inp
        .ty
        .shape
        .n_elems()
        .is_some_and(|e| e <= SPARSIFY_COUNT_LIMIT);
    let is_n =
        |x| matches!(p.node(crate::plan::sparse::resolve(p, x)).kind, NodeKind::Input(k) if k == n);
    let pruned = p.nodes.iter().any(|node| match node.kind {
        NodeKind::Sparsify { x, select } => !matches!(select, Select::Density(_)) && is_n(x),
        _ => false,
    }) || p.auto_formats.iter().any(|a| is_n(a.x));
    small && pruned
}

/// Stored entries of every input, counted from its data where there is some.
fn stored_inputs(p: &Program, data: &[Option<Value>]) -> Vec<crate::plan::cost::Stored> {
    p.inputs
        .iter()
        .enumerate()
        .map(|(i, inp)| {
            crate::plan::cost::stored_value(&inp.ty, data.get(i).and_then(Option::as_ref))
        })
        .collect()
}

/// The dense data among `data` (what pruning counts need to read).
fn dense_data(data: &[Option<Value>]) -> Vec<Option<&Tensor>> {
    data.iter()
        .map(|v| v.as_ref().and_then(Value::as_dense))
        .collect()
}

/// `tdsl machine`: the ceilings every report and verdict uses, where they come from, and
/// whether they can be trusted.
fn machine_report(remeasure: bool) -> String {
    use crate::machine;
    use std::fmt::Write as _;
    let mut out = String::new();
    let cached = machine::cached();
    let (m, how) = match (remeasure, cached) {
        (false, Some(c)) if c.age <= machine::CACHE_MAX_AGE && machine::plausible(&c.machine) => {
            let days = c.age.as_secs_f64() / 86400.0;
            (c.machine, format!("cached {days:.1} days ago"))
        }
        (false, Some(c)) if !machine::plausible(&c.machine) => (
            machine::remeasure(),
            format!(
                "measured now: the cache held an implausible clock ({:.2} GHz)",
                c.machine.clock_ghz
            ),
        ),
        (false, Some(_)) => (
            machine::remeasure(),
            "measured now: the cache expired".into(),
        ),
        (false, None) => (machine::remeasure(), "measured now: no cache yet".into()),
        (true, _) => (machine::remeasure(), "measured now (--remeasure)".into()),
    };
    let _ = writeln!(out, "cpu: {}", machine::cpu_model());
    if let Some(n) = machine::nominal_ghz() {
        let _ = writeln!(out, "nominal clock: {n:.2} GHz");
    }
    let _ = writeln!(out, "ceilings: {}", m.describe());
    let _ = writeln!(out, "source: {how}");
    if !machine::plausible(&m) {
        let _ = writeln!(
            out,
            "warning: the clock is below half the nominal one after {} tries: the machine is busy; \
             these figures are used for this run only and not cached",
            3
        );
    }
    out
}

/// The pipeline every command runs, for `engine`, predicting for this machine
/// (`TDSL_MACHINE=nominal`: the nominal one; see [`crate::session::MachineModel`]).
pub(crate) fn pipeline(engine: Engine) -> Pipeline {
    pipeline_with(engine, false)
}

/// [`pipeline`], with f32 products allowed on TF32 tensor cores when `tf32` (`--tf32`).
pub(crate) fn pipeline_with(engine: Engine, tf32: bool) -> Pipeline {
    Pipeline::new(Options {
        engine,
        entry: crate::check::Entry::Cli,
        tf32,
        ..Options::default()
    })
}

/// Reads `FILE.npy`, a scipy sparse `FILE.npz`, or `FILE.safetensors:TENSOR` (a dense tensor,
/// or a sparse one stored under the `TENSOR.values`, … naming convention of spec/formats.md).
/// Sparse data is validated and stays compressed: it is expanded only where something needs
/// its dense values (the reference interpreter, an input declared in another format).
fn read_tensor_file(file: &str) -> Result<Value, Diagnostic> {
    if let Some((path, tensor)) = file.rsplit_once(':') {
        if path.ends_with(".safetensors") {
            if let Some(s) = io::safetensors::read_sparse_safetensors(Path::new(path), tensor)? {
                return Ok(Value::Sparse(s));
            }
            return io::safetensors::read_safetensors(Path::new(path), tensor).map(Value::Dense);
        }
    }
    if file.ends_with(".npz") {
        return Ok(Value::Sparse(io::npz::read_npz(Path::new(file))?));
    }
    if file.ends_with(".safetensors") {
        return Err(Diagnostic::new(
            Code::TensorNotFound,
            format!("`{file}` is a .safetensors file: name the tensor as `{file}:TENSOR`"),
        ));
    }
    io::npy::read_npy(Path::new(file)).map(Value::Dense)
}

/// Writes every output to `dir/NAME.npy`: all of them to temporary names first, then renamed,
/// so a failure leaves neither partial files nor a partial set of outputs.
fn write_outputs(program: &Program, outputs: &[Tensor], dir: &Path) -> Result<(), Failure> {
    if let Err(e) = std::fs::create_dir_all(dir) {
        return Err(Diagnostic::new(
            Code::FileWrite,
            format!("cannot create output directory {}: {e}", dir.display()),
        )
        .help("choose another --out directory")
        .into());
    }
    let pid = std::process::id();
    let mut staged: Vec<(PathBuf, PathBuf)> = Vec::new();
    let cleanup = |staged: &[(PathBuf, PathBuf)]| {
        for (tmp, _) in staged {
            let _ = std::fs::remove_file(tmp);
        }
    };
    for (o, t) in program.outputs.iter().zip(outputs) {
        // Outputs typed csr, csc, coo or bsr are written as scipy sparse .npz files.
        let ty = program.tensor_type(o.tensor);
        let layout = crate::sparse::layout(ty.format, ty.shape.rank())
            .filter(|l| !matches!(l, tdsl_sparse::Layout::TwoFour { .. }));
        let ext = if layout.is_some() { "npz" } else { "npy" };
        let tmp = dir.join(format!(".{}.{ext}.staged-{pid}", o.name));
        let dst = dir.join(format!("{}.{ext}", o.name));
        if dst.is_dir() {
            cleanup(&staged);
            return Err(Diagnostic::new(
                Code::FileWrite,
                format!("cannot write {}: a directory is in the way", dst.display()),
            )
            .label(o.span, "this output")
            .help("remove the directory or choose another --out directory")
            .into());
        }
        let written = match layout {
            Some(l) => crate::sparse::compress(t, l)
                .map_err(|e| {
                    Diagnostic::new(
                        Code::SparseData,
                        format!("output `{}` cannot be stored sparse: {e}", o.name),
                    )
                })
                .and_then(|s| io::npz::write_npz(&tmp, &s)),
            None => io::npy::write_npy(&tmp, t),
        };
        if let Err(d) = written {
            cleanup(&staged);
            return Err(d.into());
        }
        staged.push((tmp, dst));
    }
    for (i, (tmp, dst)) in staged.iter().enumerate() {
        if let Err(e) = std::fs::rename(tmp, dst) {
            cleanup(&staged[i..]);
            return Err(Diagnostic::new(
                Code::FileWrite,
                format!("cannot write {}: {e}", dst.display()),
            )
            .into());
        }
    }
    Ok(())
}
