// Assumes the grid exactly tiles C and has no bounds check; its manifest launches two
// more rows of blocks than C has (grid.y = M/16 + 2), so those blocks write 32 rows past
// the end of C. Expected: out_of_bounds_write (C's back canary).
extern "C" __global__ void kaas_unguarded_grid(const half_t* A, const half_t* B, half_t* C, int M, int N, int K) {
    int i = KAAS_ROW, j = KAAS_COL;
    C[(long long)i * N + j] = f2h(dot_tn(A, B, i, j, K, 0, K));
}
