"""Device meshes and placements.

A :class:`DeviceMesh` is an immutable N-D array of device ids of one device
type; a placement (:class:`Shard`, :class:`Replicate` or :class:`Partial`) says
how a tensor is laid out along one mesh dimension::

    >>> from dtorch.distributed_spec import DeviceMesh, Shard, Replicate
    >>> mesh = DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))
    >>> mesh["tp"]
    DeviceMesh('cpu', [0, 1], mesh_dim_names=('tp',))
    >>> [Shard(0), Replicate()]
    [Shard(dim=0), Replicate()]
"""

from __future__ import annotations

import itertools
import math
import operator
import sys
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch

from . import _C

__all__ = [
    "DeviceMesh",
    "init_device_mesh",
    "get_default_device_mesh",
    "assign_layers_to_stages",
    "Placement",
    "Shard",
    "Replicate",
    "Partial",
]

_DEVICE_TYPES = {"cpu": _C.DEVICE_CPU, "cuda": _C.DEVICE_CUDA}
_MAX_DIM_NAME = 31  # bytes, without the NUL (DT_MAX_DIM_NAME - 1)


# ---------------------------------------------------------------- placements


class Placement:
    """Base class of the placements. Placements are immutable values.

    Each has a short string form, accepted wherever placements are: ``"S{d}"``
    (``Shard(d)``, ``d`` may be negative), ``"R"`` and ``"P"``.

    >>> Placement.from_str("S1"), Placement.from_str("R").to_str()
    (Shard(dim=1), 'R')
    >>> x = dtorch.ones(4, 2, device_mesh=mesh, placements=["S0"])
    """

    __slots__ = ()

    @staticmethod
    def from_str(text: str) -> "Placement":
        """The placement of a short string: ``"S0"`` / ``"S-1"`` -> Shard, ``"R"`` -> Replicate, ``"P"`` -> Partial."""
        if not isinstance(text, str):
            raise TypeError(f"Placement.from_str() takes a str such as 'S0', 'R' or 'P', not {type(text).__name__}")
        t = text.strip()
        if t == "R":
            return Replicate()
        if t == "P":
            return Partial()
        if len(t) > 1 and t[0] == "S":
            digits = t[1:]
            if digits.lstrip("-").isdigit() and digits.count("-") <= 1 and not digits.endswith("-"):
                return Shard(int(digits))
        raise ValueError(f"{text!r} is not a placement: expected 'S<dim>' (e.g. 'S0', 'S-1'), 'R' or 'P'")

    def to_str(self) -> str:
        """The short string form: ``"S0"``, ``"R"`` or ``"P"``."""
        raise NotImplementedError

    def is_shard(self, dim: Optional[int] = None) -> bool:
        """True for ``Shard`` (of ``dim`` when given)."""
        return False

    def is_replicate(self) -> bool:
        """True for ``Replicate()``."""
        return False

    def is_partial(self) -> bool:
        """True for ``Partial()``."""
        return False

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} is immutable")


class Shard(Placement):
    """Split tensor dimension ``dim`` across a mesh dimension (``torch.chunk`` sizes).

    >>> Shard(0), Shard(0) == Shard(0), Shard(1).is_shard(1)
    (Shard(dim=0), True, True)
    """

    __slots__ = ("dim",)

    def __init__(self, dim: int) -> None:
        if isinstance(dim, bool):
            raise TypeError("Shard(dim) takes an int, not bool")
        if not isinstance(dim, int):
            try:
                dim = int(dim.__index__())  # numpy / torch integers
            except (AttributeError, TypeError):
                raise TypeError(f"Shard(dim) takes an int, not {type(dim).__name__}") from None
        object.__setattr__(self, "dim", int(dim))

    def is_shard(self, dim: Optional[int] = None) -> bool:
        return dim is None or dim == self.dim

    def get_shard_index(self) -> int:
        """The tensor dimension this placement splits (``Shard(1).get_shard_index() == 1``)."""
        return self.dim

    def to_str(self) -> str:
        return f"S{self.dim}"

    def __eq__(self, other) -> bool:
        if isinstance(other, Shard):
            return self.dim == other.dim
        return NotImplemented if not isinstance(other, Placement) else False

    def __hash__(self) -> int:
        return hash(("Shard", self.dim))

    def __repr__(self) -> str:
        return f"Shard(dim={self.dim})"

    def __reduce__(self):
        return (Shard, (self.dim,))


class Replicate(Placement):
    """A full copy of the tensor on every device of the mesh dimension.

    >>> Replicate() == Replicate()
    True
    """

    __slots__ = ()

    def is_replicate(self) -> bool:
        return True

    def to_str(self) -> str:
        return "R"

    def __eq__(self, other) -> bool:
        if isinstance(other, Replicate):
            return True
        return NotImplemented if not isinstance(other, Placement) else False

    def __hash__(self) -> int:
        return hash("Replicate")

    def __repr__(self) -> str:
        return "Replicate()"

    def __reduce__(self):
        return (Replicate, ())


class Partial(Placement):
    """A pending sum: the tensor is the sum of the values on the devices of the mesh dimension.

    >>> Partial(), Partial().is_partial()
    (Partial(), True)
    """

    __slots__ = ()

    def __init__(self, reduce_op: str = "sum") -> None:
        if reduce_op != "sum":
            raise NotImplementedError(f"Partial(reduce_op={reduce_op!r}): only 'sum' is supported")

    def is_partial(self) -> bool:
        return True

    def to_str(self) -> str:
        return "P"

    @property
    def reduce_op(self) -> str:
        return "sum"

    def __eq__(self, other) -> bool:
        if isinstance(other, Partial):
            return True
        return NotImplemented if not isinstance(other, Placement) else False

    def __hash__(self) -> int:
        return hash("Partial")

    def __repr__(self) -> str:
        return "Partial()"

    def __reduce__(self):
        return (Partial, ())


_KIND_REPLICATE = _C.PLACEMENT_REPLICATE
_KIND_SHARD = _C.PLACEMENT_SHARD
_KIND_PARTIAL = _C.PLACEMENT_PARTIAL


def _as_placement(p, what: str = "placement") -> Placement:
    """A Placement, or the placement of a short string ("S0", "R", "P")."""
    if isinstance(p, Placement):
        return p
    if isinstance(p, str):
        try:
            return Placement.from_str(p)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
    raise TypeError(f"{what} must be Shard(dim), Replicate(), Partial() or a string 'S<dim>'/'R'/'P', "
                    f"not {type(p).__name__}")


def _placements_to_raw(placements, mesh: "DeviceMesh", ndim: Optional[int], what: str = "placements"):
    """Validates ``placements`` for a tensor of ``ndim`` dims on ``mesh``.

    Returns a tuple of (kind, dim) pairs for the C layer (shard dims
    normalised), or None when ``placements`` is None. Raises ValueError or
    TypeError naming the argument.
    """
    if placements is None:
        return None
    if isinstance(placements, (Placement, str)):
        raise TypeError(f"{what} must be a list with one placement per mesh dimension, e.g. [{placements!r}]")
    try:
        placements = list(placements)
    except TypeError:
        raise TypeError(f"{what} must be a list of Shard/Replicate/Partial, not {type(placements).__name__}") from None
    n, m = len(placements), mesh.ndim
    if n != m:
        raise ValueError(
            f"{what} has {n} {'entry' if n == 1 else 'entries'} but the mesh has {m} "
            f"dimension{'' if m == 1 else 's'}: give one placement per mesh dimension"
        )
    raw = []
    for i, p in enumerate(placements):
        if isinstance(p, str):
            p = _as_placement(p, f"{what}[{i}]")
        if isinstance(p, Shard):
            d = p.dim
            if ndim is not None:
                if not -ndim <= d < ndim:
                    if ndim == 0:
                        rng = "a 0-d tensor cannot be sharded"
                    else:
                        rng = f"a shard dim must be in [{-ndim}, {ndim - 1}]"
                    raise ValueError(
                        f"{what}[{i}] is Shard(dim={d}) but the tensor has {ndim} "
                        f"dimension{'' if ndim == 1 else 's'} ({rng})"
                    )
                if d < 0:
                    d += ndim
            raw.append((_KIND_SHARD, d))
        elif isinstance(p, Replicate):
            raw.append((_KIND_REPLICATE, 0))
        elif isinstance(p, Partial):
            raw.append((_KIND_PARTIAL, 0))
        else:
            raise TypeError(f"{what}[{i}] must be Shard(dim), Replicate(), Partial() or 'S<dim>'/'R'/'P', "
                            f"not {type(p).__name__}")
    return tuple(raw)


# ---------------------------------------------------------------- meshes


def _nest(ids: Sequence[int], shape: Sequence[int]):
    """Row-major ``ids`` as nested lists of ``shape``."""
    if len(shape) <= 1:
        return list(ids)
    step = len(ids) // shape[0] if shape[0] else 0
    return [_nest(ids[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _default_names(ndim: int) -> Tuple[str, ...]:
    return tuple(f"dim{i}" for i in range(ndim))


def _parse_device(device) -> Tuple[str, Optional[int]]:
    if isinstance(device, torch.device):
        return device.type, device.index
    if not isinstance(device, str):
        raise TypeError(f"device_type must be a str such as 'cpu' or 'cuda:1', not {type(device).__name__}")
    try:
        d = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"device_type {device!r} is not a device: {e}") from None
    return d.type, d.index


def _parse_mesh(mesh) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """(shape, row-major ids) of a nested list / tensor / array of ids."""
    if isinstance(mesh, torch.Tensor):
        t = mesh.detach().cpu()
    else:
        try:
            t = torch.as_tensor(mesh)
        except (ValueError, TypeError, RuntimeError) as e:
            raise ValueError(f"mesh must be a (nested) list or tensor of device ids: {e}") from None
    if t.numel() == 0:
        raise ValueError(f"mesh must hold at least one device id, got shape {list(t.shape)}")
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"mesh must hold integer device ids, got dtype {t.dtype}")
    if t.dim() == 0:
        t = t.reshape(1)
    return tuple(t.shape), tuple(int(v) for v in t.reshape(-1).tolist())


# Ids of worker nodes lost and replaced (MainNode.replace): old id -> its new home's id, per
# device type. A mesh built on an old id is built on the new one.
_REDIRECT: Dict[str, Dict[int, int]] = {"cpu": {}, "cuda": {}}


def _private_cluster() -> bool:
    """Whether this process's cluster is the per-device-per-process graphs' own (dtorch._processes):
    ordinary graphs keep every device id in this process then."""
    procs = sys.modules.get("dtorch._processes")  # not imported: no such graph was ever made
    return procs is not None and procs.private()


def _check_cluster_ids(ids, kind: str = "cpu") -> None:
    """Once this process is a cluster's main node (``MainNode.set_address``), device ids of each
    type are global and node-major (docs/cluster.md): the main node's own first, then each worker
    node's (CPU devices as offered; CUDA devices as each process's CUDA backend sees them, device
    virtualisation included). A mesh may span nodes (its collectives exchange data between them),
    and ids past the last node's are a ValueError; without a cluster every CPU id is a local
    virtual CPU device and CUDA ids are this machine's."""
    if _C._cluster_address() is None:
        return
    if _private_cluster():
        return  # the per-device-per-process graphs' own cluster: only they use it, and check ids (graph.c)
    nodes = _C._cluster_nodes()
    key = "cuda_devices" if kind == "cuda" else "cpu_devices"
    first = "first_cuda_device_id" if kind == "cuda" else "first_device_id"
    total = _C._cluster_info()[key]
    added = sum(n[key] for n in nodes)
    local = total - added
    name = "CUDA" if kind == "cuda" else "CPU"
    for i in ids:
        gone = [n for n in nodes if n["state"] == "removed" and n[first] <= i < n[first] + n[key]]
        if gone:  # MainNode.remove(): its ids stay numbered, unusable
            raise ValueError(f"{name} device {i} belonged to worker node {gone[0]['index']}, which was removed "
                             f"from the cluster (MainNode.remove); its ids {gone[0][first]}.."
                             f"{gone[0][first] + gone[0][key] - 1} are no longer usable")
        if i < local or any(n[first] <= i < n[first] + n[key] for n in nodes):
            continue
        raise ValueError(f"{name} device {i} does not exist in this cluster: the main node has {local} "
                         f"{name} devices" + (f" (ids 0..{local - 1})" if local else "") +
                         f" and {len(nodes)} worker nodes add {added}" +
                         (f" (ids {local}..{total - 1})" if added else "") +
                         ("; a worker node offers CUDA devices with dtorch-node --cuda-devices=N"
                          if kind == "cuda" and not added else ""))


class DeviceMesh:
    """An immutable N-D array of device ids of one device type, with dimension names.

    >>> mesh = DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))
    >>> mesh.shape, mesh.size(), mesh["tp"], mesh.unbind("dp")[1]
    ((2, 2), 4, DeviceMesh('cpu', [0, 1], mesh_dim_names=('tp',)), DeviceMesh('cpu', [2, 3], mesh_dim_names=('tp',)))
    >>> DeviceMesh("cuda:1")  # one device
    DeviceMesh('cuda', [1])
    """

    __slots__ = ("_handle", "_device_type", "_shape", "_ids", "_names", "_names_given", "_mesh_tensor", "__weakref__")

    def __init__(self, device_type: Union[str, torch.device], mesh=None, mesh_dim_names: Optional[Sequence[str]] = None):
        dtype_name, index = _parse_device(device_type)
        if dtype_name not in _DEVICE_TYPES:
            raise ValueError(f"device_type must be 'cpu' or 'cuda', got {device_type!r}")
        if mesh is None:
            shape, ids = (1,), (index if index is not None else 0,)
        else:
            if index is not None:
                raise ValueError(
                    f"device_type {device_type!r} names one device but a mesh was given too: "
                    f"pass DeviceMesh({dtype_name!r}, mesh) or DeviceMesh({str(device_type)!r}) alone"
                )
            shape, ids = _parse_mesh(mesh)
        if len(ids) == 0:
            raise ValueError(f"mesh must hold at least one device id, got shape {list(shape)}")
        if len(shape) > _C.MAX_MESH_NDIM:
            raise ValueError(f"mesh has {len(shape)} dimensions; dtorch supports at most {_C.MAX_MESH_NDIM}")
        negative = [i for i in ids if i < 0]
        if negative:
            raise ValueError(f"mesh has negative device ids {negative}: device ids must be >= 0")
        redirect = _REDIRECT[dtype_name]
        if redirect:  # a replaced worker node's ids: their new home (MainNode.replace)
            ids = tuple(redirect.get(i, i) for i in ids)
        if len(set(ids)) != len(ids):
            seen, dups = set(), []
            for i in ids:
                if i in seen and i not in dups:
                    dups.append(i)
                seen.add(i)
            raise ValueError(
                f"mesh has duplicate device ids {dups} in {_nest(list(ids), shape)}: each device may appear once"
            )
        _check_cluster_ids(ids, dtype_name)
        names = self._check_names(mesh_dim_names, len(shape))
        handle = _C.Mesh(_DEVICE_TYPES[dtype_name], shape, ids, names)
        self._init(handle, dtype_name, shape, ids, handle.dim_names)

    @staticmethod
    def _check_names(names, ndim: int) -> Optional[Tuple[str, ...]]:
        if names is None:
            return None
        if isinstance(names, str):
            names = (names,)
        names = tuple(names)
        if len(names) != ndim:
            raise ValueError(
                f"mesh_dim_names has {len(names)} name{'' if len(names) == 1 else 's'} "
                f"but the mesh has {ndim} dimension{'' if ndim == 1 else 's'}"
            )
        for n in names:
            if not isinstance(n, str):
                raise TypeError(f"mesh_dim_names must hold str, not {type(n).__name__}")
            if not n or len(n.encode()) > _MAX_DIM_NAME:
                raise ValueError(f"mesh_dim_names: {n!r} must be non-empty and at most {_MAX_DIM_NAME} bytes")
        if len(set(names)) != len(names):
            raise ValueError(f"mesh_dim_names has duplicate names: {names}")
        return names

    def _init(self, handle, device_type: str, shape, ids, names) -> None:
        set_ = object.__setattr__
        set_(self, "_handle", handle)
        set_(self, "_device_type", device_type)
        set_(self, "_shape", tuple(shape))
        set_(self, "_ids", tuple(ids))
        set_(self, "_names", tuple(names))
        set_(self, "_names_given", tuple(names) != _default_names(len(shape)))
        set_(self, "_mesh_tensor", None)

    @classmethod
    def _from_handle(cls, handle) -> "DeviceMesh":
        """A DeviceMesh over an existing ``_C.Mesh`` handle (used for op results)."""
        self = cls.__new__(cls)
        dtype_name = "cpu" if handle.device_type == _C.DEVICE_CPU else "cuda"
        self._init(handle, dtype_name, handle.shape, handle.ids, handle.dim_names)
        return self

    def _sub(self, shape, ids, names) -> "DeviceMesh":
        """A new mesh of the same device type; names that are all defaults are not kept."""
        names = tuple(names)
        if names == _default_names(len(shape)):
            names = None
        return DeviceMesh(self._device_type, _nest(list(ids), shape), mesh_dim_names=names)

    def __setattr__(self, name, value):
        raise AttributeError("DeviceMesh is immutable")

    # ------------------------------------------------------------ queries

    @property
    def device_type(self) -> str:
        """'cpu' or 'cuda'."""
        return self._device_type

    @property
    def mesh(self) -> torch.Tensor:
        """The device ids as an int64 tensor of the mesh's shape."""
        if self._mesh_tensor is None:
            object.__setattr__(self, "_mesh_tensor", torch.tensor(self._ids, dtype=torch.int64).reshape(self._shape))
        return self._mesh_tensor

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def shape(self) -> Tuple[int, ...]:
        return self._shape

    def size(self, dim: Optional[int] = None) -> int:
        """The number of devices, or the size of mesh dimension ``dim``."""
        if dim is None:
            return len(self._ids)
        return self._shape[self._dim_index(dim)]

    @property
    def dim_names(self) -> Tuple[str, ...]:
        """One name per dimension ("dim0", "dim1", ... when none were given)."""
        return self._names

    @property
    def mesh_dim_names(self) -> Optional[Tuple[str, ...]]:
        """The names given at construction (torch's attribute), or None."""
        return self._names if self._names_given else None

    @property
    def device_ids(self) -> Tuple[int, ...]:
        """The device ids in row-major order."""
        return self._ids

    def has_dim_name(self, name: str) -> bool:
        return name in self._names

    def dim_name_index(self, name: str) -> int:
        """The index of the dimension called ``name`` (ValueError when absent)."""
        try:
            return self._names.index(name)
        except ValueError:
            raise ValueError(f"the mesh has no dimension named {name!r}; its dimensions are {self._names}") from None

    def _dim_index(self, dim: Union[int, str]) -> int:
        if isinstance(dim, str):
            return self.dim_name_index(dim)
        n = self.ndim
        if not -n <= dim < n:
            raise IndexError(f"mesh dimension {dim} is out of range for a mesh of {n} dimension{'' if n == 1 else 's'}")
        return dim % n

    @property
    def is_distributed(self) -> bool:
        """True when the mesh has more than one device."""
        return len(self._ids) > 1

    def check_all_dim_names_in_set(self, names: Iterable[str]) -> bool:
        """Whether every dimension name of the mesh is one of ``names``.

        >>> mesh = DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))
        >>> mesh.check_all_dim_names_in_set({"dp", "tp", "pp"}), mesh.check_all_dim_names_in_set({"tp"})
        (True, False)
        True
        """
        if isinstance(names, str):
            names = (names,)
        allowed = set(names)
        return all(n in allowed for n in self._names)

    def to_device(self) -> torch.device:
        """The torch.device of a one-device mesh (ValueError for a larger mesh: see ``first_device``).

        >>> DeviceMesh("cuda:1").to_device()
        device(type='cuda', index=1)
        """
        if len(self._ids) != 1:
            raise ValueError(f"to_device() needs a one-device mesh, but {self!r} has {len(self._ids)} devices; "
                             f"use first_device() for its first one")
        return self.first_device()

    def first_device(self) -> torch.device:
        """The torch.device of the mesh's first device (``cpu`` for CPU meshes)."""
        if self._device_type == "cpu":
            return torch.device("cpu")
        return torch.device("cuda", self._ids[0])

    # ------------------------------------------------------------ sub-meshes

    def __getitem__(self, names: Union[str, Sequence[str]]) -> "DeviceMesh":
        """The sub-mesh over the named dims, at the first device's coordinates elsewhere.

        >>> DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))["dp"]
        DeviceMesh('cpu', [0, 2], mesh_dim_names=('dp',))
        """
        if isinstance(names, str):
            names = (names,)
        names = tuple(names)
        if not names or not all(isinstance(n, str) for n in names):
            raise TypeError("a mesh is indexed by a dimension name or a tuple of names")
        for n in names:
            if n not in self._names:
                raise KeyError(f"the mesh has no dimension named {n!r}; its dimensions are {self._names}")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate dimension names in {names}")
        dims = [self._names.index(n) for n in names]
        index = tuple(slice(None) if d in dims else 0 for d in range(self.ndim))
        kept = sorted(dims)
        sub = self.mesh[index].permute(*[kept.index(d) for d in dims])
        return self._sub(tuple(sub.shape), sub.reshape(-1).tolist(), names)

    def unbind(self, dims: Union[str, int, Iterable[Union[str, int]]]) -> List["DeviceMesh"]:
        """One sub-mesh over the remaining dims per index of the removed ``dims``.

        Names missing from the mesh are ignored; when none is left the result is ``[self]``.

        >>> DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("pp", "tp")).unbind("pp")
        [DeviceMesh('cpu', [0, 1], mesh_dim_names=('tp',)), DeviceMesh('cpu', [2, 3], mesh_dim_names=('tp',))]
        """
        if isinstance(dims, (str, int)):
            dims = [dims]
        removed = []
        for d in dims:
            if isinstance(d, str):
                if d in self._names:
                    removed.append(self._names.index(d))
            else:
                removed.append(self._dim_index(d))
        removed = sorted(set(removed))
        if not removed:
            return [self]
        kept = [d for d in range(self.ndim) if d not in removed]
        out = []
        t = self.mesh
        for coords in itertools.product(*[range(self._shape[d]) for d in removed]):
            index = [slice(None)] * self.ndim
            for d, c in zip(removed, coords):
                index[d] = c
            sub = t[tuple(index)]
            if kept:
                out.append(self._sub(tuple(sub.shape), sub.reshape(-1).tolist(), [self._names[d] for d in kept]))
            else:
                out.append(DeviceMesh(self._device_type, [int(sub)]))
        return out

    # ------------------------------------------------------------ value semantics

    def _key(self):
        return (self._device_type, self._shape, self._ids, self._names)

    def __eq__(self, other) -> bool:
        if not isinstance(other, DeviceMesh):
            return NotImplemented
        return self is other or self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        s = f"DeviceMesh({self._device_type!r}, {_nest(list(self._ids), self._shape)!r}"
        if self._names_given:
            s += f", mesh_dim_names={self._names!r}"
        return s + ")"

    def __reduce__(self):
        return (DeviceMesh, (self._device_type, _nest(list(self._ids), self._shape), self.mesh_dim_names))


def init_device_mesh(
    device_type: str, mesh_shape: Union[int, Sequence[int]], mesh_dim_names: Optional[Sequence[str]] = None
) -> DeviceMesh:
    """A mesh of ids ``0 .. prod(mesh_shape) - 1`` in row-major order.

    >>> init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    DeviceMesh('cpu', [[0, 1], [2, 3]], mesh_dim_names=('dp', 'tp'))
    """
    given = mesh_shape
    if isinstance(mesh_shape, int) and not isinstance(mesh_shape, bool):
        mesh_shape = (mesh_shape,)
    try:
        if isinstance(mesh_shape, (str, bytes)) or any(isinstance(s, bool) for s in mesh_shape):
            raise TypeError
        mesh_shape = tuple(operator.index(s) for s in mesh_shape)
    except TypeError:
        raise TypeError(f"init_device_mesh(): mesh_shape must be an int or a tuple of ints, got {given!r}") from None
    if not mesh_shape or any(s < 1 for s in mesh_shape):
        raise ValueError(f"mesh_shape must be non-empty with sizes >= 1, got {mesh_shape}")
    n = math.prod(mesh_shape)
    return DeviceMesh(device_type, _nest(list(range(n)), mesh_shape), mesh_dim_names=mesh_dim_names)


def get_default_device_mesh() -> DeviceMesh:
    """The mesh factories use when given none: the calling thread's default graph's
    ``default_device_mesh`` (see ``device_mesh_guard``), else one CPU device.

    >>> get_default_device_mesh()
    DeviceMesh('cpu', [0])
    """
    from ._factories import _mesh  # late: the factories import this module

    return _mesh(_default_graph(), None, None)


def _default_graph():
    from ._graph import Graph  # late: graphs import this module

    return Graph.default_graph()


def assign_layers_to_stages(num_layers: int, num_stages: int) -> List[int]:
    """The pipeline stage of each of ``num_layers`` layers over ``num_stages`` stages.

    Stages get consecutive layers, as evenly as possible; earlier stages take the extra ones.

    >>> assign_layers_to_stages(5, 2)
    [0, 0, 0, 1, 1]
    """
    for name, v in (("num_layers", num_layers), ("num_stages", num_stages)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"assign_layers_to_stages(): {name} must be an int, not {type(v).__name__}")
    if num_layers < 0:
        raise ValueError(f"assign_layers_to_stages(): num_layers must be >= 0, got {num_layers}")
    if num_stages < 1:
        raise ValueError(f"assign_layers_to_stages(): num_stages must be >= 1, got {num_stages}")
    base, extra = divmod(num_layers, num_stages)
    out: List[int] = []
    for stage in range(num_stages):
        out += [stage] * (base + (1 if stage < extra else 0))
    return out
