"""Full decoder layers of real architectures, built from transformers' own config classes
with random weights (nothing downloaded), and one step of them as a plain function, for
timing under CUDA graphs.

`config(name, layers)` is a published model's config (its config.json values, written
out here) with fewer layers; `build` makes the model with transformers' own modeling code
and random initial weights. `Step` is one forward step of the decoder layers -- norms,
attention over a static KV cache, MLP -- as the model itself calls them: a first call of
the model records what it hands each layer (the attention masks, the rotary embeddings,
the cache and its positions, computed once per step), and the step then calls the layers
alone with exactly that, so that nothing in it reads a tensor back to the host and the
whole step can be captured in one CUDA graph. The embedding, the final norm and the LM
head are left out: they run once per step whatever the layer count, and the heads of these
models (128k-256k vocabularies) are beyond what a kaas problem can hold.
"""

from __future__ import annotations

from typing import Any

# Published configs (each model's config.json), the fields that shape its decoder layers.
CONFIGS: dict = {
    "llama-3.2-3b": ("LlamaConfig", dict(
        hidden_size=3072, intermediate_size=8192, num_attention_heads=24, num_key_value_heads=8, head_dim=128,
        num_hidden_layers=28, vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5, hidden_act="silu",
        rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001)),
    "gemma-2-9b": ("Gemma2Config", dict(
        hidden_size=3584, intermediate_size=14336, num_attention_heads=16, num_key_value_heads=8, head_dim=256,
        num_hidden_layers=42, vocab_size=256000, max_position_embeddings=8192, rms_norm_eps=1e-6,
        hidden_activation="gelu_pytorch_tanh", rope_theta=10000.0, query_pre_attn_scalar=256, sliding_window=4096,
        final_logit_softcapping=30.0, attn_logit_softcapping=50.0, pad_token_id=0, bos_token_id=2, eos_token_id=1)),
    "phi-3-mini": ("Phi3Config", dict(  # Phi-3-mini-4k: fused qkv_proj and gate_up_proj
        hidden_size=3072, intermediate_size=8192, num_attention_heads=32, num_key_value_heads=32,
        num_hidden_layers=32, vocab_size=32064, max_position_embeddings=4096, original_max_position_embeddings=4096,
        rms_norm_eps=1e-5, hidden_act="silu", rope_theta=10000.0, sliding_window=2047,
        pad_token_id=32000, bos_token_id=1, eos_token_id=32000)),
    "mistral-nemo-12b": ("MistralConfig", dict(  # head_dim 128 with 32 heads: q is 4096 wide, hidden 5120
        hidden_size=5120, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        num_hidden_layers=40, vocab_size=131072, max_position_embeddings=1024000, rms_norm_eps=1e-5,
        hidden_act="silu", rope_theta=1000000.0, sliding_window=None, bos_token_id=1, eos_token_id=2)),
}


def config(name: str, layers: int | None = None, **overrides: Any) -> Any:
    """The published config of `name` (one of CONFIGS) as transformers' own config class,
    with `layers` decoder layers instead of all of them, and `overrides` on top."""
    import transformers

    try:
        cls_name, fields = CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown model `{name}`; known: {', '.join(CONFIGS)}") from None
    fields = dict(fields, **overrides)
    if layers is not None:
        fields["num_hidden_layers"] = layers
    return getattr(transformers, cls_name)(**fields)


def build(cfg: Any, device: Any, dtype: Any) -> Any:
    """The causal LM of `cfg` with random initial weights (transformers' own init), made
    directly on `device` in `dtype`."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    return model.eval()


def decoder_layers(model: Any) -> Any:
    """The decoder layers (`model.model.layers` in every architecture here)."""
    return model.get_decoder().layers


class Step:
    """One forward step of `model`'s decoder layers for `batch` sequences of `seq` new
    tokens after `past` cached ones, on a static KV cache: `step()` returns the last
    layer's output. Each linear sees M = batch x seq rows (decode: a batch of one-token
    sequences; prefill: one sequence of `seq` tokens)."""

    def __init__(self, model: Any, batch: int, seq: int, past: int = 0, seed: int = 0):
        import torch
        from transformers import StaticCache

        p = next(model.parameters())
        self.model = model
        self.layers = list(decoder_layers(model))
        self.cache = StaticCache(config=model.config, max_cache_len=past + seq)
        g = torch.Generator(device=p.device).manual_seed(seed)
        hidden = model.config.hidden_size
        self.x = ((torch.rand(batch, seq, hidden, generator=g, device=p.device) * 2 - 1) * 0.5).to(p.dtype)
        self.cache_position = torch.arange(past, past + seq, device=p.device)
        position_ids = self.cache_position.unsqueeze(0).expand(batch, -1)
        self.past = past
        self.calls: list = []
        self.reference = None
        self.rewind()

        def record(module: Any, args: tuple, kwargs: dict) -> None:
            self.calls.append((args[1:], dict(kwargs), "hidden_states" in kwargs))

        def keep(module: Any, args: tuple, kwargs: dict, out: Any) -> None:
            self.reference = out[0] if isinstance(out, tuple) else out

        hooks = [layer.register_forward_pre_hook(record, with_kwargs=True) for layer in self.layers]
        hooks.append(self.layers[-1].register_forward_hook(keep, with_kwargs=True))
        try:
            with torch.no_grad():
                model.get_decoder()(inputs_embeds=self.x, past_key_values=self.cache, cache_position=self.cache_position,
                                    position_ids=position_ids, use_cache=True)
        finally:
            for h in hooks:
                h.remove()
        if len(self.calls) != len(self.layers):
            raise RuntimeError(f"{type(model).__name__}: recorded {len(self.calls)} layer calls for {len(self.layers)} layers")

    def rewind(self) -> None:
        """Puts the cache back at `past` tokens. Static cache layers count the tokens they
        hold themselves (a tensor, and for sliding windows a Python int that picks the
        update's branch), so each step first sets both back: every replay of a captured
        step then writes the same slots, as the first call did. (Caches that take their
        positions from `cache_position` alone have nothing to rewind.)"""
        import torch

        for layer in getattr(self.cache, "layers", []):
            n = getattr(layer, "cumulative_length", None)
            if isinstance(n, torch.Tensor):
                n.fill_(self.past)
            elif isinstance(n, int):
                layer.cumulative_length = self.past
            if isinstance(getattr(layer, "cumulative_length_int", None), int):
                layer.cumulative_length_int = self.past

    def __call__(self) -> Any:
        self.rewind()
        h = self.x
        for layer, (args, kwargs, by_name) in zip(self.layers, self.calls):
            if by_name:
                out = layer(*args, **dict(kwargs, hidden_states=h))
            else:
                out = layer(h, *args, **kwargs)
            h = out[0] if isinstance(out, tuple) else out
        return h

    def linears(self) -> list:
        """(name, out_features, in_features) of the layers' nn.Linear modules, in order."""
        import torch

        return [(n, m.out_features, m.in_features) for i, layer in enumerate(self.layers)
                for n, m in layer.named_modules() if isinstance(m, torch.nn.Linear)]
