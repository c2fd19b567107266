//! Pattern syntax without shapes: the checks on einops and einsum pattern strings that need no
//! extents, for `tdsl-macros` (at compile time) and for scripts whose extents come from data.
//!
//! The rules are `tdsl::check::pattern`'s, rule for rule, in the same order, with the same codes
//! and messages, but only the ones that hold whatever the input shapes are: characters, names,
//! parentheses, `...`, `->`, duplicates, which axes may sit on which side, numeric axes,
//! axis-length keywords (names, duplicates, unused ones, a literal `0`), one unknown per group,
//! einsum operand counts and labels missing from every operand. Rank, divisibility and extent
//! agreement are left to the checker, which runs when the shapes are known.
//!
//! The invariant that makes the split safe: a pattern rejected here is rejected by
//! `tdsl::check::pattern` for every input shape (the integration test `tests/macros.rs` compares
//! the two on generated patterns). Spans are byte offsets into the pattern string; keyword errors
//! point at the keyword instead ([`At::Keyword`]).

use crate::span::Span;
pub use crate::suggest::closest;

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

/// Diagnostic codes used here; the text is `tdsl::diag::Code`'s.
pub mod codes {
    pub const SYNTAX: &str = "tdsl::pattern::syntax";
    pub const MISSING_ARROW: &str = "tdsl::pattern::missing_arrow";
    pub const DUPLICATE_AXIS: &str = "tdsl::pattern::duplicate_axis";
    pub const AXIS_ONE_SIDE: &str = "tdsl::pattern::axis_one_side";
    pub const TWO_UNKNOWNS: &str = "tdsl::pattern::two_unknowns";
    pub const UNUSED_KWARG: &str = "tdsl::pattern::unused_axis_length";
    pub const BAD_KWARG: &str = "tdsl::pattern::bad_axis_length";
    pub const ELLIPSIS: &str = "tdsl::pattern::ellipsis";
    pub const ANONYMOUS: &str = "tdsl::pattern::anonymous_axis";
    pub const OPERANDS: &str = "tdsl::pattern::operand_count";
    pub const UNKNOWN_REDUCE_OP: &str = "tdsl::pattern::unknown_reduce_op";
    pub const UNKNOWN_EXTENT: &str = "tdsl::check::unknown_extent";
    pub const ZERO_EXTENT: &str = "tdsl::check::zero_extent";
    pub const SIZE_OVERFLOW: &str = "tdsl::check::size_overflow";
}

/// What an error points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// Bytes of the pattern string.
    Pattern(Span),
    /// Axis-length keyword number `i` (in the order given).
    Keyword(usize),
}

/// A pattern error: a stable code, a message naming the offending axis, what it points at.
#[derive(Debug, Clone, PartialEq)]
pub struct PatternError {
    pub code: &'static str,
    pub message: String,
    pub at: At,
    /// What the primary location marks ("only on the left").
    pub label: &'static str,
    /// Further places in the pattern (a first occurrence, a first `->`).
    pub others: Vec<(Span, String)>,
    pub help: Option<String>,
}

impl PatternError {
    fn new(code: &'static str, at: At, message: String, label: &'static str) -> PatternError {
        PatternError {
            code,
            message,
            at,
            label,
            others: Vec::new(),
            help: None,
        }
    }

    fn also(mut self, span: Span, label: impl Into<String>) -> PatternError {
        self.others.push((span, label.into()));
        self
    }

    fn help(mut self, help: impl Into<String>) -> PatternError {
        self.help = Some(help.into());
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

#[derive(Debug, Clone, PartialEq, Eq)]
enum AtomKind {
    Name(String),
    /// A numeric anonymous axis of length ≥ 2 (a `1` is a unit and never becomes an atom).
    Number,
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
    fn is_bare_ellipsis(&self) -> bool {
        !self.paren && matches!(self.atoms.as_slice(), [a] if a.kind == AtomKind::Ellipsis)
    }
}

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

    fn ellipsis(&self) -> Option<(usize, &Atom)> {
        self.groups.iter().enumerate().find_map(|(i, g)| {
            g.atoms
                .iter()
                .find(|a| a.kind == AtomKind::Ellipsis)
                .map(|a| (i, a))
        })
    }
}

struct Ctx<'a> {
    pattern: &'a str,
}

impl Ctx<'_> {
    fn text(&self, p: Pos) -> &str {
        self.pattern.get(p.lo..p.hi).unwrap_or("")
    }

    fn trim(&self, p: Pos) -> Pos {
        let t = self.text(p);
        let lead = t.len() - t.trim_start_matches(' ').len();
        let body = t.trim_matches(' ').len();
        Pos::new(p.lo + lead, p.lo + lead + body)
    }

    fn err(
        &self,
        code: &'static str,
        p: Pos,
        message: String,
        label: &'static str,
    ) -> PatternError {
        PatternError::new(code, At::Pattern(span(p)), message, label)
    }

    fn whole(&self) -> Pos {
        Pos::new(0, self.pattern.len())
    }
}

fn span(p: Pos) -> Span {
    Span::new(p.lo, p.hi)
}

#[derive(Clone, Copy)]
struct Syntax {
    numbers: bool,
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

struct SideParser<'c, 'a> {
    ctx: &'c Ctx<'a>,
    syntax: Syntax,
    groups: Vec<Group>,
    open: Option<(usize, Vec<Atom>)>,
}

impl SideParser<'_, '_> {
    fn token(&mut self, lo: usize, hi: usize) -> Result<(), PatternError> {
        let ctx = self.ctx;
        let pos = Pos::new(lo, hi);
        let text = ctx.text(pos);
        let kind = if text == "..." {
            AtomKind::Ellipsis
        } else if text.contains('.') {
            return Err(ctx
                .err(
                    codes::SYNTAX,
                    pos,
                    format!("invalid axis `{text}`: `...` must stand apart from names"),
                    "invalid axis",
                )
                .help("separate `...` from axis names with a space"));
        } else if text.bytes().all(|b| b.is_ascii_digit()) {
            if !self.syntax.numbers {
                return Err(ctx
                    .err(
                        codes::ANONYMOUS,
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
                        codes::ZERO_EXTENT,
                        pos,
                        format!("anonymous axis `{text}` has length 0; it must be positive"),
                        "length 0",
                    )
                    .help("remove it, or write `1` (or `()`) for a unit axis"));
            }
            let Ok(value) = digits.parse::<u64>() else {
                return Err(ctx.err(
                    codes::SIZE_OVERFLOW,
                    pos,
                    format!("anonymous axis `{text}` does not fit in 64 bits"),
                    "too large",
                ));
            };
            if value == 1 {
                if self.open.is_none() {
                    self.groups.push(Group {
                        atoms: Vec::new(),
                        paren: false,
                        pos,
                    });
                }
                return Ok(());
            }
            AtomKind::Number
        } else {
            if let Err(reason) = check_axis_name(text) {
                return Err(ctx.err(
                    codes::SYNTAX,
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
                        codes::DUPLICATE_AXIS,
                        pos,
                        format!("axis `{text}` appears twice in {where_}"),
                        "second occurrence",
                    )
                    .also(span(first.pos), "first occurrence")
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

fn check_dots(ctx: &Ctx, side: Pos) -> Result<(), PatternError> {
    let text = ctx.text(side);
    if !text.contains('.') {
        return Ok(());
    }
    let Some(first) = text.find("...") else {
        let at = text.find('.').unwrap_or(0);
        return Err(ctx
            .err(
                codes::SYNTAX,
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
                codes::ELLIPSIS,
                Pos::new(lo, lo + 3),
                "`...` appears twice on one side of the pattern".to_string(),
                "second `...`",
            )
            .also(
                span(Pos::new(side.lo + first, side.lo + after)),
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
                codes::SYNTAX,
                Pos::new(side.lo + i, side.lo + i + 1),
                "`.` may only appear as part of `...`".to_string(),
                "stray `.`",
            )
            .help("write exactly three dots: `...`"));
    }
    Ok(())
}

fn parse_side(ctx: &Ctx, side: Pos, syntax: Syntax) -> Result<Side, PatternError> {
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
                                codes::SYNTAX,
                                Pos::new(at, at + 1),
                                "nested parentheses: axis composition is one level deep"
                                    .to_string(),
                                "nested `(`",
                            )
                            .also(span(Pos::new(*open, *open + 1)), "inside this group")
                            .help("flatten the group: `(a b c)` instead of `(a (b c))`"));
                    }
                    p.open = Some((at, Vec::new()));
                } else if c == ')' {
                    let Some((open, atoms)) = p.open.take() else {
                        return Err(ctx.err(
                            codes::SYNTAX,
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
                    codes::SYNTAX,
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
            codes::SYNTAX,
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

fn find_arrow(ctx: &Ctx) -> Result<Option<usize>, PatternError> {
    let mut arrows = ctx.pattern.match_indices("->").map(|(i, _)| i);
    let first = arrows.next();
    if let (Some(a), Some(b)) = (first, arrows.next()) {
        return Err(ctx
            .err(
                codes::SYNTAX,
                Pos::new(b, b + 2),
                "a pattern has exactly one `->`, this one has more".to_string(),
                "second `->`",
            )
            .also(span(Pos::new(a, a + 2)), "first `->`"));
    }
    Ok(first)
}

// ---------------------------------------------------------------------------------------------
// rearrange / reduce / repeat
// ---------------------------------------------------------------------------------------------

/// Checks an einops pattern for `op` with the given axis-length keywords, without any shape.
pub fn check_pattern(
    op: PatternOp,
    pattern: &str,
    kwargs: &[Keyword<'_>],
) -> Result<(), PatternError> {
    let ctx = Ctx { pattern };
    let Some(arrow) = find_arrow(&ctx)? else {
        let t = ctx.text(ctx.trim(ctx.whole()));
        return Err(ctx
            .err(
                codes::MISSING_ARROW,
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
    let given = |name: &str| kwargs.iter().any(|k| k.name == name);

    check_ellipses(&ctx, op, &left, &right)?;
    check_axis_sets(&ctx, op, &left, &right, &given)?;
    // The checker checks the input rank here, which needs a shape.
    check_kwargs(&left, &right, kwargs)?;

    for g in &left.groups {
        let unknown: Vec<&str> = g
            .atoms
            .iter()
            .filter_map(|a| a.name())
            .filter(|n| !given(n))
            .collect();
        if unknown.len() > 1 {
            let list = unknown
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ctx
                .err(
                    codes::TWO_UNKNOWNS,
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
    Ok(())
}

fn check_ellipses(ctx: &Ctx, op: PatternOp, left: &Side, right: &Side) -> Result<(), PatternError> {
    let l = left.ellipsis();
    let r = right.ellipsis();
    if let (None, Some((_, a))) = (l, r) {
        return Err(ctx
            .err(
                codes::ELLIPSIS,
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
                    codes::ELLIPSIS,
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
                    codes::ELLIPSIS,
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

fn check_axis_sets(
    ctx: &Ctx,
    op: PatternOp,
    left: &Side,
    right: &Side,
    given: &dyn Fn(&str) -> bool,
) -> Result<(), PatternError> {
    let anon = |a: &Atom, side: &str, help: &str| {
        ctx.err(
            codes::ANONYMOUS,
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
                if let Some(a) = s.atoms().find(|a| a.kind == AtomKind::Number) {
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
                            codes::AXIS_ONE_SIDE,
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
                            codes::AXIS_ONE_SIDE,
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
                    AtomKind::Number => {
                        return Err(anon(
                            a,
                            "right",
                            "reduce cannot create axes; write `1` for a unit axis or use repeat",
                        ))
                    }
                    AtomKind::Name(n) if !left.has_name(n) => {
                        return Err(ctx
                            .err(
                                codes::AXIS_ONE_SIDE,
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
                    AtomKind::Number => {
                        return Err(anon(
                            a,
                            "left",
                            "repeat cannot remove axes; numeric axes belong on the right side of repeat",
                        ))
                    }
                    AtomKind::Name(n) if !right.has_name(n) => {
                        return Err(ctx
                            .err(
                                codes::AXIS_ONE_SIDE,
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
                if !left.has_name(n) && !given(n) {
                    return Err(ctx
                        .err(
                            codes::UNKNOWN_EXTENT,
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

fn check_kwargs(left: &Side, right: &Side, kwargs: &[Keyword<'_>]) -> Result<(), PatternError> {
    for (i, k) in kwargs.iter().enumerate() {
        let name = k.name;
        if let Err(reason) = check_axis_name(name) {
            return Err(PatternError::new(
                codes::BAD_KWARG,
                At::Keyword(i),
                format!("`{name}` is not a valid axis name: {reason}"),
                "invalid axis name",
            ));
        }
        if kwargs[..i].iter().any(|k| k.name == name) {
            return Err(PatternError::new(
                codes::BAD_KWARG,
                At::Keyword(i),
                format!("the length of axis `{name}` is given twice"),
                "second length",
            ));
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
            let shown = match k.value {
                Some(v) => format!("{name}={v}"),
                None => name.to_string(),
            };
            return Err(PatternError::new(
                codes::UNUSED_KWARG,
                At::Keyword(i),
                format!("axis length `{shown}` names no axis of the pattern"),
                "not in the pattern",
            )
            .help(help));
        }
        if k.value == Some(0) {
            return Err(PatternError::new(
                codes::BAD_KWARG,
                At::Keyword(i),
                format!("axis length `{name}=0` must be at least 1"),
                "length 0",
            )
            .help("axis lengths are positive"));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// einsum
// ---------------------------------------------------------------------------------------------

/// Checks an einsum pattern without shapes and returns its number of operands. With
/// `n_operands`, a different count is a `pattern::operand_count` error.
pub fn check_einsum(pattern: &str, n_operands: Option<usize>) -> Result<usize, PatternError> {
    let ctx = Ctx { pattern };
    if let Some(n) = numpy_like(pattern) {
        // numpy's one-letter subscripts ("ij,jk->ik", "ij,jk"): which reading applies depends
        // on the operands' ranks, so the checker decides at run time; only the operand count
        // is known now.
        match n_operands {
            Some(given) if given != n => {
                let end = pattern.find("->").unwrap_or(pattern.len());
                return Err(ctx.err(
                    codes::OPERANDS,
                    ctx.trim(Pos::new(0, end)),
                    format!(
                        "einsum pattern has {n} operand{} but {given} {} passed",
                        if n == 1 { "" } else { "s" },
                        if given == 1 { "was" } else { "were" },
                    ),
                    if n == 1 { "1 operand" } else { "operands" },
                ));
            }
            _ => return Ok(n),
        }
    }
    let arrow = find_arrow(&ctx)?;
    let in_end = arrow.unwrap_or(pattern.len());

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
                    codes::SYNTAX,
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
                        codes::ELLIPSIS,
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
                codes::MISSING_ARROW,
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

    if let Some(n) = n_operands {
        if ops.len() != n {
            let p = ctx.trim(Pos::new(0, arrow));
            return Err(ctx.err(
                codes::OPERANDS,
                p,
                format!(
                    "einsum pattern has {} operand{} but {} {} passed",
                    ops.len(),
                    if ops.len() == 1 { "" } else { "s" },
                    n,
                    if n == 1 { "was" } else { "were" },
                ),
                if ops.len() == 1 {
                    "1 operand"
                } else {
                    "operands"
                },
            ));
        }
    }

    for (n, a) in out.names() {
        if !ops.iter().any(|s| s.has_name(n)) {
            return Err(ctx
                .err(
                    codes::AXIS_ONE_SIDE,
                    a.pos,
                    format!("output label `{n}` appears in no operand"),
                    "not in any operand",
                )
                .help("every output label must come from an operand"));
        }
    }

    // The checker now matches ranks, broadcasts `...` and unifies extents; then it infers one
    // unknown label per composed group to a fixed point. Which labels become known does not
    // depend on the extents: a label is known once it fills a slot alone, or is the last
    // unknown of a group.
    let mut known: Vec<&str> = Vec::new();
    for g in ops.iter().flat_map(|s| s.groups.iter()) {
        if let [a] = g.atoms.as_slice() {
            if let Some(n) = a.name() {
                if !known.contains(&n) {
                    known.push(n);
                }
            }
        }
    }
    let composed: Vec<&Group> = ops
        .iter()
        .flat_map(|s| s.groups.iter())
        .filter(|g| !g.is_bare_ellipsis() && g.atoms.len() != 1)
        .collect();
    loop {
        let mut changed = false;
        for g in &composed {
            let unknown: Vec<&str> = g
                .atoms
                .iter()
                .filter_map(Atom::name)
                .filter(|n| !known.contains(n))
                .collect();
            if let [u] = unknown.as_slice() {
                known.push(u);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    for g in &composed {
        let unknown: Vec<&str> = g
            .atoms
            .iter()
            .filter_map(Atom::name)
            .filter(|n| !known.contains(n))
            .collect();
        // A group whose labels only ever appear together, in this order, needs no split.
        let mine: Vec<&str> = g.atoms.iter().filter_map(Atom::name).collect();
        let whole = mine.len() >= 2
            && mine.len() == g.atoms.len()
            && ops
                .iter()
                .chain([&out])
                .flat_map(|s| s.groups.iter())
                .all(|h| {
                    let theirs: Vec<&str> = h.atoms.iter().filter_map(Atom::name).collect();
                    theirs == mine || theirs.iter().all(|n| !mine.contains(n))
                });
        if !unknown.is_empty() && !whole {
            let list = unknown
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ctx
                .err(
                    codes::TWO_UNKNOWNS,
                    g.pos,
                    format!(
                        "cannot infer the extents of {list} in `{}`: at most one label of a group may be unknown",
                        ctx.text(g.pos)
                    ),
                    "several unknown extents",
                )
                .help("give all but one of them a plain axis of their own in some operand"));
        }
    }
    Ok(ops.len())
}

/// For a pattern that may be numpy's subscripts (terms of letters and `...` only, no spaces
/// inside a term, no parentheses; no `->`, or some term of two or more letters): the number of
/// operands.
fn numpy_like(pattern: &str) -> Option<usize> {
    if pattern.contains('(') || !pattern.bytes().any(|b| b.is_ascii_alphabetic()) {
        return None;
    }
    let (lhs, rhs) = match pattern.find("->") {
        Some(a) => (&pattern[..a], Some(&pattern[a + 2..])),
        None => (pattern, None),
    };
    let terms: Vec<&str> = lhs.split(',').chain(rhs).map(str::trim).collect();
    let plain = |t: &&str| {
        t.replace("...", "")
            .bytes()
            .all(|b| b.is_ascii_alphabetic())
    };
    // An empty operand term is an error in either reading; let the checks below report it.
    if !terms.iter().all(plain) || lhs.split(',').any(|t| t.trim().is_empty()) {
        return None;
    }
    let long = terms.iter().any(|t| t.replace("...", "").len() >= 2);
    (rhs.is_none() || long).then(|| lhs.split(',').count())
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

// ---------------------------------------------------------------------------------------------
// reduce ops
// ---------------------------------------------------------------------------------------------

/// Checks a reduce op name (`"sum"`, `"mean"`, `"max"`, `"min"`, `"prod"`); the error carries a
/// "did you mean" help and points at the whole name (`At::Pattern` over `0..name.len()`).
pub fn check_reduce_op(name: &str) -> Result<(), PatternError> {
    if REDUCE_OPS.contains(&name) {
        return Ok(());
    }
    let e = PatternError::new(
        codes::UNKNOWN_REDUCE_OP,
        At::Pattern(Span::new(0, name.len())),
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

// ---------------------------------------------------------------------------------------------
// Pattern calls in a script
// ---------------------------------------------------------------------------------------------

/// A pattern error found in a script, with spans into the script.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptPatternError {
    pub error: PatternError,
    /// The primary location: inside the pattern string, the keyword argument or the reduce op.
    pub span: Span,
    /// [`PatternError::others`], moved into the script.
    pub others: Vec<(Span, String)>,
}

/// Runs [`check_pattern`], [`check_einsum`] and [`check_reduce_op`] on every `rearrange`,
/// `reduce`, `repeat` and `einsum` call of a script whose pattern is a string literal (one error
/// per call at most). Calls the checker would reject for other reasons (wrong argument count,
/// a pattern that is not a string) are skipped: the checker reports those.
pub fn check_script_patterns(script: &crate::ast::Script) -> Vec<ScriptPatternError> {
    use crate::ast::StmtKind;
    let mut out = Vec::new();
    for stmt in &script.stmts {
        if let StmtKind::Assign { value, .. } = &stmt.kind {
            check_expr_patterns(value, &mut out);
        }
    }
    out
}

fn check_expr_patterns(e: &crate::ast::Expr, out: &mut Vec<ScriptPatternError>) {
    use crate::ast::{Arg, ExprKind};
    match &e.kind {
        ExprKind::Neg(x) => check_expr_patterns(x, out),
        ExprKind::Binary { lhs, rhs, .. } => {
            check_expr_patterns(lhs, out);
            check_expr_patterns(rhs, out);
        }
        ExprKind::Call { func, args } => {
            for a in args {
                match a {
                    Arg::Positional(x) | Arg::Keyword { value: x, .. } => {
                        check_expr_patterns(x, out)
                    }
                }
            }
            let positional: Vec<&crate::ast::Expr> = args
                .iter()
                .filter_map(|a| match a {
                    Arg::Positional(x) => Some(x),
                    Arg::Keyword { .. } => None,
                })
                .collect();
            let keywords: Vec<(&crate::ast::Ident, &crate::ast::Expr, Span)> = args
                .iter()
                .filter_map(|a| match a {
                    Arg::Keyword { name, value } => Some((name, value, a.span())),
                    Arg::Positional(_) => None,
                })
                .collect();
            let string = |x: &crate::ast::Expr| match (&x.kind, x.str_contents_span()) {
                (ExprKind::Str { value }, Some(s)) => Some((value.clone(), s)),
                _ => None,
            };
            let op = match func.name.as_str() {
                "rearrange" => PatternOp::Rearrange,
                "reduce" => PatternOp::Reduce,
                "repeat" => PatternOp::Repeat,
                "einsum" => {
                    let (Some(last), true) = (positional.last(), keywords.is_empty()) else {
                        return;
                    };
                    let Some((pattern, base)) = string(last) else {
                        return;
                    };
                    if let Err(error) = check_einsum(&pattern, Some(positional.len() - 1)) {
                        out.push(place(error, base, &[]));
                    }
                    return;
                }
                _ => return,
            };
            let want = if op == PatternOp::Reduce { 3 } else { 2 };
            if positional.len() != want {
                return;
            }
            let Some((pattern, base)) = string(positional[1]) else {
                return;
            };
            let kw: Vec<Keyword<'_>> = keywords
                .iter()
                .map(|(name, value, _)| Keyword {
                    name: &name.name,
                    value: match &value.kind {
                        ExprKind::Number { value, text }
                            if text.bytes().all(|b| b.is_ascii_digit()) =>
                        {
                            Some(*value as u64)
                        }
                        _ => None,
                    },
                })
                .collect();
            // The checker reads the reduce op before it resolves the pattern.
            if op == PatternOp::Reduce {
                let r = positional[2];
                let name = match &r.kind {
                    ExprKind::Str { value } => Some(value.as_str()),
                    ExprKind::Name(n) => Some(n.name.as_str()),
                    _ => None,
                };
                if let Some(Err(error)) = name.map(check_reduce_op) {
                    out.push(ScriptPatternError {
                        error,
                        span: r.span,
                        others: Vec::new(),
                    });
                    return;
                }
            }
            let spans: Vec<Span> = keywords.iter().map(|k| k.2).collect();
            if let Err(error) = check_pattern(op, &pattern, &kw) {
                out.push(place(error, base, &spans));
            }
        }
        ExprKind::Number { .. } | ExprKind::Str { .. } | ExprKind::Name(_) => {}
    }
}

/// Moves an error's pattern offsets to the script, where the pattern starts at `base`.
fn place(error: PatternError, base: Span, keywords: &[Span]) -> ScriptPatternError {
    let shift = |s: Span| base.sub(s.start as usize, s.end as usize);
    let span = match error.at {
        At::Pattern(s) => shift(s),
        At::Keyword(i) => keywords.get(i).copied().unwrap_or(base),
    };
    let others = error
        .others
        .iter()
        .map(|(s, t)| (shift(*s), t.clone()))
        .collect();
    ScriptPatternError {
        error,
        span,
        others,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PatternOp::{Rearrange, Reduce, Repeat};

    fn kw<'a>(names: &[&'a str]) -> Vec<Keyword<'a>> {
        names
            .iter()
            .map(|&name| Keyword {
                name,
                value: Some(2),
            })
            .collect()
    }

    /// Asserts the code and the underlined text of an error in `p`.
    fn bad(r: Result<impl std::fmt::Debug, PatternError>, p: &str, code: &str, under: &str) {
        let e = r.expect_err(p);
        assert_eq!(e.code, code, "{p:?}: {e:?}");
        match e.at {
            At::Pattern(s) => assert_eq!(&p[s.range()], under, "{p:?}: {e:?}"),
            At::Keyword(i) => assert_eq!(format!("#{i}"), under, "{p:?}: {e:?}"),
        }
        assert!(!e.message.is_empty() && !e.label.is_empty());
    }

    #[test]
    fn valid_einops_patterns_pass() {
        for (op, p, k) in [
            (Rearrange, "b h w c -> b c h w", &[][..]),
            (Rearrange, "b (h d) -> b h d", &["h"][..]),
            (Rearrange, "b ... c -> c b ...", &[][..]),
            (Rearrange, "b h w c -> b 1 h w c ()", &[][..]),
            (Reduce, "b (h 2) (w 3) c -> b h w c", &[][..]),
            (Reduce, "b ... c -> b c", &[][..]),
            (Reduce, "b h w c -> b () () c", &[][..]),
            (Repeat, "b c -> b c k", &["k"][..]),
            (Repeat, "b h w c -> b (h 2) (w 2) c", &[][..]),
            (Repeat, "b c -> 3 b c", &[][..]),
        ] {
            assert_eq!(check_pattern(op, p, &kw(k)), Ok(()), "{p}");
        }
    }

    #[test]
    fn einops_errors_name_the_axis() {
        let p = "a b -> b a c";
        bad(
            check_pattern(Rearrange, p, &[]),
            p,
            codes::AXIS_ONE_SIDE,
            "c",
        );
        let p = "b f -> f o";
        bad(
            check_pattern(Repeat, p, &kw(&["o"])),
            p,
            codes::AXIS_ONE_SIDE,
            "b",
        );
        let p = "a b a -> a b";
        bad(
            check_pattern(Rearrange, p, &[]),
            p,
            codes::DUPLICATE_AXIS,
            "a",
        );
        let p = "a (b (c)) -> a b c";
        bad(check_pattern(Rearrange, p, &[]), p, codes::SYNTAX, "(");
        let p = "a b) -> a b";
        bad(check_pattern(Rearrange, p, &[]), p, codes::SYNTAX, ")");
        let p = "a b";
        bad(
            check_pattern(Rearrange, p, &[]),
            p,
            codes::MISSING_ARROW,
            "a b",
        );
        let p = "a -> a -> a";
        bad(check_pattern(Rearrange, p, &[]), p, codes::SYNTAX, "->");
        let p = "(a b) -> a b";
        bad(
            check_pattern(Rearrange, p, &[]),
            p,
            codes::TWO_UNKNOWNS,
            "(a b)",
        );
        let p = "a -> a c";
        bad(check_pattern(Repeat, p, &[]), p, codes::UNKNOWN_EXTENT, "c");
        let p = "a -> a";
        bad(
            check_pattern(Repeat, p, &kw(&["z"])),
            p,
            codes::UNUSED_KWARG,
            "#0",
        );
        bad(
            check_pattern(Repeat, p, &kw(&["a", "a"])),
            p,
            codes::BAD_KWARG,
            "#1",
        );
        let p = "a b -> a 2";
        bad(check_pattern(Reduce, p, &[]), p, codes::ANONYMOUS, "2");
        let p = "a ... -> a";
        bad(check_pattern(Rearrange, p, &[]), p, codes::ELLIPSIS, "...");
        let p = "a b\t-> a b";
        bad(check_pattern(Rearrange, p, &[]), p, codes::SYNTAX, "\t");
        let p = "a 0 -> a";
        bad(check_pattern(Reduce, p, &[]), p, codes::ZERO_EXTENT, "0");
    }

    #[test]
    fn einsum_checks() {
        assert_eq!(check_einsum("b i k, b k j -> b i j", Some(2)), Ok(2));
        assert_eq!(check_einsum("i i -> ", None), Ok(1));
        assert_eq!(
            check_einsum("b s (h d), b h t d -> b h s t", Some(2)),
            Ok(2)
        );
        let p = "i j, j k -> i k";
        bad(check_einsum(p, Some(3)), p, codes::OPERANDS, "i j, j k");
        let p = "i j, j k -> i z";
        bad(check_einsum(p, None), p, codes::AXIS_ONE_SIDE, "z");
        let p = "i j, j k";
        bad(check_einsum(p, None), p, codes::MISSING_ARROW, "i j, j k");
        let p = "i, -> i";
        bad(check_einsum(p, None), p, codes::SYNTAX, " ");
        let p = "(h d) -> h";
        bad(check_einsum(p, None), p, codes::TWO_UNKNOWNS, "(h d)");
        let p = "i 2 -> i";
        bad(check_einsum(p, None), p, codes::ANONYMOUS, "2");
        let p = "i j -> i i";
        bad(check_einsum(p, None), p, codes::DUPLICATE_AXIS, "i");
    }

    #[test]
    fn reduce_ops_suggest_the_closest() {
        assert!(check_reduce_op("mean").is_ok());
        let e = check_reduce_op("maen").expect_err("maen");
        assert_eq!(e.code, codes::UNKNOWN_REDUCE_OP);
        assert!(e.help.unwrap_or_default().contains("\"mean\""));
    }

    #[test]
    fn script_calls_are_checked_with_script_spans() {
        let src = "input x: f32[a, b]\n\
                   y = reduce(rearrange(x, \"a b -> b a c\"), \"b a -> b c\", \"maen\")\n\
                   z = einsum(x, x, \"i j -> i\")\n\
                   w = repeat(x, \"a b -> a b c\", d=2)\n";
        let script = crate::parse_script(src).expect("parses");
        let errs = check_script_patterns(&script);
        let found: Vec<(&str, &str)> = errs
            .iter()
            .map(|e| (e.error.code, &src[e.span.range()]))
            .collect();
        assert_eq!(
            found,
            [
                (codes::AXIS_ONE_SIDE, "c"),
                (codes::UNKNOWN_REDUCE_OP, "\"maen\""),
                (codes::OPERANDS, "i j"),
                (codes::UNKNOWN_EXTENT, "c"),
            ]
        );
    }
}
