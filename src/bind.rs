//! Binding data to inputs: files and API tensors first, initialisers for the rest.
//!
//! Runs after checking (the checker already matched declared dtypes and extents against the
//! bindings it was told about) and before any evaluation. It validates what only data can show:
//! that a 2:4 input really has at most two nonzeros in every group of four.

use crate::check::{Format, Program};
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::init::{generate, two_four_violation};
use crate::tensor::Tensor;
use std::collections::BTreeMap;

/// A tensor and where it came from (a file name, for messages).
#[derive(Debug, Clone)]
pub struct Provided {
    pub tensor: Tensor,
    pub source: String,
}

/// One tensor per input of `program`, in declaration order; every input must have data.
pub fn bind_inputs(
    program: &Program,
    provided: BTreeMap<String, Provided>,
) -> Result<Vec<Tensor>, Diagnostics> {
    let all = bind_available(program, provided, true)?;
    Ok(all.into_iter().flatten().collect())
}

/// Like [`bind_inputs`], but with `require_all` false an input with neither data nor an
/// initialiser is `None` rather than an error (`check` and `cost` need no data).
pub fn bind_available(
    program: &Program,
    mut provided: BTreeMap<String, Provided>,
    require_all: bool,
) -> Result<Vec<Option<Tensor>>, Diagnostics> {
    let mut out = Vec::with_capacity(program.inputs.len());
    let mut diags = Diagnostics::default();
    for input in &program.inputs {
        let (tensor, source) = match provided.remove(&input.name) {
            Some(p) => (p.tensor, Some(p.source)),
            None => match &input.init {
                Some(init) => (generate(init, &input.ty), None),
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
                            "pass `--input {}=FILE.npy`, or give it an initialiser such as `= randn(seed=0)`",
                            input.name
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
        if tensor.shape != want || tensor.dtype() != input.ty.dtype {
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
                        tensor.shape
                    ),
                )
                .label(input.span, "declared here"),
            );
            continue;
        }
        if let Format::TwoFour { slot } = input.ty.format {
            if let Some(group) = two_four_violation(&tensor.to_f64(), &tensor.shape, slot) {
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
