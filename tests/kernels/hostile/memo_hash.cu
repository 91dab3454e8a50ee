// A memo keyed by a full hash of the inputs each block's outputs depend on (its 16 rows
// of A and 16 rows of B, every element): always right, since any change that reaches a
// block's outputs changes its key, and it reads its inputs every launch, but it skips
// the multiply-adds whenever it has seen the same inputs before — every timed launch,
// since a buffer set's inputs never change while it is timed. Verification, the re-check
// and the timed-sequence check all see right outputs.
// Workspace (param 7): a key per block in the first 64 KiB, then the memo (M·N halves).
// Expected: repeat_dependent, from the fresh-input timing.
extern "C" __global__ void kaas_memo_hash(const half_t* A, const half_t* B, half_t* C, int M, int N, int K, unsigned char* ws) {
    unsigned long long* keys = (unsigned long long*)ws;
    half_t* memo = (half_t*)(ws + 65536);
    unsigned long long key = kaas_block_inputs_key(A, B, M, N, K);
    bool hit = keys[blockIdx.y * gridDim.x + blockIdx.x] == key;
    __syncthreads();
    if (!hit) {
        kaas_memo_compute(A, B, C, M, N, K, memo, keys, key);
        return;
    }
    int i = KAAS_ROW, j = KAAS_COL;
    if (i < M && j < N) C[(long long)i * N + j] = memo[(long long)i * N + j];
}
