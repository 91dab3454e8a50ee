// latency: what the critical path of a small GEMM costs in graph mode, piece by piece.
//
// Each kernel runs 128 threads per CTA on one 64 × 64 fp16 tile (8 KiB) per operand per CTA,
// from buffers that stay in L2 (as the benchmark's small shapes do), and is timed as the
// service's graph mode times a candidate: a CUDA graph of back-to-back launches, device time
// per launch, median of the replays. The differences between rows are what each step adds
// to a launch: the launch alone, storing C, loading an operand with plain loads, cp.async or
// TMA, and storing C with a TMA store.
//
// build: nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -o latency latency.cu -lcuda
// usage: latency [GRID ...]          (CTAs per launch; default 1 16 64 132)
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                                              \
    do {                                                                                                   \
        cudaError_t e_ = (x);                                                                              \
        if (e_ != cudaSuccess) {                                                                           \
            fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
            exit(2);                                                                                       \
        }                                                                                                  \
    } while (0)

constexpr int TILE_BYTES = 64 * 64 * 2;
constexpr int CHUNKS = TILE_BYTES / 16 / 128;  // 16-byte chunks per thread per operand

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

__global__ void k_empty() {}

// C only: every thread stores its 64 bytes of the tile.
__global__ void k_store(uint4* C) {
    uint4* c = C + (size_t)blockIdx.x * (TILE_BYTES / 16);
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) c[threadIdx.x + 128 * i] = make_uint4(0, 0, 0, 0);
}

// Plain loads of both operands into registers, their sum stored (LOAD_ONLY: stored only where
// it is a NaN pair, which it never is: the loads alone).
template <int LOAD_ONLY>
__global__ void k_ldg(const uint4* A, const uint4* B, uint4* C) {
    const size_t t = (size_t)blockIdx.x * (TILE_BYTES / 16);
    uint4 a[CHUNKS], b[CHUNKS];
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) a[i] = A[t + threadIdx.x + 128 * i], b[i] = B[t + threadIdx.x + 128 * i];
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i)
        if (!LOAD_ONLY || (a[i].x ^ b[i].x) == 0x7fff7fffu)
            C[t + threadIdx.x + 128 * i] = make_uint4(a[i].x ^ b[i].x, a[i].y ^ b[i].y, a[i].z ^ b[i].z, a[i].w ^ b[i].w);
}

// cp.async of both operands into shared memory, then read back and stored.
__global__ void k_cpasync(const uint4* A, const uint4* B, uint4* C) {
    __shared__ __align__(128) uint4 sa[TILE_BYTES / 16], sb[TILE_BYTES / 16];
    const size_t t = (size_t)blockIdx.x * (TILE_BYTES / 16);
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {
        const int j = threadIdx.x + 128 * i;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(&sa[j])), "l"(A + t + j) : "memory");
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(&sb[j])), "l"(B + t + j) : "memory");
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
    __syncthreads();
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {
        const int j = threadIdx.x + 128 * i;
        const uint4 a = sa[(j + 37) % (TILE_BYTES / 16)], b = sb[j];  // another thread's chunk
        C[t + j] = make_uint4(a.x ^ b.x, a.y ^ b.y, a.z ^ b.z, a.w ^ b.w);
    }
}

// TMA loads of both operands (thread 0 sets up one mbarrier and issues both), every thread
// waits on the barrier, then stores from shared memory (STORE 0: plain stores; 1: the tile
// of A + B written back to shared memory and stored by one TMA store; 2: stored only where it
// is a NaN pair, which it never is: the loads alone). PREFETCH 1 prefetches
// both tensor maps first thing.
template <int PREFETCH, int STORE>
__global__ void k_tma(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                      const __grid_constant__ CUtensorMap tmC, uint4* C) {
    __shared__ __align__(1024) uint4 sa[TILE_BYTES / 16];
    __shared__ __align__(1024) uint4 sb[TILE_BYTES / 16];
    __shared__ __align__(8) uint64_t bar;
    const uint32_t b = smem_u32(&bar);
    const int row = blockIdx.x * 64;
    if (threadIdx.x == 0) {
        if (PREFETCH) {
            asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmA)) : "memory");
            asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmB)) : "memory");
        }
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(2 * TILE_BYTES) : "memory");
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
                smem_u32(sa)),
            "l"(reinterpret_cast<uint64_t>(&tmA)), "r"(0), "r"(row), "r"(b)
            : "memory");
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
                smem_u32(sb)),
            "l"(reinterpret_cast<uint64_t>(&tmB)), "r"(0), "r"(row), "r"(b)
            : "memory");
    }
    __syncthreads();
    mbar_wait(b, 0);
    const size_t t = (size_t)blockIdx.x * (TILE_BYTES / 16);
    if (STORE != 1) {
#pragma unroll
        for (int i = 0; i < CHUNKS; ++i) {
            const int j = threadIdx.x + 128 * i;
            const uint4 x = sa[j], y = sb[j];
            if (STORE == 0 || (x.x ^ y.x) == 0x7fff7fffu) C[t + j] = make_uint4(x.x ^ y.x, x.y ^ y.y, x.z ^ y.z, x.w ^ y.w);
        }
    } else {
#pragma unroll
        for (int i = 0; i < CHUNKS; ++i) {
            const int j = threadIdx.x + 128 * i;
            const uint4 x = sa[j], y = sb[j];
            sa[j] = make_uint4(x.x ^ y.x, x.y ^ y.y, x.z ^ y.z, x.w ^ y.w);
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        if (threadIdx.x == 0) {
            asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(
                             reinterpret_cast<uint64_t>(&tmC)),
                         "r"(0), "r"(row), "r"(smem_u32(sa))
                         : "memory");
            asm volatile("cp.async.bulk.commit_group;\ncp.async.bulk.wait_group.read 0;" ::: "memory");
        }
    }
}

static CUtensorMap encode(const void* base, unsigned long long rows) {
    CUtensorMap m;
    memset(&m, 0, sizeof m);
    cuuint64_t dims[2] = {64, rows};
    cuuint64_t strides[1] = {128};
    cuuint32_t box[2] = {64, 64};
    cuuint32_t es[2] = {1, 1};
    CUresult r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<void*>(base), dims, strides,
                                        box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled failed (%d)\n", (int)r);
        exit(2);
    }
    return m;
}

template <typename F>
static float time_graph(cudaStream_t st, F launch) {
    const int per = 50, rounds = 21;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < per; ++i) launch();
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, st));  // warm
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> t;
    for (int r = 0; r < rounds; ++r) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms * 1000.f / per);
    }
    CK(cudaGetLastError());
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int main(int argc, char** argv) {
    std::vector<int> grids;
    for (int i = 1; i < argc; ++i) grids.push_back(atoi(argv[i]));
    if (grids.empty()) grids = {1, 16, 64, 132};
    const int gmax = *std::max_element(grids.begin(), grids.end());
    const size_t bytes = (size_t)gmax * TILE_BYTES;
    uint4 *A, *B, *C;
    CK(cudaMalloc(&A, bytes));
    CK(cudaMalloc(&B, bytes));
    CK(cudaMalloc(&C, bytes));
    CK(cudaMemset(A, 1, bytes));
    CK(cudaMemset(B, 2, bytes));
    const CUtensorMap ta = encode(A, 64ull * gmax), tb = encode(B, 64ull * gmax), tc = encode(C, 64ull * gmax);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs; graph mode, 50 launches a graph, median of 21 replays, us per launch\n", prop.name,
           prop.multiProcessorCount);
    printf("%-34s", "kernel \\ CTAs");
    for (int g : grids) printf(" %8d", g);
    printf("\n");
    struct Row {
        const char* name;
        std::vector<float> us;
    };
    std::vector<Row> rows = {{"empty", {}},
                             {"store C", {}},
                             {"ld.global A, B", {}},
                             {"ld.global A, B; store C", {}},
                             {"cp.async A, B; store C", {}},
                             {"TMA A, B", {}},
                             {"TMA A, B; store C", {}},
                             {"prefetch, TMA A, B; store C", {}},
                             {"TMA A, B; TMA store C", {}}};
    for (int g : grids) {
        rows[0].us.push_back(time_graph(st, [&] { k_empty<<<g, 128, 0, st>>>(); }));
        rows[1].us.push_back(time_graph(st, [&] { k_store<<<g, 128, 0, st>>>(C); }));
        rows[2].us.push_back(time_graph(st, [&] { k_ldg<1><<<g, 128, 0, st>>>(A, B, C); }));
        rows[3].us.push_back(time_graph(st, [&] { k_ldg<0><<<g, 128, 0, st>>>(A, B, C); }));
        rows[4].us.push_back(time_graph(st, [&] { k_cpasync<<<g, 128, 0, st>>>(A, B, C); }));
        rows[5].us.push_back(time_graph(st, [&] { k_tma<0, 2><<<g, 128, 0, st>>>(ta, tb, tc, C); }));
        rows[6].us.push_back(time_graph(st, [&] { k_tma<0, 0><<<g, 128, 0, st>>>(ta, tb, tc, C); }));
        rows[7].us.push_back(time_graph(st, [&] { k_tma<1, 0><<<g, 128, 0, st>>>(ta, tb, tc, C); }));
        rows[8].us.push_back(time_graph(st, [&] { k_tma<0, 1><<<g, 128, 0, st>>>(ta, tb, tc, C); }));
    }
    for (const Row& r : rows) {
        printf("%-34s", r.name);
        for (float u : r.us) printf(" %8.3f", u);
        printf("\n");
    }
    return 0;
}
