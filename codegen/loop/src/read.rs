//! The reader of the loop IR's text form: [`read_program`] turns what
//! [`print_program`](crate::print::print_program) writes back into a [`LoopProgram`], so
//! planner and backend tests can be written as text files (tests/loop/, spec/loop-ir.md §5).
//!
//! It reads exactly the printed grammar, plus what a person writing a test by hand expects:
//! indentation is free (braces give the structure), blank lines and lines starting with `;`
//! are comments, index coefficients of 1 may be left out in views, and `neg(x)` reads like
//! `-x`. Every error is a [`ReadError`] with a line and column; no input panics or recurses
//! without bound (expressions nest at most [`MAX_DEPTH`] deep).
//!
//! The printer's one ambiguity reads one way: `aN = max(aN, e)` is a max update and `aN =
//! min(aN, e)` a min update (a set of `max(aN, e)` computes the same value). Kernels read back
//! have no `source`. Only [`print_program`](crate::print::print_program)'s text reads back:
//! `print_kernel` lists only the buffers its kernel touches, so its buffer ids have gaps.

use crate::ir::{
    AccId, AccOp, BinOp, BufId, Buffer, ElemType, Expr, GpuAxis, Index, Iter, Kernel, LibCall,
    Loop, LoopProgram, MatView, Part, Role, Select, Side, SparseLayout, SparseOperand, Stmt, UnOp,
    VarId,
};
use std::fmt;

/// How deeply expressions and loops may nest in text that is read.
pub const MAX_DEPTH: usize = 200;

/// How many infix operations one line may chain (`a + b + …`): a chain is as deep a tree as it
/// is long, and dropping or printing a tree recurses once per level.
pub const MAX_CHAIN: usize = 4096;

/// Why a text is not a loop program: where (1-based line and column, in characters) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

impl std::error::Error for ReadError {}

type Result<T> = std::result::Result<T, ReadError>;

/// Reads a whole program in the form [`print_program`](crate::print::print_program) writes.
///
/// ```
/// use tdsl_loop::{print::print_program, read::read_program};
/// let text = "buffers:\n  %0 y: f32[4] output 0\nkernel k0 (y = 1):\n  for v0 in 0..4 vector 4 {\n    %0[v0] = 1\n  }\n";
/// assert_eq!(print_program(&read_program(text).unwrap()), text);
/// ```
pub fn read_program(text: &str) -> Result<LoopProgram> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with(';')
        })
        .peekable();
    let mut program = LoopProgram::default();
    match lines.next() {
        Some((_, l)) if l.trim() == "buffers:" => {}
        Some((n, l)) => return Err(at(n, l, 0, "expected `buffers:`")),
        None => return Err(at(1, "", 0, "expected `buffers:`, found an empty text")),
    }
    while let Some(&(n, l)) = lines.peek() {
        if l.trim_start().starts_with("kernel") {
            break;
        }
        lines.next();
        let mut c = Cur::new(n, l);
        program.buffers.push(c.buffer(program.buffers.len())?);
    }
    while let Some((n, l)) = lines.next() {
        let (name, origin) = Cur::new(n, l).kernel_header()?;
        // The kernel's body, then each open loop with the statements read so far and the line
        // that opened it.
        let mut body = Vec::new();
        let mut open: Vec<(Loop, Vec<Stmt>, usize, &str)> = Vec::new();
        while let Some(&(n, l)) = lines.peek() {
            if open.is_empty() && l.trim_start().starts_with("kernel") {
                break;
            }
            lines.next();
            let mut c = Cur::new(n, l);
            let stmt = if c.rest().trim() == "}" {
                let Some((mut lp, inner, _, _)) = open.pop() else {
                    return Err(c.error("`}` closes no loop"));
                };
                lp.body = inner;
                Stmt::Loop(lp)
            } else if c.rest().starts_with("for ") {
                if open.len() >= MAX_DEPTH {
                    return Err(c.error("loops nest too deeply"));
                }
                open.push((c.loop_header()?, Vec::new(), n, l));
                continue;
            } else {
                c.statement()?
            };
            match open.last_mut() {
                Some((_, inner, _, _)) => inner.push(stmt),
                None => body.push(stmt),
            }
        }
        if let Some((_, _, n, l)) = open.last() {
            let indent = l.len() - l.trim_start().len();
            return Err(at(*n, l, indent, "this loop is never closed (`}`)"));
        }
        program.kernels.push(Kernel {
            name,
            origin,
            source: None,
            body,
        });
    }
    Ok(program)
}

fn at(line: usize, text: &str, byte: usize, message: &str) -> ReadError {
    ReadError {
        line,
        col: text.get(..byte).map_or(1, |t| t.chars().count() + 1),
        message: message.to_string(),
    }
}

/// A cursor over one line.
struct Cur<'a> {
    line: usize,
    text: &'a str,
    pos: usize,
    depth: usize,
    /// Infix operations read on this line.
    chain: usize,
}

impl<'a> Cur<'a> {
    fn new(line: usize, text: &'a str) -> Cur<'a> {
        let pos = text.len() - text.trim_start().len();
        Cur {
            line,
            text,
            pos,
            depth: 0,
            chain: 0,
        }
    }

    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    fn error(&self, message: &str) -> ReadError {
        at(self.line, self.text, self.pos, message)
    }

    fn expected(&self, what: &str) -> ReadError {
        let found = match self.rest().split(' ').next() {
            Some(t) if !t.is_empty() => format!("`{t}`"),
            _ => "the end of the line".to_string(),
        };
        self.error(&format!("expected {what}, found {found}"))
    }

    fn eat(&mut self, s: &str) -> bool {
        if self.rest().starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, s: &str) -> Result<()> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{}`", s.trim())))
        }
    }

    fn ws(&mut self) {
        let r = self.rest();
        self.pos += r.len() - r.trim_start().len();
    }

    fn end(&mut self) -> Result<()> {
        self.ws();
        if self.rest().is_empty() {
            Ok(())
        } else {
            Err(self.expected("the end of the line"))
        }
    }

    fn word(&mut self) -> &'a str {
        let r = self.rest();
        let n = r
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(r.len());
        self.pos += n;
        &r[..n]
    }

    fn digits(&mut self) -> &'a str {
        let r = self.rest();
        let n = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
        self.pos += n;
        &r[..n]
    }

    fn uint(&mut self, what: &str) -> Result<u64> {
        let start = self.pos;
        let d = self.digits();
        if d.is_empty() {
            self.pos = start;
            return Err(self.expected(what));
        }
        d.parse().map_err(|_| {
            self.pos = start;
            self.error(&format!("{what} {d} is too large"))
        })
    }

    /// An unsigned number that fits `T`.
    fn int<T: TryFrom<u64>>(&mut self, what: &str) -> Result<T> {
        let start = self.pos;
        let v = self.uint(what)?;
        T::try_from(v).map_err(|_| {
            self.pos = start;
            self.error(&format!("{what} {v} is too large"))
        })
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        self.int(what)
    }

    fn usize(&mut self, what: &str) -> Result<usize> {
        self.int(what)
    }

    fn key_uint(&mut self, key: &str) -> Result<u64> {
        self.expect(key)?;
        self.uint(&format!("a number after `{key}`"))
    }

    fn bool_(&mut self) -> Result<bool> {
        if self.eat("true") {
            Ok(true)
        } else if self.eat("false") {
            Ok(false)
        } else {
            Err(self.expected("`true` or `false`"))
        }
    }

    /// A name: a plain identifier or a quoted, escaped string.
    fn name(&mut self) -> Result<String> {
        if self.eat("\"") {
            let mut out = String::new();
            loop {
                let Some(c) = self.rest().chars().next() else {
                    return Err(self.error("unterminated quoted name"));
                };
                self.pos += c.len_utf8();
                match c {
                    '"' => return Ok(out),
                    '\\' => out.push(self.escape()?),
                    c => out.push(c),
                }
            }
        }
        let w = self.word();
        if w.is_empty() || w.starts_with(|c: char| c.is_ascii_digit()) {
            self.pos -= w.len();
            return Err(self.expected("a name"));
        }
        Ok(w.to_string())
    }

    /// The character after a `\`.
    fn escape(&mut self) -> Result<char> {
        let Some(c) = self.rest().chars().next() else {
            return Err(self.error("a `\\` ends the line"));
        };
        self.pos += c.len_utf8();
        Ok(match c {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            '\\' | '"' => c,
            'u' => {
                self.expect("{")?;
                let r = self.rest();
                let n = r
                    .find('}')
                    .ok_or_else(|| self.error("unterminated `\\u{`"))?;
                let c = u32::from_str_radix(&r[..n], 16)
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or_else(|| self.error("not a character code"))?;
                self.pos += n + 1;
                c
            }
            _ => return Err(self.error(&format!("unknown escape `\\{c}`"))),
        })
    }

    /// `%ID NAME: TYPE[ELEMS] ROLE`, whose id must be `id`.
    fn buffer(&mut self, id: usize) -> Result<Buffer> {
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

    fn elem_type(&mut self) -> Result<ElemType> {
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
    fn kernel_header(&mut self) -> Result<(String, String)> {
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
    fn loop_header(&mut self) -> Result<Loop> {
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

    fn gpu_axis(&mut self) -> Result<GpuAxis> {
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

    fn var(&mut self) -> Result<VarId> {
        self.expect("v")?;
        Ok(VarId(self.u32("a variable number")?))
    }

    fn buf(&mut self) -> Result<BufId> {
        self.expect("%")?;
        Ok(BufId(self.u32("a buffer id")?))
    }

    /// `%B[INDEX]`.
    fn buf_index(&mut self) -> Result<(BufId, Index)> {
        let b = self.buf()?;
        self.expect("[")?;
        let index = self.index()?;
        self.expect("]")?;
        Ok((b, index))
    }

    fn iter(&mut self) -> Result<Iter> {
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
    fn affine<T>(
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

    fn index(&mut self) -> Result<Index> {
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
    fn view(&mut self, batch: usize) -> Result<MatView> {
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
    fn sparse(&mut self) -> Result<SparseOperand> {
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

    /// `a, b, …]` after an opening `[` (an empty list is `]`).
    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> Result<T>) -> Result<Vec<T>> {
        let mut out = Vec::new();
        if self.eat("]") {
            return Ok(out);
        }
        loop {
            out.push(item(self)?);
            if self.eat("]") {
                return Ok(out);
            }
            self.expect(", ")?;
        }
    }

    fn statement(&mut self) -> Result<Stmt> {
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
    fn update(&mut self) -> Result<Stmt> {
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

    fn gemm(&mut self) -> Result<Stmt> {
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

    fn spmm(&mut self) -> Result<Stmt> {
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

    /// A constant: digits with an optional fraction and exponent, `inf` or `nan`.
    fn number(&mut self) -> Result<f64> {
        let negative = self.eat("-");
        let sign = if negative { -1.0 } else { 1.0 };
        if self.eat("inf") {
            return Ok(sign * f64::INFINITY);
        }
        if self.eat("nan") {
            return Ok(f64::NAN);
        }
        let r = self.rest();
        let mut n = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
        if n == 0 {
            return Err(self.expected("a number"));
        }
        if r[n..].starts_with('.') {
            n += 1;
            n += r[n..]
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(r.len() - n);
        }
        if r[n..].starts_with(['e', 'E']) {
            let mut e = n + 1;
            if r[e..].starts_with(['+', '-']) {
                e += 1;
            }
            let d = r[e..]
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(r.len() - e);
            if d > 0 {
                n = e + d;
            }
        }
        let x: f64 = r[..n].parse().map_err(|_| self.error("not a number"))?;
        self.pos += n;
        Ok(sign * x)
    }

    fn expr(&mut self) -> Result<Expr> {
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
    fn chained(&mut self) -> Result<()> {
        self.chain += 1;
        if self.chain > MAX_CHAIN {
            return Err(self.error(&format!("more than {MAX_CHAIN} operations on one line")));
        }
        Ok(())
    }

    fn term(&mut self) -> Result<Expr> {
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

    fn unary(&mut self) -> Result<Expr> {
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

    fn atom(&mut self) -> Result<Expr> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::tests::fixtures;
    use crate::print::print_program;
    use proptest::prelude::*;

    #[test]
    fn every_fixture_reads_back_to_itself() {
        for p in fixtures() {
            let text = print_program(&p);
            let back = read_program(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            let mut expect = p.clone();
            expect.kernels.iter_mut().for_each(|k| k.source = None);
            assert_eq!(format!("{back:?}"), format!("{expect:?}"), "{text}");
        }
    }

    #[test]
    fn expressions_read_with_the_printer_precedence() {
        for text in [
            "a0 - (a1 - a2)",
            "(a0 + a1) * a2",
            "-(a0 * a1)",
            "a0 * -a1",
            "-(2)",
            "-2 * a0",
            "-(-2)",
            "a0 - -2",
            "max(a0, exp(-inf))",
            "select(lt(a0, 0.5), cast<f16>(a1), iota[2*v0 - v1 - 3])",
            "1e-7 + 1e16 + nan + -0",
        ] {
            let line = format!("%0[v0] = {text}");
            let s = Cur::new(1, &line).statement().unwrap();
            let Stmt::Store { value, .. } = s else {
                panic!()
            };
            assert_eq!(crate::print::expr_text(&value), text);
        }
    }

    #[test]
    fn errors_name_the_line_and_column() {
        let err = |t: &str| read_program(t).unwrap_err().to_string();
        assert_eq!(err(""), "1:1: expected `buffers:`, found an empty text");
        assert_eq!(
            err("buffers:\n  %1 x: f32[4] input 0\n"),
            "2:3: buffers are listed in order: expected %0"
        );
        assert_eq!(
            err("buffers:\n  %0 x: f33[4] input 0\n"),
            "2:9: expected a type (f32, f64, f16, bf16, i32), found `f33[4]`"
        );
        assert_eq!(
            err("buffers:\nkernel k:\n  %0[v0] = foo(1)\n"),
            "3:12: unknown operation `foo`"
        );
        assert_eq!(
            err("buffers:\nkernel k:\n  for v0 in 0..4 {\n"),
            "3:3: this loop is never closed (`}`)"
        );
        assert_eq!(err("buffers:\nkernel k:\n}\n"), "3:1: `}` closes no loop");
        assert_eq!(
            err("buffers:\nkernel k:\n  %0[v4294967296] = 1\n"),
            "3:6: expected an index term, found `v4294967296]`"
        );
        assert_eq!(
            err("buffers:\nkernel k:\n  %0[99999999999999999999*v0] = 1\n"),
            "3:6: an index term 99999999999999999999 is too large"
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = format!(
            "buffers:\nkernel k:\n  %0[0] = {}1{}\n",
            "(".repeat(100_000),
            ")".repeat(100_000)
        );
        assert!(read_program(&deep)
            .unwrap_err()
            .message
            .contains("too deeply"));
        let neg = format!("buffers:\nkernel k:\n  %0[0] = {}a0\n", "-".repeat(100_000));
        assert!(read_program(&neg)
            .unwrap_err()
            .message
            .contains("too deeply"));
        let loops = format!("buffers:\nkernel k:\n{}", "for v0 in 0..1 {\n".repeat(1000));
        assert!(read_program(&loops)
            .unwrap_err()
            .message
            .contains("too deeply"));
        // A flat chain builds a tree as deep as it is long.
        let chain = format!(
            "buffers:\nkernel k:\n  %0[0] = {}a0 x\n",
            "a0 + ".repeat(200_000)
        );
        let e = read_program(&chain).unwrap_err();
        assert!(e.message.contains("operations on one line"), "{e}");
        let ok = format!(
            "buffers:\nkernel k:\n  %0[0] = {}a0\n",
            "a0 * ".repeat(MAX_CHAIN)
        );
        assert!(read_program(&ok).is_ok());
    }

    proptest! {
        #[test]
        fn no_text_panics(text in "\\PC{0,200}") {
            let _ = read_program(&format!("buffers:\nkernel k:\n{text}"));
        }

        #[test]
        fn no_edit_of_a_printed_program_panics(
            which in 0usize..8,
            at in any::<prop::sample::Index>(),
            insert in "[ -~]{0,6}",
            cut in 0usize..6,
        ) {
            let programs = fixtures();
            let text = print_program(&programs[which % programs.len()]);
            let mut i = at.index(text.len() + 1);
            while !text.is_char_boundary(i) { i -= 1; }
            let mut j = (i + cut).min(text.len());
            while !text.is_char_boundary(j) { j -= 1; }
            let edited = format!("{}{insert}{}", &text[..i], &text[j..]);
            if let Ok(p) = read_program(&edited) {
                // Whatever reads prints back to text that reads to the same program.
                let again = read_program(&print_program(&p)).unwrap();
                prop_assert_eq!(format!("{again:?}"), format!("{p:?}"));
            }
        }
    }
}
