"""``dtorch.cuda``: CUDA helpers that work (as no-ops or False) on machines without CUDA.

>>> import dtorch.cuda
>>> dtorch.cuda.is_available() == torch.cuda.is_available()
True
>>> dtorch.cuda.nvtx.range_push("step"); dtorch.cuda.nvtx.range_pop()
"""

import torch

from . import nvtx

__all__ = ["is_available", "device_count", "nvtx"]


def is_available() -> bool:
    """Whether torch sees a usable CUDA GPU (``torch.cuda.is_available()``)."""
    return bool(torch.cuda.is_available())


def device_count() -> int:
    """The number of CUDA GPUs torch sees (0 without CUDA)."""
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
