//! Host-side spot checks of a reference product computed on the GPU. The verifier's
//! references (exact counts for the binary test, the fp32 product for the deviation
//! test) come from cuBLAS on the device; before a verdict rests on one, a few of its
//! outputs are recomputed here from the same rows of A and columns of B, read back from
//! the device. A wrong layout, a wrong leading dimension or a library fault shows up as
//! a disagreement and becomes an internal error, never a verdict against the kernel.

use half::f16;

use super::rng::SplitMix64;
use crate::problem::Shape;

/// Outputs a spot check recomputes: the four corners and `random` more.
pub fn spot_cells(shape: Shape, seed: u64, random: usize) -> Vec<(u32, u32)> {
    let (m, n) = (shape.m, shape.n);
    let mut rng = SplitMix64::new(seed);
    let mut cells = vec![(0, 0), (0, n - 1), (m - 1, 0), (m - 1, n - 1)];
    cells.extend((0..random).map(|_| (rng.below(m as u64) as u32, rng.below(n as u64) as u32)));
    cells.sort_unstable();
    cells.dedup();
    cells
}

/// Which reference is being checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferenceKind {
    /// Exact counts of {0,1} products: must equal the host's count exactly.
    Counts,
    /// An fp32 product: within the worst-case error of fp32 summation in any order.
    Fp32,
}

/// Checks one reference output `got` against the host's dot product of `a_row` and
/// `b_col` (both K long). `Err` says how far off it is.
pub fn check_reference(kind: ReferenceKind, a_row: &[f16], b_col: &[f16], got: f32) -> Result<(), String> {
    if a_row.len() != b_col.len() {
        return Err(format!("a row of {} and a column of {} values", a_row.len(), b_col.len()));
    }
    let (mut sum, mut abs_sum) = (0f64, 0f64);
    for (x, y) in a_row.iter().zip(b_col) {
        // A product of two fp16 values is exact in f64; sums of up to 2^16 of them lose
        // at most a few units in the 53rd bit.
        let p = x.to_f64() * y.to_f64();
        sum += p;
        abs_sum += p.abs();
    }
    match kind {
        ReferenceKind::Counts => {
            if got as f64 == sum {
                Ok(())
            } else {
                Err(format!("the count is {sum}, the reference says {got}"))
            }
        }
        ReferenceKind::Fp32 => {
            let tolerance = fp32_sum_error_bound(a_row.len(), abs_sum, sum.abs());
            let off = (got as f64 - sum).abs();
            if off <= tolerance {
                Ok(())
            } else {
                Err(format!("the dot product is {sum:.9}, the reference says {got:.9} ({off:.3e} off; fp32 summation in any order stays within {tolerance:.3e})"))
            }
        }
    }
}

/// The classic bound on fp32 summation of `k` exact products in any order, with or
/// without FMA: `γ_k · Σ|a·b|` with `γ_k = k·u / (1 − k·u)`, `u = 2^-24`, plus the final
/// rounding of the result to fp32.
pub fn fp32_sum_error_bound(k: usize, abs_sum: f64, result: f64) -> f64 {
    let u = 2f64.powi(-24);
    let ku = (k as f64 * u).min(0.5);
    ku / (1.0 - ku) * abs_sum + u * result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(values: &[f32]) -> Vec<f16> {
        values.iter().map(|&x| f16::from_f32(x)).collect()
    }

    #[test]
    fn cells_hold_the_corners_and_stay_inside() {
        let s = Shape::new(7, 5, 3).expect("shape");
        let cells = spot_cells(s, 1, 50);
        for corner in [(0, 0), (0, 4), (6, 0), (6, 4)] {
            assert!(cells.contains(&corner));
        }
        assert!(cells.iter().all(|&(r, c)| r < 7 && c < 5));
        assert!(cells.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(spot_cells(Shape::new(1, 1, 1).expect("shape"), 1, 3), vec![(0, 0)]);
    }

    #[test]
    fn counts_must_be_exact() {
        let a = v(&[1.0, 0.0, 1.0, 1.0]);
        let b = v(&[1.0, 1.0, 1.0, 0.0]);
        assert_eq!(check_reference(ReferenceKind::Counts, &a, &b, 2.0), Ok(()));
        let e = check_reference(ReferenceKind::Counts, &a, &b, 3.0).expect_err("off by one");
        assert!(e.contains("count is 2"), "{e}");
    }

    #[test]
    fn fp32_references_get_the_summation_bound_and_no_more() {
        let k = 4096;
        let a: Vec<f16> = (0..k).map(|i| f16::from_f32(((i * 37 % 101) as f32 - 50.0) / 64.0)).collect();
        let b: Vec<f16> = (0..k).map(|i| f16::from_f32(((i * 53 % 97) as f32 - 48.0) / 64.0)).collect();
        // The same sum accumulated in f32, in order: a real fp32 result.
        let f32_sum = a.iter().zip(&b).fold(0f32, |acc, (x, y)| acc + x.to_f32() * y.to_f32());
        assert_eq!(check_reference(ReferenceKind::Fp32, &a, &b, f32_sum), Ok(()));
        // A transposed or shifted operand gives another number entirely.
        let shifted: Vec<f16> = b[1..].iter().chain(&b[..1]).copied().collect();
        let other = a.iter().zip(&shifted).fold(0f32, |acc, (x, y)| acc + x.to_f32() * y.to_f32());
        assert!(check_reference(ReferenceKind::Fp32, &a, &b, other).is_err());
        // Just past the bound fails.
        let exact: f64 = a.iter().zip(&b).map(|(x, y)| x.to_f64() * y.to_f64()).sum();
        let abs_sum: f64 = a.iter().zip(&b).map(|(x, y)| (x.to_f64() * y.to_f64()).abs()).sum();
        let tolerance = fp32_sum_error_bound(k, abs_sum, exact.abs());
        assert!(check_reference(ReferenceKind::Fp32, &a, &b, (exact + 1.5 * tolerance) as f32).is_err());
        assert_eq!(check_reference(ReferenceKind::Fp32, &a, &b, (exact + 0.5 * tolerance) as f32), Ok(()));
        assert!(check_reference(ReferenceKind::Fp32, &a, &b[1..], 0.0).is_err());
    }
}
