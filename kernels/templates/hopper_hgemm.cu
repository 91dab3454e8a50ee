// kaas Hopper HGEMM: C = A·B in fp16 on sm_90a, with TMA, mbarriers and wgmma.mma_async.
// No CUTLASS, no CuTe, no libcu++: inline PTX only. The wgmma wrappers, which depend on no
// knob, are in hopper_wgmma.cuh beside this file: nvcc finds it there, and the tuner splices
// it in where it is included, so NVRTC compiles one self-contained source and needs no
// include path (`--gpu-architecture=compute_90a --std=c++17 -D...`); with nvcc use
// `-gencode arch=compute_90a,code=sm_90a` (plain `-arch=sm_90a` emitted compute_90 PTX here).
//
// ─── Problem ────────────────────────────────────────────────────────────────────────────
// A is M×K row-major, C is M×N row-major (fp16, written with plain stores, predicated, so
// nothing outside C is ever written). B is N×K row-major (KAAS_LAYOUT_TN=1, "tn": both
// operands K-major) or K×N row-major (KAAS_LAYOUT_TN=0, "nn": B is N-major and the wgmma
// reads it with the transpose-B immediate). alpha 1, beta 0.
// KAAS_ACC_F32=1: fp32 accumulators, one rounding to fp16 on output ("acc=f32").
// KAAS_ACC_F32=0: fp16 accumulators (wgmma .f16 D) ("acc=f16").
// Correct for any M, N >= 1 and K >= 1 that the tensor maps accept (rows 16-byte aligned:
// K % 8 == 0, and N % 8 == 0 for nn): tiles that overhang the problem are zero-filled by
// TMA (OOB fill NONE = zeros, also along K, so K need not be a multiple of BK) and the
// epilogue stores only elements inside C.
//
// ─── Configuration (-D macros) ──────────────────────────────────────────────────────────
//   KAAS_BM         block tile rows of C: 64 or 128 with 1 consumer, 128 or 256 with 2,
//                   with 3: 384 (swap-AB) or 192 (not swap-AB) (BM/KAAS_CONSUMERS must be
//                   64 or 128)
//   KAAS_BN         block tile cols of C: 64, 128, 192 or 256 (one wgmma m64nBNk16 per 64 rows;
//                   192 compiles but was never run on a GPU); tn also 8, 16, 24, 32 or 48
//                   (the narrow tiles of the skinny shapes: more blocks; C stored from
//                   registers; 8, one swizzle atom of B per slot, is a trial's); nn also
//                   8, 16 and 32: B's slot is then one N-major box of BN columns, its rows
//                   (BN * 2 bytes) swizzled at that width (32: 64B, 16: 32B, 8: none)
//                   and 160 (BM 256 with two consumers: 160 accumulators per thread;
//                   correct, and slower than the other tiles on 12 of 13 large shapes)
//   KAAS_BK         64 (one 128-byte swizzle atom of fp16 along K); 128 (two atoms per ring
//                   slot: A and tn-B take two TMA boxes each, nn-B boxes are [64, 128]; half the
//                   slots and barrier round trips per K): `kaas tune --trial bk128` offers it
//                   with the tiles of BN <= 64 and fp32 accumulators (entries NxNx128); 256
//                   (four atoms; hopper-probe only, so far: exact on 7 shapes, and 15% less
//                   per K than 128 on 64x16 tiles)
//   KAAS_STAGES     shared-memory ring depth, 2..16 (bounded by the smem formula below)
//   KAAS_CONSUMERS  consumer warpgroups, 1 or 2 (each owns BM/CONSUMERS rows of the tile);
//                   3 for swap-AB's 384-row weight tiles (cooperative, no cluster along N):
//                   512 threads, the producer at 24 registers and each consumer at 160
//                   (24 * 128 + 160 * 384 = 64,512 of 65,536), so a consumer holds at most 64
//                   accumulators (128 rows by BN 64). A's 384 rows are three TMA boxes of
//                   128 (a box is at most 256 rows) into one slot, on one full barrier
//                   expecting the whole slot's bytes. cuBLASLt's pick at 32 tokens by a
//                   35840-row weight on an H200 is such a tile (384×32; 94 tiles, one wave).
//                   Also 3 for 192-row tiles that are not swap-AB (64 rows a consumer, at
//                   most BN 128; A one box of 192 rows): cuBLASLt's pick at 512 tokens by a
//                   35840-row weight on an H200 is 192×128 (B shared by three consumers).
//   KAAS_CLUSTER_M  CTAs per cluster along M: 1 (no cluster), 2, 4 or 8 (the CTAs compute
//                   vertically adjacent tiles with the same B columns; each loads its
//                   1/CLUSTER_M of the B tile and multicasts it to all of them)
//   KAAS_CLUSTER_N  CTAs per cluster along N: 1 (default), 2, 4 or 8 (horizontally adjacent
//                   tiles with the same A rows; each loads its 1/CLUSTER_N of the A tile and
//                   multicasts it). With both, the cluster is CLUSTER_M × CLUSTER_N CTAs (at
//                   most 8), rank r at tile row r % CLUSTER_M, column r / CLUSTER_M. Skinny
//                   shapes: every CTA of a cluster receives its whole A and B tiles, but
//                   reads only its share of the shared operand from L2.
//   KAAS_GROUP_M    tile-order group height in tiles of BM (grouped / "swizzled" raster for
//                   L2 reuse), >= 1; default 16
//   KAAS_ACC_F32    1 (f32) or 0 (f16);   KAAS_LAYOUT_TN  1 (tn) or 0 (nn)
//   KAAS_EPILOGUE   1 (default; BN a multiple of 64): each warp stages 16×64 pieces of its C tile in shared memory
//                   and writes C with coalesced 16-byte stores; 0: 4-byte stores straight
//                   from the accumulators (no staging memory). Not in the entry name: a
//                   catalog that ships both must set KAAS_ENTRY itself.
//                   2 (entries ending `_ts`; BN a multiple of 64, no split-K): a TMA tensor
//                   store. Each warp writes a 16×64 piece of its C rows with stmatrix into
//                   128B-swizzled shared memory (two such 2 KiB buffers per warp), and one lane
//                   stores it with cp.async.bulk.tensor, which clips at C's edges; the warp
//                   goes on without waiting for the global writes, and waits only before it
//                   reuses a buffer until the store two pieces back has read it. C is then a
//                   third tensor map (operand C, box [64, 16], swizzle 128B) in place of the
//                   pointer: params (tensor_map A, tensor_map B, tensor_map C, i32 M, N, K).
//   KAAS_SPLITK     0 (default), 1, 2 or 3: split-K. 1 and 2 take two more params, the
//                   workspace and the split count S (runtime); 3 none (see below); each (tile, split) unit accumulates K-tiles
//                   [s*kt/S, (s+1)*kt/S); the last unit of a tile to arrive (an atomic
//                   counter per tile) writes C and resets the counter, so the workspace is
//                   reusable. 1, in order: each unit stores its fp32 partial, the last sums
//                   the S partials in split order 0..S-1 (bit-identical on every run);
//                   2, atomic: each unit adds its partial to the tile's fp32 sum with
//                   red.global.add (in L2), the last reads the sum and zeroes it (the
//                   order of the fp32 additions, so the last bits, vary from run to run).
//                   3, in a cluster: the S units of a tile are the S CTAs of one cluster
//                   (cluster [S, 1, 1], S = the launch's cluster size, 2..16); each stores
//                   its fp32 partial in its own shared memory (the drained ring), and
//                   after a cluster barrier CTA r sums, in rank order 0..S-1 (bit-identical
//                   on every run), the accumulator words w with w % S == r of all S partials
//                   through distributed shared memory, and writes those elements of C. No
//                   workspace, no global round trip; one tile per cluster (grid = tiles × S).
//   KAAS_STREAMK    0 (default), 1 or 2, with KAAS_SPLITK=2: stream-K. S is the grid (the
//                   launch's block count), G = S / CL units (clusters; CTAs without one);
//                   1: the tiles × ktiles K-iterations are cut into G equal ranges, unit g
//                   taking [g*W/G, (g+1)*W/G) of W = tiles * ktiles, across tile boundaries.
//                   2 (hybrid, entries `_skh`): where the tiles leave a partial last wave,
//                   all but the last one or two waves run whole tiles as the persistent grid
//                   does (unit g takes tiles g, g+G, …), and only the last full wave and the
//                   partial one are cut into G equal ranges; so the tail is balanced and the
//                   units still work on neighbouring tiles at any moment (L2 reuse).
//                   A tile one unit covers alone is written directly; the pieces of a tile
//                   shared by several units are added into an fp32 sum as with KAAS_SPLITK=2,
//                   and the last to arrive writes C. In a cluster each CTA sums its own tile of
//                   the cluster tile (the shared operand stays multicast: a cluster's CTAs take
//                   the same K-ranges). A split tile's first unit names its counters and sums
//                   (no unit is first in two), so the workspace is roundup(4 * S, 256) +
//                   4 * S * BM * BN bytes whatever the tile count. A grid other than S, or G
//                   above the K-iterations cut, writes nothing.
//   KAAS_PINGPONG   0 (default) or 1: ping-pong consumers (needs KAAS_CONSUMERS=2, no split-K).
//                   Each consumer owns whole BM×BN tiles (BM 64 or 128, at most 128
//                   accumulators per thread: 64x128, 64x256, 128x64, 128x128), alternate
//                   tiles of the block; their main loops take strict turns (named barriers
//                   2 and 3), so one consumer's epilogue runs under the other's wgmmas.
//                   Pays off where blocks get several tiles (the persistent grid).
//   KAAS_KSPLIT     0 (default) or 1: K split across the two consumer warpgroups (needs
//                   KAAS_CONSUMERS=2, acc=f32, no split-K, no ping-pong; in a multicast
//                   cluster each slot's consumer releases it in every CTA). Each
//                   consumer owns the whole BM×BN tile (BM 64 or 128) and takes alternate
//                   K-tiles of it (the ring's slots of its parity; STAGES even) into its
//                   own accumulators, so two wgmma chains run where
//                   one would;
//                   consumer 1 then hands its fp32 partial to consumer 0 through shared
//                   memory (BM*BN*4 more bytes), which adds it and writes C. Named barriers
//                   4 (partial stored) and 5 (partial taken, before the CTA's next tile).
//                   cuBLASLt's skinny kernels run 384 threads on tiles of 64×8, which two
//                   consumers could only share this way (ncu). Correct, and seldom faster
//                   (best on 20 of 211 skinny tn shapes, by 2.2% at most): not searched.
//   KAAS_COLSPLIT   0 (default) or 1: the two consumer warpgroups split the tile's columns
//                   instead of its rows (needs KAAS_CONSUMERS=2, BN 128 or 256, no ping-pong,
//                   no K split across consumers, not the cluster reduction): each multiplies
//                   all BM rows of A by its own BN/2 columns of B, so a 64-row tile has two
//                   consumers. cuBLASLt's pick on tn 1024×1024×8192 is such a kernel, 64×128
//                   in our terms with 384 threads (ncu).
//   KAAS_CHAINS     1 (default), 2 or 4 (acc=f32): independent accumulator chains per
//                   consumer. The k16 steps of a K-tile go round-robin to CHAINS sets of
//                   accumulators, summed once after the main loop, so consecutive wgmmas do
//                   not wait on each other's results. Two chains were the best code on 81
//                   of 211 skinny tn shapes (by up to 5.2%) and are searched
//                   there; but a narrow tile's K-tile still costs about 145 ns (64x512x1024:
//                   4.10 µs with two chains, 4.12 without), so that cost is not the
//                   wgmmas' chain.
//   KAAS_ENTRY      the entry's name, e.g. kaas_wgmma_f32_tn_128x256x64_s4_c2_m1_g16: a
//                   head of the tile, ring, consumers, cluster rows and group, then one
//                   suffix per knob not at its default, in the order of the tuner's table
//                   (src/tuner/hopper/mod.rs, AXES; docs/tuner.md), which passes it.
//   KAAS_WAIT0      0 (default) or 1 (not with KAAS_KSPLIT): each consumer waits for a
//                   K-tile's wgmmas right after issuing them and frees its slot at once,
//                   instead of keeping one K-tile in flight and freeing the slot one K-tile
//                   later; as cuBLASLt's 384-thread 64×128 kernel does (ncu:
//                   `WARPGROUP.DEPBAR.LE gsb0, 0x0` after each K-tile's four HGMMAs). The
//                   producer gets the slot one K-tile sooner; the two consumers' wgmmas
//                   fill each other's gaps. Entries add _w0 (before _du).
//   KAAS_DESC_UNIFORM 0 (default) or 1: the consumers' wgmma descriptors as one add of the
//                   byte offset / 16 to the slot's base descriptor, and the warpgroup index
//                   broadcast from lane 0 so that ptxas keeps them in uniform registers (ncu:
//                   the per-thread masks, shifts, ors and register-to-uniform
//                   moves were over half of a 64×256 ping-pong code's instructions); 1–6%
//                   faster on the ping-pong codes and 1.9–2.8% (geomean) on the atomic
//                   split-K ones, the same or slower on the cooperative ones.
//                   2 (entries _dr in place of _du): stepped descriptors, only the low word
//                   moves, one 32-bit add per operand per wgmma, the high word a value
//                   ptxas keeps in the pair (cuBLASLt's loop: two UIADD3 per HGMMA); the
//                   tuner builds every code so (2.2% over plain on the cooperative codes)
//   KAAS_EARLY_COORDS 0 (default) or 1 (entries end _ec): the consumers compute their tile's
//                   origin before its K loop, and an empty asm keeps the compiler from
//                   sinking the tile order's divisions to their one use in the epilogue,
//                   after the last wgmma wait, where they lengthened the critical path by
//                   ~0.1–0.15 µs a tile (64x64 s4 on 64³: 2.02 → 1.88 µs).
//   KAAS_SWAP_AB    0 (default) or 1 (entries end _sw): swap-AB. The code computes
//                   Cᵀ = B·Aᵀ, so the launch passes the problem's B as the kernel's A and A as
//                   its B, and N, M, K as its M, N, K: the weight's rows fill wgmma's 64-row
//                   side and the few rows of activations (tokens) become its N (8 to 256).
//                   The epilogue writes C transposed, straight from registers (no staging,
//                   no TMA store). The kernel's B (the tokens) is K-major on both layouts;
//                   on nn its A (the K×N weight) is M-major, loaded as nn's B is (64-row
//                   boxes by BK) and read with the transpose-A immediate, no cluster along N.
//                   Nothing else in the kernel changes.
//
// ─── Launch (kaas.hgemm.v1) ─────────────────────────────────────────────────────────────
// params: (tensor_map A, tensor_map B, ptr C, i32 M, i32 N, i32 K), in this order;
//   KAAS_SPLITK adds (ptr workspace, i32 S), S >= 1, and needs workspace_bytes =
//   roundup(4 * tiles, 256) + 4 * tiles * BM * BN * (S for KAAS_SPLITK=1, 1 for 2)
//   (counters, then the partials or sums), zero when first used; the kernel leaves the
//   counters (and the sums) zero again. KAAS_SPLITK=3 adds no parameter: S is the cluster
//   size, and the grid must be exactly tiles × S (any other grid writes nothing).
//   A tensor map: operand A, box [64, BM/CLUSTER_N], swizzle "128B" (global dims [K, M]);
//                 BM 384 (three consumers): box [64, 128], three boxes a slot
//   B tensor map, tn: operand B, box [64, BN/CLUSTER_M], swizzle "128B"  (dims [K, N])
//   B tensor map, nn: operand B, box [64, 64/CLUSTER_M], swizzle "128B"  (dims [N, K])
//   KAAS_SWAP_AB: (tensor_map B, box [64, BM/CLUSTER_N] (BM 384: [64, 128]); nn: box [64, BK]
//   (global dims [N, K]); tensor_map A, box [64, BN/CLUSTER_M]; ptr C, i32 N, i32 M, i32 K),
//   and everything below with M and N exchanged.
// block:   [128 * (KAAS_CONSUMERS + 1), 1, 1]   (warpgroup 0 = TMA producer)
// cluster: [KAAS_CLUSTER_M * KAAS_CLUSTER_N, 1, 1]; KAAS_SPLITK=3: [S, 1, 1]
// shared_mem_bytes (dynamic) = STAGES * (BM + BN) * BK * 2 + 1024 + (EPILOGUE && BN % 64 == 0 ? CONSUMERS * 9216 : 0)
//   + (KSPLIT ? BM * BN * 4 : 0)
//   (+ 2 * STAGES * 8 bytes of static shared memory for the mbarriers)
//   e.g. EPILOGUE=1: 128x256x64 s4 c2: 216064; 128x128x64 s6 c2: 216064; 64x128x64 s8 c1: 206848;
//        64x64x64 s8 c1: 141312.  EPILOGUE=0: 128x256x64 s4 c2: 197632.
//   Swap-AB stages nothing: 384x32x64 s4 c3: 214016; 384x64x64 s4 c3: 230400.
// grid:    [G, 1, 1] with tiles = roundup(ceil(M/BM), CLUSTER_M) * roundup(ceil(N/BN), CLUSTER_N):
//   one tile per CTA:  G = tiles   (split-K: G = tiles * S, one unit per CTA)
//   persistent:        G = min(tiles, SMs rounded down to a multiple of the cluster size CL)
//                      (132 on H100 SXM; any G that is a multiple of CL is correct:
//                      each cluster loops over tiles with stride G/CL)
// The same PTX serves both grid choices; the tile order is grouped by KAAS_GROUP_M.
//   KAAS_GRID2D=1 (_2d): one tile per CTA, grid [ceil(N/BN), ceil(M/BM), 1], tile (y, x)
//   KAAS_GRID2D=2 (_2g): one tile per CTA, grid [min(GROUP_M, rows), ceil(N/BN), ceil(rows/GROUP_M)]
//                        with rows = ceil(M/BM), tile row z * GROUP_M + x, column y (the
//                        grouped order; a CTA past the last row returns)
//
// Split-K: unit u = tile * S + slice (the slices of a tile are neighbours in the grid).
//
// ─── Structure ──────────────────────────────────────────────────────────────────────────
// The defines become one configuration type, Cfg; every part is a template on it, and
// `if constexpr` on a knob compiles only the code of its value. The entry packs its
// parameters into Params and calls gemm<Cfg>, which sets up the ring's mbarriers (full:
// expect_tx; empty: one arrival per consumer warp of every CTA of the cluster) and composes:
//   Scheduler<C> (hopper_schedule.cuh): the tile raster, and each role's walk over its units
//     (tile t, K-tiles [kb, ke)): one tile per CTA, persistent, 2-D grids, split-K,
//     stream-K, ping-pong's alternate tiles;
//   producer<C>, warpgroup 0 (setmaxnreg 24 with two or three consumers): one thread waits for each
//     slot's empty barrier and issues its TMA loads (load_a, load_b) on its full one;
//   consumer<C>, warpgroups 1..C (setmaxnreg 240 with two consumers, 160 with three), per unit: Mainloop<C>
//     (wait full, BK/16 × MI wgmma m64nWNk16 with descriptors of one mode, Descriptors<C,
//     DESC>, one K-tile kept in flight with wait_group 1 and the previous slot released),
//     then a reduction where the tile's K is split (ksplit_reduce, cluster_reduce,
//     splitk_reduce), then an epilogue (epilogue_tma, epilogue_staged, epilogue_direct).
// A and tn-B are K-major (rows of 64 fp16 = 128 B, SBO 1024); nn-B is N-major
// (rows of 64 n-values per k, LBO = BK*128 between 64-wide n chunks, SBO 1024, trans-b = 1);
// swap-AB nn's A is M-major the same way (trans-a = 1) and its B K-major.
//
// ─── Known limits (measured on H100 SXM, see scripts/hopper-probe) ───────────────────────
// * KAAS_CLUSTER_M=2 was about 2× SLOWER than CLUSTER_M=1 while the remote release was
//   `mbarrier.arrive.release.cluster` (KAAS_MC_ARRIVE_CTA=0): 128x256 s4 c2 persistent, tn,
//   4096³ 416 µs against 207, 8192³ 3382 against 1606. The default now arrives as CUTLASS's
//   ClusterBarrier does (`mbarrier.arrive.shared::cluster`, release at CTA scope: the
//   slot's wgmmas have completed before it), and m2 runs level with m1 (4096³ 207 against
//   199 µs, 8192³ 1606 against 1586). Timed in the whole search on 8 shapes from
//   512x4096x4096 to 8192³ (2026-11-25) the best m2 code lost to the best m1 code on all 8
//   (4096³ 224 against 190 µs), so the tuner does not search it. Its last cluster barrier
//   was a release one, which waits for the C stores: on skinny shapes clusters of 2 to 8
//   then took about 1-2 µs more than one CTA (64x512x1024: 5.3 against 4.1 µs). Now the
//   producer drains the ring instead (the producer tail, below).
// * acc=f16 accumulates a whole K in fp16, like cuBLAS-TN: its deviation equals cuBLAS-TN's
//   on the tested shapes but exceeded cuBLAS-NN's on nn 64x4096x4096 and nn 100x200x136.
// * Without KAAS_SPLITK, skinny shapes with few output tiles (64×4096×4096, 4096×64×4096)
//   reach only ~0.2–0.67 of cuBLAS.
// * Split-K pays three dependent L2 round trips after the main loop (the partials'
//   release, the counter, the last unit's read); not timed apart, but 64×64×2048 split 16
//   (two K-tiles per slice) takes 4.10 µs where the unsplit kernel takes 2.54 µs on
//   512×64×256. So it wins only where cuBLAS needs 4–8 µs (64×64×2048: 4.10 µs against
//   cuBLASLt's 4.73; 64×128×8192: 4.78 against 5.84). The in-order reduction was slower than the atomic one
//   on 13 of 14 shapes searched exhaustively (up to 1.6×: the last unit reads S partials alone). A GPU-scope fence
//   in every consumer thread instead of one acq_rel atomic cost about 1.1 µs more.
// * Split-K is acc=f32 only and one unit per CTA (no persistent grid). The atomic one
//   (2, not stream-K) also runs in clusters (KAAS_CLUSTER_M/N): a cluster
//   takes one (cluster tile, slice) unit, its CTAs the same K-tiles of adjacent tiles with
//   the shared operand multicast, and each CTA reduces its own tile (counter and partial
//   per CTA tile: the host's tiles, which round up to whole clusters).
// * KAAS_SPLITK=3 (the cluster reduction) is meant for the three round trips above: the
//   reduction is one cluster barrier and S reads of distributed shared memory per word.
//   It passes the verifier, and it is SLOWER than the atomic split-K on all 31 skinny,
//   long-K problems timed (2026-11-25; 64x64x4096 5.79 µs against 4.13), so the tuner does
//   not search it. `barrier.cluster.arrive.release` compiles to MEMBAR.ALL.GPU, a wait for
//   every global store in flight: the barriers that order nothing are relaxed now (5-12%).
//   Beyond that, a cluster's CTAs share a GPC, so 4 and more slices spill a second wave
//   sooner than free CTAs do, and one wave still costs 0.3-0.6 µs more.
// * KAAS_STREAMK=1 (stream-K) is meant for the wave quantization of the mid shapes, where
//   cuBLASLt rarely splits K. It passes the verifier on the H100 (24 cases), and it is
//   SLOWER: timed exhaustively on 351 tn shapes of 2^30-2^36 FLOP the catalog did not win,
//   it was 4.4% or more behind the best other code on every one (2026-11-25), so the
//   tuner does not search it. On the large shapes it is worse still (tn 8192³, 128x256:
//   0.54 × the same tile's one-CTA-per-tile grid): at any moment the CTAs work on tiles
//   spread over all of C, so A and B come from DRAM again and again.
// * KAAS_STREAMK=2 (hybrid) keeps the persistent grid's order for all but the last full
//   wave and the partial one. It passes the verifier (72 cases: alone and in multicast
//   pairs, both layouts, grids of one unit to all tiles cut). Beside the same 128x256
//   tile's other grids on the H100 (tn, 2026-11-26) it is 1.05 × the persistent grid at
//   8192³ (1.00 × its TMA-store twin) but 0.75 × at 4096³, where the cut waves are half of
//   the work: each unit adds two or three 128 KiB fp32 partials with red.add and the last
//   reads them back. Beside the whole space on 8 large shapes it was never the best. The
//   tuner offers it as a trial (--trial stream-k).
// * Ping-pong (KAAS_PINGPONG=1) against the cooperative tiles, tn, graph mode, × cuBLAS's
//   default algorithm: 4096×12288×512 1.11× (0.97×), 4096×4096×1024 1.13× (1.01×),
//   2048×2048×512 1.10× with 64x256 (0.99×); no better at 1024³ or 2048³ (one tile per
//   block) nor at 8192³ with 128x128. Without its turn order it hung: a consumer waited on
//   a full barrier two phases ahead, which a parity wait cannot tell from the current one.

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#ifndef KAAS_BM
#define KAAS_BM 128
#endif
#ifndef KAAS_BN
#define KAAS_BN 256
#endif
#ifndef KAAS_BK
#define KAAS_BK 64
#endif
#ifndef KAAS_STAGES
#define KAAS_STAGES 4
#endif
#ifndef KAAS_CONSUMERS
#define KAAS_CONSUMERS 2
#endif
#ifndef KAAS_CLUSTER_M
#define KAAS_CLUSTER_M 1
#endif
#ifndef KAAS_CLUSTER_N
#define KAAS_CLUSTER_N 1
#endif
#ifndef KAAS_GROUP_M
#define KAAS_GROUP_M 16
#endif
#ifndef KAAS_ACC_F32
#define KAAS_ACC_F32 1
#endif
#ifndef KAAS_EPILOGUE
#define KAAS_EPILOGUE 1
#endif
#ifndef KAAS_LAYOUT_TN
#define KAAS_LAYOUT_TN 1
#endif
#ifndef KAAS_SPLITK
#define KAAS_SPLITK 0
#endif
#ifndef KAAS_PINGPONG
#define KAAS_PINGPONG 0
#endif
#ifndef KAAS_STREAMK
#define KAAS_STREAMK 0
#endif
#ifndef KAAS_KSPLIT
#define KAAS_KSPLIT 0
#endif
#ifndef KAAS_SWAP_AB
#define KAAS_SWAP_AB 0
#endif
#ifndef KAAS_COLSPLIT
#define KAAS_COLSPLIT 0
#endif
#ifndef KAAS_CHAINS
#define KAAS_CHAINS 1
#endif
// The cluster release's arrive: 1 (default) at CTA scope, 0 `.release.cluster` (2× slower).
#ifndef KAAS_MC_ARRIVE_CTA
#define KAAS_MC_ARRIVE_CTA 1
#endif
// Diagnostics only (scripts/hopper-probe; the tuner never sets it, and its results are
// wrong by design): which path a K-tile's time sits on. 0 (default) the kernel;
// 1 loads only (consumers wait for each slot and release it, no wgmma); 2 math only (the
// producer completes each full barrier with a plain arrive, no TMA: wgmmas read whatever
// the ring holds); 3 neither (the barriers' round trips, with the wgmma fence, commit and
// wait of each slot); 4 no C stores; 5 neither, and no wgmma fence, commit or wait (the
// mbarrier round trips alone: 3 minus 5 is what the wgmma synchronisation costs a slot);
// 6 returns at once (the launch of this many threads and this much shared memory); 7 returns
// once the barriers are set up; 8 stages C in shared memory but stores none of it (the staged
// epilogue only: whatever is not NaN); 9 no epilogue but one read of the last accumulator
// (4 plus the wait for the math's result, should 4 let the warp leave before it).
#ifndef KAAS_PROBE
#define KAAS_PROBE 0
#endif

#ifndef KAAS_DESC_UNIFORM
#define KAAS_DESC_UNIFORM 0
#endif
#ifndef KAAS_WAIT0
#define KAAS_WAIT0 0
#endif
#ifndef KAAS_GRID2D
#define KAAS_GRID2D 0
#endif
#ifndef KAAS_EARLY_COORDS
#define KAAS_EARLY_COORDS 0
#endif
// The entry's name: the tuner derives it from the same table as these defines
// (src/tuner/hopper/mod.rs, AXES) and passes it, so the name is spelt in one place.
#ifndef KAAS_ENTRY
#error "KAAS_ENTRY (the entry's name) is not defined"
#endif

// ─── The configuration ──────────────────────────────────────────────────────────────────
// The defines as one type. Every part below is a template on it (C, instantiated with Cfg),
// so an `if constexpr` on a knob compiles only the code of the knob's value.
template <bool B, class T, class F>
struct Pick {
    typedef T type;
};
template <class T, class F>
struct Pick<false, T, F> {
    typedef F type;
};

// What the configuration derives beyond Cfg's members, as functions: each member of Cfg is a
// module-scope constant of the PTX, so a new one would change the text of every code.
// Registers per thread after setmaxnreg: the producer's warpgroup drops to 24 and each
// consumer's rises to consumer_regs, 24·128 + 240·256 = 64,512 with two consumers and
// 24·128 + 160·384 = 64,512 with three, of the SM's 65,536 (one consumer keeps the launch's
// share). acc_budget: the accumulators a consumer thread may hold beside its addresses,
// descriptors and loop state.
static __host__ __device__ constexpr int producer_regs() { return 24; }
static __host__ __device__ constexpr int consumer_regs(int consumers) { return consumers == 3 ? 160 : 240; }
static __host__ __device__ constexpr int acc_budget(int consumers) { return consumers == 3 ? 64 : consumers == 2 ? 160 : 128; }
// A's rows per TMA box, which holds at most 256: this CTA's share of the tile (`slice`, BM /
// CLN) in one box, or, for the 384-row tile of three consumers, one box per consumer's
// `wg_m` rows, all into the slot on its one full barrier.
static __host__ __device__ constexpr int a_box_rows(int slice, int wg_m) { return slice <= 256 ? slice : wg_m; }

struct Cfg {
    // The tile, K per ring slot, the ring's depth, the consumer warpgroups.
    static constexpr int BM = KAAS_BM, BN = KAAS_BN, BK = KAAS_BK, STAGES = KAAS_STAGES;
    static constexpr int CONSUMERS = KAAS_CONSUMERS, THREADS = 128 * (CONSUMERS + 1);
    // The cluster: CLM tile rows (sharing B columns) by CLN tile columns (sharing A rows), CL
    // CTAs.
    static constexpr int CLM = KAAS_CLUSTER_M, CLN = KAAS_CLUSTER_N, CL = CLM * CLN;
    static constexpr int GROUP_M = KAAS_GROUP_M;
    static constexpr bool ACC_F32 = KAAS_ACC_F32, TN = KAAS_LAYOUT_TN;
    // The axes (one value each; the header above says what each does).
    static constexpr int SPLITK = KAAS_SPLITK, STREAMK = KAAS_STREAMK, CHAINS = KAAS_CHAINS;
    static constexpr bool PINGPONG = KAAS_PINGPONG, KSPLIT = KAAS_KSPLIT, COLSPLIT = KAAS_COLSPLIT;
    static constexpr int EPILOGUE = KAAS_EPILOGUE, DESC = KAAS_DESC_UNIFORM, GRID2D = KAAS_GRID2D;
    static constexpr bool WAIT0 = KAAS_WAIT0, EARLY_COORDS = KAAS_EARLY_COORDS, SWAP_AB = KAAS_SWAP_AB;
    static constexpr bool MC_ARRIVE_CTA = KAAS_MC_ARRIVE_CTA;
    // Diagnostics: the paths a KAAS_PROBE variant keeps.
    static constexpr int PROBE = KAAS_PROBE;
    static constexpr bool PROBE_MATH = PROBE != 1 && PROBE != 3 && PROBE != 5;
    static constexpr bool PROBE_LOADS = PROBE != 2 && PROBE != 3 && PROBE != 5;
    static constexpr bool PROBE_SYNC = PROBE != 5;

    // What a consumer warpgroup owns: cooperative, BM / CONSUMERS rows of the tile; ping-pong
    // or K split across the consumers, whole tiles (WHOLE_TILE); column split, all BM rows
    // and BN / 2 columns.
    static constexpr bool WHOLE_TILE = PINGPONG || KSPLIT;
    static constexpr int WG_M = WHOLE_TILE || COLSPLIT ? BM : BM / CONSUMERS;
    static constexpr int WN = COLSPLIT ? BN / 2 : BN;  // the wgmma's N
    static constexpr int MI = WG_M / 64;                // m64 wgmmas per consumer per k16 step
    static constexpr int ACC_REGS = ACC_F32 ? WN / 2 : WN / 4;  // per thread per m64 tile
    typedef Pick<ACC_F32, float, u32>::type acc_t;

    static constexpr int A_STAGE_BYTES = BM * BK * 2;
    static constexpr int B_STAGE_BYTES = BN * BK * 2;
    static constexpr u32 STAGE_TX = A_STAGE_BYTES + B_STAGE_BYTES;  // bytes TMA lands per stage per CTA
    // nn with a tile narrower than one 64-column box: B's slot is one box of BN columns, its
    // rows NB_ROW bytes, swizzled at that width (smem_desc_nb).
    static constexpr bool NN_NARROW = !(TN || SWAP_AB) && BN < 64;
    static constexpr u32 NB_ROW = BN * 2;
    static constexpr u32 NB_SWIZZLE = BN == 32 ? 2 : BN == 16 ? 3 : 0;

    // The staged epilogue writes 64-column pieces; narrower tiles store straight from
    // registers, and so do the swap-AB codes (C transposed, store_pair_t).
    static constexpr bool EPI_STAGED = EPILOGUE == 1 && BN % 64 == 0 && !SWAP_AB;
    static constexpr int EPI_LD = 72;                       // halves per staged row: 64 + 8 pad (conflict-free)
    static constexpr int EPI_WARP_BYTES = 16 * EPI_LD * 2;  // 2304 bytes per consumer warp
    // The TMA-store epilogue: EPI_NB swizzled 16×64 buffers (2 KiB) per consumer warp.
    static constexpr bool EPI_TMA = EPILOGUE == 2;
    static constexpr int EPI_NB = 2;
    static constexpr int EPI_BYTES = EPI_STAGED ? CONSUMERS * 4 * EPI_WARP_BYTES : EPI_TMA ? CONSUMERS * 4 * EPI_NB * 2048 : 0;
    // K split across consumers: consumer 1's fp32 partial tile, after the staging.
    static constexpr int RED_BYTES = KSPLIT ? BM * BN * 4 : 0;
    static constexpr int SMEM_BYTES = STAGES * (BM + BN) * BK * 2 + 1024 + EPI_BYTES + RED_BYTES;  // the launch's dynamic smem

    static_assert(BK == 64 || BK == 128 || BK == 256, "KAAS_BK must be 64, 128 or 256 (one, two or four 128B swizzle atoms of fp16)");
    static_assert(CONSUMERS == 1 || CONSUMERS == 2 || CONSUMERS == 3, "KAAS_CONSUMERS must be 1, 2 or 3");
    static_assert(CONSUMERS != 3 || ((SWAP_AB ? BM == 384 : BM == 192) && !WHOLE_TILE && !COLSPLIT && CLN == 1 && SPLITK != 3),
                  "three consumers: swap-AB's 384-row tiles or 192-row ones, cooperative, no cluster along N, not the cluster reduction");
    static_assert(BM % CONSUMERS == 0 && (WG_M == 64 || WG_M == 128),
                  "BM / CONSUMERS (cooperative) or BM (ping-pong) must be 64 or 128");
    static_assert(CHAINS == 1 || CHAINS == 2 || CHAINS == 4, "KAAS_CHAINS must be 1, 2 or 4");
    static_assert(CHAINS == 1 || ACC_F32, "accumulator chains are summed in fp32: acc=f32 only");
    static_assert(MI * ACC_REGS * CHAINS <= acc_budget(CONSUMERS), "the chains' accumulators would not fit the consumer register budget");
    static_assert(!KSPLIT || (CONSUMERS == 2 && !PINGPONG && SPLITK == 0),
                  "K split across consumers needs two consumers, no ping-pong, no split-K");
    static_assert(!KSPLIT || ACC_F32, "K split across consumers adds fp32 partials: acc=f32 only");
    static_assert(!KSPLIT || STAGES % 2 == 0, "K split across consumers: each takes the slots of one parity");
    static_assert(!COLSPLIT || (CONSUMERS == 2 && (BN == 128 || BN == 256) && !PINGPONG && !KSPLIT),
                  "consumers split the columns of 128 or 256: two consumers, no ping-pong, no K split across them");
    static_assert(!COLSPLIT || SPLITK == 0 || (SPLITK == 2 && !STREAMK), "consumers split the columns without split-K or with the atomic one");
    static_assert(!(WAIT0 && KSPLIT), "K split across consumers frees its slots its own way");
    static_assert(!PINGPONG || CONSUMERS == 2, "ping-pong needs two consumer warpgroups");
    static_assert(!PINGPONG || SPLITK == 0, "ping-pong runs without split-K");
    static_assert(BN == 8 || BN == 16 || BN == 24 || BN == 32 || BN == 48 || BN == 64 || BN == 128 || BN == 160 || BN == 192 || BN == 256,
                  "KAAS_BN must be 8, 16, 24, 32, 48, 64, 128, 160, 192 or 256");
    static_assert(TN || SWAP_AB || BN % 64 == 0 || BN == 8 || BN == 16 || BN == 32,
                  "nn loads B in 64-column boxes, or one box of 8, 16 or 32 columns: KAAS_BN must be a multiple of 64, or 8, 16 or 32");
    static_assert((CLM == 1 || CLM == 2 || CLM == 4 || CLM == 8) && (CLN == 1 || CLN == 2 || CLN == 4 || CLN == 8) && CL <= 8,
                  "KAAS_CLUSTER_M and KAAS_CLUSTER_N must be 1, 2, 4 or 8, and their product at most 8");
    static_assert((BM / CLN) % 8 == 0, "multicast A slices must be whole 8-row swizzle atoms");
    static_assert(((TN || SWAP_AB ? BN : BK) / CLM) % 8 == 0, "multicast B slices must be whole 8-row swizzle atoms");
    static_assert(a_box_rows(BM / CLN, WG_M) <= 256 && (BM / CLN) % a_box_rows(BM / CLN, WG_M) == 0 && (BM / CLN <= 256 || CLN == 1),
                  "a TMA box is at most 256 rows");
    static_assert(STAGES >= 2 && STAGES <= 16, "KAAS_STAGES must be 2..16");
    static_assert(GROUP_M >= 1, "KAAS_GROUP_M must be >= 1");
    static_assert(SPLITK >= 0 && SPLITK <= 3, "KAAS_SPLITK must be 0, 1, 2 or 3");
    static_assert(!SPLITK || CL == 1 || SPLITK == 2, "split-K in a multicast cluster is the atomic one (or stream-K)");
    static_assert(!SPLITK || ACC_F32, "split-K partials are fp32: acc=f32 only");
    // The cluster reduction stores each CTA's fp32 partial tile in its drained ring.
    static_assert(SPLITK != 3 || STAGES * (BM + BN) * BK * 2 >= BM * BN * 4, "the ring cannot hold the tile's fp32 partial");
    static_assert(PROBE >= 0 && PROBE <= 9, "KAAS_PROBE must be 0..9");
    static_assert(EPILOGUE >= 0 && EPILOGUE <= 2, "KAAS_EPILOGUE must be 0, 1 or 2");
    static_assert(!EPI_TMA || (BN % 64 == 0 && SPLITK == 0), "the TMA-store epilogue stores 64-column pieces of unsplit tiles");
    static_assert(PROBE == 0 || (SPLITK == 0 && CL == 1 && !PINGPONG && !KSPLIT), "KAAS_PROBE variants are plain one-CTA codes");
    static_assert((PROBE != 8 && PROBE != 9) || EPI_STAGED,
                  "KAAS_PROBE 8 and 9 take the staged epilogue apart: KAAS_EPILOGUE=1, BN a multiple of 64");
    static_assert(STREAMK == 0 || SPLITK == 2, "stream-K reduces with the atomic split-K (KAAS_SPLITK=2)");
    static_assert(STREAMK >= 0 && STREAMK <= 2, "KAAS_STREAMK must be 0, 1 or 2");
    static_assert(GRID2D >= 0 && GRID2D <= 2, "KAAS_GRID2D must be 0, 1 or 2");
    static_assert(!GRID2D || (SPLITK == 0 && !PINGPONG && CL == 1), "the 2-D grid is one tile per CTA: no split-K, no ping-pong, no cluster");
    static_assert(DESC >= 0 && DESC <= 2, "KAAS_DESC_UNIFORM must be 0, 1 or 2");
    static_assert(!SWAP_AB || (!EPI_TMA && PROBE == 0),
                  "swap-AB codes store C transposed from registers (no TMA store, no probe)");
    static_assert(!SWAP_AB || TN || (CLN == 1 && !WHOLE_TILE && !COLSPLIT),
                  "swap-AB nn loads the weight in 64-row boxes along M: no cluster along N, cooperative consumers");
    static_assert(SMEM_BYTES <= 232448, "shared memory exceeds 227 KiB");
    static_assert(MI * ACC_REGS <= acc_budget(CONSUMERS), "accumulators would not fit the consumer register budget");
};

// The operands' majorness in shared memory. The kernel's B is K-major on tn and on swap-AB
// (there it is the problem's A); its A is M-major only on swap-AB nn (the problem's B, K×N
// row-major), read with the transpose-A immediate. Functions, not Cfg members: each member
// of Cfg is a symbol in the PTX, so a new one would change every code's text.
template <class C>
static __host__ __device__ constexpr bool b_kmajor() { return C::TN || C::SWAP_AB; }
template <class C>
static __host__ __device__ constexpr bool a_mmajor() { return C::SWAP_AB && !C::TN; }

// A CUtensorMap passed by value (128 bytes, 64-byte aligned), opaque to the kernel.
struct __align__(64) TensorMap128 {
    u64 v[16];
};

// The helpers serve every configuration; those a code does not call emit nothing, and are
// not worth a warning each (177: declared but never referenced).
#pragma nv_diag_suppress 177
#include "hopper_ptx.cuh"

#include "hopper_wgmma.cuh"

#include "hopper_schedule.cuh"
#pragma nv_diag_default 177

// The entry's parameters in one struct; those a code does not take are null.
struct Params {
    const TensorMap128* tmA;
    const TensorMap128* tmB;
    const TensorMap128* tmC;  // the TMA-store epilogue's C
    u16* C;                   // the other epilogues' C
    int M, N, K;
    unsigned char* ws;  // split-K (1, 2) and stream-K: the workspace and the split count
    int S;
};

// ─── The ring ───────────────────────────────────────────────────────────────────────────
// Dynamic shared memory: STAGES slots of A, then STAGES of B, then the epilogue's staging
// (EPI_BYTES) and consumer 1's partial (RED_BYTES); each slot's full and empty mbarriers are
// static shared memory, 8 bytes apart.
template <class C>
struct Ring {
    unsigned char* raw;  // the dynamic shared memory (generic address)
    u32 sA, sB, sE;
    u32 full0, empty0;

    __device__ __forceinline__ Ring(unsigned char* smem, u64* full, u64* empty) {
        raw = smem;
        // 128B-swizzled TMA boxes and wgmma atoms need 1024-byte aligned stage buffers.
        sA = (smem_u32(smem) + 1023u) & ~1023u;
        sB = sA + C::STAGES * C::A_STAGE_BYTES;
        sE = sB + C::STAGES * C::B_STAGE_BYTES;
        full0 = smem_u32(full);
        empty0 = smem_u32(empty);
    }
};

// A position in the ring: slot s, in the phase of parity ph.
template <int STAGES>
struct RingPos {
    int s;
    u32 ph;
    __device__ __forceinline__ void advance() {
        if (++s == STAGES) {
            s = 0;
            ph ^= 1u;
        }
    }
};

// Sets up the ring's barriers (one thread): a full barrier completes on the producer's
// arrival with the slot's bytes, an empty one on one arrival per warp of the slot's
// consumer(s) in every CTA of the cluster. The fence releases the inits to the cluster; the
// caller's barrier orders them before any wait.
template <class C>
static __device__ __forceinline__ void ring_init(u32 full0, u32 empty0) {
#pragma unroll
    for (int s = 0; s < C::STAGES; ++s) {
        mbar_init(full0 + 8 * s, 1);
        mbar_init(empty0 + 8 * s, (C::WHOLE_TILE ? 1 : C::CONSUMERS) * 4 * C::CL);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Releases a ring slot: arrives on the slot's empty barrier in every CTA of the cluster
// (each CTA's producer may multicast into this CTA's copy of the slot).
template <class C>
static __device__ __forceinline__ void slot_release(u32 bar) {
    if constexpr (C::CL > 1) {
#pragma unroll
        for (u32 r = 0; r < (u32)C::CL; ++r) mbar_arrive_cluster<!C::MC_ARRIVE_CTA>(bar, r);
    } else {
        mbar_arrive(bar);
    }
}

// ─── The producer ───────────────────────────────────────────────────────────────────────
// K-major rows of a slot (A's, and tn B's): BK/64 swizzle atoms along K, atom `at` holding
// K [k0 + 64at, +64) of ROWS rows from r0. With CL > 1 the rows are shared along the
// cluster: this CTA loads slice `part` into every CTA in `mask`. More rows than one box
// holds (the 384-row tile's A) load as boxes of BOX rows, on the same full barrier; B's
// rows (at most 256) are always one box, so B leaves BOX at its default.
template <int ROWS, int CL, int BK, int BOX = ROWS>
static __device__ __forceinline__ void load_k_major(const TensorMap128* tm, u32 dst, int k0, int r0, u32 fb, int part, u16 mask) {
    constexpr int SLICE = ROWS / CL;
#pragma unroll
    for (int at = 0; at < BK / 64; ++at) {
        if constexpr (CL > 1) {
            tma_load_mc(dst + at * ROWS * 128 + part * SLICE * 128, tm, k0 + 64 * at, r0 + part * SLICE, fb, mask);
        } else if constexpr (SLICE > 256) {
#pragma unroll
            for (int b = 0; b < SLICE / BOX; ++b) tma_load(dst + at * ROWS * 128 + b * BOX * 128, tm, k0 + 64 * at, r0 + b * BOX, fb);
        } else {
            tma_load(dst + at * ROWS * 128, tm, k0 + 64 * at, r0, fb);
        }
    }
}

// A's part of a slot: the tile's BM rows, K-major; shared along the cluster's row (CLN),
// this CTA loading slice rn into every CTA with its rm.
// Swap-AB nn: BM/64 boxes of 64 weight rows (M) by the slot's BK rows of K (M-major), as
// nn's B (no cluster along N, so no multicast).
template <class C>
static __device__ __forceinline__ void load_a(const TensorMap128* tm, u32 dst, int k0, int m0, u32 fb, int rn, u16 mask) {
    if constexpr (a_mmajor<C>()) {
#pragma unroll
        for (int c = 0; c < C::BM / 64; ++c) tma_load(dst + c * C::BK * 128, tm, m0 + 64 * c, k0, fb);
    } else {
        load_k_major<C::BM, C::CLN, C::BK, a_box_rows(C::BM / C::CLN, C::WG_M)>(tm, dst, k0, m0, fb, rn, mask);
    }
}

// B's part of a slot. tn: BK/64 atoms of the tile's BN rows (K-major), as A's; nn: BN/64
// boxes of 64 columns by the slot's BK rows (N-major); nn narrow: one box of all BN columns
// by the BK rows (BN * 2 bytes a row). With CLM > 1 this CTA loads slice rm (of the rows of
// a box) into every CTA of its tile column (`mask`).
template <class C>
static __device__ __forceinline__ void load_b(const TensorMap128* tm, u32 dst, int k0, int n0, u32 fb, int rm, u16 mask) {
    if constexpr (b_kmajor<C>()) {
        load_k_major<C::BN, C::CLM, C::BK>(tm, dst, k0, n0, fb, rm, mask);
    } else if constexpr (C::NN_NARROW) {
        constexpr int SLICE = C::BK / C::CLM;
        if constexpr (C::CLM > 1) {
            tma_load_mc(dst + rm * SLICE * C::NB_ROW, tm, n0, k0 + rm * SLICE, fb, mask);
        } else {
            tma_load(dst, tm, n0, k0, fb);
        }
    } else {
        constexpr int SLICE = C::BK / C::CLM;
#pragma unroll
        for (int c = 0; c < C::BN / 64; ++c) {
            if constexpr (C::CLM > 1) {
                tma_load_mc(dst + c * C::BK * 128 + rm * SLICE * 128, tm, n0 + 64 * c, k0 + rm * SLICE, fb, mask);
            } else {
                tma_load(dst + c * C::BK * 128, tm, n0 + 64 * c, k0, fb);
            }
        }
    }
}

// Warpgroup 0: one thread fills the ring in the walk's order, waiting for each slot's empty
// barrier and landing the slot's bytes on its full one.
template <class C>
static __device__ __forceinline__ void producer(const Params& p, const Ring<C>& ring, const Scheduler<C>& sch, int tid) {
    if constexpr (C::CONSUMERS > 1) setmaxnreg_dec<producer_regs()>();
    if (tid == 0) {
        prefetch_tensormap(p.tmA);
        prefetch_tensormap(p.tmB);
        // Multicast masks: A goes to the CTAs of this tile row (rank rm + CLM*j), B to
        // those of this tile column (ranks CLM*rn .. CLM*rn + CLM-1).
        u16 mask_a = 0, mask_b = 0;
#pragma unroll
        for (int j = 0; j < C::CLN; ++j) mask_a |= (u16)(1u << (sch.rm + C::CLM * j));
#pragma unroll
        for (int i = 0; i < C::CLM; ++i) mask_b |= (u16)(1u << (i + C::CLM * sch.rn));
        RingPos<C::STAGES> pos{0, 0u};
        for (auto w = sch.walk(-1); sch.more(w); sch.advance(w)) {
            const auto u = sch.unit(w);
            int mc, nc;
            sch.tile_coords(u.t, mc, nc);
            const int m0 = (mc * C::CLM + sch.rm) * C::BM;
            const int n0 = (nc * C::CLN + sch.rn) * C::BN;
            for (int kt = u.kb; kt < u.ke; ++kt) {
                // The 2-D grids' one tile: the ring's first pass finds every slot empty.
                if (!C::GRID2D || kt >= C::STAGES) mbar_wait(ring.empty0 + 8 * pos.s, pos.ph ^ 1u);
                const u32 fb = ring.full0 + 8 * pos.s;
                if constexpr (C::PROBE_LOADS) {
                    mbar_expect_tx(fb, C::STAGE_TX);
                    load_a<C>(p.tmA, ring.sA + pos.s * C::A_STAGE_BYTES, kt * C::BK, m0, fb, sch.rn, mask_a);
                    load_b<C>(p.tmB, ring.sB + pos.s * C::B_STAGE_BYTES, kt * C::BK, n0, fb, sch.rm, mask_b);
                } else {
                    mbar_arrive(fb);  // diagnostics: the slot completes without its loads
                }
                pos.advance();
            }
        }
        if constexpr (C::CL > 1) {
            // Producer tail: wait until the consumers of every CTA of the cluster have
            // released each slot's last use, so no peer arrives on this CTA's barriers after
            // it exits. (A release cluster barrier here waited for every C store in flight.)
            for (int i = 0; i < C::STAGES; ++i) {
                mbar_wait(ring.empty0 + 8 * pos.s, pos.ph ^ 1u);
                pos.advance();
            }
        }
    }
    if constexpr (C::SPLITK == 3) cluster_sync_relaxed();  // the consumers' first cluster barrier: every partial is stored
}

// ─── The mainloop ───────────────────────────────────────────────────────────────────────
// wgmma m64nNk16 with the accumulators' type: the wrapper of hopper_wgmma.cuh for N.
template <int N, int TRANS_B, int TRANS_A>
static __device__ __forceinline__ void wgmma(float (&d)[N / 2], u64 da, u64 db) {
    if constexpr (N == 8) wgmma_f32_n8<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 16) wgmma_f32_n16<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 24) wgmma_f32_n24<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 32) wgmma_f32_n32<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 48) wgmma_f32_n48<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 64) wgmma_f32_n64<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 128) wgmma_f32_n128<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 160) wgmma_f32_n160<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 192) wgmma_f32_n192<TRANS_B, TRANS_A>(d, da, db);
    else wgmma_f32_n256<TRANS_B, TRANS_A>(d, da, db);
}
template <int N, int TRANS_B, int TRANS_A>
static __device__ __forceinline__ void wgmma(u32 (&d)[N / 4], u64 da, u64 db) {
    if constexpr (N == 8) wgmma_f16_n8<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 16) wgmma_f16_n16<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 24) wgmma_f16_n24<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 32) wgmma_f16_n32<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 48) wgmma_f16_n48<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 64) wgmma_f16_n64<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 128) wgmma_f16_n128<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 160) wgmma_f16_n160<TRANS_B, TRANS_A>(d, da, db);
    else if constexpr (N == 192) wgmma_f16_n192<TRANS_B, TRANS_A>(d, da, db);
    else wgmma_f16_n256<TRANS_B, TRANS_A>(d, da, db);
}

// The operands' layout in a slot. A and tn-B are K-major: BK/64 atoms of 128-byte rows (64
// fp16 of K), 8-row swizzle groups 1024 bytes apart (SBO). nn-B is N-major: per 64-column
// chunk (BK * 128 bytes apart, its LBO) rows of 64 n-values per k, read with trans-b = 1;
// nn's narrow tiles, rows of NB_ROW bytes (smem_desc_nb).
// This consumer's first byte of a slot of A (its rows) and of B (its columns).
template <class C>
static __device__ __forceinline__ u32 a_cw(int cw) {
    if constexpr (a_mmajor<C>()) return cw * (C::WG_M / 64) * C::BK * 128;
    else return C::WHOLE_TILE || C::COLSPLIT ? 0 : cw * C::WG_M * 128;
}
template <class C>
static __device__ __forceinline__ u32 b_cw(int cw) {
    if constexpr (C::COLSPLIT) return b_kmajor<C>() ? cw * C::WN * 128 : cw * (C::WN / 64) * C::BK * 128;
    else return 0;
}
// The byte offsets of k16 step kk (and m64 tile mi) in this consumer's part of a slot: A and
// tn-B, atom kk / 4 and 32 bytes per step in its rows; nn-B, 16 rows of K per step.
template <class C>
static __device__ __forceinline__ u32 a_off(int kk, int mi) {
    if constexpr (a_mmajor<C>()) return mi * C::BK * 128 + kk * 2048;
    else return (kk / 4) * C::BM * 128 + mi * 64 * 128 + (kk % 4) * 32;
}
template <class C>
static __device__ __forceinline__ u32 b_off(int kk) {
    if constexpr (b_kmajor<C>()) return (kk / 4) * C::BN * 128 + (kk % 4) * 32;
    else if constexpr (C::NN_NARROW) return kk * 16 * C::NB_ROW;
    else return kk * 2048;
}
// The operands' leading byte offsets (M- or N-major: the 64-wide chunks, BK * 128 bytes
// apart), and B's descriptor at `addr`.
template <class C>
static __device__ __forceinline__ u32 a_lbo() {
    return a_mmajor<C>() ? C::BK * 128 : 16;
}
template <class C>
static __device__ __forceinline__ u32 b_lbo() {
    return b_kmajor<C>() ? 16 : C::NN_NARROW ? 8 * C::NB_ROW : C::BK * 128;
}
template <class C>
static __device__ __forceinline__ u64 b_desc(u32 addr) {
    if constexpr (C::NN_NARROW) return smem_desc_nb<C::NB_ROW, C::NB_SWIZZLE>(addr);
    else return smem_desc(addr, b_lbo<C>(), 1024);
}

// The wgmma descriptors of a consumer, one specialisation per KAAS_DESC_UNIFORM value:
// slot(s) takes the ring slot, a(kk, mi) and b(kk) are the operands of k16 step kk.
template <class C, int MODE = C::DESC>
struct Descriptors;

// 0, plain: each descriptor from its address, per thread.
template <class C>
struct Descriptors<C, 0> {
    u32 sA, sB;
    int cw;
    u32 a_base, b_base;
    __device__ __forceinline__ Descriptors(u32 sA_, u32 sB_, int cw_, int, int) : sA(sA_), sB(sB_), cw(cw_) {}
    __device__ __forceinline__ void slot(int s) {
        a_base = sA + s * C::A_STAGE_BYTES + a_cw<C>(cw);
        b_base = sB + s * C::B_STAGE_BYTES + b_cw<C>(cw);
    }
    __device__ __forceinline__ u64 a(int kk, int mi) const { return smem_desc(a_base + a_off<C>(kk, mi), a_lbo<C>(), 1024); }
    __device__ __forceinline__ u64 b(int kk) const { return b_desc<C>(b_base + b_off<C>(kk)); }
};

// 1, uniform: the slot's base descriptors plus the byte offset / 16, one 64-bit add per
// operand. With the warpgroup index broadcast from lane 0 (warpgroup<C>) ptxas keeps them
// in uniform registers (ncu: the per-thread masks, shifts, ors and register-to-uniform
// moves were over half of a 64×256 ping-pong code's instructions); 1–6% faster on the
// ping-pong codes and 1.9–2.8% (geomean) on the atomic split-K ones, the same or slower on
// the cooperative ones.
template <class C>
struct Descriptors<C, 1> {
    u32 sA, sB;
    int cw;
    u64 da0, db0;
    __device__ __forceinline__ Descriptors(u32 sA_, u32 sB_, int cw_, int, int) : sA(sA_), sB(sB_), cw(cw_) {}
    __device__ __forceinline__ void slot(int s) {
        da0 = smem_desc(sA + s * C::A_STAGE_BYTES + a_cw<C>(cw), a_lbo<C>(), 1024);
        db0 = b_desc<C>(sB + s * C::B_STAGE_BYTES + b_cw<C>(cw));
    }
    __device__ __forceinline__ u64 a(int kk, int mi) const { return desc_add(da0, a_off<C>(kk, mi)); }
    __device__ __forceinline__ u64 b(int kk) const { return desc_add(db0, b_off<C>(kk)); }
};

// 2, stepped: only the low word moves, one 32-bit add per operand per wgmma, the high word
// a value ptxas keeps in the pair (cuBLASLt's loop: two UIADD3 per HGMMA); 2.2% over plain
// on the cooperative codes. The low words of this consumer's slot-0 descriptors (its rows
// of A, its columns of B) are kept; the slot's and the step's offsets / 16 are added.
template <class C>
struct Descriptors<C, 2> {
    u32 a_lo0, b_lo0, dhi_a, dhi_b, a_lo, b_lo;
    __device__ __forceinline__ Descriptors(u32 sA, u32 sB, int cw, int M, int N) {
        a_lo0 = desc_lo(sA + a_cw<C>(cw), a_lbo<C>());
        b_lo0 = desc_lo(sB + b_cw<C>(cw), b_lbo<C>());
        dhi_a = desc_hi(M);
        if constexpr (C::NN_NARROW) dhi_b = desc_hi_nb<C::NB_ROW, C::NB_SWIZZLE>(N);
        else dhi_b = desc_hi(N);
    }
    __device__ __forceinline__ void slot(int s) {
        a_lo = a_lo0 + (u32)s * (C::A_STAGE_BYTES >> 4);
        b_lo = b_lo0 + (u32)s * (C::B_STAGE_BYTES >> 4);
    }
    __device__ __forceinline__ u64 a(int kk, int mi) const { return desc_from_lo(a_lo + a_off<C>(kk, mi) / 16, dhi_a); }
    __device__ __forceinline__ u64 b(int kk) const { return desc_from_lo(b_lo + b_off<C>(kk) / 16, dhi_b); }
};

// A consumer warpgroup's side of the ring: for each unit, wait for each K-tile's full
// barrier, issue its wgmmas into the accumulators, keep one K-tile in flight and release the
// slot of the one before (wait_group 1), and drain at the end.
template <class C>
struct Mainloop {
    typedef typename C::acc_t acc_t;
    typedef acc_t Acc[C::MI][C::ACC_REGS];
    // KAAS_CHAINS: the k16 steps of a K-tile go round-robin to CHAINS sets of accumulators,
    // summed once after the main loop, so consecutive wgmmas do not wait on each other's
    // results. Chain 0 is the caller's; these are chains 1...
    typedef acc_t Chains[C::CHAINS > 1 ? C::CHAINS - 1 : 1][C::MI][C::ACC_REGS];

    u32 full0, empty0;
    int cw;
    RingPos<C::STAGES> pos;  // the slot of this consumer's next K-tile
    int pp_pos, pp_step;     // ping-pong: the ring position (in K-tiles) of its next tile
    Descriptors<C> desc;

    __device__ __forceinline__ Mainloop(const Ring<C>& ring, int cw_, int M, int N, int ktiles)
        : full0(ring.full0), empty0(ring.empty0), cw(cw_), pos{0, 0u}, pp_pos(cw_ * ktiles), pp_step(2 * ktiles),
          desc(ring.sA, ring.sB, cw_, M, N) {}

    // One K-tile's wgmmas from slot s: BK/16 k16 steps × MI m64 tiles.
    __device__ __forceinline__ void mma(Acc& acc, Chains& acc_x, int s) {
        constexpr int TRANS_B = b_kmajor<C>() ? 0 : 1, TRANS_A = a_mmajor<C>() ? 1 : 0;
        desc.slot(s);
#pragma unroll
        for (int kk = 0; kk < C::BK / 16; ++kk) {
            const u64 db = desc.b(kk);
#pragma unroll
            for (int mi = 0; mi < C::MI; ++mi) {
                const u64 da = desc.a(kk, mi);
                if constexpr (C::CHAINS > 1) {
                    if (kk % C::CHAINS == 0)
                        wgmma<C::WN, TRANS_B, TRANS_A>(acc[mi], da, db);
                    else
                        wgmma<C::WN, TRANS_B, TRANS_A>(acc_x[kk % C::CHAINS - 1][mi], da, db);
                } else {
                    wgmma<C::WN, TRANS_B, TRANS_A>(acc[mi], da, db);
                }
            }
        }
    }

    // The unit's K-tiles [kb, ke) into acc. `pass`: another tile of the CTA follows this one
    // (ping-pong hands the turn to the other consumer).
    __device__ __forceinline__ void run(Acc& acc, int kb, int ke, bool pass, int lane) {
#pragma unroll
        for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
            for (int i = 0; i < C::ACC_REGS; ++i) acc[mi][i] = 0;
        Chains acc_x;
        if constexpr (C::CHAINS > 1) {
#pragma unroll
            for (int c = 0; c < C::CHAINS - 1; ++c)
#pragma unroll
                for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
                    for (int i = 0; i < C::ACC_REGS; ++i) acc_x[c][mi][i] = 0;
        }
        if constexpr (C::PINGPONG) {
            // Ping-pong: consumer cw takes the CTA's tiles cw, cw+2, …; the producer fills the
            // ring in tile order, so the CTA's i-th tile starts at ring position i*ktiles. The
            // main loops take strict turns (one consumer runs its epilogue while the other
            // multiplies): a consumer starts its main loop only after the other has passed
            // every full barrier of the tile before, so it never waits on a barrier more than
            // one phase ahead (parity waits cannot tell phase r from phase r-2).
            pos.s = pp_pos % C::STAGES;
            pos.ph = (u32)((pp_pos / C::STAGES) & 1);
            if (pp_pos > 0) turn_wait(cw);  // every tile but the CTA's first waits its turn
            pp_pos += pp_step;
        }
        int prev = 0;
        int mine = 0;  // K split: the K-tiles of this tile this consumer has issued
        for (int kt = kb; kt < ke; ++kt) {
            if constexpr (C::KSPLIT) {
                // Consumer cw takes the ring's slots of parity cw (STAGES is even), so it
                // waits on every phase of its own slots and never on one two phases ahead.
                if ((pos.s & 1) != cw) {
                    pos.advance();
                    continue;
                }
            }
            const int s = pos.s;
            mbar_wait(full0 + 8 * s, pos.ph);
            if constexpr (C::PROBE_SYNC) wgmma_fence();
            if constexpr (C::PROBE_MATH) mma(acc, acc_x, s);
            if constexpr (C::PROBE_SYNC) wgmma_commit();
            if constexpr (C::WAIT0) {
                // KAAS_WAIT0, as cuBLASLt's 384-thread 64×128 kernel does (ncu): this
                // K-tile's wgmmas are done, free its slot now.
                wgmma_wait<0>();
                if (lane == 0) slot_release<C>(empty0 + 8 * s);
            } else {
                if (C::KSPLIT ? mine++ > 0 : kt > kb) {  // this consumer's previous K-tile
                    if constexpr (C::PROBE_SYNC) wgmma_wait<1>();  // the previous k-tile's wgmmas are done: free its slot
                    if (lane == 0) slot_release<C>(empty0 + 8 * prev);
                }
                prev = s;
            }
            pos.advance();
        }
        if constexpr (C::PINGPONG) {
            if (pass) turn_pass(cw);  // the CTA's next tile is the other consumer's
        }
        wgmma_wait<0>();  // unconditional, so ptxas sees every path drain the pipeline
        if constexpr (C::CHAINS > 1) {
#pragma unroll
            for (int c = 0; c < C::CHAINS - 1; ++c)
#pragma unroll
                for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
                    for (int i = 0; i < C::ACC_REGS; ++i) acc[mi][i] += acc_x[c][mi][i];
        }
        // The last K-tile's slot.
        if constexpr (C::KSPLIT) {
            if (mine > 0 && lane == 0) slot_release<C>(empty0 + 8 * prev);
        } else if constexpr (!C::WAIT0) {
            if (ke > kb && lane == 0) slot_release<C>(empty0 + 8 * prev);
        }
    }
};

// ─── The reductions ─────────────────────────────────────────────────────────────────────
// Each runs after the consumer has drained its wgmmas. ksplit_reduce and splitk_reduce
// return whether this consumer writes the tile's C (with the sum in its accumulators);
// cluster_reduce writes its share of C itself. Partials are stored in the
// accumulators' own order, four registers per 16-byte word: word w of thread tid at float
// 4 * (128 * w + tid) of its consumer's part, so every access is conflict-free in shared
// memory and a coalesced 2 KiB per warpgroup in global memory.

// K split across the consumers (KAAS_KSPLIT): consumer 1 stores its fp32 partial in the
// region at sR and returns false (it writes nothing); consumer 0 waits for it, adds it into
// its accumulators and returns true. `first`: the CTA's first tile (consumer 1 need not wait
// for the region to be taken); `more`: another tile follows (consumer 0 hands the region
// back). Named barriers 4 and 5 (hopper_schedule.cuh).
template <class C>
static __device__ __forceinline__ bool ksplit_reduce(float (&acc)[C::MI][C::ACC_REGS], u32 sR, int tid, int cw, bool first,
                                                     bool more) {
    constexpr int WORDS = C::MI * C::ACC_REGS / 4;
    const u32 red = sR + 16u * (u32)tid;
    if (cw == 1) {
        if (!first) red_taken_wait();  // consumer 0 has added the last partial
#pragma unroll
        for (int w = 0; w < WORDS; ++w) {
            const float* a = &acc[(4 * w) / C::ACC_REGS][(4 * w) % C::ACC_REGS];
            st_shared_v4(red + 2048u * (u32)w, a[0], a[1], a[2], a[3]);
        }
        red_stored_arrive();
        return false;  // consumer 0 writes C
    }
    red_stored_wait();
#pragma unroll
    for (int w = 0; w < WORDS; ++w) {
        float* a = &acc[(4 * w) / C::ACC_REGS][(4 * w) % C::ACC_REGS];
        const float4 v = ld_shared_v4(red + 2048u * (u32)w);
        a[0] += v.x;
        a[1] += v.y;
        a[2] += v.z;
        a[3] += v.w;
    }
    if (more) red_taken_arrive();  // consumer 1 stores the next one
    return true;
}

// Two elements of C from a thread's accumulators (see the epilogues): row-major, or
// transposed for swap-AB.
template <class C>
static __device__ __forceinline__ void store_c_pair(u16* __restrict__ Cp, int M, int N, int row, int col, u32 v, bool fast,
                                                    bool pairs) {
    if constexpr (C::SWAP_AB) store_pair_t(Cp, M, N, row, col, v, fast);
    else store_pair(Cp, M, N, row, col, v, fast, pairs);
}

// Cluster split-K (KAAS_SPLITK=3): stores this CTA's fp32 partial in its drained ring at sA
// (the unit is the CTA's only one, so the producer issues no more loads, and once both
// consumers have passed the barrier below no wgmma reads the ring), then, after a cluster
// barrier that releases it and acquires every peer's, sums the words w % S == rank of all S
// partials in rank order and writes those elements of C. The kernel's last cluster barrier
// keeps the partial alive until every peer has read it.
template <class C>
static __device__ __forceinline__ void cluster_reduce(u16* __restrict__ Cp, int M, int N, const float (&acc)[C::MI][C::ACC_REGS],
                                                      u32 sA, int m0, int n0, int cw, int warp, int lane, int tid,
                                                      int S, bool pairs) {
    constexpr int WORDS = C::MI * C::ACC_REGS / 4;
    consumers_sync<C::CONSUMERS>();
    const u32 mine = sA + 4u * (u32)(cw * (WORDS * 512) + 4 * tid);
#pragma unroll
    for (int w = 0; w < WORDS; ++w) {
        const float* a = &acc[(4 * w) / C::ACC_REGS][(4 * w) % C::ACC_REGS];
        st_shared_v4(mine + 2048u * (u32)w, a[0], a[1], a[2], a[3]);
    }
    cluster_sync();  // release this CTA's partial; acquire every peer's
    // CTA r owns the words w % S == r of every thread's accumulators: it sums
    // them over the S partials in rank order and writes those elements of C
    // (rows g and g + 8, columns 8j + 2q, 8j + 2q + 1, as the direct epilogue).
    const int own = (int)cluster_rank();
    const bool fast = pairs && (m0 + C::BM <= M) && (n0 + C::BN <= N);
    const int row = m0 + cw * C::WG_M + warp * 16 + (lane >> 2);
    const int col0 = n0 + 2 * (lane & 3);
#pragma unroll
    for (int w = 0; w < WORDS; ++w) {
        if (w % S != own) continue;
        float4 v[16];
#pragma unroll
        for (int q = 0; q < 16; ++q)
            if (q < S) v[q] = ld_peer_v4(mine + 2048u * (u32)w, (u32)q);
        float4 sum = v[0];
#pragma unroll
        for (int q = 1; q < 16; ++q) {
            if (q < S) {
                sum.x += v[q].x;
                sum.y += v[q].y;
                sum.z += v[q].z;
                sum.w += v[q].w;
            }
        }
        const int mi = (4 * w) / C::ACC_REGS;
        const int j = ((4 * w) % C::ACC_REGS) / 4;
        store_c_pair<C>(Cp, M, N, row + mi * 64, col0 + 8 * j, pack_f16x2(sum.x, sum.y), fast, pairs);
        store_c_pair<C>(Cp, M, N, row + mi * 64 + 8, col0 + 8 * j, pack_f16x2(sum.z, sum.w), fast, pairs);
    }
}

// In-order split-K, in the last unit of a tile to arrive (its acquire done): replaces the
// accumulators by the sum of the tile's S stored partials at tile_part in split order 0..S-1,
// its own included, so every run adds them in the same order (bit-identical results).
template <class C>
static __device__ __forceinline__ void sum_partials(float (&acc)[C::MI][C::ACC_REGS], const float* tile_part, int cw, int tid,
                                                    int S) {
    constexpr int WORDS = C::MI * C::ACC_REGS / 4;
    const float* const first = tile_part + cw * (WORDS * 512) + 4 * tid;
#pragma unroll
    for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
        for (int i = 0; i < C::ACC_REGS; ++i) acc[mi][i] = 0.f;
    for (int q = 0; q < S; ++q) {
        const float* const src = first + (u64)q * (u64)(C::BM * C::BN);
#pragma unroll
        for (int w = 0; w < WORDS; ++w) {
            float* a = &acc[(4 * w) / C::ACC_REGS][(4 * w) % C::ACC_REGS];
            float v0, v1, v2, v3;
            ld_cg_v4(src + 512 * w, v0, v1, v2, v3);
            a[0] += v0;
            a[1] += v1;
            a[2] += v2;
            a[3] += v3;
        }
    }
}

// Split-K through the workspace (KAAS_SPLITK 1 and 2, and stream-K): a tile one unit covers
// alone is written directly; the units of a shared tile each add their partial (atomic: into
// the tile's fp32 sum in L2 with red.add; in order: into a partial of their own), and the
// last to arrive (an atomic counter per CTA tile) writes C and resets the counter.
template <class C>
static __device__ __forceinline__ bool splitk_reduce(float (&acc)[C::MI][C::ACC_REGS], const Params& p,
                                                     const Scheduler<C>& sch, int t, int sp, u32 rank, int cw, int tid) {
    __shared__ u32 sk_last;  // 1 when this unit is the last of its tile to arrive
    int first, units;
    sch.tile_units(t, first, units);
    if (units <= 1) return true;
    // One counter and one partial (or sum) per CTA tile, CL of each cluster tile; stream-K,
    // per unit (the first unit of a cut tile names them; see the header).
    const int slot = first * C::CL + (int)rank;
    u32* const count = reinterpret_cast<u32*>(p.ws);
    float* const part = reinterpret_cast<float*>(p.ws + ((4 * (C::STREAMK ? sch.S : sch.tiles * C::CL) + 255) & ~255));
    constexpr int WORDS = C::MI * C::ACC_REGS / 4;
    constexpr u64 TILE = C::BM * C::BN;
    float* const tile_part = part + (u64)slot * (C::SPLITK == 2 ? TILE : (u64)sch.S * TILE);
    float* const mine = tile_part + (C::SPLITK == 2 ? 0 : (u64)sp * TILE) + cw * (WORDS * 512) + 4 * tid;
#pragma unroll
    for (int w = 0; w < WORDS; ++w) {
        const float* a = &acc[(4 * w) / C::ACC_REGS][(4 * w) % C::ACC_REGS];
        if constexpr (C::SPLITK == 2) red_add_v4(mine + 512 * w, a[0], a[1], a[2], a[3]);
        else st_cg_v4(mine + 512 * w, a[0], a[1], a[2], a[3]);
    }
    consumers_sync<C::CONSUMERS>();  // every partial of this unit is issued
    if (threadIdx.x == 128) {
        // Release: this unit's partials (ordered before it by the barrier) are
        // visible before its count; acquire: the other units' are visible after.
        const u32 before = atomic_inc_acq_rel(count + slot);
        sk_last = before == (u32)(units - 1);
        if (sk_last) *reinterpret_cast<volatile u32*>(count + slot) = 0u;  // reset for the next launch
    }
    consumers_sync<C::CONSUMERS>();  // orders everyone's reads below after the acquire
    if (!sk_last) return false;
    if constexpr (C::SPLITK == 2) {
        // The last to arrive takes the sum and leaves zeros for the next launch.
#pragma unroll
        for (int w = 0; w < WORDS; ++w) {
            float* a = &acc[(4 * w) / C::ACC_REGS][(4 * w) % C::ACC_REGS];
            ld_cg_v4(mine + 512 * w, a[0], a[1], a[2], a[3]);
            st_cg_v4(mine + 512 * w, 0.f, 0.f, 0.f, 0.f);
        }
    } else {
        // The last to arrive sums the partials in split order, its own included.
        sum_partials<C>(acc, tile_part, cw, tid, sch.S);
    }
    return true;
}

// ─── The epilogues ──────────────────────────────────────────────────────────────────────
// Warp w of the warpgroup holds rows 16w..16w+15 of each m64 tile; lane (g = lane/4,
// q = lane%4) holds rows g and g+8 (h = 0, 1), columns 8j+2q, 8j+2q+1: c_pair is that fp16
// pair of accumulator column block j. A consumer's part of the tile starts at row_cw, col_cw.
template <class C>
static __device__ __forceinline__ u32 c_pair(const typename C::acc_t (&a)[C::ACC_REGS], int j, int h) {
    if constexpr (C::ACC_F32) return pack_f16x2(a[4 * j + 2 * h], a[4 * j + 2 * h + 1]);
    else return a[2 * j + h];
}
template <class C>
static __device__ __forceinline__ int row_cw(int cw) {
    return C::WHOLE_TILE || C::COLSPLIT ? 0 : cw * C::WG_M;
}
template <class C>
static __device__ __forceinline__ int col_cw(int cw) {
    return C::COLSPLIT ? cw * C::WN : 0;
}

// KAAS_EPILOGUE=2: each warp writes 16×64 pieces with stmatrix into its two swizzled
// buffers at sE, and one lane stores each with a TMA tensor store, which clips at C's edges.
// `n` counts the pieces this warp has stored: their buffer is n % EPI_NB.
template <class C>
static __device__ __forceinline__ void epilogue_tma(const typename C::acc_t (&acc)[C::MI][C::ACC_REGS], const TensorMap128* tmC,
                                                    u32 sE, u32& n, int m0, int n0, int cw, int warp, int lane) {
    // Piece (mi, cc) of this warp: rows row_base.. +15, columns n0 + 64cc.. +63. In
    // the 128B-swizzled buffer, row r's 16-byte chunk c sits at chunk c ^ (r % 8).
    // stmatrix x4 takes column blocks j and j+1 (8 columns each) at rows 0-7 and
    // 8-15: lanes 0-7 address block j's rows 0-7, 8-15 its rows 8-15, 16-31 block j+1's.
    const u32 stg0 = sE + (u32)(cw * 4 + warp) * (C::EPI_NB * 2048u);
    const int r16 = (lane & 7) + 8 * ((lane >> 3) & 1);
    const int second = lane >> 4;
#pragma unroll
    for (int mi = 0; mi < C::MI; ++mi) {
        const int row_base = m0 + row_cw<C>(cw) + mi * 64 + warp * 16;
#pragma unroll
        for (int cc = 0; cc < C::WN / 64; ++cc) {
            const u32 buf = stg0 + (n % C::EPI_NB) * 2048u;
            ++n;
            // The store that last used this buffer (EPI_NB pieces back) has read it out;
            // the others in between may still be reading theirs.
            if (lane == 0) bulk_wait_read<C::EPI_NB - 1>();
            __syncwarp();
#pragma unroll
            for (int jj = 0; jj < 8; jj += 2) {
                const int j = cc * 8 + jj;
                const int chunk = jj + second;
                stmatrix_x4(buf + (u32)r16 * 128u + ((u32)(chunk ^ (r16 & 7)) << 4), c_pair<C>(acc[mi], j, 0),
                            c_pair<C>(acc[mi], j, 1), c_pair<C>(acc[mi], j + 1, 0), c_pair<C>(acc[mi], j + 1, 1));
            }
            fence_proxy_async_shared();
            __syncwarp();
            if (lane == 0) {
                tma_store(tmC, buf, n0 + col_cw<C>(cw) + cc * 64, row_base);
                bulk_commit();
            }
        }
    }
}

// KAAS_EPILOGUE=1 on tiles of whole 64-column pieces: stage 16×64 pieces per warp in shared
// memory (at stg, EPI_LD halves a row), then write whole 16-byte chunks: 8 lanes cover 128
// contiguous bytes of a row of C. `vec16`: N and C allow 16-byte stores.
template <class C>
static __device__ __forceinline__ void epilogue_staged(const typename C::acc_t (&acc)[C::MI][C::ACC_REGS], u16* __restrict__ Cp,
                                                       int M, int N, u16* stg, bool vec16, int m0, int n0, int cw, int warp,
                                                       int lane) {
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int mi = 0; mi < C::MI; ++mi) {
        const int row_base = m0 + row_cw<C>(cw) + mi * 64 + warp * 16;
#pragma unroll
        for (int cc = 0; cc < C::WN / 64; ++cc) {
            __syncwarp();
#pragma unroll
            for (int jj = 0; jj < 8; ++jj) {
                const int j = cc * 8 + jj;
                *reinterpret_cast<u32*>(stg + g * C::EPI_LD + jj * 8 + 2 * q) = c_pair<C>(acc[mi], j, 0);
                *reinterpret_cast<u32*>(stg + (g + 8) * C::EPI_LD + jj * 8 + 2 * q) = c_pair<C>(acc[mi], j, 1);
            }
            __syncwarp();
#pragma unroll
            for (int it = 0; it < 4; ++it) {
                const int r = it * 4 + (lane >> 3);
                const int c8 = (lane & 7) * 8;
                const uint4 v = *reinterpret_cast<const uint4*>(stg + r * C::EPI_LD + c8);
                const int grow = row_base + r;
                const int gcol = n0 + col_cw<C>(cw) + cc * 64 + c8;
                // KAAS_PROBE=8 stores none of it (whatever is not NaN).
                if (grow < M && (C::PROBE != 8 || v.x == 0x7fff7fffu)) {
                    u16* dst = Cp + (u64)grow * (u64)N + (u64)gcol;
                    if (vec16 && gcol + 8 <= N) {
                        *reinterpret_cast<uint4*>(dst) = v;
                    } else {
                        const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                        for (int e = 0; e < 8; ++e)
                            if (gcol + e < N) dst[e] = (u16)(w[e / 2] >> (16 * (e & 1)));
                    }
                }
            }
        }
    }
}

// KAAS_EPILOGUE=0, tiles narrower than 64 columns, and swap-AB: 4-byte stores (swap-AB:
// 2-byte, transposed) straight from the accumulators, no staging memory.
template <class C>
static __device__ __forceinline__ void epilogue_direct(const typename C::acc_t (&acc)[C::MI][C::ACC_REGS], u16* __restrict__ Cp,
                                                       int M, int N, bool pairs, int m0, int n0, int cw, int warp, int lane) {
    const bool fast = pairs && (m0 + C::BM <= M) && (n0 + C::BN <= N);
    const int col0 = n0 + col_cw<C>(cw) + 2 * (lane & 3);
#pragma unroll
    for (int mi = 0; mi < C::MI; ++mi) {
        const int row = m0 + row_cw<C>(cw) + mi * 64 + warp * 16 + (lane >> 2);
#pragma unroll
        for (int j = 0; j < C::WN / 8; ++j) {
            const u32 v0 = c_pair<C>(acc[mi], j, 0);
            const u32 v1 = c_pair<C>(acc[mi], j, 1);
            store_c_pair<C>(Cp, M, N, row, col0 + 8 * j, v0, fast, pairs);
            store_c_pair<C>(Cp, M, N, row + 8, col0 + 8 * j, v1, fast, pairs);
        }
    }
}

// The consumer's epilogue, KAAS_EPILOGUE's value (and what the tile allows), with its state.
template <class C>
struct Epilogue {
    u32 n;  // TMA store: the pieces this thread's warp has stored
    bool pairs, vec16;

    __device__ __forceinline__ Epilogue(const Params& p, int tid) {
        if constexpr (C::EPI_TMA) {
            if (tid == 0) prefetch_tensormap(p.tmC);
            n = 0;
        } else {
            // Computed once per consumer and kept in a register by an empty asm: left to the
            // compiler, it was recomputed in each tile's epilogue, and codes that store
            // row-major pairs took up to 13 more registers (ptxas). The swap-AB codes, whose
            // transposed stores read it only through `fast`, took fewer without the asm.
            int pair_ok = ((p.N & 1) == 0) && ((reinterpret_cast<u64>(p.C) & 3) == 0);
            if constexpr (!C::SWAP_AB) asm volatile("" : "+r"(pair_ok));
            pairs = pair_ok;
            vec16 = ((p.N & 7) == 0) && ((reinterpret_cast<u64>(p.C) & 15) == 0);
        }
    }
    __device__ __forceinline__ void store(const typename C::acc_t (&acc)[C::MI][C::ACC_REGS], const Params& p, const Ring<C>& ring,
                                          int m0, int n0, int cw, int warp, int lane) {
        if constexpr (C::EPI_TMA) {
            epilogue_tma<C>(acc, p.tmC, ring.sE, n, m0, n0, cw, warp, lane);
        } else if constexpr (C::EPI_STAGED) {
            u16* stg = reinterpret_cast<u16*>(ring.raw + (ring.sE - smem_u32(ring.raw))) + (cw * 4 + warp) * (C::EPI_WARP_BYTES / 2);
            epilogue_staged<C>(acc, p.C, p.M, p.N, stg, vec16, m0, n0, cw, warp, lane);
        } else {
            epilogue_direct<C>(acc, p.C, p.M, p.N, pairs, m0, n0, cw, warp, lane);
        }
    }
    __device__ __forceinline__ void finish(int lane) {
        // The CTA's shared memory must outlive the reads of every store it issued.
        if constexpr (C::EPI_TMA) {
            if (lane == 0) bulk_wait_read<0>();
        }
    }
};

// ─── The consumer and the kernel ────────────────────────────────────────────────────────
// Consumer warpgroup cw: for each unit of its walk, the mainloop, the reductions and the
// epilogue.
template <class C>
static __device__ __forceinline__ void consumer(const Params& p, const Ring<C>& ring, const Scheduler<C>& sch, u32 rank, int cw,
                                                int tid) {
    if constexpr (C::CONSUMERS > 1) setmaxnreg_inc<consumer_regs(C::CONSUMERS)>();
    const int warp = tid / 32;
    const int lane = tid % 32;
    Mainloop<C> ml(ring, cw, p.M, p.N, sch.ktiles);
    Epilogue<C> epi(p, tid);
    for (auto w = sch.walk(cw); sch.more(w); sch.advance(w)) {
        const auto u = sch.unit(w);
        int mc, nc;
        sch.tile_coords(u.t, mc, nc);
        int m0 = (mc * C::CLM + sch.rm) * C::BM;
        int n0 = (nc * C::CLN + sch.rn) * C::BN;
        if constexpr (C::EARLY_COORDS) {
            // Only the epilogue reads the tile's origin: computed here and passed through an
            // empty asm, so that the compiler cannot sink the divisions after the math, where
            // they would lengthen the critical path of a short K loop.
            asm volatile("" : "+r"(m0), "+r"(n0));
        }
        typename Mainloop<C>::Acc acc;
        ml.run(acc, u.kb, u.ke, sch.tile_follows(u.t), lane);
        if constexpr (C::KSPLIT) {
            if (!ksplit_reduce<C>(acc, ring.sE + C::EPI_BYTES, tid, cw, sch.first_tile(u.t), sch.tile_follows(u.t))) continue;
        }
        if constexpr (C::SPLITK == 3) {
            cluster_reduce<C>(p.C, p.M, p.N, acc, ring.sA, m0, n0, cw, warp, lane, tid, sch.S, epi.pairs);
            continue;  // C is written; the walk has no other unit
        } else if constexpr (C::SPLITK) {
            if (!splitk_reduce<C>(acc, p, sch, u.t, u.sp, rank, cw, tid)) continue;
        }
        if constexpr (C::PROBE == 4) {
            continue;  // diagnostics: no C stores
        } else if constexpr (C::PROBE == 9) {
            // diagnostics: no epilogue, but the last accumulator read (a store it never makes)
            if (acc[C::MI - 1][C::ACC_REGS - 1] == (typename C::acc_t)12345) p.C[0] = 0;
            continue;
        }
        epi.store(acc, p, ring, m0, n0, cw, warp, lane);
    }
    epi.finish(lane);
}

// The warpgroup index. KAAS_DESC_UNIFORM: broadcast from lane 0, so ptxas knows it (and all
// that derives from it: the consumer's rows, its descriptors) is warp-uniform and keeps it
// in uniform registers.
template <class C>
static __device__ __forceinline__ int warpgroup() {
    if constexpr (C::DESC != 0) return __shfl_sync(0xffffffffu, (int)(threadIdx.x / 128), 0);
    else return threadIdx.x / 128;
}

// The kernel: the launch's checks, the ring's set-up, then the producer and the consumers
// (the header's Structure).
template <class C>
static __device__ __forceinline__ void gemm(const Params& p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];  // aligned to 1024 by Ring
    __shared__ __align__(8) u64 full_bar[C::STAGES];
    __shared__ __align__(8) u64 empty_bar[C::STAGES];

    if (C::CL > 1 && cluster_size() != (u32)C::CL) return;  // launched with the wrong cluster: write nothing
    if constexpr (C::GRID2D == 2) {
        // The last group's rows past the problem's: nothing to do (before any barrier is set up).
        if ((int)(blockIdx.z * C::GROUP_M + blockIdx.x) * C::BM >= p.M) return;
    }
    if constexpr (C::PROBE == 6) return;  // diagnostics: the launch alone, with this code's threads and shared memory

    const Ring<C> ring(smem_raw, full_bar, empty_bar);
    const int wg = warpgroup<C>();
    const int tid = threadIdx.x % 128;
    const u32 rank = C::CL > 1 ? cluster_rank() : 0u;
    Scheduler<C> sch(p.M, p.N, p.K, p.S, rank);
    if (!sch.serves_launch()) return;
    sch.cut();

    if (threadIdx.x == 0) ring_init<C>(ring.full0, ring.empty0);
    if constexpr (C::CL > 1) {
        cluster_sync_relaxed();  // the barrier inits are released by ring_init's fence: nothing else to order
    } else {
        __syncthreads();
    }
    if constexpr (C::PROBE == 7) return;  // diagnostics: the launch and the barriers' set-up

    if (wg == 0) producer<C>(p, ring, sch, tid);
    else consumer<C>(p, ring, sch, rank, wg - 1, tid);
    // In a multicast cluster no CTA may leave while a peer can still multicast into it or
    // arrive on its barriers: its consumers waited for every multicast into it (each full
    // barrier), and its producer's tail for every peer's last arrival on its empty barriers.
    if constexpr (C::SPLITK == 3) {
        // Nor, with the cluster reduction, while a peer can still read its partial. The
        // peers' reads of it have completed (their sums are in C), so nothing needs ordering
        // here.
        cluster_sync_relaxed();
    }
}

extern "C" __global__ void __launch_bounds__(Cfg::THREADS, 1)
#if KAAS_SPLITK == 1 || KAAS_SPLITK == 2
KAAS_ENTRY(const __grid_constant__ TensorMap128 tmA, const __grid_constant__ TensorMap128 tmB, u16* __restrict__ C, int M,
           int N, int K, unsigned char* __restrict__ ws, int S) {
    gemm<Cfg>(Params{&tmA, &tmB, nullptr, C, M, N, K, ws, S});
}
#elif KAAS_EPILOGUE == 2
KAAS_ENTRY(const __grid_constant__ TensorMap128 tmA, const __grid_constant__ TensorMap128 tmB,
           const __grid_constant__ TensorMap128 tmC, int M, int N, int K) {
    gemm<Cfg>(Params{&tmA, &tmB, &tmC, nullptr, M, N, K, nullptr, 0});
}
#else
KAAS_ENTRY(const __grid_constant__ TensorMap128 tmA, const __grid_constant__ TensorMap128 tmB, u16* __restrict__ C, int M,
           int N, int K) {
    gemm<Cfg>(Params{&tmA, &tmB, nullptr, C, M, N, K, nullptr, 0});
}
#endif
