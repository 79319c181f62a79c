"""What the browser shows of an open_scan cell: cold and post-hoc ratings apart, never averaged together, and a
reply without a rating shown as not measured, never as a number."""

from __future__ import annotations

import pyarrow as pa

from grid.instrument import cell_value, resolve
from results.browse.pages import _cell_html


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
