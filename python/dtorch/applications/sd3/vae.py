"""The VAE decoder of SD3 (diffusers' ``AutoencoderKL.decode``), on one device.

GroupNorm needs statistics over the whole image, so the decoder runs on ``mesh.first_device()``
(the pipeline moves the latents there); a batch-sharded input also works on a larger mesh. Keys are
diffusers' ``decoder.*`` (and ``post_quant_conv.*`` when the config uses it); the encoder is not
built (text-to-image never encodes), and its keys are skipped.

>>> vae = AutoencoderKL.from_pretrained("sd3/vae", device_mesh=mesh)
>>> image = vae.decode(latents / vae.config["scaling_factor"] + vae.config["shift_factor"])
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

import torch

from ...distributed_spec import DeviceMesh
from ...nn import functional as F
from ...nn.modules.container import ModuleList
from ...nn.modules.module import Module
from ._common import Checkpoint, Conv2d, GroupNorm, Linear, configure, load_module, read_json

__all__ = ["AutoencoderKL"]

_DEFAULTS = dict(in_channels=3, out_channels=3, up_block_types=("UpDecoderBlock2D",), block_out_channels=(64,),
                 layers_per_block=1, act_fn="silu", latent_channels=4, norm_num_groups=32, sample_size=32,
                 scaling_factor=0.18215, shift_factor=None, use_quant_conv=True, use_post_quant_conv=True,
                 mid_block_add_attention=True, force_upcast=True)


def _act(x: Any, name: str) -> Any:
    if name in ("silu", "swish"):
        return F.silu(x)
    if name == "gelu":
        return F.gelu(x)
    if name == "relu":
        return F.relu(x)
    raise NotImplementedError(f"act_fn={name!r} is not supported")


class _Resnet(Module):
    """``ResnetBlock2D`` without a time embedding: conv2(act(GN2(conv1(act(GN1(x)))))) + shortcut(x)."""

    def __init__(self, cin: int, cout: int, groups: int, act: str, *, mesh: DeviceMesh) -> None:
        super().__init__()
        self.act = act
        self.norm1 = GroupNorm(groups, cin, 1e-6, mesh=mesh)
        self.conv1 = Conv2d(cin, cout, 3, padding=1, mesh=mesh)
        self.norm2 = GroupNorm(groups, cout, 1e-6, mesh=mesh)
        self.conv2 = Conv2d(cout, cout, 3, padding=1, mesh=mesh)
        self.conv_shortcut = Conv2d(cin, cout, 1, mesh=mesh) if cin != cout else None

    def forward(self, x: Any) -> Any:
        h = self.conv1(_act(self.norm1(x), self.act))
        h = self.conv2(_act(self.norm2(h), self.act))
        if self.conv_shortcut is not None:
            x = self.conv_shortcut(x)
        return x + h


class _MidAttention(Module):
    """The mid block's single-head self-attention over the H*W positions (``AttnProcessor2_0``'s ops)."""

    def __init__(self, channels: int, groups: int, *, mesh: DeviceMesh) -> None:
        super().__init__()
        self.channels = channels
        self.group_norm = GroupNorm(groups, channels, 1e-6, mesh=mesh)
        self.to_q = Linear(channels, channels, mesh=mesh)
        self.to_k = Linear(channels, channels, mesh=mesh)
        self.to_v = Linear(channels, channels, mesh=mesh)
        self.to_out = ModuleList([Linear(channels, channels, mesh=mesh)])

    def forward(self, x: Any) -> Any:
        residual = x
        b, c, h, w = x.shape
        x = x.view(b, c, h * w).transpose(1, 2)
        x = self.group_norm(x.transpose(1, 2)).transpose(1, 2)
        # torch's linear takes the transposed (non-contiguous) tokens through matmul + add (see Linear).
        q = self.to_q(x, False).view(b, -1, 1, c).transpose(1, 2)
        k = self.to_k(x, False).view(b, -1, 1, c).transpose(1, 2)
        v = self.to_v(x, False).view(b, -1, 1, c).transpose(1, 2)
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=False)
        x = x.transpose(1, 2).reshape(b, -1, c).to(q.dtype)
        x = self.to_out[0](x)
        x = x.transpose(-1, -2).reshape(b, c, h, w)
        return x + residual


class _MidBlock(Module):
    def __init__(self, channels: int, groups: int, act: str, attention: bool, *, mesh: DeviceMesh) -> None:
        super().__init__()
        self.resnets = ModuleList([_Resnet(channels, channels, groups, act, mesh=mesh) for _ in range(2)])
        self.attentions = ModuleList([_MidAttention(channels, groups, mesh=mesh)] if attention else [])

    def forward(self, x: Any) -> Any:
        x = self.resnets[0](x)
        if len(self.attentions):
            x = self.attentions[0](x)
        return self.resnets[1](x)


class _Upsample(Module):
    def __init__(self, channels: int, *, mesh: DeviceMesh) -> None:
        super().__init__()
        self.conv = Conv2d(channels, channels, 3, padding=1, mesh=mesh)

    def forward(self, x: Any) -> Any:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class _UpBlock(Module):
    def __init__(self, cin: int, cout: int, layers: int, groups: int, act: str, upsample: bool, *,
                 mesh: DeviceMesh) -> None:
        super().__init__()
        self.resnets = ModuleList([_Resnet(cin if i == 0 else cout, cout, groups, act, mesh=mesh)
                                   for i in range(layers)])
        self.upsamplers = ModuleList([_Upsample(cout, mesh=mesh)]) if upsample else None

    def forward(self, x: Any) -> Any:
        for r in self.resnets:
            x = r(x)
        if self.upsamplers is not None:
            x = self.upsamplers[0](x)
        return x


class _Decoder(Module):
    def __init__(self, cfg: Dict[str, Any], *, mesh: DeviceMesh) -> None:
        super().__init__()
        ch = list(cfg["block_out_channels"])
        groups, act = cfg["norm_num_groups"], cfg["act_fn"]
        for t in cfg["up_block_types"]:
            if t != "UpDecoderBlock2D":
                raise NotImplementedError(f"up block {t!r} is not supported (UpDecoderBlock2D)")
        self.act = act
        self.conv_in = Conv2d(cfg["latent_channels"], ch[-1], 3, padding=1, mesh=mesh)
        self.mid_block = _MidBlock(ch[-1], groups, act, cfg["mid_block_add_attention"], mesh=mesh)
        rev = list(reversed(ch))
        blocks, prev = [], rev[0]
        for i in range(len(cfg["up_block_types"])):
            blocks.append(_UpBlock(prev, rev[i], cfg["layers_per_block"] + 1, groups, act, i != len(ch) - 1,
                                   mesh=mesh))
            prev = rev[i]
        self.up_blocks = ModuleList(blocks)
        self.conv_norm_out = GroupNorm(groups, ch[0], 1e-6, mesh=mesh)
        self.conv_out = Conv2d(ch[0], cfg["out_channels"], 3, padding=1, mesh=mesh)

    def forward(self, z: Any) -> Any:
        x = self.mid_block(self.conv_in(z))
        for b in self.up_blocks:
            x = b(x)
        return self.conv_out(_act(self.conv_norm_out(x), self.act))


class AutoencoderKL(Module):
    """diffusers' ``AutoencoderKL``, decoder only: ``decode(z)`` returns the image in [-1, 1] (N, 3, H, W).

    ``config["scaling_factor"]`` and ``config["shift_factor"]`` are SD3's latent normalisation; the
    pipeline applies ``z = latents / scaling_factor + shift_factor`` before ``decode``.

    >>> vae = AutoencoderKL.from_pretrained(path + "/vae", device_mesh=mesh)
    """

    def __init__(self, config: Dict[str, Any], *, device_mesh: DeviceMesh) -> None:
        super().__init__()
        cfg = configure(self, config, _DEFAULTS, device_mesh)
        lc = cfg["latent_channels"]
        self.post_quant_conv = Conv2d(lc, lc, 1, mesh=device_mesh) if cfg["use_post_quant_conv"] else None
        self.decoder = _Decoder(cfg, mesh=device_mesh)

    @property
    def vae_scale_factor(self) -> int:
        return 2 ** (len(self.config["block_out_channels"]) - 1)

    @property
    def dtype(self) -> torch.dtype:
        return self.decoder.conv_in.weight.dtype

    @classmethod
    def from_pretrained(cls, path: str, *, device_mesh: DeviceMesh,
                        torch_dtype: Optional[torch.dtype] = None) -> "AutoencoderKL":
        """Reads ``path/config.json`` and ``path/diffusion_pytorch_model.safetensors`` (decoder keys)."""
        model = cls(read_json(os.path.join(path, "config.json")), device_mesh=device_mesh)
        ckpt = Checkpoint(path, "diffusion_pytorch_model")
        attn = "decoder.mid_block.attentions.0."
        legacy = {attn + f"{new}.{p}": attn + f"{old}.{p}" for new, old in
                  (("to_q", "query"), ("to_k", "key"), ("to_v", "value"), ("to_out.0", "proj_attn"))
                  for p in ("weight", "bias")}
        try:
            ignore = ("encoder.", "quant_conv.") + (() if model.post_quant_conv is not None else ("post_quant_conv.",))
            load_module(model, ckpt, dtype=torch_dtype, ignore=ignore + tuple(legacy.values()), aliases=legacy)
        finally:
            ckpt.close()
        return model

    def decode(self, z: Any) -> Any:
        """The decoded image (N, out_channels, H * vae_scale_factor, W * vae_scale_factor) of latents ``z``."""
        if self.post_quant_conv is not None:
            z = self.post_quant_conv(z)
        return self.decoder(z)

    def forward(self, z: Any) -> Any:
        return self.decode(z)
