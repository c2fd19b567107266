//! The one module with `unsafe`: the host target, JIT modules and their code memory, calling
//! generated functions, and calling the `gemm` crate on raw pointers.
//!
//! Invariants every `unsafe` block here relies on:
//! - a [`KernelFn`] holds an `Arc` of the [`CodeHandle`] that owns its code, so the code outlives
//!   every call, and the memory is freed only when the last handle goes;
//! - generated code is called only with a [`BufPtrs`] built from the very buffers that
//!   `check::check_bounds` accepted (the [`Checked`] token), so every access is in bounds;
//! - GEMM views are bounds-checked here, on the slices they point into, right before the call.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::FuncId;
use rayon::prelude::*;
use tdsl_loop::Data;

use crate::check::Checked;
use crate::error::CodegenError;
use crate::helpers;

/// The host ISA with its flags, as the JIT compiles for it.
#[derive(Clone)]
pub(crate) struct Target {
    pub isa: OwnedTargetIsa,
    /// `has_avx && has_fma`: only then does `fma` become `vfmadd` (TOOLCHAIN.md §1e).
    pub has_fma: bool,
    /// Triple, ISA flags and optimisation level, for the kernel cache key.
    pub key: String,
}

/// The host ISA from `cranelift_native`, with `opt_level` ("none", "speed").
pub(crate) fn host_target(opt_level: &str) -> Result<Target, CodegenError> {
    let err = |e: String| CodegenError::Target(e);
    let mut fb = settings::builder();
    fb.set("opt_level", opt_level)
        .map_err(|e| err(e.to_string()))?;
    fb.set("is_pic", "false").map_err(|e| err(e.to_string()))?;
    fb.set("use_colocated_libcalls", "false")
        .map_err(|e| err(e.to_string()))?;
    let ib = cranelift_native::builder().map_err(|e| err(e.to_string()))?;
    let isa = ib
        .finish(settings::Flags::new(fb))
        .map_err(|e| err(e.to_string()))?;
    let flags = isa.isa_flags();
    let on = |n: &str| {
        flags
            .iter()
            .any(|v| v.name == n && v.as_bool() == Some(true))
    };
    let has_fma = on("has_avx") && on("has_fma");
    let list: Vec<String> = flags.iter().map(|v| v.to_string()).collect();
    let key = format!("{} opt_level={opt_level} {}", isa.triple(), list.join(","));
    Ok(Target { isa, has_fma, key })
}

/// A fresh JIT module for `target` with every runtime helper registered.
pub(crate) fn new_module(target: &Target) -> JITModule {
    let mut b = JITBuilder::with_isa(
        target.isa.clone(),
        cranelift_module::default_libcall_names(),
    );
    // Every function generated code may call: the scalar helpers and the ahead-of-time
    // vector kernels (one list, so a call the lowering emits always resolves).
    let calls = helpers::symbols()
        .into_iter()
        .chain(crate::vmath::symbols())
        .chain(crate::varith::symbols())
        .chain(crate::transpose::symbols())
        .chain(crate::dot::symbols());
    for (name, ptr) in calls {
        b.symbol(name, ptr);
    }
    JITModule::new(b)
}

/// Frees the code of a module from which no function pointer was taken (used for `disasm`).
pub(crate) fn discard_module(module: JITModule) {
    // SAFETY: the module was never finalized and no pointer into it was handed out, so nothing
    // can run or reference its memory.
    unsafe { module.free_memory() }
}

/// Owns the code memory of one finalized JIT module.
pub(crate) struct CodeHandle {
    module: Mutex<Option<JITModule>>,
}

impl Drop for CodeHandle {
    fn drop(&mut self) {
        let module = match self.module.get_mut() {
            Ok(m) => m.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(m) = module {
            // SAFETY: every `KernelFn` pointing into this module holds an `Arc<CodeHandle>`;
            // this runs when the last one is gone, so no function of the module is running or
            // will be called again.
            unsafe { m.free_memory() }
        }
    }
}

/// Finalizes `module` and returns a callable for each of `ids`, in order.
pub(crate) fn finalize(
    mut module: JITModule,
    ids: &[FuncId],
) -> Result<Vec<KernelFn>, CodegenError> {
    module
        .finalize_definitions()
        .map_err(|e| CodegenError::Cranelift {
            kernel: "(finalize)".into(),
            message: e.to_string(),
        })?;
    let addrs: Vec<usize> = ids
        .iter()
        .map(|id| module.get_finalized_function(*id) as usize)
        .collect();
    let code = Arc::new(CodeHandle {
        module: Mutex::new(Some(module)),
    });
    Ok(addrs
        .into_iter()
        .map(|addr| KernelFn {
            code: code.clone(),
            addr,
        })
        .collect())
}

/// A generated function `extern "C" fn(bufs: *const *mut u8, lo: u64, hi: u64)`.
#[derive(Clone)]
pub(crate) struct KernelFn {
    code: Arc<CodeHandle>,
    addr: usize,
}

type RawKernel = extern "C" fn(*const *mut u8, u64, u64);

impl KernelFn {
    /// Runs iterations `lo..hi` of the function's split loop (all of it if it has none).
    pub(crate) fn call(&self, bufs: &BufPtrs<'_>, _checked: &Checked, lo: u64, hi: u64) {
        // Keeps the code alive for the duration of the call.
        let _code = &self.code;
        // SAFETY: `addr` is the finalized address of a function compiled with exactly this
        // signature (`CpuBackend::define_kernel` declares it), and its module is alive (`self.code`).
        let f = unsafe { std::mem::transmute::<usize, RawKernel>(self.addr) };
        // The generated code only accesses the buffers in `bufs` inside the ranges that
        // `check::check_bounds` proved for these very buffers (`_checked`), clamps `lo..hi` to
        // its loop's extent, and `bufs` borrows the buffers mutably for its whole life.
        f(bufs.ptrs.as_ptr(), lo, hi)
    }
}

/// Base pointers of a run's buffers, borrowed mutably for the duration of the run.
pub(crate) struct BufPtrs<'a> {
    ptrs: Vec<*mut u8>,
    _bufs: PhantomData<&'a mut [Data]>,
}

// SAFETY: the pointers come from an exclusive borrow of the buffers held for the life of
// `BufPtrs`; generated code running on several threads writes disjoint elements (a loop is
// split across threads only when it is `parallel` and every store in it moves with its
// variable) within checked bounds.
unsafe impl Send for BufPtrs<'_> {}
// SAFETY: as for `Send`: shared use only hands the pointers to generated code.
unsafe impl Sync for BufPtrs<'_> {}

impl<'a> BufPtrs<'a> {
    pub(crate) fn new(bufs: &'a mut [Data]) -> BufPtrs<'a> {
        let ptrs = bufs
            .iter_mut()
            .map(|d| match d {
                Data::F32(v) => v.as_mut_ptr() as *mut u8,
                Data::F64(v) => v.as_mut_ptr() as *mut u8,
                Data::F16(v) => v.as_mut_ptr() as *mut u8,
                Data::BF16(v) => v.as_mut_ptr() as *mut u8,
                Data::I32(v) => v.as_mut_ptr() as *mut u8,
            })
            .collect();
        BufPtrs {
            ptrs,
            _bufs: PhantomData,
        }
    }
}

/// A strided matrix view into a slice: element `[r, c]` of batch `b` is at
/// `offsets[b] + r·rs + c·cs`.
pub(crate) struct MatRef<'a, T> {
    pub data: &'a [T],
    pub offsets: Vec<isize>,
    pub rs: isize,
    pub cs: isize,
}

/// A mutable strided matrix view (the GEMM destination).
pub(crate) struct MatMut<'a, T> {
    pub data: &'a mut [T],
    pub offsets: Vec<isize>,
    pub rs: isize,
    pub cs: isize,
    /// The caller proved from the view's strides that distinct (batch, row, column) are
    /// distinct elements (`check::view_injective`): batches may run side by side even when
    /// their ranges interleave.
    pub injective: bool,
}

/// Smallest and largest element of a `rows`×`cols` view at `off`; `None` if empty.
fn span(off: isize, rs: isize, cs: isize, rows: usize, cols: usize) -> Option<(i128, i128)> {
    if rows == 0 || cols == 0 {
        return None;
    }
    let (r, c) = (
        rs as i128 * (rows as i128 - 1),
        cs as i128 * (cols as i128 - 1),
    );
    Some((
        off as i128 + r.min(0) + c.min(0),
        off as i128 + r.max(0) + c.max(0),
    ))
}

pub(crate) fn in_bounds(
    len: usize,
    off: isize,
    rs: isize,
    cs: isize,
    rows: usize,
    cols: usize,
) -> bool {
    match span(off, rs, cs, rows, cols) {
        None => true,
        Some((lo, hi)) => lo >= 0 && hi < len as i128,
    }
}

/// Distinct (r, c) reach distinct elements (the sorted-stride test).
fn injective(rs: isize, cs: isize, rows: usize, cols: usize) -> bool {
    let mut axes: Vec<(i128, i128)> = [(rs, rows), (cs, cols)]
        .into_iter()
        .filter(|&(_, e)| e > 1)
        .map(|(s, e)| ((s as i128).abs(), e as i128))
        .collect();
    axes.sort();
    let mut reach = 0i128;
    for (s, e) in axes {
        if s <= reach {
            return false;
        }
        reach += s * (e - 1);
    }
    true
}

/// Raw pointers handed to parallel batch tasks.
#[derive(Clone, Copy)]
struct GemmPtrs<T> {
    dst: *mut T,
    lhs: *const T,
    rhs: *const T,
}

// SAFETY: the pointers come from `&mut`/`&` slices borrowed for the whole call; tasks write
// pairwise disjoint destination ranges (checked before going parallel) and only read the
// operands, which cannot overlap the destination (they are distinct borrows).
unsafe impl<T> Send for GemmPtrs<T> {}
// SAFETY: as for `Send`.
unsafe impl<T> Sync for GemmPtrs<T> {}

/// Error of a GEMM view that does not fit its slice (a backend bug: `check` proves views first).
#[derive(Debug)]
pub(crate) struct ViewOutOfBounds;

/// Multiply-adds below which a (batched) GEMM runs on one thread (2^21: about 4 MFLOP, tens
/// of microseconds on one core, where a rayon fork-join costs ~10-100 µs).
const MIN_PARALLEL_MACS: u128 = 1 << 21;

/// How a batched product uses its threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// Batches run in parallel, each product on one thread.
    Batches(usize),
    /// Batches run one after another, each product on this many threads.
    Inside(usize),
}

/// The thread policy of a batched `m×n×k` product whose destinations start at `dst_offsets`:
/// small products stay on the calling thread (waking the pool costs more than they take);
/// enough batches with pairwise disjoint, injective destinations (or `proven_injective`: the
/// whole batched view, proven by its strides) run side by side; otherwise
/// each product of at least 48³ multiply-adds with an injective destination is split.
#[allow(clippy::too_many_arguments)]
pub(crate) fn batch_split(
    m: usize,
    n: usize,
    k: usize,
    dst_offsets: &[isize],
    rs: isize,
    cs: isize,
    threads: usize,
    proven_injective: bool,
) -> Split {
    let n_batch = dst_offsets.len();
    let macs = (m as u128) * (n as u128) * (k as u128) * (n_batch as u128);
    let threads = if macs < MIN_PARALLEL_MACS {
        1
    } else {
        threads.max(1)
    };
    let dst_injective = proven_injective || injective(rs, cs, m, n);
    // Destination ranges of distinct batches must not overlap to run batches in parallel.
    let mut ranges: Vec<(i128, i128)> = dst_offsets
        .iter()
        .filter_map(|&o| span(o, rs, cs, m, n))
        .collect();
    ranges.sort();
    let disjoint = proven_injective || ranges.windows(2).all(|w| w[0].1 < w[1].0);
    if threads > 1 && n_batch >= threads && disjoint && dst_injective {
        return Split::Batches(threads);
    }
    let big = (m as u128) * (n as u128) * (k as u128) >= 48 * 48 * 48;
    Split::Inside(if big && dst_injective { threads } else { 1 })
}

/// `dst[b] = lhs[b]·rhs[b]` (or `+=` with `accumulate`) for every batch `b`; `lhs` is m×k, `rhs`
/// k×n, `dst` m×n. Uses `threads` threads (one below [`MIN_PARALLEL_MACS`]): across batches
/// when there are enough of them and their destinations are disjoint, else inside each product.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_batched<T: Copy + Send + Sync + 'static>(
    m: usize,
    n: usize,
    k: usize,
    dst: MatMut<'_, T>,
    lhs: MatRef<'_, T>,
    rhs: MatRef<'_, T>,
    accumulate: bool,
    one: T,
    zero: T,
    threads: usize,
) -> Result<(), ViewOutOfBounds> {
    let n_batch = dst.offsets.len();
    if lhs.offsets.len() != n_batch || rhs.offsets.len() != n_batch {
        return Err(ViewOutOfBounds);
    }
    for b in 0..n_batch {
        if !in_bounds(dst.data.len(), dst.offsets[b], dst.rs, dst.cs, m, n)
            || !in_bounds(lhs.data.len(), lhs.offsets[b], lhs.rs, lhs.cs, m, k)
            || !in_bounds(rhs.data.len(), rhs.offsets[b], rhs.rs, rhs.cs, k, n)
        {
            return Err(ViewOutOfBounds);
        }
    }
    if m == 0 || n == 0 || n_batch == 0 {
        return Ok(());
    }
    let split = batch_split(
        m,
        n,
        k,
        &dst.offsets,
        dst.rs,
        dst.cs,
        threads,
        dst.injective,
    );
    let ptrs = GemmPtrs {
        dst: dst.data.as_mut_ptr(),
        lhs: lhs.data.as_ptr(),
        rhs: rhs.data.as_ptr(),
    };
    // gemm computes dst = alpha·dst + beta·lhs·rhs: alpha multiplies the destination.
    let alpha = if accumulate { one } else { zero };
    let one_product = move |b: usize, par: gemm::Parallelism| {
        let p = ptrs;
        // SAFETY: every view of batch `b` was checked above to lie inside its slice; the
        // destination slice is borrowed mutably and the operand slices shared for the whole
        // call, so they do not overlap; `par` is `Rayon` only for an injective destination, and
        // concurrent batches write disjoint ranges.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                p.dst.offset(dst.offsets[b]),
                dst.cs,
                dst.rs,
                accumulate,
                p.lhs.offset(lhs.offsets[b]),
                lhs.cs,
                lhs.rs,
                p.rhs.offset(rhs.offsets[b]),
                rhs.cs,
                rhs.rs,
                alpha,
                one,
                false,
                false,
                false,
                par,
            )
        }
    };
    match split {
        Split::Batches(threads) => (0..n_batch)
            .into_par_iter()
            .with_min_len(n_batch.div_ceil(threads))
            .for_each(|b| one_product(b, gemm::Parallelism::None)),
        Split::Inside(threads) => {
            let par = if threads > 1 {
                gemm::Parallelism::Rayon(threads)
            } else {
                gemm::Parallelism::None
            };
            for b in 0..n_batch {
                one_product(b, par);
            }
        }
    }
    Ok(())
}
