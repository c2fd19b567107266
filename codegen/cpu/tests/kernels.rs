//! Hand-built loop programs run through the CPU backend and compared with values computed
//! directly in the test: elementwise with broadcasts, transpose, row reductions with every
//! accumulator operation, fused softmax, f16/bf16/f64, batched strided GEMM, CSR SpMV and COO,
//! plus the cache, the FMA disassembly and the run-time checks.

mod common;

use common::*;
use half::{bf16, f16};
use tdsl_cpu::{CodegenError, CpuBackend, CpuOptions, OptLevel, RuntimeError};
use tdsl_loop::*;

use ElemType::{BF16, F16, F32, F64, I32};

fn input(name: &str, ty: ElemType, n: u64, k: u32) -> Buffer {
    buffer(name, ty, n, Role::Input(k))
}

fn output(name: &str, ty: ElemType, n: u64) -> Buffer {
    buffer(name, ty, n, Role::Output(0))
}

/// `out[i, j] = a[i, j] * b[j] + rowb[i] + bias[0]`: a unit-stride load, a row broadcast
/// (stride 0 in `j`), a column broadcast (stride 0 in `i`) and a scalar (stride 0 in both).
fn broadcast_program(r: u64, c: u64, vector: u32) -> LoopProgram {
    let ci = c as i64;
    let body = bin(
        BinOp::Add,
        bin(
            BinOp::Add,
            bin(
                BinOp::Mul,
                load(0, ix(0, &[(0, ci), (1, 1)])),
                load(1, ix(0, &[(0, 0), (1, 1)])),
            ),
            load(2, ix(0, &[(0, 1), (1, 0)])),
        ),
        load(3, ix(0, &[])),
    );
    program(
        vec![
            input("a", F32, r * c, 0),
            input("b", F32, c, 1),
            input("rowb", F32, r, 2),
            input("bias", F32, 1, 3),
            output("out", F32, r * c),
        ],
        vec![kernel(
            "bcast",
            vec![range(
                0,
                r,
                true,
                1,
                vec![range(
                    1,
                    c,
                    false,
                    vector,
                    vec![store(4, ix(0, &[(0, ci), (1, 1)]), body)],
                )],
            )],
        )],
    )
}

#[test]
fn elementwise_with_broadcasts() {
    for (r, c) in [(1, 1), (7, 13), (3, 4), (5, 17), (300, 257)] {
        for vector in [1, 4] {
            for threads in [1, 2] {
                let p = broadcast_program(r, c, vector);
                let (a, b, rb) = (
                    values((r * c) as usize, 1),
                    values(c as usize, 2),
                    values(r as usize, 3),
                );
                let bias = [0.25];
                let mut bufs = vec![
                    data(F32, &a),
                    data(F32, &b),
                    data(F32, &rb),
                    data(F32, &bias),
                    Data::zeros(F32, (r * c) as usize),
                ];
                agree_with_eval(&p, &bufs, threads, 1e-6);
                let stats = run(&p, &mut bufs, threads);
                let want: Vec<f64> = (0..(r * c) as usize)
                    .map(|n| {
                        let (i, j) = (n / c as usize, n % c as usize);
                        a[n] * b[j] + rb[i] + 0.25
                    })
                    .collect();
                assert_close(&bufs[4], &want, 1e-6);
                if threads == 2 && r * c > 64 * 1024 {
                    assert_eq!(stats.tasks, 2, "a big parallel loop is split");
                }
                if r * c < 1000 {
                    assert_eq!(stats.tasks, 1, "a small problem stays on one thread");
                }
            }
        }
    }
}

#[test]
fn transpose() {
    let (r, c) = (9u64, 14u64);
    for vector in [1, 4] {
        // out[j, i] = a[i, j] (strided store) and back[i, j] = out[j, i] (strided load).
        let p = program(
            vec![
                input("a", F32, r * c, 0),
                output("out", F32, r * c),
                output("back", F32, r * c),
            ],
            vec![
                kernel(
                    "t",
                    vec![range(
                        0,
                        r,
                        true,
                        1,
                        vec![range(
                            1,
                            c,
                            false,
                            vector,
                            vec![store(
                                1,
                                ix(0, &[(1, r as i64), (0, 1)]),
                                load(0, ix(0, &[(0, c as i64), (1, 1)])),
                            )],
                        )],
                    )],
                ),
                kernel(
                    "back",
                    vec![range(
                        0,
                        r,
                        true,
                        1,
                        vec![range(
                            1,
                            c,
                            false,
                            vector,
                            vec![store(
                                2,
                                ix(0, &[(0, c as i64), (1, 1)]),
                                load(1, ix(0, &[(1, r as i64), (0, 1)])),
                            )],
                        )],
                    )],
                ),
            ],
        );
        let a = values((r * c) as usize, 4);
        let mut bufs = vec![
            data(F32, &a),
            Data::zeros(F32, (r * c) as usize),
            Data::zeros(F32, (r * c) as usize),
        ];
        let a = bufs[0].to_f64();
        run(&p, &mut bufs, 1);
        let want: Vec<f64> = (0..(r * c) as usize)
            .map(|n| {
                let (j, i) = (n / r as usize, n % r as usize);
                a[i * c as usize + j]
            })
            .collect();
        assert_close(&bufs[1], &want, 0.0);
        assert_close(&bufs[2], &a, 0.0);
    }
}

/// The two inner loops of a batched transposing copy run as one register-transpose call
/// (`lower/transpose.rs`) when the CPU has AVX2: blocks of 21 × 13 and 16 × 19 (edges past the
/// 8 × 8 blocks both ways), and 8 × 8 exactly.
#[test]
fn batched_transposing_copies() {
    for (u, v) in [(21u64, 13u64), (16, 19), (8, 8)] {
        let (nb, n) = (3u64, u * v);
        let p = program(
            vec![input("a", F32, nb * n, 0), output("out", F32, nb * n)],
            vec![kernel(
                "t",
                vec![range(
                    0,
                    nb,
                    true,
                    1,
                    vec![range(
                        1,
                        u,
                        false,
                        1,
                        vec![range(
                            2,
                            v,
                            false,
                            4,
                            vec![store(
                                1,
                                ix(0, &[(0, n as i64), (1, v as i64), (2, 1)]),
                                load(0, ix(0, &[(0, n as i64), (2, u as i64), (1, 1)])),
                            )],
                        )],
                    )],
                )],
            )],
        );
        let mut bufs = vec![
            data(F32, &values((nb * n) as usize, 5)),
            Data::zeros(F32, (nb * n) as usize),
        ];
        let a = bufs[0].to_f64();
        run(&p, &mut bufs, 2);
        let (u, v, n) = (u as usize, v as usize, n as usize);
        let want: Vec<f64> = (0..nb as usize * n)
            .map(|k| {
                let (b, i, j) = (k / n, k % n / v, k % v);
                a[b * n + j * u + i]
            })
            .collect();
        assert_close(&bufs[1], &want, 0.0);
    }
}

/// `y[i] = op_j x[i, j]` with accumulator init `init`.
fn row_reduce(r: u64, c: u64, op: AccOp, init: f64, vector: u32, ty: ElemType) -> LoopProgram {
    let acc_ty = ty.compute();
    program(
        vec![input("x", ty, r * c, 0), output("y", ty, r)],
        vec![kernel(
            "reduce",
            vec![range(
                0,
                r,
                true,
                1,
                vec![
                    let_(0, acc_ty, c_(init)),
                    range(
                        1,
                        c,
                        false,
                        vector,
                        vec![update(0, op, load(0, ix(0, &[(0, c as i64), (1, 1)])))],
                    ),
                    store(1, ix(0, &[(0, 1)]), acc(0)),
                ],
            )],
        )],
    )
}

fn c_(x: f64) -> Expr {
    common::c(x)
}

fn reduce_ref(op: AccOp, init: f64, xs: &[f64]) -> f64 {
    xs.iter().fold(init, |a, &x| match op {
        AccOp::Set => x,
        AccOp::Add => a + x,
        AccOp::Mul => a * x,
        AccOp::Max => {
            if a.is_nan() || x.is_nan() {
                f64::NAN
            } else {
                a.max(x)
            }
        }
        AccOp::Min => {
            if a.is_nan() || x.is_nan() {
                f64::NAN
            } else {
                a.min(x)
            }
        }
    })
}

#[test]
fn row_reductions_every_acc_op() {
    let ops = [
        (AccOp::Set, 0.0),
        (AccOp::Add, 0.0),
        (AccOp::Mul, 1.0),
        (AccOp::Max, f64::NEG_INFINITY),
        (AccOp::Min, f64::INFINITY),
    ];
    for ty in [F32, F64] {
        for (op, init) in ops {
            for c in [1u64, 3, 4, 16, 17, 37, 100] {
                for vector in [1, 4] {
                    let r = 6u64;
                    let p = row_reduce(r, c, op, init, vector, ty);
                    let mut x: Vec<f64> = values((r * c) as usize, c + 7)
                        .into_iter()
                        .map(|v| if op == AccOp::Mul { 1.0 + v / 8.0 } else { v })
                        .collect();
                    // Row 2 holds a NaN: max and min must propagate it.
                    x[(2 * c + c / 2) as usize] = f64::NAN;
                    let xd = data(ty, &x);
                    let xr = xd.to_f64();
                    let mut bufs = vec![xd, Data::zeros(ty, r as usize)];
                    let tol = if ty == F32 { 1e-5 } else { 1e-12 };
                    agree_with_eval(&p, &bufs, 1, tol);
                    run(&p, &mut bufs, 1);
                    let want: Vec<f64> = (0..r as usize)
                        .map(|i| reduce_ref(op, init, &xr[i * c as usize..(i + 1) * c as usize]))
                        .collect();
                    let tol = if ty == F32 { 1e-5 } else { 1e-12 };
                    assert_close(&bufs[1], &want, tol);
                }
            }
        }
    }
}

#[test]
fn fused_softmax() {
    let (r, c) = (5u64, 50u64);
    let ci = c as i64;
    let x_at = |v: u32| load(0, ix(0, &[(0, ci), (v, 1)]));
    let p = program(
        vec![input("x", F32, r * c, 0), output("y", F32, r * c)],
        vec![kernel(
            "softmax",
            vec![range(
                0,
                r,
                true,
                1,
                vec![
                    let_(0, F32, c_(f64::NEG_INFINITY)),
                    range(1, c, false, 4, vec![update(0, AccOp::Max, x_at(1))]),
                    let_(1, F32, c_(0.0)),
                    range(
                        2,
                        c,
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
                        c,
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
    );
    let x: Vec<f64> = values((r * c) as usize, 9)
        .iter()
        .map(|v| v * 5.0)
        .collect();
    let mut bufs = vec![data(F32, &x), Data::zeros(F32, (r * c) as usize)];
    agree_with_eval(&p, &bufs, 2, 1e-6);
    run(&p, &mut bufs, 1);
    let xr = bufs[0].to_f64();
    let mut want = vec![0.0; (r * c) as usize];
    for i in 0..r as usize {
        let row = &xr[i * c as usize..(i + 1) * c as usize];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        for j in 0..c as usize {
            want[i * c as usize + j] = (row[j] - m).exp() / s;
        }
    }
    assert_close(&bufs[1], &want, 1e-5);
}

/// `y[i] = x[i]` between two buffer types, vectorised or not.
fn convert_program(from: ElemType, to: ElemType, n: u64, vector: u32) -> LoopProgram {
    program(
        vec![input("x", from, n, 0), output("y", to, n)],
        vec![kernel(
            "convert",
            vec![range(
                0,
                n,
                true,
                vector,
                vec![store(1, ix(0, &[(0, 1)]), load(0, ix(0, &[(0, 1)])))],
            )],
        )],
    )
}

#[test]
fn f16_round_trips_every_bit_pattern() {
    for vector in [1, 4] {
        let n = 1 << 16;
        let p = convert_program(F16, F16, n, vector);
        let x: Vec<f16> = (0..n).map(|b| f16::from_bits(b as u16)).collect();
        let mut bufs = vec![Data::F16(x.clone()), Data::zeros(F16, n as usize)];
        run(&p, &mut bufs, 1);
        let Data::F16(y) = &bufs[1] else { panic!() };
        for (a, b) in x.iter().zip(y) {
            // NaNs come back quiet, with their payload.
            let want = if a.is_nan() {
                a.to_bits() | 0x0200
            } else {
                a.to_bits()
            };
            assert_eq!(b.to_bits(), want, "f16 bits {:#06x}", a.to_bits());
        }
    }
}

#[test]
fn bf16_round_trips_every_bit_pattern() {
    for vector in [1, 4] {
        let n = 1 << 16;
        let p = convert_program(BF16, BF16, n, vector);
        let x: Vec<bf16> = (0..n).map(|b| bf16::from_bits(b as u16)).collect();
        let mut bufs = vec![Data::BF16(x.clone()), Data::zeros(BF16, n as usize)];
        run(&p, &mut bufs, 1);
        let Data::BF16(y) = &bufs[1] else { panic!() };
        for (a, b) in x.iter().zip(y) {
            let want = if a.is_nan() {
                a.to_bits() | 0x0040
            } else {
                a.to_bits()
            };
            assert_eq!(b.to_bits(), want, "bf16 bits {:#06x}", a.to_bits());
        }
    }
}

/// f32 bit patterns that stress rounding: every exponent with mantissas around the f16 and
/// bf16 rounding points, plus specials.
fn tricky_f32() -> Vec<f32> {
    let mut out = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        65504.0,
        65519.99,
        65520.0,
        6.1035156e-5,
        5.9604645e-8,
        2.9802322e-8,
        2.9802326e-8,
        f32::MIN_POSITIVE,
        f32::MAX,
    ];
    for e in 0..255u32 {
        for m in [
            0u32, 1, 0xfff, 0x1000, 0x1001, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001, 0x18000,
            0x7f_ffff, 0x40_0000, 0x40_1000, 0x7f_e000,
        ] {
            for s in [0u32, 1] {
                out.push(f32::from_bits((s << 31) | (e << 23) | m));
            }
        }
    }
    let mut st = 12345u64;
    for _ in 0..20000 {
        st = st.wrapping_mul(6364136223846793005).wrapping_add(1);
        out.push(f32::from_bits((st >> 32) as u32));
    }
    out
}

#[test]
fn f32_to_half_rounds_to_nearest_even() {
    let x = tricky_f32();
    let n = x.len() as u64;
    for vector in [1, 4] {
        for to in [F16, BF16] {
            let p = convert_program(F32, to, n, vector);
            let mut bufs = vec![Data::F32(x.clone()), Data::zeros(to, n as usize)];
            run(&p, &mut bufs, 1);
            for (i, v) in x.iter().enumerate() {
                let (got, want, nan) = match &bufs[1] {
                    Data::F16(y) => (y[i].to_bits(), f16::from_f32(*v).to_bits(), y[i].is_nan()),
                    Data::BF16(y) => (y[i].to_bits(), bf16::from_f32(*v).to_bits(), y[i].is_nan()),
                    _ => unreachable!(),
                };
                if v.is_nan() {
                    assert!(nan, "{to}: NaN {:#010x} must stay NaN", v.to_bits());
                } else {
                    assert_eq!(got, want, "{to}: f32 {v:e} ({:#010x})", v.to_bits());
                }
            }
        }
    }
}

#[test]
fn half_compute_and_casts() {
    let n = 1003u64;
    let x = values(n as usize, 11);
    for ty in [F16, BF16] {
        for vector in [1, 4] {
            // y = x * 3 + 1, computed in f32 and rounded once on store; z = cast(f16, x * 3) + 1
            // keeps the cast's rounding inside the chain.
            let xv = || load(0, ix(0, &[(0, 1)]));
            let p = program(
                vec![
                    input("x", ty, n, 0),
                    output("y", ty, n),
                    output("z", F32, n),
                ],
                vec![kernel(
                    "half",
                    vec![range(
                        0,
                        n,
                        true,
                        vector,
                        vec![
                            store(
                                1,
                                ix(0, &[(0, 1)]),
                                bin(BinOp::Add, bin(BinOp::Mul, xv(), c_(3.0)), c_(1.0)),
                            ),
                            store(
                                2,
                                ix(0, &[(0, 1)]),
                                bin(
                                    BinOp::Add,
                                    cast(F16, bin(BinOp::Mul, xv(), c_(3.0))),
                                    c_(1.0),
                                ),
                            ),
                        ],
                    )],
                )],
            );
            let xd = data(ty, &x);
            let xr: Vec<f32> = xd.to_f64().iter().map(|v| *v as f32).collect();
            let mut bufs = vec![
                xd,
                Data::zeros(ty, n as usize),
                Data::zeros(F32, n as usize),
            ];
            // Bit-exact with the evaluator: one rounding per operation, same places.
            agree_with_eval(&p, &bufs, 1, 0.0);
            run(&p, &mut bufs, 1);
            for (i, v) in xr.iter().enumerate() {
                let y = v * 3.0 + 1.0;
                let want_y = match ty {
                    F16 => f16::from_f32(y).to_f64(),
                    _ => bf16::from_f32(y).to_f64(),
                };
                assert_eq!(bufs[1].get(i), want_y, "{ty} y[{i}]");
                let want_z = f16::from_f32(v * 3.0).to_f32() + 1.0;
                assert_eq!(bufs[2].get(i), want_z as f64, "{ty} z[{i}]");
            }
        }
    }
}

/// Loops over f16 and bf16 buffers long enough to run in chunks (`lower/chunked.rs`): f16
/// loads widened, casts rounded and stores narrowed by the vector conversions, bit for bit
/// as the evaluator. The first kernel stores `t` and reads it back in the next statement, in a
/// cast whose rounding would run before the store; it must keep the inline code.
#[test]
fn half_chunks_agree_with_the_evaluator() {
    for n in [4113u64, 1003, 64, 63] {
        let at = |b: u32| load(b, ix(0, &[(0, 1)]));
        let mul = |a, b| bin(BinOp::Mul, a, b);
        let out = |name: &str, ty, k| buffer(name, ty, n, Role::Output(k));
        let p = program(
            vec![
                input("x", F16, n, 0),
                input("y", BF16, n, 1),
                out("t", F16, 0),
                out("u", BF16, 1),
                out("v", F32, 2),
                out("w", BF16, 3),
                out("z", F16, 4),
            ],
            vec![
                kernel(
                    "reads_back",
                    vec![range(
                        0,
                        n,
                        true,
                        4,
                        vec![
                            store(
                                2,
                                ix(0, &[(0, 1)]),
                                bin(BinOp::Add, mul(at(0), c_(3.0)), at(1)),
                            ),
                            store(
                                3,
                                ix(0, &[(0, 1)]),
                                bin(BinOp::Add, cast(BF16, mul(at(2), c_(0.5))), at(0)),
                            ),
                        ],
                    )],
                ),
                kernel(
                    "narrows",
                    vec![range(
                        0,
                        n,
                        true,
                        4,
                        vec![
                            store(5, ix(0, &[(0, 1)]), cast(BF16, mul(at(0), at(1)))),
                            store(
                                6,
                                ix(0, &[(0, 1)]),
                                bin(BinOp::Sub, mul(cast(F16, at(1)), at(0)), c_(1.0)),
                            ),
                            store(
                                4,
                                ix(0, &[(0, 1)]),
                                bin(BinOp::Add, at(0), mul(at(1), c_(0.25))),
                            ),
                        ],
                    )],
                ),
            ],
        );
        // Values spread over f16's range, subnormals and overflow included.
        let xs: Vec<f64> = values(n as usize, 3)
            .iter()
            .enumerate()
            .map(|(i, v)| v * [1.0, 1e-5, 3e4, 1e-7][i % 4])
            .collect();
        let ys: Vec<f64> = values(n as usize, 4).iter().map(|v| v * 7.0).collect();
        let mut bufs = vec![data(F16, &xs), data(BF16, &ys)];
        for (ty, _) in [(F16, 0), (BF16, 1), (F32, 2), (BF16, 3), (F16, 4)] {
            bufs.push(Data::zeros(ty, n as usize));
        }
        agree_with_eval(&p, &bufs, 2, 0.0);
    }
}

/// Divisions by a value the loop does not change run as one call over the loop's elements
/// (in place, as softmax's last loop) or as one of the calls of a chunked loop; a division
/// alone, whose dividend would have to be staged, keeps the inline code. All bit for bit as
/// the evaluator (the division is IEEE's in every form).
#[test]
fn divisions_by_an_invariant_agree_with_the_evaluator() {
    for n in [4113u64, 1003, 64, 63] {
        let at = |b: u32| load(b, ix(0, &[(0, 1)]));
        let div = |a, b| bin(BinOp::Div, a, b);
        let first = |b: u32| load(b, ix(0, &[]));
        let out = |name: &str, ty, k| buffer(name, ty, n, Role::Output(k));
        let p = program(
            vec![
                input("x", F32, n, 0),
                input("s", F32, n, 1),
                out("t", F32, 0),
                out("u", F32, 1),
                out("v", F32, 2),
            ],
            vec![
                kernel(
                    "in_place",
                    vec![
                        range(0, n, true, 4, vec![store(2, ix(0, &[(0, 1)]), at(0))]),
                        let_(0, F32, bin(BinOp::Add, first(1), c_(0.5))),
                        range(
                            1,
                            n,
                            false,
                            4,
                            vec![store(
                                2,
                                ix(0, &[(1, 1)]),
                                div(load(2, ix(0, &[(1, 1)])), acc(0)),
                            )],
                        ),
                    ],
                ),
                kernel(
                    "with_calls",
                    vec![range(
                        0,
                        n,
                        true,
                        4,
                        vec![
                            store(3, ix(0, &[(0, 1)]), div(cast(BF16, at(0)), first(1))),
                            store(
                                4,
                                ix(0, &[(0, 1)]),
                                div(bin(BinOp::Sub, at(0), at(1)), c_(3.0)),
                            ),
                        ],
                    )],
                ),
            ],
        );
        let xs = values(n as usize, 5);
        let ss: Vec<f64> = values(n as usize, 6).iter().map(|v| v * 1e-3).collect();
        let mut bufs = vec![data(F32, &xs), data(F32, &ss)];
        for _ in 0..3 {
            bufs.push(Data::zeros(F32, n as usize));
        }
        agree_with_eval(&p, &bufs, 2, 0.0);
    }
}

/// Chunked loops whose statements run as wide passes (`lower/wide.rs`, `varith.rs`): every
/// operation, scalars on either side (a constant, an accumulator, a load that does not move
/// with the loop), f32, f16 and bf16 operands and destinations, nested expressions through
/// chunk buffers, roundings folded into the pass before them, a store read back by the next
/// statement, and values the loop does not change (`relu(s[0])`, stored, and as the argument
/// of a call in place in its destination). Bit for bit as the evaluator, over NaN, ±0, infinities and subnormals;
/// the kernels do run as passes (their code calls the wide arithmetic).
#[test]
fn wide_passes_agree_with_the_evaluator() {
    for n in [4113u64, 1003, 64, 63] {
        let at = |b: u32| load(b, ix(0, &[(0, 1)]));
        let first = |b: u32| load(b, ix(0, &[]));
        let b2 = |op, a, b| bin(op, a, b);
        let u = |op, a| un(op, a);
        let out = |name: &str, ty, k| buffer(name, ty, n, Role::Output(k));
        let body = vec![
            // f32 = max(x, h) + min(g, x * 0.5) - |x| / sqrt(|g| + 1)
            store(
                4,
                ix(0, &[(0, 1)]),
                b2(
                    BinOp::Sub,
                    b2(
                        BinOp::Add,
                        b2(BinOp::Max, at(0), at(1)),
                        b2(BinOp::Min, at(2), b2(BinOp::Mul, at(0), c_(0.5))),
                    ),
                    b2(
                        BinOp::Div,
                        u(UnOp::Abs, at(0)),
                        u(UnOp::Sqrt, b2(BinOp::Add, u(UnOp::Abs, at(2)), c_(1.0))),
                    ),
                ),
            ),
            // bf16 = cast(x * s, bf16) * g + relu(-x) * square(g) - rsqrt(|h|)
            store(
                5,
                ix(0, &[(0, 1)]),
                b2(
                    BinOp::Sub,
                    b2(
                        BinOp::Add,
                        b2(
                            BinOp::Mul,
                            cast(BF16, b2(BinOp::Mul, at(0), first(3))),
                            at(2),
                        ),
                        b2(
                            BinOp::Mul,
                            u(UnOp::Relu, u(UnOp::Neg, at(0))),
                            u(UnOp::Square, at(2)),
                        ),
                    ),
                    u(UnOp::Rsqrt, u(UnOp::Abs, at(1))),
                ),
            ),
            // f16 = (2 - x) / h, the scalar on the left
            store(
                6,
                ix(0, &[(0, 1)]),
                b2(BinOp::Div, b2(BinOp::Sub, c_(2.0), at(0)), at(1)),
            ),
            // f32 = cast(x * acc, f16) + g, the rounding of an f32 value
            store(
                7,
                ix(0, &[(0, 1)]),
                b2(
                    BinOp::Add,
                    cast(F16, b2(BinOp::Mul, at(0), acc(0))),
                    cast(F32, at(2)),
                ),
            ),
            // bf16 = the first statement's value read back, times h
            store(8, ix(0, &[(0, 1)]), b2(BinOp::Mul, at(4), at(1))),
            // f32 = a copy of h, and of a bf16 rounding of x
            store(9, ix(0, &[(0, 1)]), at(1)),
            store(10, ix(0, &[(0, 1)]), cast(BF16, at(0))),
            // f32 = relu of a value the loop does not change (-1.5: 0, not -1.5)
            store(11, ix(0, &[(0, 1)]), u(UnOp::Relu, first(3))),
        ];
        let p = program(
            vec![
                input("x", F32, n, 0),
                input("h", F16, n, 1),
                input("g", BF16, n, 2),
                input("s", F32, n, 3),
                out("o1", F32, 0),
                out("o2", BF16, 1),
                out("o3", F16, 2),
                out("o4", F32, 3),
                out("o5", BF16, 4),
                out("o6", F32, 5),
                out("o7", F32, 6),
                out("o8", F32, 7),
                out("o9", F32, 8),
            ],
            vec![
                kernel(
                    "passes",
                    vec![
                        let_(0, F32, b2(BinOp::Add, first(3), c_(0.25))),
                        range(0, n, true, 4, body),
                    ],
                ),
                // A call in place in its destination, its argument one value: exp(relu(-1.5)).
                kernel(
                    "direct",
                    vec![range(
                        0,
                        n,
                        true,
                        4,
                        vec![store(
                            12,
                            ix(0, &[(0, 1)]),
                            u(UnOp::Exp, u(UnOp::Relu, first(3))),
                        )],
                    )],
                ),
            ],
        );
        // Values over f16's range and beyond, with the special values at the front.
        let special = [
            f64::NAN,
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e-41,
            -3e-8,
        ];
        let spread = |seed, scale: [f64; 4]| -> Vec<f64> {
            values(n as usize, seed)
                .iter()
                .enumerate()
                .map(|(i, v)| match special.get(i / 3 + seed as usize % 3) {
                    Some(s) if i % 3 == seed as usize % 3 => *s,
                    _ => v * scale[i % 4],
                })
                .collect()
        };
        let mut bufs = vec![
            data(F32, &spread(7, [1.0, 1e-5, 3e4, 1e5])),
            data(F16, &spread(8, [1.0, 1e-5, 3e4, 2.0])),
            data(BF16, &spread(9, [1.0, 1e-30, 1e30, 7.0])),
            data(F32, &[-1.5; 1].repeat(n as usize)),
        ];
        for ty in [F32, BF16, F16, F32, BF16, F32, F32, F32, F32] {
            bufs.push(Data::zeros(ty, n as usize));
        }
        agree_with_eval(&p, &bufs, 2, 0.0);
        // (63 iterations are too few to chunk.)
        if tdsl_cpu::chunked_math_available() && n >= 64 {
            let clif = CpuBackend::new().unwrap().clif(&p, 0).unwrap();
            assert!(
                calls_of_signature(&clif, VARITH) > 20,
                "too few wide passes in:\n{clif}"
            );
        }
    }
}

#[test]
fn f64_elementwise_and_reduction() {
    let n = 1001u64;
    let x = values(n as usize, 5);
    for vector in [1, 4] {
        let xv = || load(0, ix(0, &[(0, 1)]));
        let p = program(
            vec![
                input("x", F64, n, 0),
                output("y", F64, n),
                output("s", F64, 1),
            ],
            vec![
                kernel(
                    "ew",
                    vec![range(
                        0,
                        n,
                        true,
                        vector,
                        vec![store(
                            1,
                            ix(0, &[(0, 1)]),
                            bin(
                                BinOp::Sub,
                                un(UnOp::Sqrt, bin(BinOp::Add, un(UnOp::Square, xv()), c_(1.0))),
                                un(UnOp::Tanh, xv()),
                            ),
                        )],
                    )],
                ),
                kernel(
                    "dot",
                    vec![
                        let_(0, F64, c_(0.5)),
                        range(
                            0,
                            n,
                            false,
                            vector,
                            vec![update(0, AccOp::Add, bin(BinOp::Mul, xv(), xv()))],
                        ),
                        store(2, ix(0, &[]), acc(0)),
                    ],
                ),
            ],
        );
        let mut bufs = vec![
            data(F64, &x),
            Data::zeros(F64, n as usize),
            Data::zeros(F64, 1),
        ];
        run(&p, &mut bufs, 1);
        let want: Vec<f64> = x.iter().map(|v| (v * v + 1.0).sqrt() - v.tanh()).collect();
        assert_close(&bufs[1], &want, 1e-14);
        let s: f64 = 0.5 + x.iter().map(|v| v * v).sum::<f64>();
        assert_close(&bufs[2], &[s], 1e-13);
    }
}

#[test]
fn unary_functions_match_std() {
    let ops = [
        (UnOp::Neg, (|x: f64| -x) as fn(f64) -> f64),
        (UnOp::Exp, f64::exp),
        (UnOp::Log, f64::ln),
        (UnOp::Sqrt, f64::sqrt),
        (UnOp::Rsqrt, |x| 1.0 / x.sqrt()),
        (UnOp::Abs, f64::abs),
        (UnOp::Tanh, f64::tanh),
        (UnOp::Sigmoid, |x| 1.0 / (1.0 + (-x).exp())),
        (UnOp::Relu, |x| if x.is_nan() { x } else { x.max(0.0) }),
        (UnOp::Gelu, |x| {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }),
        (UnOp::Sin, f64::sin),
        (UnOp::Cos, f64::cos),
        (UnOp::Square, |x| x * x),
    ];
    let n = 23u64;
    let mut x: Vec<f64> = values(n as usize, 3).iter().map(|v| v * 3.0).collect();
    x[5] = f64::NAN;
    x[6] = 0.0;
    for ty in [F32, F64] {
        for (op, f) in ops {
            for vector in [1, 4] {
                let p = program(
                    vec![input("x", ty, n, 0), output("y", ty, n)],
                    vec![kernel(
                        "un",
                        vec![range(
                            0,
                            n,
                            false,
                            vector,
                            vec![store(
                                1,
                                ix(0, &[(0, 1)]),
                                un(op, load(0, ix(0, &[(0, 1)]))),
                            )],
                        )],
                    )],
                );
                let xd = data(ty, &x);
                let want: Vec<f64> = xd.to_f64().iter().map(|v| f(*v)).collect();
                let mut bufs = vec![xd, Data::zeros(ty, n as usize)];
                let tol = if ty == F32 { 1e-6 } else { 1e-14 };
                agree_with_eval(&p, &bufs, 1, tol);
                run(&p, &mut bufs, 1);
                assert_close(&bufs[1], &want, tol);
            }
        }
    }
}

#[test]
fn binary_functions_and_nan_propagation() {
    let n = 19u64;
    let mut x = values(n as usize, 1);
    let mut y = values(n as usize, 2);
    x[3] = f64::NAN;
    y[8] = f64::NAN;
    x[10] = 0.0;
    y[10] = -0.0;
    let ops = [
        (BinOp::Add, (|a: f64, b: f64| a + b) as fn(f64, f64) -> f64),
        (BinOp::Sub, |a, b| a - b),
        (BinOp::Mul, |a, b| a * b),
        (BinOp::Div, |a, b| a / b),
        (BinOp::Max, |a, b| {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                a.max(b)
            }
        }),
        (BinOp::Min, |a, b| {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                a.min(b)
            }
        }),
        (BinOp::Pow, |a: f64, b| a.abs().powf(b)),
    ];
    for ty in [F32, F64] {
        for (op, f) in ops {
            for vector in [1, 4] {
                let lhs = if op == BinOp::Pow {
                    un(UnOp::Abs, load(0, ix(0, &[(0, 1)])))
                } else {
                    load(0, ix(0, &[(0, 1)]))
                };
                let p = program(
                    vec![
                        input("x", ty, n, 0),
                        input("y", ty, n, 1),
                        output("z", ty, n),
                    ],
                    vec![kernel(
                        "bin",
                        vec![range(
                            0,
                            n,
                            false,
                            vector,
                            vec![store(
                                2,
                                ix(0, &[(0, 1)]),
                                bin(op, lhs, load(1, ix(0, &[(0, 1)]))),
                            )],
                        )],
                    )],
                );
                let (xd, yd) = (data(ty, &x), data(ty, &y));
                let want: Vec<f64> = xd
                    .to_f64()
                    .iter()
                    .zip(yd.to_f64())
                    .map(|(a, b)| f(*a, b))
                    .collect();
                let mut bufs = vec![xd, yd, Data::zeros(ty, n as usize)];
                run(&p, &mut bufs, 1);
                let tol = if ty == F32 { 1e-6 } else { 1e-14 };
                assert_close(&bufs[2], &want, tol);
            }
        }
    }
}

fn mat(buf: u32, offset: i64, rs: i64, cs: i64, bs: &[i64]) -> MatView {
    MatView {
        buf: BufId(buf),
        offset,
        row_stride: rs,
        col_stride: cs,
        batch_strides: bs.to_vec(),
    }
}

/// Batched GEMM over batch [2, 3]: `a` is dense per batch, `b` is stored transposed (n×k) and
/// broadcast over the first batch axis, `c` has its rows reversed or is dense (a 16-bit one is
/// then rounded from the f32 result row by row across threads).
#[test]
fn batched_strided_gemm() {
    for (m, n, k) in [(5u64, 7u64, 9u64), (64, 48, 80), (1, 1, 1)] {
        for ty in [F32, F64, F16, BF16] {
            for (accumulate, reversed) in
                [(false, true), (true, true), (false, false), (true, false)]
            {
                for threads in [1, 2] {
                    let (b0, b1) = (2u64, 3u64);
                    let a_len = b0 * b1 * m * k;
                    let b_len = b1 * n * k;
                    let c_len = b0 * b1 * m * n;
                    let a = mat(0, 0, k as i64, 1, &[(b1 * m * k) as i64, (m * k) as i64]);
                    let b = mat(1, 0, 1, k as i64, &[0, (n * k) as i64]);
                    let (c_off, c_rs) = match reversed {
                        true => (((m.max(1) - 1) * n) as i64, -(n as i64)),
                        false => (0, n as i64),
                    };
                    let c = mat(2, c_off, c_rs, 1, &[(b1 * m * n) as i64, (m * n) as i64]);
                    let p = program(
                        vec![
                            input("a", ty, a_len, 0),
                            input("b", ty, b_len, 1),
                            buffer("c", ty, c_len, Role::Output(0)),
                        ],
                        vec![kernel(
                            "gemm",
                            vec![Stmt::Call(LibCall::Gemm {
                                m,
                                n,
                                k,
                                batch: vec![b0, b1],
                                a,
                                b,
                                c,
                                accumulate,
                            })],
                        )],
                    );
                    let ad = data(ty, &values(a_len as usize, 1));
                    let bd = data(ty, &values(b_len as usize, 2));
                    let cd = data(ty, &values(c_len as usize, 3));
                    let (ar, br, cr) = (ad.to_f64(), bd.to_f64(), cd.to_f64());
                    let mut want = cr.clone();
                    for x in 0..b0 {
                        for y in 0..b1 {
                            for i in 0..m {
                                for j in 0..n {
                                    let mut s = 0.0;
                                    for l in 0..k {
                                        let av =
                                            ar[(x * b1 * m * k + y * m * k + i * k + l) as usize];
                                        let bv = br[(y * n * k + j * k + l) as usize];
                                        s += av * bv;
                                    }
                                    let row = if reversed { m - 1 - i } else { i };
                                    let ci = (x * b1 * m * n + y * m * n + row * n + j) as usize;
                                    want[ci] = if accumulate { cr[ci] + s } else { s };
                                }
                            }
                        }
                    }
                    let mut bufs = vec![ad, bd, cd];
                    let tol = match ty {
                        F32 => 1e-5,
                        F64 => 1e-12,
                        F16 => 1e-2,
                        _ => 2e-2,
                    };
                    agree_with_eval(&p, &bufs, threads, tol);
                    let stats = run(&p, &mut bufs, threads);
                    assert_eq!(stats.gemm_calls, 1);
                    let tol = match ty {
                        F32 => 1e-5,
                        F64 => 1e-12,
                        F16 => 1e-2,
                        _ => 2e-2,
                    };
                    assert_close(&bufs[2], &want, tol);
                }
            }
        }
    }
}

#[test]
fn gemm_with_aliased_operand_and_mixed_types() {
    // c = a · a where `a` is also the destination buffer's first half (packed before the call).
    let (m, n, k) = (4u64, 4u64, 4u64);
    let p = program(
        vec![
            buffer("ac", F32, 32, Role::Output(0)),
            input("b", BF16, 16, 0),
        ],
        vec![kernel(
            "gemm",
            vec![Stmt::Call(LibCall::Gemm {
                m,
                n,
                k,
                batch: vec![],
                a: mat(0, 0, 4, 1, &[]),
                b: mat(1, 0, 4, 1, &[]),
                c: mat(0, 16, 4, 1, &[]),
                accumulate: false,
            })],
        )],
    );
    let acd = data(F32, &values(32, 4));
    let bd = data(BF16, &values(16, 5));
    let (acr, br) = (acd.to_f64(), bd.to_f64());
    let mut want = acr.clone();
    for i in 0..4 {
        for j in 0..4 {
            want[16 + i * 4 + j] = (0..4).map(|l| acr[i * 4 + l] * br[l * 4 + j]).sum();
        }
    }
    let mut bufs = vec![acd, bd];
    run(&p, &mut bufs, 1);
    assert_close(&bufs[0], &want, 1e-6);
}

/// A CSR matrix: row pointers, column coordinates and values; some rows are empty.
fn csr(rows: usize, cols: usize) -> (Vec<i32>, Vec<i32>, Vec<f64>) {
    let mut ptr = vec![0i32];
    let mut crd = Vec::new();
    let v = values(rows * cols, 77);
    let mut vals = Vec::new();
    for i in 0..rows {
        for j in 0..cols {
            if i != 2 && (v[i * cols + j] > 0.3 || (i + j) % 5 == 0) {
                crd.push(j as i32);
                vals.push(v[i * cols + j]);
            }
        }
        ptr.push(crd.len() as i32);
    }
    (ptr, crd, vals)
}

fn spmv_program(rows: u64, cols: u64, nnz: u64) -> LoopProgram {
    program(
        vec![
            input("ptr", I32, rows + 1, 0),
            input("crd", I32, nnz, 1),
            input("vals", F32, nnz, 2),
            input("x", F32, cols, 3),
            output("y", F32, rows),
        ],
        vec![kernel(
            "spmv",
            vec![range(
                0,
                rows,
                true,
                1,
                vec![
                    let_(0, F32, c_(0.0)),
                    Stmt::Loop(Loop {
                        var: VarId(1),
                        iter: Iter::Compressed {
                            ptr: BufId(0),
                            ptr_index: ix(0, &[(0, 1)]),
                            crd: BufId(1),
                            coord: VarId(2),
                        },
                        parallel: false,
                        vector: 1,
                        gpu: None,
                        body: vec![update(
                            0,
                            AccOp::Add,
                            bin(
                                BinOp::Mul,
                                load(2, ix(0, &[(1, 1)])),
                                load(3, ix(0, &[(2, 1)])),
                            ),
                        )],
                    }),
                    store(4, ix(0, &[(0, 1)]), acc(0)),
                ],
            )],
        )],
    )
}

#[test]
fn csr_spmv_via_compressed_level() {
    let (rows, cols) = (9usize, 8usize);
    let (ptr, crd, vals) = csr(rows, cols);
    let nnz = crd.len();
    let p = spmv_program(rows as u64, cols as u64, nnz as u64);
    let x = values(cols, 8);
    let mk = |ptr: &[i32], crd: &[i32]| {
        vec![
            Data::I32(ptr.to_vec()),
            Data::I32(crd.to_vec()),
            data(F32, &vals),
            data(F32, &x),
            Data::zeros(F32, rows),
        ]
    };
    let mut bufs = mk(&ptr, &crd);
    agree_with_eval(&p, &bufs, 2, 1e-6);
    let (vr, xr) = (bufs[2].to_f64(), bufs[3].to_f64());
    let mut be = CpuBackend::new().unwrap();
    let exe = be.compile(&p).unwrap();
    exe.run(&mut bufs, 2).unwrap();
    let want: Vec<f64> = (0..rows)
        .map(|i| {
            (ptr[i]..ptr[i + 1])
                .map(|q| vr[q as usize] * xr[crd[q as usize] as usize])
                .sum()
        })
        .collect();
    assert_close(&bufs[4], &want, 1e-6);

    // A coordinate outside x, positions past the coordinates, or positions going backwards are
    // refused before anything runs.
    let mut bad_crd = crd.clone();
    bad_crd[3] = cols as i32;
    let mut bufs = mk(&ptr, &bad_crd);
    assert!(matches!(
        exe.run(&mut bufs, 1),
        Err(RuntimeError::OutOfBounds { .. } | RuntimeError::BadSparseData { .. })
    ));
    assert!(bufs[4].to_f64().iter().all(|v| *v == 0.0));
    let mut bad_ptr = ptr.clone();
    *bad_ptr.last_mut().unwrap() = nnz as i32 + 1;
    let mut bufs = mk(&bad_ptr, &crd);
    assert!(matches!(
        exe.run(&mut bufs, 1),
        Err(RuntimeError::BadSparseData { .. })
    ));
    let mut back = ptr.clone();
    back.swap(3, 4);
    if back != ptr {
        let mut bufs = mk(&back, &crd);
        assert!(matches!(
            exe.run(&mut bufs, 1),
            Err(RuntimeError::BadSparseData { .. })
        ));
    }
    let mut neg = crd.clone();
    neg[0] = -1;
    let mut bufs = mk(&ptr, &neg);
    assert!(exe.run(&mut bufs, 1).is_err());
}

#[test]
fn coo_spmv_via_singleton_levels() {
    let (rows, cols) = (5usize, 6usize);
    let entries = [
        (0, 1, 0.5),
        (0, 5, -1.0),
        (2, 0, 2.0),
        (4, 4, 0.25),
        (4, 1, 1.5),
    ];
    let nnz = entries.len() as u64;
    let single = |var: u32, crd: u32, body: Vec<Stmt>| {
        Stmt::Loop(Loop {
            var: VarId(var),
            iter: Iter::Singleton {
                crd: BufId(crd),
                pos_index: ix(0, &[(0, 1)]),
            },
            parallel: false,
            vector: 1,
            gpu: None,
            body,
        })
    };
    let p = program(
        vec![
            input("row", I32, nnz, 0),
            input("col", I32, nnz, 1),
            input("vals", F32, nnz, 2),
            input("x", F32, cols as u64, 3),
            output("y", F32, rows as u64),
        ],
        vec![kernel(
            "coo",
            vec![range(
                0,
                nnz,
                false,
                1,
                vec![single(
                    1,
                    0,
                    vec![single(
                        2,
                        1,
                        vec![store(
                            4,
                            ix(0, &[(1, 1)]),
                            bin(
                                BinOp::Add,
                                load(4, ix(0, &[(1, 1)])),
                                bin(
                                    BinOp::Mul,
                                    load(2, ix(0, &[(0, 1)])),
                                    load(3, ix(0, &[(2, 1)])),
                                ),
                            ),
                        )],
                    )],
                )],
            )],
        )],
    );
    let x = values(cols, 4);
    let mut bufs = vec![
        Data::I32(entries.iter().map(|e| e.0).collect()),
        Data::I32(entries.iter().map(|e| e.1).collect()),
        data(F32, &entries.iter().map(|e| e.2).collect::<Vec<_>>()),
        data(F32, &x),
        Data::zeros(F32, rows),
    ];
    let xr = bufs[3].to_f64();
    run(&p, &mut bufs, 1);
    let mut want = vec![0.0; rows];
    for (i, j, v) in entries {
        want[i as usize] += v * xr[j as usize];
    }
    assert_close(&bufs[4], &want, 1e-6);
}

fn dot_program(n: u64) -> LoopProgram {
    dot_program_of(F32, n)
}

/// [`dot_program`] with `a` of type `ta`.
fn dot_program_of(ta: ElemType, n: u64) -> LoopProgram {
    program(
        vec![
            input("a", ta, n, 0),
            input("b", F32, n, 1),
            output("s", F32, 1),
        ],
        vec![kernel(
            "dot",
            vec![
                let_(0, F32, c_(0.0)),
                range(
                    0,
                    n,
                    false,
                    4,
                    vec![update(
                        0,
                        AccOp::Add,
                        bin(
                            BinOp::Mul,
                            load(0, ix(0, &[(0, 1)])),
                            load(1, ix(0, &[(0, 1)])),
                        ),
                    )],
                ),
                store(2, ix(0, &[]), acc(0)),
            ],
        )],
    )
}

#[test]
fn vectorised_reduction_uses_vfmadd() {
    // The JIT's own reduction loop (not the dot-product call `dot_product_loops_call_...`).
    let be = CpuBackend::with_options(CpuOptions {
        dot: false,
        ..CpuOptions::default()
    })
    .unwrap();
    let p = dot_program(1000);
    let asm = be.disasm(&p, 0).unwrap();
    if be.uses_fma() {
        assert!(asm.contains("vfmadd"), "no vfmadd in:\n{asm}");
    } else {
        eprintln!("host has no AVX+FMA: skipping the vfmadd check");
    }
    let clif = be.clif(&p, 0).unwrap();
    assert!(clif.contains("f32x4"), "not vectorised:\n{clif}");
    assert!(clif.contains("fma"), "no fma:\n{clif}");
}

/// A loop that only sums products of two unit-stride f32 loads is one call to the wide dot
/// product where the CPU has it, and computes what the JIT's own loop computes (up to the
/// order of the sum), over lengths around its 64-value step and for a plain sum too.
#[test]
fn dot_product_loops_call_the_wide_dot_product() {
    let mut wide = CpuBackend::new().unwrap();
    let mut own = CpuBackend::with_options(CpuOptions {
        dot: false,
        ..CpuOptions::default()
    })
    .unwrap();
    let clif = wide.clif(&dot_program(1000), 0).unwrap();
    assert_eq!(
        clif.contains("call"),
        tdsl_cpu::dot_product_available(),
        "{clif}"
    );
    for ta in [F32, F16, BF16] {
        for n in [64u64, 65, 127, 128, 129, 1000, 4099] {
            // Multiples of 1/8 below 8: exact in f16 and bf16.
            let a: Vec<f64> = (0..n)
                .map(|i| ((i * 37 % 101) as f64 - 50.0) / 8.0)
                .collect();
            let b: Vec<f64> = (0..n)
                .map(|i| ((i * 53 % 89) as f64 - 44.0) / 5.0)
                .collect();
            let run = |be: &mut CpuBackend| {
                let mut bufs = vec![data(ta, &a), data(F32, &b), Data::F32(vec![0.0])];
                be.compile(&dot_program_of(ta, n))
                    .unwrap()
                    .run(&mut bufs, 1)
                    .unwrap();
                bufs[2].to_f64()[0]
            };
            let b32: Vec<f64> = b.iter().map(|&v| v as f32 as f64).collect();
            let want: f64 = a.iter().zip(&b32).map(|(x, y)| x * y).sum();
            let scale: f64 = a.iter().zip(&b32).map(|(x, y)| (x * y).abs()).sum();
            for (name, got) in [("call", run(&mut wide)), ("own loop", run(&mut own))] {
                assert!(
                    (got - want).abs() <= 1e-5 * scale,
                    "{ta:?}, n = {n}, {name}: {got} against {want}"
                );
            }
        }
    }
}

/// `m = max(m, x[i])` (or `min`) over `i < n`, from ±∞; of `x[i] · 2` when `staged` (a value
/// the chunked loop stores first, then reduces with the same call).
fn extreme_program(op: AccOp, n: u64, staged: bool) -> LoopProgram {
    let x = match staged {
        true => bin(BinOp::Mul, load(0, ix(0, &[(0, 1)])), c_(2.0)),
        false => load(0, ix(0, &[(0, 1)])),
    };
    let init = if op == AccOp::Max {
        f64::NEG_INFINITY
    } else {
        f64::INFINITY
    };
    program(
        vec![input("x", F32, n, 0), output("m", F32, 1)],
        vec![kernel(
            "extreme",
            vec![
                let_(0, F32, c_(init)),
                range(0, n, false, 4, vec![update(0, op, x)]),
                store(1, ix(0, &[]), acc(0)),
            ],
        )],
    )
}

/// A row's maximum or minimum of an f32 load is one call to the wide kernel where the CPU has
/// it, and gives the JIT's own loop's bits: NaN anywhere (in the vectors or the tail) gives
/// NaN, `+0` is above `−0` whichever comes first, infinities and all-equal rows included. So
/// does one of an expression, stored chunk by chunk and reduced by the same call.
#[test]
fn maximum_and_minimum_loops_call_the_wide_kernel_and_agree_bit_for_bit() {
    let mut wide = CpuBackend::new().unwrap();
    let mut own = CpuBackend::with_options(CpuOptions {
        dot: false,
        ..CpuOptions::default()
    })
    .unwrap();
    let clif = wide
        .clif(&extreme_program(AccOp::Max, 100, false), 0)
        .unwrap();
    assert_eq!(
        clif.contains("call"),
        tdsl_cpu::dot_product_available(),
        "{clif}"
    );
    let clif = wide
        .clif(&extreme_program(AccOp::Max, 100, true), 0)
        .unwrap();
    assert_eq!(
        clif.contains("call"),
        tdsl_cpu::dot_product_available() && tdsl_cpu::chunked_math_available(),
        "{clif}"
    );
    let mut rows: Vec<(String, Vec<f64>)> = Vec::new();
    for n in [64usize, 65, 79, 128, 200, 1031] {
        let base = values(n, n as u64);
        rows.push((format!("random {n}"), base.clone()));
        for at in [0, n / 2, n - 1] {
            let mut nan = base.clone();
            nan[at] = f64::NAN;
            rows.push((format!("NaN at {at} of {n}"), nan));
        }
        // Zeros of both signs as the extreme, in either order, and one sign alone.
        for (a, b) in [(0.0, -0.0), (-0.0, 0.0), (-0.0, -0.0), (0.0, 0.0)] {
            let mut z: Vec<f64> = base.iter().map(|v| -v.abs() - 1.0).collect();
            // The same lane of the same accumulator (64 apart), or the tail.
            z[1] = a;
            z[if n > 65 { 65 } else { n - 1 }] = b;
            rows.push((format!("max zeros {a}, {b} of {n}"), z.clone()));
            let z: Vec<f64> = z.iter().map(|v| if *v == 0.0 { *v } else { -v }).collect();
            rows.push((format!("min zeros {a}, {b} of {n}"), z));
        }
        let mut inf = base.clone();
        inf[n / 3] = f64::INFINITY;
        inf[n / 4] = f64::NEG_INFINITY;
        rows.push((format!("infinities of {n}"), inf));
        rows.push((format!("all equal {n}"), vec![2.5; n]));
    }
    for (op, staged) in [
        (AccOp::Max, false),
        (AccOp::Min, false),
        (AccOp::Max, true),
        (AccOp::Min, true),
    ] {
        for (name, x) in &rows {
            let p = extreme_program(op, x.len() as u64, staged);
            let run = |be: &mut CpuBackend| {
                let mut bufs = vec![data(F32, x), Data::F32(vec![0.0])];
                be.compile(&p).unwrap().run(&mut bufs, 1).unwrap();
                match &bufs[1] {
                    Data::F32(v) => v[0],
                    _ => unreachable!(),
                }
            };
            let (got, want) = (run(&mut wide), run(&mut own));
            assert!(
                got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(),
                "{op:?} (staged: {staged}), {name}: {got:?} against the loop's {want:?}"
            );
        }
    }
}

/// `y[o] = y[o] + x[i] * w[i, o]` over rows `i < r` of `c` columns (an `x @ W` accumulated in
/// the result): each four rows are one call to the wide axpy over four rows, the rows left one
/// call each, where the CPU has them, and they round each product and sum as the loop does, in
/// the loop's order, so both agree bit for bit.
#[test]
fn axpy_loops_call_the_wide_axpy_and_round_as_the_loop_does() {
    let mut wide = CpuBackend::new().unwrap();
    let mut own = CpuBackend::with_options(CpuOptions {
        dot: false,
        ..CpuOptions::default()
    })
    .unwrap();
    for (r, c) in [
        (3u64, 64u64),
        (5, 65),
        (2, 200),
        (7, 1029),
        (4, 64),
        (8, 100),
        (9, 1029),
    ] {
        let ci = c as i64;
        // Each row's `a`: `x[i]`, or for odd widths `x[i] · x[r − 1 − i]` (rows read apart).
        let a = match c % 2 {
            0 => load(0, ix(0, &[(0, 1)])),
            _ => bin(
                BinOp::Mul,
                load(0, ix(0, &[(0, 1)])),
                load(0, ix(r as i64 - 1, &[(0, -1)])),
            ),
        };
        let p = program(
            vec![
                input("x", F32, r, 0),
                input("w", F32, r * c, 1),
                output("y", F32, c),
            ],
            vec![kernel(
                "axpy",
                vec![range(
                    0,
                    r,
                    false,
                    1,
                    vec![range(
                        1,
                        c,
                        false,
                        4,
                        vec![store(
                            2,
                            ix(0, &[(1, 1)]),
                            bin(
                                BinOp::Add,
                                load(2, ix(0, &[(1, 1)])),
                                bin(BinOp::Mul, a.clone(), load(1, ix(0, &[(0, ci), (1, 1)]))),
                            ),
                        )],
                    )],
                )],
            )],
        );
        if c == 64 {
            let clif = wide.clif(&p, 0).unwrap();
            assert_eq!(
                clif.contains("call"),
                tdsl_cpu::dot_product_available(),
                "{clif}"
            );
        }
        let run = |be: &mut CpuBackend| {
            let mut bufs = vec![
                data(F32, &values(r as usize, 1)),
                data(F32, &values((r * c) as usize, 2)),
                data(F32, &values(c as usize, 3)),
            ];
            be.compile(&p).unwrap().run(&mut bufs, 1).unwrap();
            match &bufs[2] {
                Data::F32(v) => v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>(),
                _ => unreachable!(),
            }
        };
        assert_eq!(run(&mut wide), run(&mut own), "{r}×{c}");
    }
}

/// `y[r, j] = x[r, j] * sqrt(sum_j x[r, j]^2)`: a row statistic used by a second inner loop.
fn row_scale_program(r: u64, c: u64) -> LoopProgram {
    let row = |v: u32| ix(0, &[(0, c as i64), (v, 1)]);
    program(
        vec![input("x", F32, r * c, 0), output("y", F32, r * c)],
        vec![kernel(
            "row_scale",
            vec![range(
                0,
                r,
                true,
                1,
                vec![
                    let_(0, F32, c_(0.0)),
                    range(
                        1,
                        c,
                        false,
                        4,
                        vec![update(
                            0,
                            AccOp::Add,
                            bin(BinOp::Mul, load(0, row(1)), load(0, row(1))),
                        )],
                    ),
                    let_(1, F32, un(UnOp::Sqrt, acc(0))),
                    range(
                        2,
                        c,
                        false,
                        4,
                        vec![store(1, row(2), bin(BinOp::Mul, load(0, row(2)), acc(1)))],
                    ),
                ],
            )],
        )],
    )
}

/// A value computed once per row stays out of the inner loops (Cranelift forgot the enclosing
/// loop when a loop's exit was visited before its body, and put `sqrt` into every inner loop:
/// the main vector loop, its remainder and the scalar tail, each once per element).
#[test]
fn row_invariants_stay_out_of_inner_loops() {
    let be = CpuBackend::new().unwrap();
    let p = row_scale_program(3, 37);
    let asm = be.disasm(&p, 0).unwrap();
    let sqrts = asm.lines().filter(|l| l.contains("sqrt")).count();
    assert_eq!(
        sqrts, 1,
        "expected one sqrt per row, before the inner loops:\n{asm}"
    );
    let x = values(3 * 37, 5);
    let mut want = vec![0.0; 3 * 37];
    for r in 0..3 {
        let row = &x[r * 37..(r + 1) * 37];
        let s = row
            .iter()
            .map(|v| (*v as f32) * (*v as f32))
            .sum::<f32>()
            .sqrt();
        for j in 0..37 {
            want[r * 37 + j] = (row[j] as f32 * s) as f64;
        }
    }
    let zeros = vec![0.0; 3 * 37];
    let got = agree_with_eval(&p, &[data(F32, &x), data(F32, &zeros)], 2, 1e-5);
    assert_close(&got[1], &want, 1e-4);
}

#[test]
fn dot_product_every_option() {
    // The loop IR has no empty loops: the verifier, which every backend runs first, says so.
    let empty = CpuBackend::new().unwrap().compile(&dot_program(0));
    assert!(
        matches!(&empty, Err(CodegenError::Invalid(m)) if m.contains("extent 0")),
        "{:?}",
        empty.err()
    );
    for n in [1u64, 5, 15, 16, 17, 33, 1000] {
        for opt_level in [OptLevel::None, OptLevel::Speed] {
            for n_acc in [1, 2, 4] {
                let mut be = CpuBackend::with_options(CpuOptions {
                    opt_level,
                    n_acc,
                    ..CpuOptions::default()
                })
                .unwrap();
                let p = dot_program(n);
                let (a, b) = (values(n as usize, 1), values(n as usize, 2));
                let mut bufs = vec![data(F32, &a), data(F32, &b), Data::zeros(F32, 1)];
                be.compile(&p).unwrap().run(&mut bufs, 1).unwrap();
                let want: f64 = bufs[0]
                    .to_f64()
                    .iter()
                    .zip(bufs[1].to_f64())
                    .map(|(x, y)| x * y)
                    .sum();
                assert_close(&bufs[2], &[want], 1e-5);
            }
        }
    }
}

#[test]
fn cache_compiles_nothing_the_second_time() {
    let mut be = CpuBackend::new().unwrap();
    let p = broadcast_program(4, 8, 4);
    be.compile(&p).unwrap();
    assert_eq!(be.n_compiled(), 1);
    be.compile(&p).unwrap();
    assert_eq!(be.n_compiled(), 1, "a cache hit compiles nothing");
    // Two kernels with the same text (names differ) compile once.
    let mut twice = p.clone();
    let mut k2 = twice.kernels[0].clone();
    k2.name = "other".into();
    twice.kernels.push(k2);
    be.compile(&twice).unwrap();
    assert_eq!(be.n_compiled(), 1);
    // A different extent is a different kernel.
    be.compile(&broadcast_program(4, 9, 4)).unwrap();
    assert_eq!(be.n_compiled(), 2);
    // A cached executable still runs after its backend is gone.
    let exe = be.compile(&p).unwrap();
    drop(be);
    let mut bufs = vec![
        data(F32, &[1.0; 32]),
        data(F32, &[2.0; 8]),
        data(F32, &[0.0; 4]),
        data(F32, &[0.5]),
        Data::zeros(F32, 32),
    ];
    exe.run(&mut bufs, 1).unwrap();
    assert_close(&bufs[4], &[2.5; 32], 0.0);
}

#[test]
fn wrong_buffers_are_refused_before_running() {
    let mut be = CpuBackend::new().unwrap();
    let p = broadcast_program(4, 8, 4);
    let exe = be.compile(&p).unwrap();
    let good = || {
        vec![
            data(F32, &[1.0; 32]),
            data(F32, &[2.0; 8]),
            data(F32, &[0.0; 4]),
            data(F32, &[0.5]),
            data(F32, &[7.0; 32]),
        ]
    };
    let mut short = good();
    short[1] = data(F32, &[2.0; 7]);
    assert!(matches!(
        exe.run(&mut short, 1),
        Err(RuntimeError::BufferLen { index: 1, .. })
    ));
    assert_close(&short[4], &[7.0; 32], 0.0);
    let mut typed = good();
    typed[0] = data(F64, &[1.0; 32]);
    assert!(matches!(
        exe.run(&mut typed, 1),
        Err(RuntimeError::BufferType { index: 0, .. })
    ));
    assert_close(&typed[4], &[7.0; 32], 0.0);
    let mut few = good();
    few.pop();
    assert!(matches!(
        exe.run(&mut few, 1),
        Err(RuntimeError::BufferCount { .. })
    ));
    let mut ok = good();
    exe.run(&mut ok, 1).unwrap();
}

#[test]
fn out_of_bounds_programs_do_not_compile() {
    let mut be = CpuBackend::new().unwrap();
    // Reads one element past the end of `a`.
    let mut p = broadcast_program(4, 8, 4);
    p.buffers[0].elems = 31;
    assert!(matches!(be.compile(&p), Err(CodegenError::OutOfBounds(_))));
    // A negative offset.
    let p = program(
        vec![input("x", F32, 4, 0), output("y", F32, 4)],
        vec![kernel(
            "neg",
            vec![range(
                0,
                4,
                false,
                4,
                vec![store(1, ix(0, &[(0, 1)]), load(0, ix(-1, &[(0, 1)])))],
            )],
        )],
    );
    assert!(matches!(be.compile(&p), Err(CodegenError::OutOfBounds(_))));
    // A gemm view past its buffer.
    let p = program(
        vec![
            input("a", F32, 4, 0),
            input("b", F32, 4, 1),
            output("c", F32, 3),
        ],
        vec![kernel(
            "g",
            vec![Stmt::Call(LibCall::Gemm {
                m: 2,
                n: 2,
                k: 2,
                batch: vec![],
                a: mat(0, 0, 2, 1, &[]),
                b: mat(1, 0, 2, 1, &[]),
                c: mat(2, 0, 2, 1, &[]),
                accumulate: false,
            })],
        )],
    );
    assert!(matches!(be.compile(&p), Err(CodegenError::OutOfBounds(_))));
    // Unbound variables and unknown buffers are malformed programs.
    let p = program(
        vec![output("y", F32, 4)],
        vec![kernel("u", vec![store(0, ix(0, &[(3, 1)]), c_(1.0))])],
    );
    assert!(matches!(be.compile(&p), Err(CodegenError::Invalid(_))));
    // 2:4 metadata words past the end of `meta` (2·8 kept values need one word, at index 4).
    let p = program(
        vec![input("meta", I32, 4, 0), output("y", F32, 32)],
        vec![kernel(
            "tf",
            vec![Stmt::Loop(Loop {
                var: VarId(0),
                iter: Iter::TwoFour {
                    groups: 8,
                    meta: BufId(0),
                    meta_index: ix(4, &[]),
                    coord: VarId(1),
                },
                parallel: false,
                vector: 1,
                gpu: None,
                body: vec![store(1, ix(0, &[(1, 1)]), c_(1.0))],
            })],
        )],
    );
    assert!(matches!(be.compile(&p), Err(CodegenError::OutOfBounds(_))));
    // Storing into a buffer the kernel reads as sparse index data (an i32 buffer: the verifier
    // rejects the store before the backend's own check would).
    let p = program(
        vec![buffer("meta", I32, 4, Role::Temp), output("y", F32, 8)],
        vec![kernel(
            "tf",
            vec![Stmt::Loop(Loop {
                var: VarId(0),
                iter: Iter::TwoFour {
                    groups: 2,
                    meta: BufId(0),
                    meta_index: ix(0, &[]),
                    coord: VarId(1),
                },
                parallel: false,
                vector: 1,
                gpu: None,
                body: vec![store(0, ix(0, &[]), c_(1.0))],
            })],
        )],
    );
    assert!(matches!(be.compile(&p), Err(CodegenError::Invalid(m)) if m.contains("i32")));
    assert_eq!(be.n_compiled(), 0);
}

#[test]
fn kernels_mixing_loops_and_gemm() {
    // c = a·b, then c += 1 in the same kernel, then a row sum in another.
    let (m, n, k) = (3u64, 4u64, 5u64);
    let p = program(
        vec![
            input("a", F32, m * k, 0),
            input("b", F32, k * n, 1),
            buffer("c", F32, m * n, Role::Temp),
            output("s", F32, m),
        ],
        vec![
            kernel(
                "mm_bias",
                vec![
                    Stmt::Call(LibCall::Gemm {
                        m,
                        n,
                        k,
                        batch: vec![],
                        a: mat(0, 0, k as i64, 1, &[]),
                        b: mat(1, 0, n as i64, 1, &[]),
                        c: mat(2, 0, n as i64, 1, &[]),
                        accumulate: false,
                    }),
                    range(
                        0,
                        m * n,
                        true,
                        4,
                        vec![store(
                            2,
                            ix(0, &[(0, 1)]),
                            bin(BinOp::Add, load(2, ix(0, &[(0, 1)])), c_(1.0)),
                        )],
                    ),
                ],
            ),
            kernel(
                "rowsum",
                vec![range(
                    0,
                    m,
                    true,
                    1,
                    vec![
                        let_(0, F32, c_(0.0)),
                        range(
                            1,
                            n,
                            false,
                            4,
                            vec![update(
                                0,
                                AccOp::Add,
                                load(2, ix(0, &[(0, n as i64), (1, 1)])),
                            )],
                        ),
                        store(3, ix(0, &[(0, 1)]), acc(0)),
                    ],
                )],
            ),
        ],
    );
    let (a, b) = (values((m * k) as usize, 1), values((k * n) as usize, 2));
    let mut bufs = vec![
        data(F32, &a),
        data(F32, &b),
        Data::zeros(F32, (m * n) as usize),
        Data::zeros(F32, m as usize),
    ];
    let (ar, br) = (bufs[0].to_f64(), bufs[1].to_f64());
    let be = CpuBackend::new().unwrap();
    let text = be.clif(&p, 0).unwrap();
    assert!(text.contains("library call"), "{text}");
    run(&p, &mut bufs, 1);
    let want: Vec<f64> = (0..m as usize)
        .map(|i| {
            (0..n as usize)
                .map(|j| {
                    1.0 + (0..k as usize)
                        .map(|l| ar[i * k as usize + l] * br[l * n as usize + j])
                        .sum::<f64>()
                })
                .sum()
        })
        .collect();
    assert_close(&bufs[3], &want, 1e-5);
}

/// `y[r] = Σ_v vals[r, v]·x[coord]` over a 2:4 sparse matrix of `rows`×`4·groups`, each row's
/// metadata starting on a word boundary.
#[test]
fn two_four_spmv() {
    for groups in [1u64, 3, 8, 9, 20] {
        let rows = 3u64;
        let kept = 2 * groups;
        let words = kept.div_ceil(16);
        let cols = 4 * groups;
        // Kept positions per group: a deterministic choice of two distinct increasing positions.
        let pairs = [(0u32, 1u32), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)];
        let mut meta = vec![0i32; (rows * words) as usize];
        let mut dense = vec![0.0f64; (rows * cols) as usize];
        let v = values((rows * kept) as usize, 21);
        for r in 0..rows {
            for g in 0..groups {
                let (p0, p1) = pairs[((r * 7 + g * 5) % 6) as usize];
                for (h, pos) in [p0, p1].into_iter().enumerate() {
                    let kv = 2 * g + h as u64;
                    let w = (r * words + kv / 16) as usize;
                    meta[w] |= (pos << (2 * (kv % 16))) as i32;
                    dense[(r * cols + 4 * g + pos as u64) as usize] = v[(r * kept + kv) as usize];
                }
            }
        }
        let p = program(
            vec![
                input("meta", I32, rows * words, 0),
                input("vals", F32, rows * kept, 1),
                input("x", F32, cols, 2),
                output("y", F32, rows),
            ],
            vec![kernel(
                "spmv24",
                vec![range(
                    0,
                    rows,
                    true,
                    1,
                    vec![
                        let_(0, F32, c_(0.0)),
                        Stmt::Loop(Loop {
                            var: VarId(1),
                            iter: Iter::TwoFour {
                                groups,
                                meta: BufId(0),
                                meta_index: ix(0, &[(0, words as i64)]),
                                coord: VarId(2),
                            },
                            parallel: false,
                            vector: 1,
                            gpu: None,
                            body: vec![update(
                                0,
                                AccOp::Add,
                                bin(
                                    BinOp::Mul,
                                    load(1, ix(0, &[(0, kept as i64), (1, 1)])),
                                    load(2, ix(0, &[(2, 1)])),
                                ),
                            )],
                        }),
                        store(3, ix(0, &[(0, 1)]), acc(0)),
                    ],
                )],
            )],
        );
        let x = values(cols as usize, 22);
        let bufs = vec![
            Data::I32(meta),
            data(F32, &v),
            data(F32, &x),
            Data::zeros(F32, rows as usize),
        ];
        let xr = bufs[2].to_f64();
        let got = agree_with_eval(&p, &bufs, 2, 1e-6);
        let dense_r: Vec<f64> = dense.iter().map(|d| *d as f32 as f64).collect();
        let want: Vec<f64> = (0..rows as usize)
            .map(|r| {
                (0..cols as usize)
                    .map(|j| dense_r[r * cols as usize + j] * xr[j])
                    .sum()
            })
            .collect();
        assert_close(&got[3], &want, 1e-5);
    }
}

/// The inline f32x4 exp (and sigmoid built on it) against f64 rounded once: within 2 ulp for
/// normal results, exact specials, and the right behaviour past overflow and underflow.
#[test]
fn vector_exp_accuracy() {
    let mut x: Vec<f32> = (0..200_000)
        .map(|i| -110.0 + 205.0 * (i as f32) / 200_000.0)
        .collect();
    x.extend([
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        88.72,
        88.73,
        -87.33,
        -103.0,
        -103.97,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ]);
    let n = x.len() as u64;
    for op in [UnOp::Exp, UnOp::Sigmoid] {
        let p = program(
            vec![input("x", F32, n, 0), output("y", F32, n)],
            vec![kernel(
                "exp",
                vec![range(
                    0,
                    n,
                    true,
                    4,
                    vec![store(
                        1,
                        ix(0, &[(0, 1)]),
                        un(op, load(0, ix(0, &[(0, 1)]))),
                    )],
                )],
            )],
        );
        let mut bufs = vec![Data::F32(x.clone()), Data::zeros(F32, n as usize)];
        run(&p, &mut bufs, 1);
        let Data::F32(y) = &bufs[1] else { panic!() };
        for (v, g) in x.iter().zip(y) {
            let w64 = match op {
                UnOp::Exp => (*v as f64).exp(),
                _ => 1.0 / (1.0 + (-(*v as f64)).exp()),
            };
            let w = w64 as f32;
            if w.is_nan() {
                assert!(g.is_nan(), "{op:?}({v}) = {g}, want NaN");
            } else if w.is_infinite() || *g == w {
                assert_eq!(*g, w, "{op:?}({v})");
            } else if w.abs() < f32::MIN_POSITIVE {
                assert!(
                    (g - w).abs() <= 2.0 * 1.4e-45,
                    "{op:?}({v}) = {g:e}, want {w:e}"
                );
            } else {
                let ulps = (g.to_bits() as i64 - w.to_bits() as i64).abs();
                assert!(ulps <= 2, "{op:?}({v}) = {g:e}, want {w:e} ({ulps} ulp)");
            }
        }
    }
}

/// Renamed buffers and kernels share a cache entry; two kernels that print alike but differ
/// (a `set` whose value is `max(a0, e)` prints like a max update) each get their own code.
#[test]
fn cache_key_is_canonical_text_with_exact_check() {
    let mut be = CpuBackend::new().unwrap();
    let p = row_reduce(3, 10, AccOp::Max, f64::NEG_INFINITY, 4, F32);
    be.compile(&p).unwrap();
    assert_eq!(be.n_compiled(), 1);
    let mut renamed = p.clone();
    renamed.buffers[0].name = "other".into();
    renamed.kernels[0].name = "k9".into();
    renamed.kernels[0].origin = "elsewhere".into();
    be.compile(&renamed).unwrap();
    assert_eq!(be.n_compiled(), 1, "names do not change the code");

    let mut set_max = p.clone();
    let Stmt::Loop(outer) = &mut set_max.kernels[0].body[0] else {
        panic!()
    };
    let Stmt::Loop(inner) = &mut outer.body[1] else {
        panic!()
    };
    inner.body = vec![update(
        0,
        AccOp::Set,
        bin(BinOp::Max, acc(0), load(0, ix(0, &[(0, 10), (1, 1)]))),
    )];
    assert_eq!(
        tdsl_loop::print::print_kernel(&p, &p.kernels[0]),
        tdsl_loop::print::print_kernel(&set_max, &set_max.kernels[0]),
        "the two kernels print alike"
    );
    let both = program(
        p.buffers.clone(),
        vec![p.kernels[0].clone(), set_max.kernels[0].clone()],
    );
    let exe = be.compile(&both).unwrap();
    assert_eq!(be.n_compiled(), 2);
    let x = values(30, 3);
    let mut bufs = vec![data(F32, &x), Data::zeros(F32, 3)];
    exe.run(&mut bufs, 1).unwrap();
    let xr = bufs[0].to_f64();
    let want: Vec<f64> = (0..3)
        .map(|i| {
            xr[i * 10..(i + 1) * 10]
                .iter()
                .cloned()
                .fold(f64::MIN, f64::max)
        })
        .collect();
    assert_close(&bufs[1], &want, 0.0);
}

/// A column sum (the load's stride is the row length): lanes are gathered, the reduction still
/// runs on vector accumulators. f16 exercises per-lane conversion.
#[test]
fn strided_gather_reduction() {
    for ty in [F32, F16, F64] {
        for (r, c) in [(37u64, 5u64), (4, 3), (64, 9)] {
            let p = program(
                vec![input("x", ty, r * c, 0), output("y", ty, c)],
                vec![kernel(
                    "colsum",
                    vec![range(
                        0,
                        c,
                        true,
                        1,
                        vec![
                            let_(0, ty.compute(), c_(0.0)),
                            range(
                                1,
                                r,
                                false,
                                4,
                                vec![update(
                                    0,
                                    AccOp::Add,
                                    load(0, ix(0, &[(1, c as i64), (0, 1)])),
                                )],
                            ),
                            store(1, ix(0, &[(0, 1)]), acc(0)),
                        ],
                    )],
                )],
            );
            let be = CpuBackend::new().unwrap();
            let clif = be.clif(&p, 0).unwrap();
            assert!(clif.contains("insertlane"), "not gathered:\n{clif}");
            let xd = data(ty, &values((r * c) as usize, 31));
            let xr = xd.to_f64();
            let bufs = vec![xd, Data::zeros(ty, c as usize)];
            let tol = match ty {
                F64 => 1e-12,
                F32 => 1e-5,
                _ => 2e-3,
            };
            let got = agree_with_eval(&p, &bufs, 2, tol);
            let want: Vec<f64> = (0..c as usize)
                .map(|j| (0..r as usize).map(|i| xr[i * c as usize + j]).sum())
                .collect();
            assert_close(&got[1], &want, tol);
        }
    }
}

/// Loops marked `vector` whose iterations depend on each other through memory stay scalar, so
/// they keep their sequential meaning.
#[test]
fn loop_carried_dependences_are_not_vectorised() {
    let n = 23u64;
    // y[i + 1] = 0.5·y[i] + x[i] (a recurrence), and z[i] = z[0] + x[i] (reads an element that
    // iteration 0 overwrites).
    let p = program(
        vec![
            input("x", F32, n, 0),
            buffer("y", F32, n + 1, Role::Output(0)),
            buffer("z", F32, n, Role::Output(1)),
        ],
        vec![
            kernel(
                "rec",
                vec![range(
                    0,
                    n,
                    false,
                    4,
                    vec![store(
                        1,
                        ix(1, &[(0, 1)]),
                        bin(
                            BinOp::Add,
                            bin(BinOp::Mul, c_(0.5), load(1, ix(0, &[(0, 1)]))),
                            load(0, ix(0, &[(0, 1)])),
                        ),
                    )],
                )],
            ),
            kernel(
                "first",
                vec![range(
                    0,
                    n,
                    false,
                    4,
                    vec![store(
                        2,
                        ix(0, &[(0, 1)]),
                        bin(BinOp::Add, load(2, ix(0, &[])), load(0, ix(0, &[(0, 1)]))),
                    )],
                )],
            ),
        ],
    );
    let x = values(n as usize, 2);
    let mut z0 = vec![0.0; n as usize];
    z0[0] = 1.0;
    let bufs = vec![data(F32, &x), data(F32, &[1.0; 24]), data(F32, &z0)];
    let got = agree_with_eval(&p, &bufs, 1, 1e-6);
    let xr = bufs[0].to_f64();
    let mut y = vec![1.0f64; n as usize + 1];
    for i in 0..n as usize {
        y[i + 1] = 0.5 * y[i] + xr[i];
    }
    assert_close(&got[1], &y, 1e-6);
    let mut z = z0.clone();
    for i in 0..n as usize {
        z[i] = z[0] + xr[i];
    }
    assert_close(&got[2], &z, 1e-6);
}

/// Matrix-vector products as the planner writes them: n = 1 with zero column strides (and the
/// transposed form, m = 1).
#[test]
fn gemm_matvec_shapes() {
    let (m, k) = (37u64, 29u64);
    for threads in [1, 2] {
        let p = program(
            vec![
                input("a", F32, m * k, 0),
                input("x", F32, k, 1),
                output("y", F32, m),
                buffer("yt", F32, m, Role::Output(1)),
            ],
            vec![
                kernel(
                    "mv",
                    vec![Stmt::Call(LibCall::Gemm {
                        m,
                        n: 1,
                        k,
                        batch: vec![],
                        a: mat(0, 0, k as i64, 1, &[]),
                        b: mat(1, 0, 1, 0, &[]),
                        c: mat(2, 0, 1, 0, &[]),
                        accumulate: false,
                    })],
                ),
                kernel(
                    "vm",
                    vec![Stmt::Call(LibCall::Gemm {
                        m: 1,
                        n: m,
                        k,
                        batch: vec![],
                        a: mat(1, 0, 0, 1, &[]),
                        b: mat(0, 0, 1, k as i64, &[]),
                        c: mat(3, 0, 0, 1, &[]),
                        accumulate: false,
                    })],
                ),
            ],
        );
        let bufs = vec![
            data(F32, &values((m * k) as usize, 1)),
            data(F32, &values(k as usize, 2)),
            Data::zeros(F32, m as usize),
            Data::zeros(F32, m as usize),
        ];
        let (ar, xr) = (bufs[0].to_f64(), bufs[1].to_f64());
        let got = agree_with_eval(&p, &bufs, threads, 1e-5);
        let want: Vec<f64> = (0..m as usize)
            .map(|i| {
                (0..k as usize)
                    .map(|l| ar[i * k as usize + l] * xr[l])
                    .sum()
            })
            .collect();
        assert_close(&got[2], &want, 1e-5);
        assert_close(&got[3], &want, 1e-5);
    }
}

/// A `parallel` loop whose iterations store to overlapping elements runs on one thread (same
/// result as in order); a loop with disjoint stores is split.
#[test]
fn only_race_free_loops_are_split() {
    let (r, c) = (300u64, 300u64);
    let body = |index: Index| {
        vec![range(
            0,
            r,
            true,
            1,
            vec![range(
                1,
                c,
                false,
                4,
                vec![store(
                    1,
                    index,
                    bin(
                        BinOp::Add,
                        load(0, ix(0, &[(0, c as i64), (1, 1)])),
                        c_(1.0),
                    ),
                )],
            )],
        )]
    };
    for (index, split) in [
        (ix(0, &[(0, c as i64), (1, 1)]), true),
        (ix(0, &[(0, 1), (1, 1)]), false),
    ] {
        let p = program(
            vec![input("x", F32, r * c, 0), output("y", F32, r * c)],
            vec![kernel("k", body(index))],
        );
        let bufs = vec![
            data(F32, &values((r * c) as usize, 1)),
            Data::zeros(F32, (r * c) as usize),
        ];
        let mut mine = bufs.clone();
        let stats = run(&p, &mut mine, 2);
        assert_eq!(stats.tasks, if split { 2 } else { 1 });
        agree_with_eval(&p, &bufs, 2, 0.0);
    }
}

/// COO's `idx` interleaves the coordinates of every axis (`idx[2p]` row, `idx[2p + 1]` column).
/// The run-time bounds check must bound each singleton level by the coordinates it actually
/// reads, not by the whole buffer: here columns reach 8 while rows stay below 3, and a load of
/// the dense `m[8·row + col]` (24 elements) is in bounds only with the per-axis ranges.
#[test]
fn coo_singleton_bounds_use_the_coordinates_each_level_reads() {
    let (rows, cols) = (3u64, 8u64);
    let entries = [(0, 7, 0.5), (1, 2, -1.0), (2, 0, 2.0), (2, 6, 0.25)];
    let nnz = entries.len() as u64;
    let single = |var: u32, k: i64, body: Vec<Stmt>| {
        Stmt::Loop(Loop {
            var: VarId(var),
            iter: Iter::Singleton {
                crd: BufId(1),
                pos_index: ix(k, &[(0, 2)]),
            },
            parallel: false,
            vector: 1,
            gpu: None,
            body,
        })
    };
    // for p in compressed ptr[0] { row = idx[2p]; col = idx[2p+1]; out[p] = vals[p] * m[8 row + col] }
    let p = program(
        vec![
            input("ptr", I32, 2, 0),
            input("idx", I32, 2 * nnz, 1),
            input("vals", F32, nnz, 2),
            input("m", F32, rows * cols, 3),
            output("out", F32, nnz),
        ],
        vec![kernel(
            "coo_map",
            vec![Stmt::Loop(Loop {
                var: VarId(0),
                iter: Iter::Compressed {
                    ptr: BufId(0),
                    ptr_index: ix(0, &[]),
                    crd: BufId(1),
                    coord: VarId(3),
                },
                parallel: false,
                vector: 1,
                gpu: None,
                body: vec![single(
                    1,
                    0,
                    vec![single(
                        2,
                        1,
                        vec![store(
                            4,
                            ix(0, &[(0, 1)]),
                            bin(
                                BinOp::Mul,
                                load(2, ix(0, &[(0, 1)])),
                                load(3, ix(0, &[(1, cols as i64), (2, 1)])),
                            ),
                        )],
                    )],
                )],
            })],
        )],
    );
    let m = values((rows * cols) as usize, 9);
    let bufs = vec![
        Data::I32(vec![0, nnz as i32]),
        Data::I32(entries.iter().flat_map(|e| [e.0, e.1]).collect()),
        data(F32, &entries.iter().map(|e| e.2).collect::<Vec<_>>()),
        data(F32, &m),
        Data::zeros(F32, nnz as usize),
    ];
    let mr = bufs[3].to_f64();
    let got = agree_with_eval(&p, &bufs, 1, 1e-6);
    let want: Vec<f64> = entries
        .iter()
        .map(|&(i, j, v)| v * mr[(i as u64 * cols + j as u64) as usize])
        .collect();
    assert_close(&got[4], &want, 1e-6);
    // A row coordinate past the dense operand is still caught.
    let mut bad = bufs.clone();
    bad[1] = Data::I32(vec![0, 7, 1, 2, 3, 0, 2, 6]);
    let mut be = tdsl_cpu::CpuBackend::new().expect("host target");
    let exe = be.compile(&p).expect("compiles");
    assert!(exe.run(&mut bad, 1).is_err());
}

/// Rows of `e` elements: `y = tanh(x)·sigmoid(x) + gelu(x − 0.5) + tanh(x)` stored and
/// `s = Σ exp(x/10)` reduced, both in one f32 vector loop.
fn chunked_rows(rows: u64, e: u64) -> LoopProgram {
    let x = || load(0, ix(0, &[(0, e as i64), (1, 1)]));
    let t = || un(UnOp::Tanh, x());
    let value = bin(
        BinOp::Add,
        bin(
            BinOp::Add,
            bin(BinOp::Mul, t(), un(UnOp::Sigmoid, x())),
            un(UnOp::Gelu, bin(BinOp::Sub, x(), c(0.5))),
        ),
        t(),
    );
    program(
        vec![
            buffer("x", F32, rows * e, Role::Input(0)),
            buffer("y", F32, rows * e, Role::Output(0)),
            buffer("s", F32, rows, Role::Output(1)),
        ],
        vec![kernel(
            "rows",
            vec![range(
                0,
                rows,
                true,
                1,
                vec![
                    let_(0, F32, c(0.0)),
                    range(
                        1,
                        e,
                        false,
                        4,
                        vec![
                            store(1, ix(0, &[(0, e as i64), (1, 1)]), value),
                            update(0, AccOp::Add, un(UnOp::Exp, bin(BinOp::Mul, x(), c(0.1)))),
                        ],
                    ),
                    store(2, ix(0, &[(0, 1)]), acc(0)),
                ],
            )],
        )],
    )
}

#[test]
fn chunked_vector_math_agrees_with_the_evaluator_across_chunk_edges() {
    // Extents around the 512-iteration chunk and the 4-lane vectors, a reduction beside the
    // stores, and a call (tanh) used twice.
    for e in [64, 67, 511, 512, 513, 1500] {
        let p = chunked_rows(3, e);
        let xs: Vec<f64> = values((3 * e) as usize, e)
            .iter()
            .map(|v| 4.0 * v)
            .collect();
        let bufs = vec![
            data(F32, &xs),
            Data::zeros(F32, (3 * e) as usize),
            Data::zeros(F32, 3),
        ];
        agree_with_eval(&p, &bufs, 2, 1e-5);
        if tdsl_cpu::chunked_math_available() {
            let be = CpuBackend::new().unwrap();
            let clif = be.clif(&p, 0).unwrap();
            // One call per distinct function: tanh, sigmoid, gelu, exp; and the arguments of
            // gelu and exp (`x - 0.5`, `x * 0.1`) as wide passes.
            assert_eq!(calls_of_signature(&clif, VMATH), 4, "{clif}");
            assert_eq!(calls_of_signature(&clif, VARITH), 2, "{clif}");
        }
    }
}
