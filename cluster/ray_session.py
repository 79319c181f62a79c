"""Connecting to Ray, or starting a local Ray for this process.

``RAY_ADDRESS`` (or ``--ray-address``) joins an existing cluster; otherwise a local Ray starts with the
machine's CPUs. Every worker gets one torch/OpenMP thread and offline model hubs.

A local Ray is closed to the network: every process of it (GCS, raylet, workers, the dashboard and
runtime-env agents) listens on 127.0.0.1 only, and Ray's token authentication is on. Ray binds its node
address, which it takes from the loopback interface when ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (its
single-machine mode, the default on macOS and Windows). Ray reads that switch and ``RAY_AUTH_MODE`` when it
is imported, so the entry points (``jobs.cli``, ``ensure_ray`` before its first import of Ray) set them
first; a process that imported Ray before (a test session, a notebook) keeps what Ray read. The token is Ray's ``RAY_AUTH_TOKEN`` or
``RAY_AUTH_TOKEN_PATH`` when set, else a random one written once to ``$MIRRORSCAN_HOME/ray-auth-token``
(mode 0600) and named by path, never by value. To open either deliberately: ``RAY_AUTH_MODE=disabled``
turns auth off, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1`` binds the machine's address.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
from pathlib import Path

from cluster.home import home, locate_home

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


def local_ray_defaults() -> None:
    """Loopback and token auth for a local Ray unless the user chose otherwise (module docstring). Ray reads
    both switches once, when it is imported: entry points call this first. In a process that imported Ray
    already, the local Ray starts as Ray read them (so the driver and its Ray agree)."""
    if "ray" not in sys.modules:
        os.environ.setdefault(LOOPBACK_SWITCH, "0")
    if "ray" in sys.modules:
        from ray._raylet import AuthenticationMode, get_authentication_mode

        os.environ["RAY_AUTH_MODE"] = "token" if get_authentication_mode() == AuthenticationMode.TOKEN else "disabled"
    else:
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    if os.environ["RAY_AUTH_MODE"] == "token" and not (os.environ.get("RAY_AUTH_TOKEN")
                                                       or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(locate_home() / TOKEN_FILE)   # written when a Ray starts


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Initialise Ray once per process: join ``address``/``RAY_ADDRESS`` or start a local instance."""
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        local_ray_defaults()
        if os.environ.get("RAY_AUTH_TOKEN_PATH") == str(locate_home() / TOKEN_FILE):
            local_token_file()
    import ray

    from cluster.s3 import forwarded_env

    # AWS endpoint/region travel with the job (credentials do not: nodes hold their own role or profile)
    env_vars = {**WORKER_ENV, **forwarded_env(), "MIRRORSCAN_HOME": str(home()),
                "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
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


LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch between its single-machine mode (0: node address 127.0.0.1) and cluster mode (1); Ray reads it
when it is imported."""


TOKEN_FILE = "ray-auth-token"
"""The local Rays' token file in ``$MIRRORSCAN_HOME``."""


def local_token_file() -> Path:
    """``$MIRRORSCAN_HOME/ray-auth-token``: a random token for local Rays, written once, readable by its owner only."""
    path = home() / TOKEN_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:   # another process wrote it first: use theirs
            return path
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path


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
