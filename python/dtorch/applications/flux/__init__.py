"""``dtorch.applications.flux``: Flux.1 inference on device meshes, read from a diffusers folder.

- ``FluxTransformer2DModel``: double- and single-stream blocks with the rotary embedding of the
  text and image ids, the guidance embedding of FLUX.1-dev (none for schnell), on the whole mesh
  (``dp`` the batch, ``tp`` the heads and MLPs, ``ulysess_cp``/``ring_cp`` the tokens);
- ``FluxPipeline``: ``from_pretrained(path, device_mesh=mesh)``, ``__call__`` and ``async_call``,
  with SD3's components for the rest (the VAE decoder with Flux's scaling and shift, the CLIP and T5
  text encoders, the flow-matching scheduler with the dynamic shift).

>>> from dtorch.applications.flux import FluxPipeline
>>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
>>> pipe = FluxPipeline.from_pretrained("FLUX.1-schnell", device_mesh=mesh)
>>> image = pipe("a photo of a cat", num_inference_steps=4, guidance_scale=0.0, seed=0).images[0]
"""

from .pipeline import FluxPipeline
from .transformer import FluxTransformer2DModel

__all__ = ["FluxTransformer2DModel", "FluxPipeline"]
