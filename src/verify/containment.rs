//! Containment checks: that a kernel wrote every output and nothing else, and left its
//! inputs alone. C is poisoned with a NaN of a distinctive bit pattern before each run,
//! every buffer sits between canary regions of seeded random bytes, and A and B are
//! compared with the copies they were filled from.

use half::f16;

use super::rng::splitmix_at;

/// The poison written into C before a run: a quiet NaN with a payload no arithmetic
/// produces (GPUs return the canonical NaN `0x7FFF`), so "never written" is told apart
/// from "computed NaN".
pub const POISON_BITS: u16 = 0x7E5A;

/// Bytes of canary on each side of a buffer: one 2 MiB allocation granule, so that a
/// write that overshoots a buffer lands in its own canary rather than in the next
/// buffer, and larger overshoots fault.
pub const DEFAULT_CANARY_BYTES: usize = 2 << 20;

/// Alignment of a buffer's start inside its guarded allocation; at least what
/// `cudaMalloc` guarantees (256 B), which TMA (16 B) and vector loads rely on.
pub const PAYLOAD_ALIGN: usize = 256;

pub fn poison() -> f16 {
    f16::from_bits(POISON_BITS)
}

/// A C buffer of `len` poisoned elements.
pub fn poisoned(len: usize) -> Vec<f16> {
    vec![poison(); len]
}

/// Where the first offending element is and how many there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finding {
    pub first: usize,
    pub count: usize,
}

fn find(len: usize, bad: impl Fn(usize) -> bool + Sync) -> Option<Finding> {
    let parts = super::par_chunks(len, |range| {
        let mut first = None;
        let mut count = 0;
        for i in range {
            if bad(i) {
                first.get_or_insert(i);
                count += 1;
            }
        }
        (first, count)
    });
    let count = parts.iter().map(|p| p.1).sum();
    parts.iter().find_map(|p| p.0).map(|first| Finding { first, count })
}

/// Outputs still holding the poison: never written. Check this before
/// [`find_non_finite`], which counts the poison too.
pub fn find_unwritten(c: &[f16]) -> Option<Finding> {
    find(c.len(), |i| c[i].to_bits() == POISON_BITS)
}

/// Outputs that are NaN or ±Inf.
pub fn find_non_finite(c: &[f16]) -> Option<Finding> {
    find(c.len(), |i| !c[i].is_finite())
}

/// Elements of an input that differ from the original, compared by bits (so a NaN
/// compares equal to itself and −0 differs from +0).
pub fn find_changed(original: &[f16], now: &[f16]) -> Option<Finding> {
    if original.len() != now.len() {
        return Some(Finding { first: original.len().min(now.len()), count: original.len().abs_diff(now.len()) });
    }
    find(now.len(), |i| original[i].to_bits() != now[i].to_bits())
}

/// `len` canary bytes from `seed`. Give every region its own seed (e.g. from
/// [`super::rng::derive_seed`]) so that a kernel that copies one canary over another
/// is still caught.
pub fn canary_pattern(seed: u64, len: usize) -> Vec<u8> {
    let words = len.div_ceil(8);
    let parts = super::par_chunks(words, |range| {
        range.flat_map(|w| splitmix_at(seed, w as u64).to_le_bytes()).collect::<Vec<u8>>()
    });
    let mut bytes = parts.concat();
    bytes.truncate(len);
    bytes
}

/// Byte offset of the first damaged byte of a canary region read back from the device,
/// or `None` when it is intact.
pub fn check_canary(seed: u64, observed: &[u8]) -> Option<usize> {
    let expected = canary_pattern(seed, observed.len());
    let parts = super::par_chunks(observed.len(), |mut range| range.find(|&i| observed[i] != expected[i]));
    parts.into_iter().flatten().next()
}

/// How one buffer sits in its guarded allocation: `front` canary bytes, the payload,
/// then `back` canary bytes (at least the asked canary, plus padding to alignment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardedLayout {
    pub front: usize,
    pub payload: usize,
    pub back: usize,
}

impl GuardedLayout {
    pub fn new(payload_bytes: usize, canary_bytes: usize) -> Self {
        let front = canary_bytes.next_multiple_of(PAYLOAD_ALIGN);
        let end = (front + payload_bytes).next_multiple_of(PAYLOAD_ALIGN);
        let back = (end + canary_bytes).next_multiple_of(PAYLOAD_ALIGN) - front - payload_bytes;
        GuardedLayout { front, payload: payload_bytes, back }
    }

    pub fn total(&self) -> usize {
        self.front + self.payload + self.back
    }

    /// Offset of the payload from the allocation's start.
    pub fn payload_offset(&self) -> usize {
        self.front
    }

    /// Offset of the back canary from the allocation's start.
    pub fn back_offset(&self) -> usize {
        self.front + self.payload
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poison_is_a_nan_no_kernel_computes() {
        assert!(poison().is_nan());
        assert_ne!(POISON_BITS, f16::NAN.to_bits());
        let mut c = poisoned(100);
        assert_eq!(find_unwritten(&c), Some(Finding { first: 0, count: 100 }));
        c.iter_mut().for_each(|v| *v = f16::ONE);
        c[40] = poison();
        c[70] = poison();
        assert_eq!(find_unwritten(&c), Some(Finding { first: 40, count: 2 }));
        c[40] = f16::ONE;
        c[70] = f16::ONE;
        assert_eq!(find_unwritten(&c), None);
    }

    #[test]
    fn computed_nan_and_inf_are_non_finite_but_not_unwritten() {
        let mut c = vec![f16::ONE; 10];
        c[3] = f16::NAN;
        c[8] = f16::NEG_INFINITY;
        assert_eq!(find_unwritten(&c), None);
        assert_eq!(find_non_finite(&c), Some(Finding { first: 3, count: 2 }));
        assert_eq!(find_non_finite(&[f16::MAX, f16::MIN]), None);
    }

    #[test]
    fn a_one_byte_overwrite_of_a_canary_is_found_at_its_offset() {
        let canary = canary_pattern(77, 4099);
        assert_eq!(canary.len(), 4099);
        assert_eq!(check_canary(77, &canary), None);
        for offset in [0, 1234, 4098] {
            let mut damaged = canary.clone();
            damaged[offset] ^= 0x01;
            assert_eq!(check_canary(77, &damaged), Some(offset));
        }
        assert_ne!(canary, canary_pattern(78, 4099), "regions with different seeds differ");
        assert_eq!(&canary_pattern(77, 10)[..], &canary[..10], "a prefix is stable");
    }

    #[test]
    fn changed_inputs_are_found_bit_for_bit() {
        let a = vec![f16::ONE, f16::ZERO, f16::NAN, f16::ONE];
        assert_eq!(find_changed(&a, &a.clone()), None);
        let mut b = a.clone();
        b[1] = f16::NEG_ZERO;
        assert_eq!(find_changed(&a, &b), Some(Finding { first: 1, count: 1 }));
        assert_eq!(find_changed(&a, &a[..2]), Some(Finding { first: 2, count: 2 }));
    }

    #[test]
    fn guarded_layouts_keep_the_payload_aligned_with_canary_on_both_sides() {
        for (payload, canary) in [(1000, 4096), (4096, 100), (1, 0), (33 << 20, DEFAULT_CANARY_BYTES)] {
            let g = GuardedLayout::new(payload, canary);
            assert_eq!(g.payload_offset() % PAYLOAD_ALIGN, 0);
            assert!(g.front >= canary && g.back >= canary);
            assert_eq!(g.total() % PAYLOAD_ALIGN, 0);
            assert_eq!(g.back_offset() + g.back, g.total());
        }
    }
}
