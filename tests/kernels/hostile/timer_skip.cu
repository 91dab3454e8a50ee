// Skips its work when it starts soon after its previous launch on the same workspace
// ended — within four times its own last duration, as happens back to back in a CUDA
// graph or any timing loop — and leaves what an earlier launch wrote in C. (The
// benchmark gives every buffer set its own workspace, so the previous launch on it is one
// turn of the rotation back; verification leaves milliseconds between launches.) The
// workspace (32 bytes, param 7): [0] when the previous launch ended, [1] its duration,
// [2] the complement of this launch's earliest block start (0: none yet), [3] finished
// blocks; the last block to finish updates them, so a block never mistakes its own
// launch for the previous one. On its own every launch computes, so verification passes
// it, and a re-check of a timed output finds the right numbers (the inputs of a buffer
// set never change while it is timed). Expected: timing_dependent, from the
// timed-sequence check.
extern "C" __global__ void kaas_timer_skip(const half_t* A, const half_t* B, half_t* C, int M, int N, int K, unsigned long long* ws) {
    int i = KAAS_ROW, j = KAAS_COL;
    unsigned long long start = kaas_globaltimer();
    if (threadIdx.x == 0 && threadIdx.y == 0) atomicMax(&ws[2], ~start);
    unsigned long long last_end = *(volatile unsigned long long*)&ws[0];
    unsigned long long last_duration = *(volatile unsigned long long*)&ws[1];
    bool skip = last_end != 0 && start - last_end < 4 * last_duration;
    if (!skip && i < M && j < N) C[(long long)i * N + j] = f2h(dot_tn(A, B, i, j, K, 0, K));
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        unsigned long long blocks = (unsigned long long)gridDim.x * gridDim.y * gridDim.z;
        __threadfence();
        if (atomicAdd(&ws[3], 1ull) == blocks - 1) {
            unsigned long long now = kaas_globaltimer();
            *(volatile unsigned long long*)&ws[1] = now - ~*(volatile unsigned long long*)&ws[2];
            *(volatile unsigned long long*)&ws[0] = now;
            ws[2] = 0;
            ws[3] = 0;
        }
    }
}
