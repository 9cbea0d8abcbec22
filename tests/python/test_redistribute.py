"""redistribute: every source placement to every target, checked exactly against the torch tensor."""

import itertools
import unittest

import torch

import dtorch
from dtorch import DeviceMesh, Partial, Replicate, Shard
from dtorch.test.test_util import assert_tensor_equal

from helpers import CPU2, CPU3, CPU2x2, int_valued, placements_1d, placements_2d

# Operators this module tests against eager PyTorch (tests/python/test_registry.py).
TESTED_OPS = {'redistribute'}

R, P = Replicate(), Partial()
S0, S1 = Shard(0), Shard(1)

# Even and uneven shapes, and shapes smaller than the mesh.
SHAPES = [(4, 6), (5, 7), (2, 3), (1, 5), (6,)]


class TestRedistribute1D(unittest.TestCase):
    def check(self, x, t, placements):
        self.assertEqual(x.placements, placements)
        self.assertEqual(x.shape, t.shape)
        assert_tensor_equal(self, x, t)

    def test_all_pairs(self):
        for mesh in (CPU2, CPU3):
            for shape in SHAPES:
                t = int_valued(*shape, seed=len(shape))  # integer-valued: partial sums are exact
                pls = placements_1d(len(shape))
                for src, dst in itertools.product(pls, repeat=2):
                    with self.subTest(mesh=mesh, shape=shape, src=src, dst=dst):
                        x = dtorch.from_torch(t, mesh, [src])
                        y = x.redistribute(placements=[dst])
                        self.check(y, t, [dst])
                        self.check(x, t, [src])  # the source is unchanged
                        # The explicit mesh form does the same.
                        self.check(x.redistribute(mesh, [dst]), t, [dst])

    def test_genuine_partial_sources(self):
        """Partial values spread over every device (from a matmul over a sharded K), not only the first."""
        a = int_valued(5, 6, seed=1)
        b = int_valued(6, 7, seed=2)
        ref = a @ b
        for mesh in (CPU2, CPU3):
            z = dtorch.from_torch(a, mesh, [S1]) @ dtorch.from_torch(b, mesh, [S0])
            self.assertEqual(z.placements, [P])
            for dst in (R, S0, S1, P):
                with self.subTest(mesh=mesh, dst=dst):
                    self.check(z.redistribute(placements=[dst]), ref, [dst])
            # Sum over a sharded dim is another genuine partial.
            s = dtorch.from_torch(a, mesh, [S0]).sum(dim=0)
            self.assertEqual(s.placements, [P])
            for dst in (R, S0, P):
                with self.subTest(mesh=mesh, sum_dst=dst):
                    self.check(s.redistribute(placements=[dst]), a.sum(dim=0), [dst])

    def test_default_is_replicate_and_chains(self):
        t = int_valued(7, 5, seed=3)
        x = dtorch.from_torch(t, CPU3, [S0])
        self.check(x.redistribute(), t, [R])
        y = x.redistribute(placements=[S1]).redistribute(placements=[P]).redistribute(placements=[S0])
        self.check(y, t, [S0])
        self.check(y * 2 + 1, t * 2 + 1, [S0])

    def test_dtypes(self):
        for dtype in (torch.float64, torch.int64, torch.float16, torch.int32):
            t = int_valued(5, 4, seed=4).to(dtype)
            for src, dst in ((S0, S1), (S1, R), (P, S0), (R, P), (S0, P), (P, R)):
                with self.subTest(dtype=dtype, src=src, dst=dst):
                    self.check(dtorch.from_torch(t, CPU3, [src]).redistribute(placements=[dst]), t, [dst])
        b = torch.tensor([[True, False, True], [False, False, True]])
        for src, dst in ((S0, S1), (S1, R), (R, S0)):
            with self.subTest(dtype=torch.bool, src=src, dst=dst):
                self.check(dtorch.from_torch(b, CPU2, [src]).redistribute(placements=[dst]), b, [dst])

    def test_negative_shard_dim(self):
        t = int_valued(4, 6, seed=5)
        y = dtorch.from_torch(t, CPU2, [S0]).redistribute(placements=[Shard(-1)])
        self.check(y, t, [S1])

    def test_same_mesh_by_value(self):
        t = int_valued(4, 6, seed=6)
        x = dtorch.from_torch(t, CPU2, [S0])
        self.check(x.redistribute(DeviceMesh("cpu", [0, 1]), [S1]), t, [S1])

    def test_errors(self):
        x = dtorch.from_torch(int_valued(4, 6), CPU2, [S0])
        with self.assertRaises(ValueError):
            x.redistribute(placements=[S0, S1])
        with self.assertRaises(ValueError):
            x.redistribute(placements=[Shard(2)])
        with self.assertRaises(ValueError):  # strings are "S0", "R", "P"
            x.redistribute(placements=["S(0)"])
        with self.assertRaises(TypeError):
            x.redistribute(device_mesh=[0, 1])
        # A placement list for the wrong mesh is refused at the call.
        with self.assertRaises(ValueError):
            x.redistribute(CPU2x2, [S0])
        self.check(x.redistribute(placements=[S1]), int_valued(4, 6), [S1])


class TestRedistribute2D(unittest.TestCase):
    def test_all_pairs(self):
        t = int_valued(4, 6, seed=7)
        pls = placements_2d(2)
        for src in pls:
            x = dtorch.from_torch(t, CPU2x2, src)
            for dst in pls:
                with self.subTest(src=src, dst=dst):
                    y = x.redistribute(placements=dst)
                    self.assertEqual(y.placements, dst)
                    self.assertEqual(y.shape, t.shape)
                    assert_tensor_equal(self, y, t)

    def test_uneven(self):
        t = int_valued(5, 3, seed=8)
        mesh = DeviceMesh("cpu", [[0, 1, 2], [3, 4, 5]], mesh_dim_names=("dp", "tp"))
        for src, dst in (([S0, S1], [S1, S0]), ([P, S1], [R, R]), ([S1, P], [S0, R]), ([R, S0], [P, P]),
                         ([S0, R], [R, S1]), ([P, P], [S1, S0])):
            with self.subTest(src=src, dst=dst):
                y = dtorch.from_torch(t, mesh, src).redistribute(placements=dst)
                self.assertEqual(y.placements, dst)
                assert_tensor_equal(self, y, t)


if __name__ == "__main__":
    unittest.main()
