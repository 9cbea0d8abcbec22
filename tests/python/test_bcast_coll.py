"""Collectives as one device-independent record (src/core/controller/lower_coll.c): an all-reduce,
all-gather or reduce-scatter over a mesh dim has every rank's kernel the same but for its rank, group
and sequence number, so it is lowered once, into one record with one slot per device, each worker
instantiating its own rank, and on a 2-D mesh its group's id and number (core/worker/kernel_run.c).

Every result is computed with the records off (``DTORCH_BCAST=0``: one collective kernel per rank)
and on, and checked bitwise equal device by device (``local_values``: every shard, replica and
Partial addend) and against eager torch on integer-valued inputs (every reduction order exact);
``graph_stats()["bcast_collectives"]`` says which collectives took the new path. Meshes: 1-D of 2
and 3 devices (uneven shards), 2-D of 2 x 2, 2 x 3 and 4 x 2 (each mesh dim's groups one record;
uneven shards of the collected dim shared, of the other dim per rank: its groups' kernels differ);
genuine multi-piece Partial inputs; float32 and bfloat16. Plus a collective inside a run of shared
records, a kernel error upstream of the all-reduce, cancellation while shared collectives are queued,
and the same comparisons in child processes with ``DTORCH_OVERLAP=0`` (collectives on the compute
streams), ``DTORCH_BGROUP=0`` (no blob groups: 1-D collectives shared with per-device blobs, 2-D per
rank) and ``DTORCH_STEP=0`` (no runs).
"""

import inspect
import os
import subprocess
import sys
import unittest

import torch

import dtorch
from dtorch import Partial, Replicate, Shard
from dtorch.test.probes import Gate, bcast, bgroup, graph_stats, held_controller, replay, step
from dtorch.test.test_util import genuine_partial, local_values

from helpers import CPU2, CPU3, CPU2x2, assert_equal_everywhere, bits, cancel_behind_gate, int_valued, settle, wait_stat

R, P = Replicate(), Partial()
CPU2x3 = dtorch.DeviceMesh("cpu", [[0, 1, 2], [3, 4, 5]], mesh_dim_names=("dp", "tp"))
CPU4x2 = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3], [4, 5], [6, 7]], mesh_dim_names=("dp", "tp"))
# The switches a child process runs this file under (TestSwitches): blob groups and runs.
GROUPS = os.environ.get("DTORCH_BGROUP") != "0"
RUNS = os.environ.get("DTORCH_STEP") != "0"


def colls(g=None):
    return graph_stats(g)["bcast_collectives"]


def run(on, fn, *args):
    """fn(*args) with the records on or off: its results, their per-device values, shared
    collectives and runs closed (groups and runs on, as by default)."""
    with replay(False), bcast(on), bgroup(GROUPS), step(RUNS):
        s0 = graph_stats()
        # Recorded with the controller held, so it lowers fn in one round: a round that ended
        # part-way would close the open run at its flush, and the runs counted would depend on
        # how far the controller had got (a loaded CI run counted 2 where one run is made).
        with held_controller():
            ys = fn(*args)
        ys = ys if isinstance(ys, (list, tuple)) else [ys]
        values = [v for y in ys for v in local_values(y)]
        s1 = graph_stats()
    return ys, values, s1["bcast_collectives"] - s0["bcast_collectives"], s1["step_runs"] - s0["step_runs"]


class TestSameAsPerRank(unittest.TestCase):
    def compare(self, fn, args, wants, shared):
        """fn(*args) both ways: the same bits on every device, placements, and eager torch's values;
        `shared`: how many collectives the new path must take (True: some; None: any)."""
        off, off_v, n_off, _ = run(False, fn, *args)
        on, on_v, n_on, runs = run(True, fn, *args)
        self.assertEqual(n_off, 0)
        if shared is True:
            self.assertGreater(n_on, 0)
        elif shared is not None:
            self.assertEqual(n_on, shared)
        self.assertEqual(len(on_v), len(off_v))
        for d, (x, y) in enumerate(zip(on_v, off_v)):
            self.assertEqual(x.dtype, y.dtype)
            self.assertTrue(torch.equal(bits(x), bits(y)), f"value {d}")
        wants = wants if isinstance(wants, (list, tuple)) else [wants]
        for a, b, want in zip(on, off, wants):
            self.assertEqual(a.placements, b.placements)
            assert_equal_everywhere(self, a, want)
        return n_on, runs

    def test_all_reduce_1d(self):
        for mesh in (CPU2, CPU3):
            for dtype in (torch.float32, torch.bfloat16):
                with self.subTest(mesh=mesh, dtype=dtype):
                    t = int_valued(5, 7, dtype=dtype, seed=1)
                    x = genuine_partial(t, mesh, [P], seed=3)
                    n, _ = self.compare(lambda x, mesh=mesh: x.redistribute(mesh, [R]), (x,), t, True)
                    self.assertEqual(n, 1)

    def test_all_gather_and_reduce_scatter_uneven(self):
        t = int_valued(5, 7, seed=2)
        for mesh in (CPU2, CPU3):
            for src, dst in (([Shard(0)], [R]), ([Shard(1)], [R]), ([P], [Shard(0)]), ([P], [Shard(1)])):
                with self.subTest(mesh=mesh, src=src, dst=dst):
                    x = genuine_partial(t, mesh, src, seed=4)
                    self.compare(lambda x, mesh=mesh, dst=dst: x.redistribute(mesh, dst), (x,), t, True)

    def test_2d_meshes(self):
        # Each mesh dim's groups (one per coordinate of the other dim) are one shared record: every
        # slot with its own group id and number. (Source, destination, collectives shared.)
        cases = (([P, R], [R, R], 1), ([R, P], [R, R], 1), ([P, P], [R, R], 2), ([Shard(0), P], [Shard(0), R], 1),
                 ([P, Shard(1)], [R, Shard(1)], 1), ([Shard(0), Shard(1)], [R, R], 2),
                 ([R, P], [R, Shard(1)], 1), ([P, R], [Shard(0), R], 1), ([P, P], [Shard(0), Shard(1)], 2))
        for mesh in (CPU2x2, CPU2x3, CPU4x2):
            for dtype in (torch.float32, torch.bfloat16):
                t = int_valued(8, 6, dtype=dtype, seed=5)
                for src, dst, n in cases:
                    with self.subTest(mesh=mesh.shape, dtype=dtype, src=src, dst=dst):
                        x = genuine_partial(t, mesh, src, seed=6)
                        self.compare(lambda x, mesh=mesh, dst=dst: x.redistribute(mesh, dst), (x,), t,
                                     n if GROUPS else 0)

    def test_2d_uneven(self):
        # 7 columns on 3 (or 2) devices of mesh dim 1: gathering or scattering that dim is one record
        # per mesh dim (every row's group has the same uneven pieces); along mesh dim 0 the columns'
        # groups hold pieces of different widths, so their kernels differ and stay per rank.
        t = int_valued(5, 7, seed=12)
        for mesh in (CPU2x3, CPU4x2):
            for src, dst, n in (([R, Shard(1)], [R, R], 1), ([R, P], [R, Shard(1)], 1),
                                ([Shard(1), R], [R, R], 1), ([P, R], [Shard(1), R], 1),
                                ([P, Shard(1)], [R, Shard(1)], 0), ([Shard(0), P], [Shard(0), R], 0),
                                ([Shard(0), Shard(1)], [R, R], None), ([P, P], [R, R], None)):
                with self.subTest(mesh=mesh.shape, src=src, dst=dst):
                    x = genuine_partial(t, mesh, src, seed=13)
                    self.compare(lambda x, mesh=mesh, dst=dst: x.redistribute(mesh, dst), (x,), t,
                                 (n if GROUPS else 0) if n is not None else None)

    def test_2d_inside_a_run(self):
        # tp x dp: a row-parallel matmul's Partial along tp all-reduced in every dp group, read by
        # the run that made it and by what follows; the dp gradient-style all-reduce after.
        tx, tw = int_valued(4, 6, seed=14), int_valued(6, 4, seed=15)
        for mesh in (CPU2x2, CPU4x2):
            x = dtorch.from_torch(tx, mesh, [Shard(0), Shard(1)])
            w = dtorch.from_torch(tw, mesh, [R, Shard(0)])

            def fn(x, w, mesh=mesh):
                p = (x * 2.0) @ w  # [Shard(0), Partial]
                r = (p + p).redistribute(mesh, [Shard(0), R])
                s = (r * 0.5).sum(dim=0, keepdim=True)  # [Partial, R]
                return r + 1.0, s.redistribute(mesh, [R, R])

            y = (tx * 2.0) @ tw * 2.0
            self.compare(fn, (x, w), [y + 1.0, (y * 0.5).sum(dim=0, keepdim=True)], 2 if GROUPS else 0)

    def test_reductions_over_a_sharded_dim(self):
        # sort gathers its dim (reduce.c, on the compute streams); amax all-reduces its local maxima.
        t = int_valued(6, 5, seed=7)
        for mesh in (CPU2, CPU3):
            x = dtorch.from_torch(t, mesh, [Shard(1)])
            self.compare(lambda x: [x.sort(dim=1).values, x.amax(dim=1)], (x,),
                         [t.sort(dim=1).values, t.amax(dim=1)], True)

    def test_inside_a_run(self):
        # Row-parallel pattern: a run of shared records makes a Partial, the all-reduce reads
        # kernel 3 of it, the run goes on with its result and the Partial's other users.
        tx, tw = int_valued(3, 8, seed=8), int_valued(8, 6, seed=9)
        for mesh in (CPU2, CPU3):
            x = dtorch.from_torch(tx, mesh, [Shard(1)])
            w = dtorch.from_torch(tw, mesh, [Shard(0)])

            def fn(x, w, mesh=mesh):
                p = (x * 2.0) @ w  # Partial
                q = p * 0.5 + p
                r = q.redistribute(mesh, [R])
                s = (r + 1.0) * 3.0
                return s, q * 2.0

            want_q = (tx * 2.0) @ tw * 0.5 + (tx * 2.0) @ tw
            n, runs = self.compare(fn, (x, w), [(want_q + 1.0) * 3.0, want_q * 2.0], True)
            self.assertEqual(n, 1)
            # On the communication streams the all-reduce leaves the run open: its seven kernels
            # are one run; on the compute streams (DTORCH_OVERLAP=0) it is linked there and cuts it.
            if RUNS and GROUPS:  # runs need blob groups
                self.assertEqual(runs, 2 if os.environ.get("DTORCH_OVERLAP") == "0" else 1)

    def test_kernel_error_upstream_of_the_all_reduce(self):
        x = dtorch.from_torch(torch.tensor([[4.0, 6.0], [8.0, 10.0]]), CPU2, [Shard(0)])
        xi = dtorch.from_torch(torch.tensor([[4, 6], [8, 10]]), CPU2, [Shard(0)])
        z = dtorch.from_torch(torch.tensor([[2, 3], [0, 5]]), CPU2, [Shard(0)])  # device 1 divides by 0
        msgs = []
        for on in (False, True):
            with replay(False), bcast(on):
                c0 = colls()
                line = inspect.currentframe().f_lineno + 1
                y = xi // z
                s = y.sum(dim=0)  # Partial
                with self.assertRaises(dtorch.KernelError) as cm:
                    s.redistribute(CPU2, [R]).to_torch()
                self.assertEqual(colls() - c0, 1 if on else 0)
                msgs.append(str(cm.exception))
                self.assertIn("floor_divide failed on cpu:1", msgs[-1])
                self.assertIn(f"{os.path.basename(__file__)}:{line}", msgs[-1])
                # The runtime keeps working, on the same path.
                assert_equal_everywhere(self, (x * 2.0).sum(dim=0).redistribute(CPU2, [R]),
                                        torch.tensor([24.0, 32.0]))
        self.assertEqual(msgs[0], msgs[1])

    def test_cancelled_while_queued(self):
        # Shared all-reduces behind a gate, cancelled: every rank drops its slot and still meets its
        # peers (nobody waits for a rank that never comes); the read fails as cancelled.
        g = dtorch.Graph()
        gate = Gate()
        try:
            with replay(False, graph=g), bcast(True, graph=g):
                t = int_valued(4, 4, seed=10)
                x = gate.hold(genuine_partial(t, CPU3, [P], seed=11, graph=g))
                y = x
                for _ in range(4):
                    y = (y.redistribute(CPU3, [R]) * 2.0).redistribute(CPU3, [P])
                f = y.redistribute(CPU3, [R]).to_torch_async()
                wait_stat(g, "bcast_collectives", 5)  # lowered, behind the gate
                self.assertEqual(colls(g), 5)
                # Every rank's slot of the five all-reduces was dropped, not run.
                cancel_behind_gate(self, g, gate, f, 3 * 5)
        finally:
            gate.open()
            g.shutdown()


def replay_stats():
    s = graph_stats()
    return {k: s[k] for k in ("replay_hits", "replay_misses", "bcast_collectives")}


class TestReplayedAsTheRecord(unittest.TestCase):
    """A node whose lowering was one shared collective (lower_coll.c, dt__lw_coll_replay) has that
    record as its replay template: a later node of the same signature gets a copy with its own
    sequence numbers (and, on a 2-D mesh, each slot's), reading its own input's group, without being
    lowered. Each step is a fresh genuine Partial (or Shard) input, scaled by a run and redistributed,
    one controller round; replay off and on give the same bits on every device and torch's values,
    and from the second step on the collective is replayed (no miss) and still one shared record."""

    STEPS = 4

    def steps(self, on, mesh, src, dst, t, scale=True):
        out = []
        with replay(on), bcast(True), bgroup(GROUPS), step(RUNS):
            for i in range(self.STEPS):
                # A new input each step, pieces of a new split; the steps' values differ.
                ti = t + i
                x = genuine_partial(ti, mesh, src, seed=20 + i)
                settle()
                s0 = replay_stats()
                with held_controller():
                    y = ((x * 2.0) if scale else x).redistribute(mesh, dst)
                    z = y + 1.0  # after the collective: reads its output group
                values = local_values(y) + local_values(z)
                want = ti * 2.0 if scale else ti
                assert_equal_everywhere(self, y, want)
                assert_equal_everywhere(self, z, want + 1.0)
                out.append((values, {k: v - s0[k] for k, v in replay_stats().items()}))
        return out

    def compare(self, mesh, src, dst, t, colls_per_step, scale=True, template=True):
        off = self.steps(False, mesh, src, dst, t, scale)
        on = self.steps(True, mesh, src, dst, t, scale)
        for i, ((v_off, c_off), (v_on, c_on)) in enumerate(zip(off, on)):
            self.assertEqual(len(v_on), len(v_off))
            for d, (a, b) in enumerate(zip(v_on, v_off)):
                self.assertTrue(torch.equal(bits(a), bits(b)), f"step {i}, piece {d}")
            self.assertEqual(c_on["bcast_collectives"], c_off["bcast_collectives"], f"step {i}")
            self.assertEqual(c_on["bcast_collectives"], colls_per_step, f"step {i}")
            # Steps 0 and 1 capture (step 1's input is made by a run the first time). Without runs
            # the shared records around the collective are not replayed (test_replay_runs.py), nor
            # without blob groups the collective (one blob per device).
            if i >= 2 and RUNS and GROUPS:
                # Every node (the scale, the redistribution, the add), or all but the
                # redistribution where its lowering is not one record making its output.
                self.assertEqual(c_on["replay_misses"], 0 if template else 1, f"step {i}")
                self.assertEqual(c_on["replay_hits"], (3 if scale else 2) - (not template), f"step {i}")

    def test_1d(self):
        for mesh in (CPU2, CPU3):
            for dtype in (torch.float32, torch.bfloat16):
                for src, dst in (([P], [R]), ([Shard(0)], [R]), ([Shard(1)], [R]), ([P], [Shard(0)]),
                                 ([P], [Shard(1)])):
                    with self.subTest(mesh=mesh, dtype=dtype, src=src, dst=dst):
                        self.compare(mesh, src, dst, int_valued(5, 7, dtype=dtype, seed=16), 1)

    def test_2d(self):
        # Several groups: each slot's own group id and sequence number, renumbered at each replay.
        t = int_valued(8, 6, seed=17)
        for mesh in (CPU2x2, CPU2x3):
            # The last two all-reduce and then take each device's rows without a kernel (a view):
            # the lowering made one collective, but not the output, so it is not the template.
            for src, dst in (([P, R], [R, R]), ([R, P], [R, R]), ([R, P], [R, Shard(1)]),
                             ([R, P], [Shard(0), Shard(0)]), ([Shard(0), P], [Shard(0), Shard(0)])):
                with self.subTest(mesh=mesh.shape, src=src, dst=dst):
                    self.compare(mesh, src, dst, t, 1 if GROUPS else 0, template=dst[1] == R or dst[0] == R)

    def test_several_in_flight(self):
        # Four all-reduces of one signature in one round, none read before the last is queued: each
        # replay has its own sequence numbers, so no rank meets another collective's peers.
        ts = [int_valued(5, 7, seed=40 + i) for i in range(4)]
        with replay(True), bcast(True), bgroup(True), step(True):
            for rnd in range(3):
                xs = [genuine_partial(t, CPU3, [P], seed=50 + rnd * 4 + i) for i, t in enumerate(ts)]
                settle()
                s0 = replay_stats()
                with held_controller():
                    ys = [(x * 2.0).redistribute(CPU3, [R]) for x in xs]
                for y, t in zip(ys, ts):
                    assert_equal_everywhere(self, y, t * 2.0)
                c = {k: v - s0[k] for k, v in replay_stats().items()}
                self.assertEqual(c["bcast_collectives"], 4)
                if rnd:
                    self.assertEqual((c["replay_hits"], c["replay_misses"]), (8, 0), f"round {rnd}")

    def test_adopted_input(self):
        # The input made per device (genuine_partial's pieces, no run before it): the replay makes
        # its group as the lowering did.
        self.compare(CPU3, [P], [R], int_valued(5, 7, seed=18), 1, scale=False)

    def test_falls_back(self):
        # A changed shape, then shared records off, in the middle of a loop of all-reduces: that
        # collective is lowered (per rank when off), the next ones replayed again; torch's values.
        # The input is scaled in a round of its own with shared records on, so with them off only
        # the collective's round differs: its signature is the captured one.
        t = int_valued(5, 7, seed=19)
        with replay(True), bcast(True), bgroup(True), step(True):
            for i, rows in enumerate((5, 5, 5, 3, 5, 5, 5)):
                ti = (t + i)[:rows]
                x = genuine_partial(ti, CPU2, [P], seed=30 + i) * 2.0
                settle()
                with bcast(i != 5):
                    s0 = replay_stats()
                    with held_controller():
                        y = x.redistribute(CPU2, [R])
                    assert_equal_everywhere(self, y, ti * 2.0)
                    c = {k: v - s0[k] for k, v in replay_stats().items()}
                if i == 3:  # a new shape: a new signature, lowered
                    self.assertEqual(c["replay_misses"], 1)
                if i == 5:  # off: the same signature, not replayed; per rank, nothing shared
                    self.assertEqual((c["replay_hits"], c["bcast_collectives"]), (0, 0))
                if i in (2, 4, 6):
                    self.assertEqual((c["replay_hits"], c["bcast_collectives"]), (1, 1), f"step {i}")


class TestSwitches(unittest.TestCase):
    """The comparisons again in a child process under each switch."""

    def child(self, **env):
        if any(os.environ.get(k) == v for k, v in env.items()):
            self.skipTest("already the child")
        here = os.path.dirname(os.path.abspath(__file__))
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                            os.path.abspath(__file__), "-k", "SameAsPerRank or ReplayedAsTheRecord"],
                           cwd=here, env=dict(os.environ, **env), capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        self.assertIn("passed", r.stdout)

    def test_collectives_on_the_compute_streams(self):
        self.child(DTORCH_OVERLAP="0")

    def test_without_blob_groups(self):
        self.child(DTORCH_BGROUP="0")

    def test_without_runs(self):
        self.child(DTORCH_STEP="0")


if __name__ == "__main__":
    unittest.main()
