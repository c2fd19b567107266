//! 2:4 × dense kernels: the small-n permute kernel and the broadcast kernel.

// Register tiles read best as index loops over their constant extents.
#![allow(clippy::needless_range_loop)]

use super::*;

// ---------------------------------------------------------------- 2:4, small n

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(in crate::spmm::simd) unsafe fn two_four_small(
    vals: ValSlice,
    meta: &[i32],
    k: usize,
    xt: Mat,
    c: MatMut,
    accumulate: bool,
) {
    match vals {
        ValSlice::F32(v) => tf_small::<f32>(v.as_ptr(), meta, k, xt, c, accumulate),
        ValSlice::F16(v) => tf_small::<f16>(v.as_ptr(), meta, k, xt, c, accumulate),
        ValSlice::BF16(v) => tf_small::<bf16>(v.as_ptr(), meta, k, xt, c, accumulate),
    }
}

/// Two rows at a time share the loads of `xt` but read two streams of values and meta:
/// for a mat-vec (memory-bound) one stream is faster, from n = 2 on pairs are.
const TWO_ROWS_FROM_N: usize = 1;
/// How many rows ahead the 2:4 kernel prefetches its values and meta.
const PF_ROWS: usize = 4;

#[inline(always)]
unsafe fn tf_small<E: Ld>(
    vals: *const E,
    meta: &[i32],
    k: usize,
    xt: Mat,
    c: MatMut,
    accumulate: bool,
) {
    let n = c.cols;
    let rows = c.rows;
    let cp = (c.data.as_mut_ptr().add(c.off), c.ld);
    // Blocks of words (32 columns each) small enough that the n rows of xt they cover
    // stay in L1 (32 KiB) while every row of c passes over them.
    let words = k.div_ceil(32);
    let kw = (256 / n.max(1)).max(1);
    let mut w0 = 0;
    while w0 < words {
        let w1 = (w0 + kw).min(words);
        let first = w0 == 0 && !accumulate;
        let mut r = 0;
        macro_rules! go {
            ($r:literal, $n:literal) => {
                tf_rows::<E, $r, $n>(vals, meta, k, &xt, cp, r, (w0, w1), first)
            };
        }
        while r < rows {
            if r + 2 <= rows && n > TWO_ROWS_FROM_N {
                match n {
                    1 => go!(2, 1),
                    2 => go!(2, 2),
                    3 => go!(2, 3),
                    4 => go!(2, 4),
                    5 => go!(2, 5),
                    6 => go!(2, 6),
                    7 => go!(2, 7),
                    _ => go!(2, 8),
                }
                r += 2;
            } else {
                match n {
                    1 => go!(1, 1),
                    2 => go!(1, 2),
                    3 => go!(1, 3),
                    4 => go!(1, 4),
                    5 => go!(1, 5),
                    6 => go!(1, 6),
                    7 => go!(1, 7),
                    _ => go!(1, 8),
                }
                r += 1;
            }
        }
        w0 = w1;
    }
}

/// Rows `r..r + R` of a 2:4 matrix (along k) times `xtᵀ` (N columns): per chunk of 16
/// kept values (one meta word, 32 columns), decode the column of each lane, permute the
/// 32-column window of every `xt` row into place and multiply-add.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tf_rows<E: Ld, const R: usize, const N: usize>(
    vals: *const E,
    meta: &[i32],
    k: usize,
    xt: &Mat,
    (cp, ldc): (*mut f32, usize),
    r: usize,
    (w0, w1): (usize, usize),
    overwrite: bool,
) {
    let half = k / 2;
    let words = k.div_ceil(32);
    let shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let base = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
    let three = _mm512_set1_epi32(3);
    let xp = xt.data.as_ptr().add(xt.off);
    let mp = meta.as_ptr();
    let mut acc = [[_mm512_setzero_ps(); N]; R];
    // A mat-vec row has a single FMA chain: alternate two accumulators over words.
    let dual = N * R == 1;
    let mut acc_b = [[_mm512_setzero_ps(); N]; R];
    for w in w0..w1 {
        let ncols = (k - 32 * w).min(32);
        let nkept = ncols / 2;
        let mut vv = [_mm512_setzero_ps(); R];
        let mut ix = [_mm512_setzero_si512(); R];
        for i in 0..R {
            let row = r + i;
            let vptr = vals.add(row * half + 16 * w);
            // The values stream is the bottleneck: fetch the same word of the rows
            // PF_ROWS further on (the next pass over this word block reads them; a
            // prefetch past the end of the array is harmless, it never faults).
            _mm_prefetch::<_MM_HINT_T0>(vptr.wrapping_add(PF_ROWS * half) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(mp.wrapping_add((row + PF_ROWS) * words + w) as *const i8);
            vv[i] = if nkept == 16 {
                E::ld::<Z>(vptr).0
            } else {
                E::ld_n::<Z>(vptr, nkept).0
            };
            let word = _mm512_set1_epi32(*mp.add(row * words + w));
            let pos = _mm512_and_si512(_mm512_srlv_epi32(word, shifts), three);
            ix[i] = _mm512_add_epi32(pos, base);
        }
        for j in 0..N {
            let xr = xp.add(j * xt.ld + 32 * w);
            let (x0, x1) = if ncols == 32 {
                (_mm512_loadu_ps(xr), _mm512_loadu_ps(xr.add(16)))
            } else if ncols > 16 {
                (_mm512_loadu_ps(xr), Z::load_n(xr.add(16), ncols - 16).0)
            } else {
                let lo = if ncols == 16 {
                    _mm512_loadu_ps(xr)
                } else {
                    Z::load_n(xr, ncols).0
                };
                (lo, _mm512_setzero_ps())
            };
            for i in 0..R {
                let g = _mm512_permutex2var_ps(x0, ix[i], x1);
                if dual && w % 2 == 1 {
                    acc_b[i][j] = _mm512_fmadd_ps(vv[i], g, acc_b[i][j]);
                } else {
                    acc[i][j] = _mm512_fmadd_ps(vv[i], g, acc[i][j]);
                }
            }
        }
    }
    for i in 0..R {
        for j in 0..N {
            let p = cp.add((r + i) * ldc + j);
            let mut sum = acc[i][j];
            if dual {
                sum = _mm512_add_ps(sum, acc_b[i][j]);
            }
            let s = _mm512_reduce_add_ps(sum);
            *p = if overwrite { s } else { *p + s };
        }
    }
}

// ---------------------------------------------------------------- 2:4, broadcast

pub(in crate::spmm::simd) unsafe fn two_four_bcast(
    isa: Isa,
    vals: ValSlice,
    meta: &[i32],
    k: usize,
    d: Mat,
    c: MatMut,
    accumulate: bool,
) {
    isa_dispatch!(
        isa,
        two_four_bcast,
        (
            vals: ValSlice,
            meta: &[i32],
            k: usize,
            d: Mat,
            c: MatMut,
            accumulate: bool
        ),
        tf_bcast_impl
    )
}

#[inline(always)]
unsafe fn tf_bcast_impl<V: Vf>(
    vals: ValSlice,
    meta: &[i32],
    k: usize,
    d: Mat,
    c: MatMut,
    accumulate: bool,
) {
    // Half values are widened a block of rows at a time (reused across column tiles).
    const MB: usize = 64;
    let (half, words) = (k / 2, k.div_ceil(32));
    let mut buf: Vec<f32> = Vec::new();
    let mut m0 = 0;
    while m0 < c.rows {
        let mb = match vals {
            ValSlice::F32(_) => c.rows,
            _ => (c.rows - m0).min(MB),
        };
        let vp: *const f32 = match vals {
            ValSlice::F32(v) => v.as_ptr(),
            ValSlice::F16(v) => {
                buf.resize(mb * half, 0.0);
                widen_ptr::<V, f16>(v.as_ptr().add(m0 * half), buf.as_mut_ptr(), mb * half);
                buf.as_ptr()
            }
            ValSlice::BF16(v) => {
                buf.resize(mb * half, 0.0);
                widen_ptr::<V, bf16>(v.as_ptr().add(m0 * half), buf.as_mut_ptr(), mb * half);
                buf.as_ptr()
            }
        };
        let sub = MatMut {
            data: &mut *c.data,
            off: c.off + m0 * c.ld,
            rows: mb,
            cols: c.cols,
            ld: c.ld,
        };
        tf_bcast::<V, f32>(vp, &meta[m0 * words..], k, d, sub, accumulate);
        m0 += mb;
    }
}

#[inline(always)]
unsafe fn tf_bcast<V: Vf, E: Ld>(
    vals: *const E,
    meta: &[i32],
    k: usize,
    d: Mat,
    c: MatMut,
    accumulate: bool,
) {
    const MB: usize = 64;
    const GB: usize = 32;
    let n = c.cols;
    let rows = c.rows;
    let dp = d.data.as_ptr().add(d.off);
    let cp = c.data.as_mut_ptr().add(c.off);
    let (ldd, ldc) = (d.ld, c.ld);
    let mp = meta.as_ptr();
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<V: Vf, E: Ld, const R: usize, const NV: usize, const MASK: bool>(
        vals: *const E,
        mp: *const i32,
        k: usize,
        row: usize,
        dp: *const f32,
        ldd: usize,
        c: *mut f32,
        ldc: usize,
        rem: usize,
        groups: (usize, usize),
        load_c: bool,
    ) {
        let half = k / 2;
        let words = k.div_ceil(32);
        let mut acc = init_acc::<V, R, NV, MASK>(c, ldc, rem, load_c);
        for g in groups.0..groups.1 {
            for (i, acc_i) in acc.iter_mut().enumerate() {
                let rr = row + i;
                let word = *mp.add(rr * words + g / 8) as u32;
                let nib = (word >> (4 * (g % 8))) as usize;
                let c0 = 4 * g + (nib & 3);
                let c1 = 4 * g + ((nib >> 2) & 3);
                let s0 = V::splat(E::get(vals.add(rr * half + 2 * g)));
                let s1 = V::splat(E::get(vals.add(rr * half + 2 * g + 1)));
                let l0 = dp.add(c0 * ldd);
                let l1 = dp.add(c1 * ldd);
                for v in 0..NV {
                    let (x0, x1) = if MASK && v == NV - 1 {
                        (
                            V::load_n(l0.add(v * V::W), rem),
                            V::load_n(l1.add(v * V::W), rem),
                        )
                    } else {
                        (V::load(l0.add(v * V::W)), V::load(l1.add(v * V::W)))
                    };
                    acc_i[v] = V::fma(s0, x0, acc_i[v]);
                    acc_i[v] = V::fma(s1, x1, acc_i[v]);
                }
            }
        }
        store_acc::<V, R, NV, MASK>(&acc, c, ldc, rem);
    }
    let w = V::W;
    let mut m0 = 0;
    while m0 < rows {
        let m1 = (m0 + MB).min(rows);
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
            // Blocks of GB groups (4·GB rows of d) so the d tile stays in L1.
            let mut g0 = 0;
            while g0 < k / 4 {
                let g1 = (g0 + GB).min(k / 4);
                let load_c = accumulate || g0 > 0;
                let mut r = m0;
                while r < m1 {
                    let two = r + 2 <= m1;
                    let cr = cp.add(r * ldc + j0);
                    let dj = dp.add(j0);
                    macro_rules! go {
                        ($r:literal, $nv:literal, $m:literal) => {
                            tile::<V, E, $r, $nv, $m>(
                                vals,
                                mp,
                                k,
                                r,
                                dj,
                                ldd,
                                cr,
                                ldc,
                                nvw,
                                (g0, g1),
                                load_c,
                            )
                        };
                    }
                    match (two, nv4, mask) {
                        (true, true, _) => go!(2, 4, false),
                        (false, true, _) => go!(1, 4, false),
                        (true, false, false) => go!(2, 1, false),
                        (false, false, false) => go!(1, 1, false),
                        (true, false, true) => go!(2, 1, true),
                        (false, false, true) => go!(1, 1, true),
                    }
                    r += if two { 2 } else { 1 };
                }
                g0 = g1;
            }
            j0 += nvw;
        }
        m0 = m1;
    }
}
