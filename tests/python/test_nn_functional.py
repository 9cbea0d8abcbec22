"""dtorch.nn.functional against eager torch.nn.functional on the same inputs.

One device: torch.equal (and the same failures as torch for unsupported dtypes). 2-device,
3-device (uneven shards) and 2x2 meshes: every placement combination of the inputs, with the
output placement each op documents (include/dtorch/dtorch_ops.h) or a PlacementError. Shard-only
results are exact unless an op documents otherwise; Partial results are compared with allclose.
"""

import itertools
import random
import unittest
import warnings

import torch
import torch.nn.functional as TF

import dtorch
import dtorch.nn.functional as F
from dtorch import KernelError, Partial, PlacementError, Replicate, Shard
from dtorch.test.test_util import assert_replicas_equal, assert_tensor_allclose, assert_tensor_equal, genuine_partial

from helpers import CPU1, CPU2, CPU3, CPU2x2, device_assert, randn
from test_views import local_box, mesh_coords

# Operators this module tests against eager PyTorch (tests/python/test_registry.py).
TESTED_OPS = {
    "relu", "gelu", "silu", "leaky_relu", "elu", "sigmoid", "tanh", "softmax", "log_softmax",
    "layer_norm", "rms_norm", "group_norm", "batch_norm", "embedding", "conv2d", "interpolate", "pad",
    "dropout", "pixel_shuffle", "scaled_dot_product_attention",
}

R, P = Replicate(), Partial()
S = Shard

# The references: torch's own ops.
ref_rms_norm = TF.rms_norm
ref_sdpa = TF.scaled_dot_product_attention


# ------------------------------------------------------------------ placement rules (as documented)


def placements_1d(ndim, partial=True):
    out = [R] + [S(d) for d in range(ndim)]
    return out + [P] if partial else out


def rule_from(maps, linear=()):
    """A per-mesh-dim rule: ``maps[j](d)`` is the output dim a Shard(d) of input j becomes, "P" for a
    shard that leaves partial sums, or None (rejected); inputs in ``linear`` may be Partial alone."""

    def rule(pls):
        out_dim, partial, nonrep = None, False, 0
        for j, p in enumerate(pls):
            if p.is_replicate():
                continue
            nonrep += 1
            if p.is_partial():
                if j not in linear or partial:
                    return None
                partial = True
                continue
            od = maps[j](p.dim)
            if od is None:
                return None
            if od == "P":
                if partial:
                    return None
                partial = True
                continue
            if out_dim is not None and od != out_dim:
                return None
            out_dim = od
        if partial:
            return P if nonrep == 1 else None
        return S(out_dim) if out_dim is not None else R

    rule.maps = maps
    return rule


def same_dims(d):
    return d


def lines_up(case, mesh, pls_per_input, out_pls, out_shape):
    """Whether every device holds the part of each input it reads (the nn engine's check behind
    "the shards of the inputs do not line up", which the per-mesh-dim rule cannot see when shards
    nest). From the rule's dim maps (identity without them): a dim mapped to output dim od is read
    over the device's block of od (whole when it broadcasts), a "P" dim over the device's own
    block, any other dim whole."""
    maps = getattr(case.rule, "maps", None) or [same_dims] * len(case.inputs)
    for c in mesh_coords(mesh):
        os_, ol = local_box(tuple(out_shape), mesh, out_pls, c)
        for t, pls, to_out in zip(case.inputs, pls_per_input, maps):
            hs, hl = local_box(tuple(t.shape), mesh, pls, c)
            for d in range(t.dim()):
                od = to_out(d)
                if od == "P":
                    ns, nl = hs[d], hl[d]
                elif od is not None and t.shape[d] == out_shape[od]:
                    ns, nl = os_[od], ol[od]
                else:
                    ns, nl = 0, t.shape[d]
                if nl > 0 and not (hs[d] <= ns and ns + nl <= hs[d] + hl[d]):
                    return False
    return True


class Case:
    """One op call: a torch reference and the dtorch call over the same tensor inputs."""

    def __init__(self, name, ref, fn, inputs, rule, exact=True, options=None):
        self.name, self.ref, self.fn, self.inputs, self.rule, self.exact = name, ref, fn, inputs, rule, exact
        self.options = options or [placements_1d(t.ndim, partial=t.dtype.is_floating_point) for t in inputs]


class NNTestCase(unittest.TestCase):
    def check(self, got, expected, close):
        """Against torch (allclose or equal); a dtorch result's replicas bitwise equal."""
        if isinstance(got, dtorch.Tensor):
            assert_replicas_equal(self, got)
        if close:
            assert_tensor_allclose(self, got, expected, rtol=1e-4, atol=1e-5)
        else:
            assert_tensor_equal(self, got, expected)

    def same_outcome(self, ref_thunk, dt_thunk, exact=True):
        """torch's result or torch's failure: dtorch must fail too (at the call or at the read)."""
        try:
            expected = ref_thunk()
        except Exception as e:  # noqa: BLE001 - mirrored
            with self.assertRaises(type(e) if not isinstance(e, RuntimeError) else RuntimeError):
                dt_thunk().to_torch()
            return
        self.check(dt_thunk(), expected, close=not exact)

    def run_combo(self, case, mesh, pls_per_input, expected_pl, full, misaligned=False):
        """``expected_pl`` None: a PlacementError naming the op and the fix; ``misaligned``: accepted
        per mesh dim, but the nested shards do not line up (a PlacementError that says so)."""
        dins = [genuine_partial(t, mesh, pl, seed=j) for j, (t, pl) in enumerate(zip(case.inputs, pls_per_input))]
        if expected_pl is None or misaligned:
            with self.assertRaises(PlacementError) as cm:
                case.fn(*dins)
            self.assertIn(case.name, str(cm.exception))
            self.assertIn("line up" if misaligned else "redistribute", str(cm.exception))
            return
        out = case.fn(*dins)
        self.assertEqual(out.placements, expected_pl)
        partial = any(p.is_partial() for pl in pls_per_input for p in pl)
        self.check(out, full, close=partial or not case.exact)

    def sweep(self, case, meshes=(CPU2, CPU3), grid=True, max_2x2=80):
        full = case.ref(*case.inputs)
        for mesh in meshes:
            for combo in itertools.product(*case.options):
                exp = case.rule(combo)
                with self.subTest(op=case.name, mesh=mesh.shape, placements=combo):
                    self.run_combo(case, mesh, [[p] for p in combo], None if exp is None else [exp], full)
        if not grid:
            return
        # 2x2: every input alone on both mesh dims, then pairs of accepted 1-D combinations.
        combos = []
        n = len(case.inputs)
        for j in range(n):
            for pa, pb in itertools.product(case.options[j], repeat=2):
                pls = [(R, R)] * n
                pls[j] = (pa, pb)
                combos.append(tuple(pls))
        accepted = [c for c in itertools.product(*case.options) if case.rule(c) is not None]
        pairs = [tuple(zip(a, b)) for a, b in itertools.product(accepted, repeat=2)]
        random.Random(0).shuffle(pairs)
        combos += pairs[:max_2x2]
        for pls in combos:
            exp = [case.rule(tuple(pl[md] for pl in pls)) for md in range(2)]
            ins = [list(pl) for pl in pls]
            bad = any(e is None for e in exp)
            # Accepted per mesh dim, nested shards must also line up on every device.
            misaligned = not bad and not lines_up(case, CPU2x2, ins, exp, full.shape)
            with self.subTest(op=case.name, mesh=(2, 2), placements=pls):
                self.run_combo(case, CPU2x2, ins, None if bad else exp, full, misaligned=misaligned)


# ------------------------------------------------------------------ activations

# name: (torch reference, dtorch call, exact on shards). ATen's CPU kernels compute the
# transcendental activations with a vectorised body and a scalar tail that round differently, so
# on shards (other lengths) gelu, silu, elu and sigmoid may differ in the last bit: allclose there.
ACTS = {
    "relu": (lambda x: TF.relu(x), lambda x: F.relu(x), True),
    "gelu": (lambda x: TF.gelu(x), lambda x: F.gelu(x), False),
    "gelu_tanh": (lambda x: TF.gelu(x, approximate="tanh"), lambda x: F.gelu(x, approximate="tanh"), False),
    "silu": (lambda x: TF.silu(x), lambda x: F.silu(x), False),
    "leaky_relu": (lambda x: TF.leaky_relu(x, 0.2), lambda x: F.leaky_relu(x, 0.2), True),
    "elu": (lambda x: TF.elu(x, alpha=0.7), lambda x: F.elu(x, alpha=0.7), False),
    "sigmoid": (lambda x: torch.sigmoid(x), lambda x: F.sigmoid(x), False),
    "tanh": (lambda x: torch.tanh(x), lambda x: F.tanh(x), True),
}


def rule_elementwise(pls):
    return None if pls[0].is_partial() else pls[0]


class TestActivations(NNTestCase):
    def test_one_device_dtypes(self):
        for name, (ref, fn, _) in ACTS.items():
            for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.bool):
                with self.subTest(op=name, dtype=dtype):
                    x = randn(5, 7, dtype=torch.float64).mul(3)
                    x = x.to(dtype) if dtype.is_floating_point or dtype == torch.bool else x.round().to(dtype)
                    self.same_outcome(lambda: ref(x), lambda: fn(dtorch.from_torch(x)))

    def test_non_contiguous_and_empty(self):
        base = randn(7, 5)
        for name, (ref, fn, _) in ACTS.items():
            for x in (base.t(), base[:, ::2], torch.empty(0, 3)):
                with self.subTest(op=name, shape=tuple(x.shape)):
                    # dtorch holds values contiguously: equal to torch on the contiguous copy (torch
                    # itself rounds tanh-gelu and elu differently for other strides).
                    got = fn(dtorch.from_torch(x))
                    assert_tensor_equal(self, got, ref(x.contiguous()))
                    assert_tensor_allclose(self, got, ref(x), rtol=1e-6, atol=1e-7)

    def test_placements(self):
        x = randn(5, 7)
        for name, (ref, fn, exact) in ACTS.items():
            op = name.replace("_tanh", "")
            self.sweep(Case(op, ref, fn, [x], rule_elementwise, exact=exact), grid=True)

    def test_inplace_and_methods(self):
        x = randn(4, 5)
        d = dtorch.from_torch(x)
        same = F.relu(d, inplace=True)
        self.assertIs(same, d)
        assert_tensor_equal(self, d, TF.relu(x))
        d2 = dtorch.from_torch(x)
        assert_tensor_equal(self, F.silu(d2, inplace=True), TF.silu(x))
        assert_tensor_equal(self, d2, TF.silu(x))
        assert_tensor_equal(self, dtorch.from_torch(x).softmax(-1), x.softmax(-1))
        assert_tensor_equal(self, dtorch.from_torch(x).relu(), x.relu())

    def test_errors(self):
        with self.assertRaisesRegex(RuntimeError, "approximate"):
            F.gelu(dtorch.ones(2), approximate="exact")
        with self.assertRaises(TypeError):
            F.relu(torch.ones(2))
        with self.assertRaises(RuntimeError):
            F.silu(dtorch.ones(2, dtype=torch.int64))
        with self.assertRaises(RuntimeError):
            F.relu(dtorch.ones(2, dtype=torch.bool))


# ------------------------------------------------------------------ softmax


class TestSoftmax(NNTestCase):
    def test_one_device(self):
        x = randn(3, 4, 5)
        for fn, ref in ((F.softmax, TF.softmax), (F.log_softmax, TF.log_softmax)):
            for dim in (0, 1, -1):
                with self.subTest(fn=fn.__name__, dim=dim):
                    assert_tensor_equal(self, fn(dtorch.from_torch(x), dim), ref(x, dim))
                    assert_tensor_equal(self, fn(dtorch.from_torch(x.transpose(0, 2)), dim), ref(x.transpose(0, 2), dim))
            assert_tensor_equal(self, fn(dtorch.from_torch(x), 1, dtype=torch.float64), ref(x, 1, dtype=torch.float64))
            assert_tensor_equal(self, fn(dtorch.from_torch(torch.tensor(2.0)), 0), ref(torch.tensor(2.0), 0))
            for dtype in (torch.float64, torch.bfloat16, torch.float16, torch.int64):
                with self.subTest(fn=fn.__name__, dtype=dtype):
                    xd = x.to(dtype)
                    self.same_outcome(lambda: ref(xd, -1), lambda: fn(dtorch.from_torch(xd), -1))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                assert_tensor_equal(self, fn(dtorch.from_torch(x[0])), ref(x[0]))  # implicit dim (deprecated)

    def test_placements(self):
        x = randn(5, 3, 7)
        for name, fn, ref in (("softmax", F.softmax, TF.softmax), ("log_softmax", F.log_softmax, TF.log_softmax)):
            for dim in (1, -1):
                nd = dim % 3
                rule = lambda pls, nd=nd: None if pls[0].is_partial() or pls[0] == S(nd) else pls[0]  # noqa: E731
                self.sweep(Case(name, lambda t, dim=dim, ref=ref: ref(t, dim), lambda t, dim=dim, fn=fn: fn(t, dim),
                                [x], rule), grid=dim == -1)

    def test_errors(self):
        x = dtorch.ones(2, 3)
        with self.assertRaises(IndexError):
            F.softmax(x, 2)
        with self.assertRaises(RuntimeError):
            F.softmax(dtorch.ones(2, dtype=torch.int64), 0)
        with self.assertRaises(RuntimeError):
            F.log_softmax(x, 0, dtype=torch.int32)


# ------------------------------------------------------------------ normalisation


class TestNorms(NNTestCase):
    def test_layer_norm(self):
        x, w, b = randn(5, 3, 4), randn(3, 4, seed=1), randn(3, 4, seed=2)
        for shape, args in (((4,), (w[0], b[0])), ((3, 4), (w, b)), ((4,), (None, None)), ((3, 4), (w, None))):
            with self.subTest(shape=shape, weight=args[0] is not None):
                dargs = [None if a is None else dtorch.from_torch(a) for a in args]
                assert_tensor_equal(self, F.layer_norm(dtorch.from_torch(x), shape, *dargs, eps=1e-3),
                                    TF.layer_norm(x, shape, *args, eps=1e-3))
        xt = x.transpose(0, 1)
        assert_tensor_equal(self, F.layer_norm(dtorch.from_torch(xt), 4), TF.layer_norm(xt, (4,)))
        for dtype in (torch.float64, torch.bfloat16, torch.float16):
            with self.subTest(dtype=dtype):
                xd, wd = x.to(dtype), w[0].to(dtype)
                self.same_outcome(lambda: TF.layer_norm(xd, (4,), wd),
                                  lambda: F.layer_norm(dtorch.from_torch(xd), (4,), dtorch.from_torch(wd)))

        def rule(k):
            return rule_from([lambda d: d if d < 3 - k else None, lambda d: None, lambda d: None])

        for k in (1, 2):
            ns = (3, 4)[2 - k:]
            wk, bk = w[(0,) * (2 - k)], b[(0,) * (2 - k)]
            self.sweep(Case("layer_norm", lambda t, w_, b_, ns=ns: TF.layer_norm(t, ns, w_, b_),
                            lambda t, w_, b_, ns=ns: F.layer_norm(t, ns, w_, b_), [x, wk, bk], rule(k)),
                       grid=k == 1)

    def test_rms_norm(self):
        x, w = randn(5, 3, 4), randn(4, seed=1)
        for eps in (None, 1e-6, 0.1):
            for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
                with self.subTest(eps=eps, dtype=dtype):
                    xd, wd = x.to(dtype), w.to(dtype)
                    assert_tensor_equal(self, F.rms_norm(dtorch.from_torch(xd), (4,), dtorch.from_torch(wd), eps=eps),
                                        ref_rms_norm(xd, (4,), wd, eps))
                    assert_tensor_equal(self, F.rms_norm(dtorch.from_torch(xd), (3, 4), eps=eps),
                                        ref_rms_norm(xd, (3, 4), None, eps))
        rule = rule_from([lambda d: d if d < 2 else None, lambda d: None])
        self.sweep(Case("rms_norm", lambda t, w_: ref_rms_norm(t, (4,), w_), lambda t, w_: F.rms_norm(t, (4,), w_),
                        [x, w], rule))

    def test_group_norm(self):
        x, w, b = randn(5, 4, 3, 2), randn(4, seed=1), randn(4, seed=2)
        for groups in (1, 2, 4):
            assert_tensor_equal(self, F.group_norm(dtorch.from_torch(x), groups, dtorch.from_torch(w),
                                                   dtorch.from_torch(b), eps=1e-3),
                                TF.group_norm(x, groups, w, b, eps=1e-3))
        assert_tensor_equal(self, F.group_norm(dtorch.from_torch(x[:, :, 0]), 2), TF.group_norm(x[:, :, 0], 2))
        rule = rule_from([lambda d: 0 if d == 0 else None, lambda d: None, lambda d: None])
        self.sweep(Case("group_norm", lambda t, w_, b_: TF.group_norm(t, 2, w_, b_),
                        lambda t, w_, b_: F.group_norm(t, 2, w_, b_), [x, w, b], rule), max_2x2=20)

    def test_batch_norm(self):
        x = randn(5, 4, 3)
        rm, rv, w, b = randn(4, seed=1), randn(4, seed=2).abs() + 0.5, randn(4, seed=3), randn(4, seed=4)
        for args in ((w, b), (None, None), (w, None)):
            dargs = [None if a is None else dtorch.from_torch(a) for a in args]
            assert_tensor_equal(self, F.batch_norm(dtorch.from_torch(x), dtorch.from_torch(rm), dtorch.from_torch(rv),
                                                   *dargs, eps=1e-3),
                                TF.batch_norm(x, rm, rv, *args, eps=1e-3))
        x4 = randn(2, 4, 3, 5)
        assert_tensor_equal(self, F.batch_norm(dtorch.from_torch(x4), dtorch.from_torch(rm), dtorch.from_torch(rv)),
                            TF.batch_norm(x4, rm, rv))
        xb = x.to(torch.bfloat16)  # bfloat16 input with float32 statistics, as torch allows
        assert_tensor_equal(self, F.batch_norm(dtorch.from_torch(xb), dtorch.from_torch(rm), dtorch.from_torch(rv)),
                            TF.batch_norm(xb, rm, rv))
        per_c = lambda d: 1 if d == 0 else None  # noqa: E731
        rule = rule_from([same_dims, per_c, per_c, per_c, per_c])
        opts = [placements_1d(3), [R, S(0)], [R, S(0)], [R, S(0), P], [R, S(0)]]
        self.sweep(Case("batch_norm", lambda t, m, v, w_, b_: TF.batch_norm(t, m, v, w_, b_),
                        lambda t, m, v, w_, b_: F.batch_norm(t, m, v, w_, b_), [x, rm, rv, w, b], rule,
                        options=opts), max_2x2=30)

    def test_errors(self):
        x = dtorch.ones(2, 3, 4)
        with self.assertRaisesRegex(RuntimeError, "normalized_shape"):
            F.layer_norm(x, (3,))
        with self.assertRaisesRegex(RuntimeError, "weight"):
            F.layer_norm(x, (4,), dtorch.ones(3))
        with self.assertRaises(RuntimeError):
            F.layer_norm(x, (4,), dtorch.ones(4, dtype=torch.float64))
        with self.assertRaises(RuntimeError):
            F.rms_norm(dtorch.ones(2, 3, dtype=torch.int64), (3,))
        with self.assertRaisesRegex(RuntimeError, "divisible"):
            F.group_norm(x, 2)
        with self.assertRaises(RuntimeError):
            F.group_norm(dtorch.ones(3), 1)
        with self.assertRaises(RuntimeError):
            F.batch_norm(x, dtorch.zeros(2), dtorch.ones(3))
        with self.assertRaises(NotImplementedError):
            F.batch_norm(x, dtorch.zeros(3), dtorch.ones(3), training=True)
        with self.assertRaises(ValueError):
            F.batch_norm(x, None, None)


# ------------------------------------------------------------------ embedding


class TestEmbedding(NNTestCase):
    def test_one_device(self):
        w = randn(11, 6)
        idx = torch.tensor([[0, 10, 3, 3], [7, 1, 2, 9]])
        for i in (idx, idx.to(torch.int32), idx.t(), idx[0], torch.tensor(4)):
            with self.subTest(shape=tuple(i.shape), dtype=i.dtype):
                assert_tensor_equal(self, F.embedding(dtorch.from_torch(i), dtorch.from_torch(w)), TF.embedding(i, w))
        for dtype in (torch.float64, torch.bfloat16, torch.float16, torch.int64):
            wd = (w * 4).round().to(dtype)
            assert_tensor_equal(self, F.embedding(dtorch.from_torch(idx), dtorch.from_torch(wd)), TF.embedding(idx, wd))
        assert_tensor_equal(self, F.embedding(dtorch.from_torch(idx), dtorch.from_torch(w), padding_idx=0),
                            TF.embedding(idx, w, padding_idx=0))

    def test_placements(self):
        w = randn(11, 6)
        idx = torch.tensor([[0, 10, 3, 3, 5], [7, 1, 2, 9, 6], [4, 8, 10, 0, 1]])
        rule = rule_from([same_dims, lambda d: "P" if d == 0 else 2], linear=(1,))
        self.sweep(Case("embedding", TF.embedding, F.embedding, [idx, w], rule,
                        options=[placements_1d(2, partial=False), placements_1d(2)]), max_2x2=80)

    def test_vocab_parallel_partial_is_exact(self):
        w = randn(11, 6)
        idx = torch.tensor([[0, 10, 3], [7, 5, 6]])
        out = F.embedding(dtorch.from_torch(idx, CPU3), dtorch.from_torch(w, CPU3, [S(0)]))
        self.assertEqual(out.placements, [P])
        assert_tensor_equal(self, out, TF.embedding(idx, w))  # zeros elsewhere: the sum is exact
        assert_tensor_equal(self, out.redistribute(placements=[R]), TF.embedding(idx, w))

    @device_assert("eager torch's own embedding of an index out of range")
    def test_out_of_range_fails_the_kernel(self):
        w = randn(11, 6)
        for bad in (11, -1):
            idx = torch.tensor([[0, bad], [3, 4]])
            with self.assertRaisesRegex(IndexError, "index out of range"):
                TF.embedding(idx, w)
            for mesh, wpl, ipl in ((CPU1, [R], [R]), (CPU2, [R], [S(0)]), (CPU2, [S(0)], [R]), (CPU3, [S(0)], [R]),
                                   (CPU2x2, [S(0), S(0)], [R, R]), (CPU2x2, [S(0), R], [R, S(0)])):
                with self.subTest(bad=bad, mesh=mesh.shape, weight=wpl, indices=ipl):
                    out = F.embedding(dtorch.from_torch(idx, mesh, ipl), dtorch.from_torch(w, mesh, wpl))
                    with self.assertRaisesRegex(KernelError, "index out of range in self"):
                        out.to_torch()
        # The runtime stays usable.
        assert_tensor_equal(self, F.embedding(dtorch.from_torch(torch.tensor([1])), dtorch.from_torch(w)),
                            TF.embedding(torch.tensor([1]), w))

    def test_errors(self):
        w = dtorch.ones(5, 3)
        with self.assertRaises(RuntimeError):
            F.embedding(dtorch.ones(2), w)
        with self.assertRaises(RuntimeError):
            F.embedding(dtorch.tensor([1]), dtorch.ones(5))
        with self.assertRaises(AssertionError):
            F.embedding(dtorch.tensor([1]), w, padding_idx=5)
        with self.assertRaises(NotImplementedError):
            F.embedding(dtorch.tensor([1]), w, max_norm=1.0)


# ------------------------------------------------------------------ conv2d


class TestConv2d(NNTestCase):
    def test_one_device(self):
        x, w, b = randn(3, 4, 7, 6), randn(6, 4, 3, 3, seed=1), randn(6, seed=2)
        w2 = randn(6, 2, 3, 2, seed=3)
        cases = [
            (x, w, b, dict()),
            (x, w, None, dict(stride=2, padding=1)),
            (x, w, b, dict(stride=(2, 1), padding=(0, 2), dilation=(1, 2))),
            (x, w, b, dict(padding="same", dilation=2)),
            (x, w, None, dict(padding="valid")),
            (x, w2, b, dict(groups=2, padding=1)),
            (x[0], w, b, dict(padding=1)),  # unbatched
            (x.transpose(2, 3), w, b, dict()),  # non-contiguous
        ]
        for xi, wi, bi, kw in cases:
            with self.subTest(x=tuple(xi.shape), kw=kw):
                db = None if bi is None else dtorch.from_torch(bi)
                assert_tensor_equal(self, F.conv2d(dtorch.from_torch(xi), dtorch.from_torch(wi), db, **kw),
                                    TF.conv2d(xi, wi, bi, **kw))
        xd, wd = x.double(), w.double()
        assert_tensor_equal(self, F.conv2d(dtorch.from_torch(xd), dtorch.from_torch(wd)), TF.conv2d(xd, wd))
        for dtype in (torch.bfloat16, torch.float16):
            xh, wh = x.to(dtype), w.to(dtype)
            self.same_outcome(lambda: TF.conv2d(xh, wh), lambda: F.conv2d(dtorch.from_torch(xh), dtorch.from_torch(wh)))

    def test_placements(self):
        x, w, b = randn(5, 4, 6, 6), randn(7, 4, 3, 3, seed=1), randn(7, seed=2)
        batch = lambda d: 0 if d == 0 else None  # noqa: E731
        cout = lambda d: 1 if d == 0 else None  # noqa: E731
        # The backend may pick other algorithms for other batch or channel counts: allclose.
        self.sweep(Case("conv2d", lambda t, w_, b_: TF.conv2d(t, w_, b_, padding=1),
                        lambda t, w_, b_: F.conv2d(t, w_, b_, padding=1), [x, w, b],
                        rule_from([batch, cout, cout]), exact=False), max_2x2=20)
        self.sweep(Case("conv2d", lambda t, w_: TF.conv2d(t, w_, stride=2), lambda t, w_: F.conv2d(t, w_, stride=2),
                        [x, w], rule_from([batch, cout], linear=(0, 1)), exact=False), max_2x2=20)
        # groups > 1: output channels need matching input channels, so the weight may not be sharded.
        w2 = randn(6, 2, 3, 3, seed=3)
        self.sweep(Case("conv2d", lambda t, w_: TF.conv2d(t, w_, groups=2), lambda t, w_: F.conv2d(t, w_, groups=2),
                        [x, w2], rule_from([batch, lambda d: None], linear=(0, 1)), exact=False), grid=False)

    def test_errors(self):
        x = dtorch.ones(1, 4, 5, 5)
        with self.assertRaisesRegex(RuntimeError, "channels"):
            F.conv2d(x, dtorch.ones(2, 3, 3, 3))
        with self.assertRaises(RuntimeError):
            F.conv2d(x, dtorch.ones(2, 4, 3))
        with self.assertRaises(RuntimeError):
            F.conv2d(x, dtorch.ones(2, 4, 3, 3), dtorch.ones(3))
        with self.assertRaises(RuntimeError):
            F.conv2d(x, dtorch.ones(2, 4, 6, 6))
        with self.assertRaises(RuntimeError):
            F.conv2d(x, dtorch.ones(2, 4, 3, 3), padding="same", stride=2)
        with self.assertRaises(RuntimeError):
            F.conv2d(x, dtorch.ones(2, 4, 3, 3, dtype=torch.float64))
        with self.assertRaises(RuntimeError):
            F.conv2d(x, dtorch.ones(2, 4, 3, 3), padding="full")


# ------------------------------------------------------------------ interpolate and pad


class TestInterpolatePad(NNTestCase):
    INTERP = [
        ((2, 3, 4, 6), dict(size=(5, 9))),
        ((2, 3, 4, 6), dict(scale_factor=1.7)),
        ((2, 3, 4, 6), dict(scale_factor=(2, 0.5), mode="nearest-exact")),
        ((2, 3, 4, 6), dict(scale_factor=1.5, mode="bilinear")),
        ((2, 3, 4, 6), dict(size=(7, 3), mode="bilinear", align_corners=True)),
        ((2, 3, 4, 6), dict(scale_factor=2.3, mode="bicubic", recompute_scale_factor=True)),
        ((2, 3, 5), dict(scale_factor=2.5, mode="linear")),
        ((2, 3, 5), dict(size=4)),
        ((1, 2, 3, 4, 2), dict(scale_factor=2, mode="trilinear", align_corners=False)),
        ((1, 2, 3, 4, 2), dict(size=(2, 5, 3))),
    ]

    def test_interpolate_one_device(self):
        for shape, kw in self.INTERP:
            with self.subTest(shape=shape, kw=kw):
                x = randn(*shape)
                assert_tensor_equal(self, F.interpolate(dtorch.from_torch(x), **kw), TF.interpolate(x, **kw))
        x = randn(2, 3, 6, 4).transpose(2, 3)
        assert_tensor_equal(self, F.interpolate(dtorch.from_torch(x), scale_factor=2, mode="bilinear"),
                            TF.interpolate(x, scale_factor=2, mode="bilinear"))
        xu = (randn(1, 2, 3, 3) * 50).abs().to(torch.uint8)
        assert_tensor_equal(self, F.interpolate(dtorch.from_torch(xu), scale_factor=2), TF.interpolate(xu, scale_factor=2))
        for dtype in (torch.float64, torch.bfloat16, torch.float16):
            xd = randn(1, 2, 3, 3).to(dtype)
            self.same_outcome(lambda: TF.interpolate(xd, scale_factor=2, mode="bilinear"),
                              lambda: F.interpolate(dtorch.from_torch(xd), scale_factor=2, mode="bilinear"))

    def test_interpolate_placements(self):
        rule = rule_from([lambda d: d if d < 2 else None], linear=(0,))
        for shape, kw in (self.INTERP[3], self.INTERP[0], self.INTERP[6]):
            x = randn(3, *shape[1:])
            # The linear modes' CPU kernels vectorise across channels: channel shards may differ in the
            # last bit (documented in dtorch_ops.h).
            exact = kw.get("mode", "nearest").startswith("nearest")
            self.sweep(Case("interpolate", lambda t, kw=kw: TF.interpolate(t, **kw),
                            lambda t, kw=kw: F.interpolate(t, **kw), [x], rule, exact=exact), grid=len(shape) == 4)

    def test_interpolate_errors(self):
        x = dtorch.ones(1, 1, 2, 2)
        with self.assertRaises(ValueError):
            F.interpolate(x, size=3, scale_factor=2)
        with self.assertRaises(ValueError):
            F.interpolate(x)
        with self.assertRaises(ValueError):
            F.interpolate(x, scale_factor=2, align_corners=True)
        with self.assertRaises(NotImplementedError):
            F.interpolate(x, scale_factor=2, mode="linear")
        with self.assertRaises(NotImplementedError):
            F.interpolate(dtorch.ones(2, 2), scale_factor=2)
        with self.assertRaises(RuntimeError):
            F.interpolate(dtorch.ones(1, 1, 2, 2, dtype=torch.int64), scale_factor=2, mode="bilinear")
        with self.assertRaises(RuntimeError):
            F.interpolate(x, size=(0, 3))

    # Non-constant modes pad the last 1, 2 or 3 dims of a (batched) tensor with 1 or 2 more dims.
    PADS = [
        ((1, 2), "constant", None),
        ((1, 2), "constant", 1.5),
        ((2, 0, 1, 1), "constant", 0.0),
        ((-1, 2), "constant", 0.0),
        ((1, 1, 2, 0), "reflect", None),
        ((2, 1), "replicate", None),
        ((1, 2, 0, 1), "circular", None),
        ((1, 2), "reflect", 0.0),
    ]

    def test_pad_one_device(self):
        for pad, mode, value in self.PADS:
            shape = (3, 4, 5) if len(pad) == 2 else (2, 3, 4, 5)
            x = randn(*shape)
            with self.subTest(pad=pad, mode=mode, value=value):
                assert_tensor_equal(self, F.pad(dtorch.from_torch(x), pad, mode=mode, value=value),
                                    TF.pad(x, pad, mode=mode, value=value))
        x = randn(2, 3, 4, 5)
        for pad, mode in (((1, 1), "reflect"), ((1, 1, 1, 1, 1, 1, 1, 1), "replicate")):
            with self.subTest(pad=pad, mode=mode):
                self.same_outcome(lambda: TF.pad(x, pad, mode=mode), lambda: F.pad(dtorch.from_torch(x), pad, mode=mode))
        x3 = randn(2, 3, 4)
        assert_tensor_equal(self, F.pad(dtorch.from_torch(x3), (1, 0, 2, 1, 1, 1), value=2.0),
                            TF.pad(x3, (1, 0, 2, 1, 1, 1), value=2.0))  # every dim padded
        xi = torch.arange(12).reshape(3, 4)
        assert_tensor_equal(self, F.pad(dtorch.from_torch(xi), (1, 1), value=7), TF.pad(xi, (1, 1), value=7))
        xb = xi > 5
        assert_tensor_equal(self, F.pad(dtorch.from_torch(xb), (0, 2)), TF.pad(xb, (0, 2)))
        xt = x.transpose(1, 3)
        assert_tensor_equal(self, F.pad(dtorch.from_torch(xt), (1, 0, 2, 2), mode="reflect"),
                            TF.pad(xt, (1, 0, 2, 2), mode="reflect"))
        for dtype in (torch.float64, torch.bfloat16, torch.float16):
            xd = x[0].to(dtype)
            self.same_outcome(lambda: TF.pad(xd, (1, 1), mode="replicate"),
                              lambda: F.pad(dtorch.from_torch(xd), (1, 1), mode="replicate"))

    def test_pad_placements(self):
        x = randn(3, 5, 4)
        for pad, mode, value in self.PADS:
            if len(pad) == 4 and mode != "constant":
                continue
            npd = len(pad) // 2
            linear = (0,) if mode != "constant" or not value else ()
            rule = rule_from([lambda d, npd=npd: d if d < 3 - npd else None], linear=linear)
            self.sweep(Case("pad", lambda t, a=(pad, mode, value): TF.pad(t, a[0], mode=a[1], value=a[2]),
                            lambda t, a=(pad, mode, value): F.pad(t, a[0], mode=a[1], value=a[2]), [x], rule),
                       grid=mode == "reflect")

    def test_pad_errors(self):
        x = dtorch.ones(2, 3)
        with self.assertRaises(RuntimeError):
            F.pad(x, (1,))
        with self.assertRaises(RuntimeError):
            F.pad(x, (1, 1, 1, 1, 1, 1))
        with self.assertRaises(RuntimeError):
            F.pad(x, (3, 0), mode="reflect")
        with self.assertRaises(RuntimeError):
            F.pad(x, (-2, -2))
        with self.assertRaises(NotImplementedError):
            F.pad(x, (1, 1), mode="wrap")
        with self.assertRaises(NotImplementedError):
            F.pad(dtorch.ones(3), (1, 1), mode="reflect")


# ------------------------------------------------------------------ dropout


class TestDropout(NNTestCase):
    def test_identity(self):
        d = dtorch.from_torch(randn(4, 5))
        self.assertIs(F.dropout(d, 0.5, training=False), d)
        self.assertIs(F.dropout(d, 0.0), d)
        assert_tensor_equal(self, F.dropout(d, 1.0), torch.zeros(4, 5))

    def test_mask_and_scale(self):
        x = randn(40, 50)
        dtorch.manual_seed(1)
        out = F.dropout(dtorch.from_torch(x), 0.3).to_torch()
        kept = out != 0
        frac = kept.float().mean().item()
        self.assertTrue(0.6 < frac < 0.8, frac)
        scale = torch.ones((), dtype=x.dtype).div_(1 - 0.3)  # torch scales by noise.div_(1 - p)
        self.assertTrue(torch.equal(out, x * kept.to(x.dtype) * scale))
        dtorch.manual_seed(1)
        assert_tensor_equal(self, F.dropout(dtorch.from_torch(x), 0.3), out)  # seeded: reproducible
        self.assertFalse(torch.equal(F.dropout(dtorch.from_torch(x), 0.3).to_torch(), out))

    def test_placement_invariant(self):
        x = randn(5, 7)
        dtorch.manual_seed(3)
        full = F.dropout(dtorch.from_torch(x), 0.4).to_torch()
        for mesh, pls in [(CPU2, [[p] for p in placements_1d(2)]), (CPU3, [[p] for p in placements_1d(2)]),
                          (CPU2x2, [[S(0), S(1)], [S(1), S(1)], [P, S(0)], [R, P], [S(0), S(0)]])]:
            for pl in pls:
                with self.subTest(mesh=mesh.shape, placements=pl):
                    dtorch.manual_seed(3)
                    out = F.dropout(genuine_partial(x, mesh, pl), 0.4)
                    self.assertEqual(out.placements, pl)
                    self.check(out, full, close=any(p.is_partial() for p in pl))
        xb = x.to(torch.bfloat16)
        dtorch.manual_seed(3)
        a = F.dropout(dtorch.from_torch(xb), 0.4).to_torch()
        dtorch.manual_seed(3)
        assert_tensor_equal(self, F.dropout(dtorch.from_torch(xb, CPU3, [S(1)]), 0.4), a)

    def test_inplace_and_errors(self):
        d = dtorch.from_torch(randn(3, 3))
        self.assertIs(F.dropout(d, 0.5, inplace=True), d)
        with self.assertRaises(ValueError):
            F.dropout(d, 1.5)
        with self.assertRaises(RuntimeError):
            F.dropout(dtorch.ones(3, dtype=torch.int64), 0.5)


# ------------------------------------------------------------------ pixel_shuffle


class TestPixelShuffle(NNTestCase):
    SHAPES = [((2, 8, 3, 3), 2), ((3, 9, 2, 1), 3), ((4, 2, 3), 1), ((2, 3, 4, 2, 2), 2), ((2, 0, 3, 3), 2),
              ((0, 4, 3, 3), 2), ((1, 4, 0, 2), 2)]

    def test_one_device(self):
        for shape, r in self.SHAPES:
            for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.uint8,
                          torch.bool):
                with self.subTest(shape=shape, r=r, dtype=dtype):
                    x = (randn(*shape, dtype=torch.float64) * 5).to(dtype)
                    assert_tensor_equal(self, F.pixel_shuffle(dtorch.from_torch(x), r), TF.pixel_shuffle(x, r))
        x = randn(2, 3, 4, 8).transpose(1, 3)  # not contiguous
        assert_tensor_equal(self, F.pixel_shuffle(dtorch.from_torch(x), 2), TF.pixel_shuffle(x, 2))

    def test_placements(self):
        # Batch dims only (uneven: 3 rows over 2 devices); every Shard of the last three is refused.
        for shape, r in (((3, 8, 2, 3), 2), ((3, 2, 4, 1, 2), 2)):
            nb = len(shape) - 3
            rule = rule_from([lambda d, nb=nb: d if d < nb else None], linear=(0,))
            self.sweep(Case("pixel_shuffle", lambda t, r=r: TF.pixel_shuffle(t, r),
                            lambda t, r=r: F.pixel_shuffle(t, r), [randn(*shape)], rule), grid=len(shape) == 4)

    def test_refuses_channel_shard(self):
        x = dtorch.from_torch(randn(2, 8, 2, 2), CPU2, [S(1)])
        with self.assertRaises(PlacementError) as cm:
            F.pixel_shuffle(x, 2)
        self.assertIn("pixel_shuffle", str(cm.exception))
        self.assertIn("redistribute", str(cm.exception))

    def test_segmented_input(self):
        # A cat along a sharded batch dim leaves a segmented layout; the op has no pass-through rule
        # (its seg_rule is 0), so the gate makes the input regular first.
        a, b = randn(3, 4, 2, 2), randn(2, 4, 2, 2)
        c = dtorch.cat([dtorch.from_torch(a, CPU2, [S(0)]), dtorch.from_torch(b, CPU2, [S(0)])], dim=0)
        out = F.pixel_shuffle(c, 2)
        self.assertEqual(list(out.placements), [S(0)])
        assert_tensor_equal(self, out, TF.pixel_shuffle(torch.cat([a, b]), 2))

    def test_errors(self):
        x = dtorch.ones(1, 8, 2, 2)
        for args in ((dtorch.ones(2, 4), 2), (x, 0), (x, -1), (x, 3)):
            with self.subTest(shape=tuple(args[0].shape), r=args[1]):
                self.same_outcome(lambda: TF.pixel_shuffle(args[0].to_torch(), args[1]),
                                  lambda: F.pixel_shuffle(*args))
        with self.assertRaises(TypeError):
            F.pixel_shuffle(x, 2.0)
        with self.assertRaises(TypeError):
            F.pixel_shuffle(torch.ones(1, 4, 2, 2), 2)


# ------------------------------------------------------------------ attention


class TestAttention(NNTestCase):
    def inputs(self, b=3, h=2, L=5, S_=6, E=4, Ev=3, dtype=torch.float32):
        return (randn(b, h, L, E, seed=1, dtype=dtype), randn(b, h, S_, E, seed=2, dtype=dtype),
                randn(b, h, S_, Ev, seed=3, dtype=dtype))

    def check_sdpa(self, got, expected):
        assert_tensor_equal(self, got, expected)

    def test_one_device(self):
        q, k, v = self.inputs()
        bmask = torch.rand(5, 6, generator=torch.Generator().manual_seed(0)) > 0.3
        fmask = randn(3, 1, 5, 6, seed=4)
        for kw in (dict(), dict(scale=0.3), dict(attn_mask=bmask), dict(attn_mask=fmask), dict(is_causal=True)):
            with self.subTest(kw=list(kw)):
                dkw = {k_: dtorch.from_torch(v_) if isinstance(v_, torch.Tensor) else v_ for k_, v_ in kw.items()}
                got = F.scaled_dot_product_attention(*(dtorch.from_torch(t) for t in (q, k, v)), **dkw)
                self.check_sdpa(got, ref_sdpa(q, k, v, **kw))
        q2, k2, v2 = (t[0, 0] for t in (q, k, v))  # 2-D, and a non-contiguous 3-D
        self.check_sdpa(F.scaled_dot_product_attention(*(dtorch.from_torch(t) for t in (q2, k2, v2))),
                        ref_sdpa(q2, k2, v2))
        qt, kt, vt = (t.transpose(0, 1)[0] for t in (q, k, v))
        self.check_sdpa(F.scaled_dot_product_attention(*(dtorch.from_torch(t) for t in (qt, kt, vt)), is_causal=True),
                        ref_sdpa(qt, kt, vt, is_causal=True))
        qd, kd, vd = self.inputs(dtype=torch.float64)
        self.check_sdpa(F.scaled_dot_product_attention(*(dtorch.from_torch(t) for t in (qd, kd, vd))),
                        ref_sdpa(qd, kd, vd))

    def test_placements(self):
        q, k, v = self.inputs()
        lead = lambda d: d if d < 2 else None  # noqa: E731
        self.sweep(Case("scaled_dot_product_attention", ref_sdpa, F.scaled_dot_product_attention, [q, k, v],
                        rule_from([lead, lead, lead], linear=(2,))), meshes=(CPU2, CPU3), max_2x2=30)
        # A mask of [b, 1, L, S]: its batch dim shards with q's; its size-1 head dim cannot be sharded.
        fmask = randn(3, 1, 5, 6, seed=4)
        mrule = rule_from([lead, lead, lead, lambda d: 0 if d == 0 else None], linear=(2,))
        opts = [[R, S(0), S(1), S(2)], [R, S(0), S(1)], [R, S(0), S(1), P], placements_1d(4)]
        self.sweep(Case("scaled_dot_product_attention", lambda a, b, c, m: ref_sdpa(a, b, c, attn_mask=m),
                        lambda a, b, c, m: F.scaled_dot_product_attention(a, b, c, attn_mask=m), [q, k, v, fmask],
                        mrule, options=opts), meshes=(CPU2,), max_2x2=20)
        causal = Case("scaled_dot_product_attention", lambda a, b, c: ref_sdpa(a, b, c, is_causal=True),
                      lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), [q, k, v],
                      rule_from([lead, lead, lead], linear=(2,)), options=[[R, S(0), S(1), S(2)]] * 3)
        self.sweep(causal, meshes=(CPU3,), grid=False)

    def test_dropout_is_placement_invariant(self):
        q, k, v = self.inputs()
        dtorch.manual_seed(5)
        full = F.scaled_dot_product_attention(*(dtorch.from_torch(t) for t in (q, k, v)), dropout_p=0.5).to_torch()
        self.assertFalse(torch.allclose(full, ref_sdpa(q, k, v)))
        for mesh, pl in ((CPU2, [S(0)]), (CPU3, [S(1)]), (CPU2x2, [S(1), S(0)]), (CPU2x2, [S(0), S(0)])):
            with self.subTest(mesh=mesh.shape, placements=pl):
                dtorch.manual_seed(5)
                out = F.scaled_dot_product_attention(*(dtorch.from_torch(t, mesh, pl) for t in (q, k, v)),
                                                     dropout_p=0.5)
                assert_tensor_equal(self, out, full)

    def test_errors(self):
        q, k, v = (dtorch.from_torch(t) for t in self.inputs())
        with self.assertRaises(RuntimeError):
            F.scaled_dot_product_attention(q, k, dtorch.ones(3, 2, 5, 3))
        with self.assertRaises(RuntimeError):
            F.scaled_dot_product_attention(q, dtorch.ones(3, 2, 6, 5), v)
        with self.assertRaises(RuntimeError):
            F.scaled_dot_product_attention(q, k, dtorch.ones(3, 2, 6, 3, dtype=torch.float64))
        with self.assertRaises(RuntimeError):
            F.scaled_dot_product_attention(q, k, v, attn_mask=dtorch.ones(5, 6), is_causal=True)
        with self.assertRaises(RuntimeError):
            F.scaled_dot_product_attention(q, k, v, attn_mask=dtorch.ones(5, 6, dtype=torch.int64))
        with self.assertRaises(RuntimeError):
            F.scaled_dot_product_attention(q, k, v, attn_mask=dtorch.ones(4, 6))
        with self.assertRaises(TypeError):
            F.scaled_dot_product_attention(q, k, torch.ones(3, 2, 6, 3))


if __name__ == "__main__":
    unittest.main()
