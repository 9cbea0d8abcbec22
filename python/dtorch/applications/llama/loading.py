"""Reading a Hugging Face Llama-family folder: ``config.json`` and the safetensors weights.

Before anything is queued, the config is read by the model class's config class (another
``model_type`` or an unsupported setting raises) and the checkpoint's names and shapes, read from
the safetensors headers, are compared with the tensors the config needs (``expected_tensors``): a
missing, unknown or wrong-shaped tensor raises ValueError naming it. Then each parameter is read
from its file when the model asks for it and distributed at once by its placements (``from_torch``:
a Shard sends each device its block), so the client holds one tensor at a time and no device holds
more than its shard. A sharded checkpoint (``model.safetensors.index.json`` with its
``weight_map``) is read file by file as the names lead.

>>> model = load(LlamaForCausalLM, "/models/llama", mesh, None, None)
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Tuple

import torch

from ... import _factories
from ...distributed_spec import DeviceMesh
from ...nn.parameter import Parameter
from .config import LlamaConfig
from .layout import placements, replicate_heads

__all__ = ["load", "SafetensorsReader", "expected_tensors", "check_checkpoint"]

_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


class SafetensorsReader:
    """The tensors of a folder's ``model.safetensors`` or of the files of its
    ``model.safetensors.index.json``, read by name (files opened on first use).

    >>> with SafetensorsReader("/models/llama") as r:
    ...     w = r.get("model.norm.weight")
    """

    def __init__(self, path: str) -> None:
        from safetensors import safe_open

        self._open = safe_open
        self.path = path
        self._files: Dict[str, Any] = {}
        index = os.path.join(path, "model.safetensors.index.json")
        single = os.path.join(path, "model.safetensors")
        if os.path.exists(index):
            with open(index, encoding="utf-8") as f:
                self.weight_map: Dict[str, str] = dict(json.load(f)["weight_map"])
        elif os.path.exists(single):
            with safe_open(single, framework="pt") as f:
                self.weight_map = {k: "model.safetensors" for k in f.keys()}
        else:
            raise FileNotFoundError(f"{path}: neither model.safetensors nor model.safetensors.index.json is there")

    def __contains__(self, name: str) -> bool:
        return name in self.weight_map

    def _file(self, name: str) -> Any:
        if name not in self.weight_map:
            raise KeyError(f"{self.path}: the checkpoint has no tensor {name!r}")
        fname = self.weight_map[name]
        if fname not in self._files:
            self._files[fname] = self._open(os.path.join(self.path, fname), framework="pt").__enter__()
        return self._files[fname]

    def get(self, name: str) -> torch.Tensor:
        return self._file(name).get_tensor(name)

    def shape(self, name: str) -> Tuple[int, ...]:
        """The tensor's shape, from the file's header (nothing else is read)."""
        return tuple(self._file(name).get_slice(name).get_shape())

    def dtype(self, name: str) -> torch.dtype:
        """The tensor's dtype, from the file's header when it names a float type torch has."""
        code = self._file(name).get_slice(name).get_dtype()
        return _DTYPES[code] if code in _DTYPES else self.get(name).dtype

    def close(self) -> None:
        for f in self._files.values():
            f.__exit__(None, None, None)
        self._files.clear()

    def __enter__(self) -> "SafetensorsReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def expected_tensors(cfg: LlamaConfig) -> Dict[str, Tuple[int, ...]]:
    """The name and checkpoint shape of every tensor a model of ``cfg`` reads.

    >>> expected_tensors(cfg)["model.layers.0.self_attn.k_proj.weight"]
    (32, 64)
    """
    h, d, v, inter = cfg.hidden_size, cfg.head_dim, cfg.vocab_size, cfg.intermediate_size
    q, kv = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
    out: Dict[str, Tuple[int, ...]] = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = (v, h)
    for i in range(cfg.num_hidden_layers):
        a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        out.update({a + "q_proj.weight": (q, h), a + "k_proj.weight": (kv, h), a + "v_proj.weight": (kv, h),
                    a + "o_proj.weight": (h, q), m + "gate_proj.weight": (inter, h), m + "up_proj.weight": (inter, h),
                    m + "down_proj.weight": (h, inter), f"model.layers.{i}.input_layernorm.weight": (h,),
                    f"model.layers.{i}.post_attention_layernorm.weight": (h,)})
        if cfg.qkv_bias:
            out.update({a + "q_proj.bias": (q,), a + "k_proj.bias": (kv,), a + "v_proj.bias": (kv,)})
        if cfg.o_bias:
            out[a + "o_proj.bias"] = (h,)
        if cfg.qk_norm:
            out.update({a + "q_norm.weight": (d,), a + "k_norm.weight": (d,)})
        if cfg.mlp_has_bias:
            out.update({m + "gate_proj.bias": (inter,), m + "up_proj.bias": (inter,), m + "down_proj.bias": (h,)})
    return out


def _names(names: list, most: int = 6) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" (and {len(names) - most} more)" if len(names) > most else "")


def check_checkpoint(reader: SafetensorsReader, cfg: LlamaConfig, want: Dict[str, Tuple[int, ...]]) -> None:
    """ValueError naming the missing tensors, the tensors the model does not use, or a tensor whose
    shape differs from the config's (both shapes). A tied model's ``lm_head.weight`` is accepted
    when it equals the embedding (some checkpoints store both).

    >>> with SafetensorsReader(folder) as r:
    ...     check_checkpoint(r, cfg, expected_tensors(cfg))
    """
    kind = cfg.model_type
    have = set(reader.weight_map)
    missing = sorted(set(want) - have)
    if missing:
        raise ValueError(f"{reader.path}: the checkpoint lacks {len(missing)} tensor(s) a {kind} model with this "
                         f"config reads: {_names(missing)}")
    extra = sorted(have - set(want))
    if cfg.tie_word_embeddings and "lm_head.weight" in extra:
        extra.remove("lm_head.weight")
        if not torch.equal(reader.get("lm_head.weight"), reader.get("model.embed_tokens.weight")):
            raise ValueError(f"{reader.path}: tie_word_embeddings is true but lm_head.weight differs from "
                             "model.embed_tokens.weight")
    if extra:
        raise ValueError(f"{reader.path}: the checkpoint has {len(extra)} tensor(s) a {kind} model does not use: "
                         f"{_names(extra)}")
    for name, shape in want.items():
        got = reader.shape(name)
        if got != shape:
            raise ValueError(f"{reader.path}: {name} has shape {got} in the checkpoint; the config gives {shape}")


def load(cls: type, path: str, device_mesh: Optional[DeviceMesh], dtype: Optional[torch.dtype], graph: Any):
    """``cls(config, device_mesh, dtype)`` with every parameter read from ``path``, after the checks
    of ``check_checkpoint``."""
    cfg = cls.config_class.from_json_file(path)
    with SafetensorsReader(path) as reader:
        want_shapes = expected_tensors(cfg)
        check_checkpoint(reader, cfg, want_shapes)
        want = dtype or reader.dtype("model.embed_tokens.weight")

        def make(name: str, shape: tuple, mesh: DeviceMesh, by_name: dict, kind: str,
                 rep: Optional[Tuple[int, int]] = None) -> Parameter:
            if want_shapes.get(name) != tuple(shape):  # the model and expected_tensors disagree: a bug here
                raise RuntimeError(f"{cls.__name__}: {name} {tuple(shape)} is not among the expected tensors")
            t = replicate_heads(reader.get(name).to(want), rep)
            return Parameter(_factories.from_torch(t, mesh, placements(mesh, by_name), graph=graph))

        return cls(cfg, device_mesh, want, graph=graph, _make=make)
