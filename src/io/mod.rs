//! Tensor files: reading and writing `.npy` and `.safetensors`.
//!
//! Every function here turns a file into a dense, C-contiguous [`Tensor`](crate::tensor::Tensor)
//! (or back) and reports every problem as a [`Diagnostic`](crate::diag::Diagnostic) whose
//! message names the file. The diagnostics carry no labels: the caller knows which part of the
//! script named the file and adds the span.
//!
//! Invariants shared by both formats:
//! - Nothing is allocated from a size a file header claims before that size has been checked,
//!   with overflow-safe arithmetic, against the actual length of the file.
//! - Only the four tdsl dtypes (f32, f64, f16, bf16) are read; any other element type is a
//!   diagnostic naming it.
//! - Writes are atomic: the data goes to a temporary file in the target's directory which is
//!   then renamed over the target, so a failed write leaves neither a partial file nor a
//!   temporary one behind.

pub mod npy;
pub mod npz;
pub mod safetensors;

pub use self::npy::{read_npy, write_npy};
pub use self::npz::{read_npz, write_npz};
pub use self::safetensors::{read_safetensors, safetensors_names, write_safetensors};

use crate::diag::{Code, Diagnostic};
use std::fmt::Display;
use std::path::Path;

/// `invalid KIND file `PATH`: WHAT` under `code` (each format's own "invalid" code).
pub(crate) fn invalid_file(code: Code, kind: &str, path: &Path, what: impl Display) -> Diagnostic {
    Diagnostic::new(
        code,
        format!("invalid {kind} file `{}`: {what}", path.display()),
    )
}

/// `tdsl::io::read`: the file could not be read.
pub(crate) fn read_error(path: &Path, e: &std::io::Error) -> Diagnostic {
    Diagnostic::new(
        Code::FileRead,
        format!("cannot read `{}`: {e}", path.display()),
    )
}

/// An error while reading bytes whose presence was already checked: running out means the file
/// changed under us (or lied in a way we missed: `invalid`), anything else is an I/O error.
pub(crate) fn data_error(
    path: &Path,
    e: &std::io::Error,
    invalid: fn(&Path, &'static str) -> Diagnostic,
) -> Diagnostic {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        invalid(
            path,
            "the file ended early (did it change while being read?)",
        )
    } else {
        read_error(path, e)
    }
}

/// `tdsl::io::write`: the file could not be written.
pub(crate) fn write_error(path: &Path, what: impl Display) -> Diagnostic {
    Diagnostic::new(
        Code::FileWrite,
        format!("cannot write `{}`: {what}", path.display()),
    )
}
