//! Differential property test: random elementwise and row-reduction kernels (extents 1–9 and
//! a few primes, every float dtype, scalar or vector loops, broadcast operands) run through the
//! CPU backend agree with the same computation written directly in Rust (f64) within a
//! per-dtype tolerance.

mod common;

use common::*;
use proptest::prelude::*;
use tdsl_loop::*;

/// A random scalar expression over `x[i, j]` (unit stride), `w[j, i]` (strided: gathered),
/// `y[j]` (broadcast over rows), `z[i]` (broadcast over columns) and constants.
#[derive(Debug, Clone)]
enum E {
    X,
    W,
    Y,
    Z,
    Const(f64),
    Un(UnOp, Box<E>),
    Bin(BinOp, Box<E>, Box<E>),
    /// `where(c, a, b)`.
    Sel(Box<E>, Box<E>, Box<E>),
    /// The column index (the innermost, vectorised variable) plus twice the row index.
    Iota,
}

fn arb_e() -> impl Strategy<Value = E> {
    let leaf = prop_oneof![
        Just(E::X),
        Just(E::W),
        Just(E::Y),
        Just(E::Z),
        Just(E::Iota),
        (-2.0f64..2.0).prop_map(|c| E::Const((c * 8.0).round() / 8.0)),
    ];
    let discrete = prop_oneof![
        (
            prop::sample::select(vec![
                BinOp::Lt,
                BinOp::Le,
                BinOp::Gt,
                BinOp::Ge,
                BinOp::Eq,
                BinOp::Ne,
            ]),
            leaf.clone(),
            leaf.clone()
        )
            .prop_map(|(op, x, y)| E::Bin(op, Box::new(x), Box::new(y))),
        (
            prop::sample::select(vec![UnOp::Floor, UnOp::Ceil, UnOp::Round, UnOp::Sign]),
            leaf.clone()
        )
            .prop_map(|(op, x)| E::Un(op, Box::new(x))),
    ];
    leaf.prop_recursive(2, 8, 2, move |inner| {
        let discrete = discrete.clone();
        prop_oneof![
            (
                prop::sample::select(vec![
                    UnOp::Neg,
                    UnOp::Abs,
                    UnOp::Exp,
                    UnOp::Tanh,
                    UnOp::Relu,
                    UnOp::Square,
                    UnOp::Sigmoid,
                    UnOp::Sin,
                    UnOp::Erf,
                    UnOp::GeluErf,
                    UnOp::Silu,
                    UnOp::Softplus,
                    UnOp::Log1p,
                    UnOp::Expm1,
                ]),
                inner.clone()
            )
                .prop_map(|(op, x)| E::Un(op, Box::new(x))),
            (
                prop::sample::select(vec![
                    BinOp::Add,
                    BinOp::Sub,
                    BinOp::Mul,
                    BinOp::Max,
                    BinOp::Min,
                ]),
                inner.clone(),
                inner.clone()
            )
                .prop_map(|(op, x, y)| E::Bin(op, Box::new(x), Box::new(y))),
            // Discontinuous operations take exact operands (loads, indices, constants), so that
            // computing in f32 or f64 cannot flip a comparison or a rounding.
            (discrete.clone(), inner.clone(), inner).prop_map(|(c, a, b)| E::Sel(
                Box::new(c),
                Box::new(a),
                Box::new(b)
            )),
            discrete,
        ]
    })
}

fn to_ir(e: &E, cols: i64, rows: i64) -> Expr {
    match e {
        E::X => load(0, ix(0, &[(0, cols), (1, 1)])),
        E::W => load(4, ix(0, &[(0, 1), (1, rows)])),
        E::Y => load(1, ix(0, &[(0, 0), (1, 1)])),
        E::Z => load(2, ix(0, &[(0, 1), (1, 0)])),
        E::Const(v) => c(*v),
        E::Un(op, x) => un(*op, to_ir(x, cols, rows)),
        E::Bin(op, x, y) => bin(*op, to_ir(x, cols, rows), to_ir(y, cols, rows)),
        E::Sel(c, a, b) => Expr::Select(
            Box::new(to_ir(c, cols, rows)),
            Box::new(to_ir(a, cols, rows)),
            Box::new(to_ir(b, cols, rows)),
        ),
        E::Iota => Expr::Iota(ix(0, &[(0, 2), (1, 1)])),
    }
}

fn eval(e: &E, x: f64, w: f64, y: f64, z: f64, at: (u64, u64)) -> f64 {
    let eval = |e: &E, x, w, y, z| eval(e, x, w, y, z, at);
    match e {
        E::Iota => (2 * at.0 + at.1) as f64,
        E::Sel(c, a, b) => {
            if eval(c, x, w, y, z) != 0.0 {
                eval(a, x, w, y, z)
            } else {
                eval(b, x, w, y, z)
            }
        }
        E::X => x,
        E::W => w,
        E::Y => y,
        E::Z => z,
        E::Const(v) => *v,
        E::Un(op, a) => {
            let a = eval(a, x, w, y, z);
            match op {
                UnOp::Neg => -a,
                UnOp::Abs => a.abs(),
                UnOp::Exp => a.exp(),
                UnOp::Tanh => a.tanh(),
                UnOp::Relu => {
                    if a.is_nan() {
                        a
                    } else {
                        a.max(0.0)
                    }
                }
                UnOp::Square => a * a,
                UnOp::Sigmoid => 1.0 / (1.0 + (-a).exp()),
                UnOp::Sin => a.sin(),
                op => tdsl_loop::scalar::unary(*op, a),
            }
        }
        E::Bin(op, a, b) => {
            let (a, b) = (eval(a, x, w, y, z), eval(b, x, w, y, z));
            match op {
                BinOp::Add => a + b,
                BinOp::Sub => a - b,
                BinOp::Mul => a * b,
                BinOp::Max if a.is_nan() || b.is_nan() => f64::NAN,
                BinOp::Min if a.is_nan() || b.is_nan() => f64::NAN,
                BinOp::Max => a.max(b),
                BinOp::Min => a.min(b),
                BinOp::Lt => f64::from(u8::from(a < b)),
                BinOp::Le => f64::from(u8::from(a <= b)),
                BinOp::Gt => f64::from(u8::from(a > b)),
                BinOp::Ge => f64::from(u8::from(a >= b)),
                BinOp::Eq => f64::from(u8::from(a == b)),
                BinOp::Ne => f64::from(u8::from(a != b)),
                _ => unreachable!(),
            }
        }
    }
}

fn extent() -> impl Strategy<Value = u64> {
    prop::sample::select(vec![1u64, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 17, 31])
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Elementwise,
    Reduce(AccOp),
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Elementwise),
        prop::sample::select(vec![
            AccOp::Add,
            AccOp::Max,
            AccOp::Min,
            AccOp::Mul,
            AccOp::Set
        ])
        .prop_map(Kind::Reduce),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn random_kernels_agree_with_direct_computation(
        e in arb_e(),
        rows in extent(),
        cols in extent(),
        ty in prop::sample::select(vec![ElemType::F32, ElemType::F64, ElemType::F16, ElemType::BF16]),
        vector in prop::sample::select(vec![1u32, 4]),
        k in kind(),
        threads in 1usize..3,
        transposed_out in any::<bool>(),
        seed in 0u64..1000,
    ) {
        let ci = cols as i64;
        let value = to_ir(&e, ci, rows as i64);
        // The elementwise result goes to out[i, j], or to out[j, i] (a scatter).
        let out_ix = if transposed_out {
            ix(0, &[(0, 1), (1, rows as i64)])
        } else {
            ix(0, &[(0, ci), (1, 1)])
        };
        let (inner, out_len, out_index) = match k {
            Kind::Elementwise => (
                vec![range(1, cols, false, vector, vec![store(3, out_ix, value)])],
                rows * cols,
                None,
            ),
            Kind::Reduce(op) => {
                let init = match op {
                    AccOp::Mul => 1.0,
                    AccOp::Max => f64::NEG_INFINITY,
                    AccOp::Min => f64::INFINITY,
                    _ => 0.0,
                };
                (
                    vec![
                        let_(0, ty.compute(), c(init)),
                        range(1, cols, false, vector, vec![update(0, op, value)]),
                        store(3, ix(0, &[(0, 1)]), acc(0)),
                    ],
                    rows,
                    Some((op, init)),
                )
            }
        };
        let p = program(
            vec![
                buffer("x", ty, rows * cols, Role::Input(0)),
                buffer("y", ty, cols, Role::Input(1)),
                buffer("z", ty, rows, Role::Input(2)),
                buffer("out", ty, out_len, Role::Output(0)),
                buffer("w", ty, rows * cols, Role::Input(3)),
            ],
            vec![kernel("k", vec![range(0, rows, true, 1, inner)])],
        );
        let x = data(ty, &values((rows * cols) as usize, seed));
        let y = data(ty, &values(cols as usize, seed + 1));
        let z = data(ty, &values(rows as usize, seed + 2));
        let w = data(ty, &values((rows * cols) as usize, seed + 3));
        let (xr, yr, zr, wr) = (x.to_f64(), y.to_f64(), z.to_f64(), w.to_f64());
        let mut bufs = vec![x, y, z, Data::zeros(ty, out_len as usize), w];
        let mut ev = bufs.clone();
        tdsl_loop::eval::eval(&p, &mut ev).expect("the evaluator runs it");
        run(&p, &mut bufs, threads);

        let (r, cc) = (rows as usize, cols as usize);
        let at = |i: usize, j: usize| {
            eval(&e, xr[i * cc + j], wr[j * r + i], yr[j], zr[i], (i as u64, j as u64))
        };
        let want: Vec<f64> = match out_index {
            None if transposed_out => (0..r * cc).map(|n| at(n % r, n / r)).collect(),
            None => (0..r * cc).map(|n| at(n / cc, n % cc)).collect(),
            Some((op, init)) => (0..r)
                .map(|i| {
                    (0..cc).fold(init, |a, j| {
                        let v = at(i, j);
                        match op {
                            AccOp::Set => v,
                            AccOp::Add => a + v,
                            AccOp::Mul => a * v,
                            AccOp::Max if a.is_nan() || v.is_nan() => f64::NAN,
                            AccOp::Min if a.is_nan() || v.is_nan() => f64::NAN,
                            AccOp::Max => a.max(v),
                            AccOp::Min => a.min(v),
                        }
                    })
                })
                .collect(),
        };
        // The stored result is rounded to the output dtype (so f16 overflows to infinity).
        let want: Vec<f64> = want
            .iter()
            .map(|w| {
                let mut d = Data::zeros(ty, 1);
                d.set(0, *w);
                d.get(0)
            })
            .collect();
        // Tolerance per dtype: the backend computes in f32 (f64 for f64) and rounds on store.
        let tol = match ty {
            ElemType::F64 => 1e-9,
            ElemType::F32 => 1e-4,
            ElemType::F16 => 1e-2,
            _ => 4e-2,
        };
        let scale = want.iter().filter(|w| w.is_finite()).fold(1.0f64, |m, w| m.max(w.abs()));
        let got = &bufs[3];
        // The evaluator computes in the same types: it must agree to rounding (reductions may
        // be reassociated by vector loops).
        for i in 0..want.len() {
            let (g, e) = (got.get(i), ev[3].get(i));
            prop_assert!(
                (g.is_nan() && e.is_nan()) || g == e || (g - e).abs() <= tol * scale,
                "element {i}: backend {g}, evaluator {e}"
            );
        }
        for (i, w) in want.iter().enumerate() {
            let g = got.get(i);
            if w.is_nan() {
                prop_assert!(g.is_nan(), "element {i}: got {g}, want NaN");
            } else if ty == ElemType::F16 && (w.abs() >= 65000.0 || g.abs() >= 65000.0) {
                // At the edge of f16's range a last-bit difference decides between 65504 and
                // infinity.
                prop_assert!(w.signum() == g.signum(), "element {i}: got {g}, want {w}");
            } else if w.is_infinite() || g.is_infinite() {
                prop_assert!(g == *w || (g - w).abs() <= tol * scale.max(w.abs()),
                    "element {i}: got {g}, want {w}");
            } else {
                prop_assert!((g - w).abs() <= tol * scale,
                    "element {i}: got {g}, want {w} (tol {tol}, scale {scale})");
            }
        }
    }
}
