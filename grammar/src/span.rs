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

/// Texts placed at distinct offsets of one source space, so that a [`Span`] names its text by
/// where it lies: a session (the REPL) parses each text at its base (`parse_script_at`,
/// `parse_repl_line_at`) and every span it ever sees points into exactly one of them.
///
/// A text is either fixed (a loaded file, placed after every other) or reserved with room to
/// grow (the REPL's transcript, to which each input line is appended).
#[derive(Debug, Clone, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

/// One text of a [`SourceMap`]: its name, its text, and where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    pub name: String,
    pub text: String,
    pub base: u32,
    /// The end of the offsets this file may use (its text may grow up to it).
    limit: u32,
}

/// A file's id in a [`SourceMap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId(usize);

impl SourceMap {
    fn next_base(&self) -> u64 {
        self.files.last().map_or(0, |f| f.limit as u64 + 1)
    }

    fn push(&mut self, name: &str, text: &str, room: u64) -> Option<FileId> {
        let base = self.next_base();
        let limit = base.checked_add(room)?;
        if limit > u32::MAX as u64 || (text.len() as u64) > room {
            return None;
        }
        self.files.push(SourceFile {
            name: name.to_string(),
            text: text.to_string(),
            base: base as u32,
            limit: limit as u32,
        });
        Some(FileId(self.files.len() - 1))
    }

    /// Adds a fixed text after every other; `None` when the source space (4 GiB) is full.
    pub fn add(&mut self, name: &str, text: &str) -> Option<FileId> {
        self.push(name, text, text.len() as u64)
    }

    /// Adds an empty text with room to grow to `room` bytes ([`SourceMap::append`]).
    pub fn reserve(&mut self, name: &str, room: u32) -> Option<FileId> {
        self.push(name, "", room as u64)
    }

    /// Appends `text` to file `id` and returns the offset it starts at, or `None` when the file
    /// has no room left.
    pub fn append(&mut self, id: FileId, text: &str) -> Option<u32> {
        let f = &mut self.files[id.0];
        let at = f.base as u64 + f.text.len() as u64;
        if at + text.len() as u64 > f.limit as u64 {
            return None;
        }
        f.text.push_str(text);
        Some(at as u32)
    }

    pub fn file(&self, id: FileId) -> &SourceFile {
        &self.files[id.0]
    }

    /// The file whose offsets hold `offset`.
    pub fn file_at(&self, offset: u32) -> Option<&SourceFile> {
        let i = self
            .files
            .partition_point(|f| f.base <= offset)
            .checked_sub(1)?;
        let f = &self.files[i];
        (offset <= f.limit).then_some(f)
    }

    /// Whether `span` lies inside `file`'s text (its end may be the text's end).
    pub fn contains(file: &SourceFile, span: Span) -> bool {
        span.start >= file.base && span.end as u64 <= file.base as u64 + file.text.len() as u64
    }

    /// `span` relative to the start of the file it lies in, with that file.
    pub fn local(&self, span: Span) -> Option<(&SourceFile, Span)> {
        let f = self.file_at(span.start)?;
        SourceMap::contains(f, span).then(|| {
            (
                f,
                Span {
                    start: span.start - f.base,
                    end: span.end - f.base,
                },
            )
        })
    }

    /// The file name, 1-based line and column of `offset`.
    pub fn locate(&self, offset: u32) -> Option<(&str, usize, usize)> {
        let f = self.file_at(offset)?;
        let (line, col) = line_col(&f.text, (offset - f.base) as usize);
        Some((&f.name, line, col))
    }
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

    #[test]
    fn source_maps_place_texts_apart_and_find_them_again() {
        let mut m = SourceMap::default();
        let repl = m.reserve("<repl>", 100).unwrap();
        assert_eq!(m.append(repl, "a = 1\n"), Some(0));
        let f = m.add("f.tdsl", "x = 2\ny = 3\n").unwrap();
        assert_eq!(m.file(f).base, 101);
        assert_eq!(m.append(repl, "b = a\n"), Some(6));
        assert_eq!(m.locate(7), Some(("<repl>", 2, 2)));
        assert_eq!(m.locate(101 + 6), Some(("f.tdsl", 2, 1)));
        let (file, local) = m.local(Span::new(107, 108)).unwrap();
        assert_eq!((file.name.as_str(), local), ("f.tdsl", Span::new(6, 7)));
        assert!(
            m.local(Span::new(99, 102)).is_none(),
            "a span across two files"
        );
        assert_eq!(
            m.append(repl, &"x".repeat(100)),
            None,
            "past the reserved room"
        );
    }
}
