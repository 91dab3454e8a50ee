// kaas skinny HGEMM on tensor cores (the decode family's `tc` codes): C = A·B^T in fp16
// for a handful of rows of A, with mma.sync m16n8k16 and fp32 accumulators, for sm_80 and
// later. No headers: NVRTC needs no include path.
//
// ─── Why a second decode kernel ─────────────────────────────────────────────────────────
// The FMA kernel (gemv_hgemm.cu) reads every row of A through L1 once per row of B it
// multiplies: at 8–16 tokens that is 8–16 bytes of L1 traffic per byte of the weight, and
// L1, not HBM, bounds it. Here the weight's rows are the mma's A operand (16 rows a warp)
// and the tokens its B operand (8 a tile), so a 16-byte load of a token row serves 16
// weight rows: the tokens cost half a byte of L1 traffic per byte of weight for up to 8 of
// them, one byte for 16. The weight streams as in the FMA kernel: every load of a warp's
// share issued before the first multiply, past L1.
//
// ─── The K order ────────────────────────────────────────────────────────────────────────
// A sum over K does not depend on the order of its terms, so each lane loads 16·VEC
// contiguous bytes (8·VEC halves) of a row and the k16 steps of a 32·VEC-element span take
// them in an order of their own: lane q (= lane % 4) of a quad loads k = 8·VEC·q … of the
// span, and of each 8 halves v it loaded, its registers' logical k = 2q, 2q+1 | 2q+8, 2q+9
// of one step hold physical 8v+0,1 | 8v+2,3, those of the next step 8v+4,5 | 8v+6,7. Both
// operands use the same map (it depends on q and v only, which the A and B fragments
// share), so every product pairs the same k. With VEC = 2 or 4 a quad reads 128 or 256
// contiguous bytes of a row per span instead of 64 (docs/tuner.md: what that measured).
//
// ─── Problem ────────────────────────────────────────────────────────────────────────────
// tn only: A is M×K row-major, B is N×K row-major (a PyTorch weight), C is M×N row-major.
// fp32 accumulators, one rounding to fp16 on output; alpha 1, beta 0. Correct for every
// M, N, K >= 1: rows past N or M read row 0 of their operand (always there) and are never
// stored; a chunk past K is zeros; where K is not a multiple of 8 or a base is not
// 16-byte aligned every element is loaded alone (slow, but right).
//
// ─── Configuration (-D macros) ──────────────────────────────────────────────────────────
//   KAAS_MT       rows of A (tokens) one block computes: 8 or 16 (one or two n8 tiles)
//   KAAS_ROWS     rows of B (outputs n) one block computes: 16 or 32 (one or two m16 tiles)
//   KAAS_KWARPS   warps per block; they split K, warp w taking 32-element spans w,
//                 w + KWARPS, …, and meet in shared memory
//   KAAS_UNROLL   spans a warp loads before it multiplies any of them (loads in flight)
//   KAAS_VEC      16-byte loads per lane, row and span: 1, 2 or 4 (spans of 32, 64 or 128)
//   KAAS_ENTRY    the entry's name, kaas_gemv_f32_tn_m<MT>_r<ROWS>_w<KWARPS>_u<UNROLL>[_v<VEC>]_tc,
//                 as the tuner (src/tuner/gemv.rs) spells it and passes it
//
// ─── Launch (kaas.hgemm.v1) ─────────────────────────────────────────────────────────────
// params: (ptr A, ptr B, ptr C, i32 M, i32 N, i32 K); no workspace
// grid:  [ceil(N/ROWS), ceil(M/MT), 1]
// block: [32 · KWARPS, 1, 1]
// shared_mem_bytes (dynamic) = 0 (the partials' KWARPS·ROWS·MT floats are static)

typedef unsigned short u16;
typedef unsigned int u32;

#ifndef KAAS_MT
#define KAAS_MT 8
#endif
#ifndef KAAS_ROWS
#define KAAS_ROWS 16
#endif
#ifndef KAAS_KWARPS
#define KAAS_KWARPS 4
#endif
#ifndef KAAS_UNROLL
#define KAAS_UNROLL 4
#endif
#ifndef KAAS_VEC
#define KAAS_VEC 1
#endif
#ifndef KAAS_ENTRY
#define KAAS_ENTRY kaas_gemv_f32_tn_m8_r16_w4_u4_tc
#endif

#define MT KAAS_MT
#define ROWS KAAS_ROWS
#define KWARPS KAAS_KWARPS
#define UNROLL KAAS_UNROLL
#define VEC KAAS_VEC
#define NT (MT / 8)     // n8 tiles of tokens
#define RT (ROWS / 16)  // m16 tiles of weight rows
#define SPAN (32 * VEC) // elements of K a warp covers per span: 4 lanes of a quad × 8·VEC

static_assert(MT == 8 || MT == 16, "MT is 8 or 16");
static_assert(ROWS == 16 || ROWS == 32, "ROWS is 16 or 32");
static_assert(KWARPS >= 1 && KWARPS <= 16, "KWARPS is 1..16");
static_assert(UNROLL >= 1 && UNROLL <= 8, "UNROLL is 1..8");
static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC is 1, 2 or 4");
static_assert(UNROLL * VEC * (2 * RT + NT) <= 24, "UNROLL·VEC·(2·ROWS/16 + MT/8) 16-byte loads in flight per lane: at most 24");

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

// Eight halves from k on, one at a time, zeros past K: the path for unaligned rows.
static __device__ __forceinline__ uint4 load_elements(const u16* row, int k, int K) {
    u32 w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u32 lo = k + 2 * i < K ? row[k + 2 * i] : 0;
        const u32 hi = k + 2 * i + 1 < K ? row[k + 2 * i + 1] : 0;
        w[i] = lo | (hi << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// D += A·B for one m16n8k16 tile: a = {row g k-lo, row g+8 k-lo, row g k-hi, row g+8 k-hi},
// b = {k-lo, k-hi} of token g (g = lane / 4), d = {row g: tokens 2q, 2q+1; row g+8: the same}.
static __device__ __forceinline__ void mma16816(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

extern "C" __global__ void __launch_bounds__(32 * KWARPS)
KAAS_ENTRY(const u16* __restrict__ A, const u16* __restrict__ B, u16* __restrict__ C, int M, int N, int K) {
    // partial[w][i][lane]: warp w's accumulator i (r·NT·4 + t·4 + j) of `lane`.
    __shared__ float partial[KWARPS][RT * NT * 4][32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = lane >> 2, q = lane & 3;
    const int n0 = blockIdx.x * ROWS;
    const int m0 = blockIdx.y * MT;

    float acc[RT][NT][4];
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[r][t][j] = 0.f;

    // This lane's rows: weight rows n0 + 16r + g (+ 8), token rows m0 + 8t + g.
    const u16* brow[RT][2];
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = n0 + 16 * r + g + 8 * h;
            brow[r][h] = B + (size_t)(n < N ? n : 0) * K;
        }
    const u16* arow[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const int m = m0 + 8 * t + g;
        arow[t] = A + (size_t)(m < M ? m : 0) * K;
    }

    const bool vector = (K & 7) == 0 && (((size_t)A | (size_t)B) & 15) == 0;
    const int spans = (K + SPAN - 1) / SPAN;
    for (int s0 = warp; s0 < spans; s0 += KWARPS * UNROLL) {
        uint4 b[UNROLL][VEC][RT][2];
        uint4 a[UNROLL][VEC][NT];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
#pragma unroll
            for (int v = 0; v < VEC; ++v) {
                const int k = (s0 + u * KWARPS) * SPAN + 8 * (VEC * q + v);
                const bool in = k < K;
#pragma unroll
                for (int r = 0; r < RT; ++r)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        b[u][v][r][h] = !in ? make_uint4(0, 0, 0, 0) : vector ? load_stream(brow[r][h] + k) : load_elements(brow[r][h], k, K);
#pragma unroll
                for (int t = 0; t < NT; ++t)
                    a[u][v][t] = !in ? make_uint4(0, 0, 0, 0) : vector ? load_shared_rows(arow[t] + k) : load_elements(arow[t], k, K);
            }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (s0 + u * KWARPS >= spans) break;
#pragma unroll
            for (int v = 0; v < VEC; ++v)
#pragma unroll
                for (int r = 0; r < RT; ++r)
#pragma unroll
                    for (int t = 0; t < NT; ++t) {
                        const uint4 lo = b[u][v][r][0], hi = b[u][v][r][1], x = a[u][v][t];
                        mma16816(acc[r][t], lo.x, hi.x, lo.y, hi.y, x.x, x.y);
                        mma16816(acc[r][t], lo.z, hi.z, lo.w, hi.w, x.z, x.w);
                    }
        }
    }

    // The block's sums: every warp leaves its accumulators in shared memory, and thread i
    // adds the KWARPS partials of output i in warp order (the same order on every run:
    // bit-identical results).
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
            for (int j = 0; j < 4; ++j) partial[warp][(r * NT + t) * 4 + j][lane] = acc[r][t][j];
    __syncthreads();
    for (int i = threadIdx.x; i < RT * NT * 4 * 32; i += 32 * KWARPS) {
        const int slot = i >> 5, l = i & 31;
        const int r = slot / (NT * 4), t = (slot / 4) % NT, j = slot % 4;
        // d[j] of lane l: weight row 16r + l/4 (+ 8 for j >= 2), token 8t + 2(l % 4) + j % 2.
        const int n = n0 + 16 * r + (l >> 2) + 8 * (j >> 1);
        const int m = m0 + 8 * t + 2 * (l & 3) + (j & 1);
        if (m >= M || n >= N) continue;
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < KWARPS; ++w) s += partial[w][slot][l];
        C[(size_t)m * N + n] = f2h(s);
    }
}
