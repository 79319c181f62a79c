"""Where an in-process HF model's layers go when it does not fit one accelerator: ``models[].device_map``.

A model entry of backend ``hf`` may name a ``device_map``, handed to transformers' ``from_pretrained``
(accelerate places the weights):

- ``"auto"`` (or ``"balanced"``, ``"balanced_low_0"``, ``"sequential"``): accelerate spreads the layers over
  the GPUs the engine actor holds (Ray makes exactly its ``num_gpus`` visible, as ``cuda:0`` …), then CPU
  memory; ``"cpu"``: every layer on the CPU;
- an object mapping module names to a GPU index (``0`` …), ``"cuda:N"`` or ``"cpu"``, e.g.
  ``{"model.embed_tokens": 0, "model.layers": 0, "model.norm": 1, "lm_head": 1}`` (``""`` names the whole model).

The actor's GPUs are ``num_gpus`` per model (default 1 for ``hf`` on ``cuda``, else 0): a map that names GPU
index k needs ``num_gpus`` ≥ k + 1, and more than one GPU must be a whole number (Ray's rule). With a map,
the model is not moved to ``device`` after loading; its inputs go to the device of its first layer.
"""

from __future__ import annotations

import re

from mirrorscan.grid.engine_kinds import backend_reads
from mirrorscan.grid.errors import ConfigError

STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")
"""accelerate's automatic placements: over the visible GPUs, then CPU memory."""
_CUDA = re.compile(r"cuda(?::(\d+))?")


def default_num_gpus(backend: str, device: str, tensor_parallel_size: int) -> float:
    """GPUs one engine actor reserves when the entry does not say: vLLM's tensor-parallel size on CUDA, one for
    an in-process HF model on CUDA, else 0."""
    if not device.startswith("cuda"):
        return 0.0
    return float(tensor_parallel_size) if backend == "vllm" else 1.0 if backend == "hf" else 0.0


def check_device_map(file: str, where: str, v: dict) -> None:
    """ConfigError (naming ``<where>.device_map`` or ``<where>.num_gpus``) unless ``v``'s device_map and
    num_gpus fit together (module docstring). ``v``: the resolved model entry."""
    field, value, gpus = f"{where}.device_map", v.get("device_map"), v["num_gpus"]
    if gpus > 1 and gpus != int(gpus):
        raise ConfigError(file, f"{where}.num_gpus", f"is {gpus}: more than one GPU must be a whole number",
                          f"use {int(gpus)} or {int(gpus) + 1}, or a fraction below 1")
    if value is None:
        return
    if not backend_reads(v["backend"], "device_map"):   # hf only
        raise ConfigError(file, field, f"is only read by the hf backend, not {v['backend']!r}",
                          'remove it (vLLM spans GPUs with "tensor_parallel_size")')
    if isinstance(value, str):
        if value in STRATEGIES or value == "cpu":
            return
        indices = [_gpu_index(file, field, value)]
    elif isinstance(value, dict):
        if not value:
            raise ConfigError(file, field, "is an empty object", 'name each module\'s device, or use "auto"')
        indices = [_gpu_index(file, f"{field}.{name or '(whole model)'}", device) for name, device in value.items()]
    else:
        raise ConfigError(file, field, f"is {value!r}", 'use "auto", "cpu", or an object of module name → device')
    needed = max((i for i in indices if i is not None), default=-1) + 1
    if needed > gpus:
        raise ConfigError(file, f"{where}.num_gpus", f"is {gpus:g}, but device_map places layers on GPU "
                          f"{needed - 1} (the actor sees GPUs 0 … num_gpus − 1)", f"set num_gpus to {needed}")


def _gpu_index(file: str, field: str, device) -> int | None:
    """The GPU index a map entry names (None: the CPU); ConfigError for anything else."""
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        return device
    if device == "cpu":
        return None
    match = _CUDA.fullmatch(device) if isinstance(device, str) else None
    if match is None:
        raise ConfigError(file, field, f"is {device!r}, not a device",
                          'use a GPU index (0, 1 …), "cuda:N" or "cpu" (offloading to disk is not supported)')
    return int(match.group(1) or 0)
