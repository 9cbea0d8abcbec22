"""The Llama family (``transformers.LlamaForCausalLM``-compatible, and Qwen2, Qwen3, Mistral) on distributed tensors.

The mesh dims are found by name: ``dp`` shards the batch, ``tp`` the heads and the MLP
(Megatron-style: column-parallel q/k/v/gate/up, row-parallel o/down, the Partial all-reduced; kv
heads replicated on the tp ranks that read them when there are fewer than tp), ``pp`` splits the
layers into stages (``dtorch.assign_layers_to_stages``, stage meshes from ``mesh.unbind("pp")``),
``ulysess_cp`` and ``ring_cp`` shard the sequence for the context-parallel attention. Any of them
may be absent or of size 1. ``dtorch.applications.AutoModelForCausalLM`` picks the class of a
folder by its ``model_type``.

>>> mesh = dtorch.init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "tp", "pp"))
>>> model = LlamaForCausalLM.from_pretrained(folder, device_mesh=mesh)
>>> logits = model(torch.tensor([[1, 2, 3], [4, 5, 6]]))            # dtorch.Tensor [2, 3, vocab]
>>> out = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=16)  # torch.LongTensor [1, 19]
"""

from .config import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config
from .model import LlamaForCausalLM, LlamaModel, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM

__all__ = ["LlamaConfig", "LlamaForCausalLM", "LlamaModel", "Qwen2Config", "Qwen2ForCausalLM", "Qwen3Config",
           "Qwen3ForCausalLM", "MistralConfig", "MistralForCausalLM"]
