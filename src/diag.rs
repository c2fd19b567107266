//! Diagnostics: every error a user can cause, as plain data.
//!
//! A [`Diagnostic`] has a stable [`Code`], a message, labelled spans into the script and an
//! optional help line. Library code only builds them; the CLI renders them with miette
//! (see `cli::render`). `spec/errors.md` documents every code, and a test keeps the two lists
//! in sync.

use std::fmt;
use tdsl_syntax::Span;

macro_rules! codes {
    ($($variant:ident => $text:literal,)*) => {
        /// A stable diagnostic code. The text form (`tdsl::check::extent_mismatch`) is the
        /// contract; the Rust names may change.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code { $($variant,)* }

        impl Code {
            /// Every code, in documentation order.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $text,)* }
            }
        }
    };
}

codes! {
    // Syntax (grammar/).
    SyntaxError => "tdsl::syntax::unexpected",
    BadNumber => "tdsl::syntax::bad_number",
    TooDeep => "tdsl::syntax::too_deep",
    ChainedComparison => "tdsl::syntax::chained_comparison",
    // Names and statements.
    UndefinedName => "tdsl::check::undefined_name",
    DuplicateName => "tdsl::check::duplicate_name",
    DuplicateOutput => "tdsl::check::duplicate_output",
    NoOutput => "tdsl::check::no_output",
    NotATensor => "tdsl::check::not_a_tensor",
    UnknownDtype => "tdsl::check::unknown_dtype",
    UnknownFunction => "tdsl::check::unknown_function",
    Arity => "tdsl::check::arity",
    BadArgument => "tdsl::check::bad_argument",
    UnknownInit => "tdsl::check::unknown_init",
    // Axes and extents.
    ExtentMismatch => "tdsl::check::extent_mismatch",
    UnknownExtent => "tdsl::check::unknown_extent",
    ZeroExtent => "tdsl::check::zero_extent",
    SizeOverflow => "tdsl::check::size_overflow",
    BroadcastMismatch => "tdsl::check::broadcast_mismatch",
    // Patterns (rearrange, reduce, repeat, einsum).
    PatternSyntax => "tdsl::pattern::syntax",
    PatternMissingArrow => "tdsl::pattern::missing_arrow",
    PatternDuplicateAxis => "tdsl::pattern::duplicate_axis",
    PatternAxisOneSide => "tdsl::pattern::axis_one_side",
    PatternRank => "tdsl::pattern::rank_mismatch",
    PatternIndivisible => "tdsl::pattern::indivisible",
    PatternTwoUnknowns => "tdsl::pattern::two_unknowns",
    PatternUnusedKwarg => "tdsl::pattern::unused_axis_length",
    PatternBadKwarg => "tdsl::pattern::bad_axis_length",
    PatternEllipsis => "tdsl::pattern::ellipsis",
    PatternAnonymous => "tdsl::pattern::anonymous_axis",
    PatternOperands => "tdsl::pattern::operand_count",
    PatternBroadcast => "tdsl::pattern::size1_broadcast",
    UnknownReduceOp => "tdsl::pattern::unknown_reduce_op",
    // Sparse formats.
    UnknownFormat => "tdsl::format::unknown",
    FormatRank => "tdsl::format::rank",
    FormatBlock => "tdsl::format::block_divides",
    FormatTwoFour => "tdsl::format::two_four_extent",
    FormatTwoFourData => "tdsl::format::two_four_violated",
    // Data and files.
    FileRead => "tdsl::io::read",
    FileWrite => "tdsl::io::write",
    NpyInvalid => "tdsl::io::npy_invalid",
    SafetensorsInvalid => "tdsl::io::safetensors_invalid",
    NpzInvalid => "tdsl::io::npz_invalid",
    SparseData => "tdsl::data::sparse",
    DtypeMismatch => "tdsl::io::dtype_mismatch",
    ShapeMismatch => "tdsl::io::shape_mismatch",
    UnknownInput => "tdsl::io::unknown_input",
    MissingInput => "tdsl::io::missing_input",
    TensorNotFound => "tdsl::io::tensor_not_found",
    TooLarge => "tdsl::io::too_large",
    // Engines and devices.
    BackendUnavailable => "tdsl::backend::unavailable",
    // Compiler bugs that reach the user (never expected; reported rather than panicking).
    Internal => "tdsl::internal::error",
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A storage-crate error as a diagnostic, its kind choosing the code: malformed data is
/// `tdsl::data::sparse`, a size past the formats' limits `tdsl::io::too_large`, a shape that
/// does not fit `tdsl::io::shape_mismatch`, a bad pruning request `tdsl::check::bad_argument`.
impl From<tdsl_sparse::SparseError> for Diagnostic {
    fn from(e: tdsl_sparse::SparseError) -> Diagnostic {
        use tdsl_sparse::SparseErrorKind as K;
        let code = match e.kind {
            K::Invalid => Code::SparseData,
            K::TooLarge => Code::TooLarge,
            K::Shape => Code::ShapeMismatch,
            K::Select => Code::BadArgument,
            K::Internal => Code::Internal,
        };
        Diagnostic::new(code, e.message)
    }
}

/// One labelled span of a diagnostic. The first label of a diagnostic is the primary one.
#[derive(Debug, Clone, PartialEq)]
pub struct Label {
    pub span: Span,
    pub text: String,
}

/// A user-facing error: code, message, labelled spans, help.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    pub code: Code,
    pub message: String,
    pub labels: Vec<Label>,
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn new(code: Code, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            message: message.into(),
            labels: Vec::new(),
            help: None,
        }
    }

    /// Adds a label; the first label added is the primary one.
    pub fn label(mut self, span: Span, text: impl Into<String>) -> Diagnostic {
        self.labels.push(Label {
            span,
            text: text.into(),
        });
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    /// The primary span, if any.
    pub fn span(&self) -> Option<Span> {
        self.labels.first().map(|l| l.span)
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for Diagnostic {}

/// Several diagnostics at once: the checker reports everything it finds, not just the first.
#[derive(Clone, PartialEq, Default)]
pub struct Diagnostics(
    pub Vec<Diagnostic>,
    pub(crate) Option<std::sync::Arc<Source>>,
);

/// The text diagnostics point into, for rendering: a name (`<program>`, a file) and the text.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub name: String,
    pub text: String,
}

impl Diagnostics {
    /// The same diagnostics, rendered against `text` (called `name`) by `Display` and `Debug`.
    pub fn with_source(mut self, name: &str, text: &str) -> Diagnostics {
        self.1 = Some(std::sync::Arc::new(Source {
            name: name.to_string(),
            text: text.to_string(),
        }));
        self
    }

    /// The source they point into, when one is attached.
    pub fn source(&self) -> Option<&Source> {
        self.1.as_deref()
    }

    pub fn push(&mut self, d: Diagnostic) {
        self.0.push(d);
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter()
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Self {
        Diagnostics(vec![d], None)
    }
}

/// Every diagnostic as the CLI prints it: code, message, the source line with the offending
/// text underlined (when a source is attached), and the help line.
impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, text) = match &self.1 {
            Some(s) => (s.name.as_str(), s.text.as_str()),
            None => ("<input>", ""),
        };
        for d in &self.0 {
            let d = if text.is_empty() {
                // No source: keep the help, drop labels that cannot be shown.
                Diagnostic {
                    labels: Vec::new(),
                    ..d.clone()
                }
            } else {
                d.clone()
            };
            f.write_str(&crate::render::render(
                &d,
                name,
                text,
                crate::render::Color::Never,
            ))?;
        }
        if self.0.len() > 1 {
            writeln!(f, "{} errors", self.0.len())?;
        }
        Ok(())
    }
}

/// The rendered form, as `Display` (so `?` out of `main` shows the report, not the struct).
impl fmt::Debug for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return f.debug_tuple("Diagnostics").field(&self.0).finish();
        }
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Diagnostics {}

pub type Result<T, E = Diagnostic> = std::result::Result<T, E>;
