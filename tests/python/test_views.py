"""Views and shape ops against eager torch: one device (torch.equal), 2/3-device and 2x2 meshes for the
accepted placements (exact: these ops only move data), PlacementError for the rejected ones.

Expected placements come from the rules as documented (dtorch_ops.h, the views section), restated here;
for reshape the oracle is independent: it enumerates every device's flat indices of its input block and
of each candidate output block (torch.chunk sizes), and accepts exactly when some output placement
matches on every device.
"""

import itertools
import math
import unittest

import torch

import dtorch
from dtorch import Partial, PlacementError, Replicate, Shard

from helpers import CPU1, CPU2, CPU3, CPU2x2, genuine_partial, int_valued, randn
from helpers import assert_equal_everywhere as assert_tensor_equal  # and every replica bitwise

# Operators this module tests against eager PyTorch (tests/python/test_registry.py).
TESTED_OPS = {"view", "reshape", "flatten", "unflatten", "transpose", "permute", "squeeze", "unsqueeze", "expand",
              "repeat", "repeat_interleave", "contiguous", "clone", "copy_", "cat", "concat", "stack", "chunk",
              "split", "unbind", "tril", "triu", "flip", "roll"}

R, P = Replicate(), Partial()
MESHES_1D = (CPU2, CPU3)


def dist(t, mesh, placements, seed=0):
    """``t`` on ``mesh``; a Partial holds a different piece on every coordinate (genuine_partial)."""
    return genuine_partial(t, mesh, placements, seed) if placements else dtorch.from_torch(t, mesh)


def chunk_range(n, k, i):
    c = -(-n // k)
    s = min(i * c, n)
    return s, min((i + 1) * c, n) - s


def mesh_coords(mesh):
    return list(itertools.product(*(range(n) for n in mesh.shape)))


def local_box(shape, mesh, placements, coord):
    """The block a device holds: nested shards split in mesh-dim order."""
    start, length = [0] * len(shape), list(shape)
    for md, p in enumerate(placements):
        if p.is_shard() and mesh.shape[md] > 1:
            d = p.dim % len(shape)
            s, n = chunk_range(length[d], mesh.shape[md], coord[md])
            start[d] += s
            length[d] = n
    return start, length


def flat_indices(shape, box):
    idx = torch.arange(math.prod(shape)).reshape(shape)
    return idx[tuple(slice(s, s + n) for s, n in zip(*box))].flatten().tolist()


def shard_placements(mesh, ndim, partial=True):
    """Every placement list to try on `mesh` for a tensor of `ndim` dims (nested shards included)."""
    one = [R] + [Shard(d) for d in range(ndim)] + ([P] if partial else [])
    if mesh.ndim == 1:
        return [[p] for p in one]
    return [list(c) for c in itertools.product(one, repeat=2)]


def norm(placements, ndim):
    return [Shard(p.dim % ndim) if p.is_shard() else p for p in placements]


class ViewTestCase(unittest.TestCase):
    def check(self, t, mesh, placements, fn_torch, fn_dtorch, expected):
        """expected: the output placements, or None when the op must raise PlacementError."""
        x = dist(t, mesh, placements)
        if expected is None:
            with self.assertRaises(PlacementError) as cm:
                fn_dtorch(x)
            self.assertIn("redistribute", str(cm.exception))
            return
        y = fn_dtorch(x)
        assert_tensor_equal(self, y, fn_torch(t))
        self.assertEqual(y.placements, norm(expected, y.ndim), (mesh, placements))


# ------------------------------------------------------------------------ reshape family

def reshape_oracle(shape_in, shape_out, mesh, placements):
    """All output placement lists that give every device the same flat indices it holds."""
    coords = mesh_coords(mesh)
    ins = [flat_indices(shape_in, local_box(shape_in, mesh, placements, c)) for c in coords]
    options = []
    for p in placements:
        if p.is_shard():
            opts = [Shard(o) for o in range(len(shape_out))]
            if math.prod(shape_in) == 0:
                opts.append(R)
            options.append(opts)
        else:
            options.append([p])
    good = []
    for cand in itertools.product(*options):
        if all(flat_indices(shape_out, local_box(shape_out, mesh, cand, c)) == ins[i] for i, c in enumerate(coords)):
            good.append(list(cand))
    return good


RESHAPES = [((4, 6), (24,)), ((4, 6), (2, 12)), ((6, 4), (3, 2, 4)), ((6,), (2, 3)), ((6,), (3, 2)), ((5, 3), (15,)),
            ((2, 3, 4), (6, 4)), ((2, 3, 4), (2, 12)), ((4, 1, 6), (4, 6)), ((1, 4), (4, 1)), ((4, 6), (4, 1, 6)),
            ((0, 3), (3, 0)), ((7, 2), (14,)), ((12,), (3, 4)), ((8,), (2, 2, 2)), ((3, 4), (4, 3)), ((9, 2), (3, 6))]


class TestReshape(ViewTestCase):
    def test_one_device_exact(self):
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool):
            t = randn(2, 3, 4, dtype=torch.float32).to(dtype) if dtype != torch.bool else randn(2, 3, 4) > 0
            x = dist(t, CPU1, None)
            assert_tensor_equal(self, x.view(6, -1), t.view(6, -1))
            assert_tensor_equal(self, x.view((4, 6)), t.view((4, 6)))
            assert_tensor_equal(self, x.reshape(torch.Size([24])), t.reshape(24))
            assert_tensor_equal(self, dtorch.reshape(x, (-1, 2)), torch.reshape(t, (-1, 2)))
            assert_tensor_equal(self, x.flatten(), t.flatten())
            assert_tensor_equal(self, x.flatten(1), t.flatten(1))
            assert_tensor_equal(self, dtorch.flatten(x, 0, 1), torch.flatten(t, 0, 1))
            assert_tensor_equal(self, x.unflatten(2, (2, -1)), t.unflatten(2, (2, -1)))
            assert_tensor_equal(self, dtorch.unflatten(x, 0, (1, 2)), torch.unflatten(t, 0, (1, 2)))
            assert_tensor_equal(self, x.view_as(t.view(4, 6)), t.view(4, 6))
        s = dist(torch.tensor(3.5), CPU1, None)
        assert_tensor_equal(self, s.flatten(), torch.tensor(3.5).flatten())
        assert_tensor_equal(self, s.view(1, 1), torch.tensor(3.5).view(1, 1))

    def test_errors_match_torch(self):
        x = dist(randn(2, 3), CPU1, None)
        with self.assertRaisesRegex(RuntimeError, "invalid for input of size 6"):
            x.view(5, -1)
        with self.assertRaisesRegex(RuntimeError, "only one dimension can be inferred"):
            x.view(-1, -1)
        with self.assertRaisesRegex(RuntimeError, "start_dim cannot come after end_dim"):
            x.flatten(1, 0)
        with self.assertRaisesRegex(RuntimeError, "don't multiply up"):
            x.unflatten(1, (2, 2))
        with self.assertRaisesRegex(RuntimeError, "must be divisible by 2"):  # 3 floats are not int64s
            x.view(torch.int64)

    def test_placements_against_oracle(self):
        for (si, so), mesh in itertools.product(RESHAPES, (CPU2, CPU3, CPU2x2)):
            t = int_valued(*si)
            for pl in shard_placements(mesh, len(si)):
                with self.subTest(si=si, so=so, mesh=mesh, pl=pl):
                    good = reshape_oracle(si, so, mesh, pl)
                    x = dist(t, mesh, pl)
                    if not good:
                        with self.assertRaises(PlacementError):
                            x.reshape(so)
                        continue
                    y = x.reshape(so)
                    assert_tensor_equal(self, y, t.reshape(so))
                    self.assertIn(y.placements, good)

    def test_flatten_rule_from_the_brief(self):
        # (a, b) -> a*b with Shard(0): legal iff chunking a*b gives the blocks of chunking a times b.
        for a, b, mesh in [(4, 3, CPU2), (5, 3, CPU2), (4, 3, CPU3), (5, 2, CPU3), (3, 3, CPU2), (2, 7, CPU3)]:
            n = mesh.size()
            legal = all(chunk_range(a * b, n, i) == tuple(v * b for v in chunk_range(a, n, i)) for i in range(n))
            t = int_valued(a, b)
            self.check(t, mesh, [Shard(0)], lambda v: v.flatten(), lambda v: v.flatten(),
                       [Shard(0)] if legal else None)
            # unflatten back: the same condition.
            self.check(t.flatten(), mesh, [Shard(0)], lambda v: v.unflatten(0, (a, b)),
                       lambda v: v.unflatten(0, (a, b)), [Shard(0)] if legal else None)

    def test_non_contiguous_input(self):
        t = randn(6, 4).t()  # non-contiguous
        for mesh, pl in [(CPU1, None), (CPU2, [Shard(0)]), (CPU2x2, [Shard(0), Shard(0)])]:
            x = dist(t, mesh, pl)
            assert_tensor_equal(self, x.reshape(2, 12), t.reshape(2, 12))
            assert_tensor_equal(self, x.reshape(4, 2, 3), t.reshape(4, 2, 3))
            assert_tensor_equal(self, x.flatten(), t.flatten())


class TestSqueezeUnsqueeze(ViewTestCase):
    def test_one_device(self):
        t = randn(2, 1, 3, 1)
        x = dist(t, CPU1, None)
        assert_tensor_equal(self, x.squeeze(), t.squeeze())
        assert_tensor_equal(self, x.squeeze(1), t.squeeze(1))
        assert_tensor_equal(self, x.squeeze(0), t.squeeze(0))
        assert_tensor_equal(self, x.squeeze(-1), t.squeeze(-1))
        assert_tensor_equal(self, dtorch.squeeze(x, 3), torch.squeeze(t, 3))
        assert_tensor_equal(self, x.squeeze((1, 3)), t.squeeze(1).squeeze(2))
        for d in range(-5, 5):
            assert_tensor_equal(self, x.unsqueeze(d), t.unsqueeze(d))
        assert_tensor_equal(self, dtorch.unsqueeze(x, 0), torch.unsqueeze(t, 0))
        with self.assertRaises(IndexError):
            x.unsqueeze(5)
        with self.assertRaises(IndexError):
            x.squeeze(4)

    def test_placements(self):
        t = int_valued(4, 1, 5)
        for mesh in (CPU2, CPU3, CPU2x2):
            for pl in shard_placements(mesh, 3):
                for d in range(-4, 4):
                    exp = [Shard(p.dim + (p.dim >= d % 4)) if p.is_shard() else p for p in pl]
                    self.check(t, mesh, pl, lambda v: v.unsqueeze(d), lambda v: v.unsqueeze(d), exp)
                for d in range(3):
                    removed = d == 1
                    if any(p.is_shard() and p.dim == d for p in pl) and removed:
                        exp = None
                    else:
                        exp = [Shard(p.dim - (removed and p.dim > d)) if p.is_shard() else p for p in pl]
                    self.check(t, mesh, pl, lambda v: v.squeeze(d), lambda v: v.squeeze(d), exp)
                all_exp = None if any(p.is_shard() and p.dim == 1 for p in pl) else \
                    [Shard(p.dim - (p.dim > 1)) if p.is_shard() else p for p in pl]
                self.check(t, mesh, pl, lambda v: v.squeeze(), lambda v: v.squeeze(), all_exp)


# ------------------------------------------------------------------------ permute family

class TestPermute(ViewTestCase):
    def test_one_device_dtypes(self):
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool):
            t = int_valued(2, 3, 4).to(dtype)
            x = dist(t, CPU1, None)
            assert_tensor_equal(self, x.transpose(0, 1), t.transpose(0, 1))
            assert_tensor_equal(self, x.transpose(-1, 0), t.transpose(-1, 0))
            assert_tensor_equal(self, dtorch.transpose(x, 1, 2), torch.transpose(t, 1, 2))
            assert_tensor_equal(self, x.permute(2, 0, 1), t.permute(2, 0, 1))
            assert_tensor_equal(self, x.permute((1, 2, 0)), t.permute((1, 2, 0)))
            assert_tensor_equal(self, dtorch.permute(x, (2, 1, 0)), torch.permute(t, (2, 1, 0)))
            assert_tensor_equal(self, x.mT, t.mT)
            assert_tensor_equal(self, x.movedim(0, 2), t.movedim(0, 2))
        m = int_valued(3, 5)
        assert_tensor_equal(self, dist(m, CPU1, None).T, m.T)

    def test_errors(self):
        x = dist(randn(2, 3), CPU1, None)
        with self.assertRaisesRegex(RuntimeError, "does not match the length"):
            x.permute(0)
        with self.assertRaisesRegex(RuntimeError, "duplicate dims"):
            x.permute(0, 0)
        with self.assertRaises(IndexError):
            x.transpose(0, 2)

    def test_placements(self):
        t = int_valued(5, 3, 4)
        perms = [(0, 1, 2), (2, 0, 1), (1, 2, 0), (2, 1, 0)]
        for mesh in (CPU2, CPU3, CPU2x2):
            for pl in shard_placements(mesh, 3):
                for perm in perms:
                    exp = [Shard(perm.index(p.dim)) if p.is_shard() else p for p in pl]
                    self.check(t, mesh, pl, lambda v: v.permute(perm), lambda v: v.permute(perm), exp)
                exp = [Shard({0: 2, 2: 0}.get(p.dim, p.dim)) if p.is_shard() else p for p in pl]
                self.check(t, mesh, pl, lambda v: v.transpose(0, 2), lambda v: v.transpose(0, 2), exp)

    def test_non_contiguous(self):
        t = randn(4, 6)[:, ::2]
        x = dist(t, CPU2, [Shard(1)])
        assert_tensor_equal(self, x.t(), t.t())


# ------------------------------------------------------------------------ expand / repeat

class TestExpandRepeat(ViewTestCase):
    def test_one_device(self):
        for dtype in (torch.float32, torch.int64, torch.bool, torch.bfloat16):
            t = int_valued(3, 1).to(dtype)
            x = dist(t, CPU1, None)
            assert_tensor_equal(self, x.expand(3, 4), t.expand(3, 4))
            assert_tensor_equal(self, x.expand(2, -1, 5), t.expand(2, -1, 5))
            assert_tensor_equal(self, x.expand((3, 2)), t.expand((3, 2)))
            assert_tensor_equal(self, x.expand_as(torch.empty(2, 3, 6)), t.expand_as(torch.empty(2, 3, 6)))
            assert_tensor_equal(self, x.repeat(2, 3), t.repeat(2, 3))
            assert_tensor_equal(self, x.repeat(2, 1, 2), t.repeat(2, 1, 2))
            assert_tensor_equal(self, x.repeat_interleave(2), t.repeat_interleave(2))
            assert_tensor_equal(self, x.repeat_interleave(3, dim=0), t.repeat_interleave(3, dim=0))
            assert_tensor_equal(self, dtorch.repeat_interleave(x, 2, 1), torch.repeat_interleave(t, 2, 1))
            r = torch.tensor([1, 0, 2])
            assert_tensor_equal(self, x.repeat_interleave(r, dim=0), t.repeat_interleave(r, dim=0))
            assert_tensor_equal(self, x.repeat_interleave(dist(r, CPU1, None), dim=0), t.repeat_interleave(r, dim=0))
            assert_tensor_equal(self, x.repeat_interleave(torch.tensor([2]), dim=0),
                                t.repeat_interleave(torch.tensor([2]), dim=0))

    def test_errors(self):
        x = dist(randn(2, 3), CPU1, None)
        with self.assertRaisesRegex(RuntimeError, "must match the existing size"):
            x.expand(3, 3)
        with self.assertRaisesRegex(RuntimeError, "leading, non-existing dimension"):
            x.expand(-1, 2, 3)
        with self.assertRaisesRegex(RuntimeError, "can not be smaller"):
            x.repeat(2)
        with self.assertRaisesRegex(RuntimeError, "can not be negative"):
            x.repeat_interleave(-1)

    def test_placements(self):
        t = int_valued(5, 1, 4)
        for mesh in (CPU2, CPU3, CPU2x2):
            for pl in shard_placements(mesh, 3):
                exp = None if any(p.is_shard() and p.dim == 1 for p in pl) else \
                    [Shard(p.dim + 1) if p.is_shard() else p for p in pl]
                self.check(t, mesh, pl, lambda v: v.expand(2, 5, 3, 4), lambda v: v.expand(2, 5, 3, 4), exp)
                exp = [Shard(p.dim + 1) if p.is_shard() else p for p in pl]
                self.check(t, mesh, pl, lambda v: v.expand(2, -1, 1, -1), lambda v: v.expand(2, -1, 1, -1), exp)
                reps = (2, 1, 3, 1)
                exp = None if any(p.is_shard() and reps[p.dim + 1] != 1 for p in pl) else \
                    [Shard(p.dim + 1) if p.is_shard() else p for p in pl]
                self.check(t, mesh, pl, lambda v: v.repeat(*reps), lambda v: v.repeat(*reps), exp)

    def test_repeat_interleave_placements(self):
        for n, mesh in [(4, CPU2), (5, CPU2), (6, CPU3), (7, CPU3), (4, CPU2x2)]:
            t = int_valued(n, 3)
            for pl in shard_placements(mesh, 2):
                for dim, r in ((0, 2), (1, 3)):
                    # A Shard of `dim` is kept iff every device's output block is its input block repeated.
                    out_shape = (n * r, 3) if dim == 0 else (n, 9)
                    ok = all(local_box(out_shape, mesh, pl, c)[0][dim] == r * local_box((n, 3), mesh, pl, c)[0][dim]
                             and local_box(out_shape, mesh, pl, c)[1][dim] == r * local_box((n, 3), mesh, pl, c)[1][dim]
                             for c in mesh_coords(mesh))
                    self.check(t, mesh, pl, lambda v: v.repeat_interleave(r, dim=dim),
                               lambda v: v.repeat_interleave(r, dim=dim), pl if ok else None)
                r = torch.tensor([2, 0, 1])
                exp = None if any(p.is_shard() and p.dim == 1 for p in pl) else pl
                self.check(t, mesh, pl, lambda v: v.repeat_interleave(r, dim=1),
                           lambda v: v.repeat_interleave(r, dim=1), exp)


# ------------------------------------------------------------------------ copies

class TestCopies(ViewTestCase):
    def test_contiguous_clone(self):
        t = int_valued(4, 3, seed=5)  # the Partial's pieces add up exactly
        for mesh, pl in [(CPU1, None), (CPU2, [Shard(0)]), (CPU3, [P]), (CPU2x2, [Shard(1), Shard(0)])]:
            x = dist(t, mesh, pl)
            assert_tensor_equal(self, x.contiguous(), t)  # a new symbol: the layout is the device's
            self.assertEqual(x.contiguous().placements, x.placements)
            c = x.clone()
            self.assertIsNot(c, x)
            assert_tensor_equal(self, c, t.clone())
            assert_tensor_equal(self, dtorch.clone(x), t)
            self.assertEqual(c.placements, x.placements)

    def test_copy_(self):
        t = randn(5, 3)
        for dtype in (torch.float32, torch.float16, torch.int64, torch.bool):
            src = int_valued(5, 3, seed=3).to(dtype)
            for mesh in (CPU1, CPU2, CPU3, CPU2x2):
                for pl_dst in shard_placements(mesh, 2):
                    for pl_src in shard_placements(mesh, 2)[::2]:
                        with self.subTest(dtype=dtype, mesh=mesh, dst=pl_dst, src=pl_src):
                            x = dist(t, mesh, pl_dst)
                            alias = x
                            r = x.copy_(dist(src, mesh, pl_src))
                            self.assertIs(r, x)
                            assert_tensor_equal(self, alias, t.clone().copy_(src))
                            self.assertEqual(x.placements, dist(t, mesh, pl_dst).placements)
                            self.assertEqual(x.dtype, torch.float32)

    def test_copy_broadcast_and_torch_source(self):
        t = randn(4, 3)
        for mesh, pl in [(CPU1, None), (CPU2, [Shard(0)]), (CPU3, [Shard(1)]), (CPU2x2, [P, Shard(0)])]:
            x = dist(t, mesh, pl)
            x.copy_(dist(torch.tensor([1.0, 2.0, 3.0]), mesh, None))
            assert_tensor_equal(self, x, t.clone().copy_(torch.tensor([1.0, 2.0, 3.0])))
            x.copy_(torch.full((4, 3), 7, dtype=torch.int64))
            assert_tensor_equal(self, x, torch.full((4, 3), 7.0))
        with self.assertRaises(RuntimeError):
            dist(t, CPU1, None).copy_(dist(randn(2, 3), CPU1, None))


# ------------------------------------------------------------------------ cat / stack / split

class TestCatStack(ViewTestCase):
    def test_one_device(self):
        a, b, c = int_valued(2, 3, seed=1), int_valued(4, 3, seed=2), int_valued(1, 3, seed=3)
        A, B, C = (dist(v, CPU1, None) for v in (a, b, c))
        assert_tensor_equal(self, dtorch.cat([A, B, C]), torch.cat([a, b, c]))
        assert_tensor_equal(self, dtorch.cat((A, B, C, A, B), dim=0), torch.cat((a, b, c, a, b), dim=0))
        assert_tensor_equal(self, dtorch.concat([A.T, A.T], dim=-1), torch.concat([a.T, a.T], dim=-1))
        assert_tensor_equal(self, dtorch.cat([A]), torch.cat([a]))
        assert_tensor_equal(self, dtorch.stack([A, A, A]), torch.stack([a, a, a]))
        assert_tensor_equal(self, dtorch.stack([A, A], dim=2), torch.stack([a, a], dim=2))
        assert_tensor_equal(self, dtorch.stack([A], dim=-1), torch.stack([a], dim=-1))
        assert_tensor_equal(self, dtorch.stack([A, A, A, A, A], dim=1), torch.stack([a] * 5, dim=1))
        # Type promotion, including the legacy empty 1-D input.
        i = int_valued(2, 3, dtype=torch.int64)
        h = int_valued(2, 3, dtype=torch.float16)
        bf = int_valued(2, 3, dtype=torch.bfloat16)
        bo = int_valued(2, 3) > 0
        I64, H, BF, BO = (dist(v, CPU1, None) for v in (i, h, bf, bo))
        for xs, ts in [((A, I64), (a, i)), ((I64, H), (i, h)), ((H, BF, I64), (h, bf, i)), ((BO, I64), (bo, i)),
                       ((BO, BO), (bo, bo))]:
            assert_tensor_equal(self, dtorch.cat(xs), torch.cat(ts))
            assert_tensor_equal(self, dtorch.stack(xs, 1), torch.stack(ts, 1))
        e = torch.zeros(0, dtype=torch.float64)
        assert_tensor_equal(self, dtorch.cat([I64, dist(e, CPU1, None)]), torch.cat([i, e]))

    def test_errors(self):
        A = dist(randn(2, 3), CPU1, None)
        with self.assertRaisesRegex(ValueError, "non-empty list"):  # torch.cat([]) raises ValueError
            dtorch.cat([])
        with self.assertRaisesRegex(RuntimeError, "Sizes of tensors must match except in dimension 0"):
            dtorch.cat([A, dist(randn(2, 4), CPU1, None)])
        with self.assertRaisesRegex(RuntimeError, "same number of dimensions"):
            dtorch.cat([A, dist(randn(3), CPU1, None)])
        with self.assertRaisesRegex(RuntimeError, "zero-dimensional"):
            dtorch.cat([dist(torch.tensor(1.0), CPU1, None)])
        with self.assertRaisesRegex(RuntimeError, "stack expects each tensor to be equal size"):
            dtorch.stack([A, dist(randn(2, 4), CPU1, None)])
        with self.assertRaises(IndexError):
            dtorch.cat([A, A], dim=2)
        with self.assertRaises(TypeError):
            dtorch.cat([A, torch.ones(2, 3)])

    def test_placements(self):
        a, b = int_valued(5, 3, seed=1), int_valued(2, 3, seed=2)
        for mesh in (CPU2, CPU3, CPU2x2):
            for pl in shard_placements(mesh, 2):
                with self.subTest(mesh=mesh, pl=pl):
                    x, y = dist(a, mesh, pl), dist(b, mesh, pl)
                    # Shard(0) along the cat dim is gathered and sliced back: the placements stay.
                    z = dtorch.cat([x, y, x])
                    assert_tensor_equal(self, z, torch.cat([a, b, a]))
                    self.assertEqual(z.placements, pl)
                    s = dtorch.stack([x, x, x], dim=1)
                    assert_tensor_equal(self, s, torch.stack([a, a, a], dim=1))
                    self.assertEqual(s.placements, [Shard(p.dim + (p.dim >= 1)) if p.is_shard() else p for p in pl])

    def test_mixed_placements(self):
        a, b = int_valued(5, 4, seed=1), int_valued(3, 4, seed=2)
        cases = [([Shard(1)], [R], [Shard(1)]), ([R], [Shard(1)], [Shard(1)]), ([P], [R], None), ([Shard(1)], [P], None),
                 ([Shard(0)], [R], [Shard(0)]), ([R], [Shard(0)], [Shard(0)]), ([Shard(0)], [Shard(1)], [Shard(1)]),
                 ([Shard(0)], [P], None), ([P], [Shard(0)], None)]
        for mesh in MESHES_1D:
            for pa, pb, exp in cases:
                x, y = dist(a, mesh, pa), dist(b, mesh, pb)
                if exp is None:
                    with self.assertRaises(PlacementError):
                        dtorch.cat([x, y])
                    continue
                z = dtorch.cat([x, y])
                assert_tensor_equal(self, z, torch.cat([a, b]))
                self.assertEqual(z.placements, exp)
        # Nested shards that do not line up across inputs are rejected, not miscomputed.
        x = dist(int_valued(4, 8), CPU2x2, [Shard(1), Shard(1)])
        y = dist(int_valued(4, 8), CPU2x2, [R, Shard(1)])
        with self.assertRaises(PlacementError):
            dtorch.cat([x, y])

    def test_cat_along_shard(self):
        """cat along a sharded dim (gathered, then sliced back) and stack along one (Shard(d) -> Shard(d+1)):
        uneven shards, 2-, 3- and 4-device and 2-D meshes, inputs of different lengths."""
        cpu4 = dtorch.DeviceMesh("cpu", [0, 1, 2, 3])
        a, b, c = int_valued(5, 3, 2, seed=1), int_valued(2, 3, 2, seed=2), int_valued(7, 3, 2, seed=3)
        for mesh in (CPU2, CPU3, cpu4):
            for dim in (0, 1, 2):
                pl = [Shard(dim)]
                xs = [dist(t.transpose(0, dim).contiguous(), mesh, pl) for t in (a, b, c)]
                ts = [t.transpose(0, dim).contiguous() for t in (a, b, c)]
                with self.subTest(mesh=mesh, dim=dim):
                    z = dtorch.cat(xs, dim=dim)
                    assert_tensor_equal(self, z, torch.cat(ts, dim=dim))
                    self.assertEqual(z.placements, pl)
                    # The result takes part in later ops like any Shard(dim) tensor.
                    assert_tensor_equal(self, (z * 2).sum(dim), (torch.cat(ts, dim=dim) * 2).sum(dim))
            s = dtorch.stack([dist(a, mesh, [Shard(0)])] * 3, dim=0)
            assert_tensor_equal(self, s, torch.stack([a] * 3, dim=0))
            self.assertEqual(s.placements, [Shard(1)])
        # 2-D meshes: along the cat dim on one or both mesh dims, with another dim sharded on the other.
        for pl in ([Shard(0), Shard(1)], [Shard(1), Shard(0)], [Shard(0), Shard(0)], [Shard(0), R], [R, Shard(0)],
                   [Shard(0), P]):
            with self.subTest(pl=pl):
                x, y = dist(a, CPU2x2, pl), dist(c, CPU2x2, pl)
                z = dtorch.cat([x, y, x], dim=0)
                assert_tensor_equal(self, z, torch.cat([a, c, a], dim=0))
                self.assertEqual(z.placements, pl)
        # Partial next to a Shard of the cat dim stays an error, named at the call.
        with self.assertRaisesRegex(PlacementError, "cat"):
            dtorch.cat([dist(a, cpu4, [Shard(0)]), dist(b, cpu4, [P])])

    def test_many_inputs(self):
        """More inputs than an op node takes (cat is a tree): the input that decides may come last."""
        ts = [int_valued(2, 3, 2, 2, 2, seed=i) for i in range(8)]
        for mesh in MESHES_1D:
            xs = [dist(t, mesh, [Shard(1)]) for t in ts[:7]]
            z = dtorch.cat(xs + [dist(ts[7], mesh, [R])])
            assert_tensor_equal(self, z, torch.cat(ts))
            self.assertEqual(z.placements, [Shard(1)])
            with self.assertRaises(PlacementError) as cm:
                dtorch.cat(xs + [dist(ts[7], mesh, [Shard(2)])])
            self.assertIn("Fix: call input 7's .redistribute(placements=[Replicate()])", str(cm.exception))
            self.assertIn("input 7 has [Shard(dim=2)]", str(cm.exception))
            # Seven different placements: two Shards of kept dims among them, rejected.
            pls = [[R], [P], [Shard(0)], [Shard(1)], [Shard(2)], [Shard(3)], [Shard(4)], [Shard(1)]]
            with self.assertRaises(PlacementError):
                dtorch.cat([dist(t, mesh, pl) for t, pl in zip(ts, pls)])
            s = dtorch.stack([dist(t, mesh, [Shard(2)]) for t in ts[:7]] + [dist(ts[7], mesh, [R])], dim=1)
            assert_tensor_equal(self, s, torch.stack(ts, dim=1))
            self.assertEqual(s.placements, [Shard(3)])

    def test_split_family(self):
        t = int_valued(7, 4)
        for mesh, pl in [(CPU1, None), (CPU2, [Shard(1)]), (CPU3, [P]), (CPU2x2, [Shard(1), Shard(1)]), (CPU2, [R])]:
            x = dist(t, mesh, pl)
            dim1_ok = not any(p.is_shard() for p in x.placements)
            for args in [(3,), (3, 0), (1, 0)] + ([(2, 1), (4, -1)] if dim1_ok else []):
                for got, exp in zip(x.chunk(*args), t.chunk(*args), strict=True):
                    assert_tensor_equal(self, got, exp)
            for args in [(2,), (3, 0), ([1, 4, 2],), (7,)] + ([([1, 3], 1)] if dim1_ok else []):
                got = x.split(*args)
                exp = t.split(*args)
                self.assertEqual(len(got), len(exp))
                for g, e in zip(got, exp):
                    assert_tensor_equal(self, g, e)
            for dim in (0, 1, -1) if dim1_ok else (0,):
                got, exp = x.unbind(dim), t.unbind(dim)
                self.assertEqual(len(got), len(exp))
                for g, e in zip(got, exp):
                    assert_tensor_equal(self, g, e)
            for g, e in zip(dtorch.chunk(x, 2, 0), torch.chunk(t, 2, 0)):
                assert_tensor_equal(self, g, e)
            for g, e in zip(dtorch.split(x, 3), torch.split(t, 3)):
                assert_tensor_equal(self, g, e)
            for g, e in zip(dtorch.unbind(x, 0), torch.unbind(t, 0)):
                assert_tensor_equal(self, g, e)
            self.assertEqual([v.tolist() for v in x], [v.tolist() for v in t])
        e = dist(torch.zeros(0, 3), CPU1, None)
        self.assertEqual(len(e.chunk(3)), len(torch.zeros(0, 3).chunk(3)))
        self.assertEqual(len(e.split(2)), len(torch.zeros(0, 3).split(2)))
        # Along a sharded dim: rejected (unless one piece covers the dim).
        x = dist(t, CPU2, [Shard(0)])
        for fn in (lambda v: v.chunk(2), lambda v: v.split(3), lambda v: v.unbind(0), lambda v: dtorch.split(v, [3, 4])):
            with self.assertRaises(PlacementError) as cm:
                fn(x)
            self.assertIn("redistribute", str(cm.exception))
        assert_tensor_equal(self, x.split(7)[0], t)
        with self.assertRaisesRegex(RuntimeError, "chunk expects"):
            x.chunk(0)
        with self.assertRaisesRegex(RuntimeError, "split_with_sizes"):
            x.split([1, 1], dim=1)


# ------------------------------------------------------------------------ tril / flip / roll

class TestTrilFlipRoll(ViewTestCase):
    def test_one_device(self):
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool):
            t = int_valued(3, 4, 5, low=1).to(dtype)
            x = dist(t, CPU1, None)
            for k in (-6, -1, 0, 1, 2, 7):
                assert_tensor_equal(self, x.tril(k), t.tril(k))
                assert_tensor_equal(self, x.triu(k), t.triu(k))
            assert_tensor_equal(self, dtorch.tril(x), torch.tril(t))
            assert_tensor_equal(self, dtorch.triu(x, diagonal=1), torch.triu(t, diagonal=1))
            assert_tensor_equal(self, x.flip(0), t.flip(0))
            assert_tensor_equal(self, x.flip(0, 2), t.flip(0, 2))
            assert_tensor_equal(self, dtorch.flip(x, (-1,)), torch.flip(t, (-1,)))
            assert_tensor_equal(self, x.roll(2), t.roll(2))
            assert_tensor_equal(self, x.roll(-3, 1), t.roll(-3, 1))
            assert_tensor_equal(self, x.roll((1, 2), (0, 2)), t.roll((1, 2), (0, 2)))
            assert_tensor_equal(self, dtorch.roll(x, (1, 1), (2, 2)), torch.roll(t, (1, 1), (2, 2)))

    def test_errors(self):
        x = dist(randn(2, 3), CPU1, None)
        with self.assertRaisesRegex(RuntimeError, "at least 2 dimensions"):  # torch: RuntimeError, not IndexError
            dist(randn(3), CPU1, None).tril()
        with self.assertRaisesRegex(RuntimeError, "multiple times"):
            x.flip(0, 0)
        with self.assertRaisesRegex(RuntimeError, "must align"):
            x.roll((1, 2))
        with self.assertRaisesRegex(RuntimeError, "must align"):
            x.roll((1, 2), (0,))

    def test_tril_every_placement(self):
        for shape, mesh in [((5, 7), CPU2), ((7, 5), CPU3), ((2, 5, 6), CPU2x2), ((6, 6), CPU2x2)]:
            t = int_valued(*shape, low=1)
            for pl in shard_placements(mesh, len(shape)):
                for k in (-2, 0, 3):
                    self.check(t, mesh, pl, lambda v: v.tril(k), lambda v: v.tril(k), pl)
                    self.check(t, mesh, pl, lambda v: v.triu(k), lambda v: v.triu(k), pl)

    def test_flip_roll_placements(self):
        t = int_valued(5, 4, 3)
        for mesh in (CPU2, CPU3, CPU2x2):
            for pl in shard_placements(mesh, 3):
                sharded = {p.dim for p in pl if p.is_shard()}
                for dims in [(0,), (1, 2), (0, 2)]:
                    exp = None if sharded & set(dims) else pl
                    self.check(t, mesh, pl, lambda v: v.flip(dims), lambda v: v.flip(dims), exp)
                    self.check(t, mesh, pl, lambda v: v.roll([2] * len(dims), dims),
                               lambda v: v.roll([2] * len(dims), dims), exp)
                self.check(t, mesh, pl, lambda v: v.roll(3), lambda v: v.roll(3), None if sharded else pl)


if __name__ == "__main__":
    unittest.main()


class TestStridedResults(unittest.TestCase):
    """Kernel results may be strided views of their input's storage (docs/decisions.md, "Kernel
    results may be views"): whatever consumes them copies them out correctly, nothing writes into a
    storage a view still sees, and memory_stats counts a shared storage once."""

    def test_consumers_of_views(self):
        t = randn(6, 8, 4)
        x = dtorch.from_torch(t)
        for got, want in ((x.transpose(0, 2), t.transpose(0, 2)), (x[:, 2:6], t[:, 2:6]),
                          (x.permute(2, 0, 1).reshape(4, 48), t.permute(2, 0, 1).reshape(4, 48)),
                          (x.chunk(2, dim=1)[1], t.chunk(2, dim=1)[1]), (x.narrow(2, 1, 2), t.narrow(2, 1, 2))):
            assert_tensor_equal(self, got, want)  # to_torch of a strided impl
            self.assertEqual(got.tolist(), want.tolist())
            assert_tensor_equal(self, got * 2 + 1, want * 2 + 1)
            assert_tensor_equal(self, got.sum(dim=-1), want.sum(dim=-1))
            # Collectives and copies on meshes read the strided block: R -> S slices it, S -> R
            # gathers the slices, Partial -> R adds them.
            for mesh in (CPU2, CPU3):
                r = dtorch.from_torch(t, mesh)
                v = r.transpose(0, 2)[1:3]
                w = t.transpose(0, 2)[1:3]
                assert_tensor_equal(self, v.redistribute(mesh, [Shard(1)]), w)
                assert_tensor_equal(self, v.redistribute(mesh, [Shard(1)]).redistribute(mesh, [R]), w)
                p = genuine_partial(t, mesh, [P]).transpose(0, 2)
                self.assertTrue(torch.allclose(p.redistribute(mesh, [R]).to_torch(), t.transpose(0, 2)))

    def test_no_write_into_a_seen_storage(self):
        # x's buffer would be reused by `x = x * 2` (the reuse pass) if no view saw it.
        t = randn(16, 64)
        x = dtorch.from_torch(t) + 1
        v = x[:, :32]
        for _ in range(3):
            x = x * 2
        assert_tensor_equal(self, v, (t + 1)[:, :32])
        assert_tensor_equal(self, x, (t + 1) * 8)

    def test_memory_counts_storage_once(self):
        mesh = dtorch.DeviceMesh("cpu", [913])
        n = 256 * 1024 * 4  # bytes of a [256, 1024] float32

        def current():
            dtorch.synchronize()
            return dtorch.memory_stats(mesh)["cpu:913"]["current"]

        start = current()
        # A value from_torch made is charged to its device, though the device's block shares the
        # host copy's storage (a source is on no device's account, so it is no view's base).
        x = dtorch.from_torch(torch.ones(256, 1024), mesh)
        x.to_torch()
        self.assertEqual(current(), start + n)
        x = x * 3  # a kernel's result: charged; the source goes
        x.to_torch()
        base = current()
        self.assertEqual(base, start + n)
        views = [x[:, :512], x.transpose(0, 1), x.reshape(1024, 256), x[:, 256:]]
        for v in views:
            v.to_torch()
        del v
        self.assertEqual(current(), base)  # views share x's storage: charged nothing more
        del x
        self.assertEqual(current(), base)  # the views still pin the storage: still charged
        views = views[:1]
        self.assertEqual(current(), base)
        del views
        self.assertEqual(current(), base - n)
        # A slice of under a quarter of its storage is copied: the big buffer goes when the source
        # goes, and the copy is charged its own bytes.
        x = dtorch.from_torch(torch.ones(256, 1024), mesh) * 3
        s = x[:, :128]
        s.to_torch()
        self.assertEqual(current(), base + n // 8)
        del x
        self.assertEqual(current(), base - n + n // 8)
        assert_tensor_equal(self, s, torch.full((256, 128), 3.0))

    def test_contiguous_follows_eager_layout(self):
        # sigmoid rounds a strided view and its contiguous copy differently in the last bit
        # (docs/decisions.md, "Elementwise shards are exact, except ..."): both forms must give
        # eager torch's own bits, so contiguous() is a real copy where the block is strided.
        t = randn(4, 65)
        x = dtorch.from_torch(t)
        self.assertFalse(torch.equal(torch.sigmoid(t.t()), torch.sigmoid(t.t().contiguous())))
        assert_tensor_equal(self, x.t().sigmoid(), t.t().sigmoid())
        assert_tensor_equal(self, x.t().contiguous().sigmoid(), t.t().contiguous().sigmoid())
        assert_tensor_equal(self, x.contiguous(), t)
        for mesh, pl in ((CPU2, [Shard(0)]), (CPU2x2, [Shard(1), R])):
            d = dtorch.from_torch(t, mesh, pl).t().contiguous()
            self.assertEqual(d.placements, dtorch.from_torch(t, mesh, pl).t().placements)
            assert_tensor_equal(self, d, t.t())
