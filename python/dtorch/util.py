"""``dtorch.util``: checking results against a reference, and timing code.

>>> from dtorch.util import TensorChecker, Benchmark
>>> checker = TensorChecker()
>>> checker.allclose(dtorch.ones(2) * 3, torch.full((2,), 3.0))
True
>>> with Benchmark("matmul") as b:
...     (x @ x).to_torch()
>>> b.elapsed_ms
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, List, Optional

import torch

from ._C import TensorBase
from ._graph import synchronize

__all__ = ["TensorChecker", "Benchmark"]


def _as_torch(x: Any, side: str) -> torch.Tensor:
    if isinstance(x, TensorBase):
        return x.to_torch()
    if isinstance(x, torch.Tensor):
        return x.detach()
    raise TypeError(f"{side}: expected a torch or dtorch tensor, got {type(x).__name__}")


class TensorChecker:
    """Compares tensors (dtorch or torch, on either side, or lists of them) three ways:

    - ``equal``: same dtype and shape and ``torch.equal`` values;
    - ``allclose``: same shape and ``torch.allclose(actual, expected, rtol, atol)``;
    - ``meanclose``: same shape and ``mean|actual - expected| <= atol + rtol * mean|expected|``
      (for low-precision results where a few elements may stray).

    Each returns True when the check holds. When it fails it raises AssertionError with the
    details if ``raise_on_fail`` (the default), else records the message in ``failures`` and
    returns False.

    >>> TensorChecker(raise_on_fail=False).equal(dtorch.ones(2), torch.zeros(2))
    False
    """

    def __init__(self, rtol: float = 1e-5, atol: float = 1e-8, raise_on_fail: bool = True,
                 name: Optional[str] = None) -> None:
        self.rtol = rtol
        self.atol = atol
        self.raise_on_fail = raise_on_fail
        self.name = name
        self.failures: List[str] = []

    def _pairs(self, actual: Any, expected: Any):
        if isinstance(actual, (list, tuple)) or isinstance(expected, (list, tuple)):
            if not (isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple))):
                return None, "one side is a list and the other is not"
            if len(actual) != len(expected):
                return None, f"the lists have different lengths: {len(actual)} vs {len(expected)}"
            return list(zip(actual, expected)), None
        return [(actual, expected)], None

    def _run(self, kind: str, actual: Any, expected: Any, test: Callable) -> bool:
        pairs, why = self._pairs(actual, expected)
        if why is None:
            for i, (a, e) in enumerate(pairs):
                a, e = _as_torch(a, "actual"), _as_torch(e, "expected")
                if a.shape != e.shape:
                    why = f"shapes differ: {tuple(a.shape)} vs {tuple(e.shape)}"
                else:
                    why = test(a.cpu(), e.cpu())
                if why is not None:
                    if len(pairs) > 1:
                        why = f"element {i}: {why}"
                    break
        if why is None:
            return True
        msg = f"{self.name + ': ' if self.name else ''}{kind} check failed: {why}"
        if self.raise_on_fail:
            raise AssertionError(msg)
        self.failures.append(msg)
        return False

    def equal(self, actual: Any, expected: Any) -> bool:
        """Same dtype, shape and values (``torch.equal``)."""
        def test(a, e):
            if a.dtype != e.dtype:
                return f"dtypes differ: {a.dtype} vs {e.dtype}"
            if not torch.equal(a, e):
                return f"values differ\nactual:\n{a}\nexpected:\n{e}"
            return None
        return self._run("equal", actual, expected, test)

    def allclose(self, actual: Any, expected: Any, rtol: Optional[float] = None, atol: Optional[float] = None,
                 equal_nan: bool = False) -> bool:
        """``torch.allclose`` after promoting both sides to a common dtype (float64 for floats)."""
        rtol = self.rtol if rtol is None else rtol
        atol = self.atol if atol is None else atol

        def test(a, e):
            a, e = _common(a, e)
            if not torch.allclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan):
                diff = (a - e).abs()
                return (f"values are not close (rtol={rtol}, atol={atol}); max abs difference "
                        f"{diff.max().item() if diff.numel() else 0}")
            return None
        return self._run("allclose", actual, expected, test)

    def meanclose(self, actual: Any, expected: Any, rtol: Optional[float] = None,
                  atol: Optional[float] = None) -> bool:
        """The mean absolute difference is within ``atol + rtol * mean(|expected|)``."""
        rtol = self.rtol if rtol is None else rtol
        atol = self.atol if atol is None else atol

        def test(a, e):
            a, e = _common(a, e)
            if a.numel() == 0:
                return None
            mean_diff = (a - e).abs().mean().item()
            bound = atol + rtol * e.abs().mean().item()
            if not mean_diff <= bound:
                return f"mean abs difference {mean_diff} exceeds {bound} (rtol={rtol}, atol={atol})"
            return None
        return self._run("meanclose", actual, expected, test)


def _common(a: torch.Tensor, e: torch.Tensor):
    if a.is_floating_point() or e.is_floating_point() or a.is_complex() or e.is_complex():
        dtype = torch.complex128 if (a.is_complex() or e.is_complex()) else torch.float64
    else:
        dtype = torch.float64  # integers and bools compare as numbers
    return a.to(dtype), e.to(dtype)


class Benchmark:
    """Wall-clock timing that waits for dtorch's asynchronous work.

    As a context manager it times its block (``sync()`` runs at the start and at the end so
    queued work is inside the measurement); ``run(fn, warmup, repeat)`` times calls of ``fn``
    and returns the per-call milliseconds, keeping ``mean_ms`` and ``median_ms``.

    >>> with Benchmark("step") as b:
    ...     y = model(x)
    >>> times = Benchmark("step").run(lambda: model(x), warmup=2, repeat=10)
    """

    def __init__(self, name: str = "", sync: Optional[Callable[[], None]] = None, verbose: bool = False) -> None:
        self.name = name
        self.verbose = verbose
        self._sync = sync
        self.elapsed_ms: Optional[float] = None
        self.times_ms: List[float] = []
        self._start = 0.0

    def sync(self) -> None:
        """Waits for all work issued on every live graph (or calls the ``sync`` given)."""
        if self._sync is not None:
            self._sync()
        else:
            synchronize()

    def __enter__(self) -> "Benchmark":
        self.sync()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.sync()
        self.elapsed_ms = (time.perf_counter() - self._start) * 1e3
        self.times_ms.append(self.elapsed_ms)
        if self.verbose:
            print(f"{self.name or 'benchmark'}: {self.elapsed_ms:.3f} ms")

    def run(self, fn: Callable[[], Any], warmup: int = 1, repeat: int = 10) -> List[float]:
        """Calls ``fn`` ``warmup`` times untimed, then ``repeat`` times timed; returns the times (ms)."""
        if repeat < 1:
            raise ValueError(f"repeat must be >= 1, got {repeat}")
        for _ in range(warmup):
            fn()
        self.sync()
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            self.sync()
            times.append((time.perf_counter() - start) * 1e3)
        self.times_ms = times
        self.elapsed_ms = sum(times)
        if self.verbose:
            print(f"{self.name or 'benchmark'}: mean {self.mean_ms:.3f} ms, median {self.median_ms:.3f} ms "
                  f"over {repeat} runs")
        return times

    @property
    def mean_ms(self) -> float:
        """Mean of the recorded times (ms)."""
        return statistics.fmean(self.times_ms) if self.times_ms else float("nan")

    @property
    def median_ms(self) -> float:
        """Median of the recorded times (ms)."""
        return statistics.median(self.times_ms) if self.times_ms else float("nan")

    def __repr__(self) -> str:
        return f"<Benchmark {self.name!r} runs={len(self.times_ms)} mean_ms={self.mean_ms:.3f}>"
