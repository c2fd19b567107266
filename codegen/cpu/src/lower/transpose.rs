//! The two innermost loops of a transposing f32 copy as one call to `tdsl_transpose_f32`
//! (`transpose.rs`): `for u { for v { d[.. + u·ld + v] = s[.. + u + v·ls] } }` moves a block
//! of `extent(v)` source rows by `extent(u)` columns through 8×8 register transposes.

use super::*;

/// A transposing copy block: the loops' variables and extents, the two buffers, their indices
/// at `u = v = 0`, and the strides `ls` (source rows, along `v`) and `ld` (destination rows,
/// along `u`).
pub(super) struct Block {
    u: (VarId, u64),
    v: (VarId, u64),
    src: (BufId, Index),
    dst: (BufId, Index),
    ls: i64,
    ld: i64,
}

impl<M: Module> Lower<'_, '_, M> {
    /// `l` as a [`Block`] when the CPU runs the register transposes (`LowerOptions::transpose`)
    /// and `l` is `for u { for v { d[…] = s[…] } }` over f32 buffers with `d` contiguous in `v`,
    /// `s` contiguous in `u`, both other strides positive and not multiples of 4 KiB, and
    /// blocks of at least 8 × 8.
    pub(super) fn transpose_block(&self, l: &Loop) -> Option<Block> {
        if !self.opts.transpose {
            return None;
        }
        let (Iter::Range { extent: eu }, [Stmt::Loop(inner)]) = (&l.iter, l.body.as_slice()) else {
            return None;
        };
        let (Iter::Range { extent: ev }, [Stmt::Store { buf, index, value }]) =
            (&inner.iter, inner.body.as_slice())
        else {
            return None;
        };
        let Expr::Load { buf: sb, index: si } = value else {
            return None;
        };
        let (u, v) = (l.var, inner.var);
        let f32s = self.buf_ty(*buf) == ElemType::F32 && self.buf_ty(*sb) == ElemType::F32;
        let (ls, ld) = (si.stride_of(v), index.stride_of(u));
        let shape = index.stride_of(v) == 1 && si.stride_of(u) == 1 && ls > 0 && ld > 0;
        // Rows a multiple of 4 KiB apart share an L1 set: there the JIT's own loops over the
        // cache tiles (8 rows of them, `tile_transpose`) measured faster (4096² transpose 6.4
        // against 9.0 ms), while split heads went from 8.2 to 3.5 ms through the call.
        let aliasing = ls % 1024 == 0 || ld % 1024 == 0;
        if !(f32s && shape && !aliasing && *eu >= 8 && *ev >= 8) {
            return None;
        }
        let without = |ix: &Index| Index {
            offset: ix.offset,
            terms: ix
                .terms
                .iter()
                .filter(|t| t.0 != u && t.0 != v)
                .copied()
                .collect(),
        };
        Some(Block {
            u: (u, *eu),
            v: (v, *ev),
            src: (*sb, without(si)),
            dst: (*buf, without(index)),
            ls,
            ld,
        })
    }

    /// `tdsl_transpose_f32(src, dst, rows = extent(v), cols = extent(u), ls, ld)`.
    pub(super) fn transpose_call(&mut self, b: &Block) -> Result<(), CodegenError> {
        let f = self.transpose_fn()?;
        let mut ptr = |buf: BufId, ix: &Index| {
            let (a, off) = self.addr(buf, ix);
            self.b.ins().iadd_imm_s(a, off as i64)
        };
        let src = ptr(b.src.0, &b.src.1);
        let dst = ptr(b.dst.0, &b.dst.1);
        let args: Vec<Value> = [b.v.1 as i64, b.u.1 as i64, b.ls, b.ld]
            .iter()
            .map(|&x| self.b.ins().iconst(types::I64, x))
            .collect();
        self.b
            .ins()
            .call(f, &[src, dst, args[0], args[1], args[2], args[3]]);
        Ok(())
    }

    /// `tdsl_transpose_f32(src, dst, rows, cols, ls, ld)`, declared once per function.
    fn transpose_fn(&mut self) -> Result<FuncRef, CodegenError> {
        self.import(crate::transpose::SYMBOL, &[types::I64; 6], None)
    }
}
