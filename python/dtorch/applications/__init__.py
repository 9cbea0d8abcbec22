"""``dtorch.applications``: whole models built on ``dtorch.nn`` that read Hugging Face folders.

Each application is a subpackage, imported on demand (``import dtorch.applications.sd3``), so that
``import dtorch`` stays light:

- ``llama``: ``LlamaForCausalLM``, a ``transformers.LlamaForCausalLM``-compatible decoder with
  ``generate()`` on a mesh with the dims ``dp, tp, pp, ulysess_cp, ring_cp`` (any of them absent or of
  size 1), and its variants ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM``, ``MistralForCausalLM``;
- ``AutoModelForCausalLM``: ``from_pretrained(folder, ...)`` picks one of those by the folder's
  ``model_type`` (imported on first use);
- ``sd3``: Stable Diffusion 3 (the MMDiT transformer, the VAE decoder, the CLIP and T5 text
  encoders, the flow-matching scheduler and ``StableDiffusion3Pipeline``);
- ``flux``: Flux.1 (``FluxTransformer2DModel`` and ``FluxPipeline``, on SD3's components).

Both diffusion pipelines have First-Block-Cache and TeaCache (``dtorch.ExecuteConfig``).

>>> from dtorch.applications import AutoModelForCausalLM
>>> model = AutoModelForCausalLM.from_pretrained("/path/to/hf-qwen3", device_mesh=mesh)

>>> from dtorch.applications.llama import LlamaForCausalLM
>>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("tp", "pp"))
>>> model = LlamaForCausalLM.from_pretrained("/path/to/hf-llama", device_mesh=mesh)
>>> ids = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=8)

>>> from dtorch.applications.sd3 import StableDiffusion3Pipeline
>>> pipe = StableDiffusion3Pipeline.from_pretrained("stable-diffusion-3-medium-diffusers", device_mesh=mesh)
"""

__all__ = ["llama", "sd3", "flux", "AutoModelForCausalLM"]


def __getattr__(name: str):
    if name == "AutoModelForCausalLM":  # on first use, so that importing the package stays light
        from .auto import AutoModelForCausalLM

        return AutoModelForCausalLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
