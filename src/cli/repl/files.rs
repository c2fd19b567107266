//! `:load`, `:save`, `:set` and `:reset`.

use super::*;

impl Session {
    pub(super) fn cmd_load(&mut self, args: &[&str]) {
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
        let Some(id) = self.sources.add(file, &text) else {
            self.error("this session has loaded 2 GiB of text, all it can hold: start a new one");
            return;
        };
        let script = match crate::parse_at(&text, self.sources.file(id).base) {
            Ok(s) => s,
            Err(d) => {
                self.diags(&d.into());
                return;
            }
        };
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

    pub(super) fn cmd_save(&mut self, args: &[&str]) {
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

    pub(super) fn cmd_set(&mut self, args: &[&str]) {
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
                Some(e) => self.pipe = crate::cli::pipeline_with(e, self.pipe.options().tf32),
                None => return self.error("usage: :set backend jit|interp|eval|cuda"),
            },
            ["dtype", d] => match DType::parse(d) {
                Some(d) => s.dtype = d,
                None => return self.error("usage: :set dtype f32|f64|f16|bf16"),
            },
            ["tf32", on @ ("on" | "off")] => {
                self.pipe = crate::cli::pipeline_with(self.pipe.engine(), *on == "on")
            }
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
                    "usage: :set [threads N | backend jit|interp|eval|cuda | runs N | dtype D | params auto|all|A,B | tf32 on|off]",
                )
            }
        }
        let s = &self.settings;
        let params = match &s.params {
            None => "auto".to_string(),
            Some(v) => v.join(","),
        };
        let line = format!(
            "threads {}  backend {}  runs {}  dtype {}  params {}  tf32 {}",
            s.threads,
            self.pipe.engine().name(),
            s.runs,
            s.dtype,
            params,
            if self.pipe.options().tf32 {
                "on"
            } else {
                "off"
            }
        );
        self.print(&line);
    }

    pub(super) fn cmd_reset(&mut self) {
        self.checker = Checker::new(BTreeMap::new());
        self.stmts.clear();
        self.sparse.clear();
        self.last_time = None;
        self.print("session cleared (settings kept)");
    }
}
