// Split-K over gridDim.z = 2 with no atomics and no ordering between blocks: the z = 0
// block stores its half of the sum, the z = 1 block reads C and adds its half. Whether
// z = 1 reads before or after z = 0's store depends on scheduling: before, it reads the
// NaN poison (or a stale value); after, the sum is right. Expected: a wrong-output
// verdict (non_finite or exact_mismatch), whichever the race produces.
extern "C" __global__ void kaas_splitk_race(const half_t* A, const half_t* B, half_t* C, int M, int N, int K) {
    int i = KAAS_ROW, j = KAAS_COL;
    if (i >= M || j >= N) return;
    long long idx = (long long)i * N + j;
    int half_k = K / 2;
    if (blockIdx.z == 0) {
        C[idx] = f2h(dot_tn(A, B, i, j, K, 0, half_k));
    } else {
        float mine = dot_tn(A, B, i, j, K, half_k, K);
        C[idx] = f2h(h2f(C[idx]) + mine);
    }
}
