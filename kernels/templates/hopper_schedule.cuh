// The tile schedule of the Hopper template (kernels/templates/hopper_hgemm.cu), which
// includes this file just before its kernel: the grouped raster of cluster tiles, C's
// stores, the named barriers of ping-pong and of the consumers' split reductions, and the
// split-K and stream-K units with their workspace traffic. The configuration's macros
// select what is compiled. The tuner splices this file into the template's text
// (src/tuner/hopper.rs, TEMPLATE); nvcc finds it beside the template.

// Cluster-tile t (in a grouped raster over cluster rows × cluster columns) → (cluster row,
// cluster column).
__device__ __forceinline__ void tile_coords(int t, int num_mc, int& mc, int& nb, int num_n) {
    constexpr int GH = (GROUP_M / CLM) >= 1 ? (GROUP_M / CLM) : 1;  // group height in cluster rows
    const int per_group = GH * num_n;
    const int group = t / per_group;
    const int first = group * GH;
    const int h = min(GH, num_mc - first);
    const int r = t - group * per_group;
    mc = first + r % h;
    nb = r / h;
}

#if KAAS_GRID2D == 2
// The grouped order's 16-row groups on a 3-D grid [min(16, tile rows), tile columns, groups]:
// tile rows fastest, as the 1-D grid's order takes them, without its divisions.
#define KAAS_TILE_COORDS(t, mc, nc) \
    ((void)(t), (mc) = (int)(blockIdx.z * GROUP_M + blockIdx.x), (nc) = (int)blockIdx.y)
#elif KAAS_GRID2D
#define KAAS_TILE_COORDS(t, mc, nc) ((void)(t), (mc) = (int)blockIdx.y, (nc) = (int)blockIdx.x)
#else
#define KAAS_TILE_COORDS(t, mc, nc) tile_coords(t, num_mc, mc, nc, num_nc)
#endif

#if KAAS_SWAP_AB
// Swap-AB: the kernel computes Cᵀ = B·Aᵀ (its M is the problem's N, its N the problem's M),
// and C's row `col` is Cᵀ's column `col`: element (row, col) of Cᵀ lands at col * M + row.
// The lanes of a quad hold neighbouring columns, the quads of a warp neighbouring rows, so
// each column's eight rows are 16 contiguous bytes of C.
__device__ __forceinline__ void store_pair(u16* __restrict__ C, int M, int N, int row, int col, u32 v, bool fast,
                                           bool pairs) {
    (void)pairs;
    if (!fast && row >= M) return;
    u16* dst = C + (u64)col * (u64)M + (u64)row;
    if (fast || col < N) dst[0] = (u16)(v & 0xffffu);
    if (fast || col + 1 < N) dst[M] = (u16)(v >> 16);
}
#else
__device__ __forceinline__ void store_pair(u16* __restrict__ C, int M, int N, int row, int col, u32 v, bool fast,
                                           bool pairs) {
    if (fast) {
        *reinterpret_cast<u32*>(C + (u64)row * (u64)N + (u64)col) = v;
    } else if (row < M) {
        u16* dst = C + (u64)row * (u64)N + (u64)col;
        if (pairs && col + 1 < N) {
            *reinterpret_cast<u32*>(dst) = v;
        } else {
            if (col < N) dst[0] = (u16)(v & 0xffffu);
            if (col + 1 < N) dst[1] = (u16)(v >> 16);
        }
    }
}
#endif

#if KAAS_PINGPONG
// Ping-pong turn order: consumer cw waits on named barrier 2 + cw before its main loop and
// hands the turn to the other with barrier 3 - cw after it (128 threads each side).
__device__ __forceinline__ void turn_wait(int cw) { asm volatile("bar.sync %0, 256;" ::"r"(2 + cw) : "memory"); }
__device__ __forceinline__ void turn_pass(int cw) { asm volatile("bar.arrive %0, 256;" ::"r"(3 - cw) : "memory"); }
#endif

#if KAAS_KSPLIT
// K split across the consumers: barrier 4, consumer 1 has stored its partial; barrier 5,
// consumer 0 has added it (so consumer 1 may store the next tile's). 128 threads each side.
__device__ __forceinline__ void red_stored_arrive() { asm volatile("bar.arrive 4, 256;" ::: "memory"); }
__device__ __forceinline__ void red_stored_wait() { asm volatile("bar.sync 4, 256;" ::: "memory"); }
__device__ __forceinline__ void red_taken_arrive() { asm volatile("bar.arrive 5, 256;" ::: "memory"); }
__device__ __forceinline__ void red_taken_wait() { asm volatile("bar.sync 5, 256;" ::: "memory"); }
#endif
#if KAAS_SPLITK == 3 || KAAS_KSPLIT
__device__ __forceinline__ void st_shared_v4(u32 addr, float a, float b, float c, float d) {
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
#endif
#if KAAS_KSPLIT
__device__ __forceinline__ float4 ld_shared_v4(u32 addr) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
    return v;
}
#endif
#if KAAS_SPLITK
// The consumer warpgroups only (the producer never joins): named barrier 1.
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(128 * CONSUMERS) : "memory");
}
#if KAAS_SPLITK == 3
// Reads 16 bytes at shared address `addr` of cluster CTA `rank` (distributed shared memory).
__device__ __forceinline__ float4 ld_peer_v4(u32 addr, u32 rank) {
    float4 v;
    asm volatile(
        "{\n"
        ".reg .b32 ra;\n"
        "mapa.shared::cluster.u32 ra, %4, %5;\n"
        "ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [ra];\n"
        "}\n"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
        : "r"(addr), "r"(rank)
        : "memory");
    return v;
}
#else
// Partials bypass L1 (written and read by different SMs within one launch).
__device__ __forceinline__ void st_cg_v4(float* p, float a, float b, float c, float d) {
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
__device__ __forceinline__ void ld_cg_v4(const float* p, float& a, float& b, float& c, float& d) {
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "l"(p) : "memory");
}
// A unit's partial: added to the tile's sum (atomic) or stored in its own slot (in order).
__device__ __forceinline__ void sk_put(float* p, float a, float b, float c, float d) {
#if KAAS_SPLITK == 2
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
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
// Unit u of a split-K grid: its tile, its slice, and the slice's K-tiles [kb, ke).
__device__ __forceinline__ void split_unit(int u, int S, int ktiles, int& t, int& sp, int& kb, int& ke) {
    t = u / S;
    sp = u - t * S;
    kb = (int)((long long)sp * ktiles / S);
    ke = (int)((long long)(sp + 1) * ktiles / S);
}
#if KAAS_STREAMK
// Stream-K: the segment of a unit's range [it, end) that starts at K-iteration `it`: tile t,
// its K-tiles [kb, ke), up to the tile's end or the range's; returns where the next starts.
// Below `dp_work` (the hybrid's whole tiles) that is the unit's next whole tile, `step`
// iterations on (G tiles), and after its last one the start of its cut range, `sk`.
__device__ __forceinline__ long long stream_unit(long long it, long long end, long long dp_work, long long step, long long sk, int ktiles, int& t, int& kb, int& ke) {
    t = (int)(it / ktiles);
    kb = (int)(it - (long long)t * ktiles);
    ke = (int)min((long long)ktiles, (long long)kb + (end - it));
    if (it < dp_work) return it + step < dp_work ? it + step : sk;
    return it + (ke - kb);
}
// The unit whose range holds K-iteration i (of the W cut into S ranges): the largest g
// with g * W / S <= i.
__device__ __forceinline__ int stream_owner(long long i, long long W, int S) {
    return (int)(((i + 1) * S - 1) / W);
}
#endif
// K-tiles [KAAS_KB, KAAS_KE) of the unit; without split-K the whole of K.
#define KAAS_KB kb
#define KAAS_KE ke
#define KAAS_HAS_K (ke > kb)
#else
#define KAAS_KB 0
#define KAAS_KE ktiles
#define KAAS_HAS_K ktiles > 0
#endif

