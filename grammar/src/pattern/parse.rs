//! Pattern text to sides: tokens, parentheses, `...`, `->`.

use super::{At, Atom, AtomKind, Group, PatternCode, PatternError, Pos, Side};

/// The pattern text, with the byte-range helpers every rule uses.
#[derive(Clone, Copy)]
pub(super) struct Text<'a> {
    pub pattern: &'a str,
}

impl Text<'_> {
    pub fn text(&self, p: Pos) -> &str {
        self.pattern.get(p.lo..p.hi).unwrap_or("")
    }

    /// `p` without leading and trailing spaces.
    pub fn trim(&self, p: Pos) -> Pos {
        let t = self.text(p);
        let lead = t.len() - t.trim_start_matches(' ').len();
        let body = t.trim_matches(' ').len();
        Pos::new(p.lo + lead, p.lo + lead + body)
    }

    pub fn whole(&self) -> Pos {
        Pos::new(0, self.pattern.len())
    }

    pub fn err(
        &self,
        code: PatternCode,
        p: Pos,
        message: String,
        label: impl Into<String>,
    ) -> PatternError {
        PatternError::new(code, At::Pattern(p), message, label)
    }
}

/// What a side may contain.
#[derive(Clone, Copy)]
pub(super) struct Syntax {
    /// Numeric axes (`1`, `2`, …) are allowed.
    pub numbers: bool,
    /// A name may appear in several groups (einsum diagonals), though never twice in one group.
    pub repeats: bool,
}

pub(super) const EINOPS: Syntax = Syntax {
    numbers: true,
    repeats: false,
};
pub(super) const EINSUM_IN: Syntax = Syntax {
    numbers: false,
    repeats: true,
};
pub(super) const EINSUM_OUT: Syntax = Syntax {
    numbers: false,
    repeats: false,
};

struct SideParser<'c, 'a> {
    t: &'c Text<'a>,
    syntax: Syntax,
    groups: Vec<Group>,
    open: Option<(usize, Vec<Atom>)>,
}

impl SideParser<'_, '_> {
    fn token(&mut self, lo: usize, hi: usize) -> Result<(), PatternError> {
        let t = self.t;
        let pos = Pos::new(lo, hi);
        let text = t.text(pos);
        let kind = if text == "..." {
            AtomKind::Ellipsis
        } else if text.contains('.') {
            return Err(t
                .err(
                    PatternCode::Syntax,
                    pos,
                    format!("invalid axis `{text}`: `...` must stand apart from names"),
                    "invalid axis",
                )
                .help("separate `...` from axis names with a space"));
        } else if text.bytes().all(|b| b.is_ascii_digit()) {
            match self.number(pos, text)? {
                Some(v) => AtomKind::Number(v),
                None => return Ok(()),
            }
        } else {
            self.name(pos, text)?;
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

    /// A numeric axis: its length, or `None` for a unit `1` (a slot of its own at the top
    /// level, nothing inside parentheses).
    fn number(&mut self, pos: Pos, text: &str) -> Result<Option<u64>, PatternError> {
        let t = self.t;
        if !self.syntax.numbers {
            return Err(t
                .err(
                    PatternCode::Anonymous,
                    pos,
                    format!("einsum labels must be names, not numbers: `{text}`"),
                    "number",
                )
                .help("name the axis; write `()` for a unit axis"));
        }
        let digits = text.trim_start_matches('0');
        if digits.is_empty() {
            return Err(t
                .err(
                    PatternCode::ZeroExtent,
                    pos,
                    format!("anonymous axis `{text}` has length 0; it must be positive"),
                    "length 0",
                )
                .help("remove it, or write `1` (or `()`) for a unit axis"));
        }
        let Ok(value) = digits.parse::<u64>() else {
            return Err(t.err(
                PatternCode::SizeOverflow,
                pos,
                format!("anonymous axis `{text}` does not fit in 64 bits"),
                "too large",
            ));
        };
        if value != 1 {
            return Ok(Some(value));
        }
        if self.open.is_none() {
            self.groups.push(Group {
                atoms: Vec::new(),
                paren: false,
                pos,
            });
        }
        Ok(None)
    }

    /// A valid axis name that does not repeat one it may not repeat.
    fn name(&self, pos: Pos, text: &str) -> Result<(), PatternError> {
        let t = self.t;
        if let Err(reason) = super::check_axis_name(text) {
            return Err(t.err(
                PatternCode::Syntax,
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
            return Err(t
                .err(
                    PatternCode::DuplicateAxis,
                    pos,
                    format!("axis `{text}` appears twice in {where_}"),
                    "second occurrence",
                )
                .also(At::Pattern(first.pos), "first occurrence")
                .help("give each axis its own name"));
        }
        Ok(())
    }
}

/// Checks the dots of a side: only one `...` and no other `.`.
fn check_dots(t: &Text, side: Pos) -> Result<(), PatternError> {
    let text = t.text(side);
    if !text.contains('.') {
        return Ok(());
    }
    let stray = |i: usize, help: &str| {
        t.err(
            PatternCode::Syntax,
            Pos::new(side.lo + i, side.lo + i + 1),
            "`.` may only appear as part of `...`".to_string(),
            "stray `.`",
        )
        .help(help)
    };
    let Some(first) = text.find("...") else {
        let at = text.find('.').unwrap_or(0);
        return Err(stray(at, "write `...` (three dots) for the remaining axes"));
    };
    let after = first + 3;
    if let Some(second) = text.get(after..).and_then(|t| t.find("...")) {
        let lo = side.lo + after + second;
        return Err(t
            .err(
                PatternCode::Ellipsis,
                Pos::new(lo, lo + 3),
                "`...` appears twice on one side of the pattern".to_string(),
                "second `...`",
            )
            .also(
                At::Pattern(Pos::new(side.lo + first, side.lo + after)),
                "first `...`",
            )
            .help("use `...` at most once per side"));
    }
    if let Some((i, _)) = text
        .char_indices()
        .find(|&(i, c)| c == '.' && (i < first || i >= after))
    {
        return Err(stray(i, "write exactly three dots: `...`"));
    }
    Ok(())
}

/// Parses the text at `side` into groups.
pub(super) fn parse_side(t: &Text, side: Pos, syntax: Syntax) -> Result<Side, PatternError> {
    check_dots(t, side)?;
    let mut p = SideParser {
        t,
        syntax,
        groups: Vec::new(),
        open: None,
    };
    let mut token: Option<usize> = None;
    for (i, c) in t.text(side).char_indices() {
        let at = side.lo + i;
        match c {
            '(' | ')' | ' ' => {
                if let Some(start) = token.take() {
                    p.token(start, at)?;
                }
                if c == '(' {
                    if let Some((open, _)) = &p.open {
                        return Err(t
                            .err(
                                PatternCode::Syntax,
                                Pos::new(at, at + 1),
                                "nested parentheses: axis composition is one level deep"
                                    .to_string(),
                                "nested `(`",
                            )
                            .also(At::Pattern(Pos::new(*open, *open + 1)), "inside this group")
                            .help("flatten the group: `(a b c)` instead of `(a (b c))`"));
                    }
                    p.open = Some((at, Vec::new()));
                } else if c == ')' {
                    let Some((open, atoms)) = p.open.take() else {
                        return Err(t.err(
                            PatternCode::Syntax,
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
            _ => return Err(unexpected(t, at, c)),
        }
    }
    if let Some(start) = token.take() {
        p.token(start, side.hi)?;
    }
    if let Some((open, _)) = p.open {
        return Err(t.err(
            PatternCode::Syntax,
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

fn unexpected(t: &Text, at: usize, c: char) -> PatternError {
    let shown = if c.is_control() || c.is_whitespace() {
        c.escape_default().to_string()
    } else {
        c.to_string()
    };
    let e = t.err(
        PatternCode::Syntax,
        Pos::new(at, at + c.len_utf8()),
        format!("unexpected character `{shown}` in pattern"),
        "unexpected character",
    );
    if c.is_whitespace() {
        e.help("separate axes with plain spaces")
    } else if !c.is_ascii() {
        e.help("axis names are ASCII letters, digits and `_`")
    } else {
        e
    }
}

/// The position of the single `->`; `Ok(None)` if there is none.
pub(super) fn find_arrow(t: &Text) -> Result<Option<usize>, PatternError> {
    let mut arrows = t.pattern.match_indices("->").map(|(i, _)| i);
    let first = arrows.next();
    if let (Some(a), Some(b)) = (first, arrows.next()) {
        return Err(t
            .err(
                PatternCode::Syntax,
                Pos::new(b, b + 2),
                "a pattern has exactly one `->`, this one has more".to_string(),
                "second `->`",
            )
            .also(At::Pattern(Pos::new(a, a + 2)), "first `->`"));
    }
    Ok(first)
}
