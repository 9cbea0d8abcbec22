"""What the SD3 components share: mesh helpers, parameter-declaring layers and the safetensors loader.

The layers here declare their parameters (name, shape, placements) instead of initialising them:
a component is built empty and ``load_module`` fills every declared parameter from a Hugging Face
checkpoint, one tensor at a time, distributed to its placements as it is read. Nothing is ever
allocated twice (a randomly initialised layer would be, for a 2-billion-parameter model).

>>> ckpt = Checkpoint("sd3/transformer", "diffusion_pytorch_model")
>>> lin = Linear(64, 256, mesh=mesh, tp="col")
>>> load_module(lin, ckpt, prefix="attn.to_q.")
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from ... import _factories
from ...distributed_spec import DeviceMesh, Partial, Placement, Replicate, Shard
from ...nn import functional as F
from ...nn.modules.module import Module
from ...nn.parameter import Buffer, Parameter

# The mesh dim names of the original DTorch's applications.
DP, TP, ULYSSES_CP, RING_CP = "dp", "tp", "ulysess_cp", "ring_cp"
SDPA_OPTION = F.SdpaOption(ulysess_cp_dim=ULYSSES_CP, ring_cp_dim=RING_CP)


# ---------------------------------------------------------------- meshes


def mesh_dim(mesh: DeviceMesh, name: str) -> Optional[int]:
    """The index of the mesh dim ``name`` when it exists with size > 1 (else None: nothing to split)."""
    if not mesh.has_dim_name(name):
        return None
    i = mesh.dim_name_index(name)
    return i if mesh.size(i) > 1 else None


def mesh_size(mesh: DeviceMesh, name: str) -> int:
    i = mesh_dim(mesh, name)
    return 1 if i is None else mesh.size(i)


def placements(mesh: DeviceMesh, **on: Placement) -> List[Placement]:
    """Replicate on every mesh dim except the named ones (present with size > 1): ``placements(mesh, tp=Shard(0))``."""
    out: List[Placement] = [Replicate()] * mesh.ndim
    for name, p in on.items():
        i = mesh_dim(mesh, name)
        if i is not None:
            out[i] = p
    return out


def batch_placements(mesh: DeviceMesh) -> List[Placement]:
    """A batch-first tensor split over ``dp`` (the CFG halves, the prompts), replicated elsewhere."""
    return placements(mesh, dp=Shard(0))


def with_placement(t: Any, mesh_dim_index: Optional[int], p: Placement) -> Any:
    """``t`` with ``p`` on one mesh dim (a collective or a local slice; nothing if already so)."""
    if mesh_dim_index is None or t.placements[mesh_dim_index] == p:
        return t
    pl = list(t.placements)
    pl[mesh_dim_index] = p
    return t.redistribute(placements=pl)


def replicated(t: Any) -> Any:
    """``t`` Replicate on every mesh dim."""
    if all(p.is_replicate() for p in t.placements):
        return t
    return t.redistribute(placements=[Replicate()] * t.device_mesh.ndim)


def one_device_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """The one-device mesh of ``mesh.first_device()`` (the mesh's first device id)."""
    return DeviceMesh(mesh.device_type, [mesh.device_ids[0]])


def to_mesh(t: Any, mesh: DeviceMesh, pl: Sequence[Placement]) -> Any:
    """``t`` on ``mesh`` (possibly of another shape) with placements ``pl``: replicated first, moved
    by ``redistribute`` (point-to-point copies), then laid out on the new mesh (a local slice)."""
    if t.device_mesh == mesh:
        return t.redistribute(placements=list(pl)) if list(t.placements) != list(pl) else t
    t = replicated(t).redistribute(mesh, [Replicate()] * mesh.ndim)
    return t.redistribute(placements=list(pl)) if any(not p.is_replicate() for p in pl) else t


def configure(module: Module, config: Dict[str, Any], defaults: Dict[str, Any], mesh: DeviceMesh) -> Dict[str, Any]:
    """Sets ``module.config`` (``defaults`` updated by ``config``'s keys but the private ``_*`` ones)
    and ``module.mesh``; returns the config."""
    cfg = dict(defaults)
    cfg.update({k: v for k, v in config.items() if not k.startswith("_")})
    module.config = cfg
    object.__setattr__(module, "mesh", mesh)
    return cfg


# ---------------------------------------------------------------- layers with declared parameters


class Layer(Module):
    """A module whose parameters are declared (shape, placements) and filled by ``load_module``."""

    def __init__(self, mesh: DeviceMesh) -> None:
        super().__init__()
        object.__setattr__(self, "mesh", mesh)
        object.__setattr__(self, "_specs", {})

    def declare(self, name: str, shape: Sequence[int], pl: Optional[Sequence[Placement]] = None,
                buffer: bool = False, source: Optional[Tuple[str, int, int]] = None) -> None:
        """Declares parameter (or persistent buffer) ``name`` of ``shape``, laid out as ``pl``.
        ``source=(key, lo, hi)`` reads columns ``lo:hi`` of the checkpoint's ``key`` (a sibling's
        name) instead: one stored matrix split into two parameters."""
        pl = list(pl) if pl is not None else [Replicate()] * self.mesh.ndim
        self._specs[name] = (tuple(int(s) for s in shape), pl, buffer, source)
        if buffer:
            self.register_buffer(name, None)
        else:
            self.register_parameter(name, None)


class Linear(Layer):
    """``F.linear`` with torch's keys. ``tp="col"`` splits the output features over ``tp`` (output
    Shard(-1) there), ``tp="row"`` the input features (the output is all-reduced to Replicate unless
    ``reduce=False``); None replicates.

    >>> up, down = Linear(32, 128, mesh=mesh, tp="col"), Linear(128, 32, mesh=mesh, tp="row")
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, mesh: DeviceMesh,
                 tp: Optional[str] = None, reduce: bool = True) -> None:
        super().__init__(mesh)
        self.in_features, self.out_features, self.reduce = in_features, out_features, reduce
        self._tp = mesh_dim(mesh, TP) if tp is not None else None
        self.tp = tp if self._tp is not None else None
        w_on, b_on = {None: (Replicate(), Replicate()), "col": (Shard(0), Shard(0)),
                      "row": (Shard(1), Partial())}[self.tp]
        self.declare("weight", (out_features, in_features), placements(mesh, tp=w_on))
        if bias:
            self.declare("bias", (out_features,), placements(mesh, tp=b_on))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Any, fused: bool = True) -> Any:
        """``fused=False`` adds the bias after the product, as ``torch.nn.functional.linear`` does for a
        non-contiguous input of 3+ dims (its ``matmul`` then ``add_`` path; the fused ``addmm`` rounds
        once in half precision, the other twice)."""
        if self.tp == "row":
            x = with_placement(x, self._tp, Shard(x.ndim - 1))  # Replicate -> Shard is a local slice
        if fused or self.bias is None:
            y = F.linear(x, self.weight, self.bias)
        else:
            y = F.linear(x, self.weight) + self.bias
        if self.tp == "row" and self.reduce:
            y = with_placement(y, self._tp, Replicate())
        return y


class Conv2d(Layer):
    """A replicated ``F.conv2d`` with torch's keys (batch shards of the input pass through)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 bias: bool = True, *, mesh: DeviceMesh) -> None:
        super().__init__(mesh)
        self.stride, self.padding = stride, padding
        self.declare("weight", (out_channels, in_channels, kernel_size, kernel_size))
        if bias:
            self.declare("bias", (out_channels,))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Any) -> Any:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding)


class LayerNorm(Layer):
    """``F.layer_norm`` over the last dim; ``affine=False`` has no parameters (diffusers' norms)."""

    def __init__(self, dim: int, eps: float = 1e-5, affine: bool = True, bias: bool = True, *,
                 mesh: DeviceMesh) -> None:
        super().__init__(mesh)
        self.dim, self.eps = dim, eps
        if affine:
            self.declare("weight", (dim,))
        else:
            self.register_parameter("weight", None)
        if affine and bias:
            self.declare("bias", (dim,))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Any) -> Any:
        return F.layer_norm(x, (self.dim,), self.weight, self.bias, self.eps)


class GroupNorm(Layer):
    """``F.group_norm`` with affine parameters (``weight``, ``bias``)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, *, mesh: DeviceMesh) -> None:
        super().__init__(mesh)
        self.num_groups, self.eps = num_groups, eps
        self.declare("weight", (num_channels,))
        self.declare("bias", (num_channels,))

    def forward(self, x: Any) -> Any:
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


class Embedding(Layer):
    """A replicated lookup table ``weight`` [num, dim]."""

    def __init__(self, num: int, dim: int, *, mesh: DeviceMesh) -> None:
        super().__init__(mesh)
        self.declare("weight", (num, dim))

    def forward(self, ids: Any) -> Any:
        return F.embedding(ids, self.weight)


# ---------------------------------------------------------------- checkpoints


def read_json(path: str) -> Dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class Checkpoint:
    """The tensors of a Hugging Face component folder: ``<stem>.safetensors`` or the files of a sharded
    ``<stem>.safetensors.index.json`` (its ``weight_map``), read lazily, one tensor at a time, in the
    dtype of the file's header.

    >>> ckpt = Checkpoint("sd3/text_encoder_3", "model")
    >>> ckpt.get("shared.weight").dtype
    torch.float16
    """

    def __init__(self, folder: str, stem: str) -> None:
        from safetensors import safe_open

        self._open = safe_open
        index = os.path.join(folder, stem + ".safetensors.index.json")
        single = os.path.join(folder, stem + ".safetensors")
        if os.path.exists(index):
            weight_map = read_json(index)["weight_map"]
            self._where = {k: os.path.join(folder, v) for k, v in weight_map.items()}
        elif os.path.exists(single):
            with safe_open(single, framework="pt") as f:
                self._where = {k: single for k in f.keys()}
        else:
            raise FileNotFoundError(f"no {stem}.safetensors or {stem}.safetensors.index.json in {folder!r}")
        self._files: Dict[str, Any] = {}

    def keys(self) -> Iterable[str]:
        return self._where.keys()

    def __contains__(self, key: str) -> bool:
        return key in self._where

    def get(self, key: str) -> torch.Tensor:
        path = self._where[key]
        f = self._files.get(path)
        if f is None:
            f = self._files[path] = self._open(path, framework="pt")
        return f.get_tensor(key)

    def close(self) -> None:
        self._files.clear()


def declared_keys(module: Module) -> List[str]:
    """The checkpoint keys (without prefix) of every parameter ``module`` declares."""
    keys = []
    for mod_name, mod in module.named_modules():
        if isinstance(mod, Layer):
            dot = mod_name + "." if mod_name else ""
            keys += [dot + (name if spec[3] is None else spec[3][0]) for name, spec in mod._specs.items()]
    return keys


def load_module(module: Module, ckpt: Checkpoint, *, prefix: str = "", dtype: Optional[torch.dtype] = None,
                ignore: Sequence[str] = (), aliases: Optional[Dict[str, str]] = None) -> None:
    """Fills every declared parameter of ``module`` (and its submodules) from ``ckpt`` key
    ``prefix + name``, cast to ``dtype`` (None: the file's dtype) and distributed to its placements as
    it is read. Keys of ``ckpt`` under ``prefix`` that no parameter claims raise, unless they start
    with one of ``ignore``; ``aliases`` maps a parameter key to the legacy checkpoint key to try
    when it is absent (e.g. diffusers' old VAE attention names).
    """
    claimed = set()
    missing = []
    for mod_name, mod in module.named_modules():
        if not isinstance(mod, Layer):
            continue
        dot = mod_name + "." if mod_name else ""
        for name, (shape, pl, buffer, source) in mod._specs.items():
            key = prefix + dot + (name if source is None else source[0])
            if key not in ckpt and aliases and aliases.get(key) in ckpt:
                key = aliases[key]
            if key not in ckpt:
                missing.append(key)
                continue
            t = ckpt.get(key)
            if source is not None:
                if t.ndim != 2 or t.shape[1] < source[2]:
                    raise RuntimeError(f"size mismatch for {key}: the checkpoint has shape {tuple(t.shape)}, the model "
                                       f"reads its columns {source[1]}:{source[2]}")
                t = t[:, source[1]:source[2]].contiguous()
            if tuple(t.shape) != shape and tuple(t.shape) == shape + (1,) * (t.ndim - len(shape)):
                t = t.reshape(shape)  # a 1x1 conv stored for a linear (old VAE attention files)
            if tuple(t.shape) != shape:
                raise RuntimeError(f"size mismatch for {key}: the checkpoint has shape {tuple(t.shape)}, the model "
                                   f"expects {shape}")
            if dtype is not None and t.is_floating_point():
                t = t.to(dtype)
            value = _factories.from_torch(t, mod.mesh, pl)
            setattr(mod, name, Buffer(value) if buffer else Parameter(value))
            claimed.add(key)
            del t
    unexpected = [k for k in ckpt.keys() if k.startswith(prefix) and k not in claimed
                  and not any(k.startswith(prefix + i) for i in ignore)]
    if missing or unexpected:
        raise RuntimeError(f"Error(s) in loading {type(module).__name__}: missing keys {missing[:8]}"
                           f"{' ...' if len(missing) > 8 else ''}, unexpected keys {unexpected[:8]}"
                           f"{' ...' if len(unexpected) > 8 else ''}")


def load_pretrained(cls: Any, path: str, *, device_mesh: DeviceMesh, torch_dtype: Optional[torch.dtype] = None,
                    stem: str = "diffusion_pytorch_model", aliases: Any = None, **load_kw: Any) -> Any:
    """``cls(config, device_mesh=...)`` from ``path/config.json``, filled by ``load_module`` from
    ``path/<stem>*.safetensors`` (dtype: the file's, or ``torch_dtype``). ``aliases`` may be a
    function of the built model (its declared keys) returning ``load_module``'s aliases.

    >>> vae = load_pretrained(AutoencoderKL, "sd3/vae", device_mesh=mesh)
    """
    config = os.path.join(path, "config.json")
    if not os.path.exists(config):
        raise FileNotFoundError(f"no config.json in {path!r} (a {cls.__name__} folder)")
    model = cls(read_json(config), device_mesh=device_mesh)
    if callable(aliases):
        aliases = aliases(model)
    ckpt = Checkpoint(path, stem)
    try:
        load_module(model, ckpt, dtype=torch_dtype, aliases=aliases, **load_kw)
    finally:
        ckpt.close()
    return model


def batch_input(t: Any, mesh: DeviceMesh, who: str) -> Any:
    """A torch tensor distributed over ``dp`` (Shard(0) there); a dtorch tensor is used as it is."""
    if isinstance(t, torch.Tensor):
        return _factories.from_torch(t, mesh, batch_placements(mesh))
    if not hasattr(t, "device_mesh"):
        raise TypeError(f"{who}: expected a torch or dtorch tensor, got {type(t).__name__}")
    return t
