"""``dtorch.local_map``: the user's own torch code on each device's local shard, run by that
device's worker, and ``dtorch.library.custom_op``: such code as a named operator with a sharding
rule.

``local_map(func, out_placements, in_placements=None, device_mesh=None, *, redistribute_inputs=False,
out_meta=None)`` has torch's name and meaning (``torch.distributed.tensor.experimental.local_map``):
it returns a function that, called with dtorch tensors, calls ``func`` on every device with that
device's local pieces as ``torch.Tensor`` s (a Partial input's addend, a Shard's block, a Replicate's
copy) and the other arguments as given, and makes its result a dtorch tensor with
``out_placements``. The call records one node per output and returns at once: ``func`` runs later
on the device's worker thread (the torch backend hands it the pieces through DLPack, without a
copy), which takes the GIL for it. Shapes and dtypes of the outputs come from a run of ``func``
on meta tensors of each device's local shapes, here on the caller's thread, or from ``out_meta=``
(a ``torch.Tensor`` per output, any device, ``meta`` is cheapest, of the GLOBAL shape and dtype).
An exception inside ``func``, and a result of another shape or dtype than the meta run's, become
a ``KernelError`` at the next read of anything that depends on the output, with the call's
file:line and the Python traceback; the runtime goes on.

``func`` must not modify its inputs in place (they are dtorch's values, shared with other
readers) and must compute the same thing on every device where the placements say the values
are replicas. With several outputs ``func`` runs once per device: the outputs are one node each
(a node has one output in dtorch's core), and the first of them to run on a device runs ``func``
and keeps the others' results for their nodes; an output of the wrong shape or dtype fails the
reads of that output, naming its index. On a CUDA device ``func`` runs with the worker's stream as
torch's current stream (``torch.cuda.ExternalStream`` of the handle the runtime gives the kernel),
so its work is queued in order with dtorch's.

>>> import torch, dtorch
>>> mesh = dtorch.DeviceMesh("cpu", [0, 1])
>>> x = dtorch.randn(4, 6, device_mesh=mesh, placements=[dtorch.Shard(0)])
>>> gelu_rows = dtorch.local_map(lambda t: torch.special.erf(t), [dtorch.Shard(0)], [[dtorch.Shard(0)]])
>>> y = gelu_rows(x)          # returns at once; erf runs on each device's two rows
"""

from __future__ import annotations

import contextlib
import functools
import threading
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.utils.dlpack

from . import _C
from .distributed_spec import DeviceMesh, Placement, _as_placement, _placements_to_raw, _private_cluster

__all__ = ["local_map", "local_shape"]


def _chunk(n: int, k: int, i: int) -> Tuple[int, int]:
    """torch.chunk's block i of k over n elements, trailing empties allowed: (start, length)."""
    c = -(-n // k) if k else n
    start = min(i * c, n)
    return start, min((i + 1) * c, n) - start


def local_shape(shape: Sequence[int], mesh_shape: Sequence[int], placements: Sequence[Placement],
                coord: Sequence[int]) -> Tuple[int, ...]:
    """The shape of the block of a tensor of global ``shape`` held at mesh coordinate ``coord``
    (shards nest in mesh-dim order, as docs/design.md says).

    >>> local_shape((5, 2), (2,), [dtorch.Shard(0)], (1,))
    (2, 2)
    """
    out = list(shape)
    for md, p in enumerate(placements):
        if p.is_shard():
            out[p.dim] = _chunk(out[p.dim], mesh_shape[md], coord[md])[1]
    return tuple(out)


def _coords(mesh_shape: Sequence[int]) -> List[Tuple[int, ...]]:
    """Every mesh coordinate in row-major order (the order of a kernel's rank)."""
    coords: List[Tuple[int, ...]] = [()]
    for n in mesh_shape:
        coords = [c + (i,) for c in coords for i in range(n)]
    return coords


def _placements(spec: Any, mesh: DeviceMesh, what: str) -> List[Placement]:
    if isinstance(spec, (Placement, str)):
        spec = [spec]
    out = [_as_placement(p, what) for p in spec]
    if len(out) != mesh.ndim:
        raise ValueError(f"{what}: {len(out)} placements for a {mesh.ndim}-D mesh")
    return out


def _is_single(spec: Any) -> bool:
    """out_placements for one output (a placement or a list of them) rather than one per output."""
    return isinstance(spec, (Placement, str)) or (
        isinstance(spec, (list, tuple)) and all(isinstance(p, (Placement, str)) for p in spec))


def _on_stream(stream: int, inputs: List[torch.Tensor]) -> Any:
    """The worker's native stream as torch's current stream (a CUDA device: ``stream`` is its
    cudaStream_t, python/_C/ops_user.c), so that the function's kernels queue on it; on CPU (0)
    nothing."""
    if not stream:
        return contextlib.nullcontext()
    device = inputs[0].device if inputs else None
    return torch.cuda.stream(torch.cuda.ExternalStream(stream, device=device))


def _call_local(func: Callable, args: Tuple, kwargs: Dict, positions: List[int], capsules: list,
                stream: int) -> Any:
    """``func`` on the local pieces (``args`` with the capsules' tensors at ``positions``), on the
    worker's stream."""
    full = list(args)
    for pos, cap in zip(positions, capsules):
        full[pos] = torch.from_dlpack(cap)
    with _on_stream(stream, [full[p] for p in positions]):
        return func(*full, **kwargs)


def _runner(func: Callable, args: Tuple, kwargs: Dict, positions: List[int], index: Optional[int]) -> Callable:
    """What the worker calls (python/_C/ops_user.c): call(rank, capsules, stream) -> a DLPack capsule
    of the local result, or the formatted traceback (a str) when ``func`` raised or returned no
    tensor. ``stream``: the worker's native stream (CUDA), 0 on CPU."""

    # The dtorch tensors' places hold None: the runner lives as long as the kernels, and it must not
    # keep dtorch values (or drop them on a worker: python/_C/ops_user.c).
    args = tuple(None if i in positions else a for i, a in enumerate(args))

    def call(rank: int, capsules: list, stream: int = 0):
        try:
            out = _call_local(func, args, kwargs, positions, capsules, stream)
            if index is not None:
                out = out[index]
            if not isinstance(out, torch.Tensor):
                raise TypeError(f"local_map: the function returned {type(out).__name__}, not a torch.Tensor")
            return torch.utils.dlpack.to_dlpack(out.detach())
        except BaseException:  # noqa: BLE001 - everything goes to the read, with its traceback
            return "".join(traceback.format_exc())

    return call


class _Shared:
    """The one run per device of a k-output function, shared by the k USER nodes that record its
    outputs (the core's nodes have one output each, as sort/topk's two): on each device the first
    of the k kernels to run calls ``func`` and keeps the other outputs, each handed to its node's
    kernel, then dropped. ``slots``: {rank: [outputs, or the traceback when func raised; the output
    indices not handed out yet]}; a kernel whose index is not pending runs ``func`` afresh (its
    node ran again, or a sibling was never lowered). One lock per rank (func runs under it, so two
    kernels of one device never both run it; other devices go on)."""

    def __init__(self, n_ranks: int) -> None:
        self.locks = [threading.Lock() for _ in range(n_ranks)]
        self.slots: Dict[int, list] = {}


def _block_error(name: str, k: int, out: Any, mesh_shape: Tuple[int, ...], shape: Tuple[int, ...],
                 dtype: torch.dtype, placements: List[Placement], rank: int) -> Optional[str]:
    """Why output k's local result is not this device's block of it (None when it is)."""
    coord = []
    for n in reversed(mesh_shape):
        coord.append(rank % n)
        rank //= n
    want = local_shape(shape, mesh_shape, placements, tuple(reversed(coord)))
    if not isinstance(out, torch.Tensor):
        return f"{name}: output {k} of the function is a {type(out).__name__}, not a torch.Tensor"
    if tuple(out.shape) != want or out.dtype != dtype:
        return (f"{name}: output {k} of the function has shape {list(out.shape)} and dtype {out.dtype}; this "
                f"device's block of it is {list(want)} of dtype {dtype} (out_meta, or the meta-tensor run, said so)")
    return None


def _shared_runners(name: str, func: Callable, args: Tuple, kwargs: Dict, positions: List[int],
                    mesh: DeviceMesh, shapes: List[Tuple[int, ...]], dtypes: List[torch.dtype],
                    outs_pl: List[List[Placement]]) -> List[Callable]:
    """The k runners (``_runner``'s protocol) of a k-output call, sharing one run of ``func`` per
    device (``_Shared``); each checks its output against the device's block and names it."""
    args = tuple(None if i in positions else a for i, a in enumerate(args))
    n_out = len(shapes)
    shared = _Shared(mesh.size())
    mesh_shape = tuple(mesh.shape)

    def run(capsules: list, stream: int) -> Any:
        try:
            outs = _call_local(func, args, kwargs, positions, capsules, stream)
            if not isinstance(outs, (tuple, list)) or len(outs) != n_out:
                raise TypeError(f"local_map: the function returned {type(outs).__name__}, not {n_out} tensors")
            return list(outs)
        except BaseException:  # noqa: BLE001 - every output's read gets the traceback
            return "".join(traceback.format_exc())

    def runner(k: int) -> Callable:
        def call(rank: int, capsules: list, stream: int = 0):
            with shared.locks[rank]:
                slot = shared.slots.get(rank)
                if slot is None or k not in slot[1]:
                    slot = shared.slots[rank] = [run(capsules, stream), set(range(n_out))]
                slot[1].discard(k)
                outs = slot[0]
                out = outs if isinstance(outs, str) else outs[k]
                if not isinstance(outs, str):
                    outs[k] = None  # handed out: the slot keeps only the others
                if not slot[1]:
                    del shared.slots[rank]
            if isinstance(out, str):
                return out
            bad = _block_error(name, k, out, mesh_shape, shapes[k], dtypes[k], outs_pl[k], rank)
            return bad if bad is not None else torch.utils.dlpack.to_dlpack(out.detach())

        return call

    return [runner(k) for k in range(n_out)]


def _meta_outputs(func: Callable, args: Tuple, kwargs: Dict, positions: List[int], mesh: DeviceMesh,
                  tensors: List[Any]) -> Dict[Tuple[int, ...], List[torch.Tensor]]:
    """func's outputs on meta tensors of each device's local shapes: {coord: [outputs]} (one run per
    distinct combination of local shapes)."""
    runs: Dict[Tuple, List[torch.Tensor]] = {}
    per_coord = {}
    for coord in _coords(mesh.shape):
        shapes = tuple(local_shape(t.shape, mesh.shape, t.placements, coord) for t in tensors)
        if shapes not in runs:
            # torch tensors passed through go along as meta tensors too (a cpu one beside meta ones fails)
            full = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
            kw = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
            for pos, t, s in zip(positions, tensors, shapes):
                full[pos] = torch.empty(s, dtype=t.dtype, device="meta")
            try:
                out = func(*full, **kw)
            except Exception as e:
                raise RuntimeError(
                    f"local_map: the function failed on meta tensors of the local shapes {list(shapes)} ({e!r}); "
                    f"pass out_meta= (the outputs' global shapes and dtypes) to skip that run") from e
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            if not all(isinstance(o, torch.Tensor) for o in outs):
                raise TypeError(f"local_map: the function returned {type(out).__name__} on meta tensors; it must "
                                f"return a torch.Tensor or a tuple of them")
            runs[shapes] = outs
        per_coord[coord] = runs[shapes]
    return per_coord


def _global_shape(per_coord: Dict[Tuple[int, ...], List[torch.Tensor]], k: int, mesh: DeviceMesh,
                  placements: List[Placement]) -> Tuple[int, ...]:
    """The global shape whose blocks under ``placements`` are output k's local shapes on every device;
    ValueError when there is none (the blocks are not torch.chunk's)."""
    origin = tuple(0 for _ in mesh.shape)
    shape = list(per_coord[origin][k].shape)
    for d in range(len(shape)):
        mdims = [md for md, p in enumerate(placements) if p.is_shard(d)]
        if mdims:  # the sum of the blocks along the mesh dims that shard d
            shape[d] = sum(o[k].shape[d] for c, o in per_coord.items()
                           if all(c[md] == 0 for md in range(mesh.ndim) if md not in mdims))
    for coord, outs in per_coord.items():
        if tuple(outs[k].shape) != local_shape(shape, mesh.shape, placements, coord):
            raise ValueError(
                f"local_map: output {k}'s local shapes are not the blocks of one global shape under {placements} "
                f"(device {coord}: {tuple(outs[k].shape)}, a global {tuple(shape)} would give "
                f"{local_shape(shape, mesh.shape, placements, coord)}); pass out_meta= with the global shape")
    return tuple(shape)


_META_CACHE_MAX = 64  # layouts remembered per wrapped function


def _meta_key(args: Tuple, kwargs: Dict, positions: List[int], tensors: List[Any], mesh: DeviceMesh,
              outs_pl: List[List[Placement]]) -> Optional[Tuple]:
    """What the meta run's result depends on: the inputs' layouts and the other arguments (None when
    one of those is not hashable, or is a torch tensor, whose values are not compared)."""
    others = tuple(a for i, a in enumerate(args) if i not in positions)
    if any(isinstance(a, torch.Tensor) for a in others) or any(isinstance(v, torch.Tensor) for v in kwargs.values()):
        return None
    key = (tuple((tuple(t.shape), t.dtype, tuple(t.placements)) for t in tensors), mesh,
           tuple(tuple(o) for o in outs_pl), others, tuple(sorted(kwargs.items())))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _worker_node_ids(mesh: DeviceMesh) -> List[int]:
    """The ids of ``mesh`` that live on a worker node of this process's cluster (none without one)."""
    if _C._cluster_address() is None:
        return []
    if _private_cluster():
        return []  # the per-device-per-process graphs' cluster: ordinary graphs keep their devices here
    kind = "cuda_devices" if mesh.device_type == "cuda" else "cpu_devices"
    first = "first_cuda_device_id" if mesh.device_type == "cuda" else "first_device_id"
    nodes = _C._cluster_nodes()
    return [i for i in mesh.device_ids if any(n[first] <= i < n[first] + n[kind] for n in nodes)]


def _record(name: str, func: Callable, args: Tuple, kwargs: Dict, positions: List[int], tensors: List[Any],
            mesh: DeviceMesh, outs_pl: List[List[Placement]], single: bool, out_meta: Any,
            meta_cache: Dict) -> Any:
    """One USER node per output, the k of a k-output call sharing one run of ``func`` per device
    (``_Shared``); returns the output or the tuple of them. ``meta_cache``: the wrapped
    function's memo of meta runs, {layout key: (global shapes, dtypes)}."""
    n_out = len(outs_pl)
    if out_meta is not None:
        metas = [out_meta] if isinstance(out_meta, torch.Tensor) else list(out_meta)
        if len(metas) != n_out or not all(isinstance(m, torch.Tensor) for m in metas):
            raise TypeError(f"{name}: out_meta must be a torch.Tensor per output ({n_out})")
        shapes = [tuple(m.shape) for m in metas]
        dtypes = [m.dtype for m in metas]
    else:
        key = _meta_key(args, kwargs, positions, tensors, mesh, outs_pl)
        hit = meta_cache.get(key) if key is not None else None
        if hit is None:
            per_coord = _meta_outputs(func, args, kwargs, positions, mesh, tensors)
            got = len(next(iter(per_coord.values())))
            if got != n_out:
                raise ValueError(f"{name}: the function returns {got} tensors and out_placements names {n_out}")
            hit = ([_global_shape(per_coord, k, mesh, outs_pl[k]) for k in range(n_out)],
                   [next(iter(per_coord.values()))[k].dtype for k in range(n_out)])
            if key is not None:
                if len(meta_cache) >= _META_CACHE_MAX:
                    meta_cache.clear()
                meta_cache[key] = hit
        shapes, dtypes = hit
    graph = tensors[0].graph if tensors else None
    if graph is None:
        from ._graph import default_graph
        graph = default_graph
    if getattr(graph, "per_device_per_process", False):
        raise NotImplementedError(f"{name}: a Python kernel on a GraphOption(per_device_per_process=True) graph "
                                  f"(its devices run in dtorch-node processes, without Python) is not implemented")
    on_node = _worker_node_ids(mesh)
    if on_node:
        raise NotImplementedError(f"{name}: a Python kernel on a mesh with worker-node devices ({mesh.device_type} ids "
                                  f"{', '.join(map(str, on_node))}: dtorch-node processes run no Python) is not "
                                  f"implemented; run it on the main node's own devices")
    results = []
    calls = ([_runner(func, args, kwargs, positions, None)] if single else
             _shared_runners(name, func, args, kwargs, positions, mesh, shapes, dtypes, outs_pl))
    for k, call in enumerate(calls):
        raw = _placements_to_raw(outs_pl[k], mesh, len(shapes[k]), f"{name}: out_placements")
        results.append(_C._user_op(graph, call, name, list(tensors), dtypes[k], list(shapes[k]), mesh, raw))
    return results[0] if single else tuple(results)


def _apply(name: str, func: Callable, out_placements: Any, in_placements: Any, device_mesh: Optional[DeviceMesh],
           redistribute_inputs: bool, out_meta: Any, args: Tuple, kwargs: Dict, meta_cache: Dict) -> Any:
    tensors, positions = [], []
    for i, a in enumerate(args):
        if isinstance(a, _C.TensorBase):
            positions.append(i)
            tensors.append(a)
    for key, v in kwargs.items():
        if isinstance(v, _C.TensorBase):
            raise TypeError(f"{name}: pass dtorch tensors positionally (keyword {key!r} is one)")
    mesh = device_mesh if device_mesh is not None else (tensors[0].device_mesh if tensors else None)
    if mesh is None:
        raise ValueError(f"{name}: no dtorch tensor among the arguments: pass device_mesh=")
    if in_placements is not None:
        if len(in_placements) != len(args):
            raise ValueError(f"{name}: in_placements has {len(in_placements)} entries for {len(args)} arguments")
        for j, i in enumerate(positions):
            spec = in_placements[i]
            if spec is None:
                continue
            want = _placements(spec, mesh, f"{name}: in_placements[{i}]")
            t = tensors[j]
            if t.device_mesh != mesh or list(t.placements) != want:
                if not redistribute_inputs:
                    raise ValueError(f"{name}: argument {i} has placements {list(t.placements)} on "
                                     f"{t.device_mesh!r}, in_placements asks for {want} on {mesh!r}; redistribute "
                                     f"it or pass redistribute_inputs=True")
                tensors[j] = t.redistribute(mesh, want)
    for j, t in enumerate(tensors):
        if t.device_mesh != mesh:
            raise ValueError(f"{name}: argument {positions[j]} is on {t.device_mesh!r}, the op runs on {mesh!r}")
    single = _is_single(out_placements)
    outs = [out_placements] if single else list(out_placements)
    outs_pl = [_placements(o, mesh, f"{name}: out_placements") for o in outs]
    return _record(name, func, tuple(args), dict(kwargs), positions, tensors, mesh, outs_pl, single, out_meta,
                   meta_cache)


def local_map(func: Optional[Callable] = None, out_placements: Any = None, in_placements: Any = None,
              device_mesh: Optional[DeviceMesh] = None, *, redistribute_inputs: bool = False,
              out_meta: Any = None, in_grad_placements: Any = None) -> Callable:
    """``func`` on each device's local pieces, run by the device's worker (module docstring).

    ``out_placements``: the output's placements (one per mesh dim), or a tuple of such lists for a
    function returning several tensors. ``in_placements``: one entry per positional argument, the
    placements the argument must have (``None`` for a non-tensor or to take it as it is); an argument
    laid out otherwise is a ValueError unless ``redistribute_inputs=True``. ``device_mesh``: the
    mesh (default: the first dtorch argument's). ``in_grad_placements`` (torch's, for the inputs'
    gradients) is accepted and ignored: dtorch computes no gradients. Returns the wrapped function;
    called without ``func`` it is a decorator.

    >>> @functools.partial(dtorch.local_map, out_placements=[dtorch.Shard(0)])
    ... def rms(t):
    ...     return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)
    """
    if out_placements is None:
        raise TypeError("local_map() missing required argument: 'out_placements'")
    if func is None:
        return functools.partial(local_map, out_placements=out_placements, in_placements=in_placements,
                                 device_mesh=device_mesh, redistribute_inputs=redistribute_inputs, out_meta=out_meta)
    name = f"local_map({getattr(func, '__qualname__', None) or getattr(func, '__name__', 'fn')})"
    meta_cache: Dict = {}

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        return _apply(name, func, out_placements, in_placements, device_mesh, redistribute_inputs, out_meta, args,
                      kwargs, meta_cache)

    return wrapped

