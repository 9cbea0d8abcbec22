"""redistribute: every source placement to every target, checked exactly against the torch tensor, on
every device (replicas bitwise equal); Partial sources hold a different piece on every coordinate; P->R
and P->S add the pieces in rank order, bit for bit (docs/decisions.md, "Reductions sum in rank order")."""

import itertools
import math
import unittest

import torch

import dtorch
from dtorch import DeviceMesh, Partial, Replicate, Shard
from dtorch.test.test_util import (assert_replicas_equal, assert_tensor_equal, genuine_partial, local_regions,
                                   local_values, partial_from_pieces)

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
        assert_replicas_equal(self, x)
        assert_tensor_equal(self, x, t)

    def test_all_pairs(self):
        for mesh in (CPU2, CPU3):
            for shape in SHAPES:
                t = int_valued(*shape, seed=len(shape))  # integer-valued: partial sums are exact
                pls = placements_1d(len(shape))
                for src, dst in itertools.product(pls, repeat=2):
                    with self.subTest(mesh=mesh, shape=shape, src=src, dst=dst):
                        x = genuine_partial(t, mesh, [src])
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
                    self.check(genuine_partial(t, CPU3, [src]).redistribute(placements=[dst]), t, [dst])
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
            x = genuine_partial(t, CPU2x2, src)
            for dst in pls:
                with self.subTest(src=src, dst=dst):
                    y = x.redistribute(placements=dst)
                    self.assertEqual(y.placements, dst)
                    self.assertEqual(y.shape, t.shape)
                    assert_replicas_equal(self, y)
                    assert_tensor_equal(self, y, t)

    def test_uneven(self):
        t = int_valued(5, 3, seed=8)
        mesh = DeviceMesh("cpu", [[0, 1, 2], [3, 4, 5]], mesh_dim_names=("dp", "tp"))
        for src, dst in (([S0, S1], [S1, S0]), ([P, S1], [R, R]), ([S1, P], [S0, R]), ([R, S0], [P, P]),
                         ([S0, R], [R, S1]), ([P, P], [S1, S0])):
            with self.subTest(src=src, dst=dst):
                y = genuine_partial(t, mesh, src).redistribute(placements=dst)
                self.assertEqual(y.placements, dst)
                assert_replicas_equal(self, y)
                assert_tensor_equal(self, y, t)


def mixed_pieces(n, shape, seed):
    """``n`` float32 pieces whose elements mix magnitudes from 2**-8 to 2**8, so that a sum in another
    order than rank order (reversed, or starting from another rank) rounds differently."""
    g = torch.Generator().manual_seed(seed)
    mant = torch.randn((n,) + tuple(shape), generator=g, dtype=torch.float64)
    expo = torch.randint(-8, 9, (n,) + tuple(shape), generator=g).double()
    return (mant * torch.exp2(expo)).float()


def fold(xs):
    """((x0 + x1) + x2) + ..., in this order."""
    acc = xs[0]
    for x in xs[1:]:
        acc = acc + x
    return acc


def rank_order_sum(pieces, sizes):
    """The sum of ``pieces`` (row-major over Partial mesh dims of ``sizes``) in rank order along each
    mesh dim, the last Partial mesh dim first: (p00 + p01) + (p10 + p11) on a 2x2 mesh."""
    x = pieces.reshape(tuple(sizes) + tuple(pieces.shape[1:]))
    for axis in reversed(range(len(sizes))):
        x = fold([x.select(axis, i) for i in range(sizes[axis])])
    return x


def bits(t):
    return t.contiguous().view(torch.int32)


class TestRankOrderSums(unittest.TestCase):
    """P->R all-reduce and P->S reduce-scatter add the pieces in rank order, ((p0 + p1) + p2) + ..., the
    same bits on every device. The pieces are non-integer floats of mixed magnitudes: reversed order,
    or each rank starting from itself, gives other bits (checked on the data used, so that these tests
    can fail)."""

    def assert_bitwise(self, got, want, what):
        self.assertEqual(got.shape, want.shape, what)
        if not torch.equal(bits(got), bits(want)):
            diff = (bits(got) != bits(want)).nonzero()[:4].tolist()
            self.fail(f"{what}: not bit-identical to the rank-order sum at {diff}\ngot\n{got}\nwant\n{want}")

    def check_all_devices(self, y, want, what):
        """Every device of ``y`` holds its region of ``want`` bit for bit (every replica, every shard)."""
        regions = local_regions(tuple(want.shape), tuple(y.device_mesh.shape), list(y.placements))
        for i, (got, r) in enumerate(zip(local_values(y), regions)):
            self.assert_bitwise(got, want[r], f"{what}, device {i}")
        self.assert_bitwise(y.to_torch(), want, f"{what}, the read")

    def test_1d_meshes(self):
        # (5, 7): uneven on 2, 3 and 4 devices (rows 2, 2, 1, 0 on 4); (2, 16): fewer rows than devices.
        for n in (2, 3, 4):
            mesh = DeviceMesh("cpu", list(range(n)))
            for shape in ((5, 7), (2, 16)):
                pieces = mixed_pieces(n, shape, seed=n + shape[0])
                want = rank_order_sum(pieces, [n])
                if n > 2:  # with two pieces every order is the same sum
                    self.assertFalse(torch.equal(bits(want), bits(fold(list(pieces.flip(0))))), "reversed")
                    for r in range(1, n):
                        self.assertFalse(torch.equal(bits(want), bits(fold(list(pieces.roll(-r, 0))))), r)
                x = partial_from_pieces(pieces, mesh, [P])
                for dst in (R, S0, S1):
                    with self.subTest(n=n, shape=shape, dst=dst):
                        y = x.redistribute(placements=[dst])
                        self.assertEqual(y.placements, [dst])
                        self.check_all_devices(y, want, f"{n} devices, P -> {dst}")

    def test_2d_meshes(self):
        """Partial on either mesh dim of a 2x2 (and 2x3) mesh, or on both: along each mesh dim in rank
        order, the last mesh dim first."""
        meshes = {(2, 2): CPU2x2, (2, 3): DeviceMesh("cpu", [[0, 1, 2], [3, 4, 5]])}
        sources = ([P, R], [R, P], [P, S1], [S0, P], [P, P])
        targets = [[a, b] for a in (R, S0, S1) for b in (R, S0, S1)]
        shape = (5, 7)
        for mshape, mesh in meshes.items():
            for src in sources:
                sizes = [mshape[md] for md, p in enumerate(src) if p.is_partial()]
                pieces = mixed_pieces(math.prod(sizes), shape, seed=len(sizes) + mshape[1])
                want = rank_order_sum(pieces, sizes)
                if src == [P, P]:  # the mesh-dim order is observable: not ((p00 + p01) + p10) + p11
                    self.assertFalse(torch.equal(bits(want), bits(fold(list(pieces)))))
                x = partial_from_pieces(pieces, mesh, src)
                for dst in targets:
                    if mshape == (2, 3) and src != [P, P]:
                        continue
                    with self.subTest(mesh=mshape, src=src, dst=dst):
                        y = x.redistribute(placements=dst)
                        self.assertEqual(y.placements, dst)
                        self.check_all_devices(y, want, f"{mshape} {src} -> {dst}")

    def test_onto_another_mesh(self):
        """Pending sums are finished on the source mesh, in rank order, before the move."""
        pieces = mixed_pieces(3, (4, 5), seed=9)
        x = partial_from_pieces(pieces, CPU3, [P])
        y = x.redistribute(DeviceMesh("cpu", [6, 7]), [R])
        self.check_all_devices(y, rank_order_sum(pieces, [3]), "P on 3 devices -> R on 2 others")


if __name__ == "__main__":
    unittest.main()
