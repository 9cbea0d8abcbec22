"""The client's fast paths: the per-thread memo of planned binary calls, the tiny in-place kernels,
and dropped values travelling through the release stack (also across a shutdown and from many
threads). Each compares against eager torch on the same inputs."""

import gc
import threading
import unittest

import torch

import dtorch
from dtorch import DeviceMesh, Partial, Replicate, Shard
from dtorch.test.test_util import assert_tensor_equal

from helpers import DEV

ONE = DeviceMesh("cpu", [0])
TWO = DeviceMesh("cpu", [0, 1])


class TestBinaryMemo(unittest.TestCase):
    """A repeated (op, layouts, scalars) call reuses its plan; any change must plan afresh."""

    def test_changing_layouts_under_one_op(self):
        torch.manual_seed(0)
        cases = [
            (torch.randn(4, 3), torch.randn(4, 3), ONE, [Replicate()], [Replicate()]),
            (torch.randn(4, 3), torch.randn(3), ONE, [Replicate()], [Replicate()]),
            (torch.randn(5, 3), torch.randn(5, 3), TWO, [Shard(0)], [Shard(0)]),
            (torch.randn(5, 3), torch.randn(5, 3), TWO, [Shard(1)], [Shard(1)]),
            (torch.randn(5, 3), torch.randn(5, 3), TWO, [Shard(0)], [Replicate()]),
            (torch.randn(4, 3).double(), torch.randn(4, 3), ONE, [Replicate()], [Replicate()]),
            (torch.arange(12).reshape(4, 3), torch.randn(4, 3), ONE, [Replicate()], [Replicate()]),
        ]
        # Twice through, so every case meets a memo left by a different one and by itself.
        for _ in range(2):
            for x, y, mesh, px, py in cases:
                dx = dtorch.Tensor(x, device_mesh=mesh, placements=px)
                dy = dtorch.Tensor(y, device_mesh=mesh, placements=py)
                for _ in range(3):
                    r = dx + dy
                    self.assertEqual(r.shape, (x + y).shape)
                    self.assertEqual(r.dtype, (x + y).dtype)
                    assert_tensor_equal(self, r, x + y)

    def test_partial_placement_is_part_of_the_plan(self):
        x = torch.randn(4, 3)
        p = dtorch.Tensor(x, device_mesh=TWO, placements=[Replicate()]).redistribute(placements=[Partial()])
        r = dtorch.Tensor(x, device_mesh=TWO, placements=[Replicate()])
        for _ in range(2):
            self.assertEqual(list((p + p).placements), [Partial()])
            self.assertEqual(list((r + r).placements), [Replicate()])
        with self.assertRaises(dtorch.PlacementError):
            p + r  # (P, R) is not linear for add: rejected even right after accepted calls
        with self.assertRaises(dtorch.PlacementError):
            p + r

    def test_scalar_value_and_default_dtype_are_part_of_the_plan(self):
        i = torch.arange(6, dtype=torch.int32)
        d = dtorch.Tensor(i, device_mesh=ONE)
        for s in (2, 2.5, True, 3):
            for _ in range(2):
                assert_tensor_equal(self, d * s, i * s)
                self.assertEqual((d * s).dtype, (i * s).dtype)
        old = torch.get_default_dtype()
        try:
            for dt in (torch.float32, torch.float64, torch.float32):
                torch.set_default_dtype(dt)
                self.assertEqual((d + 1.5).dtype, (i + 1.5).dtype)
        finally:
            torch.set_default_dtype(old)

    def test_errors_are_not_remembered(self):
        a = dtorch.ones(4, 3)
        b = dtorch.ones(5, 3)
        for _ in range(2):
            with self.assertRaises(RuntimeError):
                a + b
        assert_tensor_equal(self, a + a, torch.ones(4, 3) * 2)

    def test_tensors_of_another_graph_are_rejected_after_a_plan(self):
        g = dtorch.Graph()
        a = dtorch.ones(3, device_mesh=ONE)
        b = dtorch.ones(3, device_mesh=ONE, graph=g)
        assert_tensor_equal(self, a + a, torch.full((3,), 2.0))
        with self.assertRaises(ValueError):
            a + b
        g.shutdown()


class TestTinyInPlace(unittest.TestCase):
    """`a = a op b` reuses a's buffer; for a few float elements a plain loop does the arithmetic."""

    def test_loop_matches_torch_bitwise(self):
        torch.manual_seed(1)
        for dtype in (torch.float32, torch.float64):
            for shape, yshape in (((1,), (1,)), ((7,), (7,)), ((3, 5), (3, 5)), ((3, 5), (1,)), ((64,), (64,))):
                x0 = torch.randn(shape, dtype=dtype)
                y = torch.randn(yshape, dtype=dtype) + 3.0
                a, b = x0.clone(), y
                da = dtorch.Tensor(x0, device_mesh=ONE)
                db = dtorch.Tensor(y, device_mesh=ONE)
                for step in range(40):
                    op = step % 4
                    if op == 0:
                        a, da = a + b, da + db
                    elif op == 1:
                        a, da = a * b, da * db
                    elif op == 2:
                        a, da = a - b, da - db
                    else:
                        a, da = a / b, da / db
                assert_tensor_equal(self, da, a)

    def test_shared_input_is_not_overwritten(self):
        x = dtorch.ones(3)
        keep = x
        y = x + x
        assert_tensor_equal(self, y, torch.full((3,), 2.0))
        assert_tensor_equal(self, keep, torch.ones(3))

    def test_sharded_loop(self):
        x0, y = torch.randn(9), torch.randn(9)
        a, da = x0.clone(), dtorch.Tensor(x0, device_mesh=TWO, placements=[Shard(0)])
        db = dtorch.Tensor(y, device_mesh=TWO, placements=[Shard(0)])
        for _ in range(25):
            a, da = a * 0.5 + y, da * 0.5 + db
        torch.testing.assert_close(da.to_torch(), a)


class TestReleases(unittest.TestCase):
    def test_memory_returns_after_drops(self):
        dtorch.synchronize()
        base = dtorch.memory_stats(ONE)[f"{DEV}:0"]["current"]
        xs = [dtorch.ones(1 << 16) * i for i in range(8)]
        dtorch.synchronize()
        self.assertGreaterEqual(dtorch.memory_stats(ONE)[f"{DEV}:0"]["current"], base + 8 * (1 << 18))
        del xs
        gc.collect()
        dtorch.synchronize()
        self.assertEqual(dtorch.memory_stats(ONE)[f"{DEV}:0"]["current"], base)

    def test_drops_after_shutdown(self):
        g = dtorch.Graph()
        xs = [dtorch.ones(4, graph=g) + i for i in range(50)]
        assert_tensor_equal(self, xs[7], torch.full((4,), 8.0))
        g.shutdown()
        del xs  # dropped after the close: freed on this thread, after the controller finished
        gc.collect()
        # The default graph is unaffected.
        assert_tensor_equal(self, dtorch.ones(2) + 1, torch.full((2,), 2.0))

    def test_many_client_threads(self):
        g = dtorch.Graph()
        results = {}

        def client(k):
            a = dtorch.full((5,), float(k), graph=g)
            b = dtorch.ones(5, graph=g)
            for _ in range(300):
                a = a + b
                tmp = a * 2  # made and dropped
                del tmp
            results[k] = a.to_torch()

        threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for k in range(6):
            self.assertTrue(torch.equal(results[k], torch.full((5,), float(k) + 300)))
        g.shutdown()


if __name__ == "__main__":
    unittest.main()


class TestResultObjects(unittest.TestCase):
    """Result objects are recycled: a recycled object must be indistinguishable from a new one."""

    def test_recycled_objects_are_fresh(self):
        import weakref

        a = dtorch.arange(4.0, device_mesh=TWO, placements=[Shard(0)])
        refs = []
        for i in range(200):
            x = a * float(i)
            if i % 7 == 0:
                refs.append(weakref.ref(x))
            self.assertEqual(list(x.placements), [Shard(0)])
            self.assertEqual(x.device_mesh, TWO)
            assert_tensor_equal(self, x, torch.arange(4.0) * float(i))
            del x
        gc.collect()
        self.assertTrue(all(r() is None for r in refs))
        y = dtorch.ones(3, device_mesh=ONE)  # another mesh: no stale cached mesh on a reused object
        self.assertEqual(y.device_mesh, ONE)
        self.assertTrue(gc.is_tracked(y))
