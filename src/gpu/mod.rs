//! The GPU harness: one device, its stream, and what runs on it — PTX loaded with its JIT
//! log, kernels launched from a `kaas.hgemm.v1` manifest, the cuBLAS and cuBLASLt
//! baselines, and timing with events and CUDA graphs.
//!
//! All raw handles live in [`ffi`]; everything here is safe Rust. A [`Gpu`] is not
//! `Send`: a worker owns its device on its own thread (or its own sandbox process).
//! Machines without CUDA build and test this crate: ask [`available`] first, and it
//! answers `no GPU: …` instead of the library loader panicking.

mod baseline;
pub mod checks;
mod device;
mod ffi;
mod launch;
pub mod nvrtc;
mod operands;
pub mod pressure;
mod timing;

use std::cell::OnceCell;
use std::fmt;
use std::rc::Rc;

use cudarc::driver::sys::CUdevice_attribute as Attr;

pub use baseline::{CublasGemm, LtAlgoConfig, LtGemm, column_major_mapping};
pub use device::{DeviceFacts, DeviceNameError, device_class, parse_compute_capability, ptx_target_runs_on, resolve_device_class};
pub use ffi::{ColumnMajorGemm, Compute, Op, ReferenceGemm, exit_now};
pub use launch::{PreparedManifest, encode_tensor_map, tensor_map_geometry};
pub use operands::{Operands, a_len, b_len, c_len};
pub use timing::{Contender, EventTimer, GraphTimer, time_direct, time_graph};

/// Bytes of workspace handed to cuBLASLt (its recommendation for Hopper).
pub const CUBLASLT_WORKSPACE_BYTES: usize = 32 << 20;

/// What went wrong on the GPU side, with where: which launch, entry, stage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    #[error("no GPU: {0}")]
    Unavailable(String),
    #[error("{context}: {call} failed: {code}")]
    Call { context: String, call: &'static str, code: String },
    #[error("{context}: the driver could not load the PTX: {code}\nJIT log:\n{log}")]
    Load { context: String, code: String, log: String },
    #[error("{context}: NVRTC could not compile: {message}\n{log}")]
    Compile { context: String, message: String, log: String },
    #[error("{context}: {message}")]
    Refused { context: String, message: String },
}

impl GpuError {
    /// Puts an outer stage in front of the context, e.g. `verify 127x129x257: launch 0 …`.
    pub fn within(self, outer: impl fmt::Display) -> GpuError {
        let wrap = |c: String| if c.is_empty() { outer.to_string() } else { format!("{outer}: {c}") };
        match self {
            GpuError::Unavailable(m) => GpuError::Unavailable(m),
            GpuError::Call { context, call, code } => GpuError::Call { context: wrap(context), call, code },
            GpuError::Load { context, code, log } => GpuError::Load { context: wrap(context), code, log },
            GpuError::Compile { context, message, log } => GpuError::Compile { context: wrap(context), message, log },
            GpuError::Refused { context, message } => GpuError::Refused { context: wrap(context), message },
        }
    }

    pub(crate) fn refused(context: impl Into<String>, message: impl Into<String>) -> GpuError {
        GpuError::Refused { context: context.into(), message: message.into() }
    }
}

/// Turns a failed library call into a [`GpuError`] that says at which stage it failed.
pub(crate) fn at(context: impl Into<String>) -> impl FnOnce(ffi::Failure) -> GpuError {
    let context = context.into();
    move |f| GpuError::Call { context, call: f.call, code: f.code }
}

/// Whether this machine can run the harness: the CUDA driver, cuBLAS and cuBLASLt
/// libraries load and the driver sees at least one device. NVRTC is asked separately
/// ([`nvrtc::available`]): a worker needs none.
pub fn available() -> Result<(), String> {
    let missing: Vec<&str> = [
        ("the CUDA driver (libcuda)", ffi::driver_library_present()),
        ("cuBLAS (libcublas)", ffi::cublas_library_present()),
        ("cuBLASLt (libcublasLt)", ffi::cublaslt_library_present()),
    ]
    .into_iter()
    .filter(|(_, present)| !present)
    .map(|(name, _)| name)
    .collect();
    if !missing.is_empty() {
        return Err(format!("cannot load {} (set LD_LIBRARY_PATH to the CUDA libraries)", missing.join(", ")));
    }
    match ffi::init_and_count_devices() {
        Ok(0) => Err("the CUDA driver sees no device".into()),
        Ok(_) => Ok(()),
        Err(f) => Err(format!("{} failed: {}", f.call, f.code)),
    }
}

/// How many devices the driver sees (after checking [`available`]).
pub fn device_count() -> Result<u32, String> {
    available()?;
    ffi::init_and_count_devices().map(|n| n.max(0) as u32).map_err(|f| format!("{} failed: {}", f.call, f.code))
}

/// One device, its primary context, and the one stream everything runs on.
pub struct Gpu {
    ctx: Rc<ffi::Context>,
    stream: ffi::Stream,
    facts: DeviceFacts,
    cublas: OnceCell<ffi::Cublas>,
    cublaslt: OnceCell<(ffi::CublasLt, ffi::DeviceMemory)>,
    checks: OnceCell<ffi::Module>,
    /// A second stream, for work that must run beside the main stream's (the race
    /// stage's co-running kernel); made on first use.
    side: OnceCell<ffi::Stream>,
}

impl fmt::Debug for Gpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gpu").field("facts", &self.facts).finish_non_exhaustive()
    }
}

/// PTX the driver loaded, with what the JIT said about it (registers, spills).
#[derive(Debug, Clone)]
pub struct LoadedPtx {
    pub(crate) module: ffi::Module,
    pub jit_log: String,
}

impl Gpu {
    /// Opens device `ordinal` (after checking [`available`]).
    pub fn open(ordinal: u32) -> Result<Gpu, GpuError> {
        available().map_err(GpuError::Unavailable)?;
        let ctx = ffi::Context::primary(ordinal).map_err(at(format!("open device {ordinal}")))?;
        let stream = ffi::Stream::new(&ctx).map_err(at("create stream"))?;
        let facts = read_facts(&ctx, ordinal)?;
        Ok(Gpu { ctx, stream, facts, cublas: OnceCell::new(), cublaslt: OnceCell::new(), checks: OnceCell::new(), side: OnceCell::new() })
    }

    pub fn facts(&self) -> &DeviceFacts {
        &self.facts
    }

    /// Waits for everything queued on the stream; a kernel fault surfaces here.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.stream.synchronize().map_err(at("synchronize"))
    }

    /// Waits for everything queued on the stream until `deadline`, polling (a blocking
    /// wait could not be abandoned): `Ok(true)` when it finished, `Ok(false)` when the
    /// deadline passed first, an error when queued work faulted. The verifier's watchdog.
    pub fn wait_until(&self, deadline: std::time::Instant) -> Result<bool, GpuError> {
        let mut pause = std::time::Duration::from_micros(20);
        loop {
            if self.stream.query().map_err(at("wait for the stream"))? {
                return Ok(true);
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(std::time::Duration::from_millis(2));
        }
    }

    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, GpuError> {
        ffi::DeviceMemory::alloc(&self.ctx, bytes)
            .map(|mem| DeviceBuffer { mem })
            .map_err(at(format!("allocate {bytes} bytes")))
    }

    /// JIT-loads PTX; on failure the error carries the JIT's error log.
    pub fn load_ptx(&self, ptx: &str) -> Result<LoadedPtx, GpuError> {
        ffi::Module::load_ptx(&self.ctx, ptx)
            .map(|(module, jit_log)| LoadedPtx { module, jit_log })
            .map_err(|f| GpuError::Load { context: "load PTX".into(), code: f.code, log: f.log })
    }

    pub(crate) fn stream(&self) -> &ffi::Stream {
        &self.stream
    }

    pub(crate) fn side_stream(&self) -> Result<&ffi::Stream, GpuError> {
        if let Some(s) = self.side.get() {
            return Ok(s);
        }
        let s = ffi::Stream::new(&self.ctx).map_err(at("create the side stream"))?;
        Ok(self.side.get_or_init(|| s))
    }

    pub(crate) fn context(&self) -> &Rc<ffi::Context> {
        &self.ctx
    }

    pub(crate) fn cublas(&self) -> Result<&ffi::Cublas, GpuError> {
        if let Some(h) = self.cublas.get() {
            return Ok(h);
        }
        let h = ffi::Cublas::new(&self.ctx, &self.stream).map_err(at("create cuBLAS handle"))?;
        Ok(self.cublas.get_or_init(|| h))
    }

    pub(crate) fn cublaslt(&self) -> Result<&(ffi::CublasLt, ffi::DeviceMemory), GpuError> {
        if let Some(h) = self.cublaslt.get() {
            return Ok(h);
        }
        let h = ffi::CublasLt::new(&self.ctx).map_err(at("create cuBLASLt handle"))?;
        let ws =
            ffi::DeviceMemory::alloc(&self.ctx, CUBLASLT_WORKSPACE_BYTES).map_err(at("allocate cuBLASLt workspace"))?;
        Ok(self.cublaslt.get_or_init(|| (h, ws)))
    }
}

fn read_facts(ctx: &Rc<ffi::Context>, ordinal: u32) -> Result<DeviceFacts, GpuError> {
    let attr = |a: Attr| ctx.attribute(a).map(|v| v.max(0) as u32).map_err(at(format!("read device attribute {a:?}")));
    let name = ctx.name().map_err(at("read device name"))?;
    let cublas = ffi::cublas_version().map_err(at("read cuBLAS version"))?;
    let nvrtc_version =
        if ffi::nvrtc_library_present() { ffi::nvrtc_version().ok().map(|(a, b)| format!("{a}.{b}")) } else { None };
    Ok(DeviceFacts {
        ordinal,
        device_class: device_class(&name),
        name,
        compute_capability: (
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        sm_count: attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        max_shared_mem_per_block_optin: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
        max_shared_mem_per_sm: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
        max_threads_per_block: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        l2_cache_bytes: attr(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
        total_memory_bytes: ctx.total_memory().map_err(at("read device memory size"))? as u64,
        driver_version: device::kernel_driver_version(),
        cuda_driver_api_version: device::cuda_version_text(
            ffi::driver_api_version().map_err(at("read driver version"))?,
        ),
        cublas_version: format!("{}.{}.{}", cublas.0, cublas.1, cublas.2),
        cublaslt_version: ffi::cublaslt_version().to_string(),
        nvrtc_version,
    })
}

/// A device allocation of fp16 values (or raw bytes).
#[derive(Debug)]
pub struct DeviceBuffer {
    mem: ffi::DeviceMemory,
}

impl DeviceBuffer {
    pub fn bytes(&self) -> usize {
        self.mem.bytes()
    }

    /// The device address, as the kernel sees it.
    pub fn address(&self) -> u64 {
        self.mem.address()
    }

    pub fn upload_f16(&self, gpu: &Gpu, host: &[half::f16]) -> Result<(), GpuError> {
        let bits: Vec<u16> = host.iter().map(|h| h.to_bits()).collect();
        self.mem.upload_u16(&bits, gpu.stream()).map_err(at("upload"))
    }

    /// Reads the first `count` fp16 values, after all work queued before on the stream.
    pub fn download_f16(&self, gpu: &Gpu, count: usize) -> Result<Vec<half::f16>, GpuError> {
        let mut bits = vec![0u16; count];
        self.mem.download_u16(&mut bits, gpu.stream()).map_err(at("download"))?;
        Ok(bits.into_iter().map(half::f16::from_bits).collect())
    }

    /// Fills the first `count` fp16 slots with the bit pattern `bits`, in stream order.
    pub fn fill_f16_bits(&self, gpu: &Gpu, bits: u16, count: usize) -> Result<(), GpuError> {
        self.mem.fill_u16(bits, count, gpu.stream()).map_err(at("fill"))
    }

    /// `bytes` bytes starting `offset` bytes into this buffer, as a buffer of its own that
    /// shares the allocation (which lives as long as any view of it).
    pub fn view(&self, offset: usize, bytes: usize) -> Result<DeviceBuffer, GpuError> {
        self.mem.view(offset, bytes).map(|mem| DeviceBuffer { mem }).map_err(at("view"))
    }

    /// Uploads 16-bit words to the start of this buffer (e.g. canary bytes, little-endian).
    pub fn upload_u16(&self, gpu: &Gpu, words: &[u16]) -> Result<(), GpuError> {
        self.mem.upload_u16(words, gpu.stream()).map_err(at("upload"))
    }

    /// Reads the first `count` 16-bit words, after all work queued before on the stream.
    pub fn download_u16(&self, gpu: &Gpu, count: usize) -> Result<Vec<u16>, GpuError> {
        let mut words = vec![0u16; count];
        self.mem.download_u16(&mut words, gpu.stream()).map_err(at("download"))?;
        Ok(words)
    }

    pub fn zero(&self, gpu: &Gpu) -> Result<(), GpuError> {
        self.mem.fill_u8(0, gpu.stream()).map_err(at("zero"))
    }

    /// Copies all of `src` to the start of this buffer, in stream order.
    pub fn copy_from(&self, gpu: &Gpu, src: &DeviceBuffer) -> Result<(), GpuError> {
        self.mem.copy_from(&src.mem, gpu.stream()).map_err(at("copy"))
    }

    /// Copies `bytes` from `src` at byte `src_offset` to this buffer at `dst_offset`, in
    /// stream order; both ranges must lie inside their buffers.
    pub fn copy_range(
        &self,
        gpu: &Gpu,
        dst_offset: usize,
        src: &DeviceBuffer,
        src_offset: usize,
        bytes: usize,
    ) -> Result<(), GpuError> {
        self.mem.copy_range(dst_offset, &src.mem, src_offset, bytes, gpu.stream()).map_err(at("copy"))
    }

    pub(crate) fn memory(&self) -> &ffi::DeviceMemory {
        &self.mem
    }
}
