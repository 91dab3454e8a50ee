//! The decode family: a block of `KWARPS` warps computes `MT` rows of A against `ROWS` rows
//! of a tn weight, every warp issuing `UNROLL` 16-byte loads per row before it multiplies.
//! No pipeline: at M ≤ 16 a linear layer streams its weight once and the time is the HBM
//! ramp, which the tiled families spend on set-up. Two kernels: plain fp32 FMAs
//! (`kernels/templates/gemv_hgemm.cu`), and the `tc` codes on tensor cores
//! (`gemv_mma_hgemm.cu`: mma.sync m16n8k16, the weight's rows as the mma's 16-row side), which
//! read each token row once per 16 weight rows instead of once per row, so that at 8–16
//! tokens L1 stops bounding the kernel. tn and fp32 accumulators only; sm_80 and later.

use serde::{Deserialize, Serialize};

use crate::kernels::axes::{self, Axis, Knob, Names, Values, head_field};
use crate::gpu::{GpuError, nvrtc};
use crate::manifest::{ABI, Launch, Manifest};
use crate::problem::{Acc, Arch, Layout, Problem};

pub const TEMPLATE: &str = include_str!("../../kernels/templates/gemv_hgemm.cu");
pub const TEMPLATE_NAME: &str = "gemv_hgemm.cu";
pub const TC_TEMPLATE: &str = include_str!("../../kernels/templates/gemv_mma_hgemm.cu");
pub const TC_TEMPLATE_NAME: &str = "gemv_mma_hgemm.cu";
/// The entry names' prefix.
pub const ENTRY_PREFIX: &str = "kaas_gemv_";
/// The family's table (see [`crate::kernels::axes`]): the `tc` codes' vectors per lane, then the
/// kernel (FMA or tensor cores: another template, so no define).
pub static AXES: [Axis<GemvConfig>; 2] = [
    Axis { name: "vec", values: Values::Count { tag: "_v", label: " v", define: "KAAS_VEC", allowed: &[1, 2, 4] }, label_rank: 1, get: |c| c.vec, set: |c, v| c.vec = v },
    Axis { name: "tc", values: Values::Choice(&[Knob::DEFAULT, Knob::flag("_tc", " tc", &[])]), label_rank: 0, get: |c| u32::from(c.tc), set: |c, v| c.tc = v != 0 },
];

/// The family's names: `kaas_gemv_f32_tn_m1_r2_w4_u4`, then the rows of [`AXES`]. Each
/// head field is one of the template's defines.
pub static NAMES: Names<GemvConfig> = Names {
    prefix: ENTRY_PREFIX,
    head: &[
        head_field!("m", "KAAS_MT" => mt),
        head_field!("r", "KAAS_ROWS" => rows),
        head_field!("w", "KAAS_KWARPS" => kwarps),
        head_field!("u", "KAAS_UNROLL" => unroll),
    ],
    axes: &AXES,
    // tn and fp32 accumulators only: the templates read neither.
    acc_layout_defines: false,
};

/// Problems up to this many rows of A get the family's candidates: past 16 the weight's
/// bytes are no longer what bounds the time, and the tensor-core families take over.
pub const MAX_M: u32 = 16;

/// One point of the family's space. Its serialized fields are its own (`mt`, …), so the
/// untagged [`super::Candidate`] never mistakes it for another family's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GemvConfig {
    /// Rows of A (tokens) per block: 1, 2, 4, 8 or 16.
    pub mt: u32,
    /// Rows of B (outputs) per block: 1, 2, 4 or 8.
    pub rows: u32,
    /// Warps per block, splitting K.
    pub kwarps: u32,
    /// 16-byte loads per row and lane in flight before the first multiply (`tc`: 32-element
    /// spans of K per warp).
    pub unroll: u32,
    /// On tensor cores (`gemv_mma_hgemm.cu`): MT 8 or 16, ROWS 16 or 32. Absent from the
    /// serialized form when false, so the FMA codes read and write as before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tc: bool,
    /// `tc` only: 16-byte loads per lane, row and span, 1, 2 or 4 (a quad reads 64, 128 or
    /// 256 contiguous bytes of a row per span). Absent from the serialized form when 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub vec: u32,
}

fn one() -> u32 {
    1
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

/// Rows of B per block, warps per block and loads in flight that the search tries.
const ROWS: [u32; 3] = [1, 2, 4];
const KWARPS: [u32; 3] = [2, 4, 8];
const UNROLLS: [u32; 3] = [2, 4, 8];
/// The `tc` codes' rows of B per block (one or two m16 tiles).
const TC_ROWS: [u32; 2] = [16, 32];

impl GemvConfig {
    /// The template's static assertions, in words, and the register budget the space keeps
    /// (accumulators plus the loads in flight, 4 registers each, at most 80 per lane).
    pub fn validate(&self) -> Result<(), String> {
        let GemvConfig { mt, rows, kwarps, unroll, tc, vec } = *self;
        if tc {
            return self.validate_tc();
        }
        if vec != 1 {
            return Err(format!("VEC {vec}: the FMA kernel loads one 16-byte vector per lane and row"));
        }
        if !matches!(mt, 1 | 2 | 4 | 8 | 16) {
            return Err(format!("MT {mt} is not 1, 2, 4, 8 or 16"));
        }
        if !matches!(rows, 1 | 2 | 4 | 8) {
            return Err(format!("ROWS {rows} is not 1, 2, 4 or 8"));
        }
        if !(1..=16).contains(&kwarps) {
            return Err(format!("KWARPS {kwarps} is not 1..16"));
        }
        if !(1..=8).contains(&unroll) {
            return Err(format!("UNROLL {unroll} is not 1..8"));
        }
        if mt * rows > 32 {
            return Err(format!("MT·ROWS = {} accumulators per lane: at most 32", mt * rows));
        }
        if unroll * rows > 16 {
            return Err(format!("UNROLL·ROWS = {} loads in flight per lane: at most 16", unroll * rows));
        }
        if mt * rows + 4 * unroll * rows > 80 {
            return Err(format!("{} registers of accumulators and loads per lane: at most 80", mt * rows + 4 * unroll * rows));
        }
        Ok(())
    }

    /// `gemv_mma_hgemm.cu`'s static assertions: one or two tiles of each side, and at most
    /// 24 loads (96 registers) in flight per lane.
    fn validate_tc(&self) -> Result<(), String> {
        let GemvConfig { mt, rows, kwarps, unroll, vec, .. } = *self;
        if !matches!(vec, 1 | 2 | 4) {
            return Err(format!("tc: VEC {vec} is not 1, 2 or 4"));
        }
        if !matches!(mt, 8 | 16) {
            return Err(format!("tc: MT {mt} is not 8 or 16"));
        }
        if !matches!(rows, 16 | 32) {
            return Err(format!("tc: ROWS {rows} is not 16 or 32"));
        }
        if !(1..=16).contains(&kwarps) {
            return Err(format!("KWARPS {kwarps} is not 1..16"));
        }
        if !(1..=8).contains(&unroll) {
            return Err(format!("UNROLL {unroll} is not 1..8"));
        }
        let loads = unroll * vec * (2 * rows / 16 + mt / 8);
        if loads > 24 {
            return Err(format!("tc: {loads} loads in flight per lane: at most 24"));
        }
        Ok(())
    }

    pub fn entry(&self, acc: Acc, layout: Layout) -> String {
        NAMES.entry(self, acc, layout)
    }

    /// The configuration, accumulator and layout an entry name encodes.
    pub fn from_entry(entry: &str) -> Option<(GemvConfig, Acc, Layout)> {
        let (cfg, acc, layout) = NAMES.parse(entry, GemvConfig { mt: 0, rows: 0, kwarps: 0, unroll: 0, tc: false, vec: 1 })?;
        cfg.validate().ok()?;
        Some((cfg, acc, layout))
    }

    pub fn defines(&self, acc: Acc, layout: Layout) -> Vec<(String, String)> {
        NAMES.defines(self, acc, layout)
    }

    pub fn threads(&self) -> u32 {
        32 * self.kwarps
    }

    pub fn manifest(&self, p: &Problem) -> Manifest {
        Manifest {
            abi: ABI.into(),
            problem: *p,
            workspace_bytes: 0,
            launches: vec![Launch {
                entry: self.entry(p.acc, p.layout),
                grid: [p.n.div_ceil(self.rows), p.m.div_ceil(self.mt), 1],
                block: [self.threads(), 1, 1],
                cluster: [1, 1, 1],
                shared_mem_bytes: 0,
                params: crate::manifest::pointer_params(),
            }],
        }
    }

    /// Short label, e.g. `gemv m1 r2 w4 u4`, `gemv m8 r16 w4 u4 tc v2`.
    pub fn label(&self) -> String {
        format!("gemv m{} r{} w{} u{}{}", self.mt, self.rows, self.kwarps, self.unroll, axes::label(&AXES, self, 1))
    }

    /// The template this configuration compiles, and its name.
    pub fn template(&self) -> (&'static str, &'static str) {
        if self.tc { (TC_TEMPLATE, TC_TEMPLATE_NAME) } else { (TEMPLATE, TEMPLATE_NAME) }
    }
}

/// Whether the family builds code for a problem: tn, fp32 accumulators, M ≤ [`MAX_M`].
pub fn eligible(p: &Problem) -> bool {
    p.layout == Layout::Tn && p.acc == Acc::F32 && p.m <= MAX_M
}

/// Every code of the family (one PTX each).
pub fn codes() -> Vec<GemvConfig> {
    let mut out = Vec::new();
    for mt in [1, 2, 4, 8, 16] {
        for rows in ROWS {
            for kwarps in KWARPS {
                for unroll in UNROLLS {
                    let c = GemvConfig { mt, rows, kwarps, unroll, tc: false, vec: 1 };
                    if c.validate().is_ok() {
                        out.push(c);
                    }
                }
            }
        }
    }
    for mt in [8, 16] {
        for rows in TC_ROWS {
            for kwarps in KWARPS {
                // One span in flight only where it is four vectors wide.
                for (unroll, vec) in UNROLLS.iter().flat_map(|&u| [(u, 1), (u, 2), (u, 4)]).chain([(1, 4)]) {
                    let c = GemvConfig { mt, rows, kwarps, unroll, tc: true, vec };
                    if c.validate().is_ok() {
                        out.push(c);
                    }
                }
            }
        }
    }
    out
}

/// The candidates for a problem: the codes whose MT is the smallest that holds every row
/// of A (so the weight is read once), and whose grid fills the GPU (`rows` only as large
/// as leaves a block per SM; the fewest rows per block always stay). The `tc` codes from
/// 4 rows of A on: below that the FMA kernel's L1 traffic is no bound.
pub fn space_for(p: &Problem, sm_count: u32) -> Vec<GemvConfig> {
    if !eligible(p) {
        return Vec::new();
    }
    let mt = p.m.next_power_of_two();
    codes()
        .into_iter()
        .filter(|c| {
            // The tc tiles hold 8 or 16 rows of A; their fewest rows of B per block are 16.
            let (want_mt, fewest_rows) = if c.tc { (mt.max(8), TC_ROWS[0]) } else { (mt, ROWS[0]) };
            (!c.tc || p.m >= 4) && c.mt == want_mt && (c.rows == fewest_rows || p.n.div_ceil(c.rows) >= sm_count)
        })
        .collect()
}

/// NVRTC's virtual architecture: the template needs nothing past sm_80.
pub fn target(arch: Arch) -> &'static str {
    super::mma::target(arch)
}

/// Compiles one configuration with NVRTC; tn and fp32 accumulators only.
pub fn compile(cfg: &GemvConfig, arch: Arch, acc: Acc, layout: Layout) -> Result<String, GpuError> {
    cfg.validate().map_err(|m| GpuError::refused("gemv HGEMM", m))?;
    if layout != Layout::Tn || acc != Acc::F32 {
        return Err(GpuError::refused("gemv HGEMM", format!("the decode family builds tn with fp32 accumulators only, not {}/{}", acc.as_str(), layout.as_str())));
    }
    let (source, name) = cfg.template();
    nvrtc::compile(source, name, target(arch), &cfg.defines(acc, layout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::Shape;

    fn p(m: u32, n: u32, k: u32) -> Problem {
        Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, Shape::new(m, n, k).unwrap())
    }

    /// The names and defines are data the two templates read (see [`axes::check_names`]).
    #[test]
    fn the_names_are_data_the_templates_read() {
        let base = GemvConfig { mt: 1, rows: 1, kwarps: 1, unroll: 1, tc: false, vec: 1 };
        let problems = axes::check_names(&NAMES, base, &[TEMPLATE, TC_TEMPLATE], &[]);
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn every_code_is_valid_and_its_entry_round_trips() {
        let codes = codes();
        assert!(codes.len() > 40, "{}", codes.len());
        for c in &codes {
            c.validate().unwrap();
            let entry = c.entry(Acc::F32, Layout::Tn);
            assert!(crate::manifest::is_ptx_identifier(&entry), "{entry}");
            assert_eq!(GemvConfig::from_entry(&entry), Some((*c, Acc::F32, Layout::Tn)));
            let man = c.manifest(&p(3, 4096, 4100));
            man.validate().unwrap_or_else(|e| panic!("{}: {e}", c.label()));
        }
        // Register budget: 16 rows of A with 4 rows of B and 4 loads each would spill.
        assert!(GemvConfig { mt: 16, rows: 4, kwarps: 4, unroll: 4, tc: false, vec: 1 }.validate().is_err());
        // tc: two tiles of each side with 8 spans in flight would hold 48 loads.
        assert!(GemvConfig { mt: 16, rows: 32, kwarps: 4, unroll: 8, tc: true, vec: 1 }.validate().is_err());
        assert!(GemvConfig { mt: 4, rows: 16, kwarps: 4, unroll: 2, tc: true, vec: 1 }.validate().is_err(), "tc MT is 8 or 16");
        assert!(codes.iter().any(|c| c.tc) && codes.iter().any(|c| !c.tc));
        let tc = GemvConfig { mt: 16, rows: 32, kwarps: 4, unroll: 4, tc: true, vec: 1 };
        assert_eq!(tc.entry(Acc::F32, Layout::Tn), "kaas_gemv_f32_tn_m16_r32_w4_u4_tc");
        assert_eq!(GemvConfig::from_entry("kaas_gemv_f32_tn_m16_r32_w4_u4_tc"), Some((tc, Acc::F32, Layout::Tn)));
        assert!(GemvConfig::from_entry("kaas_gemv_f32_tn_m16_r32_w4_u4_tc_tc").is_none());
        assert!(GemvConfig::from_entry("kaas_gemv_f32_tn_m16_r2_w4_u4_tc").is_none(), "tc ROWS is 16 or 32");
        // The FMA codes serialize as before the tc codes existed; the tc ones say so.
        let fma = GemvConfig { mt: 1, rows: 2, kwarps: 4, unroll: 4, tc: false, vec: 1 };
        assert_eq!(serde_json::to_value(fma).unwrap(), serde_json::json!({"mt": 1, "rows": 2, "kwarps": 4, "unroll": 4}));
        assert_eq!(serde_json::from_value::<GemvConfig>(serde_json::json!({"mt": 1, "rows": 2, "kwarps": 4, "unroll": 4})).unwrap(), fma);
        assert_eq!(serde_json::from_value::<GemvConfig>(serde_json::to_value(tc).unwrap()).unwrap(), tc);
        // Two vectors a lane: the entry says `_v2`, the serialized form `vec`; FMA codes have none.
        let v2 = GemvConfig { mt: 8, rows: 16, kwarps: 8, unroll: 4, tc: true, vec: 2 };
        assert!(codes.contains(&v2));
        assert_eq!(v2.entry(Acc::F32, Layout::Tn), "kaas_gemv_f32_tn_m8_r16_w8_u4_v2_tc");
        assert_eq!(GemvConfig::from_entry("kaas_gemv_f32_tn_m8_r16_w8_u4_v2_tc"), Some((v2, Acc::F32, Layout::Tn)));
        assert_eq!(serde_json::to_value(v2).unwrap()["vec"], 2);
        assert!(serde_json::to_value(tc).unwrap().get("vec").is_none());
        assert!(GemvConfig { vec: 2, ..fma }.validate().is_err(), "the FMA kernel has no VEC");
        assert!(GemvConfig::from_entry("kaas_gemv_f32_tn_m1_r2_w4_u4_v2").is_none());
        assert!(GemvConfig { unroll: 8, ..v2 }.validate().is_err(), "48 loads in flight");
        assert!(codes.contains(&GemvConfig { unroll: 1, vec: 4, ..v2 }) && !codes.contains(&GemvConfig { unroll: 1, vec: 2, ..v2 }), "one span in flight only four vectors wide");
        assert!(GemvConfig { vec: 3, ..v2 }.validate().is_err());
        assert!(v2.defines(Acc::F32, Layout::Tn).contains(&("KAAS_VEC".to_string(), "2".to_string())));
        assert!(!fma.defines(Acc::F32, Layout::Tn).iter().any(|(k, _)| k == "KAAS_VEC"));
        assert!(GemvConfig::from_entry("kaas_gemv_f32_tn_m3_r2_w4_u4").is_none(), "MT 3 is no code");
        assert!(GemvConfig::from_entry("kaas_gemv_f32_tn_m1_r2_w4_u4_x").is_none());
    }

    #[test]
    fn the_space_reads_the_weight_once_and_fills_the_gpu() {
        assert!(space_for(&p(17, 4096, 4096), 132).is_empty(), "past MAX_M");
        assert!(space_for(&Problem { layout: Layout::Nn, ..p(1, 4096, 4096) }, 132).is_empty(), "tn only");
        assert!(space_for(&Problem { acc: Acc::F16, ..p(1, 4096, 4096) }, 132).is_empty(), "fp32 accumulators only");
        let s = space_for(&p(5, 4096, 4096), 132);
        assert!(!s.is_empty() && s.iter().all(|c| c.mt == 8), "{s:?}");
        assert!(s.iter().any(|c| c.tc) && s.iter().any(|c| !c.tc), "{s:?}");
        // tc from 4 rows of A, in tiles of 8 tokens; below, only the FMA kernel.
        assert!(space_for(&p(4, 4096, 4096), 132).iter().filter(|c| c.tc).all(|c| c.mt == 8));
        assert!(space_for(&p(4, 4096, 4096), 132).iter().any(|c| c.tc));
        assert!(!space_for(&p(3, 4096, 4096), 132).iter().any(|c| c.tc));
        assert!(space_for(&p(9, 4096, 4096), 132).iter().filter(|c| c.tc).all(|c| c.mt == 16));
        // 1024 outputs: 32 rows a block would leave 32 blocks; 16 rows always stay.
        let kv = space_for(&p(16, 1024, 4096), 132);
        assert!(kv.iter().any(|c| c.tc && c.rows == 16) && !kv.iter().any(|c| c.tc && c.rows == 32), "{kv:?}");
        // 512 outputs: 4 per block would leave 128 blocks for 132 SMs.
        let narrow = space_for(&p(1, 512, 4096), 132);
        assert!(narrow.iter().any(|c| c.rows == 2) && narrow.iter().all(|c| c.rows <= 2), "{narrow:?}");
        // The grid covers every output, M rows in MT blocks.
        let c = GemvConfig { mt: 4, rows: 2, kwarps: 4, unroll: 4, tc: false, vec: 1 };
        let l = &c.manifest(&p(9, 4097, 64)).launches[0];
        assert_eq!((l.grid, l.block), ([2049, 3, 1], [128, 1, 1]));
    }

    /// The shipped decode kernels are what the template builds today, with the manifest
    /// their configuration gives (NVRTC from the pip wheel CI installs).
    #[test]
    fn the_shipped_gemv_kernels_rebuild_from_the_template() {
        let mut checked = 0;
        for (dir, index, _) in crate::catalog::bundle::shipped_bundles() {
            for e in index.entries.iter().filter(|e| e.manifest.launches[0].entry.starts_with(ENTRY_PREFIX)) {
                let (cfg, acc, layout) = GemvConfig::from_entry(&e.manifest.launches[0].entry)
                    .unwrap_or_else(|| panic!("{}: {} names no gemv configuration", dir.display(), e.manifest.launches[0].entry));
                assert_eq!(e.manifest, cfg.manifest(&e.problem), "{}: manifest differs", e.problem);
                checked += 1;
                if nvrtc::available().is_ok() {
                    let built = compile(&cfg, e.problem.arch, acc, layout).unwrap();
                    assert_eq!(crate::signing::sha256_hex(built.as_bytes()), e.artifact, "{} for {} no longer builds to the shipped PTX", cfg.label(), e.problem);
                }
            }
        }
        assert!(checked > 0, "no gemv kernel in the shipped catalog");
    }

    #[test]
    fn only_tn_with_fp32_accumulators_compiles() {
        let c = codes()[0];
        assert!(compile(&c, Arch::Sm90, Acc::F16, Layout::Tn).is_err());
        assert!(compile(&c, Arch::Sm90, Acc::F32, Layout::Nn).is_err());
        if nvrtc::available().is_err() {
            eprintln!("SKIP: no NVRTC");
            return;
        }
        let first_tc = *codes().iter().find(|c| c.tc).unwrap();
        for c in [codes()[0], first_tc, *codes().last().unwrap()] {
            let ptx = compile(&c, Arch::Sm80, Acc::F32, Layout::Tn).unwrap();
            assert!(ptx.contains(&format!(".entry {}(", c.entry(Acc::F32, Layout::Tn))), "{}", c.label());
        }
    }
}
