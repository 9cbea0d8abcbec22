"""``Module``: the base class of dtorch layers, as ``torch.nn.Module``, for distributed tensors.

A dtorch ``Module`` holds parameters (``Parameter``, a ``dtorch.Tensor`` on some mesh and placements),
buffers and submodules under the names torch would give them, so a torch ``state_dict`` loads into the
same architecture: ``load_state_dict`` distributes each full torch tensor to its parameter's mesh and
placements. Inference first: there is no autograd and ``training`` is False until ``train()``.
Calling a module runs ``redistribute_input``, ``forward`` and ``redistribute_output`` in that order.

>>> import torch, dtorch
>>> from dtorch import nn
>>> model = nn.Sequential(nn.LayerNorm(8), nn.GELU())
>>> model.load_state_dict(torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.GELU()).state_dict())
>>> y = model(dtorch.randn(4, 8))
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

from ... import _C, _factories
from ..._tensor import Tensor
from ...distributed_spec import DeviceMesh, Replicate
from ..parameter import Buffer, Parameter

__all__ = ["Module"]


_IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _addindent(s: str, n: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * n + line for line in lines[1:])


def _cast(t: Tensor, dtype: torch.dtype) -> Tensor:
    """``t`` in ``dtype`` on the same mesh and placements.

    A cast rejects ``Partial()`` (the cast of a sum is not the sum of the casts), so a Partial tensor
    (a row-parallel bias) is summed to Replicate, cast, and made Partial again (a local step: the
    value stays on the first coordinate of those mesh dims)."""
    if t.dtype == dtype:
        return t
    if any(p.is_partial() for p in t.placements):
        whole = [Replicate() if p.is_partial() else p for p in t.placements]
        return _cast(t.redistribute(placements=whole), dtype).redistribute(placements=t.placements)
    to = getattr(type(t), "to", None)
    if to is not None:
        return to(t, dtype)
    # Without a cast op (another family's), go through the host value once.
    return _factories.from_torch(t.to_torch().to(dtype), t.device_mesh, t.placements, graph=t.graph)


class Module:
    """Base class of dtorch layers, as ``torch.nn.Module``: subclasses assign parameters, buffers
    and submodules as attributes in ``__init__`` and define ``forward``.

    >>> class Block(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.norm = nn.LayerNorm(8)
    ...     def forward(self, x):
    ...         return nn.functional.silu(self.norm(x))
    """

    training: bool

    def __init__(self) -> None:
        # Inference first, as the original DTorch: a module is in eval mode until train().
        object.__setattr__(self, "training", False)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", OrderedDict())

    # ------------------------------------------------------------ calling

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def redistribute_input(self, *args: Any, **kwargs: Any) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
        """Runs before ``forward`` on the call's arguments and returns ``(args, kwargs)`` for it: the
        place to lay inputs out as ``forward`` needs them (the identity by default).

        >>> class Gathered(nn.Linear):
        ...     def redistribute_input(self, x):
        ...         return (x.redistribute(placements=[dtorch.Replicate()]),), {}
        """
        return args, kwargs

    def redistribute_output(self, output: Any) -> Any:
        """Runs after ``forward`` on its result and returns the module's result (the identity by
        default).

        >>> class ReplicatedOut(nn.RowParallelLinear):
        ...     def redistribute_output(self, y):
        ...         return y.redistribute(placements=[dtorch.Replicate()])
        """
        return output

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = self.redistribute_input(*args, **kwargs)
        return self.redistribute_output(self.forward(*args, **kwargs))

    def first_param_device_mesh(self) -> Optional[DeviceMesh]:
        """The device mesh of the first parameter (torch's order), else of the first buffer, else None.

        >>> nn.Linear(4, 4, device_mesh=mesh).first_param_device_mesh() == mesh
        True
        """
        for p in self.parameters():
            return p.device_mesh
        for b in self.buffers():
            return b.device_mesh
        return None

    # ------------------------------------------------------------ registration

    def _check_init(self) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameters, buffers or modules before Module.__init__() call")

    def register_parameter(self, name: str, param: Optional[Parameter]) -> None:
        """Registers ``param`` (a ``Parameter`` or None) under ``name``."""
        self._check_init()
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f'parameter name must be a non-empty string without ".", got {name!r}')
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            "(dtorch.nn.Parameter or None required)")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Optional[Tensor], persistent: bool = True) -> None:
        """Registers a tensor that is state but not a parameter (e.g. running statistics)."""
        self._check_init()
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f'buffer name must be a non-empty string without ".", got {name!r}')
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, _C.TensorBase):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(dtorch.nn.Buffer, dtorch.Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def add_module(self, name: str, module: Optional["Module"]) -> None:
        """Registers a submodule under ``name``."""
        self._check_init()
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f'module name must be a non-empty string without ".", got {name!r}')
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a dtorch.nn.Module subclass")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        params = d.get("_parameters")

        def remove_from(*dicts):
            for dd in dicts:
                if dd is not None and name in dd:
                    del dd[name]

        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            remove_from(d, d.get("_buffers"), d.get("_modules"))
            params[name] = value
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(dtorch.nn.Parameter or None expected)")
            params[name] = value
        else:
            modules = d.get("_modules")
            if isinstance(value, Module):
                if modules is None:
                    raise AttributeError("cannot assign module before Module.__init__() call")
                remove_from(d, params, d.get("_buffers"))
                modules[name] = value
            elif modules is not None and name in modules:
                if value is not None:
                    raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                    "(dtorch.nn.Module or None expected)")
                modules[name] = value
            else:
                buffers = d.get("_buffers")
                if isinstance(value, Buffer):
                    # As torch.nn.Buffer: assigning one registers it, with its own persistence.
                    if buffers is None:
                        raise AttributeError("cannot assign buffers before Module.__init__() call")
                    if name in buffers:
                        del buffers[name]  # re-registering under the same name is allowed
                    d.pop(name, None)
                    self.register_buffer(name, value, value.persistent)
                elif buffers is not None and name in buffers:
                    if value is not None and not isinstance(value, _C.TensorBase):
                        raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                        "(dtorch.nn.Buffer, dtorch.Tensor or None expected)")
                    buffers[name] = value
                else:
                    object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: parameters, buffers and modules live in dicts.
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            dd = d.get(key)
            if dd is not None and name in dd:
                return dd[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for key in ("_parameters", "_buffers", "_modules"):
            dd = self.__dict__.get(key)
            if dd is not None and name in dd:
                del dd[name]
                self._non_persistent_buffers.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))

    # ------------------------------------------------------------ traversal

    def _named_members(self, get: Callable, prefix: str, recurse: bool) -> Iterator[Tuple[str, Any]]:
        seen = set()
        modules = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mod_prefix, mod in modules:
            for name, v in get(mod):
                if v is None or id(v) in seen:
                    continue
                seen.add(id(v))
                yield (mod_prefix + ("." if mod_prefix else "") + name, v)

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[Tuple[str, Parameter]]:
        """``(name, parameter)`` pairs with torch's dotted names, each parameter once."""
        return self._named_members(lambda m: m._parameters.items(), prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[Tuple[str, Tensor]]:
        return self._named_members(lambda m: m._buffers.items(), prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_children(self) -> Iterator[Tuple[str, "Module"]]:
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator["Module"]:
        for _, m in self.named_children():
            yield m

    def named_modules(self, memo: Optional[set] = None, prefix: str = "") -> Iterator[Tuple[str, "Module"]]:
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(memo, prefix + ("." if prefix else "") + name)

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------ modes

    def train(self, mode: bool = True) -> "Module":
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        object.__setattr__(self, "training", mode)
        for m in self.children():
            m.train(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        """Accepted for compatibility; dtorch has no autograd."""
        return self

    # ------------------------------------------------------------ state

    def _state_items(self) -> Iterator[Tuple[str, Any, bool]]:
        """(key, tensor, is_parameter) for every parameter and persistent buffer, torch's order."""
        for prefix, m in self.named_modules():
            dot = prefix + "." if prefix else ""
            for name, p in m._parameters.items():
                if p is not None:
                    yield dot + name, p, True
            for name, b in m._buffers.items():
                if b is not None and name not in m._non_persistent_buffers:
                    yield dot + name, b, False

    def state_dict(self, destination: Optional[Dict] = None, prefix: str = "",
                   keep_vars: bool = False) -> "OrderedDict[str, Tensor]":
        """Parameters and persistent buffers by torch's names; the values are dtorch tensors (read a
        full one with ``.to_torch()``)."""
        out = OrderedDict() if destination is None else destination
        for key, t, _ in self._state_items():
            out[prefix + key] = t
        return out

    def load_state_dict(self, state_dict: Dict[str, Any], strict: bool = True, assign: bool = False):
        """Loads full torch tensors (or dtorch tensors) by name: each value is cast to the parameter's
        dtype and distributed to its mesh and placements; the ``Parameter`` objects keep their identity.

        >>> model.load_state_dict(torch_model.state_dict())
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        items = list(self._state_items())
        own = {key for key, _, _ in items}
        missing = [key for key, _, _ in items if key not in state_dict]
        unexpected = [key for key in state_dict if key not in own]
        errors = []
        updates = []
        for key, t, _ in items:
            if key not in state_dict:
                continue
            value = state_dict[key]
            if not isinstance(value, (torch.Tensor, _C.TensorBase)):
                errors.append(f'While copying the parameter named "{key}", expected torch.Tensor or Tensor-like '
                              f"object from checkpoint but received {type(value)}")
                continue
            if tuple(value.shape) != tuple(t.shape):
                errors.append(f"size mismatch for {key}: copying a param with shape {value.shape} from checkpoint, "
                              f"the shape in current model is {t.shape}.")
                continue
            updates.append((key, t, value))
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                type(self).__name__, "\n\t".join(errors)))
        for key, t, value in updates:
            if isinstance(value, torch.Tensor):
                new = _factories.from_torch(value.detach().to(t.dtype), t.device_mesh, t.placements, graph=t.graph)
            else:
                new = _cast(value, t.dtype)
                if new.device_mesh != t.device_mesh or list(new.placements) != list(t.placements):
                    new = new.redistribute(t.device_mesh, t.placements)
            _C._rebind(t, new)
        return _IncompatibleKeys(missing, unexpected)

    def to(self, *args: Any, **kwargs: Any) -> "Module":
        """``to(dtype)`` casts floating parameters and buffers; ``to(device_mesh)`` (or ``device=``, or a
        dtorch tensor for both) moves them to a mesh of the same shape, each keeping its placements
        (a ``redistribute`` onto the new mesh). Parameters and buffers keep their identity.

        >>> model.to(torch.float64)
        >>> model.to(dtorch.DeviceMesh("cpu", [2, 3], mesh_dim_names=("tp",)))
        """
        dtype = kwargs.pop("dtype", None)
        mesh = kwargs.pop("device_mesh", None)
        device = kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        kwargs.pop("memory_format", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, torch.dtype):
                dtype = a
            elif isinstance(a, DeviceMesh):
                mesh = a
            elif isinstance(a, (str, torch.device)):
                device = a
            elif isinstance(a, _C.TensorBase):
                dtype, mesh = a.dtype, a.device_mesh
            elif isinstance(a, bool):
                pass  # non_blocking, as torch's positional form
            else:
                raise TypeError(f"to() takes a dtype, a DeviceMesh, a device or a tensor, not {type(a).__name__}")
        if device is not None:
            if mesh is not None:
                raise ValueError("pass either a device or a device_mesh, not both")
            mesh = _factories._mesh_of_device(device)
        if dtype is not None and not (dtype.is_floating_point or dtype.is_complex):
            raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but got desired "
                            f"dtype={dtype}")
        tensors = [t for _, t, _ in self._state_items()] + list(self._nonpersistent())
        if mesh is not None:
            # Check every tensor first, so that an error leaves the module as it was.
            for t in tensors:
                if tuple(t.device_mesh.shape) != tuple(mesh.shape):
                    raise ValueError(f"to(device_mesh): {mesh!r} has another shape than the module's mesh "
                                     f"{t.device_mesh!r}; placements only carry over to a mesh of the same shape")
        for t in tensors:
            new = t
            if dtype is not None and t.is_floating_point():
                new = _cast(new, dtype)
            if mesh is not None and new.device_mesh != mesh:
                new = new.redistribute(mesh, new.placements)
            if new is not t:
                _C._rebind(t, new)
        return self

    def _nonpersistent(self) -> Iterator[Tensor]:
        for _, m in self.named_modules():
            for name, b in m._buffers.items():
                if b is not None and name in m._non_persistent_buffers:
                    yield b

    def float(self) -> "Module":
        return self.to(torch.float32)

    def double(self) -> "Module":
        return self.to(torch.float64)

    def half(self) -> "Module":
        return self.to(torch.float16)

    def bfloat16(self) -> "Module":
        return self.to(torch.bfloat16)

    # ------------------------------------------------------------ printing

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for name, m in self._modules.items():
            lines.append(f"({name}): " + _addindent(repr(m), 2))
        main = type(self).__name__ + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                main += lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

