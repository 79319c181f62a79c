"""A benchmark stopped by SIGTERM stops the catalog server it started (bench/on_term.py), as on any exit.

A real embedded PostgreSQL is started by a child process shaped like a benchmark (start in ``try``, stop in
``finally``); the test sends it SIGTERM. Without the handler Python dies at once and the server outlives it
(checked first, then stopped here); with it, ``finally`` runs and the server is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mirrorscan.cluster.catalog import embedded_pg

REPO = Path(__file__).resolve().parents[1]
CHILD = """
import importlib.util, time
from pathlib import Path
from mirrorscan.cluster.catalog import embedded_pg
if {handler!r}:
    spec = importlib.util.spec_from_file_location("on_term", {on_term!r})
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.exit_cleanly_on_sigterm()
root = Path({root!r})
try:
    embedded_pg.ensure_running(root, durable=False)
    print("ready", flush=True)
    time.sleep(120)
finally:
    embedded_pg.stop(root)
"""


def _terminated_child(root: Path, handler: bool) -> int:
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(on_term=str(REPO / "bench" / "on_term.py"),
                                                                 handler=handler, root=str(root))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        assert embedded_pg.running_dsn(root) is not None
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("handler", [False, True], ids=["default-sigterm", "exit-cleanly"])
def test_sigterm_stops_the_catalog_server_only_with_the_handler(handler):
    base = Path(tempfile.mkdtemp(prefix="mirrorscan-onterm-"))
    base.chmod(0o755)                      # the server runs as the postgres user, who must enter the folder
    root = base / "catalog"
    try:
        code = _terminated_child(root, handler)
        if handler:
            assert code == 143
            deadline = time.monotonic() + 30
            while embedded_pg.running_dsn(root) is not None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert embedded_pg.running_dsn(root) is None
        else:
            assert code == -signal.SIGTERM
            assert embedded_pg.running_dsn(root) is not None      # the leak the handler exists for
    finally:
        embedded_pg.stop(root)
        subprocess.run(["rm", "-rf", str(base)], check=False)
