"""Stopping a scan from outside, as a scheduler or a crash would: shared by the kill -9 tests."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil

CTRL_C_LAUNCH = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                 "sys.argv = ['mirrorscan', *sys.argv[1:]]; runpy.run_module('mirrorscan.jobs.cli', run_name='__main__')")
"""``python -c CTRL_C_LAUNCH ARGV`` runs ``mirrorscan ARGV`` with Python's own Ctrl-C handler, as a terminal's
foreground command has it, whatever this process's SIGINT disposition. A suite started in the background by a
script (``make test &``) ignores SIGINT, every child inherits that, and a Python started with SIGINT ignored
leaves it ignored: a test that sends Ctrl-C to a plain child would then wait for nothing."""


def mirrorscan_with_ctrl_c(*argv: str) -> list[str]:
    """The command line of ``mirrorscan ARGV`` that takes Ctrl-C (``CTRL_C_LAUNCH``)."""
    import sys

    return [sys.executable, "-c", CTRL_C_LAUNCH, *argv]


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


def wait_for_driver_gone(driver_pid: int, timeout_s: float = 120) -> None:
    """Return once Ray has finished the job whose driver was ``driver_pid`` and every worker process of that job's
    own (non-detached) actors has exited, so that nothing the killed driver started can still write to a store.
    (GCS marks an actor dead when it orders the kill; the process may run a moment longer, so the pid decides.)"""
    import ray

    def exited(pid) -> bool:
        try:
            return not pid or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    deadline, job_id, waiting = time.monotonic() + timeout_s, None, ["the job"]
    while time.monotonic() < deadline:
        jobs = [j for j in ray._private.state.jobs() if j.get("DriverPid") == driver_pid]
        if jobs:
            job_id = jobs[0]["JobID"]
            own = [a for a in ray._private.state.actors().values() if a.get("JobID") == job_id and not a["IsDetached"]]
            waiting = [a["ActorClassName"] for a in own if a["State"] != "DEAD" or not exited(a.get("Pid"))]
            if jobs[0].get("IsDead") and not waiting:
                return
        time.sleep(0.2)
    raise AssertionError(f"Ray still runs {waiting} of the job of driver {driver_pid} ({job_id}) after {timeout_s:.0f} s")
