// The memo is C itself: a block skips its work, writing nothing, when its inputs hash as
// they did at its last computation (memo_hash.cu's key) and its tile of C still holds
// what it wrote then (a checksum of the tile, kept beside the key). Verification poisons
// C before every run and the timed-sequence check fills it with 1.0: the checksum
// differs, and the block computes. In the timed rounds C holds the previous launch's
// result, so every launch skips.
// Workspace (param 7): per block a key (first 64 KiB) and a checksum (next 64 KiB).
// Expected: repeat_dependent, from the fresh-input timing.

// Checksum of the block's tile of C, as it holds now; called by every thread.
__device__ unsigned long long c_tile_sum(const half_t* C, int M, int N) {
    __shared__ unsigned long long acc;
    int t = threadIdx.y * blockDim.x + threadIdx.x;
    if (t == 0) acc = 0;
    __syncthreads();
    int i = KAAS_ROW, j = KAAS_COL;
    unsigned long long h = 0;
    if (i < M && j < N) {
        unsigned long long z = ((unsigned long long)t << 16 | C[(long long)i * N + j]) * 0x9E3779B97F4A7C15ull;
        h = (z ^ (z >> 29)) * 0xBF58476D1CE4E5B9ull;
    }
    atomicXor(&acc, h);
    __syncthreads();
    return acc | 1;
}

extern "C" __global__ void kaas_memo_c(const half_t* A, const half_t* B, half_t* C, int M, int N, int K, unsigned char* ws) {
    unsigned long long* keys = (unsigned long long*)ws;
    unsigned long long* sums = (unsigned long long*)(ws + 65536);
    int block = blockIdx.y * gridDim.x + blockIdx.x;
    unsigned long long key = kaas_block_inputs_key(A, B, M, N, K);
    unsigned long long sum = c_tile_sum(C, M, N);
    if (keys[block] == key && sums[block] == sum) return;
    __syncthreads();
    int i = KAAS_ROW, j = KAAS_COL;
    if (i < M && j < N) C[(long long)i * N + j] = f2h(dot_tn(A, B, i, j, K, 0, K));
    __syncthreads();
    unsigned long long written = c_tile_sum(C, M, N);
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        keys[block] = key;
        sums[block] = written;
    }
}
