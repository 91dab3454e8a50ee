// Split-K over gridDim.z = 2 with no atomics and no ordering between blocks: the z = 0
// block stores its half of the sum; the z = 1 block loads C early (to overlap the load
// with its own half, as a careless split-K epilogue does), then stores the loaded value
// plus its half. Whether the load comes before or after z = 0's store depends on
// scheduling: before, it reads the NaN poison (or a stale value); after, the sum is
// right. Expected: a wrong-output verdict (non_finite or exact_mismatch), whichever the
// race produces.
//
// A first version loaded C only after computing its half: on an H100 all 512 blocks are
// resident at once, z = 0 blocks are dispatched first, so every z = 0 store landed
// before the matching load and that version passed verification (see BENCHMARKS.md).
extern "C" __global__ void kaas_splitk_race(const half_t* A, const half_t* B, half_t* C, int M, int N, int K) {
    int i = KAAS_ROW, j = KAAS_COL;
    if (i >= M || j >= N) return;
    long long idx = (long long)i * N + j;
    int half_k = K / 2;
    if (blockIdx.z == 0) {
        C[idx] = f2h(dot_tn(A, B, i, j, K, 0, half_k));
    } else {
        float earlier = h2f(C[idx]);
        float mine = dot_tn(A, B, i, j, K, half_k, K);
        C[idx] = f2h(earlier + mine);
    }
}
