"""Reductions against eager torch: sum mean prod amax amin max min argmax argmin any all.

One-device meshes must match torch bit for bit; on 2-, 3- (uneven) and 2x2 meshes
every placement is checked against the documented rule (dtorch_ops.h, dt_reduce):
R->R, S(kept)->S(renumbered), S(reduced)->P for sum/mean and ->R (gathered by the
op) for the others, P only for sum/mean.
"""

import unittest

import torch

import dtorch
from dtorch import Partial, PlacementError, Replicate, Shard
from dtorch.test.test_util import assert_replicas_equal, assert_tensor_allclose, assert_tensor_equal, genuine_partial

from helpers import CPU1, CPU2, CPU3, CPU2x2, int_valued, placements_1d, placements_2d, randn

# Operators this module tests against eager PyTorch (tests/python/test_registry.py).
TESTED_OPS = {"sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "any", "all"}

R, P = Replicate(), Partial()
LINEAR = ("sum", "mean")
MULTI_DIM = ("sum", "mean", "amax", "amin", "any", "all")  # ops that take a dim tuple
ONE_DIM = ("prod", "max", "min", "argmax", "argmin")
ALL_OPS = MULTI_DIM + ONE_DIM
# Ops whose distributed result is exact whatever the order (selection, or
# integer-valued data for sums / powers of two for products).
NODIM = "nodim"


def torch_reduce(a, op, dim, keepdim):
    """torch's result for dtorch's call ``op(dim, keepdim)`` (dim NODIM: no dim)."""
    nd = a.dim()
    if dim is NODIM:
        if not keepdim:
            return getattr(a, op)()
        if op in ("argmax", "argmin"):
            return getattr(a, op)(keepdim=True)
        dim = tuple(range(nd))
    return getattr(a, op)(dim, keepdim=keepdim)


def dtorch_reduce(x, op, dim, keepdim):
    if dim is NODIM:
        return getattr(x, op)(keepdim=True) if keepdim else getattr(x, op)()
    return getattr(x, op)(dim, keepdim=keepdim)


def reduced_dims(dim, ndim):
    if dim is NODIM or dim == ():
        return set(range(ndim))
    dims = dim if isinstance(dim, tuple) else (dim,)
    return {d % ndim for d in dims}


def expected_placement(op, p, dims, keepdim):
    """The documented output placement for one mesh dim, or None when rejected."""
    if p.is_partial():
        return P if op in LINEAR else None
    if p.is_replicate():
        return R
    if p.dim in dims:
        return P if op in LINEAR else R
    if keepdim:
        return p
    return Shard(p.dim - sum(1 for d in dims if d < p.dim))


def dim_cases(op, ndim=3):
    if op in MULTI_DIM:
        dims = [NODIM, 0, 1, -1, (0, 2), (2, 0, 1)]
    else:
        dims = [NODIM, 0, 1, -1]
    for dim in dims:
        for keepdim in (False, True):
            if dim is NODIM and keepdim and op in ("prod", "max", "min"):
                continue  # torch has no keepdim without a dim there
            yield dim, keepdim


def data_for(op, shape, dtype=torch.float32, seed=0):
    """Values that make every reduction order exact: small integers (many ties)
    or, for prod, powers of two with signs."""
    if op == "prod":
        g = torch.Generator().manual_seed(seed)
        choices = torch.tensor([-1.0, 1.0, 2.0, 0.5, 1.0, -2.0])
        return choices[torch.randint(0, len(choices), shape, generator=g)].to(dtype)
    return int_valued(*shape, dtype=dtype, low=-3, high=4, seed=seed)


def result_parts(r):
    return list(r) if isinstance(r, tuple) else [r]


class ReduceTestCase(unittest.TestCase):
    def check(self, got, ref, exact=True):
        """Each result against torch (bit for bit, or allclose); a dtorch result's replicas bitwise."""
        for g, e in zip(result_parts(got), result_parts(ref)):
            if isinstance(g, dtorch.Tensor):
                assert_replicas_equal(self, g)
            if exact:
                assert_tensor_equal(self, g, e)
            else:
                low = e.dtype in (torch.float16, torch.bfloat16)
                assert_tensor_allclose(self, g, e, rtol=1e-2 if low else 1e-5, atol=1e-2 if low else 1e-6)

    def assertPlacementError(self, exc, op):
        self.assertIsInstance(exc, ValueError)
        self.assertIn(op, str(exc))
        self.assertIn("redistribute", str(exc))


class TestOneDevice(ReduceTestCase):
    """Bit-identical to torch on a one-device mesh."""

    DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool)

    def test_every_op_dtype_dim(self):
        for dtype in self.DTYPES:
            a = randn(3, 4, 5, seed=1).to(dtype) if dtype.is_floating_point else data_for("sum", (3, 4, 5))
            if not dtype.is_floating_point:
                a = a > 0 if dtype == torch.bool else a.to(dtype)
            x = dtorch.from_torch(a, CPU1)
            for op in ALL_OPS:
                if op == "mean" and not dtype.is_floating_point:
                    continue
                if op in ("argmax", "argmin") and dtype == torch.bool:
                    continue
                for dim, keepdim in dim_cases(op):
                    with self.subTest(dtype=dtype, op=op, dim=dim, keepdim=keepdim):
                        ref = torch_reduce(a, op, dim, keepdim)
                        got = dtorch_reduce(x, op, dim, keepdim)
                        self.check(got, ref)

    def test_module_functions_and_return_types(self):
        a = randn(4, 6, seed=2)
        x = dtorch.from_torch(a)
        for op in ALL_OPS:
            with self.subTest(op=op):
                assert_tensor_equal(self, getattr(dtorch, op)(x), getattr(torch, op)(a))
                self.check(getattr(dtorch, op)(x, 1), getattr(torch, op)(a, 1))
        r = dtorch.max(x, dim=1, keepdim=True)
        ref = torch.max(a, dim=1, keepdim=True)
        self.assertEqual(r._fields, ("values", "indices"))
        assert_tensor_equal(self, r.values, ref.values)
        assert_tensor_equal(self, r.indices, ref.indices)
        values, indices = x.min(0)
        assert_tensor_equal(self, values, a.min(0)[0])
        assert_tensor_equal(self, indices, a.min(0)[1])
        self.assertIsInstance(dtorch.return_types.max(1, 2), tuple)
        # max(input, other) is the elementwise maximum (the elementwise family's op).
        b = randn(4, 6, seed=9)
        for name in ("max", "min"):
            try:
                got = getattr(x, name)(dtorch.from_torch(b))
            except NotImplementedError:
                self.assertFalse(hasattr(dtorch, "maximum" if name == "max" else "minimum"))
            else:
                assert_tensor_equal(self, got, getattr(torch, name)(a, b))
        self.assertEqual(x.max().shape, torch.Size([]))
        assert_tensor_equal(self, dtorch.amax(x, dim=(0, 1)), torch.amax(a, dim=(0, 1)))
        assert_tensor_equal(self, dtorch.sum(x, dim=[0]), torch.sum(a, dim=[0]))

    def test_non_contiguous_and_0d(self):
        a = randn(5, 4, seed=3).t()  # non-contiguous source
        x = dtorch.from_torch(a)
        for op in ALL_OPS:
            with self.subTest(op=op):
                self.check(getattr(x, op)(0), getattr(a, op)(0))
        s = torch.tensor(2.5)
        y = dtorch.from_torch(s)
        for op in ALL_OPS:
            with self.subTest(op=op, zero_d=True):
                self.check(getattr(y, op)(), getattr(s, op)())
                self.check(getattr(y, op)(0), getattr(s, op)(0))
                self.check(getattr(y, op)(-1, keepdim=True), getattr(s, op)(-1, keepdim=True))

    def test_dtype_argument_and_promotion(self):
        i = int_valued(3, 4, dtype=torch.int32, seed=4)
        x = dtorch.from_torch(i)
        assert_tensor_equal(self, x.sum(), i.sum())
        self.assertEqual(x.sum().dtype, torch.int64)
        assert_tensor_equal(self, x.prod(1), i.prod(1))
        assert_tensor_equal(self, x.sum(dtype=torch.int32), i.sum(dtype=torch.int32))
        assert_tensor_equal(self, x.mean(dtype=torch.float64), i.mean(dtype=torch.float64))
        assert_tensor_equal(self, x.mean(1, dtype=torch.float32), i.mean(1, dtype=torch.float32))
        f = randn(3, 4, seed=5)
        y = dtorch.from_torch(f)
        assert_tensor_equal(self, y.sum(0, dtype=torch.float64), f.sum(0, dtype=torch.float64))
        assert_tensor_equal(self, y.prod(dtype=torch.float64), f.prod(dtype=torch.float64))
        u = (i > 0).to(torch.uint8)
        z = dtorch.from_torch(u)
        for op in ("any", "all"):
            assert_tensor_equal(self, getattr(z, op)(), getattr(u, op)())
            assert_tensor_equal(self, getattr(z, op)(1), getattr(u, op)(1))
        b = i > 0
        w = dtorch.from_torch(b)
        assert_tensor_equal(self, w.sum(1), b.sum(1))
        assert_tensor_equal(self, w.prod(), b.prod())
        assert_tensor_equal(self, w.max(1).values, b.max(1).values)
        assert_tensor_equal(self, w.amax(), b.amax())

    def test_nan_and_ties(self):
        a = torch.tensor([[1.0, float("nan"), 3.0, float("nan")], [2.0, 2.0, -1.0, 2.0], [0.0, -0.0, 0.0, 5.0]])
        x = dtorch.from_torch(a)
        for op in ("max", "min", "argmax", "argmin", "amax", "amin"):
            for dim in (NODIM, 0, 1):
                with self.subTest(op=op, dim=dim):
                    got, ref = dtorch_reduce(x, op, dim, False), torch_reduce(a, op, dim, False)
                    for g, e in zip(result_parts(got), result_parts(ref)):
                        assert_tensor_allclose(self, g, e, rtol=0, atol=0, equal_nan=True)

    def test_errors_match_torch(self):
        x = dtorch.ones(2, 3)
        i = dtorch.ones(2, 3, dtype=torch.int64)
        e = dtorch.ones(0, 3)
        cases = [
            (IndexError, lambda: x.amax(2)),
            (IndexError, lambda: x.sum(dim=-3)),
            (IndexError, lambda: x.argmax(5)),
            (RuntimeError, lambda: x.amax((0, 0))),
            (RuntimeError, lambda: x.sum((1, -1))),
            (RuntimeError, lambda: i.mean()),
            (RuntimeError, lambda: x.mean(dtype=torch.int64)),
            (RuntimeError, lambda: dtorch.ones(2, dtype=torch.bool).argmax()),
            (IndexError, lambda: e.amax(0)),
            (IndexError, lambda: e.max(0)),
            (IndexError, lambda: e.argmax()),
            (RuntimeError, lambda: e.max()),
            (RuntimeError, lambda: e.amax()),
            (IndexError, lambda: e.amin((0, 1))),
            (TypeError, lambda: x.prod((0, 1))),
            (TypeError, lambda: x.prod(keepdim=True)),
            (TypeError, lambda: x.max(keepdim=True)),
            (TypeError, lambda: x.argmax((0,))),
            (TypeError, lambda: x.sum("a")),
            (TypeError, lambda: dtorch.sum(torch.ones(2))),
        ]
        for exc, fn in cases:
            with self.subTest(exc=exc):
                with self.assertRaises(exc):
                    fn()
        # The same calls in torch raise the same types.
        t, ti, te = torch.ones(2, 3), torch.ones(2, 3, dtype=torch.int64), torch.ones(0, 3)
        for exc, fn in [(IndexError, lambda: t.amax(2)), (RuntimeError, lambda: t.amax((0, 0))),
                        (RuntimeError, lambda: ti.mean()), (IndexError, lambda: te.max(0)),
                        (IndexError, lambda: te.argmax()), (RuntimeError, lambda: te.max()),
                        (TypeError, lambda: t.prod((0, 1)))]:
            with self.assertRaises(exc):
                fn()
        # Empty reductions with an identity are fine.
        assert_tensor_equal(self, e.sum(0), torch.ones(0, 3).sum(0))
        assert_tensor_equal(self, e.prod(0), torch.ones(0, 3).prod(0))
        assert_tensor_equal(self, e.all(0), torch.ones(0, 3).all(0))
        assert_tensor_equal(self, e.amax(1), torch.ones(0, 3).amax(1))
        # The runtime keeps working.
        assert_tensor_equal(self, x.sum(), torch.tensor(6.0))


class TestMeshes(ReduceTestCase):
    def run_case(self, mesh, a, placements, op, dim, keepdim, exact=True):
        x = genuine_partial(a, mesh, placements)
        dims = reduced_dims(dim, a.dim())
        expected = [expected_placement(op, p, dims, keepdim) for p in placements]
        if None in expected:
            with self.assertRaises(PlacementError) as cm:
                dtorch_reduce(x, op, dim, keepdim)
            self.assertPlacementError(cm.exception, op)
            return
        got = dtorch_reduce(x, op, dim, keepdim)
        ref = torch_reduce(a, op, dim, keepdim)
        for g in result_parts(got):
            self.assertEqual(g.placements, expected)
        partial = any(p.is_partial() for p in expected)
        self.check(got, ref, exact=exact and not (op == "mean" and partial))
        if partial:
            # Resolving the pending sum gives the same value.
            for g, e in zip(result_parts(got), result_parts(ref)):
                self.check(g.redistribute(placements=[R] * len(placements)), e, exact=False)

    def test_1d_meshes_every_placement(self):
        shape = (5, 4, 7)  # uneven on 2 and 3 devices
        for mesh in (CPU2, CPU3):
            for op in ALL_OPS:
                a = data_for(op, shape, seed=10)
                for p in placements_1d(3):
                    for dim, keepdim in dim_cases(op):
                        if keepdim and dim not in (NODIM, 1):
                            continue  # keepdim is covered on the reduced-middle case
                        with self.subTest(mesh=mesh, op=op, p=p, dim=dim, keepdim=keepdim):
                            self.run_case(mesh, a, [p], op, dim, keepdim)

    def test_2x2_mesh(self):
        shape = (5, 6, 3)
        for op in ALL_OPS:
            a = data_for(op, shape, seed=11)
            for pl in placements_2d(3):
                for dim in (NODIM, 1) if op in ONE_DIM else (NODIM, 1, (0, 2)):
                    with self.subTest(op=op, placements=pl, dim=dim):
                        self.run_case(CPU2x2, a, pl, op, dim, False)

    def test_nested_shards_and_ties(self):
        # Several mesh dims shard the reduced dim: gathered innermost first.
        a = int_valued(3, 7, low=0, high=2, seed=12)  # mostly ties
        for pl in ([Shard(1), Shard(1)], [Shard(0), Shard(0)], [Shard(1), Shard(0)]):
            for op in ("argmax", "argmin", "max", "min", "amax", "prod", "any", "sum", "mean"):
                for dim in (NODIM, 1, 0):
                    with self.subTest(placements=pl, op=op, dim=dim):
                        self.run_case(CPU2x2, a, pl, op, dim, False)

    def test_ties_resolve_to_first_index(self):
        a = torch.zeros(4, 9)
        a[:, 7] = 1.0
        a[1, 2] = 1.0
        a[2, 5] = -1.0
        a[3, :] = 2.0
        for mesh in (CPU2, CPU3):
            x = dtorch.from_torch(a, mesh, [Shard(1)])
            for op in ("argmax", "argmin"):
                assert_tensor_equal(self, getattr(x, op)(1), getattr(a, op)(1))
                assert_tensor_equal(self, getattr(x, op)(), getattr(a, op)())
                assert_tensor_equal(self, getattr(x, op)(keepdim=True), getattr(a, op)(keepdim=True))
            v, i = x.max(1)
            assert_tensor_equal(self, i, a.max(1).indices)
            assert_tensor_equal(self, x.min(1, keepdim=True).indices, a.min(1, keepdim=True).indices)
            # Flat index over a dim-1 shard: the pieces interleave in flat order.
            y = dtorch.from_torch(torch.ones(3, 5), mesh, [Shard(1)])
            assert_tensor_equal(self, y.argmax(), torch.tensor(0))

    def test_nan_across_shards(self):
        a = randn(4, 7, seed=13)
        a[1, 5] = float("nan")
        a[1, 6] = float("nan")
        a[3, 0] = float("nan")
        for mesh in (CPU2, CPU3):
            x = dtorch.from_torch(a, mesh, [Shard(1)])
            for op in ("max", "min", "argmax", "argmin", "amax", "amin"):
                for dim in (NODIM, 1):
                    with self.subTest(mesh=mesh, op=op, dim=dim):
                        got, ref = dtorch_reduce(x, op, dim, False), torch_reduce(a, op, dim, False)
                        for g, e in zip(result_parts(got), result_parts(ref)):
                            assert_tensor_allclose(self, g, e, rtol=0, atol=0, equal_nan=True)

    def test_empty_shards(self):
        # 2 rows on 3 devices: the third shard is empty.
        a = int_valued(2, 5, seed=14)
        for op in ALL_OPS:
            for dim in (NODIM, 0, 1):
                with self.subTest(op=op, dim=dim):
                    self.run_case(CPU3, a, [Shard(0)], op, dim, False)

    def test_dtypes_on_meshes(self):
        for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32):
            a = int_valued(5, 6, dtype=dtype, seed=15)
            for op in ALL_OPS:
                if op == "mean" and not dtype.is_floating_point:
                    continue
                if op == "prod" and dtype in (torch.float16, torch.bfloat16):
                    continue
                for p in (Shard(0), Shard(1)):
                    with self.subTest(dtype=dtype, op=op, p=p):
                        self.run_case(CPU3, a, [p], op, 1, False, exact=op != "mean")
        b = int_valued(5, 6, seed=16) > 0
        u = b.to(torch.uint8)
        for t in (b, u):
            for op in ("any", "all", "amax", "amin", "max", "min", "sum", "prod"):
                for p in (Shard(0), Shard(1)):
                    with self.subTest(dtype=t.dtype, op=op, p=p):
                        self.run_case(CPU3, t, [p], op, 1, False)
                        self.run_case(CPU3, t, [p], op, NODIM, False)

    def test_mean_of_partial_and_sharded_is_global(self):
        a = randn(6, 10, seed=17)
        for p in (Shard(0), Shard(1), P):
            x = genuine_partial(a, CPU3, [p])
            for dim in (NODIM, 0, 1, (0, 1)):
                with self.subTest(p=p, dim=dim):
                    got = x.mean() if dim is NODIM else x.mean(dim)
                    ref = a.mean() if dim is NODIM else a.mean(dim)
                    assert_tensor_allclose(self, got, ref, rtol=1e-5, atol=1e-6)
        h = a.half()
        y = dtorch.from_torch(h, CPU3, [Shard(1)])
        assert_tensor_allclose(self, y.mean(1), h.mean(1), rtol=1e-3, atol=1e-3)
        self.assertEqual(y.mean(1).dtype, torch.float16)

    def test_sum_dtype_on_partial(self):
        a = int_valued(4, 5, seed=18)
        x = genuine_partial(a, CPU2, [P])
        z = x.sum(1, dtype=torch.float64)
        self.assertEqual(z.placements, [P])
        assert_tensor_equal(self, z, a.sum(1, dtype=torch.float64))
        with self.assertRaises(PlacementError) as cm:
            x.sum(dtype=torch.int64)  # truncating each piece would be wrong
        self.assertPlacementError(cm.exception, "sum")
        i = genuine_partial(a.long(), CPU2, [P])
        assert_tensor_equal(self, i.sum(0, dtype=torch.int32), a.long().sum(0, dtype=torch.int32))

    def test_rejected_partial_names_op_and_fix(self):
        x = genuine_partial(randn(4, 4, seed=19), CPU2x2, [Shard(0), P])
        for op in ("amax", "max", "argmax", "prod", "any"):
            with self.subTest(op=op):
                with self.assertRaises(PlacementError) as cm:
                    getattr(x, op)()
                self.assertPlacementError(cm.exception, op)
                self.assertIn("Replicate()", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
