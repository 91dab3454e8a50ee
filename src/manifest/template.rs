//! Manifest templates: one manifest for many problems, for kernels that read M, N and K
//! at run time. A template is a `kaas.hgemm.v1` manifest without a `problem`, whose
//! `arch`, `acc` and `layout` are fixed and whose grid extents and workspace size may be
//! expressions of M, N and K:
//!
//! ```json
//! { "abi": "kaas.hgemm.v1", "arch": "sm_90", "acc": "f32", "layout": "tn",
//!   "workspace_bytes": 0,
//!   "launches": [{ "entry": "hgemm", "block": [256, 1, 1], "shared_mem_bytes": 37888,
//!                  "grid": [{"ceil_div": ["N", 128]}, {"ceil_div": ["M", 128]}, 1],
//!                  "params": [{"ptr": "A"}, {"ptr": "B"}, {"ptr": "C"},
//!                             {"i32": "M"}, {"i32": "N"}, {"i32": "K"}] }] }
//! ```
//!
//! An expression is a non-negative integer, `"M"`, `"N"` or `"K"`, or one of
//! `{"ceil_div": [a, b]}`, `{"product": [a, …]}`, `{"sum": [a, …]}`, `{"min": [a, …]}`,
//! `{"max": [a, …]}` over expressions (e.g. a persistent kernel's grid:
//! `{"min": [132, {"product": [{"ceil_div": ["M", 128]}, {"ceil_div": ["N", 256]}]}]}`).
//! JSON, not a string language: nothing to parse, nothing to inject, and the arithmetic
//! is checked. The service instantiates the template for each problem listed with the
//! submission and stores the concrete manifests, so everything downstream (verification,
//! benchmark, `kaas pull`, clients) sees ordinary manifests.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ABI, Dim, Launch, Manifest, ManifestError, Param};
use crate::problem::{Acc, Arch, Layout, Problem, Shape};

/// Deepest nesting an expression may have.
const MAX_DEPTH: usize = 8;

/// An expression of M, N and K (see the module docs). The OpenAPI document's `Expr` is
/// written by hand (`api::openapi`): the generator does not handle the recursion. An
/// operator object has exactly one key: `{"min": [1, 2], "max": [1]}` is refused, not
/// read as its first operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum Expr {
    Const(u64),
    Dim(Dim),
    CeilDiv {
        ceil_div: Box<(Expr, Expr)>,
    },
    Product {
        product: Vec<Expr>,
    },
    Sum {
        sum: Vec<Expr>,
    },
    Min {
        min: Vec<Expr>,
    },
    Max {
        max: Vec<Expr>,
    },
}

impl Expr {
    /// The value for one shape; overflow, a division by zero, an empty list or nesting
    /// deeper than 8 is an error that names it.
    pub fn eval(&self, shape: Shape) -> Result<u64, String> {
        self.eval_at(shape, 0)
    }

    fn eval_at(&self, s: Shape, depth: usize) -> Result<u64, String> {
        if depth > MAX_DEPTH {
            return Err(format!("expression nested deeper than {MAX_DEPTH}"));
        }
        let all = |items: &[Expr], what: &str| -> Result<Vec<u64>, String> {
            if items.is_empty() {
                return Err(format!("`{what}` needs at least one operand"));
            }
            items.iter().map(|e| e.eval_at(s, depth + 1)).collect()
        };
        let overflow = || "expression overflows".to_string();
        Ok(match self {
            Expr::Const(v) => *v,
            Expr::Dim(Dim::M) => u64::from(s.m),
            Expr::Dim(Dim::N) => u64::from(s.n),
            Expr::Dim(Dim::K) => u64::from(s.k),
            Expr::CeilDiv { ceil_div } => {
                let (a, b) = (ceil_div.0.eval_at(s, depth + 1)?, ceil_div.1.eval_at(s, depth + 1)?);
                if b == 0 {
                    return Err("`ceil_div` by zero".into());
                }
                a.div_ceil(b)
            }
            Expr::Product { product } => all(product, "product")?.into_iter().try_fold(1u64, |acc, v| acc.checked_mul(v)).ok_or_else(overflow)?,
            Expr::Sum { sum } => all(sum, "sum")?.into_iter().try_fold(0u64, |acc, v| acc.checked_add(v)).ok_or_else(overflow)?,
            Expr::Min { min } => all(min, "min")?.into_iter().min().unwrap_or(0),
            Expr::Max { max } => all(max, "max")?.into_iter().max().unwrap_or(0),
        })
    }
}

fn zero() -> Expr {
    Expr::Const(0)
}

fn no_cluster() -> [u32; 3] {
    [1, 1, 1]
}

/// A manifest for every problem of one (arch, acc, layout); see the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ManifestTemplate {
    /// Always `kaas.hgemm.v1`.
    pub abi: String,
    pub arch: Arch,
    pub acc: Acc,
    pub layout: Layout,
    /// An expression of M, N, K (default 0).
    #[serde(default = "zero")]
    #[schema(value_type = Object)]
    pub workspace_bytes: Expr,
    /// 1 to 8, as a manifest's.
    #[schema(min_items = 1, max_items = 8)]
    pub launches: Vec<LaunchTemplate>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LaunchTemplate {
    pub entry: String,
    /// Three expressions of M, N, K, e.g. `[{"ceil_div": ["N", 128]}, {"ceil_div": ["M", 128]}, 1]`.
    #[schema(value_type = Vec<Object>, min_items = 3, max_items = 3)]
    pub grid: [Expr; 3],
    #[schema(min_items = 3, max_items = 3)]
    pub block: [u32; 3],
    #[serde(default = "no_cluster")]
    #[schema(min_items = 3, max_items = 3)]
    pub cluster: [u32; 3],
    #[serde(default)]
    pub shared_mem_bytes: u32,
    pub params: Vec<Param>,
}

impl ManifestTemplate {
    /// The concrete manifest for one shape, checked like any other manifest.
    pub fn instantiate(&self, shape: Shape) -> Result<Manifest, ManifestError> {
        let problem = Problem::new(self.arch, self.acc, self.layout, shape);
        if self.abi != ABI {
            return Err(ManifestError::Abi(self.abi.clone()));
        }
        let workspace_bytes = self.workspace_bytes.eval(shape).map_err(|m| ManifestError::Template(format!("workspace_bytes: {m}")))?;
        let mut launches = Vec::with_capacity(self.launches.len());
        for (index, l) in self.launches.iter().enumerate() {
            let mut grid = [0u32; 3];
            for (axis, e) in l.grid.iter().enumerate() {
                let v = e.eval(shape).map_err(|m| ManifestError::Launch { index, message: format!("grid[{axis}]: {m}") })?;
                grid[axis] = u32::try_from(v)
                    .map_err(|_| ManifestError::Launch { index, message: format!("grid[{axis}] = {v} for {shape} does not fit 32 bits") })?;
            }
            launches.push(Launch {
                entry: l.entry.clone(),
                grid,
                block: l.block,
                cluster: l.cluster,
                shared_mem_bytes: l.shared_mem_bytes,
                params: l.params.clone(),
            });
        }
        let m = Manifest { abi: self.abi.clone(), problem, workspace_bytes, launches };
        m.validate()?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(grid: serde_json::Value) -> ManifestTemplate {
        serde_json::from_value(serde_json::json!({
            "abi": "kaas.hgemm.v1", "arch": "sm_90", "acc": "f32", "layout": "tn",
            "launches": [{"entry": "k", "grid": grid, "block": [256, 1, 1],
                          "params": [{"ptr": "A"}, {"ptr": "B"}, {"ptr": "C"}, {"i32": "M"}, {"i32": "N"}, {"i32": "K"}]}]
        }))
        .expect("template parses")
    }

    fn shape(m: u32, n: u32, k: u32) -> Shape {
        Shape::new(m, n, k).expect("shape")
    }

    #[test]
    fn grids_follow_the_shape() {
        let t = template(serde_json::json!([{"ceil_div": ["N", 128]}, {"ceil_div": ["M", 128]}, 1]));
        let m = t.instantiate(shape(4096, 1024, 64)).expect("instantiates");
        assert_eq!(m.launches[0].grid, [8, 32, 1]);
        assert_eq!(m.problem.to_string(), Problem::new(Arch::Sm90, Acc::F32, Layout::Tn, shape(4096, 1024, 64)).to_string());
        // Tiles larger than the problem round up to one block.
        assert_eq!(t.instantiate(shape(64, 64, 64)).expect("small").launches[0].grid, [1, 1, 1]);
    }

    #[test]
    fn a_persistent_grid_is_capped_by_min() {
        let t = template(serde_json::json!([{"min": [132, {"product": [{"ceil_div": ["M", 128]}, {"ceil_div": ["N", 256]}]}]}, 1, 1]));
        assert_eq!(t.instantiate(shape(8192, 8192, 64)).expect("big").launches[0].grid[0], 132);
        assert_eq!(t.instantiate(shape(256, 512, 64)).expect("small").launches[0].grid[0], 4);
    }

    #[test]
    fn bad_expressions_are_named() {
        let t = template(serde_json::json!([{"ceil_div": ["N", 0]}, 1, 1]));
        let e = t.instantiate(shape(64, 64, 64)).unwrap_err().to_string();
        assert!(e.contains("grid[0]") && e.contains("by zero"), "{e}");
        let t = template(serde_json::json!([{"product": []}, 1, 1]));
        assert!(t.instantiate(shape(64, 64, 64)).unwrap_err().to_string().contains("at least one"));
        let t = template(serde_json::json!([{"product": ["M", "N", "K", "M", "N"]}, 1, 1]));
        assert!(t.instantiate(shape(16384, 16384, 16384)).unwrap_err().to_string().contains("overflows"));
        // A grid of zero blocks fails the ordinary manifest checks.
        let t = template(serde_json::json!([0, 1, 1]));
        assert!(t.instantiate(shape(64, 64, 64)).unwrap_err().to_string().contains("grid"));
        // Unknown words are refused when parsing.
        assert!(serde_json::from_value::<Expr>(serde_json::json!({"pow": ["M", 2]})).is_err());
        assert!(serde_json::from_value::<Expr>(serde_json::json!("Q")).is_err());
    }

    #[test]
    fn deep_nesting_is_refused() {
        let mut e = serde_json::json!("M");
        for _ in 0..12 {
            e = serde_json::json!({"max": [e]});
        }
        let expr: Expr = serde_json::from_value(e).expect("parses");
        assert!(expr.eval(shape(64, 64, 64)).unwrap_err().contains("deeper"));
    }
}
