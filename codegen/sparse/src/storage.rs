//! Sparse storage: one struct for every format, with the format's arrays.
//!
//! | layout   | `ptr`                      | `idx`                                   | `values`                    |
//! |----------|----------------------------|-----------------------------------------|-----------------------------|
//! | COO      | `[0, nnz]`                 | `nnz × rank` coordinates, entry-major,  | `nnz`                       |
//! |          |                            | sorted row-major, unique                |                             |
//! | CSR      | `rows + 1` offsets         | column of each entry, sorted per row    | `nnz`                       |
//! | CSC      | `cols + 1` offsets         | row of each entry, sorted per column    | `nnz`                       |
//! | BSR      | `rows/br + 1` offsets      | block column of each stored block,      | `nnzb × br × bc`, each      |
//! |          |                            | sorted per block row                    | block row-major (scipy)     |
//! | 2:4      | empty                      | metadata words (see [`Layout::TwoFour`])| `rows × ext/2`              |
//!
//! Capacity: a tensor produced by pruning with a threshold may have `idx`/`values` longer than
//! its stored entries; `ptr` (its last offset) is the truth and the tail is zero.

use crate::dtype::DType;
use crate::error::SparseError;
use half::{bf16, f16};

/// The values of a sparse tensor, in its dtype.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    F32(Vec<f32>),
    F64(Vec<f64>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
}

/// Borrowed values.
#[derive(Debug, Clone, Copy)]
pub enum ValuesRef<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
}

impl Values {
    pub fn len(&self) -> usize {
        self.as_ref().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn as_ref(&self) -> ValuesRef<'_> {
        match self {
            Values::F32(v) => ValuesRef::F32(v),
            Values::F64(v) => ValuesRef::F64(v),
            Values::F16(v) => ValuesRef::F16(v),
            Values::BF16(v) => ValuesRef::BF16(v),
        }
    }
}

impl ValuesRef<'_> {
    pub fn len(&self) -> usize {
        match self {
            ValuesRef::F32(v) => v.len(),
            ValuesRef::F64(v) => v.len(),
            ValuesRef::F16(v) => v.len(),
            ValuesRef::BF16(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Value `i` widened to f64 (exact).
    pub fn get(&self, i: usize) -> f64 {
        match self {
            ValuesRef::F32(v) => v[i] as f64,
            ValuesRef::F64(v) => v[i],
            ValuesRef::F16(v) => v[i].to_f64(),
            ValuesRef::BF16(v) => v[i].to_f64(),
        }
    }
}

/// How a sparse tensor is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Coordinate list, any rank ≥ 1.
    Coo,
    /// Compressed sparse rows (rank 2).
    Csr,
    /// Compressed sparse columns (rank 2).
    Csc,
    /// Block sparse rows (rank 2) with `br × bc` blocks; `br` divides the rows, `bc` the columns.
    Bsr { br: usize, bc: usize },
    /// 2:4 structured sparsity along `axis` (any rank ≥ 1; the axis extent is a multiple of 4).
    ///
    /// "Rows" are all coordinates of the other axes, in row-major order of the shape with
    /// `axis` removed; along the axis, every group of 4 keeps exactly 2 values (zeros pad a
    /// group with fewer nonzeros), in increasing position. `values` is `rows × ext/2`, row-major.
    /// Metadata: `words = ceil(ext / 32)` `u32` words per row (stored as `i32` in `idx`), kept
    /// value `v` of a row has its 2-bit position within its group at bits `2·(v % 16)` of word
    /// `row·words + v / 16`: 4 bits per group, lower position in the low 2 bits (the order
    /// `mma.sp` consumes; spec/formats.md).
    TwoFour { axis: usize },
}

/// A sparse tensor: shape, layout and the layout's arrays (module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct SparseTensor {
    pub shape: Vec<usize>,
    pub layout: Layout,
    pub ptr: Vec<i32>,
    pub idx: Vec<i32>,
    pub values: Values,
}

/// A borrowed sparse tensor (the form kernels take; the CPU backend builds it from buffers).
#[derive(Debug, Clone, Copy)]
pub struct SparseRef<'a> {
    pub shape: &'a [usize],
    pub layout: Layout,
    pub ptr: &'a [i32],
    pub idx: &'a [i32],
    pub values: ValuesRef<'a>,
}

impl SparseTensor {
    pub fn as_ref(&self) -> SparseRef<'_> {
        SparseRef {
            shape: &self.shape,
            layout: self.layout,
            ptr: &self.ptr,
            idx: &self.idx,
            values: self.values.as_ref(),
        }
    }
}

/// Mutable values: a runtime's capacity-sized buffer that [`crate::prune::write_padded`] fills.
#[derive(Debug)]
pub enum ValuesMut<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
    F16(&'a mut [f16]),
    BF16(&'a mut [bf16]),
}

impl ValuesMut<'_> {
    pub fn len(&self) -> usize {
        match self {
            ValuesMut::F32(v) => v.len(),
            ValuesMut::F64(v) => v.len(),
            ValuesMut::F16(v) => v.len(),
            ValuesMut::BF16(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn dtype(&self) -> DType {
        match self {
            ValuesMut::F32(_) => DType::F32,
            ValuesMut::F64(_) => DType::F64,
            ValuesMut::F16(_) => DType::F16,
            ValuesMut::BF16(_) => DType::BF16,
        }
    }
    /// The dtype's name (`f32`, `f64`, `f16`, `bf16`).
    pub fn dtype_name(&self) -> &'static str {
        self.dtype().name()
    }
    /// Copies `src` to the front and zeroes the rest. Errors if the dtypes differ or `src` is
    /// longer than `self`.
    pub fn fill_padded(&mut self, src: ValuesRef) -> Result<(), SparseError> {
        fn fill<T: Copy + Default>(dst: &mut [T], src: &[T]) -> Result<(), SparseError> {
            if src.len() > dst.len() {
                return Err(SparseError::shape(format!(
                    "{} values do not fit in a buffer of {}",
                    src.len(),
                    dst.len()
                )));
            }
            dst[..src.len()].copy_from_slice(src);
            dst[src.len()..].fill(T::default());
            Ok(())
        }
        match (self, src) {
            (ValuesMut::F32(d), ValuesRef::F32(s)) => fill(d, s),
            (ValuesMut::F64(d), ValuesRef::F64(s)) => fill(d, s),
            (ValuesMut::F16(d), ValuesRef::F16(s)) => fill(d, s),
            (ValuesMut::BF16(d), ValuesRef::BF16(s)) => fill(d, s),
            (d, s) => Err(SparseError::invalid(format!(
                "values of dtype {} cannot be written to a {} buffer",
                s.dtype_name(),
                d.dtype_name()
            ))),
        }
    }
}

impl Values {
    pub fn dtype(&self) -> DType {
        self.as_ref().dtype()
    }
    /// The dtype's name (`f32`, `f64`, `f16`, `bf16`).
    pub fn dtype_name(&self) -> &'static str {
        self.as_ref().dtype_name()
    }
    /// All values widened to f64 (exact).
    pub fn to_f64(&self) -> Vec<f64> {
        self.as_ref().to_f64()
    }
    /// Values of the same dtype as `like`, rounded from f64 (round to nearest even).
    pub fn from_f64_like(like: ValuesRef, v: &[f64]) -> Values {
        match like {
            ValuesRef::F32(_) => Values::F32(v.iter().map(|&x| x as f32).collect()),
            ValuesRef::F64(_) => Values::F64(v.to_vec()),
            ValuesRef::F16(_) => {
                Values::F16(v.iter().map(|&x| crate::dtype::f64_to_f16(x)).collect())
            }
            ValuesRef::BF16(_) => {
                Values::BF16(v.iter().map(|&x| crate::dtype::f64_to_bf16(x)).collect())
            }
        }
    }
}

impl<'a> ValuesRef<'a> {
    pub fn dtype(&self) -> DType {
        match self {
            ValuesRef::F32(_) => DType::F32,
            ValuesRef::F64(_) => DType::F64,
            ValuesRef::F16(_) => DType::F16,
            ValuesRef::BF16(_) => DType::BF16,
        }
    }
    /// The dtype's name (`f32`, `f64`, `f16`, `bf16`).
    pub fn dtype_name(&self) -> &'static str {
        self.dtype().name()
    }
    /// All values widened to f64 (exact).
    pub fn to_f64(&self) -> Vec<f64> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }
    /// The first `n` values (all of them if there are fewer).
    pub fn prefix(&self, n: usize) -> ValuesRef<'a> {
        match *self {
            ValuesRef::F32(v) => ValuesRef::F32(&v[..n.min(v.len())]),
            ValuesRef::F64(v) => ValuesRef::F64(&v[..n.min(v.len())]),
            ValuesRef::F16(v) => ValuesRef::F16(&v[..n.min(v.len())]),
            ValuesRef::BF16(v) => ValuesRef::BF16(&v[..n.min(v.len())]),
        }
    }
    /// Same dtype; element `k` is `self[picks[k]]`, or zero where `picks[k]` is `None`.
    /// Every `Some` index must be in range (callers pass indices they derived from `len`).
    pub(crate) fn gather(&self, picks: &[Option<usize>]) -> Values {
        fn g<T: Copy + Default>(src: &[T], picks: &[Option<usize>]) -> Vec<T> {
            picks
                .iter()
                .map(|p| p.and_then(|i| src.get(i).copied()).unwrap_or_default())
                .collect()
        }
        match *self {
            ValuesRef::F32(v) => Values::F32(g(v, picks)),
            ValuesRef::F64(v) => Values::F64(g(v, picks)),
            ValuesRef::F16(v) => Values::F16(g(v, picks)),
            ValuesRef::BF16(v) => Values::BF16(g(v, picks)),
        }
    }
    /// `n` zeros of the same dtype, then `out[dst] = self[src]` for every pair (pairs out of
    /// range on either side are skipped; callers validate first).
    pub(crate) fn scatter(&self, n: usize, pairs: &[(usize, usize)]) -> Values {
        fn s<T: Copy + Default>(src: &[T], n: usize, pairs: &[(usize, usize)]) -> Vec<T> {
            let mut out = vec![T::default(); n];
            for &(d, i) in pairs {
                if let (Some(slot), Some(&v)) = (out.get_mut(d), src.get(i)) {
                    *slot = v;
                }
            }
            out
        }
        match *self {
            ValuesRef::F32(v) => Values::F32(s(v, n, pairs)),
            ValuesRef::F64(v) => Values::F64(s(v, n, pairs)),
            ValuesRef::F16(v) => Values::F16(s(v, n, pairs)),
            ValuesRef::BF16(v) => Values::BF16(s(v, n, pairs)),
        }
    }
}

impl std::fmt::Display for Layout {
    /// `coo`, `csr`, `csc`, `bsr(2x3)`, `2:4 along axis 1`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Layout::Coo => f.write_str("coo"),
            Layout::Csr => f.write_str("csr"),
            Layout::Csc => f.write_str("csc"),
            Layout::Bsr { br, bc } => write!(f, "bsr({br}x{bc})"),
            Layout::TwoFour { axis } => write!(f, "2:4 along axis {axis}"),
        }
    }
}

/// The number of elements of `shape`, or an error if it overflows `usize`.
pub fn element_count(shape: &[usize]) -> Result<usize, SparseError> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            SparseError::too_large(format!(
                "shape {shape:?} has more elements than fit in memory"
            ))
        })
}

/// A 2:4 tensor seen as `outer × ext × inner` (the axis in the middle): its rows are the
/// `outer × inner` coordinates of the other axes, row `o·inner + i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TwoFourDims {
    pub outer: usize,
    pub ext: usize,
    pub inner: usize,
}

impl TwoFourDims {
    pub fn rows(&self) -> usize {
        self.outer * self.inner
    }
    /// Metadata words per row: `ceil(ext / 32)`.
    pub fn words(&self) -> usize {
        self.ext.div_ceil(32)
    }
    /// Flat (row-major) index of position `a` along the axis in row `row`.
    pub fn flat(&self, row: usize, a: usize) -> usize {
        let (o, i) = (row / self.inner, row % self.inner);
        (o * self.ext + a) * self.inner + i
    }
}

impl Layout {
    /// Checks that `shape` fits this layout: the rank, block extents that divide the shape,
    /// a 2:4 axis in range whose extent is a multiple of 4, an element count that fits `usize`.
    pub fn check_shape(&self, shape: &[usize]) -> Result<(), SparseError> {
        element_count(shape)?;
        match *self {
            Layout::Coo => {
                if shape.is_empty() {
                    return Err(SparseError::shape(
                        "a coo tensor needs rank >= 1, not a scalar",
                    ));
                }
            }
            Layout::Csr | Layout::Csc | Layout::Bsr { .. } => {
                if shape.len() != 2 {
                    return Err(SparseError::shape(format!(
                        "a {self} tensor has rank 2, but the shape {shape:?} has rank {}",
                        shape.len()
                    )));
                }
            }
            Layout::TwoFour { axis } => {
                if axis >= shape.len() {
                    return Err(SparseError::shape(format!(
                        "2:4 axis {axis} is out of range for shape {shape:?} (rank {})",
                        shape.len()
                    )));
                }
                if !shape[axis].is_multiple_of(4) {
                    return Err(SparseError::shape(format!(
                        "the 2:4 axis {axis} has extent {}, which is not a multiple of 4",
                        shape[axis]
                    )));
                }
            }
        }
        if let Layout::Bsr { br, bc } = *self {
            if br == 0 || bc == 0 {
                return Err(SparseError::shape(format!(
                    "bsr blocks must not be empty, got {br}x{bc}"
                )));
            }
            if !shape[0].is_multiple_of(br) || !shape[1].is_multiple_of(bc) {
                return Err(SparseError::shape(format!(
                    "bsr blocks of {br}x{bc} do not divide the shape {shape:?}"
                )));
            }
        }
        Ok(())
    }

    /// The `outer × ext × inner` view of a 2:4 tensor (`None` for other layouts or a bad
    /// axis). The product of the three is the element count.
    pub fn two_four_dims(&self, shape: &[usize]) -> Option<TwoFourDims> {
        let Layout::TwoFour { axis } = *self else {
            return None;
        };
        let ext = *shape.get(axis)?;
        Some(TwoFourDims {
            outer: shape[..axis].iter().product(),
            ext,
            inner: shape[axis + 1..].iter().product(),
        })
    }
}
