"""Sorting, scans and data-dependent shapes against eager torch: cumsum, sort, argsort, topk, nonzero
(and x[mask], which synchronises the same way).

One device: torch.equal for every dtype torch supports on CPU (a kernel torch lacks fails as a KernelError,
a RuntimeError, at the read). Meshes (2 and 3 devices with uneven shapes, 2x2 with nested shards): every
placement combination, with the output placements the ops document and exact values; the rejected ones
raise PlacementError. Ties: values are compared exactly; indices where they are unique, or with
stable=True (then the order of equal values is defined).
"""

import unittest

import torch

import dtorch
from dtorch import Partial, PlacementError, Replicate, Shard
from dtorch.test.test_util import assert_replicas_equal

from helpers import CPU1, CPU2, CPU3, CPU2x2, int_valued
from helpers import assert_equal_everywhere as assert_tensor_equal  # and every replica bitwise
from test_views import dist, shard_placements

# Operators this module tests against eager PyTorch (tests/python/test_registry.py).
TESTED_OPS = {"cumsum", "sort", "argsort", "topk", "nonzero"}

R, P = Replicate(), Partial()
MESHES = (CPU2, CPU3, CPU2x2)
ALL_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
              torch.int8, torch.uint8, torch.bool)


def unique_values(*shape, seed=0):
    """Distinct float values (a permutation), so every sort order and top-k index is unique."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n, generator=g).to(torch.float32) - n / 2).reshape(shape)


def norm_pl(mesh, placements):
    """The placements dtorch stores: a mesh dim of size 1 is Replicate."""
    return [R if mesh.shape[md] == 1 else p for md, p in enumerate(placements)]


def along_expected(mesh, placements, dim, keep):
    """Documented output placements of an op along `dim`: a Shard(dim) stays (keep) or becomes Replicate;
    None when the op must raise (Partial, for ops that do not keep it)."""
    out = []
    for p in norm_pl(mesh, placements):
        if p.is_partial() and not keep:
            return None
        out.append(R if (p.is_shard() and p.dim == dim and not keep) else p)
    return out


def torch_or_error(fn):
    """(result, None) or (None, exception type) for a torch call."""
    try:
        return fn(), None
    except RuntimeError as e:  # e.g. topk of bool, which torch has no CPU kernel for
        return None, type(e)


class SortScanCase(unittest.TestCase):
    def assertPlacementError(self, fn):
        with self.assertRaises(PlacementError) as cm:
            fn()
        self.assertIn("redistribute", str(cm.exception))

    def check_pair(self, got, ref, indices_too=True):
        self.assertEqual(type(got), type(ref))
        if ref.values.is_floating_point() and bool(ref.values.isnan().any()):
            # NaN sorts last (first when descending) in torch; compare exactly, NaN positions included.
            assert_replicas_equal(self, got.values)
            torch.testing.assert_close(got.values.to_torch(), ref.values, rtol=0, atol=0, equal_nan=True)
        else:
            assert_tensor_equal(self, got.values, ref.values)
        if indices_too:
            assert_tensor_equal(self, got.indices, ref.indices)


class TestCumsum(SortScanCase):
    def test_one_device_dtypes(self):
        base = int_valued(4, 6, low=-3, high=4)
        for dtype in ALL_DTYPES:
            t = base.to(dtype)
            x = dist(t, CPU1, None)
            for dim in (0, 1, -1):
                with self.subTest(dtype=dtype, dim=dim):
                    ref = torch.cumsum(t, dim)
                    y = dtorch.cumsum(x, dim)
                    self.assertEqual(y.dtype, ref.dtype)
                    assert_tensor_equal(self, y, ref)
                    assert_tensor_equal(self, x.cumsum(dim=dim), ref)
        # Floats accumulate in order: exact on one device.
        t = torch.randn(3, 50, generator=torch.Generator().manual_seed(1))
        assert_tensor_equal(self, dist(t, CPU1, None).cumsum(1), t.cumsum(1))

    def test_dtype_argument(self):
        t = int_valued(3, 5)
        for src, dtype in ((torch.float32, torch.float64), (torch.int64, torch.float32), (torch.bool, torch.int32),
                           (torch.float32, torch.int64), (torch.int32, torch.int16), (torch.float64, torch.bfloat16)):
            with self.subTest(src=src, dtype=dtype):
                ts = t.to(src)
                ref = torch.cumsum(ts, 1, dtype=dtype)
                y = dtorch.cumsum(dist(ts, CPU1, None), 1, dtype=dtype)
                self.assertEqual(y.dtype, dtype)
                assert_tensor_equal(self, y, ref)

    def test_shapes_and_noncontiguous(self):
        t = torch.randn(5, 6, 4, generator=torch.Generator().manual_seed(2))
        for src in (t.transpose(0, 2), t[:, ::2, 1:], t.permute(1, 0, 2)[2:]):
            for dim in range(3):
                assert_tensor_equal(self, dist(src, CPU1, None).cumsum(dim), src.cumsum(dim))
        for src, dim in ((torch.tensor(2.5), 0), (torch.tensor(3), -1), (torch.zeros(0, 4), 0), (torch.zeros(3, 0), 1)):
            with self.subTest(shape=src.shape, dim=dim):
                assert_tensor_equal(self, dist(src, CPU1, None).cumsum(dim), src.cumsum(dim))

    def test_meshes_every_placement(self):
        for mesh in MESHES:
            shape = (5, 7) if mesh.ndim == 1 else (5, 3)
            t = int_valued(*shape)
            for pl in shard_placements(mesh, 2):
                for dim in (0, 1):
                    with self.subTest(mesh=mesh, pl=pl, dim=dim):
                        x = dist(t, mesh, pl)
                        y = x.cumsum(dim)
                        self.assertEqual(y.placements, along_expected(mesh, pl, dim, keep=True))
                        # Integer-valued floats: Partial sums are exact too.
                        assert_tensor_equal(self, y, t.cumsum(dim))

    def test_sharded_dim_is_exact(self):
        # The scan over a gathered dim is torch's own cumsum of the whole dim, bit for bit.
        t = torch.randn(4, 37, generator=torch.Generator().manual_seed(3))
        for mesh, pl in ((CPU2, [Shard(1)]), (CPU3, [Shard(1)]), (CPU2x2, [Shard(1), Shard(1)]),
                         (CPU2x2, [Shard(0), Shard(1)]), (CPU2x2, [Shard(1), Shard(0)])):
            with self.subTest(mesh=mesh, pl=pl):
                y = dist(t, mesh, pl).cumsum(1)
                self.assertEqual(y.placements, pl)
                assert_tensor_equal(self, y, t.cumsum(1))

    def test_dtypes_on_mesh(self):
        t = int_valued(5, 4, low=0, high=3)
        for dtype in (torch.int64, torch.int32, torch.uint8, torch.bool, torch.bfloat16, torch.float64):
            for pl in ([Shard(0)], [Shard(1)]):
                with self.subTest(dtype=dtype, pl=pl):
                    td = t.to(dtype)
                    assert_tensor_equal(self, dist(td, CPU3, pl).cumsum(0), td.cumsum(0))

    def test_partial(self):
        t = torch.randn(4, 6, generator=torch.Generator().manual_seed(4))
        y = dist(t, CPU2, [P]).cumsum(1)
        self.assertEqual(y.placements, [P])
        self.assertTrue(torch.allclose(y.to_torch(), t.cumsum(1)))
        # Integers stay exact; floats summed into an integer dtype piece by piece are rejected.
        ti = int_valued(4, 6).long()
        assert_tensor_equal(self, dist(ti, CPU3, [P]).cumsum(0, dtype=torch.int32), ti.cumsum(0, dtype=torch.int32))
        self.assertPlacementError(lambda: dist(t, CPU2, [P]).cumsum(0, dtype=torch.int64))
        self.assertPlacementError(lambda: dist(t, CPU2x2, [Shard(0), P]).cumsum(1, dtype=torch.int32))

    def test_errors(self):
        x = dist(torch.ones(3, 4), CPU2, [Shard(0)])
        for dim in (2, -3):
            with self.assertRaisesRegex(IndexError, "Dimension out of range"):
                x.cumsum(dim)
        with self.assertRaises(IndexError):
            dist(torch.tensor(1.0), CPU1, None).cumsum(1)
        with self.assertRaises(TypeError):
            x.cumsum(1.0)
        with self.assertRaises(TypeError):
            dtorch.cumsum(torch.ones(3), 0)


class TestSort(SortScanCase):
    def test_one_device_dtypes(self):
        base = int_valued(4, 9, low=-3, high=4)  # many ties
        base[0, 0] = float("nan")
        base[2, 3] = float("nan")
        for dtype in ALL_DTYPES:
            t = base.to(dtype) if dtype.is_floating_point else torch.nan_to_num(base).to(dtype)
            x = dist(t, CPU1, None)
            for dim, descending, stable in ((1, False, False), (0, True, False), (-1, True, True), (0, False, True)):
                with self.subTest(dtype=dtype, dim=dim, descending=descending, stable=stable):
                    ref = torch.sort(t, dim=dim, descending=descending, stable=stable)
                    # The same ATen call on the same data: ties come out in torch's order.
                    self.check_pair(dtorch.sort(x, dim=dim, descending=descending, stable=stable), ref)
                    self.check_pair(x.sort(dim, descending, stable=stable), ref)
                    assert_tensor_equal(self, x.argsort(dim, descending, stable=stable),
                                        torch.argsort(t, dim=dim, descending=descending, stable=stable))
        t = torch.tensor([3.0, 1.0, 2.0])
        self.check_pair(dtorch.sort(dist(t, CPU1, None)), torch.sort(t))
        assert_tensor_equal(self, dtorch.argsort(dist(t, CPU1, None), descending=True), torch.argsort(t, descending=True))

    def test_shapes_and_noncontiguous(self):
        t = unique_values(5, 6, 4)
        for src in (t.transpose(0, 2), t[:, ::2, 1:], -t):
            for dim in range(3):
                self.check_pair(dist(src, CPU1, None).sort(dim), src.sort(dim))
        for src in (torch.tensor(2.5), torch.zeros(0, 3), torch.ones(3, 0)):
            for dim in (0, -1):
                with self.subTest(shape=src.shape, dim=dim):
                    self.check_pair(dist(src, CPU1, None).sort(dim), src.sort(dim))

    def test_meshes_every_placement(self):
        for mesh in MESHES:
            shape = (5, 7) if mesh.ndim == 1 else (5, 3)
            t = unique_values(*shape)
            ties = int_valued(*shape, low=0, high=3)
            for pl in shard_placements(mesh, 2):
                for dim in (0, 1):
                    with self.subTest(mesh=mesh, pl=pl, dim=dim):
                        expected = along_expected(mesh, pl, dim, keep=False)
                        x, xt = dist(t, mesh, pl), dist(ties, mesh, pl)
                        if expected is None:
                            self.assertPlacementError(lambda: x.sort(dim))
                            self.assertPlacementError(lambda: x.argsort(dim))
                            continue
                        r = x.sort(dim, descending=True)
                        self.assertEqual(r.values.placements, expected)
                        self.assertEqual(r.indices.placements, expected)
                        self.check_pair(r, t.sort(dim, descending=True))
                        self.check_pair(xt.sort(dim, stable=True), ties.sort(dim=dim, stable=True))
                        a = x.argsort(dim)
                        self.assertEqual(a.placements, expected)
                        assert_tensor_equal(self, a, t.argsort(dim))

    def test_3d_nested(self):
        t = unique_values(3, 5, 4)
        for pl in ([Shard(1), Shard(1)], [Shard(2), Shard(1)], [Shard(0), Shard(2)]):
            for dim in (1, 2):
                with self.subTest(pl=pl, dim=dim):
                    r = dist(t, CPU2x2, pl).sort(dim)
                    self.assertEqual(r.values.placements, along_expected(CPU2x2, pl, dim, keep=False))
                    self.check_pair(r, t.sort(dim))

    def test_noncontiguous_on_meshes(self):
        base = unique_values(7, 5, seed=3)
        for src in (base.t(), base[1::2], base.t()[:, 1:6]):
            for mesh, pl in ((CPU3, [Shard(0)]), (CPU2, [Shard(1)]), (CPU2x2, [Shard(1), Shard(0)])):
                with self.subTest(shape=src.shape, mesh=mesh, pl=pl):
                    x = dist(src, mesh, pl)
                    self.check_pair(x.sort(1), src.sort(1))
                    self.check_pair(x.topk(2, dim=0), src.topk(2, dim=0))
                    assert_tensor_equal(self, x.cumsum(0), src.cumsum(0))
                    assert_tensor_equal(self, (x > 0).nonzero(), (src > 0).nonzero())

    def test_dtypes_on_mesh(self):
        t = int_valued(5, 6, low=0, high=4)
        for dtype in (torch.int64, torch.uint8, torch.bool, torch.float16, torch.bfloat16):
            for pl in ([Shard(0)], [Shard(1)]):
                with self.subTest(dtype=dtype, pl=pl):
                    td = t.to(dtype)
                    self.check_pair(dist(td, CPU3, pl).sort(1, stable=True), td.sort(dim=1, stable=True))

    def test_errors(self):
        x = dist(torch.ones(3, 4), CPU2, [Shard(0)])
        with self.assertRaisesRegex(IndexError, "Dimension out of range"):
            x.sort(2)
        with self.assertRaises(IndexError):
            dtorch.argsort(x, -3)
        with self.assertRaises(TypeError):
            x.sort(dim=None)


class TestTopk(SortScanCase):
    def test_one_device_dtypes(self):
        t = unique_values(4, 9)
        for dtype in ALL_DTYPES:
            td = t.to(dtype) if dtype != torch.uint8 else (t + 20).to(dtype)
            x = dist(td, CPU1, None)
            for k, dim, largest, srt in ((3, 1, True, True), (2, 0, False, True), (9, -1, True, True),
                                         (0, 1, True, True), (1, 0, False, False)):
                with self.subTest(dtype=dtype, k=k, dim=dim, largest=largest, sorted=srt):
                    ref, err = torch_or_error(lambda: torch.topk(td, k, dim, largest, srt))
                    if err is not None:  # raised at the call, as torch does
                        with self.assertRaises(err):
                            dtorch.topk(x, k, dim, largest, srt)
                        continue
                    got = dtorch.topk(x, k, dim, largest, srt)
                    # bool/int8 casts create ties; indices compared only where values are unique
                    self.check_pair(got, ref, indices_too=dtype not in (torch.bool, torch.int8))
                    self.check_pair(x.topk(k, dim=dim, largest=largest, sorted=srt), ref,
                                    indices_too=dtype not in (torch.bool, torch.int8))

    def test_ties_one_device(self):
        # The same ATen call on one device gives torch's indices even with ties.
        t = int_valued(3, 10, low=0, high=3)
        self.check_pair(dist(t, CPU1, None).topk(4), t.topk(4))

    def test_shapes(self):
        t = unique_values(5, 6, 4)
        for src in (t.transpose(0, 2), t[:, ::2, 1:]):
            self.check_pair(dist(src, CPU1, None).topk(2, dim=1), src.topk(2, dim=1))
        s = torch.tensor(2.5)
        self.check_pair(dist(s, CPU1, None).topk(1), s.topk(1))
        e = torch.zeros(0, 4)
        self.check_pair(dist(e, CPU1, None).topk(2), e.topk(2))

    def test_meshes_every_placement(self):
        for mesh in MESHES:
            shape = (5, 7) if mesh.ndim == 1 else (5, 3)
            t = unique_values(*shape, seed=1)
            for pl in shard_placements(mesh, 2):
                for dim, k in ((0, 2), (1, 3)):
                    with self.subTest(mesh=mesh, pl=pl, dim=dim):
                        expected = along_expected(mesh, pl, dim, keep=False)
                        x = dist(t, mesh, pl)
                        if expected is None:
                            self.assertPlacementError(lambda: x.topk(k, dim))
                            continue
                        r = x.topk(k, dim)
                        self.assertEqual(r.values.shape, t.topk(k, dim).values.shape)
                        self.assertEqual(r.values.placements, expected)
                        self.assertEqual(r.indices.placements, expected)
                        self.check_pair(r, t.topk(k, dim))
                        self.check_pair(x.topk(k, dim, largest=False), t.topk(k, dim, largest=False))

    def test_errors(self):
        x = dist(torch.ones(3, 4), CPU2, [Shard(0)])
        for k in (5, -1):
            with self.assertRaisesRegex(RuntimeError, "selected index k out of range"):
                x.topk(k)
        with self.assertRaisesRegex(RuntimeError, "selected index k out of range"):
            x.topk(4, dim=0)
        with self.assertRaisesRegex(IndexError, "Dimension out of range"):
            x.topk(1, dim=2)
        with self.assertRaises(TypeError):
            x.topk(1.5)


class TestNonzero(SortScanCase):
    def test_one_device_dtypes(self):
        base = int_valued(4, 5, low=-1, high=2)
        for dtype in ALL_DTYPES:
            t = base.to(dtype)
            with self.subTest(dtype=dtype):
                x = dist(t, CPU1, None)
                assert_tensor_equal(self, x.nonzero(), t.nonzero())
                assert_tensor_equal(self, list(dtorch.nonzero(x, as_tuple=True)), list(t.nonzero(as_tuple=True)))
        # -0.0 is zero, NaN is not; half and bfloat16 too.
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            t = torch.tensor([0.0, -0.0, float("nan"), 1e-30, -2.0, float("-inf")], dtype=dtype)
            assert_tensor_equal(self, dist(t, CPU1, None).nonzero(), t.nonzero())

    def test_shapes(self):
        for t in (torch.tensor(3.0), torch.tensor(0), torch.zeros(0, 3), torch.zeros(2, 3), torch.ones(2, 1, 3),
                  int_valued(2, 3, 2, 2, low=-1, high=2), torch.arange(12).reshape(3, 4).t()):
            with self.subTest(shape=t.shape):
                x = dist(t, CPU1, None)
                assert_tensor_equal(self, x.nonzero(), t.nonzero())
                got, ref = x.nonzero(as_tuple=True), t.nonzero(as_tuple=True)
                self.assertEqual(len(got), len(ref))
                assert_tensor_equal(self, list(got), list(ref))

    def test_meshes_every_placement(self):
        for mesh in MESHES:
            t = int_valued(5, 7, low=-1, high=2)
            for pl in shard_placements(mesh, 2):
                with self.subTest(mesh=mesh, pl=pl):
                    y = dist(t, mesh, pl).nonzero()
                    self.assertEqual(y.device_mesh, mesh)
                    self.assertEqual(y.placements, [R] * mesh.ndim)
                    assert_tensor_equal(self, y, t.nonzero())
                    # Results feed further ops on the same mesh.
                    assert_tensor_equal(self, (y * 2).sum(), t.nonzero().mul(2).sum())

    def test_after_ops_and_bool(self):
        t = torch.randn(6, 5, generator=torch.Generator().manual_seed(5))
        x = dist(t, CPU3, [Shard(0)])
        assert_tensor_equal(self, (x > 0).nonzero(), (t > 0).nonzero())
        assert_tensor_equal(self, list((x > 0.5).nonzero(as_tuple=True)), list((t > 0.5).nonzero(as_tuple=True)))

    def test_mask_indexing_two_devices(self):
        # x[mask] synchronises the same way: the mask's nonzero positions decide the shape.
        t = int_valued(6, 5)
        mask2 = t > 0
        mask_rows = torch.tensor([True, False, True, True, False, True])
        mask_cols = torch.tensor([False, True, True, False, True])
        for pl_x in ([R], [Shard(1)], [P]):
            for pl_m in ([R], [Shard(0)], [Shard(1)]):
                with self.subTest(x=pl_x, mask=pl_m):
                    x = dist(t, CPU2, pl_x)
                    m = dist(mask2, CPU2, pl_m)
                    if pl_x[0].is_shard():
                        # A full 2-D mask indexes the sharded dim too.
                        self.assertPlacementError(lambda: x[m])
                    else:
                        assert_tensor_equal(self, x[m], t[mask2])
                    if pl_m[0].is_shard() and pl_m[0].dim == 1:
                        continue
                    mr = dist(mask_rows, CPU2, [R] if pl_m[0].is_replicate() else [Shard(0)])
                    assert_tensor_equal(self, x[mr], t[mask_rows])
            x = dist(t, CPU2, pl_x)
            if not (pl_x[0].is_shard() and pl_x[0].dim == 1):
                assert_tensor_equal(self, x[:, mask_cols], t[:, mask_cols])
                assert_tensor_equal(self, x[:, dist(mask_cols, CPU2, [Shard(0)])], t[:, mask_cols])

    def test_errors(self):
        with self.assertRaises(TypeError):
            dtorch.nonzero(torch.ones(3))


if __name__ == "__main__":
    unittest.main()
