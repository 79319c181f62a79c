"""Importing answer files without Ray: the seed tool's shape and this project's export, one label rule, ratings
read from the raw replies by the scan's own parser, and a line's own query text deciding its probe version."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.instruments.open_scan.importing import import_rows, method_label, plan_import, read_import
from mirrorscan.instruments.open_scan.jsonl import Record, format_line

TEXT = "Tea or coffee?"
HASH = hashlib.sha256(TEXT.encode()).hexdigest()
OTHER = "Tea or coffee, and why?"
SCALES = {"cold": (1, 10), "posthoc": (1, 10)}
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def seed(**kw) -> dict:
    line = {"model": "Org/Small-Model", "query_id": "q1", "sample": 0, "answer": "Tea.", "cold": "8", "posthoc": "9/10"}
    line.update(kw)
    return line


def data(*lines: dict) -> bytes:
    return "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines).encode()


def test_the_label_is_the_methods_rule_exactly():
    assert method_label("Org/Small-Model") == "small-model"
    assert method_label("ollama:Llama3:8B") == "ollama:llama3:8b"   # a ':' does not split
    assert method_label("a/b/C") == "c"


def test_a_seed_line_keeps_its_other_keys_and_nulls_the_missing_optional_ones():
    (ln,) = read_import(data(seed(query=TEXT, temperature=0.7, locale="en-GB", ttft_ms=12.5, judge={"x": [1]},
                                  note="kept")), "/d/seed.jsonl")
    assert (ln.shape, ln.label, ln.model, ln.query_id, ln.sample) == ("seed", "small-model", "Org/Small-Model", "q1", 0)
    assert (ln.answer, ln.cold_raw, ln.posthoc_raw, ln.query) == ("Tea.", "8", "9/10", TEXT)
    assert ln.columns == {"locale": "en-GB", "temperature": 0.7, "top_p": None, "seed": None, "created_at": None,
                          "ttft_ms": 12.5, "total_ms": None}
    assert ln.extra == {"judge": {"x": [1]}, "note": "kept"}
    (bare,) = read_import(data(seed()), "/d/seed.jsonl")
    assert bare.query is None and bare.extra is None and set(bare.columns.values()) == {None}


@pytest.mark.parametrize("line, field", [
    (seed(sample=-1), "seed.jsonl:1:sample"), ({k: v for k, v in seed().items() if k != "posthoc"}, "seed.jsonl:1:posthoc"),
    (seed(cold=7), "seed.jsonl:1:cold"), (seed(temperature="hot"), "seed.jsonl:1:temperature"),
    (seed(query_id="q@1"), "seed.jsonl:1:query_id")])
def test_a_malformed_seed_line_is_one_error_naming_line_and_key(line, field):
    with pytest.raises(ConfigError) as info:
        read_import(data(line), "/d/seed.jsonl")
    assert info.value.field == field and "\n" not in str(info.value)


def test_ratings_are_read_from_the_raw_text_by_the_scans_parser():
    lines = read_import(data(seed(cold="eleven", posthoc="8/10"), seed(sample=1, cold="eleven", posthoc="0"),
                             seed(sample=2, cold="eleven", posthoc="On a 1-10 scale: 7"),
                             seed(sample=3, cold="eleven", posthoc=None)), "/d/seed.jsonl")
    plan = plan_import(lines, "/d/seed.jsonl", labels=[], current={"q1": HASH}, scales=SCALES)
    assert [(c, p) for _, _, c, p in plan.kept] == [(None, 8), (None, None), (None, 1), (None, None)]
    assert plan.disagreements == [] and plan.dropped == []


def test_an_export_whose_ratings_disagree_with_its_raw_text_is_reported_line_by_line():
    when = datetime(2025, 1, 2, tzinfo=timezone.utc)
    rec = dict(run_label="small-model", model="org/Small-Model", query_id="q1", query_hash=HASH, seed=1,
               locale="en-AU", answer="Tea.", created_at=when)
    text = "".join(format_line(Record(**rec, sample=i, cold_raw=cr, cold_rating=c, posthoc_raw=pr, posthoc_rating=p))
                   for i, (cr, c, pr, p) in enumerate([("7", 7, "8", 8), ("7", 7, "7", 99), ("7", 7, "-5", -5),
                                                       ("7", 7, "I'd say 0", 0), ("7", 7, "nine", 9)]))
    lines = read_import(text.encode(), "/d/export.jsonl")
    plan = plan_import(lines, "/d/export.jsonl", labels=["small-model"], current={"q1": HASH}, scales=SCALES)
    assert [p for *_, p in plan.kept] == [8, 7, None, None, None]   # parsed, never as given
    assert [d.split(":")[1] for d in plan.disagreements] == ["2", "3", "4", "5"]
    assert plan.disagreements[0].startswith('export.jsonl:2: posthoc_rating 99 disagrees with its raw text "7"') \
        and plan.disagreements[0].endswith("stored 7")
    assert "stored null" in plan.disagreements[1]


def test_a_line_whose_label_matches_no_row_exactly_is_dropped_with_a_line_naming_it():
    lines = read_import(data(seed(), seed(model="org/Small-Model-2"), seed(model="small-model"),
                             seed(model="ollama:small-model")), "/d/seed.jsonl")
    plan = plan_import(lines, "/d/seed.jsonl", labels=["small-model", "tiny"], current={"q1": HASH}, scales=SCALES)
    assert [ln.line for ln, *_ in plan.kept] == [1, 3]
    assert plan.dropped[0] == ("dropped seed.jsonl:2: label 'small-model-2' (model 'org/Small-Model-2') matches no "
                               "model of the experiment (its labels: small-model, tiny)")
    assert plan.dropped[1].startswith("dropped seed.jsonl:4: label 'ollama:small-model'") and "not a label" in plan.dropped[1]


def test_a_line_with_another_query_text_belongs_to_that_texts_version():
    lines = read_import(data(seed(query=TEXT), seed(query_id="q1", sample=1, query=OTHER), seed(sample=2)), "/d/s.jsonl")
    plan = plan_import(lines, "/d/s.jsonl", labels=[], current={"q1": HASH}, scales=SCALES)
    assert [h for _, h, *_ in plan.kept] == [HASH, hashlib.sha256(OTHER.encode()).hexdigest(), HASH]
    assert plan.other_versions == {"q1": 1}
    with pytest.raises(ConfigError, match="carries no query text"):
        plan_import(read_import(data(seed(query_id="q9")), "/d/s.jsonl"), "/d/s.jsonl", labels=[], current={},
                    scales=SCALES)


def test_imported_rows_keep_raw_text_ratings_and_extras():
    lines = read_import(data(seed(query=TEXT, cold="eleven", note="n"), seed(sample=1, query=TEXT, cold="eleven"),
                             seed(query_id="q2", query="Which?", cold="3"), seed(query_id="q2", sample=1, query="Which?",
                                                                                 cold="5")), "/d/s.jsonl")
    plan = plan_import(lines, "/d/s.jsonl", labels=[], current={}, scales=SCALES)
    rows = import_rows(plan, "exp", "00000000-0000-0000-0000-000000000001", "imported:abc", NOW).to_pylist()
    cold = [(r["query_id"], r["sample"], r["response"], r["rating"]) for r in rows if r["envelope"] == "cold"]
    assert cold == [("q1", 0, "eleven", None), ("q2", 0, "3", 3), ("q2", 1, "5", 5)]   # one per sample where they differ
    first = rows[0]
    assert (first["envelope"], first["query"], first["import_extra"], first["created_at"]) == \
        ("answer", TEXT, '{"note": "n"}', NOW)
    assert first["locale"] is None and first["temperature"] is None and first["seed"] is None


def test_a_seed_line_holding_a_secret_shape_is_refused_without_echoing_it():
    token = "hf_" + "abcdefghijklmnopqrstuvwxyz12"
    for line in (seed(answer=f"my key is {token}"), seed(notes={"k": [token]})):
        with pytest.raises(ConfigError) as info:
            read_import(data(line), "/d/seed.jsonl")
        assert token not in str(info.value) and info.value.field.startswith("seed.jsonl:1:")


def test_a_rating_not_measured_never_enters_a_mean():
    """A model's summary over three answers rated cold 2 / not measured / 10 and post-hoc 4 / 8 / not measured:
    each mean is over the measured ratings only (6 and 6, not 4 and 4 with absence read as 0), and the
    not-measured count says how many were left out."""
    from mirrorscan.instruments.open_scan.numbers import model_summary

    triples = [{"query_id": q, "query_hash": f"h{q}", "sample": 0, "model": "org/Tiny", "answer": "An answer.",
                "cold_rating": c, "posthoc_rating": p} for q, c, p in (("q1", 2, 4), ("q2", None, 8), ("q3", 10, None))]
    s = model_summary("tiny", triples)
    assert (s["cold"]["measured"], s["cold"]["not_measured"], s["cold"]["mean"]) == (2, 1, (2 + 10) / 2)
    assert (s["posthoc"]["measured"], s["posthoc"]["not_measured"], s["posthoc"]["mean"]) == (2, 1, (4 + 8) / 2)
    assert s["cold"]["sd"] == pytest.approx(((2 - 6) ** 2 + (10 - 6) ** 2) ** 0.5)   # sample sd, ddof 1, of 2 and 10
