//! numpy's einsum subscripts (`"ij,jk->ik"`): one letter per label, read as tdsl's
//! space-separated labels, with a map back to the written bytes for diagnostics.

use super::einsum::count_error;
use super::parse::Text;
use super::{parse_einsum, Keyword, PatternError, Pos};

/// A numpy subscript string rewritten in tdsl's form, and where each byte came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscripts {
    /// The pattern with spaces between the letters (and numpy's implicit output spelled out).
    pub text: String,
    /// For each byte of `text` (and its end): the offset of the written byte it came from.
    map: Vec<usize>,
}

impl Subscripts {
    /// The written bytes that `p` (a range of `text`) came from; text that was not written
    /// (numpy's implicit output) maps to the whole pattern.
    pub fn written(&self, p: Pos) -> Pos {
        let m = &self.map;
        let end = m.last().copied().unwrap_or(0);
        let at = |i: usize| m.get(i).copied().unwrap_or(end).min(end);
        let lo = at(p.lo);
        let hi = if p.hi > p.lo {
            (at(p.hi - 1) + 1).min(end)
        } else {
            lo
        };
        if hi <= lo && p.hi > p.lo {
            return Pos::new(0, end);
        }
        Pos::new(lo, hi.max(lo))
    }
}

/// numpy's subscripts (`"ij,jk->ik"`, `"...ij,...jk"`): one letter per label, no spaces needed.
/// A pattern is read that way when no term holds a space or parentheses and some operand's
/// term, read as tdsl's space-separated labels, cannot match its rank while one letter per
/// axis can (operand `k` has rank `ranks[k]`); without `->` only numpy's reading exists.
pub fn numpy_subscripts(pattern: &str, ranks: &[usize]) -> Option<Subscripts> {
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
    let (mut text, mut map) = spaced_out(pattern);
    if rhs.is_none() {
        // numpy's implicit output: `...` first, then the labels used once, sorted.
        let all: Vec<u8> = lhs
            .replace("...", "")
            .bytes()
            .filter(u8::is_ascii_alphabetic)
            .collect();
        let mut once: Vec<u8> = all
            .iter()
            .copied()
            .filter(|c| all.iter().filter(|&d| d == c).count() == 1)
            .collect();
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
    Some(Subscripts { text, map })
}

/// `"ij,jk->ik"` as `"i j,j k->i k"`, with the written offset of each byte.
fn spaced_out(pattern: &str) -> (String, Vec<usize>) {
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
    (text, map)
}

/// For a pattern that may be numpy's subscripts (terms of letters and `...` only, no spaces
/// inside a term, no parentheses; no `->`, or some term of two or more letters): the number of
/// operands.
pub fn numpy_like(pattern: &str) -> Option<usize> {
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

/// The shape-free check of an einsum call, for callers that know the operand count but not
/// the ranks (the macros, scripts whose extents come from data): numpy's subscripts, whose
/// reading depends on the ranks, are checked for their operand count only; tdsl's patterns get
/// all of [`parse_einsum`]. Returns the operand count.
pub fn check_einsum(
    pattern: &str,
    n_operands: Option<usize>,
    kwargs: &[Keyword<'_>],
) -> Result<usize, PatternError> {
    if let Some(n) = numpy_like(pattern) {
        return match n_operands {
            Some(given) if given != n => {
                let t = Text { pattern };
                let end = pattern.find("->").unwrap_or(pattern.len());
                Err(count_error(&t, end, n, given))
            }
            _ => Ok(n),
        };
    }
    parse_einsum(pattern, n_operands, kwargs).map(|e| e.operands.len())
}
