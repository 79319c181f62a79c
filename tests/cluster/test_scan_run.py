"""The run of a scan is one object: what ``--dry-run`` prints is that object's plan, and what it executes is
the plan it states — per stage and model, the cells sent to the engines — for a new invocation and for a
resume. Real tiny model, real Ray, real PostgreSQL."""

from __future__ import annotations

import io
import json
import uuid

import pytest

from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.scan.inputs import content_hashes
from mirrorscan.cluster.scan.records import ScanOptions
from mirrorscan.cluster.scan.run import ScanRun
from mirrorscan.cluster.scan.stages import grid_cells
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.spec import load_spec
from mirrorscan.grid.trace_schema import to_trace_table
from mirrorscan.jobs.dry_run import dry_run, print_plan

PAIRS = "pair_id,word_a,word_b\nvw,vodka,whiskey\ncd,cat,dog\n"


def experiment(tmp_path, tiny_dir):
    exp = tmp_path / "fc_run"
    exp.mkdir()
    (exp / "pairs.csv").write_text(PAIRS)
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": str(tiny_dir), "label": "tiny", "max_tokens": 4}],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict"]}, "samples": 2}))
    return exp


def printed(plans) -> str:
    out = io.StringIO()
    print_plan(plans, out)
    return out.getvalue()


@pytest.mark.timeout(900)
def test_the_dry_run_prints_the_plan_that_the_same_run_executes(tmp_path, tiny_dir, catalog_dsn, ray_local, capsys):
    exp, store = experiment(tmp_path, tiny_dir), str(tmp_path / "store")
    dry_run(str(exp), store=store, catalog_dsn=catalog_dsn)
    said = capsys.readouterr().out

    run = ScanRun(load_spec(exp), ScanOptions(store=store, catalog_dsn=catalog_dsn, quiet=True))
    run.check()
    plans = run.plan()
    assert [(p.stage, p.label, p.cells, p.run) for p in plans] == [("", "tiny", 8, 8)]   # pairs × orderings × samples
    assert printed(plans) in said   # the dry run printed this object's plan, line for line
    result = run.execute()
    assert result.status == "complete" and result.counts["cells"] == 8
    assert run.ran == {(p.stage, p.label): p.run for p in plans}   # what it sent to the engines is what it planned


@pytest.mark.timeout(900)
def test_a_resume_executes_the_resume_plan_the_dry_run_states(tmp_path, tiny_dir, catalog_dsn, ray_local, capsys):
    exp, store = experiment(tmp_path, tiny_dir), str(tmp_path / "store")
    run = ScanRun(load_spec(exp), ScanOptions(resume=True, store=store, catalog_dsn=catalog_dsn, quiet=True,
                                              max_attempts=2))
    settings = run.settings.to_json()
    invocation_id = str(uuid.uuid4())
    with Catalog(catalog_dsn) as catalog:
        catalog.create_invocation({"invocation_id": invocation_id, "experiment": "fc_run", "instrument": "forced_choice",
                                   "settings": settings, "settings_hash": "x", "store_uri": store,
                                   "content_hashes": content_hashes(run.spec), "status": "interrupted", "counts": {}})
        inv = catalog.get_invocation(invocation_id)
    # 3 cells answered, 2 failed once (retried: 2 attempts allowed), 1 failed twice (given up)
    cells = grid_cells(run.settings).slice(0, 6).to_pylist()
    errors = [None, None, None, "RuntimeError: boom", "RuntimeError: boom", "RuntimeError: boom"]
    rows = [{"probe_id": c["probe_id"], "sample": c["sample"], "invocation_id": invocation_id, "experiment": "fc_run",
             "label": "tiny", "item_key": c["item_key"], "response": None if e else "x", "error": e, "attempt": 1}
            for c, e in zip(cells, errors)]
    rows.append({**rows[-1], "attempt": 2})
    open_store(store).write_part(to_trace_table(rows), "fc_run", invocation_id, "t")

    dry_run(str(exp), store=store, catalog_dsn=catalog_dsn, max_attempts=2)
    said = capsys.readouterr().out
    run.check()
    todo, given_up, blocked, plans = run.resume_plan(inv)
    assert (todo, given_up, blocked) == (8 - 3 - 1, 1, [])
    assert f"invocation {invocation_id} (interrupted) would run {todo} cell(s); 1 given up" in said
    assert printed(plans) in said

    result = run.execute()
    assert result.invocation_id == invocation_id and result.counts["given_up"] == 1
    assert run.ran == {(p.stage, p.label): p.run for p in plans if p.run}
    assert sum(run.ran.values()) == todo
