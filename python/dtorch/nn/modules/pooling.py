"""dtorch's 2-D pooling layers: torch.nn's pooling layers on distributed tensors (no parameters).

Each layer takes torch's constructor arguments, keeps them under torch's attribute names and prints
the same ``extra_repr``; ``forward`` calls the matching ``dtorch.nn.functional`` op, so the output
equals torch's layer on the same input (bit for bit on one device). Shards of the batch and channel
dims pass through; H and W must not be sharded. Average pooling keeps a ``Partial()`` input
``Partial()``; max pooling rejects it.

``GlobalAvgPool2d`` and ``GlobalMaxPool2d`` pool all of H and W to 1x1 ([N, C, H, W] -> [N, C, 1, 1]).

>>> from dtorch.nn import MaxPool2d, GlobalAvgPool2d
>>> pool = MaxPool2d(3, stride=2, padding=1)
>>> y = GlobalAvgPool2d()(pool(x))            # [N, C, 1, 1]
"""

from __future__ import annotations

from typing import Optional

from .. import functional as F
from .module import Module

__all__ = ["MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "GlobalAvgPool2d", "GlobalMaxPool2d"]


class MaxPool2d(Module):
    """``F.max_pool2d`` with torch's arguments; ``return_indices=True`` returns (values, indices).

    >>> MaxPool2d(2)(x)                      # [N, C, H // 2, W // 2]
    """

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """``F.avg_pool2d`` with torch's arguments.

    >>> AvgPool2d(3, stride=2, padding=1, count_include_pad=False)(x)
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: Optional[int] = None) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """``F.adaptive_avg_pool2d`` to ``output_size`` (an int, or (H, W) where None keeps the input's size).

    >>> AdaptiveAvgPool2d((7, 7))(x)
    """

    def __init__(self, output_size) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool2d(Module):
    """``F.adaptive_max_pool2d`` to ``output_size``; ``return_indices=True`` returns (values, indices).

    >>> AdaptiveMaxPool2d(1)(x)
    """

    def __init__(self, output_size, return_indices: bool = False) -> None:
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def forward(self, input):
        return F.adaptive_max_pool2d(input, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class GlobalAvgPool2d(Module):
    """The mean over all of H and W: [N, C, H, W] -> [N, C, 1, 1] (``F.adaptive_avg_pool2d(x, 1)``).
    A ``Partial()`` input stays ``Partial()``.

    >>> GlobalAvgPool2d()(x).shape
    torch.Size([8, 64, 1, 1])
    """

    def forward(self, input):
        return F.adaptive_avg_pool2d(input, 1)


class GlobalMaxPool2d(Module):
    """The max over all of H and W: [N, C, H, W] -> [N, C, 1, 1] (``F.adaptive_max_pool2d(x, 1)``).

    >>> GlobalMaxPool2d()(x).shape
    torch.Size([8, 64, 1, 1])
    """

    def forward(self, input):
        return F.adaptive_max_pool2d(input, 1)
