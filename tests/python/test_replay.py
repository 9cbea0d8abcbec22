"""Capture and replay (src/core/controller/replay.c): a node with the signature of one lowered before gets copies
of its kernels bound to its own inputs. Every result is checked against eager torch, and the graph's
counters (graph_stats()["replay_hits"], ["replay_misses"]) say which nodes were replayed.

Each step runs inside held_controller(), so it is one controller round whatever the timing: the
window's passes (whether they ran is in the signature; the reuse mark follows from the layouts) then
see the same thing every time.
"""

import inspect
import os
import unittest

import torch

import dtorch
import dtorch.nn.functional as F
from dtorch import DeviceMesh, Partial, Replicate, Shard
from dtorch.test.probes import bcast, fail_allocs, fail_allocs_pending, graph_stats, held_controller, replay
from dtorch.test.test_util import genuine_partial

from helpers import CPU2, assert_equal_everywhere, device_assert, int_valued, randn

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
        # Replay's own templates are what these tests count: device-independent records
        # (DTORCH_BCAST=1, test_bcast.py) would take the elementwise nodes instead.
        self._bc = bcast(False)
        self._bc.__enter__()

    def tearDown(self):
        self._bc.__exit__(None, None, None)
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


class TestLayoutClasses(ReplayCase):
    """An input is signed by its layout's class (one word, interned per cache): a value keeps the class
    it was given, and emptying the cache makes every class given out so far stale."""

    def test_values_from_before_a_clear(self):
        a, b = randn(3, 5), randn(3, 5, seed=1)
        da, db = dtorch.from_torch(a), dtorch.from_torch(b)
        self.warm(da, db)
        dc = dtorch.from_torch(randn(5, 3, seed=2))
        with replay(False):
            dtorch.synchronize()  # drops the templates and the classes
        with replay(True):
            # The same values, their classes stale: interned again, lowered, then replayed.
            for exp in ((0, 2), (2, 0)):
                y, out, hits, misses = self.step(mul_add, da, db)
                self.assertTrue(torch.equal(out, a * b + 1.5))
                self.assertEqual((hits, misses), exp)
            # A value of another layout made before the clear is not taken for these ones' class.
            y, out, hits, misses = self.step(mul_add, dc, dc)
            self.assertTrue(torch.equal(out, dc.to_torch() * dc.to_torch() + 1.5))
            self.assertEqual((hits, misses), (0, 2))

    def test_same_layout_values_share_templates(self):
        """Separately made values of one layout have one class: their nodes replay each other's
        templates; a replayed node's output has its template's output class."""
        a, b = randn(3, 5), randn(3, 5, seed=1)
        self.warm(dtorch.from_torch(a), dtorch.from_torch(b))
        for i in range(3):
            c, d = randn(3, 5, seed=10 + i), randn(3, 5, seed=20 + i)
            y, out, hits, misses = self.step(lambda x, z: mul_add(mul_add(x, z), z), dtorch.from_torch(c),
                                             dtorch.from_torch(d))
            self.assertTrue(torch.equal(out, (c * d + 1.5) * d + 1.5))
            # The first time, the second mul_add's mul reads the first one's output (a replayed
            # value) and d: the same signature as the first mul's, so it replays too.
            self.assertEqual((hits, misses), (4, 0))

    warm = TestMisses.warm


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


def run_hits():
    return graph_stats()["replay_run_hits"]


def block_fn(dw, s=0.5):
    """Eight nodes, each reading the one before (a run), on whatever mesh dw is on."""

    def block(x):
        h = (x @ dw) * s + 1.0
        h = F.relu(h).exp().sum(dim=-1, keepdim=True)
        return x * h - 2.0

    return block


def block_torch(t, w, s=0.5):
    h = torch.relu((t @ w) * s + 1.0).exp().sum(dim=-1, keepdim=True)
    return t * h - 2.0


class TestRuns(ReplayCase):
    """The run (replay.c, dt__replay_begin): after a hit, the next node is compared first with the
    template that followed last time; replay_run_hits counts the nodes found that way. A round
    starts after a read (a node that is not cached), so its first node is found in the table."""

    def rstep(self, fn, *args):
        r0 = run_hits()
        y, out, hits, misses = self.step(fn, *args)
        return y, out, hits, misses, run_hits() - r0

    def warm(self, fn, x, nodes):
        for _ in range(2):
            _, _, hits, misses, runs = self.rstep(fn, x)
        self.assertEqual((hits, misses, runs), (nodes, 0, nodes - 1))

    def test_repeat_is_one_run(self):
        w = torch.randn(16, 16)
        block = block_fn(dtorch.from_torch(w))
        self.warm(block, dtorch.from_torch(randn(4, 16)), 8)
        for i in range(3):
            t = randn(4, 16, seed=10 + i)
            _, out, hits, misses, runs = self.rstep(block, dtorch.from_torch(t))
            self.assertTrue(torch.equal(out, block_torch(t, w)), i)
            self.assertEqual((hits, misses, runs), (8, 0, 7))

    def test_change_in_the_middle_falls_back_there(self):
        """A different scalar at the second node: it is lowered, the nodes after it are table hits
        first (the new template has no successor yet), then the new sequence is a run too."""
        w = torch.randn(16, 16)
        dw = dtorch.from_torch(w)
        x = dtorch.from_torch(randn(4, 16))
        self.warm(block_fn(dw), x, 8)
        t = x.to_torch()
        _, out, hits, misses, runs = self.rstep(block_fn(dw, 0.25), x)
        self.assertTrue(torch.equal(out, block_torch(t, w, 0.25)))
        self.assertEqual((hits, misses), (7, 1))
        self.assertEqual(runs, 5)  # the matmul (the round's first) and the node after the miss are not
        _, out, hits, misses, runs = self.rstep(block_fn(dw, 0.25), x)
        self.assertTrue(torch.equal(out, block_torch(t, w, 0.25)))
        self.assertEqual((hits, misses, runs), (8, 0, 7))
        # Back to the first: the matmul's template remembers both successors, so the whole step is
        # one run again.
        _, out, hits, misses, runs = self.rstep(block_fn(dw), x)
        self.assertTrue(torch.equal(out, block_torch(t, w)))
        self.assertEqual((hits, misses, runs), (8, 0, 7))

    def test_one_template_in_several_places(self):
        """Three projections of one shape and two norms: one template with several successors (the
        next projection, the product of q and k, the residual add, another matmul) is still one run
        per step, and each place gets its own inputs' kernels."""
        ws = [torch.randn(16, 16) for _ in range(4)]
        w5 = torch.randn(16, 32)
        dws, d5 = [dtorch.from_torch(w) for w in ws], dtorch.from_torch(w5)

        def norm(x):
            return x * (x * x).mean(dim=-1, keepdim=True).add(1.0).sqrt()

        def body(x, w, w5, mm):
            h = norm(x)
            q, k, v = mm(h, w[0]), mm(h, w[1]), mm(h, w[2])
            x = x + mm(q * k * v, w[3])
            return mm(norm(x), w5)

        for i in range(4):
            t = randn(4, 16, seed=30 + i)
            _, out, hits, misses, runs = self.rstep(lambda x: body(x, dws, d5, lambda a, b: a @ b),
                                                    dtorch.from_torch(t))
            self.assertTrue(torch.equal(out, body(t, ws, w5, torch.matmul)), i)
        self.assertEqual(misses, 0)
        self.assertEqual(runs, hits - 1)

    def test_each_change_in_the_middle(self):
        """A run of four elementwise nodes whose third node changes in shape, dtype, placement or
        aliasing: the change is lowered (a miss), never served by the run's prediction."""
        a, b = int_valued(4, 6), int_valued(4, 6, seed=1)

        def chain(x, y, z):
            h = (x + y) * 2.0
            return (h - (h if z is None else z)) * 0.5  # z None: the third node reads one blob twice

        da, db = dtorch.from_torch(a, CPU2, [S0]), dtorch.from_torch(b, CPU2, [S0])
        for _ in range(2):
            _, out, hits, misses, runs = self.rstep(chain, da, db, db)
        self.assertEqual((hits, misses, runs), (4, 0, 3))
        cases = {
            "shape": (int_valued(4, 1, seed=2), [S0]),          # broadcast: another meta
            "dtype": (int_valued(4, 6, seed=2).double(), [S0]),
            "placement": (int_valued(4, 6, seed=2), [R]),
            "alias": (None, None),
        }
        for name, (zt, pl) in cases.items():
            dz = None if zt is None else dtorch.from_torch(zt, CPU2, pl)
            h = (a + b) * 2.0
            want = (h - (h if zt is None else zt)) * 0.5
            y, out, hits, misses, runs = self.rstep(chain, da, db, dz)
            self.assertTrue(torch.equal(out, want), name)
            assert_equal_everywhere(self, y, want)
            self.assertGreaterEqual(misses, 1, name)
            self.assertLessEqual(runs, 1, name)  # only the add after the mul can be a run hit
            # The first sequence again is still correct.
            _, out, _, _, _ = self.rstep(chain, da, db, db)
            self.assertTrue(torch.equal(out, ((a + b) * 2.0 - b) * 0.5), name)

    def test_attribute_change_in_the_middle(self):
        """The run's prediction is checked against the node's attributes as they are (the words
        before the family block, then the block for the ops that read it): a slice whose start
        alone changes (same output layout), a clamp bound, a layer norm's eps and a reduction's
        dim each miss in the middle of a warm run, and each result is eager torch's."""
        t = randn(6, 16, seed=3)
        g = torch.rand(8) + 0.5

        def body(x, start, lo, eps, dim, w):
            h = (x * 2.0)[:, start:start + 8]
            h = F.layer_norm(h.clamp(min=lo), (8,), w, None, eps)
            return h.sum(dim=dim, keepdim=True) + 1.0

        def torch_body(x, start, lo, eps, dim, w):
            h = (x * 2.0)[:, start:start + 8]
            h = torch.nn.functional.layer_norm(h.clamp(min=lo), (8,), w, None, eps)
            return h.sum(dim=dim, keepdim=True) + 1.0

        dx, dg = dtorch.from_torch(t), dtorch.from_torch(g)
        base = dict(start=0, lo=-0.5, eps=1e-5, dim=-1)
        for _ in range(2):
            _, out, hits, misses, runs = self.rstep(lambda x: body(x, w=dg, **base), dx)
        self.assertEqual(misses, 0)
        self.assertTrue(torch.equal(out, torch_body(t, w=g, **base)))
        for name, value in [("start", 4), ("lo", 0.25), ("eps", 1e-2), ("dim", 0)]:
            args = dict(base, **{name: value})
            _, out, hits, misses, runs = self.rstep(lambda x: body(x, w=dg, **args), dx)
            self.assertTrue(torch.equal(out, torch_body(t, w=g, **args)), name)
            self.assertGreaterEqual(misses, 1, name)
            # The first sequence again: still right, and all replayed.
            _, out, hits, misses, runs = self.rstep(lambda x: body(x, w=dg, **base), dx)
            self.assertTrue(torch.equal(out, torch_body(t, w=g, **base)), name)
            self.assertEqual(misses, 0, name)

    def test_a_read_cuts_the_run(self):
        w = torch.randn(16, 16)
        block = block_fn(dtorch.from_torch(w))

        def two(x):
            y = block(x)
            f = y.to_torch_async()  # a read in the middle: not cached, the run ends there
            return block(y), f

        x = dtorch.from_torch(randn(4, 16))
        t = x.to_torch()
        for i in range(3):
            r0 = run_hits()
            h0, m0 = counters()
            with held_controller():
                z, f = two(x)
            out = z.to_torch()
            h1, m1 = counters()
            self.assertTrue(torch.equal(f.wait(), block_torch(t, w)))
            self.assertTrue(torch.equal(out, block_torch(block_torch(t, w), w)))
        # 16 nodes replayed; after the read the matmul is found in the table, not by the run.
        self.assertEqual((h1 - h0, m1 - m0, run_hits() - r0), (16, 0, 14))

    def test_collectives_in_a_run(self):
        """Column- then row-parallel projections with an all-reduce, twice a step on two devices:
        every node but the round's first is a run hit, each all-reduce meets its peer, and every
        replica equals eager torch."""
        w1, w2 = int_valued(8, 12, seed=5), int_valued(12, 8, seed=6)
        d1, d2 = dtorch.from_torch(w1, CPU2, [S1]), dtorch.from_torch(w2, CPU2, [S0])

        def layer(x):
            for _ in range(2):
                x = (F.relu(x @ d1) @ d2).redistribute(placements=[R]) * 0.5 + x
            return x

        def want(t):
            for _ in range(2):
                t = (torch.relu(t @ w1) @ w2) * 0.5 + t
            return t

        seen = []
        for i in range(4):
            t = int_valued(3, 8, seed=i)
            coll0 = dtorch._C._collectives_lowered()
            y, out, hits, misses, runs = self.rstep(layer, dtorch.from_torch(t, CPU2, [R]))
            assert_equal_everywhere(self, y, want(t))
            self.assertGreaterEqual(dtorch._C._collectives_lowered() - coll0, 2)
            seen.append((hits, misses, runs))
        self.assertEqual(seen[-1][1], 0, seen)
        self.assertGreaterEqual(seen[-1][0], 10, seen)
        self.assertEqual(seen[-1][2], seen[-1][0] - 1, seen)


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
    @device_assert("embedding's index check")
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
