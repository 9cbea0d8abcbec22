"""``dtorch.applications.sd3``: Stable Diffusion 3 inference on device meshes, read from a diffusers folder.

The components follow diffusers (keys, configs, op order) and the spec ``specs/sd3.md``:

- ``SD3Transformer2DModel``: the MMDiT on the whole mesh (``dp`` splits the CFG batch, ``tp`` the
  heads and MLP, ``ulysess_cp``/``ring_cp`` go to the attention's ``SdpaOption``);
- ``FlowMatchEulerDiscreteScheduler``: the flow-matching Euler steps with SD3's shift;
- ``AutoencoderKL``: the VAE decoder, on the mesh's first device;
- ``CLIPTextModelWithProjection``, ``T5EncoderModel``: the text encoders, on
  ``mesh.unbind(["ulysess_cp", "ring_cp"])[0]``;
- ``StableDiffusion3Pipeline``: ``from_pretrained(path, device_mesh=mesh)``, ``__call__`` and ``async_call``.

>>> from dtorch.applications.sd3 import StableDiffusion3Pipeline
>>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
>>> pipe = StableDiffusion3Pipeline.from_pretrained("sd3-medium", device_mesh=mesh)
>>> image = pipe("a photo of a cat", num_inference_steps=28, generator=torch.Generator().manual_seed(0)).images[0]
"""

from .pipeline import PipelineFuture, StableDiffusion3Pipeline, StableDiffusion3PipelineOutput
from .scheduler import FlowMatchEulerDiscreteScheduler
from .text_encoders import CLIPTextModelWithProjection, T5EncoderModel
from .transformer import SD3Transformer2DModel
from .vae import AutoencoderKL

__all__ = ["SD3Transformer2DModel", "FlowMatchEulerDiscreteScheduler", "AutoencoderKL", "CLIPTextModelWithProjection",
           "T5EncoderModel", "StableDiffusion3Pipeline", "StableDiffusion3PipelineOutput", "PipelineFuture"]
