"""Whole models built on ``dtorch.nn``, loaded from Hugging Face folders.

``dtorch.applications.llama``: ``LlamaForCausalLM`` (a ``transformers.LlamaForCausalLM``-compatible
decoder on a mesh with the dims ``dp, tp, pp, ulysess_cp, ring_cp``, any of them absent or of size 1).

>>> from dtorch.applications.llama import LlamaForCausalLM
>>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("tp", "pp"))
>>> model = LlamaForCausalLM.from_pretrained("/path/to/hf-llama", device_mesh=mesh)
>>> ids = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=8)
"""

__all__ = ["llama"]
