"""SD3's text encoders: CLIP-L / CLIP-G (transformers' ``CLIPTextModelWithProjection``) and the T5
encoder (``T5EncoderModel``), on the text mesh ``mesh.unbind(["ulysess_cp", "ring_cp"])[0]``.

``dp`` splits the prompts, ``tp`` the heads and the MLP (q/k/v, fc1, wi_0/wi_1 column-parallel;
out_proj, fc2, o, wo row-parallel and all-reduced; T5's relative-bias table split by head). Token
ids come from the host (the tokenizers); the outputs stay dtorch tensors.

>>> clip = CLIPTextModelWithProjection.from_pretrained("sd3/text_encoder", device_mesh=text_mesh)
>>> pooled, hidden_states = clip(ids)         # text_embeds (B, P) and every layer's output
>>> t5 = T5EncoderModel.from_pretrained("sd3/text_encoder_3", device_mesh=text_mesh)
>>> seq = t5(ids)                             # last_hidden_state (B, S, d_model)
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import torch

from ... import _factories
from ...distributed_spec import DeviceMesh, Replicate, Shard
from ...nn import functional as F
from ...nn.modules.container import ModuleList
from ...nn.modules.module import Module
from ._common import (DP, TP, Embedding, Layer, LayerNorm, Linear, batch_placements, configure, declared_keys,
                      load_pretrained, mesh_dim, mesh_size, placements, with_placement)
from .transformer import _QKNorm

__all__ = ["CLIPTextModelWithProjection", "CLIPTextModel", "T5EncoderModel"]


def _act(x: Any, name: str) -> Any:
    """transformers' ``ACT2FN[name]``, in its op order."""
    if name == "quick_gelu":
        return x * (1.702 * x).sigmoid()
    if name == "gelu":
        return F.gelu(x)
    if name in ("gelu_new", "gelu_python_tanh"):
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3.0))
        return 0.5 * x * (1.0 + inner.tanh()) if name == "gelu_new" else x * 0.5 * (1.0 + inner.tanh())
    if name == "gelu_pytorch_tanh":
        return F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu(x)
    if name in ("silu", "swish"):
        return F.silu(x)
    raise NotImplementedError(f"activation {name!r} is not supported")


def _ids(ids: Any, mesh: DeviceMesh) -> Any:
    """Token ids (a torch tensor from a tokenizer, or a dtorch one) on ``mesh``, split over ``dp``."""
    if isinstance(ids, torch.Tensor):
        return _factories.from_torch(ids.to(torch.int64), mesh, batch_placements(mesh))
    return ids


def _check_heads(heads: int, mesh: DeviceMesh, what: str) -> None:
    tp = mesh_size(mesh, TP)
    if heads % tp != 0:
        raise ValueError(f"the {heads} attention heads of {what} do not split over tp={tp}")


# ---------------------------------------------------------------- CLIP


class _ClipAttention(Module):
    def __init__(self, dim: int, heads: int, *, mesh: DeviceMesh) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q_proj = Linear(dim, dim, mesh=mesh, tp="col")
        self.k_proj = Linear(dim, dim, mesh=mesh, tp="col")
        self.v_proj = Linear(dim, dim, mesh=mesh, tp="col")
        self.out_proj = Linear(dim, dim, mesh=mesh, tp="row")

    def forward(self, x: Any) -> Any:
        b, s = x.shape[0], x.shape[1]

        def heads(t: Any) -> Any:
            return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        # transformers' sdpa path: causal, no mask, scale head_dim ** -0.5.
        h = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True, scale=self.head_dim ** -0.5)
        h = h.transpose(1, 2).contiguous().reshape(b, s, -1).contiguous()
        return self.out_proj(h)


class _ClipLayer(Module):
    def __init__(self, cfg: Dict[str, Any], *, mesh: DeviceMesh) -> None:
        super().__init__()
        d, eps = cfg["hidden_size"], cfg["layer_norm_eps"]
        self.act = cfg["hidden_act"]
        self.self_attn = _ClipAttention(d, cfg["num_attention_heads"], mesh=mesh)
        self.layer_norm1 = LayerNorm(d, eps, mesh=mesh)
        mlp = Module()
        mlp.fc1 = Linear(d, cfg["intermediate_size"], mesh=mesh, tp="col")
        mlp.fc2 = Linear(cfg["intermediate_size"], d, mesh=mesh, tp="row")
        self.mlp = mlp
        self.layer_norm2 = LayerNorm(d, eps, mesh=mesh)

    def forward(self, x: Any) -> Any:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp.fc2(_act(self.mlp.fc1(self.layer_norm2(x)), self.act))


_CLIP_DEFAULTS = dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, projection_dim=512,
                      num_hidden_layers=12, num_attention_heads=8, max_position_embeddings=77, hidden_act="quick_gelu",
                      layer_norm_eps=1e-5, eos_token_id=2)


class CLIPTextModelWithProjection(Module):
    """transformers' ``CLIPTextModelWithProjection``: ``forward(input_ids)`` returns
    ``(text_embeds, hidden_states)`` where ``hidden_states`` lists the embeddings and every layer's
    output (so ``hidden_states[-2]`` is SD3's penultimate layer, without the final LayerNorm).

    >>> pooled, hs = clip(tokenizer(prompt, padding="max_length", max_length=77, return_tensors="pt").input_ids)
    """

    projection = True

    def __init__(self, config: Dict[str, Any], *, device_mesh: DeviceMesh) -> None:
        super().__init__()
        cfg = configure(self, config, _CLIP_DEFAULTS, device_mesh)
        mesh = device_mesh
        _check_heads(cfg["num_attention_heads"], mesh, "CLIP")
        d = cfg["hidden_size"]
        tm = Module()
        emb = Module()
        emb.token_embedding = Embedding(cfg["vocab_size"], d, mesh=mesh)
        emb.position_embedding = Embedding(cfg["max_position_embeddings"], d, mesh=mesh)
        tm.embeddings = emb
        enc = Module()
        enc.layers = ModuleList([_ClipLayer(cfg, mesh=mesh) for _ in range(cfg["num_hidden_layers"])])
        tm.encoder = enc
        tm.final_layer_norm = LayerNorm(d, cfg["layer_norm_eps"], mesh=mesh)
        self.text_model = tm
        if self.projection:
            self.text_projection = Linear(d, cfg["projection_dim"], bias=False, mesh=mesh)

    @classmethod
    def from_pretrained(cls, path: str, *, device_mesh: DeviceMesh,
                        torch_dtype: Optional[torch.dtype] = None) -> "CLIPTextModelWithProjection":
        """Reads ``path/config.json`` and ``path/model*.safetensors``."""
        # transformers 5 saves CLIPTextModel's keys without the ``text_model.`` prefix.
        def aliases(model: Module) -> Dict[str, str]:
            return {k: k[len("text_model."):] for k in declared_keys(model) if k.startswith("text_model.")}

        return load_pretrained(cls, path, device_mesh=device_mesh, torch_dtype=torch_dtype, stem="model",
                               aliases=aliases,
                               ignore=("text_model.embeddings.position_ids", "embeddings.position_ids"))

    @property
    def dtype(self) -> torch.dtype:
        return self.text_model.final_layer_norm.weight.dtype

    def eos_positions(self, ids: torch.Tensor) -> torch.Tensor:
        """transformers' pooling index per row: argmax of the ids (legacy eos_token_id 2), else the first EOS."""
        ids = ids.to(torch.int)
        if self.config["eos_token_id"] == 2:
            return ids.argmax(dim=-1)
        return (ids == self.config["eos_token_id"]).int().argmax(dim=-1)

    def forward(self, input_ids: torch.Tensor) -> Tuple[Any, List[Any]]:
        if not isinstance(input_ids, torch.Tensor):
            raise TypeError("CLIPTextModelWithProjection: input_ids must be a torch tensor of token ids (the host's)")
        b, s = input_ids.shape
        if s > self.config["max_position_embeddings"]:
            raise ValueError(f"Sequence length must be less than max_position_embeddings (got `sequence length`: "
                             f"{s} and max_position_embeddings: {self.config['max_position_embeddings']}")
        mesh = self.mesh
        emb = self.text_model.embeddings
        pos = _factories.from_torch(torch.arange(s)[None, :], mesh, placements(mesh))
        x = emb.token_embedding(_ids(input_ids, mesh)) + emb.position_embedding(pos)
        hidden = [x]
        for layer in self.text_model.encoder.layers:
            x = layer(x)
            hidden.append(x)
        last = self.text_model.final_layer_norm(x)
        # The EOS rows of the final states: one gather of rows b * s + eos_b, over the whole batch
        # (an all-gather over dp of the final states, which are small), then split over dp again.
        rows = torch.arange(b) * s + self.eos_positions(input_ids).to(torch.int64)
        whole = with_placement(last, mesh_dim(mesh, DP), Replicate())
        pooled = whole.reshape(b * s, -1)[_factories.from_torch(rows, mesh, placements(mesh))]
        pooled = with_placement(pooled, mesh_dim(mesh, DP), Shard(0))
        return (self.text_projection(pooled) if self.projection else pooled), hidden


class CLIPTextModel(CLIPTextModelWithProjection):
    """transformers' ``CLIPTextModel`` (Flux's CLIP-L): ``forward(input_ids)`` returns
    ``(pooler_output, hidden_states)``, the final-norm state at the EOS token without a projection.

    >>> pooled, hs = CLIPTextModel.from_pretrained("flux/text_encoder", device_mesh=text_mesh)(ids)
    """

    projection = False


# ---------------------------------------------------------------- T5


class _T5Norm(_QKNorm):
    """T5LayerNorm: RMS over the last dim with the variance in float32, then times ``weight`` (the
    transformer's RMS norm, the same ops; a product is the same bits in either order)."""


def _bucket(rel: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """transformers' bidirectional ``_relative_position_bucket`` (host integers)."""
    num_buckets //= 2
    buckets = (rel > 0).to(torch.long) * num_buckets
    rel = torch.abs(rel)
    max_exact = num_buckets // 2
    is_small = rel < max_exact
    large = max_exact + (torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, rel, large)


class _T5Attention(Module):
    def __init__(self, cfg: Dict[str, Any], has_bias: bool, *, mesh: DeviceMesh) -> None:
        super().__init__()
        d, inner = cfg["d_model"], cfg["num_heads"] * cfg["d_kv"]
        self.heads, self.d_kv = cfg["num_heads"], cfg["d_kv"]
        self.q = Linear(d, inner, bias=False, mesh=mesh, tp="col")
        self.k = Linear(d, inner, bias=False, mesh=mesh, tp="col")
        self.v = Linear(d, inner, bias=False, mesh=mesh, tp="col")
        self.o = Linear(inner, d, bias=False, mesh=mesh, tp="row")
        if has_bias:
            rel = Layer(mesh)
            rel.declare("weight", (cfg["relative_attention_num_buckets"], self.heads), placements(mesh, tp=Shard(1)))
            self.relative_attention_bias = rel

    def forward(self, x: Any, bias: Any) -> Any:
        b, s = x.shape[0], x.shape[1]

        def heads(t: Any) -> Any:
            return t.view(b, s, -1, self.d_kv).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        # transformers' sdpa path: the position bias is the float mask, scale 1 (T5 does not scale).
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=0.0, is_causal=False, scale=1.0)
        h = h.transpose(1, 2).contiguous().reshape(b, s, -1).contiguous()
        return self.o(h)


class _T5Block(Module):
    def __init__(self, cfg: Dict[str, Any], has_bias: bool, *, mesh: DeviceMesh) -> None:
        super().__init__()
        d, eps = cfg["d_model"], cfg["layer_norm_epsilon"]
        attn = Module()
        attn.SelfAttention = _T5Attention(cfg, has_bias, mesh=mesh)
        attn.layer_norm = _T5Norm(d, eps, mesh=mesh)
        ff = Module()
        dense = Module()
        self.gated = cfg["feed_forward_proj"].startswith("gated-")
        self.act = cfg["feed_forward_proj"].split("-")[-1]
        if self.act == "gelu" and self.gated:
            self.act = "gelu_new"  # transformers' rule for "gated-gelu"
        if self.gated:
            dense.wi_0 = Linear(d, cfg["d_ff"], bias=False, mesh=mesh, tp="col")
            dense.wi_1 = Linear(d, cfg["d_ff"], bias=False, mesh=mesh, tp="col")
        else:
            dense.wi = Linear(d, cfg["d_ff"], bias=False, mesh=mesh, tp="col")
        dense.wo = Linear(cfg["d_ff"], d, bias=False, mesh=mesh, tp="row")
        ff.DenseReluDense = dense
        ff.layer_norm = _T5Norm(d, eps, mesh=mesh)
        self.layer = ModuleList([attn, ff])

    @staticmethod
    def _clamp(x: Any) -> Any:
        if x.dtype != torch.float16:
            return x
        fmax = torch.finfo(torch.float16).max
        value = _factories.full((), fmax, dtype=torch.float16, device_mesh=x.device_mesh,
                                placements=placements(x.device_mesh))
        value = value - x.isinf().any().to(torch.float16) * 1000
        return x.clamp(min=-value, max=value)

    def forward(self, x: Any, bias: Any) -> Any:
        attn, ff = self.layer[0], self.layer[1]
        x = self._clamp(x + attn.SelfAttention(attn.layer_norm(x), bias))
        h = ff.layer_norm(x)
        dense = ff.DenseReluDense
        if self.gated:
            h = _act(dense.wi_0(h), self.act) * dense.wi_1(h)
        else:
            h = _act(dense.wi(h), self.act)
        if h.dtype != dense.wo.weight.dtype:
            h = h.to(dense.wo.weight.dtype)
        return self._clamp(x + dense.wo(h))


_T5_DEFAULTS = dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                    relative_attention_num_buckets=32, relative_attention_max_distance=128, layer_norm_epsilon=1e-6,
                    feed_forward_proj="relu")


class T5EncoderModel(Module):
    """transformers' ``T5EncoderModel``: ``forward(input_ids)`` returns ``last_hidden_state`` (no
    attention mask: SD3 attends to the padding, as diffusers does).

    >>> seq = t5(tokenizer_3(prompt, padding="max_length", max_length=256, return_tensors="pt").input_ids)
    """

    def __init__(self, config: Dict[str, Any], *, device_mesh: DeviceMesh) -> None:
        super().__init__()
        cfg = configure(self, config, _T5_DEFAULTS, device_mesh)
        mesh = device_mesh
        _check_heads(cfg["num_heads"], mesh, "T5")
        self.shared = Embedding(cfg["vocab_size"], cfg["d_model"], mesh=mesh)
        enc = Module()
        enc.block = ModuleList([_T5Block(cfg, i == 0, mesh=mesh) for i in range(cfg["num_layers"])])
        enc.final_layer_norm = _T5Norm(cfg["d_model"], cfg["layer_norm_epsilon"], mesh=mesh)
        self.encoder = enc

    @classmethod
    def from_pretrained(cls, path: str, *, device_mesh: DeviceMesh,
                        torch_dtype: Optional[torch.dtype] = None) -> "T5EncoderModel":
        """Reads ``path/config.json`` and ``path/model*.safetensors`` (single or sharded; the tied
        ``encoder.embed_tokens.weight`` is ``shared.weight`` when present)."""
        return load_pretrained(cls, path, device_mesh=device_mesh, torch_dtype=torch_dtype, stem="model",
                               ignore=("encoder.embed_tokens.",),
                               aliases={"shared.weight": "encoder.embed_tokens.weight"})

    @property
    def dtype(self) -> torch.dtype:
        return self.shared.weight.dtype

    def position_bias(self, s: int) -> Any:
        """(1, heads, s, s): block 0's relative-position table at the host-computed buckets."""
        cfg = self.config
        rel = torch.arange(s, dtype=torch.long)[None, :] - torch.arange(s, dtype=torch.long)[:, None]
        buckets = _bucket(rel, cfg["relative_attention_num_buckets"], cfg["relative_attention_max_distance"])
        ids = _factories.from_torch(buckets, self.mesh, placements(self.mesh))
        table = self.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight
        return F.embedding(ids, table).permute(2, 0, 1).unsqueeze(0)

    def forward(self, input_ids: Any) -> Any:
        x = self.shared(_ids(input_ids, self.mesh))
        bias = self.position_bias(x.shape[1])
        for block in self.encoder.block:
            x = block(x, bias)
        return self.encoder.final_layer_norm(x)
