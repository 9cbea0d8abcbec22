"""CUDA graphs of repeated run slots (``dt_graph_set_cuda_graph``, ``DTORCH_CUDA_GRAPH=1``;
src/core/worker/graph_run.c), on the CPU through the backend's test emulation
(``DTORCH_GRAPH_EMULATE=1``, src/backend/torch/torch_graph.cpp): "capture" records a run slot's
kernels with their static tensors, "launch" runs them again and copies each result into the
captured result's storage in place, so a launch overwrites what the previous one handed out,
exactly where a CUDA graph would. Under DTORCH_TEST_DEVICE=cuda (tools/gpu_check.sh's cuda_graph
step) the meshes are cuda ones and the captures real CUDA graphs.

Checked: a decode-like loop on 1, 2 and 3 devices (uneven shards), float32 and bfloat16, bitwise
equal with graphs on and off and to eager torch, every device's piece, with slots captured and
launched; a changed shape, dtype or scalar in the middle of the loop falls back (and is captured
anew); results kept by the user across later launches stay right (the liveness rule); slots with a
launched slot runs its kernels out of place (an intermediate kept by the user is never written by a
later kernel of the slot); a kernel failing in a launched slot names its op and line at the read, as with graphs off.
"""

import inspect
import os
import unittest

os.environ["DTORCH_GRAPH_EMULATE"] = "1"  # read at the first capture, in this process

import torch  # noqa: E402

import dtorch  # noqa: E402
from dtorch import Replicate, Shard  # noqa: E402
from dtorch.test.probes import bcast, bgroup, cuda_graph, graph_stats, held_controller, replay, step  # noqa: E402
from dtorch.test.test_util import local_values  # noqa: E402

from helpers import CPU1, CPU2, CPU3, bits, cpu_only, int_valued, settle  # noqa: E402

KEYS = ("graph_captured", "graph_launched", "graph_eager", "kernels_in_place")


def counted(fn, *args):
    """fn(*args) with graphs on: its result and the counters' growth."""
    with replay(False), bcast(True), bgroup(True), step(True), cuda_graph(True):
        settle()
        s0 = graph_stats()
        out = fn(*args)
        settle()
        s1 = graph_stats()
    return out, {k: s1[k] - s0[k] for k in KEYS}


def both(fn, *args):
    """fn(*args) with graphs off, then on: (off's result, on's result, on's counters)."""
    with replay(False), bcast(True), bgroup(True), step(True), cuda_graph(False):
        settle()
        s0 = graph_stats()
        off = fn(*args)
        settle()
        s1 = graph_stats()
    on, st = counted(fn, *args)
    st["in_place_off"] = s1["kernels_in_place"] - s0["kernels_in_place"]
    return off, on, st


def decode_step(x, w, b, scale=0.5):
    """A decode-like step on integer-valued floats (exact in any order): matmul, scale, floor,
    clamp, bias, residual."""
    h = ((x @ w) * scale).floor().clamp(-8.0, 8.0)
    return (h + b) * 0.5 + x * 0.25


def small_step_tensors():
    """decode_step's weight, bias and input (4 rows of 8) for the loops on two devices."""
    return int_valued(8, 8, low=-2, high=3, seed=1), int_valued(8, seed=2), int_valued(4, 8, seed=3)


def on_two_devices(tw, tb, tx):
    """small_step_tensors' weight and bias replicated on CPU2, the input sharded by rows."""
    return (dtorch.from_torch(tw, CPU2, [Replicate()]), dtorch.from_torch(tb, CPU2, [Replicate()]),
            dtorch.from_torch(tx, CPU2, [Shard(0)]))


def pieces(y):
    return [bits(v) for v in local_values(y)]


class TestDecodeLoop(unittest.TestCase):
    def loop(self, mesh, pl, dtype, n=12):
        tw = int_valued(16, 16, dtype=dtype, low=-2, high=3, seed=1)
        tb = int_valued(16, dtype=dtype, seed=2)
        tx = int_valued(7, 16, dtype=dtype, seed=3)  # uneven over 2 and 3 devices

        def run():
            w = dtorch.from_torch(tw, mesh, [Replicate()])
            b = dtorch.from_torch(tb, mesh, [Replicate()])
            x = dtorch.from_torch(tx, mesh, [pl])
            outs = []
            for _ in range(n):
                with held_controller():  # a step is one controller round: its run is cut the same way
                    x = decode_step(x, w, b)
                outs.append(pieces(x))  # each step read (a run per step), the value then dropped
            return outs

        off, on, st = both(run)
        want = tx
        for k in range(n):
            want = decode_step(want, tw, tb)
            for d, (p, q) in enumerate(zip(off[k], on[k])):
                self.assertTrue(torch.equal(p, q), f"step {k}, device {d}")
            if pl.is_shard():
                self.assertTrue(torch.equal(torch.cat(on[k]), bits(want)), f"step {k}")
            else:
                for d, q in enumerate(on[k]):
                    self.assertTrue(torch.equal(q, bits(want)), f"step {k}, device {d}")
        return st

    def test_meshes_and_dtypes(self):
        for mesh in (CPU1, CPU2, CPU3):
            for pl in (Replicate(), Shard(0)):
                for dtype in (torch.float32, torch.bfloat16):
                    with self.subTest(mesh=mesh, placement=pl, dtype=dtype):
                        st = self.loop(mesh, pl, dtype)
                        ndev = mesh.size()
                        # Repeated segments are captured and launched on every device (how many
                        # depends on where the controller's rounds cut the runs).
                        self.assertGreaterEqual(st["graph_captured"], ndev, st)
                        self.assertGreaterEqual(st["graph_launched"], ndev, st)

    def test_float_one_device_bitwise_to_torch(self):
        # Non-integer values on one device: bitwise to eager torch (tanh, softmax, matmul).
        g = torch.Generator().manual_seed(0)
        tw = torch.randn(32, 32, generator=g)
        tx = torch.randn(4, 32, generator=g)

        def f(x, w):
            return torch.softmax(torch.tanh(x @ w) * 2.0, dim=-1) + x

        def run():
            w = dtorch.from_torch(tw, CPU1, [Replicate()])
            x = dtorch.from_torch(tx, CPU1, [Replicate()])
            outs = []
            for _ in range(8):
                with held_controller():
                    x = f(x, w)
                outs.append(x.to_torch())
            return outs

        off, on, st = both(run)
        want = tx
        for k in range(8):
            want = f(want, tw)
            self.assertTrue(torch.equal(on[k], want), k)
            self.assertTrue(torch.equal(off[k], want), k)
        self.assertGreater(st["graph_launched"], 0)


class TestFallback(unittest.TestCase):
    def test_changed_shape_dtype_scalar_mid_loop(self):
        tw, tb, tx = small_step_tensors()
        # Steps 0-3 as before, 4-7 another scalar, 8-11 another batch (shape), 12-15 bfloat16.
        plan = [(0.5, 4, torch.float32)] * 4 + [(0.25, 4, torch.float32)] * 4
        plan += [(0.25, 3, torch.float32)] * 4 + [(0.25, 3, torch.bfloat16)] * 4

        def run():
            outs = []
            x = None
            for scale, rows, dt in plan:
                w = dtorch.from_torch(tw.to(dt), CPU2, [Replicate()])
                b = dtorch.from_torch(tb.to(dt), CPU2, [Replicate()])
                if x is None or x.shape[0] != rows or x.dtype != dt:
                    x = dtorch.from_torch(tx[:rows].to(dt), CPU2, [Shard(0)])
                with held_controller():
                    x = decode_step(x, w, b, scale)
                outs.append(x.to_torch())
                # Each phase has one sighting that can launch (its fourth step, which needs the
                # second step's outputs freed). Those are freed when the third step's run is done
                # on both devices, which the read above does not wait for: a device's worker that
                # is still finishing its slot when the other starts the next step keeps them held,
                # and that step captures anew. A CI run on a busy machine lost every phase's one
                # chance so (graph_launched 0); settle waits for both workers.
                settle()
            return outs

        off, on, st = both(run)
        want = None
        for k, (scale, rows, dt) in enumerate(plan):
            if want is None or want.shape[0] != rows or want.dtype != dt:
                want = tx[:rows].to(dt)
            want = decode_step(want, tw.to(dt), tb.to(dt), scale)
            self.assertTrue(torch.equal(on[k], want), k)
            self.assertTrue(torch.equal(off[k], want), k)
        # Each phase's kernels launch once they repeat (what ran eagerly first depends on what this
        # process's streams saw before: they remember kernels and keys across tests).
        self.assertGreater(st["graph_launched"], 0, st)


class TestLiveness(unittest.TestCase):
    def test_results_kept_across_launches_stay_right(self):
        # Every third step's result is kept (unread) while later steps launch the same graphs: a
        # launch must never overwrite a value the user still holds. Read at the end.
        tw, tb, tx = small_step_tensors()

        def run():
            w, b, x = on_two_devices(tw, tb, tx)
            kept = []
            for k in range(24):
                with held_controller():
                    x = decode_step(x, w, b)
                if k % 3 == 0:
                    kept.append(x)
                else:
                    x.to_torch()  # a read ends the step's run
            return [y.to_torch() for y in kept]

        on, st = counted(run)
        want, ref = tx, []
        for k in range(24):
            want = decode_step(want, tw, tb)
            if k % 3 == 0:
                ref.append(want)
        for i, (got, w) in enumerate(zip(on, ref)):
            self.assertTrue(torch.equal(got, w), f"kept result {i}")
        self.assertGreater(st["graph_launched"], 0, st)

    def test_every_result_kept(self):
        # Nothing is released: both instances of a key stay busy, so sightings capture anew while
        # the key's capture budget lasts, else run eagerly; every value stays right.
        tw, tb, tx = small_step_tensors()

        def run():
            w, b, x = on_two_devices(tw, tb, tx)
            kept = []
            for _ in range(20):
                x = decode_step(x, w, b)
                kept.append(x)
                dtorch.synchronize()  # each step its own run
            return [y.to_torch() for y in kept]

        on, st = counted(run)
        want = tx
        for k in range(20):
            want = decode_step(want, tw, tb)
            self.assertTrue(torch.equal(on[k], want), k)
        self.assertGreater(st["graph_captured"], 0, st)
        self.assertGreater(st["graph_eager"], 0, st)

    def test_intermediate_view_of_a_static_input_kept(self):
        # A slot whose first kernel is a view of an outside input (a reshape): the kept view names
        # the graph's static input, which the next launch would refill.
        tx = int_valued(4, 6, seed=3)

        def run():
            x = dtorch.from_torch(tx, CPU1, [Replicate()])
            kept = []
            for k in range(12):
                v = x.reshape(6, 4)
                y = (v * 2.0).reshape(4, 6) + 1.0
                kept.append(v)
                x = y
                x.to_torch()
            return [v.to_torch() for v in kept]

        on, st = counted(run)
        want = tx
        for k in range(12):
            self.assertTrue(torch.equal(on[k], want.reshape(6, 4)), k)
            want = (want.reshape(6, 4) * 2.0).reshape(4, 6) + 1.0


class TestInPlace(unittest.TestCase):
    def test_launched_slots_run_out_of_place(self):
        # Dropped intermediates that graphs off writes in place into their input: a launched slot
        # computes them out of place (the same values; only the eager sightings write in place).
        t = int_valued(64, 64)

        def run():
            x = dtorch.from_torch(t, CPU3, [Shard(0)])
            outs = []
            for _ in range(6):
                settle()  # the step before's result freed: its instance is free to launch
                with held_controller():
                    y = (((x + 1.0) * 2.0 - 3.0) * 0.5).abs()
                outs.append(y.to_torch())
            return outs

        off, on, st = both(run)
        want = (((t + 1.0) * 2.0 - 3.0) * 0.5).abs()
        for k in range(6):
            self.assertTrue(torch.equal(on[k], want), k)
            self.assertTrue(torch.equal(off[k], want), k)
        self.assertGreater(st["in_place_off"], 0)
        self.assertGreater(st["graph_launched"], 0, st)
        self.assertLess(st["kernels_in_place"], st["in_place_off"], st)

    def test_kept_intermediate_is_not_written_by_a_later_kernel(self):
        # h is kept while the slot's later kernels (marked reusable) read it: no capture may write
        # into h's static output in place.
        t = int_valued(8, 8)

        def run():
            x = dtorch.from_torch(t, CPU2, [Shard(0)])
            kept = []
            for _ in range(8):
                with held_controller():
                    h = x + 1.0
                    y = ((h * 2.0 - 3.0) * 0.5).abs()
                kept.append((h.to_torch(), y.to_torch()))
            return kept

        on, st = counted(run)
        for k, (h, y) in enumerate(on):
            self.assertTrue(torch.equal(h, t + 1.0), k)
            self.assertTrue(torch.equal(y, (((t + 1.0) * 2.0 - 3.0) * 0.5).abs()), k)
        self.assertGreater(st["graph_launched"], 0, st)


class TestErrors(unittest.TestCase):
    @cpu_only("an integer division by zero is a kernel error on the host only")
    def test_kernel_error_in_a_launched_slot_names_op_and_line(self):
        # z's values change each step (same layout): the launched slot's floor division meets a
        # zero at step `bad`; the read names that kernel and its line, as with graphs off (the
        # zero at each of the later steps in turn).
        tx = torch.tensor([40, 60, 80, 100, 120, 140])

        def run(bad):
            x = dtorch.from_torch(tx, CPU3, [Shard(0)])
            # Every step's z made first and kept: each at an address of its own, so the slot
            # copies it into its static input (never taken by address, where the allocator's
            # reuse of a freed z's address would decide whether an instance matches).
            zs = [dtorch.from_torch(torch.tensor([2, 3, 1, 2, 0 if k == bad else 5, 7]), CPU3, [Shard(0)])
                  for k in range(bad + 2)]
            for k, z in enumerate(zs):
                settle()  # the step before last's values freed: an instance is free to launch
                with held_controller():
                    u = x * 2
                    line = inspect.currentframe().f_lineno + 1
                    q = u // z
                    y = (q - u) % 97
                try:
                    y.to_torch()
                except dtorch.KernelError as e:
                    return k, str(e), line
                x = y
            return None

        launched = 0
        for bad in (4, 5, 6, 7):
            with self.subTest(bad=bad):
                off, on, st = both(run, bad)
                self.assertIsNotNone(off)
                self.assertIsNotNone(on, "no kernel error surfaced with graphs on")
                (ko, msg_off, line), (kon, msg_on, _) = off, on
                self.assertEqual((ko, kon), (bad, bad))
                self.assertEqual(msg_on, msg_off)
                self.assertIn("floor_divide failed on cpu:2", msg_on)
                self.assertIn(f"{os.path.basename(__file__)}:{line}", msg_on)
                launched += st["graph_launched"]
        self.assertGreater(launched, 0)


if __name__ == "__main__":
    unittest.main()
