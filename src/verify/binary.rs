//! The binary exact test: A and B drawn from {0,1}, so every product is 0 or 1 and
//! every output is a whole count. Counts up to 2048 are exact in fp16 whatever the
//! summation order or accumulator (every partial sum is a smaller whole number), so a
//! correct kernel reproduces them bit for bit and any indexing, tiling or edge bug
//! shows up as a wrong count.

use half::f16;

use super::rng::{derive_seed, splitmix_at};
use super::{VerifyError, expect_len, par_chunks};
use crate::problem::{Layout, Shape};

/// Largest count checked: every integer up to 2^11 is an fp16 value, and since all
/// terms are non-negative no partial sum exceeds the final one.
pub const EXACT_LIMIT: u32 = 2048;

/// Mean count the density aims at: 3/4 of [`EXACT_LIMIT`]. A count is
/// Binomial(K, p²) with standard deviation below √1536 ≈ 39, so 2048 lies 13 standard
/// deviations above the mean and essentially every output is checked, while the
/// counts still spread over hundreds of distinct values.
pub const TARGET_MEAN_COUNT: f64 = 1536.0;

/// Density p of ones in A and B for reduction length `k`: `min(1/2, √(1536/k))`, so the
/// expected count k·p² is `k/4` for k ≤ 6144 (p = 1/2 gives the most varied bits)
/// and 1536 beyond.
pub fn binary_density(k: u32) -> f64 {
    (TARGET_MEAN_COUNT / k.max(1) as f64).sqrt().min(0.5)
}

/// `len` values from {0, 1}, each 1 with probability `p`, reproducible from `seed`.
pub fn fill_binary(seed: u64, len: usize, p: f64) -> Vec<f16> {
    let (threshold, all_ones) = binary_threshold(p);
    let parts = par_chunks(len, |range| {
        range
            .map(|i| {
                let one = all_ones || splitmix_at(seed, i as u64) < threshold;
                if one { f16::ONE } else { f16::ZERO }
            })
            .collect::<Vec<f16>>()
    });
    parts.concat()
}

/// Value `i` is 1 when `all_ones` or `splitmix_at(seed, i) < threshold`: comparing the
/// raw 64 bits against p·2^64 is exact and needs no float per element (the GPU's
/// generator uses the same rule).
pub fn binary_threshold(p: f64) -> (u64, bool) {
    let threshold = if p.is_nan() || p <= 0.0 {
        0
    } else if p >= 1.0 {
        u64::MAX
    } else {
        (p * 2f64.powi(64)) as u64
    };
    (threshold, p >= 1.0)
}

/// `len` values uniform in `[lo, hi)`, reproducible from `seed`: the inputs of the
/// deviation test. Computed in f64, rounded to fp32 and then to fp16 (each to nearest
/// even): `half`'s f64 → fp16 conversion differs between CPUs (through fp32 with F16C,
/// truncating without), the fp32 one does not, and the GPU's generator does the same.
pub fn fill_uniform(seed: u64, len: usize, lo: f32, hi: f32) -> Vec<f16> {
    let parts = par_chunks(len, |range| {
        range
            .map(|i| f16::from_f32((lo as f64 + (hi - lo) as f64 * super::rng::unit_at(seed, i as u64)) as f32))
            .collect::<Vec<f16>>()
    });
    parts.concat()
}

/// Seeds for A and B of one test, so both come from one recorded seed.
pub fn operand_seeds(seed: u64) -> (u64, u64) {
    (derive_seed(seed, 0xA), derive_seed(seed, 0xB))
}

/// One wrong output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mismatch {
    pub row: u32,
    pub col: u32,
    pub expected: u32,
    pub got: f32,
}

/// What the exact comparison found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExactReport {
    /// Outputs compared.
    pub checked: u64,
    /// Outputs whose count is above [`EXACT_LIMIT`], where rounding makes them inexact.
    pub over_limit: u64,
    pub mismatches: u64,
    /// The first wrong output in row-major order.
    pub first_mismatch: Option<Mismatch>,
}

impl ExactReport {
    pub fn passed(&self) -> bool {
        self.mismatches == 0
    }

    fn merge(mut self, other: ExactReport) -> ExactReport {
        self.checked += other.checked;
        self.over_limit += other.over_limit;
        self.mismatches += other.mismatches;
        self.first_mismatch = self.first_mismatch.or(other.first_mismatch);
        self
    }
}

/// Exact counts for binary A and B: rows of A and columns of B packed as bitsets
/// along K, so one output is `Σ popcount(a_row & b_col)` over K/64 words.
#[derive(Debug, Clone)]
pub struct BinaryReference {
    m: usize,
    n: usize,
    words: usize,
    a_rows: Vec<u64>,
    b_cols: Vec<u64>,
}

impl BinaryReference {
    /// `a` is row-major M×K; `b` is K×N row-major (`nn`) or N×K row-major (`tn`).
    pub fn new(shape: Shape, layout: Layout, a: &[f16], b: &[f16]) -> Result<Self, VerifyError> {
        let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
        expect_len("A", a.len(), m * k)?;
        expect_len("B", b.len(), k * n)?;
        let words = k.div_ceil(64);
        let a_rows = pack_rows(a, m, k, "A")?;
        let b_cols = match layout {
            // Stored N×K: the columns of B are already rows.
            Layout::Tn => pack_rows(b, n, k, "B")?,
            Layout::Nn => {
                let mut cols = vec![0u64; n * words];
                for kk in 0..k {
                    let (w, bit) = (kk / 64, kk % 64);
                    for (j, &v) in b[kk * n..(kk + 1) * n].iter().enumerate() {
                        if is_one(v, "B", kk * n + j)? {
                            cols[j * words + w] |= 1 << bit;
                        }
                    }
                }
                cols
            }
        };
        Ok(BinaryReference { m, n, words, a_rows, b_cols })
    }

    /// The exact value of output `(row, col)`.
    pub fn count(&self, row: usize, col: usize) -> u32 {
        let a = &self.a_rows[row * self.words..(row + 1) * self.words];
        let b = &self.b_cols[col * self.words..(col + 1) * self.words];
        a.iter().zip(b).map(|(x, y)| (x & y).count_ones()).sum()
    }

    /// Compares every output of `c` (row-major M×N) with the exact counts: the host
    /// model of the GPU's comparison (`gpu::checks::compare_exact`).
    pub fn check(&self, c: &[f16]) -> Result<ExactReport, VerifyError> {
        expect_len("C", c.len(), self.m * self.n)?;
        let reports = par_chunks(self.m, |rows| {
            let mut report = ExactReport::default();
            for row in rows {
                for col in 0..self.n {
                    self.check_one(c, row, col, &mut report);
                }
            }
            report
        });
        Ok(reports.into_iter().fold(ExactReport::default(), ExactReport::merge))
    }

    fn check_one(&self, c: &[f16], row: usize, col: usize, report: &mut ExactReport) {
        let expected = self.count(row, col);
        if expected > EXACT_LIMIT {
            report.over_limit += 1;
            return;
        }
        report.checked += 1;
        let got = c[row * self.n + col].to_f32();
        // NaN compares unequal, so an unwritten or NaN output is a mismatch too.
        if got != expected as f32 {
            report.mismatches += 1;
            if report.first_mismatch.is_none() {
                report.first_mismatch = Some(Mismatch { row: row as u32, col: col as u32, expected, got });
            }
        }
    }
}

fn is_one(v: f16, operand: &'static str, index: usize) -> Result<bool, VerifyError> {
    // ±0 and 1 only; anything else means the harness filled the wrong buffer.
    match v.to_bits() {
        0x0000 | 0x8000 => Ok(false),
        0x3C00 => Ok(true),
        _ => Err(VerifyError::NotBinary { operand, index, value: v.to_f32() }),
    }
}

fn pack_rows(x: &[f16], rows: usize, k: usize, operand: &'static str) -> Result<Vec<u64>, VerifyError> {
    let words = k.div_ceil(64);
    let parts = par_chunks(rows, |range| -> Result<Vec<u64>, VerifyError> {
        let mut out = vec![0u64; range.len() * words];
        for (local, r) in range.enumerate() {
            for (kk, &v) in x[r * k..(r + 1) * k].iter().enumerate() {
                if is_one(v, operand, r * k + kk)? {
                    out[local * words + kk / 64] |= 1 << (kk % 64);
                }
            }
        }
        Ok(out)
    });
    let mut out = Vec::with_capacity(rows * words);
    for p in parts {
        out.extend(p?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(m: u32, n: u32, k: u32) -> Shape {
        Shape::new(m, n, k).expect("valid test shape")
    }

    /// The schoolbook product, for checking the bitset reference.
    fn naive(s: Shape, layout: Layout, a: &[f16], b: &[f16]) -> Vec<f16> {
        let (m, n, k) = (s.m as usize, s.n as usize, s.k as usize);
        let mut c = vec![f16::ZERO; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0f32;
                for kk in 0..k {
                    let bv = match layout {
                        Layout::Nn => b[kk * n + j],
                        Layout::Tn => b[j * k + kk],
                    };
                    acc += a[i * k + kk].to_f32() * bv.to_f32();
                }
                c[i * n + j] = f16::from_f32(acc);
            }
        }
        c
    }

    fn case(s: Shape, layout: Layout, seed: u64) -> (BinaryReference, Vec<f16>) {
        let p = binary_density(s.k);
        let (sa, sb) = operand_seeds(seed);
        let a = fill_binary(sa, (s.m * s.k) as usize, p);
        let b = fill_binary(sb, (s.k * s.n) as usize, p);
        let reference = BinaryReference::new(s, layout, &a, &b).expect("binary inputs");
        (reference, naive(s, layout, &a, &b))
    }

    #[test]
    fn density_keeps_counts_under_the_exact_limit() {
        assert_eq!(binary_density(64), 0.5);
        assert_eq!(binary_density(6144), 0.5);
        for k in [8192u32, 16384, 65536] {
            let p = binary_density(k);
            assert!((k as f64 * p * p - TARGET_MEAN_COUNT).abs() < 1e-6);
        }
        // Empirically at K = 16384 no output of a 32×32 product exceeds the limit.
        let (r, _) = case(shape(32, 32, 16384), Layout::Tn, 9);
        let counts: Vec<u32> = (0..32).flat_map(|i| (0..32).map(move |j| (i, j))).map(|(i, j)| r.count(i, j)).collect();
        assert!(counts.iter().all(|&c| c <= EXACT_LIMIT && c > 1200), "{:?}", counts.iter().max());
    }

    #[test]
    fn fills_are_reproducible_and_have_the_asked_density() {
        let a = fill_binary(42, 100_000, 0.3);
        assert_eq!(a, fill_binary(42, 100_000, 0.3));
        assert_ne!(a, fill_binary(43, 100_000, 0.3));
        let ones = a.iter().filter(|v| **v == f16::ONE).count() as f64 / 1e5;
        assert!((ones - 0.3).abs() < 0.01, "{ones}");
        assert!(fill_binary(1, 100, 1.0).iter().all(|v| *v == f16::ONE));
        assert!(fill_binary(1, 100, 0.0).iter().all(|v| *v == f16::ZERO));
        let u = fill_uniform(5, 10_000, -1.0, 1.0);
        assert!(u.iter().all(|v| (-1.0..=1.0).contains(&v.to_f32())));
        assert!(u.iter().any(|v| v.to_f32() < -0.9) && u.iter().any(|v| v.to_f32() > 0.9));
    }

    #[test]
    fn the_bitset_reference_equals_the_schoolbook_product_in_both_layouts() {
        for layout in [Layout::Nn, Layout::Tn] {
            // K of 130 spans a partial last word.
            let s = shape(19, 23, 130);
            let (r, c) = case(s, layout, 1);
            let report = r.check(&c).expect("consistent sizes");
            assert!(report.passed(), "{layout:?}: {report:?}");
            assert_eq!(report.checked, 19 * 23);
        }
    }

    #[test]
    fn a_single_flipped_output_is_caught_and_located() {
        let s = shape(64, 48, 256);
        let (r, mut c) = case(s, Layout::Nn, 2);
        let idx = 37 * 48 + 5;
        c[idx] = f16::from_f32(c[idx].to_f32() + 1.0);
        let report = r.check(&c).expect("consistent sizes");
        assert_eq!(report.mismatches, 1);
        let m = report.first_mismatch.expect("a mismatch");
        assert_eq!((m.row, m.col), (37, 5));
        assert_eq!(m.got, m.expected as f32 + 1.0);
    }

    #[test]
    fn unwritten_nan_outputs_are_mismatches() {
        let s = shape(8, 8, 64);
        let (r, mut c) = case(s, Layout::Tn, 3);
        c[63] = f16::NAN;
        assert_eq!(r.check(&c).expect("sizes").mismatches, 1);
    }

    #[test]
    fn non_binary_inputs_and_wrong_lengths_are_harness_errors() {
        let s = shape(2, 2, 2);
        let ones = vec![f16::ONE; 4];
        let mut bad = ones.clone();
        bad[3] = f16::from_f32(0.5);
        assert!(matches!(BinaryReference::new(s, Layout::Nn, &ones, &bad), Err(VerifyError::NotBinary { operand: "B", index: 3, .. })));
        assert!(matches!(BinaryReference::new(s, Layout::Nn, &ones[..3], &ones), Err(VerifyError::Length { .. })));
        let r = BinaryReference::new(s, Layout::Nn, &ones, &ones).expect("binary");
        assert!(r.check(&ones[..2]).is_err());
    }
}
