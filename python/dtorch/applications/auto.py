"""``AutoModelForCausalLM``: the causal LM class of a Hugging Face folder, picked by its ``model_type``.

>>> from dtorch.applications import AutoModelForCausalLM
>>> model = AutoModelForCausalLM.from_pretrained("/models/Qwen3-0.6B", device_mesh=mesh, dtype=torch.bfloat16)
>>> type(model).__name__
'Qwen3ForCausalLM'
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..distributed_spec import DeviceMesh
from .llama.config import LlamaConfig, config_class_for, read_config_json
from .llama.model import MODEL_CLASSES

__all__ = ["AutoModelForCausalLM"]


class AutoModelForCausalLM:
    """Loads the model class that implements a folder's ``model_type``: "llama"
    (``LlamaForCausalLM``), "qwen2", "qwen3", "mistral"; any other raises ValueError naming it
    before anything is read or queued.

    >>> model = AutoModelForCausalLM.from_pretrained("/models/Mistral-7B-v0.1", device_mesh=mesh)
    """

    @staticmethod
    def model_class(model_type: Optional[str]) -> type:
        """The class implementing ``model_type`` (ValueError if none does)."""
        config_class_for(model_type)
        return MODEL_CLASSES[model_type]

    @classmethod
    def from_pretrained(cls, path: str, device_mesh: Optional[DeviceMesh] = None, dtype: Optional[torch.dtype] = None,
                        *, graph: Any = None) -> Any:
        """``<class>.from_pretrained(path, device_mesh, dtype, graph=graph)`` for the class of
        ``path``'s ``config.json`` ``model_type``.

        >>> AutoModelForCausalLM.from_pretrained(folder, device_mesh=mesh, graph=dtorch.Graph())
        """
        kind = read_config_json(path).get("model_type")
        return cls.model_class(kind).from_pretrained(path, device_mesh=device_mesh, dtype=dtype, graph=graph)

    @classmethod
    def from_config(cls, config: LlamaConfig, device_mesh: Optional[DeviceMesh] = None,
                    dtype: Optional[torch.dtype] = None, *, graph: Any = None) -> Any:
        """A model of ``config``'s class with random weights (transformers' initialisation).

        >>> AutoModelForCausalLM.from_config(Qwen2Config(hidden_size=64, num_attention_heads=4), device_mesh=mesh)
        """
        return cls.model_class(config.model_type)(config, device_mesh, dtype, graph=graph)
