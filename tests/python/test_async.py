"""The asynchronous pipeline: futures, asyncio, synchronize, memory accounting and buffer reuse.

Pending values are held with a test gate (``dtorch.test.probes.Gate``), never by a computation that
is merely slow, so no outcome depends on the machine's speed.
"""

import asyncio
import gc
import os
import threading
import unittest

import torch

import dtorch
from dtorch import DeviceMesh, Replicate, Shard
from dtorch.test.probes import Gate, cached_bytes
from dtorch.test.test_util import assert_tensor_equal

from helpers import DEV

CPU2 = DeviceMesh("cpu", [0, 1])


def held_gate(test):
    """A closed gate that the test's cleanup opens, and a watchdog that opens it after 30 s.

    The watchdog only turns a broken promise (a wait that ignores the gate) into a failure instead
    of a hang: ``dog.is_set()`` says whether it had to fire.
    """
    gate = Gate()
    dog = threading.Event()

    def fire():
        dog.set()
        gate.open()

    timer = threading.Timer(30.0, fire)
    timer.daemon = True
    timer.start()
    test.addCleanup(timer.cancel)
    test.addCleanup(gate.open)
    return gate, dog


class TestFutures(unittest.TestCase):
    def test_get_wait_is_ready(self):
        x = dtorch.arange(6) * 2
        f = x.to_torch_async()
        self.assertTrue(torch.equal(f.get(), torch.arange(6) * 2))
        self.assertTrue(f.is_ready())
        self.assertTrue(f.wait_for(0))
        self.assertTrue(torch.equal(f.wait(), torch.arange(6) * 2))

    def test_wait_for_times_out_then_completes(self):
        gate, dog = held_gate(self)
        f = (gate.hold(dtorch.arange(6)) * 2).to_torch_async()
        self.assertIs(f.wait_for(0), False)  # held by the gate: certainly pending
        self.assertIs(f.wait_for(10), False)
        self.assertFalse(f.is_ready())
        self.assertFalse(dog.is_set())
        gate.open()
        self.assertTrue(torch.equal(f.get(), torch.arange(6) * 2))
        self.assertIs(f.wait_for(0), True)
        self.assertTrue(f.is_ready())

    def test_await_keeps_the_loop_running(self):
        gate, dog = held_gate(self)

        async def main():
            ticks = 0

            async def ticker():
                # Runs while the read is pending, then lets the value through.
                nonlocal ticks
                for _ in range(50):
                    ticks += 1
                    await asyncio.sleep(0)
                gate.open()

            value_future = (gate.hold(dtorch.arange(6)) + 1).to_torch_async()
            sync_future = dtorch.default_graph.sync_future()  # queued behind the gate too
            t = asyncio.ensure_future(ticker())
            value = await value_future
            ready_sync = await sync_future
            await t
            return value, ticks, ready_sync

        value, ticks, ready_sync = asyncio.run(main())
        self.assertFalse(dog.is_set(), "the value completed only when the watchdog opened the gate")
        self.assertTrue(torch.equal(value, torch.arange(6) + 1))
        self.assertIsNone(ready_sync)
        self.assertEqual(ticks, 50, "the event loop did not run while the future was pending")

    def test_await_many(self):
        async def main():
            xs = [dtorch.full((3,), float(i)) * 2 for i in range(20)]
            return await asyncio.gather(*(x.to_torch_async() for x in xs))

        values = asyncio.run(main())
        for i, v in enumerate(values):
            self.assertTrue(torch.equal(v, torch.full((3,), float(i)) * 2))

    def test_synchronize(self):
        g = dtorch.Graph()
        x = dtorch.ones(4, graph=g) + 1
        dtorch.synchronize()
        self.assertTrue(x.to_torch_async().wait_for(10000))
        g.shutdown()


class TestKernelErrors(unittest.TestCase):
    def test_out_of_range_embedding_names_op_device_and_line(self):
        import inspect
        import os

        import dtorch.nn.functional as F

        mesh = CPU2
        weight = dtorch.from_torch(torch.randn(10, 4), mesh, [Shard(0)])  # vocab-parallel
        other = dtorch.from_torch(torch.arange(6.0), mesh, [Shard(0)])
        idx = dtorch.from_torch(torch.tensor([[1, 12], [3, 4]]), mesh, [Replicate()])
        line = inspect.currentframe().f_lineno + 1
        out = F.embedding(idx, weight)  # index 12 is out of range: the kernel fails
        doubled = out * 2  # depends on the failed value
        with self.assertRaises(dtorch.KernelError) as cm:
            doubled.to_torch()
        message = str(cm.exception)
        self.assertIn("embedding", message)
        self.assertIn(f"{DEV}:", message)
        self.assertIn(f"{os.path.basename(__file__)}:{line}", message)
        self.assertIsInstance(cm.exception, RuntimeError)
        # Unaffected work continues, and the runtime stays usable.
        assert_tensor_equal(self, (other + 1).redistribute(placements=[Replicate()]), torch.arange(6.0) + 1)
        good = dtorch.from_torch(torch.tensor([[1, 9]]), mesh, [Replicate()])
        ref = torch.nn.functional.embedding(torch.tensor([[1, 9]]), weight.to_torch())
        assert_tensor_equal(self, F.embedding(good, weight).redistribute(placements=[Replicate()]), ref)

    def test_item_in_python_control_flow(self):
        x = dtorch.from_torch(torch.tensor([3.0, -1.0]), CPU2, [Shard(0)])
        total = x.sum()
        branch = "pos" if total.item() > 0 else "neg"
        self.assertEqual(branch, "pos")


class TestMemory(unittest.TestCase):
    MESH = DeviceMesh("cpu", [40, 41])  # devices no other test uses: exact accounting

    def stats(self):
        s = dtorch.memory_stats(self.MESH)
        return s[f"{DEV}:40"], s[f"{DEV}:41"]

    def test_current_goes_down_after_release(self):
        dtorch.synchronize()
        base0, base1 = self.stats()
        x = dtorch.ones(1024, 256, device_mesh=self.MESH, placements=[Shard(0)])  # 512 KiB per device
        dtorch.synchronize()
        a0, a1 = self.stats()
        self.assertEqual(a0["current"] - base0["current"], 512 * 256 * 4)
        self.assertEqual(a1["current"] - base1["current"], 512 * 256 * 4)
        del x
        gc.collect()
        dtorch.synchronize()
        b0, b1 = self.stats()
        self.assertEqual(b0["current"], base0["current"])
        self.assertEqual(b1["current"], base1["current"])
        self.assertGreaterEqual(b0["peak"], a0["current"])

    def test_chain_reuses_one_buffer(self):
        """Intermediates of a chain never coexist: the peak stays at two buffers (input + one)."""
        mesh = DeviceMesh("cpu", [42])
        n = 1 << 20  # 4 MiB float32

        def func(x):
            y = x * 2
            y = y + 1
            y = y - 3
            y = y * 0.5
            y = -y
            y = y / 4
            y = y + x
            return y * 3

        t = torch.randn(n)
        x = dtorch.from_torch(t, mesh)
        dtorch.synchronize()
        dtorch.reset_peak_memory_stats()
        out = func(x)
        value = out.to_torch()
        peak = dtorch.memory_stats(mesh)[f"{DEV}:42"]["peak"]
        self.assertTrue(torch.equal(value, func(t)))
        self.assertLessEqual(peak, 2 * n * 4, f"peak {peak} bytes: intermediates coexisted")

    def test_inplace_reuse_is_exact(self):
        t = torch.randn(1000, dtype=torch.float64)
        for mesh, pl in [(DeviceMesh("cpu", [0]), [Replicate()]), (CPU2, [Shard(0)])]:
            y = dtorch.from_torch(t, mesh, pl)
            ref = t
            for k in range(10):
                y = (y + k) * 1.5 - y / 3
                ref = (ref + k) * 1.5 - ref / 3
                y = -y
                ref = -ref
            assert_tensor_equal(self, y.redistribute(placements=[Replicate()]), ref)

    @unittest.skipIf(os.environ.get("DTORCH_CPU_CACHE_MB", "").strip() == "0", "the CPU cache is disabled")
    def test_empty_cache(self):
        """Freed buffers of 1 MiB and more are cached; empty_cache returns all of them."""
        mesh = DeviceMesh("cpu", [43])
        for empty in (dtorch.empty_cache, dtorch.default_graph.empty_cache):
            with self.subTest(empty=empty):
                x = dtorch.ones(1024, 1024, device_mesh=mesh) * 2  # 4 MiB made on a worker
                self.assertEqual(x.to_torch()[0, 0].item(), 2.0)
                del x
                gc.collect()
                dtorch.synchronize()
                gc.disable()  # no other value may be freed between the reads
                try:
                    before = cached_bytes()
                    empty()
                    after = cached_bytes()
                finally:
                    gc.enable()
                self.assertGreaterEqual(before, 4 << 20, "the freed 4 MiB buffer was not cached")
                self.assertEqual(after, 0, f"empty_cache kept {after} of {before} cached bytes")


if __name__ == "__main__":
    unittest.main()


class TestLoweringErrors(unittest.TestCase):
    """A host-side failure while the controller lowers an op (dt_debug_fail_allocs) poisons the op's
    value: the next read raises KernelError naming the op, "controller" and the user's line."""

    def test_failed_lowering_raises_at_read_with_op_and_line(self):
        import inspect

        from dtorch.test.probes import bcast, fail_allocs, fail_allocs_pending

        x = dtorch.from_torch(torch.arange(8.0), CPU2, [Shard(0)])
        x.to_torch()  # lowered and read before arming: only the sum below can fail
        # Per-device records: a reduction lowered as one shared record takes its output group from
        # the pool and allocates nothing while lowering, so nothing there could fail.
        with bcast(False):
            try:
                fail_allocs(0)
                line = inspect.currentframe().f_lineno + 1
                total = x.sum()  # its lowering's first allocation fails
                doubled = total * 2  # inherits the failure
                with self.assertRaises(dtorch.KernelError) as cm:
                    doubled.to_torch()
                self.assertFalse(fail_allocs_pending())
            finally:
                fail_allocs(-1)
        message = str(cm.exception)
        self.assertRegex(message, r"\b(sum|reduce) failed on the controller")
        self.assertIn("out of memory", message)
        self.assertIn(f"{os.path.basename(__file__)}:{line}", message)
        # The runtime keeps working, on the same input.
        assert_tensor_equal(self, x.sum() * 2, torch.tensor(56.0))
