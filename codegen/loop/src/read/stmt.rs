//! Buffers, kernel headers, loop headers, indices, views, sparse operands and statements.

use super::{at, Cur, Result};
use crate::ir::{
    AccId, AccOp, BinOp, BufId, Buffer, ElemType, Expr, GpuAxis, Index, Iter, LibCall, Loop,
    MatView, Part, Role, Select, Side, SparseLayout, SparseOperand, Stmt, VarId,
};

impl<'a> Cur<'a> {
    /// `%ID NAME: TYPE[ELEMS] ROLE`, whose id must be `id`.
    pub(super) fn buffer(&mut self, id: usize) -> Result<Buffer> {
        let start = self.pos;
        self.expect("%")?;
        if self.usize("a buffer id")? != id {
            self.pos = start;
            return Err(self.error(&format!("buffers are listed in order: expected %{id}")));
        }
        self.expect(" ")?;
        let name = self.name()?;
        self.expect(": ")?;
        let ty = self.elem_type()?;
        self.expect("[")?;
        let elems = self.uint("an element count")?;
        self.expect("] ")?;
        let role = if self.eat("temp") {
            Role::Temp
        } else if self.eat("output ") {
            Role::Output(self.u32("an output number")?)
        } else if self.eat("input ") {
            let input = self.u32("an input number")?;
            if self.eat(".") {
                let part = match self.word() {
                    "ptr" => Part::Ptr,
                    "idx" => Part::Idx,
                    "values" => Part::Values,
                    _ => return Err(self.error("expected `ptr`, `idx` or `values`")),
                };
                Role::InputPart { input, part }
            } else {
                Role::Input(input)
            }
        } else {
            return Err(self.expected("`input N`, `output N` or `temp`"));
        };
        self.end()?;
        Ok(Buffer {
            name,
            ty,
            elems,
            role,
        })
    }

    pub(super) fn elem_type(&mut self) -> Result<ElemType> {
        let start = self.pos;
        Ok(match self.word() {
            "f32" => ElemType::F32,
            "f64" => ElemType::F64,
            "f16" => ElemType::F16,
            "bf16" => ElemType::BF16,
            "i32" => ElemType::I32,
            _ => {
                self.pos = start;
                return Err(self.expected("a type (f32, f64, f16, bf16, i32)"));
            }
        })
    }

    /// `kernel NAME (ORIGIN):` or `kernel NAME:`.
    pub(super) fn kernel_header(&mut self) -> Result<(String, String)> {
        self.expect("kernel ")?;
        let name = self.name()?;
        if self.eat(":") {
            self.end()?;
            return Ok((name, String::new()));
        }
        self.expect(" (")?;
        let r = self.rest().trim_end();
        let Some(inner) = r.strip_suffix("):") else {
            return Err(self.error("expected the origin to end with `):`"));
        };
        let mut origin = String::new();
        let mut c = Cur {
            text: inner,
            pos: 0,
            ..*self
        };
        while let Some(ch) = c.rest().chars().next() {
            c.pos += ch.len_utf8();
            if ch == '\\' {
                origin.push(c.escape().map_err(|mut e| {
                    e.col += self.text[..self.pos].chars().count();
                    e
                })?);
            } else {
                origin.push(ch);
            }
        }
        Ok((name, origin))
    }

    /// `for vN in ITER [parallel] [vector W] [gpu AXIS] {`, with an empty body.
    pub(super) fn loop_header(&mut self) -> Result<Loop> {
        self.expect("for ")?;
        let var = self.var()?;
        self.expect(" in ")?;
        let iter = self.iter()?;
        let parallel = self.eat(" parallel");
        let vector = if self.eat(" vector ") {
            self.u32("a vector width")?
        } else {
            1
        };
        let gpu = if self.eat(" gpu ") {
            Some(self.gpu_axis()?)
        } else {
            None
        };
        self.expect(" {")?;
        self.end()?;
        Ok(Loop {
            var,
            iter,
            parallel,
            vector,
            gpu,
            body: Vec::new(),
        })
    }

    pub(super) fn gpu_axis(&mut self) -> Result<GpuAxis> {
        let start = self.pos;
        Ok(match self.word() {
            "grid" => GpuAxis::Grid,
            "block.x" => GpuAxis::BlockX,
            "block.y" => GpuAxis::BlockY,
            "block.z" => GpuAxis::BlockZ,
            "thread.x" => GpuAxis::ThreadX,
            "thread.y" => GpuAxis::ThreadY,
            "thread.z" => GpuAxis::ThreadZ,
            "warp" => GpuAxis::Warp,
            "lane" => GpuAxis::Lane,
            _ => {
                self.pos = start;
                return Err(self.expected("a GPU axis"));
            }
        })
    }

    pub(super) fn var(&mut self) -> Result<VarId> {
        self.expect("v")?;
        Ok(VarId(self.u32("a variable number")?))
    }

    pub(super) fn buf(&mut self) -> Result<BufId> {
        self.expect("%")?;
        Ok(BufId(self.u32("a buffer id")?))
    }

    /// `%B[INDEX]`.
    pub(super) fn buf_index(&mut self) -> Result<(BufId, Index)> {
        let b = self.buf()?;
        self.expect("[")?;
        let index = self.index()?;
        self.expect("]")?;
        Ok((b, index))
    }

    pub(super) fn iter(&mut self) -> Result<Iter> {
        if self.eat("0..") {
            return Ok(Iter::Range {
                extent: self.uint("an extent")?,
            });
        }
        if self.eat("compressed ptr=") {
            let (ptr, ptr_index) = self.buf_index()?;
            self.expect(" crd=")?;
            let crd = self.buf()?;
            self.expect(" coord=")?;
            let coord = self.var()?;
            return Ok(Iter::Compressed {
                ptr,
                ptr_index,
                crd,
                coord,
            });
        }
        if self.eat("singleton crd=") {
            let (crd, pos_index) = self.buf_index()?;
            return Ok(Iter::Singleton { crd, pos_index });
        }
        if self.eat("twofour ") {
            let groups = self.key_uint("groups=")?;
            self.expect(" meta=")?;
            let (meta, meta_index) = self.buf_index()?;
            self.expect(" coord=")?;
            let coord = self.var()?;
            return Ok(Iter::TwoFour {
                groups,
                meta,
                meta_index,
                coord,
            });
        }
        Err(self.expected("`0..N`, `compressed`, `singleton` or `twofour`"))
    }

    /// `Σ ±C*name ± OFFSET`, as `(name, stride)` terms and an offset; `name` is read by `var`.
    pub(super) fn affine<T>(
        &mut self,
        mut var: impl FnMut(&mut Self) -> Option<T>,
    ) -> Result<(Vec<(T, i64)>, i64)> {
        let mut terms = Vec::new();
        let mut offset: i128 = 0;
        let mut negative = self.eat("-");
        loop {
            let start = self.pos;
            let (coef, name) = if let Some(v) = var(self) {
                (1, Some(v))
            } else {
                let c = self.uint("an index term")?;
                if self.eat("*") {
                    match var(self) {
                        Some(v) => (c, Some(v)),
                        None => return Err(self.expected("a variable after `*`")),
                    }
                } else {
                    (c, None)
                }
            };
            let value = if negative {
                -i128::from(coef)
            } else {
                i128::from(coef)
            };
            let fits = i64::try_from(value).map_err(|_| {
                self.pos = start;
                self.error("an index coefficient out of range")
            })?;
            match name {
                Some(v) => terms.push((v, fits)),
                None => offset += value,
            }
            if self.eat(" + ") {
                negative = false;
            } else if self.eat(" - ") {
                negative = true;
            } else {
                break;
            }
        }
        let offset =
            i64::try_from(offset).map_err(|_| self.error("an index offset out of range"))?;
        Ok((terms, offset))
    }

    pub(super) fn index(&mut self) -> Result<Index> {
        let (terms, offset) = self.affine(|c| {
            let save = c.pos;
            let v = (c.eat("v") && c.rest().starts_with(|ch: char| ch.is_ascii_digit()))
                .then(|| c.u32("a variable number").ok().map(VarId))
                .flatten();
            if v.is_none() {
                // Not a variable (or a number too large for one): read it as a number, which
                // fails on the `v`.
                c.pos = save;
            }
            v
        })?;
        Ok(Index { offset, terms })
    }

    /// `%B[S0*b0 + … + R*r + C*c + OFFSET]`, with `batch` batch axes.
    pub(super) fn view(&mut self, batch: usize) -> Result<MatView> {
        #[derive(Clone, Copy, PartialEq)]
        enum Axis {
            Batch(u32),
            Row,
            Col,
        }
        let buf = self.buf()?;
        self.expect("[")?;
        let start = self.pos;
        let (terms, offset) = self.affine(|c| {
            let r = c.rest();
            let alone = |n: usize| !r[n..].starts_with(|ch: char| ch.is_ascii_alphanumeric());
            let axis = match r.as_bytes().first() {
                Some(b'r') if alone(1) => Axis::Row,
                Some(b'c') if alone(1) => Axis::Col,
                Some(b'b') if r[1..].starts_with(|ch: char| ch.is_ascii_digit()) => {
                    let save = c.pos;
                    c.pos += 1;
                    let axis = c.u32("a batch axis").ok().map(Axis::Batch);
                    if axis.is_none() {
                        c.pos = save;
                    }
                    return axis;
                }
                _ => return None,
            };
            c.pos += 1;
            Some(axis)
        })?;
        let (line, text) = (self.line, self.text);
        let fail = |message: String| at(line, text, start, &message);
        let mut strides = vec![None; batch];
        let (mut row, mut col) = (None, None);
        for (axis, s) in terms {
            let slot = match axis {
                Axis::Row => &mut row,
                Axis::Col => &mut col,
                Axis::Batch(b) => strides.get_mut(b as usize).ok_or_else(|| {
                    fail(format!("the call has {batch} batch axes: there is no b{b}"))
                })?,
            };
            if slot.replace(s).is_some() {
                return Err(fail("a view names an axis twice".into()));
            }
        }
        self.expect("]")?;
        let missing = |what: &str| fail(format!("a view needs {what}"));
        Ok(MatView {
            buf,
            offset,
            row_stride: row.ok_or_else(|| missing("a row stride (`R*r`)"))?,
            col_stride: col.ok_or_else(|| missing("a column stride (`C*c`)"))?,
            batch_strides: strides
                .into_iter()
                .enumerate()
                .map(|(i, s)| s.ok_or_else(|| missing(&format!("a stride for b{i}"))))
                .collect::<Result<_>>()?,
        })
    }

    /// `LAYOUT[SHAPE](ptr=%p idx=%i values=%v)`.
    pub(super) fn sparse(&mut self) -> Result<SparseOperand> {
        let layout = if self.eat("coo") {
            SparseLayout::Coo
        } else if self.eat("csr") {
            SparseLayout::Csr
        } else if self.eat("csc") {
            SparseLayout::Csc
        } else if self.eat("bsr(") {
            let br = self.usize("a block height")?;
            self.expect(", ")?;
            let bc = self.usize("a block width")?;
            self.expect(")")?;
            SparseLayout::Bsr { br, bc }
        } else if self.eat("2:4(axis=") {
            let axis = self.usize("an axis")?;
            self.expect(")")?;
            SparseLayout::TwoFour { axis }
        } else {
            return Err(self.expected("a sparse layout (coo, csr, csc, bsr(R, C), 2:4(axis=A))"));
        };
        self.expect("[")?;
        let shape = self.list(|c| c.uint("an extent"))?;
        self.expect("(")?;
        let ptr = if self.eat("ptr=") {
            let p = self.buf()?;
            self.expect(" ")?;
            Some(p)
        } else {
            None
        };
        self.expect("idx=")?;
        let idx = self.buf()?;
        self.expect(" values=")?;
        let values = self.buf()?;
        self.expect(")")?;
        Ok(SparseOperand {
            layout,
            shape,
            ptr,
            idx,
            values,
        })
    }

    pub(super) fn statement(&mut self) -> Result<Stmt> {
        let s = if self.eat("let ") {
            self.expect("a")?;
            let acc = AccId(self.u32("an accumulator number")?);
            self.expect(": ")?;
            let ty = self.elem_type()?;
            self.expect(" = ")?;
            Stmt::Let {
                acc,
                ty,
                init: self.expr()?,
            }
        } else if self.rest().starts_with('%') {
            let (buf, index) = self.buf_index()?;
            self.expect(" = ")?;
            Stmt::Store {
                buf,
                index,
                value: self.expr()?,
            }
        } else if self.rest().starts_with('a')
            && self.rest()[1..].starts_with(|c: char| c.is_ascii_digit())
        {
            self.update()?
        } else if self.eat("gemm ") {
            self.gemm()?
        } else if self.eat("spmm ") {
            self.spmm()?
        } else if self.eat("sparsify ") {
            let src = self.buf()?;
            self.expect(" -> ")?;
            let out = self.sparse()?;
            self.expect(" keep=")?;
            let select = if self.eat("all") {
                Select::All
            } else if self.eat("threshold(") {
                Select::Threshold(self.number()?)
            } else if self.eat("density(") {
                Select::Density(self.number()?)
            } else {
                return Err(self.expected("`all`, `threshold(T)` or `density(D)`"));
            };
            if !matches!(select, Select::All) {
                self.expect(")")?;
            }
            Stmt::Call(LibCall::Sparsify { src, out, select })
        } else if self.eat("densify ") {
            let s = self.sparse()?;
            self.expect(" -> ")?;
            Stmt::Call(LibCall::Densify {
                s,
                dst: self.buf()?,
            })
        } else {
            return Err(self.expected("a statement (for, let, a store, an update or a call)"));
        };
        self.end()?;
        Ok(s)
    }

    /// `aN += e`, `aN *= e`, `aN = max(aN, e)`, `aN = min(aN, e)` or `aN = e`.
    pub(super) fn update(&mut self) -> Result<Stmt> {
        self.expect("a")?;
        let acc = AccId(self.u32("an accumulator number")?);
        let (op, value) = if self.eat(" += ") {
            (AccOp::Add, self.expr()?)
        } else if self.eat(" *= ") {
            (AccOp::Mul, self.expr()?)
        } else {
            self.expect(" = ")?;
            match self.expr()? {
                Expr::Binary(BinOp::Max, a, e) if *a == Expr::Acc(acc) => (AccOp::Max, *e),
                Expr::Binary(BinOp::Min, a, e) if *a == Expr::Acc(acc) => (AccOp::Min, *e),
                e => (AccOp::Set, e),
            }
        };
        Ok(Stmt::Update { acc, op, value })
    }

    pub(super) fn gemm(&mut self) -> Result<Stmt> {
        let m = self.key_uint("m=")?;
        let n = self.key_uint(" n=")?;
        let k = self.key_uint(" k=")?;
        self.expect(" batch=[")?;
        let batch = self.list(|c| c.uint("a batch extent"))?;
        self.expect(" a=")?;
        let a = self.view(batch.len())?;
        self.expect(" b=")?;
        let b = self.view(batch.len())?;
        self.expect(" c=")?;
        let c = self.view(batch.len())?;
        self.expect(" accumulate=")?;
        Ok(Stmt::Call(LibCall::Gemm {
            m,
            n,
            k,
            batch,
            a,
            b,
            c,
            accumulate: self.bool_()?,
        }))
    }

    pub(super) fn spmm(&mut self) -> Result<Stmt> {
        let m = self.key_uint("m=")?;
        let n = self.key_uint(" n=")?;
        let k = self.key_uint(" k=")?;
        let side = if self.eat(" left") {
            Side::Left
        } else if self.eat(" right") {
            Side::Right
        } else {
            return Err(self.expected("`left` or `right`"));
        };
        self.expect(" s=")?;
        let s = self.sparse()?;
        let transposed = self.eat(" transposed");
        self.expect(" d=")?;
        let d = self.view(0)?;
        self.expect(" c=")?;
        let c = self.view(0)?;
        self.expect(" accumulate=")?;
        Ok(Stmt::Call(LibCall::SpMM {
            m,
            n,
            k,
            s,
            transposed,
            side,
            d,
            c,
            accumulate: self.bool_()?,
        }))
    }
}
