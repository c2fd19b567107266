//! Integration tests of the `tdsl` package: one test binary, one module per concern.

mod cli;
mod common;
mod corpus;
mod cuda;
mod diff;
mod draw;
mod emu_threads;
mod errors;
mod filetests;
mod gpu;
mod isa;
mod language;
mod plan;
mod plot;
mod prop_einsum;
mod prop_patterns;
mod prop_sparse;
mod races;
mod repl;
mod robust;
mod session;
mod sparse_io;
mod tensor_emu;
