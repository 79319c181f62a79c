"""Two scans of one open_scan experiment at once would both ask the cells neither holds yet: the second is
refused with one line naming the running invocation, and makes no invocation. Real PostgreSQL; no Ray (the
refusal comes before any cell runs)."""

from __future__ import annotations

import json
import uuid

import pytest

from mirrorscan.cluster.catalog import runs
from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.grid.errors import ConfigError
from mirrorscan.jobs.scan import run_scan


def test_a_second_scan_of_an_appending_experiment_is_refused_while_the_first_runs(tmp_path, tiny_dir, catalog_dsn):
    folder = tmp_path / "busy"
    folder.mkdir()
    (folder / "probes.csv").write_text("query_id,query\nq1,Tea or coffee?\n")
    (folder / "config.json").write_text(json.dumps({
        "instrument": "open_scan", "models": [{"model": str(tiny_dir), "label": "tiny"}],
        "open_scan": {"probes": "probes.csv", "sampling": {"max_tokens": 4}, "report_max_tokens": 4}}))
    running = str(uuid.uuid4())
    with Catalog(catalog_dsn) as catalog:   # a scan of the same experiment, its driver alive on another host
        catalog.create_invocation({"invocation_id": running, "experiment": "busy", "instrument": "open_scan",
                                   "settings": {"experiment": "busy"}, "settings_hash": "x", "status": "running"})
        driver = runs.acquire(catalog, running, runs.DriverStart({}, resumed=False), host="other-host", pid=4242)
    with pytest.raises(ConfigError) as refused:
        run_scan(str(folder), store=str(tmp_path / "store"), catalog_dsn=catalog_dsn, quiet=True)
    assert f"is being scanned by invocation {running} (driver on host other-host, pid 4242" in refused.value.problem
    assert "\n" not in str(refused.value)
    with Catalog(catalog_dsn) as catalog:
        assert catalog.execute("SELECT count(*) FROM scan_invocations")[0][0] == 1   # the refused scan made none
        driver.end(catalog)   # that driver ends: the next scan may run (refused here only by a stale lease)
        assert runs.refuse_concurrent_append(catalog, "busy") is None
