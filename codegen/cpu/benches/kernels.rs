//! Micro-benchmarks of the CPU backend (plain `harness = false` main, medians of repeated runs):
//! vectorised f32 dot and row sum (GFLOP/s) under each code generation option, an elementwise
//! exp chain, kernel compile time, and f32 GEMM 1024³/2048³ through the `gemm` crate against
//! JIT'd triple loops. Run with `cargo bench -p tdsl-cpu --bench kernels` (add `-- quick` for a
//! shorter run).

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::*;
use tdsl_cpu::{CpuBackend, CpuOptions, Executable, OptLevel};
use tdsl_loop::*;

use ElemType::F32;

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// Median wall time of `exe.run` over `reps` runs after one warm-up.
fn time_run(exe: &Executable, bufs: &mut [Data], threads: usize, reps: usize) -> Duration {
    exe.run(bufs, threads).expect("runs");
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                black_box(exe.run(bufs, threads).expect("runs"));
                t.elapsed()
            })
            .collect(),
    )
}

fn f32_buf(name: &str, n: u64, role: Role) -> Buffer {
    buffer(name, F32, n, role)
}

/// `s[r] = Σ_j a[j]·b[j]` for `rows` repetitions over the same `n` elements (in cache), or with
/// `mul = false` the row sum `s[r] = Σ_j a[j]`.
fn dot_rows(rows: u64, n: u64, mul: bool) -> LoopProgram {
    let a = load(0, ix(0, &[(1, 1)]));
    let value = if mul {
        bin(BinOp::Mul, a, load(1, ix(0, &[(1, 1)])))
    } else {
        a
    };
    program(
        vec![
            f32_buf("a", n, Role::Input(0)),
            f32_buf("b", n, Role::Input(1)),
            f32_buf("s", rows, Role::Output(0)),
        ],
        vec![kernel(
            "dot",
            vec![range(
                0,
                rows,
                true,
                1,
                vec![
                    let_(0, F32, c(0.0)),
                    range(1, n, false, 4, vec![update(0, AccOp::Add, value)]),
                    store(2, ix(0, &[(0, 1)]), acc(0)),
                ],
            )],
        )],
    )
}

fn bench_reductions(quick: bool) {
    println!("## vectorised f32 reductions (single thread, data in L1/L2)");
    println!("| kernel | n | opt_level | accumulators | GFLOP/s |");
    println!("|---|---|---|---|---|");
    let reps = if quick { 5 } else { 21 };
    for (n, rows) in [(2048u64, 4096u64), (32768, 256)] {
        for mul in [true, false] {
            for opt_level in [OptLevel::None, OptLevel::Speed] {
                for n_acc in [1, 2, 4, 8] {
                    let mut be = CpuBackend::with_options(CpuOptions {
                        opt_level,
                        n_acc,
                        ..CpuOptions::default()
                    })
                    .expect("host");
                    let p = dot_rows(rows, n, mul);
                    let exe = be.compile(&p).expect("compiles");
                    let mut bufs = vec![
                        data(F32, &values(n as usize, 1)),
                        data(F32, &values(n as usize, 2)),
                        Data::zeros(F32, rows as usize),
                    ];
                    let t = time_run(&exe, &mut bufs, 1, reps);
                    let flops = (rows * n * if mul { 2 } else { 1 }) as f64;
                    println!(
                        "| {} | {n} | {opt_level:?} | {n_acc} | {:.1} |",
                        if mul { "dot" } else { "row sum" },
                        flops / t.as_secs_f64() / 1e9
                    );
                }
            }
        }
    }
}

fn bench_exp_chain(quick: bool) {
    println!("\n## elementwise exp chain y = 1 / (1 + exp(-x)) + 0.5·exp(x), f32");
    println!("| n | n_acc option (unroll ≤ 2) | threads | ns/element | Gelem/s |");
    println!("|---|---|---|---|---|");
    let n = 1u64 << 20;
    let x = || load(0, ix(0, &[(0, 1)]));
    let value = bin(
        BinOp::Add,
        bin(
            BinOp::Div,
            c(1.0),
            bin(BinOp::Add, c(1.0), un(UnOp::Exp, un(UnOp::Neg, x()))),
        ),
        bin(BinOp::Mul, c(0.5), un(UnOp::Exp, x())),
    );
    let p = program(
        vec![
            f32_buf("x", n, Role::Input(0)),
            f32_buf("y", n, Role::Output(0)),
        ],
        vec![kernel(
            "exp_chain",
            vec![range(
                0,
                n,
                true,
                4,
                vec![store(1, ix(0, &[(0, 1)]), value)],
            )],
        )],
    );
    let mut bufs = vec![
        data(F32, &values(n as usize, 3)),
        Data::zeros(F32, n as usize),
    ];
    for n_acc in [1, 2, 4] {
        let mut be = CpuBackend::with_options(CpuOptions {
            n_acc,
            ..CpuOptions::default()
        })
        .expect("host");
        let exe = be.compile(&p).expect("compiles");
        for threads in [1, 2] {
            let t = time_run(&exe, &mut bufs, threads, if quick { 3 } else { 11 });
            let tasks = exe.run(&mut bufs, threads).expect("runs").tasks;
            println!(
                "| {n} | {n_acc} | {threads} ({tasks} tasks) | {:.2} | {:.3} |",
                t.as_secs_f64() * 1e9 / n as f64,
                n as f64 / t.as_secs_f64() / 1e9
            );
        }
    }
}

/// A softmax kernel over `r`×`c` (three inner loops), for compile-time measurements.
fn softmax(r: u64, c_: u64) -> LoopProgram {
    let ci = c_ as i64;
    let x_at = |v: u32| load(0, ix(0, &[(0, ci), (v, 1)]));
    program(
        vec![
            f32_buf("x", r * c_, Role::Input(0)),
            f32_buf("y", r * c_, Role::Output(0)),
        ],
        vec![kernel(
            "softmax",
            vec![range(
                0,
                r,
                true,
                1,
                vec![
                    let_(0, F32, c(f64::NEG_INFINITY)),
                    range(1, c_, false, 4, vec![update(0, AccOp::Max, x_at(1))]),
                    let_(1, F32, c(0.0)),
                    range(
                        2,
                        c_,
                        false,
                        4,
                        vec![update(
                            1,
                            AccOp::Add,
                            un(UnOp::Exp, bin(BinOp::Sub, x_at(2), acc(0))),
                        )],
                    ),
                    range(
                        3,
                        c_,
                        false,
                        4,
                        vec![store(
                            1,
                            ix(0, &[(0, ci), (3, 1)]),
                            bin(
                                BinOp::Div,
                                un(UnOp::Exp, bin(BinOp::Sub, x_at(3), acc(0))),
                                acc(1),
                            ),
                        )],
                    ),
                ],
            )],
        )],
    )
}

fn bench_compile(quick: bool) {
    println!("\n## kernel compile time (cache miss: lower + define + finalize)");
    println!("| kernel | opt_level | median µs | p10 µs | p90 µs |");
    println!("|---|---|---|---|---|");
    let n = if quick { 50 } else { 400 };
    for opt_level in [OptLevel::None, OptLevel::Speed] {
        for (name, mk) in [
            (
                "dot (1 loop)",
                (|i| dot_rows(1, 64 + i, true)) as fn(u64) -> LoopProgram,
            ),
            ("softmax (3 loops)", |i| softmax(8, 64 + i)),
        ] {
            let mut be = CpuBackend::with_options(CpuOptions {
                opt_level,
                ..CpuOptions::default()
            })
            .expect("host");
            // Different extents make every program a cache miss.
            let mut ts: Vec<Duration> = (0..n)
                .map(|i| {
                    let p = mk(i);
                    let t = Instant::now();
                    black_box(be.compile(&p).expect("compiles"));
                    t.elapsed()
                })
                .collect();
            ts.drain(..ts.len() / 10);
            ts.sort();
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            println!(
                "| {name} | {opt_level:?} | {:.0} | {:.0} | {:.0} |",
                us(ts[ts.len() / 2]),
                us(ts[ts.len() / 10]),
                us(ts[ts.len() * 9 / 10])
            );
        }
    }
}

fn gemm_lib(n: u64) -> LoopProgram {
    let v = |b: u32| MatView {
        buf: BufId(b),
        offset: 0,
        row_stride: n as i64,
        col_stride: 1,
        batch_strides: vec![],
    };
    program(
        vec![
            f32_buf("a", n * n, Role::Input(0)),
            f32_buf("b", n * n, Role::Input(1)),
            f32_buf("c", n * n, Role::Output(0)),
        ],
        vec![kernel(
            "gemm",
            vec![Stmt::Call(LibCall::Gemm {
                m: n,
                n,
                k: n,
                batch: vec![],
                a: v(0),
                b: v(1),
                c: v(2),
                accumulate: false,
            })],
        )],
    )
}

/// The textbook i-j-k loop: `c[i, j] = Σ_k a[i, k]·b[k, j]` (b read with stride n: scalar).
fn gemm_naive(n: u64) -> LoopProgram {
    let ni = n as i64;
    program(
        vec![
            f32_buf("a", n * n, Role::Input(0)),
            f32_buf("b", n * n, Role::Input(1)),
            f32_buf("c", n * n, Role::Output(0)),
        ],
        vec![kernel(
            "naive",
            vec![range(
                0,
                n,
                true,
                1,
                vec![range(
                    1,
                    n,
                    false,
                    1,
                    vec![
                        let_(0, F32, c(0.0)),
                        range(
                            2,
                            n,
                            false,
                            4,
                            vec![update(
                                0,
                                AccOp::Add,
                                bin(
                                    BinOp::Mul,
                                    load(0, ix(0, &[(0, ni), (2, 1)])),
                                    load(1, ix(0, &[(2, ni), (1, 1)])),
                                ),
                            )],
                        ),
                        store(2, ix(0, &[(0, ni), (1, 1)]), acc(0)),
                    ],
                )],
            )],
        )],
    )
}

/// The i-k-j loop: `c[i, :] += a[i, k]·b[k, :]`, a unit-stride vector inner loop.
fn gemm_ikj(n: u64) -> LoopProgram {
    let ni = n as i64;
    program(
        vec![
            f32_buf("a", n * n, Role::Input(0)),
            f32_buf("b", n * n, Role::Input(1)),
            f32_buf("c", n * n, Role::Output(0)),
        ],
        vec![kernel(
            "ikj",
            vec![range(
                0,
                n,
                true,
                1,
                vec![
                    range(
                        3,
                        n,
                        false,
                        4,
                        vec![store(2, ix(0, &[(0, ni), (3, 1)]), c(0.0))],
                    ),
                    range(
                        1,
                        n,
                        false,
                        1,
                        vec![range(
                            2,
                            n,
                            false,
                            4,
                            vec![store(
                                2,
                                ix(0, &[(0, ni), (2, 1)]),
                                bin(
                                    BinOp::Add,
                                    load(2, ix(0, &[(0, ni), (2, 1)])),
                                    bin(
                                        BinOp::Mul,
                                        load(0, ix(0, &[(0, ni), (1, 1)])),
                                        load(1, ix(0, &[(1, ni), (2, 1)])),
                                    ),
                                ),
                            )],
                        )],
                    ),
                ],
            )],
        )],
    )
}

fn bench_gemm(quick: bool) {
    println!("\n## f32 GEMM n×n×n");
    println!("| n | implementation | threads | median ms | GFLOP/s |");
    println!("|---|---|---|---|---|");
    let mut be = CpuBackend::new().expect("host");
    let sizes: &[u64] = if quick { &[1024] } else { &[1024, 2048] };
    for &n in sizes {
        let flops = 2.0 * (n as f64).powi(3);
        let mut bufs = vec![
            data(F32, &values((n * n) as usize, 1)),
            data(F32, &values((n * n) as usize, 2)),
            Data::zeros(F32, (n * n) as usize),
        ];
        let mut impls = vec![("gemm crate", gemm_lib(n), if quick { 3 } else { 7 })];
        impls.push(("JIT i-k-j (f32x4)", gemm_ikj(n), if quick { 1 } else { 3 }));
        if n <= 1024 {
            impls.push(("JIT i-j-k naive", gemm_naive(n), 1));
        }
        for (name, p, reps) in impls {
            let exe = be.compile(&p).expect("compiles");
            for threads in [1, 2] {
                let t = time_run(&exe, &mut bufs, threads, reps);
                println!(
                    "| {n} | {name} | {threads} | {:.1} | {:.1} |",
                    t.as_secs_f64() * 1e3,
                    flops / t.as_secs_f64() / 1e9
                );
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "quick");
    let only = |what: &str| {
        !args
            .iter()
            .any(|a| ["reduce", "exp", "compile", "gemm"].contains(&a.as_str()))
            || args.iter().any(|a| a == what)
    };
    let be = CpuBackend::new().expect("host");
    println!(
        "tdsl-cpu micro-benchmarks; FMA: {}, rayon threads: {}\n",
        be.uses_fma(),
        rayon::current_num_threads()
    );
    if only("reduce") {
        bench_reductions(quick);
    }
    if only("exp") {
        bench_exp_chain(quick);
    }
    if only("compile") {
        bench_compile(quick);
    }
    if only("gemm") {
        bench_gemm(quick);
    }
}
