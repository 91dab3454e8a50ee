//! The Hopper family (`kernels/templates/hopper_hgemm.cu`): wgmma fed by TMA through an
//! mbarrier ring, a producer warpgroup and one to three consumer warpgroups with register
//! reallocation, a grouped tile order, and an optional persistent grid. One PTX per code
//! ([`HopperKey`]): the grid's size, the split count and the L2 promotion are launch
//! choices that one PTX serves.
//!
//! The configuration's knobs are typed axes ([`Reduction`], [`ConsumerMode`],
//! [`Epilogue`], [`DescMode`], [`TileGrid`], the cluster and chain counts, and two
//! on/off knobs), each one row of [`AXES`], from which the entry name, its parsing, the
//! template defines and the label are derived. What each axis does, which combinations are
//! valid, and which ones the search offers and why: `docs/tuner.md`.

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

use crate::kernels::axes::{self, Axis, Field, Knob, Names, Values, head_field};
pub use crate::kernels::axes::Reduction;
use crate::gpu::{GpuError, nvrtc};
use crate::manifest::{ABI, Buffer, Dim, I32Value, L2Promotion, Launch, Manifest, Operand, Param, Swizzle, TensorMapSpec};
use crate::problem::{Acc, Layout, Problem};

mod space;
pub use space::*;

/// The template as NVRTC compiles it: `hopper_hgemm.cu` (the configuration, the tile
/// schedule and the kernel) with its device headers spliced in where it includes them, so
/// that the binary carries one self-contained source and a worker needs no files.
pub static TEMPLATE: LazyLock<String> = LazyLock::new(|| {
    HEADERS.iter().fold(KERNELS.to_string(), |text, (name, header)| {
        let include = format!("#include \"{name}\"\n");
        assert!(text.matches(&include).count() == 1, "hopper_hgemm.cu includes {name} once");
        text.replacen(&include, header, 1)
    })
});
const KERNELS: &str = include_str!("../../../kernels/templates/hopper_hgemm.cu");
/// The headers `hopper_hgemm.cu` includes, in its order: the PTX primitives (mbarriers,
/// TMA, clusters, descriptors), the wgmma wrappers (which no knob changes) and the tile
/// schedule (raster, stores, barriers, split-K and stream-K units). The configuration's
/// macros, defined before them, pick their variants.
const HEADERS: [(&str, &str); 3] = [
    ("hopper_ptx.cuh", include_str!("../../../kernels/templates/hopper_ptx.cuh")),
    ("hopper_wgmma.cuh", include_str!("../../../kernels/templates/hopper_wgmma.cuh")),
    ("hopper_schedule.cuh", include_str!("../../../kernels/templates/hopper_schedule.cuh")),
];
pub const TEMPLATE_NAME: &str = "hopper_hgemm.cu";
/// NVRTC's virtual architecture: wgmma and setmaxnreg need the arch-specific target.
pub const TARGET: &str = "compute_90a";
/// Dynamic plus static shared memory one block may use on Hopper (227 KiB).
const SMEM_LIMIT: u32 = 232_448;
const BK: u32 = 64;
/// Group height of the tile order, in tiles.
const GROUP_M: u32 = 16;
/// The entry names' prefix.
pub const ENTRY_PREFIX: &str = "kaas_wgmma_";

/// What the consumer warpgroups share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum ConsumerMode {
    /// The consumers split the tile's rows (BM / consumers each).
    #[default]
    Cooperative,
    /// Ping-pong (`KAAS_PINGPONG`): each of two consumers owns whole tiles, alternate tiles
    /// of the block, and their main loops take turns, so one's epilogue runs under the
    /// other's multiplies. Two consumers, no split-K, a whole tile's accumulators in one
    /// warpgroup.
    PingPong,
    /// K split across two consumers (`KAAS_KSPLIT`): each owns the whole tile and takes the
    /// ring slots of its parity; consumer 1 hands its fp32 partial to consumer 0 through
    /// shared memory. acc=f32, even rings, no split-K.
    KSplit,
    /// The consumers split the tile's columns (`KAAS_COLSPLIT`): each multiplies all BM rows
    /// by BN/2 columns, so a 64-row tile has two consumers. BN 128 or 256, one chain,
    /// unsplit or atomic split-K.
    ColSplit,
}

impl ConsumerMode {
    pub const ALL: [ConsumerMode; 4] = [ConsumerMode::Cooperative, ConsumerMode::PingPong, ConsumerMode::KSplit, ConsumerMode::ColSplit];

    /// Each consumer owns whole tiles (ping-pong, or K split across the consumers).
    pub fn whole_tile(self) -> bool {
        matches!(self, ConsumerMode::PingPong | ConsumerMode::KSplit)
    }
}

/// How C leaves the consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Epilogue {
    /// `KAAS_EPILOGUE=1`: tiles of whole 64-column pieces stage 16×64 pieces in shared memory
    /// and store them with coalesced 16-byte stores; narrower tiles store from registers.
    #[default]
    Staged,
    /// `KAAS_EPILOGUE=2`: each consumer warp writes 16×64 pieces with stmatrix into swizzled
    /// shared memory and stores them with a bulk tensor store (C is a third tensor map).
    /// Unsplit tiles whose BN is a multiple of 64.
    TmaStore,
}

impl Epilogue {
    pub const ALL: [Epilogue; 2] = [Epilogue::Staged, Epilogue::TmaStore];
}

/// How the consumers build their wgmma shared-memory descriptors (`KAAS_DESC_UNIFORM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum DescMode {
    /// Per thread, from the slot's address.
    #[default]
    Plain,
    /// One 64-bit add to a slot's warp-uniform base descriptor.
    Uniform,
    /// Only the low word moves: one 32-bit add per operand per wgmma, the high word shared.
    Stepped,
}

impl DescMode {
    pub const ALL: [DescMode; 3] = [DescMode::Plain, DescMode::Uniform, DescMode::Stepped];
}

/// How a code finds its tile (`KAAS_GRID2D`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum TileGrid {
    /// A 1-D grid in the grouped tile order: one unit per CTA, or a persistent grid looping
    /// over them ([`HopperConfig::persistent`]).
    #[default]
    Linear,
    /// One tile per CTA on a 2-D grid [tile columns, tile rows]: the CTA's tile is its block
    /// index, without the tile order's divisions.
    TwoD,
    /// One tile per CTA on a 3-D grid [min(16, tile rows), tile columns, ⌈tile rows / 16⌉]:
    /// tile row `z·16 + x`, column `y`, the grouped order without divisions (a CTA past
    /// the last row returns at once).
    Grouped,
}

impl TileGrid {
    pub const ALL: [TileGrid; 3] = [TileGrid::Linear, TileGrid::TwoD, TileGrid::Grouped];

    /// One tile per CTA on a grid of its own shape.
    pub fn one_tile(self) -> bool {
        self != TileGrid::Linear
    }
}

/// One point of the search space. Serialized as its code's name and launch choices
/// ([`axes::CodeForm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "axes::CodeForm", into = "axes::CodeForm")]
pub struct HopperConfig {
    pub bm: u32,
    pub bn: u32,
    pub stages: u32,
    pub consumers: u32,
    /// Grid of min(tiles, SMs) blocks looping over tiles, instead of one block per unit: a
    /// launch choice, not part of the code.
    pub persistent: bool,
    /// Split-K slices, a launch parameter (stream-K: the grid's blocks). 1 exactly when
    /// `reduction` is `None`.
    pub split: u32,
    pub reduction: Reduction,
    pub consumer_mode: ConsumerMode,
    /// CTAs per cluster along M (`KAAS_CLUSTER_M`): vertically adjacent tiles with the same B
    /// columns, each loading its share of the B tile and multicasting it. 1, 2, 4 or 8.
    pub cluster_m: u32,
    /// CTAs per cluster along N (`KAAS_CLUSTER_N`): horizontally adjacent tiles with the same
    /// A rows, multicasting A. 1, 2, 4 or 8; the cluster is at most 8 CTAs.
    pub cluster_n: u32,
    /// Independent accumulator chains per consumer (`KAAS_CHAINS`): the k16 steps of a
    /// K-tile go round-robin to this many accumulator sets, summed after the main loop.
    /// 1, 2 or 4; acc=f32.
    pub chains: u32,
    /// The tensor maps widen L2 misses to 256 bytes instead of 128: a launch choice.
    pub l2_256: bool,
    pub epilogue: Epilogue,
    /// K per ring slot (`KAAS_BK`): 64, one 128-byte swizzle atom of fp16, or 128 or 256
    /// (two or four atoms per slot: fewer slots and barrier round trips per K). Not with the
    /// cluster reduction, stream-K or K split across consumers.
    pub bk: u32,
    pub desc: DescMode,
    /// Each consumer waits for a K-tile's wgmmas right after issuing them and frees the slot
    /// at once (`KAAS_WAIT0`), instead of keeping one K-tile in flight. Not with K split
    /// across consumers (it frees its slots its own way).
    pub wait0: bool,
    /// The consumers compute their tile's origin before its K loop (`KAAS_EARLY_COORDS`), so
    /// the tile order's divisions are not sunk onto the critical path after the last wgmma
    /// wait.
    pub early_coords: bool,
    pub grid: TileGrid,
    /// Swap-AB (`KAAS_SWAP_AB`, tn only): the code computes Cᵀ = B·Aᵀ, so its tile's `bm`
    /// rows run along the problem's N (the weight's rows fill wgmma's 64-row side) and its
    /// `bn` columns along M (the tokens). Every count of tiles, clusters and grids below
    /// reads the problem through [`HopperConfig::dims`].
    pub swap: bool,
}

/// What tells two codes apart (one PTX each): every knob but the grid's size (persistent or
/// not), the split count and the L2 promotion, as the entry name (see [`NAMES`]) holds them.
pub type HopperKey = axes::CodeKey;

/// The Hopper family's table, in the entry name's order (see [`axes`]). The name's
/// positional head (tile, ring, consumers, cluster rows, group) is [`HopperConfig::entry`]'s.
pub static AXES: [Axis<HopperConfig>; 12] = [
    Axis { name: "cluster_n", values: Values::Count { tag: "_n", label: "", define: "KAAS_CLUSTER_N", allowed: &[1, 2, 4, 8] }, label_rank: 0, get: |c| c.cluster_n, set: |c, v| c.cluster_n = v },
    Axis { name: "chains", values: Values::Count { tag: "_x", label: " x", define: "KAAS_CHAINS", allowed: &[1, 2, 4] }, label_rank: 2, get: |c| c.chains, set: |c, v| c.chains = v },
    Axis { name: "reduction", values: Values::Choice(&axes::REDUCTION_KNOBS), label_rank: 4, get: |c| c.reduction as u32, set: |c, v| c.reduction = Reduction::ALL[v as usize] },
    Axis {
        name: "consumer_mode",
        values: Values::Choice(&[
            Knob::DEFAULT,
            Knob::flag("_pp", " ping-pong", &[("KAAS_PINGPONG", 1)]),
            Knob::flag("_kw", " k-split", &[("KAAS_KSPLIT", 1)]),
            Knob::flag("_cs", " col-split", &[("KAAS_COLSPLIT", 1)]),
        ]),
        label_rank: 1,
        get: |c| c.consumer_mode as u32,
        set: |c, v| c.consumer_mode = ConsumerMode::ALL[v as usize],
    },
    Axis {
        name: "epilogue",
        values: Values::Choice(&[Knob { suffix: "", label: "", defines: &[("KAAS_EPILOGUE", 1)] }, Knob::flag("_ts", " tma-store", &[("KAAS_EPILOGUE", 2)])]),
        label_rank: 5,
        get: |c| c.epilogue as u32,
        set: |c, v| c.epilogue = Epilogue::ALL[v as usize],
    },
    Axis { name: "wait0", values: Values::Choice(&[Knob::DEFAULT, Knob::flag("_w0", " wait0", &[("KAAS_WAIT0", 1)])]), label_rank: 7, get: |c| u32::from(c.wait0), set: |c, v| c.wait0 = v != 0 },
    Axis {
        name: "desc",
        values: Values::Choice(&[Knob::DEFAULT, Knob::flag("_du", " du", &[("KAAS_DESC_UNIFORM", 1)]), Knob::flag("_dr", " dr", &[("KAAS_DESC_UNIFORM", 2)])]),
        label_rank: 8,
        get: |c| c.desc as u32,
        set: |c, v| c.desc = DescMode::ALL[v as usize],
    },
    Axis {
        name: "early_coords",
        values: Values::Choice(&[Knob::DEFAULT, Knob::flag("_ec", " ec", &[("KAAS_EARLY_COORDS", 1)])]),
        label_rank: 9,
        get: |c| u32::from(c.early_coords),
        set: |c, v| c.early_coords = v != 0,
    },
    Axis {
        name: "grid",
        values: Values::Choice(&[Knob::DEFAULT, Knob::flag("_2d", " 2d", &[("KAAS_GRID2D", 1)]), Knob::flag("_2g", " 2g", &[("KAAS_GRID2D", 2)])]),
        label_rank: 10,
        get: |c| c.grid as u32,
        set: |c, v| c.grid = TileGrid::ALL[v as usize],
    },
    Axis { name: "swap", values: Values::Choice(&[Knob::DEFAULT, Knob::flag("_sw", " swap-AB", &[("KAAS_SWAP_AB", 1)])]), label_rank: 11, get: |c| u32::from(c.swap), set: |c, v| c.swap = v != 0 },
    // Launch choices: in the label only.
    Axis { name: "persistent", values: Values::Choice(&[Knob::DEFAULT, Knob::flag("", " persistent", &[])]), label_rank: 3, get: |c| u32::from(c.persistent), set: |c, v| c.persistent = v != 0 },
    Axis { name: "l2_promotion", values: Values::Choice(&[Knob::DEFAULT, Knob::flag("", " l2-256B", &[])]), label_rank: 6, get: |c| u32::from(c.l2_256), set: |c, v| c.l2_256 = v != 0 },
];

/// The family's names: `kaas_wgmma_f32_tn_128x256x64_s4_c2_m1_g16`, then the rows of
/// [`AXES`]. The head is the tile, the ring's slots, the consumers, the cluster's rows and
/// the tile order's group (a constant of the template).
pub static NAMES: Names<HopperConfig> = Names {
    prefix: ENTRY_PREFIX,
    head: &[
        head_field!("", "KAAS_BM" => bm, "KAAS_BN" => bn, "KAAS_BK" => bk),
        head_field!("s", "KAAS_STAGES" => stages),
        head_field!("c", "KAAS_CONSUMERS" => consumers),
        head_field!("m", "KAAS_CLUSTER_M" => cluster_m),
        Field { tag: "g", defines: &["KAAS_GROUP_M"], get: |_| vec![GROUP_M], set: |_, v| v == [GROUP_M] },
    ],
    axes: &AXES,
    acc_layout_defines: true,
};

// The serialized form is the one every table-driven family has ([`axes::CodeForm`]): the
// code's part of the entry name, the split count and the launch choices.
axes::code_form!(HopperConfig, NAMES, HopperConfig::new(0, 0, 0, 0));

/// Ordered as the serialized form orders: by code, then the launch choices.
impl Ord for HopperConfig {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let key = |c: &HopperConfig| (NAMES.code_key(c), c.split, c.persistent, c.l2_256);
        key(self).cmp(&key(other))
    }
}

impl PartialOrd for HopperConfig {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl HopperConfig {
    /// A cooperative, unsplit configuration, one tile per block, without clusters.
    pub const fn new(bm: u32, bn: u32, stages: u32, consumers: u32) -> Self {
        HopperConfig {
            bm,
            bn,
            stages,
            consumers,
            persistent: false,
            split: 1,
            reduction: Reduction::None,
            consumer_mode: ConsumerMode::Cooperative,
            cluster_m: 1,
            cluster_n: 1,
            chains: 1,
            l2_256: false,
            epilogue: Epilogue::Staged,
            bk: BK,
            desc: DescMode::Plain,
            wait0: false,
            early_coords: false,
            grid: TileGrid::Linear,
            swap: false,
        }
    }

    /// The same code split into `split` slices reduced by `reduction`.
    pub const fn split_by(self, split: u32, reduction: Reduction) -> Self {
        HopperConfig { split, reduction, ..self }
    }

    /// The combinations the template builds (its static assertions, in words), and the
    /// shared-memory limit.
    pub fn validate(&self) -> Result<(), String> {
        let col_split = self.consumer_mode == ConsumerMode::ColSplit;
        let pingpong = self.consumer_mode == ConsumerMode::PingPong;
        let ksplit = self.consumer_mode == ConsumerMode::KSplit;
        let split = self.split > 1;
        // Rows of a tile per consumer: cooperative consumers split the tile, the others
        // each cover all its rows.
        let per = if self.consumer_mode.whole_tile() || col_split { self.bm } else { self.bm / self.consumers.max(1) };
        // And columns per consumer.
        let wn = if col_split { self.bn / 2 } else { self.bn };
        if !matches!(self.consumers, 1..=3) || !self.bm.is_multiple_of(self.consumers) || !matches!(per, 64 | 128) {
            return Err(format!("BM {} with {} consumer warpgroup(s): each must own 64 or 128 rows", self.bm, self.consumers));
        }
        // Three consumers (512 threads): swap-AB's 384 weight rows, 128 a consumer, loaded as
        // three TMA boxes of 128 rows ([`HopperConfig::a_box_rows`]), so no cluster along N
        // shares them out; or 192 rows that are not swap-AB, 64 a consumer, one box.
        if self.consumers == 3 && (self.bm != if self.swap { 384 } else { 192 } || self.consumer_mode != ConsumerMode::Cooperative || self.cluster_n != 1 || self.reduction == Reduction::Cluster) {
            return Err(format!("three consumer warpgroups are swap-AB's 384-row tiles or 192-row ones (cooperative, no cluster along N, not the cluster reduction); got {}", self.label()));
        }
        if !matches!(self.bn, 8 | 16 | 24 | 32 | 48 | 64 | 128 | 160 | 256) {
            return Err(format!("BN {} is not 8, 16, 24, 32, 48, 64, 128, 160 or 256", self.bn));
        }
        if !self.bn.is_multiple_of(64) && pingpong {
            return Err(format!("BN {} does not run ping-pong", self.bn));
        }
        // Accumulators per consumer thread: 128 at most, 160 with two consumers (their
        // register budget is 240), 64 with three (160 registers each: 24 × 128 + 160 × 384
        // = 64,512 of the SM's 65,536; 128 accumulators spilled there).
        let budget = Self::accumulator_budget(self.consumers);
        if !matches!(self.chains, 1 | 2 | 4) {
            return Err(format!("{} accumulator chains; 1, 2 or 4", self.chains));
        }
        if !pingpong && per / 64 * wn / 2 * self.chains > budget {
            if self.chains > 1 {
                return Err(format!("{} chains of a {}x{} tile need {} accumulators per consumer thread; at most {budget}", self.chains, self.bm, self.bn, per / 64 * wn / 2 * self.chains));
            }
            if ksplit {
                return Err(format!("a {}x{} tile split across consumers needs {} accumulators per thread; at most {budget}", self.bm, self.bn, per / 64 * wn / 2));
            }
            return Err(format!("a {}x{} tile needs {} accumulators per consumer thread; at most {budget}", self.bm, self.bn, per / 64 * wn / 2));
        }
        if col_split && (self.consumers != 2 || !matches!(self.bn, 128 | 256) || self.chains > 1 || !matches!(self.reduction, Reduction::None | Reduction::Atomic)) {
            return Err(format!("consumers split the columns of a {}x{} tile: two consumers, BN 128 or 256, one chain, unsplit or atomic split-K", self.bm, self.bn));
        }
        if pingpong {
            if self.consumers != 2 || split {
                return Err("ping-pong needs two consumer warpgroups and no split-K".into());
            }
            // One warpgroup holds the whole tile's accumulators: at most 128 per thread.
            if per * self.bn > 128 * 128 {
                return Err(format!("a ping-pong consumer cannot hold a {}x{} tile's accumulators", self.bm, self.bn));
            }
        }
        if !(2..=16).contains(&self.stages) {
            return Err(format!("{} stages; 2 to 16", self.stages));
        }
        if self.split == 0 || self.split > 1024 {
            return Err(format!("split {} is not 1 to 1024", self.split));
        }
        if split != (self.reduction != Reduction::None) {
            return Err(format!("split {} with reduction {:?}: split-K takes 2 or more slices and a reduction, an unsplit code neither", self.split, self.reduction));
        }
        if split && self.persistent {
            return Err("split-K runs one block per unit, not on the persistent grid".into());
        }
        if !matches!(self.cluster_m, 1 | 2 | 4 | 8) || !matches!(self.cluster_n, 1 | 2 | 4 | 8) || self.cluster_size() > 8 {
            return Err(format!("a cluster of {}x{} CTAs: each side 1, 2, 4 or 8, and 8 CTAs at most", self.cluster_m, self.cluster_n));
        }
        // Multicast clusters run unsplit and atomic split-K codes (the in-order reduction
        // is not built for them); the cluster reduction's cluster is its slices, and
        // stream-K's grid is of whole clusters.
        if self.cluster_size() > 1
            && (matches!(self.reduction, Reduction::InOrder | Reduction::Cluster) || (self.reduction.is_stream_k() && !self.split.is_multiple_of(self.cluster_size())))
        {
            return Err("split-K in a multicast cluster reduces atomically (not in order, not as a cluster reduction), stream-K on a grid of whole clusters".into());
        }
        // Each CTA loads its share of the shared operand: whole 8-row swizzle atoms.
        if !(self.bm / self.cluster_n).is_multiple_of(8) || !(self.bn / self.cluster_m).is_multiple_of(8) {
            return Err(format!("a {}x{} tile does not split into 8-row slices over a {}x{} cluster", self.bm, self.bn, self.cluster_m, self.cluster_n));
        }
        if self.reduction == Reduction::Cluster {
            if !(2..=16).contains(&self.split) {
                return Err(format!("a cluster reduction takes 2 to 16 slices; got split {}", self.split));
            }
            // Each CTA keeps its fp32 partial tile in its drained ring.
            if self.stages * (self.bm + self.bn) * self.bk * 2 < self.bm * self.bn * 4 {
                return Err(format!("a {}-stage ring cannot hold the {}x{} fp32 partial", self.stages, self.bm, self.bn));
            }
        }
        if ksplit && (self.consumers != 2 || split || !self.stages.is_multiple_of(2)) {
            return Err(format!("K split across consumers needs two consumers, an even ring ({} stages), and no split-K", self.stages));
        }
        if self.wait0 && ksplit {
            return Err("K split across consumers frees its slots its own way: no wait0".into());
        }
        if self.epilogue == Epilogue::TmaStore && (split || !self.bn.is_multiple_of(64)) {
            return Err(format!("the TMA-store epilogue stores 64-column pieces of unsplit tiles; got BN {} split {}", self.bn, self.split));
        }
        if self.bk != BK && (!WIDE_BKS.contains(&self.bk) || self.reduction == Reduction::Cluster || self.reduction.is_stream_k() || ksplit) {
            return Err(format!("K per ring slot {} is not 64, or 128 or 256 without the cluster reduction, stream-K or K split across consumers", self.bk));
        }
        if self.swap && self.epilogue == Epilogue::TmaStore {
            return Err("a swap-AB code stores C transposed from registers: no TMA store".into());
        }
        if self.grid.one_tile() && !self.takes_grid2d() {
            return Err("the 2-D grids (`TileGrid::TwoD`, `TileGrid::Grouped`) are one unsplit tile per CTA: no persistent grid, split-K, ping-pong or cluster".into());
        }
        if self.shared_mem_bytes() + self.static_smem_bytes() > SMEM_LIMIT {
            return Err(format!("{} B of shared memory exceed {SMEM_LIMIT}", self.shared_mem_bytes() + self.static_smem_bytes()));
        }
        Ok(())
    }

    /// CTAs per cluster (1: no cluster).
    pub fn cluster_size(&self) -> u32 {
        self.cluster_m * self.cluster_n
    }

    /// Whether the problem has a tile row for each CTA of the cluster along M and a tile
    /// column for each along N (else some CTAs of every cluster hold only tiles past C).
    pub fn cluster_fits(&self, p: &Problem) -> bool {
        let (m, n) = self.dims(p);
        m.div_ceil(self.bm) >= self.cluster_m && n.div_ceil(self.bn) >= self.cluster_n
    }

    /// The problem's rows and columns as the code's tile covers them: (M, N), or with
    /// swap-AB (N, M).
    pub fn dims(&self, p: &Problem) -> (u32, u32) {
        if self.swap { (p.n, p.m) } else { (p.m, p.n) }
    }

    pub fn threads(&self) -> u32 {
        128 * (self.consumers + 1)
    }

    /// The fp32 accumulators a consumer thread may hold (the template's `acc_budget`): its
    /// registers after `setmaxnreg` less its addresses, descriptors and loop state. One
    /// consumer keeps the launch's 255 registers; two take 240 each and three 160 (the
    /// producer's warpgroup drops to 24: 24 × 128 + 240 × 256 and 24 × 128 + 160 × 384 are
    /// both 64,512 of 65,536).
    pub const fn accumulator_budget(consumers: u32) -> u32 {
        match consumers {
            3 => 64,
            2 => 160,
            _ => 128,
        }
    }

    /// Registers per thread after `setmaxnreg`, (producer, each consumer): the template's
    /// `producer_regs` and `consumer_regs`. None with one consumer, which keeps the launch's
    /// share.
    pub const fn setmaxnreg(&self) -> Option<(u32, u32)> {
        match self.consumers {
            3 => Some((24, 160)),
            2 => Some((24, 240)),
            _ => None,
        }
    }

    /// Rows of the kernel's A (swap-AB: the weight's) one TMA box loads, at most 256: this
    /// CTA's share of the tile (BM / CLUSTER_N) where one box holds it, else one box per
    /// consumer's rows (the 384-row tiles: three boxes of 128 into each slot). The manifest's
    /// A tensor map has this box; the template's `a_box_rows`.
    pub fn a_box_rows(&self) -> u32 {
        let slice = self.bm / self.cluster_n;
        if slice <= 256 { slice } else { self.bm / self.consumers }
    }

    /// The ring, 1 KiB for 1024-byte alignment, and the staged epilogue (tiles of whole
    /// 64-column pieces; the narrow ones store C from registers): 2,304 bytes per consumer
    /// warp, or with the TMA store two swizzled 2 KiB buffers.
    pub fn shared_mem_bytes(&self) -> u32 {
        let staging = if self.epilogue == Epilogue::TmaStore {
            self.consumers * 4 * 2 * 2048
        } else if self.bn.is_multiple_of(64) && !self.swap {
            self.consumers * 9216
        } else {
            0
        };
        // K split across consumers: consumer 1's fp32 partial tile.
        let partial = if self.consumer_mode == ConsumerMode::KSplit { self.bm * self.bn * 4 } else { 0 };
        self.stages * (self.bm + self.bn) * self.bk * 2 + 1024 + staging + partial
    }

    /// Whether the template builds this code for a layout: nn loads B in 64-column boxes,
    /// or, for the tiles of 8, 16 and 32 columns, in one box as wide as the tile (its rows
    /// swizzled at that width, [`HopperConfig::nn_narrow_b`]); 24, 48 and 160 are tn only.
    /// Swap-AB's B is the problem's A, K-major on both layouts, so every token width builds
    /// for nn; its A, the weight, loads in 64-row boxes along M, cooperatively and with no
    /// cluster along N.
    pub fn supports(&self, layout: Layout) -> bool {
        layout == Layout::Tn
            || if self.swap {
                self.cluster_n == 1 && self.consumer_mode == ConsumerMode::Cooperative
            } else {
                self.bn.is_multiple_of(64) || Self::nn_narrow_b(self.bn).is_some()
            }
    }

    /// nn's B box swizzle for a tile narrower than one 64-column box: BN columns (16, 32
    /// or 64 bytes a row of K) swizzled at that width, 8 without swizzle.
    pub fn nn_narrow_b(bn: u32) -> Option<Swizzle> {
        match bn {
            8 => Some(Swizzle::None),
            16 => Some(Swizzle::B32),
            32 => Some(Swizzle::B64),
            _ => None,
        }
    }

    /// The mbarriers, and the split-K counter's broadcast slot.
    fn static_smem_bytes(&self) -> u32 {
        2 * self.stages * 8 + if self.reduction.uses_workspace() { 16 } else { 0 }
    }

    /// Output tiles of the problem; in clusters, the tile rows and columns round up to whole
    /// clusters (the template's `roundup(ceil(M/BM), CLUSTER_M) * roundup(ceil(N/BN), CLUSTER_N)`).
    pub fn tiles(&self, p: &Problem) -> u32 {
        let (m, n) = self.dims(p);
        m.div_ceil(self.bm).next_multiple_of(self.cluster_m) * n.div_ceil(self.bn).next_multiple_of(self.cluster_n)
    }

    /// Split-K's workspace: one counter per tile (rounded up to 256 bytes), then every
    /// unit's fp32 partial tile (in order) or one fp32 sum per tile (atomic). As the
    /// template documents it.
    pub fn workspace_bytes(&self, p: &Problem) -> u64 {
        match self.reduction {
            Reduction::None | Reduction::Cluster => 0,
            Reduction::StreamK | Reduction::StreamKHybrid => {
                // One counter and one sum per block: the split tile it is the first of.
                let blocks = self.stream_blocks(p);
                split_workspace_bytes(blocks, self.bm * self.bn, blocks, true)
            }
            Reduction::InOrder | Reduction::Atomic => split_workspace_bytes(self.tiles(p), self.bm * self.bn, self.split, self.reduction.is_atomic()),
        }
    }

    /// Stream-K's grid: `split` blocks, but no more units (clusters, or blocks without one)
    /// than the problem's K-iterations (cluster tiles × K-tiles), so that every unit's range
    /// holds at least one (the template counts a shared tile's units as the owners of its
    /// first and last iterations and all between). The hybrid cuts fewer iterations, but
    /// never fewer than its units where it cuts any (a full wave's tiles and more).
    fn stream_blocks(&self, p: &Problem) -> u32 {
        let cl = self.cluster_size();
        let work = u64::from(self.tiles(p) / cl) * u64::from(p.k.div_ceil(self.bk));
        let units = u32::try_from(work.min(u64::from(self.split / cl))).unwrap_or(self.split / cl).max(1);
        units * cl
    }

    /// The PTX entry: the positional head, then each row of [`AXES`] that is not at its
    /// default. The grid's size, the split count and the L2 promotion are not in it.
    pub fn entry(&self, acc: Acc, layout: Layout) -> String {
        NAMES.entry(self, acc, layout)
    }

    /// The template's defines: the head's, then each row's, and the entry name.
    pub fn defines(&self, acc: Acc, layout: Layout) -> Vec<(String, String)> {
        NAMES.defines(self, acc, layout)
    }

    /// The code a configuration runs (one PTX each).
    pub fn code_key(&self) -> HopperKey {
        NAMES.code_key(self)
    }

    /// Whether the code can take the one-tile grids ([`TileGrid::TwoD`],
    /// [`TileGrid::Grouped`]): one unsplit tile per CTA, no ping-pong, no cluster.
    pub fn takes_grid2d(&self) -> bool {
        !self.persistent && self.split <= 1 && self.reduction == Reduction::None && self.consumer_mode != ConsumerMode::PingPong && self.cluster_size() == 1
    }

    /// The launch's grid: the 2-D one ([tile columns, tile rows]) or the grouped one
    /// ([min(16, tile rows), tile columns, ⌈tile rows / 16⌉]) for those codes, else
    /// [`HopperConfig::grid_blocks`] blocks along x.
    pub fn launch_grid(&self, p: &Problem, sm_count: u32) -> [u32; 3] {
        let (m, n) = self.dims(p);
        let rows = m.div_ceil(self.bm);
        match self.grid {
            TileGrid::TwoD => [n.div_ceil(self.bn), rows, 1],
            TileGrid::Grouped => [rows.min(GROUP_M), n.div_ceil(self.bn), rows.div_ceil(GROUP_M)],
            TileGrid::Linear => [self.grid_blocks(p, sm_count), 1, 1],
        }
    }

    /// Blocks of the 1-D grid: a persistent grid takes one per SM, rounded down to whole
    /// clusters; stream-K its own count.
    pub fn grid_blocks(&self, p: &Problem, sm_count: u32) -> u32 {
        let tiles = self.tiles(p);
        if self.reduction.is_stream_k() {
            self.stream_blocks(p)
        } else if self.persistent {
            tiles.min((sm_count / self.cluster_size()).max(1) * self.cluster_size())
        } else {
            tiles * self.split
        }
    }

    pub fn manifest(&self, p: &Problem, sm_count: u32) -> Manifest {
        // Each CTA of a cluster loads its share of the tiles it shares and multicasts it: of
        // A, BM/CLUSTER_N rows (the 384-row tiles: three boxes of 128); of B, tn BN/CLUSTER_M rows of K, nn 64 columns of N by
        // BK/CLUSTER_M rows of K. A and tn's B boxes are one swizzle atom (64) along K: a
        // slot of K 128 takes two of each. nn's narrow tiles load B in one box of BN
        // columns, swizzled at their width.
        let (b_box, b_swizzle) = match (p.layout, Self::nn_narrow_b(self.bn)) {
            (Layout::Tn, _) => ([64, self.bn / self.cluster_m], Swizzle::B128),
            // Swap-AB's B is the problem's A: K-major on nn too.
            (Layout::Nn, _) if self.swap => ([64, self.bn / self.cluster_m], Swizzle::B128),
            (Layout::Nn, Some(swizzle)) => ([self.bn, self.bk / self.cluster_m], swizzle),
            (Layout::Nn, None) => ([64, self.bk / self.cluster_m], Swizzle::B128),
        };
        let l2_promotion = if self.l2_256 { L2Promotion::B256 } else { L2Promotion::B128 };
        // Swap-AB: the kernel's A is the problem's B and its B the problem's A, and its M, N
        // are the problem's N, M. On nn the weight is N-major (global dims [N, K]): boxes of
        // 64 of its N by the slot's K, as nn's B.
        let (a, b, m, n) = if self.swap { (Operand::B, Operand::A, Dim::N, Dim::M) } else { (Operand::A, Operand::B, Dim::M, Dim::N) };
        let a_box = if self.swap && p.layout == Layout::Nn { [64, self.bk] } else { [64, self.a_box_rows()] };
        let mut params = vec![
            Param::TensorMap(TensorMapSpec { operand: a, box_dims: a_box, swizzle: Swizzle::B128, l2_promotion }),
            Param::TensorMap(TensorMapSpec { operand: b, box_dims: b_box, swizzle: b_swizzle, l2_promotion }),
            if self.epilogue == Epilogue::TmaStore {
                // 16 rows of 64 columns: one consumer warp's piece.
                Param::TensorMap(TensorMapSpec { operand: Operand::C, box_dims: [64, 16], swizzle: Swizzle::B128, l2_promotion: L2Promotion::B128 })
            } else {
                Param::Ptr(Buffer::C)
            },
            Param::I32(I32Value::Dim(m)),
            Param::I32(I32Value::Dim(n)),
            Param::I32(I32Value::Dim(Dim::K)),
        ];
        if self.reduction.uses_workspace() {
            let s = if self.reduction.is_stream_k() { self.stream_blocks(p) } else { self.split };
            params.push(Param::Ptr(Buffer::Workspace));
            params.push(Param::I32(I32Value::Const(s as i32)));
        }
        Manifest {
            abi: ABI.into(),
            problem: *p,
            workspace_bytes: self.workspace_bytes(p),
            launches: vec![Launch {
                entry: self.entry(p.acc, p.layout),
                grid: self.launch_grid(p, sm_count),
                block: [self.threads(), 1, 1],
                cluster: [if self.reduction == Reduction::Cluster { self.split } else { self.cluster_size() }, 1, 1],
                shared_mem_bytes: self.shared_mem_bytes(),
                params,
            }],
        }
    }

    /// The configuration, accumulator and layout an entry name encodes (the grid choice is
    /// not in the name: `persistent` comes back false; nor is the split count, a launch
    /// parameter (or the cluster size): a split-K entry comes back with `split` 2, stream-K
    /// with one unit per cluster CTA, see [`HopperConfig::of_launch`]).
    pub fn from_entry(entry: &str) -> Option<(HopperConfig, Acc, Layout)> {
        let (mut cfg, acc, layout) = NAMES.parse(entry, HopperConfig::new(0, 0, 0, 0))?;
        cfg.split = match cfg.reduction {
            Reduction::None => 1,
            // Stream-K's grid is a launch parameter; whole clusters of it.
            Reduction::StreamK | Reduction::StreamKHybrid => cfg.cluster_size().max(2),
            _ => 2,
        };
        cfg.validate().ok()?;
        cfg.supports(layout).then_some((cfg, acc, layout))
    }

    /// The configuration a launch of this family runs: the entry's code, the split count
    /// from its parameters, for an unsplit entry `persistent` when the grid is smaller than
    /// the problem's tiles, and `l2_256` from its first tensor map (the A operand's; the
    /// tuner gives both the same promotion).
    pub fn of_launch(launch: &Launch, p: &Problem) -> Option<(HopperConfig, Acc, Layout)> {
        let (mut cfg, acc, layout) = Self::from_entry(&launch.entry)?;
        if cfg.reduction == Reduction::Cluster {
            cfg.split = launch.cluster[0];
        } else if cfg.split > 1 {
            let Some(Param::I32(I32Value::Const(s))) = launch.params.get(7) else { return None };
            cfg.split = u32::try_from(*s).ok()?;
        } else if cfg.grid.one_tile() {
            // One tile per CTA, exactly the problem's tiles: any other grid is not this code's.
            if launch.grid != cfg.launch_grid(p, 0) {
                return None;
            }
        } else {
            cfg.persistent = launch.grid[0] < cfg.tiles(p);
        }
        cfg.l2_256 = matches!(launch.params.first(), Some(Param::TensorMap(t)) if t.l2_promotion == L2Promotion::B256);
        cfg.validate().ok()?;
        Some((cfg, acc, layout))
    }

    /// Short label, e.g. `128x256 s4 c2 persistent`, `64x64 s8 c1 split 16 atomic`,
    /// `64x64 s8 c1 split 8 cluster`: the tile, K per slot where not 64, ring, consumers and
    /// cluster, then each row of [`AXES`] in its label order.
    pub fn label(&self) -> String {
        let cl = match (self.cluster_m, self.cluster_n) {
            (1, 1) => String::new(),
            (m, 1) => format!(" m{m}"),
            (1, n) => format!(" n{n}"),
            (m, n) => format!(" m{m}n{n}"),
        };
        let bk = if self.bk != BK { format!(" k{}", self.bk) } else { String::new() };
        format!("{}x{}{bk} s{} c{}{cl}{}", self.bm, self.bn, self.stages, self.consumers, axes::label(&AXES, self, self.split))
    }
}

/// The split-K workspace both families' templates use: one u32 counter per output tile
/// (rounded up to 256 bytes), then one fp32 sum per tile (atomic) or every unit's fp32
/// partial (in order), `tile_elems` floats each.
pub(crate) fn split_workspace_bytes(tiles: u32, tile_elems: u32, split: u32, atomic: bool) -> u64 {
    if split <= 1 {
        return 0;
    }
    let tiles = u64::from(tiles);
    let per_tile = if atomic { 1 } else { u64::from(split) };
    (4 * tiles).div_ceil(256) * 256 + 4 * tiles * per_tile * u64::from(tile_elems)
}

/// Whether the rows TMA loads (K of A; N or K of B) are whole 16-byte units: N and K
/// multiples of 8 halves.
pub fn rows_aligned(p: &Problem) -> bool {
    p.n.is_multiple_of(8) && p.k.is_multiple_of(8)
}

/// Whether the family builds code for a problem: sm_90 (wgmma, TMA) and rows TMA can load.
pub fn builds(p: &Problem) -> bool {
    matches!(p.arch, crate::problem::Arch::Sm90 | crate::problem::Arch::Sm90a) && rows_aligned(p)
}

/// Compiles one configuration for an accumulator and layout with NVRTC.
pub fn compile(cfg: &HopperConfig, acc: Acc, layout: Layout) -> Result<String, GpuError> {
    cfg.validate().map_err(|m| GpuError::refused("Hopper HGEMM", m))?;
    if !cfg.supports(layout) {
        return Err(GpuError::refused("Hopper HGEMM", format!("BN {} is tn only (nn loads B in 64-column boxes, or one box of 8, 16 or 32)", cfg.bn)));
    }
    if cfg.consumer_mode == ConsumerMode::KSplit && acc != Acc::F32 {
        return Err(GpuError::refused("Hopper HGEMM", "K split across consumers adds fp32 partials: acc=f32 only"));
    }
    if cfg.chains > 1 && acc != Acc::F32 {
        return Err(GpuError::refused("Hopper HGEMM", "accumulator chains are summed in fp32: acc=f32 only"));
    }
    nvrtc::compile(&TEMPLATE, TEMPLATE_NAME, TARGET, &cfg.defines(acc, layout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Arch, Shape};

    #[test]
    fn the_space_is_valid_and_its_manifests_check() {
        let space = space();
        assert!(space.len() >= 30, "{}", space.len());
        for c in &space {
            c.validate().unwrap();
            for layout in Layout::ALL.into_iter().filter(|&l| c.supports(l)) {
                for (m, n, k) in [(64, 64, 64), (16384, 16384, 16384), (64, 4096, 12288)] {
                    let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).unwrap());
                    let man = c.manifest(&p, 132);
                    man.validate().unwrap_or_else(|e| panic!("{} {p}: {e}", c.label()));
                    let g = man.launches[0].grid[0];
                    assert!(g >= 1 && (!c.persistent || g <= 132));
                    assert!(crate::manifest::is_ptx_identifier(&man.launches[0].entry));
                }
            }
        }
        // The helper's measured formula: 128x256 s4 c2 takes 216064 bytes.
        assert_eq!(HopperConfig { persistent: true, ..HopperConfig::new(128, 256, 4, 2) }.shared_mem_bytes(), 216_064);
        assert!(HopperConfig::new(256, 256, 4, 2).validate().is_err());
        assert!(HopperConfig::new(256, 64, 4, 1).validate().is_err());
        assert!(HopperConfig { persistent: true, split: 4, ..HopperConfig::new(64, 64, 8, 1) }.validate().is_err());
        assert!(HopperConfig { split: 0, ..HopperConfig::new(64, 64, 8, 1) }.validate().is_err());
        // Ping-pong: two consumers, each holding a whole tile of at most 128×128 or 64×256.
        let pp = HopperConfig { persistent: true, consumer_mode: ConsumerMode::PingPong, ..HopperConfig::new(128, 128, 6, 2) };
        pp.validate().unwrap();
        assert_eq!(pp.entry(Acc::F32, Layout::Tn), "kaas_wgmma_f32_tn_128x128x64_s6_c2_m1_g16_pp");
        assert!(pp.defines(Acc::F32, Layout::Tn).contains(&("KAAS_PINGPONG".to_string(), "1".to_string())));
        assert!(HopperConfig { bn: 256, stages: 4, ..pp }.validate().is_err(), "256 accumulators per thread");
        assert!(HopperConfig { bm: 256, stages: 4, ..pp }.validate().is_err());
        assert!(HopperConfig { consumers: 1, ..pp }.validate().is_err());
        assert!(HopperConfig { split: 4, reduction: Reduction::Atomic, persistent: false, ..pp }.validate().is_err());
        assert!(HopperConfig { bm: 64, bn: 256, stages: 5, ..pp }.validate().is_ok());
        assert_eq!(space.iter().filter(|c| c.consumer_mode == ConsumerMode::PingPong).count(), 8, "four tiles, the deepest and a 4-stage ring");
        assert!(space.iter().filter(|c| c.consumer_mode == ConsumerMode::PingPong).all(|c| c.persistent));
    }

    /// The 64×8 K-256 tiles: with fp32 accumulators, K ≥ 256 and at most 2^28 FLOP, in
    /// either layout, and nowhere else; the K-64 ones stay a trial.
    #[test]
    fn the_8_column_tiles_are_offered_to_the_small_shapes_only() {
        let eight = |acc, layout, m, n, k| {
            let prob = Problem::new(Arch::Sm90, acc, layout, Shape::new(m, n, k).unwrap());
            space_for(&prob, 132).into_iter().filter(|c| c.bn == 8).map(|c| HopperConfig { l2_256: false, ..c }).collect::<Vec<_>>()
        };
        let codes = narrow8_search_codes();
        assert!(codes.len() >= 2 && codes.iter().all(|c| c.bk == 256 && c.split == 1 && c.chains == 1), "{codes:?}");
        assert!(codes.iter().any(|c| c.stages == 3) && codes.iter().any(|c| c.stages == 4), "{codes:?}");
        for c in &codes {
            c.validate().unwrap();
        }
        // 2^24 to 2^28 FLOP, K 256 to 16384.
        for (m, n, k) in [(64, 64, 256), (64, 128, 1024), (128, 1024, 1024), (64, 64, 16384), (1024, 512, 256)] {
            assert_eq!(eight(Acc::F32, Layout::Tn, m, n, k), codes, "{m}x{n}x{k}");
            assert_eq!(eight(Acc::F32, Layout::Nn, m, n, k), codes, "nn {m}x{n}x{k}");
        }
        assert!(eight(Acc::F32, Layout::Tn, 64, 1024, 128).is_empty(), "K 128 is half a K-256 slot");
        assert!(eight(Acc::F32, Layout::Tn, 128, 2048, 1024).is_empty(), "2^29 FLOP");
        assert!(eight(Acc::F16, Layout::Tn, 64, 128, 1024).is_empty(), "fp32 only, as the K-256 twins");
        assert!(eight(Acc::F32, Layout::Nn, 128, 2048, 1024).is_empty(), "nn 2^29 FLOP");
    }

    #[test]
    fn narrow_tiles_are_offered_to_the_skinny_shapes_only() {
        let p = |layout, m, n, k| Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).unwrap());
        // (K 64 and 16 columns or more: the 64×8 tiles and the K-128 twins have tests of
        // their own.)
        let narrow = |prob: &Problem| space_for(prob, 132).into_iter().filter(|c| (16..64).contains(&c.bn) && c.bk == BK && c.cluster_size() == 1 && c.chains == 1).collect::<Vec<_>>();
        // 64×1024×512: 16 tiles of 64×64, so every width, each with 16 and 4 stages, and
        // the 64×32 split-K codes.
        let skinny = narrow(&p(Layout::Tn, 64, 1024, 512));
        let unsplit: Vec<(u32, u32)> = skinny.iter().filter(|c| c.split == 1).map(|c| (c.bn, c.stages)).collect();
        assert_eq!(unsplit, [(16, 16), (16, 4), (24, 16), (24, 4), (32, 16), (32, 4), (48, 16), (48, 4)], "{skinny:?}");
        assert!(skinny.iter().filter(|c| c.split > 1).all(|c| c.bn == 32 && c.reduction.is_atomic()), "{skinny:?}");
        assert!(skinny.iter().any(|c| c.split > 1));
        // nn: the widths it loads in one box (16 and 32), not 24 and 48.
        let nn = narrow(&p(Layout::Nn, 64, 1024, 512));
        let unsplit: Vec<(u32, u32)> = nn.iter().filter(|c| c.split == 1).map(|c| (c.bn, c.stages)).collect();
        assert_eq!(unsplit, [(16, 16), (16, 4), (32, 16), (32, 4)], "{nn:?}");
        assert!(nn.iter().any(|c| c.split > 1));
        // 2048² makes 1024 tiles of 64×64, more than two waves: no narrow tile.
        assert!(narrow(&p(Layout::Tn, 2048, 2048, 512)).is_empty());
        let c = HopperConfig::new(64, 24, 16, 1);
        c.validate().unwrap();
        // 16 stages of (64 + 24) × 64 halves, 1 KiB of alignment and no staging.
        assert_eq!(c.shared_mem_bytes(), 16 * 88 * 128 + 1024);
        assert_eq!(c.entry(Acc::F32, Layout::Tn), "kaas_wgmma_f32_tn_64x24x64_s16_c1_m1_g16");
        assert_eq!(c.tiles(&p(Layout::Tn, 64, 1024, 512)), 43);
        let man = c.manifest(&p(Layout::Tn, 64, 1024, 512), 132);
        man.validate().unwrap();
        assert_eq!(man.launches[0].grid, [43, 1, 1]);
        assert_eq!(HopperConfig::of_launch(&man.launches[0], &p(Layout::Tn, 64, 1024, 512)), Some((c, Acc::F32, Layout::Tn)));
        assert!(!c.supports(Layout::Nn) && c.supports(Layout::Tn));
        // nn's 8, 16 and 32 load B in one box as wide as the tile, swizzled at its width (a
        // cluster along M: each CTA its share of the slot's K rows).
        for (bn, swizzle, cluster_m) in [(8, Swizzle::None, 1), (16, Swizzle::B32, 1), (32, Swizzle::B64, 1), (16, Swizzle::B32, 2)] {
            let c = HopperConfig { bk: 256, cluster_m, ..HopperConfig::new(64, bn, 4, 1) };
            c.validate().unwrap();
            assert!(c.supports(Layout::Nn));
            let prob = p(Layout::Nn, 256, 1024, 512);
            let man = c.manifest(&prob, 132);
            man.validate().unwrap();
            let Param::TensorMap(b) = &man.launches[0].params[1] else { panic!("{man:?}") };
            assert_eq!((b.box_dims, b.swizzle), ([bn, 256 / cluster_m], swizzle));
            assert_eq!(HopperConfig::of_launch(&man.launches[0], &prob), Some((c, Acc::F32, Layout::Nn)));
        }
        for bad in [
            HopperConfig { bn: 40, ..c },
            HopperConfig { stages: 17, ..c },
            HopperConfig { cluster_m: 2, ..c },
            HopperConfig { consumer_mode: ConsumerMode::PingPong, persistent: true, consumers: 2, bm: 128, ..c },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_256x160_tile_is_tn_only_and_out_of_the_search() {
        let p = |layout, m, n, k| Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).unwrap());
        let codes = wide_160_codes();
        assert_eq!(codes.len(), 2);
        assert!(space_for(&p(Layout::Tn, 8192, 8192, 8192), 132).iter().all(|c| c.bn != 160), "it lost the timings");
        let c = codes[0];
        c.validate().unwrap();
        assert!(c.supports(Layout::Tn) && !c.supports(Layout::Nn), "nn loads B in 64-column boxes");
        assert_eq!(c.entry(Acc::F32, Layout::Tn), "kaas_wgmma_f32_tn_256x160x64_s4_c2_m1_g16");
        // 4 stages of (256 + 160) × 64 halves and 1 KiB of alignment; C stored from registers.
        assert_eq!(c.shared_mem_bytes(), 4 * 416 * 128 + 1024);
        assert_eq!(c.tiles(&p(Layout::Tn, 8192, 8192, 8192)), 32 * 52);
        // 160 accumulators per thread with two consumers; 256 columns would need 256.
        assert!(HopperConfig { bn: 256, ..c }.validate().is_err());
        assert!(HopperConfig::new(128, 256, 2, 1).validate().is_err(), "one consumer of 128 rows × 256 columns");
        assert!(HopperConfig { stages: 5, ..c }.validate().is_err(), "5 stages exceed shared memory");
    }

    #[test]
    fn clusters_along_m_split_the_b_box_and_round_the_grid_to_whole_clusters() {
        let all: Vec<HopperConfig> = multicast_codes();
        assert_eq!(all.len(), 22, "five tiles along M, four along N and two ping-pong, both grids: {all:?}");
        let (pp, all): (Vec<HopperConfig>, Vec<HopperConfig>) = all.into_iter().partition(|c| c.consumer_mode == ConsumerMode::PingPong);
        assert!(pp.iter().all(|c| c.cluster_m == 2 && c.validate().is_ok()) && pp.len() == 4, "{pp:?}");
        assert_eq!(pp[0].entry(Acc::F32, Layout::Tn), "kaas_wgmma_f32_tn_64x256x64_s5_c2_m2_g16_pp");
        let (m2, n2): (Vec<HopperConfig>, Vec<HopperConfig>) = all.into_iter().partition(|c| c.cluster_m == 2);
        assert!(n2.iter().all(|c| c.cluster_n == 2 && c.cluster_m == 1 && c.consumers == 2 && c.validate().is_ok()), "{n2:?}");
        assert!(n2.contains(&HopperConfig { cluster_n: 2, persistent: true, ..HopperConfig::new(256, 128, 4, 2) }), "{n2:?}");
        // cuBLASLt's heuristic pick on tn 1024×1024×8192 in our terms: 128×64, two consumers, 8 stages.
        assert!(n2.contains(&HopperConfig { cluster_n: 2, ..HopperConfig::new(128, 64, 8, 2) }), "{n2:?}");
        assert_eq!(HopperConfig { cluster_n: 2, ..HopperConfig::new(256, 128, 4, 2) }.entry(Acc::F32, Layout::Nn), "kaas_wgmma_f32_nn_256x128x64_s4_c2_m1_g16_n2");
        assert!(space().iter().all(|c| c.cluster_m == 1), "the m2 codes lost every timing: not searched");
        let c = HopperConfig { cluster_m: 2, ..HopperConfig::new(128, 256, 4, 2) };
        assert!(m2.contains(&c) && m2.contains(&HopperConfig { persistent: true, ..c }));
        assert_eq!(c.entry(Acc::F32, Layout::Tn), "kaas_wgmma_f32_tn_128x256x64_s4_c2_m2_g16");
        assert!(c.defines(Acc::F32, Layout::Tn).contains(&("KAAS_CLUSTER_M".to_string(), "2".to_string())));
        assert_eq!(HopperConfig { persistent: true, ..c }.label(), "128x256 s4 c2 m2 persistent");
        // 1000 rows are 8 tiles of 128, which make 4 clusters; 1100 rows need 9 tiles, so 10.
        let p = |layout, m, n, k| Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).unwrap());
        assert_eq!(c.tiles(&p(Layout::Tn, 1000, 512, 64)), 8 * 2);
        assert_eq!(c.tiles(&p(Layout::Tn, 1100, 512, 64)), 10 * 2);
        for layout in Layout::ALL {
            let prob = p(layout, 1100, 512, 4096);
            let man = c.manifest(&prob, 132);
            man.validate().unwrap();
            let l = &man.launches[0];
            assert_eq!((l.grid, l.cluster), ([20, 1, 1], [2, 1, 1]));
            let Param::TensorMap(b) = &l.params[1] else { panic!("B is not a tensor map") };
            // Each CTA of the pair loads half of the B tile: tn 128 of its 256 rows, nn 32 of
            // its 64 K-rows.
            assert_eq!(b.box_dims, if layout == Layout::Tn { [64, 128] } else { [64, 32] });
            assert_eq!(HopperConfig::of_launch(l, &prob), Some((c, Acc::F32, layout)));
            let persistent = HopperConfig { persistent: true, ..c };
            let big = p(layout, 8192, 8192, 8192);
            let lp = &persistent.manifest(&big, 131).launches[0];
            assert_eq!(lp.grid, [130, 1, 1], "131 SMs hold 65 whole clusters");
            assert_eq!(HopperConfig::of_launch(lp, &big), Some((persistent, Acc::F32, layout)));
        }
        // One-CTA manifests are what they were: the shipped catalog's manifests still match.
        let m1 = HopperConfig::new(128, 128, 6, 2);
        assert_eq!(m1.manifest(&p(Layout::Nn, 256, 256, 256), 132).launches[0].cluster, [1, 1, 1]);
        for bad in [HopperConfig { cluster_m: 3, ..c }, HopperConfig { split: 4, ..c }, HopperConfig { split: 4, reduction: Reduction::Cluster, ..c }, HopperConfig { split: 3, reduction: Reduction::StreamK, ..c }] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        // Stream-K runs in clusters on a grid of whole ones.
        HopperConfig { split: 4, reduction: Reduction::StreamK, ..c }.validate().unwrap();
        // Ping-pong consumers run in a cluster (both CTAs take the same tiles in the same
        // order, so the same consumer releases a slot in each).
        assert!(HopperConfig { consumer_mode: ConsumerMode::PingPong, persistent: true, cluster_m: 2, ..HopperConfig::new(128, 128, 6, 2) }.validate().is_ok());
    }

    /// Stepped descriptors are a mode of the uniform ones: `_dr` in place of `_du` (after
    /// `_w0`), `KAAS_DESC_UNIFORM=2`, a module of their own, and parse back.
    #[test]
    fn stepped_descriptors_name_and_define_their_mode() {
        let c = step_twin(&HopperConfig { consumer_mode: ConsumerMode::PingPong, ..HopperConfig::new(64, 256, 5, 2) });
        assert!(c.desc != DescMode::Plain && c.desc == DescMode::Stepped && c.validate().is_ok());
        assert_eq!(c.entry(Acc::F32, Layout::Tn), "kaas_wgmma_f32_tn_64x256x64_s5_c2_m1_g16_pp_dr");
        assert_eq!(c.label(), "64x256 s5 c2 ping-pong dr");
        let w0 = step_twin(&HopperConfig { consumer_mode: ConsumerMode::ColSplit, wait0: true, ..HopperConfig::new(64, 128, 8, 2) });
        assert_eq!(w0.entry(Acc::F32, Layout::Nn), "kaas_wgmma_f32_nn_64x128x64_s8_c2_m1_g16_cs_w0_dr");
        for (code, acc, layout) in [(c, Acc::F32, Layout::Tn), (w0, Acc::F32, Layout::Nn), (step_twin(&HopperConfig::new(128, 256, 4, 2)), Acc::F16, Layout::Tn)] {
            assert_eq!(HopperConfig::from_entry(&code.entry(acc, layout)), Some((code, acc, layout)));
            let defines = code.defines(acc, layout);
            assert!(defines.contains(&("KAAS_DESC_UNIFORM".to_string(), "2".to_string())), "{defines:?}");
            assert_ne!(code.code_key(), HopperConfig { desc: DescMode::Uniform, ..code }.code_key());
        }
        assert_eq!(HopperConfig::from_entry("kaas_wgmma_f32_tn_64x256x64_s5_c2_m1_g16_pp_dr_du"), None);
        let plain = HopperConfig::new(128, 256, 4, 2);
        let twins = twin_codes(&[plain, c], false, &[], true);
        let du = |c: &HopperConfig| in_desc_mode(c, DescMode::Uniform);
        assert_eq!(twins, vec![du(&plain), step_twin(&plain), in_desc_mode(&c, DescMode::Plain), du(&c)], "the two other modes of each, once");
        assert_eq!(desc_twins(&du(&plain)), vec![plain, step_twin(&plain)]);
    }

    /// Consumers that split the columns: two consumers on 64-row tiles (each 64 × BN/2, so
    /// 32 or 64 accumulators a thread), named `_cs`, parse back, one PTX each apart from the
    /// row-split codes, and only where the columns split into 64s.
    #[test]
    fn col_split_codes_give_a_64_row_tile_two_consumers() {
        let codes = col_split_codes();
        assert_eq!(codes.len(), 2 * (2 * (2 * 2 + 2 * 2) + 3), "{codes:?}");
        assert_eq!(codes.iter().filter(|c| c.wait0).count(), codes.len() / 2);
        for c in &codes {
            c.validate().unwrap();
            assert!(c.consumer_mode == ConsumerMode::ColSplit && c.consumers == 2 && c.bm == 64 && c.threads() == 384, "{c:?}");
            assert_ne!(c.code_key(), HopperConfig { wait0: !c.wait0, ..*c }.code_key());
            for (acc, layout) in [(Acc::F32, Layout::Tn), (Acc::F32, Layout::Nn), (Acc::F16, Layout::Tn)] {
                let entry = c.entry(acc, layout);
                assert!(entry.ends_with(if c.wait0 { "_cs_w0" } else { "_cs" }), "{entry}");
                let (back, a, l) = HopperConfig::from_entry(&entry).unwrap();
                assert_eq!((HopperConfig { persistent: c.persistent, ..back }, a, l), (*c, acc, layout));
            }
            assert!(c.defines(Acc::F32, Layout::Tn).contains(&("KAAS_COLSPLIT".to_string(), "1".to_string())));
            assert_ne!(c.code_key(), HopperConfig { consumer_mode: ConsumerMode::Cooperative, bm: 128, ..*c }.code_key());
        }
        let c = HopperConfig { consumer_mode: ConsumerMode::ColSplit, ..HopperConfig::new(64, 128, 8, 2) };
        assert_eq!(c.entry(Acc::F32, Layout::Tn), "kaas_wgmma_f32_tn_64x128x64_s8_c2_m1_g16_cs");
        assert_eq!(HopperConfig { cluster_n: 2, split: 4, reduction: Reduction::Atomic, ..c }.entry(Acc::F32, Layout::Nn), "kaas_wgmma_f32_nn_64x128x64_s8_c2_m1_g16_n2_ska_cs");
        assert_eq!(HopperConfig { cluster_m: 2, ..c }.label(), "64x128 s8 c2 m2 col-split");
        assert_eq!(HopperConfig { wait0: true, desc: DescMode::Uniform, ..c }.entry(Acc::F32, Layout::Tn), "kaas_wgmma_f32_tn_64x128x64_s8_c2_m1_g16_cs_w0_du");
        assert_eq!(HopperConfig::from_entry("kaas_wgmma_f32_tn_64x128x64_s8_c2_m1_g16_cs_w0_du").map(|(c, _, _)| (c.wait0, c.desc != DescMode::Plain)), Some((true, true)));
        assert!(HopperConfig { wait0: true, consumer_mode: ConsumerMode::KSplit, ..c }.validate().is_err());
        // Without the column split a 64-row tile cannot have two cooperative consumers.
        assert!(HopperConfig { consumer_mode: ConsumerMode::Cooperative, ..c }.validate().is_err());
        for bad in [
            HopperConfig { bn: 64, ..c },
            HopperConfig { consumers: 1, ..c },
            HopperConfig { split: 4, ..c },
            HopperConfig { split: 4, reduction: Reduction::InOrder, ..c },
            HopperConfig { split: 4, reduction: Reduction::StreamK, ..c },
            HopperConfig { chains: 2, ..c },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        // A problem's candidates: clusters that fit it; split-K with fp32 only.
        let p = |acc, m, n, k| Problem::new(Arch::Sm90, acc, Layout::Tn, Shape::new(m, n, k).unwrap());
        let mid = col_split_space(&p(Acc::F32, 1024, 1024, 8192), 132);
        assert!(mid.iter().any(|c| c.split > 1 && c.cluster_n == 2) && mid.iter().any(|c| c.split == 1 && c.cluster_m == 2 && c.bn == 256), "{mid:?}");
        assert!(col_split_space(&p(Acc::F16, 1024, 1024, 8192), 132).iter().all(|c| c.split == 1));
        assert!(col_split_space(&p(Acc::F32, 64, 128, 8192), 132).iter().all(|c| c.cluster_size() == 1 && c.bn == 128 || c.cluster_m == 1 && c.cluster_n == 1), "one tile: no pairs");
        for c in mid {
            c.manifest(&p(Acc::F32, 1024, 1024, 8192), 132).validate().unwrap();
        }
    }

    /// K split across consumers in multicast pairs: 64 × 64 and 64 × 128, along M and N, both
    /// grids, valid, named `_m2…_kw` / `_n2_kw`, and their entries parse back.
    #[test]
    fn ksplit_pairs_are_valid_and_parse_back() {
        let codes = ksplit_pair_codes();
        assert_eq!(codes.len(), 8, "{codes:?}");
        assert!(codes.iter().all(|c| c.validate().is_ok() && c.consumer_mode == ConsumerMode::KSplit && c.cluster_size() == 2 && c.stages.is_multiple_of(2)), "{codes:?}");
        let c = codes.iter().find(|c| c.bn == 128 && c.cluster_m == 2 && !c.persistent).expect("64x128 along M");
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(1024, 1024, 8192).unwrap());
        let man = c.manifest(&p, 132);
        let l = &man.launches[0];
        assert_eq!((l.grid, l.cluster, l.block), ([128, 1, 1], [2, 1, 1], [384, 1, 1]));
        assert!(l.entry.ends_with("_m2_g16_kw"), "{}", l.entry);
        assert_eq!(HopperConfig::of_launch(l, &p), Some((*c, Acc::F32, Layout::Tn)));
    }

    /// Atomic split-K in multicast clusters of two: pairs along M and N of the mid shapes'
    /// tiles, one grid block per (CTA tile, slice) with the tiles rounded up to whole
    /// clusters, a counter and a sum per CTA tile, entries that parse back; offered where
    /// the problem has a tile for each CTA of the cluster's side and leaves SMs idle.
    #[test]
    fn multicast_split_codes_pair_tiles_and_count_per_cta_tile() {
        let codes = multicast_split_tiles();
        assert_eq!(codes.len(), 8, "{codes:?}");
        assert!(codes.iter().all(|c| c.validate().is_ok() && c.reduction.is_atomic() && c.split == 2 && c.cluster_size() == 2 && !c.persistent), "{codes:?}");
        let c = *codes.iter().find(|c| c.bm == 64 && c.bn == 128 && c.cluster_m == 2).expect("64x128 in pairs along M");
        let p = |layout, m, n, k| Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).unwrap());
        // 1000 rows: 16 tiles of 64, 8 pairs; 1000 columns: 8 tiles of 128. Split 3.
        let prob = p(Layout::Tn, 1000, 1000, 4096);
        let c3 = HopperConfig { split: 3, ..c };
        let man = c3.manifest(&prob, 132);
        man.validate().unwrap();
        let l = &man.launches[0];
        assert_eq!((l.grid, l.cluster), ([16 * 8 * 3, 1, 1], [2, 1, 1]));
        assert_eq!(man.workspace_bytes, (4 * 128u64).next_multiple_of(256) + 4 * 128 * 64 * 128);
        assert_eq!(l.entry, format!("kaas_wgmma_f32_tn_64x128x64_s{}_c1_m2_g16_ska", c.stages));
        assert_eq!(HopperConfig::of_launch(l, &prob), Some((c3, Acc::F32, Layout::Tn)), "of_launch reads the split from the launch");
        let n2 = *codes.iter().find(|c| c.bm == 128 && c.bn == 128 && c.cluster_n == 2).expect("128x128 in pairs along N");
        assert_eq!(n2.entry(Acc::F32, Layout::Nn), format!("kaas_wgmma_f32_nn_128x128x64_s{}_c2_m1_g16_n2_ska", n2.stages));
        // Offered: fp32 only, the splits split_space gives, a tile per CTA of the pair.
        let offered = multicast_split_space(multicast_split_tiles(), &p(Layout::Tn, 1024, 1024, 8192), 132);
        assert!(!offered.is_empty() && offered.iter().all(|o| o.split >= 2 && o.tiles(&p(Layout::Tn, 1024, 1024, 8192)) * o.split <= 264), "{offered:?}");
        assert!(multicast_split_space(multicast_split_tiles(), &Problem { acc: Acc::F16, ..p(Layout::Tn, 1024, 1024, 8192) }, 132).is_empty());
        assert!(multicast_split_space(multicast_split_tiles(), &p(Layout::Tn, 64, 1024, 8192), 132).iter().all(|o| o.cluster_m == 1), "one tile row: no pairs along M");
        assert!(multicast_split_space(multicast_split_tiles(), &p(Layout::Tn, 8192, 8192, 8192), 132).is_empty(), "tiles fill the SMs");
        let quads = multicast_split_quads();
        assert_eq!(quads.len(), 12, "{quads:?}");
        assert!(quads.iter().all(|c| c.validate().is_ok() && c.cluster_size() == 4), "{quads:?}");
        assert!(multicast_split_space(quads, &p(Layout::Tn, 128, 1024, 8192), 132).iter().all(|o| o.cluster_m <= 2), "two tile rows of 64: no clusters of 4 along M");
        // The search takes the pairs from K 8192 (fp32).
        let space = |m, n, k| space_for(&p(Layout::Tn, m, n, k), 132);
        assert!(space(1024, 1024, 8192).iter().any(|c| c.split > 1 && c.cluster_size() == 2));
        assert!(!space(1024, 1024, 4096).iter().any(|c| c.cluster_size() > 1 && c.split > 1), "K 4096: plain split-K only");
        assert!(!space(1024, 1024, 16384).iter().any(|c| c.split > 1 && c.cluster_size() > 2), "split-K in clusters of four is a trial's");
    }

    #[test]
    fn split_k_candidates_suit_the_problem_and_their_manifests_check() {
        let p = |m, n, k| Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).unwrap());
        // Few tiles and a long K: many splits; the output fills the GPU: none.
        let skinny = split_space(&p(64, 64, 16384), 132);
        let splits: Vec<u32> = skinny.iter().filter(|c| c.reduction.is_atomic() && c.bm == 64 && c.bn == 64 && c.stages == 8).map(|c| c.split).collect();
        assert_eq!(splits, [33, 66, 128, 132, 264].into_iter().filter(|&s| s <= 128).collect::<Vec<_>>(), "{skinny:?}");
        assert!(skinny.iter().all(|c| c.reduction.is_atomic() && c.reduction != Reduction::Cluster), "only the atomic reduction is searched");
        // A quarter, half, one and two waves of 4 tiles of 64×64: 8, 16, 33 and 66 slices.
        let four = split_space(&p(128, 128, 16384), 132);
        let splits: Vec<u32> = four.iter().filter(|c| c.reduction.is_atomic() && c.bm == 64 && c.bn == 64 && c.stages == 8).map(|c| c.split).collect();
        assert_eq!(splits, [8, 16, 33, 66], "{four:?}");
        // Short K caps the count: 64×64×2048 has 32 K-tiles, so at most 16 slices.
        let short: Vec<u32> = split_space(&p(64, 64, 2048), 132).iter().filter(|c| c.reduction.is_atomic() && c.bm == 64 && c.bn == 64 && c.stages == 8).map(|c| c.split).collect();
        assert_eq!(short, [16], "{short:?}");
        assert!(split_space(&p(8192, 8192, 8192), 132).is_empty());
        assert!(split_space(&p(64, 64, 64), 132).is_empty(), "one K-tile cannot split");
        let f16 = Problem::new(Arch::Sm90, Acc::F16, Layout::Tn, Shape::new(64, 64, 16384).unwrap());
        assert!(split_space(&f16, 132).is_empty(), "partials are fp32");
        for (m, n, k) in [(64, 64, 16384), (512, 256, 4096), (1024, 1024, 16384), (100, 200, 4104)] {
            for layout in Layout::ALL {
                let prob = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).unwrap());
                // The cluster codes, out of the search, with every cluster size that fits.
                let clustered = cluster_tiles().into_iter().flat_map(|t| [2, 4, 8, 16].map(|split| HopperConfig { split, ..t }));
                let clustered = clustered.filter(|c| c.tiles(&prob) * c.split <= 264 && prob.k.div_ceil(64) >= c.split);
                for c in split_space(&prob, 132).into_iter().chain(clustered) {
                    c.validate().unwrap();
                    let units = c.tiles(&prob) * c.split;
                    let per_slice = if c.reduction == Reduction::Cluster { 1 } else { 2 };
                    assert!(units <= 264 && prob.k.div_ceil(64) >= per_slice * c.split, "{} {prob}", c.label());
                    let man = c.manifest(&prob, 132);
                    man.validate().unwrap_or_else(|e| panic!("{} {prob}: {e}", c.label()));
                    assert_eq!(man.launches[0].grid, [units, 1, 1]);
                    assert_eq!(man.workspace_bytes, c.workspace_bytes(&prob));
                    assert!(man.launches[0].entry.ends_with(if c.reduction == Reduction::Cluster { "_skc" } else if c.reduction.is_atomic() { "_ska" } else { "_sk" }));
                    assert_eq!(HopperConfig::of_launch(&man.launches[0], &prob), Some((c, Acc::F32, layout)));
                }
            }
        }
        // The template's formula: 256-byte rounded counters, then S partial tiles of fp32.
        let c = HopperConfig::new(64, 64, 8, 1).split_by(16, Reduction::InOrder);
        assert_eq!(c.workspace_bytes(&p(100, 64, 16384)), 256 + 4 * 2 * 16 * 64 * 64);
        assert_eq!(HopperConfig { reduction: Reduction::Atomic, ..c }.workspace_bytes(&p(100, 64, 16384)), 256 + 4 * 2 * 64 * 64);
        assert_eq!(HopperConfig { split: 1, ..c }.workspace_bytes(&p(100, 64, 16384)), 0);
        assert!(HopperConfig { split: 1, reduction: Reduction::Atomic, ..c }.validate().is_err());
    }

    #[test]
    fn the_cluster_reduction_launches_one_cluster_per_tile_without_workspace() {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Nn, Shape::new(200, 100, 4096).unwrap());
        let c = HopperConfig { split: 8, reduction: Reduction::Cluster, ..HopperConfig::new(64, 64, 8, 1) };
        c.validate().unwrap();
        let man = c.manifest(&p, 132);
        man.validate().unwrap();
        let l = &man.launches[0];
        // 4 × 2 tiles, each a cluster of 8 slices; A, B, C, M, N, K and nothing else.
        assert_eq!((l.grid, l.cluster, man.workspace_bytes, l.params.len()), ([64, 1, 1], [8, 1, 1], 0, 6));
        assert_eq!(l.entry, "kaas_wgmma_f32_nn_64x64x64_s8_c1_m1_g16_skc");
        assert!(c.defines(Acc::F32, Layout::Nn).contains(&("KAAS_SPLITK".to_string(), "3".to_string())));
        assert_eq!(c.label(), "64x64 s8 c1 split 8 cluster");
        assert_eq!(HopperConfig::of_launch(l, &p), Some((c, Acc::F32, Layout::Nn)));
        assert_ne!(c.code_key(), HopperConfig { reduction: Reduction::InOrder, ..c }.code_key());
        // The static barrier of the workspace reductions is not there.
        assert_eq!(c.static_smem_bytes() + 16, HopperConfig { reduction: Reduction::InOrder, ..c }.static_smem_bytes());
        for bad in [
            HopperConfig { split: 1, ..c },
            HopperConfig { split: 17, ..c },
            HopperConfig { persistent: true, ..c },
            // Two stages of 128×256 (96 KiB) cannot hold its 128 KiB fp32 partial.
            HopperConfig { bm: 128, bn: 256, stages: 2, consumers: 2, ..c },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert!(HopperConfig { bm: 128, bn: 256, stages: 4, consumers: 2, ..c }.validate().is_ok());
        assert!(cluster_tiles().iter().all(|t| t.validate().is_ok() && t.reduction == Reduction::Cluster));
    }

    #[test]
    fn skinny_clusters_split_the_shared_tile_and_suit_the_skinny_shapes_only() {
        let p = |layout, m, n, k| Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).unwrap());
        let codes = skinny_cluster_codes();
        // Per size: 64×16 and 64×32 (16 and 4 stages), 64×64 along N and along M and 128×64
        // along M (8 and 4 stages).
        assert_eq!(codes.len(), 3 * 10, "{codes:?}");
        let c = HopperConfig { cluster_n: 8, ..HopperConfig::new(64, 16, 16, 1) };
        assert!(codes.contains(&c));
        assert_eq!(c.entry(Acc::F32, Layout::Tn), "kaas_wgmma_f32_tn_64x16x64_s16_c1_m1_g16_n8");
        assert!(c.defines(Acc::F32, Layout::Tn).contains(&("KAAS_CLUSTER_N".to_string(), "8".to_string())));
        assert_eq!(c.label(), "64x16 s16 c1 n8");
        // 64×1000: 63 tile columns round up to 64, 8 clusters of 8; each CTA loads 8 rows of A.
        let prob = p(Layout::Tn, 64, 1000, 520);
        assert_eq!(c.tiles(&prob), 64);
        let man = c.manifest(&prob, 132);
        man.validate().unwrap();
        let l = &man.launches[0];
        assert_eq!((l.grid, l.cluster), ([64, 1, 1], [8, 1, 1]));
        let (Param::TensorMap(a), Param::TensorMap(b)) = (&l.params[0], &l.params[1]) else { panic!("tensor maps") };
        assert_eq!((a.box_dims, b.box_dims), ([64, 8], [64, 16]));
        assert_eq!(HopperConfig::of_launch(l, &prob), Some((c, Acc::F32, Layout::Tn)));
        // Along M: 128×64 in clusters of 4 loads 16 rows of each B tile (nn: 16 K-rows).
        let m4 = HopperConfig { cluster_m: 4, ..HopperConfig::new(128, 64, 8, 2) };
        assert!(codes.contains(&m4));
        for layout in Layout::ALL {
            let prob = p(layout, 1000, 64, 4096);
            let l = &m4.manifest(&prob, 132).launches[0];
            let Param::TensorMap(b) = &l.params[1] else { panic!("B") };
            assert_eq!((l.grid, l.cluster, b.box_dims), ([8, 1, 1], [4, 1, 1], [64, 16]), "{layout}: B's box is 64 by 16 in either layout");
            assert_eq!(HopperConfig::of_launch(l, &prob), Some((m4, Acc::F32, layout)));
        }
        // Offered where 64×64 tiles make under two waves and the cluster's side has the tiles.
        let offered = |prob: &Problem| space_for(prob, 132).into_iter().filter(|c| c.cluster_size() > 1).collect::<Vec<_>>();
        let wide = offered(&p(Layout::Tn, 64, 4096, 1024));
        assert!(wide.contains(&HopperConfig { l2_256: true, ..c }) && wide.iter().all(|c| c.cluster_m == 1), "M = 64 has one tile row: {wide:?}");
        let tall = offered(&p(Layout::Nn, 4096, 64, 1024));
        // N = 64: one tile column of 64, so clusters along N only of nn's narrow tiles.
        assert!(tall.contains(&m4) && tall.iter().all(|c| (c.cluster_n == 1 && c.bn == 64) || c.bn < 64), "{tall:?}");
        assert!(tall.iter().any(|c| c.cluster_n > 1), "{tall:?}");
        assert!(offered(&p(Layout::Tn, 2048, 2048, 512)).is_empty(), "not skinny");
        let nn = offered(&p(Layout::Nn, 64, 4096, 1024));
        assert!(nn.iter().all(|c| [16, 32, 64].contains(&c.bn)) && nn.iter().any(|c| c.bn < 64), "nn: 64-column B boxes, or one of a narrow tile's width: {nn:?}");
        for bad in [
            HopperConfig { cluster_n: 3, ..c },
            HopperConfig { cluster_m: 2, ..c },
            HopperConfig { cluster_n: 16, ..c },
            HopperConfig { cluster_m: 4, cluster_n: 1, ..HopperConfig::new(64, 16, 4, 1) },
            HopperConfig { split: 4, reduction: Reduction::Cluster, ..c },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert!(HopperConfig { cluster_m: 2, cluster_n: 4, ..HopperConfig::new(64, 16, 4, 1) }.validate().is_ok());
        assert!(HopperConfig::from_entry("kaas_wgmma_f32_tn_64x16x64_s16_c1_m1_g16_n1").is_none());
        assert!(HopperConfig::from_entry("kaas_wgmma_f32_tn_64x16x64_s16_c1_m1_g16_n3").is_none());
    }

    #[test]
    fn k_split_codes_own_whole_tiles_with_even_rings_and_stay_out_of_the_search() {
        let p = |m, n, k| Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).unwrap());
        let codes = ksplit_codes();
        // 64×16 and 64×32: 16 and 4 stages; 64×64: 8 and 4; 64×128: 6 (8 and 7 exceed shared
        // memory with the 32 KiB partial, 7 is odd) and 4; each on both grids.
        let rings: Vec<(u32, u32)> = codes.iter().filter(|c| !c.persistent).map(|c| (c.bn, c.stages)).collect();
        assert_eq!(rings, [(16, 16), (16, 4), (32, 16), (32, 4), (64, 8), (64, 4), (128, 6), (128, 4)], "{codes:?}");
        assert!(space_for(&p(64, 512, 1024), 132).iter().all(|c| c.consumer_mode != ConsumerMode::KSplit), "seldom best: --trial ksplit only");
        let c = HopperConfig { consumer_mode: ConsumerMode::KSplit, ..HopperConfig::new(64, 64, 8, 2) };
        c.validate().unwrap();
        assert_eq!(c.entry(Acc::F32, Layout::Nn), "kaas_wgmma_f32_nn_64x64x64_s8_c2_m1_g16_kw");
        assert_eq!(c.label(), "64x64 s8 c2 k-split");
        assert!(c.defines(Acc::F32, Layout::Tn).contains(&("KAAS_KSPLIT".to_string(), "1".to_string())));
        // The ring, the staging of two consumers, 1 KiB of alignment, and the 16 KiB partial.
        assert_eq!(c.shared_mem_bytes(), 8 * 128 * 128 + 1024 + 2 * 9216 + 64 * 64 * 4);
        let prob = p(64, 512, 1024);
        let man = c.manifest(&prob, 132);
        man.validate().unwrap();
        assert_eq!((man.launches[0].grid, man.launches[0].block), ([8, 1, 1], [384, 1, 1]));
        assert_eq!(HopperConfig::of_launch(&man.launches[0], &prob), Some((c, Acc::F32, Layout::Tn)));
        assert_ne!(c.code_key(), HopperConfig { consumer_mode: ConsumerMode::Cooperative, ..c }.code_key());
        for bad in [
            HopperConfig { stages: 7, ..c },
            HopperConfig { consumers: 1, ..c },
            HopperConfig { bm: 128, consumers: 1, ..c },
            HopperConfig { split: 4, reduction: Reduction::Atomic, ..c },
            HopperConfig { cluster_n: 2, split: 4, reduction: Reduction::Atomic, ..c },
            HopperConfig { bn: 256, stages: 4, ..c },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        // 128 rows: both consumers hold all 128 × 64 accumulators.
        assert!(HopperConfig { bm: 128, stages: 4, ..c }.validate().is_ok());
        if nvrtc::available().is_ok() {
            let e = compile(&c, Acc::F16, Layout::Tn).expect_err("f16");
            assert!(e.to_string().contains("acc=f32 only"), "{e}");
        }
    }

    #[test]
    fn the_l2_256_twin_is_the_same_code_with_wider_l2_promotion() {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(2048, 8192, 128).unwrap());
        for c in [HopperConfig::new(128, 128, 6, 2), HopperConfig { persistent: true, ..HopperConfig::new(128, 256, 4, 2) }, HopperConfig { split: 4, reduction: Reduction::Atomic, ..HopperConfig::new(64, 64, 8, 1) }] {
            let twin = HopperConfig { l2_256: true, ..c };
            assert_eq!((twin.entry(Acc::F32, Layout::Tn), twin.code_key()), (c.entry(Acc::F32, Layout::Tn), c.code_key()));
            assert_ne!(twin.label(), c.label());
            let (plain, wide) = (c.manifest(&p, 132), twin.manifest(&p, 132));
            let promotions = |m: &Manifest| m.launches[0].params.iter().filter_map(|q| if let Param::TensorMap(t) = q { Some(t.l2_promotion) } else { None }).collect::<Vec<_>>();
            assert_eq!(promotions(&plain), [L2Promotion::B128; 2]);
            assert_eq!(promotions(&wide), [L2Promotion::B256; 2]);
            wide.validate().unwrap();
            assert_eq!(HopperConfig::of_launch(&wide.launches[0], &p), Some((twin, Acc::F32, Layout::Tn)));
            assert_eq!(HopperConfig::of_launch(&plain.launches[0], &p), Some((c, Acc::F32, Layout::Tn)));
        }
        // The search takes 256 bytes on tn with K of 512 and more only.
        let wide = |layout, k| space_for(&Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(2048, 2048, k).unwrap()), 132);
        assert!(wide(Layout::Tn, 512).iter().all(|c| c.l2_256) && wide(Layout::Tn, 16384).iter().all(|c| c.l2_256));
        assert!(wide(Layout::Tn, 256).iter().all(|c| !c.l2_256) && wide(Layout::Nn, 4096).iter().all(|c| !c.l2_256));
        let big = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(12288, 12288, 12288).unwrap());
        assert!(space_for(&big, 132).iter().all(|c| !c.l2_256), "2^41.7 FLOP");
        assert!(wide_l2_suits(&Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(8192, 8192, 8192).unwrap())), "2^40 FLOP");
    }

    #[test]
    fn two_accumulator_chains_are_searched_on_the_skinny_f32_shapes_only() {
        let codes = chains_codes();
        // 64 × 16, 24, 32, 48 (16 and 4 stages) and 64 × 64 (8 and 4), two and four chains.
        assert_eq!(codes.len(), 5 * 2 * 2, "{codes:?}");
        assert!(codes.iter().all(|c| c.validate().is_ok() && c.chains > 1));
        assert_eq!(skinny_chains_codes().len(), 10);
        let p = |acc, layout, m, n, k| Problem::new(Arch::Sm90, acc, layout, Shape::new(m, n, k).unwrap());
        // 64×512×1024 tn: every two-chain code (the narrow ones are tn's), none of four, and
        // the split ones where split-K suits the shape.
        let skinny = space_for(&p(Acc::F32, Layout::Tn, 64, 512, 1024), 132);
        for c in skinny_chains_codes() {
            assert!(skinny.contains(&HopperConfig { l2_256: true, ..c }), "{}: tn, K ≥ 512", c.label());
        }
        assert!(skinny.iter().all(|c| c.chains <= 2));
        let long = space_for(&p(Acc::F32, Layout::Nn, 128, 256, 12288), 132);
        assert!(long.iter().any(|c| c.chains == 2 && c.split > 1 && c.bn == 64), "split with two chains");
        assert!(long.iter().filter(|c| c.chains == 2).all(|c| c.supports(Layout::Nn)));
        // Not where 64×64 tiles fill two waves, and not with the f16 accumulator.
        assert!(space_for(&p(Acc::F32, Layout::Tn, 4096, 4096, 4096), 132).iter().all(|c| c.chains == 1));
        assert!(space_for(&p(Acc::F16, Layout::Tn, 64, 512, 1024), 132).iter().all(|c| c.chains == 1));
        let c = HopperConfig { chains: 4, ..HopperConfig::new(64, 16, 16, 1) };
        assert_eq!(c.entry(Acc::F32, Layout::Tn), "kaas_wgmma_f32_tn_64x16x64_s16_c1_m1_g16_x4");
        assert_eq!(c.label(), "64x16 s16 c1 x4");
        assert!(c.defines(Acc::F32, Layout::Tn).contains(&("KAAS_CHAINS".to_string(), "4".to_string())));
        assert_eq!(c.shared_mem_bytes(), HopperConfig { chains: 1, ..c }.shared_mem_bytes(), "registers only");
        let both = HopperConfig { chains: 2, cluster_n: 4, split: 1, ..c };
        assert_eq!(HopperConfig::from_entry(&both.entry(Acc::F32, Layout::Tn)), Some((both, Acc::F32, Layout::Tn)));
        assert_eq!(both.entry(Acc::F32, Layout::Tn), "kaas_wgmma_f32_tn_64x16x64_s16_c1_m1_g16_n4_x2");
        let split = HopperConfig { chains: 2, split: 2, reduction: Reduction::Atomic, ..HopperConfig::new(64, 64, 8, 1) };
        assert_eq!(HopperConfig::from_entry(&split.entry(Acc::F32, Layout::Nn)), Some((split, Acc::F32, Layout::Nn)));
        // 64×64 holds 32 accumulators per chain: four chains are 128, the one-consumer budget.
        assert!(HopperConfig { chains: 4, ..HopperConfig::new(64, 64, 8, 1) }.validate().is_ok());
        assert!(HopperConfig { chains: 4, ..HopperConfig::new(64, 128, 8, 1) }.validate().is_err());
        assert!(HopperConfig { chains: 3, ..c }.validate().is_err());
        assert!(HopperConfig::from_entry("kaas_wgmma_f32_tn_64x16x64_s16_c1_m1_g16_x1").is_none());
        if nvrtc::available().is_ok() {
            let e = compile(&c, Acc::F16, Layout::Tn).expect_err("f16");
            assert!(e.to_string().contains("acc=f32 only"), "{e}");
        }
    }

    /// The 2-D grid (`_2d`): named last, defined, launched on [tile columns, tile rows],
    /// parsed back from its launch (and only from that grid), refused where a CTA takes
    /// more than one tile or a cluster; the latency twins take it where the code can.
    #[test]
    fn the_2d_grid_names_defines_and_launches_one_tile_per_cta() {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Nn, Shape::new(1000, 200, 512).unwrap());
        let c = latency_twins(&searched_modes(HopperConfig::new(64, 32, 4, 1)))[0];
        assert!(c.grid == TileGrid::TwoD && c.early_coords && c.desc == DescMode::Stepped);
        assert_eq!(c.entry(Acc::F32, Layout::Nn), "kaas_wgmma_f32_nn_64x32x64_s4_c1_m1_g16_dr_ec_2d");
        assert!(c.defines(Acc::F32, Layout::Nn).contains(&("KAAS_GRID2D".to_string(), "1".to_string())));
        assert_eq!(c.label(), "64x32 s4 c1 dr ec 2d");
        let man = c.manifest(&p, 132);
        man.validate().unwrap();
        assert_eq!(man.launches[0].grid, [7, 16, 1], "200 / 32 columns, 1000 / 64 rows");
        assert_eq!(HopperConfig::of_launch(&man.launches[0], &p), Some((c, Acc::F32, Layout::Nn)));
        let mut flat = man.launches[0].clone();
        flat.grid = [7 * 16, 1, 1];
        assert_eq!(HopperConfig::of_launch(&flat, &p), None, "a 1-D grid is not this code's");
        for bad in [
            HopperConfig { persistent: true, ..c },
            HopperConfig { split: 4, reduction: Reduction::Atomic, ..c },
            HopperConfig { cluster_n: 2, ..c },
            HopperConfig { consumer_mode: ConsumerMode::PingPong, consumers: 2, bm: 128, bn: 128, stages: 4, ..c },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
            let plain = HopperConfig { grid: TileGrid::Linear, ..bad };
            assert_eq!(latency_twins(&plain), vec![HopperConfig { early_coords: true, ..plain }].into_iter().filter(|t| *t != plain).collect::<Vec<_>>(), "{bad:?}");
        }
        assert_eq!(HopperConfig::from_entry("kaas_wgmma_f32_tn_64x64x64_s4_c1_m1_g16_dr_ec_2d").map(|(c, _, _)| c.grid == TileGrid::TwoD), Some(true));
        assert!(HopperConfig::from_entry("kaas_wgmma_f32_tn_64x64x64_s4_c1_m1_g16_dr_2d_ec").is_none());
        assert!(HopperConfig::from_entry("kaas_wgmma_f32_tn_64x64x64_s4_c1_m1_g16_ska_dr_ec_2d").is_none(), "split-K takes no 2-D grid");
    }

    /// The grouped grid (`_2g`): named last, defined as KAAS_GRID2D=2, launched on
    /// [min(16, tile rows), tile columns, groups] (a last group of fewer rows keeps 16 CTAs
    /// along x: those past M return), parsed back from that grid only; never with `_2d`.
    #[test]
    fn the_grouped_grid_names_defines_and_launches_one_tile_per_cta() {
        let plain = searched_modes(HopperConfig::new(64, 128, 4, 1));
        let [d, g] = latency_twins(&plain)[..] else { panic!("two twins: {:?}", latency_twins(&plain)) };
        assert!(d.grid == TileGrid::TwoD && d.grid != TileGrid::Grouped && g.grid == TileGrid::Grouped && g.grid != TileGrid::TwoD && g.early_coords);
        assert_eq!(latency_twins(&d), vec![g], "a `_2d` entry's twin is its `_2g` code");
        assert_eq!(latency_twins(&g), vec![d]);
        assert_eq!(g.entry(Acc::F32, Layout::Tn), "kaas_wgmma_f32_tn_64x128x64_s4_c1_m1_g16_dr_ec_2g");
        assert!(g.defines(Acc::F32, Layout::Tn).contains(&("KAAS_GRID2D".to_string(), "2".to_string())));
        assert_eq!(g.label(), "64x128 s4 c1 dr ec 2g");
        for (m, n, grid) in [(1100, 1000, [16, 8, 2]), (256, 4096, [4, 32, 1]), (2048, 512, [16, 4, 2]), (64, 64, [1, 1, 1])] {
            let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, 512).unwrap());
            let man = g.manifest(&p, 132);
            man.validate().unwrap();
            assert_eq!(man.launches[0].grid, grid, "{m}x{n}");
            assert_eq!(HopperConfig::of_launch(&man.launches[0], &p), Some((g, Acc::F32, Layout::Tn)));
            let mut other = man.launches[0].clone();
            other.grid = d.launch_grid(&p, 132);
            if other.grid != grid {
                assert_eq!(HopperConfig::of_launch(&other, &p), None, "{m}x{n}: the 2-D grid is not this code's");
            }
        }
        assert!(HopperConfig { persistent: true, ..g }.validate().is_err());
        assert_eq!(HopperConfig::from_entry("kaas_wgmma_f32_tn_64x128x64_s4_c1_m1_g16_dr_ec_2g"), Some((g, Acc::F32, Layout::Tn)));
        assert!(HopperConfig::from_entry("kaas_wgmma_f32_tn_64x128x64_s4_c1_m1_g16_dr_ec_2g_2d").is_none());
        assert!(HopperConfig::from_entry("kaas_wgmma_f32_tn_64x128x64_s4_c1_m1_g16_pp_dr_ec_2g").is_none(), "ping-pong takes no grouped grid");
        if let Err(why) = nvrtc::available() {
            eprintln!("SKIP the compile: no NVRTC ({why})");
            return;
        }
        for layout in Layout::ALL {
            let ptx = compile(&g, Acc::F32, layout).unwrap();
            assert!(ptx.contains(&format!(".entry {}(", g.entry(Acc::F32, layout))), "{layout:?}");
            assert!(ptx.contains("%ctaid.z"), "{layout:?}: the tile row comes from the grid's z");
            assert_ne!(ptx.replace("_2g(", "("), compile(&d, Acc::F32, layout).unwrap().replace("_2d(", "("), "{layout:?}");
        }
    }

    #[test]
    fn swap_ab_codes_exchange_the_operands_and_count_tiles_along_the_weight() {
        let p = |m, n, k| Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).unwrap());
        let codes = swap_codes();
        assert!(codes.len() > 100 && codes.iter().all(|c| c.swap && c.validate().is_ok()), "{}", codes.len());
        for c in &codes {
            // Named `_sw` and parsed back, on both layouts.
            for layout in Layout::ALL {
                let entry = c.entry(Acc::F32, layout);
                assert!(entry.ends_with("_sw") && c.supports(layout), "{entry}");
                let back = HopperConfig::from_entry(&entry).map(|(b, acc, l)| (b.code_key(), acc, l));
                assert_eq!(back, Some((c.code_key(), Acc::F32, layout)), "{entry}");
                assert!(c.defines(Acc::F32, layout).contains(&("KAAS_SWAP_AB".to_string(), "1".to_string())));
            }
        }
        // 32 tokens against a 35840×5120 weight: 32-token tiles of 128 weight rows, 280 of
        // them along N; the kernel's A is the weight (B), its M the problem's N.
        let decode = p(32, 35840, 5120);
        let space = swap_space(&decode, 132);
        assert!(!space.is_empty() && space.iter().all(|c| c.bn == 32 && c.validate().is_ok()), "{space:?}");
        let c = space.iter().find(|c| c.bm == 128 && c.split == 1 && c.cluster_size() == 1 && !c.persistent).unwrap();
        assert_eq!(c.tiles(&decode), 280);
        let m = c.manifest(&decode, 132);
        m.validate().unwrap();
        let l = &m.launches[0];
        assert_eq!(l.grid, [280, 1, 1]);
        assert!(matches!(l.params[0], Param::TensorMap(TensorMapSpec { operand: Operand::B, box_dims: [64, 128], .. })));
        assert!(matches!(l.params[1], Param::TensorMap(TensorMapSpec { operand: Operand::A, box_dims: [64, 32], .. })));
        assert_eq!(l.params[3..6], [Param::I32(I32Value::Dim(Dim::N)), Param::I32(I32Value::Dim(Dim::M)), Param::I32(I32Value::Dim(Dim::K))]);
        // No staging: C is stored transposed from registers.
        assert_eq!(l.shared_mem_bytes, c.stages * (128 + 32) * 64 * 2 + 1024);
        assert_eq!(HopperConfig::of_launch(l, &decode).map(|(o, _, _)| o), Some(*c));
        // Few tiles along the weight: split-K fills the SMs (down projection, 5120 rows).
        let down = p(32, 5120, 17920);
        assert!(swap_space(&down, 132).iter().any(|c| c.split > 2 && c.tiles(&down) * c.split <= 264));
        // 256 tokens take tiles of 256 and of 128 tokens; 257 and nn none; fp16 no split.
        let widths: std::collections::BTreeSet<u32> = swap_space(&p(256, 4096, 4096), 132).iter().map(|c| c.bn).collect();
        assert_eq!(widths.into_iter().collect::<Vec<_>>(), [128, 256]);
        assert!(swap_space(&p(257, 4096, 4096), 132).is_empty());
        // nn: the same codes; the weight (K×N row-major) in boxes of 64 of its N by the
        // slot's K, the tokens K-major as on tn; in the search up to 48 tokens as on tn
        // (their GPU test, `swap_ab_nn_tiles_pass_the_verifier`, passed on an H200).
        let nn = Problem::new(Arch::Sm90, Acc::F32, Layout::Nn, Shape::new(32, 35840, 5120).unwrap());
        let nn_space = swap_space(&nn, 132);
        assert_eq!(nn_space, space, "nn takes tn's swap-AB codes");
        let l = &c.manifest(&nn, 132).launches[0];
        assert!(l.entry.starts_with("kaas_wgmma_f32_nn_") && l.entry.ends_with("_sw"), "{}", l.entry);
        assert!(matches!(l.params[0], Param::TensorMap(TensorMapSpec { operand: Operand::B, box_dims: [64, 64], .. })));
        assert!(matches!(l.params[1], Param::TensorMap(TensorMapSpec { operand: Operand::A, box_dims: [64, 32], .. })));
        assert_eq!(HopperConfig::of_launch(l, &nn).map(|(o, _, _)| o), Some(*c));
        assert!(space_for(&nn, 132).iter().any(|c| c.swap));
        assert!(!space_for(&Problem { m: 64, ..nn }, 132).iter().any(|c| c.swap));
        let f16 = Problem::new(Arch::Sm90, Acc::F16, Layout::Tn, Shape::new(32, 5120, 17920).unwrap());
        assert!(swap_space(&f16, 132).iter().all(|c| c.split == 1 && c.chains == 1));
        // The TMA store does not build with it.
        assert!(HopperConfig { epilogue: Epilogue::TmaStore, ..*c }.validate().is_err() && tma_store_twin(c).is_none());
        // 256 weight rows with two consumers at every width up to 128 tokens (256 would hold
        // 256 accumulators a thread), in each of the kinds the GPU suite runs
        // (`swap_ab_256_row_tiles_pass_the_verifier`).
        for bn in SWAP_BN {
            let wide: Vec<&HopperConfig> = codes.iter().filter(|c| c.bm == 256 && c.bn == bn).collect();
            assert!(wide.iter().all(|c| c.consumers == 2), "256-row codes {bn} tokens wide have two consumers");
            // The pair shares whole 8-row slices of the tokens: half the width a multiple of 8.
            let fits = bn <= 128;
            assert_eq!(swap_kinds(&wide), [fits, fits, fits, fits, fits && bn % 16 == 0], "256-row codes {bn} tokens wide");
        }
    }

    /// Which of the kinds the GPU suite runs on a swap-AB tile (`swap_ab_*_row_tiles_pass_
    /// the_verifier`) `wide` holds: unsplit, the atomic split, stream-K, hybrid stream-K,
    /// the multicast pair.
    fn swap_kinds(wide: &[&HopperConfig]) -> [bool; 5] {
        [
            wide.iter().any(|c| c.split == 1 && c.cluster_size() == 1 && c.chains == 1),
            wide.iter().any(|c| c.reduction == Reduction::Atomic),
            wide.iter().any(|c| c.reduction == Reduction::StreamK),
            wide.iter().any(|c| c.reduction == Reduction::StreamKHybrid),
            wide.iter().any(|c| c.cluster_m == 2),
        ]
    }

    /// Swap-AB's 384-row weight tiles: three consumer warpgroups of 128 rows (512 threads),
    /// the weight loaded as three 128-row TMA boxes a slot, at every token width whose 64
    /// accumulators a thread fit the consumers' 160 registers; the kinds the GPU suite runs
    /// (`swap_ab_384_row_tiles_pass_the_verifier`), and the names, manifests and arithmetic.
    #[test]
    fn swap_ab_384_row_tiles_have_three_consumers_and_three_weight_boxes() {
        let p = |m, n, k| Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).unwrap());
        let codes: Vec<HopperConfig> = swap_codes().into_iter().filter(|c| c.bm == 384).collect();
        for bn in SWAP_BN {
            let wide: Vec<&HopperConfig> = codes.iter().filter(|c| c.bn == bn).collect();
            // 128 rows by 64 tokens are 64 fp32 accumulators a thread; 128 tokens would be 128.
            let fits = bn <= 64;
            assert_eq!(swap_kinds(&wide), [fits, fits, fits, fits, fits && bn % 16 == 0], "384-row codes {bn} tokens wide");
            for c in wide {
                c.validate().unwrap();
                assert_eq!((c.consumers, c.threads(), c.stages, c.chains, c.cluster_n), (3, 512, 4, 1, 1), "{}", c.label());
                // Four slots of the weight's 384 rows and the tokens, 1 KiB of alignment, no
                // staging (C is stored transposed from registers); five do not fit.
                assert_eq!(c.shared_mem_bytes(), 4 * (384 + bn) * 64 * 2 + 1024, "{}", c.label());
                assert!(c.shared_mem_bytes() + c.static_smem_bytes() <= SMEM_LIMIT);
                assert!(HopperConfig { stages: 5, ..*c }.validate().unwrap_err().contains("shared memory"), "{}", c.label());
            }
        }
        assert_eq!(HopperConfig { swap: true, ..HopperConfig::new(384, 32, 4, 3) }.shared_mem_bytes(), 214_016);
        assert_eq!(HopperConfig { swap: true, ..HopperConfig::new(384, 64, 4, 3) }.shared_mem_bytes(), 230_400);
        // Registers: the producer's warpgroup at 24 and three consumers at 160 fill 64,512 of
        // the SM's 65,536 registers (168, the next multiple of 8, would not fit); 64
        // accumulators a consumer thread, where two consumers at 240 hold 160.
        for consumers in [2, 3] {
            let c = HopperConfig::new(128 * consumers, 32, 4, consumers);
            let (producer, consumer) = c.setmaxnreg().unwrap();
            assert!(producer.is_multiple_of(8) && consumer.is_multiple_of(8) && producer >= 24);
            assert_eq!(128 * producer + 128 * consumers * consumer, 64_512, "{consumers} consumers");
            assert!(128 * producer + 128 * consumers * (consumer + 8) > 65_536, "{consumers} consumers");
        }
        assert_eq!(HopperConfig::new(64, 32, 4, 1).setmaxnreg(), None);
        assert_eq!([1, 2, 3].map(HopperConfig::accumulator_budget), [128, 160, 64]);
        let c = HopperConfig { swap: true, ..HopperConfig::new(384, 32, 4, 3) };
        assert!(codes.contains(&c), "{codes:?}");
        // The search offers them beside the one- and two-consumer swap tiles (their GPU
        // test, `swap_ab_384_row_tiles_pass_the_verifier`, passed on an H200).
        let decode = p(32, 35840, 5120);
        assert!(space_for(&decode, 132).iter().any(|c| c.bm == 384 && c.consumers == 3 && c.split == 1));
        assert!(space_for(&decode, 132).iter().any(|c| c.swap && c.consumers == 1));
        assert!(HopperConfig { bn: 128, stages: 3, ..c }.validate().unwrap_err().contains("128 accumulators"));
        // Three consumers are swap-AB's 384-row tiles only: cooperative, no cluster along N
        // (A's 384 rows are three boxes; a pair along N would share 192), not the cluster
        // reduction; two consumers cannot hold 384 rows, nor three 256.
        for bad in [
            HopperConfig { swap: false, ..c },
            HopperConfig { bm: 192, ..c },
            HopperConfig { bm: 256, ..c },
            HopperConfig { cluster_n: 2, ..c },
            HopperConfig { consumer_mode: ConsumerMode::ColSplit, ..c },
            HopperConfig { consumer_mode: ConsumerMode::PingPong, persistent: true, ..c },
            c.split_by(4, Reduction::Cluster),
            HopperConfig { consumers: 2, ..c },
            HopperConfig { consumers: 4, bm: 512, ..c },
            HopperConfig { epilogue: Epilogue::TmaStore, ..c },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        // Split-K, stream-K and the pair along the weight's rows run with three consumers.
        for ok in [c.split_by(3, Reduction::Atomic), c.split_by(132, Reduction::StreamK), c.split_by(132, Reduction::StreamKHybrid), HopperConfig { cluster_m: 2, ..c }, HopperConfig { persistent: true, ..c }] {
            ok.validate().unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
        // The name, label, serialized form and key.
        let entry = c.entry(Acc::F32, Layout::Tn);
        assert_eq!(entry, "kaas_wgmma_f32_tn_384x32x64_s4_c3_m1_g16_sw");
        assert_eq!(HopperConfig::from_entry(&entry), Some((c, Acc::F32, Layout::Tn)));
        assert!(HopperConfig::from_entry("kaas_wgmma_f32_tn_384x32x64_s4_c3_m1_g16").is_none(), "not without swap-AB");
        assert!(HopperConfig::from_entry("kaas_wgmma_f32_tn_384x128x64_s3_c3_m1_g16_sw").is_none(), "128 accumulators");
        assert_eq!(c.label(), "384x32 s4 c3 swap-AB");
        let searched = searched_modes(c);
        let json = r#"{"code":"384x32x64_s4_c3_m1_g16_dr_ec_sw"}"#;
        assert_eq!(serde_json::to_string(&searched).unwrap(), json);
        assert_eq!(serde_json::from_str::<HopperConfig>(json).unwrap(), searched);
        assert!(c.defines(Acc::F32, Layout::Tn).contains(&("KAAS_CONSUMERS".to_string(), "3".to_string())));
        let keys: std::collections::BTreeSet<HopperKey> = codes.iter().map(|c| c.code_key()).collect();
        assert_eq!(keys.len(), codes.len(), "a code twice");
        // 32 tokens by a 35840-row weight: 94 tiles of 384 rows, one wave (cuBLASLt's pick is
        // this tile). The weight's tensor map has 128-row boxes, three a slot; the tokens' one
        // box of 32 rows; 512 threads.
        let m = c.manifest(&decode, 132);
        m.validate().unwrap();
        let l = &m.launches[0];
        assert_eq!((l.grid, l.block, l.cluster, l.shared_mem_bytes), ([94, 1, 1], [512, 1, 1], [1, 1, 1], 214_016));
        assert_eq!(c.a_box_rows(), 128);
        assert!(matches!(l.params[0], Param::TensorMap(TensorMapSpec { operand: Operand::B, box_dims: [64, 128], swizzle: Swizzle::B128, .. })), "{:?}", l.params[0]);
        assert!(matches!(l.params[1], Param::TensorMap(TensorMapSpec { operand: Operand::A, box_dims: [64, 32], swizzle: Swizzle::B128, .. })), "{:?}", l.params[1]);
        assert_eq!(l.params[3..6], [Param::I32(I32Value::Dim(Dim::N)), Param::I32(I32Value::Dim(Dim::M)), Param::I32(I32Value::Dim(Dim::K))]);
        assert_eq!(HopperConfig::of_launch(l, &decode), Some((c, Acc::F32, Layout::Tn)));
        // One box holds the tiles of 256 rows and fewer, as before.
        assert_eq!(HopperConfig { swap: true, ..HopperConfig::new(256, 32, 6, 2) }.a_box_rows(), 256);
        assert_eq!(HopperConfig { cluster_n: 2, ..HopperConfig::new(256, 128, 4, 2) }.a_box_rows(), 128);
        // The pair along the weight's rows: each CTA loads half the tokens and multicasts
        // them, and its own three weight boxes; the grid is whole pairs (94 tiles, 47 pairs).
        let pair = HopperConfig { cluster_m: 2, ..c };
        let l = &pair.manifest(&decode, 132).launches[0];
        assert_eq!((l.grid, l.cluster), ([94, 1, 1], [2, 1, 1]));
        assert!(matches!(l.params[0], Param::TensorMap(TensorMapSpec { box_dims: [64, 128], .. })) && matches!(l.params[1], Param::TensorMap(TensorMapSpec { box_dims: [64, 16], .. })));
        assert_eq!(HopperConfig::of_launch(l, &decode), Some((pair, Acc::F32, Layout::Tn)));
        // Atomic split-K: one fp32 sum of 384 × 32 per tile.
        let split = HopperConfig::new(384, 32, 4, 3).split_by(3, Reduction::Atomic);
        let split = HopperConfig { swap: true, ..split };
        let down = p(32, 5120, 17920);
        assert_eq!(split.tiles(&down), 14);
        assert_eq!(split.workspace_bytes(&down), 256 + 4 * 14 * 384 * 32);
        // The trial offers them up to 64 tokens (the 48-token tile at 45; from 64 tokens on,
        // the tile half as wide too); 128 tokens and more have none. The search stops at 48.
        for (m, widths) in [(1, vec![8]), (16, vec![16]), (32, vec![32]), (45, vec![48]), (64, vec![32, 64]), (128, vec![64]), (256, vec![])] {
            let got: std::collections::BTreeSet<u32> = swap_space(&p(m, 35840, 5120), 132).iter().filter(|c| c.bm == 384).map(|c| c.bn).collect();
            assert_eq!(got.into_iter().collect::<Vec<u32>>(), widths, "{m} tokens");
        }
        assert!(!space_for(&p(64, 35840, 5120), 132).iter().any(|c| c.swap), "the search stops at 48 tokens");
    }

    #[test]
    fn entry_names_round_trip() {
        for c in space().into_iter().chain(skinny_cluster_codes()).chain(ksplit_codes()).chain(chains_codes()).chain(chains_split_tiles()) {
            for layout in Layout::ALL.into_iter().filter(|&l| c.supports(l)) {
                let (back, acc, l) = HopperConfig::from_entry(&c.entry(Acc::F32, layout)).unwrap();
                assert_eq!((back, acc, l), (HopperConfig { persistent: false, ..c }, Acc::F32, layout));
            }
        }
        assert_eq!(split_tiles().len(), 18);
        for c in split_tiles() {
            let layout = if c.supports(Layout::Nn) { Layout::Nn } else { Layout::Tn };
            let entry = c.entry(Acc::F32, layout);
            assert!(entry.ends_with(if c.reduction.is_atomic() { "_g16_ska" } else { "_g16_sk" }), "{entry}");
            assert_eq!(HopperConfig::from_entry(&entry), Some((c, Acc::F32, layout)));
        }
        for c in cluster_tiles() {
            let entry = c.entry(Acc::F32, Layout::Tn);
            assert!(entry.ends_with("_g16_skc"), "{entry}");
            assert_eq!(HopperConfig::from_entry(&entry), Some((c, Acc::F32, Layout::Tn)));
        }
        assert!(HopperConfig::from_entry("kaas_wgmma_f32_tn_64x64x64_s8_c1_m1_g16_sk_sk").is_none());
        assert!(HopperConfig::from_entry("kaas_wgmma_f32_tn_64x64x64_s8_c1_m1_g16_ska_skc").is_none());
        assert!(HopperConfig::from_entry("kaas_wgmma_f32_tn_96x64x64_s4_c1_m1_g16").is_none());
        assert!(HopperConfig::from_entry("kaas_simple_hgemm_f32_tn_128x128x32_w2x4").is_none());
        // The search's modes name themselves last: `_dr_ec`, and parse back.
        for c in space().into_iter().chain(split_tiles()).map(searched_modes) {
            let entry = c.entry(Acc::F32, Layout::Tn);
            assert!(entry.ends_with("_dr_ec") && c.label().ends_with(" dr ec"), "{entry}");
            assert_eq!(HopperConfig::from_entry(&entry), Some((HopperConfig { persistent: false, ..c }, Acc::F32, Layout::Tn)));
        }
        assert!(HopperConfig::from_entry("kaas_wgmma_f32_tn_64x64x64_s8_c1_m1_g16_ec_dr").is_none());
    }

    /// `_ec` codes build with the entry they name and differ from their plain twins' PTX (the
    /// tile's origin is computed before the K loop), one code of each search tile per layout.
    #[test]
    fn early_coords_codes_compile_where_nvrtc_is_present() {
        if let Err(why) = nvrtc::available() {
            eprintln!("SKIP: no NVRTC ({why})");
            return;
        }
        let mut seen = std::collections::BTreeSet::new();
        for c in space().into_iter().chain(split_tiles()).filter(|c| seen.insert((c.bm, c.bn, c.consumers, c.consumer_mode == ConsumerMode::PingPong, c.split))) {
            let ec = searched_modes(c);
            let plain = HopperConfig { early_coords: false, ..ec };
            for layout in Layout::ALL.into_iter().filter(|&l| c.supports(l)) {
                let ptx = compile(&ec, Acc::F32, layout).unwrap_or_else(|e| panic!("{}: {e}", ec.label()));
                assert!(ptx.contains(&format!(".entry {}(", ec.entry(Acc::F32, layout))), "{}", ec.label());
                let other = compile(&plain, Acc::F32, layout).unwrap();
                assert_ne!(ptx.replace("_ec(", "("), other, "{}: `_ec` changed nothing but the name", ec.label());
            }
        }
        assert!(seen.len() > 10, "{}", seen.len());
    }

    /// The launch interface a PTX module declares for its entry: the `.entry` line with its
    /// parameters and the launch directives up to the body, and the static shared memory
    /// the module declares (alignment, type and size of each variable, names left out).
    fn launch_interface(ptx: &str) -> (String, Vec<String>) {
        let start = ptx.find(".visible .entry").expect("an entry");
        let end = start + ptx[start..].find("\n{").expect("the entry's body");
        let mut shared: Vec<String> = ptx
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with(".shared") || l.starts_with(".extern .shared"))
            .map(|l| {
                let mut words: Vec<&str> = l.trim_end_matches(';').split_whitespace().collect();
                let name = words.pop().unwrap_or_default();
                let size = name.find('[').map_or("", |i| &name[i..]);
                format!("{} {size}", words.join(" "))
            })
            .collect();
        shared.sort();
        (ptx[start..end].to_string(), shared)
    }

    /// The shipped catalog's Hopper kernels still match the template: every committed PTX
    /// file hashes to its name, every entry names a configuration the tuner knows and carries
    /// the manifest that configuration gives, and recompiling it (NVRTC from the pip wheel CI
    /// installs) declares the committed PTX's launch interface: the entry's name, parameters
    /// and launch directives, and its static shared memory. The bytes differ: the template's
    /// parts (docs/tuner.md) compile to other PTX than the one `#if` kernel the catalog was
    /// timed with, and the catalog serves the PTX it shipped, which its sha256 names.
    #[test]
    fn the_shipped_hopper_kernels_keep_their_launch_interface() {
        let mut checked = 0;
        for (dir, index, ptx) in crate::catalog::bundle::shipped_bundles() {
            for (sha, text) in &ptx {
                assert_eq!(&crate::signing::sha256_hex(text.as_bytes()), sha, "{}: PTX does not match its sha256", dir.display());
            }
            for e in &index.entries {
                let launch = &e.manifest.launches[0];
                if !launch.entry.starts_with("kaas_wgmma_") {
                    continue;
                }
                // Every shipped Hopper entry must name a configuration the tuner still
                // knows: none is skipped unchecked.
                let (cfg, acc, layout) = HopperConfig::of_launch(launch, &e.problem)
                    .unwrap_or_else(|| panic!("{}: {} names no Hopper configuration", e.problem, launch.entry));
                assert_eq!(e.manifest, cfg.manifest(&e.problem, 132), "{}: manifest differs", e.problem);
                checked += 1;
                if nvrtc::available().is_err() {
                    continue;
                }
                let built = compile(&cfg, acc, layout).unwrap();
                assert_eq!(launch_interface(&built), launch_interface(&ptx[&e.artifact]), "{} for {}: the launch interface changed", cfg.label(), e.problem);
            }
        }
        if nvrtc::available().is_err() {
            eprintln!("SKIP: no NVRTC; checked the sha256 and manifests of {checked} Hopper entries");
        }
        assert!(checked > 0, "no Hopper kernel in the shipped catalog");
    }

    #[test]
    fn stream_k_launches_one_grid_with_one_sum_per_block() {
        let prob = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(1000, 1000, 4104).unwrap());
        let codes = stream_k_codes(132);
        assert_eq!(codes.len(), 3, "{codes:?}");
        for c in &codes {
            c.validate().unwrap();
            let man = c.manifest(&prob, 132);
            man.validate().unwrap_or_else(|e| panic!("{}: {e}", c.label()));
            assert_eq!(man.launches[0].grid, [132, 1, 1], "{}", c.label());
            assert_eq!(man.launches[0].cluster, [1, 1, 1]);
            assert_eq!(man.launches[0].params.len(), 8, "workspace and S");
            // 132 counters (768 bytes with the rounding), then 132 fp32 sums of a tile,
            // however many tiles the problem has.
            assert_eq!(man.workspace_bytes, 768 + 4 * 132 * u64::from(c.bm * c.bn), "{}", c.label());
            let entry = c.entry(Acc::F32, Layout::Nn);
            assert!(entry.ends_with("_g16_sks"), "{entry}");
            assert_eq!(HopperConfig::from_entry(&entry), Some((HopperConfig { split: 2, ..*c }, Acc::F32, Layout::Nn)));
            assert_eq!(HopperConfig::of_launch(&man.launches[0], &prob), Some((*c, Acc::F32, Layout::Tn)));
            let defines = c.defines(Acc::F32, Layout::Tn);
            assert!(defines.contains(&("KAAS_SPLITK".into(), "2".into())) && defines.contains(&("KAAS_STREAMK".into(), "1".into())), "{defines:?}");
            assert_eq!(c.label(), format!("{}x{} s{} c{} stream-K 132", c.bm, c.bn, c.stages, c.consumers));
            for bad in [HopperConfig { split: 1, ..*c }, HopperConfig { bk: 128, ..*c }] {
                assert!(bad.validate().is_err(), "{bad:?}");
            }
        }
        assert!(HopperConfig::from_entry("kaas_wgmma_f32_tn_64x128x64_s8_c1_m1_g16_sks_ska").is_none());
        // Fewer K-iterations than blocks: the grid (and S) shrink to one block per iteration.
        let small = Problem::new(Arch::Sm90, Acc::F32, Layout::Nn, Shape::new(640, 384, 136).unwrap());
        let man = codes[0].manifest(&small, 132);
        assert_eq!((codes[0].bm, codes[0].bn), (64, 128));
        assert_eq!(man.launches[0].grid, [90, 1, 1], "10 × 3 tiles of 3 K-tiles");
        assert_eq!(man.launches[0].params[7], Param::I32(I32Value::Const(90)));
        assert_eq!(man.workspace_bytes, 512 + 4 * 90 * 64 * 128);
        // The template's partition, modelled: block g takes K-iterations [g*W/G, (g+1)*W/G)
        // and owner(i) = ((i+1)*G - 1) / W is the block whose range holds iteration i. Every
        // range starts where its owner says, the ranges cover each tile exactly, and no block
        // is the first of two tiles that several blocks share (it names their counter and sum).
        // With G <= W (the manifest's clamp) no range is empty, so a shared tile's blocks are
        // exactly the owners of its first and last iterations and all between, each arriving once.
        for (tiles, ktiles, g) in [(1u64, 200u64, 132u64), (7, 65, 132), (64, 16, 132), (133, 64, 132), (1000, 3, 132), (16, 1, 16), (5, 7, 3), (90, 1, 90)] {
            let w = tiles * ktiles;
            let start = |b: u64| b * w / g;
            let owner = |i: u64| ((i + 1) * g - 1) / w;
            for b in 0..g {
                assert!(start(b) < start(b + 1), "block {b} has an empty range: tiles {tiles} ktiles {ktiles} G {g}");
                assert_eq!(owner(start(b)), b, "tiles {tiles} ktiles {ktiles} G {g}");
            }
            let mut firsts = std::collections::BTreeSet::new();
            for t in 0..tiles {
                let (lo, hi) = (t * ktiles, (t + 1) * ktiles);
                let (first, last) = (owner(lo), owner(hi - 1));
                let covered: u64 = (first..=last).map(|b| start(b + 1).min(hi) - start(b).max(lo)).sum();
                assert_eq!(covered, ktiles, "tile {t} of {tiles}, ktiles {ktiles}, G {g}");
                if last > first {
                    assert!(firsts.insert(first), "block {first} is the first of two split tiles");
                }
            }
        }
    }

    #[test]
    fn hybrid_stream_k_names_its_mode_and_launches_whole_clusters() {
        let prob = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(8192, 8192, 8192).unwrap());
        let codes: Vec<HopperConfig> = stream_k_trial_codes(132).into_iter().filter(|c| c.reduction == Reduction::StreamKHybrid).collect();
        assert_eq!(codes.len(), 9, "{codes:?}");
        for c in &codes {
            c.validate().unwrap();
            let man = c.manifest(&prob, 132);
            man.validate().unwrap_or_else(|e| panic!("{}: {e}", c.label()));
            assert_eq!(man.launches[0].grid, [132, 1, 1], "{}", c.label());
            assert_eq!(man.launches[0].params[7], Param::I32(I32Value::Const(132)));
            assert_eq!(man.workspace_bytes, 768 + 4 * 132 * u64::from(c.bm * c.bn), "{}", c.label());
            let entry = c.entry(Acc::F32, Layout::Tn);
            assert!(entry.ends_with("_skh"), "{entry}");
            let (parsed, ..) = HopperConfig::from_entry(&entry).unwrap_or_else(|| panic!("{entry}"));
            assert!(parsed.reduction.is_stream_k() && parsed.reduction == Reduction::StreamKHybrid && parsed.cluster_size() == c.cluster_size(), "{entry}");
            assert_eq!(HopperConfig::of_launch(&man.launches[0], &prob), Some((*c, Acc::F32, Layout::Tn)));
            let defines = c.defines(Acc::F32, Layout::Tn);
            assert!(defines.contains(&("KAAS_STREAMK".into(), "2".into())), "{defines:?}");
            assert!(c.label().contains(" stream-K hybrid 132"), "{}", c.label());
            assert!(HopperConfig { split: 1, ..*c }.validate().is_err(), "hybrid stream-K needs a grid of units");
            if c.cluster_size() > 1 {
                assert!(HopperConfig { split: 7, ..*c }.validate().is_err(), "a grid of whole clusters");
            }
        }
        // A pair's grid stays whole pairs where the problem has fewer K-iterations than units.
        let pair = codes.iter().find(|c| c.cluster_m == 2).unwrap();
        let small = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(256, 256, 128).unwrap());
        assert_eq!(pair.manifest(&small, 132).launches[0].grid, [4, 1, 1], "1 pair tile × 2 K-tiles: 2 units of 2");
        // The template's hybrid partition, modelled: G units; all but the last full wave and
        // the partial one run whole tiles g, g+G, …; the rest's K-iterations are cut into G
        // ranges. Each tile's K is covered exactly once, a whole tile by one unit, and no unit
        // is the first of two cut tiles.
        for (tiles, ktiles, g) in [(2048u64, 128u64, 132u64), (512, 8, 132), (264, 16, 132), (133, 64, 132), (100, 9, 132), (32, 65, 7), (10, 3, 1), (1024, 64, 66)] {
            let dp = if tiles % g == 0 { tiles } else { (tiles / g).saturating_sub(1) * g };
            let (dp_work, sk_work) = (dp * ktiles, (tiles - dp) * ktiles);
            assert!(sk_work == 0 || g <= sk_work);
            let start = |b: u64| dp_work + b * sk_work / g;
            let owner = |i: u64| ((i - dp_work + 1) * g - 1) / sk_work;
            let mut covered = vec![0u64; tiles as usize];
            let mut units_of = vec![std::collections::BTreeSet::new(); tiles as usize];
            for b in 0..g {
                let (end, mut it) = (start(b + 1), if dp > 0 { b * ktiles } else { start(b) });
                while it < end {
                    let (t, kb) = (it / ktiles, it % ktiles);
                    let ke = ktiles.min(kb + (end - it));
                    covered[t as usize] += ke - kb;
                    units_of[t as usize].insert(b);
                    it = if it < dp_work { if it + g * ktiles < dp_work { it + g * ktiles } else { start(b) } } else { it + (ke - kb) };
                }
            }
            let mut firsts = std::collections::BTreeSet::new();
            for t in 0..tiles {
                assert_eq!(covered[t as usize], ktiles, "tile {t} of {tiles}, ktiles {ktiles}, G {g}");
                let units = &units_of[t as usize];
                if t < dp {
                    assert_eq!(units.len(), 1, "whole tile {t} of {tiles}, G {g}");
                } else {
                    let (lo, hi) = (t * ktiles, (t + 1) * ktiles);
                    let (first, last) = (owner(lo), owner(hi - 1));
                    assert_eq!(units.iter().copied().collect::<Vec<_>>(), (first..=last).collect::<Vec<_>>(), "cut tile {t} of {tiles}, G {g}");
                    if last > first {
                        assert!(firsts.insert(first), "unit {first} is the first of two cut tiles");
                    }
                }
            }
        }
    }

    #[test]
    fn every_configuration_compiles_where_nvrtc_is_present() {
        if let Err(why) = nvrtc::available() {
            eprintln!("SKIP: no NVRTC ({why})");
            return;
        }
        let mut seen = std::collections::BTreeSet::new();
        for c in space().into_iter().chain(split_tiles()).chain(cluster_tiles()).chain(multicast_codes()).chain(stream_k_trial_codes(132)).chain(wide_160_codes()).chain(skinny_cluster_codes()).chain(ksplit_codes()).chain(chains_codes()).chain(chains_split_tiles()).chain(tma_store_codes()).chain(bk_codes(128)).chain(bk_codes(256)).chain(narrow8_codes()).chain(multicast_split_all()).chain(ksplit_pair_codes()).chain(col_split_codes()).chain(swap_codes().into_iter().filter(|c| c.consumers == 3)).chain(rows_192_codes(132)) {
            if !seen.insert(c.code_key()) {
                continue;
            }
            for (acc, layout) in [(Acc::F32, Layout::Tn), (Acc::F32, Layout::Nn)] {
                if !c.supports(layout) {
                    let e = compile(&c, acc, layout).expect_err(&c.label());
                    assert!(e.to_string().contains("tn only"), "{}: {e}", c.label());
                    continue;
                }
                let ptx = compile(&c, acc, layout).unwrap_or_else(|e| panic!("{}: {e}", c.label()));
                assert!(ptx.contains(&format!(".entry {}", c.entry(acc, layout))), "{}", c.label());
                assert!(ptx.contains("wgmma.mma_async") && ptx.contains(".target sm_90a"), "{}", c.label());
                // The verifier's static checks pass: the configuration's constants, which
                // the template's parts leave in module-scope `.global` memory, are never
                // written or addressed (a kernel may keep no state between launches).
                crate::ptx::parse(ptx.as_bytes(), &crate::ptx::StaticLimits::default()).unwrap_or_else(|e| panic!("{}: {e}", c.label()));
                // The TMA-store epilogue's instructions are there, and only there.
                let stores = ptx.contains("stmatrix.sync.aligned.m8n8.x4") && ptx.contains("cp.async.bulk.tensor.2d.global.shared::cta");
                assert_eq!(stores, c.epilogue == Epilogue::TmaStore, "{}", c.label());
                // The entry names K per slot.
                for bk in WIDE_BKS {
                    assert_eq!(ptx.contains(&format!(".entry kaas_wgmma_{}_{}_{}x{}x{bk}_", acc.as_str(), layout.as_str(), c.bm, c.bn)), c.bk == bk, "{}", c.label());
                }
            }
        }
    }

    /// The 64×8 tiles build with both accumulators (m64n8k16) in both layouts; nn's B is
    /// one unswizzled box of 8 columns (descriptor mode 0).
    #[test]
    fn the_8_column_tiles_compile_with_both_accumulators_where_nvrtc_is_present() {
        if let Err(why) = nvrtc::available() {
            eprintln!("SKIP: no NVRTC ({why})");
            return;
        }
        for c in narrow8_codes().into_iter().filter(|c| c.chains == 1 && c.split <= 1) {
            for layout in Layout::ALL {
                assert!(c.supports(layout));
                for (acc, tag) in [(Acc::F32, "f32"), (Acc::F16, "f16")] {
                    let ptx = compile(&c, acc, layout).unwrap_or_else(|e| panic!("{} {layout} {tag}: {e}", c.label()));
                    assert!(ptx.contains(&format!("wgmma.mma_async.sync.aligned.m64n8k16.{tag}.f16.f16")), "{} {layout} {tag}", c.label());
                }
            }
        }
    }

    /// The swap-AB codes build for both accumulators and both layouts, and store C
    /// transposed: 2-byte stores, no staged 16-byte ones, no TMA store; on nn the wgmma
    /// reads the weight with the transpose-A immediate (imm-trans-a 1, imm-trans-b 0), on tn
    /// with neither. (Their correctness is the GPU suite's:
    /// `swap_ab_hopper_kernels_pass_the_verifier`, `swap_ab_nn_tiles_pass_the_verifier`.)
    #[test]
    fn the_swap_ab_codes_compile_where_nvrtc_is_present() {
        if let Err(why) = nvrtc::available() {
            eprintln!("SKIP: no NVRTC ({why})");
            return;
        }
        let codes = swap_codes();
        let pick: Vec<&HopperConfig> = [8, 32, 128, 256].iter().filter_map(|&bn| codes.iter().find(|c| c.bn == bn && c.split == 1 && c.cluster_size() == 1)).collect();
        assert_eq!(pick.len(), 4);
        for c in pick {
            for (acc, tag) in [(Acc::F32, "f32"), (Acc::F16, "f16")] {
                for (layout, trans) in [(Layout::Tn, ", 1, 1, 1, 0, 0;"), (Layout::Nn, ", 1, 1, 1, 1, 0;")] {
                    let what = format!("{} {tag} {layout}", c.label());
                    let ptx = compile(c, acc, layout).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert!(ptx.contains(&format!("wgmma.mma_async.sync.aligned.m64n{}k16.{tag}.f16.f16", c.bn)), "{what}");
                    assert!(ptx.contains(trans), "{what}: the transpose immediates");
                    assert!(ptx.contains("st.global.u16") && !ptx.contains("st.global.v4") && !ptx.contains("cp.async.bulk.tensor.2d.global.shared"), "{what}");
                }
            }
        }
    }

    /// Swap-AB's 384-row tiles build as three consumers: 512 threads, the registers moved
    /// as [`HopperConfig::setmaxnreg`] says, three TMA loads of the weight a slot (128-row
    /// boxes, the manifest's) beside the tokens' one (multicast in a pair), and where ptxas is
    /// present, no spills at 128 registers a thread at launch (the consumers' 160 after
    /// setmaxnreg bound ptxas's allocation of their code). Every kind of every width, plain
    /// and in the search's descriptor modes, f32 and, unsplit, f16.
    #[test]
    fn the_384_row_swap_codes_build_three_consumers_without_spills_where_nvrtc_is_present() {
        if let Err(why) = nvrtc::available() {
            eprintln!("SKIP: no NVRTC ({why})");
            return;
        }
        let ptxas = crate::ptx::ptxas::locate().map_err(|why| eprintln!("ptxas not checked: {why}")).ok();
        let codes: Vec<HopperConfig> = swap_codes().into_iter().filter(|c| c.consumers == 3).collect();
        assert!(codes.len() >= 28, "{}", codes.len());
        let (producer, consumer) = codes[0].setmaxnreg().unwrap();
        let mut checked = 0;
        for c in codes.iter().flat_map(|&c| [c, searched_modes(c)]) {
            let accs: &[Acc] = if c.split == 1 { &[Acc::F32, Acc::F16] } else { &[Acc::F32] };
            for &acc in accs {
                let what = format!("{} {acc:?}", c.label());
                let ptx = compile(&c, acc, Layout::Tn).unwrap_or_else(|e| panic!("{what}: {e}"));
                let entry = c.entry(acc, Layout::Tn);
                assert!(ptx.contains(&format!(".entry {entry}(")), "{what}");
                crate::ptx::parse(ptx.as_bytes(), &crate::ptx::StaticLimits::default()).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(ptx.contains(".maxntid 512, 1, 1"), "{what}");
                assert!(ptx.contains(&format!("setmaxnreg.dec.sync.aligned.u32 {producer};")) && ptx.contains(&format!("setmaxnreg.inc.sync.aligned.u32 {consumer};")), "{what}");
                assert!(ptx.contains(&format!("wgmma.mma_async.sync.aligned.m64n{}k16", c.bn)), "{what}");
                let plain = ptx.matches("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [").count();
                let multicast = ptx.matches("complete_tx::bytes.multicast::cluster").count();
                assert_eq!((plain, multicast), if c.cluster_m == 2 { (3, 1) } else { (4, 0) }, "{what}: three weight boxes and the tokens' one");
                if let Some(ptxas) = &ptxas {
                    let report = crate::ptx::ptxas::run(ptxas, &ptx, "sm_90a", crate::ptx::ptxas::DEFAULT_TIMEOUT).unwrap_or_else(|e| panic!("{what}: {e}"));
                    let f = report.entry(&entry).unwrap_or_else(|| panic!("{what}: no entry in {}", report.log));
                    assert_eq!((f.registers, f.spill_store_bytes, f.spill_load_bytes, f.stack_frame_bytes), (128, 0, 0, 0), "{what}");
                }
                checked += 1;
            }
        }
        assert!(checked >= 2 * 28, "{checked}");
    }

    /// The 192-row tiles of three consumers (not swap-AB): what validates, and the codes
    /// build as 512 threads with the registers moved as for the 384-row swap tiles, A one
    /// TMA box of 192 rows beside B's, and where ptxas is present, no spills. Their
    /// correctness is the GPU suite's (`rows_192_hopper_tiles_pass_the_verifier`).
    #[test]
    fn the_192_row_codes_are_three_consumers_of_64_rows_where_nvrtc_is_present() {
        let codes = rows_192_codes(132);
        assert_eq!(codes.len(), 3);
        for c in &codes {
            assert!(c.validate().is_ok() && c.consumers == 3 && !c.swap && c.bm == 192 && c.bn == 128, "{}", c.label());
            assert_eq!(c.a_box_rows(), 192);
            assert!(c.supports(Layout::Tn) && c.supports(Layout::Nn), "{}", c.label());
        }
        assert_eq!(codes[0].stages, 4, "the deepest staged ring: 4 × 40 KiB, 1 KiB, 27 KiB of staging");
        assert_eq!(codes[2].reduction, Reduction::StreamKHybrid);
        let c = codes[0];
        assert!(HopperConfig { bn: 256, ..c }.validate().is_err(), "128 accumulators a consumer thread; at most 64");
        assert!(HopperConfig { swap: true, ..c }.validate().is_err(), "swap-AB's three consumers own 384 rows");
        assert!(HopperConfig { bm: 384, ..c }.validate().is_err(), "384 rows of three consumers are swap-AB's");
        assert!(HopperConfig { cluster_n: 2, ..c }.validate().is_err(), "no cluster along N");
        if let Err(why) = nvrtc::available() {
            eprintln!("SKIP: no NVRTC ({why})");
            return;
        }
        let ptxas = crate::ptx::ptxas::locate().map_err(|why| eprintln!("ptxas not checked: {why}")).ok();
        let (producer, consumer) = c.setmaxnreg().unwrap();
        for c in codes.iter().map(|&c| searched_modes(c)) {
            for layout in Layout::ALL {
                let what = format!("{} {layout}", c.label());
                let ptx = compile(&c, Acc::F32, layout).unwrap_or_else(|e| panic!("{what}: {e}"));
                let entry = c.entry(Acc::F32, layout);
                assert!(entry.contains("_192x128x64_") && entry.contains("_c3_"), "{entry}");
                crate::ptx::parse(ptx.as_bytes(), &crate::ptx::StaticLimits::default()).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(ptx.contains(".maxntid 512, 1, 1"), "{what}");
                assert!(ptx.contains(&format!("setmaxnreg.dec.sync.aligned.u32 {producer};")) && ptx.contains(&format!("setmaxnreg.inc.sync.aligned.u32 {consumer};")), "{what}");
                assert!(ptx.contains("wgmma.mma_async.sync.aligned.m64n128k16.f32"), "{what}");
                if let Some(ptxas) = &ptxas {
                    let report = crate::ptx::ptxas::run(ptxas, &ptx, "sm_90a", crate::ptx::ptxas::DEFAULT_TIMEOUT).unwrap_or_else(|e| panic!("{what}: {e}"));
                    let f = report.entry(&entry).unwrap_or_else(|| panic!("{what}: no entry in {}", report.log));
                    assert_eq!((f.spill_store_bytes, f.spill_load_bytes), (0, 0), "{what}");
                }
            }
        }
    }

    /// hopper-probe's diagnostic variants (`KAAS_PROBE`, never in the tuner) still build:
    /// 3 keeps the wgmma fence, commit and wait of each slot, 5 drops them too, and neither
    /// issues a wgmma.
    #[test]
    fn the_probe_variants_compile_where_nvrtc_is_present() {
        if let Err(why) = nvrtc::available() {
            eprintln!("SKIP: no NVRTC ({why})");
            return;
        }
        let c = HopperConfig::new(64, 16, 4, 1);
        for probe in 1..=5 {
            let mut defines = c.defines(Acc::F32, Layout::Tn);
            defines.push(("KAAS_PROBE".to_string(), probe.to_string()));
            let ptx = nvrtc::compile(&TEMPLATE, TEMPLATE_NAME, TARGET, &defines).unwrap_or_else(|e| panic!("probe {probe}: {e}"));
            assert!(ptx.contains(&format!(".entry {}", c.entry(Acc::F32, Layout::Tn))), "probe {probe}");
            assert_eq!(ptx.contains("wgmma.mma_async"), matches!(probe, 2 | 4), "probe {probe}: wgmma only where the math stays");
            assert_eq!(ptx.contains("wgmma.commit_group"), probe != 5, "probe {probe}");
            assert_eq!(ptx.contains("cp.async.bulk.tensor.2d.shared::cluster.global"), matches!(probe, 1 | 4), "probe {probe}: TMA loads only where the loads stay");
        }
    }

    /// `KAAS_DESC_UNIFORM=1` (`_du`, the search's default for all but the cooperative codes):
    /// the wgmma descriptors as one add to a slot's base, and the warpgroup index broadcast
    /// from lane 0. It compiles for both layouts and both K widths, and the plain codes
    /// (the shipped catalog's older entries) are untouched: their PTX has no shuffle.
    #[test]
    fn the_uniform_descriptor_variant_compiles_where_nvrtc_is_present() {
        if let Err(why) = nvrtc::available() {
            eprintln!("SKIP: no NVRTC ({why})");
            return;
        }
        for (c, layout) in [(HopperConfig { consumer_mode: ConsumerMode::PingPong, persistent: true, ..HopperConfig::new(64, 256, 4, 2) }, Layout::Tn), (HopperConfig::new(128, 256, 4, 2), Layout::Nn), (HopperConfig { bk: 128, ..HopperConfig::new(64, 64, 4, 1) }, Layout::Tn)] {
            let plain = compile(&c, Acc::F32, layout).unwrap();
            let du = HopperConfig { desc: DescMode::Uniform, ..c };
            let ptx = compile(&du, Acc::F32, layout).unwrap_or_else(|e| panic!("{}: {e}", c.label()));
            assert!(ptx.contains("shfl.sync.idx") && ptx.contains("wgmma.mma_async"), "{}", c.label());
            // The same defines but the mode's and the name.
            let extra: Vec<(String, String)> = du.defines(Acc::F32, layout).into_iter().filter(|d| !c.defines(Acc::F32, layout).contains(d)).collect();
            assert_eq!(extra, [("KAAS_DESC_UNIFORM".to_string(), "1".to_string()), ("KAAS_ENTRY".to_string(), du.entry(Acc::F32, layout))]);
            assert!(ptx.contains(&format!(".entry {}(", du.entry(Acc::F32, layout))), "{}", du.entry(Acc::F32, layout));
            assert!(!plain.contains("shfl.sync"), "{}", c.label());
        }
    }

    #[test]
    fn desc_twins_are_the_same_launch_under_their_own_entry() {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(12288, 12288, 2048).unwrap());
        let c = HopperConfig { consumer_mode: ConsumerMode::PingPong, persistent: true, epilogue: Epilogue::TmaStore, ..HopperConfig::new(64, 256, 4, 2) };
        let [t, dr] = desc_twins(&c)[..] else { panic!("two twins") };
        assert_eq!((desc_twins(&t), dr), (vec![c, dr], step_twin(&c)));
        assert_eq!(t.entry(Acc::F32, Layout::Tn), "kaas_wgmma_f32_tn_64x256x64_s4_c2_m1_g16_pp_ts_du");
        assert_eq!(HopperConfig::from_entry(&t.entry(Acc::F32, Layout::Tn)), Some((HopperConfig { persistent: false, ..t }, Acc::F32, Layout::Tn)));
        assert!(t.defines(Acc::F32, Layout::Tn).contains(&("KAAS_DESC_UNIFORM".to_string(), "1".to_string())));
        assert!(!c.defines(Acc::F32, Layout::Tn).iter().any(|(k, _)| k == "KAAS_DESC_UNIFORM"));
        assert!(t.label().ends_with(" du") && t.code_key() != c.code_key());
        let (mc, mt) = (c.manifest(&p, 132), t.manifest(&p, 132));
        assert_eq!((mc.launches[0].grid, mc.launches[0].shared_mem_bytes, mc.launches[0].params.clone()), (mt.launches[0].grid, mt.launches[0].shared_mem_bytes, mt.launches[0].params.clone()));
    }

    #[test]
    fn bk128_twins_halve_the_ring_and_keep_tile_grid_and_split() {
        let p = |layout, m, n, k| Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).unwrap());
        let c = HopperConfig::new(64, 64, 8, 1);
        let t = bk_twin(&c, 128).unwrap();
        assert_eq!(t, HopperConfig { stages: 4, bk: 128, ..c });
        assert_eq!(t.entry(Acc::F32, Layout::Nn), "kaas_wgmma_f32_nn_64x64x128_s4_c1_m1_g16");
        assert!(t.defines(Acc::F32, Layout::Nn).contains(&("KAAS_BK".to_string(), "128".to_string())));
        assert_eq!(t.label(), "64x64 k128 s4 c1");
        assert_eq!(t.shared_mem_bytes(), c.shared_mem_bytes(), "the same bytes in flight");
        // At least three slots; narrow tiles; split-K keeps its count; no large tiles.
        assert_eq!(bk_twin(&HopperConfig::new(64, 16, 4, 1), 128).map(|t| t.stages), Some(3));
        let split = HopperConfig { split: 8, reduction: Reduction::Atomic, ..HopperConfig::new(64, 32, 16, 1) };
        assert_eq!(bk_twin(&split, 128), Some(HopperConfig { stages: 8, bk: 128, ..split }));
        assert!(bk_twin(&HopperConfig::new(128, 128, 6, 2), 128).is_none());
        assert!(bk_twin(&t, 128).is_none() && bk_twin(&t, 256).is_none(), "already 128");
        assert!(HopperConfig { consumer_mode: ConsumerMode::KSplit, bk: 128, ..HopperConfig::new(128, 64, 4, 2) }.validate().unwrap_err().contains("K per ring slot"));
        assert!(HopperConfig { bk: 96, ..c }.validate().is_err());
        // The manifest: boxes of one swizzle atom along K (nn's B: 128 rows of K), and the
        // entry and launch give the configuration back.
        for layout in Layout::ALL {
            let prob = p(layout, 1000, 1000, 1000);
            let man = t.manifest(&prob, 132);
            man.validate().unwrap();
            let l = &man.launches[0];
            assert_eq!(l.grid, c.manifest(&prob, 132).launches[0].grid);
            let (Param::TensorMap(a), Param::TensorMap(b)) = (&l.params[0], &l.params[1]) else { panic!("{:?}", l.params) };
            assert_eq!(a.box_dims, [64, 64]);
            assert_eq!(b.box_dims, if layout == Layout::Tn { [64, 64] } else { [64, 128] });
            assert_eq!(HopperConfig::of_launch(l, &prob), Some((t, Acc::F32, layout)));
        }
        // Every code once, each a valid twin, split-K's among them.
        let codes = bk_codes(128);
        assert!(codes.iter().all(|c| c.bk == 128 && c.validate().is_ok() && c.bn <= 64));
        assert!(codes.iter().any(|c| c.split > 1) && codes.iter().any(|c| c.epilogue == Epilogue::TmaStore) && codes.iter().any(|c| c.cluster_size() > 1));
    }

    #[test]
    fn bk256_twins_quarter_the_ring_where_three_slots_fit() {
        let p = |layout| Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(1000, 1000, 1000).unwrap());
        let narrow = HopperConfig::new(64, 16, 16, 1);
        let t = bk_twin(&narrow, 256).unwrap();
        assert_eq!(t, HopperConfig { stages: 4, bk: 256, ..narrow });
        assert_eq!(t.shared_mem_bytes(), narrow.shared_mem_bytes(), "the same bytes in flight");
        assert_eq!(t.entry(Acc::F32, Layout::Tn), "kaas_wgmma_f32_tn_64x16x256_s4_c1_m1_g16");
        assert_eq!(t.label(), "64x16 k256 s4 c1");
        // 64x64: three slots of 64 KiB still fit; 128x64 cannot hold three.
        assert_eq!(bk_twin(&HopperConfig::new(64, 64, 8, 1), 256).map(|t| t.stages), Some(3));
        assert!(bk_twin(&HopperConfig::new(128, 64, 8, 2), 256).is_none());
        assert!(bk_twin(&narrow, 192).is_none() && HopperConfig { bk: 512, ..narrow }.validate().is_err());
        // A split keeps its count only where each slice gets two K-tiles of 256.
        let split = HopperConfig { split: 4, reduction: Reduction::Atomic, ..HopperConfig::new(64, 32, 16, 1) };
        let f32 = |k| Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(64, 512, k).unwrap());
        assert!(bk_twin_for(&split, &f32(2048), 256).is_some() && bk_twin_for(&split, &f32(1792), 256).is_none());
        assert!(bk_twin_for(&narrow, &Problem { acc: Acc::F16, ..f32(4096) }, 256).is_none(), "fp32 only");
        // nn's B boxes are 256 rows of K; the launch gives the configuration back.
        for layout in Layout::ALL.into_iter().filter(|&l| t.supports(l)) {
            let prob = p(layout);
            let man = t.manifest(&prob, 132);
            man.validate().unwrap();
            assert_eq!(HopperConfig::of_launch(&man.launches[0], &prob), Some((t, Acc::F32, layout)));
        }
        let wide = bk_twin(&HopperConfig::new(64, 64, 8, 1), 256).unwrap();
        let Param::TensorMap(b) = &wide.manifest(&p(Layout::Nn), 132).launches[0].params[1] else { panic!() };
        assert_eq!(b.box_dims, [64, 256]);
        let codes = bk_codes(256);
        assert!(codes.iter().all(|c| c.bk == 256 && c.validate().is_ok() && c.bm == 64), "{codes:?}");
        assert!(codes.iter().any(|c| c.split > 1) && codes.iter().any(|c| c.cluster_size() > 1));
    }

    #[test]
    fn tma_store_twins_take_c_as_a_tensor_map_and_keep_the_tile_and_grid() {
        let p = |layout, m, n, k| Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).unwrap());
        let c = HopperConfig { persistent: true, l2_256: true, ..HopperConfig::new(128, 256, 4, 2) };
        let t = tma_store_twin(&c).unwrap();
        assert_eq!(t, HopperConfig { epilogue: Epilogue::TmaStore, ..c }, "4 stages still fit");
        assert_eq!(t.entry(Acc::F32, Layout::Tn), "kaas_wgmma_f32_tn_128x256x64_s4_c2_m1_g16_ts");
        assert!(t.defines(Acc::F32, Layout::Tn).contains(&("KAAS_EPILOGUE".to_string(), "2".to_string())));
        assert_eq!(t.label(), "128x256 s4 c2 persistent tma-store l2-256B");
        // Two 2 KiB buffers per consumer warp instead of the padded 2,304-byte one.
        assert_eq!(t.shared_mem_bytes(), 4 * 384 * 128 + 1024 + 2 * 4 * 2 * 2048);
        assert_eq!(t.shared_mem_bytes() - c.shared_mem_bytes(), 2 * (16_384 - 9_216));
        // The ping-pong 64x256 ring of 5 stages no longer fits: 4.
        let pp = HopperConfig { consumer_mode: ConsumerMode::PingPong, ..HopperConfig::new(64, 256, 5, 2) };
        assert!(pp.validate().is_ok() && HopperConfig { epilogue: Epilogue::TmaStore, ..pp }.validate().is_err());
        assert_eq!(tma_store_twin(&pp).map(|t| t.stages), Some(4));
        // No twin for split-K codes or narrow tiles; validate says why.
        assert!(tma_store_twin(&HopperConfig { split: 4, reduction: Reduction::Atomic, ..HopperConfig::new(64, 64, 8, 1) }).is_none());
        assert!(tma_store_twin(&HopperConfig::new(64, 32, 16, 1)).is_none());
        assert!(HopperConfig { epilogue: Epilogue::TmaStore, ..HopperConfig::new(64, 32, 4, 1) }.validate().unwrap_err().contains("64-column"));
        for layout in Layout::ALL {
            for (m, n, k) in [(8192, 8192, 8192), (1000, 1000, 1000), (64, 64, 64)] {
                let prob = p(layout, m, n, k);
                let man = t.manifest(&prob, 132);
                man.validate().unwrap();
                let l = &man.launches[0];
                assert_eq!(l.grid, c.manifest(&prob, 132).launches[0].grid, "same grid");
                let Param::TensorMap(tc) = &l.params[2] else { panic!("C is not a tensor map: {:?}", l.params[2]) };
                assert_eq!((tc.operand, tc.box_dims, tc.swizzle), (Operand::C, [64, 16], Swizzle::B128));
                assert_eq!(l.params.len(), 6, "A, B, C maps and M, N, K");
                assert_eq!(HopperConfig::of_launch(l, &prob), Some((HopperConfig { persistent: l.grid[0] < t.tiles(&prob), ..t }, Acc::F32, layout)));
            }
        }
        // The codes: every unsplit 64-column tile of the search, once, each a valid twin.
        let codes = tma_store_codes();
        assert!(codes.iter().all(|c| c.epilogue == Epilogue::TmaStore && c.validate().is_ok() && !c.persistent && !c.l2_256));
        let keys: std::collections::HashSet<_> = codes.iter().map(|c| c.code_key()).collect();
        assert_eq!(keys.len(), codes.len(), "a code twice");
        for c in space().into_iter().filter(|c| c.split == 1 && c.bn.is_multiple_of(64)) {
            let twin = tma_store_twin(&HopperConfig { persistent: false, ..c }).unwrap();
            assert!(codes.contains(&twin), "{}", c.label());
        }
        for t in &codes {
            for layout in Layout::ALL {
                let e = t.entry(Acc::F16, layout);
                assert_eq!(HopperConfig::from_entry(&e), Some((*t, Acc::F16, layout)), "{e}");
            }
        }
    }

    /// The table is data a name can carry: every value of every row that is in the name has
    /// a suffix of its own that parses back to it, no define is set by two rows or by a row
    /// and the head, and every define a row or the head sets is one the template reads.
    /// Adding a knob is a row of [`AXES`] and its use in the template.
    #[test]
    fn the_table_is_data_a_name_can_carry() {
        let problems = axes::check_names(&NAMES, HopperConfig::new(64, 64, 4, 1), &[TEMPLATE.as_str()], &["KAAS_PROBE", "KAAS_MC_ARRIVE_CTA"]);
        assert!(problems.is_empty(), "{problems:#?}");
    }

    /// Every entry name in the shipped catalog parses and prints back identically, in both
    /// families.
    #[test]
    fn every_shipped_entry_name_round_trips() {
        let mut seen = 0;
        for (_, index, _) in crate::catalog::bundle::shipped_bundles() {
            for e in &index.entries {
                let entry = &e.manifest.launches[0].entry;
                if entry.starts_with(ENTRY_PREFIX) {
                    let (cfg, acc, layout) = HopperConfig::from_entry(entry).unwrap_or_else(|| panic!("{entry} does not parse"));
                    assert_eq!(cfg.entry(acc, layout), *entry);
                    seen += 1;
                } else if entry.starts_with(crate::tuner::mma::ENTRY_PREFIX) {
                    let (cfg, acc, layout) = crate::tuner::mma::MmaConfig::from_entry(entry).unwrap_or_else(|| panic!("{entry} does not parse"));
                    assert_eq!(cfg.entry(acc, layout), *entry);
                    seen += 1;
                }
            }
        }
        assert!(seen > 0, "no tuner entry in the shipped catalog");
    }

    /// The serialized form is the code's part of the entry name and the launch choices,
    /// each knob through its row of the table; anything else is refused, not guessed.
    #[test]
    fn the_serialized_form_is_the_code_and_its_launch_choices() {
        let c = HopperConfig { persistent: true, l2_256: true, consumer_mode: ConsumerMode::PingPong, epilogue: Epilogue::TmaStore, desc: DescMode::Stepped, early_coords: true, ..HopperConfig::new(64, 256, 4, 2) };
        let json = r#"{"code":"64x256x64_s4_c2_m1_g16_pp_ts_dr_ec","l2_promotion":true,"persistent":true}"#;
        assert_eq!(serde_json::to_string(&c).unwrap(), json);
        assert_eq!(serde_json::from_str::<HopperConfig>(json).unwrap(), c);
        let cases = [
            (r#"{"code":"64x64x64_s8_c1_m1_g16_sk","split":8}"#, HopperConfig::new(64, 64, 8, 1).split_by(8, Reduction::InOrder)),
            (r#"{"code":"64x64x64_s8_c1_m1_g16_ska","split":8}"#, HopperConfig::new(64, 64, 8, 1).split_by(8, Reduction::Atomic)),
            (r#"{"code":"128x128x64_s4_c2_m2_g16_skh","split":132}"#, HopperConfig { cluster_m: 2, ..HopperConfig::new(128, 128, 4, 2).split_by(132, Reduction::StreamKHybrid) }),
            (r#"{"code":"64x128x64_s8_c2_m1_g16_cs_w0"}"#, HopperConfig { consumer_mode: ConsumerMode::ColSplit, wait0: true, ..HopperConfig::new(64, 128, 8, 2) }),
            (r#"{"code":"64x16x128_s8_c1_m1_g16_n4_x2_du"}"#, HopperConfig { cluster_n: 4, chains: 2, bk: 128, desc: DescMode::Uniform, ..HopperConfig::new(64, 16, 8, 1) }),
            (r#"{"code":"64x32x64_s4_c1_m1_g16_2g"}"#, HopperConfig { grid: TileGrid::Grouped, ..HopperConfig::new(64, 32, 4, 1) }),
            (r#"{"code":"128x32x64_s11_c1_m1_g16_dr_ec_sw","l2_promotion":true}"#, HopperConfig { swap: true, l2_256: true, desc: DescMode::Stepped, early_coords: true, ..HopperConfig::new(128, 32, 11, 1) }),
        ];
        for (json, want) in cases {
            want.validate().unwrap_or_else(|e| panic!("{json}: {e}"));
            assert_eq!(serde_json::from_str::<HopperConfig>(json).unwrap(), want, "{json}");
            assert_eq!(serde_json::to_string(&want).unwrap(), json);
        }
        for (bad, why) in [
            (r#"{"bm":64,"bn":64,"stages":8,"consumers":1,"persistent":false}"#, "missing field `code`"),
            (r#"{"code":"64x64x64_s8_c1_m1_g16_zz"}"#, "is not a code"),
            (r#"{"code":"64x64x64_s8_c1_m1_g16","split":4}"#, "split 4 with reduction None"),
            (r#"{"code":"64x64x64_s8_c1_m1_g16","swap":true}"#, "`swap` is not a launch choice"),
            (r#"{"code":"64x64x64_s8_c1_m1_g16","persistent":2}"#, "2 is not one of its values"),
        ] {
            let e = serde_json::from_str::<HopperConfig>(bad).expect_err(bad).to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
