//! CUDA C++ to PTX with NVRTC, for the kernel templates the tuner ships. A worker that
//! only runs submitted PTX needs no NVRTC; ask [`available`] before compiling.
//!
//! Headers: `KAAS_CUDA_INCLUDE` (a `:`-separated list) when set; otherwise
//! `/usr/local/cuda/include` and the include folders of NVIDIA's pip wheels
//! (`nvidia/cuda_runtime/include`, `nvidia/cu13/include`) under the usual Python
//! prefixes — whichever exist. The library itself is found by the loader
//! (`LD_LIBRARY_PATH`, e.g. the wheel's `nvidia/cuda_nvrtc/lib`).

use std::path::{Path, PathBuf};

use super::{GpuError, ffi};

/// Whether NVRTC can be loaded on this machine.
pub fn available() -> Result<(), String> {
    if ffi::nvrtc_library_present() {
        Ok(())
    } else {
        Err("cannot load NVRTC (libnvrtc); set LD_LIBRARY_PATH to its folder".into())
    }
}

/// NVRTC's version, e.g. `12.9`.
pub fn version() -> Result<String, GpuError> {
    available().map_err(GpuError::Unavailable)?;
    ffi::nvrtc_version().map(|(a, b)| format!("{a}.{b}")).map_err(|code| GpuError::Call {
        context: "read NVRTC version".into(),
        call: "nvrtcVersion",
        code,
    })
}

/// The include folders handed to NVRTC (only those that exist).
pub fn include_dirs() -> Vec<PathBuf> {
    if let Ok(list) = std::env::var("KAAS_CUDA_INCLUDE") {
        return list.split(':').filter(|s| !s.is_empty()).map(PathBuf::from).filter(|p| p.is_dir()).collect();
    }
    let mut dirs = vec![PathBuf::from("/usr/local/cuda/include")];
    let mut prefixes: Vec<PathBuf> = ["/usr", "/usr/local", "/opt/conda"].iter().map(PathBuf::from).collect();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Ok(v) = std::env::var(var) {
            prefixes.push(PathBuf::from(v));
        }
    }
    if let Ok(home) = std::env::var("HOME") {
        let home = PathBuf::from(home);
        prefixes.push(home.join(".local"));
        prefixes.extend(subdirs(&home.join(".pyenv/versions")));
    }
    for prefix in prefixes {
        for lib in subdirs(&prefix.join("lib")).into_iter().filter(|d| file_name_starts(d, "python3")) {
            for site in ["site-packages", "dist-packages"] {
                for sub in ["nvidia/cuda_runtime/include", "nvidia/cu13/include"] {
                    dirs.push(lib.join(site).join(sub));
                }
            }
        }
    }
    dirs.into_iter().filter(|p| p.is_dir()).collect()
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()).collect();
    out.sort();
    out
}

fn file_name_starts(p: &Path, prefix: &str) -> bool {
    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix))
}

/// Compiles CUDA C++ `source` to PTX for a virtual architecture such as `compute_80`,
/// with `-D` defines. The error carries NVRTC's log.
pub fn compile(source: &str, name: &str, arch: &str, defines: &[(String, String)]) -> Result<String, GpuError> {
    let stage = format!("compile {name} for {arch}");
    available().map_err(GpuError::Unavailable)?;
    if source.contains('\0') || name.contains('\0') {
        return Err(GpuError::refused(stage, "source or name contains a NUL byte"));
    }
    let mut options = vec![format!("--gpu-architecture={arch}"), "--std=c++17".to_string()];
    options.extend(defines.iter().map(|(k, v)| format!("-D{k}={v}")));
    let opts = cudarc::nvrtc::CompileOptions {
        include_paths: include_dirs().into_iter().map(|p| p.to_string_lossy().into_owned()).collect(),
        options,
        name: Some(name.to_string()),
        ..Default::default()
    };
    match cudarc::nvrtc::compile_ptx_with_opts(source, opts) {
        Ok(ptx) => {
            let text = ptx.to_src();
            if text.trim().is_empty() { Err(GpuError::refused(stage, "NVRTC returned empty PTX")) } else { Ok(text) }
        }
        Err(cudarc::nvrtc::CompileError::CompileError { nvrtc, options, log }) => Err(GpuError::Compile {
            context: stage,
            message: format!("{nvrtc:?} with options {options:?}"),
            log: log.to_string_lossy().into_owned(),
        }),
        Err(other) => Err(GpuError::Compile { context: stage, message: format!("{other:?}"), log: String::new() }),
    }
}

pub use super::ffi::{NvrtcFailure, NvrtcOutput};

/// Compiles `source` with exactly `options`, resolving `name_exprs` (kernel names or
/// name expressions such as `gemm<128, 64>`) to their lowered names. For submitted
/// source: run it only in the compile sandbox (`crate::compile`).
pub fn compile_named(source: &str, name: &str, options: &[String], name_exprs: &[String]) -> Result<NvrtcOutput, NvrtcFailure> {
    if let Err(why) = available() {
        return Err(NvrtcFailure { call: "dlopen", result: "unavailable".into(), log: why });
    }
    super::ffi::nvrtc_compile_named(source, name, options, name_exprs)
}
