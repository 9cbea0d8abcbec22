"""``Graph(GraphOption(per_device_per_process=True))`` (issue 31 item 4): each CPU device's kernels run
in a local ``dtorch-node`` process of its own (python/dtorch/_processes.py). The same programs on such
a graph and on an ordinary one (threads) give bitwise-equal blocks on every device (1, 2, uneven 3
and 2x2 meshes: elementwise, a matmul with a Partial result and genuine Partial inputs, reductions,
redistributes, a tiny Llama forward), equal to eager torch; the work really runs in the children
(host values are shipped to them, an ordinary graph ships nothing); a child that dies fails only its
device's reads; the children are gone after the
last such graph ends, after the program ends, and after the program is killed."""

import gc
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import torch

import dtorch
from dtorch import GraphOption, Partial, Replicate, Shard, _C
from dtorch.test.test_util import _bitwise_equal, genuine_partial, local_values

from helpers import cpu_only, int_valued

NEEDS = unittest.skipIf(not _C._cluster_info()["available"], "built without ZeroMQ")

MESHES = [dtorch.DeviceMesh("cpu", [0]), dtorch.DeviceMesh("cpu", [0, 1]), dtorch.DeviceMesh("cpu", [0, 1, 2]),
          dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))]


def _gone(pid):
    """The process no longer runs (it exited; a zombie not reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _wait_gone(pids, bound_s=60.0):
    """Waits (sleeping, bounded) until every pid is gone; returns those still running."""
    end = time.monotonic() + bound_s
    while time.monotonic() < end and not all(_gone(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if not _gone(p)]


def program(mesh, graph):
    """One program on ``mesh`` in ``graph``; returns (name, dtorch result, torch reference, exact)."""
    one = [Replicate()] * mesh.ndim
    first = [Shard(0)] + [Replicate()] * (mesh.ndim - 1)
    a, b = int_valued(6, 5, seed=1), int_valued(5, 7, seed=2)
    x = dtorch.from_torch(a, mesh, first, graph=graph)
    y = dtorch.from_torch(int_valued(6, 5, seed=3), mesh, one, graph=graph)
    w = dtorch.from_torch(b, mesh, [Shard(0)] + [Replicate()] * (mesh.ndim - 1), graph=graph)
    xs = x.redistribute(placements=[Shard(1)] + [Replicate()] * (mesh.ndim - 1))
    mm = xs @ w  # Shard(1) @ Shard(0): a Partial result where the mesh dim has several devices
    p = genuine_partial(int_valued(6, 5, seed=4), mesh, [Partial()] * mesh.ndim, graph=graph)
    out = [("elementwise", (x * 2.5 + y).exp(), (a * 2.5 + int_valued(6, 5, seed=3)).exp(), False),
           ("matmul", mm, a @ b, True),
           ("matmul_partial_read", mm.redistribute(placements=one), a @ b, True),
           ("partial_reduced", (p * 3).redistribute(placements=one), int_valued(6, 5, seed=4) * 3, True),
           ("partial_scattered", p.redistribute(placements=first), int_valued(6, 5, seed=4), True),
           ("sum", x.sum(0), a.sum(0), True),
           ("amax", (x - y).amax(1), (a - int_valued(6, 5, seed=3)).amax(1), True),
           ("redistribute", x.redistribute(placements=[Shard(1)] + one[1:]), a, True),
           ("softmax", dtorch.softmax(xs, dim=0), torch.softmax(a, dim=0), False)]
    return out


@NEEDS
@cpu_only("the processes serve CPU devices")
class TestPerProcess(unittest.TestCase):
    def test_same_as_threads_and_torch(self):
        before = _C._cluster_info()["values"]
        threads = dtorch.Graph()
        ref = {}
        for mesh in MESHES:
            for name, got, want, exact in program(mesh, threads):
                ref[(mesh, name)] = (local_values(got), got.to_torch())
        self.assertEqual(_C._cluster_info()["values"], before)  # an ordinary graph ships nothing
        g = dtorch.Graph(GraphOption(per_device_per_process=True, num_devices=4))
        from dtorch import _processes
        pids = _processes.pids()
        self.assertEqual(len(pids), 4)
        self.assertEqual([n["pid"] for n in dtorch.MainNode.nodes()], pids)
        self.assertNotIn(os.getpid(), pids)
        for mesh in MESHES:
            for name, got, want, exact in program(mesh, g):
                with self.subTest(mesh=mesh, op=name):
                    self.assertIs(got.graph, g)
                    blocks, full = ref[(mesh, name)]
                    mine = local_values(got)
                    self.assertEqual(len(mine), mesh.size())  # every device's block, replicas included
                    for i, (u, v) in enumerate(zip(mine, blocks)):
                        self.assertTrue(_bitwise_equal(u, v), f"device {i}: {u} != {v}")
                    self.assertTrue(_bitwise_equal(got.to_torch(), full))
                    if exact:
                        self.assertTrue(torch.equal(got.to_torch(), want))
                    else:
                        torch.testing.assert_close(got.to_torch(), want, rtol=1e-5, atol=1e-6)
        shipped = _C._cluster_info()["values"]
        self.assertGreater(shipped, before)  # the host values went to the children
        for mesh in MESHES:  # while the children run, an ordinary graph still keeps its devices here
            for name, got, _, _ in program(mesh, threads):
                self.assertTrue(_bitwise_equal(got.to_torch(), ref[(mesh, name)][1]), name)
        self.assertEqual(_C._cluster_info()["values"], shipped)
        # An id without a process is refused at the call; the graph goes on.
        with self.assertRaisesRegex(ValueError, "cpu:4 has no process of its own"):
            dtorch.zeros(2, device_mesh=dtorch.DeviceMesh("cpu", [3, 4]), graph=g)
        with self.assertRaisesRegex(NotImplementedError, "CUDA devices in a process each"):
            dtorch.zeros(2, device_mesh=dtorch.DeviceMesh("cuda", [0]), graph=g)
        with self.assertRaisesRegex(NotImplementedError, "per_device_per_process"):  # no Python in the children
            dtorch.local_map(torch.sin, [Replicate()])(dtorch.ones(2, device_mesh=MESHES[0], graph=g))
        wide = dtorch.DeviceMesh("cpu", list(range(6)))  # ordinary graphs keep any id in this process
        self.assertEqual(dtorch.ones(6, device_mesh=wide, placements=[Shard(0)], graph=threads).sum().item(), 6.0)
        self.assertEqual(dtorch.ones(3, device_mesh=MESHES[1], graph=g).sum().item(), 3.0)
        self.assertEqual(_wait_gone(pids, 0.0), pids)  # all still running
        # The last such graph ends (its tensors gone): its children stop and the private cluster closes.
        del got, g
        gc.collect()
        self.assertEqual(_wait_gone(pids), [])
        self.assertEqual(_processes.pids(), [])
        self.assertIsNone(_C._cluster_address())
        # The ordinary graph still works, and a new per-process graph starts new children.
        self.assertEqual(dtorch.ones(3, device_mesh=MESHES[2], graph=threads).sum().item(), 3.0)
        g2 = dtorch.Graph(GraphOption(per_device_per_process=True, num_devices=2))
        pids2 = _processes.pids()
        self.assertEqual(len(pids2), 2)
        x = dtorch.from_torch(torch.arange(6.0), MESHES[1], [Shard(0)], graph=g2)
        self.assertTrue(torch.equal((x * x).sum().to_torch(), (torch.arange(6.0) ** 2).sum()))
        del x, g2
        gc.collect()
        self.assertEqual(_wait_gone(pids2), [])

    def test_a_dead_child_fails_only_its_device(self):
        from dtorch import _processes
        g = dtorch.Graph(GraphOption(per_device_per_process=True, num_devices=2))
        pids = _processes.pids()
        m0, m1 = dtorch.DeviceMesh("cpu", [0]), dtorch.DeviceMesh("cpu", [1])
        a = dtorch.from_torch(torch.arange(4.0), m0, graph=g) + 1
        b = dtorch.from_torch(torch.arange(4.0), m1, graph=g) + 1
        self.assertEqual(b.sum().item(), 10.0)
        os.kill(pids[1], signal.SIGKILL)  # device 1's process dies (a crash in a kernel, say)
        with self.assertRaisesRegex(dtorch.KernelError, "worker node 1"):
            (b * 2).to_torch()  # within the loss bound, never a hang
        self.assertTrue(torch.equal((a * 2).to_torch(), (torch.arange(4.0) + 1) * 2))  # device 0 goes on
        del a, b, g
        gc.collect()
        self.assertEqual(_wait_gone(pids), [])

    def test_llama_forward(self):
        try:
            import transformers
        except ImportError:
            self.skipTest("transformers is not installed")
        from dtorch.applications.llama import LlamaForCausalLM
        torch.manual_seed(0)
        cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
        hf = transformers.LlamaForCausalLM(cfg).eval()
        ids = torch.tensor([[3, 17, 9, 5, 60, 1]])
        with tempfile.TemporaryDirectory() as d:
            hf.save_pretrained(d)
            mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("tp",))
            threads = LlamaForCausalLM.from_pretrained(d, device_mesh=mesh, graph=dtorch.Graph())(ids)
            g = dtorch.Graph(GraphOption(per_device_per_process=True, num_devices=2))
            procs = LlamaForCausalLM.from_pretrained(d, device_mesh=mesh, graph=g)(ids)
            for i, (u, v) in enumerate(zip(local_values(procs), local_values(threads))):
                self.assertTrue(_bitwise_equal(u, v), f"device {i}")
            with torch.no_grad():
                torch.testing.assert_close(procs.to_torch(), hf(ids).logits, rtol=1e-4, atol=1e-4)
            from dtorch import _processes
            pids = _processes.pids()
            del procs, g
            gc.collect()
            self.assertEqual(_wait_gone(pids), [])


CHILD = textwrap.dedent("""
    import sys, torch, dtorch
    from dtorch import _processes
    g = dtorch.Graph(dtorch.GraphOption(per_device_per_process=True, num_devices=2))
    x = dtorch.from_torch(torch.arange(4.0), dtorch.DeviceMesh("cpu", [0, 1]), [dtorch.Shard(0)], graph=g)
    assert (x + 1).sum().item() == 10.0
    print(" ".join(map(str, _processes.pids())), flush=True)
    if sys.argv[1] == "hang":
        sys.stdin.read()
""")


THREADS_CHILD = textwrap.dedent("""
    import sys, torch, dtorch
    sys.path.insert(0, sys.argv[2])
    from dtorch import GraphOption, _processes
    from dtorch.test.test_util import _bitwise_equal, local_values
    from test_per_process import program
    torch.set_num_threads(int(sys.argv[1]))
    mesh = dtorch.DeviceMesh("cpu", [0, 1])
    threads = program(mesh, dtorch.Graph())
    procs = program(mesh, dtorch.Graph(GraphOption(per_device_per_process=True, num_devices=2)))
    for (name, p, ref, _), (_, t, _, _) in zip(procs, threads):
        for i, (u, v) in enumerate(zip(local_values(p), local_values(t))):
            assert _bitwise_equal(u, v), (name, i)
    for pid in _processes.pids():
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(e.split(b"=", 1) for e in f.read().split(b"\\0") if b"=" in e)
        print(env[b"OMP_NUM_THREADS"].decode(), env[b"MKL_NUM_THREADS"].decode())
""")


@NEEDS
@cpu_only("the processes serve CPU devices")
class TestThreadCount(unittest.TestCase):
    def test_children_follow_torch_threads(self):
        # The children take this process's torch thread count when they start (1 here, whatever
        # the machine's default), so their blocks equal the worker threads' (which use torch's
        # setting) bit for bit: a GEMM on this CPU gives other bits with 1 and 2 threads.
        here = os.path.dirname(os.path.abspath(__file__))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        env.pop("OMP_NUM_THREADS", None)
        env.pop("MKL_NUM_THREADS", None)
        for n in (1, 2):
            with self.subTest(threads=n):
                r = subprocess.run([sys.executable, "-c", THREADS_CHILD, str(n), here], env=env, cwd=here,
                                   capture_output=True, text=True, timeout=300)
                self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
                self.assertEqual(r.stdout.split(), [str(n)] * 4)


@NEEDS
@cpu_only("the processes serve CPU devices")
class TestNoOrphans(unittest.TestCase):
    def _run(self, mode):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        return subprocess.Popen([sys.executable, "-c", CHILD, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env)

    def test_program_end_stops_children(self):
        p = self._run("exit")
        out, _ = p.communicate(timeout=300)
        self.assertEqual(p.returncode, 0)
        pids = [int(s) for s in out.split()]
        self.assertEqual(len(pids), 2)
        self.assertEqual(_wait_gone(pids), [])

    def test_killed_program_leaves_no_children(self):
        p = self._run("hang")
        try:
            pids = [int(s) for s in p.stdout.readline().split()]
            self.assertEqual(len(pids), 2)
            self.assertEqual(_wait_gone(pids, 0.0), pids)
            os.kill(p.pid, signal.SIGKILL)  # no atexit: the children find the heartbeats gone
            p.wait(timeout=60)
            self.assertEqual(_wait_gone(pids), [])
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


if __name__ == "__main__":
    unittest.main()
