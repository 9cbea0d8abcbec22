"""Streams keyed by (device type, id, kind): meshes with huge device ids compute at the cost of the
devices used, checked against eager torch on the same inputs; memory accounting follows them; and
the overlap switch (DTORCH_OVERLAP=0, read at graph creation) gives the same values.

The C side (events, the communication stream, a second device type) is tests/c/test_stream.c.
"""

import os
import subprocess
import sys
import unittest

import torch

import dtorch
import dtorch.nn.functional as F
from dtorch import DeviceMesh, Partial, Replicate, Shard
from dtorch.test.test_util import assert_tensor_equal

from helpers import int_valued

BIG_MESHES = ([0, 2**31 - 1], [5, 10**9])


def tp_block(x, w1, w2):
    """Column-parallel linear -> relu -> row-parallel linear (a Partial) -> all-reduce."""
    h = F.relu(x @ w1)
    return (h @ w2).redistribute(placements=[Replicate()])


class TestBigIds(unittest.TestCase):
    def test_compute_on_big_ids(self):
        for ids in BIG_MESHES:
            with self.subTest(ids=ids):
                mesh = DeviceMesh("cpu", ids)
                a, b = int_valued(6, 4, seed=1), int_valued(6, 4, seed=2)
                x = dtorch.from_torch(a, mesh, [Shard(0)])
                y = dtorch.from_torch(b, mesh, [Replicate()])
                assert_tensor_equal(self, (x * y + 1).full_tensor(), a * b + 1)
                assert_tensor_equal(self, x.redistribute(placements=[Replicate()]).full_tensor(), a)
                s = x.redistribute(placements=[Shard(1)])
                assert_tensor_equal(self, (s - 2).full_tensor(), a - 2)
                p = dtorch.from_torch(a, mesh, [Partial()])
                assert_tensor_equal(self, p.redistribute(placements=[Replicate()]).full_tensor(), a)
                assert_tensor_equal(self, p.redistribute(placements=[Shard(0)]).full_tensor(), a)

    def test_tensor_parallel_block(self):
        for ids in BIG_MESHES:
            with self.subTest(ids=ids):
                mesh = DeviceMesh("cpu", ids)
                a, w1, w2 = int_valued(4, 6, seed=3), int_valued(6, 8, seed=4), int_valued(8, 6, seed=5)
                out = tp_block(dtorch.from_torch(a, mesh, [Replicate()]),
                               dtorch.from_torch(w1, mesh, [Shard(1)]),
                               dtorch.from_torch(w2, mesh, [Shard(0)]))
                assert_tensor_equal(self, out.full_tensor(), torch.relu(a @ w1) @ w2)

    def test_move_between_big_meshes(self):
        a = int_valued(6, 4, seed=6)
        src = dtorch.from_torch(a, DeviceMesh("cpu", BIG_MESHES[0]), [Shard(0)])
        dst = src.redistribute(DeviceMesh("cpu", BIG_MESHES[1]), [Shard(1)])
        assert_tensor_equal(self, (dst * 3).full_tensor(), a * 3)

    def test_memory_stats_on_big_ids(self):
        mesh = DeviceMesh("cpu", [7, 2**31 - 1])
        x = dtorch.from_torch(torch.ones(1024, 256), mesh, [Shard(0)])
        y = x * 2
        y.full_tensor()
        stats = dtorch.memory_stats(mesh)
        self.assertEqual(set(stats), {"cpu:7", f"cpu:{2**31 - 1}"})
        for v in stats.values():
            self.assertGreaterEqual(v["peak"], 512 * 256 * 4)
        del x, y


class TestOverlapSwitch(unittest.TestCase):
    def test_overlap_off_same_values(self):
        """A child process with DTORCH_OVERLAP=0 computes the block bit for bit as eager torch."""
        code = (
            "import torch, dtorch\n"
            "import dtorch.nn.functional as F\n"
            "from dtorch import DeviceMesh, Replicate, Shard\n"
            "torch.manual_seed(0)\n"
            "a = torch.randint(-3, 4, (4, 6)).float(); w1 = torch.randint(-3, 4, (6, 8)).float()\n"
            "w2 = torch.randint(-3, 4, (8, 6)).float()\n"
            "m = DeviceMesh('cpu', [0, 1])\n"
            "h = F.relu(dtorch.from_torch(a, m, [Replicate()]) @ dtorch.from_torch(w1, m, [Shard(1)]))\n"
            "o = (h @ dtorch.from_torch(w2, m, [Shard(0)])).redistribute(placements=[Replicate()])\n"
            "assert torch.equal(o.full_tensor(), torch.relu(a @ w1) @ w2)\n"
            "print('ok')\n")
        env = dict(os.environ, DTORCH_OVERLAP="0")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "ok")


if __name__ == "__main__":
    unittest.main()


class TestWorkersFreeWhatTheyMade(unittest.TestCase):
    """The blobs of a released value that a worker made are freed by that worker (DT_KC_RELEASE at
    the head of its next batch; docs/decisions.md "Replay, fifth step"): after `del` and a sync each
    device's current bytes are back where they were, on every device of the mesh, in rounds with
    and without other kernels for the stream, and the values still alive keep theirs."""

    def test_current_bytes_return_on_every_device(self):
        mesh = DeviceMesh("cpu", [0, 1])
        x = dtorch.from_torch(torch.randn(256, 128), mesh, [Shard(0)])
        dtorch.synchronize()
        base = {k: v["current"] for k, v in dtorch.memory_stats(mesh).items()}
        block = 128 * 128 * 4  # one device's piece of one value
        ys = [x * float(i + 2) for i in range(4)]
        dtorch.synchronize()
        held = {k: v["current"] for k, v in dtorch.memory_stats(mesh).items()}
        for k in base:
            self.assertGreaterEqual(held[k] - base[k], 4 * block, k)
        keep = ys[1]
        del ys
        dtorch.synchronize()  # a round with no kernel but the sync's on each stream
        after = {k: v["current"] for k, v in dtorch.memory_stats(mesh).items()}
        for k in base:
            self.assertEqual(after[k] - base[k], held[k] - base[k] - 3 * block, k)
        self.assertTrue(torch.equal(keep.full_tensor(), x.full_tensor() * 3.0))
        z = keep + 1  # released in a round that has other kernels for the stream
        del keep
        w = z * 2
        del z
        dtorch.synchronize()
        final = {k: v["current"] for k, v in dtorch.memory_stats(mesh).items()}
        for k in base:
            self.assertEqual(final[k] - base[k], block, k)
        self.assertTrue(torch.equal(w.full_tensor(), (x.full_tensor() * 3.0 + 1) * 2))
