//! tdsl: a tensor language with named axes.
//!
//! Text goes one way: [`parse`] (the `tdsl-syntax` crate: text → AST) → [`check`] (AST →
//! typed [`check::Program`]) → [`interp`] (the reference interpreter) or, for costs, [`plan`].
//! [`compile`] does the first two steps; [`bind`] turns files and initialisers into input
//! tensors; the `cli` module is the `tdsl` command.
//!
//! ```
//! let src = "input a: f32[i=2, j=3] = arange\ny = reduce(a, \"i j -> j\", \"sum\")\noutput y";
//! let program = tdsl::compile(src, &Default::default()).unwrap();
//! let inputs = tdsl::bind::bind_inputs(&program, Default::default()).unwrap();
//! let out = tdsl::interp::run(&program, &inputs);
//! assert_eq!(out[0].to_f64(), vec![3.0, 5.0, 7.0]);
//! ```

pub mod bind;
pub mod check;
pub mod cli;
pub mod diag;
pub mod dtype;
pub mod init;
pub mod interp;
pub mod io;
pub mod machine;
pub mod plan;
pub mod runtime;
pub mod tensor;

pub use diag::{Code, Diagnostic, Diagnostics};
pub use dtype::DType;
pub use tensor::{Storage, Tensor};

use std::collections::BTreeMap;
use tdsl_syntax::{SyntaxError, SyntaxErrorKind};

/// A syntax error as a diagnostic.
pub fn syntax_diagnostic(e: SyntaxError) -> Diagnostic {
    let code = match e.kind {
        SyntaxErrorKind::Unexpected => Code::SyntaxError,
        SyntaxErrorKind::BadNumber => Code::BadNumber,
    };
    match e.kind {
        SyntaxErrorKind::BadNumber => Diagnostic::new(code, e.message)
            .label(e.span, "out of range")
            .help(
                "integers are at most 18446744073709551615 and numbers must be finite f64 values",
            ),
        SyntaxErrorKind::Unexpected => {
            Diagnostic::new(code, e.message).label(e.span, "unexpected here")
        }
    }
}

/// Parses a script into its AST.
pub fn parse(text: &str) -> Result<tdsl_syntax::ast::Script, Diagnostic> {
    tdsl_syntax::parse_script(text).map_err(syntax_diagnostic)
}

/// Parses and checks a script. `bound` describes data already bound to inputs (from files or
/// the API), so that axis extents can come from it.
pub fn compile(
    text: &str,
    bound: &BTreeMap<String, check::Binding>,
) -> Result<check::Program, Diagnostics> {
    let script = parse(text)?;
    check::check_script(&script, bound)
}
