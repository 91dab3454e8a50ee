//! The launcher: turns a `kaas.hgemm.v1` manifest plus loaded PTX plus a problem's
//! buffers into kernel calls, checked before anything runs, then runs them in order on
//! the one stream. Nothing else is launched, allocated or synchronised in between.

use std::marker::PhantomData;

use cudarc::driver::sys::{CUfunction_attribute as FnAttr, CUtensorMapL2promotion, CUtensorMapSwizzle};

use super::ffi::{self, Arg, KernelCall};
use super::timing::Contender;
use super::{Gpu, GpuError, LoadedPtx, Operands, at};
use crate::manifest::{Buffer, Dim, I32Value, L2Promotion, Launch, Manifest, Operand, Param, Swizzle, TensorMapSpec};
use crate::problem::{Layout, Problem};

/// A manifest ready to run: every launch's function found, arguments encoded and checked
/// against the entry's parameter list, shared memory and cluster limits set.
/// It borrows the buffers whose addresses it holds, so they outlive it.
#[derive(Debug)]
pub struct PreparedManifest<'a> {
    problem: Problem,
    calls: Vec<(String, KernelCall)>,
    _buffers: PhantomData<&'a Operands>,
}

impl<'a> PreparedManifest<'a> {
    pub fn new(
        gpu: &Gpu,
        ptx: &LoadedPtx,
        manifest: &Manifest,
        ops: &'a Operands,
    ) -> Result<PreparedManifest<'a>, GpuError> {
        manifest.validate().map_err(|e| GpuError::refused("manifest", e.to_string()))?;
        if manifest.problem != *ops.problem() {
            return Err(GpuError::refused(
                "manifest",
                format!("manifest is for {}, the buffers are for {}", manifest.problem, ops.problem()),
            ));
        }
        if manifest.workspace_bytes > 0 {
            let have = ops.workspace.as_ref().map_or(0, |w| w.bytes() as u64);
            if have < manifest.workspace_bytes {
                return Err(GpuError::refused(
                    "manifest",
                    format!("workspace_bytes = {} but {have} bytes were allocated", manifest.workspace_bytes),
                ));
            }
        }
        let mut calls = Vec::with_capacity(manifest.launches.len());
        for (i, launch) in manifest.launches.iter().enumerate() {
            let stage = format!("launch {i} (`{}`)", launch.entry);
            let call = prepare_launch(gpu, ptx, launch, ops).map_err(|e| e.within(&stage))?;
            calls.push((stage, call));
        }
        Ok(PreparedManifest { problem: manifest.problem, calls, _buffers: PhantomData })
    }

    pub fn problem(&self) -> &Problem {
        &self.problem
    }

    /// How many launches the manifest makes.
    pub fn launch_count(&self) -> usize {
        self.calls.len()
    }

    /// What launch `index` is, e.g. ``launch 0 (`hgemm_128x256x64`)``.
    pub fn launch_label(&self, index: usize) -> Option<&str> {
        self.calls.get(index).map(|(stage, _)| stage.as_str())
    }

    /// Queues launch `index` alone, so a caller can watch each launch with its own
    /// deadline (the verifier's per-launch watchdog).
    pub fn enqueue_launch(&self, gpu: &Gpu, index: usize) -> Result<(), GpuError> {
        let (stage, call) = self
            .calls
            .get(index)
            .ok_or_else(|| GpuError::refused("launch", format!("no launch {index}; the manifest has {}", self.calls.len())))?;
        call.enqueue(gpu.stream()).map_err(at(stage.clone()))
    }

    /// Queues every launch, in order, on the stream.
    pub fn enqueue(&self, gpu: &Gpu) -> Result<(), GpuError> {
        for (stage, call) in &self.calls {
            call.enqueue(gpu.stream()).map_err(at(stage.clone()))?;
        }
        Ok(())
    }

    /// Queues every launch and waits; a fault in a kernel is reported here.
    pub fn run(&self, gpu: &Gpu) -> Result<(), GpuError> {
        self.enqueue(gpu)?;
        gpu.stream().synchronize().map_err(at(format!("execute {} launch(es) for {}", self.calls.len(), self.problem)))
    }
}

impl Contender for PreparedManifest<'_> {
    fn label(&self) -> String {
        self.calls.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>().join(" + ")
    }
    fn enqueue(&self, gpu: &Gpu) -> Result<(), GpuError> {
        PreparedManifest::enqueue(self, gpu)
    }
}

fn prepare_launch(gpu: &Gpu, ptx: &LoadedPtx, launch: &Launch, ops: &Operands) -> Result<KernelCall, GpuError> {
    let facts = gpu.facts();
    let function = ptx.module.function(&launch.entry).map_err(|f| {
        GpuError::refused("find entry", format!("the PTX has no entry `{}` ({})", launch.entry, f.code))
    })?;
    let fn_attr = |a: FnAttr| function.attribute(a).map_err(at(format!("read function attribute {a:?}")));

    let threads = launch.threads_per_block();
    let max_threads = fn_attr(FnAttr::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?.max(0) as u32;
    if threads > max_threads {
        return Err(GpuError::refused(
            "check block",
            format!("block {:?} has {threads} threads; this entry allows at most {max_threads}", launch.block),
        ));
    }

    let static_smem = fn_attr(FnAttr::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?.max(0) as u32;
    let total_smem = static_smem.saturating_add(launch.shared_mem_bytes);
    if total_smem > facts.max_shared_mem_per_block_optin {
        return Err(GpuError::refused(
            "check shared memory",
            format!(
                "{} bytes dynamic + {static_smem} static exceed the device's {} bytes per block",
                launch.shared_mem_bytes, facts.max_shared_mem_per_block_optin
            ),
        ));
    }
    function
        .set_attribute(FnAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, launch.shared_mem_bytes as i32)
        .map_err(at("set max dynamic shared memory"))?;

    let cluster_blocks: u32 = launch.cluster.iter().product();
    if cluster_blocks > 1 {
        if facts.compute_capability < (9, 0) {
            return Err(GpuError::refused(
                "check cluster",
                format!(
                    "cluster {:?} needs compute capability 9.0; this device is {:?}",
                    launch.cluster, facts.compute_capability
                ),
            ));
        }
        if cluster_blocks > 8 {
            function
                .set_attribute(FnAttr::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
                .map_err(at("allow a non-portable cluster size"))?;
        }
    }

    let mut args = Vec::with_capacity(launch.params.len());
    for (i, param) in launch.params.iter().enumerate() {
        args.push(encode_param(param, ops).map_err(|e| e.within(format!("param {i}")))?);
    }
    KernelCall::new(function, launch.grid, launch.block, launch.cluster, launch.shared_mem_bytes, args)
        .map_err(|m| GpuError::refused("match params", m))
}

fn encode_param(param: &Param, ops: &Operands) -> Result<Arg, GpuError> {
    let p = ops.problem();
    Ok(match param {
        Param::Ptr(Buffer::A) => Arg::U64(ops.a.address()),
        Param::Ptr(Buffer::B) => Arg::U64(ops.b.address()),
        Param::Ptr(Buffer::C) => Arg::U64(ops.c.address()),
        Param::Ptr(Buffer::Workspace) => match &ops.workspace {
            Some(w) => Arg::U64(w.address()),
            None => return Err(GpuError::refused("workspace", "the manifest points at a workspace but has none")),
        },
        // Extents are at most 65536, so they fit an i32.
        Param::I32(I32Value::Dim(Dim::M)) => Arg::I32(p.m as i32),
        Param::I32(I32Value::Dim(Dim::N)) => Arg::I32(p.n as i32),
        Param::I32(I32Value::Dim(Dim::K)) => Arg::I32(p.k as i32),
        Param::I32(I32Value::Const(v)) => Arg::I32(*v),
        Param::TensorMap(spec) => Arg::TensorMap(Box::new(encode(ops, spec)?)),
    })
}

/// The global geometry of an operand, as a tensor map sees it: dimensions innermost
/// first, and the byte stride between consecutive rows. All operands are row-major fp16:
/// A is M×K, B is K×N (`nn`) or N×K (`tn`), C is M×N.
pub fn tensor_map_geometry(problem: &Problem, operand: Operand) -> ([u64; 2], u64) {
    let (m, n, k) = (problem.m as u64, problem.n as u64, problem.k as u64);
    let (rows, cols) = match (operand, problem.layout) {
        (Operand::A, _) => (m, k),
        (Operand::B, Layout::Nn) => (k, n),
        (Operand::B, Layout::Tn) => (n, k),
        (Operand::C, _) => (m, n),
    };
    ([cols, rows], cols * 2)
}

fn encode(ops: &Operands, spec: &TensorMapSpec) -> Result<ffi::TensorMap, GpuError> {
    let (dims, row_stride_bytes) = tensor_map_geometry(ops.problem(), spec.operand);
    let address = match spec.operand {
        Operand::A => ops.a.address(),
        Operand::B => ops.b.address(),
        Operand::C => ops.c.address(),
    };
    // The driver wants row strides that are multiples of 16 bytes.
    if row_stride_bytes % 16 != 0 {
        return Err(GpuError::refused(
            format!("tensor map over {:?}", spec.operand),
            format!(
                "its rows are {row_stride_bytes} bytes apart; a tensor map needs a multiple of 16 \
                 (the row length must be a multiple of 8 fp16 values) — use plain pointers for this shape"
            ),
        ));
    }
    let swizzle = match spec.swizzle {
        Swizzle::None => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
        Swizzle::B32 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_32B,
        Swizzle::B64 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        Swizzle::B128 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    let l2_promotion = match spec.l2_promotion {
        L2Promotion::None => CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_NONE,
        L2Promotion::B64 => CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
        L2Promotion::B128 => CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        L2Promotion::B256 => CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
    };
    let desc = ffi::TensorMapDesc { address, dims, row_stride_bytes, box_dims: spec.box_dims, swizzle, l2_promotion };
    ffi::encode_tensor_map(&desc).map_err(at(format!(
        "encode tensor map over {:?} (dims {dims:?}, row stride {row_stride_bytes} B, box {:?}, swizzle {:?}, L2 promotion {:?})",
        spec.operand, spec.box_dims, spec.swizzle, spec.l2_promotion
    )))
}

/// Encodes the tensor map a manifest parameter describes over these buffers, returning its
/// 128 opaque bytes as 16 words; fails as the launcher would.
pub fn encode_tensor_map(ops: &Operands, spec: &TensorMapSpec) -> Result<[u64; 16], GpuError> {
    encode(ops, spec).map(|m| m.0.opaque)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Acc, Arch, Shape};

    #[test]
    fn tensor_map_geometry_follows_the_layout() {
        let nn = Problem::new(Arch::Sm90, Acc::F32, Layout::Nn, Shape { m: 128, n: 256, k: 64 });
        let tn = Problem { layout: Layout::Tn, ..nn };
        assert_eq!(tensor_map_geometry(&nn, Operand::A), ([64, 128], 128));
        assert_eq!(tensor_map_geometry(&nn, Operand::B), ([256, 64], 512));
        assert_eq!(tensor_map_geometry(&tn, Operand::B), ([64, 256], 128));
        assert_eq!(tensor_map_geometry(&tn, Operand::C), ([256, 128], 512));
    }
}
