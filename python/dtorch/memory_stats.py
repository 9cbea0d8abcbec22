"""``dtorch.memory_stats``: bytes of live values per device, by dtorch's own accounting.

``graph.get_memory_stats(device_mesh=None, reset_peak=False)`` returns a :class:`MemoryStats`;
the module is callable too: ``dtorch.memory_stats(mesh)`` is the plain-dict form
``{"cpu:0": {"current": int, "peak": int}, ...}``. The accounting is per device and process-wide
(all graphs together).

>>> stats = dtorch.default_graph.get_memory_stats(mesh)
>>> stats["cpu:0"].peak >= stats["cpu:0"].current
True
>>> stats.total_peak
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterator, Mapping, Union

import torch

from ._graph import memory_stats as _memory_stats_dict
from ._modules import make_callable

__all__ = ["MemoryStat", "MemoryStats"]


@dataclasses.dataclass(frozen=True)
class MemoryStat:
    """One device's bytes: ``current`` (live now) and ``peak`` (most live at once since the last reset).

    >>> MemoryStat("cpu:0", current=64, peak=128).allocated
    64
    """

    device: str
    current: int
    peak: int

    @property
    def allocated(self) -> int:
        """Same as ``current``."""
        return self.current

    @property
    def peak_allocated(self) -> int:
        """Same as ``peak``."""
        return self.peak


class MemoryStats(Mapping[str, MemoryStat]):
    """:class:`MemoryStat` per device, keyed by ``"cpu:0"`` (a ``torch.device`` works as a key too).

    >>> stats = MemoryStats.from_dict({"cpu:0": {"current": 0, "peak": 64}})
    >>> stats[torch.device("cpu", 0)].peak, stats.total_peak
    (64, 64)
    """

    def __init__(self, stats: Mapping[str, MemoryStat]) -> None:
        self._stats: Dict[str, MemoryStat] = dict(stats)

    @classmethod
    def from_dict(cls, d: Mapping[str, Mapping[str, int]]) -> "MemoryStats":
        """From ``dtorch.memory_stats()``'s plain form."""
        return cls({k: MemoryStat(k, int(v["current"]), int(v["peak"])) for k, v in d.items()})

    def __getitem__(self, key: Union[str, torch.device]) -> MemoryStat:
        if isinstance(key, torch.device):
            key = f"{key.type}:{key.index or 0}"
        return self._stats[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._stats)

    def __len__(self) -> int:
        return len(self._stats)

    @property
    def total_current(self) -> int:
        """Sum of ``current`` over the devices."""
        return sum(s.current for s in self._stats.values())

    @property
    def total_peak(self) -> int:
        """Sum of the per-device peaks (each device's own peak; they need not be simultaneous)."""
        return sum(s.peak for s in self._stats.values())

    @property
    def max_peak(self) -> int:
        """The largest per-device peak."""
        return max((s.peak for s in self._stats.values()), default=0)

    def to_dict(self) -> Dict[str, Dict[str, int]]:
        """The plain form of ``dtorch.memory_stats()``."""
        return {k: {"current": s.current, "peak": s.peak} for k, s in self._stats.items()}

    def __repr__(self) -> str:
        inner = ", ".join(f"{k!r}: current={s.current} peak={s.peak}" for k, s in self._stats.items())
        return f"MemoryStats({{{inner}}})"


make_callable(__name__, _memory_stats_dict)
