"""Graphs: concurrency, sync, guards, cross-graph errors, shutdown, and interpreter exit."""

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
import time
import unittest

import torch

import dtorch
from dtorch import DeviceMesh, Replicate, Shard
from dtorch.test.probes import Gate
from dtorch.test.test_util import assert_tensor_allclose, assert_tensor_equal

from helpers import CPU2, CPU3, cpu_only, int_valued

PYTHON_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "python"))


def run_with_timeout(fn, timeout):
    """Runs fn on a thread; returns (finished, result or exception)."""
    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001
            box["error"] = e

    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(timeout)
    if th.is_alive():
        return False, None
    if "error" in box:
        raise box["error"]
    return True, box.get("result")


class TestGraph(unittest.TestCase):
    def test_default_graph(self):
        g = dtorch.Graph.default_graph()
        self.assertIsInstance(g, dtorch.Graph)
        self.assertIsInstance(dtorch.default_graph, dtorch.Graph)  # an object standing for the thread's graph
        self.assertEqual(dtorch.default_graph, g)
        self.assertEqual(dtorch.default_graph.id, g.id)
        self.assertIs(dtorch.ones(2).graph, g)
        self.assertEqual(dtorch.default_graph.backend, "torch")

    def test_explicit_graph(self):
        g = dtorch.Graph()
        self.assertNotEqual(g, dtorch.default_graph)
        self.assertIsNot(g, dtorch.Graph.default_graph())
        t = int_valued(5, 7)
        x = dtorch.from_torch(t, CPU3, [Shard(1)], graph=g)
        self.assertIs(x.graph, g)
        y = (x * 3 - 1).sum(dim=0)
        self.assertIs(y.graph, g)
        self.assertIs(dtorch.zeros(3, graph=g).graph, g)
        self.assertIs(dtorch.rand(3, graph=g).graph, g)
        self.assertIs(dtorch.arange(3, graph=g).graph, g)
        self.assertIs(dtorch.ones_like(x).graph, g)
        assert_tensor_equal(self, y, (t * 3 - 1).sum(dim=0))
        g.sync()
        g.shutdown()

    def test_sync_and_sync_future(self):
        g = dtorch.Graph()
        x = dtorch.ones(64, 64, device_mesh=CPU2, placements=[Shard(0)], graph=g)
        for _ in range(20):
            x = (x @ dtorch.ones(64, 64, device_mesh=CPU2, graph=g)) / 64
        g.sync()
        f = g.sync_future()
        self.assertIsInstance(f, dtorch.VoidFutureCollect)
        self.assertTrue(f.wait_for(10_000))
        self.assertTrue(f.is_ready())
        self.assertIsNone(f.get())
        self.assertIsNone(f.wait())

        async def main():
            y = x + 1
            await g.sync_future()
            return await y.to_torch_async()

        assert_tensor_equal(self, asyncio.run(main()), torch.full((64, 64), 2.0))
        g.shutdown()

    def test_wait_for_times_out_then_completes(self):
        # The read is held by a test gate, so it is pending for sure when wait_for(0) looks; the
        # timer only turns a wait_for that ignored its timeout into a failure instead of a hang.
        g = dtorch.Graph()
        gate = Gate()
        timer = threading.Timer(30.0, gate.open)
        timer.daemon = True
        timer.start()
        try:
            x = gate.hold(dtorch.ones(64, 64, graph=g))
            for _ in range(3):
                x = (x @ x) / 64
            f = x.to_torch_async()
            sync = g.sync_future()
            self.assertIs(f.wait_for(0), False)
            self.assertIs(f.wait_for(5), False)
            self.assertIs(sync.wait_for(0), False)
            self.assertFalse(gate.is_open, "wait_for returned only once the timer opened the gate")
            gate.open()
            self.assertIs(f.wait_for(60_000), True)
            self.assertIs(sync.wait_for(60_000), True)
            assert_tensor_allclose(self, f.get(), torch.ones(64, 64))
        finally:
            timer.cancel()
            gate.open()
            g.shutdown()

    def test_two_graphs_concurrently(self):
        g1, g2 = dtorch.Graph(), dtorch.Graph()
        a = int_valued(32, 32, seed=1)
        b = int_valued(32, 32, seed=2)
        results = {}

        def work(name, g, t):
            x = dtorch.from_torch(t, CPU2, [Shard(0)], graph=g)
            w = dtorch.from_torch(t.t().contiguous(), CPU2, [Replicate()], graph=g)
            for _ in range(10):
                x = x @ w / 8
            results[name] = x.to_torch()

        threads = [threading.Thread(target=work, args=("a", g1, a)), threading.Thread(target=work, args=("b", g2, b))]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        self.assertFalse(any(th.is_alive() for th in threads))

        def ref(t):
            x = t
            for _ in range(10):
                x = x @ t.t() / 8
            return x

        assert_tensor_allclose(self, results["a"], ref(a), rtol=1e-4)
        assert_tensor_allclose(self, results["b"], ref(b), rtol=1e-4)
        # Interleaved on one thread, too.
        x1 = dtorch.ones(3, graph=g1)
        x2 = dtorch.ones(3, graph=g2)
        y1, y2 = x1 + 1, x2 * 3
        assert_tensor_equal(self, [y1, y2], [torch.full((3,), 2.0), torch.full((3,), 3.0)])
        g1.shutdown()
        g2.shutdown()

    def test_different_graphs_error(self):
        g = dtorch.Graph()
        x = dtorch.ones(2, 2, graph=g)
        y = dtorch.ones(2, 2)
        for fn in (lambda: x + y, lambda: y - x, lambda: x * y, lambda: x / y, lambda: x @ y, lambda: x.add(y)):
            with self.assertRaisesRegex(ValueError, "graph"):
                fn()
        assert_tensor_equal(self, x + x, torch.full((2, 2), 2.0))
        assert_tensor_equal(self, y + y, torch.full((2, 2), 2.0))
        g.shutdown()

    @cpu_only("prints a cpu mesh")
    def test_device_mesh_guard(self):
        g = dtorch.Graph()
        mesh = DeviceMesh("cpu", [0, 1, 2], mesh_dim_names=("tp",))
        self.assertIsNone(g.default_device_mesh)
        with g.device_mesh_guard(mesh) as m:
            self.assertIs(m, mesh)
            self.assertIs(g.default_device_mesh, mesh)
            x = dtorch.ones(6, 2, graph=g, placements=[Shard(0)])
            self.assertEqual(x.device_mesh, mesh)
            self.assertEqual(repr(x.device_mesh), "DeviceMesh('cpu', [0, 1, 2], mesh_dim_names=('tp',))")
            self.assertEqual(dtorch.zeros(2, graph=g).placements, [Replicate()])
            # The guard is per graph.
            self.assertEqual(dtorch.zeros(2).device_mesh, DeviceMesh("cpu", [0]))
            # An explicit device wins.
            self.assertEqual(dtorch.zeros(2, graph=g, device="cpu").device_mesh, DeviceMesh("cpu", [0]))
            with g.device_mesh_guard(CPU2):
                self.assertEqual(dtorch.zeros(2, graph=g).device_mesh, CPU2)
            self.assertIs(g.default_device_mesh, mesh)
        self.assertIsNone(g.default_device_mesh)
        self.assertEqual(dtorch.zeros(2, graph=g).device_mesh, DeviceMesh("cpu", [0]))
        assert_tensor_equal(self, x * 2, torch.full((6, 2), 2.0))
        with self.assertRaises(TypeError):
            with g.device_mesh_guard([0, 1]):
                pass
        g.shutdown()

    def test_dtype_guard(self):
        g = dtorch.Graph()
        with g.dtype_guard(torch.float64):
            self.assertIs(g.default_dtype, torch.float64)
            self.assertEqual(dtorch.zeros(2, graph=g).dtype, torch.float64)
            self.assertEqual(dtorch.rand(2, graph=g).dtype, torch.float64)
            self.assertEqual(dtorch.full((2,), 0.5, graph=g).dtype, torch.float64)
            self.assertEqual(dtorch.full((2,), 1, graph=g).dtype, torch.int64)  # int fill stays int64
            self.assertEqual(dtorch.arange(3, graph=g).dtype, torch.int64)
            self.assertEqual(dtorch.zeros(2, graph=g, dtype=torch.float16).dtype, torch.float16)
            self.assertEqual(dtorch.zeros(2).dtype, torch.float32)  # other graphs unaffected
        self.assertIsNone(g.default_dtype)
        self.assertEqual(dtorch.zeros(2, graph=g).dtype, torch.float32)
        g.shutdown()

    @cpu_only("the 'ref' backend has no CUDA devices")
    def test_ref_backend_graph(self):
        g = dtorch.Graph(backend="ref")
        self.assertEqual(g.backend, "ref")
        t = int_valued(5, 7, seed=3)
        x = dtorch.from_torch(t, CPU3, [Shard(1)], graph=g)
        assert_tensor_equal(self, x, t)
        y = ((x * 2 + 1) @ dtorch.ones(7, 3, device_mesh=CPU3, graph=g)).sum(0)
        self.assertEqual(y.placements, [dtorch.Partial()])
        assert_tensor_allclose(self, y, ((t * 2 + 1) @ torch.ones(7, 3)).sum(0))
        assert_tensor_allclose(self, y.redistribute(placements=[Shard(0)]), ((t * 2 + 1) @ torch.ones(7, 3)).sum(0))
        g.shutdown()
        with self.assertRaises((ValueError, RuntimeError)):
            dtorch.Graph(backend="no-such-backend")

    def test_satisfy(self):
        self.assertTrue(dtorch.default_graph.satisfy(CPU3))
        self.assertFalse(dtorch.default_graph.satisfy(DeviceMesh("cuda", [0])) and not torch.cuda.is_available())

    def test_shutdown_with_work_queued(self):
        g = dtorch.Graph()
        xs = [dtorch.ones(128, 128, device_mesh=CPU3, placements=[Shard(0)], graph=g)]
        w = dtorch.ones(128, 128, device_mesh=CPU3, graph=g)
        for _ in range(200):
            xs.append((xs[-1] @ w) / 128)
        last = xs[-1]
        del xs
        finished, _ = run_with_timeout(g.shutdown, 120)
        self.assertTrue(finished, "Graph.shutdown() hung with work queued")
        g.shutdown()  # idempotent
        # Ops on a shut-down graph fail at the call; releasing its tensors stays harmless.
        with self.assertRaises(RuntimeError):
            dtorch.ones(2, graph=g)
        with self.assertRaises(RuntimeError):
            last + 1
        del last, w
        # Other graphs keep working.
        assert_tensor_equal(self, dtorch.ones(2) + 1, torch.full((2,), 2.0))

    def test_drop_graph_with_work_queued(self):
        def body():
            g = dtorch.Graph()
            x = dtorch.ones(64, 64, device_mesh=CPU2, placements=[Shard(1)], graph=g)
            for _ in range(100):
                x = x * 1.5 - 0.5
            del x, g  # the last references: the graph shuts down by itself

        finished, _ = run_with_timeout(body, 120)
        self.assertTrue(finished, "dropping a graph with queued work hung")

    def test_interpreter_exit_with_live_graphs(self):
        # The work is held behind a closed test gate, so it is certainly still queued when the
        # interpreter exits, however fast the machine. atexit cancels the graphs (nobody can read
        # the values any more): the held work is dropped unrun and the pending reads fail as
        # cancelled, which a handler registered before dtorch's (atexit runs handlers last-in
        # first-out) then checks. The subprocess timeout only turns a hang into a failure.
        script = textwrap.dedent(
            """
            import atexit, sys
            sys.path.insert(0, %r)
            futures = []

            def outcome(f):
                try:
                    return "%%s %%s" %% (f.is_ready(), f.get()[0, 0].item())
                except RuntimeError as e:
                    return "%%s %%s" %% (f.is_ready(), "cancelled" in str(e))

            def after_dtorch_shutdown():
                print("after shutdown:", [outcome(f) for f in futures], flush=True)

            atexit.register(after_dtorch_shutdown)
            import dtorch
            from dtorch import DeviceMesh, Shard
            from dtorch.test.probes import Gate
            mesh = DeviceMesh("cpu", [0, 1, 2])
            g = dtorch.Graph()
            gate = Gate()
            keep = []
            for graph in (g, dtorch.default_graph):
                x = gate.hold(dtorch.ones(48, 48, device_mesh=mesh, placements=[Shard(0)], graph=graph))
                for _ in range(20):
                    x = (x @ dtorch.ones(48, 48, device_mesh=mesh, graph=graph)) / 48
                keep.append(x)
                futures.append(x.to_torch_async())
            print("issued ready=%%s" %% [f.is_ready() for f in futures], flush=True)
            # Exit with work queued and tensors alive.
            """
            % PYTHON_DIR
        )
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("issued ready=[False, False]", proc.stdout)
        self.assertIn("after shutdown: ['True True', 'True True']", proc.stdout, proc.stdout + proc.stderr)

    @unittest.skipIf(sys.platform == "win32", "POSIX signals")
    def test_ctrl_c_interrupts_a_value_read(self):
        # The read waits on a value held by a closed test gate, so it is pending for sure when
        # SIGINT arrives, whatever the machine's speed; a signal that lands before the read starts
        # is caught by the same handler ("waiting" is printed inside the try), with the same
        # outcome. The child's timer opens the gate after 60 s only so that a read that ignores
        # Ctrl-C ends with "finished" (a failure) instead of hanging. The child leaves with
        # os._exit once interrupted.
        script = textwrap.dedent(
            """
            import os, signal, sys, threading
            # A child started from a shell without job control inherits SIGINT ignored, and
            # Python then installs no handler: restore the default one explicitly.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            sys.path.insert(0, %r)
            import dtorch
            from dtorch.test.probes import Gate
            gate = Gate()
            timer = threading.Timer(60.0, gate.open)
            timer.daemon = True
            timer.start()
            x = gate.hold(dtorch.ones(256, 256)) * 2
            try:
                print("waiting", flush=True)
                x.to_torch()
                print("finished", flush=True)
            except KeyboardInterrupt:
                print("interrupted ready=%%s gate_open=%%s" %% (x.to_torch_async().is_ready(), gate.is_open),
                      flush=True)
                os._exit(0)
            """
            % PYTHON_DIR
        )
        import signal

        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(proc.stdout.readline().strip(), "waiting")
            time.sleep(0.2)  # usually lands inside the wait; the outcome is the same either way
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        self.assertEqual(proc.returncode, 0, err)
        self.assertIn("interrupted ready=False gate_open=False", out, out + err)

    def test_bool_sub_refused_at_call(self):
        # A bool tensor minus a bool tensor is refused at the call, like torch.
        b = dtorch.from_torch(torch.tensor([True, False]))
        with self.assertRaisesRegex(RuntimeError, "bool"):
            b - b
        assert_tensor_equal(self, dtorch.ones(2) * 2, torch.full((2,), 2.0))

    @cpu_only("an integer division by zero raises in torch's CPU kernel only")
    def test_kernel_error_names_op_device_and_call_site(self):
        # An integer division by a zero tensor fails in torch's kernel (the data decides): on the
        # devices, the error surfaces at the read.
        mesh = CPU2
        ta, tz = torch.arange(6).reshape(2, 3), torch.zeros(2, 3, dtype=torch.int64)
        with self.assertRaises(RuntimeError):
            ta // tz
        a = dtorch.from_torch(ta, mesh, [Shard(0)])
        b = dtorch.from_torch(tz, mesh, [Shard(0)])
        line = sys._getframe().f_lineno + 1
        y = a // b
        z = y + 1
        with self.assertRaises(dtorch.KernelError) as cm:
            z.to_torch()
        msg = str(cm.exception)
        self.assertIsInstance(cm.exception, RuntimeError)
        self.assertIn("floor_divide", msg)
        self.assertIn("cpu:", msg)
        self.assertIn(f"{__file__}:{line}", msg)
        # The error travels with every dependent tensor, and reads keep raising it.
        with self.assertRaises(dtorch.KernelError):
            y.to_torch_async().get()
        with self.assertRaises(dtorch.KernelError):
            z.to_torch()
        # Unaffected tensors, and later work, are fine: float16 matmul runs on the CPU as in torch.
        h = torch.ones(2, 3, dtype=torch.float16)
        ha = dtorch.from_torch(h, mesh, [Shard(0)])
        assert_tensor_equal(self, ha + 1, h + 1)
        assert_tensor_equal(self, ha @ dtorch.from_torch(h.t().contiguous(), mesh), h @ h.t())
        assert_tensor_equal(self, a + 1, ta + 1)


if __name__ == "__main__":
    unittest.main()
