"""The runtime's documented promises, tested without wall-clock bounds.

A value is held pending with a test gate (``dtorch.test.probes.Gate``): its kernels sleep on the
device's worker until the test opens the gate, so "still pending" is a fact the test controls, not a
race against a slow computation. A watchdog opens the gate after a long time only so that a broken
promise fails (the future became ready behind the test's back) instead of hanging; no assertion
depends on how fast the machine is.

The flow-control bound and the failed-call promise of the C API are tested in tests/c/test_graph.c,
``empty_cache`` in test_async.py (TestMemory.test_empty_cache).
"""

import threading
import unittest

import torch

import dtorch
import dtorch.nn.functional as F
from dtorch import Partial, Replicate, Shard
from dtorch.test.probes import Gate, graph_stats
from dtorch.test.test_util import assert_tensor_equal

from helpers import CPU1, CPU2, CPU2x2, int_valued

WATCHDOG_S = 30
WAIT_MS = WATCHDOG_S * 1000


class Watchdog:
    """Opens `gate` after WATCHDOG_S seconds, and remembers whether it had to."""

    def __init__(self, gate):
        self.fired = False

        def fire():
            self.fired = True
            gate.open()

        self._timer = threading.Timer(WATCHDOG_S, fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self):
        self._timer.cancel()


class GateCase(unittest.TestCase):
    def gate(self):
        gate = Gate()
        self.addCleanup(gate.open)
        dog = Watchdog(gate)
        self.addCleanup(dog.cancel)
        return gate, dog


class TestWaitFor(GateCase):
    def test_wait_for_on_a_pending_future_says_false(self):
        for graph in (dtorch.default_graph, dtorch.Graph(backend="ref")):
            with self.subTest(backend=graph.backend):
                gate, dog = self.gate()
                t = int_valued(4, 6)
                x = dtorch.from_torch(t, CPU2, [Shard(0)], graph=graph)
                y = gate.hold(x) * 2
                f = y.to_torch_async()
                # Would block until the watchdog opened the gate, then say True, if the timeout were ignored.
                self.assertIs(f.wait_for(0), False)
                self.assertIs(f.wait_for(20), False)
                self.assertFalse(f.is_ready())
                self.assertFalse(dog.fired)
                sync = graph.sync_future()
                self.assertIs(sync.wait_for(0), False)
                gate.open()
                self.assertIs(f.wait_for(WAIT_MS), True)
                self.assertTrue(f.is_ready())
                self.assertTrue(torch.equal(f.get(), t * 2))
                self.assertIs(sync.wait_for(WAIT_MS), True)
                self.assertIs(f.wait_for(0), True)
                if graph is not dtorch.default_graph:
                    graph.shutdown()

    def test_awaiting_a_pending_future_keeps_the_loop_running(self):
        import asyncio

        gate, dog = self.gate()
        y = gate.hold(dtorch.arange(5)) + 1

        async def read(fut):
            return await fut

        async def main():
            task = asyncio.ensure_future(read(y.to_torch_async()))
            for _ in range(20):  # the loop keeps running while the value is held
                await asyncio.sleep(0)
            self.assertFalse(task.done())
            gate.open()
            return await task

        value = asyncio.run(main())
        self.assertFalse(dog.fired)
        self.assertTrue(torch.equal(value, torch.arange(5) + 1))


class TestMetadataDoesNotWait(GateCase):
    def test_metadata_of_a_pending_tensor(self):
        gate, dog = self.gate()
        x = dtorch.from_torch(int_valued(6, 4, 5), CPU2x2, [Shard(0), Replicate()])
        y = gate.hold(x)
        z = y.sum(dim=2)  # queued behind the gate too; its metadata is inferred at the call
        f = z.to_torch_async()
        self.assertEqual(y.shape, torch.Size([6, 4, 5]))
        self.assertEqual(y.size(), torch.Size([6, 4, 5]))
        self.assertEqual(y.size(1), 4)
        self.assertEqual(y.size(-1), 5)
        self.assertEqual(y.ndim, 3)
        self.assertEqual(y.dim(), 3)
        self.assertEqual(y.numel(), 120)
        self.assertEqual(y.dtype, torch.float32)
        self.assertEqual(y.element_size(), 4)
        self.assertTrue(y.is_contiguous())
        self.assertEqual(y.placements, [Shard(0), Replicate()])
        self.assertEqual(y.device_mesh, CPU2x2)
        self.assertEqual(z.shape, torch.Size([6, 4]))
        self.assertEqual(z.placements, [Shard(0), Replicate()])
        self.assertIs(z.graph, dtorch.Graph.default_graph())
        # Had any of these waited, it would have returned only once the watchdog opened the gate.
        self.assertFalse(f.is_ready())
        self.assertFalse(dog.fired)
        self.assertFalse(gate.is_open)
        gate.open()
        assert_tensor_equal(self, z, int_valued(6, 4, 5).sum(dim=2))


class TestToTorchCopies(unittest.TestCase):
    def test_mutating_the_result_leaves_the_tensor_alone(self):
        t = int_valued(4, 6)
        cases = [
            (CPU1, [Replicate()]),
            (CPU2, [Replicate()]),
            (CPU2, [Shard(0)]),
            (CPU2, [Shard(1)]),
            (CPU2, [Partial()]),
            (CPU2x2, [Shard(0), Replicate()]),
        ]
        for backend in ("torch", "ref"):
            graph = dtorch.default_graph if backend == "torch" else dtorch.Graph(backend="ref")
            for mesh, pl in cases:
                with self.subTest(backend=backend, mesh=mesh, placements=pl):
                    source = t.clone()
                    x = dtorch.from_torch(source, mesh, pl, graph=graph)
                    source.add_(1000)  # from_torch copied the values at the call
                    a = x.to_torch()
                    a.mul_(-7)
                    a[0, 0] = 12345.0
                    b = x.to_torch()
                    self.assertTrue(torch.equal(b, t), f"a later read saw the mutation: {b}")
                    self.assertFalse(b.data_ptr() == a.data_ptr())
                    # Work recorded after the mutation reads the old values too.
                    self.assertTrue(torch.equal((x * 3).to_torch(), t * 3))
                    self.assertTrue(torch.equal(x.to_torch_async().get(), t))
            if backend == "ref":
                graph.shutdown()


def _fmt(pl):
    def one(p):
        if p.is_shard():
            return f"Shard(dim={p.dim})"
        return "Partial()" if p.is_partial() else "Replicate()"

    return "[" + ", ".join(one(p) for p in pl) + "]"


_FIX_NAMES = {"Shard": lambda dim: Shard(dim), "Replicate": Replicate, "Partial": Partial}


class TestPlacementErrors(unittest.TestCase):
    """A placement error names the op, the placements given, the accepted ones and the fix, and the fix works."""

    def check(self, op_name, fn, inputs, accepted_part):
        with self.assertRaises(dtorch.PlacementError) as cm:
            fn(*inputs)
        self.assertIsInstance(cm.exception, ValueError)
        msg = str(cm.exception)
        self.assertTrue(msg.startswith(op_name + ":"), msg)
        for i, x in enumerate(inputs):
            self.assertIn(f"input {i} has {_fmt(x.placements)}", msg)
        self.assertIn("Accepted per mesh dim:", msg)
        self.assertIn(accepted_part, msg)
        # "Fix: call input N's .redistribute(placements=[...]) first."
        self.assertIn("Fix: call input ", msg)
        fix = msg.split("Fix: call input ", 1)[1]
        index = int(fix.split("'", 1)[0])
        placements_text = fix.split(".redistribute(placements=", 1)[1].split(") first", 1)[0]
        placements = eval(placements_text, {"__builtins__": {}}, _FIX_NAMES)  # noqa: S307 - our own message
        fixed = list(inputs)
        fixed[index] = inputs[index].redistribute(placements=placements)
        fn(*fixed)  # the suggested redistribute makes the call valid

    def test_messages(self):
        t = int_valued(4, 4)
        a = dtorch.from_torch(t, CPU2, [Shard(0)])
        p = dtorch.from_torch(t, CPU2, [Partial()])
        r = dtorch.from_torch(t, CPU2, [Replicate()])
        x4 = dtorch.from_torch(int_valued(1, 2, 4, 4), CPU2, [Shard(2)])
        self.check("matmul", lambda u, v: u @ v, [a, a], "(S(K),S(K))->P")
        self.check("mul", lambda u, v: u * v, [p, p], "(P,R)->P")
        self.check("div", lambda u, v: u / v, [r, p], "(P,R)->P")
        self.check("add", lambda u, v: u + v, [p, r], "(P,P)->P")
        self.check("exp", lambda u: u.exp(), [p], "R->R")
        self.check("softmax", lambda u: F.softmax(u, 0), [p], "R->R")
        self.check("sort", lambda u: u.sort(0), [p], "R->R")
        self.check("max_pool2d", lambda u: F.max_pool2d(u, 2), [x4], "S(d)->S(d)")
        # cat and stack name a Partial input next to a whole one (making that one Replicate fixes it).
        self.check("cat", lambda u, v: dtorch.cat([u, v]), [p, r], "(all P)->P")
        self.check("stack", lambda u, v: dtorch.stack([u, v]), [r, p], "(all P)->P")
        # linear's bias rule lists x, weight and bias, and names the bias.
        bp = dtorch.from_torch(int_valued(4), CPU2, [Partial()])
        bs = dtorch.from_torch(int_valued(4), CPU2, [Shard(0)])
        self.check("linear", F.linear, [r, a, bp], "(output, bias): (R,R)->R")
        self.check("linear", F.linear, [r, r, bs], "no S where the output is R")
        # On a 2-D mesh the message names the mesh dim and every input's full placement list.
        b = dtorch.from_torch(t, CPU2x2, [Replicate(), Partial()])
        c = dtorch.from_torch(t, CPU2x2, [Shard(0), Partial()])
        self.check("mul", lambda u, v: u * v, [b, c], "(R,P)->P")
        with self.assertRaises(dtorch.PlacementError) as cm:
            b * c
        self.assertIn("mesh dim 1", str(cm.exception))


    def test_view_and_setitem_messages_print_their_registry_rows(self):
        """reshape, squeeze and the setitem forms decide from rows: the error's accepted text is
        the op's registry row (or, for __setitem__, one of the forms that row lists)."""
        docs = {row[0]: row[2] for row in dtorch._C.op_docs()}

        def accepted(fn, inputs):
            with self.assertRaises(dtorch.PlacementError) as cm:
                fn(*inputs)
            return str(cm.exception).split("Accepted per mesh dim: ", 1)[1].split(". Fix: call input", 1)[0]

        def setitem(key):
            def fn(u, v):
                u[key] = v
                return u
            return fn

        def fresh(shape, pl, dtype=None):
            t = int_valued(*shape) if dtype is None else int_valued(*shape) > 7
            return dtorch.from_torch(t, CPU2, pl)

        # (5, 3) Shard(0): blocks of 9 and 6 elements, but chunking 15 gives 8 and 7.
        def flat(u):
            return u.reshape(15)

        self.assertEqual(accepted(flat, [fresh((5, 3), [Shard(0)])]), docs["reshape"])
        self.check("reshape", flat, [fresh((5, 3), [Shard(0)])], "no S(d) whose blocks")
        def sq(u):
            return u.squeeze(0)

        self.assertEqual(accepted(sq, [fresh((1, 4), [Shard(0)])]), docs["squeeze"])
        self.check("squeeze", sq, [fresh((1, 4), [Shard(0)])], "no S(removed d)")
        cases = [  # (fn, inputs, a part of the text)
            (setitem(slice(0, 2)), lambda: [fresh((4, 4), [Replicate()]), fresh((2, 4), [Shard(0)])],
             "(P,scalar)->P"),
            (setitem(slice(0, 2)), lambda: [fresh((4, 4), [Shard(0)]), fresh((2, 4), [Partial()])],
             "(S(d),S(e))->S(d) when each device holds"),
            (lambda u, m: setitem(m)(u, 1.0), lambda: [fresh((4, 4), [Replicate()]), fresh((4, 4), [Shard(0)], bool)],
             "no Partial mask"),
            (lambda u, i: setitem(i)(u, 1.0),
             lambda: [fresh((4, 4), [Shard(0)]), dtorch.from_torch(torch.tensor([0, 3]), CPU2, [Replicate()])],
             "no S(dim) of the target"),
        ]
        for fn, inputs, part in cases:
            with self.subTest(part=part):
                text = accepted(fn, inputs())
                self.assertIn(part, text)
                self.assertIn(text, docs["__setitem__"])
                self.check("setitem", fn, inputs(), part)


class TestGraphStats(unittest.TestCase):
    def test_counts_records_and_failed_calls_enqueue_nothing(self):
        g = dtorch.Graph()
        x = dtorch.ones(4, 4, device_mesh=CPU2, placements=[Shard(0)], graph=g)
        p = dtorch.ones(4, 4, device_mesh=CPU2, placements=[Partial()], graph=g)
        w = dtorch.ones(3, 3, device_mesh=CPU2, graph=g)
        before = graph_stats(g)["submitted"]
        y = x + 1
        self.assertEqual(graph_stats(g)["submitted"], before + 1)
        for bad in (lambda: x @ w, lambda: p * p, lambda: x.sum(dim=7), lambda: x + dtorch.ones(4, 4),
                    lambda: x.redistribute(placements=[Shard(5)]), lambda: x.reshape(5)):
            n = graph_stats(g)["submitted"]
            with self.assertRaises((ValueError, IndexError, RuntimeError, TypeError)):
                bad()
            self.assertEqual(graph_stats(g)["submitted"], n, "a failed call enqueued a record")
        assert_tensor_equal(self, y, torch.full((4, 4), 2.0))
        stats = graph_stats(g)
        self.assertEqual(stats["flow_waits"], 0)
        self.assertGreater(stats["in_flight_limit"], 0)
        g.shutdown()


if __name__ == "__main__":
    unittest.main()
