//! `tdsl repl` (being written).

use super::render::Color;
use std::process::ExitCode;

/// Runs the REPL on stdin/stdout.
pub fn main(color: Color) -> ExitCode {
    let _ = color;
    eprintln!("the REPL is being written");
    ExitCode::from(2)
}
