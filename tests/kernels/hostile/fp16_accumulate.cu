// Accumulates in fp16 (fma.rn.f16: every partial sum rounded to half) while its manifest
// claims acc=f32. Exact on {0,1} inputs (counts below 2048 are fp16 integers), so only
// the deviation test can catch it. Expected: deviation_exceeded.
extern "C" __global__ void kaas_fp16_accumulate(const half_t* A, const half_t* B, half_t* C, int M, int N, int K) {
    int i = KAAS_ROW, j = KAAS_COL;
    if (i >= M || j >= N) return;
    half_t acc = 0;
    for (int k = 0; k < K; ++k) {
        half_t a = A[(long long)i * K + k], b = B[(long long)j * K + k];
        asm("fma.rn.f16 %0, %1, %2, %0;" : "+h"(acc) : "h"(a), "h"(b));
    }
    C[(long long)i * N + j] = acc;
}
