// hopper-probe: standalone correctness + timing harness for kernels/templates/hopper_hgemm.cu.
//
// Built by run.sh with nvcc -arch=sm_90a -O3 and the template's -D macros (one binary per
// config × layout × acc). Launches the kernel the way the kaas launcher does: tensor maps
// encoded with cuTensorMapEncodeTiled (rank 2, FLOAT16, dims innermost first, OOB fill NONE,
// L2 promotion 128B, element strides {1,1}, 128B swizzle, the manifest's boxes), dynamic
// shared memory from the documented formula, the cluster as a launch attribute.
//
// usage: probe [--grid tiles|persistent|CTAS] [--mode check|bench|both] [--rounds R] MxNxK ...
// prints one RESULT line per shape.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../../kernels/templates/hopper_hgemm.cu"

#define STR_(x) #x
#define STR(x) STR_(x)

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
            exit(2);                                                                            \
        }                                                                                       \
    } while (0)
#define CB(x)                                                                    \
    do {                                                                         \
        cublasStatus_t s_ = (x);                                                 \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                       \
            fprintf(stderr, "cuBLAS error %d at %s:%d\n", (int)s_, __FILE__, __LINE__); \
            exit(2);                                                             \
        }                                                                        \
    } while (0)

static const bool TN = KAAS_LAYOUT_TN;
static const bool ACC32 = KAAS_ACC_F32;
// The template's configuration (Cfg), as the launches below take it.
static constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, CL = Cfg::CL, THREADS = Cfg::THREADS, SMEM_BYTES = Cfg::SMEM_BYTES;

// ─── device helpers ─────────────────────────────────────────────────────────────────────
__global__ void fill_random(__half* p, size_t n, unsigned long long seed, int binary, float density) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned long long x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
        float u = (x >> 40) * (1.0f / 16777216.0f);
        p[i] = __float2half(binary ? (u < density ? 1.0f : 0.0f) : (2.0f * u - 1.0f));
    }
}

// fp32 reference (64×64 block tile, 4×4 per thread), exact for integer inputs.
__global__ void ref_gemm(const __half* A, const __half* B, float* R, int M, int N, int K, int tn) {
    __shared__ float As[16][64 + 1], Bs[16][64 + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int i = threadIdx.x; i < 16 * 64; i += 256) {
            int kk = i % 16, r = i / 16;  // A: row r, k kk
            int m = m0 + r, k = k0 + kk;
            As[kk][r] = (m < M && k < K) ? __half2float(A[(size_t)m * K + k]) : 0.f;
            int c = i % 64, kb = i / 64;  // B: k kb, col c
            int n = n0 + c, k2 = k0 + kb;
            float bv = 0.f;
            if (n < N && k2 < K) bv = __half2float(tn ? B[(size_t)n * K + k2] : B[(size_t)k2 * N + n]);
            Bs[kb][c] = bv;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 16; ++kk) {
            float a[4], b[4];
            for (int i = 0; i < 4; ++i) a[i] = As[kk][ty * 4 + i], b[i] = Bs[kk][tx * 4 + i];
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
            int m = m0 + ty * 4 + i, n = n0 + tx * 4 + j;
            if (m < M && n < N) R[(size_t)m * N + n] = acc[i][j];
        }
}

struct Stats {
    unsigned int nonfinite, exact_mismatch, maxdev_bits;
};

__global__ void compare(const __half* C, const float* R, size_t n, Stats* st, int exact) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float c = __half2float(C[i]), r = R[i];
        if (!isfinite(c)) { atomicAdd(&st->nonfinite, 1u); continue; }
        if (exact && fabsf(r) < 2048.f && c != r) atomicAdd(&st->exact_mismatch, 1u);
        float d = fabsf(c - r);
        atomicMax(&st->maxdev_bits, __float_as_uint(d));
    }
}

__global__ void count_diff(const unsigned char* a, const unsigned char* b, size_t n, unsigned int* out) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (a[i] != b[i]) atomicAdd(out, 1u);
}

__global__ void count_not(const unsigned char* a, size_t n, unsigned char v, unsigned int* out) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (a[i] != v) atomicAdd(out, 1u);
}

// ─── tensor maps, exactly as src/gpu/launch.rs encodes them ─────────────────────────────
static CUtensorMap encode(const void* base, unsigned long long cols, unsigned long long rows, unsigned box0,
                          unsigned box1, CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
    CUtensorMap m;
    memset(&m, 0, sizeof m);
    cuuint64_t dims[2] = {cols, rows};
    cuuint64_t strides[1] = {cols * 2};
    cuuint32_t box[2] = {box0, box1};
    cuuint32_t es[2] = {1, 1};
    CUresult r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<void*>(base), dims, strides,
                                        box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled failed (%d): dims [%llu,%llu] box [%u,%u]\n", (int)r, cols, rows, box0,
                box1);
        exit(2);
    }
    return m;
}

struct Problem {
    int M, N, K;
};

static int g_sms = 132;

struct Launch {
    CUtensorMap ta, tb;
    unsigned grid, grid_y = 1, block, smem;
    __half* C;
    int M, N, K;
    void enqueue(cudaStream_t s) const {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(grid, grid_y, 1);
        cfg.blockDim = dim3(block, 1, 1);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = s;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = KAAS_CLUSTER_M;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = KAAS_CLUSTER_M > 1 ? 1 : 0;
        TensorMap128 a, b;
        memcpy(&a, &ta, 128);
        memcpy(&b, &tb, 128);
        CK(cudaLaunchKernelEx(&cfg, KAAS_ENTRY, a, b, reinterpret_cast<u16*>(C), M, N, K));
    }
};

static Launch make_launch(const __half* A, const __half* B, __half* C, Problem p, bool persistent, long fixed) {
    Launch l;
    l.ta = encode(A, p.K, p.M, 64, BM);
    if (TN) l.tb = encode(B, p.K, p.N, 64, BN / CL);
    // nn: 64 columns by the K-tile's rows; a narrow tile's BN columns, swizzled at its width.
    else if (BN >= 64) l.tb = encode(B, p.N, p.K, 64, BK / CL);
    else
        l.tb = encode(B, p.N, p.K, BN, BK / CL,
                      BN == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : BN == 16 ? CU_TENSOR_MAP_SWIZZLE_32B : CU_TENSOR_MAP_SWIZZLE_NONE);
    const long num_m = (p.M + BM - 1) / BM, num_n = (p.N + BN - 1) / BN;
    const long tiles = ((num_m + CL - 1) / CL) * CL * num_n;
    long g = tiles;
    if (persistent) g = std::min<long>(tiles, (g_sms / CL) * CL);
    if (fixed > 0) g = std::min<long>(tiles, fixed / CL * CL);
    l.grid = (unsigned)g;
#if KAAS_GRID2D
    // The 2-D grid: [tile columns, tile rows], one tile per CTA (the --grid choice is ignored).
    l.grid = (unsigned)num_n;
    l.grid_y = (unsigned)num_m;
#endif
    l.block = THREADS;
    l.smem = SMEM_BYTES;  // STAGES*(BM+BN)*BK*2 + 1024 + staging (see the template's header)
    l.C = C;
    l.M = p.M, l.N = p.N, l.K = p.K;
    return l;
}

static void cublas_gemm(cublasHandle_t h, const __half* A, const __half* B, __half* C, Problem p) {
    // Row-major C(M×N) = A·B  ⇔  column-major C^T(N×M) = op(B) · A^T.
    if (ACC32) {
        const float one = 1.f, zero = 0.f;
        CB(cublasGemmEx(h, TN ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, p.N, p.M, p.K, &one, B, CUDA_R_16F,
                        TN ? p.K : p.N, A, CUDA_R_16F, p.K, &zero, C, CUDA_R_16F, p.N, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT));
    } else {
        const __half one = __float2half(1.f), zero = __float2half(0.f);
        CB(cublasGemmEx(h, TN ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, p.N, p.M, p.K, &one, B, CUDA_R_16F,
                        TN ? p.K : p.N, A, CUDA_R_16F, p.K, &zero, C, CUDA_R_16F, p.N, CUBLAS_COMPUTE_16F,
                        CUBLAS_GEMM_DEFAULT));
    }
}

static void fill(__half* p, size_t n, unsigned long long seed, int binary, float density) {
    fill_random<<<1024, 256>>>(p, n, seed, binary, density);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
}

static Stats check_against(const __half* C, const float* R, size_t n, int exact) {
    Stats* d;
    CK(cudaMalloc(&d, sizeof(Stats)));
    CK(cudaMemset(d, 0, sizeof(Stats)));
    compare<<<1024, 256>>>(C, R, n, d, exact);
    Stats h;
    CK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
    CK(cudaFree(d));
    return h;
}

static unsigned diff_bytes(const void* a, const void* b, size_t n) {
    unsigned* d;
    CK(cudaMalloc(&d, 4));
    CK(cudaMemset(d, 0, 4));
    count_diff<<<1024, 256>>>((const unsigned char*)a, (const unsigned char*)b, n, d);
    unsigned h;
    CK(cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost));
    CK(cudaFree(d));
    return h;
}

static unsigned not_byte(const void* a, size_t n, unsigned char v) {
    unsigned* d;
    CK(cudaMalloc(&d, 4));
    CK(cudaMemset(d, 0, 4));
    count_not<<<1024, 256>>>((const unsigned char*)a, n, v, d);
    unsigned h;
    CK(cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost));
    CK(cudaFree(d));
    return h;
}

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.f : v[v.size() / 2];
}

int main(int argc, char** argv) {
    bool persistent = false;
    long fixed = 0;
    std::string mode = "both";
    int rounds = 15;
    std::vector<Problem> shapes;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--grid" && i + 1 < argc) {
            std::string gv = argv[++i];
            persistent = gv == "persistent";
            if (gv != "persistent" && gv != "tiles") fixed = atol(gv.c_str());  // a CTA count
        }
        else if (a == "--mode" && i + 1 < argc) mode = argv[++i];
        else if (a == "--rounds" && i + 1 < argc) rounds = atoi(argv[++i]);
        else {
            Problem p;
            if (sscanf(a.c_str(), "%dx%dx%d", &p.M, &p.N, &p.K) == 3) shapes.push_back(p);
            else { fprintf(stderr, "bad arg %s\n", a.c_str()); return 2; }
        }
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    g_sms = prop.multiProcessorCount;
    const char* entry = STR(KAAS_ENTRY);
    const unsigned smem = SMEM_BYTES;
    CK(cudaFuncSetAttribute(KAAS_ENTRY, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(1024 * KAAS_CLUSTER_M, 1, 1);
        cfg.blockDim = dim3(THREADS, 1, 1);
        cfg.dynamicSmemBytes = smem;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = KAAS_CLUSTER_M;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        int clusters = -1;
        cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, KAAS_ENTRY, &cfg);
        printf("INFO %s device=\"%s\" sms=%d smem=%u threads=%d max_active_clusters=%d (%s)\n", entry, prop.name,
               g_sms, smem, THREADS, clusters, cudaGetErrorString(e));
    }
    cublasHandle_t h;
    CB(cublasCreate(&h));
    void* ws;
    CK(cudaMalloc(&ws, 64 << 20));
    CB(cublasSetWorkspace(h, ws, 64 << 20));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));  // blocking: ordered with the legacy stream the fills and checks use
    CB(cublasSetStream(h, st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    for (Problem p : shapes) {
        if (p.K % 8 || (!TN && p.N % 8)) {
            printf("RESULT %s %s %s %dx%dx%d SKIP (tensor map needs 16-byte rows)\n", entry, TN ? "tn" : "nn",
                   ACC32 ? "f32" : "f16", p.M, p.N, p.K);
            continue;
        }
        const size_t nA = (size_t)p.M * p.K, nB = (size_t)p.K * p.N, nC = (size_t)p.M * p.N;
        const size_t guard = 1 << 20;  // bytes of canary on each side of C
        __half *A, *B, *A0, *B0, *Cref_h;
        unsigned char* Cbuf;
        float* R;
        CK(cudaMalloc(&A, nA * 2));
        CK(cudaMalloc(&B, nB * 2));
        CK(cudaMalloc(&A0, nA * 2));
        CK(cudaMalloc(&B0, nB * 2));
        CK(cudaMalloc(&Cbuf, nC * 2 + 2 * guard));
        CK(cudaMalloc(&Cref_h, nC * 2));
        CK(cudaMalloc(&R, nC * 4));
        __half* C = reinterpret_cast<__half*>(Cbuf + guard);
        Launch L = make_launch(A, B, C, p, persistent, fixed);
        const std::string glabel = fixed > 0 ? "g" + std::to_string(L.grid) : persistent ? "persistent" : "tiles";

        std::string verdict = "ok";
        char detail[512] = "";
        if (mode != "bench") {
            // 1. exact test on {0,1}
            float density = std::min(0.5f, sqrtf(1000.f / (float)p.K));
            fill(A, nA, 0x1234567ull + p.M, 1, density);
            fill(B, nB, 0x7654321ull + p.N, 1, density);
            CK(cudaMemcpy(A0, A, nA * 2, cudaMemcpyDeviceToDevice));
            CK(cudaMemcpy(B0, B, nB * 2, cudaMemcpyDeviceToDevice));
            ref_gemm<<<dim3((p.N + 63) / 64, (p.M + 63) / 64), 256>>>(A, B, R, p.M, p.N, p.K, TN);
            CK(cudaMemset(Cbuf, 0x5A, nC * 2 + 2 * guard));
            CK(cudaMemset(C, 0xFF, nC * 2));  // NaN poison
            CK(cudaDeviceSynchronize());
            L.enqueue(st);
            CK(cudaStreamSynchronize(st));
            CK(cudaGetLastError());
            Stats s1 = check_against(C, R, nC, 1);
            unsigned g1 = not_byte(Cbuf, guard, 0x5A) + not_byte(Cbuf + guard + nC * 2, guard, 0x5A);
            unsigned ab1 = diff_bytes(A, A0, nA * 2) + diff_bytes(B, B0, nB * 2);
            // 2. random inputs vs fp32 reference, bounded by cuBLAS's deviation
            fill(A, nA, 0xABCDEFull ^ (p.K * 131ull), 0, 0);
            fill(B, nB, 0xFEDCBAull ^ (p.M * 7ull), 0, 0);
            CK(cudaMemcpy(A0, A, nA * 2, cudaMemcpyDeviceToDevice));
            CK(cudaMemcpy(B0, B, nB * 2, cudaMemcpyDeviceToDevice));
            ref_gemm<<<dim3((p.N + 63) / 64, (p.M + 63) / 64), 256>>>(A, B, R, p.M, p.N, p.K, TN);
            CK(cudaMemset(C, 0xFF, nC * 2));
            CK(cudaDeviceSynchronize());
            L.enqueue(st);
            cublas_gemm(h, A, B, Cref_h, p);
            CK(cudaStreamSynchronize(st));
            CK(cudaGetLastError());
            Stats s2 = check_against(C, R, nC, 0);
            Stats sc = check_against(Cref_h, R, nC, 0);
            unsigned g2 = not_byte(Cbuf, guard, 0x5A) + not_byte(Cbuf + guard + nC * 2, guard, 0x5A);
            unsigned ab2 = diff_bytes(A, A0, nA * 2) + diff_bytes(B, B0, nB * 2);
            float dev, cdev;
            memcpy(&dev, &s2.maxdev_bits, 4);
            memcpy(&cdev, &sc.maxdev_bits, 4);
            bool ok = s1.nonfinite == 0 && s1.exact_mismatch == 0 && s2.nonfinite == 0 && g1 + g2 == 0 &&
                      ab1 + ab2 == 0 && dev <= cdev * 1.0001f + 1e-6f;
            verdict = ok ? "PASS" : "FAIL";
            snprintf(detail, sizeof detail,
                     "exact_mismatch=%u nonfinite=%u/%u dev=%.4g cublas_dev=%.4g guard=%u ab=%u", s1.exact_mismatch,
                     s1.nonfinite, s2.nonfinite, dev, cdev, g1 + g2, ab1 + ab2);
        }
        char timing[256] = "";
        if (mode != "check") {
            fill(A, nA, 99, 0, 0);
            fill(B, nB, 98, 0, 0);
            // warm-up and estimate
            for (int i = 0; i < 3; ++i) { L.enqueue(st); cublas_gemm(h, A, B, Cref_h, p); }
            CK(cudaStreamSynchronize(st));
            CK(cudaEventRecord(e0, st));
            for (int i = 0; i < 5; ++i) L.enqueue(st);
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            float est_us = ms * 1000.f / 5;
            int per = std::max(1, std::min(50, (int)(3000.f / std::max(est_us, 1.f))));
            cudaGraph_t g[2];
            cudaGraphExec_t ge[2];
            for (int c = 0; c < 2; ++c) {
                CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
                for (int i = 0; i < per; ++i) {
                    if (c == 0) L.enqueue(st);
                    else cublas_gemm(h, A, B, Cref_h, p);
                }
                CK(cudaStreamEndCapture(st, &g[c]));
                CK(cudaGraphInstantiate(&ge[c], g[c], 0));
                CK(cudaGraphLaunch(ge[c], st));  // warm
            }
            std::vector<float> t[2];
            for (int r = 0; r < rounds; ++r) {
                for (int cc = 0; cc < 2; ++cc) {
                    int c = (r & 1) ? 1 - cc : cc;  // alternate who goes first
                    CK(cudaEventRecord(e0, st));
                    CK(cudaGraphLaunch(ge[c], st));
                    CK(cudaEventRecord(e1, st));
                    CK(cudaEventSynchronize(e1));
                    CK(cudaEventElapsedTime(&ms, e0, e1));
                    t[c].push_back(ms * 1000.f / per);
                }
            }
            CK(cudaGetLastError());
            float us = median(t[0]), cus = median(t[1]);
            double flop = 2.0 * p.M * p.N * (double)p.K;
            snprintf(timing, sizeof timing, "us=%.2f cublas_us=%.2f tflops=%.1f cublas_tflops=%.1f speedup=%.3f n=%dx%d",
                     us, cus, flop / us * 1e-6, flop / cus * 1e-6, cus / us, rounds, per);
            for (int c = 0; c < 2; ++c) {
                cudaGraphExecDestroy(ge[c]);
                cudaGraphDestroy(g[c]);
            }
        }
        printf("RESULT %s %s %s %dx%dx%d grid=%u %s %s %s\n", entry, TN ? "tn" : "nn", ACC32 ? "f32" : "f16", p.M, p.N,
               p.K, L.grid, glabel.c_str(), verdict.c_str(), detail);
        if (timing[0]) printf("TIMING %s %s %s %dx%dx%d %s %s\n", entry, TN ? "tn" : "nn", ACC32 ? "f32" : "f16", p.M, p.N,
                              p.K, glabel.c_str(), timing);
        fflush(stdout);
        cudaFree(A); cudaFree(B); cudaFree(A0); cudaFree(B0); cudaFree(Cbuf); cudaFree(Cref_h); cudaFree(R);
    }
    return 0;
}
