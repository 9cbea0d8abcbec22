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

from helpers import int_valued, thread_names

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


@unittest.skipUnless(sys.platform.startswith("linux"), "thread names from /proc")
class TestThreadNames(unittest.TestCase):
    """dtorch's threads carry names (top -H, ps -L, gdb, /proc): the controller, and each stream's
    worker by device, a communication stream's with a trailing c; a worker's OpenMP helpers
    inherit its name."""

    def test_names(self):
        mesh = DeviceMesh("cpu", [0, 1])
        a = torch.arange(32.0).reshape(8, 4)
        x = dtorch.from_torch(a, mesh, [Shard(0)])
        self.assertTrue(torch.equal(x.redistribute(placements=[Replicate()]).to_torch(), a))
        names = set(thread_names())
        self.assertLessEqual({"dt-controller", "dt-cpu0", "dt-cpu1", "dt-cpu0c", "dt-cpu1c"}, names)


REST_CHILD = r"""
import os, time, torch, dtorch
torch.set_num_threads(2)
def threads():
    return len(os.listdir("/proc/self/task"))
def settle():
    # Threads leave a little after they are told to (a worker rests after a few idle
    # milliseconds): the count once it has not changed for a quarter second (hang guard 20 s).
    n, since, end = threads(), time.monotonic(), time.monotonic() + 20
    while time.monotonic() - since < 0.25 and time.monotonic() < end:
        time.sleep(0.01)
        if threads() != n:
            n, since = threads(), time.monotonic()
    return n
torch.manual_seed(0)
a = torch.randint(-2, 3, (768, 768)).float()
da = dtorch.from_torch(a)
def dwork():  # long enough that a wait for it blocks (tens of milliseconds of matmuls)
    x = da
    for _ in range(6):
        x = (x @ da).clamp(-4, 4)
    return x
def ework():
    x = a
    for _ in range(6):
        x = (x @ a).clamp(-4, 4)
    return x
want = ework()
got = [dwork().to_torch()]  # the read's copy of the whole value makes a team
base = settle()
got.append(ework())  # eager work on this thread: its OpenMP team
team = threads()
x = dwork()
dtorch.synchronize()  # blocks, and copies nothing
after = settle()
got.append(x.to_torch())
# Compared only now: torch.equal on this thread would make its team again.
assert all(torch.equal(g, want) for g in got)
print(base, team, after)
"""


@unittest.skipUnless(sys.platform.startswith("linux") and (os.cpu_count() or 1) >= 2
                     and "OpenMP" in torch.__config__.parallel_info(), "Linux, 2+ CPUs, torch with OpenMP")
class TestThreadsRest(unittest.TestCase):
    """A thread about to wait gives its OpenMP team back (dt__backend.thread_rest): the client when
    a read blocks and after it copies a value out, a worker after a few idle milliseconds. libgomp
    counts idle teams against the cores, and once they outnumber them every team's threads sleep
    between parallel regions, so eager torch beside dtorch (and dtorch's worker beside the client's
    team) ran 1.4-1.5x slower on two cores (bench/block.py). Counted in threads of two child
    processes that differ only in DTORCH_THREAD_REST: at rest the one that gives teams back has
    two threads fewer (the client's team, given back after a read's copy of a whole value, and
    the worker's); eager work adds the client's team, and a dtorch.synchronize() that blocked takes
    it away again. Values equal eager torch's."""

    def run_child(self, **env):
        r = subprocess.run([sys.executable, "-c", REST_CHILD], env=dict(os.environ, **env),
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return [int(v) for v in r.stdout.split()]

    def test_teams_given_back(self):
        base, team, after = self.run_child()
        kept_base, kept_team, kept_after = self.run_child(DTORCH_THREAD_REST="0")
        self.assertEqual(kept_base, base + 2)
        self.assertEqual(team, base + 1)
        self.assertEqual(after, base)
        self.assertEqual((kept_team, kept_after), (kept_base, kept_base))
