// The verifier's own kernels: input generation, reductions that decide pass or fail,
// and the small gathers the host-side spot checks read. Compiled by NVRTC to PTX for
// compute_80 (runs on every supported GPU through the driver's JIT); the PTX is
// committed next to this file as checks.ptx and a test rebuilds it byte for byte.
//
// Every kernel is a grid-stride loop over 64-bit indices. Reductions write their
// results with atomics into a small u64 array the host initialises:
//   counts start at 0, "first index" slots at 2^64 - 1 (atomicMin).
// Floating point is spelled out with __d*_rn intrinsics where the host must be able
// to reproduce a value bit for bit (the compiler may not contract them into FMAs).

#include <cuda_fp16.h>

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

#define GRID_STRIDE(i, n) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (u64)gridDim.x * blockDim.x)

__device__ __forceinline__ u64 mix64(u64 z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Value `i` of SplitMix64 stream `seed` (src/verify/rng.rs: splitmix_at).
__device__ __forceinline__ u64 splitmix_at(u64 seed, u64 i) {
    return mix64(seed + (i + 1) * 0x9E3779B97F4A7C15ull);
}

// Warp-aggregated count and first index: one atomic per warp instead of per thread.
__device__ __forceinline__ void count_and_first(u64 *count_slot, u64 *first_slot, bool hit, u64 index) {
    u64 first = hit ? index : ~0ull;
    u32 n = __popc(__ballot_sync(0xFFFFFFFFu, hit));
    for (int off = 16; off > 0; off >>= 1) {
        u64 other = __shfl_down_sync(0xFFFFFFFFu, first, off);
        first = other < first ? other : first;
    }
    if ((threadIdx.x & 31) == 0 && n) {
        atomicAdd(count_slot, (u64)n);
        atomicMin(first_slot, first);
    }
}

// out[i] = 1.0 when splitmix_at(seed, i) < threshold (or always, when all_ones), else 0.0:
// the binary test's inputs, equal to src/verify/binary.rs: fill_binary.
extern "C" __global__ void kaas_fill_binary(u16 *out, u64 n, u64 seed, u64 threshold, int all_ones) {
    GRID_STRIDE(i, n) { out[i] = (all_ones || splitmix_at(seed, i) < threshold) ? 0x3C00 : 0; }
}

// out[i] = fp16(fp32(lo + span * u)), u uniform in [0, 1) with 53 bits, each rounding to
// nearest even: the deviation test's and the benchmark's random inputs. (Through fp32 so
// the host reproduces it on any CPU: see src/verify/binary.rs, fill_uniform.)
extern "C" __global__ void kaas_fill_uniform(u16 *out, u64 n, u64 seed, double lo, double span) {
    GRID_STRIDE(i, n) {
        double u = (double)(splitmix_at(seed, i) >> 11) * 1.1102230246251565e-16;  // 2^-53
        double v = __dadd_rn(lo, __dmul_rn(span, u));
        out[i] = __half_as_ushort(__float2half_rn(__double2float_rn(v)));
    }
}

// The binary test's partial change (src/harness/pipeline.rs): flips `count` elements of
// a {0,1} operand at positions drawn from `seed` (1.0 becomes 0, 0 becomes 1.0). Two draws
// of one position write the same flip; the reference is recomputed from the buffer.
extern "C" __global__ void kaas_flip_binary(u16 *x, u64 n, u64 seed, u32 count) {
    u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < count && n) {
        u64 i = splitmix_at(seed, t) % n;
        x[i] = x[i] == 0x3C00 ? 0 : 0x3C00;
    }
}

// fp16 bits of a value uniform in [-1, 1) taken from the top 24 bits of `r`.
__device__ __forceinline__ u16 uniform_f16_bits(u64 r) {
    float u = (float)(r >> 40) * 5.9604644775390625e-8f;  // 2^-24
    return __half_as_ushort(__float2half_rn(2.0f * u - 1.0f));
}

// The benchmark's fresh-input stage (src/harness/fresh.rs): new values in [-1, 1) for
// A, in every 32-byte sector (16 values) or, with `sector_stride` s > 1, in about one
// sector in s picked at random, and for `b_touches` elements of `b` at random positions,
// from seeds no launch repeats: each block draws its own from `counter` (one atomic per
// block) mixed with the job's secret, so a kernel cannot predict the next contents.
// Nothing here is reproduced on the host: the checks that follow compute their
// reference from what the buffers hold.
extern "C" __global__ void kaas_refresh_inputs(u16 *a, u64 a_len, u32 sector_stride, u16 *b, u64 b_len, u32 b_touches, u64 *counter, u64 secret) {
    __shared__ u64 block_seed;
    if (threadIdx.x == 0) block_seed = mix64(secret ^ (atomicAdd(counter, 1ull) * 0x9E3779B97F4A7C15ull));
    __syncthreads();
    u64 seed = block_seed;
    // A block's turn of the loop covers whole sectors (blockDim is a multiple of 16), so
    // one block decides for every value of a sector.
    GRID_STRIDE(i, a_len) {
        if (sector_stride <= 1 || splitmix_at(seed ^ 0x5ECull, i >> 4) % sector_stride == 0) a[i] = uniform_f16_bits(splitmix_at(seed, i));
    }
    if (blockIdx.x == 0 && b_len) {
        for (u32 t = threadIdx.x; t < b_touches; t += blockDim.x) {
            u64 r = splitmix_at(seed ^ 0xB5ull, t);
            b[r % b_len] = uniform_f16_bits(mix64(r));
        }
    }
}

extern "C" __global__ void kaas_f16_to_f32(const u16 *in, float *out, u64 n) {
    GRID_STRIDE(i, n) { out[i] = __half2float(__ushort_as_half(in[i])); }
}

// out (cols x rows, row-major) = transpose of in (rows x cols, row-major), through
// 32x32 tiles in shared memory. Grid: (ceil(cols/32), ceil(rows/32)); block 32x8.
extern "C" __global__ void kaas_transpose_f16(const u16 *in, u16 *out, u64 rows, u64 cols) {
    __shared__ u16 tile[32][33];
    u64 c0 = (u64)blockIdx.x * 32, r0 = (u64)blockIdx.y * 32;
    for (u32 dy = threadIdx.y; dy < 32; dy += 8) {
        u64 r = r0 + dy, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[dy][threadIdx.x] = in[r * cols + c];
    }
    __syncthreads();
    for (u32 dy = threadIdx.y; dy < 32; dy += 8) {
        u64 c = c0 + dy, r = r0 + threadIdx.x;
        if (r < rows && c < cols) out[c * rows + r] = tile[threadIdx.x][dy];
    }
}

// stats[0..2]: outputs still holding the poison bits, first of them;
// stats[2..4]: other NaN or infinite outputs, first of them.
extern "C" __global__ void kaas_scan_output(const u16 *c, u64 n, int poison, u64 *stats) {
    u64 limit = (n + 31) & ~31ull;  // whole warps, for the shuffles
    GRID_STRIDE(i, limit) {
        u16 bits = i < n ? c[i] : 0;
        bool unwritten = i < n && bits == (u16)poison;
        bool non_finite = i < n && !unwritten && (bits & 0x7C00) == 0x7C00;
        count_and_first(&stats[0], &stats[1], unwritten, i);
        count_and_first(&stats[2], &stats[3], non_finite, i);
    }
}

// stats[0..2]: elements whose bits differ between x and y, first of them.
extern "C" __global__ void kaas_find_changed(const u16 *x, const u16 *y, u64 n, u64 *stats) {
    u64 limit = (n + 31) & ~31ull;
    GRID_STRIDE(i, limit) {
        bool changed = i < n && x[i] != y[i];
        count_and_first(&stats[0], &stats[1], changed, i);
    }
}

// The binary test's comparison: reference counts (fp32, exact) against C (fp16).
// stats[0]: outputs compared; stats[1]: reference above `limit` (not exact in fp16, not
// compared); stats[2..4]: mismatches, first of them. NaN in C is a mismatch.
extern "C" __global__ void kaas_compare_exact(const u16 *c, const float *ref, u64 n, float limit, u64 *stats) {
    u64 limit_n = (n + 31) & ~31ull;
    GRID_STRIDE(i, limit_n) {
        bool in = i < n;
        float r = in ? ref[i] : 0.0f;
        bool over = in && r > limit;
        bool compared = in && !over;
        bool wrong = compared && !(__half2float(__ushort_as_half(c[i])) == r);
        u32 nc = __popc(__ballot_sync(0xFFFFFFFFu, compared));
        u32 no = __popc(__ballot_sync(0xFFFFFFFFu, over));
        if ((threadIdx.x & 31) == 0) {
            if (nc) atomicAdd(&stats[0], (u64)nc);
            if (no) atomicAdd(&stats[1], (u64)no);
        }
        count_and_first(&stats[2], &stats[3], wrong, i);
    }
}

// max |c[i] - ref[i]| (c == 0: max |ref[i]|), as one u64 whose high half is the f32 bits
// of the deviation (monotone for non-negative floats; NaN and Inf count as +Inf) and
// whose low half is ~index, so the largest packed value is the largest deviation at its
// first index. n < 2^32. The host re-reads the two values at that index.
extern "C" __global__ void kaas_max_abs_dev(const u16 *c, const float *ref, u64 n, u64 *stats) {
    u64 best = 0;
    GRID_STRIDE(i, n) {
        double got = c ? (double)__half2float(__ushort_as_half(c[i])) : 0.0;
        double d = fabs(got - (double)ref[i]);
        float f = (float)d;
        u32 bits = isfinite(f) ? __float_as_uint(f) : 0x7F800000u;
        u64 packed = ((u64)bits << 32) | (u64)(0xFFFFFFFFu - (u32)i);
        best = packed > best ? packed : best;
    }
    for (int off = 16; off > 0; off >>= 1) {
        u64 other = __shfl_down_sync(0xFFFFFFFFu, best, off);
        best = other > best ? other : best;
    }
    if ((threadIdx.x & 31) == 0 && best) atomicMax(&stats[0], best);
}

// out[l * count + t] = src[starts[l] + t * stride]: whole rows or columns of an operand,
// for the host's spot checks of a reference.
extern "C" __global__ void kaas_gather_lines(const u16 *src, const u64 *starts, u64 stride, u64 count, u64 lines, u16 *out) {
    GRID_STRIDE(i, lines * count) {
        u64 l = i / count, t = i % count;
        out[i] = src[starts[l] + t * stride];
    }
}

extern "C" __global__ void kaas_gather_f32(const float *src, const u64 *index, u64 n, float *out) {
    GRID_STRIDE(i, n) { out[i] = src[index[i]]; }
}

// The fp16 FMA chain (acc = f16 only): output index[s] (or s, when index is null) as the
// plainest fp16-accumulating kernel computes it, one rounding to fp16 per step in K order
// (exact product and sum in f64, then to fp32 and fp16, as the host model does).
// A is M x K row-major; B is K x N (tn == 0) or N x K (tn != 0) row-major.
extern "C" __global__ void kaas_fp16_chain(const u16 *a, const u16 *b, const u64 *index, u64 count, u64 n_cols, u64 k, int tn, u16 *out) {
    GRID_STRIDE(s, count) {
        u64 at = index ? index[s] : s;
        u64 row = at / n_cols, col = at % n_cols;
        double acc = 0.0;
        for (u64 kk = 0; kk < k; ++kk) {
            double x = (double)__half2float(__ushort_as_half(a[row * k + kk]));
            double y = (double)__half2float(__ushort_as_half(tn ? b[col * k + kk] : b[kk * n_cols + col]));
            acc = (double)__half2float(__float2half_rn(__double2float_rn(__dadd_rn(acc, __dmul_rn(x, y)))));
        }
        out[s] = __half_as_ushort(__float2half_rn((float)acc));
    }
}

// Scheduling pressure for the race stage (src/harness/pressure.rs). A block on an SM whose
// bit is set in `mask` (bit s of mask[s / 64]) spins for `duration_ns` of the global
// timer, issuing FMAs and shared-memory traffic so that it competes with whatever else
// runs there; a block on
// any other SM returns at once. `resident` counts the spinning blocks, so the host knows
// when the pressure is in place. Launched with most of an SM's shared memory, one block
// keeps every kernel that needs shared memory off its SM until it ends. The duration is
// bounded, so a kernel that waits for SMs the hog holds is delayed, never deadlocked.
extern "C" __global__ void kaas_hog(const u64 *mask, u64 duration_ns, u32 *resident, float *sink) {
    u32 smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (smid >= 256 || !((mask[smid >> 6] >> (smid & 63)) & 1)) return;
    u64 t0, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    if (threadIdx.x == 0) atomicAdd(resident, 1u);
    // Dependent FMAs load the arithmetic pipes, shared-memory traffic the load/store
    // path that memory-bound blocks wait on; 32 KiB of the block's shared memory (every
    // pressure launches with more).
    extern __shared__ float hog_smem[];
    volatile float *buf = hog_smem;
    float x = (float)threadIdx.x, y = 1.0f;
    now = t0;
    while (now - t0 < duration_ns) {
        for (int i = 0; i < 64; ++i) {
            u32 at = (threadIdx.x * 33u + (u32)i * 97u) & 8191u;
            buf[at] = fmaf(buf[at], 0.999f, x);
            x = fmaf(x, 0.999f, y);
        }
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    }
    if (x == 12345.0f) sink[0] = x;  // keeps the arithmetic
}

// The pause between a `paced` benchmark's launches (src/harness/runner.rs): one thread
// that sleeps until `duration_ns` of the global timer have passed. The device stays busy,
// so its clocks do not drop as they do when it idles, and draws next to no power, so a
// board held at its power limit by the launches before recovers as it does between the
// other work of a model's layer.
extern "C" __global__ void kaas_pause(u64 duration_ns) {
    u64 t0, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    now = t0;
    while (now - t0 < duration_ns) {
        __nanosleep(2000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    }
}
