"""``StableDiffusion3Pipeline``: text to image with SD3 on a device mesh, as diffusers' pipeline.

Placement of the components (the original DTorch's): the transformer on the whole mesh (``dp``
splits the CFG batch [negative; positive], ``tp`` the heads and MLP, the context-parallel dims
go to its attention), the text encoders on ``mesh.unbind(["ulysess_cp", "ring_cp"])[0]``, the VAE
on the mesh's first device. The whole call is recorded without waiting (the schedule is host
metadata and the token ids come from the host tokenizers), so ``async_call`` returns at once and
only reading the image waits.

>>> pipe = StableDiffusion3Pipeline.from_pretrained("sd3-medium", device_mesh=mesh)
>>> image = pipe("a cat", num_inference_steps=28, guidance_scale=7.0, seed=0).images[0]   # a PIL image
>>> pending = pipe.async_call("a dog", seed=1)   # returns at once
>>> image = pending.get().images[0]
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence, Union

import torch

from ... import _factories, _ops_views
from ...distributed_spec import DeviceMesh
from ...nn import functional as F
from .._cache import ExecuteConfig, StepCache, cache_stats
from .._cache import execute_config as execute_config_of
from .._diffusion import (DiffusionPipeline, PipelineFuture, PipelineOutput, calculate_shift, check_output_type,
                          check_prompts, generator_for)
from ._common import batch_placements, one_device_mesh, placements, read_json, replicated, to_mesh
from .scheduler import FlowMatchEulerDiscreteScheduler
from .text_encoders import CLIPTextModelWithProjection, T5EncoderModel
from .transformer import SD3Transformer2DModel
from .vae import AutoencoderKL

__all__ = ["StableDiffusion3Pipeline", "StableDiffusion3PipelineOutput", "PipelineFuture"]

CP_DIMS = ["ulysess_cp", "ring_cp"]


# The original names of the shared output and future types.
StableDiffusion3PipelineOutput = PipelineOutput


class StableDiffusion3Pipeline(DiffusionPipeline):
    """diffusers' ``StableDiffusion3Pipeline`` on dtorch components (see the module).

    ``from_pretrained(path, device_mesh=mesh)`` reads ``model_index.json`` and each component's
    folder; the tokenizers are transformers' (host-side). ``__call__`` takes diffusers' arguments
    plus ``seed`` (a ``torch.Generator().manual_seed(seed)``) and ``progress`` (a tqdm bar that
    follows the steps as they finish).
    """

    def __init__(self, transformer: SD3Transformer2DModel, scheduler: FlowMatchEulerDiscreteScheduler,
                 vae: AutoencoderKL, text_encoder: CLIPTextModelWithProjection,
                 text_encoder_2: CLIPTextModelWithProjection, text_encoder_3: Optional[T5EncoderModel],
                 tokenizer: Any, tokenizer_2: Any, tokenizer_3: Any) -> None:
        self.transformer, self.scheduler, self.vae = transformer, scheduler, vae
        self.text_encoder, self.text_encoder_2, self.text_encoder_3 = text_encoder, text_encoder_2, text_encoder_3
        self.tokenizer, self.tokenizer_2, self.tokenizer_3 = tokenizer, tokenizer_2, tokenizer_3
        self.vae_scale_factor = vae.vae_scale_factor
        self.tokenizer_max_length = getattr(tokenizer, "model_max_length", 77)
        self.default_sample_size = transformer.config["sample_size"]
        self.patch_size = transformer.config["patch_size"]
        self.last_cache_stats: Optional[dict] = None

    # ------------------------------------------------------------ loading

    @staticmethod
    def meshes(device_mesh: DeviceMesh):
        """(transformer mesh, text mesh, VAE mesh) for ``device_mesh``."""
        return device_mesh, device_mesh.unbind(CP_DIMS)[0], one_device_mesh(device_mesh)

    @classmethod
    def from_pretrained(cls, path: str, *, device_mesh: Optional[DeviceMesh] = None,
                        torch_dtype: Optional[torch.dtype] = None) -> "StableDiffusion3Pipeline":
        """Loads every component of a diffusers SD3 folder onto ``device_mesh`` (default: one CPU device).

        >>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        >>> pipe = StableDiffusion3Pipeline.from_pretrained(path, device_mesh=mesh, torch_dtype=torch.bfloat16)
        """
        import transformers

        if device_mesh is None:
            device_mesh = DeviceMesh("cpu", [0])
        index = read_json(os.path.join(path, "model_index.json"))
        tmesh, text_mesh, vae_mesh = cls.meshes(device_mesh)

        def sub(name: str) -> Optional[str]:
            entry = index.get(name)
            if not entry or entry[0] is None or entry[1] is None:
                return None
            return os.path.join(path, name)

        def tokenizer(name: str) -> Any:
            where = sub(name)
            return None if where is None else getattr(transformers, index[name][1]).from_pretrained(where)

        te3 = sub("text_encoder_3")
        return cls(
            transformer=SD3Transformer2DModel.from_pretrained(sub("transformer"), device_mesh=tmesh,
                                                              torch_dtype=torch_dtype),
            scheduler=FlowMatchEulerDiscreteScheduler.from_pretrained(sub("scheduler")),
            vae=AutoencoderKL.from_pretrained(sub("vae"), device_mesh=vae_mesh, torch_dtype=torch_dtype),
            text_encoder=CLIPTextModelWithProjection.from_pretrained(sub("text_encoder"), device_mesh=text_mesh,
                                                                     torch_dtype=torch_dtype),
            text_encoder_2=CLIPTextModelWithProjection.from_pretrained(sub("text_encoder_2"), device_mesh=text_mesh,
                                                                       torch_dtype=torch_dtype),
            text_encoder_3=None if te3 is None else T5EncoderModel.from_pretrained(te3, device_mesh=text_mesh,
                                                                                    torch_dtype=torch_dtype),
            tokenizer=tokenizer("tokenizer"), tokenizer_2=tokenizer("tokenizer_2"), tokenizer_3=tokenizer("tokenizer_3"))

    # ------------------------------------------------------------ prompts

    def _repeat(self, t: Any, n: int) -> Any:
        if n == 1:
            return t
        b = t.shape[0]
        if t.ndim == 3:
            return t.repeat(1, n, 1).view(b * n, t.shape[1], -1)
        return t.repeat(1, n).view(b * n, -1)

    def _clip(self, prompt: List[str], index: int, n: int, clip_skip: Optional[int]):
        tok = (self.tokenizer, self.tokenizer_2)[index]
        enc = (self.text_encoder, self.text_encoder_2)[index]
        ids = tok(prompt, padding="max_length", max_length=self.tokenizer_max_length, truncation=True,
                  return_tensors="pt").input_ids
        pooled, hidden = enc(ids)
        seq = hidden[-2] if clip_skip is None else hidden[-(clip_skip + 2)]
        seq = seq.to(self.text_encoder.dtype)
        return self._repeat(seq, n), self._repeat(pooled, n)

    def _t5(self, prompt: List[str], n: int, max_sequence_length: int, dtype: torch.dtype):
        text_mesh = self.text_encoder.mesh
        if self.text_encoder_3 is None:
            return _factories.zeros((len(prompt) * n, max_sequence_length, self.transformer.config["joint_attention_dim"]),
                                    dtype=dtype, device_mesh=text_mesh, placements=batch_placements(text_mesh))
        ids = self.tokenizer_3(prompt, padding="max_length", max_length=max_sequence_length, truncation=True,
                               add_special_tokens=True, return_tensors="pt").input_ids
        seq = self.text_encoder_3(ids).to(self.text_encoder_3.dtype)
        return self._repeat(seq, n)

    def _encode(self, prompt: List[str], prompt_2: List[str], prompt_3: List[str], n: int, clip_skip: Optional[int],
                max_sequence_length: int):
        l_seq, l_pooled = self._clip(prompt, 0, n, clip_skip)
        g_seq, g_pooled = self._clip(prompt_2, 1, n, clip_skip)
        clip_seq = _ops_views.cat([l_seq, g_seq], dim=-1)
        t5 = self._t5(prompt_3, n, max_sequence_length, self.text_encoder.dtype)
        width = t5.shape[-1] - clip_seq.shape[-1]
        # diffusers pads the CLIP channels to T5's width; a negative width truncates (tiny configs).
        clip_seq = F.pad(clip_seq, (0, width)) if width > 0 else clip_seq[..., :t5.shape[-1]] if width < 0 else clip_seq
        return _ops_views.cat([clip_seq, t5], dim=-2), _ops_views.cat([l_pooled, g_pooled], dim=-1)

    def _given(self, t: Any) -> Any:
        """A caller's embedding (torch or dtorch) on the text mesh, split over ``dp`` like the encoders' output."""
        mesh = self.text_encoder.mesh
        if isinstance(t, torch.Tensor):
            return _factories.from_torch(t, mesh, batch_placements(mesh))
        if not hasattr(t, "device_mesh"):
            raise TypeError(f"expected a torch or dtorch tensor of embeddings, got {type(t).__name__}")
        return to_mesh(t, mesh, batch_placements(mesh))

    def encode_prompt(self, prompt: Union[str, List[str], None], prompt_2: Any = None, prompt_3: Any = None,
                      num_images_per_prompt: int = 1, do_classifier_free_guidance: bool = True,
                      negative_prompt: Any = None, negative_prompt_2: Any = None, negative_prompt_3: Any = None,
                      clip_skip: Optional[int] = None, max_sequence_length: int = 256, *, prompt_embeds: Any = None,
                      negative_prompt_embeds: Any = None, pooled_prompt_embeds: Any = None,
                      negative_pooled_prompt_embeds: Any = None):
        """(prompt_embeds, negative_prompt_embeds, pooled, negative_pooled) on the text mesh, as diffusers':
        embeddings given (torch or dtorch tensors) are used as given, the others encoded.

        >>> embeds, neg, pooled, neg_pooled = pipe.encode_prompt("a cat", negative_prompt="blurry")
        >>> image = pipe(prompt_embeds=embeds, pooled_prompt_embeds=pooled, negative_prompt_embeds=neg,
        ...              negative_pooled_prompt_embeds=neg_pooled, seed=0).images[0]
        """
        prompt = [prompt] if isinstance(prompt, str) else prompt
        b = len(prompt) if prompt is not None else prompt_embeds.shape[0]

        def listed(p: Any, default: List[str]) -> List[str]:
            p = p or default
            return [p] if isinstance(p, str) else list(p)

        if prompt_embeds is None:
            embeds, pooled = self._encode(list(prompt), listed(prompt_2, prompt), listed(prompt_3, prompt),
                                          num_images_per_prompt, clip_skip, max_sequence_length)
        else:
            embeds, pooled = self._given(prompt_embeds), self._given(pooled_prompt_embeds)
        if not do_classifier_free_guidance:
            return embeds, None, pooled, None
        if negative_prompt_embeds is not None:
            return embeds, self._given(negative_prompt_embeds), pooled, self._given(negative_pooled_prompt_embeds)
        negative_prompt = negative_prompt or ""
        neg = b * [negative_prompt] if isinstance(negative_prompt, str) else list(negative_prompt)
        if len(neg) != b:
            raise ValueError(f"`negative_prompt`: {negative_prompt} has batch size {len(neg)}, but `prompt`: {prompt} "
                             f"has batch size {b}. Please make sure that passed `negative_prompt` matches the batch "
                             "size of `prompt`.")

        def neg_listed(p: Any) -> List[str]:
            p = p or negative_prompt
            return b * [p] if isinstance(p, str) else list(p)

        # Negatives always use the penultimate CLIP layer (diffusers: clip_skip=None).
        n_embeds, n_pooled = self._encode(neg, neg_listed(negative_prompt_2), neg_listed(negative_prompt_3),
                                          num_images_per_prompt, None, max_sequence_length)
        return embeds, n_embeds, pooled, n_pooled

    # ------------------------------------------------------------ generation

    def _record(self, prompt: Any = None, prompt_2: Any = None, prompt_3: Any = None, height: Optional[int] = None,
                width: Optional[int] = None, num_inference_steps: int = 28, sigmas: Optional[List[float]] = None,
                guidance_scale: float = 7.0, negative_prompt: Any = None, negative_prompt_2: Any = None,
                negative_prompt_3: Any = None, num_images_per_prompt: int = 1,
                generator: Optional[torch.Generator] = None, seed: Optional[int] = None, latents: Any = None,
                output_type: str = "pil", clip_skip: Optional[int] = None, max_sequence_length: int = 256,
                mu: Optional[float] = None, skip_guidance_layers: Optional[Sequence[int]] = None,
                skip_layer_guidance_scale: float = 2.8, skip_layer_guidance_start: float = 0.01,
                skip_layer_guidance_stop: float = 0.2, prompt_embeds: Any = None, negative_prompt_embeds: Any = None,
                pooled_prompt_embeds: Any = None, negative_pooled_prompt_embeds: Any = None,
                execute_config: Optional[ExecuteConfig] = None, first_block_cache_threshold: Optional[float] = None,
                teacache_threshold: Optional[float] = None, step_done: Any = None):
        """Records the whole generation; returns the dtorch result (image or latents)."""
        check_output_type(output_type)
        config = execute_config_of(execute_config, first_block_cache_threshold, teacache_threshold)
        check_prompts(dict(prompt=prompt, prompt_2=prompt_2, prompt_3=prompt_3),
                      dict(negative_prompt=negative_prompt, negative_prompt_2=negative_prompt_2,
                           negative_prompt_3=negative_prompt_3), prompt_embeds, pooled_prompt_embeds,
                      negative_prompt_embeds, negative_pooled_prompt_embeds)
        height = height or self.default_sample_size * self.vae_scale_factor
        width = width or self.default_sample_size * self.vae_scale_factor
        multiple = self.vae_scale_factor * self.patch_size
        if height % multiple != 0 or width % multiple != 0:
            raise ValueError(f"`height` and `width` have to be divisible by {multiple} but are {height} and {width}.")
        if max_sequence_length > 512:
            raise ValueError(f"`max_sequence_length` cannot be greater than 512 but is {max_sequence_length}")
        generator = generator_for(generator, seed)
        cfg = guidance_scale > 1
        embeds, n_embeds, pooled, n_pooled = self.encode_prompt(
            prompt, prompt_2, prompt_3, num_images_per_prompt, cfg, negative_prompt, negative_prompt_2,
            negative_prompt_3, clip_skip, max_sequence_length, prompt_embeds=prompt_embeds,
            negative_prompt_embeds=negative_prompt_embeds, pooled_prompt_embeds=pooled_prompt_embeds,
            negative_pooled_prompt_embeds=negative_pooled_prompt_embeds)
        mesh = self.transformer.mesh
        batch = batch_placements(mesh)
        orig_embeds, orig_pooled = embeds, pooled
        if cfg:  # [negative; positive], gathered over the text mesh's dp first
            embeds = _ops_views.cat([replicated(n_embeds), replicated(embeds)], dim=0)
            pooled = _ops_views.cat([replicated(n_pooled), replicated(pooled)], dim=0)
        embeds, pooled = to_mesh(embeds, mesh, batch), to_mesh(pooled, mesh, batch)
        if prompt is not None:
            b = (1 if isinstance(prompt, str) else len(prompt)) * num_images_per_prompt
        else:
            b = prompt_embeds.shape[0] * num_images_per_prompt
        shape = (b, self.transformer.config["in_channels"], height // self.vae_scale_factor,
                 width // self.vae_scale_factor)
        rep = placements(mesh)
        if latents is None:
            latents = _factories.randn(*shape, dtype=embeds.dtype, device_mesh=mesh, placements=rep,
                                       generator=generator)
        elif isinstance(latents, torch.Tensor):
            latents = _factories.from_torch(latents.to(embeds.dtype), mesh, rep)
        else:
            latents = to_mesh(latents.to(embeds.dtype), mesh, rep)
        kw = {}
        if self.scheduler.config.get("use_dynamic_shifting") and mu is None:
            p = self.patch_size
            mu = calculate_shift((shape[2] // p) * (shape[3] // p), self.scheduler.config["base_image_seq_len"],
                                  self.scheduler.config["max_image_seq_len"], self.scheduler.config["base_shift"],
                                  self.scheduler.config["max_shift"])
        if mu is not None:
            kw["mu"] = mu
        if sigmas is not None:
            self.scheduler.set_timesteps(sigmas=sigmas, **kw)
        else:
            self.scheduler.set_timesteps(num_inference_steps, **kw)
        timesteps = self.scheduler.timesteps
        if skip_guidance_layers is not None:
            orig_embeds, orig_pooled = to_mesh(orig_embeds, mesh, batch), to_mesh(orig_pooled, mesh, batch)
        cache = None if config is None or not config.enabled else StepCache(config, len(timesteps))
        self.last_cache_stats = None if cache is None else cache_stats([cache])
        for i, t in enumerate(timesteps):
            model_in = _ops_views.cat([latents, latents], dim=0) if cfg else latents
            model_in = model_in.redistribute(placements=batch)
            tt = _factories.full((model_in.shape[0],), float(t), dtype=torch.float32, device_mesh=mesh,
                                 placements=batch)
            if cache is not None:
                cache.begin_step(i)
            v = replicated(self.transformer(model_in, embeds, pooled, tt, cache=cache, execute_config=config))
            if cfg:
                v_uncond, v_text = v.chunk(2)
                v = v_uncond + guidance_scale * (v_text - v_uncond)
                n = len(timesteps)
                if (skip_guidance_layers is not None and n * skip_layer_guidance_start < i
                        < n * skip_layer_guidance_stop):
                    tl = _factories.full((latents.shape[0],), float(t), dtype=torch.float32, device_mesh=mesh,
                                         placements=batch)
                    v_skip = replicated(self.transformer(latents.redistribute(placements=batch), orig_embeds,
                                                         orig_pooled, tl, skip_layers=skip_guidance_layers,
                                                         execute_config=config))
                    v = v + (v_text - v_skip) * skip_layer_guidance_scale
            latents = self.scheduler.step(v, t, latents)
            if step_done is not None:
                step_done(i, latents)
        if cache is not None:
            self.last_cache_stats = cache_stats([cache])
        if output_type == "latent":
            return latents
        vae = self.vae
        z = to_mesh(latents, vae.mesh, placements(vae.mesh))
        z = z / vae.config["scaling_factor"] + (vae.config["shift_factor"] or 0.0)
        return self._postprocess(vae.decode(z), output_type)
