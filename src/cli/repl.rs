//! `tdsl repl`: type statements one at a time and see each one's shape, dtype, format, FLOPs,
//! bytes and arithmetic intensity; inspect the session with `:cost`, `:plan`, `:time`, `:mem` and
//! the other commands (`:help` lists them).
//!
//! One [`Checker`] lives for the whole session. Each line is checked against a clone of it, and
//! the clone replaces it only if the line had no errors, so a failed line leaves no trace (no
//! half-declared input, no poisoned name) and an error never ends the session.
//!
//! Spans: every line is parsed on its own and its AST is then shifted into one session-wide
//! offset space. Lines typed at the prompt (or piped in) form one transcript named `<repl>`, one
//! transcript line per input line (commands included), so a diagnostic's
//! `<repl>:LINE:COL` is the input line number and labels can point at earlier lines ("first
//! defined here"). Files read with `:load` get their own region and are rendered under their
//! own name.
//!
//! With stdin a terminal, rustyline edits lines (history in `dirs::data_dir()/tdsl/history`,
//! tab completion, multi-line input through its `Validator`). Otherwise statements are read line
//! by line with the same continuation rule, output is plain text without prompts or colours, and
//! the exit status is 1 if any input failed.

use super::report::{bytes, duration, group, table};
use crate::check::{
    format_name, type_summary, Assign, Checker, Format, Init, InitKind, NodeKind, Output, Program,
    TensorRef,
};
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
use tdsl_syntax::ast::{Arg, AxisDecl, Expr, ExprKind, FormatArg, Ident, ReplLine, Stmt, StmtKind};
use tdsl_syntax::Span;

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
        "the Cranelift IR the JIT compiles (there is no CUDA backend)",
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

/// A `:load`ed file: its text lives at `base..base + text.len()` in the session's offsets.
struct Source {
    name: String,
    text: String,
    base: u32,
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
    /// Every input line so far, commands included: the `<repl>` source.
    transcript: String,
    files: Vec<Source>,
    next_file_base: u32,
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
pub fn main(color: Color) -> ExitCode {
    let interactive = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let color = if interactive { color } else { Color::Never };
    let mut s = Session::new(color);
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

fn shift_span(s: &mut Span, by: u32) {
    s.start += by;
    s.end += by;
}

fn shift_ident(i: &mut Ident, by: u32) {
    shift_span(&mut i.span, by);
}

fn shift_args(args: &mut [Arg], by: u32) {
    for a in args {
        match a {
            Arg::Positional(e) => shift_expr(e, by),
            Arg::Keyword { name, value } => {
                shift_ident(name, by);
                shift_expr(value, by);
            }
        }
    }
}

fn shift_expr(e: &mut Expr, by: u32) {
    shift_span(&mut e.span, by);
    match &mut e.kind {
        ExprKind::Number { .. } | ExprKind::Str { .. } => {}
        ExprKind::Name(i) => shift_ident(i, by),
        ExprKind::Neg(x) => shift_expr(x, by),
        ExprKind::Binary { lhs, rhs, .. } => {
            shift_expr(lhs, by);
            shift_expr(rhs, by);
        }
        ExprKind::Call { func, args } => {
            shift_ident(func, by);
            shift_args(args, by);
        }
    }
}

fn shift_stmt(s: &mut Stmt, by: u32) {
    shift_span(&mut s.span, by);
    match &mut s.kind {
        StmtKind::Let { name, value } => {
            shift_ident(name, by);
            shift_span(&mut value.span, by);
        }
        StmtKind::Input(d) => {
            shift_ident(&mut d.name, by);
            shift_ident(&mut d.dtype, by);
            for a in &mut d.axes {
                match a {
                    AxisDecl::Named(i) => shift_ident(i, by),
                    AxisDecl::Fixed(n) => shift_span(&mut n.span, by),
                    AxisDecl::Sized(i, n) => {
                        shift_ident(i, by);
                        shift_span(&mut n.span, by);
                    }
                }
            }
            if let Some(f) = &mut d.format {
                shift_ident(&mut f.name, by);
                shift_span(&mut f.span, by);
                for a in &mut f.args {
                    match a {
                        FormatArg::Int(n) => shift_span(&mut n.span, by),
                        FormatArg::Name(i) => shift_ident(i, by),
                    }
                }
            }
            if let Some(init) = &mut d.init {
                shift_ident(&mut init.func, by);
                shift_span(&mut init.span, by);
                shift_args(&mut init.args, by);
            }
        }
        StmtKind::Assign { name, value } => {
            shift_ident(name, by);
            shift_expr(value, by);
        }
        StmtKind::Output { names } => {
            for n in names {
                shift_ident(n, by);
            }
        }
    }
}

fn shift_diag(mut d: Diagnostic, by: u32) -> Diagnostic {
    for l in &mut d.labels {
        shift_span(&mut l.span, by);
    }
    d
}

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
        Session {
            checker: Checker::new(BTreeMap::new()),
            stmts: Vec::new(),
            transcript: String::new(),
            files: Vec::new(),
            next_file_base: FILE_BASE,
            sparse: BTreeMap::new(),
            last_time: None,
            settings: Settings {
                threads: rayon::current_num_threads().max(1),
                runs: 10,
                dtype: DType::F32,
                params: None,
            },
            machine: None,
            pipe: super::pipeline(Engine::Jit),
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
        let m = super::bench::machine_ceilings();
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
        let Some(primary) = d.span() else {
            return render::render(d, "<repl>", "", self.color);
        };
        let (name, text, base) = self.source_of(primary.start).unwrap_or(("<repl>", "", 0));
        let end = base as u64 + text.len() as u64;
        let mut local = d.clone();
        let inside = |s: Span| s.start >= base && (s.end as u64) <= end;
        // Labels in another source (a `:load`ed file, or the transcript) become a note.
        let elsewhere: Vec<String> = d
            .labels
            .iter()
            .filter(|l| !inside(l.span))
            .filter_map(|l| {
                let (name, text, b) = self.source_of(l.span.start)?;
                let (line, col) = tdsl_syntax::line_col(text, (l.span.start - b) as usize);
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
            l.span.start -= base;
            l.span.end -= base;
        }
        render::render(&local, name, text, self.color)
    }

    /// The source (name, text, base offset) that session offset `at` falls in.
    fn source_of(&self, at: u32) -> Option<(&str, &str, u32)> {
        if at < FILE_BASE {
            return Some(("<repl>", &self.transcript, 0));
        }
        self.files
            .iter()
            .rev()
            .find(|f| f.base <= at)
            .map(|f| (f.name.as_str(), f.text.as_str(), f.base))
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
        let base = self.transcript.len() as u32;
        self.transcript.push_str(text);
        self.transcript.push('\n');
        if self.transcript.len() as u64 >= FILE_BASE as u64 {
            self.error("the session's transcript is too long: :save it, :reset and :load it");
            return;
        }
        match tdsl_syntax::parse_repl_line(text) {
            Ok(ReplLine::Empty) => {}
            Ok(ReplLine::Stmt(mut s)) => {
                shift_stmt(&mut s, base);
                self.stmt(s, true);
            }
            Ok(ReplLine::Expr(mut e)) => {
                shift_expr(&mut e, base);
                self.bare_expr(&e);
            }
            Err(e) => {
                // Several statements on one line (`a = x; b = a`) parse as a script.
                match tdsl_syntax::parse_script(text) {
                    Ok(script) if script.stmts.len() > 1 => {
                        for mut s in script.stmts {
                            shift_stmt(&mut s, base);
                            self.stmt(s, true);
                        }
                    }
                    _ => {
                        let d = shift_diag(crate::syntax_diagnostic(e), base);
                        self.diags(&d.into());
                    }
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
                        for a in super::report::auto_lines(&p) {
                            if a.starts_with(&format!("auto: {} →", name.name)) {
                                let _ = write!(line, "\n  {a}");
                            }
                        }
                        for op in &c.sparse_ops {
                            let _ = write!(line, "\n  {}", super::report::sparse_op_line(op));
                        }
                        line
                    }
                    _ => name.name.clone(),
                }
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
            let _ = write!(line, " = {}", super::report::init_name(init));
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
                let _ = write!(line, "\n  {}", super::report::sparse_op_line(op));
            }
            self.print(&line);
        }
    }

    // --------------------------------------------------------------------------------------
    // Commands

    fn command(&mut self, line: &str) -> Flow {
        // The transcript keeps the line so later line numbers stay the input's.
        self.transcript.push_str(line.lines().next().unwrap_or(""));
        self.transcript.push('\n');
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
            ":set keys: threads N, backend jit|interp, runs N (for :time); dtype f32|f64|f16|bf16 and\n\
             params auto|all|NAME,NAME (for :mem and :train).\n",
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

    fn cmd_cost(&mut self) {
        if self.no_statements() {
            return;
        }
        let p = self.prog().clone();
        let (p, cost) = self.cost_of(&p);
        let text = super::report::cost_report(&p, &cost);
        self.print(&text);
    }

    fn cmd_vars(&mut self) {
        let p = self.prog().clone();
        let p = self.resolved(&p);
        let mut text = super::report::check_report(&p);
        for line in super::report::auto_lines(&p) {
            let _ = writeln!(text, "{line}");
        }
        let axes: Vec<String> = self
            .checker
            .axis_extents()
            .map(|(n, e)| format!("{n}={e}"))
            .collect();
        if !axes.is_empty() {
            let _ = writeln!(text, "axes: {}", axes.join(", "));
        }
        self.print(&text);
    }

    /// The session's program planned, with a note when outputs had to be assumed.
    fn plan(&mut self) -> Option<(Program, crate::plan::lower::Plan, Vec<String>)> {
        if self.no_statements() {
            return None;
        }
        let p = self.prog().clone();
        let p = self.resolved(&p);
        let (p, added) = runnable(&p);
        match self.pipe.plan(&p) {
            Ok(plan) => Some((p, plan, added)),
            Err(d) => {
                self.diags(&d.into());
                None
            }
        }
    }

    fn assumed_outputs_note(added: &[String]) -> String {
        if added.is_empty() {
            String::new()
        } else {
            format!(
                "(no `output` yet: planned with outputs {}, the statements nothing reads)\n",
                added.join(", ")
            )
        }
    }

    /// Kernels of `plan` matching `name` (all without one), or a message why there are none.
    fn select_kernels(
        &self,
        plan: &crate::plan::lower::Plan,
        name: Option<&str>,
    ) -> Result<Vec<usize>, String> {
        let ks = &plan.loops.kernels;
        let Some(name) = name else {
            return Ok((0..ks.len()).collect());
        };
        let sel: Vec<usize> = (0..ks.len())
            .filter(|&k| kernel_statement(self.prog(), &ks[k]) == name)
            .collect();
        let sel = if sel.is_empty() {
            (0..ks.len())
                .filter(|&k| ks[k].origin.starts_with(name))
                .collect()
        } else {
            sel
        };
        if !sel.is_empty() {
            return Ok(sel);
        }
        let known = self.prog().assigns.iter().any(|a| a.name == name)
            || self.prog().inputs.iter().any(|i| i.name == name);
        let list: Vec<String> = ks
            .iter()
            .map(|k| format!("{} ({})", k.name, k.origin))
            .collect();
        let why = if known {
            format!("`{name}` has no kernel of its own: it is fused into the kernels that read it")
        } else {
            format!("no statement or kernel is called `{name}`")
        };
        Err(format!("{why}; kernels: {}", list.join(", ")))
    }

    fn cmd_plan(&mut self, name: Option<&str>) {
        let Some((_, plan, added)) = self.plan() else {
            return;
        };
        let mut text = Self::assumed_outputs_note(&added);
        match name {
            None => text.push_str(&tdsl_loop::print::print_program(&plan.loops)),
            Some(_) => match self.select_kernels(&plan, name) {
                Ok(sel) => {
                    for k in sel {
                        text.push_str(&tdsl_loop::print::print_kernel(
                            &plan.loops,
                            &plan.loops.kernels[k],
                        ));
                    }
                }
                Err(msg) => {
                    self.print(&text);
                    self.print(&msg);
                    return;
                }
            },
        }
        self.print(&text);
    }

    fn cmd_emit(&mut self, args: &[&str]) {
        match args.first().copied() {
            Some("clif") => {}
            Some("cuda") | Some("ptx") => {
                self.print(
                    "there is no CUDA backend in this build, so there is no CUDA to show; \
                     `:emit clif [NAME]` prints the Cranelift IR the CPU JIT compiles",
                );
                return;
            }
            _ => {
                self.error("usage: :emit clif [NAME]  (the Cranelift IR of the session's kernels)");
                return;
            }
        }
        let Some((_, plan, added)) = self.plan() else {
            return;
        };
        let sel = match self.select_kernels(&plan, args.get(1).copied()) {
            Ok(s) => s,
            Err(msg) => {
                self.print(&msg);
                return;
            }
        };
        let mut text = Self::assumed_outputs_note(&added);
        for k in sel {
            let kern = &plan.loops.kernels[k];
            let _ = writeln!(text, "; kernel {} ({})", kern.name, kern.origin);
            match crate::runtime::emit(Engine::Jit, &plan, k) {
                Ok(clif) => {
                    text.push_str(&clif);
                    if !clif.ends_with('\n') {
                        text.push('\n');
                    }
                }
                Err(d) => {
                    self.print(&text);
                    self.diags(&d.into());
                    return;
                }
            }
        }
        self.print(&text);
    }

    /// Input tensors for running `p`: generated sparse data, initialisers, and random normal
    /// values (seed = the input's position) for inputs without one.
    fn run_inputs(&self, p: &Program) -> Result<Vec<Tensor>, Diagnostics> {
        let mut q = p.clone();
        for (i, inp) in q.inputs.iter_mut().enumerate() {
            if inp.init.is_none() {
                inp.init = Some(Init {
                    kind: InitKind::Randn { seed: i as u64 },
                    density: None,
                    span: inp.span,
                });
            }
        }
        let provided = self
            .sparse
            .iter()
            .map(|(k, t)| {
                (
                    k.clone(),
                    crate::bind::Provided {
                        tensor: t.clone().into(),
                        source: "its initialiser".into(),
                    },
                )
            })
            .collect();
        crate::bind::bind_inputs(&q, provided)
    }

    fn cmd_time(&mut self, name: Option<&str>) {
        if self.no_statements() {
            return;
        }
        let p = self.prog().clone();
        let p = self.resolved(&p);
        let (p, added) = runnable(&p);
        // Refuse what would not fit, before generating any input (the pipeline's check; the
        // plan's buffers are checked again when it compiles).
        if let Err(d) = self.pipe.check_memory(&p, MemoryUse::Run) {
            self.diags(&d.into());
            return;
        }
        let inputs = match self.run_inputs(&p) {
            Ok(t) => t,
            Err(d) => {
                self.diags(&d);
                return;
            }
        };
        let machine = self.machine();
        if self.pipe.engine() == Engine::Interp {
            return self.time_interp(&p, &inputs, &machine);
        }
        match self.pipe.compile(p) {
            Ok(c) => self.time_plan(&c, &inputs, name, &added, &machine),
            Err(d) => self.diags(&d.into()),
        }
    }

    /// Runs `f` once to warm up, then up to `runs` times (at least 3, stopping after ~2 s).
    fn timed_runs<E>(
        &self,
        mut f: impl FnMut() -> Result<Vec<Duration>, E>,
    ) -> Result<(Vec<Duration>, Vec<Vec<Duration>>), E> {
        f()?;
        let mut totals = Vec::new();
        let mut per: Vec<Vec<Duration>> = Vec::new();
        let start = Instant::now();
        for i in 0..self.settings.runs.max(1) {
            let t = Instant::now();
            let ks = f()?;
            totals.push(t.elapsed());
            for (k, d) in ks.into_iter().enumerate() {
                if per.len() <= k {
                    per.resize(k + 1, Vec::new());
                }
                per[k].push(d);
            }
            if i >= 2 && start.elapsed() > Duration::from_secs(2) {
                break;
            }
        }
        Ok((totals, per))
    }

    fn time_plan(
        &mut self,
        compiled: &crate::session::Compiled,
        inputs: &[Tensor],
        name: Option<&str>,
        added: &[String],
        m: &Machine,
    ) {
        let (Some(plan), Some(exe)) = (compiled.plan(), compiled.executable()) else {
            return;
        };
        let sel = match self.select_kernels(plan, name) {
            Ok(s) => s,
            Err(msg) => {
                self.print(&msg);
                return;
            }
        };
        let (n_compiled, compile) = (compiled.n_compiled(), compiled.compile_time());
        let mut bufs = match crate::runtime::buffers(plan, inputs) {
            Ok(b) => b,
            Err(d) => {
                self.diags(&d.into());
                return;
            }
        };
        let threads = self.settings.threads;
        let result = self.timed_runs(|| {
            exe.run(&mut bufs, &tdsl_loop::RunOptions { threads })
                .map(|s| s.kernel_times)
                .map_err(|e| crate::runtime::backend_diagnostic(e, plan))
        });
        let (mut totals, mut per) = match result {
            Ok(x) => x,
            Err(d) => {
                self.diags(&d.into());
                return;
            }
        };
        let median = |v: &mut Vec<Duration>| -> Duration {
            v.sort();
            v.get(v.len() / 2).copied().unwrap_or_default()
        };
        let total = median(&mut totals);
        let ridge = m.peak_gflops / m.bandwidth_gbps;
        let mut out = Self::assumed_outputs_note(added);
        let _ = writeln!(out, "machine: {}", m.describe());
        let _ = writeln!(
            out,
            "{}: {} kernels ({} compiled in {}); median of {} runs on {} threads: {} in all",
            self.pipe.engine().describe(),
            plan.loops.kernels.len(),
            n_compiled,
            duration(compile),
            totals.len(),
            threads,
            duration(total)
        );
        let _ = writeln!(
            out,
            "ridge point: {ridge:.2} FLOP/B (peak / bandwidth); below it a kernel is memory-bound, above it compute-bound"
        );
        let mut rows = vec![[
            "kernel", "origin", "time", "GFLOP/s", "% peak", "GB/s", "% bw", "FLOP/B", "bound",
        ]
        .map(String::from)
        .to_vec()];
        let mut timing = Timing::default();
        let (mut sum_t, mut sum_f, mut sum_b) = (0f64, 0u128, 0u128);
        for (k, kern) in plan.loops.kernels.iter().enumerate() {
            let d = per.get_mut(k).map(&median).unwrap_or_default();
            let secs = d.as_secs_f64();
            *timing
                .statements
                .entry(kernel_statement(self.prog(), kern).to_string())
                .or_default() += secs;
            if !sel.contains(&k) {
                continue;
            }
            let s = tdsl_loop::stats::kernel_stats_bound(&plan.loops, kern, &bufs);
            sum_t += secs;
            sum_f += s.flops;
            sum_b += s.bytes();
            rows.push(perf_row(&kern.name, &kern.origin, d, s.flops, s.bytes(), m));
        }
        let label = if name.is_some() { "selected" } else { "total" };
        let t_all = if name.is_some() {
            Duration::from_secs_f64(sum_t)
        } else {
            total
        };
        rows.push(perf_row(label, "", t_all, sum_f, sum_b, m));
        out.push_str(&table(
            &rows,
            &[false, false, true, true, true, true, true, true, false],
        ));
        // The roofline matches these by statement name; `:reset` forgets them.
        self.last_time = Some(timing);
        self.print(&out);
    }

    fn time_interp(&mut self, p: &Program, inputs: &[Tensor], m: &Machine) {
        let result: Result<_, ()> = self.timed_runs(|| {
            let _ = crate::interp::run_all(p, inputs);
            Ok(Vec::new())
        });
        let Ok((mut totals, _)) = result else {
            return;
        };
        totals.sort();
        let med = totals[totals.len() / 2];
        let cost = program_cost(p, &self.stored(p));
        let mut out = String::new();
        let _ = writeln!(out, "machine: {}", m.describe());
        let _ = writeln!(
            out,
            "reference interpreter: median of {} runs: {} (one time for the whole program; :set backend jit times each kernel)",
            totals.len(),
            duration(med)
        );
        let rows = vec![
            [
                "", "", "time", "GFLOP/s", "% peak", "GB/s", "% bw", "FLOP/B", "bound",
            ]
            .map(String::from)
            .to_vec(),
            perf_row("total", "", med, cost.total_flops(), cost.total_bytes(), m),
        ];
        out.push_str(&table(
            &rows,
            &[false, false, true, true, true, true, true, true, false],
        ));
        self.print(&out);
    }

    /// Parameters: inputs named by `:set params`, or every input without a data-like axis.
    /// A sparse parameter counts its stored values (its pattern is fixed; only those train).
    fn params(&self) -> (u128, Vec<String>, Vec<String>) {
        let mut count = 0u128;
        let (mut params, mut data) = (Vec::new(), Vec::new());
        let stored = self.stored(self.prog());
        for (k, i) in self.prog().inputs.iter().enumerate() {
            let is_param = match &self.settings.params {
                Some(names) => names.iter().any(|n| n == &i.name || n == "all"),
                None => !is_data(&i.ty),
            };
            if is_param {
                count += stored[k].values as u128;
                params.push(i.name.clone());
            } else {
                data.push(i.name.clone());
            }
        }
        (count, params, data)
    }

    fn params_line(&self) -> String {
        let (n, params, data) = self.params();
        let how = match &self.settings.params {
            Some(_) => "chosen with :set params".to_string(),
            None if data.is_empty() => "every input".to_string(),
            None => format!(
                "inputs without a batch/token/sequence axis; data: {}",
                data.join(", ")
            ),
        };
        if params.is_empty() {
            format!("parameters: 0 ({how})")
        } else {
            format!("parameters: {} in {} ({how})", group(n), params.join(", "))
        }
    }

    fn cmd_mem(&mut self) {
        let p = self.prog().clone();
        let st = self.stored(&p);
        // dtype → (inputs bytes, assignments bytes, tensors).
        let mut by: BTreeMap<DType, (u128, u128, usize)> = BTreeMap::new();
        for (i, inp) in p.inputs.iter().enumerate() {
            let e = by.entry(inp.ty.dtype).or_default();
            e.0 += st[i].bytes as u128;
            e.2 += 1;
        }
        for a in &p.assigns {
            let ty = &p.node(a.node).ty;
            let e = by.entry(ty.dtype).or_default();
            e.1 += ty.shape.n_elems().unwrap_or(u64::MAX) as u128 * ty.dtype.size_bytes() as u128;
            e.2 += 1;
        }
        let mut rows = vec![["dtype", "tensors", "inputs", "statements", "total"]
            .map(String::from)
            .to_vec()];
        let (mut ti, mut ta, mut tn) = (0u128, 0u128, 0usize);
        for (d, (i, a, n)) in &by {
            rows.push(vec![
                d.to_string(),
                n.to_string(),
                bytes(*i),
                bytes(*a),
                bytes(i + a),
            ]);
            ti += i;
            ta += a;
            tn += n;
        }
        rows.push(vec![
            "total".into(),
            tn.to_string(),
            bytes(ti),
            bytes(ta),
            bytes(ti + ta),
        ]);
        let mut out = String::from(
            "tensors of the session (sparse inputs count stored values and indices; statements \
             their dense result):\n",
        );
        out.push_str(&table(&rows, &[false, true, true, true, true]));
        let (n, _, _) = self.params();
        let _ = writeln!(out, "{}", self.params_line());
        let d = self.settings.dtype;
        let sz = d.size_bytes() as u128;
        let _ = writeln!(
            out,
            "training state in {d} ({sz} B each; :set dtype to change), with Adam's two moments:"
        );
        let rows = vec![
            vec!["parameters".into(), bytes(n * sz)],
            vec!["gradients".into(), bytes(n * sz)],
            vec!["optimiser state (Adam m, v)".into(), bytes(2 * n * sz)],
            vec![
                format!("total ({} B per parameter)", 4 * sz),
                bytes(4 * n * sz),
            ],
        ];
        for line in table(&rows, &[false, true]).lines() {
            let _ = writeln!(out, "  {line}");
        }
        let others: Vec<String> = [DType::F32, DType::BF16, DType::F16, DType::F64]
            .iter()
            .filter(|&&o| o != d)
            .map(|o| format!("{o} {}", bytes(4 * n * o.size_bytes() as u128)))
            .collect();
        let _ = writeln!(out, "  the same in {}", others.join(", "));
        self.print(&out);
    }

    fn cmd_train(&mut self, args: &[&str]) {
        let usage = "usage: :train TOKENS [TIME_S] [PEAK_GFLOPS]";
        let parse = |s: &str| -> Option<f64> {
            s.replace(['_', ','], "")
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v > 0.0)
        };
        let Some(tokens) = args.first().and_then(|s| parse(s)) else {
            self.error(usage);
            return;
        };
        let time = match args.get(1) {
            Some(s) => match parse(s) {
                Some(t) => Some(t),
                None => {
                    self.error(usage);
                    return;
                }
            },
            None => None,
        };
        let peak_arg = match args.get(2) {
            Some(s) => match parse(s) {
                Some(t) => Some(t),
                None => {
                    self.error(usage);
                    return;
                }
            },
            None => None,
        };
        if args.len() > 3 {
            self.error(usage);
            return;
        }
        let (n, _, _) = self.params();
        let p = n as f64;
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.params_line());
        let _ = writeln!(out, "tokens: {}", group(tokens.round() as u128));
        let rows = vec![
            vec![
                "forward".into(),
                "2·P·T".into(),
                flops_text(2.0 * p * tokens),
            ],
            vec![
                "backward".into(),
                "4·P·T".into(),
                flops_text(4.0 * p * tokens),
            ],
            vec!["total".into(), "6·P·T".into(), flops_text(6.0 * p * tokens)],
        ];
        out.push_str(&table(&rows, &[false, false, true]));
        let total = 6.0 * p * tokens;
        let (peak, source) = match peak_arg {
            Some(g) => (g, "given".to_string()),
            None => {
                let m = self.machine();
                (m.peak_gflops, "measured on this machine".to_string())
            }
        };
        match time {
            Some(t) => {
                let achieved = total / t / 1e9;
                let _ = writeln!(out, "in {} s: {} achieved", g6(t), si(total / t, "FLOP/s"));
                let _ = writeln!(
                    out,
                    "MFU: {:.2}% of {:.1} GFLOP/s peak ({source})",
                    100.0 * achieved / peak,
                    peak
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "at 100% MFU: {} on {:.1} GFLOP/s peak ({source})",
                    duration(Duration::from_secs_f64((total / (peak * 1e9)).min(1e15))),
                    peak
                );
            }
        }
        self.print(&out);
    }

    fn cmd_plot(&mut self, args: &[&str]) {
        let [file] = args else {
            self.error("usage: :plot FILE.svg");
            return;
        };
        if self.no_statements() {
            return;
        }
        let cost = self.cost();
        let measured: Vec<Option<f64>> = cost
            .statements
            .iter()
            .map(|s| {
                self.last_time
                    .as_ref()
                    .and_then(|t| t.statements.get(&s.name).copied())
                    .filter(|t| *t > 0.0)
            })
            .collect();
        let machine = self.machine();
        let p = self.prog().clone();
        match super::plot::roofline(Path::new(file), &p, &cost, &machine, &measured) {
            Ok(()) => {
                let n = measured.iter().filter(|m| m.is_some()).count();
                let how = if n == 0 {
                    "every point predicted; run :time to measure".to_string()
                } else {
                    format!("{n} measured by the last :time, the rest predicted")
                };
                self.print(&format!(
                    "wrote roofline of {} statements to {file} ({how})",
                    cost.statements.len()
                ));
            }
            Err(d) => self.diags(&d.into()),
        }
    }

    fn cmd_sparsity(&mut self, args: &[&str]) {
        let [name, file] = args else {
            self.error("usage: :sparsity NAME FILE.svg");
            return;
        };
        let p = self.prog().clone();
        let Some(pos) = p.inputs.iter().position(|i| i.name == *name) else {
            let sparse: Vec<&str> = p
                .inputs
                .iter()
                .filter(|i| i.ty.format.is_sparse())
                .map(|i| i.name.as_str())
                .collect();
            self.error(&format!(
                "`{name}` is not an input; sparse inputs: {}",
                if sparse.is_empty() {
                    "(none)".to_string()
                } else {
                    sparse.join(", ")
                }
            ));
            return;
        };
        let inp = &p.inputs[pos];
        if inp.ty.format == Format::Dense {
            self.error(&format!(
                "`{name}` is dense: :sparsity draws inputs annotated coo, csr, csc, bsr or 2:4"
            ));
            return;
        }
        if inp.ty.shape.n_elems().is_none_or(|n| n > SPARSE_GEN_LIMIT) {
            self.error(&format!("`{name}` is too large to draw"));
            return;
        }
        let tensor = match self.sparse.get(*name) {
            Some(t) => t.clone(),
            None => {
                let init = inp.init.unwrap_or(Init {
                    kind: InitKind::Randn { seed: pos as u64 },
                    density: None,
                    span: inp.span,
                });
                crate::init::generate(&init, &inp.ty)
            }
        };
        let mut title = format!("{name}: {}", type_summary(&inp.ty));
        match &inp.init {
            Some(init) => {
                let _ = write!(title, " = {}", super::report::init_name(init));
            }
            None => title.push_str(" (no initialiser: random values)"),
        }
        match super::plot::sparsity(Path::new(file), &tensor, inp.ty.format, &title) {
            Ok(()) => {
                let nnz = tensor.to_f64().iter().filter(|v| **v != 0.0).count();
                self.print(&format!(
                    "wrote the {} pattern of `{name}` ({} of {} nonzero) to {file}",
                    format_name(inp.ty.format, &inp.ty.shape),
                    group(nnz as u128),
                    group(tensor.len() as u128)
                ));
            }
            Err(d) => self.diags(&d.into()),
        }
    }

    fn cmd_load(&mut self, args: &[&str]) {
        let [file] = args else {
            self.error("usage: :load FILE.tdsl");
            return;
        };
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                let d = Diagnostic::new(Code::FileRead, format!("cannot read {file}: {e}"))
                    .help("check the path; it is relative to the directory tdsl was started in");
                self.diags(&d.into());
                return;
            }
        };
        let base = self.next_file_base;
        if (base as u64) + text.len() as u64 + 1 > u32::MAX as u64 {
            self.error("too much text has been loaded in this session: :reset first");
            return;
        }
        self.next_file_base = base + text.len() as u32 + 1;
        self.files.push(Source {
            name: file.to_string(),
            text: text.clone(),
            base,
        });
        let mut script = match crate::parse(&text) {
            Ok(s) => s,
            Err(d) => {
                self.diags(&shift_diag(d, base).into());
                return;
            }
        };
        for s in &mut script.stmts {
            shift_stmt(s, base);
        }
        // Extents first, for the whole file, as for a script: declaration order does not matter.
        let before = self.checker.clone();
        self.checker.collect_extents(&script.stmts);
        let d = self.checker.take_diagnostics();
        if !d.is_empty() {
            self.checker = before;
            self.diags(&d);
            return;
        }
        let n = script.stmts.len();
        let mut failed = 0;
        for s in script.stmts {
            if !self.stmt(s, false) {
                failed += 1;
            }
        }
        let msg = if failed == 0 {
            format!("loaded {n} statements from {file}")
        } else {
            format!(
                "loaded {} of {n} statements from {file} ({failed} failed)",
                n - failed
            )
        };
        self.print(&msg);
    }

    fn cmd_save(&mut self, args: &[&str]) {
        let [file] = args else {
            self.error("usage: :save FILE.tdsl");
            return;
        };
        let mut text = String::from("# saved by `tdsl repl`\n");
        for s in &self.stmts {
            text.push_str(&tdsl_syntax::pretty::stmt(s));
            text.push('\n');
        }
        match std::fs::write(file, &text) {
            Ok(()) => {
                let msg = format!("saved {} statements to {file}", self.stmts.len());
                self.print(&msg);
            }
            Err(e) => {
                let d = Diagnostic::new(Code::FileWrite, format!("cannot write {file}: {e}"))
                    .help("check that the directory exists and is writable");
                self.diags(&d.into());
            }
        }
    }

    fn cmd_set(&mut self, args: &[&str]) {
        let s = &mut self.settings;
        match args {
            [] => {}
            ["threads", n] => match n.parse::<usize>() {
                Ok(n) if n >= 1 => s.threads = n,
                _ => return self.error("usage: :set threads N (N >= 1)"),
            },
            ["runs", n] => match n.parse::<usize>() {
                Ok(n) if n >= 1 => s.runs = n,
                _ => return self.error("usage: :set runs N (N >= 1)"),
            },
            ["backend", name] => match Engine::from_name(name) {
                // `:time` runs the session's pipeline, so the engine is the pipeline's.
                Some(e) => self.pipe = super::pipeline(e),
                None => return self.error("usage: :set backend jit|interp|eval|cuda"),
            },
            ["dtype", d] => match DType::parse(d) {
                Some(d) => s.dtype = d,
                None => return self.error("usage: :set dtype f32|f64|f16|bf16"),
            },
            ["params", "auto"] => s.params = None,
            ["params", list] => {
                s.params = Some(
                    list.split(',')
                        .map(str::trim)
                        .filter(|n| !n.is_empty())
                        .map(String::from)
                        .collect(),
                )
            }
            _ => {
                return self.error(
                    "usage: :set [threads N | backend jit|interp|eval|cuda | runs N | dtype D | params auto|all|A,B]",
                )
            }
        }
        let s = &self.settings;
        let params = match &s.params {
            None => "auto".to_string(),
            Some(v) => v.join(","),
        };
        let line = format!(
            "threads {}  backend {}  runs {}  dtype {}  params {}",
            s.threads,
            self.pipe.engine().name(),
            s.runs,
            s.dtype,
            params
        );
        self.print(&line);
    }

    fn cmd_reset(&mut self) {
        self.checker = Checker::new(BTreeMap::new());
        self.stmts.clear();
        self.sparse.clear();
        self.last_time = None;
        self.print("session cleared (settings kept)");
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

/// Up to 6 significant digits, no trailing zeros.
fn g6(x: f64) -> String {
    let s = format!("{x:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.len() > 12 {
        format!("{x:.4e}")
    } else {
        s.to_string()
    }
}

/// One row of `:time`: time, rates, fractions of the machine and which ceiling binds.
fn perf_row(
    name: &str,
    origin: &str,
    d: Duration,
    flops: u128,
    bytes_moved: u128,
    m: &Machine,
) -> Vec<String> {
    let secs = d.as_secs_f64().max(1e-12);
    let gflops = flops as f64 / secs / 1e9;
    let gbps = bytes_moved as f64 / secs / 1e9;
    let intensity = if bytes_moved == 0 {
        0.0
    } else {
        flops as f64 / bytes_moved as f64
    };
    let ridge = m.peak_gflops / m.bandwidth_gbps;
    let bound = if intensity >= ridge {
        "compute"
    } else {
        "memory"
    };
    vec![
        name.to_string(),
        origin.to_string(),
        duration(d),
        format!("{gflops:.2}"),
        format!("{:.1}%", 100.0 * gflops / m.peak_gflops),
        format!("{gbps:.2}"),
        format!("{:.1}%", 100.0 * gbps / m.bandwidth_gbps),
        format!("{intensity:.2}"),
        bound.to_string(),
    ]
}

// ------------------------------------------------------------------------------------------
// Line editing

/// Completion, and the multi-line rule, for rustyline.
struct ReplHelper {
    /// Functions (completed with `(`).
    functions: Vec<String>,
    /// Tensors, sizes, axis names, keywords, dtypes, formats, initialisers, reduce ops.
    words: Vec<String>,
    /// Statement names (for `:plan`, `:time`, `:emit`).
    statements: Vec<String>,
    /// Sparse inputs (for `:sparsity`).
    sparse: Vec<String>,
    files: FilenameCompleter,
}

impl ReplHelper {
    fn new(s: &Session) -> ReplHelper {
        let p = s.prog();
        let mut functions: Vec<String> = crate::check::UnaryFn::ALL
            .iter()
            .filter(|f| **f != crate::check::UnaryFn::Neg)
            .map(|f| f.name().to_string())
            .collect();
        functions.extend(
            [
                "max",
                "min",
                "pow",
                "cast",
                "rearrange",
                "reduce",
                "repeat",
                "einsum",
                "randn",
                "rand",
            ]
            .map(String::from),
        );
        let mut words: Vec<String> = [
            "let", "input", "output", "f32", "f64", "f16", "bf16", "csr", "csc", "coo", "bsr",
            "zeros", "ones", "arange", "sum", "mean", "prod", "seed", "density",
        ]
        .map(String::from)
        .to_vec();
        words.extend(p.inputs.iter().map(|i| i.name.clone()));
        words.extend(p.assigns.iter().map(|a| a.name.clone()));
        words.extend(p.sizes.iter().map(|z| z.name.clone()));
        words.extend(s.checker.axis_extents().map(|(n, _)| n.to_string()));
        for n in &p.nodes {
            for a in &n.ty.shape.0 {
                if let Some(name) = &a.name {
                    words.push(name.clone());
                }
            }
        }
        words.sort();
        words.dedup();
        functions.sort();
        ReplHelper {
            functions,
            words,
            statements: p.assigns.iter().map(|a| a.name.clone()).collect(),
            sparse: p
                .inputs
                .iter()
                .filter(|i| i.ty.format.is_sparse())
                .map(|i| i.name.clone())
                .collect(),
            files: FilenameCompleter::new(),
        }
    }

    fn pairs<'a>(words: impl Iterator<Item = &'a String>, prefix: &str, suffix: &str) -> Vec<Pair> {
        words
            .filter(|w| w.starts_with(prefix))
            .map(|w| Pair {
                display: w.clone(),
                replacement: format!("{w}{suffix}"),
            })
            .collect()
    }
}

impl Completer for ReplHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = &line[..pos];
        let word_start = before
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let word = &before[word_start..];
        let trimmed = before.trim_start();
        if let Some(cmd_text) = trimmed.strip_prefix(':') {
            let lead = before.len() - trimmed.len();
            let parts: Vec<&str> = trimmed.split_whitespace().collect();
            let at_new_word = before.ends_with(char::is_whitespace);
            if parts.len() <= 1 && !at_new_word {
                let cmds: Vec<String> = COMMANDS.iter().map(|c| c.0.to_string()).collect();
                let prefix = format!(":{cmd_text}");
                return Ok((lead, Self::pairs(cmds.iter(), &prefix, " ")));
            }
            // Which argument is being typed (0 = the first after the command).
            let arg = if at_new_word {
                parts.len() - 1
            } else {
                parts.len() - 2
            };
            let strs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
            let cands: Vec<String> = match (parts[0], arg) {
                (":load" | ":save" | ":plot", _) | (":sparsity", 1) => {
                    return self.files.complete(line, pos, ctx)
                }
                (":sparsity", 0) => self.sparse.clone(),
                (":plan" | ":time", 0) | (":emit", 1) => self.statements.clone(),
                (":emit", 0) => strs(&["clif", "cuda"]),
                (":set", 0) => strs(&["threads", "backend", "runs", "dtype", "params"]),
                (":set", 1) => match parts.get(1).copied() {
                    Some("backend") => strs(&["jit", "interp"]),
                    Some("dtype") => strs(&["f32", "f64", "f16", "bf16"]),
                    Some("params") => {
                        let mut v = strs(&["auto", "all"]);
                        v.extend(self.words.iter().cloned());
                        v
                    }
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            };
            return Ok((word_start, Self::pairs(cands.iter(), word, " ")));
        }
        let mut out = Self::pairs(self.functions.iter(), word, "(");
        out.extend(Self::pairs(self.words.iter(), word, ""));
        out.sort_by(|a, b| a.display.cmp(&b.display));
        out.dedup_by(|a, b| a.display == b.display);
        Ok((word_start, out))
    }
}

impl Hinter for ReplHelper {
    type Hint = String;
}

impl Highlighter for ReplHelper {}

impl Validator for ReplHelper {
    fn validate(&self, ctx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        Ok(if incomplete(ctx.input()) {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}

impl Helper for ReplHelper {}

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

    #[test]
    fn shifted_spans_point_into_the_transcript() {
        let mut s = match tdsl_syntax::parse_repl_line("y = einsum(a, b, \"i, i ->\")") {
            Ok(ReplLine::Stmt(s)) => s,
            other => panic!("{other:?}"),
        };
        shift_stmt(&mut s, 10);
        assert_eq!(s.span.start, 10);
        let StmtKind::Assign { value, .. } = &s.kind else {
            panic!()
        };
        let ExprKind::Call { func, .. } = &value.kind else {
            panic!()
        };
        assert_eq!(func.span, Span::new(14, 20));
    }
}
