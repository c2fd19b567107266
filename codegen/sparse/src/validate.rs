//! Validation of sparse data from outside (files, API callers).
