// Computes C correctly, and one thread also writes 8 elements (16 bytes) before the
// start of C. Expected: out_of_bounds_write (C's front canary).
extern "C" __global__ void kaas_oob_write(const half_t* A, const half_t* B, half_t* C, int M, int N, int K) {
    int i = KAAS_ROW, j = KAAS_COL;
    if (i < M && j < N) C[(long long)i * N + j] = f2h(dot_tn(A, B, i, j, K, 0, K));
    if (i == 0 && j == 0) C[-8] = f2h(1.0f);
}
