"""Blocked elementwise chains (the window's chain pass, src/core/controller/passes/chain.c) against eager torch.

Each chain runs with the controller held (held_controller), so its nodes land in one window and
the pass sees the whole chain; graph_stats()["nodes_fused"] says how many nodes ran inside chain
kernels. Results are compared bit for bit (assert_exact: torch.equal, NaN where torch has NaN, every
replica) with the same chain in eager torch. The torch backend's blocks are 32768 elements
(DTORCH_CHAIN_BLOCK), so the sizes below sit around block boundaries and the minimum size the pass
fuses (8192 elements)."""
import inspect
import os
import unittest

import torch

import dtorch
from dtorch import DeviceMesh, Replicate, Shard
from dtorch.test.probes import chains, graph_stats, held_controller
from ew_helpers import assert_exact, values

CPU1 = DeviceMesh("cpu", [0])
CPU2 = DeviceMesh("cpu", [0, 1])
BLOCK = 32768
SIZES = (8192, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 7, 100003)


def fused():
    return graph_stats()["nodes_fused"]


def run(tc, fn, inputs, mesh=CPU1, pl=(Replicate(),), steps=None, on=True):
    """fn on dtorch copies of ``inputs`` inside one held window and in eager torch: the values must
    be equal bit for bit, and ``steps`` nodes (when given) must have run inside chains."""
    d = [dtorch.from_torch(t, mesh, list(pl)) for t in inputs]
    dtorch.synchronize()
    before = fused()
    with chains(on):
        with held_controller():
            got = fn(*d)
        dtorch.synchronize()
    assert_exact(tc, got, fn(*inputs), f"{fn.__name__} on {mesh} {pl}")
    if steps is not None:
        tc.assertEqual(fused() - before, steps if on else 0, fn.__name__)
    return got


def floats(dtype, n, seed, positive=False):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(n, generator=g, dtype=torch.float64) * 3
    if positive:
        t = t.abs() + 0.5
    return t.to(dtype)


# Chains of every op kind the pass fuses: binary with a tensor, a scalar and a reflected scalar,
# unary, casts, clamp, where and masked_fill. Each is a run of nodes whose intermediates are
# dropped as the Python names are rebound.
def arith(x, y):
    x = x * y
    x = x + 1.5
    x = x - y
    x = 2 - x
    x = x / 3
    x = 3 / x
    x = x.maximum(y)
    x = x.abs()
    return x


def transcendental(x, y):
    x = x.exp()
    x = x.sin()
    x = x.abs()
    x = x.sqrt()
    x = x * 3
    x = x + 1
    x = x.tanh()
    x = x - 0.5
    return x


def mixed(x, y):
    x = x.clamp(-1.0, 2.0)
    x = x.where(y > 0, 0.25)
    x = x.masked_fill(y < -1, -3.0)
    x = x.neg()
    x = x.floor()
    x = x * y
    return x


def ints(x, y):
    x = x * 3
    x = x + y
    x = x // 2
    x = x.abs()
    x = x & 7
    x = x - y
    x = -x
    return x


def casts(x, y):
    x = x * 2
    x = x.float() if x.dtype != torch.float32 else x.double()
    x = x + 1
    x = x.to(y.dtype)
    x = x - y
    return x


class TestChains(unittest.TestCase):
    def test_every_op_kind_and_dtype(self):
        for fn, steps in ((arith, 8), (transcendental, 8), (mixed, 6), (casts, 5)):
            for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
                with self.subTest(fn=fn.__name__, dtype=dtype):
                    x, y = floats(dtype, 3 * BLOCK + 7, 1), floats(dtype, 3 * BLOCK + 7, 2)
                    run(self, fn, [x, y], steps=steps)
        for dtype in (torch.int32, torch.int64):
            with self.subTest(fn="ints", dtype=dtype):
                x, y = values((3 * BLOCK + 7,), dtype, 3), values((3 * BLOCK + 7,), dtype, 4)
                run(self, ints, [x, y], steps=7)

    def test_sizes_around_the_block(self):
        for n in SIZES:
            for fn in (transcendental, arith):
                with self.subTest(n=n, fn=fn.__name__):
                    run(self, fn, [floats(torch.float32, n, 5), floats(torch.float32, n, 6)], steps=8)
        # 2-D, an odd number of rows and columns.
        run(self, transcendental, [floats(torch.float32, 129 * 257, 7).view(129, 257)] * 2, steps=8)

    def test_below_the_minimum_size_is_not_fused(self):
        x = floats(torch.float32, 8191, 8)
        run(self, transcendental, [x, x], steps=0)

    def test_switched_off(self):
        x, y = floats(torch.float32, 100003, 9), floats(torch.float32, 100003, 10)
        run(self, transcendental, [x, y], steps=8, on=False)

    def test_position_dependent_calls_end_a_chain(self):
        def fn(x, y):
            x = x * 2
            x = x + 1
            x = x.sigmoid()  # not fused: its vector body and scalar tail round differently
            x = x * 3
            x = x - 1
            return x

        run(self, fn, [floats(torch.float32, 100003, 11)] * 2, steps=4)

    def test_strided_inputs_run_whole(self):
        # A chain whose input is a strided view (kernel results may be views) runs its steps on the
        # whole tensors, as the unfused kernels would: the result keeps the view's layout, so the
        # reduction after it sums in eager torch's order.
        x, y = floats(torch.float32, 300 * 401, 14), floats(torch.float32, 300 * 401, 15)

        def fn(x, y):
            a, b = x.reshape(300, 401).t(), y.reshape(401, 300)
            return transcendental(a, b).sum(dim=1)

        run(self, fn, [x, y], steps=8)

    def test_an_intermediate_that_is_read_breaks_the_chain(self):
        x, y = floats(torch.float32, 100003, 12), floats(torch.float32, 100003, 13)
        kept = {}

        def fn(x, y):
            a = x.exp()
            b = a * y
            kept["b"] = b  # still alive: the chain cannot run through it
            c = b + 1
            c = c.sin()
            c = c * 2
            return c

        got = run(self, fn, [x, y], steps=5)  # exp,mul | add,sin,mul
        assert_exact(self, kept["b"], x.exp() * y)
        self.assertTrue(torch.equal(got.to_torch(), ((x.exp() * y + 1).sin() * 2)))
        # A value read twice by one step (x * x) is still the only reader's.
        run(self, lambda x, y: ((x + 1) * (x + 1)).exp() * (y * y), [x, y])

    def test_two_devices(self):
        x, y = floats(torch.float32, 2 * (3 * BLOCK + 7), 14), floats(torch.float32, 2 * (3 * BLOCK + 7), 15)
        for pl in ([Shard(0)], [Replicate()]):
            with self.subTest(pl=pl):
                run(self, transcendental, [x, y], CPU2, pl, steps=8)
                run(self, arith, [x, y], CPU2, pl, steps=8)
        x2 = floats(torch.float32, 301 * 333, 16).view(301, 333)
        run(self, transcendental, [x2, x2], CPU2, [Shard(1)], steps=8)

    @unittest.skipIf(torch.get_num_threads() < 2 or not os.path.isdir("/proc/self/task"), "one intra-op thread")
    def test_blocks_run_in_one_parallel_region(self):
        """The blocks are handed out to torch's intra-op threads inside one parallel region, each block's
        calls run inline. Before, the chain's at::parallel_for was compiled without OpenMP and ran every
        block on the worker alone, each step's ATen call forking and joining the threads: a thread sleep
        per step per block, thousands for this chain. Values are the same either way (run checks)."""
        n = 256 * BLOCK

        def switches():
            out = {}
            for t in os.listdir("/proc/self/task"):
                try:
                    with open(f"/proc/self/task/{t}/status") as f:
                        out[t] = sum(int(ln.split()[1]) for ln in f if ln.startswith("voluntary_ctxt_switches"))
                except OSError:
                    pass
            return out

        x, y = floats(torch.float32, n, 18), floats(torch.float32, n, 19)
        run(self, transcendental, [x, y], steps=8)  # warm: buffers, thread teams
        d = [dtorch.from_torch(t) for t in (x, y)]
        dtorch.synchronize()
        before, s0 = fused(), switches()
        with chains(True):
            with held_controller():
                got = transcendental(*d)
            dtorch.synchronize()
        s1 = switches()
        self.assertEqual(fused() - before, 8)
        slept = sum(s1[t] - s0[t] for t in s1 if t in s0)
        self.assertLess(slept, n // BLOCK, f"{slept} context switches for {n // BLOCK} blocks")
        assert_exact(self, got, transcendental(x, y), "transcendental, 256 blocks")

    def test_kernel_error_names_the_step_and_line(self):
        x = dtorch.from_torch(values((100003,), torch.int64, 17))
        zeros = dtorch.from_torch(torch.zeros(100003, dtype=torch.int64))
        dtorch.synchronize()
        before = fused()
        with chains(True):
            with held_controller():
                y = x * 2
                line = inspect.currentframe().f_lineno + 1
                y = y // zeros
                y = y + 1
            with self.assertRaises(dtorch.KernelError) as cm:
                y.to_torch()
        self.assertEqual(fused() - before, 3)
        msg = str(cm.exception)
        self.assertIn("floor_divide failed on cpu:0", msg)
        self.assertIn(f"test_chain.py:{line}", msg)
        with self.assertRaises(RuntimeError) as eager:
            torch.ones(3, dtype=torch.int64) // torch.zeros(3, dtype=torch.int64)
        self.assertIn(str(eager.exception).splitlines()[0], msg)


if __name__ == "__main__":
    unittest.main()
