"""Decoder-layer shapes of popular open models, from their published configs (no
downloads), and the GEMM problems a layer runs for a number of tokens.

A decoder layer's linear layers are q/k/v/o projections (attention) and gate/up/down
(SwiGLU MLP); each is `nn.Linear(in, out)`, i.e. kaas problem `tn` M×N×K with M = tokens,
N = out_features, K = in_features.
"""

from __future__ import annotations

from dataclasses import dataclass

from .manifest import Problem


@dataclass(frozen=True)
class ModelConfig:
    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    qkv_bias: bool = False

    def linears(self) -> list[tuple[str, int, int, bool]]:
        """(name, in_features, out_features, bias) of each linear layer of one decoder layer."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        b = self.qkv_bias
        return [
            ("q_proj", self.hidden, q, b), ("k_proj", self.hidden, kv, b), ("v_proj", self.hidden, kv, b),
            ("o_proj", q, self.hidden, False),
            ("gate_proj", self.hidden, self.intermediate, False), ("up_proj", self.hidden, self.intermediate, False),
            ("down_proj", self.intermediate, self.hidden, False),
        ]

    def problems(self, tokens: int, arch: str = "sm_90", acc: str = "f32") -> list[Problem]:
        """The distinct GEMM problems of one layer for `tokens` rows, in layer order."""
        out: dict = {}
        for _, k, n, _ in self.linears():
            out.setdefault(Problem(arch, acc, "tn", tokens, n, k), None)
        return list(out)


# Published configs (config.json of each model's release).
MODELS = {
    c.name: c
    for c in (
        ModelConfig("llama-3.1-8b", 4096, 14336, 32, 8, 128),
        ModelConfig("llama-3.1-70b", 8192, 28672, 64, 8, 128),
        ModelConfig("llama-3.2-1b", 2048, 8192, 32, 8, 64),
        ModelConfig("mistral-7b", 4096, 14336, 32, 8, 128),
        ModelConfig("qwen2.5-7b", 3584, 18944, 28, 4, 128, qkv_bias=True),
        ModelConfig("tinyllama-1.1b", 2048, 5632, 32, 4, 64),
    )
}


def model(name: str) -> ModelConfig:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model `{name}`; known: {', '.join(MODELS)}") from None
