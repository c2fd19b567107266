//! 2:4 products at GEMM speed. With f32 compute on a CPU with tdsl's GEMM micro-kernel
//! (`sgemm`), the stored values are decoded straight into the GEMM's packed panels
//! ([`packed_two_four`]). Otherwise (f64, f64 values, no AVX2) the stored matrix is expanded
//! to dense a chunk at a time and each chunk multiplied by the dense GEMM (the `gemm` crate).
//!
//! A CPU has no sparse tensor cores: a 2:4 kernel that reads only the kept values does half
//! the multiply-adds but needs one decode and one scattered load per multiply-add, and runs at
//! about a quarter of the GEMM's rate (bench/RESULTS.md). Expanding a chunk of ~1 MiB and
//! handing it to the GEMM costs one pass over the chunk and runs every product at the dense
//! GEMM's speed, in every orientation: either side, the stored matrix transposed or not (torch's
//! `[out, in]` weight pruned along `in` and multiplied from the right is the common case), any
//! strides of the dense operands. Memory stays bounded: the chunk, never the whole dense matrix.

use super::*;
use crate::jit::{self, MatMut, MatRef};
use crate::sgemm::{self, Src, SrcData, TwoFour, TwoFourVals};

/// Extent of the product's dense side (`n` for `S·d`, `m` for `d·S`) from which a 2:4 product
/// is expanded and run on the GEMM. Below it the value-reading kernels win (they move half the
/// bytes and a narrow product is bound by memory, not multiply-adds).
pub(super) const EXPAND_MIN_N: usize = 32;

/// Elements of one expanded chunk (16 MiB of f32). Each chunk's GEMM packs the dense operand
/// again, so fewer chunks are faster: on a 2048² weight in torch's layout (2048 rows of
/// activations) one chunk ran in 41.4-42.2 ms, 4 chunks 42.3-42.7, 16 chunks 44.1-44.6.
/// (Unit tests use tiny chunks so every product crosses chunk edges.)
const CHUNK_ELEMS: usize = if cfg!(test) { 48 } else { 1 << 22 };

/// Chunks of at least this many elements are expanded by all threads.
const PAR_EXPAND: usize = if cfg!(test) { 16 } else { 1 << 16 };

/// `c (+)= S'·d` (`Side::Left`) or `c (+)= d·S'` (`Side::Right`), where `S'` is the 2:4 matrix
/// `s` (groups along its columns, `axis = 1`), transposed when `transposed`. Shapes and views
/// were checked by [`spmm`].
pub(super) fn two_four_gemm<T: Compute>(
    s: &SparseRef,
    transposed: bool,
    side: Side,
    d: DenseRef<T>,
    c: DenseMut<T>,
    accumulate: bool,
) -> Result<(), SparseError> {
    let (sr, sc) = (s.shape[0], s.shape[1]);
    if !sc.is_multiple_of(4) {
        return Err(SparseError::shape(
            "2:4: the grouped extent is not a multiple of 4",
        ));
    }
    let c = match packed_two_four(s, transposed, side, &d, c, accumulate) {
        Ok(r) => return r,
        Err(c) => c,
    };
    // The chunk runs along the axis of S' that is not contracted: the stored rows when S' is
    // S on the left or Sᵀ on the right, else the stored columns (in whole groups of 4).
    let by_rows = transposed == (side == Side::Right);
    let (len, other) = if by_rows { (sr, sc) } else { (sc, sr) };
    let step = if by_rows {
        (CHUNK_ELEMS / other.max(1)).clamp(8, len.max(8))
    } else {
        ((CHUNK_ELEMS / other.max(1)).clamp(8, len.max(8)) / 4 * 4).max(4)
    };
    let threads = rayon::current_num_threads().max(1);
    let (one, zero) = (T::from_f64(1.0), T::from_f64(0.0));
    let mut buf: Vec<T> = Vec::new();
    let mut start = 0;
    while start < len {
        let end = (start + step).min(len);
        let (r0, r1, c0, c1) = if by_rows {
            (start, end, 0, sc)
        } else {
            (0, sr, start, end)
        };
        let w = c1 - c0;
        buf.clear();
        buf.resize((r1 - r0) * w, zero);
        expand_window(s, r0, r1, c0, c1, &mut buf);
        // The chunk E = S[r0..r1, c0..c1] row-major; S' chunk is E or Eᵀ.
        let (ers, ecs) = if transposed {
            (1, w as isize)
        } else {
            (w as isize, 1)
        };
        let e = MatRef {
            data: &buf,
            offsets: vec![0],
            rs: ers,
            cs: ecs,
        };
        let cnt = end - start;
        let k = if side == Side::Left { d.rows } else { d.cols };
        let dv = MatRef {
            data: d.data,
            offsets: vec![d.offset as isize],
            rs: d.rs,
            cs: d.cs,
        };
        let res = match side {
            // c[start..end, :] = S'[start..end, :] · d
            Side::Left => {
                let dst = MatMut {
                    data: &mut *c.data,
                    offsets: vec![c.offset as isize + start as isize * c.rs],
                    rs: c.rs,
                    cs: c.cs,
                    injective: false,
                };
                product(cnt, c.cols, k, dst, e, dv, accumulate, (one, zero), threads)
            }
            // c[:, start..end] = d · S'[:, start..end]
            Side::Right => {
                let dst = MatMut {
                    data: &mut *c.data,
                    offsets: vec![c.offset as isize + start as isize * c.cs],
                    rs: c.rs,
                    cs: c.cs,
                    injective: false,
                };
                product(c.rows, cnt, k, dst, dv, e, accumulate, (one, zero), threads)
            }
        };
        res.map_err(|_| SparseError::internal("2:4 gemm: a view does not fit its data"))?;
        start = end;
    }
    Ok(())
}

/// The product on tdsl's packing GEMM with the 2:4 operand decoded straight into its packed
/// panels (f32 compute, f32/f16/bf16 values, on a CPU with its micro-kernel): no expanded
/// chunk is written or read. Hands the destination back when it does not apply.
fn packed_two_four<'c, T: Compute>(
    s: &SparseRef,
    transposed: bool,
    side: Side,
    d: &DenseRef<T>,
    c: DenseMut<'c, T>,
    accumulate: bool,
) -> Result<Result<(), SparseError>, DenseMut<'c, T>> {
    let isa = Isa::detect();
    let vals = match vals(&s.values) {
        Vals::F32(v) => TwoFourVals::F32(v),
        Vals::F16(v) => TwoFourVals::F16(v),
        Vals::BF16(v) => TwoFourVals::Bf16(v),
        Vals::F64(_) => return Err(c),
    };
    let Some(dd) = T::as_f32(d.data).filter(|_| sgemm::available(isa)) else {
        return Err(c);
    };
    if T::as_f32(c.data).is_none() {
        return Err(c);
    }
    let sp = Src {
        data: SrcData::TwoFour(TwoFour {
            vals,
            meta: s.idx,
            rows: s.shape[0],
            cols: s.shape[1],
            transposed,
        }),
        off: 0,
        rs: 0,
        cs: 0,
    };
    let dv = Src {
        data: SrcData::F32(dd),
        off: 0,
        rs: d.rs,
        cs: d.cs,
    };
    let (m, n) = (c.rows, c.cols);
    let k = if side == Side::Left { d.rows } else { d.cols };
    let (a, b) = match side {
        Side::Left => ((sp, 0), (dv, d.offset as isize)),
        Side::Right => ((dv, d.offset as isize), (sp, 0)),
    };
    let Some(data) = T::as_f32_mut(c.data) else {
        return Ok(Err(SparseError::internal("2:4 gemm: destination type")));
    };
    let dst = sgemm::Dst {
        data,
        offsets: vec![c.offset as isize],
        rs: c.rs,
        cs: c.cs,
        injective: false,
    };
    let threads = rayon::current_num_threads().max(1);
    let r = sgemm::sgemm_batched(
        isa,
        m,
        n,
        k,
        dst,
        (a.0, &[a.1]),
        (b.0, &[b.1]),
        accumulate,
        threads,
    );
    Ok(r.map_err(|_| SparseError::internal("2:4 gemm: a view does not fit its data")))
}

/// `dst (+)= x·y`: on tdsl's packing GEMM for f32 where it is preferred (a transposed
/// chunk, as in torch's layout), else on the `gemm` crate.
#[allow(clippy::too_many_arguments)]
fn product<T: Compute>(
    m: usize,
    n: usize,
    k: usize,
    dst: MatMut<'_, T>,
    x: MatRef<'_, T>,
    y: MatRef<'_, T>,
    accumulate: bool,
    (one, zero): (T, T),
    threads: usize,
) -> Result<(), jit::ViewOutOfBounds> {
    let isa = Isa::detect();
    if let (Some(xd), Some(yd), true) =
        (T::as_f32(x.data), T::as_f32(y.data), sgemm::available(isa))
    {
        let src = |data, v: &MatRef<'_, T>| Src {
            data: SrcData::F32(data),
            off: 0,
            rs: v.rs,
            cs: v.cs,
        };
        let (xs, ys) = (src(xd, &x), src(yd, &y));
        if sgemm::preferred(&xs, &ys) {
            let (offsets, rs, cs, injective) = (dst.offsets, dst.rs, dst.cs, dst.injective);
            let data = T::as_f32_mut(dst.data).ok_or(jit::ViewOutOfBounds)?;
            let c = sgemm::Dst {
                data,
                offsets,
                rs,
                cs,
                injective,
            };
            return sgemm::sgemm_batched(
                isa,
                m,
                n,
                k,
                c,
                (xs, &x.offsets),
                (ys, &y.offsets),
                accumulate,
                threads,
            );
        }
    }
    jit::gemm_batched(m, n, k, dst, x, y, accumulate, one, zero, threads)
}

/// Adds the stored entries of `S[r0..r1, c0..c1]` (2:4 along columns; `c0` a multiple of 4,
/// `c1` one or the last column) into `out`, row-major with `c1 - c0` columns. Positions are
/// two bits, so they stay inside their group; a malformed group naming one position twice adds
/// both values, as every other path does.
fn expand_window<T: Compute>(
    s: &SparseRef,
    r0: usize,
    r1: usize,
    c0: usize,
    c1: usize,
    out: &mut [T],
) {
    fn go<V: Elem, U: Compute>(
        s: &SparseRef,
        vals: &[V],
        (r0, r1, c0, c1): (usize, usize, usize, usize),
        out: &mut [U],
    ) {
        let k = s.shape[1];
        let (half, words) = (k / 2, k.div_ceil(32));
        let w = c1 - c0;
        let one_row = |(i, row): (usize, &mut [U])| {
            let r = r0 + i;
            let meta = &s.idx[r * words..(r + 1) * words];
            let rv = &vals[r * half..(r + 1) * half];
            for v in c0 / 2..c1 / 2 {
                let word = meta[v / 16] as u32;
                let at = 4 * (v / 2) + ((word >> (2 * (v % 16))) & 3) as usize - c0;
                row[at] += rv[v].widen::<U>();
            }
        };
        let out = &mut out[..(r1 - r0) * w];
        if out.len() >= PAR_EXPAND {
            out.par_chunks_mut(w.max(1)).enumerate().for_each(one_row);
        } else {
            out.chunks_mut(w.max(1)).enumerate().for_each(one_row);
        }
    }
    let win = (r0, r1, c0, c1);
    match vals(&s.values) {
        Vals::F32(v) => go(s, v, win, out),
        Vals::F64(v) => go(s, v, win, out),
        Vals::F16(v) => go(s, v, win, out),
        Vals::BF16(v) => go(s, v, win, out),
    }
}
