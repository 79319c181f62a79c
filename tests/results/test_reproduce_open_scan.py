"""A reproduction of an appending instrument's invocation (open_scan) runs its full grid, though every cell is
held by the invocation it reproduces, and its rows never count as holding cells for later scans."""

from __future__ import annotations

import json

import pyarrow.compute as pc
import pytest

PROBES = "query_id,query\nq1,Tea or coffee?\nq2,Which season do you like best?\n"


@pytest.mark.timeout(900)
def test_a_reproduction_runs_the_full_grid_and_holds_no_cells(tmp_path, tiny_dir, catalog_dsn, ray_local):
    from cluster.stages import earlier_rows
    from cluster.store import open_store
    from jobs.scan import NO_INVOCATION, Reproduction, instrument_ref, run_scan, run_spec
    from results.diff import diff_targets
    from results.reproduce import ITEMS_FROM_FILES, plan

    folder = tmp_path / "exps" / "os_repro"
    folder.mkdir(parents=True)
    (folder / "probes.csv").write_text(PROBES)
    (folder / "config.json").write_text(json.dumps({
        "instrument": "open_scan", "samples": 1, "batch_size": 8, "seed": 3,
        "models": [{"model": str(tiny_dir), "label": "tiny"}],
        "open_scan": {"probes": "probes.csv", "sampling": {"max_tokens": 6}, "report_max_tokens": 4}}))
    store_uri = str(tmp_path / "store")
    first = run_scan(str(folder), store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    assert first.status == "complete" and first.counts["ok"] == 6   # 2 answers, 2 cold, 2 post-hoc
    again = run_scan(str(folder), store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    assert again.invocation_id == ""   # a plain scan: every cell is held, nothing to do

    p = plan(first.invocation_id, dsn=catalog_dsn)
    assert p.items_from == ITEMS_FROM_FILES
    copy = run_spec(p.spec, catalog_dsn=catalog_dsn, quiet=True,
                    reproduction=Reproduction(p.original.invocation_id, p.cells, p.submitted, p.sources))
    assert copy.status == "complete" and copy.counts["cells"] == copy.counts["ok"] == 6
    assert "held_elsewhere" not in copy.counts   # nothing of the original counted as held

    store = open_store(store_uri)
    held_by = earlier_rows(store, "os_repro", NO_INVOCATION, instrument_ref(p.spec.settings()))
    assert set(held_by.column("invocation_id").to_pylist()) == {first.invocation_id}   # the copy holds nothing
    copy_rows = store.read("os_repro", copy.invocation_id, columns=["probe_id", "error"])
    assert copy_rows.num_rows == 6 and pc.all(pc.is_null(copy_rows.column("error"))).as_py()

    d = diff_targets(first.invocation_id, copy.invocation_id, dsn=catalog_dsn)
    assert d.shared == 6 and d.same_answer.rate == 1.0   # seeded sampling, same batches: the same text and ratings
    assert set(d.by["envelope"]) == {"answer", "cold", "posthoc"}
