"""A tiny random Flux pipeline folder for tests, examples and benchmarks (needs diffusers and transformers).

``make_tiny_pipeline(path)`` builds diffusers' ``FluxPipeline`` with tiny random components (seeded;
SD3's tiny vocabularies and tokenizers, ``dtorch.applications.sd3.testing``), saves it with
``save_pretrained`` and returns it (the reference).

>>> ref = make_tiny_pipeline("/tmp/tiny-flux", seed=0)            # FLUX.1-dev-like (guidance embedding)
>>> ref = make_tiny_pipeline("/tmp/tiny-schnell", guidance=False)   # schnell-like
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

import torch

from ..sd3.testing import TINY_VAE, write_clip_vocab, write_t5_pieces

__all__ = ["make_tiny_pipeline", "TINY_TRANSFORMER", "TINY_FLUX_VAE"]

TINY_TRANSFORMER = dict(patch_size=1, in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=16,
                        num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32,
                        axes_dims_rope=(4, 6, 6))
# Flux's latent normalisation on SD3's tiny decoder.
TINY_FLUX_VAE = dict(TINY_VAE, scaling_factor=0.3611, shift_factor=0.1159)


def make_tiny_pipeline(path: str, seed: int = 0, guidance: bool = True,
                       transformer: Optional[Dict[str, Any]] = None) -> Any:
    """Writes a tiny random diffusers Flux folder at ``path`` and returns the diffusers pipeline."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer, T5Config, T5EncoderModel, T5Tokenizer

    vocab_dir = os.path.join(path, "_vocab")
    write_clip_vocab(vocab_dir)
    write_t5_pieces(vocab_dir)
    tokenizer = CLIPTokenizer(vocab=os.path.join(vocab_dir, "vocab.json"),
                              merges=os.path.join(vocab_dir, "merges.txt"), model_max_length=77)
    with open(os.path.join(vocab_dir, "pieces.json"), encoding="utf-8") as f:
        pieces = [tuple(p) for p in json.load(f)]
    tokenizer_2 = T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=512)
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    bos = tokenizer.convert_tokens_to_ids("<|startoftext|>")
    torch.manual_seed(seed)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, projection_dim=32,
        hidden_act="quick_gelu", vocab_size=len(tokenizer.get_vocab()), max_position_embeddings=77, eos_token_id=eos,
        bos_token_id=bos, pad_token_id=eos, layer_norm_eps=1e-5)).eval()
    text_encoder_2 = T5EncoderModel(T5Config(vocab_size=len(pieces), d_model=32, d_kv=8, d_ff=37, num_layers=2,
                                             num_heads=4, feed_forward_proj="gated-gelu",
                                             relative_attention_num_buckets=8,
                                             relative_attention_max_distance=20)).eval()
    model = FluxTransformer2DModel(**dict(transformer or TINY_TRANSFORMER, guidance_embeds=guidance)).eval()
    vae = AutoencoderKL(**TINY_FLUX_VAE).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in (text_encoder, text_encoder_2, model, vae):
            for p in m.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                                                base_image_seq_len=256, max_image_seq_len=4096)
    pipe = FluxPipeline(scheduler=scheduler, transformer=model, vae=vae, text_encoder=text_encoder,
                        text_encoder_2=text_encoder_2, tokenizer=tokenizer, tokenizer_2=tokenizer_2)
    pipe.save_pretrained(path)
    return pipe
