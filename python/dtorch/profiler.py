"""``dtorch.profiler.trace(path)``: a Chrome/Perfetto trace of what ran.

>>> with dtorch.profiler.trace("trace.json"):
...     y = (x @ w).relu()
...     y.to_torch()

writes ``trace.json`` in the Trace Event format ("traceEvents"), which
ui.perfetto.dev and chrome://tracing open. Each graph is a process; its
threads are the client threads that recorded ops, the controller, and one
track per (device, stream) worker. Every op recorded is a slice on its client
thread's track and on the controller's (its lowering); every kernel a slice
on its stream's track, with the op, kernel, shapes (the node's global output
and input shapes), dtype, output bytes and the user's file:line in ``args``;
a flow arrow joins each op on the client track to each of its kernels.
Times are microseconds on the monotonic clock. Value reads and syncs are not
drawn (they are the trace's own synchronisation). See
docs/explain-and-trace.md.

On a cluster's main node (docs/cluster.md) each worker node records the
kernels it runs for the trace and sends their records with its answers: the
file has a process per worker node ("worker node I (host H, pid P)"), a
track per device stream of it, on the main node's time axis (each node's
clock offset, estimated from the heartbeats, is subtracted; ``otherData``
gives every node's ``clock_offset_ns`` and ``clock_rtt_ns``, the offset
being right within half the round trip), with the op and the user's
file:line on each kernel.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

from . import _C
from . import _explain
from ._explain import _live_graphs, _sync_all

__all__ = ["trace", "Trace"]

_TRACE = _C.RECORD_TRACE
_STREAM_KINDS = ("compute", "comm")


class Trace:
    """What ``trace(path)`` returns: after the ``with``, ``events`` holds the trace's events
    (also written to ``path``) and ``dropped`` the records lost to a full buffer."""

    def __init__(self, path: Optional[str]) -> None:
        self.path = None if path is None else os.fspath(path)
        self.events: List[Dict[str, Any]] = []
        self.dropped = 0
        self.origin_ns = 0  # the CLOCK_MONOTONIC reading (ns) of ts 0
        self._open = False
        self._ended: list = []  # records of graphs collected while open (_explain._graph_ending)

    def __enter__(self) -> "Trace":
        if self._open:
            raise RuntimeError("dtorch.profiler.trace(): this trace is already recording")
        _sync_all()  # work issued before the with is not traced
        with _explain._lock:
            _C._record_enable(_TRACE, True)
            _explain._active_traces.append(self)
            self._open = True
        return self

    def __exit__(self, *exc) -> None:
        if not self._open:
            return
        self._open = False
        try:
            _sync_all()  # work issued inside the with is traced
        finally:
            with _explain._lock:
                _C._record_enable(_TRACE, False)
                _explain._active_traces.remove(self)
        taken = list(self._ended)
        for g in _live_graphs():
            try:
                nodes, kernels, dropped = _C._graph_take_trace(g)
            except Exception:  # noqa: BLE001 - a graph shut down meanwhile has nothing left
                continue
            self.dropped += dropped
            taken.append((nodes, kernels))
        workers = _worker_nodes(taken)
        self.events = _events(taken)
        self.origin_ns = _origin(taken)
        if self.path is not None:
            with open(self.path, "w") as f:
                json.dump({"traceEvents": self.events, "displayTimeUnit": "ms",
                           "otherData": {"dropped_records": self.dropped, "worker_nodes": workers,
                                         "time_origin_ns": self.origin_ns}}, f)


def trace(path: Optional[str] = "trace.json") -> Trace:
    """Traces the work issued inside the ``with`` into ``path`` (None: only ``Trace.events``).

    >>> with dtorch.profiler.trace("trace.json") as t:
    ...     (x + 1).to_torch()
    """
    return Trace(path)


def _worker_nodes(taken: list) -> List[Dict[str, Any]]:
    """Appends the worker nodes' kernels (one entry per node, named) to `taken`; returns what the
    file's metadata says of each node: index, host, pid and its clock's offset and round trip."""
    # The nodes first: the take moves the records by each node's offset as it is then, whose round
    # trip is at most the one said here (the kept exchange only ever gets a smaller one), so the
    # metadata's bound holds for every record.
    info = {n["index"]: n for n in _C._cluster_nodes()} if _C._cluster_info()["available"] else {}
    by_node: Dict[int, list] = {}
    for (node, dev_type, dev, skind, seq, op, kname, file, line, kb, ke, nbytes) in _C._cluster_take_trace():
        by_node.setdefault(node, []).append((0, dev_type, dev, skind, seq, op, kname, file, line, kb, ke, nbytes))
    for node in sorted(by_node):
        n = info.get(node, {})
        taken.append(([], by_node[node], f"worker node {node} (host {n.get('host', '?')}, pid {n.get('pid', '?')})"))
    return [{"index": i, "host": n["host"], "pid": n["pid"], "clock_offset_ns": n["clock_offset_ns"],
             "clock_rtt_ns": n["clock_rtt_ns"]} for i, n in sorted(info.items())]


def _origin(taken) -> int:
    """The earliest clock reading (ns) of the records: the trace's time 0."""
    stamps = [t for e in taken for n in e[0] for t in (n[5], n[7]) if t] + [k[9] for e in taken for k in e[1]]
    return min(stamps) if stamps else 0


def _site(file: Optional[str], line: int) -> Optional[str]:
    return f"{file}:{line}" if file else None


def _events(taken) -> List[Dict[str, Any]]:
    """Trace events for each graph's (nodes, kernels): a process per graph."""
    taken = [t if len(t) == 3 else (t[0], t[1], None) for t in taken]  # (nodes, kernels, process name)
    base = _origin(taken)

    def us(ns: int) -> float:
        return (ns - base) / 1000.0

    ev: List[Dict[str, Any]] = []
    flow = 0
    for gi, (nodes, kernels, pname) in enumerate(taken):
        if not nodes and not kernels:
            continue
        pid = gi + 1
        ev.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                   "args": {"name": pname or f"dtorch graph {pid}"}})
        if nodes:  # a worker node's process has its streams only
            ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "controller"}})
            ev.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": 1, "args": {"sort_index": 1}})
        by_id = {}
        clients = set()
        for (nid, op, file, line, client, cb, ce, lb, le, dtype, shapes) in nodes:
            tid = 10 + client
            by_id[nid] = (tid, us(cb), max(us(ce) - us(cb), 0.0), str(dtype) if dtype is not None else None, shapes)
            clients.add(client)
            args = {"node": nid, "site": _site(file, line), "dtype": by_id[nid][3],
                    "shapes": {"output": shapes[0] if shapes else None, "inputs": shapes[1:]}}
            ev.append({"ph": "X", "cat": "op", "name": op, "pid": pid, "tid": tid, "ts": us(cb),
                       "dur": by_id[nid][2], "args": args})
            ev.append({"ph": "X", "cat": "lowering", "name": op, "pid": pid, "tid": 1, "ts": us(lb),
                       "dur": max(us(le) - us(lb), 0.0), "args": {"node": nid, "site": _site(file, line)}})
        for c in sorted(clients):
            name = f"client thread {c}" if c else "client (unknown thread)"
            ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 10 + c, "args": {"name": name}})
            ev.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": 10 + c, "args": {"sort_index": 0}})
        streams: Dict[tuple, int] = {}
        for k in sorted(kernels, key=lambda k: (k[1], k[2], k[3], k[4])):
            (nid, dev_type, dev, skind, seq, op, kname, file, line, kb, ke, nbytes) = k
            key = (dev_type, dev, skind)
            if key not in streams:
                tid = 1000 + len(streams)
                streams[key] = tid
                dev_name = f"{'cuda' if dev_type == 1 else 'cpu'}:{dev}"
                sk = _STREAM_KINDS[skind] if skind < len(_STREAM_KINDS) else str(skind)
                ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"{dev_name} {sk}"}})
                ev.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                           "args": {"sort_index": tid}})
            tid = streams[key]
            node = by_id.get(nid)
            ts, dur = us(kb), max(us(ke) - us(kb), 0.0)
            args = {"op": op, "kernel": kname, "site": _site(file, line), "bytes": nbytes, "node": nid or None,
                    "device": f"{'cuda' if dev_type == 1 else 'cpu'}:{dev}", "stream": _STREAM_KINDS[skind],
                    "seq": seq, "dtype": node[3] if node else None,
                    "shapes": {"output": node[4][0], "inputs": node[4][1:]} if node and node[4] else None}
            ev.append({"ph": "X", "cat": "kernel", "name": op, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                       "args": args})
            if node:
                flow += 1
                ctid, cts, cdur, _, _ = node
                ev.append({"ph": "s", "cat": "flow", "name": "op to kernel", "id": flow, "pid": pid, "tid": ctid,
                           "ts": cts + cdur / 2})
                ev.append({"ph": "f", "bp": "e", "cat": "flow", "name": "op to kernel", "id": flow, "pid": pid,
                           "tid": tid, "ts": ts + dur / 2})
    return ev
