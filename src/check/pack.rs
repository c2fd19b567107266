//! `pack` and `unpack` (einops 0.8): concatenate tensors along the axes a `*` covers, and
//! split them again. `p = pack(x, y, "b * c")` flattens the `*` axes of each part and lays the
//! parts end to end; `a, b = unpack(p, "b * c", x, 5)` cuts `p` into pieces whose `*` axes are
//! those of a template tensor (`x`) or one axis of a given length (`5`).

use super::*;
use crate::check::program::Assign;
use crate::check::types::OutElem;
use tdsl_syntax::pattern::{parse_pack, Pack};

/// What one `unpack` piece looks like along `*`: its axes (with their names), from a template
/// tensor or a length.
type Piece = Vec<Axis>;

impl Checker {
    /// The parsed pattern of a `pack`/`unpack` call, or a diagnostic.
    fn pack_pattern(&mut self, func: &str, pat: &Expr) -> Option<(Pack, Span)> {
        let (pattern, pspan) = match (&pat.kind, pat.str_contents_span()) {
            (ExprKind::Str { value }, Some(s)) => (value.clone(), s),
            _ => {
                self.diags.push(
                    Diagnostic::new(
                        Code::BadArgument,
                        format!("`{func}` needs its pattern string, such as \"b * c\""),
                    )
                    .label(pat.span, "expected a pattern string"),
                );
                return None;
            }
        };
        match parse_pack(func, &pattern) {
            Ok(p) => Some((p, pspan)),
            Err(e) => {
                let d = pattern::diagnostic(e, &|a| match a {
                    tdsl_syntax::pattern::At::Pattern(p) => pspan.sub(p.lo, p.hi),
                    tdsl_syntax::pattern::At::Keyword(_) => pspan,
                });
                self.diags.push(d);
                None
            }
        }
    }

    /// The slots a `*` covers in a tensor of rank `rank`, or a rank diagnostic.
    fn star_slots(
        &mut self,
        p: &Pack,
        pspan: Span,
        rank: usize,
        what: &str,
        at: Span,
    ) -> Option<std::ops::Range<usize>> {
        let named = p.before.len() + p.after.len();
        if rank < named {
            self.diags.push(
                Diagnostic::new(
                    Code::PatternRank,
                    format!(
                        "{what} has rank {rank}, but the pattern names {named} axes besides `*`"
                    ),
                )
                .label(at, format!("rank {rank}"))
                .label(pspan, "pattern")
                .help("every part needs the pattern's named axes; `*` covers zero or more others"),
            );
            return None;
        }
        Some(p.before.len()..rank - p.after.len())
    }

    /// `pack(x, y, …, "b * c")`: one tensor, the parts' `*` axes flattened and concatenated.
    pub(super) fn pack_call(&mut self, a: &call::CallArgs) -> Option<NodeId> {
        let span = a.span;
        let Some((pat, parts)) = a.positional.split_last() else {
            return a.arity(self, "parts then a pattern: `pack(x, y, \"b * c\")`");
        };
        if let Some((k, v)) = a.kwargs.first() {
            self.diags.push(
                Diagnostic::new(Code::BadArgument, "`pack` takes no keyword arguments")
                    .label(k.span.join(v.span), "unexpected keyword argument"),
            );
            return None;
        }
        if parts.is_empty() {
            return a.arity(self, "at least one part before the pattern");
        }
        let (p, pspan) = self.pack_pattern("pack", pat)?;
        let ids: Vec<Option<NodeId>> = parts.iter().map(|e| self.expr(e)).collect();
        let ids: Vec<NodeId> = ids.into_iter().collect::<Option<_>>()?;
        // The named axes: from the first part; every other part must agree.
        let mut fixed: Vec<Option<(u64, usize)>> = vec![None; p.before.len() + p.after.len()];
        let mut flat: Vec<(NodeId, u64)> = Vec::new();
        for (k, (&id, e)) in ids.iter().zip(parts).enumerate() {
            let shape = self.prog.node(id).ty.shape.clone();
            let star =
                self.star_slots(&p, pspan, shape.rank(), &format!("part {}", k + 1), e.span)?;
            let named = (0..star.start).chain(star.end..shape.rank());
            for (j, slot) in named.enumerate() {
                let ext = shape.0[slot].extent;
                match fixed[j] {
                    None => fixed[j] = Some((ext, k)),
                    Some((want, first)) if want != ext => {
                        let name = p
                            .before
                            .iter()
                            .chain(&p.after)
                            .nth(j)
                            .map_or("", |n| n.0.as_str());
                        self.diags.push(
                            Diagnostic::new(
                                Code::ExtentMismatch,
                                format!(
                                    "axis `{name}` has extent {ext} in part {} but {want} in part {}",
                                    k + 1,
                                    first + 1
                                ),
                            )
                            .label(e.span, format!("`{name}` = {ext}"))
                            .label(parts[first].span, format!("`{name}` = {want}"))
                            .help("the parts of a pack agree on every axis except those `*` covers"),
                        );
                        return None;
                    }
                    Some(_) => {}
                }
            }
            let n: Option<u64> = shape.0[star.clone()]
                .iter()
                .try_fold(1u64, |acc, a| acc.checked_mul(a.extent));
            let n = self.size_fits(n, e.span)?;
            flat.push((self.flatten(id, star, e.span)?, n));
        }
        // One dtype for the result, promoted as in arithmetic.
        let strong: Vec<DType> = flat
            .iter()
            .filter(|(id, _)| !self.prog.node(*id).weak)
            .map(|(id, _)| self.prog.node(*id).ty.dtype)
            .collect();
        let dtype = strong
            .into_iter()
            .reduce(DType::promote)
            .unwrap_or(self.prog.node(flat[0].0).ty.dtype);
        let mut total = 0u64;
        let mut cast = Vec::new();
        for (id, n) in flat {
            total = self.size_fits(total.checked_add(n), span)?;
            cast.push(self.converted(id, dtype, span)?);
        }
        let mut axes: Vec<Axis> = Vec::new();
        let names = p.before.iter().chain(&p.after);
        for ((name, _), f) in names.zip(&fixed) {
            axes.push(Axis::named(name.clone(), f.map_or(1, |f| f.0)));
        }
        axes.insert(p.before.len(), Axis::anon(total));
        let shape = Shape(axes);
        self.size_fits(shape.n_elems(), span)?;
        let ty = TensorType {
            dtype,
            shape,
            format: Format::Dense,
        };
        let axis = p.before.len();
        self.push_node(NodeKind::Concat { axis, parts: cast }, ty, false, span)
    }

    /// `unpack(p, "b * c", x, 5, …)`: the pieces, each `p` from its offset along `*`, with
    /// the `*` axes of its template.
    pub(super) fn unpack_call(&mut self, a: &call::CallArgs) -> Option<Vec<NodeId>> {
        let span = a.span;
        if a.positional.len() < 3 {
            a.arity(
                self,
                "a tensor, a pattern and one template per piece: `unpack(y, \"b * c\", x, 5)`",
            );
            return None;
        }
        if let Some((k, v)) = a.kwargs.first() {
            self.diags.push(
                Diagnostic::new(Code::BadArgument, "`unpack` takes no keyword arguments")
                    .label(k.span.join(v.span), "unexpected keyword argument"),
            );
            return None;
        }
        let x = self.expr(a.positional[0]);
        let (p, pspan) = self.pack_pattern("unpack", a.positional[1])?;
        let mut pieces: Vec<(Piece, Span)> = Vec::new();
        for (k, e) in a.positional[2..].iter().enumerate() {
            pieces.push((self.piece(&p, pspan, k, e)?, e.span));
        }
        let x = x?;
        let shape = self.prog.node(x).ty.shape.clone();
        let packed = p.before.len() + 1 + p.after.len();
        if shape.rank() != packed {
            self.diags.push(
                Diagnostic::new(
                    Code::PatternRank,
                    format!(
                        "`unpack` pattern has {packed} axes (`*` is one), but the tensor has rank {}: {shape}",
                        shape.rank()
                    ),
                )
                .label(a.positional[0].span, format!("rank {}", shape.rank()))
                .label(pspan, "pattern"),
            );
            return None;
        }
        let axis = p.before.len();
        let have = shape.0[axis].extent;
        let sizes: Vec<u64> = pieces
            .iter()
            .map(|(piece, _)| piece.iter().map(|a| a.extent).product())
            .collect();
        let want = sizes.iter().try_fold(0u64, |acc, &n| acc.checked_add(n));
        if want != Some(have) {
            let list: Vec<String> = sizes.iter().map(u64::to_string).collect();
            self.diags.push(
                Diagnostic::new(
                    Code::ExtentMismatch,
                    format!(
                        "the pieces take {} along `*`, but the tensor has {have} there",
                        list.join(" + ")
                    ),
                )
                .label(span, format!("pieces of {}", list.join(" + ")))
                .label(a.positional[0].span, format!("`*` has extent {have}"))
                .help("the pieces' sizes along `*` must add up to the packed axis"),
            );
            return None;
        }
        let dtype = self.prog.node(x).ty.dtype;
        let weak = self.prog.node(x).weak;
        let mut out = Vec::new();
        let mut start = 0u64;
        for ((piece, pspan_k), n) in pieces.into_iter().zip(sizes) {
            let mut axes = shape.0.clone();
            axes[axis] = Axis::anon(n);
            for (slot, (name, _)) in p.before.iter().chain(&p.after).enumerate() {
                let slot = if slot < axis { slot } else { slot + 1 };
                axes[slot].name = Some(name.clone());
            }
            let ty = TensorType {
                dtype,
                shape: Shape(axes.clone()),
                format: Format::Dense,
            };
            let slice = self.push_node(NodeKind::Slice { x, axis, start }, ty, weak, pspan_k)?;
            start += n;
            out.push(self.unflatten(slice, axis, &axes, &piece, pspan_k)?);
        }
        Some(out)
    }

    /// One piece's `*` axes: a template tensor's (those its `*` covers) or one axis of a given
    /// length.
    fn piece(&mut self, p: &Pack, pspan: Span, k: usize, e: &Expr) -> Option<Piece> {
        if let ExprKind::Number { .. } = e.kind {
            let n = self.const_int(e)?;
            if n == 0 {
                self.diags.push(
                    Diagnostic::new(Code::ZeroExtent, "a piece of length 0")
                        .label(e.span, "length 0")
                        .help("pieces have at least one element along `*`"),
                );
                return None;
            }
            return Some(vec![Axis::anon(n)]);
        }
        if let ExprKind::Name(n) = &e.kind {
            if self.axes.contains_key(&n.name) && !self.names.contains_key(&n.name) {
                let n = self.const_int(e)?;
                return Some(vec![Axis::anon(n)]);
            }
        }
        let t = self.expr(e)?;
        let shape = self.prog.node(t).ty.shape.clone();
        let star = self.star_slots(
            p,
            pspan,
            shape.rank(),
            &format!("template {}", k + 1),
            e.span,
        )?;
        Some(shape.0[star].to_vec())
    }

    /// `x` with slots `star` flattened into one (unchanged when that is already so).
    fn flatten(&mut self, x: NodeId, star: std::ops::Range<usize>, span: Span) -> Option<NodeId> {
        if star.len() == 1 {
            return Some(x);
        }
        let n = self.prog.node(x);
        let axes = &n.ty.shape.0;
        let recipe = Recipe {
            in_elems: axes.iter().map(|a| a.extent).collect(),
            in_groups: (0..axes.len()).map(|i| vec![i]).collect(),
            reduced: Vec::new(),
            out_groups: (0..star.start)
                .map(|i| vec![OutElem::In(i)])
                .chain(std::iter::once(star.clone().map(OutElem::In).collect()))
                .chain((star.end..axes.len()).map(|i| vec![OutElem::In(i)]))
                .collect(),
            out_names: (0..star.start)
                .map(|i| axes[i].name.clone())
                .chain(std::iter::once(None))
                .chain((star.end..axes.len()).map(|i| axes[i].name.clone()))
                .collect(),
        };
        self.rearranged(x, recipe, span)
    }

    /// Slot `axis` of `x` (shape `axes`) split into the piece's axes (unchanged for one axis).
    fn unflatten(
        &mut self,
        x: NodeId,
        axis: usize,
        axes: &[Axis],
        piece: &[Axis],
        span: Span,
    ) -> Option<NodeId> {
        if piece.len() == 1 && piece[0].name.is_none() {
            return Some(x);
        }
        let mut in_elems: Vec<u64> = Vec::new();
        let mut in_groups: Vec<Vec<usize>> = Vec::new();
        let mut out_groups: Vec<Vec<OutElem>> = Vec::new();
        let mut out_names: Vec<Option<String>> = Vec::new();
        for (slot, a) in axes.iter().enumerate() {
            if slot == axis {
                let first = in_elems.len();
                in_groups.push((first..first + piece.len()).collect());
                for (j, pa) in piece.iter().enumerate() {
                    in_elems.push(pa.extent);
                    out_groups.push(vec![OutElem::In(first + j)]);
                    out_names.push(pa.name.clone());
                }
            } else {
                in_groups.push(vec![in_elems.len()]);
                out_groups.push(vec![OutElem::In(in_elems.len())]);
                in_elems.push(a.extent);
                out_names.push(a.name.clone());
            }
        }
        let recipe = Recipe {
            in_elems,
            in_groups,
            reduced: Vec::new(),
            out_groups,
            out_names,
        };
        self.rearranged(x, recipe, span)
    }

    /// A rearrange node of `x` by `recipe`.
    fn rearranged(&mut self, x: NodeId, recipe: Recipe, span: Span) -> Option<NodeId> {
        let n = self.prog.node(x);
        let (dtype, weak) = (n.ty.dtype, n.weak);
        let shape = Shape(
            recipe
                .out_extents()
                .into_iter()
                .zip(&recipe.out_names)
                .map(|(extent, name)| Axis {
                    name: name.clone(),
                    extent,
                })
                .collect(),
        );
        let ty = TensorType {
            dtype,
            shape,
            format: Format::Dense,
        };
        let kind = NodeKind::Pattern {
            op: PatternOp::Rearrange,
            reduce: None,
            x,
            recipe,
        };
        self.push_node(kind, ty, weak, span)
    }

    /// `x` in `dtype` (a cast node only when it differs); sparse values are expanded.
    fn converted(&mut self, x: NodeId, dtype: DType, span: Span) -> Option<NodeId> {
        let n = self.prog.node(x);
        let x = if n.ty.format.is_sparse() {
            let ty = TensorType {
                format: Format::Dense,
                ..n.ty.clone()
            };
            let weak = n.weak;
            self.push_node(NodeKind::Dense(x), ty, weak, span)?
        } else {
            x
        };
        let n = self.prog.node(x);
        if n.ty.dtype == dtype {
            return Some(x);
        }
        let ty = TensorType {
            dtype,
            ..n.ty.clone()
        };
        self.push_node(NodeKind::Cast(x), ty, false, span)
    }

    /// A size that must fit in u64.
    fn size_fits(&mut self, n: Option<u64>, span: Span) -> Option<u64> {
        if n.is_none() {
            self.diags.push(
                Diagnostic::new(
                    Code::SizeOverflow,
                    "the packed size does not fit in 64 bits",
                )
                .label(span, "overflows u64"),
            );
        }
        n
    }

    /// `a, b, … = unpack(…)`: one name per piece.
    pub(super) fn assign_many(&mut self, names: &[ast::Ident], value: &Expr, span: Span) {
        let poison = |this: &mut Checker| {
            for n in names {
                this.names.insert(n.name.clone(), NameRef::Poisoned);
            }
        };
        for (i, n) in names.iter().enumerate() {
            let again = names[..i].iter().find(|m| m.name == n.name).map(|m| m.span);
            if let Some(prev) = again.or_else(|| self.defined_span(&n.name)) {
                self.diags.push(
                    Diagnostic::new(
                        Code::DuplicateName,
                        format!("`{}` is assigned twice", n.name),
                    )
                    .label(n.span, "assigned again here")
                    .label(prev, "first defined here")
                    .help("tdsl names are single-assignment; pick a new name"),
                );
                return;
            }
        }
        let ExprKind::Call { func, args } = &value.kind else {
            return self.not_unpack(names, value, poison);
        };
        if func.name != "unpack" {
            return self.not_unpack(names, value, poison);
        }
        let a = call::CallArgs::new(func, args, value.span);
        let Some(pieces) = self.unpack_call(&a) else {
            return poison(self);
        };
        if pieces.len() != names.len() {
            self.diags.push(
                Diagnostic::new(
                    Code::Arity,
                    format!(
                        "{} names for the {} pieces `unpack` returns",
                        names.len(),
                        pieces.len()
                    ),
                )
                .label(value.span, format!("{} pieces", pieces.len()))
                .help("give one name per piece"),
            );
            return poison(self);
        }
        for (n, node) in names.iter().zip(pieces) {
            self.prog.assigns.push(Assign {
                name: n.name.clone(),
                node,
                span,
                name_span: n.span,
            });
            let r = TensorRef::Assign(self.prog.assigns.len() - 1);
            self.names.insert(n.name.clone(), NameRef::Tensor(r));
        }
    }

    fn not_unpack(&mut self, names: &[ast::Ident], value: &Expr, poison: impl Fn(&mut Checker)) {
        self.diags.push(
            Diagnostic::new(
                Code::BadArgument,
                format!(
                    "{} names on the left, but only `unpack` returns several tensors",
                    names.len()
                ),
            )
            .label(value.span, "one tensor")
            .help("assign one name, or split the value with `unpack(y, \"b * c\", …)`"),
        );
        poison(self);
    }
}
