"""A write stamp of an input file or folder: how a process that cached what it read from an input (an item file
that a scan, a render or a reproduction reads) notices that the input was written since."""

from __future__ import annotations

from pathlib import Path


def stamp(path: str | Path) -> tuple:
    """(relative path, size in bytes, mtime in ns) of the file at ``path``, or of each file under it when it is
    a folder, sorted; ``()`` for a name that is no path on disk (a ``packaged:`` name, or a file that is gone).
    A cache keyed by it reads the input again once it was written, so a changed file is checked again."""
    root = Path(path)
    if not root.exists():
        return ()
    files = [root] if root.is_file() else sorted(f for f in root.rglob("*") if f.is_file())
    return tuple((str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
