//! Scalar runtime helpers that generated code calls: transcendentals (exp, log, tanh, sin, cos,
//! pow, sigmoid, gelu) in f32 and f64, exact f64 → f16/bf16 rounding, and the `fma`/`fmaf`
//! libcalls Cranelift emits on hosts without FMA.
//!
//! Every helper is a plain `extern "C"` function registered with the JIT under a fixed name
//! ([`symbols`]); [`unary_helper`] and [`POW`] say which name an operation calls. The f32
//! versions evaluate the f64 function and round once, as the loop-IR evaluator does
//! (spec/loop-ir.md §2), so the two agree to the last bit almost always.

use tdsl_loop::{BinOp, UnOp};

/// The helper name for a unary operation that has no native instruction, in f32 (`wide =
/// false`) or f64.
pub(crate) fn unary_helper(op: UnOp, wide: bool) -> Option<&'static str> {
    let (narrow, w) = match op {
        UnOp::Exp => ("tdsl_exp_f32", "tdsl_exp_f64"),
        UnOp::Log => ("tdsl_log_f32", "tdsl_log_f64"),
        UnOp::Tanh => ("tdsl_tanh_f32", "tdsl_tanh_f64"),
        UnOp::Sigmoid => ("tdsl_sigmoid_f32", "tdsl_sigmoid_f64"),
        UnOp::Gelu => ("tdsl_gelu_f32", "tdsl_gelu_f64"),
        UnOp::Sin => ("tdsl_sin_f32", "tdsl_sin_f64"),
        UnOp::Cos => ("tdsl_cos_f32", "tdsl_cos_f64"),
        UnOp::Erf => ("tdsl_erf_f32", "tdsl_erf_f64"),
        UnOp::GeluErf => ("tdsl_gelu_erf_f32", "tdsl_gelu_erf_f64"),
        UnOp::Silu => ("tdsl_silu_f32", "tdsl_silu_f64"),
        UnOp::Softplus => ("tdsl_softplus_f32", "tdsl_softplus_f64"),
        UnOp::Log1p => ("tdsl_log1p_f32", "tdsl_log1p_f64"),
        UnOp::Expm1 => ("tdsl_expm1_f32", "tdsl_expm1_f64"),
        UnOp::Sign => ("tdsl_sign_f32", "tdsl_sign_f64"),
        UnOp::Neg
        | UnOp::Sqrt
        | UnOp::Rsqrt
        | UnOp::Abs
        | UnOp::Relu
        | UnOp::Square
        | UnOp::Floor
        | UnOp::Ceil
        | UnOp::Round => return None,
    };
    Some(if wide { w } else { narrow })
}

/// The helper names for `pow` in f32 and f64.
pub(crate) const POW: (&str, &str) = ("tdsl_pow_f32", "tdsl_pow_f64");
/// f64 → f16 bits (in the low 16 bits of an i32), rounded to nearest even.
pub(crate) const F64_TO_F16: &str = "tdsl_f64_to_f16";
/// f64 → bf16 bits, rounded once to nearest even (`tdsl_sparse::dtype::f64_to_bf16`).
pub(crate) const F64_TO_BF16: &str = "tdsl_f64_to_bf16";

/// The operations defined once in `tdsl_loop::scalar`: f64 math, rounded once for f32.
macro_rules! shared_unary {
    ($($op:ident => $f32:ident, $f64:ident;)*) => {
        $(
            extern "C" fn $f32(x: f32) -> f32 {
                tdsl_loop::scalar::unary(UnOp::$op, x as f64) as f32
            }
            extern "C" fn $f64(x: f64) -> f64 {
                tdsl_loop::scalar::unary(UnOp::$op, x)
            }
        )*
    };
}

shared_unary! {
    Exp => exp_f32, exp_f64;
    Log => log_f32, log_f64;
    Tanh => tanh_f32, tanh_f64;
    Sin => sin_f32, sin_f64;
    Cos => cos_f32, cos_f64;
    Sigmoid => sigmoid_f32, sigmoid_f64;
    Gelu => gelu_f32, gelu_f64;
    Erf => erf_f32, erf_f64;
    GeluErf => gelu_erf_f32, gelu_erf_f64;
    Silu => silu_f32, silu_f64;
    Softplus => softplus_f32, softplus_f64;
    Log1p => log1p_f32, log1p_f64;
    Expm1 => expm1_f32, expm1_f64;
    Sign => sign_f32, sign_f64;
}

extern "C" fn pow_f32(x: f32, y: f32) -> f32 {
    tdsl_loop::scalar::binary(BinOp::Pow, x as f64, y as f64) as f32
}
extern "C" fn pow_f64(x: f64, y: f64) -> f64 {
    tdsl_loop::scalar::binary(BinOp::Pow, x, y)
}

extern "C" fn f64_to_f16(x: f64) -> i32 {
    tdsl_sparse::dtype::f64_to_f16(x).to_bits() as i32
}
extern "C" fn f64_to_bf16(x: f64) -> i32 {
    tdsl_sparse::dtype::f64_to_bf16(x).to_bits() as i32
}
extern "C" fn fmaf(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}
extern "C" fn fma(a: f64, b: f64, c: f64) -> f64 {
    a.mul_add(b, c)
}

/// Every helper with the name generated code imports it under.
pub(crate) fn symbols() -> Vec<(&'static str, *const u8)> {
    vec![
        ("tdsl_exp_f32", exp_f32 as *const u8),
        ("tdsl_exp_f64", exp_f64 as *const u8),
        ("tdsl_log_f32", log_f32 as *const u8),
        ("tdsl_log_f64", log_f64 as *const u8),
        ("tdsl_tanh_f32", tanh_f32 as *const u8),
        ("tdsl_tanh_f64", tanh_f64 as *const u8),
        ("tdsl_sin_f32", sin_f32 as *const u8),
        ("tdsl_sin_f64", sin_f64 as *const u8),
        ("tdsl_cos_f32", cos_f32 as *const u8),
        ("tdsl_cos_f64", cos_f64 as *const u8),
        ("tdsl_pow_f32", pow_f32 as *const u8),
        ("tdsl_pow_f64", pow_f64 as *const u8),
        ("tdsl_sigmoid_f32", sigmoid_f32 as *const u8),
        ("tdsl_sigmoid_f64", sigmoid_f64 as *const u8),
        ("tdsl_gelu_f32", gelu_f32 as *const u8),
        ("tdsl_gelu_f64", gelu_f64 as *const u8),
        ("tdsl_erf_f32", erf_f32 as *const u8),
        ("tdsl_erf_f64", erf_f64 as *const u8),
        ("tdsl_gelu_erf_f32", gelu_erf_f32 as *const u8),
        ("tdsl_gelu_erf_f64", gelu_erf_f64 as *const u8),
        ("tdsl_silu_f32", silu_f32 as *const u8),
        ("tdsl_silu_f64", silu_f64 as *const u8),
        ("tdsl_softplus_f32", softplus_f32 as *const u8),
        ("tdsl_softplus_f64", softplus_f64 as *const u8),
        ("tdsl_log1p_f32", log1p_f32 as *const u8),
        ("tdsl_log1p_f64", log1p_f64 as *const u8),
        ("tdsl_expm1_f32", expm1_f32 as *const u8),
        ("tdsl_expm1_f64", expm1_f64 as *const u8),
        ("tdsl_sign_f32", sign_f32 as *const u8),
        ("tdsl_sign_f64", sign_f64 as *const u8),
        (F64_TO_F16, f64_to_f16 as *const u8),
        (F64_TO_BF16, f64_to_bf16 as *const u8),
        // Cranelift's own libcalls for `fma` when the host lacks FMA (TOOLCHAIN.md §1e).
        ("fmaf", fmaf as *const u8),
        ("fma", fma as *const u8),
    ]
}
