"""``mirrorscan report`` on a real forced-choice scan: the tiny Llama overfit to a planted answer table
(tests/jobs/overfit.py) scanned once through real Ray, the embedded PostgreSQL and a local store, then
reported through the CLI. The planted classes give known numbers (per-cell commit rate 30/36, unanimity
split "3 / 1 / 5", sharpness 6.75/8, position bias +16.7 pp), and every query the page prints is run
through the real ``mirrorscan sql`` and must return the number the page shows."""

from __future__ import annotations

import base64
import html
import json
import os
import re
from pathlib import Path

import pytest

import overfit  # noqa: E402  (tests/jobs/overfit.py)

from conftest import new_database  # noqa: E402

from report_page import numbers, query_of, run_cli  # noqa: E402

DESCRIPTION = 'planted table <script>alert("x")</script> & more'


@pytest.fixture(scope="module")
def reported(tmp_path_factory, overfit_dir, pg_dsn, ray_local):
    """One scan of the planted table (36 cells) and one report of it, written through the CLI."""
    from mirrorscan.jobs.scan import run_scan

    base = tmp_path_factory.mktemp("report_fc")
    exp = base / "exps" / "fc_report"
    exp.mkdir(parents=True)
    (exp / "pairs.csv").write_text(overfit.PAIRS_CSV)
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "description": DESCRIPTION,
        "models": [{"model": str(overfit_dir), "label": "fit"}], "probe_set": "pairs.csv",
        "envelopes": list(overfit.ENVELOPES), "orderings": list(overfit.ORDERINGS), "samples": 1,
        "temperature": 0.0, "max_tokens": 12, "seed": 3, "batch_size": 8, "actor_pool_size": 1}))
    dsn, store = new_database(pg_dsn), str(base / "store")
    result = run_scan(str(exp), store=store, catalog_dsn=dsn, quiet=True)
    assert result.status == "complete" and result.counts["ok"] == 36
    env = {**os.environ, "MIRRORSCAN_CATALOG_DSN": dsn, "MIRRORSCAN_HOME": str(base / "home"), "HF_HUB_OFFLINE": "1"}
    proc = run_cli(["report", str(exp)], env)
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("report: ")]
    path = Path(line.removeprefix("report: "))
    return {"exp": exp, "inv": result.invocation_id, "store": store, "env": env, "path": path,
            "html": path.read_text(encoding="utf-8")}


def test_the_report_holds_settings_counts_numbers_definitions_charts_and_queries(reported):
    page, inv = reported["html"], reported["inv"]
    assert reported["path"].parent.name == "report" and reported["path"].parent.parent.name == inv
    assert f"invocation <code>{inv}</code>" in page and "status <b>complete</b>" in page
    # settings and provenance
    assert "&quot;max_tokens&quot;: 12" in page and "&quot;seed&quot;: 3" in page and "git_sha" in page
    assert "pair_commit_split" in page and "probe_set" in page
    # counts: 36 rows, 36 cells, all ok
    assert re.search(r'<tr class="counts" data-model="fit"><td>fit</td><td class="value">36</td>'
                     r'<td class="value">0</td><td class="value">36</td><td class="value">36</td>'
                     r'<td class="value">0</td></tr>', page)
    # headline numbers with their definitions: the planted values
    rows = numbers(page)
    assert {name for model, name in rows} == {"per_cell_commit_rate", "pair_commit_unanimity", "mean_sharpness",
                                              "position_bias_pp"}
    assert rows[("fit", "per_cell_commit_rate")]["value"] == f"{30 / 36:.6g}"
    assert rows[("fit", "pair_commit_unanimity")]["value"] == "3 / 1 / 5"
    assert rows[("fit", "mean_sharpness")]["value"] == f"{6.75 / 8:.6g}"
    assert rows[("fit", "position_bias_pp")]["value"] == f"{100 * 3 / 18:.6g}"
    # shown as analyze prints them (the exact value above is the cell's data-value)
    assert [rows[("fit", n)]["shown"] for n in ("per_cell_commit_rate", "mean_sharpness", "position_bias_pp")] == \
        [f"{100 * 30 / 36:.1f}%", f"{6.75 / 8:.3f}", f"{100 * 3 / 18:+.1f} pp"]
    assert "share of answered cells (not pairs)" in page and "unanimity rule" in page
    # every number has its query, and the page embeds the analysis's three charts and the intervals' error bars
    # (the planted classes vary, so the commit rate has an interval) as PNG data
    assert all(len(r["sql"]) == 1 and r["sql"][0].startswith('mirrorscan sql "') for r in rows.values())
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', page)
    assert sorted(name for name, _ in images) == ["fingerprint_agreement", "intervals", "pair_commit_split",
                                                  "position_bias_by_envelope"]
    assert '<tr class="interval" data-headline="per_cell_commit_rate" data-model="fit">' in page
    for _, data in images:
        assert base64.b64decode(data, validate=True)[:8] == b"\x89PNG\r\n\x1a\n"
    # the analysis it came from was written beside the traces
    folder = re.search(r"numbers and charts as written by the analysis in <code>([^<]+)</code>", page).group(1)
    assert (Path(html.unescape(folder)) / "summary.json").is_file()


def test_every_printed_query_returns_the_number_the_report_shows(reported):
    rows = numbers(reported["html"])
    for (model, name), row in rows.items():
        proc = run_cli(["sql", "--format", "json", query_of(html.unescape(row["sql"][0]))], reported["env"])
        assert proc.returncode == 0, (name, proc.stderr)
        (got,) = [json.loads(x) for x in proc.stdout.splitlines() if json.loads(x)["label"] == model]
        value = got["value"]
        shown = row["value"]
        if isinstance(value, str):
            assert value == shown, name
        else:
            assert float(shown) == pytest.approx(value, rel=1e-5), name   # shown to 6 significant digits
    # the counts query too
    counts = re.search(r'<h3>in the stored rows</h3>.*?<pre class="sql">(.*?)</pre>', reported["html"], re.DOTALL)
    proc = run_cli(["sql", "--format", "json", query_of(html.unescape(counts.group(1)))], reported["env"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"label": "fit", "rows": 36, "error_rows": 0, "cells": 36, "ok_cells": 36}


def test_text_from_the_settings_is_escaped_and_nothing_outside_the_file_is_referenced(reported):
    page = reported["html"]
    assert "<script" not in page.lower()
    assert html.escape(DESCRIPTION, quote=True) in page
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.IGNORECASE)
    assert not re.search(r"<link\b|@import|url\(", page, re.IGNORECASE)
    assert "base64" in page   # the charts are inside the file


def test_a_second_report_is_a_new_file_and_the_first_is_kept(reported):
    proc = run_cli(["report", reported["inv"][:8]], reported["env"])
    assert proc.returncode == 0, proc.stderr
    second = Path(proc.stdout.strip().removeprefix("report: "))
    assert second != reported["path"] and second.parent == reported["path"].parent
    assert reported["path"].read_text(encoding="utf-8") == reported["html"]
    assert sorted(p.name for p in second.parent.iterdir()) == sorted([second.name, reported["path"].name])


def test_report_help_and_a_missing_experiment(reported):
    proc = run_cli(["report", "--help"], reported["env"], timeout=120)
    assert proc.returncode == 0 and "self-contained HTML" in proc.stdout and "--all" in proc.stdout
    proc = run_cli(["report", "never_scanned"], reported["env"], timeout=120)
    assert proc.returncode == 2 and "never_scanned" in proc.stderr and "mirrorscan scan" in proc.stderr

