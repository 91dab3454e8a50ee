//! The verifier's work on the GPU: generating inputs, the reference products (exact
//! counts for the binary test, an fp32 product without TF32 for the deviation test),
//! and the reductions that decide a verdict — exact comparison, poison and non-finite
//! scans, changed inputs, the largest deviation. At 16384³ the host-side versions of
//! these took most of a run (BENCHMARKS.md); here each is one pass over memory.
//!
//! The kernels are `checks.cu`, shipped as the PTX `checks.ptx` that NVRTC makes of it
//! (a test rebuilds it byte for byte; `KAAS_WRITE_CHECKS_PTX=1` rewrites it), so a worker
//! needs no NVRTC. The host-side models in [`crate::verify`] are the specification: the
//! GPU tests compare both on the same data, and the pipeline spot-checks every reference
//! product on the host.

use half::f16;

use super::ffi::{self, Arg, KernelCall};
use super::{DeviceBuffer, Gpu, GpuError, at, column_major_mapping};
use crate::problem::{Layout, Problem};
use crate::verify::{ExactReport, Finding, Mismatch};

/// CUDA C++ source of the kernels.
pub const SOURCE: &str = include_str!("checks.cu");
/// What NVRTC makes of [`SOURCE`] for [`ARCH`].
pub const PTX: &str = include_str!("checks.ptx");
/// Virtual architecture of [`PTX`]: the oldest the service supports, JIT-compiled by the
/// driver for the device at hand.
pub const ARCH: &str = "compute_80";

const THREADS: u32 = 256;

impl Gpu {
    fn check_module(&self) -> Result<&ffi::Module, GpuError> {
        if let Some(m) = self.checks.get() {
            return Ok(m);
        }
        let (module, _) = ffi::Module::load_ptx(&self.ctx, PTX).map_err(|f| GpuError::Load {
            context: "load the verifier's kernels".into(),
            code: f.code,
            log: f.log,
        })?;
        Ok(self.checks.get_or_init(|| module))
    }

    /// One of the verifier's kernels.
    pub(crate) fn check_function(&self, name: &str) -> Result<ffi::Function, GpuError> {
        self.check_module()?.function(name).map_err(at(name))
    }
}

/// Queues one grid-stride kernel over `work` items.
fn launch(gpu: &Gpu, name: &str, work: u64, args: Vec<Arg>) -> Result<(), GpuError> {
    let function = gpu.check_function(name)?;
    let most = (gpu.facts().sm_count.max(1) as u64) * 16;
    let blocks = work.div_ceil(THREADS as u64).clamp(1, most) as u32;
    let call = KernelCall::new(function, [blocks, 1, 1], [THREADS, 1, 1], [1, 1, 1], 0, args).map_err(|m| GpuError::refused(name, m))?;
    call.enqueue(gpu.stream()).map_err(at(name))
}

fn ptr(buf: &DeviceBuffer) -> Arg {
    Arg::U64(buf.address())
}

fn need(buf: &DeviceBuffer, bytes: usize, what: &str) -> Result<(), GpuError> {
    if buf.bytes() < bytes {
        return Err(GpuError::refused(what, format!("the buffer holds {} bytes, {bytes} are needed", buf.bytes())));
    }
    Ok(())
}

/// A few u64 result slots on the device, set to `init`.
fn slots(gpu: &Gpu, init: &[u64]) -> Result<DeviceBuffer, GpuError> {
    let buf = gpu.alloc(init.len() * 8)?;
    buf.upload_u16(gpu, &to_words(init))?;
    Ok(buf)
}

/// u64 values as little-endian 16-bit words (the unit of our copies).
fn to_words(values: &[u64]) -> Vec<u16> {
    values.iter().flat_map(|v| (0..4).map(move |i| (v >> (16 * i)) as u16)).collect()
}

fn from_words(words: &[u16]) -> Vec<u64> {
    words.chunks(4).map(|w| w.iter().rev().fold(0u64, |acc, &x| (acc << 16) | x as u64)).collect()
}

/// The slots' values after the work queued so far.
fn read_slots(gpu: &Gpu, buf: &DeviceBuffer, count: usize) -> Result<Vec<u64>, GpuError> {
    Ok(from_words(&buf.download_u16(gpu, count * 4)?))
}

fn finding(count: u64, first: u64) -> Option<Finding> {
    (count > 0).then_some(Finding { first: first as usize, count: count as usize })
}

/// Queues a pause of `duration` on the stream: one thread sleeping on the device
/// (`kaas_pause`), so the work queued after it starts that much later on a device that
/// stayed busy at next to no power.
pub fn pause(gpu: &Gpu, duration: std::time::Duration) -> Result<(), GpuError> {
    let function = gpu.check_function("kaas_pause")?;
    let ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    let call = KernelCall::new(function, [1, 1, 1], [1, 1, 1], [1, 1, 1], 0, vec![Arg::U64(ns)]).map_err(|m| GpuError::refused("kaas_pause", m))?;
    call.enqueue(gpu.stream()).map_err(at("kaas_pause"))
}

/// One fp16 value of a buffer.
pub fn read_f16(gpu: &Gpu, buf: &DeviceBuffer, index: usize) -> Result<f16, GpuError> {
    Ok(f16::from_bits(buf.view(index * 2, 2)?.download_u16(gpu, 1)?[0]))
}

/// One fp32 value of a buffer.
pub fn read_f32(gpu: &Gpu, buf: &DeviceBuffer, index: usize) -> Result<f32, GpuError> {
    Ok(f32s(&buf.view(index * 4, 4)?.download_u16(gpu, 2)?)[0])
}

/// fp32 values from little-endian 16-bit words.
fn f32s(words: &[u16]) -> Vec<f32> {
    words.chunks(2).map(|w| f32::from_bits(w[0] as u32 | (w[1] as u32) << 16)).collect()
}

/// The first `len` fp16 values of `out` from {0, 1}, each 1 with probability `p`; the
/// same values as [`crate::verify::fill_binary`].
pub fn fill_binary(gpu: &Gpu, out: &DeviceBuffer, len: usize, seed: u64, p: f64) -> Result<(), GpuError> {
    need(out, len * 2, "fill binary inputs")?;
    let (threshold, all_ones) = crate::verify::binary::binary_threshold(p);
    launch(gpu, "kaas_fill_binary", len as u64, vec![ptr(out), Arg::U64(len as u64), Arg::U64(seed), Arg::U64(threshold), Arg::I32(all_ones as i32)])
}

/// The first `len` fp16 values of `out` uniform in `[lo, hi)`; the same values as
/// [`crate::verify::binary::fill_uniform`].
pub fn fill_uniform(gpu: &Gpu, out: &DeviceBuffer, len: usize, seed: u64, lo: f32, hi: f32) -> Result<(), GpuError> {
    need(out, len * 2, "fill uniform inputs")?;
    let (lo, span) = (lo as f64, (hi - lo) as f64);
    launch(gpu, "kaas_fill_uniform", len as u64, vec![ptr(out), Arg::U64(len as u64), Arg::U64(seed), Arg::U64(lo.to_bits()), Arg::U64(span.to_bits())])
}

/// Flips `count` elements of a {0,1} operand (its first `len` values) at positions drawn
/// from `seed`: the binary test's partial change.
pub fn flip_binary(gpu: &Gpu, x: &DeviceBuffer, len: usize, seed: u64, count: u32) -> Result<(), GpuError> {
    need(x, len * 2, "flip binary inputs")?;
    launch(gpu, "kaas_flip_binary", count as u64, vec![ptr(x), Arg::U64(len as u64), Arg::U64(seed), Arg::I32(count as i32)])
}

/// Queues new contents (uniform in [-1, 1)) for the `a_len` values of `a` — every
/// 32-byte sector of them, or about one in `sector_stride` picked at random — and for
/// `b_touches` random values of `b`, from seeds drawn from the device counter `counter`
/// (8 bytes) and `secret`: every launch writes contents no earlier one wrote.
/// Capturable in a graph.
#[allow(clippy::too_many_arguments)]
pub fn refresh_inputs(gpu: &Gpu, a: &DeviceBuffer, a_len: usize, sector_stride: u32, b: &DeviceBuffer, b_len: usize, b_touches: u32, counter: &DeviceBuffer, secret: u64) -> Result<(), GpuError> {
    need(a, a_len * 2, "refresh inputs")?;
    need(b, b_len * 2, "refresh inputs")?;
    need(counter, 8, "refresh inputs")?;
    let args = vec![ptr(a), Arg::U64(a_len as u64), Arg::I32(sector_stride as i32), ptr(b), Arg::U64(b_len as u64), Arg::I32(b_touches as i32), ptr(counter), Arg::U64(secret)];
    launch(gpu, "kaas_refresh_inputs", a_len.max(1) as u64, args)
}

/// A new buffer holding `len` fp16 values of `input` as fp32.
pub fn to_f32(gpu: &Gpu, input: &DeviceBuffer, len: usize) -> Result<DeviceBuffer, GpuError> {
    need(input, len * 2, "convert to fp32")?;
    let out = gpu.alloc(len * 4)?;
    launch(gpu, "kaas_f16_to_f32", len as u64, vec![ptr(input), ptr(&out), Arg::U64(len as u64)])?;
    Ok(out)
}

/// A new buffer holding the `cols × rows` transpose of `input` (`rows × cols`, row-major).
pub fn transpose(gpu: &Gpu, input: &DeviceBuffer, rows: usize, cols: usize) -> Result<DeviceBuffer, GpuError> {
    need(input, rows * cols * 2, "transpose")?;
    let out = gpu.alloc(rows * cols * 2)?;
    let function = gpu.check_module()?.function("kaas_transpose_f16").map_err(at("transpose"))?;
    let grid = [cols.div_ceil(32) as u32, rows.div_ceil(32) as u32, 1];
    if grid[1] > 65_535 {
        return Err(GpuError::refused("transpose", format!("{rows} rows exceed the grid's limit")));
    }
    let args = vec![ptr(input), ptr(&out), Arg::U64(rows as u64), Arg::U64(cols as u64)];
    let call = KernelCall::new(function, grid, [32, 8, 1], [1, 1, 1], 0, args).map_err(|m| GpuError::refused("transpose", m))?;
    call.enqueue(gpu.stream()).map_err(at("transpose"))?;
    Ok(out)
}

/// Scans C: outputs still holding `poison` bits (never written), then other NaN or
/// infinite outputs. Same answers as [`crate::verify::find_unwritten`] and
/// [`crate::verify::find_non_finite`] (the latter without the poison).
pub fn scan_output(gpu: &Gpu, c: &DeviceBuffer, len: usize, poison: u16) -> Result<(Option<Finding>, Option<Finding>), GpuError> {
    need(c, len * 2, "scan C")?;
    let stats = slots(gpu, &[0, u64::MAX, 0, u64::MAX])?;
    launch(gpu, "kaas_scan_output", len as u64, vec![ptr(c), Arg::U64(len as u64), Arg::I32(poison as i32), ptr(&stats)])?;
    let s = read_slots(gpu, &stats, 4)?;
    Ok((finding(s[0], s[1]), finding(s[2], s[3])))
}

/// Elements whose bits differ between `x` and `y`, as [`crate::verify::find_changed`].
pub fn find_changed(gpu: &Gpu, x: &DeviceBuffer, y: &DeviceBuffer, len: usize) -> Result<Option<Finding>, GpuError> {
    need(x, len * 2, "compare buffers")?;
    need(y, len * 2, "compare buffers")?;
    let stats = slots(gpu, &[0, u64::MAX])?;
    launch(gpu, "kaas_find_changed", len as u64, vec![ptr(x), ptr(y), Arg::U64(len as u64), ptr(&stats)])?;
    let s = read_slots(gpu, &stats, 2)?;
    Ok(finding(s[0], s[1]))
}

/// The binary test's comparison of C (fp16, row-major, `n` columns) with exact counts
/// (fp32): outputs whose count exceeds `limit` are not compared.
pub fn compare_exact(gpu: &Gpu, c: &DeviceBuffer, counts: &DeviceBuffer, len: usize, n: usize, limit: u32) -> Result<ExactReport, GpuError> {
    need(c, len * 2, "compare with exact counts")?;
    need(counts, len * 4, "compare with exact counts")?;
    let stats = slots(gpu, &[0, 0, 0, u64::MAX])?;
    let limit_bits = (limit as f32).to_bits() as i32;
    launch(gpu, "kaas_compare_exact", len as u64, vec![ptr(c), ptr(counts), Arg::U64(len as u64), Arg::I32(limit_bits), ptr(&stats)])?;
    let s = read_slots(gpu, &stats, 4)?;
    let first_mismatch = match finding(s[2], s[3]) {
        None => None,
        Some(f) => {
            let n = n.max(1);
            let expected = read_f32(gpu, counts, f.first)?;
            let got = read_f16(gpu, c, f.first)?.to_f32();
            Some(Mismatch { row: (f.first / n) as u32, col: (f.first % n) as u32, expected: expected as u32, got })
        }
    };
    Ok(ExactReport { checked: s[0], over_limit: s[1], mismatches: s[2], first_mismatch })
}

/// The largest deviation found on the device, with the two values where it is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Largest {
    pub max_abs: f64,
    /// Row-major index (the first, on ties).
    pub index: usize,
    /// C there (0 when no C was given).
    pub got: f64,
    pub reference: f64,
}

/// `max |c − reference|` over the first `len` outputs, or `max |reference|` when `c` is
/// `None`; NaN and Inf count as infinite, as in [`crate::verify::max_abs_deviation`]. The
/// value is recomputed in f64 from the two elements at the index found.
pub fn max_abs_deviation(gpu: &Gpu, c: Option<&DeviceBuffer>, reference: &DeviceBuffer, len: usize) -> Result<Largest, GpuError> {
    if len as u64 >= u32::MAX as u64 {
        return Err(GpuError::refused("largest deviation", format!("{len} outputs exceed the kernel's 32-bit index")));
    }
    need(reference, len * 4, "largest deviation")?;
    if let Some(c) = c {
        need(c, len * 2, "largest deviation")?;
    }
    let stats = slots(gpu, &[0])?;
    let c_arg = c.map_or(Arg::U64(0), ptr);
    launch(gpu, "kaas_max_abs_dev", len as u64, vec![c_arg, ptr(reference), Arg::U64(len as u64), ptr(&stats)])?;
    let packed = read_slots(gpu, &stats, 1)?[0];
    if len == 0 || packed == 0 {
        return Ok(Largest { max_abs: 0.0, index: 0, got: 0.0, reference: 0.0 });
    }
    let index = (u32::MAX - (packed as u32)) as usize;
    let r = read_f32(gpu, reference, index)? as f64;
    let got = match c {
        Some(c) => read_f16(gpu, c, index)?.to_f64(),
        None => 0.0,
    };
    let d = (got - r).abs();
    Ok(Largest { max_abs: if d.is_finite() { d } else { f64::INFINITY }, index, got, reference: r })
}

/// `count` fp16 values per line: line `l` is `src[starts[l] + t·stride]` for `t < count`.
/// Rows (stride 1) or columns (stride = row length) of an operand, for spot checks.
pub fn gather_lines(gpu: &Gpu, src: &DeviceBuffer, starts: &[u64], stride: u64, count: usize) -> Result<Vec<f16>, GpuError> {
    let total = starts.len() * count;
    if let Some(last) = starts.iter().map(|&s| s + stride * (count.max(1) as u64 - 1)).max()
        && (last as usize + 1) * 2 > src.bytes()
    {
        return Err(GpuError::refused("gather lines", format!("element {last} lies outside a {}-byte buffer", src.bytes())));
    }
    if total == 0 {
        return Ok(Vec::new());
    }
    let starts_buf = slots(gpu, starts)?;
    let out = gpu.alloc(total * 2)?;
    launch(gpu, "kaas_gather_lines", total as u64, vec![ptr(src), ptr(&starts_buf), Arg::U64(stride), Arg::U64(count as u64), Arg::U64(starts.len() as u64), ptr(&out)])?;
    out.download_f16(gpu, total)
}

/// `src[index[i]]` for each index (fp32).
pub fn gather_f32(gpu: &Gpu, src: &DeviceBuffer, index: &[u64]) -> Result<Vec<f32>, GpuError> {
    if let Some(&i) = index.iter().max()
        && (i as usize + 1) * 4 > src.bytes()
    {
        return Err(GpuError::refused("gather", format!("element {i} lies outside a {}-byte buffer", src.bytes())));
    }
    if index.is_empty() {
        return Ok(Vec::new());
    }
    let index_buf = slots(gpu, index)?;
    let out = gpu.alloc(index.len() * 4)?;
    launch(gpu, "kaas_gather_f32", index.len() as u64, vec![ptr(src), ptr(&index_buf), Arg::U64(index.len() as u64), ptr(&out)])?;
    Ok(f32s(&out.download_u16(gpu, index.len() * 2)?))
}

/// The fp16 FMA chain (one rounding to fp16 per step, K order) at the given row-major
/// outputs, or at every output (a C-shaped buffer) when `index` is `None`; on the device.
pub fn fp16_chain(gpu: &Gpu, p: &Problem, a: &DeviceBuffer, b: &DeviceBuffer, index: Option<&[u64]>) -> Result<DeviceBuffer, GpuError> {
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    need(a, m * k * 2, "fp16 chain")?;
    need(b, k * n * 2, "fp16 chain")?;
    let count = index.map_or(m * n, <[u64]>::len);
    if let Some(&i) = index.and_then(|x| x.iter().max())
        && i as usize >= m * n
    {
        return Err(GpuError::refused("fp16 chain", format!("output {i} lies outside C")));
    }
    let index_buf = index.filter(|x| !x.is_empty()).map(|x| slots(gpu, x)).transpose()?;
    let out = gpu.alloc(count * 2)?;
    let tn = (p.layout == Layout::Tn) as i32;
    let args = vec![ptr(a), ptr(b), index_buf.as_ref().map_or(Arg::U64(0), ptr), Arg::U64(count as u64), Arg::U64(n as u64), Arg::U64(k as u64), Arg::I32(tn), ptr(&out)];
    launch(gpu, "kaas_fp16_chain", count as u64, args)?;
    Ok(out)
}

/// A new fp32 buffer with `C = A·B` for binary inputs, by cuBLAS with fp32 output and
/// compute: whole numbers below 2^24 add exactly, so these are the exact counts.
pub fn exact_counts(gpu: &Gpu, p: &Problem, a: &DeviceBuffer, b: &DeviceBuffer) -> Result<DeviceBuffer, GpuError> {
    if p.k >= 1 << 24 {
        return Err(GpuError::refused("exact counts", "K ≥ 2^24: counts would not be exact in fp32"));
    }
    let c = gpu.alloc(p.m as usize * p.n as usize * 4)?;
    let g = column_major_mapping(p);
    gpu.cublas()?.reference_gemm(&g, ffi::ReferenceGemm::CountsF32, b.memory(), a.memory(), c.memory()).map_err(at("exact counts"))?;
    Ok(c)
}

/// A new fp32 buffer with `C = A·B` computed in fp32 without TF32 (`CUBLAS_COMPUTE_32F_PEDANTIC`)
/// from A and B widened to fp32: the deviation test's reference.
pub fn fp32_reference(gpu: &Gpu, p: &Problem, a: &DeviceBuffer, b: &DeviceBuffer) -> Result<DeviceBuffer, GpuError> {
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    let a32 = to_f32(gpu, a, m * k)?;
    let b32 = to_f32(gpu, b, k * n)?;
    let c = gpu.alloc(m * n * 4)?;
    let g = column_major_mapping(p);
    gpu.cublas()?.reference_gemm(&g, ffi::ReferenceGemm::Fp32Pedantic, b32.memory(), a32.memory(), c.memory()).map_err(at("fp32 reference"))?;
    // The widened copies are freed on return; let the product finish reading them first.
    gpu.synchronize()?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_ptx_is_what_nvrtc_makes_of_the_source() {
        if let Err(why) = super::super::nvrtc::available() {
            eprintln!("SKIP: {why}");
            return;
        }
        let built = super::super::nvrtc::compile(SOURCE, "checks.cu", ARCH, &[]).expect("checks.cu compiles");
        if std::env::var_os("KAAS_WRITE_CHECKS_PTX").is_some() {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gpu/checks.ptx");
            std::fs::write(&path, &built).expect("write checks.ptx");
        }
        assert!(built == PTX, "src/gpu/checks.ptx is stale: run `KAAS_WRITE_CHECKS_PTX=1 cargo test the_shipped_ptx_is` and commit it");
        for entry in ["kaas_fill_binary", "kaas_fill_uniform", "kaas_scan_output", "kaas_compare_exact", "kaas_max_abs_dev", "kaas_fp16_chain", "kaas_hog", "kaas_flip_binary", "kaas_refresh_inputs", "kaas_pause"] {
            assert!(PTX.contains(&format!(".entry {entry}(")), "{entry} missing from the PTX");
        }
    }

    #[test]
    fn result_slots_round_trip_through_16_bit_words() {
        let v = [0u64, u64::MAX, 0x0123_4567_89AB_CDEF];
        let words = to_words(&v);
        assert_eq!(&words[8..], [0xCDEF, 0x89AB, 0x4567, 0x0123]);
        assert_eq!(from_words(&words), v);
    }
}
