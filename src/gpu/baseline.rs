//! The baselines every candidate is timed against: cuBLAS `cublasGemmEx` (default
//! algorithm) and cuBLASLt (heuristic top-1, or any of its top N for autotuning).
//!
//! cuBLAS is column-major; kaas is row-major. A row-major R×C matrix with leading
//! dimension C is, byte for byte, its column-major transpose (C×R, same leading
//! dimension). So row-major `C = A·B` is column-major `Cᵀ = Bᵀ·Aᵀ`, and we call
//!
//! | cuBLAS | kaas `nn`                       | kaas `tn`                        |
//! |--------|---------------------------------|----------------------------------|
//! | m, n, k| N, M, K                         | N, M, K                          |
//! | A'     | B buffer, op N, lda = N (Bᵀ N×K)| B buffer, op T, lda = K (N×K row-major is K×N col-major) |
//! | B'     | A buffer, op N, ldb = K (Aᵀ K×M)| A buffer, op N, ldb = K          |
//! | C'     | C buffer, ldc = N (Cᵀ N×M)      | C buffer, ldc = N                |
//!
//! so kaas `tn` is cuBLAS "TN" and kaas `nn` is cuBLAS "NN".

use std::rc::Rc;

use super::ffi::{ColumnMajorGemm, Compute, LtAlgo, LtPlan, Op};
use super::operands::{a_len, b_len, c_len};
use super::timing::Contender;
use super::{CUBLASLT_WORKSPACE_BYTES, Gpu, GpuError, Operands, at};
use crate::problem::{Acc, Layout, Problem};

/// The column-major GEMM that computes the problem's row-major `C = A·B` when cuBLAS's
/// A is our B buffer and cuBLAS's B is our A buffer (see the module table).
pub fn column_major_mapping(problem: &Problem) -> ColumnMajorGemm {
    let (m, n, k) = (problem.m as i32, problem.n as i32, problem.k as i32);
    let (transa, lda) = match problem.layout {
        Layout::Nn => (Op::N, n),
        Layout::Tn => (Op::T, k),
    };
    ColumnMajorGemm {
        transa,
        transb: Op::N,
        m: n,
        n: m,
        k,
        lda,
        ldb: k,
        ldc: n,
        compute: match problem.acc {
            Acc::F16 => Compute::F16,
            Acc::F32 => Compute::F32,
        },
    }
}

fn check_sizes(ops: &Operands, stage: &str) -> Result<(), GpuError> {
    let p = ops.problem();
    if ops.a.bytes() < a_len(p) * 2 || ops.b.bytes() < b_len(p) * 2 || ops.c.bytes() < c_len(p) * 2 {
        return Err(GpuError::refused(stage, format!("the buffers are too small for {p}")));
    }
    Ok(())
}

/// `cublasGemmEx` on a problem's buffers.
pub struct CublasGemm<'a> {
    ops: &'a Operands,
    gemm: ColumnMajorGemm,
}

impl<'a> CublasGemm<'a> {
    pub fn new(gpu: &Gpu, ops: &'a Operands) -> Result<CublasGemm<'a>, GpuError> {
        check_sizes(ops, "cuBLAS")?;
        gpu.cublas()?;
        Ok(CublasGemm { ops, gemm: column_major_mapping(ops.problem()) })
    }
}

impl Contender for CublasGemm<'_> {
    fn label(&self) -> String {
        let p = self.ops.problem();
        format!("cuBLAS GemmEx {} {} {}", p.layout, p.acc, p.shape())
    }
    fn enqueue(&self, gpu: &Gpu) -> Result<(), GpuError> {
        gpu.cublas()?
            .gemm_ex(&self.gemm, self.ops.b.memory(), self.ops.a.memory(), self.ops.c.memory())
            .map_err(at(self.label()))
    }
}

/// `cublasLtMatmul` with one algorithm from the heuristic.
pub struct LtGemm<'a> {
    ops: &'a Operands,
    plan: Rc<LtPlan>,
    algo: LtAlgo,
    rank: usize,
}

impl<'a> LtGemm<'a> {
    /// Up to `count` heuristic algorithms, best first (at least one, or an error).
    pub fn heuristics(gpu: &Gpu, ops: &'a Operands, count: usize) -> Result<Vec<LtGemm<'a>>, GpuError> {
        let stage = format!("cuBLASLt heuristics for {}", ops.problem());
        check_sizes(ops, &stage)?;
        let (handle, _) = gpu.cublaslt()?;
        let plan = Rc::new(LtPlan::new(&column_major_mapping(ops.problem())).map_err(at(&stage))?);
        let algos = plan.heuristics(handle, count, CUBLASLT_WORKSPACE_BYTES).map_err(at(&stage))?;
        if algos.is_empty() {
            return Err(GpuError::refused(stage, "the heuristic returned no algorithm"));
        }
        Ok(algos.into_iter().enumerate().map(|(rank, algo)| LtGemm { ops, plan: plan.clone(), algo, rank }).collect())
    }

    /// The heuristic's first choice.
    pub fn top1(gpu: &Gpu, ops: &'a Operands) -> Result<LtGemm<'a>, GpuError> {
        let mut algos = Self::heuristics(gpu, ops, 1)?;
        // `heuristics` never returns an empty list.
        Ok(algos.swap_remove(0))
    }

    /// The same algorithm and plan on other buffers of the same problem (another buffer
    /// set), without asking the heuristic again.
    pub fn with_operands<'b>(&self, ops: &'b Operands) -> Result<LtGemm<'b>, GpuError> {
        if ops.problem() != self.ops.problem() {
            return Err(GpuError::refused(
                self.label(),
                format!("cannot run on buffers of another problem ({})", ops.problem()),
            ));
        }
        check_sizes(ops, "cuBLASLt")?;
        Ok(LtGemm { ops, plan: self.plan.clone(), algo: self.algo, rank: self.rank })
    }

    /// Position in the heuristic's list (0 = its first choice).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The heuristic's estimate of waves (blocks / what the device runs at once).
    pub fn waves(&self) -> f32 {
        self.algo.waves
    }

    pub fn workspace_bytes(&self) -> usize {
        self.algo.workspace_bytes
    }

    /// The algorithm's opaque words, to record which one ran.
    pub fn algo_words(&self) -> [u64; 8] {
        self.algo.words()
    }

    /// What re-creates this algorithm for the same problem ([`LtGemm::from_config`]).
    pub fn config(&self) -> Result<LtAlgoConfig, GpuError> {
        let values = self.algo.config_values().map_err(at(format!("read the configuration of {}", self.label())))?;
        Ok(LtAlgoConfig {
            attributes: values.into_iter().map(|(n, v)| (n.to_string(), v)).collect(),
            words: self.algo.words().iter().map(|w| format!("{w:016x}")).collect(),
            workspace_bytes: self.algo.workspace_bytes as u64,
            heuristic_rank: self.rank,
        })
    }

    /// Re-creates a recorded algorithm from its configuration attributes and checks with
    /// the library that it runs this problem.
    pub fn from_config(gpu: &Gpu, ops: &'a Operands, config: &LtAlgoConfig) -> Result<LtGemm<'a>, GpuError> {
        let stage = format!("re-create cuBLASLt algorithm for {}", ops.problem());
        check_sizes(ops, &stage)?;
        let (handle, _) = gpu.cublaslt()?;
        let plan = Rc::new(LtPlan::new(&column_major_mapping(ops.problem())).map_err(at(&stage))?);
        let values: Vec<(String, u64)> = config.attributes.iter().map(|(n, v)| (n.clone(), *v)).collect();
        let algo = plan.algo_from_config(handle, &values).map_err(at(&stage))?;
        if algo.workspace_bytes > CUBLASLT_WORKSPACE_BYTES {
            return Err(GpuError::refused(stage, format!("needs {} bytes of workspace", algo.workspace_bytes)));
        }
        Ok(LtGemm { ops, plan, algo, rank: config.heuristic_rank })
    }
}

/// A cuBLASLt algorithm as recorded: its configuration attributes by name (`algo_id`,
/// `tile_id`, `stages_id`, `splitk_num`, `reduction_scheme`, `cta_swizzling`,
/// `custom_option`, `inner_shape_id`, `cluster_shape_id`), which re-create it; the
/// opaque words (hex), which only the same cuBLASLt build reads; the workspace it asked
/// for; and its rank in the heuristic's list when it was chosen.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LtAlgoConfig {
    pub attributes: std::collections::BTreeMap<String, u64>,
    pub words: Vec<String>,
    pub workspace_bytes: u64,
    pub heuristic_rank: usize,
}

impl Contender for LtGemm<'_> {
    fn label(&self) -> String {
        let p = self.ops.problem();
        format!("cuBLASLt #{} {} {} {}", self.rank, p.layout, p.acc, p.shape())
    }
    fn enqueue(&self, gpu: &Gpu) -> Result<(), GpuError> {
        let (handle, workspace) = gpu.cublaslt()?;
        self.plan
            .matmul(
                handle,
                &self.algo,
                self.ops.b.memory(),
                self.ops.a.memory(),
                self.ops.c.memory(),
                workspace,
                gpu.stream(),
            )
            .map_err(at(self.label()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Arch, Shape};

    /// Column-major reference GEMM, exactly as cuBLAS defines it.
    fn col_major_gemm(g: &ColumnMajorGemm, a: &[f64], b: &[f64]) -> Vec<f64> {
        let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
        let at = |i: usize, p: usize| match g.transa {
            Op::N => a[i + p * g.lda as usize],
            Op::T => a[p + i * g.lda as usize],
        };
        let bt = |p: usize, j: usize| match g.transb {
            Op::N => b[p + j * g.ldb as usize],
            Op::T => b[j + p * g.ldb as usize],
        };
        let mut c = vec![0.0; g.ldc as usize * n];
        for j in 0..n {
            for i in 0..m {
                c[i + j * g.ldc as usize] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
            }
        }
        c
    }

    #[test]
    fn the_column_major_call_computes_the_row_major_product() {
        let (m, n, k) = (3usize, 5usize, 4usize);
        let a: Vec<f64> = (0..m * k).map(|i| (i * 7 % 11) as f64 - 5.0).collect(); // M×K row-major
        let b_kn: Vec<f64> = (0..k * n).map(|i| (i * 5 % 13) as f64 - 6.0).collect(); // K×N row-major
        let mut b_nk = vec![0.0; n * k]; // N×K row-major
        for p in 0..k {
            for j in 0..n {
                b_nk[j * k + p] = b_kn[p * n + j];
            }
        }
        let mut want = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                want[i * n + j] = (0..k).map(|p| a[i * k + p] * b_kn[p * n + j]).sum();
            }
        }
        for (layout, b) in [(Layout::Nn, &b_kn), (Layout::Tn, &b_nk)] {
            let p = Problem::new(Arch::Sm90, Acc::F32, layout, Shape { m: m as u32, n: n as u32, k: k as u32 });
            let g = column_major_mapping(&p);
            // cuBLAS's A is our B buffer, its B is our A buffer; its C is our C buffer.
            let got = col_major_gemm(&g, b, &a);
            assert_eq!(got, want, "{layout}");
        }
    }
}
