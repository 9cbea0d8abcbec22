"""Mixture of experts on an ``ep`` mesh dim: ``MixtralForCausalLM``, ``Qwen2MoeForCausalLM``, ``Qwen3MoeForCausalLM``.

The Llama decoder (attention, norms, embeddings, ``generate``, dp/tp/pp as ``model.py`` lays them
out) with a sparse block in place of the MLP on the layers the config names. The block computes
what transformers' eager experts compute, in the same order (softmax in float32, top-k, the
renormalisation and dtype casts of each family, the experts' outputs weighted and added in
ascending expert order, Qwen2-MoE's shared expert behind its sigmoid gate), so that one device
gives transformers' logits bit for bit where the GEMMs do (docs/decisions.md).

Expert parallelism (mesh dim ``ep``; docs/decisions.md "Mixture of experts"): the experts are split
in contiguous blocks over ``ep`` (rank r holds experts r * E/ep .. (r+1) * E/ep - 1), each expert's
MLP split over ``tp`` as Llama's MLP is. Inside a block the tokens [B, S] are split over ``ep`` along
the sequence (padded to a multiple of ep), each rank routes its own tokens, and every (token, k)
pair travels to the rank of its expert in a fixed worst-case buffer [ep, B, S, K, H] (the pair's row
in the chunk of its destination, zeros in the others): one all-to-all there (Shard on the sequence
-> Shard on the destination), the experts run on every row they received, one all-to-all back, and
each token keeps the row from its expert's rank. Every size is static and every mask is computed on
the devices, so nothing waits for the routing on the client.

>>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("ep", "tp"))
>>> model = AutoModelForCausalLM.from_pretrained("/models/Mixtral-tiny", device_mesh=mesh)
>>> model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=4)
"""

from __future__ import annotations

from typing import Any, Dict

import torch

from ... import _factories
from ..._ops_elementwise import where
from ..._ops_sort_scan import argsort, topk
from ..._ops_views import cat
from ...distributed_spec import DeviceMesh, Placement, Shard
from ...nn import functional as F
from ...nn.modules.module import Module
from .layout import Layout, lay, placements
from .model import LlamaForCausalLM, LlamaMLP, Maker, _Linear
from .moe_config import MixtralConfig, MoeMixin, Qwen2MoeConfig, Qwen3MoeConfig

__all__ = ["SparseMoeBlock", "MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "MOE_CLASSES"]

# Tokens [B, S, ...] inside a sparse block: batch on dp, sequence on ep.
TOK: Dict[str, Placement] = {"dp": Shard(0), "ep": Shard(1)}
# The dispatch buffer [ep, B, S, K, H] at its source (sequence on ep) and at its destination (dim 0 on ep).
SEND: Dict[str, Placement] = {"dp": Shard(1), "ep": Shard(2)}
RECV: Dict[str, Placement] = {"dp": Shard(1), "ep": Shard(0)}
# The experts' weights: gate_up [ep, E/ep, 2I, H] (intermediate on tp), down [ep, E/ep, H, I].
EXPERT_IN: Dict[str, Placement] = {"ep": Shard(0), "tp": Shard(2)}
EXPERT_OUT: Dict[str, Placement] = {"ep": Shard(0), "tp": Shard(3)}
# The rows every local expert computes [ep, E/ep, B, S * K, H]: the destination on ep, batch on dp.
SLOT_ROWS: Dict[str, Placement] = {"dp": Shard(2), "ep": Shard(0)}
# The most elements a device's SwiGLU input [slots, B, N, 2I] may hold before the slots are split
# into groups (float32: 8 MiB): prefills of many tokens trade ops for memory, decoding steps run every
# slot in one batched matmul.
SLOT_BUDGET = 1 << 21


class SparseMoeBlock(Module):
    """A sparse MoE block on one stage mesh: router ``gate`` [E, H] (replicated), the experts'
    weights ``experts.gate_up_proj`` [ep, E/ep, 2I, H] and ``experts.down_proj`` [ep, E/ep, H, I]
    (expert r * E/ep + j at [r, j]; rank r of ep holds row r), and for Qwen2-MoE
    a shared expert (a SwiGLU MLP, tp-sharded) scaled by ``sigmoid(shared_expert_gate(x))``.

    >>> block = model.model.layers[0].mlp
    >>> out = block(h)                       # h [B, S, H] laid out as the decoder's activations
    """

    def __init__(self, make: Maker, name: str, cfg: Any, layout: Layout, mesh: DeviceMesh, idx: int) -> None:
        super().__init__()
        self.mesh = mesh
        self.ep = ep = layout.size("ep")
        self.dp = layout.size("dp")
        self.top_k, self.num_experts = cfg.num_experts_per_tok, cfg.num_experts
        self.per_rank = cfg.num_experts // ep
        self.norm_topk, self.cast_weights = cfg.norm_topk, cfg.weights_in_hidden_dtype
        h, m = cfg.hidden_size, cfg.moe_intermediate_size
        p = f"{name}.{cfg.moe_prefix}"
        self.gate = _Linear(make, p + ".gate", h, cfg.num_experts, False, mesh, {})
        self.tp = tp = layout.size("tp")
        if m % tp != 0:
            raise ValueError(f"moe_intermediate_size ({m}) must be divisible by the tp size ({tp})")
        # Expert r * E/ep + j at [r, j]. gate and up fused as transformers fuses them ([gate; up] rows),
        # blocked by tp rank (rank t's rows: its gate block then its up block), so that a tp shard is
        # itself a fused SwiGLU input.
        names = [cfg.expert_names(idx, e) for e in range(cfg.num_experts)]
        self.experts = Module()
        self.experts.gate_up_proj = make(f"{p}.experts.gate_up_proj", (ep, self.per_rank, 2 * m, h), mesh, EXPERT_IN,
                                         "normal", stack=[n[:2] for n in names],
                                         fuse=lambda ts: fuse_gate_up(ts[0], ts[1], tp))
        self.experts.down_proj = make(f"{p}.experts.down_proj", (ep, self.per_rank, h, m), mesh, EXPERT_OUT, "normal",
                                      stack=[n[2:] for n in names])
        self.shared_expert = self.shared_expert_gate = None
        if cfg.shared_expert_intermediate_size:
            self.shared_expert = LlamaMLP(make, p + ".shared_expert", cfg, mesh, cfg.shared_expert_intermediate_size)
            self.shared_expert_gate = _Linear(make, p + ".shared_expert_gate", h, 1, False, mesh, {})
        # arange(ep) and arange(E/ep) [n, 1, 1]: compared with the routing to find the rows for each
        # destination rank and each local slot.
        self._ids: Dict[int, Any] = {}

    def _arange(self, n: int, graph: Any) -> Any:
        if n not in self._ids or self._ids[n][0] is not graph:
            t = _factories.arange(n, device_mesh=self.mesh, placements=placements(self.mesh, {}), graph=graph)
            self._ids[n] = (graph, t.view(n, 1, 1))
        return self._ids[n][1]

    def _rank_ids(self, graph: Any) -> Any:
        return self._arange(self.ep, graph).unsqueeze(-1)  # [ep, 1, 1, 1]

    def _slot_ids(self, graph: Any) -> Any:
        return self._arange(self.per_rank, graph)  # [E/ep, 1, 1]

    def _experts(self, rows: Any, slot: Any) -> Any:
        """Every local expert on ``rows`` [ep, B, N, H] (rank r, slot j: expert r * E/ep + j), each row
        keeping the output of the slot ``slot`` [B, N] names; the tp Partial reduced. The slots run in
        groups whose SwiGLU input stays under ``SLOT_BUDGET`` elements a device (one group when
        decoding); each group is one batched matmul."""
        ep, b, n, _ = rows.shape
        e_l, (_, _, two_i, _) = self.per_rank, self.experts.gate_up_proj.shape
        local = -(-b // self.dp) * n * two_i // self.tp  # a slot's [B, N, 2I] block on one device
        group = max(1, min(e_l, SLOT_BUDGET // max(1, local)))
        y = None
        for j0 in range(0, e_l, group):
            j1 = min(e_l, j0 + group)
            gate_up = self.experts.gate_up_proj[:, j0:j1].transpose(2, 3).unsqueeze(2)
            gu = rows.unsqueeze(1).matmul(gate_up)  # [ep, j1 - j0, B, N, 2I]
            gu = gu.view(ep, j1 - j0, b, n, self.tp, 2, -1)  # each tp rank's block: its gate, then its up columns
            act = (F.silu(gu[:, :, :, :, :, 0]) * gu[:, :, :, :, :, 1]).reshape(ep, j1 - j0, b, n, -1)
            out = lay(act.matmul(self.experts.down_proj[:, j0:j1].transpose(2, 3).unsqueeze(2)), self.mesh,
                      SLOT_ROWS)  # [ep, j1 - j0, B, N, H]
            if e_l == 1:
                return out[:, 0]
            mine = slot.unsqueeze(0) == self._slot_ids(slot.graph)[j0:j1]  # [j1 - j0, B, N]: the row's slot
            part = where(mine.unsqueeze(-1).unsqueeze(0), out, 0.0).sum(dim=1)  # one term or none, zeros: exact
            y = part if y is None else y + part  # a row's value plus zeros, or zeros plus its value: exact
        return y

    def forward(self, h: Any) -> Any:
        """``h`` [B, S, H], laid out as the decoder's activations -> the block's output, laid out the same."""
        b, s, hd = h.shape
        ep, k_top, mesh = self.ep, self.top_k, self.mesh
        shared = None
        if self.shared_expert is not None:  # on every token, before the padding and split: transformers'
            # GEMM shapes (a GEMM with one output column rounds by the row count on the CPU)
            shared = F.sigmoid(F.linear(h, self.shared_expert_gate.weight)) * self.shared_expert(h)
        sp = -(-s // ep) * ep  # the sequence padded to a multiple of ep (a decoding step: ep rows)
        if sp != s:
            pad = _factories.zeros(b, sp - s, hd, dtype=h.dtype, device_mesh=mesh, placements=list(h.placements),
                                   graph=h.graph)
            h = cat([h, pad], dim=1)
        x = lay(h, mesh, TOK)
        # The router, as transformers: logits in the hidden dtype, softmax in float32, top-k.
        logits = F.linear(x, self.gate.weight)
        probs = F.softmax(logits, dim=-1, dtype=torch.float32)
        weights, experts = topk(probs, k_top, dim=-1)  # [B, Sp, K]
        if self.norm_topk:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        if self.cast_weights:
            weights = weights.to(logits.dtype)
        # Dispatch: row (b, s, k) goes in the chunk of the rank holding its expert (zeros elsewhere).
        dest = experts // self.per_rank
        ranks = self._rank_ids(h.graph)
        to = dest.unsqueeze(0) == ranks  # [ep, B, Sp, K], sequence on ep
        send = where(to.unsqueeze(-1), x.unsqueeze(0).unsqueeze(3), 0.0)  # [ep, B, Sp, K, H]
        recv = lay(send, mesh, RECV)  # the all-to-all: each rank now holds the rows for its experts
        rows = recv.reshape(ep, b, sp * k_top, hd)
        slot = lay(experts, mesh, {"dp": Shard(0)}) % self.per_rank  # every token's slot, on every rank
        y = self._experts(rows, slot.reshape(b, sp * k_top))
        back = lay(y.reshape(ep, b, sp, k_top, hd), mesh, SEND)  # the all-to-all back to the tokens' ranks
        out = where(to.unsqueeze(-1), back, 0.0).sum(dim=0)  # [B, Sp, K, H]: the row from the expert's rank
        out = (out * weights.unsqueeze(-1)).to(h.dtype)
        total = lay(self._add_in_expert_order(out, experts), mesh, {"dp": Shard(0)})  # gathered over ep
        if sp != s:
            total = total[:, :s]
        return total if shared is None else total + shared

    def _add_in_expert_order(self, out: Any, experts: Any) -> Any:
        """The sum over k of ``out`` [B, Sp, K, H] in ascending expert order (transformers adds each
        expert's contribution in turn; floating-point addition is commutative, so with K <= 2 the
        order is free)."""
        k_top = self.top_k
        parts = [out[:, :, k] for k in range(k_top)]
        if k_top > 2:
            order = argsort(experts, dim=-1).unsqueeze(-1)  # [B, Sp, K, 1]
            ranked = []
            for m in range(k_top):
                pick = parts[k_top - 1]
                for k in range(k_top - 2, -1, -1):
                    pick = where(order[:, :, m] == k, parts[k], pick)
                ranked.append(pick)
            parts = ranked
        total = parts[0]
        for p in parts[1:]:
            total = total + p
        return total


def fuse_gate_up(gate: Any, up: Any, tp: int) -> Any:
    """An expert's gate [I, H] and up [I, H] weights as one [2I, H] weight whose tp blocks each hold
    that rank's gate rows then its up rows (tp 1: ``cat([gate, up])``, transformers' ``gate_up_proj``).

    >>> fuse_gate_up(torch.tensor([[0], [1]]), torch.tensor([[2], [3]]), 2).flatten().tolist()
    [0, 2, 1, 3]
    """
    i = gate.shape[0]
    return torch.stack([gate.reshape(tp, i // tp, -1), up.reshape(tp, i // tp, -1)], 1).reshape(2 * i, -1)


def _build_mlp(make: Maker, name: str, cfg: Any, layout: Layout, mesh: DeviceMesh, idx: int) -> Module:
    if cfg.sparse_layers[idx]:
        return SparseMoeBlock(make, name, cfg, layout, mesh, idx)
    return LlamaMLP(make, name + ".mlp", cfg, mesh)


class _MoeForCausalLM(LlamaForCausalLM):
    _build_mlp = staticmethod(_build_mlp)

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        mesh = kwargs.get("device_mesh", args[0] if args else None)
        if mesh is not None and isinstance(config, MoeMixin):
            _check_moe_mesh(config, mesh, type(self).__name__)
        super().__init__(config, *args, **kwargs)


def _check_moe_mesh(cfg: Any, mesh: DeviceMesh, name: str) -> None:
    names = mesh.dim_names or ()
    ep = mesh.size(mesh.dim_name_index("ep")) if "ep" in names else 1
    if cfg.num_experts % ep != 0:
        raise ValueError(f"{name}: num_experts ({cfg.num_experts}) must be divisible by the ep size ({ep})")
    for cp in ("ulysess_cp", "ring_cp"):
        if cp in names and mesh.size(mesh.dim_name_index(cp)) > 1:
            raise NotImplementedError(f"{name}: the mesh dim {cp!r} is not supported for mixture-of-experts models "
                                      "(use dp, tp, pp and ep)")


class MixtralForCausalLM(_MoeForCausalLM):
    """``transformers.MixtralForCausalLM``: Mistral's decoder with a sparse block of
    ``num_local_experts`` experts on every layer (``MixtralConfig``), experts split over ``ep``.

    >>> model = MixtralForCausalLM.from_pretrained("/models/Mixtral-8x7B-v0.1", device_mesh=mesh)
    """

    config_class = MixtralConfig


class Qwen2MoeForCausalLM(_MoeForCausalLM):
    """``transformers.Qwen2MoeForCausalLM``: Qwen2's decoder with sparse blocks (a shared expert behind
    a sigmoid gate, ``norm_topk_prob``) on the layers ``decoder_sparse_step`` / ``mlp_only_layers`` pick.

    >>> model = Qwen2MoeForCausalLM.from_pretrained("/models/Qwen1.5-MoE-A2.7B", device_mesh=mesh)
    """

    config_class = Qwen2MoeConfig


class Qwen3MoeForCausalLM(_MoeForCausalLM):
    """``transformers.Qwen3MoeForCausalLM``: Qwen3's decoder (q/k norms) with sparse blocks.

    >>> model = Qwen3MoeForCausalLM.from_pretrained("/models/Qwen3-30B-A3B", device_mesh=mesh)
    """

    config_class = Qwen3MoeConfig


MOE_CLASSES: Dict[str, type] = {c.config_class.model_type: c for c in (
    MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM)}
