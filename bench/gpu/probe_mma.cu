// Hardware probe for the tensor-core fragment layouts tdsl's kernels rely on (shared/GPU.md §2,
// spec/formats.md "What NVIDIA sparse tensor cores consume"). One warp, one instruction per
// case, small-integer data (exact in f16/bf16 and f32), compared with a CPU product.
//
//   nvcc -arch=sm_90 -o /tmp/probe_mma bench/gpu/probe_mma.cu && /tmp/probe_mma
//
// Cases: mma.sync m16n8k16 (f16, bf16) with fragments loaded per the PTX maps; ldmatrix x4 / x2 /
// x2.trans against those maps; mma.sp::ordered_metadata m16n8k32 (f16, bf16) with tdsl's 2:4
// metadata words (group g of a row at bits 4g, lower index first), every one of the six
// patterns, selector 0 (metadata in lanes t=0,1) and selector 1 (lanes t=2,3), under two
// hypotheses for which lane holds which half-word; mma.sync m16n8k8 tf32 with its fragments
// loaded by ldmatrix on f32 words, as the dense templates load them for `--tf32`; mma.sync
// m8n8k4 f64 (DMMA) with the PTX lane map tdsl's f64 template and emulation use (lane l: A[l/4][l%4],
// B[l%4][l/4], D[l/4][2(l%4) + i]), and whether its sums of products round once per product.
#include <cstdio>
#include <cstdint>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

static int aval(int m, int k) { return (m * 3 + k * 5) % 17 - 8; }
static int bval(int k, int n) { return (k * 7 + n * 2) % 13 - 6; }

template <typename T> __device__ __host__ uint16_t bits(T v) { return *reinterpret_cast<uint16_t *>(&v); }
__device__ uint32_t pack(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }

// A [16][16] row-major, B [16][8] row-major (K x N), as raw 16-bit words; D [16][8] f32.
template <bool BF>
__global__ void dense_mma(const uint16_t *A, const uint16_t *B, float *D, int *ldm_bad) {
    int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    uint32_t a[4], b[2];
    a[0] = pack(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]);
    a[1] = pack(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]);
    a[2] = pack(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]);
    a[3] = pack(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9]);
    b[0] = pack(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]);
    b[1] = pack(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g]);
    // ldmatrix from shared memory: A row-major, B^T [8][16], B row-major with .trans.
    __shared__ __align__(16) uint16_t sA[16][16], sBt[8][16], sB[16][8];
    for (int i = lane; i < 256; i += 32) sA[i / 16][i % 16] = A[i];
    for (int i = lane; i < 128; i += 32) { sBt[i / 16][i % 16] = B[(i % 16) * 8 + i / 16]; sB[i / 8][i % 8] = B[i]; }
    __syncwarp();
    uint32_t la[4], lb[2], lbt[2];
    unsigned pa = (unsigned)__cvta_generic_to_shared(&sA[lane % 16][(lane / 16) * 8]);
    unsigned pb = (unsigned)__cvta_generic_to_shared(&sBt[lane % 8][((lane / 8) % 2) * 8]);
    unsigned pbt = (unsigned)__cvta_generic_to_shared(&sB[lane % 16][0]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(la[0]), "=r"(la[1]), "=r"(la[2]), "=r"(la[3]) : "r"(pa));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(lb[0]), "=r"(lb[1]) : "r"(pb));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(lbt[0]), "=r"(lbt[1]) : "r"(pbt));
    int bad = 0;
    for (int i = 0; i < 4; i++) bad += la[i] != a[i];
    for (int i = 0; i < 2; i++) bad += (lb[i] != b[i]) + (lbt[i] != b[i]);
    atomicAdd(ldm_bad, bad);
    float d[4] = {0, 0, 0, 0};
    if (BF)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    for (int i = 0; i < 4; i++) D[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = d[i];
}

// Ac [16][16] compressed values, meta [16] one 32-bit word per row (K = 32: 8 groups), B [32][8].
// hyp 0: lane t holds half-word (t mod 2) of rows g and g+8 (low: row g); hyp 1: lane t=0 holds
// row g's word, t=1 row g+8's. sel: 0 uses lanes t=0,1; 1 uses lanes t=2,3 (same values).
template <bool BF>
__global__ void sparse_mma(const uint16_t *Ac, const uint32_t *meta, const uint16_t *B, float *D, int hyp, int sel) {
    int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    uint32_t a[4], b[4];
    a[0] = pack(Ac[g * 16 + 2 * t], Ac[g * 16 + 2 * t + 1]);
    a[1] = pack(Ac[(g + 8) * 16 + 2 * t], Ac[(g + 8) * 16 + 2 * t + 1]);
    a[2] = pack(Ac[g * 16 + 2 * t + 8], Ac[g * 16 + 2 * t + 9]);
    a[3] = pack(Ac[(g + 8) * 16 + 2 * t + 8], Ac[(g + 8) * 16 + 2 * t + 9]);
    for (int j = 0; j < 4; j++) {
        int k = 2 * t + 8 * j;
        b[j] = pack(B[k * 8 + g], B[(k + 1) * 8 + g]);
    }
    int tt = t % 2;
    uint32_t e;
    if (hyp == 0) {
        uint32_t lo = (meta[g] >> (16 * tt)) & 0xffff, hi = (meta[g + 8] >> (16 * tt)) & 0xffff;
        e = lo | (hi << 16);
    } else {
        e = tt == 0 ? meta[g] : meta[g + 8];
    }
    if ((t / 2) != sel) e = 0xdeadbeef;  // lanes the selector does not name must not matter
    float d[4] = {0, 0, 0, 0};
#define SP(TY, SEL)                                                                                              \
    asm volatile("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32." TY "." TY ".f32 "                  \
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, " #SEL ";"                    \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e))
    if (BF) { if (sel == 0) SP("bf16", 0); else SP("bf16", 1); }
    else { if (sel == 0) SP("f16", 0); else SP("f16", 1); }
    for (int i = 0; i < 4; i++) D[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = d[i];
}

static uint16_t h16(int v, bool bf) {
    if (bf) { __nv_bfloat16 x = __float2bfloat16((float)v); return bits(x); }
    __half x = __float2half((float)v);
    return bits(x);
}

// TF32: mma.sync m16n8k8 with A [16][8] and B^T [8 n][8 k] f32 in shared memory, the fragments
// loaded by ldmatrix x4 / x2 on the f32 words as pairs of halves, as tdsl's templates do (A reg
// r: row g + 8 (r mod 2), column t + 4 (r / 2); B reg j: k = t + 4j of column g), and checked
// against the PTX map. A second run (one A value 1 + 3 * 2^-12, not a tf32 number) reports
// whether the tensor cores truncate or round the low mantissa bits (the emulation truncates).
__global__ void tf32_mma(const float *A, const float *Bt, float *D, int *ldm_bad) {
    int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    __shared__ __align__(16) float sA[16][8], sBt[8][8];
    for (int i = lane; i < 128; i += 32) sA[i / 8][i % 8] = A[i];
    for (int i = lane; i < 64; i += 32) sBt[i / 8][i % 8] = Bt[i];
    __syncwarp();
    uint32_t a[4], b[2];
    unsigned pa = (unsigned)__cvta_generic_to_shared(&sA[(lane & 7) + ((lane >> 3) & 1) * 8][(lane >> 4) * 4]);
    unsigned pb = (unsigned)__cvta_generic_to_shared(&sBt[lane & 7][((lane >> 3) & 1) * 4]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(pa));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(b[0]), "=r"(b[1]) : "r"(pb));
    int bad = 0;
    for (int r = 0; r < 4; r++) bad += a[r] != __float_as_uint(sA[g + 8 * (r & 1)][t + 4 * (r >> 1)]);
    for (int j = 0; j < 2; j++) bad += b[j] != __float_as_uint(sBt[g][t + 4 * j]);
    atomicAdd(ldm_bad, bad);
    float d[4] = {0, 0, 0, 0};
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    for (int i = 0; i < 4; i++) D[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = d[i];
}

// DMMA: A [8][4], B [4][8] f64 row-major, D [8][8]; C = D on entry.
__global__ void f64_mma(const double *A, const double *B, double *D) {
    int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    double a = A[g * 4 + t], b = B[t * 8 + g], d[2] = {D[g * 8 + 2 * t], D[g * 8 + 2 * t + 1]};
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
                 : "+d"(d[0]), "+d"(d[1]) : "d"(a), "d"(b));
    D[g * 8 + 2 * t] = d[0];
    D[g * 8 + 2 * t + 1] = d[1];
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("cuda error %s at %d\n", cudaGetErrorString(e_), __LINE__); return 1; } } while (0)

template <bool BF> int dense_case(int &fails) {
    uint16_t A[256], B[128];
    for (int m = 0; m < 16; m++) for (int k = 0; k < 16; k++) A[m * 16 + k] = h16(aval(m, k), BF);
    for (int k = 0; k < 16; k++) for (int n = 0; n < 8; n++) B[k * 8 + n] = h16(bval(k, n), BF);
    uint16_t *dA, *dB; float *dD; int *dbad;
    CK(cudaMalloc(&dA, 512)); CK(cudaMalloc(&dB, 256)); CK(cudaMalloc(&dD, 512)); CK(cudaMalloc(&dbad, 4));
    CK(cudaMemcpy(dA, A, 512, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dB, B, 256, cudaMemcpyHostToDevice));
    CK(cudaMemset(dbad, 0, 4));
    dense_mma<BF><<<1, 32>>>(dA, dB, dD, dbad);
    CK(cudaDeviceSynchronize());
    float D[128]; int bad;
    CK(cudaMemcpy(D, dD, 512, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(&bad, dbad, 4, cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int m = 0; m < 16; m++) for (int n = 0; n < 8; n++) {
        int s = 0;
        for (int k = 0; k < 16; k++) s += aval(m, k) * bval(k, n);
        wrong += D[m * 8 + n] != (float)s;
    }
    printf("probe mma.sync m16n8k16 %s: %s (%d of 128 wrong)\n", BF ? "bf16" : "f16", wrong ? "MISMATCH" : "ok", wrong);
    printf("probe ldmatrix x4 / x2 / x2.trans %s: %s (%d registers differ from the PTX maps)\n", BF ? "bf16" : "f16", bad ? "MISMATCH" : "ok", bad);
    fails += (wrong != 0) + (bad != 0);
    cudaFree(dA); cudaFree(dB); cudaFree(dD); cudaFree(dbad);
    return 0;
}

template <bool BF> int sparse_case(int &fails) {
    static const int pats[6][2] = {{0, 1}, {0, 2}, {1, 2}, {0, 3}, {1, 3}, {2, 3}};
    int Adense[16][32] = {};
    uint16_t Ac[256];
    uint32_t meta[16];
    for (int r = 0; r < 16; r++) {
        meta[r] = 0;
        for (int gr = 0; gr < 8; gr++) {
            const int *p = pats[(r * 5 + gr * 3 + r / 8) % 6];  // rows g and g+8 differ
            for (int j = 0; j < 2; j++) {
                int v = (r * 7 + gr * 3 + j * 5) % 15 - 7;
                if (v == 0) v = 3;
                Adense[r][gr * 4 + p[j]] = v;
                Ac[r * 16 + gr * 2 + j] = h16(v, BF);
            }
            meta[r] |= (uint32_t)(p[0] | (p[1] << 2)) << (4 * gr);
        }
    }
    uint16_t B[256];
    for (int k = 0; k < 32; k++) for (int n = 0; n < 8; n++) B[k * 8 + n] = h16(bval(k, n), BF);
    uint16_t *dA, *dB; uint32_t *dM; float *dD;
    CK(cudaMalloc(&dA, 512)); CK(cudaMalloc(&dB, 512)); CK(cudaMalloc(&dM, 64)); CK(cudaMalloc(&dD, 512));
    CK(cudaMemcpy(dA, Ac, 512, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dB, B, 512, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dM, meta, 64, cudaMemcpyHostToDevice));
    for (int hyp = 0; hyp < 2; hyp++) for (int sel = 0; sel < 2; sel++) {
        CK(cudaMemset(dD, 0, 512));
        sparse_mma<BF><<<1, 32>>>(dA, dM, dB, dD, hyp, sel);
        CK(cudaDeviceSynchronize());
        float D[128];
        CK(cudaMemcpy(D, dD, 512, cudaMemcpyDeviceToHost));
        int wrong = 0;
        for (int m = 0; m < 16; m++) for (int n = 0; n < 8; n++) {
            int s = 0;
            for (int k = 0; k < 32; k++) s += Adense[m][k] * bval(k, n);
            wrong += D[m * 8 + n] != (float)s;
        }
        printf("probe mma.sp::ordered_metadata m16n8k32 %s, lanes hold %s, selector %d: %s (%d of 128 wrong)\n",
               BF ? "bf16" : "f16", hyp == 0 ? "half-word t%2 of rows g,g+8" : "row g (t%2=0) / row g+8 (t%2=1) words",
               sel, wrong ? "MISMATCH" : "ok", wrong);
        if (hyp == 0) fails += wrong != 0;
    }
    cudaFree(dA); cudaFree(dB); cudaFree(dM); cudaFree(dD);
    return 0;
}

int tf32_case(int &fails) {
    float A[128], Bt[64];
    for (int m = 0; m < 16; m++) for (int k = 0; k < 8; k++) A[m * 8 + k] = (float)aval(m, k);
    for (int n = 0; n < 8; n++) for (int k = 0; k < 8; k++) Bt[n * 8 + k] = (float)bval(k, n);
    float *dA, *dB, *dD; int *dbad;
    CK(cudaMalloc(&dA, 512)); CK(cudaMalloc(&dB, 256)); CK(cudaMalloc(&dD, 512)); CK(cudaMalloc(&dbad, 4));
    float D[128]; int bad = 0, wrong = 0;
    for (int probe = 0; probe < 2; probe++) {
        // probe 1: A[0][0] = 1 + 3 * 2^-12 (between tf32's 1 and 1 + 2^-10, nearer the latter).
        float a0 = A[0];
        if (probe) A[0] = 1.0f + 3.0f / 4096.0f;
        CK(cudaMemcpy(dA, A, 512, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dB, Bt, 256, cudaMemcpyHostToDevice));
        CK(cudaMemset(dbad, 0, 4));
        tf32_mma<<<1, 32>>>(dA, dB, dD, dbad);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(D, dD, 512, cudaMemcpyDeviceToHost));
        if (!probe) {
            CK(cudaMemcpy(&bad, dbad, 4, cudaMemcpyDeviceToHost));
            for (int m = 0; m < 16; m++) for (int n = 0; n < 8; n++) {
                int s = 0;
                for (int k = 0; k < 8; k++) s += aval(m, k) * bval(k, n);
                wrong += D[m * 8 + n] != (float)s;
            }
        } else {
            double rest = 0;
            for (int k = 1; k < 8; k++) rest += A[k] * Bt[k];
            double got = (D[0] - rest) / Bt[0];
            printf("probe tf32 operand 1 + 3 * 2^-12 read as %.9f (%s)\n", got,
                   got == 1.0 ? "truncated" : got == 1.0 + 1.0 / 1024 ? "rounded to nearest" : "kept beyond tf32");
        }
        A[0] = a0;
    }
    printf("probe mma.sync m16n8k8 tf32: %s (%d of 128 wrong)\n", wrong ? "MISMATCH" : "ok", wrong);
    printf("probe ldmatrix x4 / x2 on f32 words (tf32 fragments): %s (%d registers differ from the PTX map)\n", bad ? "MISMATCH" : "ok", bad);
    fails += (wrong != 0) + (bad != 0);
    cudaFree(dA); cudaFree(dB); cudaFree(dD); cudaFree(dbad);
    return 0;
}

int f64_case(int &fails) {
    double A[32], B[32], C[64], D[64];
    for (int m = 0; m < 8; m++) for (int k = 0; k < 4; k++) A[m * 4 + k] = aval(m, k);
    for (int k = 0; k < 4; k++) for (int n = 0; n < 8; n++) B[k * 8 + n] = bval(k, n);
    for (int i = 0; i < 64; i++) C[i] = i % 5 - 2;
    double *dA, *dB, *dD;
    CK(cudaMalloc(&dA, 256)); CK(cudaMalloc(&dB, 256)); CK(cudaMalloc(&dD, 512));
    CK(cudaMemcpy(dA, A, 256, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dB, B, 256, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dD, C, 512, cudaMemcpyHostToDevice));
    f64_mma<<<1, 32>>>(dA, dB, dD);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(D, dD, 512, cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int m = 0; m < 8; m++) for (int n = 0; n < 8; n++) {
        double s = C[m * 8 + n];
        for (int k = 0; k < 4; k++) s += A[m * 4 + k] * B[k * 8 + n];
        wrong += D[m * 8 + n] != s;
    }
    printf("probe mma.sync m8n8k4 f64: %s (%d of 64 wrong)\n", wrong ? "MISMATCH" : "ok", wrong);
    fails += wrong != 0;
    // Rounding: (1 + 2^-30)^2 - 1 = 2^-29 + 2^-60 exactly when the product is not rounded before
    // the sum (as fma computes it); 2^-29 when it is.
    for (int i = 0; i < 32; i++) A[i] = B[i] = 0;
    for (int i = 0; i < 64; i++) C[i] = 0;
    A[0] = 1.0 + 0x1p-30;
    B[0] = 1.0 + 0x1p-30;
    C[0] = -1.0;
    CK(cudaMemcpy(dA, A, 256, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dB, B, 256, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dD, C, 512, cudaMemcpyHostToDevice));
    f64_mma<<<1, 32>>>(dA, dB, dD);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(D, dD, 512, cudaMemcpyDeviceToHost));
    const double fused = 0x1p-29 + 0x1p-60, rounded = 0x1p-29;
    printf("probe m8n8k4 f64 (1 + 2^-30)^2 - 1 = %a (%s)\n", D[0],
           D[0] == fused ? "fused, as fma" : D[0] == rounded ? "product rounded first" : "neither");
    cudaFree(dA); cudaFree(dB); cudaFree(dD);
    return 0;
}

int main() {
    int fails = 0;
    if (dense_case<false>(fails) || dense_case<true>(fails) || sparse_case<false>(fails) || sparse_case<true>(fails) ||
        tf32_case(fails) || f64_case(fails)) return 1;
    printf("probe: %d failing case(s) among those tdsl relies on\n", fails);
    return fails != 0;
}
