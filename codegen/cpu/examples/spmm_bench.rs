//! Timings of `tdsl_cpu::spmm::spmm` on 4096 × 4096 sparse matrices with 2 threads.
//!
//! `cargo run --release -p tdsl-cpu --example spmm_bench [filter]`
//!
//! Prints the median of 9 runs (after one warm-up) per case. With `AVX2=1` in the environment the 2:4 and
//! CSR cases are also timed with [`Isa::Avx2`]. Check that the machine is quiet
//! first (`uptime`): two cores are all it has.

use std::time::Instant;

use half::f16;
use tdsl_cpu::spmm::{spmm, DenseMut, DenseRef, Isa, Side};
use tdsl_sparse::{Layout, SparseTensor, Values};

const M: usize = 4096;
const K: usize = 4096;
const RUNS: usize = 9;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn value(&mut self) -> f32 {
        (self.unit() * 2.0 - 1.0) as f32
    }
}

fn values(v: Vec<f32>, half: bool) -> Values {
    if half {
        Values::F16(v.into_iter().map(f16::from_f32).collect())
    } else {
        Values::F32(v)
    }
}

/// Exactly `round(density · blocks)` blocks, spread evenly at random over the block rows.
fn bsr(rng: &mut Rng, br: usize, bc: usize, density: f64, half: bool) -> SparseTensor {
    let (nbr, nbc) = (M / br, K / bc);
    let mut ptr = vec![0i32];
    let mut idx = Vec::new();
    for _ in 0..nbr {
        for j in 0..nbc {
            if rng.unit() < density {
                idx.push(j as i32);
            }
        }
        ptr.push(idx.len() as i32);
    }
    let v: Vec<f32> = (0..idx.len() * br * bc).map(|_| rng.value()).collect();
    SparseTensor {
        shape: vec![M, K],
        layout: Layout::Bsr { br, bc },
        ptr,
        idx,
        values: values(v, half),
    }
}

fn csr(rng: &mut Rng, density: f64) -> SparseTensor {
    let mut ptr = vec![0i32];
    let mut idx = Vec::new();
    for _ in 0..M {
        for j in 0..K {
            if rng.unit() < density {
                idx.push(j as i32);
            }
        }
        ptr.push(idx.len() as i32);
    }
    let v: Vec<f32> = (0..idx.len()).map(|_| rng.value()).collect();
    SparseTensor {
        shape: vec![M, K],
        layout: Layout::Csr,
        ptr,
        idx,
        values: Values::F32(v),
    }
}

fn two_four(rng: &mut Rng, half: bool) -> SparseTensor {
    let words = K.div_ceil(32);
    let mut meta = vec![0i32; M * words];
    for row in 0..M {
        for g in 0..K / 4 {
            let p0 = (rng.next() % 3) as usize;
            let p1 = p0 + 1 + (rng.next() % (3 - p0 as u64)) as usize;
            for (slot, p) in [p0, p1].into_iter().enumerate() {
                let v = 2 * g + slot;
                meta[row * words + v / 16] |= (p as i32) << (2 * (v % 16));
            }
        }
    }
    let v: Vec<f32> = (0..M * K / 2).map(|_| rng.value()).collect();
    SparseTensor {
        shape: vec![M, K],
        layout: Layout::TwoFour { axis: 1 },
        ptr: Vec::new(),
        idx: meta,
        values: values(v, half),
    }
}

/// CPU time (ns) of every thread of this process so far, from `/proc` (Linux; 0 elsewhere).
fn cpu_ns() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Median wall time and median CPU time / 2 (what 2 uncontended threads would take when
/// the machine is shared), in ms per call. Short calls are repeated so that one timed run
/// lasts at least 20 ms (the CPU clock is read from `/proc`, which is coarse).
fn median_ms(mut f: impl FnMut()) -> (f64, f64) {
    let s = Instant::now();
    f();
    let once = s.elapsed().as_secs_f64();
    let reps = ((0.02 / once.max(1e-6)).ceil() as usize).clamp(1, 1000);
    let mut wall = Vec::new();
    let mut cpu = Vec::new();
    for _ in 0..RUNS {
        let c0 = cpu_ns();
        let s = Instant::now();
        for _ in 0..reps {
            f();
        }
        wall.push(s.elapsed().as_secs_f64() * 1e3 / reps as f64);
        cpu.push((cpu_ns() - c0) as f64 / 2e6 / reps as f64);
    }
    wall.sort_by(|a, b| a.total_cmp(b));
    cpu.sort_by(|a, b| a.total_cmp(b));
    (wall[RUNS / 2], cpu[RUNS / 2])
}

fn time_spmm(s: &SparseTensor, side: Side, n: usize, isa: Isa) -> (f64, f64) {
    let mut rng = Rng(99);
    let (dr, dc, cr, cc) = match side {
        Side::Left => (K, n, M, n),
        Side::Right => (n, M, n, K),
    };
    let d: Vec<f32> = (0..dr * dc).map(|_| rng.value()).collect();
    let mut c = vec![0f32; cr * cc];
    median_ms(|| {
        spmm(
            s.as_ref(),
            false,
            side,
            DenseRef::row_major(&d, dr, dc),
            DenseMut::row_major(&mut c, cr, cc),
            false,
            isa,
        )
        .expect("spmm");
    })
}

/// A plain dense mat-vec (rows in parallel), for the bandwidth sanity check.
fn dense_matvec(w: &[f32], x: &[f32], y: &mut [f32]) {
    use rayon::prelude::*;
    y.par_chunks_mut(64).enumerate().for_each(|(t, ys)| {
        for (i, yi) in ys.iter_mut().enumerate() {
            let row = &w[(t * 64 + i) * K..(t * 64 + i + 1) * K];
            let mut acc = [0f32; 16];
            for (a, b) in row.chunks_exact(16).zip(x.chunks_exact(16)) {
                for l in 0..16 {
                    acc[l] += a[l] * b[l];
                }
            }
            *yi = acc.iter().sum();
        }
    });
}

fn main() {
    let filter = std::env::args().nth(1).unwrap_or_default();
    let want = |name: &str| filter.is_empty() || name.contains(&filter);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("pool");
    let isa = Isa::detect();
    println!("isa {isa:?}, 2 threads, median of {RUNS} runs, M = K = {M}");
    println!(
        "{:<44} {:>10} {:>12} {:>10}",
        "case", "wall ms", "GFLOP/s", "cpu/2 ms"
    );
    let report = |name: &str, (ms, cpu): (f64, f64), flops: f64| {
        println!(
            "{name:<44} {ms:>10.3} {:>12.1} {cpu:>10.3}",
            flops / ms / 1e6
        );
    };
    pool.install(|| {
        let mut rng = Rng(0x1234_5678);
        if want("dense") {
            let w: Vec<f32> = (0..M * K).map(|_| rng.value()).collect();
            let x: Vec<f32> = (0..K).map(|_| rng.value()).collect();
            let mut y = vec![0f32; M];
            let ms = median_ms(|| dense_matvec(&w, &x, &mut y));
            report("dense matvec (plain rust)", ms, 2.0 * (M * K) as f64);
            let full = bsr(&mut rng, 32, 32, 1.0, false);
            let ms = time_spmm(&full, Side::Left, 256, isa);
            report(
                "dense via bsr 32x32 d=1.0 n=256",
                ms,
                2.0 * (M * K * 256) as f64,
            );
        }
        for (br, bc) in [(32, 32), (16, 16)] {
            for half in [false, true] {
                for density in [0.5, 0.25, 0.1, 0.05] {
                    let s = bsr(&mut rng, br, bc, density, half);
                    let nnz = s.ptr[M / br] as f64 * (br * bc) as f64;
                    let dt = if half { "f16" } else { "f32" };
                    for n in [256, 1] {
                        let name = format!("bsr {br}x{bc} {dt} d={density} n={n}");
                        if want(&name) {
                            let ms = time_spmm(&s, Side::Left, n, isa);
                            report(&name, ms, 2.0 * nnz * n as f64);
                        }
                    }
                    let name = format!("bsr {br}x{bc} {dt} d={density} right x[256]·W");
                    if want(&name) && !half && br == 32 {
                        let ms = time_spmm(&s, Side::Right, 256, isa);
                        report(&name, ms, 2.0 * nnz * 256.0);
                    }
                }
            }
        }
        for half in [false, true] {
            let s = two_four(&mut rng, half);
            let dt = if half { "f16" } else { "f32" };
            for n in [1, 2, 4, 8, 256] {
                let name = format!("2:4 {dt} n={n}");
                if want(&name) {
                    let ms = time_spmm(&s, Side::Left, n, isa);
                    report(&name, ms, (M * K * n) as f64);
                    if std::env::var("AVX2").is_ok() {
                        let ms = time_spmm(&s, Side::Left, n, Isa::Avx2);
                        report(&format!("{name} avx2"), ms, (M * K * n) as f64);
                    }
                }
            }
        }
        for density in [0.1, 0.01, 0.001] {
            let s = csr(&mut rng, density);
            let nnz = s.ptr[M] as f64;
            for n in [1, 256] {
                let name = format!("csr d={density} n={n}");
                if want(&name) {
                    let ms = time_spmm(&s, Side::Left, n, isa);
                    report(&name, ms, 2.0 * nnz * n as f64);
                    if std::env::var("AVX2").is_ok() {
                        let ms = time_spmm(&s, Side::Left, n, Isa::Avx2);
                        report(&format!("{name} avx2"), ms, 2.0 * nnz * n as f64);
                    }
                }
            }
        }
    });
}
