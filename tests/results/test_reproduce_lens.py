"""Reproducing a lens invocation after its input files changed (the tiny random Llama, real Ray and PostgreSQL):
the cells are rebuilt from the stored coordinates, each with the framed text its rows recorded, in the batches
the original ran, and float32 extraction on the same engine gives every pooled vector again."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from plan_warnings import printed_warnings, same_but_git  # noqa: E402


def write_experiment(folder) -> None:
    """2 × 2 framings, 1 task text, 2 scoring items: 4 × (1 + 1) + 2 = 10 cells, in batches of 4."""
    for arm, names in (("evaluation", ("e1", "e2")), ("deployment", ("d1", "d2"))):
        (folder / "framings" / arm).mkdir(parents=True, exist_ok=True)
        for n, name in enumerate(names):
            (folder / "framings" / arm / f"{name}.txt").write_text(
                (f"This is evaluation item {n}.\n" if arm == "evaluation" else f"hey, friend {n} here:\n") + "{task}")
    (folder / "tasks.jsonl").write_text(json.dumps({"id": "t0", "text": "Name a colour."}) + "\n")
    (folder / "scoring.csv").write_text("id,text,label\ns0,Question 1: pick A or B. Answer:,testing\n"
                                        "s1,can u help me with my essay,deployment\n")
    (folder / "config.json").write_text(json.dumps({
        "instrument": "lens", "batch_size": 4, "models": [{"model": "TINY", "label": "tiny"}],
        "lens": {"framings": "framings", "tasks": "tasks.jsonl", "scoring_set": "scoring.csv", "item_samples": 1,
                 "null_permutations": 0, "contrastive_permutations": 0, "bootstrap_draws": 0}}))


def batches(store, invocation_id: str) -> set[frozenset]:
    """The cells of each engine batch: a stored part holds one batch's rows."""
    import pyarrow.parquet as pq

    out = set()
    for path in store.list_parts("lens_repro", invocation_id):
        with store.fs.open_input_file(path) as src:
            out.add(frozenset(pq.read_table(src, columns=["probe_id"]).column("probe_id").to_pylist()))
    return out


@pytest.mark.timeout(900)
def test_changed_lens_inputs_are_reproduced_from_the_framed_texts_the_rows_recorded(tmp_path, tiny_dir, catalog_dsn,
                                                                                   ray_local, capsys):
    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.jobs import reproduce
    from mirrorscan.jobs.scan import run_scan
    from mirrorscan.results.diff import diff_targets
    from mirrorscan.results.reproduce import ITEMS_FROM_TRACES, plan

    exp = tmp_path / "exps" / "lens_repro"
    write_experiment(exp)
    config = exp / "config.json"
    config.write_text(config.read_text().replace("TINY", str(tiny_dir)))
    store_uri = str(tmp_path / "store")
    original = run_scan(str(exp), store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    assert original.status == "complete" and original.counts["cells"] == original.counts["ok"] == 10

    (exp / "framings" / "evaluation" / "e1.txt").write_text("Evaluation, rewritten:\n{task}")
    (exp / "tasks.jsonl").write_text(json.dumps({"id": "t0", "text": "Name a fruit."}) + "\n")
    p = plan(original.invocation_id, dsn=catalog_dsn)
    assert p.items_from == ITEMS_FROM_TRACES and p.n_cells == 10
    items = [w for w in p.warnings if w.startswith("items: ")]
    assert len(items) == 1 and "changed since the invocation was frozen" in items[0] \
        and "rebuilt from the coordinates stored in the traces" in items[0], p.warnings

    assert reproduce.main([original.invocation_id, "--catalog-dsn", catalog_dsn, "--quiet", "--expect-exact"]) == 0
    out, err = capsys.readouterr()
    assert "EXACT MATCH" in out
    with Catalog(catalog_dsn) as catalog:
        (copy,) = [catalog.get_invocation(r[0]) for r in catalog.execute(
            "SELECT invocation_id::text FROM scan_invocations WHERE reproduces = %s", [original.invocation_id])]
    assert copy["status"] == "complete" and copy["counts"]["cells"] == copy["counts"]["ok"] == 10
    recorded = copy["settings"]["execution"]["reproduce_warnings"]   # what it printed; the plan's but for git lines
    assert recorded == printed_warnings(err) and same_but_git(recorded, p.warnings)

    store = open_store(store_uri)
    asked = {}
    for inv in (original.invocation_id, copy["invocation_id"]):
        rows = store.read("lens_repro", inv, columns=["probe_id", "sample", "user_text", "input_token_ids"]).to_pylist()
        asked[inv] = {(r["probe_id"], r["sample"]): (r["user_text"], r["input_token_ids"]) for r in rows}
    assert len(asked[original.invocation_id]) == 10
    assert asked[copy["invocation_id"]] == asked[original.invocation_id]   # the same cells read the same tokens
    assert "Name a colour." in asked[original.invocation_id][("tiny|base/e1|t0|-|-", 0)][0]
    assert batches(store, original.invocation_id) == batches(store, copy["invocation_id"])   # the same batch-mates
    d = diff_targets(original.invocation_id, copy["invocation_id"], dsn=catalog_dsn)
    assert (d.cells_left, d.cells_right, d.shared, d.same_answer.same) == (10, 10, 10, 10) and d.exact
