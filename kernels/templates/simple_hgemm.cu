// kaas simple HGEMM: C = A·B in fp16, on tensor cores (mma.sync m16n8k16, sm_80+).
//
// A is M×K row-major, C is M×N row-major. B is K×N row-major (KAAS_LAYOUT_TN = 0, "nn")
// or N×K row-major (KAAS_LAYOUT_TN = 1, "tn"). KAAS_ACC_F32 = 1 accumulates in fp32 and
// rounds once on output; 0 accumulates in fp16 (mma with fp16 C/D).
//
// Correct for every M, N, K >= 1: tiles that cross an edge are loaded element by element
// with zero fill, and the epilogue stores only elements inside C. Wide 16-byte loads are
// used only where the row stride and base address allow them.
//
// Each block computes a KAAS_BM × KAAS_BN tile of C with KAAS_WARPS_M × KAAS_WARPS_N warps;
// K advances KAAS_BK at a time through two shared-memory stages (global loads for the next
// stage are in flight while the current one is multiplied). Parameters:
//   (const half* A, const half* B, half* C, int M, int N, int K)
// launched with grid (ceil(N/BN), ceil(M/BM), 1), block (32·WARPS_M·WARPS_N, 1, 1) and
// dynamic shared memory 2·(BM·(BK+8) + B tile)·2 bytes.
//
// No headers: fp16 values are handled as 16-bit words and converted with PTX, so NVRTC
// needs no include path for this file.

#ifndef KAAS_ENTRY
#define KAAS_ENTRY kaas_simple_hgemm
#endif
#ifndef KAAS_ACC_F32
#define KAAS_ACC_F32 1
#endif
#ifndef KAAS_LAYOUT_TN
#define KAAS_LAYOUT_TN 1
#endif
#ifndef KAAS_BM
#define KAAS_BM 128
#endif
#ifndef KAAS_BN
#define KAAS_BN 128
#endif
#ifndef KAAS_BK
#define KAAS_BK 32
#endif
#ifndef KAAS_WARPS_M
#define KAAS_WARPS_M 2
#endif
#ifndef KAAS_WARPS_N
#define KAAS_WARPS_N 4
#endif

typedef unsigned short half_t;  // fp16 bits
typedef unsigned int u32;
typedef unsigned long long u64;

struct __align__(16) V16 {
    u32 x, y, z, w;
};

constexpr int THREADS = KAAS_WARPS_M * KAAS_WARPS_N * 32;
constexpr int BM = KAAS_BM, BN = KAAS_BN, BK = KAAS_BK;
constexpr int WM = BM / KAAS_WARPS_M;  // rows of C per warp
constexpr int WN = BN / KAAS_WARPS_N;  // columns of C per warp
constexpr int MT = WM / 16;            // m16 tiles per warp
constexpr int NT = WN / 8;             // n8 tiles per warp
constexpr int PAD = 8;                 // halves of padding per shared row: conflict-free ldmatrix
constexpr int A_LD = BK + PAD;         // A tile: [BM][BK + PAD]
#if KAAS_LAYOUT_TN
constexpr int B_ROWS = BN, B_COLS = BK;  // B tile: [BN][BK + PAD], k contiguous
#else
constexpr int B_ROWS = BK, B_COLS = BN;  // B tile: [BK][BN + PAD], n contiguous
#endif
constexpr int B_LD = B_COLS + PAD;
constexpr int A_STAGE = BM * A_LD;
constexpr int B_STAGE = B_ROWS * B_LD;

static_assert(BM % KAAS_WARPS_M == 0 && BN % KAAS_WARPS_N == 0, "warps must tile the block");
static_assert(WM % 16 == 0 && WN % 16 == 0, "a warp tile is a whole number of 16x16 pieces");
static_assert(BK % 16 == 0, "BK must be a multiple of 16");
static_assert((BM * BK / 8) % THREADS == 0, "A tile must split evenly into 8-half chunks");
static_assert((B_ROWS * B_COLS / 8) % THREADS == 0, "B tile must split evenly into 8-half chunks");

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], const half_t* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], const half_t* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ half_t f32_to_f16(float x) {
    half_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}

// A ROWS × COLS tile of a row-major matrix (rows × cols, leading dimension ld), loaded by
// all threads into registers in 8-half chunks, then stored to shared memory.
template <int ROWS, int COLS>
struct TileLoader {
    static constexpr int CHUNKS = ROWS * COLS / 8 / THREADS;
    V16 regs[CHUNKS];

    __device__ __forceinline__ void load(const half_t* g, int rows, int cols, int ld, int r0, int c0, bool wide) {
#pragma unroll
        for (int i = 0; i < CHUNKS; ++i) {
            const int idx = threadIdx.x + i * THREADS;
            const int r = idx / (COLS / 8);
            const int c = (idx % (COLS / 8)) * 8;
            const int gr = r0 + r, gc = c0 + c;
            if (wide && gr < rows && gc + 8 <= cols) {
                regs[i] = *reinterpret_cast<const V16*>(g + (u64)gr * (u64)ld + (u64)gc);
            } else {
                u32 w[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int c0j = gc + 2 * j;
                    u32 lo = 0, hi = 0;
                    if (gr < rows && c0j < cols) lo = g[(u64)gr * (u64)ld + (u64)c0j];
                    if (gr < rows && c0j + 1 < cols) hi = g[(u64)gr * (u64)ld + (u64)(c0j + 1)];
                    w[j] = lo | (hi << 16);
                }
                regs[i].x = w[0];
                regs[i].y = w[1];
                regs[i].z = w[2];
                regs[i].w = w[3];
            }
        }
    }

    __device__ __forceinline__ void store(half_t* s, int sld) const {
#pragma unroll
        for (int i = 0; i < CHUNKS; ++i) {
            const int idx = threadIdx.x + i * THREADS;
            const int r = idx / (COLS / 8);
            const int c = (idx % (COLS / 8)) * 8;
            *reinterpret_cast<V16*>(s + r * sld + c) = regs[i];
        }
    }
};

extern "C" __global__ void __launch_bounds__(THREADS)
KAAS_ENTRY(const half_t* __restrict__ A, const half_t* __restrict__ B, half_t* __restrict__ C, int M, int N, int K) {
    extern __shared__ V16 smem_v16[];
    half_t* sA = reinterpret_cast<half_t*>(smem_v16);
    half_t* sB = sA + 2 * A_STAGE;

    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int wm = warp / KAAS_WARPS_N;
    const int wn = warp % KAAS_WARPS_N;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;

    const bool a_wide = ((u64)A % 16 == 0) && (K % 8 == 0);
#if KAAS_LAYOUT_TN
    const bool b_wide = ((u64)B % 16 == 0) && (K % 8 == 0);
    TileLoader<BN, BK> lb;
#else
    const bool b_wide = ((u64)B % 16 == 0) && (N % 8 == 0);
    TileLoader<BK, BN> lb;
#endif
    TileLoader<BM, BK> la;

#if KAAS_ACC_F32
    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
#else
    u32 acc[MT][NT][2];  // two fp16 each
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) acc[i][j][0] = acc[i][j][1] = 0u;
#endif

    const int ktiles = (K + BK - 1) / BK;

    la.load(A, M, K, K, m0, 0, a_wide);
#if KAAS_LAYOUT_TN
    lb.load(B, N, K, K, n0, 0, b_wide);
#else
    lb.load(B, K, N, N, 0, n0, b_wide);
#endif
    la.store(sA, A_LD);
    lb.store(sB, B_LD);
    __syncthreads();

    for (int kt = 0; kt < ktiles; ++kt) {
        const int cur = kt & 1;
        const bool more = kt + 1 < ktiles;
        if (more) {
            const int k0 = (kt + 1) * BK;
            la.load(A, M, K, K, m0, k0, a_wide);
#if KAAS_LAYOUT_TN
            lb.load(B, N, K, K, n0, k0, b_wide);
#else
            lb.load(B, K, N, N, k0, n0, b_wide);
#endif
        }
        const half_t* a_s = sA + cur * A_STAGE;
        const half_t* b_s = sB + cur * B_STAGE;

#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            u32 af[MT][4];
            u32 bf[NT][2];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int row = wm * WM + mt * 16 + (lane % 16);
                const int col = kk + (lane / 16) * 8;
                ldmatrix_x4(af[mt], a_s + row * A_LD + col);
            }
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                u32 r[4];
#if KAAS_LAYOUT_TN
                const int n = wn * WN + np * 16 + (lane % 8) + (lane / 16) * 8;
                const int k = kk + ((lane / 8) % 2) * 8;
                ldmatrix_x4(r, b_s + n * B_LD + k);
#else
                const int k = kk + (lane % 16);
                const int n = wn * WN + np * 16 + (lane / 16) * 8;
                ldmatrix_x4_trans(r, b_s + k * B_LD + n);
#endif
                bf[2 * np][0] = r[0];
                bf[2 * np][1] = r[1];
                bf[2 * np + 1][0] = r[2];
                bf[2 * np + 1][1] = r[3];
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
#if KAAS_ACC_F32
                    asm volatile(
                        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                        : "+f"(acc[mt][nt][0]), "+f"(acc[mt][nt][1]), "+f"(acc[mt][nt][2]), "+f"(acc[mt][nt][3])
                        : "r"(af[mt][0]), "r"(af[mt][1]), "r"(af[mt][2]), "r"(af[mt][3]), "r"(bf[nt][0]),
                          "r"(bf[nt][1]));
#else
                    asm volatile(
                        "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
                        "{%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};"
                        : "+r"(acc[mt][nt][0]), "+r"(acc[mt][nt][1])
                        : "r"(af[mt][0]), "r"(af[mt][1]), "r"(af[mt][2]), "r"(af[mt][3]), "r"(bf[nt][0]),
                          "r"(bf[nt][1]));
#endif
                }
            }
        }

        if (more) {
            la.store(sA + (cur ^ 1) * A_STAGE, A_LD);
            lb.store(sB + (cur ^ 1) * B_STAGE, B_LD);
        }
        __syncthreads();
    }

    // Epilogue: thread (group g = lane/4, t = lane%4) holds rows g and g+8, columns 2t and
    // 2t+1 of each 16×8 accumulator tile.
    const int g = lane >> 2;
    const int t = lane & 3;
    const bool pairs = ((N & 1) == 0) && ((u64)C % 4 == 0);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int col = n0 + wn * WN + nt * 8 + 2 * t;
#pragma unroll
            for (int half_row = 0; half_row < 2; ++half_row) {
                const int row = m0 + wm * WM + mt * 16 + g + 8 * half_row;
                if (row >= M) continue;
#if KAAS_ACC_F32
                const u32 lo = f32_to_f16(acc[mt][nt][2 * half_row]);
                const u32 hi = f32_to_f16(acc[mt][nt][2 * half_row + 1]);
                const u32 both = lo | (hi << 16);
#else
                const u32 both = acc[mt][nt][half_row];
#endif
                half_t* dst = C + (u64)row * (u64)N + (u64)col;
                if (pairs && col + 1 < N) {
                    *reinterpret_cast<u32*>(dst) = both;
                } else {
                    if (col < N) dst[0] = (half_t)(both & 0xffffu);
                    if (col + 1 < N) dst[1] = (half_t)(both >> 16);
                }
            }
        }
    }
}
