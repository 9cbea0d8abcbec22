"""dtorch.local_map and dtorch.library.custom_op (issue 31, item 1): the user's torch code on each
device's local pieces, run by that device's worker thread, against eager torch on the same inputs."""

import inspect
import json
import os
import subprocess
import sys
import tempfile
import threading
import unittest

import torch

import dtorch
from dtorch import Partial, Replicate, Shard
from dtorch.test.test_util import (assert_replicas_equal, assert_tensor_allclose, assert_tensor_equal,
                                   local_values)

from helpers import CPU1, CPU2, CPU2x2, CPU3, DEV, genuine_partial

TESTED_OPS = []  # the user's functions, not a registered operator


def here():
    return inspect.currentframe().f_back.f_lineno


def act(t):
    """Torch code dtorch has no operator for, written for one device."""
    return torch.special.erf(t) * torch.special.expit(t) + torch.special.log1p(t.abs())


class TestLocalMap(unittest.TestCase):
    def test_one_device_bit_identical(self):
        for dtype in (torch.float32, torch.bfloat16):
            for mesh in (None, CPU1):
                with self.subTest(dtype=dtype, mesh=mesh):
                    a = torch.randn(6, 5).to(dtype)
                    x = dtorch.from_torch(a, mesh) if mesh else dtorch.from_torch(a)
                    y = dtorch.local_map(act, [Replicate()])(x)
                    self.assertIsInstance(y, dtorch.Tensor)
                    self.assertEqual((y.shape, y.dtype), (a.shape, dtype))
                    assert_tensor_equal(self, y, act(a))

    def test_shards_1d_uneven_2d_every_replica(self):
        a = torch.randn(5, 7)
        cases = [(CPU2, [Shard(0)]), (CPU2, [Shard(1)]), (CPU2, [Replicate()]), (CPU3, [Shard(0)]),
                 (CPU3, [Shard(1)]), (CPU2x2, [Shard(0), Shard(1)]), (CPU2x2, [Replicate(), Shard(0)]),
                 (CPU2x2, [Shard(1), Replicate()]), (CPU2x2, [Shard(0), Shard(0)])]
        for mesh, pl in cases:
            with self.subTest(mesh=mesh, placements=pl):
                x = dtorch.from_torch(a, mesh, pl)
                y = dtorch.local_map(act, pl)(x)
                self.assertEqual(y.placements, pl)
                # allclose: torch's vectorised kernels may round a block's tail apart from the whole's
                assert_tensor_allclose(self, y, act(a), rtol=1e-6, atol=1e-6)
                assert_replicas_equal(self, y)

    def test_local_shapes_and_non_tensor_arguments(self):
        # A row-wise op with a Python number and a torch tensor passed through to every device.
        a, w = torch.randn(5, 4), torch.randn(4)

        def scaled_rows(t, scale, weight):
            return torch.nn.functional.normalize(t * weight, dim=-1) * scale

        for mesh in (CPU2, CPU3):
            x = dtorch.from_torch(a, mesh, [Shard(0)])
            y = dtorch.local_map(scaled_rows, [Shard(0)], in_placements=([Shard(0)], None, None))(x, 2.5, w)
            assert_tensor_allclose(self, y, scaled_rows(a, 2.5, w), rtol=1e-6, atol=1e-6)
            pieces = local_values(y)
            self.assertEqual([p.shape[0] for p in pieces], [torch.chunk(torch.arange(5), mesh.size())[i].numel()
                                                            if i < len(torch.chunk(torch.arange(5), mesh.size()))
                                                            else 0 for i in range(mesh.size())])

    def test_output_shape_changes(self):
        # The output's global shape comes from the local ones: a row sum keeps Shard(0)'s rows.
        a = torch.randn(5, 6)
        for mesh in (CPU2, CPU3):
            x = dtorch.from_torch(a, mesh, [Shard(0)])
            y = dtorch.local_map(lambda t: t.sum(-1, keepdim=True).to(torch.float64), [Shard(0)])(x)
            self.assertEqual((y.shape, y.dtype), (torch.Size([5, 1]), torch.float64))
            assert_tensor_equal(self, y, a.sum(-1, keepdim=True).to(torch.float64))
        # A column sum of row shards is each device's addend: Partial.
        x = dtorch.from_torch(a, CPU3, [Shard(0)])
        y = dtorch.local_map(lambda t: t.sum(0), [Partial()])(x)
        self.assertEqual(y.shape, torch.Size([6]))
        assert_tensor_allclose(self, y, a.sum(0), rtol=1e-5, atol=1e-5)

    def test_genuine_partial_input(self):
        a = torch.randn(4, 3)
        for mesh, pl in ((CPU2, [Partial()]), (CPU3, [Partial()]), (CPU2x2, [Partial(), Shard(0)])):
            with self.subTest(mesh=mesh, placements=pl):
                x = genuine_partial(a, mesh, pl)
                y = dtorch.local_map(lambda t: t * 3.0, pl)(x)  # linear: Partial stays Partial
                assert_tensor_allclose(self, y, a * 3.0, rtol=1e-5, atol=1e-5)
                for got, piece in zip(local_values(y), local_values(x)):
                    assert_tensor_equal(self, got, piece * 3.0)  # each addend, not only the first

    def test_meta_runs_remembered_per_layout_and_argument(self):
        # The memo of meta runs is keyed by the layouts and the other arguments: k changes the shape.
        a = torch.randn(4, 6)
        cols = dtorch.local_map(lambda t, k: t[:, :k] * 2, [Shard(0)])
        for mesh in (CPU2, CPU3):
            x = dtorch.from_torch(a, mesh, [Shard(0)])
            for k in (1, 4, 1):
                assert_tensor_equal(self, cols(x, k), a[:, :k] * 2)

    def test_several_outputs(self):
        a = torch.randn(6, 4)
        x = dtorch.from_torch(a, CPU2, [Shard(0)])
        hi, lo = dtorch.local_map(lambda t: (t.clamp(min=0), t.clamp(max=0)), ([Shard(0)], [Shard(0)]))(x)
        assert_tensor_equal(self, hi, a.clamp(min=0))
        assert_tensor_equal(self, lo, a.clamp(max=0))

    def test_in_placements_checked_or_redistributed(self):
        a = torch.randn(4, 4)
        x = dtorch.from_torch(a, CPU2, [Shard(1)])
        f = dtorch.local_map(torch.special.erf, [Shard(0)], in_placements=([Shard(0)],))
        with self.assertRaisesRegex(ValueError, "redistribute_inputs=True"):
            f(x)
        g = dtorch.local_map(torch.special.erf, [Shard(0)], in_placements=([Shard(0)],), redistribute_inputs=True)
        assert_tensor_equal(self, g(x), torch.special.erf(a))
        with self.assertRaisesRegex(TypeError, "out_placements"):
            dtorch.local_map(torch.special.erf)
        # torch's keyword for the inputs' gradients is taken (and has nothing to do: no autograd)
        h = dtorch.local_map(torch.special.erf, [Shard(0)], ([Shard(0)],), in_grad_placements=([Shard(0)],),
                             device_mesh=CPU2)
        assert_tensor_equal(self, h(dtorch.from_torch(a, CPU2, [Shard(0)])), torch.special.erf(a))

    def test_out_meta_skips_the_meta_run(self):
        a = torch.randn(4, 3)
        x = dtorch.from_torch(a, CPU2, [Shard(0)])

        def data_dependent(t):  # .tolist() cannot run on meta tensors
            return t * float(len([v for v in t.flatten().tolist() if v > 0]) >= 0)

        with self.assertRaisesRegex(RuntimeError, "out_meta"):
            dtorch.local_map(data_dependent, [Shard(0)])(x)
        y = dtorch.local_map(data_dependent, [Shard(0)], out_meta=torch.empty(4, 3, device="meta"))(x)
        assert_tensor_equal(self, y, a)

    def test_runs_on_the_workers_without_the_client_waiting(self):
        go = threading.Event()
        threads = []

        def held(t):
            threads.append(threading.get_native_id())
            go.wait(60)
            return t + 1

        a = torch.randn(4, 2)
        x = dtorch.from_torch(a, CPU2, [Shard(0)])
        y = dtorch.local_map(held, [Shard(0)], out_meta=torch.empty(4, 2, device="meta"))(x)  # returns at once
        fut = y.to_torch_async()
        self.assertFalse(fut.is_ready())  # the kernels wait for go: the call did not
        go.set()
        assert_tensor_equal(self, fut.wait(), a + 1)
        self.assertEqual(len(threads), 2)
        names = set()
        for tid in threads:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.add(f.read().strip())
        self.assertEqual(names, {f"dt-{DEV}0", f"dt-{DEV}1"})  # each device's own worker

    def test_an_exception_fails_the_read_with_the_traceback(self):
        a = torch.randn(4, 2)
        x = dtorch.from_torch(a, CPU2, [Shard(0)])

        def bad(t):
            if t.shape[0]:
                raise ValueError("bad rows in the user's kernel")
            return t

        with self.assertRaisesRegex(RuntimeError, "failed on meta tensors.*bad rows.*out_meta"):
            dtorch.local_map(bad, [Shard(0)])(x)  # the meta run raises it at the call
        line = here() + 1
        y = dtorch.local_map(bad, [Shard(0)], out_meta=torch.empty(4, 2, device="meta"))(x)
        z = y * 2  # depends on it
        for t in (y, z):
            with self.assertRaises(dtorch.KernelError) as cm:
                t.to_torch()
            msg = str(cm.exception)
            self.assertIn(f"{__file__}:{line}", msg)  # the user's call
            self.assertIn("Traceback", msg)
            self.assertIn('raise ValueError("bad rows in the user\'s kernel")', msg)  # the user's line in fn
            self.assertIn("ValueError: bad rows in the user's kernel", msg)
        assert_tensor_equal(self, dtorch.local_map(act, [Shard(0)])(x), act(a))  # the runtime goes on

    def test_shutdown_with_user_kernels_queued(self):
        # A graph dropped, and the interpreter leaving, with user kernels queued whose function holds a
        # dtorch tensor: the function is dropped on the main thread, never on the worker being joined.
        script = """if True:
            import threading, torch, dtorch
            mesh = dtorch.DeviceMesh("cpu", [0, 1])
            go = threading.Event()
            g = dtorch.Graph()
            x = dtorch.from_torch(torch.ones(4), mesh, [dtorch.Shard(0)], graph=g)
            kept = dtorch.from_torch(torch.ones(4), mesh, [dtorch.Shard(0)], graph=g)
            def held(t, _kept=kept):  # the function holds a dtorch tensor of the graph
                go.wait(0.05)
                return t + _kept.numel()
            ys = [dtorch.local_map(held, [dtorch.Shard(0)])(x) for _ in range(4)]
            del ys, x, kept, held
            g.shutdown()
            del g
            x = dtorch.from_torch(torch.ones(4), mesh, [dtorch.Shard(0)])
            ys = [dtorch.local_map(lambda t: t * 2, [dtorch.Shard(0)])(x) for _ in range(4)]
            print(ys[0].tolist())
            ys.append(dtorch.local_map(lambda t: (go.wait(0.05), t)[1], [dtorch.Shard(0)])(x))
            print("exiting")  # with the last kernel queued
        """
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["[2.0,", "2.0,", "2.0,", "2.0]", "exiting"])

    def test_a_wrong_result_fails_the_read(self):
        a = torch.randn(4, 2)
        x = dtorch.from_torch(a, CPU2, [Shard(0)])
        cases = [(lambda t: t[:1], "shape \\[1, 2\\].*block of the output is \\[2, 2\\]"),
                 (lambda t: t.double(), "dtype float64.*of dtype float32"),
                 (lambda t: "not a tensor", "returned str, not a torch.Tensor")]
        for fn, want in cases:
            with self.subTest(want=want):
                y = dtorch.local_map(fn, [Shard(0)], out_meta=torch.empty(4, 2, device="meta"))(x)
                with self.assertRaisesRegex(dtorch.KernelError, want):
                    y.to_torch()
        assert_tensor_equal(self, x + 1, a + 1)

    def test_failures_on_every_layout(self):
        # A kernel that raises, and one whose block has the wrong shape on some device, fail at the
        # read on one device, 1-D, uneven (5 rows: 2, 2, 1) and 2-D meshes; the runtime goes on.
        a = torch.randn(5, 2)

        def raises(t):
            raise ValueError("user kernel failed")

        def two_rows(t):  # the right block only where a device holds two rows
            return t.new_zeros(2, 2)

        for mesh, pl in ((CPU1, [Replicate()]), (CPU2, [Shard(0)]), (CPU3, [Shard(0)]),
                         (CPU2x2, [Shard(0), Replicate()])):
            with self.subTest(mesh=mesh, placements=pl):
                x = dtorch.from_torch(a, mesh, pl)
                meta = torch.empty(5, 2, device="meta")
                y = dtorch.local_map(raises, pl, out_meta=meta)(x)
                with self.assertRaisesRegex(dtorch.KernelError, "(?s)Traceback.*ValueError: user kernel failed"):
                    (y + 1).to_torch()
                z = dtorch.local_map(two_rows, pl, out_meta=meta)(x)
                with self.assertRaisesRegex(dtorch.KernelError, "shape \\[2, 2\\] and dtype float32; this "
                                            "device.s block of the output is \\[(5|3|1), 2\\]"):
                    z.to_torch()
                w = dtorch.local_map(act, pl)(x)  # the runtime goes on, on the same mesh
                assert_tensor_allclose(self, w, act(a), rtol=1e-6, atol=1e-6)
                assert_replicas_equal(self, w)


class Counted:
    """A two-output function written for one device, counting its runs on real (not meta) tensors."""

    def __init__(self, fn):
        self.fn, self.calls, self.lock = fn, 0, threading.Lock()

    def __call__(self, t):
        if t.device.type != "meta":
            with self.lock:
                self.calls += 1
        return self.fn(t)


class TestSeveralOutputs(unittest.TestCase):
    """A k-output function runs once per device (issue 31): its k nodes share the run."""

    def test_runs_once_per_device(self):
        a = torch.randn(7, 4)
        for mesh, pl in ((CPU1, [Shard(0)]), (CPU2, [Shard(0)]), (CPU3, [Shard(0)]),
                         (CPU2x2, [Shard(0), Replicate()])):
            with self.subTest(mesh=mesh):
                f = Counted(lambda t: (t.clamp(min=0) * 3, t.sum(-1)))
                hi, total = dtorch.local_map(f, (pl, pl))(dtorch.from_torch(a, mesh, pl))
                assert_tensor_equal(self, total, a.sum(-1))  # the second output read first
                assert_tensor_equal(self, hi, a.clamp(min=0) * 3)
                for t in (hi, total):
                    assert_replicas_equal(self, t)
                self.assertEqual(f.calls, mesh.size())

    def test_an_output_dropped_unread(self):
        a = torch.randn(6, 4)
        f = Counted(lambda t: (t * 2, t - 1))
        for _ in range(2):  # the same wrapped function again: a fresh run, no stale result
            _, low = dtorch.local_map(f, ([Shard(0)], [Shard(0)]))(dtorch.from_torch(a, CPU2, [Shard(0)]))
            assert_tensor_equal(self, low, a - 1)
            a = a + 1
        self.assertEqual(f.calls, 4)

    def test_several_calls_in_flight(self):
        a = torch.randn(6, 4)
        x = dtorch.from_torch(a, CPU2, [Shard(0)])
        f = Counted(lambda t: (t + 1, t * t))
        g = dtorch.local_map(f, ([Shard(0)], [Shard(0)]))
        outs = [g(x * k) for k in range(5)]
        for k, (p, q) in enumerate(outs):
            assert_tensor_equal(self, q, (a * k) * (a * k))
            assert_tensor_equal(self, p, a * k + 1)
        self.assertEqual(f.calls, 10)

    def test_a_wrong_output_fails_its_reads_naming_it(self):
        a = torch.randn(4, 2)
        x = dtorch.from_torch(a, CPU2, [Shard(0)])
        meta = (torch.empty(4, 2, device="meta"), torch.empty(4, 2, device="meta"))
        good, bad = dtorch.local_map(lambda t: (t * 2, t[:1]), ([Shard(0)], [Shard(0)]), out_meta=meta)(x)
        with self.assertRaisesRegex(dtorch.KernelError, "output 1 of the function has shape \\[1, 2\\].*block of it "
                                    "is \\[2, 2\\]"):
            bad.to_torch()
        assert_tensor_equal(self, good, a * 2)
        good, bad = dtorch.local_map(lambda t: (t.double(), t), ([Shard(0)], [Shard(0)]), out_meta=meta)(x)
        with self.assertRaisesRegex(dtorch.KernelError, "output 0 .*dtype torch.float64"):
            good.to_torch()
        assert_tensor_equal(self, bad, a)
        assert_tensor_equal(self, x + 1, a + 1)  # the runtime goes on

    def test_an_exception_fails_every_output(self):
        a = torch.randn(4, 2)
        x = dtorch.from_torch(a, CPU2, [Shard(0)])

        def broken(t):
            if t.device.type != "meta":
                raise ValueError("two-output kernel broke")
            return t, t

        p, q = dtorch.local_map(broken, ([Shard(0)], [Shard(0)]))(x)
        for t in (p, q):
            with self.assertRaisesRegex(dtorch.KernelError, "(?s)Traceback.*two-output kernel broke"):
                t.to_torch()
        assert_tensor_equal(self, x * 3, a * 3)


@dtorch.library.custom_op("testlib::softcap")
def softcap(x: torch.Tensor, cap: float) -> torch.Tensor:
    return torch.tanh(x / cap) * cap


@softcap.register_sharding
def _softcap_rule(x, cap):
    # elementwise: every Shard, Replicate; not Partial (tanh is not linear)
    return [([Replicate()], [Replicate(), None])] + [([Shard(d)], [Shard(d), None]) for d in range(x.ndim)]


@dtorch.library.custom_op("testlib::row_norm")
def row_norm(x: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(x, dim=-1)


@dtorch.library.custom_op("testlib::colsum")
def colsum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(0)


@colsum.register_sharding
def _colsum_rule(x):
    # row shards' column sums are addends of the whole's: Partial
    return [([Replicate()], [Replicate()]), ([Partial()], [Shard(0)])]


class TestCustomOp(unittest.TestCase):
    def test_rule_decides_the_output_placements(self):
        a = torch.randn(5, 6) * 4
        for mesh, pl in ((CPU1, [Replicate()]), (CPU2, [Shard(0)]), (CPU3, [Shard(1)]), (CPU3, [Shard(0)]),
                         (CPU2x2, [Shard(1), Shard(0)]), (CPU2x2, [Replicate(), Shard(1)])):  # CPU3 Shard(0): 2, 2, 1
            with self.subTest(mesh=mesh, placements=pl):
                y = softcap(dtorch.from_torch(a, mesh, pl), 3.0)
                self.assertEqual(y.placements, pl)
                assert_tensor_equal(self, y, softcap(a, 3.0))  # torch tensors: the function itself
                assert_replicas_equal(self, y)

    def test_unaccepted_placements_raise_at_the_call(self):
        a = torch.randn(4, 6)
        x = genuine_partial(a, CPU2, [Partial()])
        with self.assertRaisesRegex(dtorch.PlacementError, "testlib::softcap.*mesh dim 0.*\\(P\\).*\\(S0, -\\)->\\(S0\\)"):
            softcap(x, 2.0)
        # Without a rule only Replicate is accepted, and the result is Replicate.
        with self.assertRaisesRegex(dtorch.PlacementError, "testlib::row_norm"):
            row_norm(dtorch.from_torch(a, CPU2, [Shard(0)]))
        y = row_norm(dtorch.from_torch(a, CPU2, [Replicate()]))
        self.assertEqual(y.placements, [Replicate()])
        assert_tensor_equal(self, y, torch.linalg.vector_norm(a, dim=-1))
        assert_replicas_equal(self, y)

    def test_named_in_errors_and_traces(self):
        a = torch.randn(4, 6)
        x = dtorch.from_torch(a, CPU2, [Shard(0)])
        path = os.path.join(tempfile.mkdtemp(), "trace.json")
        with dtorch.profiler.trace(path):
            line = here() + 1
            y = softcap(x, 2.0)
            got = y.to_torch()
        assert_tensor_equal(self, got, softcap(a, 2.0))
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        kernels = [e for e in events if e.get("cat") == "kernel" and e["args"]["site"] == f"{__file__}:{line}"]
        self.assertEqual(sorted(e["args"]["device"] for e in kernels), [f"{DEV}:0", f"{DEV}:1"])
        self.assertTrue(all(e["args"]["op"] == "testlib::softcap" for e in kernels), kernels)
        ops = [e for e in events if e.get("cat") == "op" and e["args"].get("site") == f"{__file__}:{line}"]
        self.assertTrue(ops and all(e["name"] == "testlib::softcap" for e in ops), ops)

        @dtorch.library.custom_op("testlib::broken")
        def broken(t):
            return t.view(-1, 7)  # 24 elements: no view to 7 columns

        with self.assertRaisesRegex(RuntimeError, "out_meta"):
            broken(dtorch.from_torch(a, CPU2, [Replicate()]))
        broken.register_fake(lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta"))
        z = broken(dtorch.from_torch(a, CPU2, [Replicate()]))
        with self.assertRaisesRegex(dtorch.KernelError, "(?s)testlib::broken failed on .*view"):
            z.to_torch()

    def test_explain_sees_the_redistribute_into_it(self):
        a = torch.randn(4, 6)
        x = dtorch.from_torch(a, CPU2, [Shard(0)])
        with dtorch.explain() as ex:
            line = here() + 1
            y = row_norm(x.redistribute(placements=[Replicate()]))
            y.to_torch()
        self.assertIn("all-gather", str(ex).lower().replace("_", "-"))
        self.assertEqual([(r.file, r.line, r.collective) for r in ex.records], [(__file__, line, "all_gather")])
        assert_tensor_equal(self, y, torch.linalg.vector_norm(a, dim=-1))
        # The op itself never communicates (its rule takes its inputs as they are laid out): a call on
        # accepted placements records nothing, and its Partial output is reduced where it is read.
        with dtorch.explain() as ex:
            z = colsum(x)
            line = here() + 1
            total = z.redistribute(placements=[Replicate()])
            total.to_torch()
        self.assertEqual(z.placements, [Partial()])
        self.assertEqual([(r.line, r.op, r.collective) for r in ex.records], [(line, "redistribute", "all_reduce")])
        assert_tensor_allclose(self, total, a.sum(0), rtol=1e-6, atol=1e-6)

    def test_replay_on_and_off_equal(self):
        # A custom op's node is never replayed (its kernel is the user's function): a loop whose other
        # ops replay gives the same blocks with replay on and off, and each step's own values.
        from dtorch.test.probes import bcast, graph_stats, replay
        base = torch.randn(5, 6) * 4
        for mesh, pl in ((CPU1, [Replicate()]), (CPU2, [Shard(0)]), (CPU3, [Shard(0)]), (CPU2x2, [Shard(0), Shard(1)])):
            with self.subTest(mesh=mesh):
                blocks = {}
                for on in (False, True):
                    with replay(False):
                        dtorch.synchronize()  # no templates from before
                    with replay(on), bcast(False):
                        h0 = graph_stats()["replay_hits"]
                        steps = []
                        for k in range(4):
                            y = softcap(dtorch.from_torch(base + k, mesh, pl) * 2.0, 3.0) + 1.0
                            steps.append(local_values(y))
                            want = softcap((base + k) * 2.0, 3.0) + 1.0
                            if mesh.size() == 1:
                                assert_tensor_equal(self, y, want)
                            else:
                                assert_tensor_allclose(self, y, want, rtol=1e-6, atol=1e-6)
                            assert_replicas_equal(self, y)
                        hits = graph_stats()["replay_hits"] - h0
                    self.assertEqual(hits > 0, on, hits)  # the mul and add around it replayed
                    blocks[on] = steps
                for off, on_ in zip(blocks[False], blocks[True]):
                    for u, v in zip(off, on_):
                        self.assertTrue(torch.equal(u, v))


if __name__ == "__main__":
    unittest.main()
