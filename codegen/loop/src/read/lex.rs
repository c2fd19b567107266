//! The cursor's token-level reading: words, numbers, names, escapes, lists.

use super::{at, Cur, ReadError, Result};

impl<'a> Cur<'a> {
    pub(super) fn new(line: usize, text: &'a str) -> Cur<'a> {
        let pos = text.len() - text.trim_start().len();
        Cur {
            line,
            text,
            pos,
            depth: 0,
            chain: 0,
        }
    }

    pub(super) fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    pub(super) fn error(&self, message: &str) -> ReadError {
        at(self.line, self.text, self.pos, message)
    }

    pub(super) fn expected(&self, what: &str) -> ReadError {
        let found = match self.rest().split(' ').next() {
            Some(t) if !t.is_empty() => format!("`{t}`"),
            _ => "the end of the line".to_string(),
        };
        self.error(&format!("expected {what}, found {found}"))
    }

    pub(super) fn eat(&mut self, s: &str) -> bool {
        if self.rest().starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    pub(super) fn expect(&mut self, s: &str) -> Result<()> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{}`", s.trim())))
        }
    }

    pub(super) fn ws(&mut self) {
        let r = self.rest();
        self.pos += r.len() - r.trim_start().len();
    }

    pub(super) fn end(&mut self) -> Result<()> {
        self.ws();
        if self.rest().is_empty() {
            Ok(())
        } else {
            Err(self.expected("the end of the line"))
        }
    }

    pub(super) fn word(&mut self) -> &'a str {
        let r = self.rest();
        let n = r
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(r.len());
        self.pos += n;
        &r[..n]
    }

    pub(super) fn digits(&mut self) -> &'a str {
        let r = self.rest();
        let n = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
        self.pos += n;
        &r[..n]
    }

    pub(super) fn uint(&mut self, what: &str) -> Result<u64> {
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
    pub(super) fn int<T: TryFrom<u64>>(&mut self, what: &str) -> Result<T> {
        let start = self.pos;
        let v = self.uint(what)?;
        T::try_from(v).map_err(|_| {
            self.pos = start;
            self.error(&format!("{what} {v} is too large"))
        })
    }

    pub(super) fn u32(&mut self, what: &str) -> Result<u32> {
        self.int(what)
    }

    pub(super) fn usize(&mut self, what: &str) -> Result<usize> {
        self.int(what)
    }

    pub(super) fn key_uint(&mut self, key: &str) -> Result<u64> {
        self.expect(key)?;
        self.uint(&format!("a number after `{key}`"))
    }

    pub(super) fn bool_(&mut self) -> Result<bool> {
        if self.eat("true") {
            Ok(true)
        } else if self.eat("false") {
            Ok(false)
        } else {
            Err(self.expected("`true` or `false`"))
        }
    }

    /// A name: a plain identifier or a quoted, escaped string.
    pub(super) fn name(&mut self) -> Result<String> {
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
    pub(super) fn escape(&mut self) -> Result<char> {
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

    /// `a, b, …]` after an opening `[` (an empty list is `]`).
    pub(super) fn list<T>(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Vec<T>> {
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

    /// A constant: digits with an optional fraction and exponent, `inf` or `nan`.
    pub(super) fn number(&mut self) -> Result<f64> {
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
}
