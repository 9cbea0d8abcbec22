"""torch functions on dtorch tensors (issue 31, item 2): ``torch.<f>``, ``torch.nn.functional.<f>``
and ``torch.Tensor``'s Python-level methods called with dtorch tensors run dtorch's function of the
same name with the same arguments; the others are a TypeError naming ``dtorch.local_map``. The
model under test is ``torch_block.py``: eager torch code with no dtorch import."""

import unittest

import torch
import torch.nn.functional as TF

import dtorch
import dtorch.nn.functional as DF
from dtorch import Replicate, Shard
from dtorch.test.test_util import assert_replicas_equal, assert_tensor_allclose, assert_tensor_equal

import torch_block
from helpers import CPU1, CPU2, CPU2x2, CPU3, genuine_partial

TESTED_OPS = []  # the mapping, not an operator (every op it reaches has its own family tests)


def weights(d=8, h=16, t=5, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = {name: torch.randn(shape, generator=g).to(dtype) / 4 for name, shape in (
        ("wq", (d, d)), ("wk", (d, d)), ("wv", (d, d)), ("w1", (2 * d, h)), ("b1", (h,)), ("w2", (d, h)),
        ("b2", (d,)))}
    p["mask"] = torch.ones(t, t, dtype=torch.bool).tril()
    return p


def on_mesh(p, mesh, placements=None):
    """The weights on ``mesh``; ``placements``: {name: placements}, Replicate for the others."""
    placements = placements or {}
    return {k: dtorch.from_torch(v, mesh, placements.get(k, [Replicate()] * mesh.ndim)) for k, v in p.items()}


class TestTorchWrittenModel(unittest.TestCase):
    def run_block(self, mesh, x_placements, w_placements=None, dtype=torch.float32, batch=4, exact=False):
        p = weights(dtype=dtype)
        x = torch.randn(batch, 5, 8, generator=torch.Generator().manual_seed(1)).to(dtype)
        expected = torch_block.block(x, p)
        dx = dtorch.from_torch(x, mesh, x_placements)
        got = torch_block.block(dx, on_mesh(p, mesh, w_placements))
        self.assertIsInstance(got, dtorch.Tensor)
        if exact:
            assert_tensor_equal(self, got, expected)
        else:
            tol = 1e-5 if dtype == torch.float32 else 2e-2
            assert_tensor_allclose(self, got, expected, rtol=tol, atol=tol)
        assert_replicas_equal(self, got)
        return got

    def test_one_device_bit_identical(self):
        for dtype in (torch.float32, torch.bfloat16):
            for mesh in (None, CPU1):
                with self.subTest(dtype=dtype, mesh=mesh):
                    if mesh is None:
                        p = weights(dtype=dtype)
                        x = torch.randn(2, 5, 8).to(dtype)
                        got = torch_block.block(dtorch.from_torch(x), {k: dtorch.from_torch(v) for k, v in p.items()})
                        assert_tensor_equal(self, got, torch_block.block(x, p))
                    else:
                        self.run_block(mesh, [Replicate()], dtype=dtype, exact=True)

    def test_batch_sharded_1d_and_uneven(self):
        for mesh, batch in ((CPU2, 4), (CPU3, 4), (CPU3, 5)):
            for place in ([Shard(0)], [Replicate()]):
                with self.subTest(mesh=mesh, batch=batch, x=place):
                    got = self.run_block(mesh, place, batch=batch)
                    self.assertEqual(got.placements, place)

    def test_2d_mesh_data_and_tensor_parallel(self):
        self.run_block(CPU2x2, [Shard(0), Replicate()])
        # Tensor parallel on "tp": the MLP's hidden dim split, its second linear a Partial sum.
        tp = {"w1": [Replicate(), Shard(1)], "b1": [Replicate(), Shard(0)], "w2": [Replicate(), Shard(1)]}
        p = weights()
        x = torch.randn(4, 5, 16)
        expected = torch_block.mlp(x, p["w1"], p["b1"], p["w2"], p["b2"])
        dp = on_mesh(p, CPU2x2, tp)
        got = torch_block.mlp(dtorch.from_torch(x, CPU2x2, [Shard(0), Replicate()]), dp["w1"], dp["b1"], dp["w2"],
                              dp["b2"])
        self.assertEqual(got.placements, [Shard(0), dtorch.Partial()])
        assert_tensor_allclose(self, got, expected, rtol=1e-5, atol=1e-6)

    def test_genuine_partial_input(self):
        a = torch.randn(4, 6)
        x = genuine_partial(a, CPU2, [dtorch.Partial()])
        assert_tensor_allclose(self, torch.mul(x, 3.0), a * 3.0, rtol=1e-6, atol=1e-6)
        assert_tensor_allclose(self, torch.cat([x, x], dim=1), torch.cat([a, a], dim=1), rtol=1e-6, atol=1e-6)


class TestMapping(unittest.TestCase):
    def test_arguments_as_torch_takes_them(self):
        a = torch.randn(3, 4)
        x = dtorch.from_torch(a, CPU2, [Shard(1)])
        cases = [
            (lambda m, F, t: m.softmax(t, dim=0), None),
            (lambda m, F, t: F.softmax(t, 0, dtype=torch.float64), None),
            (lambda m, F, t: F.gelu(t, approximate="tanh"), None),
            (lambda m, F, t: m.where(t > 0, t, 0.0), None),
            (lambda m, F, t: m.stack((t, t), dim=1), None),
            (lambda m, F, t: m.sum(t, dim=0, keepdim=True), None),
            (lambda m, F, t: m.clamp(t, min=-0.5, max=0.5), None),
            (lambda m, F, t: m.transpose(t, 0, 1), None),
            (lambda m, F, t: F.layer_norm(t, (4,)), "R"),
            (lambda m, F, t: torch.Tensor.split(t, 1, 0)[2], None),
        ]
        for i, (call, need) in enumerate(cases):
            with self.subTest(case=i):
                t = x.redistribute(placements=[Replicate()]) if need == "R" else x
                expected = call(torch, TF, a)
                got = call(torch, TF, t)
                self.assertIsInstance(got, dtorch.Tensor)
                assert_tensor_equal(self, got, expected)
                assert_tensor_equal(self, got, call(dtorch, DF, t))  # the same dtorch function ran

    def test_unimplemented_names_local_map(self):
        x = dtorch.ones(2, 3, device_mesh=CPU2, placements=[Shard(0)])
        for call, name in ((lambda: torch.fft.fft(x), "torch.fft.fft"), (lambda: TF.hardshrink(x), "hardshrink"),
                           (lambda: torch.logdet(x), "torch.logdet")):
            with self.subTest(name=name):
                with self.assertRaisesRegex(TypeError, f"{name}.*dtorch.local_map"):
                    call()
        assert_tensor_equal(self, x + 1, torch.full((2, 3), 2.0))  # the runtime is fine

    def test_mixing_with_torch_tensors_is_refused(self):
        x = dtorch.ones(2, 3)
        with self.assertRaisesRegex(TypeError, "torch"):
            torch.cat([x, torch.ones(2, 3)])
        with self.assertRaisesRegex(TypeError, "torch"):
            torch.matmul(torch.ones(2, 2), x)

    def test_table_entries_are_dtorch_functions(self):
        from dtorch import _torch_function
        table = _torch_function.implemented()
        for torch_fn, dtorch_fn in ((torch.cat, dtorch.cat), (TF.gelu, DF.gelu), (torch.matmul, dtorch.matmul),
                                    (torch.softmax, dtorch.softmax), (TF.softmax, DF.softmax),
                                    (torch.where, dtorch.where), (TF.linear, DF.linear)):
            self.assertIs(table[torch_fn], dtorch_fn)
