"""Elementwise ops on a one-device mesh against eager torch, bit for bit: every dtype torch has on
CPU, broadcasting, scalars on either side, operators, functions, methods, in-place forms, type
promotion and the errors torch raises. Placements are in test_elementwise_mesh.py."""

import itertools
import operator
import unittest

import torch

import dtorch
from dtorch import PlacementError, Replicate

from ew_helpers import ALL_DTYPES, assert_exact, assert_same_outcome, values
from helpers import cpu_only

# Operators this module tests against eager PyTorch (tests/python/test_registry.py).
TESTED_OPS = {
    "add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "maximum", "minimum",
    "eq", "ne", "lt", "le", "gt", "ge", "equal", "logical_and", "logical_or", "logical_xor", "logical_not",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "xlogy", "where", "masked_fill", "clamp", "clip",
    "neg", "abs", "exp", "exp2", "expm1", "asin", "acos", "atan", "tan", "sinh", "cosh",
    "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "square",
    "reciprocal", "sin", "cos", "tanh", "sigmoid", "erf", "erfc", "floor", "ceil", "trunc", "round", "sign",
    "isnan", "isinf", "isfinite", "to", "type_as", "half", "float", "double", "bfloat16", "int", "long", "bool",
}

UNARY = ["neg", "abs", "exp", "exp2", "expm1", "asin", "acos", "atan", "tan", "sinh", "cosh",
         "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "square",
         "reciprocal", "sin", "cos", "tanh", "sigmoid", "erf", "erfc", "floor", "ceil", "trunc", "round", "sign",
         "relu", "isnan", "isinf", "isfinite", "logical_not", "bitwise_not"]

# name -> torch function of (input, other); dtorch's module function has the same name unless noted.
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "floor_divide": torch.floor_divide, "remainder": torch.remainder, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor,
    "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
    "xlogy": torch.xlogy,
}
SCALAR_OK = [n for n in BINARY if n not in ("maximum", "minimum", "logical_and", "logical_or", "logical_xor")]

OPERATORS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
    "%": operator.mod, "**": operator.pow, "&": operator.and_, "|": operator.or_, "^": operator.xor,
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
}
INPLACE_OPERATORS = {
    "+": operator.iadd, "-": operator.isub, "*": operator.imul, "/": operator.itruediv, "//": operator.ifloordiv,
    "%": operator.imod, "**": operator.ipow, "&": operator.iand, "|": operator.ior, "^": operator.ixor,
}

MIXED_PAIRS = [(torch.int64, torch.float32), (torch.bool, torch.int32), (torch.uint8, torch.int8),
               (torch.float16, torch.bfloat16), (torch.int32, torch.float64), (torch.bool, torch.float16),
               (torch.float32, torch.float64), (torch.int16, torch.bfloat16)]
SHAPES = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((), (3, 2))]
SCALARS = [2, -3, 2.5, True, False, 0]


def d(t):
    """A one-device dtorch tensor; from a non-contiguous torch view when the shape allows one."""
    if t.dim() >= 2:
        t = t.transpose(0, 1).contiguous().transpose(0, 1)  # same values, non-contiguous strides
        assert not t.is_contiguous() or min(t.shape) <= 1
    return dtorch.from_torch(t)


class TestUnary(unittest.TestCase):
    def test_every_dtype(self):
        for dtype, name in itertools.product(ALL_DTYPES, UNARY):
            with self.subTest(dtype=dtype, op=name):
                a = values((4, 5), dtype, seed=1, special=True)
                x = d(a)
                assert_same_outcome(self, lambda: getattr(a, name)(), lambda: getattr(x, name)(), f"{name} {dtype}")
                if name != "relu":  # dtorch.nn.functional owns relu
                    assert_same_outcome(self, lambda: getattr(torch, name)(a), lambda: getattr(dtorch, name)(x),
                                        f"dtorch.{name} {dtype}")

    def test_inplace_every_dtype(self):
        for dtype, name in itertools.product((torch.int64, torch.float32, torch.bfloat16, torch.bool), UNARY):
            if name in ("isnan", "isinf", "isfinite"):
                continue
            with self.subTest(dtype=dtype, op=name):
                a = values((3, 4), dtype, seed=2, special=True)
                x = d(a)
                alias = x
                kt, vt = "ok", None
                try:
                    ref = a.clone()
                    getattr(ref, name + "_")()
                    vt = ref
                except Exception as e:  # noqa: BLE001
                    kt, vt = "err", e
                if kt == "err":
                    with self.assertRaises(type(vt)):
                        getattr(x, name + "_")()
                        x.to_torch()
                    continue
                r = getattr(x, name + "_")()
                self.assertIs(r, x)
                self.assertIs(alias, x)
                assert_exact(self, x, vt, f"{name}_ {dtype}")

    def test_operators_and_aliases(self):
        a = values((4, 3), torch.float32, seed=3, special=True)
        i = values((4, 3), torch.int64, seed=4)
        b = values((4, 3), torch.bool, seed=5)
        x, xi, xb = d(a), d(i), d(b)
        assert_exact(self, -x, -a)
        assert_exact(self, abs(x), abs(a))
        assert_exact(self, ~xi, ~i)
        assert_exact(self, ~xb, ~b)
        assert_exact(self, x.absolute(), a.absolute())
        assert_exact(self, x.fix(), a.fix())
        assert_exact(self, x.negative(), a.negative())
        assert_exact(self, dtorch.absolute(x), torch.absolute(a))
        assert_exact(self, dtorch.fix(x), torch.fix(a))
        self.assertIs(+x, x)
        with self.assertRaises(TypeError):
            ~x  # torch: ~ only on integer and bool tensors
        with self.assertRaises(RuntimeError):
            +xb

    def test_round_decimals(self):
        a = values((5, 6), torch.float32, seed=6) * 10
        x = d(a)
        for dec in (0, 1, 2, -1):
            with self.subTest(decimals=dec):
                assert_exact(self, x.round(decimals=dec), a.round(decimals=dec))
                assert_exact(self, dtorch.round(x, decimals=dec), torch.round(a, decimals=dec))
        y = d(a)
        y.round_(decimals=1)
        assert_exact(self, y, a.round(decimals=1))

    def test_default_dtype_promotion(self):
        i = values((3, 3), torch.int32, seed=7, positive=True)
        x = d(i)
        old = torch.get_default_dtype()
        try:
            torch.set_default_dtype(torch.float64)
            for name in ("exp", "sqrt", "sigmoid", "reciprocal"):
                with self.subTest(op=name):
                    assert_exact(self, getattr(x, name)(), getattr(i, name)())
        finally:
            torch.set_default_dtype(old)
        self.assertEqual(x.exp().dtype, torch.float32)


class TestBinary(unittest.TestCase):
    def check(self, name, a, b, **kw):
        fn = BINARY[name]
        x = d(a) if isinstance(a, torch.Tensor) else a
        y = d(b) if isinstance(b, torch.Tensor) else b
        assert_same_outcome(self, lambda: fn(a, b, **kw), lambda: getattr(dtorch, name)(x, y, **kw),
                            f"dtorch.{name}({a.dtype if isinstance(a, torch.Tensor) else a!r}, "
                            f"{b.dtype if isinstance(b, torch.Tensor) else b!r}, {kw})")
        if isinstance(a, torch.Tensor) and (isinstance(b, torch.Tensor) or name in SCALAR_OK):
            assert_same_outcome(self, lambda: getattr(a, name)(b, **kw), lambda: getattr(x, name)(y, **kw),
                                f"x.{name}")

    def test_same_dtype(self):
        for dtype, name in itertools.product(ALL_DTYPES, BINARY):
            for sa, sb in SHAPES[:2]:
                with self.subTest(dtype=dtype, op=name, sa=sa, sb=sb):
                    self.check(name, values(sa, dtype, 1), values(sb, dtype, 2, positive=True))

    def test_mixed_dtypes_and_broadcasting(self):
        for (da, db), name in itertools.product(MIXED_PAIRS, BINARY):
            for sa, sb in SHAPES[1:]:
                with self.subTest(dtypes=(da, db), op=name, sa=sa, sb=sb):
                    self.check(name, values(sa, da, 3), values(sb, db, 4, positive=True))
                    self.check(name, values(sb, db, 5), values(sa, da, 6, positive=True))

    def test_zero_dim_tensors_rank_like_scalars(self):
        # A 0-d float64 tensor does not promote a float32 tensor; a 0-d float with an int tensor does.
        cases = [(values((3, 2), torch.float32, 1), torch.tensor(2.5, dtype=torch.float64)),
                 (values((3, 2), torch.int32, 2), torch.tensor(1.5)),
                 (values((3, 2), torch.int8, 3), torch.tensor(300)),
                 (torch.tensor(2, dtype=torch.int64), values((3, 2), torch.float16, 4))]
        for (a, b), name in itertools.product(cases, ("add", "mul", "div", "maximum", "lt", "pow")):
            with self.subTest(a=a.dtype, b=b.dtype, op=name):
                self.check(name, a, b)

    def test_scalars(self):
        for dtype, name, s in itertools.product(ALL_DTYPES, SCALAR_OK, SCALARS):
            with self.subTest(dtype=dtype, op=name, scalar=s):
                a = values((3, 5), dtype, 7, positive=True)
                self.check(name, a, s)
                # torch's function form with the scalar first (torch.pow(2, t), torch.remainder(2, t)...).
                if name in ("add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "xlogy"):
                    self.check(name, s, a)

    def test_scalars_into_a_dropped_operand(self):
        # An operand that nothing else holds lends its buffer to the result (buffer reuse), so the
        # kernel runs in place: it must still round like torch's out-of-place call (bf16/fp16 `x * 0.044715`
        # once rounded the scalar to x's dtype first).
        for dtype, name, s in itertools.product(ALL_DTYPES, SCALAR_OK, SCALARS + [0.044715, 3.7]):
            with self.subTest(dtype=dtype, op=name, scalar=s):
                a = values((1000,), dtype, 8, positive=True)
                assert_same_outcome(self, lambda: getattr(torch, name)(a, s),
                                    lambda: getattr(dtorch, name)(d(a.clone()), s), f"dtorch.{name}(temp, {s!r})")

    def test_reflected_operators_with_a_scalar(self):
        # `s * t` is torch's t.__rmul__(s) = t.mul(s): a scalar second, kept in float for bf16/fp16;
        # torch.mul(s, t) (the function form, test_scalars) rounds it to t's dtype first.
        ops = [operator.add, operator.mul, operator.sub, operator.truediv, operator.floordiv, operator.mod,
               operator.pow, operator.and_, operator.or_, operator.xor]
        for dtype, op, s in itertools.product(ALL_DTYPES, ops, SCALARS + [0.044715, 3.7]):
            with self.subTest(dtype=dtype, op=op.__name__, scalar=s):
                a = values((1000,), dtype, 9, positive=True)
                x = d(a)
                assert_same_outcome(self, lambda: op(s, a), lambda: op(s, x), f"{s!r} {op.__name__} x")
                assert_same_outcome(self, lambda: op(s, a), lambda: op(s, d(a.clone())), f"{s!r} {op.__name__} temp")

    def test_maximum_and_logical_take_tensors(self):
        x = dtorch.ones(2, 3)
        for name in ("maximum", "minimum", "logical_and", "logical_or", "logical_xor"):
            with self.subTest(op=name):
                with self.assertRaises(TypeError):
                    getattr(x, name)(2)
                with self.assertRaises(TypeError):
                    getattr(dtorch, name)(x, 2.0)

    def test_alpha(self):
        alphas = [2, -1, 0.5, True, 1.0]
        for dtype, name, alpha in itertools.product((torch.float32, torch.bfloat16, torch.int64, torch.bool),
                                                    ("add", "sub"), alphas):
            with self.subTest(dtype=dtype, op=name, alpha=alpha):
                a, b = values((4, 5), dtype, 8), values((5,), dtype, 9)
                self.check(name, a, b, alpha=alpha)
                self.check(name, a, 3, alpha=alpha)
                self.check(name, 3, a, alpha=alpha)
                self.check(name, a, 1.5, alpha=alpha)

    def test_rounding_modes(self):
        for dtype, mode in itertools.product((torch.int64, torch.int8, torch.float32, torch.float16, torch.bool),
                                             (None, "trunc", "floor")):
            with self.subTest(dtype=dtype, mode=mode):
                a, b = values((4, 6), dtype, 10), values((4, 6), dtype, 11, positive=True)
                self.check("div", a, b, rounding_mode=mode)
                self.check("div", a, 3, rounding_mode=mode)
                self.check("div", a, -2.5, rounding_mode=mode)
                self.check("div", 7, b, rounding_mode=mode)
                self.check("div", a, 0, rounding_mode=mode)
        x = dtorch.ones(2)
        with self.assertRaises(RuntimeError):
            x.div(2, rounding_mode="round")
        with self.assertRaises(RuntimeError):
            dtorch.div(x, 2, rounding_mode="up")

    def test_operators(self):
        pairs = [(torch.float32, torch.float32), (torch.int64, torch.int64), (torch.int32, torch.float16),
                 (torch.bool, torch.bool), (torch.bfloat16, torch.int64), (torch.uint8, torch.int16)]
        for (da, db), (sym, fn) in itertools.product(pairs, OPERATORS.items()):
            with self.subTest(dtypes=(da, db), op=sym):
                a, b = values((3, 4), da, 12), values((4,), db, 13, positive=True)
                x, y = d(a), d(b)
                assert_same_outcome(self, lambda: fn(a, b), lambda: fn(x, y), f"x {sym} y")
                for s in (2, 2.5, True):
                    assert_same_outcome(self, lambda: fn(a, s), lambda: fn(x, s), f"x {sym} {s!r}")
                    assert_same_outcome(self, lambda: fn(s, a), lambda: fn(s, x), f"{s!r} {sym} x")

    def test_inplace_operators_rebind(self):
        for dtype, (sym, fn) in itertools.product((torch.float32, torch.int64, torch.bool),
                                                  INPLACE_OPERATORS.items()):
            for other in ("tensor", 2, 1.5):
                with self.subTest(dtype=dtype, op=sym, other=other):
                    a = values((3, 4), dtype, 14, positive=True)
                    b = values((4,), dtype, 15, positive=True) if other == "tensor" else other
                    x = d(a)
                    y = d(b) if other == "tensor" else b
                    alias = x
                    ref = a.clone()
                    try:
                        ref = fn(ref, b)
                        torch_err = None
                    except Exception as e:  # noqa: BLE001
                        torch_err = e
                    if torch_err is not None:
                        with self.assertRaises(type(torch_err)):
                            x = fn(x, y)
                            x.to_torch()
                        assert_exact(self, alias, a)  # a failed call leaves x alone
                        continue
                    x = fn(x, y)
                    self.assertIs(x, alias)
                    assert_exact(self, x, ref, f"x {sym}= {other}")

    def test_inplace_methods(self):
        a = values((3, 4), torch.float32, 16, positive=True)
        b = values((4,), torch.float32, 17, positive=True)
        cases = [("add_", (b,), {"alpha": 2}), ("sub_", (2,), {"alpha": 0.5}), ("mul_", (b,), {}),
                 ("div_", (b,), {"rounding_mode": "floor"}), ("div_", (3,), {}), ("pow_", (2,), {}),
                 ("floor_divide_", (b,), {}), ("remainder_", (1.5,), {}), ("xlogy_", (b,), {}), ("xlogy_", (3,), {}), ("clamp_", (), {"min": 0.7, "max": 1.5}),
                 ("clip_", (0.7,), {}), ("eq_", (b,), {}), ("lt_", (1.0,), {}),
                 ("masked_fill_", (torch.tensor([True, False, True, False]), -1.0), {})]
        for name, args, kw in cases:
            with self.subTest(op=name):
                x = d(a)
                dargs = [d(t) if isinstance(t, torch.Tensor) else t for t in args]
                r = getattr(x, name)(*dargs, **kw)
                self.assertIs(r, x)
                ref = a.clone()
                getattr(ref, name)(*args, **kw)
                assert_exact(self, x, ref, name)

    def test_inplace_rules(self):
        i = d(values((3, 4), torch.int64, 18))
        f = d(values((3, 4), torch.float32, 19))
        with self.assertRaisesRegex(RuntimeError, "can't be cast"):
            i.add_(0.5)
        with self.assertRaisesRegex(RuntimeError, "can't be cast"):
            i.div_(2)
        with self.assertRaisesRegex(RuntimeError, "can't be cast"):
            i.exp_()
        with self.assertRaisesRegex(RuntimeError, "can't be cast"):
            d(torch.ones(3, dtype=torch.bool)).add_(1)
        with self.assertRaisesRegex(RuntimeError, "shape"):
            d(values((4,), torch.float32, 20)).add_(f)
        with self.assertRaisesRegex(RuntimeError, "shape"):
            d(values((4,), torch.float32, 20)).masked_fill_(d(torch.ones(3, 4, dtype=torch.bool)), 1)
        # A wider result is cast back: torch computes float16 += float32 in float32, then rounds.
        h = values((3, 4), torch.float16, 21)
        w = values((3, 4), torch.float32, 22)
        x = d(h)
        x += d(w)
        self.assertEqual(x.dtype, torch.float16)
        ref = h.clone()
        ref += w
        assert_exact(self, x, ref)
        # int += float fails in torch, int += int64 tensor into int32 works.
        x32 = d(values((3, 4), torch.int32, 23))
        x32 += d(values((3, 4), torch.int64, 24))
        ref = values((3, 4), torch.int32, 23)
        ref += values((3, 4), torch.int64, 24)
        assert_exact(self, x32, ref)


class TestComparisons(unittest.TestCase):
    def test_reflected_and_python_values(self):
        a = values((3, 4), torch.float32, 30)
        x = d(a)
        assert_exact(self, 0 < x, 0 < a)
        assert_exact(self, 0.5 >= x, 0.5 >= a)
        assert_exact(self, 1 == x, 1 == a)
        assert_exact(self, dtorch.lt(0, x), a > 0)
        self.assertFalse(x == None)  # noqa: E711 - torch's behaviour: identity comparison
        self.assertTrue(x != None)  # noqa: E711
        self.assertFalse(x == "a")
        with self.assertRaises(TypeError):
            x < "a"
        with self.assertRaises(TypeError):
            x < torch.ones(3, 4)
        for alias, target in (("greater", "gt"), ("greater_equal", "ge"), ("less", "lt"), ("less_equal", "le"),
                              ("not_equal", "ne")):
            assert_exact(self, getattr(x, alias)(0.0), getattr(a, target)(0.0))
            assert_exact(self, getattr(dtorch, alias)(x, 0.0), getattr(torch, target)(a, 0.0))

    def test_tensors_stay_hashable(self):
        x, y = dtorch.ones(2), dtorch.ones(2)
        s = {x, y}
        self.assertEqual(len(s), 2)
        self.assertIn(x, s)
        self.assertEqual({x: 1}[x], 1)

    def test_equal(self):
        a = values((3, 4), torch.float32, 31)
        b = a.clone()
        b[1, 2] += 1
        cases = [(a, a.clone()), (a, b), (a, a[:2]), (a, a.double()), (a.to(torch.int64), a.to(torch.int64)),
                 (torch.tensor([float("nan")]), torch.tensor([float("nan")])), (a.bool(), a.bool())]
        for ta, tb in cases:
            with self.subTest(a=ta.dtype, b=tb.dtype, shapes=(ta.shape, tb.shape)):
                self.assertEqual(dtorch.equal(d(ta), d(tb)), torch.equal(ta, tb))
                self.assertEqual(d(ta).equal(d(tb)), ta.equal(tb))
                self.assertIsInstance(dtorch.equal(d(ta), d(tb)), bool)
        with self.assertRaises(TypeError):
            dtorch.equal(d(a), a)


class TestSelection(unittest.TestCase):
    def test_where(self):
        cond = values((3, 1), torch.bool, 40)
        dtypes = (torch.float32, torch.int64, torch.float16, torch.bool, torch.int8)
        for da, db in itertools.product(dtypes, repeat=2):
            with self.subTest(da=da, db=db):
                a, b = values((3, 4), da, 41), values((4,), db, 42)
                assert_same_outcome(self, lambda: torch.where(cond, a, b), lambda: dtorch.where(d(cond), d(a), d(b)))
                assert_same_outcome(self, lambda: a.where(cond, b), lambda: d(a).where(d(cond), d(b)))
        a = values((3, 4), torch.int32, 43)
        for sx, sy in ((2.5, 0), (True, 3), (1, 2), (0.5, -0.5)):
            with self.subTest(sx=sx, sy=sy):
                assert_same_outcome(self, lambda: torch.where(cond, a, sy), lambda: dtorch.where(d(cond), d(a), sy))
                assert_same_outcome(self, lambda: torch.where(cond, sx, a), lambda: dtorch.where(d(cond), sx, d(a)))
                assert_same_outcome(self, lambda: torch.where(cond, sx, sy), lambda: dtorch.where(d(cond), sx, sy))
        zd = torch.tensor(2.5, dtype=torch.float64)
        assert_same_outcome(self, lambda: torch.where(cond, a, zd), lambda: dtorch.where(d(cond), d(a), d(zd)))
        u8 = cond.to(torch.uint8)
        assert_same_outcome(self, lambda: torch.where(cond.int(), a, 0), lambda: dtorch.where(d(u8.int()), d(a), 0))
        with self.assertRaises(RuntimeError):
            dtorch.where(d(values((3, 4), torch.bool, 1)), d(values((2, 4), torch.float32, 1)), 0.0)
        with self.assertRaises(NotImplementedError):
            dtorch.where(d(cond))

    def test_masked_fill(self):
        for dtype in ALL_DTYPES:
            for value in (-1, 2.5, True, 0, 1e10, 300, float("inf"), float("nan")):
                with self.subTest(dtype=dtype, value=value):
                    a = values((3, 4), dtype, 50)
                    m = values((4,), torch.bool, 51)
                    assert_same_outcome(self, lambda: a.masked_fill(m, value), lambda: d(a).masked_fill(d(m), value))
        a = values((1, 4), torch.float32, 52)
        m = values((3, 1), torch.bool, 53)
        assert_exact(self, d(a).masked_fill(d(m), -2.0), a.masked_fill(m, -2.0))  # broadcasts to (3, 4)
        assert_exact(self, dtorch.masked_fill(d(a), d(m), -2.0), torch.masked_fill(a, m, -2.0))
        v = torch.tensor(7, dtype=torch.int64)
        assert_exact(self, d(a).masked_fill(d(m), d(v)), a.masked_fill(m, v))
        with self.assertRaises(RuntimeError):
            d(a).masked_fill(d(m), d(torch.tensor([7.0])))
        with self.assertRaises(RuntimeError):
            d(a).masked_fill(d(m.float()), 1.0)
        with self.assertRaises(TypeError):
            d(a).masked_fill(m, 1.0)

    def test_clamp(self):
        cases = [dict(min=-1), dict(max=2.5), dict(min=-1.5, max=1), dict(min=2, max=-2), dict(min=True),
                 dict(min=0, max=300), dict(min=float("nan"))]
        for dtype, kw in itertools.product(ALL_DTYPES, cases):
            with self.subTest(dtype=dtype, kw=kw):
                a = values((3, 4), dtype, 60, special=True)
                assert_same_outcome(self, lambda: a.clamp(**kw), lambda: d(a).clamp(**kw))
                assert_same_outcome(self, lambda: torch.clip(a, **kw), lambda: dtorch.clip(d(a), **kw))
        a = values((3, 4), torch.float32, 61)
        lo, hi = values((4,), torch.float32, 62) - 1, values((3, 1), torch.float64, 63) + 1
        assert_exact(self, d(a).clamp(d(lo), d(hi)), a.clamp(lo, hi))
        assert_exact(self, dtorch.clamp(d(a), min=d(lo)), torch.clamp(a, min=lo))
        assert_exact(self, d(a).clamp(max=d(hi)), a.clamp(max=hi))
        i = values((3, 4), torch.int32, 64)
        assert_exact(self, d(i).clamp(d(torch.tensor(1.5)), 2), i.clamp(torch.tensor(1.5), 2))
        assert_exact(self, d(a).clamp_min(0.5), a.clamp_min(0.5))
        assert_exact(self, d(a).clamp_max(0.5), a.clamp_max(0.5))
        with self.assertRaises(RuntimeError):
            d(a).clamp()


class TestCasts(unittest.TestCase):
    def test_every_pair(self):
        for src, dst in itertools.product(ALL_DTYPES, repeat=2):
            with self.subTest(src=src, dst=dst):
                a = values((3, 5), src, 70, special=True)
                x = d(a)
                assert_exact(self, x.to(dst), a.to(dst))
                assert_exact(self, x.to(dtype=dst), a.to(dtype=dst))
                assert_exact(self, x.type_as(d(torch.ones(1, dtype=dst))), a.type_as(torch.ones(1, dtype=dst)))

    def test_shortcuts(self):
        a = values((3, 5), torch.float64, 71, special=True)
        x = d(a)
        for name in ("half", "float", "double", "bfloat16", "int", "long", "bool", "short", "char", "byte"):
            with self.subTest(op=name):
                assert_exact(self, getattr(x, name)(), getattr(a, name)())

    @cpu_only("to('cpu') of a cpu tensor")
    def test_same_dtype_is_self(self):
        x = dtorch.ones(2, 3)
        self.assertIs(x.to(torch.float32), x)
        self.assertIs(x.float(), x)
        self.assertIs(x.type_as(x), x)
        self.assertIs(x.to("cpu"), x)
        y = x.to(torch.float32, copy=True)
        self.assertIsNot(y, x)
        x += 1  # rebinding x does not touch the copy
        assert_exact(self, y, torch.ones(2, 3))
        assert_exact(self, x, torch.full((2, 3), 2.0))
        self.assertIs(x.to(x), x)
        with self.assertRaises(TypeError):
            x.to(3)
        with self.assertRaises(NotImplementedError):
            x.to("cuda:0")


class TestErrors(unittest.TestCase):
    """Type-promotion and broadcasting errors: torch's exception type, raised at the call."""

    def test_raised_at_call(self):
        i = values((3, 4), torch.int64, 80)
        f = values((3, 4), torch.float32, 81)
        b = values((3, 4), torch.bool, 82)
        f23, f32 = values((2, 3), torch.float32, 83), values((3, 2), torch.float32, 84)
        cases = [
            ("bool - bool", lambda t: t[2] - t[2]),
            ("bool sub scalar", lambda t: t[2] - 1),
            ("bool pow", lambda t: t[2] ** t[2]),
            ("bool floor_divide", lambda t: t[2] // t[2]),
            ("bool remainder", lambda t: t[2] % True),
            ("int ** -1", lambda t: t[0] ** -1),
            ("int // 0", lambda t: t[0] // 0),
            ("int % 0", lambda t: t[0] % 0),
            ("float & bool", lambda t: t[1] & t[2]),
            ("float | 1", lambda t: t[1] | 1),
            ("float alpha int", lambda t: t[0].add(t[0], alpha=0.5)),
            ("bool alpha float", lambda t: t[1].add(t[1], alpha=True)),
            ("broadcast", lambda t: t[0] + t[3]),
            ("broadcast cmp", lambda t: t[0] < t[4]),
            ("broadcast where", lambda t: t[4].where(t[2], t[1])),
            ("abs bool", lambda t: t[2].abs()),
            ("floor bool", lambda t: t[2].floor()),
            ("neg bool", lambda t: -t[2]),
            ("relu bool", lambda t: t[2].relu()),
            ("bitwise_not float", lambda t: t[1].bitwise_not()),
            ("where int cond", lambda t: t[0].where(t[0], t[1])),
            ("masked_fill overflow", lambda t: t[0].int().masked_fill(t[2], 1e10)),
            ("clamp overflow", lambda t: t[0].to(torch.int8).clamp(0, 300)),
            ("clamp none", lambda t: t[1].clamp()),
        ]
        for name, fn in cases:
            with self.subTest(case=name):
                try:
                    fn((i, f, b, f23, f32))
                    raise AssertionError(f"torch accepted {name}")
                except AssertionError:
                    raise
                except Exception as e:  # noqa: BLE001
                    expected = type(e)
                xs = (d(i), d(f), d(b), d(f23), d(f32))
                with self.assertRaises(expected):
                    fn(xs)  # no .to_torch(): the error is raised at the call

    def test_runtime_continues_after_errors(self):
        x = d(values((3, 4), torch.int64, 83))
        with self.assertRaises(RuntimeError):
            x // 0
        y = (x // d(values((3, 4), torch.int64, 84, positive=True)) + 1).float().sqrt()
        ref = (values((3, 4), torch.int64, 83) // values((3, 4), torch.int64, 84, positive=True) + 1).float().sqrt()
        assert_exact(self, y, ref)
        # A data-dependent kernel failure (integer division by a zero tensor) surfaces at the read.
        z = x // d(torch.zeros(3, 4, dtype=torch.int64))
        with self.assertRaises(dtorch.KernelError):
            z.to_torch()
        assert_exact(self, x.abs(), values((3, 4), torch.int64, 83).abs())

    def test_operands(self):
        x = dtorch.ones(2, 3)
        with self.assertRaises(TypeError):
            x // torch.ones(2, 3)
        with self.assertRaises(TypeError):
            x ** "a"
        with self.assertRaises(TypeError):
            dtorch.pow(2, 3)
        with self.assertRaises(TypeError):
            x.where(torch.ones(2, 3).bool(), 0)
        with self.assertRaises(ValueError):
            x + dtorch.ones(2, 3, graph=dtorch.Graph())
        with self.assertRaises(ValueError):
            x.maximum(dtorch.ones(2, 3, device_mesh=dtorch.DeviceMesh("cpu", [0, 1])))

    def test_placement_error_is_a_value_error(self):
        self.assertTrue(issubclass(PlacementError, ValueError))
        self.assertEqual(dtorch.ones(2).placements, [Replicate()])


if __name__ == "__main__":
    unittest.main()
