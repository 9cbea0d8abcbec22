"""Elementwise placement rules on 2-, 3-device and 2x2 meshes with uneven shapes: every accepted
combination computes torch's value (exact for Shard/Replicate, allclose where Partial is involved),
every other one raises PlacementError at the call. The expected placements come from the rules
documented in dtorch_ops.h ("elementwise math"), modelled in ew_helpers.py."""

import itertools
import unittest

import torch

import dtorch
from dtorch import Partial, PlacementError, Replicate, Shard
from dtorch.test.test_util import assert_replicas_equal, genuine_partial

from ew_helpers import assert_exact, broadcast, expected_sr, expected_sr_mesh, values
from helpers import CPU2, CPU3, CPU2x2, placements_1d, placements_2d

# Operators this module tests on meshes (tests/python/test_registry.py).
TESTED_OPS = {"add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "maximum", "minimum", "eq", "ne",
              "lt", "gt", "logical_and", "logical_or", "logical_not", "bitwise_and", "bitwise_not", "where",
              "masked_fill", "clamp", "neg", "abs", "exp", "sqrt", "sigmoid", "floor", "isnan", "to", "half",
              "float", "long", "bool", "bfloat16", "equal", "erfc", "xlogy"}

# ATen's CPU kernels of these calls round differently in their vectorised body and their scalar tail,
# or when a broadcast operand's piece is a single element (torch's own op on a slice can differ
# from the same elements of the op on the whole tensor by an ulp): docs/decisions.md lists them for
# torch 2.13, as tests/python/ew_position_probe.py finds them. Their shards are compared with
# allclose; every other call is compared bit for bit.
FLOATS, HALVES = (torch.float32, torch.float64), (torch.float16, torch.bfloat16)
POW_EXACT_EXPONENTS = (0, 1, 2, 3, -1, -2, 0.5, -0.5)  # special-cased in ATen (but bfloat16 -0.5)


def position_dependent(op, dtype, exponent="tensor", scaled_tensor=False, rounding=False):
    """Whether the call is on the list. pow: `exponent` is "tensor", "base" (a scalar base) or the
    scalar exponent; add/sub: `scaled_tensor` when an alpha != 1 scales a tensor operand; div:
    `rounding` with a rounding_mode."""
    if op in ("sigmoid", "exp2"):
        return dtype in FLOATS
    if op in ("sinh", "cosh"):  # integers and bool compute in the default float dtype
        return dtype in FLOATS or not dtype.is_floating_point
    if op == "rsqrt":
        return dtype in HALVES
    if op in ("add", "sub"):
        return scaled_tensor and dtype.is_floating_point
    if op in ("div", "floor_divide"):
        return (rounding or op == "floor_divide") and dtype in HALVES
    if op == "pow":
        if exponent in ("tensor", "base"):
            return dtype in FLOATS
        return (dtype in FLOATS and exponent not in POW_EXACT_EXPONENTS) or (dtype == torch.bfloat16
                                                                              and exponent == -0.5)
    return False


R, P = Replicate(), Partial()
S0, S1 = Shard(0), Shard(1)
MESHES = (CPU2, CPU3)


def place(t, mesh, pl, seed=0):
    """``t`` on ``mesh``; a Partial holds a different piece on every coordinate (genuine_partial)."""
    return genuine_partial(t, mesh, pl if isinstance(pl, list) else [pl], seed)


def ints(t):
    """Integer-valued floats near ``t``: Partial pieces and linear ops on them are exact."""
    return t.round() if t.dtype.is_floating_point else t


# Ops whose value on integer-valued operands is computed exactly piece by piece, so that a Partial
# result (or a sum over its pieces) equals torch's bit for bit.
EXACT_ON_INTEGERS = {"neg", "add", "sub", "mul", "to"}


def integer_valued(t):
    return not t.dtype.is_floating_point or bool(torch.equal(t, t.round()))


class MeshCase(unittest.TestCase):
    def check(self, got_fn, ref, expected, partial_in, op, inexact=False):
        """expected: list of placements, or None (PlacementError); inexact: position_dependent().
        A pending sum is compared with allclose, or bit for bit when ``op`` is exact on the
        integer-valued values given; every result's replicas are compared bitwise."""
        if expected is None:
            with self.assertRaises(PlacementError) as cm:
                got_fn()
            msg = str(cm.exception)
            self.assertIn(op, msg)
            self.assertIn("redistribute", msg)
            return
        z = got_fn()
        self.assertEqual(z.placements, expected)
        assert_replicas_equal(self, z)
        summed = partial_in or any(p.is_partial() for p in expected)
        if summed and op in EXACT_ON_INTEGERS and integer_valued(ref):
            assert_exact(self, z, ref, op)
        elif summed or inexact:
            got = z.to_torch()
            self.assertEqual(got.dtype, ref.dtype)
            self.assertEqual(got.shape, ref.shape)
            self.assertTrue(torch.allclose(got.double(), ref.double(), rtol=1e-5, atol=1e-6, equal_nan=True),
                            f"{op}:\n{got}\nexpected\n{ref}")
        else:
            assert_exact(self, z, ref, op)


class TestUnary(MeshCase):
    OPS = {"neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "sqrt": torch.sqrt, "sigmoid": torch.sigmoid,
           "floor": torch.floor, "isnan": torch.isnan, "logical_not": torch.logical_not, "asin": torch.asin,
           "acos": torch.acos, "atan": torch.atan, "tan": torch.tan, "sinh": torch.sinh, "cosh": torch.cosh,
           "erfc": torch.erfc}

    def test_1d(self):
        a = values((5, 7), torch.float32, 1)
        for mesh, p, (name, fn) in itertools.product(MESHES, placements_1d(2), self.OPS.items()):
            with self.subTest(mesh=mesh, p=p, op=name):
                v = ints(a) if p.is_partial() else a  # a pending sum of integers: neg is exact
                x = place(v, mesh, p)
                exp = [p] if not p.is_partial() or name == "neg" else None
                self.check(lambda: getattr(dtorch, name)(x), fn(v), exp, p.is_partial(), name,
                           position_dependent(name, a.dtype))

    def test_2x2(self):
        a = values((5, 7), torch.float32, 2)
        for pl, name in itertools.product(placements_2d(2), ("neg", "exp", "isnan")):
            with self.subTest(pl=pl, op=name):
                v = ints(a) if P in pl else a
                x = place(v, CPU2x2, pl)
                exp = pl if name == "neg" or not any(p.is_partial() for p in pl) else None
                self.check(lambda: getattr(x, name)(), getattr(v, name)(), exp, P in pl, name,
                           position_dependent(name, a.dtype))

    def test_int_and_bool(self):
        i = values((5, 7), torch.int64, 3)
        for mesh, p in itertools.product(MESHES, (R, S0, S1)):
            with self.subTest(mesh=mesh, p=p):
                assert_exact(self, place(i, mesh, p).bitwise_not(), i.bitwise_not())
                assert_exact(self, place(i, mesh, p).exp(), i.exp())
                assert_exact(self, place(i > 0, mesh, p).logical_not(), (i > 0).logical_not())


class TestCasts(MeshCase):
    def test_1d(self):
        for mesh, p, dt in itertools.product(MESHES, placements_1d(2), (torch.float16, torch.int64, torch.bool,
                                                                       torch.bfloat16, torch.float32)):
            with self.subTest(mesh=mesh, p=p, dtype=dt):
                # nan/inf/-0.0 only where the value is not a pending sum (-0.0 + 0.0 is 0.0).
                a = values((5, 7), torch.float32, 4, special=not p.is_partial())
                a = ints(a) if p.is_partial() else a
                x = place(a, mesh, p)
                exp = [p] if not p.is_partial() or dt == torch.float32 else None
                self.check(lambda: x.to(dt), a.to(dt), exp, p.is_partial(), "to")
        x = place(values((5, 7), torch.float64, 5), CPU3, S1)
        for name in ("half", "float", "long", "bool", "bfloat16"):
            with self.subTest(op=name):
                z = getattr(x, name)()
                self.assertEqual(z.placements, [S1])
                assert_exact(self, z, getattr(values((5, 7), torch.float64, 5), name)())

    def test_2x2(self):
        a = values((5, 6), torch.float32, 6)
        for pl in placements_2d(2):
            with self.subTest(pl=pl):
                exp = None if P in pl else pl
                self.check(lambda: place(a, CPU2x2, pl).half(), a.half(), exp, P in pl, "to")


class TestBinary(MeshCase):
    SHAPES = [((5, 7), (5, 7)), ((5, 7), (7,)), ((7,), (5, 7)), ((5, 1), (5, 7)), ((1, 7), (1, 7)), ((3, 4), ())]
    OPS = {
        "maximum": (torch.maximum, dtorch.maximum),
        "eq": (torch.eq, dtorch.eq),
        "pow": (torch.pow, dtorch.pow),
        "remainder": (torch.remainder, dtorch.remainder),
        "div_floor": (lambda a, b: torch.div(a, b, rounding_mode="floor"),
                      lambda a, b: dtorch.div(a, b, rounding_mode="floor")),
        "logical_and": (torch.logical_and, dtorch.logical_and),
        "xlogy": (torch.xlogy, dtorch.xlogy),
    }

    def test_nonlinear_1d(self):
        for (sa, sb), (name, (tf, df)) in itertools.product(self.SHAPES, self.OPS.items()):
            a, b = values(sa, torch.float32, 7), values(sb, torch.float32, 8, positive=True)
            out = broadcast(sa, sb)
            for mesh, pa, pb in itertools.product(MESHES, placements_1d(len(sa)), placements_1d(len(sb))):
                with self.subTest(mesh=mesh, op=name, sa=sa, sb=sb, pa=pa, pb=pb):
                    x, y = place(a, mesh, pa), place(b, mesh, pb)
                    exp = expected_sr([pa, pb], [sa, sb], out)
                    op = name.split("_")[0]
                    self.check(lambda: df(x, y), tf(a, b), [exp] if exp else None, False, op,
                               position_dependent(op, a.dtype, rounding=name != op))

    def test_linear_with_alpha(self):
        """add/sub with alpha keep (P,P)->P; mul (P,R), (R,P); div (P,R)."""
        rules = {"add": {(P, P)}, "sub": {(P, P)}, "mul": {(P, R), (R, P)}, "div": {(P, R)}}
        a0, b0 = values((5, 7), torch.float32, 9), values((7,), torch.float32, 10, positive=True)
        for mesh, name, pa, pb in itertools.product(MESHES, rules, placements_1d(2), placements_1d(1)):
            kw = {"alpha": 3} if name in ("add", "sub") else {}
            with self.subTest(mesh=mesh, op=name, pa=pa, pb=pb):
                # With a pending sum, integer values (b >= 1): add, sub and mul are then exact piece by piece.
                a, b = (ints(a0), b0.ceil()) if P in (pa, pb) else (a0, b0)
                x, y = place(a, mesh, pa), place(b, mesh, pb, seed=1)
                if pa.is_partial() or pb.is_partial():
                    exp = [P] if (pa, pb) in rules[name] else None
                else:
                    e = expected_sr([pa, pb], [(5, 7), (7,)], (5, 7))
                    exp = [e] if e else None
                ref = getattr(torch, name)(a, b, **kw)
                self.check(lambda: getattr(dtorch, name)(x, y, **kw), ref, exp, P in (pa, pb), name,
                           position_dependent(name, a.dtype, scaled_tensor=bool(kw)))

    def test_scalar_forms(self):
        a = values((5, 7), torch.float32, 11, positive=True)
        f32 = a.dtype
        cases = [  # (name, torch call, dtorch call, Partial accepted, position-dependent)
            ("mul", lambda t: torch.mul(t, 3), lambda t: dtorch.mul(t, 3), True, False),
            ("mul", lambda t: torch.mul(3, t), lambda t: dtorch.mul(3, t), True, False),
            ("div", lambda t: t / 4, lambda t: t / 4, True, False),
            ("div", lambda t: torch.div(2, t), lambda t: dtorch.div(2, t), False, False),
            ("div", lambda t: torch.div(t, 2, rounding_mode="trunc"),
             lambda t: dtorch.div(t, 2, rounding_mode="trunc"), False, position_dependent("div", f32, rounding=True)),
            ("add", lambda t: torch.add(t, 2, alpha=3), lambda t: dtorch.add(t, 2, alpha=3), False,
             position_dependent("add", f32)),
            ("sub", lambda t: torch.sub(2, t, alpha=3), lambda t: dtorch.sub(2, t, alpha=3), False,
             position_dependent("sub", f32, scaled_tensor=True)),
            ("pow", lambda t: t ** 2, lambda t: t ** 2, False, position_dependent("pow", f32, exponent=2)),
            ("pow", lambda t: 2 ** t, lambda t: 2 ** t, False, position_dependent("pow", f32, exponent="base")),
            ("floor_divide", lambda t: t // 0.3, lambda t: t // 0.3, False, position_dependent("floor_divide", f32)),
            ("remainder", lambda t: 5 % t, lambda t: 5 % t, False, False),
            ("lt", lambda t: t < 1, lambda t: t < 1, False, False),
            ("gt", lambda t: 1 < t, lambda t: 1 < t, False, False),
            ("ne", lambda t: t != 1, lambda t: t != 1, False, False),
            ("xlogy", lambda t: torch.xlogy(t, 3), lambda t: dtorch.xlogy(t, 3), False, False),
            ("xlogy", lambda t: torch.xlogy(2, t), lambda t: dtorch.xlogy(2, t), False, False),
            ("xlogy", lambda t: t.xlogy(0.5), lambda t: t.xlogy(0.5), False, False),
        ]
        b = a > 1
        for mesh, p in itertools.product(MESHES, placements_1d(2)):
            with self.subTest(mesh=mesh, p=p, op="bitwise_and"):
                self.check(lambda: place(b, mesh, p) & True, b & True, None if p.is_partial() else [p], False,
                           "bitwise_and")
        for mesh, p, (name, tf, df, linear, inexact) in itertools.product(MESHES, placements_1d(2), cases):
            with self.subTest(mesh=mesh, p=p, op=name):
                v = a.ceil() if p.is_partial() else a  # integer-valued: mul of a pending sum is exact
                x = place(v, mesh, p)
                exp = [p] if not p.is_partial() or linear else None
                self.check(lambda: df(x), tf(v), exp, p.is_partial(), name, inexact)

    def test_2x2(self):
        shapes = [((4, 6), (4, 6)), ((5, 6), (6,)), ((5, 1), (5, 6))]
        for (sa, sb), name in itertools.product(shapes, ("maximum", "lt", "xlogy")):
            a, b = values(sa, torch.float32, 12), values(sb, torch.float32, 13)
            out = broadcast(sa, sb)
            for pa, pb in itertools.product(placements_2d(len(sa)), placements_2d(len(sb))):
                with self.subTest(op=name, sa=sa, sb=sb, pa=pa, pb=pb):
                    x, y = place(a, CPU2x2, pa), place(b, CPU2x2, pb)
                    exp = expected_sr_mesh((2, 2), [sa, sb], [pa, pb], out)
                    self.check(lambda: getattr(dtorch, name)(x, y), getattr(torch, name)(a, b), exp, False, name)

    def test_nested_shards_2x2(self):
        a, b = values((8, 6), torch.float32, 14), values((8, 6), torch.float32, 15)
        combos = [([S0, S0], [S0, S0]), ([S0, S0], [S0, R]), ([S0, S0], [R, R]), ([S0, R], [R, S0]),
                  ([S0, S0], [R, S0]), ([S1, S1], [S1, S1]), ([R, S0], [S0, S0])]
        for pa, pb in combos:
            with self.subTest(pa=pa, pb=pb):
                x, y = place(a, CPU2x2, pa), place(b, CPU2x2, pb)
                exp = expected_sr_mesh((2, 2), [(8, 6), (8, 6)], [pa, pb], (8, 6))
                self.check(lambda: dtorch.maximum(x, y), torch.maximum(a, b), exp, False, "maximum")

    def test_dtypes(self):
        for dt, name in itertools.product((torch.float16, torch.bfloat16, torch.int64, torch.bool),
                                          ("maximum", "eq", "logical_or", "add", "mul", "bitwise_and", "xlogy")):
            a, b = values((5, 7), dt, 16), values((7,), dt, 17, positive=True)
            tf = getattr(torch, name)
            try:
                ref = tf(a, b)
            except RuntimeError as e:
                # e.g. bitwise_and of floats: sharded, dtorch raises torch's class at the call too.
                with self.subTest(dtype=dt, op=name, torch_raises=True):
                    with self.assertRaises(type(e)):
                        getattr(dtorch, name)(place(a, CPU3, S0), place(b, CPU3, R))
                continue
            for pa, pb in ((S0, R), (S1, S0), (R, S0), (S1, R)):
                with self.subTest(dtype=dt, op=name, pa=pa, pb=pb):
                    exp = expected_sr([pa, pb], [(5, 7), (7,)], (5, 7))
                    self.check(lambda: getattr(dtorch, name)(place(a, CPU3, pa), place(b, CPU3, pb)), ref,
                               [exp] if exp else None, False, name, position_dependent(name, dt))

    def test_equal(self):
        a = values((5, 7), torch.float32, 18)
        b = a.clone()
        b[4, 6] = 0.5
        i = a.round().to(torch.int64)  # integer-valued: Partial sums are exact
        for mesh, pa, pb in itertools.product(MESHES, placements_1d(2), placements_1d(2)):
            with self.subTest(mesh=mesh, pa=pa, pb=pb):
                self.assertTrue(dtorch.equal(place(i, mesh, pa), place(i, mesh, pb)))
                self.assertTrue(place(i, mesh, pa).equal(place(i.clone(), mesh, pb)))
                self.assertFalse(dtorch.equal(place(a, mesh, pa), place(b, mesh, pb)))


class TestSelection(MeshCase):
    def test_where(self):
        cond = values((5, 1), torch.bool, 20)
        a, b = values((5, 7), torch.float32, 21), values((7,), torch.float64, 22)
        ref = torch.where(cond, a, b)
        for mesh in MESHES:
            for pc, pa, pb in itertools.product(placements_1d(2), placements_1d(2), placements_1d(1)):
                with self.subTest(mesh=mesh, pc=pc, pa=pa, pb=pb):
                    c, x, y = place(cond, mesh, pc), place(a, mesh, pa), place(b, mesh, pb)
                    exp = expected_sr([pc, pa, pb], [(5, 1), (5, 7), (7,)], (5, 7))
                    self.check(lambda: dtorch.where(c, x, y), ref, [exp] if exp else None, False, "where")
            for pc, pa in itertools.product(placements_1d(2), placements_1d(2)):
                with self.subTest(mesh=mesh, pc=pc, pa=pa, scalar=True):
                    c, x = place(cond, mesh, pc), place(a, mesh, pa)
                    exp = expected_sr([pc, pa], [(5, 1), (5, 7)], (5, 7))
                    self.check(lambda: dtorch.where(c, 0.5, x), torch.where(cond, 0.5, a), [exp] if exp else None,
                               False, "where")
                    exp = expected_sr([pc], [(5, 1)], (5, 1))
                    self.check(lambda: dtorch.where(c, 1, 0), torch.where(cond, 1, 0), [exp] if exp else None,
                               False, "where")

    def test_where_2x2(self):
        cond = values((4, 6), torch.bool, 23)
        a, b = values((4, 6), torch.float32, 24), values((6,), torch.float32, 25)
        pls = placements_2d(2, partial=False)
        for pc, pa in itertools.product(pls, pls):
            for pb in ([R, R], [R, S0], [S0, R]):
                with self.subTest(pc=pc, pa=pa, pb=pb):
                    c, x, y = place(cond, CPU2x2, pc), place(a, CPU2x2, pa), place(b, CPU2x2, pb)
                    exp = expected_sr_mesh((2, 2), [(4, 6), (4, 6), (6,)], [pc, pa, pb], (4, 6))
                    self.check(lambda: dtorch.where(c, x, y), torch.where(cond, a, b), exp, False, "where")
        with self.assertRaises(PlacementError):
            dtorch.where(place(cond, CPU2x2, [R, P]), place(a, CPU2x2, [R, R]), 0.0)

    def test_masked_fill(self):
        a, m = values((5, 7), torch.float32, 26), values((7,), torch.bool, 27)
        v = torch.tensor(-3.0)
        for mesh, pa, pm in itertools.product(MESHES, placements_1d(2), placements_1d(1)):
            with self.subTest(mesh=mesh, pa=pa, pm=pm):
                x, mk = place(a, mesh, pa), place(m, mesh, pm)
                exp = expected_sr([pa, pm], [(5, 7), (7,)], (5, 7))
                self.check(lambda: x.masked_fill(mk, 2.5), a.masked_fill(m, 2.5), [exp] if exp else None, False,
                           "masked_fill")
                for pv in (R, P):
                    exp_v = expected_sr([pa, pm, pv], [(5, 7), (7,), ()], (5, 7))
                    vv = place(v, mesh, pv)
                    self.check(lambda: x.masked_fill(mk, vv), a.masked_fill(m, v), [exp_v] if exp_v else None,
                               False, "masked_fill")

    def test_clamp(self):
        a, lo, hi = values((5, 7), torch.float32, 28), values((7,), torch.float32, 29) - 1, values((5, 1),
                                                                                                  torch.float32, 30)
        for mesh, pa in itertools.product(MESHES, placements_1d(2)):
            with self.subTest(mesh=mesh, pa=pa):
                x = place(a, mesh, pa)
                exp = None if pa.is_partial() else [pa]
                self.check(lambda: x.clamp(-0.5, 0.5), a.clamp(-0.5, 0.5), exp, False, "clamp")
                self.check(lambda: x.clamp(max=1), a.clamp(max=1), exp, False, "clamp")
            for pl, ph in itertools.product(placements_1d(1), placements_1d(2)):
                with self.subTest(mesh=mesh, pa=pa, pl=pl, ph=ph):
                    x, l_, h_ = place(a, mesh, pa), place(lo, mesh, pl), place(hi, mesh, ph)
                    exp = expected_sr([pa, pl, ph], [(5, 7), (7,), (5, 1)], (5, 7))
                    self.check(lambda: x.clamp(l_, h_), a.clamp(lo, hi), [exp] if exp else None, False, "clamp")


    def test_masked_fill_and_clamp_2x2(self):
        a, m, lo = values((5, 6), torch.float32, 34), values((5, 1), torch.bool, 35), values((6,), torch.float32, 36)
        for pa, pm in itertools.product(placements_2d(2), placements_2d(2)):
            with self.subTest(pa=pa, pm=pm):
                x, mk = place(a, CPU2x2, pa), place(m, CPU2x2, pm)
                exp = expected_sr_mesh((2, 2), [(5, 6), (5, 1)], [pa, pm], (5, 6))
                self.check(lambda: x.masked_fill(mk, 0.0), a.masked_fill(m, 0.0), exp, False, "masked_fill")
        for pa, pl in itertools.product(placements_2d(2), placements_2d(1)):
            with self.subTest(pa=pa, pl=pl):
                x, l_ = place(a, CPU2x2, pa), place(lo, CPU2x2, pl)
                exp = expected_sr_mesh((2, 2), [(5, 6), (6,)], [pa, pl], (5, 6))
                one = torch.tensor(1.0)
                self.check(lambda: x.clamp(l_, place(one, CPU2x2, [R, R])), a.clamp(lo, one), exp, False, "clamp")

    def test_non_contiguous_sources(self):
        base = values((7, 5), torch.float32, 37)
        a = base.t()  # (5, 7), non-contiguous
        cond = (base > 0).t()
        for mesh, p in itertools.product(MESHES + (CPU2x2,), (S0, S1)):
            pl = [p] if mesh.ndim == 1 else [p, R]
            with self.subTest(mesh=mesh, p=p):
                x, c = place(a, mesh, pl), place(cond, mesh, pl)
                self.check(lambda: dtorch.where(c, x.exp(), -x), torch.where(cond, a.exp(), -a), pl, False, "where")


class TestInplace(MeshCase):
    def test_placements_follow_the_op(self):
        a, b = values((5, 7), torch.float32, 31), values((5, 7), torch.float32, 32)
        x = place(a, CPU3, R)
        alias = x
        x += place(b, CPU3, S1)
        self.assertIs(x, alias)
        self.assertEqual(x.placements, [S1])
        assert_exact(self, x, a + b)
        x.mul_(2).clamp_(min=0.0)
        self.assertEqual(x.placements, [S1])
        assert_exact(self, x, ((a + b) * 2).clamp(min=0.0))
        p = place(ints(a), CPU3, P)
        p += place(ints(b), CPU3, P, seed=1)
        p *= 3
        self.assertEqual(p.placements, [P])
        assert_exact(self, p, (ints(a) + ints(b)) * 3)

    def test_rejections_leave_self_alone(self):
        a = values((5, 7), torch.float32, 33)
        x = place(ints(a), CPU2, P)
        with self.assertRaises(PlacementError):
            x.exp_()
        with self.assertRaises(PlacementError):
            x += place(a, CPU2, S0)
        h = place(a.half(), CPU2, P)
        with self.assertRaises(PlacementError):  # the float32 sum would need a cast of a Partial
            h += place(a, CPU2, P)
        self.assertEqual(h.dtype, torch.float16)
        self.assertEqual(x.placements, [P])
        assert_exact(self, x, ints(a))
        # masked_fill_ on a shard, cast back from a wider result on shards.
        y = place(a.half(), CPU3, S0)
        y.masked_fill_(place(a > 0, CPU3, S0), 0.0)
        y -= place(a, CPU3, R)
        ref = a.half().masked_fill(a > 0, 0.0)
        ref -= a
        self.assertEqual(y.placements, [S0])
        assert_exact(self, y, ref)


if __name__ == "__main__":
    unittest.main()
