//! `rearrange`, `reduce` and `repeat` patterns resolved against an input shape (einops 0.8's
//! rules).

use super::*;

// ---------------------------------------------------------------------------------------------
// rearrange / reduce / repeat
// ---------------------------------------------------------------------------------------------

/// Resolves an einops pattern for `op` on an input of shape `input`.
///
/// `pattern` is the string literal's contents; `pattern_span` spans exactly those contents in
/// the script (so byte offset k of `pattern` is at `pattern_span.start + k`; patterns have no
/// escapes). `kwargs` are axis-length keyword arguments: (name, value, span of `name=value`).
pub fn resolve_pattern(
    op: PatternOp,
    pattern: &str,
    pattern_span: Span,
    input: &Shape,
    kwargs: &[(String, u64, Span)],
) -> Result<Recipe, Diagnostic> {
    let ctx = Ctx {
        pattern,
        base: pattern_span,
        map: None,
    };
    let Some(arrow) = find_arrow(&ctx)? else {
        let t = ctx.text(ctx.trim(ctx.whole()));
        return Err(ctx
            .err(
                Code::PatternMissingArrow,
                ctx.whole(),
                format!("{} pattern `{pattern}` has no `->`", op.name()),
                "no `->` here",
            )
            .help(format!(
                "write the input axes, `->`, then the output axes: \"{t} -> {t}\""
            )));
    };
    let left = parse_side(&ctx, Pos::new(0, arrow), EINOPS)?;
    let right = parse_side(&ctx, Pos::new(arrow + 2, pattern.len()), EINOPS)?;
    let kwarg = |name: &str| {
        kwargs
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|&(_, v, _)| v)
    };

    check_ellipses(&ctx, op, &left, &right)?;
    check_axis_sets(&ctx, op, &left, &right, &kwarg)?;

    // Rank.
    let l_ell = left.ellipsis().map(|(g, _)| g);
    let n_other = left.groups.len() - usize::from(l_ell.is_some());
    let rank = input.rank();
    let ell_n = match l_ell {
        Some(_) if rank >= n_other => rank - n_other,
        None if rank == n_other => 0,
        _ => {
            return Err(rank_error(
                &ctx,
                &left,
                arrow,
                n_other,
                l_ell.is_some(),
                input,
            ))
        }
    };

    check_kwargs(&ctx, &left, &right, kwargs)?;

    // At most one unknown per input group.
    for g in &left.groups {
        let unknown: Vec<&str> = g
            .atoms
            .iter()
            .filter_map(|a| a.name())
            .filter(|n| kwarg(n).is_none())
            .collect();
        if unknown.len() > 1 {
            let list = unknown
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ctx
                .err(
                    Code::PatternTwoUnknowns,
                    g.pos,
                    format!(
                        "cannot infer the lengths of {list} in `{}`: at most one axis of a group may be unknown",
                        ctx.text(g.pos)
                    ),
                    "several unknown lengths",
                )
                .help(format!(
                    "pass all but one as keyword arguments, e.g. `{}=2`",
                    unknown[0]
                )));
        }
    }

    // Elementary axes of the input, group by group.
    let mut in_elems: Vec<u64> = Vec::new();
    let mut in_groups: Vec<Vec<usize>> = Vec::new();
    let mut elem_names: Vec<Option<&str>> = Vec::new();
    let mut ell_elems: Vec<usize> = Vec::new();
    let mut ell_names: Vec<Option<String>> = Vec::new();
    let mut slot = 0usize;
    for g in &left.groups {
        if g.is_bare_ellipsis() {
            for _ in 0..ell_n {
                // Axes under `...` keep the input's axis names.
                ell_names.push(input.0.get(slot).and_then(|a| a.name.clone()));
                ell_elems.push(in_elems.len());
                in_groups.push(vec![in_elems.len()]);
                in_elems.push(slot_extent(input, slot));
                elem_names.push(None);
                slot += 1;
            }
            continue;
        }
        let ids = input_group(&ctx, g, input, slot, &kwarg, &mut in_elems, &mut elem_names)?;
        in_groups.push(ids);
        slot += 1;
    }

    // Output groups.
    let right_has_ell = right.ellipsis().is_some();
    let find_in = |name: &str| elem_names.iter().position(|n| *n == Some(name));
    let (out_groups, out_names) = output_groups(
        &ctx, &right, &in_elems, &ell_elems, &ell_names, &find_in, &kwarg,
    )?;

    // Reduced axes: everything of the input that the output does not mention.
    let reduced: Vec<usize> = (0..in_elems.len())
        .filter(|&i| {
            if ell_elems.contains(&i) {
                return !right_has_ell;
            }
            match elem_names.get(i).copied().flatten() {
                Some(n) => !right.has_name(n),
                None => true, // numeric anonymous axes are always reduced
            }
        })
        .collect();

    let recipe = Recipe {
        in_elems,
        in_groups,
        reduced,
        out_groups,
        out_names,
    };
    if total_elems(&recipe.out_extents()).is_none() {
        return Err(ctx.err(
            Code::SizeOverflow,
            ctx.trim(right.pos),
            "the output has more than 2^64 elements".to_string(),
            "overflows u64",
        ));
    }
    Ok(recipe)
}

/// The elementary axes of one (non-`...`) input group: their extents, the one unknown length
/// inferred from the input's extent, appended to `in_elems` / `elem_names`; returns their ids.
fn input_group<'p>(
    ctx: &Ctx,
    g: &'p Group,
    input: &Shape,
    slot: usize,
    kwarg: &dyn Fn(&str) -> Option<u64>,
    in_elems: &mut Vec<u64>,
    elem_names: &mut Vec<Option<&'p str>>,
) -> Result<Vec<usize>, Diagnostic> {
    let extent = slot_extent(input, slot);
    let mut known = 1u64;
    let mut factors = Vec::new();
    let mut unknown: Option<usize> = None;
    let mut ids = Vec::new();
    for a in &g.atoms {
        let value = match &a.kind {
            AtomKind::Name(n) => kwarg(n).inspect(|v| factors.push(format!("{n}={v}"))),
            AtomKind::Number(v) => {
                factors.push(v.to_string());
                Some(*v)
            }
            AtomKind::Ellipsis => None, // rejected by check_ellipses
        };
        match value {
            Some(v) => {
                known = known.checked_mul(v).ok_or_else(|| {
                    ctx.err(
                        Code::SizeOverflow,
                        g.pos,
                        format!("the lengths in `{}` multiply past 2^64", ctx.text(g.pos)),
                        "overflows u64",
                    )
                })?;
            }
            None => unknown = Some(ids.len()),
        }
        ids.push(in_elems.len());
        in_elems.push(value.unwrap_or(0));
        elem_names.push(a.name());
    }
    let text = ctx.text(g.pos);
    let here = slot_desc("input", input, slot);
    match unknown {
        None if known != extent => {
            let (message, help) = if g.atoms.is_empty() {
                (
                    format!("unit axis `{text}` needs extent 1, but {here} has extent {extent}"),
                    "name the axis instead of writing a unit".to_string(),
                )
            } else if g.atoms.len() == 1 {
                (
                    format!(
                        "axis length {} does not match {here}, which has extent {extent}",
                        product_text(&factors, known)
                    ),
                    "fix or remove the axis length".to_string(),
                )
            } else {
                (
                    format!(
                        "`{text}` has extent {}, but {here} has extent {extent}",
                        product_text(&factors, known)
                    ),
                    "fix the axis lengths so that they multiply to the input extent".to_string(),
                )
            };
            return Err(ctx
                .err(
                    Code::ExtentMismatch,
                    g.pos,
                    message,
                    &format!("extent {known}, input has {extent}"),
                )
                .help(format!("{help}; input shape is {input}")));
        }
        None => {}
        Some(u) => {
            if known == 0 || !extent.is_multiple_of(known) {
                return Err(ctx
                    .err(
                        Code::PatternIndivisible,
                        g.pos,
                        format!(
                            "cannot split {here} of extent {extent} as `{text}`: {extent} is not divisible by {}",
                            product_text(&factors, known)
                        ),
                        &format!("{extent} is not divisible by {known}"),
                    )
                    .help(format!(
                        "choose lengths whose product divides {extent}; input shape is {input}"
                    )));
            }
            if let Some(&id) = ids.get(u) {
                if let Some(e) = in_elems.get_mut(id) {
                    *e = extent / known;
                }
            }
        }
    }
    Ok(ids)
}

/// The output's groups as input elements or new axes (`repeat`), with their names.
type OutGroups = (Vec<Vec<OutElem>>, Vec<Option<String>>);

/// The output side's groups, each checked not to overflow.
fn output_groups(
    ctx: &Ctx,
    right: &Side,
    in_elems: &[u64],
    ell_elems: &[usize],
    ell_names: &[Option<String>],
    find_in: &dyn Fn(&str) -> Option<usize>,
    kwarg: &dyn Fn(&str) -> Option<u64>,
) -> Result<OutGroups, Diagnostic> {
    let mut out_groups: Vec<Vec<OutElem>> = Vec::new();
    let mut out_names: Vec<Option<String>> = Vec::new();
    for g in &right.groups {
        if g.is_bare_ellipsis() {
            for (&e, name) in ell_elems.iter().zip(ell_names) {
                out_groups.push(vec![OutElem::In(e)]);
                out_names.push(name.clone());
            }
            continue;
        }
        let mut elems = Vec::new();
        for a in &g.atoms {
            match &a.kind {
                AtomKind::Name(n) => match find_in(n) {
                    Some(i) => elems.push(OutElem::In(i)),
                    None => elems.push(OutElem::New(kwarg(n).unwrap_or(1))),
                },
                AtomKind::Number(v) => elems.push(OutElem::New(*v)),
                AtomKind::Ellipsis => elems.extend(ell_elems.iter().map(|&e| OutElem::In(e))),
            }
        }
        let extent = checked_product(elems.iter().map(|e| match *e {
            OutElem::In(i) => in_elems.get(i).copied().unwrap_or(1),
            OutElem::New(n) => n,
        }));
        if extent.is_none() {
            return Err(ctx.err(
                Code::SizeOverflow,
                g.pos,
                format!(
                    "output axis `{}` has more than 2^64 elements",
                    ctx.text(g.pos)
                ),
                "overflows u64",
            ));
        }
        out_names.push(match g.atoms.as_slice() {
            [a] => a.name().map(str::to_string),
            _ => None,
        });
        out_groups.push(elems);
    }
    Ok((out_groups, out_names))
}

/// einops' ellipsis rules that do not depend on the operation.
pub(super) fn check_ellipses(
    ctx: &Ctx,
    op: PatternOp,
    left: &Side,
    right: &Side,
) -> Result<(), Diagnostic> {
    let l = left.ellipsis();
    let r = right.ellipsis();
    if let (None, Some((_, a))) = (l, r) {
        return Err(ctx
            .err(
                Code::PatternEllipsis,
                a.pos,
                "`...` on the right side of the pattern but not on the left".to_string(),
                "`...` only on the right",
            )
            .help("`...` stands for input axes; put it on the left side too"));
    }
    if let Some((g, a)) = l {
        if left.groups.get(g).is_some_and(|g| g.paren) {
            return Err(ctx
                .err(
                    Code::PatternEllipsis,
                    a.pos,
                    "`...` inside parentheses on the left side of the pattern".to_string(),
                    "`...` in a group",
                )
                .help(
                    "on the left, `...` must stand alone; it may be grouped on the right: `b ... -> b (...)`",
                ));
        }
        if r.is_none() && op != PatternOp::Reduce {
            return Err(ctx
                .err(
                    Code::PatternEllipsis,
                    a.pos,
                    format!(
                        "`...` on the left side of the {} pattern but not on the right",
                        op.name()
                    ),
                    "`...` only on the left",
                )
                .help("add `...` to the right side; only reduce may drop the `...` axes"));
        }
    }
    Ok(())
}

/// Which axes may appear on which side, per operation (einops' identifier checks).
pub(super) fn check_axis_sets(
    ctx: &Ctx,
    op: PatternOp,
    left: &Side,
    right: &Side,
    kwarg: &dyn Fn(&str) -> Option<u64>,
) -> Result<(), Diagnostic> {
    let anon = |a: &Atom, side: &str, help: &str| {
        ctx.err(
            Code::PatternAnonymous,
            a.pos,
            format!(
                "numeric axis `{}` on the {side} side of {}",
                ctx.text(a.pos),
                op.name()
            ),
            "numeric axis",
        )
        .help(help.to_string())
    };
    match op {
        PatternOp::Rearrange => {
            for (side, s) in [("left", left), ("right", right)] {
                if let Some(a) = s.atoms().find(|a| matches!(a.kind, AtomKind::Number(_))) {
                    return Err(anon(
                        a,
                        side,
                        "rearrange allows only `1` as a numeric axis; use reduce to pool over it or repeat to add it",
                    ));
                }
            }
            for (n, a) in left.names() {
                if !right.has_name(n) {
                    return Err(ctx
                        .err(
                            Code::PatternAxisOneSide,
                            a.pos,
                            format!(
                                "axis `{n}` is on the left side of the rearrange pattern but not on the right"
                            ),
                            "only on the left",
                        )
                        .help(format!(
                            "rearrange keeps every axis: add `{n}` to the right side, or use reduce to remove it"
                        )));
                }
            }
            for (n, a) in right.names() {
                if !left.has_name(n) {
                    return Err(ctx
                        .err(
                            Code::PatternAxisOneSide,
                            a.pos,
                            format!(
                                "axis `{n}` is on the right side of the rearrange pattern but not on the left"
                            ),
                            "only on the right",
                        )
                        .help(format!(
                            "rearrange keeps every axis: add `{n}` to the left side, or use repeat to create it"
                        )));
                }
            }
        }
        PatternOp::Reduce => {
            for a in right.atoms() {
                match &a.kind {
                    AtomKind::Number(_) => {
                        return Err(anon(
                            a,
                            "right",
                            "reduce cannot create axes; write `1` for a unit axis or use repeat",
                        ))
                    }
                    AtomKind::Name(n) if !left.has_name(n) => {
                        return Err(ctx
                            .err(
                                Code::PatternAxisOneSide,
                                a.pos,
                                format!(
                                    "axis `{n}` is on the right side of the reduce pattern but not on the left"
                                ),
                                "not in the input",
                            )
                            .help("reduce only removes axes; the output axes must come from the left side"));
                    }
                    _ => {}
                }
            }
        }
        PatternOp::Repeat => {
            for a in left.atoms() {
                match &a.kind {
                    AtomKind::Number(_) => {
                        return Err(anon(
                            a,
                            "left",
                            "repeat cannot remove axes; numeric axes belong on the right side of repeat",
                        ))
                    }
                    AtomKind::Name(n) if !right.has_name(n) => {
                        return Err(ctx
                            .err(
                                Code::PatternAxisOneSide,
                                a.pos,
                                format!(
                                    "axis `{n}` is on the left side of the repeat pattern but not on the right"
                                ),
                                "dropped",
                            )
                            .help(format!(
                                "repeat keeps every input axis: add `{n}` to the right side, or use reduce to remove it"
                            )));
                    }
                    _ => {}
                }
            }
            for (n, a) in right.names() {
                if !left.has_name(n) && kwarg(n).is_none() {
                    return Err(ctx
                        .err(
                            Code::UnknownExtent,
                            a.pos,
                            format!("new axis `{n}` of repeat has no length"),
                            "length unknown",
                        )
                        .help(format!(
                            "pass its length as a keyword argument, e.g. `{n}=2`"
                        )));
                }
            }
        }
    }
    Ok(())
}

pub(super) fn rank_error(
    ctx: &Ctx,
    left: &Side,
    arrow: usize,
    n_other: usize,
    has_ell: bool,
    input: &Shape,
) -> Diagnostic {
    let lp = ctx.trim(left.pos);
    let (pos, label) = if lp.lo == lp.hi {
        (Pos::new(arrow, arrow + 2), "no input axes before `->`")
    } else {
        (lp, "input axes")
    };
    let rank = input.rank();
    let message = if has_ell {
        format!(
            "pattern `{}` needs an input of rank at least {n_other}, but the input has rank {rank}: {input}",
            ctx.text(lp)
        )
    } else {
        format!(
            "pattern `{}` has {n_other} input axes, but the input has rank {rank}: {input}",
            ctx.text(lp)
        )
    };
    let mut d = ctx.err(Code::PatternRank, pos, message, label);
    if !has_ell && rank > n_other {
        d = d.help("name every input axis, or write `...` for the remaining ones");
    } else {
        d = d.help("write one group per input axis");
    }
    d
}

/// einops' checks of the axis-length keyword arguments.
pub(super) fn check_kwargs(
    ctx: &Ctx,
    left: &Side,
    right: &Side,
    kwargs: &[(String, u64, Span)],
) -> Result<(), Diagnostic> {
    for (i, (name, value, span)) in kwargs.iter().enumerate() {
        if let Err(reason) = check_name(name) {
            return Err(Diagnostic::new(
                Code::PatternBadKwarg,
                format!("`{name}` is not a valid axis name: {reason}"),
            )
            .label(*span, "invalid axis name"));
        }
        if let Some((_, _, first)) = kwargs
            .get(..i)
            .and_then(|k| k.iter().find(|k| &k.0 == name))
        {
            return Err(Diagnostic::new(
                Code::PatternBadKwarg,
                format!("the length of axis `{name}` is given twice"),
            )
            .label(*span, "second length")
            .label(*first, "first length"));
        }
        if !left.has_name(name) && !right.has_name(name) {
            let mut axes: Vec<&str> = Vec::new();
            for (n, _) in left.names().chain(right.names()) {
                if !axes.contains(&n) {
                    axes.push(n);
                }
            }
            let help = if axes.is_empty() {
                "the pattern has no named axes; remove this argument".to_string()
            } else {
                format!(
                    "the pattern's axes are {}; remove the argument or fix its name",
                    axes.iter()
                        .map(|a| format!("`{a}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err(Diagnostic::new(
                Code::PatternUnusedKwarg,
                format!("axis length `{name}={value}` names no axis of the pattern"),
            )
            .label(*span, "not in the pattern")
            .label(ctx.span(ctx.whole()), "pattern")
            .help(help));
        }
        if *value == 0 {
            return Err(Diagnostic::new(
                Code::PatternBadKwarg,
                format!("axis length `{name}=0` must be at least 1"),
            )
            .label(*span, "length 0")
            .help("axis lengths are positive"));
        }
    }
    Ok(())
}
