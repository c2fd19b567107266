//! The pattern engine's shape half: resolves einops-style and einsum patterns against input
//! shapes. Parsing and every rule that needs no shape belong to the one pattern parser,
//! `tdsl_syntax::pattern` (shared with the macros); this module maps its typed errors to
//! diagnostics and adds what needs extents: ranks, divisibility, extent agreement, broadcasting.
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
use tdsl_syntax::pattern::{
    At, AtomKind, Group, Keyword, PatternCode, PatternError, Pos, Side, Subscripts,
};
use tdsl_syntax::Span;

pub use tdsl_syntax::pattern::PatternOp;

/// The diagnostic code of a pattern error.
pub(crate) fn code(c: PatternCode) -> Code {
    match c {
        PatternCode::Syntax => Code::PatternSyntax,
        PatternCode::MissingArrow => Code::PatternMissingArrow,
        PatternCode::DuplicateAxis => Code::PatternDuplicateAxis,
        PatternCode::AxisOneSide => Code::PatternAxisOneSide,
        PatternCode::TwoUnknowns => Code::PatternTwoUnknowns,
        PatternCode::UnusedKwarg => Code::PatternUnusedKwarg,
        PatternCode::BadKwarg => Code::PatternBadKwarg,
        PatternCode::Ellipsis => Code::PatternEllipsis,
        PatternCode::Anonymous => Code::PatternAnonymous,
        PatternCode::Operands => Code::PatternOperands,
        PatternCode::UnknownReduceOp => Code::UnknownReduceOp,
        PatternCode::UnknownExtent => Code::UnknownExtent,
        PatternCode::ZeroExtent => Code::ZeroExtent,
        PatternCode::SizeOverflow => Code::SizeOverflow,
    }
}

/// A pattern error as a diagnostic: `at` maps pattern positions into the script and
/// keywords to their spans.
pub(crate) fn diagnostic(e: PatternError, at: &dyn Fn(At) -> Span) -> Diagnostic {
    let mut d = Diagnostic::new(code(e.code), e.message).label(at(e.at), e.label);
    for (a, text) in e.others {
        d = d.label(at(a), text);
    }
    match e.help {
        Some(h) => d.help(h),
        None => d,
    }
}

/// Axis-length keywords as the parser takes them.
fn keywords(kwargs: &[(String, u64, Span)]) -> Vec<Keyword<'_>> {
    kwargs
        .iter()
        .map(|(name, value, _)| Keyword {
            name,
            value: Some(*value),
        })
        .collect()
}

/// The pattern text and where it sits in the script.
struct Ctx<'a> {
    pattern: &'a str,
    base: Span,
    /// For numpy's subscripts: the spaced-out form that was parsed, with its map back to the
    /// written bytes.
    numpy: Option<&'a Subscripts>,
    /// The spans of the axis-length keywords, in order.
    kwargs: Vec<Span>,
}

impl Ctx<'_> {
    fn span(&self, p: Pos) -> Span {
        let p = self.numpy.map_or(p, |s| s.written(p));
        self.base.sub(p.lo, p.hi)
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

    /// A parser error, placed in the script.
    fn parse_error(&self, e: PatternError) -> Diagnostic {
        diagnostic(e, &|a| match a {
            At::Pattern(p) => self.span(p),
            At::Keyword(i) => self.kwargs.get(i).copied().unwrap_or(self.base),
        })
    }
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
#[cfg(test)]
mod tests;

pub use einops::resolve_pattern;
pub use einsum::resolve_einsum;
