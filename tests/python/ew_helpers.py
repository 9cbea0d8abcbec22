"""Helpers of the elementwise tests: operands of every dtype, bit-exact comparison with NaNs, and a
reference model of the documented placement rules (dtorch_ops.h, "elementwise math")."""

import itertools

import torch

import dtorch
from dtorch import Replicate, Shard
from dtorch.test.test_util import assert_replicas_equal

ALL_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
              torch.bfloat16, torch.float32, torch.float64)


def values(shape, dtype, seed=0, positive=False, special=False):
    """Test values of ``dtype``: small integers, normal floats (optionally with nan/inf/-0.0)."""
    g = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool() if not positive else torch.ones(shape, dtype=dtype)
    if not dtype.is_floating_point:
        lo, hi = (1, 7) if positive else ((0, 10) if dtype == torch.uint8 else (-5, 6))
        return torch.randint(lo, hi, shape, generator=g).to(dtype)
    t = torch.randn(shape, generator=g, dtype=torch.float64) * 3
    if positive:
        t = t.abs() + 0.5
    if special and t.numel() >= 6:
        flat = t.view(-1)
        flat[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 2.5, -0.5])
    return t.to(dtype)


def outcome(fn):
    """("ok", value) or ("err", exception); dtorch results are read (errors may surface at the read)."""
    try:
        r = fn()
        if isinstance(r, dtorch.Tensor):
            r = r.to_torch()
        return "ok", r
    except Exception as e:  # noqa: BLE001 - the exception is the result
        return "err", e


def assert_exact(tc, got, expected, msg=None):
    """Same dtype, shape and values bit for bit (NaN where torch has NaN); a dtorch result's copies on
    its Replicate mesh dims are bitwise equal too (a read only looks at the first)."""
    if isinstance(got, dtorch.Tensor):
        assert_replicas_equal(tc, got)
        got = got.to_torch()
    tc.assertEqual(got.dtype, expected.dtype, msg)
    tc.assertEqual(got.shape, expected.shape, msg)
    if got.is_floating_point():
        nan = expected.isnan()
        tc.assertTrue(torch.equal(got.isnan(), nan), f"{msg}: NaNs differ\n{got}\n{expected}")
        tc.assertTrue(torch.equal(got[~nan], expected[~nan]), f"{msg}:\n{got}\nexpected\n{expected}")
    else:
        tc.assertTrue(torch.equal(got, expected), f"{msg}:\n{got}\nexpected\n{expected}")


def assert_same_outcome(tc, torch_fn, dtorch_fn, msg=None):
    """dtorch does what torch does: the same value, or an error of torch's exception type."""
    kt, vt = outcome(torch_fn)
    kd, vd = outcome(dtorch_fn)
    if kt == "err":
        tc.assertEqual(kd, "err", f"{msg}: torch raised {vt!r}, dtorch returned {vd}")
        tc.assertIsInstance(vd, type(vt), f"{msg}: torch raised {vt!r}, dtorch {vd!r}")
        return
    if kd == "err":
        raise AssertionError(f"{msg}: dtorch raised {vd!r}, torch returned {vt}")
    if isinstance(vt, torch.Tensor):
        assert_exact(tc, vd, vt, msg)
    else:
        tc.assertEqual(vd, vt, msg)


# ------------------------------------------------------------------ placement model


def broadcast(*shapes):
    return tuple(torch.broadcast_shapes(*(torch.Size(s) for s in shapes)))


def expected_sr(placements, shapes, out_shape):
    """One mesh dim under the "broadcast S/R" rule without Partial: the output placement or None."""
    o = None
    for p, s in zip(placements, shapes):
        if p.is_partial():
            return None
        if p.is_shard():
            od = p.dim + len(out_shape) - len(s)
            if s[p.dim] == 1 and out_shape[od] != 1:
                return None
            if o is not None and o != od:
                return None
            o = od
    return Shard(o) if o is not None else Replicate()


def _chunk(n, k, i):
    c = -(-n // k)
    return min(i * c, n), min((i + 1) * c, n)


def local_region(shape, mesh_shape, placements, coord):
    """docs/design.md, "Distributed tensors": shards follow torch.chunk and nest in mesh-dim order."""
    start, length = [0] * len(shape), list(shape)
    for md, p in enumerate(placements):
        if p.is_shard() and mesh_shape[md] > 1:
            s, e = _chunk(length[p.dim], mesh_shape[md], coord[md])
            start[p.dim] += s
            length[p.dim] = e - s
    return start, length


def devices_hold_what_they_need(mesh_shape, in_shapes, in_pls, out_shape, out_pls):
    """Every device's output region needs, from each input, a region it holds (nested shards)."""
    for coord in itertools.product(*(range(n) for n in mesh_shape)):
        os_, ol = local_region(out_shape, mesh_shape, out_pls, coord)
        for s, pl in zip(in_shapes, in_pls):
            ls, ll = local_region(s, mesh_shape, pl, coord)
            off = len(out_shape) - len(s)
            for d in range(len(s)):
                if s[d] == 1 and out_shape[d + off] != 1:
                    ns, nl = 0, 1
                else:
                    ns, nl = os_[d + off], ol[d + off]
                if nl > 0 and (ns < ls[d] or ns + nl > ls[d] + ll[d]):
                    return False
    return True


def expected_sr_mesh(mesh_shape, in_shapes, in_pls, out_shape):
    """All mesh dims: the output placements, or None when the op must raise PlacementError."""
    out = []
    for md in range(len(mesh_shape)):
        if mesh_shape[md] == 1:
            out.append(Replicate())
            continue
        p = expected_sr([pl[md] for pl in in_pls], in_shapes, out_shape)
        if p is None:
            return None
        out.append(p)
    if not devices_hold_what_they_need(mesh_shape, in_shapes, in_pls, out_shape, out):
        return None
    return out
