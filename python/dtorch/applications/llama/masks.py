"""Which keys an attention reads and with which mask: decided on the host, as transformers decides.

For a forward of ``s`` query positions after ``start`` cached ones, ``attention_plan`` gives the key
range (all cached keys, or for a sliding window of W the last W - 1 cached ones and the new ones,
which is what transformers' sliding cache keeps) and either a boolean mask [B or 1, 1, s, keys] or
none (then SDPA's ``is_causal`` for a prompt, nothing for one position). The mask is built exactly
when transformers' SDPA path builds one (padding among the keys, a chunk after cached positions, a
window the keys reach), so that each SDPA call gets the same arguments as transformers' and the
one-device results are bit-identical. Position ``q`` may see key ``k`` when ``k <= q``, ``k > q - W``
(with a window) and key ``k`` is not padding.

>>> plan = attention_plan(pad, s=1, start=9, window=None, cached=True)
>>> plan.kv_lo, plan.mask.shape
(0, torch.Size([2, 1, 1, 10]))
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

__all__ = ["AttentionPlan", "attention_plan", "without_redundant_mask", "left_padding_positions"]


@dataclasses.dataclass
class AttentionPlan:
    """Keys ``kv_lo``..``kv_hi`` (absolute positions), the boolean ``mask`` [B or 1, 1, s, keys] or
    None, and ``is_causal`` (SDPA's flag, used only without a mask)."""

    kv_lo: int
    kv_hi: int
    mask: Optional[torch.Tensor]
    is_causal: bool


def attention_plan(pad: Optional[torch.Tensor], s: int, start: int, window: Optional[int],
                   cached: bool) -> AttentionPlan:
    """The keys and mask of ``s`` queries at positions ``start``..``start + s``.

    ``pad`` is the padding mask of every position so far, [B, start + s] (True: a token, False:
    padding), or None; ``cached`` says whether the keys of earlier positions come from a cache
    (otherwise only the current positions are keys).

    >>> attention_plan(None, 8, 0, None, True).is_causal
    True
    """
    if not cached:
        lo, offset = start, 0  # transformers without a cache: no past, the positions only shifted
    elif start == 0:
        lo, offset = 0, 0
    else:
        lo = max(0, start - window + 1) if window is not None else 0
        offset = start
    hi = start + s
    n = hi - lo
    keys = pad[:, lo:hi] if pad is not None else None
    needed = True
    if window is not None and n >= window:
        needed = True  # the window cuts keys off: only a mask says which
    elif (s == 1 or n == s) and (keys is None or bool(keys.all())):
        needed = False
    elif offset == 0 and (keys is None or (bool(keys[:, :s].all()) and not bool(keys[:, s:].any()))):
        needed = False
    if not needed:
        return AttentionPlan(lo, hi, None, s > 1)
    q = torch.arange(start, hi)[:, None]
    k = torch.arange(lo, hi)[None, :]
    allowed = k <= q
    if window is not None:
        allowed = allowed & (k > q - window)
    allowed = allowed[None, None]
    if keys is not None:
        allowed = allowed & keys[:, None, None, :]
    return AttentionPlan(lo, hi, allowed, False)


def without_redundant_mask(plan: AttentionPlan, s: int) -> AttentionPlan:
    """``plan`` without its mask where the mask says no more than SDPA's defaults (all keys for one
    query; ``is_causal`` for as many keys as queries): the same attention, for an SDPA that takes no
    mask (ring attention), though no longer the call transformers makes.

    >>> without_redundant_mask(attention_plan(None, 1, 5, 8, True), 1).mask is None
    True
    """
    m = plan.mask
    if m is None:
        return plan
    n = plan.kv_hi - plan.kv_lo
    if s == 1 and bool(m.all()):
        return AttentionPlan(plan.kv_lo, plan.kv_hi, None, False)
    if n == s and bool((m == torch.ones(s, s, dtype=torch.bool).tril()).all()):
        return AttentionPlan(plan.kv_lo, plan.kv_hi, None, True)
    return plan


def left_padding_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids [B, S] of a left-padded batch: each row counts its tokens from 0 (padding: 0).

    >>> left_padding_positions(torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]))
    tensor([[0, 0, 0, 1],
            [0, 1, 2, 3]])
    """
    m = attention_mask.to(torch.int64)
    return (m.cumsum(-1) - 1).masked_fill(m == 0, 0)
