//! Planning: from a checked program to the loop IR every backend compiles. The stages, in the
//! order `session::Pipeline` runs them:
//!
//! 1. [`auto`]: resolve `sparsify(x, auto)` requests to formats, from the cost model's
//!    predictions on the pipeline's machine model.
//! 2. [`order`]: the pairwise contraction order of every einsum (opt_einsum's optimal path up
//!    to 8 operands, greedy beyond); [`cost`] counts FLOPs and bytes along that same order and
//!    predicts sparse and dense times.
//! 3. [`sparse`]: which values are stored sparse and which einsums are sparse × dense products.
//! 4. [`lower`]: the loop IR itself (materialisation, fusion, views, reductions, einsum steps,
//!    sparse calls and stored-entry loops; one file per concern, see its docs), followed by the
//!    loop-IR passes of `tdsl_loop::passes` on every fused kernel and the verifier.

pub mod auto;
pub mod cost;
pub mod lower;
pub mod order;
pub mod sparse;
