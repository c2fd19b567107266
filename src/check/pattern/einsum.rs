//! tdsl's einsum patterns (numpy's einsum over named labels, with composition) resolved against
//! the operands' shapes.

use super::*;
use tdsl_syntax::pattern::{numpy_subscripts, parse_einsum, Einsum};

// ---------------------------------------------------------------------------------------------
// einsum
// ---------------------------------------------------------------------------------------------

/// Where a label's extent was learned: operand number and pattern position.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seen {
    extent: u64,
    op: usize,
    pos: Pos,
}

/// One slot range of an einsum operand: group `group` covers slots `first..first + count`.
pub(super) struct OpSlots {
    group: usize,
    first: usize,
    count: usize,
}

/// Resolves an einsum pattern (`"b h i d, b h j d -> b h i j"`) against operand shapes, in
/// phases: parse the operands and output, lay out each operand's slots (with `...` widths),
/// broadcast the `...` axes, build the label table, learn extents (plain slots, keyword
/// lengths, composed groups), and assemble the spec.
pub fn resolve_einsum(
    pattern: &str,
    pattern_span: Span,
    operands: &[Shape],
    kwargs: &[(String, u64, Span)],
) -> Result<EinsumSpec, Diagnostic> {
    let ranks: Vec<usize> = operands.iter().map(Shape::rank).collect();
    let numpy = numpy_subscripts(pattern, &ranks);
    let ctx = Ctx {
        pattern: numpy.as_ref().map_or(pattern, |s| s.text.as_str()),
        base: pattern_span,
        numpy: numpy.as_ref(),
        kwargs: kwargs.iter().map(|k| k.2).collect(),
    };
    let parsed = parse_einsum(ctx.pattern, Some(operands.len()), &keywords(kwargs))
        .map_err(|e| ctx.parse_error(e))?;
    let mut r = Resolver {
        ctx,
        operands,
        ops: &parsed.operands,
        out: &parsed.output,
        parsed: &parsed,
        arrow: parsed.arrow,
        layouts: Vec::new(),
        ell_width: Vec::new(),
        n_ell: 0,
        ell_ext: Vec::new(),
        names: Vec::new(),
        seen: Vec::new(),
        ell_base: None,
    };
    r.lay_out()?;
    r.broadcast_ellipsis()?;
    r.label_table();
    r.plain_extents()?;
    r.kwarg_extents(kwargs)?;
    r.infer_composed()?;
    r.check_composed()?;
    r.assemble()
}

/// The state of resolving one einsum pattern, filled phase by phase (see [`resolve_einsum`]).
struct Resolver<'a> {
    ctx: Ctx<'a>,
    operands: &'a [Shape],
    ops: &'a [Side],
    out: &'a Side,
    parsed: &'a Einsum,
    arrow: usize,
    /// Per operand: the slots each group covers.
    layouts: Vec<Vec<OpSlots>>,
    /// Per operand: how many axes its `...` covers.
    ell_width: Vec<usize>,
    /// The broadcast `...` rank.
    n_ell: usize,
    /// Per broadcast `...` axis: its extent and the operand it came from (None: all 1).
    ell_ext: Vec<Option<(u64, usize)>>,
    /// Labels in first-appearance order (`...g` for broadcast axes), and their extents.
    names: Vec<String>,
    seen: Vec<Option<Seen>>,
    /// Where the `...` labels start in `names`.
    ell_base: Option<usize>,
}

impl<'a> Resolver<'a> {
    /// Each operand's slots and `...` width; the output must have `...` if operands do.
    fn lay_out(&mut self) -> Result<(), Diagnostic> {
        let Resolver {
            ctx,
            operands,
            ops,
            out,
            arrow,
            ..
        } = self;
        let (operands, arrow) = (*operands, *arrow);
        let mut layouts: Vec<Vec<OpSlots>> = Vec::new();
        let mut ell_width: Vec<usize> = Vec::new();
        for (k, (side, shape)) in ops.iter().zip(operands).enumerate() {
            let ell = side.ellipsis().map(|(g, _)| g);
            let n_other = side.groups.len() - usize::from(ell.is_some());
            let rank = shape.rank();
            let width = match ell {
                Some(_) if rank >= n_other => rank - n_other,
                None if rank == n_other => 0,
                _ => {
                    let p = ctx.trim(side.pos);
                    let message = if ell.is_some() {
                        format!(
                            "einsum operand {} `{}` needs rank at least {n_other}, but it has rank {rank}: {shape}",
                            k + 1,
                            ctx.text(p)
                        )
                    } else {
                        format!(
                            "einsum operand {} `{}` has {n_other} axes, but the operand has rank {rank}: {shape}",
                            k + 1,
                            ctx.text(p)
                        )
                    };
                    return Err(ctx.err(Code::PatternRank, p, message, "operand axes").help(
                        "write one label (or group) per axis, or `...` for the remaining axes",
                    ));
                }
            };
            let mut slots = Vec::new();
            let mut first = 0usize;
            for (gi, g) in side.groups.iter().enumerate() {
                let count = if g.is_bare_ellipsis() { width } else { 1 };
                slots.push(OpSlots {
                    group: gi,
                    first,
                    count,
                });
                first += count;
            }
            layouts.push(slots);
            ell_width.push(width);
        }
        let n_ell = ell_width.iter().copied().max().unwrap_or(0);
        if n_ell > 0 && out.ellipsis().is_none() {
            let p = ctx.trim(out.pos);
            let p = if p.lo == p.hi {
                Pos::new(arrow, arrow + 2)
            } else {
                p
            };
            return Err(ctx
                .err(
                    Code::PatternEllipsis,
                    p,
                    format!(
                        "the operands' `...` covers {n_ell} ax{}, but the output has no `...`",
                        if n_ell == 1 { "is" } else { "es" }
                    ),
                    "no `...` in the output",
                )
                .help(
                    "add `...` to the output (numpy requires it), or name those axes to sum over them",
                ));
        }

        self.layouts = layouts;
        self.ell_width = ell_width;
        self.n_ell = n_ell;
        Ok(())
    }

    /// The `...` axes broadcast right-aligned across operands (numpy's rules).
    fn broadcast_ellipsis(&mut self) -> Result<(), Diagnostic> {
        let Resolver {
            ctx,
            operands,
            ops,
            layouts,
            ell_width,
            ..
        } = self;
        let (operands, n_ell) = (*operands, self.n_ell);
        let mut ell_ext: Vec<Option<(u64, usize)>> = vec![None; n_ell];
        for (k, side) in ops.iter().enumerate() {
            let Some((g, a)) = side.ellipsis() else {
                continue;
            };
            let width = ell_width.get(k).copied().unwrap_or(0);
            let first = layouts.get(k).and_then(|l| l.get(g)).map_or(0, |s| s.first);
            for j in 0..width {
                let x = slot_extent(operand(operands, k), first + j);
                let gi = n_ell - width + j;
                if x == 1 {
                    continue;
                }
                match ell_ext.get(gi).copied().flatten() {
                    None => {
                        if let Some(e) = ell_ext.get_mut(gi) {
                            *e = Some((x, k));
                        }
                    }
                    Some((y, other)) if y != x => {
                        let other_pos = ops
                            .get(other)
                            .and_then(|s| s.ellipsis())
                            .map_or(a.pos, |(_, a)| a.pos);
                        return Err(ctx
                            .err(
                                Code::BroadcastMismatch,
                                a.pos,
                                format!(
                                    "cannot broadcast the `...` axes of einsum operand {} against operand {}: extent {x} against {y}",
                                    k + 1,
                                    other + 1
                                ),
                                &format!("extent {x}"),
                            )
                            .label(ctx.span(other_pos), format!("extent {y}"))
                            .help(format!(
                                "broadcast axes must be equal or 1; shapes are {} and {}",
                                operand(operands, other), operand(operands, k)
                            )));
                    }
                    Some(_) => {}
                }
            }
        }

        self.ell_ext = ell_ext;
        Ok(())
    }

    /// Named labels in first-appearance order; the `...` labels where `...` first appears.
    fn label_table(&mut self) {
        let (ops, n_ell, ell_ext) = (&self.ops, self.n_ell, &self.ell_ext);
        let mut names: Vec<String> = Vec::new();
        let mut seen: Vec<Option<Seen>> = Vec::new();
        let mut ell_base: Option<usize> = None;
        for side in ops.iter() {
            for a in side.atoms() {
                match &a.kind {
                    AtomKind::Name(n) if !names.contains(n) => {
                        names.push(n.clone());
                        seen.push(None);
                    }
                    AtomKind::Ellipsis if ell_base.is_none() && n_ell > 0 => {
                        ell_base = Some(names.len());
                        for (g, e) in ell_ext.iter().enumerate() {
                            names.push(format!("...{g}"));
                            seen.push(Some(Seen {
                                extent: e.map_or(1, |(x, _)| x),
                                op: 0,
                                pos: a.pos,
                            }));
                        }
                    }
                    _ => {}
                }
            }
        }

        self.names = names;
        self.seen = seen;
        self.ell_base = ell_base;
    }

    /// Extents from plain (one-label) slots, unified across operands.
    fn plain_extents(&mut self) -> Result<(), Diagnostic> {
        let Resolver {
            ctx,
            operands,
            ops,
            layouts,
            names,
            seen,
            ..
        } = self;
        let operands = *operands;
        let label_id = |name: &str| label_of(names, name);
        for (k, (side, shape)) in ops.iter().zip(operands).enumerate() {
            for s in layouts.get(k).into_iter().flatten() {
                let Some(g) = side.groups.get(s.group) else {
                    continue;
                };
                if g.is_bare_ellipsis() {
                    continue;
                }
                let [a] = g.atoms.as_slice() else {
                    continue;
                };
                let Some((name, l)) = a.name().and_then(|n| Some((n, label_id(n)?))) else {
                    continue;
                };
                let now = Seen {
                    extent: slot_extent(shape, s.first),
                    op: k,
                    pos: a.pos,
                };
                match seen.get_mut(l) {
                    Some(entry @ None) => *entry = Some(now),
                    Some(Some(prev)) => unify(ctx, name, prev, &now)?,
                    None => {}
                }
            }
        }

        Ok(())
    }

    /// Axis lengths given as keyword arguments (`h=4`), as rearrange takes them.
    fn kwarg_extents(&mut self, kwargs: &[(String, u64, Span)]) -> Result<(), Diagnostic> {
        let Resolver {
            ctx,
            ops,
            names,
            seen,
            ..
        } = self;
        let label_id = |name: &str| label_of(names, name);
        for (name, value, span) in kwargs {
            let Some(l) = label_id(name) else { continue };
            let first = ops
                .iter()
                .flat_map(|s| s.atoms())
                .find(|a| a.name() == Some(name.as_str()))
                .map_or(Pos::new(0, 0), |a| a.pos);
            match seen.get_mut(l) {
                Some(entry @ None) => {
                    *entry = Some(Seen {
                        extent: *value,
                        op: 0,
                        pos: first,
                    })
                }
                Some(Some(prev)) if prev.extent != *value => {
                    return Err(Diagnostic::new(
                        Code::ExtentMismatch,
                        format!(
                            "axis length `{name}={value}` disagrees with einsum operand {}, where `{name}` has extent {}",
                            prev.op + 1,
                            prev.extent
                        ),
                    )
                    .label(*span, format!("{value}"))
                    .label(ctx.span(prev.pos), format!("extent {}", prev.extent))
                    .help(format!("remove `{name}=` or give it {}", prev.extent)));
                }
                _ => {}
            }
        }

        Ok(())
    }

    /// Every composed (multi-label) group of every operand, with its label ids.
    fn composed(&self) -> Vec<Composed<'a>> {
        composed_groups(self.ops, &self.layouts, self.operands)
            .into_iter()
            .map(|(k, g, extent, slot)| Composed {
                k,
                g,
                extent,
                slot,
                ids: group_labels(&self.names, g),
            })
            .collect()
    }

    /// The labels among `ids` whose extent is not known yet.
    fn unknown(&self, ids: &[usize]) -> Vec<usize> {
        ids.iter()
            .copied()
            .filter(|&l| self.seen.get(l).is_some_and(Option::is_none))
            .collect()
    }

    /// Composed groups: infer one unknown label per group, to a fixed point.
    fn infer_composed(&mut self) -> Result<(), Diagnostic> {
        let composed = self.composed();
        loop {
            let mut changed = false;
            for c in &composed {
                let (k, g, extent) = (c.k, c.g, c.extent);
                let [u] = self.unknown(&c.ids)[..] else {
                    continue;
                };
                let ctx = &self.ctx;
                let known = group_known(ctx, g, &c.ids, &self.seen)?;
                let text = ctx.text(g.pos);
                let here = format!("axis {} of einsum operand {}", c.slot, k + 1);
                let uname = self.names.get(u).map_or("", String::as_str);
                if known == 0 {
                    let d = if extent == 0 {
                        ctx.err(
                            Code::ZeroExtent,
                            g.pos,
                            format!(
                                "cannot infer `{uname}` in `{text}`: the other labels of the group have extent 0"
                            ),
                            "cannot infer",
                        )
                    } else {
                        ctx.err(
                            Code::ExtentMismatch,
                            g.pos,
                            format!(
                                "`{text}` has extent 0 (its other labels have extent 0), but {here} has extent {extent}"
                            ),
                            "extent 0",
                        )
                    };
                    return Err(d);
                }
                if !extent.is_multiple_of(known) {
                    return Err(ctx
                        .err(
                            Code::PatternIndivisible,
                            g.pos,
                            format!(
                                "cannot split {here} of extent {extent} as `{text}`: {extent} is not divisible by {known}, the extent of the labels other than `{uname}`"
                            ),
                            &format!("{extent} is not divisible by {known}"),
                        )
                        .help(format!("shape of operand {} is {}", k + 1, operand(self.operands, k))));
                }
                if let Some(entry) = self.seen.get_mut(u) {
                    *entry = Some(Seen {
                        extent: extent / known,
                        op: k,
                        pos: g.pos,
                    });
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        Ok(())
    }

    /// Every composed group fully known and equal to its slot's extent (a group used whole
    /// with unknowns takes its extent on its first label).
    fn check_composed(&mut self) -> Result<(), Diagnostic> {
        for c in self.composed() {
            let (k, g, extent, ids) = (c.k, c.g, c.extent, &c.ids);
            let unknown = self.unknown(ids);
            let ctx = &self.ctx;
            let text = ctx.text(g.pos);
            if !unknown.is_empty() && self.parsed.used_whole(g) {
                // The group's labels only ever appear together, in this order: no split is needed
                // and every split gives the same result, so the first label takes the whole extent.
                for (j, &l) in ids.iter().enumerate() {
                    if let Some(entry @ None) = self.seen.get_mut(l) {
                        *entry = Some(Seen {
                            extent: if j == 0 { extent } else { 1 },
                            op: k,
                            pos: g.pos,
                        });
                    }
                }
                continue;
            }
            if !unknown.is_empty() {
                // The parser rejects groups left with unknowns (`pattern::two_unknowns`).
                return Err(ctx.err(
                    Code::Internal,
                    g.pos,
                    format!("einsum group `{text}` left with unknown extents after parsing"),
                    "unknown extents",
                ));
            }
            let known = group_known(ctx, g, ids, &self.seen)?;
            if known != extent {
                let factors: Vec<String> = ids
                    .iter()
                    .filter_map(|&l| Some((self.names.get(l)?, self.seen.get(l)?.as_ref()?)))
                    .map(|(n, s)| format!("{n}={}", s.extent))
                    .collect();
                return Err(ctx
                    .err(
                        Code::ExtentMismatch,
                        g.pos,
                        format!(
                            "`{text}` has extent {}, but axis {} of einsum operand {} has extent {extent}",
                            product_text(&factors, known),
                            c.slot,
                            k + 1
                        ),
                        &format!("extent {known}, operand has {extent}"),
                    )
                    .help(format!("shape of operand {} is {}", k + 1, operand(self.operands, k))));
            }
        }

        Ok(())
    }

    /// The spec: each operand's slots as label lists, the output's groups, the label extents.
    fn assemble(self) -> Result<EinsumSpec, Diagnostic> {
        let Resolver {
            ctx,
            operands,
            ops,
            out,
            layouts,
            ell_width,
            n_ell,
            ell_ext,
            names,
            seen,
            ell_base,
            ..
        } = self;
        let label_id = |name: &str| label_of(&names, name);
        let ell_label = |g: usize| ell_base.unwrap_or(0) + g;
        let mut spec_ops: Vec<Vec<EinsumSlot>> = Vec::new();
        for (k, side) in ops.iter().enumerate() {
            let width = ell_width.get(k).copied().unwrap_or(0);
            let mut slots = Vec::new();
            for s in layouts.get(k).into_iter().flatten() {
                let Some(g) = side.groups.get(s.group) else {
                    continue;
                };
                if g.is_bare_ellipsis() {
                    for j in 0..s.count {
                        let gi = n_ell - width + j;
                        let label_extent = ell_ext.get(gi).copied().flatten().map_or(1, |(x, _)| x);
                        let x = slot_extent(operand(operands, k), s.first + j);
                        slots.push(EinsumSlot {
                            labels: vec![ell_label(gi)],
                            broadcast: x == 1 && label_extent != 1,
                        });
                    }
                } else {
                    slots.push(EinsumSlot {
                        labels: group_labels(&names, g),
                        broadcast: false,
                    });
                }
            }
            spec_ops.push(slots);
        }
        let mut output: Vec<Vec<usize>> = Vec::new();
        for g in &out.groups {
            if g.is_bare_ellipsis() {
                output.extend((0..n_ell).map(|gi| vec![ell_label(gi)]));
                continue;
            }
            let mut ids = Vec::new();
            for a in &g.atoms {
                match &a.kind {
                    AtomKind::Name(n) => ids.extend(label_id(n)),
                    AtomKind::Ellipsis => ids.extend((0..n_ell).map(ell_label)),
                    AtomKind::Number(_) => {}
                }
            }
            let extent = checked_product(
                ids.iter()
                    .map(|&l| seen.get(l).copied().flatten().map_or(1, |s| s.extent)),
            );
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
            output.push(ids);
        }
        let spec = EinsumSpec {
            labels: names
                .iter()
                .zip(&seen)
                .map(|(n, s)| (n.clone(), s.map_or(1, |s| s.extent)))
                .collect(),
            operands: spec_ops,
            output,
        };
        if total_elems(&spec.out_extents()).is_none() {
            return Err(ctx.err(
                Code::SizeOverflow,
                ctx.trim(out.pos),
                "the einsum output has more than 2^64 elements".to_string(),
                "overflows u64",
            ));
        }
        Ok(spec)
    }
}

/// The id of label `name` in the label table.
fn label_of(names: &[String], name: &str) -> Option<usize> {
    names.iter().position(|l| l == name)
}

/// The label ids of a group's named atoms, in order.
fn group_labels(names: &[String], g: &Group) -> Vec<usize> {
    g.atoms
        .iter()
        .filter_map(|a| a.name().and_then(|n| label_of(names, n)))
        .collect()
}

/// A composed group of an operand: the operand, the group, its slot's extent, the slot, and
/// the group's label ids.
struct Composed<'a> {
    k: usize,
    g: &'a Group,
    extent: u64,
    slot: usize,
    ids: Vec<usize>,
}

/// The composed (multi-label) groups of every operand: operand, group, slot extent, slot.
fn composed_groups<'s>(
    ops: &'s [Side],
    layouts: &[Vec<OpSlots>],
    operands: &[Shape],
) -> Vec<(usize, &'s Group, u64, usize)> {
    ops.iter()
        .enumerate()
        .flat_map(|(k, side)| {
            layouts.get(k).into_iter().flatten().filter_map(move |s| {
                let g = side.groups.get(s.group)?;
                (!g.is_bare_ellipsis() && g.atoms.len() != 1)
                    .then(|| (k, g, slot_extent(operand(operands, k), s.first), s.first))
            })
        })
        .collect()
}

/// Product of the known label extents of a group (unknown ones count as 1).
pub(super) fn group_known(
    ctx: &Ctx,
    g: &Group,
    ids: &[usize],
    seen: &[Option<Seen>],
) -> Result<u64, Diagnostic> {
    checked_product(
        ids.iter()
            .filter_map(|&l| seen.get(l).copied().flatten())
            .map(|s| s.extent),
    )
    .ok_or_else(|| {
        ctx.err(
            Code::SizeOverflow,
            g.pos,
            format!(
                "the label extents in `{}` multiply past 2^64",
                ctx.text(g.pos)
            ),
            "overflows u64",
        )
    })
}

/// Checks a second sighting of a label against the first.
pub(super) fn unify(ctx: &Ctx, name: &str, prev: &Seen, now: &Seen) -> Result<(), Diagnostic> {
    if prev.extent == now.extent {
        return Ok(());
    }
    let (x, y) = (prev.extent, now.extent);
    if x == 1 || y == 1 {
        let (one, big) = if y == 1 { (now, prev) } else { (prev, now) };
        return Err(ctx
            .err(
                Code::PatternBroadcast,
                one.pos,
                format!(
                    "label `{name}` has extent 1 in einsum operand {} but {} in operand {}; named labels are not broadcast",
                    one.op + 1,
                    big.extent,
                    big.op + 1
                ),
                "extent 1",
            )
            .label(ctx.span(big.pos), format!("extent {}", big.extent))
            .help("use `...` for broadcast axes, or drop the unit axis first (rearrange `a 1 -> a`)"));
    }
    let message = if prev.op == now.op {
        format!(
            "label `{name}` appears twice in einsum operand {} with extents {x} and {y}; a repeated label takes the diagonal, so they must agree",
            now.op + 1
        )
    } else {
        format!(
            "label `{name}` has extent {x} in einsum operand {} but {y} in operand {}",
            prev.op + 1,
            now.op + 1
        )
    };
    Err(ctx
        .err(
            Code::ExtentMismatch,
            now.pos,
            message,
            &format!("extent {y}"),
        )
        .label(ctx.span(prev.pos), format!("extent {x}")))
}
