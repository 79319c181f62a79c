"""How a verb reports the errors a user can fix: one line on stderr, no traceback, a fixed exit code."""

from __future__ import annotations

from mirrorscan.grid.errors import EXIT_CATALOG, EXIT_CONFIG, reports_user_errors  # noqa: F401 - the verbs' one way to report
