"""Layout conveniences on top of ``Tensor.redistribute``: by mesh-dim name and like another tensor.
(``Tensor.to(mesh)`` moves to another mesh of the same shape.)

>>> mesh = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))
>>> x = dtorch.ones(4, 4, device_mesh=mesh)
>>> y = x.redistribute_by_dict({"tp": dtorch.Shard(1)}, default_placement_mode="keep")
>>> y.placements
[Replicate(), Shard(dim=1)]
"""

from __future__ import annotations

from typing import Dict, Optional, Union

from ._tensor import Tensor
from .distributed_spec import DeviceMesh, Placement, Replicate

__all__ = ["redistribute_by_dict", "redistribute_like"]

_MODES = ("raise_error", "replicate", "keep")


def redistribute_by_dict(
    self: Tensor,
    placements_dict: Dict[Union[str, int], Placement],
    device_mesh: Optional[DeviceMesh] = None,
    *,
    default_placement_mode: str = "raise_error",
) -> Tensor:
    """Redistributes with placements given per mesh dim name (or index).

    Names that the mesh does not have are ignored; mesh dims not named take
    ``default_placement_mode``: "raise_error", "replicate", or "keep" (the
    tensor's current placement on the dim of the same name, or index when the
    mesh is the tensor's own).
    """
    if default_placement_mode not in _MODES:
        raise ValueError(f"default_placement_mode must be one of {_MODES}, got {default_placement_mode!r}")
    if not isinstance(placements_dict, dict):
        raise TypeError(f"placements_dict must be a dict, not {type(placements_dict).__name__}")
    mesh = device_mesh if device_mesh is not None else self.device_mesh
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"device_mesh must be a DeviceMesh, not {type(mesh).__name__}")
    names = mesh.dim_names
    chosen: list = [None] * mesh.ndim
    for key, placement in placements_dict.items():
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise TypeError(f"placements_dict keys must be mesh dim names or indices, not {key!r}")
        if isinstance(key, int):
            if not -mesh.ndim <= key < mesh.ndim:
                raise IndexError(f"placements_dict: mesh dim {key} is out of range for a {mesh.ndim}-D mesh")
            index = key % mesh.ndim
        elif key in names:
            index = names.index(key)
        else:
            continue  # a name this mesh does not have: ignored by contract
        if not isinstance(placement, Placement):
            raise TypeError(f"placements_dict[{key!r}] must be Shard/Replicate/Partial, not {placement!r}")
        chosen[index] = placement
    current = self.placements
    own_names = self.device_mesh.dim_names
    for i, p in enumerate(chosen):
        if p is not None:
            continue
        if default_placement_mode == "replicate":
            chosen[i] = Replicate()
        elif default_placement_mode == "keep":
            if names[i] in own_names:
                chosen[i] = current[own_names.index(names[i])]
            elif mesh == self.device_mesh:
                chosen[i] = current[i]
            else:
                raise ValueError(f"default_placement_mode='keep': the tensor's mesh has no dim named {names[i]!r}")
        else:
            missing = [names[j] for j, q in enumerate(chosen) if q is None]
            raise ValueError(
                f"placements_dict names no placement for mesh dim(s) {missing}; name them or pass "
                f"default_placement_mode='replicate' or 'keep'"
            )
    return self.redistribute(device_mesh=mesh, placements=chosen)


def redistribute_like(self: Tensor, other: Tensor) -> Tensor:
    """The same value laid out like ``other`` (its mesh and placements)."""
    if not isinstance(other, Tensor):
        raise TypeError(f"redistribute_like() takes a dtorch.Tensor, not {type(other).__name__}")
    return self.redistribute(device_mesh=other.device_mesh, placements=other.placements)


Tensor.redistribute_by_dict = redistribute_by_dict
Tensor.redistribute_like = redistribute_like
