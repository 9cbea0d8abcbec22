"""A tiny random SD3 pipeline folder for tests, examples and benchmarks (needs diffusers and transformers).

``make_tiny_pipeline(path)`` writes small vocab files (a byte-level CLIP BPE vocabulary with a few
merges, a T5 unigram piece list), builds transformers' tokenizers from them, builds diffusers'
``StableDiffusion3Pipeline`` with tiny random components (seeded) and saves it with
``save_pretrained``; it returns that diffusers pipeline (the reference).

>>> ref = make_tiny_pipeline("/tmp/tiny-sd3", seed=0)
>>> pipe = StableDiffusion3Pipeline.from_pretrained("/tmp/tiny-sd3", device_mesh=mesh)
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

import torch

__all__ = ["make_tiny_pipeline", "TINY_TRANSFORMER", "TINY_VAE"]

TINY_TRANSFORMER = dict(sample_size=16, patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=16,
                        num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=32,
                        pooled_projection_dim=64, pos_embed_max_size=24)
TINY_VAE = dict(block_out_channels=(4,), layers_per_block=1, latent_channels=4, norm_num_groups=1,
                use_quant_conv=False, use_post_quant_conv=False, scaling_factor=1.5035, shift_factor=0.0609)
_WORDS = ["a", "photo", "of", "cat", "dog", "on", "the", "moon", "red", "blue", "house", "tree", "in", "painting"]


def _bytes_to_unicode() -> Dict[int, str]:
    """CLIP's (GPT-2's) reversible byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def write_clip_vocab(folder: str) -> None:
    """vocab.json and merges.txt: every byte (alone and word-final), merges spelling ``_WORDS``, and
    the two specials; ``!`` is id 0 (CLIP-G's padding) and ``<|endoftext|>`` the last id."""
    chars = list(_bytes_to_unicode().values())
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({c + "</w>": len(chars) + i for i, c in enumerate(chars)})
    merges = []
    for w in _WORDS:
        parts = list(w[:-1]) + [w[-1] + "</w>"]
        while len(parts) > 1:
            a, b = parts[0], parts[1]
            merges.append(f"{a} {b}")
            if a + b not in vocab:
                vocab[a + b] = len(vocab)
            parts = [a + b] + parts[2:]
    merges = list(dict.fromkeys(merges))
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")


def write_t5_pieces(folder: str) -> None:
    """pieces.json: a unigram piece list (piece, log-probability): pad, eos, unk, words, letters."""
    pieces = [["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0], ["\u2581", -2.0]]
    pieces += [["\u2581" + w, -3.0 - 0.1 * i] for i, w in enumerate(_WORDS)]
    pieces += [[c, -8.0] for c in "abcdefghijklmnopqrstuvwxyz"]
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "pieces.json"), "w", encoding="utf-8") as f:
        json.dump(pieces, f)


def make_tiny_pipeline(path: str, seed: int = 0, t5: bool = True, transformer: Optional[Dict[str, Any]] = None) -> Any:
    """Writes a tiny random diffusers SD3 folder at ``path`` and returns the diffusers pipeline."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel
    from diffusers import StableDiffusion3Pipeline
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, CLIPTokenizer, T5Config, T5EncoderModel
    from transformers import T5Tokenizer

    vocab_dir = os.path.join(path, "_vocab")
    write_clip_vocab(vocab_dir)
    write_t5_pieces(vocab_dir)
    vocab, merges = os.path.join(vocab_dir, "vocab.json"), os.path.join(vocab_dir, "merges.txt")
    tokenizer = CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77)
    tokenizer_2 = CLIPTokenizer(vocab=vocab, merges=merges, pad_token="!", model_max_length=77)
    with open(os.path.join(vocab_dir, "pieces.json"), encoding="utf-8") as f:
        pieces = [tuple(p) for p in json.load(f)]
    tokenizer_3 = T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=512)
    n_vocab = len(tokenizer.get_vocab())
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    bos = tokenizer.convert_tokens_to_ids("<|startoftext|>")

    def clip_config() -> Any:
        return CLIPTextConfig(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                              projection_dim=32, hidden_act="gelu", vocab_size=n_vocab, max_position_embeddings=77,
                              eos_token_id=eos, bos_token_id=bos, pad_token_id=eos, layer_norm_eps=1e-5)

    torch.manual_seed(seed)
    text_encoder = CLIPTextModelWithProjection(clip_config()).eval()
    text_encoder_2 = CLIPTextModelWithProjection(clip_config()).eval()
    text_encoder_3 = None
    if t5:
        text_encoder_3 = T5EncoderModel(T5Config(vocab_size=len(pieces), d_model=32, d_kv=8, d_ff=37, num_layers=2,
                                                 num_heads=4, feed_forward_proj="gated-gelu",
                                                 relative_attention_num_buckets=8,
                                                 relative_attention_max_distance=20)).eval()
    model = SD3Transformer2DModel(**(transformer or TINY_TRANSFORMER)).eval()
    vae = AutoencoderKL(**TINY_VAE).eval()
    # Non-trivial values everywhere (some default initialisations are zeros or ones).
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in (text_encoder, text_encoder_2, text_encoder_3, model, vae):
            for p in ([] if m is None else m.parameters()):
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    pipe = StableDiffusion3Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0), transformer=model, vae=vae,
                                    text_encoder=text_encoder, text_encoder_2=text_encoder_2,
                                    text_encoder_3=text_encoder_3, tokenizer=tokenizer, tokenizer_2=tokenizer_2,
                                    tokenizer_3=tokenizer_3 if t5 else None)
    pipe.save_pretrained(path)
    return pipe
