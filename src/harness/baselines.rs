//! The baseline contenders of a benchmark: cuBLAS, cuBLASLt heuristic top-1 and
//! cuBLASLt autotuned, each in NN and TN, bound to rotations of buffer sets filled from
//! one random pool; and the 1,000-shape grid. `kaas baselines` (`crate::cli::baselines`)
//! times them into a baseline table; the worker's benchmark (`crate::harness::bench`)
//! times them beside a candidate.
//!
//! Inputs are uniform random fp16 in [-1, 1], copied on the device from one random pool
//! at a different offset per buffer (generating every buffer on the host would cost more
//! than timing it).

use super::autotune::AutotuneChoice;
use super::runner::Library;
use crate::gpu::{Contender, CublasGemm, DeviceBuffer, Gpu, GpuError, LtGemm, Operands};
use crate::problem::{Acc, Layout, Problem, Shape};

/// M, N and K of the 1,000-shape grid (CUDA-L2's).
pub const GRID_DIMS: [u32; 10] = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384];

/// The 1,000 shapes, M outermost, K innermost.
pub fn grid_shapes() -> Vec<Shape> {
    let mut out = Vec::with_capacity(1000);
    for m in GRID_DIMS {
        for n in GRID_DIMS {
            for k in GRID_DIMS {
                out.push(Shape { m, n, k });
            }
        }
    }
    out
}

/// Random fp16 values in [-1, 1] on the device, copied into buffers at offsets.
pub(crate) struct Pool {
    buf: DeviceBuffer,
    elems: usize,
}

impl Pool {
    /// `elems` values uniform in [-1, 1), generated on the device from `seed`.
    pub(crate) fn new(gpu: &Gpu, elems: usize, seed: u64) -> Result<Pool, GpuError> {
        let elems = elems.max(1);
        let buf = gpu.alloc(elems * 2)?;
        crate::gpu::checks::fill_uniform(gpu, &buf, elems, seed, -1.0, 1.0)?;
        gpu.synchronize()?;
        Ok(Pool { buf, elems })
    }

    /// Fills the first `elems` values of `dst` from the pool starting at `offset`,
    /// wrapping around its end.
    fn fill(&self, gpu: &Gpu, dst: &DeviceBuffer, elems: usize, offset: usize) -> Result<(), GpuError> {
        let mut done = 0;
        let mut at = offset % self.elems;
        while done < elems {
            let n = (elems - done).min(self.elems - at);
            dst.copy_range(gpu, done * 2, &self.buf, at * 2, n * 2)?;
            done += n;
            at = 0;
        }
        Ok(())
    }
}

/// The buffers of one problem over `sets` buffer sets, inputs filled from the pool.
pub(crate) fn operand_sets(gpu: &Gpu, pool: &Pool, p: &Problem, sets: usize, salt: usize) -> Result<Vec<Operands>, GpuError> {
    operand_sets_with(gpu, pool, p, 0, sets, salt)
}

/// [`operand_sets`] with `workspace_bytes` of workspace per set. All sets live in one
/// allocation (an L2-cold rotation over a small problem needs thousands of sets), each
/// buffer at a 256-byte boundary, as `cudaMalloc` would place it.
pub(crate) fn operand_sets_with(gpu: &Gpu, pool: &Pool, p: &Problem, workspace_bytes: u64, sets: usize, salt: usize) -> Result<Vec<Operands>, GpuError> {
    let (a, b) = ((p.m as usize) * (p.k as usize), (p.k as usize) * (p.n as usize));
    let c = (p.m as usize) * (p.n as usize);
    let ws = usize::try_from(workspace_bytes).map_err(|_| GpuError::refused("operand sets", format!("workspace of {workspace_bytes} bytes")))?;
    let up = |bytes: usize| bytes.div_ceil(256) * 256;
    let stride = up(a * 2) + up(b * 2) + up(c * 2) + up(ws);
    let sets = sets.max(1);
    let arena = gpu.alloc(stride * sets)?;
    (0..sets)
        .map(|s| {
            let at = s * stride;
            let (a_at, b_at) = (at, at + up(a * 2));
            let c_at = b_at + up(b * 2);
            let w_at = c_at + up(c * 2);
            let workspace = if ws > 0 {
                let w = arena.view(w_at, ws)?;
                w.zero(gpu)?;
                Some(w)
            } else {
                None
            };
            let ops = Operands::from_buffers(p, arena.view(a_at, a * 2)?, arena.view(b_at, b * 2)?, arena.view(c_at, c * 2)?, workspace)?;
            // Distinct, unaligned windows of the pool for every buffer.
            let base = (salt * 2 * sets + 2 * s) * 1_000_003;
            pool.fill(gpu, &ops.a, a, base)?;
            pool.fill(gpu, &ops.b, b, base + 1_000_003 + a / 3)?;
            ops.poison_c(gpu)?;
            Ok(ops)
        })
        .collect()
}

/// Bytes one buffer set of `p` takes in [`operand_sets_with`].
pub(crate) fn set_bytes(p: &Problem, workspace_bytes: u64) -> u64 {
    let up = |bytes: u64| bytes.div_ceil(256) * 256;
    let (m, n, k) = (p.m as u64, p.n as u64, p.k as u64);
    up(2 * m * k) + up(2 * k * n) + up(2 * m * n) + up(workspace_bytes)
}

/// A baseline's `config`: what re-creates the call.
fn blas_config(p: &Problem) -> serde_json::Value {
    let g = crate::gpu::column_major_mapping(p);
    serde_json::json!({
        "api": "cublasGemmEx",
        "algo": "CUBLAS_GEMM_DEFAULT",
        "compute_type": compute_type(p.acc),
        "scale_type": scale_type(p.acc),
        "abc_type": "CUDA_R_16F",
        "column_major": { "transa": format!("{:?}", g.transa), "transb": format!("{:?}", g.transb), "m": g.m, "n": g.n, "k": g.k, "lda": g.lda, "ldb": g.ldb, "ldc": g.ldc },
    })
}

fn compute_type(acc: Acc) -> &'static str {
    match acc {
        Acc::F16 => "CUBLAS_COMPUTE_16F",
        Acc::F32 => "CUBLAS_COMPUTE_32F",
    }
}

fn scale_type(acc: Acc) -> &'static str {
    match acc {
        Acc::F16 => "CUDA_R_16F",
        Acc::F32 => "CUDA_R_32F",
    }
}

fn lt_config(p: &Problem, lt: &LtGemm, autotune: Option<&AutotuneChoice>) -> Result<serde_json::Value, GpuError> {
    let mut v = serde_json::json!({
        "api": "cublasLtMatmul",
        "compute_type": compute_type(p.acc),
        "scale_type": scale_type(p.acc),
        "abcd_type": "CUDA_R_16F",
        "workspace_limit_bytes": crate::gpu::CUBLASLT_WORKSPACE_BYTES,
        "algo": serde_json::to_value(lt.config()?).unwrap_or_default(),
    });
    if let (Some(a), Some(map)) = (autotune, v.as_object_mut()) {
        map.insert(
            "autotune".into(),
            serde_json::json!({
                "candidates_offered": a.candidates_offered,
                "candidates_timed": a.candidates_timed,
                "final_median_us": a.median_us,
                "heuristic_top1_final_median_us": a.heuristic_top1_median_us,
            }),
        );
    }
    Ok(v)
}

/// The six baseline contenders of one shape, in the order of [`SLOTS`].
pub(crate) const SLOTS: [(Library, Layout); 6] = [
    (Library::Cublas, Layout::Nn),
    (Library::Cublas, Layout::Tn),
    (Library::CublasltHeuristic, Layout::Nn),
    (Library::CublasltHeuristic, Layout::Tn),
    (Library::CublasltAutotune, Layout::Nn),
    (Library::CublasltAutotune, Layout::Tn),
];

/// The six baseline contenders of one shape (see [`SLOTS`]), each bound to every buffer
/// set of its layout: cuBLAS, cuBLASLt heuristic top-1 and cuBLASLt autotuned (found by
/// `autotuned` on the first set), in NN and TN.
pub(crate) struct SixBaselines<'a> {
    /// Per layout (NN, TN), per buffer set.
    blas: Vec<Vec<CublasGemm<'a>>>,
    heur: Vec<Vec<LtGemm<'a>>>,
    auto: Vec<Vec<LtGemm<'a>>>,
    /// Per layout: the autotune choice and whether it came from a cache.
    pub auto_choice: Vec<(AutotuneChoice, bool)>,
    /// Every autotuned algorithm re-creates from its recorded configuration.
    pub reproduced: bool,
}

/// Finds the autotuned algorithm for a buffer set: its algorithm, the record of the
/// choice, and whether it came from a cache.
pub(crate) type AutotuneFn<'f, 'a> = dyn Fn(&'a Operands) -> Result<(LtGemm<'a>, AutotuneChoice, bool), GpuError> + 'f;

fn layout_index(l: Layout) -> usize {
    if l == Layout::Nn { 0 } else { 1 }
}

impl<'a> SixBaselines<'a> {
    pub(crate) fn build(gpu: &Gpu, nn: &'a [Operands], tn: &'a [Operands], autotuned: &AutotuneFn<'_, 'a>) -> Result<SixBaselines<'a>, GpuError> {
        let mut six = SixBaselines { blas: Vec::new(), heur: Vec::new(), auto: Vec::new(), auto_choice: Vec::new(), reproduced: true };
        for ops in [nn, tn] {
            let first = ops.first().ok_or_else(|| GpuError::refused("baselines", "no buffer set"))?;
            let top1 = LtGemm::top1(gpu, first)?;
            let (tuned, choice, cached) = autotuned(first)?;
            // The record must re-create the algorithm that was timed.
            let again = LtGemm::from_config(gpu, first, &choice.config)?;
            if again.algo_words() != tuned.algo_words() {
                six.reproduced = false;
            }
            six.heur.push(ops.iter().map(|o| top1.with_operands(o)).collect::<Result<Vec<_>, _>>()?);
            six.auto.push(ops.iter().map(|o| tuned.with_operands(o)).collect::<Result<Vec<_>, _>>()?);
            six.blas.push(ops.iter().map(|o| CublasGemm::new(gpu, o)).collect::<Result<Vec<_>, _>>()?);
            six.auto_choice.push((choice, cached));
        }
        Ok(six)
    }

    /// The contender sets for [`runner::benchmark`], in the order of [`SLOTS`].
    pub(crate) fn sets(&self) -> Vec<Vec<&dyn Contender>> {
        SLOTS
            .iter()
            .map(|&(lib, l)| match lib {
                Library::Cublas => self.blas[layout_index(l)].iter().map(|c| c as &dyn Contender).collect(),
                Library::CublasltHeuristic => self.heur[layout_index(l)].iter().map(|c| c as &dyn Contender).collect(),
                Library::CublasltAutotune => self.auto[layout_index(l)].iter().map(|c| c as &dyn Contender).collect(),
            })
            .collect()
    }

    /// What re-creates slot `slot`'s call; `p` is its problem (its own layout).
    pub(crate) fn config(&self, slot: usize, p: &Problem) -> Result<serde_json::Value, GpuError> {
        let (lib, layout) = SLOTS[slot];
        let li = layout_index(layout);
        match lib {
            Library::Cublas => Ok(blas_config(p)),
            Library::CublasltHeuristic => lt_config(p, &self.heur[li][0], None),
            Library::CublasltAutotune => lt_config(p, &self.auto[li][0], Some(&self.auto_choice[li].0)),
        }
    }
}


#[cfg(test)]
mod tests {
    use super::*;


    #[test]
    fn the_grid_has_a_thousand_distinct_shapes_of_the_ten_sizes() {
        let g = grid_shapes();
        assert_eq!(g.len(), 1000);
        let distinct: std::collections::BTreeSet<_> = g.iter().collect();
        assert_eq!(distinct.len(), 1000);
        assert!(g.iter().all(|s| [s.m, s.n, s.k].iter().all(|d| GRID_DIMS.contains(d))));
        // The brief's estimate: one pass over the grid is about 1.8e14 FLOP.
        let total: f64 = g.iter().map(Shape::flops).sum();
        assert!((total / 1.82e14 - 1.0).abs() < 0.01, "{total:e}");
    }
}
