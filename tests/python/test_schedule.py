"""The controller's schedule (issue 14 item 3; docs/decisions.md, "Overlap by schedule"): compute
that does not read a collective's result is lowered ahead of compute that does. Two micro-batches
written one after the other (all of A's layers, then all of B's) are the case it is for: results
are compared with eager torch (torch.equal on integer-valued data, every replica checked) with the
schedule on and off, on 1-D and 2-D meshes with genuine Partials; the reorder is seen in
``graph_stats()["nodes_reordered"]`` and in a trace's kernel order on the compute stream; a
kernel error and a failed lowering (fail_allocs) still name the user's line at the read, and the
failures' order shows the reorder; explain records are the same either way; and
the bound on how far ahead a node may go holds dtorch's peak memory. The controller is held
(held_controller) so that each test's ops land in one window whatever the machine's timing."""
import inspect
import os
import unittest

import torch

import dtorch
from dtorch import Partial, Replicate, Shard
from dtorch.test.probes import (bcast, fail_allocs, fail_allocs_pending, graph_stats, held_controller, replay,
                                 schedule)
from helpers import CPU2, CPU2x2, DEV, assert_equal_everywhere, genuine_partial, int_valued

if os.environ.get("DTORCH_OVERLAP") == "0":
    # The schedule lowers compute ahead of compute that waits for a collective on the communication
    # stream; DTORCH_OVERLAP=0 puts collectives on the compute stream, so there is nothing to go
    # ahead of (values with overlap off: test_streams.py's child process, test_bcast_coll.py).
    raise unittest.SkipTest("DTORCH_OVERLAP=0: no communication stream to schedule around")

AHEAD = 128  # DT__SCHED_AHEAD (src/core/controller/sched.h)
LAYERS = 3


def reordered():
    return graph_stats()["nodes_reordered"]


def torch_mlp(x, ws):
    for w1, w2 in ws:
        x = torch.relu(x @ w1) @ w2
    return x


class TestSequentialMicroBatches(unittest.TestCase):
    """A tensor-parallel MLP (column- then row-parallel Linear, the Partial all-reduced) run on
    two micro-batches one after the other."""

    def setUp(self):
        # Small integers: every product and sum is exact in float32, in any order.
        self.xs = [int_valued(4, 8, low=-2, high=3, seed=s) for s in (1, 2)]
        self.ws = [(int_valued(8, 16, low=-1, high=2, seed=10 + i), int_valued(16, 8, low=-1, high=2, seed=20 + i))
                   for i in range(LAYERS)]
        self.want = [torch_mlp(x, self.ws) for x in self.xs]

    def run_1d(self, on):
        dws = [(dtorch.from_torch(a, CPU2, [Shard(1)]), dtorch.from_torch(b, CPU2, [Shard(0)])) for a, b in self.ws]
        dxs = [dtorch.from_torch(x, CPU2, [Replicate()]) for x in self.xs]
        dtorch.synchronize()
        with schedule(on):
            before = reordered()
            with held_controller():
                outs = []
                for x in dxs:
                    for w1, w2 in dws:
                        p = dtorch.relu(x @ w1) @ w2  # a genuine Partial: each device's half of the sum
                        self.assertTrue(p.placements[0].is_partial())
                        x = p.redistribute(placements=[Replicate()])  # all-reduce
                    outs.append(x)
            for got, want in zip(outs, self.want):
                assert_equal_everywhere(self, got, want)
            return reordered() - before

    def test_1d_mesh(self):
        # On: B's layers go ahead of A's layers 2 and 3 (each waits for an all-reduce). Off: none.
        self.assertGreater(self.run_1d(True), 0)
        self.assertEqual(self.run_1d(False), 0)

    def test_with_replay(self):
        # Replay caches per node: reordered nodes replay the same kernels. Two steps, the first
        # feeding the second, in one window (values stay exact in float32). Per-device records
        # (bcast off): a shared record, the all-reduces included on a 1-D mesh, is never replayed.
        # A graph of its own: with replay on (the default) the default graph has already captured these
        # signatures as shared records (the other tests here), whose templates are never replayed.
        g = dtorch.Graph()
        dws = [(dtorch.from_torch(a, CPU2, [Shard(1)], graph=g), dtorch.from_torch(b, CPU2, [Shard(0)], graph=g))
               for a, b in self.ws]
        dxs = [dtorch.from_torch(x, CPU2, [Replicate()], graph=g) for x in self.xs]
        g.sync()
        with replay(True, graph=g), schedule(True, graph=g), bcast(False, graph=g):
            before, hits = graph_stats(g)["nodes_reordered"], graph_stats(g)["replay_hits"]
            with held_controller(g):
                for _ in range(2):
                    outs = []
                    for x in dxs:
                        for w1, w2 in dws:
                            x = (dtorch.relu(x @ w1) @ w2).redistribute(placements=[Replicate()])
                        outs.append(x)
                    dxs = outs
            want = self.xs
            for _ in range(2):
                want = [torch_mlp(x, self.ws) for x in want]
            for got, w in zip(dxs, want):
                assert_equal_everywhere(self, got, w)
            self.assertGreater(graph_stats(g)["nodes_reordered"] - before, 0)
            self.assertGreater(graph_stats(g)["replay_hits"] - hits, 0)

    def test_2d_mesh_genuine_partials(self):
        # dp x tp: batch rows Shard(0) on dp; the input arrives as a genuine Partial on tp.
        dws = [(dtorch.from_torch(a, CPU2x2, [Replicate(), Shard(1)]),
                dtorch.from_torch(b, CPU2x2, [Replicate(), Shard(0)])) for a, b in self.ws]
        for on in (True, False):
            with self.subTest(schedule=on):
                dxs = [genuine_partial(x, CPU2x2, [Shard(0), Partial()], seed=3) for x in self.xs]
                dtorch.synchronize()
                with schedule(on):
                    before = reordered()
                    with held_controller():
                        outs = []
                        for x in dxs:
                            for w1, w2 in dws:
                                x = x.redistribute(placements=[Shard(0), Replicate()])  # all-reduce on tp
                                x = dtorch.relu(x @ w1) @ w2  # [Shard(0), Partial()] again
                            outs.append(x.redistribute(placements=[Replicate(), Replicate()]))
                    for got, want in zip(outs, self.want):
                        assert_equal_everywhere(self, got, want)
                    n = reordered() - before
                if on:
                    self.assertGreater(n, 0)
                else:
                    self.assertEqual(n, 0)

    def test_trace_shows_the_compute_stream_order(self):
        # The compute stream of cpu:0 runs its kernels in the order the controller queued them
        # (their "seq"): with the schedule, a kernel of an op recorded later comes before one of
        # an op recorded earlier (the op slices' times on the client track are program order).
        dws = [(dtorch.from_torch(a, CPU2, [Shard(1)]), dtorch.from_torch(b, CPU2, [Shard(0)])) for a, b in self.ws]
        dxs = [dtorch.from_torch(x, CPU2, [Replicate()]) for x in self.xs]
        dtorch.synchronize()
        inversions = {}
        for on in (True, False):
            with schedule(on), dtorch.profiler.trace(None) as t:
                with held_controller():
                    outs = []
                    for x in dxs:
                        for w1, w2 in dws:
                            x = (dtorch.relu(x @ w1) @ w2).redistribute(placements=[Replicate()])
                        outs.append(x)
                for o in outs:
                    o.to_torch()
            for got, want in zip(outs, self.want):
                assert_equal_everywhere(self, got, want)
            # When each kernel's op was recorded (program order), in the stream's order.
            recorded = {e["args"]["node"]: e["ts"] for e in t.events if e.get("cat") == "op"}
            ks = sorted((e["args"]["seq"], recorded[e["args"]["node"]]) for e in t.events
                        if e.get("cat") == "kernel" and e["args"]["device"] == f"{DEV}:0"
                        and e["args"]["stream"] == "compute" and e["args"]["node"])
            stamps = [ts for _, ts in ks]
            self.assertEqual(len(stamps), 2 * LAYERS * 3)  # matmul, relu, matmul per layer
            inversions[on] = sum(1 for a, b in zip(stamps, stamps[1:]) if b < a)
            # A trace's records per user line: one op record per op, either way.
            self.assertEqual(len(recorded), 2 * LAYERS * 4)
        self.assertGreater(inversions[True], 0)
        self.assertEqual(inversions[False], 0)

    def test_explain_records_are_the_same(self):
        dws = [(dtorch.from_torch(a, CPU2, [Shard(1)]), dtorch.from_torch(b, CPU2, [Shard(0)])) for a, b in self.ws]
        dxs = [dtorch.from_torch(x, CPU2, [Replicate()]) for x in self.xs]
        dtorch.synchronize()
        records = {}
        for on in (True, False):
            with schedule(on), dtorch.explain() as e:
                before = reordered()
                with held_controller():
                    outs = []
                    for x in dxs:
                        for w1, w2 in dws:
                            x = (dtorch.relu(x @ w1) @ w2).redistribute(placements=[Replicate()])
                        outs.append(x)
                for o in outs:
                    o.to_torch()
                self.assertEqual(reordered() - before > 0, on)
            records[on] = sorted(e.records)
        self.assertEqual(records[True], records[False])
        (rec,) = records[True]
        self.assertEqual((rec.collective, rec.count), ("all_reduce", 2 * LAYERS))


class TestErrorsAndMemory(unittest.TestCase):
    def test_kernel_error_names_the_line(self):
        # B's integer ops need no collective: they are lowered ahead of A's layers 2 and 3, and the
        # floor division by zero still names its own line at the read.
        ta, tw1, tw2 = (int_valued(4, 8, seed=1), int_valued(8, 8, low=-1, high=2, seed=2),
                        int_valued(8, 8, low=-1, high=2, seed=3))
        a = dtorch.from_torch(ta, CPU2, [Replicate()])
        w1, w2 = dtorch.from_torch(tw1, CPU2, [Shard(1)]), dtorch.from_torch(tw2, CPU2, [Shard(0)])
        b = dtorch.from_torch(torch.arange(8, dtype=torch.int64), CPU2, [Replicate()])
        zeros = dtorch.from_torch(torch.zeros(8, dtype=torch.int64), CPU2, [Replicate()])
        dtorch.synchronize()
        self.enterContext(schedule(True))  # on until the read (the opt-in pass runs with DTORCH_SCHEDULE=0)
        before = reordered()
        with held_controller():
            x = a
            for _ in range(LAYERS):
                x = ((x @ w1) @ w2).redistribute(placements=[Replicate()])
            y = b * 2
            line = inspect.currentframe().f_lineno + 1
            y = y // zeros
            y = y + 1
        with self.assertRaises(dtorch.KernelError) as cm:
            y.to_torch()
        self.assertGreater(reordered() - before, 0)
        msg = str(cm.exception)
        self.assertIn("floor_divide failed on cpu:", msg)
        self.assertIn(f"test_schedule.py:{line}", msg)
        want = ta
        for _ in range(LAYERS):
            want = want @ tw1 @ tw2
        assert_equal_everywhere(self, x, want)

    def first_failure_after_the_all_reduce(self, on):
        """Fails the controller's k-th lowering allocation for k = 0, 1, ... in a window of an
        all-reduce x, its reader y and an independent z; returns (the first op after the all-reduce
        whose lowering failed, as the line its error names, and the lines)."""
        t, u = int_valued(6, seed=1), int_valued(6, seed=2)
        for k in range(40):
            part = genuine_partial(t, CPU2, [Partial()], seed=4)
            b = dtorch.from_torch(u, CPU2, [Replicate()])
            dtorch.synchronize()
            # Per-device records: a shared record's allocations come from pools or fall back
            # without an error (a group not made), so which lowering the k-th one hits would
            # depend on how warm the pools are (test_bcast.c covers those records' failures).
            with schedule(on), bcast(False):
                try:
                    with held_controller():
                        fail_allocs(k)
                        lines = {"all_reduce": inspect.currentframe().f_lineno + 1}
                        x = part.redistribute(placements=[Replicate()])
                        lines["mul"] = inspect.currentframe().f_lineno + 1
                        y = x * 2
                        lines["add"] = inspect.currentframe().f_lineno + 1
                        z = b + 1
                    failed = []
                    for v, want in ((y, t * 2), (z, u + 1)):
                        try:
                            self.assertTrue(torch.equal(v.to_torch(), want))
                        except dtorch.KernelError as e:
                            self.assertIn("failed on the controller (created at", str(e))
                            failed.append(str(e))
                    self.assertFalse(fail_allocs_pending())
                finally:
                    fail_allocs(-1)
            # Each error names the op and the line of the node whose lowering failed (y inherits
            # x's error), whichever order the nodes were lowered in.
            named = {op for op, line in lines.items() for m in failed if f"test_schedule.py:{line})" in m}
            self.assertEqual(len(named), 1, failed)
            (op,) = named
            self.assertIn("redistribute failed" if op == "all_reduce" else "binary failed", failed[-1])
            if op != "all_reduce":
                return op
        self.fail("no lowering after the all-reduce failed")

    def test_lowering_failure_names_the_line(self):
        # On, z (independent) is lowered right after the all-reduce, ahead of y, which reads it.
        self.assertEqual(self.first_failure_after_the_all_reduce(True), "add")
        self.assertEqual(self.first_failure_after_the_all_reduce(False), "mul")

    def test_memory_bound(self):
        # N all-reduces whose results are added up one after another: the accumulation waits for
        # each all-reduce, so the schedule makes the next terms first, but never more than AHEAD
        # slots ahead; without that bound all N terms (N * size bytes) would be alive at once.
        n, numel = 400, 16384
        size = numel * 4
        base = genuine_partial(int_valued(numel, low=-3, high=4, seed=5), CPU2, [Partial()], seed=6)
        zero = dtorch.from_torch(torch.zeros(numel), CPU2, [Replicate()])
        dtorch.synchronize()
        peaks = {}
        for on in (True, False):
            with schedule(on):
                dtorch.synchronize()
                dtorch.reset_peak_memory_stats()
                before = reordered()
                with held_controller():
                    acc = zero
                    for i in range(n):
                        acc = acc + (base * float(i % 3)).redistribute(placements=[Replicate()])
                got = acc.to_torch()
                peaks[on] = dtorch.memory_stats(CPU2)[f"{DEV}:0"]["peak"]
                self.assertEqual(reordered() - before > 0, on)
            want = int_valued(numel, low=-3, high=4, seed=5) * float(sum(i % 3 for i in range(n)))
            self.assertTrue(torch.equal(got, want))
        self.assertLessEqual(peaks[True], peaks[False] + AHEAD * size)
        self.assertLess(peaks[True], n * size // 2)


if __name__ == "__main__":
    unittest.main()
