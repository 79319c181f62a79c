"""The one error type a user can cause, and how it is worded.

Every message names the file, the field and the fix, on one line, so the CLI can print it without a
traceback and exit with code 2 before anything is written.
"""

from __future__ import annotations


class ConfigError(Exception):
    """A problem in user input (config, probe set, envelopes, flags) that the user can fix.

    Attributes:
        file: the file the problem is in (path as given), or "" when it is not a file (a flag).
        field: the field, column or flag at fault, e.g. ``models[1].label`` or ``items.csv:14:query``.
        fix: what the user should do, imperative.
    """

    def __init__(self, file: str, field: str, problem: str, fix: str):
        self.file = str(file)
        self.field = field
        self.problem = problem
        self.fix = fix
        where = f"{self.file}: " if self.file else ""
        super().__init__(f"{where}{field}: {problem} — fix: {fix}")


class CatalogError(Exception):
    """The catalog refused or failed an operation; the message says which and why, in plain words."""
