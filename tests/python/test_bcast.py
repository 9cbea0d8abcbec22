"""Device-independent records (``dt_graph_set_bcast``, ``DTORCH_BCAST=1``; src/core/controller/lower_bcast.c):
an elementwise node whose kernel is the same on every device of its mesh but for the device's own
blobs is lowered once, into one record every device's worker instantiates.

Every result is computed twice, with the records off (one record per device) and on, and checked
bitwise equal device by device (``local_values``: every shard, replica and Partial addend), and
against eager torch; ``graph_stats()["bcast_nodes"]`` says which nodes took the new path. Meshes: 1-D
of 2 and 3 devices (uneven shards), 2-D; genuine multi-piece Partial inputs; float32 and bfloat16.
"""

import inspect
import os
import unittest

import torch

import dtorch
from dtorch import DeviceMesh, Partial, Replicate, Shard
from dtorch.test.probes import bcast, cuda_graph, graph_stats, held_controller, replay
from dtorch.test.test_util import local_values

from helpers import CPU1, CPU2, CPU3, CPU2x2, DEV, assert_close_everywhere, assert_equal_everywhere, genuine_partial, int_valued
from helpers import placements_1d, placements_2d, randn

R, P = Replicate(), Partial()


def nodes():
    return graph_stats()["bcast_nodes"]


def bits(t):
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(ints) if t.dtype.is_floating_point else t


def run(on, fn, *args):
    """fn(*args) with the records on or off, its per-device values and how many nodes took them.
    Replay is off here (it is on by default): it would replay the records-off run's per-device
    template for the records-on run, and the count compares the two lowerings."""
    with replay(False), bcast(on):
        dtorch.synchronize()  # the inputs' own nodes (a Replicate host copy is shared too) counted first
        n0 = nodes()
        y = fn(*args)
        values = local_values(y)
        return y, values, nodes() - n0


# (name, fn, the eager reference, Partial inputs accepted)
OPS = [
    ("add", lambda a, b: a + b, lambda a, b: a + b, True),
    ("mul_sub", lambda a, b: a * b - b, lambda a, b: a * b - b, False),
    ("scale", lambda a, b: a * 2.0 + b, lambda a, b: a * 2.0 + b, True),
    ("scalar", lambda a, b: (a * 2.0 - 0.5) + b, lambda a, b: (a * 2.0 - 0.5) + b, False),
    ("rsub", lambda a, b: 3.0 - a, lambda a, b: 3.0 - a, False),
    ("unary", lambda a, b: a.abs().neg(), lambda a, b: a.abs().neg(), False),
    ("where", lambda a, b: dtorch.where(a > b, a, b), lambda a, b: torch.where(a > b, a, b), False),
    ("clamp", lambda a, b: a.clamp(-2.0, 3.0) * b, lambda a, b: a.clamp(-2.0, 3.0) * b, False),
    ("cast", lambda a, b: (a + b).to(torch.float64), lambda a, b: (a + b).to(torch.float64), False),
]


class TestSameAsPerDevice(unittest.TestCase):
    def sweep(self, mesh, layouts, shape, dtype):
        took = 0
        for pl in layouts:
            for name, fn, ref, partial_ok in OPS:
                if not partial_ok and any(p.is_partial() for p in pl):
                    continue
                ta = int_valued(*shape, dtype=dtype, seed=1)
                tb = int_valued(*shape, dtype=dtype, seed=2)
                a = genuine_partial(ta, mesh, pl, seed=3)
                b = genuine_partial(tb, mesh, pl, seed=4)
                with self.subTest(mesh=mesh, placements=pl, op=name, dtype=dtype):
                    off, off_v, n_off = run(False, fn, a, b)
                    on, on_v, n_on = run(True, fn, a, b)
                    self.assertEqual(n_off, 0)
                    self.assertGreater(n_on, 0)  # the inputs share one layout: every node may
                    took += n_on
                    self.assertEqual(len(on_v), len(off_v))
                    for d, (x, y) in enumerate(zip(on_v, off_v)):
                        self.assertTrue(torch.equal(bits(x), bits(y)), f"device {d}")
                    self.assertEqual(on.placements, off.placements)
                    assert_equal_everywhere(self, on, ref(ta, tb))
        return took

    def test_1d_even_and_uneven(self):
        for mesh, shape in ((CPU2, (4, 6)), (CPU3, (5, 7))):
            for dtype in (torch.float32, torch.bfloat16):
                self.assertGreater(self.sweep(mesh, [[p] for p in placements_1d(2)], shape, dtype), 0)

    def test_2d(self):
        self.assertGreater(self.sweep(CPU2x2, placements_2d(2), (4, 6), torch.float32), 0)

    def test_one_device_mesh_is_per_device(self):
        mesh = DeviceMesh(DEV, [0])
        t = int_valued(3, 4)
        x = dtorch.from_torch(t, mesh, [R])
        with cuda_graph(False):
            y, values, n = run(True, lambda a: a + a * 2.0, x)
        self.assertEqual(n, 0)
        self.assertTrue(torch.equal(y.to_torch(), t + t * 2.0))
        # With CUDA graphs on, a one-device mesh's nodes are shared too (a run's slot is what a
        # worker captures): both nodes, the same value.
        with cuda_graph(True):
            y, values, n = run(True, lambda a: a + a * 2.0, x)
        self.assertEqual(n, 2)
        self.assertTrue(torch.equal(y.to_torch(), t + t * 2.0))

    def test_inputs_laid_out_differently(self):
        # x sharded with a Replicate row vector, or with a Replicate value of its own shape: where a
        # device must slice the Replicate input (its dims cut by the output's shard) the node is per
        # device; the vector beside Shard(0) is every device's whole block, so it is shared.
        tx, tv, ty = int_valued(4, 6), int_valued(6, seed=1), int_valued(4, 6, seed=2)
        for mesh, dim in ((CPU2, 0), (CPU2, 1), (CPU3, 1)):
            x = dtorch.from_torch(tx, mesh, [Shard(dim)])
            for other, want in ((tv, tx * tv), (ty, tx * ty)):
                v = dtorch.from_torch(other, mesh, [R])
                shared = dim == 0 and other.dim() == 1
                with self.subTest(mesh=mesh, dim=dim, shape=tuple(other.shape)):
                    same_both_ways(self, lambda a, b: a * b, (x, v), want, shared, exact=True)

    def test_rotary_broadcast_and_cat(self):
        # Rotary's shape: q [B, H, S, D] on its heads, cos/sin [B, 1, S, D] Replicate (broadcast over
        # the heads), rotate_half's cat of the halves of the last dim: all shared, uneven heads too.
        B, H, S, D = 1, 4, 3, 8
        tq, tc, ts = int_valued(B, H, S, D, seed=1), int_valued(B, 1, S, D, seed=2), int_valued(B, 1, S, D, seed=3)

        def rot(t):
            return dtorch.cat([-t[..., D // 2:], t[..., :D // 2]], dim=-1)

        def trot(t):
            return torch.cat([-t[..., D // 2:], t[..., :D // 2]], dim=-1)

        for mesh, pl in ((CPU2, [Shard(1)]), (CPU3, [Shard(1)]), (CPU2x2, [R, Shard(1)])):
            q = dtorch.from_torch(tq, mesh, pl)
            c, s_ = (dtorch.from_torch(t, mesh, [R] * mesh.ndim) for t in (tc, ts))
            with self.subTest(mesh=mesh, placements=pl, op="mul_broadcast"):
                same_both_ways(self, lambda q, c: q * c, (q, c), tq * tc, True, exact=True)
            with self.subTest(mesh=mesh, placements=pl, op="rotate_half"):
                # The slices of the last dim carry each device's local shape (uneven: per device);
                # the cat of two own blocks does not.
                want = trot(tq)
                n = same_both_ways(self, rot, (q,), want, True, exact=True)
                self.assertGreaterEqual(n, 2)  # the neg and the cat at least
            with self.subTest(mesh=mesh, placements=pl, op="rotary"):
                same_both_ways(self, lambda q, c, s: q * c + rot(q) * s, (q, c, s_), tq * tc + trot(tq) * ts, True,
                               exact=True)

    def test_in_place_reuse_as_per_device(self):
        # The window's reuse mark reaches the shared record: a chain of ops on a dropped
        # intermediate writes into its buffer on every device, as per-device records do. The chain is
        # recorded with the controller held, so every intermediate is dropped before anything is
        # lowered (otherwise which buffers are reused depends on how far the controller has got).
        t = int_valued(64, 64)
        counts = []
        for on in (False, True):
            x = dtorch.from_torch(t, CPU2, [Shard(0)])
            dtorch.synchronize()
            with bcast(on):
                before = graph_stats()["kernels_in_place"]
                with held_controller():
                    y = ((x + 1.0) * 2.0 - 3.0) * 0.5
                got = y.to_torch()
                counts.append(graph_stats()["kernels_in_place"] - before)
            self.assertTrue(torch.equal(got, ((t + 1.0) * 2.0 - 3.0) * 0.5))
        self.assertEqual(counts[0], counts[1])
        self.assertGreater(counts[1], 0)

    def test_replicate_broadcast_takes_the_record(self):
        # Both whole on every device (Replicate and Partial): a broadcast input's block is itself.
        tx, tv = int_valued(4, 6), int_valued(6, seed=1)
        for pl in (P, R):
            x = genuine_partial(tx, CPU2, [pl], seed=5)
            v = dtorch.from_torch(tv, CPU2, [R])
            with self.subTest(placement=pl):
                off, off_v, n_off = run(False, lambda a, b: a * b, x, v)
                on, on_v, n_on = run(True, lambda a, b: a * b, x, v)
                self.assertEqual((n_off, n_on), (0, 1))
                for x1, x2 in zip(on_v, off_v):
                    self.assertTrue(torch.equal(x1, x2))
                assert_equal_everywhere(self, on, tx * tv)


class TestLinalg(unittest.TestCase):
    """matmul/linear: one shared record where every device's operands are its own blocks
    (column- and row-parallel linears, a Replicate matmul, a batch sharded on dp); per device
    where a device needs a slice of an operand or a bias on some devices only."""

    CASES = [
        # (name, mesh, x shape, x placements, w shape, w placements, bias placements or None, shared)
        ("column", CPU2, (3, 4, 8), [R], (6, 8), [Shard(0)], None, True),
        ("column_uneven", CPU3, (3, 4, 8), [R], (5, 8), [Shard(0)], None, True),
        ("row", CPU2, (3, 4, 8), [Shard(2)], (6, 8), [Shard(1)], None, True),
        ("replicate", CPU3, (3, 4, 8), [R], (6, 8), [R], None, True),
        ("dp_tp", CPU2x2, (4, 2, 8), [Shard(0), R], (6, 8), [R, Shard(0)], None, True),
        ("slice_of_w", CPU2, (3, 4, 8), [Shard(2)], (6, 8), [R], None, False),
        ("row_bias", CPU2, (3, 4, 8), [Shard(2)], (6, 8), [Shard(1)], [R], False),
    ]

    def test_linear_same_as_per_device(self):
        for name, mesh, xs, xp, ws, wp, bp, shared in self.CASES:
            tx, tw = int_valued(*xs, seed=1), int_valued(*ws, seed=2)
            tb = int_valued(ws[0], seed=3)
            x, w = dtorch.from_torch(tx, mesh, xp), dtorch.from_torch(tw, mesh, wp)
            b = dtorch.from_torch(tb, mesh, bp) if bp else None

            def fn(x, w, b=b):
                return dtorch.nn.functional.linear(x, w, b)

            with self.subTest(case=name):
                off, off_v, n_off = run(False, fn, x, w)
                on, on_v, n_on = run(True, fn, x, w)
                self.assertEqual(n_off, 0)
                self.assertEqual(n_on > 0, shared, n_on)
                for d, (a, c) in enumerate(zip(on_v, off_v)):
                    self.assertTrue(torch.equal(bits(a), bits(c)), f"device {d}")
                assert_equal_everywhere(self, on, torch.nn.functional.linear(tx, tw, tb if bp else None))

    def test_matmul_bfloat16(self):
        tx, tw = int_valued(4, 8, dtype=torch.bfloat16), int_valued(8, 6, dtype=torch.bfloat16, seed=1)
        x, w = dtorch.from_torch(tx, CPU2, [R]), dtorch.from_torch(tw, CPU2, [Shard(1)])
        off, off_v, _ = run(False, lambda a, b: a @ b, x, w)
        on, on_v, n_on = run(True, lambda a, b: a @ b, x, w)
        self.assertEqual(n_on, 1)
        for a, c in zip(on_v, off_v):
            self.assertTrue(torch.equal(bits(a), bits(c)))
        assert_equal_everywhere(self, on, tx @ tw)


F = dtorch.nn.functional


def same_both_ways(tc, fn, args, want, shared, exact=False):
    """fn(*args) with the records off and on: bitwise equal device by device, close to (or equal to)
    eager torch's `want` on every device, and shared (bcast_nodes > 0) exactly when `shared` says."""
    off, off_v, n_off = run(False, fn, *args)
    on, on_v, n_on = run(True, fn, *args)
    tc.assertEqual(n_off, 0)
    tc.assertEqual(n_on > 0, shared, f"{n_on} nodes shared")
    tc.assertEqual(len(on_v), len(off_v))
    for d, (x, y) in enumerate(zip(on_v, off_v)):
        tc.assertTrue(torch.equal(bits(x), bits(y)), f"device {d}")
    tc.assertEqual(on.placements, off.placements)
    tol = {} if exact else {"atol": 1e-5, "rtol": 1e-5}
    (assert_close_everywhere if tol else assert_equal_everywhere)(tc, on, want, **tol)
    return n_on


class TestNNFamilies(unittest.TestCase):
    """Norms, softmax/log_softmax and attention: one shared record where every device reads its
    own blocks and the kernel's attributes are the same bytes on every device; per device where a
    device's attributes differ (an uneven shard's local shape, dropout's offsets)."""

    # (mesh, x shape, x placements, shared): the normalized / softmax dim is the last, never sharded.
    LAYOUTS = [
        (CPU2, (4, 6), [Shard(0)], True),
        (CPU2, (4, 6), [R], True),
        (CPU3, (6, 5), [Shard(0)], True),
        (CPU3, (5, 6), [Shard(0)], False),  # uneven rows: device 2's local shape differs
        (CPU3, (5, 6), [R], True),
        (CPU2x2, (4, 6), [Shard(0), R], True),
        (CPU2x2, (4, 2, 6), [Shard(0), Shard(1)], True),
    ]

    def test_norms_and_softmax(self):
        for mesh, shape, pl, shared in self.LAYOUTS:
            for dtype in (torch.float32, torch.bfloat16):
                tx = randn(*shape, dtype=dtype, seed=1)
                tw, tb = randn(shape[-1], dtype=dtype, seed=2), randn(shape[-1], dtype=dtype, seed=3)
                x = dtorch.from_torch(tx, mesh, pl)
                rr = [R] * mesh.ndim
                w, b = dtorch.from_torch(tw, mesh, rr), dtorch.from_torch(tb, mesh, rr)
                n = shape[-1:]
                cases = [
                    ("layer_norm", lambda x, w, b: F.layer_norm(x, n, w, b, eps=1e-3),
                     torch.nn.functional.layer_norm(tx, n, tw, tb, eps=1e-3)),
                    ("rms_norm", lambda x, w, b: F.rms_norm(x, n, w, eps=1e-4),
                     torch.nn.functional.rms_norm(tx, n, tw, eps=1e-4)),
                    ("softmax", lambda x, w, b: F.softmax(x, dim=-1), torch.softmax(tx, dim=-1)),
                    ("log_softmax", lambda x, w, b: F.log_softmax(x, dim=-1), torch.log_softmax(tx, dim=-1)),
                ]
                for name, fn, want in cases:
                    with self.subTest(mesh=mesh, shape=shape, placements=pl, dtype=dtype, op=name):
                        tol = {} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
                        off, off_v, n_off = run(False, fn, x, w, b)
                        on, on_v, n_on = run(True, fn, x, w, b)
                        self.assertEqual((n_off, n_on > 0), (0, shared), n_on)
                        for d, (p, q) in enumerate(zip(on_v, off_v)):
                            self.assertTrue(torch.equal(bits(p), bits(q)), f"device {d}")
                        assert_close_everywhere(self, on, want, **(tol or {"atol": 1e-5, "rtol": 1e-5}))

    def test_two_norms_with_different_eps(self):
        # Two nodes, same layout, different eps: each shared record carries its own.
        tx, tw = randn(4, 6, seed=4) * 1e-2, randn(6, seed=5)
        x, w = dtorch.from_torch(tx, CPU2, [Shard(0)]), dtorch.from_torch(tw, CPU2, [R])
        fn = lambda x, w: F.rms_norm(x, (6,), w, eps=1e-1) - F.rms_norm(x, (6,), w, eps=1e-6)  # noqa: E731
        want = torch.nn.functional.rms_norm(tx, (6,), tw, eps=1e-1) - torch.nn.functional.rms_norm(
            tx, (6,), tw, eps=1e-6)
        self.assertEqual(same_both_ways(self, fn, (x, w), want, True), 3)

    def test_attention_on_own_heads(self):
        # q, k, v sharded on heads: each device attends over its own heads with the same kernel.
        B, H, L, S, E = 2, 4, 3, 5, 8
        tq, tk, tv = randn(B, H, L, E, seed=1), randn(B, H, S, E, seed=2), randn(B, H, S, E, seed=3)
        tm = randn(L, S, seed=4)
        for mesh, pl, shared in ((CPU2, [Shard(1)], True), (CPU3, [Shard(1)], False), (CPU3, [R], True),
                                 (CPU2x2, [Shard(0), Shard(1)], True)):
            q, k, v = (dtorch.from_torch(t, mesh, pl) for t in (tq, tk, tv))
            m = dtorch.from_torch(tm, mesh, [R] * mesh.ndim)
            for causal in (False, True):
                with self.subTest(mesh=mesh, placements=pl, causal=causal):
                    fn = lambda q, k, v, c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c)  # noqa: E731
                    want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
                    same_both_ways(self, fn, (q, k, v), want, shared)
            with self.subTest(mesh=mesh, placements=pl, mask=True):
                fn = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # noqa: E731
                want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm)
                same_both_ways(self, fn, (q, k, v, m), want, shared)
        # A mask per head, Replicate beside heads sharded: each device reads a slice of it, per device.
        tm4 = randn(B, H, L, S, seed=5)
        q, k, v = (dtorch.from_torch(t, CPU2, [Shard(1)]) for t in (tq, tk, tv))
        m4 = dtorch.from_torch(tm4, CPU2, [R])
        fn = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # noqa: E731
        want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm4)
        same_both_ways(self, fn, (q, k, v, m4), want, False)

    def test_attention_dropout_goes_per_device(self):
        # Dropout's mask is placed by each device's offsets: per device, and the same mask as on
        # one device (the global draw, sliced).
        tq = randn(2, 4, 3, 8, seed=1)
        q = dtorch.from_torch(tq, CPU2, [Shard(1)])
        fn = lambda q: F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)  # noqa: E731
        dtorch.manual_seed(7)
        off, off_v, n_off = run(False, fn, q)
        dtorch.manual_seed(7)
        on, on_v, n_on = run(True, fn, q)
        self.assertEqual((n_off, n_on), (0, 0))
        for p, r in zip(on_v, off_v):
            self.assertTrue(torch.equal(p, r))
        dtorch.manual_seed(7)
        one = fn(dtorch.from_torch(tq, CPU1, [R])).to_torch()
        torch.testing.assert_close(on.to_torch(), one, rtol=1e-5, atol=1e-5)  # the same mask


class TestViewsCacheAndReductions(unittest.TestCase):
    """Views of each device's own block (reshape, transpose, expand, contiguous, getitem of an
    unsharded dim), a KV cache written at a position on each device's own heads, and reductions
    along unsharded dims (argmax, sum, amax, mean): one shared record each where every device's
    kernel is the same; per device where a device's shape or part differs."""

    # (mesh, placements of a [B, H, S, D] value, shared)
    LAYOUTS = [
        (CPU2, [Shard(1)], True),
        (CPU3, [Shard(1)], False),  # 4 heads on 3 devices: 2, 1, 1
        (CPU3, [R], True),
        (CPU2x2, [Shard(0), Shard(1)], True),
        (CPU2, [P], True),
    ]
    B, H, S, D = 2, 4, 6, 4

    def value(self, seed):
        return int_valued(self.B, self.H, self.S, self.D, seed=seed)

    def test_views(self):
        B, H, S, D = self.B, self.H, self.S, self.D
        cases = [
            # Views only: an elementwise op after one would share its record on uneven blocks too.
            ("reshape", lambda x: x.reshape(B, H, S * D), lambda t: t.reshape(B, H, S * D)),
            ("transpose_contiguous", lambda x: x.transpose(2, 3).contiguous(),
             lambda t: t.transpose(2, 3).contiguous()),
            ("expand", lambda x: x[:, :, :, None].expand(B, H, S, 3, D).reshape(B, H, S * 3, D),
             lambda t: t[:, :, :, None].expand(B, H, S, 3, D).reshape(B, H, S * 3, D)),
            ("getitem", lambda x: x[:, :, 1:5], lambda t: t[:, :, 1:5]),
            ("flip", lambda x: x.flip(2), lambda t: t.flip(2)),  # no local shape: uneven too
        ]
        for mesh, pl, shared in self.LAYOUTS:
            t = self.value(1)
            x = genuine_partial(t, mesh, pl, seed=2)
            for name, fn, ref in cases:
                if name == "expand" and any(p.is_partial() for p in pl):
                    continue
                with self.subTest(mesh=mesh, placements=pl, op=name):
                    same_both_ways(self, fn, (x,), ref(t), shared or name == "flip", exact=True)

    def test_kv_cache_update(self):
        # The decode step's write: cache[:, :, pos:pos + 1] = k, cache and k sharded on heads alike.
        B, H, S, D = self.B, self.H, self.S, self.D
        for mesh, pl, shared in self.LAYOUTS:
            if any(p.is_partial() for p in pl):
                continue
            tc, tk = self.value(3), int_valued(B, H, 1, D, seed=4)
            for pos in (0, 3, S - 1):
                cache = dtorch.from_torch(tc, mesh, pl)
                k = dtorch.from_torch(tk, mesh, pl)

                def fn(cache, k, pos=pos):
                    c = cache.clone()
                    c[:, :, pos:pos + 1] = k
                    return c

                want = tc.clone()
                want[:, :, pos:pos + 1] = tk
                with self.subTest(mesh=mesh, placements=pl, pos=pos):
                    same_both_ways(self, fn, (cache, k), want, shared, exact=True)
                if any(p.is_shard() for p in pl):
                    # k whole beside the cache's shards: each device writes a slice of k, per device.
                    kr = dtorch.from_torch(tk, mesh, [R] * mesh.ndim)
                    with self.subTest(mesh=mesh, placements=pl, pos=pos, value="replicate"):
                        same_both_ways(self, fn, (cache, kr), want, False, exact=True)

    def test_scalar_fill_of_a_slice(self):
        t = self.value(5)
        for mesh, pl, shared in self.LAYOUTS:
            if any(p.is_partial() for p in pl):
                continue
            x = dtorch.from_torch(t, mesh, pl)

            def fn(x):
                c = x.clone()
                c[:, :, 2:4] = 7.0
                return c

            want = t.clone()
            want[:, :, 2:4] = 7.0
            with self.subTest(mesh=mesh, placements=pl):
                same_both_ways(self, fn, (x,), want, shared, exact=True)

    def test_reductions_along_an_unsharded_dim(self):
        cases = [
            ("argmax", lambda x: x.argmax(dim=-1), lambda t: t.argmax(dim=-1)),
            ("amax", lambda x: x.amax(dim=2, keepdim=True), lambda t: t.amax(dim=2, keepdim=True)),
            ("sum", lambda x: x.sum(dim=3), lambda t: t.sum(dim=3)),
            ("mean", lambda x: x.mean(dim=2), lambda t: t.mean(dim=2)),
        ]
        for mesh, pl, shared in self.LAYOUTS:
            if any(p.is_partial() for p in pl):
                continue
            t = self.value(6)
            x = dtorch.from_torch(t, mesh, pl)
            for name, fn, ref in cases:
                with self.subTest(mesh=mesh, placements=pl, op=name):
                    # A reduction's kernel carries no local shape: uneven heads share it too.
                    same_both_ways(self, fn, (x,), ref(t), True, exact=True)

    def test_sum_over_a_sharded_dim_is_one_record_then_reduced(self):
        # The local sums (Partial) share a record; the all-reduce that the read needs is per device.
        t = self.value(7)
        x = dtorch.from_torch(t, CPU3, [Shard(1)])
        self.assertEqual(same_both_ways(self, lambda x: x.sum(dim=1), (x,), t.sum(dim=1), True, exact=True), 1)


class TestErrorsAndReplay(unittest.TestCase):
    def test_traced_nodes_keep_their_device_kernels(self):
        # A trace records each device's kernel of a node: while it records, nodes go per device.
        import tempfile

        t = int_valued(4, 6)
        x = dtorch.from_torch(t, CPU2, [Shard(0)])
        path = os.path.join(tempfile.mkdtemp(), "trace.json")
        with bcast(True):
            n0 = nodes()
            with dtorch.profiler.trace(path) as tr:
                line = inspect.currentframe().f_lineno + 1
                got = (x * 2).to_torch()
            self.assertEqual(nodes() - n0, 0)
        self.assertTrue(torch.equal(got, t * 2))
        sites = [e for e in tr.events if e.get("ph") == "X" and e.get("cat") == "kernel"
                 and e["args"].get("site", "").endswith(f":{line}")]
        self.assertEqual(len(sites), 2)  # one kernel per device

    def test_kernel_error_names_op_device_and_line(self):
        x = dtorch.from_torch(torch.tensor([4, 6, 8, 10]), CPU2, [Shard(0)])
        z = dtorch.from_torch(torch.tensor([2, 3, 0, 5]), CPU2, [Shard(0)])  # device 1 divides by 0
        with bcast(True):
            n0 = nodes()
            line = inspect.currentframe().f_lineno + 1
            y = x // z
            w = y + 1
            with self.assertRaises(dtorch.KernelError) as cm:
                w.to_torch()
            self.assertEqual(nodes() - n0, 2)
        msg = str(cm.exception)
        self.assertIn("floor_divide failed on cpu:1", msg)
        self.assertIn(f"{os.path.basename(__file__)}:{line}", msg)
        with self.assertRaises(RuntimeError) as eager:
            torch.tensor([8]) // torch.tensor([0])
        self.assertIn(str(eager.exception).splitlines()[0], msg)
        # The runtime keeps working, on the same path.
        with bcast(True):
            assert_equal_everywhere(self, x + z, torch.tensor([6, 9, 8, 15]))

    def test_failed_lowering_poisons_every_device(self):
        # An allocation that fails while the shared record is made (dt_debug_fail_allocs): the
        # value raises at the read with the op, "controller" and the line; nothing half-queued
        # is left behind, and the next op on the same inputs is right.
        from dtorch.test.probes import fail_allocs

        tx, tz = int_valued(5, 4), int_valued(5, 4, seed=1)
        x, z = dtorch.from_torch(tx, CPU3, [Shard(0)]), dtorch.from_torch(tz, CPU3, [Shard(0)])
        x.to_torch(), z.to_torch()
        failed = 0
        with bcast(True):
            for after in range(4):
                try:
                    fail_allocs(after)
                    line = inspect.currentframe().f_lineno + 1
                    y = x + z
                    try:
                        got = y.to_torch()
                    except dtorch.KernelError as e:
                        failed += 1
                        self.assertIn("failed on the controller", str(e))
                        self.assertIn(f"{os.path.basename(__file__)}:{line}", str(e))
                    else:
                        self.assertTrue(torch.equal(got, tx + tz))
                finally:
                    fail_allocs(-1)
                assert_equal_everywhere(self, x + z, tx + tz)
        self.assertGreater(failed, 0)

    def test_with_replay_every_step_is_right(self):
        # Replay on: a template whose lowering made shared records is kept unusable, so every
        # later sighting is lowered as one record again (not replayed per device); a change of
        # scalar, dtype, placement, shape or mesh in the middle of the loop is lowered anew, right.
        t = int_valued(4, 6)
        meshes = {"R": (CPU2, [R]), "S": (CPU2, [Shard(1)]), "M": (CPU3, [Shard(0)])}
        plan = ["S", "S", "S", ("S", 0.25), "S", ("S", torch.bfloat16), "R", "S", ("S", (2, 8)), "M", "S"]
        with replay(True), bcast(True):
            for i, step in enumerate(plan):
                key, extra = (step, None) if isinstance(step, str) else step
                mesh, pl = meshes[key]
                dtype = extra if isinstance(extra, torch.dtype) else torch.float32
                s = extra if isinstance(extra, float) else 1.5
                tt = int_valued(*extra) if isinstance(extra, tuple) else t
                n0 = nodes()
                x = dtorch.from_torch(tt.to(dtype), mesh, pl)
                y = (x * s + 1.0) - x
                got = y.to_torch()
                # A host tensor copied whole to every device is one shared kernel too, in runs.
                runs = os.environ.get("DTORCH_STEP") != "0" and os.environ.get("DTORCH_BGROUP") != "0"
                self.assertEqual(nodes() - n0, 3 + (key == "R" and runs), f"step {i}")
                tt = tt.to(dtype)
                self.assertTrue(torch.equal(got, (tt * s + 1.0) - tt), f"step {i}")


if __name__ == "__main__":
    unittest.main()
