//! tdsl-macros (being written).
