// Does the work on its first launch only; later launches return at once (a device-global
// flag per output remembers). Expected: unwritten_output on the second run.
#define DONE_CAP (1 << 20)
__device__ int kaas_done[DONE_CAP];

extern "C" __global__ void kaas_first_launch_only(const half_t* A, const half_t* B, half_t* C, int M, int N, int K) {
    int i = KAAS_ROW, j = KAAS_COL;
    if (i >= M || j >= N) return;
    long long idx = (long long)i * N + j;
    if (idx < DONE_CAP && kaas_done[idx]) return;
    C[idx] = f2h(dot_tn(A, B, i, j, K, 0, K));
    if (idx < DONE_CAP) kaas_done[idx] = 1;
}
