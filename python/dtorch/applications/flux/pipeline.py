"""``FluxPipeline``: text to image with Flux.1 on a device mesh, as diffusers' ``FluxPipeline``.

Placement (SD3's): the transformer on the whole mesh, the text encoders (CLIP-L's pooled vector, T5's
states) on ``mesh.unbind(["ulysess_cp", "ring_cp"])[0]``, the VAE on the mesh's first device. The
latents are packed 2x2 patches (N, H/2 * W/2, 4C); the image and text position ids are host tables.
True CFG (``true_cfg_scale > 1`` with a negative prompt) runs the two transformer calls diffusers
runs, or one call of both halves split over ``dp`` when the mesh has one (xDiT's CFG parallel).

>>> pipe = FluxPipeline.from_pretrained("FLUX.1-schnell", device_mesh=mesh, torch_dtype=torch.bfloat16)
>>> image = pipe("a cat", num_inference_steps=4, guidance_scale=0.0, seed=0).images[0]
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence, Union

import numpy as np
import torch

from ... import _factories, _ops_views
from ...distributed_spec import DeviceMesh
from .._diffusion import DiffusionPipeline, PipelineOutput, calculate_shift, check_output_type, check_prompts
from .._cache import ExecuteConfig, StepCache, cache_stats
from .._cache import execute_config as execute_config_of
from .._diffusion import generator_for
from ..sd3._common import DP, batch_placements, mesh_dim, placements, read_json, replicated, to_mesh
from ..sd3.pipeline import StableDiffusion3Pipeline
from ..sd3.scheduler import FlowMatchEulerDiscreteScheduler
from ..sd3.text_encoders import CLIPTextModel, T5EncoderModel
from ..sd3.vae import AutoencoderKL
from .transformer import FluxTransformer2DModel

__all__ = ["FluxPipeline", "FluxPipelineOutput"]

FluxPipelineOutput = PipelineOutput
_COMPONENTS = ("transformer", "scheduler", "vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2")


def pack_latents(x: Any) -> Any:
    """(N, C, H, W) -> (N, H/2 * W/2, 4C): each 2x2 patch one token (diffusers' ``_pack_latents``)."""
    n, c, h, w = x.shape
    x = x.view(n, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(n, (h // 2) * (w // 2), c * 4)


def unpack_latents(x: Any, h: int, w: int) -> Any:
    """The inverse of ``pack_latents`` for a latent image of h x w."""
    n, _, c = x.shape
    x = x.view(n, h // 2, w // 2, c // 4, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(n, c // 4, h, w)


def image_ids(h: int, w: int, dtype: torch.dtype) -> torch.Tensor:
    """The (0, row, column) ids of the h x w packed tokens, row-major (host values)."""
    ids = torch.zeros(h, w, 3)
    ids[..., 1] = ids[..., 1] + torch.arange(h)[:, None]
    ids[..., 2] = ids[..., 2] + torch.arange(w)[None, :]
    return ids.reshape(h * w, 3).to(dtype)


class FluxPipeline(DiffusionPipeline):
    """diffusers' ``FluxPipeline`` on dtorch components (see the module). ``__call__`` takes
    diffusers' arguments plus ``seed`` and ``progress`` (a tqdm bar that follows the devices)."""

    def __init__(self, transformer: FluxTransformer2DModel, scheduler: FlowMatchEulerDiscreteScheduler,
                 vae: AutoencoderKL, text_encoder: CLIPTextModel, text_encoder_2: T5EncoderModel, tokenizer: Any,
                 tokenizer_2: Any) -> None:
        self.transformer, self.scheduler, self.vae = transformer, scheduler, vae
        self.text_encoder, self.text_encoder_2 = text_encoder, text_encoder_2
        self.tokenizer, self.tokenizer_2 = tokenizer, tokenizer_2
        self.vae_scale_factor = vae.vae_scale_factor
        self.tokenizer_max_length = getattr(tokenizer, "model_max_length", 77)
        self.default_sample_size = 128
        self.last_cache_stats: Optional[dict] = None

    @classmethod
    def from_pretrained(cls, path: str, *, device_mesh: Optional[DeviceMesh] = None,
                        torch_dtype: Optional[torch.dtype] = None) -> "FluxPipeline":
        """Loads every component of a diffusers Flux folder onto ``device_mesh`` (default: one CPU
        device). Every component folder is checked before anything is read.

        >>> pipe = FluxPipeline.from_pretrained(path, device_mesh=mesh, torch_dtype=torch.bfloat16)
        """
        import transformers

        if device_mesh is None:
            device_mesh = DeviceMesh("cpu", [0])
        index_path = os.path.join(path, "model_index.json")
        if not os.path.exists(index_path):
            raise FileNotFoundError(f"{path!r} is not a diffusers folder (no model_index.json)")
        index = read_json(index_path)
        if index.get("_class_name") != "FluxPipeline":
            raise ValueError(f"{path!r} holds a {index.get('_class_name')!r}, not a FluxPipeline")
        for name in _COMPONENTS:
            entry = index.get(name)
            if not entry or entry[0] is None or not os.path.isdir(os.path.join(path, name)):
                raise FileNotFoundError(f"the Flux folder {path!r} has no {name} (model_index.json and a {name}/ "
                                        "folder are needed)")
        tmesh, text_mesh, vae_mesh = StableDiffusion3Pipeline.meshes(device_mesh)

        def sub(name: str) -> str:
            return os.path.join(path, name)

        def tokenizer(name: str) -> Any:
            return getattr(transformers, index[name][1]).from_pretrained(sub(name))

        return cls(
            transformer=FluxTransformer2DModel.from_pretrained(sub("transformer"), device_mesh=tmesh,
                                                               torch_dtype=torch_dtype),
            scheduler=FlowMatchEulerDiscreteScheduler.from_pretrained(sub("scheduler")),
            vae=AutoencoderKL.from_pretrained(sub("vae"), device_mesh=vae_mesh, torch_dtype=torch_dtype),
            text_encoder=CLIPTextModel.from_pretrained(sub("text_encoder"), device_mesh=text_mesh,
                                                       torch_dtype=torch_dtype),
            text_encoder_2=T5EncoderModel.from_pretrained(sub("text_encoder_2"), device_mesh=text_mesh,
                                                          torch_dtype=torch_dtype),
            tokenizer=tokenizer("tokenizer"), tokenizer_2=tokenizer("tokenizer_2"))

    # ------------------------------------------------------------ prompts

    _repeat = StableDiffusion3Pipeline._repeat
    _given = StableDiffusion3Pipeline._given

    def encode_prompt(self, prompt: Union[str, List[str], None], prompt_2: Any = None, num_images_per_prompt: int = 1,
                      prompt_embeds: Any = None, pooled_prompt_embeds: Any = None, max_sequence_length: int = 512):
        """(prompt_embeds, pooled_prompt_embeds, text_ids) as diffusers': T5's states of ``prompt_2``
        (default ``prompt``), CLIP's pooled vector of ``prompt`` (dtorch tensors on the text mesh), and
        the text ids (zeros, host). Embeddings given are used as given.

        >>> embeds, pooled, text_ids = pipe.encode_prompt("a cat")
        """
        if prompt_embeds is None:
            prompt = [prompt] if isinstance(prompt, str) else list(prompt)
            prompt_2 = prompt_2 or prompt
            prompt_2 = [prompt_2] if isinstance(prompt_2, str) else list(prompt_2)
            ids = self.tokenizer(prompt, padding="max_length", max_length=self.tokenizer_max_length, truncation=True,
                                 return_tensors="pt").input_ids
            pooled, _ = self.text_encoder(ids)
            pooled = self._repeat(pooled.to(self.text_encoder.dtype), num_images_per_prompt)
            ids = self.tokenizer_2(prompt_2, padding="max_length", max_length=max_sequence_length, truncation=True,
                                   return_tensors="pt").input_ids
            embeds = self._repeat(self.text_encoder_2(ids).to(self.text_encoder_2.dtype), num_images_per_prompt)
        else:
            embeds, pooled = self._given(prompt_embeds), self._given(pooled_prompt_embeds)
        text_ids = torch.zeros(embeds.shape[1], 3).to(dtype=self.text_encoder.dtype)
        return embeds, pooled, text_ids

    # ------------------------------------------------------------ generation

    def _check(self, height: int, width: int, max_sequence_length: int, num_inference_steps: int) -> None:
        multiple = self.vae_scale_factor * 2
        if height % multiple != 0 or width % multiple != 0:
            raise ValueError(f"`height` and `width` have to be divisible by {multiple} but are {height} and {width}.")
        if max_sequence_length > 512:
            raise ValueError(f"`max_sequence_length` cannot be greater than 512 but is {max_sequence_length}")
        if num_inference_steps < 1:
            raise ValueError(f"num_inference_steps must be at least 1, got {num_inference_steps}")

    def _latents(self, b: int, h: int, w: int, dtype: torch.dtype, generator: Any, latents: Any) -> Any:
        mesh = self.transformer.mesh
        rep = placements(mesh)
        if latents is None:
            c = self.transformer.config["in_channels"] // 4
            return pack_latents(_factories.randn(b, c, h, w, dtype=dtype, device_mesh=mesh, placements=rep,
                                                 generator=generator))
        if isinstance(latents, torch.Tensor):
            return _factories.from_torch(latents.to(dtype), mesh, rep)
        return to_mesh(latents.to(dtype), mesh, rep)

    def _velocity(self, latents: Any, t: float, conds: Sequence[Any], guidance: Any, img_ids: torch.Tensor,
                  true_cfg_scale: float, caches: Sequence[Optional[StepCache]]) -> Any:
        """The guided velocity at timestep ``t``. ``conds`` is [(embeds, pooled, text_ids)] (one
        entry) or [negative, positive] (true CFG): one call per entry, or one call of both split over
        ``dp`` (the CFG parallel) when the mesh has a dp dim that the batch alone leaves idle."""
        mesh = self.transformer.mesh
        batch = batch_placements(mesh)
        n = latents.shape[0]
        pair = len(conds) == 2 and mesh_dim(mesh, DP) is not None

        def call(x: Any, embeds: Any, pooled: Any, text_ids: torch.Tensor, rows: int, cache: Any) -> Any:
            tt = _factories.full((rows,), t, dtype=torch.float32, device_mesh=mesh, placements=batch)
            tt = tt.to(x.dtype) / 1000
            g = None
            if guidance is not None:
                g = _factories.full((rows,), guidance, dtype=torch.float32, device_mesh=mesh, placements=batch)
            return replicated(self.transformer(x.redistribute(placements=batch), embeds, pooled, tt, img_ids,
                                               text_ids, guidance=g, cache=cache))

        if pair:
            (ne, npool, nids), (pe, ppool, _) = conds
            both = call(_ops_views.cat([latents, latents], dim=0), _ops_views.cat([ne, pe], dim=0),
                        _ops_views.cat([npool, ppool], dim=0), nids, 2 * n, caches[0])
            neg, pos = both.chunk(2)
        else:
            pos = call(latents, *conds[-1], n, caches[0])
            if len(conds) == 1:
                return pos
            neg = call(latents, *conds[0], n, caches[-1])
        return neg + true_cfg_scale * (pos - neg)

    def _record(self, prompt: Any = None, prompt_2: Any = None, negative_prompt: Any = None,
                negative_prompt_2: Any = None, true_cfg_scale: float = 1.0, height: Optional[int] = None,
                width: Optional[int] = None, num_inference_steps: int = 28, sigmas: Optional[List[float]] = None,
                guidance_scale: float = 3.5, num_images_per_prompt: int = 1,
                generator: Optional[torch.Generator] = None, seed: Optional[int] = None, latents: Any = None,
                prompt_embeds: Any = None, pooled_prompt_embeds: Any = None, negative_prompt_embeds: Any = None,
                negative_pooled_prompt_embeds: Any = None, output_type: str = "pil", max_sequence_length: int = 512,
                execute_config: Optional[ExecuteConfig] = None, first_block_cache_threshold: Optional[float] = None,
                teacache_threshold: Optional[float] = None, step_done: Any = None):
        """Records the whole generation; returns the dtorch result (image or packed latents)."""
        check_output_type(output_type)
        config = execute_config_of(execute_config, first_block_cache_threshold, teacache_threshold)
        height = height or self.default_sample_size * self.vae_scale_factor
        width = width or self.default_sample_size * self.vae_scale_factor
        self._check(height, width, max_sequence_length, num_inference_steps)
        check_prompts(dict(prompt=prompt, prompt_2=prompt_2),
                      dict(negative_prompt=negative_prompt, negative_prompt_2=negative_prompt_2), prompt_embeds,
                      pooled_prompt_embeds, negative_prompt_embeds, negative_pooled_prompt_embeds)
        generator = generator_for(generator, seed)
        if prompt is not None:
            b = 1 if isinstance(prompt, str) else len(prompt)
        else:
            b = prompt_embeds.shape[0]
        has_neg = negative_prompt is not None or negative_prompt_embeds is not None
        true_cfg = true_cfg_scale > 1 and has_neg
        mesh = self.transformer.mesh
        batch = batch_placements(mesh)
        embeds, pooled, text_ids = self.encode_prompt(prompt, prompt_2, num_images_per_prompt, prompt_embeds,
                                                      pooled_prompt_embeds, max_sequence_length)
        conds = [(to_mesh(embeds, mesh, batch), to_mesh(pooled, mesh, batch), text_ids)]
        if true_cfg:
            ne, npool, nids = self.encode_prompt(negative_prompt, negative_prompt_2, num_images_per_prompt,
                                                 negative_prompt_embeds, negative_pooled_prompt_embeds,
                                                 max_sequence_length)
            conds.insert(0, (to_mesh(ne, mesh, batch), to_mesh(npool, mesh, batch), nids))
        h = 2 * (int(height) // (self.vae_scale_factor * 2))
        w = 2 * (int(width) // (self.vae_scale_factor * 2))
        latents = self._latents(b * num_images_per_prompt, h, w, embeds.dtype, generator, latents)
        img_ids = image_ids(h // 2, w // 2, embeds.dtype)
        if sigmas is None:
            sigmas = np.linspace(1.0, 1 / num_inference_steps, num_inference_steps)
        cfg = self.scheduler.config
        mu = calculate_shift(latents.shape[1], cfg.get("base_image_seq_len", 256), cfg.get("max_image_seq_len", 4096),
                             cfg.get("base_shift", 0.5), cfg.get("max_shift", 1.15))
        self.scheduler.set_timesteps(sigmas=sigmas, mu=mu)
        self.scheduler.set_begin_index(0)
        guidance = float(guidance_scale) if self.transformer.config["guidance_embeds"] else None
        timesteps = self.scheduler.timesteps
        calls = 1 if len(conds) == 1 or mesh_dim(mesh, DP) is not None else 2
        if config is not None and not config.enabled:
            config = None  # compile_fused_ops alone: Flux's transformer has no fused sites wired yet
        caches = [None] if config is None else [StepCache(config, len(timesteps)) for _ in range(calls)]
        self.last_cache_stats = None if config is None else cache_stats(caches)
        for i, t in enumerate(timesteps):
            for cache in caches:
                if cache is not None:
                    cache.begin_step(i)
            v = self._velocity(latents, float(t), conds, guidance, img_ids, true_cfg_scale, caches)
            latents = self.scheduler.step(v, t, latents)
            if step_done is not None:
                step_done(i, latents)
        if config is not None:
            self.last_cache_stats = cache_stats(caches)
        if output_type == "latent":
            return latents
        vae = self.vae
        z = to_mesh(unpack_latents(latents, h, w), vae.mesh, placements(vae.mesh))
        z = z / vae.config["scaling_factor"] + vae.config["shift_factor"]
        return self._postprocess(vae.decode(z), output_type)
