"""The report's facts read as browse and analyze print them: start and finish to the second in UTC (no
microseconds, no offset), a fact nothing recorded as ``—`` (never "not measured", which says a measurement
was missed), a float never in scientific notation, and the page's own time in the same form."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from mirrorscan.grid.formatting import stamp
from mirrorscan.results.report import Report
from mirrorscan.results.report_html import plain, render

STARTED = datetime(2026, 12, 5, 19, 35, 13, 322318, tzinfo=timezone.utc)


def test_a_moment_reads_to_the_second_in_utc():
    assert stamp(STARTED) == "2026-12-05 19:35:13 UTC"
    assert stamp(STARTED.astimezone(timezone(timedelta(hours=-5)))) == "2026-12-05 19:35:13 UTC"
    assert stamp(None) == "—"


def test_recorded_facts_read_plainly():
    assert plain(None) == "—" and plain(1.5e-05) == "0.0000150" and plain(True) == "true" and plain(12) == "12"


def test_the_pages_provenance_and_stamp_read_as_browse_prints_them():
    from mirrorscan.results.report import provenance_of

    provenance = provenance_of({"started_at": STARTED, "finished_at": None, "git_dirty": False, "pid": 7})
    assert provenance["started_at"] == "2026-12-05 19:35:13 UTC" and provenance["reconstructed_from"] is None
    page = render(Report(
        invocation_id="0" * 8, experiment="e", instrument="forced_choice", status="complete", description="",
        provenance={**provenance, "share": 1.5e-05},
        package_versions={}, content_hashes={}, model_sources=None, settings={}, catalog_counts={"seconds": 2.5e-06},
        per_model=[], errors=[], counts_sql="", errors_sql="", samples=[], headline=[], analysis_text="", notes=(),
        charts={}, analysis_dir=None))
    text = re.sub(r"<[^>]+>", " ", page)
    assert "2026-12-05 19:35:13 UTC" in text and "322318" not in text
    assert "not measured" not in text and "e-0" not in text
    assert re.search(r"report generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text), text[:400]
