//! Binding data to inputs: files and API tensors first, initialisers for the rest.
//!
//! Runs after checking (the checker already matched declared dtypes and extents against the
//! bindings it was told about) and before any evaluation. It validates what only data can show:
//! that a 2:4 input really has at most two nonzeros in every group of four.

use crate::check::{Format, Program};
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::dtype::DType;
use crate::init::{generate, two_four_violation};
use crate::tensor::Tensor;
use std::collections::BTreeMap;
use tdsl_sparse::SparseTensor;

/// Data bound to an input: dense values, or a sparse tensor kept compressed as it was read
/// (a scipy `.npz`, a sparse safetensors entry) so that a 1%-dense matrix costs its stored
/// entries, not its dense size. Engines that read inputs densely (the reference interpreter)
/// expand it with [`Value::to_dense`]; the compiled engines bind its arrays directly when the
/// input is declared in the same layout.
#[derive(Debug, Clone)]
pub enum Value {
    Dense(Tensor),
    Sparse(SparseTensor),
}

impl Value {
    pub fn shape(&self) -> &[usize] {
        match self {
            Value::Dense(t) => &t.shape,
            Value::Sparse(s) => &s.shape,
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            Value::Dense(t) => t.dtype(),
            Value::Sparse(s) => crate::sparse::values_dtype(&s.values),
        }
    }

    /// The dense values, when the data is dense.
    pub fn as_dense(&self) -> Option<&Tensor> {
        match self {
            Value::Dense(t) => Some(t),
            Value::Sparse(_) => None,
        }
    }

    /// The dense tensor (expanding sparse data).
    pub fn to_dense(&self) -> Result<Tensor, tdsl_sparse::SparseError> {
        match self {
            Value::Dense(t) => Ok(t.clone()),
            Value::Sparse(s) => crate::sparse::decompress(s),
        }
    }

    /// The dense tensor, moving dense data without a copy.
    pub fn into_dense(self) -> Result<Tensor, tdsl_sparse::SparseError> {
        match self {
            Value::Dense(t) => Ok(t),
            Value::Sparse(s) => crate::sparse::decompress(&s),
        }
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Value {
        Value::Dense(t)
    }
}

/// Data and where it came from (a file name, for messages).
#[derive(Debug, Clone)]
pub struct Provided {
    pub tensor: Value,
    pub source: String,
}

impl Provided {
    /// Dense data from `source`.
    pub fn dense(tensor: Tensor, source: impl Into<String>) -> Provided {
        Provided {
            tensor: Value::Dense(tensor),
            source: source.into(),
        }
    }
}

/// One dense tensor per input of `program`, in declaration order; every input must have data
/// (sparse data is expanded: see [`bind_values`] to keep it compressed).
pub fn bind_inputs(
    program: &Program,
    provided: BTreeMap<String, Provided>,
) -> Result<Vec<Tensor>, Diagnostics> {
    bind_values(program, provided)?
        .into_iter()
        .map(|v| v.into_dense())
        .collect::<Result<_, _>>()
        .map_err(|e| Diagnostic::from(e).into())
}

/// One value per input of `program`, in declaration order, sparse data kept compressed.
pub fn bind_values(
    program: &Program,
    provided: BTreeMap<String, Provided>,
) -> Result<Vec<Value>, Diagnostics> {
    let all = bind_available(program, provided, true)?;
    Ok(all.into_iter().flatten().collect())
}

/// Like [`bind_inputs`], but with `require_all` false an input with neither data nor an
/// initialiser is `None` rather than an error (`check` and `cost` need no data).
pub fn bind_available(
    program: &Program,
    mut provided: BTreeMap<String, Provided>,
    require_all: bool,
) -> Result<Vec<Option<Value>>, Diagnostics> {
    let mut out = Vec::with_capacity(program.inputs.len());
    let mut diags = Diagnostics::default();
    for input in &program.inputs {
        let (tensor, source) = match provided.remove(&input.name) {
            Some(p) => (p.tensor, Some(p.source)),
            None => match &input.init {
                Some(init) => (Value::Dense(generate(init, &input.ty)), None),
                None if !require_all => {
                    out.push(None);
                    continue;
                }
                None => {
                    diags.push(
                        Diagnostic::new(
                            Code::MissingInput,
                            format!("input `{}` has no data and no initialiser", input.name),
                        )
                        .label(input.span, "no data bound")
                        .help(format!(
                            "{}, or give it an initialiser such as `= randn(seed=0)`",
                            crate::check::Entry::Cli.bind_hint(&input.name)
                        )),
                    );
                    continue;
                }
            },
        };
        let want: Vec<usize> = input
            .ty
            .shape
            .extents()
            .iter()
            .map(|&e| e as usize)
            .collect();
        if tensor.shape() != want || tensor.dtype() != input.ty.dtype {
            // The checker compares declared and bound data; this guards API callers who bind
            // different data than they described.
            diags.push(
                Diagnostic::new(
                    Code::ShapeMismatch,
                    format!(
                        "input `{}` is declared {}{:?}, but was given {}{:?}",
                        input.name,
                        input.ty.dtype,
                        want,
                        tensor.dtype(),
                        tensor.shape()
                    ),
                )
                .label(input.span, "declared here"),
            );
            continue;
        }
        if let Format::TwoFour { slot } = input.ty.format {
            // Data stored 2:4 along the declared axis holds at most 2 per group by construction
            // (validated when read); anything else is checked on its dense values.
            let dense: Option<std::borrow::Cow<Tensor>> = match &tensor {
                Value::Dense(t) => Some(std::borrow::Cow::Borrowed(t)),
                Value::Sparse(s) if s.layout == tdsl_sparse::Layout::TwoFour { axis: slot } => None,
                Value::Sparse(s) => match crate::sparse::decompress(s) {
                    Ok(t) => Some(std::borrow::Cow::Owned(t)),
                    Err(e) => {
                        let d = Diagnostic::from(e).label(input.span, "bound here");
                        diags.push(d);
                        continue;
                    }
                },
            };
            let violation = dense
                .as_ref()
                .and_then(|t| two_four_violation(&t.to_f64(), &t.shape, slot).map(|g| (g, t)));
            if let Some((group, tensor)) = violation {
                let src = source.as_deref().unwrap_or("its data");
                let mut coords = Vec::new();
                let mut f = group[0];
                for &e in tensor.shape.iter().rev() {
                    coords.push(f % e);
                    f /= e;
                }
                coords.reverse();
                diags.push(
                    Diagnostic::new(
                        Code::FormatTwoFourData,
                        format!(
                            "input `{}` is annotated 2:4, but {} has more than 2 nonzeros in the group of 4 starting at {:?}",
                            input.name, src, coords
                        ),
                    )
                    .label(input.format_span.unwrap_or(input.span), "2:4 declared here")
                    .help("prune the data to 2 nonzeros in every 4 (keep the 2 largest magnitudes), or drop the annotation"),
                );
                continue;
            }
        }
        out.push(Some(tensor));
    }
    if diags.is_empty() {
        Ok(out)
    } else {
        Err(diags)
    }
}
