//! Host emulation of the CUDA backend: the translation unit NVRTC compiles, with the host
//! prelude (`kernels/host.h`) instead of the device one, compiled by the system C++ compiler.
//! Machines without a GPU run the generated kernels this way, so the differential tests check
//! their index math, types and rounding against the interpreter.
//!
//! Warps have 32 lanes and block rows 256 threads, as on the device. A launch whose threads work
//! together ([`Launch::cooperative`]: a warp or a block per grid iteration, a tile, a
//! tensor-core template) runs every thread of a block as a fiber (`kernels/threads_host.h`):
//! shuffles and barriers wait for their lanes and are then performed in software, as are the
//! tensor-core instructions (`kernels/mma_host.h`), so the lane splits, the shuffle and
//! shared-memory reductions and the templates' fragment, swizzle and pipeline logic are checked,
//! and a barrier or warp instruction some threads miss stops the run. Other launches run their
//! threads one after another. A generic kernel's grid is cut to [`EMU_BLOCKS`] blocks, so its
//! grid-stride loops take more than one turn.
//!
//! Threads run one at a time, so a race shows only through order, unless the emulator is built
//! with [`Check::Races`]: then it is compiled with ThreadSanitizer, every thread is a fiber the
//! race detector tells apart, and only the instructions that gather threads order them
//! (`kernels/threads_host.h`), so an unordered access to a place another thread writes is
//! reported whatever the schedule, with the kernel, the two lines and the threads.
//!
//! With [`Order::Shuffled`] (the default) the blocks of a launch run in a shuffled order;
//! within a block the scheduler runs the first warp with a ready lane in a ranking of the warps
//! drawn afresh at each block barrier, its ready lanes in random order. A warp thus runs ahead
//! of the others as far as its barriers let it, and lane 0 seldom goes first: a read that a
//! missing barrier leaves unordered with another thread's write sees the value from before the
//! write, or a value from the writer's next round. Unordered writes of the same value, and the
//! result of two threads' unordered writes to one place, do not show in the values; the race
//! check reports them.
//!
//! What emulation cannot show: the device's math library (`expf` and friends differ by an ulp or two), and the PTX conversions (`cvt`),
//! which the host prelude replaces with software conversions.
//!
//! Each segment of launches between host steps (`sparsify`, the row bins of sparse-row
//! launches) is one run of the emulator program: it reads every buffer, scratch included, from
//! a file, runs the segment's launches and writes every buffer back.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use tdsl_loop::backend::{BackendError, ErrorKind};
use tdsl_loop::{BufId, Data, LoopProgram};

use crate::map::{Launch, Step};
use crate::render::{render_unit, UnitTarget};
use crate::tensor::{TensorCores, Variants};

/// A C++ compiler to emulate with: `$CXX`, else `c++`, `g++` or `clang++` if one runs.
pub fn compiler() -> Option<PathBuf> {
    let candidates: Vec<String> = std::env::var("CXX")
        .into_iter()
        .chain(["c++", "g++", "clang++"].map(String::from))
        .collect();
    candidates.into_iter().map(PathBuf::from).find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// The emulator program's source: the unit with the host prelude and a `main` that runs one
/// segment (`argv[2]`) over the buffers in the file `argv[1]`: every buffer of `p`, the
/// launches' scratch after the caller's. With [`Check::Races`] every launch runs on fibers.
pub fn emulator_source(p: &LoopProgram, steps: &[Step], check: Check) -> String {
    let target = match check {
        Check::Results => UnitTarget::Host,
        Check::Races => UnitTarget::HostFibers,
    };
    let mut src = render_unit(p, steps, target);
    let mut main = String::new();
    let _ = writeln!(main, "\nint main(int argc, char** argv) {{");
    let _ = writeln!(main, "  if (argc != 3) return 2;");
    let _ = writeln!(main, "  FILE* f = fopen(argv[1], \"rb\");");
    let _ = writeln!(main, "  if (!f) return 3;");
    for (i, b) in p.buffers.iter().enumerate() {
        let bytes = b.elems * b.ty.size_bytes();
        let _ = writeln!(
            main,
            "  {t}* b{i} = ({t}*)calloc({n} + 1, sizeof({t}));",
            t = crate::render::c_type(b.ty),
            n = b.elems
        );
        let _ = writeln!(
            main,
            "  if (fread(b{i}, 1, {bytes}, f) != {bytes}ULL) return 4;"
        );
    }
    let _ = writeln!(main, "  fclose(f);");
    let _ = writeln!(main, "  int segment = atoi(argv[2]);");
    let mut segment = 0;
    let _ = writeln!(main, "  if (segment == 0) {{");
    for step in steps {
        match step {
            Step::Launch(l) => launch_call(&mut main, l, check),
            Step::Host { .. } | Step::Table { .. } => {
                segment += 1;
                let _ = writeln!(main, "  }}\n  if (segment == {segment}) {{");
            }
        }
    }
    let _ = writeln!(main, "  }}");
    let _ = writeln!(main, "  f = fopen(argv[1], \"wb\");");
    let _ = writeln!(main, "  if (!f) return 5;");
    for (i, b) in p.buffers.iter().enumerate() {
        let bytes = b.elems * b.ty.size_bytes();
        let _ = writeln!(main, "  fwrite(b{i}, 1, {bytes}, f);");
    }
    let _ = writeln!(main, "  fclose(f);\n  return 0;\n}}");
    src.push_str(&main);
    src
}

/// The most blocks an emulated launch of a generic kernel runs. Its grid loops stride over the
/// rest, so emulated launches take the strided path that large device launches take.
pub const EMU_BLOCKS: u64 = 4;

fn launch_call(out: &mut String, l: &Launch, check: Check) {
    let args: Vec<String> = l.params.iter().map(|b| format!("b{}", b.0)).collect();
    let call = format!("{}({})", l.name, args.join(", "));
    let (blocks, threads) = l.shape();
    // A tensor-core template's shape is its tiles, every block of it; a generic kernel's grid
    // loops stride over any shape.
    let blocks = match l.lib.is_some() && !l.reduce {
        true => blocks,
        false => blocks.min(EMU_BLOCKS),
    };
    // Race-checked, launches whose blocks share nothing (no shared memory: threads alone, or
    // warps that meet only at shuffles and warp barriers) run every block's threads as
    // unordered fibers of one run, so a race between two blocks shows too.
    let apart = check == Check::Races
        && (!l.cooperative() || (l.split == crate::map::Split::Warp && l.lib.is_none()));
    if apart {
        let _ = writeln!(
            out,
            "    tdsl_emu_launch_apart({blocks}, {threads}, [&] {{ {call}; }});"
        );
    } else if l.cooperative() {
        // Every thread of a block as a fiber, meeting at the shuffles, barriers and warp-wide
        // instructions (`kernels/threads_host.h`).
        let _ = writeln!(
            out,
            "    tdsl_emu_launch({blocks}, {threads}, [&] {{ {call}; }});"
        );
    } else {
        // Threads that share nothing run one after another, in a fresh order for each block.
        let _ = writeln!(
            out,
            "    {{\n      gridDim.x = {blocks}; blockDim.x = {threads};\n      long long bo[{blocks}], to[{threads}];\n      tdsl_emu_order(bo, {blocks});\n      for (long long bx : bo) {{\n        tdsl_emu_order(to, {threads});\n        for (long long tx : to) {{ blockIdx.x = bx; threadIdx.x = tx; {call}; }}\n      }}\n    }}"
        );
    }
}

/// When the emulated `cp.async` copies of the tensor-core templates land. Each timing shows one
/// kind of pipeline bug that the other hides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copies {
    /// At the `cp.async.wait_group` that retires their group: a read of a stage before its
    /// wait sees stale data.
    Late,
    /// When issued: a stage overwritten while a warp may still read it shows.
    Early,
}

/// The order in which the emulation runs what the device runs at once: the blocks of a launch,
/// and a block's threads between two instructions that gather them (a barrier, a shuffle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Thread and block order: a write by thread 0 is seen by every later thread, barrier or
    /// not.
    InOrder,
    /// Blocks shuffled; within a block, warps ranked at random afresh at every block barrier,
    /// the first warp with a ready lane running, its lanes in random order (all drawn from the
    /// sequence this seed picks): a warp runs ahead of the others as far as it can, so a read
    /// that a missing barrier leaves unordered with another thread's write sees the wrong
    /// value. Seed 0 is taken as 1.
    Shuffled(u64),
}

/// How an emulated run orders what happens at once on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub copies: Copies,
    pub order: Order,
}

impl Default for Schedule {
    /// Copies land late, threads run shuffled (seed 1).
    fn default() -> Schedule {
        Schedule {
            copies: Copies::Late,
            order: Order::Shuffled(1),
        }
    }
}

/// What an emulated run checks besides its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Check {
    /// The results: a race shows when the schedule's order makes a value wrong.
    #[default]
    Results,
    /// Every data race between the emulated threads as well: the emulator is compiled with
    /// ThreadSanitizer, and two threads' accesses to one place, one a write, that no barrier,
    /// warp instruction or launch boundary orders fail the run ([`race_check`] says whether
    /// the compiler can). Blocks of a launch that uses shared memory (a block per row, a tile,
    /// a tensor-core template) are ordered, as they reuse the statics that stand for it; other
    /// launches (a thread or a warp per grid iteration) run every block's threads unordered.
    /// About ten times slower.
    Races,
}

impl Check {
    /// [`Check::Races`] when `TDSL_EMU_RACES=1`, else [`Check::Results`]: so any emulation
    /// test can be run race-checked (`TDSL_EMU_RACES=1 cargo test --release -- prop_sparse`).
    pub fn from_env() -> Check {
        match std::env::var("TDSL_EMU_RACES").as_deref() {
            Ok("1") => Check::Races,
            _ => Check::Results,
        }
    }
}

/// Whether `cxx` builds and runs ThreadSanitizer programs ([`Check::Races`]), or why not.
pub fn race_check(cxx: &Path) -> Result<(), String> {
    static CHECKED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("tdsl-tsan-probe-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let (cpp, exe) = (dir.join("probe.cpp"), dir.join("probe"));
            let src = "#include <sanitizer/tsan_interface.h>\nint main() { void *f = \
                       __tsan_create_fiber(0); __tsan_destroy_fiber(f); return 0; }\n";
            std::fs::write(&cpp, src).map_err(|e| e.to_string())?;
            let built = Command::new(cxx)
                .args(["-fsanitize=thread", "-o"])
                .arg(&exe)
                .arg(&cpp)
                .output()
                .map_err(|e| format!("{}: {e}", cxx.display()))?;
            let ran = built
                .status
                .success()
                .then(|| Command::new(&exe).output().ok())
                .flatten();
            let _ = std::fs::remove_dir_all(&dir);
            match ran {
                Some(o) if o.status.success() => Ok(()),
                Some(o) => Err(format!(
                    "a ThreadSanitizer program does not run here: {}",
                    String::from_utf8_lossy(&o.stderr)
                        .lines()
                        .next()
                        .unwrap_or("")
                )),
                None => Err(format!(
                    "{} cannot build ThreadSanitizer programs (install libtsan): {}",
                    cxx.display(),
                    String::from_utf8_lossy(&built.stderr)
                        .lines()
                        .next()
                        .unwrap_or("")
                )),
            }
        })
        .clone()
}

/// The exit status the race-checked emulator stops with at its first race.
const RACE_EXIT: i32 = 66;

/// A compiled emulator for one program.
pub struct Emulator {
    /// The mapped program; its first `host` buffers are the caller's, the rest scratch.
    program: LoopProgram,
    host: usize,
    steps: Vec<Step>,
    /// The index tables of earlier runs (the device's cache, [`crate::walk::Tables`]).
    tables: crate::walk::Tables,
    exe: PathBuf,
    dir: PathBuf,
    check: Check,
}

static RUNS: AtomicUsize = AtomicUsize::new(0);

impl Emulator {
    /// Maps `p` for the GPU, renders it with the host prelude and compiles it with `cxx`.
    /// Products keep their generic kernels: [`Emulator::compile_with`] runs the tensor-core ones.
    pub fn compile(p: &LoopProgram, cxx: &Path) -> Result<Emulator, String> {
        Emulator::compile_with(p, cxx, TensorCores::None)
    }

    /// [`Emulator::compile`] as for a device with the tensor-core instructions `tc`: the
    /// templates of `kernels/mma.cuh` run on the emulated instructions of `kernels/mma_host.h`.
    pub fn compile_with(p: &LoopProgram, cxx: &Path, tc: TensorCores) -> Result<Emulator, String> {
        Emulator::compile_variants(p, cxx, tc, Variants::from_env())
    }

    /// [`Emulator::compile_with`] with the template variants `v` (race-checked when
    /// `TDSL_EMU_RACES=1`, [`Check::from_env`]).
    pub fn compile_variants(
        p: &LoopProgram,
        cxx: &Path,
        tc: TensorCores,
        v: Variants,
    ) -> Result<Emulator, String> {
        Emulator::compile_checked(p, cxx, tc, v, Check::from_env())
    }

    /// [`Emulator::compile_variants`] with the checks `check` ([`Check::Races`] needs
    /// [`race_check`]).
    pub fn compile_checked(
        p: &LoopProgram,
        cxx: &Path,
        tc: TensorCores,
        v: Variants,
        check: Check,
    ) -> Result<Emulator, String> {
        if check == Check::Races {
            race_check(cxx)?;
        }
        let (program, steps) = crate::map::map_program_variants(p, tc, v);
        let src = emulator_source(&program, &steps, check);
        let dir = std::env::temp_dir().join(format!(
            "tdsl-emulate-{}-{}",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let cpp = dir.join("unit.cpp");
        std::fs::write(&cpp, &src).map_err(|e| e.to_string())?;
        let exe = dir.join("unit");
        let mut cmd = Command::new(cxx);
        cmd.args(["-O1", "-std=c++17", "-w"]);
        if check == Check::Races {
            // Line tables, for the report's lines.
            cmd.args(["-fsanitize=thread", "-g1"]);
        }
        if cfg!(target_arch = "x86_64") {
            // The fibers switch stacks with a plain `ret` (`kernels/threads_host.h`), which a
            // shadow stack would refuse: leave the program unmarked, so none is enabled.
            cmd.arg("-fcf-protection=none");
        }
        let out = cmd
            .arg("-o")
            .arg(&exe)
            .arg(&cpp)
            .arg("-lm")
            .output()
            .map_err(|e| format!("{}: {e}", cxx.display()))?;
        if !out.status.success() {
            return Err(format!(
                "the emulated unit did not compile:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(Emulator {
            host: p.buffers.len(),
            program,
            steps,
            tables: Default::default(),
            exe,
            dir,
            check,
        })
    }

    /// Runs every step over the host buffer set `bufs` (inputs bound, the rest zeroed), as the
    /// device does ([`crate::walk`]): index tables built on the host and kept for the next run
    /// over the same pattern, `sparsify` on the host.
    /// Threads run in shuffled order and `cp.async` copies land late ([`Schedule::default`]).
    pub fn run(&self, bufs: &mut [Data]) -> Result<(), String> {
        self.run_with(bufs, Schedule::default())
    }

    /// [`Emulator::run`] with the schedule `schedule`.
    pub fn run_with(&self, bufs: &mut [Data], schedule: Schedule) -> Result<(), String> {
        crate::check_buffers(&self.program.buffers[..self.host], bufs)?;
        // The launches' scratch lives from one segment to the next (an index table is written
        // between them). It starts as NaN (i32: -2^31), as unset device memory might be, so a
        // read before a write shows.
        let scratch = self.program.buffers[self.host..]
            .iter()
            .map(|b| poisoned(b.ty, b.elems as usize))
            .collect();
        let mut m = Emulated {
            emu: self,
            bufs,
            scratch,
            segment: 0,
            schedule,
        };
        crate::walk::walk(&self.program, &self.steps, &self.tables, &mut m)
            .map_err(|e| e.message)?;
        Ok(())
    }

    /// Runs segment `segment` (the launches between two host steps) of the emulator program
    /// over `bufs` and `scratch`, every buffer through one file.
    fn run_segment(
        &self,
        bufs: &mut [Data],
        scratch: &mut [Data],
        segment: usize,
        schedule: Schedule,
    ) -> Result<(), String> {
        let file = self.dir.join("buffers.bin");
        let mut bytes = Vec::new();
        for (b, buf) in bufs.iter().chain(scratch.iter()).zip(&self.program.buffers) {
            let n = bytes.len() + (buf.elems * buf.ty.size_bytes()) as usize;
            bytes.extend(b.to_le_bytes());
            bytes.resize(n, 0);
        }
        std::fs::write(&file, bytes).map_err(|e| e.to_string())?;
        let ran = Command::new(&self.exe)
            .env(
                "TDSL_EMU_COPIES",
                match schedule.copies {
                    Copies::Late => "late",
                    Copies::Early => "early",
                },
            )
            .env(
                "TDSL_EMU_SEED",
                match schedule.order {
                    Order::InOrder => 0,
                    // The emulator reads 0 as thread order.
                    Order::Shuffled(seed) => seed.max(1),
                }
                .to_string(),
            )
            .env(
                "TSAN_OPTIONS",
                format!("halt_on_error=1:exitcode={RACE_EXIT}:history_size=4:atexit_sleep_ms=0"),
            )
            .arg(&file)
            .arg(segment.to_string())
            .output()
            .map_err(|e| e.to_string())?;
        if !ran.status.success() {
            let err = String::from_utf8_lossy(&ran.stderr);
            if self.check == Check::Races && ran.status.code() == Some(RACE_EXIT) {
                let unit = std::fs::read_to_string(self.dir.join("unit.cpp")).unwrap_or_default();
                return Err(race_report(&err, &unit, &self.steps));
            }
            // The emulator's own message (a deadlock, a bad address) is its last line.
            let last = err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            return Err(format!("the emulator failed: {}: {last}", ran.status));
        }
        let bytes = std::fs::read(&file).map_err(|e| e.to_string())?;
        let mut at = 0;
        for (b, buf) in bufs
            .iter_mut()
            .chain(scratch.iter_mut())
            .zip(&self.program.buffers)
        {
            let n = (buf.elems * buf.ty.size_bytes()) as usize;
            let part = bytes
                .get(at..at + n)
                .ok_or("the emulator wrote too few bytes")?;
            if !buf.role.is_input() {
                *b = Data::from_le_bytes(buf.ty, part);
            }
            at += n;
        }
        Ok(())
    }
}

/// A run's host buffers, the caller's and the scratch: the emulation's side of [`crate::walk`].
/// Launches run a segment at a time, when the walk settles (the emulator program runs a
/// segment's launches in order, each with its own shape).
struct Emulated<'a> {
    emu: &'a Emulator,
    bufs: &'a mut [Data],
    scratch: Vec<Data>,
    segment: usize,
    schedule: Schedule,
}

impl Emulated<'_> {
    fn buf(&mut self, b: BufId) -> &mut Data {
        let i = b.0 as usize;
        match i.checked_sub(self.emu.host) {
            Some(s) => &mut self.scratch[s],
            None => &mut self.bufs[i],
        }
    }
}

impl crate::walk::Machine for Emulated<'_> {
    fn input(&self, b: BufId) -> &Data {
        &self.bufs[b.0 as usize]
    }

    fn read(&mut self, b: BufId) -> Result<Data, BackendError> {
        Ok(self.buf(b).clone())
    }

    fn write(&mut self, b: BufId, data: &Data) -> Result<(), BackendError> {
        let to = self.buf(b);
        if to.len() == data.len() {
            *to = data.clone();
        } else {
            let (from, into) = (data.as_bytes(), to.as_bytes_mut());
            let n = from.len().min(into.len());
            into[..n].copy_from_slice(&from[..n]);
        }
        Ok(())
    }

    fn launch(&mut self, _: usize, _: &Launch, _: (u64, u64)) -> Result<(), BackendError> {
        // In the current segment of the emulator program, which runs when the walk settles.
        Ok(())
    }

    fn settle(&mut self) -> Result<(), BackendError> {
        self.emu
            .run_segment(self.bufs, &mut self.scratch, self.segment, self.schedule)
            .map_err(|m| BackendError::new(ErrorKind::Run, m))?;
        self.segment += 1;
        Ok(())
    }
}

/// ThreadSanitizer's report (`stderr`) of the race that stopped the emulator, in a few lines:
/// the kernel, each access (what, which thread, where in the unit and the line's text) and the
/// place.
fn race_report(stderr: &str, unit: &str, steps: &[Step]) -> String {
    let is_launch = |f: &str| {
        steps
            .iter()
            .any(|s| matches!(s, Step::Launch(l) if l.name == f))
    };
    let lines: Vec<&str> = stderr.lines().collect();
    let Some(start) = lines
        .iter()
        .position(|l| l.contains("WARNING: ThreadSanitizer:"))
    else {
        return format!("the race check failed:\n{stderr}");
    };
    let what = lines[start]
        .split("ThreadSanitizer: ")
        .nth(1)
        .and_then(|w| w.split(" (pid").next())
        .unwrap_or("data race");
    // Thread names: `  Thread T2 'block 0 thread 1' (tid=..., running) created by ...`.
    let names: Vec<(&str, &str)> = lines[start..]
        .iter()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("Thread ")?;
            let (id, rest) = rest.split_once(" '")?;
            Some((id, rest.split_once('\'')?.0))
        })
        .collect();
    let mut out = Vec::new();
    let mut kernel = None;
    let mut i = start + 1;
    while i < lines.len() && !lines[i].starts_with("SUMMARY") && !lines[i].starts_with("=====") {
        let l = lines[i].trim();
        i += 1;
        if let Some(loc) = l.strip_prefix("Location is ") {
            out.push(format!(
                "  the place: {}",
                loc.split(" at 0x").next().unwrap_or(loc)
            ));
            continue;
        }
        let Some((access, by)) = l.split_once(" by ") else {
            continue;
        };
        if !access.contains(" of size ") || !by.ends_with(':') {
            continue;
        }
        let access = access
            .split(" at 0x")
            .next()
            .unwrap_or(access)
            .to_lowercase();
        let by = by.trim_end_matches(':');
        let thread = by.strip_prefix("thread ").unwrap_or(by);
        let thread = names
            .iter()
            .find(|(id, _)| *id == thread)
            .map_or(by.to_string(), |(_, n)| n.to_string());
        // Its frames: `#k function file:line (module+offset)`; the first in the unit says where.
        let mut at = None;
        while i < lines.len() && lines[i].trim_start().starts_with('#') {
            let frame = lines[i].trim_start();
            i += 1;
            let mut parts = frame.splitn(3, ' ');
            let (_, func, place) = (parts.next(), parts.next().unwrap_or(""), parts.next());
            let Some(line) = place
                .and_then(|p| p.split(' ').next())
                .and_then(|p| p.rsplit_once(':'))
                .filter(|(file, _)| file.ends_with("unit.cpp"))
                .and_then(|(_, n)| n.parse::<usize>().ok())
            else {
                continue;
            };
            if at.is_none() {
                at = Some((func.to_string(), line));
            }
            if kernel.is_none() && is_launch(func) {
                kernel = Some(func.to_string());
            }
        }
        match at {
            Some((func, line)) => {
                let text = unit.lines().nth(line - 1).unwrap_or("").trim();
                out.push(format!(
                    "  {access} by {thread}, line {line} of the unit, in {func}: `{text}`"
                ));
            }
            None => out.push(format!("  {access} by {thread} (no frame in the unit)")),
        }
    }
    format!(
        "a {what} in kernel {} (the race check):\n{}",
        kernel.as_deref().unwrap_or("?"),
        out.join("\n")
    )
}

/// `n` values of type `ty` that no launch should read before writing: NaN, or -2^31.
fn poisoned(ty: tdsl_loop::ElemType, n: usize) -> Data {
    use tdsl_loop::ElemType as T;
    match ty {
        T::F32 => Data::F32(vec![f32::NAN; n]),
        T::F64 => Data::F64(vec![f64::NAN; n]),
        T::F16 => Data::F16(vec![half::f16::NAN; n]),
        T::BF16 => Data::BF16(vec![half::bf16::NAN; n]),
        T::I32 => Data::I32(vec![i32::MIN; n]),
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report as ThreadSanitizer prints it (GCC 12's runtime), with the emulator's names.
    const REPORT: &str = "==================
WARNING: ThreadSanitizer: data race (pid=29381)
  Read of size 8 at 0x55719e1b4160 by thread T33:
    #0 tdsl_helper /tmp/tdsl-emulate-1-0/unit.cpp:3 (unit+0x1429)
    #1 k0_0 /tmp/tdsl-emulate-1-0/unit.cpp:4 (unit+0x1429)
    #2 operator() /tmp/tdsl-emulate-1-0/unit.cpp:9 (unit+0x1429)

  Previous write of size 8 at 0x55719e1b4160 by thread T1:
    #0 k0_0 /tmp/tdsl-emulate-1-0/unit.cpp:5 (unit+0x13fd)
    #1 operator() /tmp/tdsl-emulate-1-0/unit.cpp:9 (unit+0x13fd)

  Location is global 'k0_0(float*)::tdsl_red' of size 64 at 0x55719e1b4160 (unit+0x7160)

  Thread T33 'block 2 thread 32' (tid=0, running) created by main thread at:
    #0 tdsl_race_block_start /tmp/tdsl-emulate-1-0/unit.cpp:7 (unit+0x3092)

  Thread T1 'block 2 thread 0' (tid=0, running) created by main thread at:
    #0 tdsl_race_block_start /tmp/tdsl-emulate-1-0/unit.cpp:7 (unit+0x3092)

SUMMARY: ThreadSanitizer: data race /tmp/tdsl-emulate-1-0/unit.cpp:3 in tdsl_helper
==================
";

    #[test]
    fn a_race_report_names_the_kernel_the_threads_the_lines_and_the_place() {
        let unit = "a\nb\n  return tdsl_red[0];\n  x = tdsl_helper();\n  tdsl_red[w] = a0;\n";
        let launch = Launch {
            name: "k0_0".into(),
            kernel: 0,
            grid: vec![],
            body: vec![],
            params: vec![],
            split: crate::map::Split::Thread,
            lib: None,
            reduce: false,
            tile: None,
            rows: None,
        };
        let got = race_report(REPORT, unit, &[Step::Launch(launch)]);
        assert_eq!(
            got,
            "a data race in kernel k0_0 (the race check):\n  \
             read of size 8 by block 2 thread 32, line 3 of the unit, in tdsl_helper: \
             `return tdsl_red[0];`\n  \
             previous write of size 8 by block 2 thread 0, line 5 of the unit, in k0_0: \
             `tdsl_red[w] = a0;`\n  \
             the place: global 'k0_0(float*)::tdsl_red' of size 64"
        );
        // Not a report: the text as it is.
        assert!(race_report("boom", unit, &[]).ends_with("boom"));
    }
}
