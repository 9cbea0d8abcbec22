"""The seed example: a sharded float16 tensor plus a replicated one, before and after redistribute."""

import unittest

import torch

import dtorch
from dtorch.distributed_spec import Replicate, Shard, init_device_mesh
from dtorch.test.test_util import assert_tensor_allclose


class TestSeed(unittest.TestCase):
    def test_add_sharded_replicated(self):
        mesh = init_device_mesh(device_type="cpu", mesh_shape=(2,))
        x_torch = torch.randn(3, 4, 5, dtype=torch.float16)
        x = dtorch.Tensor(x_torch, device_mesh=mesh, placements=[Shard(1)])
        y_torch = torch.randn(4, 1, dtype=torch.float16)
        y = dtorch.Tensor(y_torch, device_mesh=mesh, placements=[Replicate()])

        z = x + y
        assert_tensor_allclose(self, z, x_torch + y_torch)
        self.assertEqual(z.placements, [Shard(1)])
        self.assertEqual(z.dtype, torch.float16)

        x = x.redistribute(placements=[Shard(0)])
        self.assertEqual(x.placements, [Shard(0)])
        z = x + y
        assert_tensor_allclose(self, z, x_torch + y_torch)
        self.assertEqual(z.placements, [Shard(0)])


if __name__ == "__main__":
    unittest.main()
