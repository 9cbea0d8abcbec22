"""CUDA devices (issue 12): the parts that run without a GPU (device virtualisation's variables,
cuda meshes refused at the call, satisfy() False) and, where torch sees a GPU, cuda meshes against
eager torch on that GPU. docs/cuda.md says what has run where."""

import os
import unittest

import torch

import dtorch
from dtorch import DeviceMesh, Replicate, Shard
from dtorch.test.test_util import assert_tensor_equal, is_graph_satisfy

SAME = "DTORCH_DTENSOR_IN_SAME_DEVICE"
NUM = "DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE"


def n_gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class EnvCase(unittest.TestCase):
    """Sets the two variables for one test and restores them after (libdtorch reads them at
    each device count, so no new process is needed)."""

    def setEnv(self, same, num=None):
        old = {k: os.environ.get(k) for k in (SAME, NUM)}

        def restore():
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

        self.addCleanup(restore)
        for k, v in ((SAME, same), (NUM, num)):
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@unittest.skipIf(n_gpus() > 0, "a GPU is present: TestCudaMeshes covers it")
class TestWithoutGpu(EnvCase):
    def test_virtual_devices_need_a_gpu(self):
        # N logical ids map onto the GPUs present; with none there is no logical device either.
        for same, num in ((None, None), ("1", None), ("1", "4"), ("0", "8")):
            with self.subTest(same=same, num=num):
                self.setEnv(same, num)
                mesh = DeviceMesh("cuda", [0, 1, 2, 3])
                self.assertFalse(is_graph_satisfy(mesh))
                self.assertFalse(dtorch.default_graph.satisfy(DeviceMesh("cuda", [0])))
                with self.assertRaisesRegex(RuntimeError, "cuda:0 is not available"):
                    dtorch.zeros(4, device_mesh=mesh)
                with self.assertRaisesRegex(RuntimeError, "cuda"):
                    dtorch.ones(4, device_mesh=DeviceMesh("cpu", [0, 1])).cuda()
                # cpu meshes are untouched by the variables
                self.assertTrue(dtorch.default_graph.satisfy(DeviceMesh("cpu", [0, 7])))
                assert_tensor_equal(None, dtorch.arange(6, device_mesh=DeviceMesh("cpu", [0, 1]),
                                                        placements=[Shard(0)]) * 2, torch.arange(6) * 2)

    def test_bad_values_are_named_at_the_call(self):
        for same, num, bad in (("yes", None, SAME), ("2", "4", SAME), ("1", "0", NUM), ("1", "four", NUM),
                               ("1", "-3", NUM)):
            with self.subTest(same=same, num=num):
                self.setEnv(same, num)
                with self.assertRaisesRegex(RuntimeError, f"{bad}=.* is not valid"):
                    dtorch.zeros(4, device_mesh=DeviceMesh("cuda", [0]))
                self.assertFalse(is_graph_satisfy(DeviceMesh("cuda", [0])))
        # a bad N is ignored while the switch is off
        self.setEnv("0", "four")
        with self.assertRaisesRegex(RuntimeError, "torch.cuda.is_available"):
            dtorch.zeros(4, device_mesh=DeviceMesh("cuda", [0]))


@unittest.skipUnless(n_gpus() > 0, "needs a GPU (tools/gpu_check.sh)")
class TestCudaMeshes(EnvCase):
    """Runs only where torch sees a GPU; NOT YET RUN (docs/cuda.md)."""

    def test_one_device_is_bit_identical(self):
        x = torch.randn(64, 32, device="cuda")
        w = torch.randn(32, 16, device="cuda")
        mesh = DeviceMesh("cuda", [0])
        dx, dw = dtorch.from_torch(x, mesh), dtorch.from_torch(w, mesh)
        got = ((dx @ dw).relu() + 1).sum(0).to_torch()
        self.assertEqual(got.device, torch.device("cuda", 0))
        self.assertTrue(torch.equal(got, ((x @ w).relu() + 1).sum(0)))

    def test_logical_devices_share_one_gpu(self):
        self.setEnv("1", "4")
        mesh = DeviceMesh("cuda", [0, 1, 2, 3])
        self.assertTrue(is_graph_satisfy(mesh))
        self.assertFalse(is_graph_satisfy(DeviceMesh("cuda", [4])))
        x = torch.arange(24.0, device="cuda").reshape(8, 3)
        d = dtorch.from_torch(x, mesh, [Shard(0)])
        assert_tensor_equal(None, (d * 2).redistribute(mesh, [Replicate()]), x * 2)
        assert_tensor_equal(None, d.sum(0), x.sum(0))


if __name__ == "__main__":
    unittest.main()
