//! A lexical guard run before the parser: it bounds how deep an expression can nest, so no
//! input can overflow the stack of the recursive-descent parser or of the passes that walk the
//! AST (the checker, the printer, `Drop`). The limits are documented in spec/language.md §2 and
//! reported as `tdsl::syntax::too_deep`.

use crate::error::{SyntaxError, SyntaxErrorKind};
use crate::span::Span;

/// Parentheses and unary minus signs may nest at most this deep.
pub const MAX_NESTING: usize = 200;
/// One statement may hold at most this many binary operators (`+ - * /` and comparisons).
pub const MAX_OPERATORS: usize = 1000;

/// Scans `text` (outside strings and comments) and fails at the first place a limit is passed.
pub fn check(text: &str) -> Result<(), SyntaxError> {
    let bytes = text.as_bytes();
    // Open parentheses, each with the unary minus signs in front of it; `outer` is their sum.
    let mut parens: Vec<usize> = Vec::new();
    let mut outer = 0usize;
    let mut minus_run = 0usize; // unary minus signs in front of the current operand
    let mut operators = 0usize; // binary operators in the current statement
                                // True where the next `-` is unary: after an operator, `(`, `,`, `=` or at a statement start.
    let mut expect_operand = true;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b'"' | b'\'' => {
                let end = bytes[i + 1..]
                    .iter()
                    .position(|&b| b == c || b == b'\n')
                    .map_or(bytes.len(), |p| i + 1 + p);
                i = end + 1;
                expect_operand = false;
                minus_run = 0;
                continue;
            }
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'(' => {
                parens.push(minus_run);
                outer += minus_run;
                minus_run = 0;
                if parens.len() + outer > MAX_NESTING {
                    return Err(too_deep(
                        i,
                        format!("parentheses nest more than {MAX_NESTING} deep here"),
                    ));
                }
                expect_operand = true;
            }
            b')' => {
                outer -= parens.pop().unwrap_or(0);
                minus_run = 0;
                expect_operand = false;
            }
            b'-' if expect_operand => {
                minus_run += 1;
                if parens.len() + outer + minus_run > MAX_NESTING {
                    return Err(too_deep(
                        i,
                        format!("unary minus signs and parentheses nest more than {MAX_NESTING} deep here"),
                    ));
                }
            }
            b'+' | b'-' | b'*' | b'/' | b'<' | b'>' | b'!' | b'=' => {
                let two = bytes.get(i + 1) == Some(&b'=');
                if c == b'=' && !two {
                    // An assignment or keyword argument, not an operator.
                    expect_operand = true;
                    minus_run = 0;
                    i += 1;
                    continue;
                }
                operators += 1;
                if operators > MAX_OPERATORS {
                    return Err(too_deep(
                        i,
                        format!("this statement has more than {MAX_OPERATORS} operators"),
                    ));
                }
                expect_operand = true;
                minus_run = 0;
                if two {
                    i += 1;
                }
            }
            b',' => {
                expect_operand = true;
                minus_run = 0;
            }
            b'\n' | b';' if parens.is_empty() && !expect_operand => {
                // A statement ends here (a line break after an operator continues it).
                operators = 0;
                expect_operand = true;
                minus_run = 0;
            }
            b' ' | b'\t' | b'\r' | b'\\' | b'\n' | b';' => {}
            _ => {
                if expect_operand {
                    minus_run = 0;
                }
                expect_operand = false;
            }
        }
        i += 1;
    }
    Ok(())
}

fn too_deep(at: usize, message: String) -> SyntaxError {
    SyntaxError {
        kind: SyntaxErrorKind::TooDeep,
        message,
        span: Span::new(at, at + 1),
        expected: Vec::new(),
    }
}
