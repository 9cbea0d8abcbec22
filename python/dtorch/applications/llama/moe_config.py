"""The configs of the mixture-of-experts members of the Llama family.

``MixtralConfig`` ("mixtral": Mistral's attention, every layer's MLP a sparse block of
``num_local_experts`` experts, top ``num_experts_per_tok`` renormalised), ``Qwen2MoeConfig``
("qwen2_moe": Qwen2's attention with ``qkv_bias``; sparse blocks with a shared expert behind a
sigmoid gate on the layers ``decoder_sparse_step`` / ``mlp_only_layers`` pick, dense MLPs of
``intermediate_size`` elsewhere; ``norm_topk_prob``) and ``Qwen3MoeConfig`` ("qwen3_moe": Qwen3's
q/k norms, no shared expert). Each takes its transformers class's names and defaults, and
``mlp_tensors(i)`` names layer i's MLP tensors in a Hugging Face checkpoint (the per-expert names
``save_pretrained`` writes).

>>> cfg = Qwen2MoeConfig.from_json_file("/models/Qwen1.5-MoE-A2.7B")
>>> cfg.num_experts, cfg.sparse_layers[:3]
(60, [True, True, True])
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Dict, List, Optional, Tuple

from .config import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

__all__ = ["MixtralConfig", "Qwen2MoeConfig", "Qwen3MoeConfig", "MoeMixin"]


class MoeMixin:
    """What the MoE configs share: the sparse layers, the expert tensors' names and the checks."""

    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int = 0

    def _check_moe(self) -> None:
        name = type(self).__name__
        if self.num_experts < 1 or not 1 <= self.num_experts_per_tok <= self.num_experts:
            raise ValueError(f"{name}: num_experts_per_tok ({self.num_experts_per_tok}) must be in "
                             f"[1, num_experts={self.num_experts}]")

    @property
    def sparse_layers(self) -> List[bool]:
        """Whether each layer's MLP is a sparse MoE block (True) or a dense MLP."""
        return [True] * self.num_hidden_layers

    @property
    def moe_prefix(self) -> str:
        """The checkpoint name of a layer's sparse block under ``model.layers.{i}.``."""
        return "mlp"

    @property
    def norm_topk(self) -> bool:
        """Whether the top-k routing weights are divided by their sum."""
        return True

    @property
    def weights_in_hidden_dtype(self) -> bool:
        """Whether the routing weights are cast to the hidden states' dtype before weighting the
        experts' outputs (Qwen; Mixtral keeps them float32)."""
        return True

    def expert_names(self, i: int, e: int) -> Tuple[str, str, str]:
        """The checkpoint names of expert e of layer i: gate, up and down projection weights."""
        p = f"model.layers.{i}.{self.moe_prefix}.experts.{e}."
        return p + "gate_proj.weight", p + "up_proj.weight", p + "down_proj.weight"

    def mlp_tensors(self, i: int) -> Dict[str, Tuple[int, ...]]:
        if not self.sparse_layers[i]:
            return LlamaConfig.mlp_tensors(self, i)  # type: ignore[arg-type]
        h, m = self.hidden_size, self.moe_intermediate_size  # type: ignore[attr-defined]
        p = f"model.layers.{i}.{self.moe_prefix}."
        out: Dict[str, Tuple[int, ...]] = {p + "gate.weight": (self.num_experts, h)}
        for e in range(self.num_experts):
            g, u, d = self.expert_names(i, e)
            out.update({g: (m, h), u: (m, h), d: (h, m)})
        s = self.shared_expert_intermediate_size
        if s:
            out.update({p + "shared_expert.gate_proj.weight": (s, h), p + "shared_expert.up_proj.weight": (s, h),
                        p + "shared_expert.down_proj.weight": (h, s), p + "shared_expert_gate.weight": (1, h)})
        return out


@dataclasses.dataclass
class MixtralConfig(MoeMixin, MistralConfig):
    """``transformers.MixtralConfig``: Mistral's attention (``sliding_window`` None by default), a
    sparse block (``block_sparse_moe``: router ``gate``, experts ``w1`` gate, ``w3`` up, ``w2`` down
    of ``intermediate_size``) on every layer, softmax then top-k renormalised, in float32.

    >>> MixtralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    ...               num_local_experts=4, vocab_size=128).num_experts
    4
    """

    model_type: ClassVar[str] = "mixtral"
    num_key_value_heads: Optional[int] = 8
    rms_norm_eps: float = 1e-5
    rope_theta: float = 1000000.0
    sliding_window: Optional[int] = None
    num_local_experts: int = 8
    num_experts_per_tok: int = 2
    router_jitter_noise: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        self.num_experts = self.num_local_experts
        self.moe_intermediate_size = self.intermediate_size
        self._check_moe()

    @property
    def moe_prefix(self) -> str:
        return "block_sparse_moe"

    @property
    def weights_in_hidden_dtype(self) -> bool:
        return False

    def expert_names(self, i: int, e: int) -> Tuple[str, str, str]:
        p = f"model.layers.{i}.block_sparse_moe.experts.{e}."
        return p + "w1.weight", p + "w3.weight", p + "w2.weight"


def _qwen_moe_sparse(cfg: Any) -> List[bool]:
    """transformers' rule: layer i is sparse unless listed in ``mlp_only_layers``, when there are
    experts and (i + 1) is a multiple of ``decoder_sparse_step``."""
    only = set(cfg.mlp_only_layers or [])
    return [i not in only and cfg.num_experts > 0 and (i + 1) % cfg.decoder_sparse_step == 0
            for i in range(cfg.num_hidden_layers)]


class _QwenMoe(MoeMixin):
    def _qwen_moe_post_init(self) -> None:
        if self.use_sliding_window:  # type: ignore[attr-defined]
            raise NotImplementedError(f"{type(self).__name__}: use_sliding_window is not supported for "
                                      f"{self.model_type} models")  # type: ignore[attr-defined]
        if self.decoder_sparse_step < 1:  # type: ignore[attr-defined]
            raise ValueError(f"{type(self).__name__}: decoder_sparse_step must be at least 1")
        if self.num_experts:
            self._check_moe()

    @property
    def sparse_layers(self) -> List[bool]:
        return _qwen_moe_sparse(self)

    @property
    def norm_topk(self) -> bool:
        return bool(self.norm_topk_prob)  # type: ignore[attr-defined]


@dataclasses.dataclass
class Qwen2MoeConfig(_QwenMoe, Qwen2Config):
    """``transformers.Qwen2MoeConfig``: Qwen2's attention (q/k/v biases as ``qkv_bias`` says, no o
    bias), sparse blocks of ``num_experts`` experts of ``moe_intermediate_size`` plus a shared expert
    of ``shared_expert_intermediate_size`` scaled by ``sigmoid(shared_expert_gate(x))``; dense MLPs of
    ``intermediate_size`` on the other layers. Sliding windows are refused.

    >>> Qwen2MoeConfig(hidden_size=32, num_attention_heads=4, num_experts=4, moe_intermediate_size=16,
    ...                shared_expert_intermediate_size=24, num_hidden_layers=2).shared_expert_intermediate_size
    24
    """

    model_type: ClassVar[str] = "qwen2_moe"
    intermediate_size: int = 5632
    num_key_value_heads: Optional[int] = 16
    decoder_sparse_step: int = 1
    moe_intermediate_size: int = 1408
    shared_expert_intermediate_size: int = 5632
    num_experts_per_tok: int = 4
    num_experts: int = 60
    norm_topk_prob: bool = False
    mlp_only_layers: Optional[List[int]] = None
    attention_bias: bool = True  # the file's ``qkv_bias``

    def __post_init__(self) -> None:
        super().__post_init__()
        self._qwen_moe_post_init()

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Qwen2MoeConfig":
        d = dict(d)
        if "qkv_bias" in d:
            d["attention_bias"] = d.pop("qkv_bias")
        return super().from_dict(d)

    @property
    def qkv_bias(self) -> bool:
        return self.attention_bias


@dataclasses.dataclass
class Qwen3MoeConfig(_QwenMoe, Qwen3Config):
    """``transformers.Qwen3MoeConfig``: Qwen3's attention (q/k norms, ``attention_bias``), ``head_dim``
    hidden_size // num_attention_heads unless the file says otherwise, sparse blocks without a shared
    expert. Sliding windows are refused.

    >>> Qwen3MoeConfig(hidden_size=32, num_attention_heads=4, num_experts=4, moe_intermediate_size=16,
    ...                num_hidden_layers=2).head_dim
    8
    """

    model_type: ClassVar[str] = "qwen3_moe"
    head_dim: Optional[int] = None
    intermediate_size: int = 6144
    num_key_value_heads: Optional[int] = 4
    decoder_sparse_step: int = 1
    moe_intermediate_size: int = 768
    num_experts_per_tok: int = 8
    num_experts: int = 128
    norm_topk_prob: bool = False
    mlp_only_layers: Optional[List[int]] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._qwen_moe_post_init()

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Qwen3MoeConfig":
        d = dict(d)
        if "num_local_experts" in d and "num_experts" not in d:
            d["num_experts"] = d["num_local_experts"]
        return super().from_dict(d)


MOE_TYPES: Dict[str, type] = {c.model_type: c for c in (MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig)}
