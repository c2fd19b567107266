//! tdsl's einsum patterns: numpy's einsum over space-separated labels, with einops-style
//! composition `(h d)` in operands and output, and axis-length keywords (`h=4`).

use super::parse::{find_arrow, parse_side, Text, EINSUM_IN, EINSUM_OUT};
use super::{check_keywords, plural, ticked, Group, Keyword, PatternCode, PatternError, Pos, Side};

/// A parsed and checked einsum pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Einsum {
    pub operands: Vec<Side>,
    pub output: Side,
    /// Where `->` starts.
    pub arrow: usize,
}

/// Parses an einsum pattern in tdsl's form (labels separated by spaces; numpy's one-letter
/// subscripts go through [`super::numpy_subscripts`] first) and checks every rule that needs
/// no shape: with `n_operands`, the operand count; every output label in some operand; the
/// keywords; at most one label of a composed group left unknown once plain slots, keywords and
/// other groups have given theirs.
pub fn parse_einsum(
    pattern: &str,
    n_operands: Option<usize>,
    kwargs: &[Keyword<'_>],
) -> Result<Einsum, PatternError> {
    let t = Text { pattern };
    let arrow = find_arrow(&t)?;
    let operands = parse_operands(&t, arrow)?;
    let Some(arrow) = arrow else {
        return Err(t
            .err(
                PatternCode::MissingArrow,
                t.whole(),
                format!("einsum pattern `{pattern}` has no `->`"),
                "no `->` here",
            )
            .help(format!(
                "write it with an explicit output: \"{}\"",
                implicit_pattern(&t, &operands)
            )));
    };
    let output = parse_side(&t, Pos::new(arrow + 2, pattern.len()), EINSUM_OUT)?;
    let e = Einsum {
        operands,
        output,
        arrow,
    };
    if let Some(n) = n_operands {
        e.check_count(&t, n)?;
    }
    e.check_output(&t)?;
    let labels = e.labels();
    check_keywords(&t, kwargs, &labels, "label of the einsum pattern", "labels")?;
    e.check_unknowns(&t, kwargs)?;
    Ok(e)
}

/// The operands, split at commas; none may be empty, and `...` stands alone in them.
fn parse_operands(t: &Text, arrow: Option<usize>) -> Result<Vec<Side>, PatternError> {
    let in_end = arrow.unwrap_or(t.pattern.len());
    let mut ops: Vec<Side> = Vec::new();
    let mut start = 0usize;
    let commas: Vec<usize> = t
        .pattern
        .get(..in_end)
        .unwrap_or("")
        .match_indices(',')
        .map(|(i, _)| i)
        .collect();
    for end in commas.iter().copied().chain(std::iter::once(in_end)) {
        let pos = Pos::new(start, end);
        if t.text(pos).trim_matches(' ').is_empty() {
            let at = if pos.lo < pos.hi {
                pos
            } else if end < in_end {
                Pos::new(end, end + 1)
            } else if start > 0 {
                Pos::new(start - 1, start)
            } else if let Some(a) = arrow {
                Pos::new(a, a + 2)
            } else {
                pos
            };
            return Err(t
                .err(
                    PatternCode::Syntax,
                    at,
                    format!("einsum operand {} has no axes", ops.len() + 1),
                    "empty operand",
                )
                .help("write the operand's axis labels; scalar operands are not supported"));
        }
        let side = parse_side(t, pos, EINSUM_IN)?;
        if let Some((g, a)) = side.ellipsis() {
            if side.groups.get(g).is_some_and(|g| g.paren) {
                return Err(t
                    .err(
                        PatternCode::Ellipsis,
                        a.pos,
                        "`...` inside parentheses in an einsum operand".to_string(),
                        "`...` in a group",
                    )
                    .help("in an operand `...` must stand alone; it may be grouped in the output: `-> b (...)`"));
            }
        }
        ops.push(side);
        start = end + 1;
    }
    Ok(ops)
}

/// `pattern has 2 operands but 3 were passed`, pointing at the operands.
pub(super) fn count_error(t: &Text, end: usize, have: usize, given: usize) -> PatternError {
    t.err(
        PatternCode::Operands,
        t.trim(Pos::new(0, end)),
        format!(
            "einsum pattern has {have} operand{} but {given} {} passed",
            plural(have),
            if given == 1 { "was" } else { "were" },
        ),
        format!("{have} operand{}", plural(have)),
    )
}

impl Einsum {
    fn check_count(&self, t: &Text, n: usize) -> Result<(), PatternError> {
        if self.operands.len() == n {
            return Ok(());
        }
        Err(count_error(t, self.arrow, self.operands.len(), n))
    }

    fn check_output(&self, t: &Text) -> Result<(), PatternError> {
        for (n, a) in self.output.names() {
            if !self.operands.iter().any(|s| s.has_name(n)) {
                return Err(t
                    .err(
                        PatternCode::AxisOneSide,
                        a.pos,
                        format!("output label `{n}` appears in no operand"),
                        "not in any operand",
                    )
                    .help("every output label must come from an operand"));
            }
        }
        Ok(())
    }

    /// The operands' labels in first-appearance order (the output has no others).
    pub fn labels(&self) -> Vec<&str> {
        let mut labels: Vec<&str> = Vec::new();
        for (n, _) in self.operands.iter().flat_map(|s| s.names()) {
            if !labels.contains(&n) {
                labels.push(n);
            }
        }
        labels
    }

    /// The composed groups of the operands: not a bare `...`, not a single label.
    pub fn composed(&self) -> impl Iterator<Item = &Group> {
        self.operands
            .iter()
            .flat_map(|s| s.groups.iter())
            .filter(|g| !g.is_bare_ellipsis() && g.atoms.len() != 1)
    }

    /// Whether the labels of group `g` appear only in groups identical to `g` (same labels in
    /// the same order), in every operand and in the output: `"b (h d), (h d) o -> b o"`. Such a
    /// group needs no split, and every split gives the same result.
    pub fn used_whole(&self, g: &Group) -> bool {
        let mine: Vec<&str> = g.names().collect();
        if mine.len() < 2 || mine.len() != g.atoms.len() {
            return false;
        }
        self.operands
            .iter()
            .chain([&self.output])
            .flat_map(|s| s.groups.iter())
            .all(|h| {
                let theirs: Vec<&str> = h.names().collect();
                theirs == mine || theirs.iter().all(|n| !mine.contains(n))
            })
    }

    /// Which labels become known does not depend on the extents: a label is known once it
    /// fills a slot alone, has a keyword length, or is the last unknown of a composed group
    /// (to a fixed point). A group with unknowns left must be used whole.
    fn check_unknowns(&self, t: &Text, kwargs: &[Keyword<'_>]) -> Result<(), PatternError> {
        let mut known: Vec<&str> = kwargs.iter().map(|k| k.name).collect();
        for g in self.operands.iter().flat_map(|s| s.groups.iter()) {
            if let [a] = g.atoms.as_slice() {
                known.extend(a.name());
            }
        }
        let unknown_of = |g: &Group, known: &[&str]| -> Vec<String> {
            g.names()
                .filter(|n| !known.contains(n))
                .map(str::to_string)
                .collect()
        };
        loop {
            let mut changed = false;
            for g in self.composed() {
                if let [u] = unknown_of(g, &known).as_slice() {
                    let name = g.names().find(|n| n == u).unwrap_or_default();
                    known.push(name);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        for g in self.composed() {
            let unknown = unknown_of(g, &known);
            if unknown.is_empty() || self.used_whole(g) {
                continue;
            }
            let names: Vec<&str> = unknown.iter().map(String::as_str).collect();
            return Err(t
                .err(
                    PatternCode::TwoUnknowns,
                    g.pos,
                    format!(
                        "cannot infer the extents of {} in `{}`: at most one label of a group may be unknown",
                        ticked(&names),
                        t.text(g.pos)
                    ),
                    "several unknown extents",
                )
                .help("give all but one of them a plain axis of their own in some operand, or its length as a keyword (`h=4`)"));
        }
        Ok(())
    }
}

/// The explicit form of numpy's implicit output: labels used exactly once, sorted, `...` first.
fn implicit_pattern(t: &Text, ops: &[Side]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for (n, _) in ops.iter().flat_map(|s| s.names()) {
        match counts.iter_mut().find(|(c, _)| *c == n) {
            Some((_, k)) => *k += 1,
            None => counts.push((n, 1)),
        }
    }
    let mut once: Vec<&str> = counts
        .into_iter()
        .filter(|&(_, k)| k == 1)
        .map(|(n, _)| n)
        .collect();
    once.sort_unstable();
    let mut out: Vec<&str> = Vec::new();
    if ops.iter().any(|s| s.ellipsis().is_some()) {
        out.push("...");
    }
    out.extend(once);
    let inputs: Vec<&str> = ops.iter().map(|s| t.text(t.trim(s.pos))).collect();
    format!("{} -> {}", inputs.join(", "), out.join(" "))
        .trim_end()
        .to_string()
}
