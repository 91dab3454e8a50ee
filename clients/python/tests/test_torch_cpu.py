"""kaas_client.torch without a GPU: the fallbacks (warned once, or raised in strict mode),
patching and unpatching, the `kaas::mm` custom op (schema, fake tensor, autograd) and
torch.compile(fullgraph=True) tracing through matmul/linear. Skipped without torch."""

import unittest
import warnings

try:
    import torch
except ImportError:  # the standard-library CI run: nothing here applies
    torch = None


@unittest.skipIf(torch is None, "needs torch (pip install torch)")
class TorchCPU(unittest.TestCase):
    def setUp(self):
        import kaas_client.torch as kt
        self.kt = kt
        kt.reset()
        kt.set_strict(False)
        self.a = torch.randn(8, 16, dtype=torch.float16)
        self.w = torch.randn(4, 16, dtype=torch.float16)

    def tearDown(self):
        self.kt.reset()
        self.kt.set_strict(False)

    def test_cpu_tensors_run_torch_and_warn_once(self):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out = self.kt.matmul(self.a, self.w.t())
            self.kt.matmul(self.a, self.w.t())
            self.kt.linear(self.a, self.w)
        self.assertTrue(torch.equal(out, torch.matmul(self.a, self.w.t())))
        msgs = [str(x.message) for x in w if issubclass(x.category, self.kt.KaasFallbackWarning)]
        self.assertEqual(len(msgs), 1)
        self.assertIn("not on one CUDA device", msgs[0])
        self.assertEqual(self.kt.status()["fallbacks_warned"], ["device"])

    def test_strict_mode_makes_every_fallback_an_error(self):
        from kaas_client.errors import FallbackError
        self.kt.set_strict(True)
        with self.assertRaises(FallbackError) as cm:
            self.kt.linear(self.a, self.w)
        self.assertEqual(cm.exception.reason, "device")
        with self.assertRaises(FallbackError) as cm:
            self.kt.matmul(self.a.float(), self.w.t().float())
        self.assertEqual(cm.exception.reason, "dtype")

    def test_shape_errors_are_torchs_own(self):
        with self.assertRaises(RuntimeError):
            self.kt.matmul(self.a, self.w)

    def test_use_needs_a_source(self):
        from kaas_client.errors import KaasError
        with self.assertRaisesRegex(KaasError, "give lock= or bundle="):
            self.kt.use()

    def test_the_custom_op_passes_opcheck_and_its_gradients_are_torchs(self):
        a, b = torch.randn(8, 16, requires_grad=True), torch.randn(4, 16, requires_grad=True)
        torch.library.opcheck(torch.ops.kaas.mm.default, (a, b, True))
        torch.library.opcheck(torch.ops.kaas.mm.default, (a, b.t().contiguous(), False))
        torch.ops.kaas.mm(a, b, True).sum().backward()
        ga, gb = a.grad.clone(), b.grad.clone()
        a.grad = b.grad = None
        (a @ b.t()).sum().backward()
        self.assertTrue(torch.allclose(ga, a.grad) and torch.allclose(gb, b.grad))

    def test_compile_fullgraph_traces_the_calls_and_the_op(self):
        kt = self.kt
        lin = torch.nn.Linear(16, 4).half()

        def f(x):
            return kt.linear(x, lin.weight, lin.bias).relu() + kt.matmul(x, lin.weight.t())

        got = torch.compile(f, fullgraph=True, backend="eager")(self.a)
        self.assertTrue(torch.allclose(got.float(), f(self.a).float()))
        g = torch.compile(lambda x, w: torch.ops.kaas.mm(x, w, True) * 2, fullgraph=True, backend="aot_eager")
        self.assertEqual(g(self.a.float(), self.w.float()).shape, (8, 4))

    def test_patch_swaps_eligible_linears_and_unpatch_restores_them(self):
        kt = self.kt
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).half()
        own = model[2].forward
        model[2].forward = own  # an instance override patch must give back
        x = self.a
        want = model(x)
        eligible = kt._eligible
        kt._eligible = lambda m: isinstance(m, torch.nn.Linear) and m.weight.dtype is torch.float16  # CPU stands in
        try:
            kt.patch(model, prepare_kernels=False)
        finally:
            kt._eligible = eligible
        self.assertEqual(kt.patched(model), ["0", "2"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.assertTrue(torch.equal(model(x), want))
        kt.unpatch(model)
        self.assertEqual(kt.patched(model), [])
        self.assertNotIn("forward", model[0].__dict__)
        self.assertIs(model[2].__dict__["forward"], own)

    def test_a_cpu_model_is_left_alone(self):
        model = torch.nn.Linear(16, 4).half()
        self.kt.patch(model)
        self.assertEqual(self.kt.patched(model), [])


if __name__ == "__main__":
    unittest.main()
