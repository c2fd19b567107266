//! Expressions, with the printer's precedence.

use super::{Cur, Result, MAX_CHAIN, MAX_DEPTH};
use crate::ir::{AccId, BinOp, Expr, UnOp};

impl Cur<'_> {
    pub(super) fn expr(&mut self) -> Result<Expr> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error("the expression nests too deeply"));
        }
        let mut e = self.term()?;
        loop {
            let op = if self.eat(" + ") {
                BinOp::Add
            } else if self.eat(" - ") {
                BinOp::Sub
            } else {
                break;
            };
            self.chained()?;
            e = Expr::Binary(op, Box::new(e), Box::new(self.term()?));
        }
        self.depth -= 1;
        Ok(e)
    }

    /// Counts one more infix operation on the line.
    pub(super) fn chained(&mut self) -> Result<()> {
        self.chain += 1;
        if self.chain > MAX_CHAIN {
            return Err(self.error(&format!("more than {MAX_CHAIN} operations on one line")));
        }
        Ok(())
    }

    pub(super) fn term(&mut self) -> Result<Expr> {
        let mut e = self.unary()?;
        loop {
            let op = if self.eat(" * ") {
                BinOp::Mul
            } else if self.eat(" / ") {
                BinOp::Div
            } else {
                break;
            };
            self.chained()?;
            e = Expr::Binary(op, Box::new(e), Box::new(self.unary()?));
        }
        Ok(e)
    }

    pub(super) fn unary(&mut self) -> Result<Expr> {
        if self.rest().starts_with('-') {
            let after = &self.rest()[1..];
            if after.starts_with(|c: char| c.is_ascii_digit()) || after.starts_with("inf") {
                return Ok(Expr::Const(self.number()?));
            }
            self.pos += 1;
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return Err(self.error("the expression nests too deeply"));
            }
            let x = self.unary()?;
            self.depth -= 1;
            return Ok(Expr::Unary(UnOp::Neg, Box::new(x)));
        }
        self.atom()
    }

    pub(super) fn atom(&mut self) -> Result<Expr> {
        let r = self.rest();
        if r.starts_with(|c: char| c.is_ascii_digit())
            || r.starts_with("inf")
            || r.starts_with("nan")
        {
            return Ok(Expr::Const(self.number()?));
        }
        if r.starts_with('%') {
            let (buf, index) = self.buf_index()?;
            return Ok(Expr::Load { buf, index });
        }
        if self.eat("(") {
            let e = self.expr()?;
            self.expect(")")?;
            return Ok(e);
        }
        if r.starts_with('a') && r[1..].starts_with(|c: char| c.is_ascii_digit()) {
            self.pos += 1;
            return Ok(Expr::Acc(AccId(self.u32("an accumulator number")?)));
        }
        if self.eat("iota[") {
            let index = self.index()?;
            self.expect("]")?;
            return Ok(Expr::Iota(index));
        }
        if self.eat("cast<") {
            let ty = self.elem_type()?;
            self.expect(">(")?;
            let x = self.expr()?;
            self.expect(")")?;
            return Ok(Expr::Cast(ty, Box::new(x)));
        }
        let start = self.pos;
        let f = self.word();
        if !self.eat("(") {
            self.pos = start;
            return Err(self.expected("an expression"));
        }
        let e = if let Some(op) = UnOp::from_name(f) {
            Expr::Unary(op, Box::new(self.expr()?))
        } else if let Some(op) = binary_op(f) {
            let a = self.expr()?;
            self.expect(", ")?;
            Expr::Binary(op, Box::new(a), Box::new(self.expr()?))
        } else if f == "select" {
            let c = self.expr()?;
            self.expect(", ")?;
            let a = self.expr()?;
            self.expect(", ")?;
            Expr::Select(Box::new(c), Box::new(a), Box::new(self.expr()?))
        } else {
            self.pos = start;
            return Err(self.error(&format!("unknown operation `{f}`")));
        };
        self.expect(")")?;
        Ok(e)
    }
}

fn binary_op(name: &str) -> Option<BinOp> {
    use BinOp::*;
    [Max, Min, Pow, Lt, Le, Gt, Ge, Eq, Ne]
        .into_iter()
        .find(|op| crate::print::binary_name(*op) == Some(name))
}
