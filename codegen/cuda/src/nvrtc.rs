//! NVRTC: finding the library and compiling a translation unit to a CUBIN for one `sm_XX`.
//!
//! The library is looked for, in order, at `$TDSL_NVRTC` (a file), in the site-packages of
//! Python (`$TDSL_PYTHON`, then `python3`, `python`: the pip wheels `nvidia-cuda-nvrtc` for
//! CUDA 13, `nvidia-cuda-nvrtc-cu12` for CUDA 12), under `$CUDA_HOME`, `$CUDA_PATH` and
//! `/usr/local/cuda`, and finally by cudarc's own names on the loader's path. A file found is
//! loaded by its absolute path first, so cudarc's later `dlopen("libnvrtc.so.13")` is answered
//! by the loaded object and no `LD_LIBRARY_PATH` is needed. cudarc panics when it cannot load
//! the library, so nothing here calls it before `is_culib_present` says it is there.
//!
//! CUBIN, not PTX: NVRTC runs its own ptxas for the exact architecture, which checks inline PTX
//! at compile time and lets an NVRTC newer than the driver still produce loadable code.
//! Compiled CUBINs are cached on disk (`~/.cache/tdsl/cuda/`), keyed by the source, the
//! architecture, the NVRTC version and the options.

#![allow(unsafe_code)]

use std::collections::BTreeSet;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use cudarc::nvrtc::{result, sys};

/// The NVRTC library this process uses.
#[derive(Debug, Clone)]
pub struct Nvrtc {
    /// (major, minor), as `nvrtcVersion` reports it.
    pub version: (i32, i32),
    /// The file loaded, when found by path (`None`: by the loader's own search).
    pub path: Option<PathBuf>,
    /// The architectures it compiles for (`sm_XX` numbers).
    pub archs: Vec<u32>,
}

/// The loaded NVRTC, found once per process; `Err` says what was looked for.
pub fn nvrtc() -> Result<&'static Nvrtc, String> {
    static NVRTC: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
    NVRTC.get_or_init(load).as_ref().map_err(Clone::clone)
}

const WHEEL_FILES: [&str; 2] = [
    "nvidia/cu13/lib/libnvrtc.so.13",
    "nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
];

/// Candidate files, in search order.
fn candidates() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::env::var_os("TDSL_NVRTC")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    let pythons: Vec<String> = std::env::var("TDSL_PYTHON")
        .into_iter()
        .chain(["python3".to_string(), "python".to_string()])
        .collect();
    for py in pythons {
        let Ok(o) = Command::new(&py)
            .args([
                "-c",
                "import sys, site\nfor p in sys.path + [site.getusersitepackages()]: print(p)",
            ])
            .output()
        else {
            continue;
        };
        for dir in String::from_utf8_lossy(&o.stdout).lines() {
            for f in WHEEL_FILES {
                out.push(Path::new(dir).join(f));
            }
        }
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(d) = std::env::var_os(var) {
            out.push(Path::new(&d).join("lib64/libnvrtc.so"));
        }
    }
    out.push(PathBuf::from("/usr/local/cuda/lib64/libnvrtc.so"));
    out
}

fn load() -> Result<Nvrtc, String> {
    let mut path = None;
    for c in candidates() {
        if c.is_file() {
            // SAFETY: loading NVRTC runs its initialisers, which have no preconditions; the
            // library stays loaded for the life of the process.
            if let Ok(lib) = unsafe { libloading::Library::new(&c) } {
                std::mem::forget(lib);
                path = Some(c);
                break;
            }
        }
    }
    // SAFETY: only tries to load the library by cudarc's names; never panics.
    if !unsafe { sys::is_culib_present() } {
        return Err(
            "no NVRTC library was found (looked at $TDSL_NVRTC, the nvidia-cuda-nvrtc pip wheel \
             in the site-packages of $TDSL_PYTHON, python3 and python, $CUDA_HOME/lib64, \
             $CUDA_PATH/lib64, /usr/local/cuda/lib64, and the loader's path); install it with \
             `pip install nvidia-cuda-nvrtc` (CUDA 13) or `pip install nvidia-cuda-nvrtc-cu12`, \
             or point TDSL_NVRTC at libnvrtc.so"
                .to_string(),
        );
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present (checked above); the pointers are to live locals.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| format!("nvrtcVersion failed: {e:?}"))?;
    let mut n = 0;
    // SAFETY: as above.
    let mut archs = vec![0i32; 0];
    if unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) }
        .result()
        .is_ok()
        && n > 0
    {
        archs = vec![0; n as usize];
        // SAFETY: `archs` has room for the `n` entries NVRTC writes.
        let _ = unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) };
    }
    Ok(Nvrtc {
        version: (major, minor),
        path,
        archs: archs.into_iter().map(|a| a as u32).collect(),
    })
}

/// A compiled unit.
#[derive(Debug, Clone)]
pub struct Cubin {
    pub bytes: Vec<u8>,
    /// NVRTC's log (with `ptxas info` lines when `verbose`).
    pub log: String,
}

/// What ptxas said about one kernel (`--ptxas-options=-v`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelResources {
    pub name: String,
    pub registers: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    /// ptxas serialized the kernel's `wgmma` pipeline or waited for its groups where the
    /// source did not (its notes C7514, C7515, C7517): each `wgmma` then completes before the
    /// next is issued, which costs a large part of the tensor cores' rate.
    pub wgmma_serialized: bool,
}

/// The architecture tdsl compiles a device of compute capability `sm` for: its exact `sm_XX`,
/// with the architecture-specific features of sm_90 (`sm_90a`: `wgmma`), which run on that
/// capability only, as a CUBIN does anyway.
pub fn arch(sm: u32) -> String {
    match sm {
        90 => "sm_90a".to_string(),
        s => format!("sm_{s}"),
    }
}

/// The options every compile uses, for architecture `sm`.
pub fn options(sm: u32, verbose: bool) -> Vec<String> {
    let mut o = vec![
        format!("--gpu-architecture={}", arch(sm)),
        "--std=c++17".to_string(),
        // No contraction of `a*b + c` into one FMA: spec/loop-ir.md §2 rounds every `+ - * /`,
        // as the evaluator, the CPU JIT and the emulation do.
        "--fmad=false".to_string(),
    ];
    if verbose {
        o.push("--ptxas-options=-v".to_string());
    }
    o
}

/// Compiles `src` to a CUBIN for `sm_{sm}` (cached on disk unless `verbose`, whose log is the
/// point). `Err` carries NVRTC's log.
pub fn compile(src: &str, sm: u32, verbose: bool) -> Result<Cubin, String> {
    let lib = nvrtc()?;
    let opts = options(sm, verbose);
    let key = cache_key(src, sm, lib.version, &opts);
    let cached = cache_dir().map(|d| d.join(format!("{key:016x}.cubin")));
    if let (false, Some(path)) = (verbose, &cached) {
        if let Ok(bytes) = std::fs::read(path) {
            if !bytes.is_empty() {
                return Ok(Cubin {
                    bytes,
                    log: String::new(),
                });
            }
        }
    }
    let c = compile_uncached(src, &opts)?;
    if let Some(path) = cached {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        // Written under a temporary name and renamed, so a reader never sees half a file.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &c.bytes).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
    Ok(c)
}

fn compile_uncached(src: &str, opts: &[String]) -> Result<Cubin, String> {
    let csrc = CString::new(src).map_err(|_| "the CUDA source contains a NUL byte".to_string())?;
    let name = CString::new("tdsl.cu").unwrap_or_default();
    let prog = result::create_program(&csrc, Some(&name))
        .map_err(|e| format!("nvrtcCreateProgram failed: {e:?}"))?;
    // SAFETY: `prog` is a live program until destroyed below; NVRTC copies the options.
    let res = unsafe { result::compile_program(prog, opts) };
    // SAFETY: as above.
    let log = unsafe { result::get_program_log(prog) }
        .map(|raw| {
            // SAFETY: NVRTC's log is NUL-terminated.
            unsafe { CStr::from_ptr(raw.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    let out = match res {
        Err(e) => Err(format!("NVRTC failed ({e:?}):\n{log}")),
        Ok(()) => {
            let mut n = 0usize;
            // SAFETY: the program compiled; `n` is a live local.
            unsafe { sys::nvrtcGetCUBINSize(prog, &mut n) }
                .result()
                .map_err(|e| format!("nvrtcGetCUBINSize failed: {e:?}"))
                .and_then(|()| {
                    let mut bytes = vec![0u8; n];
                    // SAFETY: `bytes` has the size NVRTC reported.
                    unsafe { sys::nvrtcGetCUBIN(prog, bytes.as_mut_ptr().cast()) }
                        .result()
                        .map_err(|e| format!("nvrtcGetCUBIN failed: {e:?}"))?;
                    if bytes.is_empty() {
                        return Err("NVRTC produced no CUBIN (a virtual architecture?)".into());
                    }
                    Ok(Cubin {
                        bytes,
                        log: log.clone(),
                    })
                })
        }
    };
    // SAFETY: destroyed once, after its last use.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

/// Registers, spills and a serialized `wgmma` pipeline per kernel, from a
/// `--ptxas-options=-v` log.
pub fn resources(log: &str) -> Vec<KernelResources> {
    let mut out: Vec<KernelResources> = Vec::new();
    // ptxas names the function in its wgmma notes, which may come before the function's entry.
    let serialized: BTreeSet<&str> = log
        .lines()
        .filter(|l| {
            ["(C7514)", "(C7515)", "(C7517)"]
                .iter()
                .any(|c| l.contains(c))
        })
        .filter_map(|l| l.split("function '").nth(1)?.split('\'').next())
        .collect();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            out.push(KernelResources {
                wgmma_serialized: serialized.contains(name.as_str()),
                name,
                registers: 0,
                spill_stores: 0,
                spill_loads: 0,
            });
        } else if let Some(k) = out.last_mut() {
            let num_before = |word: &str| -> Option<u32> {
                let i = line.find(word)?;
                line[..i].split_whitespace().last()?.parse().ok()
            };
            if let Some(r) = num_before(" registers") {
                k.registers = r;
            }
            if let Some(s) = num_before(" bytes spill stores") {
                k.spill_stores = s;
            }
            if let Some(s) = num_before(" bytes spill loads") {
                k.spill_loads = s;
            }
        }
    }
    out
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("TDSL_CACHE_DIR") {
        return Some(Path::new(&d).join("cuda"));
    }
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/tdsl/cuda"))
}

/// FNV-1a over everything that changes the CUBIN (stable across builds, unlike std's hasher).
fn cache_key(src: &str, sm: u32, version: (i32, i32), opts: &[String]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    eat(src.as_bytes());
    eat(&sm.to_le_bytes());
    eat(&version.0.to_le_bytes());
    eat(&version.1.to_le_bytes());
    for o in opts {
        eat(o.as_bytes());
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_logs_give_registers_and_spills_per_kernel() {
        let log = "ptxas info    : (C7517) wgmma.wait_group is injected in around line 9 by compiler to allow use of registers defined by GMMA in function 'k1_0'\n\
                   ptxas info    : 0 bytes gmem\n\
                   ptxas info    : Compiling entry function 'k0_0' for 'sm_90'\n\
                   ptxas info    : Function properties for k0_0\n\
                   \x20   8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
                   ptxas info    : Used 30 registers, used 0 barriers, 368 bytes cmem[0]\n\
                   ptxas info    : Compiling entry function 'k1_0' for 'sm_90'\n\
                   ptxas info    : Used 8 registers\n";
        let r = resources(log);
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0],
            KernelResources {
                name: "k0_0".into(),
                registers: 30,
                spill_stores: 4,
                spill_loads: 12,
                wgmma_serialized: false,
            }
        );
        assert_eq!((r[1].registers, r[1].spill_stores), (8, 0));
        assert!(r[1].wgmma_serialized);
    }

    #[test]
    fn cache_keys_change_with_every_input() {
        let o = options(90, false);
        let k = cache_key("a", 90, (13, 0), &o);
        assert_ne!(k, cache_key("b", 90, (13, 0), &o));
        assert_ne!(k, cache_key("a", 80, (13, 0), &o));
        assert_ne!(k, cache_key("a", 90, (12, 9), &o));
        assert_ne!(k, cache_key("a", 90, (13, 0), &options(90, true)));
        assert_eq!(k, cache_key("a", 90, (13, 0), &o));
    }
}
