//! The f64 math of every elementwise operation of the loop IR: one definition that the
//! evaluator and the CPU backend's helpers share (spec/loop-ir.md §2). Functions std lacks
//! (`erf`) or computes less accurately near zero (`log1p`, `expm1` are in std; `erf` is not) come
//! from the `libm` crate, a port of musl's libm.

use crate::ir::{BinOp, UnOp};

/// NaN-propagating maximum; `max(-0, +0)` is `+0`.
pub fn max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a > b || (a == b && b.is_sign_negative()) {
        a
    } else {
        b
    }
}

/// NaN-propagating minimum; `min(-0, +0)` is `-0`.
pub fn min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a < b || (a == b && a.is_sign_negative()) {
        a
    } else {
        b
    }
}

/// The exact gelu, `0.5·x·(1 + erf(x/√2))`, evaluated as `0.5·x·erfc(−x/√2)`: the same
/// function without the cancellation of `1 + erf` for negative x (there the result is tiny, not
/// zero).
pub fn gelu_erf(x: f64) -> f64 {
    0.5 * x * libm::erfc(-x / std::f64::consts::SQRT_2)
}

/// The tanh approximation of gelu, as GPT-2 and `jax.nn.gelu` define it:
/// `0.5·x·(1 + tanh(u))` with `u = √(2/π)·(x + 0.044715·x³)`, evaluated as the equal
/// `x / (1 + e^(−2u))`, which keeps full relative precision in the negative tail where
/// `1 + tanh(u)` cancels.
pub fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let u = c * (x + 0.044715 * x * x * x);
    x / (1.0 + (-2.0 * u).exp())
}

/// `log(1 + e^x)` without overflow: `max(x, 0) + log1p(e^(−|x|))`.
pub fn softplus(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

/// −1, 0 or 1 (±0 and NaN are returned as they are), as numpy's `sign`.
pub fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        x
    }
}

pub fn unary(op: UnOp, x: f64) -> f64 {
    match op {
        UnOp::Neg => -x,
        UnOp::Exp => x.exp(),
        UnOp::Log => x.ln(),
        UnOp::Sqrt => x.sqrt(),
        UnOp::Rsqrt => 1.0 / x.sqrt(),
        UnOp::Abs => x.abs(),
        UnOp::Tanh => x.tanh(),
        UnOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnOp::Relu => {
            if x.is_nan() {
                x
            } else {
                max(x, 0.0)
            }
        }
        UnOp::Gelu => gelu_tanh(x),
        UnOp::Sin => x.sin(),
        UnOp::Cos => x.cos(),
        UnOp::Square => x * x,
        UnOp::Erf => libm::erf(x),
        UnOp::GeluErf => gelu_erf(x),
        UnOp::Silu => x / (1.0 + (-x).exp()),
        UnOp::Softplus => softplus(x),
        UnOp::Log1p => x.ln_1p(),
        UnOp::Expm1 => x.exp_m1(),
        UnOp::Floor => x.floor(),
        UnOp::Ceil => x.ceil(),
        UnOp::Round => x.round_ties_even(),
        UnOp::Sign => sign(x),
    }
}

fn truth(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

pub fn binary(op: BinOp, a: f64, b: f64) -> f64 {
    match op {
        BinOp::Add => a + b,
        BinOp::Sub => a - b,
        BinOp::Mul => a * b,
        BinOp::Div => a / b,
        BinOp::Max => max(a, b),
        BinOp::Min => min(a, b),
        BinOp::Pow => a.powf(b),
        BinOp::Lt => truth(a < b),
        BinOp::Le => truth(a <= b),
        BinOp::Gt => truth(a > b),
        BinOp::Ge => truth(a >= b),
        BinOp::Eq => truth(a == b),
        BinOp::Ne => truth(a != b),
    }
}

/// `where`: `a` where `cond` is nonzero (NaN counts as nonzero, as numpy's `bool(nan)`).
pub fn select(cond: f64, a: f64, b: f64) -> f64 {
    if cond != 0.0 {
        a
    } else {
        b
    }
}
