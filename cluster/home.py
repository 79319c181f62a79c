"""Where mirrorscan keeps local state, found the same way from any working folder:

1. ``$MIRRORSCAN_HOME`` when set;
2. else the nearest ``.mirrorscan`` folder in the working folder or one above it (a project's own home,
   as ``make`` creates it in the repository);
3. else the per-user data folder: ``$XDG_DATA_HOME/mirrorscan`` (default ``~/.local/share/mirrorscan``);
   as root ``/var/lib/mirrorscan``, because root's home folder is closed to the system user that the
   embedded catalog server runs as.

Layout under the home folder:
    catalog/pgdata/   data directory of the embedded PostgreSQL catalog
    store/            default trace store (``<store>/<experiment>/<invocation_id>/traces/``)
    models/           converted model caches (the demo model as safetensors)
    cache/            other caches (vLLM, torch inductor, temporary files)
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "MIRRORSCAN_HOME"
PROJECT_FOLDER = ".mirrorscan"
ROOT_HOME = Path("/var/lib/mirrorscan")


def locate_home(cwd: Path | None = None) -> Path:
    """The home folder by the rules above (absolute path), without creating anything."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser().resolve()
    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / PROJECT_FOLDER).is_dir():
            return folder / PROJECT_FOLDER
    return user_data_home()


def user_data_home() -> Path:
    """The per-user fallback home: ``$XDG_DATA_HOME/mirrorscan`` (default ``~/.local/share/mirrorscan``),
    or ``/var/lib/mirrorscan`` for root."""
    if os.geteuid() == 0:
        return ROOT_HOME
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser().resolve() / "mirrorscan"


def home() -> Path:
    """The mirrorscan home folder (absolute path, ``locate_home``); created if missing."""
    root = locate_home()
    root.mkdir(parents=True, exist_ok=True)
    return root


def check_home_writable() -> Path:
    """The home folder, after writing and removing a small probe file in it; ConfigError naming the folder
    and the fix when it cannot be written (read-only, full, not permitted). A scan checks this before it
    records anything, since its local Ray keeps a token file there."""
    import uuid

    from mirrorscan.grid.errors import ConfigError

    root = locate_home()
    probe = root / f".write-check-{uuid.uuid4().hex[:12]}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"mirrorscan write check")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(str(root), "MIRRORSCAN_HOME", f"cannot be written ({exc.strerror or exc})",
                          "set MIRRORSCAN_HOME to a writable folder with free space") from None
    return root


def subdir(name: str) -> Path:
    """A named folder under the home folder (absolute path); created if missing."""
    path = home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_store_uri() -> str:
    """The store used when neither config, flag nor ``MIRRORSCAN_STORE`` names one."""
    return str(subdir("store"))
