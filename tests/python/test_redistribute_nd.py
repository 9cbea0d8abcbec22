"""redistribute on N-D meshes, nested shards, uneven shapes and across meshes, against torch.

Every source placement list in {R, S(each dim), P}^ndim goes to every target in {R, S(each dim)}^ndim
(and P targets) on meshes (2,), (3,), (4,), (2,2), (2,3), (2,1,2) for tensors (6,4), (5,7), (1,3),
(7,). Partial sources hold a different integer-valued piece on every coordinate (genuine_partial), so
the sums are exact; every result's replicas are compared bitwise.
"""

import itertools
import unittest

import torch

import dtorch
from dtorch import DeviceMesh, Partial, Replicate, Shard
from dtorch.test.test_util import assert_replicas_equal, genuine_partial, local_values

from helpers import assert_equal_everywhere as assert_tensor_equal  # and every replica bitwise
from helpers import int_valued

MESHES = {
    (2,): DeviceMesh("cpu", [0, 1]),
    (3,): DeviceMesh("cpu", [0, 1, 2]),
    (4,): DeviceMesh("cpu", [0, 1, 2, 3]),
    (2, 2): DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp")),
    (2, 3): DeviceMesh("cpu", [[0, 1, 2], [3, 4, 5]]),
    (2, 1, 2): DeviceMesh("cpu", [[[0, 1]], [[2, 3]]], mesh_dim_names=("pp", "dp", "tp")),
}
SHAPES = [(6, 4), (5, 7), (1, 3), (7,)]


def choices(ndim, partial):
    out = [Replicate()] + [Shard(d) for d in range(ndim)]
    return out + [Partial()] if partial else out


def normalised(mesh, placements):
    """What the placements read back as: a mesh dim of size 1 is always Replicate."""
    return [Replicate() if mesh.shape[i] == 1 else p for i, p in enumerate(placements)]


class TestAllTransitions(unittest.TestCase):
    def test_every_source_to_every_target(self):
        count = 0
        for mshape, mesh in MESHES.items():
            for shape in SHAPES:
                t = int_valued(*shape, seed=len(shape) + shape[0])
                srcs = list(itertools.product(choices(len(shape), True), repeat=len(mshape)))
                dsts = list(itertools.product(choices(len(shape), False), repeat=len(mshape)))
                for src in srcs:
                    x = genuine_partial(t, mesh, list(src))
                    for dst in dsts:
                        y = x.redistribute(placements=list(dst))
                        self.assertEqual(y.shape, t.shape)
                        self.assertEqual(y.placements, normalised(mesh, dst), (mshape, shape, src, dst))
                        assert_replicas_equal(self, y)
                        got = y.to_torch()
                        if not torch.equal(got, t):
                            self.fail(f"mesh {mshape} shape {shape}: {list(src)} -> {list(dst)}\n{got}\n!=\n{t}")
                        count += 1
        self.assertGreater(count, 5000)

    def test_partial_targets(self):
        mesh = MESHES[(2, 2)]
        t = int_valued(5, 7)
        for src, dst in itertools.product(itertools.product(choices(2, True), repeat=2), repeat=2):
            y = genuine_partial(t, mesh, list(src)).redistribute(placements=list(dst))
            assert_tensor_equal(self, y, t)


class TestCrossMesh(unittest.TestCase):
    PAIRS = [
        (DeviceMesh("cpu", [0, 1]), DeviceMesh("cpu", [2, 3])),
        (DeviceMesh("cpu", [0, 1]), DeviceMesh("cpu", [1, 2, 3])),
        (DeviceMesh("cpu", [[0, 1], [2, 3]]), DeviceMesh("cpu", [[4, 5], [6, 7]])),
        (DeviceMesh("cpu", [0, 1, 2]), DeviceMesh("cpu", [5])),
        (DeviceMesh("cpu", [[0, 1], [2, 3]]), DeviceMesh("cpu", [4, 5, 6])),
    ]

    def test_pairs(self):
        for src_mesh, dst_mesh in self.PAIRS:
            for shape in [(6, 4), (5, 7), (1, 3)]:
                t = int_valued(*shape, seed=3)
                for src in itertools.product(choices(2, True), repeat=src_mesh.ndim):
                    x = genuine_partial(t, src_mesh, list(src))
                    for dst in itertools.product(choices(2, True), repeat=dst_mesh.ndim):
                        y = x.redistribute(dst_mesh, list(dst))
                        self.assertEqual(y.device_mesh, dst_mesh)
                        self.assertEqual(y.placements, normalised(dst_mesh, dst))
                        assert_tensor_equal(self, y, t)

    def test_partial_onto_one_device(self):
        t = int_valued(5, 3)
        x = genuine_partial(t, DeviceMesh("cpu", [0, 1, 2]), [Partial()])
        y = x.redistribute(DeviceMesh("cpu", [9]), [Replicate()])
        assert_tensor_equal(self, y, t)

    def test_to_mesh_keeps_placements(self):
        t = int_valued(4, 6)
        a, b = DeviceMesh("cpu", [0, 1]), DeviceMesh("cpu", [2, 3])
        x = dtorch.from_torch(t, a, [Shard(1)])
        y = x.to(b)
        self.assertEqual((y.device_mesh, y.placements), (b, [Shard(1)]))
        assert_tensor_equal(self, y, t)
        with self.assertRaises(ValueError):
            x.to(DeviceMesh("cpu", [4, 5, 6]))

    def test_compute_after_move(self):
        t = int_valued(6, 4)
        x = dtorch.from_torch(t, DeviceMesh("cpu", [0, 1]), [Shard(0)])
        y = x.redistribute(DeviceMesh("cpu", [2, 3]), [Shard(0)])
        z = (y * 2 + 1).sum(dim=1)
        assert_tensor_equal(self, z.redistribute(placements=[Replicate()]), (t * 2 + 1).sum(dim=1))


class TestByDictAndLike(unittest.TestCase):
    def setUp(self):
        self.mesh = MESHES[(2, 2)]
        self.t = int_valued(4, 6)
        self.x = dtorch.from_torch(self.t, self.mesh, [Shard(0), Replicate()])

    def test_by_name_and_index(self):
        y = self.x.redistribute_by_dict({"tp": Shard(1), "dp": Replicate()})
        self.assertEqual(y.placements, [Replicate(), Shard(1)])
        assert_tensor_equal(self, y, self.t)
        y = self.x.redistribute_by_dict({0: Replicate(), 1: Shard(0)})
        self.assertEqual(y.placements, [Replicate(), Shard(0)])

    def test_absent_names_are_ignored(self):
        y = self.x.redistribute_by_dict({"tp": Shard(1), "dp": Replicate(), "ulysess_cp": Shard(0)})
        self.assertEqual(y.placements, [Replicate(), Shard(1)])

    def test_default_modes(self):
        with self.assertRaises(ValueError) as cm:
            self.x.redistribute_by_dict({"tp": Shard(1)})
        self.assertIn("dp", str(cm.exception))
        y = self.x.redistribute_by_dict({"tp": Shard(1)}, default_placement_mode="replicate")
        self.assertEqual(y.placements, [Replicate(), Shard(1)])
        y = self.x.redistribute_by_dict({"tp": Shard(1)}, default_placement_mode="keep")
        self.assertEqual(y.placements, [Shard(0), Shard(1)])
        assert_tensor_equal(self, y, self.t)
        with self.assertRaises(ValueError):
            self.x.redistribute_by_dict({"tp": Shard(1)}, default_placement_mode="bogus")

    def test_like(self):
        other = dtorch.zeros(4, 6, device_mesh=DeviceMesh("cpu", [4, 5]), placements=[Shard(1)])
        y = self.x.redistribute_like(other)
        self.assertEqual((y.device_mesh, y.placements), (other.device_mesh, [Shard(1)]))
        assert_tensor_equal(self, y, self.t)


class TestErrorsAndDeterminism(unittest.TestCase):
    def test_bad_requests_raise_at_call(self):
        x = dtorch.from_torch(int_valued(4, 6), MESHES[(2, 2)], [Shard(0), Replicate()])
        with self.assertRaises(ValueError):
            x.redistribute(placements=[Shard(0)])  # wrong length
        with self.assertRaises(ValueError):
            x.redistribute(placements=[Shard(2), Replicate()])  # past the tensor's ndim
        with self.assertRaises(ValueError):
            x.redistribute_by_dict({"nope": Shard(0)})  # no dim named: raise_error
        # The runtime keeps working.
        assert_tensor_equal(self, x.redistribute(placements=[Replicate(), Shard(1)]), int_valued(4, 6))

    def test_partial_to_replicate_is_the_rank_order_sum(self):
        """Not only identical from run to run: every device holds ((p0 + p1) + p2) + p3 of the pieces the
        devices held, in rank order (docs/decisions.md), bit for bit."""
        mesh = MESHES[(4,)]
        for _ in range(2):
            dtorch.manual_seed(11)
            x = dtorch.randn(400, 16, device_mesh=mesh, placements=[Shard(0)])
            p = x.sum(dim=0)
            self.assertEqual(p.placements, [Partial()])
            pieces = local_values(p)
            want = ((pieces[0] + pieces[1]) + pieces[2]) + pieces[3]
            self.assertFalse(torch.equal(want, ((pieces[3] + pieces[2]) + pieces[1]) + pieces[0]))  # order matters
            for got in local_values(p.redistribute(placements=[Replicate()])):
                self.assertTrue(torch.equal(got.view(torch.int32), want.view(torch.int32)), (got, want))


if __name__ == "__main__":
    unittest.main()
