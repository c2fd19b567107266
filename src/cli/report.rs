//! Text and JSON forms of `check`, `cost` and `run` output. Deterministic: no addresses, hashes
//! or timestamps, so they can be snapshot-tested.

use crate::check::{format_name, type_summary, Format, Program, TensorRef};
use crate::plan::cost::{ProgramCost, SparseOpCost, Verdict, NOMINAL_MACHINE};
use crate::tensor::Tensor;
use std::fmt::Write;
use std::time::Duration;

/// `1,234,567`
pub fn group(n: u128) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1.5 KiB`, `12 MiB`
pub use crate::machine::bytes_text as bytes;

pub fn duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
    }
}

pub(crate) fn table(rows: &[Vec<String>], right: &[bool]) -> String {
    let n = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            let pad = widths[c] - cell.chars().count();
            if right.get(c).copied().unwrap_or(false) {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `tdsl check`: every input and statement with its type.
pub fn check_report(p: &Program) -> String {
    let mut rows = Vec::new();
    for s in &p.sizes {
        rows.push(vec![s.name.clone(), "let".into(), s.value.to_string()]);
    }
    for i in &p.inputs {
        let mut t = type_summary(&i.ty);
        if let Some(init) = &i.init {
            let _ = write!(t, "  = {}", init_name(init));
        }
        rows.push(vec![i.name.clone(), "input".into(), t]);
    }
    for a in &p.assigns {
        rows.push(vec![
            a.name.clone(),
            "=".into(),
            type_summary(&p.node(a.node).ty),
        ]);
    }
    let mut out = table(&rows, &[]);
    let outs: Vec<&str> = p.outputs.iter().map(|o| o.name.as_str()).collect();
    if outs.is_empty() {
        out.push_str("outputs: (none)\n");
    } else {
        let _ = writeln!(out, "outputs: {}", outs.join(", "));
    }
    for line in format_lines(p) {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// What happens to sparse formats, statement by statement: which einsums run on stored
/// entries, and where a sparse value is expanded to dense (the checker's format notes, and
/// einsums that are not sparse-dense matrix products).
pub fn format_lines(p: &Program) -> Vec<String> {
    use crate::check::{format_name, NodeId, NodeKind};
    use crate::plan::sparse::{resolve, sparse_product, stored_sparse};
    let stmt_of = |span: tdsl_syntax::Span| -> String {
        p.assigns
            .iter()
            .find(|a| a.span.start <= span.start && span.end <= a.span.end)
            .map(|a| a.name.clone())
            .unwrap_or_else(|| "?".into())
    };
    let mut lines = Vec::new();
    for (i, n) in p.nodes.iter().enumerate() {
        let id = NodeId(i as u32);
        let NodeKind::Einsum { operands, .. } = &n.kind else {
            continue;
        };
        let sparse_ops: Vec<NodeId> = operands
            .iter()
            .map(|&o| resolve(p, o))
            .filter(|&o| stored_sparse(p, o).is_some())
            .collect();
        if sparse_ops.is_empty() || stored_sparse(p, id).is_some() {
            // (A sampled einsum is stored sparse itself: reported with the maps below.)
            continue;
        }
        let ty = &p.node(sparse_ops[0]).ty;
        let f = format_name(ty.format, &ty.shape);
        match sparse_product(p, id) {
            Some(_) => lines.push(format!(
                "sparse: {}: einsum runs on the stored entries of its {f} operand",
                stmt_of(n.span)
            )),
            None => lines.push(format!(
                "note: {}: einsum of a {f} operand that is not a sparse-dense matrix product: the operand is expanded to dense first",
                stmt_of(n.span)
            )),
        }
    }
    // Values computed on stored entries (elementwise maps, sampled einsums).
    for (i, n) in p.nodes.iter().enumerate() {
        let id = NodeId(i as u32);
        if let Some(crate::plan::sparse::SparseSource::Map(_)) = stored_sparse(p, id) {
            if resolve(p, id) != id {
                continue;
            }
            let what = match n.kind {
                NodeKind::Einsum { .. } => "sampled einsum",
                NodeKind::Cast(_) => "cast",
                _ => "elementwise op",
            };
            let line = format!(
                "sparse: {}: {what} runs on the stored entries (result {})",
                stmt_of(n.span),
                format_name(n.ty.format, &n.ty.shape)
            );
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
    }
    for note in &p.format_notes {
        lines.push(format!("note: {}: {}", stmt_of(note.span), note.message));
    }
    lines
}

pub(crate) fn init_name(init: &crate::check::Init) -> String {
    use crate::check::InitKind::*;
    let base = match init.kind {
        Randn { seed } => format!("randn(seed={seed}"),
        Rand { seed } => format!("rand(seed={seed}"),
        Zeros => "zeros(".into(),
        Ones => "ones(".into(),
        Arange => "arange(".into(),
    };
    let mut s = base;
    if let Some(d) = init.density {
        if !s.ends_with('(') {
            s.push_str(", ");
        }
        let _ = write!(s, "density={d}");
    }
    if s.ends_with('(') {
        s.pop();
    } else {
        s.push(')');
    }
    s
}

/// `tdsl cost`: one row per statement, totals, then the contraction path of every einsum with
/// three or more operands.
pub fn cost_report(p: &Program, c: &ProgramCost) -> String {
    let mut rows = vec![vec![
        "statement".to_string(),
        "shape".into(),
        "dtype".into(),
        "FLOPs".into(),
        "bytes read".into(),
        "written".into(),
        "FLOP/byte".into(),
        "largest intermediate".into(),
    ]];
    let mut notes = Vec::new();
    for s in &c.statements {
        let mut flops = group(s.flops);
        if s.flops != s.dense_flops {
            let _ = write!(flops, " (dense {})", group(s.dense_flops));
        }
        if s.density_assumed {
            notes.push(format!(
                "{}: a sparse operand has no data to count its stored entries; it is costed as fully stored",
                s.name
            ));
        }
        let mut ty = s.ty.shape.to_string();
        if s.ty.format != Format::Dense {
            let _ = write!(ty, " @ {}", format_name(s.ty.format, &s.ty.shape));
        }
        rows.push(vec![
            s.name.clone(),
            ty,
            s.ty.dtype.to_string(),
            flops,
            bytes(s.bytes_read),
            bytes(s.bytes_written),
            format!("{:.2}", s.intensity()),
            bytes(s.largest_intermediate_bytes),
        ]);
    }
    let mut total = group(c.total_flops());
    if c.total_flops() != c.total_dense_flops() {
        let _ = write!(total, " (dense {})", group(c.total_dense_flops()));
    }
    let tb: u128 = c.statements.iter().map(|s| s.bytes_read).sum();
    let tw: u128 = c.statements.iter().map(|s| s.bytes_written).sum();
    let ti = if tb + tw == 0 {
        0.0
    } else {
        c.total_flops() as f64 / (tb + tw) as f64
    };
    rows.push(vec![
        "total".into(),
        String::new(),
        String::new(),
        total,
        bytes(tb),
        bytes(tw),
        format!("{ti:.2}"),
        String::new(),
    ]);
    let mut out = String::new();
    let sparse: Vec<String> = p
        .inputs
        .iter()
        .filter(|i| i.ty.format.is_sparse())
        .map(|i| format!("{} @ {}", i.name, format_name(i.ty.format, &i.ty.shape)))
        .collect();
    if !sparse.is_empty() {
        let _ = writeln!(
            out,
            "sparse inputs: {} (sparse products count stored entries)",
            sparse.join(", ")
        );
    }
    out.push_str(&table(
        &rows,
        &[false, false, false, true, true, true, true, true],
    ));
    for n in notes {
        let _ = writeln!(out, "note: {n}");
    }
    out.push_str(&sparse_ops_report(c));
    for line in auto_lines(p) {
        let _ = writeln!(out, "{line}");
    }
    for s in &c.statements {
        for path in &s.paths {
            let _ = writeln!(out, "\ncontraction path for `{}`:", s.name);
            out.push_str(&path.report);
            if !path.report.ends_with('\n') {
                out.push('\n');
            }
        }
    }
    out
}

/// `tdsl cost --json`.
pub fn cost_json(p: &Program, c: &ProgramCost) -> String {
    use serde_json::json;
    let statements: Vec<_> = c
        .statements
        .iter()
        .map(|s| {
            let paths: Vec<_> = s
                .paths
                .iter()
                .map(|pa| {
                    json!({
                        "naive_flops": num(pa.path.naive_flops),
                        "optimized_flops": num(pa.path.opt_flops),
                        "largest_intermediate_elems": num(pa.path.largest_intermediate_elems),
                        "optimal": pa.path.optimal,
                        "steps": pa.path.steps.iter().map(|st| json!({
                            "operands": st.operands,
                            "flops": num(st.flops),
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect();
            json!({
                "name": s.name,
                "shape": s.ty.shape.extents(),
                "axes": s.ty.shape.0.iter().map(|a| a.name.clone()).collect::<Vec<_>>(),
                "dtype": s.ty.dtype.name(),
                "format": format_name(s.ty.format, &s.ty.shape),
                "flops": num(s.flops),
                "dense_flops": num(s.dense_flops),
                "bytes": num(s.bytes()),
                "bytes_read": num(s.bytes_read),
                "bytes_written": num(s.bytes_written),
                "intensity": s.intensity(),
                "largest_intermediate_bytes": num(s.largest_intermediate_bytes),
                "paths": paths,
                "sparse_ops": s.sparse_ops.iter().map(sparse_op_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    let inputs: Vec<_> = p
        .inputs
        .iter()
        .map(|i| {
            json!({
                "name": i.name,
                "shape": i.ty.shape.extents(),
                "dtype": i.ty.dtype.name(),
                "format": format_name(i.ty.format, &i.ty.shape),
            })
        })
        .collect();
    let auto: Vec<_> = p
        .auto_formats
        .iter()
        .filter_map(|a| {
            let ch = a.choice.as_ref()?;
            Some(json!({
                "statement": statement_of(p, a.span),
                "format": format_name(ch.format, &p.node(a.node).ty.shape),
                "predicted_seconds": ch.secs,
                "dense_seconds": ch.dense_secs,
                "reason": ch.reason,
            }))
        })
        .collect();
    let m = &c.machine;
    json!({
        "total_flops": num(c.total_flops()),
        "total_dense_flops": num(c.total_dense_flops()),
        "inputs": inputs,
        "statements": statements,
        "auto": auto,
        "machine": {
            "nominal": *m == NOMINAL_MACHINE,
            "peak_gflops": m.peak_gflops,
            "gemm_ceiling_gflops": crate::plan::cost::gemm_ceiling_gflops(m),
            "bandwidth_gbps": m.bandwidth_gbps,
        },
    })
    .to_string()
}

/// One sparse product in `cost --json`.
fn sparse_op_json(op: &SparseOpCost) -> serde_json::Value {
    serde_json::json!({
        "format": op.format,
        "stored_values": op.stored.values,
        "stored_bytes": op.stored.bytes,
        "density": op.density,
        "density_assumed": !op.stored.measured,
        "flops": num(op.flops),
        "bytes": num(op.bytes),
        "dense_flops": num(op.dense_flops),
        "dense_bytes": num(op.dense_bytes),
        "sparse_seconds": op.sparse_secs,
        "dense_seconds": op.dense_secs,
        "verdict": op.verdict().name(),
        "speedup": op.speedup(),
        "break_even_density": op.break_even,
    })
}

/// The statement whose text contains `span`.
fn statement_of(p: &Program, span: tdsl_syntax::Span) -> String {
    p.assigns
        .iter()
        .find(|a| a.span.start <= span.start && span.end <= a.span.end)
        .map(|a| a.name.clone())
        .unwrap_or_else(|| "?".into())
}

/// The machine predictions are for, in one line.
pub fn machine_line(m: &crate::machine::Machine) -> String {
    let ceiling = crate::plan::cost::gemm_ceiling_gflops(m);
    let gpu = crate::plan::cost::NOMINAL_GPU;
    if (crate::machine::Machine {
        target: gpu.target,
        ..*m
    }) == gpu
    {
        let tf32 = if m.target == crate::machine::Target::CudaTf32 {
            ", f32 products on TF32 (--tf32)"
        } else {
            ""
        };
        format!(
            "predicted for the nominal GPU (--device cuda: an H200): {:.0} TFLOP/s 16-bit tensor-core peak, {:.0} GB/s, at the CUDA kernels' efficiencies{tf32}",
            ceiling / 1e3,
            m.bandwidth_gbps
        )
    } else if *m == NOMINAL_MACHINE {
        format!(
            "predicted for the nominal machine: {ceiling:.0} GFLOP/s GEMM ceiling, {:.0} GB/s (TDSL_MACHINE=nominal)",
            m.bandwidth_gbps
        )
    } else {
        format!(
            "predicted for this machine: {ceiling:.1} GFLOP/s GEMM ceiling, {:.1} GB/s (measured)",
            m.bandwidth_gbps
        )
    }
}

/// `sparse, 1.52× faster`
pub fn verdict_text(op: &SparseOpCost) -> String {
    let who = match op.verdict() {
        Verdict::Sparse => "sparse",
        Verdict::Dense => "dense",
    };
    format!("{who}, {:.2}× faster", op.speedup())
}

/// `41.3%`, `never`, `any`
pub fn break_even_text(op: &SparseOpCost) -> String {
    match op.break_even {
        None => "never".into(),
        Some(r) if r >= 1.0 => "any".into(),
        Some(r) => format!("{:.1}%", 100.0 * r),
    }
}

/// `25.0%`, `50.0% (fixed)`, `100.0% (assumed)`
fn density_text(op: &SparseOpCost) -> String {
    let mut t = format!("{:.1}%", 100.0 * op.density);
    if op.fixed_density {
        t.push_str(" (fixed)");
    } else if !op.stored.measured {
        t.push_str(" (assumed)");
    }
    t
}

/// One sparse product in one line (the REPL prints it under the statement's line).
pub fn sparse_op_line(op: &SparseOpCost) -> String {
    format!(
        "sparse {} at {}: {} FLOPs, {} → {}; dense {} FLOPs, {} → {}; {}; break-even density {}",
        op.format,
        density_text(op),
        group(op.flops),
        bytes(op.bytes),
        crate::plan::auto::secs_text(op.sparse_secs),
        group(op.dense_flops),
        bytes(op.dense_bytes),
        crate::plan::auto::secs_text(op.dense_secs),
        verdict_text(op),
        break_even_text(op)
    )
}

/// The sparse-product table of `cost`: stored and dense-equivalent counts, predicted times, a
/// verdict and the break-even density of each. Empty when there are no sparse products.
pub fn sparse_ops_report(c: &ProgramCost) -> String {
    use crate::plan::auto::secs_text;
    let mut rows = vec![vec![
        "sparse product".to_string(),
        "format".into(),
        "density".into(),
        "FLOPs".into(),
        "dense FLOPs".into(),
        "bytes".into(),
        "dense bytes".into(),
        "sparse".into(),
        "dense".into(),
        "verdict".into(),
        "break-even".into(),
    ]];
    for s in &c.statements {
        for op in &s.sparse_ops {
            rows.push(vec![
                s.name.clone(),
                op.format.clone(),
                density_text(op),
                group(op.flops),
                group(op.dense_flops),
                bytes(op.bytes),
                bytes(op.dense_bytes),
                secs_text(op.sparse_secs),
                secs_text(op.dense_secs),
                verdict_text(op),
                break_even_text(op),
            ]);
        }
    }
    if rows.len() == 1 {
        return String::new();
    }
    let mut out = String::from("\n");
    out.push_str(&table(
        &rows,
        &[
            false, false, true, true, true, true, true, true, true, false, true,
        ],
    ));
    let _ = writeln!(out, "{}", machine_line(&c.machine));
    out
}

/// What every `sparsify(x, auto, …)` chose: `auto: ws → bsr(32, 32) (predicted: …)`.
pub fn auto_lines(p: &Program) -> Vec<String> {
    p.auto_formats
        .iter()
        .map(|a| {
            let shape = &p.node(a.node).ty.shape;
            match &a.choice {
                Some(ch) => format!(
                    "auto: {} → {} ({})",
                    statement_of(p, a.span),
                    format_name(ch.format, shape),
                    ch.reason
                ),
                None => format!("auto: {} → dense (not resolved)", statement_of(p, a.span)),
            }
        })
        .collect()
}

/// A JSON number for a u128 count: exact as an integer when it fits in u64.
/// An exact integer, however large (serde_json's `arbitrary_precision` keeps its digits).
fn num(n: u128) -> serde_json::Value {
    match u64::try_from(n) {
        Ok(v) => serde_json::Value::from(v),
        Err(_) => serde_json::from_str(&n.to_string()).unwrap_or(serde_json::Value::Null),
    }
}

/// `tdsl run` without `--out`: a summary of every output.
pub fn run_summary(p: &Program, outputs: &[Tensor]) -> String {
    let mut out = String::new();
    for (o, t) in p.outputs.iter().zip(outputs) {
        let ty = match o.tensor {
            TensorRef::Input(i) => &p.inputs[i].ty,
            TensorRef::Assign(a) => &p.node(p.assigns[a].node).ty,
        };
        let v = t.to_f64();
        let _ = writeln!(out, "{}: {}", o.name, type_summary(ty));
        if v.is_empty() {
            continue;
        }
        let nan = v.iter().any(|x| x.is_nan());
        let fin: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
        let min = fin.iter().copied().fold(f64::INFINITY, f64::min);
        let max = fin.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let _ = writeln!(
            out,
            "  min {}  max {}  mean {}{}",
            g(min),
            g(max),
            g(mean),
            if nan { "  (contains NaN)" } else { "" }
        );
        let first: Vec<String> = v.iter().take(8).map(|&x| g(x)).collect();
        let more = if v.len() > 8 { ", …" } else { "" };
        let _ = writeln!(out, "  values [{}{}]", first.join(", "), more);
    }
    out
}

/// A compact number: up to 6 significant digits.
fn g(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return "0".into();
    }
    let a = x.abs();
    if (1e-4..1e6).contains(&a) {
        let digits = 6usize.saturating_sub((a.log10().floor() as i32 + 1).max(0) as usize);
        let s = format!("{x:.digits$}");
        let t = s.trim_end_matches('0').trim_end_matches('.').to_string();
        if t.is_empty() || t == "-" {
            "0".into()
        } else {
            t
        }
    } else {
        format!("{x:.5e}")
    }
}
