//! `tdsl repl`: type statements one at a time and see each one's shape, dtype, format, FLOPs,
//! bytes and arithmetic intensity; inspect the session with `:cost`, `:plan`, `:time`, `:mem` and
//! the other commands (`:help` lists them).
//!
//! One [`Checker`] lives for the whole session. Each line is checked against a clone of it, and
//! the clone replaces it only if the line had no errors, so a failed line leaves no trace (no
//! half-declared input, no poisoned name) and an error never ends the session.
//!
//! Spans: every text lives at its own offsets of one `SourceMap`, and is parsed at its base
//! (`parse_repl_line_at`), so every span in the session points into exactly one text. Lines typed at the prompt (or piped in) form one transcript named `<repl>`, one
//! transcript line per input line (commands included), so a diagnostic's
//! `<repl>:LINE:COL` is the input line number and labels can point at earlier lines ("first
//! defined here"). Files read with `:load` get their own region and are rendered under their
//! own name.
//!
//! With stdin a terminal, rustyline edits lines (history in `dirs::data_dir()/tdsl/history`,
//! tab completion, multi-line input through its `Validator`). Otherwise statements are read line
//! by line with the same continuation rule, output is plain text without prompts or colours, and
//! the exit status is 1 if any input failed.

use crate::check::{
    format_name, type_summary, Assign, Checker, Format, Init, InitKind, NodeKind, Output, Program,
    TensorRef,
};
use crate::cli::report::{bytes, duration, group, table};
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::dtype::DType;
use crate::machine::Machine;
use crate::plan::cost::{program_cost, stored, ProgramCost, Stored};
use crate::render::{self, Color};
use crate::session::{Engine, MemoryUse, Pipeline};
use crate::tensor::Tensor;
use rustyline::completion::{Completer, FilenameCompleter, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{CompletionType, Config, Context, Editor, Helper};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tdsl_syntax::ast::{Expr, ReplLine, Stmt, StmtKind};
use tdsl_syntax::{span::FileId, SourceMap, Span};

mod complete;
mod files;
mod model;
mod plans;
mod timing;

use complete::ReplHelper;
use timing::g6;

/// Offsets at and above this belong to `:load`ed files; below, to the `<repl>` transcript.
const FILE_BASE: u32 = 1 << 31;

/// The REPL's commands, for `:help` and completion.
const COMMANDS: &[(&str, &str, &str)] = &[
    (
        ":cost",
        "",
        "FLOPs, bytes and intensity per statement, totals, contraction paths",
    ),
    (
        ":plan",
        "[NAME]",
        "the loop IR of the session (only NAME's kernels with NAME)",
    ),
    (
        ":emit",
        "clif|cuda [NAME]",
        "the Cranelift IR the JIT compiles, or the CUDA C++ the GPU runs",
    ),
    (
        ":device",
        "cpu|cuda",
        "where :time runs the session (cuda: the GPU; same as :set backend)",
    ),
    (
        ":time",
        "[NAME]",
        "JIT-compile, run on random data; time, GFLOP/s, GB/s vs this machine",
    ),
    (":vars", "", "every size, input and statement with its type"),
    (
        ":mem",
        "",
        "memory of the session's tensors; training state of its parameters",
    ),
    (
        ":train",
        "TOKENS [TIME_S] [PEAK_GFLOPS]",
        "training FLOPs (6·params·tokens) and MFU",
    ),
    (
        ":plot",
        "FILE.svg",
        "roofline of the statements (measured points from the last :time)",
    ),
    (
        ":sparsity",
        "NAME FILE.svg",
        "the nonzero pattern of a sparse input",
    ),
    (
        ":load",
        "FILE.tdsl",
        "check a script's statements into this session",
    ),
    (
        ":save",
        "FILE.tdsl",
        "write the session's statements as a script",
    ),
    (
        ":set",
        "[KEY VALUE]",
        "settings: threads, backend, runs, dtype, params (no argument: show them)",
    ),
    (":reset", "", "forget every statement (settings stay)"),
    (":help", "", "this list"),
    (":quit", "", "leave (also Ctrl-D)"),
];

/// What `:set` changes.
#[derive(Debug, Clone)]
struct Settings {
    /// Threads for `:time` on the JIT.
    threads: usize,
    /// Timed runs of `:time` (after one warm-up; fewer if they take over ~2 s).
    runs: usize,
    /// The dtype of parameters, gradients and optimiser state in `:mem`.
    dtype: DType,
    /// Which inputs are parameters in `:mem` and `:train`: `None` guesses (see [`is_data`]).
    params: Option<Vec<String>>,
}

/// Per-statement times of the last `:time` on the JIT (for `:plot`).
#[derive(Debug, Clone, Default)]
struct Timing {
    /// Statement name → seconds (sum of the medians of its kernels).
    statements: BTreeMap<String, f64>,
}

/// Whether the loop goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Go,
    Quit,
}

struct Session {
    checker: Checker,
    /// Accepted statements, in order, with session-wide spans (for `:save`).
    stmts: Vec<Stmt>,
    /// Every text of the session: the `<repl>` transcript (every input line so far, commands
    /// included), then each `:load`ed file.
    sources: SourceMap,
    repl: FileId,
    /// Data of sparse inputs with initialisers, generated once, to count stored entries.
    sparse: BTreeMap<String, Tensor>,
    last_time: Option<Timing>,
    settings: Settings,
    /// Measured ceilings for `:time` reports.
    machine: Option<Machine>,
    /// The pipeline every command runs (checking is the session's `Checker`, line by line).
    pipe: Pipeline,
    color: Color,
    /// Inputs (lines or commands) that failed.
    failures: usize,
    out: Box<dyn Write>,
    err: Box<dyn Write>,
}

/// Runs the REPL on stdin/stdout.
pub fn main(color: Color, tf32: bool) -> ExitCode {
    let interactive = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let color = if interactive { color } else { Color::Never };
    let mut s = Session::new(color);
    if tf32 {
        s.pipe = crate::cli::pipeline_with(Engine::Jit, true);
    }
    if interactive {
        match interactive_loop(&mut s) {
            Ok(()) => return ExitCode::SUCCESS,
            Err(e) => {
                let _ = writeln!(
                    s.err,
                    "note: line editing is unavailable ({e}); reading plain lines"
                );
            }
        }
    }
    piped_loop(&mut s);
    if s.failures > 0 && !interactive {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Plain line-by-line input: no prompts, no colours, no echo.
fn piped_loop(s: &mut Session) {
    let stdin = std::io::stdin().lock();
    let mut pending: Option<String> = None;
    for line in stdin.lines() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                s.error(&format!("cannot read stdin: {e}"));
                break;
            }
        };
        let line = line.trim_end_matches('\r');
        let is_command = line.trim_start().starts_with(':');
        if is_command {
            if let Some(code) = pending.take() {
                s.code(&code);
            }
            if s.command(line) == Flow::Quit {
                return;
            }
            continue;
        }
        let text = match pending.take() {
            Some(mut p) => {
                p.push('\n');
                p.push_str(line);
                p
            }
            None => line.to_string(),
        };
        if incomplete(&text) {
            pending = Some(text);
        } else {
            s.code(&text);
        }
    }
    if let Some(code) = pending {
        s.code(&code);
    }
    let _ = s.out.flush();
}

/// The terminal REPL with rustyline.
fn interactive_loop(s: &mut Session) -> Result<(), ReadlineError> {
    let config = Config::builder()
        .auto_add_history(false)
        .completion_type(CompletionType::List)
        .max_history_size(10_000)?
        .build();
    let mut rl: Editor<ReplHelper, DefaultHistory> = Editor::with_config(config)?;
    rl.set_helper(Some(ReplHelper::new(s)));
    let history = dirs::data_dir().map(|d| d.join("tdsl").join("history"));
    if let Some(h) = &history {
        let _ = rl.load_history(h);
    }
    let _ = writeln!(
        s.out,
        "tdsl repl: type statements to see their shapes and costs; :help lists commands, :quit leaves"
    );
    loop {
        let _ = s.out.flush();
        match rl.readline("tdsl> ") {
            Ok(line) => {
                if !line.trim().is_empty() {
                    let _ = rl.add_history_entry(line.as_str());
                }
                let flow = if line.trim_start().starts_with(':') {
                    s.command(&line)
                } else {
                    s.code(&line);
                    Flow::Go
                };
                if let Some(h) = rl.helper_mut() {
                    *h = ReplHelper::new(s);
                }
                if flow == Flow::Quit {
                    break;
                }
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                if let Some(h) = &history {
                    save_history(&mut rl, h);
                }
                return Err(e);
            }
        }
    }
    if let Some(h) = &history {
        save_history(&mut rl, h);
    }
    Ok(())
}

fn save_history(rl: &mut Editor<ReplHelper, DefaultHistory>, path: &Path) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = rl.save_history(path);
}

/// Whether `text` needs another line: a `(` or `[` is open, or the last token (ignoring
/// comments) is an operator, `,`, `=` or a `\` line continuation. Commands never continue.
pub(crate) fn incomplete(text: &str) -> bool {
    if text.trim_start().starts_with(':') {
        return false;
    }
    let mut depth = 0i64;
    let mut last = None;
    for line in text.split('\n') {
        let mut in_str = false;
        for c in line.chars() {
            if in_str {
                if c == '"' {
                    in_str = false;
                }
                last = Some(c);
                continue;
            }
            match c {
                '"' => {
                    in_str = true;
                    last = Some(c);
                }
                '#' => break,
                '(' | '[' => {
                    depth += 1;
                    last = Some(c);
                }
                ')' | ']' => {
                    depth -= 1;
                    last = Some(c);
                }
                c if c.is_whitespace() => {}
                c => last = Some(c),
            }
        }
    }
    depth > 0 || matches!(last, Some('+' | '-' | '*' | '/' | ',' | '=' | '\\'))
}

// ------------------------------------------------------------------------------------------
// Spans

// ------------------------------------------------------------------------------------------
// Helpers shared by the commands

/// Axis names that mark an input as data rather than a parameter in `:mem` and `:train`.
const DATA_AXES: &[&str] = &[
    "batch", "b", "bsz", "tokens", "token", "seq", "seq_len", "sequence", "time", "n_tokens",
    "sample", "samples",
];

/// Whether an input looks like data (it has a batch-, token- or sequence-like axis).
fn is_data(ty: &crate::check::TensorType) -> bool {
    ty.shape
        .0
        .iter()
        .any(|a| a.name.as_deref().is_some_and(|n| DATA_AXES.contains(&n)))
}

/// `12.3 GFLOP`, `4.5 TFLOP/s`: a count with an SI prefix.
fn si(v: f64, unit: &str) -> String {
    let (x, p) = if v >= 1e15 {
        (v / 1e15, "P")
    } else if v >= 1e12 {
        (v / 1e12, "T")
    } else if v >= 1e9 {
        (v / 1e9, "G")
    } else if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    format!("{x:.3} {p}{unit}")
}

/// A program that can be planned: the session's, and if it has no `output` yet, every
/// assignment that no later statement reads becomes an output. Also says which were added.
fn runnable(p: &Program) -> (Program, Vec<String>) {
    if !p.outputs.is_empty() {
        return (p.clone(), Vec::new());
    }
    let mut used = vec![false; p.assigns.len()];
    for n in &p.nodes {
        if let NodeKind::Var(a) = n.kind {
            used[a] = true;
        }
    }
    let mut q = p.clone();
    let mut added = Vec::new();
    for (a, asg) in p.assigns.iter().enumerate() {
        if !used[a] {
            q.outputs.push(Output {
                name: asg.name.clone(),
                tensor: TensorRef::Assign(a),
                span: asg.name_span,
            });
            added.push(asg.name.clone());
        }
    }
    (q, added)
}

/// The statement a kernel computes (its `SourceRef`), or its origin text for kernels that
/// compute no assignment (output copies, input expansions).
fn kernel_statement<'a>(p: &'a Program, k: &'a tdsl_loop::Kernel) -> &'a str {
    k.source
        .and_then(|s| s.statement)
        .and_then(|i| p.assigns.get(i as usize))
        .map_or(k.origin.as_str(), |a| a.name.as_str())
}

/// Largest sparse input generated up front (elements), to count stored entries for costs.
const SPARSE_GEN_LIMIT: u64 = 1 << 26;

impl Session {
    fn new(color: Color) -> Session {
        let mut sources = SourceMap::default();
        let repl = sources
            .reserve("<repl>", FILE_BASE - 1)
            .expect("an empty source map has room");
        Session {
            checker: Checker::new(BTreeMap::new()),
            stmts: Vec::new(),
            sources,
            repl,
            sparse: BTreeMap::new(),
            last_time: None,
            settings: Settings {
                threads: rayon::current_num_threads().max(1),
                runs: 10,
                dtype: DType::F32,
                params: None,
            },
            machine: None,
            pipe: crate::cli::pipeline(Engine::Jit),
            color,
            failures: 0,
            out: Box::new(std::io::stdout()),
            err: Box::new(std::io::stderr()),
        }
    }

    fn print(&mut self, text: &str) {
        let _ = self.out.write_all(text.as_bytes());
        if !text.ends_with('\n') {
            let _ = self.out.write_all(b"\n");
        }
    }

    /// A plain error line (command misuse).
    fn error(&mut self, msg: &str) {
        let _ = self.out.flush();
        let _ = writeln!(self.err, "error: {msg}");
        let _ = self.err.flush();
        self.failures += 1;
    }

    fn prog(&self) -> &Program {
        &self.checker.prog
    }

    fn machine(&mut self) -> Machine {
        if let Some(m) = self.machine {
            return m;
        }
        let m = crate::cli::bench::machine_ceilings();
        self.machine = Some(m);
        m
    }

    /// Renders diagnostics against the source their primary span points into.
    fn diags(&mut self, diags: &Diagnostics) {
        let _ = self.out.flush();
        let mut text = String::new();
        for d in diags.iter() {
            text.push_str(&self.render(d));
        }
        if diags.0.len() > 1 {
            let _ = writeln!(text, "{} errors", diags.0.len());
        }
        let _ = self.err.write_all(text.as_bytes());
        let _ = self.err.flush();
        self.failures += 1;
    }

    fn render(&self, d: &Diagnostic) -> String {
        let file = d.span().and_then(|p| self.sources.file_at(p.start));
        let Some(file) = file else {
            return render::render(d, "<repl>", "", self.color);
        };
        let mut local = d.clone();
        let inside = |s: Span| SourceMap::contains(file, s);
        // Labels in another source (a `:load`ed file, or the transcript) become a note.
        let elsewhere: Vec<String> = d
            .labels
            .iter()
            .filter(|l| !inside(l.span))
            .filter_map(|l| {
                let (name, line, col) = self.sources.locate(l.span.start)?;
                Some(format!("{} at {name}:{line}:{col}", l.text))
            })
            .collect();
        if !elsewhere.is_empty() {
            let note = elsewhere.join("; ");
            local.help = Some(match local.help {
                Some(h) => format!("{h} ({note})"),
                None => note,
            });
        }
        local.labels.retain(|l| inside(l.span));
        for l in &mut local.labels {
            l.span.start -= file.base;
            l.span.end -= file.base;
        }
        render::render(&local, &file.name, &file.text, self.color)
    }

    /// Stored entries of every input (sparse ones counted from their generated data).
    fn stored(&self, p: &Program) -> Vec<Stored> {
        p.inputs
            .iter()
            .map(|i| stored(&i.ty, self.sparse.get(&i.name)))
            .collect()
    }

    fn cost(&mut self) -> ProgramCost {
        let p = self.prog().clone();
        self.cost_of(&p).1
    }

    /// `p` with its `auto` formats chosen (`plan::auto`, through the pipeline).
    fn resolved(&mut self, p: &Program) -> Program {
        let mut p = p.clone();
        let stored = self.stored(&p);
        self.pipe.resolve_auto(&mut p, &stored, &[]);
        p
    }

    /// `p` resolved, and its cost.
    fn cost_of(&mut self, p: &Program) -> (Program, ProgramCost) {
        let p = self.resolved(p);
        let stored = self.stored(&p);
        let cost = self.pipe.cost(&p, &stored, &[]);
        (p, cost)
    }

    // --------------------------------------------------------------------------------------
    // Code

    /// One complete input of code (possibly several lines).
    fn code(&mut self, text: &str) {
        let Some(base) = self.sources.append(self.repl, &format!("{text}\n")) else {
            self.error("the session's transcript is too long: :save it, :reset and :load it");
            return;
        };
        match tdsl_syntax::parse_repl_line_at(text, base) {
            Ok(ReplLine::Empty) => {}
            Ok(ReplLine::Stmt(s)) => {
                self.stmt(s, true);
            }
            Ok(ReplLine::Expr(e)) => self.bare_expr(&e),
            Err(e) => {
                // Several statements on one line (`a = x; b = a`) parse as a script.
                match tdsl_syntax::parse_script_at(text, base) {
                    Ok(script) if script.stmts.len() > 1 => {
                        for s in script.stmts {
                            self.stmt(s, true);
                        }
                    }
                    _ => self.diags(&crate::syntax_diagnostic(e).into()),
                }
            }
        }
    }

    /// Checks one statement on a copy of the checker; keeps the copy only if it succeeded.
    /// `collect` gathers the statement's extents first (a `:load` does that for the whole file).
    fn stmt(&mut self, s: Stmt, collect: bool) -> bool {
        let mut next = self.checker.clone();
        if collect {
            next.collect_extents(std::slice::from_ref(&s));
        }
        next.stmt(&s);
        let diags = next.take_diagnostics();
        if !diags.is_empty() {
            self.diags(&diags);
            return false;
        }
        self.checker = next;
        let line = match &s.kind {
            StmtKind::Let { name, .. } => {
                let value = self
                    .prog()
                    .sizes
                    .iter()
                    .find(|z| z.name == name.name)
                    .map(|z| z.value);
                match value {
                    Some(v) => format!("{} = {v} (size)", name.name),
                    None => format!("{} (size)", name.name),
                }
            }
            StmtKind::Input(d) => self.input_line(&d.name.name),
            StmtKind::Assign { name, .. } => {
                let p = self.prog().clone();
                let (p, cost) = self.cost_of(&p);
                match cost.statements.last() {
                    Some(c) if c.name == name.name => {
                        let mut line = format!("{}: {}", name.name, cost_line(c));
                        for a in crate::cli::report::auto_lines(&p) {
                            if a.starts_with(&format!("auto: {} →", name.name)) {
                                let _ = write!(line, "\n  {a}");
                            }
                        }
                        for op in &c.sparse_ops {
                            let _ = write!(line, "\n  {}", crate::cli::report::sparse_op_line(op));
                        }
                        line
                    }
                    _ => name.name.clone(),
                }
            }
            StmtKind::AssignMany { names, .. } => {
                let p = self.prog();
                let lines: Vec<String> = names
                    .iter()
                    .filter_map(|n| p.assigns.iter().rev().find(|a| a.name == n.name))
                    .map(|a| format!("{}: {}", a.name, type_summary(&p.node(a.node).ty)))
                    .collect();
                lines.join("\n")
            }
            StmtKind::Output { .. } => {
                let outs: Vec<&str> = self
                    .prog()
                    .outputs
                    .iter()
                    .map(|o| o.name.as_str())
                    .collect();
                format!("outputs: {}", outs.join(", "))
            }
        };
        self.stmts.push(s);
        self.print(&line);
        true
    }

    /// Generates a new sparse input's data (to count its stored entries) and describes it.
    fn input_line(&mut self, name: &str) -> String {
        let Some(inp) = self.prog().inputs.iter().find(|i| i.name == name).cloned() else {
            return name.to_string();
        };
        if inp.ty.format.is_sparse() {
            if let Some(init) = &inp.init {
                if inp
                    .ty
                    .shape
                    .n_elems()
                    .is_some_and(|n| n <= SPARSE_GEN_LIMIT)
                {
                    let t = crate::init::generate(init, &inp.ty);
                    self.sparse.insert(inp.name.clone(), t);
                }
            }
        }
        let mut line = format!("{}: {}", inp.name, type_summary(&inp.ty));
        if let Some(init) = &inp.init {
            let _ = write!(line, " = {}", crate::cli::report::init_name(init));
        }
        let st = stored(&inp.ty, self.sparse.get(&inp.name));
        let dense =
            inp.ty.shape.n_elems().unwrap_or(u64::MAX) as u128 * inp.ty.dtype.size_bytes() as u128;
        if inp.ty.format.is_sparse() {
            let n = inp.ty.shape.n_elems().unwrap_or(1).max(1);
            if st.measured {
                let _ = write!(
                    line,
                    "  {} stored ({:.1}% of values; {} dense)",
                    bytes(st.bytes as u128),
                    100.0 * st.values as f64 / n as f64,
                    bytes(dense)
                );
            } else {
                let _ = write!(line, "  {} dense (no data to count nonzeros)", bytes(dense));
            }
        } else {
            let _ = write!(line, "  {}", bytes(dense));
        }
        line
    }

    /// A bare expression: its type and cost, not recorded.
    fn bare_expr(&mut self, e: &Expr) {
        let mut scratch = self.checker.clone();
        let node = scratch.expr(e);
        let diags = scratch.take_diagnostics();
        if !diags.is_empty() {
            self.diags(&diags);
            return;
        }
        let Some(node) = node else {
            self.print("(no value)");
            return;
        };
        let mut p = scratch.prog;
        p.assigns.push(Assign {
            name: "_".into(),
            node,
            span: e.span,
            name_span: e.span,
        });
        let (_, cost) = self.cost_of(&p);
        if let Some(c) = cost.statements.last() {
            let mut line = cost_line(c);
            for op in &c.sparse_ops {
                let _ = write!(line, "\n  {}", crate::cli::report::sparse_op_line(op));
            }
            self.print(&line);
        }
    }

    // --------------------------------------------------------------------------------------
    // Commands

    fn command(&mut self, line: &str) -> Flow {
        // The transcript keeps the line so later line numbers stay the input's.
        let first = line.lines().next().unwrap_or("");
        let _ = self.sources.append(self.repl, &format!("{first}\n"));
        let mut words = line.split_whitespace();
        let cmd = words.next().unwrap_or(":");
        let args: Vec<&str> = words.collect();
        match cmd {
            ":quit" | ":q" | ":exit" => return Flow::Quit,
            ":help" | ":h" | ":?" => self.help(),
            ":cost" => self.cmd_cost(),
            ":plan" => self.cmd_plan(args.first().copied()),
            ":emit" => self.cmd_emit(&args),
            ":time" => self.cmd_time(args.first().copied()),
            ":vars" => self.cmd_vars(),
            ":mem" => self.cmd_mem(),
            ":train" => self.cmd_train(&args),
            ":plot" => self.cmd_plot(&args),
            ":sparsity" => self.cmd_sparsity(&args),
            ":load" => self.cmd_load(&args),
            ":save" => self.cmd_save(&args),
            ":set" => self.cmd_set(&args),
            ":device" => match args.as_slice() {
                ["cuda"] => self.cmd_set(&["backend", "cuda"]),
                ["cpu"] => self.cmd_set(&["backend", "jit"]),
                _ => self.error("usage: :device cpu|cuda"),
            },
            ":reset" => self.cmd_reset(),
            other => {
                let names = COMMANDS.iter().map(|c| c.0);
                let hint = match crate::check::closest(other, names) {
                    Some(c) => format!("; did you mean `{c}`?"),
                    None => String::new(),
                };
                self.error(&format!(
                    "unknown command `{other}`{hint} (:help lists the commands)"
                ));
            }
        }
        let _ = self.out.flush();
        Flow::Go
    }

    fn help(&mut self) {
        let mut out = String::from(
            "Type tdsl statements (let, input, NAME = EXPR, output) to check them into the session;\n\
             each prints its type, FLOPs, bytes and FLOP/byte. A bare expression is shown, not kept.\n\
             Input continues on the next line while ( or [ is open or a line ends with an operator or `,`.\n\
             Commands:\n",
        );
        let w = COMMANDS
            .iter()
            .map(|c| c.0.len() + 1 + c.1.len())
            .max()
            .unwrap_or(0);
        for (name, args, what) in COMMANDS {
            let usage = if args.is_empty() {
                name.to_string()
            } else {
                format!("{name} {args}")
            };
            let _ = writeln!(out, "  {usage:<w$}  {what}");
        }
        out.push_str(
            ":set keys: threads N, backend jit|interp|eval|cuda, runs N (for :time); dtype f32|f64|f16|bf16\n\
             and params auto|all|NAME,NAME (for :mem and :train); tf32 on|off (f32 products on the\n\
             GPU's TF32 tensor cores, as --tf32).\n",
        );
        self.print(&out);
    }

    fn no_statements(&mut self) -> bool {
        if self.prog().assigns.is_empty() {
            self.print("no statements yet: assign something first, e.g. `y = x * 2`");
            true
        } else {
            false
        }
    }
}

/// `f32[b=2, h=4]  270,337 FLOPs  64.0 KiB  4.13 FLOP/B`
fn cost_line(c: &crate::plan::cost::StatementCost) -> String {
    let mut flops = format!("{} FLOPs", group(c.flops));
    if c.flops != c.dense_flops {
        let _ = write!(flops, " (dense {})", group(c.dense_flops));
    }
    format!(
        "{}  {flops}  {}  {:.2} FLOP/B",
        type_summary(&c.ty),
        bytes(c.bytes()),
        c.intensity()
    )
}

/// `73,728,000,000 FLOPs (73.728 GFLOP)`
fn flops_text(v: f64) -> String {
    if v < 1e30 {
        format!("{} FLOPs ({})", group(v.round() as u128), si(v, "FLOP"))
    } else {
        format!("{v:.3e} FLOPs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuation_rule() {
        assert!(incomplete("y = einsum(a,"));
        assert!(incomplete("y = einsum(a, b"));
        assert!(incomplete("y = x +"));
        assert!(incomplete("y = x \\"));
        assert!(incomplete("input x: f32["));
        assert!(incomplete("output a,"));
        assert!(incomplete("y = x *   # comment"));
        assert!(!incomplete("y = x * 2"));
        assert!(!incomplete("y = reduce(x, \"a (b -> a\", sum)"));
        assert!(!incomplete("y = x # (unbalanced in a comment"));
        assert!(!incomplete(":plan q"));
        assert!(!incomplete("y = x)"));
        assert!(!incomplete("y = einsum(a,\n b, \"i j, j k -> i k\")"));
    }
}
