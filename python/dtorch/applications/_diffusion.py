"""What the diffusion pipelines (SD3, Flux) share: the output and future types, the argument checks
diffusers makes, the resolution-dependent shift, the image post-processing and the ``__call__`` /
``async_call`` pair that records a whole generation and reads it once.

A pipeline subclasses ``DiffusionPipeline`` and implements ``_record(prompt, **kwargs)``, which
records the generation and returns the dtorch result (the latents or the image as ``_postprocess``
makes it); ``step_done(i, latents)`` is called after each recorded step.

>>> class MyPipeline(DiffusionPipeline):
...     def _record(self, prompt=None, output_type="pil", step_done=None, **kw): ...
>>> image = MyPipeline(...)("a cat", seed=0, progress=True).images[0]
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch

__all__ = ["PipelineOutput", "PipelineFuture", "DiffusionPipeline", "calculate_shift", "check_prompts",
           "check_output_type"]


class PipelineOutput:
    """``images``: a list of PIL images, a numpy array (N, H, W, 3), a torch tensor (N, 3, H, W) or
    the latents, by ``output_type``."""

    def __init__(self, images: Any) -> None:
        self.images = images

    def __getitem__(self, i: int) -> Any:
        return (self.images,)[i]


class PipelineFuture:
    """The pending result of ``async_call``: ``get()`` waits and returns the pipeline output,
    ``is_ready()`` never waits, ``await`` works too.

    >>> out = pipe.async_call("a cat", seed=0).get()
    """

    def __init__(self, future: Any, finish: Any) -> None:
        self._future, self._finish = future, finish

    def is_ready(self) -> bool:
        return self._future.is_ready()

    def get(self) -> PipelineOutput:
        return self._finish(self._future.get())

    wait = get

    def __await__(self):
        value = yield from self._future.__await__()
        return self._finish(value)


def calculate_shift(seq_len: int, base_len: int, max_len: int, base_shift: float, max_shift: float) -> float:
    """diffusers' ``calculate_shift``: ``mu`` grows linearly with the image's token count.

    >>> calculate_shift(4096, 256, 4096, 0.5, 1.15)
    1.15
    """
    m = (max_shift - base_shift) / (max_len - base_len)
    return seq_len * m + base_shift - m * base_len


def check_output_type(output_type: str) -> None:
    if output_type not in ("pil", "np", "pt", "latent"):
        raise ValueError(f"output_type must be 'pil', 'np', 'pt' or 'latent', not {output_type!r}")


def check_prompts(prompts: Dict[str, Any], negatives: Dict[str, Any], prompt_embeds: Any, pooled_prompt_embeds: Any,
                  negative_prompt_embeds: Any, negative_pooled_prompt_embeds: Any) -> None:
    """diffusers' ``check_inputs`` for the prompts: text or embeddings, not both; pooled embeddings with
    the embeddings; positive and negative embeddings of one shape. ``prompts`` maps ``prompt``,
    ``prompt_2``, ... to their values, ``negatives`` the same for the negatives.

    >>> check_prompts(dict(prompt="a cat"), dict(negative_prompt=None), None, None, None, None)
    """
    for name, value in prompts.items():
        if value is not None and prompt_embeds is not None:
            raise ValueError(f"Cannot forward both `{name}`: {value} and `prompt_embeds`. Please make sure to only "
                             "forward one of the two.")
    if prompts.get("prompt") is None and prompt_embeds is None:
        raise ValueError("Provide either `prompt` or `prompt_embeds`. Cannot leave both `prompt` and `prompt_embeds` "
                         "undefined.")
    for name, value in prompts.items():
        if value is not None and not isinstance(value, (str, list)):
            raise ValueError(f"`{name}` has to be of type `str` or `list` but is {type(value)}")
    for name, value in negatives.items():
        if value is not None and negative_prompt_embeds is not None:
            raise ValueError(f"Cannot forward both `{name}`: {value} and `negative_prompt_embeds`. Please make sure "
                             "to only forward one of the two.")
    if prompt_embeds is not None and negative_prompt_embeds is not None:
        if tuple(prompt_embeds.shape) != tuple(negative_prompt_embeds.shape):
            raise ValueError("`prompt_embeds` and `negative_prompt_embeds` must have the same shape when passed "
                             f"directly, but got: `prompt_embeds` {tuple(prompt_embeds.shape)} != "
                             f"`negative_prompt_embeds` {tuple(negative_prompt_embeds.shape)}.")
    if prompt_embeds is not None and pooled_prompt_embeds is None:
        raise ValueError("If `prompt_embeds` are provided, `pooled_prompt_embeds` also have to be passed.")
    if negative_prompt_embeds is not None and negative_pooled_prompt_embeds is None:
        raise ValueError("If `negative_prompt_embeds` are provided, `negative_pooled_prompt_embeds` also have to be "
                         "passed.")


class DiffusionPipeline:
    """``__call__`` and ``async_call`` over a subclass's ``_record`` (see the module)."""

    def _record(self, prompt: Any = None, **kwargs: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def _postprocess(image: Any, output_type: str) -> Any:
        """diffusers' image processor on the decoded image in [-1, 1]: [0, 1], then NHWC float, then 8-bit."""
        image = (image * 0.5 + 0.5).clamp(0, 1)
        if output_type == "pt":
            return image
        image = image.permute(0, 2, 3, 1).float()
        if output_type == "pil":
            image = (image * 255).round().to(torch.uint8)
        return image

    @staticmethod
    def _finish(value: torch.Tensor, output_type: str) -> PipelineOutput:
        if output_type == "pil":
            from PIL import Image

            arr = value.numpy()
            images = [Image.fromarray(a.squeeze(), mode="L") if a.shape[-1] == 1 else Image.fromarray(a) for a in arr]
            return PipelineOutput(images)
        if output_type == "np":
            return PipelineOutput(value.numpy())
        return PipelineOutput(value)

    def __call__(self, prompt: Any = None, *, progress: bool = False, **kwargs: Any) -> PipelineOutput:
        """Generates images as diffusers' pipeline; ``progress=True`` shows a tqdm bar over the steps
        (it advances as each step finishes on the devices, not as it is recorded).

        >>> out = pipe("a cat", num_inference_steps=28, height=1024, width=1024, seed=0)
        """
        output_type = kwargs.get("output_type", "pil")
        futures = []
        if progress:
            # A one-element read per step: its completion marks the step done on the devices.
            kwargs["step_done"] = lambda i, lat: futures.append(lat[(0,) * lat.ndim].to_torch_async())
        result = self._record(prompt, **kwargs)
        if progress:
            from tqdm.auto import tqdm

            with tqdm(total=len(futures), desc="denoising") as bar:
                for f in futures:
                    f.get()
                    bar.update()
        return self._finish(result.to_torch(), output_type)

    def async_call(self, prompt: Any = None, **kwargs: Any) -> PipelineFuture:
        """``__call__`` that returns at once: a ``PipelineFuture`` of the output.

        >>> pending = pipe.async_call("a cat", seed=0)
        >>> image = pending.get().images[0]
        """
        output_type = kwargs.get("output_type", "pil")
        result = self._record(prompt, **kwargs)
        return PipelineFuture(result.to_torch_async(), lambda v: self._finish(v, output_type))


def generator_for(generator: Optional[torch.Generator], seed: Optional[int]) -> Optional[torch.Generator]:
    """``generator``, or a ``torch.Generator().manual_seed(seed)`` when only ``seed`` is given."""
    if generator is None and seed is not None:
        return torch.Generator().manual_seed(int(seed))
    return generator


def parse_mesh(text: str, device: str = "cpu") -> Any:
    """``"dp=2,tp=2"`` -> ``init_device_mesh(device, (2, 2), mesh_dim_names=("dp", "tp"))`` (the
    examples' and benchmarks' ``--mesh``).

    >>> parse_mesh("ulysess_cp=2,ring_cp=2").dim_names
    ('ulysess_cp', 'ring_cp')
    """
    from .. import init_device_mesh

    names, sizes = [], []
    for part in text.split(","):
        name, _, size = part.partition("=")
        if not name.strip() or not size.strip().isdigit() or int(size) < 1:
            raise ValueError(f"mesh: expected name=size[,name=size...], got {text!r}")
        names.append(name.strip())
        sizes.append(int(size))
    return init_device_mesh(device, tuple(sizes), mesh_dim_names=tuple(names))


def psnr(a: Any, b: Any) -> float:
    """The peak signal-to-noise ratio (dB) of two images in [0, 1] (inf when equal)."""
    import numpy as np

    mse = float(((np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)


def run_example(pipeline_cls: Any, args: Any, make_tiny: Any, call_kw: Any, steps: int, max_sequence_length: int,
                size: Any) -> int:
    """The body of ``examples/<pipeline>/run.py``: a tiny random folder (``make_tiny(path, seed=0)``)
    unless ``args.model``, the pipeline on ``args.mesh``, one image with a tqdm bar written to
    ``args.out``, and for the tiny model the PSNR against one device. ``call_kw(pipe, size, steps,
    seq)`` gives the pipeline's arguments; ``steps``, ``max_sequence_length`` and ``size(pipe)`` are
    the real model's defaults (the tiny one takes 4 steps, 16 tokens, 32 pixels).

    >>> run_example(FluxPipeline, args, make_tiny_pipeline, lambda pipe, size, steps, seq: {...}, 28, 512,
    ...             lambda pipe: 1024)
    """
    import os
    import tempfile
    import time

    from .. import DeviceMesh

    tiny = args.model is None
    tmp = tempfile.TemporaryDirectory() if tiny else None
    path = tmp.name if tiny else args.model
    if tiny:
        make_tiny(path, seed=0)
    steps = args.steps or (4 if tiny else steps)
    seq = args.max_sequence_length or (16 if tiny else max_sequence_length)
    dtype = getattr(torch, args.dtype) if args.dtype else None
    try:
        mesh = parse_mesh(args.mesh, args.device)
    except ValueError as e:
        raise SystemExit(f"--{e}")
    print(f"mesh {mesh}; model {'tiny random' if tiny else path}; {steps} steps")
    t0 = time.perf_counter()
    pipe = pipeline_cls.from_pretrained(path, device_mesh=mesh, torch_dtype=dtype)
    print(f"loaded in {time.perf_counter() - t0:.1f} s")
    side = args.size or (32 if tiny else size(pipe))
    kw = call_kw(pipe, side, steps, seq)
    t0 = time.perf_counter()
    image = pipe(**kw, output_type="np", progress=True).images
    print(f"generated {side}x{side} in {time.perf_counter() - t0:.1f} s")
    from PIL import Image

    Image.fromarray((image[0] * 255).round().astype("uint8")).save(args.out)
    print(f"wrote {os.path.abspath(args.out)}")
    if tiny and len(mesh.device_ids) > 1:
        single = pipeline_cls.from_pretrained(path, device_mesh=DeviceMesh(args.device, [0]))
        kw = {k: v for k, v in kw.items() if not k.endswith("_threshold")}
        ref = single(**kw, output_type="np").images
        print(f"PSNR against one device: {psnr(image, ref):.1f} dB")
    if tmp is not None:
        tmp.cleanup()
    return 0
