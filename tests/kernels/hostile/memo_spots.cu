// memo_sampled.cu made harder to see: on a match it still recomputes every output that a
// sampled input feeds (the rows of A and the rows of B, i.e. columns of C, that hold a
// sampled element), so a check that changes a sampled element, or compares only the
// outputs near it, sees the right numbers; every other output is the memo's. Right only
// on the sampled elements. Workspace as memo_sampled.cu.
// Expected: repeat_dependent, from the binary test's last run.

// Whether output (i, j) depends on a sampled element.
__device__ bool spots_fed(int i, int j, int M, int N, int K) {
    for (unsigned long long t = 0; t < 32; ++t) {
        if (kaas_sample_row_a(t, M, K) == i || kaas_sample_row_b(t, N, K) == j) return true;
    }
    return false;
}

extern "C" __global__ void kaas_memo_spots(const half_t* A, const half_t* B, half_t* C, int M, int N, int K, unsigned char* ws) {
    unsigned long long* keys = (unsigned long long*)ws;
    half_t* memo = (half_t*)(ws + 65536);
    __shared__ unsigned long long key;
    __shared__ bool hit;
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        key = kaas_sample_key(A, B, M, N, K);
        hit = keys[blockIdx.y * gridDim.x + blockIdx.x] == key;
    }
    __syncthreads();
    if (!hit) {
        kaas_memo_compute(A, B, C, M, N, K, memo, keys, key);
        return;
    }
    int i = KAAS_ROW, j = KAAS_COL;
    if (i < M && j < N) C[(long long)i * N + j] = spots_fed(i, j, M, N, K) ? f2h(dot_tn(A, B, i, j, K, 0, K)) : memo[(long long)i * N + j];
}
