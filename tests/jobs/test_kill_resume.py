"""SIGTERM, then kill -9, in the middle of a scan, then ``--resume``: every cell exactly once among successful rows.

The scan runs an instrument that lives outside the package (``tests/plugin/echo_instrument.py``, named by
its import path), so the same test shows that a plug-in runs through scan, resume, sql and analyze on a
multi-process Ray with nothing changed but its own file and ``PYTHONPATH``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
from processes import kill_session, wait_for_driver_gone, wait_for_parts

from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.store.traces import open_store

REPO = Path(__file__).resolve().parents[2]
PLUGIN_DIR = REPO / "tests" / "plugin"


def cell_keys(table) -> set:
    return set(zip(table["probe_id"].to_pylist(), table["sample"].to_pylist()))


def test_sigterm_then_kill_9_mid_run_then_resume_finishes_the_grid_exactly(tmp_path, tiny_dir, catalog_dsn,
                                                                           ray_local):
    """The CLI scan, on a local Ray of its own, is stopped with SIGTERM (a scheduler's stop: exit 130, status
    ``interrupted``); resumed from the CLI as a driver joined to a running Ray (as on a cluster) and killed
    with -9 mid-run (status stays ``running``, a half-written part is left); then resumed to the end: every
    cell exactly once among successful rows, nothing written twice."""
    exp = tmp_path / "killme"
    exp.mkdir()
    items = [f"alpha{i}" for i in range(120)]
    (exp / "config.json").write_text(json.dumps({
        "instrument": "echo_instrument:ECHO", "models": [{"model": str(tiny_dir), "label": "tiny"}],
        "echo": {"items": items}, "max_tokens": 12, "batch_size": 4}))
    n_cells = len(items)
    store_dir = tmp_path / "store"
    env = {**os.environ, "MIRRORSCAN_CATALOG_DSN": catalog_dsn, "MIRRORSCAN_STORE": str(store_dir),
           "PYTHONPATH": os.pathsep.join([str(PLUGIN_DIR), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    cmd = [sys.executable, "-m", "mirrorscan.jobs.scan", str(exp), "--quiet"]
    store = open_store(str(store_dir))

    # 1. SIGTERM: stops like Ctrl-C
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        parts = wait_for_parts(store, "killme", proc, 2)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            kill_session(proc)
    invocation_id = parts[0].split("/")[-3]
    assert proc.returncode == 130 and "interrupted: finished parts are kept" in stderr, stderr[-2000:]
    with Catalog(catalog_dsn) as catalog:
        assert catalog.get_invocation(invocation_id)["status"] == "interrupted"
    after_term = store.read("killme", invocation_id)

    # 2. resumed from the command line by a driver that joins the running (shared) Ray, then kill -9 mid-run:
    #    the driver dies; Ray ends the job's engine actors
    joined = {**env, "RAY_ADDRESS": ray_local.get_runtime_context().gcs_address}
    proc = subprocess.Popen(cmd + ["--resume"], cwd=REPO, env=joined, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_parts(store, "killme", proc, len(store.list_parts("killme")) + 3)
    kill_session(proc)
    wait_for_driver_gone(proc.pid)   # the job's engine actors may finish a batch before Ray ends them
    rows_before = store.read("killme", invocation_id)
    assert after_term.num_rows < rows_before.num_rows < n_cells
    assert cell_keys(after_term) <= cell_keys(rows_before)
    with Catalog(catalog_dsn) as catalog:
        assert catalog.get_invocation(invocation_id)["status"] == "running"   # kill -9 leaves no chance to say otherwise
    # a half-written part left by the crash must not be read and is removed by resume
    stale = store_dir / "killme" / invocation_id / "traces" / ".part-crashed.parquet.tmp"
    stale.write_bytes(b"PAR1 partial")

    # 3. resumed to the end (in this process, on the shared multi-process Ray; the plug-in is importable there)
    from mirrorscan.jobs.scan import run_scan

    done = run_scan(str(exp), resume=True, store=str(store_dir), catalog_dsn=catalog_dsn, quiet=True)
    assert done.invocation_id == invocation_id and done.status == "complete"
    assert not stale.exists()
    rows = store.read("killme", invocation_id)
    ok = rows.filter(pc.is_null(rows.column("error")))
    keys = list(zip(ok["probe_id"].to_pylist(), ok["sample"].to_pylist()))
    assert len(keys) == len(set(keys)) == n_cells
    assert cell_keys(rows_before) <= set(keys) and ok.num_rows == rows.num_rows   # kept, not redone

    # the plug-in's own columns were written in the actors, and sql and analyze read them through it
    from echo_instrument import ECHO

    from mirrorscan.grid.trace_schema import trace_schema
    from mirrorscan.jobs import analyze
    from mirrorscan.results import sql as results_sql

    rows = store.read("killme", invocation_id, schema=trace_schema(ECHO.columns))
    assert sorted(rows["echo_item"].to_pylist()) == sorted(items) and rows["instrument"].unique().to_pylist() == ["echo"]
    counted = results_sql.query(f"SELECT count(*) AS n FROM traces WHERE invocation_id = '{invocation_id}' "
                        "AND instrument = 'echo'", str(store_dir), catalog_dsn)
    assert counted["n"].to_pylist() == [n_cells]
    report = analyze.analyze_invocation(invocation_id, catalog_dsn=catalog_dsn)
    assert report.instrument == "echo" and report.analysis.numbers["answered"] == n_cells
    assert report.analysis.numbers["echoed"] == sum(1 for e in rows["echoed"].to_pylist() if e)
    assert {p.rsplit("/", 1)[1] for p in report.outputs} == {"summary.json", "per_item.parquet"}
    with Catalog(catalog_dsn) as catalog:
        inv = catalog.get_invocation(invocation_id)
    assert inv["status"] == "complete" and inv["counts"]["ok"] == n_cells
