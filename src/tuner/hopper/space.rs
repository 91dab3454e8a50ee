//! The Hopper family's search policy: which codes the search offers for a problem and
//! why ([`space_for`]), the trials' codes beside it, and the twins (descriptor modes, the
//! TMA store, wider K slots) that re-time a catalog entry. The configuration itself, its
//! names and what it compiles to are the family module's; nothing here changes a code's
//! PTX, only which codes are timed.

use super::*;
/// Units (output tiles × slices) the split counts of the search aim at, per SM of the
/// device: a quarter, half, one and two waves (see [`split_space`]).
const UNIT_TARGETS: [(u32, u32); 4] = [(1, 4), (1, 2), (1, 1), (2, 1)];

/// The search space: every tile shape the template supports, the deepest ring that fits
/// and a 4-stage ring, each with both grids; then the ping-pong tiles, on the persistent
/// grid only.
pub fn space() -> Vec<HopperConfig> {
    let tiles: [(u32, u32, u32); 10] =
        [(64, 64, 1), (64, 128, 1), (64, 256, 1), (128, 64, 1), (128, 128, 1), (128, 128, 2), (128, 256, 2), (256, 128, 2), (256, 64, 2), (128, 64, 2)];
    let mut out = Vec::new();
    for (bm, bn, consumers) in tiles {
        for ring in rings(HopperConfig::new(bm, bn, 2, consumers)) {
            for persistent in [false, true] {
                out.push(HopperConfig { persistent, ..ring });
            }
        }
    }
    for (bm, bn) in PINGPONG_TILES {
        for ring in rings(HopperConfig { persistent: true, consumer_mode: ConsumerMode::PingPong, ..HopperConfig::new(bm, bn, 2, 2) }) {
            out.push(ring);
        }
    }
    for bn in NARROW_BN {
        for ring in rings(HopperConfig::new(64, bn, 2, 1)) {
            out.push(ring);
        }
    }
    out
}

/// The narrow tiles' widths (64 rows, one consumer, tn only), for the shapes whose 64×64
/// tiles leave most SMs idle, as cuBLASLt's own picks there are.
pub const NARROW_BN: [u32; 4] = [16, 24, 32, 48];

/// Whether a candidate is worth its pulls on a problem: the layout takes it, a narrow
/// tile, a skinny cluster or accumulator chains only where 64×64 tiles make fewer than two
/// waves, and a cluster only where its side has as many tiles as it has CTAs.
fn suits(c: &HopperConfig, p: &Problem, sm_count: u32) -> bool {
    let skinny = skinny(p, sm_count);
    c.supports(p.layout)
        && (skinny || (c.bn >= 64 && c.cluster_size() == 1 && c.chains == 1))
        && c.cluster_fits(p)
}

/// A skinny shape: its 64×64 tiles make fewer than two waves of `sm_count`.
pub fn skinny(p: &Problem, sm_count: u32) -> bool {
    HopperConfig::new(64, 64, 2, 1).tiles(p) < 2 * sm_count
}

/// Clusters for the skinny shapes: 64-row tiles in clusters of 2, 4 and 8 along N that
/// multicast A (the operand every tile column shares when M is small), and 64×64 and 128×64
/// tiles in clusters along M that multicast B (N small); each with the deepest ring and a
/// 4-stage one, one tile per CTA. Why: docs/tuner.md.
pub fn skinny_cluster_codes() -> Vec<HopperConfig> {
    let mut out = Vec::new();
    for size in [2, 4, 8] {
        for bn in [16, 32, 64] {
            out.extend(rings(HopperConfig { cluster_n: size, ..HopperConfig::new(64, bn, 2, 1) }));
        }
        for (bm, consumers) in [(64, 1), (128, 2)] {
            out.extend(rings(HopperConfig { cluster_m: size, ..HopperConfig::new(bm, 64, 2, consumers) }));
        }
    }
    out
}

/// A code in the search's modes: stepped descriptors (`_dr`) and the tile's origin computed
/// before the K loop (`_ec`), every code. Why: docs/tuner.md.
pub fn searched_modes(c: HopperConfig) -> HopperConfig {
    HopperConfig { early_coords: true, ..step_twin(&c) }
}

// The 2-D grid's y is the tile rows: the largest M a problem may have makes 1,024 of 64,
// where a grid's y takes 65,535; the grouped grid's y is the tile columns (8,192 of 8 at
// most) and its z the groups (64).
const _: () = assert!(crate::problem::MAX_DIM.div_ceil(64) <= 65_535 && crate::problem::MAX_DIM.div_ceil(8) <= 65_535);

/// A served code's twins in the latency modes, the code itself left out: with `_ec`, on the
/// 2-D grid and on the grouped one where the code takes them
/// ([`HopperConfig::takes_grid2d`]), else on its own grid; `kaas tune --twins-of` times
/// them side by side with the code. (The search itself does not build the one-tile grids
/// yet: the same code serves the persistent grid there.)
pub fn latency_twins(c: &HopperConfig) -> Vec<HopperConfig> {
    let base = HopperConfig { early_coords: true, grid: TileGrid::Linear, ..*c };
    let grids: &[TileGrid] = if base.takes_grid2d() { &[TileGrid::TwoD, TileGrid::Grouped] } else { &[TileGrid::Linear] };
    grids.iter().map(|&grid| HopperConfig { grid, ..base }).filter(|t| t != c).collect()
}

/// The code in a descriptor mode: plain (neither), uniform (`_du`) or stepped (`_dr`, both).
pub fn in_desc_mode(c: &HopperConfig, desc: DescMode) -> HopperConfig {
    HopperConfig { desc, ..*c }
}

/// The twins of a code in the two other descriptor modes (plain, `_du`, `_dr`): the same
/// tile, ring and grid.
pub fn desc_twins(c: &HopperConfig) -> Vec<HopperConfig> {
    DescMode::ALL.into_iter().map(|d| in_desc_mode(c, d)).filter(|t| t != c).collect()
}

/// The twin of a code with stepped descriptors (`_dr`): the same tile, ring and grid.
pub fn step_twin(c: &HopperConfig) -> HopperConfig {
    in_desc_mode(c, DescMode::Stepped)
}

/// The TMA-store twin of a code (`_ts`): the same tile and grid with the TMA-store epilogue,
/// its ring cut where the second staging buffer leaves less room (e.g. 64×256 ping-pong: 5
/// stages become 4). None for split-K codes and tiles whose BN is not a multiple of 64.
pub fn tma_store_twin(c: &HopperConfig) -> Option<HopperConfig> {
    if c.split > 1 || !c.bn.is_multiple_of(64) {
        return None;
    }
    (2..=c.stages).rev().map(|stages| HopperConfig { stages, epilogue: Epilogue::TmaStore, ..*c }).find(|t| t.validate().is_ok())
}

/// K per ring slot beside 64 that the small tiles may take: two or four swizzle atoms.
pub const WIDE_BKS: [u32; 2] = [128, 256];

/// The K-`bk` twin of a small-tile code (BN at most 64, where the loop's fixed cost per ring
/// slot shows), for `bk` in [`WIDE_BKS`]: the same tile, grid and split with `bk / 64`
/// swizzle atoms per slot and that many times fewer slots (at least 3), the same bytes in
/// flight where they fit. None for the codes a wide slot does not run with, and for the
/// large tiles. Why: docs/tuner.md.
pub fn bk_twin(c: &HopperConfig, bk: u32) -> Option<HopperConfig> {
    if c.bk != BK || c.bn > 64 || !WIDE_BKS.contains(&bk) {
        return None;
    }
    (3..=(c.stages * BK).div_ceil(bk).max(3)).rev().map(|stages| HopperConfig { stages, bk, ..*c }).find(|t| t.validate().is_ok())
}

/// The K-`bk` twins of every code the search or a trial may offer (the compile and GPU
/// tests' list), split-K's included, once each.
pub fn bk_codes(bk: u32) -> Vec<HopperConfig> {
    let all: Vec<HopperConfig> = space().into_iter().chain(skinny_cluster_codes()).chain(skinny_chains_codes()).chain(multicast_codes()).chain(chains_codes()).chain(split_tiles()).chain(chains_split_tiles()).chain(tma_store_codes()).chain(narrow8_codes()).collect();
    twin_codes(&all, false, &[bk], false)
}

/// The twin codes (one module each) of `codes`, in the order [`space_for`] and the twin
/// trials twin a problem's candidates: the TMA-store twins first where `tma_store`, then the
/// K-`bk` twins ([`bk_twin`]) of the codes and of those, for each `bk` of `bks`, then the
/// twins in the two other descriptor modes ([`desc_twins`]) of all of them where
/// `desc_modes`. Each once, and none that `codes` already holds (as a module: compared by
/// [`HopperConfig::code_key`]).
pub fn twin_codes(codes: &[HopperConfig], tma_store: bool, bks: &[u32], desc_modes: bool) -> Vec<HopperConfig> {
    let mut all: Vec<HopperConfig> = codes.iter().map(|c| HopperConfig { persistent: false, l2_256: false, ..*c }).collect();
    let given = all.len();
    let add = |all: &mut Vec<HopperConfig>, twins: Vec<HopperConfig>| {
        for t in twins {
            if !all.iter().any(|o| o.code_key() == t.code_key()) {
                all.push(t);
            }
        }
    };
    if tma_store {
        let twins = all.iter().filter_map(tma_store_twin).collect();
        add(&mut all, twins);
    }
    for &bk in bks {
        let twins = all.iter().filter_map(|c| bk_twin(c, bk)).collect();
        add(&mut all, twins);
    }
    if desc_modes {
        let twins = all.iter().flat_map(desc_twins).collect();
        add(&mut all, twins);
    }
    all.split_off(given)
}

/// The TMA-store twins of every unsplit code the search or a trial may offer (`kaas tune
/// --trial tma-store`), once each. cuBLASLt's and CUTLASS's Hopper kernels store
/// C with a TMA store; ours, cooperative, hold both consumers in the epilogue while the
/// tensor cores idle. Not in [`space`]: [`space_for`] adds the twins of a problem's own
/// candidates where [`takes_tma_store`].
pub fn tma_store_codes() -> Vec<HopperConfig> {
    let all: Vec<HopperConfig> = space().into_iter().chain(skinny_cluster_codes()).chain(skinny_chains_codes()).chain(multicast_codes()).chain(ksplit_codes()).chain(chains_codes()).collect();
    twin_codes(&all, true, &[], false)
}

/// The 256×160 tile (tn; two consumers of 128 rows, 160 accumulators per thread, 4
/// stages), on both grids: a trial, not in [`space`]. Why: docs/tuner.md.
pub fn wide_160_codes() -> Vec<HopperConfig> {
    let c = HopperConfig::new(256, 160, 4, 2);
    vec![c, HopperConfig { persistent: true, ..c }]
}

/// The 192×128 tile of three consumer warpgroups (64 rows each, 64 accumulators a thread,
/// B shared by all three: a sixth fewer operand bytes per FLOP than 128×128), with the
/// deepest ring on both grids and as hybrid stream-K on a grid of `sm_count` blocks: a
/// trial, not in [`space`].
/// cuBLASLt's pick at 512×35840×5120 on an H200 is this tile (BENCHMARKS.md, "16 to 1,024
/// tokens on the H200").
pub fn rows_192_codes(sm_count: u32) -> Vec<HopperConfig> {
    let c = HopperConfig::new(192, 128, 2, 3);
    let Some(deepest) = rings(c).into_iter().next() else { return Vec::new() };
    let hybrid = HopperConfig { split: sm_count.max(2), reduction: Reduction::StreamKHybrid, ..c };
    [deepest, HopperConfig { persistent: true, ..deepest }].into_iter().chain(rings(hybrid).into_iter().take(1)).collect()
}

/// The stream-K codes (`_sks`), each with the deepest ring, on a grid of `sm_count`
/// blocks: a trial, not in [`split_space`]. Why: docs/tuner.md.
pub fn stream_k_codes(sm_count: u32) -> Vec<HopperConfig> {
    let mut out = Vec::new();
    for (bm, bn, consumers) in [(64, 128, 1), (128, 128, 2), (128, 256, 2)] {
        let c = HopperConfig { split: sm_count.max(2), reduction: Reduction::StreamK, ..HopperConfig::new(bm, bn, 2, consumers) };
        out.extend(rings(c).into_iter().take(1));
    }
    out
}

/// The stream-K trial's codes on a grid of `sm_count` blocks: [`stream_k_codes`], and hybrid
/// stream-K (`_skh`) of the large cooperative tiles, alone and in multicast pairs along M and
/// along N, each with the deepest ring. The hybrid is meant for the large shapes' last wave
/// (with 128×256 tiles 8192³ makes 15.5 waves of 132, so the persistent grid idles half of
/// its last one). Not in the search. Why: docs/tuner.md.
pub fn stream_k_trial_codes(sm_count: u32) -> Vec<HopperConfig> {
    let mut out = stream_k_codes(sm_count);
    for (bm, bn, consumers) in [(128, 256, 2), (256, 128, 2), (128, 128, 2)] {
        for (cluster_m, cluster_n) in [(1, 1), (2, 1), (1, 2)] {
            let grid = sm_count.max(2) / (cluster_m * cluster_n) * (cluster_m * cluster_n);
            let c = HopperConfig { split: grid, reduction: Reduction::StreamKHybrid, cluster_m, cluster_n, ..HopperConfig::new(bm, bn, 2, consumers) };
            out.extend(rings(c).into_iter().take(1));
        }
    }
    out
}

/// Codes that run in clusters of two along M (`_m2`: each CTA loads half of the B tile and
/// multicasts it to both) and, for the large tiles, along N (`_n2`: half of the A tile), on
/// both grids, and the ping-pong tiles in pairs along M: a trial, not in [`space`]. Why: docs/tuner.md.
pub fn multicast_codes() -> Vec<HopperConfig> {
    let mut out = Vec::new();
    let along_m = MULTICAST_TILES.iter().map(|&(bm, bn, consumers)| HopperConfig { cluster_m: 2, ..HopperConfig::new(bm, bn, 2, consumers) });
    let along_n = MULTICAST_N_TILES.iter().map(|&(bm, bn, consumers)| HopperConfig { cluster_n: 2, ..HopperConfig::new(bm, bn, 2, consumers) });
    // The ping-pong tiles the mid and large shapes pick most, in pairs along M.
    let pingpong = [(64, 256), (128, 128)].map(|(bm, bn)| HopperConfig { cluster_m: 2, consumer_mode: ConsumerMode::PingPong, ..HopperConfig::new(bm, bn, 2, 2) });
    for c in along_m.chain(along_n).chain(pingpong) {
        if let Some(deepest) = rings(c).into_iter().next() {
            for persistent in [false, true] {
                out.push(HopperConfig { persistent, ..deepest });
            }
        }
    }
    out
}

/// Tiles (BM, BN, consumers) that run in clusters of two along M, where halving each CTA's
/// B traffic from L2 could pay for the cluster's synchronisation: the large cooperative
/// ones, and the 64-row ones the mid shapes pick. Every algorithm in the H100 baseline
/// table that cuBLASLt's autotuning chose runs in clusters of two or more CTAs.
const MULTICAST_TILES: [(u32, u32, u32); 5] = [(128, 256, 2), (256, 128, 2), (128, 128, 2), (64, 128, 1), (64, 256, 1)];
/// The large tiles in clusters of two along N (`_n2`, multicasting A), cuBLASLt's autotuned
/// pick on many large tn shapes, and 128×64 with two consumers, its heuristic pick on tn
/// 1024×1024×8192.
const MULTICAST_N_TILES: [(u32, u32, u32); 4] = [(128, 256, 2), (256, 128, 2), (128, 128, 2), (128, 64, 2)];

/// K split across the two consumer warpgroups (`_kw`): 64-row tiles from 64 × 16 to 64 ×
/// 128, each with the deepest even ring that fits and a 4-stage one, on both grids. A trial
/// for the small and skinny shapes, not in [`space`]. Why: docs/tuner.md.
pub fn ksplit_codes() -> Vec<HopperConfig> {
    let mut out = Vec::new();
    for bn in [16, 32, 64, 128] {
        // validate() takes even rings only, so the deepest that fits is even.
        for ring in rings(HopperConfig { consumer_mode: ConsumerMode::KSplit, ..HopperConfig::new(64, bn, 2, 2) }) {
            out.push(ring);
            out.push(HopperConfig { persistent: true, ..ring });
        }
    }
    out
}

/// K split across two consumers in multicast pairs (`_kw` with `_m2`: two CTAs along M share
/// B; `_n2`: along N, share A), 64 × 64 and 64 × 128 tiles with the deepest even ring, on
/// both grids. `kaas tune --trial ksplit` times them on the skinny shapes. Why: docs/tuner.md.
pub fn ksplit_pair_codes() -> Vec<HopperConfig> {
    let mut out = Vec::new();
    for bn in [64, 128] {
        for (cluster_m, cluster_n) in [(2, 1), (1, 2)] {
            if let Some(ring) = rings(HopperConfig { consumer_mode: ConsumerMode::KSplit, cluster_m, cluster_n, ..HopperConfig::new(64, bn, 2, 2) }).into_iter().next() {
                out.push(ring);
                out.push(HopperConfig { persistent: true, ..ring });
            }
        }
    }
    out
}

/// Consumers that split the tile's columns (`_cs`): 64 × 128 and 64 × 256 with two consumer
/// warpgroups, each an m64 chain over its half of the columns; alone (the deepest ring and a
/// 4-stage one) and in pairs along M and N (the deepest ring), on both grids; and 64 × 128
/// with the atomic split-K, alone and in pairs (`split` 2 stands for every count:
/// [`col_split_space`] gives a problem's); each also with `wait0`. A trial (`kaas tune
/// --trial col-split`). Why: docs/tuner.md.
pub fn col_split_codes() -> Vec<HopperConfig> {
    let mut out = Vec::new();
    for bn in [128, 256] {
        for (cluster_m, cluster_n) in [(1, 1), (2, 1), (1, 2)] {
            let all = rings(HopperConfig { consumer_mode: ConsumerMode::ColSplit, cluster_m, cluster_n, ..HopperConfig::new(64, bn, 2, 2) });
            for ring in all.into_iter().take(if cluster_m * cluster_n == 1 { 2 } else { 1 }) {
                out.push(ring);
                out.push(HopperConfig { persistent: true, ..ring });
            }
        }
    }
    // Each also waiting for its wgmmas K-tile by K-tile, as cuBLASLt's kernel does.
    let twins: Vec<HopperConfig> = out.iter().map(|c| HopperConfig { wait0: true, ..*c }).collect();
    out.extend(twins);
    out.extend(col_split_split_tiles());
    out
}

/// The atomic split-K codes among [`col_split_codes`]: 64 × 128, deepest ring, alone and in
/// pairs.
fn col_split_split_tiles() -> Vec<HopperConfig> {
    [(1, 1), (2, 1), (1, 2)]
        .into_iter()
        .filter_map(|(cluster_m, cluster_n)| rings(HopperConfig { consumer_mode: ConsumerMode::ColSplit, split: 2, reduction: Reduction::Atomic, cluster_m, cluster_n, ..HopperConfig::new(64, 128, 2, 2) }).into_iter().next())
        .flat_map(|c| [c, HopperConfig { wait0: true, ..c }])
        .collect()
}

/// [`col_split_codes`]' candidates for a problem: the unsplit ones whose cluster fits it, and
/// with fp32 accumulators the split-K ones at [`split_space`]'s counts.
pub fn col_split_space(p: &Problem, sm_count: u32) -> Vec<HopperConfig> {
    let mut out: Vec<HopperConfig> = col_split_codes().into_iter().filter(|c| c.split == 1 && c.cluster_fits(p)).collect();
    if p.acc == Acc::F32 {
        out.extend(col_split_split_tiles().into_iter().filter(|t| t.cluster_fits(p)).flat_map(|t| split_counts(&t, p, sm_count)));
    }
    out
}

/// Accumulator chains (`_x2`, `_x4`) for the 64-row tiles of one consumer, 64 × 16 to 64 ×
/// 64, with the deepest ring and a 4-stage one: the k16 steps of a K-tile go round-robin
/// to separate accumulators. Two chains ([`skinny_chains_codes`]) are in the search on the
/// skinny shapes; four stay with `kaas tune --trial chains`. Why: docs/tuner.md.
pub fn chains_codes() -> Vec<HopperConfig> {
    let mut out = Vec::new();
    for bn in NARROW_BN.into_iter().chain([64]) {
        for chains in [2, 4] {
            out.extend(rings(HopperConfig { chains, ..HopperConfig::new(64, bn, 2, 1) }));
        }
    }
    out
}

/// The atomic split-K codes of one 64-row consumer with two accumulator chains, and their
/// candidates for a problem: [`split_space`]'s with two chains (the skinny shapes with long
/// K are split-K's).
pub fn chains_split_tiles() -> Vec<HopperConfig> {
    split_tiles().into_iter().filter(|c| c.reduction.is_atomic()).filter_map(two_chains).collect()
}

/// The unsplit codes with two accumulator chains ([`chains_codes`] less the four-chain
/// ones), which the search offers the skinny shapes with acc=f32.
pub fn skinny_chains_codes() -> Vec<HopperConfig> {
    chains_codes().into_iter().filter(|c| c.chains == 2).collect()
}

/// [`chains_split_tiles`]' candidates for a problem.
pub fn chains_split_space(p: &Problem, sm_count: u32) -> Vec<HopperConfig> {
    split_space(p, sm_count).into_iter().filter_map(two_chains).collect()
}

/// A code of one 64-row consumer with two accumulator chains, where its registers allow.
fn two_chains(c: HopperConfig) -> Option<HopperConfig> {
    let c = HopperConfig { chains: 2, ..c };
    (c.bm == 64 && c.consumers == 1 && c.validate().is_ok()).then_some(c)
}

/// Ping-pong tiles (each consumer's own): 128 accumulator registers or fewer per thread.
const PINGPONG_TILES: [(u32, u32); 4] = [(64, 128), (64, 256), (128, 64), (128, 128)];

/// The configuration with the deepest ring that fits (up to 8 stages, 16 for the narrow
/// tiles, whose stages are small) and, where that is deeper, with a 4-stage ring (more
/// blocks per SM); none when no ring fits.
fn rings(c: HopperConfig) -> Vec<HopperConfig> {
    let top = if c.bn < 64 { 16 } else { 8u32 };
    let Some(deepest) = (2..=top).rev().map(|stages| HopperConfig { stages, ..c }).find(|c| c.validate().is_ok()) else { return Vec::new() };
    let mut out = vec![deepest];
    if deepest.stages > 4 {
        out.push(HopperConfig { stages: 4, ..c });
    }
    out
}

/// The split-K codes: each tile with the deepest ring that fits and, where that is
/// deeper, a 4-stage ring (two or three blocks per SM), with either reduction.
pub fn split_tiles() -> Vec<HopperConfig> {
    let mut out = Vec::new();
    for atomic in [false, true] {
        for (bm, bn, consumers) in [(64, 32, 1), (64, 64, 1), (64, 128, 1), (128, 64, 1), (128, 128, 2), (128, 256, 2)] {
            if bn < 64 && !atomic {
                continue;
            }
            let all = rings(HopperConfig { split: 2, reduction: if atomic { Reduction::Atomic } else { Reduction::InOrder }, ..HopperConfig::new(bm, bn, 2, consumers) });
            // A 4-stage ring only where one consumer leaves room for a second block per SM.
            out.extend(all.into_iter().take(if consumers == 1 { 2 } else { 1 }));
        }
    }
    out
}

/// Atomic split-K in multicast clusters of two (`_m2…_ska`, `_n2…_ska`): a cluster takes one
/// K-slice of two adjacent tiles, each CTA loads half of the operand they share and
/// multicasts it, and each reduces its own tile as the plain atomic split-K does. The
/// deepest ring of the tiles the mid shapes pick, in pairs along M (sharing B) and along N
/// (sharing A). `split` 2 stands for every count: [`multicast_split_space`] gives a
/// problem's. The search takes them where [`takes_multicast_split`]. Why: docs/tuner.md.
pub fn multicast_split_tiles() -> Vec<HopperConfig> {
    multicast_split_codes(&[(2, 1), (1, 2)])
}

/// The same tiles in clusters of four (2×2, 4×1, 1×4: each CTA loads a quarter or half of
/// each shared operand): `kaas tune --trial multicast-split` times them; not searched. Why: docs/tuner.md.
pub fn multicast_split_quads() -> Vec<HopperConfig> {
    multicast_split_codes(&[(2, 2), (4, 1), (1, 4)])
}

/// Every multicast split-K code, pairs and clusters of four: `--trial multicast-split`'s.
pub fn multicast_split_all() -> Vec<HopperConfig> {
    multicast_split_tiles().into_iter().chain(multicast_split_quads()).collect()
}

fn multicast_split_codes(clusters: &[(u32, u32)]) -> Vec<HopperConfig> {
    let mut out = Vec::new();
    for (bm, bn, consumers) in [(64, 64, 1), (64, 128, 1), (128, 64, 1), (128, 128, 2)] {
        for &(cluster_m, cluster_n) in clusters {
            let c = HopperConfig { split: 2, reduction: Reduction::Atomic, cluster_m, cluster_n, ..HopperConfig::new(bm, bn, 2, consumers) };
            out.extend(rings(c).into_iter().take(1));
        }
    }
    out
}

/// Whether the search offers a problem the multicast pairs' split-K
/// ([`multicast_split_tiles`]): fp32 accumulators and K ≥ 8192, where they won.
pub fn takes_multicast_split(p: &Problem) -> bool {
    p.acc == Acc::F32 && p.k >= 8192
}

/// The candidates of multicast split-K codes (`codes`: [`multicast_split_tiles`] or
/// [`multicast_split_quads`]) for a problem with fp32 accumulators: the split counts
/// [`split_space`] gives each, where the problem has a tile for every CTA of the cluster's
/// sides.
pub fn multicast_split_space(codes: Vec<HopperConfig>, p: &Problem, sm_count: u32) -> Vec<HopperConfig> {
    if p.acc != Acc::F32 {
        return Vec::new();
    }
    codes
        .into_iter()
        .filter(|t| t.supports(p.layout) && t.cluster_fits(p))
        .flat_map(|t| split_counts(&t, p, sm_count))
        .collect()
}

/// The cluster split-K codes (`_skc`): the tiles whose fp32 partial fits a drained ring,
/// each with the deepest ring and, with one consumer, a 4-stage one too (smaller blocks
/// are easier to place as a cluster), for 2 to 16 slices. Not in [`split_space`]. Why: docs/tuner.md.
pub fn cluster_tiles() -> Vec<HopperConfig> {
    let mut out = Vec::new();
    for (bm, bn, consumers) in [(64, 64, 1), (64, 128, 1), (128, 64, 1), (128, 128, 2)] {
        let all = rings(HopperConfig { split: 2, reduction: Reduction::Cluster, ..HopperConfig::new(bm, bn, 2, consumers) });
        out.extend(all.into_iter().take(if consumers == 1 { 2 } else { 1 }));
    }
    out
}

/// The split-K candidates that suit a problem whose output needs fewer blocks than a wave
/// of `sm_count`: for each atomic split-K code, the split counts that make a quarter, half,
/// one or two waves of units, and the largest that leaves two K-tiles per slice. What
/// transfers between neighbouring shapes is the wave a count makes, so the bandit's priors
/// name comparable arms. The in-order reduction is not searched; it stays in the template
/// for whoever needs bit-identical runs. Why: docs/tuner.md.
pub fn split_space(p: &Problem, sm_count: u32) -> Vec<HopperConfig> {
    let mut out = Vec::new();
    if p.acc != Acc::F32 {
        return out;
    }
    for t in split_tiles().into_iter().filter(|t| t.reduction.is_atomic() && t.supports(p.layout)) {
        out.extend(split_counts(&t, p, sm_count));
    }
    out
}

/// An atomic split-K code's candidates for a problem whose tiles leave SMs idle: the slice
/// counts that fill [`UNIT_TARGETS`] of the SMs, and half the K-tiles, where each slice
/// keeps two K-tiles and the grid stays within two waves.
fn split_counts(t: &HopperConfig, p: &Problem, sm_count: u32) -> Vec<HopperConfig> {
    let tiles = t.tiles(p);
    if tiles >= sm_count {
        return Vec::new();
    }
    let ktiles = p.k.div_ceil(t.bk);
    let mut splits: Vec<u32> = UNIT_TARGETS.iter().map(|(num, den)| sm_count * num / den / tiles).chain([ktiles / 2]).collect();
    splits.sort_unstable();
    splits.dedup();
    splits.into_iter().filter(|&s| s >= 2 && ktiles >= 2 * s && tiles * s <= 2 * sm_count).map(|s| HopperConfig { split: s, ..*t }).collect()
}

/// The 8-column tiles (`kaas tune --trial narrow8`): 64×8 with one consumer, tn only, each
/// ring [`rings`] gives, with two accumulator chains, and atomic split-K (`split` 2 stands
/// for every count). One slot of B is a single 1 KiB swizzle atom.
pub fn narrow8_codes() -> Vec<HopperConfig> {
    let base = HopperConfig::new(64, 8, 2, 1);
    let mut out = rings(base);
    out.extend(rings(HopperConfig { chains: 2, ..base }));
    out.extend(rings(HopperConfig { split: 2, reduction: Reduction::Atomic, ..base }).into_iter().take(2));
    out
}

/// The 64×8 tiles the search takes where [`takes_narrow8`]: the K-256 twins ([`bk_twin`])
/// of the unsplit one-chain [`narrow8_codes`], one per ring depth the twin keeps (3 and 4
/// slots of 256).
pub fn narrow8_search_codes() -> Vec<HopperConfig> {
    let mut out: Vec<HopperConfig> = Vec::new();
    for t in narrow8_codes().iter().filter(|c| c.chains == 1 && c.split <= 1).filter_map(|c| bk_twin(c, 256)) {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// Whether the search offers a problem the 64×8 tiles ([`narrow8_search_codes`]): fp32
/// accumulators, K ≥ 256 and at most 2^28 FLOP. Why: docs/tuner.md.
pub fn takes_narrow8(p: &Problem) -> bool {
    p.acc == Acc::F32 && p.k >= 256 && small(p)
}

/// At most 2^28 FLOP: where the shorter K of a wider K-tile ring, and the 8-column tiles,
/// pay off ([`takes_bk128`], [`takes_narrow8`]).
fn small(p: &Problem) -> bool {
    p.shape().flops() <= 2f64.powi(28)
}

/// [`narrow8_codes`]' candidates for a problem: on the skinny shapes, the unsplit ones
/// (chains with fp32 accumulators only) and, with fp32, the split-K ones at
/// [`split_counts`].
pub fn narrow8_space(p: &Problem, sm_count: u32) -> Vec<HopperConfig> {
    if !skinny(p, sm_count) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for c in narrow8_codes() {
        if c.split > 1 {
            if p.acc == Acc::F32 {
                out.extend(split_counts(&c, p, sm_count));
            }
        } else if c.chains == 1 || p.acc == Acc::F32 {
            out.push(c);
        }
    }
    out
}

/// Swap-AB's token tiles: the BN of a `_sw` code runs along the problem's M.
pub const SWAP_BN: [u32; 8] = [8, 16, 24, 32, 48, 64, 128, 256];

/// The largest M (tokens) that [`swap_space`] offers swap-AB codes (`kaas tune --trial swap`).
pub const SWAP_MAX_M: u32 = 256;

/// The largest M the search itself offers them ([`space_for`]): up to 48 tokens a 64-row
/// tile wastes a quarter to seven eighths of each wgmma, which swap-AB does not; from 64 on
/// the plain tiles waste nothing and swap-AB lost to them (2026-11-29, H200). Why: docs/tuner.md.
pub const SEARCH_SWAP_MAX_M: u32 = 48;

/// Swap-AB codes (`_sw`, tn): for each token width of [`SWAP_BN`] (a problem takes the
/// narrowest that holds its M, [`swap_space`]), tiles of 64 and 128 weight rows with one
/// consumer, 128 and 256 with two, and 384 with three up to 64 tokens (cuBLASLt's pick at
/// 32 tokens by 35840 weight rows on an H200 is 384×32: 94 CTAs, one wave), each with the
/// rings [`rings`] gives; the deepest ring also
/// with the atomic split-K (`split` 2 stands for every count) and in a cluster of two along
/// the weight's rows that multicasts the tokens; and two accumulator chains on the one-
/// consumer tiles of up to 32 tokens; and stream-K, plain and hybrid, on the deepest ring
/// (`split` 132 stands for every grid). Why: docs/tuner.md.
pub fn swap_codes() -> Vec<HopperConfig> {
    SWAP_BN.into_iter().flat_map(|bn| swap_width_codes(bn, 132)).collect()
}

/// [`swap_codes`] of one token width, stream-K on a grid of `sm_count`.
fn swap_width_codes(bn: u32, sm_count: u32) -> Vec<HopperConfig> {
    let mut out = Vec::new();
    for (bm, consumers) in [(64, 1), (128, 1), (128, 2), (256, 2), (384, 3)] {
        let base = HopperConfig { swap: true, ..HopperConfig::new(bm, bn, 2, consumers) };
        let all = rings(base);
        let Some(deepest) = all.first().copied() else { continue };
        out.extend(all);
        out.extend(rings(HopperConfig { split: 2, reduction: Reduction::Atomic, ..deepest }).into_iter().take(1));
        // Stream-K balances the tiles' last wave: 32 tokens against 35840 weight rows make
        // 280 tiles of 128 rows, 2.1 waves of 132 SMs.
        for reduction in [Reduction::StreamK, Reduction::StreamKHybrid] {
            out.extend(rings(HopperConfig { split: sm_count.max(2), reduction, ..deepest }).into_iter().take(1));
        }
        out.extend(rings(HopperConfig { cluster_m: 2, ..deepest }).into_iter().take(1));
        if bn <= 32 && consumers == 1 {
            out.extend(rings(HopperConfig { chains: 2, ..deepest }).into_iter().take(1));
        }
    }
    out
}

/// A problem's swap-AB candidates (tn or nn, M ≤ [`SWAP_MAX_M`]): the codes of the narrowest
/// token tile that holds M and, from 64 tokens, of the tile half as wide (two tiles along
/// the tokens, twice the CTAs); unsplit ones one tile per CTA and, where the tiles exceed
/// the SMs, on the persistent grid; with fp32 accumulators, split ones at [`split_counts`]
/// and stream-K on a grid of `sm_count`.
pub fn swap_space(p: &Problem, sm_count: u32) -> Vec<HopperConfig> {
    if p.m > SWAP_MAX_M {
        return Vec::new();
    }
    let fit = SWAP_BN.into_iter().find(|&w| w >= p.m).unwrap_or(SWAP_MAX_M);
    let widths: &[u32] = if fit >= 64 { &[fit, fit / 2] } else { &[fit] };
    let mut out = Vec::new();
    for &bn in widths {
        for c in swap_width_codes(bn, sm_count).into_iter().filter(|c| c.supports(p.layout)) {
            if c.split > 1 {
                // fp32 partials only; stream-K's count is its grid, the others' the waves.
                if p.acc == Acc::F32 {
                    if c.reduction.is_stream_k() { out.push(c) } else { out.extend(split_counts(&c, p, sm_count)) }
                }
            } else if (c.chains == 1 || p.acc == Acc::F32) && c.cluster_fits(p) {
                out.push(c);
                if c.tiles(p) > sm_count {
                    out.push(HopperConfig { persistent: true, ..c });
                }
            }
        }
    }
    out
}

/// Every candidate for a problem: [`space`] and [`skinny_cluster_codes`] (the narrow tiles
/// and the clusters where they suit it), then [`split_space`]; on the skinny shapes with
/// acc=f32, two accumulator chains too, unsplit and split ([`skinny_chains_codes`],
/// [`chains_split_space`]); up to [`SEARCH_SWAP_MAX_M`] tokens, [`swap_space`]. Each
/// with the L2 promotion [`wide_l2_suits`] the problem.
pub fn space_for(p: &Problem, sm_count: u32) -> Vec<HopperConfig> {
    let mut out = space();
    out.extend(skinny_cluster_codes());
    if p.acc == Acc::F32 {
        out.extend(skinny_chains_codes());
    }
    out.retain(|c| suits(c, p, sm_count));
    out.extend(split_space(p, sm_count));
    if takes_multicast_split(p) {
        out.extend(multicast_split_space(multicast_split_tiles(), p, sm_count));
    }
    if skinny(p, sm_count) {
        out.extend(chains_split_space(p, sm_count));
    }
    if p.m <= SEARCH_SWAP_MAX_M {
        out.extend(swap_space(p, sm_count));
    }
    if takes_tma_store(p) {
        let twins: Vec<HopperConfig> = out.iter().filter_map(tma_store_twin).collect();
        extend_new(&mut out, twins);
    }
    for (bk, takes) in [(128, takes_bk128(p)), (256, takes_bk256(p))] {
        if takes {
            let twins: Vec<HopperConfig> = out.iter().filter(|c| bk != 256 || bk256_suits(c, p)).filter_map(|c| bk_twin_for(c, p, bk)).collect();
            extend_new(&mut out, twins);
        }
    }
    if takes_narrow8(p) {
        extend_new(&mut out, narrow8_search_codes());
    }
    let l2_256 = wide_l2_suits(p);
    out.into_iter().map(|c| HopperConfig { l2_256, ..c }).collect()
}

fn extend_new(out: &mut Vec<HopperConfig>, more: Vec<HopperConfig>) {
    for c in more {
        if !out.contains(&c) {
            out.push(c);
        }
    }
}

/// Whether the search gives a problem's unsplit 64-column candidates their TMA-store twins
/// ([`tma_store_twin`]): fp32 accumulators (`--trial tma-store` adds them on fp16). Why: docs/tuner.md.
pub fn takes_tma_store(p: &Problem) -> bool {
    p.acc == Acc::F32
}

/// Whether the search gives a problem's small tiles their K-128 twins ([`bk_twin`]): fp32
/// accumulators and K ≥ 1024, or K ≥ 256 at most 2^28 FLOP. Elsewhere: `--trial bk128`. Why: docs/tuner.md.
pub fn takes_bk128(p: &Problem) -> bool {
    p.acc == Acc::F32 && (p.k >= 1024 || (p.k >= 256 && small(p)))
}

/// Whether the search gives a problem's small tiles their K-256 twins: where it takes the
/// K-128 ones, on tn, and on nn for the narrow tiles only ([`bk256_suits`]). Elsewhere:
/// `--trial bk256`. Why: docs/tuner.md.
pub fn takes_bk256(p: &Problem) -> bool {
    takes_bk128(p)
}

/// Whether a candidate of a problem that [`takes_bk256`] gets its K-256 twin: every tn one,
/// and nn's narrow tiles.
pub fn bk256_suits(c: &HopperConfig, p: &Problem) -> bool {
    p.layout == Layout::Tn || c.bn < 64
}

/// [`bk_twin`] where the problem suits it: fp32 accumulators (with fp16 ones a K-128 code
/// deviated more than cuBLAS does), and a split keeps its count only where each slice still
/// gets two K-tiles of `bk`.
pub fn bk_twin_for(c: &HopperConfig, p: &Problem, bk: u32) -> Option<HopperConfig> {
    if p.acc != Acc::F32 {
        return None;
    }
    bk_twin(c, bk).filter(|t| t.split <= 1 || t.reduction.is_stream_k() || p.k.div_ceil(t.bk) >= 2 * t.split)
}

/// Whether the search's candidates for a problem take tensor maps that widen L2 misses to
/// 256 bytes ([`HopperConfig::l2_256`]): tn with K ≥ 512, below 2^41 FLOP. A tn K-tile's box
/// is 128 bytes of each row of A and B, so a 256-byte promotion brings the next K-tile's
/// bytes with it; an nn B box's neighbour in the row belongs to the next tile column. Why: docs/tuner.md.
pub fn wide_l2_suits(p: &Problem) -> bool {
    p.layout == Layout::Tn && p.k >= 512 && p.shape().flops() < 2f64.powi(41)
}

