//! Host buffers for running a [`LoopProgram`](crate::LoopProgram): one typed vector per buffer.
//! The evaluator and every CPU backend read and write these.

use crate::ir::ElemType;
use half::{bf16, f16};

/// The elements of one buffer.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    F32(Vec<f32>),
    F64(Vec<f64>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I32(Vec<i32>),
}

impl Data {
    /// `n` zeros of type `ty`.
    pub fn zeros(ty: ElemType, n: usize) -> Data {
        match ty {
            ElemType::F32 => Data::F32(vec![0.0; n]),
            ElemType::F64 => Data::F64(vec![0.0; n]),
            ElemType::F16 => Data::F16(vec![f16::ZERO; n]),
            ElemType::BF16 => Data::BF16(vec![bf16::ZERO; n]),
            ElemType::I32 => Data::I32(vec![0; n]),
        }
    }

    pub fn ty(&self) -> ElemType {
        match self {
            Data::F32(_) => ElemType::F32,
            Data::F64(_) => ElemType::F64,
            Data::F16(_) => ElemType::F16,
            Data::BF16(_) => ElemType::BF16,
            Data::I32(_) => ElemType::I32,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Data::F32(v) => v.len(),
            Data::F64(v) => v.len(),
            Data::F16(v) => v.len(),
            Data::BF16(v) => v.len(),
            Data::I32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` widened to f64.
    pub fn get(&self, i: usize) -> f64 {
        match self {
            Data::F32(v) => v[i] as f64,
            Data::F64(v) => v[i],
            Data::F16(v) => v[i].to_f64(),
            Data::BF16(v) => v[i].to_f64(),
            Data::I32(v) => v[i] as f64,
        }
    }

    /// Stores `x` at `i`, rounded to nearest even for the buffer's type.
    pub fn set(&mut self, i: usize, x: f64) {
        match self {
            Data::F32(v) => v[i] = x as f32,
            Data::F64(v) => v[i] = x,
            Data::F16(v) => v[i] = f16::from_f64(x),
            Data::BF16(v) => v[i] = bf16::from_f64(x),
            Data::I32(v) => v[i] = x as i32,
        }
    }

    /// Every element widened to f64.
    pub fn to_f64(&self) -> Vec<f64> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }
}
