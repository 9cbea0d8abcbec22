"""``dtorch.cuda.nvtx``: NVTX ranges for profilers (Nsight Systems).

With a usable CUDA GPU these forward to ``torch.cuda.nvtx``; without one they do nothing
(``range_push``/``range_pop`` return -1, as nothing was pushed).

>>> from dtorch.cuda import nvtx
>>> nvtx.range_push("forward"); y = model(x); nvtx.range_pop()
>>> nvtx.module_register_nvtx(model)   # one range per submodule call
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch

__all__ = ["range_push", "range_pop", "mark", "module_register_nvtx"]


def _nvtx():
    """torch.cuda.nvtx when CUDA is usable, else None."""
    return torch.cuda.nvtx if torch.cuda.is_available() else None


def range_push(msg: str) -> int:
    """Opens a nested range named ``msg``; returns its depth (-1 without CUDA)."""
    n = _nvtx()
    return n.range_push(msg) if n is not None else -1


def range_pop() -> int:
    """Closes the innermost range; returns the depth it had (-1 without CUDA)."""
    n = _nvtx()
    return n.range_pop() if n is not None else -1


def mark(msg: str) -> None:
    """An instantaneous marker named ``msg``."""
    n = _nvtx()
    if n is not None:
        n.mark(msg)


def _ranged(forward, label: str):
    """``forward`` inside a range named ``label``."""

    @functools.wraps(forward)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        range_push(label)
        try:
            return forward(*args, **kwargs)
        finally:
            range_pop()

    return wrapped


def module_register_nvtx(module: Any, name: Optional[str] = None) -> Any:
    """Wraps the ``forward`` of ``module`` and of each submodule in a range named after its path
    (``"model.layers.0.attn"``). Returns ``module``. Without CUDA nothing changes."""
    if _nvtx() is None:
        return module
    root = name if name is not None else type(module).__name__
    named = module.named_modules() if hasattr(module, "named_modules") else [("", module)]
    for path, m in named:
        if getattr(m, "_dtorch_nvtx", False):
            continue
        label = f"{root}.{path}" if path else root
        wrapped = _ranged(m.forward, label)
        object.__setattr__(m, "forward", wrapped)
        object.__setattr__(m, "_dtorch_nvtx", True)
    return module
