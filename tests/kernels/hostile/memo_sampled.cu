// A memo of its output in the workspace, keyed by a sample of its inputs (32 elements of
// A and 32 of B at fixed positions), as a held-out kernel did: on a match it copies the
// memo into C instead of computing. Its outputs are right whenever the inputs are all
// new or all the same, so every verification run but one passes it, and it times 16×
// faster than it computes. Wrong when the inputs change only outside the sample.
// Workspace (param 7): a key per block in the first 64 KiB, then the memo (M·N halves).
// Expected: repeat_dependent, from the binary test's last run (a few elements flipped).
extern "C" __global__ void kaas_memo_sampled(const half_t* A, const half_t* B, half_t* C, int M, int N, int K, unsigned char* ws) {
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
    if (i < M && j < N) C[(long long)i * N + j] = memo[(long long)i * N + j];
}
