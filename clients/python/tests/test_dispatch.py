"""Which torch calls become which kaas problems, and why others do not (duck-typed fake
tensors: no torch needed), plus the device-class names the service uses."""

import unittest
from typing import NamedTuple

from kaas_client import dispatch as dp
from kaas_client.dispatch import device_class, plan_linear, plan_mm

F16, F32 = object(), object()


class Dev(NamedTuple):
    type: str
    index: int


CUDA0, CUDA1, CPU = Dev("cuda", 0), Dev("cuda", 1), Dev("cpu", 0)


class T:
    """A row-major tensor (or a transpose view of one) with the attributes dispatch reads."""

    def __init__(self, *shape, dtype=F16, device=CUDA0, ptr=0x10000, strides=None):
        self.shape, self.dtype, self.device, self.ptr = tuple(shape), dtype, device, ptr
        if strides is None:
            strides, acc = [], 1
            for d in reversed(shape):
                strides.insert(0, acc)
                acc *= d
        self._strides = tuple(strides)

    def dim(self): return len(self.shape)  # noqa: E704
    def stride(self): return self._strides  # noqa: E704
    def data_ptr(self): return self.ptr  # noqa: E704

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def is_contiguous(self):
        return self._strides == T(*self.shape).stride()

    def t(self):
        return T(*reversed(self.shape), dtype=self.dtype, device=self.device, ptr=self.ptr, strides=tuple(reversed(self._strides)))

    def reshape(self, *shape):
        assert self.is_contiguous()
        return T(*shape, dtype=self.dtype, device=self.device, ptr=self.ptr)


class Plans(unittest.TestCase):
    def test_matmul_of_row_major_b_is_nn(self):
        p = plan_mm(T(64, 512), T(512, 1024), F16)
        self.assertEqual(p.key, ("nn", 64, 1024, 512))
        self.assertEqual(p.out_shape, (64, 1024))

    def test_matmul_of_a_transposed_weight_is_tn_on_the_weight_storage(self):
        w = T(1024, 512, ptr=0x20000)  # N×K, as nn.Linear stores it
        p = plan_mm(T(64, 512), w.t(), F16)
        self.assertEqual(p.key, ("tn", 64, 1024, 512))
        self.assertEqual(p.b.shape, (1024, 512))
        self.assertEqual(p.b.data_ptr(), 0x20000)

    def test_batched_activations_flatten_to_m_rows(self):
        p = plan_linear(T(2, 32, 4096), T(1024, 4096), F16)
        self.assertEqual(p.key, ("tn", 64, 1024, 4096))
        self.assertEqual(p.a.shape, (64, 4096))
        self.assertEqual(p.out_shape, (2, 32, 1024))

    def test_each_fault_has_its_reason(self):
        cases = [
            (plan_mm(T(64, 64, dtype=F32), T(64, 64), F16), dp.DTYPE),
            (plan_linear(T(64, 64), T(64, 64, dtype=F32), F16), dp.DTYPE),
            (plan_mm(T(64, 64, device=CPU), T(64, 64, device=CPU), F16), dp.DEVICE),
            (plan_mm(T(64, 64), T(64, 64, device=CUDA1), F16), dp.DEVICE),
            (plan_mm(T(64, 64), T(2, 64, 64), F16), dp.LAYOUT),
            (plan_mm(T(64, 64).t().t(), T(64, 128, strides=(256, 2)), F16), dp.LAYOUT),
            (plan_mm(T(128, 64).t(), T(128, 64), F16), dp.LAYOUT),  # a not row-major
            (plan_linear(T(64, 64), T(64, 128).t(), F16), dp.LAYOUT),  # weight not row-major
            (plan_mm(T(64, 64, ptr=0x10008), T(64, 64), F16), dp.ALIGNMENT),
            (plan_linear(T(64, 64), T(64, 64, ptr=0x10002), F16), dp.ALIGNMENT),
            (plan_mm(T(64, 32), T(64, 64), F16), dp.SHAPE),
            (plan_linear(T(0, 64), T(64, 64), F16), dp.SHAPE),
        ]
        for got, want in cases:
            self.assertEqual(got, want)
            self.assertIn(want, dp.REASONS)

    def test_alignment_is_not_checked_while_tracing(self):
        p = plan_mm(T(64, 64, ptr=0x10008), T(64, 64), F16, check_pointers=False)
        self.assertEqual(p.key, ("nn", 64, 64, 64))

    def test_every_reason_is_described(self):
        for r in dp.REASONS:
            self.assertNotEqual(dp.describe(r), r)
        self.assertTrue(dp.describe(dp.NO_KERNEL, "tn 1x4096x4096").endswith(": tn 1x4096x4096"))


class DeviceClasses(unittest.TestCase):
    def test_names_as_the_service_gives_them(self):
        for name, want in [("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H100 PCIe", "H100-PCIe"),
                           ("NVIDIA H100 NVL", "H100-NVL"), ("NVIDIA H200", "H200"), ("NVIDIA H200 NVL", "H200-NVL"),
                           ("NVIDIA A100-SXM4-80GB", "A100-SXM"), ("NVIDIA A100 80GB PCIe", "A100-PCIe"),
                           ("NVIDIA GeForce RTX 4090", "GeForce-RTX-4090"), ("  ", "unknown")]:
            self.assertEqual(device_class(name), want, name)


if __name__ == "__main__":
    unittest.main()
