//! einops patterns: `rearrange`, `reduce` and `repeat` (einops 0.8's `parsing.py` and
//! `_prepare_transformation_recipe` rules, as far as they need no shape).

use super::parse::{find_arrow, parse_side, Text, EINOPS};
use super::{
    check_keywords, ticked, Atom, AtomKind, Keyword, PatternCode, PatternError, PatternOp, Pos,
    Side,
};

/// A parsed and checked einops pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Einops {
    pub op: PatternOp,
    pub left: Side,
    pub right: Side,
    /// Where `->` starts.
    pub arrow: usize,
}

/// Parses an einops pattern for `op` and checks every rule that needs no shape, with the
/// call's axis-length keywords (in the order given; errors about one say `At::Keyword(i)`).
pub fn parse_einops(
    op: PatternOp,
    pattern: &str,
    kwargs: &[Keyword<'_>],
) -> Result<Einops, PatternError> {
    let t = Text { pattern };
    let Some(arrow) = find_arrow(&t)? else {
        let shown = t.text(t.trim(t.whole()));
        return Err(t
            .err(
                PatternCode::MissingArrow,
                t.whole(),
                format!("{} pattern `{pattern}` has no `->`", op.name()),
                "no `->` here",
            )
            .help(format!(
                "write the input axes, `->`, then the output axes: \"{shown} -> {shown}\""
            )));
    };
    let left = parse_side(&t, Pos::new(0, arrow), EINOPS)?;
    let right = parse_side(&t, Pos::new(arrow + 2, pattern.len()), EINOPS)?;
    let e = Einops {
        op,
        left,
        right,
        arrow,
    };
    let given = |name: &str| kwargs.iter().any(|k| k.name == name);
    e.check_ellipses(&t)?;
    e.check_axis_sets(&t, &given)?;
    e.check_kwargs(&t, kwargs)?;
    e.check_unknowns(&t, &given)?;
    Ok(e)
}

impl Einops {
    /// einops' ellipsis rules.
    fn check_ellipses(&self, t: &Text) -> Result<(), PatternError> {
        let (left, op) = (&self.left, self.op);
        let l = left.ellipsis();
        let r = self.right.ellipsis();
        if let (None, Some((_, a))) = (l, r) {
            return Err(t
                .err(
                    PatternCode::Ellipsis,
                    a.pos,
                    "`...` on the right side of the pattern but not on the left".to_string(),
                    "`...` only on the right",
                )
                .help("`...` stands for input axes; put it on the left side too"));
        }
        let Some((g, a)) = l else {
            return Ok(());
        };
        if left.groups.get(g).is_some_and(|g| g.paren) {
            return Err(t
                .err(
                    PatternCode::Ellipsis,
                    a.pos,
                    "`...` inside parentheses on the left side of the pattern".to_string(),
                    "`...` in a group",
                )
                .help(
                    "on the left, `...` must stand alone; it may be grouped on the right: `b ... -> b (...)`",
                ));
        }
        if r.is_none() && op != PatternOp::Reduce {
            return Err(t
                .err(
                    PatternCode::Ellipsis,
                    a.pos,
                    format!(
                        "`...` on the left side of the {} pattern but not on the right",
                        op.name()
                    ),
                    "`...` only on the left",
                )
                .help("add `...` to the right side; only reduce may drop the `...` axes"));
        }
        Ok(())
    }

    /// Which axes may appear on which side, per operation (einops' identifier checks).
    fn check_axis_sets(&self, t: &Text, given: &dyn Fn(&str) -> bool) -> Result<(), PatternError> {
        let (left, right, op) = (&self.left, &self.right, self.op);
        let anon = |a: &Atom, side: &str, help: &str| {
            t.err(
                PatternCode::Anonymous,
                a.pos,
                format!(
                    "numeric axis `{}` on the {side} side of {}",
                    t.text(a.pos),
                    op.name()
                ),
                "numeric axis",
            )
            .help(help.to_string())
        };
        let one_side = |a: &Atom, message: String, label: &str, help: String| {
            t.err(PatternCode::AxisOneSide, a.pos, message, label)
                .help(help)
        };
        let number = |s: &Side| {
            s.atoms()
                .find(|a| matches!(a.kind, AtomKind::Number(_)))
                .cloned()
        };
        match op {
            PatternOp::Rearrange => {
                for (side, s) in [("left", left), ("right", right)] {
                    if let Some(a) = number(s) {
                        return Err(anon(
                            &a,
                            side,
                            "rearrange allows only `1` as a numeric axis; use reduce to pool over it or repeat to add it",
                        ));
                    }
                }
                if let Some((n, a)) = left.names().find(|(n, _)| !right.has_name(n)) {
                    return Err(one_side(
                        a,
                        format!("axis `{n}` is on the left side of the rearrange pattern but not on the right"),
                        "only on the left",
                        format!("rearrange keeps every axis: add `{n}` to the right side, or use reduce to remove it"),
                    ));
                }
                if let Some((n, a)) = right.names().find(|(n, _)| !left.has_name(n)) {
                    return Err(one_side(
                        a,
                        format!("axis `{n}` is on the right side of the rearrange pattern but not on the left"),
                        "only on the right",
                        format!("rearrange keeps every axis: add `{n}` to the left side, or use repeat to create it"),
                    ));
                }
            }
            PatternOp::Reduce => {
                for a in right.atoms() {
                    match &a.kind {
                        AtomKind::Number(_) => return Err(anon(
                            a,
                            "right",
                            "reduce cannot create axes; write `1` for a unit axis or use repeat",
                        )),
                        AtomKind::Name(n) if !left.has_name(n) => {
                            return Err(one_side(
                                a,
                                format!("axis `{n}` is on the right side of the reduce pattern but not on the left"),
                                "not in the input",
                                "reduce only removes axes; the output axes must come from the left side".to_string(),
                            ));
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
                            return Err(one_side(
                                a,
                                format!("axis `{n}` is on the left side of the repeat pattern but not on the right"),
                                "dropped",
                                format!("repeat keeps every input axis: add `{n}` to the right side, or use reduce to remove it"),
                            ));
                        }
                        _ => {}
                    }
                }
                if let Some((n, a)) = right.names().find(|(n, _)| !left.has_name(n) && !given(n)) {
                    return Err(t
                        .err(
                            PatternCode::UnknownExtent,
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
        Ok(())
    }

    /// einops' checks of the axis-length keyword arguments.
    fn check_kwargs(&self, t: &Text, kwargs: &[Keyword<'_>]) -> Result<(), PatternError> {
        let mut axes: Vec<&str> = Vec::new();
        for (n, _) in self.left.names().chain(self.right.names()) {
            if !axes.contains(&n) {
                axes.push(n);
            }
        }
        check_keywords(t, kwargs, &axes, "axis of the pattern", "axes")
    }

    /// At most one unknown length per input group.
    fn check_unknowns(&self, t: &Text, given: &dyn Fn(&str) -> bool) -> Result<(), PatternError> {
        for g in &self.left.groups {
            let unknown: Vec<&str> = g.names().filter(|n| !given(n)).collect();
            if unknown.len() > 1 {
                return Err(t
                    .err(
                        PatternCode::TwoUnknowns,
                        g.pos,
                        format!(
                            "cannot infer the lengths of {} in `{}`: at most one axis of a group may be unknown",
                            ticked(&unknown),
                            t.text(g.pos)
                        ),
                        "several unknown lengths",
                    )
                    .help(format!(
                        "pass all but one as keyword arguments, e.g. `{}=2`",
                        unknown[0]
                    )));
            }
        }
        Ok(())
    }
}
