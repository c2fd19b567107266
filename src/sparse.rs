//! The bridge between formats in the checked program (`check::Format`) and sparse storage
//! (`tdsl_sparse`): which layout stores a format, and compressing dense data into it.

use crate::check::Format;
use crate::tensor::{Storage, Tensor};
use tdsl_sparse::{prune, Layout, SparseError, SparseTensor, Values, ValuesRef};

/// The storage layout of a format on a tensor of rank `rank`; `None` for dense.
pub fn layout(f: Format, rank: usize) -> Option<Layout> {
    let _ = rank;
    Some(match f {
        Format::Dense => return None,
        Format::Coo => Layout::Coo,
        Format::Csr => Layout::Csr,
        Format::Csc => Layout::Csc,
        Format::Bsr { rows, cols } => Layout::Bsr {
            br: rows as usize,
            bc: cols as usize,
        },
        Format::TwoFour { slot } => Layout::TwoFour { axis: slot },
    })
}

/// The values of a dense tensor, borrowed.
pub fn values_ref(t: &Tensor) -> ValuesRef<'_> {
    match &t.data {
        Storage::F32(v) => ValuesRef::F32(v),
        Storage::F64(v) => ValuesRef::F64(v),
        Storage::F16(v) => ValuesRef::F16(v),
        Storage::BF16(v) => ValuesRef::BF16(v),
    }
}

/// Compresses dense data into `layout`, keeping every nonzero (every block with a nonzero;
/// for 2:4, data already validated to hold at most 2 nonzeros per group).
pub fn compress(t: &Tensor, layout: Layout) -> Result<SparseTensor, SparseError> {
    prune::sparsify(values_ref(t), &t.shape, layout, prune::Select::All)
}

/// The dense tensor a sparse one stands for.
pub fn decompress(s: &SparseTensor) -> Result<Tensor, SparseError> {
    let data = match prune::to_dense(s.as_ref())? {
        Values::F32(v) => Storage::F32(v),
        Values::F64(v) => Storage::F64(v),
        Values::F16(v) => Storage::F16(v),
        Values::BF16(v) => Storage::BF16(v),
    };
    Ok(Tensor::new(s.shape.clone(), data))
}

/// The dtype of stored sparse values.
pub fn values_dtype(v: &Values) -> crate::dtype::DType {
    v.dtype()
}
