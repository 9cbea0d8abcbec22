"""The Flux.1 transformer (diffusers' ``FluxTransformer2DModel``) on a device mesh.

Double-stream blocks (image and text tokens with their own weights, one joint attention) then
single-stream blocks (one sequence [text; image], attention and MLP side by side), with the rotary
position embedding of the (text, image) ids over the three axes, and the guidance embedding of
FLUX.1-dev (none for schnell). Mesh dims, by name: ``dp`` splits the batch; ``tp`` the heads and
the MLPs (q/k/v, the MLPs' first layers column-parallel; the output projections row-parallel and
all-reduced; the single blocks' ``proj_out`` reads its attention and MLP columns as two
row-parallel products); ``ulysess_cp``/``ring_cp`` the text and image tokens (Shard(1) from the
embeddings to ``proj_out``; the joint sequence is the segmented cat, so nothing is gathered
before the end). The building blocks are SD3's (``..sd3``): declared parameters, the adaLN and
feed-forward layers, the timestep sinusoid, the context-parallel helpers.

>>> model = FluxTransformer2DModel.from_pretrained("FLUX.1-schnell/transformer", device_mesh=mesh)
>>> v = model(packed_latents, t5_embeds, clip_pooled, timestep, img_ids, txt_ids)
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from ... import _factories, _ops_views
from ...distributed_spec import DeviceMesh, Replicate, Shard
from ...nn import functional as F
from ...nn.modules.container import ModuleList
from ...nn.modules.module import Module
from .._cache import StepCache
from ..sd3._common import (SDPA_OPTION, TP, Layer, Linear, batch_input, configure, load_pretrained, mesh_dim,
                           mesh_size, placements, with_placement)
from ..sd3.transformer import _ada_chunks, _AdaNorm, _cp_dims, _FeedForward, _on_cp, _TimestepEmbedder
from ..sd3.transformer import timestep_sinusoid

__all__ = ["FluxTransformer2DModel", "rotary_tables"]

_DEFAULTS = dict(patch_size=1, in_channels=64, out_channels=None, num_layers=19, num_single_layers=38,
                 attention_head_dim=128, num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768,
                 guidance_embeds=False, axes_dims_rope=(16, 56, 56))


def rotary_tables(ids: torch.Tensor, axes_dim: Sequence[int], theta: float = 10000.0) -> Tuple[torch.Tensor, ...]:
    """(cos, sin), each [S, sum(axes_dim)] float32, of the position ids [S, n_axes] (host values):
    per axis, the angles ``pos * theta ** (-2i / d)`` in float64, each repeated twice (the pairs a
    rotation turns together), cast to float32.

    >>> cos, sin = rotary_tables(torch.zeros(4, 3), (8, 4, 4))
    """
    pos = ids.float()
    cos, sin = [], []
    for axis, d in enumerate(axes_dim):
        if d % 2:
            raise ValueError(f"axes_dims_rope must be even, got {d}")
        inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        angles = pos[:, axis].to(torch.float64)[:, None] * inv[None, :]
        cos.append(angles.cos().repeat_interleave(2, dim=1).float())
        sin.append(angles.sin().repeat_interleave(2, dim=1).float())
    return torch.cat(cos, dim=-1), torch.cat(sin, dim=-1)


def _rotate(x: Any, cos: Any, sin: Any) -> Any:
    """The rotary embedding of ``x`` (B, S, H, D) with tables (1, S, 1, D): each pair (a, b) of the
    head dim becomes (a cos - b sin, b cos + a sin), computed in float32, cast back."""
    real, imag = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
    rotated = _ops_views.stack([-imag, real], dim=-1).flatten(3)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


class _Rope:
    """The rotary tables of one forward: the text and the image parts (for context parallelism, where
    each part is rotated before the segmented cat; a stack on the joint sequence would gather it),
    and the whole table (one device, the op order of diffusers)."""

    def __init__(self, mesh: DeviceMesh, txt_ids: torch.Tensor, img_ids: torch.Tensor, axes: Sequence[int]) -> None:
        self.text_len = txt_ids.shape[0]
        cos, sin = rotary_tables(torch.cat([txt_ids, img_ids], dim=0), axes)
        self.cp = bool(_cp_dims(mesh))

        def put(t: torch.Tensor) -> Any:
            return _factories.from_torch(t[None, :, None, :].contiguous(), mesh, placements(mesh))

        if self.cp:
            s = self.text_len
            self.parts = [(_on_cp(put(cos[:s]), Shard(1)), _on_cp(put(sin[:s]), Shard(1))),
                          (_on_cp(put(cos[s:]), Shard(1)), _on_cp(put(sin[s:]), Shard(1)))]
        else:
            self.whole = (put(cos), put(sin))

    def joint(self, text: Any, image: Any) -> Any:
        """``rope(cat([text, image], dim=1))`` of two (B, S_part, H, D) tensors."""
        if self.cp:
            (ct, st), (ci, si) = self.parts
            return _ops_views.cat([_rotate(text, ct, st), _rotate(image, ci, si)], dim=1)
        return _rotate(_ops_views.cat([text, image], dim=1), *self.whole)

    def sequence(self, x: Any) -> Any:
        """``rope(x)`` of the joint (B, S, H, D) sequence."""
        if self.cp:
            return self.joint(x[:, :self.text_len], x[:, self.text_len:])
        return _rotate(x, *self.whole)


class _RMSNorm(Layer):
    """``torch.nn.RMSNorm`` over the head dim (Flux's q/k norms)."""

    def __init__(self, dim: int, eps: float, *, mesh: DeviceMesh) -> None:
        super().__init__(mesh)
        self.dim, self.eps = dim, eps
        self.declare("weight", (dim,))

    def forward(self, x: Any) -> Any:
        return F.rms_norm(x, (self.dim,), self.weight, self.eps)


class _FluxAttention(Module):
    """q/k/v (with biases) of the image stream and, for double blocks, ``add_*_proj`` of the text
    stream; RMS-normed q and k, rotary, attention over [text; image]; heads split over ``tp``."""

    def __init__(self, dim: int, heads: int, head_dim: int, *, mesh: DeviceMesh, context: bool) -> None:
        super().__init__()
        tp = mesh_size(mesh, TP)
        if heads % tp != 0:
            raise ValueError(f"the {heads} attention heads do not split over tp={tp}")
        self.heads, self.head_dim = heads, head_dim
        inner = heads * head_dim
        self.to_q = Linear(dim, inner, mesh=mesh, tp="col")
        self.to_k = Linear(dim, inner, mesh=mesh, tp="col")
        self.to_v = Linear(dim, inner, mesh=mesh, tp="col")
        self.norm_q, self.norm_k = _RMSNorm(head_dim, 1e-6, mesh=mesh), _RMSNorm(head_dim, 1e-6, mesh=mesh)
        if context:
            self.add_q_proj = Linear(dim, inner, mesh=mesh, tp="col")
            self.add_k_proj = Linear(dim, inner, mesh=mesh, tp="col")
            self.add_v_proj = Linear(dim, inner, mesh=mesh, tp="col")
            self.norm_added_q = _RMSNorm(head_dim, 1e-6, mesh=mesh)
            self.norm_added_k = _RMSNorm(head_dim, 1e-6, mesh=mesh)
            self.to_out = ModuleList([Linear(inner, dim, mesh=mesh, tp="row")])
            self.to_add_out = Linear(inner, dim, mesh=mesh, tp="row")

    def _qkv(self, x: Any, q: Linear, k: Linear, v: Linear, nq: _RMSNorm, nk: _RMSNorm) -> List[Any]:
        d = self.head_dim
        return [nq(q(x).unflatten(-1, (-1, d))), nk(k(x).unflatten(-1, (-1, d))), v(x).unflatten(-1, (-1, d))]

    @staticmethod
    def _attend(q: Any, k: Any, v: Any) -> Any:
        q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))
        h = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=False, sdpa_option=SDPA_OPTION)
        return h.permute(0, 2, 1, 3).flatten(2, 3)

    def joint(self, x: Any, c: Any, rope: _Rope):
        """The double block's attention: (image output, text output), projected."""
        img = self._qkv(x, self.to_q, self.to_k, self.to_v, self.norm_q, self.norm_k)
        txt = self._qkv(c, self.add_q_proj, self.add_k_proj, self.add_v_proj, self.norm_added_q, self.norm_added_k)
        q, k = rope.joint(txt[0], img[0]), rope.joint(txt[1], img[1])
        h = self._attend(q, k, _ops_views.cat([txt[2], img[2]], dim=1))
        s = rope.text_len
        return self.to_out[0](h[:, s:].contiguous()), self.to_add_out(h[:, :s].contiguous())

    def single(self, x: Any, rope: _Rope) -> Any:
        """The single block's attention over the joint sequence (no output projection)."""
        q, k, v = self._qkv(x, self.to_q, self.to_k, self.to_v, self.norm_q, self.norm_k)
        return self._attend(rope.sequence(q), rope.sequence(k), v)


class FluxTransformerBlock(Module):
    """A double-stream block: adaLN-Zero on both streams, the joint attention, gated FFs."""

    def __init__(self, dim: int, heads: int, head_dim: int, *, mesh: DeviceMesh) -> None:
        super().__init__()
        self.dim = dim
        self.norm1 = _AdaNorm(dim, 6, mesh=mesh)
        self.norm1_context = _AdaNorm(dim, 6, mesh=mesh)
        self.attn = _FluxAttention(dim, heads, head_dim, mesh=mesh, context=True)
        self.ff = _FeedForward(dim, mesh=mesh)
        self.ff_context = _FeedForward(dim, mesh=mesh)

    def _ln(self, x: Any) -> Any:
        return F.layer_norm(x, (self.dim,), None, None, 1e-6)

    def forward(self, x: Any, c: Any, temb: Any, rope: _Rope):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = _ada_chunks(temb, self.norm1.linear, 6)
        nx = self.norm1.norm(x) * (1 + scale_msa[:, None]) + shift_msa[:, None]
        c_shift_msa, c_scale_msa, c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp = _ada_chunks(
            temb, self.norm1_context.linear, 6)
        nc = self.norm1_context.norm(c) * (1 + c_scale_msa[:, None]) + c_shift_msa[:, None]
        attn, ctx_attn = self.attn.joint(nx, nc, rope)
        x = x + gate_msa.unsqueeze(1) * attn
        nx = self._ln(x) * (1 + scale_mlp[:, None]) + shift_mlp[:, None]
        x = x + gate_mlp.unsqueeze(1) * self.ff(nx)
        c = c + c_gate_msa.unsqueeze(1) * ctx_attn
        nc = self._ln(c) * (1 + c_scale_mlp[:, None]) + c_shift_mlp[:, None]
        c = c + c_gate_mlp.unsqueeze(1) * self.ff_context(nc)
        if c.dtype == torch.float16:
            c = c.clip(-65504, 65504)
        return c, x


class _PackedRowLinear(Layer):
    """The single block's ``proj_out`` over ``cat([attention, mlp], dim=-1)``. On a mesh that splits
    heads or tokens its two column blocks are two row-parallel products summed (each input keeps its
    own split: the heads' over ``tp``, the tokens' segmented layout); otherwise one product of the
    concatenation, as diffusers computes it."""

    def __init__(self, dim: int, mlp: int, *, mesh: DeviceMesh) -> None:
        super().__init__(mesh)
        self.split = mesh_dim(mesh, TP) is not None or bool(_cp_dims(mesh))
        self._tp = mesh_dim(mesh, TP)
        if self.split:
            self.declare("weight_attn", (dim, dim), placements(mesh, tp=Shard(1)), source=("weight", 0, dim))
            self.declare("weight_mlp", (dim, mlp), placements(mesh, tp=Shard(1)), source=("weight", dim, dim + mlp))
        else:
            self.declare("weight", (dim, dim + mlp))
        self.declare("bias", (dim,))

    def forward(self, attn: Any, mlp: Any) -> Any:
        if not self.split:
            return F.linear(_ops_views.cat([attn, mlp], dim=2), self.weight, self.bias)
        y = F.linear(attn, self.weight_attn) + F.linear(mlp, self.weight_mlp)
        return with_placement(y, self._tp, Replicate()) + self.bias


class FluxSingleTransformerBlock(Module):
    """A single-stream block on [text; image]: one adaLN, attention and MLP side by side, one gate."""

    def __init__(self, dim: int, heads: int, head_dim: int, mlp_ratio: float = 4.0, *, mesh: DeviceMesh) -> None:
        super().__init__()
        mlp = int(dim * mlp_ratio)
        self.norm = _AdaNorm(dim, 3, mesh=mesh)
        self.proj_mlp = Linear(dim, mlp, mesh=mesh, tp="col")
        self.proj_out = _PackedRowLinear(dim, mlp, mesh=mesh)
        self.attn = _FluxAttention(dim, heads, head_dim, mesh=mesh, context=False)

    def forward(self, h: Any, temb: Any, rope: _Rope) -> Any:
        shift, scale, gate = _ada_chunks(temb, self.norm.linear, 3)
        nh = self.norm.norm(h) * (1 + scale[:, None]) + shift[:, None]
        mlp = F.gelu(self.proj_mlp(nh), approximate="tanh")
        out = h + gate.unsqueeze(1) * self.proj_out(self.attn.single(nh, rope), mlp)
        if out.dtype == torch.float16:
            out = out.clip(-65504, 65504)
        return out


class _TimeTextEmbed(Module):
    """temb = TimestepEmbedding(sinusoid(t)) [+ TimestepEmbedding(sinusoid(guidance))] + text projection."""

    def __init__(self, dim: int, pooled_dim: int, guidance: bool, *, mesh: DeviceMesh) -> None:
        super().__init__()
        self.timestep_embedder = _TimestepEmbedder(256, dim, mesh=mesh)
        if guidance:
            self.guidance_embedder = _TimestepEmbedder(256, dim, mesh=mesh)
        self.guidance = guidance
        self.text_embedder = _TimestepEmbedder(pooled_dim, dim, mesh=mesh)

    def forward(self, timestep: Any, guidance: Any, pooled: Any) -> Any:
        emb = self.timestep_embedder(timestep_sinusoid(timestep, 256).to(pooled.dtype))
        if self.guidance:
            emb = emb + self.guidance_embedder(timestep_sinusoid(guidance, 256).to(pooled.dtype))
        return emb + self.text_embedder(pooled)


class FluxTransformer2DModel(Module):
    """diffusers' ``FluxTransformer2DModel`` (FLUX.1-dev: ``guidance_embeds=True``; schnell: False).

    ``forward(hidden_states, encoder_hidden_states, pooled_projections, timestep, img_ids, txt_ids,
    guidance=None)``: packed latents (N, S_img, in_channels), T5 states (N, S_txt, joint_attention_dim),
    the CLIP pooled vector (N, pooled_projection_dim), the timestep in [0, 1] (N,) (dtorch tensors on
    the model's mesh, or torch tensors distributed over ``dp``), and the host id tables (S, 3); returns
    the packed velocity (N, S_img, out_channels), Shard(0) on ``dp``.

    >>> model = FluxTransformer2DModel.from_pretrained(path + "/transformer", device_mesh=mesh)
    """

    def __init__(self, config: Dict[str, Any], *, device_mesh: DeviceMesh) -> None:
        super().__init__()
        cfg = configure(self, config, _DEFAULTS, device_mesh)
        mesh = device_mesh
        heads, hd = cfg["num_attention_heads"], cfg["attention_head_dim"]
        dim = heads * hd
        if sum(cfg["axes_dims_rope"]) != hd:
            raise ValueError(f"sum(axes_dims_rope) {sum(cfg['axes_dims_rope'])} must equal attention_head_dim {hd}")
        self.inner_dim = dim
        self.out_channels = cfg["out_channels"] or cfg["in_channels"]
        self.time_text_embed = _TimeTextEmbed(dim, cfg["pooled_projection_dim"], cfg["guidance_embeds"], mesh=mesh)
        self.context_embedder = Linear(cfg["joint_attention_dim"], dim, mesh=mesh)
        self.x_embedder = Linear(cfg["in_channels"], dim, mesh=mesh)
        self.transformer_blocks = ModuleList([FluxTransformerBlock(dim, heads, hd, mesh=mesh)
                                              for _ in range(cfg["num_layers"])])
        self.single_transformer_blocks = ModuleList([FluxSingleTransformerBlock(dim, heads, hd, mesh=mesh)
                                                     for _ in range(cfg["num_single_layers"])])
        self.norm_out = _AdaNorm(dim, 2, mesh=mesh)
        p = cfg["patch_size"]
        self.proj_out = Linear(dim, p * p * self.out_channels, mesh=mesh)

    @classmethod
    def from_pretrained(cls, path: str, *, device_mesh: DeviceMesh,
                        torch_dtype: Optional[torch.dtype] = None) -> "FluxTransformer2DModel":
        """Reads ``path/config.json`` and ``path/diffusion_pytorch_model*.safetensors`` (single or
        sharded), each tensor distributed to its placements as it is read."""
        return load_pretrained(cls, path, device_mesh=device_mesh, torch_dtype=torch_dtype)

    @property
    def dtype(self) -> torch.dtype:
        return self.proj_out.weight.dtype

    def _input(self, t: Any) -> Any:
        return batch_input(t, self.mesh, type(self).__name__)

    def _per_sample(self, value: Any, n: int, name: str) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = torch.tensor(float(value))
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.reshape(1).expand(n).contiguous()
        value = self._input(value)
        if value.ndim != 1 or value.shape[0] != n:
            raise ValueError(f"{name} must be a number or have shape ({n},), got {tuple(value.shape)}")
        return value

    def _blocks(self, x: Any, c: Any, temb: Any, rope: _Rope, start: int = 0) -> Any:
        """The double blocks from ``start``, then the single blocks; the image tokens after them."""
        for block in list(self.transformer_blocks)[start:]:
            c, x = block(x, c, temb, rope)
        s = c.shape[1]
        h = _ops_views.cat([c, x], dim=1)
        for block in self.single_transformer_blocks:
            h = block(h, temb, rope)
        return h[:, s:]

    def _cached_blocks(self, x: Any, c: Any, temb: Any, rope: _Rope, cache: StepCache) -> Any:
        """``_blocks`` under First-Block-Cache or TeaCache (``dtorch.applications._cache``)."""
        first = self.transformer_blocks[0]
        if cache.kind == "teacache":
            shift, scale = _ada_chunks(temb, first.norm1.linear, 6)[:2]
            if cache.modulated(first.norm1.norm(x) * (1 + scale[:, None]) + shift[:, None]):
                return x + cache.cached("x")
            out = self._blocks(x, c, temb, rope)
            cache.store(x=out - x)
            return out
        c1, x1 = first(x, c, temb, rope)
        if cache.first_block(x1 - x):
            return x1 + cache.cached("x")
        out = self._blocks(x1, c1, temb, rope, start=1)
        cache.store(x=out - x1)
        return out

    def forward(self, hidden_states: Any, encoder_hidden_states: Any, pooled_projections: Any, timestep: Any,
                img_ids: torch.Tensor, txt_ids: torch.Tensor, guidance: Any = None,
                cache: Optional[StepCache] = None) -> Any:
        x = self._input(hidden_states)
        c = self._input(encoder_hidden_states)
        pooled = self._input(pooled_projections)
        if x.ndim != 3 or x.shape[-1] != self.config["in_channels"]:
            raise ValueError(f"hidden_states must be packed latents (N, S, {self.config['in_channels']}), got "
                             f"{tuple(x.shape)}")
        axes = len(self.config["axes_dims_rope"])
        for name, ids, n in (("img_ids", img_ids, x.shape[1]), ("txt_ids", txt_ids, c.shape[1])):
            if not isinstance(ids, torch.Tensor) or tuple(ids.shape) != (n, axes):
                raise ValueError(f"{name} must be a host tensor of shape ({n}, {axes})")
        if cache is not None and self.config["num_layers"] < 1:
            raise ValueError("First-Block-Cache and TeaCache need at least one double-stream block")
        if self.config["guidance_embeds"] and guidance is None:
            raise ValueError("this transformer has a guidance embedding (FLUX.1-dev): pass guidance")
        n = x.shape[0]
        t = self._per_sample(timestep, n, "timestep")
        g = self._per_sample(guidance, n, "guidance") if self.config["guidance_embeds"] else None
        rope = _Rope(self.mesh, txt_ids, img_ids, self.config["axes_dims_rope"])
        x = _on_cp(self.x_embedder(x), Shard(1))
        t = t.to(x.dtype) * 1000
        if g is not None:
            g = g.to(x.dtype) * 1000
        temb = self.time_text_embed(t, g, pooled)
        c = _on_cp(self.context_embedder(c), Shard(1))
        x = self._blocks(x, c, temb, rope) if cache is None else self._cached_blocks(x, c, temb, rope, cache)
        scale, shift = self.norm_out.linear(F.silu(temb).to(x.dtype)).chunk(2, dim=1)
        x = self.norm_out.norm(x) * (1 + scale)[:, None, :] + shift[:, None, :]
        return _on_cp(self.proj_out(x), Replicate())
