"""The configs of the Llama family: the fields of a Hugging Face ``config.json`` that the models use.

``LlamaConfig`` (``model_type`` "llama") and its variants ``Qwen2Config`` ("qwen2": q/k/v biases,
no o_proj bias, optional sliding-window layers), ``Qwen3Config`` ("qwen3": RMS norms of q and k
per head) and ``MistralConfig`` ("mistral": sliding-window attention on every layer). Each takes
the names and defaults of its transformers class; ``config_class_for(model_type)`` picks one and
raises ValueError for a type none implements.

>>> cfg = LlamaConfig.from_json_file("/path/to/hf-llama/config.json")
>>> cfg.num_key_value_heads, cfg.head_dim
(2, 16)
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, ClassVar, Dict, List, Optional, Union

import torch

from .rope import inv_freq_and_factor, rope_parameters

__all__ = ["LlamaConfig", "Qwen2Config", "Qwen3Config", "MistralConfig", "MODEL_TYPES", "config_class_for",
           "read_config_json"]

_LAYER_TYPES = ("full_attention", "sliding_attention")


@dataclasses.dataclass
class LlamaConfig:
    """A Llama configuration (the names and defaults of ``transformers.LlamaConfig``).

    ``rope_scaling`` is the ``rope_parameters`` (transformers 5) or ``rope_scaling`` (4.x) dict of
    the file; ``rope`` is that dict completed and checked (``rope.rope_parameters``): the types
    "default", "linear", "dynamic", "yarn", "llama3" and "longrope" are supported, others raise
    ValueError, as do a hidden_act other than silu, a partial rotary factor and a quantization config.

    >>> LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    ...             num_key_value_heads=2, vocab_size=128).head_dim
    16
    """

    model_type: ClassVar[str] = "llama"

    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: Optional[int] = None
    head_dim: Optional[int] = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: Optional[Dict[str, Any]] = None
    vocab_size: int = 32000
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 2048
    bos_token_id: Optional[int] = 1
    eos_token_id: Optional[Union[int, List[int]]] = 2
    pad_token_id: Optional[int] = None
    attention_bias: bool = False
    mlp_bias: bool = False
    hidden_act: str = "silu"
    initializer_range: float = 0.02
    torch_dtype: Optional[str] = None
    # Read so that a file which sets them is refused or honoured, not silently misread.
    sliding_window: Optional[int] = None
    use_sliding_window: bool = False
    max_window_layers: Optional[int] = None
    layer_types: Optional[List[str]] = None
    original_max_position_embeddings: Optional[int] = None
    partial_rotary_factor: Optional[float] = None
    quantization_config: Optional[Dict[str, Any]] = None

    def __post_init__(self) -> None:
        name = type(self).__name__
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ValueError(f"{name}: num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                             f"num_key_value_heads ({self.num_key_value_heads})")
        if self.hidden_act != "silu":
            raise ValueError(f"{name}: hidden_act {self.hidden_act!r} is not supported (only 'silu')")
        if self.quantization_config:
            raise ValueError(f"{name}: quantized checkpoints are not supported (quantization_config "
                             f"{self.quantization_config.get('quant_method', '?')!r})")
        raw = dict(self.rope_scaling or {})
        if self.partial_rotary_factor is not None:
            raw.setdefault("partial_rotary_factor", self.partial_rotary_factor)
        self.rope = rope_parameters(raw, self.rope_theta, self.max_position_embeddings,
                                    self.original_max_position_embeddings, self.head_dim)
        self.rope_theta = float(self.rope["rope_theta"])
        self.layer_windows = self._windows()

    def _windows(self) -> List[Optional[int]]:
        """The sliding window of each layer (None: full causal attention). Llama has none."""
        return [None] * self.num_hidden_layers

    # The family's differences, read by the model.
    @property
    def qkv_bias(self) -> bool:
        """Whether q_proj, k_proj and v_proj have biases."""
        return self.attention_bias

    @property
    def o_bias(self) -> bool:
        """Whether o_proj has a bias."""
        return self.attention_bias

    @property
    def mlp_has_bias(self) -> bool:
        """Whether gate_proj, up_proj and down_proj have biases."""
        return self.mlp_bias

    @property
    def qk_norm(self) -> bool:
        """Whether q and k go through an RMS norm per head before the rotary embedding."""
        return False

    @property
    def rope_type(self) -> str:
        return self.rope["rope_type"]

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "LlamaConfig":
        """The config from a parsed ``config.json``; keys that no field names are ignored. A file of
        another ``model_type`` raises ValueError.

        >>> LlamaConfig.from_dict(json.load(open("config.json")))
        """
        kind = d.get("model_type", cls.model_type)
        if kind != cls.model_type:
            raise ValueError(f"{cls.__name__}: the config's model_type is {kind!r}, not {cls.model_type!r} "
                             f"(dtorch.applications.AutoModelForCausalLM picks the class by model_type)")
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        rope = d.get("rope_parameters") or d.get("rope_scaling")
        kw["rope_scaling"] = dict(rope) if rope else None
        if "torch_dtype" not in kw and isinstance(d.get("dtype"), str):
            kw["torch_dtype"] = d["dtype"]
        return cls(**kw)

    @classmethod
    def from_json_file(cls, path: str) -> "LlamaConfig":
        """The config in ``path`` (a ``config.json``, or a folder holding one)."""
        return cls.from_dict(read_config_json(path))

    @property
    def eos_token_ids(self) -> List[int]:
        """``eos_token_id`` as a list (empty when there is none)."""
        e = self.eos_token_id
        return [] if e is None else [int(e)] if isinstance(e, int) else [int(x) for x in e]

    def inv_freq(self) -> torch.Tensor:
        """The rotary inverse frequencies [head_dim // 2] (float32) at load, as transformers computes them."""
        return inv_freq_and_factor(self)[0]


def _qwen_windows(cfg: LlamaConfig) -> List[Optional[int]]:
    """Qwen2/Qwen3: ``sliding_window`` (when ``use_sliding_window``) on the layers ``layer_types`` marks
    "sliding_attention" (by default those from ``max_window_layers`` on)."""
    window = cfg.sliding_window if cfg.use_sliding_window else None
    types = cfg.layer_types
    if types is None:
        first = cfg.max_window_layers if cfg.max_window_layers is not None else 28
        types = ["sliding_attention" if window is not None and i >= first else "full_attention"
                 for i in range(cfg.num_hidden_layers)]
    name = type(cfg).__name__
    if len(types) != cfg.num_hidden_layers or any(t not in _LAYER_TYPES for t in types):
        raise ValueError(f"{name}: layer_types must name one of {_LAYER_TYPES} per layer, got {types}")
    if "sliding_attention" in types and window is None:
        raise ValueError(f"{name}: layer_types has sliding_attention layers but no sliding window "
                         "(use_sliding_window and sliding_window)")
    return [window if t == "sliding_attention" else None for t in types]


@dataclasses.dataclass
class Qwen2Config(LlamaConfig):
    """``transformers.Qwen2Config``: biases on q/k/v (not o), no MLP bias, sliding-window layers when
    ``use_sliding_window``.

    >>> Qwen2Config.from_json_file("/models/Qwen2.5-0.5B").qkv_bias
    True
    """

    model_type: ClassVar[str] = "qwen2"
    vocab_size: int = 151936
    intermediate_size: int = 22016
    num_key_value_heads: Optional[int] = 32
    max_position_embeddings: int = 32768
    bos_token_id: Optional[int] = None
    eos_token_id: Optional[Union[int, List[int]]] = None
    sliding_window: Optional[int] = 4096
    max_window_layers: Optional[int] = 28

    def _windows(self) -> List[Optional[int]]:
        return _qwen_windows(self)

    @property
    def qkv_bias(self) -> bool:
        return True

    @property
    def o_bias(self) -> bool:
        return False

    @property
    def mlp_has_bias(self) -> bool:
        return False


@dataclasses.dataclass
class Qwen3Config(Qwen2Config):
    """``transformers.Qwen3Config``: RMS norms of q and k per head (``q_norm``, ``k_norm``),
    ``attention_bias`` on all four projections, ``head_dim`` 128 unless the file says otherwise.

    >>> Qwen3Config.from_json_file("/models/Qwen3-0.6B").qk_norm
    True
    """

    model_type: ClassVar[str] = "qwen3"
    head_dim: Optional[int] = 128

    @property
    def qkv_bias(self) -> bool:
        return self.attention_bias

    @property
    def o_bias(self) -> bool:
        return self.attention_bias

    @property
    def qk_norm(self) -> bool:
        return True


@dataclasses.dataclass
class MistralConfig(LlamaConfig):
    """``transformers.MistralConfig``: no biases, ``sliding_window`` (None: full attention) on every
    layer (a ``layer_types`` in the file is ignored, as transformers' Mistral ignores it).

    >>> MistralConfig.from_json_file("/models/Mistral-7B-v0.1").sliding_window
    4096
    """

    model_type: ClassVar[str] = "mistral"
    intermediate_size: int = 14336
    num_key_value_heads: Optional[int] = 8
    max_position_embeddings: int = 4096 * 32
    sliding_window: Optional[int] = 4096

    def _windows(self) -> List[Optional[int]]:
        return [self.sliding_window] * self.num_hidden_layers

    @property
    def qkv_bias(self) -> bool:
        return False

    @property
    def o_bias(self) -> bool:
        return False

    @property
    def mlp_has_bias(self) -> bool:
        return False


MODEL_TYPES: Dict[str, type] = {c.model_type: c for c in (LlamaConfig, Qwen2Config, Qwen3Config, MistralConfig)}


def read_config_json(path: str) -> Dict[str, Any]:
    """The parsed ``config.json`` at ``path`` (the file, or a folder holding one).

    >>> read_config_json("/models/Qwen3-0.6B")["model_type"]
    'qwen3'
    """
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def config_class_for(model_type: Optional[str]) -> type:
    """The config class of ``model_type``; ValueError naming it and the supported ones otherwise.

    >>> config_class_for("qwen3").__name__
    'Qwen3Config'
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type {model_type!r} is not supported by dtorch.applications "
                         f"(supported: {', '.join(MODEL_TYPES)})")
    return MODEL_TYPES[model_type]

