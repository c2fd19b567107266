// Device ceilings for `tdsl bench --device cuda`: copy bandwidth and f32 FMA throughput,
// measured on the device the way src/machine.rs measures the CPU's (best of several runs).
struct alignas(16) tdsl_v4 { float x, y, z, w; };

extern "C" __global__ void tdsl_copy(const tdsl_v4* __restrict__ a, tdsl_v4* __restrict__ b, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    b[i] = a[i];
  }
}

// 8 independent FMA chains per thread: 16 FLOPs per iteration.
extern "C" __global__ void tdsl_fma(float* __restrict__ out, int iters) {
  float x0 = threadIdx.x * 1e-3f, x1 = x0 + 1.0f, x2 = x0 + 2.0f, x3 = x0 + 3.0f;
  float x4 = x0 + 4.0f, x5 = x0 + 5.0f, x6 = x0 + 6.0f, x7 = x0 + 7.0f;
  const float a = 0.999f, b = 1e-3f;
  for (int i = 0; i < iters; ++i) {
    x0 = fmaf(x0, a, b); x1 = fmaf(x1, a, b); x2 = fmaf(x2, a, b); x3 = fmaf(x3, a, b);
    x4 = fmaf(x4, a, b); x5 = fmaf(x5, a, b); x6 = fmaf(x6, a, b); x7 = fmaf(x7, a, b);
  }
  out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
}
