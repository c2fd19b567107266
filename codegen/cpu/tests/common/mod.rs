//! Builders for hand-written loop programs and comparison helpers shared by the tests.

#![allow(dead_code)]

use tdsl_loop::*;

pub fn buffer(name: &str, ty: ElemType, elems: u64, role: Role) -> Buffer {
    Buffer {
        name: name.into(),
        ty,
        elems,
        role,
    }
}

pub fn ix(offset: i64, terms: &[(u32, i64)]) -> Index {
    Index {
        offset,
        terms: terms.iter().map(|&(v, s)| (VarId(v), s)).collect(),
    }
}

pub fn load(b: u32, index: Index) -> Expr {
    Expr::Load {
        buf: BufId(b),
        index,
    }
}

pub fn c(x: f64) -> Expr {
    Expr::Const(x)
}

pub fn acc(a: u32) -> Expr {
    Expr::Acc(AccId(a))
}

pub fn un(op: UnOp, x: Expr) -> Expr {
    Expr::Unary(op, Box::new(x))
}

pub fn bin(op: BinOp, x: Expr, y: Expr) -> Expr {
    Expr::Binary(op, Box::new(x), Box::new(y))
}

pub fn cast(t: ElemType, x: Expr) -> Expr {
    Expr::Cast(t, Box::new(x))
}

pub fn range(var: u32, extent: u64, parallel: bool, vector: u32, body: Vec<Stmt>) -> Stmt {
    Stmt::Loop(Loop {
        var: VarId(var),
        iter: Iter::Range { extent },
        parallel,
        vector,
        gpu: None,
        body,
    })
}

pub fn store(b: u32, index: Index, value: Expr) -> Stmt {
    Stmt::Store {
        buf: BufId(b),
        index,
        value,
    }
}

pub fn let_(a: u32, ty: ElemType, init: Expr) -> Stmt {
    Stmt::Let {
        acc: AccId(a),
        ty,
        init,
    }
}

pub fn update(a: u32, op: AccOp, value: Expr) -> Stmt {
    Stmt::Update {
        acc: AccId(a),
        op,
        value,
    }
}

pub fn kernel(name: &str, body: Vec<Stmt>) -> Kernel {
    Kernel {
        name: name.into(),
        origin: name.into(),
        source: None,
        body,
    }
}

pub fn program(buffers: Vec<Buffer>, kernels: Vec<Kernel>) -> LoopProgram {
    LoopProgram {
        buffers,
        kernels,
        tf32: false,
    }
}

/// Deterministic pseudo-random values in [-1, 1).
pub fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

pub fn data(ty: ElemType, xs: &[f64]) -> Data {
    let mut d = Data::zeros(ty, xs.len());
    for (i, x) in xs.iter().enumerate() {
        d.set(i, *x);
    }
    d
}

/// Asserts `got` ≈ `want` elementwise: |g − w| ≤ tol·(1 + |w|), NaN matching NaN.
pub fn assert_close(got: &Data, want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, w) in want.iter().enumerate() {
        let g = got.get(i);
        if w.is_nan() {
            assert!(g.is_nan(), "element {i}: got {g}, want NaN");
            continue;
        }
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()) || g == *w,
            "element {i}: got {g}, want {w} (tolerance {tol})"
        );
    }
}

/// Runs `p` through `tdsl_loop::eval`-free direct execution on the CPU backend.
pub fn run(p: &LoopProgram, bufs: &mut [Data], threads: usize) -> tdsl_cpu::RunStats {
    run_with(p, bufs, threads, tdsl_cpu::CpuOptions::default())
}

/// [`run`] with the backend's options.
pub fn run_with(
    p: &LoopProgram,
    bufs: &mut [Data],
    threads: usize,
    opts: tdsl_cpu::CpuOptions,
) -> tdsl_cpu::RunStats {
    let mut be = tdsl_cpu::CpuBackend::with_options(opts).expect("host target");
    let exe = be.compile(p).expect("compiles");
    exe.run(bufs, threads).expect("runs")
}

/// Runs `p` on copies of `bufs` through the CPU backend (on `threads` threads) and through
/// `tdsl_loop::eval`, and asserts every buffer agrees within `tol`. Returns the backend's buffers.
pub fn agree_with_eval(p: &LoopProgram, bufs: &[Data], threads: usize, tol: f64) -> Vec<Data> {
    let mut jit = bufs.to_vec();
    run(p, &mut jit, threads);
    let mut ev = bufs.to_vec();
    tdsl_loop::eval::eval(p, &mut ev).expect("the evaluator runs the program");
    for (k, (j, e)) in jit.iter().zip(&ev).enumerate() {
        let name = &p.buffers[k].name;
        let r = std::panic::catch_unwind(|| assert_close(j, &e.to_f64(), tol));
        assert!(
            r.is_ok(),
            "buffer {k} ({name}): the backend and the evaluator differ"
        );
    }
    jit
}

/// How many calls the CLIF text `clif` makes to functions of signature `params` (as the text
/// writes it, `(i32, i64, i64, i64, f32)` for the chunked vector math).
#[allow(dead_code)]
pub fn calls_of_signature(clif: &str, params: &str) -> usize {
    let sigs: Vec<&str> = clif
        .lines()
        .filter_map(|l| l.trim().split_once(" = "))
        .filter(|(_, rhs)| {
            rhs.strip_prefix(params)
                .is_some_and(|r| r.trim() == "system_v")
        })
        .map(|(name, _)| name)
        .collect();
    let fns: Vec<String> = clif
        .lines()
        .filter_map(|l| l.trim().split_once(" = "))
        .filter(|(_, rhs)| sigs.iter().any(|s| rhs.ends_with(&format!(" {s}"))))
        .map(|(name, _)| format!("call {name}("))
        .collect();
    fns.iter().map(|f| clif.matches(f.as_str()).count()).sum()
}

/// The signature of the chunked vector math (`tdsl_vmath_f32`) in CLIF text.
#[allow(dead_code)]
pub const VMATH: &str = "(i32, i64, i64, i64, f32)";

/// The signature of the wide passes (`tdsl_varith_f32`) in CLIF text.
#[allow(dead_code)]
pub const VARITH: &str = "(i32, i64, i64, i64, i64, f32)";
