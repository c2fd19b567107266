//! The GPU mapping pass: a loop program becomes a list of [`Step`]s, each a `__global__` launch
//! or a call the host runs between launches.
//!
//! 1. Library calls become loop nests (`tdsl_loop::expand`): `gemm`, `spmm` and `densify` get
//!    generic kernels whose parallel loops are already mapped to the grid; `sparsify` stays a
//!    call and runs on the host.
//! 2. Each run of statements between calls is cut into launches. A run that is only loops
//!    launches each loop on its own (a launch boundary orders them, as the CPU's sequence
//!    does); a run with statements outside loops (a scalar reduction's accumulator) is one
//!    launch on one thread.
//! 3. In a loop launch, the outer loop is mapped to the grid (`gpu grid`) when its iterations
//!    write disjoint elements (`tdsl_loop::launch::race_free`, or built that way), and so is each
//!    directly nested range loop while every store stays injective in the mapped variables
//!    ([`injective`]) and nothing stored is read at another element. The mapped nest is one
//!    flattened index space walked by a grid-stride loop; everything inside runs on one thread.
//!    A loop that cannot be mapped runs on one thread. A race-free parallel loop whose body is
//!    several loops is first distributed into one loop per statement ([`distribute`]), each
//!    launched in turn and mapped on its own.
//!
//! 4. A grid launch whose iteration is a row of work (softmax, norms, reductions: top-level
//!    range loops of 32 or more iterations under the grid, or a 2:4 row's kept values, whose
//!    count the format fixes) runs one *warp* per grid iteration
//!    ([`Launch::warp`], [`warp_ok`]): its top-level loops are split across the 32 lanes, each
//!    accumulator updated in such a loop is combined across the warp with shuffles, and lanes
//!    meet at `__syncwarp` after each loop that stores. A row whose loops run [`BLOCK_ROW`] or
//!    more iterations is a whole block's ([`Split::Block`]): the same split over 256 threads, the
//!    warps' partial results combined in shared memory. Everything else is one thread per
//!    iteration.
//!
//!    A sparse operand's rows ([`sparse_rows`]: a CSR matrix times a vector or a few columns)
//!    store a number of entries that only the data says. Such a launch becomes three steps
//!    ([`Bins`]): the host sorts the rows into a list by their stored entries (read from the
//!    row offsets when the launch runs), then one launch walks the rows of [`BLOCK_ROW`] or
//!    more entries with a block each, and another the rest with a warp each, both longest
//!    first, so one long row neither holds a warp for the whole launch nor a short one a block.
//!    Times fewer dense columns than a warp has lanes, the columns are unrolled into the row's
//!    one walk of its entries, an accumulator each ([`columns_into_rows`]), so the row is read
//!    once for all of them. A sparse × dense product with a long dense axis (a thread per
//!    element) lists its rows longest first as well, each expanded into the dense axis
//!    (Sputnik's row swizzle).
//!
//!    When the row's operands are contiguous across neighbouring grid iterations rather than
//!    along the row ([`columns_pay`]: `x @ W` with `W[in, out]` at one row, a reduction over a
//!    batch axis), a block takes 32 consecutive iterations instead ([`Split::Cols`]): lane `c`
//!    of each of its 16 warps runs iteration `c`, the warps split the row's steps, so each
//!    warp reads 32 neighbours per step, and the parts meet in shared memory.
//!
//!    A reduction the CPU's plan accumulates in its output (kept axes, reduced axes, then the
//!    innermost kept axis, so the CPU reads its input in memory order) would map only its
//!    outermost loop; it becomes a grid over the kept axes, each iteration summing into a
//!    register in the CPU's order ([`accumulate_in_registers`]), and so a row of the kinds above.
//!
//! 5. A grid launch that is one store of a transposing map (the store is contiguous in one grid
//!    variable, a load in another: a permute, or an elementwise chain around one) runs one
//!    32×32 tile per block ([`Split::Tile`], [`transposing_tile`]): the block reads the
//!    transposed operand along its contiguous axis into shared memory, then writes the output
//!    along its own, so both sides of the copy are coalesced. The CPU's cache tiling of such a
//!    map is undone first (its tile variables merge back into one per axis).

use std::collections::{BTreeMap, BTreeSet};

use crate::tensor::TensorCores;
use tdsl_loop::expand::expand_calls;
use tdsl_loop::launch::race_free;
use tdsl_loop::walk::stmt_buffers;
use tdsl_loop::{
    BufId, ElemType, Expr, GpuAxis, Index, Iter, LibCall, Loop, LoopProgram, Stmt, VarId,
};

/// One step of a program on the GPU.
// A program has a handful of steps: boxing the launches would cost more than it saves.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Launch(Launch),
    /// A library call the device has no kernel for (`sparsify`), run on the host: its source is
    /// copied back, pruned, and the result copied in.
    Host {
        kernel: usize,
        call: LibCall,
    },
    /// An index table the host builds from a sparse operand's index arrays when the program
    /// runs (per pattern), before the launches that read it.
    Table {
        kernel: usize,
        table: Table,
    },
}

/// An index table built on the host from a sparse operand's `i32` index arrays.
#[derive(Debug, Clone, PartialEq)]
pub enum Table {
    /// The rows of a sparse-row launch binned by their stored entries ([`Launch::rows`]).
    Rows(Bins),
    /// The union of block columns of each group of BSR block rows (the tensor-core walks
    /// [`crate::tensor::BsrWalk::Union`] and `Wgmma`).
    Groups(Groups),
}

impl Table {
    /// The buffer the table is written to (device scratch).
    pub fn buf(&self) -> BufId {
        match self {
            Table::Rows(b) => b.list,
            Table::Groups(g) => g.table,
        }
    }

    /// The index arrays it is built from, in the order [`Table::fill`] takes them.
    pub fn reads(&self) -> Vec<BufId> {
        match self {
            Table::Rows(b) => vec![b.ptr],
            Table::Groups(g) => vec![g.ptr, g.idx],
        }
    }

    /// The table for the arrays `data` (those of [`Table::reads`], in order), or why it cannot
    /// be built from them or would not fit its buffer's `elems`.
    pub fn fill(&self, data: &[&[i32]], elems: u64) -> Result<Vec<i32>, String> {
        let t = match (self, data) {
            (Table::Rows(b), [ptr]) => b.fill(ptr)?,
            (Table::Groups(g), [ptr, idx]) => g.fill(ptr, idx)?,
            _ => return Err("an index table was given the wrong arrays".into()),
        };
        match t.len() as u64 <= elems {
            true => Ok(t),
            false => Err(format!("an index table of {} entries for {elems}", t.len())),
        }
    }
}

/// The group table of a BSR operand under groups of `g` block rows: `groups + 1` offsets, then
/// each group's union of block columns in increasing order, one word per column: the column in
/// the low 16 bits, bit `16 + i` set when block row `i` of the group stores a block there
/// (`tdsl_bsr_group` in kernels/mma.cuh). Built once per run from `ptr` and `idx`, so the
/// kernels read the union instead of merging the rows' column lists themselves.
#[derive(Debug, Clone, PartialEq)]
pub struct Groups {
    pub table: BufId,
    pub ptr: BufId,
    pub idx: BufId,
    pub block_rows: u64,
    /// Block rows per group (at most 16).
    pub g: u64,
    /// Block columns (fewer than 2^16).
    pub block_cols: u64,
}

impl Groups {
    /// Groups of block rows.
    pub fn groups(&self) -> u64 {
        self.block_rows.div_ceil(self.g.max(1))
    }

    /// The most elements the table can take: the offsets, then at most one word per stored
    /// block (`stored`, the column array's capacity) and per group and block column.
    pub fn elems(&self, stored: u64) -> u64 {
        let groups = self.groups();
        groups + 1 + stored.min(groups.saturating_mul(self.block_cols))
    }

    /// The table for row offsets `ptr` and block columns `idx` (sorted within each block row,
    /// as every bound BSR operand is), or why they are not a pattern of this shape.
    pub fn fill(&self, ptr: &[i32], idx: &[i32]) -> Result<Vec<i32>, String> {
        let groups = self.groups() as usize;
        let (rows, cols) = (self.block_rows as usize, self.block_cols as usize);
        if ptr.len() < rows + 1 {
            return Err(format!("{} row offsets for {rows} block rows", ptr.len()));
        }
        let mut out = vec![0i32; groups + 1];
        let mut mark = vec![0u32; cols];
        let mut touched = Vec::new();
        for grp in 0..groups {
            for i in 0..self.g as usize {
                let row = grp * self.g as usize + i;
                if row >= rows {
                    break;
                }
                let (a, b) = (ptr[row], ptr[row + 1]);
                let blocks = usize::try_from(a)
                    .ok()
                    .zip(usize::try_from(b).ok())
                    .and_then(|(a, b)| idx.get(a..b))
                    .ok_or_else(|| {
                        format!("block row {row} stores blocks {a}..{b} of {}", idx.len())
                    })?;
                for (j, &c) in blocks.iter().enumerate() {
                    let sorted = j == 0 || blocks[j - 1] < c;
                    let col = usize::try_from(c).ok().filter(|&c| c < cols && sorted);
                    let col = col.ok_or_else(|| {
                        format!("block row {row}: column {c} out of order or past {cols}")
                    })?;
                    if mark[col] == 0 {
                        touched.push(col);
                    }
                    mark[col] |= 1 << i;
                }
            }
            touched.sort_unstable();
            for &col in &touched {
                out.push((col as u32 | mark[col] << 16) as i32);
                mark[col] = 0;
            }
            touched.clear();
            out[grp + 1] = (out.len() - groups - 1) as i32;
        }
        Ok(out)
    }
}

/// The rows of a sparse operand, sorted into run-time lists by how many entries each stores.
/// With `split`, rows of [`BLOCK_ROW`] or more entries go to a launch that gives each a block,
/// the rest to one that gives each a warp; without, every row is in the second list (a launch
/// of a thread per element, the dense axis across the threads). Each list is ordered by
/// decreasing length (Sputnik's row swizzle), so the longest rows start first and the
/// launches' threads end together.
///
/// A list entry is an iteration of `grid`, the launch's grid without its last axis when the
/// row does not depend on it (the dense axis of a sparse × dense product, `inner` iterations
/// each, expanded by the launch); else the whole grid (`inner` 1). The list buffer (i32,
/// `2 + entries` elements) holds `[long, short, long rows..., short rows...]`: the two counts,
/// then each list.
#[derive(Debug, Clone, PartialEq)]
pub struct Bins {
    /// The list buffer (device scratch, written by the host).
    pub list: BufId,
    /// The operand's row offsets (`indptr`).
    pub ptr: BufId,
    /// Where a row starts in `ptr` (its end is the next element), in `grid`'s variables.
    pub at: Index,
    /// The grid axes the list walks, outermost first.
    pub grid: Vec<(VarId, u64)>,
    /// Iterations of the launch's last grid axis per list entry (1: it is in `grid`).
    pub inner: u64,
    /// Whether long rows get a list (and a launch) of their own.
    pub split: bool,
}

/// Which list of a [`Bins`] a launch walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    pub list: BufId,
    /// The long rows (one block each), or the others.
    pub long: bool,
    /// Grid iterations per list entry ([`Bins::inner`]).
    pub inner: u64,
}

impl Bins {
    /// List entries at most.
    pub fn iterations(&self) -> u64 {
        self.grid.iter().map(|g| g.1).product::<u64>().max(1)
    }

    /// The list buffer's contents for row offsets `ptr`, or why they do not fit.
    pub fn fill(&self, ptr: &[i32]) -> Result<Vec<i32>, String> {
        let n = self.iterations();
        let mut long = Vec::new();
        let mut short = Vec::new();
        for gi in 0..n {
            let mut rest = gi;
            let mut at = self.at.offset;
            for &(v, e) in self.grid.iter().rev() {
                let x = (rest % e) as i64;
                rest /= e;
                at += self
                    .at
                    .terms
                    .iter()
                    .filter(|t| t.0 == v)
                    .map(|t| t.1 * x)
                    .sum::<i64>();
            }
            let entries = usize::try_from(at)
                .ok()
                .and_then(|a| Some((*ptr.get(a)?, *ptr.get(a + 1)?)))
                .map(|(s, e)| i64::from(e) - i64::from(s))
                .filter(|&n| n >= 0)
                .ok_or_else(|| {
                    format!(
                        "row {gi}: outside or decreasing row offsets ({})",
                        ptr.len()
                    )
                })?;
            let gi = i32::try_from(gi).map_err(|_| "too many rows for an i32 list")?;
            match self.split && entries as u64 >= BLOCK_ROW {
                true => long.push((entries, gi)),
                false => short.push((entries, gi)),
            }
        }
        // Longest first; equal lengths in row order.
        long.sort_by_key(|&(e, gi)| (std::cmp::Reverse(e), gi));
        short.sort_by_key(|&(e, gi)| (std::cmp::Reverse(e), gi));
        let mut out = Vec::with_capacity(2 + n as usize);
        out.extend([long.len() as i32, short.len() as i32]);
        out.extend(long.iter().chain(&short).map(|&(_, gi)| gi));
        Ok(out)
    }

    /// The two counts of a filled list.
    pub fn counts(list: &[i32]) -> (u64, u64) {
        let c = |i: usize| list.get(i).map_or(0, |&n| n.max(0) as u64);
        (c(0), c(1))
    }
}

/// One `__global__` function and how it is launched.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// The function's name: the kernel's, and the launch's number within it (`k4_0`).
    pub name: String,
    /// The loop-IR kernel it comes from.
    pub kernel: usize,
    /// The grid-mapped loops, outermost first: (variable, extent). Empty: one thread.
    pub grid: Vec<(VarId, u64)>,
    /// What each grid iteration (or the one thread) runs.
    pub body: Vec<Stmt>,
    /// Every buffer the launch touches, in id order (the kernel's parameters).
    pub params: Vec<BufId>,
    /// Who runs one grid iteration: one thread, or a warp or a block whose threads split its
    /// top-level loops.
    pub split: Split,
    /// A library call on tensor cores (`kernels/mma.cuh`): `grid` and `body` are empty and the
    /// launch is one block of [`crate::tensor::TensorCore::threads`] threads per output tile.
    pub lib: Option<crate::tensor::TensorCore>,
    /// With `lib`: this is the split product's second launch, which adds the parts of K
    /// ([`crate::tensor::SplitK`]) and stores the result: one thread per element.
    pub reduce: bool,
    /// For [`Split::Tile`]: the load staged through shared memory. The grid's last two
    /// variables are the load's contiguous one, then the store's.
    pub tile: Option<Tile>,
    /// The grid iterations come from a run-time list ([`Bins`]): the launch walks that list, not
    /// the whole grid.
    pub rows: Option<Rows>,
}

/// The load a transposing launch ([`Split::Tile`]) stages through a shared-memory tile: every
/// load of `buf` at `index` in the body reads the tile instead.
#[derive(Debug, Clone, PartialEq)]
pub struct Tile {
    pub buf: BufId,
    pub index: Index,
}

/// The edge of a transposing launch's square tile: a warp's width, so a warp reads and writes
/// whole 128-byte lines of f32.
pub const TILE: u64 = 32;

/// Who runs one iteration of a launch's grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// One thread.
    Thread,
    /// One warp: top-level loops split across its lanes, reductions combined by shuffles.
    Warp,
    /// One block of [`BLOCK`] threads, for rows of [`BLOCK_ROW`] or more elements: more threads
    /// per row keep more loads in flight, and the block's rows (8 per SM at 256 threads) fit in
    /// L1, so a second pass over a row (softmax's and layer norm's) reads L1, not memory.
    /// Reductions are combined by shuffles, then across warps in shared memory.
    Block,
    /// One block of [`BLOCK`] threads per [`TILE`]×[`TILE`] tile of a transposing map's last
    /// two grid variables ([`Launch::tile`]): loads along the first, stores along the second.
    Tile,
    /// One block of [`WARP`] × [`COL_SLICES`] threads per [`WARP`] consecutive grid iterations
    /// ([`columns_pay`]): lane `c` of every warp runs iteration `c`, and the block's warps split
    /// its top-level loops, each taking every [`COL_SLICES`]th step. For rows whose operands
    /// are contiguous across grid iterations, not along the loop (`x @ W` with `W[in, out]` at
    /// one row, a sum over a batch axis): a warp reads 32 neighbouring elements at each step,
    /// where a warp or block per iteration would read one element per sector. Partial results
    /// are combined in shared memory, in slice order.
    Cols,
}

/// The warps of a [`Split::Cols`] block: each walks every 16th step of the grid iterations'
/// loops. 16 warps keep 16 rows of loads in flight per 32 columns; a block of 512 threads,
/// launched with `__launch_bounds__(512, 1)` so its kernel never needs more registers than a
/// launch of 512 threads has.
pub const COL_SLICES: u64 = 16;

/// Lanes of a warp on the device.
pub const WARP: u64 = 32;

/// The shortest top-level loop that makes a row a whole block's work ([`Split::Block`]).
pub const BLOCK_ROW: u64 = 1024;

/// Threads per block of every launch (a multiple of the warp size).
pub const BLOCK: u64 = 256;
/// The most blocks a launch uses; a grid-stride loop covers larger iteration spaces.
pub const MAX_BLOCKS: u64 = 1 << 16;

impl Launch {
    /// Whether the threads of a block work together: a warp or a block per grid iteration, a
    /// tile, a tensor-core template (shuffles, barriers, warp-wide instructions). The host
    /// emulation runs such a launch's threads as fibers.
    pub fn cooperative(&self) -> bool {
        match &self.lib {
            Some(_) => !self.reduce,
            None => self.split != Split::Thread,
        }
    }

    /// Iterations of the flattened grid (1 for a one-thread launch).
    pub fn iterations(&self) -> u64 {
        self.grid.iter().map(|g| g.1).product::<u64>().max(1)
    }

    /// Blocks' worth of work of a [`Split::Tile`] launch: the grid with its last two extents
    /// counted in tiles.
    pub fn tiles(&self) -> u64 {
        let n = self.grid.len();
        self.grid
            .iter()
            .enumerate()
            .map(|(i, g)| if i + 2 >= n { g.1.div_ceil(TILE) } else { g.1 })
            .product::<u64>()
            .max(1)
    }

    /// (blocks, threads per block) on the device.
    /// A launch of loop-IR statements (no library call), its parameters the buffers `body`
    /// touches; with `tiled`, through a shared-memory tile when the body is one transposing
    /// store ([`transposing_tile`], [`Split::Tile`]).
    fn loops(
        name: String,
        kernel: usize,
        grid: Grid,
        body: Vec<Stmt>,
        split: Split,
        tiled: bool,
    ) -> Launch {
        let params = stmt_buffers(&body).into_iter().collect();
        let (grid, body, split, tile) = match tiled.then(|| transposing_tile(&grid, &body)) {
            Some(Some((grid, body, tile))) => (grid, body, Split::Tile, Some(tile)),
            _ => (grid, body, split, None),
        };
        Launch {
            name,
            kernel,
            grid,
            body,
            params,
            split,
            lib: None,
            reduce: false,
            tile,
            rows: None,
        }
    }

    /// Dynamic shared memory of one block, in bytes (a tensor-core product's; none otherwise).
    pub fn smem_bytes(&self) -> u64 {
        match &self.lib {
            Some(tc) if !self.reduce => tc.smem_bytes(),
            _ => 0,
        }
    }

    pub fn shape(&self) -> (u64, u64) {
        self.shape_of(self.iterations())
    }

    /// (blocks, threads per block) on the device for a launch over a run-time list
    /// ([`Launch::rows`]) that holds `count` grid iterations; (0, 0) when it holds none.
    pub fn shape_listed(&self, count: u64) -> (u64, u64) {
        match count {
            0 => (0, 0),
            n => self.shape_of(n),
        }
    }

    /// [`Launch::shape`] with `iterations` grid iterations.
    fn shape_of(&self, iterations: u64) -> (u64, u64) {
        if let Some(tc) = &self.lib {
            if self.reduce {
                return (tc.outputs().div_ceil(BLOCK).min(MAX_BLOCKS), BLOCK);
            }
            return (tc.blocks(), tc.threads());
        }
        if self.grid.is_empty() {
            return (1, 1);
        }
        let lanes = match self.split {
            Split::Thread => 1,
            Split::Warp => WARP,
            Split::Block => return (iterations.min(MAX_BLOCKS), BLOCK),
            Split::Tile => return (self.tiles().min(MAX_BLOCKS), BLOCK),
            Split::Cols => {
                return (iterations.div_ceil(WARP).min(MAX_BLOCKS), WARP * COL_SLICES);
            }
        };
        let n = iterations.saturating_mul(lanes);
        let block = n.next_multiple_of(32).min(BLOCK);
        (n.div_ceil(block).min(MAX_BLOCKS), block)
    }
}

/// The steps of `p` on an H100 or H200 (sm_90a: `wgmma` tensor cores), and the program they
/// were cut from (calls expanded, grid loops annotated: what `tdsl plan --device cuda` prints).
pub fn map_program(p: &LoopProgram) -> (LoopProgram, Vec<Step>) {
    map_program_with(p, TensorCores::Wgmma)
}

/// [`map_program`] for a device with the tensor-core instructions `tc`
/// ([`crate::tensor::select`]; none on devices before sm_80, and in the host emulation, which
/// has no warp-level matrix instructions).
pub fn map_program_with(p: &LoopProgram, tc: TensorCores) -> (LoopProgram, Vec<Step>) {
    map_program_variants(p, tc, crate::tensor::Variants::from_env())
}

/// [`map_program_with`] with the template variants `v` ([`crate::tensor::Variants`]).
pub fn map_program_variants(
    p: &LoopProgram,
    tc: TensorCores,
    v: crate::tensor::Variants,
) -> (LoopProgram, Vec<Step>) {
    let sel = if tc == TensorCores::None {
        crate::tensor::Selection::default()
    } else {
        crate::tensor::select_with(p, tc, v)
    };
    let mut out = expand_calls(p);
    out.buffers.extend(sel.scratch.iter().cloned());
    let elem_bytes: Vec<u64> = out.buffers.iter().map(|b| b.ty.size_bytes()).collect();
    let elems: Vec<u64> = out.buffers.iter().map(|b| b.elems).collect();
    let compute: Vec<ElemType> = out.buffers.iter().map(|b| b.ty.compute()).collect();
    let buf_bytes: Vec<u64> = (elems.iter().zip(&elem_bytes))
        .map(|(n, b)| n.saturating_mul(*b))
        .collect();
    // The row lists of sparse-row launches ([`Bins`]): scratch after the tensor cores'.
    let first_list = out.buffers.len();
    let mut lists: Vec<tdsl_loop::Buffer> = Vec::new();
    let mut steps = Vec::new();
    for (ki, k) in out.kernels.iter_mut().enumerate() {
        if sel.dead.contains(&ki) {
            // A copy the tensor-core launches read or write through: not launched.
            k.origin = format!("{} [folded into a tensor-core launch]", k.origin);
            continue;
        }
        if let Some(tc) = sel.calls.get(&ki) {
            k.body = p.kernels[ki].body.clone();
            k.origin = format!("{} [{}]", k.origin, tc.describe());
            if let Some(st) = &tc.staged {
                steps.push(Step::Launch(staging_launch(st, &k.name, ki)));
            }
            if let Some(groups) = tc.groups() {
                steps.push(Step::Table {
                    kernel: ki,
                    table: Table::Groups(groups),
                });
            }
            steps.push(Step::Launch(Launch {
                name: format!("{}_0", k.name),
                kernel: ki,
                grid: Vec::new(),
                body: Vec::new(),
                params: tc.params(),
                split: Split::Thread,
                lib: Some(tc.clone()),
                reduce: false,
                tile: None,
                rows: None,
            }));
            if tc.split.is_some() {
                steps.push(Step::Launch(Launch {
                    name: format!("{}_r", k.name),
                    kernel: ki,
                    grid: Vec::new(),
                    body: Vec::new(),
                    params: tc.reduce_params(),
                    split: Split::Thread,
                    lib: Some(tc.clone()),
                    reduce: true,
                    tile: None,
                    rows: None,
                }));
            }
            continue;
        }
        let mut n = 0usize;
        let mut launch = |grid: Vec<(VarId, u64)>, body: Vec<Stmt>, steps: &mut Vec<Step>| {
            let thread = !grid.is_empty() && split_of(&body) == Split::Thread;
            let rows = thread && sparse_rows(&grid, &body);
            let list = BufId((first_list + lists.len()) as u32);
            // Only an operand that can store BLOCK_ROW entries can have a long row.
            let long = thread && stored_entries(&body, &elems) >= BLOCK_ROW;
            if let Some(bins) = long.then(|| bins_of(&grid, &body, list, rows)).flatten() {
                // Rows listed at run time by their stored entries, longest first: for rows of
                // a reduction, a block each for the long ones, then a warp each for the rest;
                // for a thread per element, all of them in one launch.
                lists.push(tdsl_loop::Buffer {
                    name: format!("{}.rows", k.name),
                    ty: tdsl_loop::ElemType::I32,
                    elems: 2 + bins.iterations(),
                    role: tdsl_loop::Role::Temp,
                });
                let inner = bins.inner;
                let launches: &[(bool, Split)] = match bins.split {
                    true => &[(true, Split::Block), (false, Split::Warp)],
                    false => &[(false, Split::Thread)],
                };
                steps.push(Step::Table {
                    kernel: ki,
                    table: Table::Rows(bins),
                });
                for &(long, split) in launches {
                    let name = format!("{}_{n}", k.name);
                    let mut l = Launch::loops(name, ki, grid.clone(), body.clone(), split, false);
                    l.params.push(list);
                    l.rows = Some(Rows { list, long, inner });
                    steps.push(Step::Launch(l));
                    n += 1;
                }
                return;
            }
            let split = match grid.is_empty() {
                true => Split::Thread,
                false => match split_of(&body) {
                    // Rows no list could be made for: their lengths are data, and a warp runs
                    // a row of any length (the column array's capacity says nothing of them).
                    Split::Thread if rows => Split::Warp,
                    Split::Warp | Split::Block if columns_pay(&grid, &body, &buf_bytes) => {
                        Split::Cols
                    }
                    split => split,
                },
            };
            let tiled =
                split == Split::Thread && !grid.is_empty() && wasteful(&grid, &body, &elem_bytes);
            let name = format!("{}_{n}", k.name);
            steps.push(Step::Launch(Launch::loops(
                name, ki, grid, body, split, tiled,
            )));
            n += 1;
        };
        let mut new_body = Vec::new();
        for run in runs(&k.body) {
            match run {
                Run::Call(call) => {
                    steps.push(Step::Host {
                        kernel: ki,
                        call: call.clone(),
                    });
                    new_body.push(Stmt::Call(call.clone()));
                }
                Run::Serial(stmts) => {
                    launch(Vec::new(), stmts.to_vec(), &mut steps);
                    new_body.extend(stmts.iter().cloned());
                }
                Run::Loops(stmts) => {
                    for l in stmts.iter().flat_map(distribute) {
                        let l = &l;
                        if let Some((grid, body)) = accumulate_in_registers(l, &compute) {
                            new_body.push(Stmt::Loop(grid_nest(l, &grid, body.clone())));
                            launch(grid, body, &mut steps);
                            continue;
                        }
                        let (mut mapped, grid) = map_loop(l);
                        match grid {
                            Some((grid, body)) => {
                                // Sparse rows times a few columns: the columns unrolled into
                                // the row's walk, here and in the mapped program that `plan`
                                // prints.
                                let (grid, body) = match columns_into_rows(&grid, &body) {
                                    Some((grid, body)) => {
                                        mapped = grid_nest(&mapped, &grid, body.clone());
                                        (grid, body)
                                    }
                                    None => (grid, body),
                                };
                                launch(grid, body, &mut steps)
                            }
                            None => {
                                launch(Vec::new(), vec![Stmt::Loop(mapped.clone())], &mut steps)
                            }
                        }
                        new_body.push(Stmt::Loop(mapped));
                    }
                }
            }
        }
        k.body = new_body;
    }
    out.buffers.extend(lists);
    (out, steps)
}

/// The [`Bins`] of a launch over a sparse operand's rows (grid `grid`, iteration `body`, list
/// buffer `list`; `split`: rows of a reduction, run by a warp or a block): when its one
/// top-level compressed loop's row offset depends only on grid variables and the list's
/// entries fit an i32. The list walks the grid without its last axis when the offset does not
/// depend on it.
fn bins_of(grid: &[(VarId, u64)], body: &[Stmt], list: BufId, split: bool) -> Option<Bins> {
    let mut walks = body.iter().filter_map(|s| match s {
        Stmt::Loop(Loop {
            iter: Iter::Compressed { ptr, ptr_index, .. },
            ..
        }) => Some((*ptr, ptr_index)),
        _ => None,
    });
    let (ptr, at) = walks.next()?;
    let uses = |v: VarId| at.terms.iter().any(|t| t.0 == v && t.1 != 0);
    let (outer, inner) = match grid.split_last() {
        Some((&(v, e), outer)) if !uses(v) => (outer.to_vec(), e),
        _ => (grid.to_vec(), 1),
    };
    let in_grid = at
        .terms
        .iter()
        .all(|t| t.1 == 0 || outer.iter().any(|g| g.0 == t.0));
    let bins = Bins {
        list,
        ptr,
        at: at.clone(),
        grid: outer,
        inner,
        split,
    };
    let fits = bins.iterations() <= i32::MAX as u64 - 2
        && bins.iterations().saturating_mul(inner) < 1 << 62;
    (walks.next().is_none() && in_grid && fits).then_some(bins)
}

/// The launch that writes a staged operand ([`crate::tensor::Staging`]): one store per element,
/// `dst[Σ batch · dst stride + n · k + k'] = src[offset + Σ batch · src stride + k' · ld + n]`,
/// through a shared-memory tile when both sides are long enough ([`transposing_tile`]).
fn staging_launch(st: &crate::tensor::Staging, kernel_name: &str, kernel: usize) -> Launch {
    let var = |i: usize| VarId(i as u32);
    let nb = st.batch.len();
    let (vn, vk) = (var(nb), var(nb + 1));
    let mut grid: Grid = st
        .batch
        .iter()
        .enumerate()
        .map(|(i, b)| (var(i), b.0))
        .collect();
    grid.extend([(vn, st.n), (vk, st.k)]);
    let mut dst = Index {
        offset: 0,
        terms: vec![(vn, st.k as i64), (vk, 1)],
    };
    let mut src = Index {
        offset: st.src.offset,
        terms: vec![(vk, st.src.ld), (vn, 1)],
    };
    for (i, &(_, s, d)) in st.batch.iter().enumerate() {
        src.terms.push((var(i), s));
        dst.terms.push((var(i), d));
    }
    let body = vec![Stmt::Store {
        buf: st.dst,
        index: dst,
        value: Expr::Load {
            buf: st.src.buf,
            index: src,
        },
    }];
    Launch::loops(
        format!("{kernel_name}_t"),
        kernel,
        grid,
        body,
        Split::Thread,
        true,
    )
}

enum Run<'a> {
    Call(&'a LibCall),
    /// Statements with something outside a loop: one launch, one thread.
    Serial(&'a [Stmt]),
    /// Only loops: a launch each.
    Loops(&'a [Stmt]),
}

fn runs<'a>(body: &'a [Stmt]) -> Vec<Run<'a>> {
    let mut out = Vec::new();
    let mut start = 0;
    let flush = |start: usize, end: usize, out: &mut Vec<Run<'a>>| {
        let stmts = &body[start..end];
        if stmts.is_empty() {
            return;
        }
        if stmts.iter().all(|s| matches!(s, Stmt::Loop(_))) {
            out.push(Run::Loops(stmts));
        } else {
            out.push(Run::Serial(stmts));
        }
    };
    for (i, s) in body.iter().enumerate() {
        if let Stmt::Call(c) = s {
            flush(start, i, &mut out);
            out.push(Run::Call(c));
            start = i + 1;
        }
    }
    flush(start, body.len(), &mut out);
    out
}

/// `l` with its grid loops annotated, and, when any is mapped, the grid (variables and extents,
/// outermost first) with the innermost grid loop's body.
#[allow(clippy::type_complexity)]
fn map_loop(l: &Loop) -> (Loop, Option<(Vec<(VarId, u64)>, Vec<Stmt>)>) {
    let Iter::Range { extent } = l.iter else {
        return (l.clone(), None);
    };
    // Loops built mapped (expanded calls): take the directly nested `grid` chain as it is.
    if l.gpu == Some(GpuAxis::Grid) {
        let mut grid = vec![(l.var, extent)];
        let mut body = &l.body;
        while let [Stmt::Loop(inner)] = body.as_slice() {
            match inner.iter {
                Iter::Range { extent } if inner.gpu == Some(GpuAxis::Grid) => {
                    grid.push((inner.var, extent));
                    body = &inner.body;
                }
                _ => break,
            }
        }
        return (l.clone(), Some((grid, body.clone())));
    }
    if !(l.parallel && l.gpu.is_none() && race_free(l)) {
        return (l.clone(), None);
    }
    // The outer loop is mapped; extend into directly nested range loops while it stays safe.
    let mut chain: Vec<&Loop> = vec![l];
    loop {
        let last = chain[chain.len() - 1];
        let [Stmt::Loop(inner)] = last.body.as_slice() else {
            break;
        };
        if !matches!(inner.iter, Iter::Range { .. }) || inner.gpu.is_some() {
            break;
        }
        let mut candidate = chain.clone();
        candidate.push(inner);
        if !nest_is_safe(&candidate) {
            break;
        }
        chain = candidate;
    }
    let grid: Vec<(VarId, u64)> = chain
        .iter()
        .map(|c| match c.iter {
            Iter::Range { extent } => (c.var, extent),
            _ => unreachable!("only range loops are mapped"),
        })
        .collect();
    let body = chain[chain.len() - 1].body.clone();
    (annotate(l, chain.len()), Some((grid, body)))
}

/// The mapped nest of `grid` (outermost first) around `body`: range loops marked `gpu grid`,
/// parallel as the mapped loop `outer` is.
fn grid_nest(outer: &Loop, grid: &[(VarId, u64)], body: Vec<Stmt>) -> Loop {
    let mut body = body;
    for &(var, extent) in grid.iter().rev() {
        body = vec![Stmt::Loop(Loop {
            var,
            iter: Iter::Range { extent },
            parallel: outer.parallel,
            vector: 1,
            gpu: Some(GpuAxis::Grid),
            body,
        })];
    }
    match body.pop() {
        Some(Stmt::Loop(l)) => l,
        _ => outer.clone(),
    }
}

/// `s` as the loops to launch one after another: a race-free parallel range loop whose body is
/// two or more loops becomes one such loop per statement of its body (loop distribution). Its
/// iterations touch disjoint elements, so running the first statement for every iteration
/// before the second keeps each iteration's order; and each loop can then map its own nest to
/// the grid, where the whole would map only its outer loop (the CPU plan's partial sums of
/// `x @ W`: the parts' identity, then their accumulation, inside one loop over the parts).
fn distribute(s: &Stmt) -> Vec<Loop> {
    let Stmt::Loop(l) = s else {
        return Vec::new();
    };
    let split = l.parallel
        && l.gpu.is_none()
        && matches!(l.iter, Iter::Range { .. })
        && l.body.len() >= 2
        && l.body.iter().all(|s| matches!(s, Stmt::Loop(_)))
        && race_free(l);
    if !split {
        return vec![l.clone()];
    }
    l.body
        .iter()
        .map(|s| Loop {
            body: vec![s.clone()],
            ..l.clone()
        })
        .collect()
}

/// A reduction the CPU's plan accumulates in its output (`tdsl_plan`'s outer reductions: the
/// kept axes, the reduced axes, then the innermost kept axis, so the CPU reads its input in
/// memory order), as a grid over the kept variables, each iteration summing into a register.
/// On the CPU the output row stays in cache between steps; on the device the loop nest would
/// map only its outermost loop to the grid (the reduced loops carry the output from step to
/// step), leaving a few threads for the whole input. `l` must be a perfect nest of range loops
/// around one store `out[ix] = op(out[ix], e)` whose index uses exactly the kept variables,
/// injectively, and whose `e` does not read `out`; the register has the output's compute type
/// (`compute`, per buffer), and the accumulation order along the reduced
/// loops is the CPU's, so the result is the same.
pub fn accumulate_in_registers(l: &Loop, compute: &[ElemType]) -> Option<(Grid, Vec<Stmt>)> {
    use tdsl_loop::{AccId, AccOp, BinOp};
    let mut nest: Vec<&Loop> = vec![l];
    let store = loop {
        let last = nest[nest.len() - 1];
        match last.body.as_slice() {
            [Stmt::Loop(inner)] => nest.push(inner),
            [s @ Stmt::Store { .. }] => break s,
            _ => return None,
        }
    };
    let Stmt::Store { buf, index, value } = store else {
        return None;
    };
    let Expr::Binary(op, old, e) = value else {
        return None;
    };
    let op = match op {
        BinOp::Add => AccOp::Add,
        BinOp::Mul => AccOp::Mul,
        BinOp::Max => AccOp::Max,
        BinOp::Min => AccOp::Min,
        _ => return None,
    };
    if **old
        != (Expr::Load {
            buf: *buf,
            index: index.clone(),
        })
    {
        return None;
    }
    let mut reads_out = false;
    e.visit(&mut |x| reads_out |= matches!(x, Expr::Load { buf: b, .. } if b == buf));
    let mut extents = BTreeMap::new();
    for n in &nest {
        let Iter::Range { extent } = n.iter else {
            return None;
        };
        if n.gpu.is_some() {
            return None;
        }
        extents.insert(n.var, extent);
    }
    let kept: Vec<VarId> = nest
        .iter()
        .map(|n| n.var)
        .filter(|v| index.stride_of(*v) != 0)
        .collect();
    let reduced: Vec<&Loop> = nest
        .iter()
        .copied()
        .filter(|n| index.stride_of(n.var) == 0)
        .collect();
    if reads_out || kept.is_empty() || reduced.is_empty() || !injective(index, &kept, &extents) {
        return None;
    }
    let acc = AccId(0);
    let mut body = vec![Stmt::Update {
        acc,
        op,
        value: (**e).clone(),
    }];
    for r in reduced.iter().rev() {
        body = vec![Stmt::Loop(Loop {
            var: r.var,
            iter: r.iter.clone(),
            parallel: false,
            vector: r.vector,
            gpu: None,
            body,
        })];
    }
    let mut stmts = vec![Stmt::Let {
        acc,
        ty: compute.get(buf.0 as usize).copied()?,
        init: (**old).clone(),
    }];
    stmts.extend(body);
    stmts.push(Stmt::Store {
        buf: *buf,
        index: index.clone(),
        value: Expr::Acc(acc),
    });
    let grid = kept.iter().map(|v| (*v, extents[v])).collect();
    Some((grid, stmts))
}

/// Whether a launch whose grid iteration is a row of work (a warp's or a block's, [`warp_ok`])
/// streams more of its data contiguously across neighbouring grid iterations than along its
/// loops, so a [`Split::Cols`] block serves it better: the grid's last axis is at least a warp
/// long, and the buffers read in its top-level loops at a unit step along the last grid
/// variable are larger than those read at a unit step along the loop (each buffer weighed by
/// its bytes, `buf_bytes`: in `x @ W` at one row, `W` is what streams, `x` stays in cache).
/// At most four accumulators per loop (their partial results go through shared memory).
pub fn columns_pay(grid: &[(VarId, u64)], body: &[Stmt], buf_bytes: &[u64]) -> bool {
    let Some(&(col, e)) = grid.last() else {
        return false;
    };
    if e < WARP || !warp_ok(body) {
        return false;
    }
    let (mut across, mut along) = (0u64, 0u64);
    for s in body {
        let Stmt::Loop(l) = s else { continue };
        if outer_updates(l).is_none_or(|u| u.len() > 4) {
            return false;
        }
        let step = match l.iter {
            Iter::TwoFour { coord, .. } => coord,
            _ => l.var,
        };
        for t in &l.body {
            t.visit(&mut |t| {
                for x in t.exprs() {
                    x.visit(&mut |x| {
                        if let Expr::Load { buf, index } = x {
                            let size = buf_bytes.get(buf.0 as usize).copied().unwrap_or(0);
                            if index.stride_of(col) == 1 {
                                across = across.saturating_add(size);
                            }
                            if index.stride_of(step) == 1 {
                                along = along.saturating_add(size);
                            }
                        }
                    });
                }
            });
        }
    }
    across > along
}

/// `l` with its first `depth` directly nested loops marked `gpu grid`.
fn annotate(l: &Loop, depth: usize) -> Loop {
    let mut out = l.clone();
    out.gpu = Some(GpuAxis::Grid);
    if depth > 1 {
        if let [Stmt::Loop(inner)] = l.body.as_slice() {
            out.body = vec![Stmt::Loop(annotate(inner, depth - 1))];
        }
    }
    out
}

/// What a run of statements reads and writes, for the mapping decisions. Indices are compared
/// as the sets of elements they reach ([`Accesses::same_elements`]): softmax's sum loop stores
/// each `exp` where the next loop (another variable over the same range) reads it back and
/// stores the result.
#[derive(Debug, Default)]
struct Accesses {
    /// Each stored buffer and its one index (`conflict` when a buffer has two that reach
    /// different elements).
    stores: BTreeMap<BufId, Index>,
    conflict: bool,
    loads: Vec<(BufId, Index)>,
    accs_read: BTreeSet<tdsl_loop::AccId>,
    /// Extents of the range loops inside.
    extents: BTreeMap<VarId, u64>,
    /// A loop that is not a range, or a call.
    irregular: bool,
}

impl Accesses {
    fn of(stmts: &[Stmt]) -> Accesses {
        let mut a = Accesses::default();
        for s in stmts {
            s.visit(&mut |s| {
                match s {
                    Stmt::Loop(inner) => match inner.iter {
                        Iter::Range { extent } => {
                            a.extents.insert(inner.var, extent);
                        }
                        _ => a.irregular = true,
                    },
                    Stmt::Call(_) => a.irregular = true,
                    Stmt::Store { buf, index, .. } => match a.stores.get(buf) {
                        Some(i) if !a.same_elements(i, index) => a.conflict = true,
                        Some(_) => {}
                        None => {
                            a.stores.insert(*buf, index.clone());
                        }
                    },
                    _ => {}
                }
                for e in s.exprs() {
                    e.visit(&mut |x| match x {
                        Expr::Load { buf, index } => a.loads.push((*buf, index.clone())),
                        Expr::Acc(acc) => {
                            a.accs_read.insert(*acc);
                        }
                        _ => {}
                    });
                }
            });
        }
        a
    }

    /// Every buffer stored inside is stored at one index and read inside only there: no
    /// iteration reads what another one writes.
    fn iterations_independent(&self) -> bool {
        !self.conflict
            && self.loads.iter().all(|(b, ix)| {
                self.stores
                    .get(b)
                    .is_none_or(|st| self.same_elements(st, ix))
            })
    }

    /// Whether two indices reach the same elements as the loops inside run: equal, or equal
    /// but for the variables of those loops, matched by stride and extent (loops over the same
    /// range, one after the other). Variables bound outside (the launch's) must match exactly,
    /// so each iteration outside still reaches its own elements.
    fn same_elements(&self, a: &Index, b: &Index) -> bool {
        let key = |ix: &Index| {
            let (mut outer, mut inner) = (Vec::new(), Vec::new());
            for &(v, s) in ix.terms.iter().filter(|t| t.1 != 0) {
                match self.extents.get(&v) {
                    Some(&e) => inner.push((s, e)),
                    None => outer.push((v, s)),
                }
            }
            outer.sort_unstable();
            inner.sort_unstable();
            (ix.offset, outer, inner)
        };
        a == b || key(a) == key(b)
    }
}

/// Whether the perfectly nested range loops `chain` (outermost first) can all run as one
/// flattened grid: every store inside is injective over all its variables ([`injective`], with
/// every mapped variable in it), and iterations are independent
/// ([`Accesses::iterations_independent`]).
fn nest_is_safe(chain: &[&Loop]) -> bool {
    let innermost = chain[chain.len() - 1];
    let mapped: Vec<VarId> = chain.iter().map(|l| l.var).collect();
    let mut a = Accesses::of(&innermost.body);
    for l in chain {
        if let Iter::Range { extent } = l.iter {
            a.extents.insert(l.var, extent);
        }
    }
    !a.irregular
        && a.iterations_independent()
        && a.stores
            .values()
            .all(|ix| injective(ix, &mapped, &a.extents))
}

/// Whether one warp of a thread-per-iteration launch (its first 32 iterations) touches more
/// than twice the 32-byte memory sectors its elements need in some access: then a transposing
/// tile pays. A map the CPU already cache-tiled with runs of 8 f32 elements is not wasteful by
/// this rule, and measured faster untouched on an H200 (4096² transpose 0.180 ms against 0.212
/// through a tile); an NHWC permute whose reads stride across rows is (0.164 → 0.089 ms).
pub fn wasteful(grid: &[(VarId, u64)], body: &[Stmt], elem_bytes: &[u64]) -> bool {
    let warp: Vec<BTreeMap<VarId, i64>> = (0..WARP.min(grid.iter().map(|g| g.1).product()))
        .map(|gi| {
            let mut at = BTreeMap::new();
            let mut rest = gi;
            for &(v, e) in grid.iter().rev() {
                at.insert(v, (rest % e.max(1)) as i64);
                rest /= e.max(1);
            }
            at
        })
        .collect();
    let mut accesses: Vec<(BufId, Index)> = Vec::new();
    for s in body {
        s.visit(&mut |s| {
            if let Stmt::Store { buf, index, .. } = s {
                accesses.push((*buf, index.clone()));
            }
            for e in s.exprs() {
                e.visit(&mut |x| {
                    if let Expr::Load { buf, index } = x {
                        accesses.push((*buf, index.clone()));
                    }
                });
            }
        });
    }
    accesses.iter().any(|(buf, ix)| {
        let size = elem_bytes.get(buf.0 as usize).copied().unwrap_or(4) as i64;
        let sectors: BTreeSet<i64> = warp
            .iter()
            .map(|at| {
                let el = ix.offset
                    + ix.terms
                        .iter()
                        .map(|(v, s)| s * at.get(v).copied().unwrap_or(0))
                        .sum::<i64>();
                (el * size).div_euclid(32)
            })
            .collect();
        let need = ((warp.len() as i64 * size + 31) / 32).max(1);
        sectors.len() as i64 > 2 * need
    })
}

/// The shortest axis worth a transposing tile ([`Split::Tile`]): shorter runs leave most of a
/// tile empty, and a warp's accesses along them are few lines anyway.
const TILE_AXIS: u64 = 16;

/// A grid launch that is one store of a transposing map, as a [`Split::Tile`] launch: the grid
/// (cache tiles merged back, the load's contiguous variable and then the store's last), the
/// body with its indices rewritten to match, and the load to stage. `None` when the store is
/// not contiguous in a grid variable, no load is contiguous in another one while strided in
/// the store's, or either axis is shorter than [`TILE_AXIS`].
pub fn transposing_tile(grid: &[(VarId, u64)], body: &[Stmt]) -> Option<(Grid, Vec<Stmt>, Tile)> {
    let [Stmt::Store { buf, index, value }] = body else {
        return None;
    };
    let (mut grid, mut index, mut value) = (grid.to_vec(), index.clone(), value.clone());
    // Undo cache tiling: `outer` merges into `inner` where every index strides `outer` by
    // `inner`'s extent times `inner`'s stride (the CPU's tile-transpose split `v = vo·t + vi`).
    loop {
        let indices: Vec<Index> = std::iter::once(index.clone())
            .chain(value.indices().into_iter().cloned())
            .collect();
        let pair = grid.iter().enumerate().find_map(|(o, &(outer, _))| {
            grid.iter().enumerate().find_map(|(i, &(inner, e_i))| {
                let scaled = indices.iter().all(|ix| {
                    ix.stride_of(outer) == ix.stride_of(inner).saturating_mul(e_i as i64)
                });
                let used = indices.iter().any(|ix| ix.stride_of(inner) != 0);
                (o != i && scaled && used).then_some((o, i))
            })
        });
        let Some((o, i)) = pair else { break };
        let (outer, e_o) = grid[o];
        grid[i].1 = grid[i].1.checked_mul(e_o)?;
        grid.remove(o);
        index = without(&index, outer);
        value = value.map_indices(&|ix| without(ix, outer));
    }
    let along = grid.iter().find(|g| index.stride_of(g.0) == 1).copied()?;
    let (staged_buf, staged, across) = value.indices().into_iter().find_map(|ix| {
        let s = ix.stride_of(along.0);
        if s == 0 || s == 1 {
            return None;
        }
        let buf = load_buf(&value, ix)?;
        let across = grid
            .iter()
            .find(|g| g.0 != along.0 && ix.stride_of(g.0) == 1)
            .copied()?;
        Some((buf, ix.clone(), across))
    })?;
    if along.1 < TILE_AXIS || across.1 < TILE_AXIS {
        return None;
    }
    grid.retain(|g| g.0 != along.0 && g.0 != across.0);
    grid.extend([across, along]);
    let body = vec![Stmt::Store {
        buf: *buf,
        index,
        value,
    }];
    Some((
        grid,
        body,
        Tile {
            buf: staged_buf,
            index: staged,
        },
    ))
}

/// A launch's grid: (variable, extent), outermost first.
pub type Grid = Vec<(VarId, u64)>;

/// `ix` without its `var` term.
fn without(ix: &Index, var: VarId) -> Index {
    Index {
        offset: ix.offset,
        terms: ix.terms.iter().filter(|t| t.0 != var).copied().collect(),
    }
}

/// The buffer `e` loads at `ix` (the first, when several are).
fn load_buf(e: &Expr, ix: &Index) -> Option<BufId> {
    let mut found = None;
    e.visit(&mut |x| {
        if let Expr::Load { buf, index } = x {
            if index == ix && found.is_none() {
                found = Some(*buf);
            }
        }
    });
    found
}

/// Who runs one iteration whose body is `body`: a block when it is warp work ([`warp_ok`]) with a
/// top-level loop of [`BLOCK_ROW`] or more iterations, a warp when it is warp work, else a thread.
pub fn split_of(body: &[Stmt]) -> Split {
    if !warp_ok(body) {
        return Split::Thread;
    }
    let long = body.iter().any(|s| match s {
        Stmt::Loop(l) => lane_extent(&l.iter).is_some_and(|e| e >= BLOCK_ROW),
        _ => false,
    });
    if long {
        Split::Block
    } else {
        Split::Warp
    }
}

/// Whether a grid iteration is a reduction over a sparse row's stored entries (CSR: a
/// compressed loop that only combines accumulators declared outside it) that should run on
/// one warp, its lanes splitting the entries: when consecutive iterations are different rows
/// (the grid's last axis is shorter than a warp, as in a matrix-vector product), a thread per
/// row would read every row's entries with a different thread, one sector per entry. With a
/// long dense axis last (a sparse × dense product), consecutive threads share the row and read
/// the dense operand contiguously, and a thread per element stays.
pub fn sparse_rows(grid: &[(VarId, u64)], body: &[Stmt]) -> bool {
    if grid.last().is_none_or(|g| g.1 >= WARP) {
        return false;
    }
    let mut rows = false;
    for s in body {
        let Stmt::Loop(l) = s else { continue };
        if !matches!(l.iter, Iter::Compressed { .. }) {
            return false;
        }
        let Some(updated) = outer_updates(l) else {
            return false;
        };
        let a = Accesses::of(&l.body);
        if !a.stores.is_empty()
            || updated.is_empty()
            || updated.iter().any(|(u, _)| a.accs_read.contains(u))
        {
            return false;
        }
        rows = true;
    }
    rows
}

/// A sparse matrix's rows times a narrow dense operand (the grid's last axis, the dense
/// operand's columns, shorter than a warp, as [`sparse_rows`] takes them): one grid iteration
/// per row instead of one per (row, column). The body is unrolled over the columns, each copy
/// with its own accumulators, and the copies' walks of the row fused into one, so the row's
/// warp (or block) reads each stored entry once for all its columns, its lanes busy with every
/// column at once. The column axis stays in the grid with extent 1 (as a vector's does), so the
/// rows are binned and split as a matrix-vector product's.
///
/// `None` unless the body is accumulators declared, one walk of the row whose offset does not
/// depend on the column and whose body only updates them, then statements without loops.
pub fn columns_into_rows(grid: &[(VarId, u64)], body: &[Stmt]) -> Option<(Grid, Vec<Stmt>)> {
    use tdsl_loop::AccId;
    let (&(col, e), rows) = grid.split_last()?;
    if rows.is_empty() || !(2..WARP).contains(&e) || !sparse_rows(grid, body) {
        return None;
    }
    let at = body.iter().position(|s| matches!(s, Stmt::Loop(_)))?;
    let Stmt::Loop(walk) = &body[at] else {
        return None;
    };
    let (prefix, suffix) = (&body[..at], &body[at + 1..]);
    let Iter::Compressed { ptr_index, .. } = &walk.iter else {
        return None;
    };
    let lets_only = prefix.iter().all(|s| matches!(s, Stmt::Let { .. }));
    let updates_only = walk.body.iter().all(|s| matches!(s, Stmt::Update { .. }));
    let no_loops = suffix.iter().all(|s| !matches!(s, Stmt::Loop(_)));
    if !lets_only || !updates_only || !no_loops || ptr_index.terms.iter().any(|t| t.0 == col) {
        return None;
    }
    // Copy c renames the body's accumulator k (declared at its top level) to a fresh one,
    // `highest + 1 + c * accs.len() + k`.
    let accs: Vec<AccId> = body
        .iter()
        .filter_map(|s| match s {
            Stmt::Let { acc, .. } => Some(*acc),
            _ => None,
        })
        .collect();
    let mut highest = 0;
    for s in body {
        s.visit(&mut |s| match s {
            Stmt::Let { acc, .. } | Stmt::Update { acc, .. } => highest = highest.max(acc.0),
            _ => {}
        });
    }
    let copy = |s: &Stmt, c: u64| -> Stmt {
        let rename = |a: AccId| match accs.iter().position(|&x| x == a) {
            Some(k) => AccId(highest + 1 + (c as usize * accs.len() + k) as u32),
            None => a,
        };
        let s = tdsl_loop::passes::subst_var(s, col, c as i64);
        let s = s.map_exprs(&mut |x| rename_accs(x, &rename), &|ix| ix.clone());
        match s {
            Stmt::Let { acc, ty, init } => Stmt::Let {
                acc: rename(acc),
                ty,
                init,
            },
            Stmt::Update { acc, op, value } => Stmt::Update {
                acc: rename(acc),
                op,
                value,
            },
            other => other,
        }
    };
    let mut out = Vec::new();
    for c in 0..e {
        out.extend(prefix.iter().map(|s| copy(s, c)));
    }
    let mut fused = walk.clone();
    fused.body = (0..e)
        .flat_map(|c| walk.body.iter().map(move |s| (s, c)))
        .map(|(s, c)| copy(s, c))
        .collect();
    out.push(Stmt::Loop(fused));
    for c in 0..e {
        out.extend(suffix.iter().map(|s| copy(s, c)));
    }
    let mut grid = rows.to_vec();
    grid.push((col, 1));
    Some((grid, out))
}

/// `e` with every accumulator `a` it reads replaced by `rename(a)`.
fn rename_accs(e: &Expr, rename: &impl Fn(tdsl_loop::AccId) -> tdsl_loop::AccId) -> Expr {
    match e {
        Expr::Acc(a) => Expr::Acc(rename(*a)),
        other => other.map_children(|x| rename_accs(x, rename)),
    }
}

/// The entries the compressed loops of `body` can walk in all: the capacity of their coordinate
/// arrays (`elems` of every buffer).
fn stored_entries(body: &[Stmt], elems: &[u64]) -> u64 {
    body.iter()
        .filter_map(|s| match s {
            Stmt::Loop(Loop {
                iter: Iter::Compressed { crd, .. },
                ..
            }) => elems.get(crd.0 as usize).copied(),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// Whether the body of a grid iteration can run as one warp: it has a top-level range loop of
/// at least [`WARP`] iterations, every top-level loop is a range loop (or a 2:4 row's kept
/// values, [`lane_extent`]) of range loops, the
/// accumulators updated inside them are combined by `+ * max min` (never overwritten) and not
/// read inside them (a lane holds only its part until the loop ends), every store inside them
/// is injective in the loop's variable (lanes write distinct elements; variables bound
/// outside are fixed for the warp), and iterations are independent.
pub fn warp_ok(body: &[Stmt]) -> bool {
    let mut long = false;
    for s in body {
        let Stmt::Loop(l) = s else { continue };
        let Some(extent) = lane_extent(&l.iter) else {
            return false;
        };
        long |= extent >= WARP;
        let Some(updated) = outer_updates(l) else {
            return false;
        };
        let mut a = Accesses::of(&l.body);
        a.extents.insert(l.var, extent);
        let inside = |index: &Index| Index {
            offset: index.offset,
            terms: index
                .terms
                .iter()
                .filter(|t| a.extents.contains_key(&t.0))
                .copied()
                .collect(),
        };
        let ok = !a.irregular
            && a.iterations_independent()
            && !updated.iter().any(|(u, _)| a.accs_read.contains(u))
            && a.stores
                .values()
                .all(|ix| injective(&inside(ix), &[l.var], &a.extents));
        if !ok {
            return false;
        }
    }
    long
}

/// The iterations of a loop whose count is known before it runs, which a warp's or block's
/// threads can split: a range, or a 2:4 row's kept values (two per group, each iteration
/// reading its own position from the metadata).
fn lane_extent(iter: &Iter) -> Option<u64> {
    match *iter {
        Iter::Range { extent } => Some(extent),
        Iter::TwoFour { groups, .. } => Some(groups.saturating_mul(2)),
        _ => None,
    }
}

/// The accumulators a loop updates that are declared outside it, each with the one operation
/// that combines it; `None` when one is overwritten (`Set`) or combined two ways.
pub fn outer_updates(l: &Loop) -> Option<Vec<(tdsl_loop::AccId, tdsl_loop::AccOp)>> {
    let inner = tdsl_loop::walk::stmt_lets(&l.body);
    let mut out: Vec<(tdsl_loop::AccId, tdsl_loop::AccOp)> = Vec::new();
    let mut ok = true;
    for s in &l.body {
        s.visit(&mut |s| {
            if let Stmt::Update { acc, op, .. } = s {
                if inner.contains(acc) {
                    return;
                }
                match out.iter().find(|(a, _)| a == acc) {
                    Some((_, o)) if o != op => ok = false,
                    Some(_) => {}
                    None => out.push((*acc, *op)),
                }
                ok &= *op != tdsl_loop::AccOp::Set;
            }
        });
    }
    ok.then_some(out)
}

/// Whether distinct values of the variables of `ix` give distinct elements, by the mixed-radix
/// rule: ordered by stride, each term's stride exceeds the span of all smaller ones. Every
/// variable with a nonzero stride needs a static extent, and every `mapped` variable must
/// appear (else two threads would share an element).
pub fn injective(ix: &Index, mapped: &[VarId], extents: &BTreeMap<VarId, u64>) -> bool {
    let mut terms: Vec<(i128, i128)> = Vec::new();
    let mut seen = BTreeSet::new();
    for &(v, s) in &ix.terms {
        if s == 0 {
            continue;
        }
        if !seen.insert(v) {
            return false;
        }
        let Some(&e) = extents.get(&v) else {
            return false;
        };
        terms.push(((s as i128).abs(), e as i128));
    }
    if !mapped.iter().all(|v| seen.contains(v)) {
        return false;
    }
    terms.sort();
    let mut span = 0i128;
    for (stride, extent) in terms {
        if extent > 1 && stride <= span {
            return false;
        }
        span += stride * (extent - 1);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ix(terms: &[(u32, i64)]) -> Index {
        Index {
            offset: 0,
            terms: terms.iter().map(|&(v, s)| (VarId(v), s)).collect(),
        }
    }

    fn lp(var: u32, extent: u64, body: Vec<Stmt>) -> Stmt {
        Stmt::Loop(Loop {
            var: VarId(var),
            iter: Iter::Range { extent },
            parallel: false,
            vector: 1,
            gpu: None,
            body,
        })
    }

    fn load(buf: u32, terms: &[(u32, i64)], offset: i64) -> Expr {
        Expr::Load {
            buf: BufId(buf),
            index: Index {
                offset,
                ..ix(terms)
            },
        }
    }

    /// CSR (offsets %0, columns %1, values %2) times 7 columns of %3, into %4: one iteration
    /// per row, one walk of it with an accumulator per column, the column axis kept at extent 1.
    #[test]
    fn narrow_dense_columns_unroll_into_their_rows_walk() {
        use tdsl_loop::{AccId, AccOp, ElemType};
        let (row, col, entry, coord) = (VarId(0), VarId(3), VarId(1), VarId(2));
        let a0 = AccId(0);
        let walk = |body: Vec<Stmt>, ptr_index: Index| {
            Stmt::Loop(Loop {
                var: entry,
                iter: Iter::Compressed {
                    ptr: BufId(0),
                    ptr_index,
                    crd: BufId(1),
                    coord,
                },
                parallel: false,
                vector: 1,
                gpu: None,
                body,
            })
        };
        let product = Expr::Binary(
            tdsl_loop::BinOp::Mul,
            Box::new(load(2, &[(1, 1)], 0)),
            Box::new(load(3, &[(2, 7), (3, 1)], 0)),
        );
        let body = |ptr_index: Index| {
            vec![
                Stmt::Let {
                    acc: a0,
                    ty: ElemType::F32,
                    init: Expr::Const(0.0),
                },
                walk(
                    vec![Stmt::Update {
                        acc: a0,
                        op: AccOp::Add,
                        value: product.clone(),
                    }],
                    ptr_index,
                ),
                Stmt::Store {
                    buf: BufId(4),
                    index: ix(&[(0, 7), (3, 1)]),
                    value: Expr::Acc(a0),
                },
            ]
        };
        let grid = vec![(row, 64), (col, 7)];
        let (g, b) = columns_into_rows(&grid, &body(ix(&[(0, 1)]))).expect("unrolls");
        assert_eq!(g, vec![(row, 64), (col, 1)]);
        assert_eq!(b.len(), 7 + 1 + 7, "7 accumulators, one walk, 7 stores");
        let Stmt::Loop(fused) = &b[7] else {
            panic!("{b:?}")
        };
        assert_eq!(fused.body.len(), 7);
        for c in 0..7usize {
            let acc = AccId(1 + c as u32);
            assert!(matches!(b[c], Stmt::Let { acc: a, .. } if a == acc));
            let Stmt::Update { acc: a, value, .. } = &fused.body[c] else {
                panic!("{fused:?}")
            };
            assert_eq!(*a, acc);
            // Column c of the dense operand: 7·coord + c.
            let mut reads = Vec::new();
            value.visit(&mut |e| {
                if let Expr::Load {
                    buf: BufId(3),
                    index,
                } = e
                {
                    reads.push(index.clone());
                }
            });
            assert_eq!(
                reads,
                [Index {
                    offset: c as i64,
                    ..ix(&[(2, 7)])
                }]
            );
            let Stmt::Store { index, value, .. } = &b[8 + c] else {
                panic!("{b:?}")
            };
            assert_eq!(
                *index,
                Index {
                    offset: c as i64,
                    ..ix(&[(0, 7)])
                }
            );
            assert_eq!(*value, Expr::Acc(acc));
        }
        // The row's offset depending on the column, a warp's worth of columns, a vector: kept.
        assert!(columns_into_rows(&grid, &body(ix(&[(0, 1), (3, 1)]))).is_none());
        assert!(columns_into_rows(&[(row, 64), (col, 32)], &body(ix(&[(0, 1)]))).is_none());
        assert!(columns_into_rows(&[(row, 64), (col, 1)], &body(ix(&[(0, 1)]))).is_none());
    }

    #[test]
    fn warps_take_reductions_but_not_running_values_or_carried_dependencies() {
        use tdsl_loop::{AccId, AccOp, ElemType};
        let a0 = AccId(0);
        let let_a0 = Stmt::Let {
            acc: a0,
            ty: ElemType::F32,
            init: Expr::Const(0.0),
        };
        let add = Stmt::Update {
            acc: a0,
            op: AccOp::Add,
            value: load(0, &[(1, 1)], 0),
        };
        let store = |index: Index, value: Expr| Stmt::Store {
            buf: BufId(1),
            index,
            value,
        };
        // A row sum: lanes split the loop, the warp combines, lane 0 stores.
        let sum = vec![
            let_a0.clone(),
            lp(1, 64, vec![add.clone()]),
            store(ix(&[]), Expr::Acc(a0)),
        ];
        assert!(warp_ok(&sum));
        assert_eq!(split_of(&sum), Split::Warp);
        // A row of BLOCK_ROW elements is a block's work, a running sum no one's.
        let long = vec![let_a0.clone(), lp(1, BLOCK_ROW, vec![add.clone()])];
        assert_eq!(split_of(&long), Split::Block);
        // Too short a row to be worth a warp.
        assert!(!warp_ok(&[let_a0.clone(), lp(1, 8, vec![add.clone()])]));
        // A running sum reads the accumulator inside the loop: partial values on each lane.
        let running = vec![
            let_a0,
            lp(1, 64, vec![add, store(ix(&[(1, 1)]), Expr::Acc(a0))]),
        ];
        assert!(!warp_ok(&running));
        assert_eq!(split_of(&running), Split::Thread);
        // y[i + 1] = 2·y[i]: carried through memory from one lane to the next.
        let carried = vec![lp(
            1,
            64,
            vec![Stmt::Store {
                buf: BufId(1),
                index: Index {
                    offset: 1,
                    ..ix(&[(1, 1)])
                },
                value: load(1, &[(1, 1)], 0),
            }],
        )];
        assert!(!warp_ok(&carried));
    }

    #[test]
    fn bins_put_long_rows_first_on_blocks_and_the_rest_on_warps_longest_first() {
        // Rows of 0, 5, 2000, 5, 1024, 1023 and 3000 entries.
        let lens = [0, 5, 2000, 5, 1024, 1023, 3000];
        let mut ptr = vec![0i32];
        for l in lens {
            ptr.push(ptr.last().unwrap() + l);
        }
        let bins = Bins {
            list: BufId(9),
            ptr: BufId(0),
            at: ix(&[(0, 1)]),
            grid: vec![(VarId(0), 7)],
            inner: 1,
            split: true,
        };
        let list = bins.fill(&ptr).unwrap();
        assert_eq!(list, [3, 4, 6, 2, 4, 5, 1, 3, 0]);
        assert_eq!(Bins::counts(&list), (3, 4));
        // Without a list of long rows (a thread per element): one list, longest first.
        let one = Bins {
            split: false,
            ..bins.clone()
        };
        assert_eq!(one.fill(&ptr).unwrap(), [0, 7, 6, 2, 4, 5, 1, 3, 0]);
        // A grid of (row, column) pairs: every column of a row has the row's length; the row's
        // offset is read at `2·row + 1` (every other row of a larger operand, from the second).
        let bins = Bins {
            at: Index {
                offset: 1,
                terms: vec![(VarId(0), 2)],
            },
            grid: vec![(VarId(0), 3), (VarId(1), 2)],
            ..bins
        };
        // Rows 1, 3, 5: 5, 5 and 1023 entries, all short; the longest row's pair first.
        let list = bins.fill(&ptr).unwrap();
        assert_eq!(list, [0, 6, 4, 5, 0, 1, 2, 3]);
        // From the third row: rows 2, 4, 6 of 2000, 1024 and 3000 entries, all long.
        let bins = Bins {
            at: Index {
                offset: 2,
                terms: vec![(VarId(0), 2)],
            },
            ..bins
        };
        assert_eq!(bins.fill(&ptr).unwrap(), [6, 0, 4, 5, 0, 1, 2, 3]);
        // Offsets past the end of `ptr`, or decreasing, are an error, not a panic.
        assert!(bins.fill(&ptr[..4]).is_err());
        let mut down = ptr.clone();
        down[3] = 0;
        assert!(bins.fill(&down).is_err());
    }

    #[test]
    fn group_tables_list_each_groups_union_of_block_columns_with_a_bit_per_block_row() {
        // Five block rows of six block columns, in groups of two (the last group partial).
        let rows: [&[i32]; 5] = [&[0, 2, 5], &[2], &[], &[1, 5], &[0]];
        let mut ptr = vec![0i32];
        let mut idx = Vec::new();
        for r in rows {
            idx.extend_from_slice(r);
            ptr.push(idx.len() as i32);
        }
        let groups = Groups {
            table: BufId(9),
            ptr: BufId(0),
            idx: BufId(1),
            block_rows: 5,
            g: 2,
            block_cols: 6,
        };
        assert_eq!(groups.groups(), 3);
        let e = |col: i32, bits: i32| col | bits << 16;
        let want = [
            vec![0, 3, 5, 6],
            vec![e(0, 1), e(2, 3), e(5, 1)],
            vec![e(1, 2), e(5, 2)],
            vec![e(0, 1)],
        ]
        .concat();
        assert_eq!(groups.fill(&ptr, &idx).unwrap(), want);
        // It fits the buffer sized for 7 stored blocks: 4 offsets and at most 7 words.
        assert!(want.len() as u64 <= groups.elems(7));
        let table = Table::Groups(groups.clone());
        assert!(table.fill(&[&ptr, &idx], groups.elems(7)).is_ok());
        assert!(table.fill(&[&ptr, &idx], 5).is_err());
        // Columns out of order, past the last block column, offsets past `idx` or too few
        // offsets are errors, never a panic.
        let mut unsorted = idx.clone();
        unsorted.swap(0, 1);
        assert!(groups.fill(&ptr, &unsorted).is_err());
        let mut wide = idx.clone();
        wide[2] = 6;
        assert!(groups.fill(&ptr, &wide).is_err());
        assert!(groups.fill(&ptr, &idx[..4]).is_err());
        assert!(groups.fill(&ptr[..4], &idx).is_err());
    }

    #[test]
    fn mixed_radix_indices_are_injective_and_overlaps_are_not() {
        let ext: BTreeMap<VarId, u64> = [(VarId(0), 4), (VarId(1), 8), (VarId(2), 3)].into();
        assert!(injective(&ix(&[(0, 8), (1, 1)]), &[VarId(0)], &ext));
        assert!(injective(
            &ix(&[(1, 1), (0, 8)]),
            &[VarId(0), VarId(1)],
            &ext
        ));
        // Row stride 7 < 8 columns: rows overlap.
        assert!(!injective(&ix(&[(0, 7), (1, 1)]), &[VarId(0)], &ext));
        // A mapped variable missing from the store: two threads write one element.
        assert!(!injective(&ix(&[(1, 1)]), &[VarId(0), VarId(1)], &ext));
        // Transposed store: strides in any order.
        assert!(injective(
            &ix(&[(0, 1), (1, 4)]),
            &[VarId(0), VarId(1)],
            &ext
        ));
        // A variable without a static extent.
        assert!(!injective(&ix(&[(9, 1)]), &[], &ext));
        // Reversed (negative) strides are as good as positive ones.
        assert!(injective(&ix(&[(0, -8), (1, 1)]), &[VarId(0)], &ext));
    }
}
