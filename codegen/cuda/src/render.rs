//! The C-style renderer: launches ([`crate::map::Launch`]) → CUDA C++ text.
//!
//! One renderer writes every kernel; what differs between the device and the host emulation
//! ([`crate::emulate`]) is only the prelude each is compiled with (`kernels/cuda.cuh`,
//! `kernels/host.h`: thread indices, f16 conversions, constants), so the text NVRTC compiles
//! is the text the tests run. The operations of the loop IR are the overloaded helpers of
//! `kernels/common.cuh` (`t_exp`, `t_max`, …), written once for float and double.
//!
//! Values follow spec/loop-ir.md §2: f16 and bf16 buffers are `unsigned short` arrays that
//! widen to float on load and round to nearest even on store; an expression is computed in its
//! compute type (float or double), constants rounded to the type of where they are used.

use std::collections::BTreeSet;
use std::fmt::Write;

use tdsl_loop::{AccId, AccOp, BinOp, ElemType, Expr, Index, Iter, LoopProgram, Stmt, UnOp};

use crate::map::{Launch, Split, Step, TILE};

/// The device prelude (no CUDA headers needed).
pub const CUDA_PRELUDE: &str = include_str!("../../../kernels/cuda.cuh");
/// The tensor-core templates, after the shared helpers and the target's tensor-core primitives,
/// in units with a tensor-core launch.
pub const MMA: &str = include_str!("../../../kernels/mma.cuh");
/// The tensor-core instructions on the device (PTX).
pub const MMA_DEVICE: &str = include_str!("../../../kernels/mma_device.cuh");
/// The host-emulation prelude.
pub const HOST_PRELUDE: &str = include_str!("../../../kernels/host.h");
/// The host emulation's threads: a block's threads as fibers, its barriers and warp shuffles in
/// software. Host units whose launches share work between threads have it.
pub const THREADS_HOST: &str = include_str!("../../../kernels/threads_host.h");
/// The tensor-core instructions in the host emulation (warp-wide instructions in software on
/// the fibers of [`THREADS_HOST`]).
pub const MMA_HOST: &str = include_str!("../../../kernels/mma_host.h");

/// What a unit is compiled for: the GPU (NVRTC) or the host emulation (the system C++ compiler).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitTarget {
    Device,
    Host,
    /// The host emulation with every launch's threads on fibers, those that share nothing
    /// included: the race check (`crate::emulate`, compiled with ThreadSanitizer).
    HostFibers,
}

impl UnitTarget {
    fn prelude(self) -> &'static str {
        match self {
            UnitTarget::Device => CUDA_PRELUDE,
            UnitTarget::Host | UnitTarget::HostFibers => HOST_PRELUDE,
        }
    }

    /// What follows the shared helpers, before the tensor-core templates: on the host, the
    /// emulated threads when a launch's threads work together, and the emulated tensor-core
    /// instructions; on the device, those instructions in PTX.
    fn threads(self, cooperative: bool, tensor_cores: bool) -> Vec<&'static str> {
        match self {
            UnitTarget::Host | UnitTarget::HostFibers => [
                (cooperative || self == UnitTarget::HostFibers, THREADS_HOST),
                (tensor_cores, MMA_HOST),
            ]
            .into_iter()
            .filter_map(|(on, text)| on.then_some(text))
            .collect(),
            UnitTarget::Device if tensor_cores => vec![MMA_DEVICE],
            UnitTarget::Device => vec![],
        }
    }
}

/// Helpers both preludes share.
pub const COMMON: &str = include_str!("../../../kernels/common.cuh");

/// The C type of a buffer's elements.
pub fn c_type(t: ElemType) -> &'static str {
    match t {
        ElemType::F32 => "float",
        ElemType::F64 => "double",
        ElemType::F16 | ElemType::BF16 => "unsigned short",
        ElemType::I32 => "int",
    }
}

fn compute_c(t: ElemType) -> &'static str {
    match t.compute() {
        ElemType::F64 => "double",
        _ => "float",
    }
}

/// The whole translation unit for `steps` of `p`, after `target`'s prelude: every launch, each
/// with its launch shape as a comment.
pub fn render_unit(p: &LoopProgram, steps: &[Step], target: UnitTarget) -> String {
    let mut out = String::new();
    out.push_str(target.prelude());
    out.push('\n');
    out.push_str(COMMON);
    let tensor_cores = steps
        .iter()
        .any(|s| matches!(s, Step::Launch(l) if l.lib.is_some()));
    let cooperative = steps
        .iter()
        .any(|s| matches!(s, Step::Launch(l) if l.cooperative()));
    for text in target.threads(cooperative || tensor_cores, tensor_cores) {
        out.push('\n');
        out.push_str(text);
    }
    if tensor_cores {
        out.push('\n');
        out.push_str(MMA);
    }
    for step in steps {
        match step {
            Step::Launch(l) => {
                out.push('\n');
                out.push_str(&render_launch(p, l));
            }
            Step::Table { table, .. } => {
                let _ = writeln!(out, "\n{}", table_comment(p, table));
            }
            Step::Host { kernel, .. } => {
                let _ = writeln!(
                    out,
                    "\n// {}: sparsify runs on the host between launches",
                    p.kernels[*kernel].name
                );
            }
        }
    }
    out
}

/// The comment that stands for a [`Step::Table`]: what the host builds, from what, where.
pub fn table_comment(p: &LoopProgram, table: &crate::map::Table) -> String {
    match table {
        crate::map::Table::Rows(b) if !b.split => format!(
            "// the host lists the rows of %{} ({}) in b{}, longest first",
            b.ptr.0,
            p.buffer(b.ptr).name,
            b.list.0
        ),
        crate::map::Table::Rows(b) => format!(
            "// the host bins the rows of %{} ({}) into b{}: {} or more stored entries one block \
             each, the rest one warp each, longest first",
            b.ptr.0,
            p.buffer(b.ptr).name,
            b.list.0,
            crate::map::BLOCK_ROW
        ),
        crate::map::Table::Groups(g) => format!(
            "// the host lists the union of block columns of each {} block rows of %{} ({}) \
             into b{}",
            g.g,
            g.idx.0,
            p.buffer(g.idx).name,
            g.table.0
        ),
    }
}

/// One `__global__` function, with a comment that says where it comes from and how it is
/// launched.
pub fn render_launch(p: &LoopProgram, l: &Launch) -> String {
    let k = &p.kernels[l.kernel];
    let mut r = Renderer {
        p,
        out: String::new(),
        depth: 1,
        accs: Vec::new(),
        staged: None,
        dead_cols: l.split == Split::Cols && !l.iterations().is_multiple_of(crate::map::WARP),
    };
    let (blocks, threads) = l.shape();
    let mut head = String::new();
    let _ = writeln!(head, "// {} ({})", l.name, k.origin);
    if let Some(tc) = &l.lib {
        let what = if l.reduce {
            "the sum of the parts of K, one thread per element".to_string()
        } else {
            tc.describe()
        };
        let _ = writeln!(head, "// launch: <<<{blocks}, {threads}>>>, {what}");
        head.push_str(&if l.reduce {
            crate::tensor::render_reduce(p, &l.name, tc)
        } else {
            crate::tensor::render(p, &l.name, tc)
        });
        return head;
    }
    if l.grid.is_empty() {
        let _ = writeln!(head, "// launch: <<<1, 1>>> (one thread)");
    } else {
        let ext: Vec<String> = l.grid.iter().map(|g| g.1.to_string()).collect();
        let _ = writeln!(
            head,
            "// launch: {}<<<{blocks}, {threads}>>>, grid-stride over {} = {} iterations{}",
            if l.rows.is_some() { "at most " } else { "" },
            ext.join(" x "),
            l.iterations(),
            match (l.split, l.rows) {
                (Split::Block, Some(_)) => ", the long rows of the list, one block each",
                (Split::Warp, Some(_)) => ", the short rows of the list, one warp each",
                (Split::Thread, Some(_)) => ", the rows of the list, longest first",
                (Split::Thread, _) => "",
                (Split::Warp, _) => ", one warp each",
                (Split::Block, _) => ", one block each",
                (Split::Tile, _) => ", one 32x32 tile per block through shared memory",
                (Split::Cols, _) => ", 32 per block, its 16 warps splitting each one's loops",
            }
        );
    }
    let writes = writes(&l.body);
    let params: Vec<String> = l
        .params
        .iter()
        .map(|b| {
            let buf = p.buffer(*b);
            let cnst = if writes.contains(b) { "" } else { "const " };
            format!("{cnst}{}* __restrict__ b{}", c_type(buf.ty), b.0)
        })
        .collect();
    // A block of more than 256 threads: the kernel's registers must fit it. With a minimum of
    // one block per SM, ptxas takes what the code needs (up to 128); with none it aims at full
    // occupancy (32 registers at 512 threads) and spills.
    let bounds = match threads > crate::map::BLOCK {
        true => format!("__launch_bounds__({threads}, 1) "),
        false => String::new(),
    };
    let _ = writeln!(
        head,
        "TDSL_KERNEL {bounds}{}({}) {{",
        l.name,
        params.join(", ")
    );
    if l.grid.is_empty() {
        r.line("if (TDSL_THREAD != 0) return;");
        r.stmts(&l.body);
    } else if let (Split::Tile, Some(tile)) = (l.split, &l.tile) {
        r.tile(l, tile);
    } else {
        let n = l.iterations();
        // A launch over a run-time list walks the list's entries (`gk`); each is a grid
        // iteration (`gi`). The list is `[long, short, long rows..., short rows...]`.
        let (n, list) = match l.rows {
            Some(rows) => {
                let b = rows.list.0;
                let (count, first) = match rows.long {
                    true => (format!("(long long)b{b}[0]"), "2".to_string()),
                    false => (
                        format!("(long long)b{b}[1]"),
                        format!("2 + (long long)b{b}[0]"),
                    ),
                };
                // An entry is a row; its `inner` iterations of the last grid axis follow it.
                let gi = match rows.inner {
                    1 => format!("const long long gi = b{b}[{first} + gk];"),
                    e => format!(
                        "const long long gi = (long long)b{b}[{first} + gk / {e}LL] * {e}LL + gk % {e}LL;"
                    ),
                };
                let count = match rows.inner {
                    1 => count,
                    e => format!("{count} * {e}LL"),
                };
                (count, Some(gi))
            }
            None => (format!("{n}LL"), None),
        };
        let gi = if list.is_some() { "gk" } else { "gi" };
        match l.split {
            // (A tile launch always has its tile; without one it is a thread's grid loop.)
            Split::Thread | Split::Tile => r.line(&format!(
                "for (long long {gi} = TDSL_THREAD; {gi} < {n}; {gi} += TDSL_STRIDE) {{"
            )),
            Split::Warp => {
                r.line("const long long lane = TDSL_LANE;");
                r.line(&format!(
                    "for (long long {gi} = TDSL_THREAD / TDSL_WARP; {gi} < {n}; {gi} += TDSL_STRIDE / TDSL_WARP) {{"
                ));
            }
            Split::Block => {
                r.line("const long long lane = TDSL_ROW_THREAD;");
                // A slot per warp for each accumulator a split loop combines.
                let slots = match combined_per_loop(&l.body) {
                    1 => "TDSL_ROW_WARPS".to_string(),
                    n => format!("TDSL_ROW_WARPS * {n}"),
                };
                r.line(&format!("__shared__ double tdsl_red[{slots}];"));
                r.line(&format!(
                    "for (long long {gi} = blockIdx.x; {gi} < {n}; {gi} += gridDim.x) {{"
                ));
            }
            Split::Cols => {
                r.line("const long long lane = (long long)(threadIdx.x / TDSL_WARP);");
                r.line("const long long col = (long long)(threadIdx.x % TDSL_WARP);");
                // A slot per thread for each accumulator a split loop combines.
                let slots = match combined_per_loop(&l.body) {
                    1 => "TDSL_COL_SLICES * TDSL_WARP".to_string(),
                    n => format!("TDSL_COL_SLICES * TDSL_WARP * {n}"),
                };
                r.line(&format!("__shared__ double tdsl_red[{slots}];"));
                let groups = l.iterations().div_ceil(crate::map::WARP);
                r.line(&format!(
                    "for (long long gb = blockIdx.x; gb < {groups}LL; gb += gridDim.x) {{"
                ));
            }
        }
        r.depth += 1;
        if let Some(list) = &list {
            r.line(list);
        }
        if l.split == Split::Cols {
            // A column past the grid takes the grid's last iteration, which its own block
            // runs too: its loads stay in bounds, `live` keeps it from walking and storing,
            // and were it to store, the race check would see two threads of one block store
            // one element.
            match r.dead_cols {
                false => r.line("const long long gi = gb * TDSL_WARP + col;"),
                true => {
                    r.line("const long long gc = gb * TDSL_WARP + col;");
                    r.line(&format!("const bool live = gc < {n};"));
                    r.line(&format!("const long long gi = live ? gc : {n} - 1;"));
                }
            }
        }
        let mut inner = 1u64;
        for &(v, e) in l.grid.iter().rev() {
            let div = if inner == 1 {
                "gi".to_string()
            } else {
                format!("(gi / {inner}LL)")
            };
            r.line(&format!("const long long v{} = {div} % {e}LL;", v.0));
            inner = inner.saturating_mul(e);
        }
        match l.split {
            Split::Thread | Split::Tile => r.stmts(&l.body),
            Split::Warp | Split::Block | Split::Cols => r.split_stmts(&l.body, l.split),
        }
        r.depth -= 1;
        r.line("}");
    }
    head.push_str(&r.out);
    head.push_str("}\n");
    head
}

/// The most accumulators one top-level loop of a split body combines (at least 1).
fn combined_per_loop(body: &[Stmt]) -> usize {
    body.iter()
        .filter_map(|s| match s {
            Stmt::Loop(l) => crate::map::outer_updates(l).map(|u| u.len()),
            _ => None,
        })
        .max()
        .unwrap_or(1)
        .max(1)
}

/// Every buffer `stmts` read or write: loads, stores, a sparse level's arrays, calls.
fn touches(stmts: &[Stmt]) -> BTreeSet<tdsl_loop::BufId> {
    let (mut reads, writes) = tdsl_loop::walk::stmt_reads_writes(stmts);
    reads.extend(writes);
    reads
}

fn writes(stmts: &[Stmt]) -> BTreeSet<tdsl_loop::BufId> {
    tdsl_loop::walk::stmt_reads_writes(stmts).1
}

struct Renderer<'a> {
    p: &'a LoopProgram,
    out: String,
    depth: usize,
    /// Accumulators in scope and their types.
    accs: Vec<(AccId, ElemType)>,
    /// A load read from shared memory instead ([`Split::Tile`]): its buffer, index and the
    /// element of the tile that holds it.
    staged: Option<(tdsl_loop::BufId, Index, String)>,
    /// In a [`Split::Cols`] launch whose grid is not a whole number of warps: the block's last
    /// columns may lie past it (`live` false), and their threads walk no steps and store
    /// nothing, but still meet the others at every barrier.
    dead_cols: bool,
}

impl Renderer<'_> {
    fn line(&mut self, s: &str) {
        for _ in 0..self.depth {
            self.out.push_str("  ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn stmts(&mut self, stmts: &[Stmt]) {
        let n_accs = self.accs.len();
        for s in stmts {
            self.stmt(s);
        }
        self.accs.truncate(n_accs);
    }

    fn stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::Loop(l) => {
                let v = l.var.0;
                match &l.iter {
                    Iter::Range { extent } => self.line(&format!(
                        "for (long long v{v} = 0; v{v} < {extent}LL; ++v{v}) {{"
                    )),
                    Iter::Compressed {
                        ptr,
                        ptr_index,
                        crd,
                        coord,
                    } => {
                        let at = index(ptr_index);
                        self.line(&format!(
                            "for (long long v{v} = b{p}[{at}]; v{v} < b{p}[{at} + 1]; ++v{v}) {{",
                            p = ptr.0
                        ));
                        self.line(&format!(
                            "  const long long v{} = b{}[v{v}];",
                            coord.0, crd.0
                        ));
                    }
                    Iter::Singleton { crd, pos_index } => {
                        self.line("{");
                        self.line(&format!(
                            "  const long long v{v} = b{}[{}];",
                            crd.0,
                            index(pos_index)
                        ));
                    }
                    Iter::TwoFour {
                        groups,
                        meta,
                        meta_index,
                        coord,
                    } => {
                        self.line(&format!(
                            "for (long long v{v} = 0; v{v} < {}LL; ++v{v}) {{",
                            groups.saturating_mul(2)
                        ));
                        self.line(&two_four_coord(v, coord.0, meta.0, meta_index));
                    }
                }
                self.depth += 1;
                self.stmts(&l.body);
                self.depth -= 1;
                self.line("}");
            }
            Stmt::Let { acc, ty, init } => {
                let t = ty.compute();
                let e = self.expr_as(init, t);
                self.line(&format!("{} a{} = {e};", compute_c(t), acc.0));
                self.accs.push((*acc, t));
            }
            Stmt::Update { acc, op, value } => {
                let t = self.acc_ty(*acc);
                let vt = self.ty(value).unwrap_or(t);
                let wide = join(t, vt);
                let v = self.expr_as(value, wide);
                let a = cast(&format!("a{}", acc.0), t, wide);
                let combined = match op {
                    AccOp::Set => v,
                    AccOp::Add => format!("{a} + {v}"),
                    AccOp::Mul => format!("{a} * {v}"),
                    AccOp::Max => format!("t_max({a}, {v})"),
                    AccOp::Min => format!("t_min({a}, {v})"),
                };
                let rounded = cast(&format!("({combined})"), wide, t);
                self.line(&format!("a{} = {rounded};", acc.0));
            }
            Stmt::Store {
                buf,
                index: ix,
                value,
            } => {
                let b = self.p.buffer(*buf);
                let vt = self.ty(value).unwrap_or(b.ty.compute());
                let v = self.expr_as(value, vt);
                let stored = match (b.ty, vt) {
                    (ElemType::F16, ElemType::F64) => format!("tdsl_f64_to_f16({v})"),
                    (ElemType::F16, _) => format!("tdsl_f32_to_f16({v})"),
                    (ElemType::BF16, ElemType::F64) => format!("tdsl_f64_to_bf16({v})"),
                    (ElemType::BF16, _) => format!("tdsl_f32_to_bf16({v})"),
                    (t, vt) => cast(&v, vt, t),
                };
                self.line(&format!("b{}[{}] = {stored};", buf.0, index(ix)));
            }
            Stmt::Call(_) => self.line("// (library call: not part of a launch)"),
        }
    }

    /// A [`Split::Tile`] launch: each block takes one [`TILE`]² tile of the grid's last two
    /// variables (`a`, contiguous in the staged load, then `o`, contiguous in the store) per
    /// grid-stride step. Threads read the staged load with consecutive threads along `a` into
    /// shared memory, meet, then compute and store with consecutive threads along `o`, reading
    /// the staged value from the tile's transposed element. A row of 33 puts a column's 32
    /// elements in distinct banks.
    fn tile(&mut self, l: &Launch, tile: &crate::map::Tile) {
        let n = l.grid.len();
        let ((a, ea), (o, eo)) = (l.grid[n - 2], l.grid[n - 1]);
        let (a, o) = (a.0, o.0);
        let t = c_type(self.p.buffer(tile.buf).ty);
        self.line(&format!("__shared__ {t} tdsl_tile[{TILE}][{}];", TILE + 1));
        self.line(&format!(
            "for (long long gi = blockIdx.x; gi < {}LL; gi += gridDim.x) {{",
            l.tiles()
        ));
        self.depth += 1;
        let mut inner = 1u64;
        for (i, &(v, e)) in l.grid.iter().enumerate().rev() {
            let div = if inner == 1 {
                "gi".to_string()
            } else {
                format!("(gi / {inner}LL)")
            };
            let (name, e) = match i + 2 >= n {
                true => (format!("t{}", v.0), e.div_ceil(TILE)),
                false => (format!("v{}", v.0), e),
            };
            self.line(&format!("const long long {name} = {div} % {e}LL;"));
            inner = inner.saturating_mul(e);
        }
        let guard = match (ea % TILE, eo % TILE) {
            (0, 0) => None,
            _ => Some(format!("v{a} < {ea}LL && v{o} < {eo}LL")),
        };
        for (fast, slow, phase) in [(a, o, 0), (o, a, 1)] {
            self.line("#pragma unroll 4");
            self.line(&format!(
                "for (long long e = TDSL_ROW_THREAD; e < {}LL; e += TDSL_ROW_THREADS) {{",
                TILE * TILE
            ));
            self.depth += 1;
            self.line(&format!(
                "const long long v{fast} = {TILE}LL * t{fast} + e % {TILE}LL;"
            ));
            self.line(&format!(
                "const long long v{slow} = {TILE}LL * t{slow} + e / {TILE}LL;"
            ));
            if let Some(g) = &guard {
                self.line(&format!("if ({g}) {{"));
                self.depth += 1;
            }
            if phase == 0 {
                self.line(&format!(
                    "tdsl_tile[e / {TILE}LL][e % {TILE}LL] = b{}[{}];",
                    tile.buf.0,
                    index(&tile.index)
                ));
            } else {
                self.staged = Some((
                    tile.buf,
                    tile.index.clone(),
                    format!("tdsl_tile[e % {TILE}LL][e / {TILE}LL]"),
                ));
                self.stmts(&l.body);
                self.staged = None;
            }
            if guard.is_some() {
                self.depth -= 1;
                self.line("}");
            }
            self.depth -= 1;
            self.line("}");
            self.line("tdsl_syncblock();");
        }
        self.depth -= 1;
        self.line("}");
    }

    /// The body of a grid iteration run by a whole warp or block (`Launch::split`): top-level
    /// loops are split across the threads; an accumulator updated in one starts at its identity
    /// on every thread but thread 0 and is combined after it: across the warp by butterfly
    /// shuffles (so every lane ends with the warp's total), then, for a block, through shared
    /// memory (every thread combines the warps' totals in warp order, so all agree; one pair
    /// of barriers for all the accumulators a loop combines); threads meet before a statement
    /// that touches what was stored since they last met.
    fn split_stmts(&mut self, stmts: &[Stmt], split: Split) {
        let (stride, sync) = match split {
            Split::Block => ("TDSL_ROW_THREADS", "tdsl_syncblock();"),
            Split::Cols => ("TDSL_COL_SLICES", "tdsl_syncblock();"),
            _ => ("TDSL_WARP", "tdsl_syncwarp();"),
        };
        // A column past the grid walks no steps ([`Renderer::dead_cols`]).
        let live = if self.dead_cols { "live && " } else { "" };
        let leader = if self.dead_cols {
            "if (lane == 0 && live) {"
        } else {
            "if (lane == 0) {"
        };
        let n_accs = self.accs.len();
        // Threads meet before a statement when a later one in this iteration touches what the
        // statements since they last met stored (later grid iterations keep to their own
        // elements); stores by lane 0 alone wait for the next statement other lanes run, since
        // lane 0 orders its own.
        let (mut by_lane0, mut by_all) = (BTreeSet::new(), BTreeSet::new());
        let mut meet = |i: usize, s: &Stmt| {
            match s {
                Stmt::Store { buf, .. } => by_lane0.insert(*buf),
                _ => {
                    by_all.extend(writes(std::slice::from_ref(s)));
                    false
                }
            };
            let later = touches(&stmts[i + 1..]);
            let lane0_next = matches!(stmts.get(i + 1), Some(Stmt::Store { .. }));
            let due = by_all.iter().any(|b| later.contains(b))
                || (!lane0_next && by_lane0.iter().any(|b| later.contains(b)));
            if due {
                by_lane0.clear();
                by_all.clear();
            }
            due
        };
        for (i, s) in stmts.iter().enumerate() {
            match s {
                Stmt::Loop(l) => {
                    let v = l.var.0;
                    // The lanes split the loop: a range, or a row's stored entries (CSR).
                    let (head, coord) = match &l.iter {
                        Iter::Range { extent } => (
                            format!(
                                "for (long long v{v} = lane; {live}v{v} < {extent}LL; v{v} += {stride}) {{"
                            ),
                            None,
                        ),
                        Iter::Compressed {
                            ptr,
                            ptr_index,
                            crd,
                            coord,
                        } => {
                            let (p, at) = (ptr.0, index(ptr_index));
                            (
                                format!(
                                    "for (long long v{v} = b{p}[{at}] + lane; {live}v{v} < b{p}[{at} + 1]; v{v} += {stride}) {{"
                                ),
                                Some(format!("  const long long v{} = b{}[v{v}];", coord.0, crd.0)),
                            )
                        }
                        Iter::TwoFour {
                            groups,
                            meta,
                            meta_index,
                            coord,
                        } => (
                            format!(
                                "for (long long v{v} = lane; {live}v{v} < {}LL; v{v} += {stride}) {{",
                                groups.saturating_mul(2)
                            ),
                            Some(two_four_coord(v, coord.0, meta.0, meta_index)),
                        ),
                        _ => {
                            self.stmt(s);
                            continue;
                        }
                    };
                    let updates = crate::map::outer_updates(l).unwrap_or_default();
                    for (a, op) in &updates {
                        let t = self.acc_ty(*a);
                        self.line(&format!(
                            "if (lane != 0) a{} = {};",
                            a.0,
                            constant(identity(*op), t)
                        ));
                    }
                    // Several loads in flight per thread: the loop's iterations are independent.
                    self.line("#pragma unroll 4");
                    self.line(&head);
                    if let Some(c) = coord {
                        self.line(&c);
                    }
                    self.depth += 1;
                    self.stmts(&l.body);
                    self.depth -= 1;
                    self.line("}");
                    // A warp's lanes hold one iteration's parts, except in a column block.
                    for (a, op) in updates.iter().filter(|_| split != Split::Cols) {
                        let a = a.0;
                        self.line(&format!(
                            "for (int off = TDSL_WARP / 2; off > 0; off /= 2) a{a} = {};",
                            combine(a, *op, &format!("tdsl_shfl(a{a}, off)"))
                        ));
                    }
                    if split == Split::Cols && !updates.is_empty() {
                        // Each thread's part in its own slot (j, slice, column); every thread
                        // then combines its column's parts in slice order, so all agree.
                        let slot = |j: usize, s: &str| match j {
                            0 if s == "0" => "tdsl_red[col]".to_string(),
                            0 => format!("tdsl_red[{s} * TDSL_WARP + col]"),
                            j => {
                                format!("tdsl_red[({j} * TDSL_COL_SLICES + {s}) * TDSL_WARP + col]")
                            }
                        };
                        for (j, (a, _)) in updates.iter().enumerate() {
                            self.line(&format!("{} = a{};", slot(j, "lane"), a.0));
                        }
                        self.gather(&updates, &slot, "s", "TDSL_COL_SLICES");
                    }
                    if split == Split::Block && !updates.is_empty() {
                        // Every accumulator's warp totals through shared memory at once (slots
                        // j * warps + w), the threads meeting twice for all of them. Exact: an
                        // f32 total round-trips through the f64 slot.
                        let slot = |j: usize, w: &str| match j {
                            0 => format!("tdsl_red[{w}]"),
                            j => format!("tdsl_red[{j} * TDSL_ROW_WARPS + {w}]"),
                        };
                        let leader = "if (lane % TDSL_WARP == 0)";
                        match updates.as_slice() {
                            [(a, _)] => self.line(&format!(
                                "{leader} {} = a{};",
                                slot(0, "lane / TDSL_WARP"),
                                a.0
                            )),
                            _ => {
                                self.line(&format!("{leader} {{"));
                                for (j, (a, _)) in updates.iter().enumerate() {
                                    let at = slot(j, "lane / TDSL_WARP");
                                    self.line(&format!("  {at} = a{};", a.0));
                                }
                                self.line("}");
                            }
                        }
                        self.gather(&updates, &slot, "w", "TDSL_ROW_WARPS");
                    }
                    if meet(i, s) {
                        self.line(sync);
                    }
                }
                Stmt::Store { .. } => {
                    self.line(leader);
                    self.depth += 1;
                    self.stmt(s);
                    self.depth -= 1;
                    self.line("}");
                    if meet(i, s) {
                        self.line(sync);
                    }
                }
                other => {
                    self.stmt(other);
                    if meet(i, other) {
                        self.line(sync);
                    }
                }
            }
        }
        self.accs.truncate(n_accs);
    }

    /// After each thread stored its parts in shared memory (`slot(j, k)`: accumulator `j`'s
    /// part `k`), the threads meet, every thread combines the `count` parts of each
    /// accumulator in order (so all agree; an f32 part round-trips exactly through its f64
    /// slot), and they meet again before the slots are reused.
    fn gather(
        &mut self,
        updates: &[(AccId, AccOp)],
        slot: &dyn Fn(usize, &str) -> String,
        k: &str,
        count: &str,
    ) {
        self.line("tdsl_syncblock();");
        for (j, (a, op)) in updates.iter().enumerate() {
            let t = compute_c(self.acc_ty(*a));
            let a = a.0;
            self.line(&format!("a{a} = ({t}){};", slot(j, "0")));
            self.line(&format!(
                "for (int {k} = 1; {k} < {count}; {k}++) a{a} = {};",
                combine(a, *op, &format!("({t}){}", slot(j, k)))
            ));
        }
        self.line("tdsl_syncblock();");
    }

    fn acc_ty(&self, a: AccId) -> ElemType {
        self.accs
            .iter()
            .rev()
            .find(|(id, _)| *id == a)
            .map_or(ElemType::F32, |x| x.1)
    }

    /// The compute type of `e` (`None` for constant-only trees), as the evaluator decides it.
    fn ty(&self, e: &Expr) -> Option<ElemType> {
        match e {
            Expr::Const(_) | Expr::Iota(_) => None,
            Expr::Load { buf, .. } => Some(self.p.buffer(*buf).ty.compute()),
            Expr::Acc(a) => Some(self.acc_ty(*a)),
            Expr::Unary(_, x) => self.ty(x),
            Expr::Binary(_, x, y) | Expr::Select(_, x, y) => opt_join(self.ty(x), self.ty(y)),
            Expr::Cast(t, _) => Some(t.compute()),
        }
    }

    /// `e` rendered as a value of compute type `ctx` (its own type where it has one, cast to
    /// `ctx` when they differ).
    fn expr_as(&self, e: &Expr, ctx: ElemType) -> String {
        let own = self.ty(e).unwrap_or(ctx);
        let s = self.expr(e, own);
        cast(&s, own, ctx)
    }

    /// `e` in compute type `t` (its own type, or the context's for constant-only trees).
    fn expr(&self, e: &Expr, t: ElemType) -> String {
        match e {
            Expr::Const(c) => constant(*c, t),
            Expr::Load { buf, index: ix } => {
                let b = self.p.buffer(*buf);
                let at = match &self.staged {
                    Some((sb, si, at)) if sb == buf && si == ix => at.clone(),
                    _ => format!("b{}[{}]", buf.0, index(ix)),
                };
                match b.ty {
                    ElemType::F16 => format!("tdsl_f16_to_f32({at})"),
                    ElemType::BF16 => format!("tdsl_bf16_to_f32({at})"),
                    _ => at,
                }
            }
            Expr::Acc(a) => format!("a{}", a.0),
            Expr::Unary(op, x) => format!("{}({})", unary_name(*op), self.expr(x, t)),
            Expr::Binary(op, x, y) => {
                let (a, b) = (self.expr_as(x, t), self.expr_as(y, t));
                match op {
                    BinOp::Add => format!("({a} + {b})"),
                    BinOp::Sub => format!("({a} - {b})"),
                    BinOp::Mul => format!("({a} * {b})"),
                    BinOp::Div => format!("({a} / {b})"),
                    other => format!("{}({a}, {b})", binary_name(*other)),
                }
            }
            Expr::Cast(to, x) => {
                let from = self.ty(x).unwrap_or(to.compute());
                let v = self.expr(x, from);
                match to {
                    ElemType::F16 => format!("tdsl_round_f16({v})"),
                    ElemType::BF16 => format!("tdsl_round_bf16({v})"),
                    to => cast(&v, from, *to),
                }
            }
            Expr::Select(c, x, y) => {
                let tc = self.ty(c).unwrap_or(t);
                format!(
                    "({} != 0 ? {} : {})",
                    self.expr(c, tc),
                    self.expr_as(x, t),
                    self.expr_as(y, t)
                )
            }
            Expr::Iota(ix) => format!("(({})({}))", compute_c(t), index(ix)),
        }
    }
}

/// `value` in f32, as the epilogue of a tensor-core product ([`crate::tensor::Epilogue`]):
/// every load of `temp` at `index` reads `stored` (an expression of the temp's element type).
pub(crate) fn epilogue_value(
    p: &LoopProgram,
    value: &Expr,
    temp: tdsl_loop::BufId,
    index: &Index,
    stored: &str,
) -> String {
    let r = Renderer {
        p,
        out: String::new(),
        depth: 0,
        accs: Vec::new(),
        staged: Some((temp, index.clone(), stored.to_string())),
        dead_cols: false,
    };
    r.expr_as(value, ElemType::F32)
}

/// `a{a}` combined with `other` under `op`.
fn combine(a: u32, op: AccOp, other: &str) -> String {
    match op {
        AccOp::Add => format!("a{a} + {other}"),
        AccOp::Mul => format!("a{a} * {other}"),
        AccOp::Max => format!("t_max(a{a}, {other})"),
        AccOp::Min | AccOp::Set => format!("t_min(a{a}, {other})"),
    }
}

/// The value that leaves an accumulator unchanged under `op`.
fn identity(op: AccOp) -> f64 {
    match op {
        AccOp::Add => -0.0,
        AccOp::Mul => 1.0,
        AccOp::Max => f64::NEG_INFINITY,
        AccOp::Min | AccOp::Set => f64::INFINITY,
    }
}

fn opt_join(a: Option<ElemType>, b: Option<ElemType>) -> Option<ElemType> {
    match (a, b) {
        (Some(a), Some(b)) => Some(join(a, b)),
        (a, b) => a.or(b),
    }
}

fn join(a: ElemType, b: ElemType) -> ElemType {
    if a.compute() == ElemType::F64 || b.compute() == ElemType::F64 {
        ElemType::F64
    } else {
        ElemType::F32
    }
}

/// `v` (of compute type `from`) as compute type `to`: C's conversion rounds to nearest.
fn cast(v: &str, from: ElemType, to: ElemType) -> String {
    let (from, to) = (from.compute(), to.compute());
    if from == to {
        v.to_string()
    } else {
        format!("(({}){v})", compute_c(to))
    }
}

/// A constant rounded to compute type `t`, exactly (shortest round-trip digits).
fn constant(c: f64, t: ElemType) -> String {
    if t.compute() == ElemType::F64 {
        match c {
            c if c.is_nan() => "TDSL_NAN_D".into(),
            c if c.is_infinite() => format!("({}TDSL_INF_D)", if c < 0.0 { "-" } else { "" }),
            c => {
                let s = format!("{c:?}");
                format!("({s})")
            }
        }
    } else {
        let f = c as f32;
        match f {
            f if f.is_nan() => "TDSL_NAN_F".into(),
            f if f.is_infinite() => format!("({}TDSL_INF_F)", if f < 0.0 { "-" } else { "" }),
            f => format!("({f:?}f)"),
        }
    }
}

/// An affine index as a `long long` expression.
pub(crate) fn index(ix: &Index) -> String {
    let mut parts = Vec::new();
    for &(v, s) in &ix.terms {
        match s {
            0 => {}
            1 => parts.push(format!("v{}", v.0)),
            s => parts.push(format!("{s}LL * v{}", v.0)),
        }
    }
    if ix.offset != 0 || parts.is_empty() {
        parts.push(format!("{}LL", ix.offset));
    }
    parts.join(" + ")
}

fn unary_name(op: UnOp) -> &'static str {
    match op {
        UnOp::Neg => "t_neg",
        UnOp::Exp => "t_exp",
        UnOp::Log => "t_log",
        UnOp::Sqrt => "t_sqrt",
        UnOp::Rsqrt => "t_rsqrt",
        UnOp::Abs => "t_abs",
        UnOp::Tanh => "t_tanh",
        UnOp::Sigmoid => "t_sigmoid",
        UnOp::Relu => "t_relu",
        UnOp::Gelu => "t_gelu",
        UnOp::Sin => "t_sin",
        UnOp::Cos => "t_cos",
        UnOp::Square => "t_square",
        UnOp::Erf => "t_erf",
        UnOp::GeluErf => "t_gelu_erf",
        UnOp::Silu => "t_silu",
        UnOp::Softplus => "t_softplus",
        UnOp::Log1p => "t_log1p",
        UnOp::Expm1 => "t_expm1",
        UnOp::Floor => "t_floor",
        UnOp::Ceil => "t_ceil",
        UnOp::Round => "t_round",
        UnOp::Sign => "t_sign",
    }
}

fn binary_name(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "t_add",
        BinOp::Sub => "t_sub",
        BinOp::Mul => "t_mul",
        BinOp::Div => "t_div",
        BinOp::Max => "t_max",
        BinOp::Min => "t_min",
        BinOp::Pow => "t_pow",
        BinOp::Lt => "t_lt",
        BinOp::Le => "t_le",
        BinOp::Gt => "t_gt",
        BinOp::Ge => "t_ge",
        BinOp::Eq => "t_eq",
        BinOp::Ne => "t_ne",
    }
}

/// The line that binds a 2:4 loop's coordinate `v{coord}` from its kept value `v{v}`: the group's
/// first column plus the 2-bit position stored in the metadata (spec/loop-ir.md §3).
fn two_four_coord(v: u32, coord: u32, meta: u32, meta_index: &Index) -> String {
    format!(
        "  const long long v{coord} = 4 * (v{v} / 2) + (long long)(((unsigned int)b{meta}[{} + v{v} / 16] >> (2 * (v{v} % 16))) & 3u);",
        index(meta_index)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_rows_in_the_preludes_match_the_mapping_pass() {
        let warps = crate::map::BLOCK / crate::map::WARP;
        // The emulation's warps and block rows are the device's.
        for prelude in [CUDA_PRELUDE, HOST_PRELUDE] {
            assert!(prelude.contains(&format!("#define TDSL_WARP {}\n", crate::map::WARP)));
            assert!(prelude.contains(&format!("#define TDSL_ROW_THREADS {}\n", crate::map::BLOCK)));
            assert!(prelude.contains(&format!("#define TDSL_ROW_WARPS {warps}\n")));
            let slices = crate::map::COL_SLICES;
            assert!(prelude.contains(&format!("#define TDSL_COL_SLICES {slices}\n")));
        }
    }
}
