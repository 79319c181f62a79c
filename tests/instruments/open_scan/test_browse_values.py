"""What the browser shows of an open_scan cell: cold and post-hoc ratings apart, never averaged together, and a
reply without a rating shown as not measured, never as a number."""

from __future__ import annotations

import pyarrow as pa

from mirrorscan.grid.instrument import resolve
from mirrorscan.grid.matrix import cell_value
from mirrorscan.results.browse.pages import _cell_html
from mirrorscan.results.reader import StoreReader


def test_cold_and_posthoc_ratings_are_shown_apart_and_absence_as_absence():
    value = cell_value(resolve("open_scan"))
    assert value.kind == "class" and value.derive is not None
    rows = pa.table({"envelope": ["answer", "cold", "posthoc", "posthoc", "cold", "posthoc"],
                     "rating": pa.array([None, 2, 10, None, None, 7], pa.int32()),
                     "error": [None, None, None, None, None, "RuntimeError: boom"]})
    assert value.derive(rows).to_pylist() == [None, "cold 2", "posthoc 10", "posthoc not measured", "cold not measured",
                                              None]
    # a cell of one model and probe: its answer, cold 2, post-hoc 10 — shown apart, not as their mean 6
    text, _ = _cell_html({"answers": {"cold 2": 1, "posthoc 10": 1}, "ok": 3, "failed": 0, "score": None, "scored": 0},
                         value.kind)
    assert "cold 2" in text and "posthoc 10" in text and "6" not in text
    text, _ = _cell_html({"answers": {"cold not measured": 1, "posthoc not measured": 1}, "ok": 3, "failed": 0,
                          "score": None, "scored": 0}, value.kind)
    assert "not measured" in text and "1" not in text


def test_the_browsers_matrix_of_an_imported_file_shows_each_self_report_apart(tmp_path, catalog_dsn, capsys):
    """A real index and matrix (PostgreSQL catalog, local store, no Ray) over an imported file: a cell holds
    its cold and post-hoc ratings side by side, and a reply without a rating reads ``not measured``."""
    import json

    from mirrorscan.instruments.open_scan import cli
    from mirrorscan.results.browse.source import Browser

    lines = [{"model": "org/Tiny", "query_id": "q1", "sample": 0, "query": "Tea?", "answer": "Tea.", "cold": "2",
              "posthoc": "10"},
             {"model": "org/Tiny", "query_id": "q2", "sample": 0, "query": "Cats?", "answer": "Cats.", "cold": "eleven",
              "posthoc": "1"}]
    path = tmp_path / "seed.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert cli.main(["import", str(path), "--experiment", "shown", "--store", str(tmp_path / "store"),
                     "--catalog-dsn", catalog_dsn], "mirrorscan open_scan", StoreReader()) == 0
    invocation_id = capsys.readouterr().out.split("as invocation ")[1].split()[0]
    browser = Browser(catalog_dsn, tmp_path / "index")
    try:
        cells = browser.matrix(browser.indexed(invocation_id), {})["cells"]
    finally:
        browser.close()
    assert cells[("tiny", "q1")]["answers"] == {"cold 2": 1, "posthoc 10": 1}   # not their mean, 6
    assert cells[("tiny", "q2")]["answers"] == {"cold not measured": 1, "posthoc 1": 1}
    text, _ = _cell_html(cells[("tiny", "q2")], "class")
    assert "cold not measured" in text and "posthoc 1" in text
