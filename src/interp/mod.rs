//! The reference interpreter: the oracle every backend is checked against.
//!
//! It evaluates the checked [`Program`] node by node with plain loops and nothing clever.
//! Values are held as f64 and rounded to their node's dtype after every node, so an f16 value is
//! always exactly an f16. Reductions and einsum sums accumulate in f64. Sparse inputs are
//! evaluated through their dense values. This module shares no code with the planner.

mod prune;

use crate::check::{
    BinOp, EinsumSpec, NodeKind, OutElem, Program, Recipe, ReduceOp, TensorRef, UnOp,
};
use crate::dtype::DType;
use crate::tensor::Tensor;

/// A dense value: row-major f64 data with its extents.
#[derive(Debug, Clone)]
struct Value {
    shape: Vec<usize>,
    data: Vec<f64>,
}

/// Row-major strides of a shape.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Splits a flat row-major index into coordinates.
fn unflatten(mut flat: usize, shape: &[usize], coords: &mut [usize]) {
    for i in (0..shape.len()).rev() {
        coords[i] = flat % shape[i];
        flat /= shape[i];
    }
}

/// Evaluates every assignment, returning the values of the program's outputs in order.
/// `inputs[i]` is the value of `program.inputs[i]`; the caller has matched dtypes and shapes.
pub fn run(program: &Program, inputs: &[Tensor]) -> Vec<Tensor> {
    let values = eval_all(program, inputs);
    program
        .outputs
        .iter()
        .map(|o| {
            let (v, dtype) = match o.tensor {
                TensorRef::Input(i) => (
                    Value {
                        shape: inputs[i].shape.clone(),
                        data: inputs[i].to_f64(),
                    },
                    inputs[i].dtype(),
                ),
                TensorRef::Assign(a) => {
                    let n = program.assigns[a].node;
                    (values[n.idx()].clone(), program.node(n).ty.dtype)
                }
            };
            Tensor::from_f64(dtype, v.shape, &v.data)
        })
        .collect()
}

/// Evaluates every assignment and returns each one's value (for tests and the REPL).
pub fn run_all(program: &Program, inputs: &[Tensor]) -> Vec<Tensor> {
    let values = eval_all(program, inputs);
    program
        .assigns
        .iter()
        .map(|a| {
            let v = &values[a.node.idx()];
            Tensor::from_f64(program.node(a.node).ty.dtype, v.shape.clone(), &v.data)
        })
        .collect()
}

/// The dense values of `sparsify(x, format, select)`: `x` with the dropped entries zero (the
/// oracle's own pruning, `prune.rs`).
fn sparsify(x: &Value, format: crate::check::Format, select: crate::check::Select) -> Vec<f64> {
    prune::sparsify(&x.data, &x.shape, format, select)
}

fn eval_all(program: &Program, inputs: &[Tensor]) -> Vec<Value> {
    let mut values: Vec<Value> = Vec::with_capacity(program.nodes.len());
    for node in &program.nodes {
        let dtype = node.ty.dtype;
        let v = match &node.kind {
            NodeKind::Input(i) => Value {
                shape: inputs[*i].shape.clone(),
                data: inputs[*i].to_f64(),
            },
            NodeKind::Var(a) => values[program.assigns[*a].node.idx()].clone(),
            NodeKind::Scalar(x) => Value {
                shape: vec![],
                data: vec![*x],
            },
            NodeKind::Unary(f, x) => {
                let x = &values[x.idx()];
                let weak = node.weak;
                Value {
                    shape: x.shape.clone(),
                    data: x
                        .data
                        .iter()
                        .map(|&v| unary(*f, if weak { v } else { dtype.round(v) }))
                        .collect(),
                }
            }
            NodeKind::Binary(f, a, b) => {
                // A weak scalar takes the result's dtype before the operation (numpy's NEP 50).
                let (va, vb) = (&values[a.idx()], &values[b.idx()]);
                let ra = if program.node(*a).weak {
                    Some(dtype)
                } else {
                    None
                };
                let rb = if program.node(*b).weak {
                    Some(dtype)
                } else {
                    None
                };
                broadcast(va, vb, |x, y| {
                    let x = ra.map_or(x, |d| d.round(x));
                    let y = rb.map_or(y, |d| d.round(y));
                    binary(*f, x, y)
                })
            }
            NodeKind::Where(c, a, b) => {
                // As Binary: a weak scalar branch takes the result's dtype first.
                let r = |o: &crate::check::NodeId, v: f64| {
                    if program.node(*o).weak {
                        dtype.round(v)
                    } else {
                        v
                    }
                };
                let vals = [&values[c.idx()], &values[a.idx()], &values[b.idx()]];
                broadcast_n(&vals, |x| {
                    // numpy's `where`: NaN is truthy.
                    if x[0] != 0.0 {
                        r(a, x[1])
                    } else {
                        r(b, x[2])
                    }
                })
            }
            NodeKind::AxisIndex { .. } => {
                let shape: Vec<usize> = node.ty.shape.0.iter().map(|a| a.extent as usize).collect();
                let n: usize = shape.iter().product();
                Value {
                    shape,
                    data: (0..n).map(|i| i as f64).collect(),
                }
            }
            NodeKind::Cast(x) | NodeKind::Dense(x) => values[x.idx()].clone(),
            NodeKind::Sparsify { x, select } => {
                let x = &values[x.idx()];
                Value {
                    shape: x.shape.clone(),
                    data: sparsify(x, node.ty.format, *select),
                }
            }
            NodeKind::Pattern {
                reduce, x, recipe, ..
            } => pattern(&values[x.idx()], recipe, *reduce),
            NodeKind::Einsum { operands, spec } => {
                let ops: Vec<&Value> = operands.iter().map(|o| &values[o.idx()]).collect();
                einsum(&ops, spec)
            }
            NodeKind::Concat { axis, parts } => {
                let parts: Vec<&Value> = parts.iter().map(|o| &values[o.idx()]).collect();
                concat(&parts, *axis)
            }
            NodeKind::Slice { x, axis, start } => {
                let len = node.ty.shape.0[*axis].extent as usize;
                slice(&values[x.idx()], *axis, *start as usize, len)
            }
        };
        // Weak scalars (literals, sizes, and arithmetic on only those) stay exact f64 until they
        // meet a tensor, whose dtype they then take (numpy's NEP 50).
        let data = if node.weak {
            v.data
        } else {
            v.data.into_iter().map(|x| round(dtype, x)).collect()
        };
        values.push(Value {
            shape: v.shape,
            data,
        });
    }
    values
}

/// `parts` laid end to end along `axis` (numpy's `concatenate`).
fn concat(parts: &[&Value], axis: usize) -> Value {
    let mut shape = parts[0].shape.clone();
    shape[axis] = parts.iter().map(|p| p.shape[axis]).sum();
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut data = Vec::with_capacity(outer * shape[axis] * inner);
    for o in 0..outer {
        for p in parts {
            let run = p.shape[axis] * inner;
            data.extend_from_slice(&p.data[o * run..(o + 1) * run]);
        }
    }
    Value { shape, data }
}

/// `x[.., start..start + len, ..]` along `axis`.
fn slice(x: &Value, axis: usize, start: usize, len: usize) -> Value {
    let mut shape = x.shape.clone();
    shape[axis] = len;
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let run = x.shape[axis] * inner;
    let mut data = Vec::with_capacity(outer * len * inner);
    for o in 0..outer {
        let from = o * run + start * inner;
        data.extend_from_slice(&x.data[from..from + len * inner]);
    }
    Value { shape, data }
}

fn round(dtype: DType, x: f64) -> f64 {
    dtype.round(x)
}

/// One elementwise function of one argument, in f64.
pub fn unary(f: UnOp, x: f64) -> f64 {
    match f {
        UnOp::Neg => -x,
        UnOp::Exp => x.exp(),
        UnOp::Log => x.ln(),
        UnOp::Sqrt => x.sqrt(),
        UnOp::Rsqrt => 1.0 / x.sqrt(),
        UnOp::Abs => x.abs(),
        UnOp::Tanh => x.tanh(),
        UnOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnOp::Relu => {
            if x.is_nan() {
                x
            } else {
                x.max(0.0)
            }
        }
        UnOp::Gelu => {
            // The tanh approximation (as GPT-2 and jax.nn.gelu's default).
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        UnOp::Sin => x.sin(),
        UnOp::Cos => x.cos(),
        UnOp::Square => x * x,
        UnOp::Erf => libm::erf(x),
        UnOp::GeluErf => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
        UnOp::Silu => x / (1.0 + (-x).exp()),
        UnOp::Softplus => {
            // log(1 + e^x), in the form that neither overflows nor loses small results.
            if x.is_nan() {
                x
            } else if x > 0.0 {
                x + (-x).exp().ln_1p()
            } else {
                x.exp().ln_1p()
            }
        }
        UnOp::Log1p => x.ln_1p(),
        UnOp::Expm1 => x.exp_m1(),
        UnOp::Floor => x.floor(),
        UnOp::Ceil => x.ceil(),
        UnOp::Round => x.round_ties_even(),
        UnOp::Sign => {
            if x.is_nan() || x == 0.0 {
                x
            } else {
                x.signum()
            }
        }
    }
}

/// One elementwise function of two arguments, in f64. `max`/`min` propagate NaN, as numpy.
pub fn binary(f: BinOp, x: f64, y: f64) -> f64 {
    match f {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x * y,
        BinOp::Div => x / y,
        BinOp::Max => {
            if x.is_nan() || y.is_nan() {
                f64::NAN
            } else {
                x.max(y)
            }
        }
        BinOp::Min => {
            if x.is_nan() || y.is_nan() {
                f64::NAN
            } else {
                x.min(y)
            }
        }
        BinOp::Pow => x.powf(y),
        BinOp::Lt => f64::from(u8::from(x < y)),
        BinOp::Le => f64::from(u8::from(x <= y)),
        BinOp::Gt => f64::from(u8::from(x > y)),
        BinOp::Ge => f64::from(u8::from(x >= y)),
        BinOp::Eq => f64::from(u8::from(x == y)),
        BinOp::Ne => f64::from(u8::from(x != y)),
    }
}

/// numpy broadcasting of any number of values.
fn broadcast_n(vals: &[&Value], f: impl Fn(&[f64]) -> f64) -> Value {
    let rank = vals.iter().map(|v| v.shape.len()).max().unwrap_or(0);
    let padded: Vec<Vec<usize>> = vals
        .iter()
        .map(|v| {
            let mut p = vec![1; rank - v.shape.len()];
            p.extend_from_slice(&v.shape);
            p
        })
        .collect();
    let shape: Vec<usize> = (0..rank)
        .map(|k| padded.iter().map(|p| p[k]).max().unwrap_or(1))
        .collect();
    let st: Vec<Vec<usize>> = padded.iter().map(|p| strides(p)).collect();
    let n: usize = shape.iter().product();
    let mut coords = vec![0; rank];
    let mut args = vec![0.0; vals.len()];
    let mut data = Vec::with_capacity(n);
    for flat in 0..n {
        unflatten(flat, &shape, &mut coords);
        for (j, v) in vals.iter().enumerate() {
            let mut i = 0;
            for k in 0..rank {
                if padded[j][k] != 1 {
                    i += coords[k] * st[j][k];
                }
            }
            args[j] = v.data[i];
        }
        data.push(f(&args));
    }
    Value { shape, data }
}

/// numpy broadcasting of two values.
fn broadcast(a: &Value, b: &Value, f: impl Fn(f64, f64) -> f64) -> Value {
    let rank = a.shape.len().max(b.shape.len());
    let pad = |s: &[usize]| {
        let mut p = vec![1; rank - s.len()];
        p.extend_from_slice(s);
        p
    };
    let (sa, sb) = (pad(&a.shape), pad(&b.shape));
    let shape: Vec<usize> = sa.iter().zip(&sb).map(|(&x, &y)| x.max(y)).collect();
    let (ta, tb) = (strides(&sa), strides(&sb));
    let n: usize = shape.iter().product();
    let mut coords = vec![0; rank];
    let mut data = Vec::with_capacity(n);
    for flat in 0..n {
        unflatten(flat, &shape, &mut coords);
        let (mut ia, mut ib) = (0, 0);
        for k in 0..rank {
            if sa[k] != 1 {
                ia += coords[k] * ta[k];
            }
            if sb[k] != 1 {
                ib += coords[k] * tb[k];
            }
        }
        data.push(f(a.data[ia], b.data[ib]));
    }
    Value { shape, data }
}

/// rearrange / reduce / repeat through their common recipe.
fn pattern(x: &Value, r: &Recipe, reduce: Option<ReduceOp>) -> Value {
    let out_shape: Vec<usize> = r.out_extents().iter().map(|&e| e as usize).collect();
    let in_elems: Vec<usize> = r.in_elems.iter().map(|&e| e as usize).collect();
    // Extents of each output slot's elementary axes, to split an output coordinate.
    let out_elem_ext: Vec<Vec<usize>> = r
        .out_groups
        .iter()
        .map(|g| {
            g.iter()
                .map(|e| match *e {
                    OutElem::In(i) => in_elems[i],
                    OutElem::New(n) => n as usize,
                })
                .collect()
        })
        .collect();
    let red_ext: Vec<usize> = r.reduced.iter().map(|&i| in_elems[i]).collect();
    let n_red: usize = red_ext.iter().product();
    let n_out: usize = out_shape.iter().product();
    let in_strides = strides(&x.shape);
    let mut elem = vec![0usize; in_elems.len()];
    let mut out_coords = vec![0; out_shape.len()];
    let mut red_coords = vec![0; red_ext.len()];
    let mut data = Vec::with_capacity(n_out);
    for flat in 0..n_out {
        unflatten(flat, &out_shape, &mut out_coords);
        for (slot, g) in r.out_groups.iter().enumerate() {
            let mut sub = vec![0; g.len()];
            unflatten(out_coords[slot], &out_elem_ext[slot], &mut sub);
            for (e, &c) in g.iter().zip(&sub) {
                if let OutElem::In(i) = *e {
                    elem[i] = c;
                }
            }
        }
        let mut acc: Option<f64> = None;
        let mut sum = 0.0;
        for rflat in 0..n_red {
            unflatten(rflat, &red_ext, &mut red_coords);
            for (&i, &c) in r.reduced.iter().zip(&red_coords) {
                elem[i] = c;
            }
            // Compose elementary coordinates into input slot coordinates (row-major in groups).
            let mut idx = 0;
            for (slot, g) in r.in_groups.iter().enumerate() {
                let mut c = 0;
                for &e in g {
                    c = c * in_elems[e] + elem[e];
                }
                idx += c * in_strides[slot];
            }
            let v = x.data[idx];
            match reduce {
                None => acc = Some(v),
                Some(ReduceOp::Sum | ReduceOp::Mean) => sum += v,
                Some(ReduceOp::Prod) => acc = Some(acc.unwrap_or(1.0) * v),
                Some(ReduceOp::Max) => acc = Some(acc.map_or(v, |a| binary(BinOp::Max, a, v))),
                Some(ReduceOp::Min) => acc = Some(acc.map_or(v, |a| binary(BinOp::Min, a, v))),
            }
        }
        data.push(match reduce {
            Some(ReduceOp::Sum) => sum,
            Some(ReduceOp::Mean) => sum / n_red as f64,
            _ => acc.unwrap_or(0.0),
        });
    }
    Value {
        shape: out_shape,
        data,
    }
}

/// einsum by brute force: every combination of every label, products summed in f64.
fn einsum(ops: &[&Value], spec: &EinsumSpec) -> Value {
    let ext: Vec<usize> = spec.labels.iter().map(|l| l.1 as usize).collect();
    let out_shape: Vec<usize> = spec.out_extents().iter().map(|&e| e as usize).collect();
    let n_out: usize = out_shape.iter().product();
    let mut out = vec![0.0; n_out];
    let op_strides: Vec<Vec<usize>> = ops.iter().map(|v| strides(&v.shape)).collect();
    let n_all: usize = ext.iter().product();
    let mut coord = vec![0usize; ext.len()];
    let compose = |labels: &[usize], coord: &[usize]| -> usize {
        labels.iter().fold(0, |c, &l| c * ext[l] + coord[l])
    };
    for flat in 0..n_all {
        unflatten(flat, &ext, &mut coord);
        let mut p = 1.0;
        for (k, slots) in spec.operands.iter().enumerate() {
            let mut idx = 0;
            for (s, slot) in slots.iter().enumerate() {
                if !slot.broadcast {
                    idx += compose(&slot.labels, &coord) * op_strides[k][s];
                }
            }
            p *= ops[k].data[idx];
        }
        // Labels repeated within one operand must agree: the composed index above already uses
        // one coordinate per label, so a diagonal is read for free.
        let mut o = 0;
        for (s, g) in spec.output.iter().enumerate() {
            o = o * out_shape[s] + compose(g, &coord);
        }
        out[o] += p;
    }
    Value {
        shape: out_shape,
        data: out,
    }
}
