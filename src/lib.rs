//! tdsl: a tensor language with named axes.
//!
//! Text goes one way: [`parse`] (the `tdsl-syntax` crate: text → AST) → [`check`] (AST →
//! typed [`check::Program`]) → [`plan`] (loop IR) → a backend (`tdsl_loop::Backend`) → run; or
//! [`interp`], the reference interpreter. [`session::Pipeline`] is the one orchestration of
//! those steps that the CLI, the REPL and [`Program`] share; [`compile`] does the first two;
//! [`bind`] turns files and initialisers into input tensors; the `cli` module is the `tdsl`
//! command.
//!
//! ```
//! let src = "input a: f32[i=2, j=3] = arange\ny = reduce(a, \"i j -> j\", \"sum\")\noutput y";
//! let program = tdsl::compile(src, &Default::default()).unwrap();
//! let inputs = tdsl::bind::bind_inputs(&program, Default::default()).unwrap();
//! let out = tdsl::interp::run(&program, &inputs);
//! assert_eq!(out[0].to_f64(), vec![3.0, 5.0, 7.0]);
//! ```
//!
//! # Rust API and macros
//!
//! [`Program`] (module [`api`]) compiles a script once and runs it on the CPU JIT, caching the
//! checked program, its plan and its kernels per input signature (names, dtypes, shapes).
//! Tensors go in as `(name, tensor)` pairs or through [`Program::bind`]; results come back as
//! [`Outputs`], by name and in `output` order, with their [`TensorType`]s (axis names, dtype,
//! format). [`Tensor`] is built from and read as `&[T]` for every [`Element`] type.
//!
//! ```
//! use tdsl::{Program, Tensor};
//! let p = Program::compile(
//!     "input x: f32[b, d]\ny = reduce(x, \"b d -> b\", \"max\")\noutput y",
//! )?;
//! let x = Tensor::from_slice(&[1.0f32, 5.0, 2.0, 3.0, 9.0, 4.0], &[2, 3])?;
//! let out = p.run([("x", &x)])?;
//! assert_eq!(out["y"].as_slice::<f32>(), Some(&[5.0, 9.0][..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The macros check their pattern strings when the Rust code compiles (syntax, axes on one side
//! only, duplicate axes, reduce op names, operand counts: `compile_error!`s that give the line
//! and column inside the string) and check extents when they run, against the operands' shapes.
//! Each call site compiles its kernel once per operand signature, so a call in a loop pays for
//! the JIT once. They return `Result<Tensor, Diagnostics>`. Operands of different dtypes promote
//! as in scripts (spec/language.md): `einsum!` of an `f32` and an `f64` tensor is `f64`, of
//! `f16` and `f32` is `f32`; cast an operand first to keep the narrow type.
//!
//! ```
//! let a = tdsl::Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
//! let b = tdsl::Tensor::from_slice(&[1.0f32, 1.0, 0.0, 1.0], &[2, 2])?;
//! let c = tdsl::einsum!("i k, k j -> i j", a, b)?;
//! assert_eq!(c.as_slice::<f32>(), Some(&[1.0, 3.0, 3.0, 7.0][..]));
//! let t = tdsl::rearrange!(c, "i j -> j i")?;
//! assert_eq!(t.as_slice::<f32>(), Some(&[1.0, 3.0, 3.0, 7.0][..]));
//! let s = tdsl::reduce!(t, "i j -> j", sum)?;
//! assert_eq!(s.as_slice::<f32>(), Some(&[4.0, 10.0][..]));
//! let r = tdsl::repeat!(s, "j -> j c", c = 2)?;
//! assert_eq!(r.shape(), [2, 2]);
//! let p = tdsl::program!(r#"
//!     input x: f32[n]
//!     y = x * 2
//!     output y
//! "#);
//! assert_eq!(p.run([("x", &s)])?["y"].as_slice::<f32>(), Some(&[8.0, 20.0][..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod api;
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
pub mod render;
pub mod runtime;
pub mod session;
pub mod sparse;
pub mod tensor;

pub use diag::{Code, Diagnostic, Diagnostics};

/// README.md's Rust examples, compiled and run as doc-tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
pub use dtype::DType;
/// The allocator the `tdsl` binary installs: large blocks aligned to a cache line, so that wide
/// vector loads of a buffer never straddle two (see `tdsl_cpu::CacheLineAlloc`).
pub use tdsl_cpu::CacheLineAlloc;
pub use tensor::{Storage, Tensor};

pub use api::{
    bf16, f16, jit_stats, AsInput, Element, JitStats, Outputs, Program, Run, TensorArg, TensorType,
    TensorView,
};
pub use tdsl_macros::{einsum, program, rearrange, reduce, repeat};

use std::collections::BTreeMap;
use tdsl_syntax::{SyntaxError, SyntaxErrorKind};

/// A syntax error as a diagnostic.
pub fn syntax_diagnostic(e: SyntaxError) -> Diagnostic {
    let code = match e.kind {
        SyntaxErrorKind::Unexpected => Code::SyntaxError,
        SyntaxErrorKind::BadNumber => Code::BadNumber,
        SyntaxErrorKind::TooDeep => Code::TooDeep,
        SyntaxErrorKind::ChainedComparison => Code::ChainedComparison,
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
        SyntaxErrorKind::ChainedComparison => Diagnostic::new(code, e.message)
            .label(e.span, "two comparisons in a row")
            .help("parenthesize the one meant first, or write both tests and multiply them: `(a < b) * (b < c)`"),
        SyntaxErrorKind::TooDeep => Diagnostic::new(code, e.message)
            .label(e.span, "limit passed here")
            .help(format!(
                "parentheses and unary minus nest at most {} deep and a statement holds at most {} operators: name intermediate results with assignments",
                tdsl_syntax::depth::MAX_NESTING,
                tdsl_syntax::depth::MAX_OPERATORS
            )),
    }
}

/// Parses a script into its AST.
pub fn parse(text: &str) -> Result<tdsl_syntax::ast::Script, Diagnostic> {
    parse_at(text, 0)
}

/// Parses a script that lies at offset `base` of a session's `tdsl_syntax::SourceMap`: every
/// span, of the AST and of the diagnostic, points there.
pub fn parse_at(text: &str, base: u32) -> Result<tdsl_syntax::ast::Script, Diagnostic> {
    tdsl_syntax::parse_script_at(text, base).map_err(syntax_diagnostic)
}

/// Parses and checks a script: the front half of [`session::Pipeline`]. `bound` describes data
/// already bound to inputs (from files or the API), so that axis extents can come from it.
pub fn compile(
    text: &str,
    bound: &BTreeMap<String, check::Binding>,
) -> Result<check::Program, Diagnostics> {
    let pipe = session::Pipeline::default();
    pipe.check(&pipe.parse(text)?, bound)
}
