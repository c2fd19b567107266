//! Elementwise operators and `where`: dtype promotion, broadcasting, and which formats a
//! result keeps.

use super::*;

impl Checker {
    pub(super) fn unary(&mut self, f: UnOp, x: NodeId, span: Span) -> Option<NodeId> {
        // A function with f(0) = 0 keeps a sparse operand's format: it runs on the stored
        // entries (spec/language.md §8.2).
        let xf = self.prog.node(x).ty.format;
        let keep = xf.is_sparse() && keeps_zero(f);
        if xf.is_sparse() && !keep {
            let t = self.prog.node(x).ty.clone();
            self.note_dense(span, &format!("`{}`", f.name()), t.format, &t.shape);
        }
        let xn = self.prog.node(x);
        let ty = TensorType {
            format: if keep { xf } else { Format::Dense },
            ..xn.ty.clone()
        };
        let weak = xn.weak;
        self.push_node(NodeKind::Unary(f, x), ty, weak, span)
    }

    pub(super) fn binary(&mut self, f: BinOp, a: NodeId, b: NodeId, span: Span) -> Option<NodeId> {
        let kept = self.kept_format(f, a, b);
        for o in [a, b] {
            if kept.is_none() && self.prog.node(o).ty.format.is_sparse() {
                let t = self.prog.node(o).ty.clone();
                self.note_dense(span, &format!("`{}`", f.name()), t.format, &t.shape);
                break;
            }
        }
        let (na, nb) = (self.prog.node(a), self.prog.node(b));
        let dtype = match (na.weak, nb.weak) {
            (true, false) => nb.ty.dtype,
            (false, true) => na.ty.dtype,
            _ => DType::promote(na.ty.dtype, nb.ty.dtype),
        };
        let weak = na.weak && nb.weak;
        let (sa, sb, pa, pb) = (na.ty.shape.clone(), nb.ty.shape.clone(), na.span, nb.span);
        let shape = self.broadcast_shapes(&sa, pa, &sb, pb)?;
        let ty = TensorType {
            dtype,
            shape,
            format: kept.unwrap_or(Format::Dense),
        };
        self.push_node(NodeKind::Binary(f, a, b), ty, weak, span)
    }

    /// Two shapes broadcast together (numpy's rule, right-aligned); the spans are the operands'.
    pub(super) fn broadcast_shapes(
        &mut self,
        sa: &Shape,
        pa: Span,
        sb: &Shape,
        pb: Span,
    ) -> Option<Shape> {
        let rank = sa.rank().max(sb.rank());
        let mut axes = Vec::with_capacity(rank);
        for i in 0..rank {
            // Right-aligned, as numpy: slot i of the result meets slot i-(rank-r) of each operand.
            let ax = |s: &Shape| {
                let off = rank - s.rank();
                (i >= off).then(|| s.0[i - off].clone())
            };
            let (xa, xb) = (ax(sa), ax(sb));
            let axis = match (xa, xb) {
                (Some(x), None) | (None, Some(x)) => x,
                (Some(x), Some(y)) => {
                    if x.extent == y.extent {
                        if x.name.is_some() {
                            x
                        } else {
                            y
                        }
                    } else if y.extent == 1 {
                        x
                    } else if x.extent == 1 {
                        y
                    } else {
                        let show = |a: &Axis| match &a.name {
                            Some(n) => format!("`{n}`={}", a.extent),
                            None => a.extent.to_string(),
                        };
                        self.diags.push(
                            Diagnostic::new(
                                Code::BroadcastMismatch,
                                format!(
                                    "shapes {} and {} do not broadcast: {} against {}",
                                    sa,
                                    sb,
                                    show(&x),
                                    show(&y)
                                ),
                            )
                            .label(pa, format!("shape {sa}"))
                            .label(pb, format!("shape {sb}"))
                            .help("numpy's rule: aligned from the right, extents must be equal or 1; rearrange or reduce one side first"),
                        );
                        return None;
                    }
                }
                (None, None) => unreachable_axis(),
            };
            axes.push(axis);
        }
        Some(Shape(axes))
    }

    /// `where(cond, a, b)`: the three broadcast together; the dtype is `a`'s and `b`'s, by the
    /// same rules as arithmetic (a weak scalar side yields to the other).
    pub(super) fn where_(&mut self, c: NodeId, a: NodeId, b: NodeId, span: Span) -> Option<NodeId> {
        let (nc, na, nb) = (self.prog.node(c), self.prog.node(a), self.prog.node(b));
        let (sc, sa, sb) = (
            nc.ty.shape.clone(),
            na.ty.shape.clone(),
            nb.ty.shape.clone(),
        );
        let (pc, pa, pb) = (nc.span, na.span, nb.span);
        let ab = self.broadcast_shapes(&sa, pa, &sb, pb)?;
        let shape = self.broadcast_shapes(&sc, pc, &ab, pa.join(pb))?;
        let (na, nb) = (self.prog.node(a), self.prog.node(b));
        let dtype = match (na.weak, nb.weak) {
            (true, false) => nb.ty.dtype,
            (false, true) => na.ty.dtype,
            _ => DType::promote(na.ty.dtype, nb.ty.dtype),
        };
        let weak = na.weak && nb.weak && self.prog.node(c).weak;
        for o in [c, a, b] {
            if self.prog.node(o).ty.format.is_sparse() {
                let t = self.prog.node(o).ty.clone();
                self.note_dense(span, "`where`", t.format, &t.shape);
                break;
            }
        }
        let ty = TensorType {
            dtype,
            shape,
            format: Format::Dense,
        };
        self.push_node(NodeKind::Where(c, a, b), ty, weak, span)
    }

    /// The format `a f b` keeps: a sparse operand's, when the result is zero wherever that
    /// operand is (`s * d`, `d * s`, `s / d`) and the sparse side does not broadcast (the result
    /// has its shape, which `binary` checks). The product of two sparse values keeps the left
    /// one's format. Otherwise `None`: the result is dense.
    pub(super) fn kept_format(&self, f: BinOp, a: NodeId, b: NodeId) -> Option<Format> {
        let (ta, tb) = (&self.prog.node(a).ty, &self.prog.node(b).ty);
        // The other operand broadcasts to the sparse one's shape (right-aligned).
        let fits = |s: &TensorType, d: &TensorType| {
            d.shape.rank() <= s.shape.rank()
                && d.shape
                    .0
                    .iter()
                    .rev()
                    .zip(s.shape.0.iter().rev())
                    .all(|(x, y)| x.extent == y.extent || x.extent == 1)
        };
        let sides: &[(&TensorType, &TensorType)] = match f {
            BinOp::Mul => &[(ta, tb), (tb, ta)],
            BinOp::Div => &[(ta, tb)],
            _ => &[],
        };
        sides
            .iter()
            .find(|(s, d)| s.format.is_sparse() && fits(s, d))
            .map(|(s, _)| s.format)
    }
}
