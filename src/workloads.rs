//! Workloads: named lists of problems — the GEMMs of one decoder layer of a popular open
//! model, at the token counts a server sees (decode at 1–64 tokens, prefill up to 8192).
//!
//! The presets are derived from each model's published configuration (hidden size,
//! intermediate size, attention heads, key/value heads, head dimension, experts); no
//! weights are needed. Every `nn.Linear` of the layer is a `tn` problem: the activations
//! are A (tokens × in_features, row-major) and the weight is B stored N × K
//! (out_features × in_features), exactly PyTorch's layout. Linears that share a shape
//! (q_proj and o_proj, k_proj and v_proj, gate_proj and up_proj) are one problem, named
//! by all of them.

use serde::Serialize;
use utoipa::ToSchema;

use crate::problem::{Acc, Arch, Layout, Problem, Shape};

/// The token counts (M) every preset is listed at.
pub const TOKENS: [u32; 14] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192];

/// A decoder layer's shape, from the model's published configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct ModelConfig {
    /// The preset's name, e.g. `llama-3.1-8b`.
    pub name: &'static str,
    /// The model as its authors name it.
    pub title: &'static str,
    pub hidden: u32,
    /// The MLP's (or each expert's) intermediate size.
    pub intermediate: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    /// Mixture of experts: experts per layer (0: a dense MLP).
    pub experts: u32,
}

/// The presets (issue 36): Llama 3.1 8B and 70B, Qwen2.5 7B and 72B, Mistral 7B and
/// Mixtral 8x7B (its expert MLP), each from its `config.json` as published.
pub const PRESETS: &[ModelConfig] = &[
    ModelConfig { name: "llama-3.1-8b", title: "Llama 3.1 8B", hidden: 4096, intermediate: 14336, heads: 32, kv_heads: 8, head_dim: 128, experts: 0 },
    ModelConfig { name: "llama-3.1-70b", title: "Llama 3.1 70B", hidden: 8192, intermediate: 28672, heads: 64, kv_heads: 8, head_dim: 128, experts: 0 },
    ModelConfig { name: "qwen2.5-7b", title: "Qwen2.5 7B", hidden: 3584, intermediate: 18944, heads: 28, kv_heads: 4, head_dim: 128, experts: 0 },
    ModelConfig { name: "qwen2.5-72b", title: "Qwen2.5 72B", hidden: 8192, intermediate: 29568, heads: 64, kv_heads: 8, head_dim: 128, experts: 0 },
    ModelConfig { name: "mistral-7b", title: "Mistral 7B", hidden: 4096, intermediate: 14336, heads: 32, kv_heads: 8, head_dim: 128, experts: 0 },
    ModelConfig { name: "mixtral-8x7b", title: "Mixtral 8x7B", hidden: 4096, intermediate: 14336, heads: 32, kv_heads: 8, head_dim: 128, experts: 8 },
];

/// One Linear (or several of the same shape) of a layer: N = out_features, K = in_features.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Linear {
    /// The module names, e.g. `k_proj, v_proj`.
    pub names: String,
    pub n: u32,
    pub k: u32,
}

/// One problem of a workload: which Linear, at how many tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gemm {
    pub linear: String,
    pub tokens: u32,
    pub problem: Problem,
}

impl ModelConfig {
    /// The layer's Linears, those of one shape merged, in the order of the forward pass.
    pub fn linears(&self) -> Vec<Linear> {
        let (h, q, kv) = (self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim);
        let mlp = if self.experts > 0 { ("w1", "w3", "w2") } else { ("gate_proj", "up_proj", "down_proj") };
        let mut raw: Vec<(&str, u32, u32)> = vec![("q_proj", q, h), ("k_proj", kv, h), ("v_proj", kv, h), ("o_proj", h, q)];
        if self.experts > 0 {
            raw.push(("router", self.experts, h));
        }
        raw.extend([(mlp.0, self.intermediate, h), (mlp.1, self.intermediate, h), (mlp.2, h, self.intermediate)]);
        let mut out: Vec<Linear> = Vec::new();
        for (name, n, k) in raw {
            match out.iter_mut().find(|l| l.n == n && l.k == k) {
                Some(l) => l.names = format!("{}, {name}", l.names),
                None => out.push(Linear { names: name.to_string(), n, k }),
            }
        }
        out
    }

    /// Every problem of the workload for `arch` and `acc`, Linear by Linear, at every
    /// count of [`TOKENS`].
    pub fn gemms(&self, arch: Arch, acc: Acc) -> Vec<Gemm> {
        let mut out = Vec::new();
        for l in self.linears() {
            for &tokens in &TOKENS {
                // Every preset dimension is far below MAX_DIM; a shape out of range would be
                // a preset typo, which the tests catch.
                if let Ok(shape) = Shape::new(tokens, l.n, l.k) {
                    out.push(Gemm { linear: l.names.clone(), tokens, problem: Problem::new(arch, acc, Layout::Tn, shape) });
                }
            }
        }
        out
    }
}

/// The preset named `name`.
pub fn preset(name: &str) -> Option<&'static ModelConfig> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The presets' names, for messages.
pub fn names() -> String {
    PRESETS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shapes(name: &str, tokens: u32) -> Vec<(String, (u32, u32, u32))> {
        let p = preset(name).expect("a preset");
        p.gemms(Arch::Sm90, Acc::F32)
            .into_iter()
            .filter(|g| g.tokens == tokens)
            .map(|g| (g.linear, (g.problem.m, g.problem.n, g.problem.k)))
            .collect()
    }

    #[test]
    fn llama_8b_decode_has_the_layers_gemms_with_shared_shapes_merged() {
        assert_eq!(
            shapes("llama-3.1-8b", 1),
            vec![
                ("q_proj, o_proj".to_string(), (1, 4096, 4096)),
                ("k_proj, v_proj".to_string(), (1, 1024, 4096)),
                ("gate_proj, up_proj".to_string(), (1, 14336, 4096)),
                ("down_proj".to_string(), (1, 4096, 14336)),
            ]
        );
    }

    #[test]
    fn every_preset_lists_every_token_count_for_each_distinct_linear() {
        for p in PRESETS {
            let gemms = p.gemms(Arch::Sm90, Acc::F32);
            assert_eq!(gemms.len(), p.linears().len() * TOKENS.len(), "{}", p.name);
            assert!(gemms.iter().all(|g| g.problem.layout == Layout::Tn && g.problem.m == g.tokens), "{}", p.name);
            // No two entries are the same problem.
            let mut seen: Vec<_> = gemms.iter().map(|g| (g.problem.m, g.problem.n, g.problem.k)).collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), gemms.len(), "{}", p.name);
            // Row lengths are multiples of 8 halves (16 bytes), as TMA kernels need.
            assert!(p.linears().iter().all(|l| l.k % 8 == 0 && l.n % 8 == 0), "{}", p.name);
        }
    }

    #[test]
    fn gqa_and_experts_shape_the_projections() {
        // Qwen2.5 7B: 28 heads, 4 key/value heads of 128.
        assert!(shapes("qwen2.5-7b", 16).contains(&("k_proj, v_proj".to_string(), (16, 512, 3584))));
        // Llama 3.1 70B's MLP.
        assert!(shapes("llama-3.1-70b", 4096).contains(&("down_proj".to_string(), (4096, 8192, 28672))));
        // Mixtral: the router and an expert's MLP.
        let mixtral = shapes("mixtral-8x7b", 8);
        assert!(mixtral.contains(&("router".to_string(), (8, 8, 4096))));
        assert!(mixtral.contains(&("w1, w3".to_string(), (8, 14336, 4096))));
        assert!(mixtral.contains(&("w2".to_string(), (8, 4096, 14336))));
        assert!(preset("gpt-5").is_none());
        assert!(names().contains("mixtral-8x7b"));
    }
}
