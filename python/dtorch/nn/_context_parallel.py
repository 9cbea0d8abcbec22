"""Context-parallel attention: ``scaled_dot_product_attention`` on sequence-sharded inputs.

``F.scaled_dot_product_attention`` comes here when a query, key or value is sharded on its sequence
dim (-2) along a mesh dim that ``SdpaOption`` names as context-parallel:

- **Ulysses** (``SdpaOption.ulysess_cp_dim``): on that mesh dim every input goes from
  ``Shard(seq)`` to ``Shard(heads)`` (an all-to-all), each device runs ordinary attention over the
  whole sequence for its heads, and the output goes back to ``Shard(seq)`` (the second all-to-all).
  The heads must divide by the mesh dim's size. The values are torch's: each device's attention
  sees exactly the rows torch's does.

- **Ring** (``SdpaOption.ring_cp_dim``): ``dt_sdpa_ring`` (src/ops/ring_attention.c). Each device
  attends its query block to one key/value block at a time and merges the partial results by
  log-sum-exp, while the blocks move one step around the ring on the communication stream; key and
  value are never gathered. Causal blocks wholly in a device's future are skipped. No mask, no
  dropout (NotImplementedError at the call).
- **Both**: Ulysses on its mesh dim outside, the ring on its own inside.

Other mesh dims keep what the inputs have: data parallel (batch sharded), tensor parallel (heads
sharded: Ulysses then splits each tensor-parallel group of heads further) and pipeline stages
(each stage its own mesh) combine with it.
"""

from __future__ import annotations

from typing import List, Optional

from .. import _C
from ..distributed_spec import Replicate, Shard

_Tensor = _C.TensorBase


def _mesh_dim(mesh, name: Optional[str]) -> int:
    """The index of mesh dim ``name`` when it exists with more than one device, else -1."""
    names = mesh.mesh_dim_names or ()
    if name is None or name not in names:
        return -1
    i = names.index(name)
    return i if mesh.shape[i] > 1 else -1


def _sharded_on(t, mesh_dim: int, dim: int) -> bool:
    p = t.placements[mesh_dim]
    return p.is_shard() and p.dim == dim


def cp_dims(query, key, value, option) -> tuple:
    """(ulysses mesh dim, ring mesh dim) that the inputs' sequence sharding asks for; -1 for none."""
    mesh = query.device_mesh
    out = []
    for name in (option.ulysess_cp_dim, option.ring_cp_dim):
        md = _mesh_dim(mesh, name)
        if md >= 0 and not any(_sharded_on(t, md, t.ndim - 2) for t in (query, key, value)):
            md = -1
        out.append(md)
    return tuple(out)


def _with(placements, mesh_dim: int, p) -> List:
    pl = list(placements)
    pl[mesh_dim] = p
    return pl


def ulysses(sdpa, query, key, value, attn_mask, mesh_dim: int, name: str):
    """Ulysses attention along ``mesh_dim``; ``sdpa(q, k, v, mask)`` is the local attention."""
    n = query.device_mesh.shape[mesh_dim]
    for what, t in (("query", query), ("key", key), ("value", value)):
        heads = t.shape[-3]
        if heads % n != 0:
            raise ValueError(
                f"scaled_dot_product_attention(): Ulysses attention on mesh dim '{name}' (size {n}) needs the "
                f"number of heads to divide by {n}, but the {what} has {heads} heads; use ring attention "
                f"(SdpaOption.ring_cp_dim) or a mesh dim whose size divides the heads")
    if query.device_mesh != key.device_mesh or query.device_mesh != value.device_mesh:
        raise ValueError("scaled_dot_product_attention(): query, key and value must be on the same mesh")

    def to_heads(t):
        return t.redistribute(placements=_with(t.placements, mesh_dim, Shard(t.ndim - 3)))

    q, k, v = to_heads(query), to_heads(key), to_heads(value)
    if attn_mask is not None and not attn_mask.placements[mesh_dim].is_replicate():
        # Each device attends over the whole sequence: it needs the whole mask (along this mesh dim).
        attn_mask = attn_mask.redistribute(placements=_with(attn_mask.placements, mesh_dim, Replicate()))
    out = sdpa(q, k, v, attn_mask)
    # Back to the query's placement on this mesh dim (its sequence shard, as a rule).
    return out.redistribute(placements=_with(out.placements, mesh_dim, query.placements[mesh_dim]))


def ring(query, key, value, attn_mask, dropout_p: float, is_causal: bool, scale, mesh_dim: int, name: str):
    """Ring attention along ``mesh_dim`` (all three brought to the query's placements, sequence-sharded
    on the ring); the output comes back in the query's placements."""
    if attn_mask is not None:
        raise NotImplementedError(
            f"scaled_dot_product_attention(): ring attention (mesh dim '{name}') does not take attn_mask; "
            "use is_causal=True, Ulysses attention (SdpaOption.ulysess_cp_dim), or redistribute the sequence "
            "to Replicate() first")
    if dropout_p > 0.0:
        raise NotImplementedError(
            f"scaled_dot_product_attention(): ring attention (mesh dim '{name}') does not take dropout_p > 0")
    want = _with(query.placements, mesh_dim, Shard(query.ndim - 2))
    q = query if list(query.placements) == want else query.redistribute(placements=want)
    k = key if list(key.placements) == want else key.redistribute(placements=want)
    v = value if list(value.placements) == want else value.redistribute(placements=want)
    out = _C._nn_sdpa_ring(q, k, v, is_causal, scale, mesh_dim)
    if list(out.placements) != list(query.placements):
        out = out.redistribute(placements=list(query.placements))
    return out


def check_placements(query, key, value, ulysses_dim: int, ring_dim: int, option) -> None:
    """PlacementError, before anything is recorded, for a shard of the sequence dim (-2) along a mesh
    dim that is not context-parallel, or of the embedding dim (-1) anywhere: neither can be attended
    locally, and the forms below would move the other shards first and fail half-way."""
    mesh = query.device_mesh
    names = mesh.mesh_dim_names or ()
    for what, t in (("query", query), ("key", key), ("value", value)):
        for md, p in enumerate(t.placements):
            if mesh.shape[md] == 1 or not p.is_shard():
                continue
            d = p.dim % t.ndim
            name = names[md] if md < len(names) else str(md)
            if d == t.ndim - 1:
                raise _C.PlacementError(
                    f"scaled_dot_product_attention(): the {what} is sharded on its embedding dim (-1) along mesh "
                    f"dim {md} ('{name}'); redistribute it to Replicate() there")
            if d == t.ndim - 2 and md not in (ulysses_dim, ring_dim):
                raise _C.PlacementError(
                    f"scaled_dot_product_attention(): the {what} is sharded on its sequence dim (-2) along mesh dim "
                    f"{md} ('{name}'), which is not a context-parallel mesh dim (SdpaOption: ulysess_cp_dim="
                    f"{option.ulysess_cp_dim!r}, ring_cp_dim={option.ring_cp_dim!r}); redistribute it to "
                    f"Replicate() there or name that mesh dim in sdpa_option")


def attention(query, key, value, attn_mask, dropout_p, is_causal, scale, ulysses_dim: int, ring_dim: int,
              option):
    """Context-parallel attention: Ulysses on ``ulysses_dim`` (>= 0) outside, the ring on ``ring_dim``
    (>= 0) inside, plain attention where either is -1."""
    check_placements(query, key, value, ulysses_dim, ring_dim, option)

    def local(q, k, v, m):
        if ring_dim >= 0:
            return ring(q, k, v, m, dropout_p, is_causal, scale, ring_dim, option.ring_cp_dim)
        return _C._nn_sdpa(q, k, v, m, dropout_p, is_causal, scale)

    if ulysses_dim >= 0:
        return ulysses(local, query, key, value, attn_mask, ulysses_dim, option.ulysess_cp_dim)
    return local(query, key, value, attn_mask)
