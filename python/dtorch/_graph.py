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
import threading
import weakref
from typing import Iterator, Optional

import torch

from . import _C
from .distributed_spec import DeviceMesh

__all__ = ["Graph", "default_graph", "TensorFuture", "VoidFutureCollect"]

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

    def __repr__(self) -> str:
        return f"<dtorch.Graph backend={self.backend!r} at {id(self):#x}>"


def default_graph() -> Graph:
    """The process's default graph, created on first use (same as ``Graph.default_graph()``)."""
    return Graph.default_graph()


class _AwaitableFuture(_C.FutureBase):
    __slots__ = ()

    def __await__(self):
        """``await future`` in asyncio: waits on an executor thread, never on the event loop's."""
        if self.is_ready():
            return self.get()
        loop = asyncio.get_running_loop()
        return (yield from loop.run_in_executor(None, self.get).__await__())


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
