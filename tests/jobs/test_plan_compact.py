"""The plan holds the grid compact (text columns dictionary-encoded) and decodes a chunk just before render; its
figures equal those of the plain grid the scan expands, for a new invocation and for a resume whose invocation
stored some cells and gave up one, whatever the number of texts encoded at once. No Ray: the plan starts
nothing."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.spec import load_spec
from mirrorscan.grid.trace_schema import to_trace_table


def test_a_label_is_found_in_a_dictionary_column_without_decoding_it():
    from mirrorscan.cluster.scan.plan import _count, _is, _mine

    first = pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 0], pa.int32()), pa.array(["a", "b"]))
    second = pa.DictionaryArray.from_arrays(pa.array([1, 0], pa.int32()), pa.array(["b", "a"]))   # its own order
    labels = pa.chunked_array([first, second])
    table = pa.table({"label": labels, "n": list(range(6))})
    for label in ("a", "b", "z"):
        want = pc.equal(labels.cast(pa.string()), label)
        assert _is(labels, label).to_pylist() == want.to_pylist()
        assert _count(table, label) == sum(v is True for v in want.to_pylist())
    assert _mine(table, "a").column("n").to_pylist() == [0, 3, 4]


def test_the_plan_of_the_compact_grid_equals_that_of_the_plain_grid(tmp_path, tiny_dir, monkeypatch):
    from mirrorscan.cluster.scan import plan
    from mirrorscan.cluster.scan.stages import grid_cells
    from mirrorscan.grid.cells import plain

    exp = tmp_path / "fc_compact"
    exp.mkdir()
    (exp / "pairs.csv").write_text("pair_id,word_a,word_b\nvw,vodka,whiskey\ncd,cat,dog\ntc,tea,coffee\n")
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "samples": 2,
        "models": [{"model": str(tiny_dir), "label": "tiny", "max_tokens": 5},
                   {"model": str(tiny_dir), "label": "other", "max_tokens": 9}],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict", "json_schema"]}}))
    spec = dataclasses.replace(load_spec(exp), store=str(tmp_path / "store"))
    settings = spec.settings()
    compact, scanned = grid_cells(settings, compact=True), grid_cells(settings)
    assert pa.types.is_dictionary(compact.schema.field("probe_id").type)
    assert not any(pa.types.is_dictionary(f.type) for f in scanned.schema)
    assert plain(compact).equals(scanned)

    invocation_id = str(uuid.uuid4())
    cells = scanned.to_pylist()
    # 4 answers of "tiny", 3 failed attempts of one "other" cell (given up at 3), 1 failed attempt of another
    stored = [(c, "x", None) for c in cells[2:6]] + [(cells[30], None, "RuntimeError: boom")] * 3 + \
        [(cells[31], None, "RuntimeError: boom")]
    rows = [{"probe_id": c["probe_id"], "sample": c["sample"], "invocation_id": invocation_id,
             "experiment": "fc_compact", "label": c["label"], "item_key": c["item_key"], "response": response,
             "error": error} for c, response, error in stored]
    store = open_store(spec.store)
    store.write_part(to_trace_table(rows), "fc_compact", invocation_id, "t")
    sources = {"tiny": str(tiny_dir), "other": str(tiny_dir)}
    monkeypatch.setattr(plan, "CHUNK", 7)   # chunks cross the labels' boundary (24 cells each)

    def planned(invocation: str | None, first: pa.Table | None) -> list:
        return plan.scan_plan(settings, plan.PlanScope(store=store, invocation_id=invocation, model_sources=sources,
                                                       first=first))

    for invocation in (None, invocation_id):
        assert planned(invocation, None) == planned(invocation, scanned)
    whole = planned(None, None)
    monkeypatch.setattr(plan._TokenCounter, "BATCH", 3)   # texts encoded 3 at a time: the same counts
    assert planned(None, None) == whole and whole[0].tokens_in > 0
    resumed = {p.label: (p.cells, p.held_here, p.given_up, p.run) for p in planned(invocation_id, None)}
    assert resumed == {"tiny": (24, 4, 0, 20), "other": (24, 0, 1, 23)}
