//! The launch manifest, ABI `kaas.hgemm.v1`: how to launch one PTX artifact for one
//! problem. The same manifest drives the verifier, the benchmark, `kaas pull` and any
//! client, so everything a launcher needs is here and nothing else is allowed.

pub mod template;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::problem::{Problem, ProblemError};

pub const ABI: &str = "kaas.hgemm.v1";

/// Limits that hold on every supported device; the harness checks the device's own.
/// (The schemas' `max_items` of `launches` say 8 too.)
pub const MAX_LAUNCHES: usize = 8;
pub const MAX_PARAMS: usize = 32;
pub const MAX_THREADS_PER_BLOCK: u64 = 1024;
pub const MAX_CLUSTER_BLOCKS: u64 = 16;
pub const MAX_SHARED_MEM_BYTES: u32 = 232_448; // 227 KiB, Hopper's opt-in maximum
pub const MAX_WORKSPACE_BYTES: u64 = 1 << 30;
pub const MAX_GRID_X: u32 = i32::MAX as u32;
pub const MAX_GRID_YZ: u32 = 65_535;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always `kaas.hgemm.v1`.
    pub abi: String,
    pub problem: Problem,
    /// Bytes of zero-initialised device scratch passed as `{"ptr": "workspace"}`.
    #[serde(default)]
    pub workspace_bytes: u64,
    /// Run in order on one stream; 1 to `MAX_LAUNCHES` (8).
    #[schema(min_items = 1, max_items = 8)]
    pub launches: Vec<Launch>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    /// Name of a `.entry` in the PTX.
    pub entry: String,
    /// Blocks in x, y, z.
    #[schema(min_items = 3, max_items = 3)]
    pub grid: [u32; 3],
    /// Threads per block in x, y, z.
    #[schema(min_items = 3, max_items = 3)]
    pub block: [u32; 3],
    /// Thread-block cluster shape; `[1,1,1]` means no cluster.
    #[serde(default = "no_cluster")]
    #[schema(min_items = 3, max_items = 3)]
    pub cluster: [u32; 3],
    /// Dynamic shared memory per block.
    #[serde(default)]
    pub shared_mem_bytes: u32,
    pub params: Vec<Param>,
}

fn no_cluster() -> [u32; 3] {
    [1, 1, 1]
}

/// One kernel parameter, in the order of the entry's parameter list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum Param {
    /// A device pointer (`.u64`).
    #[serde(rename = "ptr")]
    Ptr(Buffer),
    /// A 32-bit integer (`.u32`/`.s32`): one of M, N, K or a constant.
    #[serde(rename = "i32")]
    I32(I32Value),
    /// A 128-byte `CUtensorMap`, passed by value, encoded by the launcher.
    #[serde(rename = "tensor_map")]
    TensorMap(TensorMapSpec),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub enum Buffer {
    A,
    B,
    C,
    #[serde(rename = "workspace")]
    Workspace,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum I32Value {
    Dim(Dim),
    Const(i32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum Dim {
    M,
    N,
    K,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum Operand {
    A,
    B,
    C,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum Swizzle {
    #[serde(rename = "none")]
    None,
    #[serde(rename = "32B")]
    B32,
    #[serde(rename = "64B")]
    B64,
    #[serde(rename = "128B")]
    B128,
}

/// How far L2 widens a tensor map's reads that miss it (`CUtensorMapL2promotion`): a wider
/// promotion fetches the neighbouring bytes from DRAM with the missed ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum L2Promotion {
    #[serde(rename = "none")]
    None,
    #[serde(rename = "64B")]
    B64,
    /// The default, and what every manifest without the field gets.
    #[default]
    #[serde(rename = "128B")]
    B128,
    #[serde(rename = "256B")]
    B256,
}

impl L2Promotion {
    fn is_default(&self) -> bool {
        *self == L2Promotion::default()
    }
}

/// A tensor map over one operand. The global shape and strides follow from the problem
/// and layout; `box` is the shared-memory tile, innermost (contiguous) dimension first;
/// `l2_promotion` is optional (`"128B"` when absent, and then left out when written).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TensorMapSpec {
    pub operand: Operand,
    #[serde(rename = "box")]
    #[schema(min_items = 2, max_items = 2)]
    pub box_dims: [u32; 2],
    pub swizzle: Swizzle,
    #[serde(default, skip_serializing_if = "L2Promotion::is_default")]
    pub l2_promotion: L2Promotion,
}

/// The first fault found in a manifest, phrased for the kernel author.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("abi is `{0}`; this service speaks `{ABI}`")]
    Abi(String),
    #[error("problem: {0}")]
    Problem(#[from] ProblemError),
    #[error("a manifest needs 1 to {MAX_LAUNCHES} launches, this one has {0}")]
    LaunchCount(usize),
    #[error("launch {index}: {message}")]
    Launch { index: usize, message: String },
    #[error("workspace_bytes = {0} exceeds the limit of {MAX_WORKSPACE_BYTES}")]
    Workspace(u64),
    #[error("template: {0}")]
    Template(String),
}

impl Manifest {
    /// Parses and checks a manifest from JSON text.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let m: Manifest = serde_json::from_str(text).map_err(|e| format!("manifest is not valid kaas.hgemm.v1 JSON: {e}"))?;
        m.validate().map_err(|e| e.to_string())?;
        Ok(m)
    }

    /// Structural checks that need no PTX and no device.
    pub fn validate(&self) -> Result<(), ManifestError> {
        if self.abi != ABI {
            return Err(ManifestError::Abi(self.abi.clone()));
        }
        self.problem.validate()?;
        if self.launches.is_empty() || self.launches.len() > MAX_LAUNCHES {
            return Err(ManifestError::LaunchCount(self.launches.len()));
        }
        if self.workspace_bytes > MAX_WORKSPACE_BYTES {
            return Err(ManifestError::Workspace(self.workspace_bytes));
        }
        for (index, launch) in self.launches.iter().enumerate() {
            launch
                .validate(self.workspace_bytes, self.problem.arch)
                .map_err(|message| ManifestError::Launch { index, message })?;
        }
        Ok(())
    }

    /// Entry names in launch order, without repeats.
    pub fn entries(&self) -> Vec<&str> {
        let mut seen = Vec::new();
        for l in &self.launches {
            if !seen.contains(&l.entry.as_str()) {
                seen.push(l.entry.as_str());
            }
        }
        seen
    }
}

impl Launch {
    fn validate(&self, workspace_bytes: u64, arch: crate::problem::Arch) -> Result<(), String> {
        if !is_ptx_identifier(&self.entry) {
            // The common way here: a template's name expression, meant for source.
            let hint = if self.entry.contains(['<', '(', ':']) {
                ": it reads as a C++ name expression, which names a kernel only in a CUDA source submission; PTX names it by its mangled name (`kaas compile SOURCE --template T -o k.ptx` writes k.manifest.json with those names)"
            } else {
                ""
            };
            return Err(format!("entry `{}` is not a PTX identifier{hint}", self.entry));
        }
        let [gx, gy, gz] = self.grid;
        if gx == 0 || gy == 0 || gz == 0 || gx > MAX_GRID_X || gy > MAX_GRID_YZ || gz > MAX_GRID_YZ {
            return Err(format!("grid {:?} is outside 1..=[{MAX_GRID_X}, {MAX_GRID_YZ}, {MAX_GRID_YZ}]", self.grid));
        }
        let [bx, by, bz] = self.block;
        let threads = bx as u64 * by as u64 * bz as u64;
        if bx == 0 || by == 0 || bz == 0 || bz > 64 || threads > MAX_THREADS_PER_BLOCK {
            return Err(format!("block {:?} must have 1 to {MAX_THREADS_PER_BLOCK} threads (z at most 64)", self.block));
        }
        let [cx, cy, cz] = self.cluster;
        let cluster_blocks = cx as u64 * cy as u64 * cz as u64;
        if cx == 0 || cy == 0 || cz == 0 || cluster_blocks > MAX_CLUSTER_BLOCKS {
            return Err(format!("cluster {:?} must have 1 to {MAX_CLUSTER_BLOCKS} blocks", self.cluster));
        }
        // Thread-block clusters exist from compute capability 9.0 (Hopper): on an earlier
        // target the launch cannot be made, so it is refused here, not by a GPU worker.
        if cluster_blocks > 1 && arch.compute_capability() < (9, 0) {
            return Err(format!("cluster {:?} on {arch}: thread-block clusters need sm_90 or later; use [1, 1, 1]", self.cluster));
        }
        if gx % cx != 0 || gy % cy != 0 || gz % cz != 0 {
            return Err(format!("grid {:?} is not a whole number of clusters {:?}", self.grid, self.cluster));
        }
        if self.shared_mem_bytes > MAX_SHARED_MEM_BYTES {
            return Err(format!("shared_mem_bytes = {} exceeds {MAX_SHARED_MEM_BYTES}", self.shared_mem_bytes));
        }
        if self.params.len() > MAX_PARAMS {
            return Err(format!("{} params; at most {MAX_PARAMS}", self.params.len()));
        }
        for (i, p) in self.params.iter().enumerate() {
            match p {
                Param::Ptr(Buffer::Workspace) if workspace_bytes == 0 => {
                    return Err(format!("param {i} points at the workspace, but workspace_bytes is 0"));
                }
                Param::TensorMap(t) => {
                    if t.box_dims.iter().any(|&d| d == 0 || d > 256) {
                        return Err(format!("param {i}: tensor map box {:?} must be 1..=256 in each dimension", t.box_dims));
                    }
                    // The innermost box extent in bytes (fp16) must fit the swizzle span.
                    let inner_bytes = t.box_dims[0] * 2;
                    let span = match t.swizzle {
                        Swizzle::None => u32::MAX,
                        Swizzle::B32 => 32,
                        Swizzle::B64 => 64,
                        Swizzle::B128 => 128,
                    };
                    if inner_bytes % 16 != 0 || inner_bytes > span {
                        return Err(format!(
                            "param {i}: tensor map inner box of {inner_bytes} bytes must be a multiple of 16 and fit the {:?} swizzle",
                            t.swizzle
                        ));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    pub fn threads_per_block(&self) -> u32 {
        self.block.iter().product()
    }
}

/// PTX identifiers: `[a-zA-Z_$%][a-zA-Z0-9_$]*` (we refuse the rarer `%` start).
/// The parameters of a kernel that takes plain pointers: `(A, B, C, M, N, K)`.
pub fn pointer_params() -> Vec<Param> {
    vec![
        Param::Ptr(Buffer::A),
        Param::Ptr(Buffer::B),
        Param::Ptr(Buffer::C),
        Param::I32(I32Value::Dim(Dim::M)),
        Param::I32(I32Value::Dim(Dim::N)),
        Param::I32(I32Value::Dim(Dim::K)),
    ]
}

pub fn is_ptx_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        && s.len() <= 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{ "abi": "kaas.hgemm.v1",
      "problem": {"arch": "sm_90a", "acc": "f32", "layout": "tn", "m": 4096, "n": 4096, "k": 4096},
      "workspace_bytes": 0,
      "launches": [
        { "entry": "hgemm_128x256x64",
          "grid": [128, 1, 1], "block": [384, 1, 1], "cluster": [2, 1, 1],
          "shared_mem_bytes": 197632,
          "params": [ {"tensor_map": {"operand": "A", "box": [64, 128], "swizzle": "128B"}},
                      {"tensor_map": {"operand": "B", "box": [64, 256], "swizzle": "128B"}},
                      {"ptr": "C"}, {"i32": "M"}, {"i32": "N"}, {"i32": "K"}, {"i32": 7} ] } ] }"#;

    #[test]
    fn the_design_example_parses_and_round_trips() {
        let m = Manifest::from_json(EXAMPLE).unwrap();
        assert_eq!(m.launches[0].params[6], Param::I32(I32Value::Const(7)));
        assert_eq!(m.launches[0].params[3], Param::I32(I32Value::Dim(Dim::M)));
        let again: Manifest = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(again, m);
    }

    fn with(f: impl FnOnce(&mut Manifest)) -> Result<(), ManifestError> {
        let mut m: Manifest = serde_json::from_str(EXAMPLE).unwrap();
        f(&mut m);
        m.validate()
    }

    #[test]
    fn faults_are_named() {
        assert!(matches!(with(|m| m.abi = "v0".into()), Err(ManifestError::Abi(_))));
        assert!(matches!(with(|m| m.launches.clear()), Err(ManifestError::LaunchCount(0))));
        assert!(matches!(with(|m| m.problem.m = 0), Err(ManifestError::Problem(_))));
        let launch_fault = |f: fn(&mut Launch)| match with(|m| f(&mut m.launches[0])) {
            Err(ManifestError::Launch { index: 0, message }) => message,
            other => panic!("expected a launch fault, got {other:?}"),
        };
        assert!(launch_fault(|l| l.grid = [0, 1, 1]).contains("grid"));
        assert!(launch_fault(|l| l.block = [1025, 1, 1]).contains("block"));
        assert!(launch_fault(|l| l.cluster = [3, 1, 1]).contains("clusters"));
        for arch in [crate::problem::Arch::Sm80, crate::problem::Arch::Sm86, crate::problem::Arch::Sm89] {
            let Err(ManifestError::Launch { message, .. }) = with(|m| m.problem.arch = arch) else { panic!("a cluster on {arch} was accepted") };
            assert!(message.contains("sm_90 or later") && message.contains(arch.as_str()), "{message}");
            with(|m| {
                m.problem.arch = arch;
                m.launches[0].cluster = [1, 1, 1];
            })
            .expect("no cluster is fine on any arch");
        }
        assert!(launch_fault(|l| l.shared_mem_bytes = 300_000).contains("shared_mem_bytes"));
        assert!(launch_fault(|l| l.entry = "9bad".into()).contains("identifier"));
        assert!(launch_fault(|l| l.params.push(Param::Ptr(Buffer::Workspace))).contains("workspace"));
        assert!(launch_fault(|l| l.params[0] = Param::TensorMap(TensorMapSpec {
            operand: Operand::A,
            box_dims: [128, 128],
            swizzle: Swizzle::B128,
            l2_promotion: L2Promotion::B256,
        }))
        .contains("swizzle"));
    }

    #[test]
    fn unknown_fields_and_kinds_are_refused() {
        assert!(Manifest::from_json(&EXAMPLE.replace("\"workspace_bytes\"", "\"workspace\"")).is_err());
        assert!(Manifest::from_json(&EXAMPLE.replace("{\"ptr\": \"C\"}", "{\"ptr\": \"D\"}")).is_err());
        assert!(Manifest::from_json(&EXAMPLE.replace("{\"i32\": 7}", "{\"f32\": 7}")).is_err());
    }

    #[test]
    fn l2_promotion_is_optional_and_written_only_when_not_the_default() {
        let tensor_map = |m: &Manifest, i: usize| match m.launches[0].params[i] {
            Param::TensorMap(t) => t,
            ref other => panic!("param {i} is {other:?}"),
        };
        let plain = Manifest::from_json(EXAMPLE).unwrap();
        assert_eq!(tensor_map(&plain, 0).l2_promotion, L2Promotion::B128);
        assert!(!serde_json::to_string(&plain).unwrap().contains("l2_promotion"), "old manifests serialize as before");
        let wide = EXAMPLE.replacen(r#""swizzle": "128B"}"#, r#""swizzle": "128B", "l2_promotion": "256B"}"#, 1);
        let m = Manifest::from_json(&wide).unwrap();
        assert_eq!((tensor_map(&m, 0).l2_promotion, tensor_map(&m, 1).l2_promotion), (L2Promotion::B256, L2Promotion::B128));
        let back = serde_json::to_string(&m).unwrap();
        assert_eq!(back.matches(r#""l2_promotion":"256B""#).count(), 1, "{back}");
        assert_eq!(Manifest::from_json(&back).unwrap(), m);
        let err = Manifest::from_json(&wide.replace("256B", "512B")).unwrap_err().to_string();
        assert!(err.contains("512B"), "{err}");
    }
}
