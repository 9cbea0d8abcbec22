"""Every placement an operator's registry row refuses raises PlacementError (issue 35, item 2), and
the combinations the row accepts next to it give torch's value: the cases are generated from the
rows (``dtorch._C.op_docs()``, the text docs/operators.md prints), so a row that changes changes the
cases, and a row that refuses Partial without a case here fails ``test_every_refusing_row_is_reached``.

- Elementwise rows: a row's sections ("scalar:", "tensor / scalar:", ...) are parsed; a genuine
  Partial input (a different addend on each device, ``genuine_partial``) is accepted exactly where
  the section lists ``P->P`` or a pair such as ``(P,R)->P``, and refused (PlacementError)
  everywhere else: unary ops, casts, each binary op with (P,R), (R,P), (P,P), with a scalar on
  either side.
- The other families' rows that say "no Partial": a Partial input refused, with one call per op.
- Shards that a row refuses by dim ("no S(dim)", "no S(flipped d)", "no S(the last two dims)", ...):
  the refused dim raises, the dim next to it that the row accepts gives torch's value.

Context-parallel attention's wrong mesh dims are in test_context_parallel.py (TestWrongMeshDims).
"""

import re
import unittest

import torch
import torch.nn.functional as TF

import dtorch
import dtorch.nn.functional as F
from dtorch import Partial, Replicate, Shard
from dtorch.test.test_util import genuine_partial

from helpers import CPU2, randn

TESTED_OPS = set()  # the registry test counts the modules that test each op's values, not this one

ROWS = {name: sig for name, _family, sig, _ in dtorch._C.op_docs()}
FAMILY = {name: family for name, family, _sig, _ in dtorch._C.op_docs()}
LABEL = re.compile(r"^([a-z_ /]+): (.*)$")


def clauses(sig):
    """The row's clauses: split at each ';' outside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in sig:
        depth += (ch == "(") - (ch == ")")
        if ch == ";" and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()]


def sections(sig):
    """{label: [clauses]}: "" for the tensor form, then each "label:" section of the row."""
    out, cur = {"": []}, ""
    for clause in clauses(sig):
        m = LABEL.match(clause)
        if m:
            cur = m.group(1)
            out[cur] = []
            clause = m.group(2)
        out[cur].append(clause)
    return out


def accepts(section, form):
    """Whether the clauses of a section list `form` (like "P->P" or "(P,R)->P")."""
    return any(form in c.replace(" ", "") for c in section)


def refuses_partial(section):
    return any(c.startswith("no Partial") for c in section)


def partial(t, seed=0):
    return genuine_partial(t, CPU2, [Partial()], seed=seed)


def rep(t):
    return dtorch.from_torch(t, CPU2, [Replicate()])


def floats(*shape, seed=0):
    return (randn(*shape, seed=seed) * 4).round() / 4 + 0.5  # exact sums of pieces


CASTS = {"half": torch.float16, "float": torch.float32, "double": torch.float64, "bfloat16": torch.bfloat16,
         "int": torch.int32, "long": torch.int64, "bool": torch.bool}
INTEGER_OPS = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "remainder", "floor_divide"}


class TestElementwiseRows(unittest.TestCase):
    def expect(self, accepted, ours, ref, what):
        if accepted:
            got = ours()
            want = ref()
            torch.testing.assert_close(got.to_torch(), want, rtol=1e-5, atol=1e-5, equal_nan=True, msg=what)
        else:
            with self.assertRaises(dtorch.PlacementError, msg=what):
                ours()

    def operands(self, name):
        if name in INTEGER_OPS:
            return (torch.arange(24).reshape(4, 6) % 7 + 1, torch.arange(24).reshape(4, 6) % 5 + 1)
        return floats(4, 6, seed=1).abs() + 0.25, floats(4, 6, seed=2).abs() + 0.25

    def unary_call(self, name):
        if name in CASTS:
            return (lambda x: getattr(x, name)()), (lambda t: getattr(t, name)())
        if name == "to":
            return (lambda x: x.to(torch.float32)), (lambda t: t.to(torch.float32))
        if name == "type_as":
            return (lambda x: x.type_as(rep(torch.zeros(1)))), (lambda t: t.float())
        if name in ("clamp", "clip"):
            return (lambda x: getattr(dtorch, name)(x, min=1.0)), (lambda t: getattr(torch, name)(t, min=1.0))
        return (lambda x: getattr(dtorch, name)(x)), (lambda t: getattr(torch, name)(t))

    def test_unary_rows(self):
        n = 0
        for name, sig in ROWS.items():
            if FAMILY[name] != "elementwise" or not sig.startswith(("R->R", "as ")):
                continue
            sec = sections(ROWS["clamp"] if sig.startswith("as clamp") else sig)
            t, _ = self.operands(name)
            cast = name in CASTS or name in ("to", "type_as")
            if cast:  # a real cast: from float64 (to float32 for double())
                t = t.double() if name != "double" else t.float()
            ours, ref = self.unary_call(name)
            with self.subTest(op=name):
                x = partial(t)
                self.expect(accepts(sec[""], "P->P") and not refuses_partial(sec[""]), lambda: ours(x),
                            lambda: ref(t), name)
                n += 1
            if cast and name not in ("bool", "int", "long", "half", "bfloat16"):
                # "same dtype: any": a cast to the dtype it has keeps the Partial.
                self.assertEqual(sec.get("same dtype"), ["any"], name)
                same = t.float() if name in ("float", "to", "type_as") else t.double()
                with self.subTest(op=name, same_dtype=True):
                    x = partial(same, seed=2)
                    got = ours(x)
                    self.assertTrue(got.placements[0].is_partial(), name)
                    self.assertTrue(torch.equal(got.to_torch(), ref(same)), name)
        self.assertGreater(n, 40)

    def test_binary_rows(self):
        n = 0
        for name, sig in ROWS.items():
            if FAMILY[name] != "elementwise" or not sig.startswith("(R,R)->R,") or name in ("equal", "masked_fill"):
                continue
            sec = sections(sig)
            a, b = self.operands(name)
            fn = getattr(dtorch, name)
            ref = getattr(torch, name)
            for pa, pb in (("P", "R"), ("R", "P"), ("P", "P")):
                with self.subTest(op=name, pair=(pa, pb)):
                    x = partial(a, seed=3) if pa == "P" else rep(a)
                    y = partial(b, seed=4) if pb == "P" else rep(b)
                    ok = accepts(sec[""], f"({pa},{pb})->P")
                    self.expect(ok, lambda: fn(x, y), lambda: ref(a, b), f"{name}({pa},{pb})")
                    n += 1
            # A Python number on the right ("scalar:" or "tensor / scalar:") and on the left
            # ("scalar / tensor:"; else as "scalar:").
            right = sec.get("tensor / scalar", sec.get("scalar"))
            left = sec.get("scalar / tensor", sec.get("scalar"))
            s = 3 if name in INTEGER_OPS else 1.5
            if right is not None:
                with self.subTest(op=name, form="tensor, scalar"):
                    x = partial(a, seed=5)
                    self.expect(accepts(right, "P->P"), lambda: fn(x, s), lambda: ref(a, s), f"{name}(P, {s})")
            if left is not None and name in ("add", "sub", "mul", "div"):
                with self.subTest(op=name, form="scalar, tensor"):
                    x = partial(a, seed=6)
                    rfn = {"add": lambda: s + x, "sub": lambda: s - x, "mul": lambda: s * x, "div": lambda: s / x}[name]
                    rref = {"add": lambda: s + a, "sub": lambda: s - a, "mul": lambda: s * a, "div": lambda: s / a}[name]
                    self.expect(accepts(left, "P->P"), rfn, rref, f"{name}({s}, P)")
        self.assertGreater(n, 50)

    def test_div_rounding_modes(self):
        sec = sections(ROWS["div"])
        a, b = floats(4, 6, seed=1), floats(4, 6, seed=2).abs() + 1
        for mode in ("trunc", "floor"):
            with self.subTest(mode=mode):
                self.assertTrue(refuses_partial(sec["rounding_mode trunc/floor"]))
                x = partial(a, seed=7)
                with self.assertRaises(dtorch.PlacementError):
                    dtorch.div(x, rep(b), rounding_mode=mode)
                with self.assertRaises(dtorch.PlacementError):
                    dtorch.div(x, 2.0, rounding_mode=mode)

    def test_where_and_masked_fill(self):
        a, b = floats(4, 6, seed=1), floats(4, 6, seed=2)
        cond = a > 0.5
        for name in ("where", "masked_fill"):
            self.assertTrue(refuses_partial(sections(ROWS[name])[""]), name)
        for i in (1, 2):  # a Partial condition cannot be made: a comparison of a Partial is refused
            args = [rep(cond), rep(a), rep(b)]
            args[i] = partial([cond, a, b][i], seed=8)
            with self.subTest(where_partial_input=i):
                with self.assertRaises(dtorch.PlacementError):
                    dtorch.where(*args)
        with self.assertRaises(dtorch.PlacementError):
            partial(a, seed=9).masked_fill(rep(cond), 0.0)
        torch.testing.assert_close(dtorch.where(rep(cond), rep(a), rep(b)).to_torch(), torch.where(cond, a, b))


# One call per row of the other families that refuses Partial; x is [4, 6, 5, 5] float.
CALLS = {
    "prod": lambda x: x.prod(dim=1), "amax": lambda x: x.amax(dim=1), "amin": lambda x: x.amin(dim=1),
    "max": lambda x: x.max(dim=1), "min": lambda x: x.min(dim=1), "argmax": lambda x: x.argmax(dim=1),
    "argmin": lambda x: x.argmin(dim=1), "any": lambda x: (x > 0).any(dim=1), "all": lambda x: (x > 0).all(dim=1),
    "relu": F.relu, "gelu": F.gelu, "silu": F.silu, "leaky_relu": F.leaky_relu, "elu": F.elu,
    "softmax": lambda x: F.softmax(x, dim=1), "log_softmax": lambda x: F.log_softmax(x, dim=1),
    "layer_norm": lambda x: F.layer_norm(x, [5]), "rms_norm": lambda x: F.rms_norm(x, [5]),
    "group_norm": lambda x: F.group_norm(x, 2), "batch_norm": lambda x: F.batch_norm(x, rep(torch.zeros(6)), rep(torch.ones(6)), training=False),
    "sort": lambda x: x.sort(dim=1), "argsort": lambda x: x.argsort(dim=1), "topk": lambda x: x.topk(2, dim=1),
    "max_pool2d": lambda x: F.max_pool2d(x, 2), "adaptive_max_pool2d": lambda x: F.adaptive_max_pool2d(x, 2),
}


class TestOtherRows(unittest.TestCase):
    def test_every_refusing_row_is_reached(self):
        refusing = {n for n, s in ROWS.items() if FAMILY[n] != "elementwise" and refuses_partial(sections(s)[""])}
        self.assertEqual(refusing - set(CALLS), set(), "rows that refuse Partial with no case in CALLS")
        self.assertEqual(set(CALLS) - refusing, set(), "CALLS names an op whose row accepts Partial")

    def test_partial_refused(self):
        t = floats(4, 6, 5, 5, seed=3)
        for name, call in CALLS.items():
            with self.subTest(op=name):
                x = partial(t, seed=9)
                if name in ("any", "all"):
                    # (x > 0) of a Partial is refused first: the comparison's own row.
                    with self.assertRaises(dtorch.PlacementError):
                        call(x)
                    continue
                with self.assertRaises(dtorch.PlacementError):
                    call(x)
        # The runtime keeps working: the same calls on a Replicate input give torch's values.
        x = rep(t)
        torch.testing.assert_close(F.softmax(x, dim=1).to_torch(), TF.softmax(t, dim=1))


# Shards a row refuses by dim: (op, the refused dim, an accepted dim, call, torch's call). x is
# [4, 6, 8, 8] float; rows quoted in each comment.
SHARDS = [
    # softmax/log_softmax: "S(d)->S(d) for d != dim; no S(dim)"
    ("softmax", 1, 0, lambda x: F.softmax(x, dim=1), lambda t: TF.softmax(t, dim=1)),
    ("log_softmax", 3, 2, lambda x: F.log_softmax(x, dim=-1), lambda t: TF.log_softmax(t, dim=-1)),
    # flip: "no S(flipped d)"; roll: "no S(rolled d)"
    ("flip", 2, 1, lambda x: x.flip(2), lambda t: t.flip(2)),
    ("roll", 0, 1, lambda x: x.roll(1, 0), lambda t: t.roll(1, 0)),
    # pixel_shuffle: "no S(the last three dims)"
    ("pixel_shuffle", 1, 0, lambda x: F.pixel_shuffle(x[:, :4], 2), lambda t: TF.pixel_shuffle(t[:, :4], 2)),
    # pad: "no S(padded d)"
    ("pad", 3, 1, lambda x: F.pad(x, (1, 1)), lambda t: TF.pad(t, (1, 1))),
    # interpolate: "no S(spatial d)"
    ("interpolate", 2, 1, lambda x: F.interpolate(x, scale_factor=2.0), lambda t: TF.interpolate(t, scale_factor=2.0)),
    # pools: "no S(the last two dims)"
    ("max_pool2d", 3, 1, lambda x: F.max_pool2d(x, 2), lambda t: TF.max_pool2d(t, 2)),
    ("avg_pool2d", 2, 0, lambda x: F.avg_pool2d(x, 2), lambda t: TF.avg_pool2d(t, 2)),
    ("adaptive_avg_pool2d", 3, 0, lambda x: F.adaptive_avg_pool2d(x, 2), lambda t: TF.adaptive_avg_pool2d(t, 2)),
    ("adaptive_max_pool2d", 2, 1, lambda x: F.adaptive_max_pool2d(x, 2), lambda t: TF.adaptive_max_pool2d(t, 2)),
    # layer_norm: "no Shard of a normalized dim"
    ("layer_norm", 3, 2, lambda x: F.layer_norm(x, [8]), lambda t: TF.layer_norm(t, [8])),
    # squeeze: "no S(removed d)" -- a size-1 dim cannot be split over 2 devices, so none here
    # repeat_interleave: "int repeats: ... S(dim)->S(dim) when every device's output block is its input
    # block repeated" (accepted), tensor repeats: "no S(dim)"
    ("repeat_interleave", 1, 0, lambda x: x.repeat_interleave(rep(torch.tensor([1, 2, 1, 2, 1, 2])), dim=1),
     lambda t: t.repeat_interleave(torch.tensor([1, 2, 1, 2, 1, 2]), dim=1)),
]


class TestShardRows(unittest.TestCase):
    def test_refused_dims(self):
        t = floats(4, 6, 8, 8, seed=5)
        for name, bad, good, call, ref in SHARDS:
            self.assertIn(name, ROWS)
            self.assertRegex(ROWS[name], r"no S\(|no Shard", name)
            with self.subTest(op=name, shard=bad):
                with self.assertRaises(dtorch.PlacementError):
                    call(dtorch.from_torch(t, CPU2, [Shard(bad)]))
            with self.subTest(op=name, shard=good):
                got = call(dtorch.from_torch(t, CPU2, [Shard(good)]))
                torch.testing.assert_close(got.to_torch(), ref(t), rtol=1e-5, atol=1e-5)


BLOCK_CLAUSE = "S(d)->S(d') when every device's block of the input is, in row-major order, the block the result's torch.chunk split gives it"


def chunks(t, n, dim):
    """torch.chunk's n blocks of t along dim, empty ones added where chunk gives fewer (a device's share)."""
    got = list(torch.chunk(t, n, dim))
    return got + [t.narrow(dim, 0, 0)] * (n - len(got))


def leading_dim(shape, d, result):
    """The result dim holding input dim d's leading part: the first whose stride is below d's span."""
    span = 1
    for s in shape[d:]:
        span *= s
    for j in range(len(result)):
        stride = 1
        for s in result[j + 1:]:
            stride *= s
        if stride < span:
            return j
    raise AssertionError((shape, d, result))


def block_rule(shape, d, result, n):
    """The views rows' clause, read literally: S(d) -> S(d') when every device's input block, in
    row-major order, is the block torch.chunk gives it of the result along d' (None: refused)."""
    ids = torch.arange(torch.Size(shape).numel())
    j = leading_dim(shape, d, result)
    ins, outs = chunks(ids.reshape(shape), n, d), chunks(ids.reshape(result), n, j)
    ok = all(torch.equal(a.flatten(), b.flatten()) for a, b in zip(ins, outs))
    return j if ok else None


def factorizations(n, most=3):
    """Ordered factorizations of n into at most ``most`` factors > 1."""
    if n == 1:
        return [()]
    out = []
    for f in range(2, n + 1):
        if n % f == 0:
            out += [(f,) + rest for rest in factorizations(n // f, most - 1) if most > 1 or n == f]
    return [t for t in out if len(t) <= most]


class TestViewBlockRows(unittest.TestCase):
    """view, reshape, flatten and unflatten: the rows' "when every device's block ..." clause decides
    each case (accepted: torch's value and S(d'); refused: PlacementError), over every reshape of a
    few shapes, each sharded dim, on 2 and 3 devices (uneven blocks included)."""

    def check(self, call, ref, t, d, mesh):
        result = tuple(ref(t).shape)
        j = block_rule(tuple(t.shape), d, result, mesh.size())
        x = dtorch.from_torch(t, mesh, [Shard(d)])
        if j is None:
            with self.assertRaises(dtorch.PlacementError):
                call(x)
            return 0
        got = call(x)
        self.assertEqual(tuple(got.placements), (Shard(j),))
        self.assertTrue(torch.equal(got.to_torch(), ref(t)))
        return 1

    def test_rows_say_it(self):
        for name in ("view", "reshape", "flatten", "unflatten"):
            self.assertIn(BLOCK_CLAUSE, ROWS[name], name)

    def test_view_and_reshape(self):
        mesh3 = dtorch.DeviceMesh("cpu", [0, 1, 2])
        seen = [0, 0]
        for shape in ((4, 6), (6, 4), (2, 3, 4), (3, 8), (24,)):
            t = torch.arange(24, dtype=torch.float32).reshape(shape) * 0.5
            for result in factorizations(24):
                for d in range(len(shape)):
                    for mesh in (CPU2, mesh3):
                        for name in ("view", "reshape"):
                            with self.subTest(op=name, shape=shape, d=d, result=result, n=mesh.size()):
                                ok = self.check(lambda x: getattr(x, name)(result), lambda y: y.reshape(result),
                                                t, d, mesh)
                                seen[ok] += 1
        self.assertTrue(seen[0] and seen[1], seen)  # both outcomes reached

    def test_flatten_and_unflatten(self):
        mesh3 = dtorch.DeviceMesh("cpu", [0, 1, 2])
        t = torch.arange(48, dtype=torch.float32).reshape(2, 4, 6)
        seen = [0, 0]
        for mesh in (CPU2, mesh3):
            for d in range(3):
                for start, end in ((0, 1), (1, 2), (0, 2), (0, -1)):
                    with self.subTest(op="flatten", d=d, start=start, end=end, n=mesh.size()):
                        seen[self.check(lambda x: x.flatten(start, end), lambda y: y.flatten(start, end),
                                        t, d, mesh)] += 1
                for dim, sizes in ((1, (2, 2)), (2, (2, 3)), (2, (3, 2)), (0, (2, 1))):
                    with self.subTest(op="unflatten", d=d, dim=dim, sizes=sizes, n=mesh.size()):
                        seen[self.check(lambda x: x.unflatten(dim, sizes), lambda y: y.unflatten(dim, sizes),
                                        t, d, mesh)] += 1
        self.assertTrue(seen[0] and seen[1], seen)

    def test_repeat_interleave_of_the_sharded_dim(self):
        # Its row: "int repeats: ... S(dim)->S(dim) when every device's output block is its input block
        # repeated"; the outcome here is that clause computed with torch.chunk.
        self.assertIn("S(dim)->S(dim) when every device's output block is its input block repeated",
                      ROWS["repeat_interleave"])
        mesh3 = dtorch.DeviceMesh("cpu", [0, 1, 2])
        seen = [0, 0]
        for size in (2, 3, 4, 5, 6):
            t = torch.arange(size * 2, dtype=torch.float32).reshape(size, 2)
            for reps in (1, 2, 3):
                for mesh in (CPU2, mesh3):
                    n = mesh.size()
                    want = t.repeat_interleave(reps, dim=0)
                    ok = all(torch.equal(a, b.repeat_interleave(reps, dim=0))
                             for a, b in zip(chunks(want, n, 0), chunks(t, n, 0)))
                    with self.subTest(size=size, repeats=reps, n=n):
                        x = dtorch.from_torch(t, mesh, [Shard(0)])
                        if ok:
                            got = x.repeat_interleave(reps, dim=0)
                            self.assertEqual(tuple(got.placements), (Shard(0),))
                            self.assertTrue(torch.equal(got.to_torch(), want))
                        else:
                            with self.assertRaises(dtorch.PlacementError):
                                x.repeat_interleave(reps, dim=0)
                    seen[ok] += 1
        self.assertTrue(seen[0] and seen[1], seen)


if __name__ == "__main__":
    unittest.main()
