//! What a cached `Program::run` costs above its kernels: for a few small programs, the median
//! wall time of `Program::run` (inputs bound by reference, so copied once, as users call it)
//! against the median kernel time the executable reports for the same plan. bench/RESULTS.md
//! records the figures.
//!
//! Run with `cargo run --release --example dispatch`.

use std::time::{Duration, Instant};
use tdsl::session::{Options, Pipeline};
use tdsl::{Program, Tensor};

type Result<T = (), E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

/// A named program and its inputs.
type Case = (&'static str, &'static str, Vec<(&'static str, Tensor)>);

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ones(shape: &[usize]) -> Result<Tensor> {
    Ok(Tensor::from_vec(
        vec![1.0f32; shape.iter().product()],
        shape,
    )?)
}

/// (run median, kernel median) over `runs` runs after a warm-up.
fn measure(src: &str, inputs: &[(&str, Tensor)], runs: usize) -> Result<(Duration, Duration)> {
    let p = Program::compile(src)?;
    let args = || inputs.iter().map(|(n, t)| (*n, t));
    p.run(args())?;
    let mut total = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        std::hint::black_box(p.run(args())?);
        total.push(t.elapsed());
    }
    // The same plan through the pipeline, for the executable's own kernel times.
    let pipe = Pipeline::new(Options::default());
    let bound = inputs
        .iter()
        .map(|(n, t)| {
            let b = tdsl::check::Binding {
                dtype: t.dtype(),
                shape: t.shape().to_vec(),
                source: n.to_string(),
            };
            (n.to_string(), b)
        })
        .collect();
    let program = pipe.check(&pipe.parse(src)?, &bound)?;
    let values = tdsl::bind::bind_values(
        &program,
        inputs
            .iter()
            .map(|(n, t)| (n.to_string(), tdsl::bind::Provided::dense(t.clone(), *n)))
            .collect(),
    )?;
    let compiled = pipe.compile(program)?;
    let mut kernels = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (_, stats) = compiled.run(values.clone(), &Default::default())?;
        kernels.push(stats.kernel_times.iter().sum());
    }
    Ok((median(total), median(kernels)))
}

fn main() -> Result {
    let cases: Vec<Case> = vec![
        (
            "elementwise, 4 values",
            "input x: f32[n]\ny = x * 2 + 1\noutput y",
            vec![("x", ones(&[4])?)],
        ),
        (
            "softmax rows, 8 x 64",
            "input x: f32[r, c]\ne = exp(x - reduce(x, \"r c -> r 1\", \"max\"))\ny = e / reduce(e, \"r c -> r 1\", \"sum\")\noutput y",
            vec![("x", ones(&[8, 64])?)],
        ),
        (
            "batched matmul, 4 x 64^3",
            "input a: f32[b, i, k]\ninput x: f32[b, k, j]\ny = einsum(a, x, \"b i k, b k j -> b i j\")\noutput y",
            vec![("a", ones(&[4, 64, 64])?), ("x", ones(&[4, 64, 64])?)],
        ),
    ];
    println!(
        "{:<26} {:>12} {:>12} {:>12}",
        "program", "run (µs)", "kernels (µs)", "above (µs)"
    );
    for (name, src, inputs) in &cases {
        let (run, kern) = measure(src, inputs, 2001)?;
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "{name:<26} {:>12.2} {:>12.2} {:>12.2}",
            us(run),
            us(kern),
            us(run) - us(kern)
        );
    }
    Ok(())
}
