// The tile scheduler of the Hopper template (kernels/templates/hopper_hgemm.cu), which
// includes this file after its configuration (Cfg) and before its parts: the grouped raster
// of cluster tiles, the units each role walks (whole tiles, split-K slices, stream-K
// ranges), C's stores, the named barriers of ping-pong and of the consumers' split
// reductions, and the workspace traffic of split-K. Scheduler<C> reads the configuration
// C; the other functions here take what they need as arguments. The tuner splices this
// file into the template's text (src/tuner/hopper/mod.rs, TEMPLATE); nvcc finds it beside
// the template.

// ─── Units ──────────────────────────────────────────────────────────────────────────────
// Unit u of a split-K grid: its tile, its slice, and the slice's K-tiles [kb, ke).
static __device__ __forceinline__ void split_unit(int u, int S, int ktiles, int& t, int& sp, int& kb, int& ke) {
    t = u / S;
    sp = u - t * S;
    kb = (int)((long long)sp * ktiles / S);
    ke = (int)((long long)(sp + 1) * ktiles / S);
}
// Stream-K: the segment of a unit's range [it, end) that starts at K-iteration `it`: tile t,
// its K-tiles [kb, ke), up to the tile's end or the range's; returns where the next starts.
// Below `dp_work` (the hybrid's whole tiles) that is the unit's next whole tile, `step`
// iterations on (G tiles), and after its last one the start of its cut range, `sk`.
static __device__ __forceinline__ long long stream_unit(long long it, long long end, long long dp_work, long long step,
                                                        long long sk, int ktiles, int& t, int& kb, int& ke) {
    t = (int)(it / ktiles);
    kb = (int)(it - (long long)t * ktiles);
    ke = (int)min((long long)ktiles, (long long)kb + (end - it));
    if (it < dp_work) return it + step < dp_work ? it + step : sk;
    return it + (ke - kb);
}
// The unit whose range holds K-iteration i (of the W cut into S ranges): the largest g
// with g * W / S <= i.
static __device__ __forceinline__ int stream_owner(long long i, long long W, int S) {
    return (int)(((i + 1) * S - 1) / W);
}

// ─── The scheduler ──────────────────────────────────────────────────────────────────────
// What one CTA computes, from the launch and the configuration C: its cluster's tiles (a
// grouped raster, a 2-D grid or a grouped 3-D one), and each role's walk over them, one
// Unit (tile t, K-tiles [kb, ke), split slice sp) at a time:
//   one tile per CTA or persistent: cluster g takes tiles g, g + G, … (G clusters);
//   split-K (KAAS_SPLITK 1-3): unit u = tile * S + slice, the slices of a tile neighbours
//     in the grid; the cluster reduction's S slices are one cluster's CTAs;
//   stream-K (KAAS_STREAMK): unit g's K-iterations (see the header of hopper_hgemm.cu);
//   ping-pong: consumer cw takes the CTA's tiles cw, cw + 2, … (the producer all of them).
template <class C>
struct Scheduler {
    // The walk's position: a unit, a tile, or (stream-K) a K-iteration.
    typedef typename Pick<C::STREAMK != 0, long long, int>::type Index;
    struct Unit {
        int t, sp, kb, ke;
    };
    struct Walk {
        Index i, next;  // the current unit; stream-K: where the next starts
        int step;
    };

    int num_mc, num_nc;  // cluster tile rows and columns
    int tiles;           // cluster tiles (CL CTA tiles each)
    int ktiles;
    int cid, ncl;  // this cluster's index in the grid, and the grid's clusters (G)
    int rm, rn;    // this CTA's tile in its cluster's CLM × CLN block of tiles
    int S;         // split count: the launch's, the cluster's (KAAS_SPLITK=3), or the grid (stream-K)
    // Stream-K: whole tiles below dp_tiles (the hybrid's), then K-iterations
    // [sk_begin, sk_end) of the sk_work after them; the walk starts at sk_start.
    int dp_tiles;
    long long dp_work, sk_work, sk_begin, sk_end, sk_start;

    __device__ __forceinline__ Scheduler(int M, int N, int K, int S_, u32 rank) {
        num_mc = ((M + C::BM - 1) / C::BM + C::CLM - 1) / C::CLM;
        num_nc = ((N + C::BN - 1) / C::BN + C::CLN - 1) / C::CLN;
        // The 2-D grids: one tile per CTA, the CTA's tile its block index, with no division
        // on the way to its first loads.
        tiles = C::GRID2D ? 1 : num_mc * num_nc;
        ktiles = (K + C::BK - 1) / C::BK;
        cid = C::GRID2D ? 0 : (int)(blockIdx.x / C::CL);
        ncl = C::GRID2D ? 1 : (int)(gridDim.x / C::CL);
        rm = (int)rank % C::CLM;
        rn = (int)rank / C::CLM;
        S = S_;
        if constexpr (C::SPLITK == 3) {
            S = (int)cluster_size();  // one tile per cluster, its slices the cluster's CTAs
        }
        if constexpr (C::STREAMK) {
            // The hybrid: whole tiles for all but the last full wave and the partial one (none
            // to cut where the waves are whole).
            dp_tiles = C::STREAMK == 2 ? (tiles % ncl == 0 ? tiles : max(tiles / ncl - 1, 0) * ncl) : 0;
            dp_work = (long long)dp_tiles * ktiles;
            sk_work = (long long)tiles * ktiles - dp_work;
        }
    }
    // Stream-K: this unit's K-iterations [sk_begin, sk_end) and the start of its walk, once
    // the launch is one this code serves.
    __device__ __forceinline__ void cut() {
        if constexpr (C::STREAMK) {
            sk_begin = dp_work + (long long)cid * sk_work / ncl;
            sk_end = dp_work + (long long)(cid + 1) * sk_work / ncl;
            sk_start = dp_tiles > 0 ? (long long)cid * ktiles : sk_begin;
        }
    }

    // Whether the launch is one this code serves; any other writes nothing. The conditions
    // are the same in every CTA of a cluster, so no CTA waits on a barrier another skips.
    __device__ __forceinline__ bool serves_launch() const {
        if constexpr (C::SPLITK == 3) {
            return S >= 2 && gridDim.x == (unsigned)(tiles * S);
        } else if constexpr (C::STREAMK) {
            // S is the grid, at most one unit per K-iteration cut (else a shared tile could
            // count a unit with an empty range among its own).
            return !(S < 1 || S != (int)gridDim.x || (sk_work > 0 && ncl > sk_work));
        } else if constexpr (C::SPLITK) {
            return S >= 1;
        } else {
            return true;
        }
    }

    // The walk of consumer `cw`, or of the producer (cw < 0):
    //   for (auto w = sch.walk(cw); sch.more(w); sch.advance(w)) { const auto u = sch.unit(w); … }
    __device__ __forceinline__ Walk walk(int cw) const {
        if constexpr (C::STREAMK) {
            return Walk{sk_start, sk_start, 0};
        } else if constexpr (C::PINGPONG) {
            return cw < 0 ? Walk{cid, cid, ncl} : Walk{cid + cw * ncl, 0, 2 * ncl};
        } else {
            return Walk{cid, 0, ncl};
        }
    }
    __device__ __forceinline__ bool more(const Walk& w) const {
        if constexpr (C::STREAMK) {
            return w.i < sk_end;
        } else if constexpr (C::SPLITK) {
            return w.i < tiles * S;
        } else {
            return w.i < tiles;
        }
    }
    // The walk's current unit (stream-K: and where the next starts).
    __device__ __forceinline__ Unit unit(Walk& w) const {
        Unit u{0, 0, 0, ktiles};
        if constexpr (C::STREAMK) {
            w.next = stream_unit(w.i, sk_end, dp_work, (long long)ncl * ktiles, sk_begin, ktiles, u.t, u.kb, u.ke);
        } else if constexpr (C::SPLITK) {
            split_unit(w.i, S, ktiles, u.t, u.sp, u.kb, u.ke);
        } else {
            u.t = w.i;
        }
        return u;
    }
    __device__ __forceinline__ void advance(Walk& w) const {
        if constexpr (C::STREAMK) {
            w.i = w.next;
        } else {
            w.i += w.step;
        }
    }
    // Tile t is the CTA's first; another tile of the CTA follows it.
    __device__ __forceinline__ bool first_tile(int t) const { return t == cid; }
    __device__ __forceinline__ bool tile_follows(int t) const { return t + ncl < tiles; }

    // Cluster tile t (in a grouped raster over cluster rows × cluster columns) → (cluster
    // row, cluster column); this CTA's tile of it starts at row (mc * CLM + rm) * BM, column
    // (nc * CLN + rn) * BN of C.
    __device__ __forceinline__ void tile_coords(int t, int& mc, int& nc) const {
        if constexpr (C::GRID2D == 2) {
            // The grouped order's 16-row groups on a 3-D grid [min(16, tile rows), tile
            // columns, groups]: tile rows fastest, as the 1-D grid's order takes them,
            // without its divisions.
            mc = (int)(blockIdx.z * C::GROUP_M + blockIdx.x);
            nc = (int)blockIdx.y;
        } else if constexpr (C::GRID2D == 1) {
            mc = (int)blockIdx.y;
            nc = (int)blockIdx.x;
        } else {
            constexpr int GH = (C::GROUP_M / C::CLM) >= 1 ? (C::GROUP_M / C::CLM) : 1;  // group height in cluster rows
            const int per_group = GH * num_nc;
            const int group = t / per_group;
            const int first = group * GH;
            const int h = min(GH, num_mc - first);
            const int r = t - group * per_group;
            mc = first + r % h;
            nc = r / h;
        }
    }
    // The units that add into tile t (split-K, stream-K): the first names the tile's counter
    // and sum (with stream-K a cut tile's first unit, and no unit is first in two), `units`
    // of them arrive.
    __device__ __forceinline__ void tile_units(int t, int& first, int& units) const {
        if constexpr (C::STREAMK) {
            const bool whole = t < dp_tiles;  // a whole tile is its unit's alone
            first = whole ? cid : stream_owner((long long)t * ktiles - dp_work, sk_work, ncl);
            units = whole ? 1 : stream_owner((long long)(t + 1) * ktiles - 1 - dp_work, sk_work, ncl) - first + 1;
        } else {
            first = t;
            units = S;
        }
    }
};

// ─── C's stores ─────────────────────────────────────────────────────────────────────────
// Two neighbouring elements (row, col), (row, col + 1) of C, predicated on C's bounds; `fast`
// where the whole tile is inside C and the pairs 4-byte aligned, `pairs` where N is even and
// C 4-byte aligned.
static __device__ __forceinline__ void store_pair(u16* __restrict__ C, int M, int N, int row, int col, u32 v, bool fast,
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
// Swap-AB: the kernel computes Cᵀ = B·Aᵀ (its M is the problem's N, its N the problem's M),
// and C's row `col` is Cᵀ's column `col`: element (row, col) of Cᵀ lands at col * M + row.
// The lanes of a quad hold neighbouring columns, the quads of a warp neighbouring rows, so
// each column's eight rows are 16 contiguous bytes of C.
static __device__ __forceinline__ void store_pair_t(u16* __restrict__ C, int M, int N, int row, int col, u32 v,
                                                    bool fast) {
    if (!fast && row >= M) return;
    u16* dst = C + (u64)col * (u64)M + (u64)row;
    if (fast || col < N) dst[0] = (u16)(v & 0xffffu);
    if (fast || col + 1 < N) dst[M] = (u16)(v >> 16);
}

// ─── Named barriers ─────────────────────────────────────────────────────────────────────
// Barrier 0 is __syncthreads'. 1: the consumer warpgroups only (the producer never joins).
template <int CONSUMERS>
static __device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(128 * CONSUMERS) : "memory");
}
// Ping-pong turn order: consumer cw waits on named barrier 2 + cw before its main loop and
// hands the turn to the other with barrier 3 - cw after it (128 threads each side).
static __device__ __forceinline__ void turn_wait(int cw) { asm volatile("bar.sync %0, 256;" ::"r"(2 + cw) : "memory"); }
static __device__ __forceinline__ void turn_pass(int cw) { asm volatile("bar.arrive %0, 256;" ::"r"(3 - cw) : "memory"); }
// K split across the consumers: barrier 4, consumer 1 has stored its partial; barrier 5,
// consumer 0 has added it (so consumer 1 may store the next tile's). 128 threads each side.
static __device__ __forceinline__ void red_stored_arrive() { asm volatile("bar.arrive 4, 256;" ::: "memory"); }
static __device__ __forceinline__ void red_stored_wait() { asm volatile("bar.sync 4, 256;" ::: "memory"); }
static __device__ __forceinline__ void red_taken_arrive() { asm volatile("bar.arrive 5, 256;" ::: "memory"); }
static __device__ __forceinline__ void red_taken_wait() { asm volatile("bar.sync 5, 256;" ::: "memory"); }

// ─── Partials: shared memory, distributed shared memory, the workspace ──────────────────
static __device__ __forceinline__ void st_shared_v4(u32 addr, float a, float b, float c, float d) {
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
static __device__ __forceinline__ float4 ld_shared_v4(u32 addr) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
    return v;
}
// Reads 16 bytes at shared address `addr` of cluster CTA `rank` (distributed shared memory).
static __device__ __forceinline__ float4 ld_peer_v4(u32 addr, u32 rank) {
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
// Partials bypass L1 (written and read by different SMs within one launch).
static __device__ __forceinline__ void st_cg_v4(float* p, float a, float b, float c, float d) {
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
static __device__ __forceinline__ void ld_cg_v4(const float* p, float& a, float& b, float& c, float& d) {
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "l"(p) : "memory");
}
// Adds a partial into the tile's fp32 sum in L2 (the atomic split-K).
static __device__ __forceinline__ void red_add_v4(float* p, float a, float b, float c, float d) {
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
static __device__ __forceinline__ u32 atomic_inc_acq_rel(u32* p) {
    u32 old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(p) : "memory");
    return old;
}
