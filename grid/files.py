"""Input files: where a ``packaged:`` name points, the SHA-256 a file or text is recorded by, and a write stamp
of an input file or folder (how a process that cached what it read from an input — an item file that a scan,
a render or a reproduction reads — notices that the input was written since)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

HASH_BLOCK_BYTES = 1 << 22
"""Bytes read at a time while a file is hashed (4 MiB: model weights are hashed without holding them)."""


def packaged_path(name: str, packaged: Mapping[str, str], data: Path) -> Path:
    """The file or folder a ``packaged:`` name stands for — ``data`` (a package's data folder) joined with
    its entry in ``packaged`` — else ``name`` as a path."""
    return data / packaged[name] if name in packaged else Path(name)


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of the bytes of the file at ``path``, read ``HASH_BLOCK_BYTES`` at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(HASH_BLOCK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()


def stamp(path: str | Path) -> tuple:
    """(relative path, size in bytes, mtime in ns) of the file at ``path``, or of each file under it when it is
    a folder, sorted; ``()`` for a name that is no path on disk (a ``packaged:`` name, or a file that is gone).
    A cache keyed by it reads the input again once it was written, so a changed file is checked again."""
    root = Path(path)
    if not root.exists():
        return ()
    files = [root] if root.is_file() else sorted(f for f in root.rglob("*") if f.is_file())
    return tuple((str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
