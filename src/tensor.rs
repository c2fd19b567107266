//! Dense tensors in host memory: a shape and typed, C-contiguous storage.
//!
//! This is what files are read into, what initialisers produce and what `run` returns. Sparse
//! formats are a property of a tensor's *type* in the checked program; at run time the reference
//! interpreter works on their dense values.

use crate::dtype::DType;
use half::{bf16, f16};

/// Typed element storage.
#[derive(Debug, Clone, PartialEq)]
pub enum Storage {
    F32(Vec<f32>),
    F64(Vec<f64>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
}

/// A dense, C-contiguous (row-major) tensor. `shape` is empty for a scalar.
///
/// The fields are private so the one invariant (the element count equals the product of the
/// extents) always holds: build tensors with the checked constructors (`Tensor::from_vec`,
/// `Tensor::from_slice`, `Tensor::zeros`, …) and read them with [`Tensor::shape`] and
/// [`Tensor::storage`].
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub(crate) shape: Vec<usize>,
    pub(crate) data: Storage,
}

impl Storage {
    pub fn dtype(&self) -> DType {
        match self {
            Storage::F32(_) => DType::F32,
            Storage::F64(_) => DType::F64,
            Storage::F16(_) => DType::F16,
            Storage::BF16(_) => DType::BF16,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Storage::F32(v) => v.len(),
            Storage::F64(v) => v.len(),
            Storage::F16(v) => v.len(),
            Storage::BF16(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Tensor {
    /// Builds a tensor; panics if `shape` does not match the element count (a bug of the
    /// caller inside tdsl: public constructors check and return errors).
    pub(crate) fn new(shape: Vec<usize>, data: Storage) -> Tensor {
        let n: usize = shape.iter().product();
        assert_eq!(
            n,
            data.len(),
            "tensor shape {shape:?} does not match {} elements",
            data.len()
        );
        Tensor { shape, data }
    }

    /// Rounds each value to `dtype` (values are expected to be representable already when they
    /// come from the interpreter, so this is exact there).
    pub fn from_f64(dtype: DType, shape: Vec<usize>, values: &[f64]) -> Tensor {
        let data = match dtype {
            DType::F32 => Storage::F32(values.iter().map(|&v| v as f32).collect()),
            DType::F64 => Storage::F64(values.to_vec()),
            DType::F16 => Storage::F16(
                values
                    .iter()
                    .map(|&v| tdsl_sparse::dtype::f64_to_f16(v))
                    .collect(),
            ),
            DType::BF16 => Storage::BF16(
                values
                    .iter()
                    .map(|&v| tdsl_sparse::dtype::f64_to_bf16(v))
                    .collect(),
            ),
        };
        Tensor::new(shape, data)
    }

    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// The extents, outermost first (empty for a scalar).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The typed elements, row-major.
    pub fn storage(&self) -> &Storage {
        &self.data
    }

    /// The extents and the elements.
    pub fn into_parts(self) -> (Vec<usize>, Storage) {
        (self.shape, self.data)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Every value widened to f64 (exact for all four dtypes).
    pub fn to_f64(&self) -> Vec<f64> {
        match &self.data {
            Storage::F32(v) => v.iter().map(|&x| x as f64).collect(),
            Storage::F64(v) => v.clone(),
            Storage::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            Storage::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f64_round_trip_is_exact_for_representable_values() {
        for dtype in DType::ALL {
            let vals = [0.0, 1.0, -2.5, 0.125, 3.0];
            let t = Tensor::from_f64(dtype, vec![5], &vals);
            assert_eq!(t.dtype(), dtype);
            assert_eq!(t.to_f64(), vals);
        }
    }
}
