//! `:mem`, `:train`, `:plot` and `:sparsity`: parameter memory, training FLOPs, rooflines and
//! sparsity patterns.

use super::*;

impl Session {
    /// Parameters: inputs named by `:set params`, or every input without a data-like axis.
    /// A sparse parameter counts its stored values (its pattern is fixed; only those train).
    pub(super) fn params(&self) -> (u128, Vec<String>, Vec<String>) {
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

    pub(super) fn params_line(&self) -> String {
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

    pub(super) fn cmd_mem(&mut self) {
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

    pub(super) fn cmd_train(&mut self, args: &[&str]) {
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

    pub(super) fn cmd_plot(&mut self, args: &[&str]) {
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
        match crate::cli::plot::roofline(Path::new(file), &p, &cost, &machine, &measured) {
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

    pub(super) fn cmd_sparsity(&mut self, args: &[&str]) {
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
                let _ = write!(title, " = {}", crate::cli::report::init_name(init));
            }
            None => title.push_str(" (no initialiser: random values)"),
        }
        match crate::cli::plot::sparsity(Path::new(file), &tensor, inp.ty.format, &title) {
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
}
