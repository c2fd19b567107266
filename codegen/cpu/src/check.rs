//! Checks that make running generated code safe. Well-formedness and the bounds of every access
//! that does not depend on sparse data are the verifier's (`tdsl_loop::verify::verify_kernel`,
//! run on every kernel before it compiles); here are the limits of this backend (`supported`)
//! and the run-time proof of bounds on the data a kernel is about to run on (`check_bounds`).
//!
//! Bounds are computed by interval arithmetic in `i128` over the values each loop variable can
//! take. A `Range` variable takes `0..extent`; a compressed position runs between the smallest
//! and the largest value of its position buffer, a coordinate between the smallest and the
//! largest value of its coordinate buffer. Without buffer contents (at compile time) the sparse
//! intervals are unknown and the accesses that depend on them are checked at run time, right
//! before the kernel runs, on the data it will read. This is the last line of defence: generated
//! code performs no bounds checks of its own.

use std::collections::{HashMap, HashSet};

use tdsl_loop::{
    BufId, Data, ElemType, Expr, Index, Iter, Kernel, LibCall, LoopProgram, MatView, Stmt, VarId,
};

use crate::error::CodegenError;

/// The values a loop variable can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Iv {
    /// The enclosing loop never runs.
    Empty,
    Known(i128, i128),
    /// Depends on sparse index data that is not available yet.
    Unknown,
}

/// What this backend supports beyond what the verifier (`tdsl_loop::verify`, which runs
/// first) accepts: ids and extents that fit its code, library calls only at a kernel's top
/// level, f32/f64 dense sides of sparse products, call destinations that map every element to
/// its own place, and no store into a buffer the kernel also reads as sparse index data (run-time
/// bounds are proved from that data before the kernel runs).
pub(crate) fn supported(p: &LoopProgram, k: &Kernel) -> Result<(), CodegenError> {
    let unsupported = |m: String| Err(CodegenError::Unsupported(m));
    let mut sparse = HashSet::new();
    let mut stored = HashSet::new();
    let mut result = Ok(());
    for (depth, s) in walk_depth(&k.body) {
        let r = match s {
            Stmt::Loop(l) => match &l.iter {
                Iter::Range { extent } if *extent > i64::MAX as u64 => {
                    unsupported(format!("loop extent {extent} above 2^63"))
                }
                Iter::TwoFour { groups, .. } if *groups > (i64::MAX / 4) as u64 => {
                    unsupported(format!("{groups} 2:4 groups"))
                }
                Iter::Range { .. } => Ok(()),
                Iter::Compressed { ptr, crd, .. } => {
                    sparse.extend([*ptr, *crd]);
                    Ok(())
                }
                Iter::Singleton { crd, .. } => {
                    sparse.insert(*crd);
                    Ok(())
                }
                Iter::TwoFour { meta, .. } => {
                    sparse.insert(*meta);
                    Ok(())
                }
            },
            Stmt::Store { buf, .. } => {
                stored.insert(*buf);
                Ok(())
            }
            Stmt::Call(_) if depth > 0 => unsupported("a library call inside a loop".into()),
            Stmt::Call(call) => {
                stored.extend(call.writes());
                supported_call(p, call)
            }
            Stmt::Let { .. } | Stmt::Update { .. } => Ok(()),
        };
        result = result.and(r);
    }
    result?;
    if p.buffers.len() > 1 << 28 {
        return unsupported(format!("{} buffers (at most 2^28)", p.buffers.len()));
    }
    if let Some(b) = sparse.intersection(&stored).next() {
        return unsupported(format!(
            "kernel `{}` stores into buffer `{}` that it also reads as sparse index data",
            k.name,
            p.buffer(*b).name
        ));
    }
    Ok(())
}

/// Every statement of `stmts` and the loops inside, pre-order, with its loop depth.
fn walk_depth(stmts: &[Stmt]) -> Vec<(usize, &Stmt)> {
    let mut out = Vec::new();
    let mut stack: Vec<(usize, &Stmt)> = stmts.iter().rev().map(|s| (0, s)).collect();
    while let Some((d, s)) = stack.pop() {
        out.push((d, s));
        if let Stmt::Loop(l) = s {
            stack.extend(l.body.iter().rev().map(|s| (d + 1, s)));
        }
    }
    out
}

fn supported_call(p: &LoopProgram, call: &LibCall) -> Result<(), CodegenError> {
    let (c, batch, m, n): (&MatView, &[u64], u64, u64) = match call {
        LibCall::Gemm { m, n, batch, c, .. } => (c, batch, *m, *n),
        LibCall::SpMM { m, n, d, c, .. } => {
            for (view, name) in [(d, "d"), (c, "c")] {
                let ty = p.buffer(view.buf).ty;
                if !matches!(ty, ElemType::F32 | ElemType::F64) {
                    return Err(CodegenError::Unsupported(format!(
                        "spmm operand {name} of type {ty}"
                    )));
                }
            }
            (c, &[], *m, *n)
        }
        LibCall::Sparsify { .. } | LibCall::Densify { .. } => return Ok(()),
    };
    if view_injective(c, batch, m, n) {
        Ok(())
    } else {
        Err(CodegenError::Unsupported(
            "a call destination view that maps two elements to one place".into(),
        ))
    }
}

/// Min, max and monotonicity of an i32 buffer's contents.
#[derive(Debug, Clone, Copy)]
struct Facts {
    /// `None` for an empty buffer.
    range: Option<(i128, i128)>,
    monotone: bool,
}

fn facts(d: &Data) -> Facts {
    match d {
        Data::I32(v) => Facts {
            range: v
                .iter()
                .min()
                .zip(v.iter().max())
                .map(|(a, b)| (*a as i128, *b as i128)),
            monotone: v.windows(2).all(|w| w[0] <= w[1]),
        },
        _ => Facts {
            range: None,
            monotone: false,
        },
    }
}

/// A bounds violation: what, and whether it comes from sparse index data.
pub(crate) struct Violation {
    pub message: String,
    pub sparse_data: bool,
}

/// Proof that [`check_bounds`] accepted a kernel for the buffers it is about to run on:
/// `jit::KernelFn::call` requires one. Only this module creates it.
pub(crate) struct Checked {
    _private: (),
}

/// Bounds of every access of `k` on `data`, the run's buffers. The caller has checked that
/// `data` has the declared types and lengths; sparse iteration is bounded by the contents of its
/// index buffers.
pub(crate) fn check_bounds(
    p: &LoopProgram,
    k: &Kernel,
    data: &[Data],
) -> Result<Checked, Violation> {
    let mut b = Bounds {
        p,
        data: Some(data),
        facts: HashMap::new(),
        vars: HashMap::new(),
    };
    b.block(&k.body)?;
    Ok(Checked { _private: () })
}

struct Bounds<'a> {
    p: &'a LoopProgram,
    data: Option<&'a [Data]>,
    facts: HashMap<BufId, Facts>,
    vars: HashMap<VarId, Iv>,
}

fn fail(message: String) -> Result<(), Violation> {
    Err(Violation {
        message,
        sparse_data: false,
    })
}

fn fail_sparse(message: String) -> Result<(), Violation> {
    Err(Violation {
        message,
        sparse_data: true,
    })
}

impl Bounds<'_> {
    /// The coordinates a singleton level can read: the values of `crd` at the positions
    /// `pos_index` takes (within `lo..=hi`, checked in bounds). With one variable term, exactly
    /// the positions it steps through (COO's row-major `idx` interleaves the coordinates of
    /// every axis: axis `k` of entry `p` is `idx[rank·p + k]`, so a range over the whole buffer
    /// would mix the axes); otherwise every position in `lo..=hi`.
    fn singleton_range(&self, crd: &Data, pos_index: &Index, lo: i128, hi: i128) -> Iv {
        let Data::I32(v) = crd else {
            return Iv::Empty;
        };
        let at = |i: i128| v.get(usize::try_from(i).ok()?).copied();
        let mut range: Option<(i32, i32)> = None;
        let mut see = |x: i32| {
            range = Some(range.map_or((x, x), |(a, b)| (a.min(x), b.max(x))));
        };
        let stepped = match pos_index.terms.as_slice() {
            [(var, stride)] if *stride != 0 => match self.vars.get(var) {
                Some(Iv::Known(a, b)) => {
                    for p in *a..=*b {
                        match at(pos_index.offset as i128 + *stride as i128 * p) {
                            Some(x) => see(x),
                            // Unreachable (the level's reads were checked): be conservative.
                            None => return Iv::Known(i32::MIN as i128, i32::MAX as i128),
                        }
                    }
                    true
                }
                _ => false,
            },
            _ => false,
        };
        if !stepped {
            for i in lo..=hi {
                match at(i) {
                    Some(x) => see(x),
                    None => return Iv::Known(i32::MIN as i128, i32::MAX as i128),
                }
            }
        }
        match range {
            Some((a, b)) => Iv::Known(a as i128, b as i128),
            None => Iv::Empty,
        }
    }

    fn facts(&mut self, b: BufId) -> Option<Facts> {
        let data = self.data?;
        Some(
            *self
                .facts
                .entry(b)
                .or_insert_with(|| facts(&data[b.0 as usize])),
        )
    }

    fn index_range(&self, ix: &Index) -> Iv {
        let (mut lo, mut hi) = (ix.offset as i128, ix.offset as i128);
        let mut unknown = false;
        for (v, s) in &ix.terms {
            match self.vars.get(v).copied().unwrap_or(Iv::Unknown) {
                Iv::Empty => return Iv::Empty,
                Iv::Unknown => unknown = true,
                Iv::Known(a, b) => {
                    let (x, y) = (*s as i128 * a, *s as i128 * b);
                    lo += x.min(y);
                    hi += x.max(y);
                }
            }
        }
        if unknown {
            Iv::Unknown
        } else {
            Iv::Known(lo, hi)
        }
    }

    fn access(&self, buf: BufId, ix: &Index, extra: i128, what: &str) -> Result<(), Violation> {
        let b = self.p.buffer(buf);
        match self.index_range(ix) {
            Iv::Known(lo, hi) => {
                if lo < 0 || hi + extra >= b.elems as i128 {
                    return fail(format!(
                        "{what} of `{}` reaches elements {lo}..={} of {}",
                        b.name,
                        hi + extra,
                        b.elems
                    ));
                }
                Ok(())
            }
            Iv::Empty | Iv::Unknown => Ok(()),
        }
    }

    fn block(&mut self, stmts: &[Stmt]) -> Result<(), Violation> {
        for s in stmts {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), Violation> {
        match s {
            Stmt::Loop(l) => {
                let mut bound = vec![];
                match &l.iter {
                    Iter::Range { extent } => {
                        let iv = if *extent == 0 {
                            Iv::Empty
                        } else {
                            Iv::Known(0, *extent as i128 - 1)
                        };
                        bound.push((l.var, iv));
                    }
                    Iter::Compressed {
                        ptr,
                        ptr_index,
                        crd,
                        coord,
                    } => {
                        self.access(*ptr, ptr_index, 1, "position load")?;
                        let reach = self.index_range(ptr_index);
                        let (pos, co) = match (reach, self.facts(*ptr), self.facts(*crd)) {
                            (Iv::Empty, _, _) => (Iv::Empty, Iv::Empty),
                            (_, Some(pf), Some(cf)) => {
                                if !pf.monotone {
                                    return fail_sparse(format!(
                                        "positions in `{}` are not monotone",
                                        self.p.buffer(*ptr).name
                                    ));
                                }
                                let pos = match pf.range {
                                    Some((a, b)) if b > a => Iv::Known(a, b - 1),
                                    _ => Iv::Empty,
                                };
                                if let Iv::Known(a, b) = pos {
                                    let n = self.p.buffer(*crd).elems as i128;
                                    if a < 0 || b >= n {
                                        return fail_sparse(format!(
                                            "positions {a}..={} in `{}` reach outside the {n} \
                                             coordinates of `{}`",
                                            b + 1,
                                            self.p.buffer(*ptr).name,
                                            self.p.buffer(*crd).name
                                        ));
                                    }
                                }
                                let co = match (pos, cf.range) {
                                    (Iv::Known(..), Some((a, b))) => Iv::Known(a, b),
                                    _ => Iv::Empty,
                                };
                                (pos, co)
                            }
                            _ => (Iv::Unknown, Iv::Unknown),
                        };
                        bound.push((l.var, pos));
                        bound.push((*coord, co));
                    }
                    Iter::Singleton { crd, pos_index } => {
                        self.access(*crd, pos_index, 0, "coordinate load")?;
                        let reach = self.index_range(pos_index);
                        let iv = match (reach, self.data) {
                            (Iv::Empty, _) => Iv::Empty,
                            (Iv::Known(lo, hi), Some(data)) => {
                                self.singleton_range(&data[crd.0 as usize], pos_index, lo, hi)
                            }
                            _ => Iv::Unknown,
                        };
                        bound.push((l.var, iv));
                    }
                    Iter::TwoFour {
                        groups,
                        meta,
                        meta_index,
                        coord,
                    } => {
                        // Kept value `var` in 0..2G reads word `meta[I + var / 16]`; its coordinate
                        // lies in its group, so in 0..4G whatever the metadata holds.
                        if *groups == 0 {
                            bound.push((l.var, Iv::Empty));
                            bound.push((*coord, Iv::Empty));
                        } else {
                            let last_word = (2 * *groups as i128 - 1) / 16;
                            self.access(*meta, meta_index, last_word, "2:4 metadata load")?;
                            bound.push((l.var, Iv::Known(0, 2 * *groups as i128 - 1)));
                            bound.push((*coord, Iv::Known(0, 4 * *groups as i128 - 1)));
                        }
                    }
                }
                for (v, iv) in &bound {
                    self.vars.insert(*v, *iv);
                }
                let r = self.block(&l.body);
                for (v, _) in &bound {
                    self.vars.remove(v);
                }
                r
            }
            Stmt::Let { init, .. } => self.expr(init),
            Stmt::Update { value, .. } => self.expr(value),
            Stmt::Store { buf, index, value } => {
                self.access(*buf, index, 0, "store")?;
                self.expr(value)
            }
            Stmt::Call(LibCall::Gemm {
                m,
                n,
                k,
                batch,
                a,
                b,
                c,
                ..
            }) => {
                self.view(a, batch, *m, *k, "gemm operand a")?;
                self.view(b, batch, *k, *n, "gemm operand b")?;
                self.view(c, batch, *m, *n, "gemm result c")
            }
            // Sparse kernels are safe code that check their own arguments (and the data of
            // sparse inputs is validated when it is bound); the dense views are checked here.
            Stmt::Call(LibCall::SpMM {
                m,
                n,
                k,
                side,
                d,
                c,
                ..
            }) => {
                let (dr, dc) = match side {
                    tdsl_loop::Side::Left => (*k, *n),
                    tdsl_loop::Side::Right => (*m, *k),
                };
                self.view(d, &[], dr, dc, "spmm operand d")?;
                self.view(c, &[], *m, *n, "spmm result c")
            }
            Stmt::Call(LibCall::Sparsify { .. } | LibCall::Densify { .. }) => Ok(()),
        }
    }

    fn expr(&self, e: &Expr) -> Result<(), Violation> {
        match e {
            Expr::Const(_) | Expr::Acc(_) | Expr::Iota(_) => Ok(()),
            Expr::Load { buf, index } => self.access(*buf, index, 0, "load"),
            Expr::Unary(..) | Expr::Binary(..) | Expr::Cast(..) | Expr::Select(..) => {
                e.children().into_iter().try_for_each(|x| self.expr(x))
            }
        }
    }

    fn view(
        &self,
        v: &MatView,
        batch: &[u64],
        rows: u64,
        cols: u64,
        what: &str,
    ) -> Result<(), Violation> {
        if let Some((lo, hi)) = view_range(v, batch, rows, cols) {
            let b = self.p.buffer(v.buf);
            if lo < 0 || hi >= b.elems as i128 {
                return fail(format!(
                    "{what} view of `{}` reaches elements {lo}..={hi} of {}",
                    b.name, b.elems
                ));
            }
        }
        Ok(())
    }
}

/// The axes (stride, extent) of a `rows`×`cols` batched view.
pub(crate) fn view_axes(v: &MatView, batch: &[u64], rows: u64, cols: u64) -> Vec<(i64, u64)> {
    let mut axes: Vec<(i64, u64)> = v
        .batch_strides
        .iter()
        .copied()
        .zip(batch.iter().copied())
        .collect();
    axes.push((v.row_stride, rows));
    axes.push((v.col_stride, cols));
    axes
}

/// The smallest and largest element a view touches, `None` if it touches none.
pub(crate) fn view_range(v: &MatView, batch: &[u64], rows: u64, cols: u64) -> Option<(i128, i128)> {
    let axes = view_axes(v, batch, rows, cols);
    if axes.iter().any(|&(_, e)| e == 0) {
        return None;
    }
    let (mut lo, mut hi) = (v.offset as i128, v.offset as i128);
    for (s, e) in axes {
        let span = s as i128 * (e as i128 - 1);
        lo += span.min(0);
        hi += span.max(0);
    }
    Some((lo, hi))
}

/// Whether distinct (batch, row, col) of a view are distinct elements. Sufficient test: sorted
/// by |stride|, every stride exceeds the span of all smaller ones.
pub(crate) fn view_injective(v: &MatView, batch: &[u64], rows: u64, cols: u64) -> bool {
    let mut axes: Vec<(i128, i128)> = view_axes(v, batch, rows, cols)
        .into_iter()
        .filter(|&(_, e)| e > 1)
        .map(|(s, e)| ((s as i128).abs(), e as i128))
        .collect();
    axes.sort();
    let mut span = 0i128;
    for (s, e) in axes {
        if s <= span {
            return false;
        }
        span += s * (e - 1);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(offset: i64, rs: i64, cs: i64, bs: Vec<i64>) -> MatView {
        MatView {
            buf: BufId(0),
            offset,
            row_stride: rs,
            col_stride: cs,
            batch_strides: bs,
        }
    }

    #[test]
    fn view_ranges_and_injectivity() {
        let v = view(0, 4, 1, vec![12]);
        assert_eq!(view_range(&v, &[2], 3, 4), Some((0, 23)));
        assert!(view_injective(&v, &[2], 3, 4));
        let r = view(23, -4, -1, vec![-12]);
        assert_eq!(view_range(&r, &[2], 3, 4), Some((0, 23)));
        assert!(view_injective(&r, &[2], 3, 4));
        let bcast = view(0, 4, 1, vec![0]);
        assert!(!view_injective(&bcast, &[2], 3, 4));
        assert!(view_injective(&bcast, &[1], 3, 4));
        assert_eq!(view_range(&v, &[0], 3, 4), None);
    }
}
