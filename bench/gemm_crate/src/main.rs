//! `tdsl-bench-gemm-crate N [RUNS] [THREADS]`: times C = A·B (f32, N×N, row-major) with the
//! gemm crate and prints one JSON object. Used by bench/anchors.py as the "gemm crate" figure.
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let runs: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let threads: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(2);
    let min_secs: f64 = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(1.0);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .expect("rayon pool");

    // Deterministic pseudo-random inputs (values don't matter for timing).
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 40) as f32) / ((1u64 << 24) as f32) - 0.5
    };
    let a: Vec<f32> = (0..n * n).map(|_| next()).collect();
    let b: Vec<f32> = (0..n * n).map(|_| next()).collect();
    let mut c = vec![0.0f32; n * n];
    let par = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    let nn = n as isize;
    let once = |c: &mut [f32]| unsafe {
        gemm::gemm(
            n, n, n,
            c.as_mut_ptr(), 1, nn, false,
            a.as_ptr(), 1, nn,
            b.as_ptr(), 1, nn,
            0.0f32, 1.0f32, false, false, false, par,
        )
    };
    for _ in 0..2 {
        once(&mut c);
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < runs || (start.elapsed().as_secs_f64() < min_secs && times.len() < 1000) {
        let t = Instant::now();
        once(&mut c);
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let checksum: f64 = c.iter().map(|&x| x as f64).sum();
    times.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let median = if times.len() % 2 == 1 {
        times[times.len() / 2]
    } else {
        0.5 * (times[times.len() / 2 - 1] + times[times.len() / 2])
    };
    let flops = 2.0 * (n as f64).powi(3);
    println!(
        "{{\"n\": {}, \"threads\": {}, \"runs\": {}, \"median_ms\": {:.6}, \"min_ms\": {:.6}, \"gflops\": {:.3}, \"checksum\": {:.6e}}}",
        n, threads, times.len(), median, times[0], flops / (median * 1e6), checksum
    );
}
