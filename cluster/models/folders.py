"""A model folder under ``$MIRRORSCAN_HOME/models/`` built once: its marker written last, one builder at a time,
a temporary folder renamed into place, so a crash never leaves a folder that looks finished."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Callable, Iterator

MARKER_NAME = "mirrorscan-conversion.json"
"""Written last into a finished folder; a folder without a matching one is built again."""


def progress_line(message: str) -> None:
    """One line of progress on stderr, prefixed ``mirrorscan:`` (preparing a model takes seconds to a minute)."""
    print(f"mirrorscan: {message}", file=sys.stderr, flush=True)


def marker_matches(folder: Path, stamp: dict) -> bool:
    """Whether ``folder`` holds a marker (``MARKER_NAME``) with every key and value of ``stamp``."""
    try:
        found = json.loads((folder / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return False
    return all(found.get(key) == value for key, value in stamp.items())


@contextlib.contextmanager
def exclusive(lock_path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive fcntl lock on ``lock_path``; says so when another process holds it first."""
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress_line(f"waiting for another process that is preparing {what}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_once(target: Path, stamp: dict, build: Callable[[Path], dict], force: bool = False) -> Path:
    """Make ``target`` hold what ``build`` writes, unless it already carries a marker matching ``stamp``.

    ``build(tmp_dir)`` fills a fresh temporary folder next to ``target`` and returns extra marker fields.
    The marker (``stamp`` + those fields) is written last, then the folder is renamed into place, so a
    crash never leaves a folder that looks finished. A lock file serialises concurrent builders; the
    second one finds the first one's result and returns it.
    """
    if not force and marker_matches(target, stamp):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(target.with_name(f".{target.name}.lock"), target.name):
        if not force and marker_matches(target, stamp):
            return target
        for stale in target.parent.glob(f".{target.name}.tmp-*"):  # left by a killed builder
            shutil.rmtree(stale, ignore_errors=True)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        tmp.mkdir()
        try:
            extra = build(tmp)
            marker = tmp / MARKER_NAME
            marker.write_text(json.dumps({**stamp, **extra}, indent=2, sort_keys=True) + "\n")
            with open(marker, "rb") as handle:
                os.fsync(handle.fileno())
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            if target.exists():
                os.rename(target, old)
            os.rename(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target
