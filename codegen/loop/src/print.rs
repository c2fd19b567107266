//! The loop IR's text form: [`print_program`] and [`print_kernel`].
//!
//! The text is shown by `tdsl plan`, snapshot-tested, and hashed as the JIT kernel-cache key, so
//! it is deterministic (no addresses, hashes or maps) and prints everything that can change
//! generated code: buffer names, types, element counts and roles; loop kinds, extents and
//! `parallel` / `vector` / `gpu` annotations; accumulator types and initial values; every index
//! term with its stride; every operation, cast and library-call parameter. `spec/loop-ir.md`
//! describes the same format for humans.
//!
//! ```text
//! buffers:
//!   %0 x: f32[1024] input 0
//!   %1 y: f32[16] output 0
//! kernel k0 (y = sum(x)):
//!   for v0 in 0..16 parallel {
//!     let a0: f32 = 0
//!     for v1 in 0..64 vector 4 {
//!       a0 += %0[64*v0 + v1]
//!     }
//!     %1[v0] = a0
//!   }
//! ```
//!
//! - `buffers:` lists one buffer a line: `%id name: type[elems] role`, role being `input N`,
//!   `output N` or `temp`. [`print_program`] lists every buffer; [`print_kernel`] lists only the
//!   buffers its kernel touches, so that its text alone fixes the generated code.
//! - `kernel name (origin):` opens a kernel (`kernel name:` when the origin is empty); its body is
//!   indented two spaces a level. Names that are not plain identifiers (letters, digits, `_`, `.`,
//!   not starting with a digit) are quoted; `\`, `"` and control characters are escaped in quoted
//!   names, and `\` and control characters in origins.
//! - Loops: `for v1 in ITER [parallel] [vector N] [gpu AXIS] {` … `}` where ITER is `0..EXTENT`,
//!   `compressed ptr=%p[INDEX] crd=%c coord=vK`, `singleton crd=%c[INDEX]` or
//!   `twofour groups=G meta=%m[INDEX] coord=vK`; `vector` is printed whenever it is not 1; AXIS
//!   is one of `grid block.x block.y block.z thread.x thread.y thread.z warp lane`.
//! - `let aN: f32 = EXPR`; updates `aN += e`, `aN *= e`, `aN = max(aN, e)`, `aN = min(aN, e)`,
//!   `aN = e` (set); stores `%b[INDEX] = EXPR`.
//! - `gemm m=M n=N k=K batch=[B, …] a=VIEW b=VIEW c=VIEW accumulate=BOOL`, a VIEW being
//!   `%b[S0*b0 + … + R*r + C*c + OFFSET]`: every batch, row (`r`) and column (`c`) stride is
//!   printed, `0` and `1` included, and the offset is left out when it is zero.
//! - Sparse calls name a sparse operand SP as `LAYOUT[SHAPE](ptr=%p idx=%i values=%v)` (no
//!   `ptr=` for 2:4), LAYOUT being `coo`, `csr`, `csc`, `bsr(R, C)` or `2:4(axis=A)`:
//!   `spmm m=M n=N k=K left|right s=SP[ᵀ] d=VIEW c=VIEW accumulate=BOOL` (`ᵀ` printed as
//!   ` transposed`), `sparsify %src -> SP keep=all|threshold(T)|density(D)`, `densify SP -> %dst`.
//!   Sparse input arrays are listed as `input N.ptr`, `input N.idx`, `input N.values`; their
//!   lengths are capacities.
//! - Indices are `64*v0 + v1 + 3`: terms in stored order, stride 1 left implicit, stride 0
//!   kept as `0*v1` (a broadcast), negative strides and offsets as subtraction, the offset
//!   last and only when non-zero (a lone `0` for the empty index).
//! - Expressions use infix `+ - * /` and prefix `-` with the usual precedence and only the
//!   parentheses it needs (operations associate to the left, so a right operand of equal
//!   precedence is parenthesised), and calls for everything else: `exp(x)`, `max(a, b)`,
//!   `pow(a, b)`, `cast<f16>(x)`. Loads read `%b[INDEX]`, accumulators `aN`. Constants print
//!   integers without a fraction (`0`, `-3`, `-0`), other finite values as the shortest text
//!   that reads back to the same f64 (`0.1`, `1e-7`), and `inf`, `-inf`, `nan`.
//!
//! Distinct programs print distinctly, with two exceptions of no consequence: `aN = max(aN, e)`
//! is both a max update and a set whose value is a max of the accumulator (and likewise `min`);
//! both compute the same value.

use crate::ir::{
    AccOp, BinOp, Buffer, Expr, GpuAxis, Index, Iter, Kernel, LibCall, Loop, LoopProgram, MatView,
    Role, Select, Side, SparseLayout, SparseOperand, Stmt, UnOp,
};
use std::collections::BTreeSet;
use std::fmt::Write;

/// Prints a whole program: every buffer, then every kernel in order.
///
/// ```
/// use tdsl_loop::{print::print_program, *};
/// let p = LoopProgram {
///     buffers: vec![Buffer { name: "y".into(), ty: ElemType::F32, elems: 4, role: Role::Output(0) }],
///     kernels: vec![Kernel {
///         name: "k0".into(),
///         origin: "y = 1".into(),
///         source: None,
///         body: vec![Stmt::Loop(Loop {
///             var: VarId(0),
///             iter: Iter::Range { extent: 4 },
///             parallel: false,
///             vector: 4,
///             gpu: None,
///             body: vec![Stmt::Store {
///                 buf: BufId(0),
///                 index: Index { offset: 0, terms: vec![(VarId(0), 1)] },
///                 value: Expr::Const(1.0),
///             }],
///         })],
///     }],
///     tf32: false,
/// };
/// assert_eq!(
///     print_program(&p),
///     "buffers:\n  %0 y: f32[4] output 0\nkernel k0 (y = 1):\n  for v0 in 0..4 vector 4 {\n    %0[v0] = 1\n  }\n"
/// );
/// ```
pub fn print_program(p: &LoopProgram) -> String {
    let mut out = String::new();
    if p.tf32 {
        out.push_str("f32 products: tf32 allowed\n");
    }
    out.push_str("buffers:\n");
    for (id, b) in p.buffers.iter().enumerate() {
        buffer_line(&mut out, id, b);
    }
    for k in &p.kernels {
        kernel_block(&mut out, k);
    }
    out
}

/// Prints one kernel preceded by the buffers it touches (loads, stores, sparse levels and
/// library-call views), so that the text alone determines the kernel's generated code: this is
/// the kernel-cache key. Buffer ids are those of the program.
pub fn print_kernel(p: &LoopProgram, k: &Kernel) -> String {
    let mut used = BTreeSet::new();
    for s in &k.body {
        stmt_buffers(s, &mut used);
    }
    let mut out = String::from("buffers:\n");
    for id in used {
        if let Some(b) = p.buffers.get(id as usize) {
            buffer_line(&mut out, id as usize, b);
        }
    }
    kernel_block(&mut out, k);
    out
}

/// The text of an index, as it appears between brackets.
pub(crate) fn index_text(index: &Index) -> String {
    let terms: Vec<(String, i64)> = index
        .terms
        .iter()
        .map(|(v, s)| (format!("v{}", v.0), *s))
        .collect();
    affine(&terms, index.offset, false)
}

/// The text of an expression.
pub(crate) fn expr_text(e: &Expr) -> String {
    let mut out = String::new();
    expr(&mut out, e);
    out
}

/// The text of a library-call view, `%b[…]`.
pub(crate) fn view_text(v: &MatView) -> String {
    let mut terms: Vec<(String, i64)> = v
        .batch_strides
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("b{i}"), *s))
        .collect();
    terms.push(("r".into(), v.row_stride));
    terms.push(("c".into(), v.col_stride));
    format!("%{}[{}]", v.buf.0, affine(&terms, v.offset, true))
}

/// The name of a GPU axis in the text form.
pub(crate) fn gpu_axis_name(axis: GpuAxis) -> &'static str {
    match axis {
        GpuAxis::Grid => "grid",
        GpuAxis::BlockX => "block.x",
        GpuAxis::BlockY => "block.y",
        GpuAxis::BlockZ => "block.z",
        GpuAxis::ThreadX => "thread.x",
        GpuAxis::ThreadY => "thread.y",
        GpuAxis::ThreadZ => "thread.z",
        GpuAxis::Warp => "warp",
        GpuAxis::Lane => "lane",
    }
}

fn buffer_line(out: &mut String, id: usize, b: &Buffer) {
    let role = match b.role {
        Role::Input(n) => format!("input {n}"),
        Role::Output(n) => format!("output {n}"),
        Role::Temp => "temp".to_string(),
        Role::InputPart { input, part } => format!("input {input}.{}", part.name()),
    };
    let _ = writeln!(
        out,
        "  %{id} {}: {}[{}] {role}",
        name(&b.name),
        b.ty,
        b.elems
    );
}

fn kernel_block(out: &mut String, k: &Kernel) {
    if k.origin.is_empty() {
        let _ = writeln!(out, "kernel {}:", name(&k.name));
    } else {
        let _ = writeln!(
            out,
            "kernel {} ({}):",
            name(&k.name),
            escape(&k.origin, false)
        );
    }
    for s in &k.body {
        stmt(out, s, 1);
    }
}

fn stmt(out: &mut String, s: &Stmt, depth: usize) {
    let pad = "  ".repeat(depth);
    match s {
        Stmt::Loop(l) => {
            let _ = writeln!(
                out,
                "{pad}for v{} in {}{} {{",
                l.var.0,
                iter(&l.iter),
                annotations(l)
            );
            for s in &l.body {
                stmt(out, s, depth + 1);
            }
            let _ = writeln!(out, "{pad}}}");
        }
        Stmt::Let { acc, ty, init } => {
            let _ = writeln!(out, "{pad}let a{}: {ty} = {}", acc.0, expr_text(init));
        }
        Stmt::Update { acc, op, value } => {
            let a = acc.0;
            let v = expr_text(value);
            let _ = match op {
                AccOp::Set => writeln!(out, "{pad}a{a} = {v}"),
                AccOp::Add => writeln!(out, "{pad}a{a} += {v}"),
                AccOp::Mul => writeln!(out, "{pad}a{a} *= {v}"),
                AccOp::Max => writeln!(out, "{pad}a{a} = max(a{a}, {v})"),
                AccOp::Min => writeln!(out, "{pad}a{a} = min(a{a}, {v})"),
            };
        }
        Stmt::Store { buf, index, value } => {
            let _ = writeln!(
                out,
                "{pad}%{}[{}] = {}",
                buf.0,
                index_text(index),
                expr_text(value)
            );
        }
        Stmt::Call(LibCall::Gemm {
            m,
            n,
            k,
            batch,
            a,
            b,
            c,
            accumulate,
        }) => {
            let batch: Vec<String> = batch.iter().map(|e| e.to_string()).collect();
            let _ = writeln!(
                out,
                "{pad}gemm m={m} n={n} k={k} batch=[{}] a={} b={} c={} accumulate={accumulate}",
                batch.join(", "),
                view_text(a),
                view_text(b),
                view_text(c),
            );
        }
        Stmt::Call(LibCall::SpMM {
            m,
            n,
            k,
            s,
            transposed,
            side,
            d,
            c,
            accumulate,
        }) => {
            let side = match side {
                Side::Left => "left",
                Side::Right => "right",
            };
            let t = if *transposed { " transposed" } else { "" };
            let _ = writeln!(
                out,
                "{pad}spmm m={m} n={n} k={k} {side} s={}{t} d={} c={} accumulate={accumulate}",
                sparse_text(s),
                view_text(d),
                view_text(c),
            );
        }
        Stmt::Call(LibCall::Sparsify {
            src,
            out: o,
            select,
        }) => {
            let keep = match select {
                Select::All => "all".to_string(),
                Select::Threshold(t) => format!("threshold({})", number(*t)),
                Select::Density(d) => format!("density({})", number(*d)),
            };
            let _ = writeln!(
                out,
                "{pad}sparsify %{} -> {} keep={keep}",
                src.0,
                sparse_text(o)
            );
        }
        Stmt::Call(LibCall::Densify { s, dst }) => {
            let _ = writeln!(out, "{pad}densify {} -> %{}", sparse_text(s), dst.0);
        }
    }
}

/// The name of a sparse layout as the text form writes it.
pub fn layout_text(l: SparseLayout) -> String {
    match l {
        SparseLayout::Coo => "coo".into(),
        SparseLayout::Csr => "csr".into(),
        SparseLayout::Csc => "csc".into(),
        SparseLayout::Bsr { br, bc } => format!("bsr({br}, {bc})"),
        SparseLayout::TwoFour { axis } => format!("2:4(axis={axis})"),
    }
}

pub(crate) fn sparse_text(s: &SparseOperand) -> String {
    let shape: Vec<String> = s.shape.iter().map(|e| e.to_string()).collect();
    let ptr = s.ptr.map(|p| format!("ptr=%{} ", p.0)).unwrap_or_default();
    format!(
        "{}[{}]({ptr}idx=%{} values=%{})",
        layout_text(s.layout),
        shape.join(", "),
        s.idx.0,
        s.values.0
    )
}

fn iter(it: &Iter) -> String {
    match it {
        Iter::Range { extent } => format!("0..{extent}"),
        Iter::Compressed {
            ptr,
            ptr_index,
            crd,
            coord,
        } => format!(
            "compressed ptr=%{}[{}] crd=%{} coord=v{}",
            ptr.0,
            index_text(ptr_index),
            crd.0,
            coord.0
        ),
        Iter::Singleton { crd, pos_index } => {
            format!("singleton crd=%{}[{}]", crd.0, index_text(pos_index))
        }
        Iter::TwoFour {
            groups,
            meta,
            meta_index,
            coord,
        } => format!(
            "twofour groups={groups} meta=%{}[{}] coord=v{}",
            meta.0,
            index_text(meta_index),
            coord.0
        ),
    }
}

fn annotations(l: &Loop) -> String {
    let mut s = String::new();
    if l.parallel {
        s.push_str(" parallel");
    }
    if l.vector != 1 {
        let _ = write!(s, " vector {}", l.vector);
    }
    if let Some(axis) = l.gpu {
        let _ = write!(s, " gpu {}", gpu_axis_name(axis));
    }
    s
}

/// `Σ stride·name + offset`; `explicit` prints every coefficient, `1` included.
fn affine(terms: &[(String, i64)], offset: i64, explicit: bool) -> String {
    let mut s = String::new();
    for (i, (name, stride)) in terms.iter().enumerate() {
        let mag = stride.unsigned_abs();
        if i == 0 {
            if *stride < 0 {
                s.push('-');
            }
        } else if *stride < 0 {
            s.push_str(" - ");
        } else {
            s.push_str(" + ");
        }
        if mag != 1 || explicit {
            let _ = write!(s, "{mag}*");
        }
        s.push_str(name);
    }
    if terms.is_empty() {
        let _ = write!(s, "{offset}");
    } else if offset > 0 {
        let _ = write!(s, " + {offset}");
    } else if offset < 0 {
        let _ = write!(s, " - {}", offset.unsigned_abs());
    }
    s
}

/// Binding strength: 1 for `+ -`, 2 for `* /`, 3 for prefix minus (and negative constants),
/// 4 for atoms and calls.
fn prec(e: &Expr) -> u8 {
    match e {
        Expr::Binary(BinOp::Add | BinOp::Sub, ..) => 1,
        Expr::Binary(BinOp::Mul | BinOp::Div, ..) => 2,
        Expr::Unary(UnOp::Neg, _) => 3,
        Expr::Const(x) if !x.is_nan() && x.is_sign_negative() => 3,
        _ => 4,
    }
}

fn expr(out: &mut String, e: &Expr) {
    match e {
        Expr::Const(x) => out.push_str(&number(*x)),
        Expr::Load { buf, index } => {
            let _ = write!(out, "%{}[{}]", buf.0, index_text(index));
        }
        Expr::Acc(a) => {
            let _ = write!(out, "a{}", a.0);
        }
        Expr::Unary(UnOp::Neg, x) => {
            // A negated constant keeps its parentheses, so it cannot read as a negative one.
            out.push('-');
            operand(out, x, prec(x) <= 3 || matches!(**x, Expr::Const(_)));
        }
        Expr::Unary(op, x) => {
            out.push_str(op.name());
            out.push('(');
            expr(out, x);
            out.push(')');
        }
        Expr::Binary(op, a, b) => {
            let infix = match op {
                BinOp::Add => Some(" + "),
                BinOp::Sub => Some(" - "),
                BinOp::Mul => Some(" * "),
                BinOp::Div => Some(" / "),
                _ => None,
            };
            match infix {
                Some(sym) => {
                    let p = prec(e);
                    operand(out, a, prec(a) < p);
                    out.push_str(sym);
                    operand(out, b, prec(b) <= p);
                }
                None => {
                    out.push_str(binary_name(*op).unwrap_or("pow"));
                    out.push('(');
                    expr(out, a);
                    out.push_str(", ");
                    expr(out, b);
                    out.push(')');
                }
            }
        }
        Expr::Cast(ty, x) => {
            let _ = write!(out, "cast<{ty}>(");
            expr(out, x);
            out.push(')');
        }
        Expr::Select(c, a, b) => {
            out.push_str("select(");
            expr(out, c);
            out.push_str(", ");
            expr(out, a);
            out.push_str(", ");
            expr(out, b);
            out.push(')');
        }
        Expr::Iota(index) => {
            let _ = write!(out, "iota[{}]", index_text(index));
        }
    }
}

fn operand(out: &mut String, e: &Expr, paren: bool) {
    if paren {
        out.push('(');
        expr(out, e);
        out.push(')');
    } else {
        expr(out, e);
    }
}

/// The call name of a binary operation that is not infix (`None` for `+ - * /`).
pub(crate) fn binary_name(op: BinOp) -> Option<&'static str> {
    Some(match op {
        BinOp::Max => "max",
        BinOp::Min => "min",
        BinOp::Lt => "lt",
        BinOp::Le => "le",
        BinOp::Gt => "gt",
        BinOp::Ge => "ge",
        BinOp::Eq => "eq",
        BinOp::Ne => "ne",
        BinOp::Pow => "pow",
        BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => return None,
    })
}

/// A constant: integers without a fraction, others as the shortest text that reads back to the
/// same f64.
fn number(x: f64) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else if x == 0.0 {
        if x.is_sign_negative() { "-0" } else { "0" }.into()
    } else if x.fract() == 0.0 && x.abs() < 1e16 {
        // Exact: |x| < 2^63 and integral.
        format!("{}", x as i64)
    } else {
        format!("{x:?}")
    }
}

/// A buffer or kernel name: bare when it is a plain identifier, else quoted and escaped.
fn name(s: &str) -> String {
    let plain = s
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    if plain {
        s.to_string()
    } else {
        format!("\"{}\"", escape(s, true))
    }
}

/// Escapes `\`, control characters and (in quoted names) `"`, so the text stays one line and
/// different strings print differently.
fn escape(s: &str, quotes: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' if quotes => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn stmt_buffers(s: &Stmt, used: &mut BTreeSet<u32>) {
    match s {
        Stmt::Loop(l) => {
            match &l.iter {
                Iter::Range { .. } => {}
                Iter::Compressed { ptr, crd, .. } => {
                    used.insert(ptr.0);
                    used.insert(crd.0);
                }
                Iter::Singleton { crd, .. } => {
                    used.insert(crd.0);
                }
                Iter::TwoFour { meta, .. } => {
                    used.insert(meta.0);
                }
            }
            for s in &l.body {
                stmt_buffers(s, used);
            }
        }
        Stmt::Let { init: e, .. } | Stmt::Update { value: e, .. } => expr_buffers(e, used),
        Stmt::Store { buf, value, .. } => {
            used.insert(buf.0);
            expr_buffers(value, used);
        }
        Stmt::Call(call) => {
            used.extend(call.buffers().iter().map(|b| b.0));
        }
    }
}

fn expr_buffers(e: &Expr, used: &mut BTreeSet<u32>) {
    e.visit(&mut |x| {
        if let Expr::Load { buf, .. } = x {
            used.insert(buf.0);
        }
    });
}

/// A buffer as the verifier's messages name it: `%0 (x: f32[1024])`.
pub(crate) fn buffer_text(id: u32, b: &Buffer) -> String {
    format!("%{id} ({}: {}[{}])", name(&b.name), b.ty, b.elems)
}

#[cfg(test)]
mod tests {
    //! Exact expected text for the shared fixture programs and for each construct.

    use super::*;
    use crate::eval::tests::*;
    use crate::ir::{BufId, ElemType::*, Kernel};
    use proptest::prelude::*;

    /// Asserts that `body`, alone in a kernel over two f32 buffers, prints as `expect` (the
    /// lines after the kernel header, without their two-space indent).
    fn check_body(body: Vec<Stmt>, expect: &str) {
        let p = program(
            vec![
                buffer("x", F32, 64, Role::Input(0)),
                buffer("y", F32, 64, Role::Output(0)),
            ],
            "k",
            "",
            body,
        );
        let text = print_program(&p);
        let body_text: String = text
            .lines()
            .skip(4)
            .map(|l| format!("{}\n", l.strip_prefix("  ").unwrap_or(l)))
            .collect();
        assert_eq!(body_text, expect, "full text:\n{text}");
    }

    fn check_expr(e: Expr, expect: &str) {
        assert_eq!(expr_text(&e), expect);
    }

    fn x(i: i64) -> Expr {
        ld(0, ix(i, &[]))
    }

    #[test]
    fn row_sum() {
        assert_eq!(
            print_program(&crate::eval::tests::row_sum(3, 5)),
            r#"buffers:
  %0 x: f32[15] input 0
  %1 y: f32[3] output 0
kernel k0 (y = reduce(x, "r c -> r", "sum")):
  for v0 in 0..3 parallel {
    let a0: f32 = 0
    for v1 in 0..5 vector 4 {
      a0 += %0[5*v0 + v1]
    }
    %1[v0] = a0
  }
"#
        );
    }

    #[test]
    fn softmax() {
        assert_eq!(
            print_program(&crate::eval::tests::softmax(2, 6)),
            "buffers:
  %0 x: f32[12] input 0
  %1 y: f32[12] output 0
kernel softmax (y = softmax(x, c)):
  for v0 in 0..2 parallel {
    let a0: f32 = -inf
    for v1 in 0..6 {
      a0 = max(a0, %0[6*v0 + v1])
    }
    let a1: f32 = 0
    for v2 in 0..6 {
      a1 += exp(%0[6*v0 + v2] - a0)
    }
    for v3 in 0..6 vector 4 {
      %1[6*v0 + v3] = exp(%0[6*v0 + v3] - a0) / a1
    }
  }
"
        );
    }

    #[test]
    fn strided_and_broadcast_indices() {
        assert_eq!(
            print_program(&transpose(3, 4)),
            r#"buffers:
  %0 x: f64[12] input 0
  %1 y: f64[12] output 0
kernel k0 (y = rearrange(x, "r c -> c r")):
  for v0 in 0..4 {
    for v1 in 0..3 {
      %1[3*v0 + v1] = %0[v0 + 4*v1]
    }
  }
"#
        );
        let text = print_program(&broadcast_add(3, 4));
        assert!(text.contains("  %2 y: f16[12] output 0\n"), "{text}");
        assert!(
            text.contains("      %2[4*v0 + v1] = %0[4*v0 + v1] + %1[0*v0 + v1]\n"),
            "{text}"
        );
    }

    #[test]
    fn index_forms() {
        let cases = [
            (ix(0, &[]), "0"),
            (ix(-7, &[]), "-7"),
            (ix(3, &[(0, 64), (1, 1)]), "64*v0 + v1 + 3"),
            (ix(-3, &[(0, -1), (1, -2)]), "-v0 - 2*v1 - 3"),
            (ix(0, &[(2, 0), (0, 1)]), "0*v2 + v0"),
            (
                ix(i64::MIN, &[(0, i64::MIN)]),
                "-9223372036854775808*v0 - 9223372036854775808",
            ),
        ];
        for (index, expect) in cases {
            assert_eq!(index_text(&index), expect);
        }
    }

    #[test]
    fn gemm_views() {
        assert_eq!(
            print_program(&batched_gemm(2, 3, 5, 4, false)),
            r#"buffers:
  %0 a: f32[24] input 0
  %1 w: f32[20] input 1
  %2 c: f32[30] output 0
kernel k0 (c = einsum(a, w, "b m k, k n -> b m n")):
  gemm m=3 n=5 k=4 batch=[2] a=%0[12*b0 + 4*r + 1*c] b=%1[0*b0 + 1*r + 4*c] c=%2[15*b0 + 5*r + 1*c] accumulate=false
"#
        );
        let call = Stmt::Call(LibCall::Gemm {
            m: 2,
            n: 2,
            k: 2,
            batch: vec![],
            a: view(0, 3, &[], -2, 1),
            b: view(0, 0, &[], 2, 0),
            c: view(1, 0, &[], 2, 1),
            accumulate: true,
        });
        check_body(
            vec![call],
            "gemm m=2 n=2 k=2 batch=[] a=%0[-2*r + 1*c + 3] b=%0[2*r + 0*c] c=%1[2*r + 1*c] accumulate=true\n",
        );
        let call = Stmt::Call(LibCall::Gemm {
            m: 1,
            n: 1,
            k: 1,
            batch: vec![2, 3],
            a: view(0, -1, &[3, 1], 0, 0),
            b: view(0, 0, &[0, 0], 0, 0),
            c: view(1, 0, &[3, 1], 0, 0),
            accumulate: false,
        });
        check_body(
            vec![call],
            "gemm m=1 n=1 k=1 batch=[2, 3] a=%0[3*b0 + 1*b1 + 0*r + 0*c - 1] b=%0[0*b0 + 0*b1 + 0*r + 0*c] c=%1[3*b0 + 1*b1 + 0*r + 0*c] accumulate=false\n",
        );
    }

    #[test]
    fn sparse_levels() {
        let text = print_program(&csr_spmv(3, 4, 5));
        assert!(
            text.ends_with(
                r#"kernel spmv (y = einsum(a, x, "i j, j -> i")):
  for v0 in 0..3 parallel {
    let a0: f32 = 0
    for v1 in compressed ptr=%0[v0] crd=%1 coord=v2 {
      a0 += %2[v1] * %3[v2]
    }
    %4[v0] = a0
  }
"#
            ),
            "{text}"
        );
        assert!(
            text.starts_with("buffers:\n  %0 a.ptr: i32[4] input 0\n  %1 a.crd: i32[5] input 1\n")
        );
        let text = print_program(&two_four_matvec(2, 2));
        assert!(
            text.ends_with(
                "  for v0 in 0..2 {
    let a0: f64 = 0
    for v1 in twofour groups=2 meta=%1[v0] coord=v2 {
      a0 += %0[4*v0 + v1] * %2[v2]
    }
    %3[v0] = a0
  }
"
            ),
            "{text}"
        );
        let single = Stmt::Loop(loop_(
            3,
            Iter::Singleton {
                crd: BufId(1),
                pos_index: ix(1, &[(0, 2)]),
            },
            vec![],
        ));
        check_body(
            vec![range(0, 2, vec![single])],
            "for v0 in 0..2 {\n  for v3 in singleton crd=%1[2*v0 + 1] {\n  }\n}\n",
        );
    }

    #[test]
    fn loop_annotations() {
        let mut l = loop_(0, Iter::Range { extent: 8 }, vec![]);
        l.parallel = true;
        l.vector = 0;
        l.gpu = Some(GpuAxis::BlockX);
        let mut inner = loop_(1, Iter::Range { extent: 32 }, vec![]);
        inner.vector = 2;
        inner.gpu = Some(GpuAxis::Lane);
        l.body.push(Stmt::Loop(inner));
        check_body(
            vec![Stmt::Loop(l)],
            "for v0 in 0..8 parallel vector 0 gpu block.x {\n  for v1 in 0..32 vector 2 gpu lane {\n  }\n}\n",
        );
        let axes = [
            (GpuAxis::BlockY, "block.y"),
            (GpuAxis::BlockZ, "block.z"),
            (GpuAxis::ThreadX, "thread.x"),
            (GpuAxis::ThreadY, "thread.y"),
            (GpuAxis::ThreadZ, "thread.z"),
            (GpuAxis::Warp, "warp"),
            (GpuAxis::Grid, "grid"),
        ];
        for (axis, name) in axes {
            assert_eq!(gpu_axis_name(axis), name);
        }
    }

    #[test]
    fn accumulator_statements() {
        check_body(
            vec![
                let_(0, F64, k(1.0)),
                update(0, AccOp::Set, x(1)),
                update(0, AccOp::Add, x(1)),
                update(0, AccOp::Mul, x(1)),
                update(0, AccOp::Max, x(1)),
                update(0, AccOp::Min, bin(BinOp::Add, acc(0), x(1))),
                store(1, ix(0, &[]), acc(0)),
            ],
            "let a0: f64 = 1
a0 = %0[1]
a0 += %0[1]
a0 *= %0[1]
a0 = max(a0, %0[1])
a0 = min(a0, a0 + %0[1])
%1[0] = a0
",
        );
    }

    #[test]
    fn minimal_parentheses() {
        let (a, b, c) = (x(0), x(1), x(2));
        let add = |p: Expr, q: Expr| bin(BinOp::Add, p, q);
        let sub = |p: Expr, q: Expr| bin(BinOp::Sub, p, q);
        let mul = |p: Expr, q: Expr| bin(BinOp::Mul, p, q);
        let div = |p: Expr, q: Expr| bin(BinOp::Div, p, q);
        let neg = |p: Expr| un(UnOp::Neg, p);
        check_expr(
            sub(sub(a.clone(), b.clone()), c.clone()),
            "%0[0] - %0[1] - %0[2]",
        );
        check_expr(
            sub(a.clone(), sub(b.clone(), c.clone())),
            "%0[0] - (%0[1] - %0[2])",
        );
        check_expr(
            add(mul(a.clone(), b.clone()), c.clone()),
            "%0[0] * %0[1] + %0[2]",
        );
        check_expr(
            mul(add(a.clone(), b.clone()), c.clone()),
            "(%0[0] + %0[1]) * %0[2]",
        );
        check_expr(
            div(a.clone(), mul(b.clone(), c.clone())),
            "%0[0] / (%0[1] * %0[2])",
        );
        check_expr(
            add(a.clone(), mul(b.clone(), c.clone())),
            "%0[0] + %0[1] * %0[2]",
        );
        check_expr(neg(add(a.clone(), b.clone())), "-(%0[0] + %0[1])");
        check_expr(neg(mul(a.clone(), b.clone())), "-(%0[0] * %0[1])");
        check_expr(mul(neg(a.clone()), b.clone()), "-%0[0] * %0[1]");
        check_expr(mul(a.clone(), neg(b.clone())), "%0[0] * -%0[1]");
        check_expr(neg(neg(a.clone())), "-(-%0[0])");
        check_expr(sub(a.clone(), k(-1.0)), "%0[0] - -1");
        check_expr(neg(k(2.0)), "-(2)");
        check_expr(neg(k(-2.0)), "-(-2)");
        check_expr(k(-2.0), "-2");
        check_expr(
            mul(add(a.clone(), k(-0.5)), k(-0.5)),
            "(%0[0] + -0.5) * -0.5",
        );
        check_expr(
            bin(BinOp::Max, add(a.clone(), b.clone()), neg(c.clone())),
            "max(%0[0] + %0[1], -%0[2])",
        );
        check_expr(bin(BinOp::Min, acc(3), k(0.0)), "min(a3, 0)");
        check_expr(bin(BinOp::Pow, a.clone(), k(0.5)), "pow(%0[0], 0.5)");
        check_expr(
            cast(BF16, un(UnOp::Exp, a.clone())),
            "cast<bf16>(exp(%0[0]))",
        );
        check_expr(
            mul(cast(F64, a.clone()), b.clone()),
            "cast<f64>(%0[0]) * %0[1]",
        );
    }

    #[test]
    fn unary_names() {
        let names = [
            (UnOp::Exp, "exp"),
            (UnOp::Log, "log"),
            (UnOp::Sqrt, "sqrt"),
            (UnOp::Rsqrt, "rsqrt"),
            (UnOp::Abs, "abs"),
            (UnOp::Tanh, "tanh"),
            (UnOp::Sigmoid, "sigmoid"),
            (UnOp::Relu, "relu"),
            (UnOp::Gelu, "gelu"),
            (UnOp::Sin, "sin"),
            (UnOp::Cos, "cos"),
            (UnOp::Square, "square"),
        ];
        for (op, name) in names {
            check_expr(un(op, acc(0)), &format!("{name}(a0)"));
        }
    }

    #[test]
    fn numbers() {
        let cases = [
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (-3.0, "-3"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e-7, "1e-7"),
            (9007199254740993.0, "9007199254740992"),
            (1e16, "1e16"),
            (1.5e300, "1.5e300"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
            (0.1f32 as f64, "0.10000000149011612"),
        ];
        for (x, expect) in cases {
            assert_eq!(number(x), expect);
        }
    }

    #[test]
    fn names_and_origins_are_escaped() {
        let mut p = program(
            vec![
                buffer("x.grad_2", F32, 1, Role::Input(0)),
                buffer("2x", F32, 1, Role::Temp),
                buffer("a b\"c\\", BF16, 1, Role::Output(0)),
                buffer("", F32, 1, Role::Temp),
            ],
            "my kernel",
            "y = f(x)\n\t\\ \"quoted\"",
            vec![],
        );
        p.kernels.push(Kernel {
            name: "k1".into(),
            origin: String::new(),
            source: None,
            body: vec![],
        });
        assert_eq!(
            print_program(&p),
            r#"buffers:
  %0 x.grad_2: f32[1] input 0
  %1 "2x": f32[1] temp
  %2 "a b\"c\\": bf16[1] output 0
  %3 "": f32[1] temp
kernel "my kernel" (y = f(x)\n\t\\ "quoted"):
kernel k1:
"#
        );
        assert_eq!(print_program(&LoopProgram::default()), "buffers:\n");
    }

    #[test]
    fn print_kernel_lists_the_buffers_it_touches() {
        let mut p = csr_spmv(3, 4, 5);
        p.buffers.push(buffer("unused", F32, 9, Role::Temp));
        p.kernels.push(Kernel {
            name: "k1".into(),
            origin: "z = y".into(),
            source: None,
            body: vec![range(
                0,
                3,
                vec![store(5, ix(0, &[(0, 1)]), ld(4, ix(0, &[(0, 1)])))],
            )],
        });
        assert_eq!(
            print_kernel(&p, &p.kernels[1]),
            "buffers:
  %4 y: f32[3] output 0
  %5 unused: f32[9] temp
kernel k1 (z = y):
  for v0 in 0..3 {
    %5[v0] = %4[v0]
  }
"
        );
        // The first kernel's text is the program's, less the buffers it does not touch.
        let k0 = print_kernel(&p, &p.kernels[0]);
        let whole = print_program(&p);
        assert!(whole.starts_with(&k0.replace(
            "  %4 y: f32[3] output 0\n",
            "  %4 y: f32[3] output 0\n  %5 unused: f32[9] temp\n"
        )));
        // A kernel that differs only in a buffer's type prints differently.
        let mut q = p.clone();
        q.buffers[4].ty = F16;
        assert_ne!(
            print_kernel(&p, &p.kernels[1]),
            print_kernel(&q, &q.kernels[1])
        );
        // Ids with no buffer print in the body and are left out of the list.
        let mut r = p.clone();
        r.kernels[1].body = vec![store(9, ix(0, &[]), k(0.0))];
        assert_eq!(
            print_kernel(&r, &r.kernels[1]),
            "buffers:\nkernel k1 (z = y):\n  %9[0] = 0\n"
        );
    }

    #[test]
    fn fixtures_print_deterministically() {
        for p in fixtures() {
            assert_eq!(print_program(&p), print_program(&p.clone()));
            let Some(k) = p.kernels.first() else { continue };
            assert!(print_kernel(&p, k).contains(&format!("kernel {}", k.name)));
        }
    }

    proptest! {
        /// Constants print as text that reads back to the same value.
        #[test]
        fn numbers_read_back(bits in any::<u64>()) {
            let x = f64::from_bits(bits);
            let back: f64 = number(x).parse().unwrap();
            prop_assert!(back.to_bits() == x.to_bits() || (x.is_nan() && back.is_nan()), "{} -> {}", x, number(x));
        }
    }
}
