"""Where mirrorscan keeps local state: ``$MIRRORSCAN_HOME`` (default ``./.mirrorscan/``).

Layout under the home folder:
    catalog/pgdata/   data directory of the embedded PostgreSQL catalog
    store/            default trace store (``<store>/<experiment>/<invocation_id>/traces/``)
    models/           converted model caches (the demo model as safetensors)
    cache/            other caches (vLLM, torch inductor, temporary files)
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The mirrorscan home folder (absolute path); created if missing."""
    root = Path(os.environ.get("MIRRORSCAN_HOME", ".mirrorscan")).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    return root


def subdir(name: str) -> Path:
    """A named folder under the home folder (absolute path); created if missing."""
    path = home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_store_uri() -> str:
    """The store used when neither config, flag nor ``MIRRORSCAN_STORE`` names one."""
    return str(subdir("store"))
