"""Environment for vLLM processes: the CPU build's required settings, and caches in the folder the caller names
(the run's ``InvocationContext.cache_dir``: ``$MIRRORSCAN_HOME/cache``).

Seen to work on 2-core CPU machines (docs/engines.md): a KV cache size is required
on the CPU build; the in-process engine starts in seconds instead of tens; eager mode and no dynamo avoid
minutes of compilation; caches and vLLM's socket files stay inside the cache folder given. On GPUs only
the cache locations and the no-telemetry settings apply. Without a cache folder vLLM keeps its own defaults.
"""

from __future__ import annotations

import os
from pathlib import Path

CPU_SETTINGS = {
    "VLLM_CPU_KVCACHE_SPACE": "1",          # GiB of KV cache; the CPU build refuses to start without it
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # Ray and the OS place threads; binding fights other actors
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # LLM (the scorer): in-process engine core, 5–9 s start, not 20–39 s
    "TORCHDYNAMO_DISABLE": "1",             # else the first log-prob call compiles for ~20 s
}
COMMON_SETTINGS = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}


def vllm_env(device: str = "cpu", cache: str | Path | None = None) -> dict[str, str]:
    """Environment variables a vLLM engine (or server) on ``device`` needs; its caches (and on CPU its
    temporary files) under the folder ``cache`` (created if missing), or vLLM's defaults when None."""
    env = dict(COMMON_SETTINGS)
    if cache is not None:
        cache = Path(cache)
        env.update({"VLLM_CACHE_ROOT": str(cache / "vllm"), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
                    "XDG_CACHE_HOME": str(cache / "xdg")})
    if not device.startswith("cuda"):
        env.update(CPU_SETTINGS)
        if cache is not None:
            env["TMPDIR"] = str(cache / "tmp")   # vLLM leaves socket files in the temp folder
            os.makedirs(env["TMPDIR"], exist_ok=True)
    return env


def apply_vllm_env(device: str = "cpu", cache: str | Path | None = None, batch_invariant: bool = False) -> None:
    """Set ``vllm_env(device, cache)`` in this process before vLLM is imported (existing values win); with
    ``batch_invariant`` (a model's ``batch_invariant``, ``grid.batch_invariance``) also ``VLLM_BATCH_INVARIANT=1``,
    for this process (one model's engine actor) alone. ValueError for batch invariance off a GPU."""
    if batch_invariant and not device.startswith("cuda"):
        raise ValueError(f"batch_invariant needs a GPU, not {device!r} (vLLM's CPU build crashes under "
                         "VLLM_BATCH_INVARIANT=1)")
    for key, value in vllm_env(device, cache).items():
        os.environ.setdefault(key, value)
    if batch_invariant:
        os.environ["VLLM_BATCH_INVARIANT"] = "1"


def batch_invariance_record() -> dict:
    """What a batch-invariant engine ran on, for its rows: the GPU's name and the vLLM version."""
    import torch
    import vllm

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {"gpu": gpu, "vllm": vllm.__version__, "VLLM_BATCH_INVARIANT": os.environ.get("VLLM_BATCH_INVARIANT")}
