"""Arithmetic, neg, matmul and sum against eager torch, on one device and on meshes, with placement rules."""

import contextlib
import itertools
import operator
import unittest

import torch

import dtorch
from dtorch import Partial, PlacementError, Replicate, Shard
from dtorch.test.test_util import assert_replicas_equal, assert_tensor_allclose, assert_tensor_equal

from helpers import CPU2, CPU3, CPU2x2, genuine_partial, int_valued, placements_1d, randn

# Operators this module tests against eager PyTorch (tests/python/test_registry.py).
TESTED_OPS = {'add', 'sub', 'mul', 'div', 'neg', 'matmul', 'sum'}

R, P = Replicate(), Partial()
S0, S1 = Shard(0), Shard(1)

OPS = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
}

ONE_DEVICE_DTYPES = (torch.float32, torch.float64, torch.int64, torch.float16)


@contextlib.contextmanager
def default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def operand(shape, dtype, seed, positive=False):
    """Test values of ``dtype``; ``positive`` keeps divisors away from zero."""
    if dtype.is_floating_point:
        t = randn(*shape, dtype=torch.float64, seed=seed)
        if positive:
            t = t.abs() + 0.5
        return t.to(dtype)
    t = int_valued(*shape, dtype=dtype, seed=seed)
    if positive:
        t = t.abs() + 1
    return t


def broadcast_shape(a, b):
    return tuple(torch.broadcast_shapes(torch.Size(a), torch.Size(b)))


def expected_binary(op, pa, pb, sa, sb):
    """The output placement dtorch documents for one mesh dim (dtorch_ops.h, dt_binary).

    None: the combination is rejected (PlacementError). That includes a Shard of
    a size-1 dim that broadcasts (dtorch_ops.h, elementwise math: "a Shard of a
    size-1 dim that broadcasts is rejected"): the other devices would have
    nothing to broadcast.
    """
    so = broadcast_shape(sa, sb)

    def out_dim(p, s):
        return p.dim + len(so) - len(s)

    for p, s in ((pa, sa), (pb, sb)):
        if p.is_shard() and s[p.dim] == 1 and so[out_dim(p, s)] != 1:
            return None
    if pa.is_replicate() and pb.is_replicate():
        return R
    if pa.is_shard() and pb.is_shard():
        return Shard(out_dim(pa, sa)) if out_dim(pa, sa) == out_dim(pb, sb) else None
    if pa.is_shard() and pb.is_replicate():
        return Shard(out_dim(pa, sa))
    if pa.is_replicate() and pb.is_shard():
        return Shard(out_dim(pb, sb))
    if pa.is_partial() and pb.is_partial():
        return P if op in ("add", "sub") else None
    if pa.is_partial() and pb.is_replicate():
        return P if op in ("mul", "div") else None
    if pa.is_replicate() and pb.is_partial():
        return P if op == "mul" else None
    return None


def expected_scalar(op, p, scalar_first):
    if not p.is_partial():
        return p
    if op == "mul" or (op == "div" and not scalar_first):
        return P
    return None


MATMUL_RULES = {(R, R): R, (S0, R): S0, (R, S1): S1, (S1, S0): P, (S1, R): P, (R, S0): P, (P, R): P, (R, P): P}


def expected_sum(p, dims, ndim, keepdim):
    if not p.is_shard():
        return p
    if p.dim in dims:
        return P
    if keepdim:
        return p
    return Shard(p.dim - sum(1 for d in dims if d < p.dim))


class OpTestCase(unittest.TestCase):
    def assertPlacementError(self, cm_exc, op):
        msg = str(cm_exc)
        self.assertIsInstance(cm_exc, ValueError)
        self.assertIn(op, msg)
        self.assertIn("redistribute", msg)

    def check_value(self, got, expected, partial_involved, exact=True):
        """Against torch (equal, or allclose where a pending sum is involved); every replica bitwise."""
        assert_replicas_equal(self, got)
        if exact and not partial_involved:
            assert_tensor_equal(self, got, expected)
        elif expected.dtype in (torch.float16, torch.bfloat16):
            # Each piece of a pending sum rounds on its own: a few half-precision ulps of the pieces.
            assert_tensor_allclose(self, got, expected, rtol=1e-2, atol=1e-2)
        else:
            assert_tensor_allclose(self, got, expected, rtol=1e-4, atol=1e-5)


class TestOneDevice(OpTestCase):
    SHAPE_PAIRS = [((4, 6), (4, 6)), ((5, 7), (7,)), ((7,), (5, 7)), ((5, 1), (1, 7)), ((3, 4, 5), (4, 1)), ((), (3, 2)),
                   ((2, 3), ())]

    def test_binary_tensor_tensor(self):
        for dtype in ONE_DEVICE_DTYPES:
            for (sa, sb), (name, fn) in itertools.product(self.SHAPE_PAIRS, OPS.items()):
                with self.subTest(dtype=dtype, sa=sa, sb=sb, op=name):
                    a = operand(sa, dtype, 1)
                    b = operand(sb, dtype, 2, positive=(name == "div"))
                    x, y = dtorch.from_torch(a), dtorch.from_torch(b)
                    assert_tensor_equal(self, fn(x, y), fn(a, b))
                    assert_tensor_equal(self, getattr(dtorch, name)(x, y), getattr(torch, name)(a, b))
                    assert_tensor_equal(self, getattr(x, name)(y), getattr(a, name)(b))

    def test_binary_scalar(self):
        scalars = [2, -3, 2.5, -0.75, True, False, 0]
        for dtype in ONE_DEVICE_DTYPES:
            a = operand((3, 5), dtype, 3, positive=True)
            x = dtorch.from_torch(a)
            for (name, fn), s in itertools.product(OPS.items(), scalars):
                with self.subTest(dtype=dtype, op=name, scalar=s):
                    if name == "sub" and isinstance(s, bool):
                        # torch refuses `-` with booleans, and so does dtorch, at the call.
                        with self.assertRaisesRegex(RuntimeError, "bool"):
                            x - s
                        with self.assertRaisesRegex(RuntimeError, "bool"):
                            s - x
                        continue
                    if not (name == "div" and s in (0, False)):
                        assert_tensor_equal(self, fn(x, s), fn(a, s))
                        assert_tensor_equal(self, getattr(x, name)(s), getattr(a, name)(s))
                    assert_tensor_equal(self, fn(s, x), fn(s, a))  # reflected: s op x

    def test_inplace_forms_rebind(self):
        a = operand((3, 4), torch.float32, 4, positive=True)
        x = dtorch.from_torch(a)
        x0 = x
        x += 1
        x -= dtorch.from_torch(a)
        x *= 3
        x /= 2.0
        assert_tensor_equal(self, x, (a + 1 - a) * 3 / 2.0)
        # The Python object is rebound, as torch's in-place ops update it:
        # every reference to it sees the new value.
        self.assertIs(x0, x)

    def test_promotion(self):
        i = torch.tensor([[1, 2, 3], [4, 5, 6]])
        x = dtorch.from_torch(i)
        cases = [
            (x + 2.5, i + 2.5, torch.float32),
            (x / dtorch.from_torch(i + 1), i / (i + 1), torch.float32),
            (x / 2, i / 2, torch.float32),
            (7 / x, 7 / i, torch.float32),
            (x * True, i * True, torch.int64),
            (x + 2, i + 2, torch.int64),
            (x + dtorch.from_torch(i.to(torch.int32)), i + i.to(torch.int32), torch.int64),
            (x * dtorch.from_torch(i.to(torch.float16)), i * i.to(torch.float16), torch.float16),
            (dtorch.from_torch(i.float()) + dtorch.from_torch(i.double()), i.float() + i.double(), torch.float64),
            (dtorch.from_torch(i.half()) + 2.5, i.half() + 2.5, torch.float16),
            (dtorch.from_torch(i.to(torch.int32)) + 2, i.to(torch.int32) + 2, torch.int32),
        ]
        for got, expected, dtype in cases:
            with self.subTest(expected_dtype=dtype):
                self.assertEqual(got.dtype, dtype)
                assert_tensor_equal(self, got, expected)

    def test_promotion_follows_torch_default_dtype(self):
        i = torch.tensor([1, 2, 3])
        x = dtorch.from_torch(i)
        with default_dtype(torch.float64):
            self.assertEqual((x + 2.5).dtype, torch.float64)
            assert_tensor_equal(self, x + 2.5, i + 2.5)
            assert_tensor_equal(self, x / x, i / i)
        self.assertEqual((x + 2.5).dtype, torch.float32)
        assert_tensor_equal(self, x / 3, i / 3)

    def test_neg(self):
        for dtype in ONE_DEVICE_DTYPES:
            a = operand((4, 5), dtype, 5)
            x = dtorch.from_torch(a)
            assert_tensor_equal(self, -x, -a)
            assert_tensor_equal(self, x.neg(), a.neg())
            assert_tensor_equal(self, dtorch.neg(x), torch.neg(a))

    def test_matmul(self):
        for dtype in (torch.float32, torch.float64, torch.int64):
            for m, k, n in ((5, 7, 3), (1, 4, 1), (8, 1, 6), (16, 32, 8)):
                with self.subTest(dtype=dtype, mkn=(m, k, n)):
                    a, b = operand((m, k), dtype, 6), operand((k, n), dtype, 7)
                    x, y = dtorch.from_torch(a), dtorch.from_torch(b)
                    assert_tensor_equal(self, x @ y, a @ b)
                    assert_tensor_equal(self, x.matmul(y), a.matmul(b))
                    assert_tensor_equal(self, dtorch.matmul(x, y), torch.matmul(a, b))

    def test_sum(self):
        dim_cases = [(None, False), (None, True), (0, False), (1, True), (-1, False), ((0, 2), False), ((0, 2), True),
                     ([1], False), ((), False), ((-1, 0, 1), False)]
        for dtype in ONE_DEVICE_DTYPES + (torch.int32, torch.bool):
            a = operand((3, 4, 5), dtype if dtype != torch.bool else torch.int64, 8)
            if dtype == torch.bool:
                a = a > 0
            x = dtorch.from_torch(a)
            for dim, keepdim in dim_cases:
                with self.subTest(dtype=dtype, dim=dim, keepdim=keepdim):
                    if dim is None:
                        expected = a.sum() if not keepdim else a.sum(dim=(0, 1, 2), keepdim=True)
                        got = x.sum() if not keepdim else x.sum(keepdim=True)
                    else:
                        expected = a.sum(dim=dim, keepdim=keepdim)
                        got = x.sum(dim=dim, keepdim=keepdim)
                    assert_tensor_equal(self, got, expected)
            assert_tensor_equal(self, dtorch.sum(x, 1), torch.sum(a, 1))
            assert_tensor_equal(self, dtorch.sum(x, dim=(0, 1), keepdim=True), torch.sum(a, dim=(0, 1), keepdim=True))

    def test_errors_raise_at_call_and_runtime_continues(self):
        x = dtorch.ones(2, 3)
        with self.assertRaisesRegex(TypeError, "torch"):
            x + torch.ones(2, 3)
        with self.assertRaisesRegex(TypeError, "torch"):
            torch.ones(2, 3) * x
        with self.assertRaisesRegex(TypeError, "torch"):
            x @ torch.ones(3, 2)
        with self.assertRaises(TypeError):
            x + "a"
        with self.assertRaises(TypeError):
            x @ 2
        with self.assertRaises(TypeError):
            x.add(None)
        with self.assertRaises((ValueError, RuntimeError)):
            x + dtorch.ones(3, 2)
        with self.assertRaises((ValueError, RuntimeError)):
            x @ dtorch.ones(2, 3)
        with self.assertRaises(IndexError):
            x.sum(dim=2)
        with self.assertRaises((ValueError, RuntimeError)):
            x.sum(dim=(0, 0))
        with self.assertRaises(RuntimeError):  # N-D matmul exists; its shapes must fit
            dtorch.ones(2, 3, 4) @ dtorch.ones(3, 2)
        with self.assertRaises(ValueError):
            x + dtorch.ones(2, 3, device_mesh=CPU2)  # different meshes
        assert_tensor_equal(self, (x + 1).sum(), torch.tensor(12.0))


class TestMeshes(OpTestCase):
    SHAPE_PAIRS = [((4, 6), (4, 6)), ((5, 7), (5, 7)), ((5, 7), (7,)), ((7,), (5, 7)), ((5, 1), (5, 7)), ((2, 3), (2, 3))]

    def run_binary(self, mesh, name, a, b, pa, pb):
        fn = OPS[name]
        x = genuine_partial(a, mesh, [pa])
        y = genuine_partial(b, mesh, [pb], seed=1)
        exp = expected_binary(name, pa, pb, tuple(a.shape), tuple(b.shape))
        if exp is None:
            with self.assertRaises(PlacementError) as cm:
                fn(x, y)
            self.assertPlacementError(cm.exception, name)
            return
        z = fn(x, y)
        self.assertEqual(z.placements, [exp])
        self.assertEqual(z.shape, fn(a, b).shape)
        self.check_value(z, fn(a, b), P in (pa, pb, exp))

    def test_binary_placements(self):
        for mesh in (CPU2, CPU3):
            for (sa, sb), name in itertools.product(self.SHAPE_PAIRS, OPS):
                a = operand(sa, torch.float32, 10)
                b = operand(sb, torch.float32, 11, positive=(name == "div"))
                for pa, pb in itertools.product(placements_1d(len(sa)), placements_1d(len(sb))):
                    with self.subTest(mesh=mesh, op=name, sa=sa, sb=sb, pa=pa, pb=pb):
                        self.run_binary(mesh, name, a, b, pa, pb)

    def test_binary_int_and_half(self):
        for dtype in (torch.int64, torch.float16, torch.float64):
            for name in OPS:
                a = operand((5, 6), dtype, 12)
                b = operand((5, 6), dtype, 13, positive=True)
                for pa, pb in ((S0, S0), (S1, R), (R, S1), (P, P), (P, R), (R, P)):
                    with self.subTest(dtype=dtype, op=name, pa=pa, pb=pb):
                        self.run_binary(CPU3, name, a, b, pa, pb)

    def test_binary_scalar_placements(self):
        a = operand((5, 7), torch.float32, 14, positive=True)
        for mesh in (CPU2, CPU3):
            for (name, fn), s, p in itertools.product(OPS.items(), (3, 0.5, True), placements_1d(2)):
                if name == "sub" and s is True:
                    continue
                for scalar_first in (False, True):
                    with self.subTest(mesh=mesh, op=name, scalar=s, p=p, scalar_first=scalar_first):
                        x = genuine_partial(a, mesh, [p])
                        exp = expected_scalar(name, p, scalar_first)
                        call = (lambda: fn(s, x)) if scalar_first else (lambda: fn(x, s))
                        ref = fn(s, a) if scalar_first else fn(a, s)
                        if exp is None:
                            with self.assertRaises(PlacementError) as cm:
                                call()
                            self.assertPlacementError(cm.exception, name)
                            continue
                        z = call()
                        self.assertEqual(z.placements, [exp])
                        self.check_value(z, ref, p.is_partial())

    def test_int_promotion_on_mesh(self):
        i = int_valued(5, 7, dtype=torch.int64, seed=3).abs() + 1
        x = dtorch.from_torch(i, CPU3, [S1])
        assert_tensor_equal(self, x + 2.5, i + 2.5)
        assert_tensor_equal(self, x / dtorch.from_torch(i, CPU3, [S1]), i / i)
        assert_tensor_equal(self, 3 / x, 3 / i)
        self.assertEqual((x / x).placements, [S1])

    def test_neg_keeps_placements(self):
        a = operand((5, 7), torch.float32, 15)
        for mesh in (CPU2, CPU3):
            for p in placements_1d(2):
                with self.subTest(mesh=mesh, p=p):
                    x = genuine_partial(a, mesh, [p])
                    for z in (-x, x.neg(), dtorch.neg(x)):
                        self.assertEqual(z.placements, [p])
                        self.check_value(z, -a, p.is_partial())

    def test_matmul_placements(self):
        for mesh in (CPU2, CPU3):
            for m, k, n in ((5, 7, 3), (4, 6, 8), (3, 2, 4)):
                a = operand((m, k), torch.float32, 16)
                b = operand((k, n), torch.float32, 17)
                for pa, pb in itertools.product(placements_1d(2), repeat=2):
                    with self.subTest(mesh=mesh, mkn=(m, k, n), pa=pa, pb=pb):
                        x = genuine_partial(a, mesh, [pa])
                        y = genuine_partial(b, mesh, [pb], seed=1)
                        exp = MATMUL_RULES.get((pa, pb))
                        if exp is None:
                            with self.assertRaises(PlacementError) as cm:
                                x @ y
                            self.assertPlacementError(cm.exception, "matmul")
                            continue
                        z = x @ y
                        self.assertEqual(z.placements, [exp])
                        self.assertEqual(z.shape, torch.Size([m, n]))
                        assert_tensor_allclose(self, z, a @ b, rtol=1e-4, atol=1e-5)
                        # Resolving the partial sum gives the same value.
                        assert_tensor_allclose(self, z.redistribute(placements=[R]), a @ b, rtol=1e-4, atol=1e-5)

    def test_matmul_partial_exact_with_integers(self):
        a = int_valued(6, 9, seed=20)
        b = int_valued(9, 4, seed=21)
        for mesh in (CPU2, CPU3):
            z = dtorch.from_torch(a, mesh, [S1]) @ dtorch.from_torch(b, mesh, [S0])
            self.assertEqual(z.placements, [P])
            assert_tensor_equal(self, z, a @ b)
            assert_tensor_equal(self, z.redistribute(placements=[S0]), a @ b)

    def test_sum_placements(self):
        a = int_valued(5, 4, 7, seed=22)  # integer-valued: every summation order is exact
        dim_cases = [(None, False), (0, False), (1, True), (-1, False), ((0, 2), False), ((0, 2), True), ((1,), False)]
        for mesh in (CPU2, CPU3):
            for p in placements_1d(3):
                for dim, keepdim in dim_cases:
                    with self.subTest(mesh=mesh, p=p, dim=dim, keepdim=keepdim):
                        x = genuine_partial(a, mesh, [p])
                        if dim is None:
                            z, ref, dims = x.sum(), a.sum(), (0, 1, 2)
                        else:
                            z, ref = x.sum(dim=dim, keepdim=keepdim), a.sum(dim=dim, keepdim=keepdim)
                            dims = tuple(d % 3 for d in (dim if isinstance(dim, tuple) else (dim,)))
                        self.assertEqual(z.placements, [expected_sum(p, dims, 3, keepdim)])
                        self.assertEqual(z.shape, ref.shape)
                        assert_tensor_equal(self, z, ref)

    def test_sum_int_dtypes(self):
        for dtype in (torch.int32, torch.int64, torch.bool):
            a = int_valued(6, 5, dtype=torch.int64, seed=23)
            a = a > 0 if dtype == torch.bool else a.to(dtype)
            for p in (S0, S1, R):
                with self.subTest(dtype=dtype, p=p):
                    x = genuine_partial(a, CPU3, [p])
                    assert_tensor_equal(self, x.sum(0), a.sum(0))
                    assert_tensor_equal(self, x.sum(), a.sum())
                    self.assertEqual(x.sum().dtype, torch.int64)

    def test_sum_float_sharded(self):
        a = operand((6, 10), torch.float32, 24)
        for p in (S0, S1):
            x = genuine_partial(a, CPU3, [p])
            for dim in (0, 1, None):
                with self.subTest(p=p, dim=dim):
                    z = x.sum(dim) if dim is not None else x.sum()
                    ref = a.sum(dim) if dim is not None else a.sum()
                    assert_tensor_allclose(self, z, ref, rtol=1e-5, atol=1e-5)

    def test_chain_on_2d_mesh(self):
        mesh = CPU2x2
        a = int_valued(4, 6, seed=25)
        b = int_valued(6, 8, seed=26)
        x = dtorch.from_torch(a, mesh, [S0, R])
        w = dtorch.from_torch(b, mesh, [R, S1])
        h = x @ w
        self.assertEqual(h.placements, [S0, S1])
        assert_tensor_equal(self, h, a @ b)
        y = (h * 2 - 1) / 4
        self.assertEqual(y.placements, [S0, S1])
        assert_tensor_equal(self, y, (a @ b * 2 - 1) / 4)
        s = y.sum(dim=1)
        self.assertEqual(s.placements, [S0, P])
        assert_tensor_equal(self, s, ((a @ b * 2 - 1) / 4).sum(dim=1))
        # Each mesh dim is matched on its own: dim 0 (R, S1) -> S1, dim 1 (S1, S0) -> P.
        x2 = dtorch.from_torch(a, mesh, [R, S1])
        w2 = dtorch.from_torch(b, mesh, [S1, S0])
        z = x2 @ w2
        self.assertEqual(z.placements, [S1, P])
        assert_tensor_equal(self, z, a @ b)
        # One rejected mesh dim rejects the op: dim 0 (S0, S0).
        with self.assertRaises(PlacementError) as cm:
            dtorch.from_torch(a, mesh, [S0, R]) @ dtorch.from_torch(b, mesh, [S0, R])
        self.assertPlacementError(cm.exception, "matmul")

if __name__ == "__main__":
    unittest.main()
