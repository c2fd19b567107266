//! Why a sparse operation failed, as data: callers turn the kind into their own diagnostic code
//! (a bad request, malformed outside data, a size limit) and show the message.

use std::fmt;

/// An error of the storage crate: its kind and a message naming the array, position or value
/// at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SparseError {
    pub kind: SparseErrorKind,
    pub message: String,
}

/// What kind of mistake it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SparseErrorKind {
    /// The shape does not fit the layout (rank, block extents, 2:4 axis), or the data's length
    /// is not the shape's.
    Shape,
    /// A pruning request that cannot be honoured (NaN threshold, density outside [0, 1],
    /// density with 2:4).
    Select,
    /// Arrays from outside break the format's invariants (offsets, index ranges, order,
    /// metadata), or hold values of another dtype.
    Invalid,
    /// A count or index does not fit the format's `i32` arrays or memory.
    TooLarge,
    /// A bug of the caller inside tdsl (a layout passed where another is required).
    Internal,
}

impl SparseError {
    pub fn new(kind: SparseErrorKind, message: impl Into<String>) -> SparseError {
        SparseError {
            kind,
            message: message.into(),
        }
    }

    pub fn shape(message: impl Into<String>) -> SparseError {
        SparseError::new(SparseErrorKind::Shape, message)
    }

    pub fn select(message: impl Into<String>) -> SparseError {
        SparseError::new(SparseErrorKind::Select, message)
    }

    pub fn invalid(message: impl Into<String>) -> SparseError {
        SparseError::new(SparseErrorKind::Invalid, message)
    }

    pub fn too_large(message: impl Into<String>) -> SparseError {
        SparseError::new(SparseErrorKind::TooLarge, message)
    }

    pub fn internal(message: impl Into<String>) -> SparseError {
        SparseError::new(SparseErrorKind::Internal, message)
    }
}

impl fmt::Display for SparseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SparseError {}

/// Shorthand for the crate's results.
pub type Result<T, E = SparseError> = std::result::Result<T, E>;
