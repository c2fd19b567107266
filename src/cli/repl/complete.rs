//! Line editing: completion of functions, names, axes and commands; continuation lines.

use super::*;

/// Completion, and the multi-line rule, for rustyline.
pub(super) struct ReplHelper {
    /// Functions (completed with `(`).
    functions: Vec<String>,
    /// Tensors, sizes, axis names, keywords, dtypes, formats, initialisers, reduce ops.
    words: Vec<String>,
    /// Statement names (for `:plan`, `:time`, `:emit`).
    statements: Vec<String>,
    /// Sparse inputs (for `:sparsity`).
    sparse: Vec<String>,
    files: FilenameCompleter,
}

impl ReplHelper {
    pub(super) fn new(s: &Session) -> ReplHelper {
        let p = s.prog();
        let mut functions: Vec<String> = crate::check::UnOp::ALL
            .iter()
            .filter(|f| **f != crate::check::UnOp::Neg)
            .map(|f| f.name().to_string())
            .collect();
        functions.extend(
            [
                "max",
                "min",
                "pow",
                "cast",
                "rearrange",
                "reduce",
                "repeat",
                "einsum",
                "randn",
                "rand",
            ]
            .map(String::from),
        );
        let mut words: Vec<String> = [
            "let", "input", "output", "f32", "f64", "f16", "bf16", "csr", "csc", "coo", "bsr",
            "zeros", "ones", "arange", "sum", "mean", "prod", "seed", "density",
        ]
        .map(String::from)
        .to_vec();
        words.extend(p.inputs.iter().map(|i| i.name.clone()));
        words.extend(p.assigns.iter().map(|a| a.name.clone()));
        words.extend(p.sizes.iter().map(|z| z.name.clone()));
        words.extend(s.checker.axis_extents().map(|(n, _)| n.to_string()));
        for n in &p.nodes {
            for a in &n.ty.shape.0 {
                if let Some(name) = &a.name {
                    words.push(name.clone());
                }
            }
        }
        words.sort();
        words.dedup();
        functions.sort();
        ReplHelper {
            functions,
            words,
            statements: p.assigns.iter().map(|a| a.name.clone()).collect(),
            sparse: p
                .inputs
                .iter()
                .filter(|i| i.ty.format.is_sparse())
                .map(|i| i.name.clone())
                .collect(),
            files: FilenameCompleter::new(),
        }
    }

    pub(super) fn pairs<'a>(
        words: impl Iterator<Item = &'a String>,
        prefix: &str,
        suffix: &str,
    ) -> Vec<Pair> {
        words
            .filter(|w| w.starts_with(prefix))
            .map(|w| Pair {
                display: w.clone(),
                replacement: format!("{w}{suffix}"),
            })
            .collect()
    }
}

impl Completer for ReplHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = &line[..pos];
        let word_start = before
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let word = &before[word_start..];
        let trimmed = before.trim_start();
        if let Some(cmd_text) = trimmed.strip_prefix(':') {
            let lead = before.len() - trimmed.len();
            let parts: Vec<&str> = trimmed.split_whitespace().collect();
            let at_new_word = before.ends_with(char::is_whitespace);
            if parts.len() <= 1 && !at_new_word {
                let cmds: Vec<String> = COMMANDS.iter().map(|c| c.0.to_string()).collect();
                let prefix = format!(":{cmd_text}");
                return Ok((lead, Self::pairs(cmds.iter(), &prefix, " ")));
            }
            // Which argument is being typed (0 = the first after the command).
            let arg = if at_new_word {
                parts.len() - 1
            } else {
                parts.len() - 2
            };
            let strs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
            let cands: Vec<String> = match (parts[0], arg) {
                (":load" | ":save" | ":plot", _) | (":sparsity", 1) => {
                    return self.files.complete(line, pos, ctx)
                }
                (":sparsity", 0) => self.sparse.clone(),
                (":plan" | ":time", 0) | (":emit", 1) => self.statements.clone(),
                (":emit", 0) => strs(&["clif", "cuda"]),
                (":device", 0) => strs(&["cpu", "cuda"]),
                (":set", 0) => strs(&["threads", "backend", "runs", "dtype", "params", "tf32"]),
                (":set", 1) => match parts.get(1).copied() {
                    Some("backend") => strs(&["jit", "interp", "eval", "cuda"]),
                    Some("dtype") => strs(&["f32", "f64", "f16", "bf16"]),
                    Some("tf32") => strs(&["on", "off"]),
                    Some("params") => {
                        let mut v = strs(&["auto", "all"]);
                        v.extend(self.words.iter().cloned());
                        v
                    }
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            };
            return Ok((word_start, Self::pairs(cands.iter(), word, " ")));
        }
        let mut out = Self::pairs(self.functions.iter(), word, "(");
        out.extend(Self::pairs(self.words.iter(), word, ""));
        out.sort_by(|a, b| a.display.cmp(&b.display));
        out.dedup_by(|a, b| a.display == b.display);
        Ok((word_start, out))
    }
}

impl Hinter for ReplHelper {
    type Hint = String;
}

impl Highlighter for ReplHelper {}

impl Validator for ReplHelper {
    fn validate(&self, ctx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        Ok(if incomplete(ctx.input()) {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}

impl Helper for ReplHelper {}
