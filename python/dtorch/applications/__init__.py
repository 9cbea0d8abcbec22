"""``dtorch.applications``: whole models built on ``dtorch.nn`` that read Hugging Face folders.

Each application is a subpackage, imported on demand (``import dtorch.applications.sd3``), so that
``import dtorch`` stays light:

- ``llama``: a ``LlamaForCausalLM``-compatible language model with ``generate()``;
- ``sd3``: Stable Diffusion 3 (the MMDiT transformer, the VAE decoder, the CLIP and T5 text
  encoders, the flow-matching scheduler and ``StableDiffusion3Pipeline``).

>>> from dtorch.applications.sd3 import StableDiffusion3Pipeline
>>> pipe = StableDiffusion3Pipeline.from_pretrained("stable-diffusion-3-medium-diffusers", device_mesh=mesh)
"""

__all__ = ["llama", "sd3"]
