// C = A·Bᵀ with CuTe (the `tn` layout of kaas.hgemm.v1): A M×K, B N×K, C M×N, row-major
// fp16, fp32 accumulation, on SM80 tensor-core MMAs (`mma.sync` m16n8k16), in the style
// of CuTe's tutorial GEMMs.
//
// A block of 128 threads (a 2×2 layout of the 16×8×16 MMA atom) owns a BM×BN tile of C.
// Each K step copies a BM×BK slice of A and BN×BK of B to shared memory, 128 bits per
// thread per copy, K-major; rows are padded by 8 halves so the 16-byte copies stay aligned
// and rows fall on different banks. Then every thread moves its MMA fragments to registers
// and `cute::gemm` runs the tile.
//
// Requires M % BM == 0, N % BN == 0 and K % BK == 0 (no edge handling): submit it for
// shapes that divide.
#include <cute/tensor.hpp>

using namespace cute;

template <int BM, int BN, int BK>
__global__ void __launch_bounds__(128) cute_mma_tn(half_t const* A, half_t const* B, half_t* C, int M, int N, int K) {
    Tensor mA = make_tensor(make_gmem_ptr(A), make_shape(M, K), make_stride(K, Int<1>{}));
    Tensor mB = make_tensor(make_gmem_ptr(B), make_shape(N, K), make_stride(K, Int<1>{}));
    Tensor mC = make_tensor(make_gmem_ptr(C), make_shape(M, N), make_stride(N, Int<1>{}));

    auto tiler = make_shape(Int<BM>{}, Int<BN>{}, Int<BK>{});
    auto coord = make_coord(blockIdx.y, blockIdx.x, _);
    Tensor gA = local_tile(mA, tiler, coord, Step<_1, X, _1>{});  // (BM, BK, k)
    Tensor gB = local_tile(mB, tiler, coord, Step<X, _1, _1>{});  // (BN, BK, k)
    Tensor gC = local_tile(mC, tiler, coord, Step<_1, _1, X>{});  // (BM, BN)

    __shared__ __align__(128) half_t smemA[BM * (BK + 8)];
    __shared__ __align__(128) half_t smemB[BN * (BK + 8)];
    Tensor sA = make_tensor(make_smem_ptr(smemA), make_layout(make_shape(Int<BM>{}, Int<BK>{}), make_stride(Int<BK + 8>{}, Int<1>{})));
    Tensor sB = make_tensor(make_smem_ptr(smemB), make_layout(make_shape(Int<BN>{}, Int<BK>{}), make_stride(Int<BK + 8>{}, Int<1>{})));

    // 128 threads as 32 rows × 4, each copying 8 consecutive halves along K.
    static_assert(BK == 32, "the copy layout covers 32 halves of K");
    auto copy_atom = Copy_Atom<UniversalCopy<uint128_t>, half_t>{};
    auto copy = make_tiled_copy(copy_atom, Layout<Shape<_32, _4>, Stride<_4, _1>>{}, Layout<Shape<_1, _8>>{});
    ThrCopy thr_copy = copy.get_slice(threadIdx.x);
    Tensor tAgA = thr_copy.partition_S(gA);  // (CPY, CPY_M, CPY_K, k)
    Tensor tAsA = thr_copy.partition_D(sA);
    Tensor tBgB = thr_copy.partition_S(gB);
    Tensor tBsB = thr_copy.partition_D(sB);

    TiledMMA mma = make_tiled_mma(SM80_16x8x16_F32F16F16F32_TN{}, Layout<Shape<_2, _2, _1>>{});
    ThrMMA thr_mma = mma.get_slice(threadIdx.x);
    Tensor tCsA = thr_mma.partition_A(sA);  // (MMA, MMA_M, MMA_K)
    Tensor tCsB = thr_mma.partition_B(sB);  // (MMA, MMA_N, MMA_K)
    Tensor tCgC = thr_mma.partition_C(gC);  // (MMA, MMA_M, MMA_N)
    Tensor tCrA = thr_mma.make_fragment_A(tCsA);
    Tensor tCrB = thr_mma.make_fragment_B(tCsB);
    Tensor tCrC = thr_mma.make_fragment_C(tCgC);
    clear(tCrC);

    const int k_tiles = size<2>(gA);
    for (int kt = 0; kt < k_tiles; ++kt) {
        cute::copy(copy, tAgA(_, _, _, kt), tAsA);
        cute::copy(copy, tBgB(_, _, _, kt), tBsB);
        __syncthreads();
        cute::copy(tCsA, tCrA);
        cute::copy(tCsB, tCrB);
        gemm(mma, tCrA, tCrB, tCrC);
        __syncthreads();
    }

    CUTE_UNROLL
    for (int i = 0; i < size(tCrC); ++i) tCgC(i) = half_t(tCrC(i));
}
