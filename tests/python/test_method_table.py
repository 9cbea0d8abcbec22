"""The Tensor method table (python/dtorch/_methods.py) is the only source of Tensor methods.

Checks that every name in the table resolves on dtorch.Tensor to exactly the listed function, that
nothing else adds methods (no setattr on Tensor in any module, _C.TensorBase immutable and unchanged
by importing the rest of the package), that the import order of dtorch's submodules does not change
what a method is, that each top-level name has one source module, and a sample of each family's
methods against eager torch on a one-device mesh.
"""

import importlib
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys

import pytest
import torch

import dtorch
from dtorch import _C, _methods

PKG_DIR = os.path.dirname(dtorch.__file__)
Tensor = dtorch.Tensor
TensorBase = _C.TensorBase

# Names that every Python class has in its own __dict__.
CLASS_BOOKKEEPING = {"__module__", "__qualname__", "__doc__", "__slots__", "__annotations__", "__dict__",
                     "__weakref__", "__firstlineno__", "__static_attributes__"}


def _own_names(cls):
    return {n for n in cls.__dict__ if n not in CLASS_BOOKKEEPING}


# ------------------------------------------------------------------ the table


def test_groups_are_disjoint():
    c, k, p = set(_methods.C_METHODS), set(_methods.CLASS_METHODS), set(_methods.PY_METHODS)
    assert len(c) == len(_methods.C_METHODS) and len(k) == len(_methods.CLASS_METHODS)
    assert not (c & k) and not (c & p) and not (k & p)


def test_every_py_method_resolves_to_the_listed_function():
    for name, fn in _methods.PY_METHODS.items():
        assert Tensor.__dict__[name] is fn, name
        assert inspect.getattr_static(Tensor, name) is fn, name


def test_every_c_method_resolves_to_the_type_s_own():
    for name in _methods.C_METHODS:
        impl = TensorBase.__dict__[name]
        assert inspect.getattr_static(Tensor, name) is impl, name
        assert name not in Tensor.__dict__, f"{name} is shadowed on Tensor"


def test_the_classes_have_exactly_the_table_s_names():
    assert _own_names(Tensor) == set(_methods.CLASS_METHODS) | set(_methods.PY_METHODS)
    public_base = {n for n in TensorBase.__dict__ if not (n.startswith("__") and n.endswith("__"))}
    assert public_base == set(_methods.C_METHODS)


def test_sample_names_come_from_their_family():
    assert Tensor.sum.__module__ == "dtorch._ops_reduce"
    assert Tensor.view.__module__ == "dtorch._ops_views"
    assert Tensor.sort.__module__ == "dtorch._ops_sort_scan"
    assert Tensor.softmax.__module__ == "dtorch._ops_nn"
    assert Tensor.mm.__module__ == "dtorch._ops_linalg"
    assert Tensor.to.__module__ == "dtorch._ops_elementwise"
    assert type(inspect.getattr_static(Tensor, "add")).__name__ == "method_descriptor"
    assert type(inspect.getattr_static(Tensor, "matmul")).__name__ == "method_descriptor"


# ------------------------------------------------------------------ no other source


def _sources():
    for root, _, files in os.walk(PKG_DIR):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(root, f)
                with open(path, encoding="utf-8") as fh:
                    yield os.path.relpath(path, PKG_DIR), fh.read()


def test_no_module_sets_attributes_on_tensor():
    bad = re.compile(r"setattr\(\s*(_?Tensor|_Tensor|_Base|TensorBase|_C\.TensorBase)\b"
                     r"|^\s*(Tensor|_Tensor|_Base|TensorBase|_C\.TensorBase)\.\w+\s*=", re.M)
    hits = [(path, m.group(0)) for path, src in _sources() for m in bad.finditer(src)]
    assert hits == []
    # and the scan itself finds what it looks for
    assert bad.search("setattr(Tensor, 'x', f)") and bad.search("Tensor.T = property(f)")


def test_tensor_base_is_immutable():
    with pytest.raises(TypeError):
        TensorBase.some_method = lambda self: None
    with pytest.raises(TypeError):
        TensorBase.add = lambda self, other: None
    assert "some_method" not in TensorBase.__dict__


def test_importing_every_submodule_changes_no_class():
    before_base = dict(TensorBase.__dict__)
    before = dict(Tensor.__dict__)
    for info in pkgutil.walk_packages([PKG_DIR], prefix="dtorch."):
        importlib.import_module(info.name)
    assert dict(TensorBase.__dict__) == before_base
    assert dict(Tensor.__dict__) == before


_DESCRIBE = r"""
import importlib, inspect, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
import dtorch
out = {}
for name in sorted(dir(dtorch.Tensor)):
    v = inspect.getattr_static(dtorch.Tensor, name)
    owner = next(c.__qualname__ for c in dtorch.Tensor.__mro__ if name in c.__dict__)
    f = getattr(v, "fget", None) or getattr(v, "__func__", None) or v
    out[name] = [owner, type(v).__name__, getattr(f, "__module__", None), getattr(f, "__qualname__", None)]
top = {n: getattr(getattr(dtorch, n), "__module__", None) for n in dtorch.__all__}
print(json.dumps([out, top]))
"""


def _describe(*first):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(PKG_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", _DESCRIBE, *first], capture_output=True, text=True, env=env,
                       timeout=240)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_import_order_does_not_change_methods():
    base = _describe("dtorch")
    for first in (["dtorch.nn.functional"], ["dtorch.nn.modules", "dtorch._ops_reduce"],
                  ["dtorch._ops_nn", "dtorch._ops_linalg", "dtorch._ops_views", "dtorch._ops_elementwise"]):
        assert _describe(*first) == base, first
    methods, _ = base
    assert methods["softmax"][2] == "dtorch._ops_nn" and methods["sum"][2] == "dtorch._ops_reduce"


def test_each_top_level_name_has_one_source():
    families = ["_ops_views", "_ops_reduce", "_ops_linalg", "_ops_elementwise", "_ops_sort_scan",
                "_ops_nn", "_ops_method_forms", "_factories"]
    seen = {}
    for fam in families:
        mod = importlib.import_module("dtorch." + fam)
        # The nn family's top-level names are its torch forms (its __all__ is torch.nn.functional's).
        names = mod.TORCH_FORMS if fam == "_ops_nn" else getattr(mod, "__all__", ())
        for name in names:
            assert name not in seen, f"dtorch.{name} is exported by {seen.get(name)} and {fam}"
            seen[name] = fam
            if name in ("tensor", "memory_stats"):
                continue  # the original DTorch's callable modules of those names (dtorch/__init__.py)
            assert getattr(dtorch, name) is (mod.TORCH_FORMS[name] if fam == "_ops_nn" else getattr(mod, name)), name


# ------------------------------------------------------------------ behaviour against eager torch


@pytest.fixture(scope="module")
def mesh():
    return dtorch.DeviceMesh("cpu", [0])


def _d(t, mesh):
    return dtorch.from_torch(t, device_mesh=mesh)


def _eq(a, b):
    a = a.to_torch() if isinstance(a, dtorch.Tensor) else a
    assert a.dtype == b.dtype and a.shape == b.shape, (a, b)
    assert torch.equal(a, b), (a, b)


A = torch.tensor([[1.0, -2.0, 3.5], [4.0, 0.5, -6.0]])
B = torch.tensor([[2.0, 4.0, -1.0], [0.5, 8.0, 3.0]])
INTS = torch.tensor([[3, -7, 2], [9, 4, -1]])


def test_add_method(mesh):
    x, y = _d(A, mesh), _d(B, mesh)
    _eq(x.add(y), A.add(B))
    _eq(x.add(y, alpha=2), A.add(B, alpha=2))
    _eq(x.add(3), A.add(3))
    _eq(_d(INTS, mesh).add(2.5), INTS.add(2.5))


def test_sum_method(mesh):
    x = _d(A, mesh)
    _eq(x.sum(), A.sum())
    _eq(x.sum(dim=1), A.sum(dim=1))
    _eq(x.sum(0, keepdim=True), A.sum(0, keepdim=True))
    _eq(_d(INTS, mesh).sum(dim=(0, 1)), INTS.sum(dim=(0, 1)))
    _eq(dtorch.sum(x, 1), torch.sum(A, 1))


def test_softmax_method(mesh):
    x = _d(A, mesh)
    _eq(x.softmax(-1), A.softmax(-1))
    _eq(x.softmax(0, dtype=torch.float64), A.softmax(0, dtype=torch.float64))
    _eq(x.log_softmax(1), A.log_softmax(1))


def test_view_method(mesh):
    x = _d(A, mesh)
    _eq(x.view(3, 2), A.view(3, 2))
    _eq(x.view(-1), A.view(-1))
    _eq(x.T, A.T)


def test_sort_method(mesh):
    x = _d(A, mesh)
    v, i = x.sort(dim=1)
    tv, ti = A.sort(dim=1)
    _eq(v, tv)
    _eq(i, ti)
    v, i = x.sort(dim=0, descending=True)
    tv, ti = A.sort(dim=0, descending=True)
    _eq(v, tv)
    _eq(i, ti)


def test_matmul_method(mesh):
    x, w = _d(A, mesh), _d(B.T.contiguous(), mesh)
    _eq(x.matmul(w), A.matmul(B.T))
    _eq(x @ w, A @ B.T)
    _eq(dtorch.matmul(x, w), torch.matmul(A, B.T))
    _eq(x.mm(w), A.mm(B.T))


@pytest.mark.parametrize("op", ["+", "-", "*", "/"])
def test_operators(mesh, op):
    f = eval(f"lambda a, b: a {op} b")
    x, y, n = _d(A, mesh), _d(B, mesh), _d(INTS, mesh)
    _eq(f(x, y), f(A, B))
    _eq(f(x, 3), f(A, 3))
    _eq(f(x, 2.5), f(A, 2.5))
    _eq(f(3, x), f(3, A))
    _eq(f(2.5, y), f(2.5, B))
    _eq(f(n, 2), f(INTS, 2))
    _eq(f(7, n), f(7, INTS))
    _eq(f(n, x), f(INTS, A))


def test_negation_and_in_place(mesh):
    x = _d(A, mesh)
    _eq(-x, -A)
    _eq(-_d(INTS, mesh), -INTS)
    y = _d(A, mesh)
    y += 1
    _eq(y, A + 1)
    y -= _d(B, mesh)
    _eq(y, A + 1 - B)


def test_operators_reject_torch_tensors(mesh):
    x = _d(A, mesh)
    for f in (lambda: x + A, lambda: A - x, lambda: x * A, lambda: x / A):
        with pytest.raises(TypeError, match="torch.Tensor"):
            f()
    with pytest.raises(TypeError):
        x + "a"
