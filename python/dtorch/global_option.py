"""``dtorch.global_option``: process-wide options, read from the environment at import.

=============================================== ======= =========================================
environment variable                            default ``GlobalOption`` attribute
=============================================== ======= =========================================
``DTORCH_COMM_TIMEOUT_SECOND``                  600     ``comm_timeout_second``
``DTORCH_DTENSOR_IN_SAME_DEVICE``               0       ``dtensor_in_same_device``
``DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE`` 8 ``num_gpu_when_enable_dtensor_in_same_device``
``DTORCH_MAIN_NODE_ADDRESS``                    unset   ``main_node_address``
=============================================== ======= =========================================

This build is single-process: collectives are in-process and there are no CUDA kernels nor
remote nodes yet, so none of these change what it does; they are kept so that code setting or
reading them runs unchanged.

>>> from dtorch.global_option import GlobalOption
>>> GlobalOption.get("comm_timeout_second")
600
>>> GlobalOption.set("comm_timeout_second", 30)
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

__all__ = ["GlobalOption"]


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} must be an integer") from None


class GlobalOption:
    """Process-wide options (class attributes; see the module's table).

    >>> GlobalOption.comm_timeout_second
    600
    """

    comm_timeout_second: int = 600
    dtensor_in_same_device: bool = False
    num_gpu_when_enable_dtensor_in_same_device: int = 8
    main_node_address: Optional[str] = None

    _TYPES: Dict[str, type] = {
        "comm_timeout_second": int,
        "dtensor_in_same_device": bool,
        "num_gpu_when_enable_dtensor_in_same_device": int,
        "main_node_address": str,
    }

    def __init__(self) -> None:
        raise TypeError("GlobalOption holds class attributes: use GlobalOption.get(name) / GlobalOption.set(name, v)")

    @classmethod
    def reload(cls) -> None:
        """Reads the options from the environment again."""
        cls.comm_timeout_second = _env_int("DTORCH_COMM_TIMEOUT_SECOND", 600)
        cls.dtensor_in_same_device = _env_int("DTORCH_DTENSOR_IN_SAME_DEVICE", 0) != 0
        cls.num_gpu_when_enable_dtensor_in_same_device = _env_int(
            "DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE", 8)
        cls.main_node_address = os.environ.get("DTORCH_MAIN_NODE_ADDRESS") or None

    @classmethod
    def get(cls, name: str) -> Any:
        """The option's value (KeyError for an unknown name)."""
        if name not in cls._TYPES:
            raise KeyError(f"unknown option {name!r}; the options are {sorted(cls._TYPES)}")
        return getattr(cls, name)

    @classmethod
    def set(cls, name: str, value: Any) -> None:
        """Sets an option (checked against its type)."""
        if name not in cls._TYPES:
            raise KeyError(f"unknown option {name!r}; the options are {sorted(cls._TYPES)}")
        want = cls._TYPES[name]
        if name == "main_node_address":
            ok = value is None or isinstance(value, str)
        elif want is bool:
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, int) and not isinstance(value, bool)
        if not ok:
            raise TypeError(f"GlobalOption {name} takes a {want.__name__}, not {type(value).__name__}")
        setattr(cls, name, value)

    @classmethod
    def as_dict(cls) -> Dict[str, Any]:
        """Every option and its value."""
        return {name: getattr(cls, name) for name in cls._TYPES}


GlobalOption.reload()
