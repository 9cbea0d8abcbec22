"""``dtorch.type``: the enums of the original DTorch's operator options.

>>> from dtorch.type import PaddingType, PoolingKind, OperatorFormat
>>> PaddingType.SAME, PoolingKind.MAX, OperatorFormat.NCHW
(<PaddingType.SAME: 2>, <PoolingKind.MAX: 0>, <OperatorFormat.NCHW: 'NCHW'>)
"""

import enum

from . import _C

__all__ = ["OperatorFormat", "PaddingType", "PoolingKind"]


class OperatorFormat(str, enum.Enum):
    """Memory layout of image operators' tensors: batch, channels, height, width (dtorch runs NCHW, torch's)."""

    NCHW = "NCHW"
    NHWC = "NHWC"


class PaddingType(enum.IntEnum):
    """How a convolution or pooling pads: explicit sizes, ``"valid"`` (none) or ``"same"`` (output size = input).

    The values are the C library's codes for ``padding=`` ints, ``"valid"`` and ``"same"``
    (``dt_conv_padding``).
    """

    EXPLICIT = _C.CONV_PAD_EXPLICIT
    VALID = _C.CONV_PAD_VALID
    SAME = _C.CONV_PAD_SAME


class PoolingKind(enum.IntEnum):
    """Which reduction a pooling layer takes over its window."""

    MAX = 0
    AVG = 1
