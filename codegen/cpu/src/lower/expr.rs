//! Expressions: compute types, casts, elementwise operations and helper calls (the inline vector
//! math is in `math.rs`).

use super::*;

impl<M: Module> Lower<'_, '_, M> {
    /// The compute type of an expression: `None` when it holds only constants.
    pub(super) fn infer(&self, e: &Expr) -> Option<Ct> {
        match e {
            Expr::Const(_) => None,
            Expr::Load { buf, .. } => Some(Ct::of(self.buf_ty(*buf))),
            Expr::Acc(a) => self.accs.get(a).map(|x| x.1),
            Expr::Unary(_, x) => self.infer(x),
            Expr::Binary(_, x, y) | Expr::Select(_, x, y) => join(self.infer(x), self.infer(y)),
            Expr::Cast(t, _) => Some(Ct::of(*t)),
            Expr::Iota(_) => None,
        }
    }

    pub(super) fn vmode_ty(&self, ct: Ct) -> Type {
        if self.vec.is_some() {
            ct.vector()
        } else {
            ct.scalar()
        }
    }

    /// `e` evaluated in its compute type, then converted to `want`.
    pub(super) fn expr(&mut self, e: &Expr, want: Ct) -> Result<Value, CodegenError> {
        let nat = self.infer(e).unwrap_or(want);
        let v = self.expr_nat(e, nat)?;
        Ok(self.convert(v, nat, want))
    }

    pub(super) fn convert(&mut self, v: Value, from: Ct, to: Ct) -> Value {
        match (from, to) {
            (Ct::F32, Ct::F64) => self.b.ins().fpromote(types::F64, v),
            (Ct::F64, Ct::F32) => self.b.ins().fdemote(types::F32, v),
            _ => v,
        }
    }

    pub(super) fn expr_nat(&mut self, e: &Expr, nat: Ct) -> Result<Value, CodegenError> {
        let ty = self.vmode_ty(nat);
        match e {
            Expr::Const(c) => Ok(self.fconst(ty, *c)),
            Expr::Load { buf, index } => Ok(self.load(*buf, index)),
            Expr::Acc(a) => {
                let (var, _) = self.acc(*a)?;
                let v = self.b.use_var(var);
                Ok(if ty.is_vector() {
                    self.b.ins().splat(ty, v)
                } else {
                    v
                })
            }
            Expr::Unary(op, x) => {
                let xv = self.expr(x, nat)?;
                self.unary(*op, xv, nat)
            }
            Expr::Binary(op, x, y) => {
                let xv = self.expr(x, nat)?;
                let yv = self.expr(y, nat)?;
                self.binary(*op, xv, yv, nat)
            }
            Expr::Cast(t, x) => {
                let inner = self.infer(x).unwrap_or(Ct::of(*t));
                let xv = self.expr(x, inner)?;
                self.cast(*t, xv, inner)
            }
            Expr::Select(c, x, y) => {
                let cv = self.expr(c, self.infer(c).unwrap_or(nat))?;
                let xv = self.expr(x, nat)?;
                let yv = self.expr(y, nat)?;
                let zero = self.fconst(ty, 0.0);
                // NotEqual is unordered-or-not-equal: a NaN condition selects `x`, as numpy.
                let mask = self.b.ins().fcmp(FloatCC::NotEqual, cv, zero);
                Ok(self.choose(mask, xv, yv, ty))
            }
            Expr::Iota(index) => Ok(self.iota(index, nat)),
        }
    }

    /// `mask ? x : y`, lane by lane in vector mode (`mask` from an `fcmp` of type `ty`).
    pub(super) fn choose(&mut self, mask: Value, x: Value, y: Value, ty: Type) -> Value {
        if ty.is_vector() {
            let m = self.bitcast(ty, mask);
            self.b.ins().bitselect(m, x, y)
        } else {
            self.b.ins().select(mask, x, y)
        }
    }

    /// The value of an affine index as a number of compute type `ct`; in vector mode each lane
    /// holds its own element's index.
    pub(super) fn iota(&mut self, index: &Index, ct: Ct) -> Value {
        let mut a = self.b.ins().iconst(types::I64, index.offset);
        for (v, s) in &index.terms {
            let x = self.b.use_var(self.vars[v]);
            let t = self.b.ins().imul_imm_s(x, *s);
            a = self.b.ins().iadd(a, t);
        }
        let x = self.b.ins().fcvt_from_sint(ct.scalar(), a);
        let Some(m) = self.vec else {
            return x;
        };
        let stride = index.stride_of(m.var);
        let vty = ct.vector();
        let lanes = self.b.ins().splat(vty, x);
        // Each lane's offset from the first, added in one vector addition (each lane rounds
        // once, as the scalar `x + d` does).
        let first = m.step * m.ct.lanes();
        let mut bytes = Vec::with_capacity(16);
        for lane in 0..ct.lanes() {
            let d = ((first + lane) * stride) as f64;
            match ct {
                Ct::F32 => bytes.extend_from_slice(&(d as f32).to_le_bytes()),
                Ct::F64 => bytes.extend_from_slice(&d.to_le_bytes()),
            }
        }
        let k = self
            .b
            .func
            .dfg
            .constants
            .insert(cranelift_codegen::ir::ConstantData::from(bytes));
        let offsets = self.b.ins().vconst(vty, k);
        self.b.ins().fadd(lanes, offsets)
    }

    pub(super) fn cast(&mut self, t: ElemType, v: Value, from: Ct) -> Result<Value, CodegenError> {
        let vector = self.vec.is_some();
        Ok(match t {
            ElemType::F32 => self.convert(v, from, Ct::F32),
            ElemType::F64 => self.convert(v, from, Ct::F64),
            ElemType::F16 => {
                let bits = match from {
                    Ct::F32 => self.f32_to_f16_bits(v),
                    Ct::F64 => self.call1(helpers::F64_TO_F16, v, types::I32)?,
                };
                self.f16_bits_to_f32(bits)
            }
            ElemType::BF16 => {
                let bits = match from {
                    Ct::F32 => self.f32_to_bf16_bits(v),
                    Ct::F64 => self.call1(helpers::F64_TO_BF16, v, types::I32)?,
                };
                self.bf16_bits_to_f32(bits)
            }
            ElemType::I32 => {
                let (ity, fty) = if vector {
                    (types::I32X4, types::F32X4)
                } else {
                    (types::I32, types::F32)
                };
                let i = self.b.ins().fcvt_to_sint_sat(ity, v);
                self.b.ins().fcvt_from_sint(fty, i)
            }
        })
    }

    pub(super) fn unary(&mut self, op: UnOp, x: Value, ct: Ct) -> Result<Value, CodegenError> {
        let ty = self.vmode_ty(ct);
        if ty.is_vector() {
            if let Some(v) = self.vector_unary(op, x, ty)? {
                return Ok(v);
            }
        }
        Ok(match op {
            UnOp::Neg => self.b.ins().fneg(x),
            UnOp::Sqrt => self.b.ins().sqrt(x),
            UnOp::Rsqrt => {
                let s = self.b.ins().sqrt(x);
                let one = self.fconst(ty, 1.0);
                self.b.ins().fdiv(one, s)
            }
            UnOp::Abs => self.b.ins().fabs(x),
            UnOp::Relu => {
                // fmax propagates NaN, as relu must.
                let zero = self.fconst(ty, 0.0);
                self.b.ins().fmax(x, zero)
            }
            UnOp::Square => self.b.ins().fmul(x, x),
            UnOp::Floor => self.b.ins().floor(x),
            UnOp::Ceil => self.b.ins().ceil(x),
            UnOp::Round => self.b.ins().nearest(x),
            _ => {
                let name = helpers::unary_helper(op, ct == Ct::F64)
                    .ok_or_else(|| bad(format!("no helper for {op:?}")))?;
                self.lanewise(name, &[x], ct)?
            }
        })
    }

    pub(super) fn binary(
        &mut self,
        op: BinOp,
        x: Value,
        y: Value,
        ct: Ct,
    ) -> Result<Value, CodegenError> {
        Ok(match op {
            BinOp::Add => self.b.ins().fadd(x, y),
            BinOp::Sub => self.b.ins().fsub(x, y),
            BinOp::Mul => self.b.ins().fmul(x, y),
            BinOp::Div => self.b.ins().fdiv(x, y),
            BinOp::Max => self.b.ins().fmax(x, y),
            BinOp::Min => self.b.ins().fmin(x, y),
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => {
                let cc = match op {
                    BinOp::Lt => FloatCC::LessThan,
                    BinOp::Le => FloatCC::LessThanOrEqual,
                    BinOp::Gt => FloatCC::GreaterThan,
                    BinOp::Ge => FloatCC::GreaterThanOrEqual,
                    BinOp::Eq => FloatCC::Equal,
                    _ => FloatCC::NotEqual,
                };
                let ty = self.vmode_ty(ct);
                let mask = self.b.ins().fcmp(cc, x, y);
                let (one, zero) = (self.fconst(ty, 1.0), self.fconst(ty, 0.0));
                self.choose(mask, one, zero, ty)
            }
            BinOp::Pow if self.vmode_ty(ct) == types::F32X4 => self.pow_f32x4(x, y)?,
            BinOp::Pow => {
                let name = if ct == Ct::F64 {
                    helpers::POW.1
                } else {
                    helpers::POW.0
                };
                self.lanewise(name, &[x, y], ct)?
            }
        })
    }

    pub(super) fn helper(
        &mut self,
        name: &'static str,
        n_args: usize,
        arg: Type,
        ret: Type,
    ) -> Result<FuncRef, CodegenError> {
        self.import(name, &vec![arg; n_args], Some(ret))
    }

    /// The function `name` the JIT module resolves (`helpers.rs`, `vmath.rs`, `transpose.rs`),
    /// declared once per generated function.
    pub(super) fn import(
        &mut self,
        name: &'static str,
        params: &[Type],
        ret: Option<Type>,
    ) -> Result<FuncRef, CodegenError> {
        if let Some(f) = self.helpers.get(name) {
            return Ok(*f);
        }
        let mut sig = self.module.make_signature();
        sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
        sig.returns.extend(ret.map(AbiParam::new));
        let id = self
            .module
            .declare_function(name, Linkage::Import, &sig)
            .map_err(|e| bad(format!("declaring helper {name}: {e}")))?;
        let f = self.module.declare_func_in_func(id, self.b.func);
        self.helpers.insert(name, f);
        Ok(f)
    }

    /// A scalar helper of one argument returning `ret`.
    pub(super) fn call1(
        &mut self,
        name: &'static str,
        x: Value,
        ret: Type,
    ) -> Result<Value, CodegenError> {
        let arg = self.b.func.dfg.value_type(x);
        let f = self.helper(name, 1, arg, ret)?;
        let call = self.b.ins().call(f, &[x]);
        Ok(self.b.inst_results(call)[0])
    }

    /// Calls a scalar helper on every lane (or once in scalar mode).
    pub(super) fn lanewise(
        &mut self,
        name: &'static str,
        args: &[Value],
        ct: Ct,
    ) -> Result<Value, CodegenError> {
        let sty = ct.scalar();
        let f = self.helper(name, args.len(), sty, sty)?;
        if self.vec.is_none() {
            let call = self.b.ins().call(f, args);
            return Ok(self.b.inst_results(call)[0]);
        }
        let mut out = args[0];
        for lane in 0..ct.lanes() as u8 {
            let xs: Vec<Value> = args
                .iter()
                .map(|a| self.b.ins().extractlane(*a, lane))
                .collect();
            let call = self.b.ins().call(f, &xs);
            let r = self.b.inst_results(call)[0];
            out = self.b.ins().insertlane(out, r, lane);
        }
        Ok(out)
    }

    /// `a·b + c`, fused when the host has FMA.
    pub(super) fn mul_add(&mut self, a: Value, b: Value, c: Value) -> Value {
        if self.opts.use_fma {
            self.b.ins().fma(a, b, c)
        } else {
            let p = self.b.ins().fmul(a, b);
            self.b.ins().fadd(p, c)
        }
    }
}
