"""cat along a sharded dim without communication (src/core/client/segment.c, docs/decisions.md "segmented
cat") against torch on the same inputs.

cat of Shard(d) inputs along d is a local cat on every device; the result keeps ``Shard(d)`` in its
placements and a segmented storage order (``_C._segments``). Checked: 1-D meshes of 2, 3 and 4
devices with even, uneven and empty shards, 2-D meshes (the other mesh dim dp or tp), nested shards
(the dim sharded by two or three mesh dims: TestNested), cat of segmented results, the ops that keep the layout
(elementwise with broadcasting, transpose/permute, reshape, clone, slices and split at the segment
boundaries, non-causal attention: local, Ulysses and ring) and the fallback for everything else
(other slices, reductions and cumsum along the dim, a regular operand of full size, redistribute to
every placement, reads). Every result is compared with torch (torch.equal where the op sequence is
the same; attention allclose) and every replica and device block is checked; the chain cat -> sdpa
-> transpose -> reshape -> split at the boundary lowers no collective beyond the attention's own.
"""

import unittest

import torch
import torch.nn.functional as TF

import dtorch
import dtorch.nn.functional as F
from dtorch import Partial, Replicate, SdpaOption, Shard, _C
from dtorch.test.test_util import local_regions, local_values

from helpers import assert_close_everywhere, assert_equal_everywhere, int_valued, randn


def dist(t, mesh, placements):
    return dtorch.Tensor(t).redistribute(mesh, placements)


def segs(x):
    return _C._segments(x)


def collectives():
    dtorch.synchronize()
    return _C._collectives_lowered()


def mesh1(n, name="cp"):
    return dtorch.DeviceMesh("cpu", list(range(n)), mesh_dim_names=(name,))


class Base(unittest.TestCase):
    def check_blocks(self, x, want):
        """Each device holds its regular (user-order) block of ``want``."""
        regions = local_regions(tuple(want.shape), tuple(x.device_mesh.shape), list(x.placements))
        for i, (got, r) in enumerate(zip(local_values(x), regions)):
            if any(isinstance(p, Partial) for p in x.placements):
                continue
            self.assertTrue(torch.equal(got, want[r]), f"device {i}: {got} != {want[r]}")

    def check(self, x, want):
        assert_equal_everywhere(self, x, want)
        self.check_blocks(x, want)


class TestCat(Base):
    def test_1d_meshes(self):
        for n in (2, 3, 4):
            mesh = mesh1(n)
            for lens in ((5, 3), (4, 4), (1, 2), (0, 3), (7, 0), (2, 1, 6), (3, 0, 5, 1)):
                with self.subTest(n=n, lens=lens):
                    ts = [int_valued(2, L, 3, seed=i) for i, L in enumerate(lens)]
                    xs = [dist(t, mesh, [Shard(1)]) for t in ts]
                    before = collectives()
                    c = dtorch.cat(xs, dim=1)
                    self.assertEqual(collectives(), before)  # the cat itself moves nothing
                    nz = [L for L in lens if L]
                    self.assertEqual(segs(c), (1, 0, nz) if len(nz) > 1 else None)
                    self.assertEqual(list(c.placements), [Shard(1)])
                    self.check(c, torch.cat(ts, 1))

    def test_promotion_and_negative_dim(self):
        mesh = mesh1(2)
        a, b = int_valued(3, 4, seed=1), int_valued(5, 4, seed=2, dtype=torch.float64)
        c = dtorch.cat([dist(a, mesh, [Shard(0)]), dist(b, mesh, [Shard(-2)])], dim=-2)
        self.assertEqual(segs(c), (0, 0, [3, 5]))
        self.check(c, torch.cat([a, b], -2))

    def test_2d_meshes(self):
        mesh = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "cp"))
        ts = [int_valued(2, L, 4, seed=i) for i, L in enumerate((3, 5))]
        want = torch.cat(ts, 1)
        for pl, seg in (([Shard(0), Shard(1)], (1, 1, [3, 5])), ([Replicate(), Shard(1)], (1, 1, [3, 5])),
                        ([Shard(2), Shard(1)], (1, 1, [3, 5])), ([Shard(1), Shard(2)], (1, 0, [3, 5])),
                        ([Shard(1), Shard(1)], (1, (0, 1), [3, 5])), ([Partial(), Shard(1)], (1, 1, [3, 5]))):
            with self.subTest(pl=pl):
                xs = [dist(t, mesh, pl) for t in ts]
                c = dtorch.cat(xs, 1)
                self.assertEqual(segs(c), seg)
                self.assertEqual(list(c.placements), pl)
                self.check(c, want)

    def test_mixed_placements_take_the_old_path(self):
        mesh = mesh1(2)
        a, b = int_valued(4, 3, seed=1), int_valued(3, 3, seed=2)
        c = dtorch.cat([dist(a, mesh, [Shard(0)]), dist(b, mesh, [Replicate()])], 0)
        self.assertIsNone(segs(c))
        self.check(c, torch.cat([a, b]))

    def test_cat_of_segmented(self):
        mesh = mesh1(3)
        ts = [int_valued(L, 2, seed=i) for i, L in enumerate((4, 2, 5, 1))]
        xs = [dist(t, mesh, [Shard(0)]) for t in ts]
        ab = dtorch.cat(xs[:2])
        cd = dtorch.cat(xs[2:])
        before = collectives()
        all4 = dtorch.cat([ab, cd])
        self.assertEqual(collectives(), before)
        self.assertEqual(segs(all4), (0, 0, [4, 2, 5, 1]))
        self.check(all4, torch.cat(ts))
        nested = dtorch.cat([ab, xs[2], ab])
        self.assertEqual(segs(nested), (0, 0, [4, 2, 5, 4, 2]))
        self.check(nested, torch.cat([ts[0], ts[1], ts[2], ts[0], ts[1]]))

    def test_too_many_segments_fall_back(self):
        mesh = mesh1(2)
        ts = [int_valued(2, 3, seed=i) for i in range(9)]
        c = dtorch.cat([dist(t, mesh, [Shard(0)]) for t in ts])
        self.assertIsNone(segs(c))
        self.check(c, torch.cat(ts))

    def test_stack_is_unchanged(self):
        mesh = mesh1(2)
        ts = [int_valued(4, 3, seed=i) for i in range(2)]
        s = dtorch.stack([dist(t, mesh, [Shard(0)]) for t in ts], 1)
        self.assertIsNone(segs(s))
        self.check(s, torch.stack(ts, 1))


class TestPassThrough(Base):
    def setUp(self):
        self.mesh = mesh1(3)
        self.ts = [int_valued(2, L, 4, seed=i) for i, L in enumerate((5, 2, 4))]
        self.want = torch.cat(self.ts, 1)
        self.c = dtorch.cat([dist(t, self.mesh, [Shard(1)]) for t in self.ts], 1)

    def free(self, fn, want, seg):
        before = collectives()
        got = fn(self.c)
        self.assertEqual(collectives(), before)
        self.assertEqual(segs(got), seg)
        self.check(got, want)
        return got

    def test_elementwise(self):
        w = self.want
        bias = int_valued(4, seed=7)
        rowscale = int_valued(2, 1, 1, seed=8)
        b = dist(bias, self.mesh, [Replicate()])
        r = dist(rowscale, self.mesh, [Replicate()])
        self.free(lambda c: c * 2 + c, w * 2 + w, (1, 0, [5, 2, 4]))
        self.free(lambda c: (c + b) * r, (w + bias) * rowscale, (1, 0, [5, 2, 4]))
        self.free(lambda c: c.exp().to(torch.float64), w.exp().to(torch.float64), (1, 0, [5, 2, 4]))
        self.free(lambda c: F.silu(c), TF.silu(w), (1, 0, [5, 2, 4]))
        self.free(lambda c: dtorch.where(c > 0, c, -c), torch.where(w > 0, w, -w), (1, 0, [5, 2, 4]))

    def test_over_other_dims(self):
        w = self.want
        f = w.float()
        self.free(lambda c: c.softmax(2), w.softmax(2), (1, 0, [5, 2, 4]))
        self.free(lambda c: F.layer_norm(c, (4,)), TF.layer_norm(f, (4,)), (1, 0, [5, 2, 4]))
        self.free(lambda c: c.sum(2), w.sum(2), (1, 0, [5, 2, 4]))
        self.free(lambda c: c.amax(0, keepdim=True), w.amax(0, keepdim=True), (1, 0, [5, 2, 4]))
        self.free(lambda c: c.mean((0, 2)), w.mean((0, 2)), (0, 0, [5, 2, 4]))
        wt, b, m = int_valued(3, 4, seed=11), int_valued(3, seed=12), int_valued(4, 2, seed=13)
        wd, bd, md = (dist(t, self.mesh, [Replicate()]) for t in (wt, b, m))
        self.free(lambda c: F.linear(c, wd, bd), TF.linear(w, wt, b), (1, 0, [5, 2, 4]))
        self.free(lambda c: c @ md, w @ m, (1, 0, [5, 2, 4]))
        self.free(lambda c: c.transpose(0, 1) @ md, w.transpose(0, 1) @ m, (0, 0, [5, 2, 4]))
        got = self.c.max(2)
        self.check(got.values, w.max(2).values)
        self.check(got.indices, w.max(2).indices)

    def test_views(self):
        w = self.want
        self.free(lambda c: c.transpose(0, 1), w.transpose(0, 1), (0, 0, [5, 2, 4]))
        self.free(lambda c: c.permute(2, 0, 1), w.permute(2, 0, 1), (2, 0, [5, 2, 4]))
        self.free(lambda c: c.reshape(2, 11, 2, 2), w.reshape(2, 11, 2, 2), (1, 0, [5, 2, 4]))
        self.free(lambda c: c.unsqueeze(0), w.unsqueeze(0), (2, 0, [5, 2, 4]))
        self.free(lambda c: c.clone(), w.clone(), (1, 0, [5, 2, 4]))
        t = self.free(lambda c: c.transpose(1, 2).reshape(8, 11), w.transpose(1, 2).reshape(8, 11),
                      (1, 0, [5, 2, 4]))
        self.check(t * t, (w.transpose(1, 2).reshape(8, 11)) ** 2)

    def test_slices_at_boundaries(self):
        w = self.want
        self.free(lambda c: c[:, :5], w[:, :5], None)
        self.free(lambda c: c[:, 5:7], w[:, 5:7], None)
        self.free(lambda c: c[:, 7:], w[:, 7:], None)
        self.free(lambda c: c[:, 5:], w[:, 5:], (1, 0, [2, 4]))
        self.free(lambda c: c[:1, :7, 1:], w[:1, :7, 1:], (1, 0, [5, 2]))
        self.free(lambda c: c[1, :, ::2], w[1, :, ::2], (0, 0, [5, 2, 4]))
        self.free(lambda c: c[:, None, :, 2], w[:, None, :, 2], (2, 0, [5, 2, 4]))
        self.free(lambda c: c[:, :], w[:, :], (1, 0, [5, 2, 4]))
        before = collectives()
        parts = self.c.split([5, 2, 4], dim=1)
        self.assertEqual(collectives(), before)
        for got, want in zip(parts, w.split([5, 2, 4], 1)):
            self.assertEqual(list(got.placements), [Shard(1)])
            self.check(got, want)
        a, b = self.c.split([7, 4], dim=1)
        self.assertEqual(segs(a), (1, 0, [5, 2]))
        self.check(a, w[:, :7])
        self.check(b, w[:, 7:])


class TestFallback(Base):
    def setUp(self):
        self.mesh = mesh1(2)
        self.ts = [int_valued(3, L, 2, seed=i) for i, L in enumerate((3, 4))]
        self.want = torch.cat(self.ts, 1)
        self.c = dtorch.cat([dist(t, self.mesh, [Shard(1)]) for t in self.ts], 1)

    def test_ops_that_do_not_keep_it(self):
        w, c = self.want, self.c
        self.check(c.sum(1), w.sum(1))
        self.check(c.sum(2), w.sum(2))
        self.check(c.cumsum(1), w.cumsum(1))
        with self.assertRaises(dtorch.PlacementError):  # as on the regular Shard(1) layout
            c.flip(1)
        self.check(c.flip(2), w.flip(2))
        self.check(c.softmax(2), w.softmax(2))
        self.check(c.transpose(1, 2).contiguous() @ c[0], w.transpose(1, 2) @ w[0])

    def test_rejected_cat_records_nothing(self):
        """The rule decides before a segmented input is converted: a rejected cat enqueues no node."""
        from dtorch.test.probes import graph_stats

        p = dist(int_valued(3, 7, 2, seed=6), self.mesh, [Partial()])
        self.assertIsNotNone(segs(self.c))
        before = graph_stats()["submitted"]
        for bad in (lambda: dtorch.cat([self.c, p], 2), lambda: dtorch.stack([self.c, p])):
            with self.assertRaises(dtorch.PlacementError):
                bad()
        self.assertEqual(graph_stats()["submitted"], before)

    def test_regular_operand_of_full_size(self):
        other = int_valued(3, 7, 2, seed=5)
        o = dist(other, self.mesh, [Shard(1)])
        got = self.c + o
        self.assertIsNone(segs(got))
        self.check(got, self.want + other)

    def test_slices_off_the_boundaries(self):
        with self.assertRaises(dtorch.PlacementError):
            self.c[:, 1:5]
        with self.assertRaises(dtorch.PlacementError):
            self.c[:, 3]
        r = self.c.redistribute(self.mesh, [Replicate()])
        self.check(r[:, 1:5], self.want[:, 1:5])
        self.check(r[:, :3], self.want[:, :3])

    def test_redistribute_to_every_placement(self):
        for pl in ([Replicate()], [Shard(0)], [Shard(1)], [Shard(2)], [Partial()]):
            with self.subTest(pl=pl):
                got = self.c.redistribute(self.mesh, pl)
                self.assertEqual(list(got.placements), pl)
                self.check(got, self.want)
                self.check(got.redistribute(self.mesh, [Replicate()]), self.want)

    def test_reads(self):
        self.assertTrue(torch.equal(self.c.to_torch(), self.want))
        self.assertTrue(torch.equal(self.c.full_tensor(), self.want))
        self.assertEqual(repr(self.c.to_torch()), repr(self.want))
        self.check_blocks(self.c, self.want)


class TestAttention(Base):
    def chain(self, mesh, option, lens=(5, 3), heads=4, dim=8, pl=None):
        qs = [[randn(2, heads, L, dim, seed=10 * j + i) for i, L in enumerate(lens)] for j in range(3)]
        want = TF.scaled_dot_product_attention(*[torch.cat(p, 2) for p in qs])
        want = want.transpose(1, 2).reshape(2, sum(lens), heads * dim)
        pl = pl or ([Shard(2)] * mesh.ndim if mesh.ndim == 1 else [Replicate(), Shard(2)])
        xs = [[dist(t, mesh, pl) for t in p] for p in qs]
        # What the attention alone lowers on regular inputs of the same layout.
        regular = [dist(torch.cat(p, 2), mesh, list(xs[0][0].placements)) for p in qs]
        before = collectives()
        alone = F.scaled_dot_product_attention(*regular, sdpa_option=option)
        own = collectives() - before
        before = collectives()
        q, k, v = (dtorch.cat(p, 2) for p in xs)
        self.assertEqual(collectives(), before)  # the cats move nothing
        h = F.scaled_dot_product_attention(q, k, v, sdpa_option=option)
        seg_own = collectives() - before
        self.assertEqual(segs(h)[2], list(lens))
        before = collectives()
        h = h.transpose(1, 2).reshape(2, sum(lens), heads * dim)
        img, txt = h[:, :lens[0]], h[:, lens[0]:]
        self.assertEqual(collectives(), before)  # nor do the transpose, reshape and split
        if sum(isinstance(p, Shard) and p.dim == 2 for p in pl) > 1:
            # Nested shards: the regular attention gathers and re-slices around its all-to-alls
            # (redistribute's nesting rule); on the segmented layout each is one all-to-all.
            self.assertLess(seg_own, own)
        else:
            self.assertEqual(seg_own, own)
        assert_close_everywhere(self, alone.transpose(1, 2).reshape(2, sum(lens), heads * dim), want,
                                atol=1e-5, rtol=1e-5)
        assert_close_everywhere(self, img, want[:, :lens[0]], atol=1e-5, rtol=1e-5)
        assert_close_everywhere(self, txt, want[:, lens[0]:], atol=1e-5, rtol=1e-5)

    def test_ulysses(self):
        for n in (2, 4):
            with self.subTest(n=n):
                self.chain(mesh1(n, "ulysess_cp"), SdpaOption(ulysess_cp_dim="ulysess_cp"))

    def test_ring(self):
        for n, lens in ((2, (5, 3)), (3, (4, 7)), (4, (2, 9))):
            with self.subTest(n=n, lens=lens):
                self.chain(mesh1(n, "ring_cp"), SdpaOption(ring_cp_dim="ring_cp"), lens=lens)

    def test_with_dp(self):
        mesh = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "ring_cp"))
        self.chain(mesh, SdpaOption(ring_cp_dim="ring_cp"))

    def test_causal_falls_back(self):
        mesh = mesh1(2, "ring_cp")
        ts = [randn(1, 2, L, 4, seed=i) for i, L in enumerate((3, 4))]
        x = dtorch.cat([dist(t, mesh, [Shard(2)]) for t in ts], 2)
        got = F.scaled_dot_product_attention(x, x, x, is_causal=True, sdpa_option=SdpaOption(ring_cp_dim="ring_cp"))
        self.assertIsNone(segs(got))
        w = torch.cat(ts, 2)
        assert_close_everywhere(self, got, TF.scaled_dot_product_attention(w, w, w, is_causal=True),
                                atol=1e-5, rtol=1e-5)


def mesh2(a, b, names=("u", "r")):
    return dtorch.DeviceMesh("cpu", torch.arange(a * b).reshape(a, b).tolist(), mesh_dim_names=names)


class TestNested(Base):
    """The cat dim sharded by two (or three) mesh dims: device c's piece of each segment is its nested
    torch.chunk piece, the storage order device-major over the grid (segment.h)."""

    def cat(self, mesh, lens, pl, dim=1, seed=0):
        ts = [int_valued(2, L, 3, seed=seed + i) for i, L in enumerate(lens)]
        xs = [dist(t, mesh, pl) for t in ts]
        before = collectives()
        c = dtorch.cat(xs, dim=dim)
        self.assertEqual(collectives(), before)
        return c, torch.cat(ts, dim)

    def test_cat(self):
        for shape in ((2, 2), (2, 3), (3, 2), (3, 3), (4, 2), (2, 4)):
            mesh = mesh2(*shape)
            for lens in ((5, 3), (7, 4), (1, 2), (0, 6), (9, 0), (2, 1, 6), (3, 0, 5, 11)):
                with self.subTest(shape=shape, lens=lens):
                    c, want = self.cat(mesh, lens, [Shard(1), Shard(1)])
                    nz = [L for L in lens if L]
                    self.assertEqual(segs(c), (1, (0, 1), nz) if len(nz) > 1 else None)
                    self.assertEqual(list(c.placements), [Shard(1), Shard(1)])
                    self.check(c, want)

    def test_3d_meshes(self):
        mesh = dtorch.DeviceMesh("cpu", torch.arange(8).reshape(2, 2, 2).tolist(), mesh_dim_names=("a", "b", "c"))
        for pl, seg in (([Shard(1), Shard(1), Shard(1)], (1, (0, 1, 2), [5, 6])),
                        ([Shard(1), Shard(0), Shard(1)], (1, (0, 2), [5, 6])),
                        ([Replicate(), Shard(1), Shard(1)], (1, (1, 2), [5, 6])),
                        ([Partial(), Shard(1), Shard(1)], (1, (1, 2), [5, 6]))):
            with self.subTest(pl=pl):
                c, want = self.cat(mesh, (5, 6), pl)
                self.assertEqual(segs(c), seg)
                self.check(c, want)
                back = c.redistribute(mesh, [Replicate()] * 3)
                self.check(back, want)

    def test_cat_of_segmented(self):
        mesh = mesh2(2, 3)
        ab, w1 = self.cat(mesh, (4, 7), [Shard(1), Shard(1)])
        cd, w2 = self.cat(mesh, (5, 1), [Shard(1), Shard(1)], seed=5)
        before = collectives()
        all4 = dtorch.cat([ab, cd, ab], 1)
        self.assertEqual(collectives(), before)
        self.assertEqual(segs(all4), (1, (0, 1), [4, 7, 5, 1, 4, 7]))
        self.check(all4, torch.cat([w1, w2, w1], 1))

    def test_pass_through(self):
        mesh = mesh2(2, 3)
        c, w = self.cat(mesh, (5, 8), [Shard(1), Shard(1)])
        wt = int_valued(4, 3, seed=9)
        wd = dist(wt, mesh, [Replicate(), Replicate()])
        g = (1, (0, 1), [5, 8])
        for name, fn, want, seg in (
                ("ew", lambda x: x * 2 + x.exp(), w * 2 + w.exp(), g),
                ("transpose", lambda x: x.transpose(0, 1), w.transpose(0, 1), (0, (0, 1), [5, 8])),
                ("reshape", lambda x: x.reshape(2, 13, 3, 1), w.reshape(2, 13, 3, 1), g),
                ("softmax", lambda x: x.softmax(2), w.softmax(2), g),
                ("sum", lambda x: x.sum(2), w.sum(2), g),
                ("linear", lambda x: F.linear(x, wd), TF.linear(w, wt), g),
                ("matmul", lambda x: x @ wd.transpose(0, 1), w @ wt.transpose(0, 1), g),
                ("layer_norm", lambda x: F.layer_norm(x, (3,)), TF.layer_norm(w.float(), (3,)), g),
                ("where", lambda x: dtorch.where(x > 0, x, -x), torch.where(w > 0, w, -w), g),
                ("clone", lambda x: x.clone(), w.clone(), g),
                ("permute", lambda x: x.permute(2, 1, 0), w.permute(2, 1, 0), g),
                ("head", lambda x: x[:, :5], w[:, :5], None),
                ("tail", lambda x: x[:, 5:], w[:, 5:], None),
                ("whole", lambda x: x[1:, :, 1:], w[1:, :, 1:], g)):
            with self.subTest(name):
                before = collectives()
                got = fn(c)
                self.assertEqual(collectives(), before)
                self.assertEqual(segs(got), seg)
                self.check(got, want)
        before = collectives()
        a, b = c.split([5, 8], dim=1)
        self.assertEqual(collectives(), before)
        self.check(a, w[:, :5])
        self.check(b, w[:, 5:])

    def test_one_step_redistributes(self):
        """Ulysses' all-to-all on one mesh dim of the grid (and back): one all-to-all, no gather; the
        gathered mesh dim becomes the most major of the storage order."""
        for shape, lens in (((2, 2), (5, 3)), ((2, 2), (5, 7)), ((2, 3), (8, 3)), ((3, 2), (5, 7))):
            mesh = mesh2(*shape)
            with self.subTest(shape=shape, lens=lens):
                c, w = self.cat(mesh, lens, [Shard(1), Shard(1)])
                for md in (0, 1):
                    pl = [Shard(1), Shard(1)]
                    pl[md] = Shard(0)
                    before = collectives()
                    h = c.redistribute(mesh, pl)
                    self.assertEqual(collectives() - before, shape[1 - md])  # one group per line
                    self.assertEqual(segs(h), (1, (1 - md, md), list(lens)))
                    self.check(h, w)
                    before = collectives()
                    back = h.redistribute(mesh, [Shard(1), Shard(1)])
                    self.assertEqual(collectives() - before, shape[1 - md])
                    self.assertEqual(segs(back), (1, (0, 1), list(lens)))
                    self.check(back, w)
                    r = c.redistribute(mesh, [Shard(1) if i != md else Replicate() for i in (0, 1)])
                    self.assertEqual(segs(r), (1, (1 - md, md), list(lens)))
                    self.check(r, w)
                    self.check(r * c.redistribute(mesh, [Shard(1) if i != md else Replicate() for i in (0, 1)]), w * w)

    def test_redistribute_to_every_placement(self):
        mesh = mesh2(2, 3)
        c, w = self.cat(mesh, (4, 0, 7), [Shard(1), Shard(1)])
        every = [Replicate(), Shard(0), Shard(1), Shard(2), Partial()]
        for p0 in every:
            for p1 in every:
                with self.subTest(pl=(p0, p1)):
                    got = c.redistribute(mesh, [p0, p1])
                    self.assertEqual(list(got.placements), [p0, p1])
                    self.check(got, w)
                    self.check(got.redistribute(mesh, [Replicate(), Replicate()]), w)
                    self.check(got.redistribute(mesh, [Shard(1), Shard(1)]), w)

    def test_fallback(self):
        mesh = mesh2(2, 2)
        c, w = self.cat(mesh, (3, 6), [Shard(1), Shard(1)])
        self.check(c.sum(1), w.sum(1))
        self.check(c.cumsum(1), w.cumsum(1))
        other = int_valued(2, 9, 3, seed=5)
        got = c + dist(other, mesh, [Shard(1), Shard(1)])
        self.assertIsNone(segs(got))
        self.check(got, w + other)
        with self.assertRaises(dtorch.PlacementError):  # as on the regular nested layout
            c[:, 1:5]
        self.check(c.redistribute(mesh, [Replicate(), Replicate()])[:, 1:5], w[:, 1:5])
        one = c.redistribute(mesh, [Replicate(), Shard(1)])  # segmented over (1, 0), Shard on 1 only
        self.assertEqual(segs(one), (1, (1, 0), [3, 6]))
        for sl in (slice(1, 5), slice(3, None)):  # as on the regular layout: a sharded dim sliced
            with self.assertRaises(dtorch.PlacementError):
                one[:, sl]
        self.check(one[:, :, 1:], w[:, :, 1:])
        self.check(one.sum(1), w.sum(1))

    def test_reads(self):
        mesh = mesh2(3, 2)
        c, w = self.cat(mesh, (5, 4, 2), [Shard(1), Shard(1)])
        self.assertTrue(torch.equal(c.to_torch(), w))
        self.assertTrue(torch.equal(c.full_tensor(), w))
        self.assertEqual(repr(c.to_torch()), repr(w))
        self.check_blocks(c, w)
        r = c.redistribute(mesh, [Replicate(), Shard(1)])
        self.assertTrue(torch.equal(r.to_torch(), w))
        self.check_blocks(r, w)

    def test_attention(self):
        """Ulysses on one grid dim, the ring on the other; also with dp, 3 devices per dim and GQA-free
        uneven lengths. Attention is permutation-equivariant in the queries and invariant under one
        permutation applied to both keys and values, so a consistent storage order is enough."""
        both = SdpaOption(ulysess_cp_dim="ulysess_cp", ring_cp_dim="ring_cp")
        att = TestAttention()
        att.assertEqual, att.assertLess, att.assertTrue = self.assertEqual, self.assertLess, self.assertTrue
        for shape, lens, heads in (((2, 2), (5, 3), 4), ((2, 3), (7, 4), 4), ((3, 2), (6, 5), 3)):
            with self.subTest(shape=shape, lens=lens):
                att.chain(mesh2(*shape, names=("ulysess_cp", "ring_cp")), both, lens=lens, heads=heads,
                          pl=[Shard(2), Shard(2)])
        mesh = dtorch.DeviceMesh("cpu", torch.arange(8).reshape(2, 2, 2).tolist(),
                                 mesh_dim_names=("dp", "ulysess_cp", "ring_cp"))
        att.chain(mesh, both, pl=[Shard(0), Shard(2), Shard(2)])

    def test_attention_orders(self):
        """q, k and v in different storage orders (k and v alike): the result equals torch."""
        mesh = mesh2(2, 2, names=("ulysess_cp", "ring_cp"))
        opt = SdpaOption(ulysess_cp_dim="ulysess_cp", ring_cp_dim="ring_cp")
        a, b = randn(1, 2, 5, 4, seed=1), randn(1, 2, 6, 4, seed=2)
        kv = [dist(t, mesh, [Shard(2), Shard(2)]) for t in (b, a)]
        q = dtorch.cat([dist(a, mesh, [Shard(2), Shard(2)]), dist(b, mesh, [Shard(2), Shard(2)])], 2)
        k = dtorch.cat(kv, 2)
        got = F.scaled_dot_product_attention(q, k, k, sdpa_option=opt)
        self.assertEqual(segs(got), (2, (0, 1), [5, 6]))
        wk = torch.cat([b, a], 2)
        assert_close_everywhere(self, got, TF.scaled_dot_product_attention(torch.cat([a, b], 2), wk, wk),
                                atol=1e-5, rtol=1e-5)
        # The queries regular, the keys segmented: the result regular.
        qr = dist(torch.cat([a, b], 2), mesh, [Shard(2), Shard(2)])
        got = F.scaled_dot_product_attention(qr, k, k, sdpa_option=opt)
        self.assertIsNone(segs(got))
        assert_close_everywhere(self, got, TF.scaled_dot_product_attention(torch.cat([a, b], 2), wk, wk),
                                atol=1e-5, rtol=1e-5)


if __name__ == "__main__":
    unittest.main()
