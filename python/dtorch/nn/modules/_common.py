"""What the layers share: where their parameters live (graph, mesh, dtype), the tensor-parallel
mesh dim, torch's initialisers and torch's size checks.

>>> g, mesh, dtype = _where(None, mesh, None, None)
>>> w = _uniform((8, 4), 0.5, g, mesh, [dtorch.Shard(0)], dtype)
"""

from __future__ import annotations

import numbers
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

import torch

from ... import _factories
from ...distributed_spec import DeviceMesh, Placement, Replicate
from ..parameter import Parameter


class Where(NamedTuple):
    """The graph, mesh and dtype a layer's parameters are created with."""

    graph: Any
    mesh: DeviceMesh
    dtype: torch.dtype


def _where(device: Any, device_mesh: Optional[DeviceMesh], dtype: Optional[torch.dtype], graph: Any) -> Where:
    """torch's ``device=``/``dtype=`` and dtorch's ``device_mesh=``/``graph=`` with the defaults of the
    graph (the thread's default graph unless given): its ``device_mesh_guard`` mesh else one CPU
    device, its ``dtype_guard`` dtype else torch's default dtype."""
    g = _factories._graph(graph)
    return Where(g, _factories._mesh(g, device, device_mesh), _factories._float_dtype(g, dtype))


def _check_sizes(shape: Sequence[int]) -> None:
    """torch's error for a parameter of a negative size, raised at construction as torch does."""
    for s in shape:
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(shape)}")


def _tp_index(mesh: DeviceMesh, tp_dim: Optional[str]) -> Optional[int]:
    """The index of the tensor-parallel mesh dim, or None when there is none to shard over."""
    if tp_dim is None or not mesh.has_dim_name(tp_dim):
        return None
    i = mesh.dim_name_index(tp_dim)
    return i if mesh.size(i) > 1 else None


def _placements(mesh: DeviceMesh, tp: Optional[int], on_tp: Placement) -> List[Placement]:
    """``on_tp`` on the tensor-parallel mesh dim ``tp``, Replicate on every other."""
    return [on_tp if i == tp else Replicate() for i in range(mesh.ndim)]


def _uniform(shape: Tuple[int, ...], bound: float, w: Where, placements: Sequence[Placement]) -> Parameter:
    """U(-bound, bound), as torch's kaiming/uniform initialisers draw. A Partial placement (a bias
    added once to partial sums) is drawn Replicate, then kept on the first coordinate."""
    whole = [Replicate() if p.is_partial() else p for p in placements]
    t = _factories.rand(*shape, dtype=w.dtype, device_mesh=w.mesh, placements=whole, graph=w.graph)
    t = t * (2 * bound) - bound
    if whole != list(placements):
        t = t.redistribute(placements=placements)
    return Parameter(t)


def _const(shape: Tuple[int, ...], value: float, w: Where, dtype: Optional[torch.dtype] = None) -> Parameter:
    """A replicated parameter filled with ``value`` (torch's ones/zeros initialisers)."""
    return Parameter(_factories.full(tuple(shape), value, dtype=dtype or w.dtype, device_mesh=w.mesh,
                                     placements=[Replicate()] * w.mesh.ndim, graph=w.graph))


def _with_on(t: Any, tp: Optional[int], placement: Placement) -> Any:
    """``t`` with ``placement`` on mesh dim ``tp`` (a collective unless it is already so, or a local
    slice for Replicate to Shard)."""
    if tp is None or t.placements[tp] == placement:
        return t
    pl = list(t.placements)
    pl[tp] = placement
    return t.redistribute(placements=pl)


def _shape(normalized_shape: Any) -> Tuple[int, ...]:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(int(s) for s in normalized_shape)
