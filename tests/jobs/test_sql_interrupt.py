"""``mirrorscan sql`` stops a long query on Ctrl-C (exit 130, one line) and past ``--timeout`` (exit 2, one
line). Real DuckDB running a real query that would take hours, in a real subprocess; the session's
embedded PostgreSQL; a real local store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.store.traces import open_store

ROOT = Path(__file__).resolve().parents[2]
LONG_QUERY = "SELECT sum(a.range * b.range) AS s FROM range(1000000000) a CROSS JOIN range(1000000000) b"
"""10^18 rows: runs for hours unless stopped."""


@pytest.fixture
def world(tmp_path, catalog_dsn):
    store = tmp_path / "store"
    open_store(str(store))
    with Catalog(catalog_dsn):
        pass   # migrated
    return {"store": str(store), "dsn": catalog_dsn}


def sql_process(world, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mirrorscan.jobs.cli", "sql", LONG_QUERY, "--store", world["store"],
                             "--catalog-dsn", world["dsn"], *extra], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def query_thread_running(pid: int) -> bool:
    """Whether the process has started its query thread (named ``mirrorscan-sql`` in the OS)."""
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            if (task / "comm").read_text().strip() == "mirrorscan-sql":
                return True
        except OSError:
            continue
    return False


def test_ctrl_c_stops_a_running_query_with_exit_130_and_one_line(world):
    proc = sql_process(world, "--timeout", "0")
    try:
        deadline = time.monotonic() + 240
        while not query_thread_running(proc.pid):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the query never started"
            time.sleep(0.1)
        time.sleep(0.5)   # let DuckDB get into the join (an earlier interrupt is repeated anyway)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert lines == ["interrupted: the query was stopped (Ctrl-C); nothing was written"], err
    assert out == ""


def test_a_query_past_its_timeout_is_stopped_with_exit_2_and_one_line(world):
    proc = sql_process(world, "--timeout", "1")
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: query: ran longer than the time limit of 1 s"), err
    assert "--timeout" in lines[0] and out == ""


def test_a_negative_timeout_is_refused(world):
    out = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.cli", "sql", "SELECT 1", "--timeout", "-1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.strip().startswith("error: --timeout: is -1")
