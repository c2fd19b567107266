//! SVG plots drawn with plotters' SVG backend: the roofline of a program's statements against
//! this machine's ceilings (`tdsl cost --plot`, the REPL's `:plot`), and the nonzero pattern of a
//! sparse input (the REPL's `:sparsity`).
//!
//! The SVG is rendered into memory first and then written in one go, so a file that cannot be
//! written is one [`Code::FileWrite`] diagnostic and never a half-written plot.

use super::report::group;
use crate::check::{Format, Program};
use crate::diag::{Code, Diagnostic};
use crate::machine::Machine;
use crate::plan::cost::ProgramCost;
use crate::tensor::Tensor;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Marks measured points (achieved FLOP/s from a timed run).
const MEASURED: RGBColor = RGBColor(0xd6, 0x27, 0x28);
/// Marks predicted points (the attainable bound).
const PREDICTED: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
/// The roof: peak compute and the bandwidth slope.
const ROOF: RGBColor = RGBColor(0x33, 0x33, 0x33);
const GRID: RGBColor = RGBColor(0xe4, 0xe4, 0xe4);

/// Label font size in plotters' units (SVG font-size is this / 1.24).
const LABEL_SIZE: f64 = 15.0;

/// A drawing failure inside plotters (only possible for a backend bug: drawing goes to a string).
fn draw_err<E: std::fmt::Debug>(path: &Path) -> impl Fn(E) -> Diagnostic + '_ {
    move |e| {
        Diagnostic::new(
            Code::FileWrite,
            format!("cannot draw {}: {e:?}", path.display()),
        )
    }
}

/// Writes the finished SVG text to `path`.
fn write_svg(path: &Path, svg: &str) -> Result<(), Diagnostic> {
    std::fs::write(path, svg).map_err(|e| {
        Diagnostic::new(
            Code::FileWrite,
            format!("cannot write {}: {e}", path.display()),
        )
        .help("check that the directory exists and is writable, or choose another file")
    })
}

/// `1.5k`, `12`, `0.25`, `3M`: short tick labels for log axes.
fn si(v: f64) -> String {
    let a = v.abs();
    let (x, unit) = if a >= 1e12 {
        (v / 1e12, "T")
    } else if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = if x.abs() >= 100.0 || x == x.trunc() {
        format!("{x:.0}")
    } else if x.abs() >= 1.0 {
        format!("{x:.1}")
    } else {
        let digits = (-x.abs().log10().floor()) as usize + 1;
        format!("{x:.digits$}")
    };
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    format!("{s}{unit}")
}

fn floor_pow10(v: f64) -> f64 {
    10f64.powf(v.log10().floor())
}

fn ceil_pow10(v: f64) -> f64 {
    10f64.powf(v.log10().ceil())
}

/// One plotted point: statements with the same position share it.
struct Point {
    names: Vec<String>,
    intensity: f64,
    gflops: f64,
    measured: bool,
}

/// Writes a roofline of `cost`'s statements against `machine` to `path`. `measured` gives a
/// measured time in seconds per statement where one is known.
///
/// The axes are log-log: arithmetic intensity (FLOP/byte) across, GFLOP/s up. The roof is
/// `min(peak, bandwidth × intensity)`. A statement with a measured time sits at its achieved
/// FLOP/s (filled, red); one without sits on the roof at its attainable bound (hollow, blue,
/// "predicted"). Statements that do no arithmetic cannot be placed on a log axis and are listed
/// under the plot instead.
pub fn roofline(
    path: &Path,
    program: &Program,
    cost: &ProgramCost,
    machine: &Machine,
    measured: &[Option<f64>],
) -> Result<(), crate::Diagnostic> {
    let _ = program;
    let peak = machine.peak_gflops.max(1e-9);
    let bw = machine.bandwidth_gbps.max(1e-9);
    let ridge = peak / bw;
    let (points, skipped) = roofline_points(cost, measured, peak, bw);

    let ((x_lo, x_hi), (y_lo, y_hi)) = roofline_ranges(&points, ridge, peak);

    let (width, height) = (960u32, 640u32);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        let err = draw_err(path);
        root.fill(&WHITE).map_err(&err)?;
        let (main, foot) = root.split_vertically(height - 28);
        let title = format!(
            "Roofline: {} cores at {:.2} GHz, {} GFLOP/s f32 peak, {} GB/s bandwidth (measured)",
            machine.cores,
            machine.clock_ghz,
            si(peak),
            si(bw)
        );
        let mut chart = ChartBuilder::on(&main)
            .caption(title, ("sans-serif", 20))
            .margin(16)
            .margin_right(28)
            .x_label_area_size(52)
            .y_label_area_size(72)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())
            .map_err(&err)?;
        chart
            .configure_mesh()
            .x_desc("arithmetic intensity (FLOP/byte)")
            .y_desc("performance (GFLOP/s)")
            .x_label_formatter(&|v| si(*v))
            .y_label_formatter(&|v| si(*v))
            .label_style(("sans-serif", LABEL_SIZE))
            .axis_desc_style(("sans-serif", 16))
            .light_line_style(GRID.mix(0.5))
            .bold_line_style(GRID)
            .draw()
            .map_err(&err)?;

        // The roof, starting where the bandwidth slope enters the plot.
        let x_start = x_lo.max(y_lo / bw);
        let roof = ROOF.stroke_width(2);
        chart
            .draw_series(LineSeries::new(
                [(x_start, bw * x_start), (ridge, peak), (x_hi, peak)],
                roof,
            ))
            .map_err(&err)?
            .label("roof: min(peak, bandwidth × intensity)")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], ROOF.stroke_width(2)));
        let small = ("sans-serif", 14.0).into_font().color(&ROOF);
        let text_w =
            |t: &str, size: f64| (t.chars().count() as f64 * size / 1.24 * 0.56).ceil() as i32;
        let text_h = |size: f64| (size / 1.24).ceil() as i32 + 2;
        let ridge_label = format!("ridge {} FLOP/B", si(ridge));
        let peak_label = format!("peak {} GFLOP/s", si(peak));
        let peak_off = (-text_w(&peak_label, 14.0) - 6, -text_h(14.0) - 4);
        // Boxes already taken (pixels): the roof's labels, then every point marker.
        let mut placed: Vec<(i32, i32, i32, i32)> = Vec::new();
        let (rx, ry) = chart.backend_coord(&(ridge, peak));
        placed.push((
            rx + 6,
            ry + 6,
            rx + 6 + text_w(&ridge_label, 14.0),
            ry + 6 + text_h(14.0),
        ));
        let (qx, qy) = chart.backend_coord(&(x_hi, peak));
        placed.push((
            qx + peak_off.0,
            qy + peak_off.1,
            qx + peak_off.0 + text_w(&peak_label, 14.0),
            qy + peak_off.1 + text_h(14.0),
        ));
        chart
            .draw_series([EmptyElement::at((ridge, peak))
                + Circle::new((0, 0), 3, ROOF.filled())
                + Text::new(ridge_label, (6, 6), small.clone())])
            .map_err(&err)?;
        chart
            .draw_series([
                EmptyElement::at((x_hi, peak)) + Text::new(peak_label, peak_off, small.clone())
            ])
            .map_err(&err)?;
        // The bandwidth slope's label, above-left of it, a little below the ridge.
        let bw_label = format!("bandwidth {} GB/s", si(bw));
        let x_bw = (ridge / 10.0).max(x_start * 1.5);
        if x_bw < ridge {
            let (bx, by) = chart.backend_coord(&(x_bw, bw * x_bw));
            let off = (-text_w(&bw_label, 14.0) - 4, -text_h(14.0) - 6);
            placed.push((bx + off.0, by + off.1, bx, by + off.1 + text_h(14.0)));
            chart
                .draw_series(
                    [EmptyElement::at((x_bw, bw * x_bw)) + Text::new(bw_label, off, small)],
                )
                .map_err(&err)?;
        }

        // Points: measured (filled) and predicted (hollow); one legend entry each kind present.
        for p in &points {
            let (px, py) = chart.backend_coord(&(p.intensity, p.gflops));
            placed.push((px - 6, py - 6, px + 6, py + 6));
        }
        let area = chart.plotting_area().get_pixel_range();
        let mut labels: Vec<(f64, f64, i32, i32, String, RGBColor)> = Vec::new();
        for p in &points {
            let (px, py) = chart.backend_coord(&(p.intensity, p.gflops));
            let text = p.names.join(", ");
            let (w, h) = (text_w(&text, LABEL_SIZE), text_h(LABEL_SIZE));
            let (dx, dy) = place_label(px, py, w, h, &placed, &area);
            placed.push((px + dx, py + dy, px + dx + w, py + dy + h));
            let color = if p.measured { MEASURED } else { PREDICTED };
            labels.push((p.intensity, p.gflops, dx, dy, text, color));
        }
        draw_point_series(&mut chart, &points).map_err(&err)?;
        chart
            .draw_series(labels.into_iter().map(|(x, y, dx, dy, text, color)| {
                EmptyElement::at((x, y))
                    + Text::new(
                        text,
                        (dx, dy),
                        ("sans-serif", LABEL_SIZE).into_font().color(&color),
                    )
            }))
            .map_err(&err)?;
        chart
            .configure_series_labels()
            // Above the bandwidth slope on the left nothing can be plotted.
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 14))
            .background_style(WHITE.mix(0.9))
            .border_style(GRID.stroke_width(1))
            .draw()
            .map_err(&err)?;
        footnote(&foot, &skipped, points.is_empty()).map_err(&err)?;
        root.present().map_err(&err)?;
    }
    write_svg(path, &svg)
}

/// The roofline's axis ranges: whole decades around every point, the ridge and the peak.
fn roofline_ranges(points: &[Point], ridge: f64, peak: f64) -> ((f64, f64), (f64, f64)) {
    let xs = points.iter().map(|p| p.intensity).chain([ridge]);
    let x_lo = floor_pow10(xs.clone().fold(f64::INFINITY, f64::min) / 3.0);
    let x_hi = ceil_pow10(xs.fold(0.0, f64::max) * 3.0);
    let y_lo_pt = points
        .iter()
        .map(|p| p.gflops)
        .fold(f64::INFINITY, f64::min)
        .min(peak / 100.0);
    let y_lo = floor_pow10(y_lo_pt / 3.0);
    let y_hi = ceil_pow10(peak * 3.0);
    ((x_lo, x_hi), (y_lo, y_hi))
}

/// A roofline's points (statements at the same place share one) and the statements that do no
/// arithmetic and cannot be placed.
fn roofline_points(
    cost: &ProgramCost,
    measured: &[Option<f64>],
    peak: f64,
    bw: f64,
) -> (Vec<Point>, Vec<String>) {
    let mut points: Vec<Point> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    for (i, s) in cost.statements.iter().enumerate() {
        let intensity = s.intensity();
        if s.flops == 0 || intensity <= 0.0 {
            skipped.push(s.name.clone());
            continue;
        }
        let time = measured.get(i).copied().flatten().filter(|t| *t > 0.0);
        let (gflops, is_measured) = match time {
            Some(t) => (s.flops as f64 / t / 1e9, true),
            None => (peak.min(bw * intensity), false),
        };
        let same = |p: &Point| {
            p.measured == is_measured
                && (p.intensity / intensity - 1.0).abs() < 1e-9
                && (p.gflops / gflops - 1.0).abs() < 1e-9
        };
        match points.iter_mut().find(|p| same(p)) {
            Some(p) => p.names.push(s.name.clone()),
            None => points.push(Point {
                names: vec![s.name.clone()],
                intensity,
                gflops,
                measured: is_measured,
            }),
        }
    }
    (points, skipped)
}

/// The roofline's markers: measured (filled) and predicted (hollow), one legend entry for each
/// kind present.
fn draw_point_series<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<LogCoord<f64>, LogCoord<f64>>>,
    points: &[Point],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    for measured_kind in [true, false] {
        let color = if measured_kind { MEASURED } else { PREDICTED };
        let pts: Vec<&Point> = points
            .iter()
            .filter(|p| p.measured == measured_kind)
            .collect();
        if pts.is_empty() {
            continue;
        }
        let style = if measured_kind {
            color.filled()
        } else {
            color.stroke_width(2)
        };
        let series = chart.draw_series(
            pts.iter()
                .map(|p| Circle::new((p.intensity, p.gflops), 5, style)),
        )?;
        if measured_kind {
            series
                .label("measured: achieved FLOP/s in the last :time")
                .legend(move |(x, y)| Circle::new((x + 10, y), 5, color.filled()));
        } else {
            series
                .label("predicted: attainable bound (not timed)")
                .legend(move |(x, y)| Circle::new((x + 10, y), 5, color.stroke_width(2)));
        }
    }
    Ok(())
}

/// The line under a roofline: statements that could not be placed.
fn footnote<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    skipped: &[String],
    empty: bool,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let text = if skipped.is_empty() && empty {
        "no statements with arithmetic to plot".to_string()
    } else if skipped.is_empty() {
        return Ok(());
    } else {
        format!(
            "not plotted (no arithmetic, so no intensity on a log axis): {}",
            skipped.join(", ")
        )
    };
    area.draw(&Text::new(
        text,
        (16, 4),
        ("sans-serif", 14.0).into_font().color(&ROOF),
    ))
}

/// Offsets (from the point's pixel) of a `w × h` label's top-left corner that overlap no
/// placed box and stay inside `area`; the first candidate that fits wins.
fn place_label(
    px: i32,
    py: i32,
    w: i32,
    h: i32,
    placed: &[(i32, i32, i32, i32)],
    area: &(std::ops::Range<i32>, std::ops::Range<i32>),
) -> (i32, i32) {
    let overlaps = |a: (i32, i32, i32, i32)| {
        placed
            .iter()
            .any(|b| a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3)
    };
    let inside = |a: (i32, i32, i32, i32)| {
        a.0 >= area.0.start && a.2 <= area.0.end && a.1 >= area.1.start && a.3 <= area.1.end
    };
    let mut first_inside = None;
    for step in 0..8 {
        let s = step * (h + 2);
        // Points sit on or under the roof, which rises to the right: below-right and above-left
        // of a point are clear of it, so they come first.
        let candidates = [
            (9, 3 + s),
            (-9 - w, -h - 2 - s),
            (9, -h - 2 - s),
            (-9 - w, 3 + s),
            (-w / 2, -h - 10 - s),
            (-w / 2, 10 + s),
        ];
        for (dx, dy) in candidates {
            let b = (px + dx, py + dy, px + dx + w, py + dy + h);
            if inside(b) {
                if !overlaps(b) {
                    return (dx, dy);
                }
                first_inside.get_or_insert((dx, dy));
            }
        }
    }
    first_inside.unwrap_or((9, -h - 2))
}

/// How the sparsity plot's cells map to elements.
fn cell_desc(
    format: Format,
    (cell_r, cell_c): (usize, usize),
    (unit_r, unit_c): (usize, usize),
) -> String {
    if cell_r == 1 && cell_c == 1 {
        "one cell per element".to_string()
    } else if matches!(format, Format::Bsr { .. }) && cell_r == unit_r && cell_c == unit_c {
        format!("one cell per {cell_r}×{cell_c} block, shaded by its fill")
    } else {
        format!("one cell per {cell_r}×{cell_c} elements, shaded by the fraction nonzero")
    }
}

/// The caption's count: stored blocks for BSR, nonzeros otherwise.
fn stored_stats(
    values: &[f64],
    (rows, cols): (usize, usize),
    format: Format,
    nnz: usize,
) -> String {
    match format {
        Format::Bsr { rows: br, cols: bc } => {
            let (nbr, nbc) = (rows / br as usize, cols / bc as usize);
            let mut stored = 0usize;
            for bi in 0..nbr {
                for bj in 0..nbc {
                    let any = (0..br as usize).any(|i| {
                        (0..bc as usize).any(|j| {
                            values[(bi * br as usize + i) * cols + bj * bc as usize + j] != 0.0
                        })
                    });
                    stored += usize::from(any);
                }
            }
            format!(
                "{} of {} blocks stored ({:.1}%), {} nonzeros",
                group(stored as u128),
                group((nbr * nbc) as u128),
                100.0 * stored as f64 / (nbr * nbc).max(1) as f64,
                group(nnz as u128)
            )
        }
        _ => format!(
            "{} of {} nonzero ({:.1}%)",
            group(nnz as u128),
            group(values.len() as u128),
            100.0 * nnz as f64 / values.len().max(1) as f64
        ),
    }
}

/// Shade levels of the sparsity plot's cells (by the fraction filled).
const LEVELS: usize = 8;

/// From a pale blue (barely filled) to a dark blue (full).
fn shade(l: usize) -> RGBColor {
    let t = l as f64 / LEVELS as f64;
    let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    RGBColor(mix(198.0, 8.0), mix(219.0, 48.0), mix(239.0, 107.0))
}

/// The grid of BSR block boundaries (drawn when there are at most 64 blocks each way).
fn block_lines(
    (rows, cols): (usize, usize),
    (br, bc): (usize, usize),
) -> Vec<PathElement<(f64, f64)>> {
    let mut lines = Vec::new();
    if rows / br > 64 || cols / bc > 64 {
        return lines;
    }
    let line = GRID.stroke_width(1);
    for r in (0..=rows).step_by(br) {
        lines.push(PathElement::new(
            [(0.0, r as f64), (cols as f64, r as f64)],
            line,
        ));
    }
    for c in (0..=cols).step_by(bc) {
        lines.push(PathElement::new(
            [(c as f64, 0.0), (c as f64, rows as f64)],
            line,
        ));
    }
    lines
}

/// The small shade key beside the sparsity plot.
fn shade_key<DB: DrawingBackend>(
    key: &DrawingArea<DB, Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let key_x = 10;
    let key_top = 16;
    key.draw(&Text::new(
        "fill",
        (key_x, key_top - 4),
        ("sans-serif", 13).into_font().color(&ROOF),
    ))?;
    for l in (1..=LEVELS).rev() {
        let y = key_top + 14 + (LEVELS - l) as i32 * 14;
        key.draw(&Rectangle::new(
            [(key_x, y), (key_x + 14, y + 12)],
            shade(l).filled(),
        ))?;
        if l == LEVELS || l == 1 || l == LEVELS / 2 {
            let pct = 100 * l / LEVELS;
            key.draw(&Text::new(
                format!("≤{pct}%"),
                (key_x + 20, y),
                ("sans-serif", 12).into_font().color(&ROOF),
            ))?;
        }
    }
    Ok(())
}

/// Writes the nonzero pattern of a sparse tensor to `path`.
///
/// The tensor is viewed as a matrix: its last axis across, all leading axes down. For BSR each
/// cell is one block, shaded by the fraction of its entries that are nonzero. For the other
/// formats each cell is one element (shaded when nonzero); matrices larger than about 256×256
/// are downsampled, and each cell is then shaded by the fraction of nonzeros among the elements
/// it covers. `title` heads the plot (the input's name and type).
pub fn sparsity(
    path: &Path,
    tensor: &Tensor,
    format: Format,
    title: &str,
) -> Result<(), crate::Diagnostic> {
    let shape = &tensor.shape;
    let (rows, cols) = match shape.len() {
        0 => (1usize, 1usize),
        1 => (1, shape[0]),
        n => (shape[..n - 1].iter().product(), shape[n - 1]),
    };
    let values = tensor.to_f64();
    let nnz = values.iter().filter(|v| **v != 0.0).count();
    const MAX_CELLS: usize = 256;
    // Cell size in elements: whole blocks for BSR, then enough to stay under MAX_CELLS.
    let (unit_r, unit_c) = match format {
        Format::Bsr { rows: br, cols: bc } => (br as usize, bc as usize),
        _ => (1, 1),
    };
    let cell_r = unit_r * rows.div_ceil(unit_r).div_ceil(MAX_CELLS).max(1);
    let cell_c = unit_c * cols.div_ceil(unit_c).div_ceil(MAX_CELLS).max(1);
    let n_r = rows.div_ceil(cell_r);
    let n_c = cols.div_ceil(cell_c);
    let mut counts = vec![0u64; n_r * n_c];
    for r in 0..rows {
        let row = &values[r * cols..(r + 1) * cols];
        for (c, v) in row.iter().enumerate() {
            if *v != 0.0 {
                counts[(r / cell_r) * n_c + c / cell_c] += 1;
            }
        }
    }
    // Shade level per cell: 0 empty, else 1..=LEVELS by fill fraction.
    let level = |i: usize, j: usize| -> usize {
        let n = counts[i * n_c + j];
        if n == 0 {
            return 0;
        }
        let h = (cell_r.min(rows - i * cell_r)) as f64;
        let w = (cell_c.min(cols - j * cell_c)) as f64;
        let frac = n as f64 / (h * w);
        ((frac * LEVELS as f64).ceil() as usize).clamp(1, LEVELS)
    };

    let stats = stored_stats(&values, (rows, cols), format, nnz);
    let cell_desc = cell_desc(format, (cell_r, cell_c), (unit_r, unit_c));

    // Plot area shaped like the matrix, within sensible bounds; a column on the right for the
    // shade key.
    let side = 620.0;
    let aspect = rows as f64 / cols as f64;
    let (pw, ph) = if aspect <= 1.0 {
        (side, (side * aspect).max(170.0))
    } else {
        ((side / aspect).max(200.0), side)
    };
    const KEY_W: u32 = 110;
    // Plot, its label area and margins; the key sits right after it.
    let left_w = pw as u32 + 64 + 24;
    let subtitle = format!("{stats}; {cell_desc}");
    let text_w = |t: &str, size: f64| (t.chars().count() as f64 * size / 1.24 * 0.56) as u32 + 40;
    let width = (left_w + KEY_W)
        .max(text_w(title, 20.0))
        .max(text_w(&subtitle, 14.0));
    let height = ph as u32 + 150;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        let err = draw_err(path);
        root.fill(&WHITE).map_err(&err)?;
        let (top, rest) = root.split_vertically(58);
        top.draw(&Text::new(
            title.to_string(),
            (16, 10),
            ("sans-serif", 20).into_font(),
        ))
        .map_err(&err)?;
        top.draw(&Text::new(
            subtitle,
            (16, 36),
            ("sans-serif", 14).into_font().color(&ROOF),
        ))
        .map_err(&err)?;
        let (left, key) = rest.split_horizontally(left_w);
        let mut chart = ChartBuilder::on(&left)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..cols as f64, rows as f64..0f64)
            .map_err(&err)?;
        // Element indices: whole numbers only (ticks between them stay unlabelled).
        let int_fmt = |v: &f64| {
            if (v - v.round()).abs() < 1e-9 {
                format!("{}", v.round() as i64)
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc(format!("column (last axis, {cols})"))
            .y_desc(format!("row ({rows})"))
            .x_label_formatter(&int_fmt)
            .y_label_formatter(&int_fmt)
            .x_labels(8.min(cols + 1))
            .y_labels(6.min(rows + 1))
            .label_style(("sans-serif", LABEL_SIZE))
            .axis_desc_style(("sans-serif", 15))
            .draw()
            .map_err(&err)?;
        // Runs of equal shade along each row become one rectangle.
        let mut rects = Vec::new();
        for i in 0..n_r {
            let mut j = 0;
            while j < n_c {
                let l = level(i, j);
                let mut k = j + 1;
                while k < n_c && level(i, k) == l {
                    k += 1;
                }
                if l > 0 {
                    let (y0, y1) = ((i * cell_r) as f64, ((i + 1) * cell_r).min(rows) as f64);
                    let (x0, x1) = ((j * cell_c) as f64, (k * cell_c).min(cols) as f64);
                    rects.push(Rectangle::new([(x0, y0), (x1, y1)], shade(l).filled()));
                }
                j = k;
            }
        }
        chart.draw_series(rects).map_err(&err)?;
        // Block boundaries for BSR when they are few enough to see.
        if let Format::Bsr { rows: br, cols: bc } = format {
            let lines = block_lines((rows, cols), (br as usize, bc as usize));
            chart.draw_series(lines).map_err(&err)?;
        }
        // Frame and a small shade key.
        chart
            .draw_series([Rectangle::new(
                [(0.0, 0.0), (cols as f64, rows as f64)],
                ROOF.stroke_width(1),
            )])
            .map_err(&err)?;
        shade_key(&key).map_err(&err)?;
        root.present().map_err(&err)?;
    }
    write_svg(path, &svg)
}
