//! Conversion from dense (`sparsify`) and back (`dense`).
