"""Device-independent records (``dt_graph_set_bcast``, ``DTORCH_BCAST=1``; src/core/controller/lower_bcast.c):
an elementwise node whose kernel is the same on every device of its mesh but for the device's own
blobs is lowered once, into one record every device's worker instantiates.

Every result is computed twice, with the records off (one record per device) and on, and checked
bitwise equal device by device (``local_values``: every shard, replica and Partial addend), and
against eager torch; ``graph_stats()["bcast_nodes"]`` says which nodes took the new path. Meshes: 1-D
of 2 and 3 devices (uneven shards), 2-D; genuine multi-piece Partial inputs; float32 and bfloat16.
"""

import inspect
import os
import unittest

import torch

import dtorch
from dtorch import DeviceMesh, Partial, Replicate, Shard
from dtorch.test.probes import bcast, graph_stats, replay
from dtorch.test.test_util import local_values

from helpers import CPU2, CPU3, CPU2x2, DEV, assert_equal_everywhere, genuine_partial, int_valued, placements_1d
from helpers import placements_2d

R, P = Replicate(), Partial()


def nodes():
    return graph_stats()["bcast_nodes"]


def bits(t):
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(ints) if t.dtype.is_floating_point else t


def run(on, fn, *args):
    """fn(*args) with the records on or off, its per-device values and how many nodes took them.
    Replay is off here (also under DTORCH_REPLAY=1): it would replay the records-off run's per-device
    template for the records-on run, and the count compares the two lowerings."""
    with replay(False), bcast(on):
        n0 = nodes()
        y = fn(*args)
        values = local_values(y)
        return y, values, nodes() - n0


# (name, fn, the eager reference, Partial inputs accepted)
OPS = [
    ("add", lambda a, b: a + b, lambda a, b: a + b, True),
    ("mul_sub", lambda a, b: a * b - b, lambda a, b: a * b - b, False),
    ("scale", lambda a, b: a * 2.0 + b, lambda a, b: a * 2.0 + b, True),
    ("scalar", lambda a, b: (a * 2.0 - 0.5) + b, lambda a, b: (a * 2.0 - 0.5) + b, False),
    ("rsub", lambda a, b: 3.0 - a, lambda a, b: 3.0 - a, False),
    ("unary", lambda a, b: a.abs().neg(), lambda a, b: a.abs().neg(), False),
    ("where", lambda a, b: dtorch.where(a > b, a, b), lambda a, b: torch.where(a > b, a, b), False),
    ("clamp", lambda a, b: a.clamp(-2.0, 3.0) * b, lambda a, b: a.clamp(-2.0, 3.0) * b, False),
    ("cast", lambda a, b: (a + b).to(torch.float64), lambda a, b: (a + b).to(torch.float64), False),
]


class TestSameAsPerDevice(unittest.TestCase):
    def sweep(self, mesh, layouts, shape, dtype):
        took = 0
        for pl in layouts:
            for name, fn, ref, partial_ok in OPS:
                if not partial_ok and any(p.is_partial() for p in pl):
                    continue
                ta = int_valued(*shape, dtype=dtype, seed=1)
                tb = int_valued(*shape, dtype=dtype, seed=2)
                a = genuine_partial(ta, mesh, pl, seed=3)
                b = genuine_partial(tb, mesh, pl, seed=4)
                with self.subTest(mesh=mesh, placements=pl, op=name, dtype=dtype):
                    off, off_v, n_off = run(False, fn, a, b)
                    on, on_v, n_on = run(True, fn, a, b)
                    self.assertEqual(n_off, 0)
                    self.assertGreater(n_on, 0)  # the inputs share one layout: every node may
                    took += n_on
                    self.assertEqual(len(on_v), len(off_v))
                    for d, (x, y) in enumerate(zip(on_v, off_v)):
                        self.assertTrue(torch.equal(bits(x), bits(y)), f"device {d}")
                    self.assertEqual(on.placements, off.placements)
                    assert_equal_everywhere(self, on, ref(ta, tb))
        return took

    def test_1d_even_and_uneven(self):
        for mesh, shape in ((CPU2, (4, 6)), (CPU3, (5, 7))):
            for dtype in (torch.float32, torch.bfloat16):
                self.assertGreater(self.sweep(mesh, [[p] for p in placements_1d(2)], shape, dtype), 0)

    def test_2d(self):
        self.assertGreater(self.sweep(CPU2x2, placements_2d(2), (4, 6), torch.float32), 0)

    def test_one_device_mesh_is_per_device(self):
        mesh = DeviceMesh(DEV, [0])
        t = int_valued(3, 4)
        x = dtorch.from_torch(t, mesh, [R])
        y, values, n = run(True, lambda a: a + a * 2.0, x)
        self.assertEqual(n, 0)
        self.assertTrue(torch.equal(y.to_torch(), t + t * 2.0))

    def test_inputs_laid_out_differently_go_per_device(self):
        # x sharded with a Replicate row vector, or with a Replicate value of its own shape: the
        # Replicate input's block is sliced per device (or, for the vector beside Shard(0), read
        # whole by the per-device path too), so no shared record.
        tx, tv, ty = int_valued(4, 6), int_valued(6, seed=1), int_valued(4, 6, seed=2)
        for mesh, dim in ((CPU2, 0), (CPU2, 1), (CPU3, 1)):
            x = dtorch.from_torch(tx, mesh, [Shard(dim)])
            for other, want in ((tv, tx * tv), (ty, tx * ty)):
                v = dtorch.from_torch(other, mesh, [R])
                with self.subTest(mesh=mesh, dim=dim, shape=tuple(other.shape)):
                    off, off_v, n_off = run(False, lambda a, b: a * b, x, v)
                    on, on_v, n_on = run(True, lambda a, b: a * b, x, v)
                    self.assertEqual((n_off, n_on), (0, 0))
                    for x1, x2 in zip(on_v, off_v):
                        self.assertTrue(torch.equal(x1, x2))
                    assert_equal_everywhere(self, on, want)

    def test_in_place_reuse_as_per_device(self):
        # The window's reuse mark reaches the shared record: a chain of ops on a dropped
        # intermediate writes into its buffer on every device, as per-device records do.
        t = int_valued(64, 64)
        counts = []
        for on in (False, True):
            x = dtorch.from_torch(t, CPU2, [Shard(0)])
            dtorch.synchronize()
            with bcast(on):
                before = graph_stats()["kernels_in_place"]
                y = ((x + 1.0) * 2.0 - 3.0) * 0.5
                got = y.to_torch()
                counts.append(graph_stats()["kernels_in_place"] - before)
            self.assertTrue(torch.equal(got, ((t + 1.0) * 2.0 - 3.0) * 0.5))
        self.assertEqual(counts[0], counts[1])
        self.assertGreater(counts[1], 0)

    def test_replicate_broadcast_takes_the_record(self):
        # Both whole on every device (Replicate and Partial): a broadcast input's block is itself.
        tx, tv = int_valued(4, 6), int_valued(6, seed=1)
        for pl in (P, R):
            x = genuine_partial(tx, CPU2, [pl], seed=5)
            v = dtorch.from_torch(tv, CPU2, [R])
            with self.subTest(placement=pl):
                off, off_v, n_off = run(False, lambda a, b: a * b, x, v)
                on, on_v, n_on = run(True, lambda a, b: a * b, x, v)
                self.assertEqual((n_off, n_on), (0, 1))
                for x1, x2 in zip(on_v, off_v):
                    self.assertTrue(torch.equal(x1, x2))
                assert_equal_everywhere(self, on, tx * tv)


class TestLinalg(unittest.TestCase):
    """matmul/linear: one shared record where every device's operands are its own blocks
    (column- and row-parallel linears, a Replicate matmul, a batch sharded on dp); per device
    where a device needs a slice of an operand or a bias on some devices only."""

    CASES = [
        # (name, mesh, x shape, x placements, w shape, w placements, bias placements or None, shared)
        ("column", CPU2, (3, 4, 8), [R], (6, 8), [Shard(0)], None, True),
        ("column_uneven", CPU3, (3, 4, 8), [R], (5, 8), [Shard(0)], None, True),
        ("row", CPU2, (3, 4, 8), [Shard(2)], (6, 8), [Shard(1)], None, True),
        ("replicate", CPU3, (3, 4, 8), [R], (6, 8), [R], None, True),
        ("dp_tp", CPU2x2, (4, 2, 8), [Shard(0), R], (6, 8), [R, Shard(0)], None, True),
        ("slice_of_w", CPU2, (3, 4, 8), [Shard(2)], (6, 8), [R], None, False),
        ("row_bias", CPU2, (3, 4, 8), [Shard(2)], (6, 8), [Shard(1)], [R], False),
    ]

    def test_linear_same_as_per_device(self):
        for name, mesh, xs, xp, ws, wp, bp, shared in self.CASES:
            tx, tw = int_valued(*xs, seed=1), int_valued(*ws, seed=2)
            tb = int_valued(ws[0], seed=3)
            x, w = dtorch.from_torch(tx, mesh, xp), dtorch.from_torch(tw, mesh, wp)
            b = dtorch.from_torch(tb, mesh, bp) if bp else None

            def fn(x, w, b=b):
                return dtorch.nn.functional.linear(x, w, b)

            with self.subTest(case=name):
                off, off_v, n_off = run(False, fn, x, w)
                on, on_v, n_on = run(True, fn, x, w)
                self.assertEqual(n_off, 0)
                self.assertEqual(n_on > 0, shared, n_on)
                for d, (a, c) in enumerate(zip(on_v, off_v)):
                    self.assertTrue(torch.equal(bits(a), bits(c)), f"device {d}")
                assert_equal_everywhere(self, on, torch.nn.functional.linear(tx, tw, tb if bp else None))

    def test_matmul_bfloat16(self):
        tx, tw = int_valued(4, 8, dtype=torch.bfloat16), int_valued(8, 6, dtype=torch.bfloat16, seed=1)
        x, w = dtorch.from_torch(tx, CPU2, [R]), dtorch.from_torch(tw, CPU2, [Shard(1)])
        off, off_v, _ = run(False, lambda a, b: a @ b, x, w)
        on, on_v, n_on = run(True, lambda a, b: a @ b, x, w)
        self.assertEqual(n_on, 1)
        for a, c in zip(on_v, off_v):
            self.assertTrue(torch.equal(bits(a), bits(c)))
        assert_equal_everywhere(self, on, tx @ tw)


class TestErrorsAndReplay(unittest.TestCase):
    def test_traced_nodes_keep_their_device_kernels(self):
        # A trace records each device's kernel of a node: while it records, nodes go per device.
        import tempfile

        t = int_valued(4, 6)
        x = dtorch.from_torch(t, CPU2, [Shard(0)])
        path = os.path.join(tempfile.mkdtemp(), "trace.json")
        with bcast(True):
            n0 = nodes()
            with dtorch.profiler.trace(path) as tr:
                line = inspect.currentframe().f_lineno + 1
                got = (x * 2).to_torch()
            self.assertEqual(nodes() - n0, 0)
        self.assertTrue(torch.equal(got, t * 2))
        sites = [e for e in tr.events if e.get("ph") == "X" and e.get("cat") == "kernel"
                 and e["args"].get("site", "").endswith(f":{line}")]
        self.assertEqual(len(sites), 2)  # one kernel per device

    def test_kernel_error_names_op_device_and_line(self):
        x = dtorch.from_torch(torch.tensor([4, 6, 8, 10]), CPU2, [Shard(0)])
        z = dtorch.from_torch(torch.tensor([2, 3, 0, 5]), CPU2, [Shard(0)])  # device 1 divides by 0
        with bcast(True):
            n0 = nodes()
            line = inspect.currentframe().f_lineno + 1
            y = x // z
            w = y + 1
            with self.assertRaises(dtorch.KernelError) as cm:
                w.to_torch()
            self.assertEqual(nodes() - n0, 2)
        msg = str(cm.exception)
        self.assertIn("floor_divide failed on cpu:1", msg)
        self.assertIn(f"{os.path.basename(__file__)}:{line}", msg)
        with self.assertRaises(RuntimeError) as eager:
            torch.tensor([8]) // torch.tensor([0])
        self.assertIn(str(eager.exception).splitlines()[0], msg)
        # The runtime keeps working, on the same path.
        with bcast(True):
            assert_equal_everywhere(self, x + z, torch.tensor([6, 9, 8, 15]))

    def test_failed_lowering_poisons_every_device(self):
        # An allocation that fails while the shared record is made (dt_debug_fail_allocs): the
        # value raises at the read with the op, "controller" and the line; nothing half-queued
        # is left behind, and the next op on the same inputs is right.
        from dtorch.test.probes import fail_allocs

        tx, tz = int_valued(5, 4), int_valued(5, 4, seed=1)
        x, z = dtorch.from_torch(tx, CPU3, [Shard(0)]), dtorch.from_torch(tz, CPU3, [Shard(0)])
        x.to_torch(), z.to_torch()
        failed = 0
        with bcast(True):
            for after in range(4):
                try:
                    fail_allocs(after)
                    line = inspect.currentframe().f_lineno + 1
                    y = x + z
                    try:
                        got = y.to_torch()
                    except dtorch.KernelError as e:
                        failed += 1
                        self.assertIn("failed on the controller", str(e))
                        self.assertIn(f"{os.path.basename(__file__)}:{line}", str(e))
                    else:
                        self.assertTrue(torch.equal(got, tx + tz))
                finally:
                    fail_allocs(-1)
                assert_equal_everywhere(self, x + z, tx + tz)
        self.assertGreater(failed, 0)

    def test_with_replay_every_step_is_right(self):
        # Replay on: a template whose lowering made shared records is kept unusable, so every
        # later sighting is lowered as one record again (not replayed per device); a change of
        # scalar, dtype, placement, shape or mesh in the middle of the loop is lowered anew, right.
        t = int_valued(4, 6)
        meshes = {"R": (CPU2, [R]), "S": (CPU2, [Shard(1)]), "M": (CPU3, [Shard(0)])}
        plan = ["S", "S", "S", ("S", 0.25), "S", ("S", torch.bfloat16), "R", "S", ("S", (2, 8)), "M", "S"]
        with replay(True), bcast(True):
            for i, step in enumerate(plan):
                key, extra = (step, None) if isinstance(step, str) else step
                mesh, pl = meshes[key]
                dtype = extra if isinstance(extra, torch.dtype) else torch.float32
                s = extra if isinstance(extra, float) else 1.5
                tt = int_valued(*extra) if isinstance(extra, tuple) else t
                x = dtorch.from_torch(tt.to(dtype), mesh, pl)
                n0 = nodes()
                y = (x * s + 1.0) - x
                got = y.to_torch()
                self.assertEqual(nodes() - n0, 3, f"step {i}")
                tt = tt.to(dtype)
                self.assertTrue(torch.equal(got, (tt * s + 1.0) - tt), f"step {i}")


if __name__ == "__main__":
    unittest.main()
