//! Initialisers: `randn(seed=S)`, `rand(seed=S)`, `zeros`, `ones`, `arange`, so a script runs
//! with no data files.
//!
//! The random streams are part of the language's contract (the same seed gives the same values on
//! every machine and in every version), so they are defined here rather than borrowed from a
//! crate whose streams may change: SplitMix64 for uniform bits, and the Box–Muller transform for
//! normal values. For sparse formats the initialiser produces data that satisfies the format:
//! 2:4 keeps the two largest magnitudes of every group of four, `density=` keeps that fraction of
//! values (COO, CSR, CSC) or of blocks (BSR), chosen from the same seed.

use crate::check::{Format, Init, InitKind, TensorType};
use crate::tensor::Tensor;

/// SplitMix64: a tiny, well-studied generator with a fixed, documented output stream.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal by Box–Muller (one value per call; the second is discarded so that
    /// value i depends only on the seed and i).
    pub fn next_normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64(); // in (0, 1]
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// The values of an initialiser for a tensor of type `ty`, rounded to its dtype.
pub fn generate(init: &Init, ty: &TensorType) -> Tensor {
    let shape: Vec<usize> = ty.shape.extents().iter().map(|&e| e as usize).collect();
    let n: usize = shape.iter().product();
    let seed = match init.kind {
        InitKind::Randn { seed } | InitKind::Rand { seed } => seed,
        _ => 0,
    };
    let mut rng = SplitMix64::new(seed);
    let mut values: Vec<f64> = match init.kind {
        InitKind::Randn { .. } => (0..n).map(|_| rng.next_normal()).collect(),
        InitKind::Rand { .. } => (0..n).map(|_| rng.next_f64()).collect(),
        InitKind::Zeros => vec![0.0; n],
        InitKind::Ones => vec![1.0; n],
        InitKind::Arange => (0..n).map(|i| i as f64).collect(),
    };
    // Sparsity uses its own stream so the kept values equal the dense values of the same seed.
    let mut mask_rng = SplitMix64::new(seed ^ 0x5EED_5EED_5EED_5EED);
    match ty.format {
        Format::Dense => {}
        Format::TwoFour { slot } => prune_two_four(&mut values, &shape, slot),
        Format::Bsr { rows, cols } => {
            if let Some(d) = init.density {
                let (r, c) = (shape[0], shape[1]);
                let (br, bc) = (rows as usize, cols as usize);
                let nb = (r / br) * (c / bc);
                let keep = ((d * nb as f64).round() as usize).min(nb);
                // Choose `keep` blocks uniformly: a partial Fisher–Yates shuffle of block ids.
                let mut ids: Vec<usize> = (0..nb).collect();
                for i in 0..keep {
                    let j = i + (mask_rng.next_u64() % (nb - i) as u64) as usize;
                    ids.swap(i, j);
                }
                let mut kept = vec![false; nb];
                for &b in &ids[..keep] {
                    kept[b] = true;
                }
                let nbc = c / bc;
                for i in 0..r {
                    for j in 0..c {
                        if !kept[(i / br) * nbc + j / bc] {
                            values[i * c + j] = 0.0;
                        }
                    }
                }
            }
        }
        Format::Coo | Format::Csr | Format::Csc => {
            if let Some(d) = init.density {
                for v in values.iter_mut() {
                    if mask_rng.next_f64() >= d {
                        *v = 0.0;
                    }
                }
            }
        }
    }
    Tensor::from_f64(ty.dtype, shape, &values)
}

/// Keeps the two largest magnitudes in every group of four along `slot` (ties keep the first).
pub fn prune_two_four(values: &mut [f64], shape: &[usize], slot: usize) {
    let inner: usize = shape[slot + 1..].iter().product();
    let ext = shape[slot];
    let outer: usize = shape[..slot].iter().product();
    for o in 0..outer {
        for g in 0..ext / 4 {
            for i in 0..inner {
                let idx = |k: usize| (o * ext + g * 4 + k) * inner + i;
                let mut order = [0usize, 1, 2, 3];
                order.sort_by(|&a, &b| {
                    values[idx(b)]
                        .abs()
                        .partial_cmp(&values[idx(a)].abs())
                        .unwrap_or(std::cmp::Ordering::Equal)
                        .then(a.cmp(&b))
                });
                for &k in &order[2..] {
                    values[idx(k)] = 0.0;
                }
            }
        }
    }
}

/// Checks the 2:4 property along `slot`: the first group (as flat indices of its four values)
/// holding more than two nonzeros, if any.
pub fn two_four_violation(values: &[f64], shape: &[usize], slot: usize) -> Option<Vec<usize>> {
    let inner: usize = shape[slot + 1..].iter().product();
    let ext = shape[slot];
    let outer: usize = shape[..slot].iter().product();
    for o in 0..outer {
        for g in 0..ext / 4 {
            for i in 0..inner {
                let idx: Vec<usize> = (0..4).map(|k| (o * ext + g * 4 + k) * inner + i).collect();
                if idx.iter().filter(|&&j| values[j] != 0.0).count() > 2 {
                    return Some(idx);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{Axis, Shape};
    use crate::dtype::DType;
    use tdsl_syntax::Span;

    fn ty(dtype: DType, ext: &[u64], format: Format) -> TensorType {
        TensorType {
            dtype,
            shape: Shape(ext.iter().map(|&e| Axis::anon(e)).collect()),
            format,
        }
    }

    fn init(kind: InitKind, density: Option<f64>) -> Init {
        Init {
            kind,
            density,
            span: Span::default(),
        }
    }

    #[test]
    fn the_stream_is_fixed() {
        // These values are part of the language contract: changing them changes every script.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        let t = generate(
            &init(InitKind::Randn { seed: 0 }, None),
            &ty(DType::F64, &[10000], Format::Dense),
        );
        let v = t.to_f64();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.05, "{mean}");
        assert!((var - 1.0).abs() < 0.05, "{var}");
    }

    #[test]
    fn sparse_initialisers_respect_their_format() {
        let t = generate(
            &init(InitKind::Randn { seed: 3 }, None),
            &ty(DType::F32, &[8, 16], Format::TwoFour { slot: 1 }),
        );
        assert!(two_four_violation(&t.to_f64(), &t.shape, 1).is_none());
        assert_eq!(t.to_f64().iter().filter(|v| **v != 0.0).count(), 8 * 8);

        let t = generate(
            &init(InitKind::Ones, Some(0.25)),
            &ty(DType::F32, &[8, 8], Format::Bsr { rows: 2, cols: 2 }),
        );
        assert_eq!(t.to_f64().iter().filter(|v| **v != 0.0).count(), 4 * 4);
    }
}
