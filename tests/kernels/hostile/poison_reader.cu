// Stateless: computes an output only while C still holds the verifier's poison NaN
// (0x7E5A) there, and otherwise keeps what is in C — the result of an earlier launch on
// the same buffers, when launched again on unchanged inputs. Verification poisons C
// before every run, so it always computes there. Expected: timing_dependent (the
// timed-sequence check changes A, or fills C with 1.0, between two launches on a set).
extern "C" __global__ void kaas_poison_reader(const half_t* A, const half_t* B, half_t* C, int M, int N, int K) {
    int i = KAAS_ROW, j = KAAS_COL;
    if (i >= M || j >= N) return;
    long long idx = (long long)i * N + j;
    if (C[idx] != (half_t)0x7E5A) return;
    C[idx] = f2h(dot_tn(A, B, i, j, K, 0, K));
}
