//! Tensor-core launches: which `gemm`, 2:4 `spmm` and BSR `spmm` calls run on the templates of
//! `kernels/mma.cuh` (`mma.sync` m16n8k16, `mma.sp::ordered_metadata` m16n8k32), and the
//! wrapper each becomes.
//!
//! A call qualifies when its two product operands are f16 or bf16 of one type, read along K
//! contiguously (or, for B, along N), with 16-byte aligned rows; everything else keeps the
//! generic kernel of `tdsl_loop::expand`, as does a 2:4 weight times one vector (a tile of 128
//! columns would do 128 times the work to read the weight once; a block or warp per row of the
//! weight reads it once as well, `map.rs`). Before deciding, [`select`] looks through the copy
//! kernels the CPU planner puts around a call (an f16 operand widened to an f32 temp and
//! transposed for the CPU's kernels; an f32 result transposed into the output): when a temp is
//! written by one pure copy nest and read only by the call, the call reads the copy's source
//! through the composed view, and likewise writes the copy's destination, and the copy
//! kernels are not launched. The values are the same: widening f16 to f32 is exact and the
//! result is rounded once either way.

use std::collections::{BTreeMap, BTreeSet};

use tdsl_loop::{
    BufId, Buffer, ElemType, Expr, Index, Iter, LibCall, LoopProgram, MatView, Role, Side,
    SparseLayout, Stmt, VarId,
};

/// Threads per block of a tensor-core launch (8 warps; BSR with 64-column warps: 4).
pub const THREADS: u64 = 256;

/// One operand as the templates read it: `buf[offset + i * ld + j]` (j contiguous).
#[derive(Debug, Clone, PartialEq)]
pub struct Operand {
    pub buf: BufId,
    pub offset: i64,
    pub ld: i64,
}

/// What A is.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// Dense (`mma.sync`), `bk` (32 or 64) of K per pipeline stage, `stages` stages.
    Dense { bk: u64, stages: u64 },
    /// Dense on sm_90a (`wgmma.mma_async` m64n`bn`k16 from shared-memory descriptors): tiles
    /// 128 × `bn` (256, or 128 when 256-wide tiles would leave SMs idle), B k-contiguous.
    Wgmma { bn: u64 },
    /// Dense f32 or f64, exact in its type (`tdsl_sgemm`: 128 × 128 tiles, K in steps of 8):
    /// any strides; an f16 or bf16 operand of an f32 product (not both of one type: tensor
    /// cores take those) is widened as it is loaded. `dmma`: an f64 product on the f64 tensor
    /// cores (`mma.sync` m8n8k4, 64 × 32 outputs per warp; only with [`Variants::dmma`] until a
    /// device has confirmed it); otherwise FMA units, 8 × 8 outputs per thread.
    Simt { dmma: bool },
    /// 2:4: `a` holds the compressed values, `meta` the metadata words; `mma.sp` (128 × 128
    /// × 64 tiles, `wgmma` 0), or `wgmma.mma_async.sp` (sm_90a, B k-contiguous) with `wgmma`
    /// m64 blocks per warpgroup (1 or 2: tiles of 128 or 256 rows by 128, 128 of K).
    TwoFour { meta: Operand, wgmma: u64 },
    /// Block-sparse rows of `r × c` blocks (tensor cores over the stored blocks only): `a` holds
    /// the blocks' values (`a.ld` is unused), `ptr` and `idx` the block rows' offsets and
    /// columns; `walk` says how thread blocks cover them. With [`BsrWalk::Rows`] each warp
    /// computes `r × wn` (32 or 64 columns; `wn` unused otherwise). The walks over groups of
    /// block rows read the union of their columns from `table`, the group table the host
    /// builds per pattern ([`crate::map::Groups`]); the row walk reads `idx` itself.
    Bsr {
        ptr: BufId,
        idx: BufId,
        r: u64,
        c: u64,
        wn: u64,
        walk: BsrWalk,
        table: Option<BufId>,
    },
}

/// How the thread blocks of a BSR product walk its stored blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BsrWalk {
    /// One block row per thread block, its stored blocks in turn (`tdsl_tc_bsr`, `mma.sync`).
    Rows,
    /// 128 / r block rows per thread block over the union of their block columns, so one strip
    /// of B serves every row stored there (`tdsl_tc_bsr_union`, `mma.sync`).
    Union,
    /// sm_90a: the stored blocks as `wgmma`'s B, each an m64n`r`k16 of its own, under tiles of
    /// 128 dense rows by `cols` (128 or 256) BSR rows walking the union of their block columns
    /// (`tdsl_tc_wgmma_bsr`: it computes Cᵀ). Written from the PTX ISA and checked in the host
    /// emulation, not yet on a device: taken only where a variant asks for it
    /// (`TDSL_TC_BSR=wgmma`).
    Wgmma { cols: u16 },
}

/// What the product computes on tensor cores (`C[m, n] (+)= Σ_k A[m, k] · B[k, n]`).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorCore {
    pub kind: Kind,
    /// f16 or bf16: the type of both product operands.
    pub input: ElemType,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    /// A, k-contiguous.
    pub a: Operand,
    /// B: k-contiguous (`b_kn` false: `(k, n)` at `n * ld + k`) or n-contiguous.
    pub b: Operand,
    pub b_kn: bool,
    /// C: `(m, n)` at `offset + m * ldm + n * ldn`.
    pub c: BufId,
    pub c_offset: i64,
    pub ldm: i64,
    pub ldn: i64,
    pub accumulate: bool,
    /// Batch axes: (extent, stride of a, of b, of c).
    pub batch: Vec<(u64, i64, i64, i64)>,
    /// The template's (m, n) are the call's (n, m): it computes Cᵀ = Bᵀ·Aᵀ.
    pub swapped: bool,
    /// An elementwise kernel fused into the store (C is then its destination).
    pub epilogue: Option<Box<Epilogue>>,
    /// B was n-contiguous and is read from a k-contiguous copy that a launch before this one
    /// writes (`b` is then that copy).
    pub staged: Option<Staging>,
    /// K cut into parts, each its own thread blocks ([`SplitK`]).
    pub split: Option<SplitK>,
}

/// Split-K for a launch with too few output tiles to fill the SMs (a short product, which reads
/// its weight once and is bound by memory, not by the tensor cores): K is cut into `parts`
/// ranges of `kc` (a multiple of the template's K step), each computed by its own thread blocks
/// into f32 partial sums in the scratch buffer `ws` (`[part][batch][m][n]`); a second launch
/// (`Launch::reduce`) adds the parts in order and stores each sum through the product's `put`
/// (its epilogue and accumulation included). No atomics: the result does not depend on the
/// blocks' order.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitK {
    pub parts: u64,
    pub kc: u64,
    pub ws: BufId,
}

/// The transposing copy of a dense product's n-contiguous B into a scratch buffer, k-contiguous,
/// launched before the product so that it runs on `wgmma`, whose shared-memory descriptors
/// tdsl builds for k-contiguous operands only. Taken where the product does enough work per
/// element of B to repay the copy ([`stage_rows`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Staging {
    /// B as stored: (k, n) at `offset + k * ld + n`.
    pub src: Operand,
    /// The scratch buffer: (k, n) at `n * k_extent + k`, one such matrix per batch element B
    /// varies along.
    pub dst: BufId,
    pub k: u64,
    pub n: u64,
    /// The batch axes B varies along: (extent, stride in `src`, stride in `dst`).
    pub batch: Vec<(u64, i64, i64)>,
}

/// An elementwise kernel fused into a product's store: for every element of the product's
/// result, its destination gets `value`, where each load of the result (`temp` at
/// `temp_index`) reads the accumulator rounded to the result's type, so the values are those
/// of the two kernels run one after the other.
#[derive(Debug, Clone, PartialEq)]
pub struct Epilogue {
    /// The fused kernel (not launched).
    pub kernel: usize,
    pub temp: BufId,
    pub temp_index: Index,
    pub value: Expr,
    /// The fused kernel's store: its destination's index over the nest's variables.
    pub dst_index: Index,
    /// Each loop variable of the fused nest, from the coordinates of the call's result.
    pub vars: Vec<(VarId, VarCoord)>,
}

/// A coordinate of a call's result: its row, its column, or a batch axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coord {
    Row,
    Col,
    Batch(usize),
}

/// A loop variable as a digit of one coordinate of the result: `(coord / div) % extent`, or 0
/// for a unit loop (`coord` `None`). A coordinate split over several loops (the CPU planner's
/// rows `b n` of a batched product flattened into one) is a mixed-radix number of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VarCoord {
    pub coord: Option<Coord>,
    pub div: u64,
    pub extent: u64,
    /// The coordinate's extent.
    pub len: u64,
}

impl TensorCore {
    /// The block tile's N extent: 128 for the `mma.sync` templates (the dense one's 128 × 256
    /// tile, 64 × 64 warp tiles, ran at 310 TFLOP/s against 339 for 128 × 128 on an H200 at
    /// 8192³, and at 143 against 208 with 256 rows, so it is not chosen), `wgmma`'s 64, 128 or
    /// 256 ([`wgmma_columns`]), BSR's 256 (8 warps of 32 columns side by side over one block
    /// row) or 128 over groups of block rows (and on `wgmma`: 128 dense rows, the call's N).
    pub fn bn(&self) -> u64 {
        match self.kind {
            Kind::Bsr {
                walk: BsrWalk::Rows,
                ..
            } => 256,
            Kind::Bsr { .. } => 128,
            Kind::Wgmma { bn } => bn,
            _ => 128,
        }
    }

    /// The block tile's M extent: 128 (for BSR over groups, 128 / r block rows; 256 for 2:4 on
    /// `wgmma.sp` with two m64 blocks per warpgroup), one block row for BSR, or BSR on `wgmma`'s
    /// `cols` BSR rows.
    pub fn bm(&self) -> u64 {
        match self.kind {
            Kind::Bsr {
                r,
                walk: BsrWalk::Rows,
                ..
            } => r,
            Kind::Bsr {
                walk: BsrWalk::Wgmma { cols },
                ..
            } => cols as u64,
            Kind::TwoFour { wgmma: 2, .. } => 256,
            _ => 128,
        }
    }

    /// The group table this product reads ([`crate::map::Groups`]): BSR walks over groups of
    /// block rows, 128 / r of them (`tdsl_tc_bsr_union`) or `cols` / r (`tdsl_tc_wgmma_bsr`).
    pub fn groups(&self) -> Option<crate::map::Groups> {
        let Kind::Bsr {
            ptr,
            idx,
            r,
            c,
            walk,
            table: Some(table),
            ..
        } = self.kind
        else {
            return None;
        };
        let g = match walk {
            BsrWalk::Rows => return None,
            BsrWalk::Union => 128 / r,
            BsrWalk::Wgmma { cols } => cols as u64 / r,
        };
        Some(crate::map::Groups {
            table,
            ptr,
            idx,
            block_rows: self.m / r,
            g,
            block_cols: self.k / c,
        })
    }

    /// Threads per block of the launch.
    pub fn threads(&self) -> u64 {
        match self.kind {
            Kind::Bsr {
                wn,
                walk: BsrWalk::Rows,
                ..
            } => 32 * self.bn() / wn,
            _ => THREADS,
        }
    }

    /// Output tiles per batch element ([`Self::bm`] × [`Self::bn`]).
    pub fn tiles(&self) -> u64 {
        self.m.div_ceil(self.bm()) * self.n.div_ceil(self.bn())
    }

    /// Blocks of the launch (one per output tile, batch element and part of K).
    pub fn blocks(&self) -> u64 {
        let parts = self.split.as_ref().map_or(1, |s| s.parts);
        self.tiles() * self.batch.iter().map(|b| b.0).product::<u64>() * parts
    }

    /// Dynamic shared memory of one block, in bytes (`TDSL_TC_GEMM_SMEM`, `TDSL_TC_SP24_SMEM`,
    /// `TDSL_TC_BSR_SMEM`).
    pub fn smem_bytes(&self) -> u64 {
        match self.kind {
            // 3 stages of A (128 x 32) and B (BN x 32) halves.
            Kind::Dense { bk, stages } => stages * (128 + self.bn()) * bk * 2,
            // Static: two buffers of 8 x 128 values of A and of B (16 KiB of f32, 32 KiB of f64;
            // 33 KiB with DMMA's padded rows).
            Kind::Simt { .. } => 0,
            // `TDSL_TC_WG_SMEM`: 4 stages of A (128 x 64) and B (BN x 64) halves, and room to
            // align the first to the 1024 bytes of a swizzle atom.
            Kind::Wgmma { bn } => 4 * (128 + bn) * 64 * 2 + 1024,
            // 3 stages of A values (128 x 32 halves), B (64 x 128 halves), 128 x 2 metadata words.
            Kind::TwoFour { wgmma: 0, .. } => 3 * (128 * 4 + 128 * 8 + 64) * 16,
            // `TDSL_TC_WGSP_SMEM`: 4 stages of A values (128 x 64 halves), B (128 x 128 halves),
            // 128 x 4 metadata words, and room to align the first to 1024 bytes.
            //   (`TDSL_TC_WGSP_SMEM(MW)`: 4 stages for one m64 block per warpgroup, 3 for two.)
            Kind::TwoFour { wgmma: mw, .. } => {
                let stages = if mw == 1 { 4 } else { 3 };
                stages * (128 * mw * (128 + 16) + 128 * 256) + 1024
            }
            // 3 stages of one stored block (r x c halves) and its c x 256 strip of B.
            Kind::Bsr {
                r,
                c,
                walk: BsrWalk::Rows,
                ..
            } => 3 * (r + self.bn()) * c * 2,
            // `TDSL_TC_BSRU_SMEM`: 4 stages of the group's blocks (128 x c) and the c x 128 strip.
            Kind::Bsr {
                c,
                walk: BsrWalk::Union,
                ..
            } => 4 * (128 + 128) * c * 2,
            // `TDSL_TC_WG_SMEM(cols)`: `wgmma`'s 4 stages (128 dense rows and `cols` rows of blocks,
            // 64 halves each) and the alignment.
            Kind::Bsr {
                walk: BsrWalk::Wgmma { cols },
                ..
            } => 4 * (128 + cols as u64) * 64 * 2 + 1024,
        }
    }

    /// The buffers the wrapper takes, in id order.
    pub fn params(&self) -> Vec<BufId> {
        // Split: the product writes its partial sums; the reduce launch stores C.
        let out = self.split.as_ref().map_or(self.c, |s| s.ws);
        let mut v: BTreeSet<BufId> = [self.a.buf, self.b.buf, out].into();
        match &self.kind {
            Kind::Dense { .. } | Kind::Wgmma { .. } | Kind::Simt { .. } => {}
            Kind::TwoFour { meta, .. } => {
                v.insert(meta.buf);
            }
            Kind::Bsr {
                ptr, idx, table, ..
            } => {
                v.extend([*ptr, table.unwrap_or(*idx)]);
            }
        }
        if self.split.is_none() {
            v.extend(self.store_params());
        }
        v.into_iter().collect()
    }

    /// The buffers the store of a result reads or writes: C and what a fused epilogue loads.
    fn store_params(&self) -> BTreeSet<BufId> {
        let mut v: BTreeSet<BufId> = [self.c].into();
        if let Some(e) = &self.epilogue {
            e.value.visit(&mut |x| {
                if let Expr::Load { buf, .. } = x {
                    if *buf != e.temp {
                        v.insert(*buf);
                    }
                }
            });
        }
        v
    }

    /// The buffers of a split product's reduce launch, in id order: the partial sums and the
    /// store's.
    pub fn reduce_params(&self) -> Vec<BufId> {
        let mut v = self.store_params();
        v.extend(self.split.as_ref().map(|s| s.ws));
        v.into_iter().collect()
    }

    /// Elements of the result: every batch element's M × N.
    pub fn outputs(&self) -> u64 {
        self.m * self.n * self.batch.iter().map(|b| b.0).product::<u64>()
    }

    /// The K step a part must be a multiple of: the template's stage (64 of a 16-bit K, 32 of a
    /// TF32 one; 128 for 2:4 on `wgmma.sp`).
    fn k_step(&self) -> Option<u64> {
        match self.kind {
            Kind::Dense { .. } | Kind::Wgmma { .. } if self.input == ElemType::F32 => Some(32),
            Kind::Dense { .. } | Kind::Wgmma { .. } => Some(64),
            Kind::TwoFour { wgmma: 0, .. } => Some(64),
            Kind::TwoFour { .. } => Some(128),
            Kind::Simt { .. } | Kind::Bsr { .. } => None,
        }
    }

    /// A one-line description for the launch comment.
    pub fn describe(&self) -> String {
        let ty = match self.input {
            ElemType::BF16 => "bf16",
            ElemType::F32 => "tf32",
            _ => "f16",
        };
        // tf32's k step is 8 (the 32 bytes of a 16-bit k16), its tiles' K half the halves'.
        let (k_step, k_div) = if self.input == ElemType::F32 {
            (8, 2)
        } else {
            (16, 1)
        };
        let (instr, bk, stages) = match self.kind {
            Kind::TwoFour { wgmma: 0, .. } => {
                ("mma.sp::ordered_metadata m16n8k32".to_string(), 64, 3)
            }
            Kind::TwoFour { wgmma: mw, .. } => (
                "wgmma.mma_async.sp m64n128k32".to_string(),
                128,
                if mw == 1 { 4 } else { 3 },
            ),
            Kind::Dense { bk, stages } => (format!("mma.sync m16n8k{k_step}"), bk / k_div, stages),
            Kind::Simt { dmma } => {
                let t = if self.input == ElemType::F64 {
                    "f64"
                } else {
                    "f32"
                };
                let (m, n, k) = (self.m, self.n, self.k);
                let how = match dmma {
                    true => format!("f64 tensor cores (mma.sync m8n8k4, exact f64), M={m} N={n} K={k}, tiles 128x128x8, 64x32 outputs per warp"),
                    false => format!("{t} FMA (no tensor cores: exact {t}), M={m} N={n} K={k}, tiles 128x128x8, 8x8 outputs per thread"),
                };
                return format!(
                    "{how}, 2 shared buffers, B {}{}",
                    if self.b_kn { "n-contiguous" } else { "k-contiguous" },
                    self.epilogue.as_ref().map_or(String::new(), |e| format!(
                        ", the elementwise kernel k{} fused into the store",
                        e.kernel
                    ))
                );
            }
            Kind::Wgmma { bn } => (format!("wgmma.mma_async m64n{bn}k{k_step}"), 64 / k_div, 4),
            Kind::Bsr {
                r,
                c,
                wn,
                walk: BsrWalk::Rows,
                ..
            } => (
                format!("BSR {r}x{c} blocks, {r}x{wn} warp tiles, mma.sync m16n8k16"),
                c,
                3,
            ),
            Kind::Bsr {
                r,
                c,
                walk: BsrWalk::Wgmma { cols },
                ..
            } => (
                format!(
                    "BSR {r}x{c} blocks as wgmma's B (the product transposed), {} block rows over the union of their block columns, wgmma.mma_async m64n{r}k16 per stored block",
                    cols as u64 / r
                ),
                64,
                4,
            ),
            Kind::Bsr {
                r,
                c,
                walk: BsrWalk::Union,
                ..
            } => (
                format!(
                    "BSR {r}x{c} blocks, {} block rows over the union of their block columns, {r}x{} warp tiles, mma.sync m16n8k16",
                    128 / r,
                    16 * (128 / r)
                ),
                c,
                4,
            ),
        };
        let mut fused = self.epilogue.as_ref().map_or(String::new(), |e| {
            format!(
                ", the elementwise kernel k{} fused into the store",
                e.kernel
            )
        });
        if let Some(sp) = &self.split {
            fused = format!(
                ", K in {} parts of {} (f32 partial sums in %{}, added by a second launch){fused}",
                sp.parts, sp.kc, sp.ws.0
            );
        }
        if let Some(st) = &self.staged {
            fused = format!(
                ", B read from %{}, which a transposing copy of %{} (n-contiguous) writes first{fused}",
                st.dst.0, st.src.buf.0
            );
        }
        format!(
            "tensor cores: {instr} {ty}, f32 accumulate, M={} N={} K={}, tiles {}x{}x{bk}, {stages} cp.async stages, {} KiB shared, B {}{fused}",
            self.m,
            self.n,
            self.k,
            self.bm(),
            self.bn(),
            self.smem_bytes() / 1024,
            if self.b_kn { "n-contiguous" } else { "k-contiguous" }
        )
    }
}

/// The tensor-core launches of `p` (kernel → its one call's launch) and the copy kernels they
/// make unnecessary.
#[derive(Debug, Default)]
pub struct Selection {
    pub calls: BTreeMap<usize, TensorCore>,
    pub dead: BTreeSet<usize>,
    /// Buffers the launches need beyond the program's ([`Staging::dst`]), in id order after
    /// them: allocated on the device, never bound by the caller.
    pub scratch: Vec<Buffer>,
}

/// The tensor-core instructions a device has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TensorCores {
    /// None (before sm_80, and the host emulation): every product keeps its generic kernel.
    None,
    /// `mma.sync` and `mma.sp` (sm_80 and later).
    Mma,
    /// Also `wgmma.mma_async` (sm_90a: H100, H200), for dense products.
    Wgmma,
    /// Also `wgmma.mma_async.sp` for 2:4 products. Written from the PTX ISA and CUTLASS's SM90
    /// sparse layouts and checked in the host emulation, not yet on a device: an H100 or H200
    /// uses it only with `TDSL_TC_SP=wgmma` until a device run has confirmed it.
    WgmmaSparse,
}

impl TensorCores {
    /// What a device of compute capability `sm` (86 for 8.6) has, as tdsl compiles for it
    /// (`sm_90a` for sm 90: [`crate::nvrtc::arch`]).
    pub fn of(sm: u32) -> TensorCores {
        match sm {
            90 if std::env::var("TDSL_TC_SP").is_ok_and(|v| v == "wgmma") => {
                TensorCores::WgmmaSparse
            }
            90 => TensorCores::Wgmma,
            s if s >= 80 => TensorCores::Mma,
            _ => TensorCores::None,
        }
    }
}

/// Template variants a benchmark or a test pins; `None` lets the mapping pass decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Variants {
    /// How BSR products walk their blocks ([`BsrWalk`]; `Wgmma`'s `cols` 0 lets the pass choose
    /// the tile, and 256 falls back to 128 for 16-row blocks). `None`: one block row per thread
    /// block or groups of them, by the launch's size ([`bsr`]).
    pub bsr: Option<BsrWalk>,
    /// The rows of a 2:4 `wgmma.sp` tile, 128 or 256. The pass decides by the launch's size.
    pub sp_rows: Option<u64>,
    /// The columns of a dense `wgmma` tile, 64, 128 or 256. The pass decides by the launch's
    /// size ([`wgmma_columns`]).
    pub wg_cols: Option<u64>,
    /// A dense product's n-contiguous B copied k-contiguous for `wgmma` ([`Staging`]). The pass
    /// decides by the rows per element of B ([`STAGE_ROWS`]).
    pub stage_b: Option<bool>,
    /// The parts of K a product with too few tiles is split into ([`SplitK`]; 1: none). The
    /// pass decides by the launch's blocks ([`split_parts`]).
    pub split_k: Option<u64>,
    /// An f64 product on the f64 tensor cores (`mma.sync` m8n8k4) rather than the FMA units.
    /// Written from the PTX ISA's lane map and checked in the host emulation, not yet on a
    /// device: the pass takes the FMA units unless this says otherwise.
    pub dmma: Option<bool>,
}

impl Variants {
    /// From the environment: `TDSL_TC_BSR=rows`, `union`, `wgmma` (`wgmma128`, `wgmma256`:
    /// its tile pinned), `TDSL_TC_SP_BM=128` or
    /// `256`, `TDSL_TC_WG_BN=64`, `128` or `256`, `TDSL_TC_STAGE_B=0` or `1`,
    /// `TDSL_TC_SPLIT_K=1` to `64`, `TDSL_TC_DMMA=0` or `1` (the GPU benchmark's comparisons).
    pub fn from_env() -> Variants {
        Variants {
            bsr: match std::env::var("TDSL_TC_BSR").as_deref() {
                Ok("rows") => Some(BsrWalk::Rows),
                Ok("union") => Some(BsrWalk::Union),
                Ok("wgmma") => Some(BsrWalk::Wgmma { cols: 0 }),
                Ok("wgmma128") => Some(BsrWalk::Wgmma { cols: 128 }),
                Ok("wgmma256") => Some(BsrWalk::Wgmma { cols: 256 }),
                _ => None,
            },
            sp_rows: match std::env::var("TDSL_TC_SP_BM").as_deref() {
                Ok("128") => Some(128),
                Ok("256") => Some(256),
                _ => None,
            },
            wg_cols: match std::env::var("TDSL_TC_WG_BN").as_deref() {
                Ok("64") => Some(64),
                Ok("128") => Some(128),
                Ok("256") => Some(256),
                _ => None,
            },
            stage_b: match std::env::var("TDSL_TC_STAGE_B").as_deref() {
                Ok("1") => Some(true),
                Ok("0") => Some(false),
                _ => None,
            },
            split_k: std::env::var("TDSL_TC_SPLIT_K")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|&p| (1..=64).contains(&p)),
            dmma: match std::env::var("TDSL_TC_DMMA").as_deref() {
                Ok("1") => Some(true),
                Ok("0") => Some(false),
                _ => None,
            },
        }
    }
}

/// Chooses the calls of `p` that run on tensor cores (module docs), with the instructions `tc`
/// and the variants the environment pins ([`Variants::from_env`]).
pub fn select(p: &LoopProgram, tc: TensorCores) -> Selection {
    select_with(p, tc, Variants::from_env())
}

/// [`select`] with the variants `v`.
pub fn select_with(p: &LoopProgram, tc: TensorCores, v: Variants) -> Selection {
    let tcs = tc;
    let mut sel = Selection::default();
    for (ki, k) in p.kernels.iter().enumerate() {
        let [Stmt::Call(call)] = k.body.as_slice() else {
            continue;
        };
        let folded = match call {
            LibCall::Gemm {
                m,
                n,
                k,
                batch,
                a,
                b,
                c,
                accumulate,
            } => {
                // Tensor cores read a 16-bit source through the copy that widens it; the f32
                // template, failing that, reads the widened f32 operands as they are.
                let with = |widened: bool| {
                    let mut f = Fold::new(p, ki, &sel.dead);
                    let a = f.input(a, &[*m, *k], batch, widened);
                    let b = f.input(b, &[*k, *n], batch, widened);
                    let (c, epilogue) = f.result(c, &[*m, *n], batch, *accumulate);
                    dense(p, *m, *n, *k, batch, &a, &b, &c, *accumulate, tc, v)
                        .map(|t| (TensorCore { epilogue, ..t }, f.dead))
                };
                with(true).or_else(|| with(false))
            }
            LibCall::SpMM {
                m,
                n,
                k,
                s,
                transposed,
                side,
                d,
                c,
                accumulate,
            } => {
                let d_dims = match side {
                    Side::Left => [*k, *n],
                    Side::Right => [*m, *k],
                };
                let mut f = Fold::new(p, ki, &sel.dead);
                let d = f.input(d, &d_dims, &[], true);
                let (c, epilogue) = f.result(c, &[*m, *n], &[], *accumulate);
                let t = match s.layout {
                    SparseLayout::TwoFour { .. } => two_four(
                        p,
                        *m,
                        *n,
                        *k,
                        s,
                        *transposed,
                        *side,
                        &d,
                        &c,
                        *accumulate,
                        tc,
                        v,
                    ),
                    SparseLayout::Bsr { .. } => bsr(
                        p,
                        *m,
                        *n,
                        *k,
                        s,
                        *transposed,
                        *side,
                        &d,
                        &c,
                        *accumulate,
                        tc,
                        v,
                    ),
                    _ => None,
                };
                t.map(|t| (TensorCore { epilogue, ..t }, f.dead))
            }
            _ => None,
        };
        if let Some((mut tc, dead)) = folded {
            let id = BufId((p.buffers.len() + sel.scratch.len()) as u32);
            let name = p.buffer(tc.b.buf).name.clone();
            if let Some(buf) = stage_b(&mut tc, id, &name, tcs, v) {
                sel.scratch.push(buf);
            } else if tc.input == ElemType::F32 && tc.b_kn {
                // TF32 without its copy of B (too large to stage): exact f32 on SIMT instead.
                tc.kind = Kind::Simt { dmma: false };
            }
            let id = BufId((p.buffers.len() + sel.scratch.len()) as u32);
            if let Some(buf) = split_k(&mut tc, id, v) {
                sel.scratch.push(buf);
            }
            let id = BufId((p.buffers.len() + sel.scratch.len()) as u32);
            if let Some(buf) = group_table(p, &mut tc, id) {
                sel.scratch.push(buf);
            }
            sel.calls.insert(ki, tc);
            sel.dead.extend(dead);
        }
    }
    sel
}

fn is16(t: ElemType) -> bool {
    matches!(t, ElemType::F16 | ElemType::BF16)
}

/// Multiples of 8 elements: 16-byte chunks of a 16-bit operand.
fn aligned(xs: &[i64]) -> bool {
    aligned_to(xs, 8)
}

/// Multiples of `chunk` elements (16 bytes: 8 of a 16-bit operand, 4 of an f32 one).
fn aligned_to(xs: &[i64], chunk: i64) -> bool {
    xs.iter().all(|x| x % chunk == 0)
}

#[allow(clippy::too_many_arguments)]
fn dense(
    p: &LoopProgram,
    m: u64,
    n: u64,
    k: u64,
    batch: &[u64],
    a: &MatView,
    b: &MatView,
    c: &MatView,
    accumulate: bool,
    tc: TensorCores,
    v: Variants,
) -> Option<TensorCore> {
    let (ta, tb) = (p.buffer(a.buf).ty, p.buffer(b.buf).ty);
    // Two 16-bit operands of one type, or two f32 ones where the program allows TF32: tensor
    // cores (16-byte chunks). Otherwise f32, f16 and bf16 in any mix, or f64 times f64 into
    // f64: the SIMT template, widening as it loads (any strides).
    let wide = |t: ElemType| t == ElemType::F32 || is16(t);
    let tf32 = p.tf32 && ta == ElemType::F32 && tb == ElemType::F32;
    let simt = !(tf32 || (is16(ta) && tb == ta));
    let chunk = if tf32 { 4 } else { 8 };
    let tc_ty = p.buffer(c.buf).ty;
    let double = ta == ElemType::F64 && tb == ElemType::F64 && tc_ty == ElemType::F64;
    if !double && ((simt && !(wide(ta) && wide(tb))) || !out_ok(tc_ty)) {
        return None;
    }
    if (!simt && !k.is_multiple_of(chunk as u64)) || m.max(n).max(k) >= 1 << 30 {
        return None;
    }
    let bat = |i: usize| -> (i64, i64, i64) {
        (a.batch_strides[i], b.batch_strides[i], c.batch_strides[i])
    };
    let batch_ok = (0..batch.len()).all(|i| {
        let (x, y, _) = bat(i);
        aligned_to(&[x, y], chunk)
    });
    if !batch_ok && !simt {
        return None;
    }
    let batches = |swap: bool| -> Vec<(u64, i64, i64, i64)> {
        (0..batch.len())
            .map(|i| {
                let (x, y, z) = bat(i);
                if swap {
                    (batch[i], y, x, z)
                } else {
                    (batch[i], x, y, z)
                }
            })
            .collect()
    };
    // C = A·B with A k-contiguous, or Cᵀ = Bᵀ·Aᵀ with Bᵀ k-contiguous.
    let (am, an, mm, nn, cm, cn, swap) = if a.col_stride == 1 {
        (a, b, m, n, c.row_stride, c.col_stride, false)
    } else if b.row_stride == 1 {
        (b, a, n, m, c.col_stride, c.row_stride, true)
    } else {
        return None;
    };
    // A: (i, k) at row stride; the other operand as B(k, j).
    let (a_ld, b_rows, b_cols) = if swap {
        (am.col_stride, an.col_stride, an.row_stride)
    } else {
        (am.row_stride, an.row_stride, an.col_stride)
    };
    // B(k, j) at k·b_rows + j·b_cols.
    let (b_kn, b_ld) = b_layout(b_rows, b_cols)?;
    // An n-contiguous f32 B is copied k-contiguous for TF32 ([`stage_b`]): only A's chunks
    // matter then.
    let b_ok = (tf32 && b_kn)
        || (aligned_to(&[b_ld, an.offset], chunk) && (!b_kn || nn.is_multiple_of(8)));
    if !simt && (!aligned_to(&[a_ld, am.offset], chunk) || !b_ok) {
        return None;
    }
    let row_tiles = batch.iter().product::<u64>().max(1) * mm.div_ceil(128);
    Some(TensorCore {
        kind: if simt {
            // f64 on the f64 tensor cores only when asked (`TDSL_TC_DMMA=1`) until a device
            // has confirmed the lane map (`bench/gpu/probe_mma.cu`).
            Kind::Simt {
                dmma: double && v.dmma.unwrap_or(false),
            }
        } else {
            dense_kind(tc, b_kn, row_tiles, nn, v)
        },
        input: ta,
        m: mm,
        n: nn,
        k,
        a: Operand {
            buf: am.buf,
            offset: am.offset,
            ld: a_ld,
        },
        b: Operand {
            buf: an.buf,
            offset: an.offset,
            ld: b_ld,
        },
        b_kn,
        c: c.buf,
        c_offset: c.offset,
        ldm: cm,
        ldn: cn,
        accumulate,
        batch: batches(swap),
        swapped: swap,
        epilogue: None,
        staged: None,
        split: None,
    })
}

/// The dense template: on sm_90a with B k-contiguous, `wgmma` with 128-row tiles as wide as
/// [`wgmma_columns`] picks for `row_tiles` (batch × 128-row tiles) and N. Else `mma.sync`, with
/// its K step and stage count: 64 × 3 (96 KiB, 2 blocks per SM; on an H200 it matched 32 × 3 at
/// 8192³ and beat it by 24% with 256 rows: bench/RESULTS.md), or `TDSL_TC_GEMM=BKxSTAGES` (BK
/// 32 or 64, 2 to 5 stages within 200 KiB of shared memory), the knob the GPU benchmark compares
/// them with (it also turns `wgmma` off).
fn dense_kind(tc: TensorCores, b_kn: bool, row_tiles: u64, n: u64, v: Variants) -> Kind {
    let knob = std::env::var("TDSL_TC_GEMM").ok();
    if tc >= TensorCores::Wgmma && !b_kn && knob.is_none() {
        let bn = v.wg_cols.unwrap_or_else(|| wgmma_columns(row_tiles, n));
        return Kind::Wgmma { bn };
    }
    let parsed = knob.and_then(|v| {
        let (bk, st) = v.split_once('x')?;
        let (bk, stages) = (bk.parse::<u64>().ok()?, st.parse::<u64>().ok()?);
        let fits = stages * (128 + 128) * bk * 2 <= 200 * 1024;
        ([32, 64].contains(&bk) && (2..=5).contains(&stages) && fits).then_some((bk, stages))
    });
    let (bk, stages) = parsed.unwrap_or((64, 3));
    Kind::Dense { bk, stages }
}

/// SMs of an H100 or H200, which the tile choices below fill.
const SMS: u64 = 132;

/// The widest `wgmma` tile that still gives every SM of an H100 or H200 work: 256 columns (one
/// block per SM, 197 KiB of shared memory) when there are two such tiles per SM; else 128 (one
/// per SM, 133 KiB) when they cover the SMs; else 64 (two per SM, 99 KiB), which doubles the
/// blocks of a short product (and N ≤ 64 wastes no columns). On an H200, 256 rows × 8192 × 8192 in 128-wide tiles (64 blocks)
/// ran at 0.64× cuBLAS with half the SMs idle (bench/RESULTS.md); 64-wide tiles give it 256
/// blocks, at 1.5× the shared-memory bytes per product.
pub fn wgmma_columns(row_tiles: u64, n: u64) -> u64 {
    if n > 128 && row_tiles * n.div_ceil(256) >= 2 * SMS {
        256
    } else if n > 64 && row_tiles * n.div_ceil(128) >= SMS {
        128
    } else {
        64
    }
}

/// Rows of A per element of B (per batch element B varies along) from which a dense product
/// whose B is n-contiguous copies B k-contiguous to run on `wgmma` rather than `mma.sync`. On
/// an H200 at 8192³, `mma.sync` ran at 303 TFLOP/s and `wgmma` at 541 (bench/RESULTS.md): the
/// product saves 2·M·(1/303 − 1/541) ps per element of B, and the transposing copy (a
/// shared-memory tile, 2.9 TB/s on 8192² f32) costs 4 bytes moved per element, 1.4 ps; they
/// break even near M = 490.
pub const STAGE_ROWS: u64 = 512;

/// Rewrites the dense product `t`, whose B is n-contiguous, to read a k-contiguous copy of B
/// in the scratch buffer `dst` on `wgmma` ([`Staging`]) where the device has `wgmma` and the
/// product does enough work per element of B ([`STAGE_ROWS`]; `v.stage_b` pins the choice).
/// A TF32 product is always rewritten (its templates read B k-contiguous only), on `mma.sync`
/// where the device has no `wgmma`. Returns the scratch buffer (named after B's buffer `name`).
fn stage_b(
    t: &mut TensorCore,
    dst: BufId,
    name: &str,
    tc: TensorCores,
    v: Variants,
) -> Option<Buffer> {
    let pinned = std::env::var("TDSL_TC_GEMM").is_ok();
    let must = t.input == ElemType::F32;
    if !matches!(t.kind, Kind::Dense { .. }) || !t.b_kn {
        return None;
    }
    // Batch axes B is shared along multiply its rows; those it varies along need a copy each.
    let shared: u64 = t.batch.iter().filter(|b| b.2 == 0).map(|b| b.0).product();
    let wgmma = tc >= TensorCores::Wgmma && !pinned;
    let worth = t.m.saturating_mul(shared) >= STAGE_ROWS;
    if !(must || (wgmma && v.stage_b.unwrap_or(worth))) {
        return None;
    }
    let mut strides = vec![0i64; t.batch.len()];
    let mut elems = t.n.checked_mul(t.k)?;
    for (i, b) in t.batch.iter().enumerate().rev() {
        if b.2 != 0 {
            strides[i] = i64::try_from(elems).ok()?;
            elems = elems.checked_mul(b.0)?;
        }
    }
    if elems >= 1 << 40 {
        return None;
    }
    let batch = t
        .batch
        .iter()
        .zip(&strides)
        .filter(|(b, _)| b.2 != 0)
        .map(|(b, &d)| (b.0, b.2, d))
        .collect();
    t.staged = Some(Staging {
        src: t.b.clone(),
        dst,
        k: t.k,
        n: t.n,
        batch,
    });
    t.b = Operand {
        buf: dst,
        offset: 0,
        ld: t.k as i64,
    };
    for (b, d) in t.batch.iter_mut().zip(strides) {
        b.2 = d;
    }
    t.b_kn = false;
    let row_tiles = t.batch.iter().map(|b| b.0).product::<u64>().max(1) * t.m.div_ceil(128);
    if wgmma {
        t.kind = Kind::Wgmma {
            bn: v.wg_cols.unwrap_or_else(|| wgmma_columns(row_tiles, t.n)),
        };
    }
    Some(Buffer {
        name: format!("{name}_t"),
        ty: t.input,
        elems,
        role: Role::Temp,
    })
}

/// The least K a part of a split product keeps ([`SplitK`]): shallower parts spend more on their
/// pipeline's fill and on the partial sums than the SMs they add give back.
pub const SPLIT_MIN_K: u64 = 512;

/// The parts of K for a launch of `blocks` thread blocks over K = `k`: enough for two blocks on
/// every SM of an H100 or H200 when the launch alone would leave SMs idle, each part at least
/// [`SPLIT_MIN_K`] deep; 1 (no split) otherwise.
pub fn split_parts(blocks: u64, k: u64) -> u64 {
    if blocks >= SMS {
        return 1;
    }
    (2 * SMS)
        .div_ceil(blocks.max(1))
        .min(k / SPLIT_MIN_K)
        .max(1)
}

/// Splits the K of `t` ([`SplitK`]) into [`split_parts`] parts (`v.split_k` pins the count),
/// each a multiple of the template's K step, with its partial sums in the scratch buffer `ws`,
/// which it returns (at most 2^28 partial sums, 1 GiB, when a pinned count asks for more). Dense,
/// TF32 and 2:4 templates; BSR walks stored blocks, not a K range.
fn split_k(t: &mut TensorCore, ws: BufId, v: Variants) -> Option<Buffer> {
    let step = t.k_step()?;
    let parts = v.split_k.unwrap_or_else(|| split_parts(t.blocks(), t.k));
    if parts < 2 {
        return None;
    }
    let kc = t.k.div_ceil(parts).next_multiple_of(step);
    let parts = t.k.div_ceil(kc);
    let elems = parts.checked_mul(t.outputs())?;
    if parts < 2 || elems >= 1 << 28 {
        return None;
    }
    t.split = Some(SplitK { parts, kc, ws });
    Some(Buffer {
        name: format!("k{}_parts", ws.0),
        ty: ElemType::F32,
        elems,
        role: Role::Temp,
    })
}

/// The BSR template's warp width: 32 columns (8 warps per block). 64-column warps (twice the
/// mma per ldmatrix and per barrier, 4 warps) measured the same on an H200 with 8192 rows and
/// 20% slower with 256 (fewer warps in flight; bench/RESULTS.md): the kernel is bound by L2
/// reads of B, whose every element serves only the block's R rows. `TDSL_TC_BSR_WN=64` (blocks
/// of up to 32 rows) is the benchmark's comparison.
fn bsr_warp_columns(r: u64) -> u64 {
    let wide = std::env::var("TDSL_TC_BSR_WN").is_ok_and(|v| v == "64");
    if r <= 32 && wide {
        64
    } else {
        32
    }
}

fn out_ok(t: ElemType) -> bool {
    matches!(t, ElemType::F32 | ElemType::F16 | ElemType::BF16)
}

#[allow(clippy::too_many_arguments)]
fn two_four(
    p: &LoopProgram,
    m: u64,
    n: u64,
    k: u64,
    s: &tdsl_loop::SparseOperand,
    transposed: bool,
    side: Side,
    d: &MatView,
    c: &MatView,
    accumulate: bool,
    tc: TensorCores,
    v: Variants,
) -> Option<TensorCore> {
    let SparseLayout::TwoFour { axis } = s.layout else {
        return None;
    };
    let tv = p.buffer(s.values).ty;
    if s.shape.len() != 2 || !is16(tv) || p.buffer(d.buf).ty != tv || !out_ok(p.buffer(c.buf).ty) {
        return None;
    }
    // The 2:4 axis must be the product's K: then the values are A = [M'][K/2], row-major.
    let k_axis = match (side, transposed) {
        (Side::Left, false) | (Side::Right, true) => 1,
        (Side::Left, true) | (Side::Right, false) => 0,
    };
    if axis != k_axis || !k.is_multiple_of(64) || m.max(n).max(k) >= 1 << 30 {
        return None;
    }
    // Times a vector (a decode step), a tile of 128 columns would do 128 times the work to read
    // the weight once, at the tensor-core kernel's small-batch rate (12% of the bandwidth on an
    // H200). The generic loops read it once too, a block (or warp) splitting each row's kept
    // values, as a dense matrix-vector product runs (map.rs).
    let dense_extent = match side {
        Side::Left => n,
        Side::Right => m,
    };
    if dense_extent == 1 {
        return None;
    }
    let kind = Kind::TwoFour {
        meta: Operand {
            buf: s.idx,
            offset: 0,
            ld: (k / 32) as i64,
        },
        wgmma: 0,
    };
    let values = Operand {
        buf: s.values,
        offset: 0,
        ld: (k / 2) as i64,
    };
    let mut t = sparse_left(kind, tv, values, (m, n, k), side, d, c, accumulate)?;
    // wgmma.sp: tiles of 256 rows (half the B bytes per product) while they still fill every
    // SM of an H100 or H200 (132, one thread block each), else 128.
    let rows = v
        .sp_rows
        .unwrap_or(if t.m.div_ceil(256) * t.n.div_ceil(128) >= SMS {
            256
        } else {
            128
        });
    if let Kind::TwoFour { wgmma, .. } = &mut t.kind {
        if tc >= TensorCores::WgmmaSparse && !t.b_kn {
            *wgmma = rows / 128;
        }
    }
    Some(t)
}

/// The launch of a product whose sparse operand, stored as `values` (+ `kind`'s arrays), is A:
/// `C = S·D` on the left, or, on the right, `Cᵀ = S'·Dᵀ` with `S'` the stored operand read as
/// the left one (the caller checked the stored layout fits), so B(k, j) = D(j, k).
#[allow(clippy::too_many_arguments)]
fn sparse_left(
    kind: Kind,
    input: ElemType,
    values: Operand,
    (m, n, k): (u64, u64, u64),
    side: Side,
    d: &MatView,
    c: &MatView,
    accumulate: bool,
) -> Option<TensorCore> {
    let (mm, nn, b_rows, b_cols, cm, cn) = match side {
        Side::Left => (m, n, d.row_stride, d.col_stride, c.row_stride, c.col_stride),
        Side::Right => (n, m, d.col_stride, d.row_stride, c.col_stride, c.row_stride),
    };
    let (b_kn, b_ld) = b_layout(b_rows, b_cols)?;
    if !aligned(&[b_ld, d.offset]) || (b_kn && !nn.is_multiple_of(8)) {
        return None;
    }
    Some(TensorCore {
        kind,
        input,
        m: mm,
        n: nn,
        k,
        a: values,
        b: Operand {
            buf: d.buf,
            offset: d.offset,
            ld: b_ld,
        },
        b_kn,
        c: c.buf,
        c_offset: c.offset,
        ldm: cm,
        ldn: cn,
        accumulate,
        batch: Vec::new(),
        swapped: side == Side::Right,
        epilogue: None,
        staged: None,
        split: None,
    })
}

/// B(k, n) at `k·b_rows + n·b_cols`: k-contiguous (`b_kn` false, leading dimension `b_cols`)
/// or n-contiguous (`b_kn`, `b_rows`); `None` when neither stride is 1.
fn b_layout(b_rows: i64, b_cols: i64) -> Option<(bool, i64)> {
    if b_rows == 1 {
        Some((false, b_cols))
    } else if b_cols == 1 {
        Some((true, b_rows))
    } else {
        None
    }
}

/// A BSR product whose block rows are the output's rows (`S·D`, or `D·Sᵀ` computed as
/// `Cᵀ = S·Dᵀ`: torch's `[out, in]` weight), with 16-bit values, blocks of 16, 32 or 64.
#[allow(clippy::too_many_arguments)]
fn bsr(
    p: &LoopProgram,
    m: u64,
    n: u64,
    k: u64,
    s: &tdsl_loop::SparseOperand,
    transposed: bool,
    side: Side,
    d: &MatView,
    c: &MatView,
    accumulate: bool,
    tc: TensorCores,
    v: Variants,
) -> Option<TensorCore> {
    let SparseLayout::Bsr { br, bc } = s.layout else {
        return None;
    };
    let (r, cb) = (br as u64, bc as u64);
    let tv = p.buffer(s.values).ty;
    let ptr = s.ptr?;
    if s.shape.len() != 2 || !is16(tv) || p.buffer(d.buf).ty != tv || !out_ok(p.buffer(c.buf).ty) {
        return None;
    }
    if ![16, 32, 64].contains(&r) || ![16, 32, 64].contains(&cb) || m.max(n).max(k) >= 1 << 30 {
        return None;
    }
    // Block rows must be the output's rows: S on the left as stored (S·D), or on the right
    // transposed (D·Sᵀ, S stored n × k, computed as Cᵀ = S·Dᵀ).
    let mm = match (side, transposed) {
        (Side::Left, false) => m,
        (Side::Right, true) => n,
        _ => return None,
    };
    if s.shape != [mm, k] || !mm.is_multiple_of(r) || !k.is_multiple_of(cb) {
        return None;
    }
    let kind = Kind::Bsr {
        ptr,
        idx: s.idx,
        r,
        c: cb,
        wn: bsr_warp_columns(r),
        walk: BsrWalk::Rows,
        table: None,
    };
    let values = Operand {
        buf: s.values,
        offset: 0,
        ld: cb as i64,
    };
    let mut t = sparse_left(kind, tv, values, (m, n, k), side, d, c, accumulate)?;
    // Groups of block rows share each strip of B they read (the one-row kernel is bound by
    // those reads on an H200: bench/RESULTS.md), but make 128 / r times fewer thread blocks:
    // taken when there are still two per SM of an H100 or H200 (132).
    let groups = t.m.div_ceil(128) * t.n.div_ceil(128);
    let rule = if groups >= 2 * SMS {
        BsrWalk::Union
    } else {
        BsrWalk::Rows
    };
    let walk = match v.bsr {
        Some(BsrWalk::Wgmma { cols }) => wgmma_bsr(&t, r, tc, cols).unwrap_or(rule),
        Some(w) => w,
        None => rule,
    };
    if let Kind::Bsr { walk: w, .. } = &mut t.kind {
        *w = walk;
    }
    Some(t)
}

/// The group table (scratch buffer `id`, [`crate::map::Groups`]) of a BSR product `t` that
/// walks groups of block rows; such a walk whose block columns do not fit the table's 16 bits
/// walks one block row per thread block instead.
fn group_table(p: &LoopProgram, t: &mut TensorCore, id: BufId) -> Option<Buffer> {
    let Kind::Bsr { idx, walk, .. } = t.kind else {
        return None;
    };
    if walk == BsrWalk::Rows {
        return None;
    }
    let set = |t: &mut TensorCore, w: BsrWalk, tab: Option<BufId>| {
        if let Kind::Bsr { walk, table, .. } = &mut t.kind {
            (*walk, *table) = (w, tab);
        }
    };
    set(t, walk, Some(id));
    let Some(groups) = t.groups().filter(|g| g.block_cols < 1 << 16) else {
        set(t, BsrWalk::Rows, None);
        return None;
    };
    Some(Buffer {
        name: format!("{}.groups", p.buffer(idx).name),
        ty: ElemType::I32,
        elems: groups.elems(p.buffer(idx).elems),
        role: Role::Temp,
    })
}

/// The most dynamic shared memory a thread block of an H100 or H200 may use (227 KiB).
const SMEM_MAX: u64 = 227 * 1024;

/// BSR on `wgmma` ([`BsrWalk::Wgmma`]) for the product `t` of `r`-row blocks, where the device
/// has it (sm_90a), the dense operand is k-contiguous (it is `wgmma`'s A, read through the
/// same descriptors as a dense product's) and its stages fit in shared memory: tiles of
/// 256 BSR rows (at most 8 block rows, so `r` ≥ 32) where they still give every SM a thread
/// block, else 128. `pinned` (128 or 256, where `r` allows) overrides that choice.
fn wgmma_bsr(t: &TensorCore, r: u64, tc: TensorCores, pinned: u16) -> Option<BsrWalk> {
    if tc < TensorCores::Wgmma || t.b_kn {
        return None;
    }
    let cols = match pinned {
        128 => 128,
        256 if r >= 32 => 256,
        _ if r >= 32 && t.m.div_ceil(256) * t.n.div_ceil(128) >= SMS => 256,
        _ => 128,
    };
    let walk = BsrWalk::Wgmma { cols };
    let mut probe = t.clone();
    if let Kind::Bsr { walk: w, .. } = &mut probe.kind {
        *w = walk;
    }
    (probe.smem_bytes() <= SMEM_MAX).then_some(walk)
}

/// A kernel that is one perfect nest of range loops around `dst[ix] = src[is]`: the loop
/// variables with their extents, the two indices and the buffers.
struct Copy {
    vars: BTreeMap<VarId, u64>,
    dst: BufId,
    dst_index: Index,
    src: BufId,
    src_index: Index,
}

fn copy_nest(body: &[Stmt]) -> Option<Copy> {
    let Some(nest) = store_nest(body) else {
        return unrolled_copy(body);
    };
    let Expr::Load {
        buf: src,
        index: src_index,
    } = nest.value
    else {
        return None;
    };
    Some(Copy {
        vars: nest.vars,
        dst: nest.dst,
        dst_index: nest.dst_index,
        src: *src,
        src_index: src_index.clone(),
    })
}

/// A copy whose shortest axis the CPU planner unrolled (a relayout of `x [2, 64]` into
/// `[64, 2]` is one loop of two stores, `t[2v] = x[v]; t[2v + 1] = x[v + 64]`): a perfect nest
/// of range loops around `k ≥ 2` stores `dst[D + j·dd] = src[S + j·ds]`, j < k, read as one more
/// variable of extent `k` (an id no loop of the nest has).
fn unrolled_copy(body: &[Stmt]) -> Option<Copy> {
    let mut vars = BTreeMap::new();
    let mut stmts = body;
    while let [Stmt::Loop(l)] = stmts {
        let Iter::Range { extent } = l.iter else {
            return None;
        };
        vars.insert(l.var, extent);
        stmts = &l.body;
    }
    let stores: Vec<(BufId, &Index, BufId, &Index)> = stmts
        .iter()
        .map(|s| match s {
            Stmt::Store {
                buf,
                index,
                value:
                    Expr::Load {
                        buf: src,
                        index: si,
                    },
            } => Some((*buf, index, *src, si)),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let [(dst, d0, src, s0), (_, d1, _, s1), ..] = stores.as_slice() else {
        return None;
    };
    let (dd, ds) = (d1.offset - d0.offset, s1.offset - s0.offset);
    let regular = stores.iter().enumerate().all(|(j, (b, di, sb, si))| {
        let j = j as i64;
        b == dst
            && sb == src
            && di.terms == d0.terms
            && si.terms == s0.terms
            && di.offset == d0.offset + j * dd
            && si.offset == s0.offset + j * ds
    });
    if !regular || dd == 0 {
        return None;
    }
    let v = VarId(vars.keys().map(|v| v.0).max().unwrap_or(0) + 1);
    vars.insert(v, stores.len() as u64);
    let with = |ix: &Index, stride: i64| Index {
        offset: ix.offset,
        terms: ix.terms.iter().copied().chain([(v, stride)]).collect(),
    };
    Some(Copy {
        vars,
        dst: *dst,
        dst_index: with(d0, dd),
        src: *src,
        src_index: with(s0, ds),
    })
}

/// A kernel that is one perfect nest of range loops around one store `dst[dst_index] = value`.
struct StoreNest<'a> {
    vars: BTreeMap<VarId, u64>,
    dst: BufId,
    dst_index: Index,
    value: &'a Expr,
}

fn store_nest(body: &[Stmt]) -> Option<StoreNest<'_>> {
    let mut vars = BTreeMap::new();
    let mut stmts = body;
    loop {
        match stmts {
            [Stmt::Loop(l)] => {
                let Iter::Range { extent } = l.iter else {
                    return None;
                };
                vars.insert(l.var, extent);
                stmts = &l.body;
            }
            [Stmt::Store { buf, index, value }] => {
                return Some(StoreNest {
                    vars,
                    dst: *buf,
                    dst_index: index.clone(),
                    value,
                });
            }
            _ => return None,
        }
    }
}

/// Undoes cache tiling (the CPU's tile-transpose pass splits a loop `v` into `vo·t + vi`): a
/// variable whose stride is `t` times another's in both indices, `t` that other's extent, is
/// merged into it, so the copy is one variable per axis again. (A plain row-major copy merges
/// too, into one flat variable: [`rebase_copy`] tries the copy as written first.)
fn merge_tiles(copy: &mut Copy) {
    loop {
        let vars: Vec<(VarId, u64)> = copy.vars.iter().map(|(v, e)| (*v, *e)).collect();
        let pair =
            vars.iter().find_map(|&(outer, e_o)| {
                vars.iter().find_map(|&(inner, e_i)| {
                    let scaled = |ix: &Index| {
                        let (so, si) = (ix.stride_of(outer), ix.stride_of(inner));
                        si != 0 && so == si * e_i as i64
                    };
                    (outer != inner && scaled(&copy.dst_index) && scaled(&copy.src_index))
                        .then_some((outer, inner, e_o * e_i))
                })
            });
        let Some((outer, inner, e)) = pair else {
            return;
        };
        copy.vars.remove(&outer);
        copy.vars.insert(inner, e);
        for ix in [&mut copy.dst_index, &mut copy.src_index] {
            ix.terms.retain(|t| t.0 != outer);
        }
    }
}

/// The kernels other than `except` that read (`reads`) or write `buf`.
fn users(p: &LoopProgram, buf: BufId, except: usize, reads: bool) -> Vec<usize> {
    p.kernels
        .iter()
        .enumerate()
        .filter(|(i, k)| {
            *i != except && {
                let (r, w) = tdsl_loop::walk::stmt_reads_writes(&k.body);
                if reads {
                    r.contains(&buf)
                } else {
                    w.contains(&buf)
                }
            }
        })
        .map(|(i, _)| i)
        .collect()
}

/// Re-expresses `strides` (over dimensions of lengths `dims`) given against `from` as strides
/// against `to`, where both are indices over the copy's variables: each nonzero stride must be
/// exactly one variable's stride in `from` (a distinct one, with enough extent), and `from` must
/// be injective with offset 0.
fn compose(
    strides: &[i64],
    dims: &[u64],
    from: &Index,
    to: &Index,
    vars: &BTreeMap<VarId, u64>,
) -> Option<Vec<i64>> {
    if from.offset != 0 || !crate::map::injective(from, &[], vars) {
        return None;
    }
    let mut used = BTreeSet::new();
    let mut out = Vec::new();
    for (&s, &len) in strides.iter().zip(dims) {
        if s == 0 || len == 1 {
            out.push(0);
            continue;
        }
        let (v, _) = from.terms.iter().find(|t| t.1 == s)?;
        if !used.insert(*v) || vars.get(v).copied()? < len {
            return None;
        }
        let t = to.terms.iter().find(|t| t.0 == *v).map_or(0, |t| t.1);
        out.push(t);
    }
    Some(out)
}

/// What folding the kernels around one call shares: the program, the call's kernel `ki`, the
/// kernels earlier calls folded (`taken`), and the ones this call folds (`dead`: not launched).
struct Fold<'a> {
    p: &'a LoopProgram,
    ki: usize,
    taken: &'a BTreeSet<usize>,
    dead: BTreeSet<usize>,
}

impl<'a> Fold<'a> {
    fn new(p: &'a LoopProgram, ki: usize, taken: &'a BTreeSet<usize>) -> Fold<'a> {
        Fold {
            p,
            ki,
            taken,
            dead: BTreeSet::new(),
        }
    }

    /// The one copy kernel (one perfect nest of copies) that touches the temp `t` besides the
    /// call: its only writer, before the call (`after` false), or its only reader after it,
    /// not yet folded into another call.
    fn lone_copy(&self, t: BufId, after: bool) -> Option<(usize, Copy)> {
        let (p, ki) = (self.p, self.ki);
        let (writers, readers) = (users(p, t, ki, false), users(p, t, ki, true));
        let j = match (writers.as_slice(), readers.as_slice(), after) {
            ([j], [], false) if *j < ki => *j,
            ([], [j], true) if *j > ki => *j,
            _ => return None,
        };
        if self.taken.contains(&j) {
            return None;
        }
        Some((j, copy_nest(&p.kernels[j].body)?))
    }

    /// `view` (dims `dims` then `batch`) read by the call, or the view of the source it was
    /// copied from (the copy then not launched): a copy of the same type, or with `widened`
    /// one that widens a 16-bit source.
    fn input(&mut self, view: &MatView, dims: &[u64], batch: &[u64], widened: bool) -> MatView {
        // Only exact conversions: the same type, or a 16-bit source widened.
        let exact =
            |temp: ElemType, src: ElemType| src == temp || (widened && is16(src) && !is16(temp));
        self.through_copy(view, dims, batch, false, exact)
            .unwrap_or_else(|| view.clone())
    }

    /// `view` written by the call, or, when a later copy kernel moves it into another buffer
    /// and nothing else reads it, the view of that buffer (the copy then not launched).
    fn output(
        &mut self,
        view: &MatView,
        dims: &[u64],
        batch: &[u64],
        accumulate: bool,
    ) -> Option<MatView> {
        // The result is rounded once: the temp holds the f32 accumulator or the destination's
        // type, which the call can store.
        let once =
            |temp: ElemType, dst: ElemType| (temp == ElemType::F32 || temp == dst) && out_ok(dst);
        match accumulate {
            true => None,
            false => self.through_copy(view, dims, batch, true, once),
        }
    }

    /// The view at the other end of the lone copy kernel that fills the temp `view` before the
    /// call (`after` false: its source) or moves it after the call (`after` true: its
    /// destination), marking the copy not launched. The copy must cover the temp (one store per
    /// element) between element types `types` accepts (the temp's, the other end's), and the
    /// other end must stay as it is between the copy and the call: not written, and for a
    /// destination not read either.
    fn through_copy(
        &mut self,
        view: &MatView,
        dims: &[u64],
        batch: &[u64],
        after: bool,
        types: impl Fn(ElemType, ElemType) -> bool,
    ) -> Option<MatView> {
        let (p, t, ki) = (self.p, view.buf, self.ki);
        let b = p.buffer(t);
        if b.role != Role::Temp || view.offset != 0 {
            return None;
        }
        let (j, copy) = self.lone_copy(t, after)?;
        let (near, far) = match after {
            false => (copy.dst, copy.src),
            true => (copy.src, copy.dst),
        };
        if near != t
            || copy.vars.values().product::<u64>() != b.elems
            || !types(b.ty, p.buffer(far).ty)
        {
            return None;
        }
        let writers = users(p, far, usize::MAX, false);
        let readers = match after {
            false => Vec::new(),
            true => users(p, far, usize::MAX, true),
        };
        let between = match after {
            false => j + 1..ki,
            true => ki + 1..j,
        };
        if between
            .into_iter()
            .any(|x| writers.contains(&x) || readers.contains(&x))
        {
            return None;
        }
        let new = rebase_copy(view, dims, batch, &copy, after)?;
        self.dead.insert(j);
        Some(MatView { buf: far, ..new })
    }

    /// The view the call writes and the epilogue fused into its store: the result moved by a
    /// later copy ([`Self::output`]), else the destination of a later elementwise kernel
    /// ([`fold_epilogue`]), else `view` itself.
    fn result(
        &mut self,
        view: &MatView,
        dims: &[u64],
        batch: &[u64],
        accumulate: bool,
    ) -> (MatView, Option<Box<Epilogue>>) {
        let c = self
            .output(view, dims, batch, accumulate)
            .unwrap_or_else(|| view.clone());
        // The copy's destination, written by the copy kernel (now not launched), may feed an
        // elementwise kernel in turn.
        let writer = if c.buf == view.buf {
            self.ki
        } else {
            users(self.p, c.buf, usize::MAX, false)
                .into_iter()
                .find(|j| self.dead.contains(j))
                .unwrap_or(self.ki)
        };
        match fold_epilogue(self, writer, &c, dims, batch, accumulate) {
            Some((c, e)) => {
                self.dead.insert(e.kernel);
                (c, Some(Box::new(e)))
            }
            None => (c, None),
        }
    }
}

/// When the product's result (`view`, a temp of f32, f16 or bf16) is read only by one later
/// kernel that is an elementwise nest over it (one store per element, every read of the result
/// at that element, no reduction, computed in f32), the view of that kernel's destination and
/// the epilogue that computes it from the accumulator. The other buffers it reads must not be
/// written between the product and it, and nothing between may touch its destination.
fn fold_epilogue(
    f: &Fold,
    writer: usize,
    view: &MatView,
    dims: &[u64],
    batch: &[u64],
    accumulate: bool,
) -> Option<(MatView, Epilogue)> {
    let (p, ki, t) = (f.p, f.ki, view.buf);
    let b = p.buffer(t);
    if accumulate || b.role != Role::Temp || view.offset != 0 || !out_ok(b.ty) {
        return None;
    }
    let (writers, readers) = (users(p, t, writer, false), users(p, t, writer, true));
    let ([], &[j]) = (writers.as_slice(), readers.as_slice()) else {
        return None;
    };
    if j <= writer || f.taken.contains(&j) {
        return None;
    }
    let nest = store_nest(&p.kernels[j].body)?;
    if nest.dst == t || nest.vars.values().product::<u64>() != b.elems {
        return None;
    }
    // Every read of the result at one index; no accumulator, no f64, no read of the destination.
    let (mut temp_index, mut ok, mut reads) = (None::<Index>, true, BTreeSet::new());
    nest.value.visit(&mut |e| match e {
        Expr::Load { buf, index } if *buf == t => match &temp_index {
            None => temp_index = Some(index.clone()),
            Some(i) => ok &= i == index,
        },
        Expr::Load { buf, .. } => {
            ok &= *buf != nest.dst && p.buffer(*buf).ty.compute() != ElemType::F64;
            reads.insert(*buf);
        }
        Expr::Acc(_) | Expr::Cast(ElemType::F64, _) => ok = false,
        _ => {}
    });
    let temp_index = temp_index?;
    let dst_ty = p.buffer(nest.dst).ty;
    if !ok || !out_ok(dst_ty) {
        return None;
    }
    let writes_between = |buf: BufId| {
        users(p, buf, usize::MAX, false)
            .iter()
            .any(|&x| x >= ki && x < j)
    };
    if reads.iter().any(|&r| writes_between(r))
        || writes_between(nest.dst)
        || users(p, nest.dst, usize::MAX, true)
            .iter()
            .any(|&x| x > ki && x < j)
    {
        return None;
    }
    let vars = var_coords(view, dims, batch, &temp_index, &nest.vars)?;
    // The template stores through the epilogue's own index: the view only names the buffer.
    let c = MatView {
        buf: nest.dst,
        offset: 0,
        row_stride: 0,
        col_stride: 0,
        batch_strides: vec![0; batch.len()],
    };
    Some((
        c,
        Epilogue {
            kernel: j,
            temp: t,
            temp_index,
            value: nest.value.clone(),
            dst_index: nest.dst_index,
            vars,
        },
    ))
}

/// Each loop variable of a nest that reads the result (`view`: dims `dims`, then `batch`) at
/// `index`, as a digit of one of the result's coordinates ([`VarCoord`]); `None` unless every
/// coordinate is exactly the mixed-radix number of its variables (one element per iteration).
fn var_coords(
    view: &MatView,
    dims: &[u64],
    batch: &[u64],
    index: &Index,
    vars: &BTreeMap<VarId, u64>,
) -> Option<Vec<(VarId, VarCoord)>> {
    if index.offset != 0 {
        return None;
    }
    let mut strides = vec![view.row_stride, view.col_stride];
    strides.extend(&view.batch_strides);
    let mut lens = dims.to_vec();
    lens.extend(batch);
    let coord = |d: usize| match d {
        0 => Coord::Row,
        1 => Coord::Col,
        i => Coord::Batch(i - 2),
    };
    let mut out = Vec::new();
    let mut digits: Vec<Vec<(u64, u64)>> = vec![Vec::new(); lens.len()];
    for (&v, &extent) in vars {
        let s = index.stride_of(v);
        if extent == 1 {
            out.push((
                v,
                VarCoord {
                    coord: None,
                    div: 1,
                    extent: 1,
                    len: 1,
                },
            ));
            continue;
        }
        let d = (0..lens.len()).find(|&d| {
            let sd = strides[d];
            sd != 0 && s % sd == 0 && s / sd > 0 && ((s / sd) as u64) < lens[d]
        })?;
        let div = (s / strides[d]) as u64;
        digits[d].push((div, extent));
        out.push((
            v,
            VarCoord {
                coord: Some(coord(d)),
                div,
                extent,
                len: lens[d],
            },
        ));
    }
    // Each coordinate: digits 1, e0, e0·e1, … up to its extent exactly.
    for (d, ds) in digits.iter_mut().enumerate() {
        ds.sort();
        let mut unit = 1;
        for &(div, extent) in ds.iter() {
            if div != unit {
                return None;
            }
            unit *= extent;
        }
        if unit != lens[d] {
            return None;
        }
    }
    Some(out)
}

/// `view` over the copy's destination (`from_src` false) or source, re-expressed over the other
/// side: through the copy's loops as written, else with its cache tiles merged.
fn rebase_copy(
    view: &MatView,
    dims: &[u64],
    batch: &[u64],
    copy: &Copy,
    from_src: bool,
) -> Option<MatView> {
    let try_one = |c: &Copy| {
        let (from, to) = if from_src {
            (&c.src_index, &c.dst_index)
        } else {
            (&c.dst_index, &c.src_index)
        };
        rebase(view, dims, batch, from, to, &c.vars)
    };
    try_one(copy).or_else(|| {
        let mut merged = Copy {
            vars: copy.vars.clone(),
            dst: copy.dst,
            dst_index: copy.dst_index.clone(),
            src: copy.src,
            src_index: copy.src_index.clone(),
        };
        merge_tiles(&mut merged);
        try_one(&merged)
    })
}

/// `view` (dims `dims`, then the batch dims) over a copy's `from` side, re-expressed over its
/// `to` side ([`compose`]); the buffer is left for the caller to set.
fn rebase(
    view: &MatView,
    dims: &[u64],
    batch: &[u64],
    from: &Index,
    to: &Index,
    vars: &BTreeMap<VarId, u64>,
) -> Option<MatView> {
    let mut strides = vec![view.row_stride, view.col_stride];
    strides.extend(&view.batch_strides);
    let mut all_dims = dims.to_vec();
    all_dims.extend(batch);
    let new = compose(&strides, &all_dims, from, to, vars)?;
    Some(MatView {
        buf: view.buf,
        offset: to.offset,
        row_stride: new[0],
        col_stride: new[1],
        batch_strides: new[2..].to_vec(),
    })
}

/// The wrapper kernel for `tc`: batch offsets, the store of one accumulator (`put`: into C,
/// through the fused epilogue if there is one), then the template call.
pub fn render(p: &LoopProgram, name: &str, tc: &TensorCore) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let written = tc.split.as_ref().map_or(tc.c, |s| s.ws);
    header(&mut out, p, name, &tc.params(), written);
    let tiles = tc.tiles();
    let _ = writeln!(
        out,
        "  const long long tile = (long long)blockIdx.x % {tiles}LL;"
    );
    if tc.split.is_some() || !tc.batch.is_empty() {
        let _ = writeln!(out, "  long long bz = (long long)blockIdx.x / {tiles}LL;");
    }
    if let Some(s) = &tc.split {
        let _ = writeln!(
            out,
            "  const long long part = bz % {}LL; bz /= {}LL; const long long bl = bz;",
            s.parts, s.parts
        );
    }
    // A BSR template reads its blocks whole; a split product's main launch stores its partial
    // sums, and a fused epilogue its own index, not C's.
    let mut offsets = vec!["ob"];
    if !matches!(tc.kind, Kind::Bsr { .. }) {
        offsets.insert(0, "oa");
    }
    if tc.split.is_none() && tc.epilogue.is_none() {
        offsets.push("oc");
    }
    batch_offsets(&mut out, tc, &offsets);
    // The templates' IN: 0 f16, 1 bf16, 2 tf32 (f32 read as pairs of halves: K and the row
    // strides doubled, the same bytes per 16-byte chunk).
    let input = match tc.input {
        ElemType::BF16 => 1,
        ElemType::F32 => 2,
        _ => 0,
    };
    let halves = |b: u32, off: &str| -> String {
        if input == 2 {
            format!("(const unsigned short*)(b{b}{off})")
        } else {
            format!("b{b}{off}")
        }
    };
    // TF32 runs on the dense tensor-core templates only (an f32 SIMT product keeps its K).
    let tensor = matches!(tc.kind, Kind::Dense { .. } | Kind::Wgmma { .. });
    let unit: u64 = if input == 2 && tensor { 2 } else { 1 };
    // The accumulators' type: f64 for an f64 product (the SIMT template), else f32.
    let value_ty = if p.buffer(tc.a.buf).ty == ElemType::F64 {
        "double"
    } else {
        "float"
    };
    // K: the whole of it, or this block's part (whose operands start `part · kc` along K).
    let mut oe = String::new();
    let k = match &tc.split {
        None => format!("{}", tc.k * unit),
        Some(s) => {
            let (kc, kk) = (s.kc, tc.k);
            let b_step = if tc.b_kn { tc.b.ld } else { 1 };
            let a_step = match tc.kind {
                Kind::TwoFour { .. } => "part * {kc}LL / 2",
                _ => "part * {kc}LL",
            }
            .replace("{kc}", &kc.to_string());
            let _ = writeln!(
                out,
                "  oa += {a_step}; ob += part * {}LL;",
                kc as i64 * b_step
            );
            oe = format!(" + part * {}LL", kc / 32);
            let _ = writeln!(
                out,
                "  const long long ks = {kk}LL - part * {kc}LL < {kc}LL ? {kk}LL - part * {kc}LL : {kc}LL;"
            );
            let _ = writeln!(
                out,
                "  auto put = [&](int m, int n, float v) {{ b{}[((part * {}LL + bl) * {}LL + m) * {}LL + n] = v; }};",
                s.ws.0,
                tc.batch.iter().map(|b| b.0).product::<u64>(),
                tc.m,
                tc.n
            );
            format!("(int)(ks * {unit})")
        }
    };
    if tc.split.is_none() {
        put_lambda(&mut out, p, tc, value_ty);
    }
    let b_kn = if tc.b_kn { "true" } else { "false" };
    let (a, b) = (tc.a.buf.0, tc.b.buf.0);
    let (m, n) = (tc.m, tc.n);
    let call = match &tc.kind {
        Kind::Dense { bk, stages } => format!(
            "tdsl_tc_gemm<{input}, {b_kn}, {}, {bk}, {stages}>({}, {}, put, tile, {m}, {n}, {}, {}LL, {}LL)",
            tc.bn(),
            halves(a, " + oa"),
            halves(b, " + ob"),
            k,
            tc.a.ld * unit as i64,
            tc.b.ld * unit as i64
        ),
        Kind::Simt { dmma } => {
            let kind = |buf: BufId| match p.buffer(buf).ty {
                ElemType::F16 => 1,
                ElemType::BF16 => 2,
                _ => 0,
            };
            format!(
                "tdsl_sgemm<{}, {}, {b_kn}, {value_ty}, {dmma}>(b{a} + oa, b{b} + ob, put, tile, {m}, {n}, {k}, {}LL, {}LL)",
                kind(tc.a.buf),
                kind(tc.b.buf),
                tc.a.ld,
                tc.b.ld
            )
        }
        Kind::Wgmma { .. } => format!(
            "tdsl_tc_wgmma<{input}, {}>({}, {}, put, tile, {m}, {n}, {}, {}LL, {}LL)",
            tc.bn(),
            halves(a, " + oa"),
            halves(b, " + ob"),
            k,
            tc.a.ld * unit as i64,
            tc.b.ld * unit as i64
        ),
        Kind::TwoFour { meta, wgmma } => {
            let template = if *wgmma > 0 {
                format!("tdsl_tc_wgmma_sp24<{input}, {wgmma}>")
            } else {
                format!("tdsl_tc_sp24<{input}, {b_kn}>")
            };
            format!(
                "{template}(b{a} + oa, b{e}{oe}, b{b} + ob, put, tile, {m}, {n}, {k}, {}LL, {}LL, {}LL)",
                tc.a.ld,
                meta.ld,
                tc.b.ld,
                e = meta.buf.0
            )
        }
        Kind::Bsr {
            ptr,
            idx,
            r,
            c,
            wn,
            walk,
            table,
        } => {
            let template = match walk {
                BsrWalk::Rows => format!("tdsl_tc_bsr<{input}, {b_kn}, {r}, {c}, {wn}>"),
                BsrWalk::Union => format!("tdsl_tc_bsr_union<{input}, {b_kn}, {r}, {c}>"),
                BsrWalk::Wgmma { cols } => format!("tdsl_tc_wgmma_bsr<{input}, {r}, {c}, {cols}>"),
            };
            // The row walk reads the block columns, the group walks their group table.
            format!(
                "{template}(b{a}, b{}, b{}, b{b} + ob, put, tile, {m}, {n}, {k}, {}LL)",
                ptr.0,
                table.unwrap_or(*idx).0,
                tc.b.ld
            )
        }
    };
    let _ = writeln!(out, "  {call};");
    out.push_str("}\n");
    out
}

/// The kernel's signature: every buffer of `params` const but `written`.
fn header(out: &mut String, p: &LoopProgram, name: &str, params: &[BufId], written: BufId) {
    use std::fmt::Write;
    let params: Vec<String> = params
        .iter()
        .map(|b| {
            let buf = p.buffer(*b);
            let cnst = if *b == written { "" } else { "const " };
            format!(
                "{cnst}{}* __restrict__ b{}",
                crate::render::c_type(buf.ty),
                b.0
            )
        })
        .collect();
    let _ = writeln!(out, "TDSL_KERNEL {name}({}) {{", params.join(", "));
}

/// The batch element `bz` as each batch axis's index `bi…`, and the offsets `names` the launch
/// reads (`oa`, `ob`, `oc`: of A, B and C, in that order) at it.
fn batch_offsets(out: &mut String, tc: &TensorCore, names: &[&str]) {
    use std::fmt::Write;
    let pick = |name: &str, (a, b, c): (i64, i64, i64)| match name {
        "oa" => a,
        "ob" => b,
        _ => c,
    };
    let init = (tc.a.offset, tc.b.offset, tc.c_offset);
    if !names.is_empty() {
        let decl: Vec<String> = names
            .iter()
            .map(|n| format!("{n} = {}LL", pick(n, init)))
            .collect();
        let _ = writeln!(out, "  long long {};", decl.join(", "));
    }
    for (i, &(e, sa, sb, sc)) in tc.batch.iter().enumerate().rev() {
        let adds: String = names
            .iter()
            .map(|n| format!(" {n} += bi{i} * {}LL;", pick(n, (sa, sb, sc))))
            .collect();
        let _ = writeln!(
            out,
            "  const long long bi{i} = bz % {e}LL; bz /= {e}LL;{adds}"
        );
    }
}

/// `put(m, n, v)`: the accumulator `v` of (m, n) into C (rounded to C's type, added to it when
/// the call accumulates), or through the fused epilogue.
fn put_lambda(out: &mut String, p: &LoopProgram, tc: &TensorCore, value_ty: &str) {
    use std::fmt::Write;
    let out_kind = match p.buffer(tc.c).ty {
        ElemType::F16 => 1,
        ElemType::BF16 => 2,
        _ => 0,
    };
    let at = format!(
        "b{} + oc + (long long)m * {}LL + (long long)n * {}LL",
        tc.c.0, tc.ldm, tc.ldn
    );
    match &tc.epilogue {
        None => {
            let _ = writeln!(
                out,
                "  auto put = [&](int m, int n, {value_ty} v) {{ tdsl_tc_put<{out_kind}>({at}, v, {}); }};",
                tc.accumulate
            );
        }
        Some(e) => {
            let _ = writeln!(out, "  auto put = [&](int m, int n, {value_ty} v) {{");
            for (var, vc) in &e.vars {
                let mut value = match (vc.coord, tc.swapped) {
                    (None, _) => "0".to_string(),
                    (Some(Coord::Row), false) | (Some(Coord::Col), true) => "(long long)m".into(),
                    (Some(Coord::Col), false) | (Some(Coord::Row), true) => "(long long)n".into(),
                    (Some(Coord::Batch(i)), _) => format!("bi{i}"),
                };
                if vc.div > 1 {
                    value = format!("({value} / {}LL)", vc.div);
                }
                if vc.coord.is_some() && vc.div * vc.extent < vc.len {
                    value = format!("({value} % {}LL)", vc.extent);
                }
                let _ = writeln!(out, "    const long long v{} = {value};", var.0);
            }
            // The result as the unfused kernels saw it: rounded to its type.
            let stored = match p.buffer(e.temp).ty {
                ElemType::F16 => "tdsl_f32_to_f16(v)",
                ElemType::BF16 => "tdsl_f32_to_bf16(v)",
                _ => "v",
            };
            let value = crate::render::epilogue_value(p, &e.value, e.temp, &e.temp_index, stored);
            let _ = writeln!(
                out,
                "    tdsl_tc_put<{out_kind}>(b{} + {}, {value}, false);\n  }};",
                tc.c.0,
                crate::render::index(&e.dst_index)
            );
        }
    }
}

/// The reduce launch of a split product ([`SplitK`]): one thread per element of the result
/// adds its parts in order and stores the sum through the product's `put`.
pub fn render_reduce(p: &LoopProgram, name: &str, tc: &TensorCore) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let Some(s) = &tc.split else {
        return out;
    };
    header(&mut out, p, name, &tc.reduce_params(), tc.c);
    let (m, n, total) = (tc.m, tc.n, tc.outputs());
    let _ = writeln!(
        out,
        "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < {total}LL; i += (long long)gridDim.x * blockDim.x) {{"
    );
    let _ = writeln!(
        out,
        "  const int m = (int)(i / {n}LL % {m}LL), n = (int)(i % {n}LL);"
    );
    if !tc.batch.is_empty() {
        let _ = writeln!(out, "  long long bz = i / {}LL;", m * n);
    }
    let offsets: &[&str] = if tc.epilogue.is_none() { &["oc"] } else { &[] };
    batch_offsets(&mut out, tc, offsets);
    put_lambda(&mut out, p, tc, "float");
    let _ = writeln!(
        out,
        "  float v = 0.0f;\n  for (int q = 0; q < {}; q++) v += b{}[q * {total}LL + i];\n  put(m, n, v);\n  }}\n}}",
        s.parts, s.ws.0
    );
    out
}
