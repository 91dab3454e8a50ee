// Output caching keyed on the buffer addresses and shape (what a harness that reuses
// buffers "repeats"): the first launch computes and remembers each output; any later
// launch on the same pointers returns the remembered values without reading A or B.
// Passes the first run; fresh inputs in the same buffers expose it. Expected:
// exact_mismatch on the second run.
#define CACHE_CAP (1 << 20)
__device__ half_t kaas_cache[CACHE_CAP];
__device__ unsigned long long kaas_cache_key[CACHE_CAP];

extern "C" __global__ void kaas_cached(const half_t* A, const half_t* B, half_t* C, int M, int N, int K) {
    int i = KAAS_ROW, j = KAAS_COL;
    if (i >= M || j >= N) return;
    long long idx = (long long)i * N + j;
    unsigned long long key = ((unsigned long long)A ^ ((unsigned long long)B << 1) ^ ((unsigned long long)M << 40) ^
                              ((unsigned long long)N << 20) ^ (unsigned long long)K) | 1ull;
    if (idx < CACHE_CAP && kaas_cache_key[idx] == key) {
        C[idx] = kaas_cache[idx];
        return;
    }
    half_t v = f2h(dot_tn(A, B, i, j, K, 0, K));
    C[idx] = v;
    if (idx < CACHE_CAP) {
        kaas_cache[idx] = v;
        kaas_cache_key[idx] = key;
    }
}
