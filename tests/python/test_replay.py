"""Capture and replay (src/core/replay.c): a node with the signature of one lowered before gets copies
of its kernels bound to its own inputs. Every result is checked against eager torch, and the graph's
counters (graph_stats()["replay_hits"], ["replay_misses"]) say which nodes were replayed.

Each step runs inside held_controller(), so it is one controller round whatever the timing: the
window's passes (which feed the reuse mark into the signature) then see the same thing every time.
"""

import inspect
import os
import unittest

import torch

import dtorch
import dtorch.nn.functional as F
from dtorch import DeviceMesh, Partial, Replicate, Shard
from dtorch.test.probes import fail_allocs, fail_allocs_pending, graph_stats, held_controller, replay
from dtorch.test.test_util import genuine_partial

from helpers import CPU2, assert_equal_everywhere, int_valued, randn

R, P = Replicate(), Partial()
S0, S1 = Shard(0), Shard(1)


def counters():
    s = graph_stats()
    return s["replay_hits"], s["replay_misses"]


class ReplayCase(unittest.TestCase):
    def setUp(self):
        # A round with replay off drops the templates: each test starts with an empty cache.
        with replay(False):
            dtorch.synchronize()
        self._ctx = replay(True)
        self._ctx.__enter__()

    def tearDown(self):
        self._ctx.__exit__(None, None, None)

    def step(self, fn, *args):
        """Runs fn(*args) in one controller round and reads the result; returns (result, hits,
        misses) of that round."""
        h0, m0 = counters()
        with held_controller():
            y = fn(*args)
        out = y.to_torch()
        h1, m1 = counters()
        return y, out, h1 - h0, m1 - m0


def mul_add(a, b, s=1.5):
    return a * b + s


class TestHits(ReplayCase):
    def test_repeat_replays_every_node(self):
        w = torch.randn(16, 16)
        dw = dtorch.from_torch(w)

        def block(x):
            h = (x @ dw) * 0.5 + 1.0
            h = F.relu(h).exp().sum(dim=-1, keepdim=True)
            return x * h - h.mean()

        seen = []
        for i in range(4):
            t = randn(4, 16, seed=i)
            _, out, hits, misses = self.step(block, dtorch.from_torch(t))
            h = torch.relu((t @ w) * 0.5 + 1.0).exp().sum(dim=-1, keepdim=True)
            self.assertTrue(torch.equal(out, t * h - h.mean()), f"step {i}")
            seen.append((hits, misses))
        self.assertEqual(seen[0][0], 0, seen)
        self.assertGreaterEqual(seen[0][1], 8, seen)
        for hits, misses in seen[2:]:
            self.assertEqual((hits, misses), (seen[0][1], 0), seen)

    def test_off_lowers_everything(self):
        a, b = dtorch.from_torch(randn(3, 5)), dtorch.from_torch(randn(3, 5, seed=1))
        with replay(False):
            for _ in range(3):
                _, out, hits, misses = self.step(mul_add, a, b)
                self.assertEqual((hits, misses), (0, 0))
                self.assertTrue(torch.equal(out, a.to_torch() * b.to_torch() + 1.5))


class TestMisses(ReplayCase):
    """After two warm steps of a * b + s (2 nodes), a change falls back to lowering exactly where the
    signature differs; the results equal eager torch."""

    def warm(self, a, b, s=1.5):
        for _ in range(2):
            _, out, hits, misses = self.step(mul_add, a, b, s)
        self.assertEqual((hits, misses), (2, 0))

    def check(self, y, out, want, hits, misses, exp_hits, exp_misses):
        self.assertTrue(torch.equal(out, want), (out, want))
        assert_equal_everywhere(self, y, want)
        self.assertEqual((hits, misses), (exp_hits, exp_misses))

    def test_same_signature_new_data(self):
        a, b = randn(3, 5), randn(3, 5, seed=1)
        self.warm(dtorch.from_torch(a), dtorch.from_torch(b))
        c, d = randn(3, 5, seed=2), randn(3, 5, seed=3)
        y, out, hits, misses = self.step(mul_add, dtorch.from_torch(c), dtorch.from_torch(d))
        self.check(y, out, c * d + 1.5, hits, misses, 2, 0)

    def test_shape(self):
        self.warm(dtorch.from_torch(randn(3, 5)), dtorch.from_torch(randn(3, 5, seed=1)))
        a, b = randn(4, 5), randn(4, 5, seed=1)
        y, out, hits, misses = self.step(mul_add, dtorch.from_torch(a), dtorch.from_torch(b))
        self.check(y, out, a * b + 1.5, hits, misses, 0, 2)

    def test_dtype(self):
        self.warm(dtorch.from_torch(randn(3, 5)), dtorch.from_torch(randn(3, 5, seed=1)))
        a, b = randn(3, 5, dtype=torch.float64), randn(3, 5, dtype=torch.float64, seed=1)
        y, out, hits, misses = self.step(mul_add, dtorch.from_torch(a), dtorch.from_torch(b))
        self.check(y, out, a * b + 1.5, hits, misses, 0, 2)

    def test_scalar(self):
        a, b = randn(3, 5), randn(3, 5, seed=1)
        da, db = dtorch.from_torch(a), dtorch.from_torch(b)
        self.warm(da, db)
        # The mul's signature is unchanged; the add's scalar is not.
        y, out, hits, misses = self.step(mul_add, da, db, 2.25)
        self.check(y, out, a * b + 2.25, hits, misses, 1, 1)
        y, out, hits, misses = self.step(mul_add, da, db, 1.5)
        self.check(y, out, a * b + 1.5, hits, misses, 2, 0)

    def test_placement(self):
        a, b = int_valued(4, 6), int_valued(4, 6, seed=1)
        self.warm(dtorch.from_torch(a, CPU2, [S0]), dtorch.from_torch(b, CPU2, [S0]))
        y, out, hits, misses = self.step(mul_add, dtorch.from_torch(a, CPU2, [S1]),
                                         dtorch.from_torch(b, CPU2, [S1]))
        self.check(y, out, a * b + 1.5, hits, misses, 0, 2)
        y, out, hits, misses = self.step(mul_add, dtorch.from_torch(a, CPU2, [R]),
                                         dtorch.from_torch(b, CPU2, [R]))
        self.check(y, out, a * b + 1.5, hits, misses, 0, 2)

    def test_mesh(self):
        a, b = int_valued(4, 6), int_valued(4, 6, seed=1)
        self.warm(dtorch.from_torch(a, CPU2, [S0]), dtorch.from_torch(b, CPU2, [S0]))
        other = DeviceMesh("cpu", [1, 0])
        y, out, hits, misses = self.step(mul_add, dtorch.from_torch(a, other, [S0]),
                                         dtorch.from_torch(b, other, [S0]))
        self.check(y, out, a * b + 1.5, hits, misses, 0, 2)

    def test_graph(self):
        a, b = randn(3, 5), randn(3, 5, seed=1)
        da, db = dtorch.from_torch(a), dtorch.from_torch(b)
        self.warm(da, db)
        y, out, hits, misses = self.step(lambda x, z: x * z - 1.5, da, db)
        self.check(y, out, a * b - 1.5, hits, misses, 1, 1)
        y, out, hits, misses = self.step(lambda x, z: (x + z) * 1.5, da, db)
        self.check(y, out, (a + b) * 1.5, hits, misses, 0, 2)

    def test_input_from_another_place(self):
        """a * a has the metas of a * b, but one blob twice: a different signature."""
        a, b = randn(3, 5), randn(3, 5, seed=1)
        da, db = dtorch.from_torch(a), dtorch.from_torch(b)
        self.warm(da, db)
        y, out, hits, misses = self.step(mul_add, da, da)
        self.check(y, out, a * a + 1.5, hits, misses, 1, 1)
        y, out, hits, misses = self.step(mul_add, db, da)  # swapped operands: same signature as a * b
        self.check(y, out, b * a + 1.5, hits, misses, 2, 0)

    def test_one_blob_twice_then_two(self):
        """The template of x * x (one blob twice) must not serve a * b."""
        a, b = randn(3, 5), randn(3, 5, seed=1)
        da, db = dtorch.from_torch(a), dtorch.from_torch(b)
        for _ in range(2):
            y, out, hits, misses = self.step(mul_add, da, da)
            self.assertTrue(torch.equal(out, a * a + 1.5))
        self.assertEqual((hits, misses), (2, 0))
        y, out, hits, misses = self.step(mul_add, da, db)
        self.check(y, out, a * b + 1.5, hits, misses, 1, 1)

    def test_alias_through_a_view(self):
        """b a view of a: the same blob under two values; then two values with their own blobs."""
        a = randn(3, 5)
        da = dtorch.from_torch(a)
        for i in range(3):
            y, out, hits, misses = self.step(lambda x: x * x.view(3, 5) + 1.5, da)
            self.assertTrue(torch.equal(out, a * a + 1.5))
        self.assertEqual(misses, 0)
        y, out, hits, misses = self.step(lambda x: x * (x + 1.0).view(3, 5) + 1.5, da)
        self.assertTrue(torch.equal(out, a * (a + 1.0) + 1.5))
        self.assertGreaterEqual(misses, 1)


class TestMultiDevice(ReplayCase):
    def test_collectives_repeat_with_fresh_sequence_numbers(self):
        """A tensor-parallel MLP step: the Partial result of the row-parallel matmul is all-reduced
        every step, and each replayed collective meets its peers."""
        w1, w2 = int_valued(8, 12, seed=5), int_valued(12, 8, seed=6)
        d1 = dtorch.from_torch(w1, CPU2, [S1])
        d2 = dtorch.from_torch(w2, CPU2, [S0])

        def mlp(x):
            h = F.relu(x @ d1)
            z = h @ d2
            return z.redistribute(placements=[R]) * 0.5

        seen = []
        for i in range(4):
            t = int_valued(3, 8, seed=i)
            coll0 = dtorch._C._collectives_lowered()
            y, out, hits, misses = self.step(mlp, dtorch.from_torch(t, CPU2, [R]))
            want = (torch.relu(t @ w1) @ w2) * 0.5
            assert_equal_everywhere(self, y, want)
            # Replayed collectives count as lowered: the all-reduce ran on every step.
            self.assertGreaterEqual(dtorch._C._collectives_lowered() - coll0, 1)
            seen.append((hits, misses))
        self.assertGreater(seen[-1][0], 0, seen)
        self.assertEqual(seen[-1][1], 0, seen)

    def test_back_to_back_collectives_without_reads(self):
        """Replayed all-reduces queued step after step with no read between them: each takes a new
        (group, seq), so a fast rank never meets a slow one's earlier collective."""
        ts = [int_valued(6, 4, seed=20 + i) for i in range(24)]
        xs = [dtorch.from_torch(t, CPU2, [S0]) for t in ts]
        h0, _ = counters()
        ys = []
        with held_controller():  # one round: every rank's comm stream gets them all at once
            for x in xs:
                ys.append(x.sum(dim=0).redistribute(placements=[R]) + 1.0)
        for y, t in zip(ys, ts):
            assert_equal_everywhere(self, y, t.sum(dim=0) + 1.0)
        self.assertGreaterEqual(counters()[0] - h0, 2 * 20)

    def test_genuine_partial_inputs(self):
        """Partial inputs whose pieces differ on every device, reduced every step."""
        for i in range(4):
            t = int_valued(4, 6, seed=10 + i)
            x = genuine_partial(t, CPU2, [P], seed=i)
            y, out, hits, misses = self.step(lambda v: (v * 2.0).redistribute(placements=[S0]) + 1.0, x)
            assert_equal_everywhere(self, y, t * 2.0 + 1.0)
            if i >= 2:
                self.assertGreaterEqual(hits, 2)
                self.assertEqual(misses, 0)


class TestRecording(ReplayCase):
    def test_explain_sees_every_collective(self):
        """While explain records, every node is lowered (none replayed), so each step's all-reduce
        is recorded; afterwards the templates are used again."""
        t = int_valued(4, 6)
        x = dtorch.from_torch(t, CPU2, [S0])

        def f(v):
            return v.sum(dim=0).redistribute(placements=[R]) * 2.0  # Partial, then an all-reduce

        for _ in range(2):
            self.step(f, x)
        with dtorch.explain() as e:
            for _ in range(3):
                y, out, hits, misses = self.step(f, x)
                self.assertEqual(hits, 0)
                assert_equal_everywhere(self, y, t.sum(dim=0) * 2.0)
        self.assertEqual(sum(r.count for r in e.records), 3, str(e))
        y, out, hits, misses = self.step(f, x)
        assert_equal_everywhere(self, y, t.sum(dim=0) * 2.0)
        self.assertGreaterEqual(hits, 2)


class TestErrors(ReplayCase):
    def test_kernel_error_in_a_replayed_node_names_op_and_line(self):
        weight = torch.randn(10, 4)
        dw = dtorch.from_torch(weight)
        for i in range(2):
            good = torch.tensor([[1, 9], [3, 4 + i]])
            _, out, hits, misses = self.step(lambda ix: F.embedding(ix, dw) * 2, dtorch.from_torch(good))
            self.assertTrue(torch.equal(out, torch.nn.functional.embedding(good, weight) * 2))
        self.assertEqual(misses, 0)
        h0, _ = counters()
        bad = dtorch.from_torch(torch.tensor([[1, 12], [3, 4]]))  # 12 is out of range
        with held_controller():  # one round, as the warm steps
            line = inspect.currentframe().f_lineno + 1
            doubled = F.embedding(bad, dw) * 2
        with self.assertRaises(dtorch.KernelError) as cm:
            doubled.to_torch()
        self.assertGreaterEqual(counters()[0] - h0, 2)  # both nodes were replayed
        message = str(cm.exception)
        self.assertIn("embedding", message)
        self.assertIn(f"{os.path.basename(__file__)}:{line}", message)

    def test_failed_replay_raises_at_read(self):
        a, b = randn(3, 5), randn(3, 5, seed=1)
        da, db = dtorch.from_torch(a), dtorch.from_torch(b)
        for _ in range(2):
            self.step(mul_add, da, db)
        try:
            fail_allocs(0)
            line = inspect.currentframe().f_lineno + 1
            y = da * db  # replayed: its first allocation fails
            with self.assertRaises(dtorch.KernelError) as cm:
                (y + 1.5).to_torch()
            self.assertFalse(fail_allocs_pending())
        finally:
            fail_allocs(-1)
        self.assertIn("failed on the controller", str(cm.exception))
        self.assertIn(f"{os.path.basename(__file__)}:{line}", str(cm.exception))
        _, out, hits, _ = self.step(mul_add, da, db)
        self.assertTrue(torch.equal(out, a * b + 1.5))


if __name__ == "__main__":
    unittest.main()
