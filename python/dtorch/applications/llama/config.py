"""``LlamaConfig``: the fields of a Hugging Face Llama ``config.json`` that the model uses.

>>> cfg = LlamaConfig.from_json_file("/path/to/hf-llama/config.json")
>>> cfg.num_key_value_heads, cfg.head_dim
(2, 16)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Dict, List, Optional, Union

import torch

__all__ = ["LlamaConfig"]

_ROPE_TYPES = ("default", "linear", "llama3")


@dataclasses.dataclass
class LlamaConfig:
    """A Llama configuration (the names and defaults of ``transformers.LlamaConfig``).

    ``rope_scaling`` is the ``rope_parameters`` (transformers 5) or ``rope_scaling`` (4.x) dict of
    the file; the types "default", "linear" and "llama3" are supported, others raise ValueError.

    >>> LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    ...             num_key_value_heads=2, vocab_size=128).head_dim
    16
    """

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

    def __post_init__(self) -> None:
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ValueError(f"LlamaConfig: num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                             f"num_key_value_heads ({self.num_key_value_heads})")
        if self.hidden_act != "silu":
            raise ValueError(f"LlamaConfig: hidden_act {self.hidden_act!r} is not supported (only 'silu')")
        rope = dict(self.rope_scaling or {})
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind not in _ROPE_TYPES:
            raise ValueError(f"LlamaConfig: rope type {kind!r} is not supported (one of {_ROPE_TYPES})")
        if "rope_theta" in rope:
            self.rope_theta = float(rope["rope_theta"])

    @property
    def rope_type(self) -> str:
        rope = self.rope_scaling or {}
        return rope.get("rope_type", rope.get("type", "default"))

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "LlamaConfig":
        """The config from a parsed ``config.json``; unknown keys are ignored.

        >>> LlamaConfig.from_dict(json.load(open("config.json")))
        """
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
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

    @property
    def eos_token_ids(self) -> List[int]:
        """``eos_token_id`` as a list (empty when there is none)."""
        e = self.eos_token_id
        return [] if e is None else [int(e)] if isinstance(e, int) else [int(x) for x in e]

    def inv_freq(self) -> torch.Tensor:
        """The rotary inverse frequencies [head_dim // 2] (float32), as transformers computes them."""
        dim = self.head_dim
        base = self.rope_theta
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
        rope = self.rope_scaling or {}
        if self.rope_type == "linear":
            inv /= rope["factor"]
        elif self.rope_type == "llama3":
            factor, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
            old = rope["original_max_position_embeddings"]
            low_wavelen, high_wavelen = old / lo, old / hi
            wavelen = 2 * math.pi / inv
            inv_l = torch.where(wavelen > low_wavelen, inv / factor, inv)
            smooth = (old / wavelen - lo) / (hi - lo)
            smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
            medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
            inv = torch.where(medium, smoothed, inv_l)
        return inv
