//! The one pipeline every entry point runs: text → AST → checked program → `auto` formats
//! resolved → plan (loop IR, verified) → compiled for an [`Engine`] → run.
//!
//! `tdsl run|bench|plan|check|cost`, the REPL and the Rust API ([`crate::Program`]) all go
//! through a [`Pipeline`]; what differs between them is where data comes from (files, a
//! session's generated inputs, tensors bound in Rust), not how a program is checked, which
//! machine `auto` predicts for, what memory it may use, or how it is planned and compiled.
//!
//! ```
//! use tdsl::session::{Engine, Options, Pipeline};
//! let pipe = Pipeline::new(Options { engine: Engine::Eval, ..Options::default() });
//! let script = pipe.parse("input x: f32[n=3] = arange\ny = x * 2\noutput y")?;
//! let program = pipe.check(&script, &Default::default())?;
//! let inputs = tdsl::bind::bind_values(&program, Default::default())?;
//! let compiled = pipe.compile(program)?;
//! let (out, _) = compiled.run(inputs, &Default::default())?;
//! assert_eq!(out[0].to_f64(), vec![0.0, 2.0, 4.0]);
//! # Ok::<(), tdsl::Diagnostics>(())
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::bind::Value;
use crate::check::{Binding, Entry, NodeId, Program};
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::machine::Machine;
use crate::plan::cost::{program_cost_with, CostInputs, ProgramCost, Stored, NOMINAL_MACHINE};
use crate::plan::lower::Plan;
use crate::tensor::Tensor;
use tdsl_loop::{Executable, RunOptions, RunStats};
use tdsl_syntax::ast::Script;

/// What runs a program. One list for the CLI's `--backend`, the REPL's `:set backend` and the
/// Rust API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Engine {
    /// The reference interpreter (`crate::interp`): the oracle.
    Interp,
    /// The planned loop IR, run by its evaluator (`tdsl_loop::EvalBackend`).
    Eval,
    /// The planned loop IR, compiled by Cranelift for this CPU (`tdsl_cpu::CpuBackend`).
    #[default]
    Jit,
    /// The planned loop IR on an NVIDIA GPU (`tdsl_cuda`: CUDA C++ compiled by NVRTC). A
    /// machine without a GPU, driver or NVRTC gets a `tdsl::backend::unavailable` diagnostic.
    Cuda,
}

impl Engine {
    /// Every engine, in the order help texts list them.
    pub const ALL: [Engine; 4] = [Engine::Jit, Engine::Interp, Engine::Eval, Engine::Cuda];

    /// The name the CLI and the REPL accept.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Interp => "interp",
            Engine::Eval => "eval",
            Engine::Jit => "jit",
            Engine::Cuda => "cuda",
        }
    }

    /// The engine called `name` (see [`Engine::name`]).
    pub fn from_name(name: &str) -> Option<Engine> {
        Engine::ALL.into_iter().find(|e| e.name() == name)
    }

    /// What reports call it.
    pub fn describe(self) -> &'static str {
        match self {
            Engine::Interp => "reference interpreter",
            Engine::Eval => "loop-IR evaluator",
            Engine::Jit => "JIT",
            Engine::Cuda => "CUDA",
        }
    }

    /// Whether the engine runs the plan (everything but the interpreter).
    pub fn runs_plan(self) -> bool {
        self != Engine::Interp
    }
}

/// Which machine `sparsify(x, auto)` and the cost model's sparse-or-dense verdicts predict for.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum MachineModel {
    /// This machine's ceilings, measured once and cached ([`crate::machine::measured`]);
    /// `TDSL_MACHINE=nominal` in the environment substitutes the nominal machine, so tests and
    /// CI print the same verdicts everywhere.
    #[default]
    Measured,
    /// The documented nominal machine ([`NOMINAL_MACHINE`]): the same choice everywhere.
    Nominal,
    /// A machine described by the caller.
    Given(Machine),
}

/// How a [`Pipeline`] checks, plans and runs. The default is the Rust API's: the JIT, this
/// machine's measured ceilings, help lines that say `program.bind`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    pub machine: MachineModel,
    pub engine: Engine,
    /// Whose words help lines use (`--input NAME=FILE` or `program.bind("NAME", &t)`), and how
    /// binding mistakes are reported (see [`Pipeline::check`]).
    pub entry: Entry,
    /// f32 products may read their operands as TF32 on a GPU's tensor cores
    /// (`tdsl_loop::LoopProgram::tf32`; the CLI's `--tf32`). Off: f32 is exact everywhere.
    pub tf32: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            machine: MachineModel::default(),
            engine: Engine::default(),
            entry: Entry::Api,
            tf32: false,
        }
    }
}

/// How much of a program's data a command needs in memory (see [`Pipeline::check_memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryUse {
    /// Only sparse inputs, to validate and count them (`check`, `cost`, `plan`).
    SparseInputs,
    /// Every input, and what the engine keeps while running.
    Run,
}

/// The pipeline: see the module docs. Cheap to build; the measured machine is found on first
/// need and kept.
#[derive(Debug)]
pub struct Pipeline {
    opts: Options,
    machine: OnceLock<Machine>,
}

impl Default for Pipeline {
    fn default() -> Pipeline {
        Pipeline::new(Options::default())
    }
}

impl Pipeline {
    pub fn new(opts: Options) -> Pipeline {
        Pipeline {
            opts,
            machine: OnceLock::new(),
        }
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    pub fn engine(&self) -> Engine {
        self.opts.engine
    }

    /// Text → AST.
    pub fn parse(&self, text: &str) -> Result<Script, Diagnostics> {
        crate::parse(text).map_err(Diagnostics::from)
    }

    /// AST → checked program. `bound` describes data already bound to inputs (files, tensors),
    /// so extents can come from it.
    pub fn check(
        &self,
        script: &Script,
        bound: &BTreeMap<String, Binding>,
    ) -> Result<Program, Diagnostics> {
        crate::check::check_script_for(script, bound, self.opts.entry)
    }

    /// [`Pipeline::check`] for a call that binds every input at once (a `Program::run`):
    /// binding mistakes are reported by their root cause and alone (a name that is no input,
    /// with a did-you-mean; an input neither bound nor initialised; a tensor of the wrong
    /// rank), not the unknown extents and mismatches that follow from them.
    pub fn check_all_bound(
        &self,
        script: &Script,
        bound: &BTreeMap<String, Binding>,
    ) -> Result<Program, Diagnostics> {
        let causes = binding_causes(script, bound);
        if !causes.is_empty() {
            return Err(causes);
        }
        self.check(script, bound)
    }

    /// The machine of [`Options::machine`] (measured on first call, when that is the model).
    pub fn machine(&self) -> Machine {
        *self.machine.get_or_init(|| match self.opts.machine {
            MachineModel::Nominal => NOMINAL_MACHINE,
            MachineModel::Given(m) => m,
            MachineModel::Measured => match std::env::var("TDSL_MACHINE").as_deref() {
                Ok("nominal") => NOMINAL_MACHINE,
                _ => crate::machine::measured(),
            },
        })
    }

    /// The machine predictions for `p` are made on: the nominal GPU
    /// ([`crate::plan::cost::NOMINAL_GPU`]) for the CUDA engine; else [`Pipeline::machine`] when `p` has
    /// something to predict (an `auto` format, a sparse product), else the nominal one (so a
    /// program with nothing to predict never measures the machine).
    pub fn prediction_machine(&self, p: &Program) -> Machine {
        if self.opts.engine == Engine::Cuda {
            // The GPU's own model: its kernels and ceilings, never the CPU's.
            let target = if self.opts.tf32 {
                crate::machine::Target::CudaTf32
            } else {
                crate::machine::Target::Cuda
            };
            return Machine {
                target,
                ..crate::plan::cost::NOMINAL_GPU
            };
        }
        let predicts = !p.auto_formats.is_empty()
            || (0..p.nodes.len())
                .any(|i| crate::plan::sparse::sparse_product(p, NodeId(i as u32)).is_some());
        if predicts {
            self.machine()
        } else {
            NOMINAL_MACHINE
        }
    }

    /// Chooses every `sparsify(x, auto)` format of `p` (`plan::auto`), from stored-entry
    /// counts and whatever input data there is.
    pub fn resolve_auto(&self, p: &mut Program, stored: &[Stored], data: &[Option<&Tensor>]) {
        if p.auto_formats.is_empty() {
            return;
        }
        let machine = self.prediction_machine(p);
        crate::plan::auto::resolve_auto(
            p,
            &CostInputs {
                stored,
                data,
                machine,
            },
        );
    }

    /// FLOPs, bytes and predicted times of every statement of `p`.
    pub fn cost(&self, p: &Program, stored: &[Stored], data: &[Option<&Tensor>]) -> ProgramCost {
        program_cost_with(
            p,
            &CostInputs {
                stored,
                data,
                machine: self.prediction_machine(p),
            },
        )
    }

    /// Refuses a program whose data would not fit in this machine's memory, before any of it
    /// is allocated: the inputs in their dtypes and, to run, what the engine keeps (every value
    /// at 8 bytes for the interpreter; every planned buffer for the others, checked again by
    /// [`Pipeline::compile`] once the plan is known).
    pub fn check_memory(&self, p: &Program, what: MemoryUse) -> Result<(), Diagnostic> {
        let run = what == MemoryUse::Run;
        let inputs: u128 = p
            .inputs
            .iter()
            .filter(|i| run || i.ty.format.is_sparse())
            .map(|i| elems(i.ty.shape.n_elems()) * i.ty.dtype.size_bytes() as u128)
            .sum();
        let values: u128 = if run && self.opts.engine == Engine::Interp {
            p.nodes
                .iter()
                .map(|n| elems(n.ty.shape.n_elems()) * 8)
                .sum()
        } else {
            0
        };
        let extra = (values > 0).then(|| {
            format!(
                ", {} for the reference interpreter's values",
                crate::machine::bytes_text(values)
            )
        });
        let largest = p
            .inputs
            .iter()
            .max_by_key(|i| i.ty.shape.n_elems())
            .map(|i| (i.span, "largest input"));
        fits(inputs + values, inputs, extra, largest, self.opts.entry)
    }

    /// Plans `p`: the loop IR, checked by the verifier (in every build). A plan the verifier
    /// rejects is a planner bug, reported as `tdsl::internal::error`.
    pub fn plan(&self, p: &Program) -> Result<Plan, Diagnostic> {
        let mut plan = crate::plan::lower::plan_program(p)?;
        plan.loops.tf32 = self.opts.tf32;
        Ok(plan)
    }

    /// Plans (unless the engine is the interpreter) and compiles `p` for the engine.
    pub fn compile(&self, p: Program) -> Result<Compiled, Diagnostic> {
        let shapes = output_shapes(&p);
        let engine = self.opts.engine;
        if !engine.runs_plan() {
            return Ok(Compiled {
                program: p,
                shapes,
                kernels: None,
                n_compiled: 0,
                compile_time: Duration::ZERO,
            });
        }
        let plan = self.plan(&p)?;
        let buffers: u128 = plan
            .loops
            .buffers
            .iter()
            .map(|b| b.elems as u128 * b.ty.size_bytes() as u128)
            .sum();
        let extra = Some(" in the plan's buffers".into());
        fits(buffers, 0, extra, None, self.opts.entry)?;
        let t = Instant::now();
        let (exe, n_compiled) = crate::runtime::compile(engine, &plan)?;
        Ok(Compiled {
            program: p,
            shapes,
            kernels: Some((plan, exe)),
            n_compiled,
            compile_time: t.elapsed(),
        })
    }
}

/// The binding mistakes of an API call: names that are no input, inputs without data or
/// initialiser, tensors whose rank is not the declared one.
fn binding_causes(script: &Script, bound: &BTreeMap<String, Binding>) -> Diagnostics {
    use tdsl_syntax::ast::StmtKind;
    let inputs: Vec<&tdsl_syntax::ast::InputDecl> = script
        .stmts
        .iter()
        .filter_map(|s| match &s.kind {
            StmtKind::Input(d) => Some(d),
            _ => None,
        })
        .collect();
    let names: Vec<&str> = inputs.iter().map(|d| d.name.name.as_str()).collect();
    let list = names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut out = Diagnostics::default();
    // A misspelled name and the input it was meant for are one mistake: reported once.
    let mut meant: Vec<&str> = Vec::new();
    for name in bound.keys() {
        if names.contains(&name.as_str()) {
            continue;
        }
        let guess =
            crate::check::closest(name, names.iter().copied()).filter(|n| !bound.contains_key(*n));
        meant.extend(guess);
        let help = match guess {
            Some(n) => format!("did you mean `{n}`?"),
            None => format!("bind tensors by the names of the script's inputs: {list}"),
        };
        out.push(
            Diagnostic::new(
                Code::UnknownInput,
                format!("`{name}` is not an input of this program; its inputs are {list}"),
            )
            .help(help),
        );
    }
    for d in &inputs {
        let name = &d.name.name;
        match bound.get(name) {
            None if d.init.is_none() && !meant.contains(&name.as_str()) => out.push(
                Diagnostic::new(
                    Code::MissingInput,
                    format!("`{name}` is not bound; the inputs are {list}"),
                )
                .label(d.name.span, "no tensor bound")
                .help(format!(
                    "{}, or give it an initialiser such as `= randn(seed=0)`",
                    Entry::Api.bind_hint(name)
                )),
            ),
            Some(b) if b.shape.len() != d.axes.len() => out.push(
                Diagnostic::new(
                    Code::ShapeMismatch,
                    format!(
                        "input `{name}` is declared with rank {} but the tensor bound to it has shape {:?} (rank {})",
                        d.axes.len(),
                        b.shape,
                        b.shape.len()
                    ),
                )
                .label(d.name.span, format!("rank {}", d.axes.len()))
                .help("bind a tensor with one extent per declared axis (rearrange it first if its axes are grouped differently)"),
            ),
            _ => {}
        }
    }
    out
}

fn elems(n: Option<u64>) -> u128 {
    n.unwrap_or(u64::MAX) as u128
}

/// `Err(tdsl::io::too_large)` when `need` bytes exceed physical memory.
fn fits(
    need: u128,
    inputs: u128,
    extra: Option<String>,
    label: Option<(tdsl_syntax::Span, &str)>,
    entry: Entry,
) -> Result<(), Diagnostic> {
    let have = crate::machine::physical_memory() as u128;
    if need <= have {
        return Ok(());
    }
    let what = match extra {
        Some(e) if inputs > 0 => format!("{} of inputs{e}", crate::machine::bytes_text(inputs)),
        Some(e) => e.trim_start_matches([',', ' ']).to_string(),
        None => format!("{} of inputs", crate::machine::bytes_text(inputs)),
    };
    let d = Diagnostic::new(
        Code::TooLarge,
        format!(
            "this program needs about {} of memory ({what}), but this machine has {}",
            crate::machine::bytes_text(need),
            crate::machine::bytes_text(have)
        ),
    )
    .help(match entry {
        Entry::Cli => "reduce the extents, or look at `tdsl cost` to see where the bytes go",
        Entry::Api => "reduce the extents of the inputs or of the values the program computes",
    });
    Err(match label {
        Some((span, text)) => d.label(span, text),
        None => d,
    })
}

/// The extents of every output of `p`.
pub fn output_shapes(p: &Program) -> Vec<Vec<usize>> {
    p.outputs
        .iter()
        .map(|o| {
            let ty = p.tensor_type(o.tensor);
            ty.shape.extents().iter().map(|&e| e as usize).collect()
        })
        .collect()
}

/// A program ready to run on its engine: the checked program, and for plan-running engines the
/// plan and its executable.
pub struct Compiled {
    program: Program,
    shapes: Vec<Vec<usize>>,
    kernels: Option<(Plan, Arc<dyn Executable>)>,
    n_compiled: usize,
    compile_time: Duration,
}

impl Compiled {
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The plan, for engines that run one.
    pub fn plan(&self) -> Option<&Plan> {
        self.kernels.as_ref().map(|(p, _)| p)
    }

    /// The executable, for engines that run a plan.
    pub fn executable(&self) -> Option<&Arc<dyn Executable>> {
        self.kernels.as_ref().map(|(_, e)| e)
    }

    /// Kernels compiled to build this (cache hits excluded).
    pub fn n_compiled(&self) -> usize {
        self.n_compiled
    }

    /// Time spent compiling (planning excluded).
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// Output extents, in `output` order.
    pub fn output_shapes(&self) -> &[Vec<usize>] {
        &self.shapes
    }

    /// Runs on `inputs` (one value per program input, in declaration order; dense data moves
    /// into the kernels' buffers without a copy, sparse data stored in the input's layout is
    /// bound as it is) and returns the outputs in `output` order.
    pub fn run(
        &self,
        inputs: Vec<Value>,
        opts: &RunOptions,
    ) -> Result<(Vec<Tensor>, RunStats), Diagnostic> {
        let Some((plan, exe)) = &self.kernels else {
            let inputs = inputs
                .into_iter()
                .map(Value::into_dense)
                .collect::<Result<Vec<_>, _>>()
                .map_err(Diagnostic::from)?;
            let t = Instant::now();
            let out = crate::interp::run(&self.program, &inputs);
            let stats = RunStats {
                kernel_times: vec![t.elapsed()],
                transfer: Duration::ZERO,
                device_span: None,
            };
            return Ok((out, stats));
        };
        let mut bufs = crate::runtime::bind_owned(plan, inputs)?;
        let stats = exe
            .run(&mut bufs, opts)
            .map_err(|e| crate::runtime::backend_diagnostic(e, plan))?;
        Ok((crate::runtime::outputs(plan, &self.shapes, bufs), stats))
    }
}
