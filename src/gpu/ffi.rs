//! The one layer of the GPU harness that touches raw handles: the CUDA driver, cuBLAS
//! and cuBLASLt through cudarc's `sys` bindings. Every `unsafe` block of the harness
//! lives in this file. Each type owns one handle and releases it on drop, every status
//! becomes a `Result`, and what the libraries read on the host (kernel parameters,
//! scalars, descriptors) is owned and checked here, so the layers above are safe Rust.
//!
//! Device addresses cross this boundary as plain numbers: a wrong one faults on the GPU
//! (the sandbox's business), never in host memory.

use std::ffi::{CStr, CString, c_char, c_void};
use std::ptr;
use std::rc::Rc;

use cudarc::cublas::sys as cb;
use cudarc::cublaslt::sys as lt;
pub(crate) use cudarc::driver::sys as cu;

/// A library call that failed: which call, and the status it returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub call: &'static str,
    pub code: String,
}

pub type Res<T> = Result<T, Failure>;

fn driver(res: cu::CUresult, call: &'static str) -> Res<()> {
    if res == cu::CUresult::CUDA_SUCCESS { Ok(()) } else { Err(Failure { call, code: driver_error_text(res) }) }
}

fn driver_error_text(res: cu::CUresult) -> String {
    let mut name: *const c_char = ptr::null();
    let mut text: *const c_char = ptr::null();
    // SAFETY: both calls only write a pointer to a static string owned by the driver.
    unsafe {
        cu::cuGetErrorName(res, &mut name);
        cu::cuGetErrorString(res, &mut text);
    }
    let read = |p: *const c_char| {
        if p.is_null() {
            None
        } else {
            // SAFETY: the driver returned a NUL-terminated static string.
            Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        }
    };
    match (read(name), read(text)) {
        (Some(n), Some(t)) => format!("{n} ({t})"),
        (Some(n), None) => n,
        _ => format!("{res:?}"),
    }
}

fn blas(res: cb::cublasStatus_t, call: &'static str) -> Res<()> {
    if res == cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Failure { call, code: format!("{res:?}") })
    }
}

fn blaslt(res: lt::cublasStatus_t, call: &'static str) -> Res<()> {
    if res == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Failure { call, code: format!("{res:?}") })
    }
}

/// Ends the process at once with `code`: no destructors, no `atexit` handlers. For a
/// sandbox whose kernel still runs (a hung kernel cannot be cancelled): the normal exit
/// path frees device memory and destroys the stream, which wait for that kernel forever.
/// The driver tears the context down when the process is gone.
pub fn exit_now(code: i32) -> ! {
    unsafe extern "C" {
        fn _exit(status: i32) -> !;
    }
    // SAFETY: `_exit` takes a plain integer and does not return.
    unsafe { _exit(code) }
}

// ---------------------------------------------------------------------------------------
// Libraries present?

/// Whether the shared libraries can be opened. cudarc loads them lazily and panics when
/// one is missing, so every entry point asks these first.
pub fn driver_library_present() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { cu::is_culib_present() }
}
pub fn cublas_library_present() -> bool {
    // SAFETY: as above.
    unsafe { cb::is_culib_present() }
}
pub fn cublaslt_library_present() -> bool {
    // SAFETY: as above.
    unsafe { lt::is_culib_present() }
}
pub fn nvrtc_library_present() -> bool {
    // SAFETY: as above.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// `cuInit` then the number of devices. Call only when the driver library is present.
pub fn init_and_count_devices() -> Res<i32> {
    let mut count = 0;
    // SAFETY: plain calls writing one integer we own.
    unsafe {
        driver(cu::cuInit(0), "cuInit")?;
        driver(cu::cuDeviceGetCount(&mut count), "cuDeviceGetCount")?;
    }
    Ok(count)
}

/// The CUDA version the driver implements, e.g. 13000 for 13.0.
pub fn driver_api_version() -> Res<i32> {
    let mut v = 0;
    // SAFETY: writes one integer we own.
    driver(unsafe { cu::cuDriverGetVersion(&mut v) }, "cuDriverGetVersion")?;
    Ok(v)
}

/// cuBLAS (major, minor, patch), read without a handle.
pub fn cublas_version() -> Res<(i32, i32, i32)> {
    let mut v = [0i32; 3];
    let props = [
        cb::libraryPropertyType_t::MAJOR_VERSION,
        cb::libraryPropertyType_t::MINOR_VERSION,
        cb::libraryPropertyType_t::PATCH_LEVEL,
    ];
    for (slot, prop) in v.iter_mut().zip(props) {
        // SAFETY: writes one integer we own.
        blas(unsafe { cb::cublasGetProperty(prop, slot) }, "cublasGetProperty")?;
    }
    Ok((v[0], v[1], v[2]))
}

/// cuBLASLt's version number, e.g. 130001.
pub fn cublaslt_version() -> usize {
    // SAFETY: no arguments.
    unsafe { lt::cublasLtGetVersion() }
}

/// NVRTC (major, minor).
pub fn nvrtc_version() -> Result<(i32, i32), String> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two integers we own.
    let res = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if res == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS { Ok((major, minor)) } else { Err(format!("{res:?}")) }
}

// ---------------------------------------------------------------------------------------
// Context

/// The device's primary context, retained for as long as this lives and made current
/// on the creating thread. Not `Send`: a worker owns its context on its own thread.
#[derive(Debug)]
pub struct Context {
    device: cu::CUdevice,
    raw: cu::CUcontext,
}

impl Context {
    pub fn primary(ordinal: u32) -> Res<Rc<Context>> {
        let ordinal =
            i32::try_from(ordinal).map_err(|_| Failure { call: "cuDeviceGet", code: "ordinal out of range".into() })?;
        let mut device = 0;
        let mut raw = ptr::null_mut();
        // SAFETY: each call writes one handle we own; the context is released on drop.
        unsafe {
            driver(cu::cuInit(0), "cuInit")?;
            driver(cu::cuDeviceGet(&mut device, ordinal), "cuDeviceGet")?;
            driver(cu::cuDevicePrimaryCtxRetain(&mut raw, device), "cuDevicePrimaryCtxRetain")?;
        }
        let ctx = Rc::new(Context { device, raw });
        ctx.make_current()?;
        Ok(ctx)
    }

    pub fn make_current(&self) -> Res<()> {
        // SAFETY: `raw` is a retained context.
        driver(unsafe { cu::cuCtxSetCurrent(self.raw) }, "cuCtxSetCurrent")
    }

    pub fn attribute(&self, attr: cu::CUdevice_attribute) -> Res<i32> {
        let mut v = 0;
        // SAFETY: writes one integer we own.
        driver(unsafe { cu::cuDeviceGetAttribute(&mut v, attr, self.device) }, "cuDeviceGetAttribute")?;
        Ok(v)
    }

    pub fn name(&self) -> Res<String> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
        driver(unsafe { cu::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, self.device) }, "cuDeviceGetName")?;
        // SAFETY: NUL-terminated within the buffer (we zeroed it and passed its length).
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().trim().to_string())
    }

    pub fn total_memory(&self) -> Res<usize> {
        let mut v = 0;
        // SAFETY: writes one integer we own.
        driver(unsafe { cu::cuDeviceTotalMem_v2(&mut v, self.device) }, "cuDeviceTotalMem")?;
        Ok(v)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: releases the retain taken in `primary`.
        unsafe {
            cu::cuDevicePrimaryCtxRelease_v2(self.device);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Stream, events, graphs

#[derive(Debug)]
pub struct Stream {
    raw: cu::CUstream,
    ctx: Rc<Context>,
}

impl Stream {
    /// A non-blocking stream: it never synchronises with the legacy default stream, and
    /// it can be captured into a graph.
    pub fn new(ctx: &Rc<Context>) -> Res<Stream> {
        ctx.make_current()?;
        let mut raw = ptr::null_mut();
        // SAFETY: writes one handle we own; destroyed on drop.
        driver(
            unsafe { cu::cuStreamCreate(&mut raw, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) },
            "cuStreamCreate",
        )?;
        Ok(Stream { raw, ctx: ctx.clone() })
    }

    pub fn synchronize(&self) -> Res<()> {
        // SAFETY: `raw` is a live stream.
        driver(unsafe { cu::cuStreamSynchronize(self.raw) }, "cuStreamSynchronize")
    }

    /// Whether everything queued has finished, without waiting: `Ok(false)` while work
    /// is pending, an error when queued work faulted.
    pub fn query(&self) -> Res<bool> {
        // SAFETY: `raw` is a live stream.
        let res = unsafe { cu::cuStreamQuery(self.raw) };
        if res == cu::CUresult::CUDA_ERROR_NOT_READY { Ok(false) } else { driver(res, "cuStreamQuery").map(|()| true) }
    }

    /// Starts capturing this thread's work on the stream into a graph.
    pub fn begin_capture(&self) -> Res<()> {
        // SAFETY: `raw` is a live stream.
        driver(
            unsafe {
                cu::cuStreamBeginCapture_v2(self.raw, cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            },
            "cuStreamBeginCapture",
        )
    }

    /// Ends a capture and instantiates what was captured.
    pub fn end_capture(&self) -> Res<GraphExec> {
        let mut graph = ptr::null_mut();
        // SAFETY: writes one handle we own; destroyed below or by `GraphExec`.
        driver(unsafe { cu::cuStreamEndCapture(self.raw, &mut graph) }, "cuStreamEndCapture")?;
        let mut exec = ptr::null_mut();
        // SAFETY: `graph` is the graph just captured.
        let res = unsafe { cu::cuGraphInstantiateWithFlags(&mut exec, graph, 0) };
        if let Err(e) = driver(res, "cuGraphInstantiateWithFlags") {
            // SAFETY: the graph is ours and no executable refers to it.
            unsafe { cu::cuGraphDestroy(graph) };
            return Err(e);
        }
        Ok(GraphExec { graph, exec, _ctx: self.ctx.clone() })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: the stream is ours; pending work completes before resources go.
        unsafe {
            cu::cuStreamSynchronize(self.raw);
            cu::cuStreamDestroy_v2(self.raw);
        }
    }
}

#[derive(Debug)]
pub struct GraphExec {
    graph: cu::CUgraph,
    exec: cu::CUgraphExec,
    _ctx: Rc<Context>,
}

impl GraphExec {
    pub fn upload(&self, stream: &Stream) -> Res<()> {
        // SAFETY: both handles are live.
        driver(unsafe { cu::cuGraphUpload(self.exec, stream.raw) }, "cuGraphUpload")
    }
    pub fn launch(&self, stream: &Stream) -> Res<()> {
        // SAFETY: both handles are live.
        driver(unsafe { cu::cuGraphLaunch(self.exec, stream.raw) }, "cuGraphLaunch")
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        // SAFETY: the handles are ours.
        unsafe {
            cu::cuGraphExecDestroy(self.exec);
            cu::cuGraphDestroy(self.graph);
        }
    }
}

#[derive(Debug)]
pub struct Event {
    raw: cu::CUevent,
    _ctx: Rc<Context>,
}

impl Event {
    pub fn new(ctx: &Rc<Context>) -> Res<Event> {
        ctx.make_current()?;
        let mut raw = ptr::null_mut();
        // SAFETY: writes one handle we own; destroyed on drop.
        driver(unsafe { cu::cuEventCreate(&mut raw, cu::CUevent_flags::CU_EVENT_DEFAULT as u32) }, "cuEventCreate")?;
        Ok(Event { raw, _ctx: ctx.clone() })
    }
    pub fn record(&self, stream: &Stream) -> Res<()> {
        // SAFETY: both handles are live.
        driver(unsafe { cu::cuEventRecord(self.raw, stream.raw) }, "cuEventRecord")
    }
    pub fn synchronize(&self) -> Res<()> {
        // SAFETY: the handle is live.
        driver(unsafe { cu::cuEventSynchronize(self.raw) }, "cuEventSynchronize")
    }
    /// Milliseconds from `self` to `end`; both must have completed.
    pub fn elapsed_ms(&self, end: &Event) -> Res<f32> {
        let mut ms = 0.0f32;
        // SAFETY: both handles are live; writes one float we own.
        driver(unsafe { cu::cuEventElapsedTime(&mut ms, self.raw, end.raw) }, "cuEventElapsedTime")?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the handle is ours.
        unsafe {
            cu::cuEventDestroy_v2(self.raw);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Device memory

/// One `cuMemAlloc` allocation, freed when the last view of it goes.
#[derive(Debug)]
struct Allocation {
    ptr: cu::CUdeviceptr,
    ctx: Rc<Context>,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // SAFETY: the allocation is ours; the context is kept alive by `ctx`.
        unsafe {
            if self.ctx.make_current().is_ok() {
                cu::cuMemFree_v2(self.ptr);
            }
        }
    }
}

/// A range of device memory: a whole allocation, or a view into one (the verifier puts
/// each operand between canary regions of one allocation). Copies check their lengths
/// against the range's size.
#[derive(Debug, Clone)]
pub struct DeviceMemory {
    ptr: cu::CUdeviceptr,
    bytes: usize,
    alloc: Rc<Allocation>,
}

impl DeviceMemory {
    pub fn alloc(ctx: &Rc<Context>, bytes: usize) -> Res<DeviceMemory> {
        ctx.make_current()?;
        let mut ptr = 0;
        // A zero-byte request still gets a real (tiny) allocation so the address is valid.
        // SAFETY: writes one address we own; freed when the `Allocation` drops.
        driver(unsafe { cu::cuMemAlloc_v2(&mut ptr, bytes.max(1)) }, "cuMemAlloc")?;
        Ok(DeviceMemory { ptr, bytes, alloc: Rc::new(Allocation { ptr, ctx: ctx.clone() }) })
    }

    /// `bytes` bytes starting `offset` bytes into this range, sharing its allocation.
    pub fn view(&self, offset: usize, bytes: usize) -> Res<DeviceMemory> {
        match offset.checked_add(bytes) {
            Some(end) if end <= self.bytes => {
                Ok(DeviceMemory { ptr: self.ptr + offset as u64, bytes, alloc: self.alloc.clone() })
            }
            _ => Err(Failure {
                call: "view",
                code: format!("{bytes} bytes at offset {offset} do not fit a {}-byte range", self.bytes),
            }),
        }
    }

    pub fn address(&self) -> u64 {
        self.ptr
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn fits(&self, bytes: usize, call: &'static str) -> Res<()> {
        if bytes > self.bytes {
            Err(Failure { call, code: format!("{bytes} bytes do not fit a {}-byte buffer", self.bytes) })
        } else {
            Ok(())
        }
    }

    /// Host-to-device copy of 16-bit words to the start of the buffer, in stream order;
    /// returns once the copy is done. (A plain synchronous copy would run on the legacy
    /// stream, which our non-blocking stream does not wait for.)
    pub fn upload_u16(&self, host: &[u16], stream: &Stream) -> Res<()> {
        let bytes = std::mem::size_of_val(host);
        self.fits(bytes, "cuMemcpyHtoDAsync")?;
        // SAFETY: `host` is `bytes` long and the buffer holds at least `bytes`; we wait for
        // the copy before `host` can go away.
        driver(
            unsafe { cu::cuMemcpyHtoDAsync_v2(self.ptr, host.as_ptr() as *const c_void, bytes, stream.raw) },
            "cuMemcpyHtoDAsync",
        )?;
        stream.synchronize()
    }

    /// Device-to-host copy from the start of the buffer, after all work queued before it
    /// on the stream; returns once the copy is done.
    pub fn download_u16(&self, host: &mut [u16], stream: &Stream) -> Res<()> {
        let bytes = std::mem::size_of_val(host);
        self.fits(bytes, "cuMemcpyDtoHAsync")?;
        // SAFETY: as above, in the other direction; we wait before `host` is read.
        driver(
            unsafe { cu::cuMemcpyDtoHAsync_v2(host.as_mut_ptr() as *mut c_void, self.ptr, bytes, stream.raw) },
            "cuMemcpyDtoHAsync",
        )?;
        stream.synchronize()
    }

    /// Fills the first `count` 16-bit words with `value`, in stream order.
    pub fn fill_u16(&self, value: u16, count: usize, stream: &Stream) -> Res<()> {
        self.fits(count.saturating_mul(2), "cuMemsetD16Async")?;
        // SAFETY: the range lies inside the allocation.
        driver(unsafe { cu::cuMemsetD16Async(self.ptr, value, count, stream.raw) }, "cuMemsetD16Async")
    }

    /// Fills the whole buffer with the byte `value`, in stream order.
    pub fn fill_u8(&self, value: u8, stream: &Stream) -> Res<()> {
        // SAFETY: the range is the allocation.
        driver(unsafe { cu::cuMemsetD8Async(self.ptr, value, self.bytes, stream.raw) }, "cuMemsetD8Async")
    }

    /// Device-to-device copy of the whole of `src` to the start of `self`, in stream order.
    pub fn copy_from(&self, src: &DeviceMemory, stream: &Stream) -> Res<()> {
        self.fits(src.bytes, "cuMemcpyDtoDAsync")?;
        // SAFETY: both ranges lie inside their allocations.
        driver(unsafe { cu::cuMemcpyDtoDAsync_v2(self.ptr, src.ptr, src.bytes, stream.raw) }, "cuMemcpyDtoDAsync")
    }

    /// Device-to-device copy of `bytes` from `src` at `src_offset` to `self` at
    /// `dst_offset`, in stream order. Both ranges are checked against their allocations.
    pub fn copy_range(&self, dst_offset: usize, src: &DeviceMemory, src_offset: usize, bytes: usize, stream: &Stream) -> Res<()> {
        let end = |offset: usize| offset.saturating_add(bytes);
        self.fits(end(dst_offset), "cuMemcpyDtoDAsync")?;
        src.fits(end(src_offset), "cuMemcpyDtoDAsync")?;
        // SAFETY: both ranges lie inside their allocations (checked above).
        driver(
            unsafe {
                cu::cuMemcpyDtoDAsync_v2(self.ptr + dst_offset as u64, src.ptr + src_offset as u64, bytes, stream.raw)
            },
            "cuMemcpyDtoDAsync",
        )
    }
}


// ---------------------------------------------------------------------------------------
// Modules and functions

#[derive(Debug)]
struct ModuleHandle {
    raw: cu::CUmodule,
    _ctx: Rc<Context>,
}

impl Drop for ModuleHandle {
    fn drop(&mut self) {
        // SAFETY: the module is ours; functions hold an `Rc` to this handle.
        unsafe {
            cu::cuModuleUnload(self.raw);
        }
    }
}

/// A PTX module the driver JIT-compiled and loaded.
#[derive(Debug, Clone)]
pub struct Module {
    handle: Rc<ModuleHandle>,
}

/// Why a module did not load: the status, and the JIT's own error log.
#[derive(Debug, Clone)]
pub struct LoadFailure {
    pub code: String,
    pub log: String,
}

const JIT_LOG_BYTES: usize = 64 * 1024;

fn log_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).trim().to_string()
}

impl Module {
    /// JIT-loads PTX text. Returns the module and the JIT's info log (registers, spills).
    pub fn load_ptx(ctx: &Rc<Context>, ptx: &str) -> Result<(Module, String), LoadFailure> {
        let image = CString::new(ptx)
            .map_err(|_| LoadFailure { code: "PTX contains a NUL byte".into(), log: String::new() })?;
        ctx.make_current().map_err(|f| LoadFailure { code: format!("{}: {}", f.call, f.code), log: String::new() })?;
        let mut info = vec![0u8; JIT_LOG_BYTES];
        let mut error = vec![0u8; JIT_LOG_BYTES];
        let mut options = [
            cu::CUjit_option::CU_JIT_INFO_LOG_BUFFER,
            cu::CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
            cu::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            cu::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            cu::CUjit_option::CU_JIT_LOG_VERBOSE,
        ];
        // Option values are pointer-sized slots; sizes and flags are passed as integers.
        let mut values: [*mut c_void; 5] = [
            info.as_mut_ptr() as *mut c_void,
            ptr::without_provenance_mut(JIT_LOG_BYTES),
            error.as_mut_ptr() as *mut c_void,
            ptr::without_provenance_mut(JIT_LOG_BYTES),
            ptr::without_provenance_mut(1),
        ];
        let mut raw = ptr::null_mut();
        // SAFETY: `image` is NUL-terminated; the log buffers outlive the call and their
        // sizes are passed with them; `options` and `values` have the same length.
        let res = unsafe {
            cu::cuModuleLoadDataEx(
                &mut raw,
                image.as_ptr() as *const c_void,
                options.len() as u32,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        if res != cu::CUresult::CUDA_SUCCESS {
            let mut log = log_text(&error);
            let info = log_text(&info);
            if !info.is_empty() {
                if !log.is_empty() {
                    log.push('\n');
                }
                log.push_str(&info);
            }
            return Err(LoadFailure { code: driver_error_text(res), log });
        }
        Ok((Module { handle: Rc::new(ModuleHandle { raw, _ctx: ctx.clone() }) }, log_text(&info)))
    }

    pub fn function(&self, name: &str) -> Res<Function> {
        let cname = CString::new(name)
            .map_err(|_| Failure { call: "cuModuleGetFunction", code: "name contains NUL".into() })?;
        let mut raw = ptr::null_mut();
        // SAFETY: the module is live; writes one handle that lives as long as the module.
        driver(unsafe { cu::cuModuleGetFunction(&mut raw, self.handle.raw, cname.as_ptr()) }, "cuModuleGetFunction")?;
        Ok(Function { raw, _module: self.handle.clone() })
    }
}

#[derive(Debug, Clone)]
pub struct Function {
    raw: cu::CUfunction,
    _module: Rc<ModuleHandle>,
}

impl Function {
    pub fn attribute(&self, attr: cu::CUfunction_attribute) -> Res<i32> {
        let mut v = 0;
        // SAFETY: writes one integer we own.
        driver(unsafe { cu::cuFuncGetAttribute(&mut v, attr, self.raw) }, "cuFuncGetAttribute")?;
        Ok(v)
    }

    pub fn set_attribute(&self, attr: cu::CUfunction_attribute, value: i32) -> Res<()> {
        // SAFETY: the function is live.
        driver(unsafe { cu::cuFuncSetAttribute(self.raw, attr, value) }, "cuFuncSetAttribute")
    }

    /// The byte size of each parameter in the entry's parameter list, in order.
    pub fn param_sizes(&self) -> Res<Vec<usize>> {
        let mut sizes = Vec::new();
        // A kernel has at most a few KiB of parameters; stop well past any real list.
        for index in 0..4096usize {
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: writes two integers we own.
            let res = unsafe { cu::cuFuncGetParamInfo(self.raw, index, &mut offset, &mut size) };
            if res == cu::CUresult::CUDA_ERROR_INVALID_VALUE {
                return Ok(sizes);
            }
            driver(res, "cuFuncGetParamInfo")?;
            sizes.push(size);
        }
        Err(Failure { call: "cuFuncGetParamInfo", code: "more than 4096 parameters".into() })
    }
}

// ---------------------------------------------------------------------------------------
// Kernel launches

/// One kernel argument, owned so that its address is stable while the launch reads it.
#[derive(Debug, Clone)]
pub enum Arg {
    U64(u64),
    I32(i32),
    TensorMap(Box<TensorMap>),
}

impl Arg {
    pub fn size(&self) -> usize {
        match self {
            Arg::U64(_) => 8,
            Arg::I32(_) => 4,
            Arg::TensorMap(_) => std::mem::size_of::<TensorMap>(),
        }
    }

    fn as_param_ptr(&self) -> *mut c_void {
        match self {
            Arg::U64(v) => v as *const u64 as *mut c_void,
            Arg::I32(v) => v as *const i32 as *mut c_void,
            Arg::TensorMap(m) => &m.0 as *const cu::CUtensorMap as *mut c_void,
        }
    }
}

/// A 128-byte `CUtensorMap`, encoded by the driver.
#[derive(Debug, Clone, Copy)]
pub struct TensorMap(pub cu::CUtensorMap);

/// Describes a 2-D fp16 tensor map: `dims` innermost first, the byte stride between
/// rows, the shared-memory box (innermost first), the swizzle and the L2 promotion.
#[derive(Debug, Clone, Copy)]
pub struct TensorMapDesc {
    pub address: u64,
    pub dims: [u64; 2],
    pub row_stride_bytes: u64,
    pub box_dims: [u32; 2],
    pub swizzle: cu::CUtensorMapSwizzle,
    pub l2_promotion: cu::CUtensorMapL2promotion,
}

pub fn encode_tensor_map(desc: &TensorMapDesc) -> Res<TensorMap> {
    // SAFETY: CUtensorMap is plain bytes; zero is a valid starting value.
    let mut map: cu::CUtensorMap = unsafe { std::mem::zeroed() };
    let strides = [desc.row_stride_bytes];
    let element_strides = [1u32, 1u32];
    // SAFETY: every array has the length the rank (2) requires; the driver only reads them
    // and writes `map`. The address is not dereferenced on the host.
    let res = unsafe {
        cu::cuTensorMapEncodeTiled(
            &mut map,
            cu::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            2,
            desc.address as *mut c_void,
            desc.dims.as_ptr(),
            strides.as_ptr(),
            desc.box_dims.as_ptr(),
            element_strides.as_ptr(),
            cu::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            desc.swizzle,
            desc.l2_promotion,
            cu::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    driver(res, "cuTensorMapEncodeTiled")?;
    Ok(TensorMap(map))
}

/// A kernel launch whose arguments were checked against the entry's parameter list, so
/// the driver reads exactly the bytes we own.
#[derive(Debug)]
pub struct KernelCall {
    function: Function,
    grid: [u32; 3],
    block: [u32; 3],
    cluster: [u32; 3],
    shared_mem_bytes: u32,
    args: Vec<Arg>,
}

impl KernelCall {
    /// Fails (with the mismatch in words) when the arguments do not match the entry's
    /// parameters in number and size.
    pub fn new(
        function: Function,
        grid: [u32; 3],
        block: [u32; 3],
        cluster: [u32; 3],
        shared_mem_bytes: u32,
        args: Vec<Arg>,
    ) -> Result<KernelCall, String> {
        let sizes = function.param_sizes().map_err(|f| format!("{} failed: {}", f.call, f.code))?;
        if sizes.len() != args.len() {
            return Err(format!("the entry takes {} parameters, the manifest gives {}", sizes.len(), args.len()));
        }
        for (i, (size, arg)) in sizes.iter().zip(&args).enumerate() {
            if *size != arg.size() {
                return Err(format!(
                    "param {i}: the entry's parameter is {size} bytes, the manifest's is {} bytes",
                    arg.size()
                ));
            }
        }
        Ok(KernelCall { function, grid, block, cluster, shared_mem_bytes, args })
    }

    pub fn enqueue(&self, stream: &Stream) -> Res<()> {
        let mut params: Vec<*mut c_void> = self.args.iter().map(Arg::as_param_ptr).collect();
        // SAFETY: an all-zero launch attribute is a valid "ignored" value before we set it.
        let mut attr: cu::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        let clustered = self.cluster != [1, 1, 1];
        if clustered {
            attr.id = cu::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attr.value.clusterDim.x = self.cluster[0];
            attr.value.clusterDim.y = self.cluster[1];
            attr.value.clusterDim.z = self.cluster[2];
        }
        let config = cu::CUlaunchConfig {
            gridDimX: self.grid[0],
            gridDimY: self.grid[1],
            gridDimZ: self.grid[2],
            blockDimX: self.block[0],
            blockDimY: self.block[1],
            blockDimZ: self.block[2],
            sharedMemBytes: self.shared_mem_bytes,
            hStream: stream.raw,
            attrs: if clustered { &mut attr } else { ptr::null_mut() },
            numAttrs: if clustered { 1 } else { 0 },
        };
        // SAFETY: `params` has one pointer per kernel parameter (checked in `new`), each to
        // an argument of exactly the parameter's size that outlives this call; `attr`
        // outlives the call.
        driver(
            unsafe { cu::cuLaunchKernelEx(&config, self.function.raw, params.as_mut_ptr(), ptr::null_mut()) },
            "cuLaunchKernelEx",
        )
    }
}

// ---------------------------------------------------------------------------------------
// cuBLAS

/// Matrix operation for cuBLAS: as stored, or transposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    N,
    T,
}

/// The scalar and compute types of a GEMM: fp16 with fp16 scalars, or fp32 compute with
/// fp32 scalars (inputs and output are fp16 either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compute {
    F16,
    F32,
}

/// Column-major GEMM `C = op(A)·op(B)` with fp16 matrices, in cuBLAS's own terms.
#[derive(Debug, Clone, Copy)]
pub struct ColumnMajorGemm {
    pub transa: Op,
    pub transb: Op,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub lda: i32,
    pub ldb: i32,
    pub ldc: i32,
    pub compute: Compute,
}

/// The verifier's reference products, through `cublasGemmEx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferenceGemm {
    /// fp16 A and B, fp32 C and fp32 compute: for inputs in {0,1} every product and
    /// partial sum is a whole number below 2^24, so C is the exact count.
    CountsF32,
    /// fp32 A, B and C with `CUBLAS_COMPUTE_32F_PEDANTIC`: fp32 FMA throughout, no TF32
    /// or other reduced-precision path.
    Fp32Pedantic,
}

/// Alpha = 1 and beta = 0 in the scalar type a compute type needs.
enum Scalars {
    F16(u16, u16),
    F32(f32, f32),
}

impl Scalars {
    fn one_zero(compute: Compute) -> Scalars {
        match compute {
            Compute::F16 => Scalars::F16(half::f16::ONE.to_bits(), half::f16::ZERO.to_bits()),
            Compute::F32 => Scalars::F32(1.0, 0.0),
        }
    }
    fn ptrs(&self) -> (*const c_void, *const c_void) {
        match self {
            Scalars::F16(a, b) => (a as *const u16 as *const c_void, b as *const u16 as *const c_void),
            Scalars::F32(a, b) => (a as *const f32 as *const c_void, b as *const f32 as *const c_void),
        }
    }
}

#[derive(Debug)]
pub struct Cublas {
    raw: cb::cublasHandle_t,
    _ctx: Rc<Context>,
}

impl Cublas {
    pub fn new(ctx: &Rc<Context>, stream: &Stream) -> Res<Cublas> {
        ctx.make_current()?;
        let mut raw = ptr::null_mut();
        // SAFETY: writes one handle we own; destroyed on drop.
        blas(unsafe { cb::cublasCreate_v2(&mut raw) }, "cublasCreate")?;
        let handle = Cublas { raw, _ctx: ctx.clone() };
        // SAFETY: both handles are live; the stream outlives the handle's use in `Gpu`.
        blas(unsafe { cb::cublasSetStream_v2(handle.raw, stream.raw as cb::cudaStream_t) }, "cublasSetStream")?;
        Ok(handle)
    }

    /// `cublasGemmEx` with the default algorithm (tensor ops for fp16 since CUDA 11; the
    /// `_TENSOR_OP` algorithm values are deprecated aliases of it).
    pub fn gemm_ex(&self, g: &ColumnMajorGemm, a: &DeviceMemory, b: &DeviceMemory, c: &DeviceMemory) -> Res<()> {
        let compute = match g.compute {
            Compute::F16 => cb::cublasComputeType_t::CUBLAS_COMPUTE_16F,
            Compute::F32 => cb::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        };
        let f16 = cb::cudaDataType_t::CUDA_R_16F;
        self.gemm_typed(g, (f16, f16), compute, Scalars::one_zero(g.compute), (a, b, c), 2)
    }

    /// One of the verifier's reference products (see [`ReferenceGemm`]); `g.compute` is
    /// ignored.
    pub fn reference_gemm(&self, g: &ColumnMajorGemm, kind: ReferenceGemm, a: &DeviceMemory, b: &DeviceMemory, c: &DeviceMemory) -> Res<()> {
        let (f16, f32) = (cb::cudaDataType_t::CUDA_R_16F, cb::cudaDataType_t::CUDA_R_32F);
        let scalars = Scalars::one_zero(Compute::F32);
        match kind {
            ReferenceGemm::CountsF32 => {
                self.gemm_typed(g, (f16, f32), cb::cublasComputeType_t::CUBLAS_COMPUTE_32F, scalars, (a, b, c), 2)
            }
            ReferenceGemm::Fp32Pedantic => {
                self.gemm_typed(g, (f32, f32), cb::cublasComputeType_t::CUBLAS_COMPUTE_32F_PEDANTIC, scalars, (a, b, c), 4)
            }
        }
    }

    /// `cublasGemmEx` with the given (input, output) element types; `in_bytes` is the size
    /// of an input element, for the size checks.
    fn gemm_typed(
        &self,
        g: &ColumnMajorGemm,
        (in_type, out_type): (cb::cudaDataType_t, cb::cudaDataType_t),
        compute: cb::cublasComputeType_t,
        scalars: Scalars,
        (a, b, c): (&DeviceMemory, &DeviceMemory, &DeviceMemory),
        in_bytes: usize,
    ) -> Res<()> {
        let out_bytes = if out_type == cb::cudaDataType_t::CUDA_R_32F { 4 } else { 2 };
        let dims = |rows: i32, cols: i32, ld: i32| (ld.max(rows).max(0) as usize) * (cols.max(0) as usize);
        let (ar, ac) = if g.transa == Op::N { (g.m, g.k) } else { (g.k, g.m) };
        let (br, bc) = if g.transb == Op::N { (g.k, g.n) } else { (g.n, g.k) };
        a.fits(dims(ar, ac, g.lda) * in_bytes, "cublasGemmEx")?;
        b.fits(dims(br, bc, g.ldb) * in_bytes, "cublasGemmEx")?;
        c.fits(dims(g.m, g.n, g.ldc) * out_bytes, "cublasGemmEx")?;
        let (alpha, beta) = scalars.ptrs();
        let op = |o: Op| match o {
            Op::N => cb::cublasOperation_t::CUBLAS_OP_N,
            Op::T => cb::cublasOperation_t::CUBLAS_OP_T,
        };
        // SAFETY: scalars are host values living across the call; matrices are live device
        // allocations at least as large as the shapes and leading dimensions need (checked
        // above).
        blas(
            unsafe {
                cb::cublasGemmEx(
                    self.raw,
                    op(g.transa),
                    op(g.transb),
                    g.m,
                    g.n,
                    g.k,
                    alpha,
                    a.ptr as *const c_void,
                    in_type,
                    g.lda,
                    b.ptr as *const c_void,
                    in_type,
                    g.ldb,
                    beta,
                    c.ptr as *mut c_void,
                    out_type,
                    g.ldc,
                    compute,
                    cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            },
            "cublasGemmEx",
        )
    }
}

impl Drop for Cublas {
    fn drop(&mut self) {
        // SAFETY: the handle is ours.
        unsafe {
            cb::cublasDestroy_v2(self.raw);
        }
    }
}

// ---------------------------------------------------------------------------------------
// cuBLASLt

#[derive(Debug)]
pub struct CublasLt {
    raw: lt::cublasLtHandle_t,
    _ctx: Rc<Context>,
}

impl CublasLt {
    pub fn new(ctx: &Rc<Context>) -> Res<CublasLt> {
        ctx.make_current()?;
        let mut raw = ptr::null_mut();
        // SAFETY: writes one handle we own; destroyed on drop.
        blaslt(unsafe { lt::cublasLtCreate(&mut raw) }, "cublasLtCreate")?;
        Ok(CublasLt { raw, _ctx: ctx.clone() })
    }
}

impl Drop for CublasLt {
    fn drop(&mut self) {
        // SAFETY: the handle is ours.
        unsafe {
            lt::cublasLtDestroy(self.raw);
        }
    }
}

/// The descriptors of one cuBLASLt matmul (`D = op(A)·op(B)`, D and C alike).
#[derive(Debug)]
pub struct LtPlan {
    gemm: ColumnMajorGemm,
    desc: lt::cublasLtMatmulDesc_t,
    a: lt::cublasLtMatrixLayout_t,
    b: lt::cublasLtMatrixLayout_t,
    c: lt::cublasLtMatrixLayout_t,
}

/// One algorithm from the heuristic, with the workspace it needs.
#[derive(Debug, Clone, Copy)]
pub struct LtAlgo {
    algo: lt::cublasLtMatmulAlgo_t,
    pub workspace_bytes: usize,
    pub waves: f32,
}

/// The configuration attributes that, with the matmul's descriptors, identify a cuBLASLt
/// algorithm: `cublasLtMatmulAlgoInit(ALGO_ID)` then these set re-creates it (the
/// documented way to reproduce an algorithm, unlike the opaque words, which only the
/// same cuBLASLt build promises to read back).
pub const LT_ALGO_CONFIG_ATTRS: [(&str, lt::cublasLtMatmulAlgoConfigAttributes_t); 9] = {
    use lt::cublasLtMatmulAlgoConfigAttributes_t as A;
    [
        ("algo_id", A::CUBLASLT_ALGO_CONFIG_ID),
        ("tile_id", A::CUBLASLT_ALGO_CONFIG_TILE_ID),
        ("stages_id", A::CUBLASLT_ALGO_CONFIG_STAGES_ID),
        ("splitk_num", A::CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
        ("reduction_scheme", A::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
        ("cta_swizzling", A::CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
        ("custom_option", A::CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
        ("inner_shape_id", A::CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
        ("cluster_shape_id", A::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
    ]
};

/// Size in bytes of one algorithm configuration attribute (the library checks it).
fn algo_attr_size(algo: &lt::cublasLtMatmulAlgo_t, attr: lt::cublasLtMatmulAlgoConfigAttributes_t) -> Res<usize> {
    let mut size = 0usize;
    // SAFETY: with a zero-sized buffer the library only writes the attribute's size.
    blaslt(
        unsafe { lt::cublasLtMatmulAlgoConfigGetAttribute(algo, attr, ptr::null_mut(), 0, &mut size) },
        "cublasLtMatmulAlgoConfigGetAttribute",
    )?;
    if size == 0 || size > 8 {
        return Err(Failure { call: "cublasLtMatmulAlgoConfigGetAttribute", code: format!("{attr:?} is {size} bytes") });
    }
    Ok(size)
}

impl LtAlgo {
    /// The algorithm's opaque words, for logging which one ran.
    pub fn words(&self) -> [u64; 8] {
        self.algo.data
    }

    /// The values of [`LT_ALGO_CONFIG_ATTRS`], in that order (unsigned, little-endian).
    pub fn config_values(&self) -> Res<Vec<(&'static str, u64)>> {
        LT_ALGO_CONFIG_ATTRS
            .iter()
            .map(|&(name, attr)| {
                let size = algo_attr_size(&self.algo, attr)?;
                let mut buf = [0u8; 8];
                let mut written = 0usize;
                // SAFETY: `buf` holds `size` ≤ 8 bytes; the library writes at most that.
                blaslt(
                    unsafe {
                        lt::cublasLtMatmulAlgoConfigGetAttribute(
                            &self.algo,
                            attr,
                            buf.as_mut_ptr() as *mut c_void,
                            size,
                            &mut written,
                        )
                    },
                    "cublasLtMatmulAlgoConfigGetAttribute",
                )?;
                Ok((name, u64::from_le_bytes(buf)))
            })
            .collect()
    }
}

impl LtPlan {
    pub fn new(g: &ColumnMajorGemm) -> Res<LtPlan> {
        let (compute, scale) = match g.compute {
            Compute::F16 => (lt::cublasComputeType_t::CUBLAS_COMPUTE_16F, lt::cudaDataType_t::CUDA_R_16F),
            Compute::F32 => (lt::cublasComputeType_t::CUBLAS_COMPUTE_32F, lt::cudaDataType_t::CUDA_R_32F),
        };
        let mut plan =
            LtPlan { gemm: *g, desc: ptr::null_mut(), a: ptr::null_mut(), b: ptr::null_mut(), c: ptr::null_mut() };
        // SAFETY: each call writes one descriptor we own (released on drop, including on
        // an early return); attribute values are host integers living across the call.
        unsafe {
            blaslt(lt::cublasLtMatmulDescCreate(&mut plan.desc, compute, scale), "cublasLtMatmulDescCreate")?;
            for (attr, op) in [
                (lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA, g.transa),
                (lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB, g.transb),
            ] {
                let v: cb::cublasOperation_t = match op {
                    Op::N => cb::cublasOperation_t::CUBLAS_OP_N,
                    Op::T => cb::cublasOperation_t::CUBLAS_OP_T,
                };
                blaslt(
                    lt::cublasLtMatmulDescSetAttribute(
                        plan.desc,
                        attr,
                        &v as *const cb::cublasOperation_t as *const c_void,
                        std::mem::size_of::<cb::cublasOperation_t>(),
                    ),
                    "cublasLtMatmulDescSetAttribute",
                )?;
            }
            // Stored shapes (rows × cols, column-major): op(A) is m×k, op(B) is k×n.
            let (a_rows, a_cols) = if g.transa == Op::N { (g.m, g.k) } else { (g.k, g.m) };
            let (b_rows, b_cols) = if g.transb == Op::N { (g.k, g.n) } else { (g.n, g.k) };
            let f16 = lt::cudaDataType_t::CUDA_R_16F;
            let dims = [
                (&mut plan.a, a_rows, a_cols, g.lda),
                (&mut plan.b, b_rows, b_cols, g.ldb),
                (&mut plan.c, g.m, g.n, g.ldc),
            ];
            for (slot, rows, cols, ld) in dims {
                blaslt(
                    lt::cublasLtMatrixLayoutCreate(slot, f16, rows as u64, cols as u64, ld as i64),
                    "cublasLtMatrixLayoutCreate",
                )?;
            }
        }
        Ok(plan)
    }

    /// Up to `count` algorithms from the heuristic, best first, each needing at most
    /// `max_workspace` bytes of workspace.
    pub fn heuristics(&self, handle: &CublasLt, count: usize, max_workspace: usize) -> Res<Vec<LtAlgo>> {
        let count = count.clamp(1, 1024);
        let mut pref = ptr::null_mut();
        // SAFETY: the preference is ours and destroyed below; `results` has `count` slots
        // and the library writes at most that many; all descriptors are live.
        unsafe {
            blaslt(lt::cublasLtMatmulPreferenceCreate(&mut pref), "cublasLtMatmulPreferenceCreate")?;
            let ws = max_workspace as u64;
            let set = blaslt(
                lt::cublasLtMatmulPreferenceSetAttribute(
                    pref,
                    lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    &ws as *const u64 as *const c_void,
                    std::mem::size_of::<u64>(),
                ),
                "cublasLtMatmulPreferenceSetAttribute",
            );
            if let Err(e) = set {
                lt::cublasLtMatmulPreferenceDestroy(pref);
                return Err(e);
            }
            let mut results: Vec<lt::cublasLtMatmulHeuristicResult_t> = vec![std::mem::zeroed(); count];
            let mut found = 0i32;
            let res = lt::cublasLtMatmulAlgoGetHeuristic(
                handle.raw,
                self.desc,
                self.a,
                self.b,
                self.c,
                self.c,
                pref,
                count as i32,
                results.as_mut_ptr(),
                &mut found,
            );
            lt::cublasLtMatmulPreferenceDestroy(pref);
            blaslt(res, "cublasLtMatmulAlgoGetHeuristic")?;
            let found = (found.max(0) as usize).min(count);
            Ok(results[..found]
                .iter()
                .filter(|r| r.state == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
                .map(|r| LtAlgo { algo: r.algo, workspace_bytes: r.workspaceSize, waves: r.wavesCount })
                .collect())
        }
    }

    /// Re-creates an algorithm from its configuration values (see
    /// [`LT_ALGO_CONFIG_ATTRS`]; `algo_id` is required, absent others keep the library's
    /// defaults), then asks the library whether it runs this matmul and with how much
    /// workspace.
    pub fn algo_from_config(&self, handle: &CublasLt, values: &[(String, u64)]) -> Res<LtAlgo> {
        let value_of = |name: &str| values.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        let id = value_of("algo_id")
            .and_then(|v| i32::try_from(v).ok())
            .ok_or(Failure { call: "cublasLtMatmulAlgoInit", code: "no valid algo_id in the configuration".into() })?;
        let (compute, scale) = match self.gemm.compute {
            Compute::F16 => (lt::cublasComputeType_t::CUBLAS_COMPUTE_16F, lt::cudaDataType_t::CUDA_R_16F),
            Compute::F32 => (lt::cublasComputeType_t::CUBLAS_COMPUTE_32F, lt::cudaDataType_t::CUDA_R_32F),
        };
        let f16 = lt::cudaDataType_t::CUDA_R_16F;
        // SAFETY: an all-zero algorithm is plain data that `cublasLtMatmulAlgoInit` overwrites.
        let mut algo: lt::cublasLtMatmulAlgo_t = unsafe { std::mem::zeroed() };
        // SAFETY: the handle is live; the library writes the algorithm we own.
        blaslt(
            unsafe { lt::cublasLtMatmulAlgoInit(handle.raw, compute, scale, f16, f16, f16, f16, id, &mut algo) },
            "cublasLtMatmulAlgoInit",
        )?;
        for &(name, attr) in LT_ALGO_CONFIG_ATTRS.iter().skip(1) {
            let Some(v) = value_of(name) else { continue };
            let size = algo_attr_size(&algo, attr)?;
            if size < 8 && v >> (8 * size) != 0 {
                return Err(Failure {
                    call: "cublasLtMatmulAlgoConfigSetAttribute",
                    code: format!("{name} = {v} does not fit {size} bytes"),
                });
            }
            let buf = v.to_le_bytes();
            // SAFETY: `buf` holds at least `size` bytes; the library reads exactly that.
            blaslt(
                unsafe { lt::cublasLtMatmulAlgoConfigSetAttribute(&mut algo, attr, buf.as_ptr() as *const c_void, size) },
                "cublasLtMatmulAlgoConfigSetAttribute",
            )?;
        }
        // SAFETY: an all-zero result is plain data the library overwrites.
        let mut result: lt::cublasLtMatmulHeuristicResult_t = unsafe { std::mem::zeroed() };
        // SAFETY: all descriptors and the handle are live; `result` is ours.
        blaslt(
            unsafe {
                lt::cublasLtMatmulAlgoCheck(handle.raw, self.desc, self.a, self.b, self.c, self.c, &algo, &mut result)
            },
            "cublasLtMatmulAlgoCheck",
        )?;
        blaslt(result.state, "cublasLtMatmulAlgoCheck")?;
        Ok(LtAlgo { algo, workspace_bytes: result.workspaceSize, waves: result.wavesCount })
    }

    // One argument per thing cublasLtMatmul itself takes; bundling them would only hide that.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &self,
        handle: &CublasLt,
        algo: &LtAlgo,
        a: &DeviceMemory,
        b: &DeviceMemory,
        c: &DeviceMemory,
        workspace: &DeviceMemory,
        stream: &Stream,
    ) -> Res<()> {
        if algo.workspace_bytes > workspace.bytes {
            return Err(Failure {
                call: "cublasLtMatmul",
                code: format!(
                    "the algorithm needs {} bytes of workspace, {} given",
                    algo.workspace_bytes, workspace.bytes
                ),
            });
        }
        let scalars = Scalars::one_zero(self.gemm.compute);
        let (alpha, beta) = scalars.ptrs();
        // SAFETY: descriptors and handles are live; scalars and the algorithm are host
        // values living across the call; matrices are live device allocations the caller
        // checked against the shapes; the workspace is at least as large as the algorithm
        // asks for.
        blaslt(
            unsafe {
                lt::cublasLtMatmul(
                    handle.raw,
                    self.desc,
                    alpha,
                    a.ptr as *const c_void,
                    self.a,
                    b.ptr as *const c_void,
                    self.b,
                    beta,
                    c.ptr as *const c_void,
                    self.c,
                    c.ptr as *mut c_void,
                    self.c,
                    &algo.algo,
                    workspace.ptr as *mut c_void,
                    workspace.bytes,
                    stream.raw as lt::cudaStream_t,
                )
            },
            "cublasLtMatmul",
        )
    }
}

impl Drop for LtPlan {
    fn drop(&mut self) {
        // SAFETY: each non-null descriptor is ours.
        unsafe {
            for l in [self.a, self.b, self.c] {
                if !l.is_null() {
                    lt::cublasLtMatrixLayoutDestroy(l);
                }
            }
            if !self.desc.is_null() {
                lt::cublasLtMatmulDescDestroy(self.desc);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// NVRTC with name expressions

/// What one NVRTC program produced: PTX, the lowered (mangled) name of every name
/// expression in the order given, and the compile log.
#[derive(Debug, Clone)]
pub struct NvrtcOutput {
    pub ptx: String,
    pub lowered: Vec<String>,
    pub log: String,
}

/// Why an NVRTC program produced no PTX: the failing call, its result, and the log.
#[derive(Debug, Clone)]
pub struct NvrtcFailure {
    pub call: &'static str,
    pub result: String,
    pub log: String,
}

/// Compiles `source` with `options`, registering `name_exprs` (NVRTC name expressions
/// such as `hgemm` or `gemm<128, 64>`) so their lowered names can be read back. Call only
/// when [`nvrtc_library_present`]. The program is destroyed on every path.
pub fn nvrtc_compile_named(source: &str, name: &str, options: &[String], name_exprs: &[String]) -> Result<NvrtcOutput, NvrtcFailure> {
    use cudarc::nvrtc::sys as nv;
    let fail = |call: &'static str, res: nv::nvrtcResult, log: String| NvrtcFailure { call, result: format!("{res:?}"), log };
    let cstr = |s: &str| CString::new(s).map_err(|_| fail("CString", nv::nvrtcResult::NVRTC_ERROR_INVALID_INPUT, "input contains a NUL byte".into()));
    let src = cstr(source)?;
    let cname = cstr(name)?;
    let opts: Vec<CString> = options.iter().map(|o| cstr(o)).collect::<Result<_, _>>()?;
    let exprs: Vec<CString> = name_exprs.iter().map(|e| cstr(e)).collect::<Result<_, _>>()?;
    let mut prog: nv::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer is a live CString owned above; NVRTC copies what it keeps.
    let res = unsafe { nv::nvrtcCreateProgram(&mut prog, src.as_ptr(), cname.as_ptr(), 0, std::ptr::null(), std::ptr::null()) };
    if res != nv::nvrtcResult::NVRTC_SUCCESS {
        return Err(fail("nvrtcCreateProgram", res, String::new()));
    }
    // SAFETY: `prog` is a valid program until the destroy below, which every path reaches.
    let out = unsafe {
        let read_log = |prog: nv::nvrtcProgram| -> String {
            let mut size = 0usize;
            if nv::nvrtcGetProgramLogSize(prog, &mut size) != nv::nvrtcResult::NVRTC_SUCCESS || size == 0 {
                return String::new();
            }
            let mut buf = vec![0u8; size];
            if nv::nvrtcGetProgramLog(prog, buf.as_mut_ptr().cast()) != nv::nvrtcResult::NVRTC_SUCCESS {
                return String::new();
            }
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            String::from_utf8_lossy(&buf[..end]).into_owned()
        };
        (|| {
            for e in &exprs {
                let res = nv::nvrtcAddNameExpression(prog, e.as_ptr());
                if res != nv::nvrtcResult::NVRTC_SUCCESS {
                    return Err(fail("nvrtcAddNameExpression", res, String::new()));
                }
            }
            let ptrs: Vec<*const std::ffi::c_char> = opts.iter().map(|o| o.as_ptr()).collect();
            let res = nv::nvrtcCompileProgram(prog, ptrs.len() as std::ffi::c_int, ptrs.as_ptr());
            let log = read_log(prog);
            if res != nv::nvrtcResult::NVRTC_SUCCESS {
                return Err(fail("nvrtcCompileProgram", res, log));
            }
            let mut lowered = Vec::with_capacity(exprs.len());
            for e in &exprs {
                let mut p: *const std::ffi::c_char = std::ptr::null();
                let res = nv::nvrtcGetLoweredName(prog, e.as_ptr(), &mut p);
                if res != nv::nvrtcResult::NVRTC_SUCCESS || p.is_null() {
                    return Err(fail("nvrtcGetLoweredName", res, format!("name expression `{}` has no lowered name", e.to_string_lossy())));
                }
                // The string lives as long as the program; copy it now.
                lowered.push(CStr::from_ptr(p).to_string_lossy().into_owned());
            }
            let mut size = 0usize;
            let res = nv::nvrtcGetPTXSize(prog, &mut size);
            if res != nv::nvrtcResult::NVRTC_SUCCESS {
                return Err(fail("nvrtcGetPTXSize", res, log));
            }
            let mut buf = vec![0u8; size.max(1)];
            let res = nv::nvrtcGetPTX(prog, buf.as_mut_ptr().cast());
            if res != nv::nvrtcResult::NVRTC_SUCCESS {
                return Err(fail("nvrtcGetPTX", res, log));
            }
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            Ok(NvrtcOutput { ptx: String::from_utf8_lossy(&buf[..end]).into_owned(), lowered, log })
        })()
    };
    // SAFETY: destroyed once, after its last use.
    unsafe {
        nv::nvrtcDestroyProgram(&mut prog);
    }
    out
}
