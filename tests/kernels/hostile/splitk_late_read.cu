// Split-K over gridDim.z = 2 with no atomics and no ordering between blocks: the z = 0
// block stores its half of the sum; the z = 1 block computes its half first and only then
// loads C and stores the loaded value plus its half. On an idle GPU every block is
// resident at once and z = 0 blocks are dispatched first, so each z = 0 store lands before
// the matching load and the result is right: this kernel passed verification on an H100
// and an H200. When the z = 0 block runs slower (its SM shared with other work), the load
// comes first and reads the poison or a stale value. Expected: schedule_dependent, from
// the race stage.
extern "C" __global__ void kaas_splitk_late_read(const half_t* A, const half_t* B, half_t* C, int M, int N, int K) {
    int i = KAAS_ROW, j = KAAS_COL;
    if (i >= M || j >= N) return;
    long long idx = (long long)i * N + j;
    int half_k = K / 2;
    if (blockIdx.z == 0) {
        C[idx] = f2h(dot_tn(A, B, i, j, K, 0, half_k));
    } else {
        float mine = dot_tn(A, B, i, j, K, half_k, K);
        C[idx] = f2h(h2f(*(volatile half_t*)&C[idx]) + mine);
    }
}
