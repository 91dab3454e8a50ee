// Never terminates: spins on a flag nothing sets. Expected: timeout (the per-launch
// watchdog), and the next job still runs.
__device__ volatile int kaas_never_set = 0;

extern "C" __global__ void kaas_hang(const half_t* A, const half_t* B, half_t* C, int M, int N, int K) {
    while (kaas_never_set == 0) {
        asm volatile("nanosleep.u32 1000;");
    }
    int i = KAAS_ROW, j = KAAS_COL;
    if (i < M && j < N) C[(long long)i * N + j] = f2h(dot_tn(A, B, i, j, K, 0, K));
}
