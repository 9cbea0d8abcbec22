"""The original DTorch's small API forms (issue 31, item 4), each against torch: keyword forms of
view/reshape/repeat, gelu's approximate, getitem with an ellipsis inside tuples and None, and
dtorch.nn.functional._function_names."""

import unittest

import torch
import torch.nn.functional as TF

import dtorch
import dtorch.nn.functional as DF
from dtorch import Replicate, Shard
from dtorch.test.test_util import assert_replicas_equal, assert_tensor_allclose, assert_tensor_equal

from helpers import CPU1, CPU2, CPU2x2, CPU3

TESTED_OPS = []  # forms of operators that test_views.py and test_nn_functional.py test


def meshes():
    return [(None, None), (CPU1, [Replicate()]), (CPU2, [Shard(0)]), (CPU3, [Shard(0)]),
            (CPU2x2, [Shard(0), Replicate()])]


class TestKeywordForms(unittest.TestCase):
    def test_view_reshape_repeat_keywords(self):
        t = torch.arange(24.0).reshape(6, 4)
        calls = [lambda m: m.view(size=(6, 2, 2)), lambda m: m.view([6, -1]), lambda m: m.reshape(shape=(6, 4, 1)),
                 lambda m: m.repeat(repeats=(1, 2)), lambda m: m.repeat((2, 1, 1)), lambda m: m.repeat(1, 3)]
        for mesh, pl in meshes():
            x = dtorch.from_torch(t, mesh, pl) if mesh else dtorch.from_torch(t)
            for i, call in enumerate(calls):
                with self.subTest(mesh=mesh, call=i):
                    got = call(x)
                    assert_tensor_equal(self, got, call(t))
                    assert_replicas_equal(self, got)

    def test_both_forms_is_torchs_type_error(self):
        t = torch.ones(2, 3)
        x = dtorch.from_torch(t)
        for call in (lambda m: m.view(3, 2, size=(3, 2)), lambda m: m.repeat(1, 2, repeats=(1, 2))):
            with self.assertRaises(TypeError):
                call(t)
            with self.assertRaises(TypeError):
                call(x)
        with self.assertRaises(NotImplementedError):  # a bit-level reinterpretation dtorch does not do
            x.view(dtype=torch.int32)


class TestGeluAndIndexing(unittest.TestCase):
    def test_gelu_approximate(self):
        t = torch.randn(6, 5)
        for mesh, pl in meshes():
            x = dtorch.from_torch(t, mesh, pl) if mesh else dtorch.from_torch(t)
            for approx in ("none", "tanh"):
                with self.subTest(mesh=mesh, approximate=approx):
                    for got in (DF.gelu(x, approximate=approx), TF.gelu(x, approximate=approx)):
                        if mesh is None or mesh.size() == 1:
                            assert_tensor_equal(self, got, TF.gelu(t, approximate=approx))
                        else:
                            assert_tensor_allclose(self, got, TF.gelu(t, approximate=approx), rtol=1e-6, atol=1e-6)
        with self.assertRaises(type(_torch_error(lambda: TF.gelu(t, approximate="fast")))):
            DF.gelu(dtorch.from_torch(t), approximate="fast")

    def test_getitem_ellipsis_tuples(self):
        t = torch.arange(60.0).reshape(3, 4, 5)
        keys = [(..., 1), (None, ..., 0), (0, ..., None), (slice(None), ..., slice(1, 3)), (..., None, 2),
                (1, ...), (Ellipsis,)]
        for mesh, pl in ((None, None), (CPU2, [Shard(1)]), (CPU3, [Shard(0)])):
            x = dtorch.from_torch(t, mesh, pl) if mesh else dtorch.from_torch(t)
            for k in keys:
                with self.subTest(mesh=mesh, key=k):
                    if pl and any(isinstance(e, int) for e in k[:1]) and pl[0].dim == 0:
                        x = x.redistribute(placements=[Replicate()])
                    assert_tensor_equal(self, x[k], t[k])
        # Several ellipses: torch 2.13 takes them, the first spanning the dims and the others none.
        x = dtorch.from_torch(t, CPU2, [Shard(1)])
        for k in ((..., ...), (..., 1, ...), (0, ..., ...), (..., None, ...), (Ellipsis, slice(1, 3), Ellipsis)):
            with self.subTest(key=k):
                got = x.redistribute(placements=[Replicate()])[k] if 1 in k or 0 in k else x[k]
                assert_tensor_equal(self, got, t[k])


class TestFunctionNames(unittest.TestCase):
    def test_function_names(self):
        self.assertEqual(DF._function_names, DF.__all__)
        self.assertIn("gelu", DF._function_names)
        for name in DF._function_names:
            self.assertTrue(hasattr(TF, name), name)  # each one is torch.nn.functional's
            self.assertTrue(callable(getattr(DF, name)), name)


def _torch_error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the class is what we compare
        return e
    raise AssertionError("torch accepted the call")


if __name__ == "__main__":
    unittest.main()
