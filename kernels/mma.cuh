// Tensor-core products, specialised by tdsl-cuda's mapping pass (codegen/cuda/src/tensor.rs) for
// every `gemm`, 2:4 `spmm` and BSR `spmm` whose operands are f16 or bf16 (shared/GPU.md §2 has the fragment
// maps; bench/gpu/probe_mma.cu checked them on an H200). Each generated wrapper computes its
// batch offsets and calls one of the templates below with compile-time shapes and strides.
//
//   C[m, n] (+)= sum_k A[m, k] * B[k, n], accumulated in f32, rounded once into C's type.
//
// - A is k-contiguous: element (m, k) at A[m * lda + k].
// - B is k-contiguous (B_KN = false, torch's `[out, in]` weight read as B^T: (k, n) at
//   B[n * ldb + k]) or n-contiguous (B_KN = true: (k, n) at B[k * ldb + n]).
// - C is written by the wrapper's `put(m, n, v)`: the f32 accumulator of (m, n), which the
//   wrapper stores into any strided view (f32, f16 or bf16: tdsl_tc_put), through the
//   elementwise epilogue fused into the product when there is one (tensor.rs).
// - IN: 0 f16, 1 bf16 (one type for both operands), or 2 tf32 for the dense templates: f32
//   operands the wrapper passes as pairs of halves (K and the strides doubled), so the 16-byte
//   chunks, swizzles and fragment loads are byte for byte those of a 16-bit k16 step, which is
//   one tf32 k8 step (mma.sync m16n8k8, wgmma m64nNk8; the tensor cores ignore the operands'
//   low 13 mantissa bits). B k-contiguous only: tensor.rs copies an n-contiguous one first.
// Edges: rows and columns past M and N are zero-filled by cp.async (src-size 0) and not stored;
// the mapping pass requires K and, for B_KN, N to be multiples of 8 and every row start
// 16-byte aligned, so a 16-byte chunk is either wholly inside or wholly outside.
//
// Block tiles 128 x 128, 8 warps as 2 x 4, each warp 64 x 32; cp.async multi-stage pipelines in
// dynamic shared memory; shared memory XOR-swizzled by 16-byte chunk
// so every ldmatrix phase hits 8 distinct bank groups.
//
// The instructions themselves (cp.async, ldmatrix, mma.sync, mma.sp, wgmma) are functions defined
// before this file: by mma_device.cuh on the GPU, by mma_host.h in the host emulation, which runs
// every thread of a block as a fiber and the warp-wide instructions on the gathered lanes.

#define TDSL_TC_BM 128
#define TDSL_TC_BN 128
#define TDSL_TC_THREADS 256


TDSL_FN void tdsl_tc_store(float *c, float v, bool acc) { *c = acc ? *c + v : v; }
TDSL_FN void tdsl_tc_store(double *c, float v, bool acc) { *c = acc ? *c + (double)v : (double)v; }
TDSL_FN void tdsl_tc_store(double *c, double v, bool acc) { *c = acc ? *c + v : v; }
template <int OUT> TDSL_FN void tdsl_tc_store16(unsigned short *c, float v, bool acc) {
  if (OUT == 2) *c = tdsl_f32_to_bf16(acc ? tdsl_bf16_to_f32(*c) + v : v);
  else *c = tdsl_f32_to_f16(acc ? tdsl_f16_to_f32(*c) + v : v);
}
template <int OUT, typename CT, typename V> TDSL_FN void tdsl_tc_put(CT *c, V v, bool acc) {
  if constexpr (OUT == 0) tdsl_tc_store(c, v, acc);
  else tdsl_tc_store16<OUT>(c, v, acc);
}

// The block's output tile from its index: tiles walk M in groups of 8 so that consecutive blocks
// share B panels in L2.
template <int BN, int BM = TDSL_TC_BM> TDSL_FN void tdsl_tc_tile(long long tile, int M, int N, int &m0, int &n0) {
  const int tm = (M + BM - 1) / BM, tn = (N + BN - 1) / BN;
  const int group = 8;
  const int in_group = group * tn;
  const int g = (int)(tile / in_group), first = g * group;
  const int rows = tm - first < group ? tm - first : group;
  const int r = (int)(tile % in_group);
  m0 = (first + r % rows) * BM;
  n0 = (r / rows) * BN;
}

// The accumulators of one warp (16 MI x 8 NI) into C, through `put`.
template <int MI, int NI, typename Put>
TDSL_FN void tdsl_tc_epilogue(float (&acc)[MI][NI][4], Put &put, int M, int N, int row0, int col0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mi = 0; mi < MI; mi++)
#pragma unroll
    for (int ni = 0; ni < NI; ni++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int m = row0 + mi * 16 + g + 8 * (i >> 1), n = col0 + ni * 8 + 2 * t + (i & 1);
        if (m < M && n < N) put(m, n, acc[mi][ni][i]);
      }
}

// The cp.async pipeline of the mma.sync templates: `n` steps through STAGES stages of shared
// memory, loads issued STAGES - 1 steps ahead; `load(stage, i)` issues step i's copies,
// `step(stage)` computes on a landed stage. Accumulators start at zero (tdsl_zero).
template <int STAGES, typename Load, typename Step> TDSL_FN void tdsl_cp_pipeline(int n, Load load, Step step) {
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < n) load(s, s);
    tdsl_cp_commit();
  }
  for (int i = 0; i < n; i++) {
    tdsl_cp_wait<STAGES - 2>();
    __syncthreads();
    if (i + STAGES - 1 < n) load((i + STAGES - 1) % STAGES, i + STAGES - 1);
    tdsl_cp_commit();
    step(i % STAGES);
  }
  tdsl_cp_wait<0>();
}
// The group table of a BSR operand under groups of G block rows (built on the host per pattern,
// `tdsl_cuda::map::Groups`): `groups + 1` offsets, then each group's union of block columns in
// order, one word per column: the column in the low 16 bits, bit 16 + g set when block row g of
// the group stores a block there. Group `grp`'s entries and their count.
TDSL_FN const unsigned *tdsl_bsr_group(const int *__restrict__ tab, int groups, int grp, int &count) {
  count = tab[grp + 1] - tab[grp];
  return reinterpret_cast<const unsigned *>(tab) + groups + 1 + tab[grp];
}
template <int MI, int NI> TDSL_FN void tdsl_zero(float (&acc)[MI][NI][4]) {
#pragma unroll
  for (int mi = 0; mi < MI; mi++)
#pragma unroll
    for (int ni = 0; ni < NI; ni++)
#pragma unroll
      for (int i = 0; i < 4; i++) acc[mi][ni][i] = 0.0f;
}

// One k16 step of a warp's MI x NI tile of m16n8 accumulators: A's rows a_row0 .. a_row0 + 16 MI
// and B's columns b_col0 .. b_col0 + 8 NI from one pipeline stage (A as CH chunks per row,
// swizzled by tdsl_sw; B k-contiguous likewise, or n-contiguous as BCH chunks per k row,
// swizzled by k mod 8), through ldmatrix, then the MI x NI mma.
template <int CH> TDSL_FN int tdsl_sw(int r, int c) { return r * CH + (c ^ ((r / (8 / CH)) & (CH - 1))); }
template <int IN, bool B_KN, int MI, int NI, int CH, int BCH>
TDSL_FN void tdsl_warp_k16(float (&acc)[MI][NI][4], const uint4 *a_st, const uint4 *b_st, int kk, int a_row0,
                           int b_col0) {
  const int lane = threadIdx.x & 31;
  unsigned a[MI][4], b[NI][2];
#pragma unroll
  for (int mi = 0; mi < MI; mi++) {
    const int r = a_row0 + mi * 16 + (lane & 15), c = kk * 2 + (lane >> 4);
    tdsl_ldm_x4(tdsl_smem(&a_st[tdsl_sw<CH>(r, c)]), a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
  }
#pragma unroll
  for (int np = 0; np < NI / 2; np++) {  // pairs of n8 tiles
    if (!B_KN) {
      const int r = b_col0 + np * 16 + (lane & 7) + ((lane >> 4) << 3), c = kk * 2 + ((lane >> 3) & 1);
      tdsl_ldm_x4(tdsl_smem(&b_st[tdsl_sw<CH>(r, c)]), b[2 * np][0], b[2 * np][1], b[2 * np + 1][0], b[2 * np + 1][1]);
    } else {
      const int r = kk * 16 + (lane & 15), c = b_col0 / 8 + np * 2 + (lane >> 4);
      tdsl_ldm_x4_t(tdsl_smem(&b_st[r * BCH + (c ^ (r & 7))]), b[2 * np][0], b[2 * np][1], b[2 * np + 1][0],
                    b[2 * np + 1][1]);
    }
  }
#pragma unroll
  for (int mi = 0; mi < MI; mi++)
#pragma unroll
    for (int ni = 0; ni < NI; ni++) tdsl_mma16816<IN>(acc[mi][ni], a[mi], b[ni]);
}

// Dense: BK of 32 or 64, STAGES in dynamic shared memory (TDSL_TC_GEMM_SMEM bytes): A 128 x BK
// and B BN x BK halves per stage. 8 warps as 2 x 4, each 64 x (BN / 4). The mapping pass uses
// BN = 128 (64 x 32 warp tiles, 2 blocks per SM); BN = 256 (64 x 64 warp tiles, 212 registers,
// 1 block per SM) measured slower on an H200 (bench/RESULTS.md) and is kept as a parameter.
#define TDSL_TC_GEMM_SMEM(BN, BK, STAGES) ((STAGES) * (TDSL_TC_BM + (BN)) * (BK) * 2)
template <int IN, bool B_KN, int BN, int BK, int STAGES, typename Put>
TDSL_FN void tdsl_tc_gemm(const unsigned short *__restrict__ A, const unsigned short *__restrict__ B, Put put,
                          long long tile, int M, int N, int K, long long lda, long long ldb) {
  constexpr int NI = BN / 32, BCH = BN / 8, CH = BK / 8;
  static_assert(BK == 32 || BK == 64, "BK of 32 or 64");
  static_assert(IN != 2 || !B_KN, "tf32 reads B k-contiguous only (ldmatrix.trans moves halves)");
  // Chunks of 8 halves: A [128 rows][CH], B [BN n][CH] (k-contiguous) or [BK k][BN / 8] (n-contiguous).
  TDSL_DYN_SMEM(tdsl_smem_dyn);
  uint4 *sA = tdsl_smem_dyn, *sB = tdsl_smem_dyn + STAGES * TDSL_TC_BM * CH;
  int m0, n0;
  tdsl_tc_tile<BN>(tile, M, N, m0, n0);
  const int tid = threadIdx.x, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  const int KT = (K + BK - 1) / BK;

  auto load = [&](int stage, int kt) {
    const int k0 = kt * BK;
    uint4 *a_st = sA + stage * TDSL_TC_BM * CH, *b_st = sB + stage * BN * CH;
#pragma unroll
    for (int j = 0; j < TDSL_TC_BM * CH / TDSL_TC_THREADS; j++) {  // A: 128 x CH chunks
      const int q = tid + j * TDSL_TC_THREADS;
      const int r = q / CH, c = q % CH;
      const bool ok = m0 + r < M && k0 + c * 8 < K;
      const unsigned short *src = ok ? A + (long long)(m0 + r) * lda + k0 + c * 8 : A;
      tdsl_cp16(tdsl_smem(&a_st[tdsl_sw<CH>(r, c)]), src, ok);
    }
#pragma unroll
    for (int j = 0; j < BN * CH / TDSL_TC_THREADS; j++) {  // B: BN x CH chunks
      const int q = tid + j * TDSL_TC_THREADS;
      if (!B_KN) {
        const int r = q / CH, c = q % CH;
        const bool ok = n0 + r < N && k0 + c * 8 < K;
        const unsigned short *src = ok ? B + (long long)(n0 + r) * ldb + k0 + c * 8 : B;
        tdsl_cp16(tdsl_smem(&b_st[tdsl_sw<CH>(r, c)]), src, ok);
      } else {
        const int r = q / BCH, c = q % BCH;
        const bool ok = k0 + r < K && n0 + c * 8 < N;
        const unsigned short *src = ok ? B + (long long)(k0 + r) * ldb + n0 + c * 8 : B;
        tdsl_cp16(tdsl_smem(&b_st[r * BCH + (c ^ (r & 7))]), src, ok);
      }
    }
  };

  float acc[4][NI][4];
  tdsl_zero(acc);
  tdsl_cp_pipeline<STAGES>(KT, load, [&](int st) {
    const uint4 *a_st = sA + st * TDSL_TC_BM * CH, *b_st = sB + st * BN * CH;
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++)  // k16 steps
      tdsl_warp_k16<IN, B_KN, 4, NI, CH, BCH>(acc, a_st, b_st, kk, wm * 64, wn * (BN / 4));
  });
  tdsl_tc_epilogue(acc, put, M, N, m0 + wm * 64, n0 + wn * (BN / 4));
}

// Dense on sm_90a (H100, H200): `wgmma.mma_async` m64nBNk16, both operands read by the tensor
// cores from shared memory through descriptors. Block tile 128 x BN x 64 (BN 256, 128 or 64: the
// widest that still gives every SM work, tensor.rs): two warpgroups, each 64 x BN (BN / 2 f32
// accumulators per thread).
// A [128][64] and B [BN][64] halves per stage, both k-contiguous (B_KN = false only), in the
// 128-byte swizzle wgmma's descriptors name (16-byte chunk c of row r at chunk c ^ (r mod 8);
// 8-row atoms 1024 bytes apart), loaded by cp.async (zero-filled past M, N and K as in
// tdsl_tc_gemm), through TDSL_TC_WG_STAGES stages of tdsl_wg_pipeline.
#define TDSL_TC_WG_STAGES 4
#define TDSL_TC_WG_STAGE_BYTES(BN) ((TDSL_TC_BM + (BN)) * 64 * 2)
#define TDSL_TC_WG_SMEM(BN) (TDSL_TC_WG_STAGES * TDSL_TC_WG_STAGE_BYTES(BN) + 1024)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// A shared-memory matrix descriptor: start address, leading byte offset 16 (unused for swizzled
// k-major), stride byte offset 1024 (one 8-row atom), 128-byte swizzle.
TDSL_FN unsigned long long tdsl_wg_desc(unsigned addr) {
  return (unsigned long long)((addr & 0x3FFFFu) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |
         (1ull << 62);
}
// A warpgroup's m64nBN accumulators into C through `put`, rows row0 .. row0 + 63 and columns
// col0 ..: d[4j + i] at row 16w + lane / 4 (+ 8 for i >= 2), column 8j + 2 (lane mod 4) + (i mod 2).
template <int BN, typename Put>
TDSL_FN void tdsl_wg_epilogue(const float *d, Put &put, int M, int N, int row0, int col0) {
  const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3;
  const int r0 = row0 + w * 16 + (lane >> 2), c0 = col0 + 2 * (lane & 3);
#pragma unroll
  for (int j = 0; j < BN / 8; j++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int m = r0 + 8 * (i >> 1), n = c0 + 8 * j + (i & 1);
      if (m < M && n < N) put(m, n, d[4 * j + i]);
    }
}
// The cp.async + wgmma pipeline of the sm_90a templates: `n` steps through STAGES stages,
// loads issued STAGES - 2 steps ahead and one wgmma group kept in flight, so the stage a load
// overwrites was read two steps ago and every warpgroup has waited for it before the barrier
// that precedes the load. `load(stage, i)` issues step i's copies; `step(stage, i)` issues
// step i's wgmmas (between the fence and the commit).
template <int STAGES, typename Load, typename Step> TDSL_FN void tdsl_wg_pipeline(int n, Load load, Step step) {
  constexpr int AHEAD = STAGES - 2;
#pragma unroll
  for (int s = 0; s < AHEAD; s++) {
    if (s < n) load(s, s);
    tdsl_cp_commit();
  }
  for (int kt = 0; kt < n; kt++) {
    tdsl_cp_wait<AHEAD - 1>();  // step kt has landed (this thread's copies)
    tdsl_fence_async_smem();    // ... and is visible to the tensor cores' proxy
    __syncthreads();            // every thread's copies; every warpgroup done with step kt - 2
    if (kt + AHEAD < n) load((kt + AHEAD) % STAGES, kt + AHEAD);
    tdsl_cp_commit();
    tdsl_wg_fence();
    step(kt % STAGES, kt);
    tdsl_wg_commit();
    tdsl_wg_wait<1>();
  }
  tdsl_wg_wait<0>();
  tdsl_cp_wait<0>();
}
template <int IN, int BN, typename Put>
TDSL_FN void tdsl_tc_wgmma(const unsigned short *__restrict__ A, const unsigned short *__restrict__ B, Put put,
                           long long tile, int M, int N, int K, long long lda, long long ldb) {
  static_assert(BN == 64 || BN == 128 || BN == 256, "wgmma tiles 64, 128 or 256 wide");
  constexpr int STAGES = TDSL_TC_WG_STAGES;
  constexpr unsigned A_BYTES = TDSL_TC_BM * 128, STAGE = TDSL_TC_WG_STAGE_BYTES(BN);
  TDSL_DYN_SMEM(tdsl_smem_dyn);
  const unsigned base = (tdsl_smem(tdsl_smem_dyn) + 1023u) & ~1023u;
  int m0, n0;
  tdsl_tc_tile<BN>(tile, M, N, m0, n0);
  const int tid = threadIdx.x, wg = tid >> 7;
  const int KT = (K + 63) / 64;

  auto load = [&](int stage, int kt) {
    const int k0 = kt * 64;
    const unsigned a_st = base + stage * STAGE, b_st = a_st + A_BYTES;
#pragma unroll
    for (int j = 0; j < TDSL_TC_BM * 8 / TDSL_TC_THREADS; j++) {  // A: 128 rows x 8 chunks
      const int q = tid + j * TDSL_TC_THREADS, r = q >> 3, c = q & 7;
      const bool ok = m0 + r < M && k0 + c * 8 < K;
      const unsigned short *src = ok ? A + (long long)(m0 + r) * lda + k0 + c * 8 : A;
      tdsl_cp16(a_st + r * 128 + ((c ^ (r & 7)) << 4), src, ok);
    }
#pragma unroll
    for (int j = 0; j < BN * 8 / TDSL_TC_THREADS; j++) {  // B: BN rows (n) x 8 chunks
      const int q = tid + j * TDSL_TC_THREADS, r = q >> 3, c = q & 7;
      const bool ok = n0 + r < N && k0 + c * 8 < K;
      const unsigned short *src = ok ? B + (long long)(n0 + r) * ldb + k0 + c * 8 : B;
      tdsl_cp16(b_st + r * 128 + ((c ^ (r & 7)) << 4), src, ok);
    }
  };

  float d[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; i++) d[i] = 0.0f;
  tdsl_wg_pipeline<STAGES>(KT, load, [&](int stage, int) {
    const unsigned st = base + stage * STAGE, a_st = st + wg * 64 * 128, b_st = st + A_BYTES;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) tdsl_wgmma<IN, BN>(d, tdsl_wg_desc(a_st + kk * 32), tdsl_wg_desc(b_st + kk * 32));
  });
  tdsl_wg_epilogue<BN>(d, put, M, N, m0 + wg * 64, n0);
}

// 2:4 on sm_90a (H100, H200): `wgmma.mma_async.sp` m64n128k32, the compressed values (A) and B
// from shared memory through descriptors, the metadata from registers. Same operands as
// tdsl_tc_sp24 (K a multiple of 64; B k-contiguous only). Block tile (128 MW) x 128: two
// warpgroups, each MW blocks of 64 rows (MW = 2 halves the B bytes per product, which the
// 128 x 128 tile reads at 100 bytes per clock per SM at the sparse peak). A stage holds 128
// logical K: A's rows of 64 compressed halves (128 bytes), B's 128 rows of 128 halves as two
// 64-half panels, each in the 128-byte swizzle, and the rows' 4 metadata words. Each k32 step
// advances A's descriptor by 32 bytes and B's by 64 (the second pair of steps reads the second
// panel). As CUTLASS's sparse mainloop does, every stage waits for its wgmma group before the
// next is issued (the metadata registers are read by the asynchronous instruction), and loads
// run STAGES - 1 tiles ahead.
#define TDSL_TC_WGSP_STAGES(MW) ((MW) == 1 ? 4 : 3)
#define TDSL_TC_WGSP_STAGE_BYTES(MW) (TDSL_TC_BM * (MW) * (128 + 16) + TDSL_TC_BN * 256)
#define TDSL_TC_WGSP_SMEM(MW) (TDSL_TC_WGSP_STAGES(MW) * TDSL_TC_WGSP_STAGE_BYTES(MW) + 1024)
template <int IN, int MW, typename Put>
TDSL_FN void tdsl_tc_wgmma_sp24(const unsigned short *__restrict__ Av, const int *__restrict__ Am,
                                const unsigned short *__restrict__ B, Put put, long long tile, int M, int N, int K,
                                long long ldv, long long ldmeta, long long ldb) {
  static_assert(MW == 1 || MW == 2, "one or two m64 blocks per warpgroup");
  constexpr int STAGES = TDSL_TC_WGSP_STAGES(MW), BN = TDSL_TC_BN, BM = TDSL_TC_BM * MW;
  constexpr unsigned A_BYTES = BM * 128, B_PANEL = BN * 128, STAGE = TDSL_TC_WGSP_STAGE_BYTES(MW);
  TDSL_DYN_SMEM(tdsl_smem_dyn);
  const unsigned smem0 = tdsl_smem(tdsl_smem_dyn), base = (smem0 + 1023u) & ~1023u;
  const unsigned char *gbase = reinterpret_cast<const unsigned char *>(tdsl_smem_dyn) + (base - smem0);
  int m0, n0;
  tdsl_tc_tile<BN, BM>(tile, M, N, m0, n0);
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, w = (tid >> 5) & 3;
  const int KT = (K + 127) / 128, KV = K / 2, KW = K / 32;  // stages; values and metadata words per row

  auto load = [&](int stage, int kt) {
    const unsigned a_st = base + stage * STAGE, b_st = a_st + A_BYTES, e_st = b_st + 2 * B_PANEL;
#pragma unroll
    for (int j = 0; j < BM * 8 / TDSL_TC_THREADS; j++) {  // A: BM rows x 8 chunks
      const int q = tid + j * TDSL_TC_THREADS, r = q >> 3, c = q & 7;
      const bool ok = m0 + r < M && kt * 64 + c * 8 < KV;
      const unsigned short *src = ok ? Av + (long long)(m0 + r) * ldv + kt * 64 + c * 8 : Av;
      tdsl_cp16(a_st + r * 128 + ((c ^ (r & 7)) << 4), src, ok);
    }
#pragma unroll
    for (int j = 0; j < BN * 16 / TDSL_TC_THREADS; j++) {  // B: BN rows x 16 chunks, two panels
      const int q = tid + j * TDSL_TC_THREADS, r = q >> 4, c = q & 15;
      const bool ok = n0 + r < N && kt * 128 + c * 8 < K;
      const unsigned short *src = ok ? B + (long long)(n0 + r) * ldb + kt * 128 + c * 8 : B;
      tdsl_cp16(b_st + (c >> 3) * B_PANEL + r * 128 + (((c & 7) ^ (r & 7)) << 4), src, ok);
    }
#pragma unroll
    for (int j = 0; j < MW; j++) {  // metadata: words 4 kt .. 4 kt + 3 of each row, two 8-byte copies
      const int q = tid + j * TDSL_TC_THREADS, r = q >> 1, h = q & 1, word = kt * 4 + 2 * h;
      const bool ok = m0 + r < M && word < KW;  // (K / 32 is even)
      const int *src = ok ? Am + (long long)(m0 + r) * ldmeta + word : Am;
      tdsl_cp8(e_st + r * 16 + h * 8, src, ok);
    }
  };

  float d[MW][BN / 2];
#pragma unroll
  for (int mw = 0; mw < MW; mw++)
#pragma unroll
    for (int i = 0; i < BN / 2; i++) d[mw][i] = 0.0f;
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < KT) load(s, s);
    tdsl_cp_commit();
  }
  // Block mw of this warpgroup: rows 64 (MW wg + mw) ..; this lane's metadata rows in it (mma.sp's
  // map per warp): 16w + g (low half-words) and + 8 (high).
  const int er = wg * 64 * MW + w * 16 + (lane >> 2);
  const unsigned sh = 16 * (lane & 1);
  for (int kt = 0; kt < KT; kt++) {
    tdsl_cp_wait<STAGES - 2>();  // tile kt has landed (this thread's copies)
    tdsl_fence_async_smem();     // ... and is visible to the tensor cores' proxy
    __syncthreads();             // every thread's copies; every warpgroup done with tile kt - 1
    if (kt + STAGES - 1 < KT) load((kt + STAGES - 1) % STAGES, kt + STAGES - 1);
    tdsl_cp_commit();
    const unsigned st = base + (kt % STAGES) * STAGE, b_st = st + A_BYTES;
    const uint4 *e_st = reinterpret_cast<const uint4 *>(gbase + (kt % STAGES) * STAGE + A_BYTES + 2 * B_PANEL);
    unsigned e[MW][4];
#pragma unroll
    for (int mw = 0; mw < MW; mw++) {
      const int r = er + 64 * mw;
      const uint4 lo4 = e_st[r], hi4 = e_st[r + 8];
      const unsigned lo_w[4] = {lo4.x, lo4.y, lo4.z, lo4.w}, hi_w[4] = {hi4.x, hi4.y, hi4.z, hi4.w};
#pragma unroll
      for (int s = 0; s < 4; s++) {
        // Rows past M and k32 steps past K (zero values) get a valid pattern.
        const bool k_in = kt * 128 + s * 32 < K;
        const unsigned lo = k_in && m0 + r < M ? (lo_w[s] >> sh) & 0xffffu : 0x4444u;
        const unsigned hi = k_in && m0 + r + 8 < M ? (hi_w[s] >> sh) & 0xffffu : 0x4444u;
        e[mw][s] = lo | (hi << 16);
      }
    }
    tdsl_wg_fence();
#pragma unroll
    for (int s = 0; s < 4; s++)
#pragma unroll
      for (int mw = 0; mw < MW; mw++)
        tdsl_wgmma_sp<IN>(d[mw], tdsl_wg_desc(st + (wg * MW + mw) * 64 * 128 + s * 32),
                          tdsl_wg_desc(b_st + (s >> 1) * B_PANEL + (s & 1) * 64), e[mw][s]);
    tdsl_wg_commit();
    tdsl_wg_wait<0>();
  }
  tdsl_cp_wait<0>();
#pragma unroll
  for (int mw = 0; mw < MW; mw++) tdsl_wg_epilogue<BN>(d[mw], put, M, N, m0 + (wg * MW + mw) * 64, n0);
}

// BSR on sm_90a (H100, H200), the stored blocks as wgmma's B: the template computes Cᵀ, its rows
// the dense operand's (N of them, B k-contiguous: (k, n) at B[n * ldb + k]) and its columns the
// BSR operand's rows (M, a multiple of R), and stores through `put(m, n)` all the same. Block
// tile 128 dense rows (two warpgroups of 64) by COLS = G R BSR rows (G block rows), walking the
// union of the G block rows' block columns: one strip of the dense operand (128 rows x C) per
// column serves every block row stored there, and each stored R x C block is one
// `wgmma.mma_async` m64nRk16 per k16 of its own (absent blocks are skipped, never multiplied
// as zeros). A stage holds S = 64 / C columns of the union side by side in 128-byte rows, so
// its A (128 x 64 halves) and its G slots of R x 64 halves (slot g: block row g's blocks at
// those columns) have the 128-byte swizzle and descriptors of tdsl_tc_wgmma. The union is the
// group table the host builds per pattern (tdsl_bsr_group); the stored blocks are found by a
// cursor per block row, starting at `ptr`. Pipeline: tdsl_wg_pipeline, as tdsl_tc_wgmma; shared
// memory: its stages only (TDSL_TC_WG_SMEM).
// a[g] for a g known only at run time, without an indexed (local-memory) array.
template <int G> TDSL_FN int tdsl_pick(const int (&a)[G], int g) {
  int v = a[0];
#pragma unroll
  for (int i = 1; i < G; i++) v = g == i ? a[i] : v;
  return v;
}
template <int IN, int R, int C, int COLS, typename Put>
TDSL_FN void tdsl_tc_wgmma_bsr(const unsigned short *__restrict__ Av, const int *__restrict__ ptr,
                               const int *__restrict__ tab,
                               const unsigned short *__restrict__ B, Put put, long long tile, int M, int N, int K,
                               long long ldb) {
  constexpr int G = COLS / R, S = 64 / C, CH = C / 8, STAGES = TDSL_TC_WG_STAGES;
  static_assert((R == 16 || R == 32 || R == 64) && (C == 16 || C == 32 || C == 64), "BSR blocks of 16, 32 or 64");
  static_assert((COLS == 128 || COLS == 256) && G <= 8, "128 or 256 columns of at most 8 block rows");
  constexpr unsigned A_BYTES = TDSL_TC_BM * 128, STAGE = TDSL_TC_WG_STAGE_BYTES(COLS);
  TDSL_DYN_SMEM(tdsl_smem_dyn);
  const unsigned smem0 = tdsl_smem(tdsl_smem_dyn), base = (smem0 + 1023u) & ~1023u;
  const int block_rows = M / R, groups = (block_rows + G - 1) / G;
  const int br0 = (int)(tile % groups) * G, n0 = (int)(tile / groups) * TDSL_TC_BM;
  const int tid = threadIdx.x, wg = tid >> 7;
  (void)K;
  int U;
  const unsigned *list = tdsl_bsr_group(tab, groups, (int)(tile % groups), U);
  const int KT = (U + S - 1) / S;
  int at[G];  // the loads' cursor into each block row's stored blocks
#pragma unroll
  for (int g = 0; g < G; g++) at[g] = ptr[br0 + g < block_rows ? br0 + g : block_rows];

  // Stage kt: the union's columns S kt .. S kt + S - 1 (fewer at its end).
  auto load = [&](int stage, int kt) {
    const unsigned a_st = base + stage * STAGE, b_st = a_st + A_BYTES;
#pragma unroll
    for (int s = 0; s < S; s++) {
      if (kt * S + s >= U) break;
      const unsigned e = list[kt * S + s], mk = e >> 16;
      const int k0 = (int)(e & 0xffffu) * C;
#pragma unroll
      for (int j = 0; j < TDSL_TC_BM * CH / TDSL_TC_THREADS; j++) {  // A: 128 dense rows x CH chunks
        const int q = tid + j * TDSL_TC_THREADS, r = q / CH, c = q % CH;
        const bool ok = n0 + r < N;
        const unsigned short *src = ok ? B + (long long)(n0 + r) * ldb + k0 + c * 8 : B;
        tdsl_cp16(a_st + r * 128 + (((s * CH + c) ^ (r & 7)) << 4), src, ok);
      }
      int pg[G];  // each block row's stored block at this column, or -1
#pragma unroll
      for (int g = 0; g < G; g++) pg[g] = (mk >> g) & 1u ? at[g]++ : -1;
#pragma unroll
      for (int j = 0; j < COLS * CH / TDSL_TC_THREADS; j++) {  // the blocks: slot g's R rows x CH chunks
        const int q = tid + j * TDSL_TC_THREADS, rr = q / CH, c = q % CH;
        const int p = tdsl_pick<G>(pg, rr / R);
        if (p >= 0)
          tdsl_cp16(b_st + rr * 128 + (((s * CH + c) ^ (rr & 7)) << 4), Av + (long long)p * (R * C) + (rr % R) * C + c * 8,
                    true);
      }
    }
  };

  float d[G][R / 2];
#pragma unroll
  for (int g = 0; g < G; g++)
#pragma unroll
    for (int i = 0; i < R / 2; i++) d[g][i] = 0.0f;
  tdsl_wg_pipeline<STAGES>(KT, load, [&](int stage, int kt) {
    unsigned mk[S];  // this stage's columns: which block rows store a block at each
#pragma unroll
    for (int s = 0; s < S; s++) mk[s] = kt * S + s < U ? list[kt * S + s] >> 16 : 0u;
    const unsigned st = base + stage * STAGE, a_st = st + wg * 64 * 128, b_st = st + A_BYTES;
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
      for (int g = 0; g < G; g++)
        tdsl_wgmma_if<IN, R>(d[g], tdsl_wg_desc(a_st + kk * 32), tdsl_wg_desc(b_st + g * R * 128 + kk * 32),
                             (mk[kk * S / 4] >> g) & 1u);
  });
  // Cᵀ: the template's row (dense) is the call's column.
  auto put_t = [&](int row, int col, float v) { put(col, row, v); };
#pragma unroll
  for (int g = 0; g < G; g++) tdsl_wg_epilogue<R>(d[g], put_t, N, M, n0 + wg * 64, (br0 + g) * R);
}
#endif

// 2:4 on the left: A is the compressed values (m, j) at Av[m * ldv + j], j < K / 2, with tdsl's
// metadata words (spec/formats.md: group g of a row at bits 4(g mod 8) of word g / 8, lower index
// first) at Am[m * ldmeta + k / 32]; a 16-column chunk of a row is one 16-bit half-word, which is
// the order mma.sp consumes (probe_mma.cu). K is a multiple of 64 (the mapping pass checks).
// BK = 64 of logical K; 3 stages in dynamic shared memory (TDSL_TC_SP24_SMEM bytes), each with
// A values 128 x 32 halves, B 64 x 128 halves and the 128 rows' two metadata words.
#define TDSL_TC_SP24_STAGES 3
#define TDSL_TC_SP24_SMEM (TDSL_TC_SP24_STAGES * (TDSL_TC_BM * 4 + TDSL_TC_BN * 8 + TDSL_TC_BM / 2) * 16)
template <int IN, bool B_KN, typename Put>
TDSL_FN void tdsl_tc_sp24(const unsigned short *__restrict__ Av, const int *__restrict__ Am,
                          const unsigned short *__restrict__ B, Put put, long long tile, int M, int N, int K,
                          long long ldv, long long ldmeta, long long ldb) {
  constexpr int BK = 64, STAGES = TDSL_TC_SP24_STAGES;
  TDSL_DYN_SMEM(tdsl_smem_dyn);
  uint4 *sA = tdsl_smem_dyn, *sB = sA + STAGES * TDSL_TC_BM * 4;
  uint2 *sE = reinterpret_cast<uint2 *>(sB + STAGES * TDSL_TC_BN * 8);  // [stage][row]: 2 words
  int m0, n0;
  tdsl_tc_tile<TDSL_TC_BN>(tile, M, N, m0, n0);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wm = warp >> 2, wn = warp & 3;
  const int KT = K / BK;

  auto load = [&](int stage, int kt) {
    const int k0 = kt * BK;
    uint4 *a_st = sA + stage * TDSL_TC_BM * 4, *b_st = sB + stage * TDSL_TC_BN * 8;
#pragma unroll
    for (int j = 0; j < 2; j++) {  // A values: 128 rows x 4 chunks
      const int q = tid + j * TDSL_TC_THREADS;
      const int r = q >> 2, c = q & 3;
      const bool ok = m0 + r < M;
      const unsigned short *src = ok ? Av + (long long)(m0 + r) * ldv + k0 / 2 + c * 8 : Av;
      tdsl_cp16(tdsl_smem(&a_st[r * 4 + (c ^ ((r >> 1) & 3))]), src, ok);
    }
    if (tid < TDSL_TC_BM) {  // metadata: words k0 / 32 and k0 / 32 + 1 of each row (8 bytes)
      const bool ok = m0 + tid < M;
      const int *src = ok ? Am + (long long)(m0 + tid) * ldmeta + k0 / 32 : Am;
      tdsl_cp8(tdsl_smem(&sE[stage * TDSL_TC_BM + tid]), src, ok);
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {  // B: 1024 chunks
      const int q = tid + j * TDSL_TC_THREADS;
      if (!B_KN) {
        const int r = q >> 3, c = q & 7;
        const bool ok = n0 + r < N;
        const unsigned short *src = ok ? B + (long long)(n0 + r) * ldb + k0 + c * 8 : B;
        tdsl_cp16(tdsl_smem(&b_st[r * 8 + (c ^ (r & 7))]), src, ok);
      } else {
        const int r = q >> 4, c = q & 15;
        const bool ok = n0 + c * 8 < N;
        const unsigned short *src = ok ? B + (long long)(k0 + r) * ldb + n0 + c * 8 : B;
        tdsl_cp16(tdsl_smem(&b_st[r * 16 + (c ^ (r & 7))]), src, ok);
      }
    }
  };

  float acc[4][4][4];
  tdsl_zero(acc);
  tdsl_cp_pipeline<STAGES>(KT, load, [&](int st) {
    const uint4 *a_st = sA + st * TDSL_TC_BM * 4, *b_st = sB + st * TDSL_TC_BN * 8;
    const uint2 *e_st = sE + st * TDSL_TC_BM;
#pragma unroll
    for (int s = 0; s < 2; s++) {  // two k32 steps
      unsigned a[4][4], b[4][4], e[4];
#pragma unroll
      for (int mi = 0; mi < 4; mi++) {
        const int r = wm * 64 + mi * 16 + (lane & 15), c = s * 2 + (lane >> 4);
        tdsl_ldm_x4(tdsl_smem(&a_st[r * 4 + (c ^ ((r >> 1) & 3))]), a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
        // Metadata: half-word (t mod 2) of this k32 chunk, rows g (low) and g + 8 (high); rows
        // past M (zero values) get a valid pattern.
        const int lr = wm * 64 + mi * 16 + g;
        const unsigned sh = 16 * (t & 1);
        const unsigned w0 = s == 0 ? e_st[lr].x : e_st[lr].y, w1 = s == 0 ? e_st[lr + 8].x : e_st[lr + 8].y;
        const unsigned lo = m0 + lr < M ? (w0 >> sh) & 0xffffu : 0x4444u;
        const unsigned hi = m0 + lr + 8 < M ? (w1 >> sh) & 0xffffu : 0x4444u;
        e[mi] = lo | (hi << 16);
      }
#pragma unroll
      for (int ni = 0; ni < 4; ni++) {
        if (!B_KN) {
          const int r = wn * 32 + ni * 8 + (lane & 7), c = s * 4 + (lane >> 3);
          tdsl_ldm_x4(tdsl_smem(&b_st[r * 8 + (c ^ (r & 7))]), b[ni][0], b[ni][1], b[ni][2], b[ni][3]);
        } else {
          const int r = s * 32 + lane, c = wn * 4 + ni;
          tdsl_ldm_x4_t(tdsl_smem(&b_st[r * 16 + (c ^ (r & 7))]), b[ni][0], b[ni][1], b[ni][2], b[ni][3]);
        }
      }
#pragma unroll
      for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) tdsl_mma_sp16832<IN>(acc[mi][ni], a[mi], b[ni], e[mi]);
    }
  });
  tdsl_tc_epilogue(acc, put, M, N, m0 + wm * 64, n0 + wn * 32);
}

// BSR on the left: A is stored in R x C blocks (values nnzb x R x C, each block row-major; block
// row i's blocks at ptr[i] .. ptr[i + 1], block column idx[p]; spec/formats.md). M is a multiple
// of R and K of C (the format's rule); R and C are 16, 32 or 64. A thread block computes one
// block row (R rows) by TDSL_TC_BSR_BN columns: warps side by side, each R x WN. It walks the
// stored blocks of its block row through a cp.async pipeline, one stored block per stage (A's
// R x C block and the C x BN strip of B it multiplies), and never touches a zero block. Warps
// are WN columns wide (32 or 64; BN / WN warps): 64 gives a warp 2 x as many mma per ldmatrix
// and per barrier at 2 x the accumulators; the mapping pass uses 32 (tensor.rs says why). Blocks
// take the block rows of one column strip first, so the strip of B they all read stays in L2.
// Shared memory rows of CH = C / 8 chunks are XOR-swizzled with period 8 / CH rows, so the 8 rows
// of an ldmatrix phase land on 8 distinct bank groups.
#define TDSL_TC_BSR_BN 256
#define TDSL_TC_BSR_STAGES 3
#define TDSL_TC_BSR_SMEM(R, C) (TDSL_TC_BSR_STAGES * ((R) + TDSL_TC_BSR_BN) * (C) * 2)
// The C x BN strip of B that a stored block at column k0 multiplies, into one stage (C / 8 chunks
// per row, swizzled as tdsl_warp_k16 reads it; n-contiguous B as BN / 8 chunks per k row),
// zero-filled past N; THREADS threads each copying their share.
template <bool B_KN, int C, int BN, int THREADS>
TDSL_FN void tdsl_bsr_strip(uint4 *b_st, const unsigned short *__restrict__ B, long long ldb, int k0, int n0, int N,
                            int tid) {
  constexpr int CH = C / 8, BCH = BN / 8;
#pragma unroll
  for (int j = 0; j < BN * CH / THREADS; j++) {
    const int q = tid + j * THREADS;
    if (!B_KN) {
      const int r = q / CH, c = q % CH;
      const bool ok = n0 + r < N;
      const unsigned short *src = ok ? B + (long long)(n0 + r) * ldb + k0 + c * 8 : B;
      tdsl_cp16(tdsl_smem(&b_st[tdsl_sw<CH>(r, c)]), src, ok);
    } else {
      const int r = q / BCH, c = q % BCH;
      const bool ok = n0 + c * 8 < N;
      const unsigned short *src = ok ? B + (long long)(k0 + r) * ldb + n0 + c * 8 : B;
      tdsl_cp16(tdsl_smem(&b_st[r * BCH + (c ^ (r & 7))]), src, ok);
    }
  }
}
template <int IN, bool B_KN, int R, int C, int WN, typename Put>
TDSL_FN void tdsl_tc_bsr(const unsigned short *__restrict__ Av, const int *__restrict__ ptr, const int *__restrict__ idx,
                         const unsigned short *__restrict__ B, Put put, long long tile, int M, int N, int K,
                         long long ldb) {
  constexpr int BN = TDSL_TC_BSR_BN, STAGES = TDSL_TC_BSR_STAGES, MI = R / 16, CH = C / 8, BCH = BN / 8;
  constexpr int NI = WN / 8, THREADS = 32 * BN / WN;
  static_assert(WN == 32 || WN == 64, "warps of 32 or 64 columns");
  static_assert(R % 16 == 0 && R <= 64 && C % 16 == 0 && C <= 64, "BSR blocks of 16, 32 or 64");
  TDSL_DYN_SMEM(tdsl_smem_dyn);
  uint4 *sA = tdsl_smem_dyn, *sB = sA + STAGES * R * CH;
  const int block_rows = M / R;
  const int br = (int)(tile % block_rows), n0 = (int)(tile / block_rows) * BN;
  const int tid = threadIdx.x, warp = tid >> 5;
  const int p0 = ptr[br], nb = ptr[br + 1] - p0;
  (void)K;

  auto load = [&](int stage, int i) {
    const long long p = p0 + i;
    const int k0 = idx[p] * C;
    const unsigned short *a = Av + p * (R * C);
    uint4 *a_st = sA + stage * R * CH, *b_st = sB + stage * BN * CH;
#pragma unroll
    for (int q0 = 0; q0 < R * CH; q0 += THREADS) {  // A: the stored block, R x CH chunks
      const int q = q0 + tid;
      if (q < R * CH) {
        const int r = q / CH, c = q % CH;
        tdsl_cp16(tdsl_smem(&a_st[tdsl_sw<CH>(r, c)]), a + r * C + c * 8, true);
      }
    }
    tdsl_bsr_strip<B_KN, C, BN, THREADS>(b_st, B, ldb, k0, n0, N, tid);
  };

  float acc[MI][NI][4];
  tdsl_zero(acc);
  tdsl_cp_pipeline<STAGES>(nb, load, [&](int st) {
    const uint4 *a_st = sA + st * R * CH, *b_st = sB + st * BN * CH;
#pragma unroll
    for (int kk = 0; kk < C / 16; kk++) tdsl_warp_k16<IN, B_KN, MI, NI, CH, BCH>(acc, a_st, b_st, kk, 0, warp * WN);
  });
  tdsl_tc_epilogue(acc, put, M, N, br * R, n0 + warp * WN);
}

// BSR over groups of block rows: a thread block computes G = 128 / R block rows by 128 columns
// and walks the sorted union of their block columns, so one strip of B (the C x 128 columns a
// stored block multiplies) serves every block row of the group that has a block there, where
// tdsl_tc_bsr loads it once per block row. A stage holds the strip and the group's blocks at
// that column (slot g for block row g; a block row without one skips the step). 8 warps:
// 8 / G per block row, each R x (16 G) (MI = R / 16, NI = 2 G: 64 accumulators per thread).
// The union is the group table the host builds per pattern (tdsl_bsr_group); the loads find
// each stored block with a cursor per block row, the products read only their row's bit.
#define TDSL_TC_BSRU_BN 128
#define TDSL_TC_BSRU_STAGES 4
#define TDSL_TC_BSRU_SMEM(C) (TDSL_TC_BSRU_STAGES * (TDSL_TC_BM + TDSL_TC_BSRU_BN) * (C) * 2)
template <int IN, bool B_KN, int R, int C, typename Put>
TDSL_FN void tdsl_tc_bsr_union(const unsigned short *__restrict__ Av, const int *__restrict__ ptr,
                               const int *__restrict__ tab,
                               const unsigned short *__restrict__ B, Put put, long long tile, int M, int N, int K,
                               long long ldb) {
  constexpr int G = TDSL_TC_BM / R, BN = TDSL_TC_BSRU_BN, STAGES = TDSL_TC_BSRU_STAGES;
  constexpr int MI = R / 16, NI = 2 * G, WN = 16 * G, CH = C / 8, BCH = BN / 8, ROW_WARPS = 8 / G;
  static_assert(R % 16 == 0 && R <= 64 && C % 16 == 0 && C <= 64, "BSR blocks of 16, 32 or 64");
  TDSL_DYN_SMEM(tdsl_smem_dyn);
  uint4 *sA = tdsl_smem_dyn, *sB = sA + STAGES * TDSL_TC_BM * CH;
  const int block_rows = M / R, groups = (block_rows + G - 1) / G;
  const int br0 = (int)(tile % groups) * G, n0 = (int)(tile / groups) * BN;
  const int tid = threadIdx.x, warp = tid >> 5, g_w = warp / ROW_WARPS;
  (void)K;
  int steps;
  const unsigned *list = tdsl_bsr_group(tab, groups, (int)(tile % groups), steps);
  int at[G];  // the loads' cursor into each block row's stored blocks
#pragma unroll
  for (int g = 0; g < G; g++) at[g] = ptr[br0 + g < block_rows ? br0 + g : block_rows];

  auto load = [&](int stage, int kt) {
    const unsigned e = list[kt];
    const int k0 = (int)(e & 0xffffu) * C;
    uint4 *a_st = sA + stage * TDSL_TC_BM * CH, *b_st = sB + stage * BN * CH;
#pragma unroll
    for (int g = 0; g < G; g++) {  // A: each present block into its slot, R x CH chunks
      if (!((e >> (16 + g)) & 1u)) continue;
      const unsigned short *a = Av + (long long)(at[g]++) * (R * C);
#pragma unroll
      for (int q0 = 0; q0 < R * CH; q0 += TDSL_TC_THREADS) {
        const int q = q0 + tid;
        if (q < R * CH) {
          const int r = q / CH, c = q % CH;
          tdsl_cp16(tdsl_smem(&a_st[g * R * CH + tdsl_sw<CH>(r, c)]), a + r * C + c * 8, true);
        }
      }
    }
    tdsl_bsr_strip<B_KN, C, BN, TDSL_TC_THREADS>(b_st, B, ldb, k0, n0, N, tid);
  };

  float acc[MI][NI][4];
  tdsl_zero(acc);
  int kt_behind = 0;
  tdsl_cp_pipeline<STAGES>(steps, load, [&](int st) {
    // This warp's block row has a block at this column.
    if (!((list[kt_behind++] >> (16 + g_w)) & 1u)) return;
    const uint4 *a_st = sA + st * TDSL_TC_BM * CH + g_w * R * CH, *b_st = sB + st * BN * CH;
#pragma unroll
    for (int kk = 0; kk < C / 16; kk++)
      tdsl_warp_k16<IN, B_KN, MI, NI, CH, BCH>(acc, a_st, b_st, kk, 0, (warp % ROW_WARPS) * WN);
  });
  if (br0 + g_w < block_rows) tdsl_tc_epilogue(acc, put, M, N, (br0 + g_w) * R, n0 + (warp % ROW_WARPS) * WN);
}

// f32 and f64 products without tensor cores, exact in their type as the interpreter computes
// them (TF32 would round the operands): the classic shared-memory SGEMM (DGEMM for T = double).
// Block tile 128 x 128, K in steps of 8,
// 256 threads as 16 x 16, each computing 8 x 8 outputs: rows 4 ty + {0..3} and 64 + 4 ty +
// {0..3}, columns likewise from tx, so the shared-memory reads of a step are two 16-byte
// vectors each for f32 (four for f64).
// The next step's 4 + 4 values per thread are loaded into registers while this one computes
// and stored into the other of two shared buffers after it. Any strides and extents (scalar
// loads, zero-filled past M, N and K); A k-contiguous, B k- or n-contiguous. Either operand
// of an f32 product may be f16 or bf16 (KA, KB: 0 as stored, 1 f16, 2 bf16), widened exactly
// as it is loaded: an f32 activation times a bf16 weight, as the CPU's mixed-precision GEMM
// computes it.
// DMMA (f64 only): the same tiles and loads, the products on the f64 tensor cores instead
// (mma.sync m8n8k4, sm_80 and later). Warp w computes rows 64 (w mod 2) + {0..63} and columns
// 32 (w / 2) + {0..31} as 8 x 4 tiles of 8 x 8, reading its fragments straight from shared
// memory, whose rows are padded by 4 doubles so that a half-warp's 16 reads (4 rows of K, 4
// consecutive elements each) fall in 32 distinct banks.
template <int KIND, typename T> TDSL_FN auto tdsl_ldf(const T *p) {
  if constexpr (KIND == 1) return tdsl_f16_to_f32(*p);
  else if constexpr (KIND == 2) return tdsl_bf16_to_f32(*p);
  else return *p;
}
// Four consecutive values of shared memory (16-byte aligned) into registers.
template <typename T> TDSL_FN void tdsl_ld4(const T *p, T *out) {
  if constexpr (sizeof(T) == 4) {
    const float4 v = *reinterpret_cast<const float4 *>(p);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
  } else {
    const double2 v0 = *reinterpret_cast<const double2 *>(p), v1 = *reinterpret_cast<const double2 *>(p + 2);
    out[0] = v0.x, out[1] = v0.y, out[2] = v1.x, out[3] = v1.y;
  }
}
template <int KA, int KB, bool B_KN, typename T, bool DMMA = false, typename TA, typename TB, typename Put>
TDSL_FN void tdsl_sgemm(const TA *__restrict__ A, const TB *__restrict__ B, Put put, long long tile, int M, int N,
                        int K, long long lda, long long ldb) {
  static_assert(!DMMA || sizeof(T) == 8, "DMMA multiplies f64");
  constexpr int ROW = DMMA ? 132 : 128;
  __shared__ __align__(16) T tdsl_sa[2][8][ROW], tdsl_sb[2][8][ROW];
  int m0, n0;
  tdsl_tc_tile<128>(tile, M, N, m0, n0);
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int KT = (K + 7) / 8;
  const T zero = 0;
  T ra[4], rb[4];
  // This thread's loads of step kt: A (m, k) with m = tid / 8 + 32 i, k = tid mod 8; B likewise
  // when k-contiguous, else k = tid / 32, n = tid mod 32 + 32 i (coalesced along n).
  auto fetch = [&](int kt) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int m = (tid >> 3) + 32 * i, k = kt * 8 + (tid & 7);
      ra[i] = m0 + m < M && k < K ? (T)tdsl_ldf<KA>(A + (long long)(m0 + m) * lda + k) : zero;
      if (!B_KN) {
        rb[i] = n0 + m < N && k < K ? (T)tdsl_ldf<KB>(B + (long long)(n0 + m) * ldb + k) : zero;
      } else {
        const int kb = kt * 8 + (tid >> 5), n = (tid & 31) + 32 * i;
        rb[i] = n0 + n < N && kb < K ? (T)tdsl_ldf<KB>(B + (long long)kb * ldb + n0 + n) : zero;
      }
    }
  };
  auto stash = [&](int buf) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      tdsl_sa[buf][tid & 7][(tid >> 3) + 32 * i] = ra[i];
      if (!B_KN) tdsl_sb[buf][tid & 7][(tid >> 3) + 32 * i] = rb[i];
      else tdsl_sb[buf][tid >> 5][(tid & 31) + 32 * i] = rb[i];
    }
  };
  T acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) acc[i][j] = zero;
  fetch(0);
  stash(0);
  __syncthreads();
  for (int kt = 0; kt < KT; kt++) {
    const int cur = kt & 1;
    if (kt + 1 < KT) fetch(kt + 1);
    if constexpr (DMMA) {
      const int lane = tid & 31, g = lane >> 2, q = lane & 3, wm = 64 * ((tid >> 5) & 1), wn = 32 * (tid >> 6);
#pragma unroll
      for (int k = 0; k < 8; k += 4) {
        T a[8], b[4];
#pragma unroll
        for (int i = 0; i < 8; i++) a[i] = tdsl_sa[cur][k + q][wm + 8 * i + g];
#pragma unroll
        for (int j = 0; j < 4; j++) b[j] = tdsl_sb[cur][k + q][wn + 8 * j + g];
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
          for (int j = 0; j < 4; j++) tdsl_dmma884(&acc[i][2 * j], a[i], b[j]);
      }
    } else
#pragma unroll
    for (int k = 0; k < 8; k++) {
      T a[8], b[8];
      tdsl_ld4(&tdsl_sa[cur][k][4 * ty], a);
      tdsl_ld4(&tdsl_sa[cur][k][64 + 4 * ty], a + 4);
      tdsl_ld4(&tdsl_sb[cur][k][4 * tx], b);
      tdsl_ld4(&tdsl_sb[cur][k][64 + 4 * tx], b + 4);
#pragma unroll
      for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] += a[i] * b[j];
    }
    if (kt + 1 < KT) stash(cur ^ 1);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) {
      // DMMA: acc[i][2 j'], acc[i][2 j' + 1] are this lane's two elements of tile (i, j').
      const int lane = tid & 31;
      const int m = m0 + (DMMA ? 64 * ((tid >> 5) & 1) + 8 * i + (lane >> 2) : i < 4 ? 4 * ty + i : 64 + 4 * ty + i - 4);
      const int n = n0 + (DMMA ? 32 * (tid >> 6) + 8 * (j >> 1) + 2 * (lane & 3) + (j & 1)
                               : j < 4 ? 4 * tx + j : 64 + 4 * tx + j - 4);
      if (m < M && n < N) put(m, n, acc[i][j]);
    }
}
