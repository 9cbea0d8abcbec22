"""First-Block-Cache and TeaCache for the diffusion transformers (SD3, Flux), the original DTorch's
two accelerators, switched on by ``dtorch.ExecuteConfig`` or the pipelines' arguments without
touching the models' code.

- **First-Block-Cache** (``first_block_cache_threshold``): each step runs the first block; when its
  residual (output - input) differs from the one of the last fully computed step by less than
  the threshold, relative (``mean|r - r_ref| / mean|r_ref|``; diffusers' ``FirstBlockCacheConfig``
  makes the same decision), the other blocks are skipped and
  their residual from that step is added instead.
- **TeaCache** (``teacache_threshold``): each step computes the first block's modulated input; the
  relative L1 distance to the previous step's, rescaled by TeaCache's polynomial, accumulates,
  and while the sum stays below the threshold the whole block stack is skipped (its residual of
  the last computed step added instead); computing resets the sum. The first and last steps are
  always computed.

The distance is a device value; the client reads it once per step, right after recording what it
depends on (the first block, or only its modulation for TeaCache), and decides on the host with
the reference arithmetic (docs/decisions.md, "First-Block-Cache and TeaCache").

>>> cfg = dtorch.ExecuteConfig(first_block_cache_threshold=0.1)
>>> image = pipe("a cat", execute_config=cfg, seed=0).images[0]
>>> pipe.last_cache_stats     # {"steps": 28, "skipped": 11}
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence

import numpy as np

__all__ = ["ExecuteConfig", "StepCache", "TEACACHE_FLUX_COEFFICIENTS"]

# TeaCache's rescaling polynomial for FLUX.1 (highest power first), from its authors' fit.
TEACACHE_FLUX_COEFFICIENTS = (4.98651651e02, -2.83781631e02, 5.58554382e01, -3.82021401e00, 2.64230861e-01)


@dataclass
class ExecuteConfig:
    """How a diffusion pipeline runs its transformer: ``first_block_cache_threshold`` (None: off)
    switches First-Block-Cache on, ``teacache_threshold`` TeaCache (one of the two), with
    ``teacache_coefficients`` the rescaling polynomial (highest power first; default FLUX.1's);
    ``compile_fused_ops=True`` runs ``dtorch.compiled_op``'s ops through ``torch.compile`` when
    passed to them as ``execute_config=`` (dtorch/compiled_op.py).

    >>> pipe("a cat", execute_config=dtorch.ExecuteConfig(teacache_threshold=0.4))
    """

    first_block_cache_threshold: Optional[float] = None
    teacache_threshold: Optional[float] = None
    teacache_coefficients: Optional[Sequence[float]] = None
    # dtorch.compiled_op's fused ops through torch.compile (allclose to eager, not bit-identical)
    compile_fused_ops: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.compile_fused_ops, bool):
            raise TypeError(f"compile_fused_ops must be a bool, got {type(self.compile_fused_ops).__name__}")
        for name in ("first_block_cache_threshold", "teacache_threshold"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} must be a number, got {type(value).__name__}")
            if not value >= 0:  # also refuses nan
                raise ValueError(f"{name} must be >= 0, got {value}")
        if self.first_block_cache_threshold is not None and self.teacache_threshold is not None:
            raise ValueError("use first_block_cache_threshold or teacache_threshold, not both")
        if self.teacache_coefficients is not None and len(self.teacache_coefficients) == 0:
            raise ValueError("teacache_coefficients must hold at least one coefficient")

    @property
    def enabled(self) -> bool:
        return self.first_block_cache_threshold is not None or self.teacache_threshold is not None


def execute_config(config: Optional[ExecuteConfig], first_block_cache_threshold: Optional[float],
                   teacache_threshold: Optional[float]) -> Optional[ExecuteConfig]:
    """The pipeline's ``execute_config`` merged with its threshold arguments (checked at the call);
    None when it asks for nothing (no cache, no compiled fused ops). A cache is on when the result's
    ``enabled`` is."""
    if config is not None and not isinstance(config, ExecuteConfig):
        raise TypeError(f"execute_config must be a dtorch.ExecuteConfig, got {type(config).__name__}")
    if first_block_cache_threshold is None and teacache_threshold is None:
        return config if config is not None and (config.enabled or config.compile_fused_ops) else None
    base = config or ExecuteConfig()
    return ExecuteConfig(first_block_cache_threshold if first_block_cache_threshold is not None
                         else base.first_block_cache_threshold,
                         teacache_threshold if teacache_threshold is not None else base.teacache_threshold,
                         base.teacache_coefficients, base.compile_fused_ops)


def _relative_l1(a: Any, ref: Any) -> Any:
    """``mean|a - ref| / mean|ref|`` in float32, a 0-d device value (the means of sharded tensors
    are Partial sums: reduced before the quotient)."""
    from .sd3._common import replicated

    return replicated((a - ref).float().abs().mean()) / replicated(ref.float().abs().mean())


class StepCache:
    """The state of one cached denoising loop (one per transformer call site: true CFG's separate
    negative and positive calls each have their own). A transformer's forward calls, each step:

    - First-Block-Cache: ``skip = cache.first_block(residual)`` after its first block; when
      ``skip``, ``cache.cached(name)`` is the residual of the other blocks to add; otherwise it
      runs them and calls ``cache.store(name=value, ...)``;
    - TeaCache: ``skip = cache.modulated(value)`` before its blocks; the same ``cached``/``store``
      with the residual of the whole stack.

    ``steps`` and ``skipped`` count the decisions, ``decisions`` lists them (True: skipped);
    ``distances`` holds each distance read, ``waited`` the seconds the client spent waiting for them.
    """

    def __init__(self, config: ExecuteConfig, num_steps: int) -> None:
        self.config = config
        self.num_steps = num_steps
        self.step = -1
        self.steps = self.skipped = 0
        self.distances: List[float] = []
        self.decisions: List[bool] = []
        self.waited = 0.0
        self._ref: Any = None
        self._stored: dict = {}
        self._acc = 0.0
        coefficients = config.teacache_coefficients or TEACACHE_FLUX_COEFFICIENTS
        self._rescale: Callable[[float], float] = np.poly1d(list(coefficients))

    @property
    def kind(self) -> str:
        return "fbcache" if self.config.first_block_cache_threshold is not None else "teacache"

    def begin_step(self, step: int) -> None:
        self.step = step

    def _read(self, value: Any) -> float:
        """The distance's value on the host; the time the client waited for it adds to ``waited``."""
        t0 = time.perf_counter()
        distance = float(value.to_torch())
        self.waited += time.perf_counter() - t0
        self.distances.append(distance)
        return distance

    def _decide(self, skip: bool) -> bool:
        self.steps += 1
        self.skipped += int(skip)
        self.decisions.append(skip)
        return skip

    def first_block(self, residual: Any) -> bool:
        """First-Block-Cache's decision for this step from the first block's ``residual``."""
        if self._ref is None or not self._stored:
            self._ref = residual
            return self._decide(False)
        distance = self._read(_relative_l1(residual, self._ref))
        if distance > self.config.first_block_cache_threshold:  # diffusers' FirstBlockCache: compute above it
            self._ref = residual
            return self._decide(False)
        return self._decide(True)

    def modulated(self, value: Any) -> bool:
        """TeaCache's decision for this step from the first block's modulated input ``value``."""
        previous, self._ref = self._ref, value
        if previous is None or not self._stored or self.step in (0, self.num_steps - 1):
            self._acc = 0.0
            return self._decide(False)
        distance = self._read(_relative_l1(value, previous))
        self._acc += float(self._rescale(distance))
        if self._acc < self.config.teacache_threshold:
            return self._decide(True)
        self._acc = 0.0
        return self._decide(False)

    def cached(self, name: str) -> Any:
        return self._stored[name]

    def store(self, **residuals: Any) -> None:
        self._stored.update(residuals)


def cache_stats(caches: Sequence[StepCache]) -> dict:
    """{"steps", "skipped", "decisions", "distances", "waited"} over a generation's caches (the
    pipelines' ``last_cache_stats``; ``decisions`` and ``distances`` list each cache's in turn,
    ``waited`` is the client's total wait for the distances, in seconds)."""
    return dict(steps=sum(c.steps for c in caches), skipped=sum(c.skipped for c in caches),
                decisions=[d for c in caches for d in c.decisions], distances=[d for c in caches for d in c.distances],
                waited=sum(c.waited for c in caches))
