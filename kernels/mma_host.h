// tdsl tensor-core primitives in the host emulation: the functions mma_device.cuh defines with
// PTX, written in software on threads_host.h's fibers, so the templates of mma.cuh run without a
// GPU. A warp- or warpgroup-wide instruction (ldmatrix, mma.sync, mma.sp, wgmma and its commit
// and wait) waits for every lane, then is performed on the gathered lanes.
//
// The lane maps are PTX's (shared/GPU.md §2), as bench/gpu/probe_mma.cu checked them on an H200
// (the f64 m8n8k4 one is PTX's too; its probe case has not yet run on a device);
// the wgmma operands are read through their descriptors with the 128-byte swizzle applied to
// the shared-memory address, as the hardware does. Asynchronous work is deferred to the last
// moment the program allows, so a kernel that reads too early sees stale data: a cp.async copy
// lands at the cp.async.wait_group that retires its group (or, with TDSL_EMU_COPIES=early, when
// issued, so a stage overwritten too soon shows instead), a wgmma at the wgmma.wait_group that
// retires its group. Shared memory starts every block filled with 0xff bytes (NaN in f16, bf16
// and f32), so reading what no copy wrote shows in the result. What no value shows is checked
// instead: a wgmma's operands are read at its issue as well as at its wait_group and must not
// differ, must have landed by the issue, and must have been fenced for the async proxy by the
// threads whose copies wrote them; each warpgroup thread must pass a wgmma.fence between
// waiting for wgmma groups and issuing the next wgmma.
#define __CUDA_ARCH_FEAT_SM90_ALL 1
struct uint4 { unsigned x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) double2 { double x, y; };
#define __align__(n) __attribute__((aligned(n)))
struct uint2 { unsigned x, y; };

#define TDSL_EMU_SMEM (256 * 1024)
alignas(1024) static unsigned char tdsl_emu_smem[TDSL_EMU_SMEM];
#define TDSL_DYN_SMEM(name) uint4 *name = reinterpret_cast<uint4 *>(tdsl_emu_smem)

// Warp and warpgroup instructions (threads_host.h numbers its own below TDSL_OP_TC).
enum {
  TDSL_OP_LDM = TDSL_OP_TC,
  TDSL_OP_LDM_T,
  TDSL_OP_MMA_F16,
  TDSL_OP_MMA_BF16,
  TDSL_OP_MMA_TF32,
  TDSL_OP_DMMA,
  TDSL_OP_SP_F16,
  TDSL_OP_SP_BF16,
  TDSL_OP_WGMMA,
  TDSL_OP_WGMMA_SP,
  TDSL_OP_WG_COMMIT,
  TDSL_OP_WG_WAIT,
};

struct tdsl_emu_copy {
  unsigned dst;
  const void *src;
  int bytes, size;
};
// A thread's cp.async copies: since the last commit, the committed groups, oldest first, and
// those landed since the thread's last fence.proxy.async. `wg_fenced`: a wgmma.fence since the
// thread last waited for wgmma groups (or since the kernel started).
struct tdsl_emu_copies {
  std::vector<tdsl_emu_copy> open;
  std::vector<std::vector<tdsl_emu_copy>> groups;
  std::vector<tdsl_emu_copy> unfenced;
  bool wg_fenced;
};
static std::vector<tdsl_emu_copies> tdsl_emu_thread_copies;
static tdsl_emu_copies &tdsl_emu_my_copies() { return tdsl_emu_thread_copies[tdsl_emu_self]; }

// What the tensor cores may read of shared memory. A cp.async writes through the generic
// proxy; wgmma reads its operands through the async proxy, at any moment between its issue and
// the wgmma.wait_group that retires it, and sees a write only after the writing thread's
// fence.proxy.async (and a barrier that orders the fence before the wgmma). Per 4 bytes of
// shared memory: 0 when the async proxy sees them; 1 + t when thread t's copy landed there
// and t has not fenced since; -(1 + t) while thread t's copy there is issued but not landed.
// This is the emulator's bookkeeping, not the kernel's accesses: the race check ignores it.
static std::vector<int> tdsl_emu_proxy;
#ifdef TDSL_EMU_RACES
#define TDSL_EMU_BOOKKEEPING(...) do { __tsan_ignore_thread_begin(); __VA_ARGS__; __tsan_ignore_thread_end(); } while (0)
#else
#define TDSL_EMU_BOOKKEEPING(...) do { __VA_ARGS__; } while (0)
#endif
// Sets the state of the 4-byte words copy `c` writes; with `only`, only those in state `only`.
static void tdsl_emu_proxy_mark(const tdsl_emu_copy &c, int state, int only = 0) {
  TDSL_EMU_BOOKKEEPING({
    for (unsigned a = c.dst / 4; a < (c.dst + c.bytes + 3) / 4; a++)
      if (!only || tdsl_emu_proxy[a] == only) tdsl_emu_proxy[a] = state;
  });
}
static void tdsl_emu_proxy_issued(const tdsl_emu_copy &c) { tdsl_emu_proxy_mark(c, -(tdsl_emu_self + 1)); }
static void tdsl_emu_proxy_landed(const tdsl_emu_copy &c) {
  tdsl_emu_proxy_mark(c, tdsl_emu_self + 1);
  TDSL_EMU_BOOKKEEPING(tdsl_emu_my_copies().unfenced.push_back(c));
}
static void tdsl_emu_proxy_fence() {
  tdsl_emu_copies &f = tdsl_emu_my_copies();
  for (const tdsl_emu_copy &c : f.unfenced) tdsl_emu_proxy_mark(c, 0, tdsl_emu_self + 1);
  TDSL_EMU_BOOKKEEPING(f.unfenced.clear());
}
// Stops the run if the async proxy cannot see shared byte `addr`, which a wgmma reads: as it is
// issued (`issue`), or as the wait_group that retires it is reached (then any copy there was
// issued while the wgmma was in flight).
static void tdsl_emu_proxy_check(unsigned addr, bool issue) {
  int t = 0;
  TDSL_EMU_BOOKKEEPING(t = tdsl_emu_proxy[addr / 4]);
  if (t == 0) return;
  char what[240];
  if (!issue)
    snprintf(what, sizeof what,
             "thread %d's cp.async to shared byte %u was issued while a wgmma that reads it was in "
             "flight (before the wgmma.wait_group that retires the wgmma)",
             t > 0 ? t - 1 : -t - 1, addr);
  else if (t > 0)
    snprintf(what, sizeof what,
             "a wgmma reads shared byte %u, which thread %d's cp.async wrote with no fence.proxy.async "
             "after it landed (the tensor cores' async proxy may not see it)",
             addr, t - 1);
  else
    snprintf(what, sizeof what,
             "a wgmma reads shared byte %u while thread %d's cp.async to it has not landed (no "
             "cp.async.wait_group retired it before the wgmma was issued)",
             addr, -t - 1);
  tdsl_emu_fail(what);
}
// One wgmma: its operands and the accumulators (and for wgmma.sp the metadata) of the
// warpgroup's 128 threads.
struct tdsl_emu_wgmma {
  unsigned long long da, db;
  int n, type;
  bool sparse;
  float *d[128];
  unsigned e[128];
  unsigned long long seen;  // a hash of the operands as they were when it was issued
};
struct tdsl_emu_wgroup {
  std::vector<tdsl_emu_wgmma> open;
  std::vector<std::vector<tdsl_emu_wgmma>> groups;
};

static std::vector<tdsl_emu_wgroup> tdsl_emu_wgroups;

static unsigned char *tdsl_emu_at(unsigned addr, unsigned bytes) {
  if (addr % bytes != 0 || addr + bytes > TDSL_EMU_SMEM) tdsl_emu_fail("a misaligned or out-of-range shared address");
  return tdsl_emu_smem + addr;
}
static float tdsl_emu_half(unsigned short h, int type) {
  return type ? tdsl_bf16_to_f32(h) : tdsl_f16_to_f32(h);
}
// An f32 as the tensor cores read it for a tf32 operand: the low 13 mantissa bits ignored.
static float tdsl_emu_tf32(unsigned r) {
  r &= 0xffffe000u;
  float f;
  memcpy(&f, &r, 4);
  return f;
}
static unsigned short tdsl_emu_lo(unsigned r) { return (unsigned short)(r & 0xffffu); }
static unsigned short tdsl_emu_hi(unsigned r) { return (unsigned short)(r >> 16); }

// ldmatrix .x4 (.trans): lanes 8j .. 8j + 7 give the rows of matrix j; lane l receives matrix j's
// row l / 4, halves 2 (l mod 4) and 2 (l mod 4) + 1 (transposed: column l / 4, rows 2 (l mod 4)
// and 2 (l mod 4) + 1).
static void tdsl_emu_ldmatrix(tdsl_emu_fiber *w, bool trans) {
  for (int l = 0; l < 32; l++) {
    const int g = l >> 2, t = l & 3;
    for (int j = 0; j < 4; j++) {
      if (!trans) {
        unsigned v;
        memcpy(&v, tdsl_emu_at(w[8 * j + g].in[0], 16) + 4 * t, 4);
        w[l].out[j] = v;
      } else {
        unsigned short lo, hi;
        memcpy(&lo, tdsl_emu_at(w[8 * j + 2 * t].in[0], 16) + 2 * g, 2);
        memcpy(&hi, tdsl_emu_at(w[8 * j + 2 * t + 1].in[0], 16) + 2 * g, 2);
        w[l].out[j] = (unsigned)lo | ((unsigned)hi << 16);
      }
    }
  }
}

// D[16][8] += A[16][K] B[K][8] for the warp's fragments, in f32 (products of 16-bit values are
// exact in f32; the sum runs in k order).
static void tdsl_emu_mma(tdsl_emu_fiber *w, int type, bool sparse) {
  float A[16][32], B[32][8];
  const int K = sparse ? 32 : 16;
  memset(A, 0, sizeof A);
  for (int l = 0; l < 32; l++) {
    const int g = l >> 2, t = l & 3;
    const unsigned *a = w[l].in, *b = w[l].in + 4;
    // A fragment (compressed 16 x 16 for mma.sp): reg 0 row g, reg 1 row g + 8, columns 2t, 2t + 1;
    // regs 2 and 3 likewise at columns 8 + 2t.
    for (int r = 0; r < 4; r++) {
      const int row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
      const float v0 = tdsl_emu_half(tdsl_emu_lo(a[r]), type), v1 = tdsl_emu_half(tdsl_emu_hi(a[r]), type);
      if (!sparse) {
        A[row][col] = v0;
        A[row][col + 1] = v1;
      } else {
        // Compressed columns 2q and 2q + 1 hold group q's two values; the metadata nibble of row
        // `row`, group q is in lane 4 (row mod 8) + q / 4, bits 4 (q mod 4) + 16 (row >= 8).
        const int q = col / 2;
        const unsigned e = w[4 * (row & 7) + q / 4].in[8];
        const unsigned nib = (e >> (4 * (q & 3) + 16 * (row >= 8))) & 0xfu;
        const unsigned i0 = nib & 3u, i1 = nib >> 2;
        if (i0 >= i1) tdsl_emu_fail("mma.sp metadata with indices that do not increase (ordered_metadata)");
        A[row][4 * q + i0] = v0;
        A[row][4 * q + i1] = v1;
      }
    }
    // B fragment: reg j holds k = 2t + 8j and 2t + 8j + 1 of column g.
    for (int j = 0; j < K / 8; j++) {
      B[2 * t + 8 * j][g] = tdsl_emu_half(tdsl_emu_lo(b[j]), type);
      B[2 * t + 8 * j + 1][g] = tdsl_emu_half(tdsl_emu_hi(b[j]), type);
    }
  }
  for (int l = 0; l < 32; l++) {
    const int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; i++) {
      const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
      float acc = w[l].d[i];
      for (int k = 0; k < K; k++) acc += A[row][k] * B[k][col];
      w[l].d[i] = acc;
    }
  }
}

// mma.sync m16n8k8 tf32: D[16][8] += A[16][8] B[8][8]. A reg r holds row g + 8 (r mod 2), column
// t + 4 (r / 2); B reg j holds k = t + 4j of column g (the same bytes per lane as m16n8k16's
// 16-bit fragments: one 32-bit word where those hold two halves).
static void tdsl_emu_mma_tf32(tdsl_emu_fiber *w) {
  float A[16][8], B[8][8];
  for (int l = 0; l < 32; l++) {
    const int g = l >> 2, t = l & 3;
    for (int r = 0; r < 4; r++) A[g + 8 * (r & 1)][t + 4 * (r >> 1)] = tdsl_emu_tf32(w[l].in[r]);
    for (int j = 0; j < 2; j++) B[t + 4 * j][g] = tdsl_emu_tf32(w[l].in[4 + j]);
  }
  for (int l = 0; l < 32; l++) {
    const int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; i++) {
      const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
      float acc = w[l].d[i];
      for (int k = 0; k < 8; k++) acc += A[row][k] * B[k][col];
      w[l].d[i] = acc;
    }
  }
}

// A k-major operand of `rows` x `cols` halves (16, or 32 for wgmma.sp's B) read through a wgmma
// descriptor: start address and stride byte offset (between 8-row atoms), 128-byte swizzle
// (chunk bits 4..6 of the address XORed with its row bits 7..9).
// Type 2 is tf32: `cols` 32-bit values per row.
static void tdsl_emu_desc_read(unsigned long long desc, int rows, int cols, int type, float *out, bool issue) {
  const unsigned start = (unsigned)(desc & 0x3fffu) << 4, sbo = (unsigned)((desc >> 32) & 0x3fffu) << 4;
  const unsigned size = type == 2 ? 4 : 2;
  if ((desc >> 62) != 1) tdsl_emu_fail("a wgmma descriptor without the 128-byte swizzle (not emulated)");
  if ((start & 127u) + size * cols > 128) tdsl_emu_fail("a wgmma operand row that crosses its 128-byte swizzle row");
  for (int r = 0; r < rows; r++)
    for (int k = 0; k < cols; k++) {
      unsigned addr = start + (r / 8) * sbo + (r % 8) * 128 + size * k;
      addr ^= ((addr >> 7) & 7u) << 4;
      tdsl_emu_proxy_check(addr, issue);
      if (type == 2) {
        unsigned v;
        memcpy(&v, tdsl_emu_at(addr, 4), 4);
        out[r * cols + k] = tdsl_emu_tf32(v);
      } else {
        unsigned short h;
        memcpy(&h, tdsl_emu_at(addr, 2), 2);
        out[r * cols + k] = tdsl_emu_half(h, type);
      }
    }
}
// D[64][n] += A[64][K] B[K][n] (K = 16; for wgmma.sp, 32 logical from A's 16 compressed columns
// and the metadata: the row 16w + g + 8h, group q nibble is in thread 32w + 4g + q / 4, bits
// 4 (q mod 4) + 16h, as mma.sp's per warp).
// Reads a wgmma's operands from shared memory (A, or for wgmma.sp the compressed Ac; and B) and
// returns a hash of what it read. The tensor cores may read them at any moment from the issue
// to the wait_group that retires the wgmma, so the emulation reads them at both and stops the
// run if they differ.
static unsigned long long tdsl_emu_wgmma_operands(const tdsl_emu_wgmma &op, float *A, float *B, bool issue) {
  const int K = op.sparse ? 32 : op.type == 2 ? 8 : 16;
  const int a_elems = 64 * (op.type == 2 ? 8 : 16);
  tdsl_emu_desc_read(op.da, 64, op.type == 2 ? 8 : 16, op.type, A, issue);
  tdsl_emu_desc_read(op.db, op.n, K, op.type, B, issue);
  unsigned long long h = 0xcbf29ce484222325ull;
  const auto mix = [&h](const float *v, int n) {
    for (int i = 0; i < n; i++) {
      unsigned u;
      memcpy(&u, &v[i], 4);
      h = (h ^ u) * 0x100000001b3ull;
    }
  };
  mix(A, a_elems);
  mix(B, op.n * K);
  return h;
}
static void tdsl_emu_wgmma_run(const tdsl_emu_wgmma &op) {
  // On the performing fiber's stack (two warpgroups' performers share no scratch).
  float Ac[64 * 16], A[64 * 32], B[256 * 32];
  // k16 of halves; k8 of tf32 (the same 32 bytes per row); k32 for wgmma.sp.
  const int K = op.sparse ? 32 : op.type == 2 ? 8 : 16;
  if (tdsl_emu_wgmma_operands(op, op.sparse ? Ac : A, B, false) != op.seen)
    tdsl_emu_fail("the shared memory a wgmma reads changed between its issue and the wgmma.wait_group that retired it");
  if (op.sparse) {
    memset(A, 0, sizeof A);
    for (int row = 0; row < 64; row++)
      for (int q = 0; q < 8; q++) {
        const int w = row / 16, g = row % 8, h = (row % 16) / 8;
        const unsigned nib = (op.e[32 * w + 4 * g + q / 4] >> (4 * (q % 4) + 16 * h)) & 0xfu;
        const unsigned i0 = nib & 3u, i1 = nib >> 2;
        if (i0 >= i1) tdsl_emu_fail("wgmma.sp metadata with indices that do not increase");
        A[row * 32 + 4 * q + i0] = Ac[row * 16 + 2 * q];
        A[row * 32 + 4 * q + i1] = Ac[row * 16 + 2 * q + 1];
      }
  }
  for (int tid = 0; tid < 128; tid++) {
    const int w = tid >> 5, lane = tid & 31;
    for (int j = 0; j < op.n / 8; j++)
      for (int i = 0; i < 4; i++) {
        const int row = 16 * w + (lane >> 2) + 8 * (i >> 1), col = 8 * j + 2 * (lane & 3) + (i & 1);
        float acc = op.d[tid][4 * j + i];
        for (int k = 0; k < K; k++) acc += A[row * K + k] * B[col * K + k];
        op.d[tid][4 * j + i] = acc;
      }
  }
}

// D[8][8] += A[8][4] B[4][8] in f64 (DMMA): lane l gave A[l / 4][l % 4] (in[0..1]),
// B[l % 4][l / 4] (in[2..3]) and D[l / 4][2 (l % 4) + {0, 1}] (in[4..7]), and takes the new D
// elements (out[0..3]). Each sum runs in k order, one fused multiply-add at a time.
static void tdsl_emu_dmma(tdsl_emu_fiber *w) {
  double A[8][4], B[4][8], D[8][8];
  for (int l = 0; l < 32; l++) {
    const int g = l >> 2, t = l & 3;
    memcpy(&A[g][t], w[l].in, 8);
    memcpy(&B[t][g], w[l].in + 2, 8);
    memcpy(&D[g][2 * t], w[l].in + 4, 16);
  }
  for (int l = 0; l < 32; l++) {
    const int g = l >> 2, t = l & 3;
    double d[2];
    for (int c = 0; c < 2; c++) {
      d[c] = D[g][2 * t + c];
      for (int k = 0; k < 4; k++) d[c] = fma(A[g][k], B[k][2 * t + c], d[c]);
    }
    memcpy(w[l].out, d, 16);
  }
}

// Performs the tensor-core instruction every lane of the group `w` (32 or 128 fibers) waits at.
static void tdsl_emu_tc_perform(tdsl_emu_fiber *w, int lanes, int group) {
  const int op = w[0].op;
  switch (op) {
    case TDSL_OP_LDM: tdsl_emu_ldmatrix(w, false); break;
    case TDSL_OP_LDM_T: tdsl_emu_ldmatrix(w, true); break;
    case TDSL_OP_MMA_F16: tdsl_emu_mma(w, 0, false); break;
    case TDSL_OP_MMA_BF16: tdsl_emu_mma(w, 1, false); break;
    case TDSL_OP_MMA_TF32: tdsl_emu_mma_tf32(w); break;
    case TDSL_OP_DMMA: tdsl_emu_dmma(w); break;
    case TDSL_OP_SP_F16: tdsl_emu_mma(w, 0, true); break;
    case TDSL_OP_SP_BF16: tdsl_emu_mma(w, 1, true); break;
    case TDSL_OP_WGMMA:
    case TDSL_OP_WGMMA_SP: {
      tdsl_emu_wgmma g{w[0].da, w[0].db, w[0].n, w[0].type, op == TDSL_OP_WGMMA_SP, {}, {}, 0};
      for (int l = 0; l < lanes; l++) {
        if (w[l].da != g.da || w[l].db != g.db) tdsl_emu_fail("wgmma descriptors that differ across the warpgroup");
        g.d[l] = w[l].d;
        g.e[l] = w[l].in[8];
      }
      {
        // On the performing fiber's stack, as tdsl_emu_wgmma_run's.
        float a[64 * 32], b[256 * 32];
        g.seen = tdsl_emu_wgmma_operands(g, a, b, true);
      }
      tdsl_emu_wgroups[group].open.push_back(g);
      break;
    }
    case TDSL_OP_WG_COMMIT: {
      tdsl_emu_wgroup &wg = tdsl_emu_wgroups[group];
      wg.groups.push_back(wg.open);
      wg.open.clear();
      break;
    }
    case TDSL_OP_WG_WAIT: {
      tdsl_emu_wgroup &wg = tdsl_emu_wgroups[group];
      while (wg.groups.size() > w[0].in[0]) {
        for (const tdsl_emu_wgmma &g : wg.groups.front()) tdsl_emu_wgmma_run(g);
        wg.groups.erase(wg.groups.begin());
      }
      break;
    }
    default: tdsl_emu_fail("an unknown warp instruction");
  }
}
static bool tdsl_emu_copies_early();
static void tdsl_emu_tc_block_start(int threads) {
  tdsl_emu_copies_early();  // read here, before any thread asks
  memset(tdsl_emu_smem, 0xff, sizeof tdsl_emu_smem);
  tdsl_emu_thread_copies.assign(threads, tdsl_emu_copies{});
  tdsl_emu_proxy.assign(TDSL_EMU_SMEM / 4, 0);
  tdsl_emu_wgroups.assign((threads + 127) / 128, tdsl_emu_wgroup{});
}
static void tdsl_emu_tc_block_end() {
  for (const tdsl_emu_copies &c : tdsl_emu_thread_copies)
    if (!c.groups.empty() || !c.open.empty()) tdsl_emu_fail("cp.async copies still pending at the end of the kernel");
  for (const tdsl_emu_wgroup &g : tdsl_emu_wgroups)
    if (!g.groups.empty() || !g.open.empty()) tdsl_emu_fail("wgmma still pending at the end of the kernel");
}
static const bool tdsl_emu_tc_hooked =
    (tdsl_emu_tc = {tdsl_emu_tc_perform, tdsl_emu_tc_block_start, tdsl_emu_tc_block_end}, true);

// The primitives of mma_device.cuh.
TDSL_FN unsigned tdsl_smem(const void *p) {
  const unsigned char *b = static_cast<const unsigned char *>(p);
  if (b < tdsl_emu_smem || b > tdsl_emu_smem + TDSL_EMU_SMEM) tdsl_emu_fail("a shared address outside shared memory");
  return (unsigned)(b - tdsl_emu_smem);
}
static void tdsl_emu_copy_now(const tdsl_emu_copy &c) {
  unsigned char *d = tdsl_emu_at(c.dst, c.bytes);
  memset(d, 0, c.bytes);
  if (c.size) memcpy(d, c.src, c.size);
  tdsl_emu_proxy_landed(c);
}
// TDSL_EMU_COPIES=early: every cp.async lands when issued (a stage overwritten while another warp
// still reads it shows); otherwise at the wait that retires its group (a read before the wait
// shows).
static bool tdsl_emu_copies_early() {
  static int early = -1;
  if (early < 0) {
    const char *v = getenv("TDSL_EMU_COPIES");
    early = v && strcmp(v, "early") == 0;
  }
  return early;
}
TDSL_FN void tdsl_cp_async(unsigned dst, const void *src, int bytes, bool ok) {
  const tdsl_emu_copy c{dst, src, bytes, ok ? bytes : 0};
  tdsl_emu_at(dst, bytes);
  if (tdsl_emu_copies_early()) {
    tdsl_emu_copy_now(c);
  } else {
    tdsl_emu_proxy_issued(c);
    tdsl_emu_my_copies().open.push_back(c);
  }
}
TDSL_FN void tdsl_cp16(unsigned dst, const void *src, bool ok) { tdsl_cp_async(dst, src, 16, ok); }
TDSL_FN void tdsl_cp8(unsigned dst, const void *src, bool ok) { tdsl_cp_async(dst, src, 8, ok); }
TDSL_FN void tdsl_cp_commit() {
  tdsl_emu_copies &f = tdsl_emu_my_copies();
  f.groups.push_back(f.open);
  f.open.clear();
}
template <int N> TDSL_FN void tdsl_cp_wait() {
  tdsl_emu_copies &f = tdsl_emu_my_copies();
  while (f.groups.size() > (size_t)N) {
    for (const tdsl_emu_copy &c : f.groups.front()) tdsl_emu_copy_now(c);
    f.groups.erase(f.groups.begin());
  }
}
TDSL_FN void tdsl_emu_ldm(int op, unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3) {
  tdsl_emu_me().in[0] = addr;
  tdsl_emu_wait(TDSL_EMU_WARP, op);
  const unsigned *o = tdsl_emu_me().out;
  r0 = o[0], r1 = o[1], r2 = o[2], r3 = o[3];
}
TDSL_FN void tdsl_ldm_x4(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3) {
  tdsl_emu_ldm(TDSL_OP_LDM, addr, r0, r1, r2, r3);
}
TDSL_FN void tdsl_ldm_x4_t(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3) {
  tdsl_emu_ldm(TDSL_OP_LDM_T, addr, r0, r1, r2, r3);
}
template <int IN> TDSL_FN void tdsl_mma16816(float *d, const unsigned *a, const unsigned *b) {
  tdsl_emu_fiber &f = tdsl_emu_me();
  memcpy(f.in, a, 16);
  memcpy(f.in + 4, b, 8);
  f.d = d;
  tdsl_emu_wait(TDSL_EMU_WARP, IN == 2 ? TDSL_OP_MMA_TF32 : IN == 1 ? TDSL_OP_MMA_BF16 : TDSL_OP_MMA_F16);
}
TDSL_FN void tdsl_dmma884(double *d, double a, double b) {
  tdsl_emu_fiber &f = tdsl_emu_me();
  memcpy(f.in, &a, 8);
  memcpy(f.in + 2, &b, 8);
  memcpy(f.in + 4, d, 16);
  tdsl_emu_wait(TDSL_EMU_WARP, TDSL_OP_DMMA);
  memcpy(d, tdsl_emu_me().out, 16);
}
template <int IN> TDSL_FN void tdsl_mma_sp16832(float *d, const unsigned *a, const unsigned *b, unsigned e) {
  tdsl_emu_fiber &f = tdsl_emu_me();
  memcpy(f.in, a, 16);
  memcpy(f.in + 4, b, 16);
  f.in[8] = e;
  f.d = d;
  tdsl_emu_wait(TDSL_EMU_WARP, IN == 1 ? TDSL_OP_SP_BF16 : TDSL_OP_SP_F16);
}
// PTX wants a wgmma.fence before a warpgroup's first wgmma and between a thread's accesses to
// the accumulators and the next wgmma; tdsl's templates fence before every step's wgmmas, after
// the wait that let the thread touch them, which is what this checks.
static void tdsl_emu_wg_fenced() {
  if (!tdsl_emu_my_copies().wg_fenced)
    tdsl_emu_fail("a wgmma with no wgmma.fence since the thread last waited for wgmma groups (or since the kernel started)");
}
template <int IN, int BN> TDSL_FN void tdsl_wgmma(float *d, unsigned long long da, unsigned long long db) {
  tdsl_emu_wg_fenced();
  tdsl_emu_fiber &f = tdsl_emu_me();
  f.da = da;
  f.db = db;
  f.n = BN;
  f.type = IN;
  f.d = d;
  tdsl_emu_wait(TDSL_EMU_WG, TDSL_OP_WGMMA);
}
// Guarded: every thread of the warpgroup passes the same `on` (a thread that disagreed would
// leave the others waiting, which the emulation reports as a deadlock).
template <int IN, int BN> TDSL_FN void tdsl_wgmma_if(float *d, unsigned long long da, unsigned long long db, bool on) {
  if (on) tdsl_wgmma<IN, BN>(d, da, db);
}
template <int IN> TDSL_FN void tdsl_wgmma_sp(float *d, unsigned long long da, unsigned long long db, unsigned e) {
  tdsl_emu_wg_fenced();
  tdsl_emu_fiber &f = tdsl_emu_me();
  f.da = da;
  f.db = db;
  f.n = 128;
  f.type = IN;
  f.d = d;
  f.in[8] = e;
  tdsl_emu_wait(TDSL_EMU_WG, TDSL_OP_WGMMA_SP);
}
TDSL_FN void tdsl_wg_fence() { tdsl_emu_my_copies().wg_fenced = true; }
TDSL_FN void tdsl_wg_commit() { tdsl_emu_wait(TDSL_EMU_WG, TDSL_OP_WG_COMMIT); }
template <int N> TDSL_FN void tdsl_wg_wait() {
  tdsl_emu_my_copies().wg_fenced = false;
  tdsl_emu_me().in[0] = N;
  tdsl_emu_wait(TDSL_EMU_WG, TDSL_OP_WG_WAIT);
}
TDSL_FN void tdsl_fence_async_smem() { tdsl_emu_proxy_fence(); }

