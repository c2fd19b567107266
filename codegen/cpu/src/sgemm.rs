//! tdsl's own f32 GEMM: BLIS's loop nest around a register-tiled micro-kernel (AVX-512: 12×32,
//! AVX2+FMA: 6×16), chosen at run time.
//!
//! Why not only the `gemm` crate: its speed depends on the operands' layouts (a weight in torch's
//! `[out, in]` layout, multiplied from the right, ran at ~75% of the row-major speed), and it
//! takes one element type, so an f16 weight had to be converted into a whole f32 copy first. Here
//! both operands are packed block by block into the micro-kernel's panel order, converting
//! f16/bf16 to f32 on the way; the kernel itself never sees a stride or a type, so every layout
//! and every mix of f32/f16/bf16 runs at the same speed.
//!
//! Loop nest (Goto/van de Geijn; BLIS's names): `jc` over column blocks of `NC` → `pc` over `KC`
//! steps of k (pack B's `KC×NC` block, stays in L2) → `ic` over row blocks of `MC` (pack A's
//! `MC×KC` block) → `ir` over `MR`-row panels of A (one `KC×MR` panel stays in L1) → `jr` over
//! `NR`-column panels of B → the micro-kernel keeps an `MR×NR` tile of C in registers for all `KC`
//! steps. Threads split the columns (each packs its own share of B) or, for narrow products, the
//! rows. The ragged edges of a product are padded with zeros in the packed panels and stored
//! through a small tile buffer, so the kernel only ever runs full tiles.

use half::{bf16, f16};

use crate::jit::{self, Split, ViewOutOfBounds};
use crate::spmm::Isa;

/// One operand: `data[off + i*rs + j*cs]`, of one of the types the packing widens to f32.
#[derive(Clone, Copy)]
pub(crate) struct Src<'a> {
    pub data: SrcData<'a>,
    pub off: isize,
    pub rs: isize,
    pub cs: isize,
}

/// The element slice of a [`Src`], or a 2:4 matrix decoded while packing.
#[derive(Clone, Copy)]
pub(crate) enum SrcData<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    Bf16(&'a [bf16]),
    /// A 2:4 matrix as stored (the view's offset and strides are unused): no dense copy of it
    /// is ever made, its kept values go straight into the packed panels.
    TwoFour(TwoFour<'a>),
}

/// A stored 2:4 matrix `S` (`rows × cols`, groups of 4 along the columns: `vals` holds
/// `rows × cols/2` kept values, `meta` `ceil(cols/32)` words per row of 2-bit positions). The
/// operand is `S`, or `Sᵀ` when `transposed`.
#[derive(Clone, Copy)]
pub(crate) struct TwoFour<'a> {
    pub vals: TwoFourVals<'a>,
    pub meta: &'a [i32],
    pub rows: usize,
    pub cols: usize,
    pub transposed: bool,
}

/// The kept values of a [`TwoFour`].
#[derive(Clone, Copy)]
pub(crate) enum TwoFourVals<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    Bf16(&'a [bf16]),
}

impl SrcData<'_> {
    /// Whether a `rows × cols` view at `off` with strides `(rs, cs)` lies inside the data.
    fn fits(&self, off: isize, rs: isize, cs: isize, rows: usize, cols: usize) -> bool {
        let len = match self {
            SrcData::F32(s) => s.len(),
            SrcData::F16(s) => s.len(),
            SrcData::Bf16(s) => s.len(),
            SrcData::TwoFour(t) => return t.fits(off, rows, cols),
        };
        jit::in_bounds(len, off, rs, cs, rows, cols)
    }
}

impl Src<'_> {
    /// Relative cost of packing this `rows × cols` operand once: nothing for an f32 A read in
    /// place, twice the elements for a 2:4 operand (decoded group by group).
    fn pack_cost(&self, rows: usize, cols: usize) -> usize {
        let n = rows.saturating_mul(cols);
        match self.data {
            SrcData::TwoFour(_) => n.saturating_mul(2),
            _ => n,
        }
    }
}

impl TwoFour<'_> {
    /// The operand is exactly `rows × cols` and the stored arrays are as long as its shape
    /// says (positions are two bits, so decoding stays inside each group).
    fn fits(&self, off: isize, rows: usize, cols: usize) -> bool {
        let shape = if self.transposed {
            (self.cols, self.rows)
        } else {
            (self.rows, self.cols)
        };
        let n_vals = match self.vals {
            TwoFourVals::F32(v) => v.len(),
            TwoFourVals::F16(v) => v.len(),
            TwoFourVals::Bf16(v) => v.len(),
        };
        off == 0
            && shape == (rows, cols)
            && self.cols.is_multiple_of(4)
            && n_vals >= self.rows * self.cols / 2
            && self.meta.len() >= self.rows * self.cols.div_ceil(32)
    }
}

/// The cache blocking. `mc` is a multiple of every `MR`, `nc` of every `NR`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Blocking {
    pub kc: usize,
    pub mc: usize,
    pub nc: usize,
}

/// Measured on a Zen 5 core (48 KiB L1d, 1 MiB L2): within noise of the best of
/// kc ∈ {256, 384, 512} × mc ∈ {48, 120, 240} × nc ∈ {256, 512, 1024} on square products;
/// on the layer shapes this GEMM runs (torch-layout and f16 weights, 2:4 expanded, depth 1024
/// to 4096) kc = 384 and 512 measured 4–7% faster than 256 (mixed_gelu 45.6 → 41.7 ms,
/// linear_2to4 41.3 → 38.7, 512×4096 by 4096×1024ᵀ 11.2 → 9.8; bench/RESULTS.md).
/// Up to this many column panels, the column loop runs outside the row loop.
const JR_OUTER_MAX: usize = 2;

pub(crate) const BLOCKING: Blocking = Blocking {
    kc: 384,
    mc: 120,
    nc: 1024,
};

/// The micro-kernel for an instruction set: tile shape and entry point.
#[derive(Clone, Copy)]
struct Kernel {
    mr: usize,
    nr: usize,
    /// `tile(c) (+)= Ã·B̃` over `kc` steps, Ã packed (`MR` values per step); `c` row-major with
    /// row stride `rs_c`, `NR` contiguous columns. `add` loads the tile first.
    packed: KernelFn,
    /// The same with Ã read in place: `MR` rows `a_rs` apart, each contiguous along k.
    rows: KernelFn,
}

type KernelFn = unsafe fn(
    kc: usize,
    a: *const f32,
    a_rs: isize,
    b: *const f32,
    c: *mut f32,
    rs_c: isize,
    add: bool,
);

/// The micro-kernel this CPU runs for `isa`, if it has one (not for `Isa::Scalar`).
fn kernel_for(isa: Isa) -> Option<Kernel> {
    #[cfg(target_arch = "x86_64")]
    {
        if !isa.supported() {
            return None;
        }
        match isa {
            Isa::Avx512 => Some(Kernel {
                mr: x86::MR512,
                nr: x86::NR512,
                packed: x86::kernel_avx512::<true>,
                rows: x86::kernel_avx512::<false>,
            }),
            Isa::Avx2 => Some(Kernel {
                mr: x86::MR256,
                nr: x86::NR256,
                packed: x86::kernel_avx2::<true>,
                rows: x86::kernel_avx2::<false>,
            }),
            Isa::Scalar => None,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        None
    }
}

/// Whether [`sgemm`] runs on this CPU with `isa`.
pub(crate) fn available(isa: Isa) -> bool {
    kernel_for(isa).is_some()
}

/// Whether a product runs here rather than on the `gemm` crate: f32 × f32 with B's rows
/// contiguous is what the crate does best (within a few percent of this GEMM, measured from
/// 1024³ to 2048³ and on batched attention shapes); everything else (a transposed B such as a
/// torch-layout weight, an f16/bf16 operand) runs faster here (bench/RESULTS.md).
pub(crate) fn preferred(a: &Src<'_>, b: &Src<'_>) -> bool {
    // (A 2:4 operand has no other GEMM; its caller decides.)
    // Under `TDSL_ISA` every product runs here: the crate dispatches on the CPU alone.
    let all_f32 = matches!((a.data, b.data), (SrcData::F32(_), SrcData::F32(_)));
    !(all_f32 && b.cs == 1) || Isa::capped()
}

/// A destination pointer that may cross threads (each thread writes its own rows or columns).
#[derive(Clone, Copy)]
struct DstPtr(*mut f32);
// SAFETY: `sgemm`'s threads write disjoint elements of an injective destination.
unsafe impl Send for DstPtr {}
unsafe impl Sync for DstPtr {}

/// `c(i, j) (+)= Σ_p a(i, p)·b(p, j)` for an `m×n` destination and depth `k`, on `threads`
/// threads, with the micro-kernel for `isa` (which must be [`available`]).
///
/// # Safety
/// Every element of the three views lies inside its allocation, `c` does not overlap `a` or
/// `b`, and with `threads > 1` the destination view is injective (no two `(i, j)` share an
/// element).
#[allow(clippy::too_many_arguments)]
unsafe fn product_raw<'a>(
    isa: Isa,
    blocking: Blocking,
    m: usize,
    n: usize,
    k: usize,
    cv: CView,
    a: Src<'a>,
    b: Src<'a>,
    accumulate: bool,
    threads: usize,
) {
    let Some(kern) = kernel_for(isa) else {
        unreachable!("sgemm called for an instruction set this CPU lacks")
    };
    if m == 0 || n == 0 {
        return;
    }
    if cv.cs != 1 && cv.rs.abs() == 1 && m > 1 {
        // A column-major destination: compute Cᵀ = Bᵀ·Aᵀ instead, whose rows are contiguous,
        // so the micro-kernel stores its tiles directly rather than element by element.
        let t = |v: Src<'a>| Src {
            rs: v.cs,
            cs: v.rs,
            ..v
        };
        let ct = CView {
            rs: cv.cs,
            cs: cv.rs,
            ..cv
        };
        return product_raw(isa, blocking, n, m, k, ct, t(b), t(a), accumulate, threads);
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                for j in 0..n {
                    *cv.at(i, j) = 0.0;
                }
            }
        }
        return;
    }
    let threads = threads.max(1);
    // Split the columns (each thread packs its share of B and all of A) or the rows (its share
    // of A, all of B): whichever packs less twice, as long as every thread gets two panels.
    let wide = n >= threads * 2 * kern.nr;
    let tall = m >= threads * 2 * kern.mr;
    let by_cols = wide && (!tall || a.pack_cost(m, k) <= b.pack_cost(k, n));
    let (extent, unit) = if by_cols { (n, kern.nr) } else { (m, kern.mr) };
    let per = extent.div_ceil(threads).div_ceil(unit) * unit;
    let parts: Vec<(usize, usize)> = (0..threads)
        .map(|t| ((t * per).min(extent), ((t + 1) * per).min(extent)))
        .filter(|(lo, hi)| lo < hi)
        .collect();
    let job = |&(lo, hi): &(usize, usize)| {
        let (rows, cols) = if by_cols {
            (0..m, lo..hi)
        } else {
            (lo..hi, 0..n)
        };
        // SAFETY: the caller's contract; the parts are disjoint row or column ranges.
        unsafe { block_product(kern, blocking, rows, cols, k, cv, a, b, accumulate) }
    };
    if parts.len() == 1 {
        job(&parts[0]);
    } else {
        use rayon::prelude::*;
        parts.par_iter().for_each(job);
    }
}

/// A batched destination: product `i` writes `data[offsets[i] + r*rs + c*cs]`.
pub(crate) struct Dst<'a> {
    pub data: &'a mut [f32],
    pub offsets: Vec<isize>,
    pub rs: isize,
    pub cs: isize,
    /// As `jit::MatMut::injective`.
    pub injective: bool,
}

/// Every product `i`: `c[i] (+)= a[i]·b[i]`, where operand `x[i]` is `x` at element offset
/// `offsets[i]`. Checks every view against its slice first; runs batches side by side or splits
/// each product, as [`jit::batch_split`] says. `isa` must be [`available`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm_batched(
    isa: Isa,
    m: usize,
    n: usize,
    k: usize,
    c: Dst<'_>,
    (a, ao): (Src<'_>, &[isize]),
    (b, bo): (Src<'_>, &[isize]),
    accumulate: bool,
    threads: usize,
) -> Result<(), ViewOutOfBounds> {
    let co = &c.offsets;
    if ao.len() != co.len() || bo.len() != co.len() {
        return Err(ViewOutOfBounds);
    }
    for i in 0..co.len() {
        if !jit::in_bounds(c.data.len(), co[i], c.rs, c.cs, m, n)
            || !a.data.fits(ao[i], a.rs, a.cs, m, k)
            || !b.data.fits(bo[i], b.rs, b.cs, k, n)
        {
            return Err(ViewOutOfBounds);
        }
    }
    let (rs, cs) = (c.rs, c.cs);
    let dst = DstPtr(c.data.as_mut_ptr());
    let product = |i: usize, threads: usize| {
        // SAFETY: every view was checked to lie inside its slice above; the destination is
        // borrowed mutably and the operands shared, so they do not overlap; `batch_split` gives
        // several threads to one product only for an injective destination, and runs batches
        // side by side only when their destinations are pairwise disjoint.
        unsafe {
            let p = dst;
            product_raw(
                isa,
                BLOCKING,
                m,
                n,
                k,
                CView {
                    ptr: DstPtr(p.0.offset(co[i])),
                    rs,
                    cs,
                },
                Src { off: ao[i], ..a },
                Src { off: bo[i], ..b },
                accumulate,
                threads,
            )
        }
    };
    match jit::batch_split(m, n, k, co, rs, cs, threads, c.injective) {
        Split::Inside(t) => (0..co.len()).for_each(|i| product(i, t)),
        Split::Batches(t) => {
            use rayon::prelude::*;
            (0..co.len())
                .into_par_iter()
                .with_min_len(co.len().div_ceil(t))
                .for_each(|i| product(i, 1));
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct CView {
    ptr: DstPtr,
    rs: isize,
    cs: isize,
}

impl CView {
    unsafe fn at(&self, i: usize, j: usize) -> *mut f32 {
        self.ptr
            .0
            .offset(i as isize * self.rs + j as isize * self.cs)
    }
}

/// The loop nest for the rows `rows` and columns `cols` of the destination.
#[allow(clippy::too_many_arguments)]
unsafe fn block_product(
    kern: Kernel,
    bl: Blocking,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    k: usize,
    c: CView,
    a: Src<'_>,
    b: Src<'_>,
    accumulate: bool,
) {
    let (mr, nr) = (kern.mr, kern.nr);
    // Packing buffers sized for this product, kept per thread: a fresh megabyte per product
    // would be a fresh mmap and its page faults for every one of a batch's small products.
    let kc_max = k.min(bl.kc);
    let a_len = rows.len().min(bl.mc).div_ceil(mr) * mr * kc_max;
    let b_len = cols.len().min(bl.nc).div_ceil(nr) * nr * kc_max;
    PACKS.with_borrow_mut(|packs| {
        let (pa, pb, tile) = packs.reserve(a_len, b_len, mr * nr);
        let mut jc = cols.start;
        while jc < cols.end {
            let nc = (cols.end - jc).min(bl.nc);
            let mut pc = 0;
            while pc < k {
                let kc = (k - pc).min(bl.kc);
                pack_operand(b, false, (jc, nc), (pc, kc), nr, pb);
                let add = accumulate || pc > 0;
                let mut ic = rows.start;
                while ic < rows.end {
                    let mc = (rows.end - ic).min(bl.mc);
                    // An f32 A with contiguous rows is read in place (packing it would cost as
                    // much as the product when n is small); only a ragged last panel is packed.
                    // Not when its rows are a multiple of 4 KiB apart: all of a panel's rows would
                    // fall into one L1 set (a 16384-wide A ran 3× slower in place).
                    let direct = match a.data {
                        SrcData::F32(d) if a.cs == 1 && (a.rs * 4) % 4096 != 0 => Some(d),
                        _ => None,
                    };
                    let full = mc / mr * mr;
                    match direct {
                        Some(_) if full < mc => {
                            pack_operand(a, true, (ic + full, mc - full), (pc, kc), mr, pa)
                        }
                        Some(_) => {}
                        None => pack_operand(a, true, (ic, mc), (pc, kc), mr, pa),
                    }
                    let pa: &[f32] = pa;
                    let tile_at = |ir: usize, jr: usize, tile: &mut [f32]| {
                        let tr = (mc - ir * mr).min(mr);
                        let (run, ap, a_rs) = match direct {
                            Some(d) if tr == mr => {
                                let at = a.off + (ic + ir * mr) as isize * a.rs + pc as isize;
                                (kern.rows, d.as_ptr().offset(at), a.rs)
                            }
                            Some(_) => (kern.packed, pa.as_ptr(), 1),
                            None => (kern.packed, pa.as_ptr().add(ir * mr * kc), 1),
                        };
                        let tc = (nc - jr * nr).min(nr);
                        let bp = pb.as_ptr().add(jr * nr * kc);
                        let cp = c.at(ic + ir * mr, jc + jr * nr);
                        if tr == mr && tc == nr && c.cs == 1 {
                            run(kc, ap, a_rs, bp, cp, c.rs, add);
                        } else {
                            run(kc, ap, a_rs, bp, tile.as_mut_ptr(), nr as isize, false);
                            for i in 0..tr {
                                for j in 0..tc {
                                    let q = cp.offset(i as isize * c.rs + j as isize * c.cs);
                                    let t = tile[i * nr + j];
                                    *q = if add { *q + t } else { t };
                                }
                            }
                        }
                    };
                    let (n_ir, n_jr) = (mc.div_ceil(mr), nc.div_ceil(nr));
                    if n_jr <= JR_OUTER_MAX {
                        // Few column panels: keep each B panel in L1 across the row panels.
                        for jr in 0..n_jr {
                            for ir in 0..n_ir {
                                tile_at(ir, jr, tile);
                            }
                        }
                    } else {
                        // Keep each A panel in L1 across the column panels (B's block is in L2).
                        for ir in 0..n_ir {
                            for jr in 0..n_jr {
                                tile_at(ir, jr, tile);
                            }
                        }
                    }
                    ic += mc;
                }
                pc += kc;
            }
            jc += nc;
        }
    })
}

thread_local! {
    static PACKS: std::cell::RefCell<Packs> = const { std::cell::RefCell::new(Packs(Vec::new(), Vec::new(), Vec::new())) };
}

/// One thread's packing buffers (A block, B block, edge tile), grown on demand.
struct Packs(Vec<f32>, Vec<f32>, Vec<f32>);

impl Packs {
    fn reserve(&mut self, a: usize, b: usize, t: usize) -> (&mut [f32], &mut [f32], &mut [f32]) {
        for (v, n) in [(&mut self.0, a), (&mut self.1, b), (&mut self.2, t)] {
            if v.len() < n {
                v.resize(n, 0.0);
            }
        }
        (&mut self.0[..a], &mut self.1[..b], &mut self.2[..t])
    }
}

/// Element types the packing widens to f32.
trait Widen: Copy {
    fn widen(self) -> f32;
    /// The slice itself when it already holds f32.
    fn f32s(data: &[Self]) -> Option<&[f32]> {
        let _ = data;
        None
    }
    /// Widens a contiguous run (F16C/AVX where `half` has it).
    fn widen_run(src: &[Self], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s.widen();
        }
    }
}

impl Widen for f32 {
    fn widen(self) -> f32 {
        self
    }
    fn f32s(data: &[f32]) -> Option<&[f32]> {
        Some(data)
    }
    fn widen_run(src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
}

impl Widen for f16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    fn widen_run(src: &[f16], dst: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        src.convert_to_f32_slice(dst);
    }
}

impl Widen for bf16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    fn widen_run(src: &[bf16], dst: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        src.convert_to_f32_slice(dst);
    }
}

/// Packs the operand block `(r0.., c0..)` of `rows×cols` into panels of `w` lines: panel `q` holds
/// lines `q*w..` (rows of A when `lines_are_rows`, columns of B otherwise), and step `p` of a panel
/// is `w` consecutive values. Lines past the block are zero.
///
/// For A (`lines_are_rows`): line = row `r0 + l`, step = column `c0 + p`.
/// For B: line = column `c0 + l`, step = row `r0 + p`.
#[allow(clippy::too_many_arguments)]
unsafe fn pack<S: Widen>(
    data: &[S],
    v: &Src<'_>,
    lines_are_rows: bool,
    first_line: usize,
    n_lines: usize,
    first_step: usize,
    steps: usize,
    w: usize,
    out: &mut [f32],
) {
    // Strides along a line's steps and between lines.
    let (step_stride, line_stride) = if lines_are_rows {
        (v.cs, v.rs)
    } else {
        (v.rs, v.cs)
    };
    let base = v.off
        + if lines_are_rows {
            first_line as isize * v.rs + first_step as isize * v.cs
        } else {
            first_step as isize * v.rs + first_line as isize * v.cs
        };
    let mut run = [0f32; 64];
    for q in 0..n_lines.div_ceil(w) {
        let panel = &mut out[q * w * steps..(q + 1) * w * steps];
        let lines = (n_lines - q * w).min(w);
        let at = |l: usize, p: usize| -> usize {
            (base + (q * w + l) as isize * line_stride + p as isize * step_stride) as usize
        };
        if line_stride == 1 && lines == w && w <= run.len() {
            // The panel's lines are adjacent: each step is one contiguous run of `w` values.
            for p in 0..steps {
                let s = at(0, p);
                S::widen_run(data.get_unchecked(s..s + w), &mut panel[p * w..(p + 1) * w]);
            }
        } else if step_stride == 1 {
            // Each line is contiguous along the steps. f32 lines go 8 at a time through an
            // in-register 8×8 transpose (a transposed weight's packing took a tenth of its
            // product element by element); the rest widen a run and scatter it.
            #[allow(unused_mut)]
            let mut first = 0;
            #[cfg(target_arch = "x86_64")]
            if let Some(d) = S::f32s(data) {
                // Groups of 8 lines, then one of 4 (a 12-line A panel's last third on AVX-512).
                type Transpose = unsafe fn(*const f32, isize, *mut f32, usize, usize);
                let groups: [(usize, Transpose); 2] = [
                    (8, x86::transpose8_into_panel),
                    (4, x86::transpose4_into_panel),
                ];
                for (g, transpose) in groups {
                    let whole = steps / g * g;
                    while first + g <= lines {
                        let l0 = first;
                        // SAFETY: lines l0..l0+g and steps 0..whole lie inside `d` (the
                        // caller's view check); the panel holds `steps × w` values; AVX2 is
                        // present wherever a micro-kernel runs.
                        transpose(
                            d.as_ptr().add(at(l0, 0)),
                            line_stride,
                            panel.as_mut_ptr().add(l0),
                            w,
                            whole,
                        );
                        for p in whole..steps {
                            for i in 0..g {
                                panel[p * w + l0 + i] = *d.get_unchecked(at(l0 + i, p));
                            }
                        }
                        first += g;
                    }
                }
            }
            // 16-bit lines: 8 at a time widened into a block of 64 steps, then transposed as
            // f32 (one value at a time, a bf16 A of a narrow product packed slower than it
            // multiplied).
            #[cfg(target_arch = "x86_64")]
            if S::f32s(data).is_none() {
                const RUN: usize = 64;
                let mut block = [0f32; 8 * RUN];
                while first + 8 <= lines {
                    let l0 = first;
                    let mut p0 = 0;
                    while p0 < steps {
                        let len = (steps - p0).min(RUN);
                        for i in 0..8 {
                            let s = at(l0 + i, p0);
                            S::widen_run(
                                data.get_unchecked(s..s + len),
                                &mut block[i * RUN..i * RUN + len],
                            );
                        }
                        let whole = len / 8 * 8;
                        // SAFETY: the block holds 8 lines of `whole` values, `RUN` apart; the
                        // panel's steps `p0..p0 + whole` hold `w` values from line 0, and
                        // `l0 + 8 <= lines <= w`; AVX2 is present wherever a micro-kernel runs.
                        x86::transpose8_into_panel(
                            block.as_ptr(),
                            RUN as isize,
                            panel.as_mut_ptr().add(p0 * w + l0),
                            w,
                            whole,
                        );
                        for p in whole..len {
                            for i in 0..8 {
                                panel[(p0 + p) * w + l0 + i] = block[i * RUN + p];
                            }
                        }
                        p0 += len;
                    }
                    first += 8;
                }
            }
            for l in first..lines {
                let s = at(l, 0);
                let mut p0 = 0;
                while p0 < steps {
                    let len = (steps - p0).min(run.len());
                    S::widen_run(data.get_unchecked(s + p0..s + p0 + len), &mut run[..len]);
                    for (t, x) in run[..len].iter().enumerate() {
                        *panel.get_unchecked_mut((p0 + t) * w + l) = *x;
                    }
                    p0 += len;
                }
            }
        } else {
            for p in 0..steps {
                for l in 0..lines {
                    panel[p * w + l] = data.get_unchecked(at(l, p)).widen();
                }
            }
        }
        if lines < w {
            for p in 0..steps {
                panel[p * w + lines..(p + 1) * w].fill(0.0);
            }
        }
    }
}

/// Packs an operand block into panels of `w` lines: A's rows `lines` and columns `steps`
/// (`lines_are_rows`), or B's columns `lines` and rows `steps`.
unsafe fn pack_operand(
    x: Src<'_>,
    lines_are_rows: bool,
    (first_line, n_lines): (usize, usize),
    (first_step, steps): (usize, usize),
    w: usize,
    out: &mut [f32],
) {
    let (l, n, p, k) = (first_line, n_lines, first_step, steps);
    match x.data {
        SrcData::F32(d) => pack(d, &x, lines_are_rows, l, n, p, k, w, out),
        SrcData::F16(d) => pack(d, &x, lines_are_rows, l, n, p, k, w, out),
        SrcData::Bf16(d) => pack(d, &x, lines_are_rows, l, n, p, k, w, out),
        SrcData::TwoFour(t) => pack_two_four(&t, lines_are_rows, (l, n), (p, k), w, out),
    }
}

/// Calls `put(column − c0, value)` for every kept value of one stored 2:4 row (`meta` its
/// position words, `vals` its kept values) whose column lies in `c0..c1`.
#[inline(always)]
fn decode<V: Widen>(
    meta: &[i32],
    vals: &[V],
    c0: usize,
    c1: usize,
    mut put: impl FnMut(usize, f32),
) {
    for g in c0 / 4..c1.div_ceil(4) {
        let word = meta[g / 8] as u32 >> (4 * (g % 8));
        let base = 4 * g;
        let (a, b) = (
            base + (word & 3) as usize,
            base + ((word >> 2) & 3) as usize,
        );
        let (x, y) = (vals[2 * g].widen(), vals[2 * g + 1].widen());
        if base >= c0 && base + 4 <= c1 {
            put(a - c0, x);
            put(b - c0, y);
        } else {
            for (col, v) in [(a, x), (b, y)] {
                if (c0..c1).contains(&col) {
                    put(col - c0, v);
                }
            }
        }
    }
}

/// [`pack`] for a 2:4 operand: lines `first_line..+n_lines` and steps `first_step..+steps` of
/// the operand (rows and columns for A, `lines_are_rows`; columns and rows for B), decoded
/// from the stored groups straight into the panels. A panel is zeroed, then each kept value
/// inside the window is added at its place (a malformed group naming one position twice adds
/// both values, as every other path does).
fn pack_two_four(
    t: &TwoFour<'_>,
    lines_are_rows: bool,
    (first_line, n_lines): (usize, usize),
    (first_step, steps): (usize, usize),
    w: usize,
    out: &mut [f32],
) {
    fn go<V: Widen>(
        t: &TwoFour<'_>,
        vals: &[V],
        lines_are_rows: bool,
        (first_line, n_lines): (usize, usize),
        (first_step, steps): (usize, usize),
        w: usize,
        out: &mut [f32],
    ) {
        let (half, words) = (t.cols / 2, t.cols.div_ceil(32));
        let stored = |r: usize| {
            (
                &t.meta[r * words..(r + 1) * words],
                &vals[r * half..(r + 1) * half],
            )
        };
        // The operand's lines are the stored rows when A is S or B is Sᵀ.
        let lines_are_stored_rows = lines_are_rows != t.transposed;
        for q in 0..n_lines.div_ceil(w) {
            let panel = &mut out[q * w * steps..(q + 1) * w * steps];
            panel.fill(0.0);
            let l0 = first_line + q * w;
            let lines = (n_lines - q * w).min(w);
            if lines_are_stored_rows {
                for l in 0..lines {
                    let (meta, rv) = stored(l0 + l);
                    decode(meta, rv, first_step, first_step + steps, |p, x| {
                        panel[p * w + l] += x
                    });
                }
            } else {
                for p in 0..steps {
                    let (meta, rv) = stored(first_step + p);
                    let row = &mut panel[p * w..p * w + lines];
                    decode(meta, rv, l0, l0 + lines, |l, x| row[l] += x);
                }
            }
        }
    }
    let win = (first_line, n_lines);
    let st = (first_step, steps);
    match t.vals {
        TwoFourVals::F32(v) => go(t, v, lines_are_rows, win, st, w, out),
        TwoFourVals::F16(v) => go(t, v, lines_are_rows, win, st, w, out),
        TwoFourVals::Bf16(v) => go(t, v, lines_are_rows, win, st, w, out),
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::transpose8_into_panel;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Copies 8 lines (`line_stride` apart, each contiguous) of `steps` values (a multiple of
    /// 8) into a panel whose step `p` holds `w` values from `dst + p·w`, lines at `dst..+8`:
    /// 8×8 blocks transposed in registers.
    ///
    /// # Safety
    /// AVX2 is present; the 8 lines of `steps` values and the panel's `steps` rows are in
    /// bounds.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub unsafe fn transpose8_into_panel(
        src: *const f32,
        line_stride: isize,
        dst: *mut f32,
        w: usize,
        steps: usize,
    ) {
        let next = src.wrapping_offset(8 * line_stride);
        let per_line = steps.div_ceil(16);
        let mut p0 = 0;
        while p0 < steps {
            // Prefetch the next 8 lines' runs (8 × steps/16 cache lines) over this group's
            // steps/8 iterations, 4 per iteration: a run is one kc block of a line (1 KiB),
            // too short for the hardware prefetcher to find, and a transposed weight's packing
            // waited on it (512×1024 by 1024×4096ᵀ on one thread: 19.0 → 18.3 ms). A
            // prefetch past the operand's end is harmless (it never faults).
            let t = p0 / 8;
            for u in 0..4 {
                let (l, c) = ((4 * t + u) / per_line, (4 * t + u) % per_line);
                if l < 8 {
                    let at = next
                        .wrapping_offset(l as isize * line_stride)
                        .wrapping_add(c * 16);
                    _mm_prefetch::<_MM_HINT_T0>(at as *const i8);
                }
            }
            let r: [__m256; 8] = std::array::from_fn(|i| {
                _mm256_loadu_ps(src.offset(i as isize * line_stride).add(p0))
            });
            let t0 = _mm256_unpacklo_ps(r[0], r[1]);
            let t1 = _mm256_unpackhi_ps(r[0], r[1]);
            let t2 = _mm256_unpacklo_ps(r[2], r[3]);
            let t3 = _mm256_unpackhi_ps(r[2], r[3]);
            let t4 = _mm256_unpacklo_ps(r[4], r[5]);
            let t5 = _mm256_unpackhi_ps(r[4], r[5]);
            let t6 = _mm256_unpacklo_ps(r[6], r[7]);
            let t7 = _mm256_unpackhi_ps(r[6], r[7]);
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            let cols = [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ];
            for (j, c) in cols.into_iter().enumerate() {
                _mm256_storeu_ps(dst.add((p0 + j) * w), c);
            }
            p0 += 8;
        }
    }

    /// [`transpose8_into_panel`] for 4 lines (`steps` a multiple of 4), 4×4 blocks on xmm
    /// registers.
    ///
    /// # Safety
    /// As for [`transpose8_into_panel`], with 4 lines.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub unsafe fn transpose4_into_panel(
        src: *const f32,
        line_stride: isize,
        dst: *mut f32,
        w: usize,
        steps: usize,
    ) {
        let mut p0 = 0;
        while p0 < steps {
            let r: [__m128; 4] =
                std::array::from_fn(|i| _mm_loadu_ps(src.offset(i as isize * line_stride).add(p0)));
            let t0 = _mm_unpacklo_ps(r[0], r[1]);
            let t1 = _mm_unpacklo_ps(r[2], r[3]);
            let t2 = _mm_unpackhi_ps(r[0], r[1]);
            let t3 = _mm_unpackhi_ps(r[2], r[3]);
            let cols = [
                _mm_movelh_ps(t0, t1),
                _mm_movehl_ps(t1, t0),
                _mm_movelh_ps(t2, t3),
                _mm_movehl_ps(t3, t2),
            ];
            for (j, c) in cols.into_iter().enumerate() {
                _mm_storeu_ps(dst.add((p0 + j) * w), c);
            }
            p0 += 4;
        }
    }

    pub const MR512: usize = 12;
    pub const NR512: usize = 32;
    pub const MR256: usize = 6;
    pub const NR256: usize = 16;

    /// One register-tiled micro-kernel: `MR` rows × two vectors of `W` lanes, `2·MR`
    /// accumulators, two B vectors and one broadcast of A per step. Instantiated for AVX-512
    /// and AVX2 below (the same loop over different intrinsics).
    macro_rules! micro_kernel {
        (
            $(#[$doc:meta])*
            $name:ident, $feature:literal, $mr:expr, $w:expr,
            $zero:ident, $load:ident, $store:ident, $splat:ident, $fma:ident, $add:ident,
            [$($i:literal)*]
        ) => {
            $(#[$doc])*
            #[target_feature(enable = $feature)]
            pub unsafe fn $name<const PACKED: bool>(
                kc: usize,
                a: *const f32,
                a_rs: isize,
                b: *const f32,
                c: *mut f32,
                rs_c: isize,
                add: bool,
            ) {
                // Packed: row i of step p at a[p*MR + i]; in place: at a[i*a_rs + p].
                let (a_rs, a_step) = if PACKED { (1, $mr) } else { (a_rs, 1) };
                let mut acc = [$zero(); 2 * $mr];
                let (mut a, mut b) = (a, b);
                for _ in 0..kc {
                    let b0 = $load(b);
                    let b1 = $load(b.add($w));
                    $(
                        let x = $splat(*a.offset($i * a_rs));
                        acc[2 * $i] = $fma(x, b0, acc[2 * $i]);
                        acc[2 * $i + 1] = $fma(x, b1, acc[2 * $i + 1]);
                    )*
                    a = a.add(a_step);
                    b = b.add(2 * $w);
                }
                for i in 0..$mr {
                    let p = c.offset(i as isize * rs_c);
                    let (mut v0, mut v1) = (acc[2 * i], acc[2 * i + 1]);
                    if add {
                        v0 = $add(v0, $load(p));
                        v1 = $add(v1, $load(p.add($w)));
                    }
                    $store(p, v0);
                    $store(p.add($w), v1);
                }
            }
        };
    }

    micro_kernel!(
        /// 12×32 tile on zmm registers.
        ///
        /// # Safety
        /// AVX-512F is present; `a` holds the 12 rows of `kc` steps (packed, or `a_rs` apart);
        /// `b` holds `kc*32` values; the tile at `c` (12 rows of 32 values, row stride `rs_c`)
        /// is writable.
        kernel_avx512, "avx512f", MR512, 16,
        _mm512_setzero_ps, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps, _mm512_fmadd_ps,
        _mm512_add_ps,
        [0 1 2 3 4 5 6 7 8 9 10 11]
    );

    micro_kernel!(
        /// 6×16 tile on ymm registers.
        ///
        /// # Safety
        /// AVX2 and FMA are present; `a` holds the 6 rows of `kc` steps (packed, or `a_rs`
        /// apart); `b` holds `kc*16` values; the tile at `c` (6 rows of 16 values, row stride
        /// `rs_c`) is writable.
        kernel_avx2, "avx2,fma", MR256, 8,
        _mm256_setzero_ps, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps, _mm256_fmadd_ps,
        _mm256_add_ps,
        [0 1 2 3 4 5]
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One operand's storage: `rows×cols` at `off` with strides `(rs, cs)` inside `len` elements.
    #[derive(Clone, Debug)]
    struct Layout {
        off: isize,
        rs: isize,
        cs: isize,
        len: usize,
    }

    /// Row-major, column-major, or padded rows, possibly read backwards, with an offset.
    fn layout(rows: usize, cols: usize, kind: u8, pad: usize, off: usize) -> Layout {
        let (r, c) = (rows.max(1) as isize, cols.max(1) as isize);
        let p = pad as isize;
        let (rs, cs) = match kind % 4 {
            0 => (c, 1),
            1 => (1, r),
            2 => (c + p, 1),
            _ => (-(c + p), 1),
        };
        let span = (rs.abs() * (r - 1) + cs.abs() * (c - 1)) as usize + 1;
        let off = off as isize + if rs < 0 { -rs * (r - 1) } else { 0 };
        Layout {
            off,
            rs,
            cs,
            len: off as usize + span,
        }
    }

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Small integers and halves: exact in f16, bf16 and every partial sum.
                ((x >> 40) % 17) as f32 * 0.5 - 4.0
            })
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn check(
        isa: Isa,
        bl: Blocking,
        (m, n, k): (usize, usize, usize),
        (ka, kb, kc): (u8, u8, u8),
        (ta, tb): (u8, u8),
        accumulate: bool,
        threads: usize,
        seed: u64,
    ) {
        let (la, lb, lc) = (
            layout(m, k, ka, 3, 1),
            layout(k, n, kb, 2, 5),
            layout(m, n, kc % 3, 1, 2),
        );
        let (av, bv, cv0) = (
            values(la.len, seed),
            values(lb.len, seed + 1),
            values(lc.len, seed + 2),
        );
        let a16: Vec<f16> = av.iter().map(|&x| f16::from_f32(x)).collect();
        let b16: Vec<bf16> = bv.iter().map(|&x| bf16::from_f32(x)).collect();
        let ad = match ta % 2 {
            0 => SrcData::F32(&av),
            _ => SrcData::F16(&a16),
        };
        let bd = match tb % 2 {
            0 => SrcData::F32(&bv),
            _ => SrcData::Bf16(&b16),
        };
        let mut want = cv0.clone();
        for i in 0..m {
            for j in 0..n {
                let mut s = 0f64;
                for p in 0..k {
                    let x = av[(la.off + i as isize * la.rs + p as isize * la.cs) as usize];
                    let y = bv[(lb.off + p as isize * lb.rs + j as isize * lb.cs) as usize];
                    s += x as f64 * y as f64;
                }
                let q = (lc.off + i as isize * lc.rs + j as isize * lc.cs) as usize;
                want[q] = if accumulate {
                    want[q] + s as f32
                } else {
                    s as f32
                };
            }
        }
        let mut got = cv0.clone();
        let cvw = CView {
            ptr: DstPtr(got.as_mut_ptr().wrapping_offset(lc.off)),
            rs: lc.rs,
            cs: lc.cs,
        };
        // SAFETY: the layouts above lie inside their vectors; the destination is a distinct
        // vector; every layout is injective.
        unsafe {
            product_raw(
                isa,
                bl,
                m,
                n,
                k,
                cvw,
                Src {
                    data: ad,
                    off: la.off,
                    rs: la.rs,
                    cs: la.cs,
                },
                Src {
                    data: bd,
                    off: lb.off,
                    rs: lb.rs,
                    cs: lb.cs,
                },
                accumulate,
                threads,
            )
        };
        // Every product and partial sum is exact, so the results agree bit for bit, and the
        // elements outside the destination view are untouched.
        assert_eq!(
            got, want,
            "{isa:?} {bl:?} m={m} n={n} k={k} layouts {ka} {kb} {kc}"
        );
    }

    fn isas() -> Vec<Isa> {
        [Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|&i| available(i))
            .collect()
    }

    #[test]
    fn edges_blocks_and_layouts() {
        if isas().is_empty() {
            eprintln!("skipped: this CPU has neither AVX2+FMA nor AVX-512");
        }
        let small = Blocking {
            kc: 5,
            mc: 24,
            nc: 64,
        };
        for isa in isas() {
            for bl in [small, BLOCKING] {
                for (m, n, k) in [
                    (0, 3, 2),
                    (3, 0, 2),
                    (2, 3, 0),
                    (1, 1, 1),
                    (13, 33, 7),
                    (12, 32, 5),
                    (25, 65, 11),
                    (49, 130, 17),
                    (7, 200, 3),
                ] {
                    for ka in 0..4 {
                        for kb in 0..4 {
                            let acc = (ka + kb) % 2 == 0;
                            check(isa, bl, (m, n, k), (ka, kb, ka + kb), (ka, kb), acc, 2, 7);
                        }
                    }
                }
            }
        }
    }

    /// A random 2:4 matrix (`rows × cols`): its stored arrays and its dense form.
    fn two_four(rows: usize, cols: usize, seed: u64) -> (Vec<f32>, Vec<i32>, Vec<f32>) {
        let vals = values(rows * cols / 2, seed);
        let words = cols.div_ceil(32);
        let mut meta = vec![0i32; rows * words];
        let mut dense = vec![0f32; rows * cols];
        let picks = values(rows * cols / 4, seed + 9);
        for r in 0..rows {
            for g in 0..cols / 4 {
                // Two distinct positions in increasing order, from the six pairs.
                let pair = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
                    [(picks[r * cols / 4 + g].abs() as usize) % 6];
                for (t, pos) in [pair.0, pair.1].into_iter().enumerate() {
                    let v = 2 * g + t;
                    meta[r * words + v / 16] |= (pos << (2 * (v % 16))) as i32;
                    dense[r * cols + 4 * g + pos] = vals[r * cols / 2 + v];
                }
            }
        }
        (vals, meta, dense)
    }

    #[test]
    fn two_four_operands_decode_into_the_panels() {
        let small = Blocking {
            kc: 6,
            mc: 24,
            nc: 32,
        };
        for isa in isas() {
            for bl in [small, BLOCKING] {
                for (sr, sc, other) in [(5, 8, 3), (37, 44, 70), (13, 64, 33)] {
                    let (vals, meta, dense) = two_four(sr, sc, sr as u64);
                    for transposed in [false, true] {
                        // The operand S' and its shape.
                        let (or, oc) = if transposed { (sc, sr) } else { (sr, sc) };
                        let at = |i: usize, j: usize| {
                            if transposed {
                                dense[j * sc + i]
                            } else {
                                dense[i * sc + j]
                            }
                        };
                        let tf = Src {
                            data: SrcData::TwoFour(TwoFour {
                                vals: TwoFourVals::F32(&vals),
                                meta: &meta,
                                rows: sr,
                                cols: sc,
                                transposed,
                            }),
                            off: 0,
                            rs: 0,
                            cs: 0,
                        };
                        for left in [true, false] {
                            // S'·d (d: oc × other) or d·S' (d: other × or).
                            let (m, k, n) = if left {
                                (or, oc, other)
                            } else {
                                (other, or, oc)
                            };
                            let dv = values(if left { k * n } else { m * k }, 3);
                            let dsrc = Src {
                                data: SrcData::F32(&dv),
                                off: 0,
                                rs: if left { n as isize } else { k as isize },
                                cs: 1,
                            };
                            let mut want = vec![0f32; m * n];
                            for i in 0..m {
                                for j in 0..n {
                                    want[i * n + j] = (0..k)
                                        .map(|p| {
                                            let (x, y) = if left {
                                                (at(i, p), dv[p * n + j])
                                            } else {
                                                (dv[i * k + p], at(p, j))
                                            };
                                            x as f64 * y as f64
                                        })
                                        .sum::<f64>()
                                        as f32;
                                }
                            }
                            let mut got = vec![f32::NAN; m * n];
                            let cv = CView {
                                ptr: DstPtr(got.as_mut_ptr()),
                                rs: n as isize,
                                cs: 1,
                            };
                            let (a, b) = if left { (tf, dsrc) } else { (dsrc, tf) };
                            // SAFETY: the operands fit (`TwoFour::fits` holds by
                            // construction, `d` is m×k or k×n row-major), `got` is m×n.
                            unsafe { product_raw(isa, bl, m, n, k, cv, a, b, false, 2) };
                            assert_eq!(got, want, "{isa:?} {sr}×{sc} t={transposed} left={left}");
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        #[test]
        fn agrees_with_the_naive_product(
            m in 0usize..60, n in 0usize..140, k in 0usize..40,
            ka in 0u8..4, kb in 0u8..4, kc in 0u8..3, ta in 0u8..2, tb in 0u8..2,
            accumulate: bool, threads in 1usize..4, small: bool, seed in 0u64..1000,
        ) {
            let bl = if small { Blocking { kc: 6, mc: 24, nc: 32 } } else { BLOCKING };
            for isa in isas() {
                check(isa, bl, (m, n, k), (ka, kb, kc), (ta, tb), accumulate, threads, seed);
            }
        }
    }
}
