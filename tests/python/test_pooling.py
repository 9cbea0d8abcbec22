"""2-D pooling (dtorch.nn.functional and dtorch.nn.modules.pooling) against eager torch on the same inputs.

One device: torch.equal over dtypes and argument combinations, and torch's exception class for every
call torch rejects (raised at the call). Meshes of 2 and 3 devices (uneven batch and channel shards)
and 2x2: every output value against torch, equal for Shard/Replicate inputs, allclose for genuine
multi-piece Partial inputs (average pooling only); spatial shards and Partial max pooling raise
PlacementError naming the redistribute(). The layers against torch.nn's, repr included.
"""

import itertools
import unittest

import torch
import torch.nn as tnn
import torch.nn.functional as TF

import dtorch
import dtorch.nn.functional as F
from dtorch import Partial, PlacementError, Replicate, Shard
from dtorch.nn.modules.pooling import (
    AdaptiveAvgPool2d,
    AdaptiveMaxPool2d,
    AvgPool2d,
    GlobalAvgPool2d,
    GlobalMaxPool2d,
    MaxPool2d,
)
from dtorch.test.test_util import assert_replicas_equal, assert_tensor_allclose, assert_tensor_equal

from helpers import CPU1, CPU2, CPU3, CPU2x2, genuine_partial, int_valued, randn

# Operators this module tests against eager PyTorch (tests/python/test_registry.py).
TESTED_OPS = {"max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d"}

R, P = Replicate(), Partial()
S = Shard
FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def data(shape, dtype, seed=0):
    """Values of `dtype` with ties and negatives; integer dtypes get small integers."""
    if dtype.is_floating_point:
        return randn(*shape, seed=seed).mul(3).to(dtype)
    return int_valued(*shape, seed=seed, low=-20, high=21).to(dtype)


# The calls: name -> (torch call, dtorch call), each taking (x, kwargs).
def _max(mod):
    return lambda x, kw: mod.max_pool2d(x, **kw)


def _avg(mod):
    return lambda x, kw: mod.avg_pool2d(x, **kw)


def _amax(mod):
    return lambda x, kw: mod.adaptive_max_pool2d(x, **kw)


def _aavg(mod):
    return lambda x, kw: mod.adaptive_avg_pool2d(x, **kw)


OPS = {
    "max_pool2d": (_max(TF), _max(F)),
    "avg_pool2d": (_avg(TF), _avg(F)),
    "adaptive_max_pool2d": (_amax(TF), _amax(F)),
    "adaptive_avg_pool2d": (_aavg(TF), _aavg(F)),
}

MAX_ARGS = [
    dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=c, return_indices=ri)
    for k, s, p, d, c, ri in itertools.product(
        (1, 2, 3, (2, 3), (3, 1), [4]), (None, 1, 2, (1, 2), (3, 2)), (0, 1, (1, 0)), (1, 2, (2, 1)),
        (False, True), (False, True))
]
AVG_ARGS = [
    dict(kernel_size=k, stride=s, padding=p, ceil_mode=c, count_include_pad=ci, divisor_override=dv)
    for k, s, p, c, ci, dv in itertools.product(
        (1, 2, 3, (2, 3), (3, 1)), (None, 1, 2, (1, 2), (3, 2)), (0, 1, (1, 0)), (False, True), (False, True),
        (None, 2, 5, -3))
]
ADAPTIVE_SIZES = [1, 2, 3, (1, 1), (2, 3), (5, 4), (4, None), (None, 2), (None, None), (7, 9), (10, 12), (0, 2)]
SHAPES = [(2, 3, 7, 9), (3, 8, 5), (1, 2, 4, 4), (2, 1, 5, 1)]


class PoolTestCase(unittest.TestCase):
    def check(self, got, expected, close=False):
        if isinstance(expected, tuple):
            self.assertIsInstance(got, tuple)
            self.assertEqual(len(got), len(expected))
            for g, e in zip(got, expected):
                self.check(g, e, close and e.dtype.is_floating_point)
            return
        if isinstance(got, dtorch.Tensor):
            assert_replicas_equal(self, got)  # a read looks only at the first copy
        if close:
            assert_tensor_allclose(self, got, expected, rtol=1e-5, atol=1e-5)
        elif expected.dtype.is_floating_point and expected.isnan().any():
            # torch.equal with NaN equal to NaN (allclose with no tolerance is equality otherwise).
            assert_tensor_allclose(self, got, expected, rtol=0.0, atol=0.0, equal_nan=True)
        else:
            assert_tensor_equal(self, got, expected)

    def same_outcome(self, ref, fn, t, mesh=CPU1, placements=None):
        """torch's result, or torch's exception class raised at the dtorch call."""
        try:
            expected = ref(t)
        except Exception as e:  # noqa: BLE001 - mirrored
            x = dtorch.from_torch(t, mesh, placements)
            with self.assertRaises(Exception) as cm:
                fn(x)
            self.assertIs(type(cm.exception), type(e), f"torch raised {type(e).__name__}: {e}; dtorch "
                                                       f"{type(cm.exception).__name__}: {cm.exception}")
            return None
        got = fn(dtorch.from_torch(t, mesh, placements))
        self.check(got, expected)
        return expected


# ------------------------------------------------------------------ one device


class TestOneDevice(PoolTestCase):
    def test_max_pool2d_arguments_and_dtypes(self):
        ref, fn = OPS["max_pool2d"]
        ok = 0
        for dtype in FLOATS + (torch.int64, torch.int32, torch.uint8):
            for shape in SHAPES[:2]:
                t = data(shape, dtype, seed=len(shape))
                for kw in MAX_ARGS[::1 if dtype == torch.float32 else 7]:
                    with self.subTest(dtype=dtype, shape=shape, kw=kw):
                        ok += self.same_outcome(lambda a: ref(a, kw), lambda a: fn(a, kw), t) is not None
        self.assertGreater(ok, 500)  # most combinations are valid

    def test_avg_pool2d_arguments_and_dtypes(self):
        ref, fn = OPS["avg_pool2d"]
        ok = 0
        for dtype in FLOATS + (torch.int64,):
            for shape in SHAPES[:2]:
                t = data(shape, dtype, seed=len(shape))
                for kw in AVG_ARGS[::1 if dtype == torch.float32 else 5]:
                    with self.subTest(dtype=dtype, shape=shape, kw=kw):
                        ok += self.same_outcome(lambda a: ref(a, kw), lambda a: fn(a, kw), t) is not None
        self.assertGreater(ok, 500)

    def test_adaptive(self):
        for name in ("adaptive_avg_pool2d", "adaptive_max_pool2d"):
            ref, fn = OPS[name]
            for dtype in FLOATS:
                for shape in SHAPES:
                    t = data(shape, dtype)
                    for size in ADAPTIVE_SIZES:
                        kws = [dict(output_size=size)]
                        if name == "adaptive_max_pool2d":
                            kws.append(dict(output_size=size, return_indices=True))
                        for kw in kws:
                            with self.subTest(op=name, dtype=dtype, shape=shape, kw=kw):
                                self.same_outcome(lambda a: ref(a, kw), lambda a: fn(a, kw), t)

    def test_odd_shapes(self):
        # Batch 0, a 1x1 plane, a plane smaller than the kernel with padding, large windows.
        cases = [
            ((0, 3, 4, 4), "max_pool2d", dict(kernel_size=2)),
            ((0, 3, 4, 4), "avg_pool2d", dict(kernel_size=2)),
            ((0, 3, 4, 4), "adaptive_avg_pool2d", dict(output_size=2)),
            ((0, 3, 4, 4), "adaptive_max_pool2d", dict(output_size=2)),
            ((2, 0, 4, 4), "adaptive_avg_pool2d", dict(output_size=2)),
            ((0, 4, 4), "adaptive_avg_pool2d", dict(output_size=2)),
            ((0, 4, 4), "adaptive_max_pool2d", dict(output_size=2)),
            ((2, 3, 0, 4), "adaptive_avg_pool2d", dict(output_size=1)),  # mean of nothing: NaN, as torch
            ((1, 1, 1, 1), "max_pool2d", dict(kernel_size=1)),
            ((1, 1, 1, 1), "avg_pool2d", dict(kernel_size=2, padding=1)),
            ((1, 2, 2, 3), "max_pool2d", dict(kernel_size=3, padding=1, ceil_mode=True)),
            ((1, 2, 5, 5), "max_pool2d", dict(kernel_size=2, stride=2, padding=1, ceil_mode=True)),
            ((1, 2, 5, 5), "avg_pool2d", dict(kernel_size=2, stride=2, padding=1, ceil_mode=True,
                                              count_include_pad=False)),
            ((2, 3, 31, 17), "max_pool2d", dict(kernel_size=(5, 3), stride=(3, 2), padding=(2, 1), dilation=(2, 3))),
            ((2, 3, 31, 17), "avg_pool2d", dict(kernel_size=(7, 4), stride=(5, 3), padding=(3, 2), ceil_mode=True)),
            ((3, 4, 6), "adaptive_avg_pool2d", dict(output_size=1)),
            ((4, 6), "adaptive_avg_pool2d", dict(output_size=1)),  # the mean path takes 2-D input
            ((1, 2, 3, 4, 6), "adaptive_avg_pool2d", dict(output_size=1)),
        ]
        for shape, name, kw in cases:
            ref, fn = OPS[name]
            for dtype in (torch.float32, torch.bfloat16):
                with self.subTest(shape=shape, op=name, kw=kw, dtype=dtype):
                    t = data(shape, dtype)
                    exp = self.same_outcome(lambda a: ref(a, kw), lambda a: fn(a, kw), t)
                    self.assertIsNotNone(exp)

    def test_nan_and_inf(self):
        t = randn(2, 3, 6, 6)
        t[0, 0, 1, 1] = float("nan")
        t[1, 2, 4, 5] = float("inf")
        t[1, 1, 0, 0] = float("-inf")
        x = dtorch.from_torch(t, CPU1)
        for name, kw in (("max_pool2d", dict(kernel_size=3, stride=2, return_indices=True)),
                         ("adaptive_max_pool2d", dict(output_size=2, return_indices=True))):
            ref, fn = OPS[name]
            got, exp = fn(x, kw), ref(t, kw)
            self.assertTrue(torch.equal(got[1].to_torch(), exp[1]))
            self.assertTrue(torch.equal(got[0].to_torch().nan_to_num(), exp[0].nan_to_num()))
            self.assertTrue(torch.equal(got[0].to_torch().isnan(), exp[0].isnan()))

    def test_with_indices_forms(self):
        t = data((2, 3, 7, 9), torch.float32)
        x = dtorch.from_torch(t, CPU1)
        self.check(F.max_pool2d_with_indices(x, 3, 2), TF.max_pool2d_with_indices(t, 3, 2))
        self.check(F.adaptive_max_pool2d_with_indices(x, (3, 2)), TF.adaptive_max_pool2d_with_indices(t, (3, 2)))
        # Positional arguments in torch's order.
        self.check(F.max_pool2d(x, 3, 2, 1, 1, True, True), TF.max_pool2d(t, 3, 2, 1, 1, True, True))
        self.check(F.avg_pool2d(x, 3, 2, 1, True, False, 4), TF.avg_pool2d(t, 3, 2, 1, True, False, 4))
        self.check(F.adaptive_max_pool2d(x, 2, True), TF.adaptive_max_pool2d(t, 2, True))


class TestErrors(PoolTestCase):
    """Calls torch rejects: the same exception class, at the call."""

    def test_bad_arguments(self):
        t = data((2, 3, 7, 9), torch.float32)
        bad = [
            ("max_pool2d", dict(kernel_size=0)),
            ("max_pool2d", dict(kernel_size=0, stride=1)),
            ("max_pool2d", dict(kernel_size=-1, stride=1)),
            ("max_pool2d", dict(kernel_size=(2, 2, 2))),
            ("max_pool2d", dict(kernel_size=())),
            ("max_pool2d", dict(kernel_size=2.0)),
            ("max_pool2d", dict(kernel_size=True)),
            ("max_pool2d", dict(kernel_size=(2, 1.5))),
            ("max_pool2d", dict(kernel_size=2, stride=0)),
            ("max_pool2d", dict(kernel_size=2, stride=-1)),
            ("max_pool2d", dict(kernel_size=2, stride=(1, 1, 1))),
            ("max_pool2d", dict(kernel_size=2, stride="a")),
            ("max_pool2d", dict(kernel_size=2, dilation=0)),
            ("max_pool2d", dict(kernel_size=2, dilation=(1, 1, 1))),
            ("max_pool2d", dict(kernel_size=3, padding=2)),
            ("max_pool2d", dict(kernel_size=3, padding=-1)),
            ("max_pool2d", dict(kernel_size=3, padding=(1, 1, 1))),
            ("max_pool2d", dict(kernel_size=3, stride=1, padding=2, dilation=2)),  # over half of kernel_size
            ("max_pool2d", dict(kernel_size=3, stride=1, padding=3, dilation=2)),
            ("max_pool2d", dict(kernel_size=(1, 3), padding=1)),
            ("max_pool2d", dict(kernel_size=8)),  # output too small
            ("max_pool2d", dict(kernel_size=3, stride=1, padding=-1, dilation=0)),
            ("avg_pool2d", dict(kernel_size=0)),
            ("avg_pool2d", dict(kernel_size=0, stride=1)),
            ("avg_pool2d", dict(kernel_size=(2, 2, 2))),
            ("avg_pool2d", dict(kernel_size=2.5)),
            ("avg_pool2d", dict(kernel_size=2, stride=-1)),
            ("avg_pool2d", dict(kernel_size=3, padding=2)),
            ("avg_pool2d", dict(kernel_size=3, padding=-1)),
            ("avg_pool2d", dict(kernel_size=3, padding=(1, 1, 1))),
            ("avg_pool2d", dict(kernel_size=8)),
            ("avg_pool2d", dict(kernel_size=2, divisor_override=0)),
            ("avg_pool2d", dict(kernel_size=2, divisor_override=1.5)),
            ("adaptive_avg_pool2d", dict(output_size=(-1, 2))),
            ("adaptive_avg_pool2d", dict(output_size=(1, 2, 3))),
            ("adaptive_avg_pool2d", dict(output_size=(2,))),
            ("adaptive_avg_pool2d", dict(output_size=2.0)),
            ("adaptive_avg_pool2d", dict(output_size=True)),
            ("adaptive_avg_pool2d", dict(output_size=None)),
            ("adaptive_avg_pool2d", dict(output_size=(2.0, 3))),
            ("adaptive_max_pool2d", dict(output_size=(-1, 2))),
            ("adaptive_max_pool2d", dict(output_size=(2,))),
            ("adaptive_max_pool2d", dict(output_size=(1, 2, 3))),
            ("adaptive_max_pool2d", dict(output_size=2.0)),
        ]
        for name, kw in bad:
            ref, fn = OPS[name]
            with self.subTest(op=name, kw=kw):
                with self.assertRaises(Exception):
                    ref(t, kw)
                self.same_outcome(lambda a: ref(a, kw), lambda a: fn(a, kw), t)

    def test_bad_ranks_and_empty_dims(self):
        calls = [("max_pool2d", dict(kernel_size=2)), ("max_pool2d", dict(kernel_size=2, return_indices=True)),
                 ("avg_pool2d", dict(kernel_size=2)), ("adaptive_avg_pool2d", dict(output_size=2)),
                 ("adaptive_avg_pool2d", dict(output_size=1)), ("adaptive_max_pool2d", dict(output_size=2))]
        shapes = [(), (3,), (3, 4), (1, 2, 3, 4, 4), (2, 0, 4, 4), (0, 4, 4), (2, 3, 0, 4), (2, 0, 4), (3, 4, 0)]
        for (name, kw), shape in itertools.product(calls, shapes):
            ref, fn = OPS[name]
            with self.subTest(op=name, kw=kw, shape=shape):
                self.same_outcome(lambda a: ref(a, kw), lambda a: fn(a, kw), data(shape, torch.float32))

    def test_dtypes(self):
        calls = [("max_pool2d", dict(kernel_size=2)), ("max_pool2d", dict(kernel_size=2, return_indices=True)),
                 ("avg_pool2d", dict(kernel_size=2)), ("adaptive_avg_pool2d", dict(output_size=2)),
                 ("adaptive_avg_pool2d", dict(output_size=1)), ("adaptive_max_pool2d", dict(output_size=2)),
                 ("max_pool2d", dict(kernel_size=0, stride=1)),  # an argument error comes before the dtype's
                 ("avg_pool2d", dict(kernel_size=0, stride=1))]
        dtypes = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
        for (name, kw), dtype in itertools.product(calls, dtypes):
            ref, fn = OPS[name]
            t = data((2, 3, 6, 6), torch.int64).to(dtype)
            with self.subTest(op=name, kw=kw, dtype=dtype):
                self.same_outcome(lambda a: ref(a, kw), lambda a: fn(a, kw), t)

    def test_not_a_dtorch_tensor(self):
        with self.assertRaises(TypeError):
            F.max_pool2d(torch.ones(1, 2, 4, 4), 2)
        with self.assertRaises(TypeError):
            F.adaptive_avg_pool2d(torch.ones(1, 2, 4, 4), 2)

    def test_nothing_is_enqueued_by_a_failed_call(self):
        x = dtorch.from_torch(data((2, 3, 7, 9), torch.float32), CPU1)
        for _ in range(3):
            with self.assertRaises(RuntimeError):
                F.max_pool2d(x, 3, padding=2)
        self.check(F.max_pool2d(x, 3), TF.max_pool2d(x.to_torch(), 3))


# ------------------------------------------------------------------ meshes

MESH_CALLS = [
    ("max_pool2d", dict(kernel_size=3, stride=2, padding=1)),
    ("max_pool2d", dict(kernel_size=(2, 3), stride=1, dilation=(2, 1), ceil_mode=True, return_indices=True)),
    ("avg_pool2d", dict(kernel_size=3, stride=2, padding=1)),
    ("avg_pool2d", dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), ceil_mode=True, count_include_pad=False)),
    ("avg_pool2d", dict(kernel_size=2, divisor_override=3)),
    ("adaptive_avg_pool2d", dict(output_size=(3, 4))),
    ("adaptive_avg_pool2d", dict(output_size=1)),
    ("adaptive_max_pool2d", dict(output_size=(2, 5), return_indices=True)),
    ("adaptive_max_pool2d", dict(output_size=1)),
]
LINEAR = {"avg_pool2d", "adaptive_avg_pool2d"}


def expected_placement(name, dtype, p, ndim):
    """The documented rule on one mesh dim: None when rejected."""
    if p.is_partial():
        return p if name in LINEAR and dtype.is_floating_point else None
    if p.is_shard() and p.dim >= ndim - 2:
        return None
    return p


class TestMeshes(PoolTestCase):
    def run_case(self, name, kw, t, mesh, pls):
        ref, fn = OPS[name]
        expected = ref(t, kw)
        exp_pl = [expected_placement(name, t.dtype, p, t.dim()) for p in pls]
        x = genuine_partial(t, mesh, pls, seed=7)
        if any(p is None for p in exp_pl):
            with self.assertRaises(PlacementError) as cm:
                fn(x, kw)
            self.assertIn(name, str(cm.exception))
            self.assertIn("redistribute(placements=", str(cm.exception))
            return
        got = fn(x, kw)
        outs = got if isinstance(got, tuple) else (got,)
        for o in outs:
            self.assertEqual(list(o.placements), exp_pl)
        self.check(got, expected, close=any(p.is_partial() for p in pls))

    def test_1d_meshes_uneven(self):
        # 5 batch and 7 channels on 3 devices are uneven (2, 2, 1 and 3, 3, 1); 2 on 3 leaves one empty.
        shapes = [(5, 7, 9, 8), (2, 3, 6, 7), (7, 9, 8)]
        for mesh, shape, (name, kw) in itertools.product((CPU2, CPU3), shapes, MESH_CALLS):
            t = int_valued(*shape, seed=3)
            for p in [R, P] + [S(d) for d in range(len(shape))]:
                with self.subTest(mesh=mesh.shape, shape=shape, op=name, kw=kw, placement=p):
                    self.run_case(name, kw, t, mesh, [p])

    def test_2x2_mesh(self):
        pls = [[S(0), S(1)], [S(1), S(0)], [S(0), S(0)], [S(1), S(1)], [R, S(1)], [S(0), R], [P, S(0)], [S(1), P],
               [P, P], [P, R], [S(2), R], [R, S(3)], [S(0), S(2)], [P, S(3)]]
        for (name, kw), pl in itertools.product(MESH_CALLS, pls):
            t = int_valued(5, 6, 9, 7, seed=5)
            with self.subTest(op=name, kw=kw, placements=pl):
                self.run_case(name, kw, t, CPU2x2, pl)

    def test_shards_are_exact_for_random_floats(self):
        # Not only integer values: each device pools its own planes with the same ATen kernel.
        for dtype in (torch.float32, torch.bfloat16, torch.float64):
            t = randn(6, 5, 11, 10, seed=2).to(dtype)
            for mesh, pl in ((CPU3, [S(0)]), (CPU3, [S(1)]), (CPU2x2, [S(1), S(0)]), (CPU2x2, [S(0), S(0)])):
                for name, kw in MESH_CALLS:
                    with self.subTest(dtype=dtype, mesh=mesh.shape, placements=pl, op=name, kw=kw):
                        got = OPS[name][1](dtorch.from_torch(t, mesh, pl), kw)
                        self.check(got, OPS[name][0](t, kw))

    def test_partial_float_values(self):
        t = randn(3, 4, 8, 8, seed=4)
        for mesh, pl in ((CPU2, [P]), (CPU3, [P]), (CPU2x2, [P, P]), (CPU2x2, [S(0), P])):
            x = genuine_partial(t, mesh, pl, seed=1)
            for name, kw in MESH_CALLS:
                if name not in LINEAR:
                    continue
                with self.subTest(mesh=mesh.shape, placements=pl, op=name, kw=kw):
                    y = OPS[name][1](x, kw)
                    self.assertEqual(list(y.placements), pl)
                    self.check(y.redistribute(placements=[R] * mesh.ndim), OPS[name][0](t, kw), close=True)

    def test_integer_partial_avg_is_rejected(self):
        x = genuine_partial(int_valued(2, 3, 4, 4).long(), CPU2, [P])
        with self.assertRaises(PlacementError):
            F.avg_pool2d(x, 2)
        y = F.max_pool2d(dtorch.from_torch(int_valued(2, 3, 4, 4).long(), CPU3, [S(1)]), 2)
        self.assertEqual(list(y.placements), [S(1)])

    def test_placement_error_names_the_fix(self):
        x = dtorch.from_torch(randn(2, 3, 8, 8), CPU2, [S(3)])
        with self.assertRaises(PlacementError) as cm:
            F.avg_pool2d(x, 2)
        msg = str(cm.exception)
        self.assertIn("avg_pool2d", msg)
        self.assertIn("Shard(dim=3)", msg)
        self.assertIn(".redistribute(placements=[Replicate()])", msg)
        y = F.avg_pool2d(x.redistribute(placements=[R]), 2)
        self.check(y, TF.avg_pool2d(x.to_torch(), 2))
        with self.assertRaises(PlacementError) as cm:
            F.max_pool2d(genuine_partial(randn(2, 3, 8, 8), CPU2, [P]), 2)
        self.assertIn("max_pool2d", str(cm.exception))


# ------------------------------------------------------------------ layers


class TestLayers(PoolTestCase):
    def test_layers_match_torch(self):
        pairs = [
            (MaxPool2d(3), tnn.MaxPool2d(3)),
            (MaxPool2d(3, 2, 1, 2, False, True), tnn.MaxPool2d(3, 2, 1, 2, False, True)),
            (MaxPool2d((2, 3), stride=(1, 2), return_indices=True), tnn.MaxPool2d((2, 3), stride=(1, 2),
                                                                                  return_indices=True)),
            (AvgPool2d(3), tnn.AvgPool2d(3)),
            (AvgPool2d((3, 2), 2, 1, True, False, 3), tnn.AvgPool2d((3, 2), 2, 1, True, False, 3)),
            (AdaptiveAvgPool2d((2, None)), tnn.AdaptiveAvgPool2d((2, None))),
            (AdaptiveAvgPool2d(3), tnn.AdaptiveAvgPool2d(3)),
            (AdaptiveMaxPool2d(2), tnn.AdaptiveMaxPool2d(2)),
            (AdaptiveMaxPool2d((3, 2), True), tnn.AdaptiveMaxPool2d((3, 2), True)),
            (GlobalAvgPool2d(), tnn.AdaptiveAvgPool2d(1)),
            (GlobalMaxPool2d(), tnn.AdaptiveMaxPool2d(1)),
        ]
        for dtype in (torch.float32, torch.bfloat16):
            for shape in ((2, 3, 9, 8), (3, 7, 6)):
                t = data(shape, dtype)
                for ours, theirs in pairs:
                    with self.subTest(layer=repr(ours), dtype=dtype, shape=shape):
                        self.check(ours(dtorch.from_torch(t, CPU1)), theirs(t))
                        x = dtorch.from_torch(t, CPU3, [S(0)])
                        self.check(ours(x), theirs(t))

    def test_reprs(self):
        pairs = [
            (MaxPool2d(3), tnn.MaxPool2d(3)),
            (MaxPool2d(3, 2, 1, 2, True, True), tnn.MaxPool2d(3, 2, 1, 2, True, True)),
            (AvgPool2d(3), tnn.AvgPool2d(3)),
            (AvgPool2d((3, 2), 2, 1, True, False, 3), tnn.AvgPool2d((3, 2), 2, 1, True, False, 3)),
            (AdaptiveAvgPool2d((2, None)), tnn.AdaptiveAvgPool2d((2, None))),
            (AdaptiveMaxPool2d(2, True), tnn.AdaptiveMaxPool2d(2, True)),
        ]
        for ours, theirs in pairs:
            self.assertEqual(repr(ours), repr(theirs))
            self.assertEqual(ours.extra_repr(), theirs.extra_repr())
        self.assertEqual(repr(GlobalAvgPool2d()), "GlobalAvgPool2d()")
        self.assertEqual(repr(GlobalMaxPool2d()), "GlobalMaxPool2d()")

    def test_attributes_and_module_api(self):
        m = MaxPool2d(3, padding=1)
        self.assertEqual((m.kernel_size, m.stride, m.padding, m.dilation, m.return_indices, m.ceil_mode),
                         (3, 3, 1, 1, False, False))
        a = AvgPool2d(2, 1)
        self.assertEqual((a.kernel_size, a.stride, a.padding, a.ceil_mode, a.count_include_pad, a.divisor_override),
                         (2, 1, 0, False, True, None))
        for layer in (m, a, AdaptiveAvgPool2d(1), AdaptiveMaxPool2d(1), GlobalAvgPool2d(), GlobalMaxPool2d()):
            self.assertIsInstance(layer, dtorch.nn.Module)
            self.assertEqual(list(layer.parameters()), [])
            self.assertEqual(layer.state_dict(), {})

    def test_global_pooling_shapes_and_placements(self):
        t = randn(4, 6, 5, 7)
        x = dtorch.from_torch(t, CPU2x2, [S(0), S(1)])
        for layer, ref in ((GlobalAvgPool2d(), t.mean((-2, -1), keepdim=True)),
                           (GlobalMaxPool2d(), t.amax((-2, -1), keepdim=True))):
            y = layer(x)
            self.assertEqual(tuple(y.shape), (4, 6, 1, 1))
            self.assertEqual(list(y.placements), [S(0), S(1)])
            self.check(y, ref)
        y = GlobalAvgPool2d()(genuine_partial(int_valued(4, 6, 5, 7), CPU3, [P]))
        self.assertEqual(list(y.placements), [P])
        self.check(y, int_valued(4, 6, 5, 7).mean((-2, -1), keepdim=True), close=True)
        with self.assertRaises(PlacementError):
            GlobalMaxPool2d()(genuine_partial(int_valued(4, 6, 5, 7), CPU3, [P]))

    def test_in_a_sequential(self):
        seq = dtorch.nn.Sequential(MaxPool2d(2), AvgPool2d(3, 1, 1), GlobalAvgPool2d())
        ref = tnn.Sequential(tnn.MaxPool2d(2), tnn.AvgPool2d(3, 1, 1), tnn.AdaptiveAvgPool2d(1))
        t = randn(2, 3, 10, 12)
        self.check(seq(dtorch.from_torch(t, CPU1)), ref(t))


if __name__ == "__main__":
    unittest.main()
