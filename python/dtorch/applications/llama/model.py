"""The Llama-family decoder on ``dtorch.nn``: RMSNorm, rotary embeddings, GQA attention, SwiGLU MLP.

Every module computes what ``transformers``' ``modeling_llama`` (and its Qwen2, Qwen3 and Mistral
variants) computes, in the same op order (``torch.equal`` logits on one device; see
docs/decisions.md), on the placements of ``layout.py``: q/k/v/gate/up are column-parallel on ``tp``
(heads and MLP columns sharded), o/down row-parallel with their Partial all-reduced, the layers split
over the ``pp`` stages. With fewer key/value heads than the tp size, each kv head is replicated on
the tp ranks whose query heads read it.

>>> model = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
...                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=128),
...                          device_mesh=mesh)                    # random weights
>>> logits = model(torch.tensor([[1, 2, 3]]))
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from ... import _C, _factories
from ..._ops_views import cat
from ...distributed_spec import DeviceMesh, Replicate
from ...nn import functional as F
from ...nn.modules._common import _where
from ...nn.modules.container import ModuleList
from ...nn.modules.module import Module
from ...nn.parameter import Parameter
from .config import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config
from .generation import generate as _generate
from .layout import ACT, COL, CP_DIMS, KV, ROW, ROW_BIAS, VOCAB, Layout, lay, placements, replicate_heads
from .loading import load
from .masks import AttentionPlan, attention_plan, without_redundant_mask
from .rope import Rotary

__all__ = ["LlamaForCausalLM", "LlamaModel", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM",
           "MODEL_CLASSES"]

SDPA_OPTION = F.SdpaOption(ulysess_cp_dim="ulysess_cp", ring_cp_dim="ring_cp")

# Makes a parameter: (name, checkpoint shape, mesh, placements by name, init kind, kv replication)
# -> Parameter. The replication (heads, r) repeats each of the ``heads`` row blocks r times in place
# (tp larger than the kv heads: block i serves the tp ranks i * r .. i * r + r - 1).
Maker = Callable[..., Parameter]


def random_maker(cfg: LlamaConfig, dtype: torch.dtype, graph: Any) -> Maker:
    """Parameters as transformers initialises them: N(0, initializer_range) weights, ones for the
    norms, zeros for the biases."""

    def make(name: str, shape: tuple, mesh: DeviceMesh, by_name: dict, kind: str,
             rep: Optional[Tuple[int, int]] = None) -> Parameter:
        pl = placements(mesh, by_name)
        whole = [Replicate() if p.is_partial() else p for p in pl]
        if rep is not None and rep[1] > 1:
            whole = [Replicate()] * mesh.ndim  # drawn whole, then its kv heads repeated
        if kind == "normal":
            t = _factories.randn(*shape, dtype=dtype, device_mesh=mesh, placements=whole, graph=graph)
            t = replicate_heads(t * cfg.initializer_range, rep)
            return Parameter(t.redistribute(placements=pl) if list(t.placements) != pl else t)
        value = torch.ones(shape, dtype=dtype) if kind == "ones" else torch.zeros(shape, dtype=dtype)
        return Parameter(_factories.from_torch(replicate_heads(value, rep), mesh, pl, graph=graph))

    return make


class _Linear(Module):
    """``F.linear(x, weight, bias)`` with a weight [out, in] laid out ``by_name`` (COL or ROW)."""

    def __init__(self, make: Maker, name: str, n_in: int, n_out: int, bias: bool, mesh: DeviceMesh,
                 by_name: dict, bias_by_name: Optional[dict] = None, rep: Optional[Tuple[int, int]] = None) -> None:
        super().__init__()
        self.weight = make(name + ".weight", (n_out, n_in), mesh, by_name, "normal", rep)
        if bias:
            self.bias = make(name + ".bias", (n_out,), mesh, bias_by_name if bias_by_name is not None else by_name,
                             "zeros", rep)
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Any) -> Any:
        return F.linear(x, self.weight, self.bias)


class LlamaRMSNorm(Module):
    """transformers' ``LlamaRMSNorm``: ``weight * (x * rsqrt(mean(x**2) + eps))`` in float32."""

    def __init__(self, make: Maker, name: str, size: int, eps: float, mesh: DeviceMesh) -> None:
        super().__init__()
        self.eps = eps
        self.weight = make(name + ".weight", (size,), mesh, {}, "ones")

    def forward(self, h: Any) -> Any:
        dtype = h.dtype
        x = h.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * (variance + self.eps).rsqrt()
        return self.weight * x.to(dtype)


def _repeat_kv(x: Any, n_rep: int) -> Any:
    """[B, Hkv, L, D] -> [B, Hkv * n_rep, L, D], each kv head repeated ``n_rep`` times in place
    (``enable_gqa``'s order). expand + reshape keeps a Shard of the heads on tp, where
    ``repeat_interleave`` would not."""
    if n_rep == 1:
        return x
    b, h, s, d = x.shape
    return x[:, :, None].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


class KVCache:
    """A preallocated key/value cache per layer, [B, kv_heads, max_len, head_dim], laid out like the
    attention (batch on dp, heads on tp) on each layer's stage mesh. dtorch values are immutable: a
    write rebinds the layer's cache to the updated value (``cache[:, :, a:b] = k``).

    >>> cache = model.new_cache(batch=2, max_len=64)
    """

    def __init__(self, model: "LlamaForCausalLM", batch: int, max_len: int, dtype: torch.dtype) -> None:
        cfg, lay_ = model.config, model.layout
        self.max_len = max_len
        self.k: List[Any] = []
        self.v: List[Any] = []
        self.batch = batch
        shape = (batch, lay_.kv_heads, max_len, cfg.head_dim)
        for i in range(cfg.num_hidden_layers):
            mesh = lay_.stages[lay_.layer_stage[i]]
            pl = placements(mesh, KV)
            for store in (self.k, self.v):
                store.append(_factories.zeros(*shape, dtype=dtype, device_mesh=mesh, placements=pl,
                                              graph=model.graph))

    def update(self, i: int, k: Any, v: Any, start: int) -> None:
        """Writes k and v [B, kv_heads, S, D] of layer ``i`` at positions start..start+S."""
        s = k.shape[2]
        if start + s > self.max_len:
            raise ValueError(f"KVCache: positions up to {start + s} do not fit in max_len={self.max_len}")
        mesh = self.k[i].device_mesh
        self.k[i][:, :, start:start + s] = lay(k, mesh, KV)
        self.v[i][:, :, start:start + s] = lay(v, mesh, KV)

    def read(self, i: int, lo: int, hi: int):
        """Layer ``i``'s keys and values at positions lo..hi."""
        return self.k[i][:, :, lo:hi], self.v[i][:, :, lo:hi]


class LlamaAttention(Module):
    """Grouped-query attention with rotary embeddings; heads sharded on tp (kv heads replicated on
    the tp ranks that read them when tp exceeds their number). Qwen3's q/k norms and the family's
    biases follow the config."""

    def __init__(self, make: Maker, name: str, cfg: LlamaConfig, layout: Layout, mesh: DeviceMesh,
                 idx: int) -> None:
        super().__init__()
        self.idx = idx
        self.mesh = mesh
        self.head_dim = d = cfg.head_dim
        self.window = cfg.layer_windows[idx]
        self.n_rep = cfg.num_attention_heads // layout.kv_heads
        self.scaling = d ** -0.5
        h = cfg.hidden_size
        q_out, kv_out = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
        rep = (cfg.num_key_value_heads, layout.kv_heads // cfg.num_key_value_heads)
        self.q_proj = _Linear(make, name + ".q_proj", h, q_out, cfg.qkv_bias, mesh, COL)
        self.k_proj = _Linear(make, name + ".k_proj", h, kv_out, cfg.qkv_bias, mesh, COL, rep=rep)
        self.v_proj = _Linear(make, name + ".v_proj", h, kv_out, cfg.qkv_bias, mesh, COL, rep=rep)
        self.o_proj = _Linear(make, name + ".o_proj", q_out, h, cfg.o_bias, mesh, ROW, ROW_BIAS)
        self.q_norm = self.k_norm = None
        if cfg.qk_norm:
            self.q_norm = LlamaRMSNorm(make, name + ".q_norm", d, cfg.rms_norm_eps, mesh)
            self.k_norm = LlamaRMSNorm(make, name + ".k_norm", d, cfg.rms_norm_eps, mesh)

    def forward(self, x: Any, cos: Any, sin: Any, cache: Optional[KVCache], start: int, plan: "_DevicePlan") -> Any:
        bsz, s, _ = x.shape
        d = self.head_dim
        q = self.q_proj(x).view(bsz, s, -1, d)
        k = self.k_proj(x).view(bsz, s, -1, d)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(x).view(bsz, s, -1, d).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = F._apply_rotary_emb(q, cos, sin)
        k = F._apply_rotary_emb(k, cos, sin)
        if cache is not None:
            cache.update(self.idx, k, v, start)
            if start > 0:
                k, v = cache.read(self.idx, plan.kv_lo, plan.kv_hi)
        o = F.scaled_dot_product_attention(q, _repeat_kv(k, self.n_rep), _repeat_kv(v, self.n_rep),
                                           attn_mask=plan.mask, is_causal=plan.is_causal, scale=self.scaling,
                                           sdpa_option=SDPA_OPTION)
        o = o.transpose(1, 2).contiguous().reshape(bsz, s, -1)
        return lay(self.o_proj(o), self.mesh, ACT)  # the row-parallel Partial, all-reduced


class _DevicePlan:
    """An ``AttentionPlan`` with its mask on a stage mesh."""

    def __init__(self, plan: AttentionPlan, mask: Any) -> None:
        self.kv_lo, self.kv_hi, self.is_causal, self.mask = plan.kv_lo, plan.kv_hi, plan.is_causal, mask


class LlamaMLP(Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``; gate/up column-parallel, down row-parallel."""

    def __init__(self, make: Maker, name: str, cfg: LlamaConfig, mesh: DeviceMesh) -> None:
        super().__init__()
        self.mesh = mesh
        h, i, b = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_has_bias
        self.gate_proj = _Linear(make, name + ".gate_proj", h, i, b, mesh, COL)
        self.up_proj = _Linear(make, name + ".up_proj", h, i, b, mesh, COL)
        self.down_proj = _Linear(make, name + ".down_proj", i, h, b, mesh, ROW, ROW_BIAS)

    def forward(self, x: Any) -> Any:
        return lay(self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)), self.mesh, ACT)


class LlamaDecoderLayer(Module):
    """Pre-norm attention and MLP blocks with residuals, on one stage mesh."""

    def __init__(self, make: Maker, name: str, cfg: LlamaConfig, layout: Layout, idx: int) -> None:
        super().__init__()
        self.mesh = mesh = layout.stages[layout.layer_stage[idx]]
        self.self_attn = LlamaAttention(make, name + ".self_attn", cfg, layout, mesh, idx)
        self.mlp = LlamaMLP(make, name + ".mlp", cfg, mesh)
        self.input_layernorm = LlamaRMSNorm(make, name + ".input_layernorm", cfg.hidden_size, cfg.rms_norm_eps, mesh)
        self.post_attention_layernorm = LlamaRMSNorm(make, name + ".post_attention_layernorm", cfg.hidden_size,
                                                     cfg.rms_norm_eps, mesh)

    def forward(self, h: Any, cos: Any, sin: Any, cache: Optional[KVCache], start: int, plan: _DevicePlan) -> Any:
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, cache, start, plan)
        return h + self.mlp(self.post_attention_layernorm(h))


class _Embedding(Module):
    """The token embedding [vocab, hidden], vocabulary-parallel on tp (the lookup gives a Partial)."""

    def __init__(self, make: Maker, name: str, cfg: LlamaConfig, mesh: DeviceMesh) -> None:
        super().__init__()
        self.mesh = mesh
        self.weight = make(name + ".weight", (cfg.vocab_size, cfg.hidden_size), mesh, VOCAB, "normal")

    def forward(self, ids: Any) -> Any:
        return lay(F.embedding(ids, self.weight), self.mesh, ACT)


class LlamaModel(Module):
    """The embedding, the decoder layers over the pipeline stages and the final norm."""

    def __init__(self, make: Maker, cfg: LlamaConfig, layout: Layout, graph: Any = None) -> None:
        super().__init__()
        self.layout = layout
        self.graph = graph
        self.embed_tokens = _Embedding(make, "model.embed_tokens", cfg, layout.first)
        self.layers = ModuleList([LlamaDecoderLayer(make, f"model.layers.{i}", cfg, layout, i)
                                  for i in range(cfg.num_hidden_layers)])
        self.norm = LlamaRMSNorm(make, "model.norm", cfg.hidden_size, cfg.rms_norm_eps, layout.last)
        self.rotary = Rotary(cfg)
        self._inv_freq: Dict[int, Tuple[torch.Tensor, Any]] = {}

    def _rotary(self, stage: int, positions: torch.Tensor, dtype: torch.dtype):
        """cos and sin [P, S, head_dim] of the position ids [P, S] (P: 1 or the batch) on a stage mesh,
        computed as transformers' rotary embedding does (float32, scaled by the attention factor,
        then cast to the activations' dtype)."""
        mesh = self.layout.stages[stage]
        inv_host = self.rotary.inv_freq
        if stage not in self._inv_freq or self._inv_freq[stage][0] is not inv_host:
            dev = _factories.from_torch(inv_host, mesh, [Replicate()] * mesh.ndim, graph=self.graph)
            self._inv_freq[stage] = (inv_host, dev)
        batch = positions.shape[0]
        by_batch = {"dp": ACT["dp"]} if batch > 1 else {}
        pos = _factories.from_torch(positions, mesh, placements(mesh, {**by_batch, **{n: ACT[n] for n in CP_DIMS}}),
                                    graph=self.graph)
        inv = lay(self._inv_freq[stage][1][None, :, None].expand(batch, -1, 1).to(torch.float32), mesh, by_batch)
        freqs = (inv @ pos[:, None, :].to(torch.float32)).transpose(1, 2)
        emb = cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos(), emb.sin()
        if self.rotary.attention_factor != 1.0:
            cos, sin = cos * self.rotary.attention_factor, sin * self.rotary.attention_factor
        return cos.to(dtype), sin.to(dtype)

    def _mask(self, stage: int, mask: Optional[torch.Tensor]) -> Any:
        if mask is None:
            return None
        mesh = self.layout.stages[stage]
        by_batch = {"dp": ACT["dp"]} if mask.shape[0] > 1 else {}
        return _factories.from_torch(mask, mesh, placements(mesh, by_batch), graph=self.graph)

    def forward(self, ids: Any, cache: Optional[KVCache] = None, start: int = 0,
                plans: Optional[Dict[Optional[int], AttentionPlan]] = None,
                positions: Optional[torch.Tensor] = None) -> Any:
        """The final hidden states of ``ids`` [B, S] at positions ``positions`` [1 or B, S] (default
        start..start+S), attending as ``plans`` (by sliding window) say (default: causal)."""
        lay_ = self.layout
        s = ids.shape[1]
        if positions is None:
            positions = torch.arange(start, start + s)[None]
        if plans is None:
            plans = {w: attention_plan(None, s, start, w, cache is not None) for w in set(self.rotary.cfg.layer_windows)}
        self.rotary.inv_freq_for(int(positions.max()))
        h = self.embed_tokens(ids)
        rot: Dict[int, Any] = {}
        dev_plans: Dict[Tuple[int, Optional[int]], _DevicePlan] = {}
        for i, layer in enumerate(self.layers):
            stage = lay_.layer_stage[i]
            h = lay(h, lay_.stages[stage], ACT)  # to the layer's pipeline stage (nothing if already there)
            if stage not in rot:
                rot[stage] = self._rotary(stage, positions, h.dtype)
            key = (stage, layer.self_attn.window)
            if key not in dev_plans:
                plan = plans[key[1]]
                dev_plans[key] = _DevicePlan(plan, self._mask(stage, plan.mask))
            h = layer(h, *rot[stage], cache, start, dev_plans[key])
        return self.norm(lay(h, lay_.last, ACT))


class LlamaForCausalLM(Module):
    """``transformers.LlamaForCausalLM`` on a mesh of ``dp, tp, pp, ulysess_cp, ring_cp`` (any
    absent or of size 1). ``model(ids)`` gives the logits [B, S, vocab] (a dtorch tensor,
    Replicate on tp and the stage meshes' other dims but dp); ``generate`` decodes with a KV cache.

    ``from_pretrained(folder, device_mesh=...)`` reads a Hugging Face folder; the constructor makes
    random weights (transformers' initialisation). Every tensor the model makes (weights, rotary
    tables, masks, caches, tokens) is on its ``graph``.

    >>> model = LlamaForCausalLM.from_pretrained(folder, device_mesh=mesh)
    >>> model(torch.tensor([[1, 2, 3]])).to_torch().shape
    torch.Size([1, 3, 128])
    """

    config_class: type = LlamaConfig

    def __init__(self, config: LlamaConfig, device_mesh: Optional[DeviceMesh] = None,
                 dtype: Optional[torch.dtype] = None, *, graph: Any = None, _make: Optional[Maker] = None) -> None:
        super().__init__()
        if not isinstance(config, LlamaConfig) or config.model_type != self.config_class.model_type:
            raise TypeError(f"{type(self).__name__} takes a {self.config_class.__name__}, not "
                            f"{type(config).__name__} (AutoModelForCausalLM.from_config picks the class)")
        w = _where(None, device_mesh, dtype, graph)
        self.config, self.graph, self.dtype = config, w.graph, w.dtype
        self.layout = Layout(w.mesh, config.num_hidden_layers)
        _check_mesh(config, self.layout, type(self).__name__)
        make = _make or random_maker(config, w.dtype, w.graph)
        self.model = LlamaModel(make, config, self.layout, w.graph)
        if config.tie_word_embeddings:
            # Tied: the embedding's weight, copied to the last stage when that is another mesh.
            self.lm_head = Module()
            emb = self.model.embed_tokens.weight
            self.lm_head.weight = emb if self.layout.first == self.layout.last else Parameter(
                lay(emb, self.layout.last, VOCAB))
        else:
            self.lm_head = _Linear(make, "lm_head", config.hidden_size, config.vocab_size, False, self.layout.last,
                                   VOCAB)

    @property
    def device_mesh(self) -> DeviceMesh:
        return self.layout.mesh

    @classmethod
    def from_pretrained(cls, path: str, device_mesh: Optional[DeviceMesh] = None, dtype: Optional[torch.dtype] = None,
                        *, graph: Any = None) -> "LlamaForCausalLM":
        """Reads a Hugging Face folder (``config.json`` and ``model.safetensors`` or a sharded
        ``model.safetensors.index.json``) and distributes each parameter by its placements as it is
        read (a device receives only its shard). ``dtype`` casts the weights (default: as stored).
        The config and every tensor's name and shape are checked before anything is queued: another
        model_type, an unsupported rope type, a missing, unknown or wrong-shaped tensor raise.

        >>> model = LlamaForCausalLM.from_pretrained("/models/llama", device_mesh=mesh, dtype=torch.bfloat16)
        """
        return load(cls, path, device_mesh, dtype, graph)

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        """An empty ``KVCache`` for ``batch`` sequences of up to ``max_len`` positions."""
        return KVCache(self, batch, max_len, self.model.embed_tokens.weight.dtype)

    def check_ids(self, input_ids: Any, name: str = "input_ids") -> None:
        """Raises (before anything is queued) for ids that are not [batch, seq] integers in the vocabulary:
        IndexError for an id out of range, as torch's embedding. dtorch tensors are checked for shape only.

        >>> model.check_ids(torch.tensor([[1, 2, 999999]]))
        IndexError: LlamaForCausalLM: input_ids holds token id 999999, outside the vocabulary [0, 128256)
        """
        if isinstance(input_ids, torch.Tensor):
            if input_ids.dim() != 2:
                raise ValueError(f"{type(self).__name__}: {name} must be [batch, seq], got shape "
                                 f"{tuple(input_ids.shape)}")
            if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
                raise TypeError(f"{type(self).__name__}: {name} must hold integer token ids, not {input_ids.dtype}")
            if input_ids.numel():
                lo, hi = int(input_ids.min()), int(input_ids.max())
                vocab = self.config.vocab_size
                if lo < 0 or hi >= vocab:
                    bad = lo if lo < 0 else hi
                    raise IndexError(f"{type(self).__name__}: {name} holds token id {bad}, outside the vocabulary "
                                     f"[0, {vocab})")
        elif not isinstance(input_ids, _C.TensorBase):
            raise TypeError(f"{type(self).__name__}: {name} must be a torch or dtorch tensor, not "
                            f"{type(input_ids).__name__}")
        elif input_ids.ndim != 2:
            raise ValueError(f"{type(self).__name__}: {name} must be [batch, seq], got shape {tuple(input_ids.shape)}")

    def _ids(self, input_ids: Any) -> Any:
        mesh = self.layout.first
        if isinstance(input_ids, torch.Tensor):
            return _factories.from_torch(input_ids.to(torch.int64), mesh, placements(mesh, ACT), graph=self.graph)
        return lay(input_ids, mesh, ACT)

    def attention_plans(self, batch: int, s: int, start: int, attention_mask: Optional[torch.Tensor],
                        cached: bool) -> Dict[Optional[int], AttentionPlan]:
        """The ``AttentionPlan`` of each sliding window of the layers (None: full attention) for ``s``
        positions after ``start``; raises before anything is queued for what the mesh cannot run.

        >>> model.attention_plans(2, 1, 9, torch.tensor([[0] * 3 + [1] * 7, [1] * 10]), True)[None].mask.shape
        torch.Size([2, 1, 1, 10])
        """
        name = type(self).__name__
        pad = None
        if attention_mask is not None:
            if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != (batch, start + s):
                raise ValueError(f"{name}: attention_mask must be a torch tensor [batch, past + seq] = "
                                 f"{[batch, start + s]}, got "
                                 f"{tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else attention_mask!r}")
            if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
                raise ValueError(f"{name}: attention_mask must hold 0 and 1 only")
            pad = attention_mask.to(torch.bool)
        plans = {w: attention_plan(pad, s, start, w, cached) for w in set(self.config.layer_windows)}
        ring = self.layout.size("ring_cp")
        if ring > 1:  # ring attention takes no mask: drop those that say nothing SDPA's defaults do not
            plans = {w: without_redundant_mask(p, s) for w, p in plans.items()}
        if ring > 1 and any(p.mask is not None for p in plans.values()):
            raise NotImplementedError(f"{name}: ring attention (mesh dim 'ring_cp' of size {ring}) takes no mask; "
                                      "padding (attention_mask), a chunk after cached positions or a sliding window "
                                      "shorter than the keys needs one: use ulysess_cp or a mesh without ring_cp")
        return plans

    def forward(self, input_ids: Any, cache: Optional[KVCache] = None, start: int = 0, logits_to_keep: int = 0,
                attention_mask: Optional[torch.Tensor] = None, position_ids: Optional[torch.Tensor] = None) -> Any:
        """The logits [B, S, vocab] of ``input_ids`` [B, S] (torch or dtorch), for positions
        start..start+S; with ``cache`` the keys and values are written there and earlier positions
        read from it. ``logits_to_keep=n`` computes only the last n positions' logits.
        ``attention_mask`` [B, start + S] (1: token, 0: padding) masks padded keys out, and
        ``position_ids`` [1 or B, S] (default start..start+S) places the tokens, as in transformers.
        Everything is checked before anything is queued."""
        self.check_ids(input_ids)
        b, s = input_ids.shape
        if cache is not None and (start + s > cache.max_len or b != cache.batch):
            raise ValueError(f"{type(self).__name__}: positions up to {start + s} of {b} sequences do not fit in "
                             f"the cache (max_len={cache.max_len}, batch {cache.batch})")
        if position_ids is not None:
            if not isinstance(position_ids, torch.Tensor) or position_ids.dim() != 2 or \
                    position_ids.shape[0] not in (1, b) or position_ids.shape[1] != s:
                raise ValueError(f"{type(self).__name__}: position_ids must be a torch tensor [1 or {b}, {s}]")
            position_ids = position_ids.to(torch.int64)
        plans = self.attention_plans(b, s, start, attention_mask, cache is not None)
        h = self.model(self._ids(input_ids), cache, start, plans, position_ids)
        last = self.layout.last
        if logits_to_keep:
            h = lay(h, last, {"dp": ACT["dp"]})[:, -logits_to_keep:, :]
        logits = F.linear(h, self.lm_head.weight)  # vocabulary-parallel: Shard(-1) on tp
        return lay(logits, last, {"dp": ACT["dp"]} if logits_to_keep else ACT)

    def generate(self, input_ids: torch.Tensor, max_new_tokens: int = 20, do_sample: bool = False, **kwargs: Any):
        """Greedy or sampled decoding with a preallocated KV cache, as ``transformers``' ``generate``;
        ``attention_mask`` takes a left-padded batch. See ``generation.generate`` for the arguments.
        Returns the prompt and the new tokens (torch.LongTensor [B, S + n])."""
        return _generate(self, input_ids, max_new_tokens, do_sample, **kwargs)


class Qwen2ForCausalLM(LlamaForCausalLM):
    """``transformers.Qwen2ForCausalLM``: the Llama decoder with q/k/v biases and optional
    sliding-window layers (``Qwen2Config``).

    >>> model = Qwen2ForCausalLM.from_pretrained("/models/Qwen2.5-0.5B", device_mesh=mesh)
    """

    config_class = Qwen2Config


class Qwen3ForCausalLM(LlamaForCausalLM):
    """``transformers.Qwen3ForCausalLM``: the Llama decoder with RMS norms of q and k per head
    (``Qwen3Config``).

    >>> model = Qwen3ForCausalLM.from_pretrained("/models/Qwen3-0.6B", device_mesh=mesh)
    """

    config_class = Qwen3Config


class MistralForCausalLM(LlamaForCausalLM):
    """``transformers.MistralForCausalLM``: the Llama decoder with sliding-window attention
    (``MistralConfig``).

    >>> model = MistralForCausalLM.from_pretrained("/models/Mistral-7B-v0.1", device_mesh=mesh)
    """

    config_class = MistralConfig


MODEL_CLASSES: Dict[str, type] = {c.config_class.model_type: c for c in (
    LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM)}


def _check_mesh(cfg: LlamaConfig, lay_: Layout, name: str) -> None:
    """The heads must split over tp; the kv heads too, or (fewer than tp) replicate onto it."""
    tp, kv = lay_.tp, cfg.num_key_value_heads
    if cfg.num_attention_heads % tp != 0:
        raise ValueError(f"{name}: num_attention_heads ({cfg.num_attention_heads}) must be divisible by the tp "
                         f"size ({tp})")
    if kv % tp != 0 and tp % kv != 0:
        raise ValueError(f"{name}: num_key_value_heads ({kv}) and the tp size ({tp}): one must divide the other "
                         "(kv heads are split over tp, or replicated when fewer)")
    lay_.kv_heads = max(kv, tp)
