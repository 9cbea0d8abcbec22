"""The SD3 MMDiT transformer (diffusers' ``SD3Transformer2DModel``) on a device mesh.

Mesh dims (any subset, by name): ``dp`` splits the batch (the CFG halves), ``tp`` splits the heads
and the MLP (q/k/v and the first FF layer column-parallel, the output projections row-parallel and
all-reduced), ``ulysess_cp``/``ring_cp`` split the image and context tokens (Shard(1) from the
embeddings to ``proj_out``; the joint attention runs Ulysses/ring through ``SdpaOption``).
The adaLN modulation linears, the embeddings and ``proj_out`` are replicated. Keys, shapes and the
op sequence are diffusers' (``docs/decisions.md`` says which results are bit-identical).

>>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
>>> model = SD3Transformer2DModel.from_pretrained("sd3/transformer", device_mesh=mesh)
>>> v = model(latents, prompt_embeds, pooled, timestep)     # (N, C, H, W), Shard(0) on dp
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence

import torch

from ... import _factories, _ops_views, compiled_op
from ...distributed_spec import DeviceMesh, Replicate, Shard
from ...nn import functional as F
from ...nn.modules.container import ModuleList
from ...nn.modules.module import Module
from ._common import (RING_CP, SDPA_OPTION, TP, ULYSSES_CP, Conv2d, Layer, Linear, batch_input, configure,
                      load_pretrained, mesh_dim, mesh_size)

__all__ = ["SD3Transformer2DModel"]

_DEFAULTS = dict(sample_size=128, patch_size=2, in_channels=16, num_layers=18, attention_head_dim=64,
                 num_attention_heads=18, joint_attention_dim=4096, caption_projection_dim=1152,
                 pooled_projection_dim=2048, out_channels=16, pos_embed_max_size=96, dual_attention_layers=(),
                 qk_norm=None)


def _ada_chunks(temb: Any, linear: Linear, n: int):
    """``linear(silu(temb)).chunk(n, dim=1)``: the modulation vectors of adaLN."""
    return linear(F.silu(temb)).chunk(n, dim=1)


class _QKNorm(Layer):
    """diffusers' ``RMSNorm`` over the head dim (SD3.5's ``qk_norm="rms_norm"``), in its op order."""

    def __init__(self, dim: int, eps: float, *, mesh: DeviceMesh) -> None:
        super().__init__(mesh)
        self.eps = eps
        self.declare("weight", (dim,))

    def forward(self, x: Any) -> Any:
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        y = x * (variance + self.eps).rsqrt()
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            y = y.to(self.weight.dtype)
        return y * self.weight


class _Attention(Module):
    """Joint attention: image q/k/v (``to_*``) and, with ``context``, context q/k/v (``add_*_proj``)
    over the concatenated [image; context] tokens; heads split over ``tp``."""

    def __init__(self, dim: int, heads: int, head_dim: int, *, mesh: DeviceMesh, context: bool,
                 context_pre_only: bool, qk_norm: Optional[str]) -> None:
        super().__init__()
        if qk_norm not in (None, "rms_norm"):
            raise NotImplementedError(f"qk_norm={qk_norm!r} is not supported (None or 'rms_norm')")
        tp = mesh_size(mesh, TP)
        if heads % tp != 0:
            raise ValueError(f"the {heads} attention heads do not split over tp={tp}")
        self.heads, self.head_dim, self.context_pre_only = heads, head_dim, context_pre_only
        inner = heads * head_dim
        self.to_q = Linear(dim, inner, mesh=mesh, tp="col")
        self.to_k = Linear(dim, inner, mesh=mesh, tp="col")
        self.to_v = Linear(dim, inner, mesh=mesh, tp="col")
        norm = (lambda: _QKNorm(head_dim, 1e-6, mesh=mesh)) if qk_norm else (lambda: None)
        self.norm_q, self.norm_k = norm(), norm()
        if context:
            self.add_q_proj = Linear(dim, inner, mesh=mesh, tp="col")
            self.add_k_proj = Linear(dim, inner, mesh=mesh, tp="col")
            self.add_v_proj = Linear(dim, inner, mesh=mesh, tp="col")
            self.norm_added_q, self.norm_added_k = norm(), norm()
            if not context_pre_only:
                self.to_add_out = Linear(inner, dim, mesh=mesh, tp="row")
        self.to_out = ModuleList([Linear(inner, dim, mesh=mesh, tp="row")])

    def _heads(self, x: Any) -> Any:
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def _qkv(self, x: Any, q: Linear, k: Linear, v: Linear, nq: Any, nk: Any):
        query, key, value = self._heads(q(x)), self._heads(k(x)), self._heads(v(x))
        if nq is not None:
            query = nq(query)
        if nk is not None:
            key = nk(key)
        return query, key, value

    def forward(self, x: Any, context: Any = None):
        n, s = x.shape[0], x.shape[1]
        query, key, value = self._qkv(x, self.to_q, self.to_k, self.to_v, self.norm_q, self.norm_k)
        if context is not None:
            cq, ck, cv = self._qkv(context, self.add_q_proj, self.add_k_proj, self.add_v_proj, self.norm_added_q,
                                   self.norm_added_k)
            query, key, value = _cat([query, cq], 2), _cat([key, ck], 2), _cat([value, cv], 2)
        h = F.scaled_dot_product_attention(query, key, value, dropout_p=0.0, is_causal=False,
                                           sdpa_option=SDPA_OPTION)
        h = h.transpose(1, 2).reshape(n, h.shape[2], self.heads * self.head_dim)
        if context is None:
            return self.to_out[0](h)
        h, c = _split_tokens(h, s)
        # diffusers projects these slices of the joint output; with a batch above 1 they are not
        # contiguous in torch, whose linear then adds the bias after the product (see Linear).
        fused = n == 1
        c = None if self.context_pre_only else self.to_add_out(c, fused)
        return self.to_out[0](h, fused), c


def _cp_dims(mesh: DeviceMesh) -> list:
    """The context-parallel mesh dims present (size > 1), Ulysses first: the tokens are split there."""
    return [i for i in (mesh_dim(mesh, ULYSSES_CP), mesh_dim(mesh, RING_CP)) if i is not None]


def _on_cp(t: Any, p: Any) -> Any:
    """``t`` with placement ``p`` on every context-parallel mesh dim (nothing if there is none)."""
    cp = _cp_dims(t.device_mesh)
    if not cp or all(t.placements[i] == p for i in cp):
        return t
    pl = list(t.placements)
    for i in cp:
        pl[i] = p
    return t.redistribute(placements=pl)


def _split_tokens(h: Any, s: int):
    """``h[:, :s], h[:, s:]`` of the joint tokens. The joint attention's cat left them segmented (on
    one CP mesh dim or nested over both: docs/decisions.md, "segmented cat"), so the split is a local
    narrow per device."""
    return h[:, :s], h[:, s:]


def _cat(ts: Sequence[Any], dim: int) -> Any:
    return _ops_views.cat(list(ts), dim=dim)


class _FeedForward(Module):
    """``net.0.proj`` (column-parallel) -> tanh GELU -> ``net.2`` (row-parallel), diffusers' keys."""

    def __init__(self, dim: int, *, mesh: DeviceMesh) -> None:
        super().__init__()
        proj = Module()
        proj.proj = Linear(dim, 4 * dim, mesh=mesh, tp="col")
        self.net = ModuleList([proj, Module(), Linear(4 * dim, dim, mesh=mesh, tp="row")])

    def forward(self, x: Any) -> Any:
        return self.net[2](F.gelu(self.net[0].proj(x), approximate="tanh"))


class _AdaNorm(Layer):
    """``norm*.linear`` of adaLN (``[out, dim]``, replicated); the LayerNorm itself has no parameters."""

    def __init__(self, dim: int, chunks: int, *, mesh: DeviceMesh) -> None:
        super().__init__(mesh)
        self.linear = Linear(dim, chunks * dim, mesh=mesh)
        self.dim, self.chunks = dim, chunks

    def norm(self, x: Any) -> Any:
        return F.layer_norm(x, (self.dim,), None, None, 1e-6)

    def modulate(self, x: Any, scale: Any, shift: Any, fused: Any) -> Any:
        """``norm(x) * (1 + scale) + shift`` (scale/shift ``[B, 1, D]``): diffusers' ops, or with
        ``fused`` (an ExecuteConfig with compile_fused_ops) ``compiled_op.layer_norm_mul_add``."""
        if fused is None:
            return self.norm(x) * (1 + scale) + shift
        return _fused_modulate(x, scale, shift, fused)


def _fused_modulate(x: Any, scale: Any, shift: Any, fused: Any) -> Any:
    """adaLN's ``layer_norm(x, eps=1e-6) * (1 + scale) + shift`` as one compiled USER node."""
    return compiled_op.layer_norm_mul_add(x, scale, shift, eps=1e-6, execute_config=fused)


class JointTransformerBlock(Module):
    """One MMDiT block: adaLN-Zero on both streams, joint attention, gated FF; the last block
    (``context_pre_only``) modulates the context with AdaLayerNormContinuous and drops it after."""

    def __init__(self, dim: int, heads: int, head_dim: int, *, mesh: DeviceMesh, context_pre_only: bool,
                 qk_norm: Optional[str], dual: bool) -> None:
        super().__init__()
        self.context_pre_only, self.dual = context_pre_only, dual
        self.norm1 = _AdaNorm(dim, 9 if dual else 6, mesh=mesh)
        self.norm1_context = _AdaNorm(dim, 2 if context_pre_only else 6, mesh=mesh)
        self.attn = _Attention(dim, heads, head_dim, mesh=mesh, context=True, context_pre_only=context_pre_only,
                               qk_norm=qk_norm)
        if dual:
            self.attn2 = _Attention(dim, heads, head_dim, mesh=mesh, context=False, context_pre_only=False,
                                    qk_norm=qk_norm)
        self.ff = _FeedForward(dim, mesh=mesh)
        if not context_pre_only:
            self.ff_context = _FeedForward(dim, mesh=mesh)
        self.dim = dim

    def forward(self, x: Any, c: Any, temb: Any, fused: Any = None):
        """``fused``: None (diffusers' op sequence) or an ExecuteConfig whose compile_fused_ops runs
        each adaLN modulation as ``compiled_op.layer_norm_mul_add``."""
        n1 = self.norm1
        if self.dual:
            (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp, shift_msa2, scale_msa2,
             gate_msa2) = _ada_chunks(temb, n1.linear, 9)
            if fused is None:
                normed = n1.norm(x)
                nx = normed * (1 + scale_msa[:, None]) + shift_msa[:, None]
                nx2 = normed * (1 + scale_msa2[:, None]) + shift_msa2[:, None]
            else:
                nx = _fused_modulate(x, scale_msa[:, None], shift_msa[:, None], fused)
                nx2 = _fused_modulate(x, scale_msa2[:, None], shift_msa2[:, None], fused)
        else:
            shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = _ada_chunks(temb, n1.linear, 6)
            nx = n1.modulate(x, scale_msa[:, None], shift_msa[:, None], fused)
        nc1 = self.norm1_context
        if self.context_pre_only:
            scale, shift = nc1.linear(F.silu(temb).to(c.dtype)).chunk(2, dim=1)
            nc = nc1.modulate(c, scale[:, None, :], shift[:, None, :], fused)
        else:
            c_shift_msa, c_scale_msa, c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp = _ada_chunks(temb, nc1.linear,
                                                                                                     6)
            nc = nc1.modulate(c, c_scale_msa[:, None], c_shift_msa[:, None], fused)

        attn_out, ctx_attn_out = self.attn(nx, nc)
        x = x + gate_msa.unsqueeze(1) * attn_out
        if self.dual:
            x = x + gate_msa2.unsqueeze(1) * self.attn2(nx2)
        nx = n1.modulate(x, scale_mlp[:, None], shift_mlp[:, None], fused)
        x = x + gate_mlp.unsqueeze(1) * self.ff(nx)
        if self.context_pre_only:
            return None, x
        c = c + c_gate_msa.unsqueeze(1) * ctx_attn_out
        nc = nc1.modulate(c, c_scale_mlp[:, None], c_shift_mlp[:, None], fused)
        c = c + c_gate_mlp.unsqueeze(1) * self.ff_context(nc)
        return c, x


class _PatchEmbed(Layer):
    """Conv patchify (``proj``), flatten to tokens, plus the centre crop of the ``pos_embed`` table."""

    def __init__(self, cfg: Dict[str, Any], dim: int, *, mesh: DeviceMesh) -> None:
        super().__init__(mesh)
        p, m = cfg["patch_size"], cfg["pos_embed_max_size"]
        if not m:
            raise NotImplementedError("SD3 needs pos_embed_max_size (the cropped positional table)")
        self.patch_size, self.max_size = p, m
        self.proj = Conv2d(cfg["in_channels"], dim, p, stride=p, mesh=mesh)
        self.declare("pos_embed", (1, m * m, dim), buffer=True)

    def forward(self, latent: Any) -> Any:
        h, w = latent.shape[-2] // self.patch_size, latent.shape[-1] // self.patch_size
        m = self.max_size
        if h > m or w > m:
            raise ValueError(f"the latent ({h}x{w} patches) is larger than pos_embed_max_size {m}")
        x = self.proj(latent).flatten(2).transpose(1, 2)
        top, left = (m - h) // 2, (m - w) // 2
        pe = self.pos_embed.reshape(1, m, m, -1)[:, top:top + h, left:left + w, :]
        pe = pe.reshape(1, -1, pe.shape[-1])
        return (x + pe).to(x.dtype)


class _TimestepEmbedder(Module):
    def __init__(self, in_dim: int, dim: int, *, mesh: DeviceMesh) -> None:
        super().__init__()
        self.linear_1 = Linear(in_dim, dim, mesh=mesh)
        self.linear_2 = Linear(dim, dim, mesh=mesh)

    def forward(self, x: Any) -> Any:
        return self.linear_2(F.silu(self.linear_1(x)))


class _TimeTextEmbed(Module):
    """temb = TimestepEmbedding(sinusoid(t)) + PixArtAlphaTextProjection(pooled)."""

    def __init__(self, dim: int, pooled_dim: int, *, mesh: DeviceMesh) -> None:
        super().__init__()
        self.timestep_embedder = _TimestepEmbedder(256, dim, mesh=mesh)
        self.text_embedder = _TimestepEmbedder(pooled_dim, dim, mesh=mesh)

    def forward(self, timestep: Any, pooled: Any) -> Any:
        proj = timestep_sinusoid(timestep, 256)
        return self.timestep_embedder(proj.to(pooled.dtype)) + self.text_embedder(pooled)


def _fused_config(config: Any) -> Any:
    """The ExecuteConfig when it asks for compiled fused ops, else None (checked: a wrong type raises)."""
    if config is None:
        return None
    from .._cache import ExecuteConfig
    if not isinstance(config, ExecuteConfig):
        raise TypeError(f"execute_config must be a dtorch.ExecuteConfig, got {type(config).__name__}")
    return config if config.compile_fused_ops else None


def timestep_sinusoid(t: Any, dim: int, max_period: int = 10000) -> Any:
    """diffusers' ``get_timestep_embedding(t, dim, flip_sin_to_cos=True, downscale_freq_shift=0)``:
    [cos, sin] of ``t * exp(-ln(max_period) * i / half)``, in its op order."""
    half = dim // 2
    exponent = -math.log(max_period) * _factories.arange(0, half, dtype=torch.float32, device_mesh=t.device_mesh)
    exponent = exponent / half
    emb = t[:, None].float() * exponent.exp()[None, :]
    emb = _cat([emb.sin(), emb.cos()], -1)
    emb = _cat([emb[:, half:], emb[:, :half]], -1)
    if dim % 2 == 1:
        emb = F.pad(emb, (0, 1, 0, 0))
    return emb


class SD3Transformer2DModel(Module):
    """diffusers' ``SD3Transformer2DModel`` (SD3 and SD3.5: ``qk_norm="rms_norm"``, ``dual_attention_layers``).

    ``forward(hidden_states, encoder_hidden_states, pooled_projections, timestep, skip_layers=None)``
    takes dtorch tensors on the model's mesh (or torch tensors, distributed over ``dp``) and returns
    the velocity (N, C_out, H, W), Shard(0) on ``dp``.

    >>> model = SD3Transformer2DModel.from_pretrained(path + "/transformer", device_mesh=mesh)
    """

    def __init__(self, config: Dict[str, Any], *, device_mesh: DeviceMesh) -> None:
        super().__init__()
        cfg = configure(self, config, _DEFAULTS, device_mesh)
        mesh = device_mesh
        heads, hd = cfg["num_attention_heads"], cfg["attention_head_dim"]
        dim = heads * hd
        if cfg["caption_projection_dim"] != dim:
            raise ValueError(f"caption_projection_dim ({cfg['caption_projection_dim']}) must equal "
                             f"num_attention_heads * attention_head_dim ({dim})")
        self.inner_dim = dim
        self.out_channels = cfg["out_channels"] if cfg["out_channels"] is not None else cfg["in_channels"]
        self.pos_embed = _PatchEmbed(cfg, dim, mesh=mesh)
        self.time_text_embed = _TimeTextEmbed(dim, cfg["pooled_projection_dim"], mesh=mesh)
        self.context_embedder = Linear(cfg["joint_attention_dim"], dim, mesh=mesh)
        n = cfg["num_layers"]
        dual = set(cfg["dual_attention_layers"] or ())
        self.transformer_blocks = ModuleList([
            JointTransformerBlock(dim, heads, hd, mesh=mesh, context_pre_only=i == n - 1, qk_norm=cfg["qk_norm"],
                                  dual=i in dual) for i in range(n)])
        self.norm_out = _AdaNorm(dim, 2, mesh=mesh)
        p = cfg["patch_size"]
        self.proj_out = Linear(dim, p * p * self.out_channels, mesh=mesh)

    @classmethod
    def from_pretrained(cls, path: str, *, device_mesh: DeviceMesh,
                        torch_dtype: Optional[torch.dtype] = None) -> "SD3Transformer2DModel":
        """Reads ``path/config.json`` and ``path/diffusion_pytorch_model*.safetensors`` (single or
        sharded), each tensor distributed to its placements as it is read (dtype: the file's, or
        ``torch_dtype``)."""
        return load_pretrained(cls, path, device_mesh=device_mesh, torch_dtype=torch_dtype)

    @property
    def dtype(self) -> torch.dtype:
        return self.proj_out.weight.dtype

    def _input(self, t: Any) -> Any:
        return batch_input(t, self.mesh, type(self).__name__)

    def _blocks(self, x: Any, c: Any, temb: Any, skip_layers: Optional[Sequence[int]] = None, start: int = 0,
                fused: Any = None) -> Any:
        """The blocks from ``start`` (but ``skip_layers``); the image tokens after them."""
        for i, block in enumerate(self.transformer_blocks):
            if i < start or (skip_layers is not None and i in skip_layers):
                continue
            c, x = block(x, c, temb, fused)
        return x

    def _cached_blocks(self, x: Any, c: Any, temb: Any, cache: Any, fused: Any) -> Any:
        """``_blocks`` under First-Block-Cache or TeaCache (``dtorch.applications._cache``)."""
        first = self.transformer_blocks[0]
        if cache.kind == "teacache":
            shift, scale = _ada_chunks(temb, first.norm1.linear, 9 if first.dual else 6)[:2]
            if cache.modulated(first.norm1.norm(x) * (1 + scale[:, None]) + shift[:, None]):
                return x + cache.cached("x")
            out = self._blocks(x, c, temb, fused=fused)
            cache.store(x=out - x)
            return out
        c1, x1 = first(x, c, temb, fused)
        if cache.first_block(x1 - x):
            return x1 + cache.cached("x")
        out = self._blocks(x1, c1, temb, start=1, fused=fused)
        cache.store(x=out - x1)
        return out

    def forward(self, hidden_states: Any, encoder_hidden_states: Any, pooled_projections: Any, timestep: Any,
                skip_layers: Optional[Sequence[int]] = None, cache: Any = None, execute_config: Any = None) -> Any:
        """``execute_config``: a ``dtorch.ExecuteConfig`` whose ``compile_fused_ops=True`` runs every
        adaLN modulation (``layer_norm(x) * (1 + scale) + shift``) as ``compiled_op.layer_norm_mul_add``
        through torch.compile (allclose to diffusers); None or False: diffusers' ops (bit-identical)."""
        fused = _fused_config(execute_config)
        x = self._input(hidden_states)
        c = self._input(encoder_hidden_states)
        pooled = self._input(pooled_projections)
        if isinstance(timestep, (int, float)) and not isinstance(timestep, bool):
            timestep = torch.tensor(timestep)
        if isinstance(timestep, torch.Tensor) and timestep.numel() == 1:
            timestep = timestep.reshape(1).expand(x.shape[0]).contiguous()  # one timestep for the whole batch
        t = self._input(timestep)
        if t.ndim != 1 or t.shape[0] != x.shape[0]:
            raise ValueError(f"timestep must be a number or have shape ({x.shape[0]},), got {tuple(t.shape)}")
        height, width = x.shape[-2:]
        if cache is not None and len(self.transformer_blocks) < 2:
            raise ValueError("First-Block-Cache and TeaCache need at least two transformer blocks")
        # The image and the context tokens are split over the context-parallel mesh dims: every
        # block runs on its share of the tokens, and the joint attention's cat/split need no gather.
        x = _on_cp(self.pos_embed(x).contiguous(), Shard(1))
        temb = self.time_text_embed(t, pooled)
        c = _on_cp(self.context_embedder(c), Shard(1))
        if cache is None:
            x = self._blocks(x, c, temb, skip_layers, fused=fused)
        else:
            x = self._cached_blocks(x, c, temb, cache, fused)
        scale, shift = self.norm_out.linear(F.silu(temb).to(x.dtype)).chunk(2, dim=1)
        x = self.norm_out.modulate(x, scale[:, None, :], shift[:, None, :], fused)
        x = _on_cp(self.proj_out(x), Replicate())  # the tokens gathered for unpatchify
        p, co = self.config["patch_size"], self.out_channels
        h, w = height // p, width // p
        x = x.reshape(x.shape[0], h, w, p, p, co).permute(0, 5, 1, 3, 2, 4)
        return x.reshape(x.shape[0], co, h * p, w * p)
