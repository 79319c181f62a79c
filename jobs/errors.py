"""How a verb reports the errors a user can fix: one line on stderr, no traceback, a fixed exit code."""

from __future__ import annotations

import functools
import sys

from grid.errors import CatalogError, ConfigError

EXIT_CONFIG = 2
"""Bad input (config, probe set, envelopes, flags, analysis input): nothing was written."""
EXIT_CATALOG = 1
"""The catalog refused or could not be reached."""


def reports_user_errors(main):
    """Decorate a verb's ``main``: ConfigError → ``error: …`` and exit 2; CatalogError → ``catalog error: …`` and exit 1."""
    @functools.wraps(main)
    def wrapper(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        except CatalogError as exc:
            print(f"catalog error: {exc}", file=sys.stderr)
            return EXIT_CATALOG
    return wrapper
