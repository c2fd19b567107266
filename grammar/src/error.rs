//! Syntax errors: where parsing stopped and what was expected there.

use crate::span::Span;

/// What kind of syntax error this is; the checker maps each to a stable diagnostic code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyntaxErrorKind {
    /// The text does not match the grammar.
    Unexpected,
    /// A number or integer literal that does not fit (e.g. `let n = 99999999999999999999999`).
    BadNumber,
    /// Expressions nest deeper, or a statement has more operators, than the documented limits
    /// (`depth::MAX_NESTING`, `depth::MAX_OPERATORS`).
    TooDeep,
    /// `a < b < c`: a comparison whose operand is an unparenthesized comparison. Python reads
    /// it as `a < b and b < c` and numpy rejects it on arrays; tdsl rejects it too.
    ChainedComparison,
}

/// A syntax error. pest stops at the first one, so there is at most one per parse.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxError {
    pub kind: SyntaxErrorKind,
    pub message: String,
    pub span: Span,
    /// What the grammar would have accepted at `span`, in words.
    pub expected: Vec<String>,
}

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SyntaxError {}
