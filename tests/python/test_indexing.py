"""Indexing against eager torch: x[key] (ints, slices with steps and negative bounds, None, ..., int64 and
boolean tensor indices), x[key] = value (numbers and tensors, with broadcasting; masks and index tensors
with numbers), narrow and select; one device exactly, meshes for the accepted placements, PlacementError for
the rejected ones. Assignments rebind the Python object: every reference to it sees the new value.
"""

import unittest

import torch

import dtorch
from dtorch import Partial, PlacementError, Replicate, Shard

from helpers import CPU1, CPU2, CPU3, CPU2x2, int_valued, randn
from helpers import assert_equal_everywhere as assert_tensor_equal  # and every replica bitwise
from test_views import dist, local_box, mesh_coords, shard_placements

# Operators this module tests against eager PyTorch (tests/python/test_registry.py).
TESTED_OPS = {"__getitem__", "__setitem__", "narrow"}

R, P = Replicate(), Partial()
MESHES = (CPU2, CPU3, CPU2x2)

BASIC_KEYS = [
    0, -1, 2, slice(None), slice(1, None), slice(None, -1), slice(None, None, 2), slice(1, -1, 3), slice(-10, 10),
    slice(5, 1), None, Ellipsis, (0, 1), (slice(None), 0), (Ellipsis, 1), (None, 0, None), (1, None, Ellipsis, slice(None, None, 2)),
    (slice(1, None), None, Ellipsis, slice(None, None, 2)), (-2, slice(None), -1), (slice(None, None, 4), slice(2, 3)),
    (Ellipsis, None), (slice(0, 0), 1), (slice(None), slice(None), slice(None)), (None, None, -3),
]


def key_repr(k):
    return repr(k)


def selection(key, shape):
    """Per input dim: (positions list, dropped) for a basic key; the result's new-axis count."""
    if not isinstance(key, tuple):
        key = (key,)
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    out, d = [], 0
    for k in key:
        if k is None:
            continue
        if k is Ellipsis:
            for _ in range(len(shape) - consumed):
                out.append((list(range(shape[d])), False))
                d += 1
        elif isinstance(k, slice):
            out.append((list(range(*k.indices(shape[d]))), False))
            d += 1
        else:
            out.append(([k % shape[d]], True))
            d += 1
    while d < len(shape):
        out.append((list(range(shape[d])), False))
        d += 1
    return out


def getitem_expected(key, shape, placements, x_result_ndim):
    """The documented rule: a Shard survives on dims taken whole (moving to their result position)."""
    sel = selection(key, shape)
    if not isinstance(key, tuple):
        key = (key,)
    # result position of each input dim
    pos, o, d = {}, 0, 0
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    items = []
    for k in key:
        if k is Ellipsis:
            items.extend([slice(None)] * (len(shape) - consumed))
        else:
            items.append(k)
    items.extend([slice(None)] * (len(shape) - consumed if Ellipsis not in key else 0))
    for k in items:
        if k is None:
            o += 1
        elif isinstance(k, slice):
            pos[d] = o
            o += 1
            d += 1
        else:
            d += 1
    out = []
    for p in placements:
        if p.is_shard():
            positions, dropped = sel[p.dim]
            if dropped or positions != list(range(shape[p.dim])):
                return None
            out.append(Shard(pos[p.dim]))
        else:
            out.append(p)
    return out


class IndexTestCase(unittest.TestCase):
    def assertPlacementError(self, fn):
        with self.assertRaises(PlacementError) as cm:
            fn()
        self.assertIn("redistribute", str(cm.exception))


class TestGetitemBasic(IndexTestCase):
    def test_one_device_keys_and_dtypes(self):
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool):
            t = int_valued(4, 5, 6).to(dtype)
            x = dist(t, CPU1, None)
            for key in BASIC_KEYS:
                with self.subTest(dtype=dtype, key=key_repr(key)):
                    assert_tensor_equal(self, x[key], t[key])
        s = dist(torch.tensor(2.5), CPU1, None)
        assert_tensor_equal(self, s[None], torch.tensor(2.5)[None])
        assert_tensor_equal(self, s[...], torch.tensor(2.5)[...])

    def test_non_contiguous_input(self):
        t = randn(6, 8)[::2, 1::3].t()
        for mesh, pl in [(CPU1, None), (CPU2, [Shard(1)]), (CPU2x2, [Shard(1), Shard(0)])]:
            x = dist(t, mesh, pl)
            for key in [None, (None, slice(None), slice(None)), (Ellipsis, None)]:
                assert_tensor_equal(self, x[key], t[key])
            assert_tensor_equal(self, x[0] if mesh is CPU1 else x[:, None], t[0] if mesh is CPU1 else t[:, None])

    def test_errors(self):
        x = dist(randn(2, 3), CPU1, None)
        with self.assertRaisesRegex(IndexError, "out of bounds"):
            x[5]
        with self.assertRaisesRegex(IndexError, "out of bounds"):
            x[0, -4]
        with self.assertRaisesRegex(IndexError, "too many indices"):
            x[0, 0, 0]
        with self.assertRaisesRegex(ValueError, "step must be greater than zero"):
            x[::-1]
        # x[..., ...] is no error: torch 2.13 takes several ellipses (test_api_gaps.py compares them)
        with self.assertRaises(IndexError):
            x["a"]

    def test_placements(self):
        shape = (5, 4, 6)
        t = int_valued(*shape)
        keys = [k for k in BASIC_KEYS if k != (1, None, Ellipsis, slice(None, None, 2))] + [(slice(None), 1)]
        for mesh in MESHES:
            for pl in shard_placements(mesh, 3):
                x = dist(t, mesh, pl)
                for key in keys:
                    with self.subTest(mesh=mesh, pl=pl, key=key_repr(key)):
                        ref = t[key]
                        exp = getitem_expected(key, shape, x.placements, ref.dim())
                        if exp is None:
                            self.assertPlacementError(lambda: x[key])
                            continue
                        y = x[key]
                        assert_tensor_equal(self, y, ref)
                        self.assertEqual(y.placements, exp)

    def test_narrow_select(self):
        t = int_valued(5, 6)
        for mesh, pl in [(CPU1, None), (CPU2, [Shard(1)]), (CPU3, [P]), (CPU2x2, [Shard(1), R])]:
            x = dist(t, mesh, pl)
            for args in [(0, 1, 3), (0, -2, 2), (0, 0, 0), (-2, 4, 1)]:
                assert_tensor_equal(self, x.narrow(*args), t.narrow(*args))
                assert_tensor_equal(self, dtorch.narrow(x, *args), torch.narrow(t, *args))
            assert_tensor_equal(self, x.narrow(0, torch.tensor(2), 2), t.narrow(0, torch.tensor(2), 2))
            assert_tensor_equal(self, x.select(0, -1), t.select(0, -1))
            assert_tensor_equal(self, dtorch.select(x, 0, 2), torch.select(t, 0, 2))
        x = dist(t, CPU2, [Shard(0)])
        self.assertPlacementError(lambda: x.narrow(0, 1, 3))
        self.assertPlacementError(lambda: x.select(0, 1))
        assert_tensor_equal(self, x.narrow(0, 0, 5), t.narrow(0, 0, 5))
        assert_tensor_equal(self, x.narrow(1, 2, 3), t.narrow(1, 2, 3))
        self.assertEqual(x.narrow(1, 2, 3).placements, [Shard(0)])
        with self.assertRaisesRegex(RuntimeError, "exceeds dimension size"):
            x.narrow(1, 4, 3)
        with self.assertRaises(IndexError):
            x.select(1, 6)


class TestGetitemTensor(IndexTestCase):
    def test_one_device(self):
        t = int_valued(4, 5, 3)
        x = dist(t, CPU1, None)
        idx = torch.tensor([3, 0, -1, 2, 2])
        idx2 = torch.tensor([[0, 1], [-2, 3]])
        for key in [idx, (slice(None), idx), (Ellipsis, torch.tensor([2, 0])), (1, idx), (slice(None), 2, torch.tensor([0])),
                    idx2, (slice(None), idx2), (None, idx), (slice(1, None), slice(None), idx2 % 3), [0, 2, 2],
                    (slice(None), [1]), torch.tensor(2), (0, torch.tensor(1))]:
            with self.subTest(key=key_repr(key)):
                assert_tensor_equal(self, x[key], t[key])
                # The same with the index as a dtorch tensor.
                if isinstance(key, torch.Tensor):
                    assert_tensor_equal(self, x[dist(key, CPU1, None)], t[key])
        for dtype in (torch.float16, torch.bfloat16, torch.int64, torch.bool):
            td = t.to(dtype)
            assert_tensor_equal(self, dist(td, CPU1, None)[:, idx], td[:, idx])

    def test_masks(self):
        t = int_valued(4, 5, 3)
        m2 = t[:, :, 0] > 0
        m1 = torch.tensor([True, False, True, True])
        m1b = torch.tensor([False, True, True, False, True])
        for mesh, pl in [(CPU1, None), (CPU2, [Shard(2)]), (CPU3, [P]), (CPU2x2, [Shard(2), R])]:
            x = dist(t, mesh, pl)
            for key in [m1, m2, (slice(None), m1b), (Ellipsis, torch.tensor([True, False, True])), m2[None][0],
                        torch.tensor(True), torch.tensor(False), (0, m1b)]:
                with self.subTest(mesh=mesh, pl=pl, key=key_repr(key)):
                    if isinstance(key, tuple) and key[0] is Ellipsis and any(p.is_shard() for p in x.placements):
                        self.assertPlacementError(lambda: x[key])
                        continue
                    assert_tensor_equal(self, x[key], t[key])
                    if isinstance(key, torch.Tensor):
                        assert_tensor_equal(self, x[dist(key, mesh, None)], t[key])
        x = dist(t, CPU1, None)
        with self.assertRaisesRegex(IndexError, "does not match the shape"):
            x[torch.tensor([True, False])]

    def test_errors(self):
        x = dist(randn(4, 3), CPU1, None)
        with self.assertRaisesRegex(IndexError, "long, byte or bool"):
            x[torch.tensor([0, 1], dtype=torch.int32)]
        with self.assertRaisesRegex(IndexError, "long, byte or bool"):
            x[dist(torch.tensor([0.0]), CPU1, None)]
        # Several tensor indices are supported (tests/python/test_compat.py); their shapes must broadcast.
        with self.assertRaisesRegex(IndexError, "shape mismatch"):
            x[torch.tensor([0, 1]), torch.tensor([1, 2, 0])]
        with self.assertRaisesRegex(IndexError, "out of bounds"):
            x[torch.tensor([0, 4]), torch.tensor([1, 2])]

    def test_placements(self):
        t = int_valued(6, 5, 4)
        idx = torch.tensor([[4, 0, 1], [3, 3, 2]])
        for mesh in MESHES:
            for pl_x in shard_placements(mesh, 3):
                for pl_i in shard_placements(mesh, 2, partial=True)[::1]:
                    with self.subTest(mesh=mesh, x=pl_x, i=pl_i):
                        x, i = dist(t, mesh, pl_x), dist(idx, mesh, pl_i)
                        exp = []
                        for px, pi in zip(x.placements, i.placements):
                            if pi.is_partial() or (pi.is_shard() and not px.is_replicate()) or \
                                    (px.is_shard() and px.dim == 1):
                                exp = None
                                break
                            if pi.is_shard():
                                exp.append(Shard(1 + pi.dim))
                            elif px.is_shard():
                                exp.append(Shard(px.dim if px.dim < 1 else px.dim + 1))
                            else:
                                exp.append(px)
                        if exp is None:
                            self.assertPlacementError(lambda: x[:, i])
                            continue
                        y = x[:, i]
                        assert_tensor_equal(self, y, t[:, idx])
                        self.assertEqual(y.placements, exp)


def value_needed(key, shape, vshape, box):
    """The box of the value a device needs to write its part of x[key] (None: nothing to write)."""
    sel = selection(key, shape)
    kept = [d for d, (_, dropped) in enumerate(sel) if not dropped]
    ranges = []
    for d, (positions, _) in enumerate(sel):
        ks = [k for k, p in enumerate(positions) if box[0][d] <= p < box[0][d] + box[1][d]]
        if not ks:
            return None
        ranges.append((ks[0], len(ks)))
    start, length = [], []
    for j, n in enumerate(vshape):
        r = j - (len(vshape) - len(kept))
        if r < 0 or n == 1:
            start.append(0)
            length.append(n)
        else:
            start.append(ranges[kept[r]][0])
            length.append(ranges[kept[r]][1])
    return start, length


def within(inner, outer):
    return all(o0 <= i0 and i0 + n <= o0 + m for i0, n, o0, m in zip(inner[0], inner[1], outer[0], outer[1]))


class TestSetitem(IndexTestCase):
    def test_one_device(self):
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool):
            t = int_valued(4, 5, 3).to(dtype)
            for key in BASIC_KEYS:
                for value in (7, 2.5, True, int_valued(3, seed=5).to(dtype), torch.tensor(9).to(dtype)):
                    ref = t.clone()
                    try:
                        ref[key] = value
                    except RuntimeError:
                        # Where torch raises (a value that does not broadcast to the selection),
                        # dtorch raises RuntimeError too, at the call, and the target keeps its value.
                        with self.subTest(dtype=dtype, key=key_repr(key), value=value, torch_raises=True):
                            x = dist(t, CPU1, None)
                            with self.assertRaises(RuntimeError):
                                x[key] = dist(value, CPU1, None) if isinstance(value, torch.Tensor) else value
                            assert_tensor_equal(self, x, t)
                            y = dist(t, CPU1, None)
                            with self.assertRaises(RuntimeError):
                                y[key] = value
                            assert_tensor_equal(self, y, t)
                        continue
                    with self.subTest(dtype=dtype, key=key_repr(key), value=value):
                        x = dist(t, CPU1, None)
                        alias = x
                        before = x[0]
                        if isinstance(value, torch.Tensor):
                            x[key] = dist(value, CPU1, None)
                        else:
                            x[key] = value
                        self.assertIs(alias, x)
                        assert_tensor_equal(self, alias, ref)
                        assert_tensor_equal(self, before, t[0])  # taken before: keeps its value
                        y = dist(t, CPU1, None)
                        y[key] = value  # torch tensors and numbers directly
                        assert_tensor_equal(self, y, ref)

    def test_broadcast_and_none(self):
        t = randn(4, 5)
        cases = [((slice(None), 0), torch.ones(4)), ((slice(1, 3),), torch.ones(1, 5)), ((None, 0), torch.ones(1, 5)),
                 ((0,), torch.ones(1, 1, 5)), ((slice(None), None, slice(None, 2)), torch.ones(4, 1, 1)),
                 ((Ellipsis, None), torch.ones(5, 1))]
        for key, value in cases:
            ref = t.clone()
            ref[key] = value
            x = dist(t, CPU1, None)
            x[key] = dist(value, CPU1, None)
            assert_tensor_equal(self, x, ref)
        x = dist(t, CPU1, None)
        with self.assertRaisesRegex(RuntimeError, "shape mismatch"):
            x[0] = dist(torch.ones(2, 5), CPU1, None)
        with self.assertRaisesRegex(RuntimeError, "shape mismatch"):
            x[:, 0] = dist(torch.ones(5), CPU1, None)

    def test_placements_scalar(self):
        t = int_valued(5, 4, 3)
        keys = [0, slice(1, 4), (slice(None), slice(None, None, 2)), (Ellipsis, -1), (2, None, 1), slice(3, 3)]
        for mesh in MESHES:
            for pl in shard_placements(mesh, 3):
                for key in keys:
                    with self.subTest(mesh=mesh, pl=pl, key=key_repr(key)):
                        ref = t.clone()
                        ref[key] = -9
                        x = dist(t, mesh, pl)
                        x[key] = -9
                        assert_tensor_equal(self, x, ref)
                        self.assertEqual(x.placements, dist(t, mesh, pl).placements)

    def test_placements_tensor(self):
        t = int_valued(5, 4, 3)
        cases = [(slice(1, 4), (3, 4, 3)), ((slice(None), 0), (5, 3)), ((slice(None), slice(None, None, 2)), (5, 2, 3)),
                 ((Ellipsis, 1), (1, 4)), (2, (3,)), ((slice(None),), (5, 1, 1))]
        for mesh in MESHES:
            for pl_x in shard_placements(mesh, 3):
                for key, vshape in cases:
                    vt = int_valued(*vshape, seed=7)
                    for pl_v in shard_placements(mesh, len(vshape)):
                        with self.subTest(mesh=mesh, x=pl_x, v=pl_v, key=key_repr(key)):
                            x, v = dist(t, mesh, pl_x), dist(vt, mesh, pl_v)
                            ok = True
                            for px, pv in zip(x.placements, v.placements):
                                if (px.is_replicate() and not pv.is_replicate()) or (px.is_shard() and pv.is_partial()) \
                                        or (px.is_partial() and pv.is_shard()):
                                    ok = False
                            if ok and any(p.is_shard() for p in v.placements):
                                for c in mesh_coords(mesh):
                                    need = value_needed(key, t.shape, vshape, local_box(t.shape, mesh, x.placements, c))
                                    if need and not within(need, local_box(vshape, mesh, v.placements, c)):
                                        ok = False
                            if not ok:
                                with self.assertRaises(PlacementError):
                                    x[key] = v
                                continue
                            ref = t.clone()
                            ref[key] = vt
                            x[key] = v
                            assert_tensor_equal(self, x, ref)
                            self.assertEqual(x.placements, dist(t, mesh, pl_x).placements)

    def test_mask_and_index(self):
        t = int_valued(6, 4, 3)
        mask3 = t > 0
        mask1 = torch.tensor([True, False, False, True, True, False])
        mask_mid = torch.tensor([False, True, True, False])
        idx = torch.tensor([0, 5, -1, 2])
        for dtype in (torch.float32, torch.int64, torch.bool, torch.float16):
            td = t.to(dtype)
            for key, value in [(mask3, 0), (mask1, 2.5), ((slice(None), mask_mid), True), (mask3[0, 0, 0], 1),
                               (idx, -3), ((slice(None), torch.tensor([3, 1])), 4), ((Ellipsis, torch.tensor([0])), 1),
                               (mask1, torch.tensor(5.0))]:
                ref = td.clone()
                ref[key] = value
                for mesh, pl in [(CPU1, None), (CPU2, [Shard(2)]), (CPU3, [P]), (CPU2x2, [Shard(2), P])]:
                    with self.subTest(dtype=dtype, mesh=mesh, pl=pl, key=key_repr(key)):
                        x = dist(td, mesh, pl)
                        if isinstance(key, tuple) and key[0] is Ellipsis and any(p.is_shard() for p in x.placements):
                            with self.assertRaises(PlacementError):  # indexes the sharded dim 2
                                x[key] = value
                            continue
                        x[key] = value
                        assert_tensor_equal(self, x, ref)
                        if isinstance(key, torch.Tensor):
                            y = dist(td, mesh, pl)
                            y[dist(key, mesh, None)] = dist(value, mesh, None) if isinstance(value, torch.Tensor) else value
                            assert_tensor_equal(self, y, ref)
        # A mask sharded like the target is used in place; other shardings are rejected.
        for mesh, pl_x, pl_m, ok in [(CPU2, [Shard(0)], [Shard(0)], True), (CPU3, [Shard(1)], [Shard(1)], True),
                                     (CPU2, [R], [Shard(0)], False), (CPU2, [Shard(0)], [Shard(1)], False),
                                     (CPU2, [Shard(0)], [P], False), (CPU2x2, [Shard(0), Shard(1)], [Shard(0), R], True),
                                     (CPU2x2, [Shard(0), Shard(0)], [R, Shard(0)], False)]:
            x, m = dist(t, mesh, pl_x), dist(mask3, mesh, pl_m)
            if not ok:
                with self.assertRaises(PlacementError):
                    x[m] = 1
                continue
            ref = t.clone()
            ref[mask3] = 1
            x[m] = 1
            assert_tensor_equal(self, x, ref)
        # An index along a sharded dim, or a sharded index, is rejected.
        x = dist(t, CPU2, [Shard(0)])
        with self.assertRaises(PlacementError):
            x[idx] = 1
        x = dist(t, CPU2, [Shard(1)])
        with self.assertRaises(PlacementError):
            x[dist(idx, CPU2, [Shard(0)])] = 1
        x[idx] = 1
        ref = t.clone()
        ref[idx] = 1
        assert_tensor_equal(self, x, ref)

    def test_unsupported_and_errors(self):
        x = dist(randn(4, 3), CPU1, None)
        with self.assertRaises(NotImplementedError):
            x[torch.tensor([0, 1])] = dist(torch.ones(2, 3), CPU1, None)
        with self.assertRaises(NotImplementedError):
            x[torch.tensor([0, 1]), 1:] = 1
        with self.assertRaisesRegex(IndexError, "out of bounds"):
            x[4] = 1
        with self.assertRaises(TypeError):
            x[0] = "a"


if __name__ == "__main__":
    unittest.main()
