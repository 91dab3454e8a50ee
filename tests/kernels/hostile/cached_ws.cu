// cached.cu with its cache in the workspace (M·N·10 bytes, param 7) instead of module
// memory, which the static checks refuse: outputs remembered per address and shape.
// Expected: exact_mismatch on the second binary run (fresh inputs, same buffers).
extern "C" __global__ void kaas_cached_ws(const half_t* A, const half_t* B, half_t* C, int M, int N, int K, unsigned char* ws) {
    int i = KAAS_ROW, j = KAAS_COL;
    if (i >= M || j >= N) return;
    long long idx = (long long)i * N + j;
    unsigned long long* keys = (unsigned long long*)ws;
    half_t* values = (half_t*)(ws + (long long)M * N * 8);
    unsigned long long key = ((unsigned long long)A ^ ((unsigned long long)B << 1) ^ ((unsigned long long)M << 40) ^
                              ((unsigned long long)N << 20) ^ (unsigned long long)K) | 1ull;
    if (keys[idx] == key) {
        C[idx] = values[idx];
        return;
    }
    half_t v = f2h(dot_tn(A, B, i, j, K, 0, K));
    C[idx] = v;
    values[idx] = v;
    keys[idx] = key;
}
