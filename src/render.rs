//! Renders diagnostics for people: miette's graphical report with the script's source, the
//! stable code, labelled spans and the help line. The CLI and the REPL render every diagnostic
//! here; the Rust API's errors ([`crate::Diagnostics`] with their source attached) render the
//! same way through `Display` and `Debug`. Diagnostics themselves stay plain data.

use crate::diag::Diagnostic;
use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource, SourceCode};
use std::fmt;
use tdsl_syntax::line_col;

/// A diagnostic joined with its source text, as miette wants it.
struct Report<'a> {
    diag: &'a Diagnostic,
    source: NamedSource<String>,
    headline: String,
}

impl fmt::Debug for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.headline)
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.headline)
    }
}

impl std::error::Error for Report<'_> {}

impl miette::Diagnostic for Report<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        Some(Box::new(self.diag.code.as_str()))
    }

    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.diag
            .help
            .as_ref()
            .map(|h| Box::new(h.as_str()) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        if self.diag.labels.is_empty() {
            None
        } else {
            Some(&self.source)
        }
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if self.diag.labels.is_empty() {
            return None;
        }
        Some(Box::new(self.diag.labels.iter().enumerate().map(
            |(i, l)| {
                let span = (l.span.start as usize, l.span.len());
                if i == 0 {
                    LabeledSpan::new_primary_with_span(Some(l.text.clone()), span)
                } else {
                    LabeledSpan::new_with_span(Some(l.text.clone()), span)
                }
            },
        )))
    }
}

/// Whether to colour the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Color {
    Always,
    Never,
}

/// The headline of a diagnostic: `script.tdsl:3:12: message`, so the position and the offending
/// text are on the first line even when the snippet is cut.
pub fn headline(diag: &Diagnostic, name: &str, text: &str) -> String {
    match diag.span() {
        Some(span) => {
            let (line, col) = line_col(text, span.start as usize);
            let snippet: String = text
                .get(span.range())
                .unwrap_or("")
                .chars()
                .take(40)
                .collect();
            let snippet = snippet.lines().next().unwrap_or("").to_string();
            if snippet.trim().is_empty() {
                format!("{name}:{line}:{col}: {}", diag.message)
            } else {
                format!("{name}:{line}:{col}: {} (at `{snippet}`)", diag.message)
            }
        }
        None => diag.message.clone(),
    }
}

/// Renders one diagnostic against the script `text` called `name`.
pub fn render(diag: &Diagnostic, name: &str, text: &str, color: Color) -> String {
    let report = Report {
        diag,
        source: NamedSource::new(name, text.to_string()),
        headline: headline(diag, name, text),
    };
    let theme = match color {
        Color::Always => GraphicalTheme::unicode(),
        Color::Never => GraphicalTheme::unicode_nocolor(),
    };
    let handler = GraphicalReportHandler::new_themed(theme).with_width(100);
    let mut out = String::new();
    if handler.render_report(&mut out, &report).is_err() {
        out = format!("error[{}]: {}\n", diag.code, report.headline);
    }
    out
}

/// Renders diagnostics as JSON lines for tools: code, message, file, line, column, help.
pub fn render_json(diag: &Diagnostic, name: &str, text: &str) -> String {
    let (line, col) = diag
        .span()
        .map(|s| line_col(text, s.start as usize))
        .unwrap_or((0, 0));
    let v = serde_json::json!({
        "code": diag.code.as_str(),
        "message": diag.message,
        "file": name,
        "line": line,
        "column": col,
        "labels": diag.labels.iter().map(|l| serde_json::json!({
            "start": l.span.start, "end": l.span.end, "text": l.text,
        })).collect::<Vec<_>>(),
        "help": diag.help,
    });
    v.to_string()
}
