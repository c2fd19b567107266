//! The fuzz targets: one per front door of tdsl.
//!
//! | target | input | what runs |
//! |---|---|---|
//! | `script` | script text | `tdsl check`'s path: parse, shape-free pattern checks, check, memory check; for small programs also binding initialisers, `auto` resolution, cost and plan (`tdsl cost`, `tdsl plan`), the GPU mapping and CUDA units for sm_80 and sm_90 (`tdsl plan --device cuda`, `tdsl emit --target cuda`), and (every 50th input) JIT compile and run (`tdsl run`); every diagnostic rendered as the CLI prints it (human and JSON) |
//! | `pattern` | `OP\nPATTERN\nKWARGS\nSHAPES` | `tdsl_syntax::pattern` (einops for all three ops, einsum, numpy subscripts), the checker's `resolve_pattern` / `resolve_einsum` on small shapes, and (every 50th input) the macros' runtime route: `Program::compile` of the one-statement script a macro call site builds |
//! | `repl` | REPL lines | `parse_repl_line` and the REPL's checking of each line on one session-long `Checker` (a failed line is discarded), with the cost of the session's program |
//! | `npy`, `npz`, `safetensors` | file bytes | the readers in `tdsl::io` (written to one reused temporary file), and on every 50th input a write and read back |

use std::path::PathBuf;

use tdsl::render::{self, Color};
use tdsl::session::{Engine, MachineModel, Options, Pipeline};
use tdsl::{Code, Diagnostic, Diagnostics};

use crate::mutate::Mutator;
use crate::rng::Rng;

mod files;
mod pattern;
mod repl;
mod script;

pub(crate) use files::zip_archive;

/// What running an input did, for the engine.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// A hash of the stages reached and the diagnostic codes: an input with a new one joins the
    /// pool.
    pub sig: u64,
    /// A bug that is not a panic: a `tdsl::internal::error` diagnostic or a broken promise.
    pub internal: Option<String>,
    /// The stages the input reached (each once).
    pub stages: Vec<&'static str>,
}

/// State a target keeps between inputs.
pub struct Ctx {
    /// Run the slow routes too (set on every 50th input and when replaying).
    pub heavy: bool,
    /// Print what happened (replay).
    pub verbose: bool,
    /// The pipeline the CLI runs (`tdsl check`), predicting for the nominal machine.
    pub cli: Pipeline,
    /// A folder of our own for the file targets.
    tmp: PathBuf,
    /// Hashes of what was marked for this input (a set: order and repeats do not matter).
    marks: Vec<u64>,
    stages: Vec<&'static str>,
    internal: Option<String>,
}

impl Ctx {
    pub fn new(target: &str) -> Ctx {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let tmp = scratch_dir().join(format!(
            "tdsl-fuzz-{}-{target}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        Ctx {
            heavy: false,
            verbose: false,
            cli: Pipeline::new(Options {
                engine: Engine::Jit,
                machine: MachineModel::Nominal,
                entry: tdsl::check::Entry::Cli,
                tf32: false,
            }),
            tmp,
            marks: Vec::new(),
            stages: Vec::new(),
            internal: None,
        }
    }

    /// A path in this context's own temporary folder (created on first use).
    pub fn tmp_path(&self, name: &str) -> PathBuf {
        if !self.tmp.exists() {
            let _ = std::fs::create_dir_all(&self.tmp);
        }
        self.tmp.join(name)
    }

    /// Removes the temporary folder (ours alone).
    pub fn cleanup(&self) {
        if self.tmp.exists() {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }

    /// Adds `bytes` to the outcome: the set of everything marked while running an input.
    pub fn mark(&mut self, bytes: &[u8]) {
        self.marks.push(crate::rng::fnv1a(bytes));
    }

    /// Records a stage reached.
    pub fn stage(&mut self, name: &'static str) {
        self.mark(name.as_bytes());
        if !self.stages.contains(&name) {
            self.stages.push(name);
        }
        if self.verbose {
            println!("stage: {name}");
        }
    }

    /// Records a bug that is not a panic.
    pub fn internal(&mut self, what: String) {
        if self.verbose {
            println!("internal error: {what}");
        }
        if self.internal.is_none() {
            self.internal = Some(what);
        }
    }

    /// Renders diagnostics as the CLI does (human and JSON), against `text` called `name`,
    /// and records their codes; internal errors are recorded as such.
    pub fn diags(&mut self, ds: &Diagnostics, name: &str, text: &str) {
        for d in ds.iter().take(16) {
            self.diag(d, name, text);
        }
    }

    pub fn diag(&mut self, d: &Diagnostic, name: &str, text: &str) {
        self.mark(d.code.as_str().as_bytes());
        let human = render::render(d, name, text, Color::Never);
        let json = render::render_json(d, name, text);
        std::hint::black_box((&human, &json));
        if self.verbose {
            print!("{human}");
        }
        if d.code == Code::Internal {
            self.internal(format!("{}: {}", d.code.as_str(), d.message));
        }
    }

    /// The outcome so far, and a fresh start for the next input.
    fn take(&mut self) -> Outcome {
        self.marks.sort_unstable();
        self.marks.dedup();
        let mut sig: u64 = 0xcbf2_9ce4_8422_2325;
        for m in self.marks.drain(..) {
            sig = (sig ^ m).wrapping_mul(0x0100_0000_01b3);
        }
        Outcome {
            sig,
            stages: std::mem::take(&mut self.stages),
            internal: self.internal.take(),
        }
    }
}

/// A structural mutation: the mutator's settings, the PRNG, the input, the pool.
pub type MutateFn = fn(&Mutator, &mut Rng, &mut Vec<u8>, &[Vec<u8>]) -> bool;

/// Where the file targets write their inputs: `$TDSL_FUZZ_TMP`, else `/dev/shm` where there is
/// one (a file per input on a disk costs far more than reading it, and more still while other
/// processes write), else the system's temporary folder.
pub fn scratch_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TDSL_FUZZ_TMP") {
        return PathBuf::from(d);
    }
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// A fuzz target.
pub struct Target {
    pub name: &'static str,
    pub about: &'static str,
    /// Tokens for the mutator.
    pub dict: &'static [&'static [u8]],
    /// Text input (mutations favour printable ASCII and decimal numbers).
    pub text: bool,
    /// Default `--max-len`.
    pub max_len: usize,
    /// Runs one input; the outcome is taken from the context afterwards.
    pub run: fn(&[u8], &mut Ctx) -> Outcome,
    /// A structural mutation tried on half the inputs; `false` falls back to byte edits.
    pub mutate: Option<MutateFn>,
    /// A repair applied to half the mutated inputs (length fields made to match again).
    pub fixup: Option<fn(&mut Rng, &mut [u8])>,
}

/// Wraps a target body: the outcome is what the body recorded in the context.
macro_rules! body {
    ($f:path) => {{
        fn run(input: &[u8], ctx: &mut Ctx) -> Outcome {
            ctx.marks.clear();
            ctx.stages.clear();
            ctx.internal = None;
            $f(input, ctx);
            ctx.take()
        }
        run
    }};
}

/// Every target, in the order `all` runs them.
pub static TARGETS: [Target; 6] = [
    Target {
        name: "script",
        about: "script text: parse, check, memory check; bind, auto, cost and plan when small",
        dict: script::DICT,
        text: true,
        max_len: 4096,
        run: body!(script::run),
        mutate: None,
        fixup: None,
    },
    Target {
        name: "pattern",
        about: "pattern strings: syntax crate, checker with shapes, Program::compile (every 50th)",
        dict: pattern::DICT,
        text: true,
        max_len: 4096,
        run: body!(pattern::run),
        mutate: None,
        fixup: None,
    },
    Target {
        name: "repl",
        about: "REPL lines on one session-long checker",
        dict: script::DICT,
        text: true,
        max_len: 4096,
        run: body!(repl::run),
        mutate: None,
        fixup: None,
    },
    Target {
        name: "npy",
        about: ".npy bytes through tdsl::io::read_npy",
        dict: files::NPY_DICT,
        text: false,
        max_len: 1 << 20,
        run: body!(files::npy),
        mutate: None,
        fixup: Some(files::npy_fixup),
    },
    Target {
        name: "npz",
        about: ".npz bytes through tdsl::io::read_npz",
        dict: files::NPY_DICT,
        text: false,
        max_len: 1 << 20,
        run: body!(files::npz),
        mutate: Some(files::npz_mutate),
        fixup: None,
    },
    Target {
        name: "safetensors",
        about: ".safetensors bytes through tdsl::io::safetensors (dense and sparse)",
        dict: files::SAFETENSORS_DICT,
        text: false,
        max_len: 1 << 20,
        run: body!(files::safetensors),
        mutate: Some(files::safetensors_mutate),
        fixup: Some(files::safetensors_fixup),
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
