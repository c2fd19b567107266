//! `:cost`, `:vars`, `:plan` and `:emit`: what the session computes and the code it becomes.

use super::*;

impl Session {
    pub(super) fn cmd_cost(&mut self) {
        if self.no_statements() {
            return;
        }
        let p = self.prog().clone();
        let (p, cost) = self.cost_of(&p);
        let text = crate::cli::report::cost_report(&p, &cost);
        self.print(&text);
    }

    pub(super) fn cmd_vars(&mut self) {
        let p = self.prog().clone();
        let p = self.resolved(&p);
        let mut text = crate::cli::report::check_report(&p);
        for line in crate::cli::report::auto_lines(&p) {
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
    pub(super) fn plan(&mut self) -> Option<(Program, crate::plan::lower::Plan, Vec<String>)> {
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

    pub(super) fn assumed_outputs_note(added: &[String]) -> String {
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
    pub(super) fn select_kernels(
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

    pub(super) fn cmd_plan(&mut self, name: Option<&str>) {
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

    pub(super) fn cmd_emit(&mut self, args: &[&str]) {
        let engine = match args.first().copied() {
            Some("clif") => Engine::Jit,
            Some("cuda") => Engine::Cuda,
            _ => {
                self.error(
                    "usage: :emit clif|cuda [NAME]  (the Cranelift IR or the CUDA C++ of the \
                     session's kernels)",
                );
                return;
            }
        };
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
            let comment = if engine == Engine::Cuda { "//" } else { ";" };
            let _ = writeln!(text, "{comment} kernel {} ({})", kern.name, kern.origin);
            match crate::runtime::emit(engine, &plan, k) {
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
}
