"""A generated sweep of the torch-function table (issue 31, item 2): every torch callable that
dtorch implements -- ``torch.<name>``, ``torch.nn.functional.<name>`` and ``torch.Tensor.<name>``
for each name dtorch has too -- called with dtorch tensors reaches dtorch's function (torch hands
``__torch_function__`` exactly the table's key) and gives torch's result: bit-identical on one
device, allclose with every replica equal on 1-D, uneven and 2-D meshes. The entries are taken from
the names, not listed here, so a new dtorch function is swept as soon as it exists; the sweep fails
if it has no way to call one (add a recipe to ``RECIPES``).

Not swept, by rule (computed, not listed): factories (``torch.zeros(2, 3)`` has no tensor argument,
so torch never asks dtorch) and ``torch.Tensor``'s C methods called through the class
(``torch.Tensor.sum(x)``: CPython checks ``self`` is a ``torch._C.TensorBase`` before torch's
dispatch runs, and raises its own TypeError; ``x.sum()`` is dtorch's method)."""

import types
import unittest

import torch
import torch.nn.functional as TF

import dtorch
import dtorch.nn.functional as DF
from dtorch import Replicate, Shard
from dtorch.test.test_util import assert_replicas_equal

from helpers import CPU1, CPU2x2, CPU3

TESTED_OPS = []  # the mapping; every op it reaches has its own family tests

# Random-valued results: compared by shape and dtype only.
RANDOM = frozenset({"empty_like", "rand_like", "randn_like", "randint_like"})


def entries():
    """(where, name, torch callable, dtorch callable) for every name that both sides have, in the
    order ``_torch_function._build`` adds them; each torch callable once."""
    seen = set()
    out = []
    sources = [("torch.nn.functional", TF, DF, DF.__all__),
               ("torch", torch, dtorch, [n for n in dir(dtorch) if not n.startswith("_")]),
               ("torch.Tensor", torch.Tensor, dtorch.Tensor, dir(dtorch.Tensor))]
    for where, tmod, dmod, names in sources:
        for name in names:
            if not hasattr(tmod, name):
                continue
            tf, df = getattr(tmod, name), getattr(dmod, name)
            if isinstance(df, types.ModuleType) or isinstance(tf, type) or not callable(tf) or not callable(df):
                continue
            if where == "torch.Tensor" and name.startswith("__") and not _operator_dunder(name):
                continue
            try:
                if tf in seen:
                    continue
                seen.add(tf)
            except TypeError:
                continue
            out.append((where, name, tf, df))
    return out


def _operator_dunder(name):
    from dtorch import _torch_function
    return name in _torch_function._OPERATOR_DUNDERS


def excluded(where, name, tf):
    """Why an entry is not swept (None: it is)."""
    if where == "torch" and getattr(getattr(dtorch, name), "__module__", "") == "dtorch._factories" \
            and not name.endswith("_like"):
        return "factory: no tensor argument"
    if where == "torch.Tensor" and isinstance(tf, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        return "torch.Tensor's C method through the class"
    return None


def inputs():
    """The torch tensors the recipes take (dim 0 of size 5: uneven over 3 devices)."""
    g = torch.Generator().manual_seed(0)
    return {
        "x": torch.rand(5, 6, generator=g) + 0.5,
        "y": torch.rand(5, 6, generator=g) + 0.5,
        "z": torch.rand(5, 6, generator=g) + 0.5,
        "w": torch.rand(6, 3, generator=g),
        "i": torch.randint(0, 8, (5, 6), generator=g),
        "j": torch.randint(0, 8, (5, 6), generator=g),
        "m": torch.rand(5, 6, generator=g) > 0.5,
        "v": torch.rand(5, generator=g),
        "u": torch.rand(6, generator=g),
        "b3": torch.rand(5, 2, 6, generator=g),
        "c3": torch.rand(5, 6, 3, generator=g),
        "img": torch.rand(5, 4, 6, 6, generator=g),
        "ker": torch.rand(3, 4, 3, 3, generator=g),
        "ch": torch.rand(4, generator=g) + 0.5,
        "ch2": torch.rand(4, generator=g),
        "idx": torch.randint(0, 8, (5,), generator=g),
        "emb": torch.rand(8, 6, generator=g),
    }


def generic(t):
    """Calls tried in order for an entry with no recipe; ``t`` maps input names to the side's tensors."""
    x, y, z = t["x"], t["y"], t["z"]
    return [((x,), {}), ((x, y), {}), ((x, y, z), {}), (([x, y],), {}), (([x, y], 1), {}), ((x, 0), {}),
            ((x, 1), {}), ((x, -1), {}), ((x, 0, 1), {}), ((x, (6, 5)), {}), ((x, [30]), {}), ((x, (1, 0)), {}),
            ((x, 1, 2), {}), ((x, [0]), {}), ((x, 1.5), {}), ((x, 0.6, 1.2), {}), ((x, 2), {}),
            ((x, y, 0.5), {}), ((x, torch.float64), {})]


def RECIPES(t):
    """Calls for the entries the generic ones do not fit (torch refuses them all)."""
    x, i, j, m = t["x"], t["i"], t["j"], t["m"]
    img = t["img"]
    return {
        "bitwise_and": [((i, j), {})], "bitwise_or": [((i, j), {})], "bitwise_xor": [((i, j), {})],
        "bitwise_not": [((i,), {})], "__and__": [((i, j), {})], "__or__": [((i, j), {})],
        "__xor__": [((i, j), {})], "__invert__": [((i,), {})], "__lshift__": [((i, 2), {})],
        "__rshift__": [((i, 1), {})], "__rlshift__": [((i, 2), {})], "__rrshift__": [((i, 1), {})],
        "bmm": [((t["b3"], t["c3"]), {})], "matmul": [((x, t["w"]), {})], "mm": [((x, t["w"]), {})],
        "outer": [((t["v"], t["u"]), {})], "ger": [((t["v"], t["u"]), {})],
        "where": [((m, x, t["y"]), {}), ((m, x, 0.0), {})],
        "masked_fill": [((x, m, 0.25), {})], "masked_scatter": [((x, m, t["y"]), {})],
        "unflatten": [((x, 1, (2, 3)), {})], "narrow": [((x, 1, 2, 3), {})],
        "layer_norm": [((x, (6,)), {})], "rms_norm": [((x, (6,)), {})], "einsum": [(("ij,jk->ik", x, t["w"]), {})], "permute": [((x, (1, 0)), {})],
        "dropout": [((x, 0.5, False), {}), ((x,), {"p": 0.5, "training": False})],
        "conv2d": [((img, t["ker"]), {"padding": 1})],
        "embedding": [((t["idx"], t["emb"]), {}), ((t["emb"], t["idx"]), {})],
        "batch_norm": [((img, t["ch"], t["ch2"], t["ch"], t["ch2"]), {"training": False}),
                       ((img, t["ch"], t["ch2"], t["ch2"], t["ch"], False, 0.1, 1e-5, False), {})],
        "interpolate": [((img,), {"scale_factor": 2.0})], "pixel_shuffle": [((img, 2), {})],
        "max_pool2d": [((img, 2), {})], "max_pool2d_with_indices": [((img, 2), {})],
        "avg_pool2d": [((img, 2), {})], "adaptive_max_pool2d": [((img, (3, 3)), {})],
        "adaptive_max_pool2d_with_indices": [((img, (3, 3)), {})],
    }


def calls(name, t):
    return RECIPES(t).get(name, []) + generic(t)


def first_torch_call(name, tf, tensors):
    """The first call torch accepts, as (args, kwargs, result) over ``tensors``; None if none."""
    for args, kwargs in calls(name, tensors):
        try:
            return args, kwargs, tf(*_fresh(args), **_fresh(kwargs))
        except Exception:  # noqa: BLE001 - torch refuses this form: try the next
            continue
    return None


def _fresh(v):
    """Copies of torch tensors (in-place entries must not change the recipes' inputs)."""
    if isinstance(v, torch.Tensor):
        return v.clone()
    if isinstance(v, (list, tuple)):
        return type(v)(_fresh(e) for e in v)
    if isinstance(v, dict):
        return {k: _fresh(e) for k, e in v.items()}
    return v


def _swap(v, put):
    """``v`` with each torch tensor replaced by put(tensor)."""
    if isinstance(v, torch.Tensor):
        return put(v)
    if isinstance(v, (list, tuple)):
        return type(v)(_swap(e, put) for e in v)
    if isinstance(v, dict):
        return {k: _swap(e, put) for k, e in v.items()}
    return v


def mismatch(got, want, name, exact):
    """Why ``got`` (dtorch) is not ``want`` (torch), or None."""
    if hasattr(want, "__next__"):  # an iterator (Tensor.__iter__): its items
        want, got = list(want), list(got)
    if isinstance(want, torch.Tensor):
        if not isinstance(got, dtorch.Tensor):
            return f"returned {type(got).__name__}, not a dtorch tensor"
        g = got.to_torch()
        if g.shape != want.shape or g.dtype != want.dtype:
            return f"shape/dtype {tuple(g.shape)} {g.dtype}, torch {tuple(want.shape)} {want.dtype}"
        if name in RANDOM:
            return None
        if exact:  # bitwise, NaN where torch has NaN (acos of x > 1, ...)
            nan = torch.isnan(want) if want.is_floating_point() else torch.zeros_like(want, dtype=torch.bool)
            same = torch.equal(torch.isnan(g) if g.is_floating_point() else nan, nan) and torch.equal(g[~nan], want[~nan])
            return None if same else "values differ"
        ok = torch.allclose(g.double(), want.double(), rtol=1e-5, atol=1e-5, equal_nan=True)
        return None if ok else "values differ"
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return f"returned {got!r}, torch {len(want)} results"
        for g, w in zip(got, want):
            why = mismatch(g, w, name, exact)
            if why:
                return why
        return None
    return None if got == want else f"{got!r}, torch {want!r}"


def dtorch_tensors(got):
    if isinstance(got, dtorch.Tensor):
        return [got]
    if isinstance(got, (tuple, list)):
        return [t for g in got for t in dtorch_tensors(g)]
    return []


class Reached(Exception):
    pass


class TestSweep(unittest.TestCase):
    def test_the_entries_are_the_table(self):
        # The sweep's entries are exactly the table's keys: nothing in the table escapes it.
        from dtorch import _torch_function
        table = _torch_function.implemented()
        got = {tf: df for _, _, tf, df in entries()}
        self.assertEqual(set(got), set(table))
        for tf, df in got.items():
            self.assertIs(table[tf], df)

    def test_every_entry_dispatches_to_its_key(self):
        """torch passes __torch_function__ the callable the table is keyed by, for every entry."""
        from dtorch import _torch_function
        table = _torch_function.implemented()
        seen = []

        def recorder(key):
            def record(*args, **kwargs):
                seen.append(key)
                raise Reached()
            return record

        t = inputs()
        dt = {k: dtorch.from_torch(v, CPU1) for k, v in t.items()}
        direct, missing = [], []
        _torch_function._TABLE = {k: recorder(k) for k in table}
        try:
            for where, name, tf, _ in entries():
                if excluded(where, name, tf):
                    continue
                with self.subTest(entry=f"{where}.{name}"):
                    call = first_torch_call(name, tf, t)
                    if call is None:
                        missing.append(f"{where}.{name}")
                        continue
                    args, kwargs, _ = call
                    seen.clear()
                    try:
                        tf(*_swap(args, lambda v: dt[_key(t, v)]), **_swap(kwargs, lambda v: dt[_key(t, v)]))
                    except Reached:
                        self.assertIs(seen[-1], tf)  # the key torch hands over is the table's
                    else:
                        direct.append(f"{where}.{name}")  # a Python function calling dtorch's methods
        finally:
            _torch_function._TABLE = None
        self.assertEqual(missing, [], "no recipe torch accepts: add one to RECIPES")
        # Reached without __torch_function__: torch's Python functions that only call tensor methods.
        self.assertEqual(sorted(direct), ["torch.Tensor.__iter__", "torch.nn.functional.sigmoid",
                                          "torch.nn.functional.tanh"])

    def test_one_device_bit_identical(self):
        self._sweep(None, exact=True)
        self._sweep(CPU1, exact=True)

    def test_uneven_1d_mesh(self):
        self._sweep(CPU3)

    def test_2d_mesh(self):
        self._sweep(CPU2x2)

    def _sweep(self, mesh, exact=False):
        t = inputs()
        ran, refused = 0, []
        for where, name, tf, _ in entries():
            if excluded(where, name, tf):
                continue
            with self.subTest(entry=f"{where}.{name}", mesh=mesh):
                call = first_torch_call(name, tf, t)
                self.assertIsNotNone(call, "no recipe torch accepts: add one to RECIPES")
                args, kwargs, want = call
                try:
                    got = self._call(tf, name, args, kwargs, t, mesh, shard=True)
                except dtorch.PlacementError:
                    # a sharded layout the op refuses (its family tests cover which): run it on
                    # replicas of the same mesh instead, never refused
                    self.assertIsNotNone(mesh)
                    refused.append(name)
                    got = self._call(tf, name, args, kwargs, t, mesh, shard=False)
                self.assertIsNone(mismatch(got, want, name, exact))
                for r in dtorch_tensors(got):
                    assert_replicas_equal(self, r)
                ran += 1
        self.assertGreater(ran, 150)
        self.assertLess(len(refused), 20, refused)  # most entries run on the sharded layout

    @staticmethod
    def _call(tf, name, args, kwargs, t, mesh, shard):
        dt = {k: _place(v, mesh, shard) for k, v in t.items()}
        fresh = name.endswith("_") or name.startswith("__i")  # in place: operands of their own

        def put(v):
            return _place(v.clone(), mesh, shard) if fresh else dt[_key(t, v)]

        return tf(*_swap(args, put), **_swap(kwargs, put))


def _key(t, v):
    """The name of the input ``v`` is (a recipe's tensors are the inputs themselves)."""
    for k, u in t.items():
        if u is v:
            return k
    raise KeyError("a recipe tensor that is not one of the inputs")


def _place(v, mesh, shard=True):
    """``v`` on ``mesh``: with ``shard``, rows sharded where the dim-0 size is 5 (uneven over 3
    devices), replicated on the other mesh dims; the default mesh for None."""
    if mesh is None:
        return dtorch.from_torch(v)
    shard = shard and v.ndim >= 1 and v.shape[0] == 5
    pl = [Shard(0) if shard else Replicate()] + [Replicate()] * (mesh.ndim - 1)
    return dtorch.from_torch(v, mesh, pl)


if __name__ == "__main__":
    unittest.main()
