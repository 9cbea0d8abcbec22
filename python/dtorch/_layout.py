"""Layout conveniences on top of ``Tensor.redistribute``: by mesh-dim name and like another tensor.
(``Tensor.to(mesh)`` moves to another mesh of the same shape.)

>>> mesh = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))
>>> x = dtorch.ones(4, 4, device_mesh=mesh)
>>> y = x.redistribute_by_dict(mesh, {"tp": dtorch.Shard(1)}, default_placement_mode="keep")
>>> y.placements
[Replicate(), Shard(dim=1)]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Union

from ._C import TensorBase as _TensorBase

if TYPE_CHECKING:  # the class is built from the method table (_methods.py), after this module
    from ._tensor import Tensor
from .distributed_spec import DeviceMesh, Placement, Replicate, Shard, _as_placement

__all__ = ["redistribute_by_dict", "redistribute_like", "tensors_redistribute_by_dict"]

_MODES = ("raise_error", "replicate", "keep")


def _by_dict_placements(self: Tensor, mesh: DeviceMesh, placements_dict: Dict[Union[str, int], Any],
                        default_placement_mode: str, convert_shard_size_one_to_replicate: bool) -> list:
    """One placement per dim of ``mesh`` for ``self`` from a dict keyed by dim names or indices."""
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
        chosen[index] = _as_placement(placement, f"placements_dict[{key!r}]")
    current = self.placements
    own_names = self.device_mesh.dim_names
    for i, p in enumerate(chosen):
        if p is not None:
            continue
        if mesh.shape[i] == 1 or default_placement_mode == "replicate":
            # A mesh dim of one device holds every tensor whole: Replicate, whatever the mode.
            chosen[i] = Replicate()
        elif default_placement_mode == "keep":
            if names[i] in own_names:
                chosen[i] = current[own_names.index(names[i])]
            elif mesh == self.device_mesh:
                chosen[i] = current[i]
            else:
                raise ValueError(f"default_placement_mode='keep': the tensor's mesh has no dim named {names[i]!r}")
        else:
            missing = [names[j] for j, q in enumerate(chosen) if q is None and mesh.shape[j] != 1]
            raise ValueError(
                f"placements_dict names no placement for mesh dim(s) {missing}; name them or pass "
                f"default_placement_mode='replicate' or 'keep'"
            )
    if convert_shard_size_one_to_replicate:
        ndim = self.ndim
        for i, p in enumerate(chosen):
            if isinstance(p, Shard) and -ndim <= p.dim < ndim and self.shape[p.dim] == 1:
                chosen[i] = Replicate()
    return chosen


def redistribute_by_dict(
    self: Tensor,
    device_mesh: Optional[DeviceMesh] = None,
    placements_dict: Optional[Dict[Union[str, int], Placement]] = None,
    *,
    default_placement_mode: str = "raise_error",
    convert_shard_size_one_to_replicate: bool = True,
) -> Tensor:
    """Redistributes with placements given per mesh dim name (or index), onto ``device_mesh``
    (default: the tensor's mesh).

    Names that the mesh does not have are ignored; a mesh dim of size 1 (a one-device mesh
    above all, such as the stages ``mesh.unbind("pp")`` makes) is Replicate; other mesh dims
    not named take ``default_placement_mode``: "raise_error", "replicate", or "keep" (the
    tensor's current placement on the dim of the same name, or index when the mesh is the
    tensor's own). With ``convert_shard_size_one_to_replicate`` a Shard of a tensor dim of
    size 1 becomes Replicate. Values may be placement strings ("S0", "R", "P"). The dict may
    also come first (``x.redistribute_by_dict({"tp": Shard(0)}, mesh)``).

    >>> y = x.redistribute_by_dict(mesh, {"dp": "R", "tp": "S1"})
    """
    if isinstance(device_mesh, dict) and (placements_dict is None or isinstance(placements_dict, DeviceMesh)):
        device_mesh, placements_dict = placements_dict, device_mesh
    if default_placement_mode not in _MODES:
        raise ValueError(f"default_placement_mode must be one of {_MODES}, got {default_placement_mode!r}")
    if placements_dict is None:
        placements_dict = {}
    if not isinstance(placements_dict, dict):
        raise TypeError(f"placements_dict must be a dict, not {type(placements_dict).__name__}")
    mesh = device_mesh if device_mesh is not None else self.device_mesh
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"device_mesh must be a DeviceMesh, not {type(mesh).__name__}")
    chosen = _by_dict_placements(self, mesh, placements_dict, default_placement_mode,
                                 convert_shard_size_one_to_replicate)
    return self.redistribute(device_mesh=mesh, placements=chosen)


def tensors_redistribute_by_dict(tensors: Any, device_mesh: Optional[DeviceMesh] = None,
                                 placements_dict: Optional[Dict[Union[str, int], Placement]] = None,
                                 **kwargs: Any) -> Any:
    """``redistribute_by_dict`` on every dtorch tensor of a list, tuple or dict (or on one tensor);
    other entries are returned as they are. Takes the same keywords.

    >>> q, k, v = dtorch.tensors_redistribute_by_dict([q, k, v], mesh, {"tp": dtorch.Shard(1)})
    """
    if isinstance(tensors, _TensorBase):
        return tensors.redistribute_by_dict(device_mesh, placements_dict, **kwargs)
    if isinstance(tensors, dict):
        return {k: tensors_redistribute_by_dict(v, device_mesh, placements_dict, **kwargs)
                for k, v in tensors.items()}
    if isinstance(tensors, (list, tuple)):
        out = [tensors_redistribute_by_dict(t, device_mesh, placements_dict, **kwargs) for t in tensors]
        if isinstance(tensors, list):
            return out
        return type(tensors)(*out) if hasattr(tensors, "_fields") else tuple(out)  # namedtuples keep their type
    return tensors


def redistribute_like(self: Tensor, other: Tensor) -> Tensor:
    """The same value laid out like ``other`` (its mesh and placements)."""
    if not isinstance(other, _TensorBase):
        raise TypeError(f"redistribute_like() takes a dtorch.Tensor, not {type(other).__name__}")
    return self.redistribute(device_mesh=other.device_mesh, placements=other.placements)

