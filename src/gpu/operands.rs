//! The device buffers of one problem: A (M×K row-major), B (K×N row-major for `nn`,
//! N×K row-major for `tn`), C (M×N row-major) and the optional workspace. Kernels and
//! baselines alike read and write these, so all contenders see the same inputs.

use half::f16;

use super::{DeviceBuffer, Gpu, GpuError};
use crate::problem::Problem;

/// fp16 quiet NaN: C is filled with it before a run so that an unwritten element shows.
pub const F16_NAN_BITS: u16 = 0x7E00;

#[derive(Debug)]
pub struct Operands {
    problem: Problem,
    pub a: DeviceBuffer,
    pub b: DeviceBuffer,
    pub c: DeviceBuffer,
    pub workspace: Option<DeviceBuffer>,
}

impl Operands {
    /// Allocates A, B, C (uninitialised) and a zeroed workspace of `workspace_bytes`.
    pub fn alloc(gpu: &Gpu, problem: &Problem, workspace_bytes: u64) -> Result<Operands, GpuError> {
        problem.validate().map_err(|e| GpuError::refused("allocate operands", e.to_string()))?;
        let p = *problem;
        let stage = format!("allocate operands for {p}");
        let a = gpu.alloc(a_len(&p) * 2).map_err(|e| e.within(&stage))?;
        let b = gpu.alloc(b_len(&p) * 2).map_err(|e| e.within(&stage))?;
        let c = gpu.alloc(c_len(&p) * 2).map_err(|e| e.within(&stage))?;
        let workspace = if workspace_bytes > 0 {
            let bytes = usize::try_from(workspace_bytes)
                .map_err(|_| GpuError::refused(&stage, format!("workspace of {workspace_bytes} bytes")))?;
            let w = gpu.alloc(bytes).map_err(|e| e.within(&stage))?;
            w.zero(gpu)?;
            Some(w)
        } else {
            None
        };
        Ok(Operands { problem: p, a, b, c, workspace })
    }

    /// Operands over buffers the caller allocated (e.g. views between canary regions);
    /// each must hold at least what the problem needs.
    pub fn from_buffers(
        problem: &Problem,
        a: DeviceBuffer,
        b: DeviceBuffer,
        c: DeviceBuffer,
        workspace: Option<DeviceBuffer>,
    ) -> Result<Operands, GpuError> {
        problem.validate().map_err(|e| GpuError::refused("operands", e.to_string()))?;
        let p = *problem;
        for (name, buf, len) in [("A", &a, a_len(&p)), ("B", &b, b_len(&p)), ("C", &c, c_len(&p))] {
            if buf.bytes() < len * 2 {
                return Err(GpuError::refused(
                    format!("operands for {p}"),
                    format!("{name} has {} bytes, needs {}", buf.bytes(), len * 2),
                ));
            }
        }
        Ok(Operands { problem: p, a, b, c, workspace })
    }

    pub fn problem(&self) -> &Problem {
        &self.problem
    }

    /// Uploads A (M×K row-major) and B (stored as the layout says: K×N or N×K row-major).
    pub fn upload(&self, gpu: &Gpu, a: &[f16], b: &[f16]) -> Result<(), GpuError> {
        let p = &self.problem;
        if a.len() != a_len(p) || b.len() != b_len(p) {
            return Err(GpuError::refused(
                format!("upload operands for {p}"),
                format!("A has {} values (expected {}), B has {} (expected {})", a.len(), a_len(p), b.len(), b_len(p)),
            ));
        }
        self.a.upload_f16(gpu, a)?;
        self.b.upload_f16(gpu, b)
    }

    /// Fills C with NaN, in stream order.
    pub fn poison_c(&self, gpu: &Gpu) -> Result<(), GpuError> {
        self.c.fill_f16_bits(gpu, F16_NAN_BITS, c_len(&self.problem))
    }

    /// Reads C (M×N row-major) after the work queued so far.
    pub fn download_c(&self, gpu: &Gpu) -> Result<Vec<f16>, GpuError> {
        self.c.download_f16(gpu, c_len(&self.problem))
    }
}

pub fn a_len(p: &Problem) -> usize {
    p.m as usize * p.k as usize
}
pub fn b_len(p: &Problem) -> usize {
    p.k as usize * p.n as usize
}
pub fn c_len(p: &Problem) -> usize {
    p.m as usize * p.n as usize
}
