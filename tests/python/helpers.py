"""Shared helpers of the Python tests: meshes, placement lists and torch references."""

import itertools

import torch

import dtorch
from dtorch import Partial, Replicate, Shard

CPU1 = dtorch.DeviceMesh("cpu", [0])
CPU2 = dtorch.DeviceMesh("cpu", [0, 1])
CPU3 = dtorch.DeviceMesh("cpu", [0, 1, 2])
CPU2x2 = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))


def placements_1d(ndim, partial=True):
    """Every single placement for a tensor of ``ndim`` dims: R, S(0..ndim-1) and P."""
    out = [Replicate()] + [Shard(d) for d in range(ndim)]
    if partial:
        out.append(Partial())
    return out


def placements_2d(ndim, partial=True):
    """Pairs of placements for a 2-D mesh where no tensor dim is sharded twice."""
    out = []
    for a, b in itertools.product(placements_1d(ndim, partial), repeat=2):
        if a.is_shard() and b.is_shard() and a.dim == b.dim:
            continue
        out.append([a, b])
    return out


def int_valued(*shape, dtype=torch.float32, low=-5, high=6, seed=0):
    """Integer-valued floats, so that sums in any order are exact."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, tuple(shape), generator=g).to(dtype)


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(tuple(shape), generator=g, dtype=torch.float64).to(dtype)


def has_partial(placements):
    return any(p.is_partial() for p in placements)


def genuine_partial(t, mesh, placements, seed=0):
    """A dtorch tensor of value ``t`` whose ``Partial()`` mesh dims hold a different integer-valued piece on
    every coordinate (not the value on coordinate 0 and zeros elsewhere, as ``from_torch`` builds them).

    The pieces are stacked along new leading dims, one per Partial mesh dim, which are sharded over those
    mesh dims and summed away: a sum over a sharded dim leaves each device its own piece, Partial. The
    other placements apply to ``t``'s own dims. With integer-valued ``t`` the pieces add up exactly.
    """
    pdims = [md for md, p in enumerate(placements) if p.is_partial()]
    if not pdims:
        return dtorch.from_torch(t, mesh, placements)
    g = torch.Generator().manual_seed(seed)
    sizes = [mesh.size(md) for md in pdims]
    pieces = torch.randint(-4, 5, tuple(sizes) + tuple(t.shape), generator=g).to(t.dtype)
    flat = pieces.reshape(-1, *t.shape)
    flat[-1] = t - flat[:-1].sum(dim=0)  # the last piece makes the sum t
    pieces = flat.reshape(pieces.shape)
    k = len(pdims)
    raw = []
    for md, p in enumerate(placements):
        if p.is_partial():
            raw.append(Shard(pdims.index(md)))
        elif p.is_shard():
            raw.append(Shard(p.dim % max(t.dim(), 1) + k))
        else:
            raw.append(p)
    x = dtorch.from_torch(pieces, mesh, raw).sum(dim=tuple(range(k)))
    assert list(x.placements) == list(placements), (x.placements, placements)
    return x
