"""Stopping a scan from outside, as a scheduler or a crash would: shared by the kill -9 tests."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil


def kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the scan and everything in its session (a local Ray it started: head, raylet and workers)."""
    sid = os.getsid(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getsid(p.pid) == sid:
                p.kill()
        except (ProcessLookupError, psutil.Error, PermissionError):
            pass


def wait_for_parts(store, experiment: str, proc: subprocess.Popen, at_least: int, timeout_s: float = 240) -> list[str]:
    """The store's parts of ``experiment`` once at least ``at_least`` have landed while ``proc`` runs."""
    deadline, parts = time.monotonic() + timeout_s, []
    while time.monotonic() < deadline and proc.poll() is None:
        parts = store.list_parts(experiment)
        if len(parts) >= at_least:
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the scan finished before it could be stopped; make the grid bigger"
    assert len(parts) >= at_least, "not enough parts landed within the deadline"
    return parts
