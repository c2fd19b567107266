//! CSR × dense kernel (the sparse operand on the left).

// Register tiles read best as index loops over their constant extents.
#![allow(clippy::needless_range_loop)]

use super::*;

// ---------------------------------------------------------------- CSR left

pub(in crate::spmm::simd) unsafe fn csr_left(
    isa: Isa,
    ptr: &[i32],
    idx: &[i32],
    vals: ValSlice,
    d: Mat,
    c: MatMut,
    accumulate: bool,
) {
    isa_dispatch!(
        isa,
        csr_left,
        (
            ptr: &[i32],
            idx: &[i32],
            vals: ValSlice,
            d: Mat,
            c: MatMut,
            accumulate: bool
        ),
        csr_left_impl
    )
}

#[inline(always)]
unsafe fn csr_left_impl<V: Vf>(
    ptr: &[i32],
    idx: &[i32],
    vals: ValSlice,
    d: Mat,
    c: MatMut,
    accumulate: bool,
) {
    match vals {
        ValSlice::F32(v) => csr_rows::<V, f32>(ptr, idx, v.as_ptr(), d, c, accumulate),
        ValSlice::F16(v) => csr_rows::<V, f16>(ptr, idx, v.as_ptr(), d, c, accumulate),
        ValSlice::BF16(v) => csr_rows::<V, bf16>(ptr, idx, v.as_ptr(), d, c, accumulate),
    }
}

#[inline(always)]
unsafe fn csr_rows<V: Vf, E: Ld>(
    ptr: &[i32],
    idx: &[i32],
    vals: *const E,
    d: Mat,
    c: MatMut,
    accumulate: bool,
) {
    let m = c.rows;
    let n = c.cols;
    let dp = d.data.as_ptr().add(d.off);
    let cp = c.data.as_mut_ptr().add(c.off);
    let (ldd, ldc) = (d.ld, c.ld);
    let ip = idx.as_ptr();
    if n == 1 {
        for r in 0..m {
            let (a, b) = (ptr[r] as usize, ptr[r + 1] as usize);
            let mut s = [0f32; 4];
            let mut e = a;
            while e + 4 <= b {
                for (t, st) in s.iter_mut().enumerate() {
                    let kk = *ip.add(e + t) as usize;
                    *st += E::get(vals.add(e + t)) * *dp.add(kk * ldd);
                }
                e += 4;
            }
            while e < b {
                s[0] += E::get(vals.add(e)) * *dp.add(*ip.add(e) as usize * ldd);
                e += 1;
            }
            let sum = (s[0] + s[1]) + (s[2] + s[3]);
            let p = cp.add(r * ldc);
            *p = if accumulate { *p + sum } else { sum };
        }
        return;
    }
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<V: Vf, E: Ld, const NV: usize, const MASK: bool>(
        a: usize,
        b: usize,
        ip: *const i32,
        vals: *const E,
        dp: *const f32,
        ldd: usize,
        c: *mut f32,
        rem: usize,
        accumulate: bool,
    ) {
        // Two sets of accumulators (even and odd entries) for twice the independent
        // FMA chains.
        let mut acc = init_acc::<V, 1, NV, MASK>(c, 0, rem, accumulate);
        let mut acc2 = [[V::zero(); NV]; 1];
        let step = |acc: &mut [[V; NV]; 1], e: usize| {
            let s = V::splat(E::get(vals.add(e)));
            let l = dp.add(*ip.add(e) as usize * ldd);
            for v in 0..NV {
                let x = if MASK && v == NV - 1 {
                    V::load_n(l.add(v * V::W), rem)
                } else {
                    V::load(l.add(v * V::W))
                };
                acc[0][v] = V::fma(s, x, acc[0][v]);
            }
        };
        let mut e = a;
        while e + 2 <= b {
            step(&mut acc, e);
            step(&mut acc2, e + 1);
            e += 2;
        }
        if e < b {
            step(&mut acc, e);
        }
        for v in 0..NV {
            acc[0][v] = V::fma(V::splat(1.0), acc2[0][v], acc[0][v]);
        }
        store_acc::<V, 1, NV, MASK>(&acc, c, 0, rem);
    }
    let w = V::W;
    let mut j0 = 0;
    while j0 < n {
        let left = n - j0;
        let (nv4, nvw, mask) = if left >= 4 * w {
            (true, 4 * w, false)
        } else if left >= w {
            (false, w, false)
        } else {
            (false, left, true)
        };
        let dj = dp.add(j0);
        for r in 0..m {
            let (a, b) = (ptr[r] as usize, ptr[r + 1] as usize);
            let cr = cp.add(r * ldc + j0);
            match (nv4, mask) {
                (true, _) => tile::<V, E, 4, false>(a, b, ip, vals, dj, ldd, cr, nvw, accumulate),
                (false, false) => {
                    tile::<V, E, 1, false>(a, b, ip, vals, dj, ldd, cr, nvw, accumulate)
                }
                (false, true) => {
                    tile::<V, E, 1, true>(a, b, ip, vals, dj, ldd, cr, nvw, accumulate)
                }
            }
        }
        j0 += nvw;
    }
}
