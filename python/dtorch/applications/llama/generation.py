"""Decoding for ``LlamaForCausalLM``: greedy or sampled, with a preallocated KV cache and stop tokens.

The prompt runs once (prefill, causal attention over it), then one position per step reads the
cache. A batch of prompts of different lengths comes left-padded with its ``attention_mask`` (0:
padding), as transformers takes it: each row's positions count its own tokens from 0 (the mask's
cumulative sum), and padded keys are masked out of every attention, in the prefill and in each step. Greedy decoding takes the argmax on the mesh and feeds it to the next step without waiting;
the client reads the tokens a few steps behind to check the stop tokens. Sampling fetches the last
position's logits [B, vocab] each step and chooses the next tokens on the client with torch, in
transformers' order (temperature, top-k, top-p, then ``torch.multinomial``), so a seed or generator
gives the same tokens every run.

>>> out = model.generate(torch.tensor([[1, 5, 9]]), max_new_tokens=32)                 # greedy
>>> out = model.generate(ids, max_new_tokens=32, do_sample=True, top_p=0.9, seed=0)    # sampled
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Union

import torch

from .masks import left_padding_positions

__all__ = ["generate", "process_logits"]


def process_logits(scores: torch.Tensor, temperature: Optional[float], top_k: Optional[int],
                   top_p: Optional[float]) -> torch.Tensor:
    """transformers' sampling warpers on ``scores`` [B, vocab] (float32), in its order."""
    if temperature is not None and temperature != 1.0:
        scores = scores / temperature
    if top_k is not None and top_k > 0:
        k = min(top_k, scores.size(-1))
        remove = scores < torch.topk(scores, k)[0][..., -1, None]
        scores = scores.masked_fill(remove, -float("inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(scores, descending=False)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        sorted_remove = cum <= (1 - top_p)
        sorted_remove[..., -1:] = 0
        remove = sorted_remove.scatter(1, sorted_idx, sorted_remove)
        scores = scores.masked_fill(remove, -float("inf"))
    return scores


def _stop_ids(eos: Union[None, int, Iterable[int]]) -> List[int]:
    if eos is None:
        return []
    if isinstance(eos, int):
        return [eos]
    return [int(e) for e in eos]


def _left_padding(attention_mask: Any, input_ids: torch.Tensor) -> Optional[torch.Tensor]:
    """The prompt's padding mask (bool [B, S]), None when nothing is padded; raises for a mask of
    another shape, values other than 0/1, a row padded on the right or with no token."""
    if attention_mask is None:
        return None
    if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != tuple(input_ids.shape):
        got = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else type(attention_mask).__name__
        raise ValueError(f"generate(): attention_mask must be a torch tensor of input_ids' shape "
                         f"{tuple(input_ids.shape)}, got {got}")
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("generate(): attention_mask must hold 0 (padding) and 1 (token) only")
    pad = attention_mask.to(torch.bool)
    if bool(pad.all()):
        return None
    for row in range(pad.shape[0]):
        if not bool(pad[row].any()):
            raise ValueError(f"generate(): attention_mask row {row} has no token")
        if bool((pad[row, :-1] & ~pad[row, 1:]).any()):
            raise ValueError(f"generate(): attention_mask row {row} has padding after a token; generate takes "
                             "left padding (zeros before the tokens), as transformers' decoder-only models")
    return pad


def generate(model: Any, input_ids: torch.Tensor, max_new_tokens: int = 20, do_sample: bool = False, *,
             attention_mask: Optional[torch.Tensor] = None,
             temperature: Optional[float] = None, top_k: Optional[int] = None, top_p: Optional[float] = None,
             eos_token_id: Union[None, int, Iterable[int]] = None, stop_token_ids: Optional[Iterable[int]] = None,
             pad_token_id: Optional[int] = None, generator: Optional[torch.Generator] = None,
             seed: Optional[int] = None) -> torch.Tensor:
    """Appends up to ``max_new_tokens`` tokens to ``input_ids`` [B, S] (a torch integer tensor).

    ``attention_mask`` [B, S] (1: token, 0: padding) takes prompts of different lengths, left-padded
    as transformers' tokenizers pad for decoder-only models; positions then start at each row's first
    token and padded keys are never attended to. ``do_sample=False`` takes the argmax (greedy);
    ``do_sample=True`` samples after ``temperature``, ``top_k`` and ``top_p`` (None: off), with
    ``generator`` or a fresh generator seeded with ``seed`` (neither: torch's global generator, the
    one transformers' sampling draws from). Generation of a sequence ends after a stop token:
    ``eos_token_id`` (default: the config's; an int or a list) and ``stop_token_ids``; finished
    sequences are padded with ``pad_token_id`` (default: the config's, else the first stop token)
    until all have finished, as transformers. Everything is checked before anything is queued:
    an id outside the vocabulary raises IndexError naming ``input_ids``.

    >>> model.generate(ids, 16, eos_token_id=[2, 7], pad_token_id=0)
    >>> model.generate(torch.tensor([[0, 0, 5, 6], [1, 2, 3, 4]]), 16,
    ...                attention_mask=torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]))
    """
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise ValueError("generate(): input_ids must be a 2-D torch tensor [batch, seq]")
    model.check_ids(input_ids)
    pad = _left_padding(attention_mask, input_ids)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"generate(): max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if temperature is not None and not temperature > 0:
        raise ValueError(f"generate(): temperature must be > 0, got {temperature}")
    if top_p is not None and not 0.0 <= top_p <= 1.0:
        raise ValueError(f"generate(): top_p must be in [0, 1], got {top_p}")
    if generator is None and seed is not None:
        generator = torch.Generator().manual_seed(int(seed))
    stops = _stop_ids(model.config.eos_token_ids if eos_token_id is None else eos_token_id)
    stops += [s for s in _stop_ids(stop_token_ids) if s not in stops]
    if pad_token_id is None:
        pad_token_id = model.config.pad_token_id if model.config.pad_token_id is not None else (
            stops[0] if stops else 0)
    out = input_ids.to(torch.int64)
    if max_new_tokens == 0:
        return out.clone()
    b, s = out.shape
    step_args = _step_args(pad, b, s)
    # What the mesh cannot run raises here, before the cache is made: the prefill and the last step
    # (the most keys: a mask any step needs, for padding or a window, the last one needs too).
    model.attention_plans(b, s, 0, pad, True)
    model.attention_plans(b, 1, s + max_new_tokens - 1, step_args(max_new_tokens - 1).get("attention_mask"), True)
    stop_t = torch.tensor(stops, dtype=torch.int64)
    unfinished = torch.ones(b, dtype=torch.bool)
    cache = model.new_cache(b, s + max_new_tokens)
    logits = model(out, cache=cache, start=0, logits_to_keep=1, **step_args(-1))
    if not do_sample:
        return _greedy(model, out, logits, cache, max_new_tokens, stop_t, pad_token_id, step_args)
    for step in range(max_new_tokens):
        scores = logits.to_torch()[:, -1, :].to(torch.float32)
        probs = process_logits(scores, temperature, top_k, top_p).softmax(dim=-1)
        nxt = torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)
        nxt = torch.where(unfinished, nxt, torch.full_like(nxt, pad_token_id))
        out = torch.cat([out, nxt[:, None]], dim=1)
        if stops:
            unfinished &= ~torch.isin(nxt, stop_t)
        if not bool(unfinished.any()) or step == max_new_tokens - 1:
            break
        logits = model(nxt[:, None], cache=cache, start=s + step, logits_to_keep=1, **step_args(step))
    return out


def _step_args(pad: Optional[torch.Tensor], b: int, s: int) -> Callable[[int], Dict[str, Any]]:
    """The ``attention_mask`` and ``position_ids`` of the prefill (step -1) and of decoding step t
    (the token after t + 1 new ones) for a left-padded batch; nothing without padding."""
    if pad is None:
        return lambda step: {}
    positions = left_padding_positions(pad)
    last = positions[:, -1:]

    def args(step: int) -> Dict[str, Any]:
        if step < 0:
            return {"attention_mask": pad, "position_ids": positions}
        mask = torch.cat([pad, torch.ones(b, step + 1, dtype=torch.bool)], dim=1)
        return {"attention_mask": mask, "position_ids": last + step + 1}

    return args


# Greedy steps recorded ahead of the stop-token check: the client records step t + LOOKAHEAD while the
# devices compute step t, instead of waiting for every token.
LOOKAHEAD = 4


def _greedy(model: Any, out: torch.Tensor, logits: Any, cache: Any, max_new: int, stop_t: torch.Tensor,
            pad: int, step_args: Callable[[int], Dict[str, Any]]) -> torch.Tensor:
    """Greedy decoding with the argmax on the mesh: each step's tokens feed the next step as a dtorch
    tensor, and the client reads them (asynchronously) up to LOOKAHEAD steps later to check the stop
    tokens. A row's tokens after its stop token are replaced by ``pad`` when read; the model saw its
    own argmax there instead of ``pad``, which only changes that row's later logits, never used (rows
    do not interact). Steps recorded past the point where every row has stopped are dropped."""
    b, s = out.shape
    unfinished = torch.ones(b, dtype=torch.bool)
    pending = []
    new = []
    for step in range(max_new):
        tok = logits[:, -1, :].argmax(dim=-1)
        pending.append(tok.to_torch_async())
        if step < max_new - 1:
            logits = model(tok[:, None], cache=cache, start=s + step, logits_to_keep=1, **step_args(step))
        while pending and (len(pending) > LOOKAHEAD or step == max_new - 1):
            nxt = pending.pop(0).get().to(torch.int64)
            nxt = torch.where(unfinished, nxt, torch.full_like(nxt, pad))
            new.append(nxt)
            if stop_t.numel():
                unfinished &= ~torch.isin(nxt, stop_t)
            if not bool(unfinished.any()):
                return torch.cat([out, torch.stack(new, dim=1)], dim=1)
    return torch.cat([out, torch.stack(new, dim=1)], dim=1)
