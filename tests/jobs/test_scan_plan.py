"""The dry run is the driver's plan: per stage and model, the cells planned are the cells the scan then runs
(a new invocation, an appending one whose earlier cells are held, and a resume whose invocation stored some
already), with the sampling each cell carries and the token counts it implies. Real Ray, the tiny random
model, real PostgreSQL."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections import Counter

import pyarrow.compute as pc
import pytest

from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.spec import load_spec
from mirrorscan.grid.trace_schema import to_trace_table
from mirrorscan.jobs.dry_run import dry_run
from mirrorscan.cluster.scan.plan import PlanScope, scan_plan
from mirrorscan.cluster.scan.stages import grid_cells
from mirrorscan.jobs.scan import run_scan

PROBES = 'query_id,query\nq1,"Tea or coffee, and why?"\nq2,Which season do you like best?\n'


def open_scan_experiment(folder, tiny_dir, samples: int) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "probes.csv").write_text(PROBES)
    (folder / "config.json").write_text(json.dumps({
        "instrument": "open_scan", "samples": samples, "batch_size": 8,
        "models": [{"model": str(tiny_dir), "label": "tiny", "max_tokens": 50}],   # not what open_scan asks
        "open_scan": {"probes": "probes.csv", "sampling": {"max_tokens": 6}, "report_max_tokens": 4}}))
    return str(folder)


def planned(exp: str, store_uri: str, tiny_dir, **kw) -> list:
    spec = load_spec(exp)
    spec = dataclasses.replace(spec, store=store_uri)
    try:
        store = open_store(store_uri, create=False)
    except Exception:   # noqa: BLE001 - not written yet
        store = None
    return scan_plan(spec.settings(), PlanScope(store=store, model_sources={"tiny": str(tiny_dir)}, **kw))


def stored(store_uri: str, experiment: str, invocation_id: str) -> list[dict]:
    table = open_store(store_uri).dataset(experiment).to_table(
        columns=["invocation_id", "envelope", "sample", "temperature", "top_p", "max_tokens", "system_text",
                 "user_text", "item_key"])
    return table.filter(pc.equal(table.column("invocation_id"), invocation_id)).to_pylist()


def by_stage(rows: list[dict]) -> Counter:
    return Counter("posthoc" if r["item_key"].endswith("~posthoc") else "" for r in rows)


@pytest.mark.timeout(900)
def test_open_scan_plan_is_what_the_scan_runs_new_and_appending(tmp_path, tiny_dir, catalog_dsn, ray_local, capsys):
    from transformers import AutoTokenizer

    store_uri = str(tmp_path / "store")
    exp = open_scan_experiment(tmp_path / "os_plan", tiny_dir, samples=1)
    plans = planned(exp, store_uri, tiny_dir)
    first, posthoc = plans
    # 2 probes × 1 sample answers + 2 cold reports; one post-hoc report per answer
    assert (first.stage, first.cells, first.held_elsewhere, first.run) == ("", 4, 0, 4)
    assert (posthoc.stage, posthoc.cells, posthoc.run) == ("posthoc", 2, 2)
    # the cells' own sampling, never the model's max_tokens 50: answers at the section's, reports greedy
    assert first.sampling == ((0.0, 1.0, 4), (0.7, 0.95, 6)) and posthoc.sampling == ((0.0, 1.0, 4),)
    assert (first.tokens_out_bound, posthoc.tokens_out_bound) == (2 * 6 + 2 * 4, 2 * 4)
    dry_run(exp, store=store_uri, catalog_dsn=catalog_dsn)
    out = capsys.readouterr().out
    assert "6 cells  ≤ 28 generated tokens (bound)" in out and "50" not in out.split("store:")[0].split("cells")[1]

    result = run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    assert result.status == "complete"
    rows = stored(store_uri, "os_plan", result.invocation_id)
    assert by_stage(rows) == {"": first.run, "posthoc": posthoc.run}
    assert {(r["temperature"], r["top_p"], r["max_tokens"]) for r in rows if not r["item_key"].endswith("~posthoc")} \
        == set(first.sampling)
    # input tokens: the stored request texts through the model's own tokenizer (transformers, independently)
    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    first_rows = [r for r in rows if not r["item_key"].endswith("~posthoc")]
    assert first.tokens_in == sum(len(tok(f"{r['system_text']}\n{r['user_text']}", add_special_tokens=False)
                                      ["input_ids"]) for r in first_rows)
    post_rows = [r for r in rows if r["item_key"].endswith("~posthoc")]
    assert posthoc.tokens_in <= sum(len(tok(f"{r['system_text']}\n{r['user_text']}", add_special_tokens=False)
                                        ["input_ids"]) for r in post_rows)   # a bound: answers not known yet

    # one more sample: the earlier invocation holds sample 0's answers, the cold reports and their post-hoc
    exp = open_scan_experiment(tmp_path / "os_plan", tiny_dir, samples=2)
    first, posthoc = planned(exp, store_uri, tiny_dir)
    assert (first.cells, first.held_elsewhere, first.run) == (6, 4, 2)
    assert (posthoc.cells, posthoc.held_elsewhere, posthoc.run) == (4, 2, 2)
    more = run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    assert more.status == "complete"
    assert more.counts["held_elsewhere"] == first.held_elsewhere + posthoc.held_elsewhere
    assert by_stage(stored(store_uri, "os_plan", more.invocation_id)) == {"": first.run, "posthoc": posthoc.run}


PAIRS = "pair_id,word_a,word_b\nvw,vodka,whiskey\ncd,cat,dog\n"


@pytest.mark.timeout(900)
def test_a_resume_plan_leaves_out_the_cells_stored_and_runs_the_rest(tmp_path, tiny_dir, catalog_dsn, ray_local,
                                                                    capsys):
    exp = tmp_path / "fc_plan"
    exp.mkdir()
    (exp / "pairs.csv").write_text(PAIRS)
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": str(tiny_dir), "label": "tiny", "max_tokens": 5}],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict"]}, "samples": 2}))
    store_uri = str(tmp_path / "store")
    spec = load_spec(exp)
    spec = dataclasses.replace(spec, store=store_uri)
    settings = spec.settings().to_json()
    invocation_id = str(uuid.uuid4())
    from mirrorscan.cluster.scan.inputs import content_hashes

    with Catalog(catalog_dsn) as catalog:
        catalog.create_invocation({"invocation_id": invocation_id, "experiment": "fc_plan",
                                   "instrument": "forced_choice", "settings": settings, "settings_hash": "x",
                                   "store_uri": store_uri, "content_hashes": content_hashes(spec),
                                   "status": "interrupted", "counts": {}})
    cells = grid_cells(spec.settings()).slice(0, 5).to_pylist()   # 3 stored answers, 2 failed attempts
    rows = [{"probe_id": c["probe_id"], "sample": c["sample"], "invocation_id": invocation_id, "experiment": "fc_plan",
             "label": "tiny", "item_key": c["item_key"], "response": "x" if i < 3 else None,
             "error": None if i < 3 else "RuntimeError: boom"} for i, c in enumerate(cells)]
    open_store(store_uri).write_part(to_trace_table(rows), "fc_plan", invocation_id, "t")

    (plan,) = planned(str(exp), store_uri, tiny_dir, invocation_id=invocation_id, max_attempts=3)
    total = 2 * 2 * 2   # pairs × orderings × samples
    assert (plan.cells, plan.held_here, plan.given_up, plan.run) == (total, 3, 0, total - 3)
    assert plan.sampling == ((0.0, 1.0, 5),) and plan.tokens_out_bound == (total - 3) * 5
    dry_run(str(exp), store=store_uri, catalog_dsn=catalog_dsn)
    assert f"would run {total - 3} cell(s)" in capsys.readouterr().out

    result = run_scan(str(exp), resume=True, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    assert result.invocation_id == invocation_id and result.status == "complete"
    after = stored(store_uri, "fc_plan", invocation_id)
    assert len(after) - len(rows) == plan.run   # one new row per cell run, none for the cells stored


def test_an_activations_plan_claims_no_generated_tokens(tmp_path, tiny_dir, capsys, monkeypatch):
    import sys
    from pathlib import Path

    from test_reproduce_lens import write_experiment

    monkeypatch.setenv("MIRRORSCAN_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MIRRORSCAN_CATALOG_DSN", raising=False)
    exp = tmp_path / "lens_plan"
    write_experiment(exp)
    config = exp / "config.json"
    config.write_text(config.read_text().replace("TINY", str(tiny_dir)))
    (plan,) = planned(str(exp), str(tmp_path / "store"), tiny_dir)
    assert (plan.kind, plan.cells, plan.run, plan.tokens_out_bound, plan.sampling) == ("activations", 10, 10, 0, ())
    assert plan.tokens_in and plan.tokens_in > 10
    dry_run(str(exp), store=str(tmp_path / "store"))
    out = capsys.readouterr().out
    assert "no generated tokens" in out and "no sampling (activations)" in out
    assert "10 cells  ≤ 0 generated tokens (bound)" in out
