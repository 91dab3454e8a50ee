//! The candidate's buffers, each inside one allocation between two canary regions of
//! seeded random bytes: `[front canary | payload | back canary]`. A write that strays
//! past either end of A, B, C or the workspace lands in a canary (up to its size; 2 MiB
//! by default, beyond which the write usually faults), and [`GuardedOperands::check_canaries`]
//! says which buffer, which side and how far.

use crate::gpu::{DeviceBuffer, Gpu, GpuError, Operands};
use crate::problem::Problem;
use crate::verify::containment::{GuardedLayout, POISON_BITS, canary_pattern, check_canary};
use crate::verify::rng::derive_seed;

/// Which side of a buffer a damaged canary lies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Before,
    After,
}

/// The first damaged canary byte found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanaryDamage {
    /// `A`, `B`, `C` or `workspace`.
    pub buffer: &'static str,
    pub side: Side,
    /// Bytes from the payload's edge to the damaged byte: `1` is the byte right before the
    /// first element (`Before`) or right after the last (`After`).
    pub distance: usize,
}

impl CanaryDamage {
    pub fn describe(&self) -> String {
        match self.side {
            Side::Before => format!("a write landed {} byte(s) before the start of {}", self.distance, self.buffer),
            Side::After => format!("a write landed {} byte(s) past the end of {}", self.distance, self.buffer),
        }
    }
}

struct Region {
    name: &'static str,
    whole: DeviceBuffer,
    layout: GuardedLayout,
    front_seed: u64,
    back_seed: u64,
}

impl Region {
    fn alloc(gpu: &Gpu, name: &'static str, payload_bytes: usize, canary_bytes: usize, seed: u64, tag: u64) -> Result<Region, GpuError> {
        let layout = GuardedLayout::new(payload_bytes, canary_bytes);
        let whole = gpu.alloc(layout.total()).map_err(|e| e.within(format!("guarded {name}")))?;
        let region = Region { name, whole, layout, front_seed: derive_seed(seed, tag * 2), back_seed: derive_seed(seed, tag * 2 + 1) };
        region.write_canaries(gpu)?;
        Ok(region)
    }

    fn payload(&self) -> Result<DeviceBuffer, GpuError> {
        self.whole.view(self.layout.payload_offset(), self.layout.payload)
    }

    fn front(&self) -> Result<DeviceBuffer, GpuError> {
        self.whole.view(0, self.layout.front)
    }

    fn back(&self) -> Result<DeviceBuffer, GpuError> {
        self.whole.view(self.layout.back_offset(), self.layout.back)
    }

    fn write_canaries(&self, gpu: &Gpu) -> Result<(), GpuError> {
        self.front()?.upload_u16(gpu, &to_words(&canary_pattern(self.front_seed, self.layout.front)))?;
        self.back()?.upload_u16(gpu, &to_words(&canary_pattern(self.back_seed, self.layout.back)))
    }

    fn damage(&self, gpu: &Gpu) -> Result<Option<CanaryDamage>, GpuError> {
        // The back first: overshooting the end is the commoner bug.
        let back = to_bytes(&self.back()?.download_u16(gpu, self.layout.back / 2)?);
        if let Some(offset) = check_canary(self.back_seed, &back) {
            return Ok(Some(CanaryDamage { buffer: self.name, side: Side::After, distance: offset + 1 }));
        }
        let front = to_bytes(&self.front()?.download_u16(gpu, self.layout.front / 2)?);
        // The damaged byte nearest the payload is the one to report.
        let expected = canary_pattern(self.front_seed, front.len());
        if let Some(offset) = (0..front.len()).rev().find(|&i| front[i] != expected[i]) {
            return Ok(Some(CanaryDamage { buffer: self.name, side: Side::Before, distance: front.len() - offset }));
        }
        Ok(None)
    }
}

/// Canary regions are whole multiples of 256 bytes (see [`GuardedLayout`]), so words
/// cover them exactly.
fn to_words(bytes: &[u8]) -> Vec<u16> {
    bytes.chunks(2).map(|p| u16::from_le_bytes([p[0], *p.get(1).unwrap_or(&0)])).collect()
}

fn to_bytes(words: &[u16]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// A, B, C and the workspace of one problem, guarded by canaries, and the [`Operands`]
/// (views of the payloads) that the launcher and the checks use.
pub struct GuardedOperands {
    regions: Vec<Region>,
    ops: Operands,
}

impl GuardedOperands {
    /// Allocates every buffer with `canary_bytes` of canary on each side, writes the
    /// canaries (seeded from `seed`) and zeroes the workspace. The workspace payload is
    /// rounded up to 256 bytes so its canaries stay word-aligned.
    pub fn alloc(gpu: &Gpu, problem: &Problem, workspace_bytes: u64, canary_bytes: usize, seed: u64) -> Result<GuardedOperands, GpuError> {
        let stage = format!("allocate guarded operands for {problem}");
        let (m, n, k) = (problem.m as usize, problem.n as usize, problem.k as usize);
        let a = Region::alloc(gpu, "A", m * k * 2, canary_bytes, seed, 1).map_err(|e| e.within(&stage))?;
        let b = Region::alloc(gpu, "B", k * n * 2, canary_bytes, seed, 2).map_err(|e| e.within(&stage))?;
        let c = Region::alloc(gpu, "C", m * n * 2, canary_bytes, seed, 3).map_err(|e| e.within(&stage))?;
        let mut regions = vec![a, b, c];
        let workspace = if workspace_bytes > 0 {
            let bytes = usize::try_from(workspace_bytes)
                .map_err(|_| GpuError::refused(&stage, format!("workspace of {workspace_bytes} bytes")))?
                .next_multiple_of(256);
            let w = Region::alloc(gpu, "workspace", bytes, canary_bytes, seed, 4).map_err(|e| e.within(&stage))?;
            let view = w.payload()?;
            view.zero(gpu)?;
            regions.push(w);
            Some(view)
        } else {
            None
        };
        let ops = Operands::from_buffers(problem, regions[0].payload()?, regions[1].payload()?, regions[2].payload()?, workspace)?;
        gpu.synchronize()?;
        Ok(GuardedOperands { regions, ops })
    }

    pub fn operands(&self) -> &Operands {
        &self.ops
    }

    /// Fills C with the poison NaN ([`POISON_BITS`]), which no arithmetic produces.
    pub fn poison_c(&self, gpu: &Gpu) -> Result<(), GpuError> {
        let p = self.ops.problem();
        self.ops.c.fill_f16_bits(gpu, POISON_BITS, p.m as usize * p.n as usize)
    }

    /// The first damaged canary (C's first, then A, B, workspace), or `None`.
    pub fn check_canaries(&self, gpu: &Gpu) -> Result<Option<CanaryDamage>, GpuError> {
        for i in [2, 0, 1, 3] {
            if let Some(region) = self.regions.get(i)
                && let Some(d) = region.damage(gpu)?
            {
                return Ok(Some(d));
            }
        }
        Ok(None)
    }

    /// Rewrites every canary (after a reported damage, if the caller goes on).
    pub fn rewrite_canaries(&self, gpu: &Gpu) -> Result<(), GpuError> {
        self.regions.iter().try_for_each(|r| r.write_canaries(gpu))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canary_bytes_survive_the_word_round_trip() {
        let bytes = canary_pattern(5, 4096);
        assert_eq!(to_bytes(&to_words(&bytes)), bytes);
    }

    #[test]
    fn damage_reads_as_a_distance_from_the_buffer() {
        let d = CanaryDamage { buffer: "C", side: Side::After, distance: 2 };
        assert_eq!(d.describe(), "a write landed 2 byte(s) past the end of C");
        let d = CanaryDamage { buffer: "A", side: Side::Before, distance: 16 };
        assert_eq!(d.describe(), "a write landed 16 byte(s) before the start of A");
    }
}
