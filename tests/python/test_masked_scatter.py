"""masked_scatter (dtorch.masked_scatter, Tensor.masked_scatter and masked_scatter_) against eager torch.

One device: torch.equal over dtypes, mask densities and broadcasting, and torch's exception class for
rejected calls (at the call; too short a source fails at the read, as a KernelError). Meshes of 2 and
3 devices (uneven shards) and 2x2: every placement of the input with a Replicate mask and a Replicate or
genuinely multi-piece Partial source, every value equal to torch's (the op only copies elements);
sharded masks and sources raise PlacementError naming the redistribute().
"""

import itertools
import unittest
import warnings

import torch

import dtorch
from dtorch import KernelError, Partial, PlacementError, Replicate, Shard

from helpers import CPU1, CPU2, CPU3, CPU2x2, device_assert, genuine_partial, int_valued, randn
from helpers import assert_equal_everywhere as assert_tensor_equal  # and every replica bitwise

# Operators this module tests against eager PyTorch (tests/python/test_registry.py).
TESTED_OPS = {"masked_scatter"}

R, P = Replicate(), Partial()
S = Shard
DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.uint8,
          torch.bool)


def values(shape, dtype, seed=0):
    if dtype == torch.bool:
        g = torch.Generator().manual_seed(seed)
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return randn(*shape, seed=seed).to(dtype)
    return int_valued(*shape, seed=seed, low=0, high=100).to(dtype)


def mask_of(shape, density, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) < density


class MaskedScatterTestCase(unittest.TestCase):
    def run_one(self, t, m, src, mesh=CPU1, pls=None, mpl=None, spl=None, form="method"):
        x = genuine_partial(t, mesh, pls) if pls else dtorch.from_torch(t, mesh)
        dm = dtorch.from_torch(m, mesh, mpl)
        ds = genuine_partial(src, mesh, spl, seed=3) if spl else dtorch.from_torch(src, mesh)
        if form == "method":
            return x.masked_scatter(dm, ds)
        if form == "function":
            return dtorch.masked_scatter(x, dm, ds)
        y = x
        r = x.masked_scatter_(dm, ds)
        self.assertIs(r, y)
        return r


class TestOneDevice(MaskedScatterTestCase):
    def test_dtypes_and_densities(self):
        for dtype, density, form in itertools.product(DTYPES, (0.0, 0.3, 0.7, 1.0), ("method", "function", "inplace")):
            t = values((5, 7), dtype, seed=1)
            m = mask_of((5, 7), density, seed=2)
            src = values((6, 7), dtype, seed=3)
            with self.subTest(dtype=dtype, density=density, form=form):
                assert_tensor_equal(self, self.run_one(t, m, src, form=form), torch.masked_scatter(t, m, src))

    def test_broadcasting(self):
        cases = [
            ((3, 4), (4,)),        # the mask broadcasts to the input
            ((3, 4), (3, 1)),
            ((4,), (3, 4)),        # the input broadcasts to the mask (out of place only)
            ((1, 4), (3, 1)),
            ((2, 1, 5), (3, 1)),
            ((), (2, 3)),
            ((2, 3), ()),
            ((0, 3), (3,)),
            ((2, 0), (2, 1)),
        ]
        for (ts, ms), density in itertools.product(cases, (0.5, 1.0)):
            t = values(ts, torch.float32, seed=4)
            m = mask_of(ms, density, seed=5)
            n = torch.broadcast_shapes(ts, ms).numel()
            for src in (values((n + 3,), torch.float32, seed=6), values((n, 2), torch.float32, seed=7)):
                with self.subTest(input=ts, mask=ms, density=density, source=tuple(src.shape)):
                    assert_tensor_equal(self, self.run_one(t, m, src), torch.masked_scatter(t, m, src))

    def test_source_shapes(self):
        t = values((4, 6), torch.float64)
        m = mask_of((4, 6), 0.5, seed=8)
        k = int(m.sum())
        for shape in ((k,), (k + 5,), (2, 30), (k, 1, 1)):
            with self.subTest(source=shape):
                src = values(shape, torch.float64, seed=9)
                assert_tensor_equal(self, self.run_one(t, m, src), torch.masked_scatter(t, m, src))
        # An all-False mask takes nothing, even from an empty or 0-d source.
        for src in (torch.empty(0, dtype=torch.float64), torch.tensor(5.0, dtype=torch.float64)):
            z = torch.zeros(4, 6, dtype=torch.bool)
            assert_tensor_equal(self, self.run_one(t, z, src), torch.masked_scatter(t, z, src))

    def test_zero_dim(self):
        t = torch.tensor(1.5)
        for m in (torch.tensor(True), torch.tensor(False)):
            src = torch.tensor([7.0, 8.0])
            assert_tensor_equal(self, self.run_one(t, m, src), torch.masked_scatter(t, m, src))

    def test_inplace_rebinds(self):
        t = values((3, 4), torch.float32)
        m = mask_of((4,), 0.6, seed=1)
        src = values((12,), torch.float32, seed=2)
        x = dtorch.from_torch(t, CPU3, [S(0)])
        alias = x
        r = x.masked_scatter_(dtorch.from_torch(m, CPU3), dtorch.from_torch(src, CPU3))
        self.assertIs(r, x)
        self.assertIs(alias, x)
        expected = t.clone().masked_scatter_(m, src)
        assert_tensor_equal(self, x, expected)
        self.assertEqual(list(x.placements), [S(0)])


class TestErrors(MaskedScatterTestCase):
    def same_outcome(self, ref, fn):
        try:
            ref()
        except Exception as e:  # noqa: BLE001 - mirrored
            with self.assertRaises(Exception) as cm:
                fn()
            self.assertIs(type(cm.exception), type(e), f"torch: {type(e).__name__}: {e}; dtorch: "
                                                       f"{type(cm.exception).__name__}: {cm.exception}")
            return
        self.fail("torch accepted the call")

    def test_rejected_at_the_call(self):
        t = torch.arange(12.0).reshape(3, 4)
        m = torch.tensor([True, False, True, True])
        s = torch.arange(100.0, 120.0)
        cases = [
            (t, torch.ones(3, dtype=torch.bool), s),            # shapes do not broadcast
            (t, m, s.double()),                                 # source dtype
            (t, m.float(), s),                                  # mask dtype
            (t, m.to(torch.uint8), s),
            (t, torch.ones(3), s.double()),                     # torch's order: shape first
            (t, m.float(), s.double()),                         # then the source dtype
            (t.long(), m, s),
        ]
        warnings.simplefilter("ignore", UserWarning)  # torch's deprecation warning for uint8 masks
        for ti, mi, si in cases:
            with self.subTest(mask=(tuple(mi.shape), mi.dtype), source=si.dtype, input=ti.dtype):
                x, dm, ds = (dtorch.from_torch(a, CPU1) for a in (ti, mi, si))
                self.same_outcome(lambda: torch.masked_scatter(ti, mi, si), lambda: x.masked_scatter(dm, ds))
                self.same_outcome(lambda: ti.clone().masked_scatter_(mi, si), lambda: x.masked_scatter_(dm, ds))

    def test_inplace_needs_the_mask_to_expand(self):
        t = torch.arange(4.0).reshape(1, 4)
        s = torch.arange(100.0, 120.0)
        for m in (torch.ones(3, 4, dtype=torch.bool), torch.ones(2, 1, 4, dtype=torch.bool)):
            x, dm, ds = (dtorch.from_torch(a, CPU1) for a in (t, m, s))
            with self.subTest(mask=tuple(m.shape)):
                self.same_outcome(lambda: t.clone().masked_scatter_(m, s), lambda: x.masked_scatter_(dm, ds))
                # Out of place broadcasts instead.
                assert_tensor_equal(self, x.masked_scatter(dm, ds), torch.masked_scatter(t, m, s))

    @device_assert("masked_scatter's size check")
    def test_source_too_short_fails_at_the_read(self):
        t = torch.zeros(3, 4)
        m = torch.ones(3, 4, dtype=torch.bool)
        s = torch.arange(5.0)
        with self.assertRaises(RuntimeError):
            torch.masked_scatter(t, m, s)
        for mesh, pl in ((CPU1, R), (CPU3, S(0)), (CPU2, S(1))):
            with self.subTest(mesh=mesh.shape, placement=pl):
                y = dtorch.from_torch(t, mesh, [pl]).masked_scatter(dtorch.from_torch(m, mesh),
                                                                     dtorch.from_torch(s, mesh))
                with self.assertRaises(KernelError) as cm:
                    y.to_torch()
                self.assertIn("Number of elements of source < number of ones in mask", str(cm.exception))
        # The graph keeps working.
        x = dtorch.from_torch(t, CPU2)
        assert_tensor_equal(self, x.masked_scatter(dtorch.from_torch(m, CPU2), dtorch.from_torch(torch.arange(12.0),
                                                                                                 CPU2)),
                            torch.masked_scatter(t, m, torch.arange(12.0)))

    def test_not_tensors(self):
        x = dtorch.zeros(2, 3)
        m = dtorch.from_torch(torch.ones(2, 3, dtype=torch.bool))
        with self.assertRaises(TypeError):
            x.masked_scatter(True, x)
        with self.assertRaises(TypeError):
            x.masked_scatter(m, 1.0)
        with self.assertRaises(TypeError):
            dtorch.masked_scatter(x, torch.ones(2, 3, dtype=torch.bool), x)


# ------------------------------------------------------------------ meshes


def expected_placement(t_shape, out_shape, pa, pm, ps):
    """The documented rule on one mesh dim (None: rejected)."""
    if not pm.is_replicate() or ps.is_shard():
        return None
    if pa.is_shard():
        off = len(out_shape) - len(t_shape)
        if t_shape[pa.dim] != out_shape[pa.dim + off] or ps.is_partial():
            return None
        return S(pa.dim + off)
    if pa.is_partial() or ps.is_partial():
        return P
    return R


class TestMeshes(MaskedScatterTestCase):
    def check_combo(self, mesh, t, m, src, pls, mpls, spls):
        out_shape = torch.broadcast_shapes(t.shape, m.shape)
        exp = [expected_placement(t.shape, out_shape, a, b, c) for a, b, c in zip(pls, mpls, spls)]
        x = genuine_partial(t, mesh, pls, seed=1)
        dm = dtorch.from_torch(m, mesh, mpls)
        ds = genuine_partial(src, mesh, spls, seed=2)
        if any(e is None for e in exp):
            with self.assertRaises(PlacementError) as cm:
                x.masked_scatter(dm, ds)
            self.assertIn("masked_scatter", str(cm.exception))
            self.assertIn("redistribute(placements=", str(cm.exception))
            return
        y = x.masked_scatter(dm, ds)
        self.assertEqual(list(y.placements), exp)
        # Integer-valued pieces: even Partial sums are exact, so every value equals torch's.
        assert_tensor_equal(self, y, torch.masked_scatter(t, m, src))

    def test_1d_meshes(self):
        for mesh, (ts, ms), density in itertools.product((CPU2, CPU3), [((5, 7), (5, 7)), ((5, 7), (7,)),
                                                                         ((7,), (5, 7)), ((4, 1, 6), (3, 6))],
                                                          (0.4, 1.0)):
            t = int_valued(*ts, seed=1)
            m = mask_of(ms, density, seed=len(ts))
            n = torch.broadcast_shapes(ts, ms).numel()
            src = int_valued(n + 2, seed=3)
            pa_opts = [R, P] + [S(d) for d in range(len(ts))]
            pm_opts = [R] + [S(d) for d in range(len(ms))]
            for pa, pm, ps in itertools.product(pa_opts, pm_opts, [R, P, S(0)]):
                with self.subTest(mesh=mesh.shape, input=ts, mask=ms, density=density, placements=(pa, pm, ps)):
                    self.check_combo(mesh, t, m, src, [pa], [pm], [ps])

    def test_2x2_mesh(self):
        t = int_valued(5, 6, 3, seed=4)
        m = mask_of((5, 6, 3), 0.5, seed=5)
        src = int_valued(100, seed=6)
        pls = [[S(0), S(1)], [S(1), S(0)], [S(0), S(0)], [S(2), S(2)], [S(0), P], [P, S(1)], [P, P], [R, S(2)],
               [P, R], [R, R]]
        spls = [[R, R], [P, R], [R, P], [P, P], [S(0), R]]
        for pa, ps in itertools.product(pls, spls):
            with self.subTest(input=pa, source=ps):
                self.check_combo(CPU2x2, t, m, src, pa, [R, R], ps)
        with self.subTest(mask="sharded"):
            self.check_combo(CPU2x2, t, m, src, [S(0), R], [S(0), R], [R, R])

    def test_random_float_shards_are_exact(self):
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            t = randn(7, 9, seed=1).to(dtype)
            m = mask_of((7, 9), 0.5, seed=2)
            src = randn(70, seed=3).to(dtype)
            for mesh, pl in ((CPU3, [S(0)]), (CPU3, [S(1)]), (CPU2x2, [S(1), S(0)]), (CPU2x2, [S(0), S(0)])):
                with self.subTest(dtype=dtype, mesh=mesh.shape, placements=pl):
                    x = dtorch.from_torch(t, mesh, pl)
                    y = x.masked_scatter(dtorch.from_torch(m, mesh), dtorch.from_torch(src, mesh))
                    self.assertEqual(list(y.placements), pl)
                    assert_tensor_equal(self, y, torch.masked_scatter(t, m, src))

    def test_placement_error_names_the_fix(self):
        x = dtorch.from_torch(torch.zeros(4, 6), CPU2, [S(0)])
        m = dtorch.from_torch(torch.ones(4, 6, dtype=torch.bool), CPU2, [S(0)])
        s = dtorch.from_torch(torch.arange(24.0), CPU2)
        with self.assertRaises(PlacementError) as cm:
            x.masked_scatter(m, s)
        self.assertIn("input 1's .redistribute(placements=[Replicate()])", str(cm.exception))
        y = x.masked_scatter(m.redistribute(placements=[R]), s)
        self.assertEqual(list(y.placements), [S(0)])
        assert_tensor_equal(self, y, torch.arange(24.0).reshape(4, 6))


if __name__ == "__main__":
    unittest.main()
