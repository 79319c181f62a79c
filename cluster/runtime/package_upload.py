"""The mirrorscan package as a job ships it: one folder named ``mirrorscan`` for Ray's ``py_modules``.

The installed package maps folders at the top of the repository under one name (``pyproject.toml``'s
``package-dir``: ``mirrorscan.grid`` is ``grid/``). A cluster's nodes need not have it installed: ``submit``
copies the package's folders into that one shape and Ray uploads it with the job, so the job and every
worker it starts import exactly the code that was submitted.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

PARTS = ("grid", "cluster", "jobs", "actors", "analysis", "results", "instruments")
"""The subpackages of ``mirrorscan`` that live in their own top-level folders."""

_CACHES = ("__pycache__", "*.pyc", "*.pyo")
_SKIP = shutil.ignore_patterns(*_CACHES)


def package_folder(name: str) -> Path:
    """The folder an importable package ``name`` is read from, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{name} is not an installed package: run `pip install -e .` in the checkout")
    return Path(list(spec.submodule_search_locations)[0])


def stage_package(dest: Path) -> Path:
    """Copy the installed ``mirrorscan`` package into ``dest/mirrorscan`` (its parts as subfolders, caches
    left out) and return that folder, ready to be a ``py_modules`` entry."""
    root = Path(dest) / "mirrorscan"
    # the root folder alone: an editable install keeps the parts elsewhere, a wheel install inside it
    shutil.copytree(package_folder("mirrorscan"), root, ignore=shutil.ignore_patterns(*_CACHES, *PARTS))
    for part in PARTS:
        shutil.copytree(package_folder(f"mirrorscan.{part}"), root / part, ignore=_SKIP)
    return root
