//! The tuner: the service's own kernel author (its command, `kaas tune`, is
//! `crate::cli::tune`; the tune job, [`ondemand`]). For each problem it generates the
//! candidates of two template families (compiled with NVRTC): the Hopper family (wgmma +
//! TMA, [`hopper`]) for every problem, and the Ampere-style family (mma.sync + cp.async,
//! [`mma`]) for the small ones. It times them on this machine's GPU
//! against cuBLASLt's heuristic choice with an upper-confidence-bound bandit seeded by
//! the winners of neighbouring shapes. A final round then re-times the best few (up to 4,
//! within 5% of the best estimate) in 5 rounds, each against the reference timed afresh,
//! and keeps the one with the best median: the best of many noisy means is optimistic,
//! and the reference drifts during a search. The search state is a JSON
//! file written after every problem, so a stopped run resumes where it was. Winners are
//! then submitted to a kaas server like any outside kernel (`--submit URL`), where the
//! workers verify them and benchmark them side by side with every baseline: the tuner's
//! own timings only rank candidates, they are never served.

pub mod family;
pub mod gemv;
pub mod hopper;
pub mod mma;
pub mod ondemand;
pub mod search;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use half::f16;
use serde::{Deserialize, Serialize};

use crate::gpu::{Contender, Gpu, LoadedPtx, LtAlgoConfig, LtGemm, Operands, PreparedManifest, time_graph};
use crate::problem::{Acc, Arch, Layout, Problem};
pub use family::TemplateFamily;
use hopper::{ConsumerMode, DescMode, Epilogue, HopperConfig};
#[cfg(test)]
use hopper::{Reduction, TileGrid};
use mma::MmaConfig;
use search::{Ucb, UcbSettings};
use crate::problem::DeviceClass;

/// One candidate kernel: a configuration of one of the template families. Untagged, so a
/// search state written before the mma family (bare Hopper configurations) still loads;
/// the two shapes never overlap (an mma configuration has no `consumers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Candidate {
    Hopper(HopperConfig),
    Mma(MmaConfig),
    Gemv(gemv::GemvConfig),
}

impl Candidate {
    /// The configuration, through its family's interface.
    pub fn config(&self) -> &dyn TemplateFamily {
        match self {
            Candidate::Hopper(c) => c,
            Candidate::Mma(c) => c,
            Candidate::Gemv(c) => c,
        }
    }

    pub fn entry(&self, acc: Acc, layout: Layout) -> String {
        self.config().entry(acc, layout)
    }

    pub fn manifest(&self, p: &Problem, sm_count: u32) -> crate::manifest::Manifest {
        self.config().manifest(p, sm_count)
    }

    pub fn workspace_bytes(&self, p: &Problem) -> u64 {
        self.config().workspace_bytes(p)
    }

    pub fn label(&self) -> String {
        self.config().label()
    }

    /// The candidate, accumulator and layout an entry name of the tuner's encodes: the
    /// family is the one whose prefix the name has, so one parser answers (none for a name
    /// the tuner does not write).
    pub fn from_entry(entry: &str) -> Option<(Candidate, Acc, Layout)> {
        if entry.starts_with(hopper::ENTRY_PREFIX) {
            hopper::HopperConfig::from_entry(entry).map(|(c, a, l)| (Candidate::Hopper(c), a, l))
        } else if entry.starts_with(mma::ENTRY_PREFIX) {
            mma::MmaConfig::from_entry(entry).map(|(c, a, l)| (Candidate::Mma(c), a, l))
        } else if entry.starts_with(gemv::ENTRY_PREFIX) {
            gemv::GemvConfig::from_entry(entry).map(|(c, a, l)| (Candidate::Gemv(c), a, l))
        } else {
            None
        }
    }

    /// The template defines the tuner compiles the code with, `KAAS_ENTRY` included.
    pub fn defines(&self, acc: Acc, layout: Layout) -> Vec<(String, String)> {
        match self {
            Candidate::Hopper(c) => c.defines(acc, layout),
            Candidate::Mma(c) => c.defines(acc, layout),
            Candidate::Gemv(c) => c.defines(acc, layout),
        }
    }

    /// The Hopper configuration, for the other family none.
    fn hopper(&self) -> Option<hopper::HopperConfig> {
        match self {
            Candidate::Hopper(c) => Some(*c),
            Candidate::Mma(_) | Candidate::Gemv(_) => None,
        }
    }

    /// Whether the family builds this code for a layout (the Hopper narrow tiles are tn only).
    fn supports(&self, layout: Layout) -> bool {
        self.config().supports(layout)
    }

    /// Split-K codes need fp32 partials.
    fn split(&self) -> bool {
        self.config().split() > 1
    }

    /// The template family's name and source, for submissions.
    pub(crate) fn template(&self) -> (&'static str, &'static str) {
        (self.config().family_name(), self.config().template())
    }

    pub fn compile(&self, arch: Arch, acc: Acc, layout: Layout) -> Result<String, crate::gpu::GpuError> {
        self.config().compile(arch, acc, layout)
    }
}

/// The template families `kaas tune --families` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Family {
    /// wgmma + TMA (sm_90a), every problem.
    Hopper,
    /// mma.sync + cp.async (sm_80+), problems up to 2^33 multiply-adds.
    Mma,
    /// fp32 FMAs streaming a tn weight (sm_80+), decode problems (M ≤ 16, fp32 accumulators).
    Gemv,
}

/// Codes the search leaves out that `kaas tune --trial` adds to it, to time them beside the
/// whole space (exhaustively with `--exhaustive-every 1`) before they earn a place there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Trial {
    /// K split across the two consumer warpgroups (`_kw`), alone and in multicast pairs, on
    /// the skinny shapes.
    Ksplit,
    /// Four accumulator chains per consumer (`_x4`) on the skinny shapes, beside the two
    /// (`_x2`, unsplit and with the atomic split-K) that the search offers them anyway.
    Chains,
    /// Clusters of two of the large tiles (`_m2` along M, `_n2` along N), and the skinny
    /// shapes' clusters, on every shape.
    Multicast,
    /// The 256×160 tile (tn), on every shape.
    Wide160,
    /// Atomic split-K in multicast clusters of two and four (`_m2…_ska`, `_m2…_n2…_ska`, …)
    /// on every shape whose tiles leave SMs idle, fp32 only: [`hopper::multicast_split_tiles`]
    /// (which the search takes from K 8192) and [`hopper::multicast_split_quads`] ([`hopper::multicast_split_all`]).
    MulticastSplit,
    /// Every Hopper candidate of the problem again with the other L2 promotion (128 bytes
    /// where the search takes 256, and the reverse): the same code, another manifest.
    L2,
    /// The mma family's tiles with 6- and 8-stage rings, on shapes of up to 2^33 FLOP whose
    /// tiles make at most two waves (CUDA-L2's choice for the skinny, long-K mid shapes).
    MmaDeep,
    /// The TMA-store twin (`_ts`) of every unsplit Hopper candidate of the problem whose BN is
    /// a multiple of 64: the same tile and grid, C stored by bulk tensor stores. The search
    /// takes them with fp32 accumulators; the trial adds them on fp16, and to the other
    /// trials' candidates.
    TmaStore,
    /// The K-128 twin (two swizzle atoms per ring slot, half the slots) of every Hopper
    /// candidate of the problem whose BN is at most 64, split-K's included; fp32 only. The
    /// search takes them with K ≥ 1024; the trial adds them on shorter K, and
    /// to the other trials' candidates.
    Bk128,
    /// The K-256 twin (four swizzle atoms per slot, a quarter of the slots, at least 3) of
    /// every Hopper candidate whose BN is at most 64 and whose three slots fit (BM 64);
    /// fp32 only. hopper-probe timed it 15% below K 128 per 64 of K on 64×16.
    /// The search takes them on tn with K ≥ 1024; the trial adds them on nn and shorter K.
    Bk256,
    /// The 64×8 tiles (one consumer, tn only; two chains and atomic split-K with fp32) on
    /// the skinny shapes: cuBLASLt's skinny long-K picks are this narrow. Built, not yet run
    /// on a GPU.
    Narrow8,
    /// The twins in the two other descriptor modes of every Hopper candidate of the
    /// problem, the other trials' included: the search builds stepped descriptors (`_dr`:
    /// one 32-bit add to a descriptor's low word per wgmma operand) into every code
    /// ([`hopper::searched_modes`]), so the trial adds each code plain and with uniform
    /// descriptors (`_du`: one 64-bit add to a warp-uniform base), to time the three modes
    /// side by side (`scripts/desc-modes.py`).
    Du,
    /// Consumers that split the tile's columns (`_cs`: 64 × 128 and 64 × 256 with two
    /// consumers, alone and in pairs, unsplit and with the atomic split-K), on every shape:
    /// [`hopper::col_split_codes`].
    ColSplit,
    /// Stream-K (`_sks`) and hybrid stream-K (`_skh`: whole tiles but for the last waves,
    /// alone and in multicast pairs) on every shape, fp32 only:
    /// [`hopper::stream_k_trial_codes`].
    StreamK,
    /// The 192×128 tile of three consumer warpgroups (`192x128x64_…_c3`), alone and as hybrid
    /// stream-K, on every shape, fp32 only: [`hopper::rows_192_codes`]. Passes the verifier
    /// on an H200; timed there at 512 tokens it did not beat cuBLASLt (docs/tuner.md).
    Rows192,
    /// Swap-AB (`_sw`, tn and nn): the code computes Cᵀ = B·Aᵀ, the weight's rows on the tile's
    /// 64- to 384-row side and the tokens on its BN side (8 to 256), on the problems of up
    /// to 256 tokens: [`hopper::swap_space`].
    Swap,
}

impl Trial {
    /// The family whose codes the trial adds (it adds them only with that family asked for).
    fn family(self) -> Family {
        match self {
            Trial::MmaDeep => Family::Mma,
            _ => Family::Hopper,
        }
    }

    fn codes(self) -> Vec<Candidate> {
        let hopper = match self {
            Trial::Ksplit => hopper::ksplit_codes().into_iter().chain(hopper::ksplit_pair_codes()).collect(),
            Trial::Chains => hopper::chains_codes().into_iter().chain(hopper::chains_split_tiles()).collect(),
            Trial::Multicast => hopper::multicast_codes(),
            Trial::Wide160 => hopper::wide_160_codes(),
            // The same codes as the search's: nothing more to load.
            Trial::L2 => Vec::new(),
            Trial::MmaDeep => return mma::deep_codes().into_iter().map(Candidate::Mma).collect(),
            // Twins of the codes loaded beside them: [`codes_with`].
            Trial::TmaStore | Trial::Bk128 | Trial::Bk256 | Trial::Du => Vec::new(),
            Trial::Narrow8 => hopper::narrow8_codes(),
            Trial::MulticastSplit => hopper::multicast_split_all(),
            Trial::ColSplit => hopper::col_split_codes(),
            // The entry does not carry the grid: any SM count names the same codes.
            Trial::StreamK => hopper::stream_k_trial_codes(132),
            Trial::Swap => hopper::swap_codes(),
            Trial::Rows192 => hopper::rows_192_codes(132),
        };
        hopper.into_iter().map(Candidate::Hopper).collect()
    }

    /// The trial's candidates for one problem.
    fn space_for(self, p: &Problem, sm_count: u32) -> Vec<Candidate> {
        if matches!(self, Trial::Ksplit | Trial::Chains) && (p.acc != Acc::F32 || !hopper::skinny(p, sm_count)) {
            return Vec::new();
        }
        if matches!(self, Trial::StreamK | Trial::Rows192) && p.acc != Acc::F32 {
            return Vec::new();
        }
        let codes: Vec<hopper::HopperConfig> = match self {
            Trial::Chains => hopper::chains_codes().into_iter().chain(hopper::chains_split_space(p, sm_count)).collect(),
            Trial::L2 => return hopper::space_for(p, sm_count).into_iter().map(|c| Candidate::Hopper(hopper::HopperConfig { l2_256: !c.l2_256, ..c })).collect(),
            Trial::MmaDeep => return mma::deep_space_for(p, sm_count).into_iter().map(Candidate::Mma).collect(),
            // Its twins are of the whole space, the other trials' included: [`space_with`].
            Trial::TmaStore | Trial::Bk128 | Trial::Bk256 | Trial::Du => return Vec::new(),
            Trial::Ksplit => hopper::ksplit_codes().into_iter().chain(hopper::ksplit_pair_codes().into_iter().filter(|c| c.cluster_fits(p))).collect(),
            // And the skinny shapes' clusters (loaded with the search's codes anyway) on
            // every shape: cuBLASLt's autotuned pick runs in clusters of two on the skinny
            // long-K mid shapes, where the search offers none.
            Trial::Multicast => hopper::multicast_codes().into_iter().chain(hopper::skinny_cluster_codes()).collect(),
            Trial::Wide160 => hopper::wide_160_codes(),
            Trial::Narrow8 => hopper::narrow8_space(p, sm_count),
            Trial::MulticastSplit => hopper::multicast_split_space(hopper::multicast_split_all(), p, sm_count),
            Trial::ColSplit => hopper::col_split_space(p, sm_count),
            Trial::StreamK => hopper::stream_k_trial_codes(sm_count).into_iter().filter(|c| c.cluster_fits(p)).collect(),
            Trial::Swap => hopper::swap_space(p, sm_count),
            Trial::Rows192 => hopper::rows_192_codes(sm_count),
        };
        // With the search's L2 promotion, so that they time beside it on equal terms.
        let l2_256 = hopper::wide_l2_suits(p);
        let codes = codes.into_iter().map(|c| hopper::HopperConfig { l2_256, ..c });
        codes.into_iter().filter(|c| c.supports(p.layout)).map(Candidate::Hopper).collect()
    }
}

/// [`codes`] and the trials' codes (each trial's only with its family asked for). The
/// twin trials (TMA store, K 128, K 256, the other descriptor modes) twin every Hopper code loaded so far, as
/// [`space_with`] twins every candidate: so `--trial narrow8,bk256` loads the 64×8 tiles'
/// K-256 twins, and a run without trials loads no twin the search never times.
pub(crate) fn codes_with(families: &[Family], trials: &[Trial], arch: Arch, acc: Acc, layout: Layout) -> Vec<Candidate> {
    let mut out = codes(families, arch, acc, layout);
    let f32_only = |c: &Candidate| match c {
        Candidate::Hopper(h) => h.consumer_mode == ConsumerMode::KSplit || h.chains > 1 || h.split > 1,
        Candidate::Mma(m) => m.split > 1,
        Candidate::Gemv(_) => true,
    };
    let suits = |c: &Candidate| c.supports(layout) && (acc == Acc::F32 || !f32_only(c));
    // In the search's descriptor mode, as `codes` has them.
    let extra = trials.iter().filter(|t| families.contains(&t.family())).flat_map(|t| t.codes()).map(searched_modes);
    for c in extra.filter(suits) {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    if families.contains(&Family::Hopper) {
        // K 128 and 256 with fp32 accumulators only (hopper::bk_twin_for).
        let bks: Vec<u32> = [(Trial::Bk128, 128), (Trial::Bk256, 256)].into_iter().filter(|(t, _)| acc == Acc::F32 && trials.contains(t)).map(|(_, bk)| bk).collect();
        let hopper: Vec<hopper::HopperConfig> = out.iter().filter_map(Candidate::hopper).collect();
        let twins = hopper::twin_codes(&hopper, trials.contains(&Trial::TmaStore), &bks, trials.contains(&Trial::Du));
        out.extend(twins.into_iter().map(Candidate::Hopper).filter(suits));
    }
    out
}

/// A twin trial's twin of one candidate on one problem, where it has one.
type TwinOf = fn(&hopper::HopperConfig, &Problem) -> Option<hopper::HopperConfig>;

/// [`space_for`] and the trials' candidates (each trial's only with its family asked for).
/// The TMA-store trial twins the other trials' Hopper candidates too, so that, e.g.,
/// `--trial multicast,tma-store` times clusters with the TMA store.
pub(crate) fn space_with(p: &Problem, families: &[Family], trials: &[Trial], sm_count: u32) -> Vec<Candidate> {
    let mut out = space_for(p, families, sm_count);
    let add = |out: &mut Vec<Candidate>, c: Candidate| {
        if !out.contains(&c) {
            out.push(c);
        }
    };
    for t in trials.iter().filter(|t| families.contains(&t.family())) {
        // In the search's descriptor mode, as `space_for` has them.
        for c in t.space_for(p, sm_count) {
            add(&mut out, searched_modes(c));
        }
    }
    // Twins of every Hopper candidate so far, the TMA store's first (so that K 128 twins
    // them too).
    let twin_trials: [(Trial, TwinOf); 5] = [
        (Trial::TmaStore, |h, _| hopper::tma_store_twin(h).filter(|_| h.epilogue != Epilogue::TmaStore)),
        (Trial::Bk128, |h, p| hopper::bk_twin_for(h, p, 128)),
        (Trial::Bk256, |h, p| hopper::bk_twin_for(h, p, 256)),
        // Plain, then `_du` (the second twins the first's twins too: no new code).
        (Trial::Du, |h, _| Some(hopper::in_desc_mode(h, hopper::DescMode::Plain)).filter(|t| t != h)),
        (Trial::Du, |h, _| Some(hopper::in_desc_mode(h, hopper::DescMode::Uniform)).filter(|t| t != h)),
    ];
    for (trial, twin) in twin_trials {
        if families.contains(&Family::Hopper) && trials.contains(&trial) {
            let twins: Vec<Candidate> = out.iter().filter_map(|c| twin(&c.hopper()?, p).map(Candidate::Hopper)).collect();
            for c in twins {
                add(&mut out, c);
            }
        }
    }
    out
}

/// The entries of the candidates `args` searches on `problems` that `loaded` lacks.
/// Which codes a search draws from: the template families, the trial codes added to them,
/// and an optional filter on entry names (any of `only`'s comma-separated texts).
#[derive(Debug, Clone)]
pub struct Scope {
    pub families: Vec<Family>,
    pub trials: Vec<Trial>,
    pub only: Option<String>,
}

impl Scope {
    /// Whether the filter lets this entry into the search: it contains one of the texts.
    pub fn admits(&self, entry: &str) -> bool {
        only_admits(self.only.as_deref(), entry)
    }
}

/// Whether an `--only` filter (any of its comma-separated texts) admits this entry.
pub fn only_admits(only: Option<&str>, entry: &str) -> bool {
    only.is_none_or(|o| o.split(',').any(|part| entry.contains(part)))
}

pub(crate) fn missing_codes(problems: &[Problem], scope: &Scope, sm_count: u32, loaded: impl Fn(&str) -> bool) -> std::collections::BTreeSet<String> {
    problems
        .iter()
        .flat_map(|p| space_with(p, &scope.families, &scope.trials, sm_count).into_iter().map(move |c| c.entry(p.acc, p.layout)))
        .filter(|e| scope.admits(e) && !loaded(e))
        .collect()
}

/// Every code (one PTX each) of the families asked for, per accumulator and layout.
pub(crate) fn codes(families: &[Family], arch: Arch, acc: Acc, layout: Layout) -> Vec<Candidate> {
    let mut out = Vec::new();
    if families.contains(&Family::Hopper) {
        out.extend(hopper::space().into_iter().chain(hopper::skinny_cluster_codes()).chain(hopper::split_tiles()).chain(hopper::multicast_split_tiles()).map(Candidate::Hopper));
        // The swap-AB codes of the token widths the search offers (both layouts).
        out.extend(hopper::swap_codes().into_iter().filter(|c| c.bn <= hopper::SEARCH_SWAP_MAX_M && (acc == Acc::F32 || c.chains == 1)).map(Candidate::Hopper));
        if acc == Acc::F32 {
            out.extend(hopper::skinny_chains_codes().into_iter().chain(hopper::chains_split_tiles()).map(Candidate::Hopper));
        }
        // The twins the search takes with fp32 accumulators (hopper::takes_tma_store,
        // hopper::takes_bk128; hopper::takes_bk256 where hopper::bk256_suits: nn's narrow
        // tiles only), of these codes only: the trials' codes get theirs in `codes_with`.
        // And the 64×8 tiles of hopper::takes_narrow8.
        if acc == Acc::F32 {
            let searched: Vec<hopper::HopperConfig> = out.iter().filter_map(Candidate::hopper).collect();
            if layout == Layout::Tn {
                out.extend(hopper::twin_codes(&searched, true, &[128, 256], false).into_iter().map(Candidate::Hopper));
            } else {
                out.extend(hopper::twin_codes(&searched, true, &[128], false).into_iter().map(Candidate::Hopper));
                let narrow: Vec<hopper::HopperConfig> = searched.into_iter().filter(|c| c.bn < 64).collect();
                out.extend(hopper::twin_codes(&narrow, false, &[256], false).into_iter().map(Candidate::Hopper));
            }
            out.extend(hopper::narrow8_search_codes().into_iter().map(Candidate::Hopper));
        }
    }
    if families.contains(&Family::Mma) {
        out.extend(mma::space().into_iter().chain(mma::split_tiles()).map(Candidate::Mma));
        // Split-K in a cluster: sm_90's (the family's other codes run on sm_80 too).
        if mma::has_clusters(arch) {
            out.extend(mma::cluster_split_codes().into_iter().map(Candidate::Mma));
        }
    }
    if families.contains(&Family::Gemv) && acc == Acc::F32 && layout == Layout::Tn {
        out.extend(gemv::codes().into_iter().map(Candidate::Gemv));
    }
    out.retain(|c| (acc == Acc::F32 || !c.split()) && c.supports(layout));
    out.into_iter().map(searched_modes).collect()
}

/// A candidate in the search's descriptor mode ([`hopper::searched_modes`]).
fn searched_modes(c: Candidate) -> Candidate {
    match c {
        Candidate::Hopper(h) => Candidate::Hopper(hopper::searched_modes(h)),
        mma => mma,
    }
}

/// The candidates of the families asked for, for one problem (the Hopper codes in the
/// search's descriptor mode, [`hopper::searched_modes`]).
pub fn space_for(p: &Problem, families: &[Family], sm_count: u32) -> Vec<Candidate> {
    let mut out = Vec::new();
    if families.contains(&Family::Hopper) {
        out.extend(hopper::space_for(p, sm_count).into_iter().map(hopper::searched_modes).map(Candidate::Hopper));
    }
    if families.contains(&Family::Mma) {
        out.extend(mma::space_for(p, sm_count).into_iter().map(Candidate::Mma));
    }
    if families.contains(&Family::Gemv) {
        out.extend(gemv::space_for(p, sm_count).into_iter().map(Candidate::Gemv));
    }
    out
}

/// What the tuner found for one problem.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProblemResult {
    pub problem: Problem,
    pub winner: Candidate,
    /// Winner's speedup over cuBLASLt heuristic top-1 (tuner timing, graph mode): the median
    /// of its final-round rewards ([`ProblemResult::retimed`]), or the search's estimate in
    /// states from before them (and where no finalist had a positive median).
    pub reward: f64,
    /// The reference's time, as timed before the search.
    pub reference_us: f64,
    /// The winner's time: the median of its own times in the final round (where it had one),
    /// so not always `reference_us / reward`.
    pub winner_us: f64,
    pub pulls: usize,
    /// (config, mean reward, pulls) of every arm the bandit tried.
    pub arms: Vec<(Candidate, f64, usize)>,
    /// Priors the bandit started with: (config, reward, weight).
    pub priors: Vec<(Candidate, f64, f64)>,
    /// Exhaustive samples (config, three rewards), on the problems chosen for the study.
    #[serde(default)]
    pub exhaustive: Vec<(Candidate, Vec<f64>)>,
    /// The final round: each finalist (the search's best estimates, best first, its own
    /// pick first) and its reward in each round, against the reference timed in that round;
    /// failed timings 0. Empty in states from before it.
    #[serde(default)]
    pub retimed: Vec<(Candidate, Vec<f64>)>,
    pub seconds: f64,
    /// Buffer sets the timings rotated over ([`TUNE_SETS`]); 0 in states from before,
    /// timed on one warm set.
    #[serde(default)]
    pub buffer_sets: usize,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TuneState {
    pub device_class: DeviceClass,
    pub gpu: String,
    pub results: BTreeMap<String, ProblemResult>,
}

impl TuneState {
    pub(crate) fn load(path: &Path) -> anyhow::Result<TuneState> {
        match std::fs::read_to_string(path) {
            Ok(t) => serde_json::from_str(&t).with_context(|| format!("{} is not a tune state", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TuneState::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Written to a temporary file and renamed, so a killed run never leaves half a file.
    pub(crate) fn save(&self, path: &Path) -> anyhow::Result<()> {
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(self)?).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("renaming {}", tmp.display()))
    }
}

/// Shape distance in octaves, summed over M, N, K.
fn distance(a: &Problem, b: &Problem) -> f64 {
    let d = |x: u32, y: u32| (f64::from(x).log2() - f64::from(y).log2()).abs();
    d(a.m, b.m) + d(a.n, b.n) + d(a.k, b.k)
}

/// Priors from the three nearest tuned problems of the same acc and layout: every arm
/// they measured, weighted by closeness.
pub(crate) fn priors_for(p: &Problem, state: &TuneState, space: &[Candidate]) -> Vec<(usize, f64, f64)> {
    let mut near: Vec<(&ProblemResult, f64)> = state
        .results
        .values()
        .filter(|r| r.problem.acc == p.acc && r.problem.layout == p.layout)
        .map(|r| (r, distance(p, &r.problem)))
        .filter(|(_, d)| *d <= 3.0)
        .collect();
    near.sort_by(|a, b| a.1.total_cmp(&b.1));
    let index: HashMap<Candidate, usize> = space.iter().enumerate().map(|(i, c)| (*c, i)).collect();
    let mut out = Vec::new();
    for (r, d) in near.into_iter().take(3) {
        let w = 1.0 / (1.0 + d);
        for (cfg, mean, _) in &r.arms {
            if let Some(&i) = index.get(cfg) {
                out.push((i, *mean, w));
            }
        }
    }
    out
}

/// A code's PTX: `<entry>.ptx` from `ptx_dir` where it is there, else compiled. The
/// directory must have passed [`check_ptx_dir`]: an entry name names a code only within
/// one revision of the templates.
pub(crate) fn ptx_for(ptx_dir: Option<&Path>, cfg: &Candidate, arch: Arch, acc: Acc, layout: Layout) -> anyhow::Result<String> {
    let entry = cfg.entry(acc, layout);
    if let Some(dir) = ptx_dir {
        let path = dir.join(format!("{entry}.ptx"));
        if path.is_file() {
            return std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()));
        }
    }
    Ok(cfg.compile(arch, acc, layout)?)
}

/// The file `kaas tune --emit-ptx` writes beside the PTX: [`templates_digest`] of the
/// binary that compiled it.
pub const TEMPLATES_STAMP: &str = "templates.sha256";

/// The sha256 of every template source the tuner compiles, headers spliced in: two
/// binaries whose digests agree build the same PTX for the same entry name.
pub fn templates_digest() -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for text in [hopper::TEMPLATE.as_str(), mma::TEMPLATE, gemv::TEMPLATE, gemv::TC_TEMPLATE, crate::kernels::SIMPLE_HGEMM_TEMPLATE] {
        h.update((text.len() as u64).to_le_bytes());
        h.update(text.as_bytes());
    }
    hex::encode(h.finalize())
}

/// Whether `dir` holds PTX this binary may use in place of compiling: its
/// [`TEMPLATES_STAMP`] names this binary's templates. PTX built from another revision
/// would run another code under the same entry name, so such a directory is refused, not
/// used in part.
pub fn check_ptx_dir(dir: &Path) -> anyhow::Result<()> {
    let stamp = dir.join(TEMPLATES_STAMP);
    let theirs = std::fs::read_to_string(&stamp)
        .with_context(|| format!("{} has no {TEMPLATES_STAMP}: PTX compiled beforehand must come from `kaas tune --emit-ptx`", dir.display()))?;
    let ours = templates_digest();
    anyhow::ensure!(
        theirs.trim() == ours,
        "the PTX in {} was compiled from other templates (its {TEMPLATES_STAMP} is {}, this binary's {ours}): emit it again with this binary",
        dir.display(),
        theirs.trim()
    );
    Ok(())
}

/// Buffer sets each contender's inputs rotate over while `kaas tune` times it, and the
/// floor of the tune job's L2-cold rotation ([`ondemand`] takes as many more as span
/// twice the L2, as the benchmark's ranked regime does). `kaas tune` itself still times
/// over these three: warm in the L2 for small shapes, where the benchmark now ranks cold,
/// so its winners are re-measured by the worker before they count (docs/tuner.md).
pub const TUNE_SETS: usize = crate::harness::bench::DEFAULT_SETS;

/// Times one contender whose launches rotate over [`TUNE_SETS`] buffer sets: about
/// 100 µs of launches (every set at least once) in a CUDA graph, median of 3 replays.
fn time_us<C: Contender>(gpu: &Gpu, sets: &[C], guess_us: f64) -> Result<f64, crate::gpu::GpuError> {
    let members: Vec<&dyn Contender> = sets.iter().map(|c| c as &dyn Contender).collect();
    let launches = crate::harness::runner::launches_for(guess_us).max(members.len() as u32);
    let samples = time_graph(gpu, &crate::harness::runner::Rotation::new(&members), launches, 3)?;
    Ok(crate::bench::stats::median(&samples).unwrap_or(f64::NAN))
}

/// Replay pairs [`time_paired`] takes: two of each order.
const PAIRS: usize = 4;

/// Times one contender (its launches rotating over its buffer sets, as [`time_us`]) paired
/// with a reference graph captured once with as many launches: the replays alternate
/// reference and contender, in ABBA order, so both run in the same clock and power state.
/// Timed alone after an idle gap (a search compiles between pulls) a long kernel reads
/// faster than it runs sustained, beside the reference it is judged against; the pair's
/// ratio does not carry that bias (docs/tuner.md has the measured gap). Returns the
/// contender's median µs per launch and the median of the pairs' ratios
/// (reference / contender).
pub fn time_paired<C: Contender>(gpu: &Gpu, sets: &[C], reference: &crate::gpu::GraphTimer) -> Result<(f64, f64), crate::gpu::GpuError> {
    let members: Vec<&dyn Contender> = sets.iter().map(|c| c as &dyn Contender).collect();
    let timer = crate::gpu::GraphTimer::capture(gpu, &crate::harness::runner::Rotation::new(&members), reference.launches_per_replay())?;
    timer.replay(gpu)?;
    let (mut ours, mut ratios) = (Vec::with_capacity(PAIRS), Vec::with_capacity(PAIRS));
    for i in 0..PAIRS {
        let (r, c) = if i % 4 == 0 || i % 4 == 3 {
            let r = reference.replay(gpu)?;
            (r, timer.replay(gpu)?)
        } else {
            let c = timer.replay(gpu)?;
            (reference.replay(gpu)?, c)
        };
        ours.push(c);
        ratios.push(reward_of(r, c));
    }
    let median = |v: &[f64]| crate::bench::stats::median(v).unwrap_or(f64::NAN);
    Ok((median(&ours), median(&ratios)))
}

fn random_operands(gpu: &Gpu, p: &Problem, workspace_bytes: u64) -> anyhow::Result<Operands> {
    let ops = Operands::alloc(gpu, p, workspace_bytes)?;
    let mut rng = rand::rng();
    let mut fill = |n: usize| -> Vec<f16> { (0..n).map(|_| f16::from_f32(rand::Rng::random_range(&mut rng, -1.0f32..1.0))).collect() };
    let a = fill(crate::gpu::a_len(p));
    let b = fill(crate::gpu::b_len(p));
    ops.upload(gpu, &a, &b)?;
    Ok(ops)
}

/// cuBLASLt's autotuned algorithm (graph mode) per problem path, of the call in the
/// problem's own layout, from a catalog bundle's baseline table.
pub(crate) fn autotuned_algos(dir: &Path) -> anyhow::Result<HashMap<String, LtAlgoConfig>> {
    let (index, _) = crate::catalog::bundle::read_bundle(dir).with_context(|| format!("reading the bundle {}", dir.display()))?;
    let mut out = HashMap::new();
    for b in index.baselines.iter().filter(|b| b.library == "cublaslt_autotune" && b.mode == "graph" && b.layout == b.problem.layout.as_str()) {
        let algo = b.config.get("algo").cloned().with_context(|| format!("{}: a cuBLASLt-autotune baseline without its algorithm", b.problem))?;
        out.insert(b.problem.path(), serde_json::from_value(algo).with_context(|| format!("{}: the recorded algorithm", b.problem))?);
    }
    Ok(out)
}

/// `--twins-of`: per problem (its path), the bundle's served Hopper entry (the latest
/// measured, as the service serves it) as its launch runs it, first, then its twins in the
/// latency modes (`_ec`, and the `_2d` and `_2g` grids where it takes them:
/// [`hopper::latency_twins`]).
pub(crate) fn catalog_twins(dir: &Path) -> anyhow::Result<HashMap<String, (Problem, Vec<Candidate>)>> {
    let (index, _) = crate::catalog::bundle::read_bundle(dir).with_context(|| format!("reading the bundle {}", dir.display()))?;
    let mut served: HashMap<String, &crate::catalog::bundle::EntryRecord> = HashMap::new();
    for e in &index.entries {
        let key = e.problem.path();
        if served.get(&key).is_none_or(|s| s.run.measured_at < e.run.measured_at) {
            served.insert(key, e);
        }
    }
    Ok(served
        .into_iter()
        .filter_map(|(key, e)| {
            let [launch] = &e.manifest.launches[..] else { return None };
            let (cfg, _, _) = hopper::HopperConfig::of_launch(launch, &e.problem)?;
            let twins = hopper::latency_twins(&cfg);
            (!twins.is_empty()).then(|| (key, (e.problem, std::iter::once(cfg).chain(twins).map(Candidate::Hopper).collect())))
        })
        .collect())
}

/// Loaded modules by entry name (it names the code, accumulator and layout).
pub(crate) type Modules = HashMap<String, LoadedPtx>;

/// How one problem is timed: every candidate too (the exhaustive samples), and against
/// which cuBLASLt algorithm (None: its heuristic choice).
#[derive(Clone, Copy)]
pub(crate) struct Timing<'a> {
    pub(crate) exhaustive: bool,
    pub(crate) reference: Option<&'a LtAlgoConfig>,
}

/// Most candidates the final round re-times.
const FINALISTS: usize = 4;
/// Rounds of the final round: each times the reference afresh, then each finalist once.
const FINAL_ROUNDS: usize = 5;
/// Finalists are the candidates whose estimate is within this fraction of the best one's.
const FINAL_WITHIN: f64 = 0.05;

/// A reward from a time: `reference_us / us`, NaN where the time is not positive (the
/// candidate failed).
fn reward_of(reference_us: f64, us: f64) -> f64 {
    if us > 0.0 { reference_us / us } else { f64::NAN }
}

/// Tunes one problem on the GPU: the bandit's search (and the exhaustive pass), then a final
/// round that re-times the best few candidates ([`finalists`]) against a reference timed
/// afresh in each of its rounds, and picks by median ([`pick_final`]).
pub(crate) fn tune_one(gpu: &Gpu, modules: &Modules, p: &Problem, space: &[Candidate], priors: &[(usize, f64, f64)], settings: UcbSettings, timing: Timing) -> anyhow::Result<ProblemResult> {
    let Timing { exhaustive, reference } = timing;
    let started = Instant::now();
    let sm = gpu.facts().sm_count;
    // One workspace per set, zeroed once, serves every split-K candidate (each leaves it zero).
    let workspace = space.iter().map(|c| c.workspace_bytes(p)).max().unwrap_or(0);
    let sets = (0..TUNE_SETS).map(|_| random_operands(gpu, p, workspace)).collect::<anyhow::Result<Vec<_>>>()?;
    let references = sets
        .iter()
        .map(|ops| match reference {
            Some(config) => LtGemm::from_config(gpu, ops, config),
            None => LtGemm::top1(gpu, ops),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let reference_us = time_us(gpu, &references, 0.0)?;
    // A candidate's time in µs, NaN where it failed.
    let time_of = |i: usize| -> f64 {
        let cfg = &space[i];
        let Some(module) = modules.get(&cfg.entry(p.acc, p.layout)) else {
            tracing::warn!(config = %cfg.label(), problem = %p, "candidate has no loaded module");
            return f64::NAN;
        };
        let manifest = cfg.manifest(p, sm);
        let timed = sets.iter().map(|ops| PreparedManifest::new(gpu, module, &manifest, ops)).collect::<Result<Vec<_>, _>>().and_then(|preps| time_us(gpu, &preps, reference_us));
        match timed {
            Ok(us) => us,
            Err(e) => {
                tracing::warn!(config = %cfg.label(), problem = %p, error = %e, "candidate failed");
                f64::NAN
            }
        }
    };
    let measure = |i: usize| -> f64 { reward_of(reference_us, time_of(i)) };
    let mut ucb = Ucb::new(space.len(), priors, settings);
    while let Some(i) = ucb.next() {
        let r = measure(i);
        ucb.record(i, r);
    }
    let mut ex: Vec<(Candidate, Vec<f64>)> = Vec::new();
    if exhaustive {
        for (i, cfg) in space.iter().enumerate() {
            ex.push((*cfg, (0..3).map(|_| measure(i)).map(|r| if r.is_finite() { r } else { 0.0 }).collect()));
        }
    }
    let (best, reward) = ucb.best().ok_or_else(|| anyhow::anyhow!("no candidate ran for {p}"))?;
    let (searched, searched_reward) = pick_winner((space[best], reward), &ex);
    // The final round: the finalists by the bandit's means and the exhaustive medians
    // (`ex` is in space order), the search's own pick first.
    let mut estimates: Vec<(usize, f64)> = ucb.means().into_iter().map(|(i, m, _)| (i, m)).collect();
    estimates.extend(ex.iter().enumerate().filter_map(|(i, (_, s))| crate::bench::stats::median(s).map(|m| (i, m))));
    let mut chosen = finalists(&estimates, FINALISTS, FINAL_WITHIN);
    if let Some(at) = chosen.iter().position(|&i| space[i] == searched) {
        chosen[..=at].rotate_right(1);
    }
    let mut retimed: Vec<(Candidate, Vec<f64>)> = chosen.iter().map(|&i| (space[i], Vec::with_capacity(FINAL_ROUNDS))).collect();
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(FINAL_ROUNDS); chosen.len()];
    for _ in 0..(if chosen.is_empty() { 0 } else { FINAL_ROUNDS }) {
        // A failed reference makes the round's rewards 0 for every finalist alike.
        let round_us = time_us(gpu, &references, 0.0).unwrap_or_else(|e| {
            tracing::warn!(problem = %p, error = %e, "reference failed in the final round");
            f64::NAN
        });
        for (k, &i) in chosen.iter().enumerate() {
            let us = time_of(i);
            let r = reward_of(round_us, us);
            retimed[k].1.push(if r.is_finite() { r } else { 0.0 });
            times[k].push(us);
        }
    }
    let (winner, reward, winner_us) = match pick_final(&retimed) {
        Some((c, median)) => {
            let k = retimed.iter().position(|(r, _)| *r == c).expect("the pick is a finalist");
            let ok: Vec<f64> = times[k].iter().copied().filter(|us| us.is_finite() && *us > 0.0).collect();
            (c, median, crate::bench::stats::median(&ok).unwrap_or(reference_us / median))
        }
        None => (searched, searched_reward, reference_us / searched_reward),
    };
    // What later shapes are seeded with: the bandit's means, and the exhaustive means
    // where there are any (they cover every arm).
    let mut arms: Vec<(Candidate, f64, usize)> = ucb.means().into_iter().map(|(i, m, n)| (space[i], m, n)).collect();
    for (cfg, samples) in &ex {
        if !arms.iter().any(|(c, _, _)| c == cfg) && !samples.is_empty() {
            arms.push((*cfg, samples.iter().sum::<f64>() / samples.len() as f64, samples.len()));
        }
    }
    Ok(ProblemResult {
        problem: *p,
        winner,
        reward,
        reference_us,
        winner_us,
        pulls: ucb.pulls(),
        arms,
        priors: priors.iter().map(|&(i, r, w)| (space[i], r, w)).collect(),
        exhaustive: ex,
        retimed,
        seconds: started.elapsed().as_secs_f64(),
        buffer_sets: TUNE_SETS,
    })
}

/// The search's pick, before the final round: the bandit's pick, unless the exhaustive
/// samples (where the problem has them) time another candidate faster at the median of
/// its three, in which case that one, with its median reward. The winner is this pick
/// only where the final round ([`pick_final`]) has no finalist with a positive median.
fn pick_winner(bandit: (Candidate, f64), exhaustive: &[(Candidate, Vec<f64>)]) -> (Candidate, f64) {
    let best = exhaustive.iter().filter_map(|(c, s)| crate::bench::stats::median(s).filter(|m| m.is_finite()).map(|m| (*c, m))).max_by(|a, b| a.1.total_cmp(&b.1));
    match best {
        Some((c, m)) if m > bandit.1 => (c, m),
        _ => bandit,
    }
}

/// The final round's candidates (space indices), best first: of `estimates` (arm,
/// estimated reward; an arm may appear more than once, and then counts at its best), the
/// finite, positive ones within `within` of the best (at least `(1 − within) × best`),
/// at most `max` of them. Ties go to the lower index.
fn finalists(estimates: &[(usize, f64)], max: usize, within: f64) -> Vec<usize> {
    let mut best: BTreeMap<usize, f64> = BTreeMap::new();
    for &(i, e) in estimates.iter().filter(|(_, e)| e.is_finite() && *e > 0.0) {
        let b = best.entry(i).or_insert(e);
        *b = b.max(e);
    }
    let top = best.values().copied().fold(0.0, f64::max);
    let mut out: Vec<(usize, f64)> = best.into_iter().filter(|&(_, e)| e >= (1.0 - within) * top).collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.into_iter().take(max).map(|(i, _)| i).collect()
}

/// The final round's winner: the finalist with the best median of its round rewards (the
/// earlier one on a tie, so the search's own pick keeps a tie), and that median. A median,
/// not a mean, so one lucky round does not decide. None without a finalist whose median is
/// finite and positive.
fn pick_final(retimed: &[(Candidate, Vec<f64>)]) -> Option<(Candidate, f64)> {
    let mut out: Option<(Candidate, f64)> = None;
    for (c, samples) in retimed {
        let Some(m) = crate::bench::stats::median(samples).filter(|m| m.is_finite() && *m > 0.0) else { continue };
        if out.is_none_or(|(_, b)| m > b) {
            out = Some((*c, m));
        }
    }
    out
}

/// The progress line's note on the final round: how many finalists it re-timed, and the
/// search's own pick (the first finalist) where the round picked another.
pub(crate) fn retime_note(r: &ProblemResult) -> String {
    let mut s = format!("re-timed {}", r.retimed.len());
    if let Some((first, _)) = r.retimed.first().filter(|(c, _)| *c != r.winner) {
        s += &format!(", picked over {}", first.label());
    }
    s
}

/// Geometric-mean reward and win counts of the state, per layout.
pub fn summary(state: &TuneState) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "tuned on {} ({}): {} problem(s)", state.gpu, state.device_class, state.results.len());
    let _ = writeln!(s, "{:<8} {:>8} {:>22} {:>10}", "layout", "problems", "geomean × heuristic", "≥ 1.0");
    for layout in Layout::ALL {
        let r: Vec<f64> = state.results.values().filter(|r| r.problem.layout == layout).map(|r| r.reward).collect();
        if r.is_empty() {
            continue;
        }
        let g = crate::bench::stats::geomean(&r).unwrap_or(f64::NAN);
        let _ = writeln!(s, "{:<8} {:>8} {:>22.3} {:>10}", layout.as_str(), r.len(), g, r.iter().filter(|x| **x >= 1.0).count());
    }
    s
}

/// Search efficiency on the problems with exhaustive samples: pulls the bandit (seeded as
/// it was live, replayed over the recorded samples) and random search need before the arm
/// they would pick is within 98% of the exhaustive best.
pub fn efficiency_report(state: &TuneState, live: &UcbSettings) -> String {
    use std::fmt::Write as _;
    let (mut bandit, mut random, mut n, mut never) = (Vec::new(), Vec::new(), 0usize, 0usize);
    let (mut final_quality, mut bandit_pulls, mut arms_seen) = (Vec::new(), Vec::new(), Vec::new());
    for r in state.results.values().filter(|r| !r.exhaustive.is_empty()) {
        let Exhaustive { space, samples, truth, best } = Exhaustive::of(r);
        let index: HashMap<Candidate, usize> = space.iter().enumerate().map(|(i, c)| (*c, i)).collect();
        let reach = |picks: &[usize]| picks.iter().position(|&i| truth[i] >= 0.98 * best).map(|p| p + 1);
        let priors: Vec<(usize, f64, f64)> = r.priors.iter().filter_map(|(c, m, w)| index.get(c).map(|&i| (i, *m, *w))).collect();
        let picks = search::replay_ucb(&samples, &priors, UcbSettings { max_pulls: 10 * space.len(), order_seed: Some(order_seed(&r.problem)), ..Default::default() });
        if let Some(&last) = picks.last() {
            final_quality.push(truth[last] / best);
            bandit_pulls.push(picks.len() as f64);
        }
        match reach(&picks) {
            Some(k) => bandit.push(k as f64),
            None => never += 1,
        }
        let mean_random: f64 = (0..20u64).map(|seed| reach(&search::replay_order(&samples, &search::random_order(space.len(), seed))).unwrap_or(space.len()) as f64).sum::<f64>() / 20.0;
        random.push(mean_random);
        arms_seen.push(space.len() as f64);
        n += 1;
    }
    let mean = |v: &[f64]| if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 };
    let mut s = String::new();
    let _ = writeln!(s, "search efficiency over {n} problem(s) with exhaustive samples ({:.1} candidates on average, 3 timings each):", mean(&arms_seen));
    let _ = writeln!(s, "  evaluations to reach 98% of the exhaustive best: bandit {:.1} (it stopped short of 98% on {never}), random {:.1} (mean of 20 orders), exhaustive {:.1}", mean(&bandit), mean(&random), 3.0 * mean(&arms_seen));
    let worst = final_quality.iter().copied().fold(f64::INFINITY, f64::min);
    let _ = writeln!(s, "  the bandit stopped after {:.1} evaluations on average; its pick is {:.1}% of the exhaustive best on average, {:.1}% at worst", mean(&bandit_pulls), 100.0 * mean(&final_quality), 100.0 * worst);
    let (capped, pulls): (Vec<f64>, Vec<f64>) = capped_run(state, live).into_iter().unzip();
    if !capped.is_empty() {
        let worst = capped.iter().copied().fold(f64::INFINITY, f64::min);
        let within = capped.iter().filter(|&&q| q >= 0.98).count();
        let _ = writeln!(
            s,
            "  as a live run capped at {} pulls, patience {} (each problem seeded only by the bandit's own measurements of the problems before it, smallest first): {:.1} pulls on average; its pick is {:.1}% of the exhaustive best on average, {:.1}% at worst, within 98% on {within} of {}",
            live.max_pulls,
            live.patience,
            mean(&pulls),
            100.0 * mean(&capped),
            100.0 * worst,
            capped.len()
        );
    }
    s
}

/// The SM count the report takes the search's own space at (the H100 SXM's; a state does not
/// record it, and only split counts and the skinny filters depend on it).
pub(crate) const REPORT_SM_COUNT: u32 = 132;

/// What kind of code a candidate is, for the report: the family's features that a trial
/// adds or the search varies, joined by `+` (e.g. `ping-pong+cluster+TMA store+dr`; `dr`
/// for stepped descriptors, `du` for uniform ones).
pub fn kind(c: &Candidate) -> String {
    let mut tags: Vec<&str> = Vec::new();
    match c {
        Candidate::Gemv(_) => tags.push("gemv"),
        Candidate::Mma(m) => {
            tags.push(if m.stages >= 6 { "mma deep ring" } else { "mma" });
            if m.split > 1 {
                tags.push("split-K");
            }
        }
        Candidate::Hopper(h) => {
            tags.push(if h.consumer_mode == ConsumerMode::PingPong {
                "ping-pong"
            } else if h.consumer_mode == ConsumerMode::KSplit {
                "K split"
            } else if h.consumer_mode == ConsumerMode::ColSplit && h.split > 1 {
                "split-K col-split"
            } else if h.consumer_mode == ConsumerMode::ColSplit {
                "col-split"
            } else if h.split > 1 {
                "split-K"
            } else if h.bn < 64 {
                "narrow"
            } else {
                "cooperative"
            });
            if h.cluster_size() > 1 {
                tags.push("cluster");
            }
            if h.chains > 1 {
                tags.push("chains");
            }
            if h.epilogue == Epilogue::TmaStore {
                tags.push("TMA store");
            }
            match h.bk {
                128 => tags.push("K 128"),
                256 => tags.push("K 256"),
                _ => {}
            }
            if h.desc == DescMode::Stepped {
                tags.push("dr");
            } else if h.desc != DescMode::Plain {
                tags.push("du");
            }
        }
    }
    tags.join("+")
}

/// Which kind of code was the exhaustive best, per problem with exhaustive samples, and by
/// how much it beat the best candidate of the search's own space ([`space_for`], both
/// families): a `--trial`'s verdict. Timings are the tuner's mean rewards (× cuBLASLt's
/// heuristic choice, graph mode, side by side).
pub fn kinds_report(state: &TuneState, sm_count: u32) -> String {
    use std::fmt::Write as _;
    let families = [Family::Hopper, Family::Mma, Family::Gemv];
    let mut by: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let (mut gains, mut outside) = (Vec::new(), 0usize);
    for r in state.results.values().filter(|r| !r.exhaustive.is_empty()) {
        let Exhaustive { space, truth, best, .. } = Exhaustive::of(r);
        let Some(top) = truth.iter().position(|&t| t == best) else { continue };
        let searched: std::collections::HashSet<Candidate> = space_for(&r.problem, &families, sm_count).into_iter().collect();
        let best_searched = space.iter().zip(&truth).filter(|(c, _)| searched.contains(c)).map(|(_, &t)| t).fold(0.0, f64::max);
        let gain = if best_searched > 0.0 { best / best_searched } else { f64::NAN };
        if !searched.contains(&space[top]) {
            outside += 1;
        }
        gains.push(gain);
        by.entry(kind(&space[top])).or_default().push(gain);
    }
    let mut s = String::new();
    if gains.is_empty() {
        return s;
    }
    let g = |v: &[f64]| crate::bench::stats::geomean(&v.iter().copied().filter(|x| x.is_finite()).collect::<Vec<_>>()).unwrap_or(f64::NAN);
    let _ = writeln!(s, "exhaustive bests by kind of code, over {} problem(s) ({outside} best outside the search's own space; × its best: geomean {:.4}):", gains.len(), g(&gains));
    let mut rows: Vec<(&String, &Vec<f64>)> = by.iter().collect();
    rows.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));
    for (k, v) in rows {
        let top = v.iter().copied().filter(|x| x.is_finite()).fold(f64::NAN, f64::max);
        let _ = writeln!(s, "  {k:<36} best on {:>4}; × the search's best there: geomean {:.4}, at most {:.4}", v.len(), g(v), top);
    }
    s
}

/// A problem's exhaustive samples: its own candidates, in the order the live search
/// indexed them (split-K candidates differ from problem to problem), their timings, their
/// mean rewards and the best of those.
struct Exhaustive {
    space: Vec<Candidate>,
    samples: Vec<Vec<f64>>,
    truth: Vec<f64>,
    best: f64,
}

impl Exhaustive {
    fn of(r: &ProblemResult) -> Exhaustive {
        let space = r.exhaustive.iter().map(|(c, _)| *c).collect();
        let samples: Vec<Vec<f64>> = r.exhaustive.iter().map(|(_, s)| s.clone()).collect();
        let truth: Vec<f64> = samples.iter().map(|s| if s.is_empty() { 0.0 } else { s.iter().sum::<f64>() / s.len() as f64 }).collect();
        let best = truth.iter().copied().fold(0.0, f64::max);
        Exhaustive { space, samples, truth, best }
    }
}

/// The seed of a problem's order of untried arms: FNV-1a of its path, stable across runs
/// and builds, so a resumed or replayed run makes the same choices.
pub(crate) fn order_seed(p: &Problem) -> u64 {
    p.path().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Replays a whole live run over the problems with exhaustive samples, in the order the
/// tuner takes them (smallest first): each problem's bandit, capped at `max_pulls`, is
/// seeded by what the bandits of the problems before it measured (not by their
/// exhaustive samples, which a live run does not have). So it shows what the full-space
/// replay above cannot: a run that stops exploring once its first problems have seeded
/// it. Returns each problem's pick as a fraction of its exhaustive best, and its pulls.
fn capped_run(state: &TuneState, live: &UcbSettings) -> Vec<(f64, f64)> {
    let mut order: Vec<&ProblemResult> = state.results.values().filter(|r| !r.exhaustive.is_empty()).collect();
    order.sort_by(|a, b| a.problem.shape().flops().total_cmp(&b.problem.shape().flops()).then(a.problem.cmp(&b.problem)));
    let mut seen = TuneState::default();
    let mut quality = Vec::new();
    for r in order {
        let Exhaustive { space, samples, truth, best } = Exhaustive::of(r);
        let settings = UcbSettings { order_seed: Some(order_seed(&r.problem)), ..live.clone() };
        let (picks, ucb) = search::replay(&samples, &priors_for(&r.problem, &seen, &space), settings);
        let Some((pick, _)) = ucb.best() else { continue };
        if best > 0.0 {
            quality.push((truth[pick] / best, picks.len() as f64));
        }
        let arms = ucb.means().into_iter().map(|(i, m, n)| (space[i], m, n)).collect();
        seen.results.insert(r.problem.path(), ProblemResult { arms, exhaustive: Vec::new(), ..r.clone() });
    }
    quality
}

/// The winners at or above `threshold` (the best `limit` of them), grouped by code and
/// configuration: one submission each. Winners of one code that launch it differently
/// (split count, persistent grid, L2 promotion) go apart, so that each submission's
/// description, which names the configuration, is true of every entry it makes. Keyed
/// by the entry (code, accumulator and layout) and the exact configuration; each group's
/// problems best first, and the groups in the order of their best winner: the service
/// verifies in submission order, so a verification cut short by time has measured the
/// fastest winners, not the alphabetically first codes.
pub(crate) fn submission_groups(state: &TuneState, threshold: f64, limit: Option<usize>) -> Vec<((String, Candidate), Vec<Problem>)> {
    let mut groups: Vec<((String, Candidate), Vec<Problem>)> = Vec::new();
    let mut at: HashMap<(String, Candidate), usize> = HashMap::new();
    let mut chosen: Vec<&ProblemResult> = state.results.values().filter(|r| r.reward >= threshold).collect();
    chosen.sort_by(|a, b| b.reward.total_cmp(&a.reward).then(a.problem.cmp(&b.problem)));
    chosen.truncate(limit.unwrap_or(usize::MAX));
    for r in chosen {
        let key = (r.winner.entry(r.problem.acc, r.problem.layout), r.winner);
        let i = *at.entry(key.clone()).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(r.problem);
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::Shape;

    fn p(m: u32, n: u32, k: u32) -> Problem {
        Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).unwrap())
    }


    #[test]
    fn a_ptx_dir_is_used_only_with_this_binarys_templates_stamp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = check_ptx_dir(dir.path()).expect_err("no stamp");
        assert!(format!("{e:#}").contains("has no templates.sha256"), "{e:#}");
        std::fs::write(dir.path().join(TEMPLATES_STAMP), "0".repeat(64)).expect("write");
        let e = check_ptx_dir(dir.path()).expect_err("another revision");
        assert!(format!("{e:#}").contains("compiled from other templates"), "{e:#}");
        std::fs::write(dir.path().join(TEMPLATES_STAMP), templates_digest() + "\n").expect("write");
        check_ptx_dir(dir.path()).expect("this binary's stamp");
        // An entry found there is read, not compiled (no NVRTC needed); one not there is compiled.
        let c = Candidate::Hopper(HopperConfig::new(128, 128, 4, 2));
        std::fs::write(dir.path().join(format!("{}.ptx", c.entry(Acc::F32, Layout::Tn))), "// prebuilt").expect("write");
        assert_eq!(ptx_for(Some(dir.path()), &c, Arch::Sm90, Acc::F32, Layout::Tn).expect("read"), "// prebuilt");
        assert_eq!(templates_digest().len(), 64);
    }

    #[test]
    fn neighbours_seed_the_bandit_by_closeness() {
        let space: Vec<Candidate> = hopper::space().into_iter().map(Candidate::Hopper).collect();
        let mut state = TuneState::default();
        let r = |prob: Problem, reward: f64| ProblemResult {
            problem: prob,
            winner: space[0],
            reward,
            reference_us: 1.0,
            winner_us: 1.0,
            pulls: 1,
            arms: vec![(space[0], reward, 1), (space[3], reward / 2.0, 1)],
            priors: vec![],
            exhaustive: vec![],
            retimed: vec![],
            seconds: 0.0,
            buffer_sets: TUNE_SETS,
        };
        state.results.insert(p(1024, 1024, 1024).path(), r(p(1024, 1024, 1024), 1.1));
        state.results.insert(p(64, 64, 64).path(), r(p(64, 64, 64), 0.5));
        let priors = priors_for(&p(2048, 1024, 1024), &state, &space);
        assert_eq!(priors.len(), 2, "only the near shape seeds: {priors:?}");
        assert_eq!(priors[0], (0, 1.1, 0.5));
        assert!(distance(&p(64, 64, 64), &p(16384, 64, 64)) == 8.0);
    }

    /// `--twins-of`: each served Hopper entry of the shipped bundle is followed by the same
    /// code in the latency modes: with `_ec`, on the 2-D and grouped grids where it takes
    /// them (an entry already on one of them gets the other), the same launch but for the
    /// entry's name and grid, the same configuration but for those modes, all rebuilt from
    /// the bundle's names.
    #[test]
    fn catalog_twins_pair_served_entries_with_their_latency_twins() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/h100");
        let twins = catalog_twins(&dir).unwrap();
        assert!(twins.len() > 100, "{}", twins.len());
        let (index, _) = crate::catalog::bundle::read_bundle(&dir).unwrap();
        let (mut on_2d, mut to_2g) = (0, 0);
        for (key, (p, codes)) in &twins {
            assert_eq!(&p.path(), key);
            let hopper: Vec<HopperConfig> = codes.iter().map(|c| c.hopper().unwrap_or_else(|| panic!("{key}: not Hopper codes"))).collect();
            let (a, rest) = hopper.split_first().unwrap();
            let one_tile = HopperConfig { grid: TileGrid::Linear, ..*a }.takes_grid2d();
            assert_eq!(rest.len(), if one_tile { 2 - usize::from(a.grid.one_tile()) } else { 1 }, "{key}");
            on_2d += usize::from(a.grid == TileGrid::TwoD);
            let (ma, served) = (a.manifest(p, 132), index.entries.iter().filter(|e| &e.problem.path() == key).max_by_key(|e| e.run.measured_at).unwrap());
            assert_eq!(served.manifest, ma, "{key}: the entry's configuration launches as the shipped manifest does");
            let base = ma.launches[0].entry.trim_end_matches("_2d").trim_end_matches("_2g").trim_end_matches("_ec").to_string();
            for b in rest {
                assert!(b.early_coords && b != a && b.grid.one_tile() == one_tile, "{key}");
                assert_eq!(HopperConfig { early_coords: a.early_coords, grid: a.grid, ..*b }, *a, "{key}");
                to_2g += usize::from(b.grid == TileGrid::Grouped);
                let mb = b.manifest(p, 132);
                let grid = if b.grid == TileGrid::TwoD { "_2d" } else if b.grid == TileGrid::Grouped { "_2g" } else { "" };
                assert_eq!(mb.launches[0].entry, format!("{base}_ec{grid}"), "{key}");
                if b.grid.one_tile() {
                    // The same tiles, one a CTA (the grouped grid's last group may add idle CTAs).
                    let [x, y, z] = mb.launches[0].grid;
                    assert!(x * y * z >= p.m.div_ceil(a.bm) * p.n.div_ceil(a.bn), "{key}");
                }
                let mut renamed = mb.clone();
                renamed.launches[0].entry.clone_from(&ma.launches[0].entry);
                renamed.launches[0].grid = ma.launches[0].grid;
                assert_eq!(renamed, ma, "{key}: the twin launches as the entry does");
                assert_eq!(HopperConfig::of_launch(&mb.launches[0], p).map(|(c, _, _)| c), Some(*b), "{key}");
            }
        }
        assert!(on_2d > 100 && to_2g > on_2d, "the one-tile codes take both grids: {on_2d} entries on `_2d`, {to_2g} `_2g` twins");
    }

    /// Winners of one code that launch it differently are submitted apart, so each
    /// submission's description names what every one of its entries launches; winners of
    /// one configuration share a submission, and the threshold and limit pick the best.
    #[test]
    fn winners_are_submitted_per_code_and_configuration() {
        let base = HopperConfig::new(64, 64, 4, 1);
        let split = |s: u32| Candidate::Hopper(HopperConfig { split: s, reduction: Reduction::Atomic, ..base });
        let wide = Candidate::Hopper(HopperConfig { l2_256: true, ..base });
        let mut state = TuneState::default();
        for (prob, winner, reward) in [
            (p(64, 128, 4096), split(16), 1.2),
            (p(64, 256, 4096), split(16), 1.1),
            (p(64, 512, 4096), split(8), 1.05),
            (p(128, 128, 4096), Candidate::Hopper(base), 1.3),
            (p(128, 256, 4096), wide, 1.01),
            (p(256, 256, 4096), wide, 0.4),
        ] {
            let r = ProblemResult { problem: prob, winner, reward, reference_us: 1.0, winner_us: 1.0, pulls: 1, arms: vec![], priors: vec![], exhaustive: vec![], retimed: vec![], seconds: 0.0, buffer_sets: TUNE_SETS };
            state.results.insert(prob.path(), r);
        }
        let groups = submission_groups(&state, 0.5, None);
        let entries: std::collections::HashSet<&String> = groups.iter().map(|((e, _), _)| e).collect();
        assert_eq!(entries.len(), 2, "two codes (split and plain): {groups:?}");
        assert_eq!(groups.len(), 4, "four configurations: {groups:?}");
        for ((_, cfg), problems) in &groups {
            for prob in problems {
                assert_eq!(state.results[&prob.path()].winner.label(), cfg.label(), "{prob}");
            }
        }
        // The fastest winner's group first (1.3), then 1.2 (with its 1.1), 1.05, 1.01.
        let order: Vec<Candidate> = groups.iter().map(|((_, c), _)| *c).collect();
        assert_eq!(order, vec![Candidate::Hopper(base), split(16), split(8), wide]);
        assert_eq!(groups[1].1, vec![p(64, 128, 4096), p(64, 256, 4096)]);
        assert_eq!(groups.iter().map(|(_, v)| v.len()).sum::<usize>(), 5, "the 0.4 winner stays out");
        let best = submission_groups(&state, 0.5, Some(2));
        assert_eq!(best.iter().flat_map(|(_, v)| v).copied().collect::<std::collections::BTreeSet<_>>(), [p(128, 128, 4096), p(64, 128, 4096)].into());
    }

    /// The tuner loads one module per code of [`codes`] and times a candidate only if its
    /// entry is among them: a candidate whose code is missing there never runs. The
    /// cluster split-K codes were missing for a session, and every `_skc` arm timed 0
    /// without a word (now a warning names the candidate).
    /// `--reference-bundle`: the shipped H100 bundle names cuBLASLt's autotuned algorithm for
    /// every problem of the grid in both layouts, each with its configuration attributes.
    #[test]
    fn the_shipped_bundle_names_an_autotuned_algorithm_per_problem() {
        let table = autotuned_algos(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/h100"))).unwrap();
        assert_eq!(table.len(), 2000);
        let algo = &table[&p(8192, 8192, 8192).path()];
        assert_eq!(algo.words.len(), 8);
        assert!(algo.attributes.contains_key("tile_id") && algo.attributes.contains_key("splitk_num"), "{algo:?}");
        assert!(autotuned_algos(Path::new("no-such-bundle")).is_err());
    }

    #[test]
    fn every_candidate_of_the_grid_has_a_code_to_load() {
        let families = [Family::Hopper, Family::Mma];
        for layout in Layout::ALL {
            let entries: std::collections::HashSet<String> = codes(&families, Arch::Sm90, Acc::F32, layout).iter().map(|c| c.entry(Acc::F32, layout)).collect();
            let mut split = 0;
            let sizes = [64u32, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384];
            let shapes: Vec<(u32, u32, u32)> = sizes.iter().flat_map(|&m| sizes.iter().flat_map(move |&n| sizes.map(move |k| (m, n, k)))).collect();
            for (m, n, k) in shapes {
                let prob = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).unwrap());
                for c in space_for(&prob, &families, 132) {
                    assert!(entries.contains(&c.entry(Acc::F32, layout)), "{prob}: {} has no code to load", c.label());
                    split += usize::from(c.split());
                }
            }
            assert!(split > 0, "the grid has split-K candidates");
        }
    }

    /// `--trial` adds codes the search leaves out, and loads a module for each: K split
    /// across consumers on the skinny f32 shapes only, the 256×160 tile on tn only.
    #[test]
    fn the_search_builds_stepped_descriptors_into_every_code() {
        let hopper = [Family::Hopper, Family::Mma];
        let p = |layout, m, n, k| Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).unwrap());
        for prob in [p(Layout::Tn, 8192, 8192, 8192), p(Layout::Nn, 2048, 512, 2048), p(Layout::Tn, 64, 512, 8192)] {
            let space: Vec<HopperConfig> = space_for(&prob, &hopper, 132).iter().filter_map(Candidate::hopper).collect();
            assert!(space.iter().all(|h| h.desc != DescMode::Plain && h.desc == DescMode::Stepped), "{prob}");
            if prob.m == 8192 {
                assert!(space.iter().any(|h| h.consumers == 2 && h.consumer_mode != ConsumerMode::PingPong && h.consumer_mode != ConsumerMode::KSplit), "{prob}: the cooperative codes too");
            }
            // The trial adds each one's twins in the two other modes, and only those.
            let with = space_with(&prob, &hopper, &[Trial::Du], 132);
            let added: Vec<HopperConfig> = with.iter().filter_map(Candidate::hopper).filter(|h| !space.contains(h)).collect();
            assert_eq!(added.len(), 2 * space.len(), "{prob}");
            assert!(space.iter().all(|h| hopper::desc_twins(h).iter().all(|t| added.contains(t))), "{prob}");
        }
        // The modules: every searched code is loaded in the search's mode, and the trial's
        // twins beside them; the shipped catalog's plain and `_du` codes still rebuild from
        // their names.
        let loaded = codes(&hopper, Arch::Sm90, Acc::F32, Layout::Tn);
        assert!(loaded.iter().filter_map(Candidate::hopper).all(|h| h.desc == DescMode::Stepped));
        let entries = |cs: &[Candidate]| cs.iter().map(|c| c.entry(Acc::F32, Layout::Tn)).collect::<std::collections::BTreeSet<_>>();
        let twins: Vec<Candidate> = loaded.iter().flat_map(|c| c.hopper().map_or(vec![*c], |h| hopper::desc_twins(&h).into_iter().map(Candidate::Hopper).collect())).collect();
        let all: std::collections::BTreeSet<String> = entries(&loaded).union(&entries(&twins)).cloned().collect();
        assert!(all.len() > entries(&loaded).len());
        assert_eq!(entries(&codes_with(&hopper, &[Trial::Du], Arch::Sm90, Acc::F32, Layout::Tn)), all);
    }

    /// Every code the search and the trials load parses back from its entry name through
    /// the one parser, as the same candidate; other names parse to none.
    #[test]
    fn every_loaded_code_parses_back_from_its_entry() {
        let all = [Family::Hopper, Family::Mma, Family::Gemv];
        let trials = [Trial::Swap, Trial::Narrow8, Trial::StreamK, Trial::Ksplit];
        for layout in Layout::ALL {
            for c in codes_with(&all, &trials, Arch::Sm90, Acc::F32, layout) {
                let entry = c.entry(Acc::F32, layout);
                let (back, acc, l) = Candidate::from_entry(&entry).unwrap_or_else(|| panic!("{entry} does not parse"));
                assert_eq!((back.entry(acc, l), acc, l), (entry.clone(), Acc::F32, layout));
                assert!(c.defines(Acc::F32, layout).contains(&("KAAS_ENTRY".to_string(), entry)));
            }
        }
        for name in ["kaas_simple_hgemm_f32_tn_128x128x32_w2x4", "kaas_wgmma_f32_tn_64x64", "hgemm", ""] {
            assert!(Candidate::from_entry(name).is_none(), "{name}");
        }
    }

    #[test]
    fn trials_add_their_codes_to_the_space_and_the_modules() {
        let hopper = [Family::Hopper];
        let skinny = p(64, 512, 1024);
        let plain = space_for(&skinny, &hopper, 132);
        let with = space_with(&skinny, &hopper, &[Trial::Ksplit], 132);
        let added: Vec<&Candidate> = with.iter().filter(|c| !plain.contains(c)).collect();
        // And the pairs along N (one tile row of 64: none along M), both grids.
        assert_eq!(added.len(), hopper::ksplit_codes().len() + 4, "{added:?}");
        assert!(added.iter().all(|c| matches!(c, Candidate::Hopper(h) if h.consumer_mode == ConsumerMode::KSplit)));
        assert_eq!(space_with(&p(4096, 4096, 4096), &hopper, &[Trial::Ksplit], 132).len(), space_for(&p(4096, 4096, 4096), &hopper, 132).len(), "not skinny");
        assert!(space_with(&skinny, &[Family::Mma], &[Trial::Ksplit], 132).iter().all(|c| matches!(c, Candidate::Mma(_))), "Hopper codes need the Hopper family");
        let f16 = Problem::new(Arch::Sm90, Acc::F16, Layout::Tn, Shape::new(64, 512, 1024).unwrap());
        assert_eq!(space_with(&f16, &hopper, &[Trial::Ksplit], 132).len(), space_for(&f16, &hopper, 132).len(), "fp32 partials");
        let nn = Problem::new(Arch::Sm90, Acc::F32, Layout::Nn, Shape::new(8192, 8192, 8192).unwrap());
        assert!(space_with(&nn, &hopper, &[Trial::Wide160], 132).iter().all(|c| !matches!(c, Candidate::Hopper(h) if h.bn == 160)), "tn only");
        // Every trial alone, each beside a twin trial, and all at once: each candidate has a
        // module (the twin trials twin the other trials' codes too).
        let all = [Trial::Ksplit, Trial::Chains, Trial::Multicast, Trial::MulticastSplit, Trial::Wide160, Trial::L2, Trial::TmaStore, Trial::Bk128, Trial::Bk256, Trial::Narrow8, Trial::Du, Trial::ColSplit, Trial::StreamK, Trial::Swap, Trial::Rows192];
        let twin_trials = [Trial::TmaStore, Trial::Bk128, Trial::Bk256, Trial::Du];
        let mut sets: Vec<Vec<Trial>> = vec![all.to_vec()];
        sets.extend(all.iter().map(|&t| vec![t]));
        sets.extend(all.iter().flat_map(|&t| twin_trials.iter().filter(move |&&w| w != t).map(move |&w| vec![t, w])));
        for (acc, layout) in [Acc::F32, Acc::F16].into_iter().flat_map(|a| Layout::ALL.map(|l| (a, l))) {
            for trials in &sets {
                let entries: std::collections::HashSet<String> = codes_with(&hopper, trials, Arch::Sm90, acc, layout).iter().map(|c| c.entry(acc, layout)).collect();
                for (m, n, k) in [(64, 512, 1024), (8192, 8192, 8192), (1000, 64, 4096), (64, 64, 16384)] {
                    let prob = Problem::new(Arch::Sm90, acc, layout, Shape::new(m, n, k).unwrap());
                    for c in space_with(&prob, &hopper, trials, 132) {
                        assert!(entries.contains(&c.entry(acc, layout)), "{prob} {trials:?}: {} has no code to load", c.label());
                    }
                }
            }
        }
        // A run without trials loads only the 64×8 tiles the search times, in either
        // layout, and none with fp16 accumulators.
        let eight = |acc, layout| codes(&hopper, Arch::Sm90, acc, layout).into_iter().filter_map(|c| c.hopper().filter(|h| h.bn == 8 && !h.swap)).collect::<Vec<_>>();
        let searched_eight: Vec<HopperConfig> = hopper::narrow8_search_codes().into_iter().map(hopper::searched_modes).collect();
        assert!(eight(Acc::F32, Layout::Tn) == searched_eight && eight(Acc::F32, Layout::Nn) == searched_eight);
        assert!(eight(Acc::F16, Layout::Tn).is_empty() && eight(Acc::F16, Layout::Nn).is_empty());
        // And the swap-AB codes of up to 48 tokens, the same on both layouts; 64 tokens and
        // more are the trial's.
        let swapped = |acc, layout| codes(&hopper, Arch::Sm90, acc, layout).into_iter().filter_map(|c| c.hopper().filter(|h| h.swap)).collect::<Vec<_>>();
        let tn = swapped(Acc::F32, Layout::Tn);
        assert!(!tn.is_empty() && tn.iter().all(|h| h.bn <= hopper::SEARCH_SWAP_MAX_M) && swapped(Acc::F32, Layout::Nn) == tn);
        assert!(swapped(Acc::F16, Layout::Tn).iter().all(|h| h.chains == 1 && h.split == 1));
        assert!(codes_with(&hopper, &[Trial::Swap], Arch::Sm90, Acc::F32, Layout::Tn).iter().any(|c| matches!(c, Candidate::Hopper(h) if h.swap && h.bn == 256)));
        assert!(codes_with(&hopper, &[Trial::Narrow8, Trial::Bk256], Arch::Sm90, Acc::F32, Layout::Tn).iter().any(|c| matches!(c, Candidate::Hopper(h) if h.bn == 8 && h.bk == 256)));
        assert!(codes_with(&hopper, &[Trial::Ksplit], Arch::Sm90, Acc::F16, Layout::Tn).iter().all(|c| !matches!(c, Candidate::Hopper(h) if h.consumer_mode == ConsumerMode::KSplit)));
        // Chains come unsplit and with the split counts split-K takes on the problem.
        let long = p(64, 512, 8192);
        let chained: Vec<HopperConfig> = space_with(&long, &hopper, &[Trial::Chains], 132).into_iter().filter_map(|c| match c {
            // (K 64: the search's K-128 twins of them are the K-128 trial's subject.)
            Candidate::Hopper(h) if h.chains > 1 && h.bk == 64 => Some(h),
            _ => None,
        }).collect();
        assert!(chained.iter().any(|h| h.split > 1 && h.reduction.is_atomic()) && chained.iter().any(|h| h.split == 1), "{chained:?}");
        let split: Vec<HopperConfig> = hopper::split_space(&long, 132).into_iter().filter(|c| c.bm == 64 && c.consumers == 1).collect();
        assert_eq!(chained.iter().filter(|h| h.split > 1).count(), split.len());
        // Two chains are in the search already: the trial adds the four-chain codes only,
        // and loads each code once.
        let plain = space_for(&long, &hopper, 132);
        assert!(plain.iter().any(|c| matches!(c, Candidate::Hopper(h) if h.chains == 2)));
        let added: Vec<Candidate> = space_with(&long, &hopper, &[Trial::Chains], 132).into_iter().filter(|c| !plain.contains(c)).collect();
        assert!(!added.is_empty() && added.iter().all(|c| matches!(c, Candidate::Hopper(h) if h.chains == 4)), "{added:?}");
        let loaded = codes_with(&hopper, &[Trial::Chains], Arch::Sm90, Acc::F32, Layout::Tn);
        let unique: std::collections::HashSet<&Candidate> = loaded.iter().collect();
        assert_eq!(unique.len(), loaded.len(), "a code loaded twice");
        // The L2 trial doubles the Hopper candidates with the same codes: one more manifest
        // each, with the other L2 promotion.
        let mid = p(1024, 1024, 128);
        let plain = space_for(&mid, &hopper, 132);
        let with = space_with(&mid, &hopper, &[Trial::L2], 132);
        assert_eq!(with.len(), 2 * plain.len());
        let plain_entries: std::collections::HashSet<String> = plain.iter().map(|c| c.entry(Acc::F32, Layout::Tn)).collect();
        assert!(with.iter().all(|c| plain_entries.contains(&c.entry(Acc::F32, Layout::Tn))), "no new code");
        assert_eq!(codes_with(&hopper, &[Trial::L2], Arch::Sm90, Acc::F32, Layout::Tn).len(), codes(&hopper, Arch::Sm90, Acc::F32, Layout::Tn).len());
        // The multicast trial offers the skinny shapes' clusters on a mid shape too (their
        // modules are the search's own).
        let mid_skinny = p(4096, 512, 1024);
        assert!(!hopper::skinny(&mid_skinny, 132));
        let with = space_with(&mid_skinny, &hopper, &[Trial::Multicast], 132);
        for c in hopper::skinny_cluster_codes().into_iter().chain(hopper::multicast_codes()) {
            assert!(with.contains(&Candidate::Hopper(hopper::searched_modes(HopperConfig { l2_256: hopper::wide_l2_suits(&mid_skinny), ..c }))), "{}", c.label());
        }
        assert_eq!(codes_with(&hopper, &[Trial::Multicast], Arch::Sm90, Acc::F32, Layout::Tn).len(), codes(&hopper, Arch::Sm90, Acc::F32, Layout::Tn).len() + hopper::multicast_codes().len());
        // The TMA-store trial twins the search's unsplit 64-column candidates, grid kept, where
        // the search does not already (fp16 accumulators; with fp32 ones it does).
        let big = Problem::new(Arch::Sm90, Acc::F16, Layout::Nn, Shape::new(8192, 8192, 8192).unwrap());
        assert!(space_for(&p(8192, 8192, 8192), &hopper, 132).iter().any(|c| matches!(c, Candidate::Hopper(h) if h.epilogue == Epilogue::TmaStore)));
        assert!(!space_for(&big, &hopper, 132).iter().any(|c| matches!(c, Candidate::Hopper(h) if h.epilogue == Epilogue::TmaStore)));
        let plain = space_for(&big, &hopper, 132);
        let twins: Vec<Candidate> = space_with(&big, &hopper, &[Trial::TmaStore], 132).into_iter().filter(|c| !plain.contains(c)).collect();
        // (Rings cut to fit the second staging buffer may make two candidates one twin.)
        let mut expected: Vec<HopperConfig> = plain.iter().filter_map(|c| match c { Candidate::Hopper(h) => hopper::tma_store_twin(h), _ => None }).collect();
        expected.sort();
        expected.dedup();
        assert!(expected.len() > 30, "{}", expected.len());
        assert_eq!(twins.len(), expected.len());
        assert!(twins.iter().all(|c| matches!(c, Candidate::Hopper(h) if h.epilogue == Epilogue::TmaStore)));
        // With another trial, its candidates get twins too: clusters with the TMA store.
        let both_trials = space_with(&big, &hopper, &[Trial::Multicast, Trial::TmaStore], 132);
        let m2 = hopper::multicast_codes().into_iter().find(|c| c.cluster_m == 2 && c.consumer_mode != ConsumerMode::PingPong && c.persistent).unwrap();
        let m2 = hopper::searched_modes(HopperConfig { l2_256: hopper::wide_l2_suits(&big), ..m2 });
        assert!(both_trials.contains(&Candidate::Hopper(hopper::tma_store_twin(&m2).unwrap())), "{}", m2.label());
        // The K-128 trial twins the small tiles, split-K's with two 128-deep K-tiles a slice,
        // where the search does not already (below K 1024 above 2^28 FLOP; at 1024 and up,
        // and on the small shapes, it does).
        assert!(space_for(&p(64, 512, 8192), &hopper, 132).iter().any(|c| matches!(c, Candidate::Hopper(h) if h.bk == 128 && h.split > 1)));
        assert!(space_for(&p(64, 512, 960), &hopper, 132).iter().any(|c| matches!(c, Candidate::Hopper(h) if h.bk == 128)), "2^26 FLOP");
        let long = p(512, 1024, 960);
        let plain = space_for(&long, &hopper, 132);
        let twins: Vec<HopperConfig> = space_with(&long, &hopper, &[Trial::Bk128], 132).into_iter().filter(|c| !plain.contains(c)).filter_map(|c| match c {
            Candidate::Hopper(h) => Some(h),
            _ => None,
        }).collect();
        assert!(twins.iter().all(|h| h.bk == 128 && h.bn <= 64 && (h.split <= 1 || 8 >= 2 * h.split)), "{twins:?}");
        assert!(twins.iter().any(|h| h.split > 1) && twins.iter().any(|h| h.split <= 1), "{twins:?}");
        let f16 = Problem::new(Arch::Sm90, Acc::F16, Layout::Tn, Shape::new(64, 512, 8192).unwrap());
        assert_eq!(space_with(&f16, &hopper, &[Trial::Bk128], 132), space_for(&f16, &hopper, 132), "fp32 only");
        // K 256: the search takes it at K 1024 and up (nn: of its narrow tiles); below, the trial twins the
        // search's K-64 small tiles (not its K-128 twins), BM 64 only.
        let k256 = |c: &Candidate| matches!(c, Candidate::Hopper(h) if h.bk == 256);
        let skinny_long = p(64, 512, 8192);
        assert!(space_for(&skinny_long, &hopper, 132).iter().any(k256));
        let nn_long = Problem::new(Arch::Sm90, Acc::F32, Layout::Nn, Shape::new(64, 512, 8192).unwrap());
        let nn_k256: Vec<Candidate> = space_for(&nn_long, &hopper, 132).into_iter().filter(k256).collect();
        assert!(!nn_k256.is_empty() && nn_k256.iter().all(|c| matches!(c, Candidate::Hopper(h) if h.bn < 64)), "nn: the narrow tiles' only: {nn_k256:?}");
        let plain = space_for(&long, &hopper, 132);
        let added: Vec<Candidate> = space_with(&long, &hopper, &[Trial::Bk256], 132).into_iter().filter(|c| !plain.contains(c)).collect();
        assert!(!added.is_empty() && added.iter().all(|c| matches!(c, Candidate::Hopper(h) if h.bk == 256 && h.bm == 64)), "{added:?}");
        assert!(added.iter().any(|c| matches!(c, Candidate::Hopper(h) if h.split > 1)));
        // The 8-column tiles: on the skinny shapes only (both layouts), split-K at the
        // search's counts and chains with fp32 accumulators only.
        let n8: Vec<HopperConfig> = space_with(&skinny_long, &hopper, &[Trial::Narrow8], 132).into_iter().filter_map(|c| match c {
            Candidate::Hopper(h) if h.bn == 8 => Some(h),
            _ => None,
        }).collect();
        assert!(n8.iter().any(|h| h.split > 1) && n8.iter().any(|h| h.chains == 2) && n8.iter().any(|h| h.split <= 1 && h.chains == 1), "{n8:?}");
        assert!(n8.iter().all(|h| h.split <= 1 || (h.reduction.is_atomic() && 8192u32.div_ceil(64) >= 2 * h.split)), "{n8:?}");
        let f16_n8 = space_with(&Problem { acc: Acc::F16, ..skinny_long }, &hopper, &[Trial::Narrow8], 132);
        assert!(f16_n8.iter().any(|c| matches!(c, Candidate::Hopper(h) if h.bn == 8)) && !f16_n8.iter().any(|c| matches!(c, Candidate::Hopper(h) if h.bn == 8 && (h.split > 1 || h.chains > 1))));
        let nn_n8 = space_with(&nn_long, &hopper, &[Trial::Narrow8], 132);
        assert!(nn_n8.iter().any(|c| matches!(c, Candidate::Hopper(h) if h.bn == 8 && h.split > 1)), "nn has them too");
        assert!(!space_with(&p(4096, 4096, 4096), &hopper, &[Trial::Narrow8], 132).iter().any(|c| matches!(c, Candidate::Hopper(h) if h.bn == 8)), "skinny only");
        // The mma trial adds the deep-ring codes with the mma family, and loads each once;
        // 8192×256×2048 is past the family's search, within the trial's reach.
        let both = [Family::Hopper, Family::Mma];
        let skinny_mid = p(8192, 256, 2048);
        let plain = space_for(&skinny_mid, &both, 132);
        assert!(plain.iter().all(|c| matches!(c, Candidate::Hopper(_))), "the search has no mma code there");
        let with = space_with(&skinny_mid, &both, &[Trial::MmaDeep], 132);
        let added: Vec<&Candidate> = with.iter().filter(|c| !plain.contains(c)).collect();
        assert!(!added.is_empty() && added.iter().all(|c| matches!(c, Candidate::Mma(m) if m.stages >= 6)), "{added:?}");
        assert_eq!(space_with(&skinny_mid, &hopper, &[Trial::MmaDeep], 132), space_for(&skinny_mid, &hopper, 132), "mma codes need the mma family");
        let loaded = codes_with(&both, &[Trial::MmaDeep], Arch::Sm90, Acc::F32, Layout::Nn);
        assert_eq!(loaded.len(), codes(&both, Arch::Sm90, Acc::F32, Layout::Nn).len() + mma::deep_codes().len());
        let entries: std::collections::HashSet<String> = loaded.iter().map(|c| c.entry(Acc::F32, Layout::Nn)).collect();
        for c in space_with(&Problem::new(Arch::Sm90, Acc::F32, Layout::Nn, Shape::new(2048, 256, 1024).unwrap()), &both, &[Trial::MmaDeep], 132) {
            assert!(entries.contains(&c.entry(Acc::F32, Layout::Nn)), "{} has no code to load", c.label());
        }
    }

    #[test]
    fn candidates_of_every_family_round_trip() {
        let gemv = gemv::space_for(&p(1, 4096, 4096), 132);
        for c in [Candidate::Hopper(hopper::space()[3]), Candidate::Mma(mma::space()[5]), Candidate::Mma(mma::split_space(&p(64, 64, 4096), 132)[0]), Candidate::Gemv(gemv[0])] {
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(serde_json::from_str::<Candidate>(&json).unwrap(), c, "{json}");
        }
        // The two code forms never overlap: each family's names parse only its own codes.
        let mma_json = serde_json::to_string(&Candidate::Mma(mma::space()[5])).unwrap();
        assert!(serde_json::from_str::<HopperConfig>(&mma_json).is_err(), "{mma_json}");
        let hopper_json = serde_json::to_string(&Candidate::Hopper(hopper::space()[3])).unwrap();
        assert!(serde_json::from_str::<MmaConfig>(&hopper_json).is_err(), "{hopper_json}");
        // Small problems get both families, large ones only the Hopper family.
        let both = space_for(&p(256, 256, 256), &[Family::Hopper, Family::Mma], 132);
        assert!(both.iter().any(|c| matches!(c, Candidate::Mma(_))) && both.iter().any(|c| matches!(c, Candidate::Hopper(_))));
        assert!(space_for(&p(8192, 8192, 8192), &[Family::Mma], 132).is_empty());
        assert!(space_for(&p(8192, 8192, 8192), &[Family::Hopper], 132).len() >= 30);
        assert!(!codes(&[Family::Mma], Arch::Sm90, Acc::F16, Layout::Tn).is_empty() && codes(&[Family::Mma], Arch::Sm90, Acc::F16, Layout::Tn).iter().all(|c| !c.split()));
        assert_eq!(Candidate::Mma(mma::space()[0]).manifest(&p(64, 64, 64), 132), mma::space()[0].manifest(&p(64, 64, 64)));
        // Split-K in a cluster: searched on sm_90's small long-K shapes, its codes loaded for
        // sm_90 only (sm_80 has no clusters).
        let cluster = |c: &Candidate| matches!(c, Candidate::Mma(m) if m.reduction == Reduction::Cluster);
        assert!(space_for(&p(64, 128, 2048), &[Family::Mma], 132).iter().any(cluster));
        assert!(codes(&[Family::Mma], Arch::Sm90, Acc::F32, Layout::Tn).iter().any(cluster));
        assert!(!codes(&[Family::Mma], Arch::Sm80, Acc::F32, Layout::Tn).iter().any(cluster));
        let sm80 = Problem::new(Arch::Sm80, Acc::F32, Layout::Tn, Shape::new(64, 128, 2048).unwrap());
        assert!(!space_for(&sm80, &[Family::Mma], 132).iter().any(cluster));
    }

    #[test]
    fn the_efficiency_report_counts_each_problems_own_candidates() {
        let space: Vec<Candidate> = hopper::space().into_iter().map(Candidate::Hopper).collect();
        let split = Candidate::Hopper(hopper::split_space(&p(64, 64, 16384), 132)[0]);
        let mut state = TuneState::default();
        let samples = vec![(space[0], vec![0.5, 0.5, 0.5]), (space[1], vec![0.6, 0.6, 0.6]), (split, vec![1.2, 1.2, 1.2])];
        state.results.insert(
            p(64, 64, 16384).path(),
            ProblemResult {
                problem: p(64, 64, 16384),
                winner: split,
                reward: 1.2,
                reference_us: 1.0,
                winner_us: 1.0 / 1.2,
                pulls: 3,
                arms: vec![],
                priors: vec![],
                exhaustive: samples,
                retimed: vec![],
                seconds: 0.0,
                buffer_sets: TUNE_SETS,
            },
        );
        let report = efficiency_report(&state, &UcbSettings::default());
        assert!(report.contains("over 1 problem(s)") && report.contains("(3.0 candidates on average"), "{report}");
        // The split-K arm is the best and the bandit's pick: 100%, not a figure without it.
        assert!(report.contains("its pick is 100.0% of the exhaustive best"), "{report}");
        assert!(report.contains("exhaustive 9.0"), "{report}");
        assert!(report.contains("as a live run capped at 96 pulls, patience 16") && report.contains("within 98% on 1 of 1"), "{report}");
    }

    #[test]
    fn the_kinds_report_names_each_best_and_its_gain_over_the_search() {
        // fp16 accumulators, where the TMA-store twins are a trial's, not the search's.
        let nn = |m, n, k| Problem::new(Arch::Sm90, Acc::F16, Layout::Nn, Shape::new(m, n, k).unwrap());
        let prob = nn(8192, 8192, 8192);
        let searched: Vec<HopperConfig> = hopper::space_for(&prob, 132).into_iter().map(hopper::searched_modes).collect();
        let coop = searched.iter().copied().find(|c| c.consumer_mode != ConsumerMode::PingPong && c.bn == 256 && c.consumers == 2).expect("a cooperative 128x256");
        let pp = searched.iter().copied().find(|c| c.consumer_mode == ConsumerMode::PingPong).expect("a ping-pong code");
        let twin = hopper::tma_store_twin(&coop).unwrap();
        let m2pp = HopperConfig { cluster_m: 2, consumer_mode: ConsumerMode::PingPong, persistent: true, ..HopperConfig::new(64, 256, 5, 2) };
        assert_eq!(kind(&Candidate::Hopper(twin)), "cooperative+TMA store+dr");
        assert_eq!(kind(&Candidate::Hopper(hopper::bk_twin(&HopperConfig { split: 4, reduction: Reduction::Atomic, ..HopperConfig::new(64, 32, 16, 1) }, 128).unwrap())), "split-K+K 128");
        assert_eq!(kind(&Candidate::Hopper(m2pp)), "ping-pong+cluster");
        assert_eq!(kind(&Candidate::Hopper(hopper::searched_modes(m2pp))), "ping-pong+cluster+dr");
        assert_eq!(kind(&Candidate::Hopper(hopper::in_desc_mode(&m2pp, DescMode::Uniform))), "ping-pong+cluster+du");
        assert_eq!(kind(&Candidate::Mma(mma::deep_codes()[0])), "mma deep ring");
        let result = |problem: Problem, samples: Vec<(HopperConfig, f64)>| ProblemResult {
            problem,
            winner: Candidate::Hopper(samples[0].0),
            reward: 1.0,
            reference_us: 1.0,
            winner_us: 1.0,
            pulls: 0,
            arms: vec![],
            priors: vec![],
            exhaustive: samples.into_iter().map(|(c, r)| (Candidate::Hopper(c), vec![r; 3])).collect(),
            retimed: vec![],
            seconds: 0.0,
            buffer_sets: TUNE_SETS,
        };
        let mut state = TuneState::default();
        // 8192³: the TMA-store twin beats the search's best (1.00) by 5%.
        state.results.insert(prob.path(), result(prob, vec![(coop, 1.0), (pp, 0.98), (twin, 1.05)]));
        // 4096³: a search code stays best.
        let q = nn(4096, 4096, 4096);
        state.results.insert(q.path(), result(q, vec![(pp, 1.02), (HopperConfig { epilogue: Epilogue::TmaStore, ..pp }, 0.99)]));
        let report = kinds_report(&state, 132);
        assert!(report.contains("over 2 problem(s) (1 best outside the search's own space"), "{report}");
        assert!(report.contains("cooperative+TMA store+dr") && report.contains("best on    1; × the search's best there: geomean 1.0500"), "{report}");
        assert!(report.contains("ping-pong+dr ") && report.contains("geomean 1.0000, at most 1.0000"), "{report}");
        assert!(kinds_report(&TuneState::default(), 132).is_empty());
    }

    #[test]
    fn the_winner_is_the_exhaustive_best_where_it_beats_the_bandits_pick() {
        let space: Vec<Candidate> = hopper::space().into_iter().take(3).map(Candidate::Hopper).collect();
        let bandit = (space[0], 1.02);
        // The second candidate's median (1.05) beats the bandit's 1.02; its best sample does
        // not decide, nor does a failed (0) timing.
        let ex = vec![(space[0], vec![1.0, 1.01, 1.02]), (space[1], vec![1.05, 0.0, 1.06]), (space[2], vec![1.2, 0.9, 0.95])];
        assert_eq!(pick_winner(bandit, &ex), (space[1], 1.05));
        // Without exhaustive samples, or when none beats it, the bandit's pick stands.
        assert_eq!(pick_winner(bandit, &[]), bandit);
        assert_eq!(pick_winner((space[2], 1.1), &ex), (space[2], 1.1));
    }

    #[test]
    fn the_finalists_are_the_best_estimates_within_five_percent() {
        // Arm 3 has two estimates (a bandit mean, an exhaustive median): it counts once, at
        // its better one, so it leads arm 1 (0.99) rather than trailing arm 7 (0.96).
        let estimates = [(3, 0.97), (1, 0.99), (3, 1.0), (7, 0.96), (2, 0.98), (10, 0.955), (5, 0.94), (4, f64::NAN), (6, f64::INFINITY), (8, 0.0), (9, -1.0)];
        assert_eq!(finalists(&estimates, 4, 0.05), vec![3, 1, 2, 7]);
        // Uncapped: arm 10 joins; arm 5 (6% behind) and the non-finite and non-positive
        // estimates never do.
        assert_eq!(finalists(&estimates, 10, 0.05), vec![3, 1, 2, 7, 10]);
        assert_eq!(finalists(&estimates, 2, 0.05), vec![3, 1]);
        // Within 1% only the leader and arm 1 remain.
        assert_eq!(finalists(&estimates, 4, 0.01), vec![3, 1]);
        // Ties go to the lower index.
        assert_eq!(finalists(&[(5, 1.0), (2, 1.0)], 4, 0.05), vec![2, 5]);
        assert!(finalists(&[], 4, 0.05).is_empty());
        assert!(finalists(&[(0, f64::NAN), (1, 0.0)], 4, 0.05).is_empty());
    }

    #[test]
    fn the_final_round_picks_by_median_not_by_mean() {
        let space: Vec<Candidate> = hopper::space().into_iter().take(3).map(Candidate::Hopper).collect();
        // One lucky round lifts the first finalist's mean (1.058) above the steadier one's
        // (1.022); the median (1.00 against 1.02) does not follow it.
        let lucky = (space[0], vec![1.0, 1.0, 1.3, 0.99, 1.0]);
        let steady = (space[1], vec![1.02, 1.03, 1.02, 1.01, 1.03]);
        let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
        assert!(mean(&lucky.1) > mean(&steady.1));
        assert_eq!(pick_final(&[lucky.clone(), steady.clone()]), Some((space[1], 1.02)));
        // Failed rounds count 0: two of five leave the median standing, three sink it.
        let flaky = (space[2], vec![0.0, 1.1, 0.0, 1.1, 1.1]);
        assert_eq!(pick_final(&[steady.clone(), flaky]), Some((space[2], 1.1)));
        let broken = (space[2], vec![0.0, 1.5, 0.0, 1.5, 0.0]);
        assert_eq!(pick_final(&[broken, steady.clone()]), Some((space[1], 1.02)));
        // A tie keeps the earlier finalist (the search's own pick comes first).
        assert_eq!(pick_final(&[(space[2], steady.1.clone()), steady.clone()]), Some((space[2], 1.02)));
        // Nothing to pick: the search's pick stands.
        assert_eq!(pick_final(&[]), None);
        assert_eq!(pick_final(&[(space[0], vec![0.0; 5]), (space[1], vec![])]), None);
        // The progress line names the search's pick where the final round overrode it.
        let result = |winner: Candidate, retimed: Vec<(Candidate, Vec<f64>)>| ProblemResult {
            problem: p(64, 64, 64),
            winner,
            reward: 1.02,
            reference_us: 1.0,
            winner_us: 1.0,
            pulls: 10,
            arms: vec![],
            priors: vec![],
            exhaustive: vec![],
            retimed,
            seconds: 0.0,
            buffer_sets: TUNE_SETS,
        };
        assert_eq!(retime_note(&result(space[1], vec![lucky.clone(), steady.clone()])), format!("re-timed 2, picked over {}", space[0].label()));
        assert_eq!(retime_note(&result(space[0], vec![lucky, steady])), "re-timed 2");
        assert_eq!(retime_note(&result(space[0], vec![])), "re-timed 0");
    }

    #[test]
    fn a_state_from_before_the_final_round_still_loads() {
        let winner = Candidate::Hopper(hopper::space()[0]);
        let prob = p(64, 64, 64);
        let mut state = TuneState { device_class: "H100-SXM".into(), ..Default::default() };
        state.results.insert(
            prob.path(),
            ProblemResult {
                problem: prob,
                winner,
                reward: 1.01,
                reference_us: 2.0,
                winner_us: 1.98,
                pulls: 7,
                arms: vec![(winner, 1.03, 7)],
                priors: vec![],
                exhaustive: vec![],
                retimed: vec![(winner, vec![1.0, 1.01, 1.02, 1.01, 1.0])],
                seconds: 1.5,
                buffer_sets: TUNE_SETS,
            },
        );
        let mut json = serde_json::to_value(&state).unwrap();
        let back: TuneState = serde_json::from_str(&json.to_string()).unwrap();
        assert_eq!(back.results[&prob.path()].retimed, vec![(winner, vec![1.0, 1.01, 1.02, 1.01, 1.0])]);
        json["results"][prob.path()].as_object_mut().unwrap().remove("retimed").expect("the key is written");
        let old: TuneState = serde_json::from_str(&json.to_string()).unwrap();
        let r = &old.results[&prob.path()];
        assert!(r.retimed.is_empty());
        assert_eq!((r.winner, r.reward, r.pulls), (winner, 1.01, 7));
    }

    /// The tuner's description of a shipped entry names the configuration its manifest
    /// launches, not another entry's split count, L2 promotion or persistent grid.
    #[test]
    fn the_shipped_tuner_descriptions_name_their_configuration() {
        let (mut checked, mut wrong) = (0, Vec::new());
        for (dir, index, _) in crate::catalog::bundle::shipped_bundles() {
            for e in index.entries.iter().filter(|e| e.submitter == "kaas-tuner" && !e.description.is_empty()) {
                let launch = &e.manifest.launches[0];
                let labels: Vec<String> = if let Some((cfg, _, _)) = HopperConfig::of_launch(launch, &e.problem) {
                    // A persistent grid as large as the tile count launches as the plain one.
                    let persistent = HopperConfig { persistent: true, ..cfg };
                    let same = persistent.manifest(&e.problem, 132) == e.manifest;
                    std::iter::once(cfg.label()).chain(same.then(|| persistent.label())).collect()
                } else if let Some((cfg, _, _)) = MmaConfig::of_launch(launch) {
                    vec![cfg.label()]
                } else {
                    panic!("{}: {} names no configuration of either family", e.problem, launch.entry)
                };
                let named = e.description.split_once(" (").and_then(|(_, rest)| rest.split_once("), found by")).map(|(label, _)| label);
                if !named.is_some_and(|n| labels.iter().any(|l| l == n)) {
                    wrong.push(format!("{}: {} for {} (launches {})", dir.display(), e.description, e.problem, labels[0]));
                }
                checked += 1;
            }
        }
        assert!(checked > 1000, "{checked}");
        assert!(wrong.is_empty(), "{} of {checked} descriptions name another configuration:\n{}", wrong.len(), wrong.join("\n"));
    }


    /// A run whose first problem measures only poor arms must still find, on the next
    /// problems, the arm that is best everywhere: the capped replay shows whether it does.
    #[test]
    fn the_capped_replay_follows_the_live_seeding() {
        // The wide tiles (these shapes are not skinny enough for the narrow ones).
        let space: Vec<Candidate> = hopper::space().into_iter().filter(|c| c.bn >= 64).map(Candidate::Hopper).collect();
        let mut state = TuneState::default();
        for (m, n) in [(256u32, 1024u32), (512, 1024), (1024, 1024), (2048, 1024), (4096, 1024), (4096, 2048), (4096, 4096), (8192, 4096)] {
            let prob = p(m, n, 1024);
            // The last arm is best by 20%; the others spread below.
            let samples: Vec<(Candidate, Vec<f64>)> = space.iter().enumerate().map(|(j, c)| (*c, vec![if j + 1 == space.len() { 1.2 } else { 0.5 + 0.005 * j as f64 }; 3])).collect();
            state.results.insert(
                prob.path(),
                ProblemResult { problem: prob, winner: space[0], reward: 1.0, reference_us: 1.0, winner_us: 1.0, pulls: 0, arms: vec![], priors: vec![], exhaustive: samples, retimed: vec![], seconds: 0.0, buffer_sets: TUNE_SETS },
            );
        }
        let q: Vec<f64> = capped_run(&state, &UcbSettings { max_pulls: 12, ..Default::default() }).into_iter().map(|(q, _)| q).collect();
        assert_eq!(q.len(), 8);
        assert!(q[0] < 0.98, "12 pulls of {} arms without priors cannot reach the last: {q:?}", space.len());
        // Once one problem has found it, its neighbours start from it.
        let found = q.iter().position(|&x| x >= 0.98).expect("the later problems explore what the first left untried");
        assert!(q[found..].iter().all(|&x| x >= 0.98), "{q:?}");
    }

}
