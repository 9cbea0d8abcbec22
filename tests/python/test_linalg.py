"""Linear algebra against eager torch: matmul (every rank, @), mm, bmm, outer, einsum, nn.functional.linear.

One-device meshes must match torch bit for bit. On meshes, the expected output
placement comes from the documented label rule (dtorch_ops.h, "linear algebra"),
re-implemented here from the einsum form of each op; integer-valued data makes
every summation order exact, so sharded and Partial results are compared exactly.
"""

import itertools
import unittest

import torch
import torch.nn.functional as TF

import dtorch
import dtorch.nn.functional as F
from dtorch import Partial, PlacementError, Replicate, Shard
from dtorch.test.test_util import assert_tensor_allclose, assert_tensor_equal

from helpers import (CPU1, CPU2, CPU3, CPU2x2, assert_close_everywhere, assert_equal_everywhere, genuine_partial, int_valued,
                     placements_1d, placements_2d, randn)

# Operators this module tests against eager PyTorch (tests/python/test_registry.py).
TESTED_OPS = {"matmul", "mm", "bmm", "outer", "einsum", "linear"}

R, P = Replicate(), Partial()
S0, S1, S2 = Shard(0), Shard(1), Shard(2)


def expected_placements(spec_in, spec_out, shapes, pls):
    """Output placements by the label rule, or None when the op must refuse.

    spec_in: one label string per operand ("mk", "kn"); spec_out: the output's
    labels; shapes: the operands' shapes; pls: their placements (one per mesh dim).
    """
    sizes = {}
    for spec, shape in zip(spec_in, shapes):
        for lab, n in zip(spec, shape):
            sizes[lab] = max(sizes.get(lab, 1), n)
    split = {}
    out = []
    for md in range(len(pls[0])):
        ps = [pl[md] for pl in pls]
        if any(p.is_partial() for p in ps):
            # Linear in each operand: Partial passes with a Replicate partner.
            if len(ps) == 1 or [p.is_partial() for p in ps].count(True) == 1 and all(
                    p.is_partial() or p.is_replicate() for p in ps):
                out.append(P)
                continue
            return None
        labels = set()
        for spec, shape, p in zip(spec_in, shapes, ps):
            if p.is_shard():
                lab = spec[p.dim]
                if shape[p.dim] != sizes[lab]:
                    return None  # a broadcast size-1 dim
                labels.add(lab)
        if not labels:
            out.append(R)
            continue
        if len(labels) > 1:
            return None
        lab = labels.pop()
        split.setdefault(lab, []).append(md)
        out.append(Shard(spec_out.index(lab)) if lab in spec_out else P)
    # Nested shards line up only when each operand shards a label on a prefix
    # of the mesh dims that split it.
    for spec, shape, pl in zip(spec_in, shapes, pls):
        for d, lab in enumerate(spec):
            if shape[d] != sizes[lab]:
                continue
            mds = [md for md, p in enumerate(pl) if p.is_shard() and p.dim == d]
            if mds != split.get(lab, [])[:len(mds)]:
                return None
    return out


def values(shape, dtype=torch.float32, seed=0):
    return int_valued(*shape, dtype=dtype, low=-3, high=4, seed=seed)


class LinalgTestCase(unittest.TestCase):
    def assertPlacementError(self, exc, op):
        self.assertIsInstance(exc, ValueError)
        self.assertIn(op, str(exc))
        self.assertIn("redistribute", str(exc))

    def sweep(self, mesh, op, fn, ref_fn, spec_in, spec_out, tensors, placement_lists):
        """Runs fn over every placement combination and checks placements and values."""
        shapes = [tuple(t.shape) for t in tensors]
        ref = ref_fn(*tensors)
        for pls in placement_lists:
            with self.subTest(op=op, mesh=mesh, placements=pls, shapes=shapes):
                xs = [genuine_partial(t, mesh, pl, seed=i) for i, (t, pl) in enumerate(zip(tensors, pls))]
                exp = expected_placements(spec_in, spec_out, shapes, pls)
                if exp is None:
                    with self.assertRaises(PlacementError) as cm:
                        fn(*xs)
                    self.assertPlacementError(cm.exception, op)
                    continue
                z = fn(*xs)
                self.assertEqual(z.placements, exp)
                self.assertEqual(z.shape, ref.shape)
                assert_equal_everywhere(self, z, ref)


# (shape a, shape b, labels a, labels b, labels out) for torch.matmul's ranks.
MATMUL_CASES = [
    ((7,), (7,), "k", "k", ""),
    ((5, 7), (7,), "mk", "k", "m"),
    ((7,), (7, 4), "k", "kn", "n"),
    ((5, 7), (7, 4), "mk", "kn", "mn"),
    ((3, 5, 7), (7, 4), "bmk", "kn", "bmn"),
    ((5, 7), (3, 7, 4), "mk", "bkn", "bmn"),
    ((3, 5, 7), (3, 7, 4), "bmk", "bkn", "bmn"),
    ((1, 5, 7), (3, 7, 4), "bmk", "bkn", "bmn"),
    ((2, 1, 5, 7), (3, 7, 4), "abmk", "bkn", "abmn"),
    ((7,), (2, 7, 4), "k", "bkn", "bn"),
    ((2, 5, 7), (7,), "bmk", "k", "bm"),
]


class TestOneDevice(LinalgTestCase):
    def test_matmul_every_rank(self):
        for dtype in (torch.float32, torch.float64, torch.int64, torch.bfloat16):
            for sa, sb, *_ in MATMUL_CASES:
                with self.subTest(dtype=dtype, sa=sa, sb=sb):
                    a, b = randn(*sa, seed=1).to(dtype), randn(*sb, seed=2).to(dtype)
                    if not dtype.is_floating_point:
                        a, b = values(sa, dtype, 1), values(sb, dtype, 2)
                    x, y = dtorch.from_torch(a, CPU1), dtorch.from_torch(b, CPU1)
                    assert_tensor_equal(self, x @ y, a @ b)
                    assert_tensor_equal(self, x.matmul(y), a.matmul(b))
                    assert_tensor_equal(self, dtorch.matmul(x, y), torch.matmul(a, b))

    def test_mm_bmm_outer(self):
        a, b = randn(5, 7, seed=3), randn(7, 4, seed=4)
        x, y = dtorch.from_torch(a), dtorch.from_torch(b)
        assert_tensor_equal(self, dtorch.mm(x, y), torch.mm(a, b))
        assert_tensor_equal(self, x.mm(y), a.mm(b))
        a3, b3 = randn(3, 5, 7, seed=5), randn(3, 7, 4, seed=6)
        x3, y3 = dtorch.from_torch(a3), dtorch.from_torch(b3)
        assert_tensor_equal(self, dtorch.bmm(x3, y3), torch.bmm(a3, b3))
        assert_tensor_equal(self, x3.bmm(y3), a3.bmm(b3))
        u, v = randn(5, seed=7), torch.arange(4)
        for uu, vv in ((u, u[:4]), (u, v), (v, u), (u > 0, v > 1), (u.half(), u.half())):
            with self.subTest(u=uu.dtype, v=vv.dtype):
                got = dtorch.outer(dtorch.from_torch(uu), dtorch.from_torch(vv))
                assert_tensor_equal(self, got, torch.outer(uu, vv))
        assert_tensor_equal(self, dtorch.from_torch(u).outer(dtorch.from_torch(u)), u.outer(u))
        assert_tensor_equal(self, dtorch.ger(dtorch.from_torch(u), dtorch.from_torch(u)), torch.outer(u, u))

    def test_linear(self):
        cases = [((5, 3), (4, 3), (4,)), ((5, 3), (4, 3), None), ((3,), (4, 3), (4,)), ((2, 5, 3), (4, 3), (4,)),
                 ((2, 5, 3), (4, 3), None), ((5, 3), (3,), None), ((5, 3), (4, 3), (1,)), ((5, 3), (4, 3), ()),
                 ((5, 3), (4, 3), (5, 4))]
        for dtype in (torch.float32, torch.float64, torch.int64, torch.bfloat16):
            for sx, sw, sb in cases:
                with self.subTest(dtype=dtype, sx=sx, sw=sw, sb=sb):
                    mk = (lambda s, seed: values(s, dtype, seed)) if not dtype.is_floating_point else (
                        lambda s, seed: randn(*s, seed=seed).to(dtype))
                    x, w = mk(sx, 8), mk(sw, 9)
                    b = mk(sb, 10) if sb is not None else None
                    got = F.linear(dtorch.from_torch(x), dtorch.from_torch(w),
                                   dtorch.from_torch(b) if b is not None else None)
                    assert_tensor_equal(self, got, TF.linear(x, w, b))
        self.assertIs(dtorch.nn.functional.linear, F.linear)

    EINSUMS = [
        ("ij,jk->ik", [(5, 7), (7, 4)]),
        ("ij,jk", [(5, 7), (7, 4)]),
        ("bij,bjk->bik", [(3, 5, 7), (3, 7, 4)]),
        ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
        ("ij->ji", [(5, 7)]),
        ("ii->i", [(5, 5)]),
        ("ii", [(5, 5)]),
        ("ij->", [(5, 7)]),
        ("i,i->", [(7,), (7,)]),
        ("i,j->ij", [(5,), (4,)]),
        ("ij,ij->i", [(5, 7), (5, 7)]),
        ("ij,ij->ij", [(5, 1), (5, 7)]),
        ("...ij,...jk->...ik", [(2, 3, 5, 7), (3, 7, 4)]),
        ("...ij,jk", [(2, 5, 7), (7, 4)]),
        ("...ij,...jk->ik", [(3, 5, 7), (3, 7, 4)]),
        ("Ba,aC", [(5, 7), (7, 4)]),
        (" ij , jk -> ik ", [(5, 7), (7, 4)]),
    ]

    def test_einsum(self):
        for eq, shapes in self.EINSUMS:
            for dtype in (torch.float32, torch.int64):
                with self.subTest(eq=eq, dtype=dtype):
                    ts = [randn(*s, seed=11 + i).to(dtype) if dtype.is_floating_point else values(s, dtype, 11 + i)
                          for i, s in enumerate(shapes)]
                    xs = [dtorch.from_torch(t) for t in ts]
                    ref = torch.einsum(eq, *ts)
                    assert_tensor_equal(self, dtorch.einsum(eq, *xs), ref)
                    assert_tensor_equal(self, dtorch.einsum(eq, xs), ref)

    def test_non_contiguous(self):
        # from_torch keeps a contiguous copy (dtorch tensors are always contiguous), and torch's
        # matrix products may round differently for other operand strides (torch 2.x's
        # F.linear on a transposed input does): the reference is torch on the layout dtorch holds.
        a, b = randn(7, 5, seed=20).t(), randn(4, 7, seed=21).t()
        x, y = dtorch.from_torch(a), dtorch.from_torch(b)
        ac, bc = a.contiguous(), b.contiguous()
        assert_tensor_equal(self, x.to_torch(), a)
        assert_tensor_equal(self, x @ y, ac @ bc)
        assert_tensor_equal(self, dtorch.einsum("ij,jk->ik", x, y), torch.einsum("ij,jk->ik", ac, bc))
        assert_tensor_equal(self, F.linear(x, dtorch.from_torch(b.t()), None), TF.linear(ac, b.t()))

    def test_errors_match_torch(self):
        def both(fn_d, fn_t, exc):
            with self.assertRaises(exc):
                fn_t()
            with self.assertRaises(exc):
                fn_d()

        t = {name: torch.ones(s) for name, s in
             (("v3", (3,)), ("v4", (4,)), ("m23", (2, 3)), ("m24", (2, 4)), ("b223", (2, 2, 3)), ("b244", (2, 4, 4)),
              ("b334", (3, 3, 4)), ("s", ()))}
        d = {k: dtorch.from_torch(v) for k, v in t.items()}
        cases = [
            (lambda x: x["v3"] @ x["v4"], RuntimeError),
            (lambda x: x["m23"] @ x["m23"], RuntimeError),
            (lambda x: x["b223"] @ x["b244"], RuntimeError),
            (lambda x: x["b223"] @ x["b334"], RuntimeError),
            (lambda x: x["s"] @ x["m23"], RuntimeError),
            (lambda x: (x["m23"].mm if isinstance(x["m23"], torch.Tensor) else x["m23"].mm)(x["v3"]), RuntimeError),
            (lambda x: x["m23"].bmm(x["m23"]), RuntimeError),
            (lambda x: x["b223"].bmm(x["b334"]), RuntimeError),
            (lambda x: x["m23"].outer(x["v3"]), RuntimeError),
        ]
        for fn, exc in cases:
            both(lambda: fn(d), lambda: fn(t), exc)
        dd = dtorch.from_torch(torch.ones(3, 2, dtype=torch.float64))
        with self.assertRaises(RuntimeError):
            d["m23"] @ dd
        with self.assertRaises(RuntimeError):
            dtorch.ones(2, 2, dtype=torch.bool) @ dtorch.ones(2, 2, dtype=torch.bool)
        tf = TF.linear
        both(lambda: F.linear(d["m23"], d["m24"]), lambda: tf(t["m23"], t["m24"]), RuntimeError)
        both(lambda: F.linear(d["m23"], d["b223"]), lambda: tf(t["m23"], t["b223"]), RuntimeError)
        both(lambda: F.linear(d["m23"], d["v3"], d["s"]), lambda: tf(t["m23"], t["v3"], t["s"]), RuntimeError)
        with self.assertRaises(RuntimeError):
            F.linear(d["m23"], d["m23"], dtorch.ones(5))
        for eq, ops in (("ij,jk->ik", ("m23", "m23")), ("ij,jk->iz", ("m23", "b334")), ("ij,jk->ii", ("m23", "m24")),
                        ("i1,jk->ik", ("m23", "m23")), ("ijk,jk->ik", ("m23", "m23")), ("ij,jk->ik", ("m23",)),
                        ("ij->ij", ("m23", "m23")), ("i.j->ij", ("m23",))):
            with self.subTest(eq=eq):
                both(lambda: dtorch.einsum(eq, *[d[o] for o in ops]), lambda: torch.einsum(eq, *[t[o] for o in ops]),
                     RuntimeError)
        with self.assertRaises(NotImplementedError):
            dtorch.einsum("ij,jk,kl->il", d["m23"], dtorch.ones(3, 3), dtorch.ones(3, 2))
        with self.assertRaises(TypeError):
            dtorch.mm(d["m23"], torch.ones(3, 2))
        with self.assertRaises(TypeError):
            F.linear(d["m23"], torch.ones(4, 3))
        # Still working.
        assert_tensor_equal(self, d["m23"] @ d["v3"], t["m23"] @ t["v3"])


class TestMeshes(LinalgTestCase):
    def test_matmul_every_rank_every_placement(self):
        for mesh in (CPU2, CPU3):
            for sa, sb, la, lb, lo in MATMUL_CASES:
                a, b = values(sa, seed=30), values(sb, seed=31)
                combos = list(itertools.product(placements_1d(len(sa)), placements_1d(len(sb))))
                self.sweep(mesh, "matmul", lambda x, y: x @ y, torch.matmul, [la, lb], lo, [a, b],
                           [[[pa], [pb]] for pa, pb in combos])

    def test_matmul_2x2(self):
        a, b = values((6, 8), seed=32), values((8, 5), seed=33)
        combos = [[pa, pb] for pa, pb in itertools.product(placements_2d(2), repeat=2)]
        # Nested shards of K: lined up, or not.
        combos += [[[S1, S1], [S0, S0]], [[S1, R], [S0, S0]], [[S1, S1], [S0, R]], [[S1, R], [R, S0]],
                   [[R, S1], [S0, S0]], [[S0, S0], [R, R]], [[R, R], [S1, S1]], [[S0, S0], [R, S1]]]
        self.sweep(CPU2x2, "matmul", lambda x, y: x @ y, torch.matmul, ["mk", "kn"], "mn", [a, b], combos)
        a3, b3 = values((4, 6, 8), seed=34), values((4, 8, 5), seed=35)
        combos = [[[S0, S1], [S0, R]], [[S0, S2], [S0, S1]], [[S0, R], [R, S2]], [[P, S0], [R, S0]],
                  [[S2, S1], [S1, R]], [[S1, S0], [R, S0]], [[S0, S0], [S0, S0]], [[S0, S0], [S0, R]]]
        self.sweep(CPU2x2, "matmul", lambda x, y: x @ y, torch.matmul, ["bmk", "bkn"], "bmn", [a3, b3], combos)

    def test_mm_bmm_outer_placements(self):
        a, b = values((5, 7), seed=36), values((7, 4), seed=37)
        pairs = [[[pa], [pb]] for pa, pb in itertools.product(placements_1d(2), repeat=2)]
        self.sweep(CPU3, "mm", dtorch.mm, torch.mm, ["mk", "kn"], "mn", [a, b], pairs)
        a3, b3 = values((3, 5, 7), seed=38), values((3, 7, 4), seed=39)
        pairs = [[[pa], [pb]] for pa, pb in itertools.product(placements_1d(3), repeat=2)]
        self.sweep(CPU2, "bmm", dtorch.bmm, torch.bmm, ["bmk", "bkn"], "bmn", [a3, b3], pairs)
        u, v = values((5,), seed=40), values((4,), seed=41)
        pairs = [[[pa], [pb]] for pa, pb in itertools.product(placements_1d(1), repeat=2)]
        self.sweep(CPU3, "outer", dtorch.outer, torch.outer, ["i", "j"], "ij", [u, v], pairs)
        self.sweep(CPU2x2, "outer", dtorch.outer, torch.outer, ["i", "j"], "ij", [u, v],
                   [[[S0, R], [R, S0]], [[P, S0], [R, S0]], [[S0, S0], [R, R]], [[R, P], [P, R]]])

    def test_einsum_placements(self):
        cases = [
            ("bij,bjk->bik", [(3, 5, 7), (3, 7, 4)], ["bij", "bjk"], "bik"),
            ("ij,kj->ik", [(5, 7), (4, 7)], ["ij", "kj"], "ik"),
            ("ij->ji", [(5, 7)], ["ij"], "ji"),
            ("ii->i", [(5, 5)], ["ii"], "i"),
            ("ij->", [(5, 7)], ["ij"], ""),
            ("i,j->ij", [(5,), (4,)], ["i", "j"], "ij"),
            ("ij,ij->i", [(5, 7), (5, 7)], ["ij", "ij"], "i"),
            ("ij,ij->ij", [(5, 1), (5, 7)], ["ij", "ij"], "ij"),
            ("...ij,...jk->...ik", [(3, 5, 7), (3, 7, 4)], ["bij", "bjk"], "bik"),
            ("ij,jk", [(5, 7), (7, 4)], ["ij", "jk"], "ik"),
        ]
        for eq, shapes, spec_in, spec_out in cases:
            ts = [values(s, seed=42 + i) for i, s in enumerate(shapes)]
            combos = list(itertools.product(*[placements_1d(len(s)) for s in shapes]))
            self.sweep(CPU2, "einsum", lambda *xs: dtorch.einsum(eq, *xs), lambda *a: torch.einsum(eq, *a),
                       spec_in, spec_out, ts, [[[p] for p in c] for c in combos])
        a, b = values((4, 6, 8), seed=50), values((4, 8, 5), seed=51)
        self.sweep(CPU2x2, "einsum", lambda x, y: dtorch.einsum("bij,bjk->bik", x, y),
                   lambda x, y: torch.einsum("bij,bjk->bik", x, y), ["bij", "bjk"], "bik", [a, b],
                   [[[S0, S2], [S0, S1]], [[S2, S1], [S1, S2]], [[R, P], [R, R]], [[S0, S0], [R, R]]])

    def test_linear_column_and_row_parallel(self):
        x, w, b = values((6, 8), seed=60), values((10, 8), seed=61), values((10,), seed=62)
        ref, ref_nb = TF.linear(x, w, b), TF.linear(x, w)
        cases = [
            # x, weight, bias placements -> output with the bias, output without it (None: refused)
            ([R], [S0], [R], [S1], [S1]),     # column parallel, bias sliced locally
            ([R], [S0], [S0], [S1], [S1]),    # column parallel, bias sharded like the output
            ([S0], [R], [R], [S0], [S0]),     # batch shard
            ([S1], [S1], [R], [P], [P]),      # row parallel: bias added on the first coordinate only
            ([S1], [S1], [P], [P], [P]),      # a Partial bias: every piece added
            ([S1], [R], [R], [P], [P]),
            ([R], [S1], [R], [P], [P]),
            ([P], [R], [R], [P], [P]),
            ([R], [P], [P], [P], [P]),
            ([S0], [S0], [R], None, None),    # two different kept dims
            ([S0], [R], [S0], None, [S0]),    # bias not sharded like the output
            ([R], [R], [P], None, [R]),       # Partial bias on a non-Partial output
            ([S1], [S1], [S0], None, [P]),    # a sharded bias on a Partial output
            ([P], [P], [R], None, None),
        ]
        for mesh in (CPU2, CPU3):
            for px, pw, pb, po_bias, po_plain in cases:
                for with_bias in (True, False):
                    with self.subTest(mesh=mesh, x=px, w=pw, b=pb, bias=with_bias):
                        xd, wd = genuine_partial(x, mesh, px), genuine_partial(w, mesh, pw, seed=1)
                        bd = genuine_partial(b, mesh, pb, seed=2) if with_bias else None
                        po = po_bias if with_bias else po_plain
                        if po is None:
                            with self.assertRaises(PlacementError) as cm:
                                F.linear(xd, wd, bd)
                            self.assertPlacementError(cm.exception, "linear")
                            continue
                        z = F.linear(xd, wd, bd)
                        self.assertEqual(z.placements, po)
                        assert_equal_everywhere(self, z, ref if with_bias else ref_nb)

    def test_linear_2x2_and_3d_input(self):
        x, w, b = values((2, 6, 8), seed=63), values((10, 8), seed=64), values((10,), seed=65)
        ref = TF.linear(x, w, b)
        cases = [
            ([S0, R], [R, S0], [R, S0], [S0, S2]),    # dp x tp column parallel
            ([S1, S2], [R, S1], [R, R], [S1, P]),     # dp x tp row parallel
            ([S1, S2], [R, S1], [R, P], [S1, P]),
            ([S2, S2], [S1, S1], [R, R], [P, P]),     # K nested on both mesh dims
            ([R, S2], [S0, S1], [S0, R], [S2, P]),
            ([S0, S2], [R, S1], [S0, R], None),       # bias sharded where the output is not
        ]
        for px, pw, pb, po in cases:
            with self.subTest(x=px, w=pw, b=pb):
                xd, wd, bd = (genuine_partial(t, CPU2x2, p, seed=i) for i, (t, p) in enumerate(((x, px), (w, pw), (b, pb))))
                if po is None:
                    with self.assertRaises(PlacementError):
                        F.linear(xd, wd, bd)
                    continue
                z = F.linear(xd, wd, bd)
                self.assertEqual(z.placements, po)
                assert_equal_everywhere(self, z, ref)

    def test_low_precision_and_partial_values(self):
        a, b = randn(6, 8, seed=70).bfloat16(), randn(8, 5, seed=71).bfloat16()
        for pa, pb in ((S0, R), (R, S1), (S1, S0), (P, R)):
            with self.subTest(pa=pa, pb=pb):
                z = genuine_partial(a, CPU3, [pa]) @ genuine_partial(b, CPU3, [pb], seed=1)
                assert_close_everywhere(self, z, a @ b, rtol=2e-2, atol=5e-2)
        a, b = randn(6, 8, seed=72), randn(8, 5, seed=73)
        z = dtorch.from_torch(a, CPU3, [S1]) @ dtorch.from_torch(b, CPU3, [S0])
        self.assertEqual(z.placements, [P])
        assert_tensor_allclose(self, z, a @ b, rtol=1e-5, atol=1e-5)
        assert_close_everywhere(self, z.redistribute(placements=[R]), a @ b, rtol=1e-5, atol=1e-5)
        # Shard-only results are exact even for general floats.
        z = dtorch.from_torch(a, CPU3, [S0]) @ dtorch.from_torch(b, CPU3, [R])
        assert_equal_everywhere(self, z, a @ b)


if __name__ == "__main__":
    unittest.main()
