"""``dtorch.explain()``: the communication each line of your code caused.

Inside ``with dtorch.explain() as e:`` every collective that dtorch lowers is
recorded against the user source line of the op that caused it: explicit
``redistribute()`` calls and the implicit ones (a reduction such as ``max``
over a sharded dim, ``cat`` along a sharded dim, context-parallel attention's
all-to-alls (Ulysses) and ring shifts, moves between meshes). ``str(e)`` is a
table; ``e.records`` the same as data. ``DTORCH_EXPLAIN=1`` in the environment
records the whole run and prints the table (to stderr) at exit.

Work whose result is dropped is recorded: outside ``explain()`` such an op is never
computed (dead-code elimination), while it records nothing is eliminated, so
``with dtorch.explain() as e: model(ids)`` shows the forward's communication
whether or not the logits are kept (docs/decisions.md).

>>> mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("dp",))
>>> x = dtorch.ones(4, 3, device_mesh=mesh, placements=[dtorch.Shard(0)])
>>> with dtorch.explain() as e:
...     y = x.redistribute(placements=[dtorch.Replicate()])
>>> e.records[0].collective, e.records[0].mesh_dim_name, e.records[0].bytes
('all_gather', 'dp', 24)

What counts (docs/explain-and-trace.md): ``bytes`` is per device: for each
collective, the bytes of the largest input any one device contributes
(``send_recv``: the most one destination device receives from other
devices), summed over the record's ``count`` collectives. A device takes
part once in each collective (a collective along one mesh dim of a 2-D mesh
runs in every group along that dim; it counts once). Value reads
(``print``, ``to_torch``) move data to the host and are not recorded.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Dict, List, NamedTuple, Optional, Tuple

from . import _C, _graph

__all__ = ["explain", "Explain", "ExplainRecord"]

_EXPLAIN = _C.RECORD_EXPLAIN


class ExplainRecord(NamedTuple):
    """One line's communication of one kind along one mesh dim.

    ``file``/``line``: the user's call site (None/0 when unknown); ``op``: the dtorch op whose
    lowering communicated ("redistribute", "max", "scaled_dot_product_attention", ...);
    ``collective``: "all_gather", "all_reduce", "reduce_scatter", "all_to_all", "shift" (a ring
    step: each device sends its block to the next) or "send_recv" (copies between meshes);
    ``mesh_dim``: the mesh dim (None for send_recv) and ``mesh_dim_name`` its name when the mesh
    has names; ``count``: collectives; ``bytes``: bytes per device, summed over them.
    """

    file: Optional[str]
    line: int
    op: str
    collective: str
    mesh_dim: Optional[int]
    mesh_dim_name: Optional[str]
    count: int
    bytes: int


def _live_graphs():
    return [g for g in list(_graph._live_graphs) if not getattr(g, "_shut", False)]


def _sync_all() -> None:
    for g in _live_graphs():
        try:
            g.sync()
        except Exception:  # noqa: BLE001 - a shut-down graph has nothing to record
            pass


_lock = threading.RLock()  # re-entered by a graph collected while it is held
_active: List["Explain"] = []


def _take_all() -> Tuple[List[tuple], int]:
    raw: List[tuple] = []
    dropped = 0
    for g in _live_graphs():
        try:
            recs, d = _C._graph_take_explain(g)
        except Exception:  # noqa: BLE001
            continue
        raw.extend(recs)
        dropped += d
    return raw, dropped


# Open traces (profiler.Trace): each gets the records of graphs collected while it is open.
_active_traces: list = []


def _graph_ending(g) -> None:
    """Graph ``g`` is being collected while recording is on: take its records now."""
    with _lock:
        if _active:
            recs, d = _C._graph_take_explain(g)
            _distribute(recs, d)
        if _active_traces:
            nodes, kernels, d = _C._graph_take_trace(g)
            for t in _active_traces:
                t._ended.append((nodes, kernels))
                t.dropped += d


def _distribute(raw: List[tuple], dropped: int) -> None:
    """Nested or concurrent recorders each get what happened while they were open."""
    for s in _active:
        s._raw.extend(raw)
        s.dropped += dropped


class Explain:
    """The recorder ``dtorch.explain()`` returns; see the module docstring."""

    def __init__(self) -> None:
        self._raw: List[tuple] = []
        self.dropped = 0  # collectives not recorded: a buffer was full
        self._open = False

    def __enter__(self) -> "Explain":
        if self._open:
            raise RuntimeError("dtorch.explain(): this recorder is already recording")
        _sync_all()  # work issued before the with is not recorded
        with _lock:
            if _active:  # what the recorders already open saw so far is theirs alone
                _distribute(*_take_all())
            _C._record_enable(_EXPLAIN, True)
            _active.append(self)
            self._open = True
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Stops recording (what ``__exit__`` does); the records stay."""
        if not self._open:
            return
        _sync_all()  # work issued inside the with is recorded
        with _lock:
            _distribute(*_take_all())
            _active.remove(self)
            self._open = False
            _C._record_enable(_EXPLAIN, False)

    @property
    def records(self) -> List[ExplainRecord]:
        """One record per (line, op, collective, mesh dim), in the order first seen."""
        agg: Dict[tuple, List[int]] = {}
        names: Dict[tuple, Optional[str]] = {}
        for file, line, kind, md, name, op, nbytes in self._raw:
            key = (file, line, op, kind, None if md < 0 else md)
            a = agg.setdefault(key, [0, 0])
            a[0] += 1
            a[1] += nbytes
            names[key] = name or None
        return [ExplainRecord(k[0], k[1], k[2], k[3], k[4], names[k], v[0], v[1]) for k, v in agg.items()]

    def __str__(self) -> str:
        return _table(self.records, self.dropped)

    def __repr__(self) -> str:
        return f"<dtorch.Explain: {len(self.records)} records>"


def explain() -> Explain:
    """Records the communication the code inside the ``with`` causes, per source line.

    >>> with dtorch.explain() as e:
    ...     y = x.redistribute(placements=[dtorch.Replicate()])
    >>> print(e)
    """
    return Explain()


def _table(records: List[ExplainRecord], dropped: int) -> str:
    total = sum(r.count for r in records)
    head = f"dtorch.explain: {total} collective(s) from {len({(r.file, r.line) for r in records})} source line(s)"
    if not records:
        return head + "\n(no communication)"
    rows: List[Tuple[str, ...]] = [("source", "op", "collective", "mesh dim", "count", "bytes/device")]
    for r in records:
        site = f"{os.path.basename(r.file)}:{r.line}" if r.file else "?"
        md = "-" if r.mesh_dim is None else (f"{r.mesh_dim} ({r.mesh_dim_name})" if r.mesh_dim_name else str(r.mesh_dim))
        rows.append((site, r.op, r.collective, md, str(r.count), str(r.bytes)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [head]
    for row in rows:
        cells = [c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    if dropped:
        lines.append(f"({dropped} collective(s) not recorded: the record buffer was full)")
    return "\n".join(lines)


# DTORCH_EXPLAIN=1: the whole run, printed at exit (before the graphs shut down:
# atexit runs this before _graph's handler, registered earlier).
_whole_run: Optional[Explain] = None


def _print_whole_run() -> None:
    if _whole_run is None:
        return
    try:
        _whole_run.stop()
        print(_whole_run, file=sys.stderr, flush=True)
    except Exception as exc:  # noqa: BLE001 - never fail interpreter exit
        print(f"dtorch.explain: could not print the records: {exc}", file=sys.stderr)


if os.environ.get("DTORCH_EXPLAIN", "") not in ("", "0"):
    _whole_run = Explain()
    _C._record_enable(_EXPLAIN, True)  # no graph exists yet: nothing to sync
    _active.append(_whole_run)
    _whole_run._open = True
    atexit.register(_print_whole_run)
