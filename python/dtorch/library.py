"""``dtorch.library``: the user's own operators on distributed tensors.

``custom_op(name)`` makes a torch function (written for one device's ``torch.Tensor`` s) a named
dtorch operator: calling it with dtorch tensors records one node per output, named ``name`` in
kernel errors, ``dtorch.explain`` and traces, whose kernels run the function on each device's
worker (``dtorch.local_map``'s machinery). Which placements it takes is its sharding rule,
registered with ``register_sharding`` in the shape of torch DTensor's
(``torch.distributed.tensor.experimental.register_sharding``): the rule gets the op's arguments
and returns the acceptable strategies, each ``(output_placements, input_placements)`` with ONE
placement per output and per argument (``None`` for an argument that is not a tensor). As for
dtorch's own operators, the strategies are matched on each mesh dim independently: the inputs'
placements on that mesh dim must equal a strategy's, and the output takes that strategy's. A
combination no strategy accepts is a ``dtorch.PlacementError`` at the call naming the op, the
placements given, the accepted ones and the ``redistribute`` that fixes it; nothing is recorded.
Without a rule an op accepts only Replicate inputs (every device computes the whole result).

>>> import torch, dtorch
>>> from dtorch import Replicate, Shard
>>> @dtorch.library.custom_op("mylib::scaled_erf")
... def scaled_erf(x: torch.Tensor, scale: float) -> torch.Tensor:
...     return torch.special.erf(x) * scale
>>> @scaled_erf.register_sharding
... def _(x, scale):
...     return [([Replicate()], [Replicate(), None])] + [([Shard(d)], [Shard(d), None]) for d in range(x.ndim)]
>>> y = scaled_erf(dtorch.ones(4, 2, device_mesh=dtorch.DeviceMesh("cpu", [0, 1]),
...                            placements=[Shard(0)]), 3.0)   # Shard(0) -> Shard(0)
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

from . import _C, _local_map
from .distributed_spec import Placement, Replicate, _as_placement

__all__ = ["custom_op", "CustomOp"]

Strategy = Tuple[Sequence[Optional[Placement]], Sequence[Optional[Placement]]]


def _text(p: Optional[Placement]) -> str:
    return "-" if p is None else p.to_str()


class CustomOp:
    """A user operator made by ``custom_op(name)(fn)``: call it as ``fn``; ``register_sharding``
    sets its placement rule; ``out_meta`` (optional) gives the outputs' global metadata instead of a
    meta-tensor run of ``fn``: ``op.register_fake(f)`` where ``f`` takes the op's arguments with
    dtorch tensors and returns ``torch.empty(global shape, dtype=..., device="meta")`` per output."""

    def __init__(self, name: str, fn: Callable) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"custom_op: the name must be a non-empty str, not {name!r}")
        self.name = name
        self.fn = fn
        self._rule: Optional[Callable[..., List[Strategy]]] = None
        self._fake: Optional[Callable] = None
        self._meta_cache: dict = {}  # the meta runs' results by layout (_local_map._record)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def register_sharding(self, rule: Callable[..., List[Strategy]]) -> Callable:
        """Sets the op's sharding rule (the module docstring says its shape); returns ``rule``, so it
        serves as a decorator."""
        if not callable(rule):
            raise TypeError(f"{self.name}: register_sharding takes a function, not {type(rule).__name__}")
        self._rule = rule
        return rule

    def register_fake(self, fake: Callable) -> Callable:
        """Sets the function that gives the outputs' global shapes and dtypes (meta tensors)."""
        if not callable(fake):
            raise TypeError(f"{self.name}: register_fake takes a function, not {type(fake).__name__}")
        self._fake = fake
        return fake

    def _strategies(self, args: Tuple, kwargs: dict, n_out: Optional[int]) -> List[Strategy]:
        if self._rule is None:
            return [([Replicate()] * (n_out or 1), [Replicate() if isinstance(a, _C.TensorBase) else None
                                                   for a in args])]
        out = list(self._rule(*args, **kwargs))
        for s in out:
            if not (isinstance(s, (tuple, list)) and len(s) == 2):
                raise TypeError(f"{self.name}: the sharding rule must return (output_placements, input_placements) "
                                f"pairs, got {s!r}")
        return out

    def _choose(self, args: Tuple, kwargs: dict, tensors: List[Any], positions: List[int]) -> List[List[Placement]]:
        """The outputs' placements (per output, per mesh dim), or PlacementError."""
        strategies = self._strategies(args, kwargs, None)
        mesh = tensors[0].device_mesh
        n_out = len(strategies[0][0]) if strategies else 1
        outs: List[List[Placement]] = [[] for _ in range(n_out)]
        for md in range(mesh.ndim):
            have = [t.placements[md] for t in tensors]
            if mesh.shape[md] == 1:  # a mesh dim of size 1 is Replicate whatever the rule says
                for o in outs:
                    o.append(Replicate())
                continue
            for out_pl, in_pl in strategies:
                in_pl = [in_pl[i] for i in positions] if len(in_pl) == len(args) else list(in_pl)
                if len(in_pl) == len(have) and all(
                        w is not None and _as_placement(w) == h for w, h in zip(in_pl, have)):
                    for o, p in zip(outs, out_pl):
                        o.append(_as_placement(p))
                    break
            else:
                accepted = "; ".join(
                    f"({', '.join(_text(p) for p in i)})->({', '.join(_text(p) for p in o)})" for o, i in strategies)
                fix = next((i for _, i in strategies if all(p is None or not p.is_partial() for p in i)), None)
                hint = (f" Fix: redistribute the inputs to ({', '.join(_text(p) for p in fix)}) on mesh dim {md} first."
                        if fix is not None else "")
                raise _C.PlacementError(
                    f"{self.name}: placements not accepted on mesh dim {md}: the inputs have "
                    f"({', '.join(p.to_str() for p in have)}). Accepted per mesh dim (inputs)->(outputs): "
                    f"{accepted}.{hint}")
        return outs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tensors = [a for a in args if isinstance(a, _C.TensorBase)]
        positions = [i for i, a in enumerate(args) if isinstance(a, _C.TensorBase)]
        if not tensors:
            return self.fn(*args, **kwargs)  # torch tensors: the function itself, as torch.library's op would
        outs = self._choose(args, kwargs, tensors, positions)
        single = len(outs) == 1
        out_meta = None
        if self._fake is not None:
            out_meta = self._fake(*args, **kwargs)
        return _local_map._apply(self.name, self.fn, outs[0] if single else tuple(outs), None, None, False,
                                 out_meta, args, kwargs, self._meta_cache)

    def __repr__(self) -> str:
        return f"<dtorch.library.CustomOp {self.name}>"


def custom_op(name: str, fn: Optional[Callable] = None, *, mutates_args: Any = ()) -> Any:
    """``custom_op(name)(fn)`` (or ``custom_op(name, fn)``): ``fn`` as the dtorch operator ``name``
    (module docstring). ``mutates_args`` must be empty: dtorch values are immutable."""
    if mutates_args not in ((), [], None):
        raise ValueError(f"custom_op({name!r}): dtorch ops do not mutate their arguments (mutates_args="
                         f"{mutates_args!r})")
    if fn is None:
        return lambda f: CustomOp(name, f)
    return CustomOp(name, fn)

