"""Factories, distribution round trips, randomness, metadata and value reads, against torch."""

import contextlib
import io
import re
import unittest

import numpy as np
import torch

import dtorch
from dtorch import DeviceMesh, Partial, Replicate, Shard

# Operators this module tests against eager PyTorch (tests/python/test_registry.py).
TESTED_OPS = {'tensor', 'from_torch', 'empty', 'zeros', 'ones', 'full', 'rand', 'randn', 'arange', 'randint',
              'randint_like', 'zeros_like', 'ones_like', 'full_like', 'empty_like', 'rand_like', 'randn_like'}

from helpers import CPU1, CPU2, CPU3, CPU2x2, cpu_only, genuine_partial, placements_1d, placements_2d
from helpers import assert_equal_everywhere as assert_tensor_equal  # and every replica bitwise

SHAPES = [(4, 3), (5, 7), (1, 3), (7,), (2, 2), (3, 1, 2)]
ONE_DEVICE = [CPU1, DeviceMesh("cpu", [5])]


@contextlib.contextmanager
def default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


class TestFactories(unittest.TestCase):
    def test_zeros_ones_full(self):
        for mesh in ONE_DEVICE:
            for dtype in (None, torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                          torch.uint8, torch.int8, torch.int16, torch.bool):
                kw = {} if dtype is None else {"dtype": dtype}
                assert_tensor_equal(self, dtorch.zeros(2, 3, device_mesh=mesh, **kw), torch.zeros(2, 3, **kw))
                assert_tensor_equal(self, dtorch.ones((2, 3), device_mesh=mesh, **kw), torch.ones((2, 3), **kw))
                assert_tensor_equal(self, dtorch.full([3], 1, device_mesh=mesh, **kw), torch.full([3], 1, **kw))
        assert_tensor_equal(self, dtorch.full((2, 2), 7), torch.full((2, 2), 7))  # int64 inferred
        assert_tensor_equal(self, dtorch.full((2, 2), 2.5), torch.full((2, 2), 2.5))
        assert_tensor_equal(self, dtorch.full((2, 2), True), torch.full((2, 2), True))
        assert_tensor_equal(self, dtorch.full((3,), -1.25, dtype=torch.float64), torch.full((3,), -1.25, dtype=torch.float64))
        assert_tensor_equal(self, dtorch.full((3,), 2.7, dtype=torch.int64), torch.full((3,), 2.7, dtype=torch.int64))
        assert_tensor_equal(self, dtorch.full(4, 3), torch.full((4,), 3))

    def test_size_forms(self):
        expected = torch.zeros(2, 3)
        for x in (dtorch.zeros(2, 3), dtorch.zeros((2, 3)), dtorch.zeros([2, 3]), dtorch.zeros(torch.Size([2, 3]))):
            assert_tensor_equal(self, x, expected)
        assert_tensor_equal(self, dtorch.ones(()), torch.ones(()))
        assert_tensor_equal(self, dtorch.ones(), torch.ones(()))
        assert_tensor_equal(self, dtorch.zeros(0, 3), torch.zeros(0, 3))
        assert_tensor_equal(self, dtorch.ones(np.int64(3)), torch.ones(3))
        with self.assertRaises(RuntimeError):  # as torch
            dtorch.zeros(2, -1)
        with self.assertRaises(TypeError):
            dtorch.zeros(2.0)

    def test_empty(self):
        for dtype in (torch.float32, torch.int64, torch.float16, torch.bool):
            x = dtorch.empty(3, 4, dtype=dtype)
            self.assertEqual(x.shape, torch.Size([3, 4]))
            self.assertEqual(x.dtype, dtype)
            t = x.to_torch()
            self.assertEqual((t.shape, t.dtype), (torch.Size([3, 4]), dtype))
        x = dtorch.empty(5, 7, device_mesh=CPU3, placements=[Shard(1)])
        self.assertEqual(x.to_torch().shape, torch.Size([5, 7]))

    def test_arange(self):
        cases = [((5,), {}), ((2, 9), {}), ((1, 10, 3), {}), ((10, 1, -3), {}), ((0, 1, 0.25), {}),
                 ((0.5, 4.0), {}), ((-3, 3, 0.7), {}), ((0, 5), {"dtype": torch.float64}),
                 ((0, 5), {"dtype": torch.int32}), ((0, 1, 0.1), {"dtype": torch.float16}), ((3, 3), {}),
                 ((4.0,), {})]
        for args, kw in cases:
            with self.subTest(args=args, kw=kw):
                assert_tensor_equal(self, dtorch.arange(*args, **kw), torch.arange(*args, **kw))
        assert_tensor_equal(self, dtorch.arange(start=2, end=8, step=2), torch.arange(start=2, end=8, step=2))
        for mesh, p in ((CPU2, Shard(0)), (CPU3, Shard(0)), (CPU3, Replicate()), (CPU2, Partial())):
            with self.subTest(mesh=mesh, p=p):
                x = dtorch.arange(0, 7, 1, device_mesh=mesh, placements=[p])
                self.assertEqual(x.placements, [p])
                assert_tensor_equal(self, x, torch.arange(0, 7, 1))
        with self.assertRaises(RuntimeError):  # as torch
            dtorch.arange(0, 5, 0)
        with self.assertRaises(RuntimeError):  # as torch
            dtorch.arange(5, 0, 1)

    def test_default_dtype_follows_torch(self):
        self.assertEqual(dtorch.zeros(2).dtype, torch.float32)
        with default_dtype(torch.float64):
            self.assertEqual(dtorch.zeros(2).dtype, torch.float64)
            self.assertEqual(dtorch.rand(2).dtype, torch.float64)
            self.assertEqual(dtorch.full((2,), 1.5).dtype, torch.float64)
            self.assertEqual(dtorch.arange(0, 1, 0.5).dtype, torch.float64)
            self.assertEqual(dtorch.Tensor(2, 3).dtype, torch.float64)
        self.assertEqual(dtorch.zeros(2).dtype, torch.float32)

    @cpu_only("device='cpu' arguments")
    def test_device_argument(self):
        for device, mesh in (("cpu", DeviceMesh("cpu", [0])), ("cpu:3", DeviceMesh("cpu", [3])),
                             (torch.device("cpu"), DeviceMesh("cpu", [0])), (torch.device("cpu", 2), DeviceMesh("cpu", [2]))):
            with self.subTest(device=device):
                x = dtorch.ones(2, 2, device=device)
                self.assertEqual(x.device_mesh, mesh)
                self.assertEqual(x.device, torch.device("cpu"))
                self.assertEqual(x.placements, [Replicate()])
                assert_tensor_equal(self, x, torch.ones(2, 2))
        with self.assertRaises(ValueError):
            dtorch.ones(2, device="cpu", device_mesh=CPU2)
        # The default: one CPU device, all Replicate.
        x = dtorch.ones(3)
        self.assertEqual(x.device_mesh, DeviceMesh("cpu", [0]))
        self.assertEqual(x.placements, [Replicate()])
        self.assertFalse(x.is_dtensor)

    def test_tensor_constructor(self):
        t = torch.arange(12.0).reshape(3, 4)
        x = dtorch.Tensor(t, device_mesh=CPU2, placements=[Shard(1)])
        self.assertIsInstance(x, dtorch.Tensor)
        self.assertEqual(x.placements, [Shard(1)])
        assert_tensor_equal(self, x, t)
        assert_tensor_equal(self, dtorch.Tensor(t, device="cpu:1"), t)
        e = dtorch.Tensor()
        self.assertEqual((e.shape, e.dtype), (torch.Size([0]), torch.float32))
        u = dtorch.Tensor(2, 3)
        self.assertEqual((u.shape, u.dtype), (torch.Size([2, 3]), torch.float32))
        assert_tensor_equal(self, dtorch.Tensor([1, 2, 3]), torch.Tensor([1, 2, 3]))
        assert_tensor_equal(self, dtorch.tensor([[1, 2], [3, 4]]), torch.tensor([[1, 2], [3, 4]]))
        assert_tensor_equal(self, dtorch.tensor([1.5, 2.5], dtype=torch.float64, device_mesh=CPU2,
                                                placements=[Shard(0)]), torch.tensor([1.5, 2.5], dtype=torch.float64))
        assert_tensor_equal(self, dtorch.tensor(3.5), torch.tensor(3.5))

    def test_like_factories(self):
        x = dtorch.from_torch(torch.ones(5, 3, dtype=torch.float64), CPU3, [Shard(0)])
        for fn, ref in ((dtorch.zeros_like, torch.zeros_like), (dtorch.ones_like, torch.ones_like)):
            y = fn(x)
            self.assertEqual((y.device_mesh, y.placements), (CPU3, [Shard(0)]))
            assert_tensor_equal(self, y, ref(torch.ones(5, 3, dtype=torch.float64)))
        y = dtorch.full_like(x, 4)
        assert_tensor_equal(self, y, torch.full((5, 3), 4.0, dtype=torch.float64))
        y = dtorch.empty_like(x, dtype=torch.int64)
        self.assertEqual((y.shape, y.dtype), (torch.Size([5, 3]), torch.int64))
        y = dtorch.rand_like(x)
        self.assertEqual((y.shape, y.dtype, y.placements), (torch.Size([5, 3]), torch.float64, [Shard(0)]))
        y = dtorch.randn_like(x, device_mesh=CPU2)
        self.assertEqual((y.device_mesh, y.placements), (CPU2, [Replicate()]))

    def test_like_factories_one_device_and_2x2(self):
        t = torch.arange(30, dtype=torch.float32).reshape(5, 6)
        cases = [(CPU1, [Replicate()]), (CPU2x2, [Shard(0), Shard(1)]), (CPU2x2, [Partial(), Shard(0)]),
                 (CPU3, [Shard(1)])]
        for mesh, pl in cases:
            x = genuine_partial(t, mesh, pl)  # a Partial input's pieces must not leak into the result
            for fn, ref in ((dtorch.zeros_like, torch.zeros_like), (dtorch.ones_like, torch.ones_like),
                            (lambda a: dtorch.full_like(a, 2.5), lambda a: torch.full_like(a, 2.5))):
                y = fn(x)
                self.assertEqual((y.device_mesh, y.placements), (mesh, pl))
                assert_tensor_equal(self, y, ref(t))
            e = dtorch.empty_like(x)
            self.assertEqual((e.shape, e.dtype, e.device_mesh, e.placements), (t.shape, t.dtype, mesh, pl))
            dtorch.manual_seed(5)
            r1 = dtorch.rand_like(x).to_torch()
            dtorch.manual_seed(5)
            r2 = dtorch.rand(5, 6, device_mesh=CPU1).to_torch()
            self.assertTrue(torch.equal(r1, r2), "rand_like values depend on placements")
            dtorch.manual_seed(6)
            n1 = dtorch.randn_like(x).to_torch()
            dtorch.manual_seed(6)
            self.assertTrue(torch.equal(n1, dtorch.randn(5, 6).to_torch()))


class TestRoundTrip(unittest.TestCase):
    def test_one_device_dtypes(self):
        g = torch.Generator().manual_seed(0)
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                      torch.int16, torch.int8, torch.uint8, torch.bool):
            with self.subTest(dtype=dtype):
                t = (torch.randn(4, 5, generator=g) * 10).to(dtype)
                x = dtorch.from_torch(t)
                self.assertEqual(x.dtype, dtype)
                assert_tensor_equal(self, x, t)
                self.assertEqual(x.tolist(), t.tolist())

    def test_views_and_noncontiguous(self):
        base = torch.arange(60.0).reshape(5, 12)
        for t in (base.t(), base[:, 2:7], base[1:3], base[::2, ::3], base.expand(2, 5, 12), -base[1], torch.tensor(2.0)):
            assert_tensor_equal(self, dtorch.from_torch(t, CPU2, [Replicate()]), t)
        r = torch.ones(3, requires_grad=True)
        assert_tensor_equal(self, dtorch.from_torch(r), torch.ones(3))
        # The values are copied at the call.
        t = torch.zeros(4)
        x = dtorch.from_torch(t, CPU2, [Shard(0)])
        t += 1
        assert_tensor_equal(self, x, torch.zeros(4))

    def test_numpy_backed(self):
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        t = torch.from_numpy(a)
        x = dtorch.from_torch(t, CPU3, [Shard(1)])
        del a, t
        assert_tensor_equal(self, x, torch.arange(12, dtype=torch.float32).reshape(3, 4))

    def test_meshes_1d(self):
        for mesh in (CPU1, CPU2, CPU3):
            for shape in SHAPES:
                t = torch.arange(int(np.prod(shape)), dtype=torch.float32).reshape(shape) - 3
                for p in placements_1d(len(shape)):
                    with self.subTest(mesh=mesh, shape=shape, p=p):
                        x = dtorch.from_torch(t, mesh, [p])
                        self.assertEqual(x.shape, t.shape)
                        expected_p = Replicate() if mesh.size() == 1 else p
                        self.assertEqual(x.placements, [expected_p])
                        assert_tensor_equal(self, x, t)

    def test_shapes_smaller_than_mesh(self):
        mesh4 = DeviceMesh("cpu", [0, 1, 2, 3])
        for shape in ((1,), (2,), (3, 1), (1, 3), (0, 2), (2, 0)):
            t = torch.arange(float(np.prod(shape))).reshape(shape) + 1
            for mesh in (CPU3, mesh4):
                for p in placements_1d(len(shape)):
                    with self.subTest(shape=shape, mesh=mesh, p=p):
                        assert_tensor_equal(self, dtorch.from_torch(t, mesh, [p]), t)

    def test_dtypes_sharded(self):
        for dtype in (torch.int64, torch.float16, torch.bool, torch.float64):
            t = (torch.arange(35).reshape(5, 7) % 3).to(dtype)
            for p in (Shard(0), Shard(1), Partial()):
                with self.subTest(dtype=dtype, p=p):
                    if dtype == torch.bool and p.is_partial():
                        continue  # a bool sum is not defined
                    assert_tensor_equal(self, dtorch.from_torch(t, CPU3, [p]), t)

    def test_mesh_2d(self):
        t = torch.arange(30.0).reshape(5, 6)
        for pl in placements_2d(2):
            with self.subTest(placements=pl):
                x = dtorch.from_torch(t, CPU2x2, pl)
                self.assertEqual(x.placements, pl)
                assert_tensor_equal(self, x, t)

    def test_creation_on_2x2_and_uneven_meshes(self):
        # Every creation op on a 3-device mesh with uneven shards and on a 2x2 mesh with nested shards.
        for mesh, pl in ((CPU3, [Shard(0)]), (CPU3, [Partial()]), (CPU2x2, [Shard(0), Shard(0)]),
                         (CPU2x2, [Partial(), Shard(0)]), (CPU2x2, [Replicate(), Replicate()])):
            with self.subTest(mesh=mesh, pl=pl):
                assert_tensor_equal(self, dtorch.arange(0, 7, 1, device_mesh=mesh, placements=pl), torch.arange(7))
                assert_tensor_equal(self, dtorch.arange(0.5, 3.0, 0.5, device_mesh=mesh, placements=pl),
                                    torch.arange(0.5, 3.0, 0.5))
                assert_tensor_equal(self, dtorch.tensor([1.5, 2.5, -1.0, 4.0, 5.0], device_mesh=mesh, placements=pl),
                                    torch.tensor([1.5, 2.5, -1.0, 4.0, 5.0]))
                assert_tensor_equal(self, dtorch.Tensor(torch.arange(5.0), device_mesh=mesh, placements=pl),
                                    torch.arange(5.0))
                e = dtorch.empty(5, dtype=torch.int32, device_mesh=mesh, placements=pl)
                self.assertEqual((e.shape, e.dtype, e.placements), (torch.Size([5]), torch.int32, pl))
                self.assertEqual(e.to_torch().shape, torch.Size([5]))
                assert_tensor_equal(self, dtorch.full((5, 3), 2.5, device_mesh=mesh, placements=pl),
                                    torch.full((5, 3), 2.5))
                assert_tensor_equal(self, dtorch.zeros(5, 3, dtype=torch.int64, device_mesh=mesh, placements=pl),
                                    torch.zeros(5, 3, dtype=torch.int64))
                assert_tensor_equal(self, dtorch.ones(5, 3, dtype=torch.bfloat16, device_mesh=mesh, placements=pl),
                                    torch.ones(5, 3, dtype=torch.bfloat16))
                assert_tensor_equal(self, dtorch.from_torch(torch.arange(15).reshape(5, 3), mesh, pl),
                                    torch.arange(15).reshape(5, 3))

    def test_factories_on_meshes(self):
        for mesh, pl in ((CPU2, [Shard(0)]), (CPU3, [Shard(1)]), (CPU3, [Partial()]), (CPU2x2, [Shard(1), Partial()]),
                         (CPU2x2, [Replicate(), Shard(0)])):
            with self.subTest(mesh=mesh, pl=pl):
                assert_tensor_equal(self, dtorch.ones(5, 7, device_mesh=mesh, placements=pl), torch.ones(5, 7))
                assert_tensor_equal(self, dtorch.zeros(5, 7, device_mesh=mesh, placements=pl), torch.zeros(5, 7))
                assert_tensor_equal(self, dtorch.full((5, 7), 3, device_mesh=mesh, placements=pl), torch.full((5, 7), 3))


class TestRandom(unittest.TestCase):
    def test_rand_values(self):
        dtorch.manual_seed(1)
        x = dtorch.rand(50, 40).to_torch()
        self.assertEqual(x.dtype, torch.float32)
        self.assertTrue(bool((x >= 0).all()) and bool((x < 1).all()))
        self.assertGreater(x.std().item(), 0.2)
        y = dtorch.rand(50, 40).to_torch()
        self.assertFalse(torch.equal(x, y))  # the stream advances
        n = dtorch.randn(100, 100, dtype=torch.float64).to_torch()
        self.assertEqual(n.dtype, torch.float64)
        self.assertLess(abs(n.mean().item()), 0.1)
        self.assertLess(abs(n.std().item() - 1), 0.1)

    def test_placement_invariance(self):
        for fn in (dtorch.rand, dtorch.randn):
            for shape in ((5, 7), (4, 3), (9,)):
                dtorch.manual_seed(1234)
                ref = fn(*shape).to_torch()
                configs = [(CPU1, [Replicate()])] + [(m, [p]) for m in (CPU2, CPU3) for p in placements_1d(len(shape))]
                configs.append((CPU2x2, [Shard(0), Replicate()]))
                configs.append((CPU2x2, [Partial(), Shard(len(shape) - 1)]))
                for mesh, pl in configs:
                    with self.subTest(fn=fn.__name__, shape=shape, mesh=mesh, pl=pl):
                        dtorch.manual_seed(1234)
                        x = fn(*shape, device_mesh=mesh, placements=pl)
                        self.assertEqual(x.placements, pl)
                        assert_tensor_equal(self, x, ref)
                dtorch.manual_seed(99)
                self.assertFalse(torch.equal(fn(*shape).to_torch(), ref))

    def test_seed_sequence_is_reproducible(self):
        dtorch.manual_seed(7)
        a = [dtorch.rand(3, 4).to_torch(), dtorch.randn(5).to_torch()]
        dtorch.manual_seed(7)
        b = [dtorch.rand(3, 4, device_mesh=CPU3, placements=[Shard(1)]), dtorch.randn(5, device_mesh=CPU2, placements=[Shard(0)])]
        assert_tensor_equal(self, b, a)

    def test_manual_seed_does_not_touch_torch(self):
        torch.manual_seed(5)
        expected = torch.rand(3)
        torch.manual_seed(5)
        dtorch.manual_seed(123)
        dtorch.rand(3)
        self.assertTrue(torch.equal(torch.rand(3), expected))

    def test_generator_matches_torch(self):
        for fn, tfn in ((dtorch.rand, torch.rand), (dtorch.randn, torch.randn)):
            for dtype in (torch.float32, torch.float64):
                for mesh, pl in ((CPU1, None), (CPU2, [Shard(0)]), (CPU3, [Shard(1)]), (CPU2, [Partial()])):
                    with self.subTest(fn=fn.__name__, dtype=dtype, mesh=mesh, pl=pl):
                        g1 = torch.Generator().manual_seed(42)
                        g2 = torch.Generator().manual_seed(42)
                        x = fn(5, 7, dtype=dtype, device_mesh=mesh, placements=pl, generator=g1)
                        assert_tensor_equal(self, x, tfn(5, 7, dtype=dtype, generator=g2))
                        # The generator advanced exactly as torch's would.
                        self.assertTrue(torch.equal(g1.get_state(), g2.get_state()))
                        x2 = fn((3,), dtype=dtype, device_mesh=mesh, generator=g1)
                        assert_tensor_equal(self, x2, tfn((3,), dtype=dtype, generator=g2))

    def test_randint_placement_invariance(self):
        for dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool, torch.float32,
                      torch.float64, torch.float16, torch.bfloat16):
            low, high = (0, 2) if dtype == torch.bool else (-5, 7) if dtype != torch.uint8 else (3, 200)
            for shape in ((5, 7), (9,), (3, 1, 2)):
                dtorch.manual_seed(77)
                ref = dtorch.randint(low, high, shape, dtype=dtype).to_torch()
                self.assertEqual(ref.dtype, dtype)
                self.assertTrue(bool((ref.to(torch.float64) >= low).all()) and bool((ref.to(torch.float64) < high).all()))
                configs = [(DeviceMesh("cpu", [4]), None)]
                configs += [(m, [p]) for m in (CPU2, CPU3) for p in placements_1d(len(shape), partial=dtype != torch.bool)]
                configs += [(CPU2x2, [Shard(0), Shard(0)]), (CPU2x2, [Shard(len(shape) - 1), Replicate()])]
                if dtype != torch.bool:
                    configs.append((CPU2x2, [Partial(), Shard(0)]))
                for mesh, pl in configs:
                    with self.subTest(dtype=dtype, shape=shape, mesh=mesh, pl=pl):
                        dtorch.manual_seed(77)
                        x = dtorch.randint(low, high, shape, dtype=dtype, device_mesh=mesh, placements=pl)
                        self.assertEqual(x.placements, pl if pl is not None else [Replicate()])
                        assert_tensor_equal(self, x, ref)
        # Values spread over the range, and the stream advances.
        dtorch.manual_seed(5)
        a = dtorch.randint(0, 10, (2000,)).to_torch()
        self.assertEqual(set(a.tolist()), set(range(10)))
        self.assertFalse(torch.equal(a, dtorch.randint(0, 10, (2000,)).to_torch()))
        big = dtorch.randint(-2**62, 2**62, (100,), device_mesh=CPU3, placements=[Shard(0)]).to_torch()
        self.assertGreater(big.abs().max().item(), 2**60)

    def test_randint_forms_and_errors(self):
        dtorch.manual_seed(3)
        a = dtorch.randint(10, (3, 4))
        dtorch.manual_seed(3)
        b = dtorch.randint(0, 10, (3, 4), device_mesh=CPU2, placements=[Shard(1)])
        dtorch.manual_seed(3)
        c = dtorch.randint(low=0, high=10, size=(3, 4))
        dtorch.manual_seed(3)
        d = dtorch.randint(10, size=torch.Size([3, 4]), device="cpu")
        self.assertEqual(a.dtype, torch.int64)
        assert_tensor_equal(self, [b, c, d], [a.to_torch()] * 3)
        with self.assertRaisesRegex(RuntimeError, "random_ expects 'from' to be less than 'to'"):
            dtorch.randint(5, 5, (3,))
        with self.assertRaisesRegex(RuntimeError, "to - 1 is out of bounds for unsigned char"):
            dtorch.randint(0, 300, (3,), dtype=torch.uint8)
        with self.assertRaisesRegex(RuntimeError, "from is out of bounds for signed char"):
            dtorch.randint(-200, 3, (3,), dtype=torch.int8)
        with self.assertRaisesRegex(RuntimeError, "to - 1 is out of bounds for bool"):
            dtorch.randint(0, 3, (3,), dtype=torch.bool)
        for bad in (lambda: dtorch.randint(0, 10, 3), lambda: dtorch.randint(0.5, 10, (3,)),
                    lambda: dtorch.randint((3,))):
            with self.assertRaises(TypeError):
                bad()
        # torch raises the same way.
        with self.assertRaises(RuntimeError):
            torch.randint(0, 300, (3,), dtype=torch.uint8)

    def test_randint_generator_matches_torch(self):
        for dtype in (torch.int64, torch.int32, torch.float32, torch.uint8):
            for mesh, pl in ((CPU1, None), (CPU2, [Shard(0)]), (CPU3, [Shard(1)]), (CPU2, [Partial()]),
                             (CPU2x2, [Shard(1), Shard(0)])):
                with self.subTest(dtype=dtype, mesh=mesh, pl=pl):
                    g1 = torch.Generator().manual_seed(42)
                    g2 = torch.Generator().manual_seed(42)
                    x = dtorch.randint(2, 50, (5, 7), dtype=dtype, device_mesh=mesh, placements=pl, generator=g1)
                    assert_tensor_equal(self, x, torch.randint(2, 50, (5, 7), dtype=dtype, generator=g2))
                    self.assertTrue(torch.equal(g1.get_state(), g2.get_state()))
                    x2 = dtorch.randint(9, (3,), dtype=dtype, device_mesh=mesh, generator=g1)
                    assert_tensor_equal(self, x2, torch.randint(9, (3,), dtype=dtype, generator=g2))

    def test_randint_like(self):
        x = dtorch.from_torch(torch.ones(5, 3, dtype=torch.float64), CPU3, [Shard(0)])
        dtorch.manual_seed(11)
        y = dtorch.randint_like(x, 10)
        self.assertEqual((y.shape, y.dtype, y.device_mesh, y.placements),
                         (torch.Size([5, 3]), torch.float64, CPU3, [Shard(0)]))
        dtorch.manual_seed(11)
        assert_tensor_equal(self, y, dtorch.randint(0, 10, (5, 3), dtype=torch.float64).to_torch())
        dtorch.manual_seed(11)
        z = dtorch.randint_like(x, 3, 8, dtype=torch.int32, device_mesh=CPU2x2, placements=[Shard(1), Shard(0)])
        self.assertEqual((z.dtype, z.placements), (torch.int32, [Shard(1), Shard(0)]))
        dtorch.manual_seed(11)
        assert_tensor_equal(self, z, dtorch.randint(3, 8, (5, 3), dtype=torch.int32).to_torch())
        g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
        w = dtorch.randint_like(x, 2, 6, generator=g1)
        assert_tensor_equal(self, w, torch.randint(2, 6, (5, 3), dtype=torch.float64, generator=g2))
        t = torch.ones(4, 2, dtype=torch.int16)
        r = dtorch.randint_like(dtorch.from_torch(t, CPU2, [Shard(0)]), 4).to_torch()
        self.assertEqual(r.dtype, torch.int16)
        self.assertTrue(bool((r >= 0).all()) and bool((r < 4).all()))

    def test_rand_rejects_integers(self):
        with self.assertRaises((TypeError, ValueError, RuntimeError)):
            dtorch.rand(3, dtype=torch.int64)
        assert_tensor_equal(self, dtorch.ones(2) * 3, torch.full((2,), 3.0))


class TestMetadataAndValues(unittest.TestCase):
    @cpu_only("a cpu mesh's device")
    def test_metadata(self):
        x = dtorch.zeros(5, 7, dtype=torch.float64, device_mesh=CPU3, placements=[Shard(1)])
        self.assertIsInstance(x, dtorch.Tensor)
        self.assertEqual(x.shape, torch.Size([5, 7]))
        self.assertIsInstance(x.shape, torch.Size)
        self.assertEqual(x.size(), torch.Size([5, 7]))
        self.assertEqual(x.size(0), 5)
        self.assertEqual(x.size(-1), 7)
        self.assertEqual(x.size(dim=-2), 5)
        with self.assertRaises(IndexError):
            x.size(2)
        with self.assertRaises(IndexError):
            x.size(-3)
        self.assertEqual(x.ndim, 2)
        self.assertEqual(x.dim(), 2)
        self.assertEqual(x.numel(), 35)
        self.assertEqual(len(x), 5)
        self.assertEqual(x.dtype, torch.float64)
        self.assertEqual(x.device, torch.device("cpu"))
        self.assertEqual(x.device_mesh, CPU3)
        self.assertEqual(x.placements, [Shard(1)])
        self.assertTrue(x.is_dtensor)
        self.assertTrue(x.is_floating_point())
        self.assertIs(x.graph, dtorch.Graph.default_graph())
        self.assertEqual(x.graph, dtorch.default_graph)
        self.assertFalse(dtorch.zeros(2, dtype=torch.int32).is_floating_point())
        self.assertFalse(dtorch.zeros(2, device_mesh=CPU1).is_dtensor)
        s = dtorch.ones(())
        self.assertEqual((s.shape, s.ndim, s.numel()), (torch.Size([]), 0, 1))
        with self.assertRaisesRegex(TypeError, "0-d"):
            len(s)
        with self.assertRaises(IndexError):
            s.size(0)

    def test_item_tolist_numpy_bool(self):
        x = dtorch.from_torch(torch.tensor([[1.5, -2.0], [3.0, 4.25]]), CPU2, [Shard(0)])
        self.assertEqual(x.tolist(), [[1.5, -2.0], [3.0, 4.25]])
        np.testing.assert_array_equal(x.numpy(), np.array([[1.5, -2.0], [3.0, 4.25]], dtype=np.float32))
        with self.assertRaisesRegex(RuntimeError, "a Tensor with 4 elements cannot be converted to Scalar"):
            x.item()
        with self.assertRaisesRegex(RuntimeError, "ambiguous"):
            bool(x)
        with self.assertRaisesRegex(RuntimeError, "ambiguous"):
            bool(dtorch.zeros(0))
        one = dtorch.from_torch(torch.tensor([2.5]), CPU2, [Shard(0)])
        self.assertEqual(one.item(), 2.5)
        self.assertEqual(float(one), 2.5)
        self.assertEqual(int(dtorch.tensor(7)), 7)
        self.assertTrue(bool(dtorch.tensor(1)))
        self.assertFalse(bool(dtorch.zeros(1, 1)))
        self.assertIs(dtorch.tensor(True).item(), True)
        self.assertEqual(dtorch.tensor(3).item(), 3)

    def test_repr_exact(self):
        x = dtorch.ones(2, 2, device_mesh=CPU2)
        expected = ("tensor([[1., 1.],\n        [1., 1.]])\n"
                    "shape=torch.Size([2, 2]), dtype=torch.float32, device_mesh=DeviceMesh('cpu', [0, 1]), "
                    "placements=[Replicate()]")
        self.assertEqual(repr(x), expected)
        self.assertEqual(str(x), expected)
        h = dtorch.from_torch(torch.tensor([1.5, 2.0], dtype=torch.float16), CPU2x2, [Shard(0), Partial()])
        self.assertEqual(repr(h), "tensor([1.5000, 2.0000], dtype=torch.float16)\n"
                                  "shape=torch.Size([2]), dtype=torch.float16, device_mesh=DeviceMesh('cpu', "
                                  "[[0, 1], [2, 3]], mesh_dim_names=('dp', 'tp')), placements=[Shard(dim=0), Partial()]")

    @cpu_only("prints a cpu mesh")
    def test_seed_example(self):
        mesh = dtorch.DeviceMesh("cpu", [0, 1])
        x = dtorch.rand((4, 3), device_mesh=mesh, placements=[dtorch.Shard(0)])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            print(f"{x=}")
        text = out.getvalue()
        t = x.to_torch()
        self.assertEqual(text, f"x={t!r}\nshape=torch.Size([4, 3]), dtype=torch.float32, "
                               f"device_mesh=DeviceMesh('cpu', [0, 1]), placements=[Shard(dim=0)]\n")
        self.assertTrue(re.match(r"x=tensor\(\[\[", text))
        self.assertTrue(bool((t >= 0).all()) and bool((t < 1).all()))

    def test_to_torch_async(self):
        t = torch.arange(20.0).reshape(4, 5)
        x = dtorch.from_torch(t, CPU3, [Shard(1)]) * 2
        f = x.to_torch_async()
        self.assertIsInstance(f, dtorch.TensorFuture)
        self.assertTrue(f.wait_for(10_000))
        self.assertTrue(f.is_ready())
        self.assertTrue(torch.equal(f.get(), t * 2))
        self.assertTrue(torch.equal(f.wait(), t * 2))
        self.assertTrue(torch.equal(f.get(), t * 2))  # cached, readable again
        b = dtorch.from_torch(torch.tensor([True, False, True]), CPU2, [Shard(0)]).to_torch_async()
        self.assertTrue(torch.equal(b.get(), torch.tensor([True, False, True])))

    def test_async_await(self):
        import asyncio

        x = dtorch.ones(3, 3, device_mesh=CPU2, placements=[Shard(0)]) + 1

        async def main():
            return await x.to_torch_async()

        self.assertTrue(torch.equal(asyncio.run(main()), torch.full((3, 3), 2.0)))

    def test_weakref_and_identity(self):
        import weakref

        x = dtorch.ones(2)
        r = weakref.ref(x)
        self.assertIs(r(), x)
        self.assertEqual(len({x, x}), 1)
        del x
        self.assertIsNone(r())


if __name__ == "__main__":
    unittest.main()
