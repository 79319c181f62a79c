"""Totals that say what they sum, from stored rows (no Ray): a model whose carriers all failed, one lacking an
axis and one lacking a term get no whole total, and the analysis text, the headline and the radar say so; and
an edited corpus file does not block the analysis of the rows stored before the edit."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from mirrorscan.grid.settings import Settings
from mirrorscan.instruments.flinch.corpus import load_corpus
from mirrorscan.instruments.flinch.instrument import INSTRUMENT, from_frozen

WORDS = {"syn_a": ["zorbed", "blue", "gone"], "syn_b": ["home", "late", "fine"]}


def corpus_doc() -> dict:
    carriers = ["The story ended when the hero was {BLANK}.", "Everyone in the village knew that it was {BLANK}."]
    return {"version": "t1", "notes": "a descriptive key, kept", "axes": {k: {"label": k.upper(), "terms": [{"word": w, "carriers": carriers} for w in ws]}
                                      for k, ws in WORDS.items()}}


def settings_for(path) -> Settings:
    corpus = load_corpus(str(path))
    return Settings(instrument_settings={"corpus": corpus.path, "corpus_sha256": corpus.sha256, "corpus_version": "t1",
                                         "axes": list(corpus.axis_keys), "aggregation": "axis_lp_mean",
                                         "proxy_samples": 50, "n_items": corpus.n_carriers()})


def traces(fail) -> tuple[pa.Table, dict]:
    """Rows of four models over every carrier, seeded lp values; ``fail(label, axis, term)`` makes a row an error.
    Returns the table and, per (label, axis, term), the lp values of its scored carriers."""
    rng = np.random.default_rng(7)
    rows, lps = [], {}
    for label in ("whole", "all_failed", "no_axis_b", "no_term"):
        for axis, words in WORDS.items():
            for word in words:
                for c in (0, 1):
                    lp = float(rng.uniform(-14, -2))
                    bad = fail(label, axis, word)
                    rows.append({"label": label, "probe_id": f"{label}|{axis}|{word}|{c}|-|-", "sample": 0,
                                 "attempt": 1, "axis": axis, "term": word, "carrier_index": c,
                                 "lp_mean": None if bad else lp, "error": "boom" if bad else None})
                    if not bad:
                        lps.setdefault((label, axis, word), []).append(lp)
    return pa.Table.from_pylist(rows), lps


def failing(label, axis, term) -> bool:
    return (label == "all_failed" or (label == "no_axis_b" and axis == "syn_b")
            or (label == "no_term" and term == "late"))


def flinch(lp: float) -> float:
    """The method's map, written out here: lp −1 → 0, lp −16 → 100, clipped."""
    return min(100.0, max(0.0, 100.0 * (-1.0 - lp) / 15.0))


@pytest.fixture()
def scanned(tmp_path):
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps(corpus_doc()))
    table, lps = traces(failing)
    return path, settings_for(path), table, lps


def test_only_a_model_with_every_axis_and_term_scored_has_a_total(scanned):
    _, settings, table, lps = scanned
    analysis = INSTRUMENT.analyze(table, settings)
    models = {m["model"]: m for m in analysis.numbers["models"]}
    axis = {k: flinch(np.mean([np.mean(lps[("whole", k, w)]) for w in ws])) for k, ws in WORDS.items()}
    whole = models["whole"]
    assert whole["total_flinch"] == pytest.approx(sum(axis.values())) and whole["partial_total_flinch"] is None
    assert whole["total_of"] == "2 of 2 axes" and whole["axis_set"] == ["syn_a", "syn_b"]
    failed = models["all_failed"]
    assert failed["total_flinch"] is None and failed["partial_total_flinch"] is None   # never 0.0
    assert failed["total_of"] == "none: 0 of 2 axes; lacks syn_a, syn_b"
    no_b = models["no_axis_b"]
    a_only = flinch(np.mean([np.mean(lps[("no_axis_b", "syn_a", w)]) for w in WORDS["syn_a"]]))
    assert no_b["total_flinch"] is None and no_b["partial_total_flinch"] == pytest.approx(a_only)
    assert no_b["total_of"] == "partial: 1 of 2 axes; lacks syn_b"
    no_term = models["no_term"]
    assert no_term["total_flinch"] is None and no_term["axes"]["syn_b"]["complete"] is False
    assert no_term["axes"]["syn_b"]["missing_terms"] == ["late"]
    assert no_term["total_of"] == "partial: 2 of 2 axes; terms missing in syn_b"

    lines = {line.split()[0]: line for line in analysis.text.splitlines()
             if line.split() and not line.startswith(" ")}   # the table, not the indented interval lines
    assert f"{whole['total_flinch']:.1f}" in lines["whole"]
    assert "—" in lines["all_failed"] and "0.0" not in lines["all_failed"]
    assert f"({no_b['partial_total_flinch']:.1f}) partial" in lines["no_axis_b"]
    assert "total = the sum over all 2 axes" in analysis.text
    assert any(n.startswith("all_failed: no whole total (none: 0 of 2 axes") for n in analysis.notes)

    assert analysis.numbers["corpus_extra"] == {"(file)": {"notes": "a descriptive key, kept"}}   # recorded
    head = INSTRUMENT.headline(analysis)
    assert head["all_failed"]["total_flinch"] is None and head["all_failed"]["axes_summed"] == 0
    assert head["no_axis_b"]["partial_total_flinch"] == pytest.approx(a_only) and head["no_axis_b"]["axes_summed"] == 1
    assert head["whole"]["total_flinch"] == pytest.approx(sum(axis.values())) and head["whole"]["axes_summed"] == 2
    sources = {s.name: s for s in INSTRUMENT.headline_sources(analysis, settings, "inv")}
    assert "all 2 axes" in sources["total_flinch"].definition and "null" in sources["total_flinch"].definition


def close(a, b, rel: float = 1e-7) -> bool:
    """Equal structures, floats equal to ``rel`` (REML iterates, and rows in another order move its last digits)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(close(a[k], b[k], rel) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(close(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return (a != a and b != b) or a == pytest.approx(b, rel=rel, abs=1e-12)     # NaN (no asymptote) is equal
    return a == b


def test_an_edited_corpus_does_not_block_the_analysis_and_gives_the_same_numbers(scanned):
    path, settings, table, _ = scanned
    before = INSTRUMENT.analyze(table, settings)
    assert before.numbers["axes_read_from"] == "corpus file" and before.notes[0].startswith("all_failed")
    edited = corpus_doc()
    edited["axes"]["syn_a"]["terms"] = edited["axes"]["syn_a"]["terms"][1:]          # a term gone
    edited["axes"]["syn_b"]["terms"][0]["carriers"] = ["They were all {BLANK}.", "It was {BLANK}."]
    path.write_text(json.dumps(edited))
    with pytest.raises(Exception, match="changed since the invocation was frozen"):
        from_frozen(settings.instrument_settings).corpus()   # what --resume still refuses
    after = INSTRUMENT.analyze(table, settings)
    assert after.numbers["axes_read_from"] == "stored rows" and after.numbers["axes"] == ["syn_a", "syn_b"]
    assert after.numbers["corpus_sha256"] == settings.instrument_settings["corpus_sha256"]
    assert same(after.numbers["models"], before.numbers["models"])   # term order may differ, the numbers do not
    assert close(after.numbers["carrier_gstudy"], before.numbers["carrier_gstudy"])   # REML's last digits may move
    assert "analysed from the stored rows under the frozen corpus hash" in after.notes[0]
    path.unlink()   # gone altogether: the same numbers, each axis labelled by its key
    gone = INSTRUMENT.analyze(table, settings).numbers["models"]
    assert same(gone, before.numbers["models"], labels=False) and gone[0]["axes"]["syn_a"]["label"] == "syn_a"


def same(left: list[dict], right: list[dict], labels: bool = True) -> bool:
    """Whether two analyses' models hold the same numbers (terms matched by word, floats to 1e-9; ``labels``:
    the axes' labels too)."""
    def norm(value):
        if isinstance(value, float):
            return round(value, 9)
        if isinstance(value, dict):
            return {k: norm(v) for k, v in value.items() if labels or k != "label"}
        if isinstance(value, list):
            items = [norm(v) for v in value]
            return sorted(items, key=repr)   # terms, missing terms: the order is the file's, the numbers are not
        return value
    return norm(left) == norm(right)


def test_with_the_corpus_changed_a_model_whose_rows_are_short_gets_no_whole_total(scanned):
    path, settings, table, _ = scanned
    path.write_text(json.dumps({"axes": {"other": corpus_doc()["axes"]["syn_a"]}}))
    keep = [not (label == "whole" and term == "late") for label, term in
            zip(table.column("label").to_pylist(), table.column("term").to_pylist())]
    models = {m["model"]: m for m in INSTRUMENT.analyze(table.filter(pa.array(keep)), settings).numbers["models"]}
    assert models["whole"]["total_flinch"] is None   # a term never attempted cannot be seen without the corpus
    assert "cover 10 of the 12 carriers" in models["whole"]["total_of"]
    assert list(models["whole"]["axes"]) == ["syn_a", "syn_b"]


def test_the_headline_queries_give_no_whole_total_where_the_analysis_gives_none(scanned):
    """The report's queries for total_flinch, partial_total_flinch and axes_summed, run by DuckDB (the engine
    behind ``mirrorscan sql``) over the same rows, return what the analysis does, null included."""
    import duckdb

    _, settings, table, _ = scanned
    analysis = INSTRUMENT.analyze(table, settings)
    head = INSTRUMENT.headline(analysis)
    sources = {s.name: s for s in INSTRUMENT.headline_sources(analysis, settings, "inv-1")}
    con = duckdb.connect()
    con.register("traces_flinch", table.append_column("invocation_id", pa.array(["inv-1"] * table.num_rows)))
    for name in ("total_flinch", "partial_total_flinch", "axes_summed"):
        got = dict(con.execute(sources[name].sql).fetchall())
        for model, numbers in head.items():
            if model == "all_failed":   # no scored row at all: no row in the query's answer either
                assert model not in got and numbers[name] in (None, 0)
            elif numbers[name] is None:
                assert got[model] is None, (model, name)
            else:
                assert got[model] == pytest.approx(numbers[name], rel=1e-9), (model, name)


def test_the_report_shows_a_partial_total_as_not_applicable_where_the_total_is_whole(scanned):
    """A whole total has no partial one: the report says "not applicable" there, and "not measured" only where
    neither was got (every carrier failed); a partial total is a number."""
    from mirrorscan.results.report import headline_numbers
    from mirrorscan.results.report_html import shown_value

    _, settings, table, _ = scanned
    analysis = INSTRUMENT.analyze(table, settings)
    shown = {(n.model, n.name): shown_value(n, INSTRUMENT.headline_units)
             for n in headline_numbers(INSTRUMENT, analysis, settings, "inv")}
    assert shown[("whole", "partial_total_flinch")].startswith("— (not applicable")
    assert "total_flinch" in shown[("whole", "partial_total_flinch")]
    assert shown[("all_failed", "partial_total_flinch")] == "— (not measured)"
    assert shown[("all_failed", "total_flinch")] == "— (not measured)"
    assert shown[("no_axis_b", "total_flinch")] == "— (not measured)"   # a total lacking an axis is no measurement
    assert shown[("no_axis_b", "partial_total_flinch")][0].isdigit()
