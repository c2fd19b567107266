//! Byte spans into one source text, and line/column lookup for them.
//!
//! Every AST node carries a [`Span`]. Spans are half-open byte ranges `start..end`
//! into the text that was parsed; they never borrow it, so the AST has no lifetime.

/// A half-open byte range `start..end` in a source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    /// A span from byte offsets. `start <= end` is the caller's promise.
    pub fn new(start: usize, end: usize) -> Span {
        Span {
            start: start as u32,
            end: end as u32,
        }
    }

    /// The smallest span covering both.
    pub fn join(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    /// A sub-span at byte offsets `lo..hi` relative to this span's start.
    pub fn sub(self, lo: usize, hi: usize) -> Span {
        Span::new(self.start as usize + lo, self.start as usize + hi)
    }

    pub fn len(self) -> usize {
        (self.end - self.start) as usize
    }

    pub fn is_empty(self) -> bool {
        self.start == self.end
    }

    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// 1-based line and column (in characters) of byte offset `offset` in `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..floor_char_boundary(text, offset)];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        let text = "ab\ncd\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 1), (1, 2));
        assert_eq!(line_col(text, 3), (2, 1));
        assert_eq!(line_col(text, 4), (2, 2));
        assert_eq!(line_col(text, 100), (3, 1));
    }

    #[test]
    fn sub_and_join() {
        let s = Span::new(10, 20);
        assert_eq!(s.sub(1, 3), Span::new(11, 13));
        assert_eq!(s.join(Span::new(5, 12)), Span::new(5, 20));
    }
}
