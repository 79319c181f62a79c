"""A benchmark stopped by SIGTERM (``timeout``, a CI cancel, ``kill``) stops what it started, as on any other exit.

Python's default SIGTERM ends the process at once, so the ``finally`` blocks that stop a benchmark's embedded
PostgreSQL, Ray and work folders never run and the server outlives it. ``exit_cleanly_on_sigterm`` turns the
signal into ``SystemExit(143)`` (128 + 15, what the shell reports for SIGTERM): the stack unwinds, every
``finally`` runs, and the exit code still says the run was terminated.
"""

from __future__ import annotations

import signal
import sys


def exit_cleanly_on_sigterm() -> None:
    """Make SIGTERM raise SystemExit(128 + 15) in the main thread, so ``finally`` blocks run before exiting."""
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
