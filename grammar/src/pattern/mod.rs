//! The one parser of pattern strings: einops patterns (`rearrange`, `reduce`, `repeat`) and
//! einsum patterns (tdsl's space-separated labels with `(h d)` composition, and numpy's
//! one-letter subscripts `"ij,jk->ik"`).
//!
//! It turns a pattern into sides, groups and atoms with byte ranges ([`Einops`], [`Einsum`])
//! and applies every rule that holds whatever the input shapes are: characters, names,
//! parentheses, `...`, `->`, duplicates, which axes may sit on which side, numeric axes,
//! axis-length keywords (names, duplicates, unused ones, a literal `0`), one unknown per group,
//! einsum operand counts and labels missing from every operand. Errors carry a typed
//! [`PatternCode`] and byte ranges into the pattern ([`At`]).
//!
//! Three callers share it: the checker (`tdsl::check::pattern`), which resolves a parsed
//! pattern against input shapes (rank, divisibility, extent agreement); the Rust macros, which
//! run it at compile time; and [`check_script_patterns`], for scripts whose extents come from
//! data. So a pattern the macros reject is rejected by scripts with the same diagnostic.

use crate::span::Span;
pub use crate::suggest::closest;

mod einops;
mod einsum;
mod numpy;
mod parse;
mod script;
#[cfg(test)]
mod tests;

pub use einops::{parse_einops, Einops};
pub use einsum::{parse_einsum, Einsum};
pub use numpy::{check_einsum, numpy_like, numpy_subscripts, Subscripts};
pub use script::{check_script_patterns, ScriptPatternError};

/// Which einops operation a pattern belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PatternOp {
    Rearrange,
    Reduce,
    Repeat,
}

impl PatternOp {
    pub fn name(self) -> &'static str {
        match self {
            PatternOp::Rearrange => "rearrange",
            PatternOp::Reduce => "reduce",
            PatternOp::Repeat => "repeat",
        }
    }
}

/// The reduce ops, as written in patterns and scripts.
pub const REDUCE_OPS: [&str; 5] = ["sum", "mean", "max", "min", "prod"];

/// What went wrong, as a stable code; `tdsl::diag::Code` has the same codes and their text.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum PatternCode {
    Syntax,
    MissingArrow,
    DuplicateAxis,
    AxisOneSide,
    TwoUnknowns,
    UnusedKwarg,
    BadKwarg,
    Ellipsis,
    Anonymous,
    Operands,
    UnknownReduceOp,
    UnknownExtent,
    ZeroExtent,
    SizeOverflow,
}

impl PatternCode {
    /// The diagnostic code as users see it (`tdsl::pattern::syntax`).
    pub fn as_str(self) -> &'static str {
        match self {
            PatternCode::Syntax => "tdsl::pattern::syntax",
            PatternCode::MissingArrow => "tdsl::pattern::missing_arrow",
            PatternCode::DuplicateAxis => "tdsl::pattern::duplicate_axis",
            PatternCode::AxisOneSide => "tdsl::pattern::axis_one_side",
            PatternCode::TwoUnknowns => "tdsl::pattern::two_unknowns",
            PatternCode::UnusedKwarg => "tdsl::pattern::unused_axis_length",
            PatternCode::BadKwarg => "tdsl::pattern::bad_axis_length",
            PatternCode::Ellipsis => "tdsl::pattern::ellipsis",
            PatternCode::Anonymous => "tdsl::pattern::anonymous_axis",
            PatternCode::Operands => "tdsl::pattern::operand_count",
            PatternCode::UnknownReduceOp => "tdsl::pattern::unknown_reduce_op",
            PatternCode::UnknownExtent => "tdsl::check::unknown_extent",
            PatternCode::ZeroExtent => "tdsl::check::zero_extent",
            PatternCode::SizeOverflow => "tdsl::check::size_overflow",
        }
    }

    pub const ALL: [PatternCode; 14] = [
        PatternCode::Syntax,
        PatternCode::MissingArrow,
        PatternCode::DuplicateAxis,
        PatternCode::AxisOneSide,
        PatternCode::TwoUnknowns,
        PatternCode::UnusedKwarg,
        PatternCode::BadKwarg,
        PatternCode::Ellipsis,
        PatternCode::Anonymous,
        PatternCode::Operands,
        PatternCode::UnknownReduceOp,
        PatternCode::UnknownExtent,
        PatternCode::ZeroExtent,
        PatternCode::SizeOverflow,
    ];
}

impl std::fmt::Display for PatternCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an error points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// Bytes of the pattern string.
    Pattern(Pos),
    /// Axis-length keyword number `i` (in the order given).
    Keyword(usize),
}

/// A pattern error: a stable code, a message naming the offending axis, what it points at.
#[derive(Debug, Clone, PartialEq)]
pub struct PatternError {
    pub code: PatternCode,
    pub message: String,
    pub at: At,
    /// What the primary location marks ("only on the left").
    pub label: Box<str>,
    /// Further places (a first occurrence, a first `->`, the first of two keywords).
    pub others: Vec<(At, String)>,
    pub help: Option<Box<str>>,
}

impl PatternError {
    pub(crate) fn new(
        code: PatternCode,
        at: At,
        message: String,
        label: impl Into<String>,
    ) -> PatternError {
        PatternError {
            code,
            message,
            at,
            label: label.into().into_boxed_str(),
            others: Vec::new(),
            help: None,
        }
    }

    pub(crate) fn also(mut self, at: At, label: impl Into<String>) -> PatternError {
        self.others.push((at, label.into()));
        self
    }

    pub(crate) fn help(mut self, help: impl Into<String>) -> PatternError {
        self.help = Some(help.into().into_boxed_str());
        self
    }
}

impl std::fmt::Display for PatternError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PatternError {}

/// An axis-length keyword argument: its name and, when known before run time, its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keyword<'a> {
    pub name: &'a str,
    pub value: Option<u64>,
}

impl Keyword<'_> {
    /// `h=4`, or `h` when the value is not known yet.
    fn shown(&self) -> String {
        match self.value {
            Some(v) => format!("{}={v}", self.name),
            None => self.name.to_string(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The parsed form
// ---------------------------------------------------------------------------------------------

/// A byte range `lo..hi` of the pattern string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    pub lo: usize,
    pub hi: usize,
}

impl Pos {
    pub fn new(lo: usize, hi: usize) -> Pos {
        Pos { lo, hi }
    }

    pub fn span(self) -> Span {
        Span::new(self.lo, self.hi)
    }

    pub fn range(self) -> std::ops::Range<usize> {
        self.lo..self.hi
    }
}

/// One token of a pattern side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtomKind {
    Name(String),
    /// A numeric anonymous axis of length ≥ 2 (a `1` is a unit and never becomes an atom).
    Number(u64),
    Ellipsis,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Atom {
    pub kind: AtomKind,
    pub pos: Pos,
}

impl Atom {
    pub fn name(&self) -> Option<&str> {
        match &self.kind {
            AtomKind::Name(n) => Some(n),
            _ => None,
        }
    }
}

/// One slot of a side: a parenthesized group, a single bare atom, or a bare unit `1` (no atoms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub atoms: Vec<Atom>,
    pub paren: bool,
    pub pos: Pos,
}

impl Group {
    /// A bare `...` (standing for zero or more slots).
    pub fn is_bare_ellipsis(&self) -> bool {
        !self.paren && matches!(self.atoms.as_slice(), [a] if a.kind == AtomKind::Ellipsis)
    }

    /// The names of the group's atoms, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.atoms.iter().filter_map(Atom::name)
    }
}

/// One side of a pattern (or one einsum operand): its groups and the text it spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Side {
    pub groups: Vec<Group>,
    pub pos: Pos,
}

impl Side {
    pub fn atoms(&self) -> impl Iterator<Item = &Atom> {
        self.groups.iter().flat_map(|g| g.atoms.iter())
    }

    pub fn names(&self) -> impl Iterator<Item = (&str, &Atom)> {
        self.atoms().filter_map(|a| a.name().map(|n| (n, a)))
    }

    pub fn has_name(&self, name: &str) -> bool {
        self.names().any(|(n, _)| n == name)
    }

    /// The group holding `...` and the `...` atom itself.
    pub fn ellipsis(&self) -> Option<(usize, &Atom)> {
        self.groups.iter().enumerate().find_map(|(i, g)| {
            g.atoms
                .iter()
                .find(|a| a.kind == AtomKind::Ellipsis)
                .map(|a| (i, a))
        })
    }
}

/// einops' axis-name rule, restricted to ASCII: a Python identifier that does not start or
/// end with `_`. `Err` carries the reason.
pub fn check_axis_name(name: &str) -> Result<(), &'static str> {
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

/// Checks a reduce op name (`"sum"`, `"mean"`, `"max"`, `"min"`, `"prod"`); the error carries a
/// "did you mean" help and points at the whole name (`At::Pattern` over `0..name.len()`).
pub fn check_reduce_op(name: &str) -> Result<(), PatternError> {
    if REDUCE_OPS.contains(&name) {
        return Ok(());
    }
    let e = PatternError::new(
        PatternCode::UnknownReduceOp,
        At::Pattern(Pos::new(0, name.len())),
        format!("unknown reduce op `{name}`"),
        "not a reduce op",
    );
    Err(match closest(name, REDUCE_OPS.iter().copied()) {
        Some(c) => e.help(format!(
            "did you mean \"{c}\"? ops are \"sum\", \"mean\", \"max\", \"min\" and \"prod\""
        )),
        None => e.help("ops are \"sum\", \"mean\", \"max\", \"min\" and \"prod\""),
    })
}

/// The checks every axis-length keyword gets, in this order: a valid name, given once, naming
/// one of `names` (the pattern's axes or labels, first appearance first), and not `0`.
fn check_keywords(
    t: &parse::Text,
    kwargs: &[Keyword<'_>],
    names: &[&str],
    what: &str,
    plural_what: &str,
) -> Result<(), PatternError> {
    for (i, k) in kwargs.iter().enumerate() {
        let name = k.name;
        if let Err(reason) = check_axis_name(name) {
            return Err(PatternError::new(
                PatternCode::BadKwarg,
                At::Keyword(i),
                format!("`{name}` is not a valid axis name: {reason}"),
                "invalid axis name",
            ));
        }
        if let Some(first) = kwargs[..i].iter().position(|k| k.name == name) {
            return Err(PatternError::new(
                PatternCode::BadKwarg,
                At::Keyword(i),
                format!("the length of axis `{name}` is given twice"),
                "second length",
            )
            .also(At::Keyword(first), "first length")
            .help("give each axis length once"));
        }
        if !names.contains(&name) {
            let help = if names.is_empty() {
                "the pattern has no named axes; remove this argument".to_string()
            } else {
                format!(
                    "the pattern's {plural_what} are {}; remove the argument or fix its name",
                    ticked(names)
                )
            };
            return Err(PatternError::new(
                PatternCode::UnusedKwarg,
                At::Keyword(i),
                format!("axis length `{}` names no {what}", k.shown()),
                "not in the pattern",
            )
            .also(At::Pattern(t.whole()), "pattern")
            .help(help));
        }
        if k.value == Some(0) {
            return Err(PatternError::new(
                PatternCode::BadKwarg,
                At::Keyword(i),
                format!("axis length `{name}=0` must be at least 1"),
                "length 0",
            )
            .help("axis lengths are positive"));
        }
    }
    Ok(())
}

/// "`a`, `b`" for error messages.
fn ticked(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `"s"` for counts other than one.
fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

// ---------------------------------------------------------------------------------------------
// pack / unpack
// ---------------------------------------------------------------------------------------------

/// A parsed `pack`/`unpack` pattern (einops 0.8's `pack`): axis names around one `*`, which
/// stands for the axes that are flattened and concatenated (`"b * c"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pack {
    /// The names before `*`, with their positions.
    pub before: Vec<(String, Pos)>,
    /// Where `*` is.
    pub star: Pos,
    /// The names after `*`.
    pub after: Vec<(String, Pos)>,
}

/// Parses a `pack`/`unpack` pattern: names separated by spaces and exactly one `*`; no
/// parentheses, `...`, numbers or `->` (einops' rules).
pub fn parse_pack(func: &str, pattern: &str) -> Result<Pack, PatternError> {
    let t = parse::Text { pattern };
    let mut before: Vec<(String, Pos)> = Vec::new();
    let mut after: Vec<(String, Pos)> = Vec::new();
    let mut star: Option<Pos> = None;
    let mut start: Option<usize> = None;
    let mut tokens: Vec<Pos> = Vec::new();
    for (i, c) in pattern
        .char_indices()
        .chain(std::iter::once((pattern.len(), ' ')))
    {
        if c == ' ' {
            if let Some(s) = start.take() {
                tokens.push(Pos::new(s, i));
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    for p in tokens {
        let text = t.text(p);
        if text == "*" {
            if let Some(first) = star {
                return Err(t
                    .err(
                        PatternCode::Syntax,
                        p,
                        format!("`{func}` pattern `{pattern}` has more than one `*`"),
                        "second `*`",
                    )
                    .also(At::Pattern(first), "first `*`")
                    .help("one `*` marks the axes that are packed together"));
            }
            star = Some(p);
            continue;
        }
        if let Err(reason) = check_axis_name(text) {
            let help = match text {
                t if t.contains('(') || t.contains(')') => {
                    "pack patterns have no composition: name each axis, and let `*` cover the packed ones"
                }
                t if t.contains("...") => "write `*` for the axes `...` would cover",
                t if t.contains("->") => "pack patterns have one side: write `b * c`, not `->`",
                _ => reason,
            };
            return Err(t
                .err(
                    PatternCode::Syntax,
                    p,
                    format!("invalid axis `{text}` in `{func}` pattern: {reason}"),
                    "invalid axis",
                )
                .help(help));
        }
        if let Some((_, first)) = before.iter().chain(after.iter()).find(|(n, _)| n == text) {
            return Err(t
                .err(
                    PatternCode::DuplicateAxis,
                    p,
                    format!("axis `{text}` appears twice in the `{func}` pattern"),
                    "second occurrence",
                )
                .also(At::Pattern(*first), "first occurrence")
                .help("give each axis its own name"));
        }
        let list = if star.is_some() {
            &mut after
        } else {
            &mut before
        };
        list.push((text.to_string(), p));
    }
    let Some(star) = star else {
        return Err(t
            .err(
                PatternCode::Syntax,
                t.whole(),
                format!("`{func}` pattern `{pattern}` has no `*`"),
                "no `*` here",
            )
            .help("mark the axes to pack with `*`, as in einops: \"b * c\""));
    };
    Ok(Pack {
        before,
        star,
        after,
    })
}
