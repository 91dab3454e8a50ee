"""bench/hf_layers.py on CPU, the part of the end-to-end benchmark that needs no GPU: the
published configs give the problems their architectures are known for (read on the meta
device), and a recorded step of each architecture's decoder layers -- called alone, with
what the model hands them -- gives the model's own output, again on every call (the
static cache is rewound), so that a captured step replays the same work. Skipped without
torch and transformers."""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

try:
    import torch
    import transformers  # noqa: F401
except ImportError:  # the standard-library CI run: nothing here applies
    torch = None

# Small sizes for the CPU steps: the architectures' own code, a fraction of the width.
SMALL = dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=1000)
PER_MODEL = {
    "phi-3-mini": dict(head_dim=None, num_key_value_heads=4, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "llama-3.2-3b": dict(bos_token_id=1, eos_token_id=2),
    "gemma-2-9b": dict(query_pre_attn_scalar=64, bos_token_id=2, eos_token_id=1),
}


@unittest.skipIf(torch is None, "SKIP: needs torch and transformers (pip install torch transformers)")
class DecoderLayers(unittest.TestCase):
    def test_published_configs_give_their_known_projections(self):
        import hf_layers
        from kaas_client import linear_shapes
        want = {
            "llama-3.2-3b": {(3072, 3072), (1024, 3072), (8192, 3072), (3072, 8192)},
            "gemma-2-9b": {(4096, 3584), (2048, 3584), (3584, 4096), (14336, 3584), (3584, 14336)},
            "phi-3-mini": {(9216, 3072), (3072, 3072), (16384, 3072), (3072, 8192)},  # qkv and gate/up fused
            "mistral-nemo-12b": {(4096, 5120), (1024, 5120), (5120, 4096), (14336, 5120), (5120, 14336)},
        }
        self.assertEqual(set(want), set(hf_layers.CONFIGS))
        for name, shapes in want.items():
            model = hf_layers.build(hf_layers.config(name, 2), "meta", torch.float16)
            got = {(s.out_features, s.in_features) for s in linear_shapes(model, exclude=["lm_head"])}
            self.assertEqual(got, shapes, name)

    def test_a_recorded_step_is_the_models_own_and_repeats(self):
        import hf_layers
        for name in hf_layers.CONFIGS:
            kw = dict(SMALL, **PER_MODEL.get(name, {}))
            kw = {k: v for k, v in kw.items() if v is not None}
            model = hf_layers.build(hf_layers.config(name, 2, **kw), "cpu", torch.float32)
            for batch, seq, past in ((3, 1, 16), (1, 8, 0)):
                with self.subTest(name=name, batch=batch, seq=seq, past=past):
                    step = hf_layers.Step(model, batch, seq, past)
                    with torch.no_grad():
                        outs = [step() for _ in range(3)]
                    self.assertEqual(tuple(outs[0].shape), (batch, seq, 256))
                    for out in outs:
                        self.assertTrue(torch.equal(out, step.reference))
                    self.assertEqual(len(step.calls), 2)
                    self.assertEqual(len(step.linears()), 8 if name == "phi-3-mini" else 14)

    def test_unknown_models_are_named(self):
        import hf_layers
        with self.assertRaisesRegex(ValueError, "unknown model `gpt-9`; known: llama-3.2-3b"):
            hf_layers.config("gpt-9")


if __name__ == "__main__":
    unittest.main()
