"""Where the Llama model's tensors live: the stage meshes and the placements by mesh dim name.

Placements are written as dicts keyed by mesh dim name (``{"dp": Shard(0), "tp": Shard(1)}``);
names a mesh lacks, and mesh dims of size 1, are Replicate, so one model runs unchanged on any
mix of ``dp, tp, pp, ulysess_cp, ring_cp``.

>>> lay = Layout(dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("tp", "pp")), num_layers=3)
>>> lay.layer_stage, lay.tp
([0, 0, 1], 2)
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ...distributed_spec import DeviceMesh, Partial, Placement, Replicate, Shard, assign_layers_to_stages

__all__ = ["Layout", "ACT", "COL", "ROW", "ROW_BIAS", "VOCAB", "KV", "CP_DIMS", "replicate_heads"]

CP_DIMS = ("ulysess_cp", "ring_cp")
# Activations [B, S, H] (also ids [B, S]): batch on dp, sequence on the context-parallel dims.
ACT: Dict[str, Placement] = {"dp": Shard(0), "ulysess_cp": Shard(1), "ring_cp": Shard(1)}
# Column-parallel weight [out, in] and its bias: the output features on tp.
COL: Dict[str, Placement] = {"tp": Shard(0)}
# Row-parallel weight [out, in]: the input features on tp; its bias is added once (Partial).
ROW: Dict[str, Placement] = {"tp": Shard(1)}
ROW_BIAS: Dict[str, Placement] = {"tp": Partial()}
# Embedding / lm_head weight [vocab, hidden]: the vocabulary on tp.
VOCAB: Dict[str, Placement] = {"tp": Shard(0)}
# The KV cache [B, kv_heads, max_len, head_dim]: batch on dp, heads on tp, the sequence whole.
KV: Dict[str, Placement] = {"dp": Shard(0), "tp": Shard(1)}


def placements(mesh: DeviceMesh, by_name: Dict[str, Placement]) -> List[Placement]:
    """``by_name`` as a placement list for ``mesh`` (Replicate for names not given and size-1 dims)."""
    out = []
    for i, name in enumerate(mesh.dim_names):
        p = by_name.get(name, Replicate())
        out.append(Replicate() if mesh.size(i) == 1 else p)
    return out


def lay(t: Any, mesh: DeviceMesh, by_name: Dict[str, Placement]) -> Any:
    """``t`` on ``mesh`` with the placements ``by_name`` (``redistribute_by_dict``; nothing is
    recorded when it is already so): all-gathers, all-reduces, or stage-to-stage copies."""
    want = placements(mesh, by_name)
    if t.device_mesh == mesh and list(t.placements) == want:
        return t
    return t.redistribute_by_dict(mesh, by_name, default_placement_mode="replicate")


def replicate_heads(t: Any, rep: Optional[Tuple[int, int]]) -> Any:
    """``t`` [heads * n, ...] with each of its ``heads`` row blocks repeated ``r`` times in place
    (``rep = (heads, r)``; None or r == 1: ``t``). Works on torch and dtorch tensors.

    >>> replicate_heads(torch.tensor([[0], [1], [2], [3]]), (2, 2)).flatten().tolist()
    [0, 1, 0, 1, 2, 3, 2, 3]
    """
    if rep is None or rep[1] == 1:
        return t
    heads, r = rep
    rest = tuple(t.shape[1:])
    per = t.shape[0] // heads
    return t.reshape(heads, 1, per, *rest).expand(heads, r, per, *rest).reshape(heads * r * per, *rest)


class Layout:
    """The mesh of a model, its pipeline stages and the sizes of its parallel dims.

    ``stages`` are ``mesh.unbind("pp")`` (``[mesh]`` without a ``pp`` dim); ``layer_stage[i]`` is
    the stage of decoder layer i (``assign_layers_to_stages``); the embedding sits on the first
    stage, the final norm and ``lm_head`` on the last.
    """

    def __init__(self, mesh: DeviceMesh, num_layers: int) -> None:
        self.mesh = mesh
        self.stages: List[DeviceMesh] = mesh.unbind("pp")
        self.layer_stage: List[int] = assign_layers_to_stages(num_layers, len(self.stages))
        self.tp = self.size("tp")
        self.dp = self.size("dp")
        # The kv heads the attention computes: the config's, or the tp size when that is larger
        # (each kv head then replicated on tp // num_key_value_heads ranks); set by the model.
        self.kv_heads: Optional[int] = None

    def size(self, name: str) -> int:
        """The size of the mesh dim ``name`` (1 when the mesh has none)."""
        return self.mesh.size(self.mesh.dim_name_index(name)) if self.mesh.has_dim_name(name) else 1

    @property
    def first(self) -> DeviceMesh:
        return self.stages[0]

    @property
    def last(self) -> DeviceMesh:
        return self.stages[-1]
