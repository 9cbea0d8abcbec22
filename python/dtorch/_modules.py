"""Modules that are also callables: ``dtorch.tensor`` is the module ``dtorch/tensor.py`` (the
original DTorch's path of ``Tensor``) and still ``torch.tensor``'s factory when called.

>>> import dtorch
>>> from dtorch.tensor import Tensor
>>> dtorch.tensor([1, 2]).tolist()
[1, 2]
"""

from __future__ import annotations

import sys
import types
from typing import Any, Callable


class CallableModule(types.ModuleType):
    """A module whose call is ``__call_target__``'s."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__dict__["__call_target__"](*args, **kwargs)


def make_callable(module_name: str, target: Callable) -> None:
    """Makes the (already imported) module ``module_name`` call ``target`` when called."""
    module = sys.modules[module_name]
    module.__call_target__ = target
    module.__class__ = CallableModule
