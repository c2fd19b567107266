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
        numpy: None,
        kwargs: kwargs.iter().map(|k| k.2).collect(),
    };
    let parsed = tdsl_syntax::pattern::parse_einops(op, pattern, &keywords(kwargs))
        .map_err(|e| ctx.parse_error(e))?;
    let (left, right) = (&parsed.left, &parsed.right);
    let kwarg = |name: &str| {
        kwargs
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|&(_, v, _)| v)
    };

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
                left,
                parsed.arrow,
                n_other,
                l_ell.is_some(),
                input,
            ))
        }
    };

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
        &ctx, right, &in_elems, &ell_elems, &ell_names, &find_in, &kwarg,
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

fn rank_error(
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
