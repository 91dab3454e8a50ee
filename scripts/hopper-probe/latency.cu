// latency: what the critical path of a small GEMM costs in graph mode, piece by piece.
//
// Each kernel runs 128 threads per CTA on one 64 × 64 fp16 tile (8 KiB) per operand per CTA,
// from buffers that stay in L2 (as the benchmark's small shapes do), and is timed as the
// service's graph mode times a candidate: a CUDA graph of back-to-back launches, device time
// per launch, median of the replays. The differences between rows are what each step adds
// to a launch: the launch alone, storing C, loading an operand with plain loads, cp.async or
// TMA, and storing C with a TMA store; then a whole 64×64×64 tile as the template's small
// codes compute it (TMA, four wgmmas, C staged), with one warpgroup or with a producer
// warpgroup, and the latter with the template's other pieces one at a time (k_pieces: the
// tile order's divisions, the empty-barrier wait, dynamic shared memory; 2026-11-27).
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

// Thread 0's loads: A's and B's 64-row tiles at `row` into a and b, both on barrier bar.
__device__ __forceinline__ void load_ab(uint32_t a, uint32_t b, const CUtensorMap* tmA, const CUtensorMap* tmB, int row,
                                        uint32_t bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(2 * TILE_BYTES) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(a),
        "l"(reinterpret_cast<uint64_t>(tmA)), "r"(0), "r"(row), "r"(bar)
        : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(b),
        "l"(reinterpret_cast<uint64_t>(tmB)), "r"(0), "r"(row), "r"(bar)
        : "memory");
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
        load_ab(smem_u32(sa), smem_u32(sb), &tmA, &tmB, row, b);
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

// One 64×64 tile of C = A·Bᵀ with K = 64 as the template's small codes compute it: TMA loads
// of A and B (each 64 rows × 64 K, 128B swizzle), four wgmma m64n64k16 (fp32), then C
// staged through shared memory by each warp and written with 16-byte stores (STORE 1: not
// stored unless an accumulator is a sentinel it never is: no epilogue). WS 1: 256 threads,
// the template's layout: warpgroup 0's thread 0 issues the loads after the CTA's barrier
// set-up, warpgroup 1 multiplies; WS 0: 128 threads, thread 0 issues the loads before the
// CTA barrier and then multiplies with the rest of its warpgroup.
__device__ __forceinline__ uint64_t desc128(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
// Once barrier bar has the operands: the tile's four k16 steps (A and B K-major, 128B
// swizzle, at a and b) into d from zero, waited for.
__device__ __forceinline__ void tile_mma(uint32_t bar, uint32_t a, uint32_t b, float (&d)[32]) {
#pragma unroll
    for (int i = 0; i < 32; ++i) d[i] = 0.f;
    mbar_wait(bar, 0);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        const uint64_t da = desc128(a + kk * 32), db = desc128(b + kk * 32);
        asm volatile(
            "{\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 1, 1, 1, 0, 0;\n"
            "}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
              "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
              "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
              "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "l"(da), "l"(db));
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
// A warp's 16 rows of the 64×64 tile through its padded staging rows w, then 16-byte stores.
__device__ __forceinline__ void store_staged(const float (&d)[32], uint16_t* c, uint16_t* w, int warp, int lane) {
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        __half2 v0 = __floats2half2_rn(d[4 * j], d[4 * j + 1]), v1 = __floats2half2_rn(d[4 * j + 2], d[4 * j + 3]);
        *reinterpret_cast<__half2*>(w + g * 72 + j * 8 + 2 * q) = v0;
        *reinterpret_cast<__half2*>(w + (g + 8) * 72 + j * 8 + 2 * q) = v1;
    }
    __syncwarp();
#pragma unroll
    for (int it = 0; it < 4; ++it) {
        const int r = it * 4 + (lane >> 3), c8 = (lane & 7) * 8;
        *reinterpret_cast<uint4*>(c + (warp * 16 + r) * 64 + c8) = *reinterpret_cast<const uint4*>(w + r * 72 + c8);
    }
}
template <int WS, int STORE>
__global__ void k_wgmma(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB, uint16_t* C) {
    __shared__ __align__(1024) uint4 sa[TILE_BYTES / 16];
    __shared__ __align__(1024) uint4 sb[TILE_BYTES / 16];
    __shared__ __align__(16) uint16_t stg[4][16 * 72];
    __shared__ __align__(8) uint64_t bar;
    const uint32_t b = smem_u32(&bar);
    const int row = blockIdx.x * 64;
    auto issue = [&] {
        load_ab(smem_u32(sa), smem_u32(sb), &tmA, &tmB, row, b);
    };
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        if (!WS) issue();
    }
    __syncthreads();
    if (WS && threadIdx.x < 128) {
        if (threadIdx.x == 0) issue();
        return;
    }
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    float d[32];
    tile_mma(b, smem_u32(sa), smem_u32(sb), d);
    uint16_t* c = C + (size_t)row * 64;
    if (STORE == 1) {
        if (d[0] == 12345.f) c[tid] = 1;
        return;
    }
    store_staged(d, c, stg[warp], warp, lane);
}

// k_wgmma<1, 0> (producer warpgroup, staged C) with the template's other pieces, one at a
// time (bits of PIECES): 1, the grouped tile order's two divisions (group height 16) by
// runtime tile counts in both warpgroups before their first barrier wait, the loads' row
// taken from it; 2, the producer first waits on an empty barrier (a fresh one, parity 1,
// as the ring's first pass does); 4, the operands in 80 KiB of dynamic shared memory,
// aligned to 1024 at run time; 8, the divisions in the producer only; 16, in the consumers
// only; 32, both through the fp32 quotient and one correction (fdiv); 64, the producer
// reads a kernel parameter (adds 0 from it to the row); 128, the producer divides by 16.
__device__ __forceinline__ void coords16(int t, int num_m, int num_n, int& m, int& n) {
    const int per_group = 16 * num_n, group = t / per_group, first = group * 16;
    const int h = min(16, num_m - first), r = t - group * per_group;
    m = first + r % h;
    n = r / h;
}
// a / b for 0 <= a < 2^22, 1 <= b < 2^22: the fp32 quotient, then one correction.
__device__ __forceinline__ int fdiv(int a, int b) {
    int q = __float2int_rz(__fdividef((float)a, (float)b));
    const int r = a - q * b;
    q += (r >= b) - (r < 0);
    return q;
}
__device__ __forceinline__ void coords16_fast(int t, int num_m, int num_n, int& m, int& n) {
    const int per_group = 16 * num_n, group = fdiv(t, per_group), first = group * 16;
    const int h = min(16, num_m - first), r = t - group * per_group;
    n = fdiv(r, h);
    m = first + r - n * h;
}
template <int PIECES>
__global__ void __launch_bounds__(256, 1) k_pieces(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                                                   uint16_t* C, int num_m, int num_n) {
    __shared__ __align__(1024) uint4 sa_s[(PIECES & 4) ? 1 : TILE_BYTES / 16];
    __shared__ __align__(1024) uint4 sb_s[(PIECES & 4) ? 1 : TILE_BYTES / 16];
    extern __shared__ __align__(16) unsigned char dyn[];
    __shared__ __align__(16) uint16_t stg[4][16 * 72];
    __shared__ __align__(8) uint64_t bar, ebar;
    uint32_t a_addr = smem_u32(sa_s), b_addr = smem_u32(sb_s);
    if (PIECES & 4) {
        a_addr = (smem_u32(dyn) + 1023u) & ~1023u;
        b_addr = a_addr + 4 * TILE_BYTES;
    }
    const uint32_t b = smem_u32(&bar), eb = smem_u32(&ebar);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 4;" ::"r"(eb) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    int tm = blockIdx.x, tn = 0;
    const bool producer = threadIdx.x < 128;
    if ((PIECES & 1) || ((PIECES & 8) && producer) || ((PIECES & 16) && !producer)) coords16(blockIdx.x, num_m, num_n, tm, tn);
    if (PIECES & 32) coords16_fast(blockIdx.x, num_m, num_n, tm, tn);
    if ((PIECES & 64) && producer) tm += num_m >> 31;  // a kernel parameter read, no arithmetic
    if ((PIECES & 128) && producer) tm = (tm / 16) * 16 + tm % 16;  // constant divisors only
    const int row = tm * 64 + tn;
    if (threadIdx.x < 128) {
        if (threadIdx.x == 0) {
            if (PIECES & 2) mbar_wait(eb, 1);
            load_ab(a_addr, b_addr, &tmA, &tmB, row, b);
        }
        return;
    }
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    float d[32];
    tile_mma(b, a_addr, b_addr, d);
    if ((PIECES & 2) && lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(eb) : "memory");
    uint16_t* c = C + (size_t)row * 64;
    store_staged(d, c, stg[warp], warp, lane);
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
                             {"TMA A, B; TMA store C", {}},
                             {"TMA, 4 wgmma (128 thr); no C", {}},
                             {"TMA, 4 wgmma (128 thr); staged C", {}},
                             {"TMA, 4 wgmma (producer WG); no C", {}},
                             {"TMA, 4 wgmma (producer WG); staged C", {}},
                             {"  the same, k_pieces<0>", {}},
                             {"  + tile-order divisions", {}},
                             {"  + empty-barrier wait", {}},
                             {"  + 80 KiB dynamic smem", {}},
                             {"  + all three", {}},
                             {"  + divisions, producer only", {}},
                             {"  + divisions, consumer only", {}},
                             {"  + fp32-quotient divisions, both", {}},
                             {"  + a parameter read (producer)", {}},
                             {"  + divisions by 16 (producer)", {}}};
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
        uint16_t* c16 = reinterpret_cast<uint16_t*>(C);
        rows[9].us.push_back(time_graph(st, [&] { k_wgmma<0, 1><<<g, 128, 0, st>>>(ta, tb, c16); }));
        rows[10].us.push_back(time_graph(st, [&] { k_wgmma<0, 0><<<g, 128, 0, st>>>(ta, tb, c16); }));
        rows[11].us.push_back(time_graph(st, [&] { k_wgmma<1, 1><<<g, 256, 0, st>>>(ta, tb, c16); }));
        rows[12].us.push_back(time_graph(st, [&] { k_wgmma<1, 0><<<g, 256, 0, st>>>(ta, tb, c16); }));
        const int dyn = 80 * 1024;
        CK(cudaFuncSetAttribute(k_pieces<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn));
        CK(cudaFuncSetAttribute(k_pieces<7>, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn));
        rows[13].us.push_back(time_graph(st, [&] { k_pieces<0><<<g, 256, 0, st>>>(ta, tb, c16, g, 1); }));
        rows[14].us.push_back(time_graph(st, [&] { k_pieces<1><<<g, 256, 0, st>>>(ta, tb, c16, g, 1); }));
        rows[15].us.push_back(time_graph(st, [&] { k_pieces<2><<<g, 256, 0, st>>>(ta, tb, c16, g, 1); }));
        rows[16].us.push_back(time_graph(st, [&] { k_pieces<4><<<g, 256, dyn, st>>>(ta, tb, c16, g, 1); }));
        rows[17].us.push_back(time_graph(st, [&] { k_pieces<7><<<g, 256, dyn, st>>>(ta, tb, c16, g, 1); }));
        rows[18].us.push_back(time_graph(st, [&] { k_pieces<8><<<g, 256, 0, st>>>(ta, tb, c16, g, 1); }));
        rows[19].us.push_back(time_graph(st, [&] { k_pieces<16><<<g, 256, 0, st>>>(ta, tb, c16, g, 1); }));
        rows[20].us.push_back(time_graph(st, [&] { k_pieces<32><<<g, 256, 0, st>>>(ta, tb, c16, g, 1); }));
        rows[21].us.push_back(time_graph(st, [&] { k_pieces<64><<<g, 256, 0, st>>>(ta, tb, c16, g, 1); }));
        rows[22].us.push_back(time_graph(st, [&] { k_pieces<128><<<g, 256, 0, st>>>(ta, tb, c16, g, 1); }));
    }
    for (const Row& r : rows) {
        printf("%-34s", r.name);
        for (float u : r.us) printf(" %8.3f", u);
        printf("\n");
    }
    return 0;
}
