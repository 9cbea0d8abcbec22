"""Graphs (one controller thread and its workers) and futures.

>>> import dtorch
>>> g = dtorch.Graph()
>>> x = dtorch.ones(2, 2, graph=g)
>>> g.sync()                       # waits for everything issued on g so far
>>> f = (x + 1).to_torch_async()   # starts a read; f.get() waits for it
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
import weakref
from typing import Iterator, Optional

import torch

from . import _C
from .distributed_spec import DeviceMesh

__all__ = [
    "Graph",
    "default_graph",
    "TensorFuture",
    "VoidFutureCollect",
    "synchronize",
    "memory_stats",
    "reset_peak_memory_stats",
    "empty_cache",
]

# Every graph created and not yet collected: shut down at interpreter exit so
# no controller or worker thread runs while Python finalises.
_live_graphs: "weakref.WeakSet[Graph]" = weakref.WeakSet()
_default_graph: Optional["Graph"] = None
_default_lock = threading.Lock()


class Graph(_C.GraphBase):
    """An independent executor: its own controller thread and worker streams.

    Work in different graphs runs concurrently. ``backend`` is "torch" (the
    default) or "ref" (a small float32 reference backend).

    >>> g = Graph()
    >>> with g.device_mesh_guard(DeviceMesh("cpu", [0, 1])):
    ...     x = dtorch.zeros(4, graph=g)   # on the guard's mesh
    """

    def __init__(self, backend: Optional[str] = None) -> None:
        self.default_device_mesh: Optional[DeviceMesh] = None
        self.default_dtype: Optional[torch.dtype] = None
        _live_graphs.add(self)

    @staticmethod
    def default_graph() -> "Graph":
        """The process's default graph, created on first use."""
        global _default_graph
        g = _default_graph
        if g is None:
            with _default_lock:
                if _default_graph is None:
                    _default_graph = Graph()
                g = _default_graph
        return g

    @contextlib.contextmanager
    def device_mesh_guard(self, mesh: DeviceMesh) -> Iterator[DeviceMesh]:
        """Within the block, factories on this graph default to ``mesh``."""
        if not isinstance(mesh, DeviceMesh):
            raise TypeError(f"device_mesh_guard takes a DeviceMesh, not {type(mesh).__name__}")
        old = self.default_device_mesh
        self.default_device_mesh = mesh
        try:
            yield mesh
        finally:
            self.default_device_mesh = old

    @contextlib.contextmanager
    def dtype_guard(self, dtype: torch.dtype) -> Iterator[torch.dtype]:
        """Within the block, floating factories on this graph default to ``dtype``."""
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype_guard takes a torch.dtype, not {type(dtype).__name__}")
        old = self.default_dtype
        self.default_dtype = dtype
        try:
            yield dtype
        finally:
            self.default_dtype = old

    def satisfy(self, mesh: DeviceMesh) -> bool:
        """Whether the graph can run on ``mesh`` (CUDA: every id maps to an available GPU)."""
        if mesh.device_type == "cpu":
            return True
        return bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0

    def memory_stats(self, device_mesh: Optional[DeviceMesh] = None) -> dict:
        """Live blob bytes per device (see ``dtorch.memory_stats``)."""
        return memory_stats(device_mesh)

    def empty_cache(self) -> None:
        """Returns the buffers kept for reuse to the system."""
        empty_cache()

    def __repr__(self) -> str:
        return f"<dtorch.Graph backend={self.backend!r} at {id(self):#x}>"


def default_graph() -> Graph:
    """The process's default graph, created on first use (same as ``Graph.default_graph()``)."""
    return Graph.default_graph()


_DEVICE_TYPES = {"cpu": 0, "cuda": 1}


def memory_stats(device_mesh: Optional[DeviceMesh] = None) -> dict:
    """Current and peak bytes of live blobs per device, by dtorch's own accounting.

    Returns ``{"cpu:0": {"current": int, "peak": int}, ...}`` for the devices of
    ``device_mesh``, or for every device that has held memory when it is None.

    >>> dtorch.memory_stats(mesh)["cpu:0"]["peak"]
    """
    if device_mesh is not None:
        if not isinstance(device_mesh, DeviceMesh):
            raise TypeError(f"device_mesh must be a DeviceMesh, not {type(device_mesh).__name__}")
        devices = [(device_mesh.device_type, int(i)) for i in device_mesh.mesh.flatten().tolist()]
    else:
        devices = [(t, i) for t in _DEVICE_TYPES for i in range(256)]
    out = {}
    for dtype_name, i in devices:
        current, peak = _C._memory_stats(_DEVICE_TYPES[dtype_name], i)
        if device_mesh is not None or peak:
            out[f"{dtype_name}:{i}"] = {"current": current, "peak": peak}
    return out


def reset_peak_memory_stats() -> None:
    """Sets every device's peak to its current bytes."""
    _C._reset_peak_memory_stats()


def empty_cache() -> None:
    """Returns the buffers dtorch keeps for reuse to the system."""
    _C._empty_cache()


def synchronize() -> None:
    """Waits until all work issued so far on every live graph has run."""
    for g in list(_live_graphs):
        g.sync()


# One wake-up pipe per event loop: a completing future writes a byte into it
# from the thread that completes it (no GIL needed), and the loop's reader
# callback resolves every awaited future that is ready. No polling, no thread.
_wakeups: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _Wakeup:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.rfd, self.wfd = os.pipe()
        os.set_blocking(self.rfd, False)
        os.set_blocking(self.wfd, False)
        self.pending: list = []
        loop.add_reader(self.rfd, self._drain)

    def _drain(self) -> None:
        try:
            while os.read(self.rfd, 4096):
                pass
        except BlockingIOError:
            pass
        still = []
        for fut, waiter in self.pending:
            if waiter.done():
                continue
            if fut.is_ready():
                try:
                    waiter.set_result(fut.get())
                except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
                    waiter.set_exception(e)
            else:
                still.append((fut, waiter))
        self.pending = still


def _wakeup_for(loop: asyncio.AbstractEventLoop) -> _Wakeup:
    w = _wakeups.get(loop)
    if w is None:
        w = _wakeups[loop] = _Wakeup(loop)
    return w


class _AwaitableFuture(_C.FutureBase):
    __slots__ = ()

    def __await__(self):
        """``await future`` in asyncio: the event loop keeps running other tasks meanwhile.

        Completion writes to a pipe the loop watches, so the loop wakes exactly
        once per completion; it never blocks and never polls on a timer.
        """
        if self.is_ready():
            return self.get()
        loop = asyncio.get_running_loop()
        wakeup = _wakeup_for(loop)
        waiter = loop.create_future()
        wakeup.pending.append((self, waiter))
        self._notify_fd(wakeup.wfd)
        return (yield from waiter.__await__())


class TensorFuture(_AwaitableFuture):
    """A pending tensor value from ``Tensor.to_torch_async()``.

    ``get()``/``wait()`` return the torch.Tensor, ``wait_for(ms)`` says whether
    it became ready in time, ``is_ready()`` never waits; ``await`` works too.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<dtorch.TensorFuture ready={self.is_ready()}>"


class VoidFutureCollect(_AwaitableFuture):
    """Completes when all work issued on a graph before ``graph.sync_future()`` has run."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<dtorch.VoidFutureCollect ready={self.is_ready()}>"


def _shutdown_all() -> None:
    for g in list(_live_graphs):
        try:
            g.shutdown()
        except Exception:  # noqa: BLE001 - never fail interpreter exit
            pass


atexit.register(_shutdown_all)
