"""The flow-matching Euler scheduler of SD3 (diffusers' ``FlowMatchEulerDiscreteScheduler``).

The schedule (sigmas and timesteps) is host metadata computed exactly as diffusers computes it
(numpy float64, then float32); ``step`` is one elementwise update of the dtorch latents,
``prev = sample.float() + dt * v`` (``dt`` a 0-d float32 tensor, as diffusers') cast back to the
velocity's dtype, so it keeps any placements.

>>> sched = FlowMatchEulerDiscreteScheduler(shift=3.0)
>>> sched.set_timesteps(28)
>>> for t in sched.timesteps:
...     latents = sched.step(velocity(latents, t), t, latents)
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Optional, Union

import numpy as np
import torch

from ... import _factories
from ...distributed_spec import Replicate
from ._common import read_json

__all__ = ["FlowMatchEulerDiscreteScheduler"]


class FlowMatchEulerDiscreteScheduler:
    """Euler steps of the rectified-flow ODE from sigma 1 to 0, with the shift
    ``s' = shift * s / (1 + (shift - 1) * s)`` (applied to the training table and again in
    ``set_timesteps``, as diffusers does) or, with ``use_dynamic_shifting``, the resolution-dependent
    time shift of ``mu``. Karras/exponential/beta sigmas and stochastic sampling are not supported.

    >>> sched = FlowMatchEulerDiscreteScheduler.from_pretrained("sd3/scheduler")
    >>> sched.set_timesteps(4); sched.sigmas
    tensor([1.0000, 0.9000, 0.7500, 0.5000, 0.0000])
    """

    order = 1

    def __init__(self, num_train_timesteps: int = 1000, shift: float = 1.0, use_dynamic_shifting: bool = False,
                 base_shift: Optional[float] = 0.5, max_shift: Optional[float] = 1.15, base_image_seq_len: int = 256,
                 max_image_seq_len: int = 4096, invert_sigmas: bool = False, shift_terminal: Optional[float] = None,
                 use_karras_sigmas: bool = False, use_exponential_sigmas: bool = False, use_beta_sigmas: bool = False,
                 time_shift_type: str = "exponential", stochastic_sampling: bool = False, **unused: Any) -> None:
        for name, on in (("use_karras_sigmas", use_karras_sigmas), ("use_exponential_sigmas", use_exponential_sigmas),
                         ("use_beta_sigmas", use_beta_sigmas), ("stochastic_sampling", stochastic_sampling)):
            if on:
                raise NotImplementedError(f"FlowMatchEulerDiscreteScheduler({name}=True) is not supported")
        if time_shift_type not in ("exponential", "linear"):
            raise ValueError("`time_shift_type` must either be 'exponential' or 'linear'.")
        self.config = dict(num_train_timesteps=num_train_timesteps, shift=shift,
                           use_dynamic_shifting=use_dynamic_shifting, base_shift=base_shift, max_shift=max_shift,
                           base_image_seq_len=base_image_seq_len, max_image_seq_len=max_image_seq_len,
                           invert_sigmas=invert_sigmas, shift_terminal=shift_terminal,
                           time_shift_type=time_shift_type)
        timesteps = np.linspace(1, num_train_timesteps, num_train_timesteps, dtype=np.float32)[::-1].copy()
        sigmas = torch.from_numpy(timesteps).to(dtype=torch.float32) / num_train_timesteps
        if not use_dynamic_shifting:
            sigmas = shift * sigmas / (1 + (shift - 1) * sigmas)
        self.timesteps = sigmas * num_train_timesteps
        self.sigmas = sigmas
        self.sigma_min = self.sigmas[-1].item()
        self.sigma_max = self.sigmas[0].item()
        self.shift = shift
        self.num_inference_steps: Optional[int] = None
        self._step_index: Optional[int] = None
        self._begin_index: Optional[int] = None

    @classmethod
    def from_pretrained(cls, path: str) -> "FlowMatchEulerDiscreteScheduler":
        """Reads ``path/scheduler_config.json`` (diffusers' scheduler folder)."""
        cfg = read_json(os.path.join(path, "scheduler_config.json"))
        return cls(**{k: v for k, v in cfg.items() if not k.startswith("_")})

    # ------------------------------------------------------------ schedule

    @property
    def step_index(self) -> Optional[int]:
        return self._step_index

    @property
    def begin_index(self) -> Optional[int]:
        return self._begin_index

    def set_begin_index(self, begin_index: int = 0) -> None:
        self._begin_index = begin_index

    def set_shift(self, shift: float) -> None:
        self.shift = shift

    def time_shift(self, mu: float, sigma: float, t: Any) -> Any:
        if self.config["time_shift_type"] == "exponential":
            return math.exp(mu) / (math.exp(mu) + (1 / t - 1) ** sigma)
        return mu / (mu + (1 / t - 1) ** sigma)

    def set_timesteps(self, num_inference_steps: Optional[int] = None, device: Any = None,
                      sigmas: Optional[List[float]] = None, mu: Optional[float] = None,
                      timesteps: Optional[List[float]] = None) -> None:
        """The ``num_inference_steps`` timesteps (float32, from 1000 down) and their sigmas, plus a final 0.

        >>> sched.set_timesteps(28); sched.timesteps[:2]
        tensor([1000.0000,  987.3817])
        """
        cfg = self.config
        if cfg["use_dynamic_shifting"] and mu is None:
            raise ValueError("`mu` must be passed when `use_dynamic_shifting` is set to be `True`")
        if sigmas is not None and timesteps is not None and len(sigmas) != len(timesteps):
            raise ValueError("`sigmas` and `timesteps` should have the same length")
        if num_inference_steps is not None:
            if ((sigmas is not None and len(sigmas) != num_inference_steps)
                    or (timesteps is not None and len(timesteps) != num_inference_steps)):
                raise ValueError("`sigmas` and `timesteps` should have the same length as num_inference_steps, if "
                                 "`num_inference_steps` is provided")
        else:
            if sigmas is None and timesteps is None:
                raise ValueError("set_timesteps() needs num_inference_steps, sigmas or timesteps")
            num_inference_steps = len(sigmas) if sigmas is not None else len(timesteps)
        self.num_inference_steps = num_inference_steps
        given_timesteps = timesteps is not None
        if given_timesteps:
            timesteps = np.array(timesteps).astype(np.float32)
        if sigmas is None:
            if timesteps is None:
                n = cfg["num_train_timesteps"]
                timesteps = np.linspace(self.sigma_max * n, self.sigma_min * n, num_inference_steps)
            sigmas = timesteps / cfg["num_train_timesteps"]
        else:
            sigmas = np.array(sigmas).astype(np.float32)
        if cfg["use_dynamic_shifting"]:
            sigmas = self.time_shift(mu, 1.0, sigmas)
        else:
            sigmas = self.shift * sigmas / (1 + (self.shift - 1) * sigmas)
        if cfg["shift_terminal"]:
            one_minus_z = 1 - sigmas
            sigmas = 1 - one_minus_z / (one_minus_z[-1] / (1 - cfg["shift_terminal"]))
        sigmas = torch.from_numpy(sigmas).to(dtype=torch.float32)
        if given_timesteps:
            timesteps = torch.from_numpy(timesteps).to(dtype=torch.float32)
        else:
            timesteps = sigmas * cfg["num_train_timesteps"]
        if cfg["invert_sigmas"]:
            sigmas = 1.0 - sigmas
            timesteps = sigmas * cfg["num_train_timesteps"]
            sigmas = torch.cat([sigmas, torch.ones(1, device=sigmas.device)])
        else:
            sigmas = torch.cat([sigmas, torch.zeros(1, device=sigmas.device)])
        self.timesteps, self.sigmas = timesteps, sigmas
        self._step_index = None
        self._begin_index = None

    def index_for_timestep(self, timestep: Union[float, torch.Tensor], schedule_timesteps: Any = None) -> int:
        """The schedule index of ``timestep``; with duplicates the second match (as diffusers)."""
        if schedule_timesteps is None:
            schedule_timesteps = self.timesteps
        indices = (schedule_timesteps == timestep).nonzero()
        if len(indices) == 0:
            raise ValueError(f"timestep {float(timestep)} is not in the schedule")
        return indices[1 if len(indices) > 1 else 0].item()

    # ------------------------------------------------------------ stepping

    def step(self, model_output: Any, timestep: Union[float, torch.Tensor], sample: Any,
             return_dict: bool = False, **unused: Any) -> Any:
        """``sample.float() + (sigma_next - sigma) * model_output``, cast to ``model_output``'s dtype (the
        difference a 0-d float32 tensor, which torch rounds to ``model_output``'s dtype before the product).

        ``model_output`` and ``sample`` are dtorch (or torch) tensors of one layout; returns the new
        latents (a tuple ``(prev,)`` with ``return_dict=True``, diffusers' output shape).

        >>> latents = sched.step(v, sched.timesteps[0], latents)
        """
        if isinstance(timestep, (int, torch.IntTensor, torch.LongTensor)) and not isinstance(timestep, bool):
            raise ValueError("Passing integer indices (e.g. from `enumerate(timesteps)`) as timesteps to "
                             "`FlowMatchEulerDiscreteScheduler.step()` is not supported. Make sure to pass one of "
                             "the `scheduler.timesteps` as a timestep.")
        if self._step_index is None:
            self._step_index = (self.index_for_timestep(timestep) if self._begin_index is None
                                else self._begin_index)
        i = self._step_index
        dt = self._zero_dim(self.sigmas[i + 1] - self.sigmas[i], model_output)
        prev = sample.to(torch.float32) + dt * model_output
        self._step_index += 1
        prev = prev.to(model_output.dtype)
        return (prev,) if return_dict else prev

    @staticmethod
    def _zero_dim(value: torch.Tensor, like: Any) -> Any:
        """``value`` (a 0-d float32 tensor) where ``like`` lives. diffusers multiplies the velocity by
        the 0-d float32 ``sigma_next - sigma``; torch's promotion rounds a 0-d operand to the other
        operand's dtype first (bfloat16 for a bfloat16 velocity), which a Python float would skip."""
        if isinstance(like, torch.Tensor):
            return value
        return _factories.full((), float(value), dtype=torch.float32, device_mesh=like.device_mesh,
                               placements=[Replicate()] * like.device_mesh.ndim)

    def scale_noise(self, sample: Any, timestep: Any, noise: Any) -> Any:
        """The forward process ``sigma * noise + (1 - sigma) * sample`` at ``timestep`` (image-to-image)."""
        i = self.index_for_timestep(timestep) if self._begin_index is None else self._begin_index
        sigma = float(self.sigmas[i])
        return sigma * noise + (1.0 - sigma) * sample

    def __len__(self) -> int:
        return self.config["num_train_timesteps"]

    def to_config(self) -> Dict[str, Any]:
        return dict(self.config)
