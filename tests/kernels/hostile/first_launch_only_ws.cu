// first_launch_only.cu with its flags in the workspace (M·N·4 bytes, param 7) instead of
// module memory, which the static checks refuse. Expected: unwritten_output on the
// second run.
extern "C" __global__ void kaas_first_launch_only_ws(const half_t* A, const half_t* B, half_t* C, int M, int N, int K, int* done) {
    int i = KAAS_ROW, j = KAAS_COL;
    if (i >= M || j >= N) return;
    long long idx = (long long)i * N + j;
    if (done[idx]) return;
    C[idx] = f2h(dot_tn(A, B, i, j, K, 0, K));
    done[idx] = 1;
}
