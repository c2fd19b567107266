//! This machine's ceilings: peak FLOP/s and memory bandwidth, the figures `bench`, `cost`
//! and the roofline compare against.
//!
//! How they are measured (a one-off, cached by the CLI):
//! - **Clock.** A dependent chain of integer shift-and-add runs on every core at once (rayon),
//!   three trials of ~40 ms each, best per core; each iteration is two dependent single-cycle
//!   instructions, so `cycles = 2 · iterations` and the clock is `cycles / time`, taken with all
//!   cores busy (the turbo a multi-threaded kernel sees). The slowest core's clock is used.
//! - **Peak FLOP/s** = cores × clock × FLOPs per cycle per core, where FLOPs per cycle comes from
//!   the vector ISA tdsl's kernels use: 64 for f32 with AVX-512F (two 16-lane FMA units, an FMA
//!   counting two FLOPs), 32 with AVX2 + FMA, 16 with AVX but no FMA, 8 with SSE only
//!   (`TDSL_ISA` narrows it with the kernels; a cached figure is rescaled to the cap).
//! - **Bandwidth** = best of several multi-threaded copies of 256 MiB (bytes read + bytes written
//!   over time).

use rayon::prelude::*;
use std::time::{Duration, Instant};

/// What kind of machine a [`Machine`] describes: the cost model's efficiencies differ
/// (`plan::cost::efficiency` for the CPU, `plan::cost::gpu_efficiency` for CUDA).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Target {
    #[default]
    Cpu,
    /// An NVIDIA GPU: `peak_gflops` is its dense 16-bit tensor-core peak.
    Cuda,
    /// The same GPU where f32 products may run on TF32 tensor cores (`--tf32`).
    CudaTf32,
}

/// Measured ceilings of the machine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Machine {
    pub target: Target,
    pub cores: usize,
    pub clock_ghz: f64,
    pub flops_per_cycle: f64,
    /// Peak f32 FLOP/s over all cores, in GFLOP/s.
    pub peak_gflops: f64,
    /// Copy bandwidth over all cores, in GB/s.
    pub bandwidth_gbps: f64,
}

impl Machine {
    /// One line for reports: how the figures were obtained.
    pub fn describe(&self) -> String {
        format!(
            "{} cores at {:.2} GHz (measured under load) × {} f32 FLOP/cycle = {:.1} GFLOP/s peak; {:.1} GB/s copy bandwidth (measured)",
            self.cores, self.clock_ghz, self.flops_per_cycle, self.peak_gflops, self.bandwidth_gbps
        )
    }

    /// The same machine with `fpc` FLOPs per cycle (a cache written without `TDSL_ISA`, read
    /// with it, or the other way round).
    pub fn for_isa(self, fpc: f64) -> Machine {
        if fpc == self.flops_per_cycle || self.flops_per_cycle <= 0.0 {
            return self;
        }
        Machine {
            flops_per_cycle: fpc,
            peak_gflops: self.peak_gflops / self.flops_per_cycle * fpc,
            ..self
        }
    }

    /// A small, stable text form for the cache file.
    pub fn to_text(&self) -> String {
        format!(
            "cores={}\nclock_ghz={}\nflops_per_cycle={}\npeak_gflops={}\nbandwidth_gbps={}\n",
            self.cores, self.clock_ghz, self.flops_per_cycle, self.peak_gflops, self.bandwidth_gbps
        )
    }

    /// Parses [`Machine::to_text`]; `None` if anything is missing or malformed.
    pub fn from_text(s: &str) -> Option<Machine> {
        let get = |k: &str| -> Option<f64> {
            s.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                .and_then(|v| v.trim().parse().ok())
        };
        let m = Machine {
            target: Target::Cpu,
            cores: get("cores")? as usize,
            clock_ghz: get("clock_ghz")?,
            flops_per_cycle: get("flops_per_cycle")?,
            peak_gflops: get("peak_gflops")?,
            bandwidth_gbps: get("bandwidth_gbps")?,
        };
        (m.cores > 0 && m.peak_gflops > 0.0 && m.bandwidth_gbps > 0.0).then_some(m)
    }
}

/// f32 FLOPs per cycle per core for the vector ISA tdsl's kernels use here (the CPU's, narrowed
/// by `TDSL_ISA`: see `tdsl_cpu::spmm::Isa::cap`).
pub fn flops_per_cycle() -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        use tdsl_cpu::spmm::Isa;
        match Isa::detect() {
            Isa::Avx512 => 64.0,
            Isa::Avx2 => 32.0,
            Isa::Scalar if std::arch::is_x86_feature_detected!("avx") && !Isa::capped() => 16.0,
            Isa::Scalar => 8.0,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // 128-bit FMA units (NEON): 2 units × 4 lanes × 2.
        16.0
    }
}

/// Cycles per second of one core running a dependent integer chain for about `d`.
fn clock_hz(d: Duration) -> f64 {
    let mut iters = 1u64 << 20;
    loop {
        let t = Instant::now();
        let mut x = std::hint::black_box(0x9E37_79B9_7F4A_7C15u64);
        for _ in 0..iters {
            // Two dependent single-cycle instructions per iteration.
            x = x.wrapping_add(x >> 3);
        }
        std::hint::black_box(x);
        let el = t.elapsed();
        if el >= d {
            return 2.0 * iters as f64 / el.as_secs_f64();
        }
        iters *= 2;
    }
}

/// Measures the machine (takes about half a second).
pub fn measure() -> Machine {
    let cores = rayon::current_num_threads().max(1);
    // Best of three trials per core: a trial that lost its core to another process for a moment
    // reads low, never high.
    let clocks: Vec<f64> = (0..cores)
        .into_par_iter()
        .map(|_| {
            (0..3)
                .map(|_| clock_hz(Duration::from_millis(40)))
                .fold(0.0, f64::max)
        })
        .collect();
    let clock = clocks.iter().copied().fold(f64::INFINITY, f64::min);
    let fpc = flops_per_cycle();
    let n = (256usize << 20) / 4;
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    // One chunk per core: glibc copies chunks this large with non-temporal stores, so the
    // figure is read + write traffic without the read-for-ownership of cached stores.
    let chunk = n.div_ceil(cores);
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(d, s)| d.copy_from_slice(s));
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    Machine {
        target: Target::Cpu,
        cores,
        clock_ghz: clock / 1e9,
        flops_per_cycle: fpc,
        peak_gflops: cores as f64 * clock * fpc / 1e9,
        bandwidth_gbps: 2.0 * (n * 4) as f64 / best / 1e9,
    }
}

/// Where the measured ceilings are cached: `$XDG_CACHE_HOME/tdsl/machine.txt`, else
/// `$HOME/.cache/tdsl/machine.txt`.
fn cache_path() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("tdsl").join("machine.txt"))
}

/// The CPU's model name (`/proc/cpuinfo`), or the architecture where it cannot be read.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// How long a cached measurement is trusted.
pub const CACHE_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

/// Measurements tried before an implausible result is accepted (for this run only).
const MEASURE_TRIES: usize = 3;

/// The CPU's nominal clock in GHz: `cpuinfo_max_freq` where the kernel exposes it, else the
/// highest `cpu MHz` of `/proc/cpuinfo`, else the `@ 2.45GHz` of the model name.
pub fn nominal_ghz() -> Option<f64> {
    let sys = "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq";
    if let Some(khz) = std::fs::read_to_string(sys)
        .ok()
        .and_then(|t| t.trim().parse::<f64>().ok())
    {
        return Some(khz / 1e6);
    }
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mhz = info
        .lines()
        .filter_map(|l| l.strip_prefix("cpu MHz"))
        .filter_map(|v| {
            v.trim_start_matches([' ', '\t', ':'])
                .trim()
                .parse::<f64>()
                .ok()
        })
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    if let Some(mhz) = mhz {
        return Some(mhz / 1e3);
    }
    let model = cpu_model();
    let ghz = model.split('@').nth(1)?.trim().strip_suffix("GHz")?;
    ghz.trim().parse().ok()
}

/// Whether a measurement can be right: a clock at least half the nominal one (or 0.5 GHz where
/// the nominal clock is unknown) and a positive bandwidth. A core taken by another process
/// during the measurement reads low, never high, so a low clock is a disturbed measurement.
pub fn plausible(m: &Machine) -> bool {
    // An unoptimised build runs the clock loop several times slower than the hardware clock:
    // its floor is lower, so a debug build's measurement is still cached (a release binary
    // finds it implausible and measures again).
    let factor = if cfg!(debug_assertions) { 0.05 } else { 0.5 };
    let floor = nominal_ghz().map_or(factor, |n| factor * n);
    m.clock_ghz >= floor && m.bandwidth_gbps > 0.0 && m.peak_gflops > 0.0
}

/// The best of up to three measurements (highest clock, highest bandwidth), stopping at the
/// first plausible one.
pub fn measure_best() -> Machine {
    let mut best = measure();
    for _ in 1..MEASURE_TRIES {
        if plausible(&best) {
            break;
        }
        let m = measure();
        if m.clock_ghz > best.clock_ghz {
            best = Machine {
                bandwidth_gbps: best.bandwidth_gbps.max(m.bandwidth_gbps),
                ..m
            };
        } else {
            best.bandwidth_gbps = best.bandwidth_gbps.max(m.bandwidth_gbps);
        }
    }
    best
}

/// A cached measurement and its age.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cached {
    pub machine: Machine,
    pub age: Duration,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn cache_key() -> String {
    format!(
        "model={}\nthreads={}\n",
        cpu_model(),
        rayon::current_num_threads()
    )
}

/// The cached measurement for this CPU and thread count, if any (whatever its age).
pub fn cached() -> Option<Cached> {
    let text = std::fs::read_to_string(cache_path()?).ok()?;
    let rest = text.strip_prefix(&cache_key())?;
    let machine = Machine::from_text(rest)?.for_isa(flops_per_cycle());
    let at = rest
        .lines()
        .find_map(|l| l.strip_prefix("measured_at="))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    Some(Cached {
        machine,
        age: Duration::from_secs(now_secs().saturating_sub(at)),
    })
}

/// Measures now and caches the result when it is plausible (an implausible one is used for
/// this run only, never written).
pub fn remeasure() -> Machine {
    let m = measure_best();
    if plausible(&m) {
        if let Some(path) = cache_path() {
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let text = format!("{}{}measured_at={}\n", cache_key(), m.to_text(), now_secs());
            let _ = std::fs::write(&path, text);
        }
    }
    m
}

/// This machine's ceilings: the cached measurement while it is younger than
/// [`CACHE_MAX_AGE`] and plausible, else a new one (cached when plausible).
pub fn measured() -> Machine {
    match cached() {
        Some(c) if c.age <= CACHE_MAX_AGE && plausible(&c.machine) => c.machine,
        _ => remeasure(),
    }
}

/// Re-measures when a run just achieved more FLOP/s than the peak claims (by more than 10%):
/// the cached figures were measured under load. Returns the new ceilings, or `None` when they
/// held. (Bandwidth is not rechecked this way: read-mostly kernels legitimately beat the copy
/// bandwidth the ceiling is measured with.)
pub fn recheck(m: &Machine, achieved_gflops: f64) -> Option<Machine> {
    (achieved_gflops > 1.1 * m.peak_gflops).then(remeasure)
}

/// Physical memory in bytes (`/proc/meminfo`'s MemTotal), or 16 GiB where it cannot be read.
pub fn physical_memory() -> u64 {
    let fallback = 16 << 30;
    let Ok(text) = std::fs::read_to_string("/proc/meminfo") else {
        return fallback;
    };
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb.saturating_mul(1024))
        .unwrap_or(fallback)
}

/// A byte count for people: `512 B`, `1.5 KiB`, `3.0 GiB`.
pub fn bytes_text(n: u128) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trip() {
        let m = Machine {
            target: Target::Cpu,
            cores: 2,
            clock_ghz: 3.2,
            flops_per_cycle: 32.0,
            peak_gflops: 204.8,
            bandwidth_gbps: 31.5,
        };
        assert_eq!(Machine::from_text(&m.to_text()), Some(m));
        assert_eq!(Machine::from_text("cores=2\n"), None);
    }
}
