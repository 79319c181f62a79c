"""``mirrorscan report`` on a real open_scan scan (the tiny random Llama, answers then self-reports, real Ray and
PostgreSQL): every headline number's printed query, run through the real ``mirrorscan sql`` path, returns the
number the page shows."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from report_page import numbers, query_of  # noqa: E402

PROBES = 'query_id,query\nq1,"Tea or coffee, and why?"\nq2,Which season do you like best?\nq3,<script>x</script>\n'


def test_open_scan_numbers_are_got_again_by_their_queries(tmp_path, tiny_dir, catalog_dsn, ray_local):
    from mirrorscan.results import sql as results_sql
    from mirrorscan.jobs.report import report_invocations
    from mirrorscan.jobs.scan import run_scan

    exp = tmp_path / "os_report"
    exp.mkdir()
    (exp / "probes.csv").write_text(PROBES)
    (exp / "config.json").write_text(json.dumps({
        "instrument": "open_scan", "samples": 1, "batch_size": 8, "models": [{"model": str(tiny_dir), "label": "tiny"}],
        "open_scan": {"probes": "probes.csv", "sampling": {"max_tokens": 6}, "report_max_tokens": 4}}))
    dsn = catalog_dsn
    result = run_scan(str(exp), store=str(tmp_path / "store"), catalog_dsn=dsn, quiet=True)
    assert result.status == "complete"
    (path,) = report_invocations(result.invocation_id, catalog_dsn=dsn)
    page = Path(path).read_text(encoding="utf-8")
    rows = numbers(page)
    assert {n for _, n in rows} == {"answers", "answer_chars_mean", "cold_mean", "posthoc_mean"}
    assert rows[("tiny", "answers")]["value"] == "3"
    for (model, name), row in rows.items():
        (got,) = results_sql.query(query_of(html.unescape(row["sql"][0])), None, dsn).to_pylist()
        assert got["label"] == model
        if got["value"] is None:
            assert row["value"] == "— (not measured)", name
        else:
            assert float(row["value"]) == pytest.approx(got["value"], rel=1e-5), name
    assert "<script>x" not in page and "&lt;script&gt;x&lt;/script&gt;" in page   # the probe text, as asked

