// Computes C, then one thread scribbles on A (3.0 is never a test input value, so the
// change always shows). Expected: input_modified.
extern "C" __global__ void kaas_modify_a(half_t* A, const half_t* B, half_t* C, int M, int N, int K) {
    int i = KAAS_ROW, j = KAAS_COL;
    if (i < M && j < N) C[(long long)i * N + j] = f2h(dot_tn(A, B, i, j, K, 0, K));
    if (i == M - 1 && j == N - 1) A[(long long)(M - 1) * K + K - 1] = f2h(3.0f);
}
