// tdsl CUDA prelude: what the generated kernels need from the device, without any CUDA header
// (NVRTC needs no include path on a user's machine). f16 conversions are single PTX `cvt`
// instructions; bf16 is the upper half of an f32, rounded to nearest even in integer code.
#define TDSL_FN static __device__ __forceinline__
#define TDSL_KERNEL extern "C" __global__ void
#define TDSL_THREAD ((long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x)
#define TDSL_STRIDE ((long long)gridDim.x * (long long)blockDim.x)
#define TDSL_INF_F __int_as_float(0x7f800000)
#define TDSL_NAN_F __int_as_float(0x7fc00000)
#define TDSL_INF_D __longlong_as_double(0x7ff0000000000000LL)
#define TDSL_NAN_D __longlong_as_double(0x7ff8000000000000LL)

TDSL_FN float tdsl_f16_to_f32(unsigned short h) {
  float f;
  asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
  return f;
}
TDSL_FN unsigned short tdsl_f32_to_f16(float f) {
  unsigned short h;
  asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));
  return h;
}
TDSL_FN unsigned short tdsl_f64_to_f16(double d) {
  unsigned short h;
  asm("{ cvt.rn.f16.f64 %0, %1; }" : "=h"(h) : "d"(d));
  return h;
}
TDSL_FN float tdsl_bits_f32(unsigned int u) { return __uint_as_float(u); }
TDSL_FN unsigned int tdsl_f32_bits(float f) { return __float_as_uint(f); }
TDSL_FN double tdsl_rint(double x) { return rint(x); }
TDSL_FN float tdsl_rint(float x) { return rintf(x); }

// Warps: one warp per grid iteration for row-shaped work (softmax, norms, reductions).
#define TDSL_WARP 32
#define TDSL_LANE ((long long)(threadIdx.x & 31u))
TDSL_FN float tdsl_shfl(float x, int off) { return __shfl_xor_sync(0xffffffffu, x, off); }
TDSL_FN double tdsl_shfl(double x, int off) { return __shfl_xor_sync(0xffffffffu, x, off); }
TDSL_FN void tdsl_syncwarp() { __syncwarp(); }

// Blocks: one block per grid iteration for long rows (map.rs, `Split::Block`; 256 = map::BLOCK).
#define TDSL_ROW_THREADS 256
#define TDSL_ROW_WARPS 8
#define TDSL_ROW_THREAD ((long long)threadIdx.x)
// Column blocks: 32 grid iterations per block, 16 warps splitting their loops (map.rs,
// `Split::Cols`; 16 = map::COL_SLICES).
#define TDSL_COL_SLICES 16
TDSL_FN void tdsl_syncblock() { __syncthreads(); }
