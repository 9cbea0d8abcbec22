"""Reading a Hugging Face Llama folder: ``config.json`` and the safetensors weights.

Each parameter is read from its file when the model asks for it and distributed at once by its
placements (``from_torch``: a Shard sends each device its block), so the client holds one tensor
at a time and no device holds more than its shard. A sharded checkpoint
(``model.safetensors.index.json`` with its ``weight_map``) is read file by file as the names lead.

>>> model = load(LlamaForCausalLM, "/models/llama", mesh, None, None)
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

import torch

from ... import _factories
from ...distributed_spec import DeviceMesh
from ...nn.parameter import Parameter
from .config import LlamaConfig
from .layout import placements

__all__ = ["load", "SafetensorsReader"]


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

    def get(self, name: str) -> torch.Tensor:
        if name not in self.weight_map:
            raise KeyError(f"{self.path}: the checkpoint has no tensor {name!r}")
        fname = self.weight_map[name]
        if fname not in self._files:
            self._files[fname] = self._open(os.path.join(self.path, fname), framework="pt").__enter__()
        return self._files[fname].get_tensor(name)

    def close(self) -> None:
        for f in self._files.values():
            f.__exit__(None, None, None)
        self._files.clear()

    def __enter__(self) -> "SafetensorsReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def load(cls: type, path: str, device_mesh: Optional[DeviceMesh], dtype: Optional[torch.dtype], graph: Any):
    """``cls(config, device_mesh, dtype)`` with every parameter read from ``path``."""
    cfg = LlamaConfig.from_json_file(path)
    with SafetensorsReader(path) as reader:
        stored = reader.get("model.embed_tokens.weight").dtype
        want = dtype or stored

        def make(name: str, shape: tuple, mesh: DeviceMesh, by_name: dict, kind: str) -> Parameter:
            t = reader.get(name)
            if tuple(t.shape) != tuple(shape):
                raise ValueError(f"{path}: {name} has shape {tuple(t.shape)}, the config gives {tuple(shape)}")
            return Parameter(_factories.from_torch(t.to(want), mesh, placements(mesh, by_name), graph=graph))

        return cls(cfg, device_mesh, want, graph=graph, _make=make)
