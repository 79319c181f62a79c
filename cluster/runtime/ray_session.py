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

from mirrorscan.cluster.home import home, locate_home

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

    from mirrorscan.cluster.store.s3 import forwarded_env

    # AWS endpoint/region travel with the job (credentials do not: nodes hold their own role or profile)
    env_vars = {**WORKER_ENV, **forwarded_env(), "MIRRORSCAN_HOME": str(home()),
                "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    kwargs = dict(runtime_env={"env_vars": env_vars}, logging_level=logging.WARNING, log_to_driver=True)
    if address:
        ray.init(address=address, **kwargs)
        warn_joined_cluster()
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


LOOPBACK_HEAD_COMMAND = "ray start --head --node-ip-address 127.0.0.1 --dashboard-host 127.0.0.1"
"""A Ray head for this machine alone: its node and its dashboard (the job server) on loopback
(docs/operations.md, runtime env profiles; ``mirrorscan submit --help`` prints it)."""
EXPOSURE_FIX = (f"restart the head on loopback (`{LOOPBACK_HEAD_COMMAND}`) when it is one machine, or turn on Ray's "
                "token authentication (RAY_AUTH_MODE=token with RAY_AUTH_TOKEN_PATH on every node and client) and keep "
                "its ports on a private network")
"""What to do about a cluster that anyone on the network can use (docs/operations.md, Security notes)."""
EXPOSURE_WARNED_ENV = "MIRRORSCAN_EXPOSURE_WARNED"
"""Set by ``mirrorscan submit`` for a job when it printed the exposure warning itself: the job joins the same
cluster, and its output streams to the same terminal, so it does not print it a second time."""


def beyond_loopback(address: str) -> bool:
    """Whether ``address`` as Ray reports one (``10.0.0.5``, ``0.0.0.0:6379``, ``[::1]:8265``,
    ``http://host:8265``, ``localhost``) can be reached from other machines: anything but a loopback IP or
    ``localhost``. A host name other than ``localhost`` counts as reachable (it is not resolved)."""
    import ipaddress
    from urllib.parse import urlsplit

    text = address.strip()
    if "://" in text:
        text = urlsplit(text).hostname or ""
    elif text.startswith("["):
        text = text[1:text.index("]")] if "]" in text else text[1:]
    elif text.count(":") == 1:
        text = text.rsplit(":", 1)[0]
    if text.lower() == "localhost":
        return False
    try:
        return not ipaddress.ip_address(text.removeprefix("::ffff:")).is_loopback
    except ValueError:
        return bool(text)


def exposure_warning(cluster: str, addresses, auth_on: bool) -> str | None:
    """The one-line warning for a Ray cluster (named ``cluster`` in it) whose processes listen on
    ``addresses`` (as Ray reports them) with token authentication ``auth_on``: None when auth is on or every
    address is loopback, else a line naming the reachable addresses and the fix."""
    reachable = sorted({a for a in addresses if a and beyond_loopback(a)})
    if auth_on or not reachable:
        return None
    return (f"warning: the Ray cluster at {cluster} listens beyond loopback ({', '.join(reachable)}) with "
            f"authentication off: anyone who reaches it can run code as its user — fix: {EXPOSURE_FIX}")


def joined_cluster_warning() -> str | None:
    """``exposure_warning`` for the cluster this process joined with ``ray.init``: the GCS address and every
    node's address as Ray reports them, and this process's authentication mode (which the cluster shares)."""
    import ray
    from ray._raylet import AuthenticationMode, get_authentication_mode

    addresses = [n.get("NodeManagerAddress", "") for n in ray.nodes() if n.get("Alive", True)]
    gcs = ray.get_runtime_context().gcs_address
    return exposure_warning(gcs, [gcs, *addresses], get_authentication_mode() == AuthenticationMode.TOKEN)


def warn_joined_cluster() -> None:
    """Print ``joined_cluster_warning`` on stderr, unless the submitter of this job printed it already
    (``$MIRRORSCAN_EXPOSURE_WARNED``)."""
    warning = joined_cluster_warning()
    if warning and not os.environ.get(EXPOSURE_WARNED_ENV):
        print(warning, file=sys.stderr, flush=True)


def job_server_facts(address: str, timeout_s: float = 5.0) -> tuple[bool, list[str]] | None:
    """(authentication on, addresses its processes listen on) of the cluster whose job server (dashboard) is
    at ``address`` (http://HOST:PORT), read without credentials: the mode from ``/api/authentication_mode``
    and, when it is off, every node's address from ``/api/v0/nodes``, besides ``address`` itself. None when
    the server cannot be read that way."""
    import json
    import urllib.request

    base = address.rstrip("/")
    if "://" not in base:
        return None

    def get(path: str):
        with urllib.request.urlopen(base + path, timeout=timeout_s) as response:
            return json.loads(response.read().decode("utf-8"))

    def node_ips(value) -> list[str]:
        if isinstance(value, dict):
            return [v for k, v in value.items() if k == "node_ip" and isinstance(v, str)] + \
                [ip for v in value.values() for ip in node_ips(v)]
        if isinstance(value, list):
            return [ip for v in value for ip in node_ips(v)]
        return []

    try:
        if get("/api/authentication_mode").get("authentication_mode") != "disabled":
            return True, [address]
        return False, [address, *node_ips(get("/api/v0/nodes?limit=1000"))]
    except (OSError, ValueError, AttributeError):
        return None


def job_server_warning(address: str) -> str | None:
    """``exposure_warning`` for the cluster whose job server is at ``address`` (``job_server_facts``); None
    when it cannot be read (the submission then reports the server itself)."""
    facts = job_server_facts(address)
    return exposure_warning(address, facts[1], facts[0]) if facts is not None else None


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


def quiet_ray_warnings() -> None:
    """For ``--quiet``: Ray's own advice to its users (a ``UserWarning`` such as Ray Data's "the operator only
    received 1 input(s)" when the grid has fewer blocks than the actor pool) is not printed; warnings of
    mirrorscan and of the engines still are."""
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning, module=r"ray(\.|$)")
