// tdsl helpers shared by the device and the host prelude: bf16, rounding, and the elementwise
// operations of the loop IR (spec/loop-ir.md §2), overloaded for float and double.

TDSL_FN float tdsl_bf16_to_f32(unsigned short b) { return tdsl_bits_f32((unsigned int)b << 16); }
TDSL_FN unsigned short tdsl_f32_to_bf16(float f) {
  unsigned int u = tdsl_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return (unsigned short)(u >> 16);
}
TDSL_FN unsigned short tdsl_f64_to_bf16(double d) {
  // Round once from f64: narrow to f32 toward zero keeping a sticky bit, then to bf16.
  float f = (float)d;
  if ((double)f != d && !(d != d)) {
    unsigned int u = tdsl_f32_bits(f);
    if (fabs((double)f) > fabs(d)) u -= 1u;  // toward zero
    u |= 1u;                                 // sticky: not exactly representable
    f = tdsl_bits_f32(u);
  }
  return tdsl_f32_to_bf16(f);
}
// Casts inside expressions: round to the narrow type, widen back to the compute type.
TDSL_FN float tdsl_round_f16(float x) { return tdsl_f16_to_f32(tdsl_f32_to_f16(x)); }
TDSL_FN float tdsl_round_f16(double x) { return tdsl_f16_to_f32(tdsl_f64_to_f16(x)); }
TDSL_FN float tdsl_round_bf16(float x) { return tdsl_bf16_to_f32(tdsl_f32_to_bf16(x)); }
TDSL_FN float tdsl_round_bf16(double x) { return tdsl_bf16_to_f32(tdsl_f64_to_bf16(x)); }

#define TDSL_BOTH(NAME, F32EXPR, F64EXPR) \
  TDSL_FN float NAME(float x) { return F32EXPR; } \
  TDSL_FN double NAME(double x) { return F64EXPR; }
TDSL_BOTH(t_neg, -x, -x)
TDSL_BOTH(t_exp, expf(x), exp(x))
TDSL_BOTH(t_log, logf(x), log(x))
TDSL_BOTH(t_sqrt, sqrtf(x), sqrt(x))
TDSL_BOTH(t_rsqrt, 1.0f / sqrtf(x), 1.0 / sqrt(x))
TDSL_BOTH(t_abs, fabsf(x), fabs(x))
TDSL_BOTH(t_tanh, tanhf(x), tanh(x))
TDSL_BOTH(t_sigmoid, 1.0f / (1.0f + expf(-x)), 1.0 / (1.0 + exp(-x)))
TDSL_BOTH(t_relu, (x != x) ? x : (x > 0.0f ? x : 0.0f), (x != x) ? x : (x > 0.0 ? x : 0.0))
// gelu's tanh form as x / (1 + e^(-2u)), and the erf form as 0.5·x·erfc(-x/√2): the evaluator's
// well-conditioned forms (tdsl_loop::scalar), which keep the negative tail's tiny values.
TDSL_BOTH(t_gelu, x / (1.0f + expf(-2.0f * (0.7978845608028654f * (x + 0.044715f * x * x * x)))),
          x / (1.0 + exp(-2.0 * (0.7978845608028654 * (x + 0.044715 * x * x * x)))))
TDSL_BOTH(t_sin, sinf(x), sin(x))
TDSL_BOTH(t_cos, cosf(x), cos(x))
TDSL_BOTH(t_square, x * x, x * x)
TDSL_BOTH(t_erf, erff(x), erf(x))
TDSL_BOTH(t_gelu_erf, 0.5f * x * erfcf(-x * 0.70710678118654752f),
          0.5 * x * erfc(-x * 0.70710678118654752))
TDSL_BOTH(t_silu, x / (1.0f + expf(-x)), x / (1.0 + exp(-x)))
TDSL_BOTH(t_softplus, (x != x) ? x : fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))),
          (x != x) ? x : fmax(x, 0.0) + log1p(exp(-fabs(x))))
TDSL_BOTH(t_log1p, log1pf(x), log1p(x))
TDSL_BOTH(t_expm1, expm1f(x), expm1(x))
TDSL_BOTH(t_floor, floorf(x), floor(x))
TDSL_BOTH(t_ceil, ceilf(x), ceil(x))
TDSL_BOTH(t_round, tdsl_rint(x), tdsl_rint(x))
TDSL_BOTH(t_sign, x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x), x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x))
#undef TDSL_BOTH

#define TDSL_BOTH2(NAME, EXPR) \
  TDSL_FN float NAME(float a, float b) { return EXPR; } \
  TDSL_FN double NAME(double a, double b) { return EXPR; }
// NaN-propagating; max(-0, +0) = +0 and min(-0, +0) = -0.
TDSL_BOTH2(t_max, (a != a || b != b) ? a + b : ((a > b || (a == b && (1 / b < 0))) ? a : b))
TDSL_BOTH2(t_min, (a != a || b != b) ? a + b : ((a < b || (a == b && (1 / a < 0))) ? a : b))
TDSL_BOTH2(t_lt, a < b ? 1 : 0)
TDSL_BOTH2(t_le, a <= b ? 1 : 0)
TDSL_BOTH2(t_gt, a > b ? 1 : 0)
TDSL_BOTH2(t_ge, a >= b ? 1 : 0)
TDSL_BOTH2(t_eq, a == b ? 1 : 0)
TDSL_BOTH2(t_ne, a != b ? 1 : 0)
#undef TDSL_BOTH2
TDSL_FN float t_pow(float a, float b) { return powf(a, b); }
TDSL_FN double t_pow(double a, double b) { return pow(a, b); }
