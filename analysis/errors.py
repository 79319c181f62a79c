"""The error the statistics raise for input a user can fix (unbalanced design, unknown column, NaN scores).

It is a :class:`grid.errors.ConfigError` (the project's one user-error type, so the CLI prints it on one
line without a traceback) and a :class:`ValueError` (so numeric callers can catch it the usual way).
Analysis functions do not know which file their arrays came from; ``file`` is empty unless the caller
that read the file fills it in (``AnalysisError(..., file=path)`` or ``err.with_file(path)``).
"""

from __future__ import annotations

from mirrorscan.grid.errors import ConfigError


class AnalysisError(ConfigError, ValueError):
    """Input to a statistic that cannot be analysed as given; the message names the field and the fix.

    Attributes (from ConfigError):
        file: the input file, or "" when the statistic was called on arrays.
        field: the column, facet or argument at fault, e.g. ``item`` or ``labels``.
        problem: what is wrong, with numbers where there are any.
        fix: what to do about it, imperative.
    """

    def __init__(self, field: str, problem: str, fix: str, file: str = ""):
        super().__init__(file, field, problem, fix)

    def with_file(self, file: str) -> "AnalysisError":
        """The same error, naming the file the analysed table came from."""
        return AnalysisError(self.field, self.problem, self.fix, file=file)
