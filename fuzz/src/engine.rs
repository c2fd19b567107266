//! The fuzz loop: load the corpus, mutate, run each input under `catch_unwind`, time it, keep
//! inputs with new outcomes in an in-memory pool, save crashes and hangs.
//!
//! * Panics are caught (a silent panic hook records the message and location while a fuzz
//!   thread runs) and counted as crashes; the first input of each panic location is saved as
//!   `crashes/TARGET-<hash>` with the message beside it in `TARGET-<hash>.txt`.
//! * An input that takes longer than `hang_ms` (2 s) is a hang, saved the same way. An input
//!   that never returns is caught by a watchdog thread after `hang_exit` (30 s): it saves the
//!   input as `crashes/TARGET-hang-<hash>` and ends the process with status 1.
//! * The loop runs on its own thread with an 8 MiB stack (a normal main-thread stack). A stack
//!   overflow aborts the process, which no handler can catch: with `trace`, every input is
//!   written to `crashes/TARGET-current` before it runs, so the file left behind after an
//!   abort is the culprit.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

use crate::mutate::Mutator;
use crate::rng::{fnv1a, Rng};
use crate::targets::{Ctx, Outcome, Target};

/// How one run goes.
#[derive(Debug, Clone)]
pub struct Config {
    /// Inputs to run (corpus entries included).
    pub runs: u64,
    /// Stop early after this long.
    pub time_limit: Option<Duration>,
    pub seed: u64,
    /// Overrides the target's default maximum input length.
    pub max_len: Option<usize>,
    /// Write every input to `crashes/TARGET-current` before running it.
    pub trace: bool,
    /// `corpus/` (one folder per target).
    pub corpus_dir: PathBuf,
    /// `crashes/`.
    pub crash_dir: PathBuf,
    /// An input slower than this is a hang.
    pub hang: Duration,
    /// An input still running after this long ends the process (watchdog).
    pub hang_exit: Duration,
    /// Progress lines on stderr every 10 s.
    pub progress: bool,
    /// Every how many inputs the slow routes run (`Program::compile`, file round trips).
    pub heavy_every: u64,
}

impl Default for Config {
    fn default() -> Config {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        Config {
            runs: 10_000,
            time_limit: None,
            seed: 1,
            max_len: None,
            trace: false,
            corpus_dir: root.join("corpus"),
            crash_dir: root.join("crashes"),
            hang: Duration::from_secs(2),
            hang_exit: Duration::from_secs(30),
            progress: false,
            heavy_every: 50,
        }
    }
}

/// What a run found.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub target: &'static str,
    pub inputs: u64,
    pub crashes: u64,
    pub hangs: u64,
    /// Inputs that made tdsl report an internal error (a `tdsl::internal::error` diagnostic, or
    /// a broken promise such as a file that reads back differently from how it was written):
    /// bugs, but not crashes.
    pub internal: u64,
    pub elapsed: Duration,
    pub slowest: Duration,
    /// Distinct outcomes seen (stages reached × diagnostic codes): how much of the target the
    /// run reached, in the absence of coverage.
    pub outcomes: usize,
    pub pool: usize,
    /// Mean length of the inputs run, in bytes.
    pub mean_len: u64,
    /// How many inputs reached each stage, in the order stages were first reached.
    pub stages: Vec<(&'static str, u64)>,
    /// Saved crash, hang and internal-error files, with what happened.
    pub findings: Vec<(PathBuf, String)>,
}

impl Summary {
    pub fn failed(&self) -> bool {
        self.crashes > 0 || self.hangs > 0
    }

    pub fn rate(&self) -> f64 {
        self.inputs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// `1234` → `1234/s`, `18400` → `18.4k/s`.
pub fn rate_text(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2}M/s", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1}k/s", r / 1e3)
    } else {
        format!("{r:.0}/s")
    }
}

impl Summary {
    /// `reached: parsed 61.2%, checked 20.3%, …`: how deep the inputs went.
    pub fn stages_line(&self) -> String {
        let n = self.inputs.max(1) as f64;
        let parts: Vec<String> = self
            .stages
            .iter()
            .map(|(name, k)| format!("{name} {:.1}%", *k as f64 * 100.0 / n))
            .collect();
        format!("reached: {}", parts.join(", "))
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} inputs, {} crashes, {} hangs, {:.1} s ({}), slowest {:.1} ms; {} internal errors, {} distinct outcomes, pool {}, mean input {} B",
            self.target,
            self.inputs,
            self.crashes,
            self.hangs,
            self.elapsed.as_secs_f64(),
            rate_text(self.rate()),
            self.slowest.as_secs_f64() * 1e3,
            self.internal,
            self.outcomes,
            self.pool,
            self.mean_len
        )
    }
}

// ---- panics ------------------------------------------------------------------------------------

thread_local! {
    /// Set on threads that run inputs: their panics are recorded, not printed.
    static QUIET: Cell<bool> = const { Cell::new(false) };
    /// The last panic on this thread: `(location, message)`.
    static LAST_PANIC: RefCell<Option<(String, String)>> = const { RefCell::new(None) };
}

/// Installs (once) the panic hook: silent on fuzz threads, the previous hook elsewhere.
fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if QUIET.with(Cell::get) {
                let location = info
                    .location()
                    .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
                    .unwrap_or_else(|| "<unknown>".into());
                let payload = info.payload();
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "<non-string panic payload>".into());
                LAST_PANIC.with(|p| *p.borrow_mut() = Some((location, message)));
            } else {
                previous(info);
            }
        }));
    });
}

/// What running one input did.
#[derive(Debug, Clone)]
pub enum Run {
    Done(Outcome),
    /// A panic: location and message.
    Panicked(String, String),
}

/// Runs `input` once on this thread, catching a panic.
pub fn run_input(target: &Target, input: &[u8], ctx: &mut Ctx) -> Run {
    install_hook();
    let was = QUIET.with(|q| q.replace(true));
    LAST_PANIC.with(|p| *p.borrow_mut() = None);
    let r = panic::catch_unwind(AssertUnwindSafe(|| (target.run)(input, ctx)));
    QUIET.with(|q| q.set(was));
    match r {
        Ok(o) => Run::Done(o),
        Err(_) => {
            let (loc, msg) = LAST_PANIC
                .with(|p| p.borrow_mut().take())
                .unwrap_or_else(|| ("<unknown>".into(), "<no message>".into()));
            Run::Panicked(loc, msg)
        }
    }
}

/// Runs `f` with a panic caught and not printed: for the fuzzer's own parsing of inputs (the
/// npz mutator lists archive members with the zip crate).
pub fn quietly<T>(f: impl FnOnce() -> T) -> Option<T> {
    install_hook();
    let was = QUIET.with(|q| q.replace(true));
    let r = panic::catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    r.ok()
}

/// Runs `f` on a thread with an 8 MiB stack and returns its result (a panic outside
/// `catch_unwind` — a fuzzer bug — is passed on).
pub fn on_big_stack<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let handle = std::thread::Builder::new()
        .name(name.to_string())
        .stack_size(8 << 20)
        .spawn(f)
        .expect("cannot spawn the fuzz thread");
    match handle.join() {
        Ok(v) => v,
        Err(e) => panic::resume_unwind(e),
    }
}

// ---- corpus ------------------------------------------------------------------------------------

/// The corpus of `target`: every file in `dir/TARGET/` (sorted by name), or the built-in seeds
/// when the folder is missing or empty.
pub fn load_corpus(target: &Target, dir: &Path, max_len: usize) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(target.name))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut corpus: Vec<Vec<u8>> = files
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .map(|mut b| {
            b.truncate(max_len);
            b
        })
        .collect();
    if corpus.is_empty() {
        corpus = crate::seeds::seeds(target.name)
            .into_iter()
            .map(|(_, mut b)| {
                b.truncate(max_len);
                b
            })
            .collect();
    }
    if corpus.is_empty() {
        corpus.push(Vec::new());
    }
    corpus
}

// ---- watchdog ----------------------------------------------------------------------------------

/// What the watchdog sees of the fuzz thread.
struct Watch {
    current: Mutex<Vec<u8>>,
    /// Milliseconds since `base` when the current input started; `u64::MAX` between inputs.
    started_ms: AtomicU64,
    done: AtomicBool,
    base: Instant,
}

fn watchdog(watch: Arc<Watch>, target: &'static str, crash_dir: PathBuf, limit: Duration) {
    while !watch.done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        let started = watch.started_ms.load(Ordering::Relaxed);
        if started == u64::MAX {
            continue;
        }
        let now = watch.base.elapsed().as_millis() as u64;
        if now.saturating_sub(started) > limit.as_millis() as u64 {
            let input = watch
                .current
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            let path = crash_dir.join(format!("{target}-hang-{:016x}", fnv1a(&input)));
            let _ = std::fs::create_dir_all(&crash_dir);
            let _ = std::fs::write(&path, &input);
            eprintln!(
                "{target}: an input has run for over {} s; saved it as {} and stopping",
                limit.as_secs(),
                path.display()
            );
            std::process::exit(1);
        }
    }
}

// ---- the loop ----------------------------------------------------------------------------------

/// Most inputs the pool keeps (corpus entries included).
const POOL_MAX: usize = 4096;
/// Distinct panic locations, internal errors and hangs saved to files per run (each kind).
const SAVE_MAX: usize = 32;

/// Fuzzes `target` as `cfg` says, on a thread with an 8 MiB stack.
pub fn fuzz(target: &'static Target, cfg: &Config) -> Summary {
    let cfg = cfg.clone();
    on_big_stack(&format!("fuzz-{}", target.name), move || {
        fuzz_loop(target, &cfg)
    })
}

fn save(dir: &Path, name: &str, input: &[u8], note: &str) -> PathBuf {
    let _ = std::fs::create_dir_all(dir);
    let path = dir.join(name);
    let _ = std::fs::write(&path, input);
    let _ = std::fs::write(path.with_extension("txt"), format!("{note}\n"));
    path
}

/// Input number `i` of a run into `input`: the seeds first, in order, then an entry of the pool
/// edited by the target's mutator (or the generic one) and fixed up, at most `max_len` bytes.
fn next_input(
    target: &Target,
    mutator: &Mutator,
    rng: &mut Rng,
    pool: &[Vec<u8>],
    n_seeds: usize,
    i: usize,
    input: &mut Vec<u8>,
) {
    input.clear();
    if i < n_seeds {
        input.extend_from_slice(&pool[i]);
        return;
    }
    // Length control: half the time the shorter of two entries, so that inputs, which edits
    // lengthen more often than they shorten, do not all drift to `max_len`.
    let (a, b) = (rng.below(pool.len()), rng.below(pool.len()));
    let k = if rng.one_in(4) {
        // A seed: the pool fills with inputs whose outcome is a new error, and a seed one edit
        // away reaches further than an error input.
        rng.below(n_seeds)
    } else if rng.one_in(2) && pool[b].len() < pool[a].len() {
        b
    } else {
        a
    };
    input.extend_from_slice(&pool[k]);
    let custom = target
        .mutate
        .is_some_and(|m| rng.one_in(2) && m(mutator, rng, input, pool));
    if !custom {
        mutator.mutate(rng, input, pool);
    }
    if let Some(fix) = target.fixup {
        if rng.one_in(2) {
            fix(rng, input);
        }
    }
    input.truncate(mutator.max_len);
}

fn fuzz_loop(target: &'static Target, cfg: &Config) -> Summary {
    let max_len = cfg.max_len.unwrap_or(target.max_len);
    let mutator = Mutator {
        dict: target.dict,
        text: target.text,
        max_len,
    };
    let mut pool = load_corpus(target, &cfg.corpus_dir, max_len);
    let n_seeds = pool.len();
    let mut rng = Rng::new(cfg.seed ^ fnv1a(target.name.as_bytes()));
    let mut ctx = Ctx::new(target.name);
    let mut s = Summary {
        target: target.name,
        ..Summary::default()
    };
    let mut outcomes: HashSet<u64> = HashSet::new();
    let mut saved_panics: HashMap<String, PathBuf> = HashMap::new();
    let mut saved_internal: HashSet<String> = HashSet::new();
    let watch = Arc::new(Watch {
        current: Mutex::new(Vec::new()),
        started_ms: AtomicU64::new(u64::MAX),
        done: AtomicBool::new(false),
        base: Instant::now(),
    });
    let dog = {
        let watch = Arc::clone(&watch);
        let dir = cfg.crash_dir.clone();
        let limit = cfg.hang_exit;
        std::thread::spawn(move || watchdog(watch, target.name, dir, limit))
    };
    let t0 = Instant::now();
    let mut last_progress = t0;
    let mut input: Vec<u8> = Vec::new();
    let mut total_len: u64 = 0;
    for i in 0..cfg.runs {
        if cfg.time_limit.is_some_and(|l| t0.elapsed() >= l) {
            break;
        }
        next_input(
            target, &mutator, &mut rng, &pool, n_seeds, i as usize, &mut input,
        );
        ctx.heavy = cfg.heavy_every > 0 && i % cfg.heavy_every == 0;
        if cfg.trace {
            let _ = std::fs::create_dir_all(&cfg.crash_dir);
            let _ = std::fs::write(
                cfg.crash_dir.join(format!("{}-current", target.name)),
                &input,
            );
        }
        watch
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone_from(&input);
        watch
            .started_ms
            .store(watch.base.elapsed().as_millis() as u64, Ordering::Relaxed);
        let t = Instant::now();
        let r = run_input(target, &input, &mut ctx);
        let dt = t.elapsed();
        watch.started_ms.store(u64::MAX, Ordering::Relaxed);
        s.inputs += 1;
        total_len += input.len() as u64;
        s.slowest = s.slowest.max(dt);
        let hash = fnv1a(&input);
        match r {
            Run::Done(o) => {
                for st in &o.stages {
                    match s.stages.iter_mut().find(|(n, _)| n == st) {
                        Some(slot) => slot.1 += 1,
                        None => s.stages.push((st, 1)),
                    }
                }
                if let Some(what) = o.internal {
                    s.internal += 1;
                    let key: String = what.chars().take(80).collect();
                    if saved_internal.len() < SAVE_MAX && saved_internal.insert(key) {
                        let name = format!("{}-internal-{hash:016x}", target.name);
                        let path = save(&cfg.crash_dir, &name, &input, &what);
                        eprintln!(
                            "{}: internal error ({}): {what}",
                            target.name,
                            path.display()
                        );
                        s.findings.push((path, format!("internal error: {what}")));
                    }
                }
                if outcomes.insert(o.sig) && i as usize >= n_seeds {
                    if pool.len() < POOL_MAX {
                        pool.push(input.clone());
                    } else {
                        let k = n_seeds + rng.below(POOL_MAX - n_seeds);
                        pool[k] = input.clone();
                    }
                }
            }
            Run::Panicked(loc, msg) => {
                s.crashes += 1;
                if !saved_panics.contains_key(&loc) && saved_panics.len() < SAVE_MAX {
                    let name = format!("{}-{hash:016x}", target.name);
                    let note = format!("panicked at {loc}: {msg}");
                    let path = save(&cfg.crash_dir, &name, &input, &note);
                    eprintln!("{}: crash ({}): {note}", target.name, path.display());
                    s.findings.push((path.clone(), note));
                    saved_panics.insert(loc, path);
                }
            }
        }
        if dt > cfg.hang {
            s.hangs += 1;
        }
        if dt > cfg.hang && s.hangs <= SAVE_MAX as u64 {
            let note = format!(
                "took {:.2} s (limit {:.1} s)",
                dt.as_secs_f64(),
                cfg.hang.as_secs_f64()
            );
            let name = format!("{}-{hash:016x}", target.name);
            let path = save(&cfg.crash_dir, &name, &input, &note);
            eprintln!("{}: hang ({}): {note}", target.name, path.display());
            s.findings.push((path, format!("hang: {note}")));
        }
        if cfg.progress && last_progress.elapsed() >= Duration::from_secs(10) {
            last_progress = Instant::now();
            s.elapsed = t0.elapsed();
            s.outcomes = outcomes.len();
            s.pool = pool.len();
            s.mean_len = total_len / s.inputs;
            eprintln!("  … {s}");
        }
    }
    s.elapsed = t0.elapsed();
    s.outcomes = outcomes.len();
    s.pool = pool.len();
    s.mean_len = total_len / s.inputs.max(1);
    watch.done.store(true, Ordering::Relaxed);
    let _ = dog.join();
    ctx.cleanup();
    s
}

// ---- replay and minimisation -------------------------------------------------------------------

/// Runs one input the way the fuzz loop does (with the slow routes on), with the ordinary
/// panic hook, so the message and (with `RUST_BACKTRACE=1`) the backtrace are printed.
pub fn replay(target: &'static Target, input: Vec<u8>) -> (Run, Duration) {
    on_big_stack("replay", move || {
        let mut ctx = Ctx::new(target.name);
        ctx.heavy = true;
        ctx.verbose = true;
        let t = Instant::now();
        let r = match panic::catch_unwind(AssertUnwindSafe(|| (target.run)(&input, &mut ctx))) {
            Ok(o) => Run::Done(o),
            Err(e) => {
                let msg = e
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| e.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Run::Panicked(String::new(), msg)
            }
        };
        let dt = t.elapsed();
        ctx.cleanup();
        (r, dt)
    })
}

/// Shrinks a crashing input: removes chunks (halves down to single bytes) as long as the input
/// still panics at the same location. Returns the smallest input found and that location.
pub fn minimize(target: &'static Target, input: Vec<u8>) -> Option<(Vec<u8>, String)> {
    on_big_stack("minimize", move || {
        let mut ctx = Ctx::new(target.name);
        ctx.heavy = true;
        let loc = match run_input(target, &input, &mut ctx) {
            Run::Panicked(loc, _) => loc,
            Run::Done(_) => {
                ctx.cleanup();
                return None;
            }
        };
        let mut best = input;
        let mut chunk = best.len().div_ceil(2).max(1);
        loop {
            let mut i = 0;
            let mut shrunk = false;
            while i < best.len() {
                let mut cand = best.clone();
                cand.drain(i..(i + chunk).min(best.len()));
                match run_input(target, &cand, &mut ctx) {
                    Run::Panicked(l, _) if l == loc => {
                        best = cand;
                        shrunk = true;
                    }
                    _ => i += chunk,
                }
            }
            if chunk == 1 && !shrunk {
                break;
            }
            if !shrunk {
                chunk = chunk.div_ceil(2);
            }
        }
        ctx.cleanup();
        Some((best, loc))
    })
}
