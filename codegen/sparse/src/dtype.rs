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
            DType::F16 => half::f16::from_f64(v).to_f64(),
            DType::BF16 => half::bf16::from_f64(v).to_f64(),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
