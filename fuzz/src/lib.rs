//! `tdsl-fuzz`: a small, coverage-free mutation fuzzer for every front door of tdsl, on stable
//! Rust (cargo-fuzz and libFuzzer need nightly). See README.md for how to run it.
//!
//! * [`targets`]: what each target feeds tdsl, and the structure-aware mutations of the file
//!   formats.
//! * [`mutate`]: byte-level mutations and per-target token dictionaries.
//! * [`engine`]: the loop (panics caught, hangs timed, new outcomes kept in an in-memory pool),
//!   replay and minimisation.
//! * [`seeds`]: the seed corpus, as `--seed-corpus` writes it to `corpus/`.

pub mod engine;
pub mod mutate;
pub mod rng;
pub mod seeds;
pub mod targets;

pub use engine::{fuzz, Config, Summary};
pub use targets::{target, Target, TARGETS};
