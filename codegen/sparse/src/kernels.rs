//! CPU kernels: products of a rank-2 sparse matrix with a dense matrix.
//!
//! One entry point, [`spmm`], covers every layout and both sides:
//!
//! * `Side::Left`:  `c[m, n] (+)= S[m, k] · d[k, n]`
//! * `Side::Right`: `c[m, n] (+)= d[m, k] · S[k, n]`
//!
//! where `S` is the stored matrix, or its transpose when `transposed` is true (a CSR matrix
//! used transposed is a CSC one; no data moves). Dense operands are strided views of any
//! strides; the fast paths need unit stride along the axis the micro-kernel vectorises and
//! fall back to a generic (correct, parallel) loop otherwise.
//!
//! Values of any dtype (f16/bf16/f32/f64) are widened to the compute type `T` (f32 or f64) on
//! load; accumulation is in `T`. Work is split across the current rayon pool.
