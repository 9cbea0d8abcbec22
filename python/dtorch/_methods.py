"""The Tensor method table: every method and property of ``dtorch.Tensor``, each with the one
function that implements it. Nothing else adds a method: no family module sets attributes on
Tensor, and ``_C.TensorBase`` is an immutable type whose C methods are fixed when it is created.

Three groups, which must not overlap (checked when this module is imported):

- ``C_METHODS``: methods and properties of ``_C.TensorBase``, written in C and registered by the
  type's own method table (``python/_C/tensor.c`` for metadata and reads, the elementwise family
  in ``python/_C/ops_elementwise.c``). The operators (``+ - * / // % ** & | ^ ~ < == ...``,
  ``@``, ``+=`` ...) are that type's number and comparison slots, one C function each.
- ``CLASS_METHODS``: defined in ``class Tensor``'s body (``python/dtorch/_tensor.py``): values
  (``item``, ``tolist``, ``repr``), layout (``redistribute``), torch conveniences.
- ``PY_METHODS``: a family module's Python function, by name. ``_tensor.py`` puts exactly these
  into the class namespace when it creates ``Tensor``.

To add a method: write it in its family (C in ``python/_C/ops_<family>.c`` with a row in that
file's ``PyMethodDef`` table, or Python in ``python/dtorch/_ops_<family>.py``), then add its name
here, to ``C_METHODS`` or to ``PY_METHODS`` with the function. tests/python/test_method_table.py
checks the table against the class.

>>> import dtorch
>>> from dtorch import _methods
>>> dtorch.Tensor.sum is _methods.PY_METHODS["sum"]
True
"""

from __future__ import annotations

from . import _C
from . import _layout as _layout
from . import _ops_elementwise as _ew
from . import _ops_linalg as _linalg
from . import _ops_masked_scatter as _ms
from . import _ops_nn_top as _nn
from . import _ops_reduce as _reduce
from . import _ops_sort_scan as _sort
from . import _ops_indexing as _indexing
from . import _ops_views as _views

__all__ = ["C_METHODS", "CLASS_METHODS", "PY_METHODS"]

C_METHODS = (
    # python/_C/tensor.c: metadata (never waits) and reads
    "shape", "ndim", "dtype", "device", "device_mesh", "placements", "graph", "is_dtensor", "_id",
    "size", "dim", "numel", "nelement", "is_floating_point", "to_torch", "to_torch_async", "_local_values",
    "_local_value", "_redistribute", "matmul",
    # python/_C/ops_elementwise.c: binary (with their in-place forms and torch's aliases)
    "add", "add_", "sub", "sub_", "subtract", "mul", "mul_", "multiply", "div", "div_", "divide", "true_divide",
    "floor_divide", "floor_divide_", "remainder", "remainder_", "pow", "pow_", "maximum", "minimum",
    "eq", "eq_", "ne", "ne_", "not_equal", "lt", "lt_", "less", "le", "le_", "less_equal", "gt", "gt_", "greater",
    "ge", "ge_", "greater_equal", "logical_and", "logical_and_", "logical_or", "logical_or_", "logical_xor",
    "logical_xor_", "bitwise_and", "bitwise_and_", "bitwise_or", "bitwise_or_", "bitwise_xor", "bitwise_xor_",
    # unary
    "neg", "neg_", "negative", "abs", "abs_", "absolute", "exp", "exp_", "log", "log_", "log2", "log2_", "log10",
    "log10_", "sqrt", "sqrt_", "rsqrt", "rsqrt_", "reciprocal", "reciprocal_", "sin", "sin_", "cos", "cos_",
    "tanh", "tanh_", "sigmoid", "sigmoid_", "erf", "erf_", "erfc", "erfc_", "expm1", "expm1_", "asin", "asin_", "acos", "acos_",
    "atan", "atan_", "tan", "tan_", "sinh", "sinh_", "cosh", "cosh_", "log1p", "log1p_", "exp2", "exp2_",
    "square", "square_", "floor", "floor_", "ceil", "ceil_", "trunc", "trunc_", "fix", "sign", "sign_", "relu",
    "relu_", "isnan", "isinf", "isfinite", "logical_not", "logical_not_", "bitwise_not", "bitwise_not_",
    "round", "round_",
    # casts
    "_cast", "_alias", "half", "float", "double", "bfloat16", "int", "long", "bool", "short", "char", "byte",
    # where, masked_fill, clamp
    "where", "masked_fill", "masked_fill_", "clamp", "clamp_", "clip", "clip_", "clamp_min", "clamp_max",
)

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
    # nn (torch.softmax's signature is Tensor.softmax's: _ops_nn_top.py over nn.functional)
    "softmax": _nn.softmax, "log_softmax": _nn.log_softmax,
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
