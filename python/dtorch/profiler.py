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
        self.events = _events(taken)
        if self.path is not None:
            with open(self.path, "w") as f:
                json.dump({"traceEvents": self.events, "displayTimeUnit": "ms",
                           "otherData": {"dropped_records": self.dropped}}, f)


def trace(path: Optional[str] = "trace.json") -> Trace:
    """Traces the work issued inside the ``with`` into ``path`` (None: only ``Trace.events``).

    >>> with dtorch.profiler.trace("trace.json") as t:
    ...     (x + 1).to_torch()
    """
    return Trace(path)


def _site(file: Optional[str], line: int) -> Optional[str]:
    return f"{file}:{line}" if file else None


def _events(taken) -> List[Dict[str, Any]]:
    """Trace events for each graph's (nodes, kernels): a process per graph."""
    stamps = [t for nodes, kernels in taken for n in nodes for t in (n[5], n[7]) if t] + \
             [k[9] for nodes, kernels in taken for k in kernels]
    base = min(stamps) if stamps else 0

    def us(ns: int) -> float:
        return (ns - base) / 1000.0

    ev: List[Dict[str, Any]] = []
    flow = 0
    for gi, (nodes, kernels) in enumerate(taken):
        if not nodes and not kernels:
            continue
        pid = gi + 1
        ev.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"dtorch graph {pid}"}})
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
