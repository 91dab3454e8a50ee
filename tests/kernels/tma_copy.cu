// Test kernel for the launcher's tensor maps: copies an operand through a TMA tensor map
// (cp.async.bulk.tensor completing on an mbarrier), one box per block, so a test can check
// that the map the launcher encodes addresses the operand as the layout says. sm_90.
// Params: (const __grid_constant__ CUtensorMap map, half* out, int rows, int cols).
// The map's box is BOX_C (innermost) × BOX_R, no swizzle; out is rows × cols row-major.
#ifndef BOX_C
#define BOX_C 64
#endif
#ifndef BOX_R
#define BOX_R 32
#endif
struct __align__(64) TensorMap { unsigned long long opaque[16]; };

extern "C" __global__ void kaas_tma_copy(const __grid_constant__ TensorMap map, unsigned short* out, int rows, int cols) {
    __shared__ __align__(128) unsigned short tile[BOX_R * BOX_C];
    __shared__ __align__(8) unsigned long long bar;
    const int x = blockIdx.x * BOX_C, y = blockIdx.y * BOX_R;
    const unsigned bar_addr = (unsigned)__cvta_generic_to_shared(&bar);
    const unsigned tile_addr = (unsigned)__cvta_generic_to_shared(tile);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar_addr));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar_addr), "r"(BOX_R * BOX_C * 2) : "memory");
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
            :: "r"(tile_addr), "l"(&map), "r"(x), "r"(y), "r"(bar_addr) : "memory");
    }
    unsigned done = 0;
    while (!done) {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar_addr) : "memory");
    }
    for (int i = threadIdx.x; i < BOX_R * BOX_C; i += blockDim.x) {
        const int r = y + i / BOX_C, c = x + i % BOX_C;
        if (r < rows && c < cols) out[(unsigned long long)r * cols + c] = tile[i];
    }
}
