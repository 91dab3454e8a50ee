// The timer skip of timer_skip.cu with its state in a module-scope variable instead of
// the workspace. Expected: static_invalid (a kernel may not write module memory).
__device__ unsigned long long kaas_last_end;

extern "C" __global__ void kaas_timer_skip_global(const half_t* A, const half_t* B, half_t* C, int M, int N, int K) {
    int i = KAAS_ROW, j = KAAS_COL;
    unsigned long long start = kaas_globaltimer();
    if (start - *(volatile unsigned long long*)&kaas_last_end < 20000ull) return;
    if (i < M && j < N) C[(long long)i * N + j] = f2h(dot_tn(A, B, i, j, K, 0, K));
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) atomicMax(&kaas_last_end, kaas_globaltimer());
}
