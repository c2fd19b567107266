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

mod einops;
mod einsum;
mod numpy;
#[cfg(test)]
mod tests;

pub use einops::resolve_pattern;
pub use einsum::resolve_einsum;
