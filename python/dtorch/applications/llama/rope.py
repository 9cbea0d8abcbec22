"""Rotary inverse frequencies and attention factors for every ``rope_type`` a Llama config may name.

``rope_parameters(cfg)`` reads the rope dict of a config (``rope_parameters`` in transformers 5,
``rope_scaling`` in 4.x) into a complete, checked dict; ``inv_freq_and_factor`` computes the float32
inverse frequencies [dim // 2] and the attention factor (the scale of cos and sin) for a type:

- ``default``: ``1 / theta ** (2i / dim)``;
- ``linear``: the default frequencies divided by ``factor``;
- ``dynamic`` (NTK): theta grown by ``(factor * L / max_pos - (factor - 1)) ** (dim / (dim - 2))``
  for a sequence of length L beyond ``max_position_embeddings`` (``Rotary`` tracks L);
- ``yarn``: interpolated (``/ factor``) frequencies below the ``beta_slow``..``beta_fast`` ramp,
  extrapolated (unchanged) above it, linear in between; factor ``0.1 * ln(factor) + 1`` (or the
  mscale ratio, or the given ``attention_factor``);
- ``llama3``: low frequencies divided by ``factor``, high ones kept, the band between smoothed;
- ``longrope``: the frequencies divided by ``short_factor`` (or ``long_factor`` once the sequence
  passes ``original_max_position_embeddings``); factor ``sqrt(1 + ln(factor) / ln(original))``.

The arithmetic is done in float32 torch ops in the order that makes the values equal, bit for bit,
to the tables transformers' Llama builds (its test compares them), including the float32 tensor
arithmetic of the dynamic type's growth step.

>>> inv, attention_factor = inv_freq_and_factor(cfg)
>>> rot = Rotary(cfg); inv = rot.inv_freq_for(max_position=40)     # dynamic / longrope updates
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import torch

__all__ = ["ROPE_TYPES", "rope_parameters", "inv_freq_and_factor", "Rotary"]

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
# The keys each type needs besides rope_type and rope_theta.
_REQUIRED = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor", "original_max_position_embeddings"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "longrope": ("short_factor", "long_factor", "original_max_position_embeddings"),
}


def rope_parameters(raw: Optional[Dict[str, Any]], rope_theta: float, max_position_embeddings: int,
                    original_max_position_embeddings: Optional[int], head_dim: int) -> Dict[str, Any]:
    """The rope dict completed as transformers standardises it: ``rope_type`` (from ``type`` in old
    files), ``rope_theta``, and for llama3/yarn/longrope ``original_max_position_embeddings`` (a
    top-level value wins, else the dict's, else ``max_position_embeddings``). Raises ValueError for a
    type outside ``ROPE_TYPES``, a missing key, a ``partial_rotary_factor`` other than 1, or longrope
    factors of the wrong length.

    >>> rope_parameters({"rope_type": "linear", "factor": 2.0}, 1e4, 2048, None, 64)["rope_type"]
    'linear'
    """
    rope = dict(raw or {})
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ValueError(f"LlamaConfig: rope type {kind!r} is not supported (one of {ROPE_TYPES})")
    rope["rope_type"] = kind
    rope.pop("type", None)
    rope.setdefault("rope_theta", rope_theta)
    partial = rope.get("partial_rotary_factor", 1.0)
    if partial is not None and float(partial) != 1.0:
        raise ValueError(f"LlamaConfig: partial_rotary_factor {partial} is not supported (rotary on the whole head)")
    if kind in ("llama3", "yarn", "longrope"):
        if original_max_position_embeddings is not None:
            rope["original_max_position_embeddings"] = original_max_position_embeddings
        else:
            rope.setdefault("original_max_position_embeddings", max_position_embeddings)
    missing = [k for k in _REQUIRED[kind] if k not in rope]
    if missing:
        raise ValueError(f"LlamaConfig: rope type {kind!r} needs {', '.join(missing)} in rope_parameters")
    if kind == "longrope":
        for key in ("short_factor", "long_factor"):
            if len(rope[key]) != head_dim // 2:
                raise ValueError(f"LlamaConfig: longrope {key} has {len(rope[key])} values, head_dim // 2 is "
                                 f"{head_dim // 2}")
    return rope


def _exponents(dim: int) -> torch.Tensor:
    """``2i / dim`` for i < dim // 2 (float32)."""
    return torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim


def _yarn(rope: Dict[str, Any], dim: int, base: float, max_pos: int) -> Tuple[torch.Tensor, float]:
    orig = rope["original_max_position_embeddings"]
    factor = rope["factor"]
    if factor is None:
        factor = max_pos / orig
    att = rope.get("attention_factor")
    if att is None:
        def scale(mscale: float) -> float:
            return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0
        mscale, mscale_all = rope.get("mscale"), rope.get("mscale_all_dim")
        att = float(scale(mscale) / scale(mscale_all)) if mscale and mscale_all else scale(1)
    fast = rope.get("beta_fast") or 32
    slow = rope.get("beta_slow") or 1

    def dim_of(rotations: float) -> float:  # the dimension whose wavelength makes this many turns in orig
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = dim_of(fast), dim_of(slow)
    if rope.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - lo) / (hi - lo)).clamp(0, 1)
    keep = 1 - ramp  # 1: extrapolate (frequency unchanged), 0: interpolate (divided by factor)
    powers = base ** _exponents(dim)
    inv = (1.0 / (factor * powers)) * (1 - keep) + (1.0 / powers) * keep
    return inv, att


def _llama3(rope: Dict[str, Any], inv: torch.Tensor) -> torch.Tensor:
    factor, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    orig = rope["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > orig / lo, inv / factor, inv)
    smooth = (orig / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    between = ~(wavelen < orig / hi) * ~(wavelen > orig / lo)
    return torch.where(between, smoothed, scaled)


def inv_freq_and_factor(cfg: Any, seq_len: Optional[int] = None) -> Tuple[torch.Tensor, float]:
    """The inverse frequencies [head_dim // 2] (float32) and the attention factor of ``cfg``'s rope
    type; ``seq_len`` is the sequence length the dynamic and longrope types adapt to (None: their
    initial tables).

    >>> inv, af = inv_freq_and_factor(cfg)
    """
    rope = cfg.rope
    kind, dim, base = rope["rope_type"], cfg.head_dim, rope["rope_theta"]
    if kind == "yarn":
        return _yarn(rope, dim, base, cfg.max_position_embeddings)
    if kind == "longrope":
        orig = rope["original_max_position_embeddings"]
        factor = rope.get("factor")
        if factor is None:
            factor = cfg.max_position_embeddings / orig
        att = rope.get("attention_factor")
        if att is None:
            att = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
        ext = rope["long_factor"] if seq_len and seq_len > orig else rope["short_factor"]
        return 1.0 / (torch.tensor(ext, dtype=torch.float32) * base ** _exponents(dim)), att
    if kind == "dynamic" and seq_len is not None:
        # The growth step: transformers computes the new base from the length as a 0-d int64 tensor,
        # so in float32 tensor arithmetic (not Python's doubles).
        n = torch.tensor(max(seq_len, cfg.max_position_embeddings), dtype=torch.int64)
        factor = rope["factor"]
        grown = base * ((factor * n / cfg.max_position_embeddings) - (factor - 1)) ** (dim / (dim - 2))
        return 1.0 / (grown ** _exponents(dim)), 1.0
    if kind == "dynamic":
        factor, n = rope["factor"], cfg.max_position_embeddings
        base = base * ((factor * n / n) - (factor - 1)) ** (dim / (dim - 2))
    inv = 1.0 / (base ** _exponents(dim))
    if kind == "linear":
        inv /= rope["factor"]
    elif kind == "llama3":
        inv = _llama3(rope, inv)
    return inv, 1.0


class Rotary:
    """A model's rotary frequencies over time: fixed for most types; for ``dynamic``, regrown when a
    forward reaches a length beyond the longest so far (and reset below ``max_position_embeddings``),
    for ``longrope``, the long factors while the length passes the original context. Mirrors the
    state transformers keeps in its rotary module, so that a model and its transformers twin that
    saw the same calls use the same tables.

    >>> rot = Rotary(cfg)
    >>> inv = rot.inv_freq_for(max_position=63)
    """

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.kind = cfg.rope["rope_type"]
        self.inv_freq, self.attention_factor = inv_freq_and_factor(cfg)
        self.original = self.inv_freq
        self.cached_len = cfg.max_position_embeddings

    def inv_freq_for(self, max_position: int) -> torch.Tensor:
        """The inverse frequencies for a forward whose largest position id is ``max_position``."""
        n = max_position + 1
        if self.kind == "dynamic":
            orig = self.cfg.max_position_embeddings
            if n > self.cached_len:
                self.inv_freq, _ = inv_freq_and_factor(self.cfg, n)
                self.cached_len = n
            elif n < orig < self.cached_len:
                self.inv_freq, self.cached_len = self.original, orig
        elif self.kind == "longrope":
            long = n > self.cfg.rope["original_max_position_embeddings"]
            self.inv_freq = inv_freq_and_factor(self.cfg, n)[0] if long else self.original
        return self.inv_freq
