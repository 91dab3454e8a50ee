"""kaas_client.torch without a GPU: the fallbacks (warned once, or raised in strict mode),
patching and unpatching, the `kaas::mm` custom op (schema, fake tensor, autograd),
torch.compile(fullgraph=True) tracing through matmul/linear, and the per-kind records
that let a repeated call skip the checks (what misses them, what still re-checks).
Skipped without torch."""

import contextlib
import ctypes
import sys
import tempfile
import unittest
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixtures import WIN, entry, problem, ptx, write_bundle  # noqa: E402

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
        with self.assertRaisesRegex(KaasError, "give lock=, bundle= or service="):
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
        kt._S.kernels[("tn", 8, 32, 16)] = None  # a kernel of layer 0's shape (never run here)
        try:
            kt.patch(model, prepare_kernels=False)
            self.assertEqual(kt.patched(model), ["0"])  # layer 2's shape has no kernel: left alone
            kt.patch(model, prepare_kernels=False, every_layer=True)
        finally:
            kt._eligible = eligible
            kt.reset()
        self.assertEqual(kt.patched(model), ["0", "2"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.assertTrue(torch.equal(model(x), want))
        kt.unpatch(model)
        self.assertEqual(kt.patched(model), [])
        self.assertNotIn("forward", model[0].__dict__)
        self.assertIs(model[2].__dict__["forward"], own)

    def test_lock_traces_a_models_linear_problems(self):
        from kaas_client.locking import trace_problems
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).half()
        got = [p.path for p in trace_problems(model, torch.rand(2, 3, 16).half())]
        self.assertEqual(got, ["sm_90/f32/tn/6x32x16", "sm_90/f32/tn/6x4x32"])
        self.assertEqual(model[0]._forward_pre_hooks, {})  # hooks removed

    def test_a_cpu_model_is_left_alone(self):
        model = torch.nn.Linear(16, 4).half()
        self.kt.patch(model)
        self.assertEqual(self.kt.patched(model), [])


class FakePrepared:
    """Stands in for launcher.Prepared on CPU: computes the product of the tensors whose
    pointers it is given (fp32 accumulate, fp16 out) and writes it at C's address."""

    def __init__(self, layout, tensors):
        self.layout, self.tensors, self.calls = layout, tensors, []

    def run(self, a, b, c, stream):
        A, B = self.tensors[a], self.tensors[b]
        out = (A.float() @ (B.float().t() if self.layout == "tn" else B.float())).half().contiguous()
        ctypes.memmove(c, out.data_ptr(), out.numel() * 2)
        self.calls.append((a, b, c, stream))


@unittest.skipIf(torch is None, "needs torch (pip install torch)")
class KernelPathOnCPU(unittest.TestCase):
    """The kernel branch of matmul/linear/the op/compile, with CPU standing in for CUDA and
    a fake prepared kernel for tn 8x4x16."""

    KEY = ("tn", 8, 4, 16)

    def setUp(self):
        import kaas_client.torch as kt
        from kaas_client import dispatch
        self.kt, self.dp = kt, dispatch
        kt.reset()
        dispatch.ACCELERATOR = "cpu"
        self.stream = kt._stream
        kt._stream = lambda index: 0
        kt._S.classes[None] = kt._S.device_class = "FAKE"  # CPU tensors have device index None
        torch.manual_seed(0)
        self.x = (torch.rand(2, 4, 16) * 2 - 1).half()
        self.w = (torch.rand(4, 16) * 2 - 1).half()
        self.bias = (torch.rand(4) * 2 - 1).half()
        self.fake = FakePrepared("tn", {self.x.data_ptr(): self.x, self.w.data_ptr(): self.w})
        slot = kt._Slot(None)
        slot.prepared = self.fake
        kt._S.kernels[self.KEY] = None
        kt._S.slots[(None, self.KEY)] = slot

    def tearDown(self):
        self.dp.ACCELERATOR = "cuda"
        self.kt._stream = self.stream
        self.kt.reset()
        self.kt.set_strict(False)

    def want(self, bias=None):
        return torch.nn.functional.linear(self.x.float(), self.w.float(), None if bias is None else bias.float())

    def test_linear_and_matmul_launch_the_kernel_and_add_the_bias_after(self):
        kt = self.kt
        kt.set_strict(True)  # a fallback would raise
        y = kt.linear(self.x, self.w, self.bias)
        self.assertEqual(y.shape, (2, 4, 4))
        self.assertLess(float((y.float() - self.want(self.bias)).abs().max()), 2e-2)
        z = kt.matmul(self.x, self.w.t())
        self.assertLess(float((z.float() - self.want()).abs().max()), 1e-2)
        self.assertEqual(len(self.fake.calls), 2)
        self.assertEqual(self.fake.calls[0][:2], (self.x.data_ptr(), self.w.data_ptr()))

    def test_a_problem_without_a_kernel_runs_torch_warned_once_or_raises_in_strict(self):
        from kaas_client.errors import FallbackError
        x = torch.rand(3, 16).half()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            self.kt.linear(x, self.w)
            self.kt.linear(x, self.w)
        self.assertEqual([str(m.message).count("tn 3x4x16") for m in w], [1])
        self.kt.set_strict(True)
        with self.assertRaises(FallbackError) as cm:
            self.kt.linear(x, self.w)
        self.assertEqual(cm.exception.reason, "no_kernel")
        self.assertEqual(self.fake.calls, [])

    def test_with_grad_the_kernel_runs_through_the_op_and_gradients_are_torchs(self):
        w = self.w.clone().requires_grad_()
        self.fake.tensors[w.data_ptr()] = w.detach()
        self.kt.linear(self.x, w).float().sum().backward()
        self.assertEqual(len(self.fake.calls), 1)
        g = w.grad.clone()
        w.grad = None
        torch.nn.functional.linear(self.x, w).float().sum().backward()
        self.assertTrue(torch.allclose(g, w.grad))

    def test_compile_fullgraph_puts_the_op_in_the_graph_and_runs_the_kernel(self):
        kt, seen = self.kt, []

        def backend(gm, inputs):
            seen.extend(str(n.target) for n in gm.graph.nodes if "kaas" in str(n.target))
            return gm.forward

        torch._dynamo.reset()
        y = torch.compile(lambda x: kt.linear(x, self.w, self.bias), fullgraph=True, backend=backend)(self.x)
        torch._dynamo.reset()
        self.assertEqual(len(seen), 1)
        self.assertEqual(len(self.fake.calls), 1)
        self.assertLess(float((y.float() - self.want(self.bias)).abs().max()), 2e-2)

    @contextlib.contextmanager
    def no_planning(self):
        """The full path raises inside: a call that still works went by its recorded outcome."""
        dp, saved = self.dp, (self.dp.plan_linear, self.dp.plan_mm)

        def planned(*a, **k):
            raise AssertionError("planned again")

        dp.plan_linear = dp.plan_mm = planned
        try:
            yield
        finally:
            dp.plan_linear, dp.plan_mm = saved

    def test_a_second_call_of_a_kind_is_one_lookup_and_launches_the_same(self):
        kt = self.kt
        kt.set_strict(True)
        first = kt.linear(self.x, self.w, self.bias)
        first_mm = kt.matmul(self.x, self.w.t())
        self.assertEqual((len(kt._S.fast_linear), len(kt._S.fast_mm)), (1, 1))
        with self.no_planning():
            again = kt.linear(self.x, self.w, self.bias)
            again_mm = kt.matmul(self.x, self.w.t())
        self.assertTrue(torch.equal(first, again) and torch.equal(first_mm, again_mm))
        self.assertEqual((again.shape, again_mm.shape), ((2, 4, 4), (2, 4, 4)))
        self.assertTrue(again.is_contiguous() and again._base is None)  # allocated in its shape, no view
        self.assertEqual([c[:2] for c in self.fake.calls], [(self.x.data_ptr(), self.w.data_ptr())] * 4)
        self.assertEqual({c[3] for c in self.fake.calls}, {0})  # the stream kt._stream gave

    def test_another_stride_dtype_or_alignment_misses_the_record(self):
        from kaas_client.errors import FallbackError
        kt = self.kt
        kt.set_strict(True)
        kt.linear(self.x, self.w)
        kt.matmul(self.x, self.w.t())
        odd = self.x.transpose(0, 1).contiguous().transpose(0, 1)  # same shape, other strides
        buf = torch.empty(self.x.numel() + 8, dtype=torch.float16)
        shifted = buf[1:1 + self.x.numel()].view(self.x.shape)  # same shape, strides, dtype: data 2 bytes off
        shifted.copy_(self.x)
        cases = [(odd, "layout"), (self.x.float(), "dtype"), (shifted, "alignment")]
        for x, reason in cases:
            with self.subTest(reason), self.no_planning():
                self.assertRaisesRegex(AssertionError, "planned again", kt.linear, x, self.w)
                self.assertRaisesRegex(AssertionError, "planned again", kt.matmul, x, self.w.t())
            with self.assertRaises(FallbackError) as cm:
                kt.linear(x, self.w)
            self.assertEqual(cm.exception.reason, reason)
        with self.no_planning():  # the weight's strides are in the key too
            self.assertRaisesRegex(AssertionError, "planned again", kt.matmul, self.x, self.w.t().contiguous())
        self.assertEqual(len(self.fake.calls), 2)
        with self.assertRaises(FallbackError) as cm:  # a bias of another dtype: the call's own, on a recorded kind
            kt.linear(self.x, self.w, self.bias.float())
        self.assertEqual(cm.exception.reason, "dtype")

    def test_a_recorded_torch_outcome_runs_torch_at_once_and_still_raises_in_strict_mode(self):
        from kaas_client.errors import FallbackError
        kt, x = self.kt, torch.rand(3, 16).half()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            kt.linear(x, self.w)
            self.assertEqual(list(kt._S.fast_linear.values()), [kt._TORCH])
            with self.no_planning():
                got = kt.linear(x, self.w, self.bias)
        self.assertEqual(len(w), 1)
        self.assertTrue(torch.equal(got, torch.nn.functional.linear(x, self.w, self.bias)))
        kt.set_strict(True)
        with self.assertRaises(FallbackError) as cm:
            kt.linear(x, self.w)
        self.assertEqual(cm.exception.reason, "no_kernel")
        self.assertEqual(self.fake.calls, [])

    def test_autograd_on_a_recorded_kind_goes_through_the_op(self):
        kt = self.kt
        kt.linear(self.x, self.w)
        w = self.w.clone().requires_grad_()  # same kind: hits the record, but needs the op's gradient
        self.fake.tensors[w.data_ptr()] = w.detach()
        y = kt.linear(self.x, w)
        self.assertTrue(y.requires_grad)
        y.float().sum().backward()
        g = w.grad.clone()
        w.grad = None
        torch.nn.functional.linear(self.x, w).float().sum().backward()
        self.assertTrue(torch.allclose(g, w.grad))
        with torch.no_grad():
            self.assertFalse(kt.linear(self.x, w).requires_grad)
        self.assertEqual(len(self.fake.calls), 3)

    def test_reset_forgets_the_records(self):
        kt = self.kt
        kt.linear(self.x, self.w)
        kt.matmul(self.x, self.w.t())
        self.assertTrue(kt._S.fast_linear and kt._S.fast_mm)
        kt.reset()
        self.assertEqual((kt._S.fast_linear, kt._S.fast_mm, kt._S.slots), ({}, {}, {}))

    def test_use_a_lock_matches_the_device_class(self):
        from kaas_client import lock as make_lock
        from kaas_client.errors import LockError
        kt, tmp = self.kt, Path(tempfile.mkdtemp())
        text, p = ptx("k_lock"), problem(m=8, n=4, k=16)
        bundle = write_bundle(tmp / "kernels", [entry(text, p, speedups=WIN, entry_name="k_lock")], [], [text])
        make_lock(["tn/8x4x16", "tn/9x4x16"], source=str(bundle), device_class="H100-SXM", path=tmp / "kaas.lock", cache=tmp / "c")
        saved = torch.cuda.get_device_capability, torch.cuda.get_device_name
        torch.cuda.get_device_capability, torch.cuda.get_device_name = (lambda i=None: (9, 0)), (lambda i=None: "NVIDIA H100 80GB HBM3")
        try:
            kt.reset()
            self.assertEqual(kt.use(lock=tmp / "kaas.lock", cache=tmp / "c", device=0), 1)
            self.assertEqual(kt.problems(), [self.KEY])
            kt.reset()
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                self.assertEqual(kt.use(lock=tmp / "kaas.lock", cache=tmp / "c", device=0, device_class="H200"), 0)
            self.assertIn("resolved for H100-SXM", str(w[0].message))
            kt.reset()
            with self.assertRaisesRegex(LockError, "this GPU .* is H200"):
                kt.use(lock=tmp / "kaas.lock", cache=tmp / "c", device=0, device_class="H200", strict=True)
        finally:
            torch.cuda.get_device_capability, torch.cuda.get_device_name = saved


if __name__ == "__main__":
    unittest.main()
