//! The pattern engine: parses einops-style pattern strings and tdsl's einsum patterns,
//! validates them, and resolves them against input shapes.
//!
//! * [`resolve_pattern`] handles `rearrange`, `reduce` and `repeat`. It follows einops 0.8
//!   (`einops/parsing.py` and `_prepare_transformation_recipe` / `_reconstruct_from_shape` in
//!   `einops/einops.py`) rule for rule: identifiers, `(h w)` composition, `1` and `()` unit
//!   axes, numeric anonymous axes, one `...` per side, axis-length keyword arguments and one
//!   inferred unknown per input group. The result is a [`Recipe`].
//! * [`resolve_einsum`] handles tdsl's einsum: numpy's `einsum` (with its default
//!   `optimize=False` semantics) over space-separated multi-letter labels, plus einops-style
//!   composition `(h d)` in operands and output. The result is an [`EinsumSpec`].
//!
//! Every error is a [`Diagnostic`] whose first label underlines the offending part of the
//! pattern (or the offending keyword argument). Codes used:
//!
//! | code | when |
//! |---|---|
//! | `PatternSyntax` | bad character, bad name, unbalanced / nested parentheses, stray `.`, two `->`, empty einsum operand |
//! | `PatternMissingArrow` | no `->` (einsum: the help spells out numpy's implicit output) |
//! | `PatternEllipsis` | `...` twice, in parentheses on an input side, on one side only, or einsum broadcast axes missing from the output |
//! | `PatternDuplicateAxis` | a name twice on one side (einsum: twice in one group or in the output) |
//! | `PatternAxisOneSide` | rearrange axis on one side only, reduce output axis not in the input, repeat input axis dropped, einsum output label in no operand |
//! | `PatternAnonymous` | numeric axis where einops forbids it; any number in einsum |
//! | `PatternRank` | the pattern's axis count does not fit the input rank |
//! | `PatternTwoUnknowns` | more than one axis of a group has no known length |
//! | `PatternIndivisible` | a group's extent is not divisible by its known lengths |
//! | `PatternUnusedKwarg` | an axis length names no axis of the pattern |
//! | `PatternBadKwarg` | an axis length is 0, not a valid axis name, or given twice |
//! | `PatternOperands` | einsum operand count differs from the pattern's |
//! | `PatternBroadcast` | an einsum label has extent 1 in one place and another extent elsewhere |
//! | `BroadcastMismatch` | einsum `...` axes that numpy cannot broadcast together |
//! | `ExtentMismatch` | a fully known group (or unit `1`/`()`) disagrees with the input; einsum label extents disagree |
//! | `UnknownExtent` | a new repeat axis has no length |
//! | `ZeroExtent` | a numeric axis `0`; an einsum label that cannot be inferred because its group partners have extent 0 |
//! | `SizeOverflow` | a product of extents (or a numeric axis) does not fit in u64 |
//!
//! Deliberate differences from einops: names are ASCII identifiers (einops accepts any Python
//! identifier), and axis lengths must be at least 1 (einops lets `repeat` build an empty axis
//! from `c=0`). Differences from numpy: labels are names separated by spaces, scalar operands
//! (empty operand patterns) are rejected, `->` is mandatory, and a named label of extent 1 is
//! never silently broadcast against a larger extent.

use crate::check::types::{EinsumSlot, EinsumSpec, OutElem, Recipe, Shape};
use crate::diag::{Code, Diagnostic};
use tdsl_syntax::Span;

/// Which einops operation a pattern belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PatternOp {
    Rearrange,
    Reduce,
    Repeat,
}

impl PatternOp {
    fn name(self) -> &'static str {
        match self {
            PatternOp::Rearrange => "rearrange",
            PatternOp::Reduce => "reduce",
            PatternOp::Repeat => "repeat",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

/// A byte range `lo..hi` of the pattern string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pos {
    lo: usize,
    hi: usize,
}

impl Pos {
    fn new(lo: usize, hi: usize) -> Pos {
        Pos { lo, hi }
    }
}

/// One token of a pattern side.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AtomKind {
    Name(String),
    /// A numeric anonymous axis of length ≥ 2 (a `1` is a unit and never becomes an atom).
    Number(u64),
    Ellipsis,
}

#[derive(Debug, Clone)]
struct Atom {
    kind: AtomKind,
    pos: Pos,
}

impl Atom {
    fn name(&self) -> Option<&str> {
        match &self.kind {
            AtomKind::Name(n) => Some(n),
            _ => None,
        }
    }
}

/// One slot of a side: a parenthesized group, a single bare atom, or a bare unit `1` (no atoms).
#[derive(Debug, Clone)]
struct Group {
    atoms: Vec<Atom>,
    paren: bool,
    pos: Pos,
}

impl Group {
    /// A bare `...` (standing for zero or more slots).
    fn is_bare_ellipsis(&self) -> bool {
        !self.paren && matches!(self.atoms.as_slice(), [a] if a.kind == AtomKind::Ellipsis)
    }
}

/// One side of a pattern (or one einsum operand): its groups and the text it spans.
#[derive(Debug, Clone)]
struct Side {
    groups: Vec<Group>,
    pos: Pos,
}

impl Side {
    fn atoms(&self) -> impl Iterator<Item = &Atom> {
        self.groups.iter().flat_map(|g| g.atoms.iter())
    }

    fn names(&self) -> impl Iterator<Item = (&str, &Atom)> {
        self.atoms().filter_map(|a| a.name().map(|n| (n, a)))
    }

    fn has_name(&self, name: &str) -> bool {
        self.names().any(|(n, _)| n == name)
    }

    /// The group holding `...` and the `...` atom itself.
    fn ellipsis(&self) -> Option<(usize, &Atom)> {
        self.groups.iter().enumerate().find_map(|(i, g)| {
            g.atoms
                .iter()
                .find(|a| a.kind == AtomKind::Ellipsis)
                .map(|a| (i, a))
        })
    }
}

/// The pattern text and where it sits in the script.
struct Ctx<'a> {
    pattern: &'a str,
    base: Span,
    /// For a numpy-style einsum pattern read with spaces put between its letters: the byte
    /// offset in the written pattern of each byte of `pattern` (and of its end).
    map: Option<Vec<usize>>,
}

impl Ctx<'_> {
    fn span(&self, p: Pos) -> Span {
        match &self.map {
            None => self.base.sub(p.lo, p.hi),
            Some(m) => {
                let end = m.last().copied().unwrap_or(0);
                let at = |i: usize| m.get(i).copied().unwrap_or(end).min(end);
                let lo = at(p.lo);
                let hi = if p.hi > p.lo {
                    (at(p.hi - 1) + 1).min(end)
                } else {
                    lo
                };
                if hi <= lo && p.hi > p.lo {
                    // Text that was not written (numpy's implicit output): the whole pattern.
                    return self.base.sub(0, end);
                }
                self.base.sub(lo, hi.max(lo))
            }
        }
    }

    fn text(&self, p: Pos) -> &str {
        self.pattern.get(p.lo..p.hi).unwrap_or("")
    }

    /// `p` without leading and trailing spaces.
    fn trim(&self, p: Pos) -> Pos {
        let t = self.text(p);
        let lead = t.len() - t.trim_start_matches(' ').len();
        let body = t.trim_matches(' ').len();
        Pos::new(p.lo + lead, p.lo + lead + body)
    }

    fn err(&self, code: Code, p: Pos, message: String, label: &str) -> Diagnostic {
        Diagnostic::new(code, message).label(self.span(p), label)
    }

    fn whole(&self) -> Pos {
        Pos::new(0, self.pattern.len())
    }
}

/// What a side may contain.
#[derive(Clone, Copy)]
struct Syntax {
    /// Numeric axes (`1`, `2`, …) are allowed.
    numbers: bool,
    /// A name may appear in several groups (einsum diagonals), though never twice in one group.
    repeats: bool,
}

const EINOPS: Syntax = Syntax {
    numbers: true,
    repeats: false,
};
const EINSUM_IN: Syntax = Syntax {
    numbers: false,
    repeats: true,
};
const EINSUM_OUT: Syntax = Syntax {
    numbers: false,
    repeats: false,
};

/// einops' axis-name rule, restricted to ASCII: a Python identifier that does not start or
/// end with `_`. `Err` carries the reason.
fn check_name(name: &str) -> Result<(), &'static str> {
    let first = name.bytes().next();
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') || first.is_none() {
        return Err("axis names are made of letters, digits and `_`");
    }
    if first.is_some_and(|b| b.is_ascii_digit()) {
        return Err("axis names cannot start with a digit");
    }
    if name.starts_with('_') || name.ends_with('_') {
        return Err("axis names cannot start or end with `_`");
    }
    Ok(())
}

struct SideParser<'c, 'a> {
    ctx: &'c Ctx<'a>,
    syntax: Syntax,
    groups: Vec<Group>,
    open: Option<(usize, Vec<Atom>)>,
}

impl SideParser<'_, '_> {
    fn token(&mut self, lo: usize, hi: usize) -> Result<(), Diagnostic> {
        let ctx = self.ctx;
        let pos = Pos::new(lo, hi);
        let text = ctx.text(pos);
        let kind = if text == "..." {
            AtomKind::Ellipsis
        } else if text.contains('.') {
            return Err(ctx
                .err(
                    Code::PatternSyntax,
                    pos,
                    format!("invalid axis `{text}`: `...` must stand apart from names"),
                    "invalid axis",
                )
                .help("separate `...` from axis names with a space"));
        } else if text.bytes().all(|b| b.is_ascii_digit()) {
            if !self.syntax.numbers {
                return Err(ctx
                    .err(
                        Code::PatternAnonymous,
                        pos,
                        format!("einsum labels must be names, not numbers: `{text}`"),
                        "number",
                    )
                    .help("name the axis; write `()` for a unit axis"));
            }
            let digits = text.trim_start_matches('0');
            if digits.is_empty() {
                return Err(ctx
                    .err(
                        Code::ZeroExtent,
                        pos,
                        format!("anonymous axis `{text}` has length 0; it must be positive"),
                        "length 0",
                    )
                    .help("remove it, or write `1` (or `()`) for a unit axis"));
            }
            let Ok(value) = digits.parse::<u64>() else {
                return Err(ctx.err(
                    Code::SizeOverflow,
                    pos,
                    format!("anonymous axis `{text}` does not fit in 64 bits"),
                    "too large",
                ));
            };
            if value == 1 {
                // A unit axis: a slot of its own at the top level, nothing inside parentheses.
                if self.open.is_none() {
                    self.groups.push(Group {
                        atoms: Vec::new(),
                        paren: false,
                        pos,
                    });
                }
                return Ok(());
            }
            AtomKind::Number(value)
        } else {
            if let Err(reason) = check_name(text) {
                return Err(ctx.err(
                    Code::PatternSyntax,
                    pos,
                    format!("invalid axis name `{text}`: {reason}"),
                    "invalid name",
                ));
            }
            let in_open = self
                .open
                .iter()
                .flat_map(|(_, atoms)| atoms.iter())
                .find(|a| a.name() == Some(text));
            let earlier = in_open.or_else(|| {
                if self.syntax.repeats {
                    None
                } else {
                    self.groups
                        .iter()
                        .flat_map(|g| g.atoms.iter())
                        .find(|a| a.name() == Some(text))
                }
            });
            if let Some(first) = earlier {
                let where_ = if self.syntax.repeats {
                    "one group"
                } else {
                    "one side of the pattern"
                };
                return Err(ctx
                    .err(
                        Code::PatternDuplicateAxis,
                        pos,
                        format!("axis `{text}` appears twice in {where_}"),
                        "second occurrence",
                    )
                    .label(ctx.span(first.pos), "first occurrence")
                    .help("give each axis its own name"));
            }
            AtomKind::Name(text.to_string())
        };
        let atom = Atom { kind, pos };
        match &mut self.open {
            Some((_, atoms)) => atoms.push(atom),
            None => self.groups.push(Group {
                atoms: vec![atom],
                paren: false,
                pos,
            }),
        }
        Ok(())
    }
}

/// Checks the dots of a side: only one `...` and no other `.`.
fn check_dots(ctx: &Ctx, side: Pos) -> Result<(), Diagnostic> {
    let text = ctx.text(side);
    if !text.contains('.') {
        return Ok(());
    }
    let Some(first) = text.find("...") else {
        let at = text.find('.').unwrap_or(0);
        return Err(ctx
            .err(
                Code::PatternSyntax,
                Pos::new(side.lo + at, side.lo + at + 1),
                "`.` may only appear as part of `...`".to_string(),
                "stray `.`",
            )
            .help("write `...` (three dots) for the remaining axes"));
    };
    let after = first + 3;
    if let Some(second) = text.get(after..).and_then(|t| t.find("...")) {
        let lo = side.lo + after + second;
        return Err(ctx
            .err(
                Code::PatternEllipsis,
                Pos::new(lo, lo + 3),
                "`...` appears twice on one side of the pattern".to_string(),
                "second `...`",
            )
            .label(
                ctx.span(Pos::new(side.lo + first, side.lo + after)),
                "first `...`",
            )
            .help("use `...` at most once per side"));
    }
    if let Some((i, _)) = text
        .char_indices()
        .find(|&(i, c)| c == '.' && (i < first || i >= after))
    {
        return Err(ctx
            .err(
                Code::PatternSyntax,
                Pos::new(side.lo + i, side.lo + i + 1),
                "`.` may only appear as part of `...`".to_string(),
                "stray `.`",
            )
            .help("write exactly three dots: `...`"));
    }
    Ok(())
}

/// Parses the text at `side` into groups.
fn parse_side(ctx: &Ctx, side: Pos, syntax: Syntax) -> Result<Side, Diagnostic> {
    check_dots(ctx, side)?;
    let mut p = SideParser {
        ctx,
        syntax,
        groups: Vec::new(),
        open: None,
    };
    let mut token: Option<usize> = None;
    for (i, c) in ctx.text(side).char_indices() {
        let at = side.lo + i;
        match c {
            '(' | ')' | ' ' => {
                if let Some(start) = token.take() {
                    p.token(start, at)?;
                }
                if c == '(' {
                    if let Some((open, _)) = &p.open {
                        return Err(ctx
                            .err(
                                Code::PatternSyntax,
                                Pos::new(at, at + 1),
                                "nested parentheses: axis composition is one level deep"
                                    .to_string(),
                                "nested `(`",
                            )
                            .label(ctx.span(Pos::new(*open, *open + 1)), "inside this group")
                            .help("flatten the group: `(a b c)` instead of `(a (b c))`"));
                    }
                    p.open = Some((at, Vec::new()));
                } else if c == ')' {
                    let Some((open, atoms)) = p.open.take() else {
                        return Err(ctx.err(
                            Code::PatternSyntax,
                            Pos::new(at, at + 1),
                            "unbalanced parentheses: `)` without `(`".to_string(),
                            "no matching `(`",
                        ));
                    };
                    p.groups.push(Group {
                        atoms,
                        paren: true,
                        pos: Pos::new(open, at + 1),
                    });
                }
            }
            c if c.is_ascii_alphanumeric() || c == '_' || c == '.' => {
                token.get_or_insert(at);
            }
            _ => {
                let shown = if c.is_control() || c.is_whitespace() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                };
                let mut d = ctx.err(
                    Code::PatternSyntax,
                    Pos::new(at, at + c.len_utf8()),
                    format!("unexpected character `{shown}` in pattern"),
                    "unexpected character",
                );
                if c.is_whitespace() {
                    d = d.help("separate axes with plain spaces");
                } else if !c.is_ascii() {
                    d = d.help("axis names are ASCII letters, digits and `_`");
                }
                return Err(d);
            }
        }
    }
    if let Some(start) = token.take() {
        p.token(start, side.hi)?;
    }
    if let Some((open, _)) = p.open {
        return Err(ctx.err(
            Code::PatternSyntax,
            Pos::new(open, open + 1),
            "unbalanced parentheses: `(` is never closed".to_string(),
            "unclosed `(`",
        ));
    }
    Ok(Side {
        groups: p.groups,
        pos: side,
    })
}

/// The position of the single `->`; `Ok(None)` if there is none.
fn find_arrow(ctx: &Ctx) -> Result<Option<usize>, Diagnostic> {
    let mut arrows = ctx.pattern.match_indices("->").map(|(i, _)| i);
    let first = arrows.next();
    if let (Some(a), Some(b)) = (first, arrows.next()) {
        return Err(ctx
            .err(
                Code::PatternSyntax,
                Pos::new(b, b + 2),
                "a pattern has exactly one `->`, this one has more".to_string(),
                "second `->`",
            )
            .label(ctx.span(Pos::new(a, a + 2)), "first `->`"));
    }
    Ok(first)
}

/// `h=2 × w=4 = 8`; a single factor alone, `1` for none.
fn product_text(factors: &[String], product: u64) -> String {
    match factors {
        [] => "1".to_string(),
        [one] => one.clone(),
        _ => format!("{} = {product}", factors.join(" × ")),
    }
}

fn checked_product(values: impl IntoIterator<Item = u64>) -> Option<u64> {
    values
        .into_iter()
        .try_fold(1u64, |acc, v| acc.checked_mul(v))
}

/// Number of elements of a shape given by its extents: `None` on overflow (0 if any is 0).
fn total_elems(extents: &[u64]) -> Option<u64> {
    if extents.contains(&0) {
        Some(0)
    } else {
        checked_product(extents.iter().copied())
    }
}

/// `input axis 1 (`seq`)` / `input axis 1`.
fn slot_desc(what: &str, shape: &Shape, slot: usize) -> String {
    match shape.0.get(slot).and_then(|a| a.name.as_deref()) {
        Some(n) => format!("{what} axis {slot} (`{n}`)"),
        None => format!("{what} axis {slot}"),
    }
}

static NO_SHAPE: Shape = Shape(Vec::new());

/// Operand `k`'s shape (callers only ask for existing operands).
fn operand(operands: &[Shape], k: usize) -> &Shape {
    operands.get(k).unwrap_or(&NO_SHAPE)
}

fn slot_extent(shape: &Shape, slot: usize) -> u64 {
    shape.0.get(slot).map_or(1, |a| a.extent)
}

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
                        format!(
                            "unit axis `{text}` needs extent 1, but {here} has extent {extent}"
                        ),
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
                        "fix the axis lengths so that they multiply to the input extent"
                            .to_string(),
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
        in_groups.push(ids);
        slot += 1;
    }

    // Output groups.
    let right_has_ell = right.ellipsis().is_some();
    let find_in = |name: &str| elem_names.iter().position(|n| *n == Some(name));
    let mut out_groups: Vec<Vec<OutElem>> = Vec::new();
    let mut out_names: Vec<Option<String>> = Vec::new();
    for g in &right.groups {
        if g.is_bare_ellipsis() {
            for (&e, name) in ell_elems.iter().zip(&ell_names) {
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

/// einops' ellipsis rules that do not depend on the operation.
fn check_ellipses(ctx: &Ctx, op: PatternOp, left: &Side, right: &Side) -> Result<(), Diagnostic> {
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
fn check_axis_sets(
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

/// einops' checks of the axis-length keyword arguments.
fn check_kwargs(
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

// ---------------------------------------------------------------------------------------------
// einsum
// ---------------------------------------------------------------------------------------------

/// Where a label's extent was learned: operand number and pattern position.
#[derive(Debug, Clone, Copy)]
struct Seen {
    extent: u64,
    op: usize,
    pos: Pos,
}

/// One slot range of an einsum operand: group `group` covers slots `first..first + count`.
struct OpSlots {
    group: usize,
    first: usize,
    count: usize,
}

/// Resolves an einsum pattern (`"b h i d, b h j d -> b h i j"`) against operand shapes.
pub fn resolve_einsum(
    pattern: &str,
    pattern_span: Span,
    operands: &[Shape],
    kwargs: &[(String, u64, Span)],
) -> Result<EinsumSpec, Diagnostic> {
    let ranks: Vec<usize> = operands.iter().map(Shape::rank).collect();
    let (spaced, map) = match numpy_subscripts(pattern, &ranks) {
        Some((text, map)) => (text, Some(map)),
        None => (pattern.to_string(), None),
    };
    let pattern = spaced.as_str();
    let ctx = Ctx {
        pattern,
        base: pattern_span,
        map,
    };
    let arrow = find_arrow(&ctx)?;
    let in_end = arrow.unwrap_or(pattern.len());

    // Operands, split at commas.
    let mut ops: Vec<Side> = Vec::new();
    let mut start = 0usize;
    let commas: Vec<usize> = pattern
        .get(..in_end)
        .unwrap_or("")
        .match_indices(',')
        .map(|(i, _)| i)
        .collect();
    for end in commas.iter().copied().chain(std::iter::once(in_end)) {
        let pos = Pos::new(start, end);
        if ctx.text(pos).trim_matches(' ').is_empty() {
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
            return Err(ctx
                .err(
                    Code::PatternSyntax,
                    at,
                    format!("einsum operand {} has no axes", ops.len() + 1),
                    "empty operand",
                )
                .help("write the operand's axis labels; scalar operands are not supported"));
        }
        let side = parse_side(&ctx, pos, EINSUM_IN)?;
        if let Some((g, a)) = side.ellipsis() {
            if side.groups.get(g).is_some_and(|g| g.paren) {
                return Err(ctx
                    .err(
                        Code::PatternEllipsis,
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
    let Some(arrow) = arrow else {
        return Err(ctx
            .err(
                Code::PatternMissingArrow,
                ctx.whole(),
                format!("einsum pattern `{pattern}` has no `->`"),
                "no `->` here",
            )
            .help(format!(
                "write it with an explicit output: \"{}\"",
                implicit_pattern(&ctx, &ops)
            )));
    };
    let out = parse_side(&ctx, Pos::new(arrow + 2, pattern.len()), EINSUM_OUT)?;

    if ops.len() != operands.len() {
        let p = ctx.trim(Pos::new(0, arrow));
        return Err(ctx.err(
            Code::PatternOperands,
            p,
            format!(
                "einsum pattern has {} operand{} but {} {} passed",
                ops.len(),
                if ops.len() == 1 { "" } else { "s" },
                operands.len(),
                if operands.len() == 1 { "was" } else { "were" },
            ),
            &format!(
                "{} operand{}",
                ops.len(),
                if ops.len() == 1 { "" } else { "s" }
            ),
        ));
    }

    for (n, a) in out.names() {
        if !ops.iter().any(|s| s.has_name(n)) {
            return Err(ctx
                .err(
                    Code::PatternAxisOneSide,
                    a.pos,
                    format!("output label `{n}` appears in no operand"),
                    "not in any operand",
                )
                .help("every output label must come from an operand"));
        }
    }

    // Ranks and ellipsis widths.
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
                return Err(ctx
                    .err(Code::PatternRank, p, message, "operand axes")
                    .help("write one label (or group) per axis, or `...` for the remaining axes"));
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

    // Broadcast the `...` axes, right-aligned (numpy rules).
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

    // Label table: named labels in first-appearance order, `...` labels where `...` first appears.
    let mut names: Vec<String> = Vec::new();
    let mut seen: Vec<Option<Seen>> = Vec::new();
    let mut ell_base: Option<usize> = None;
    for side in &ops {
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
    let label_id = |name: &str| names.iter().position(|l| l == name);

    check_einsum_kwargs(&ctx, &names, kwargs)?;

    // Plain slots give extents directly.
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
                Some(Some(prev)) => unify(&ctx, name, prev, &now)?,
                None => {}
            }
        }
    }

    // Axis lengths given as keyword arguments (`h=4`), as rearrange takes them.
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

    // Composed groups: infer one unknown label per group, to a fixed point.
    let composed: Vec<(usize, &Group, u64, usize)> = ops
        .iter()
        .enumerate()
        .flat_map(|(k, side)| {
            layouts.get(k).into_iter().flatten().filter_map(move |s| {
                let g = side.groups.get(s.group)?;
                (!g.is_bare_ellipsis() && g.atoms.len() != 1)
                    .then(|| (k, g, slot_extent(operand(operands, k), s.first), s.first))
            })
        })
        .collect();
    loop {
        let mut changed = false;
        for &(k, g, extent, slot) in &composed {
            let ids: Vec<usize> = g
                .atoms
                .iter()
                .filter_map(|a| a.name().and_then(label_id))
                .collect();
            let unknown: Vec<usize> = ids
                .iter()
                .copied()
                .filter(|&l| seen.get(l).is_some_and(Option::is_none))
                .collect();
            let [u] = unknown.as_slice() else {
                continue;
            };
            let known = group_known(&ctx, g, &ids, &seen)?;
            let text = ctx.text(g.pos);
            let here = format!("axis {slot} of einsum operand {}", k + 1);
            let uname = names.get(*u).map_or("", String::as_str);
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
                    .help(format!("shape of operand {} is {}", k + 1, operand(operands, k))));
            }
            if let Some(entry) = seen.get_mut(*u) {
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
    for &(k, g, extent, slot) in &composed {
        let ids: Vec<usize> = g
            .atoms
            .iter()
            .filter_map(|a| a.name().and_then(label_id))
            .collect();
        let unknown: Vec<&str> = ids
            .iter()
            .filter(|&&l| seen.get(l).is_some_and(Option::is_none))
            .filter_map(|&l| names.get(l))
            .map(String::as_str)
            .collect();
        let text = ctx.text(g.pos);
        if !unknown.is_empty() && used_whole(&ops, &out, g) {
            // The group's labels only ever appear together, in this order: no split is needed
            // and every split gives the same result, so the first label takes the whole extent.
            for (j, &l) in ids.iter().enumerate() {
                if let Some(entry @ None) = seen.get_mut(l) {
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
                        "cannot infer the extents of {list} in `{text}`: at most one label of a group may be unknown"
                    ),
                    "several unknown extents",
                )
                .help("give all but one of them a plain axis of their own in some operand"));
        }
        let known = group_known(&ctx, g, &ids, &seen)?;
        if known != extent {
            let factors: Vec<String> = ids
                .iter()
                .filter_map(|&l| Some((names.get(l)?, seen.get(l)?.as_ref()?)))
                .map(|(n, s)| format!("{n}={}", s.extent))
                .collect();
            return Err(ctx
                .err(
                    Code::ExtentMismatch,
                    g.pos,
                    format!(
                        "`{text}` has extent {}, but axis {slot} of einsum operand {} has extent {extent}",
                        product_text(&factors, known),
                        k + 1
                    ),
                    &format!("extent {known}, operand has {extent}"),
                )
                .help(format!("shape of operand {} is {}", k + 1, operand(operands, k))));
        }
    }

    // Assemble.
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
                    labels: g
                        .atoms
                        .iter()
                        .filter_map(|a| a.name().and_then(label_id))
                        .collect(),
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

/// Whether the labels of group `g` appear only in groups identical to `g` (same labels in the
/// same order), in every operand and in the output: `"b (h d), (h d) o -> b o"`.
fn used_whole(ops: &[Side], out: &Side, g: &Group) -> bool {
    let labels = |g: &Group| -> Vec<String> {
        g.atoms
            .iter()
            .filter_map(|a| a.name().map(String::from))
            .collect()
    };
    let mine = labels(g);
    if mine.len() < 2 || mine.len() != g.atoms.len() {
        return false;
    }
    ops.iter()
        .chain([out])
        .flat_map(|s| s.groups.iter())
        .all(|h| {
            let theirs = labels(h);
            theirs == mine || theirs.iter().all(|n| !mine.contains(n))
        })
}

/// Keyword axis lengths of an einsum: each names a label of the pattern and is positive.
fn check_einsum_kwargs(
    ctx: &Ctx,
    labels: &[String],
    kwargs: &[(String, u64, Span)],
) -> Result<(), Diagnostic> {
    for (i, (name, value, span)) in kwargs.iter().enumerate() {
        if kwargs[..i].iter().any(|k| &k.0 == name) {
            return Err(Diagnostic::new(
                Code::PatternBadKwarg,
                format!("axis length `{name}` is given twice"),
            )
            .label(*span, "again here")
            .help("give each axis length once"));
        }
        if !labels.iter().any(|l| l == name) {
            let named: Vec<String> = labels
                .iter()
                .filter(|l| !l.starts_with("..."))
                .map(|l| format!("`{l}`"))
                .collect();
            return Err(Diagnostic::new(
                Code::PatternUnusedKwarg,
                format!("axis length `{name}={value}` names no label of the einsum pattern"),
            )
            .label(*span, "not in the pattern")
            .label(ctx.span(ctx.whole()), "pattern")
            .help(format!("the pattern's labels are {}", named.join(", "))));
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

/// numpy's subscripts (`"ij,jk->ik"`, `"...ij,...jk"`): one letter per label, no spaces needed.
/// A pattern is read that way when no term holds a space or parentheses and some operand's
/// term, read as tdsl's space-separated labels, cannot match its rank while one letter per
/// axis can. Returns the pattern with spaces between the letters, and for each of its bytes
/// the offset of the byte it came from (so diagnostics point at what was written).
fn numpy_subscripts(pattern: &str, ranks: &[usize]) -> Option<(String, Vec<usize>)> {
    if pattern.contains('(')
        || !pattern.is_ascii()
        || !pattern.bytes().any(|b| b.is_ascii_alphabetic())
    {
        return None;
    }
    let (lhs, rhs) = match pattern.find("->") {
        Some(a) => (&pattern[..a], Some(&pattern[a + 2..])),
        None => (pattern, None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    let spaced = |t: &str| {
        let t = t.trim();
        t.contains(' ')
            || !t
                .replace("...", "")
                .bytes()
                .all(|b| b.is_ascii_alphabetic())
    };
    if terms.iter().any(|t| spaced(t)) || rhs.is_some_and(spaced) {
        return None;
    }
    // Without `->` only numpy's reading exists (tdsl requires the arrow): its errors are the
    // rank and operand-count errors of that reading.
    let arrowless = rhs.is_none();
    if terms.len() != ranks.len() && !arrowless {
        return None;
    }
    let letters = |t: &str| t.trim().replace("...", "").len();
    let ell = |t: &str| t.contains("...");
    // One letter per axis fits every operand, and tdsl's reading (one label per term) does not.
    let numpy_fits = terms.iter().zip(ranks).all(|(t, &r)| {
        if ell(t) {
            letters(t) <= r
        } else {
            letters(t) == r
        }
    });
    let tdsl_fits = terms.iter().zip(ranks).all(|(t, &r)| {
        let n = usize::from(!t.trim().replace("...", "").is_empty());
        if ell(t) {
            n <= r
        } else {
            n == r
        }
    });
    if !arrowless && (!numpy_fits || tdsl_fits) {
        return None;
    }
    let mut text = String::with_capacity(pattern.len() * 2);
    let mut map = Vec::with_capacity(pattern.len() * 2 + 1);
    let bytes = pattern.as_bytes();
    let mut i = 0;
    let mut prev_label = false;
    while i < bytes.len() {
        if pattern[i..].starts_with("...") {
            if prev_label {
                text.push(' ');
                map.push(i);
            }
            text.push_str("...");
            map.extend([i, i + 1, i + 2]);
            i += 3;
            prev_label = true;
            continue;
        }
        let c = bytes[i];
        if c.is_ascii_alphabetic() {
            if prev_label {
                text.push(' ');
                map.push(i);
            }
            prev_label = true;
        } else {
            prev_label = false;
        }
        text.push(c as char);
        map.push(i);
        i += 1;
    }
    if rhs.is_none() {
        // numpy's implicit output: `...` first, then the labels used once, sorted.
        let mut once: Vec<u8> = Vec::new();
        let all: Vec<u8> = lhs
            .replace("...", "")
            .bytes()
            .filter(u8::is_ascii_alphabetic)
            .collect();
        for &c in &all {
            if all.iter().filter(|&&d| d == c).count() == 1 {
                once.push(c);
            }
        }
        once.sort_unstable();
        let mut out: Vec<String> = Vec::new();
        if terms.iter().any(|t| ell(t)) {
            out.push("...".into());
        }
        out.extend(once.iter().map(|&c| (c as char).to_string()));
        let tail = format!(" -> {}", out.join(" "));
        map.extend(std::iter::repeat_n(pattern.len(), tail.len()));
        text.push_str(&tail);
    }
    map.push(pattern.len());
    Some((text, map))
}

/// Product of the known label extents of a group (unknown ones count as 1).
fn group_known(
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
fn unify(ctx: &Ctx, name: &str, prev: &Seen, now: &Seen) -> Result<(), Diagnostic> {
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

/// The explicit form of numpy's implicit output: labels used exactly once, sorted, `...` first.
fn implicit_pattern(ctx: &Ctx, ops: &[Side]) -> String {
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
    let inputs: Vec<&str> = ops.iter().map(|s| ctx.text(ctx.trim(s.pos))).collect();
    format!("{} -> {}", inputs.join(", "), out.join(" "))
        .trim_end()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::types::Axis;
    use PatternOp::{Rearrange, Reduce, Repeat};

    /// Where the test patterns sit in an imaginary script, so spans are not pattern offsets.
    const BASE: usize = 7;

    fn span_of(p: &str) -> Span {
        Span::new(BASE, BASE + p.len())
    }

    fn shape(ext: &[u64]) -> Shape {
        Shape(ext.iter().map(|&e| Axis::anon(e)).collect())
    }

    /// Keyword arguments with made-up spans after the pattern.
    fn kwargs(kw: &[(&str, u64)]) -> Vec<(String, u64, Span)> {
        kw.iter()
            .enumerate()
            .map(|(i, &(n, v))| {
                let lo = 1000 + 20 * i;
                (n.to_string(), v, Span::new(lo, lo + n.len() + 2))
            })
            .collect()
    }

    fn run(op: PatternOp, p: &str, ext: &[u64], kw: &[(&str, u64)]) -> Result<Recipe, Diagnostic> {
        resolve_pattern(op, p, span_of(p), &shape(ext), &kwargs(kw))
    }

    fn ok(op: PatternOp, p: &str, ext: &[u64], kw: &[(&str, u64)]) -> Recipe {
        let r = run(op, p, ext, kw).unwrap_or_else(|d| panic!("{p:?} on {ext:?}: {d:?}"));
        check_recipe(op, &r, &shape(ext));
        r
    }

    /// The pattern text a diagnostic's primary label underlines.
    fn underlined<'a>(p: &'a str, d: &Diagnostic) -> &'a str {
        let s = d.span().expect("diagnostic has a span");
        &p[s.start as usize - BASE..s.end as usize - BASE]
    }

    /// Asserts the code and the underlined range, given as a caret line under the pattern.
    fn assert_diag(p: &str, d: &Diagnostic, code: Code, carets: &str) {
        assert_eq!(d.code, code, "{p:?}: {d:?}");
        let lo = carets.find('^').expect("carets");
        let hi = carets.rfind('^').expect("carets") + 1;
        let s = d.span().expect("span");
        assert_eq!(
            (s.start as usize, s.end as usize),
            (BASE + lo, BASE + hi),
            "{p:?}: underlined {:?}, expected {:?}; {d:?}",
            underlined(p, d),
            &p[lo..hi]
        );
        assert!(!d.message.is_empty());
        assert!(d.labels.iter().all(|l| !l.text.is_empty()));
    }

    fn bad(
        op: PatternOp,
        p: &str,
        ext: &[u64],
        kw: &[(&str, u64)],
        code: Code,
        carets: &str,
    ) -> Diagnostic {
        let d = run(op, p, ext, kw).expect_err(p);
        assert_diag(p, &d, code, carets);
        d
    }

    /// An error that underlines keyword argument `i` instead of the pattern.
    fn bad_kwarg(
        op: PatternOp,
        p: &str,
        ext: &[u64],
        kw: &[(&str, u64)],
        code: Code,
        i: usize,
    ) -> Diagnostic {
        let d = run(op, p, ext, kw).expect_err(p);
        assert_eq!(d.code, code, "{p:?}: {d:?}");
        assert_eq!(d.span(), Some(kwargs(kw)[i].2), "{d:?}");
        d
    }

    fn names(r: &Recipe) -> Vec<Option<&str>> {
        r.out_names.iter().map(|n| n.as_deref()).collect()
    }

    fn some(v: &[&'static str]) -> Vec<Option<&'static str>> {
        v.iter()
            .map(|&s| if s == "-" { None } else { Some(s) })
            .collect()
    }

    use OutElem::{In, New};

    /// Structural invariants of every recipe.
    fn check_recipe(op: PatternOp, r: &Recipe, input: &Shape) {
        assert_eq!(r.in_groups.len(), input.rank());
        let mut seen = vec![0usize; r.in_elems.len()];
        for (g, a) in r.in_groups.iter().zip(&input.0) {
            let mut prod = 1u64;
            for &i in g {
                seen[i] += 1;
                prod = prod
                    .checked_mul(r.in_elems[i])
                    .expect("input group product");
            }
            assert_eq!(prod, a.extent);
        }
        assert!(
            seen.iter().all(|&c| c == 1),
            "every elementary axis in one group"
        );
        let mut used = vec![0usize; r.in_elems.len()];
        for g in &r.out_groups {
            for e in g {
                match *e {
                    In(i) => used[i] += 1,
                    New(n) => {
                        assert!(n >= 1);
                        assert_eq!(op, Repeat, "only repeat adds axes");
                    }
                }
            }
        }
        for (i, &n) in used.iter().enumerate() {
            let reduced = r.reduced.contains(&i);
            assert_eq!(
                n,
                usize::from(!reduced),
                "axis {i} used once unless reduced"
            );
        }
        assert!(r.reduced.windows(2).all(|w| w[0] < w[1]));
        if op != Reduce {
            assert!(r.reduced.is_empty());
        }
        assert_eq!(r.out_names.len(), r.out_groups.len());
        let _ = r.out_extents();
    }

    // ----- rearrange -------------------------------------------------------------------------

    #[test]
    fn rearrange_transpose() {
        let r = ok(Rearrange, "b h w c -> b c h w", &[2, 3, 4, 5], &[]);
        assert_eq!(r.in_elems, vec![2, 3, 4, 5]);
        assert_eq!(r.in_groups, vec![vec![0], vec![1], vec![2], vec![3]]);
        assert!(r.reduced.is_empty());
        assert_eq!(
            r.out_groups,
            vec![vec![In(0)], vec![In(3)], vec![In(1)], vec![In(2)]]
        );
        assert_eq!(names(&r), some(&["b", "c", "h", "w"]));
        assert_eq!(r.out_extents(), vec![2, 5, 3, 4]);
    }

    #[test]
    fn rearrange_compose_and_flatten() {
        let r = ok(Rearrange, "b h w c -> (b h) w c", &[2, 3, 4, 5], &[]);
        assert_eq!(r.out_groups[0], vec![In(0), In(1)]);
        assert_eq!(names(&r), some(&["-", "w", "c"]));
        assert_eq!(r.out_extents(), vec![6, 4, 5]);
        let r = ok(Rearrange, "b h w c -> b (c h w)", &[2, 3, 4, 5], &[]);
        assert_eq!(r.out_groups[1], vec![In(3), In(1), In(2)]);
        assert_eq!(r.out_extents(), vec![2, 60]);
    }

    #[test]
    fn rearrange_split_with_kwargs() {
        let r = ok(
            Rearrange,
            "b (h1 h) (w1 w) c -> (b h1 w1) h w c",
            &[2, 4, 6, 3],
            &[("h1", 2), ("w1", 2)],
        );
        assert_eq!(r.in_elems, vec![2, 2, 2, 2, 3, 3]);
        assert_eq!(r.in_groups, vec![vec![0], vec![1, 2], vec![3, 4], vec![5]]);
        assert_eq!(r.out_groups[0], vec![In(0), In(1), In(3)]);
        assert_eq!(r.out_extents(), vec![8, 2, 3, 3]);
        assert_eq!(names(&r), some(&["-", "h", "w", "c"]));
    }

    #[test]
    fn rearrange_infers_one_unknown_by_division() {
        let r = ok(Rearrange, "(a b) -> a b", &[6], &[("a", 2)]);
        assert_eq!(r.in_elems, vec![2, 3]);
        let r = ok(Rearrange, "(a b) -> a b", &[6], &[("b", 2)]);
        assert_eq!(r.in_elems, vec![3, 2]);
        // Fully known groups are checked rather than inferred.
        let r = ok(
            Rearrange,
            "b (h w) -> b h w",
            &[2, 6],
            &[("h", 2), ("w", 3)],
        );
        assert_eq!(r.out_extents(), vec![2, 2, 3]);
        // A known single axis is a check.
        let r = ok(Rearrange, "a b -> b a", &[2, 3], &[("a", 2)]);
        assert_eq!(r.out_extents(), vec![3, 2]);
        // Zero extents divide fine.
        let r = ok(Rearrange, "(a b) c -> a b c", &[0, 3], &[("b", 2)]);
        assert_eq!(r.out_extents(), vec![0, 2, 3]);
    }

    #[test]
    fn rearrange_unit_axes() {
        let r = ok(Rearrange, "1 h w -> h w", &[1, 3, 4], &[]);
        assert_eq!(r.in_groups, vec![vec![], vec![0], vec![1]]);
        assert_eq!(r.in_elems, vec![3, 4]);
        let r = ok(Rearrange, "() h w -> h w", &[1, 3, 4], &[]);
        assert_eq!(r.in_groups, vec![vec![], vec![0], vec![1]]);
        let r = ok(Rearrange, "h w -> w () h 1", &[3, 4], &[]);
        assert_eq!(r.out_groups, vec![vec![In(1)], vec![], vec![In(0)], vec![]]);
        assert_eq!(names(&r), some(&["w", "-", "h", "-"]));
        assert_eq!(r.out_extents(), vec![4, 1, 3, 1]);
        // `1` inside a group is nothing; `01` is a unit too.
        let r = ok(Rearrange, "(h 1) w -> h (1 w)", &[3, 4], &[]);
        assert_eq!(r.in_groups, vec![vec![0], vec![1]]);
        assert_eq!(names(&r), some(&["h", "w"]));
        let r = ok(Rearrange, "01 h -> h", &[1, 3], &[]);
        assert_eq!(r.in_groups, vec![vec![], vec![0]]);
        let r = ok(Rearrange, "(1 1) h -> h (1)", &[1, 3], &[]);
        assert_eq!(r.out_extents(), vec![3, 1]);
    }

    #[test]
    fn rearrange_ellipsis() {
        let r = ok(Rearrange, "b ... -> ... b", &[2, 3, 4], &[]);
        assert_eq!(r.in_elems, vec![2, 3, 4]);
        assert_eq!(r.in_groups, vec![vec![0], vec![1], vec![2]]);
        assert_eq!(r.out_groups, vec![vec![In(1)], vec![In(2)], vec![In(0)]]);
        assert_eq!(names(&r), some(&["-", "-", "b"]));
        let r = ok(Rearrange, "b ... c -> b (...) c", &[2, 3, 4, 5], &[]);
        assert_eq!(r.out_groups[1], vec![In(1), In(2)]);
        assert_eq!(r.out_extents(), vec![2, 12, 5]);
        let r = ok(Rearrange, "b ... -> (... b)", &[2, 3, 4], &[]);
        assert_eq!(r.out_groups, vec![vec![In(1), In(2), In(0)]]);
        let r = ok(Rearrange, "... h w -> ... (h w)", &[3, 4], &[]);
        assert_eq!(r.out_extents(), vec![12]);
    }

    #[test]
    fn rearrange_empty_ellipsis_and_scalars() {
        let r = ok(Rearrange, "b ... -> b (...)", &[2], &[]);
        assert_eq!(r.out_groups, vec![vec![In(0)], vec![]]);
        assert_eq!(r.out_extents(), vec![2, 1]);
        let r = ok(Rearrange, "... -> ...", &[], &[]);
        assert!(r.in_elems.is_empty() && r.out_groups.is_empty());
        let r = ok(Rearrange, "->", &[], &[]);
        assert!(r.in_groups.is_empty() && r.out_groups.is_empty());
        let r = ok(Rearrange, "-> 1 ()", &[], &[]);
        assert_eq!(r.out_extents(), vec![1, 1]);
    }

    #[test]
    fn rearrange_spacing_and_names() {
        let r = ok(Rearrange, "  b   h  ->  h b ", &[2, 3], &[]);
        assert_eq!(r.out_extents(), vec![3, 2]);
        let r = ok(Rearrange, "b(h w)->b h w", &[2, 6], &[("h", 3)]);
        assert_eq!(r.out_extents(), vec![2, 3, 2]);
        let r = ok(Rearrange, "batch a_b c1 -> c1 a_b batch", &[2, 3, 4], &[]);
        assert_eq!(names(&r), some(&["c1", "a_b", "batch"]));
        let r = ok(Rearrange, "h -> (h)", &[3], &[]);
        assert_eq!(names(&r), some(&["h"]));
    }

    #[test]
    fn rearrange_axis_on_one_side() {
        let d = bad(
            Rearrange,
            "b h w -> b h",
            &[2, 3, 4],
            &[],
            Code::PatternAxisOneSide,
            "    ^",
        );
        assert!(d.message.contains("`w`"));
        assert!(d.help.is_some());
        bad(
            Rearrange,
            "b h -> b h w",
            &[2, 3],
            &[],
            Code::PatternAxisOneSide,
            "           ^",
        );
        bad(
            Rearrange,
            "b (h w) -> b h",
            &[2, 6],
            &[("w", 2)],
            Code::PatternAxisOneSide,
            "     ^",
        );
    }

    #[test]
    fn rank_mismatch() {
        let d = bad(
            Rearrange,
            "b h w -> b h w",
            &[2, 3],
            &[],
            Code::PatternRank,
            "^^^^^",
        );
        assert!(d.message.contains('3') && d.message.contains("rank 2"));
        assert!(d.message.contains("[2, 3]"), "{}", d.message);
        let d = bad(
            Reduce,
            "b h -> b h",
            &[2, 3, 4],
            &[],
            Code::PatternRank,
            "^^^",
        );
        assert!(d.help.as_deref().unwrap_or("").contains("..."));
        let d = bad(
            Rearrange,
            "... a b -> ... b a",
            &[2],
            &[],
            Code::PatternRank,
            "^^^^^^^",
        );
        assert!(d.message.contains("at least 2"));
        bad(Repeat, "-> a", &[3], &[("a", 2)], Code::PatternRank, "^^");
    }

    #[test]
    fn named_input_shape_in_messages() {
        let input = Shape(vec![Axis::named("batch", 2), Axis::named("seq", 6)]);
        let p = "b (h w) -> b h w";
        let d = resolve_pattern(Rearrange, p, span_of(p), &input, &kwargs(&[("h", 4)]))
            .expect_err("indivisible");
        assert_eq!(d.code, Code::PatternIndivisible);
        assert!(d.message.contains("`seq`"), "{}", d.message);
        assert!(d.help.as_deref().unwrap_or("").contains("[batch=2, seq=6]"));
    }

    #[test]
    fn duplicate_axes() {
        bad(
            Rearrange,
            "b h -> b h h",
            &[2, 3],
            &[],
            Code::PatternDuplicateAxis,
            "           ^",
        );
        let d = bad(
            Rearrange,
            "b b -> b",
            &[2, 2],
            &[],
            Code::PatternDuplicateAxis,
            "  ^",
        );
        assert_eq!(d.labels.len(), 2);
        bad(
            Reduce,
            "b (h b) -> b",
            &[2, 6],
            &[],
            Code::PatternDuplicateAxis,
            "     ^",
        );
        bad(
            Repeat,
            "h -> h c c",
            &[3],
            &[("c", 2)],
            Code::PatternDuplicateAxis,
            "         ^",
        );
        // Numeric axes are anonymous: never duplicates.
        ok(Reduce, "(h 2) (w 2) -> h w", &[4, 6], &[]);
    }

    #[test]
    fn group_resolution_errors() {
        let d = bad(
            Rearrange,
            "b (h w) -> b h w",
            &[2, 6],
            &[],
            Code::PatternTwoUnknowns,
            "  ^^^^^",
        );
        assert!(d.message.contains("`h`") && d.message.contains("`w`"));
        let d = bad(
            Rearrange,
            "(h w) -> h w",
            &[6],
            &[("h", 4)],
            Code::PatternIndivisible,
            "^^^^^",
        );
        assert!(
            d.message.contains('6') && d.message.contains('4'),
            "{}",
            d.message
        );
        let d = bad(
            Rearrange,
            "(h w) -> h w",
            &[6],
            &[("h", 2), ("w", 4)],
            Code::ExtentMismatch,
            "^^^^^",
        );
        assert!(
            d.message.contains('8') && d.message.contains('6'),
            "{}",
            d.message
        );
        bad(
            Rearrange,
            "h w -> w h",
            &[4, 5],
            &[("h", 3)],
            Code::ExtentMismatch,
            "^",
        );
        bad(
            Rearrange,
            "1 h -> h",
            &[2, 3],
            &[],
            Code::ExtentMismatch,
            "^",
        );
        bad(
            Rearrange,
            "h () -> h",
            &[2, 3],
            &[],
            Code::ExtentMismatch,
            "  ^^",
        );
        bad(
            Reduce,
            "b (h 3) -> b h",
            &[2, 4],
            &[],
            Code::PatternIndivisible,
            "  ^^^^^",
        );
        bad(
            Reduce,
            "(h 2 3) -> h",
            &[10],
            &[],
            Code::PatternIndivisible,
            "^^^^^^^",
        );
        bad(
            Repeat,
            "h -> h c",
            &[3],
            &[("h", 2), ("c", 2)],
            Code::ExtentMismatch,
            "^",
        );
    }

    #[test]
    fn anonymous_axes() {
        bad(
            Rearrange,
            "b (h 2) -> b h",
            &[2, 6],
            &[],
            Code::PatternAnonymous,
            "     ^",
        );
        bad(
            Rearrange,
            "b h -> b h 2",
            &[2, 3],
            &[],
            Code::PatternAnonymous,
            "           ^",
        );
        bad(
            Reduce,
            "b h -> b 2",
            &[2, 3],
            &[],
            Code::PatternAnonymous,
            "         ^",
        );
        bad(
            Repeat,
            "h (w 2) -> h w",
            &[2, 6],
            &[],
            Code::PatternAnonymous,
            "     ^",
        );
        let d = bad(
            Rearrange,
            "h -> h 0",
            &[2],
            &[],
            Code::ZeroExtent,
            "       ^",
        );
        assert!(d.message.contains("`0`"));
        bad(
            Reduce,
            "b (h 00) -> b",
            &[2, 3],
            &[],
            Code::ZeroExtent,
            "     ^^",
        );
        bad(
            Reduce,
            "b (h 99999999999999999999999) -> b",
            &[2, 3],
            &[],
            Code::SizeOverflow,
            "     ^^^^^^^^^^^^^^^^^^^^^^^",
        );
    }

    #[test]
    fn syntax_errors() {
        bad(
            Rearrange,
            "b ((h w)) -> b h w",
            &[2, 6],
            &[],
            Code::PatternSyntax,
            "   ^",
        );
        bad(
            Rearrange,
            "b (h w -> b h w",
            &[2, 6],
            &[],
            Code::PatternSyntax,
            "  ^",
        );
        bad(
            Rearrange,
            "b h) -> b h",
            &[2, 6],
            &[],
            Code::PatternSyntax,
            "   ^",
        );
        bad(
            Rearrange,
            "b h -> (b h",
            &[2, 6],
            &[],
            Code::PatternSyntax,
            "       ^",
        );
        bad(
            Rearrange,
            "_b h -> h _b",
            &[2, 3],
            &[],
            Code::PatternSyntax,
            "^^",
        );
        bad(
            Rearrange,
            "b_ h -> h b_",
            &[2, 3],
            &[],
            Code::PatternSyntax,
            "^^",
        );
        bad(
            Rearrange,
            "2b h -> h 2b",
            &[2, 3],
            &[],
            Code::PatternSyntax,
            "^^",
        );
        bad(
            Rearrange,
            "b\th -> h\tb",
            &[2, 3],
            &[],
            Code::PatternSyntax,
            " ^",
        );
        bad(
            Rearrange,
            "b-h -> b",
            &[2, 3],
            &[],
            Code::PatternSyntax,
            " ^",
        );
        bad(
            Rearrange,
            "b, h -> b h",
            &[2, 3],
            &[],
            Code::PatternSyntax,
            " ^",
        );
        // A non-ASCII character is underlined whole (two bytes).
        let p = "\u{e9} h -> h \u{e9}";
        let d = run(Rearrange, p, &[2, 3], &[]).expect_err("non-ascii");
        assert_eq!(d.code, Code::PatternSyntax);
        assert_eq!(underlined(p, &d), "\u{e9}");
        let d = bad(
            Rearrange,
            "b -> h -> b",
            &[2],
            &[],
            Code::PatternSyntax,
            "       ^^",
        );
        assert_eq!(d.labels.len(), 2);
    }

    #[test]
    fn missing_arrow() {
        let d = bad(
            Rearrange,
            "b h",
            &[2, 3],
            &[],
            Code::PatternMissingArrow,
            "^^^",
        );
        assert!(d.help.as_deref().unwrap_or("").contains("\"b h -> b h\""));
        bad(
            Reduce,
            "b h - > b",
            &[2, 3],
            &[],
            Code::PatternMissingArrow,
            "^^^^^^^^^",
        );
    }

    #[test]
    fn ellipsis_rules() {
        bad(
            Rearrange,
            "b .. -> b",
            &[2, 3],
            &[],
            Code::PatternSyntax,
            "  ^",
        );
        let d = bad(
            Rearrange,
            "b ... ... -> b",
            &[2, 3],
            &[],
            Code::PatternEllipsis,
            "      ^^^",
        );
        assert_eq!(d.labels.len(), 2);
        bad(
            Rearrange,
            "b .... -> b ....",
            &[2, 3],
            &[],
            Code::PatternSyntax,
            "     ^",
        );
        bad(
            Rearrange,
            "b a... -> b a...",
            &[2, 3],
            &[],
            Code::PatternSyntax,
            "  ^^^^",
        );
        bad(
            Rearrange,
            "b (...) -> b ...",
            &[2, 3],
            &[],
            Code::PatternEllipsis,
            "   ^^^",
        );
        bad(
            Rearrange,
            "b h -> b ... h",
            &[2, 3],
            &[],
            Code::PatternEllipsis,
            "         ^^^",
        );
        bad(
            Rearrange,
            "... h -> h",
            &[2, 3],
            &[],
            Code::PatternEllipsis,
            "^^^",
        );
        bad(
            Repeat,
            "... h -> h c",
            &[2, 3],
            &[("c", 2)],
            Code::PatternEllipsis,
            "^^^",
        );
        bad(
            Reduce,
            "b h -> b ...",
            &[2, 3],
            &[],
            Code::PatternEllipsis,
            "         ^^^",
        );
        // The right side's `...` may be grouped.
        ok(Rearrange, "b ... -> b (...)", &[2, 3, 4], &[]);
    }

    #[test]
    fn kwarg_checks() {
        let d = bad_kwarg(
            Rearrange,
            "b h -> b h",
            &[2, 3],
            &[("c", 3)],
            Code::PatternUnusedKwarg,
            0,
        );
        assert!(d.message.contains("c=3"));
        assert!(d.help.as_deref().unwrap_or("").contains("`b`"));
        bad_kwarg(
            Repeat,
            "h -> h c",
            &[3],
            &[("c", 2), ("d", 2)],
            Code::PatternUnusedKwarg,
            1,
        );
        bad_kwarg(
            Rearrange,
            "(h w) -> h w",
            &[6],
            &[("h", 0)],
            Code::PatternBadKwarg,
            0,
        );
        bad_kwarg(
            Repeat,
            "h w -> h w c",
            &[2, 3],
            &[("c", 0)],
            Code::PatternBadKwarg,
            0,
        );
        bad_kwarg(
            Rearrange,
            "h w -> w h",
            &[4, 5],
            &[("_", 3)],
            Code::PatternBadKwarg,
            0,
        );
        bad_kwarg(
            Rearrange,
            "h w -> w h",
            &[4, 5],
            &[("h_", 4)],
            Code::PatternBadKwarg,
            0,
        );
        bad_kwarg(
            Rearrange,
            "(h w) -> w h",
            &[6],
            &[("h", 2), ("h", 2)],
            Code::PatternBadKwarg,
            1,
        );
        // A kwarg for a reduced axis is fine.
        let r = ok(Reduce, "b h -> h", &[2, 3], &[("b", 2)]);
        assert_eq!(r.reduced, vec![0]);
    }

    // ----- reduce ----------------------------------------------------------------------------

    #[test]
    fn reduce_basic() {
        let r = ok(Reduce, "t b c -> b c", &[2, 3, 4], &[]);
        assert_eq!(r.reduced, vec![0]);
        assert_eq!(r.out_groups, vec![vec![In(1)], vec![In(2)]]);
        assert_eq!(names(&r), some(&["b", "c"]));
        let r = ok(Reduce, "b h w ->", &[2, 3, 4], &[]);
        assert_eq!(r.reduced, vec![0, 1, 2]);
        assert!(r.out_groups.is_empty());
        let r = ok(Reduce, "b c h w -> b c 1 1", &[2, 3, 4, 5], &[]);
        assert_eq!(r.out_groups, vec![vec![In(0)], vec![In(1)], vec![], vec![]]);
        assert_eq!(r.reduced, vec![2, 3]);
        assert_eq!(names(&r), some(&["b", "c", "-", "-"]));
        let r = ok(Reduce, "b c h w -> b c () ()", &[2, 3, 4, 5], &[]);
        assert_eq!(r.out_extents(), vec![2, 3, 1, 1]);
        let r = ok(Reduce, "b h -> h b", &[2, 3], &[]);
        assert!(r.reduced.is_empty());
    }

    #[test]
    fn reduce_pooling_with_anonymous_axes() {
        let r = ok(Reduce, "b c (h1 2) (w1 2) -> b c h1 w1", &[2, 3, 4, 6], &[]);
        assert_eq!(r.in_elems, vec![2, 3, 2, 2, 3, 2]);
        assert_eq!(r.in_groups, vec![vec![0], vec![1], vec![2, 3], vec![4, 5]]);
        assert_eq!(r.reduced, vec![3, 5]);
        assert_eq!(r.out_extents(), vec![2, 3, 2, 3]);
        assert_eq!(names(&r), some(&["b", "c", "h1", "w1"]));
        let r = ok(
            Reduce,
            "b c (h1 h2) (w1 w2) -> b c h1 w1",
            &[2, 3, 6, 8],
            &[("h1", 3), ("w1", 4)],
        );
        assert_eq!(r.in_elems, vec![2, 3, 3, 2, 4, 2]);
        assert_eq!(r.reduced, vec![3, 5]);
        let r = ok(Reduce, "b (2 h) -> b h", &[2, 6], &[]);
        assert_eq!(r.in_elems, vec![2, 2, 3]);
        assert_eq!(r.reduced, vec![1]);
        let r = ok(Reduce, "b (h 2 3) -> h b", &[2, 12], &[]);
        assert_eq!(r.in_elems, vec![2, 2, 2, 3]);
        assert_eq!(r.reduced, vec![2, 3]);
        assert_eq!(r.out_extents(), vec![2, 2]);
    }

    #[test]
    fn reduce_ellipsis() {
        let r = ok(Reduce, "b ... -> b", &[2, 3, 4], &[]);
        assert_eq!(r.reduced, vec![1, 2]);
        let r = ok(Reduce, "... c -> c", &[2, 3, 4], &[]);
        assert_eq!(r.reduced, vec![0, 1]);
        let r = ok(Reduce, "b ... -> b ...", &[2, 3, 4], &[]);
        assert!(r.reduced.is_empty());
        assert_eq!(r.out_extents(), vec![2, 3, 4]);
        let r = ok(Reduce, "b ... h -> (... b)", &[2, 3, 4, 5], &[]);
        assert_eq!(r.reduced, vec![3]);
        assert_eq!(r.out_groups, vec![vec![In(1), In(2), In(0)]]);
    }

    #[test]
    fn reduce_errors() {
        bad(
            Reduce,
            "b h -> b w",
            &[2, 3],
            &[],
            Code::PatternAxisOneSide,
            "         ^",
        );
        bad(
            Reduce,
            "b (h w) -> b",
            &[2, 6],
            &[],
            Code::PatternTwoUnknowns,
            "  ^^^^^",
        );
        bad_kwarg(
            Reduce,
            "b h w -> b",
            &[2, 3, 4],
            &[("c", 2)],
            Code::PatternUnusedKwarg,
            0,
        );
    }

    // ----- repeat ----------------------------------------------------------------------------

    #[test]
    fn repeat_new_axes() {
        let r = ok(Repeat, "h w -> h w c", &[2, 3], &[("c", 3)]);
        assert_eq!(r.out_groups, vec![vec![In(0)], vec![In(1)], vec![New(3)]]);
        assert_eq!(names(&r), some(&["h", "w", "c"]));
        let r = ok(Repeat, "h w -> (repeat h) w", &[2, 3], &[("repeat", 2)]);
        assert_eq!(r.out_groups[0], vec![New(2), In(0)]);
        assert_eq!(r.out_extents(), vec![4, 3]);
        assert_eq!(names(&r), some(&["-", "w"]));
        let r = ok(Repeat, "h w -> h (w 2)", &[2, 3], &[]);
        assert_eq!(r.out_groups[1], vec![In(1), New(2)]);
        let r = ok(Repeat, "h -> 2 h 3", &[3], &[]);
        assert_eq!(r.out_groups, vec![vec![New(2)], vec![In(0)], vec![New(3)]]);
        assert_eq!(names(&r), some(&["-", "h", "-"]));
        let r = ok(Repeat, "h w -> (h 2) (w 2)", &[2, 3], &[]);
        assert_eq!(r.out_extents(), vec![4, 6]);
        let r = ok(Repeat, "h -> h c", &[3], &[("c", 1)]);
        assert_eq!(r.out_extents(), vec![3, 1]);
        let r = ok(Repeat, "h -> (c h)", &[3], &[("c", 2), ("h", 3)]);
        assert_eq!(r.out_extents(), vec![6]);
    }

    #[test]
    fn repeat_units_ellipsis_scalars() {
        let r = ok(Repeat, "1 h -> c h", &[1, 4], &[("c", 3)]);
        assert_eq!(r.in_groups, vec![vec![], vec![0]]);
        assert_eq!(r.out_groups, vec![vec![New(3)], vec![In(0)]]);
        let r = ok(Repeat, "() h -> c h", &[1, 4], &[("c", 3)]);
        assert_eq!(r.out_extents(), vec![3, 4]);
        let r = ok(Repeat, "... -> ... c", &[2, 3], &[("c", 2)]);
        assert_eq!(r.out_extents(), vec![2, 3, 2]);
        let r = ok(Repeat, "b ... -> b (... c)", &[2, 3, 4], &[("c", 2)]);
        assert_eq!(r.out_groups[1], vec![In(1), In(2), New(2)]);
        assert_eq!(r.out_extents(), vec![2, 24]);
        let r = ok(Repeat, "-> a b", &[], &[("a", 2), ("b", 3)]);
        assert_eq!(r.out_groups, vec![vec![New(2)], vec![New(3)]]);
        assert_eq!(names(&r), some(&["a", "b"]));
    }

    #[test]
    fn repeat_errors() {
        bad(
            Repeat,
            "h w -> h c",
            &[2, 3],
            &[("c", 2)],
            Code::PatternAxisOneSide,
            "  ^",
        );
        let d = bad(
            Repeat,
            "h w -> h w c",
            &[2, 3],
            &[],
            Code::UnknownExtent,
            "           ^",
        );
        assert!(d.help.as_deref().unwrap_or("").contains("c=2"));
        bad(
            Repeat,
            "h -> (h c)",
            &[3],
            &[],
            Code::UnknownExtent,
            "        ^",
        );
        bad(
            Repeat,
            "(h w) -> h w c",
            &[6],
            &[("c", 2)],
            Code::PatternTwoUnknowns,
            "^^^^^",
        );
    }

    #[test]
    fn size_overflow() {
        let big = 1u64 << 40;
        bad(
            Repeat,
            "h -> h (c d)",
            &[1],
            &[("c", big), ("d", big)],
            Code::SizeOverflow,
            "       ^^^^^",
        );
        bad(
            Repeat,
            "h -> h c d",
            &[1],
            &[("c", big), ("d", big)],
            Code::SizeOverflow,
            "     ^^^^^",
        );
        bad(
            Rearrange,
            "(a b c) -> a b c",
            &[6],
            &[("a", big), ("b", big)],
            Code::SizeOverflow,
            "^^^^^^^",
        );
        // Huge but representable extents are fine.
        let r = ok(Rearrange, "a b -> b a", &[u64::MAX, 1], &[]);
        assert_eq!(r.out_extents(), vec![1, u64::MAX]);
        // A zero anywhere makes the element count 0, not an overflow.
        ok(Repeat, "h -> h c d", &[0], &[("c", big), ("d", big)]);
    }

    // ----- einops reference table ------------------------------------------------------------

    type EinopsCase = (
        &'static str,
        &'static str,
        &'static [u64],
        &'static [(&'static str, u64)],
        Option<&'static [u64]>,
    );

    fn op_named(op: &str) -> PatternOp {
        match op {
            "rearrange" => Rearrange,
            "reduce" => Reduce,
            "repeat" => Repeat,
            _ => panic!("unknown op {op}"),
        }
    }

    #[test]
    fn einops_reference_table() {
        assert!(EINOPS_CASES.len() >= 40);
        for &(op, p, ext, kw, expected) in EINOPS_CASES {
            let got = run(op_named(op), p, ext, kw);
            match (&got, expected) {
                (Ok(r), Some(want)) => {
                    assert_eq!(r.out_extents(), want, "{op} {p:?} on {ext:?} {kw:?}");
                    check_recipe(op_named(op), r, &shape(ext));
                }
                (Err(_), None) => {}
                _ => {
                    panic!("{op} {p:?} on {ext:?} {kw:?}: einops gives {expected:?}, tdsl {got:?}")
                }
            }
        }
    }

    #[test]
    fn einops_deviations_are_rejected() {
        for &(op, p, ext, kw, einops) in EINOPS_DEVIATIONS {
            assert!(einops.is_some(), "einops accepts {p:?}");
            assert!(run(op_named(op), p, ext, kw).is_err(), "{p:?}");
        }
    }

    // ----- einsum ----------------------------------------------------------------------------

    fn esum(p: &str, shapes: &[&[u64]]) -> Result<EinsumSpec, Diagnostic> {
        let ops: Vec<Shape> = shapes.iter().map(|s| shape(s)).collect();
        resolve_einsum(p, span_of(p), &ops, &[])
    }

    fn esum_ok(p: &str, shapes: &[&[u64]]) -> EinsumSpec {
        let s = esum(p, shapes).unwrap_or_else(|d| panic!("{p:?} on {shapes:?}: {d:?}"));
        let ops: Vec<Shape> = shapes.iter().map(|s| shape(s)).collect();
        check_spec(&s, &ops);
        s
    }

    fn esum_bad(p: &str, shapes: &[&[u64]], code: Code, carets: &str) -> Diagnostic {
        let d = esum(p, shapes).expect_err(p);
        assert_diag(p, &d, code, carets);
        d
    }

    fn slot(labels: &[usize]) -> EinsumSlot {
        EinsumSlot {
            labels: labels.to_vec(),
            broadcast: false,
        }
    }

    fn label_names(s: &EinsumSpec) -> Vec<(&str, u64)> {
        s.labels.iter().map(|(n, e)| (n.as_str(), *e)).collect()
    }

    /// Structural invariants of every einsum spec.
    fn check_spec(s: &EinsumSpec, ops: &[Shape]) {
        assert_eq!(s.operands.len(), ops.len());
        for (slots, shape) in s.operands.iter().zip(ops) {
            assert_eq!(slots.len(), shape.rank());
            for (sl, ax) in slots.iter().zip(&shape.0) {
                let prod = sl
                    .labels
                    .iter()
                    .try_fold(1u64, |a, &l| a.checked_mul(s.labels[l].1))
                    .expect("slot product");
                if sl.broadcast {
                    assert_eq!(ax.extent, 1);
                    assert_eq!(sl.labels.len(), 1);
                    assert!(s.labels[sl.labels[0]].0.starts_with("..."));
                } else {
                    assert_eq!(prod, ax.extent);
                }
            }
        }
        let out = s.output_labels();
        for (i, l) in out.iter().enumerate() {
            assert!(*l < s.labels.len());
            assert!(!out[..i].contains(l), "duplicate output label");
        }
        let _ = s.out_extents();
        for k in 0..ops.len() {
            let _ = s.operand_labels(k);
        }
    }

    #[test]
    fn einsum_attention_scores() {
        let s = esum_ok(
            "b h i d, b h j d -> b h i j",
            &[&[2, 3, 4, 5], &[2, 3, 6, 5]],
        );
        assert_eq!(
            label_names(&s),
            vec![("b", 2), ("h", 3), ("i", 4), ("d", 5), ("j", 6)]
        );
        assert_eq!(
            s.operands[0],
            vec![slot(&[0]), slot(&[1]), slot(&[2]), slot(&[3])]
        );
        assert_eq!(
            s.operands[1],
            vec![slot(&[0]), slot(&[1]), slot(&[4]), slot(&[3])]
        );
        assert_eq!(s.output, vec![vec![0], vec![1], vec![2], vec![4]]);
        assert_eq!(s.out_extents(), vec![2, 3, 4, 6]);
    }

    #[test]
    fn einsum_matmul_chain_trace_diagonal() {
        let s = esum_ok("a b, b c, c d -> a d", &[&[2, 3], &[3, 4], &[4, 5]]);
        assert_eq!(s.out_extents(), vec![2, 5]);
        assert_eq!(s.operand_labels(1), vec![1, 2]);
        let s = esum_ok("i i ->", &[&[3, 3]]);
        assert_eq!(s.operands[0], vec![slot(&[0]), slot(&[0])]);
        assert!(s.output.is_empty());
        let s = esum_ok("i i -> i", &[&[3, 3]]);
        assert_eq!(s.output, vec![vec![0]]);
        let s = esum_ok("batch seq, seq feat -> batch feat", &[&[2, 3], &[3, 4]]);
        assert_eq!(label_names(&s), vec![("batch", 2), ("seq", 3), ("feat", 4)]);
    }

    #[test]
    fn einsum_composition() {
        let s = esum_ok("b (h d), h d o -> b o", &[&[2, 12], &[3, 4, 5]]);
        assert_eq!(
            label_names(&s),
            vec![("b", 2), ("h", 3), ("d", 4), ("o", 5)]
        );
        assert_eq!(s.operands[0], vec![slot(&[0]), slot(&[1, 2])]);
        let s = esum_ok("b h d -> b (h d)", &[&[2, 3, 4]]);
        assert_eq!(s.output, vec![vec![0], vec![1, 2]]);
        assert_eq!(s.out_extents(), vec![2, 12]);
        // One unknown per group, iterated to a fixed point across operands.
        let s = esum_ok("(a b), (b c), c -> a", &[&[6], &[12], &[4]]);
        assert_eq!(label_names(&s), vec![("a", 2), ("b", 3), ("c", 4)]);
        // A group's single label is a plain slot.
        let s = esum_ok("(i) j -> j i", &[&[2, 3]]);
        assert_eq!(s.out_extents(), vec![3, 2]);
        // Unit slots.
        let s = esum_ok("i (), i -> i ()", &[&[2, 1], &[2]]);
        assert_eq!(s.operands[0], vec![slot(&[0]), slot(&[])]);
        assert_eq!(s.out_extents(), vec![2, 1]);
    }

    #[test]
    fn einsum_ellipsis_broadcast() {
        let s = esum_ok("... i j, ... j k -> ... i k", &[&[5, 1, 2, 3], &[4, 3, 4]]);
        assert_eq!(
            label_names(&s),
            vec![("...0", 5), ("...1", 4), ("i", 2), ("j", 3), ("k", 4)]
        );
        assert_eq!(
            s.operands[0],
            vec![
                slot(&[0]),
                EinsumSlot {
                    labels: vec![1],
                    broadcast: true
                },
                slot(&[2]),
                slot(&[3]),
            ]
        );
        assert_eq!(s.operands[1], vec![slot(&[1]), slot(&[3]), slot(&[4])]);
        assert_eq!(s.out_extents(), vec![5, 4, 2, 4]);
        // Output `...` may be grouped.
        let s = esum_ok("b ... -> b (...)", &[&[2, 3, 4]]);
        assert_eq!(s.output, vec![vec![0], vec![1, 2]]);
        // All-ones broadcast axes stay 1.
        let s = esum_ok("... i -> ...", &[&[4, 1, 3]]);
        assert_eq!(s.out_extents(), vec![4, 1]);
        // `...` covering nothing needs no `...` in the output (numpy agrees).
        let s = esum_ok("... i -> i", &[&[3]]);
        assert_eq!(s.out_extents(), vec![3]);
        // Output `...` without input `...` is empty.
        let s = esum_ok("i j -> ... i j", &[&[2, 3]]);
        assert_eq!(s.out_extents(), vec![2, 3]);
    }

    #[test]
    fn einsum_missing_arrow_spells_out_implicit_output() {
        let d = esum_bad(
            "i j, j k",
            &[&[2, 3], &[3, 4]],
            Code::PatternMissingArrow,
            "^^^^^^^^",
        );
        assert_eq!(
            d.help.as_deref(),
            Some("write it with an explicit output: \"i j, j k -> i k\"")
        );
        let d = esum_bad("i i", &[&[3, 3]], Code::PatternMissingArrow, "^^^");
        assert!(d.help.as_deref().unwrap_or("").ends_with("\"i i ->\""));
        let d = esum_bad(
            "... j i, ... b",
            &[&[2, 3], &[3]],
            Code::PatternMissingArrow,
            "^^^^^^^^^^^^^^",
        );
        assert!(d
            .help
            .as_deref()
            .unwrap_or("")
            .ends_with("\"... j i, ... b -> ... b i j\""));
        let d = esum_bad(
            "seq batch, seq feat",
            &[&[3, 2], &[3, 4]],
            Code::PatternMissingArrow,
            "^^^^^^^^^^^^^^^^^^^",
        );
        assert!(d.help.as_deref().unwrap_or("").ends_with("-> batch feat\""));
    }

    #[test]
    fn einsum_structural_errors() {
        let d = esum_bad(
            "i j, j k -> i k",
            &[&[2, 3], &[3, 4], &[4]],
            Code::PatternOperands,
            "^^^^^^^^",
        );
        assert!(d.message.contains("2 operands") && d.message.contains("3 were"));
        esum_bad(
            "i j -> i k",
            &[&[2, 3]],
            Code::PatternAxisOneSide,
            "         ^",
        );
        esum_bad(
            "i j -> i i",
            &[&[2, 3]],
            Code::PatternDuplicateAxis,
            "         ^",
        );
        esum_bad("(h h) -> h", &[&[4]], Code::PatternDuplicateAxis, "   ^");
        esum_bad("i j -> i", &[&[2]], Code::PatternRank, "^^^");
        esum_bad(
            "a, i j ... k -> i",
            &[&[2], &[2, 3]],
            Code::PatternRank,
            "   ^^^^^^^^^",
        );
        esum_bad("i 2 -> i", &[&[2, 2]], Code::PatternAnonymous, "  ^");
        esum_bad("i,,j -> i", &[&[2], &[], &[2]], Code::PatternSyntax, "  ^");
        esum_bad(
            "i, , j -> i",
            &[&[2], &[], &[2]],
            Code::PatternSyntax,
            "  ^",
        );
        esum_bad("-> ", &[&[]], Code::PatternSyntax, "^^");
        esum_bad("(...) i -> i", &[&[2, 3]], Code::PatternEllipsis, " ^^^");
        esum_bad(
            "... ... i -> i",
            &[&[2, 3]],
            Code::PatternEllipsis,
            "    ^^^",
        );
        esum_bad("i -> i -> i", &[&[2]], Code::PatternSyntax, "       ^^");
        esum_bad("i -> i, i", &[&[2]], Code::PatternSyntax, "      ^");
    }

    #[test]
    fn einsum_extent_errors() {
        let d = esum_bad(
            "i j, j k -> i k",
            &[&[2, 3], &[4, 5]],
            Code::ExtentMismatch,
            "     ^",
        );
        assert!(d.message.contains("operand 1") && d.message.contains("operand 2"));
        assert!(d.message.contains('3') && d.message.contains('4'));
        let d = esum_bad("i i -> i", &[&[2, 3]], Code::ExtentMismatch, "  ^");
        assert!(d.message.contains("diagonal"));
        let d = esum_bad(
            "i j, j k -> i k",
            &[&[2, 1], &[3, 4]],
            Code::PatternBroadcast,
            "  ^",
        );
        assert!(d.message.contains("extent 1") && d.message.contains('3'));
        esum_bad(
            "i j, j k -> i k",
            &[&[2, 3], &[1, 4]],
            Code::PatternBroadcast,
            "     ^",
        );
        let d = esum_bad(
            "... i, ... i -> ... i",
            &[&[2, 3], &[4, 3]],
            Code::BroadcastMismatch,
            "       ^^^",
        );
        assert_eq!(d.labels.len(), 2);
        esum_bad(
            "... i -> i",
            &[&[2, 3]],
            Code::PatternEllipsis,
            "         ^",
        );
        esum_bad("... i ->", &[&[2, 3]], Code::PatternEllipsis, "      ^^");
        // A group used whole in every slot needs no split.
        esum("b (h d), (h d) o -> b o", &[&[2, 12], &[12, 5]]).expect("used whole");
        esum_bad(
            "b (h d), (h d) o -> b h o",
            &[&[2, 12], &[12, 5]],
            Code::PatternTwoUnknowns,
            "  ^^^^^",
        );
        esum_bad(
            "b (h d), (d h) o -> b o",
            &[&[2, 12], &[12, 5]],
            Code::PatternTwoUnknowns,
            "  ^^^^^",
        );
        esum_bad(
            "(h d), d -> h",
            &[&[10], &[3]],
            Code::PatternIndivisible,
            "^^^^^",
        );
        esum_bad(
            "(h d), h, d -> h d",
            &[&[10], &[2], &[4]],
            Code::ExtentMismatch,
            "^^^^^",
        );
        esum_bad("(), i -> i", &[&[2], &[2]], Code::ExtentMismatch, "^^");
        esum_bad("(h d), d -> h", &[&[0], &[0]], Code::ZeroExtent, "^^^^^");
        let big = 1u64 << 40;
        esum_bad(
            "i, j -> (i j)",
            &[&[big], &[big]],
            Code::SizeOverflow,
            "        ^^^^^",
        );
        esum_bad(
            "i, j -> i j",
            &[&[big], &[big]],
            Code::SizeOverflow,
            "        ^^^",
        );
        esum_bad(
            "(i j), i, j -> i",
            &[&[4], &[big], &[big]],
            Code::SizeOverflow,
            "^^^^^",
        );
    }

    type EinsumCase = (
        &'static str,
        &'static [&'static [u64]],
        Option<&'static [u64]>,
    );

    #[test]
    fn numpy_einsum_reference_table() {
        for &(p, shapes, expected) in EINSUM_CASES {
            let got = esum(p, shapes);
            match (&got, expected) {
                (Ok(s), Some(want)) => assert_eq!(s.out_extents(), want, "{p:?} on {shapes:?}"),
                (Err(_), None) => {}
                _ => panic!("{p:?} on {shapes:?}: numpy gives {expected:?}, tdsl {got:?}"),
            }
        }
        for &(p, shapes, numpy) in EINSUM_DEVIATIONS {
            assert!(numpy.is_some());
            let d = esum(p, shapes).expect_err(p);
            assert_eq!(d.code, Code::PatternBroadcast);
        }
    }

    // ----- robustness ------------------------------------------------------------------------

    /// xorshift64*: a small deterministic generator for the fuzz loops.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
            &items[self.below(items.len())]
        }
    }

    const TOKENS: &[&str] = &[
        "a",
        "b",
        "c",
        "h",
        "w",
        "d",
        "1",
        "2",
        "3",
        "0",
        "01",
        "()",
        "(",
        ")",
        "...",
        ".",
        "->",
        "->",
        "->",
        " ",
        " ",
        " ",
        ",",
        ",",
        "_x",
        "x_",
        "\u{e9}",
        "\t",
        "-",
        ">",
        "(h w)",
        "(h 2)",
        "(...)",
        "99999999999999999999999",
        "ab",
        "a1",
    ];
    const EXTENTS: &[u64] = &[0, 1, 1, 2, 2, 3, 4, 6, 12, 1 << 33, u64::MAX];
    const KW_NAMES: &[&str] = &["a", "b", "c", "h", "w", "d", "_x", "z"];
    const KW_VALUES: &[u64] = &[0, 1, 2, 3, 4, 1 << 40, u64::MAX];

    fn random_shape(rng: &mut Rng) -> Shape {
        let rank = rng.below(6);
        shape(&(0..rank).map(|_| *rng.pick(EXTENTS)).collect::<Vec<_>>())
    }

    fn exercise(pattern: &str, rng: &mut Rng) {
        let ps = span_of(pattern);
        for op in [Rearrange, Reduce, Repeat] {
            let input = random_shape(rng);
            let kw: Vec<(String, u64, Span)> = (0..rng.below(4))
                .map(|i| {
                    (
                        rng.pick(KW_NAMES).to_string(),
                        *rng.pick(KW_VALUES),
                        Span::new(i, i + 1),
                    )
                })
                .collect();
            match resolve_pattern(op, pattern, ps, &input, &kw) {
                Ok(r) => check_recipe(op, &r, &input),
                Err(d) => assert_span_inside(pattern, &d, &kw),
            }
        }
        let ops: Vec<Shape> = (0..1 + rng.below(3)).map(|_| random_shape(rng)).collect();
        match resolve_einsum(pattern, ps, &ops, &[]) {
            Ok(s) => check_spec(&s, &ops),
            Err(d) => assert_span_inside(pattern, &d, &[]),
        }
    }

    fn assert_span_inside(pattern: &str, d: &Diagnostic, kw: &[(String, u64, Span)]) {
        let s = d.span().expect("every diagnostic has a span");
        if kw.iter().any(|k| k.2 == s) {
            return;
        }
        let (lo, hi) = (s.start as usize, s.end as usize);
        assert!(
            lo >= BASE && hi <= BASE + pattern.len() && lo <= hi,
            "{pattern:?} {d:?}"
        );
        if !pattern.is_empty() {
            assert!(lo < hi, "empty span for {pattern:?}: {d:?}");
        }
        assert!(
            pattern.is_char_boundary(lo - BASE) && pattern.is_char_boundary(hi - BASE),
            "{pattern:?} {d:?}"
        );
    }

    #[test]
    fn fuzz_token_soup_never_panics() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            let n = rng.below(12);
            let mut p = String::new();
            for _ in 0..n {
                let t: &str = TOKENS[rng.below(TOKENS.len())];
                p.push_str(t);
                if rng.below(2) == 0 {
                    p.push(' ');
                }
            }
            exercise(&p, &mut rng);
        }
    }

    #[test]
    fn fuzz_random_bytes_never_panic() {
        let mut rng = Rng(0x0123_4567_89ab_cdef);
        for _ in 0..5_000 {
            let n = rng.below(24);
            let bytes: Vec<u8> = (0..n)
                .map(|_| match rng.below(4) {
                    0 => *rng.pick(b"()., ->_1ah"),
                    _ => (rng.next() & 0xff) as u8,
                })
                .collect();
            let p = String::from_utf8_lossy(&bytes).into_owned();
            exercise(&p, &mut rng);
        }
    }

    type Axes<'a> = Vec<(&'a str, u64)>;

    /// Splits `axes` into consecutive groups of 1 to 3.
    fn group_up<'a>(rng: &mut Rng, axes: &[(&'a str, u64)]) -> Vec<Axes<'a>> {
        let mut groups = Vec::new();
        let mut i = 0;
        while i < axes.len() {
            let len = (1 + rng.below(3)).min(axes.len() - i);
            groups.push(axes[i..i + len].to_vec());
            i += len;
        }
        groups
    }

    /// Random valid rearrangements: split the input into groups of named axes, permute and
    /// regroup them, and check the resolved output extents against a direct computation.
    #[test]
    fn random_valid_rearranges_resolve_correctly() {
        let mut rng = Rng(42);
        let pool = ["a", "b", "c", "d", "e", "f"];
        for _ in 0..3_000 {
            let k = rng.below(pool.len() + 1);
            let mut axes: Vec<(&str, u64)> = pool[..k]
                .iter()
                .map(|&n| (n, 1 + rng.below(4) as u64))
                .collect();
            let render = |groups: &[Axes]| {
                groups
                    .iter()
                    .map(|g| {
                        let names: Vec<&str> = g.iter().map(|a| a.0).collect();
                        if g.len() == 1 {
                            names[0].to_string()
                        } else {
                            format!("({})", names.join(" "))
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let left = group_up(&mut rng, &axes);
            let ext: Vec<u64> = left
                .iter()
                .map(|g| g.iter().map(|a| a.1).product())
                .collect();
            let mut kw: Vec<(&str, u64)> = Vec::new();
            for g in &left {
                let skip = rng.below(g.len());
                kw.extend(
                    g.iter()
                        .enumerate()
                        .filter(|&(i, _)| i != skip)
                        .map(|(_, &a)| a),
                );
            }
            for i in (1..axes.len()).rev() {
                axes.swap(i, rng.below(i + 1));
            }
            let right = group_up(&mut rng, &axes);
            let p = format!("{} -> {}", render(&left), render(&right));
            let r = ok(Rearrange, &p, &ext, &kw);
            let want: Vec<u64> = right
                .iter()
                .map(|g| g.iter().map(|a| a.1).product())
                .collect();
            assert_eq!(r.out_extents(), want, "{p}");
            for (g, name) in right.iter().zip(&r.out_names) {
                let expect = (g.len() == 1).then(|| g[0].0.to_string());
                assert_eq!(name, &expect, "{p}");
            }
            // The same pattern as a reduce over a dropped axis, and a repeat adding one.
            if let Some(drop) = right.first().and_then(|g| g.first()) {
                let rest: Vec<Axes> = right
                    .iter()
                    .map(|g| g.iter().filter(|a| a.0 != drop.0).copied().collect())
                    .filter(|g: &Axes| !g.is_empty())
                    .collect();
                let p = format!("{} -> {}", render(&left), render(&rest));
                let r = ok(Reduce, &p, &ext, &kw);
                assert_eq!(r.reduced.len(), 1, "{p}");
            }
            let p = format!("{} -> z {}", render(&left), render(&right));
            let mut kw2 = kw.clone();
            kw2.push(("z", 2));
            let r = ok(Repeat, &p, &ext, &kw2);
            assert_eq!(r.out_groups[0], vec![New(2)]);
        }
    }

    // ----- generated by tests/python/gen_pattern_cases.py ------------------------------------
    // Regenerate: `pip install einops numpy && python3 tests/python/gen_pattern_cases.py` and
    // paste its output between the BEGIN/END markers.
    // BEGIN GENERATED
    // einops 0.8.2, numpy 2.4.6
    #[rustfmt::skip]
    const EINOPS_CASES: &[EinopsCase] = &[
        ("rearrange", "b h w c -> b c h w", &[2, 3, 4, 5], &[], Some(&[2, 5, 3, 4])),
        ("rearrange", "b h w c -> (b h) w c", &[2, 3, 4, 5], &[], Some(&[6, 4, 5])),
        ("rearrange", "b h w c -> b (c h w)", &[2, 3, 4, 5], &[], Some(&[2, 60])),
        ("rearrange", "b (h1 h) (w1 w) c -> (b h1 w1) h w c", &[2, 4, 6, 3], &[("h1", 2), ("w1", 2)], Some(&[8, 2, 3, 3])),
        ("rearrange", "b (h h1) (w w1) c -> b h w (c h1 w1)", &[2, 4, 6, 3], &[("h1", 2), ("w1", 2)], Some(&[2, 2, 3, 12])),
        ("rearrange", "(a b) -> a b", &[6], &[("a", 2)], Some(&[2, 3])),
        ("rearrange", "b (h w) -> b h w", &[2, 6], &[("h", 2), ("w", 3)], Some(&[2, 2, 3])),
        ("rearrange", "a b -> b a", &[2, 3], &[("a", 2)], Some(&[3, 2])),
        ("rearrange", "... -> ...", &[2, 3], &[], Some(&[2, 3])),
        ("rearrange", "b ... -> ... b", &[2, 3, 4], &[], Some(&[3, 4, 2])),
        ("rearrange", "b ... c -> b (...) c", &[2, 3, 4, 5], &[], Some(&[2, 12, 5])),
        ("rearrange", "b ... -> b (...)", &[2], &[], Some(&[2, 1])),
        ("rearrange", "... h w -> ... (h w)", &[2, 3, 4], &[], Some(&[2, 12])),
        ("rearrange", "... h w -> ... (h w)", &[3, 4], &[], Some(&[12])),
        ("rearrange", "b ... -> (... b)", &[2, 3, 4], &[], Some(&[24])),
        ("rearrange", "h w -> w h 1", &[3, 4], &[], Some(&[4, 3, 1])),
        ("rearrange", "h w -> w () h", &[3, 4], &[], Some(&[4, 1, 3])),
        ("rearrange", "1 h w -> h w", &[1, 3, 4], &[], Some(&[3, 4])),
        ("rearrange", "() h w -> h w", &[1, 3, 4], &[], Some(&[3, 4])),
        ("rearrange", "(h 1) w -> h (1 w)", &[3, 4], &[], Some(&[3, 4])),
        ("rearrange", "01 h -> h", &[1, 3], &[], Some(&[3])),
        ("rearrange", "h w -> (w h)", &[3, 4], &[], Some(&[12])),
        ("rearrange", "->", &[], &[], Some(&[])),
        ("rearrange", "h -> h 1 1", &[5], &[], Some(&[5, 1, 1])),
        ("rearrange", "a_b c1 -> c1 a_b", &[2, 3], &[], Some(&[3, 2])),
        ("rearrange", "batch seq -> seq batch", &[2, 3], &[], Some(&[3, 2])),
        ("rearrange", "(a b) c -> a b c", &[0, 3], &[("b", 2)], Some(&[0, 2, 3])),
        ("rearrange", "  b   h  ->  h b ", &[2, 3], &[], Some(&[3, 2])),
        ("rearrange", "b(h w)->b h w", &[2, 6], &[("h", 3)], Some(&[2, 3, 2])),
        ("rearrange", "b h w -> b h", &[2, 3, 4], &[], None),  // EinopsError: Identifiers only on one side of expression (should be on both): {'w'}
        ("rearrange", "b h -> b h w", &[2, 3], &[], None),  // EinopsError: Identifiers only on one side of expression (should be on both): {'w'}
        ("rearrange", "b h w -> b h w", &[2, 3], &[], None),  // EinopsError: Wrong shape: expected 3 dims. Received 2-dim tensor.
        ("rearrange", "b h -> b h h", &[2, 3], &[], None),  // EinopsError: Indexing expression contains duplicate dimension "h"
        ("rearrange", "b b -> b", &[2, 2], &[], None),  // EinopsError: Indexing expression contains duplicate dimension "b"
        ("rearrange", "(h w) -> h w", &[6], &[], None),  // EinopsError: Could not infer sizes for {'h', 'w'}
        ("rearrange", "(h w) -> h w", &[6], &[("h", 4)], None),  // EinopsError: Shape mismatch, can't divide axis of length 6 in chunks of 4
        ("rearrange", "(h w) -> h w", &[6], &[("h", 2), ("w", 4)], None),  // EinopsError: Shape mismatch, 6 != 8
        ("rearrange", "(h w) -> h w", &[6], &[("h", 0)], None),  // ZeroDivisionError: integer modulo by zero
        ("rearrange", "b (h 2) -> b h", &[2, 6], &[], None),  // EinopsError: Non-unitary anonymous axes are not supported in rearrange (exception is lengt
        ("rearrange", "b h -> b h 2", &[2, 3], &[], None),  // EinopsError: Non-unitary anonymous axes are not supported in rearrange (exception is lengt
        ("rearrange", "b ((h w)) -> b h w", &[2, 6], &[], None),  // EinopsError: Axis composition is one-level (brackets inside brackets not allowed)
        ("rearrange", "b (h w -> b h w", &[2, 6], &[], None),  // EinopsError: Imbalanced parentheses in expression: "b (h w "
        ("rearrange", "b h) -> b h", &[2, 6], &[], None),  // EinopsError: Brackets are not balanced
        ("rearrange", "b h -> b h", &[2, 3], &[("c", 3)], None),  // EinopsError: Axis c is not used in transform
        ("rearrange", "b .. -> b", &[2, 3], &[], None),  // EinopsError: Expression may contain dots only inside ellipsis (...)
        ("rearrange", "b ... ... -> b", &[2, 3], &[], None),  // EinopsError: Expression may contain dots only inside ellipsis (...); only one ellipsis for
        ("rearrange", "b .... -> b ....", &[2, 3], &[], None),  // EinopsError: Expression may contain dots only inside ellipsis (...); only one ellipsis for
        ("rearrange", "b a...  -> b a...", &[2, 3], &[], None),  // EinopsError: not a valid python identifier
        ("rearrange", "b (...) -> b ...", &[2, 3], &[], None),  // EinopsError: Ellipsis inside parenthesis in the left side is not allowed: b (...) -> b ...
        ("rearrange", "b h -> b ... h", &[2, 3], &[], None),  // EinopsError: Ellipsis found in right side, but not left side of a pattern b h -> b ... h
        ("rearrange", "... h -> h", &[2, 3], &[], None),  // EinopsError: Identifiers only on one side of expression (should be on both): {'?'}
        ("rearrange", "b h", &[2, 3], &[], None),  // ValueError: not enough values to unpack (expected 2, got 1)
        ("rearrange", "b -> h -> b", &[2], &[], None),  // ValueError: too many values to unpack (expected 2)
        ("rearrange", "_b h -> h _b", &[2, 3], &[], None),  // EinopsError: axis name should should not start or end with underscore
        ("rearrange", "b_ h -> h b_", &[2, 3], &[], None),  // EinopsError: axis name should should not start or end with underscore
        ("rearrange", "2b h -> h 2b", &[2, 3], &[], None),  // EinopsError: not a valid python identifier
        ("rearrange", "b\th -> h\tb", &[2, 3], &[], None),  // EinopsError: Unknown character '?'
        ("rearrange", "b-h -> b", &[2, 3], &[], None),  // EinopsError: Unknown character '-'
        ("rearrange", "1 h -> h", &[2, 3], &[], None),  // EinopsError: Shape mismatch, 2 != 1
        ("rearrange", "h -> h 0", &[2], &[], None),  // EinopsError: Anonymous axis should have positive length, not 0
        ("rearrange", "... a b -> ... b a", &[2], &[], None),  // EinopsError: Wrong shape: expected >=2 dims. Received 1-dim tensor.
        ("rearrange", "h w -> w h", &[4, 5], &[("h", 3)], None),  // EinopsError: Shape mismatch, 4 != 3
        ("rearrange", "h w -> w h", &[4, 5], &[("_", 3)], None),  // EinopsError: ('Invalid name for an axis', '_')
        ("rearrange", "h w -> w h", &[4, 5], &[("h_", 4)], None),  // EinopsError: ('Invalid name for an axis', 'h_')
        ("reduce", "t b c -> b c", &[2, 3, 4], &[], Some(&[3, 4])),
        ("reduce", "b c (h1 h2) (w1 w2) -> b c h1 w1", &[2, 3, 4, 6], &[("h2", 2), ("w2", 2)], Some(&[2, 3, 2, 3])),
        ("reduce", "b c (h1 2) (w1 2) -> b c h1 w1", &[2, 3, 4, 6], &[], Some(&[2, 3, 2, 3])),
        ("reduce", "b c (h1 h2) (w1 w2) -> b c h1 w1", &[2, 3, 6, 8], &[("h1", 3), ("w1", 4)], Some(&[2, 3, 3, 4])),
        ("reduce", "b c h w -> b c", &[2, 3, 4, 5], &[], Some(&[2, 3])),
        ("reduce", "b c h w -> 1 c 1 1", &[2, 3, 4, 5], &[], Some(&[1, 3, 1, 1])),
        ("reduce", "b c h w -> b c () ()", &[2, 3, 4, 5], &[], Some(&[2, 3, 1, 1])),
        ("reduce", "b ... -> b", &[2, 3, 4], &[], Some(&[2])),
        ("reduce", "... c -> c", &[2, 3, 4], &[], Some(&[4])),
        ("reduce", "b h w ->", &[2, 3, 4], &[], Some(&[])),
        ("reduce", "b (h 2) -> b", &[2, 6], &[], Some(&[2])),
        ("reduce", "b (2 h) -> b h", &[2, 6], &[], Some(&[2, 3])),
        ("reduce", "b (h 2) (w 2) -> b (h w)", &[2, 4, 6], &[], Some(&[2, 6])),
        ("reduce", "b (h 2) (w 2) -> b (w h)", &[2, 4, 6], &[], Some(&[2, 6])),
        ("reduce", "b h -> b h", &[2, 3], &[], Some(&[2, 3])),
        ("reduce", "b ... -> b ...", &[2, 3, 4], &[], Some(&[2, 3, 4])),
        ("reduce", "(b 1) h -> b", &[2, 3], &[], Some(&[2])),
        ("reduce", "b h -> h", &[2, 3], &[("b", 2)], Some(&[3])),
        ("reduce", "b (h 2 3) -> h b", &[2, 12], &[], Some(&[2, 2])),
        ("reduce", "b h -> b w", &[2, 3], &[], None),  // EinopsError: Unexpected identifiers on the right side of reduce sum: {'w'}
        ("reduce", "b h -> b 2", &[2, 3], &[], None),  // EinopsError: Unexpected identifiers on the right side of reduce sum: {2-axis}
        ("reduce", "b (h 3) -> b h", &[2, 4], &[], None),  // EinopsError: Shape mismatch, can't divide axis of length 4 in chunks of 3
        ("reduce", "b h -> b h", &[2, 3, 4], &[], None),  // EinopsError: Wrong shape: expected 2 dims. Received 3-dim tensor.
        ("reduce", "b h -> b ...", &[2, 3], &[], None),  // EinopsError: Ellipsis found in right side, but not left side of a pattern b h -> b ...
        ("reduce", "b (h 0) -> b", &[2, 3], &[], None),  // EinopsError: Anonymous axis should have positive length, not 0
        ("reduce", "b h w -> b", &[2, 3, 4], &[("c", 2)], None),  // EinopsError: Axis c is not used in transform
        ("reduce", "b (h w) -> b", &[2, 6], &[], None),  // EinopsError: Could not infer sizes for {'h', 'w'}
        ("reduce", "b h -> b b", &[2, 3], &[], None),  // EinopsError: Indexing expression contains duplicate dimension "b"
        ("repeat", "h w -> h w c", &[2, 3], &[("c", 3)], Some(&[2, 3, 3])),
        ("repeat", "h w -> (repeat h) w", &[2, 3], &[("repeat", 2)], Some(&[4, 3])),
        ("repeat", "h w -> h (w 2)", &[2, 3], &[], Some(&[2, 6])),
        ("repeat", "h w -> h w 3", &[2, 3], &[], Some(&[2, 3, 3])),
        ("repeat", "... -> ... c", &[2, 3], &[("c", 2)], Some(&[2, 3, 2])),
        ("repeat", "b ... -> b c ...", &[2, 3, 4], &[("c", 2)], Some(&[2, 2, 3, 4])),
        ("repeat", "h w -> h w 1", &[2, 3], &[], Some(&[2, 3, 1])),
        ("repeat", "() h -> c h", &[1, 4], &[("c", 3)], Some(&[3, 4])),
        ("repeat", "1 h -> c h", &[1, 4], &[("c", 3)], Some(&[3, 4])),
        ("repeat", "h -> h", &[3], &[], Some(&[3])),
        ("repeat", "h w -> (h 2) (w 2)", &[2, 3], &[], Some(&[4, 6])),
        ("repeat", "h -> h c", &[3], &[("c", 1)], Some(&[3, 1])),
        ("repeat", "h -> (c h)", &[3], &[("c", 2), ("h", 3)], Some(&[6])),
        ("repeat", "b ... -> b (... c)", &[2, 3, 4], &[("c", 2)], Some(&[2, 24])),
        ("repeat", "h -> 2 h 3", &[3], &[], Some(&[2, 3, 3])),
        ("repeat", "-> a b", &[], &[("a", 2), ("b", 3)], Some(&[2, 3])),
        ("repeat", "h w -> h c", &[2, 3], &[("c", 2)], None),  // EinopsError: Unexpected identifiers on the left side of repeat: {'w'}
        ("repeat", "h w -> h w c", &[2, 3], &[], None),  // EinopsError: Specify sizes for new axes in repeat: {'c'}
        ("repeat", "h (w 2) -> h w", &[2, 6], &[], None),  // EinopsError: Unexpected identifiers on the left side of repeat: {2-axis}
        ("repeat", "h -> h c", &[3], &[("c", 2), ("d", 2)], None),  // EinopsError: Axis d is not used in transform
        ("repeat", "... h -> h c", &[2, 3], &[("c", 2)], None),  // EinopsError: Unexpected identifiers on the left side of repeat: {'?'}
        ("repeat", "h -> h h", &[3], &[], None),  // EinopsError: Indexing expression contains duplicate dimension "h"
        ("repeat", "h -> h c c", &[3], &[("c", 2)], None),  // EinopsError: Indexing expression contains duplicate dimension "c"
        ("repeat", "h -> h c", &[3], &[("h", 2), ("c", 2)], None),  // EinopsError: Shape mismatch, 3 != 2
        ("repeat", "h -> (h c)", &[3], &[], None),  // EinopsError: Specify sizes for new axes in repeat: {'c'}
        ("repeat", "(h w) -> h w c", &[6], &[("c", 2)], None),  // EinopsError: Could not infer sizes for {'h', 'w'}
    ];
    #[rustfmt::skip]
    const EINOPS_DEVIATIONS: &[EinopsCase] = &[
        ("repeat", "h w -> h w c", &[2, 3], &[("c", 0)], Some(&[2, 3, 0])),
        ("rearrange", "\u{e9} h -> h \u{e9}", &[2, 3], &[], Some(&[3, 2])),
    ];
    #[rustfmt::skip]
    const EINSUM_CASES: &[EinsumCase] = &[
        ("i j, j k -> i k", &[&[2, 3], &[3, 4]], Some(&[2, 4])),
        ("b h i d, b h j d -> b h i j", &[&[2, 3, 4, 5], &[2, 3, 6, 5]], Some(&[2, 3, 4, 6])),
        ("i i ->", &[&[3, 3]], Some(&[])),
        ("i i -> i", &[&[3, 3]], Some(&[3])),
        ("i j -> j i", &[&[2, 3]], Some(&[3, 2])),
        ("i j ->", &[&[2, 3]], Some(&[])),
        ("a b, b c, c d -> a d", &[&[2, 3], &[3, 4], &[4, 5]], Some(&[2, 5])),
        ("i, i ->", &[&[3], &[3]], Some(&[])),
        ("i, j -> i j", &[&[2], &[3]], Some(&[2, 3])),
        ("... i j, ... j k -> ... i k", &[&[5, 1, 2, 3], &[4, 3, 4]], Some(&[5, 4, 2, 4])),
        ("... i j, ... j k -> ... i k", &[&[5, 2, 2, 3], &[4, 3, 4]], None),  // ValueError: operands could not be broadcast together with remapped shapes [original->remap
        ("... i, ... i -> ... i", &[&[2, 3], &[4, 3]], None),  // ValueError: operands could not be broadcast together with remapped shapes [original->remap
        ("... i, ... i -> ... i", &[&[2, 1, 3], &[4, 3]], Some(&[2, 4, 3])),
        ("... i -> i", &[&[2, 3]], None),  // ValueError: output has more dimensions than subscripts given in einstein sum, but no '...'
        ("... i -> i", &[&[3]], Some(&[3])),
        ("... i -> ...", &[&[4, 1, 3]], Some(&[4, 1])),
        ("i j -> ... i j", &[&[2, 3]], Some(&[2, 3])),
        ("i ... -> ... i", &[&[2, 3, 4]], Some(&[3, 4, 2])),
        ("i i i -> i", &[&[2, 2, 2]], Some(&[2])),
        ("i i -> i", &[&[2, 3]], None),  // ValueError: dimensions in single operand for collapsing index 'i' don't match (2 != 3)
        ("i j, j k -> i k", &[&[2, 3], &[4, 5]], None),  // ValueError: operands could not be broadcast together with remapped shapes [original->remap
        ("i j -> i k", &[&[2, 3]], None),  // ValueError: einstein sum subscripts string included output subscript 'k' which never appea
        ("i j -> i i", &[&[2, 3]], None),  // ValueError: einstein sum subscripts string includes output subscript 'i' multiple times
        ("i j -> i", &[&[2]], None),  // ValueError: einstein sum subscripts string contains too many subscripts for operand 0
        ("i j, j k -> i k", &[&[2, 3]], None),  // ValueError: more operands provided to einstein sum function than specified in the subscrip
        ("i j k -> k j i", &[&[2, 3, 4]], Some(&[4, 3, 2])),
        ("b i j, b j -> b i", &[&[2, 3, 4], &[2, 4]], Some(&[2, 3])),
    ];
    #[rustfmt::skip]
    const EINSUM_DEVIATIONS: &[EinsumCase] = &[
        ("i j, j k -> i k", &[&[2, 1], &[3, 4]], Some(&[2, 4])),
        ("i, i -> i", &[&[1], &[3]], Some(&[3])),
    ];
    // END GENERATED
}
