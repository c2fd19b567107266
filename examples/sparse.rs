//! Sparse weights from Rust: a block-sparse projection (32×32 blocks, a quarter kept) and a
//! 2:4 linear layer, declared with formats in a `tdsl::Program`, run by the JIT on compressed
//! storage, checked against the reference interpreter, and timed next to the same programs
//! with dense weights.
//!
//! Run with `cargo run --release --example sparse`.

use std::time::Instant;
use tdsl::{Program, Tensor};

type Result<T = (), E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

const OUT: usize = 1024;
const IN: usize = 1024;
const BATCH: usize = 64;
const BLOCK: usize = 32;

/// Normal values from tdsl's own generator, with every block whose index is not a multiple of
/// `keep_every` set to zero (so a quarter of the blocks stay for `keep_every = 4`).
fn block_sparse(seed: u64, keep_every: usize) -> Result<Tensor> {
    let mut rng = tdsl::init::SplitMix64::new(seed);
    let mut v: Vec<f32> = (0..OUT * IN)
        .map(|_| rng.next_normal() as f32 / (IN as f32).sqrt())
        .collect();
    for r in 0..OUT {
        for c in 0..IN {
            let block = (r / BLOCK) * (IN / BLOCK) + c / BLOCK;
            if !(block * 7 + 3).is_multiple_of(keep_every) {
                v[r * IN + c] = 0.0;
            }
        }
    }
    Ok(Tensor::from_vec(v, &[OUT, IN])?)
}

/// Median wall time of `runs` calls of `f`, in milliseconds.
fn median_ms(runs: usize, mut f: impl FnMut() -> Result) -> Result<f64> {
    let mut t = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        f()?;
        t.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[runs / 2])
}

fn max_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    let (a, b) = (
        a.as_slice::<f32>().ok_or("not f32")?,
        b.as_slice::<f32>().ok_or("not f32")?,
    );
    Ok(a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max))
}

fn main() -> Result {
    let w = block_sparse(1, 4)?;
    let x = Tensor::from_vec(
        {
            let mut rng = tdsl::init::SplitMix64::new(2);
            (0..IN * BATCH).map(|_| rng.next_normal() as f32).collect()
        },
        &[IN, BATCH],
    )?;

    // The same product with the weight declared block-sparse and dense.
    let body = "input x: f32[i, b]\ny = einsum(w, x, \"o i, i b -> o b\")\noutput y";
    let sparse = Program::compile(&format!("input w: f32[o, i] @ bsr(32, 32)\n{body}"))?;
    let dense = Program::compile(&format!("input w: f32[o, i]\n{body}"))?;
    let ys = sparse.bind("w", &w).bind("x", &x).run()?;
    let yd = dense.bind("w", &w).bind("x", &x).run()?;
    let yr = sparse.bind("w", &w).bind("x", &x).run_reference()?;
    let (d_sparse, d_dense) = (max_diff(&ys["y"], &yr["y"])?, max_diff(&ys["y"], &yd["y"])?);
    let t_sparse = median_ms(9, || {
        sparse.bind("w", &w).bind("x", &x).run()?;
        Ok(())
    })?;
    let t_dense = median_ms(9, || {
        dense.bind("w", &w).bind("x", &x).run()?;
        Ok(())
    })?;
    println!("block-sparse W[{OUT}, {IN}] (bsr 32×32, 1/4 of the blocks) · x[{IN}, {BATCH}]");
    println!("  max |jit - reference| = {d_sparse:.2e}, max |sparse - dense| = {d_dense:.2e}");
    println!(
        "  per run (binding, compression and product): sparse {t_sparse:.2} ms, dense {t_dense:.2} ms"
    );

    // A 2:4 linear layer: the script prunes the dense weight itself.
    let linear = Program::compile(
        "input x: f32[batch, in]\n\
         input w: f32[out, in]\n\
         w24 = sparsify(w, \"2:4\")\n\
         y = einsum(x, w24, \"batch in, out in -> batch out\")\n\
         output y",
    )?;
    let xt = Tensor::from_vec(
        x.as_slice::<f32>().ok_or("not f32")?[..4 * IN].to_vec(),
        &[4, IN],
    )?;
    let y24 = linear.bind("x", &xt).bind("w", &w).run()?;
    let y24r = linear.bind("x", &xt).bind("w", &w).run_reference()?;
    let d24 = max_diff(&y24["y"], &y24r["y"])?;
    println!("2:4 linear layer x[4, {IN}] · w24[{OUT}, {IN}]ᵀ: max |jit - reference| = {d24:.2e}");
    if d_sparse > 1e-4 || d_dense > 1e-4 || d24 > 1e-4 {
        return Err("sparse results do not match".into());
    }
    Ok(())
}
