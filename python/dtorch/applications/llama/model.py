"""The Llama decoder on ``dtorch.nn``: RMSNorm, rotary embeddings, GQA attention, SwiGLU MLP.

Every module computes what ``transformers``' ``modeling_llama`` computes, in the same op order
(``torch.equal`` logits on one device; see docs/decisions.md), on the placements of ``layout.py``:
q/k/v/gate/up are column-parallel on ``tp`` (heads and MLP columns sharded), o/down row-parallel
with their Partial all-reduced, the layers split over the ``pp`` stages.

>>> model = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
...                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=128),
...                          device_mesh=mesh)                    # random weights
>>> logits = model(torch.tensor([[1, 2, 3]]))
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional

import torch

from ... import _C, _factories
from ..._ops_views import cat
from ...distributed_spec import DeviceMesh, Replicate
from ...nn import functional as F
from ...nn.modules._common import _where
from ...nn.modules.container import ModuleList
from ...nn.modules.module import Module
from ...nn.parameter import Parameter
from .config import LlamaConfig
from .generation import generate as _generate
from .loading import load
from .layout import ACT, COL, CP_DIMS, KV, ROW, ROW_BIAS, VOCAB, Layout, lay, placements

__all__ = ["LlamaForCausalLM", "LlamaModel"]

SDPA_OPTION = F.SdpaOption(ulysess_cp_dim="ulysess_cp", ring_cp_dim="ring_cp")

# Makes a parameter: (name, shape, mesh, placements by name, init kind) -> Parameter.
Maker = Callable[[str, tuple, DeviceMesh, dict, str], Parameter]


def random_maker(cfg: LlamaConfig, dtype: torch.dtype, graph: Any) -> Maker:
    """Parameters as transformers initialises them: N(0, initializer_range) weights, ones for the
    norms, zeros for the biases."""

    def make(name: str, shape: tuple, mesh: DeviceMesh, by_name: dict, kind: str) -> Parameter:
        pl = placements(mesh, by_name)
        if kind == "normal":
            whole = [Replicate() if p.is_partial() else p for p in pl]
            t = _factories.randn(*shape, dtype=dtype, device_mesh=mesh, placements=whole, graph=graph)
            t = t * cfg.initializer_range
            return Parameter(t.redistribute(placements=pl) if whole != pl else t)
        value = torch.ones(shape, dtype=dtype) if kind == "ones" else torch.zeros(shape, dtype=dtype)
        return Parameter(_factories.from_torch(value, mesh, pl, graph=graph))

    return make


class _Linear(Module):
    """``F.linear(x, weight, bias)`` with a weight [out, in] laid out ``by_name`` (COL or ROW)."""

    def __init__(self, make: Maker, name: str, n_in: int, n_out: int, bias: bool, mesh: DeviceMesh,
                 by_name: dict, bias_by_name: Optional[dict] = None) -> None:
        super().__init__()
        self.weight = make(name + ".weight", (n_out, n_in), mesh, by_name, "normal")
        if bias:
            self.bias = make(name + ".bias", (n_out,), mesh, bias_by_name if bias_by_name is not None else by_name,
                             "zeros")
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
        shape = (batch, cfg.num_key_value_heads, max_len, cfg.head_dim)
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

    def read(self, i: int, length: int):
        """Layer ``i``'s keys and values at positions 0..length."""
        return self.k[i][:, :, :length], self.v[i][:, :, :length]


class LlamaAttention(Module):
    """Grouped-query attention with rotary embeddings; heads sharded on tp."""

    def __init__(self, make: Maker, name: str, cfg: LlamaConfig, mesh: DeviceMesh, idx: int) -> None:
        super().__init__()
        self.idx = idx
        self.mesh = mesh
        self.head_dim = cfg.head_dim
        self.n_rep = cfg.num_attention_heads // cfg.num_key_value_heads
        self.scaling = cfg.head_dim ** -0.5
        h = cfg.hidden_size
        q_out, kv_out = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
        b = cfg.attention_bias
        self.q_proj = _Linear(make, name + ".q_proj", h, q_out, b, mesh, COL)
        self.k_proj = _Linear(make, name + ".k_proj", h, kv_out, b, mesh, COL)
        self.v_proj = _Linear(make, name + ".v_proj", h, kv_out, b, mesh, COL)
        self.o_proj = _Linear(make, name + ".o_proj", q_out, h, b, mesh, ROW, ROW_BIAS)

    def forward(self, x: Any, cos: Any, sin: Any, cache: Optional[KVCache], start: int) -> Any:
        bsz, s, _ = x.shape
        d = self.head_dim
        q = self.q_proj(x).view(bsz, s, -1, d).transpose(1, 2)
        k = self.k_proj(x).view(bsz, s, -1, d).transpose(1, 2)
        v = self.v_proj(x).view(bsz, s, -1, d).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = F._apply_rotary_emb(q, cos, sin)
        k = F._apply_rotary_emb(k, cos, sin)
        mask = None
        if cache is not None:
            cache.update(self.idx, k, v, start)
            if start > 0:
                k, v = cache.read(self.idx, start + s)
                if s > 1:  # a chunk after cached positions: causal with an offset
                    keep = torch.arange(start, start + s)[:, None] >= torch.arange(start + s)[None, :]
                    mask = _factories.from_torch(keep, self.mesh, [Replicate()] * self.mesh.ndim)
        o = F.scaled_dot_product_attention(q, _repeat_kv(k, self.n_rep), _repeat_kv(v, self.n_rep),
                                           attn_mask=mask, is_causal=s > 1 and mask is None, scale=self.scaling,
                                           sdpa_option=SDPA_OPTION)
        o = o.transpose(1, 2).contiguous().reshape(bsz, s, -1)
        return lay(self.o_proj(o), self.mesh, ACT)  # the row-parallel Partial, all-reduced


class LlamaMLP(Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``; gate/up column-parallel, down row-parallel."""

    def __init__(self, make: Maker, name: str, cfg: LlamaConfig, mesh: DeviceMesh) -> None:
        super().__init__()
        self.mesh = mesh
        h, i, b = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = _Linear(make, name + ".gate_proj", h, i, b, mesh, COL)
        self.up_proj = _Linear(make, name + ".up_proj", h, i, b, mesh, COL)
        self.down_proj = _Linear(make, name + ".down_proj", i, h, b, mesh, ROW, ROW_BIAS)

    def forward(self, x: Any) -> Any:
        return lay(self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)), self.mesh, ACT)


class LlamaDecoderLayer(Module):
    """Pre-norm attention and MLP blocks with residuals, on one stage mesh."""

    def __init__(self, make: Maker, name: str, cfg: LlamaConfig, mesh: DeviceMesh, idx: int) -> None:
        super().__init__()
        self.mesh = mesh
        self.self_attn = LlamaAttention(make, name + ".self_attn", cfg, mesh, idx)
        self.mlp = LlamaMLP(make, name + ".mlp", cfg, mesh)
        self.input_layernorm = LlamaRMSNorm(make, name + ".input_layernorm", cfg.hidden_size, cfg.rms_norm_eps, mesh)
        self.post_attention_layernorm = LlamaRMSNorm(make, name + ".post_attention_layernorm", cfg.hidden_size,
                                                     cfg.rms_norm_eps, mesh)

    def forward(self, h: Any, cos: Any, sin: Any, cache: Optional[KVCache], start: int) -> Any:
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, cache, start)
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

    def __init__(self, make: Maker, cfg: LlamaConfig, layout: Layout) -> None:
        super().__init__()
        self.layout = layout
        self.embed_tokens = _Embedding(make, "model.embed_tokens", cfg, layout.first)
        self.layers = ModuleList([
            LlamaDecoderLayer(make, f"model.layers.{i}", cfg, layout.stages[layout.layer_stage[i]], i)
            for i in range(cfg.num_hidden_layers)])
        self.norm = LlamaRMSNorm(make, "model.norm", cfg.hidden_size, cfg.rms_norm_eps, layout.last)
        self._inv_freq = [None] * len(layout.stages)
        self._inv_freq_host = cfg.inv_freq()

    def _rotary(self, stage: int, start: int, s: int, dtype: torch.dtype):
        """cos and sin [1, S, head_dim] of positions start..start+S on a stage mesh, computed as
        transformers' ``LlamaRotaryEmbedding`` does (float32, then cast to the activations' dtype)."""
        mesh = self.layout.stages[stage]
        if self._inv_freq[stage] is None:
            self._inv_freq[stage] = _factories.from_torch(self._inv_freq_host, mesh, [Replicate()] * mesh.ndim)
        pos = _factories.from_torch(torch.arange(start, start + s)[None], mesh,
                                    placements(mesh, {n: ACT[n] for n in CP_DIMS}))
        inv = self._inv_freq[stage][None, :, None].expand(1, -1, 1).to(torch.float32)
        freqs = (inv @ pos[:, None, :].to(torch.float32)).transpose(1, 2)
        emb = cat([freqs, freqs], dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, ids: Any, cache: Optional[KVCache] = None, start: int = 0) -> Any:
        lay_ = self.layout
        h = self.embed_tokens(ids)
        s = ids.shape[1]
        rot = {}
        for i, layer in enumerate(self.layers):
            stage = lay_.layer_stage[i]
            h = lay(h, lay_.stages[stage], ACT)  # to the layer's pipeline stage (nothing if already there)
            if stage not in rot:
                rot[stage] = self._rotary(stage, start, s, h.dtype)
            h = layer(h, *rot[stage], cache, start)
        return self.norm(lay(h, lay_.last, ACT))


class LlamaForCausalLM(Module):
    """``transformers.LlamaForCausalLM`` on a mesh of ``dp, tp, pp, ulysess_cp, ring_cp`` (any
    absent or of size 1). ``model(ids)`` gives the logits [B, S, vocab] (a dtorch tensor,
    Replicate on tp and the stage meshes' other dims but dp); ``generate`` decodes with a KV cache.

    ``from_pretrained(folder, device_mesh=...)`` reads a Hugging Face folder; the constructor makes
    random weights (transformers' initialisation).

    >>> model = LlamaForCausalLM.from_pretrained(folder, device_mesh=mesh)
    >>> model(torch.tensor([[1, 2, 3]])).to_torch().shape
    torch.Size([1, 3, 128])
    """

    def __init__(self, config: LlamaConfig, device_mesh: Optional[DeviceMesh] = None,
                 dtype: Optional[torch.dtype] = None, *, graph: Any = None, _make: Optional[Maker] = None) -> None:
        super().__init__()
        w = _where(None, device_mesh, dtype, graph)
        self.config, self.graph, self.dtype = config, w.graph, w.dtype
        self.layout = Layout(w.mesh, config.num_hidden_layers)
        _check_mesh(config, self.layout)
        make = _make or random_maker(config, w.dtype, w.graph)
        self.model = LlamaModel(make, config, self.layout)
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
        """Reads a Hugging Face Llama folder (``config.json`` and ``model.safetensors`` or a sharded
        ``model.safetensors.index.json``) and distributes each parameter by its placements as it is
        read (a device receives only its shard). ``dtype`` casts the weights (default: as stored).

        >>> model = LlamaForCausalLM.from_pretrained("/models/llama", device_mesh=mesh, dtype=torch.bfloat16)
        """
        return load(cls, path, device_mesh, dtype, graph)

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        """An empty ``KVCache`` for ``batch`` sequences of up to ``max_len`` positions."""
        return KVCache(self, batch, max_len, self.model.embed_tokens.weight.dtype)

    def _ids(self, input_ids: Any) -> Any:
        mesh = self.layout.first
        if isinstance(input_ids, torch.Tensor):
            if input_ids.dim() != 2:
                raise ValueError(f"LlamaForCausalLM: input_ids must be [batch, seq], got shape "
                                 f"{tuple(input_ids.shape)}")
            return _factories.from_torch(input_ids.to(torch.int64), mesh, placements(mesh, ACT), graph=self.graph)
        if not isinstance(input_ids, _C.TensorBase):
            raise TypeError(f"LlamaForCausalLM: input_ids must be a torch or dtorch tensor, not "
                            f"{type(input_ids).__name__}")
        return lay(input_ids, mesh, ACT)

    def forward(self, input_ids: Any, cache: Optional[KVCache] = None, start: int = 0,
                logits_to_keep: int = 0) -> Any:
        """The logits [B, S, vocab] of ``input_ids`` [B, S] (torch or dtorch), for positions
        start..start+S; with ``cache`` the keys and values are written there and earlier positions
        read from it. ``logits_to_keep=n`` computes only the last n positions' logits."""
        h = self.model(self._ids(input_ids), cache, start)
        last = self.layout.last
        if logits_to_keep:
            h = lay(h, last, {"dp": ACT["dp"]})[:, -logits_to_keep:, :]
        logits = F.linear(h, self.lm_head.weight)  # vocabulary-parallel: Shard(-1) on tp
        return lay(logits, last, {"dp": ACT["dp"]} if logits_to_keep else ACT)

    def generate(self, input_ids: torch.Tensor, max_new_tokens: int = 20, do_sample: bool = False, **kwargs: Any):
        """Greedy or sampled decoding with a preallocated KV cache, as ``transformers``' ``generate``;
        see ``generation.generate`` for the arguments. Returns the prompt and the new tokens
        (torch.LongTensor [B, S + n])."""
        return _generate(self, input_ids, max_new_tokens, do_sample, **kwargs)


def _check_mesh(cfg: LlamaConfig, lay_: Layout) -> None:
    tp = lay_.tp
    for what, n in (("num_attention_heads", cfg.num_attention_heads), ("num_key_value_heads", cfg.num_key_value_heads)):
        if n % tp != 0:
            raise ValueError(f"LlamaForCausalLM: {what} ({n}) must be divisible by the tp size ({tp})")
