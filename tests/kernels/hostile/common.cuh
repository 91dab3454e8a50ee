// Shared by the hostile test kernels (prepended to each file before NVRTC compiles it).
// Each kernel is a plain CUDA-core GEMM for the `tn` layout — A M×K row-major, B N×K
// row-major, C M×N row-major, fp16 in and out, fp32 accumulation — broken in one way.
// Params: (const half_t* A, const half_t* B, half_t* C, int M, int N, int K); block
// (16, 16, 1), one thread per output, grid (ceil(N/16), ceil(M/16), 1) unless a file
// says otherwise. No headers, so NVRTC needs no include path.
typedef unsigned short half_t;

__device__ __forceinline__ float h2f(half_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ half_t f2h(float f) {
    half_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// Σ_{k0 ≤ k < k1} A[i][k]·B[j][k] in fp32.
__device__ __forceinline__ float dot_tn(const half_t* A, const half_t* B, int i, int j, int K, int k0, int k1) {
    float acc = 0.0f;
    for (int k = k0; k < k1; ++k) acc += h2f(A[(long long)i * K + k]) * h2f(B[(long long)j * K + k]);
    return acc;
}

#define KAAS_ROW ((int)(blockIdx.y * blockDim.y + threadIdx.y))
#define KAAS_COL ((int)(blockIdx.x * blockDim.x + threadIdx.x))

// The GPU's global nanosecond timer (what a kernel that detects timing loops reads).
__device__ __forceinline__ unsigned long long kaas_globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
