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
import dataclasses
import itertools
import os
import threading
import weakref
from typing import Iterator, Optional

import torch

from . import _C
from .distributed_spec import DeviceMesh

__all__ = [
    "Graph",
    "GraphOption",
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
# Each Python thread's default graph, created on its first use there.
_thread_default = threading.local()
_graph_ids = itertools.count()


@dataclasses.dataclass(frozen=True)
class GraphOption:
    """How a :class:`Graph` runs.

    ``per_device_per_process`` (the original DTorch's option): False (the default) runs every
    device's workers as threads of this process; True runs each CPU device's kernels in a local
    process of its own (a ``dtorch-node`` child serving that one id; python/dtorch/_processes.py),
    with the same results. ``num_devices`` (dtorch's addition, for that mode) is how many CPU
    ids, ``0..num_devices-1``, get a process (default 4); a mesh naming another id is a
    ValueError at the call. ``backend`` is "torch" (the default) or "ref".

    >>> g = dtorch.Graph(dtorch.GraphOption(per_device_per_process=True, num_devices=2))
    """

    per_device_per_process: bool = False
    backend: Optional[str] = None
    num_devices: Optional[int] = None


def _start_processes(option: GraphOption) -> None:
    """Checks ``num_devices`` and starts the processes of a per-device-per-process graph."""
    n = 4 if option.num_devices is None else option.num_devices
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"GraphOption(num_devices=...): expected an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"GraphOption(num_devices=...): expected at least 1, got {n}")
    _processes().ensure(n)


def _processes():
    # Late: only this mode needs the processes (and the dtorch-node executable).
    from . import _processes as p

    return p


class Graph(_C.GraphBase):
    """An independent executor: its own controller thread and worker streams.

    Work in different graphs runs concurrently. ``Graph(option)`` takes a
    :class:`GraphOption`; ``backend`` is "torch" (the default) or "ref" (a small
    float32 reference backend).

    >>> g = Graph()
    >>> with g.device_mesh_guard(DeviceMesh("cpu", [0, 1])):
    ...     x = dtorch.zeros(4, graph=g)   # on the guard's mesh
    """

    def __new__(cls, option: Optional[GraphOption] = None, backend: Optional[str] = None) -> "Graph":
        if option is not None:
            if isinstance(option, str) and backend is None:
                option, backend = None, option  # Graph("ref"): the backend, positionally
            elif not isinstance(option, GraphOption):
                raise TypeError(f"Graph() takes a dtorch.GraphOption, not {type(option).__name__}")
            else:
                if backend is None:
                    backend = option.backend
                if option.per_device_per_process:
                    _start_processes(option)
                    try:
                        g = super().__new__(cls, backend=backend, per_device_per_process=True)
                    except BaseException:
                        _processes().release()
                        raise
                    g._per_process = g.per_device_per_process = True
                    return g
        return super().__new__(cls, backend=backend)

    def __init__(self, option: Optional[GraphOption] = None, backend: Optional[str] = None) -> None:
        self.default_device_mesh: Optional[DeviceMesh] = None
        self.default_dtype: Optional[torch.dtype] = None
        self.id: int = next(_graph_ids)
        _live_graphs.add(self)

    per_device_per_process = False  # the mode it was made in (GraphOption)
    _per_process = False  # it still holds its processes (ensure/release in _processes)

    def __del__(self) -> None:
        if self._per_process:
            # Its work finishes while the processes still run; the last such graph stops them.
            self._per_process = False
            try:
                self.shutdown()
            finally:
                _processes().release()
        # A graph collected while explain or a trace records (a thread's default graph when the
        # thread ends) hands its records over first: they go with the graph otherwise.
        try:
            if _C._record_enabled(_C.RECORD_EXPLAIN) or _C._record_enabled(_C.RECORD_TRACE):
                # Late: _explain (above this module) imports it; explain or a trace records only once
                # _explain has been imported.
                from . import _explain

                _explain._graph_ending(self)
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass

    @staticmethod
    def default_graph() -> "Graph":
        """The calling thread's default graph, created on its first use (each thread has its own)."""
        g = getattr(_thread_default, "graph", None)
        if g is None:
            g = _thread_default.graph = Graph()
            if _inherited and threading.get_ident() == _inherited.get("thread"):
                # The first default graph in a fork child keeps the parent's settings.
                g.default_device_mesh = _inherited.get("default_device_mesh")
                g.default_dtype = _inherited.get("default_dtype")
                _inherited.clear()
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
        """Whether the graph can run on ``mesh``: CPU ids always; CUDA ids must name GPUs its backend sees.

        >>> dtorch.default_graph.satisfy(dtorch.DeviceMesh("cpu", [0, 1]))
        True
        """
        if not isinstance(mesh, DeviceMesh):
            raise TypeError(f"satisfy() takes a DeviceMesh, not {type(mesh).__name__}")
        return self._satisfy(mesh)

    def memory_stats(self, device_mesh: Optional[DeviceMesh] = None) -> dict:
        """Live blob bytes per device (see ``dtorch.memory_stats``)."""
        return memory_stats(device_mesh)

    def get_memory_stats(self, device_mesh: Optional[DeviceMesh] = None, reset_peak: bool = False):
        """Current and peak bytes per device as a :class:`dtorch.memory_stats.MemoryStats`.

        With ``reset_peak`` the peaks are reset (to the current bytes) after they are read.

        >>> stats = dtorch.default_graph.get_memory_stats(mesh)
        >>> stats["cpu:0"].peak
        """
        # Late: dtorch.memory_stats imports this module (its callable form is memory_stats here).
        from .memory_stats import MemoryStats

        stats = MemoryStats.from_dict(memory_stats(device_mesh))
        if reset_peak:
            reset_peak_memory_stats()
        return stats

    def empty_cache(self) -> None:
        """Returns the buffers kept for reuse to the system."""
        empty_cache()

    def __repr__(self) -> str:
        return f"<dtorch.Graph id={self.id} backend={self.backend!r}>"


class _DefaultGraph:
    """``dtorch.default_graph``: stands for the calling thread's default graph.

    Attribute reads and writes, method calls, ``==`` and ``isinstance(.., Graph)``
    all go to the graph of the thread that uses it; calling it returns that graph
    itself (``dtorch.default_graph() is dtorch.Graph.default_graph()``).

    >>> dtorch.default_graph.sync()
    >>> with dtorch.default_graph.device_mesh_guard(mesh):
    ...     x = dtorch.ones(4)
    """

    __slots__ = ()

    def __call__(self) -> Graph:
        return Graph.default_graph()

    def __getattr__(self, name: str):
        return getattr(Graph.default_graph(), name)

    def __setattr__(self, name: str, value) -> None:
        setattr(Graph.default_graph(), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(Graph.default_graph(), name)

    def __dir__(self):
        return dir(Graph.default_graph())

    @property  # isinstance(dtorch.default_graph, dtorch.Graph) is True
    def __class__(self):
        return Graph

    def __eq__(self, other) -> bool:
        g = Graph.default_graph()
        return g is (other() if isinstance(other, _DefaultGraph) else other)

    def __hash__(self) -> int:
        return hash(Graph.default_graph())

    def __repr__(self) -> str:
        return repr(Graph.default_graph())


default_graph = _DefaultGraph()


def _resolve(graph):
    """The concrete Graph behind ``graph`` (``dtorch.default_graph`` stands for the thread's)."""
    if type(graph) is _DefaultGraph:  # noqa: E721 - isinstance would see Graph
        return Graph.default_graph()
    return graph


_DEVICE_TYPES = {"cpu": _C.DEVICE_CPU, "cuda": _C.DEVICE_CUDA}


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
    """At interpreter exit: cancel every live graph's pending work.

    Nobody can read a value any more, so queued kernels are dropped unrun and
    the process ends after the kernels running now (one per worker). The wait
    is interruptible: Ctrl-C during it ends the process at once.
    """
    for g in list(_live_graphs):
        try:
            g.cancel()
        except KeyboardInterrupt:
            # The threads may still be finishing one kernel each; joining them
            # again at finalisation would make Ctrl-C wait. Leave now.
            import sys

            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001
                    pass
            os._exit(130)
        except Exception:  # noqa: BLE001 - never fail interpreter exit
            pass


atexit.register(_shutdown_all)

# The default graph's settings at fork time, for the child's new default graph.
_inherited: dict = {}


def _after_fork_in_child() -> None:
    """A fork child has only the forking thread: the parent's graphs have no
    threads here. They stay dead (ops on them raise RuntimeError naming the
    fork; the C layer leaks them rather than join threads that do not exist)
    and each thread gets a fresh default graph on first use."""
    global _thread_default, _live_graphs
    old = getattr(_thread_default, "graph", None)
    _inherited.clear()
    if old is not None:
        _inherited.update(thread=threading.get_ident(), default_device_mesh=old.default_device_mesh,
                          default_dtype=old.default_dtype)
    _thread_default = threading.local()
    _live_graphs = weakref.WeakSet()


os.register_at_fork(after_in_child=_after_fork_in_child)
