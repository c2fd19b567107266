//! Planning: the contraction order of einsums and the cost model built on it.
//!
//! `order` chooses the pairwise contraction order with the fewest FLOPs (opt_einsum's optimal
//! path up to 8 operands, greedy beyond); `cost` counts FLOPs and bytes per statement along that
//! order. The loop IR and fusion arrive with the JIT and extend this module.

pub mod auto;
pub mod cost;
pub mod lower;
pub mod order;
pub mod sparse;
