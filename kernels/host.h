// tdsl host prelude: the generated CUDA kernels compiled as C++ and run on the host, so tests on
// machines with no GPU execute exactly the text NVRTC compiles. Only what differs from the
// device lives here (thread indices, conversions, constants).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
struct tdsl_dim3 { long long x, y, z; };
static tdsl_dim3 blockIdx, threadIdx, blockDim, gridDim;
#define TDSL_FN static inline
#define TDSL_KERNEL static void
#define __restrict__ __restrict
#define TDSL_THREAD (blockIdx.x * blockDim.x + threadIdx.x)
#define TDSL_STRIDE (gridDim.x * blockDim.x)
#define TDSL_INF_F __builtin_inff()
#define TDSL_NAN_F __builtin_nanf("")
#define TDSL_INF_D __builtin_inf()
#define TDSL_NAN_D __builtin_nan("")

// Warps of 32 lanes and block rows of 256 threads, as on the device (cuda.cuh). Launches that
// share work between threads run every thread of a block as a fiber (threads_host.h, which
// defines the shuffles and barriers declared here); __shared__ arrays are statics, which the
// fibers of a block share.
#define TDSL_WARP 32
#define TDSL_LANE ((long long)(threadIdx.x & 31))
TDSL_FN float tdsl_shfl(float x, int off);
TDSL_FN double tdsl_shfl(double x, int off);
TDSL_FN void tdsl_syncwarp();
#define TDSL_ROW_THREADS 256
#define TDSL_ROW_WARPS 8
#define TDSL_ROW_THREAD ((long long)threadIdx.x)
// Column blocks: 32 grid iterations per block, 16 warps splitting their loops (map.rs,
// `Split::Cols`; 16 = map::COL_SLICES).
#define TDSL_COL_SLICES 16
#define __launch_bounds__(...)
#define __shared__ static
// Compiled with ThreadSanitizer (emulate.rs's race check), threads_host.h tells the race
// detector which of the emulated threads' accesses are ordered.
#if defined(__SANITIZE_THREAD__)
#define TDSL_EMU_RACES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TDSL_EMU_RACES 1
#endif
#endif
TDSL_FN void tdsl_syncblock();

// The order the emulation runs what the device runs at once (the blocks of a launch, the ready
// threads of a block): drawn from a pseudo-random sequence that TDSL_EMU_SEED picks (1 when
// unset; 0 keeps thread order). A result that depends on which thread goes first, as a missing
// barrier makes it, then differs from the interpreter's.
static unsigned long long tdsl_emu_state;
static int tdsl_emu_in_order() {
  static int seeded = 0;
  if (!seeded) {
    const char *s = getenv("TDSL_EMU_SEED");
    char *end = NULL;
    tdsl_emu_state = s ? strtoull(s, &end, 10) : 1;
    if (s && (end == s || *end)) tdsl_emu_state = 1;  // not a number: the default
    seeded = 1;
  }
  return tdsl_emu_state == 0;
}
// A draw below n (xorshift64*), or 0 in thread order.
static long long tdsl_emu_pick(long long n) {
  if (tdsl_emu_in_order() || n <= 1) return 0;
  unsigned long long x = tdsl_emu_state;
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  tdsl_emu_state = x;
  return (long long)((x * 0x2545F4914F6CDD1DULL >> 11) % (unsigned long long)n);
}
// 0 .. n - 1 shuffled (Fisher-Yates), or in order.
static void tdsl_emu_order(long long *order, long long n) {
  for (long long i = 0; i < n; i++) order[i] = i;
  for (long long i = n - 1; i > 0 && !tdsl_emu_in_order(); i--) {
    long long j = tdsl_emu_pick(i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}

TDSL_FN float tdsl_bits_f32(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
TDSL_FN unsigned int tdsl_f32_bits(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
TDSL_FN double tdsl_rint(double x) { return nearbyint(x); }
TDSL_FN float tdsl_rint(float x) { return nearbyintf(x); }
TDSL_FN float rsqrtf(float x) { return 1.0f / sqrtf(x); }
TDSL_FN double rsqrt(double x) { return 1.0 / sqrt(x); }

// IEEE binary16 in software, round to nearest even (the device uses one `cvt` instruction).
TDSL_FN float tdsl_f16_to_f32(unsigned short h) {
  unsigned int sign = (unsigned int)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return tdsl_bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    float m = (float)man * (1.0f / 16777216.0f);  // man · 2^-24
    return sign ? -m : m;
  }
  return tdsl_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}
TDSL_FN unsigned short tdsl_f64_to_f16(double d) {
  unsigned short sign = signbit(d) ? 0x8000u : 0u;
  double a = fabs(d);
  if (isnan(d)) return (unsigned short)(sign | 0x7e00u);
  if (a >= 65520.0) return (unsigned short)(sign | 0x7c00u);  // rounds to infinity
  if (a < 6.103515625e-05) {                                     // subnormal: units of 2^-24
    return (unsigned short)(sign | (unsigned short)nearbyint(a * 16777216.0));
  }
  int e;
  double m = frexp(a, &e);              // a = m · 2^e, m in [0.5, 1)
  double q = nearbyint(m * 2048.0);     // 11 significant bits, ties to even
  if (q == 2048.0) { q = 1024.0; e += 1; }
  unsigned int exp = (unsigned int)(e - 1 + 15), man = (unsigned int)q - 1024u;
  return (unsigned short)(sign | (exp << 10) | man);
}
TDSL_FN unsigned short tdsl_f32_to_f16(float f) { return tdsl_f64_to_f16((double)f); }
