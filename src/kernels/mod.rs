//! The kernels kaas ships itself, so that the catalog is full on day one: CUDA C++
//! templates under `kernels/templates/`, compiled to PTX with NVRTC, each with the honest
//! launch manifest that runs it.
//!
//! `simple_hgemm.cu`: tensor-core (`mma.sync` m16n8k16) tiled kernel, correct for every
//! shape and both layouts and accumulators. Plain pointers, no tensor maps: it runs on
//! any sm_80+ device. Correctness first; speed is the tuner's business.

pub mod axes;

use self::axes::{Names, head_field};
use crate::gpu::{GpuError, nvrtc};
use crate::manifest::{ABI, Launch, Manifest};
use crate::problem::{Acc, Layout, Problem};

/// The template source, compiled into the binary so a worker needs no files beside it.
pub const SIMPLE_HGEMM_TEMPLATE: &str = include_str!("../../kernels/templates/simple_hgemm.cu");

/// The PTX target the simple kernel is built for: sm_80 code runs on sm_80 and later
/// (the driver JIT-compiles it for the device).
pub const SIMPLE_HGEMM_TARGET: &str = "compute_80";

/// The simple kernel's names: `kaas_simple_hgemm_f32_tn_128x128x32_w2x4`, a head and no
/// rows (see [`axes`]).
pub static SIMPLE_NAMES: Names<SimpleConfig> = Names {
    prefix: "kaas_simple_hgemm_",
    head: &[
        head_field!("", "KAAS_BM" => bm, "KAAS_BN" => bn, "KAAS_BK" => bk),
        head_field!("w", "KAAS_WARPS_M" => warps_m, "KAAS_WARPS_N" => warps_n),
    ],
    axes: &[],
    acc_layout_defines: true,
};

/// Tile shape of the simple kernel: a `bm × bn` block tile of C, K advancing `bk` at a
/// time, `warps_m × warps_n` warps per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SimpleConfig {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub warps_m: u32,
    pub warps_n: u32,
}

impl Default for SimpleConfig {
    fn default() -> Self {
        SimpleConfig::LARGE
    }
}

impl SimpleConfig {
    /// 128×128×32 tiles, 8 warps (2×4), 64×32 of C per warp.
    pub const LARGE: SimpleConfig = SimpleConfig { bm: 128, bn: 128, bk: 32, warps_m: 2, warps_n: 4 };
    /// 64×64×32 tiles, 4 warps (2×2), for small or skinny problems.
    pub const SMALL: SimpleConfig = SimpleConfig { bm: 64, bn: 64, bk: 32, warps_m: 2, warps_n: 2 };

    pub fn threads(&self) -> u32 {
        self.warps_m * self.warps_n * 32
    }

    /// Checks the constraints the template's static assertions enforce, so a bad config
    /// fails here with words rather than in NVRTC.
    pub fn validate(&self, layout: Layout) -> Result<(), String> {
        let SimpleConfig { bm, bn, bk, warps_m, warps_n } = *self;
        let ok = warps_m > 0
            && warps_n > 0
            && self.threads() <= 1024
            && bm % warps_m == 0
            && bn % warps_n == 0
            && (bm / warps_m) % 16 == 0
            && (bn / warps_n) % 16 == 0
            && bk % 16 == 0
            && bk > 0
            && (bm * bk / 8) % self.threads() == 0
            && (bn * bk / 8) % self.threads() == 0;
        let smem_ok = self.shared_mem_bytes(layout) <= 227 * 1024;
        if ok && smem_ok { Ok(()) } else { Err(format!("simple HGEMM config {self:?} does not tile ({layout})")) }
    }

    /// Dynamic shared memory: two stages of the A tile `[bm][bk+8]` and the B tile
    /// (`[bk][bn+8]` for nn, `[bn][bk+8]` for tn), fp16.
    pub fn shared_mem_bytes(&self, layout: Layout) -> u32 {
        let a = self.bm * (self.bk + 8);
        let b = match layout {
            Layout::Nn => self.bk * (self.bn + 8),
            Layout::Tn => self.bn * (self.bk + 8),
        };
        2 * (a + b) * 2
    }

    /// The entry name, e.g. `kaas_simple_hgemm_f32_tn_128x128x32_w2x4`.
    pub fn entry(&self, acc: Acc, layout: Layout) -> String {
        SIMPLE_NAMES.entry(self, acc, layout)
    }

    /// The configuration, accumulator and layout an entry name encodes (the inverse of
    /// [`SimpleConfig::entry`]); `None` for any other name or a configuration that does not tile.
    pub fn from_entry(entry: &str) -> Option<(SimpleConfig, Acc, Layout)> {
        let (cfg, acc, layout) = SIMPLE_NAMES.parse(entry, SimpleConfig::LARGE)?;
        cfg.validate(layout).ok()?;
        Some((cfg, acc, layout))
    }

    fn defines(&self, acc: Acc, layout: Layout) -> Vec<(String, String)> {
        SIMPLE_NAMES.defines(self, acc, layout)
    }
}

/// Compiles the simple kernel for a problem's accumulator and layout (the PTX serves
/// every shape) with NVRTC.
pub fn compile_simple(problem: &Problem, config: &SimpleConfig) -> Result<String, GpuError> {
    config.validate(problem.layout).map_err(|m| GpuError::Refused { context: "simple HGEMM".into(), message: m })?;
    nvrtc::compile(
        SIMPLE_HGEMM_TEMPLATE,
        "simple_hgemm.cu",
        SIMPLE_HGEMM_TARGET,
        &config.defines(problem.acc, problem.layout),
    )
}

/// The launch manifest for the simple kernel on one problem: one launch, a grid of
/// `ceil(N/bn) × ceil(M/bm)` blocks, params `(A, B, C, M, N, K)`.
pub fn manifest_for(problem: &Problem, config: &SimpleConfig) -> Manifest {
    Manifest {
        abi: ABI.to_string(),
        problem: *problem,
        workspace_bytes: 0,
        launches: vec![Launch {
            entry: config.entry(problem.acc, problem.layout),
            grid: [problem.n.div_ceil(config.bn), problem.m.div_ceil(config.bm), 1],
            block: [config.threads(), 1, 1],
            cluster: [1, 1, 1],
            shared_mem_bytes: config.shared_mem_bytes(problem.layout),
            params: crate::manifest::pointer_params(),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Arch, Shape};

    #[test]
    fn manifests_cover_every_extent_and_validate() {
        for config in [SimpleConfig::LARGE, SimpleConfig::SMALL] {
            for layout in Layout::ALL {
                config.validate(layout).unwrap();
                for (m, n, k) in [(1, 1, 1), (65536, 65536, 65536), (17, 33, 65), (128, 129, 1)] {
                    let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape { m, n, k });
                    let man = manifest_for(&p, &config);
                    man.validate().unwrap();
                    let l = &man.launches[0];
                    assert!(l.grid[0] * config.bn >= n && (l.grid[0] - 1) * config.bn < n);
                    assert!(l.grid[1] * config.bm >= m && (l.grid[1] - 1) * config.bm < m);
                    assert!(l.shared_mem_bytes <= 48 * 1024, "fits without opt-in");
                }
            }
        }
    }

    #[test]
    fn configs_that_do_not_tile_are_refused() {
        let bad = SimpleConfig { bm: 48, ..SimpleConfig::LARGE };
        assert!(bad.validate(Layout::Tn).is_err());
        let bad = SimpleConfig { bk: 8, ..SimpleConfig::LARGE };
        assert!(bad.validate(Layout::Nn).is_err());
    }

    /// The names and defines are data the template reads (see [`axes::check_names`]).
    #[test]
    fn the_names_are_data_the_template_reads() {
        let problems = axes::check_names(&SIMPLE_NAMES, SimpleConfig::LARGE, &[SIMPLE_HGEMM_TEMPLATE], &[]);
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn entry_names_say_what_they_compute() {
        assert_eq!(SimpleConfig::LARGE.entry(Acc::F16, Layout::Nn), "kaas_simple_hgemm_f16_nn_128x128x32_w2x4");
        assert!(crate::manifest::is_ptx_identifier(&SimpleConfig::SMALL.entry(Acc::F32, Layout::Tn)));
        let tiny = SimpleConfig { bm: 32, bn: 32, bk: 32, warps_m: 2, warps_n: 2 };
        for cfg in [SimpleConfig::LARGE, SimpleConfig::SMALL, tiny] {
            for layout in Layout::ALL {
                assert_eq!(SimpleConfig::from_entry(&cfg.entry(Acc::F32, layout)), Some((cfg, Acc::F32, layout)));
            }
        }
        assert_eq!(SimpleConfig::from_entry("kaas_simple_hgemm_f32_tn_48x128x32_w2x4"), None, "does not tile");
        assert_eq!(SimpleConfig::from_entry("kaas_wgmma_f32_tn_64x64x64_s8_c1_m1_g16"), None);
    }

    /// Every simple-kernel entry of the shipped catalogs (`kernels/*/`) is what the
    /// template builds today: its PTX hashes to its name, recompiling its configuration
    /// (NVRTC from the pip wheel CI installs) gives the same bytes, and its manifest is the
    /// one [`manifest_for`] gives.
    #[test]
    fn the_shipped_simple_kernels_rebuild_from_the_template() {
        let mut checked = 0;
        for (_, index, ptx) in crate::catalog::bundle::shipped_bundles() {
            for e in &index.entries {
                let Some((cfg, acc, layout)) = SimpleConfig::from_entry(&e.manifest.launches[0].entry) else { continue };
                assert_eq!((acc, layout), (e.problem.acc, e.problem.layout), "{}", e.problem);
                assert_eq!(crate::signing::sha256_hex(ptx[&e.artifact].as_bytes()), e.artifact, "{}: PTX does not match its sha256", e.problem);
                assert_eq!(e.manifest, manifest_for(&e.problem, &cfg), "{}: manifest differs", e.problem);
                checked += 1;
                if nvrtc::available().is_ok() {
                    let built = compile_simple(&e.problem, &cfg).unwrap();
                    assert_eq!(crate::signing::sha256_hex(built.as_bytes()), e.artifact, "{} for {} no longer builds to the committed PTX", cfg.entry(acc, layout), e.problem);
                }
            }
        }
        if let Err(why) = nvrtc::available() {
            eprintln!("SKIP: no NVRTC ({why}); checked the sha256 and manifests of {checked} simple entries");
        }
        assert!(checked > 0, "no simple kernel in the shipped catalogs");
    }

    /// Runs only where NVRTC loads (e.g. with the pip wheel on LD_LIBRARY_PATH).
    #[test]
    fn the_template_compiles_for_every_variant_where_nvrtc_is_present() {
        if let Err(why) = nvrtc::available() {
            eprintln!("SKIP: no NVRTC ({why})");
            return;
        }
        for acc in Acc::ALL {
            for layout in Layout::ALL {
                let p = Problem::new(Arch::Sm80, acc, layout, Shape { m: 1, n: 1, k: 1 });
                let ptx = compile_simple(&p, &SimpleConfig::LARGE).unwrap();
                let entry = SimpleConfig::LARGE.entry(acc, layout);
                assert!(ptx.contains(&format!(".entry {entry}")), "{entry} missing");
                assert!(ptx.contains("mma.sync.aligned.m16n8k16"), "no tensor-core mma in {entry}");
                assert!(ptx.contains(".target sm_80"));
                // For reading the PTX or running ptxas on it by hand.
                if let Ok(dir) = std::env::var("KAAS_DUMP_PTX_DIR") {
                    std::fs::write(std::path::Path::new(&dir).join(format!("{entry}.ptx")), &ptx).unwrap();
                }
            }
        }
    }
}
