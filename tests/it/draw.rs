//! Shared scaffolding of the property tests: the proptest configuration and [`Draw`], which
//! builds a case from a list of random choices so that proptest's shrinking of the list shrinks
//! the case (choice 0 always means the simplest option).

use proptest::prelude::*;

/// 64 cases per property unless `PROPTEST_CASES` says otherwise; no regression files.
pub fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Reads choices in order; past the end every choice is 0 (the simplest option).
pub struct Draw<'a> {
    v: &'a [u32],
    i: usize,
}

#[allow(dead_code)]
impl<'a> Draw<'a> {
    pub fn new(v: &'a [u32]) -> Draw<'a> {
        Draw { v, i: 0 }
    }
    pub fn next(&mut self) -> u32 {
        let x = self.v.get(self.i).copied().unwrap_or(0);
        self.i += 1;
        x
    }
    /// In `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.next() as usize % n.max(1)
    }
    /// True with about `pct` percent probability (never for choice 0).
    pub fn chance(&mut self, pct: u32) -> bool {
        self.next() % 100 >= 100 - pct
    }
    /// One of `xs` (the first for choice 0).
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
    /// A Fisher–Yates shuffle that is the identity for all-zero choices.
    pub fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            let j = i - self.below(i + 1);
            xs.swap(i, j);
        }
    }
}
