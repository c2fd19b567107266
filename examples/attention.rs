//! An attention block from Rust, two ways: the whole block as one `tdsl::program!` whose batch
//! and sequence extents come from the data, and the same block step by step with `einsum!`,
//! `rearrange!` and a small softmax program. Both run on the CPU JIT; the second run of each
//! reuses its cached kernels.
//!
//! Run with `cargo run --example attention`.

use std::time::Instant;
use tdsl::{Program, Tensor};

type Result<T = (), E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

const HEADS: usize = 4;
const D: usize = 16;
const MODEL: usize = HEADS * D;

/// Normal values from tdsl's own generator (the stream `randn(seed=S)` uses), scaled.
fn randn(shape: &[usize], seed: u64, scale: f32) -> Result<Tensor> {
    let mut rng = tdsl::init::SplitMix64::new(seed);
    let n = shape.iter().product();
    let values = (0..n).map(|_| rng.next_normal() as f32 * scale).collect();
    Ok(Tensor::from_vec(values, shape)?)
}

/// The block as one script; `batch` and `seq` are bound from `x` at run time.
fn whole_block() -> Program {
    tdsl::program!(
        r#"
        let heads = 4
        let d = 16
        input x: f32[batch, seq, model]
        input wq: f32[model, model]
        input wk: f32[model, model]
        input wv: f32[model, model]

        q = rearrange(einsum(x, wq, "b s m, m o -> b s o"), "b s (h d) -> b h s d", h=heads)
        k = rearrange(einsum(x, wk, "b s m, m o -> b s o"), "b s (h d) -> b h s d", h=heads)
        v = rearrange(einsum(x, wv, "b s m, m o -> b s o"), "b s (h d) -> b h s d", h=heads)
        scores = einsum(q, k, "b h i d, b h j d -> b h i j") / sqrt(d)
        m = reduce(scores, "b h i j -> b h i 1", "max")
        e = exp(scores - m)
        p = e / reduce(e, "b h i j -> b h i 1", "sum")
        out = rearrange(einsum(p, v, "b h i j, b h j d -> b h i d"), "b h s d -> b s (h d)")
        output out
        "#
    )
}

/// The same block with the pattern macros; the softmax is a small program.
fn step_by_step(x: &Tensor, wq: &Tensor, wk: &Tensor, wv: &Tensor) -> Result<Tensor> {
    let heads = |w: &Tensor| -> Result<Tensor> {
        let projected = tdsl::einsum!("b s m, m o -> b s o", x, w)?;
        Ok(tdsl::rearrange!(
            projected,
            "b s (h d) -> b h s d",
            h = HEADS
        )?)
    };
    let (q, k, v) = (heads(wq)?, heads(wk)?, heads(wv)?);
    let mut scores = tdsl::einsum!("b h i d, b h j d -> b h i j", q, k)?;
    // Tensors are plain row-major memory: scale the scores in place.
    let scale = 1.0 / (D as f32).sqrt();
    for s in scores.as_mut_slice::<f32>().into_iter().flatten() {
        *s *= scale;
    }
    let softmax = tdsl::program!(
        r#"
        input s: f32[b, h, i, j]
        m = reduce(s, "b h i j -> b h i 1", "max")
        e = exp(s - m)
        p = e / reduce(e, "b h i j -> b h i 1", "sum")
        output p
        "#
    );
    let p = softmax
        .run([("s", scores)])?
        .remove("p")
        .ok_or("no output p")?;
    let attended = tdsl::einsum!("b h i j, b h j d -> b h i d", p, v)?;
    Ok(tdsl::rearrange!(attended, "b h s d -> b s (h d)")?)
}

fn main() -> Result {
    let (batch, seq) = (2, 32);
    let x = randn(&[batch, seq, MODEL], 0, 1.0)?;
    let w = 1.0 / (MODEL as f32).sqrt();
    let (wq, wk, wv) = (
        randn(&[MODEL, MODEL], 1, w)?,
        randn(&[MODEL, MODEL], 2, w)?,
        randn(&[MODEL, MODEL], 3, w)?,
    );

    let block = whole_block();
    let mut times = Vec::new();
    let mut out = None;
    for _ in 0..2 {
        let t0 = Instant::now();
        let o = block.run([("x", &x), ("wq", &wq), ("wk", &wk), ("wv", &wv)])?;
        times.push(t0.elapsed());
        out = Some(o);
    }
    let out = out.ok_or("no run")?;
    let ty = out.ty("out").ok_or("no output out")?;
    let whole = &out["out"];
    println!("attention block: out {ty}");
    println!(
        "  program!: first run {:.1} ms (check, plan, JIT), second {:.2} ms (cached)",
        times[0].as_secs_f64() * 1e3,
        times[1].as_secs_f64() * 1e3
    );

    let t0 = Instant::now();
    let stepped = step_by_step(&x, &wq, &wk, &wv)?;
    let first = t0.elapsed();
    let t0 = Instant::now();
    step_by_step(&x, &wq, &wk, &wv)?;
    let second = t0.elapsed();
    println!(
        "  macros:   first run {:.1} ms, second {:.2} ms (cached per call site)",
        first.as_secs_f64() * 1e3,
        second.as_secs_f64() * 1e3
    );

    let a = whole.as_slice::<f32>().ok_or("out is not f32")?;
    let b = stepped.as_slice::<f32>().ok_or("stepped is not f32")?;
    let max_diff = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    println!("  first values {:?}", &a[..4]);
    println!("  max |program! - macros| = {max_diff:.2e}");
    if max_diff > 1e-4 {
        return Err("the two attention blocks disagree".into());
    }
    Ok(())
}
