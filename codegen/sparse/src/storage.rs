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
