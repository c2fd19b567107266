//! Support for the `tdsl-macros` expansions; not a stable API.

pub use super::AsInput;
use super::{Program, TensorArg};
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::dtype::DType;
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::{Mutex, OnceLock, PoisonError};

/// Which operation a macro call site runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Einsum,
    Rearrange,
    Reduce(&'static str),
    Repeat,
}

/// An axis length given to a macro: any integer; negative ones are reported at run time.
pub trait AxisLen {
    fn axis_len(self) -> Option<u64>;
}

macro_rules! axis_len {
    ($($t:ty),*) => {$(
        impl AxisLen for $t {
            fn axis_len(self) -> Option<u64> {
                u64::try_from(self).ok()
            }
        }
    )*};
}
axis_len!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

pub fn axis_len<T: AxisLen>(v: T) -> Option<u64> {
    v.axis_len()
}

type Key = (Vec<(DType, Vec<usize>)>, Vec<u64>);

/// One macro call site: its pattern, and a program per operand signature.
pub struct CallSite {
    op: Op,
    pattern: &'static str,
    macro_name: &'static str,
    location: (&'static str, u32, u32),
    programs: OnceLock<Mutex<HashMap<Key, (Program, usize)>>>,
}

impl CallSite {
    pub const fn new(
        op: Op,
        pattern: &'static str,
        macro_name: &'static str,
        file: &'static str,
        line: u32,
        column: u32,
    ) -> CallSite {
        CallSite {
            op,
            pattern,
            macro_name,
            location: (file, line, column),
            programs: OnceLock::new(),
        }
    }

    /// Runs the call: the program for these operand shapes is built (and its kernels
    /// compiled) on the first call with them and reused afterwards.
    pub fn call(
        &self,
        operands: Vec<TensorArg<'_>>,
        lengths: &[(&'static str, Option<u64>)],
    ) -> Result<Tensor, Diagnostics> {
        let mut values = Vec::with_capacity(lengths.len());
        for &(name, v) in lengths {
            match v {
                Some(v) => values.push(v),
                None => {
                    return Err(self
                        .locate(
                            Diagnostic::new(
                                Code::PatternBadKwarg,
                                format!("axis length `{name}` is negative or too large"),
                            )
                            .help("axis lengths are positive integers"),
                            None,
                        )
                        .into())
                }
            }
        }
        let key: Key = (
            operands
                .iter()
                .map(|t| (t.dtype(), t.shape().to_vec()))
                .collect(),
            values,
        );
        let programs = self.programs.get_or_init(|| Mutex::new(HashMap::new()));
        let cached = programs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        let (program, pattern_at) = match cached {
            Some(p) => p,
            None => {
                let (script, at) = self.script(&key, lengths);
                let p = Program::compile(&script).map_err(|d| self.remap(d, at))?;
                programs
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(key)
                    .or_insert((p, at))
                    .clone()
            }
        };
        let names = self.operand_names(operands.len());
        let args = names.into_iter().zip(operands).collect::<Vec<_>>();
        let mut out = program
            .run_args(args, super::Engine::Jit)
            .map_err(|d| self.remap(d, pattern_at))?;
        out.remove("y").ok_or_else(|| {
            self.remap(
                Diagnostic::new(Code::Internal, "the macro's program has no output `y`").into(),
                pattern_at,
            )
        })
    }

    fn operand_names(&self, n: usize) -> Vec<String> {
        match self.op {
            Op::Einsum => (1..=n).map(|i| format!("x{i}")).collect(),
            _ => vec!["x".to_string()],
        }
    }

    /// The one-statement script for these operands, and where the pattern starts in it.
    fn script(&self, key: &Key, lengths: &[(&'static str, Option<u64>)]) -> (String, usize) {
        let names = self.operand_names(key.0.len());
        let mut s = String::new();
        for (name, (dtype, shape)) in names.iter().zip(&key.0) {
            let extents: Vec<String> = shape.iter().map(|e| e.to_string()).collect();
            let _ = writeln!(s, "input {name}: {dtype}[{}]", extents.join(", "));
        }
        let func = match self.op {
            Op::Einsum => "einsum",
            Op::Rearrange => "rearrange",
            Op::Reduce(_) => "reduce",
            Op::Repeat => "repeat",
        };
        let _ = write!(s, "y = {func}(");
        let at;
        if self.op == Op::Einsum {
            for name in &names {
                let _ = write!(s, "{name}, ");
            }
            s.push('"');
            at = s.len();
            let _ = write!(s, "{}\"", self.pattern);
        } else {
            s.push_str("x, \"");
            at = s.len();
            let _ = write!(s, "{}\"", self.pattern);
            if let Op::Reduce(op) = self.op {
                let _ = write!(s, ", \"{op}\"");
            }
        }
        for (&(name, _), v) in lengths.iter().zip(&key.1) {
            let _ = write!(s, ", {name}={v}");
        }
        s.push_str(")\noutput y\n");
        (s, at)
    }

    /// Diagnostics of the generated script, pointed at the pattern and the call site:
    /// labels inside the pattern become byte ranges of the pattern string; others go.
    fn remap(&self, d: Diagnostics, pattern_at: usize) -> Diagnostics {
        Diagnostics(
            d.0.into_iter()
                .map(|d| self.locate(d, Some(pattern_at)))
                .collect(),
            None,
        )
        .with_source(&format!("{} pattern", self.macro_name), self.pattern)
    }

    fn locate(&self, mut d: Diagnostic, pattern_at: Option<usize>) -> Diagnostic {
        let (lo, hi) = match pattern_at {
            Some(at) => (at as u32, (at + self.pattern.len()) as u32),
            None => (1, 0),
        };
        d.labels.retain(|l| lo <= l.span.start && l.span.end <= hi);
        for l in &mut d.labels {
            l.span.start -= lo;
            l.span.end -= lo;
        }
        let (file, line, column) = self.location;
        d.message = format!(
            "{} (in `{}` at {file}:{line}:{column}, pattern \"{}\")",
            d.message, self.macro_name, self.pattern
        );
        d
    }
}
