"""``Embedding`` and ``EmbeddingWithReplicateOutput``: lookup tables with torch's signature.

On a mesh with the dim named ``tp_dim`` ("tp", of size > 1) the weight [num_embeddings,
embedding_dim] is sharded along the embedding dim (``Shard(1)``), so every device looks up its
slice of each row and the output is ``Shard(-1)`` there; ``EmbeddingWithReplicateOutput`` gathers
it to Replicate. The indices must be Replicate on ``tp_dim`` (other mesh dims may shard them).

>>> mesh = dtorch.init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
>>> emb = nn.Embedding(1000, 64, device_mesh=mesh)
>>> emb(dtorch.tensor([[1, 999]], device_mesh=mesh)).placements
[Shard(dim=2)]
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ... import _C, _factories
from ...distributed_spec import DeviceMesh, Replicate, Shard
from .. import functional as F
from ..parameter import Parameter
from ._common import _check_sizes, _placements, _tp_index, _where, _with_on
from .module import Module

__all__ = ["Embedding", "EmbeddingWithReplicateOutput"]


class Embedding(Module):
    """A lookup table ``weight`` [num_embeddings, embedding_dim] initialised N(0, 1) (the padding row
    zeroed), as ``torch.nn.Embedding``; weight Shard(1) on ``tp_dim``, output Shard(-1) there.

    ``max_norm`` (an in-place renormalisation) is not supported; ``norm_type``,
    ``scale_grad_by_freq``, ``sparse`` and ``_freeze`` only matter for gradients and are kept as
    attributes. ``_weight`` (a torch or dtorch tensor) gives the initial weight.

    >>> emb = nn.Embedding(1000, 64, padding_idx=0, device_mesh=mesh)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 max_norm: Optional[float] = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Any = None, _freeze: bool = False, device: Any = None,
                 dtype: Optional[torch.dtype] = None, *, device_mesh: Optional[DeviceMesh] = None,
                 tp_dim: Optional[str] = "tp", graph: Any = None) -> None:
        super().__init__()
        if max_norm is not None:
            raise NotImplementedError("Embedding(max_norm=...) renormalises the weight in place; not supported")
        if padding_idx is not None:
            if padding_idx > 0:
                assert padding_idx < num_embeddings, "Padding_idx must be within num_embeddings"
            elif padding_idx < 0:
                assert padding_idx >= -num_embeddings, "Padding_idx must be within num_embeddings"
                padding_idx = num_embeddings + padding_idx
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        self.tp_dim = tp_dim
        shape = (num_embeddings, embedding_dim)
        w = _where(device, device_mesh, dtype, graph)
        self._tp = _tp_index(w.mesh, tp_dim)
        pl = _placements(w.mesh, self._tp, Shard(1))
        if _weight is not None:
            if tuple(_weight.shape) != shape:
                raise AssertionError("Shape of weight does not match num_embeddings and embedding_dim")
            if isinstance(_weight, torch.Tensor):
                t = _factories.from_torch(_weight.detach().to(w.dtype), w.mesh, pl, graph=w.graph)
            elif isinstance(_weight, _C.TensorBase):
                t = _weight.redistribute(w.mesh, pl)
            else:
                raise TypeError(f"Embedding(_weight=...): expected a torch or dtorch tensor, got "
                                f"{type(_weight).__name__}")
            self.weight = Parameter(t)
            return
        _check_sizes(shape)
        t = _factories.randn(*shape, dtype=w.dtype, device_mesh=w.mesh, placements=pl, graph=w.graph)
        if padding_idx is not None:
            # torch zeroes the padding row at initialisation.
            keep = torch.ones(num_embeddings, 1, dtype=w.dtype)
            keep[padding_idx] = 0
            t = t * _factories.from_torch(keep, w.mesh, [Replicate()] * w.mesh.ndim, graph=w.graph)
        self.weight = Parameter(t)

    @classmethod
    def from_pretrained(cls, embeddings: Any, freeze: bool = True, padding_idx: Optional[int] = None,
                        max_norm: Optional[float] = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        sparse: bool = False, **kwargs: Any) -> "Embedding":
        """An ``Embedding`` holding ``embeddings`` (2-D torch or dtorch tensor), as torch's.

        >>> emb = nn.Embedding.from_pretrained(torch.randn(10, 4), device_mesh=mesh)
        """
        if embeddings.dim() != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        if "dtype" not in kwargs:
            kwargs["dtype"] = embeddings.dtype
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse, _weight=embeddings,
                   _freeze=freeze, **kwargs)

    def forward(self, input: Any) -> Any:
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq:
            s += ", scale_grad_by_freq=True"
        if self.sparse:
            s += ", sparse=True"
        return s


class EmbeddingWithReplicateOutput(Embedding):
    """``Embedding`` whose Shard(-1) output is all-gathered to Replicate on ``tp_dim``.

    >>> nn.EmbeddingWithReplicateOutput(1000, 64, device_mesh=mesh)(ids).placements
    [Replicate()]
    """

    def redistribute_output(self, output: Any) -> Any:
        return _with_on(output, self._tp, Replicate())
