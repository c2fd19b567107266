//! Tests of [`spmm`] against a brute-force dense f64 product. The sparse matrix is decoded
//! to dense here, independently of the crate's own conversions.

use super::*;
use proptest::prelude::*;
use tdsl_sparse::{Layout, SparseRef, Values};

/// A tiny deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0
    }
    /// A nonzero value exact in every dtype: k/8, k in ±1..=32.
    fn value(&mut self) -> f64 {
        let k = 1 + self.below(32) as i64;
        let k = if self.next() & 1 == 0 { k } else { -k };
        k as f64 / 8.0
    }
    fn dense(&mut self) -> f64 {
        (self.below(2001) as f64 - 1000.0) / 997.0
    }
}

/// The sparse arrays of a random matrix, values in f64 (exact in every dtype).
struct Sparse {
    shape: Vec<usize>,
    layout: Layout,
    ptr: Vec<i32>,
    idx: Vec<i32>,
    vals: Vec<f64>,
}

/// A random `rows × cols` matrix in `layout` with about `density` stored entries (blocks),
/// and `pad` entries (blocks) of capacity padding holding garbage.
fn random_sparse(
    rng: &mut Rng,
    layout: Layout,
    rows: usize,
    cols: usize,
    density: f64,
    pad: usize,
) -> Sparse {
    let mut ptr = vec![0i32];
    let mut idx = Vec::new();
    let mut vals = Vec::new();
    match layout {
        Layout::Coo => {
            for r in 0..rows {
                for c in 0..cols {
                    if rng.chance(density) {
                        idx.extend([r as i32, c as i32]);
                        vals.push(rng.value());
                    }
                }
            }
            ptr.push(vals.len() as i32);
            idx.extend(std::iter::repeat_n(0, 2 * pad));
            vals.extend(std::iter::repeat_n(1e30, pad));
        }
        Layout::Csr | Layout::Csc => {
            let (outer, inner) = if layout == Layout::Csr {
                (rows, cols)
            } else {
                (cols, rows)
            };
            for _ in 0..outer {
                for i in 0..inner {
                    if rng.chance(density) {
                        idx.push(i as i32);
                        vals.push(rng.value());
                    }
                }
                ptr.push(idx.len() as i32);
            }
            idx.extend(std::iter::repeat_n(0, pad));
            vals.extend(std::iter::repeat_n(1e30, pad));
        }
        Layout::Bsr { br, bc } => {
            for _ in 0..rows / br {
                for j in 0..cols / bc {
                    if rng.chance(density) {
                        idx.push(j as i32);
                        for _ in 0..br * bc {
                            // Some zeros inside stored blocks too.
                            vals.push(if rng.chance(0.8) { rng.value() } else { 0.0 });
                        }
                    }
                }
                ptr.push(idx.len() as i32);
            }
            idx.extend(std::iter::repeat_n(0, pad));
            vals.extend(std::iter::repeat_n(1e30, pad * br * bc));
        }
        Layout::TwoFour { axis } => {
            ptr.clear();
            let (nrows, ext) = if axis == 1 {
                (rows, cols)
            } else {
                (cols, rows)
            };
            let words = ext.div_ceil(32);
            idx = vec![0; nrows * words];
            for row in 0..nrows {
                for g in 0..ext / 4 {
                    let p0 = rng.below(3);
                    let p1 = p0 + 1 + rng.below(3 - p0);
                    for (slot, p) in [p0, p1].into_iter().enumerate() {
                        let v = 2 * g + slot;
                        idx[row * words + v / 16] |= (p as i32) << (2 * (v % 16));
                        vals.push(if rng.chance(density) {
                            rng.value()
                        } else {
                            0.0
                        });
                    }
                }
            }
        }
    }
    Sparse {
        shape: vec![rows, cols],
        layout,
        ptr,
        idx,
        vals,
    }
}

/// The dense row-major f64 matrix the arrays stand for (the test's own decoder).
fn decode(s: &Sparse) -> Vec<f64> {
    let (rows, cols) = (s.shape[0], s.shape[1]);
    let mut out = vec![0.0; rows * cols];
    match s.layout {
        Layout::Coo => {
            for e in 0..s.ptr[1] as usize {
                let (r, c) = (s.idx[2 * e] as usize, s.idx[2 * e + 1] as usize);
                out[r * cols + c] += s.vals[e];
            }
        }
        Layout::Csr => {
            for r in 0..rows {
                for e in s.ptr[r] as usize..s.ptr[r + 1] as usize {
                    out[r * cols + s.idx[e] as usize] += s.vals[e];
                }
            }
        }
        Layout::Csc => {
            for c in 0..cols {
                for e in s.ptr[c] as usize..s.ptr[c + 1] as usize {
                    out[s.idx[e] as usize * cols + c] += s.vals[e];
                }
            }
        }
        Layout::Bsr { br, bc } => {
            for bi in 0..rows / br {
                for b in s.ptr[bi] as usize..s.ptr[bi + 1] as usize {
                    let bj = s.idx[b] as usize;
                    for r in 0..br {
                        for c in 0..bc {
                            out[(bi * br + r) * cols + bj * bc + c] +=
                                s.vals[(b * br + r) * bc + c];
                        }
                    }
                }
            }
        }
        Layout::TwoFour { axis } => {
            let (nrows, ext) = if axis == 1 {
                (rows, cols)
            } else {
                (cols, rows)
            };
            let words = ext.div_ceil(32);
            for row in 0..nrows {
                for v in 0..ext / 2 {
                    let w = s.idx[row * words + v / 16] as u32;
                    let a = 4 * (v / 2) + ((w >> (2 * (v % 16))) & 3) as usize;
                    let (r, c) = if axis == 1 { (row, a) } else { (a, row) };
                    out[r * cols + c] += s.vals[row * (ext / 2) + v];
                }
            }
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Dtype {
    F32,
    F64,
    F16,
    BF16,
}

fn values_of(v: &[f64], dt: Dtype) -> Values {
    match dt {
        Dtype::F32 => Values::F32(v.iter().map(|&x| x as f32).collect()),
        Dtype::F64 => Values::F64(v.to_vec()),
        Dtype::F16 => Values::F16(v.iter().map(|&x| half::f16::from_f64(x)).collect()),
        Dtype::BF16 => Values::BF16(v.iter().map(|&x| half::bf16::from_f64(x)).collect()),
    }
}

/// How a dense view is laid out in its buffer.
#[derive(Debug, Clone, Copy)]
enum Strides {
    RowMajor,
    ColMajor,
    Padded,
    NegRows,
    NegCols,
    /// `rs = cs = 1`: elements shared between rows (fine for `d`, rejected for `c`).
    Hankel,
}

const ALL_STRIDES: [Strides; 5] = [
    Strides::RowMajor,
    Strides::ColMajor,
    Strides::Padded,
    Strides::NegRows,
    Strides::NegCols,
];

const D_STRIDES: [Strides; 6] = [
    Strides::RowMajor,
    Strides::ColMajor,
    Strides::Padded,
    Strides::NegRows,
    Strides::NegCols,
    Strides::Hankel,
];

/// `(buffer length, offset, rs, cs)` for a `rows × cols` view.
fn view_layout(rows: usize, cols: usize, st: Strides) -> (usize, usize, isize, isize) {
    let (r, c) = (rows as isize, cols as isize);
    let (len, off, rs, cs) = match st {
        Strides::RowMajor => (r * c, 0, c, 1),
        Strides::ColMajor => (r * c, 0, 1, r),
        Strides::Padded => (r * (c + 3) * 2 + 5, 5, 2 * (c + 3), 2),
        Strides::NegRows => (r * c + 2, (r - 1).max(0) * c + 1, -c, 1),
        Strides::NegCols => (r * c, (c - 1).max(0) * r, 1, -r),
        Strides::Hankel => (r + c, 0, 1, 1),
    };
    (len.max(1) as usize, off as usize, rs, cs)
}

fn pos(off: usize, r: usize, c: usize, rs: isize, cs: isize) -> usize {
    (off as isize + r as isize * rs + c as isize * cs) as usize
}

/// One product, checked against the f64 reference. Returns an error message on mismatch.
#[allow(clippy::too_many_arguments)]
fn run_case<T: Compute>(
    s: &Sparse,
    dt: Dtype,
    transposed: bool,
    side: Side,
    n: usize,
    accumulate: bool,
    dst: Strides,
    cst: Strides,
    isa: Isa,
    seed: u64,
) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let (sr, sc) = (s.shape[0], s.shape[1]);
    let (p, q) = if transposed { (sc, sr) } else { (sr, sc) };
    let (dr, dc, cr, cc) = match side {
        Side::Left => (q, n, p, n),
        Side::Right => (n, p, n, q),
    };
    let (dlen, doff, drs, dcs) = view_layout(dr, dc, dst);
    let (clen, coff, crs, ccs) = view_layout(cr, cc, cst);
    let ddata: Vec<T> = (0..dlen).map(|_| T::from_f64(rng.dense())).collect();
    let c0: Vec<T> = (0..clen).map(|_| T::from_f64(rng.dense())).collect();
    let dget = |i: usize, j: usize| ddata[pos(doff, i, j, drs, dcs)].to_f64();
    let mut cdata = c0.clone();
    let values = values_of(&s.vals, dt);
    let sref = SparseRef {
        shape: &s.shape,
        layout: s.layout,
        ptr: &s.ptr,
        idx: &s.idx,
        values: values.as_ref(),
    };
    spmm(
        sref,
        transposed,
        side,
        DenseRef {
            data: &ddata,
            offset: doff,
            rows: dr,
            cols: dc,
            rs: drs,
            cs: dcs,
        },
        DenseMut {
            data: &mut cdata,
            offset: coff,
            rows: cr,
            cols: cc,
            rs: crs,
            cs: ccs,
        },
        accumulate,
        isa,
    )
    .map_err(|e| e.to_string())?;
    // Decoded only now: a case with bad indices has returned its error above.
    let dense = decode(s);
    let seff = |i: usize, j: usize| {
        if transposed {
            dense[j * sc + i]
        } else {
            dense[i * sc + j]
        }
    };
    let tol = if T::IS_F64 { 1e-12 } else { 2e-5 };
    let mut touched = vec![false; clen];
    for i in 0..cr {
        for j in 0..cc {
            let (mut want, mut mag) = (0.0f64, 0.0f64);
            let kk = if side == Side::Left { q } else { p };
            for k in 0..kk {
                let prod = match side {
                    Side::Left => seff(i, k) * dget(k, j),
                    Side::Right => dget(i, k) * seff(k, j),
                };
                want += prod;
                mag += prod.abs();
            }
            let at = pos(coff, i, j, crs, ccs);
            touched[at] = true;
            if accumulate {
                want += c0[at].to_f64();
                mag += c0[at].to_f64().abs();
            }
            let got = cdata[at].to_f64();
            if (got - want).abs() > tol * mag + 1e-30 || got.is_nan() {
                return Err(format!(
                    "c[{i}, {j}] = {got}, want {want} (layout {:?}, {dt:?}, transposed \
                     {transposed}, {side:?}, n {n}, accumulate {accumulate}, d {dst:?}, c \
                     {cst:?}, {isa:?}, f64 {})",
                    s.layout,
                    T::IS_F64
                ));
            }
        }
    }
    for (at, t) in touched.iter().enumerate() {
        if !t && cdata[at] != c0[at] {
            return Err(format!("element {at} outside the view of c changed"));
        }
    }
    Ok(())
}

/// Layouts with shapes that exercise SIMD tails and partial tiles.
fn fixed_layouts() -> Vec<(Layout, usize, usize)> {
    vec![
        (Layout::Coo, 19, 23),
        (Layout::Csr, 19, 23),
        (Layout::Csc, 19, 23),
        (Layout::Bsr { br: 1, bc: 1 }, 13, 17),
        (Layout::Bsr { br: 2, bc: 3 }, 10, 21),
        (Layout::Bsr { br: 4, bc: 8 }, 20, 40),
        (Layout::Bsr { br: 16, bc: 16 }, 48, 80),
        (Layout::Bsr { br: 32, bc: 32 }, 64, 96),
        (Layout::TwoFour { axis: 1 }, 13, 40),
        (Layout::TwoFour { axis: 1 }, 6, 64),
        (Layout::TwoFour { axis: 0 }, 36, 11),
    ]
}

#[test]
fn every_layout_side_dtype_isa() {
    let mut counter = 0u64;
    let mut failures = Vec::new();
    let ns = [1usize, 3, 17, 64];
    for (layout, rows, cols) in fixed_layouts() {
        for density in [0.0, 0.35, 1.0] {
            for pad in [0usize, 2] {
                let mut rng = Rng::new(counter + 7);
                let s = random_sparse(&mut rng, layout, rows, cols, density, pad);
                for side in [Side::Left, Side::Right] {
                    for transposed in [false, true] {
                        for dt in [Dtype::F32, Dtype::F64, Dtype::F16, Dtype::BF16] {
                            for isa in Isa::available() {
                                counter += 1;
                                let n = ns[(counter % 4) as usize];
                                let accumulate = (counter / 4) % 2 == 1;
                                let dst = D_STRIDES[(counter / 2 % 6) as usize];
                                let cst = if counter.is_multiple_of(3) {
                                    ALL_STRIDES[(counter / 3 % 5) as usize]
                                } else {
                                    Strides::RowMajor
                                };
                                let r64 = run_case::<f64>(
                                    &s, dt, transposed, side, n, accumulate, dst, cst, isa, counter,
                                );
                                if let Err(e) = r64 {
                                    failures.push(e);
                                }
                                if dt != Dtype::F64 {
                                    // f32 with row-major views too, so the fast paths run.
                                    for (dst, cst) in
                                        [(dst, cst), (Strides::RowMajor, Strides::RowMajor)]
                                    {
                                        let r32 = run_case::<f32>(
                                            &s, dt, transposed, side, n, accumulate, dst, cst, isa,
                                            counter,
                                        );
                                        if let Err(e) = r32 {
                                            failures.push(e);
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}

#[test]
fn fast_paths_every_n() {
    // Row-major f32 views: the SIMD kernels for every n that has its own branch.
    let mut failures = Vec::new();
    for (layout, rows, cols) in [
        (Layout::Bsr { br: 32, bc: 32 }, 64, 96),
        (Layout::Bsr { br: 16, bc: 16 }, 48, 80),
        (Layout::Bsr { br: 2, bc: 3 }, 10, 21),
        (Layout::TwoFour { axis: 1 }, 13, 100),
        (Layout::TwoFour { axis: 1 }, 7, 128),
        (Layout::Csr, 19, 23),
        (Layout::Csc, 23, 19),
    ] {
        let mut rng = Rng::new(rows as u64 * 31 + cols as u64);
        let s = random_sparse(&mut rng, layout, rows, cols, 0.5, 1);
        for n in (1..=10).chain([15, 16, 17, 31, 32, 33, 48, 64, 65, 100]) {
            for isa in Isa::available() {
                for dt in [Dtype::F32, Dtype::F16, Dtype::BF16] {
                    for side in [Side::Left, Side::Right] {
                        for accumulate in [false, true] {
                            let transposed = layout == Layout::Csc;
                            if let Err(e) = run_case::<f32>(
                                &s,
                                dt,
                                transposed,
                                side,
                                n,
                                accumulate,
                                Strides::RowMajor,
                                Strides::RowMajor,
                                isa,
                                n as u64,
                            ) {
                                failures.push(e);
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}

#[test]
fn bad_arguments_are_errors() {
    let mut rng = Rng::new(3);
    let s = random_sparse(&mut rng, Layout::Bsr { br: 2, bc: 2 }, 4, 6, 1.0, 0);
    let values = values_of(&s.vals, Dtype::F32);
    let good = SparseRef {
        shape: &s.shape,
        layout: s.layout,
        ptr: &s.ptr,
        idx: &s.idx,
        values: values.as_ref(),
    };
    let d = vec![1f32; 6 * 2];
    let mut c = vec![0f32; 4 * 2];
    for isa in Isa::available() {
        let call = |sp: SparseRef, d: DenseRef<f32>, c: &mut [f32]| {
            spmm(
                sp,
                false,
                Side::Left,
                d,
                DenseMut::row_major(c, 4, 2),
                false,
                isa,
            )
        };
        assert!(call(good, DenseRef::row_major(&d, 6, 2), &mut c).is_ok());
        // Wrong d shape.
        assert!(call(good, DenseRef::row_major(&d, 5, 2), &mut c).is_err());
        // d view past its data.
        let dv = DenseRef {
            offset: 1,
            ..DenseRef::row_major(&d, 6, 2)
        };
        assert!(call(good, dv, &mut c).is_err());
        // Block column out of range.
        let mut idx = s.idx.clone();
        idx[0] = 3;
        let bad = SparseRef { idx: &idx, ..good };
        assert!(call(bad, DenseRef::row_major(&d, 6, 2), &mut c).is_err());
        // Offsets past the arrays.
        let mut ptr = s.ptr.clone();
        *ptr.last_mut().unwrap() += 1;
        let bad = SparseRef { ptr: &ptr, ..good };
        assert!(call(bad, DenseRef::row_major(&d, 6, 2), &mut c).is_err());
        // Decreasing offsets.
        let ptr = vec![0, 3, 2];
        let bad = SparseRef { ptr: &ptr, ..good };
        assert!(call(bad, DenseRef::row_major(&d, 6, 2), &mut c).is_err());
        // Values too short.
        let short = Values::F32(vec![1.0; 3]);
        let bad = SparseRef {
            values: short.as_ref(),
            ..good
        };
        assert!(call(bad, DenseRef::row_major(&d, 6, 2), &mut c).is_err());
        // f64 values with f32 compute.
        let v64 = values_of(&s.vals, Dtype::F64);
        let bad = SparseRef {
            values: v64.as_ref(),
            ..good
        };
        assert!(call(bad, DenseRef::row_major(&d, 6, 2), &mut c).is_err());
        // c overlapping itself.
        let mut c2 = vec![0f32; 8];
        let r = spmm(
            good,
            false,
            Side::Left,
            DenseRef::row_major(&d, 6, 2),
            DenseMut {
                data: &mut c2,
                offset: 0,
                rows: 4,
                cols: 2,
                rs: 1,
                cs: 1,
            },
            false,
            isa,
        );
        assert!(r.is_err());
    }
}

fn layout_strategy() -> impl Strategy<Value = (Layout, usize, usize)> {
    prop_oneof![
        (1usize..30, 1usize..30).prop_map(|(r, c)| (Layout::Coo, r, c)),
        (0usize..30, 1usize..30).prop_map(|(r, c)| (Layout::Csr, r, c)),
        (1usize..30, 0usize..30).prop_map(|(r, c)| (Layout::Csc, r, c)),
        (1usize..5, 1usize..5, 1usize..5, 1usize..5).prop_map(|(br, bc, a, b)| (
            Layout::Bsr { br, bc },
            br * a,
            bc * b
        )),
        (1usize..4, 1usize..4).prop_map(|(a, b)| (Layout::Bsr { br: 16, bc: 16 }, 16 * a, 16 * b)),
        (1usize..12, 1usize..20).prop_map(|(r, g)| (Layout::TwoFour { axis: 1 }, r, 4 * g)),
        (1usize..20, 1usize..12).prop_map(|(g, c)| (Layout::TwoFour { axis: 0 }, 4 * g, c)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_products(
        (layout, rows, cols) in layout_strategy(),
        density in prop_oneof![Just(0.0), 0.0f64..1.0, Just(1.0)],
        pad in 0usize..3,
        side_left in any::<bool>(),
        transposed in any::<bool>(),
        dt in prop_oneof![Just(Dtype::F32), Just(Dtype::F64), Just(Dtype::F16), Just(Dtype::BF16)],
        f64_compute in any::<bool>(),
        n in prop_oneof![Just(1usize), 1usize..70],
        accumulate in any::<bool>(),
        dst in 0usize..6,
        cst in 0usize..5,
        isa_pick in 0usize..3,
        seed in any::<u64>(),
    ) {
        let mut rng = Rng::new(seed);
        let s = random_sparse(&mut rng, layout, rows, cols, density, pad);
        let isas = Isa::available();
        let isa = isas[isa_pick % isas.len()];
        let side = if side_left { Side::Left } else { Side::Right };
        let (dst, cst) = (D_STRIDES[dst], ALL_STRIDES[cst]);
        let r = if f64_compute || dt == Dtype::F64 {
            run_case::<f64>(&s, dt, transposed, side, n, accumulate, dst, cst, isa, seed)
        } else {
            run_case::<f32>(&s, dt, transposed, side, n, accumulate, dst, cst, isa, seed)
        };
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
    }
}

#[test]
fn any_thread_count() {
    for threads in [1, 3, 5] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool");
        pool.install(|| {
            for (layout, rows, cols) in fixed_layouts() {
                let mut rng = Rng::new(threads as u64 + rows as u64);
                let s = random_sparse(&mut rng, layout, rows, cols, 0.4, 1);
                for isa in Isa::available() {
                    for side in [Side::Left, Side::Right] {
                        for (n, cst) in [(1, Strides::RowMajor), (17, Strides::NegRows)] {
                            let r = run_case::<f32>(
                                &s,
                                Dtype::F16,
                                false,
                                side,
                                n,
                                true,
                                Strides::RowMajor,
                                cst,
                                isa,
                                7,
                            );
                            assert!(r.is_ok(), "{threads} threads: {}", r.unwrap_err());
                        }
                    }
                }
            }
        });
    }
}

#[test]
fn out_of_range_indices_are_errors_on_every_path() {
    for (layout, rows, cols) in [
        (Layout::Coo, 6, 8),
        (Layout::Csr, 6, 8),
        (Layout::Csc, 6, 8),
        (Layout::Bsr { br: 2, bc: 2 }, 6, 8),
    ] {
        let mut rng = Rng::new(11);
        let mut s = random_sparse(&mut rng, layout, rows, cols, 1.0, 0);
        // The last stored index (a column, or a row for CSC) one past its extent.
        let last = s.idx.len() - 1;
        s.idx[last] = match layout {
            Layout::Bsr { bc, .. } => (cols / bc) as i32,
            Layout::Csc => rows as i32,
            _ => cols as i32,
        };
        for isa in Isa::available() {
            for side in [Side::Left, Side::Right] {
                for transposed in [false, true] {
                    let r = run_case::<f32>(
                        &s,
                        Dtype::F32,
                        transposed,
                        side,
                        3,
                        false,
                        Strides::RowMajor,
                        Strides::RowMajor,
                        isa,
                        1,
                    );
                    assert!(r.is_err(), "{layout:?} {isa:?} {side:?} {transposed}");
                }
            }
        }
    }
}

#[test]
fn csr_matvec_every_row_length() {
    // The mat-vec: rows of every length around the vector widths (8, 16) and their
    // multiples, x contiguous and strided.
    let cols = 150;
    let lens: Vec<usize> = (0..=70).chain([95, 127, 128, 129, 150]).collect();
    let mut rng = Rng::new(77);
    let (mut ptr, mut idx, mut vals) = (vec![0i32], Vec::new(), Vec::new());
    for &len in &lens {
        let mut picked: Vec<usize> = (0..cols).collect();
        for i in 0..len {
            let j = i + rng.below(cols - i);
            picked.swap(i, j);
        }
        let mut row = picked[..len].to_vec();
        row.sort_unstable();
        for c in row {
            idx.push(c as i32);
            vals.push(rng.value());
        }
        ptr.push(idx.len() as i32);
    }
    let s = Sparse {
        shape: vec![lens.len(), cols],
        layout: Layout::Csr,
        ptr,
        idx,
        vals,
    };
    let mut failures = Vec::new();
    for isa in Isa::available() {
        for dt in [Dtype::F32, Dtype::F16, Dtype::BF16] {
            for accumulate in [false, true] {
                for (dst, cst) in [
                    (Strides::RowMajor, Strides::RowMajor),
                    (Strides::Padded, Strides::Padded),
                    (Strides::RowMajor, Strides::Padded),
                ] {
                    if let Err(e) =
                        run_case::<f32>(&s, dt, false, Side::Left, 1, accumulate, dst, cst, isa, 5)
                    {
                        failures.push(e);
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn max_index_matches_scalar() {
    // The AVX2 build of the index check against a plain fold: every length around the
    // vector widths, negative indices counting as huge.
    let mut rng = Rng::new(3);
    for len in (0usize..70).chain([127, 128, 129, 1000]) {
        for neg in [None, Some(0), Some(len / 2), Some(len.saturating_sub(1))] {
            let mut idx: Vec<i32> = (0..len).map(|_| rng.below(1 << 20) as i32).collect();
            if let (Some(at), true) = (neg, len > 0) {
                idx[at] = -1 - rng.below(5) as i32;
            }
            let want = idx.iter().map(|&i| i as u32).max().unwrap_or(0);
            assert_eq!(
                simd::max_index(&idx),
                want,
                "len {len}, negative at {neg:?}"
            );
        }
    }
}
