// Device helpers of the Hopper template (kernels/templates/hopper_hgemm.cu), which
// includes this file where its helpers section stands: shared-memory addresses, mbarriers,
// TMA loads and stores, clusters, wgmma fences and shared-memory descriptors, each one or
// a few PTX instructions. No knob changes them: the template's parts choose among them
// (a function nothing calls emits nothing). The tuner splices this file into the
// template's text (src/tuner/hopper/mod.rs, TEMPLATE); nvcc finds it beside the template.

// ─── PTX helpers ────────────────────────────────────────────────────────────────────────
static __device__ __forceinline__ u32 smem_u32(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

static __device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

static __device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
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

static __device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Arrives on the barrier at shared offset `bar` of cluster CTA `rank`: at CTA scope, as
// CUTLASS's ClusterBarrier does, or (RELEASE_CLUSTER) with `.release.cluster`, which made a
// multicast pair about 2x slower (the header of hopper_hgemm.cu, Known limits).
template <bool RELEASE_CLUSTER>
static __device__ __forceinline__ void mbar_arrive_cluster(u32 bar, u32 rank) {
    if constexpr (RELEASE_CLUSTER) {
        asm volatile(
            "{\n"
            ".reg .b32 ra;\n"
            "mapa.shared::cluster.u32 ra, %0, %1;\n"
            "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n"
            "}\n" ::"r"(bar),
            "r"(rank)
            : "memory");
    } else {
        asm volatile(
            "{\n"
            ".reg .b32 ra;\n"
            "mapa.shared::cluster.u32 ra, %0, %1;\n"
            "mbarrier.arrive.shared::cluster.b64 _, [ra];\n"
            "}\n" ::"r"(bar),
            "r"(rank)
            : "memory");
    }
}

static __device__ __forceinline__ void prefetch_tensormap(const TensorMap128* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}

static __device__ __forceinline__ void tma_load(u32 dst, const TensorMap128* map, int c0, int c1, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
            dst),
        "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}

// The TMA-store epilogue: stmatrix into swizzled staging, then a bulk tensor store.
static __device__ __forceinline__ void stmatrix_x4(u32 addr, u32 a, u32 b, u32 c, u32 d) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(a), "r"(b), "r"(c),
                 "r"(d)
                 : "memory");
}
// Orders this thread's generic-proxy writes of shared memory before the async proxy's reads.
static __device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
static __device__ __forceinline__ void tma_store(const TensorMap128* map, u32 src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(
                     reinterpret_cast<u64>(map)),
                 "r"(c0), "r"(c1), "r"(src)
                 : "memory");
}
static __device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's bulk groups still read their shared memory.
template <int N>
static __device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Lands the box at the same shared-memory offset in every CTA of `mask`, and signals each
// CTA's barrier at offset `bar`.
static __device__ __forceinline__ void tma_load_mc(u32 dst, const TensorMap128* map, int c0, int c1, u32 bar, u16 mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
        "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
        : "memory");
}

static __device__ __forceinline__ u32 cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

static __device__ __forceinline__ u32 cluster_size() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}

static __device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
// A cluster barrier that orders nothing before it: for threads whose earlier writes no peer
// reads. The release form compiles to MEMBAR.ALL.GPU, which waits for every global store
// in flight (the epilogue's C stores) before the CTA may arrive.
static __device__ __forceinline__ void cluster_sync_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// Register reallocation between warpgroups (a multiple of 8, 24 to 256 per thread).
template <int N>
static __device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
static __device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

static __device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
static __device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
static __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Shared-memory matrix descriptor, 128-byte swizzle (mode 1 in bits 62..63).
static __device__ __forceinline__ u64 smem_desc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32) | (1ull << 62);
}
// KAAS_DESC_UNIFORM=1: a descriptor is its slot's base descriptor plus the byte offset / 16
// (the address field is the low 14 bits; shared memory < 256 KiB never carries out of it),
// one add instead of the mask, shifts and ors per wgmma operand.
static __device__ __forceinline__ u64 desc_add(u64 base, u32 byte_offset) { return base + (u64)(byte_offset >> 4); }
// KAAS_DESC_UNIFORM=2: only a descriptor's low word moves (address / 16, and the leading
// byte offset / 16 at bit 16); the high word (stride 1024 B, 128-byte swizzle) is the same
// for every operand. A consumer keeps the low word of its slot-0 descriptors and adds the
// slot's and the k16 step's offset / 16: one 32-bit add per wgmma operand, as cuBLASLt's
// kernels step theirs (one UIADD3 per descriptor per HGMMA, ncu).
static __device__ __forceinline__ u32 desc_lo(u32 addr, u32 lbo) { return ((addr & 0x3FFFF) >> 4) | ((lbo >> 4) << 16); }
// The high word comes in as a value ptxas cannot fold (desc_hi), one for A and one for B:
// given the constant, it rematerialized it with a UMOV into each pair before every HGMMA,
// and given one value for both, it copied it into the second pair (SASS).
static __device__ __forceinline__ u64 desc_from_lo(u32 lo, u32 hi) { return ((u64)hi << 32) | lo; }
// (1024 >> 4) | 1 << 30, plus the sign bit of a dimension, 0 in every launch that issues a
// wgmma (M, N, K >= 1).
static __device__ __forceinline__ u32 desc_hi(int dim) { return ((1024u >> 4) | (1u << 30)) + ((u32)dim >> 31); }
// nn's narrow tiles (BN 8, 16 or 32): B's slot is one N-major box, rows of ROW = BN * 2
// bytes per k, swizzled at that width (SWIZZLE: 64B mode 2, 32B mode 3; 8 columns, 16-byte
// rows, no swizzle, mode 0). The tile is one swizzle atom (or core matrix) wide, so only the
// stride between 8-row groups along K matters: 8 rows. Both offsets carry it, so the
// descriptor reads the same whichever of the two the mode takes for the K direction.
template <u32 ROW, u32 SWIZZLE>
static __device__ __forceinline__ u64 smem_desc_nb(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)((8 * ROW) >> 4) << 16) | ((u64)((8 * ROW) >> 4) << 32) |
           ((u64)SWIZZLE << 62);
}
template <u32 ROW, u32 SWIZZLE>
static __device__ __forceinline__ u32 desc_hi_nb(int dim) { return (((8u * ROW) >> 4) | (SWIZZLE << 30)) + ((u32)dim >> 31); }

static __device__ __forceinline__ u32 pack_f16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

