"""Where a scan's engine and Ray output goes: a log file beside the invocation, never the terminal.

A scan's terminal shows the progress bar, the warnings a user must act on, and the summary. Everything else
— the lines engine actors print (vLLM's start-up, transformers' notices), which a local Ray forwards to the
driver, and what Ray's own C++ core writes to the driver's file descriptor 2 (``core_worker.cc`` notices) —
is appended to ``scan.log``: in the invocation's folder for a local store, else
``$MIRRORSCAN_HOME/logs/<experiment>/<invocation>.log``. A resume appends to the same file.

How: while a ``RunLog`` is open, descriptor 2 points at the log file, ``sys.stderr`` (when it was the
process's real stderr) is replaced by a stream on a copy of the terminal's descriptor, so Python-level
messages still reach the user, and Ray's forwarded worker output is written to the file instead of
``sys.stderr``. Closing restores the first two; forwarded worker lines that still arrive in the next
``LATE_S`` seconds (engine actors tearing down after the summary) are appended to the same file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

RAY_HANDLER = "ray_print_logs"
"""Name under which Ray's driver registers the printer of forwarded worker output."""
OWN_HANDLER = "mirrorscan_run_log"


def log_path(store, experiment: str, invocation_id: str) -> Path:
    """The log file of an invocation: ``scan.log`` in its folder of a local store, else under the home's logs."""
    if store.is_local:
        return Path(store.invocation_dir(experiment, invocation_id)) / "scan.log"
    from mirrorscan.cluster.home import subdir

    return subdir("logs") / experiment / f"{invocation_id}.log"


class RunLog:
    """A context manager that sends engine and Ray output to ``path`` (module docstring)."""

    current: RunLog | None = None
    """The log open in this process, if any (``attach_ray_output`` reaches it)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._file = None
        self._saved_fd: int | None = None
        self._saved_stderr = None
        self._ray_attached = False

    def __enter__(self) -> RunLog:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", buffering=1, encoding="utf-8", errors="replace")
        sys.stderr.flush()
        self._saved_fd = os.dup(2)
        real = _is_process_stderr(sys.stderr)
        os.dup2(self._file.fileno(), 2)
        if real:   # Python-level messages keep reaching the terminal
            self._saved_stderr = sys.stderr
            sys.stderr = os.fdopen(os.dup(self._saved_fd), "w", buffering=1, encoding="utf-8", errors="replace")
        self.attach_ray()
        RunLog.current = self
        return self

    def attach_ray(self) -> None:
        """Write Ray's forwarded worker output to the log (call again once Ray has started; idempotent)."""
        if self._ray_attached or "ray" not in sys.modules or not sys.modules["ray"].is_initialized():
            return
        try:
            from ray._private import worker as ray_worker
        except ImportError:   # another Ray layout: its output stays on the terminal
            return
        dispatcher = ray_worker.global_worker_stdstream_dispatcher
        printer = dict(getattr(dispatcher, "handlers", ())).get(RAY_HANDLER)
        if printer is None:   # log_to_driver off, or another Ray layout: nothing is forwarded here
            return
        self._ray_printer = getattr(printer, "original", printer)   # an earlier scan's late-lines handler: Ray's own
        dispatcher.remove_handler(RAY_HANDLER)
        file = self._file
        dispatcher.add_handler(OWN_HANDLER, lambda data: ray_worker.print_worker_logs(data, file))
        self._ray_attached = True

    def __exit__(self, *exc) -> None:
        RunLog.current = None
        if self._ray_attached:
            from ray._private import worker as ray_worker

            dispatcher = ray_worker.global_worker_stdstream_dispatcher
            dispatcher.remove_handler(OWN_HANDLER)
            dispatcher.add_handler(RAY_HANDLER, _late_lines(self.path, self._ray_printer, ray_worker.print_worker_logs))
            self._ray_attached = False
        if self._saved_stderr is not None:
            sys.stderr.flush()
            sys.stderr.close()
            sys.stderr, self._saved_stderr = self._saved_stderr, None
        if self._saved_fd is not None:
            os.dup2(self._saved_fd, 2)
            os.close(self._saved_fd)
            self._saved_fd = None
        if self._file is not None:
            self._file.close()
            self._file = None


LATE_S = 120.0
"""How long after a scan's log closes the lines its engine actors still print (their teardown: vLLM's engine
shutdown, which comes after the summary) are appended to that log rather than shown on the terminal."""


def _late_lines(path: Path, printer, print_worker_logs):
    """A forwarded-output handler that appends to ``path`` for ``LATE_S`` seconds, then hands every line to
    Ray's own ``printer`` (the terminal) as before. The next scan's log replaces it."""
    import time

    until = time.monotonic() + LATE_S

    def handle(data) -> None:
        if time.monotonic() > until:
            printer(data)
            return
        with open(path, "a", encoding="utf-8", errors="replace") as file:
            print_worker_logs(data, file)
    handle.original = printer
    return handle


def attach_ray_output() -> None:
    """After Ray has started: send its forwarded worker output to the open ``RunLog`` (no-op without one)."""
    if RunLog.current is not None:
        RunLog.current.attach_ray()


def _is_process_stderr(stream) -> bool:
    """Whether ``stream`` writes to descriptor 2 (not a test's capture object or a replaced stream)."""
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False
