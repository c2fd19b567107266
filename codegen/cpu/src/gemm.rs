//! `LibCall::Gemm` on host buffers through the `gemm` crate.
//!
//! f32, f64 and f16 products whose three operands share one type run directly on the strided
//! buffers (`gemm` takes any signed row and column strides). Anything else (bf16, mixed types)
//! packs the operands into dense f32 (f64 if one operand is f64) temporaries, multiplies, and
//! rounds the result back to nearest even. An operand that is the destination buffer itself is
//! packed first, so the destination never overlaps an operand.

use half::{bf16, f16};
use tdsl_loop::{Data, ElemType, MatView};

use crate::jit::{self, MatMut, MatRef};
use crate::sgemm::{self, Src, SrcData};
use crate::spmm::Isa;
use crate::vmath;

/// The fields of a `LibCall::Gemm`.
pub(crate) struct GemmCall<'a> {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: &'a [u64],
    pub a: &'a MatView,
    pub b: &'a MatView,
    pub c: &'a MatView,
    pub accumulate: bool,
}

/// Element offsets of every batch of a view, batch axes in row-major order.
fn batch_offsets(v: &MatView, batch: &[u64]) -> Vec<isize> {
    let mut out = vec![v.offset as isize];
    for (ext, stride) in batch.iter().zip(&v.batch_strides) {
        let mut next = Vec::with_capacity(out.len() * *ext as usize);
        for o in &out {
            for i in 0..*ext as isize {
                next.push(o + i * *stride as isize);
            }
        }
        out = next;
    }
    out
}

/// An element type `gemm` multiplies natively.
trait Elem: Copy + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
    fn slice(d: &Data) -> Option<&[Self]>;
    fn slice_mut(d: &mut Data) -> Option<&mut [Self]>;
    fn from_f64(x: f64) -> Self;
    fn store(self, d: &mut Data, i: usize);
}

impl Elem for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    fn slice(d: &Data) -> Option<&[f32]> {
        match d {
            Data::F32(v) => Some(v),
            _ => None,
        }
    }
    fn slice_mut(d: &mut Data) -> Option<&mut [f32]> {
        match d {
            Data::F32(v) => Some(v),
            _ => None,
        }
    }
    fn from_f64(x: f64) -> f32 {
        x as f32
    }
    fn store(self, d: &mut Data, i: usize) {
        match d {
            Data::F32(v) => v[i] = self,
            Data::F64(v) => v[i] = self as f64,
            Data::F16(v) => v[i] = f16::from_f32(self),
            Data::BF16(v) => v[i] = bf16::from_f32(self),
            Data::I32(v) => v[i] = self as i32,
        }
    }
}

impl Elem for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    fn slice(d: &Data) -> Option<&[f64]> {
        match d {
            Data::F64(v) => Some(v),
            _ => None,
        }
    }
    fn slice_mut(d: &mut Data) -> Option<&mut [f64]> {
        match d {
            Data::F64(v) => Some(v),
            _ => None,
        }
    }
    fn from_f64(x: f64) -> f64 {
        x
    }
    fn store(self, d: &mut Data, i: usize) {
        d.set(i, self)
    }
}

impl Elem for f16 {
    const ZERO: f16 = f16::ZERO;
    const ONE: f16 = f16::ONE;
    fn slice(d: &Data) -> Option<&[f16]> {
        match d {
            Data::F16(v) => Some(v),
            _ => None,
        }
    }
    fn slice_mut(d: &mut Data) -> Option<&mut [f16]> {
        match d {
            Data::F16(v) => Some(v),
            _ => None,
        }
    }
    fn from_f64(x: f64) -> f16 {
        tdsl_sparse::dtype::f64_to_f16(x)
    }
    fn store(self, d: &mut Data, i: usize) {
        d.set(i, self.to_f64())
    }
}

/// A view packed densely: `[batch][rows][cols]`. The source type is matched once, not per
/// element, and a transposed view (torch's `[out, in]` weight read as `[in, out]`) is copied in
/// 32×32 tiles so each cache line it reads serves a whole tile.
fn pack<T: Elem>(d: &Data, v: &MatView, batch: &[u64], rows: u64, cols: u64) -> Vec<T> {
    fn go<S: Copy, T: Elem>(
        src: &[S],
        get: impl Fn(S) -> T,
        v: &MatView,
        offs: Vec<isize>,
        rows: usize,
        cols: usize,
    ) -> Vec<T> {
        const TILE: usize = 32;
        let (rs, cs) = (v.row_stride as isize, v.col_stride as isize);
        let per = rows * cols;
        let mut out = vec![T::ZERO; offs.len() * per];
        for (dst, o) in out.chunks_mut(per.max(1)).zip(offs) {
            for r0 in (0..rows).step_by(TILE) {
                for c0 in (0..cols).step_by(TILE) {
                    for r in r0..(r0 + TILE).min(rows) {
                        let base = o + r as isize * rs;
                        for c in c0..(c0 + TILE).min(cols) {
                            dst[r * cols + c] = get(src[(base + c as isize * cs) as usize]);
                        }
                    }
                }
            }
        }
        out
    }
    let offs = batch_offsets(v, batch);
    let (r, c) = (rows as usize, cols as usize);
    match d {
        Data::F32(s) => go(s, |x| T::from_f64(x as f64), v, offs, r, c),
        Data::F64(s) => go(s, T::from_f64, v, offs, r, c),
        Data::F16(s) => go(s, |x| T::from_f64(x.to_f64()), v, offs, r, c),
        Data::BF16(s) => go(s, |x| T::from_f64(x.to_f64()), v, offs, r, c),
        Data::I32(s) => go(s, |x| T::from_f64(x as f64), v, offs, r, c),
    }
}

fn unpack<T: Elem>(src: &[T], d: &mut Data, v: &MatView, batch: &[u64], rows: u64, cols: u64) {
    let mut it = src.iter();
    for o in batch_offsets(v, batch) {
        for r in 0..rows as isize {
            for c in 0..cols as isize {
                let i = o + r * v.row_stride as isize + c * v.col_stride as isize;
                if let Some(x) = it.next() {
                    x.store(d, i as usize);
                }
            }
        }
    }
}

fn dense_offsets(n_batch: usize, rows: u64, cols: u64) -> Vec<isize> {
    (0..n_batch)
        .map(|b| (b as u64 * rows * cols) as isize)
        .collect()
}

/// The view of one operand: its packed copy, or the buffer itself.
fn view_ref<'a, T: Elem>(
    v: &MatView,
    batch: &[u64],
    packed: &'a Option<Vec<T>>,
    rows: u64,
    cols: u64,
    n_batch: usize,
    buffer: Option<&'a Data>,
) -> Result<MatRef<'a, T>, String> {
    Ok(match packed {
        Some(p) => MatRef {
            data: p.as_slice(),
            offsets: dense_offsets(n_batch, rows, cols),
            rs: cols as isize,
            cs: 1,
        },
        None => MatRef {
            data: buffer.and_then(T::slice).ok_or("gemm: operand type")?,
            offsets: batch_offsets(v, batch),
            rs: v.row_stride as isize,
            cs: v.col_stride as isize,
        },
    })
}

/// Runs one GEMM. The views were bounds-checked by `check::check_bounds`; `jit::gemm_batched`
/// checks them again against the slices. Returns an error message on a backend bug.
pub(crate) fn run(g: &GemmCall<'_>, bufs: &mut [Data], threads: usize) -> Result<(), String> {
    let isa = Isa::detect();
    if sgemm::available(isa) {
        if let Some(r) = run_sgemm(g, bufs, threads, isa) {
            return r;
        }
    }
    let ty = |v: &MatView| bufs[v.buf.0 as usize].ty();
    let (ta, tb, tc) = (ty(g.a), ty(g.b), ty(g.c));
    if ta == tb && tb == tc {
        match tc {
            ElemType::F32 => return run_typed::<f32>(g, bufs, threads, true),
            ElemType::F64 => return run_typed::<f64>(g, bufs, threads, true),
            ElemType::F16 => return run_typed::<f16>(g, bufs, threads, true),
            _ => {}
        }
    }
    if [ta, tb, tc].contains(&ElemType::F64) {
        run_typed::<f64>(g, bufs, threads, false)
    } else {
        run_typed::<f32>(g, bufs, threads, false)
    }
}

/// One GEMM computing in `T`. Operands not of type `T`, or aliasing the destination, are
/// packed; a destination not of type `T` (`direct_c == false` or another type) goes through a
/// temporary.
fn run_typed<T: Elem>(
    g: &GemmCall<'_>,
    bufs: &mut [Data],
    threads: usize,
    direct_ok: bool,
) -> Result<(), String> {
    let (m, n, k) = (g.m, g.n, g.k);
    let n_batch: usize = g.batch.iter().product::<u64>() as usize;
    let ci = g.c.buf.0 as usize;
    let operand = |v: &MatView, rows: u64, cols: u64, bufs: &[Data]| -> Option<Vec<T>> {
        let d = &bufs[v.buf.0 as usize];
        let direct = direct_ok && T::slice(d).is_some() && v.buf.0 as usize != ci;
        (!direct).then(|| pack::<T>(d, v, g.batch, rows, cols))
    };
    let pa = operand(g.a, m, k, bufs);
    let pb = operand(g.b, k, n, bufs);
    let c_direct = T::slice(&bufs[ci]).is_some();
    let mut pc: Option<Vec<T>> = if c_direct {
        None
    } else if g.accumulate {
        Some(pack::<T>(&bufs[ci], g.c, g.batch, m, n))
    } else {
        Some(vec![T::ZERO; n_batch * (m * n) as usize])
    };

    // Borrow the destination mutably and the operand buffers shared, without overlap.
    let (before, rest) = bufs.split_at_mut(ci);
    let (c_data, after) = rest
        .split_first_mut()
        .ok_or("gemm: no destination buffer")?;
    let shared = |i: usize| -> Option<&Data> {
        match i.cmp(&ci) {
            std::cmp::Ordering::Less => before.get(i),
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Greater => after.get(i - ci - 1),
        }
    };
    let lhs = view_ref(g.a, g.batch, &pa, m, k, n_batch, shared(g.a.buf.0 as usize))?;
    let rhs = view_ref(g.b, g.batch, &pb, k, n, n_batch, shared(g.b.buf.0 as usize))?;
    let dst = match &mut pc {
        Some(p) => MatMut {
            data: p.as_mut_slice(),
            offsets: dense_offsets(n_batch, m, n),
            rs: n as isize,
            cs: 1,
            injective: true,
        },
        None => MatMut {
            data: T::slice_mut(c_data).ok_or("gemm: destination type")?,
            offsets: batch_offsets(g.c, g.batch),
            rs: g.c.row_stride as isize,
            cs: g.c.col_stride as isize,
            injective: crate::check::view_injective(g.c, g.batch, g.m, g.n),
        },
    };
    jit::gemm_batched(
        m as usize,
        n as usize,
        k as usize,
        dst,
        lhs,
        rhs,
        g.accumulate,
        T::ONE,
        T::ZERO,
        threads,
    )
    .map_err(|_| "gemm: a view does not fit its buffer".to_string())?;
    if let Some(p) = pc {
        unpack(&p, c_data, g.c, g.batch, m, n);
    }
    Ok(())
}

/// An operand as the packing GEMM reads it: f32, f16 or bf16 data, any strides.
fn sgemm_src<'a>(d: &'a Data, v: &MatView) -> Option<Src<'a>> {
    let data = match d {
        Data::F32(x) => SrcData::F32(x),
        Data::F16(x) => SrcData::F16(x),
        Data::BF16(x) => SrcData::Bf16(x),
        _ => return None,
    };
    Some(Src {
        data,
        off: 0,
        rs: v.row_stride as isize,
        cs: v.col_stride as isize,
    })
}

/// A product with an f32, f16 or bf16 destination and f32/f16/bf16 operands, neither of which
/// is the destination buffer, on tdsl's packing GEMM (`sgemm`): the operands are read in place,
/// whatever their layout and type. A 16-bit destination gets the f32 result through a
/// temporary, each value rounded once, as the generic path rounds it (which packed both
/// operands into f32 one element at a time, then ran the `gemm` crate: a bf16 × bf16 linear
/// layer at a fifth of the f32 speed). `None` when the product is not of that kind.
fn run_sgemm(
    g: &GemmCall<'_>,
    bufs: &mut [Data],
    threads: usize,
    isa: Isa,
) -> Option<Result<(), String>> {
    let ci = g.c.buf.0 as usize;
    if g.a.buf.0 as usize == ci || g.b.buf.0 as usize == ci {
        return None;
    }
    if matches!(bufs[ci], Data::F16(_) | Data::BF16(_)) {
        return run_sgemm_narrow(g, bufs, threads, isa);
    }
    let (before, rest) = bufs.split_at_mut(ci);
    let (c_data, after) = rest.split_first_mut()?;
    let Data::F32(c) = c_data else {
        return None;
    };
    let shared = |i: usize| -> Option<&Data> {
        if i < ci {
            before.get(i)
        } else {
            after.get(i - ci - 1)
        }
    };
    let a = sgemm_src(shared(g.a.buf.0 as usize)?, g.a)?;
    let b = sgemm_src(shared(g.b.buf.0 as usize)?, g.b)?;
    if !sgemm::preferred(&a, &b) {
        return None;
    }
    let c = sgemm::Dst {
        data: c,
        offsets: batch_offsets(g.c, g.batch),
        rs: g.c.row_stride as isize,
        cs: g.c.col_stride as isize,
        injective: crate::check::view_injective(g.c, g.batch, g.m, g.n),
    };
    Some(sgemm_call(g, c, a, b, threads, isa))
}

/// `sgemm::sgemm_batched` of call `g`'s operands `a` and `b` into `c`.
fn sgemm_call(
    g: &GemmCall<'_>,
    c: sgemm::Dst<'_>,
    a: Src<'_>,
    b: Src<'_>,
    threads: usize,
    isa: Isa,
) -> Result<(), String> {
    let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
    sgemm::sgemm_batched(
        isa,
        m,
        n,
        k,
        c,
        (a, &batch_offsets(g.a, g.batch)),
        (b, &batch_offsets(g.b, g.batch)),
        g.accumulate,
        threads,
    )
    .map_err(|_| "gemm: a view does not fit its buffer".to_string())
}

/// [`run_sgemm`] into a 16-bit destination: the product into a dense f32 temporary (holding the
/// destination's values first when the call accumulates), then each value rounded into place.
fn run_sgemm_narrow(
    g: &GemmCall<'_>,
    bufs: &mut [Data],
    threads: usize,
    isa: Isa,
) -> Option<Result<(), String>> {
    let ci = g.c.buf.0 as usize;
    // Here even f32 operands stay on `sgemm`: the `gemm` crate would need f32 copies of them.
    let a = sgemm_src(&bufs[g.a.buf.0 as usize], g.a)?;
    let b = sgemm_src(&bufs[g.b.buf.0 as usize], g.b)?;
    let (m, n) = (g.m as usize, g.n as usize);
    let n_batch: usize = g.batch.iter().product::<u64>() as usize;
    let mut tmp: Vec<f32> = if g.accumulate {
        pack::<f32>(&bufs[ci], g.c, g.batch, g.m, g.n)
    } else {
        vec![0.0; n_batch * m * n]
    };
    let c = sgemm::Dst {
        data: &mut tmp,
        offsets: dense_offsets(n_batch, g.m, g.n),
        rs: n as isize,
        cs: 1,
        injective: true,
    };
    if let Err(e) = sgemm_call(g, c, a, b, threads, isa) {
        return Some(Err(e));
    }
    // A dense row-major destination (the usual temporary) converts row by row across threads;
    // rows at unit column stride anywhere else (an output laid out `s (h e)`), one by one.
    let offsets = batch_offsets(g.c, g.batch);
    let base = offsets.first().copied().unwrap_or(0);
    let dense = g.c.col_stride == 1
        && g.c.row_stride == g.n as i64
        && base >= 0
        && offsets
            .iter()
            .enumerate()
            .all(|(i, &o)| o == base + (i * m * n) as isize);
    let (start, len) = (base as usize, n_batch * m * n);
    // Each row's first element in the destination, when every row lies inside it.
    let row_starts = || -> Option<Vec<usize>> {
        if g.c.col_stride != 1 {
            return None;
        }
        let d_len = bufs[ci].len();
        let mut out = Vec::with_capacity(n_batch * m);
        for &o in &offsets {
            for r in 0..m as isize {
                let at = usize::try_from(o + r * g.c.row_stride as isize).ok()?;
                (at + n <= d_len).then_some(())?;
                out.push(at);
            }
        }
        Some(out)
    };
    let starts = if dense { None } else { row_starts() };
    match (&mut bufs[ci], starts) {
        (Data::BF16(d), _) if dense && d.len() >= start + len => narrow_rows(
            &tmp,
            &mut d[start..start + len],
            n.max(1),
            threads,
            vmath::narrow_bf16,
        ),
        (Data::F16(d), _) if dense && d.len() >= start + len => narrow_rows(
            &tmp,
            &mut d[start..start + len],
            n.max(1),
            threads,
            vmath::narrow_f16,
        ),
        (Data::BF16(d), Some(starts)) => {
            for (i, at) in starts.into_iter().enumerate() {
                vmath::narrow_bf16(&tmp[i * n..(i + 1) * n], &mut d[at..at + n]);
            }
        }
        (Data::F16(d), Some(starts)) => {
            for (i, at) in starts.into_iter().enumerate() {
                vmath::narrow_f16(&tmp[i * n..(i + 1) * n], &mut d[at..at + n]);
            }
        }
        (d, _) => unpack(&tmp, d, g.c, g.batch, g.m, g.n),
    }
    Some(Ok(()))
}

/// `round(src, dst)` over rows of `n` spread over `threads` threads.
fn narrow_rows<T: Send>(
    src: &[f32],
    dst: &mut [T],
    n: usize,
    threads: usize,
    round: fn(&[f32], &mut [T]),
) {
    use rayon::prelude::*;
    if threads > 1 {
        dst.par_chunks_mut(n)
            .zip(src.par_chunks(n))
            .for_each(|(d, s)| round(s, d));
    } else {
        round(src, dst);
    }
}
