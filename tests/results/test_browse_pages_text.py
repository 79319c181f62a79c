"""Browse's pages print one value one way: an invocation's start and finish as the experiment's list prints
them (``YYYY-MM-DD HH:MM:SS``, no microseconds or offset), and an answer without a class as ``—`` in the
confusion table's header as in its rows (never Python's ``None``)."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from types import SimpleNamespace

from mirrorscan.results.browse import pages

STARTED = datetime(2026, 12, 5, 19, 35, 13, 322318, tzinfo=timezone.utc)
FINISHED = datetime(2026, 12, 5, 19, 36, 59, 744311, tzinfo=timezone.utc)


def row(**over) -> dict:
    return {"invocation_id": "b8c85536-4714-4a8b-bc64-b4eb9d7a4759", "experiment": "open-scan-demo",
            "instrument": "open_scan", "status": "complete", "started_at": STARTED, "finished_at": FINISHED,
            "counts": {"cells": 80}, "store_uri": "/tmp/store", "git_sha": "d1e3d98118", "git_dirty": False,
            "host": "vm", "username": "me", "settings": {}, **over}


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_an_invocations_times_read_as_in_the_experiments_list():
    listed = text(pages.invocations("open-scan-demo", [row()]))
    shown = text(pages.invocation(SimpleNamespace(row=row()), ["a", "b"], [], 80))
    for stamp in ("2026-12-05 19:35:13", "2026-12-05 19:36:59"):
        assert stamp in listed and stamp in shown
    assert "322318" not in shown and "+00:00" not in shown
    running = text(pages.invocation(SimpleNamespace(row=row(status="running", finished_at=None)), ["a"], [], 0))
    assert "finished (UTC) —" in running


def test_a_classless_answer_reads_the_same_in_the_confusion_header_and_rows():
    result = {"summary": {"matched": 3, "same": 1, "only_a": 0, "only_b": 0},
              "confusion": [{"ca": None, "cb": None, "n": 1}, {"ca": "cold 1", "cb": "cold 10", "n": 2}],
              "items": [{"item": "pref-001", "n": 3, "same": 1}]}
    html = pages.diff_page("", (("a" * 36, "x"), ("a" * 36, "y")), result, "class", None)
    header = re.search(r"<thead>(.*?)</thead>", html.split("confusion")[1]).group(1)
    assert "None" not in html
    assert "<th>—</th>" in header and "<td>—</td>" in html
