//! The baseline-bounded deviation test: on random inputs, a candidate may stray from
//! the fp32 reference no further than NVIDIA's own kernels do (plus a half-ulp
//! slack, see [`DeviationBound`]). This is also what catches a kernel that claims
//! `acc = f32` but accumulates in fp16: its error grows with K, the baselines' does not.

use half::f16;
use serde::{Deserialize, Serialize};

use super::{VerifyError, expect_len, par_chunks};
use crate::problem::{Layout, Shape};

/// The largest elementwise deviation and where it is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Deviation {
    pub max_abs: f64,
    /// Row-major index into C of the largest deviation (the first, on ties).
    pub index: usize,
}

/// `max |candidate - reference|` over all elements. A NaN or Inf in the candidate
/// counts as an infinite deviation, so it can never pass the bound.
pub fn max_abs_deviation(candidate: &[f16], reference: &[f32]) -> Result<Deviation, VerifyError> {
    expect_len("candidate", candidate.len(), reference.len())?;
    let parts = par_chunks(candidate.len(), |range| {
        let mut best = Deviation { max_abs: 0.0, index: range.start };
        for i in range {
            let d = abs_diff(candidate[i], reference[i]);
            if d > best.max_abs {
                best = Deviation { max_abs: d, index: i };
            }
        }
        best
    });
    Ok(parts.into_iter().fold(Deviation { max_abs: 0.0, index: 0 }, |a, b| if b.max_abs > a.max_abs { b } else { a }))
}

fn abs_diff(c: f16, r: f32) -> f64 {
    let d = (c.to_f64() - r as f64).abs();
    if d.is_finite() { d } else { f64::INFINITY }
}

/// Error norms for reporting (the verdict uses only the max deviation).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ErrorNorms {
    pub max_abs: f64,
    pub max_abs_index: usize,
    pub mean_abs: f64,
    /// `‖c − r‖₂ / ‖r‖₂`.
    pub rel_l2: f64,
    /// `max|c − r| / max|r|`.
    pub rel_max: f64,
}

pub fn error_norms(candidate: &[f16], reference: &[f32]) -> Result<ErrorNorms, VerifyError> {
    let dev = max_abs_deviation(candidate, reference)?;
    let sums = par_chunks(candidate.len(), |range| {
        let (mut abs, mut d2, mut r2, mut rmax) = (0f64, 0f64, 0f64, 0f64);
        for i in range {
            let d = abs_diff(candidate[i], reference[i]);
            let r = reference[i] as f64;
            abs += d;
            d2 += d * d;
            r2 += r * r;
            rmax = rmax.max(r.abs());
        }
        (abs, d2, r2, rmax)
    });
    let (abs, d2, r2, rmax) = sums.into_iter().fold((0f64, 0f64, 0f64, 0f64), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2, a.3.max(b.3)));
    let ratio = |num: f64, den: f64| if num == 0.0 { 0.0 } else if den == 0.0 { f64::INFINITY } else { num / den };
    Ok(ErrorNorms {
        max_abs: dev.max_abs,
        max_abs_index: dev.index,
        mean_abs: if candidate.is_empty() { 0.0 } else { abs / candidate.len() as f64 },
        rel_l2: ratio(d2.sqrt(), r2.sqrt()),
        rel_max: ratio(dev.max_abs, rmax),
    })
}

/// Largest `|x|` in a reference, for the bound's slack.
pub fn max_abs(reference: &[f32]) -> f64 {
    reference.iter().fold(0f64, |m, &r| m.max((r as f64).abs()))
}

/// The spacing of fp16 values at magnitude `x`: `2^(e−10)` in the binade `[2^e, 2^(e+1))`,
/// `2^−24` among subnormals, 32 at the top of the range.
pub fn ulp_f16(x: f64) -> f64 {
    let x = x.abs();
    if !x.is_finite() {
        return 32.0;
    }
    if x < 2f64.powi(-14) {
        return 2f64.powi(-24);
    }
    let e = x.log2().floor().min(15.0);
    2f64.powf(e - 10.0)
}

/// The pass line of the deviation test.
///
/// `bound = max over baselines of their max deviation + ½·ulp_f16(max |reference|)`.
///
/// Why the slack: every kernel ends by rounding to fp16, which alone moves an output up
/// to half an ulp. Over millions of outputs the baselines almost surely hit that worst
/// case at the largest magnitudes, but over a small C (64×64) they may not, and a
/// correct kernel that sums in another order can land on the other side of a rounding
/// boundary. Half an ulp at the largest |reference| covers exactly that one rounding
/// step. It stays far below the error of fp16 accumulation for any K worth
/// distinguishing (that error grows like √K ulps of the partial sums).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeviationBound {
    pub baseline_max: f64,
    pub slack: f64,
    pub bound: f64,
}

impl DeviationBound {
    /// `baseline_deviations`: each baseline's max deviation from the same reference.
    pub fn new(baseline_deviations: &[f64], max_abs_reference: f64) -> Result<Self, VerifyError> {
        if baseline_deviations.is_empty() {
            return Err(VerifyError::Invalid("the deviation bound needs at least one baseline".into()));
        }
        if let Some(d) = baseline_deviations.iter().find(|d| !d.is_finite() || **d < 0.0) {
            return Err(VerifyError::Invalid(format!("a baseline deviates by {d}; the baselines or the reference are broken")));
        }
        if !max_abs_reference.is_finite() {
            return Err(VerifyError::Invalid("the fp32 reference is not finite".into()));
        }
        let baseline_max = baseline_deviations.iter().copied().fold(0.0, f64::max);
        let slack = 0.5 * ulp_f16(max_abs_reference);
        Ok(DeviationBound { baseline_max, slack, bound: baseline_max + slack })
    }

    pub fn admits(&self, deviation: f64) -> bool {
        deviation <= self.bound
    }
}

/// An fp32 GEMM on the CPU: products of the fp16 inputs (exact in f32) summed in f64,
/// rounded once to f32. For small shapes and for sampled elements of large ones; the
/// GPU layer may produce the full reference faster.
#[derive(Debug, Clone)]
pub struct CpuReference {
    m: usize,
    n: usize,
    k: usize,
    a: Vec<f32>,
    /// B as N×K row-major whatever the layout, so each output is two contiguous rows.
    b_t: Vec<f32>,
}

impl CpuReference {
    pub fn new(shape: Shape, layout: Layout, a: &[f16], b: &[f16]) -> Result<Self, VerifyError> {
        let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
        expect_len("A", a.len(), m * k)?;
        expect_len("B", b.len(), k * n)?;
        let a = a.iter().map(|v| v.to_f32()).collect();
        let b_t = match layout {
            Layout::Tn => b.iter().map(|v| v.to_f32()).collect(),
            Layout::Nn => {
                let mut t = vec![0f32; n * k];
                for kk in 0..k {
                    for j in 0..n {
                        t[j * k + kk] = b[kk * n + j].to_f32();
                    }
                }
                t
            }
        };
        Ok(CpuReference { m, n, k, a, b_t })
    }

    /// The reference at row-major index `index` of C (`index < M·N`).
    pub fn at(&self, index: usize) -> f32 {
        let (i, j) = (index / self.n, index % self.n);
        let a = &self.a[i * self.k..(i + 1) * self.k];
        let b = &self.b_t[j * self.k..(j + 1) * self.k];
        a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum::<f64>() as f32
    }

    /// The whole M×N reference.
    pub fn full(&self) -> Vec<f32> {
        par_chunks(self.m * self.n, |range| range.map(|i| self.at(i)).collect::<Vec<f32>>()).concat()
    }

    /// The reference at the given row-major indices of C.
    pub fn at_indices(&self, indices: &[usize]) -> Result<Vec<f32>, VerifyError> {
        if let Some(&bad) = indices.iter().find(|&&i| i >= self.m * self.n) {
            return Err(VerifyError::Invalid(format!("index {bad} is outside C ({}×{})", self.m, self.n)));
        }
        Ok(par_chunks(indices.len(), |range| range.map(|i| self.at(indices[i])).collect::<Vec<f32>>()).concat())
    }
}

/// The host model of the fp16 FMA chain (`acc = f16`): output `index` (row-major) as
/// one accumulator per output computes it, each product added and rounded to fp16 in K
/// order. The GPU computes the same chain for the bound (`checks.cu`); the GPU tests
/// compare the two.
pub fn fp16_chain_at(shape: Shape, layout: Layout, a: &[f16], b: &[f16], indices: &[usize]) -> Vec<f16> {
    let (n, k) = (shape.n as usize, shape.k as usize);
    let b_at = |kk: usize, j: usize| match layout {
        Layout::Nn => b[kk * n + j],
        Layout::Tn => b[j * k + kk],
    };
    par_chunks(indices.len(), |range| {
        range
            .map(|s| {
                let (i, j) = (indices[s] / n, indices[s] % n);
                let mut acc = f16::ZERO;
                for kk in 0..k {
                    // The product of two fp16 values is exact in f64; the sum is rounded to
                    // fp32, then to fp16 (see `fill_uniform` for why through fp32).
                    acc = f16::from_f32((acc.to_f64() + a[i * k + kk].to_f64() * b_at(kk, j).to_f64()) as f32);
                }
                acc
            })
            .collect::<Vec<f16>>()
    })
    .concat()
}

#[cfg(test)]
mod tests {
    use super::super::binary::fill_uniform;
    use super::*;

    fn shape(m: u32, n: u32, k: u32) -> Shape {
        Shape::new(m, n, k).expect("valid test shape")
    }

    /// A GEMM that accumulates in `f16`, rounding after every step, as a cheating
    /// kernel would.
    fn fp16_accumulate(r: &CpuReference) -> Vec<f16> {
        (0..r.m * r.n)
            .map(|idx| {
                let (i, j) = (idx / r.n, idx % r.n);
                let mut acc = f16::ZERO;
                for kk in 0..r.k {
                    acc = f16::from_f32(acc.to_f32() + r.a[i * r.k + kk] * r.b_t[j * r.k + kk]);
                }
                acc
            })
            .collect()
    }

    fn round_to_f16(reference: &[f32]) -> Vec<f16> {
        reference.iter().map(|&r| f16::from_f32(r)).collect()
    }

    #[test]
    fn ulp_follows_the_fp16_binades() {
        assert_eq!(ulp_f16(1.0), 2f64.powi(-10));
        assert_eq!(ulp_f16(1.999), 2f64.powi(-10));
        assert_eq!(ulp_f16(-2.0), 2f64.powi(-9));
        assert_eq!(ulp_f16(2048.0), 2.0);
        assert_eq!(ulp_f16(1e-6), 2f64.powi(-24));
        assert_eq!(ulp_f16(65504.0), 32.0);
        assert_eq!(ulp_f16(1e9), 32.0);
    }

    #[test]
    fn max_deviation_finds_the_worst_element_and_treats_nan_as_infinite() {
        let reference = [1.0f32, 2.0, 3.0, 4.0];
        let mut c = round_to_f16(&reference);
        c[2] = f16::from_f32(3.5);
        assert_eq!(max_abs_deviation(&c, &reference).unwrap(), Deviation { max_abs: 0.5, index: 2 });
        c[1] = f16::NAN;
        assert_eq!(max_abs_deviation(&c, &reference).unwrap().max_abs, f64::INFINITY);
        assert!(max_abs_deviation(&c[..3], &reference).is_err());
    }

    #[test]
    fn the_bound_is_the_worst_baseline_plus_half_an_ulp() {
        let b = DeviationBound::new(&[0.01, 0.03, 0.02], 100.0).unwrap();
        assert_eq!(b.baseline_max, 0.03);
        assert_eq!(b.slack, 0.5 * 2f64.powi(6 - 10));
        assert!(b.admits(b.bound) && !b.admits(b.bound + 1e-9));
        assert!(DeviationBound::new(&[], 1.0).is_err());
        assert!(DeviationBound::new(&[f64::NAN], 1.0).is_err());
    }

    #[test]
    fn a_correctly_rounded_kernel_passes_and_fp16_accumulation_fails() {
        let s = shape(64, 64, 2048);
        let a = fill_uniform(1, (s.m * s.k) as usize, -1.0, 1.0);
        let b = fill_uniform(2, (s.k * s.n) as usize, -1.0, 1.0);
        let r = CpuReference::new(s, Layout::Tn, &a, &b).unwrap();
        let reference = r.full();
        // The "baseline": fp32 accumulation, rounded once.
        let baseline = round_to_f16(&reference);
        let base_dev = max_abs_deviation(&baseline, &reference).unwrap().max_abs;
        let bound = DeviationBound::new(&[base_dev], max_abs(&reference)).unwrap();

        // Another correct kernel: a different summation order (two halves of K).
        let half = (s.k / 2) as usize;
        let split: Vec<f16> = (0..reference.len())
            .map(|idx| {
                let (i, j) = (idx / 64, idx % 64);
                let part = |range: std::ops::Range<usize>| -> f32 { range.map(|kk| r.a[i * r.k + kk] * r.b_t[j * r.k + kk]).sum() };
                f16::from_f32(part(0..half) + part(half..r.k))
            })
            .collect();
        let split_dev = max_abs_deviation(&split, &reference).unwrap().max_abs;
        assert!(bound.admits(split_dev), "split-K {split_dev} vs {bound:?}");

        let cheat_dev = max_abs_deviation(&fp16_accumulate(&r), &reference).unwrap().max_abs;
        assert!(!bound.admits(cheat_dev), "fp16 accumulation {cheat_dev} passed {bound:?}");

        let norms = error_norms(&baseline, &reference).unwrap();
        assert!(norms.rel_l2 > 0.0 && norms.rel_l2 < 1e-3, "{norms:?}");
        assert_eq!(norms.max_abs, base_dev);
    }

    #[test]
    fn the_cpu_reference_agrees_across_layouts_and_sampled_indices() {
        let s = shape(5, 7, 33);
        let a = fill_uniform(3, 5 * 33, -1.0, 1.0);
        let b_nn = fill_uniform(4, 33 * 7, -1.0, 1.0);
        // The same matrix B stored N×K.
        let mut b_tn = vec![f16::ZERO; 33 * 7];
        for kk in 0..33 {
            for j in 0..7 {
                b_tn[j * 33 + kk] = b_nn[kk * 7 + j];
            }
        }
        let nn = CpuReference::new(s, Layout::Nn, &a, &b_nn).unwrap();
        let tn = CpuReference::new(s, Layout::Tn, &a, &b_tn).unwrap();
        assert_eq!(nn.full(), tn.full());
        let expected: f64 = (0..33).map(|kk| a[2 * 33 + kk].to_f64() * b_nn[kk * 7 + 3].to_f64()).sum();
        assert_eq!(nn.at(2 * 7 + 3), expected as f32);
        assert_eq!(nn.at_indices(&[17, 0]).unwrap(), vec![nn.at(17), nn.at(0)]);
        assert!(nn.at_indices(&[35]).is_err());
    }

    #[test]
    fn the_fp16_chain_rounds_every_step() {
        // 1 + 2^-11 (half an ulp at 1) added 4 times: each step rounds back to 1 (ties to
        // even), where an exact sum gives 1 + 2^-9.
        let tiny = f16::from_f64(2f64.powi(-11));
        let a = vec![f16::ONE, tiny, tiny, tiny, tiny];
        let b = vec![f16::ONE; 5];
        let s = Shape::new(1, 1, 5).expect("shape");
        assert_eq!(fp16_chain_at(s, Layout::Tn, &a, &b, &[0]), vec![f16::ONE]);
        assert_eq!(fp16_chain_at(s, Layout::Nn, &a, &b, &[0]), vec![f16::ONE]);
    }
}
