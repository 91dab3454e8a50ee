//! Scheduling pressure: a co-running kernel (`kaas_hog` in `checks.cu`) on the side
//! stream that holds or slows a chosen set of SMs for a bounded time, so that the
//! candidate launched next on the main stream has its blocks scheduled differently from a
//! run on an idle GPU. The race stage (`harness::pipeline`) runs the candidate under each
//! [`Pressure`] and requires the same exact result every time.

use std::time::{Duration, Instant};

use super::ffi::{Arg, KernelCall, cu};
use super::{DeviceBuffer, Gpu, GpuError, at};

/// How the co-running kernel presses on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pressure {
    /// One spinning block of 512 threads on about half the SMs, picked at random from
    /// `seed`: it shares those SMs with the candidate's blocks (room is left for threads
    /// and registers, not for much shared memory) and slows them, so that two blocks the
    /// idle GPU runs side by side at the same pace — the halves of a split-K tile — now
    /// run at different paces, and the one dispatched first may finish last.
    Slowed { seed: u64 },
    /// Two blocks of 1,024 threads, each with half of the SM's shared memory, on every SM
    /// but `free` of them: nothing else fits there until the hog ends, so the candidate
    /// runs on those few SMs alone, a handful of blocks at a time (what a green context
    /// limited to `free` SMs would give).
    AllBut { free: u32 },
}

/// The co-running kernels of one race stage ([`Pressure::stage`]).
pub const STAGE_PRESSURES: usize = 4;

impl Pressure {
    /// The pressures of the race stage, in order, for a run seeded by `seed`.
    pub fn stage(seed: u64) -> [Pressure; STAGE_PRESSURES] {
        [Pressure::Slowed { seed }, Pressure::Slowed { seed: seed ^ 0x0000_005E_ED0F_5105 }, Pressure::AllBut { free: 8 }, Pressure::AllBut { free: 1 }]
    }

    pub fn describe(self, sm_count: u32) -> String {
        let held = self.held(sm_count);
        match self {
            Pressure::Slowed { .. } => format!("a co-running kernel spinning beside it on {held} of {sm_count} SMs picked at random"),
            Pressure::AllBut { .. } => format!("a co-running kernel filling {held} of {sm_count} SMs, {} left free", sm_count.min(256) - held),
        }
    }

    /// How many SMs the hog spins on.
    pub fn held(self, sm_count: u32) -> u32 {
        self.mask(sm_count).iter().map(|w| w.count_ones()).sum()
    }

    /// The hog's blocks: threads, dynamic shared memory, and how many fit on one SM.
    fn blocks(self, smem_per_sm: u32) -> (u32, u32, u32) {
        // The driver reserves 1 KiB of shared memory per block.
        match self {
            // At least the 32 KiB the hog's loop touches.
            Pressure::Slowed { .. } => (512, (smem_per_sm / 2 + 1024).min(smem_per_sm.saturating_sub(2048)).max(32 << 10), 1),
            Pressure::AllBut { .. } => (1024, (smem_per_sm / 2).saturating_sub(1024), 2),
        }
    }

    /// The SMs the hog spins on, as the kernel's 256-bit mask.
    fn mask(self, sm_count: u32) -> [u64; 4] {
        let sm_count = sm_count.min(256);
        let mut mask = [0u64; 4];
        for s in 0..sm_count {
            let held = match self {
                Pressure::Slowed { seed } => crate::verify::rng::unit_at(seed, s as u64) < 0.5,
                // The free SMs are spread over the chip (every k-th id), not one GPC's.
                Pressure::AllBut { free } => {
                    let free = free.clamp(1, sm_count);
                    let step = (sm_count / free).max(1);
                    !(s % step == 0 && s / step < free)
                }
            };
            if held {
                mask[(s / 64) as usize] |= 1 << (s % 64);
            }
        }
        mask
    }
}

/// A hog running on the side stream: how many of its blocks were seen spinning before
/// the candidate was queued, of how many it places on the SMs it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    pub spinning: u32,
    pub expected: u32,
}

/// Device buffers of one [`Pressure`] application, kept alive until the hog ends.
pub struct Hog {
    _mask: DeviceBuffer,
    resident: DeviceBuffer,
    _sink: DeviceBuffer,
}

/// Starts `pressure` for `duration` on the side stream and waits (at most 200 ms) until
/// its blocks spin on the SMs it holds. Call [`finish`] after the candidate's work.
pub fn apply(gpu: &Gpu, pressure: Pressure, duration: Duration) -> Result<(Hog, Applied), GpuError> {
    let stage = "scheduling pressure";
    let facts = gpu.facts();
    let sm_count = facts.sm_count.max(1);
    let mask_words = pressure.mask(sm_count);
    let (threads, smem, per_sm) = pressure.blocks(facts.max_shared_mem_per_sm);
    let smem = smem.min(facts.max_shared_mem_per_block_optin);
    let expected = pressure.held(sm_count) * per_sm;
    let mask = gpu.alloc(32)?;
    mask.upload_u16(gpu, &mask_words.iter().flat_map(|v| (0..4).map(move |i| (v >> (16 * i)) as u16)).collect::<Vec<_>>())?;
    let resident = gpu.alloc(8)?;
    resident.zero(gpu)?;
    let sink = gpu.alloc(8)?;
    gpu.synchronize()?;

    let function = gpu.check_function("kaas_hog")?;
    if smem > 48 << 10 {
        // Above 48 KiB of dynamic shared memory a kernel must opt in.
        function
            .set_attribute(cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)
            .map_err(at(stage))?;
    }
    let args = vec![Arg::U64(mask.address()), Arg::U64(duration.as_nanos().min(u64::MAX as u128) as u64), Arg::U64(resident.address()), Arg::U64(sink.address())];
    // One more block per SM than fit: the first wave reaches every SM; blocks on SMs
    // outside the mask return at once and make room for the rest.
    let call = KernelCall::new(function, [sm_count * (per_sm + 1), 1, 1], [threads, 1, 1], [1, 1, 1], smem, args).map_err(|m| GpuError::refused(stage, m))?;
    call.enqueue(gpu.side_stream()?).map_err(at(stage))?;

    let deadline = Instant::now() + Duration::from_millis(200);
    let mut spinning = 0;
    while Instant::now() < deadline {
        spinning = resident.download_u16(gpu, 2)?.iter().rev().fold(0u32, |acc, &w| (acc << 16) | w as u32);
        if spinning >= expected {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok((Hog { _mask: mask, resident, _sink: sink }, Applied { spinning, expected }))
}

/// Waits for the hog to end (its duration is bounded) and frees its buffers.
pub fn finish(gpu: &Gpu, hog: Hog) -> Result<(), GpuError> {
    gpu.side_stream()?.synchronize().map_err(at("scheduling pressure: wait for the co-running kernel"))?;
    drop(hog.resident);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_hold_the_sms_each_pressure_names() {
        assert_eq!(Pressure::AllBut { free: 8 }.held(132), 124);
        assert_eq!(Pressure::AllBut { free: 1 }.held(132), 131);
        assert_eq!(Pressure::AllBut { free: 200 }.held(132), 0);
        // The free SMs are spread: ids 0, 16, 32, … for 8 of 132.
        let m = Pressure::AllBut { free: 8 }.mask(132);
        for s in [0u32, 16, 32, 48, 64, 80, 96, 112] {
            assert_eq!((m[(s / 64) as usize] >> (s % 64)) & 1, 0, "SM {s} is free");
        }
        assert!(Pressure::AllBut { free: 8 }.describe(132).contains("filling 124 of 132 SMs, 8 left free"));
        // A random half: about half, different for different seeds, the same for one.
        let [a, b, ..] = Pressure::stage(7);
        assert!((40..=92).contains(&a.held(132)), "{}", a.held(132));
        assert_ne!(a.mask(132), b.mask(132));
        assert_eq!(a.mask(132), Pressure::stage(7)[0].mask(132));
        // Block shapes: one 512-thread block per SM that leaves room beside it, or two
        // 1,024-thread blocks that fill the SM's threads and shared memory.
        let smem = 233_472;
        let (t, s, n) = a.blocks(smem);
        assert_eq!((t, n), (512, 1));
        assert!(2 * (s + 1024) > smem && s + 1024 <= smem);
        let (t, s, n) = Pressure::AllBut { free: 1 }.blocks(smem);
        assert_eq!((t, n), (1024, 2));
        assert!(2 * (s + 1024) <= smem && 3 * (s + 1024) > smem);
    }
}
