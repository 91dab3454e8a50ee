//! The tuner's Hopper and mma codes through the whole verifier.

use super::*;
#[allow(unused_imports)]
use kaas::tuner::hopper::{ConsumerMode, DescMode, Epilogue, Reduction, TileGrid};

// ---------------------------------------------------------------------------------------
// The Hopper template's split-K entries through the whole verifier

/// Runs kernels through the sandboxed verifier, prints each verdict under a tag, and keeps
/// the ones that did not pass for one assertion at the end.
struct VerifierRuns {
    tag: &'static str,
    runs: usize,
    failed: Vec<String>,
}

impl VerifierRuns {
    fn new(tag: &'static str) -> Self {
        VerifierRuns { tag, runs: 0, failed: Vec::new() }
    }

    fn run(&mut self, what: &str, ptx: String, manifest: Manifest) {
        let job = Job { ptx, manifest, secret_seed: rand::random(), watchdog_ms: None, bench: None };
        let o = sandbox::run_with(&sandbox_command(), &job, job.wall_limit());
        self.runs += 1;
        println!("{} {what}: {:?} {}", self.tag, o.verdict, first_line(&o.message, 160));
        if o.verdict != Verdict::Pass {
            self.failed.push(format!("{what}: {:?} at {}: {}", o.verdict, o.stage, o.message));
        }
    }

    /// A Hopper code on `p` with its own manifest.
    fn run_code(&mut self, p: &Problem, cfg: &kaas::tuner::hopper::HopperConfig, ptx: &str) {
        self.run(&format!("{p} {}", cfg.label()), ptx.to_string(), cfg.manifest(p, 132));
    }

    /// A Hopper code on `p` with its grid capped at `blocks` (a short persistent grid).
    fn run_capped(&mut self, p: &Problem, cfg: &kaas::tuner::hopper::HopperConfig, ptx: &str, blocks: u32) {
        let mut manifest = cfg.manifest(p, 132);
        manifest.launches[0].grid[0] = manifest.launches[0].grid[0].min(blocks);
        self.run(&format!("{p} {} grid {}", cfg.label(), manifest.launches[0].grid[0]), ptx.to_string(), manifest);
    }

    /// A Hopper code on `p` once per grid: `None` one tile per CTA, `Some(b)` a persistent
    /// grid of at most `b` blocks, rounded down to whole clusters (at least one).
    fn run_grids(&mut self, p: &Problem, code: &kaas::tuner::hopper::HopperConfig, ptx: &str, grids: &[Option<u32>]) {
        for &blocks in grids {
            let cfg = kaas::tuner::hopper::HopperConfig { persistent: blocks.is_some(), ..*code };
            match blocks {
                None => self.run_code(p, &cfg, ptx),
                Some(b) => {
                    let cl = cfg.cluster_size();
                    self.run_capped(p, &cfg, ptx, (b / cl).max(1) * cl);
                }
            }
        }
    }

    /// A Hopper code with the f16 accumulator on one tn shape.
    fn run_f16_tn(&mut self, cfg: &kaas::tuner::hopper::HopperConfig, shape: (u32, u32, u32)) {
        self.run_f16(cfg, Layout::Tn, shape);
    }

    /// A Hopper code with the f16 accumulator on one shape of `layout`.
    fn run_f16(&mut self, cfg: &kaas::tuner::hopper::HopperConfig, layout: Layout, (m, n, k): (u32, u32, u32)) {
        let p = Problem::new(Arch::Sm90, Acc::F16, layout, Shape::new(m, n, k).expect("shape"));
        self.run(&format!("{p} {}", cfg.label()), kaas::tuner::hopper::compile(cfg, Acc::F16, layout).expect("compile"), cfg.manifest(&p, 132));
    }

    fn assert_all_passed(self) {
        assert!(self.failed.is_empty(), "{} of {} failed: {:#?}", self.failed.len(), self.runs, self.failed);
    }
}

/// Each Hopper code with each layout it supports, on the shapes in turn (so the codes meet
/// different edges), compiled: (problem, code, PTX).
fn hopper_cases(codes: &[kaas::tuner::hopper::HopperConfig], shapes: &[(u32, u32, u32)]) -> Vec<(Problem, kaas::tuner::hopper::HopperConfig, String)> {
    let mut out = Vec::new();
    for (i, code) in codes.iter().enumerate() {
        for (j, layout) in Layout::ALL.into_iter().enumerate().filter(|&(_, l)| code.supports(l)) {
            let (m, n, k) = shapes[(i + j) % shapes.len()];
            let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).expect("shape"));
            out.push((p, *code, kaas::tuner::hopper::compile(code, p.acc, layout).expect("compile")));
        }
    }
    out
}

/// A Hopper GPU and NVRTC are here (the sandbox opens its own context); else SKIP.
fn hopper_or_skip() -> bool {
    let Some(gpu) = gpu_and_nvrtc_or_skip() else { return false };
    let cc = gpu.facts().compute_capability;
    if cc != (9, 0) {
        skip(format!("Hopper kernels need sm_90 ({cc:?})"));
    }
    cc == (9, 0)
}

/// Split-K Hopper kernels, both reductions (in order and atomic), pass every stage of the
/// verifier in the sandbox: shapes that tiles do not divide, uneven K slices, a slice
/// count close to the K-tile count, both layouts. The verifier launches each kernel five
/// times on one workspace zeroed once, so a kernel that left its counters or sums dirty
/// would fail here.
#[test]
fn split_k_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let tile = |bm, bn| hopper::split_tiles().into_iter().find(|c| c.bm == bm && c.bn == bn).expect("a split-K tile");
    let cases: [((u32, u32, u32), HopperConfig, u32); 5] = [
        ((64, 64, 16384), tile(64, 64), 32),
        ((100, 200, 4104), tile(64, 128), 11),
        ((512, 256, 4096), tile(128, 128), 8),
        ((1000, 72, 3000), tile(128, 64), 23),
        ((256, 512, 2048), tile(128, 256), 3),
    ];
    let mut runs = VerifierRuns::new("SPLITK");
    for ((m, n, k), cfg, split) in cases {
        for (layout, atomic) in [(Layout::Tn, false), (Layout::Nn, false), (Layout::Tn, true), (Layout::Nn, true)] {
            let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).expect("shape"));
            let cfg = HopperConfig { split, reduction: if atomic { Reduction::Atomic } else { Reduction::InOrder }, ..cfg };
            let ptx = hopper::compile(&cfg, p.acc, layout).expect("compile");
            runs.run_code(&p, &cfg, &ptx);
        }
    }
    runs.assert_all_passed();
}

/// Cluster split-K Hopper kernels (`_skc`: a tile's slices are the CTAs of one cluster and
/// reduce through distributed shared memory) pass every stage of the verifier: every
/// cluster code of the search, both layouts, 2, 4, 8 and 16 slices (16 is a non-portable
/// cluster), shapes that tiles do not divide, uneven slices and slices with no K-tile at
/// all (K = 200 has 4). A grid that is not tiles × S must write nothing, not hang: the
/// verifier fails it.
#[test]
fn cluster_split_k_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let shapes = [(64, 64, 4096), (100, 200, 4104), (256, 256, 2048), (1000, 72, 3000), (130, 72, 200)];
    // The short grid: one cluster of 4 short.
    let short = HopperConfig { split: 4, ..hopper::cluster_tiles()[0] };
    split_codes_pass_the_verifier("SPLITK-CLUSTER", &hopper::cluster_tiles(), &[2, 4, 8, 16], &shapes, (&short, (128, 64, 1024), 4));
}

/// Atomic split-K in multicast clusters (`_m2…_ska` sharing B, `_n2…_ska` sharing A, and the
/// clusters of four), in the search's descriptor mode, passes every stage of the verifier,
/// which launches each five times on one workspace: every such code, both layouts, 3 and 16
/// slices, shapes whose tile rows or columns do not fill the cluster (its other CTAs hold
/// only rows or columns past C, and still count their units) or that tiles do not divide,
/// and slices with no K-tile (K = 200 has 4). The split-K loop strides over the grid's
/// clusters, so a grid one cluster short is still correct: it must pass too.
#[test]
fn multicast_split_k_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let codes: Vec<HopperConfig> = hopper::multicast_split_all().into_iter().map(hopper::searched_modes).collect();
    let shapes = [(1000, 1000, 4104), (200, 520, 2048), (640, 384, 4104), (130, 72, 200), (1024, 1024, 8192)];
    let mut runs = VerifierRuns::new("SPLITK-MULTICAST");
    for (i, code) in codes.iter().enumerate() {
        for (j, layout) in Layout::ALL.into_iter().enumerate() {
            let ptx = hopper::compile(code, Acc::F32, layout).expect("compile");
            for (q, split) in [3, 16].into_iter().enumerate() {
                let (m, n, k) = shapes[(i + j + q) % shapes.len()];
                let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).expect("shape"));
                runs.run_code(&p, &HopperConfig { split, ..*code }, &ptx);
            }
        }
    }
    // A grid one cluster short: its first cluster takes the last unit as well.
    let short = HopperConfig { split: 4, ..codes[0] };
    let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(512, 512, 1024).expect("shape"));
    let grid = short.manifest(&p, 132).launches[0].grid[0] - short.cluster_size();
    runs.run_capped(&p, &short, &hopper::compile(&short, Acc::F32, Layout::Tn).expect("compile"), grid);
    runs.assert_all_passed();
}

/// Stream-K Hopper kernels (`_sks`: the tiles' K-iterations cut into one equal range per
/// block, across tile boundaries, shared tiles summed with the atomic split-K's workspace)
/// pass every stage of the verifier, which launches each five times on one workspace:
/// every stream-K code, both layouts, grids of 2, 7, 132 and 264 blocks, shapes the tiles
/// do not divide, a block range shorter than a tile and longer than several, and fewer
/// K-iterations than blocks (640×384×136 has 90 with 64×128 tiles: the manifest launches 90
/// blocks). A grid that is not S must write nothing.
#[test]
fn stream_k_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper;
    if !hopper_or_skip() {
        return;
    }
    let shapes = [(1000, 1000, 4104), (100, 200, 4104), (640, 384, 136), (64, 64, 16384), (2048, 2048, 2048)];
    // The short grid: one block short of S.
    let codes = hopper::stream_k_codes(132);
    split_codes_pass_the_verifier("STREAMK", &codes, &[2, 7, 132, 264], &shapes, (&codes[0], (512, 512, 1024), 1));
}

/// Hybrid stream-K (`_skh`: whole tiles on the persistent order but for the last full wave
/// and the partial one, whose K-iterations are cut into equal ranges) passes the verifier:
/// the large cooperative tiles alone and in multicast pairs along M and N, in the search's
/// descriptor mode, both layouts, on grids where every tile is whole (2: one unit), where
/// tiles are whole and cut (8, and 132 on the large shapes) and where every tile is cut (264);
/// then a grid one block short of S must fail fast.
#[test]
fn hybrid_stream_k_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper;
    if !hopper_or_skip() {
        return;
    }
    let shapes = [(4000, 4104, 520), (1000, 1000, 4104), (4096, 4096, 512), (300, 600, 4104), (2000, 3000, 1000)];
    let codes: Vec<_> = hopper::stream_k_trial_codes(132).into_iter().filter(|c| c.reduction == Reduction::StreamKHybrid).map(hopper::searched_modes).collect();
    assert_eq!(codes.len(), 9);
    split_codes_pass_the_verifier("STREAMK-HYBRID", &codes, &[2, 8, 132, 264], &shapes, (&codes[0], (4096, 4096, 512), 1));
}

/// Every code × layout × split count (the slices, the cluster size or the stream-K grid)
/// through the verifier, the shapes taken in turn so that each code meets several; then
/// `short_grid` (a code, a tn shape, how many blocks short) must fail fast.
fn split_codes_pass_the_verifier(tag: &'static str, codes: &[kaas::tuner::hopper::HopperConfig], splits: &[u32], shapes: &[(u32, u32, u32)], short_grid: (&kaas::tuner::hopper::HopperConfig, (u32, u32, u32), u32)) {
    let mut runs = VerifierRuns::new(tag);
    for (i, code) in codes.iter().enumerate() {
        for (j, layout) in Layout::ALL.into_iter().enumerate() {
            let ptx = kaas::tuner::hopper::compile(code, Acc::F32, layout).expect("compile");
            for (q, &split) in splits.iter().enumerate() {
                let (m, n, k) = shapes[(i + j + q) % shapes.len()];
                let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).expect("shape"));
                let cfg = kaas::tuner::hopper::HopperConfig { split, ..*code };
                runs.run_code(&p, &cfg, &ptx);
            }
        }
    }
    let (cfg, (m, n, k), short) = short_grid;
    let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).expect("shape"));
    short_grid_fails_fast(tag, cfg, &p, short);
    runs.assert_all_passed();
}

/// A Hopper code launched `short` blocks under its manifest's grid: every block returns at
/// once, C stays unwritten, and the verifier says so without a timeout.
fn short_grid_fails_fast(tag: &str, cfg: &kaas::tuner::hopper::HopperConfig, p: &Problem, short: u32) {
    let mut manifest = cfg.manifest(p, 132);
    manifest.launches[0].grid[0] -= short;
    let ptx = kaas::tuner::hopper::compile(cfg, p.acc, p.layout).expect("compile");
    let o = sandbox::run_with(&sandbox_command(), &Job { ptx, manifest, secret_seed: rand::random(), watchdog_ms: None, bench: None }, Duration::from_secs(60));
    println!("{tag} short grid: {:?} {}", o.verdict, first_line(&o.message, 160));
    assert!(o.verdict != Verdict::Pass && o.verdict != Verdict::Timeout, "a short grid must fail fast: {:?} {}", o.verdict, o.message);
}

/// Hopper kernels in clusters of two along M (`_m2`: each CTA loads half of the B tile and
/// multicasts it to both) pass the verifier: every such code of the search, both layouts,
/// shapes whose tile rows are odd (the cluster's second CTA has only rows past M) or that
/// tiles do not divide, one tile per pair and persistent grids of 2, 6 and 132 blocks.
#[test]
fn multicast_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper;
    if !hopper_or_skip() {
        return;
    }
    let codes: Vec<_> = hopper::multicast_codes().into_iter().filter(|c| !c.persistent).collect();
    assert!(!codes.is_empty());
    let shapes = [(1000, 1000, 1000), (200, 520, 136), (640, 384, 4104)];
    let mut runs = VerifierRuns::new("MULTICAST");
    // (Clusters of two: every cap is whole clusters already.)
    for (p, code, ptx) in hopper_cases(&codes, &shapes) {
        runs.run_grids(&p, &code, &ptx, &[None, Some(2), Some(6), Some(132)]);
    }
    runs.assert_all_passed();
}

/// The TMA-store epilogue (`_ts`: stmatrix into swizzled staging, bulk tensor stores that
/// clip at C's edges) passes the verifier: cooperative tiles of one and two consumers,
/// ping-pong, clusters along M and N, both layouts, on shapes the tiles do not divide; one
/// tile per CTA, persistent grids of 1, 3 and 132 blocks (each warp's two staging buffers
/// reused across tiles), and the f16 accumulator.
#[test]
fn tma_store_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let base = [
        HopperConfig::new(128, 256, 4, 2),
        HopperConfig::new(256, 128, 4, 2),
        HopperConfig::new(128, 128, 6, 2),
        HopperConfig::new(64, 128, 8, 1),
        HopperConfig::new(64, 64, 8, 1),
        HopperConfig { consumer_mode: ConsumerMode::PingPong, ..HopperConfig::new(64, 256, 5, 2) },
        HopperConfig { consumer_mode: ConsumerMode::PingPong, ..HopperConfig::new(128, 128, 6, 2) },
        HopperConfig { cluster_m: 2, ..HopperConfig::new(128, 128, 6, 2) },
        HopperConfig { cluster_n: 2, ..HopperConfig::new(128, 256, 4, 2) },
    ];
    let codes: Vec<HopperConfig> = base.iter().map(|c| hopper::tma_store_twin(c).expect("a twin")).collect();
    // N a multiple of 8: C's rows must be 16-byte aligned for its tensor map.
    let shapes = [(1000, 1000, 1000), (200, 520, 136), (640, 384, 4104), (65, 72, 64)];
    let mut runs = VerifierRuns::new("TMA-STORE");
    for (p, code, ptx) in hopper_cases(&codes, &shapes) {
        runs.run_grids(&p, &code, &ptx, &[None, Some(1), Some(3), Some(132)]);
    }
    for code in [codes[2], codes[5]] {
        for layout in Layout::ALL {
            let p = Problem::new(Arch::Sm90, Acc::F16, layout, Shape::new(1000, 1000, 1000).expect("shape"));
            let ptx = hopper::compile(&code, Acc::F16, layout).expect("compile");
            runs.run_code(&p, &HopperConfig { persistent: true, ..code }, &ptx);
        }
    }
    runs.assert_all_passed();
}

/// K-128 ring slots (`KAAS_BK=128`: two swizzle atoms per slot, two TMA boxes of A and of
/// tn's B, nn's B boxes 128 rows deep) pass the verifier: the narrow and 64-column tiles of
/// one and two consumers, accumulator chains, the atomic split-K with uneven slices, a
/// cluster along N, the TMA store; both layouts where they build, on shapes whose K is no
/// multiple of 128 (the second atom of the last slot is past K: zeros) and that the tiles
/// do not divide; one tile per CTA and persistent grids of 3 blocks. fp32 accumulators, the
/// only ones the tuner offers K 128 with.
#[test]
fn bk128_hopper_kernels_pass_the_verifier() {
    wide_slot_kernels_pass_the_verifier(128);
}

/// The same for K 256 per slot (four swizzle atoms; nn's B boxes 256 rows deep), where its
/// three slots fit: the 64-row tiles. K of 4104 leaves the last slot 8 deep.
#[test]
fn bk256_hopper_kernels_pass_the_verifier() {
    wide_slot_kernels_pass_the_verifier(256);
}

fn wide_slot_kernels_pass_the_verifier(bk: u32) {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let base = [
        HopperConfig::new(64, 16, 4, 1),
        HopperConfig::new(64, 32, 16, 1),
        HopperConfig::new(64, 64, 8, 1),
        HopperConfig::new(128, 64, 8, 2),
        HopperConfig { chains: 2, ..HopperConfig::new(64, 64, 8, 1) },
        HopperConfig { cluster_n: 2, ..HopperConfig::new(64, 64, 8, 1) },
        HopperConfig { epilogue: Epilogue::TmaStore, ..HopperConfig::new(64, 64, 8, 1) },
    ];
    let codes: Vec<HopperConfig> = base.iter().filter_map(|c| hopper::bk_twin(c, bk)).collect();
    assert!(codes.len() >= 6, "K {bk}: {codes:?}");
    let shapes = [(1000, 1000, 1000), (200, 520, 136), (64, 512, 4104), (130, 264, 200)];
    let mut runs = VerifierRuns::new(if bk == 128 { "K128" } else { "K256" });
    for (p, code, ptx) in hopper_cases(&codes, &shapes) {
        runs.run_grids(&p, &code, &ptx, &[None, Some(3)]);
    }
    // The atomic split-K: 5 and 16 slices of 4200 (33 K-tiles of 128, 17 of 256; the last
    // one partial).
    for split in [5, 16] {
        let code = hopper::bk_twin(&HopperConfig { split, reduction: Reduction::Atomic, ..HopperConfig::new(64, 32, 16, 1) }, bk).expect("a twin");
        for layout in Layout::ALL.into_iter().filter(|&l| code.supports(l)) {
            let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(100, 264, 4200).expect("shape"));
            runs.run_code(&p, &code, &hopper::compile(&code, p.acc, layout).expect("compile"));
        }
    }
    runs.assert_all_passed();
}

/// The 64×8 tiles (`--trial narrow8`; tn only) pass the verifier: every unsplit code, two
/// accumulator chains included, on shapes whose N is no multiple of 8 or 64 and whose K is
/// no multiple of 64, one tile per CTA and a persistent grid of 3; the atomic split-K of 5
/// and 16 slices; and the f16 accumulator.
#[test]
fn narrow8_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let mut runs = VerifierRuns::new("N8");
    let unsplit: Vec<HopperConfig> = hopper::narrow8_codes().into_iter().filter(|c| c.split <= 1).collect();
    assert!(unsplit.len() >= 3, "{unsplit:?}");
    for code in &unsplit {
        let ptx = hopper::compile(code, Acc::F32, Layout::Tn).expect("compile");
        for (m, n, k) in [(200, 520, 136), (64, 60, 4104), (130, 13, 200), (1000, 1000, 1000)] {
            let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).expect("shape"));
            runs.run_grids(&p, code, &ptx, &[None, Some(3)]);
        }
    }
    let split = hopper::narrow8_codes().into_iter().find(|c| c.split > 1).expect("a split-K code");
    let ptx = hopper::compile(&split, Acc::F32, Layout::Tn).expect("compile");
    for slices in [5, 16] {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(100, 36, 4200).expect("shape"));
        runs.run_code(&p, &HopperConfig { split: slices, ..split }, &ptx);
    }
    let plain = unsplit.iter().find(|c| c.chains == 1).expect("an unsplit code");
    let p = Problem::new(Arch::Sm90, Acc::F16, Layout::Tn, Shape::new(200, 520, 136).expect("shape"));
    runs.run_code(&p, plain, &hopper::compile(plain, Acc::F16, Layout::Tn).expect("compile"));
    runs.assert_all_passed();
}

/// The skinny shapes' clusters (2, 4 and 8 CTAs along N multicasting A, or along M
/// multicasting B) pass the verifier: every such code of the search, both layouts where it
/// builds, on shapes whose tiles leave a cluster partly past the edge (the CTAs there load
/// and multicast their share, and store nothing); a 2×4 cluster that multicasts both
/// operands; persistent grids of one cluster and of 132 blocks; and the f16 accumulator.
#[test]
fn skinny_cluster_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let codes = hopper::skinny_cluster_codes();
    assert_eq!(codes.len(), 30);
    let along_n = [(64, 1000, 520), (100, 200, 136), (64, 4096, 1024), (130, 520, 4104)];
    // (N a multiple of 8: nn's B rows must be 16-byte aligned for its tensor map.)
    let along_m = [(1000, 64, 520), (200, 104, 136), (4096, 64, 1024), (520, 136, 4104)];
    let mut runs = VerifierRuns::new("SKINNY-CLUSTER");
    let (n_codes, m_codes): (Vec<HopperConfig>, Vec<HopperConfig>) = codes.iter().partition(|c| c.cluster_n > 1);
    for (codes, shapes) in [(&n_codes, &along_n), (&m_codes, &along_m)] {
        for (p, cfg, ptx) in hopper_cases(codes, shapes) {
            runs.run_code(&p, &cfg, &ptx);
        }
    }
    // Both operands multicast: rank r at tile row r % 2, column r / 2.
    let both = HopperConfig { cluster_m: 2, cluster_n: 4, ..HopperConfig::new(64, 64, 8, 1) };
    for (p, cfg, ptx) in hopper_cases(&[both], &[(200, 1000, 520), (1000, 200, 4104)]) {
        runs.run_code(&p, &cfg, &ptx);
        for blocks in [8, 132] {
            runs.run_capped(&p, &HopperConfig { persistent: true, ..cfg }, &ptx, blocks);
        }
    }
    for cfg in codes.iter().filter(|c| c.stages == 4 && c.cluster_size() == 8) {
        runs.run_f16_tn(cfg, (130, 1000, 520));
    }
    println!("{} skinny cluster runs", runs.runs);
    runs.assert_all_passed();
}

/// K split across the two consumer warpgroups (`_kw`: each takes the ring's slots of its
/// parity, consumer 1 hands its fp32 partial to consumer 0) passes the verifier: every such
/// code, both layouts where it builds, on shapes with an odd count of K-tiles and with one
/// (consumer 1 then adds zeros), and persistent grids of 1, 3, 7 and 132 blocks, so a
/// block's tiles start at either parity of the ring and consumer 1 must wait for consumer
/// 0 to take each partial before it stores the next.
#[test]
fn ksplit_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper;
    if !hopper_or_skip() {
        return;
    }
    let codes: Vec<_> = hopper::ksplit_codes().into_iter().filter(|c| !c.persistent).collect();
    assert_eq!(codes.len(), 8);
    let shapes = [(100, 200, 136), (64, 1000, 520), (300, 72, 4104), (1000, 1000, 64), (64, 512, 1024)];
    let mut runs = VerifierRuns::new("KSPLIT");
    for (p, cfg, ptx) in hopper_cases(&codes, &shapes) {
        runs.run_code(&p, &cfg, &ptx);
        for blocks in [1, 3, 7, 132] {
            runs.run_capped(&p, &hopper::HopperConfig { persistent: true, ..cfg }, &ptx, blocks);
        }
    }
    println!("{} k-split runs", runs.runs);
    runs.assert_all_passed();
}

/// K split across consumers in multicast pairs (`_m2…_kw`, `_n2_kw`) passes the verifier:
/// every such code, both layouts, shapes whose tile rows or columns do not fill the pair
/// or that tiles do not divide, one tile per CTA and persistent grids of 2, 6 and 132.
#[test]
fn ksplit_pair_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper;
    if !hopper_or_skip() {
        return;
    }
    // In the search's descriptor mode (stepped descriptors), as the trial times them.
    let codes: Vec<_> = hopper::ksplit_pair_codes().into_iter().filter(|c| !c.persistent).map(hopper::searched_modes).collect();
    assert_eq!(codes.len(), 4);
    let shapes = [(1024, 1024, 8192), (100, 200, 136), (64, 1000, 520), (300, 72, 4104), (1000, 1000, 64)];
    let mut runs = VerifierRuns::new("KSPLIT-PAIR");
    for (p, code, ptx) in hopper_cases(&codes, &shapes) {
        runs.run_grids(&p, &code, &ptx, &[None, Some(2), Some(6), Some(132)]);
    }
    runs.assert_all_passed();
}

/// Consumers that split the tile's columns (`_cs`) pass the verifier: every such code, both
/// layouts, shapes the tiles do not divide, whose tile rows or
/// columns do not fill a pair, with one K-tile and a ragged K; one tile per CTA and
/// persistent grids of 2, 6 and 132 (their wait0 twins one tile per CTA and 6); the split-K
/// ones with 3 and 16 slices.
#[test]
fn col_split_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let codes: Vec<HopperConfig> = hopper::col_split_codes().into_iter().filter(|c| !c.persistent).collect();
    assert_eq!(codes.len(), 22);
    let shapes = [(1024, 1024, 8192), (100, 200, 136), (64, 1000, 520), (300, 72, 4104), (1000, 1000, 64)];
    let mut runs = VerifierRuns::new("COL-SPLIT");
    let (split, unsplit): (Vec<HopperConfig>, Vec<HopperConfig>) = codes.into_iter().partition(|c| c.split > 1);
    for (p, code, ptx) in hopper_cases(&unsplit, &shapes) {
        // (The wait0 twins on fewer grids: they change only when a slot is freed.)
        let grids: &[Option<u32>] = if code.wait0 { &[None, Some(6)] } else { &[None, Some(2), Some(6), Some(132)] };
        runs.run_grids(&p, &code, &ptx, grids);
    }
    let sliced: Vec<HopperConfig> = split.iter().flat_map(|c| [3, 16].map(|s| HopperConfig { split: s, ..*c })).collect();
    for (p, code, ptx) in hopper_cases(&sliced, &shapes) {
        runs.run_code(&p, &code, &ptx);
    }
    println!("{} col-split runs", runs.runs);
    runs.assert_all_passed();
}

/// Accumulator chains (`_x2`, `_x4`: the k16 steps of a K-tile go round-robin to separate
/// accumulators, summed after the main loop) pass the verifier: every such code, both
/// layouts where it builds, on shapes with one K-tile, three, and a ragged K; and chains
/// combined with the atomic split-K, a cluster along N and a persistent grid.
#[test]
fn chains_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let codes = hopper::chains_codes();
    assert_eq!(codes.len(), 20);
    let shapes = [(100, 200, 136), (64, 1000, 520), (300, 72, 4104), (1000, 1000, 64), (64, 512, 1024)];
    let mut runs = VerifierRuns::new("CHAINS");
    for (p, cfg, ptx) in hopper_cases(&codes, &shapes) {
        runs.run_code(&p, &cfg, &ptx);
    }
    let combos = [
        HopperConfig { chains: 2, split: 8, reduction: Reduction::Atomic, ..HopperConfig::new(64, 64, 8, 1) },
        HopperConfig { chains: 2, cluster_n: 4, ..HopperConfig::new(64, 16, 16, 1) },
        HopperConfig { chains: 4, persistent: true, ..HopperConfig::new(64, 32, 4, 1) },
    ];
    for (p, cfg, ptx) in hopper_cases(&combos, &[(256, 256, 8192), (64, 1000, 520), (1000, 1000, 520)]) {
        runs.run_code(&p, &cfg, &ptx);
        if cfg.persistent {
            runs.run_capped(&p, &cfg, &ptx, 7);
        }
    }
    println!("{} chain runs", runs.runs);
    runs.assert_all_passed();
}

/// Ping-pong Hopper kernels (each consumer warpgroup owns whole tiles, their main loops
/// take turns) through the sandboxed verifier: every ping-pong tile of the search, both
/// layouts, shapes the tiles do not divide, and grids of 1, 3, 7 and 132 blocks, so blocks
/// loop over several tiles, the two consumers get unequal counts, and the ring wraps
/// across tiles mid-phase. The first version waited on a full barrier two phases ahead
/// and hung on exactly these grids.
#[test]
fn pingpong_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper;
    if !hopper_or_skip() {
        return;
    }
    let tiles: Vec<_> = hopper::space().into_iter().filter(|c| c.consumer_mode == ConsumerMode::PingPong).collect();
    assert!(!tiles.is_empty());
    let shapes = [(1000, 1000, 1000), (100, 200, 136), (4096, 520, 64), (640, 384, 4104)];
    let mut runs = VerifierRuns::new("PINGPONG");
    for (p, cfg, ptx) in hopper_cases(&tiles, &shapes) {
        for blocks in [1, 3, 7, 132] {
            runs.run_capped(&p, &cfg, &ptx, blocks);
        }
    }
    println!("{} ping-pong runs", runs.runs);
    runs.assert_all_passed();
}

/// Uniform descriptors (`_du`: each wgmma descriptor one 64-bit add to a warp-uniform base;
/// the search's mode before `_dr`, now `--trial du`'s twins) pass the verifier: each of the
/// search's own codes and its K-128 and TMA-store twins, the skinny chains and the 64×8
/// tiles in that mode, one ring depth of each kind, on shapes the tiles do not divide, tn
/// and nn in turn, and the split-K tiles with uneven atomic slices.
#[test]
fn uniform_descriptor_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let base: Vec<HopperConfig> = hopper::space().into_iter().chain(hopper::skinny_chains_codes()).chain(hopper::narrow8_search_codes()).collect();
    let twins = hopper::twin_codes(&base, true, &[128], false);
    let split = hopper::split_tiles().into_iter().map(|c| HopperConfig { split: 5, reduction: Reduction::Atomic, ..c });
    let codes = one_of_each_kind(base.into_iter().chain(twins).chain(split).map(|c| hopper::in_desc_mode(&c, DescMode::Uniform)).collect());
    assert!(codes.len() > 20 && codes.iter().all(|c| c.desc != DescMode::Plain), "{}", codes.len());
    let runs = verify_in_turn("DESC-UNIFORM", &codes);
    println!("{} uniform-descriptor runs", runs.runs);
    runs.assert_all_passed();
}

/// One ring depth of each kind of code (about 1.3 s a run in the sandbox; all of them would
/// take minutes).
fn one_of_each_kind(mut codes: Vec<kaas::tuner::hopper::HopperConfig>) -> Vec<kaas::tuner::hopper::HopperConfig> {
    codes.sort_by_key(code_kind);
    codes.dedup_by_key(|c| code_kind(c));
    codes
}

/// A code's kind: the code but for its ring depth and its launch choices (grid, L2 promotion).
fn code_kind(c: &kaas::tuner::hopper::HopperConfig) -> kaas::tuner::hopper::HopperConfig {
    kaas::tuner::hopper::HopperConfig { stages: 0, persistent: false, l2_256: false, ..*c }
}

/// The Hopper codes of every kind that builds its descriptors or tiles its own way: the
/// search's (cooperative, ping-pong, narrow, 64×8) and their K-128, K-256 and TMA-store
/// twins, the skinny chains, K split across consumers, the column split (and its wait0
/// twins) and the multicast pairs.
fn kinds_of_code() -> Vec<kaas::tuner::hopper::HopperConfig> {
    use kaas::tuner::hopper;
    let base: Vec<hopper::HopperConfig> = hopper::space()
        .into_iter()
        .chain(hopper::skinny_chains_codes())
        .chain(hopper::narrow8_search_codes())
        .chain(hopper::ksplit_codes())
        .chain(hopper::col_split_codes())
        .chain(hopper::multicast_codes())
        .collect();
    let twins = hopper::twin_codes(&base, true, &[128, 256], false);
    base.into_iter().chain(twins).collect()
}

/// Each code through the verifier once, in one layout, tn and nn in turn, on shapes the tiles
/// do not divide (one K-tile, ragged K, long K), in turn too.
fn verify_in_turn(label: &'static str, codes: &[kaas::tuner::hopper::HopperConfig]) -> VerifierRuns {
    verify_in_turn_on(label, codes, &[(100, 200, 136), (1000, 1000, 1000), (64, 1000, 520), (640, 384, 4104), (300, 72, 4104), (256, 256, 8192)])
}

/// [`verify_in_turn`] on shapes of one's own, each code on the next.
fn verify_in_turn_on(label: &'static str, codes: &[kaas::tuner::hopper::HopperConfig], shapes: &[(u32, u32, u32)]) -> VerifierRuns {
    let mut runs = VerifierRuns::new(label);
    for (i, cfg) in codes.iter().enumerate() {
        let layout = [Layout::Tn, Layout::Nn].into_iter().cycle().skip(i).take(2).find(|&l| cfg.supports(l)).expect("a layout");
        let (m, n, k) = shapes[i % shapes.len()];
        let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).expect("shape"));
        runs.run_code(&p, cfg, &kaas::tuner::hopper::compile(cfg, p.acc, layout).expect("compile"));
    }
    runs
}

/// Stepped descriptors (`_dr`: one 32-bit add to the low word per wgmma operand) pass the
/// verifier in every kind of code that builds descriptors its own way: the search's codes
/// (cooperative, ping-pong, narrow, 64×8) and their K-128, K-256 and TMA-store twins, the
/// skinny chains, K split across consumers, the column split (and its wait0 twins), the
/// multicast pairs and the atomic split-K tiles with uneven slices; one ring depth of each,
/// tn and nn in turn, on shapes the tiles do not divide.
#[test]
fn stepped_descriptor_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let split = hopper::split_tiles().into_iter().map(|c| HopperConfig { split: 5, reduction: Reduction::Atomic, ..c });
    let codes = one_of_each_kind(kinds_of_code().into_iter().chain(split).map(|c| hopper::step_twin(&c)).collect());
    assert!(codes.len() > 40 && codes.iter().all(|c| c.desc == DescMode::Stepped && c.validate().is_ok()), "{}", codes.len());
    let runs = verify_in_turn("DESC-STEP", &codes);
    println!("{} stepped-descriptor runs over {} codes", runs.runs, codes.len());
    runs.assert_all_passed();
}

/// Every kind of code the stepped test covers, each in the search's modes (`_dr`, `_ec`),
/// plus split-K in order and hybrid stream-K (whose units take tiles their own way).
fn early_coords_codes() -> Vec<kaas::tuner::hopper::HopperConfig> {
    use kaas::tuner::hopper::{self, HopperConfig};
    let split = hopper::split_tiles().into_iter().flat_map(|c| [HopperConfig { split: 5, reduction: Reduction::Atomic, ..c }, HopperConfig { split: 5, reduction: Reduction::InOrder, ..c }]);
    let stream_k = hopper::stream_k_trial_codes(132).into_iter().filter(|c| c.reduction == Reduction::StreamKHybrid);
    let codes = one_of_each_kind(kinds_of_code().into_iter().chain(split).chain(stream_k).map(hopper::searched_modes).collect());
    assert!(codes.len() > 100 && codes.iter().all(|c| c.early_coords && c.entry(Acc::F32, Layout::Tn).ends_with("_ec") && c.validate().is_ok()), "{}", codes.len());
    codes
}

/// The tile's origin computed before the K loop (`_ec`, which the search builds into every
/// code) passes the verifier in every kind of code ([`early_coords_codes`]), one tile per
/// CTA; tn and nn in turn, shapes the tiles do not divide.
#[test]
fn early_coords_hopper_kernels_pass_the_verifier() {
    if !hopper_or_skip() {
        return;
    }
    let codes = early_coords_codes();
    let runs = verify_in_turn("EARLY-COORDS", &codes);
    println!("{} early-coordinates runs over {} codes", runs.runs, codes.len());
    runs.assert_all_passed();
}

/// The same on the persistent grid, where a CTA takes several tiles and recomputes the
/// origin per tile: the unsplit codes of the search's own tiles (cooperative, ping-pong,
/// narrow) with one cluster size, one ring depth each.
#[test]
fn early_coords_persistent_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let searched: Vec<HopperConfig> = hopper::space().into_iter().map(|c| code_kind(&hopper::searched_modes(c))).collect();
    let codes: Vec<HopperConfig> =
        early_coords_codes().into_iter().filter(|c| c.split == 1 && searched.contains(&code_kind(c))).map(|c| HopperConfig { persistent: true, ..c }).collect();
    assert!(codes.len() >= 8, "{}", codes.len());
    let runs = verify_in_turn("EARLY-COORDS-PERSISTENT", &codes);
    println!("{} early-coordinates runs on the persistent grid over {} codes", runs.runs, codes.len());
    runs.assert_all_passed();
}

/// The narrow Hopper tiles (64 × 16, 24, 32, 48; nn 16 and 32; C stored from registers)
/// pass the verifier: every width with the deepest and the 4-stage ring on shapes whose N
/// the widths do not divide, in each layout it builds for, both accumulators (tn), and the
/// 64×32 atomic split-K with uneven slices.
#[test]
fn narrow_hopper_tiles_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let narrow: Vec<HopperConfig> = hopper::space().into_iter().filter(|c| c.bn < 64).collect();
    assert_eq!(narrow.len(), 8, "{narrow:?}");
    let shapes = [(100, 200, 136), (64, 1000, 520), (300, 72, 4104), (1000, 1000, 64)];
    let mut runs = VerifierRuns::new("NARROW");
    for (p, cfg, ptx) in hopper_cases(&narrow, &shapes) {
        runs.run_code(&p, &cfg, &ptx);
    }
    for cfg in narrow.iter().filter(|c| c.stages == 4) {
        runs.run_f16_tn(cfg, (130, 1000, 520));
    }
    let split: Vec<HopperConfig> = hopper::split_tiles().into_iter().filter(|c| c.bn < 64).collect();
    assert!(!split.is_empty());
    for (p, cfg, ptx) in hopper_cases(&split, &[(256, 256, 8192), (100, 200, 4104)]) {
        for s in [3, 8, 29] {
            let c = HopperConfig { split: s, ..cfg };
            runs.run_code(&p, &c, &ptx);
        }
    }
    println!("{} narrow runs", runs.runs);
    runs.assert_all_passed();
}

/// The swap-AB codes (`_sw`, tn: the kernel computes Cᵀ with the weight as its A and the
/// tokens as its B, and stores C transposed) pass the verifier. For each token width, on a
/// problem of that width whose M, N and K the tiles do not divide (N no multiple of 8: the
/// transposed store's odd rows): the first unsplit code of each consumer count, one tile
/// per CTA and on a persistent grid of 3; the atomic split-K at 3 slices; stream-K and
/// hybrid stream-K on 7 blocks; a multicast pair; two chains; and the f16 accumulator. (The
/// codes of a width differ in ring depth and tile rows only otherwise: a run of every code
/// had done 103 when its 290 s were up.)
#[test]
fn swap_ab_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig, Reduction};
    if !hopper_or_skip() {
        return;
    }
    let mut runs = VerifierRuns::new("SWAP");
    let shapes = [(1, 1000, 520), (13, 2052, 4104), (20, 3000, 1000), (30, 1000, 1000), (45, 520, 136), (61, 5000, 520), (100, 1000, 4104), (200, 700, 520)];
    for (m, n, k) in shapes {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).expect("shape"));
        let space = hopper::swap_space(&p, 132);
        let bn = space.first().expect("swap codes").bn;
        let kinds: [(&str, &dyn Fn(&HopperConfig) -> bool); 7] = [
            ("c1", &|c| c.consumers == 1 && c.split == 1 && c.cluster_size() == 1 && c.chains == 1),
            ("c2", &|c| c.consumers == 2 && c.bm == 128 && c.split == 1 && c.cluster_size() == 1),
            ("split", &|c| c.reduction == Reduction::Atomic),
            ("stream-K", &|c| c.reduction == Reduction::StreamK),
            ("hybrid", &|c| c.reduction == Reduction::StreamKHybrid),
            ("pair", &|c| c.cluster_m == 2),
            ("chains", &|c| c.chains == 2),
        ];
        for (kind, pick) in kinds {
            let Some(code) = space.iter().find(|c| c.bn == bn && !c.persistent && pick(c)).copied() else {
                println!("SWAP {p}: no {kind} code");
                continue;
            };
            let ptx = hopper::compile(&code, Acc::F32, Layout::Tn).expect("compile");
            match kind {
                "c1" | "c2" => runs.run_grids(&p, &code, &ptx, &[None, Some(3)]),
                "split" => runs.run_code(&p, &HopperConfig { split: 3, ..code }, &ptx),
                "stream-K" | "hybrid" => runs.run_code(&p, &HopperConfig { split: 7, ..code }, &ptx),
                _ => runs.run_code(&p, &code, &ptx),
            }
        }
    }
    assert!(runs.runs >= 40, "{} runs", runs.runs);
    for code in hopper::swap_codes().iter().filter(|c| c.split == 1 && c.chains == 1 && c.cluster_size() == 1 && c.stages == 4 && c.bm == 64 && c.bn % 64 != 0) {
        runs.run_f16_tn(code, (code.bn.min(100), 1000, 520));
    }
    println!("{} swap-AB runs", runs.runs);
    runs.assert_all_passed();
}

/// Swap-AB's 256-row weight tiles (two consumers of 128 rows): unsplit on both grids, the
/// atomic split, stream-K (plain and hybrid) and the multicast pair, on token counts the
/// tile does not divide (16 to 128 wide) and weights of 520 to 2052 rows. The codes are the
/// family's own ([`swap_codes`](kaas::tuner::hopper::swap_codes)) at each problem's token
/// width, also where the problem's search would not offer a split (three K-tiles).
#[test]
fn swap_ab_256_row_tiles_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let mut runs = VerifierRuns::new("SWAP256");
    let codes: Vec<HopperConfig> = hopper::swap_codes().into_iter().filter(|c| c.bm == 256).collect();
    // 256 rows by 256 tokens would hold 256 accumulators a thread: the widest is 128.
    for (m, n, k) in [(13, 2052, 4104), (30, 1000, 1000), (45, 520, 136), (100, 700, 520)] {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).expect("shape"));
        let width = swap_width(&p);
        let at_width: Vec<HopperConfig> = codes.iter().filter(|c| c.bn == width).copied().collect();
        run_swap_tile_kinds(&mut runs, &p, &at_width);
    }
    assert!(runs.runs >= 24, "{} runs", runs.runs);
    runs.assert_all_passed();
}

/// The token width (wgmma's N) of the swap-AB codes the search offers `p`.
fn swap_width(p: &Problem) -> u32 {
    kaas::tuner::hopper::swap_space(p, 132).first().expect("swap codes").bn
}

/// The kinds of one swap-AB tile the GPU suite runs on `p`, from `codes` (the family's
/// codes of one height at the problem's token width): unsplit one tile per CTA and on a
/// persistent grid of 3, the atomic split, stream-K (plain and hybrid), and the multicast
/// pair where the width has one (it shares whole 8-row slices of the tokens: widths of
/// 16, 32, 48, …), each built for the problem's layout. Returns the unsplit code.
fn run_swap_tile_kinds(runs: &mut VerifierRuns, p: &Problem, codes: &[kaas::tuner::hopper::HopperConfig]) -> kaas::tuner::hopper::HopperConfig {
    use kaas::tuner::hopper::{self, HopperConfig, Reduction};
    let of = |pick: &dyn Fn(&HopperConfig) -> bool| codes.iter().find(|c| pick(c)).copied();
    let ptx = |c: &HopperConfig| hopper::compile(c, Acc::F32, p.layout).expect("compile");
    let unsplit = of(&|c| c.split == 1 && c.cluster_size() == 1 && c.chains == 1).expect("an unsplit swap code");
    runs.run_grids(p, &unsplit, &ptx(&unsplit), &[None, Some(3)]);
    for (reduction, split) in [(Reduction::Atomic, 3), (Reduction::StreamK, 7), (Reduction::StreamKHybrid, 7)] {
        let code = of(&|c| c.reduction == reduction).unwrap_or_else(|| panic!("a swap code with the {reduction:?} split"));
        runs.run_code(p, &HopperConfig { split, ..code }, &ptx(&code));
    }
    match of(&|c| c.cluster_m == 2) {
        Some(pair) => runs.run_code(p, &pair, &ptx(&pair)),
        None => assert!(!unsplit.bn.is_multiple_of(16), "no swap pair {} tokens wide", unsplit.bn),
    }
    unsplit
}

/// Swap-AB's 384-row weight tiles (three consumers of 128 rows, 512 threads, the weight in
/// three 128-row TMA boxes a slot): unsplit one tile per CTA and on a persistent grid of 3,
/// the atomic split, stream-K (plain and hybrid) and the multicast pair where the width has
/// one, at every width they have (8 to 64 tokens), on token counts the tile does not divide
/// and weights whose last tile leaves one or more of its boxes wholly outside (1000 rows: a
/// last tile of 232, its third box empty); and cuBLASLt's shape for this tile, 32 ×
/// 35840×5120 (94 tiles, one wave), unsplit; and the f16 accumulator. The codes are the
/// family's own ([`swap_codes`](kaas::tuner::hopper::swap_codes)) at each problem's token
/// width.
#[test]
fn swap_ab_384_row_tiles_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let mut runs = VerifierRuns::new("SWAP384");
    let codes: Vec<HopperConfig> = hopper::swap_codes().into_iter().filter(|c| c.bm == 384 && c.consumers == 3).collect();
    // 384 rows by 128 tokens would hold 128 accumulators a consumer thread: the widest is 64.
    for (m, n, k) in [(5, 1000, 520), (13, 2052, 4104), (30, 1000, 1000), (45, 520, 136), (61, 5000, 520), (32, 35840, 5120)] {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).expect("shape"));
        let width = swap_width(&p);
        let at_width: Vec<HopperConfig> = codes.iter().filter(|c| c.bn == width).copied().collect();
        if n == 35840 {
            let unsplit = at_width.iter().find(|c| c.split == 1 && c.cluster_size() == 1).expect("a 384-row code");
            runs.run_code(&p, unsplit, &hopper::compile(unsplit, Acc::F32, Layout::Tn).expect("compile"));
            continue;
        }
        let unsplit = run_swap_tile_kinds(&mut runs, &p, &at_width);
        runs.run_f16_tn(&unsplit, (m, n, k));
    }
    assert!(runs.runs >= 35, "{} runs", runs.runs);
    runs.assert_all_passed();
}

/// Swap-AB on nn: the weight (K×N row-major) is the kernel's A, M-major in shared memory
/// (64-row boxes by the slot's K) and read with the transpose-A immediate; the tokens are
/// K-major as on tn. Every tile height (64 and 128 rows of one consumer, 128 and 256 of
/// two, 384 of three) at each problem's token width, in the kinds [`run_swap_tile_kinds`]
/// runs, on token counts the tiles do not divide and weights whose last tile is partial (N
/// a multiple of 8: nn's weight rows must be 16-byte aligned for TMA); cuBLASLt's decode
/// shape, 32 × 35840×5120, unsplit; and the f16 accumulator.
#[test]
fn swap_ab_nn_tiles_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let mut runs = VerifierRuns::new("SWAPNN");
    let codes = hopper::swap_codes();
    let heights = [(64, 1), (128, 1), (128, 2), (256, 2), (384, 3)];
    for (m, n, k) in [(13, 2056, 4104), (45, 520, 136), (100, 3000, 520)] {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Nn, Shape::new(m, n, k).expect("shape"));
        let width = swap_width(&p);
        for (bm, consumers) in heights {
            let at: Vec<HopperConfig> = codes.iter().filter(|c| c.bm == bm && c.consumers == consumers && c.bn == width).copied().collect();
            // 256 rows stop at 128 tokens, 384 rows at 64.
            if at.is_empty() {
                assert!(bm >= 256 && width > 64, "no {bm}-row swap code at {p}");
                continue;
            }
            let unsplit = run_swap_tile_kinds(&mut runs, &p, &at);
            if bm == 64 {
                runs.run_f16(&unsplit, Layout::Nn, (m, n, k));
            }
        }
    }
    let decode = Problem::new(Arch::Sm90, Acc::F32, Layout::Nn, Shape::new(32, 35840, 5120).expect("shape"));
    for (bm, consumers) in [(128, 1), (384, 3)] {
        let code = codes.iter().find(|c| c.bm == bm && c.consumers == consumers && c.bn == 32 && c.split == 1 && c.cluster_size() == 1 && c.chains == 1).expect("a decode code");
        runs.run_code(&decode, code, &hopper::compile(code, Acc::F32, Layout::Nn).expect("compile"));
    }
    assert!(runs.runs >= 70, "{} runs", runs.runs);
    runs.assert_all_passed();
}

/// The 192×128 tile of three consumers (64 rows each; not swap-AB) passes the verifier on
/// shapes it does not divide, both layouts, both grids, a short persistent grid, and as
/// hybrid stream-K (the `rows192` trial's codes, in the search's descriptor mode).
#[test]
fn rows_192_hopper_tiles_pass_the_verifier() {
    use kaas::tuner::hopper;
    if !hopper_or_skip() {
        return;
    }
    let codes: Vec<hopper::HopperConfig> = hopper::rows_192_codes(132).into_iter().map(hopper::searched_modes).collect();
    let shapes = [(1000, 1000, 1000), (520, 1000, 4104), (200, 4104, 520), (512, 35840, 5120)];
    let mut runs = VerifierRuns::new("ROWS192");
    for layout in [Layout::Tn, Layout::Nn] {
        let built: Vec<(hopper::HopperConfig, String)> = codes.iter().map(|c| (*c, hopper::compile(c, Acc::F32, layout).expect("compile"))).collect();
        for (m, n, k) in shapes {
            let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).expect("shape"));
            for (cfg, ptx) in &built {
                // A short grid means something on the persistent grid only.
                let grids: &[u32] = if cfg.persistent && m == 1000 { &[3, 132] } else { &[u32::MAX] };
                for &blocks in grids {
                    runs.run_capped(&p, cfg, ptx, blocks);
                }
            }
        }
    }
    assert!(runs.runs >= 24, "{} runs", runs.runs);
    runs.assert_all_passed();
}

/// The 256×160 tile (tn; two consumers of 128 rows, 160 accumulators each, C stored from
/// registers) passes the verifier on shapes it does not divide, on both grids, a short
/// persistent grid, and with the f16 accumulator.
#[test]
fn wide_160_hopper_tiles_pass_the_verifier() {
    use kaas::tuner::hopper;
    if !hopper_or_skip() {
        return;
    }
    let codes = hopper::wide_160_codes();
    let shapes = [(1000, 1000, 1000), (300, 520, 4104), (4096, 330, 64)];
    let mut runs = VerifierRuns::new("WIDE160");
    for (p, cfg, ptx) in hopper_cases(&codes, &shapes) {
        // A short grid means something on the persistent grid only.
        let grids: &[u32] = if cfg.persistent { &[3, 132] } else { &[u32::MAX] };
        for &blocks in grids {
            runs.run_capped(&p, &cfg, &ptx, blocks);
        }
    }
    runs.run_f16_tn(&codes[0], (520, 1000, 520));
    println!("{} wide-160 runs", runs.runs);
    runs.assert_all_passed();
}

/// The mma family (mma.sync + cp.async) through the sandboxed verifier (binary exact test,
/// deviation bound, containment): every tile of the search, both layouts and both
/// accumulators on shapes the tiles do not divide, rows that are not 16-byte aligned
/// (K % 8 != 0: the element-by-element path), and split-K with both reductions, uneven
/// slices included. Built for the device's own arch.
#[test]
fn mma_family_kernels_pass_the_verifier() {
    use kaas::tuner::mma::{self, MmaConfig};
    let Some(gpu) = gpu_and_nvrtc_or_skip() else { return };
    let arch = if gpu.facts().compute_capability >= (9, 0) { Arch::Sm90 } else { Arch::Sm80 };
    drop(gpu);
    let mut cases: Vec<((u32, u32, u32), MmaConfig, Acc)> = Vec::new();
    for (i, cfg) in mma::space().into_iter().enumerate() {
        cases.push(((100 + 37 * i as u32, 200 - 9 * i as u32, 136), cfg, if i % 2 == 0 { Acc::F32 } else { Acc::F16 }));
    }
    let small = mma::space()[0];
    cases.push(((33, 100, 70), small, Acc::F32));
    cases.push(((100, 72, 30), mma::space()[3], Acc::F32));
    let tile = |bm, bn, atomic| mma::split_tiles().into_iter().find(|c| c.bm == bm && c.bn == bn && c.reduction.is_atomic() == atomic).expect("a split-K tile");
    cases.push(((64, 64, 16384), MmaConfig { split: 64, ..tile(32, 32, true) }, Acc::F32));
    cases.push(((100, 200, 1000), MmaConfig { split: 5, ..tile(32, 64, false) }, Acc::F32));
    cases.push(((1000, 72, 3000), MmaConfig { split: 23, ..tile(64, 32, true) }, Acc::F32));
    cases.push(((256, 512, 2048), MmaConfig { split: 3, ..tile(64, 64, false) }, Acc::F32));
    let mut runs = VerifierRuns::new("MMA");
    for ((m, n, k), cfg, acc) in cases {
        for layout in Layout::ALL {
            let p = Problem::new(arch, acc, layout, Shape::new(m, n, k).expect("shape"));
            let ptx = mma::compile(&cfg, arch, acc, layout).expect("compile");
            runs.run(&format!("{p} {}", cfg.label()), ptx, cfg.manifest(&p));
        }
    }
    runs.assert_all_passed();
}

/// The mma family's split-K in a cluster (`_skc`: the slices of a tile are one cluster's
/// CTAs; ranks 1.. push their partials into rank 0's shared memory with st.async) passes
/// every stage of the verifier, which launches each kernel several times (a kernel that
/// left rank 0's barrier or inbox in a bad state fails the later runs): every code, both
/// layouts, 2, 4, 8 and 16 slices where rank 0's inbox fits (16 is a non-portable
/// cluster), shapes that tiles do not divide, uneven slices, slices with no K-tile (K 200
/// has 4 K-tiles), and rows that are not 16-byte aligned. A grid one cluster short, and a
/// launch with less shared memory than the inbox needs, must write nothing and fail fast.
#[test]
fn mma_cluster_split_kernels_pass_the_verifier() {
    use kaas::tuner::mma::{self, MmaConfig};
    if !hopper_or_skip() {
        return;
    }
    let shapes = [(64, 64, 4096), (100, 200, 4104), (130, 72, 200), (256, 256, 2048), (33, 100, 1030)];
    let mut runs = VerifierRuns::new("MMA cluster");
    for (i, code) in mma::cluster_split_codes().into_iter().enumerate() {
        for (j, layout) in Layout::ALL.into_iter().enumerate() {
            let ptx = mma::compile(&code, Arch::Sm90, Acc::F32, layout).expect("compile");
            for (q, split) in [2, 4, 8, 16].into_iter().enumerate() {
                let cfg = MmaConfig { split, ..code };
                if cfg.validate().is_err() {
                    continue;  // rank 0's inbox would not fit
                }
                let (m, n, k) = shapes[(i + j + q) % shapes.len()];
                let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape::new(m, n, k).expect("shape"));
                runs.run(&format!("{p} {}", cfg.label()), ptx.clone(), cfg.manifest(&p));
            }
        }
    }
    let cfg = MmaConfig { split: 4, ..mma::cluster_split_codes()[0] };
    let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(128, 64, 1024).expect("shape"));
    let ptx = mma::compile(&cfg, Arch::Sm90, Acc::F32, Layout::Tn).expect("compile");
    let mut short = cfg.manifest(&p);
    short.launches[0].grid[0] -= 4;
    let mut cramped = cfg.manifest(&p);
    cramped.launches[0].shared_mem_bytes -= 16;
    for (what, manifest) in [("short grid", short), ("short shared memory", cramped)] {
        let o = sandbox::run_with(&sandbox_command(), &Job { ptx: ptx.clone(), manifest, secret_seed: rand::random(), watchdog_ms: None, bench: None }, Duration::from_secs(60));
        println!("MMA cluster {what}: {:?} {}", o.verdict, first_line(&o.message, 160));
        assert!(o.verdict != Verdict::Pass && o.verdict != Verdict::Timeout, "{what} must fail fast: {:?} {}", o.verdict, o.message);
    }
    runs.assert_all_passed();
}

/// The mma family's deep-ring codes (`kaas tune --trial mma-deep`, 6 and 8 stages) through
/// the sandboxed verifier: every code, both layouts, on a shape no tile divides with K long
/// enough to wrap the ring twice; the accumulators alternate; one K that is not a multiple
/// of 8 (the element-by-element path). They stay out of the search until timed, but a
/// trial's winners are submitted like any other, so they must pass first.
#[test]
fn mma_deep_ring_kernels_pass_the_verifier() {
    use kaas::tuner::mma;
    let Some(gpu) = gpu_and_nvrtc_or_skip() else { return };
    let arch = if gpu.facts().compute_capability >= (9, 0) { Arch::Sm90 } else { Arch::Sm80 };
    drop(gpu);
    let mut runs = VerifierRuns::new("MMA deep");
    for (i, cfg) in mma::deep_codes().into_iter().enumerate() {
        let acc = if i % 2 == 0 { Acc::F32 } else { Acc::F16 };
        let k = if i == 3 { 1203 } else { 16 * 64 + 40 };
        for layout in Layout::ALL {
            let p = Problem::new(arch, acc, layout, Shape::new(300 + 17 * i as u32, 264 - 8 * i as u32, k).expect("shape"));
            let ptx = mma::compile(&cfg, arch, acc, layout).expect("compile");
            runs.run(&format!("{p} {}", cfg.label()), ptx, cfg.manifest(&p));
        }
    }
    runs.assert_all_passed();
}

/// nn's narrow tiles (B in one N-major box of 8, 16 or 32 columns, swizzled at that width)
/// pass the verifier in every kind of code the search offers them on skinny and small nn
/// shapes (each width, K 64, 128 and 256, chains, atomic split-K, clusters along M and N),
/// one ring depth each, in the search's modes, and the unsplit ones on the persistent grid
/// too; nn, on shapes the tiles do not divide.
#[test]
fn nn_narrow_hopper_kernels_pass_the_verifier() {
    use kaas::tuner::hopper::{self, HopperConfig};
    if !hopper_or_skip() {
        return;
    }
    let mut offered = Vec::new();
    for (m, n, k) in [(64, 1024, 512), (256, 64, 1024), (64, 64, 16384), (128, 512, 4096), (64, 256, 256)] {
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Nn, Shape::new(m, n, k).expect("shape"));
        // Split counts vary by problem: one count (uneven slices on these shapes) per kind.
        offered.extend(hopper::space_for(&p, 132).into_iter().filter(|c| c.bn < 64).map(|c| hopper::searched_modes(HopperConfig { split: c.split.min(5), ..c })));
    }
    let codes = one_of_each_kind(offered);
    for bn in [8, 16, 32] {
        assert!(codes.iter().any(|c| c.bn == bn), "width {bn}: {codes:?}");
    }
    assert!([128, 256].iter().all(|&bk| codes.iter().any(|c| c.bk == bk)) && codes.iter().any(|c| c.split > 1) && codes.iter().any(|c| c.cluster_size() > 1), "{codes:?}");
    let persistent: Vec<HopperConfig> = codes.iter().filter(|c| c.split == 1).map(|c| HopperConfig { persistent: true, ..*c }).collect();
    let shapes = [(100, 200, 136), (64, 1000, 520), (300, 72, 4104), (1000, 1000, 1000), (200, 64, 256)];
    let mut runs = VerifierRuns::new("NN-NARROW");
    for (i, cfg) in codes.iter().chain(&persistent).enumerate() {
        assert!(cfg.supports(Layout::Nn) && cfg.early_coords && cfg.desc == DescMode::Stepped, "{cfg:?}");
        let (m, n, k) = shapes[i % shapes.len()];
        let p = Problem::new(Arch::Sm90, Acc::F32, Layout::Nn, Shape::new(m, n, k).expect("shape"));
        runs.run_code(&p, cfg, &hopper::compile(cfg, p.acc, p.layout).expect("compile"));
    }
    println!("{} nn narrow-tile runs over {} codes ({} of them persistent)", runs.runs, codes.len() + persistent.len(), persistent.len());
    runs.assert_all_passed();
}

/// Every kind of code that takes a one-tile grid (unsplit, no ping-pong, no cluster: the
/// early-coords codes' kinds, narrow and nn narrow tiles included), on the grid `on` puts
/// it on (`_2d` or `_2g`).
fn one_tile_grid_codes(on: fn(kaas::tuner::hopper::HopperConfig) -> kaas::tuner::hopper::HopperConfig) -> Vec<kaas::tuner::hopper::HopperConfig> {
    use kaas::tuner::hopper::{self, HopperConfig};
    let nn_narrow = hopper::space().into_iter().filter(|c| c.bn < 64 && c.supports(Layout::Nn)).map(hopper::searched_modes);
    let codes = one_of_each_kind(early_coords_codes().into_iter().chain(nn_narrow).filter(HopperConfig::takes_grid2d).map(on).collect());
    assert!(codes.len() > 40 && codes.iter().all(|c| c.grid.one_tile() && c.validate().is_ok()), "{}", codes.len());
    codes
}

/// The 2-D grid (`_2d`: one tile per CTA, the tile its block index) passes the verifier in
/// every kind of code that takes it, tn and nn in turn, on shapes the tiles do not divide.
#[test]
fn grid2d_hopper_kernels_pass_the_verifier() {
    if !hopper_or_skip() {
        return;
    }
    let codes = one_tile_grid_codes(|c| kaas::tuner::hopper::HopperConfig { grid: TileGrid::TwoD, ..c });
    let runs = verify_in_turn("GRID-2D", &codes);
    println!("{} 2-D grid runs over {} codes", runs.runs, codes.len());
    runs.assert_all_passed();
}

/// The grouped grid (`_2g`: one tile per CTA, tile row z·16 + x, column y) passes the
/// verifier in every kind of code that takes it, tn and nn in turn, on shapes whose last
/// 16-row group is partial (the CTAs past M must write nothing) or whole, and that the
/// tiles do not divide.
#[test]
fn grouped_grid_hopper_kernels_pass_the_verifier() {
    if !hopper_or_skip() {
        return;
    }
    let codes = one_tile_grid_codes(|c| kaas::tuner::hopper::HopperConfig { grid: TileGrid::Grouped, ..c });
    // Tile rows of 64 / 128: 18 / 9, 33 / 17, 66 / 33, 2 / 1, 21 / 11, 16 / 8.
    let shapes = [(1100, 200, 136), (2100, 1000, 520), (4200, 136, 264), (100, 4000, 1000), (1300, 72, 4104), (1024, 384, 256)];
    let runs = verify_in_turn_on("GRID-GROUPED", &codes, &shapes);
    println!("{} grouped-grid runs over {} codes", runs.runs, codes.len());
    runs.assert_all_passed();
}

/// The decode family (`kaas_gemv_*`) passes every stage of the verifier: every other code
/// (each MT, rows, warps and depth meets another), once, on shapes in turn whose N no block size divides, K with a partial 256-element chunk, K
/// that is not a multiple of 8 (the element-by-element path), M below and equal to the
/// code's MT, and one M past it (two rows of blocks).
#[test]
fn gemv_family_kernels_pass_the_verifier() {
    use kaas::tuner::gemv;
    let Some(gpu) = gpu_and_nvrtc_or_skip() else { return };
    let arch = if gpu.facts().compute_capability >= (9, 0) { Arch::Sm90 } else { Arch::Sm80 };
    drop(gpu);
    let shapes = [(1, 1000, 4104), (0, 4097, 520), (0, 300, 301), (0, 130, 8192), (0, 77, 64)];
    let mut runs = VerifierRuns::new("GEMV");
    for (i, cfg) in gemv::codes().into_iter().filter(|c| !c.tc).step_by(2).enumerate() {
        let (m, n, k) = shapes[i % shapes.len()];
        // M: the shape's own, else MT itself, MT − 1 or, every seventh code, MT + 1.
        let m = if m > 0 { m } else if i % 7 == 0 { cfg.mt + 1 } else if i % 2 == 0 { cfg.mt } else { (cfg.mt - 1).max(1) };
        let p = Problem::new(arch, Acc::F32, Layout::Tn, Shape::new(m, n, k).expect("shape"));
        let ptx = gemv::compile(&cfg, arch, Acc::F32, Layout::Tn).expect("compile");
        runs.run(&format!("{p} {}", cfg.label()), ptx, cfg.manifest(&p));
    }
    runs.assert_all_passed();
}

/// The decode family's tensor-core codes (`_tc`, `gemv_mma_hgemm.cu`) pass every stage of
/// the verifier: every code once, on shapes in turn whose N no 16-row tile divides, K with a
/// partial 32-element span, K that is not a multiple of 8 (the element path), K of one
/// span, and M at, below and past the code's MT (4 rows in a tile of 8; two rows of blocks).
#[test]
fn gemv_tc_kernels_pass_the_verifier() {
    use kaas::tuner::gemv;
    let Some(gpu) = gpu_and_nvrtc_or_skip() else { return };
    let arch = if gpu.facts().compute_capability >= (9, 0) { Arch::Sm90 } else { Arch::Sm80 };
    drop(gpu);
    let shapes = [(0, 4097, 520), (0, 300, 301), (0, 1000, 4104), (0, 130, 8192), (0, 77, 32)];
    let mut runs = VerifierRuns::new("GEMV-TC");
    for (i, cfg) in gemv::codes().into_iter().filter(|c| c.tc).enumerate() {
        let (_, n, k) = shapes[i % shapes.len()];
        let m = match i % 4 {
            0 => cfg.mt,
            1 => cfg.mt - 3,
            2 => cfg.mt + 1,
            _ => 4,
        };
        let p = Problem::new(arch, Acc::F32, Layout::Tn, Shape::new(m, n, k).expect("shape"));
        let ptx = gemv::compile(&cfg, arch, Acc::F32, Layout::Tn).expect("compile");
        runs.run(&format!("{p} {}", cfg.label()), ptx, cfg.manifest(&p));
    }
    runs.assert_all_passed();
}
