"""Meshes of 5, 6 and 8 dims (DT_MAX_MESH_NDIM is 8): creation, sub-meshes, ops and redistributes
against eager torch, with nested and uneven shards."""

import itertools
import random
import unittest


import dtorch
from dtorch import DeviceMesh, Partial, Replicate, Shard
from helpers import assert_close_everywhere as assert_tensor_allclose  # and every replica bitwise
from helpers import assert_equal_everywhere as assert_tensor_equal
from helpers import genuine_partial, int_valued

MESHES = {
    5: dtorch.init_device_mesh("cpu", (2, 1, 2, 1, 2), mesh_dim_names=("a", "b", "c", "d", "e")),
    6: dtorch.init_device_mesh("cpu", (1, 2, 1, 2, 1, 2)),
    8: dtorch.init_device_mesh("cpu", (2, 2, 2, 1, 1, 2, 1, 1), mesh_dim_names=tuple("pqrstuvw")),
}
SHAPES = [(6, 4), (5, 7), (3, 1, 9)]


def normalised(mesh, placements):
    return [Replicate() if mesh.shape[i] == 1 else p for i, p in enumerate(placements)]


def sample_placements(mesh, ndim, rng, k, partial=True):
    """k random placement lists for a tensor of ndim dims (nested shards allowed)."""
    choices = [Replicate()] + [Shard(d) for d in range(ndim)] + ([Partial()] if partial else [])
    return [[rng.choice(choices) for _ in range(mesh.ndim)] for _ in range(k)]


class TestHighRankMeshes(unittest.TestCase):
    def test_mesh_objects(self):
        m = MESHES[8]
        self.assertEqual((m.ndim, m.size(), m.shape), (8, 16, (2, 2, 2, 1, 1, 2, 1, 1)))
        self.assertEqual(m[("r", "p")].shape, (2, 2))
        self.assertEqual(len(m.unbind(["p", "q"])), 4)
        self.assertEqual(m.unbind(["p", "q"])[3].ndim, 6)
        self.assertEqual(eval(repr(m), {"DeviceMesh": DeviceMesh}), m)
        full = dtorch.init_device_mesh("cpu", (1,) * 8)
        self.assertEqual(full.ndim, 8)
        with self.assertRaisesRegex(ValueError, "at most 8"):
            dtorch.init_device_mesh("cpu", (1,) * 9)

    def test_roundtrip_every_rank(self):
        rng = random.Random(0)
        for rank, mesh in MESHES.items():
            for shape in SHAPES:
                t = int_valued(*shape, seed=rank)
                for pl in sample_placements(mesh, len(shape), rng, 12):
                    with self.subTest(rank=rank, shape=shape, pl=pl):
                        x = dtorch.from_torch(t, mesh, pl)
                        self.assertEqual(x.placements, normalised(mesh, pl))
                        assert_tensor_equal(self, x, t)

    def test_redistribute(self):
        rng = random.Random(1)
        count = 0
        for rank, mesh in MESHES.items():
            for shape in SHAPES:
                t = int_valued(*shape, seed=rank + 1)
                sources = sample_placements(mesh, len(shape), rng, 6)
                targets = sample_placements(mesh, len(shape), rng, 6, partial=False)
                for src, dst in itertools.product(sources, targets):
                    with self.subTest(rank=rank, shape=shape, src=src, dst=dst):
                        y = genuine_partial(t, mesh, src).redistribute(placements=dst)
                        self.assertEqual(y.placements, normalised(mesh, dst))
                        assert_tensor_equal(self, y, t)  # integer values: Partial sums are exact
                        count += 1
        self.assertGreater(count, 250)

    def test_ops(self):
        rng = random.Random(2)
        for rank, mesh in MESHES.items():
            t, u = int_valued(6, 4, seed=3), int_valued(4, seed=4)
            for pl in sample_placements(mesh, 2, rng, 8, partial=False):
                with self.subTest(rank=rank, pl=pl):
                    x = dtorch.from_torch(t, mesh, pl)
                    b = dtorch.from_torch(u, mesh)
                    assert_tensor_equal(self, x * 2 + b, t * 2 + u)          # broadcasting elementwise
                    assert_tensor_equal(self, (x - 1).sum(dim=0), (t - 1).sum(dim=0))
                    assert_tensor_equal(self, x.amax(dim=1), t.amax(dim=1))
                    assert_tensor_equal(self, x.transpose(0, 1), t.transpose(0, 1))
            # matmul with the rows sharded on one mesh dim and the rest replicated.
            w = int_valued(4, 3, seed=5)
            md = next(i for i, n in enumerate(mesh.shape) if n > 1)
            pl = [Replicate()] * mesh.ndim
            pl[md] = Shard(0)
            y = dtorch.from_torch(t, mesh, pl) @ dtorch.from_torch(w, mesh)
            self.assertEqual(y.placements, pl)
            assert_tensor_allclose(self, y, t @ w)

    def test_eight_full_dims(self):
        # 2**8 = 256 CPU devices, one tensor through a nested layout and back.
        mesh = dtorch.init_device_mesh("cpu", (2,) * 8)
        t = int_valued(6, 20)
        pl = [Shard(0), Replicate(), Shard(1), Partial(), Replicate(), Shard(1), Replicate(), Shard(0)]
        x = genuine_partial(t, mesh, pl)
        self.assertEqual(x.placements, pl)
        y = (x.redistribute(placements=[Shard(1)] + [Replicate()] * 7) * 2 + 1).sum(0)
        assert_tensor_equal(self, y, (t * 2 + 1).sum(0))


if __name__ == "__main__":
    unittest.main()
