//! `input` declarations: axes and their extents, dtypes, formats and initialisers.

use super::*;

impl Checker {
    pub(super) fn input(&mut self, d: &ast::InputDecl, span: Span) {
        let name = &d.name;
        if let Some(prev) = self.defined_span(&name.name) {
            self.diags.push(
                Diagnostic::new(
                    Code::DuplicateName,
                    format!("`{}` is declared twice", name.name),
                )
                .label(name.span, "declared again here")
                .label(prev, "first defined here"),
            );
            return;
        }
        let n_diags = self.diags.0.len();
        let dtype = match DType::parse(&d.dtype.name) {
            Some(t) => Some(t),
            None => {
                let names = DType::ALL.map(|t| t.name());
                let mut diag = Diagnostic::new(
                    Code::UnknownDtype,
                    format!("unknown dtype `{}`", d.dtype.name),
                )
                .label(d.dtype.span, "not a dtype");
                diag = match closest(&d.dtype.name, names.iter().copied()) {
                    Some(c) => diag.help(format!(
                        "did you mean `{c}`? dtypes are f32, f64, f16 and bf16"
                    )),
                    None => diag.help("dtypes are f32, f64, f16 and bf16"),
                };
                self.diags.push(diag);
                None
            }
        };
        let binding = self.bound.get(&name.name).cloned();
        let axes = self.input_axes(d, binding.as_ref());
        self.check_binding(d, binding.as_ref(), dtype, span);
        let shape = Shape(axes);
        let format = d
            .format
            .as_ref()
            .and_then(|f| self.format(f, &shape, d.axes.len()));
        let init = d.init.as_ref().and_then(|i| self.init(i));
        if let (Some(i), fmt) = (&init, format) {
            let takes_density = matches!(
                fmt,
                Some(Format::Coo | Format::Csr | Format::Csc | Format::Bsr { .. })
            );
            if i.density.is_some() && !takes_density {
                self.diags.push(
                    Diagnostic::new(
                        Code::BadArgument,
                        "`density=` applies only to inputs annotated coo, csr, csc or bsr",
                    )
                    .label(i.span, "density of a dense or 2:4 input")
                    .help("2:4 always keeps 2 of every 4 values; a dense input keeps all of them"),
                );
            }
        }
        if self.diags.0.len() > n_diags || shape.rank() != d.axes.len() || dtype.is_none() {
            self.names.insert(name.name.clone(), NameRef::Poisoned);
            return;
        }
        let dtype = dtype.unwrap_or(DType::F32);
        let ty = TensorType {
            dtype,
            shape,
            format: format.unwrap_or(Format::Dense),
        };
        if self.check_size(&ty, span).is_none() {
            self.names.insert(name.name.clone(), NameRef::Poisoned);
            return;
        }
        self.prog.inputs.push(Input {
            name: name.name.clone(),
            ty,
            init,
            span,
            format_span: d.format.as_ref().map(|f| f.span),
        });
        let r = TensorRef::Input(self.prog.inputs.len() - 1);
        self.names.insert(name.name.clone(), NameRef::Tensor(r));
    }

    /// The axes of an input declaration: named axes take their extent from the first pass
    /// (`let`, `name=N`, bound data); fixed extents are checked against bound data.
    fn input_axes(&mut self, d: &ast::InputDecl, binding: Option<&Binding>) -> Vec<Axis> {
        let name = &d.name;
        let mut axes = Vec::new();
        for (slot, a) in d.axes.iter().enumerate() {
            let bound_ext = binding
                .as_ref()
                .filter(|b| b.shape.len() == d.axes.len())
                .map(|b| b.shape[slot] as u64);
            match a {
                AxisDecl::Named(n) => match self.axes.get(&n.name) {
                    // Extent 0 was already reported where it was given.
                    Some(&(0, _)) => {}
                    Some(&(ext, _)) => axes.push(Axis::named(&n.name, ext)),
                    None => {
                        self.diags.push(
                            Diagnostic::new(
                                Code::UnknownExtent,
                                format!("the extent of axis `{}` is not known", n.name),
                            )
                            .label(n.span, "extent unknown")
                            .help(match self.entry {
                                Entry::Cli => format!(
                                    "give it with `{}=N` here, `let {} = N`, or bind data with `--input {}=FILE`",
                                    n.name, n.name, name.name
                                ),
                                Entry::Api => format!(
                                    "give it with `{}=N` here or `let {} = N`, or {}",
                                    n.name,
                                    n.name,
                                    Entry::Api.bind_hint(&name.name)
                                ),
                            }),
                        );
                    }
                },
                AxisDecl::Fixed(v) | AxisDecl::Sized(_, v) => {
                    let axis = match a {
                        AxisDecl::Sized(n, _) => Axis::named(&n.name, v.value),
                        _ => Axis::anon(v.value),
                    };
                    if v.value == 0 && matches!(a, AxisDecl::Sized(..)) {
                        // Reported by `collect_extents` with the axis name.
                    } else if v.value == 0 {
                        self.diags.push(
                            Diagnostic::new(Code::ZeroExtent, "an axis has extent 0")
                                .label(v.span, "extent 0")
                                .help("every axis needs at least one element"),
                        );
                    } else if let (Some(b), Some(be)) = (binding, bound_ext) {
                        if be != v.value {
                            self.diags.push(
                                Diagnostic::new(
                                    Code::ShapeMismatch,
                                    format!(
                                        "input `{}` declares extent {} here, but the data from {} has {}",
                                        name.name, v.value, b.source, be
                                    ),
                                )
                                .label(a.span(), format!("declared {}", v.value)),
                            );
                        }
                    }
                    axes.push(axis);
                }
            }
        }
        axes
    }

    /// Bound data against the declaration: the same rank and dtype.
    fn check_binding(
        &mut self,
        d: &ast::InputDecl,
        binding: Option<&Binding>,
        dtype: Option<DType>,
        span: Span,
    ) {
        let name = &d.name;
        if let (Some(b), Some(dt)) = (binding, dtype) {
            if b.shape.len() != d.axes.len() {
                self.diags.push(
                    Diagnostic::new(
                        Code::ShapeMismatch,
                        format!(
                            "input `{}` is declared with rank {}, but the data from {} has shape {:?} (rank {})",
                            name.name,
                            d.axes.len(),
                            b.source,
                            b.shape,
                            b.shape.len()
                        ),
                    )
                    .label(span, format!("rank {}", d.axes.len())),
                );
            }
            if b.dtype != dt {
                self.diags.push(
                    Diagnostic::new(
                        Code::DtypeMismatch,
                        format!(
                            "input `{}` is declared {}, but the data from {} is {}",
                            name.name, dt, b.source, b.dtype
                        ),
                    )
                    .label(d.dtype.span, format!("declared {dt}"))
                    .help(format!(
                        "declare it as `{}`, or convert the file to {dt}",
                        b.dtype
                    )),
                );
            }
        }
    }

    pub(super) fn format(
        &mut self,
        f: &ast::FormatAnn,
        shape: &Shape,
        rank: usize,
    ) -> Option<Format> {
        let name = f.name.name.as_str();
        let ints: Vec<Option<u64>> = f
            .args
            .iter()
            .map(|a| match a {
                FormatArg::Int(n) => Some(n.value),
                FormatArg::Name(_) => None,
            })
            .collect();
        let bad_args = |this: &mut Checker, want: &str| {
            this.diags.push(
                Diagnostic::new(Code::BadArgument, format!("format `{name}` takes {want}"))
                    .label(f.span, "bad format arguments"),
            );
            None
        };
        let need_rank = |this: &mut Checker, want: usize| -> bool {
            if rank != want {
                this.diags.push(
                    Diagnostic::new(
                        Code::FormatRank,
                        format!("format `{name}` needs a rank-{want} tensor, but this one has rank {rank}"),
                    )
                    .label(f.span, format!("needs rank {want}")),
                );
                false
            } else {
                true
            }
        };
        match name {
            "coo" | "csr" | "csc" => {
                if !f.args.is_empty() {
                    return bad_args(self, "no arguments");
                }
                if name == "coo" {
                    if rank == 0 {
                        self.diags.push(
                            Diagnostic::new(Code::FormatRank, "format `coo` needs rank 1 or more")
                                .label(f.span, "scalar"),
                        );
                        return None;
                    }
                    return Some(Format::Coo);
                }
                if !need_rank(self, 2) {
                    return None;
                }
                Some(if name == "csr" {
                    Format::Csr
                } else {
                    Format::Csc
                })
            }
            "bsr" => {
                let (Some(Some(br)), Some(Some(bc)), 2) = (ints.first(), ints.get(1), ints.len())
                else {
                    return bad_args(self, "two block extents: `bsr(ROWS, COLS)`");
                };
                let (br, bc) = (*br, *bc);
                if !need_rank(self, 2) {
                    return None;
                }
                if br == 0 || bc == 0 {
                    return bad_args(self, "block extents of at least 1");
                }
                if shape.rank() == 2 {
                    for (slot, b) in [(0usize, br), (1, bc)] {
                        let ext = shape.0[slot].extent;
                        if !ext.is_multiple_of(b) {
                            let axis = shape.0[slot]
                                .name
                                .as_deref()
                                .map(|n| format!("axis `{n}`"))
                                .unwrap_or_else(|| format!("axis {slot}"));
                            self.diags.push(
                                Diagnostic::new(
                                    Code::FormatBlock,
                                    format!(
                                        "block extent {b} does not divide {axis} of extent {ext}"
                                    ),
                                )
                                .label(f.span, format!("{b} does not divide {ext}"))
                                .help("choose a block shape whose extents divide the tensor's"),
                            );
                            return None;
                        }
                    }
                }
                Some(Format::Bsr { rows: br, cols: bc })
            }
            "2:4" => self.two_four_format(f, shape, rank),
            _ => {
                let known = ["coo", "csr", "csc", "bsr", "2:4"];
                let mut d =
                    Diagnostic::new(Code::UnknownFormat, format!("unknown format `{name}`"))
                        .label(f.name.span, "not a format");
                d = match closest(name, known.iter().copied()) {
                    Some(c) => d.help(format!(
                        "did you mean `{c}`? formats are coo, csr, csc, bsr(R, C) and 2:4"
                    )),
                    None => d.help("formats are coo, csr, csc, bsr(R, C) and 2:4"),
                };
                self.diags.push(d);
                None
            }
        }
    }

    /// `@ 2:4` or `@ 2:4(axis)`: the grouped axis, whose extent must be a multiple of 4.
    fn two_four_format(
        &mut self,
        f: &ast::FormatAnn,
        shape: &Shape,
        rank: usize,
    ) -> Option<Format> {
        if rank == 0 {
            self.diags.push(
                Diagnostic::new(Code::FormatRank, "format `2:4` needs rank 1 or more")
                    .label(f.span, "scalar"),
            );
            return None;
        }
        let slot = match f.args.as_slice() {
            [] => rank - 1,
            [FormatArg::Name(n)] => {
                match shape
                    .0
                    .iter()
                    .position(|a| a.name.as_deref() == Some(&n.name))
                {
                    Some(s) => s,
                    None => {
                        self.diags.push(
                            Diagnostic::new(
                                Code::BadArgument,
                                format!("`2:4({})` names an axis this input does not have", n.name),
                            )
                            .label(n.span, "not an axis of this input"),
                        );
                        return None;
                    }
                }
            }
            _ => {
                self.diags.push(
                    Diagnostic::new(
                        Code::BadArgument,
                        "format `2:4` takes at most one axis name: `2:4` or `2:4(k)`",
                    )
                    .label(f.span, "bad format arguments"),
                );
                return None;
            }
        };
        if let Some(a) = shape.0.get(slot) {
            if !a.extent.is_multiple_of(4) {
                self.diags.push(
                    Diagnostic::new(
                        Code::FormatTwoFour,
                        format!(
                            "2:4 sparsity needs the axis extent to be a multiple of 4, but {} is {}",
                            a.name.as_deref().map(|n| format!("`{n}`")).unwrap_or_else(|| format!("axis {slot}")),
                            a.extent
                        ),
                    )
                    .label(f.span, format!("extent {} is not a multiple of 4", a.extent)),
                );
                return None;
            }
        }
        Some(Format::TwoFour { slot })
    }

    pub(super) fn init(&mut self, init: &ast::Init) -> Option<Init> {
        let kind = match init.func.name.as_str() {
            "randn" => InitKind::Randn { seed: 0 },
            "rand" => InitKind::Rand { seed: 0 },
            "zeros" => InitKind::Zeros,
            "ones" => InitKind::Ones,
            "arange" => InitKind::Arange,
            other => {
                let known = ["randn", "rand", "zeros", "ones", "arange"];
                let mut d =
                    Diagnostic::new(Code::UnknownInit, format!("unknown initialiser `{other}`"))
                        .label(init.func.span, "not an initialiser");
                d = match closest(other, known.iter().copied()) {
                    Some(c) => d.help(format!(
                        "did you mean `{c}`? initialisers are randn, rand, zeros, ones and arange"
                    )),
                    None => d.help("initialisers are randn, rand, zeros, ones and arange"),
                };
                self.diags.push(d);
                return None;
            }
        };
        let mut out = Init {
            kind,
            density: None,
            span: init.span,
        };
        for a in &init.args {
            match a {
                Arg::Keyword { name, value } if name.name == "seed" => {
                    let seed = self.const_int(value)?;
                    match &mut out.kind {
                        InitKind::Randn { seed: s } | InitKind::Rand { seed: s } => *s = seed,
                        _ => {
                            self.diags.push(
                                Diagnostic::new(
                                    Code::BadArgument,
                                    format!("`{}` takes no seed", init.func.name),
                                )
                                .label(a.span(), "not used"),
                            );
                            return None;
                        }
                    }
                }
                Arg::Keyword { name, value } if name.name == "density" => {
                    let d = match &value.kind {
                        ExprKind::Number { value: v, .. } if (0.0..=1.0).contains(v) => *v,
                        _ => {
                            self.diags.push(
                                Diagnostic::new(
                                    Code::BadArgument,
                                    "`density` must be a number between 0 and 1",
                                )
                                .label(value.span, "not in [0, 1]"),
                            );
                            return None;
                        }
                    };
                    out.density = Some(d);
                }
                _ => {
                    self.diags.push(
                        Diagnostic::new(
                            Code::BadArgument,
                            format!(
                                "`{}` takes only `seed=` and `density=` keyword arguments",
                                init.func.name
                            ),
                        )
                        .label(a.span(), "unexpected argument"),
                    );
                    return None;
                }
            }
        }
        Some(out)
    }

    /// A non-negative integer constant: a literal, a size or an axis name with known extent.
    pub(super) fn const_int(&mut self, e: &Expr) -> Option<u64> {
        match &e.kind {
            ExprKind::Number { value, .. }
                if value.fract() == 0.0 && *value >= 0.0 && *value < 1.8e19 =>
            {
                Some(*value as u64)
            }
            ExprKind::Name(n)
                if self.axes.contains_key(&n.name) && !self.names.contains_key(&n.name) =>
            {
                self.axes.get(&n.name).map(|a| a.0)
            }
            _ => {
                self.diags.push(
                    Diagnostic::new(Code::BadArgument, "expected a non-negative integer")
                        .label(e.span, "not an integer constant")
                        .help("write an integer, or the name of a size defined with `let`"),
                );
                None
            }
        }
    }
}
