//! `tdsl bench`: compile once, warm up, run N times, and report times against this machine's
//! ceilings (peak FLOP/s and bandwidth, measured once and cached by [`machine_ceilings`]).

use super::report::{duration, group};
use crate::bind::Value;
use crate::check::Program;
use crate::machine::Machine;
use crate::plan::lower::Plan;
use crate::runtime;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// The machine's ceilings, measured once and cached ([`crate::machine::measured`]).
pub fn machine_ceilings() -> Machine {
    crate::machine::measured()
}

/// Timings of the front half, measured by the caller. `parse_check` also covers reading or
/// generating the input data, which dominates for large inputs.
pub struct Front {
    pub parse_check: Duration,
    pub plan: Duration,
}

pub struct Options {
    /// A plan-running engine (the interpreter has no kernels to time).
    pub engine: crate::session::Engine,
    pub runs: usize,
    pub warmup: usize,
    pub threads: usize,
    pub json: bool,
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    if v.is_empty() {
        Duration::ZERO
    } else {
        v[v.len() / 2]
    }
}

/// Runs the benchmark and returns the report (text or JSON).
pub fn bench(
    program: &Program,
    plan: &Plan,
    inputs: &[Value],
    front: Front,
    o: &Options,
) -> Result<String, crate::Diagnostic> {
    let on_gpu = o.engine == crate::session::Engine::Cuda;
    let t = Instant::now();
    let (exe, n_compiled) = runtime::compile(o.engine, plan)?;
    let compile = t.elapsed();
    // A second compile of the same plan is a cache hit: what a re-run pays for dispatch.
    let t = Instant::now();
    let (exe2, n_again) = runtime::compile(o.engine, plan)?;
    let cached = t.elapsed();
    drop(exe2);
    debug_assert_eq!(n_again, 0);
    let mut bufs = runtime::bind_owned(plan, inputs.to_vec())?;
    let threads = o.threads.max(1);
    let run = |bufs: &mut Vec<tdsl_loop::Data>| {
        exe.run(bufs, &tdsl_loop::RunOptions { threads })
            .map_err(|e| runtime::backend_diagnostic(e, plan))
    };
    for _ in 0..o.warmup {
        run(&mut bufs)?;
    }
    let mut totals = Vec::with_capacity(o.runs);
    let mut transfers = Vec::with_capacity(o.runs);
    let n_k = plan.loops.kernels.len();
    let mut per_kernel: Vec<Vec<Duration>> = vec![Vec::new(); n_k];
    for _ in 0..o.runs.max(1) {
        let t = Instant::now();
        let stats = run(&mut bufs)?;
        let wall = t.elapsed();
        // On a device the run is the device's time from the first launch to the last (CUDA
        // events: the gaps between launches count, as in a timed sequence of library calls);
        // copies are reported apart.
        totals.push(match stats.device_span {
            Some(span) if on_gpu => span,
            _ if on_gpu => stats.kernel_times.iter().sum(),
            _ => wall,
        });
        transfers.push(stats.transfer);
        for (k, d) in stats.kernel_times.iter().enumerate().take(n_k) {
            per_kernel[k].push(*d);
        }
    }
    let transfer = median(&mut transfers);
    let min = totals.iter().copied().min().unwrap_or_default();
    let med = median(&mut totals);
    let cost = crate::plan::cost::program_cost(
        program,
        &program
            .inputs
            .iter()
            .zip(inputs)
            .map(|(i, t)| crate::plan::cost::stored_value(&i.ty, Some(t)))
            .collect::<Vec<_>>(),
    );
    let flops = cost.total_flops();
    let kstats: Vec<tdsl_loop::stats::KernelStats> = plan
        .loops
        .kernels
        .iter()
        .map(|k| tdsl_loop::stats::kernel_stats_bound(&plan.loops, k, &bufs))
        .collect();
    let bytes: u128 = kstats.iter().map(|s| s.bytes()).sum();
    let secs = med.as_secs_f64().max(1e-12);
    let gflops = flops as f64 / secs / 1e9;
    let gbps = bytes as f64 / secs / 1e9;
    let (machine, remeasured, predict_on) = if on_gpu {
        let (name, peak, bw) = runtime::cuda_ceilings(plan)?;
        let c = Ceilings {
            describe: format!(
                "{name}: {peak:.0} GFLOP/s f32 FMA peak, {bw:.0} GB/s copy bandwidth (measured on the device)"
            ),
            peak_gflops: peak,
            bandwidth_gbps: bw,
        };
        (c, false, None)
    } else {
        // A run faster than the peak means the cached ceilings were measured under load.
        let machine = machine_ceilings();
        let remeasured = crate::machine::recheck(&machine, gflops);
        let machine = remeasured.unwrap_or(machine);
        (Ceilings::of(&machine), remeasured.is_some(), Some(machine))
    };
    // The CPU cost model's prediction of each kernel (none on a device: it models the CPU).
    let predicted: Vec<Option<Duration>> = kstats
        .iter()
        .map(|s| {
            predict_on
                .as_ref()
                .map(|m| Duration::from_secs_f64(crate::plan::cost::kernel_secs(s, m, threads)))
        })
        .collect();
    let kernels: Vec<KernelRow> = plan
        .loops
        .kernels
        .iter()
        .zip(per_kernel.iter_mut())
        .zip(kstats)
        .zip(&predicted)
        .map(|(((k, ts), stats), p)| KernelRow {
            name: k.name.clone(),
            origin: k.origin.clone(),
            median: median(ts),
            predicted: *p,
            stats,
        })
        .collect();
    let m = Measured {
        machine,
        remeasured,
        transfer: on_gpu.then_some(transfer),
        compile,
        cached,
        n_kernels: n_k,
        n_compiled,
        runs: totals.len(),
        threads,
        median: med,
        min,
        flops,
        bytes,
        gflops,
        gbps,
        kernels,
    };
    Ok(if o.json {
        report_json(&m, &front)
    } else {
        report_text(&m, &front)
    })
}

/// The ceilings a run is compared with: the CPU's ([`Machine`]) or the GPU's.
struct Ceilings {
    describe: String,
    peak_gflops: f64,
    bandwidth_gbps: f64,
}

impl Ceilings {
    fn of(m: &Machine) -> Ceilings {
        Ceilings {
            describe: m.describe(),
            peak_gflops: m.peak_gflops,
            bandwidth_gbps: m.bandwidth_gbps,
        }
    }
}

/// What a benchmark measured.
struct Measured {
    machine: Ceilings,
    /// Host↔device copies per run (median), on a device.
    transfer: Option<Duration>,
    /// The cached ceilings were below this run and were measured again.
    remeasured: bool,
    compile: Duration,
    cached: Duration,
    n_kernels: usize,
    n_compiled: usize,
    runs: usize,
    threads: usize,
    median: Duration,
    min: Duration,
    flops: u128,
    bytes: u128,
    gflops: f64,
    gbps: f64,
    kernels: Vec<KernelRow>,
}

/// One kernel's measurement: name, origin, median time, the cost model's prediction (CPU
/// only) and its counts.
struct KernelRow {
    name: String,
    origin: String,
    median: Duration,
    predicted: Option<Duration>,
    stats: tdsl_loop::stats::KernelStats,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `bench --json`: one object.
fn report_json(m: &Measured, front: &Front) -> String {
    let machine = &m.machine;
    let v = serde_json::json!({
        "parse_check_ms": ms(front.parse_check),
        "plan_ms": ms(front.plan),
        "compile_ms": ms(m.compile),
        "n_kernels": m.n_kernels,
        "n_compiled": m.n_compiled,
        "cached_compile_ms": ms(m.cached),
        "runs": m.runs,
        "threads": m.threads,
        "run_ms_median": ms(m.median),
        "run_ms_min": ms(m.min),
        "flops": m.flops as f64,
        "bytes": m.bytes as f64,
        "gflops": m.gflops,
        "gbps": m.gbps,
        "peak_gflops": machine.peak_gflops,
        "peak_gbps": machine.bandwidth_gbps,
        "pct_peak": 100.0 * m.gflops / machine.peak_gflops,
        "pct_bandwidth": 100.0 * m.gbps / machine.bandwidth_gbps,
        "machine": machine.describe,
        "transfer_ms_median": m.transfer.map(ms),
        "remeasured": m.remeasured,
        "predicted_ms": predicted_total(m).map(ms),
        "kernels": m.kernels.iter().map(|k| {
            let (s, sec) = (&k.stats, k.median.as_secs_f64().max(1e-12));
            serde_json::json!({
                "name": k.name,
                "origin": k.origin,
                "run_ms_median": ms(k.median),
                "predicted_ms": k.predicted.map(ms),
                "flops": s.flops as f64,
                "bytes": s.bytes() as f64,
                "gflops": s.flops as f64 / sec / 1e9,
                "gbps": s.bytes() as f64 / sec / 1e9,
            })
        }).collect::<Vec<_>>(),
    });
    v.to_string() + "\n"
}

/// `bench`: the text report.
fn report_text(m: &Measured, front: &Front) -> String {
    let machine = &m.machine;
    let mut out = String::new();
    let _ = writeln!(out, "machine: {}", machine.describe);
    if m.remeasured {
        let _ = writeln!(
            out,
            "(the cached ceilings were below what this run achieved: measured again and cached)"
        );
    }
    let _ = writeln!(
        out,
        "front end: parse+check+inputs {}, plan {}; JIT: {} kernels, {} compiled in {} (cached re-compile {})",
        duration(front.parse_check),
        duration(front.plan),
        m.n_kernels,
        m.n_compiled,
        duration(m.compile),
        duration(m.cached)
    );
    let _ = writeln!(
        out,
        "run: median {}  min {}  over {} runs on {} threads",
        duration(m.median),
        duration(m.min),
        m.runs,
        m.threads
    );
    if let Some(t) = m.transfer {
        let _ = writeln!(
            out,
            "device: run time is the device's, first launch to last (CUDA events); host-device copies {} per run",
            duration(t)
        );
    }
    let _ = writeln!(
        out,
        "total: {} FLOPs, {} bytes → {:.2} GFLOP/s ({:.1}% of peak), {:.2} GB/s ({:.1}% of bandwidth)",
        group(m.flops),
        group(m.bytes),
        m.gflops,
        100.0 * m.gflops / machine.peak_gflops,
        m.gbps,
        100.0 * m.gbps / machine.bandwidth_gbps
    );
    if let Some(p) = predicted_total(m) {
        let _ = writeln!(
            out,
            "cost model: predicted {} ({:.2}× the measured median)",
            duration(p),
            p.as_secs_f64() / m.median.as_secs_f64().max(1e-12)
        );
    }
    for k in &m.kernels {
        let (s, sec) = (&k.stats, k.median.as_secs_f64().max(1e-12));
        let pred = k
            .predicted
            .map_or(String::new(), |p| format!("  (predicted {})", duration(p)));
        let _ = writeln!(
            out,
            "  {:<4} {:>10}  {:>8.2} GFLOP/s  {:>7.2} GB/s  {}{pred}",
            k.name,
            duration(k.median),
            s.flops as f64 / sec / 1e9,
            s.bytes() as f64 / sec / 1e9,
            k.origin
        );
    }
    out
}

/// The sum of the kernels' predicted times, when every kernel has one.
fn predicted_total(m: &Measured) -> Option<Duration> {
    m.kernels.iter().map(|k| k.predicted).sum()
}
