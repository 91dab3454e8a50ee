//! The deterministic generator behind test inputs and canaries: SplitMix64 used as a
//! counter-based hash, so value `i` of stream `seed` is `mix(seed + (i+1)·γ)`.
//!
//! Why not `rand`'s `StdRng`: its algorithm may change between `rand` releases, and a
//! recorded seed must reproduce the same inputs forever (to re-run a failed
//! verification). Random access also lets large inputs be filled in parallel with the
//! same result on any number of threads.

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Value `index` of the stream `seed`; equal to the `index`-th output of SplitMix64
/// seeded with `seed`.
pub fn splitmix_at(seed: u64, index: u64) -> u64 {
    mix(seed.wrapping_add(index.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// Uniform in `[0, 1)` with 53 random bits.
pub fn unit_at(seed: u64, index: u64) -> f64 {
    (splitmix_at(seed, index) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A sequential view of the same stream, for small draws (sample positions).
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    seed: u64,
    next: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { seed, next: 0 }
    }

    pub fn next_u64(&mut self) -> u64 {
        let v = splitmix_at(self.seed, self.next);
        self.next += 1;
        v
    }

    /// Uniform in `0..n` (`n > 0`), by widening multiply; the bias is below 2^-32 for
    /// any `n` under 2^32, far below what sampling positions cares about.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// Derives an independent seed for a named purpose, so that e.g. A and B of one test
/// never share a stream.
pub fn derive_seed(seed: u64, purpose: u64) -> u64 {
    mix(seed ^ mix(purpose.wrapping_add(GAMMA)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_splitmix64_sequence() {
        // First outputs of SplitMix64 seeded with 1234567 (Vigna's reference code).
        let mut r = SplitMix64::new(1234567);
        let got: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(got, [6457827717110365317, 3203168211198807973, 9817491932198370423]);
    }

    #[test]
    fn unit_values_fill_the_interval_evenly() {
        let n = 100_000;
        let mean = (0..n).map(|i| unit_at(7, i)).sum::<f64>() / n as f64;
        assert!((mean - 0.5).abs() < 0.005, "{mean}");
        assert!((0..n).all(|i| (0.0..1.0).contains(&unit_at(7, i))));
        let mut r = SplitMix64::new(3);
        assert!((0..1000).all(|_| r.below(10) < 10));
        assert_ne!(derive_seed(1, 0), derive_seed(1, 1));
    }
}
