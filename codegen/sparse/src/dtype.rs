//! The one element type of the workspace: f32, f64, f16 and bf16, and how they combine. The
//! checker types values with it, the storage crate stores them, and the loop IR's buffer
//! types (`tdsl_loop::ElemType`, which adds `i32` for indices) are built from it.

use std::fmt;

/// An element type. f16 and bf16 are storage types: arithmetic on them runs in f32 (the
/// reference interpreter uses f64) and rounds back to the storage type at every result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F16,
    BF16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    pub fn parse(s: &str) -> Option<DType> {
        match s {
            "f32" => Some(DType::F32),
            "f64" => Some(DType::F64),
            "f16" => Some(DType::F16),
            "bf16" => Some(DType::BF16),
            _ => None,
        }
    }

    /// Bytes per element.
    pub fn size_bytes(self) -> u64 {
        match self {
            DType::F16 | DType::BF16 => 2,
            DType::F32 => 4,
            DType::F64 => 8,
        }
    }

    /// The dtype of a binary elementwise result: the wider operand wins; f16 with bf16 gives
    /// f32, because neither can hold the other's values.
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        match (a, b) {
            (x, y) if x == y => x,
            (F64, _) | (_, F64) => F64,
            _ => F32,
        }
    }

    /// The type arithmetic on values of this dtype runs in: f64 for f64, f32 for everything
    /// else (f16 and bf16 are storage types).
    pub fn compute(self) -> DType {
        match self {
            DType::F64 => DType::F64,
            _ => DType::F32,
        }
    }

    /// Rounds an f64 to the nearest value representable in this dtype (round to nearest even),
    /// returned as f64. Every value the interpreter stores has passed through this.
    pub fn round(self, v: f64) -> f64 {
        match self {
            DType::F64 => v,
            DType::F32 => v as f32 as f64,
            DType::F16 => f64_to_f16(v).to_f64(),
            DType::BF16 => f64_to_bf16(v).to_f64(),
        }
    }
}

/// `v` rounded to nearest even in f16. (`half::f16::from_f64` drops the low 32 bits of `v`'s
/// mantissa before it rounds, so it rounds a value just past a tie, such as 1 + 2⁻¹¹ + 2⁻⁴⁰,
/// as the tie: to even, the wrong way, for about one f64 in 16,000.)
pub fn f64_to_f16(v: f64) -> half::f16 {
    half::f16::from_f32(f32_odd(v))
}

/// `v` rounded to nearest even in bf16 (see [`f64_to_f16`] for why not `half`'s).
pub fn f64_to_bf16(v: f64) -> half::bf16 {
    half::bf16::from_f32(f32_odd(v))
}

/// `v` rounded to f32 to odd: toward zero, with the last bit set when that is inexact. An f32
/// keeps 24 bits, at least two more than f16 and bf16 (11 and 8), so rounding this to either
/// to nearest even rounds `v` once: no double rounding (Boldo and Melquiond, 2008). Beyond
/// f32's range it is `±f32::MAX` with the bit set, past both formats' overflow thresholds;
/// below its smallest subnormal it is that subnormal, below half of both formats' smallest.
fn f32_odd(v: f64) -> f32 {
    let r = v as f32;
    if r.is_nan() || r as f64 == v {
        return r;
    }
    // `r` is `v` to nearest: one step back toward zero when that was away from zero.
    let t = if (r as f64).abs() > v.abs() {
        f32::from_bits(r.to_bits() - 1)
    } else {
        r
    };
    f32::from_bits(t.to_bits() | 1)
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nearest of `v`'s neighbours in a 16-bit format, ties to the even one: the candidates
    /// around `guess` compared exactly (differences of f64s within a factor 2 of each other are
    /// exact, and every 16-bit value is an f64); infinity from `overflow` (the largest finite
    /// value plus half its step) up.
    fn nearest(v: f64, guess: u16, to_f64: impl Fn(u16) -> f64, max_finite: u16) -> u16 {
        let mag = guess & 0x7fff;
        let sign = guess & 0x8000;
        let top = to_f64(max_finite);
        let overflow = top + (top - to_f64(max_finite - 1)) / 2.0;
        if v.abs() >= overflow {
            return sign | (max_finite + 1);
        }
        let mut best: Option<(f64, u16)> = None;
        for m in mag.saturating_sub(1)..=(mag + 1).min(max_finite) {
            let b = sign | m;
            let d = (to_f64(b) - v).abs();
            let better = match best {
                None => true,
                Some((bd, bb)) => d < bd || d == bd && b & 1 == 0 && bb & 1 == 1,
            };
            if better {
                best = Some((d, b));
            }
        }
        best.map_or(guess, |(_, b)| b)
    }

    #[test]
    fn f64_to_half_rounds_once_to_nearest_even() {
        use half::{bf16, f16};
        // Just past a tie by less than f32 can hold: half's `from_f64` rounds these down.
        assert_eq!(
            f64_to_f16(1.0 + 2f64.powi(-11) + 2f64.powi(-40)).to_bits(),
            0x3c01
        );
        assert_eq!(
            f64_to_bf16(1.0 + 2f64.powi(-8) + 2f64.powi(-40)).to_bits(),
            0x3f81
        );
        assert_eq!(f64_to_f16(1.0 + 2f64.powi(-11)).to_bits(), 0x3c00);
        assert_eq!(f64_to_bf16(-(1.0 + 3.0 * 2f64.powi(-8))).to_bits(), 0xbf82);
        // Overflow, underflow, specials.
        assert_eq!(f64_to_f16(65519.99).to_bits(), 0x7bff);
        assert_eq!(f64_to_f16(65520.0).to_bits(), 0x7c00);
        assert_eq!(f64_to_bf16(1e300).to_bits(), 0x7f80);
        assert_eq!(f64_to_bf16(-1e300).to_bits(), 0xff80);
        assert_eq!(f64_to_bf16(3.4e38).to_bits(), 0x7f80);
        assert_eq!(f64_to_f16(2f64.powi(-25)).to_bits(), 0);
        assert_eq!(f64_to_f16(2f64.powi(-25) + 2f64.powi(-60)).to_bits(), 1);
        assert_eq!(f64_to_bf16(1e-300).to_bits(), 0);
        assert_eq!(f64_to_bf16(-1e-300).to_bits(), 0x8000);
        assert!(f64_to_f16(f64::NAN).is_nan() && f64_to_bf16(f64::NAN).is_nan());
        // Random f64 across both formats' ranges, subnormals included.
        let mut st = 7u64;
        for i in 0..400_000 {
            st = st
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let exp = if i % 2 == 0 {
                1023 - 28 + (st >> 58) % 46
            } else {
                1023 - 140 + (st >> 56) % 270
            };
            let v = f64::from_bits(
                (st & 0x8000_0000_0000_0000) | exp << 52 | (st >> 12 & 0xf_ffff_ffff_ffff),
            );
            let h = f64_to_f16(v).to_bits();
            assert_eq!(
                h,
                nearest(v, h, |b| f16::from_bits(b).to_f64(), 0x7bff),
                "f16 of {v:e}"
            );
            let b = f64_to_bf16(v).to_bits();
            assert_eq!(
                b,
                nearest(v, b, |b| bf16::from_bits(b).to_f64(), 0x7f7f),
                "bf16 of {v:e}"
            );
        }
    }

    #[test]
    fn promotion_is_symmetric_and_widening() {
        for a in DType::ALL {
            for b in DType::ALL {
                let p = DType::promote(a, b);
                assert_eq!(p, DType::promote(b, a));
                assert!(p.size_bytes() >= a.size_bytes().max(b.size_bytes()));
            }
        }
        assert_eq!(DType::promote(DType::F16, DType::BF16), DType::F32);
    }

    #[test]
    fn rounding_lands_on_representable_values() {
        assert_eq!(DType::F16.round(1.0 + 1e-4), 1.0);
        assert_eq!(DType::BF16.round(1.0 + 1e-3), 1.0);
        assert_eq!(DType::F32.round(0.1), 0.1f32 as f64);
        assert_eq!(DType::F64.round(0.1), 0.1);
    }
}
