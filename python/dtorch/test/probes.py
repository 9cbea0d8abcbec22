"""Probes of the runtime for tests: hold values pending, read the pipeline's counters and the cache.

A :class:`Gate` makes a tensor whose value is produced only once the test opens the gate (its
kernels sleep on the device's worker until then), so "this read is still pending" is a fact the
test controls rather than a race against a slow computation:

>>> import dtorch
>>> from dtorch.test.probes import Gate
>>> with Gate() as gate:
...     y = gate.hold(dtorch.ones(3)) * 2
...     f = y.to_torch_async()
...     assert f.wait_for(0) is False      # pending for sure
...     gate.open()
...     assert f.wait_for(60_000) is True

Leaving the ``with`` block (or dropping the gate) opens it, and a graph's shutdown lets its own
held kernels through, so a test that fails half-way cannot leave a worker held.

Do not record more than about 30,000 ops behind a closed gate from Python: flow control would then
make the recording thread wait, holding the GIL, and no Python thread could open the gate.
"""

from __future__ import annotations

import contextlib
import os
from typing import Dict, Iterator, Optional

from .. import _C
from .._C import TensorBase
from .._graph import Graph, _resolve

__all__ = ["Gate", "graph_stats", "cached_bytes", "fail_allocs", "fail_allocs_pending", "held_controller", "chains",
           "schedule", "replay", "bcast", "step", "cuda_graph", "controller_cpu_ns", "lowering_ns"]


class Gate:
    """A test-controlled gate (``dt_debug_gate``): closed when made, opened once by :meth:`open`.

    >>> gate = Gate()
    >>> gate.is_open
    False
    >>> gate.open(); gate.is_open
    True
    """

    def __init__(self) -> None:
        self._gate = _C._test_gate()

    def hold(self, x: TensorBase) -> TensorBase:
        """A copy of ``x`` (same shape, dtype, mesh, placements) produced only once the gate is open.

        Work recorded after it on the same devices waits behind it too.
        """
        return _C._test_gated(x, self._gate)

    def open(self) -> None:
        """Opens the gate: the held kernels run. Idempotent; any thread."""
        _C._test_gate_open(self._gate)

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` has been called."""
        return _C._test_gate_is_open(self._gate)

    def __enter__(self) -> "Gate":
        return self

    def __exit__(self, *exc) -> None:
        self.open()


def graph_stats(graph=None, reset_peak: bool = False) -> Dict[str, int]:
    """A graph's pipeline counters (``dt_graph_get_stats``).

    Keys: ``submitted`` (node records pushed), ``in_flight`` (records not yet lowered or run),
    ``peak_in_flight`` (the most seen after a controller batch since the last reset),
    ``in_flight_limit`` and ``check_interval`` (flow control's bound and how often a client looks
    at it), ``flow_waits`` (times a client waited for the pipeline to drain), ``nodes_eliminated``
    (nodes never lowered: their result was dropped unread, the window's dce pass),
    ``kernels_in_place`` (kernels that wrote into their first input's buffer, the reuse pass),
    ``nodes_fused`` (nodes run inside blocked elementwise chain kernels, the chain pass) and
    ``cancelled`` (nodes and kernels dropped unrun by ``Graph.cancel``, e.g. at interpreter exit),
    ``replay_hits`` (nodes whose kernels the controller replayed from an earlier node with the same
    signature), ``replay_misses`` (nodes it could have replayed but lowered), ``replay_run_hits`` (of
    the hits, those found by the run: the template that followed the previous node's last time) and
    ``nodes_reordered`` (nodes the schedule lowered ahead of an older node of their round, so that
    compute runs while a collective is in flight) and ``bcast_nodes`` (nodes lowered as one
    device-independent record for all their devices, ``bcast``), ``step_runs`` (runs of such records
    closed), ``graph_captured``, ``graph_launched`` and ``graph_eager`` (run slots captured as CUDA
    graphs, launched from one, and run eagerly while graphs were on: ``cuda_graph``) and ``bcast_collectives`` (collectives lowered as one such record, each worker running
    its own rank) and ``chain_blocks`` (the blocks
    the backend's chain runner ran chain kernels on, over every device: how many a chain of n
    elements takes is ceil(n / block size) per device, the size ``DTORCH_CHAIN_BLOCK`` sets).

    >>> graph_stats()["in_flight_limit"]
    32768
    """
    g: Optional[Graph] = _resolve(graph) if graph is not None else Graph.default_graph()
    return _C._graph_stats(g, reset_peak)


def cached_bytes() -> int:
    """Bytes of freed buffers the backends keep for reuse now (what ``dtorch.empty_cache()`` returns).

    >>> dtorch.empty_cache(); cached_bytes()
    0
    """
    return _C._cached_bytes()


def fail_allocs(after_n: int) -> None:
    """Makes the controller's next lowering allocation after ``after_n`` successes fail, once.

    The node being lowered then gets an error naming the op, "on the controller" and the Python
    line that recorded it, raised as ``KernelError`` at the next read (``dt_debug_fail_allocs``).
    A negative value disarms. Only controller allocations made while lowering ever fail.

    >>> fail_allocs(0); y = dtorch.ones(3) + 1   # the add's lowering fails
    >>> fail_allocs(-1)
    """
    _C._fail_allocs(int(after_n))


def fail_allocs_pending() -> bool:
    """Whether the failure armed by :func:`fail_allocs` has not happened yet."""
    return _C._fail_allocs_pending()
@contextlib.contextmanager
def held_controller(graph=None) -> Iterator[None]:
    """Holds a graph's controller (``dt_debug_hold_controller``): what is recorded inside the block is
    taken in one controller round when it ends, so a value made and dropped inside is in one window.

    >>> with held_controller():
    ...     y = dtorch.ones(3).exp(); del y   # made and dropped unread: never lowered
    """
    g: Optional[Graph] = _resolve(graph) if graph is not None else Graph.default_graph()
    _C._hold_controller(g, True)
    try:
        yield
    finally:
        _C._hold_controller(g, False)


@contextlib.contextmanager
def _switched(setter, on: bool, graph, env: str, default: bool) -> Iterator[None]:
    """The switches below: `setter` (a ``dt_graph_set_*``) turns it `on` for the block, then back to
    its default: `default`, unless the environment variable `env` says otherwise ("1" turns on a
    switch that is off by default, "0" turns off one that is on)."""
    g: Optional[Graph] = _resolve(graph) if graph is not None else Graph.default_graph()
    setter(g, bool(on))
    try:
        yield
    finally:
        setter(g, os.environ.get(env) != "0" if default else os.environ.get(env) == "1")


@contextlib.contextmanager
def chains(on: bool, graph=None) -> Iterator[None]:
    """Turns a graph's blocked elementwise chains on or off (``dt_graph_set_chains``) inside the
    block, and back to the default after it (off; on with ``DTORCH_CHAINS=1``).

    >>> with chains(False):
    ...     y = dtorch.ones(3).exp().sin()   # two kernels, not one chain
    """
    with _switched(_C._set_chains, on, graph, "DTORCH_CHAINS", False):
        yield


@contextlib.contextmanager
def replay(on: bool, graph=None) -> Iterator[None]:
    """Turns a graph's capture and replay on or off (``dt_graph_set_replay``) inside the block, and
    back to the default after it (on; off with ``DTORCH_REPLAY=0``).

    >>> with replay(False):
    ...     y = dtorch.ones(3).exp()   # lowered, never replayed
    """
    with _switched(_C._set_replay, on, graph, "DTORCH_REPLAY", True):
        yield


@contextlib.contextmanager
def bgroup(on: bool, graph=None) -> Iterator[None]:
    """Turns a graph's blob groups on or off (``dt_graph_set_bgroup``) inside the block, and back
    to the default after it (on; off with ``DTORCH_BGROUP=0``)."""
    with _switched(_C._set_bgroup, on, graph, "DTORCH_BGROUP", True):
        yield


@contextlib.contextmanager
def step(on: bool, graph=None) -> Iterator[None]:
    """Turns a graph's runs of device-independent records on or off (``dt_graph_set_step``)
    inside the block, and back to the default after it (on; off with ``DTORCH_STEP=0``):
    consecutive shared nodes of one mesh are one record with one slot per device."""
    with _switched(_C._set_step, on, graph, "DTORCH_STEP", True):
        yield


@contextlib.contextmanager
def cuda_graph(on: bool, graph=None) -> Iterator[None]:
    """Turns a graph's CUDA graphs of repeated run slots on or off (``dt_graph_set_cuda_graph``)
    inside the block, and back to the default after it (off; on with ``DTORCH_CUDA_GRAPH=1``): a
    worker whose backend captures records a repeated run slot once and launches it on later
    sightings (the CPU backend captures only under ``DTORCH_GRAPH_EMULATE=1``, a test emulation)."""
    with _switched(_C._set_cuda_graph, on, graph, "DTORCH_CUDA_GRAPH", False):
        yield


@contextlib.contextmanager
def bcast(on: bool, graph=None) -> Iterator[None]:
    """Turns a graph's device-independent records on or off (``dt_graph_set_bcast``) inside the
    block, and back to the default after it (on; off with ``DTORCH_BCAST=0``).

    >>> with bcast(True):
    ...     y = x + 1   # one record for every device of x's mesh
    """
    with _switched(_C._set_bcast, on, graph, "DTORCH_BCAST", True):
        yield


@contextlib.contextmanager
def schedule(on: bool, graph=None) -> Iterator[None]:
    """Turns a graph's overlap schedule on or off (``dt_graph_set_schedule``) inside the block, and
    back to the default after it (on; off with ``DTORCH_SCHEDULE=0``).

    >>> with schedule(False):
    ...     y = dtorch.ones(3).exp()   # lowered in program order
    """
    with _switched(_C._set_schedule, on, graph, "DTORCH_SCHEDULE", True):
        yield


def controller_cpu_ns(graph=None) -> int:
    """CPU time a graph's controller thread has used so far, in nanoseconds
    (``dt_debug_controller_cpu_ns``); -1 when unknown.

    >>> controller_cpu_ns() >= 0
    True
    """
    g: Optional[Graph] = _resolve(graph) if graph is not None else Graph.default_graph()
    return _C._controller_cpu_ns(g)


def lowering_ns(on: bool = True, graph=None) -> int:
    """Turns timing of a graph's lowering step (each node lowered or replayed, CLOCK_MONOTONIC) on
    or off for the nodes lowered afterwards (``dt_debug_lowering_ns``), and returns the nanoseconds
    timed so far.

    >>> t0 = lowering_ns(True); y = (dtorch.ones(3) * 2).to_torch(); lowering_ns(False) >= t0
    True
    """
    g: Optional[Graph] = _resolve(graph) if graph is not None else Graph.default_graph()
    return _C._lowering_ns(g, bool(on))
