//! The reader of the loop IR's text form: [`read_program`] turns what
//! [`print_program`](crate::print::print_program) writes back into a [`LoopProgram`], so
//! planner and backend tests can be written as text files (tests/loop/, spec/loop-ir.md §5).
//!
//! It reads exactly the printed grammar, plus what a person writing a test by hand expects:
//! indentation is free (braces give the structure), blank lines and lines starting with `;`
//! are comments, index coefficients of 1 may be left out in views, and `neg(x)` reads like
//! `-x`. Every error is a [`ReadError`] with a line and column; no input panics or recurses
//! without bound (expressions nest at most [`MAX_DEPTH`] deep).
//!
//! The printer's one ambiguity reads one way: `aN = max(aN, e)` is a max update and `aN =
//! min(aN, e)` a min update (a set of `max(aN, e)` computes the same value). Kernels read back
//! have no `source`. Only [`print_program`](crate::print::print_program)'s text reads back:
//! `print_kernel` lists only the buffers its kernel touches, so its buffer ids have gaps.

use crate::ir::{Kernel, Loop, LoopProgram, Stmt};
use std::fmt;

mod expr;
mod lex;
mod stmt;

/// How deeply expressions and loops may nest in text that is read.
pub const MAX_DEPTH: usize = 200;

/// How many infix operations one line may chain (`a + b + …`): a chain is as deep a tree as it
/// is long, and dropping or printing a tree recurses once per level.
pub const MAX_CHAIN: usize = 4096;

/// Why a text is not a loop program: where (1-based line and column, in characters) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

impl std::error::Error for ReadError {}

type Result<T> = std::result::Result<T, ReadError>;

/// Reads a whole program in the form [`print_program`](crate::print::print_program) writes.
///
/// ```
/// use tdsl_loop::{print::print_program, read::read_program};
/// let text = "buffers:\n  %0 y: f32[4] output 0\nkernel k0 (y = 1):\n  for v0 in 0..4 vector 4 {\n    %0[v0] = 1\n  }\n";
/// assert_eq!(print_program(&read_program(text).unwrap()), text);
/// ```
pub fn read_program(text: &str) -> Result<LoopProgram> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with(';')
        })
        .peekable();
    let mut program = LoopProgram::default();
    match lines.next() {
        Some((_, l)) if l.trim() == "buffers:" => {}
        Some((n, l)) => return Err(at(n, l, 0, "expected `buffers:`")),
        None => return Err(at(1, "", 0, "expected `buffers:`, found an empty text")),
    }
    while let Some(&(n, l)) = lines.peek() {
        if l.trim_start().starts_with("kernel") {
            break;
        }
        lines.next();
        let mut c = Cur::new(n, l);
        program.buffers.push(c.buffer(program.buffers.len())?);
    }
    while let Some((n, l)) = lines.next() {
        let (name, origin) = Cur::new(n, l).kernel_header()?;
        // The kernel's body, then each open loop with the statements read so far and the line
        // that opened it.
        let mut body = Vec::new();
        let mut open: Vec<(Loop, Vec<Stmt>, usize, &str)> = Vec::new();
        while let Some(&(n, l)) = lines.peek() {
            if open.is_empty() && l.trim_start().starts_with("kernel") {
                break;
            }
            lines.next();
            let mut c = Cur::new(n, l);
            let stmt = if c.rest().trim() == "}" {
                let Some((mut lp, inner, _, _)) = open.pop() else {
                    return Err(c.error("`}` closes no loop"));
                };
                lp.body = inner;
                Stmt::Loop(lp)
            } else if c.rest().starts_with("for ") {
                if open.len() >= MAX_DEPTH {
                    return Err(c.error("loops nest too deeply"));
                }
                open.push((c.loop_header()?, Vec::new(), n, l));
                continue;
            } else {
                c.statement()?
            };
            match open.last_mut() {
                Some((_, inner, _, _)) => inner.push(stmt),
                None => body.push(stmt),
            }
        }
        if let Some((_, _, n, l)) = open.last() {
            let indent = l.len() - l.trim_start().len();
            return Err(at(*n, l, indent, "this loop is never closed (`}`)"));
        }
        program.kernels.push(Kernel {
            name,
            origin,
            source: None,
            body,
        });
    }
    Ok(program)
}

fn at(line: usize, text: &str, byte: usize, message: &str) -> ReadError {
    ReadError {
        line,
        col: text.get(..byte).map_or(1, |t| t.chars().count() + 1),
        message: message.to_string(),
    }
}

/// A cursor over one line.
struct Cur<'a> {
    line: usize,
    text: &'a str,
    pos: usize,
    depth: usize,
    /// Infix operations read on this line.
    chain: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::tests::fixtures;
    use crate::print::print_program;
    use proptest::prelude::*;

    #[test]
    fn every_fixture_reads_back_to_itself() {
        for p in fixtures() {
            let text = print_program(&p);
            let back = read_program(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            let mut expect = p.clone();
            expect.kernels.iter_mut().for_each(|k| k.source = None);
            assert_eq!(format!("{back:?}"), format!("{expect:?}"), "{text}");
        }
    }

    #[test]
    fn expressions_read_with_the_printer_precedence() {
        for text in [
            "a0 - (a1 - a2)",
            "(a0 + a1) * a2",
            "-(a0 * a1)",
            "a0 * -a1",
            "-(2)",
            "-2 * a0",
            "-(-2)",
            "a0 - -2",
            "max(a0, exp(-inf))",
            "select(lt(a0, 0.5), cast<f16>(a1), iota[2*v0 - v1 - 3])",
            "1e-7 + 1e16 + nan + -0",
        ] {
            let line = format!("%0[v0] = {text}");
            let s = Cur::new(1, &line).statement().unwrap();
            let Stmt::Store { value, .. } = s else {
                panic!()
            };
            assert_eq!(crate::print::expr_text(&value), text);
        }
    }

    #[test]
    fn errors_name_the_line_and_column() {
        let err = |t: &str| read_program(t).unwrap_err().to_string();
        assert_eq!(err(""), "1:1: expected `buffers:`, found an empty text");
        assert_eq!(
            err("buffers:\n  %1 x: f32[4] input 0\n"),
            "2:3: buffers are listed in order: expected %0"
        );
        assert_eq!(
            err("buffers:\n  %0 x: f33[4] input 0\n"),
            "2:9: expected a type (f32, f64, f16, bf16, i32), found `f33[4]`"
        );
        assert_eq!(
            err("buffers:\nkernel k:\n  %0[v0] = foo(1)\n"),
            "3:12: unknown operation `foo`"
        );
        assert_eq!(
            err("buffers:\nkernel k:\n  for v0 in 0..4 {\n"),
            "3:3: this loop is never closed (`}`)"
        );
        assert_eq!(err("buffers:\nkernel k:\n}\n"), "3:1: `}` closes no loop");
        assert_eq!(
            err("buffers:\nkernel k:\n  %0[v4294967296] = 1\n"),
            "3:6: expected an index term, found `v4294967296]`"
        );
        assert_eq!(
            err("buffers:\nkernel k:\n  %0[99999999999999999999*v0] = 1\n"),
            "3:6: an index term 99999999999999999999 is too large"
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = format!(
            "buffers:\nkernel k:\n  %0[0] = {}1{}\n",
            "(".repeat(100_000),
            ")".repeat(100_000)
        );
        assert!(read_program(&deep)
            .unwrap_err()
            .message
            .contains("too deeply"));
        let neg = format!("buffers:\nkernel k:\n  %0[0] = {}a0\n", "-".repeat(100_000));
        assert!(read_program(&neg)
            .unwrap_err()
            .message
            .contains("too deeply"));
        let loops = format!("buffers:\nkernel k:\n{}", "for v0 in 0..1 {\n".repeat(1000));
        assert!(read_program(&loops)
            .unwrap_err()
            .message
            .contains("too deeply"));
        // A flat chain builds a tree as deep as it is long.
        let chain = format!(
            "buffers:\nkernel k:\n  %0[0] = {}a0 x\n",
            "a0 + ".repeat(200_000)
        );
        let e = read_program(&chain).unwrap_err();
        assert!(e.message.contains("operations on one line"), "{e}");
        let ok = format!(
            "buffers:\nkernel k:\n  %0[0] = {}a0\n",
            "a0 * ".repeat(MAX_CHAIN)
        );
        assert!(read_program(&ok).is_ok());
    }

    proptest! {
        #[test]
        fn no_text_panics(text in "\\PC{0,200}") {
            let _ = read_program(&format!("buffers:\nkernel k:\n{text}"));
        }

        #[test]
        fn no_edit_of_a_printed_program_panics(
            which in 0usize..8,
            at in any::<prop::sample::Index>(),
            insert in "[ -~]{0,6}",
            cut in 0usize..6,
        ) {
            let programs = fixtures();
            let text = print_program(&programs[which % programs.len()]);
            let mut i = at.index(text.len() + 1);
            while !text.is_char_boundary(i) { i -= 1; }
            let mut j = (i + cut).min(text.len());
            while !text.is_char_boundary(j) { j -= 1; }
            let edited = format!("{}{insert}{}", &text[..i], &text[j..]);
            if let Ok(p) = read_program(&edited) {
                // Whatever reads prints back to text that reads to the same program.
                let again = read_program(&print_program(&p)).unwrap();
                prop_assert_eq!(format!("{again:?}"), format!("{p:?}"));
            }
        }
    }
}
