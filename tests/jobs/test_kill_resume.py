"""kill -9 in the middle of a scan, then ``--resume``: every cell exactly once among successful rows."""

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


def test_kill_9_mid_run_then_resume_finishes_the_grid_exactly(tmp_path, tiny_dir, catalog_dsn):
    exp = tmp_path / "killme"
    exp.mkdir()
    pairs = ["pair_id,word_a,word_b"] + [f"p{i},alpha{i},beta{i}" for i in range(20)]
    (exp / "pairs.csv").write_text("\n".join(pairs) + "\n")
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": str(tiny_dir), "label": "tiny"}], "probe_set": "pairs.csv",
        "envelopes": ["english_strict", "json_schema"], "max_tokens": 12, "batch_size": 4}))
    n_cells = 20 * 2 * 2
    store_dir = tmp_path / "store"
    env = {**os.environ, "MIRRORSCAN_CATALOG_DSN": catalog_dsn, "MIRRORSCAN_STORE": str(store_dir)}
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
    with Catalog(catalog_dsn) as catalog:
        inv = catalog.get_invocation(invocation_id)
    assert inv["status"] == "complete" and inv["counts"]["ok"] == n_cells
