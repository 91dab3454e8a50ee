// kaas skinny HGEMM (the decode family): C = A·B^T in fp16 for a handful of rows of A,
// with plain fp32 FMAs and no tensor cores, for sm_80 and later. No headers: NVRTC needs
// no include path.
//
// ─── Why a family of its own ────────────────────────────────────────────────────────────
// At decode (M = 1…16 tokens) a linear layer is a matrix-vector product: every byte of the
// weight B is used M times, so the kernel is bound by how fast B streams from HBM; for
// the 8–32 MiB weights of a 7B model's attention the libraries' time is well above what
// the bytes need, which points at the ramp until enough loads are in flight. The tiled families spend that ramp on pipeline set-up; this one
// issues every load of a warp's share of B before it uses any (`KAAS_UNROLL` 16-byte loads
// per row and lane), with enough small blocks that all of them are resident at once.
//
// ─── Problem ────────────────────────────────────────────────────────────────────────────
// tn only: A is M×K row-major, B is N×K row-major (a PyTorch weight), C is M×N row-major.
// fp32 accumulators, one rounding to fp16 on output; alpha 1, beta 0. Correct for every
// M, N, K >= 1: rows of A are taken MT at a time (blockIdx.y), rows past N or M are skipped,
// and where K is not a multiple of 8 or a base is not 16-byte aligned every element is
// loaded alone (slow, but right).
//
// ─── Configuration (-D macros) ──────────────────────────────────────────────────────────
//   KAAS_MT       rows of A (tokens) one block computes: 1, 2, 4, 8 or 16
//   KAAS_ROWS     rows of B (outputs n) one block computes: 1, 2, 4 or 8
//   KAAS_KWARPS   warps per block; they split K, warp w taking 256-element chunks w,
//                 w + KWARPS, … (32 lanes × 8 halves), and meet in shared memory
//   KAAS_UNROLL   chunks a warp loads before it multiplies any of them (loads in flight)
//   KAAS_ENTRY    the entry's name, kaas_gemv_f32_tn_m<MT>_r<ROWS>_w<KWARPS>_u<UNROLL>, as
//                 the tuner (src/tuner/gemv.rs) spells it and passes it
//
// ─── Launch (kaas.hgemm.v1) ─────────────────────────────────────────────────────────────
// params: (ptr A, ptr B, ptr C, i32 M, i32 N, i32 K); no workspace
// grid:  [ceil(N/ROWS), ceil(M/MT), 1]
// block: [32 · KWARPS, 1, 1]
// shared_mem_bytes (dynamic) = 0 (the partials' KWARPS·MT·ROWS floats are static)

typedef unsigned short u16;
typedef unsigned int u32;

#ifndef KAAS_MT
#define KAAS_MT 1
#endif
#ifndef KAAS_ROWS
#define KAAS_ROWS 2
#endif
#ifndef KAAS_KWARPS
#define KAAS_KWARPS 4
#endif
#ifndef KAAS_UNROLL
#define KAAS_UNROLL 2
#endif
#ifndef KAAS_ENTRY
#define KAAS_ENTRY kaas_gemv_f32_tn_m1_r2_w4_u2
#endif

#define MT KAAS_MT
#define ROWS KAAS_ROWS
#define KWARPS KAAS_KWARPS
#define UNROLL KAAS_UNROLL
#define CHUNK 256  // halves one warp covers per load: 32 lanes × 8

static_assert(MT == 1 || MT == 2 || MT == 4 || MT == 8 || MT == 16, "MT is 1, 2, 4, 8 or 16");
static_assert(ROWS == 1 || ROWS == 2 || ROWS == 4 || ROWS == 8, "ROWS is 1, 2, 4 or 8");
static_assert(KWARPS >= 1 && KWARPS <= 16, "KWARPS is 1..16");
static_assert(UNROLL >= 1 && UNROLL <= 8, "UNROLL is 1..8");
static_assert(MT * ROWS <= 32, "MT·ROWS accumulators per lane: at most 32");
static_assert(UNROLL * ROWS <= 16, "UNROLL·ROWS 16-byte loads in flight per lane: at most 16");

static __device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

static __device__ __forceinline__ u16 f2h(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// Eight halves of B, read once: streamed past L1 (no other block reads them).
static __device__ __forceinline__ uint4 load_stream(const u16* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// Eight halves of A: every block of the SM reads the same rows, so they stay in L1.
static __device__ __forceinline__ uint4 load_shared_rows(const u16* p) {
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

static __device__ __forceinline__ void unpack8(uint4 v, float (&f)[8]) {
    const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = h2f((u16)(w[i] & 0xffff));
        f[2 * i + 1] = h2f((u16)(w[i] >> 16));
    }
}

extern "C" __global__ void __launch_bounds__(32 * KWARPS)
KAAS_ENTRY(const u16* __restrict__ A, const u16* __restrict__ B, u16* __restrict__ C, int M, int N, int K) {
    __shared__ float partial[KWARPS][MT * ROWS];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int n0 = blockIdx.x * ROWS;
    const int m0 = blockIdx.y * MT;

    // acc[m][r]: this lane's share of C[m0 + m][n0 + r].
    float acc[MT][ROWS];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[m][r] = 0.f;

    // Rows past the edge read row 0 of their operand instead (always there) and are
    // never stored, so the loads need no predicate beyond K.
    const u16* brow[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) brow[r] = B + (size_t)(n0 + r < N ? n0 + r : 0) * K;
    const u16* arow[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) arow[m] = A + (size_t)(m0 + m < M ? m0 + m : 0) * K;

    const bool vector = (K & 7) == 0 && (((size_t)A | (size_t)B) & 15) == 0;
    if (vector) {
        // Chunk c covers k = c·256 + lane·8 … +7; warp w takes chunks w, w + KWARPS, ….
        const int chunks = K / CHUNK;
        for (int c0 = warp; c0 < chunks; c0 += KWARPS * UNROLL) {
            uint4 b[UNROLL][ROWS];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int c = c0 + u * KWARPS;
#pragma unroll
                for (int r = 0; r < ROWS; ++r)
                    b[u][r] = c < chunks ? load_stream(brow[r] + c * CHUNK + lane * 8) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int c = c0 + u * KWARPS;
                if (c >= chunks) break;
                float bf[ROWS][8];
#pragma unroll
                for (int r = 0; r < ROWS; ++r) unpack8(b[u][r], bf[r]);
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    float af[8];
                    unpack8(load_shared_rows(arow[m] + c * CHUNK + lane * 8), af);
#pragma unroll
                    for (int r = 0; r < ROWS; ++r)
#pragma unroll
                        for (int i = 0; i < 8; ++i) acc[m][r] = fmaf(af[i], bf[r][i], acc[m][r]);
                }
            }
        }
        // The tail past the last whole chunk (K % 256 halves, a multiple of 8): one
        // 16-byte group per lane, in the warp whose turn the next chunk would be.
        const int tail = chunks * CHUNK;
        if (warp == chunks % KWARPS && tail + lane * 8 < K) {
            const int k = tail + lane * 8;
            float bf[ROWS][8];
#pragma unroll
            for (int r = 0; r < ROWS; ++r) unpack8(load_stream(brow[r] + k), bf[r]);
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                float af[8];
                unpack8(load_shared_rows(arow[m] + k), af);
#pragma unroll
                for (int r = 0; r < ROWS; ++r)
#pragma unroll
                    for (int i = 0; i < 8; ++i) acc[m][r] = fmaf(af[i], bf[r][i], acc[m][r]);
            }
        }
    } else {
        // Unaligned rows: element by element, thread t of the block taking k = t, t + 32·KWARPS, ….
        for (int k = threadIdx.x; k < K; k += 32 * KWARPS) {
            float bf[ROWS];
#pragma unroll
            for (int r = 0; r < ROWS; ++r) bf[r] = h2f(brow[r][k]);
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                const float a = h2f(arow[m][k]);
#pragma unroll
                for (int r = 0; r < ROWS; ++r) acc[m][r] = fmaf(a, bf[r], acc[m][r]);
            }
        }
    }

    // The warp's sums, then the block's: lane 0 of each warp leaves MT·ROWS partials in
    // shared memory, and thread i < MT·ROWS adds the KWARPS partials of output i in warp
    // order (the same order on every run: bit-identical results).
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            float v = acc[m][r];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
            if (lane == 0) partial[warp][m * ROWS + r] = v;
        }
    __syncthreads();
    for (int i = threadIdx.x; i < MT * ROWS; i += 32 * KWARPS) {
        const int m = i / ROWS, r = i % ROWS;
        if (m0 + m >= M || n0 + r >= N) continue;
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < KWARPS; ++w) s += partial[w][i];
        C[(size_t)(m0 + m) * N + n0 + r] = f2h(s);
    }
}
