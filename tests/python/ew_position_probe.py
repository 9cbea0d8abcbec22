"""Which of ATen's elementwise CPU kernels are not position-independent, for this torch and CPU.

An elementwise op on shards runs torch's call on each device's contiguous pieces, so its result is
exact only if ``op(x, y)[piece] == op(x[piece], y[piece])`` (the pieces contiguous) for every
piece. This script checks that for the elementwise calls dtorch makes (the forms the tests use),
every dtype and many pieces: of 1-D tensors long enough for several vector widths, and of 2-D
tensors broadcast against a row or a column (a piece of width 1 turns the broadcast operand into a
single element, which some kernels treat as a scalar). It prints the calls for which some piece
differs: the list in docs/decisions.md ("Elementwise shards are exact, except ...") and in
test_elementwise_mesh.position_dependent(). The answer depends on torch's build and on the CPU's
vector width (torch.backends.cpu.get_cpu_capability()).

    python tests/python/ew_position_probe.py
"""

import torch

DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64)
N, ROWS = 131, 3  # N: several vector bodies and a tail for every dtype's vector width


def operand(dtype, seed, shape, positive=False):
    """Small integers, or floats with nan/inf/-0.0 among normal values."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point:
        lo, hi = (1, 7) if positive else ((0, 10) if dtype == torch.uint8 else (-5, 6))
        return torch.randint(lo, hi, shape, generator=g).to(dtype)
    t = torch.randn(shape, generator=g, dtype=torch.float64) * 3
    if positive:
        t = t.abs() + 0.5
    else:
        t.view(-1)[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 2.5, -0.5])
    return t.to(dtype)


def pieces(n):
    """Every start 0..40 with a few lengths, plus torch.chunk's pieces for 2..7 devices."""
    out = {(s, e) for s in range(min(41, n)) for e in (s + 1, s + 7, s + 33, n) if e <= n}
    for k in range(2, 8):
        c = -(-n // k)
        out |= {(i * c, min((i + 1) * c, n)) for i in range(k) if i * c < n}
    return sorted(out)


# Layouts: the shapes of the tensor operands (the first one, then the others) and the dim of each
# that the pieces cut; the output is cut like the first operand. Short rows (7) take the kernels'
# scalar loops, long ones (N) their vector bodies.
LAYOUTS = {
    "": (((N,), 0), ((N,), 0)),
    "broadcast row": (((ROWS, N), 1), ((N,), 0)),
    "broadcast short row": (((5, 7), 1), ((7,), 0)),
    "broadcast column": (((N, ROWS), 0), ((N, 1), 0)),
    "broadcast short column": (((7, 5), 0), ((7, 1), 0)),
}


def same(got, ref):
    """assert_exact's notion (ew_helpers.py): same dtype, NaN where ref has NaN, torch.equal elsewhere."""
    if got.dtype != ref.dtype:
        return False
    if not got.is_floating_point():
        return torch.equal(got, ref)
    nan = ref.isnan()
    return torch.equal(got.isnan(), nan) and torch.equal(got[~nan], ref[~nan])


def position_dependent(fn, args, dims):
    """True when some piece of fn over the whole operands differs from fn over the pieces."""
    try:
        whole = fn(*args)
    except (RuntimeError, TypeError):
        return False  # torch refuses the call: nothing to shard
    for s, e in pieces(args[0].shape[dims[0]]):
        cut = [a.narrow(d, s, e - s).contiguous() if d is not None else a for a, d in zip(args, dims)]
        if not same(fn(*cut), whole.narrow(dims[0], s, e - s)):
            return True
    return False


UNARY = ["neg", "abs", "exp", "log", "log2", "log10", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh",
         "sigmoid", "erf", "expm1", "asin", "acos", "atan", "tan", "sinh", "cosh", "log1p", "exp2", "square", "floor", "ceil", "trunc", "round", "sign", "relu",
         "isnan", "isinf", "isfinite", "logical_not", "bitwise_not"]
BINARY = ["add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "maximum", "minimum", "eq", "ne", "lt",
          "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"]
SCALARS = (2, 3, 4, -1, -2, -3, 0.5, -0.5, 1.5, 2.5, True)
SCALAR_FIRST = ("add", "sub", "mul", "div", "floor_divide", "remainder", "pow")


def calls(dt):
    """(name, form, fn, operands, dims) for every call form on dtype dt."""
    a, b = operand(dt, 1, (N,)), operand(dt, 2, (N,), positive=True)
    for op in UNARY:
        yield op, "", getattr(torch, op), (a,), (0,)
    yield "round", "decimals=2", lambda t: torch.round(t, decimals=2), (a,), (0,)
    for s in SCALARS:
        yield "pow", f"exponent {s!r}", lambda t, s=s: torch.pow(t, s), (a,), (0,)
    for op in BINARY + ["add alpha", "sub alpha", "div trunc", "div floor"]:
        name, _, extra = op.partition(" ")
        f = getattr(torch, name)
        kw = {"alpha": 3} if extra == "alpha" else {"rounding_mode": extra} if extra else {}
        form = f"{extra} " if extra else ""
        for layout, ((sa, da), (sb, db)) in LAYOUTS.items():
            x, y = operand(dt, 1, sa), operand(dt, 2, sb, positive=True)
            yield name, f"{form}tensor {layout}".strip(), (lambda x, y, f=f, kw=kw: f(x, y, **kw)), (x, y), (da, db)
        yield name, f"{form}0-d tensor", (lambda x, y, f=f, kw=kw: f(x, y, **kw)), (a, b[3].clone()), (0, None)
        for s in (2, 0.5, 2.5, True):
            yield name, f"{form}scalar {s!r}", (lambda x, s=s, f=f, kw=kw: f(x, s, **kw)), (a,), (0,)
            if name in SCALAR_FIRST:
                yield name, f"{form}scalar {s!r} first", (lambda x, s=s, f=f, kw=kw: f(s, x, **kw)), (a,), (0,)
    for dst in DTYPES:
        yield "to", f"{dst}", lambda x, d=dst: x.to(d), (a,), (0,)
    for layout, ((sa, da), (sb, db)) in LAYOUTS.items():
        x, c = operand(dt, 1, sa), operand(torch.bool, 3, sb)
        lo, hi = operand(dt, 4, sb), operand(dt, 5, sb)
        yield "where", f"tensors {layout}".strip(), lambda x, cc, y: torch.where(cc, x, y), \
            (x, c, operand(dt, 2, sb)), (da, db, db)
        yield "where", f"scalar {layout}".strip(), lambda x, cc: torch.where(cc, 0.5, x), (x, c), (da, db)
        yield "masked_fill", f"scalar {layout}".strip(), lambda x, m: x.masked_fill(m, 1), (x, c), (da, db)
        yield "clamp", f"tensors {layout}".strip(), lambda x, lo, hi: x.clamp(lo, hi), (x, lo, hi), (da, db, db)
    yield "clamp", "scalars", lambda x: x.clamp(-1, 2), (a,), (0,)
    yield "clamp", "min scalar", lambda x: x.clamp(min=0.5), (a,), (0,)


def main():
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    found = {}
    for dt in DTYPES:
        for name, form, fn, args, dims in calls(dt):
            if position_dependent(fn, args, dims):
                found.setdefault((name, form), []).append(str(dt).replace("torch.", ""))
    for (name, form), dts in found.items():
        print(f"{name:12s} {form:32s} {', '.join(dts)}")
    if not found:
        print("every call is position-independent")


if __name__ == "__main__":
    main()
