//! An MLP forward pass from Rust: two `einsum!` projections with a bias and ReLU applied to the
//! tensor's slice in between, then per-token statistics with `reduce!`, checked against the same
//! network written as a `tdsl::Program` and run on the reference interpreter. A loop of forward
//! passes compiles its kernels once.
//!
//! Run with `cargo run --example mlp`.

use std::time::Instant;
use tdsl::{Program, Tensor};

type Result<T = (), E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

const TOKENS: usize = 64;
const MODEL: usize = 128;
const HIDDEN: usize = 512;

/// Normal values from tdsl's own generator (the stream `randn(seed=S)` uses), scaled.
fn randn(shape: &[usize], seed: u64, scale: f32) -> Result<Tensor> {
    let mut rng = tdsl::init::SplitMix64::new(seed);
    let n = shape.iter().product();
    let values = (0..n).map(|_| rng.next_normal() as f32 * scale).collect();
    Ok(Tensor::from_vec(values, shape)?)
}

struct Mlp {
    w1: Tensor,
    b1: Vec<f32>,
    w2: Tensor,
}

impl Mlp {
    /// `relu(x w1 + b1) w2`, then each token's mean and max.
    fn forward(&self, x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let mut h = tdsl::einsum!("t m, m h -> t h", x, self.w1)?;
        let hs = h.as_mut_slice::<f32>().ok_or("h is not f32")?;
        for row in hs.chunks_mut(HIDDEN) {
            for (v, b) in row.iter_mut().zip(&self.b1) {
                *v = (*v + b).max(0.0);
            }
        }
        let y = tdsl::einsum!("t h, h m -> t m", h, self.w2)?;
        let mean = tdsl::reduce!(y, "t m -> t", mean)?;
        let max = tdsl::reduce!(y, "t m -> t", max)?;
        Ok((y, mean, max))
    }
}

fn main() -> Result {
    let x = randn(&[TOKENS, MODEL], 0, 1.0)?;
    let mlp = Mlp {
        w1: randn(&[MODEL, HIDDEN], 1, 1.0 / (MODEL as f32).sqrt())?,
        b1: (0..HIDDEN).map(|i| (i % 7) as f32 * 0.01).collect(),
        w2: randn(&[HIDDEN, MODEL], 2, 1.0 / (HIDDEN as f32).sqrt())?,
    };

    let before = tdsl::jit_stats();
    let t0 = Instant::now();
    let (y, mean, max) = mlp.forward(&x)?;
    let first = t0.elapsed();
    let n_runs = 20;
    let t0 = Instant::now();
    for _ in 0..n_runs {
        mlp.forward(&x)?;
    }
    let per_run = t0.elapsed() / n_runs;
    let stats = tdsl::jit_stats();
    println!("MLP forward: x [{TOKENS}, {MODEL}] -> y {:?}", y.shape());
    println!(
        "  first pass {:.1} ms, then {:.2} ms per pass; {} plans and {} kernels compiled for {} calls",
        first.as_secs_f64() * 1e3,
        per_run.as_secs_f64() * 1e3,
        stats.plans - before.plans,
        stats.kernels_compiled - before.kernels_compiled,
        stats.runs - before.runs,
    );
    let mean = mean.as_slice::<f32>().ok_or("mean is not f32")?;
    let max = max.as_slice::<f32>().ok_or("max is not f32")?;
    println!("  token 0: mean {:.4}, max {:.4}", mean[0], max[0]);

    // The same network as one script, on the reference interpreter (f64 accumulation).
    let script = Program::compile(
        "input x: f32[t, m]\n\
         input w1: f32[m, h]\n\
         input b1: f32[h]\n\
         input w2: f32[h, m]\n\
         hid = relu(einsum(x, w1, \"t m, m h -> t h\") + b1)\n\
         y = einsum(hid, w2, \"t h, h m -> t m\")\n\
         mean = reduce(y, \"t m -> t\", \"mean\")\n\
         output y, mean",
    )?;
    let b1 = Tensor::from_slice(&mlp.b1, &[HIDDEN])?;
    let reference = script
        .bind("x", &x)
        .bind("w1", &mlp.w1)
        .bind("b1", &b1)
        .bind("w2", &mlp.w2)
        .run_reference()?;
    let want = reference["mean"].as_slice::<f32>().ok_or("not f32")?;
    let max_diff = mean
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!("  max |macros - reference| over token means = {max_diff:.2e}");
    if max_diff > 1e-4 || stats.plans - before.plans != 4 {
        return Err("the MLP does not match the reference, or recompiled".into());
    }
    Ok(())
}
