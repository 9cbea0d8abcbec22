"""dtorch.test.test_util: the assertions pass on equal values and fail, printing both, otherwise."""

import unittest

import torch

import dtorch
from dtorch import Shard
from dtorch.test.test_util import assert_tensor_allclose, assert_tensor_equal

from helpers import CPU2


class TestAssertions(unittest.TestCase):
    def test_equal_passes(self):
        t = torch.arange(6.0).reshape(2, 3)
        x = dtorch.from_torch(t, CPU2, [Shard(1)])
        for tc in (self, None):
            assert_tensor_equal(tc, x, t)
            assert_tensor_equal(tc, t, x)
            assert_tensor_equal(tc, x, x)
            assert_tensor_equal(tc, t, t.clone())
            assert_tensor_equal(tc, [x, t], [t, x])
            assert_tensor_equal(tc, (x,), [t])

    def test_equal_fails(self):
        t = torch.arange(6.0).reshape(2, 3)
        x = dtorch.from_torch(t, CPU2, [Shard(0)])
        cases = [
            (x, t + 1, "values differ"),
            (x, t.double(), "dtypes differ"),
            (x, t.reshape(3, 2), "shapes differ"),
            ([x, x], [t, t + 1], "element 1"),
            ([x], [t, t], "lengths"),
            ([x], t, "list"),
        ]
        for a, b, why in cases:
            for tc in (self, None):
                with self.subTest(why=why, test_case=tc is not None):
                    with self.assertRaises(AssertionError) as cm:
                        assert_tensor_equal(tc, a, b)
                    self.assertIn(why, str(cm.exception))
        with self.assertRaises(AssertionError) as cm:
            assert_tensor_equal(None, x, t + 1)
        self.assertIn(str(t), str(cm.exception))  # both operands are printed
        self.assertIn(str(t + 1), str(cm.exception))
        with self.assertRaises(TypeError):
            assert_tensor_equal(None, x, 3.0)

    def test_allclose(self):
        t = torch.arange(1.0, 7.0).reshape(2, 3)
        x = dtorch.from_torch(t, CPU2, [Shard(1)])
        assert_tensor_allclose(self, x, t * (1 + 1e-6))
        assert_tensor_allclose(None, [x], [t])
        assert_tensor_allclose(self, x, t + 0.01, rtol=0, atol=0.02)
        h = torch.tensor([1.0, 2.0], dtype=torch.float16)
        assert_tensor_allclose(self, dtorch.from_torch(h), h)
        with self.assertRaisesRegex(AssertionError, "not close"):
            assert_tensor_allclose(None, x, t * (1 + 1e-4))
        with self.assertRaisesRegex(AssertionError, "dtypes differ"):
            assert_tensor_allclose(self, x, t.double())
        with self.assertRaisesRegex(AssertionError, "not close"):
            assert_tensor_allclose(self, x, t + 0.01, rtol=0, atol=0.001)
        n = torch.tensor([float("nan"), 1.0])
        with self.assertRaises(AssertionError):
            assert_tensor_allclose(None, n, n)
        assert_tensor_allclose(None, n, n, equal_nan=True)


if __name__ == "__main__":
    unittest.main()


class TestLocalValues(unittest.TestCase):
    """local_values reads each device's own block; assert_replicas_equal compares replicas bitwise."""

    def test_every_device_block(self):
        from dtorch import DeviceMesh, Partial, Replicate
        from dtorch.test.test_util import local_values

        t = torch.arange(35.0).reshape(5, 7)
        m = DeviceMesh("cpu", [[0, 1], [2, 3]])
        # Shard(0) over the first mesh dim (3 + 2 rows), Shard(1) over the second (4 + 3 columns).
        got = local_values(dtorch.from_torch(t, m, [Shard(0), Shard(1)]))
        want = [t[:3, :4], t[:3, 4:], t[3:, :4], t[3:, 4:]]
        for g, w in zip(got, want):
            self.assertTrue(torch.equal(g, w), (g, w))
        # Replicate: every device its own full copy; Partial from a torch tensor: the value on the
        # first coordinate and zeros elsewhere (docs/api.md), read as stored, not summed.
        got = local_values(dtorch.from_torch(t, m, [Replicate(), Partial()]))
        want = [t, torch.zeros_like(t), t, torch.zeros_like(t)]
        for g, w in zip(got, want):
            self.assertTrue(torch.equal(g, w), (g, w))
        with self.assertRaises(IndexError):
            dtorch.from_torch(t, m, [Shard(0), Shard(1)])._local_value(4)

    def test_replicas(self):
        from dtorch import DeviceMesh, Replicate
        from dtorch.test.test_util import assert_replicas_equal

        m = DeviceMesh("cpu", [[0, 1], [2, 3]])
        x = dtorch.from_torch(torch.tensor([1.0, float("nan"), -0.0]), m, [Replicate(), Replicate()])
        assert_replicas_equal(self, x)

        # A drifted replica (device 3's -0.0 became 0.0) is found, on the mesh dim where it is.
        from dtorch.test.test_util import _replica_mismatch

        v = [x._local_value(i) for i in range(4)]
        self.assertIsNone(_replica_mismatch((2, 2), [Replicate(), Replicate()], v))
        v[3] = v[3].abs()
        msg = _replica_mismatch((2, 2), [Replicate(), Replicate()], v)
        self.assertIn("replicas differ on mesh dim 0", msg)
        self.assertIn("(1, 1)", msg)
        self.assertIn("mesh dim 0", _replica_mismatch((2, 2), [Replicate(), Shard(0)], v))
        self.assertIsNone(_replica_mismatch((2, 2), [Shard(0), Shard(0)], v))


class TestGenuinePartial(unittest.TestCase):
    """_from_local builds a tensor from per-device blocks; genuine_partial splits a value into a
    different piece on every coordinate of the Partial mesh dims; local_regions is the chunk rule."""

    def test_from_local(self):
        from dtorch import DeviceMesh, Partial, Replicate
        from dtorch._factories import _from_local
        from dtorch.test.test_util import assert_replicas_equal, local_values

        m = DeviceMesh("cpu", [[0, 1], [2, 3]])
        blocks = [torch.full((3, 2), float(i)) for i in range(4)]
        x = _from_local(blocks, (3, 4), m, [Partial(), Shard(1)])
        self.assertEqual(list(x.placements), [Partial(), Shard(1)])
        for got, want in zip(local_values(x), blocks):
            self.assertTrue(torch.equal(got, want), (got, want))
        want = torch.cat([torch.full((3, 2), 0.0 + 2), torch.full((3, 2), 1.0 + 3)], dim=1)
        self.assertTrue(torch.equal(x.to_torch(), want), x.to_torch())
        # Copies along a Replicate mesh dim are not checked at the call: a drifted replica can be built,
        # and assert_replicas_equal finds it.
        y = _from_local([torch.zeros(2), torch.zeros(2), torch.zeros(2), torch.tensor([0.0, -0.0])], (2,), m,
                        [Replicate(), Replicate()])
        with self.assertRaisesRegex(AssertionError, "replicas differ on mesh dim 0"):
            assert_replicas_equal(None, y)
        with self.assertRaisesRegex(ValueError, "local block needs"):
            _from_local([torch.ones(3, 2)] * 3 + [torch.ones(2, 2)], (3, 4), m, [Partial(), Shard(1)])
        with self.assertRaisesRegex(ValueError, "4 devices"):
            _from_local([torch.ones(3)] * 3, (3,), m, [Partial(), Partial()])
        with self.assertRaises(TypeError):
            _from_local([torch.ones(3), torch.ones(3, dtype=torch.int64)], (3,), CPU2, [Partial()])

    def test_local_regions_match_the_layout(self):
        from dtorch import DeviceMesh, Replicate
        from dtorch.test.test_util import local_regions, local_values

        t = torch.arange(7 * 5.0).reshape(7, 5)
        m = DeviceMesh("cpu", [[0, 1, 2], [3, 4, 5]])
        for pls in ([Shard(0), Shard(0)], [Shard(0), Shard(1)], [Replicate(), Shard(0)], [Shard(1), Replicate()]):
            with self.subTest(placements=pls):
                got = local_values(dtorch.from_torch(t, m, pls))
                for g, r in zip(got, local_regions(t.shape, m.shape, pls)):
                    self.assertTrue(torch.equal(g, t[r]), (g, t[r]))

    def test_pieces_differ_and_add_up(self):
        from dtorch import DeviceMesh, Partial, Replicate
        from dtorch.test.test_util import genuine_partial, local_regions, local_values

        m = DeviceMesh("cpu", [[0, 1], [2, 3]])
        cases = [
            (CPU2, [Partial()]),
            (DeviceMesh("cpu", [0, 1, 2]), [Partial()]),
            (m, [Partial(), Partial()]),
            (m, [Partial(), Shard(0)]),
            (m, [Shard(1), Partial()]),
            (m, [Replicate(), Partial()]),
        ]
        for dtype in (torch.float32, torch.int64, torch.float16):
            for mesh, pls in cases:
                with self.subTest(dtype=dtype, placements=pls, mesh=mesh.shape):
                    t = torch.randint(-6, 7, (5, 3)).to(dtype)
                    x = genuine_partial(t, mesh, pls, seed=1)
                    self.assertEqual(list(x.placements), pls)
                    self.assertTrue(torch.equal(x.to_torch(), t))
                    values = local_values(x)
                    regions = local_regions(t.shape, mesh.shape, pls)
                    # The devices that share a region hold different, nonzero-sum pieces of it; a Replicate
                    # mesh dim holds equal copies.
                    for a in range(len(values)):
                        for b in range(a + 1, len(values)):
                            if regions[a] == regions[b] and not (pls[0].is_replicate() and b - a == 2):
                                self.assertFalse(torch.equal(values[a], values[b]), (a, b, values))
                    # Not the value on coordinate 0 and zeros elsewhere.
                    self.assertTrue(all(bool(v.ne(0).any()) for v in values), values)
        # Non-integer floats: the pieces add up to within rounding; no Partial: from_torch.
        t = torch.randn(4, 4)
        self.assertTrue(torch.allclose(genuine_partial(t, m, [Partial(), Partial()]).to_torch(), t, atol=1e-5))
        self.assertTrue(torch.equal(local_values(genuine_partial(t, CPU2, [Shard(0)]))[1], t[2:]))
        self.assertEqual(local_values(genuine_partial(torch.ones(2, dtype=torch.bool), CPU2, [Partial()]))[1].tolist(),
                         [False, False])
