//! The public Rust API: compile a script once, run it many times on the CPU JIT.
//!
//! - [`Program::compile`] parses and checks a script. Axis extents may be left to the data:
//!   a script whose input extents are unknown until tensors are bound still compiles (see
//!   [`Program`] for what is checked when).
//! - [`Program::run`] (or the [`Program::bind`] builder) binds tensors to inputs by name and runs
//!   the script with the JIT (`runtime`). The checked program, its plan and the compiled kernels
//!   are cached inside the [`Program`] per *input signature* (names, dtypes and shapes of the
//!   bound tensors), so a second run with the same shapes does no checking, planning or
//!   compiling.
//! - [`Outputs`] holds the results by name and in `output` order, with their types (axis names,
//!   dtype, format).
//! - [`Tensor`] (from `crate::tensor`) gains constructors and accessors over `&[T]` here;
//!   [`TensorView`] borrows caller memory. [`Element`] is the set of element types (`f32`,
//!   `f64`, [`f16`](struct@f16), [`bf16`](struct@bf16)).
//!
//! The macros (`tdsl::einsum!` and friends, crate `tdsl-macros`) expand to calls into the
//! hidden `__private` module at the bottom of this file: each call site keeps a cache of
//! one-statement programs keyed by its operands' dtypes and shapes.
//!
//! Data movement: kernels run on buffers that own their elements (`tdsl_loop::Data`), so a
//! tensor passed *by value* ([`TensorArg::Owned`]) is moved into its buffer without copying,
//! and a borrowed one (`&Tensor`, [`TensorView`], the macros' operands) is copied once.

use crate::bind::{bind_inputs, Provided};
use crate::check::{self, Binding};
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::dtype::DType;
use crate::session::{Engine, MemoryUse, Options, Pipeline};
use crate::tensor::{Storage, Tensor};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tdsl_syntax::ast::{self, StmtKind};
use tdsl_syntax::pattern as syntax_pattern;
use tdsl_syntax::Span;

pub use crate::check::{Axis, Format, Shape, TensorType};
pub use half::{bf16, f16};

mod tensor;
pub use tensor::*;

#[cfg(feature = "ndarray")]
mod ndarray;

#[doc(hidden)]
#[path = "macros.rs"]
pub mod __private;

// ---------------------------------------------------------------------------------------------
// Programs
// ---------------------------------------------------------------------------------------------

/// Work counters: how many runs, plans and kernel compilations happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JitStats {
    /// Runs started.
    pub runs: usize,
    /// Input signatures checked and planned (cache misses).
    pub plans: usize,
    /// Kernels the JIT compiled (the per-thread kernel cache can make this smaller than the
    /// number of kernels planned).
    pub kernels_compiled: usize,
}

thread_local! {
    static THREAD_STATS: Cell<JitStats> = const {
        Cell::new(JitStats { runs: 0, plans: 0, kernels_compiled: 0 })
    };
}

/// The counters of API work done on the calling thread, over every [`Program`] and macro call
/// site: a loop of `einsum!` calls with one shape adds one plan.
///
/// ```
/// let before = tdsl::jit_stats();
/// let p = tdsl::Program::compile("input x: f32[n=2] = ones\ny = x + 1\noutput y").unwrap();
/// for _ in 0..3 {
///     p.runner().run().unwrap();
/// }
/// let after = tdsl::jit_stats();
/// assert_eq!(after.runs - before.runs, 3);
/// assert_eq!(after.plans - before.plans, 1);
/// ```
pub fn jit_stats() -> JitStats {
    THREAD_STATS.with(Cell::get)
}

fn count(f: impl FnOnce(&mut JitStats)) {
    THREAD_STATS.with(|c| {
        let mut s = c.get();
        f(&mut s);
        c.set(s);
    });
}

/// How much a program's types are known before data is bound.
#[derive(Debug)]
enum State {
    /// Every extent is known from the script: the checked program.
    Checked(Box<check::Program>),
    /// Some input extents come from the data; checked again when tensors are bound.
    Deferred,
    /// Only from `program!`, whose script passed the syntax checks at compile time: errors
    /// the checker found, returned by every run.
    Invalid(Diagnostics),
}

/// The input signature a cached plan is valid for: bound names (sorted), dtypes and shapes.
type Signature = Vec<(String, DType, Vec<usize>)>;

/// A signature's cache entry: built once (successfully or not).
type CacheCell = std::sync::OnceLock<Result<Arc<Compiled>, Diagnostics>>;

/// Everything a run with one signature needs, built once by the pipeline.
struct Compiled {
    compiled: crate::session::Compiled,
    /// Initialiser data of the inputs that the signature leaves unbound.
    defaults: Vec<Option<Tensor>>,
}

struct Inner {
    source: String,
    script: ast::Script,
    state: State,
    /// The pipeline every signature is checked, planned and compiled by.
    pipe: Pipeline,
    /// One cell per signature: the first run with it builds the entry, and runs on other threads
    /// that arrive meanwhile wait for that build instead of compiling the same kernels again.
    cache: Mutex<HashMap<Signature, Arc<CacheCell>>>,
    runs: AtomicUsize,
    plans: AtomicUsize,
    kernels: AtomicUsize,
}

/// A compiled tdsl script, ready to run on the CPU JIT. Cloning is cheap and shares the cache.
///
/// **When things are checked.** [`Program::compile`] parses the script and checks it with no
/// data. If every input extent is written in the script (`f32[b=2, 64]`, `let`), that check is
/// complete and every error is reported there. If some input extents are left to the data
/// (`input x: f32[batch, d]`), the errors that say so are set aside, the patterns are checked as
/// far as no shape is needed (as the macros do at compile time), and the full check runs again
/// when tensors are bound, with their shapes: errors that depend on them (an extent mismatch, a
/// pattern that does not fit the rank) come from [`Program::run`].
///
/// **Caching.** Each run computes the input signature (bound names, dtypes, shapes). The first
/// run with a signature checks, plans and JIT-compiles the script and stores the result in the
/// program; later runs with the same signature go straight to the kernels. Inputs that are not
/// bound use their initialisers (`= randn(seed=0)`), generated once per signature.
///
/// ```
/// use tdsl::{Program, Tensor};
/// let p = Program::compile(
///     "input x: f32[rows, cols]\ninput w: f32[cols, k]\ny = einsum(x, w, \"r c, c k -> r k\")\noutput y",
/// )?;
/// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
/// let w = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0], &[2, 2])?;
/// let out = p.run([("x", &x), ("w", &w)])?;
/// assert_eq!(out["y"].as_slice::<f32>(), Some(&[1.0, 2.0, 3.0, 4.0][..]));
/// // The same shapes again: no checking, planning or compiling.
/// let out = p.bind("x", &x).bind("w", &w).run()?;
/// assert_eq!(p.stats().plans, 1);
/// assert_eq!(out.ty("y").unwrap().to_string(), "f32[r=2, k=2]");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Program {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("source", &self.inner.source)
            .field("deferred", &matches!(self.inner.state, State::Deferred))
            .field("stats", &self.stats())
            .finish()
    }
}

impl std::fmt::Display for TensorType {
    /// `f32[b=2, 64] @ csr`, as `tdsl check` prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&check::type_summary(self))
    }
}

/// Whether every diagnostic says an input axis has no extent yet (data can supply it).
fn extents_from_data(script: &ast::Script, diags: &Diagnostics) -> bool {
    let input_spans: Vec<Span> = script
        .stmts
        .iter()
        .filter(|s| matches!(s.kind, StmtKind::Input(_)))
        .map(|s| s.span)
        .collect();
    !diags.is_empty()
        && diags.iter().all(|d| {
            d.code == Code::UnknownExtent
                && d.span().is_some_and(|sp| {
                    input_spans
                        .iter()
                        .any(|s| s.start <= sp.start && sp.end <= s.end)
                })
        })
}

/// The shape-free pattern checks of `tdsl_syntax::pattern` over every pattern call of a script.
fn pattern_diagnostics(script: &ast::Script) -> Diagnostics {
    let mut out = Diagnostics::default();
    for e in syntax_pattern::check_script_patterns(script) {
        let mut d = Diagnostic::new(check::pattern::code(e.error.code), e.error.message)
            .label(e.span, e.error.label);
        for (s, text) in e.others {
            d = d.label(s, text);
        }
        if let Some(h) = e.error.help {
            d = d.help(h);
        }
        out.push(d);
    }
    out
}

impl Program {
    /// Parses and checks a script (see [`Program`] for what is checked here and what when it
    /// runs).
    ///
    /// ```
    /// let err = tdsl::Program::compile("input x: f32[n=2]\ny = rearrange(x, \"a -> a b\")\noutput y")
    ///     .unwrap_err();
    /// assert_eq!(err.0[0].code, tdsl::Code::PatternAxisOneSide);
    /// ```
    pub fn compile(source: &str) -> Result<Program, Diagnostics> {
        Program::compile_with(source, Options::default())
    }

    /// [`Program::compile`] with pipeline options: the engine [`Program::run`] uses (the JIT by
    /// default; [`Engine::Eval`] runs the loop-IR evaluator) and the machine `auto` formats are
    /// chosen for (this machine's measured ceilings by default, as `tdsl run` does).
    ///
    /// ```
    /// use tdsl::session::{Engine, MachineModel, Options};
    /// let opts = Options { engine: Engine::Eval, machine: MachineModel::Nominal, ..Options::default() };
    /// let p = tdsl::Program::compile_with("input x: f32[n=2] = ones\ny = x + 1\noutput y", opts)?;
    /// assert_eq!(p.runner().run()?["y"].as_slice::<f32>(), Some(&[2.0, 2.0][..]));
    /// # Ok::<(), tdsl::Diagnostics>(())
    /// ```
    pub fn compile_with(source: &str, opts: Options) -> Result<Program, Diagnostics> {
        Program::compile_inner(source, opts).map_err(|d| d.with_source("<program>", source))
    }

    fn compile_inner(source: &str, opts: Options) -> Result<Program, Diagnostics> {
        let pipe = Pipeline::new(opts);
        let script = pipe.parse(source)?;
        // Nothing is bound yet: the plain checker (no binding root causes), API help lines.
        let state = match check::check_script_for(&script, &BTreeMap::new(), check::Entry::Api) {
            Ok(p) => State::Checked(Box::new(p)),
            Err(d) if extents_from_data(&script, &d) => {
                let patterns = pattern_diagnostics(&script);
                if !patterns.is_empty() {
                    return Err(patterns);
                }
                State::Deferred
            }
            Err(d) => return Err(d),
        };
        Ok(Program::with_state(source, script, state, pipe))
    }

    fn with_state(source: &str, script: ast::Script, state: State, pipe: Pipeline) -> Program {
        Program {
            inner: Arc::new(Inner {
                source: source.to_string(),
                script,
                state,
                pipe,
                cache: Mutex::new(HashMap::new()),
                runs: AtomicUsize::new(0),
                plans: AtomicUsize::new(0),
                kernels: AtomicUsize::new(0),
            }),
        }
    }

    /// What `program!` expands to (once per call site): the script passed the syntax and
    /// pattern checks at compile time; checker errors are kept and returned by every run.
    #[doc(hidden)]
    pub fn __from_macro(source: &str) -> Program {
        match Program::compile(source) {
            Ok(p) => p,
            Err(d) => {
                let script = crate::parse(source).unwrap_or_default();
                Program::with_state(source, script, State::Invalid(d), Pipeline::default())
            }
        }
    }

    /// The script text.
    pub fn source(&self) -> &str {
        &self.inner.source
    }

    /// The checked program, when every extent is known from the script alone (`None` when
    /// extents come from the data).
    pub fn checked(&self) -> Option<&check::Program> {
        match &self.inner.state {
            State::Checked(p) => Some(p),
            _ => None,
        }
    }

    /// `Err` with the checker's diagnostics for a `program!` script that does not check.
    pub fn check(&self) -> Result<(), Diagnostics> {
        match &self.inner.state {
            State::Invalid(d) => Err(d.clone()),
            _ => Ok(()),
        }
    }

    /// Declared input names, in order.
    pub fn input_names(&self) -> Vec<&str> {
        self.inner
            .script
            .stmts
            .iter()
            .filter_map(|s| match &s.kind {
                StmtKind::Input(d) => Some(d.name.name.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Output names, in `output` order.
    pub fn output_names(&self) -> Vec<&str> {
        self.inner
            .script
            .stmts
            .iter()
            .flat_map(|s| match &s.kind {
                StmtKind::Output { names } => names.iter().map(|n| n.name.as_str()).collect(),
                _ => Vec::new(),
            })
            .collect()
    }

    /// This program's counters (runs, signatures planned, kernels compiled).
    pub fn stats(&self) -> JitStats {
        JitStats {
            runs: self.inner.runs.load(Ordering::Relaxed),
            plans: self.inner.plans.load(Ordering::Relaxed),
            kernels_compiled: self.inner.kernels.load(Ordering::Relaxed),
        }
    }

    /// Runs the program with the JIT. `inputs` are `(name, tensor)` pairs; a tensor may be
    /// owned (moved into the kernel's buffer), `&Tensor` or a [`TensorView`] (copied once).
    /// Inputs left out use their initialisers.
    pub fn run<'a, I, N, T>(&self, inputs: I) -> Result<Outputs, Diagnostics>
    where
        I: IntoIterator<Item = (N, T)>,
        N: AsRef<str>,
        T: Into<TensorArg<'a>>,
    {
        let args = inputs
            .into_iter()
            .map(|(n, t)| (n.as_ref().to_string(), t.into()))
            .collect();
        self.run_args(args, self.inner.pipe.engine())
    }

    /// Starts a run that binds inputs one by one: `p.bind("x", &x).bind("w", w).run()`.
    pub fn bind<'p, 'a>(&'p self, name: &str, tensor: impl Into<TensorArg<'a>>) -> Run<'p, 'a> {
        self.runner().bind(name, tensor)
    }

    /// A run with nothing bound yet: `p.runner().run()` runs on the initialisers alone.
    pub fn runner<'a>(&self) -> Run<'_, 'a> {
        Run {
            program: self,
            args: Vec::new(),
        }
    }

    /// Runs with `args` on `engine`; errors carry the program's source for rendering.
    fn run_args(
        &self,
        args: Vec<(String, TensorArg<'_>)>,
        engine: Engine,
    ) -> Result<Outputs, Diagnostics> {
        self.run_inner(args, engine)
            .map_err(|d| d.with_source("<program>", &self.inner.source))
    }

    fn run_inner(
        &self,
        args: Vec<(String, TensorArg<'_>)>,
        engine: Engine,
    ) -> Result<Outputs, Diagnostics> {
        if let State::Invalid(d) = &self.inner.state {
            return Err(d.clone());
        }
        self.inner.runs.fetch_add(1, Ordering::Relaxed);
        count(|s| s.runs += 1);
        let mut sig: Signature = Vec::with_capacity(args.len());
        for (name, t) in &args {
            if sig.iter().any(|(n, _, _)| n == name) {
                return Err(Diagnostic::new(
                    Code::BadArgument,
                    format!("input `{name}` is bound twice"),
                )
                .help("bind each input once")
                .into());
            }
            sig.push((name.clone(), t.dtype(), t.shape().to_vec()));
        }
        sig.sort();
        let compiled = self.compiled(sig)?;
        let c = &*compiled;

        let mut provided: BTreeMap<String, Provided> = args
            .into_iter()
            .map(|(name, t)| {
                let source = format!("the tensor bound to `{name}`");
                (
                    name,
                    Provided {
                        tensor: t.into_tensor().into(),
                        source,
                    },
                )
            })
            .collect();
        let program = c.compiled.program();
        for (input, default) in program.inputs.iter().zip(&c.defaults) {
            if let (false, Some(t)) = (provided.contains_key(&input.name), default) {
                provided.insert(
                    input.name.clone(),
                    Provided {
                        tensor: t.clone().into(),
                        source: "its initialiser".to_string(),
                    },
                );
            }
        }
        let outputs = if engine == Engine::Interp {
            crate::interp::run(program, &bind_inputs(program, provided)?)
        } else {
            let values = crate::bind::bind_values(program, provided)?;
            c.compiled.run(values, &Default::default())?.0
        };
        Ok(Outputs {
            names: program.outputs.iter().map(|o| o.name.clone()).collect(),
            types: program
                .outputs
                .iter()
                .map(|o| program.tensor_type(o.tensor).clone())
                .collect(),
            tensors: outputs,
        })
    }

    /// The cached check, plan and kernels for `sig`, built on a miss.
    fn compiled(&self, sig: Signature) -> Result<Arc<Compiled>, Diagnostics> {
        let cell = self
            .inner
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(sig.clone())
            .or_default()
            .clone();
        cell.get_or_init(|| self.build(&sig)).clone()
    }

    /// Checks, plans and compiles the program for `sig` (once per signature: see `compiled`).
    fn build(&self, sig: &Signature) -> Result<Arc<Compiled>, Diagnostics> {
        let bound: BTreeMap<String, Binding> = sig
            .iter()
            .map(|(name, dtype, shape)| {
                (
                    name.clone(),
                    Binding {
                        dtype: *dtype,
                        shape: shape.clone(),
                        source: format!("the tensor bound to `{name}`"),
                    },
                )
            })
            .collect();
        let pipe = &self.inner.pipe;
        let mut program = pipe.check_all_bound(&self.inner.script, &bound)?;
        pipe.check_memory(&program, MemoryUse::Run)?;
        // `auto` formats are chosen as `tdsl run` chooses them: the same pipeline, machine
        // and stored-entry counts (no data is bound yet, so counts come from the types).
        let stored: Vec<_> = program
            .inputs
            .iter()
            .map(|i| crate::plan::cost::stored(&i.ty, None))
            .collect();
        pipe.resolve_auto(&mut program, &stored, &[]);
        let mut diags = Diagnostics::default();
        if program.outputs.is_empty() {
            diags.push(
                Diagnostic::new(Code::NoOutput, "the script has no `output` statement")
                    .help("add `output NAME` naming the tensors to produce"),
            );
        }
        let mut defaults = Vec::with_capacity(program.inputs.len());
        for input in &program.inputs {
            if bound.contains_key(&input.name) {
                defaults.push(None);
                continue;
            }
            match &input.init {
                Some(init) => defaults.push(Some(crate::init::generate(init, &input.ty))),
                None => {
                    defaults.push(None);
                    diags.push(
                        Diagnostic::new(
                            Code::MissingInput,
                            format!("input `{}` has no data and no initialiser", input.name),
                        )
                        .label(input.span, "no data bound")
                        .help(format!(
                            "bind it: `program.bind(\"{}\", &tensor)`, or give it an initialiser such as `= randn(seed=0)`",
                            input.name
                        )),
                    );
                }
            }
        }
        if !diags.is_empty() {
            return Err(diags);
        }
        let compiled = pipe.compile(program)?;
        let n_compiled = compiled.n_compiled();
        self.inner.plans.fetch_add(1, Ordering::Relaxed);
        self.inner.kernels.fetch_add(n_compiled, Ordering::Relaxed);
        count(|s| {
            s.plans += 1;
            s.kernels_compiled += n_compiled;
        });
        Ok(Arc::new(Compiled { compiled, defaults }))
    }
}

/// A run being put together with [`Program::bind`].
#[must_use = "call .run() to run the program"]
pub struct Run<'p, 'a> {
    program: &'p Program,
    args: Vec<(String, TensorArg<'a>)>,
}

impl<'a> Run<'_, 'a> {
    /// Binds one more input.
    pub fn bind(mut self, name: &str, tensor: impl Into<TensorArg<'a>>) -> Self {
        self.args.push((name.to_string(), tensor.into()));
        self
    }

    /// Runs with the program's engine (the JIT unless [`Program::compile_with`] chose another).
    pub fn run(self) -> Result<Outputs, Diagnostics> {
        let engine = self.program.inner.pipe.engine();
        self.program.run_args(self.args, engine)
    }

    /// Runs with the reference interpreter (`crate::interp`: f64 accumulation, naive loops),
    /// the oracle the JIT is tested against. Same checks, same [`Outputs`].
    pub fn run_reference(self) -> Result<Outputs, Diagnostics> {
        self.program.run_args(self.args, Engine::Interp)
    }
}

// ---------------------------------------------------------------------------------------------
