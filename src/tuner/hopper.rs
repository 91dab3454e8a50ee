//! The Hopper family (`kernels/templates/hopper_hgemm.cu`): wgmma fed by TMA through an
//! mbarrier ring, a producer warpgroup and one or two consumer warpgroups with register
//! reallocation, a grouped tile order, and an optional persistent grid. One PTX per
//! (accumulator, layout, tile, stages, consumers); the persistent and one-tile-per-block
//! grids share it.

use serde::{Deserialize, Serialize};

use crate::gpu::{GpuError, nvrtc};
use crate::manifest::{ABI, Buffer, Dim, I32Value, Launch, Manifest, Operand, Param, Swizzle, TensorMapSpec};
use crate::problem::{Acc, Layout, Problem};

pub const TEMPLATE: &str = include_str!("../../kernels/templates/hopper_hgemm.cu");
pub const TEMPLATE_NAME: &str = "hopper_hgemm.cu";
/// NVRTC's virtual architecture: wgmma and setmaxnreg need the arch-specific target.
pub const TARGET: &str = "compute_90a";
/// Dynamic plus static shared memory one block may use on Hopper (227 KiB).
const SMEM_LIMIT: u32 = 232_448;
const BK: u32 = 64;
/// Group height of the tile order, in tiles.
const GROUP_M: u32 = 16;

/// One point of the search space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HopperConfig {
    pub bm: u32,
    pub bn: u32,
    pub stages: u32,
    pub consumers: u32,
    /// Grid of min(tiles, SMs) blocks looping over tiles, instead of one block per tile.
    pub persistent: bool,
}

impl HopperConfig {
    pub fn validate(&self) -> Result<(), String> {
        let per = self.bm / self.consumers.max(1);
        if !matches!(self.consumers, 1 | 2) || !self.bm.is_multiple_of(self.consumers) || !matches!(per, 64 | 128) {
            return Err(format!("BM {} with {} consumer warpgroup(s): each must own 64 or 128 rows", self.bm, self.consumers));
        }
        if !matches!(self.bn, 64 | 128 | 256) {
            return Err(format!("BN {} is not 64, 128 or 256", self.bn));
        }
        if !(2..=8).contains(&self.stages) {
            return Err(format!("{} stages; 2 to 8", self.stages));
        }
        if self.shared_mem_bytes() + self.static_smem_bytes() > SMEM_LIMIT {
            return Err(format!("{} B of shared memory exceed {SMEM_LIMIT}", self.shared_mem_bytes() + self.static_smem_bytes()));
        }
        Ok(())
    }

    pub fn threads(&self) -> u32 {
        128 * (self.consumers + 1)
    }

    /// The ring, 1 KiB for 1024-byte alignment, and the staged epilogue.
    pub fn shared_mem_bytes(&self) -> u32 {
        self.stages * (self.bm + self.bn) * BK * 2 + 1024 + self.consumers * 9216
    }

    fn static_smem_bytes(&self) -> u32 {
        2 * self.stages * 8
    }

    /// The PTX entry; the persistent flag is a grid choice, not part of the code.
    pub fn entry(&self, acc: Acc, layout: Layout) -> String {
        format!("kaas_wgmma_{}_{}_{}x{}x{BK}_s{}_c{}_m1_g{GROUP_M}", acc.as_str(), layout.as_str(), self.bm, self.bn, self.stages, self.consumers)
    }

    pub fn defines(&self, acc: Acc, layout: Layout) -> Vec<(String, String)> {
        [
            ("KAAS_BM", self.bm),
            ("KAAS_BN", self.bn),
            ("KAAS_BK", BK),
            ("KAAS_STAGES", self.stages),
            ("KAAS_CONSUMERS", self.consumers),
            ("KAAS_CLUSTER_M", 1),
            ("KAAS_GROUP_M", GROUP_M),
            ("KAAS_ACC_F32", u32::from(acc == Acc::F32)),
            ("KAAS_LAYOUT_TN", u32::from(layout == Layout::Tn)),
            ("KAAS_EPILOGUE", 1),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// The same code with the other grid.
    pub fn code_key(&self) -> (u32, u32, u32, u32) {
        (self.bm, self.bn, self.stages, self.consumers)
    }

    pub fn grid(&self, p: &Problem, sm_count: u32) -> u32 {
        let tiles = p.m.div_ceil(self.bm) * p.n.div_ceil(self.bn);
        if self.persistent { tiles.min(sm_count.max(1)) } else { tiles }
    }

    pub fn manifest(&self, p: &Problem, sm_count: u32) -> Manifest {
        let b_box = if p.layout == Layout::Tn { [BK, self.bn] } else { [BK, 64] };
        Manifest {
            abi: ABI.into(),
            problem: *p,
            workspace_bytes: 0,
            launches: vec![Launch {
                entry: self.entry(p.acc, p.layout),
                grid: [self.grid(p, sm_count), 1, 1],
                block: [self.threads(), 1, 1],
                cluster: [1, 1, 1],
                shared_mem_bytes: self.shared_mem_bytes(),
                params: vec![
                    Param::TensorMap(TensorMapSpec { operand: Operand::A, box_dims: [BK, self.bm], swizzle: Swizzle::B128 }),
                    Param::TensorMap(TensorMapSpec { operand: Operand::B, box_dims: b_box, swizzle: Swizzle::B128 }),
                    Param::Ptr(Buffer::C),
                    Param::I32(I32Value::Dim(Dim::M)),
                    Param::I32(I32Value::Dim(Dim::N)),
                    Param::I32(I32Value::Dim(Dim::K)),
                ],
            }],
        }
    }

    /// The configuration, accumulator and layout an entry name encodes (the grid choice is
    /// not in the name: `persistent` comes back false).
    pub fn from_entry(entry: &str) -> Option<(HopperConfig, Acc, Layout)> {
        let rest = entry.strip_prefix("kaas_wgmma_")?;
        let parts: Vec<&str> = rest.split('_').collect();
        let [acc, layout, tile, stages, consumers, "m1", group] = parts[..] else { return None };
        let acc: Acc = acc.parse().ok()?;
        let layout: Layout = layout.parse().ok()?;
        let dims: Vec<u32> = tile.split('x').map(|d| d.parse().ok()).collect::<Option<_>>()?;
        let [bm, bn, bk] = dims[..] else { return None };
        if bk != BK || group != format!("g{GROUP_M}") {
            return None;
        }
        let cfg = HopperConfig {
            bm,
            bn,
            stages: stages.strip_prefix('s')?.parse().ok()?,
            consumers: consumers.strip_prefix('c')?.parse().ok()?,
            persistent: false,
        };
        cfg.validate().ok()?;
        (cfg.entry(acc, layout) == entry).then_some((cfg, acc, layout))
    }

    /// Short label, e.g. `128x256 s4 c2 persistent`.
    pub fn label(&self) -> String {
        format!("{}x{} s{} c{}{}", self.bm, self.bn, self.stages, self.consumers, if self.persistent { " persistent" } else { "" })
    }
}

/// The search space: every tile shape the template supports, the deepest ring that fits
/// and a 4-stage ring, each with both grids.
pub fn space() -> Vec<HopperConfig> {
    let tiles: [(u32, u32, u32); 10] =
        [(64, 64, 1), (64, 128, 1), (64, 256, 1), (128, 64, 1), (128, 128, 1), (128, 128, 2), (128, 256, 2), (256, 128, 2), (256, 64, 2), (128, 64, 2)];
    let mut out = Vec::new();
    for (bm, bn, consumers) in tiles {
        let deepest = (2..=8u32).rev().find(|&s| HopperConfig { bm, bn, stages: s, consumers, persistent: false }.validate().is_ok());
        let Some(deepest) = deepest else { continue };
        let mut stages = vec![deepest];
        if deepest > 4 {
            stages.push(4);
        }
        for s in stages {
            for persistent in [false, true] {
                out.push(HopperConfig { bm, bn, stages: s, consumers, persistent });
            }
        }
    }
    out
}

/// Compiles one configuration for an accumulator and layout with NVRTC.
pub fn compile(cfg: &HopperConfig, acc: Acc, layout: Layout) -> Result<String, GpuError> {
    cfg.validate().map_err(|m| GpuError::refused("Hopper HGEMM", m))?;
    nvrtc::compile(TEMPLATE, TEMPLATE_NAME, TARGET, &cfg.defines(acc, layout))
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
            for layout in Layout::ALL {
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
        assert_eq!(HopperConfig { bm: 128, bn: 256, stages: 4, consumers: 2, persistent: true }.shared_mem_bytes(), 216_064);
        assert!(HopperConfig { bm: 256, bn: 256, stages: 4, consumers: 2, persistent: false }.validate().is_err());
        assert!(HopperConfig { bm: 256, bn: 64, stages: 4, consumers: 1, persistent: false }.validate().is_err());
    }

    #[test]
    fn entry_names_round_trip() {
        for c in space() {
            for layout in Layout::ALL {
                let (back, acc, l) = HopperConfig::from_entry(&c.entry(Acc::F32, layout)).unwrap();
                assert_eq!((back, acc, l), (HopperConfig { persistent: false, ..c }, Acc::F32, layout));
            }
        }
        assert!(HopperConfig::from_entry("kaas_wgmma_f32_tn_96x64x64_s4_c1_m1_g16").is_none());
        assert!(HopperConfig::from_entry("kaas_simple_hgemm_f32_tn_128x128x32_w2x4").is_none());
    }

    /// The shipped catalog's Hopper kernels are what the template builds today: every
    /// committed PTX file hashes to its name, and recompiling its configuration (NVRTC from
    /// the pip wheel CI installs) gives the same bytes.
    #[test]
    fn the_shipped_hopper_kernels_rebuild_from_the_template() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
        let mut checked = 0;
        for dir in std::fs::read_dir(&root).unwrap().filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()) {
            let Ok((index, ptx)) = crate::catalog::bundle::read_bundle(&dir) else { continue };
            for (sha, text) in &ptx {
                assert_eq!(&crate::catalog::bundle::sha256_hex(text.as_bytes()), sha, "{}: PTX does not match its sha256", dir.display());
            }
            for e in &index.entries {
                let Some((cfg, acc, layout)) = HopperConfig::from_entry(&e.manifest.launches[0].entry) else { continue };
                checked += 1;
                if nvrtc::available().is_err() {
                    continue;
                }
                let built = compile(&cfg, acc, layout).unwrap();
                assert_eq!(crate::catalog::bundle::sha256_hex(built.as_bytes()), e.artifact, "{} for {} no longer builds to the committed PTX", cfg.label(), e.problem);
                // And the manifest is the one the configuration gives (either grid).
                let sm = e.manifest.launches[0].grid[0].max(1);
                let one = cfg.manifest(&e.problem, 132);
                let persistent = HopperConfig { persistent: true, ..cfg }.manifest(&e.problem, 132);
                assert!(e.manifest == one || e.manifest == persistent, "{}: manifest differs (grid {sm})", e.problem);
            }
        }
        if nvrtc::available().is_err() {
            eprintln!("SKIP: no NVRTC; checked only the sha256 of {checked} Hopper entries");
        }
        assert!(checked > 0, "no Hopper kernel in the shipped catalog");
    }

    #[test]
    fn every_configuration_compiles_where_nvrtc_is_present() {
        if let Err(why) = nvrtc::available() {
            eprintln!("SKIP: no NVRTC ({why})");
            return;
        }
        let mut seen = std::collections::BTreeSet::new();
        for c in space() {
            if !seen.insert(c.code_key()) {
                continue;
            }
            for (acc, layout) in [(Acc::F32, Layout::Tn), (Acc::F32, Layout::Nn)] {
                let ptx = compile(&c, acc, layout).unwrap_or_else(|e| panic!("{}: {e}", c.label()));
                assert!(ptx.contains(&format!(".entry {}", c.entry(acc, layout))), "{}", c.label());
                assert!(ptx.contains("wgmma.mma_async") && ptx.contains(".target sm_90a"), "{}", c.label());
            }
        }
    }
}
