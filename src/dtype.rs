//! Element types: `DType` lives in the storage crate (`tdsl_sparse::DType`), the one element
//! type of the workspace; this module re-exports it where the rest of tdsl has always found it.

pub use tdsl_sparse::DType;
