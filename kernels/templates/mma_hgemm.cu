// kaas mma HGEMM (the Ampere-style family): C = A·B in fp16 with mma.sync m16n8k16, for
// sm_80 and later. No headers and no CUTLASS: inline PTX only, so NVRTC needs no include
// path (`--gpu-architecture=compute_80 … compute_90 --std=c++17 -D...`).
//
// ─── Problem ────────────────────────────────────────────────────────────────────────────
// A is M×K row-major, C is M×N row-major. B is N×K row-major (KAAS_LAYOUT_TN=1, "tn") or
// K×N row-major (KAAS_LAYOUT_TN=0, "nn"). KAAS_ACC_F32=1: fp32 accumulators, one rounding
// to fp16 on output; 0: fp16 accumulators (mma with fp16 C/D). alpha 1, beta 0.
// Correct for every M, N, K >= 1: a 16-byte chunk that crosses an edge is zero-filled
// (cp.async with a source size of 0), and where rows are not 16-byte aligned (K % 8 != 0,
// or N % 8 != 0 for nn B, or an unaligned base) the chunks are loaded element by element
// with zero fill. The epilogue stores only elements inside C.
//
// ─── Configuration (-D macros) ──────────────────────────────────────────────────────────
//   KAAS_BM, KAAS_BN   block tile of C (multiples of 16 per warp; BN >= 32)
//   KAAS_BK            32 or 64: K per pipeline stage (one 64- or 128-byte row per tile row)
//   KAAS_WARPS_M/_N    warps along M and N; a warp computes (BM/WARPS_M)×(BN/WARPS_N)
//   KAAS_STAGES        cp.async ring depth, 2..8: STAGES-1 K-tiles are in flight while one
//                      is multiplied (one __syncthreads per K-tile)
//   KAAS_GROUP_M       tile-order group height, in tiles (grouped raster for L2 reuse)
//   KAAS_SPLITK        0 (default), 1 or 2: split-K, as the Hopper template does it. Two
//                      more params, the workspace and the split count S (runtime); unit
//                      u = tile·S + slice accumulates K-tiles [s·kt/S, (s+1)·kt/S); the last
//                      unit of a tile to arrive (a counter per tile) writes C and leaves the
//                      workspace zero again. 1, in order: each unit stores its fp32 partial,
//                      the last sums the S partials in slice order (bit-identical on every
//                      run). 2, atomic: each unit adds its partial into one fp32 sum per
//                      tile with red.global.add (vectorised on sm_90), the last reads it.
//                      3, in a cluster (sm_90): the S units of a tile are the S CTAs of one
//                      cluster [S, 1, 1] (S = the launch's cluster size, 2..16; no more params,
//                      no workspace). Ranks 1..S-1 push their fp32 partials into rank 0's
//                      shared memory with st.async (one mbarrier counts the bytes) and exit;
//                      rank 0 adds them to its own in rank order (bit-identical on every run)
//                      and writes C. No global round trip, no counter, no zeroing.
//   KAAS_ACC_F32, KAAS_LAYOUT_TN
//   KAAS_ENTRY         the entry's name, kaas_mma_<f32|f16>_<tn|nn>_<BM>x<BN>x<BK>_w<WM>x<WN>_s<STAGES>
//                      and the reduction's suffix, as the tuner's table (src/tuner/mma.rs,
//                      AXES) spells it and passes it
//
// ─── Launch (kaas.hgemm.v1) ─────────────────────────────────────────────────────────────
// params: (ptr A, ptr B, ptr C, i32 M, i32 N, i32 K); KAAS_SPLITK adds (ptr workspace,
//   i32 S), S >= 1, with workspace_bytes = roundup(4·tiles, 256) + 4·tiles·BM·BN·(S for
//   KAAS_SPLITK=1, 1 for 2), zero when first used (counters, then partials or sums).
//   KAAS_SPLITK=3: the plain params; cluster [S, 1, 1]; the grid exactly tiles · S, and
//   shared_mem_bytes ≥ the ring + (S-1)·BM·BN·4 (rank 0's inbox); else nothing is written.
// grid:  [tiles · S, 1, 1] (S = 1 without split-K), tiles = ceil(M/BM)·ceil(N/BN)
// block: [32 · WARPS_M · WARPS_N, 1, 1]
// shared_mem_bytes (dynamic) = STAGES · (BM + BN) · BK · 2
//
// ─── Shared memory ──────────────────────────────────────────────────────────────────────
// Tiles are stored without padding, rows of 16-byte chunks with the chunk index XORed by
// the row (rows of 128 bytes or more: chunk ^ (row % 8); 64-byte rows: chunk ^ (row/2 % 4)),
// so the eight 16-byte rows an ldmatrix reads lie in eight different bank groups and the
// cp.async writes stay 16-byte aligned.

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#ifndef KAAS_BM
#define KAAS_BM 64
#endif
#ifndef KAAS_BN
#define KAAS_BN 64
#endif
#ifndef KAAS_BK
#define KAAS_BK 64
#endif
#ifndef KAAS_WARPS_M
#define KAAS_WARPS_M 2
#endif
#ifndef KAAS_WARPS_N
#define KAAS_WARPS_N 2
#endif
#ifndef KAAS_STAGES
#define KAAS_STAGES 4
#endif
#ifndef KAAS_GROUP_M
#define KAAS_GROUP_M 8
#endif
#ifndef KAAS_SPLITK
#define KAAS_SPLITK 0
#endif
#ifndef KAAS_ACC_F32
#define KAAS_ACC_F32 1
#endif
#ifndef KAAS_LAYOUT_TN
#define KAAS_LAYOUT_TN 1
#endif

// The entry's name: the tuner derives it from the same table as these defines
// (src/tuner/mma.rs, AXES) and passes it, so the name is spelt in one place.
#ifndef KAAS_ENTRY
#error "KAAS_ENTRY (the entry's name) is not defined"
#endif

constexpr int BM = KAAS_BM, BN = KAAS_BN, BK = KAAS_BK, STAGES = KAAS_STAGES, GROUP_M = KAAS_GROUP_M;
constexpr int WARPS_M = KAAS_WARPS_M, WARPS_N = KAAS_WARPS_N;
constexpr int THREADS = 32 * WARPS_M * WARPS_N;
constexpr int WM = BM / WARPS_M;  // rows of C per warp
constexpr int WN = BN / WARPS_N;  // columns of C per warp
constexpr int MT = WM / 16;       // m16 pieces per warp
constexpr int NT = WN / 8;        // n8 pieces per warp
constexpr int A_RB = BK * 2;      // bytes per A tile row ([BM][BK])
#if KAAS_LAYOUT_TN
constexpr int B_ROWS = BN, B_RB = BK * 2;  // B tile [BN][BK], k contiguous
#else
constexpr int B_ROWS = BK, B_RB = BN * 2;  // B tile [BK][BN], n contiguous
#endif
constexpr int A_STAGE_BYTES = BM * A_RB;
constexpr int B_STAGE_BYTES = B_ROWS * B_RB;
constexpr int SMEM_BYTES = STAGES * (A_STAGE_BYTES + B_STAGE_BYTES);

static_assert(BK == 32 || BK == 64, "KAAS_BK must be 32 or 64");
static_assert(BM % WARPS_M == 0 && BN % WARPS_N == 0, "warps must tile the block");
static_assert(WM % 16 == 0 && WN % 16 == 0, "a warp tile is a whole number of 16x16 pieces");
static_assert(BN >= 32 && BN % 32 == 0 && BM % 16 == 0, "BN must be a multiple of 32, BM of 16");
static_assert(STAGES >= 2 && STAGES <= 8, "KAAS_STAGES must be 2..8");
static_assert(THREADS <= 512, "at most 16 warps");
static_assert(GROUP_M >= 1, "KAAS_GROUP_M must be >= 1");
static_assert(SMEM_BYTES <= 232448, "shared memory exceeds 227 KiB");
#if KAAS_SPLITK
static_assert(KAAS_ACC_F32, "split-K partials are fp32: acc=f32 only");
static_assert(KAAS_SPLITK >= 1 && KAAS_SPLITK <= 3, "KAAS_SPLITK must be 0..3");
#endif
// The split-K modes that keep their partials in a global workspace.
#define KAAS_SPLIT_WS (KAAS_SPLITK == 1 || KAAS_SPLITK == 2)

// ─── PTX helpers ────────────────────────────────────────────────────────────────────────
__device__ __forceinline__ u32 smem_u32(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// Byte offset of 16-byte chunk c of row r in a swizzled tile with RB bytes per row.
template <int RB>
__device__ __forceinline__ u32 swz(int r, int c) {
    static_assert(RB == 64 || RB % 128 == 0, "rows of 64 bytes or whole 128-byte lines");
    const int x = RB >= 128 ? (c ^ (r & 7)) : (c ^ ((r >> 1) & 3));
    return (u32)(r * RB + 16 * x);
}

// 16 bytes global → shared, asynchronously; `bytes` (0 or 16) are read, the rest zeroed.
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, u32 bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void st_shared16(u32 dst, u32 a, u32 b, u32 c, u32 d) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

__device__ __forceinline__ u32 pack_f16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// One 16-byte chunk element by element, zero-filled past the edges: the path for rows
// that are not 16-byte aligned. Not inlined, so it costs the fast path no registers.
__device__ __noinline__ void load_chunk_slow(u32 d, const u16* __restrict__ g, int rows, int cols, int ld, int gr,
                                             int gc) {
    u32 w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int cj = gc + 2 * j;
        u32 lo = 0, hi = 0;
        if (gr < rows && cj < cols) lo = g[(u64)gr * (u64)ld + (u64)cj];
        if (gr < rows && cj + 1 < cols) hi = g[(u64)gr * (u64)ld + (u64)(cj + 1)];
        w[j] = lo | (hi << 16);
    }
    st_shared16(d, w[0], w[1], w[2], w[3]);
}

// The chunks one thread loads of a ROWS × (RB/2) tile of a row-major matrix (`rows` ×
// `cols`, leading dimension `ld`), K-tile after K-tile, into swizzled ring slots. Its
// columns run along K (`K_COLS`: A, and B for tn) or its rows do (B for nn). Everything
// but the K offset is computed once: chunk i of K-tile k0 is valid iff k0 < lim[i] and
// comes from ptr[i] + k0·(K_COLS ? 1 : ld).
template <int ROWS, int RB, bool K_COLS>
struct Loader {
    static constexpr int CPR = RB / 16;  // chunks per row
    static constexpr int CHUNKS = ROWS * CPR;
    static constexpr int PER = (CHUNKS + THREADS - 1) / THREADS;
    const u16* ptr[PER];
    int lim[PER];
    u32 soff[PER];

    // (r0, c0): the tile's first row and column for K-tile 0 (K itself is 0 there).
    __device__ __forceinline__ Loader(const u16* g, int rows, int cols, int ld, int r0, int c0, int K) {
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const int idx = (int)threadIdx.x + i * THREADS;
            const int r = idx / CPR, c = idx % CPR;
            const bool here = CHUNKS % THREADS == 0 || idx < CHUNKS;
            soff[i] = swz<RB>(r, c);
            const int gr = r0 + r, gc = c0 + 8 * c;
            if (K_COLS) {
                lim[i] = here && gr < rows ? K - 8 * c : 0;  // rows are M or N; columns are K
            } else {
                lim[i] = here && gc < cols ? K - r : 0;  // rows are K; columns are N
            }
            ptr[i] = lim[i] > 0 ? g + (u64)(K_COLS ? gr : r) * (u64)ld + (u64)gc : g;
        }
    }

    // Row-aligned operands: one cp.async per chunk, zero-filled past the edges.
    __device__ __forceinline__ void load(u32 slot, int k0, int ld) const {
        const u64 step = K_COLS ? (u64)k0 : (u64)k0 * (u64)ld;
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            if (CHUNKS % THREADS != 0 && (int)threadIdx.x + i * THREADS >= CHUNKS) break;
            const bool in = k0 < lim[i];
            cp_async16(slot + soff[i], in ? ptr[i] + step : ptr[i], in ? 16u : 0u);
        }
    }

    // Rows not 16-byte aligned: element by element (rare; not inlined).
    __device__ __forceinline__ void load_slow(u32 slot, const u16* g, int rows, int cols, int ld, int r0, int c0) const {
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const int idx = (int)threadIdx.x + i * THREADS;
            if (CHUNKS % THREADS != 0 && idx >= CHUNKS) break;
            load_chunk_slow(slot + soff[i], g, rows, cols, ld, r0 + idx / CPR, c0 + 8 * (idx % CPR));
        }
    }
};

// Tile t of the grouped order: groups of GROUP_M tile-rows, column-major inside a group.
__device__ __forceinline__ void tile_coords(int t, int num_m, int num_n, int& mb, int& nb) {
    const int per_group = GROUP_M * num_n;
    const int first = (t / per_group) * GROUP_M;
    const int rows = min(num_m - first, GROUP_M);
    const int in = t % per_group;
    mb = first + in % rows;
    nb = in / rows;
}

#if KAAS_ACC_F32
typedef float acc_t;
constexpr int ACC_PER = 4;  // accumulators per thread per m16n8 piece
#else
typedef u32 acc_t;  // two fp16
constexpr int ACC_PER = 2;
#endif

__device__ __forceinline__ void mma_16816(acc_t (&d)[ACC_PER], const u32 (&a)[4], u32 b0, u32 b1) {
#if KAAS_ACC_F32
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};"
        : "+r"(d[0]), "+r"(d[1])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Where lane `lane` of warp (wm, wn) points ldmatrix for each k16 step, relative to a
// ring slot: computed once, outside the K loop.
struct FragOffsets {
    u32 a[BK / 16][MT];
    u32 b[BK / 16][NT / 2];
    __device__ __forceinline__ FragOffsets(int wm, int wn, int lane) {
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) a[kk][mt] = swz<A_RB>(wm * WM + mt * 16 + (lane & 15), kk * 2 + (lane >> 4));
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
#if KAAS_LAYOUT_TN
                b[kk][np] = swz<B_RB>(wn * WN + np * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1));
#else
                b[kk][np] = swz<B_RB>(kk * 16 + (lane & 15), (wn * WN + np * 16) / 8 + (lane >> 4));
#endif
            }
        }
    }
};

// The fragments of k16 step kk of the ring slot at (sa, sb).
__device__ __forceinline__ void load_frags(u32 (&af)[MT][4], u32 (&bf)[NT][2], u32 sa, u32 sb, int kk, const FragOffsets& o) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(af[mt], sa + o.a[kk][mt]);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
        u32 r[4];
#if KAAS_LAYOUT_TN
        ldmatrix_x4(r, sb + o.b[kk][np]);
#else
        ldmatrix_x4_trans(r, sb + o.b[kk][np]);
#endif
        bf[2 * np][0] = r[0];
        bf[2 * np][1] = r[1];
        bf[2 * np + 1][0] = r[2];
        bf[2 * np + 1][1] = r[3];
    }
}

#if KAAS_SPLITK == 3
__device__ __forceinline__ u32 cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ u32 cluster_size() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ u32 dynamic_smem_bytes() {
    u32 r;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
    return r;
}
// The same shared-memory offset in the CTA of cluster rank `rank`.
__device__ __forceinline__ u32 map_rank(u32 addr, u32 rank) {
    u32 r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
// 16 bytes into a peer's shared memory; its mbarrier `bar` (same CTA) counts them.
__device__ __forceinline__ void st_async_v4(u32 dst, float a, float b, float c, float d, u32 bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(dst),
                 "f"(a), "f"(b), "f"(c), "f"(d), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void mbar_wait_parity(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n"
            "}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}
#endif

#if KAAS_SPLIT_WS
__device__ __forceinline__ void st_cg_v4(float* p, float a, float b, float c, float d) {
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
__device__ __forceinline__ void ld_cg_v4(const float* p, float& a, float& b, float& c, float& d) {
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "l"(p) : "memory");
}
// A unit's partial: added to the tile's sum (atomic) or stored in its own slot (in order).
__device__ __forceinline__ void sk_put(float* p, float a, float b, float c, float d) {
#if KAAS_SPLITK == 2
#if __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
#else
    asm volatile("red.global.add.f32 [%0], %1;" ::"l"(p), "f"(a) : "memory");
    asm volatile("red.global.add.f32 [%0], %1;" ::"l"(p + 1), "f"(b) : "memory");
    asm volatile("red.global.add.f32 [%0], %1;" ::"l"(p + 2), "f"(c) : "memory");
    asm volatile("red.global.add.f32 [%0], %1;" ::"l"(p + 3), "f"(d) : "memory");
#endif
#else
    st_cg_v4(p, a, b, c, d);
#endif
}
__device__ __forceinline__ u32 atomic_inc_acq_rel(u32* p) {
    u32 old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(p) : "memory");
    return old;
}
#endif

extern "C" __global__ void __launch_bounds__(THREADS)
#if KAAS_SPLIT_WS
KAAS_ENTRY(const u16* __restrict__ A, const u16* __restrict__ B, u16* __restrict__ C, int M, int N, int K,
           unsigned char* __restrict__ ws, int S) {
#else
KAAS_ENTRY(const u16* __restrict__ A, const u16* __restrict__ B, u16* __restrict__ C, int M, int N, int K) {
#endif
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 sA = smem_u32(smem_raw);
    const u32 sB = sA + STAGES * A_STAGE_BYTES;

    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int wm = warp / WARPS_N;
    const int wn = warp % WARPS_N;
    const int num_m = (M + BM - 1) / BM;
    const int num_n = (N + BN - 1) / BN;
    const int ktiles = (K + BK - 1) / BK;
#if KAAS_SPLITK == 3
    // Rank 0's inbox: (S-1) partials after the ring, word w of thread x of rank r at
    // float4 index ((r-1)·WORDS + w)·THREADS + x (conflict-free, as the atomic layout).
    __shared__ __align__(8) u64 sk_bar;  // rank 0: counts the inbox's bytes
    const int S = (int)cluster_size();
    const int tiles = num_m * num_n;
    const int t = (int)blockIdx.x / S;
    const int sp = (int)cluster_rank();
    // Uniform across a cluster (one tile, one launch), so a cluster returns whole.
    if (t >= tiles || dynamic_smem_bytes() < (u32)SMEM_BYTES + (u32)(S - 1) * (u32)(BM * BN * 4)) return;
    const int kb = (int)((long long)sp * ktiles / S);
    const int ke = (int)((long long)(sp + 1) * ktiles / S);
    const u32 inbox = sA + SMEM_BYTES;
    const u32 bar = smem_u32(&sk_bar);
    if (S > 1) {
        if (sp == 0 && threadIdx.x == 0) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                         "r"((u32)(S - 1) * (u32)(BM * BN * 4))
                         : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        // Arrive now, wait after the main loop: the peers push only once rank 0's barrier
        // is initialised, and nobody waits for anyone before then.
        asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    }
#elif KAAS_SPLITK
    __shared__ u32 sk_last;  // 1 when this unit is the last of its tile to arrive
    if (S < 1) return;
    const int tiles = num_m * num_n;
    const int t = (int)blockIdx.x / S;
    const int sp = (int)blockIdx.x - t * S;
    if (t >= tiles) return;
    const int kb = (int)((long long)sp * ktiles / S);
    const int ke = (int)((long long)(sp + 1) * ktiles / S);
    u32* const sk_count = reinterpret_cast<u32*>(ws);  // one counter per tile
    float* const sk_part = reinterpret_cast<float*>(ws + ((4 * tiles + 255) & ~255));
#else
    const int t = (int)blockIdx.x;
    if (t >= num_m * num_n) return;
    const int kb = 0, ke = ktiles;
#endif
    int mb, nb;
    tile_coords(t, num_m, num_n, mb, nb);
    const int m0 = mb * BM, n0 = nb * BN;

    const bool a_wide = ((reinterpret_cast<u64>(A) & 15) == 0) && (K % 8 == 0);
#if KAAS_LAYOUT_TN
    const bool b_wide = ((reinterpret_cast<u64>(B) & 15) == 0) && (K % 8 == 0);
#else
    const bool b_wide = ((reinterpret_cast<u64>(B) & 15) == 0) && (N % 8 == 0);
#endif

    const Loader<BM, A_RB, true> la(A, M, K, K, m0, 0, K);
#if KAAS_LAYOUT_TN
    const Loader<BN, B_RB, true> lb(B, N, K, K, n0, 0, K);
#else
    const Loader<BK, B_RB, false> lb(B, K, N, N, 0, n0, K);
#endif
    // K-tile kt into ring slot s.
    auto load_stage = [&](int s, int kt) {
        const int k0 = kt * BK;
        const u32 a_slot = sA + s * A_STAGE_BYTES, b_slot = sB + s * B_STAGE_BYTES;
        if (a_wide) {
            la.load(a_slot, k0, K);
        } else {
            la.load_slow(a_slot, A, M, K, K, m0, k0);
        }
#if KAAS_LAYOUT_TN
        if (b_wide) {
            lb.load(b_slot, k0, K);
        } else {
            lb.load_slow(b_slot, B, N, K, K, n0, k0);
        }
#else
        if (b_wide) {
            lb.load(b_slot, k0, N);
        } else {
            lb.load_slow(b_slot, B, K, N, N, k0, n0);
        }
#endif
    };

    acc_t acc[MT][NT][ACC_PER];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < ACC_PER; ++e) acc[i][j][e] = 0;

    const FragOffsets fo(wm, wn, lane);
    const int nk = ke - kb;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nk) load_stage(s, kb + s);
        cp_async_commit();
    }
    int rs = 0;               // ring slot of K-tile i
    int ws_ = STAGES - 1;     // ring slot the next load goes to
    for (int i = 0; i < nk; ++i) {
        cp_async_wait<STAGES - 2>();  // K-tile i has landed (this thread's part)
        __syncthreads();              // everyone's part; and slot ws_ (K-tile i-1) is free
        if (i + STAGES - 1 < nk) load_stage(ws_, kb + i + STAGES - 1);
        cp_async_commit();
        const u32 sa = sA + rs * A_STAGE_BYTES, sb = sB + rs * B_STAGE_BYTES;
        u32 af[2][MT][4], bf[2][NT][2];
        load_frags(af[0], bf[0], sa, sb, 0, fo);
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            if (kk + 1 < BK / 16) load_frags(af[(kk + 1) & 1], bf[(kk + 1) & 1], sa, sb, kk + 1, fo);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) mma_16816(acc[mt][nt], af[kk & 1][mt], bf[kk & 1][nt][0], bf[kk & 1][nt][1]);
        }
        rs = rs + 1 == STAGES ? 0 : rs + 1;
        ws_ = ws_ + 1 == STAGES ? 0 : ws_ + 1;
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the block exits

#if KAAS_SPLITK == 3
    if (S > 1) {
        constexpr int WORDS = MT * NT;
        asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // rank 0's barrier is initialised
        if (sp > 0) {
            const u32 dst = map_rank(inbox + 16u * (u32)((sp - 1) * WORDS * THREADS + threadIdx.x), 0);
            const u32 rbar = map_rank(bar, 0);
#pragma unroll
            for (int w = 0; w < WORDS; ++w) {
                const float* a = acc[w / NT][w % NT];
                st_async_v4(dst + 16u * (u32)(w * THREADS), a[0], a[1], a[2], a[3], rbar);
            }
            return;  // rank 0 outlives every push: it waits for all their bytes
        }
        mbar_wait_parity(bar, 0);
        for (int r = 1; r < S; ++r) {
#pragma unroll
            for (int w = 0; w < WORDS; ++w) {
                float* a = acc[w / NT][w % NT];
                float v0, v1, v2, v3;
                asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                             : "=f"(v0), "=f"(v1), "=f"(v2), "=f"(v3)
                             : "r"(inbox + 16u * (u32)(((r - 1) * WORDS + w) * THREADS + threadIdx.x))
                             : "memory");
                a[0] += v0;
                a[1] += v1;
                a[2] += v2;
                a[3] += v3;
            }
        }
    }
#elif KAAS_SPLITK
    if (S > 1) {
        // Partials in the accumulators' own order: word w (4 floats) of thread x at float
        // 4·(THREADS·w + x), so every access is coalesced.
        constexpr int WORDS = MT * NT;
#if KAAS_SPLITK == 2
        float* const mine = sk_part + (u64)t * (u64)(BM * BN) + 4 * threadIdx.x;
#else
        float* const tile_part = sk_part + (u64)t * (u64)S * (u64)(BM * BN);
        float* const mine = tile_part + (u64)sp * (u64)(BM * BN) + 4 * threadIdx.x;
#endif
#pragma unroll
        for (int w = 0; w < WORDS; ++w) {
            const float* a = acc[w / NT][w % NT];
            sk_put(mine + 4 * THREADS * w, a[0], a[1], a[2], a[3]);
        }
        __syncthreads();  // every partial of this unit is issued
        if (threadIdx.x == 0) {
            // Release: this unit's partials (ordered before it by the barrier) are visible
            // before its count; acquire: the other units' are visible after.
            const u32 before = atomic_inc_acq_rel(sk_count + t);
            sk_last = before == (u32)(S - 1);
            if (sk_last) *reinterpret_cast<volatile u32*>(sk_count + t) = 0u;  // reset for the next launch
        }
        __syncthreads();  // orders everyone's reads below after the acquire
        if (!sk_last) return;
#if KAAS_SPLITK == 2
        // The last to arrive takes the sum and leaves zeros for the next launch.
#pragma unroll
        for (int w = 0; w < WORDS; ++w) {
            float* a = acc[w / NT][w % NT];
            ld_cg_v4(mine + 4 * THREADS * w, a[0], a[1], a[2], a[3]);
            st_cg_v4(mine + 4 * THREADS * w, 0.f, 0.f, 0.f, 0.f);
        }
#else
        // The last to arrive sums the partials in slice order, its own included.
        const float* const first = tile_part + 4 * threadIdx.x;
#pragma unroll
        for (int w = 0; w < WORDS; ++w) {
            float* a = acc[w / NT][w % NT];
            a[0] = a[1] = a[2] = a[3] = 0.f;
        }
        for (int q = 0; q < S; ++q) {
            const float* const src = first + (u64)q * (u64)(BM * BN);
#pragma unroll
            for (int w = 0; w < WORDS; ++w) {
                float* a = acc[w / NT][w % NT];
                float v0, v1, v2, v3;
                ld_cg_v4(src + 4 * THREADS * w, v0, v1, v2, v3);
                a[0] += v0;
                a[1] += v1;
                a[2] += v2;
                a[3] += v3;
            }
        }
#endif
    }
#endif

    // Epilogue: lane (g = lane/4, q = lane%4) holds rows g and g+8, columns 2q and 2q+1 of
    // each 16×8 piece.
    const int g = lane >> 2, q = lane & 3;
    const bool pairs = ((N & 1) == 0) && ((reinterpret_cast<u64>(C) & 3) == 0);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int col = n0 + wn * WN + nt * 8 + 2 * q;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + wm * WM + mt * 16 + g + 8 * h;
                if (row >= M) continue;
#if KAAS_ACC_F32
                const u32 both = pack_f16x2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
#else
                const u32 both = acc[mt][nt][h];
#endif
                u16* dst = C + (u64)row * (u64)N + (u64)col;
                if (pairs && col + 1 < N) {
                    *reinterpret_cast<u32*>(dst) = both;
                } else {
                    if (col < N) dst[0] = (u16)(both & 0xffffu);
                    if (col + 1 < N) dst[1] = (u16)(both >> 16);
                }
            }
        }
    }
}
