//! BSR × dense kernels, the sparse operand on the left or the right.

// Register tiles read best as index loops over their constant extents.
#![allow(clippy::needless_range_loop)]

use super::*;

/// Calls `$go!(MR, NV, MASK)` with the register tile for `mr` rows (8, 4, 2 or 1), two
/// vectors of columns or one, masked or not: one monomorphised micro-kernel per case.
macro_rules! tile_dispatch {
    ($go:ident, $mr:expr, $nv2:expr, $mask:expr) => {
        match ($mr, $nv2, $mask) {
            (8, true, _) => $go!(8, 2, false),
            (4, true, _) => $go!(4, 2, false),
            (2, true, _) => $go!(2, 2, false),
            (1, true, _) => $go!(1, 2, false),
            (8, false, false) => $go!(8, 1, false),
            (4, false, false) => $go!(4, 1, false),
            (2, false, false) => $go!(2, 1, false),
            (1, false, false) => $go!(1, 1, false),
            (8, false, true) => $go!(8, 1, true),
            (4, false, true) => $go!(4, 1, true),
            (2, false, true) => $go!(2, 1, true),
            _ => $go!(1, 1, true),
        }
    };
}

// ---------------------------------------------------------------- BSR left

#[allow(clippy::too_many_arguments)]
pub(in crate::spmm::simd) unsafe fn bsr_left(
    isa: Isa,
    ptr: &[i32],
    idx: &[i32],
    vals: ValSlice,
    br: usize,
    bc: usize,
    d: Mat,
    c: MatMut,
    accumulate: bool,
) {
    isa_dispatch!(
        isa,
        bsr_left,
        (
            ptr: &[i32],
            idx: &[i32],
            vals: ValSlice,
            br: usize,
            bc: usize,
            d: Mat,
            c: MatMut,
            accumulate: bool
        ),
        bsr_left_impl
    )
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn bsr_left_impl<V: Vf>(
    ptr: &[i32],
    idx: &[i32],
    vals: ValSlice,
    br: usize,
    bc: usize,
    d: Mat,
    c: MatMut,
    accumulate: bool,
) {
    let nbr = ptr.len() - 1;
    let n = d.cols;
    let per = br * bc;
    let dp = d.data.as_ptr().add(d.off);
    let cp = c.data.as_mut_ptr().add(c.off);
    let (ldd, ldc) = (d.ld, c.ld);
    if n == 1 && (d.rows <= 1 || ldd == 1) {
        match vals {
            ValSlice::F32(v) => {
                bsr_mv::<V, f32>(ptr, idx, v.as_ptr(), br, bc, dp, cp, ldc, accumulate)
            }
            ValSlice::F16(v) => {
                bsr_mv::<V, f16>(ptr, idx, v.as_ptr(), br, bc, dp, cp, ldc, accumulate)
            }
            ValSlice::BF16(v) => {
                bsr_mv::<V, bf16>(ptr, idx, v.as_ptr(), br, bc, dp, cp, ldc, accumulate)
            }
        }
        return;
    }
    let mut buf: Vec<f32> = Vec::new();
    for ib in 0..nbr {
        let (b0, b1) = (ptr[ib] as usize, ptr[ib + 1] as usize);
        let nb = b1 - b0;
        let a: *const f32 = match vals {
            ValSlice::F32(v) => v.as_ptr().add(b0 * per),
            ValSlice::F16(v) => {
                buf.resize(nb * per, 0.0);
                widen_ptr::<V, f16>(v.as_ptr().add(b0 * per), buf.as_mut_ptr(), nb * per);
                buf.as_ptr()
            }
            ValSlice::BF16(v) => {
                buf.resize(nb * per, 0.0);
                widen_ptr::<V, bf16>(v.as_ptr().add(b0 * per), buf.as_mut_ptr(), nb * per);
                buf.as_ptr()
            }
        };
        let cols = idx.as_ptr().add(b0);
        let crow = cp.add(ib * br * ldc);
        #[inline(always)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn tile<V: Vf, const MR: usize, const NV: usize, const MASK: bool>(
            nb: usize,
            cols: *const i32,
            a: *const f32,
            per: usize,
            bc: usize,
            dp: *const f32,
            ldd: usize,
            c: *mut f32,
            ldc: usize,
            rem: usize,
            accumulate: bool,
        ) {
            let mut acc = init_acc::<V, MR, NV, MASK>(c, ldc, rem, accumulate);
            for b in 0..nb {
                let jb = *cols.add(b) as usize * bc;
                ukr::<V, MR, NV, MASK>(
                    &mut acc,
                    bc,
                    a.add(b * per),
                    bc,
                    dp.add(jb * ldd),
                    ldd,
                    rem,
                );
            }
            store_acc::<V, MR, NV, MASK>(&acc, c, ldc, rem);
        }
        let w = V::W;
        let mut j0 = 0;
        while j0 < n {
            let left = n - j0;
            let (nv2, nvw, mask) = col_step(left, w);
            let mut r0 = 0;
            while r0 < br {
                let mr = pick_mr::<V>(br - r0);
                let ar = a.add(r0 * bc);
                let dj = dp.add(j0);
                let cr = crow.add(r0 * ldc + j0);
                macro_rules! go {
                    ($mr:literal, $nv:literal, $m:literal) => {
                        tile::<V, $mr, $nv, $m>(
                            nb, cols, ar, per, bc, dj, ldd, cr, ldc, nvw, accumulate,
                        )
                    };
                }
                tile_dispatch!(go, mr, nv2, mask);
                r0 += mr;
            }
            j0 += nvw;
        }
    }
}

/// The next column step of `left` columns with `w`-lane vectors: two full vectors, one, or a
/// masked remainder, as `(two vectors, columns, masked)`.
#[inline(always)]
fn col_step(left: usize, w: usize) -> (bool, usize, bool) {
    if left >= 2 * w {
        (true, 2 * w, false)
    } else if left >= w {
        (false, w, false)
    } else {
        (false, left, true)
    }
}

#[inline(always)]
fn pick_mr<V: Vf>(left: usize) -> usize {
    let mr = left.min(V::MR);
    if mr >= 8 {
        8
    } else if mr >= 4 {
        4
    } else if mr >= 2 {
        2
    } else {
        1
    }
}

/// How many blocks ahead the BSR mat-vec prefetches (8 KiB for 32×32 f32 blocks).
const PF_BLOCKS: usize = 2;

/// BSR mat-vec: per block row, stream its blocks once, one vector accumulator per row
/// (kept on the stack), reduced at the end.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn bsr_mv<V: Vf, E: Ld>(
    ptr: &[i32],
    idx: &[i32],
    a: *const E,
    br: usize,
    bc: usize,
    x: *const f32,
    y: *mut f32,
    ldy: usize,
    accumulate: bool,
) {
    const RG: usize = 64;
    let nbr = ptr.len() - 1;
    let per = br * bc;
    let full = bc / V::W * V::W;
    let rem = bc - full;
    let mut acc = [V::zero(); RG];
    for ib in 0..nbr {
        let (b0, b1) = (ptr[ib] as usize, ptr[ib + 1] as usize);
        let mut r0 = 0;
        while r0 < br {
            let rg = (br - r0).min(RG);
            for a in acc.iter_mut().take(rg) {
                *a = V::zero();
            }
            for b in b0..b1 {
                let xb = x.add(*idx.as_ptr().add(b) as usize * bc);
                let ab = a.add(b * per + r0 * bc);
                // Prefetch the values PF_BLOCKS blocks ahead, one line per 64 bytes (a
                // prefetch past the array never faults).
                let ahead = ab.wrapping_add(PF_BLOCKS * per) as *const i8;
                let bytes = rg * bc * std::mem::size_of::<E>();
                let mut off = 0;
                while off < bytes {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(off));
                    off += 64;
                }
                let mut q = 0;
                while q < full {
                    let xv = V::load(xb.add(q));
                    for (r, acc_r) in acc.iter_mut().enumerate().take(rg) {
                        *acc_r = V::fma(E::ld::<V>(ab.add(r * bc + q)), xv, *acc_r);
                    }
                    q += V::W;
                }
                if rem > 0 {
                    let xv = V::load_n(xb.add(q), rem);
                    for (r, acc_r) in acc.iter_mut().enumerate().take(rg) {
                        *acc_r = V::fma(E::ld_n::<V>(ab.add(r * bc + q), rem), xv, *acc_r);
                    }
                }
            }
            for (r, acc_r) in acc.iter().enumerate().take(rg) {
                let p = y.add((ib * br + r0 + r) * ldy);
                let s = acc_r.hsum();
                *p = if accumulate { *p + s } else { s };
            }
            r0 += rg;
        }
    }
}

// ---------------------------------------------------------------- BSR right

#[allow(clippy::too_many_arguments)]
pub(in crate::spmm::simd) unsafe fn bsr_right(
    isa: Isa,
    col: &ColIndex,
    vals: &[f32],
    br: usize,
    bc: usize,
    d: Mat,
    c: MatMut,
    accumulate: bool,
) {
    isa_dispatch!(
        isa,
        bsr_right,
        (
            col: &ColIndex,
            vals: &[f32],
            br: usize,
            bc: usize,
            d: Mat,
            c: MatMut,
            accumulate: bool
        ),
        bsr_right_impl
    )
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn bsr_right_impl<V: Vf>(
    col: &ColIndex,
    vals: &[f32],
    br: usize,
    bc: usize,
    d: Mat,
    c: MatMut,
    accumulate: bool,
) {
    let nbc = col.ptr.len() - 1;
    let per = br * bc;
    let dp = d.data.as_ptr().add(d.off);
    let cp = c.data.as_mut_ptr().add(c.off);
    let (ldd, ldc) = (d.ld, c.ld);
    let rows = c.rows;
    let vp = vals.as_ptr();
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<V: Vf, const MR: usize, const NV: usize, const MASK: bool>(
        ents: &[(u32, u32)],
        vp: *const f32,
        per: usize,
        br: usize,
        bc: usize,
        d: *const f32,
        ldd: usize,
        c: *mut f32,
        ldc: usize,
        rem: usize,
        accumulate: bool,
    ) {
        let mut acc = init_acc::<V, MR, NV, MASK>(c, ldc, rem, accumulate);
        for &(i, p) in ents {
            ukr::<V, MR, NV, MASK>(
                &mut acc,
                br,
                d.add(i as usize * br),
                ldd,
                vp.add(p as usize * per),
                bc,
                rem,
            );
        }
        store_acc::<V, MR, NV, MASK>(&acc, c, ldc, rem);
    }
    for jb in 0..nbc {
        let ents = &col.entries[col.ptr[jb]..col.ptr[jb + 1]];
        let w = V::W;
        let mut q0 = 0;
        while q0 < bc {
            let left = bc - q0;
            let (nv2, nvw, mask) = col_step(left, w);
            let mut r0 = 0;
            while r0 < rows {
                let mr = pick_mr::<V>(rows - r0);
                let dr = dp.add(r0 * ldd);
                let cr = cp.add(r0 * ldc + jb * bc + q0);
                let vq = vp.add(q0);
                macro_rules! go {
                    ($mr:literal, $nv:literal, $m:literal) => {
                        tile::<V, $mr, $nv, $m>(
                            ents, vq, per, br, bc, dr, ldd, cr, ldc, nvw, accumulate,
                        )
                    };
                }
                tile_dispatch!(go, mr, nv2, mask);
                r0 += mr;
            }
            q0 += nvw;
        }
    }
}
