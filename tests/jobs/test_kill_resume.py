"""kill -9 in the middle of a scan, then ``--resume``: every cell exactly once among successful rows.

The scan runs an instrument that lives outside the package (``tests/plugin/echo_instrument.py``, named by
its import path), so the same test shows that a plug-in runs through scan, resume, sql and analyze on a
multi-process Ray with nothing changed but its own file and ``PYTHONPATH``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.compute as pc

from cluster.catalog import Catalog
from cluster.store import open_store

REPO = Path(__file__).resolve().parents[2]
PLUGIN_DIR = REPO / "tests" / "plugin"


def kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the scan and everything in its session (its local Ray head, raylet and workers)."""
    sid = os.getsid(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getsid(p.pid) == sid:
                p.kill()
        except (ProcessLookupError, psutil.Error, PermissionError):
            pass


def test_kill_9_mid_run_then_resume_finishes_the_grid_exactly(tmp_path, tiny_dir, catalog_dsn, monkeypatch):
    exp = tmp_path / "killme"
    exp.mkdir()
    items = [f"alpha{i}" for i in range(80)]
    (exp / "config.json").write_text(json.dumps({
        "instrument": "echo_instrument:ECHO", "models": [{"model": str(tiny_dir), "label": "tiny"}],
        "echo": {"items": items}, "max_tokens": 12, "batch_size": 4}))
    n_cells = len(items)
    store_dir = tmp_path / "store"
    env = {**os.environ, "MIRRORSCAN_CATALOG_DSN": catalog_dsn, "MIRRORSCAN_STORE": str(store_dir),
           "PYTHONPATH": os.pathsep.join([str(PLUGIN_DIR), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    cmd = [sys.executable, "-m", "jobs.scan", str(exp), "--quiet"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = open_store(str(store_dir))
    deadline = time.monotonic() + 240
    parts: list[str] = []
    while time.monotonic() < deadline and proc.poll() is None:
        parts = store.list_parts("killme")
        if len(parts) >= 3:
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the scan finished before it could be killed; make the grid bigger"
    assert len(parts) >= 3, "no parts landed within the deadline"
    kill_session(proc)

    invocation_id = parts[0].split("/")[-3]
    rows_before = store.read("killme", invocation_id)
    assert 0 < rows_before.num_rows < n_cells
    with Catalog(catalog_dsn) as catalog:
        assert catalog.get_invocation(invocation_id)["status"] == "running"   # kill -9 leaves no chance to say otherwise
    # a half-written part left by the crash must not be read and is removed by resume
    stale = store_dir / "killme" / invocation_id / "traces" / ".part-crashed.parquet.tmp"
    stale.write_bytes(b"PAR1 partial")

    done = subprocess.run(cmd + ["--resume"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"invocation {invocation_id}" in done.stdout and "status complete" in done.stdout
    assert not stale.exists()
    rows = store.read("killme", invocation_id)
    ok = rows.filter(pc.is_null(rows.column("error")))
    keys = list(zip(ok["probe_id"].to_pylist(), ok["sample"].to_pylist()))
    assert len(keys) == len(set(keys)) == n_cells
    # rows written before the kill were kept, not redone
    before = set(zip(rows_before["probe_id"].to_pylist(), rows_before["sample"].to_pylist()))
    assert before <= set(keys) and ok.num_rows == rows.num_rows

    # the plug-in's own columns were written in the actors, and sql and analyze read them through it
    from jobs import analyze, sql

    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    from echo_instrument import ECHO

    from grid.trace_schema import trace_schema

    rows = store.read("killme", invocation_id, schema=trace_schema(ECHO.columns))
    assert sorted(rows["echo_item"].to_pylist()) == sorted(items) and rows["instrument"].unique().to_pylist() == ["echo"]
    counted = sql.query(f"SELECT count(*) AS n FROM traces WHERE invocation_id = '{invocation_id}' "
                        "AND instrument = 'echo'", str(store_dir), catalog_dsn)
    assert counted["n"].to_pylist() == [n_cells]
    report = analyze.analyze_invocation(invocation_id, catalog_dsn=catalog_dsn)
    assert report.instrument == "echo" and report.analysis.numbers["answered"] == n_cells
    assert report.analysis.numbers["echoed"] == sum(1 for e in rows["echoed"].to_pylist() if e)
    assert {p.rsplit("/", 1)[1] for p in report.outputs} == {"summary.json", "per_item.parquet"}
    with Catalog(catalog_dsn) as catalog:
        inv = catalog.get_invocation(invocation_id)
    assert inv["status"] == "complete" and inv["counts"]["ok"] == n_cells


def test_sigterm_mid_run_ends_the_scan_interrupted(tmp_path, tiny_dir, catalog_dsn):
    """A scheduler stops a job with SIGTERM: the scan stops as Ctrl-C stops it, exit code 130, and the
    catalog says ``interrupted`` (not ``failed``)."""
    exp = tmp_path / "termme"
    exp.mkdir()
    (exp / "config.json").write_text(json.dumps({
        "instrument": "echo_instrument:ECHO", "models": [{"model": str(tiny_dir), "label": "tiny"}],
        "echo": {"items": [f"beta{i}" for i in range(80)]}, "max_tokens": 12, "batch_size": 4}))
    store_dir = tmp_path / "store"
    env = {**os.environ, "MIRRORSCAN_CATALOG_DSN": catalog_dsn, "MIRRORSCAN_STORE": str(store_dir),
           "PYTHONPATH": os.pathsep.join([str(PLUGIN_DIR), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    proc = subprocess.Popen([sys.executable, "-m", "jobs.scan", str(exp), "--quiet"], cwd=REPO, env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    store = open_store(str(store_dir))
    try:
        deadline, parts = time.monotonic() + 240, []
        while time.monotonic() < deadline and proc.poll() is None and len(parts) < 2:
            parts = store.list_parts("termme")
            time.sleep(0.1)
        assert proc.poll() is None and len(parts) >= 2, "no parts landed while the scan ran"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        kill_session(proc) if proc.poll() is None else None
    assert proc.returncode == 130, stderr[-2000:]
    assert "interrupted: finished parts are kept" in stderr
    with Catalog(catalog_dsn) as catalog:
        assert catalog.get_invocation(parts[0].split("/")[-3])["status"] == "interrupted"
