//! `:time`: compile the session through the pipeline, run it on generated inputs and report
//! each kernel against the machine's ceilings.

use super::*;

impl Session {
    /// Input tensors for running `p`: generated sparse data, initialisers, and random normal
    /// values (seed = the input's position) for inputs without one.
    pub(super) fn run_inputs(&self, p: &Program) -> Result<Vec<Tensor>, Diagnostics> {
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

    pub(super) fn cmd_time(&mut self, name: Option<&str>) {
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
    pub(super) fn timed_runs<E>(
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

    pub(super) fn time_plan(
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

    pub(super) fn time_interp(&mut self, p: &Program, inputs: &[Tensor], m: &Machine) {
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
}

/// One row of `:time`: time, rates, fractions of the machine and which ceiling binds.
pub(super) fn perf_row(
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

/// Up to 6 significant digits, no trailing zeros.
pub(super) fn g6(x: f64) -> String {
    let s = format!("{x:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.len() > 12 {
        format!("{x:.4e}")
    } else {
        s.to_string()
    }
}
