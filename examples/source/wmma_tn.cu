// C = A·Bᵀ with WMMA tensor-core fragments (the `tn` layout of kaas.hgemm.v1):
// A M×K, B N×K and C M×N, all row-major fp16, accumulated in fp32.
//
// One block computes a BM×BN tile of C with 8 warps arranged 2×4; each warp holds
// (BM/2)×(BN/4) of the tile as 16×16 accumulator fragments. K advances BK at a time
// through shared memory whose rows are padded by 8 halves (16 bytes), which keeps every
// fragment pointer 32-byte aligned (WMMA requires it) and spreads rows over the banks.
//
// Requires K % 8 == 0 (rows are read 16 bytes at a time); M and N are free (edges are
// zero-filled on load and masked on store).
#include <mma.h>
#include <cuda_fp16.h>

using namespace nvcuda;

template <int BM, int BN, int BK>
__global__ void __launch_bounds__(256) wmma_tn(const half* __restrict__ A, const half* __restrict__ B,
                                               half* __restrict__ C, int M, int N, int K) {
    constexpr int WARPS_M = 2, WARPS_N = 4;
    constexpr int FM = BM / WARPS_M / 16, FN = BN / WARPS_N / 16;
    constexpr int LDS = BK + 8;
    static_assert(BK % 16 == 0 && FM > 0 && FN > 0, "tile must split into 16x16 fragments");

    __shared__ __align__(128) half sA[BM * LDS];
    __shared__ __align__(128) half sB[BN * LDS];
    __shared__ __align__(128) float sC[WARPS_M * WARPS_N][16 * 16];

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < K; k0 += BK) {
        // Stage the A and B tiles, 8 halves per thread per step; outside the matrix, zeros.
        for (int v = threadIdx.x; v < BM * BK / 8; v += blockDim.x) {
            int r = v / (BK / 8), c = (v % (BK / 8)) * 8;
            uint4 x = make_uint4(0, 0, 0, 0);
            if (m0 + r < M && k0 + c < K) x = *reinterpret_cast<const uint4*>(A + (size_t)(m0 + r) * K + k0 + c);
            *reinterpret_cast<uint4*>(sA + r * LDS + c) = x;
        }
        for (int v = threadIdx.x; v < BN * BK / 8; v += blockDim.x) {
            int r = v / (BK / 8), c = (v % (BK / 8)) * 8;
            uint4 x = make_uint4(0, 0, 0, 0);
            if (n0 + r < N && k0 + c < K) x = *reinterpret_cast<const uint4*>(B + (size_t)(n0 + r) * K + k0 + c);
            *reinterpret_cast<uint4*>(sB + r * LDS + c) = x;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            // B tile rows are N: read as a column-major K×N operand.
            wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa[FM];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb[FN];
#pragma unroll
            for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(fa[i], sA + ((wm * FM + i) * 16) * LDS + kk, LDS);
#pragma unroll
            for (int j = 0; j < FN; ++j) wmma::load_matrix_sync(fb[j], sB + ((wn * FN + j) * 16) * LDS + kk, LDS);
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }

    // Each fragment goes through the warp's own 16×16 staging square, then to C as fp16.
    float* stage = sC[warp];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            wmma::store_matrix_sync(stage, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 256; e += 32) {
                int r = m0 + (wm * FM + i) * 16 + e / 16, c = n0 + (wn * FN + j) * 16 + e % 16;
                if (r < M && c < N) C[(size_t)r * N + c] = __float2half(stage[e]);
            }
            __syncwarp();
        }
}
