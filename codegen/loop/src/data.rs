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
    /// `n` zeros of type `ty`, or `None` when the memory cannot be reserved (no abort).
    pub fn try_zeros(ty: ElemType, n: usize) -> Option<Data> {
        fn z<T: Clone + Default>(n: usize) -> Option<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(n).ok()?;
            v.resize(n, T::default());
            Some(v)
        }
        Some(match ty {
            ElemType::F32 => Data::F32(z(n)?),
            ElemType::F64 => Data::F64(z(n)?),
            ElemType::F16 => Data::F16(z(n)?),
            ElemType::BF16 => Data::BF16(z(n)?),
            ElemType::I32 => Data::I32(z(n)?),
        })
    }

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

    /// The elements' bytes as they lie in memory (host byte order; every host a CUDA device
    /// runs with is little-endian, as is the device): a device copy reads them in place.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Data::F32(v) => bytemuck::cast_slice(v),
            Data::F64(v) => bytemuck::cast_slice(v),
            Data::F16(v) => bytemuck::cast_slice(v),
            Data::BF16(v) => bytemuck::cast_slice(v),
            Data::I32(v) => bytemuck::cast_slice(v),
        }
    }

    /// The elements' bytes, writable in place (see [`Data::as_bytes`]).
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Data::F32(v) => bytemuck::cast_slice_mut(v),
            Data::F64(v) => bytemuck::cast_slice_mut(v),
            Data::F16(v) => bytemuck::cast_slice_mut(v),
            Data::BF16(v) => bytemuck::cast_slice_mut(v),
            Data::I32(v) => bytemuck::cast_slice_mut(v),
        }
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
            Data::F16(v) => v[i] = tdsl_sparse::dtype::f64_to_f16(x),
            Data::BF16(v) => v[i] = tdsl_sparse::dtype::f64_to_bf16(x),
            Data::I32(v) => v[i] = x as i32,
        }
    }

    /// Every element widened to f64.
    pub fn to_f64(&self) -> Vec<f64> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }
}

impl Data {
    /// The elements as sparse values (`None` for `I32`).
    pub fn as_values(&self) -> Option<tdsl_sparse::ValuesRef<'_>> {
        use tdsl_sparse::ValuesRef as V;
        Some(match self {
            Data::F32(v) => V::F32(v),
            Data::F64(v) => V::F64(v),
            Data::F16(v) => V::F16(v),
            Data::BF16(v) => V::BF16(v),
            Data::I32(_) => return None,
        })
    }

    /// The elements as little-endian bytes (f16 and bf16 as their bit patterns): what a device
    /// buffer or a file of raw elements holds.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            Data::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::F16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
            Data::BF16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
            Data::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// Elements of type `ty` from little-endian bytes ([`Data::to_le_bytes`]); a trailing
    /// partial element is ignored.
    pub fn from_le_bytes(ty: ElemType, bytes: &[u8]) -> Data {
        fn each<const N: usize, T>(b: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
            b.chunks_exact(N)
                .map(|c| f(c.try_into().unwrap_or([0; N])))
                .collect()
        }
        match ty {
            ElemType::F32 => Data::F32(each(bytes, f32::from_le_bytes)),
            ElemType::F64 => Data::F64(each(bytes, f64::from_le_bytes)),
            ElemType::F16 => Data::F16(each(bytes, |c| f16::from_bits(u16::from_le_bytes(c)))),
            ElemType::BF16 => Data::BF16(each(bytes, |c| bf16::from_bits(u16::from_le_bytes(c)))),
            ElemType::I32 => Data::I32(each(bytes, i32::from_le_bytes)),
        }
    }

    fn as_i32(&self) -> Option<&[i32]> {
        match self {
            Data::I32(v) => Some(v),
            _ => None,
        }
    }
}

impl From<tdsl_sparse::Values> for Data {
    fn from(v: tdsl_sparse::Values) -> Data {
        match v {
            tdsl_sparse::Values::F32(v) => Data::F32(v),
            tdsl_sparse::Values::F64(v) => Data::F64(v),
            tdsl_sparse::Values::F16(v) => Data::F16(v),
            tdsl_sparse::Values::BF16(v) => Data::BF16(v),
        }
    }
}

/// A sparse operand's buffers as a borrowed sparse tensor of `shape` (the operand's shape as
/// `usize`, owned by the caller). Checks types, not contents (see `tdsl_sparse::validate`).
pub fn sparse_ref<'a>(
    s: &crate::ir::SparseOperand,
    bufs: &'a [Data],
    shape: &'a [usize],
) -> Result<tdsl_sparse::SparseRef<'a>, String> {
    let get = |b: crate::ir::BufId| {
        bufs.get(b.0 as usize)
            .ok_or_else(|| format!("sparse operand buffer %{} does not exist", b.0))
    };
    let ints = |b: crate::ir::BufId| -> Result<&'a [i32], String> {
        get(b)?
            .as_i32()
            .ok_or_else(|| format!("sparse index buffer %{} is not i32", b.0))
    };
    Ok(tdsl_sparse::SparseRef {
        shape,
        layout: s.layout,
        ptr: match s.ptr {
            Some(p) => ints(p)?,
            None => &[],
        },
        idx: ints(s.idx)?,
        values: get(s.values)?
            .as_values()
            .ok_or_else(|| format!("sparse values buffer %{} is i32", s.values.0))?,
    })
}

/// `sparsify` on host buffers: prunes the dense row-major `src` into `out`'s buffers
/// (`tdsl_sparse::prune::sparsify`, then [`store_sparse`]). Every backend runs it this way.
pub fn sparsify_into(
    src: crate::ir::BufId,
    out: &crate::ir::SparseOperand,
    select: crate::ir::Select,
    bufs: &mut [Data],
) -> Result<(), String> {
    let shape: Vec<usize> = out.shape.iter().map(|&e| e as usize).collect();
    let src = bufs
        .get(src.0 as usize)
        .and_then(Data::as_values)
        .ok_or("sparsify source is not a float buffer")?;
    let t =
        tdsl_sparse::prune::sparsify(src, &shape, out.layout, select).map_err(|e| e.to_string())?;
    store_sparse(&t, out, bufs)
}

/// Writes `t` into the (capacity-sized) buffers of `s`: arrays are copied from the start and
/// the rest of each buffer is zeroed.
pub fn store_sparse(
    t: &tdsl_sparse::SparseTensor,
    s: &crate::ir::SparseOperand,
    bufs: &mut [Data],
) -> Result<(), String> {
    let mut put = |b: crate::ir::BufId, src: Data, what: &str| -> Result<(), String> {
        let dst = bufs
            .get_mut(b.0 as usize)
            .ok_or_else(|| format!("sparse {what} buffer %{} does not exist", b.0))?;
        if dst.ty() != src.ty() || dst.len() < src.len() {
            return Err(format!(
                "sparse {what} needs {} {} elements, but %{} holds {} {}",
                src.len(),
                src.ty(),
                b.0,
                dst.len(),
                dst.ty()
            ));
        }
        let mut full = Data::zeros(dst.ty(), dst.len());
        copy_prefix(&mut full, src);
        *dst = full;
        Ok(())
    };
    if let Some(p) = s.ptr {
        put(p, Data::I32(t.ptr.clone()), "ptr")?;
    }
    put(s.idx, Data::I32(t.idx.clone()), "idx")?;
    put(s.values, Data::from(t.values.clone()), "values")
}

fn copy_prefix(dst: &mut Data, src: Data) {
    match (dst, src) {
        (Data::F32(d), Data::F32(s)) => d[..s.len()].copy_from_slice(&s),
        (Data::F64(d), Data::F64(s)) => d[..s.len()].copy_from_slice(&s),
        (Data::F16(d), Data::F16(s)) => d[..s.len()].copy_from_slice(&s),
        (Data::BF16(d), Data::BF16(s)) => d[..s.len()].copy_from_slice(&s),
        (Data::I32(d), Data::I32(s)) => d[..s.len()].copy_from_slice(&s),
        _ => {}
    }
}
