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
//   KAAS_BM         block tile rows of C: 64 or 128 with 1 consumer, 128 or 256 with 2
//                   (BM/KAAS_CONSUMERS must be 64 or 128)
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
//   KAAS_CONSUMERS  consumer warpgroups, 1 or 2 (each owns BM/CONSUMERS rows of the tile)
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
//                   (src/tuner/hopper.rs, AXES; docs/tuner.md), which passes it.
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
//   KAAS_SWAP_AB    0 (default) or 1 (entries end _sw; tn only): swap-AB. The code computes
//                   Cᵀ = B·Aᵀ, so the launch passes the problem's B as the kernel's A and A as
//                   its B, and N, M, K as its M, N, K: the weight's rows fill wgmma's 64-row
//                   side and the few rows of activations (tokens) become its N (8 to 256).
//                   The epilogue writes C transposed, straight from registers (no staging,
//                   no TMA store). Nothing else in the kernel changes.
//
// ─── Launch (kaas.hgemm.v1) ─────────────────────────────────────────────────────────────
// params: (tensor_map A, tensor_map B, ptr C, i32 M, i32 N, i32 K), in this order;
//   KAAS_SPLITK adds (ptr workspace, i32 S), S >= 1, and needs workspace_bytes =
//   roundup(4 * tiles, 256) + 4 * tiles * BM * BN * (S for KAAS_SPLITK=1, 1 for 2)
//   (counters, then the partials or sums), zero when first used; the kernel leaves the
//   counters (and the sums) zero again. KAAS_SPLITK=3 adds no parameter: S is the cluster
//   size, and the grid must be exactly tiles × S (any other grid writes nothing).
//   A tensor map: operand A, box [64, BM/CLUSTER_N], swizzle "128B" (global dims [K, M])
//   B tensor map, tn: operand B, box [64, BN/CLUSTER_M], swizzle "128B"  (dims [K, N])
//   B tensor map, nn: operand B, box [64, 64/CLUSTER_M], swizzle "128B"  (dims [N, K])
//   KAAS_SWAP_AB: (tensor_map B, box [64, BM/CLUSTER_N]; tensor_map A, box [64, BN/CLUSTER_M];
//   ptr C, i32 N, i32 M, i32 K), and everything below with M and N exchanged.
// block:   [128 * (KAAS_CONSUMERS + 1), 1, 1]   (warpgroup 0 = TMA producer)
// cluster: [KAAS_CLUSTER_M * KAAS_CLUSTER_N, 1, 1]; KAAS_SPLITK=3: [S, 1, 1]
// shared_mem_bytes (dynamic) = STAGES * (BM + BN) * BK * 2 + 1024 + (EPILOGUE && BN % 64 == 0 ? CONSUMERS * 9216 : 0)
//   + (KSPLIT ? BM * BN * 4 : 0)
//   (+ 2 * STAGES * 8 bytes of static shared memory for the mbarriers)
//   e.g. EPILOGUE=1: 128x256x64 s4 c2: 216064; 128x128x64 s6 c2: 216064; 64x128x64 s8 c1: 206848;
//        64x64x64 s8 c1: 141312.  EPILOGUE=0: 128x256x64 s4 c2: 197632.
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
// Warpgroup 0 (setmaxnreg 24 when CONSUMERS=2): one thread issues TMA loads of A and B into
// a STAGES-deep ring, guarded by full (expect_tx) and empty mbarriers. Warpgroups 1..C
// (setmaxnreg 240 when CONSUMERS=2): wait full, issue BK/16 × MI wgmma m64nBNk16 on
// 128B-swizzled descriptors, keep one wgmma group in flight (wait_group 1) and release the
// previous slot. A and tn-B are K-major (rows of 64 fp16 = 128 B, SBO 1024); nn-B is N-major
// (rows of 64 n-values per k, LBO = BK*128 between 64-wide n chunks, SBO 1024, trans-b = 1).
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
#define KAAS_PROBE_MATH (KAAS_PROBE != 1 && KAAS_PROBE != 3 && KAAS_PROBE != 5)
#define KAAS_PROBE_LOADS (KAAS_PROBE != 2 && KAAS_PROBE != 3 && KAAS_PROBE != 5)
#define KAAS_PROBE_SYNC (KAAS_PROBE != 5)

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
// (src/tuner/hopper.rs, AXES) and passes it, so the name is spelt in one place.
#ifndef KAAS_ENTRY
#error "KAAS_ENTRY (the entry's name) is not defined"
#endif

constexpr int BM = KAAS_BM, BN = KAAS_BN, BK = KAAS_BK, STAGES = KAAS_STAGES;
// The cluster: CLM tile rows (sharing B columns) by CLN tile columns (sharing A rows), CL
// CTAs. (CLM and CLN are macros: the PTX of the codes without them stays as it was.)
#define CLM KAAS_CLUSTER_M
#define CLN KAAS_CLUSTER_N
constexpr int CONSUMERS = KAAS_CONSUMERS, CL = CLM * CLN, GROUP_M = KAAS_GROUP_M;
constexpr int THREADS = 128 * (CONSUMERS + 1);
// Rows of a tile per consumer warpgroup: cooperative, the consumers split the tile's rows;
// ping-pong, each consumer owns whole tiles (alternate tiles of the CTA).
// (KAAS_WHOLE_TILE: each consumer owns whole tiles, ping-pong or K split across consumers.)
#define KAAS_WHOLE_TILE (KAAS_PINGPONG || KAAS_KSPLIT)
constexpr int WG_M = KAAS_WHOLE_TILE || KAAS_COLSPLIT ? BM : BM / CONSUMERS;
// Columns of a tile per consumer (a literal, for the wgmma's name): BN, or its half when the
// consumers split the columns; this consumer's first row and column in the tile.
#if KAAS_COLSPLIT && KAAS_BN == 128
#define KAAS_WN 64
#elif KAAS_COLSPLIT && KAAS_BN == 256
#define KAAS_WN 128
#else
#define KAAS_WN KAAS_BN
#endif
#define KAAS_ROW_CW (KAAS_WHOLE_TILE || KAAS_COLSPLIT ? 0 : cw * WG_M)
#define KAAS_COL_CW (KAAS_COLSPLIT ? cw * KAAS_WN : 0)
constexpr int MI = WG_M / 64;         // m64 wgmmas per consumer per k16 step
constexpr int A_STAGE_BYTES = BM * BK * 2;
constexpr int B_STAGE_BYTES = BN * BK * 2;
constexpr u32 STAGE_TX = A_STAGE_BYTES + B_STAGE_BYTES;  // bytes TMA lands per stage per CTA
// nn with a tile narrower than one 64-column box: B's rows are BN * 2 bytes (see smem_desc_nb).
// (Macros and constants of these codes only: the other codes' PTX stays as it was.)
#define KAAS_NN_NARROW (!KAAS_LAYOUT_TN && KAAS_BN < 64)
#if KAAS_NN_NARROW
constexpr u32 NB_ROW = BN * 2;
constexpr u32 NB_SWIZZLE = BN == 32 ? 2 : BN == 16 ? 3 : 0;
#endif
constexpr int EPI_LD = 72;                                // halves per staged row: 64 + 8 pad (conflict-free)
constexpr int EPI_WARP_BYTES = 16 * EPI_LD * 2;           // 2304 bytes per consumer warp
// The staged epilogue writes 64-column pieces; narrower tiles store straight from registers.
// Swap-AB codes store C transposed, straight from registers (store_pair).
#define KAAS_EPI_STAGED (KAAS_EPILOGUE == 1 && KAAS_BN % 64 == 0 && !KAAS_SWAP_AB)
// The TMA-store epilogue: KAAS_EPI_NB swizzled 16×64 buffers (2 KiB) per consumer warp.
#define KAAS_EPI_TMA (KAAS_EPILOGUE == 2)
#define KAAS_EPI_NB 2
constexpr int EPI_BYTES = KAAS_EPI_STAGED ? CONSUMERS * 4 * EPI_WARP_BYTES : KAAS_EPI_TMA ? CONSUMERS * 4 * KAAS_EPI_NB * 2048 : 0;
// K split across consumers: consumer 1's fp32 partial tile (a macro, so that the other codes'
// PTX, which lists namespace-scope constants, stays as it was).
#define KAAS_RED_BYTES (KAAS_KSPLIT ? BM * BN * 4 : 0)
constexpr int SMEM_BYTES = STAGES * (BM + BN) * BK * 2 + 1024 + EPI_BYTES + KAAS_RED_BYTES;  // the launch's dynamic smem
#if KAAS_ACC_F32
constexpr int ACC_REGS = KAAS_WN / 2;  // per thread per m64 tile
#else
constexpr int ACC_REGS = KAAS_WN / 4;
#endif

static_assert(BK == 64 || BK == 128 || BK == 256, "KAAS_BK must be 64, 128 or 256 (one, two or four 128B swizzle atoms of fp16)");
static_assert(CONSUMERS == 1 || CONSUMERS == 2, "KAAS_CONSUMERS must be 1 or 2");
static_assert(BM % CONSUMERS == 0 && (WG_M == 64 || WG_M == 128),
              "BM / CONSUMERS (cooperative) or BM (ping-pong) must be 64 or 128");
static_assert(KAAS_CHAINS == 1 || KAAS_CHAINS == 2 || KAAS_CHAINS == 4, "KAAS_CHAINS must be 1, 2 or 4");
static_assert(KAAS_CHAINS == 1 || KAAS_ACC_F32, "accumulator chains are summed in fp32: acc=f32 only");
static_assert(MI * ACC_REGS * KAAS_CHAINS <= (CONSUMERS == 2 ? 160 : 128), "the chains' accumulators would not fit the consumer register budget");
#if KAAS_KSPLIT
static_assert(CONSUMERS == 2 && !KAAS_PINGPONG && KAAS_SPLITK == 0,
              "K split across consumers needs two consumers, no ping-pong, no split-K");
static_assert(KAAS_ACC_F32, "K split across consumers adds fp32 partials: acc=f32 only");
static_assert(STAGES % 2 == 0, "K split across consumers: each takes the slots of one parity");
#endif
#if KAAS_COLSPLIT
static_assert(CONSUMERS == 2 && (BN == 128 || BN == 256) && !KAAS_PINGPONG && !KAAS_KSPLIT,
              "consumers split the columns of 128 or 256: two consumers, no ping-pong, no K split across them");
static_assert(KAAS_SPLITK == 0 || (KAAS_SPLITK == 2 && !KAAS_STREAMK), "consumers split the columns without split-K or with the atomic one");
#endif
static_assert(!(KAAS_WAIT0 && KAAS_KSPLIT), "K split across consumers frees its slots its own way");
#if KAAS_PINGPONG
static_assert(CONSUMERS == 2, "ping-pong needs two consumer warpgroups");
static_assert(KAAS_SPLITK == 0, "ping-pong runs without split-K");
#endif
static_assert(BN == 8 || BN == 16 || BN == 24 || BN == 32 || BN == 48 || BN == 64 || BN == 128 || BN == 160 || BN == 192 || BN == 256,
              "KAAS_BN must be 8, 16, 24, 32, 48, 64, 128, 160, 192 or 256");
static_assert(KAAS_LAYOUT_TN || BN % 64 == 0 || BN == 8 || BN == 16 || BN == 32,
              "nn loads B in 64-column boxes, or one box of 8, 16 or 32 columns: KAAS_BN must be a multiple of 64, or 8, 16 or 32");
static_assert((CLM == 1 || CLM == 2 || CLM == 4 || CLM == 8) && (CLN == 1 || CLN == 2 || CLN == 4 || CLN == 8) && CL <= 8,
              "KAAS_CLUSTER_M and KAAS_CLUSTER_N must be 1, 2, 4 or 8, and their product at most 8");
static_assert((BM / CLN) % 8 == 0, "multicast A slices must be whole 8-row swizzle atoms");
static_assert(BM <= 256, "a TMA box is at most 256 rows");
static_assert(STAGES >= 2 && STAGES <= 16, "KAAS_STAGES must be 2..16");
static_assert(GROUP_M >= 1, "KAAS_GROUP_M must be >= 1");
#if KAAS_SPLITK
static_assert(CL == 1 || KAAS_SPLITK == 2, "split-K in a multicast cluster is the atomic one (or stream-K)");
static_assert(KAAS_ACC_F32, "split-K partials are fp32: acc=f32 only");
static_assert(KAAS_SPLITK >= 1 && KAAS_SPLITK <= 3, "KAAS_SPLITK must be 0, 1, 2 or 3");
#endif
static_assert(KAAS_PROBE >= 0 && KAAS_PROBE <= 9, "KAAS_PROBE must be 0..9");
static_assert(KAAS_EPILOGUE >= 0 && KAAS_EPILOGUE <= 2, "KAAS_EPILOGUE must be 0, 1 or 2");
static_assert(!KAAS_EPI_TMA || (KAAS_BN % 64 == 0 && KAAS_SPLITK == 0),
              "the TMA-store epilogue stores 64-column pieces of unsplit tiles");
static_assert(KAAS_PROBE == 0 || (KAAS_SPLITK == 0 && CL == 1 && !KAAS_PINGPONG && !KAAS_KSPLIT),
              "KAAS_PROBE variants are plain one-CTA codes");
static_assert((KAAS_PROBE != 8 && KAAS_PROBE != 9) || KAAS_EPI_STAGED,
              "KAAS_PROBE 8 and 9 take the staged epilogue apart: KAAS_EPILOGUE=1, BN a multiple of 64");
static_assert(KAAS_STREAMK == 0 || KAAS_SPLITK == 2, "stream-K reduces with the atomic split-K (KAAS_SPLITK=2)");
static_assert(KAAS_GRID2D >= 0 && KAAS_GRID2D <= 2, "KAAS_GRID2D must be 0, 1 or 2");
static_assert(!KAAS_GRID2D || (KAAS_SPLITK == 0 && !KAAS_PINGPONG && CL == 1),
              "the 2-D grid is one tile per CTA: no split-K, no ping-pong, no cluster");
static_assert(KAAS_STREAMK >= 0 && KAAS_STREAMK <= 2, "KAAS_STREAMK must be 0, 1 or 2");
static_assert(!KAAS_SWAP_AB || (KAAS_LAYOUT_TN && !KAAS_EPI_TMA && KAAS_PROBE == 0),
              "swap-AB codes are tn, and store C transposed from registers (no TMA store, no probe)");
#if KAAS_SPLITK == 3
// The cluster reduction stores each CTA's fp32 partial tile in its drained ring.
static_assert(STAGES * (BM + BN) * BK * 2 >= BM * BN * 4, "the ring cannot hold the tile's fp32 partial");
#endif
static_assert(SMEM_BYTES <= 232448, "shared memory exceeds 227 KiB");
static_assert(MI * ACC_REGS <= (CONSUMERS == 2 ? 160 : 128), "accumulators would not fit the consumer register budget");
#if KAAS_LAYOUT_TN
static_assert((BN / CLM) % 8 == 0, "multicast B slices must be whole 8-row swizzle atoms");
#else
static_assert((BK / CLM) % 8 == 0, "multicast B slices must be whole 8-row swizzle atoms");
#endif

// A CUtensorMap passed by value (128 bytes, 64-byte aligned), opaque to the kernel.
struct __align__(64) TensorMap128 {
    u64 v[16];
};

#include "hopper_ptx.cuh"

#include "hopper_wgmma.cuh"

#if KAAS_ACC_F32
typedef float acc_t;
#define KAAS_WGMMA_(n) wgmma_f32_n##n
#else
typedef u32 acc_t;
#define KAAS_WGMMA_(n) wgmma_f16_n##n
#endif
#define KAAS_WGMMA(n) KAAS_WGMMA_(n)

#include "hopper_schedule.cuh"

// The kernel's phases as functions: the ring's set-up, and the reductions that only
// unsearched codes compile (K split across the consumers, the cluster split-K, the in-order
// split-K). The other phases stay inline, because the shipped PTX's sha256 names it: the
// order NVVM gives loop-carried registers (on the two-chain codes, the producer's ring slot
// and phase) follows the number of the kernel's locals, and an inlined function's parameters
// count among them. One local more or fewer renumbers some shipped codes; a function with
// more parameters than the kernel has locals to spare would too.

// Sets up the ring's barriers (one thread): a full barrier completes on the producer's
// arrival with the slot's bytes, an empty one on one arrival per warp of the slot's
// consumer(s) in every CTA of the cluster. The fence releases the inits to the cluster; the
// caller's barrier orders them before any wait.
static __device__ __forceinline__ void ring_init(u32 full0, u32 empty0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
        mbar_init(full0 + 8 * s, 1);
        mbar_init(empty0 + 8 * s, (KAAS_WHOLE_TILE ? 1 : CONSUMERS) * 4 * CL);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

#if KAAS_KSPLIT
// K split across the consumers, after both have drained their wgmmas on tile t: consumer 1
// stores its fp32 partial in the region at sR and returns false (it writes nothing); consumer
// 0 waits for it, adds it into its accumulators and returns true (it writes C). `first`: the
// CTA's first tile (consumer 1 need not wait for the region to be taken); `more`: another
// tile follows (consumer 0 hands the region back). Named barriers 4 and 5 (hopper_schedule.cuh).
static __device__ __forceinline__ bool ksplit_reduce(float (&acc)[MI][ACC_REGS], u32 sR, int tid, int cw, bool first,
                                                     bool more) {
    // Consumer 1's partial, four registers per 16-byte word: word w of thread tid
    // at byte 16 * (128 * w + tid) of the region, conflict-free both ways.
    constexpr int WORDS = MI * ACC_REGS / 4;
    const u32 red = sR + 16u * (u32)tid;
    if (cw == 1) {
        if (!first) red_taken_wait();  // consumer 0 has added the last partial
#pragma unroll
        for (int w = 0; w < WORDS; ++w) {
            const float* a = &acc[(4 * w) / ACC_REGS][(4 * w) % ACC_REGS];
            st_shared_v4(red + 2048u * (u32)w, a[0], a[1], a[2], a[3]);
        }
        red_stored_arrive();
        return false;  // consumer 0 writes C
    }
    red_stored_wait();
#pragma unroll
    for (int w = 0; w < WORDS; ++w) {
        float* a = &acc[(4 * w) / ACC_REGS][(4 * w) % ACC_REGS];
        const float4 v = ld_shared_v4(red + 2048u * (u32)w);
        a[0] += v.x;
        a[1] += v.y;
        a[2] += v.z;
        a[3] += v.w;
    }
    if (more) red_taken_arrive();  // consumer 1 stores the next one
    return true;
}
#endif

#if KAAS_SPLITK == 3
// Cluster split-K, after the consumer has drained its wgmmas: stores this CTA's fp32 partial
// in its drained ring at sA (the unit is the CTA's only one, so no load will land there),
// then, after a cluster barrier that releases it and acquires every peer's, sums the words
// w % S == rank of all S partials in rank order and writes those elements of C. The caller's
// last cluster barrier keeps the partial alive until every peer has read it.
static __device__ __forceinline__ void cluster_reduce(u16* __restrict__ C, int M, int N, const float (&acc)[MI][ACC_REGS],
                                                      u32 sA, int m0, int n0, int cw, int warp, int lane, int tid,
                                                      int S, bool pairs) {
    // Partials in the accumulators' own order, four registers per 16-byte word:
    // word w of thread tid at float 4 * (128 * w + tid) of its consumer's part,
    // so every access is conflict-free. They go in the drained ring: the unit is
    // the CTA's only one, so the producer issues no more loads, and once both
    // consumers have passed the barrier below no wgmma reads the ring.
    constexpr int WORDS = MI * ACC_REGS / 4;
    consumers_sync();
    const u32 mine = sA + 4u * (u32)(cw * (WORDS * 512) + 4 * tid);
#pragma unroll
    for (int w = 0; w < WORDS; ++w) {
        const float* a = &acc[(4 * w) / ACC_REGS][(4 * w) % ACC_REGS];
        st_shared_v4(mine + 2048u * (u32)w, a[0], a[1], a[2], a[3]);
    }
    cluster_sync();  // release this CTA's partial; acquire every peer's
    // CTA r owns the words w % S == r of every thread's accumulators: it sums
    // them over the S partials in rank order and writes those elements of C
    // (rows g and g + 8, columns 8j + 2q, 8j + 2q + 1, as the direct epilogue).
    const int own = (int)cluster_rank();
    const bool fast = pairs && (m0 + BM <= M) && (n0 + BN <= N);
    const int row = m0 + cw * WG_M + warp * 16 + (lane >> 2);
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
        const int mi = (4 * w) / ACC_REGS;
        const int j = ((4 * w) % ACC_REGS) / 4;
        store_pair(C, M, N, row + mi * 64, col0 + 8 * j, pack_f16x2(sum.x, sum.y), fast, pairs);
        store_pair(C, M, N, row + mi * 64 + 8, col0 + 8 * j, pack_f16x2(sum.z, sum.w), fast, pairs);
    }
}
#endif

#if KAAS_SPLITK == 1
// In-order split-K, in the last unit of a tile to arrive (its acquire done): replaces the
// accumulators by the sum of the tile's S stored partials at tile_part in split order 0..S-1,
// its own included, so every run adds them in the same order (bit-identical results).
static __device__ __forceinline__ void sum_partials(float (&acc)[MI][ACC_REGS], const float* tile_part, int cw, int tid,
                                                    int S) {
    constexpr int WORDS = MI * ACC_REGS / 4;
    const float* const first = tile_part + cw * (WORDS * 512) + 4 * tid;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int i = 0; i < ACC_REGS; ++i) acc[mi][i] = 0.f;
    for (int q = 0; q < S; ++q) {
        const float* const src = first + (u64)q * (u64)(BM * BN);
#pragma unroll
        for (int w = 0; w < WORDS; ++w) {
            float* a = &acc[(4 * w) / ACC_REGS][(4 * w) % ACC_REGS];
            float v0, v1, v2, v3;
            ld_cg_v4(src + 512 * w, v0, v1, v2, v3);
            a[0] += v0;
            a[1] += v1;
            a[2] += v2;
            a[3] += v3;
        }
    }
}
#endif

extern "C" __global__ void __launch_bounds__(THREADS, 1)
#if KAAS_SPLITK == 1 || KAAS_SPLITK == 2
KAAS_ENTRY(const __grid_constant__ TensorMap128 tmA, const __grid_constant__ TensorMap128 tmB,
           u16* __restrict__ C, int M, int N, int K, unsigned char* __restrict__ ws, int S) {
#elif KAAS_EPI_TMA
KAAS_ENTRY(const __grid_constant__ TensorMap128 tmA, const __grid_constant__ TensorMap128 tmB,
           const __grid_constant__ TensorMap128 tmC, int M, int N, int K) {
#else
KAAS_ENTRY(const __grid_constant__ TensorMap128 tmA, const __grid_constant__ TensorMap128 tmB,
           u16* __restrict__ C, int M, int N, int K) {
#endif
    extern __shared__ __align__(16) unsigned char smem_raw[];  // aligned to 1024 below
    __shared__ __align__(8) u64 full_bar[STAGES];
    __shared__ __align__(8) u64 empty_bar[STAGES];
#if KAAS_SPLITK == 1 || KAAS_SPLITK == 2
    __shared__ u32 sk_last;  // 1 when this unit is the last of its tile to arrive
#endif

    if (CL > 1 && cluster_size() != (u32)CL) return;  // launched with the wrong cluster: write nothing
#if KAAS_GRID2D == 2
    // The last group's rows past the problem's: nothing to do (before any barrier is set up).
    if ((int)(blockIdx.z * GROUP_M + blockIdx.x) * BM >= M) return;
#endif
#if KAAS_PROBE == 6
    return;  // the launch alone, with this code's threads and shared memory
#endif

    // 128B-swizzled TMA boxes and wgmma atoms need 1024-byte aligned stage buffers.
    const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const u32 sA = base;
    const u32 sB = base + STAGES * A_STAGE_BYTES;
    const u32 sE = sB + STAGES * B_STAGE_BYTES;  // epilogue staging, EPI_BYTES
    const u32 full0 = smem_u32(&full_bar[0]);
    const u32 empty0 = smem_u32(&empty_bar[0]);

#if KAAS_DESC_UNIFORM
    // Broadcast from lane 0, so ptxas knows the warpgroup index (and all that derives from
    // it: the consumer's rows, its descriptors) is warp-uniform and keeps it in uniform
    // registers.
    const int wg = __shfl_sync(0xffffffffu, (int)(threadIdx.x / 128), 0);
#else
    const int wg = threadIdx.x / 128;
#endif
    const int tid = threadIdx.x % 128;
    const u32 rank = CL > 1 ? cluster_rank() : 0u;
    // Cluster tile rows and columns, without locals for the tile counts: ring_init's two
    // parameters take their place among the kernel's locals (see above the functions).
    const int num_mc = ((M + BM - 1) / BM + CLM - 1) / CLM;
    const int num_nc = ((N + BN - 1) / BN + CLN - 1) / CLN;
#if KAAS_GRID2D
    // One tile per CTA, the grid [tile columns, tile rows]: the CTA's tile is its block
    // index, with no division on the way to its first loads.
    const int tiles = 1;
    (void)num_mc;
    (void)num_nc;
#else
    const int tiles = num_mc * num_nc;  // cluster tiles (CL CTA tiles each)
#endif
    // This CTA's tile in its cluster's CLM × CLN block of tiles.
    const int rm = (int)rank % CLM, rn = (int)rank / CLM;
    const int ktiles = (K + BK - 1) / BK;
#if KAAS_GRID2D
    const int cid = 0, ncl = 1;
#else
    const int cid = blockIdx.x / CL;
    const int ncl = gridDim.x / CL;
#endif
#if KAAS_SPLITK == 3
    // S is the cluster size; one tile per cluster, its slices the cluster's CTAs. The
    // condition is the same in every CTA, so no CTA waits on a barrier another skips.
    const int S = (int)cluster_size();
    if (S < 2 || gridDim.x != (unsigned)(tiles * S)) return;
#elif KAAS_STREAMK
    // Unit cid takes its whole tiles (the hybrid's: tiles below dp_tiles), then
    // K-iterations [sk_begin, sk_end) of the sk_work after them. S is the grid, at most one
    // unit per K-iteration cut (else a shared tile could count a unit with an empty range
    // among its own): any other launch writes nothing.
#if KAAS_STREAMK == 2
    // Whole tiles for all but the last full wave and the partial one (none to cut where
    // the waves are whole).
    const int dp_tiles = tiles % ncl == 0 ? tiles : max(tiles / ncl - 1, 0) * ncl;
#else
    const int dp_tiles = 0;
#endif
    const long long dp_work = (long long)dp_tiles * ktiles;
    const long long sk_work = (long long)tiles * ktiles - dp_work;
    if (S < 1 || S != (int)gridDim.x || (sk_work > 0 && ncl > sk_work)) return;
    const long long sk_begin = dp_work + (long long)cid * sk_work / ncl;
    const long long sk_end = dp_work + (long long)(cid + 1) * sk_work / ncl;
    const long long sk_start = dp_tiles > 0 ? (long long)cid * ktiles : sk_begin;
    u32* const sk_count = reinterpret_cast<u32*>(ws);  // one counter per CTA (see the top)
    float* const sk_part = reinterpret_cast<float*>(ws + ((4 * S + 255) & ~255));
#elif KAAS_SPLITK
    if (S < 1) return;
    // One counter and one partial (or sum) per CTA tile: CL of each cluster tile.
    u32* const sk_count = reinterpret_cast<u32*>(ws);
    float* const sk_part = reinterpret_cast<float*>(ws + ((4 * tiles * CL + 255) & ~255));
#endif

    if (threadIdx.x == 0) ring_init(full0, empty0);
#if KAAS_CLUSTER_M * KAAS_CLUSTER_N > 1
    // The barrier inits are released by the fence above: nothing else to order.
    cluster_sync_relaxed();
#else
    __syncthreads();
#endif
#if KAAS_PROBE == 7
    return;  // the launch and the barriers' set-up
#endif

    if (wg == 0) {
        // ── producer warpgroup: one thread drives TMA ──
#if KAAS_CONSUMERS == 2
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
#endif
        if (tid == 0) {
            asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(&tmA)) : "memory");
            asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(&tmB)) : "memory");
            int s = 0;
            u32 ph = 0;
            // Multicast masks: A goes to the CTAs of this tile row (rank rm + CLM*j), B to
            // those of this tile column (ranks CLM*rn .. CLM*rn + CLM-1).
            u16 mask_a = 0, mask_b = 0;
#pragma unroll
            for (int j = 0; j < CLN; ++j) mask_a |= (u16)(1u << (rm + CLM * j));
#pragma unroll
            for (int i = 0; i < CLM; ++i) mask_b |= (u16)(1u << (i + CLM * rn));
            (void)mask_a;
            (void)mask_b;
#if KAAS_STREAMK
            for (long long it = sk_start, next; it < sk_end; it = next) {
                int t, kb, ke;
                next = stream_unit(it, sk_end, dp_work, (long long)ncl * ktiles, sk_begin, ktiles, t, kb, ke);
#elif KAAS_SPLITK
            for (int u = cid; u < tiles * S; u += ncl) {
                int t, sp, kb, ke;
                split_unit(u, S, ktiles, t, sp, kb, ke);
#else
            for (int t = cid; t < tiles; t += ncl) {
#endif
                int mc, nc;
                KAAS_TILE_COORDS(t, mc, nc);
                const int m0 = (mc * CLM + rm) * BM;
                const int n0 = (nc * CLN + rn) * BN;
                for (int kt = KAAS_KB; kt < KAAS_KE; ++kt) {
#if KAAS_GRID2D
                    // One tile: the ring's first pass finds every slot empty.
                    if (kt >= STAGES) mbar_wait(empty0 + 8 * s, ph ^ 1u);
#else
                    mbar_wait(empty0 + 8 * s, ph ^ 1u);
#endif
                    const u32 fb = full0 + 8 * s;
#if !KAAS_PROBE_LOADS
                    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(fb) : "memory");
                    (void)m0;
                    (void)n0;
#else
                    mbar_expect_tx(fb, STAGE_TX);
                    const int k0 = kt * BK;
#if KAAS_BK == 64
#if KAAS_CLUSTER_N > 1
                    // A's rows are shared along the cluster's row: this CTA loads slice rn
                    // into every CTA with its rm.
                    tma_load_mc(sA + s * A_STAGE_BYTES + rn * (BM / CLN) * 128, &tmA, k0, m0 + rn * (BM / CLN), fb,
                                mask_a);
#else
                    tma_load(sA + s * A_STAGE_BYTES, &tmA, k0, m0, fb);
#endif
#else
                    // Two swizzle atoms along K: atom `at` of the slot holds K [k0 + 64at, +64).
                    // (A loop of one atom would serve BK 64 too, but renumbers the registers
                    // of every shipped PTX, whose sha256 names it: BK 64 keeps its own lines.)
#pragma unroll
                    for (int at = 0; at < BK / 64; ++at) {
#if KAAS_CLUSTER_N > 1
                        tma_load_mc(sA + s * A_STAGE_BYTES + at * BM * 128 + rn * (BM / CLN) * 128, &tmA, k0 + 64 * at,
                                    m0 + rn * (BM / CLN), fb, mask_a);
#else
                        tma_load(sA + s * A_STAGE_BYTES + at * BM * 128, &tmA, k0 + 64 * at, m0, fb);
#endif
                    }
#endif
                    const u32 b_dst = sB + s * B_STAGE_BYTES;
#if KAAS_LAYOUT_TN && KAAS_BK == 64
#if KAAS_CLUSTER_M > 1
                    tma_load_mc(b_dst + rm * (BN / CLM) * 128, &tmB, k0, n0 + rm * (BN / CLM), fb, mask_b);
#else
                    tma_load(b_dst, &tmB, k0, n0, fb);
#endif
#elif KAAS_LAYOUT_TN
#pragma unroll
                    for (int at = 0; at < BK / 64; ++at) {
#if KAAS_CLUSTER_M > 1
                        tma_load_mc(b_dst + at * BN * 128 + rm * (BN / CLM) * 128, &tmB, k0 + 64 * at, n0 + rm * (BN / CLM),
                                    fb, mask_b);
#else
                        tma_load(b_dst + at * BN * 128, &tmB, k0 + 64 * at, n0, fb);
#endif
                    }
#elif KAAS_NN_NARROW
                    // One box of all BN columns by the slot's K rows (BN * 2 bytes a row).
#if KAAS_CLUSTER_M > 1
                    tma_load_mc(b_dst + rm * (BK / CLM) * NB_ROW, &tmB, n0, k0 + rm * (BK / CLM), fb, mask_b);
#else
                    tma_load(b_dst, &tmB, n0, k0, fb);
#endif
#else
#pragma unroll
                    for (int c = 0; c < BN / 64; ++c) {
#if KAAS_CLUSTER_M > 1
                        tma_load_mc(b_dst + c * BK * 128 + rm * (BK / CLM) * 128, &tmB, n0 + 64 * c,
                                    k0 + rm * (BK / CLM), fb, mask_b);
#else
                        tma_load(b_dst + c * BK * 128, &tmB, n0 + 64 * c, k0, fb);
#endif
                    }
#endif
#endif  // KAAS_PROBE_LOADS
                    if (++s == STAGES) {
                        s = 0;
                        ph ^= 1u;
                    }
                }
            }
#if KAAS_CLUSTER_M * KAAS_CLUSTER_N > 1
            // Producer tail: wait until the consumers of every CTA of the cluster have
            // released each slot's last use, so no peer arrives on this CTA's barriers after
            // it exits. (A release cluster barrier here waited for every C store in flight.)
            for (int i = 0; i < STAGES; ++i) {
                mbar_wait(empty0 + 8 * s, ph ^ 1u);
                if (++s == STAGES) {
                    s = 0;
                    ph ^= 1u;
                }
            }
#endif
        }
#if KAAS_SPLITK == 3
        cluster_sync_relaxed();  // the consumers' first cluster barrier: every partial is stored
#endif
    } else {
        // ── consumer warpgroups ──
#if KAAS_CONSUMERS == 2
        asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
#endif
        const int cw = wg - 1;
        const int warp = tid / 32;
        const int lane = tid % 32;
#if KAAS_DESC_UNIFORM == 2
        // The low words of this consumer's slot-0 descriptors (its rows of A, its columns of B).
#if KAAS_COLSPLIT && KAAS_LAYOUT_TN
        const u32 a_lo0 = desc_lo(sA, 16), b_lo0 = desc_lo(sB + cw * KAAS_WN * 128, 16);
#elif KAAS_COLSPLIT
        const u32 a_lo0 = desc_lo(sA, 16), b_lo0 = desc_lo(sB + cw * (KAAS_WN / 64) * BK * 128, BK * 128);
#else
        const u32 a_lo0 = desc_lo(sA + (KAAS_WHOLE_TILE ? 0 : cw * WG_M * 128), 16);
#if KAAS_NN_NARROW
        const u32 b_lo0 = desc_lo(sB, 8 * NB_ROW);
#else
        const u32 b_lo0 = desc_lo(sB, KAAS_LAYOUT_TN ? 16 : BK * 128);
#endif
#endif
#if KAAS_NN_NARROW
        const u32 dhi_a = desc_hi(M), dhi_b = desc_hi_nb(N);
#else
        const u32 dhi_a = desc_hi(M), dhi_b = desc_hi(N);
#endif
#endif
#if KAAS_EPI_TMA
        if (tid == 0) asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(&tmC)) : "memory");
        u32 epi_n = 0;  // pieces this thread's warp has stored: their buffer is epi_n % KAAS_EPI_NB
#else
        const bool pairs = ((N & 1) == 0) && ((reinterpret_cast<u64>(C) & 3) == 0);
        const bool vec16 = ((N & 7) == 0) && ((reinterpret_cast<u64>(C) & 15) == 0);
        (void)pairs;
        (void)vec16;
#endif
#if KAAS_PINGPONG
        // Ping-pong: consumer cw takes the CTA's tiles cw, cw+2, …; the producer fills the
        // ring in tile order, so the CTA's i-th tile starts at ring position i*ktiles. The
        // main loops take strict turns (one consumer runs its epilogue while the other
        // multiplies): a consumer starts its main loop only after the other has passed
        // every full barrier of the tile before, so it never waits on a barrier more than
        // one phase ahead (parity waits cannot tell phase r from phase r-2).
        int pos = cw * ktiles;
        for (int t = cid + cw * ncl; t < tiles; t += 2 * ncl) {
            int s = pos % STAGES;
            u32 ph = (u32)((pos / STAGES) & 1);
            if (pos > 0) turn_wait(cw);  // every tile but the CTA's first waits its turn
            pos += 2 * ktiles;
#else
        int s = 0;
        u32 ph = 0;
#if KAAS_STREAMK
        for (long long it = sk_start, next; it < sk_end; it = next) {
            int t, kb, ke;
            next = stream_unit(it, sk_end, dp_work, (long long)ncl * ktiles, sk_begin, ktiles, t, kb, ke);
#elif KAAS_SPLITK
        for (int u = cid; u < tiles * S; u += ncl) {
            int t, sp, kb, ke;
            split_unit(u, S, ktiles, t, sp, kb, ke);
#else
        for (int t = cid; t < tiles; t += ncl) {
#endif
#endif
            int mc, nc;
            KAAS_TILE_COORDS(t, mc, nc);
#if KAAS_EARLY_COORDS
            // Only the epilogue reads the tile's origin: computed here and passed through an
            // empty asm, so that the compiler cannot sink the divisions after the math, where
            // they would lengthen the critical path of a short K loop.
            int m0 = (mc * CLM + rm) * BM;
            int n0 = (nc * CLN + rn) * BN;
            asm volatile("" : "+r"(m0), "+r"(n0));
#else
            const int m0 = (mc * CLM + rm) * BM;
            const int n0 = (nc * CLN + rn) * BN;
#endif

            acc_t acc[MI][ACC_REGS];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int i = 0; i < ACC_REGS; ++i) acc[mi][i] = 0;
#if KAAS_CHAINS > 1
            acc_t acc_x[KAAS_CHAINS - 1][MI][ACC_REGS];  // chains 1.. (chain 0 is acc)
#pragma unroll
            for (int c = 0; c < KAAS_CHAINS - 1; ++c)
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int i = 0; i < ACC_REGS; ++i) acc_x[c][mi][i] = 0;
#endif

            int prev = 0;
#if KAAS_KSPLIT
            int mine = 0;  // K-tiles of this tile this consumer has issued
#endif
            for (int kt = KAAS_KB; kt < KAAS_KE; ++kt) {
#if KAAS_KSPLIT
                // Consumer cw takes the ring's slots of parity cw (STAGES is even), so it
                // waits on every phase of its own slots and never on one two phases ahead.
                if ((s & 1) != cw) {
                    if (++s == STAGES) {
                        s = 0;
                        ph ^= 1u;
                    }
                    continue;
                }
#endif
                mbar_wait(full0 + 8 * s, ph);
#if KAAS_COLSPLIT
                // Both consumers read all of A; B's columns [cw * WN, +WN): tn, rows of the
                // slot's atoms; nn, whole 64-column chunks.
                const u32 a_base = sA + s * A_STAGE_BYTES;
#if KAAS_LAYOUT_TN
                const u32 b_base = sB + s * B_STAGE_BYTES + cw * KAAS_WN * 128;
#else
                const u32 b_base = sB + s * B_STAGE_BYTES + cw * (KAAS_WN / 64) * BK * 128;
#endif
#else
                const u32 a_base = sA + s * A_STAGE_BYTES + (KAAS_WHOLE_TILE ? 0 : cw * WG_M * 128);
                const u32 b_base = sB + s * B_STAGE_BYTES;
#endif
#if KAAS_PROBE_SYNC
                wgmma_fence();
#endif
#if KAAS_PROBE_MATH
#if KAAS_DESC_UNIFORM == 2
                const u32 a_lo = a_lo0 + (u32)s * (A_STAGE_BYTES >> 4);
                const u32 b_lo = b_lo0 + (u32)s * (B_STAGE_BYTES >> 4);
#elif KAAS_DESC_UNIFORM
#if KAAS_LAYOUT_TN
                const u64 db0 = smem_desc(b_base, 16, 1024);
#elif KAAS_NN_NARROW
                const u64 db0 = smem_desc_nb(b_base);
#else
                const u64 db0 = smem_desc(b_base, BK * 128, 1024);
#endif
                const u64 da0 = smem_desc(a_base, 16, 1024);
#endif
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk) {
#if KAAS_DESC_UNIFORM == 2 && KAAS_LAYOUT_TN
                    const u64 db = desc_from_lo(b_lo + ((kk / 4) * BN * 128 + (kk % 4) * 32) / 16, dhi_b);
#elif KAAS_DESC_UNIFORM == 2 && KAAS_NN_NARROW
                    const u64 db = desc_from_lo(b_lo + kk * NB_ROW, dhi_b);  // 16 rows of K, / 16
#elif KAAS_DESC_UNIFORM == 2
                    const u64 db = desc_from_lo(b_lo + kk * 2048 / 16, dhi_b);
#elif KAAS_DESC_UNIFORM && KAAS_LAYOUT_TN
                    const u64 db = desc_add(db0, (kk / 4) * BN * 128 + (kk % 4) * 32);
#elif KAAS_DESC_UNIFORM && KAAS_NN_NARROW
                    const u64 db = desc_add(db0, kk * 16 * NB_ROW);
#elif KAAS_DESC_UNIFORM
                    const u64 db = desc_add(db0, kk * 2048);
#elif KAAS_LAYOUT_TN && KAAS_BK == 64
                    const u64 db = smem_desc(b_base + kk * 32, 16, 1024);
#elif KAAS_LAYOUT_TN
                    const u64 db = smem_desc(b_base + (kk / 4) * BN * 128 + (kk % 4) * 32, 16, 1024);
#elif KAAS_NN_NARROW
                    const u64 db = smem_desc_nb(b_base + kk * 16 * NB_ROW);
#else
                    const u64 db = smem_desc(b_base + kk * 2048, BK * 128, 1024);
#endif
#pragma unroll
                    for (int mi = 0; mi < MI; ++mi) {
#if KAAS_DESC_UNIFORM == 2
                        const u64 da = desc_from_lo(a_lo + ((kk / 4) * BM * 128 + mi * 64 * 128 + (kk % 4) * 32) / 16, dhi_a);
#elif KAAS_DESC_UNIFORM
                        const u64 da = desc_add(da0, (kk / 4) * BM * 128 + mi * 64 * 128 + (kk % 4) * 32);
#elif KAAS_BK == 64
                        const u64 da = smem_desc(a_base + mi * 64 * 128 + kk * 32, 16, 1024);
#else
                        const u64 da = smem_desc(a_base + (kk / 4) * BM * 128 + mi * 64 * 128 + (kk % 4) * 32, 16, 1024);
#endif
#if KAAS_CHAINS > 1
                        if (kk % KAAS_CHAINS == 0)
                            KAAS_WGMMA(KAAS_WN)<1 - KAAS_LAYOUT_TN>(acc[mi], da, db);
                        else
                            KAAS_WGMMA(KAAS_WN)<1 - KAAS_LAYOUT_TN>(acc_x[kk % KAAS_CHAINS - 1][mi], da, db);
#else
                        KAAS_WGMMA(KAAS_WN)<1 - KAAS_LAYOUT_TN>(acc[mi], da, db);
#endif
                    }
                }
#else
                (void)a_base;
                (void)b_base;
#endif  // KAAS_PROBE_MATH
#if KAAS_PROBE_SYNC
                wgmma_commit();
#endif
#if KAAS_WAIT0
                wgmma_wait<0>();  // this K-tile's wgmmas are done: free its slot now
                if (lane == 0) mbar_release(empty0 + 8 * s);
                (void)prev;
#else
#if KAAS_KSPLIT
                if (mine++ > 0) {  // this consumer's previous K-tile
#else
                if (kt > KAAS_KB) {
#endif
#if KAAS_PROBE_SYNC
                    wgmma_wait<1>();  // the previous k-tile's wgmmas are done: free its slot
#endif
                    if (lane == 0) mbar_release(empty0 + 8 * prev);
                }
                prev = s;
#endif
                if (++s == STAGES) {
                    s = 0;
                    ph ^= 1u;
                }
            }
#if KAAS_PINGPONG
            if (t + ncl < tiles) turn_pass(cw);  // the CTA's next tile is the other consumer's
#endif
            wgmma_wait<0>();  // unconditional, so ptxas sees every path drain the pipeline
#if KAAS_CHAINS > 1
#pragma unroll
            for (int c = 0; c < KAAS_CHAINS - 1; ++c)
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int i = 0; i < ACC_REGS; ++i) acc[mi][i] += acc_x[c][mi][i];
#endif
#if KAAS_KSPLIT
            if (mine > 0 && lane == 0) mbar_release(empty0 + 8 * prev);
            if (!ksplit_reduce(acc, sE + EPI_BYTES, tid, cw, t == cid, t + ncl < tiles)) continue;
#elif !KAAS_WAIT0
            if (KAAS_HAS_K && lane == 0) mbar_release(empty0 + 8 * prev);
#endif
#if KAAS_SPLITK == 3
            cluster_reduce(C, M, N, acc, sA, m0, n0, cw, warp, lane, tid, S, pairs);
            continue;  // C is written; the loop has no other unit
#elif KAAS_SPLITK
#if KAAS_STREAMK
            // The tile's units: a whole tile is its unit's alone; a cut tile's first unit names
            // the counter and the sum of each of its CTAs (SK_SLOT).
            const bool sk_whole = t < dp_tiles;
            const int sk_first = sk_whole ? cid : stream_owner((long long)t * ktiles - dp_work, sk_work, ncl);
            const int sk_contrib = sk_whole ? 1 : stream_owner((long long)(t + 1) * ktiles - 1 - dp_work, sk_work, ncl) - sk_first + 1;
#define SK_SLOT (sk_first * CL + (int)rank)
#define SK_UNITS sk_contrib
#else
// This CTA's tile: in a cluster, tile t's CTA of rank `rank` (each reduces its own tile).
#define SK_SLOT (t * CL + (int)rank)
#define SK_UNITS S
#endif
            if (SK_UNITS > 1) {
                // Partials in the accumulators' own order, four registers per 16-byte word:
                // word w of thread tid at float 4 * (128 * w + tid), so every access is a
                // coalesced 2 KiB per warpgroup.
                constexpr int WORDS = MI * ACC_REGS / 4;
#if KAAS_SPLITK == 2
                // Atomic: every unit adds its partial into the tile's fp32 sum in L2.
                float* const mine = sk_part + (u64)SK_SLOT * (u64)(BM * BN) + cw * (WORDS * 512) + 4 * tid;
#else
                // In order: every unit stores its partial; the last sums them 0..S-1.
                float* const tile_part = sk_part + (u64)SK_SLOT * (u64)S * (u64)(BM * BN);
                float* const mine = tile_part + (u64)sp * (u64)(BM * BN) + cw * (WORDS * 512) + 4 * tid;
#endif
#pragma unroll
                for (int w = 0; w < WORDS; ++w) {
                    const float* a = &acc[(4 * w) / ACC_REGS][(4 * w) % ACC_REGS];
                    sk_put(mine + 512 * w, a[0], a[1], a[2], a[3]);
                }
                consumers_sync();  // every partial of this unit is issued
                if (threadIdx.x == 128) {
                    // Release: this unit's partials (ordered before it by the barrier) are
                    // visible before its count; acquire: the other units' are visible after.
                    const u32 before = atomic_inc_acq_rel(sk_count + SK_SLOT);
                    sk_last = before == (u32)(SK_UNITS - 1);
                    if (sk_last) *reinterpret_cast<volatile u32*>(sk_count + SK_SLOT) = 0u;  // reset for the next launch
                }
                consumers_sync();  // orders everyone's reads below after the acquire
                if (!sk_last) continue;
#if KAAS_SPLITK == 2
                // The last to arrive takes the sum and leaves zeros for the next launch.
#pragma unroll
                for (int w = 0; w < WORDS; ++w) {
                    float* a = &acc[(4 * w) / ACC_REGS][(4 * w) % ACC_REGS];
                    ld_cg_v4(mine + 512 * w, a[0], a[1], a[2], a[3]);
                    st_cg_v4(mine + 512 * w, 0.f, 0.f, 0.f, 0.f);
                }
#else
                // The last to arrive sums the partials in split order, its own included.
                sum_partials(acc, tile_part, cw, tid, S);
#endif
            }
#endif

#if KAAS_PROBE == 4
            continue;  // diagnostics: no C stores
#elif KAAS_PROBE == 9
            // diagnostics: no epilogue, but the last accumulator read (a store it never makes)
            if (acc[MI - 1][ACC_REGS - 1] == (acc_t)12345) C[0] = 0;
            continue;
#endif
            // Epilogue: warp w of the warpgroup holds rows 16w..16w+15 of each m64 tile; lane
            // (g = lane/4, q = lane%4) holds rows g and g+8, columns 8j+2q, 8j+2q+1.
#if KAAS_EPI_TMA
            {
                // Piece (mi, cc) of this warp: rows row_base.. +15, columns n0 + 64cc.. +63. In
                // the 128B-swizzled buffer, row r's 16-byte chunk c sits at chunk c ^ (r % 8).
                // stmatrix x4 takes column blocks j and j+1 (8 columns each) at rows 0-7 and
                // 8-15: lanes 0-7 address block j's rows 0-7, 8-15 its rows 8-15, 16-31 block j+1's.
                const u32 stg0 = sE + (u32)(cw * 4 + warp) * (KAAS_EPI_NB * 2048u);
                const int r16 = (lane & 7) + 8 * ((lane >> 3) & 1);
                const int second = lane >> 4;
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                    const int row_base = m0 + KAAS_ROW_CW + mi * 64 + warp * 16;
#pragma unroll
                    for (int cc = 0; cc < KAAS_WN / 64; ++cc) {
                        const u32 buf = stg0 + (epi_n % KAAS_EPI_NB) * 2048u;
                        ++epi_n;
                        // The store that last used this buffer (KAAS_EPI_NB pieces back) has
                        // read it out; the others in between may still be reading theirs.
                        if (lane == 0) bulk_wait_read<KAAS_EPI_NB - 1>();
                        __syncwarp();
#pragma unroll
                        for (int jj = 0; jj < 8; jj += 2) {
                            const int j = cc * 8 + jj;
#if KAAS_ACC_F32
                            const u32 a0 = pack_f16x2(acc[mi][4 * j], acc[mi][4 * j + 1]);
                            const u32 a1 = pack_f16x2(acc[mi][4 * j + 2], acc[mi][4 * j + 3]);
                            const u32 b0 = pack_f16x2(acc[mi][4 * j + 4], acc[mi][4 * j + 5]);
                            const u32 b1 = pack_f16x2(acc[mi][4 * j + 6], acc[mi][4 * j + 7]);
#else
                            const u32 a0 = acc[mi][2 * j], a1 = acc[mi][2 * j + 1];
                            const u32 b0 = acc[mi][2 * j + 2], b1 = acc[mi][2 * j + 3];
#endif
                            const int chunk = jj + second;
                            stmatrix_x4(buf + (u32)r16 * 128u + ((u32)(chunk ^ (r16 & 7)) << 4), a0, a1, b0, b1);
                        }
                        fence_proxy_async_shared();
                        __syncwarp();
                        if (lane == 0) {
                            tma_store(&tmC, buf, n0 + KAAS_COL_CW + cc * 64, row_base);
                            bulk_commit();
                        }
                    }
                }
            }
#elif KAAS_EPI_STAGED
            // Stage 16×64 pieces per warp in shared memory, then write whole 16-byte chunks:
            // 8 lanes cover 128 contiguous bytes of a row of C.
            u16* stg = reinterpret_cast<u16*>(smem_raw + (sE - smem_u32(smem_raw))) +
                       (cw * 4 + warp) * (EPI_WARP_BYTES / 2);
            const int g = lane >> 2, q = lane & 3;
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                const int row_base = m0 + KAAS_ROW_CW + mi * 64 + warp * 16;
#pragma unroll
                for (int cc = 0; cc < KAAS_WN / 64; ++cc) {
                    __syncwarp();
#pragma unroll
                    for (int jj = 0; jj < 8; ++jj) {
                        const int j = cc * 8 + jj;
#if KAAS_ACC_F32
                        const u32 v0 = pack_f16x2(acc[mi][4 * j], acc[mi][4 * j + 1]);
                        const u32 v1 = pack_f16x2(acc[mi][4 * j + 2], acc[mi][4 * j + 3]);
#else
                        const u32 v0 = acc[mi][2 * j];
                        const u32 v1 = acc[mi][2 * j + 1];
#endif
                        *reinterpret_cast<u32*>(stg + g * EPI_LD + jj * 8 + 2 * q) = v0;
                        *reinterpret_cast<u32*>(stg + (g + 8) * EPI_LD + jj * 8 + 2 * q) = v1;
                    }
                    __syncwarp();
#pragma unroll
                    for (int it = 0; it < 4; ++it) {
                        const int r = it * 4 + (lane >> 3);
                        const int c8 = (lane & 7) * 8;
                        const uint4 v = *reinterpret_cast<const uint4*>(stg + r * EPI_LD + c8);
                        const int grow = row_base + r;
                        const int gcol = n0 + KAAS_COL_CW + cc * 64 + c8;
                        if (grow < M && (KAAS_PROBE != 8 || v.x == 0x7fff7fffu)) {
                            u16* dst = C + (u64)grow * (u64)N + (u64)gcol;
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
#else
            const bool fast = pairs && (m0 + BM <= M) && (n0 + BN <= N);
            const int col0 = n0 + KAAS_COL_CW + 2 * (lane & 3);
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                const int row = m0 + KAAS_ROW_CW + mi * 64 + warp * 16 + (lane >> 2);
#pragma unroll
                for (int j = 0; j < KAAS_WN / 8; ++j) {
#if KAAS_ACC_F32
                    const u32 v0 = pack_f16x2(acc[mi][4 * j], acc[mi][4 * j + 1]);
                    const u32 v1 = pack_f16x2(acc[mi][4 * j + 2], acc[mi][4 * j + 3]);
#else
                    const u32 v0 = acc[mi][2 * j];
                    const u32 v1 = acc[mi][2 * j + 1];
#endif
                    store_pair(C, M, N, row, col0 + 8 * j, v0, fast, pairs);
                    store_pair(C, M, N, row + 8, col0 + 8 * j, v1, fast, pairs);
                }
            }
#endif
        }
#if KAAS_EPI_TMA
        // The CTA's shared memory must outlive the reads of every store it issued.
        if (lane == 0) bulk_wait_read<0>();
#endif
    }
    // In a multicast cluster no CTA may leave while a peer can still multicast into it or
    // arrive on its barriers: its consumers waited for every multicast into it (each full
    // barrier), and its producer's tail for every peer's last arrival on its empty barriers.
#if KAAS_SPLITK == 3
    // Nor, with the cluster reduction, while a peer can still read its partial. The peers'
    // reads of it have completed (their sums are in C), so nothing needs ordering here.
    cluster_sync_relaxed();
#endif
}
