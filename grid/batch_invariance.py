"""``"batch_invariant": true`` on a model entry: vLLM's batch-invariant kernels, so that a greedy (or seeded) answer
and its log-probs do not change with the batch the engine happened to put the request in.

vLLM reads ``VLLM_BATCH_INVARIANT=1`` from its process environment; the model's engine actors set it for
themselves only (``actors.vllm_env.apply_vllm_env``), never the driver or another model's actors. It is a GPU
feature: vLLM's CPU build crashes under it ("'function' object is not subscriptable"), so a model on the CPU is
refused here. Identical reruns also need identical requests: sampling at temperature above 0 is refused unless the
config sets its ``seed`` (each cell's seed derives from it). The flag is part of the frozen model settings (it
shapes results, so it is hashed and ``reproduce`` runs with it). The GPU name and vLLM version are recorded, not
hashed: in the frozen settings by the driver (``execution.engines``, ``cluster.runtime.provenance.engine_records``;
the GPU null where the driver cannot see the engines' GPU), and on each row of such a model by the engine that ran
it (``generation_overrides.batch_invariant``).
"""

from __future__ import annotations

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant


def check_batch_invariant(file: str, where: str, variant: ModelVariant, seed_given: bool) -> None:
    """ConfigError (field ``<where>.batch_invariant``) when ``variant`` asks for batch invariance where it cannot
    hold: another backend than vllm, a CPU device, or sampling without an explicit seed (``seed_given``)."""
    if not variant.batch_invariant:
        return
    field = f"{where}.batch_invariant"
    if variant.backend != "vllm":
        raise ConfigError(file, field, f"is only read by the vllm backend, not {variant.backend!r}",
                          'remove it, or use "backend": "vllm" on a GPU')
    if not variant.device.startswith("cuda"):
        raise ConfigError(file, field, f"needs a GPU, and the model runs on {variant.device!r} (vLLM's CPU build "
                          "crashes under VLLM_BATCH_INVARIANT=1)", 'remove it, or set "device": "cuda"')
    if variant.temperature > 0 and not seed_given:
        raise ConfigError(file, field, f"needs greedy answers or an explicit seed, and the model samples at "
                          f"temperature {variant.temperature:g} with the default seed",
                          'set "temperature": 0, or write the top-level "seed"')
