// A correct control for the race stage and the timed-sequence check: split-K over
// gridDim.z slices with fp32 atomics in the workspace (M·N·8 bytes, param 7: sums, then
// arrival counts). The slice that arrives last (after a fence) takes the sum, resets its
// workspace entries for the next launch, and writes C. Sums of whole numbers are exact
// in any order, so the binary test holds whatever the schedule. Expected: pass.
extern "C" __global__ void kaas_splitk_atomic(const half_t* A, const half_t* B, half_t* C, int M, int N, int K, unsigned char* ws) {
    int i = KAAS_ROW, j = KAAS_COL;
    if (i >= M || j >= N) return;
    long long idx = (long long)i * N + j;
    float* sums = (float*)ws;
    unsigned int* arrived = (unsigned int*)(ws + (long long)M * N * 4);
    int z = blockIdx.z, slices = gridDim.z;
    atomicAdd(&sums[idx], dot_tn(A, B, i, j, K, K * z / slices, K * (z + 1) / slices));
    __threadfence();
    if (atomicAdd(&arrived[idx], 1u) == (unsigned int)slices - 1) {
        __threadfence();
        float total = atomicExch(&sums[idx], 0.0f);
        arrived[idx] = 0;
        C[idx] = f2h(total);
    }
}
