//! The Ampere-style family (`kernels/templates/mma_hgemm.cu`): `mma.sync` m16n8k16 fed by
//! `ldmatrix` from XOR-swizzled shared memory, a multi-stage `cp.async` ring, a grouped tile
//! order, and split-K with an in-order (`_sk`) or atomic (`_ska`) reduction, or on sm_90 in a
//! cluster (`_skc`, reduced through distributed shared memory). Plain pointers,
//! no tensor maps: it runs on sm_80 and later, and it has far less fixed cost than the
//! Hopper family's TMA and mbarrier set-up, which is what small shapes need. One PTX per
//! (target, accumulator, layout, tile, warps, stages, reduction); the split count is a
//! launch parameter.

use serde::{Deserialize, Serialize};

use crate::kernels::axes::{self, Axis, Knob, Names, REDUCTION_KNOBS, Values, head_field};
pub use crate::kernels::axes::Reduction;
use crate::gpu::{GpuError, nvrtc};
use crate::manifest::{ABI, Buffer, I32Value, Launch, Manifest, Param};
use crate::problem::{Acc, Arch, Layout, Problem};

pub const TEMPLATE: &str = include_str!("../../kernels/templates/mma_hgemm.cu");
pub const TEMPLATE_NAME: &str = "mma_hgemm.cu";
/// Dynamic shared memory one block may use (227 KiB on sm_90; the launcher checks the
/// device's own limit).
const SMEM_LIMIT: u32 = 232_448;
/// Problems up to this many multiply-adds get the family's candidates (2^32 FLOP): above
/// it the Hopper family's wgmma main loop is what can compete (on an H100, 64×64 tiles of
/// this family take 1024³ in 11.0 µs where cuBLASLt takes 5.6).
pub const ELIGIBLE_MACS: u64 = 1 << 31;

/// One point of the family's search space. Serialized as its code's name and split count
/// ([`axes::CodeForm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "axes::CodeForm", into = "axes::CodeForm")]
pub struct MmaConfig {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub warps_m: u32,
    pub warps_n: u32,
    pub stages: u32,
    /// Split-K slices, a launch parameter (the cluster's size with [`Reduction::Cluster`]).
    /// 1 exactly when `reduction` is `None`.
    pub split: u32,
    /// In order, atomic, or (sm_90) in a cluster whose ranks 1.. push their partials into
    /// rank 0's shared memory; not stream-K.
    pub reduction: Reduction,
}

// The serialized form is the one every table-driven family has ([`axes::CodeForm`]).
axes::code_form!(MmaConfig, NAMES, MmaConfig { bm: 0, bn: 0, bk: 0, warps_m: 0, warps_n: 0, stages: 0, split: 1, reduction: Reduction::None });

/// Ordered as the serialized form orders: by code, then the split count.
impl Ord for MmaConfig {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (NAMES.code_key(self), self.split).cmp(&(NAMES.code_key(other), other.split))
    }
}

impl PartialOrd for MmaConfig {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The family's table (see [`crate::kernels::axes`]): the reduction, as the Hopper family names it.
pub static AXES: [Axis<MmaConfig>; 1] = [Axis {
    name: "reduction",
    values: Values::Choice(REDUCTIONS),
    label_rank: 0,
    get: |c| c.reduction as u32,
    set: |c, v| c.reduction = Reduction::ALL[v as usize],
}];

/// The reductions the template builds: unsplit, in order, atomic and in a cluster.
const REDUCTIONS: &[Knob] = REDUCTION_KNOBS.split_at(4).0;

/// The entry names' prefix.
pub const ENTRY_PREFIX: &str = "kaas_mma_";

/// The family's names: `kaas_mma_f32_tn_64x64x64_w2x2_s4`, then the rows of [`AXES`].
pub static NAMES: Names<MmaConfig> = Names {
    prefix: ENTRY_PREFIX,
    head: &[
        head_field!("", "KAAS_BM" => bm, "KAAS_BN" => bn, "KAAS_BK" => bk),
        head_field!("w", "KAAS_WARPS_M" => warps_m, "KAAS_WARPS_N" => warps_n),
        head_field!("s", "KAAS_STAGES" => stages),
    ],
    axes: &AXES,
    acc_layout_defines: true,
};

/// Units (output tiles × slices) the split counts aim at, in waves of one block per SM:
/// half, one, two and four (small blocks share an SM, so more than one wave still runs at once).
const UNIT_TARGETS: [(u32, u32); 4] = [(1, 2), (1, 1), (2, 1), (4, 1)];

impl MmaConfig {
    /// The template's static assertions, in words.
    pub fn validate(&self) -> Result<(), String> {
        let MmaConfig { bm, bn, bk, warps_m, warps_n, stages, split, reduction } = *self;
        if !matches!(bk, 32 | 64) {
            return Err(format!("BK {bk} is not 32 or 64"));
        }
        if warps_m == 0 || warps_n == 0 || warps_m * warps_n > 16 {
            return Err(format!("{warps_m}×{warps_n} warps: 1 to 16"));
        }
        if !bm.is_multiple_of(16 * warps_m) || !bn.is_multiple_of(16 * warps_n) || !bn.is_multiple_of(32) || bm == 0 {
            return Err(format!("{bm}×{bn} does not split into 16×16 pieces per warp over {warps_m}×{warps_n} warps (BN a multiple of 32)"));
        }
        if !(2..=8).contains(&stages) {
            return Err(format!("{stages} stages; 2 to 8"));
        }
        if split == 0 || split > 1024 {
            return Err(format!("split {split} is not 1 to 1024"));
        }
        if (split > 1) != (reduction != Reduction::None) || reduction.is_stream_k() {
            return Err(format!("split {split} with reduction {reduction:?}: split-K takes 2 or more slices and a reduction (in order, atomic or in a cluster), an unsplit code neither"));
        }
        if reduction == Reduction::Cluster && !(2..=CLUSTER_SPLIT_MAX).contains(&split) {
            return Err(format!("split-K in a cluster takes 2 to {CLUSTER_SPLIT_MAX} slices (split {split})"));
        }
        if self.shared_mem_bytes() > SMEM_LIMIT {
            return Err(format!("{} B of shared memory exceed {SMEM_LIMIT}", self.shared_mem_bytes()));
        }
        Ok(())
    }

    pub fn threads(&self) -> u32 {
        32 * self.warps_m * self.warps_n
    }

    /// The ring: STAGES × (A tile + B tile), fp16, unpadded (the tiles are swizzled); split-K
    /// in a cluster adds rank 0's inbox, one fp32 partial per other rank.
    pub fn shared_mem_bytes(&self) -> u32 {
        let inbox = if self.reduction == Reduction::Cluster { (self.split - 1) * self.bm * self.bn * 4 } else { 0 };
        self.stages * (self.bm + self.bn) * self.bk * 2 + inbox
    }

    pub fn tiles(&self, p: &Problem) -> u32 {
        p.m.div_ceil(self.bm) * p.n.div_ceil(self.bn)
    }

    /// As the template documents it: counters rounded up to 256 bytes, then one fp32 sum
    /// per tile (atomic) or every unit's partial (in order).
    pub fn workspace_bytes(&self, p: &Problem) -> u64 {
        if !self.reduction.uses_workspace() {
            return 0;
        }
        super::hopper::split_workspace_bytes(self.tiles(p), self.bm * self.bn, self.split, self.reduction.is_atomic())
    }

    /// The PTX entry, e.g. `kaas_mma_f32_tn_64x64x64_w2x2_s4`, then the rows of [`AXES`]
    /// (the reduction's suffix with split-K).
    pub fn entry(&self, acc: Acc, layout: Layout) -> String {
        NAMES.entry(self, acc, layout)
    }

    pub fn defines(&self, acc: Acc, layout: Layout) -> Vec<(String, String)> {
        NAMES.defines(self, acc, layout)
    }

    /// The same code with another split count.
    pub fn code(&self) -> MmaConfig {
        MmaConfig { split: if self.reduction != Reduction::None { 2 } else { 1 }, ..*self }
    }

    pub fn manifest(&self, p: &Problem) -> Manifest {
        let mut params = crate::manifest::pointer_params();
        if self.reduction.uses_workspace() {
            params.push(Param::Ptr(Buffer::Workspace));
            params.push(Param::I32(I32Value::Const(self.split as i32)));
        }
        Manifest {
            abi: ABI.into(),
            problem: *p,
            workspace_bytes: self.workspace_bytes(p),
            launches: vec![Launch {
                entry: self.entry(p.acc, p.layout),
                grid: [self.tiles(p) * self.split, 1, 1],
                block: [self.threads(), 1, 1],
                cluster: [if self.reduction == Reduction::Cluster { self.split } else { 1 }, 1, 1],
                shared_mem_bytes: self.shared_mem_bytes(),
                params,
            }],
        }
    }

    /// The configuration, accumulator and layout an entry name encodes; a split-K entry
    /// comes back with `split` 2 (the count is a launch parameter, see [`MmaConfig::of_launch`]).
    pub fn from_entry(entry: &str) -> Option<(MmaConfig, Acc, Layout)> {
        let blank = MmaConfig { bm: 0, bn: 0, bk: 0, warps_m: 0, warps_n: 0, stages: 0, split: 1, reduction: Reduction::None };
        let (mut cfg, acc, layout) = NAMES.parse(entry, blank)?;
        cfg.split = if cfg.reduction == Reduction::None { 1 } else { 2 };
        cfg.validate().ok()?;
        Some((cfg, acc, layout))
    }

    /// The configuration a launch of this family runs (the split count from its params).
    pub fn of_launch(launch: &Launch) -> Option<(MmaConfig, Acc, Layout)> {
        let (mut cfg, acc, layout) = Self::from_entry(&launch.entry)?;
        if cfg.reduction == Reduction::Cluster {
            cfg.split = launch.cluster[0];
            cfg.validate().ok()?;
        } else if cfg.split > 1 {
            let Some(Param::I32(I32Value::Const(s))) = launch.params.get(7) else { return None };
            cfg.split = u32::try_from(*s).ok()?;
            cfg.validate().ok()?;
        }
        Some((cfg, acc, layout))
    }

    /// Short label, e.g. `mma 64x64x64 w2x2 s4`, `mma 32x32x64 w2x2 s4 split 16 atomic`,
    /// `… split 8 cluster`.
    pub fn label(&self) -> String {
        format!("mma {}x{}x{} w{}x{} s{}{}", self.bm, self.bn, self.bk, self.warps_m, self.warps_n, self.stages, axes::label(&AXES, self, self.split))
    }
}

/// The tiles of the search: (BM, BN, warps along M, warps along N). Measured on an H100
/// (BENCHMARKS.md): 128×128 with 8 warps, and 32-deep K-tiles, lost to these everywhere.
const TILES: [(u32, u32, u32, u32); 6] = [(32, 32, 2, 2), (32, 64, 2, 2), (64, 32, 2, 2), (64, 64, 2, 2), (64, 128, 2, 2), (128, 64, 2, 2)];
/// K per stage and ring depth: 64-deep K-tiles, four stages (192 of K in flight; three
/// stages measured the same).
const RINGS: [(u32, u32); 1] = [(64, 4)];

/// The unsplit candidates.
pub fn space() -> Vec<MmaConfig> {
    let mut out = Vec::new();
    for (bm, bn, warps_m, warps_n) in TILES {
        for (bk, stages) in RINGS {
            let c = MmaConfig { bm, bn, bk, warps_m, warps_n, stages, split: 1, reduction: Reduction::None };
            if c.validate().is_ok() {
                out.push(c);
            }
        }
    }
    out
}

/// Deeper rings for the skinny, long-K shapes of up to one or two waves, where the Hopper
/// codes trail cuBLASLt most (BENCHMARKS.md: 0.91× its heuristic on min(M, N) ≤ 512,
/// K ≥ 1024). CUDA-L2's published H100 kernels for such shapes (4096×128×1024,
/// 2048×256×1024, 4096×64×2048, 128×4096×1024, …) are this family's shape: mma.sync fed by
/// 5- to 7-stage cp.async rings, tiles from 32×64 to 128×32 making about one wave, no
/// split-K. `kaas tune --trial mma-deep` times them beside the search; they are not in it.
const DEEP_TILES: [(u32, u32, u32, u32); 8] =
    [(32, 32, 2, 2), (32, 64, 2, 2), (64, 32, 2, 2), (64, 64, 2, 2), (64, 128, 2, 2), (128, 64, 2, 2), (128, 32, 2, 2), (32, 128, 2, 2)];
const DEEP_STAGES: [u32; 2] = [6, 8];
/// The deep codes reach further up than the family's search ([`ELIGIBLE_MACS`]): 2^33 FLOP.
pub const DEEP_MACS: u64 = 1 << 32;

/// The deep-ring codes (unsplit), every one within the shared-memory limit.
pub fn deep_codes() -> Vec<MmaConfig> {
    let mut out = Vec::new();
    for (bm, bn, warps_m, warps_n) in DEEP_TILES {
        for stages in DEEP_STAGES {
            let c = MmaConfig { bm, bn, bk: 64, warps_m, warps_n, stages, split: 1, reduction: Reduction::None };
            if c.validate().is_ok() {
                out.push(c);
            }
        }
    }
    out
}

/// The deep codes that suit a problem: up to [`DEEP_MACS`], a K of at least four ring
/// slots' worth of K-tiles (a shorter K never fills the ring), and at most two waves of
/// tiles (the shapes CUDA-L2 runs in about one).
pub fn deep_space_for(p: &Problem, sm_count: u32) -> Vec<MmaConfig> {
    if u64::from(p.m) * u64::from(p.n) * u64::from(p.k) > DEEP_MACS {
        return Vec::new();
    }
    deep_codes().into_iter().filter(|c| p.k.div_ceil(c.bk) >= 4 && c.tiles(p) <= 2 * sm_count).collect()
}

/// The split-K codes: the small tiles with the 64-deep ring, either reduction.
pub fn split_tiles() -> Vec<MmaConfig> {
    let mut out = Vec::new();
    for atomic in [false, true] {
        for (bm, bn, warps_m, warps_n) in [(32, 32, 2, 2), (32, 64, 2, 2), (64, 32, 2, 2), (64, 64, 2, 2)] {
            out.push(MmaConfig { bm, bn, bk: 64, warps_m, warps_n, stages: 4, split: 2, reduction: if atomic { Reduction::Atomic } else { Reduction::InOrder } });
        }
    }
    out
}

/// Most slices of split-K in a cluster: the largest cluster Hopper places (16, with the
/// non-portable opt-in that the launcher makes above 8).
pub const CLUSTER_SPLIT_MAX: u32 = 16;

/// The codes of split-K in a cluster: the split-K tiles with the 64-deep ring.
pub fn cluster_split_codes() -> Vec<MmaConfig> {
    split_tiles().into_iter().filter(|t| t.reduction == Reduction::InOrder).map(|t| MmaConfig { reduction: Reduction::Cluster, ..t }).collect()
}

/// Split-K in a cluster for a problem whose output needs fewer blocks than a wave (fp32
/// accumulators, sm_90): 2, 4, 8 and 16 slices and the count that makes one wave, each
/// with at least one K-tile per slice, at most one wave of blocks, and rank 0's inbox
/// within the shared-memory limit.
pub fn cluster_split_space(p: &Problem, sm_count: u32) -> Vec<MmaConfig> {
    if p.acc != Acc::F32 || !eligible(p) || !has_clusters(p.arch) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for t in cluster_split_codes() {
        let tiles = t.tiles(p);
        let ktiles = p.k.div_ceil(t.bk);
        if tiles >= sm_count {
            continue;
        }
        let mut splits = vec![2, 4, 8, 16, (sm_count / tiles).min(CLUSTER_SPLIT_MAX)];
        splits.sort_unstable();
        splits.dedup();
        for s in splits {
            let c = MmaConfig { split: s, ..t };
            if s >= 2 && ktiles >= s && tiles * s <= sm_count && c.validate().is_ok() {
                out.push(c);
            }
        }
    }
    out
}

/// Whether a problem gets this family's candidates: up to [`ELIGIBLE_MACS`], and at any
/// size where the Hopper family builds no code (rows TMA cannot load, or no sm_90), since
/// then this family is the answer however large the problem.
pub fn eligible(p: &Problem) -> bool {
    u64::from(p.m) * u64::from(p.n) * u64::from(p.k) <= ELIGIBLE_MACS || !super::hopper::builds(p)
}

/// The split-K candidates that suit a problem whose output needs fewer blocks than a wave
/// of `sm_count`: for each atomic code, the counts that make half, one, two and four waves
/// of units, and the largest that leaves two K-tiles per slice. As in the Hopper family,
/// the in-order reduction is left to whoever needs bit-identical runs.
pub fn split_space(p: &Problem, sm_count: u32) -> Vec<MmaConfig> {
    let mut out = Vec::new();
    if p.acc != Acc::F32 {
        return out;
    }
    for t in split_tiles().into_iter().filter(|t| t.reduction == Reduction::Atomic) {
        let tiles = t.tiles(p);
        let ktiles = p.k.div_ceil(t.bk);
        if tiles >= sm_count {
            continue;
        }
        let mut splits: Vec<u32> = UNIT_TARGETS.iter().map(|(num, den)| sm_count * num / den / tiles).chain([ktiles / 2]).collect();
        splits.sort_unstable();
        splits.dedup();
        for s in splits {
            if s >= 2 && ktiles >= 2 * s && tiles * s <= 4 * sm_count {
                out.push(MmaConfig { split: s, ..t });
            }
        }
    }
    out
}

/// Every candidate of the family for a problem: none above [`ELIGIBLE_MACS`].
pub fn space_for(p: &Problem, sm_count: u32) -> Vec<MmaConfig> {
    if !eligible(p) {
        return Vec::new();
    }
    let mut out = space();
    out.extend(split_space(p, sm_count));
    out.extend(cluster_split_space(p, sm_count));
    out
}

/// Whether the family's code for an arch may run in clusters (split-K in a cluster).
pub fn has_clusters(arch: Arch) -> bool {
    matches!(arch, Arch::Sm90 | Arch::Sm90a)
}

/// NVRTC's virtual architecture for a problem's arch: the family needs nothing past sm_80,
/// but sm_90 code adds into the split-K sums with vector reductions.
pub fn target(arch: Arch) -> &'static str {
    match arch {
        Arch::Sm80 => "compute_80",
        Arch::Sm86 => "compute_86",
        Arch::Sm89 => "compute_89",
        Arch::Sm90 => "compute_90",
        Arch::Sm90a => "compute_90a",
    }
}

/// Compiles one configuration for an arch, accumulator and layout with NVRTC.
pub fn compile(cfg: &MmaConfig, arch: Arch, acc: Acc, layout: Layout) -> Result<String, GpuError> {
    cfg.validate().map_err(|m| GpuError::refused("mma HGEMM", m))?;
    if cfg.split > 1 && acc != Acc::F32 {
        return Err(GpuError::refused("mma HGEMM", "split-K partials are fp32: acc=f32 only"));
    }
    if cfg.reduction == Reduction::Cluster && !has_clusters(arch) {
        return Err(GpuError::refused("mma HGEMM", format!("split-K in a cluster needs sm_90; {} has no clusters", arch.as_str())));
    }
    nvrtc::compile(TEMPLATE, TEMPLATE_NAME, target(arch), &cfg.defines(acc, layout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::Shape;

    fn p(layout: Layout, m: u32, n: u32, k: u32) -> Problem {
        Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).unwrap())
    }

    #[test]
    fn the_space_is_valid_and_its_manifests_check() {
        let space = space();
        assert_eq!(space.len(), 6, "{space:?}");
        for c in space.iter().chain(split_tiles().iter()) {
            c.validate().unwrap();
            for layout in Layout::ALL {
                for (m, n, k) in [(64, 64, 64), (16384, 16384, 16384), (100, 72, 30), (1, 1, 1)] {
                    if c.split > 1 && m * n > 1 << 20 {
                        continue; // split-K is for outputs of fewer tiles than SMs
                    }
                    let prob = p(layout, m, n, k);
                    let man = c.manifest(&prob);
                    man.validate().unwrap_or_else(|e| panic!("{} {prob}: {e}", c.label()));
                    let l = &man.launches[0];
                    assert_eq!(l.grid[0], m.div_ceil(c.bm) * n.div_ceil(c.bn) * c.split);
                    assert!(crate::manifest::is_ptx_identifier(&l.entry));
                    assert_eq!(MmaConfig::of_launch(l), Some((*c, Acc::F32, layout)));
                }
            }
        }
        // The template's formula: 4 stages of (64 + 64) rows of 64 fp16.
        assert_eq!(MmaConfig { bm: 64, bn: 64, bk: 64, warps_m: 2, warps_n: 2, stages: 4, split: 1, reduction: Reduction::None }.shared_mem_bytes(), 65_536);
        let bad = [
            MmaConfig { bm: 48, bn: 64, bk: 64, warps_m: 2, warps_n: 2, stages: 4, split: 1, reduction: Reduction::None },
            MmaConfig { bm: 64, bn: 16, bk: 64, warps_m: 2, warps_n: 1, stages: 4, split: 1, reduction: Reduction::None },
            MmaConfig { bm: 64, bn: 64, bk: 16, warps_m: 2, warps_n: 2, stages: 4, split: 1, reduction: Reduction::None },
            MmaConfig { bm: 64, bn: 64, bk: 64, warps_m: 2, warps_n: 2, stages: 9, split: 1, reduction: Reduction::None },
            MmaConfig { bm: 256, bn: 256, bk: 64, warps_m: 4, warps_n: 4, stages: 4, split: 1, reduction: Reduction::None },
            MmaConfig { bm: 64, bn: 64, bk: 64, warps_m: 2, warps_n: 2, stages: 4, split: 1, reduction: Reduction::Atomic },
        ];
        for c in bad {
            assert!(c.validate().is_err(), "{c:?}");
        }
    }

    #[test]
    fn the_deep_codes_fit_and_suit_one_or_two_waves() {
        let deep = deep_codes();
        assert_eq!(deep.len(), 16, "8 tiles × 2 rings, all within the shared-memory limit");
        assert!(deep.iter().all(|c| c.split == 1 && c.stages >= 6 && c.shared_mem_bytes() <= SMEM_LIMIT));
        assert!(deep.iter().all(|c| !space().contains(c)), "not the search's codes");
        // 128x64 s8: 8 × (128 + 64) × 64 × 2 bytes.
        assert_eq!(deep.iter().map(|c| c.shared_mem_bytes()).max(), Some(196_608));
        let sm = 132;
        // 8192×256×2048 (2^33 FLOP) is past the search's reach and within the trial's.
        let mid = p(Layout::Tn, 8192, 256, 2048);
        assert!(!eligible(&mid));
        let tiles: Vec<(u32, u32)> = deep_space_for(&mid, sm).iter().map(|c| (c.bm, c.bn)).collect();
        assert!(tiles.contains(&(128, 64)) && tiles.contains(&(64, 128)), "{tiles:?}");
        assert!(!tiles.contains(&(32, 32)), "2048 tiles are more than two waves");
        assert!(deep_space_for(&mid, sm).iter().all(|c| c.tiles(&mid) <= 2 * sm));
        assert!(deep_space_for(&p(Layout::Tn, 4096, 4096, 1024), sm).is_empty(), "2^35 FLOP");
        assert!(deep_space_for(&p(Layout::Tn, 64, 64, 128), sm).is_empty(), "two K-tiles never fill the ring");
        assert_eq!(deep_space_for(&p(Layout::Nn, 4096, 128, 1024), sm).len(), deep.iter().filter(|c| c.tiles(&p(Layout::Nn, 4096, 128, 1024)) <= 264).count());
        for c in deep {
            let prob = p(Layout::Nn, 4096, 128, 1024);
            c.manifest(&prob).validate().unwrap();
            assert_eq!(MmaConfig::from_entry(&c.entry(Acc::F32, Layout::Tn)), Some((c, Acc::F32, Layout::Tn)));
        }
    }

    /// The names and defines are data the template reads (see [`axes::check_names`]); the
    /// table is the reduction's first four values.
    #[test]
    fn the_names_are_data_the_template_reads() {
        let problems = axes::check_names(&NAMES, space()[0], &[TEMPLATE], &["KAAS_GROUP_M"]);
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn entry_names_round_trip() {
        for c in space().into_iter().chain(split_tiles()) {
            for layout in Layout::ALL {
                let e = c.entry(Acc::F32, layout);
                assert_eq!(MmaConfig::from_entry(&e), Some((c, Acc::F32, layout)), "{e}");
            }
        }
        assert_eq!(MmaConfig { bm: 32, bn: 32, bk: 64, warps_m: 2, warps_n: 2, stages: 4, split: 7, reduction: Reduction::Atomic }.entry(Acc::F32, Layout::Tn), "kaas_mma_f32_tn_32x32x64_w2x2_s4_ska");
        assert!(MmaConfig::from_entry("kaas_mma_f32_tn_48x64x64_w2x2_s4").is_none(), "does not tile");
        assert!(MmaConfig::from_entry("kaas_mma_f32_tn_64x64x64_w2x2_s4_ska_ska").is_none());
        assert!(MmaConfig::from_entry("kaas_wgmma_f32_tn_64x64x64_s8_c1_m1_g16").is_none());
        assert!(MmaConfig::from_entry("kaas_simple_hgemm_f32_tn_32x32x32_w2x2").is_none());
    }

    #[test]
    fn split_k_candidates_suit_the_problem() {
        let sm = 132;
        // 64×64×16384 with 32×32 tiles: 4 tiles; half, one and two waves (16, 33, 66 slices)
        // and 128 (two K-tiles each); four waves (132) would leave fewer than two K-tiles.
        let skinny: Vec<u32> = split_space(&p(Layout::Tn, 64, 64, 16384), sm).iter().filter(|c| c.bm == 32 && c.bn == 32).map(|c| c.split).collect();
        assert_eq!(skinny, [16, 33, 66, 128]);
        assert!(split_space(&p(Layout::Tn, 64, 64, 16384), sm).iter().all(|c| c.reduction == Reduction::Atomic && c.code() != *c));
        // Short K: 64×64×256 has 4 K-tiles, so at most 2 slices.
        let short: Vec<u32> = split_space(&p(Layout::Tn, 64, 64, 256), sm).iter().filter(|c| c.bm == 32 && c.bn == 32).map(|c| c.split).collect();
        assert_eq!(short, [2]);
        assert!(split_space(&p(Layout::Tn, 2048, 2048, 2048), sm).is_empty(), "the output fills the GPU");
        let f16 = Problem::new(Arch::Sm90, Acc::F16, Layout::Tn, Shape::new(64, 64, 16384).unwrap());
        assert!(split_space(&f16, sm).is_empty(), "partials are fp32");
        for c in split_space(&p(Layout::Nn, 100, 200, 4104), sm) {
            let prob = p(Layout::Nn, 100, 200, 4104);
            let man = c.manifest(&prob);
            man.validate().unwrap();
            assert_eq!(man.workspace_bytes, c.workspace_bytes(&prob));
            assert!(c.tiles(&prob) * c.split <= 4 * sm);
        }
        // The template's formula: 256-byte rounded counters, then the sums or partials.
        let c = MmaConfig { bm: 32, bn: 32, bk: 64, warps_m: 2, warps_n: 2, stages: 4, split: 16, reduction: Reduction::InOrder };
        assert_eq!(c.workspace_bytes(&p(Layout::Tn, 100, 64, 4096)), 256 + 4 * 8 * 16 * 32 * 32);
        assert_eq!(MmaConfig { reduction: Reduction::Atomic, ..c }.workspace_bytes(&p(Layout::Tn, 100, 64, 4096)), 256 + 4 * 8 * 32 * 32);
        // Only small problems get the family at all.
        assert!(space_for(&p(Layout::Tn, 4096, 4096, 4096), sm).is_empty());
        assert!(space_for(&p(Layout::Tn, 1024, 1024, 8192), sm).is_empty());
        assert_eq!(space_for(&p(Layout::Tn, 1024, 1024, 2048), sm).len(), 6, "eligible, but the output fills the GPU: no split");
        assert!(space_for(&p(Layout::Tn, 64, 64, 16384), sm).len() > 6);
    }

    /// Split-K in a cluster: one cluster of `split` CTAs per tile, no workspace, rank 0's
    /// inbox in the shared memory, and the entry and launch give the configuration back.
    #[test]
    fn cluster_split_candidates_launch_one_cluster_per_tile() {
        let sm = 132;
        // 64×64×4096 with 32×32 tiles: 4 tiles; 2, 4, 8 and 16 slices (33 would be a wave,
        // past the largest cluster).
        let prob = p(Layout::Tn, 64, 64, 4096);
        let small: Vec<u32> = cluster_split_space(&prob, sm).iter().filter(|c| c.bm == 32 && c.bn == 32).map(|c| c.split).collect();
        assert_eq!(small, [2, 4, 8, 16]);
        // 64×64 tiles: rank 0's inbox of 15 partials (240 KiB) does not fit beside the ring.
        assert!(cluster_split_space(&prob, sm).iter().filter(|c| c.bm == 64 && c.bn == 64).all(|c| c.split <= 8));
        // At most one wave of blocks, at least one K-tile per slice.
        assert!(cluster_split_space(&p(Layout::Tn, 512, 256, 1024), sm).iter().all(|c| c.tiles(&p(Layout::Tn, 512, 256, 1024)) * c.split <= sm));
        let short: Vec<u32> = cluster_split_space(&p(Layout::Tn, 64, 64, 128), sm).iter().map(|c| c.split).collect();
        assert!(short.iter().all(|&s| s == 2), "two K-tiles: {short:?}");
        assert!(cluster_split_space(&Problem::new(Arch::Sm80, Acc::F32, Layout::Tn, Shape::new(64, 64, 4096).unwrap()), sm).is_empty(), "sm_80 has no clusters");
        for c in cluster_split_space(&p(Layout::Nn, 100, 200, 4104), sm) {
            let prob = p(Layout::Nn, 100, 200, 4104);
            let man = c.manifest(&prob);
            man.validate().unwrap();
            let launch = &man.launches[0];
            assert_eq!((man.workspace_bytes, launch.cluster, launch.params.len()), (0, [c.split, 1, 1], 6), "{}", c.label());
            assert_eq!(launch.grid[0], c.tiles(&prob) * c.split);
            assert_eq!(launch.shared_mem_bytes, 4 * (c.bm + c.bn) * 64 * 2 + (c.split - 1) * c.bm * c.bn * 4);
            assert!(launch.entry.ends_with("_skc"), "{}", launch.entry);
            // The entry and the launch name the configuration again.
            assert_eq!(MmaConfig::of_launch(launch), Some((c, Acc::F32, Layout::Nn)));
            assert_eq!(MmaConfig::from_entry(&launch.entry).map(|(e, ..)| e), Some(c.code()));
        }
        let c = cluster_split_codes()[0];
        assert!(MmaConfig { split: 17, ..c }.validate().is_err() && MmaConfig { split: 1, ..c }.validate().is_err());
    }

    /// The shipped catalog's mma kernels are what the template builds today: recompiling
    /// each entry's configuration for its problem's arch (NVRTC from the pip wheel CI
    /// installs) gives the committed bytes, and the manifest is the configuration's.
    #[test]
    fn the_shipped_mma_kernels_rebuild_from_the_template() {
        let mut checked = 0;
        for (dir, index, ptx) in crate::catalog::bundle::shipped_bundles() {
            for e in &index.entries {
                let Some((cfg, acc, layout)) = MmaConfig::of_launch(&e.manifest.launches[0]) else { continue };
                assert_eq!((acc, layout), (e.problem.acc, e.problem.layout), "{}", e.problem);
                assert_eq!(crate::signing::sha256_hex(ptx[&e.artifact].as_bytes()), e.artifact, "{}: PTX does not match its sha256", dir.display());
                assert_eq!(e.manifest, cfg.manifest(&e.problem), "{}: manifest differs", e.problem);
                checked += 1;
                if nvrtc::available().is_ok() {
                    let built = compile(&cfg, e.problem.arch, acc, layout).unwrap();
                    assert_eq!(crate::signing::sha256_hex(built.as_bytes()), e.artifact, "{} for {} no longer builds to the committed PTX", cfg.label(), e.problem);
                }
            }
        }
        eprintln!("checked {checked} mma entries{}", if nvrtc::available().is_ok() { "" } else { " (sha256 and manifests only: no NVRTC)" });
    }

    #[test]
    fn every_configuration_compiles_where_nvrtc_is_present() {
        if let Err(why) = nvrtc::available() {
            eprintln!("SKIP: no NVRTC ({why})");
            return;
        }
        for c in space().into_iter().chain(split_tiles()).chain(deep_codes()) {
            for (arch, acc, layout) in [(Arch::Sm90, Acc::F32, Layout::Tn), (Arch::Sm90, Acc::F32, Layout::Nn), (Arch::Sm80, Acc::F32, Layout::Tn)] {
                let ptx = compile(&c, arch, acc, layout).unwrap_or_else(|e| panic!("{}: {e}", c.label()));
                assert!(ptx.contains(&format!(".entry {}", c.entry(acc, layout))), "{}", c.label());
                assert!(ptx.contains("mma.sync.aligned.m16n8k16") && ptx.contains("cp.async.cg.shared.global"), "{}", c.label());
                assert!(ptx.contains(&format!(".target {}", arch.as_str())), "{}", c.label());
                if c.reduction == Reduction::Atomic {
                    // sm_90 adds four floats at once; sm_80 has only the scalar reduction.
                    assert_eq!(ptx.contains("red.global.add.v4.f32"), arch == Arch::Sm90, "{}", c.label());
                }
            }
        }
        for c in space().into_iter().take(2) {
            let ptx = compile(&c, Arch::Sm90, Acc::F16, Layout::Nn).unwrap();
            assert!(ptx.contains("m16n8k16.row.col.f16.f16.f16.f16"));
        }
        assert!(compile(&split_tiles()[0], Arch::Sm90, Acc::F16, Layout::Tn).is_err(), "split-K is acc=f32 only");
        for c in cluster_split_codes() {
            for layout in [Layout::Tn, Layout::Nn] {
                let ptx = compile(&c, Arch::Sm90, Acc::F32, layout).unwrap_or_else(|e| panic!("{}: {e}", c.label()));
                assert!(ptx.contains(&format!(".entry {}", c.entry(Acc::F32, layout))), "{}", c.label());
                // Partials go to rank 0 through distributed shared memory, never through global memory.
                assert!(ptx.contains("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32") && ptx.contains("mapa.shared::cluster"), "{}", c.label());
                assert!(!ptx.contains("red.global.add") && !ptx.contains("atom.") && !ptx.contains("st.global.cg"), "{}", c.label());
            }
            assert!(compile(&c, Arch::Sm80, Acc::F32, Layout::Tn).is_err(), "clusters are sm_90's");
        }
    }
}
