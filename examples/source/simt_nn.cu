// C = A·B on CUDA cores (the `nn` layout of kaas.hgemm.v1): A M×K and B K×N, C M×N, all
// row-major fp16, fp32 accumulation. A textbook register-blocked kernel: 256 threads own
// a 64×64 tile of C, 4×4 outputs each (rows ty + 16i, columns tx + 16j, so a warp's
// shared-memory reads fall on distinct banks); K advances 16 at a time through shared
// memory holding the tiles as fp32, A transposed. Any M, N, K.
#include <cuda_fp16.h>

extern "C" __global__ void __launch_bounds__(256) simt_nn_64x64(const __half* __restrict__ A, const __half* __restrict__ B,
                                                               __half* __restrict__ C, int M, int N, int K) {
    __shared__ float sA[16][64 + 4];  // [k][m]
    __shared__ float sB[16][64 + 4];  // [k][n]
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
    float acc[4][4] = {};

    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int e = threadIdx.x; e < 64 * 16; e += 256) {
            int r = e / 16, c = e % 16;
            sA[c][r] = (m0 + r < M && k0 + c < K) ? __half2float(A[(size_t)(m0 + r) * K + k0 + c]) : 0.0f;
        }
        for (int e = threadIdx.x; e < 16 * 64; e += 256) {
            int r = e / 64, c = e % 64;
            sB[r][c] = (k0 + r < K && n0 + c < N) ? __half2float(B[(size_t)(k0 + r) * N + n0 + c]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 16; ++kk) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = sA[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j) b[j] = sB[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            int r = m0 + ty + 16 * i, c = n0 + tx + 16 * j;
            if (r < M && c < N) C[(size_t)r * N + c] = __float2half(acc[i][j]);
        }
}
