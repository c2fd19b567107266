//! Sparse library calls (`SpMM`, `Sparsify`, `Densify`) on host buffers, through `crate::spmm` and `tdsl-sparse`.
//!
//! The kernels are safe code that check their own arguments; sparse products run on the
//! current rayon pool with the best instruction set this CPU has.

use crate::spmm::{self as kernels, DenseMut, DenseRef, Isa};
use tdsl_loop::{data, Data, LibCall, MatView, Side};

/// Runs one sparse library call.
pub(crate) fn run(call: &LibCall, bufs: &mut [Data], _threads: usize) -> Result<(), String> {
    match call {
        LibCall::SpMM {
            m,
            n,
            k,
            s,
            transposed,
            side,
            d,
            c,
            accumulate,
        } => {
            if s.buffers().contains(&c.buf) || d.buf == c.buf {
                return Err("spmm writes one of its operands".into());
            }
            // Move the destination out so the operands can be borrowed beside it.
            let ci = c.buf.0 as usize;
            let mut out = std::mem::replace(
                bufs.get_mut(ci).ok_or("spmm destination does not exist")?,
                Data::F32(Vec::new()),
            );
            let shape: Vec<usize> = s.shape.iter().map(|&e| e as usize).collect();
            let r = (|| {
                let sr = data::sparse_ref(s, bufs, &shape)?;
                let dd = bufs
                    .get(d.buf.0 as usize)
                    .ok_or("spmm operand does not exist")?;
                let (dr, dc) = match side {
                    Side::Left => (*k, *n),
                    Side::Right => (*m, *k),
                };
                let ks = match side {
                    Side::Left => kernels::Side::Left,
                    Side::Right => kernels::Side::Right,
                };
                let isa = Isa::detect();
                match (dd, &mut out) {
                    (Data::F32(dv), Data::F32(cv)) => kernels::spmm(
                        sr,
                        *transposed,
                        ks,
                        dense_ref(dv, d, dr, dc)?,
                        dense_mut(cv, c, *m, *n)?,
                        *accumulate,
                        isa,
                    )
                    .map_err(|e| e.to_string()),
                    (Data::F64(dv), Data::F64(cv)) => kernels::spmm(
                        sr,
                        *transposed,
                        ks,
                        dense_ref(dv, d, dr, dc)?,
                        dense_mut(cv, c, *m, *n)?,
                        *accumulate,
                        isa,
                    )
                    .map_err(|e| e.to_string()),
                    (a, b) => Err(format!(
                        "spmm needs f32 or f64 operands of one type, not {} and {}",
                        a.ty(),
                        b.ty()
                    )),
                }
            })();
            bufs[ci] = out;
            r
        }
        LibCall::Sparsify { src, out, select } => data::sparsify_into(*src, out, *select, bufs),
        LibCall::Densify { s, dst } => {
            let shape: Vec<usize> = s.shape.iter().map(|&e| e as usize).collect();
            let dense = tdsl_sparse::prune::to_dense(data::sparse_ref(s, bufs, &shape)?)
                .map_err(|e| e.to_string())?;
            let dense = Data::from(dense);
            let target = bufs
                .get_mut(dst.0 as usize)
                .ok_or("densify destination does not exist")?;
            if target.ty() != dense.ty() || target.len() != dense.len() {
                return Err(format!(
                    "densify destination is {}[{}], not {}[{}]",
                    target.ty(),
                    target.len(),
                    dense.ty(),
                    dense.len()
                ));
            }
            *target = dense;
            Ok(())
        }
        LibCall::Gemm { .. } => Err("a GEMM is not a sparse call".into()),
    }
}

fn offset(v: &MatView) -> Result<usize, String> {
    usize::try_from(v.offset).map_err(|_| format!("view offset {} is negative", v.offset))
}

fn dense_ref<'a, T>(
    data: &'a [T],
    v: &MatView,
    rows: u64,
    cols: u64,
) -> Result<DenseRef<'a, T>, String> {
    Ok(DenseRef {
        data,
        offset: offset(v)?,
        rows: rows as usize,
        cols: cols as usize,
        rs: v.row_stride as isize,
        cs: v.col_stride as isize,
    })
}

fn dense_mut<'a, T>(
    data: &'a mut [T],
    v: &MatView,
    rows: u64,
    cols: u64,
) -> Result<DenseMut<'a, T>, String> {
    Ok(DenseMut {
        offset: offset(v)?,
        data,
        rows: rows as usize,
        cols: cols as usize,
        rs: v.row_stride as isize,
        cs: v.col_stride as isize,
    })
}
