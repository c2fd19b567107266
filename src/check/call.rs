//! Calls: the function vocabulary, `clamp`, `index`, and the pattern calls (`rearrange`,
//! `reduce`, `repeat`, `einsum`).

use super::*;

/// A call's arguments: positional and keyword ones, and what to say when they are wrong.
pub(super) struct CallArgs<'e> {
    pub name: &'e str,
    pub positional: Vec<&'e Expr>,
    pub kwargs: Vec<(&'e ast::Ident, &'e Expr)>,
    pub span: Span,
}

impl<'e> CallArgs<'e> {
    pub(super) fn new(func: &'e ast::Ident, args: &'e [Arg], span: Span) -> CallArgs<'e> {
        let positional = args
            .iter()
            .filter_map(|a| match a {
                Arg::Positional(e) => Some(e),
                _ => None,
            })
            .collect();
        let kwargs = args
            .iter()
            .filter_map(|a| match a {
                Arg::Keyword { name, value } => Some((name, value)),
                _ => None,
            })
            .collect();
        CallArgs {
            name: func.name.as_str(),
            positional,
            kwargs,
            span,
        }
    }

    /// `Some(())` when the call has no keyword arguments; else a diagnostic.
    fn no_kwargs(&self, this: &mut Checker) -> Option<()> {
        if let Some((k, v)) = self.kwargs.first() {
            this.diags.push(
                Diagnostic::new(
                    Code::BadArgument,
                    format!("`{}` takes no keyword arguments", self.name),
                )
                .label(k.span.join(v.span), "unexpected keyword argument"),
            );
            return None;
        }
        Some(())
    }

    /// The diagnostic for the wrong number of positional arguments (`want` were expected).
    pub(super) fn arity(&self, this: &mut Checker, want: &str) -> Option<NodeId> {
        let name = self.name;
        let usage = match name {
            "max" | "min" | "pow" => format!("write `{name}(a, b)`"),
            "cast" => "write `cast(x, f16)`".to_string(),
            "einsum" => {
                "write `einsum(a, b, \"i j, j k -> i k\")`: operands first, the pattern last"
                    .to_string()
            }
            _ => format!("write `{name}(x)`"),
        };
        let n = self.positional.len();
        this.diags.push(
            Diagnostic::new(
                Code::Arity,
                format!("`{name}` takes {want}, but {n} were given"),
            )
            .label(self.span, format!("{n} arguments"))
            .help(usage),
        );
        None
    }
}

impl Checker {
    pub(super) fn call(&mut self, func: &ast::Ident, args: &[Arg], span: Span) -> Option<NodeId> {
        let a = CallArgs::new(func, args, span);
        let name = a.name;
        if name == "gelu" && !a.kwargs.is_empty() {
            return self.gelu_approximate(&a);
        }
        if let Some(f) = UnOp::ALL
            .iter()
            .find(|f| f.name() == name && **f != UnOp::Neg)
        {
            a.no_kwargs(self)?;
            if a.positional.len() != 1 {
                return a.arity(self, "1 argument");
            }
            let x = self.expr(a.positional[0])?;
            return self.unary(*f, x, span);
        }
        match name {
            "max" | "min" | "pow" => {
                a.no_kwargs(self)?;
                if a.positional.len() != 2 {
                    return a.arity(self, "2 arguments");
                }
                let f = match name {
                    "max" => BinOp::Max,
                    "min" => BinOp::Min,
                    _ => BinOp::Pow,
                };
                let (x, y) = (self.expr(a.positional[0]), self.expr(a.positional[1]));
                self.binary(f, x?, y?, span)
            }
            "cast" => self.cast_call(&a),
            "rearrange" | "reduce" | "repeat" => {
                self.pattern_call(name, &a.positional, &a.kwargs, span)
            }
            "clamp" | "clip" => self.clamp(name, &a.positional, &a.kwargs, span),
            "where" => {
                a.no_kwargs(self)?;
                if a.positional.len() != 3 {
                    return a.arity(self, "3 arguments: `where(cond, a, b)`");
                }
                let ids: Vec<Option<NodeId>> = a.positional.iter().map(|e| self.expr(e)).collect();
                let (c, x, y) = (ids[0]?, ids[1]?, ids[2]?);
                self.where_(c, x, y, span)
            }
            "index" => self.axis_index(
                &a.positional,
                span,
                &|this: &mut Checker, want: &str| a.arity(this, want),
                &|this: &mut Checker| a.no_kwargs(this),
            ),
            "sparsify" => self.sparsify(&a.positional, &a.kwargs, span),
            "dense" => self.dense_call(&a),
            "einsum" => self.einsum_call(&a),
            "pack" => self.pack_call(&a),
            "unpack" => {
                let mut pieces = self.unpack_call(&a)?;
                if pieces.len() == 1 {
                    return pieces.pop();
                }
                self.diags.push(
                    Diagnostic::new(
                        Code::BadArgument,
                        format!("`unpack` returns {} tensors here", pieces.len()),
                    )
                    .label(span, "several tensors")
                    .help("assign them to as many names: `a, b = unpack(y, \"b * c\", x1, x2)`"),
                );
                None
            }
            "randn" | "rand" | "zeros" | "ones" | "arange" => {
                self.diags.push(
                    Diagnostic::new(
                        Code::UnknownFunction,
                        format!("`{name}` is an initialiser, not a function"),
                    )
                    .label(func.span, "only valid after `=` in an `input` declaration")
                    .help(format!("write `input x: f32[...] = {name}(seed=0)`")),
                );
                None
            }
            _ => self.unknown_function(func),
        }
    }

    /// `gelu(x, approximate="none" | "tanh")`, torch's spelling.
    fn gelu_approximate(&mut self, a: &CallArgs) -> Option<NodeId> {
        let span = a.span;
        // torch's spelling: gelu(x, approximate="none" | "tanh").
        let (k, v) = a.kwargs[0];
        let choice = match (&v.kind, a.kwargs.len()) {
            (ExprKind::Str { value }, 1) if k.name == "approximate" => match value.as_str() {
                "none" => Some(UnOp::GeluErf),
                "tanh" => Some(UnOp::Gelu),
                _ => None,
            },
            _ => None,
        };
        let Some(f) = choice else {
            self.diags.push(
                Diagnostic::new(
                    Code::BadArgument,
                    "`gelu` takes one keyword argument, approximate=\"none\" or approximate=\"tanh\"",
                )
                .label(k.span.join(v.span), "not approximate=\"none\" or \"tanh\"")
                .help("gelu(x) is the tanh approximation; gelu(x, approximate=\"none\") and gelu_erf(x) are the exact erf form"),
            );
            return None;
        };
        if a.positional.len() != 1 {
            return a.arity(self, "1 argument");
        }
        let x = self.expr(a.positional[0])?;
        self.unary(f, x, span)
    }

    /// `cast(x, DTYPE)`: the format is kept (a cast runs on the stored entries).
    fn cast_call(&mut self, a: &CallArgs) -> Option<NodeId> {
        let span = a.span;
        a.no_kwargs(self)?;
        if a.positional.len() != 2 {
            return a.arity(self, "2 arguments: `cast(x, DTYPE)`");
        }
        let x = self.expr(a.positional[0]);
        let dtype = match &a.positional[1].kind {
            ExprKind::Name(n) => DType::parse(&n.name),
            _ => None,
        };
        let Some(dtype) = dtype else {
            self.diags.push(
                Diagnostic::new(
                    Code::UnknownDtype,
                    "the second argument of `cast` must be a dtype",
                )
                .label(a.positional[1].span, "not a dtype")
                .help("dtypes are f32, f64, f16 and bf16"),
            );
            return None;
        };
        let x = x?;
        let shape = self.prog.node(x).ty.shape.clone();
        // A cast keeps the format: it runs on the stored entries.
        let format = self.prog.node(x).ty.format;
        let ty = TensorType {
            dtype,
            shape,
            format,
        };
        self.push_node(NodeKind::Cast(x), ty, false, span)
    }

    /// `dense(x)`: the value expanded to dense storage.
    fn dense_call(&mut self, a: &CallArgs) -> Option<NodeId> {
        let span = a.span;
        a.no_kwargs(self)?;
        if a.positional.len() != 1 {
            return a.arity(self, "1 argument");
        }
        let x = self.expr(a.positional[0])?;
        let ty = TensorType {
            format: Format::Dense,
            ..self.prog.node(x).ty.clone()
        };
        let weak = self.prog.node(x).weak;
        self.push_node(NodeKind::Dense(x), ty, weak, span)
    }

    /// `einsum(a, b, …, "pattern", h=4)`: the pattern resolved against the operands' shapes; the
    /// result's dtype promotes the operands'; a sampled product keeps its sparse operand's format.
    fn einsum_call(&mut self, a: &CallArgs) -> Option<NodeId> {
        let span = a.span;
        let Some((pat, operands)) = a.positional.split_last() else {
            return a.arity(
                self,
                "operands then a pattern: `einsum(a, b, \"i j, j k -> i k\")`",
            );
        };
        let (pattern, pspan) = match (&pat.kind, pat.str_contents_span()) {
            (ExprKind::Str { value }, Some(s)) => (value.clone(), s),
            _ => {
                self.diags.push(
                        Diagnostic::new(Code::BadArgument, "the last argument of `einsum` must be its pattern string")
                            .label(pat.span, "expected a string such as \"i j, j k -> i k\"")
                            .help("operands come first and the pattern last, as in einops: einsum(a, b, \"i j, j k -> i k\")"),
                    );
                return None;
            }
        };
        if operands.is_empty() {
            return a.arity(self, "at least one operand before the pattern");
        }
        let ids: Vec<Option<NodeId>> = operands.iter().map(|o| self.expr(o)).collect();
        let mut lengths = Vec::new();
        for (k, v) in &a.kwargs {
            let n = self.const_int(v)?;
            lengths.push((k.name.clone(), n, k.span.join(v.span)));
        }
        let ids: Vec<NodeId> = ids.into_iter().collect::<Option<_>>()?;
        let shapes: Vec<Shape> = ids
            .iter()
            .map(|&i| self.prog.node(i).ty.shape.clone())
            .collect();
        let spec = match resolve_einsum(&pattern, pspan, &shapes, &lengths) {
            Ok(s) => s,
            Err(d) => {
                self.diags.push(d);
                return None;
            }
        };
        let nodes: Vec<&Node> = ids.iter().map(|&i| self.prog.node(i)).collect();
        let strong: Vec<DType> = nodes
            .iter()
            .filter(|n| !n.weak)
            .map(|n| n.ty.dtype)
            .collect();
        let all: Vec<DType> = nodes.iter().map(|n| n.ty.dtype).collect();
        let pool = if strong.is_empty() { all } else { strong };
        let dtype = pool
            .into_iter()
            .reduce(DType::promote)
            .unwrap_or(WEAK_DTYPE);
        let out_shape = Shape(
            spec.output
                .iter()
                .map(|g| {
                    let ext = g.iter().map(|&l| spec.labels[l].1).product();
                    match g.as_slice() {
                        [l] if !spec.labels[*l].0.starts_with("...") => {
                            Axis::named(&spec.labels[*l].0, ext)
                        }
                        _ => Axis::anon(ext),
                    }
                })
                .collect(),
        );
        // A sampled product (SDDMM) keeps its sparse operand's format.
        let formats: Vec<Format> = ids.iter().map(|&i| self.prog.node(i).ty.format).collect();
        let format = sampled_operand(&spec, &formats).map_or(Format::Dense, |i| formats[i]);
        let ty = TensorType {
            dtype,
            shape: out_shape,
            format,
        };
        self.push_node(
            NodeKind::Einsum {
                operands: ids,
                spec,
            },
            ty,
            false,
            span,
        )
    }

    /// An unknown function name, with a did-you-mean or the list of functions.
    fn unknown_function(&mut self, func: &ast::Ident) -> Option<NodeId> {
        let name = func.name.as_str();
        let mut known: Vec<&str> = UnOp::ALL
            .iter()
            .filter(|f| **f != UnOp::Neg)
            .map(|f| f.name())
            .collect();
        known.extend([
            "max",
            "min",
            "pow",
            "clamp",
            "clip",
            "where",
            "index",
            "cast",
            "rearrange",
            "reduce",
            "repeat",
            "einsum",
            "pack",
            "unpack",
            "sparsify",
            "dense",
        ]);
        let d = Diagnostic::new(Code::UnknownFunction, format!("unknown function `{name}`"))
            .label(func.span, "not a function");
        let d = match closest(name, known.iter().copied()) {
            Some(c) => d.help(format!("did you mean `{c}`?")),
            None => d.help(format!("functions are {}", known.join(", "))),
        };
        self.diags.push(d);
        None
    }

    /// `clamp(x, lo, hi)` / `clip(x, lo, hi)`, or with `min=`/`max=` keywords (either may be
    /// left out): `min(max(x, lo), hi)`, as numpy's `clip` (NaN propagates).
    pub(super) fn clamp(
        &mut self,
        name: &str,
        positional: &[&Expr],
        kwargs: &[(&ast::Ident, &Expr)],
        span: Span,
    ) -> Option<NodeId> {
        let usage = format!("write `{name}(x, lo, hi)` or `{name}(x, min=lo, max=hi)`");
        let mut bounds: [Option<&Expr>; 2] =
            [positional.get(1).copied(), positional.get(2).copied()];
        let mut bad = positional.len() > 3 || positional.is_empty();
        for (k, v) in kwargs {
            let slot = match k.name.as_str() {
                "min" => 0,
                "max" => 1,
                _ => {
                    self.diags.push(
                        Diagnostic::new(
                            Code::BadArgument,
                            format!("`{name}` takes keyword arguments `min` and `max`"),
                        )
                        .label(k.span, "unknown keyword")
                        .help(usage.clone()),
                    );
                    return None;
                }
            };
            if bounds[slot].is_some() {
                bad = true;
            }
            bounds[slot] = Some(v);
        }
        if bad || bounds.iter().all(|b| b.is_none()) {
            self.diags.push(
                Diagnostic::new(
                    Code::Arity,
                    format!("`{name}` takes a tensor and at least one bound, each given once"),
                )
                .label(span, "here")
                .help(usage),
            );
            return None;
        }
        let x = self.expr(positional[0]);
        let lo = bounds[0].map(|e| self.expr(e));
        let hi = bounds[1].map(|e| self.expr(e));
        let mut v = x?;
        if let Some(lo) = lo {
            v = self.binary(BinOp::Max, v, lo?, span)?;
        }
        if let Some(hi) = hi {
            v = self.binary(BinOp::Min, v, hi?, span)?;
        }
        Some(v)
    }

    /// `index(x, AXIS)`: the position along one axis of `x`, named (`"j"`, or a bare name that
    /// is an axis of `x`) or by position (`-1` is the last). See [`NodeKind::AxisIndex`].
    pub(super) fn axis_index(
        &mut self,
        positional: &[&Expr],
        span: Span,
        arity: &dyn Fn(&mut Checker, &str) -> Option<NodeId>,
        no_kwargs: &dyn Fn(&mut Checker) -> Option<()>,
    ) -> Option<NodeId> {
        no_kwargs(self)?;
        if positional.len() != 2 {
            return arity(self, "2 arguments: `index(x, \"axis\")`");
        }
        let x = self.expr(positional[0])?;
        let shape = self.prog.node(x).ty.shape.clone();
        let dtype = match self.prog.node(x).ty.dtype {
            DType::F64 => DType::F64,
            _ => DType::F32,
        };
        let arg = positional[1];
        let names: Vec<String> = shape.0.iter().filter_map(|a| a.name.clone()).collect();
        let slot = match &arg.kind {
            ExprKind::Str { value } => shape
                .0
                .iter()
                .position(|a| a.name.as_deref() == Some(value)),
            ExprKind::Name(n) => shape
                .0
                .iter()
                .position(|a| a.name.as_deref() == Some(&n.name)),
            ExprKind::Number { value, .. } if value.fract() == 0.0 => {
                let r = shape.rank() as f64;
                let k = if *value < 0.0 { r + value } else { *value };
                (k >= 0.0 && k < r).then_some(k as usize)
            }
            ExprKind::Neg(inner) => match &inner.kind {
                ExprKind::Number { value, .. } if value.fract() == 0.0 => {
                    let r = shape.rank() as f64;
                    let k = r - value;
                    (k >= 0.0 && k < r).then_some(k as usize)
                }
                _ => None,
            },
            _ => None,
        };
        let Some(axis) = slot else {
            let d = Diagnostic::new(
                Code::BadArgument,
                format!("the second argument of `index` must be an axis of {shape}"),
            )
            .label(arg.span, "not an axis of the first argument");
            let d = match (&arg.kind, names.is_empty()) {
                (ExprKind::Str { value }, false) => match closest(value, names.iter().map(|s| s.as_str())) {
                    Some(c) => d.help(format!("did you mean \"{c}\"?")),
                    None => d.help(format!("its named axes are {}", names.join(", "))),
                },
                _ => d.help(format!(
                    "name an axis in quotes (\"{}\") or give its position (0 to {}, or -1 for the last)",
                    names.first().map_or("i", |s| s.as_str()),
                    shape.rank().saturating_sub(1)
                )),
            };
            self.diags.push(d);
            return None;
        };
        let axes = shape
            .0
            .iter()
            .enumerate()
            .map(|(k, a)| if k == axis { a.clone() } else { Axis::anon(1) })
            .collect();
        let ty = TensorType {
            dtype,
            shape: Shape(axes),
            format: Format::Dense,
        };
        self.push_node(NodeKind::AxisIndex { axis }, ty, false, span)
    }

    pub(super) fn pattern_call(
        &mut self,
        name: &str,
        positional: &[&Expr],
        kwargs: &[(&ast::Ident, &Expr)],
        span: Span,
    ) -> Option<NodeId> {
        let op = match name {
            "rearrange" => PatternOp::Rearrange,
            "reduce" => PatternOp::Reduce,
            _ => PatternOp::Repeat,
        };
        let want = if op == PatternOp::Reduce { 3 } else { 2 };
        if positional.len() != want {
            let usage = match op {
                PatternOp::Reduce => "3 arguments: `reduce(x, \"PATTERN\", \"OP\")`",
                PatternOp::Rearrange => {
                    "2 arguments and axis lengths: `rearrange(x, \"PATTERN\", h=8)`"
                }
                PatternOp::Repeat => "2 arguments and axis lengths: `repeat(x, \"PATTERN\", c=3)`",
            };
            self.diags.push(
                Diagnostic::new(
                    Code::Arity,
                    format!(
                        "`{name}` takes {usage}, but {} positional arguments were given",
                        positional.len()
                    ),
                )
                .label(span, format!("{} positional arguments", positional.len())),
            );
            return None;
        }
        let x = self.expr(positional[0]);
        let pat = positional[1];
        let (pattern, pspan) = match (&pat.kind, pat.str_contents_span()) {
            (ExprKind::Str { value }, Some(s)) => (value.clone(), s),
            _ => {
                self.diags.push(
                    Diagnostic::new(
                        Code::BadArgument,
                        format!("the second argument of `{name}` must be a pattern string"),
                    )
                    .label(pat.span, "expected a string such as \"b h w -> b (h w)\""),
                );
                return None;
            }
        };
        let reduce = if op == PatternOp::Reduce {
            let r = positional[2];
            let (text, rspan) = match &r.kind {
                ExprKind::Str { value } => (value.clone(), r.span),
                ExprKind::Name(n) => (n.name.clone(), n.span),
                _ => (String::new(), r.span),
            };
            match ReduceOp::parse(&text) {
                Some(op) => Some(op),
                None => {
                    let names = ReduceOp::ALL.map(|o| o.name());
                    let d = Diagnostic::new(
                        Code::UnknownReduceOp,
                        format!("unknown reduce op `{text}`"),
                    )
                    .label(rspan, "not a reduce op");
                    let d = match closest(&text, names.iter().copied()) {
                        Some(c) => d.help(format!("did you mean \"{c}\"? ops are \"sum\", \"mean\", \"max\", \"min\" and \"prod\"")),
                        None => d.help("ops are \"sum\", \"mean\", \"max\", \"min\" and \"prod\""),
                    };
                    self.diags.push(d);
                    return None;
                }
            }
        } else {
            None
        };
        let mut lengths = Vec::new();
        for (k, v) in kwargs {
            let n = self.const_int(v)?;
            lengths.push((k.name.clone(), n, k.span.join(v.span)));
        }
        let x = x?;
        let xn = self.prog.node(x);
        let dtype = xn.ty.dtype;
        let recipe = match resolve_pattern(op, &pattern, pspan, &xn.ty.shape, &lengths) {
            Ok(r) => r,
            Err(d) => {
                self.diags.push(d);
                return None;
            }
        };
        let shape = Shape(
            recipe
                .out_extents()
                .into_iter()
                .zip(&recipe.out_names)
                .map(|(ext, n)| Axis {
                    name: n.clone(),
                    extent: ext,
                })
                .collect(),
        );
        let xfmt = self.prog.node(x).ty.format;
        let format = if op == PatternOp::Rearrange {
            flow_through_rearrange(xfmt, &recipe)
        } else {
            Format::Dense
        };
        if xfmt.is_sparse() && !format.is_sparse() && reduce.is_none() {
            self.note_dense(
                span,
                &format!("`{name}`"),
                xfmt,
                &self.prog.node(x).ty.shape.clone(),
            );
        }
        let ty = TensorType {
            dtype,
            shape,
            format,
        };
        self.push_node(
            NodeKind::Pattern {
                op,
                reduce,
                x,
                recipe,
            },
            ty,
            false,
            span,
        )
    }
}
