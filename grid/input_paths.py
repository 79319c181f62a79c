"""Input files in frozen settings: recorded by their path relative to the experiment folder, never by an
absolute path of the machine that ran the scan.

An instrument's frozen section names the files it read (forced_choice's ``probe_set``, flinch's ``corpus``,
open_scan's probe and template files, lens's framings and item files) beside their SHA-256; its spec reads
them by absolute path. What the catalog stores, and hashes, must not depend on where the experiment folder
sits: a scan from one checkout and a ``submit``ted job, which runs from Ray's uploaded copy of the working
dir (``…/session_…/runtime_resources/working_dir_files/_ray_pkg_…/experiments/…``), read the same files and
must freeze the same settings. So ``relative_inputs`` writes every absolute path inside the experiment
folder as ``./<path relative to it>`` (the file's content hash beside it says which bytes were read), and
``absolute_inputs`` turns those back into paths under the folder a run reads from. Packaged inputs keep their
``packaged…`` names, and a file outside the experiment folder keeps its absolute path (nothing relative
names it). Settings stored before this rule hold absolute paths; both functions leave those as they are, and
comparisons of such settings with today's apply ``relative_inputs`` to both sides.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

RELATIVE = "./"
"""How a recorded input path relative to the experiment folder begins."""


def experiment_folder(config_path: str) -> str | None:
    """The folder holding ``config_path`` (resolved), or None when it names no file (a spec rebuilt from
    stored settings without its config file, or a section checked without one)."""
    path = Path(config_path)
    return str(path.resolve().parent) if path.is_file() else None


def relative_inputs(value: Any, folder: str | None) -> Any:
    """``value`` (a frozen section, or any JSON) with every string that is an absolute path inside ``folder``
    written as ``./<relative path>``; unchanged without a folder."""
    if folder is None:
        return value
    root = Path(folder).resolve()

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str) and "\n" not in v and os.path.isabs(v):
            try:
                rel = Path(os.path.normpath(v)).relative_to(root)
            except ValueError:
                return v
            return RELATIVE + PurePosixPath(*rel.parts).as_posix() if rel.parts else v
        return v

    return walk(value)


def absolute_inputs(value: Any, folder: str | None) -> Any:
    """``value`` with every ``./<path>`` string (``relative_inputs``) made a path under ``folder``; unchanged
    without a folder."""
    if folder is None:
        return value

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str) and v.startswith(RELATIVE) and "\n" not in v:
            return str(Path(folder) / v[len(RELATIVE):])
        return v

    return walk(value)
