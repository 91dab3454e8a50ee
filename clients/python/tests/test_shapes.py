"""The GEMM problems of a model's fp16 linears, read on the meta device (no GPU, no
weights): fused projections as they are, deduplicated across layers, the layout the
dispatcher serves nn.Linear with, and clear errors for models kaas has nothing for.
Skipped without torch; the transformers cases skip without transformers."""

import sys
import unittest
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

try:
    import torch
    from torch import nn
except ImportError:  # the standard-library CI run: nothing here applies
    torch = None

try:
    import transformers
except ImportError:
    transformers = None

from kaas_client.errors import KaasError  # noqa: E402

needs_torch = unittest.skipIf(torch is None, "SKIP: needs torch (pip install torch)")


def toy(vocab: int = 1000, dtype=None):
    """Two decoder layers with a fused qkv and a fused gate/up projection, a norm and an
    LM head, as many models fuse them (Phi-3)."""

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(256)
            self.qkv_proj = nn.Linear(256, 768, bias=False)
            self.o_proj = nn.Linear(256, 256, bias=False)
            self.gate_up_proj = nn.Linear(256, 1024, bias=False)
            self.down_proj = nn.Linear(512, 256, bias=False)

    class Toy(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, 256)
            self.layers = nn.ModuleList([Layer(), Layer()])
            self.lm_head = nn.Linear(256, vocab, bias=False)

    m = Toy()
    return m.to(dtype) if dtype is not None else m


@needs_torch
class Shapes(unittest.TestCase):
    def test_a_meta_model_gives_its_fused_problems_once_per_token_count(self):
        from kaas_client import linear_problems
        with torch.device("meta"):
            model = toy(dtype=torch.float16)
        got = [p.path for p in linear_problems(model, [1, 16])]
        self.assertEqual(got, [
            "sm_90/f32/tn/1x768x256", "sm_90/f32/tn/1x256x256", "sm_90/f32/tn/1x1024x256", "sm_90/f32/tn/1x256x512",
            "sm_90/f32/tn/1x1000x256",
            "sm_90/f32/tn/16x768x256", "sm_90/f32/tn/16x256x256", "sm_90/f32/tn/16x1024x256", "sm_90/f32/tn/16x256x512",
            "sm_90/f32/tn/16x1000x256",
        ])
        self.assertTrue(all(p.is_meta for p in model.parameters()))  # read, never materialized

    def test_the_problem_is_the_one_the_dispatcher_serves_nn_linear_with(self):
        from kaas_client import dispatch, linear_problems
        from test_dispatch import F16, T  # duck-typed CUDA tensors, as the dispatcher reads them

        with torch.device("meta"):
            lin = nn.Linear(256, 768).half()
        plan = dispatch.plan_linear(T(2, 8, 256), T(*lin.weight.shape), F16)
        (p,) = linear_problems(lin, 16)
        self.assertEqual(plan.key, (p.layout, p.m, p.n, p.k))

    def test_a_preset_config_gives_what_models_py_says(self):
        from kaas_client import linear_problems
        from kaas_client.models import model as preset
        cfg = preset("qwen2.5-7b")
        with torch.device("meta"):
            layer = nn.ModuleDict({name: nn.Linear(k, n, bias=b) for name, k, n, b in cfg.linears()}).half()
        self.assertEqual(linear_problems(layer, [1, 64]), cfg.problems(1) + cfg.problems(64))

    def test_dimensions_kaas_cannot_hold_are_left_out_with_a_warning(self):
        from kaas_client import linear_problems
        from kaas_client.shapes import ShapeWarning
        with torch.device("meta"):
            model = toy(vocab=128256, dtype=torch.float16)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = linear_problems(model, [1])
        self.assertEqual(len(got), 4)
        self.assertEqual([x.category for x in w], [ShapeWarning])
        self.assertIn("lm_head (128256x256)", str(w[0].message))

    def test_exclude_leaves_out_modules_by_name(self):
        from kaas_client import linear_problems, linear_shapes
        with torch.device("meta"):
            model = toy(dtype=torch.float16)
        self.assertEqual(len(linear_problems(model, 1, exclude=["lm_head", "layers.*.o_proj"])), 3)
        shapes = linear_shapes(model)
        self.assertEqual(shapes[0].layers, ("layers.0.qkv_proj", "layers.1.qkv_proj"))

    def test_only_fp16_linears_count_and_a_model_without_one_is_a_clear_error(self):
        from kaas_client import NoLinearsError, linear_problems
        with torch.device("meta"):
            fp32 = toy()
            mixed = toy(dtype=torch.float16)
            mixed.lm_head.float()
            bare = nn.Sequential(nn.LayerNorm(8), nn.ReLU())
        with self.assertRaisesRegex(NoLinearsError, r"no float16 nn.Linear layer \(9 of torch.float32\).*\.half\(\)"):
            linear_problems(fp32, [1])
        with self.assertRaisesRegex(NoLinearsError, "has no nn.Linear layer"):
            linear_problems(bare, [1])
        self.assertEqual(len(linear_problems(mixed, [1])), 4)  # the fp32 head is torch's

    def test_token_counts_are_checked(self):
        from kaas_client import linear_problems
        with torch.device("meta"):
            model = toy(dtype=torch.float16)
        for bad in ([], [0], [70000], ["1"], [1.5]):
            with self.subTest(bad), self.assertRaises(KaasError):
                linear_problems(model, bad)
        self.assertEqual(len(linear_problems(model, [4, 4])), 5)


@needs_torch
@unittest.skipIf(transformers is None, "SKIP: needs transformers (pip install transformers)")
class TransformersConfigs(unittest.TestCase):
    """Models built from transformers' own config classes on the meta device, nothing
    downloaded: the problems follow from the config's sizes."""

    def build(self, cfg):
        from transformers import AutoModelForCausalLM
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(cfg, dtype=torch.float16)

    def test_llama_separate_projections(self):
        from transformers import LlamaConfig
        from kaas_client import linear_problems
        cfg = LlamaConfig(hidden_size=512, intermediate_size=1536, num_attention_heads=8, num_key_value_heads=2,
                          num_hidden_layers=3, vocab_size=4096)
        got = {(p.n, p.k) for p in linear_problems(self.build(cfg), 1, exclude=["lm_head"])}
        hd = 512 // 8
        self.assertEqual(got, {(512, 512), (2 * hd, 512), (1536, 512), (512, 1536)})

    def test_phi3_fused_projections_come_out_fused(self):
        from transformers import Phi3Config
        from kaas_client import linear_problems
        cfg = Phi3Config(hidden_size=512, intermediate_size=1536, num_attention_heads=8, num_key_value_heads=8,
                         num_hidden_layers=2, vocab_size=4096, pad_token_id=0, bos_token_id=1, eos_token_id=2)
        model = self.build(cfg)
        got = sorted((p.n, p.k) for p in linear_problems(model, 1, exclude=["lm_head"]))
        # qkv_proj (3 x 512 wide), o_proj, gate_up_proj (2 x 1536 wide), down_proj
        self.assertEqual(got, sorted([(3 * 512, 512), (512, 512), (2 * 1536, 512), (512, 1536)]))

    def test_kaas_lock_reads_a_config_json_into_problems(self):
        import contextlib
        import io
        import json
        import tempfile
        from transformers import LlamaConfig
        from fixtures import WIN, entry, problem, ptx, write_bundle
        from kaas_client.locking import Lock, main
        tmp = Path(tempfile.mkdtemp())
        LlamaConfig(hidden_size=512, intermediate_size=1536, num_attention_heads=8, num_key_value_heads=2,
                    num_hidden_layers=2, vocab_size=4096, bos_token_id=1, eos_token_id=2).save_pretrained(tmp / "cfg")
        text = ptx("k_cfg")
        bundle = write_bundle(tmp / "kernels", [entry(text, problem(m=4, n=1536, k=512), speedups=WIN, entry_name="k_cfg")], [], [text])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = main(["resolve", "--source", str(bundle), "--device-class", "H100-SXM", "--hf-config",
                           str(tmp / "cfg" / "config.json"), "--exclude", "lm_head", "--tokens", "4",
                           "--cache", str(tmp / "cache"), "-o", str(tmp / "kaas.lock")])
        self.assertEqual(status, 0, out.getvalue())
        lk = Lock.read(tmp / "kaas.lock")
        self.assertEqual([k.problem.path for k in lk.kernels], ["sm_90/f32/tn/4x1536x512"])  # gate_proj, up_proj
        self.assertEqual(len(lk.fallback), 3)  # q/o, k/v, down_proj: no kernel
        self.assertEqual(json.loads((tmp / "kaas.lock").read_text())["device_class"], "H100-SXM")


if __name__ == "__main__":
    unittest.main()
