"""Runs of shared records (``dt_graph_set_step``, ``DTORCH_STEP=0`` off; src/core/records/step.h):
consecutive nodes of one mesh that are each one device-independent record are one record with one
slot per device, linked when the run ends.

Each program is run three ways: one record per device (shared records off), one shared record per
node (runs off), and in runs; every device's value (every shard, replica and Partial addend) is
checked bitwise equal across the three and against eager torch, and the memory charged to each
device checked equal with runs on and off. Meshes: 1-D of 2 and 3 devices (uneven shards), 2-D;
genuine multi-piece Partial inputs; float32 and bfloat16. Plus runs cut by a read, by another
mesh's node, by a changed shape, dtype, placement or scalar; a kernel error inside a run naming the
failing kernel's op, device and line; cancellation in the middle of a run.
"""

import inspect
import os
import unittest

import torch

import dtorch
from dtorch import Partial, Replicate, Shard
from dtorch.test.probes import Gate, bcast, bgroup, graph_stats, replay, step
from dtorch.test.test_util import local_values

from helpers import CPU2, CPU3, CPU2x2, assert_equal_everywhere, bits, int_valued
from helpers import assert_in_place_alike, cancel_behind_gate, chain_case, settle, wait_stat
from helpers import placements_1d, placements_2d

MODES = (("per device", False, False), ("per node", True, False), ("runs", True, True))


def run(mode, fn, mesh, *args):
    """fn(*args) in one mode: its per-device values (of each result), bytes charged per device while
    its results live, in-place kernels, and runs closed."""
    _, on, runs = mode
    with replay(False), bcast(on), bgroup(True), step(runs):
        settle()
        mem0 = dtorch.memory_stats(mesh)
        s0 = graph_stats()
        ys = fn(*args)
        ys = ys if isinstance(ys, (list, tuple)) else [ys]
        values = [v for y in ys for v in local_values(y)]
        settle()
        mem = dtorch.memory_stats(mesh)
        s1 = graph_stats()
    charged = {d: mem[d]["current"] - mem0[d]["current"] for d in mem}
    return ys, values, charged, s1["kernels_in_place"] - s0["kernels_in_place"], s1["step_runs"] - s0["step_runs"]


def factory_loop(mesh, pls, dtype, iters=4):
    """Per iteration a new host tensor copied to the mesh, a fill and a range (each value's scalar or
    data differs from the last iteration's), combined; returns the results and their torch values."""
    outs, refs = [], []
    for i in range(iters):
        t = int_valued(3, 5, dtype=dtype, seed=10 + i)
        x = dtorch.from_torch(t, mesh, pls)
        f = dtorch.full((3, 5), i + 0.5, dtype=dtype, device_mesh=mesh, placements=pls)
        r = dtorch.arange(i, i + 5, dtype=dtype, device_mesh=mesh, placements=[Replicate()] * mesh.ndim)
        outs.append(x * f + r)
        refs.append(t * torch.full((3, 5), i + 0.5, dtype=dtype) + torch.arange(i, i + 5, dtype=dtype))
    return outs, refs


class TestFactoriesInRuns(unittest.TestCase):
    def test_host_copies_fills_and_ranges(self):
        # A factory whose kernel is the same on every device (every placement Replicate) joins the
        # run, a host tensor's copy reading one source blob on every device; anything sharded
        # stays per device. The same bits in every mode, torch's values on every replica, and
        # shared exactly where the layout says: per iteration the copy, fill and range, multiply
        # and add on Replicate meshes; sharded, the range (always Replicate), the multiply and the
        # add, but for the add on [R, S(1)] (the range sliced per device along the shards).
        cases = [(CPU2, [Replicate()], 5), (CPU3, [Replicate()], 5), (CPU2x2, [Replicate()] * 2, 5),
                 (CPU3, [Shard(0)], 3), (CPU2x2, [Replicate(), Shard(1)], 2)]
        for mesh, pls, shared in cases:
            for dt in (torch.float32, torch.bfloat16):
                with self.subTest(mesh=mesh, placements=pls, dtype=dt):
                    res = [run(m, lambda: factory_loop(mesh, pls, dt)[0], mesh) for m in MODES]
                    base = res[0][1]
                    for (name, _, _), (_, values, _, _, _) in zip(MODES, res):
                        self.assertEqual(len(values), len(base))
                        for d, (a, b) in enumerate(zip(values, base)):
                            self.assertTrue(torch.equal(bits(a), bits(b)), f"{name}, piece {d}")
                    with replay(False), bcast(True), bgroup(True), step(True):
                        settle()
                        n0 = graph_stats()["bcast_nodes"]
                        outs, refs = factory_loop(mesh, pls, dt)
                        for y, want in zip(outs, refs):
                            assert_equal_everywhere(self, y, want)
                        settle()
                        n = graph_stats()["bcast_nodes"] - n0
                    self.assertEqual(n, 4 * shared, (mesh, pls))

    def test_partial_copies_and_fills_stay_per_device(self):
        # Partial: the value on the first coordinate, zeros on the others (a kernel that differs by
        # device): per device in every mode, never shared, the same bits every way.
        t = int_valued(3, 5, seed=5)
        # (mesh, placements, the devices at coordinate 0 of the Partial dim, in local_values' order)
        for mesh, pls, firsts in ((CPU3, [Partial()], [0]), (CPU2x2, [Replicate(), Partial()], [0, 2])):
            with self.subTest(mesh=mesh, placements=pls):
                def fn():
                    return [dtorch.from_torch(t, mesh, pls),
                            dtorch.full((3, 5), 2.5, device_mesh=mesh, placements=pls)]
                res = [run(m, fn, mesh) for m in MODES]
                for (name, _, _), (_, values, _, _, _) in zip(MODES, res):
                    for d, (a, b) in enumerate(zip(values, res[0][1])):
                        self.assertTrue(torch.equal(bits(a), bits(b)), f"{name}, piece {d}")
                x, f = res[2][0]
                for want, y in ((t, x), (torch.full((3, 5), 2.5), f)):
                    pieces = local_values(y)
                    self.assertEqual(len(pieces), mesh.size())
                    for i, piece in enumerate(pieces):
                        self.assertTrue(torch.equal(piece, want if i in firsts else torch.zeros_like(want)), i)
                    assert_equal_everywhere(self, y, want)
                with replay(False), bcast(True), bgroup(True), step(True):
                    settle()
                    n0 = graph_stats()["bcast_nodes"]
                    fn()
                    settle()
                    self.assertEqual(graph_stats()["bcast_nodes"] - n0, 0)

    def test_host_copy_freed_once(self):
        # The copy's one source blob is every device's input: freed once, when the run's last slot
        # lets go of it (the memory charged per device back to where it was; ASan: no double free).
        with replay(False), bcast(True), bgroup(True), step(True):
            settle()
            before = dtorch.memory_stats(CPU3)
            outs, refs = factory_loop(CPU3, [Replicate()], torch.float32, iters=8)
            for y, want in zip(outs, refs):
                assert_equal_everywhere(self, y, want)
            del outs, y
            settle()
            after = dtorch.memory_stats(CPU3)
        self.assertEqual({d: after[d]["current"] for d in after}, {d: before[d]["current"] for d in before})


class TestRunsAsPerDevice(unittest.TestCase):
    def compare(self, fn, mesh, *args, runs_expected=True):
        """fn on mesh in the three modes: the same bits on every device, the same memory per device
        with runs on and off; returns the runs' results."""
        res = [run(m, fn, mesh, *args) for m in MODES]
        (_, base, _, _, r_dev), (_, _, mem_node, _, r_node), (ys, _, mem_run, _, r_run) = res
        self.assertEqual(r_dev, 0)
        self.assertEqual(r_node, 0)
        if runs_expected:
            self.assertGreater(r_run, 0)
        for name, (_, values, _, _, _) in zip([m[0] for m in MODES], res):
            self.assertEqual(len(values), len(base), name)
            for d, (x, w) in enumerate(zip(values, base)):
                self.assertTrue(torch.equal(bits(x), bits(w)), f"{name}, piece {d}")
        self.assertEqual(mem_run, mem_node)
        return ys

    def sweep(self, mesh, layouts, shape, dtype):
        for pl in layouts:
            fn, ref, ta, tb, a, b = chain_case(mesh, pl, shape, dtype)
            with self.subTest(mesh=mesh, placements=pl, dtype=dtype):
                (y,) = self.compare(fn, mesh, a, b)
                assert_equal_everywhere(self, y, ref(ta, tb))

    def test_meshes(self):
        # 1-D even and uneven (float32, bfloat16), 2-D; every layout, Partial ones genuine.
        cases = [(CPU2, (4, 6), placements_1d), (CPU3, (5, 7), placements_1d), (CPU2x2, (4, 6), placements_2d)]
        for mesh, shape, layouts in cases:
            pls = [list(p) if isinstance(p, (list, tuple)) else [p] for p in layouts(2)]
            for dt in (torch.float32, torch.bfloat16) if mesh is not CPU2x2 else (torch.float32,):
                self.sweep(mesh, pls, shape, dt)

    def test_dropped_intermediates_are_written_in_place(self):
        # The reuse mark on an image reading a run's own earlier output: as per node.
        assert_in_place_alike(self, lambda *a: run(*a)[1::2], MODES)


class TestRunsCut(unittest.TestCase):
    """A run ends where something else comes; the values are those of the per-device path."""

    def setUp(self):
        self.ta = int_valued(6, 4, seed=5)
        self.tb = int_valued(6, 4, seed=6)

    def inputs(self, mesh=CPU3, pl=(Shard(0),)):
        return dtorch.from_torch(self.ta, mesh, list(pl)), dtorch.from_torch(self.tb, mesh, list(pl))

    def test_cut_by_a_read(self):
        a, b = self.inputs()
        reads = []

        def fn(a, b):
            y = (a + b) * 2.0
            reads.append(y.to_torch())  # the run so far must be queued and run before this read
            return (y - a) * 0.5

        (z,) = TestRunsAsPerDevice.compare(self, fn, CPU3, a, b)
        want_y = (self.ta + self.tb) * 2.0
        for r in reads:
            self.assertTrue(torch.equal(r, want_y))
        assert_equal_everywhere(self, z, (want_y - self.ta) * 0.5)

    def test_cut_by_another_mesh(self):
        a, b = self.inputs()
        c, d = self.inputs(CPU2, (Shard(1),))

        def fn(a, b, c, d):
            y = a + b
            w = c * d  # another mesh's run in the middle (devices 0 and 1 are shared)
            y = y * 3.0
            w = w - c
            return y - a, w + 1.0

        y, w = TestRunsAsPerDevice.compare(self, fn, CPU3, a, b, c, d)
        assert_equal_everywhere(self, y, (self.ta + self.tb) * 3.0 - self.ta)
        assert_equal_everywhere(self, w, self.ta * self.tb - self.ta + 1.0)

    def test_cut_by_per_device_and_collective_nodes(self):
        a, b = self.inputs(CPU3, (Shard(1),))

        def fn(a, b):
            y = (a + b) * 2.0
            s = y.sum(dim=1)  # a sum over the sharded dim: a reduction across devices
            r = y.redistribute(CPU3, [Replicate()])  # a collective
            return s * 0.5, (r - 1.0) * y.redistribute(CPU3, [Replicate()])

        s, r = TestRunsAsPerDevice.compare(self, fn, CPU3, a, b)
        y = (self.ta + self.tb) * 2.0
        assert_equal_everywhere(self, s, y.sum(dim=1) * 0.5)
        assert_equal_everywhere(self, r, (y - 1.0) * y)

    def test_meshes_of_one_size_alternate(self):
        # Runs on two meshes of two devices each, on devices 0, 1 and 2, 3, one after the other:
        # each run's kernels on its own mesh's streams (the graph keeps the last run's streams
        # for its mesh only): every device's memory as per node, the values torch's.
        lo, hi = dtorch.DeviceMesh("cpu", [0, 1]), dtorch.DeviceMesh("cpu", [2, 3])
        a = dtorch.from_torch(self.ta, lo, [Shard(0)])
        b = dtorch.from_torch(self.tb, hi, [Shard(1)])

        def fn(a, b):
            x, y = a, b
            for k in range(4):
                x = x * 2.0 + float(k)
                y = y - float(k)
            return x, y

        x, y = TestRunsAsPerDevice.compare(self, fn, CPU2x2, a, b)
        wx, wy = self.ta, self.tb
        for k in range(4):
            wx, wy = wx * 2.0 + float(k), wy - float(k)
        assert_equal_everywhere(self, x, wx)
        assert_equal_everywhere(self, y, wy)

    def test_changed_shape_dtype_placement_and_scalar(self):
        a, b = self.inputs()
        c = dtorch.from_torch(self.ta.to(torch.bfloat16), CPU3, [Shard(0)])
        e = dtorch.from_torch(self.ta[:, :2].contiguous(), CPU3, [Shard(0)])
        r = dtorch.from_torch(self.tb, CPU3, [Replicate()])

        def fn(a, b, c, e, r):
            out = []
            for k, v in enumerate((a, c, e, r, a)):  # dtype, shape, placement, back again
                y = (v + 1.0) * (2.0 + k)  # a new scalar each time
                out.append(y - v)
            return out + [a + b]

        got = TestRunsAsPerDevice.compare(self, fn, CPU3, a, b, c, e, r)
        for k, (v, t) in enumerate(zip((a, c, e, r, a), (self.ta, self.ta.to(torch.bfloat16), self.ta[:, :2],
                                                         self.tb, self.ta))):
            assert_equal_everywhere(self, got[k], (t + 1.0) * (2.0 + k) - t)
        assert_equal_everywhere(self, got[5], self.ta + self.tb)

    def test_long_run_is_closed_when_full(self):
        a, b = self.inputs(CPU2x2, (Shard(0), Shard(1)))

        def fn(a, b):
            y = a
            for k in range(80):  # more kernels than a run holds
                y = y * 0.5 + b if k % 2 else y + 1.0
            return y

        (y,) = TestRunsAsPerDevice.compare(self, fn, CPU2x2, a, b)
        want = self.ta
        for k in range(80):
            want = want * 0.5 + self.tb if k % 2 else want + 1.0
        assert_equal_everywhere(self, y, want)


class TestAttributesReused(unittest.TestCase):
    """A run's image copies the attributes packed for the last kernel when its attributes have the
    same bytes (core/records/step.h, dt__step_memo): kernels of one op that differ in one field only,
    and ops that alternate, each get their own; the values are those of the per-device path."""

    def setUp(self):
        self.ta = int_valued(6, 4, seed=7)
        self.tb = int_valued(6, 4, seed=8)

    def check(self, fn, ref, mesh=CPU3, pl=(Replicate(),)):
        a, b = dtorch.from_torch(self.ta, mesh, list(pl)), dtorch.from_torch(self.tb, mesh, list(pl))
        got = TestRunsAsPerDevice.compare(self, fn, mesh, a, b)
        want = ref(self.ta, self.tb)
        self.assertEqual(len(got), len(want))
        for k, (y, w) in enumerate(zip(got, want)):
            with self.subTest(result=k):
                assert_equal_everywhere(self, y, w)

    def test_one_field_differs(self):
        # Consecutive kernels of one op whose attributes differ in one field only: the first
        # scalar (the dt__kattr's middle), the second (alpha, clamp's max: near its end), an
        # array (a slice's start and length); float32 and bfloat16.
        def fn(t, a, b):
            out = []
            for k in range(1, 5):
                out.append(t.add(b, alpha=k))
            for k in range(1, 5):
                out.append(a + float(k))
            for k in range(1, 5):
                out.append(t.clamp(1.0, float(2 + k)))
            for k in range(3):
                out.append(a.narrow(1, k, 4 - k) * 2.0)
            return out

        cases = [(CPU3, (Replicate(),), torch.float32), (CPU3, (Shard(0),), torch.float32),
                 (CPU2x2, (Replicate(), Shard(0)), torch.float32), (CPU2, (Replicate(),), torch.bfloat16)]
        for mesh, pl, dt in cases:
            with self.subTest(mesh=mesh, placements=pl, dtype=dt):
                self.ta, self.tb = self.ta.to(dt), self.tb.to(dt)
                self.check(lambda a, b: fn(a, a, b), lambda a, b: fn(a, a, b), mesh, pl)

    def test_alternating_ops(self):
        # add, mul, add, sub, add, ...: the attributes of each differ from the last kernel's but
        # equal those of the one before it.
        def fn(a, b):
            y, out = a, []
            for k in range(12):
                y = (y + b, y * b, y - b)[k % 3] if k % 2 else y + b
                out.append(y)
            return out

        self.check(fn, fn)

    def test_value_read_all_along(self):
        # b is read by every image (one hold for the run) and each intermediate by the next two
        # (a hold found again, not after the last few entries only): the same memory per device
        # and in-place kernels as one shared record per node.
        def fn(a, b):
            y, prev = a, a
            for _ in range(20):
                y, prev = y * b + prev, y
            return [y, prev]

        self.check(fn, fn)


class TestRunErrors(unittest.TestCase):
    def test_kernel_error_names_the_failing_kernel(self):
        # The third kernel of a run fails on device 2 only: the read names that kernel's op, device
        # and line (not the run's first kernel's), and what the run made before it is right.
        tx, tz = torch.tensor([4, 6, 8, 10, 12, 14]), torch.tensor([2, 3, 1, 2, 0, 7])
        x = dtorch.from_torch(tx, CPU3, [Shard(0)])
        z = dtorch.from_torch(tz, CPU3, [Shard(0)])
        with bcast(True), bgroup(True), step(True):
            runs0 = graph_stats()["step_runs"]
            first = inspect.currentframe().f_lineno + 1
            u = x * 2
            v = z + 0
            line = inspect.currentframe().f_lineno + 1
            q = u // v
            r = (q - u) * v
            with self.assertRaises(dtorch.KernelError) as cm:
                r.to_torch()
            self.assertGreater(graph_stats()["step_runs"], runs0)
            msg = str(cm.exception)
            self.assertIn("floor_divide failed on cpu:2", msg)
            self.assertIn(f"{os.path.basename(__file__)}:{line}", msg)
            self.assertNotIn(f"{os.path.basename(__file__)}:{first}", msg)
            assert_equal_everywhere(self, u - v, tx * 2 - tz)
            del q, r
            assert_equal_everywhere(self, (u + v) * 3, (tx * 2 + tz) * 3)

    def test_cancelled_in_the_middle_of_a_run(self):
        g = dtorch.Graph()
        gate = Gate()
        try:
            with bcast(True, graph=g), bgroup(True, graph=g), step(True, graph=g):
                x = gate.hold(dtorch.from_torch(torch.ones(4, 4), CPU2, [Shard(0)], graph=g))
                y = x
                for _ in range(8):
                    y = (y + 1.0) * 2.0
                f = y.to_torch_async()
                wait_stat(g, "bcast_nodes", 16)  # the controller has lowered the chain (behind the gate)
                self.assertGreater(graph_stats(g)["step_runs"], 0)
                # The run's 16 kernels on each device were dropped, not run.
                cancel_behind_gate(self, g, gate, f, 2 * 16)
        finally:
            gate.open()
            g.shutdown()


if __name__ == "__main__":
    unittest.main()
