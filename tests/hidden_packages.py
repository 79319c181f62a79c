"""Run Python with some installed packages hidden, as if they were not installed.

``hiding(names)`` is source for the start of a ``python -c`` program: it wraps every finder of ``sys.meta_path`` so
that the named top-level packages (and their submodules) are not found. ``importlib.util.find_spec`` then returns
None for them and ``import`` raises ModuleNotFoundError, exactly as when they are missing; everything else imports
as usual. Only that process is affected (a Ray worker it started would not be).
"""

from __future__ import annotations


def hiding(names: list[str]) -> str:
    """Python source that hides the top-level packages ``names`` from this process's imports (module docstring)."""
    return f'''
import sys as _sys


class _Hidden:
    """A meta-path finder that finds nothing of {names!r} and defers everything else to the finder it wraps."""

    def __init__(self, finder):
        self._finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {set(names)!r}:
            return None
        find = getattr(self._finder, "find_spec", None)
        return find(name, path, target) if find is not None else None

    def __getattr__(self, attr):
        return getattr(self._finder, attr)


assert not any(n.split(".")[0] in {set(names)!r} for n in _sys.modules), "already imported"
_sys.meta_path[:] = [_Hidden(f) for f in _sys.meta_path]
'''
