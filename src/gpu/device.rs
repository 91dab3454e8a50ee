//! What a benchmark result carries about the GPU it ran on: the facts a device reports
//! about itself, and the *device class* that timings belong to.

use serde::{Deserialize, Serialize};
use crate::problem::DeviceClass;

/// The device a run took place on. Serialised into every benchmark result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceFacts {
    pub ordinal: u32,
    /// As the driver names it, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// The class timings belong to, e.g. `H100-SXM` (see [`device_class`]).
    pub device_class: DeviceClass,
    pub compute_capability: (u32, u32),
    pub sm_count: u32,
    /// The most shared memory one block may ask for after opting in.
    pub max_shared_mem_per_block_optin: u32,
    pub max_shared_mem_per_sm: u32,
    pub max_threads_per_block: u32,
    pub l2_cache_bytes: u64,
    pub total_memory_bytes: u64,
    /// The kernel driver's release, e.g. `580.159.04`, where the OS tells it.
    pub driver_version: Option<String>,
    /// The CUDA version the driver implements, e.g. `13.0`.
    pub cuda_driver_api_version: String,
    /// The cuBLAS library loaded, e.g. `13.0.2`.
    pub cublas_version: String,
    /// The cuBLASLt library loaded, as its version number, e.g. `130002`.
    pub cublaslt_version: String,
    /// NVRTC, when present (a worker needs none; the tuner does).
    pub nvrtc_version: Option<String>,
}

impl DeviceFacts {
    /// The `(major, minor)` compute capability as the `Arch` words count it.
    pub fn cc(&self) -> (u32, u32) {
        self.compute_capability
    }
}

/// The device class of a GPU model name: the marketing model plus the form factor where
/// one model comes in several (they clock and cool differently, so timings differ).
///
/// `NVIDIA H100 80GB HBM3` → `H100-SXM`, `NVIDIA H100 PCIe` → `H100-PCIe`,
/// `NVIDIA H100 NVL` → `H100-NVL`, `NVIDIA H200` → `H200`, `NVIDIA A100-SXM4-80GB` →
/// `A100-SXM`; anything else becomes a slug of its name (`NVIDIA GeForce RTX 4090` →
/// `GeForce-RTX-4090`).
pub fn device_class(name: &str) -> DeviceClass {
    let upper = name.to_ascii_uppercase();
    let words: Vec<&str> = upper.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).collect();
    let has = |w: &str| words.contains(&w);
    for model in ["H100", "H200", "H800", "H20", "A100", "A800", "B200", "B100", "GH200", "GB200"] {
        if !has(model) {
            continue;
        }
        let form = if has("PCIE") {
            Some("PCIe")
        } else if has("NVL") {
            Some("NVL")
        } else if words.iter().any(|w| w.starts_with("SXM") || *w == "HBM3" || *w == "HBM2E") && model != "H200" {
            // H100 SXM boards report as `H100 80GB HBM3`; A100 SXM as `A100-SXM4-80GB`.
            Some("SXM")
        } else {
            None
        };
        return DeviceClass::new(match form {
            Some(f) => format!("{model}-{f}"),
            None => model.to_string(),
        });
    }
    DeviceClass::new(slug(name.trim_start_matches("NVIDIA").trim()))
}

/// Why a device class asked for (`?device=`) names none of the known ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceNameError {
    /// No known class matches the spelling.
    Unknown,
    /// A bare model (`H100`) matches several known form factors; these.
    Ambiguous(Vec<DeviceClass>),
}

/// The known device class a user's spelling names: the class itself in any case
/// (`h100-sxm`), the driver's model name (`NVIDIA H100 80GB HBM3`), words for the model and
/// form factor (`H100 SXM`, `H200-SXM`), or the bare model (`H100`) where one known class
/// is of that model. `known` are the canonical names; the answer is always one of them.
///
/// The spelling goes through [`device_class`], the same mapping the workers apply to the
/// names their GPUs report, so that a client may send what `nvidia-smi` prints.
pub fn resolve_device_class(asked: &str, known: &[DeviceClass]) -> Result<DeviceClass, DeviceNameError> {
    let find = |name: &str| known.iter().find(|k| k.eq_ignore_ascii_case(name)).cloned();
    let asked = asked.trim();
    if let Some(k) = find(asked) {
        return Ok(k);
    }
    let class = device_class(asked);
    if let Some(k) = find(&class) {
        return Ok(k);
    }
    // A bare model: the known classes of that model (`H100` → `H100-SXM`, `H100-PCIe`).
    // Two form factors of one model time differently, so several is an error, not a guess.
    let model = class.split('-').next().unwrap_or_default();
    if class == model {
        let prefix = format!("{model}-");
        let of_model: Vec<DeviceClass> = known
            .iter()
            // `get`, not slicing: a class imported from a bundle may hold any UTF-8, and
            // a cut inside a character must not panic a request.
            .filter(|k| k.len() > prefix.len() && k.get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(&prefix)))
            .cloned()
            .collect();
        match of_model.len() {
            0 => {}
            1 => return Ok(of_model[0].clone()),
            _ => return Err(DeviceNameError::Ambiguous(of_model)),
        }
    }
    Err(DeviceNameError::Unknown)
}

/// Whether PTX written for `target` (its `.target`, e.g. `sm_90a`, `sm_80`) loads on a
/// GPU of compute capability `cc`. Plain `sm_XY` PTX is JIT-compiled for any later GPU;
/// `sm_XYa` uses arch-specific instructions (wgmma, setmaxnreg) that exist on `X.Y`
/// only; `sm_XYf` on the family, `X.Y` and later minors of major `X`. Anything else:
/// false, so that nothing is offered on a guess.
pub fn ptx_target_runs_on(target: &str, cc: (u32, u32)) -> bool {
    let Some(code) = target.trim().strip_prefix("sm_") else { return false };
    let (digits, suffix) = code.split_at(code.find(|c: char| !c.is_ascii_digit()).unwrap_or(code.len()));
    if digits.len() < 2 {
        return false;
    }
    let (Ok(major), Ok(minor)) = (digits[..digits.len() - 1].parse::<u32>(), digits[digits.len() - 1..].parse::<u32>()) else {
        return false;
    };
    match suffix {
        "" => cc >= (major, minor),
        "a" => cc == (major, minor),
        "f" => cc.0 == major && cc.1 >= minor,
        _ => false,
    }
}

/// `"9.0"` → `(9, 0)`, as the device class table stores compute capabilities.
pub fn parse_compute_capability(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.trim().split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() { "unknown".to_string() } else { out }
}

/// The NVIDIA kernel driver release from `/proc/driver/nvidia/version`, if readable.
pub fn kernel_driver_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    parse_kernel_driver_version(&text)
}

fn parse_kernel_driver_version(text: &str) -> Option<String> {
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu ..."
    let line = text.lines().find(|l| l.starts_with("NVRM version"))?;
    line.split_whitespace()
        .find(|w| {
            w.split('.').count() >= 2 && w.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

/// `13000` → `13.0`, `12090` → `12.9`.
pub fn cuda_version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_map_to_device_classes() {
        assert_eq!(device_class("NVIDIA H100 80GB HBM3"), "H100-SXM");
        assert_eq!(device_class("NVIDIA H100 PCIe"), "H100-PCIe");
        assert_eq!(device_class("NVIDIA H100 NVL"), "H100-NVL");
        assert_eq!(device_class("NVIDIA H200"), "H200");
        assert_eq!(device_class("NVIDIA H200 NVL"), "H200-NVL");
        assert_eq!(device_class("NVIDIA A100-SXM4-80GB"), "A100-SXM");
        assert_eq!(device_class("NVIDIA A100 80GB PCIe"), "A100-PCIe");
        assert_eq!(device_class("NVIDIA GeForce RTX 4090"), "GeForce-RTX-4090");
        assert_eq!(device_class("  "), "unknown");
    }

    #[test]
    fn spellings_resolve_to_known_classes() {
        let classes = |names: &[&str]| names.iter().map(|n| DeviceClass::new(*n)).collect::<Vec<_>>();
        let known = classes(&["H100-SXM", "H200"]);
        for s in ["H100", "h100", "H100-SXM", "h100-sxm", "H100 SXM", "NVIDIA H100 80GB HBM3", " H100_SXM5 "] {
            assert_eq!(resolve_device_class(s, &known), Ok(DeviceClass::new("H100-SXM")), "{s}");
        }
        for s in ["H200", "h200", "H200-SXM", "H200 SXM", "NVIDIA H200", "nvidia h200 141gb hbm3e"] {
            assert_eq!(resolve_device_class(s, &known), Ok(DeviceClass::new("H200")), "{s}");
        }
        for s in ["A100", "H100-PCIe", "H20", "GeForce RTX 4090", "", "SXM"] {
            assert_eq!(resolve_device_class(s, &known), Err(DeviceNameError::Unknown), "{s}");
        }
        let two = classes(&["H100-PCIe", "H100-SXM"]);
        assert_eq!(resolve_device_class("H100", &two), Err(DeviceNameError::Ambiguous(two.clone())));
        assert_eq!(resolve_device_class("H100 PCIe", &two), Ok(DeviceClass::new("H100-PCIe")));
        // Known names from a bundle may be any UTF-8: no panic on a cut inside a character.
        let odd = classes(&["H10é-x", "H100é"]);
        assert_eq!(resolve_device_class("H100", &odd), Err(DeviceNameError::Unknown));
    }

    #[test]
    fn ptx_targets_run_where_the_isa_allows() {
        assert!(ptx_target_runs_on("sm_90a", (9, 0)));
        assert!(!ptx_target_runs_on("sm_90a", (10, 0)));
        assert!(ptx_target_runs_on("sm_80", (9, 0)));
        assert!(ptx_target_runs_on("sm_90", (9, 0)));
        assert!(!ptx_target_runs_on("sm_90", (8, 9)));
        assert!(ptx_target_runs_on("sm_100f", (10, 3)));
        assert!(!ptx_target_runs_on("sm_100f", (12, 0)));
        for bad in ["", "sm_", "sm_9", "compute_90", "sm_90x", "sm_9a0"] {
            assert!(!ptx_target_runs_on(bad, (9, 0)), "{bad}");
        }
        assert_eq!(parse_compute_capability("9.0"), Some((9, 0)));
        assert_eq!(parse_compute_capability("nine"), None);
    }

    #[test]
    fn versions_read_as_people_write_them() {
        assert_eq!(cuda_version_text(13000), "13.0");
        assert_eq!(cuda_version_text(12090), "12.9");
        let proc = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  9 2025\nGCC version: gcc 12";
        assert_eq!(parse_kernel_driver_version(proc).as_deref(), Some("580.159.04"));
        assert_eq!(parse_kernel_driver_version("nothing here"), None);
    }
}
