"""The plan counts a large grid a chunk at a time, each distinct request text encoded once: with chunks of 5
cells and a cache of 3 texts its figures equal those counted cell by cell here, with the model's own
tokenizer through transformers, for two models and a resume whose invocation stored some cells already.
No Ray: the plan starts nothing."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pyarrow as pa
import pytest

from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.spec import load_spec
from mirrorscan.grid.trace_schema import to_trace_table

PAIRS = "pair_id,word_a,word_b\nvw,vodka,whiskey\ncd,cat,dog\ntc,tea,coffee\n"


@pytest.fixture
def experiment(tmp_path, tiny_dir):
    """A forced_choice grid over two models (3 pairs × 2 envelopes × 2 orderings × 3 samples = 36 cells each),
    and an unfinished invocation that stored 7 of the first model's cells (5 answers, 2 failed attempts)."""
    from mirrorscan.cluster.scan.stages import grid_cells

    exp = tmp_path / "fc_chunks"
    exp.mkdir()
    (exp / "pairs.csv").write_text(PAIRS)
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "samples": 3,
        "models": [{"model": str(tiny_dir), "label": "tiny", "max_tokens": 5},
                   {"model": str(tiny_dir), "label": "other", "max_tokens": 9, "temperature": 0.5}],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict", "json_schema"]}}))
    spec = load_spec(exp)
    spec = dataclasses.replace(spec, store=str(tmp_path / "store"))
    settings = spec.settings()
    invocation_id = str(uuid.uuid4())
    cells = [c for c in grid_cells(settings).to_pylist() if c["label"] == "tiny"][3:10]
    rows = [{"probe_id": c["probe_id"], "sample": c["sample"], "invocation_id": invocation_id,
             "experiment": "fc_chunks", "label": "tiny", "item_key": c["item_key"],
             "response": "x" if i < 5 else None, "error": None if i < 5 else "RuntimeError: boom"}
            for i, c in enumerate(cells)]
    store = open_store(spec.store)
    store.write_part(to_trace_table(rows), "fc_chunks", invocation_id, "t")
    return {"settings": settings, "store": store, "invocation_id": invocation_id, "stored": rows,
            "sources": {"tiny": str(tiny_dir), "other": str(tiny_dir)}, "tiny_dir": tiny_dir}


def expected(experiment) -> dict:
    """Per label: (cells, held here, run, sampling, input tokens, generated-token bound), counted row by row."""
    from transformers import AutoTokenizer

    from mirrorscan.cluster.scan.stages import grid_cells, instrument_ref

    tok = AutoTokenizer.from_pretrained(experiment["tiny_dir"])
    ref = instrument_ref(experiment["settings"])
    cells = grid_cells(experiment["settings"])
    rendered = ref.instrument.render(cells, ref.spec).to_pylist()
    answered = {(r["probe_id"], r["sample"]) for r in experiment["stored"] if r["error"] is None}
    models = {m.label: m for m in experiment["settings"].models}
    out = {}
    for label, model in models.items():
        mine = [r for r in rendered if r["label"] == label]
        run = [r for r in mine if (r["probe_id"], r["sample"]) not in answered]
        tokens = sum(len(tok("\n".join(t for t in (r["system_text"], r["user_text"]) if t),
                             add_special_tokens=False)["input_ids"]) for r in run)
        out[label] = (len(mine), len(mine) - len(run), len(run),
                      ((float(model.temperature), float(model.top_p), int(model.max_tokens)),),
                      tokens, len(run) * int(model.max_tokens))
    return out


def test_a_plan_counted_in_small_chunks_equals_one_counted_cell_by_cell(experiment, monkeypatch):
    from mirrorscan.cluster.scan import plan

    def planned():
        return {p.label: (p.cells, p.held_here, p.run, p.sampling, p.tokens_in, p.tokens_out_bound)
                for p in plan.scan_plan(experiment["settings"], plan.PlanScope(
                    store=experiment["store"], invocation_id=experiment["invocation_id"],
                    model_sources=experiment["sources"]))}

    whole = planned()
    monkeypatch.setattr(plan, "CHUNK", 5)
    monkeypatch.setattr(plan._TokenCounter, "CACHED", 3)
    chunked = planned()
    want = expected(experiment)
    assert want["tiny"][:3] == (36, 5, 31) and want["other"][:3] == (36, 0, 36)   # the fixture as described
    assert chunked == whole == want


def test_request_texts_leave_out_empty_and_missing_values():
    from mirrorscan.cluster.scan.plan import _request_texts

    rendered = pa.table({"probe_id": ["a", "b", "c", "d"], "system_text": ["S", "", None, None],
                         "user_text": ["U", "U", "U", None], "n": [1, 2, 3, 4]})
    assert _request_texts(rendered, ["probe_id"]).to_pylist() == ["S\nU", "U", "U", ""]
    assert _request_texts(rendered, ["probe_id", "system_text", "user_text"]).to_pylist() == ["", "", "", ""]
