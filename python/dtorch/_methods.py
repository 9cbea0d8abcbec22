"""The Tensor method table: every method and property of ``dtorch.Tensor``, each with the one
function that implements it. Nothing else adds a method: no family module sets attributes on
Tensor, and ``_C.TensorBase`` is an immutable type whose C methods are fixed when it is created.

Three groups, which must not overlap (checked when this module is imported):

- ``C_METHODS``: methods and properties of ``_C.TensorBase``, written in C and registered by the
  type's own method table (``python/_C/tensorobject.c`` for metadata and reads, the elementwise
  family in ``python/_C/ops_elementwise.c``, whose rows come from ``dtorch_ops.def``); ``_C``
  exports their names as ``METHOD_NAMES``. The operators (``+ - * / // % ** & | ^ ~ < == ...``,
  ``@``, ``+=`` ...) are that type's number and comparison slots, one C function each.
- ``CLASS_METHODS``: defined in ``class Tensor``'s body (``python/dtorch/_tensor.py``): values
  (``item``, ``tolist``, ``repr``), layout (``redistribute``), torch conveniences.
- ``PY_METHODS``: a family module's Python function, by name. ``_tensor.py`` puts exactly these
  into the class namespace when it creates ``Tensor``.

To add a method: write it in its family (C in ``python/_C/ops_<family>.c`` with a row in that
file's ``PyMethodDef`` table, which ``C_METHODS`` then names, or Python in
``python/dtorch/_ops_<family>.py``, then add it to ``PY_METHODS`` with the function).
tests/python/test_method_table.py checks the table against the class.

>>> import dtorch
>>> from dtorch import _methods
>>> dtorch.Tensor.sum is _methods.PY_METHODS["sum"]
True
"""

from __future__ import annotations

from . import _C, _layout
from . import _ops_elementwise as _ew
from . import _ops_indexing as _indexing
from . import _ops_linalg as _linalg
from . import _ops_masked_scatter as _ms
from . import _ops_nn as _nn
from . import _ops_reduce as _reduce
from . import _ops_sort_scan as _sort
from . import _ops_views as _views

__all__ = ["C_METHODS", "CLASS_METHODS", "PY_METHODS"]

# TensorBase's own methods and properties, named by its C tables: python/_C/tensorobject.c (metadata and
# reads) and python/_C/ops_elementwise.c (the elementwise family, whose rows mostly come from
# include/dtorch/dtorch_ops.def's py columns).
C_METHODS = _C.METHOD_NAMES

CLASS_METHODS = (
    "__new__", "__init__", "__bool__", "__float__", "__int__", "__repr__", "__str__", "__torch_function__",
    "item", "tolist", "numpy", "redistribute", "redistribute_", "check_placement", "data", "detach", "detach_",
    "requires_grad", "is_cuda", "is_cpu", "is_contiguous", "_to_device_type", "cpu", "cuda", "type",
    "full_tensor", "element_size",
)

PY_METHODS = {
    # views and shape (_ops_views.py)
    "view": _views._view, "reshape": _views._reshape, "view_as": _views._view_as, "reshape_as": _views._view_as,
    "flatten": _views._flatten, "unflatten": _views._unflatten, "squeeze": _views._squeeze,
    "unsqueeze": _views._unsqueeze, "permute": _views._permute, "transpose": _views._transpose, "t": _views._t,
    "swapaxes": _views._transpose, "swapdims": _views._transpose, "movedim": _views._movedim,
    "moveaxis": _views._movedim, "expand": _views._expand, "expand_as": _views._expand_as,
    "repeat": _views._repeat, "repeat_interleave": _views._repeat_interleave, "contiguous": _views._contiguous,
    "clone": _views._clone, "copy_": _views._copy_, "narrow": _views._narrow, "select": _views._select,
    "split": _views._split, "chunk": _views._chunk, "unbind": _views._unbind, "tril": _views._tril,
    "triu": _views._triu, "flip": _views._flip, "roll": _views._roll, "__getitem__": _indexing._getitem,
    "__setitem__": _indexing._setitem, "__iter__": _indexing._iter,
    "T": property(_views._T, doc="The dims reversed (x.permute(n-1, ..., 0))."),
    "mT": property(_views._mT, doc="The last two dims swapped."),
    # masked_scatter (_ops_masked_scatter.py)
    "masked_scatter": _ms._masked_scatter, "masked_scatter_": _ms._masked_scatter_,
    # reductions (_ops_reduce.py): x.mean(dim=1) is dtorch.mean(x, dim=1)
    "sum": _reduce.sum, "mean": _reduce.mean, "prod": _reduce.prod, "amax": _reduce.amax, "amin": _reduce.amin,
    "max": _reduce.max, "min": _reduce.min, "argmax": _reduce.argmax, "argmin": _reduce.argmin,
    "any": _reduce.any, "all": _reduce.all,
    # linear algebra (_ops_linalg.py)
    "mm": _linalg.mm, "bmm": _linalg.bmm, "outer": _linalg.outer, "ger": _linalg.ger,
    # sort and scan (_ops_sort_scan.py)
    "sort": _sort.sort, "argsort": _sort.argsort, "topk": _sort.topk, "cumsum": _sort.cumsum,
    "nonzero": _sort.nonzero,
    # elementwise, the parts written in Python (_ops_elementwise.py)
    "to": _ew._to, "type_as": _ew._type_as, "equal": _ew._equal,
    # nn (torch.softmax's signature is Tensor.softmax's: the nn family's torch forms, _ops_nn.py)
    "softmax": _nn.TORCH_FORMS["softmax"], "log_softmax": _nn.TORCH_FORMS["log_softmax"],
    # layout (_layout.py)
    "redistribute_by_dict": _layout.redistribute_by_dict, "redistribute_like": _layout.redistribute_like,
}


def _check_table() -> None:
    """The groups are disjoint and C_METHODS is exactly _C.TensorBase's own methods and properties."""
    names = list(C_METHODS) + list(CLASS_METHODS) + list(PY_METHODS)
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ImportError(f"dtorch._methods: {dup} listed twice")
    base = {n for n in _C.TensorBase.__dict__ if not (n.startswith("__") and n.endswith("__"))}
    if base != set(C_METHODS):
        raise ImportError(f"dtorch._methods: C_METHODS is out of step with _C.TensorBase: missing "
                          f"{sorted(base - set(C_METHODS))}, not in C {sorted(set(C_METHODS) - base)}")


_check_table()
