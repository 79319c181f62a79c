"""Driver runs and their liveness lease (catalog table scan_runs): a resume is refused while another host's
driver holds a fresh lease, a stale lease is taken over and recorded, a driver that cannot renew stops, and
the rows are append-only but for the lease."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from mirrorscan.cluster.catalog import runs
from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.grid.errors import CatalogError, ConfigError


@pytest.fixture
def invocation(catalog_dsn):
    invocation_id = str(uuid.uuid4())
    with Catalog(catalog_dsn) as catalog:
        catalog.create_invocation({"invocation_id": invocation_id, "experiment": "e", "instrument": "forced_choice",
                                   "settings": {}, "settings_hash": "x", "status": "running"})
    return catalog_dsn, invocation_id


def test_a_fresh_lease_on_another_host_refuses_and_a_stale_one_is_taken_over(invocation):
    dsn, invocation_id = invocation
    at_a, at_b = runs.DriverStart({"store": "/a"}, resumed=False), runs.DriverStart({"store": "/b"}, resumed=True)
    with Catalog(dsn) as catalog:
        first = runs.acquire(catalog, invocation_id, at_a, host="host-a", pid=111)
        with pytest.raises(ConfigError) as refused:
            runs.acquire(catalog, invocation_id, at_b, host="host-b", pid=222)
        assert "host host-a (pid 111)" in str(refused.value) and refused.value.field == "--resume"
        catalog.execute("UPDATE scan_runs SET heartbeat_at = now() - interval '1 hour' WHERE run_id = %s",
                        [first.run_id])   # host-a's driver died an hour ago
        second = runs.acquire(catalog, invocation_id, at_b, host="host-b", pid=222)
        assert second.took_over == first.run_id
        rows = catalog.execute("SELECT host, pid, resumed, took_over::text, execution FROM scan_runs "
                               "WHERE invocation_id = %s ORDER BY started_at", [invocation_id])
    assert [(h, p, r, t) for h, p, r, t, _ in rows] == [("host-a", 111, False, None), ("host-b", 222, True, first.run_id)]
    assert [e["store"] for *_, e in rows] == ["/a", "/b"]   # each start's execution settings kept


def test_an_ended_run_a_dead_local_driver_or_this_process_does_not_block(invocation):
    import os
    import socket
    import subprocess
    import sys

    dsn, invocation_id = invocation
    new, resumed = runs.DriverStart({}, resumed=False), runs.DriverStart({}, resumed=True)
    with Catalog(dsn) as catalog:
        done = runs.acquire(catalog, invocation_id, new, host="host-a", pid=1)
        done.end(catalog)
        runs.acquire(catalog, invocation_id, resumed, host="host-b", pid=2)      # host-a had ended
        again = runs.acquire(catalog, invocation_id, resumed, host="host-b", pid=2)   # same process
        assert again.took_over is not None
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True)
        here = socket.gethostname()
        again.end(catalog)
        killed = runs.acquire(catalog, invocation_id, resumed, host=here, pid=int(gone.stdout))
        after = runs.acquire(catalog, invocation_id, resumed, host=here, pid=os.getpid())
        assert after.took_over == killed.run_id   # a driver of this host whose process is gone (kill -9)
        after.end(catalog)
        runs.acquire(catalog, invocation_id, resumed, host=here, pid=1)   # pid 1 always lives
        with pytest.raises(ConfigError, match=f"host {here} \\(pid 1\\)"):
            runs.acquire(catalog, invocation_id, resumed, host=here, pid=os.getpid())


def test_runs_are_append_only_but_for_the_lease(invocation):
    dsn, invocation_id = invocation
    with Catalog(dsn) as catalog:
        run = runs.acquire(catalog, invocation_id, runs.DriverStart({"store": "/a"}, resumed=False), host="h", pid=1)
        catalog.execute("UPDATE scan_runs SET heartbeat_at = now() WHERE run_id = %s", [run.run_id])
        with pytest.raises(CatalogError, match="only heartbeat_at and ended_at"):
            catalog.execute("UPDATE scan_runs SET execution = '{}' WHERE run_id = %s", [run.run_id])
        with pytest.raises(CatalogError, match="append-only"):
            catalog.execute("DELETE FROM scan_runs WHERE run_id = %s", [run.run_id])


def test_the_heartbeat_renews_and_a_driver_that_cannot_renew_stops(invocation):
    dsn, invocation_id = invocation
    with Catalog(dsn) as catalog:
        run = runs.acquire(catalog, invocation_id, runs.DriverStart({}, resumed=False), ttl_s=2.0, host="h", pid=1)
        first_beat = catalog.execute("SELECT heartbeat_at FROM scan_runs WHERE run_id = %s", [run.run_id])[0][0]
        run.start_heartbeat()    # renews every ttl/6 = 0.33 s: a busy machine may delay a few, not six in a row
        time.sleep(4.5)          # 2.25 time-to-lives: alive only because it renews
        run.check()
        beat = catalog.execute("SELECT heartbeat_at FROM scan_runs WHERE run_id = %s", [run.run_id])[0][0]
        assert beat > first_beat
        run.end(catalog)
    lost = runs.DriverRun(str(uuid.uuid4()), invocation_id,
                          "postgresql://postgres@127.0.0.1:9/none?connect_timeout=1", ttl_s=0.3)
    lost.start_heartbeat()   # the catalog is unreachable: no renewal ever lands
    deadline = time.monotonic() + 10
    while not lost.lost and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(runs.LeaseLost, match="stops"):
        lost.check()
    lost.end()


def test_a_resume_while_another_hosts_driver_runs_is_refused_then_takes_over_a_stale_lease(tmp_path, tiny_dir,
                                                                                          catalog_dsn, monkeypatch):
    from mirrorscan.cluster.scan.run import ScanRun
    from mirrorscan.jobs import scan

    exp = tmp_path / "leased"
    exp.mkdir()
    (exp / "pairs.csv").write_text("pair_id,word_a,word_b\nvw,vodka,whiskey\n")
    (exp / "config.json").write_text(json.dumps({"instrument": "forced_choice",
                                                 "models": [{"model": str(tiny_dir), "label": "tiny"}],
                                                 "forced_choice": {"probe_set": "pairs.csv"}}))
    store = str(tmp_path / "store")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(ScanRun, "run_cells", interrupted)   # a driver that stops before any cell: no Ray needed
    with pytest.raises(KeyboardInterrupt):
        scan.run_scan(str(exp), store=store, catalog_dsn=catalog_dsn, quiet=True)
    with Catalog(catalog_dsn) as catalog:
        (invocation_id,) = catalog.execute("SELECT invocation_id::text FROM scan_invocations")[0]
        other = runs.acquire(catalog, invocation_id, runs.DriverStart({}, resumed=True), host="gpu-node-7",
                             pid=4242)   # another host
    monkeypatch.setattr(ScanRun, "run_cells", lambda *a, **k: pytest.fail("ran cells under another driver's lease"))
    with pytest.raises(ConfigError, match="gpu-node-7 \\(pid 4242\\)"):
        scan.run_scan(str(exp), resume=True, store=store, catalog_dsn=catalog_dsn, quiet=True)
    with Catalog(catalog_dsn) as catalog:
        catalog.execute("UPDATE scan_runs SET heartbeat_at = now() - interval '1 hour' WHERE run_id = %s",
                        [other.run_id])
    monkeypatch.setattr(ScanRun, "run_cells", lambda *a, **k: None)
    result = scan.run_scan(str(exp), resume=True, store=store, catalog_dsn=catalog_dsn, quiet=True)
    assert result.invocation_id == invocation_id
    with Catalog(catalog_dsn) as catalog:
        taken = catalog.execute("SELECT took_over::text, ended_at IS NOT NULL FROM scan_runs WHERE invocation_id = %s "
                                "ORDER BY started_at DESC LIMIT 1", [invocation_id])
    assert taken == [(other.run_id, True)]


def test_the_docs_say_a_resume_takes_a_killed_local_drivers_lease_at_once():
    """The rule above as the pages a user reads after ``kill -9`` tell it: none asks to wait out the lease's 120 s
    when the killed driver ran on the resuming host (they did)."""
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    row = next(line for line in (docs / "operations.md").read_text().splitlines()
               if line.startswith("| the driver is killed (`kill -9`"))
    assert "at once" in row and "refused while that lease still looks fresh" not in row, row
    for page in ("catalog.md", "experiments.md"):
        text = " ".join((docs / page).read_text().split())
        assert "its process is gone" in text and "taken over at once" in text, page
