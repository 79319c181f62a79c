"""Connecting to Ray, or starting a local Ray for this process.

``RAY_ADDRESS`` (or ``--ray-address``) joins an existing cluster; otherwise a local Ray starts with the
machine's CPUs. Local runs disable Ray's token auth (``RAY_AUTH_MODE=disabled``) unless it is set.
Every worker gets one torch/OpenMP thread and offline model hubs.
"""

from __future__ import annotations

import logging
import os

from cluster.home import home

WORKER_ENV = {
    "OMP_NUM_THREADS": "1",          # one torch thread per actor: two on two busy cores collapse throughput
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",     # BLAS threads on shared cores made permutation nulls 25x slower
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",           # weights come from local paths or packages, never a hub at run time
    "TRANSFORMERS_VERBOSITY": "error",
}


LOCAL_START_ATTEMPTS = 3
"""Tries at starting a local Ray when its node times out during startup (seen on overloaded 2-core machines)."""


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Initialise Ray once per process: join ``address``/``RAY_ADDRESS`` or start a local instance."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from cluster.s3 import forwarded_env

    # AWS endpoint/region travel with the job (credentials do not: nodes hold their own role or profile)
    env_vars = {**WORKER_ENV, **forwarded_env(), "MIRRORSCAN_HOME": str(home()),
                "RAY_AUTH_MODE": os.environ["RAY_AUTH_MODE"]}
    address = address or os.environ.get("RAY_ADDRESS")
    kwargs = dict(runtime_env={"env_vars": env_vars}, logging_level=logging.WARNING, log_to_driver=True)
    if address:
        ray.init(address=address, **kwargs)
    else:
        # address="local" always starts a fresh instance (never joins another driver's local Ray)
        for attempt in range(LOCAL_START_ATTEMPTS):
            try:
                ray.init(address="local", num_cpus=num_cpus or os.cpu_count(), include_dashboard=False, **kwargs)
                break
            except Exception as exc:   # Ray waits a fixed 30 s for its raylet; a loaded machine can miss that
                if "timed out during startup" not in str(exc) or attempt == LOCAL_START_ATTEMPTS - 1:
                    raise
                ray.shutdown()
    quiet_ray_data()


def quiet_ray_data() -> None:
    """mirrorscan draws its own progress bar; Ray Data's per-operator bars and banners are turned off."""
    import ray.data

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    for attr in ("print_on_execution_start", "enable_operator_progress_bars"):
        if hasattr(ctx, attr):
            setattr(ctx, attr, False)
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)   # "progress bars disabled" notice
