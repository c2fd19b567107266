//! CPU kernels: products of a rank-2 sparse matrix with a dense matrix.
//!
//! One entry point, [`spmm`], covers every layout and both sides:
//!
//! * `Side::Left`:  `c[m, n] (+)= S[m, k] · d[k, n]`
//! * `Side::Right`: `c[m, n] (+)= d[m, k] · S[k, n]`
//!
//! where `S` is the stored matrix, or its transpose when `transposed` is true (a CSR matrix
//! used transposed is a CSC one; no data moves). Dense operands are strided views of any
//! strides; the fast paths need unit stride along the axis the micro-kernel vectorises and
//! fall back to a generic (correct, parallel) loop otherwise.
//!
//! Values of any dtype (f16/bf16/f32/f64) are widened to the compute type `T` (f32 or f64) on
//! load; accumulation is in `T`. Work is split across the current rayon pool.
//!
//! Fast paths (f32 compute, [`Isa::Avx2`] or [`Isa::Avx512`], unit column strides):
//!
//! * BSR, left, not transposed: register-blocked micro-kernel per block row; a streaming
//!   mat-vec when `n = 1`;
//! * BSR, right, not transposed: per block column over a column index built per call;
//! * 2:4 along `k` (stored `S[m, k]` with `axis = 1`), left, not transposed: a permute-based
//!   kernel for `n ≤ 8`, a broadcast kernel otherwise;
//! * CSR (or CSC used transposed), left: rows balanced by stored entries.
//!
//! Everything else (COO, CSC, transposed BSR, 2:4 along `m`, f64 compute, [`Isa::Scalar`])
//! goes through one generic path: the entries of `S` are sorted into CSR form with values
//! widened to `T`, then the strided CSR kernels run on that.

use half::{bf16, f16};
use rayon::prelude::*;

use tdsl_sparse::{Layout, SparseError, SparseRef, ValuesRef};

mod check;
mod expand;
#[allow(unsafe_code)]
mod simd;

use check::*;

/// A strided read-only dense matrix: element `(r, c)` is `data[offset + r·rs + c·cs]`.
#[derive(Debug, Clone, Copy)]
pub struct DenseRef<'a, T> {
    pub data: &'a [T],
    pub offset: usize,
    pub rows: usize,
    pub cols: usize,
    pub rs: isize,
    pub cs: isize,
}

/// A strided mutable dense matrix: element `(r, c)` is `data[offset + r·rs + c·cs]`.
#[derive(Debug)]
pub struct DenseMut<'a, T> {
    pub data: &'a mut [T],
    pub offset: usize,
    pub rows: usize,
    pub cols: usize,
    pub rs: isize,
    pub cs: isize,
}

impl<'a, T> DenseRef<'a, T> {
    /// A row-major `rows × cols` matrix at the start of `data`.
    pub fn row_major(data: &'a [T], rows: usize, cols: usize) -> Self {
        DenseRef {
            data,
            offset: 0,
            rows,
            cols,
            rs: cols as isize,
            cs: 1,
        }
    }
}

impl<'a, T> DenseMut<'a, T> {
    /// A row-major `rows × cols` matrix at the start of `data`.
    pub fn row_major(data: &'a mut [T], rows: usize, cols: usize) -> Self {
        DenseMut {
            data,
            offset: 0,
            rows,
            cols,
            rs: cols as isize,
            cs: 1,
        }
    }
}

/// Which side of the dense operand the sparse matrix stands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `c = S · d`
    Left,
    /// `c = d · S`
    Right,
}

/// The instruction set the kernels may use, narrowest first (`Scalar < Avx2 < Avx512`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust, no explicit SIMD.
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512F + FMA (+ F16C).
    Avx512,
}

impl Isa {
    /// The best instruction set tdsl uses here: the CPU's best, no wider than
    /// [`Isa::cap`].
    pub fn detect() -> Isa {
        *Isa::available().last().unwrap_or(&Isa::Scalar)
    }

    /// Every instruction set tdsl uses here, from `Scalar` up.
    pub fn available() -> Vec<Isa> {
        let mut out = vec![Isa::Scalar];
        if Isa::Avx2.supported() {
            out.push(Isa::Avx2);
        }
        if Isa::Avx512.supported() {
            out.push(Isa::Avx512);
        }
        out
    }

    /// Whether this CPU runs code for `self` and the cap allows it.
    pub fn supported(self) -> bool {
        self <= Isa::cap() && simd::supported(self)
    }

    /// The widest instruction set the kernels may use: `TDSL_ISA=scalar|avx2|avx512` in the
    /// environment (read once) narrows what the CPU has, so that one machine measures and
    /// tests the code an older CPU runs (the hand-written kernels, the vector math, the GEMM
    /// micro-kernels and the ceilings `tdsl machine` reports; Cranelift's own instruction
    /// selection is not narrowed). Unset, or another value: no cap (the CLI warns about
    /// another value).
    pub fn cap() -> Isa {
        static CAP: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *CAP.get_or_init(|| {
            std::env::var("TDSL_ISA")
                .ok()
                .and_then(|v| Isa::parse(&v))
                .unwrap_or(Isa::Avx512)
        })
    }

    /// Whether [`Isa::cap`] hides an instruction set this CPU has: code that dispatches on its
    /// own (the `gemm` crate) would use more than tdsl's kernels do.
    pub fn capped() -> bool {
        Isa::detect()
            < [Isa::Avx2, Isa::Avx512]
                .into_iter()
                .filter(|&i| simd::supported(i))
                .max()
                .unwrap_or(Isa::Scalar)
    }

    /// `scalar`, `avx2` or `avx512` (any case).
    pub fn parse(s: &str) -> Option<Isa> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Some(Isa::Scalar),
            "avx2" => Some(Isa::Avx2),
            "avx512" => Some(Isa::Avx512),
            _ => None,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// The compute (and dense operand) type of [`spmm`]: `f32` or `f64`.
pub trait Compute:
    Copy
    + Send
    + Sync
    + Default
    + PartialEq
    + std::fmt::Debug
    + std::ops::Add<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::AddAssign
    + 'static
    + sealed::Sealed
{
    /// Whether this is `f64`.
    const IS_F64: bool;
    /// Widens (or for f32, rounds) a value.
    fn from_f64(x: f64) -> Self;
    /// Widens an f32 value.
    fn from_f32(x: f32) -> Self;
    /// Widens to f64 (exact).
    fn to_f64(self) -> f64;
    #[doc(hidden)]
    fn as_f32(s: &[Self]) -> Option<&[f32]>;
    #[doc(hidden)]
    fn as_f32_mut(s: &mut [Self]) -> Option<&mut [f32]>;
}

impl Compute for f32 {
    const IS_F64: bool = false;
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn from_f32(x: f32) -> Self {
        x
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn as_f32(s: &[Self]) -> Option<&[f32]> {
        Some(s)
    }
    fn as_f32_mut(s: &mut [Self]) -> Option<&mut [f32]> {
        Some(s)
    }
}

impl Compute for f64 {
    const IS_F64: bool = true;
    fn from_f64(x: f64) -> Self {
        x
    }
    fn from_f32(x: f32) -> Self {
        x as f64
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn as_f32(_: &[Self]) -> Option<&[f32]> {
        None
    }
    fn as_f32_mut(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
}

/// A stored value type that widens to a compute type.
pub(crate) trait Elem: Copy + Send + Sync + 'static {
    fn widen<T: Compute>(self) -> T;
}

impl<C: Compute> Elem for C {
    fn widen<T: Compute>(self) -> T {
        T::from_f64(self.to_f64())
    }
}
impl Elem for f16 {
    fn widen<T: Compute>(self) -> T {
        T::from_f32(self.to_f32())
    }
}
impl Elem for bf16 {
    fn widen<T: Compute>(self) -> T {
        T::from_f32(self.to_f32())
    }
}

/// An index or offset read from an array: validated non-negative before use.
pub(crate) trait Ix: Copy + Send + Sync {
    fn ix(self) -> usize;
}
impl Ix for i32 {
    fn ix(self) -> usize {
        self as usize
    }
}
impl Ix for u32 {
    fn ix(self) -> usize {
        self as usize
    }
}
impl Ix for usize {
    fn ix(self) -> usize {
        self
    }
}

/// Number of parallel tasks to cut work into (a few per thread, for balance).
fn n_tasks() -> usize {
    let t = rayon::current_num_threads().max(1);
    if t == 1 {
        1
    } else {
        4 * t
    }
}

/// Products with fewer multiply-adds than this run on the calling thread: splitting them
/// costs more than it saves (rayon's fork-join is ~10–20 µs here, this work ~30 µs).
const SMALL_WORK: usize = 1 << 17;

/// Tasks for a product of `work` multiply-adds.
fn tasks_for(work: usize) -> usize {
    if work < SMALL_WORK {
        1
    } else {
        n_tasks()
    }
}

/// Sparse matrix times dense matrix (see the module docs).
///
/// `c` must not overlap itself (distinct `(r, c)` at distinct elements) and must not alias
/// `d` (the borrow checker ensures that). `accumulate = false` overwrites `c`.
///
/// Errors: a shape that does not match, a view that reaches outside its data, malformed
/// sparse arrays (offsets, indices out of range, arrays too short), f64 values with f32
/// compute, or an `isa` this CPU does not support.
#[allow(clippy::too_many_arguments)]
pub fn spmm<T: Compute>(
    s: SparseRef,
    transposed: bool,
    side: Side,
    d: DenseRef<T>,
    c: DenseMut<T>,
    accumulate: bool,
    isa: Isa,
) -> Result<(), SparseError> {
    if !isa.supported() {
        return Err(SparseError::internal(format!(
            "this CPU does not support {isa:?}"
        )));
    }
    if !T::IS_F64 && matches!(s.values, ValuesRef::F64(_)) {
        return Err(SparseError::shape("f64 values need f64 compute, not f32"));
    }
    let (sr, sc) = check_sparse(&s)?;
    let (p, q) = if transposed { (sc, sr) } else { (sr, sc) };
    let mut d = canonical_ref(d);
    let mut c = canonical_mut(c);
    // Shapes.
    match side {
        Side::Left => {
            if c.rows != p || d.rows != q || c.cols != d.cols {
                return Err(SparseError::shape(format!(
                    "shapes do not match: c[{}, {}] = S[{p}, {q}] · d[{}, {}]",
                    c.rows, c.cols, d.rows, d.cols
                )));
            }
        }
        Side::Right => {
            if c.rows != d.rows || d.cols != p || c.cols != q {
                return Err(SparseError::shape(format!(
                    "shapes do not match: c[{}, {}] = d[{}, {}] · S[{p}, {q}]",
                    c.rows, c.cols, d.rows, d.cols
                )));
            }
        }
    }
    check_view("d", d.data.len(), d.offset, d.rows, d.cols, d.rs, d.cs)?;
    check_view("c", c.data.len(), c.offset, c.rows, c.cols, c.rs, c.cs)?;
    check_injective(c.rows, c.cols, c.rs, c.cs)?;
    if c.rows == 0 || c.cols == 0 {
        return Ok(());
    }
    // Make rows of c the outer (larger-stride) axis: cᵀ = dᵀ·Sᵀ swaps side and transposition.
    let mut side = side;
    let mut transposed = transposed;
    if c.rows > 1 && c.cols > 1 && c.cs.unsigned_abs() > c.rs.unsigned_abs() {
        std::mem::swap(&mut c.rows, &mut c.cols);
        std::mem::swap(&mut c.rs, &mut c.cs);
        std::mem::swap(&mut d.rows, &mut d.cols);
        std::mem::swap(&mut d.rs, &mut d.cs);
        d = canonical_ref(d);
        c = canonical_mut(c);
        side = match side {
            Side::Left => Side::Right,
            Side::Right => Side::Left,
        };
        transposed = !transposed;
    }
    dispatch(&s, transposed, side, d, c, accumulate, isa)
}

/// Splits `c` into the non-empty row ranges `bounds[t]..bounds[t + 1]` (disjoint pieces of
/// `data`), each with its first row. Needs rows that do not interleave (checked by
/// `check_injective`, with `|rs|` the larger stride).
fn split_rows<'a, T>(c: DenseMut<'a, T>, bounds: &[usize]) -> Vec<(usize, DenseMut<'a, T>)> {
    let DenseMut {
        data,
        offset,
        rows: _,
        cols,
        rs,
        cs,
    } = c;
    let cspan = (cols.max(1) - 1) as isize * cs;
    let (cmin, cmax) = (cspan.min(0), cspan.max(0));
    // (lo, hi, r0, r1, task)
    let mut pieces: Vec<(usize, usize, usize, usize, usize)> = Vec::new();
    for t in 0..bounds.len().saturating_sub(1) {
        let (r0, r1) = (bounds[t], bounds[t + 1]);
        if r1 <= r0 {
            continue;
        }
        let first = offset as isize + r0 as isize * rs;
        let last = offset as isize + (r1 - 1) as isize * rs;
        let lo = (first.min(last) + cmin) as usize;
        let hi = (first.max(last) + cmax) as usize + 1;
        pieces.push((lo, hi, r0, r1, t));
    }
    pieces.sort_unstable();
    let mut out: Vec<(usize, usize, DenseMut<'a, T>)> = Vec::with_capacity(pieces.len());
    let mut rest = data;
    let mut consumed = 0usize;
    for (lo, hi, r0, r1, t) in pieces {
        let (_, tail) = rest.split_at_mut(lo - consumed);
        let (mine, tail) = tail.split_at_mut(hi - lo);
        rest = tail;
        consumed = hi;
        let first = (offset as isize + r0 as isize * rs) as usize;
        out.push((
            t,
            r0,
            DenseMut {
                data: mine,
                offset: first - lo,
                rows: r1 - r0,
                cols,
                rs,
                cs,
            },
        ));
    }
    out.sort_unstable_by_key(|p| p.0);
    out.into_iter().map(|p| (p.1, p.2)).collect()
}

/// Row bounds `0 = b0 < … = rows` cutting `rows` into about `tasks` ranges of equal cost,
/// where `prefix(r)` is the cost of rows `0..r` (non-decreasing).
fn balanced_bounds(rows: usize, tasks: usize, prefix: impl Fn(usize) -> usize) -> Vec<usize> {
    let total = prefix(rows);
    let tasks = tasks.clamp(1, rows.max(1));
    let mut bounds = vec![0usize];
    for t in 1..tasks {
        let target = (total as u128 * t as u128 / tasks as u128) as usize;
        // First row r with prefix(r) >= target.
        let (mut lo, mut hi) = (*bounds.last().unwrap_or(&0), rows);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if prefix(mid) < target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo > *bounds.last().unwrap_or(&0) && lo < rows {
            bounds.push(lo);
        }
    }
    bounds.push(rows);
    bounds
}

fn even_bounds(rows: usize, tasks: usize) -> Vec<usize> {
    balanced_bounds(rows, tasks, |r| r)
}

/// Widened typed values as the kernels see them.
enum Vals<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
}

fn vals<'a>(v: &ValuesRef<'a>) -> Vals<'a> {
    match *v {
        ValuesRef::F32(x) => Vals::F32(x),
        ValuesRef::F64(x) => Vals::F64(x),
        ValuesRef::F16(x) => Vals::F16(x),
        ValuesRef::BF16(x) => Vals::BF16(x),
    }
}

/// The f32 (or half) values as the SIMD kernels take them; `None` for f64.
fn simd_vals<'a>(v: &ValuesRef<'a>) -> Option<simd::ValSlice<'a>> {
    match *v {
        ValuesRef::F32(x) => Some(simd::ValSlice::F32(x)),
        ValuesRef::F16(x) => Some(simd::ValSlice::F16(x)),
        ValuesRef::BF16(x) => Some(simd::ValSlice::BF16(x)),
        ValuesRef::F64(_) => None,
    }
}

#[allow(clippy::too_many_arguments)]
fn dispatch<T: Compute>(
    s: &SparseRef,
    transposed: bool,
    side: Side,
    d: DenseRef<T>,
    c: DenseMut<T>,
    accumulate: bool,
    isa: Isa,
) -> Result<(), SparseError> {
    let csr_like = matches!(
        (s.layout, transposed),
        (Layout::Csr, false) | (Layout::Csc, true)
    );
    if s.layout == (Layout::TwoFour { axis: 1 }) && isa != Isa::Scalar {
        let wide = match side {
            Side::Left => c.cols,
            Side::Right => c.rows,
        };
        if wide >= expand::EXPAND_MIN_N || T::IS_F64 || (side == Side::Left) == transposed {
            return expand::two_four_gemm(s, transposed, side, d, c, accumulate);
        }
        let unit = |cs: isize, rs: isize, rows: usize, cols: usize| {
            cs == 1 && rs > 0 && (rows <= 1 || rs as usize >= cols)
        };
        if side == Side::Right
            || !unit(d.cs, d.rs, d.rows, d.cols)
            || !unit(c.cs, c.rs, c.rows, c.cols)
        {
            // A narrow product the value-reading kernel takes only as S·d with unit-stride
            // rows (torch's layout, c = d·Sᵀ, is cᵀ = S·dᵀ): run it on row-major copies.
            return two_four_narrow(s, side, d, c, accumulate, isa);
        }
    }
    // Fast paths: f32 compute, SIMD, unit column strides, rows of c and d going forward.
    let rows_apart = |rows: usize, cols: usize, rs: isize| rows <= 1 || rs as usize >= cols;
    if isa != Isa::Scalar
        && d.cs == 1
        && c.cs == 1
        && d.rs > 0
        && c.rs > 0
        && rows_apart(d.rows, d.cols, d.rs)
        && rows_apart(c.rows, c.cols, c.rs)
    {
        if let (Some(dd), Some(sv)) = (T::as_f32(d.data), simd_vals(&s.values)) {
            let df = simd::Mat {
                data: dd,
                off: d.offset,
                rows: d.rows,
                cols: d.cols,
                ld: d.rs as usize,
            };
            match (s.layout, side, transposed) {
                (Layout::Bsr { br, bc }, Side::Left, false) => {
                    return bsr_left_f32(s, br, bc, sv, df, c, accumulate, isa);
                }
                (Layout::Bsr { br, bc }, Side::Right, false) => {
                    check_sparse_indices(s)?;
                    return bsr_right_f32(s, br, bc, sv, df, c, accumulate, isa);
                }
                (Layout::TwoFour { axis: 1 }, Side::Left, false) => {
                    return two_four_left_f32(s, sv, df, c, accumulate, isa);
                }
                (_, Side::Left, _) if csr_like => {
                    return csr_left_f32(s, sv, df, c, accumulate, isa);
                }
                _ => {}
            }
        }
    }
    check_sparse_indices(s)?;
    if csr_like {
        let v = vals(&s.values);
        let (ptr, idx) = (s.ptr, s.idx);
        return match v {
            Vals::F32(v) => csr_generic(ptr, idx, v, side, d, c, accumulate),
            Vals::F64(v) => csr_generic(ptr, idx, v, side, d, c, accumulate),
            Vals::F16(v) => csr_generic(ptr, idx, v, side, d, c, accumulate),
            Vals::BF16(v) => csr_generic(ptr, idx, v, side, d, c, accumulate),
        };
    }
    let (ptr, idx, v) = to_csr::<T>(s, transposed);
    csr_generic(&ptr, &idx, &v, side, d, c, accumulate)
}

/// Calls `f(row, col, value position)` for every stored entry of the (checked) matrix.
fn for_each_entry(s: &SparseRef, mut f: impl FnMut(usize, usize, usize)) {
    let end = |ptr: &[i32]| ptr.last().map_or(0, |&p| p as usize);
    match s.layout {
        Layout::Coo => {
            for e in 0..end(s.ptr) {
                f(s.idx[2 * e] as usize, s.idx[2 * e + 1] as usize, e);
            }
        }
        Layout::Csr | Layout::Csc => {
            for o in 0..s.ptr.len() - 1 {
                for e in s.ptr[o] as usize..s.ptr[o + 1] as usize {
                    let i = s.idx[e] as usize;
                    if s.layout == Layout::Csr {
                        f(o, i, e);
                    } else {
                        f(i, o, e);
                    }
                }
            }
        }
        Layout::Bsr { br, bc } => {
            for bi in 0..s.ptr.len() - 1 {
                for b in s.ptr[bi] as usize..s.ptr[bi + 1] as usize {
                    let bj = s.idx[b] as usize;
                    for r in 0..br {
                        for c in 0..bc {
                            f(bi * br + r, bj * bc + c, (b * br + r) * bc + c);
                        }
                    }
                }
            }
        }
        Layout::TwoFour { axis } => {
            let (nrows, ext) = if axis == 1 {
                (s.shape[0], s.shape[1])
            } else {
                (s.shape[1], s.shape[0])
            };
            let words = ext.div_ceil(32);
            let half = ext / 2;
            for row in 0..nrows {
                for v in 0..half {
                    let word = s.idx[row * words + v / 16] as u32;
                    let a = 4 * (v / 2) + ((word >> (2 * (v % 16))) & 3) as usize;
                    if axis == 1 {
                        f(row, a, row * half + v);
                    } else {
                        f(a, row, row * half + v);
                    }
                }
            }
        }
    }
}

/// The entries of `S` (the stored matrix or its transpose) as CSR with values widened to `T`.
fn to_csr<T: Compute>(s: &SparseRef, transposed: bool) -> (Vec<usize>, Vec<u32>, Vec<T>) {
    let rows = if transposed { s.shape[1] } else { s.shape[0] };
    let mut ptr = vec![0usize; rows + 1];
    let key = |r: usize, c: usize| if transposed { (c, r) } else { (r, c) };
    for_each_entry(s, |r, c, _| ptr[key(r, c).0 + 1] += 1);
    for k in 0..rows {
        ptr[k + 1] += ptr[k];
    }
    let nnz = ptr[rows];
    let mut next = ptr[..rows].to_vec();
    let mut idx = vec![0u32; nnz];
    let mut pos = vec![0usize; nnz];
    for_each_entry(s, |r, c, e| {
        let (o, i) = key(r, c);
        let slot = next[o];
        next[o] += 1;
        idx[slot] = i as u32;
        pos[slot] = e;
    });
    let v: Vec<T> = match vals(&s.values) {
        Vals::F32(x) => pos.iter().map(|&e| x[e].widen()).collect(),
        Vals::F64(x) => pos.iter().map(|&e| x[e].widen()).collect(),
        Vals::F16(x) => pos.iter().map(|&e| x[e].widen()).collect(),
        Vals::BF16(x) => pos.iter().map(|&e| x[e].widen()).collect(),
    };
    (ptr, idx, v)
}

fn at(offset: usize, r: usize, c: usize, rs: isize, cs: isize) -> usize {
    (offset as isize + r as isize * rs + c as isize * cs) as usize
}

/// CSR `S` (checked arrays) times strided dense, either side, any strides.
fn csr_generic<T: Compute, P: Ix, I: Ix, V: Elem>(
    ptr: &[P],
    idx: &[I],
    vals: &[V],
    side: Side,
    d: DenseRef<T>,
    c: DenseMut<T>,
    accumulate: bool,
) -> Result<(), SparseError> {
    let m = c.rows;
    let n = c.cols;
    let work = ptr.last().map_or(0, |p| p.ix()).saturating_mul(n.max(1)) + m;
    let bounds = match side {
        Side::Left => balanced_bounds(m, tasks_for(work), |r| ptr[r].ix() + r),
        Side::Right => even_bounds(m, tasks_for(work)),
    };
    let pieces = split_rows(c, &bounds);
    pieces.into_par_iter().for_each(|(r0, cp)| {
        for lr in 0..cp.rows {
            let r = r0 + lr;
            let (off, rs, cs) = (cp.offset, cp.rs, cp.cs);
            if !accumulate {
                for j in 0..n {
                    cp.data[at(off, lr, j, rs, cs)] = T::default();
                }
            }
            match side {
                Side::Left if cs == 1 && d.cs == 1 && n > 0 => {
                    // Unit column strides: rows as slices, so the loop vectorises.
                    let c0 = at(off, lr, 0, rs, cs);
                    let crow = &mut cp.data[c0..c0 + n];
                    for e in ptr[r].ix()..ptr[r + 1].ix() {
                        let v: T = vals[e].widen();
                        let d0 = at(d.offset, idx[e].ix(), 0, d.rs, d.cs);
                        for (cj, &x) in crow.iter_mut().zip(&d.data[d0..d0 + n]) {
                            *cj += v * x;
                        }
                    }
                }
                Side::Left => {
                    for e in ptr[r].ix()..ptr[r + 1].ix() {
                        let v: T = vals[e].widen();
                        let k = idx[e].ix();
                        for j in 0..n {
                            let x = d.data[at(d.offset, k, j, d.rs, d.cs)];
                            cp.data[at(off, lr, j, rs, cs)] += v * x;
                        }
                    }
                }
                Side::Right => {
                    for k in 0..ptr.len() - 1 {
                        let x = d.data[at(d.offset, r, k, d.rs, d.cs)];
                        for e in ptr[k].ix()..ptr[k + 1].ix() {
                            let v: T = vals[e].widen();
                            cp.data[at(off, lr, idx[e].ix(), rs, cs)] += x * v;
                        }
                    }
                }
            }
        }
    });
    Ok(())
}

/// Runs `f(task piece of c, first row)` over pieces of `c` cut at `bounds` (rows), in parallel.
fn par_pieces<'a>(
    c: DenseMut<'a, f32>,
    bounds: &[usize],
    f: impl Fn(simd::MatMut<'_>, usize) -> Result<(), SparseError> + Sync,
) -> Result<(), SparseError> {
    let pieces = split_rows(c, bounds);
    let run = |(r0, cp): (usize, DenseMut<'_, f32>)| {
        let m = simd::MatMut {
            off: cp.offset,
            rows: cp.rows,
            cols: cp.cols,
            ld: cp.rs as usize,
            data: cp.data,
        };
        f(m, r0)
    };
    if pieces.len() <= 1 {
        // One piece: no fork-join.
        return pieces.into_iter().try_for_each(run);
    }
    pieces.into_par_iter().try_for_each(run)
}

fn f32_out<T: Compute>(c: DenseMut<T>) -> Result<DenseMut<f32>, SparseError> {
    let DenseMut {
        data,
        offset,
        rows,
        cols,
        rs,
        cs,
    } = c;
    let data = T::as_f32_mut(data)
        .ok_or_else(|| SparseError::shape("internal: f32 fast path with f64 output"))?;
    Ok(DenseMut {
        data,
        offset,
        rows,
        cols,
        rs,
        cs,
    })
}

#[allow(clippy::too_many_arguments)]
fn bsr_left_f32<T: Compute>(
    s: &SparseRef,
    br: usize,
    bc: usize,
    sv: simd::ValSlice,
    d: simd::Mat,
    c: DenseMut<T>,
    accumulate: bool,
    isa: Isa,
) -> Result<(), SparseError> {
    let c = f32_out(c)?;
    let nbr = s.ptr.len() - 1;
    let ptr = s.ptr;
    let work = (ptr[nbr].max(0) as usize)
        .saturating_mul(br * bc)
        .saturating_mul(d.cols.max(1));
    let bbounds = balanced_bounds(nbr, tasks_for(work), |i| ptr[i] as usize + i);
    let bounds: Vec<usize> = bbounds.iter().map(|&b| b * br).collect();
    par_pieces(c, &bounds, |cm, r0| {
        let i0 = r0 / br;
        let i1 = i0 + cm.rows / br;
        simd::bsr_left(isa, &ptr[i0..=i1], s.idx, sv, br, bc, d, cm, accumulate)
    })
}

#[allow(clippy::too_many_arguments)]
fn bsr_right_f32<T: Compute>(
    s: &SparseRef,
    br: usize,
    bc: usize,
    sv: simd::ValSlice,
    d: simd::Mat,
    c: DenseMut<T>,
    accumulate: bool,
    isa: Isa,
) -> Result<(), SparseError> {
    let c = f32_out(c)?;
    let nbr = s.ptr.len() - 1;
    let nbc = s.shape[1] / bc;
    let nnzb = s.ptr[nbr] as usize;
    // Column index: for each block column, its (block row, block position) in row order.
    let mut cptr = vec![0usize; nbc + 1];
    for &j in &s.idx[..nnzb] {
        cptr[j as usize + 1] += 1;
    }
    for j in 0..nbc {
        cptr[j + 1] += cptr[j];
    }
    let mut next = cptr[..nbc].to_vec();
    let mut entries = vec![(0u32, 0u32); nnzb];
    for bi in 0..nbr {
        for b in s.ptr[bi] as usize..s.ptr[bi + 1] as usize {
            let j = s.idx[b] as usize;
            entries[next[j]] = (bi as u32, b as u32);
            next[j] += 1;
        }
    }
    // Values widened once (the micro-kernel loads rows of blocks).
    let widened: Vec<f32>;
    let vf: &[f32] = match sv {
        simd::ValSlice::F32(v) => v,
        other => {
            widened = simd::widen(isa, other, nnzb * br * bc);
            &widened
        }
    };
    let bounds = even_bounds(c.rows, n_tasks());
    let col = simd::ColIndex {
        ptr: &cptr,
        entries: &entries,
    };
    par_pieces(c, &bounds, |cm, r0| {
        simd::bsr_right(isa, &col, vf, br, bc, d, r0, cm, accumulate)
    })
}

fn two_four_left_f32<T: Compute>(
    s: &SparseRef,
    sv: simd::ValSlice,
    d: simd::Mat,
    c: DenseMut<T>,
    accumulate: bool,
    isa: Isa,
) -> Result<(), SparseError> {
    let c = f32_out(c)?;
    let (m, k) = (s.shape[0], s.shape[1]);
    let n = d.cols;
    let words = k.div_ceil(32);
    let half = k / 2;
    // Small n: dᵀ (n × k, contiguous rows) for the permute kernel.
    let small = isa == Isa::Avx512 && n <= simd::TWO_FOUR_SMALL_N;
    let xt_store: Vec<f32>;
    let xt: simd::Mat = if small {
        if n == 1 && d.ld == 1 {
            simd::Mat {
                data: d.data,
                off: d.off,
                rows: 1,
                cols: k,
                ld: k,
            }
        } else {
            let mut t = vec![0f32; n * k];
            for kk in 0..k {
                let row = &d.data[d.off + kk * d.ld..d.off + kk * d.ld + n];
                for (j, &x) in row.iter().enumerate() {
                    t[j * k + kk] = x;
                }
            }
            xt_store = t;
            simd::Mat {
                data: &xt_store,
                off: 0,
                rows: n,
                cols: k,
                ld: k,
            }
        }
    } else {
        d
    };
    let bounds = even_bounds(m, n_tasks());
    par_pieces(c, &bounds, |cm, r0| {
        let r1 = r0 + cm.rows;
        let meta = &s.idx[r0 * words..r1 * words];
        let v = sv.slice(r0 * half, r1 * half);
        if small {
            simd::two_four_small(isa, v, meta, k, xt, cm, accumulate)
        } else {
            simd::two_four_bcast(isa, v, meta, k, d, cm, accumulate)
        }
    })
}

/// A narrow 2:4 product (the dense side below `EXPAND_MIN_N`), `c = S·d` (`Side::Left`) or
/// `c = d·Sᵀ` (`Side::Right`, S used transposed), through row-major copies of `d` and `c`
/// (`k·q` and `p·q` elements, small next to `S`) so the value-reading kernel can run on it.
fn two_four_narrow<T: Compute>(
    s: &SparseRef,
    side: Side,
    d: DenseRef<T>,
    c: DenseMut<T>,
    accumulate: bool,
    isa: Isa,
) -> Result<(), SparseError> {
    let left = side == Side::Left;
    // The product as cc[p, q] = S[p, k] · dd[k, q].
    let (p, q, k) = if left {
        (c.rows, c.cols, d.rows)
    } else {
        (c.cols, c.rows, d.cols)
    };
    let d_at = |kk: usize, j: usize| {
        let (r, col) = if left { (kk, j) } else { (j, kk) };
        at(d.offset, r, col, d.rs, d.cs)
    };
    let c_at = |i: usize, j: usize| {
        let (r, col) = if left { (i, j) } else { (j, i) };
        at(c.offset, r, col, c.rs, c.cs)
    };
    let mut dd = vec![T::from_f64(0.0); k * q];
    for kk in 0..k {
        for j in 0..q {
            dd[kk * q + j] = d.data[d_at(kk, j)];
        }
    }
    let mut cc = vec![T::from_f64(0.0); p * q];
    dispatch(
        s,
        false,
        Side::Left,
        DenseRef::row_major(&dd, k, q),
        DenseMut::row_major(&mut cc, p, q),
        false,
        isa,
    )?;
    for i in 0..p {
        for j in 0..q {
            let at = c_at(i, j);
            let v = cc[i * q + j];
            c.data[at] = if accumulate { c.data[at] + v } else { v };
        }
    }
    Ok(())
}

fn csr_left_f32<T: Compute>(
    s: &SparseRef,
    sv: simd::ValSlice,
    d: simd::Mat,
    c: DenseMut<T>,
    accumulate: bool,
    isa: Isa,
) -> Result<(), SparseError> {
    let c = f32_out(c)?;
    let ptr = s.ptr;
    let m = ptr.len() - 1;
    let work = (ptr[m].max(0) as usize).saturating_mul(d.cols.max(1)) + m;
    let bounds = balanced_bounds(m, tasks_for(work), |r| ptr[r] as usize + r);
    par_pieces(c, &bounds, |cm, r0| {
        let r1 = r0 + cm.rows;
        simd::csr_left(isa, &ptr[r0..=r1], s.idx, sv, d, cm, accumulate)
    })
}

#[cfg(test)]
mod tests;
