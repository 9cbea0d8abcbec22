"""CUDA devices (issue 12): the parts that run without a GPU (device virtualisation's variables,
cuda meshes refused at the call, satisfy() False) and, where torch sees a GPU, cuda meshes against
eager torch on that GPU. docs/cuda.md says what has run where."""

import os
import subprocess
import sys
import textwrap
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
    """Runs only where torch sees a GPU (tools/gpu_check.sh)."""

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

    def test_factories_build_on_the_gpu(self):
        # arange/full/zeros run torch's CUDA kernels on the worker's GPU: equal to eager CUDA bit for
        # bit (a float arange built on the host and copied differs in the last place).
        mesh = DeviceMesh("cuda", [0])
        for args in ((-3, 3, 0.7), (0, 1, 0.1), (5,)):
            with self.subTest(args=args):
                got = dtorch.arange(*args, device_mesh=mesh).to_torch()
                self.assertTrue(torch.equal(got, torch.arange(*args, device="cuda")))
        self.assertTrue(torch.equal(dtorch.full((3, 2), 1.5, device_mesh=mesh).to_torch(),
                                    torch.full((3, 2), 1.5, device="cuda")))

    def test_inputs_from_another_stream_stay_alive(self):
        # A value made on one logical device's stream and read on others' (the gather), then
        # released at once: its memory must not be reused while those reads are queued.
        self.setEnv("1", "4")
        mesh = DeviceMesh("cuda", [0, 1, 2, 3])
        want = torch.randn(4096, 512, device="cuda")
        for i in range(20):
            d = dtorch.from_torch(want * (i + 1), mesh, [Shard(0)])
            r = (d + 0).redistribute(mesh, [Replicate()])
            del d
            junk = [dtorch.ones(4096, 512, device_mesh=mesh, placements=[Shard(0)]) * 7 for _ in range(3)]
            assert_tensor_equal(None, r, want * (i + 1))
            del junk

    def test_device_side_assert_raises_at_the_read_and_the_process_lives(self):
        # An index out of range in a CUDA kernel is a device-side assert: the context is unusable
        # afterwards (as in eager torch), so it runs in a child process. The read raises KernelError
        # naming the op; nothing aborts the process (c10 throws from destructors once the context
        # is dead: the shim leaks instead of freeing), and it exits normally.
        code = textwrap.dedent("""
            import torch, dtorch
            mesh = dtorch.DeviceMesh("cuda", [0, 1])
            x = dtorch.from_torch(torch.zeros(6, device="cuda"), mesh, [dtorch.Shard(0)])
            m = dtorch.from_torch(torch.ones(6, dtype=torch.bool, device="cuda"), mesh, [dtorch.Replicate()])
            src = dtorch.from_torch(torch.ones(2, device="cuda"), mesh, [dtorch.Replicate()])
            y = x.masked_scatter(m, src) * 2   # 6 source values needed, 2 given
            for _ in range(50):
                z = dtorch.ones(64, device_mesh=mesh) + 1
                del z
            try:
                y.to_torch()
            except dtorch.KernelError as e:
                print("kernel error:", str(e).splitlines()[0])
            else:
                print("no error")
            del x, m, src, y
            import gc; gc.collect()
            print("alive")
            """)
        env = dict(os.environ, **{SAME: "1", NUM: "2"})
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("kernel error:", p.stdout, p.stderr)
        self.assertIn("masked_scatter", p.stdout)
        self.assertIn("alive", p.stdout)


if __name__ == "__main__":
    unittest.main()
