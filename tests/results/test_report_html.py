"""The report page without a scan: text from traces and settings is escaped, secrets and DSN passwords are
removed before anything is rendered."""

from __future__ import annotations

import html
import sys
from pathlib import Path

import pytest

from report_page import self_contained_problems  # noqa: E402


def test_responses_and_labels_are_escaped_and_passwords_never_shown():
    from mirrorscan.grid.headline import HeadlineSource
    from mirrorscan.results.report import HeadlineNumber, Report, redact
    from mirrorscan.results.report_html import render

    evil = '<script>alert("r")</script>'
    settings = redact({"models": [{"label": "<em>m</em>"}], "execution": {
        "catalog": "postgresql://alice:hunter2@db.example/mirror", "api_key": "sk-secret"}})
    assert settings["execution"] == {"catalog": "postgresql://alice@db.example/mirror", "api_key": "***"}
    page = render(Report(
        invocation_id="0" * 8, experiment="e<i>", instrument="forced_choice", status="complete", description=evil,
        provenance=redact({"catalog": "host=db password=hunter2 user=alice"}), package_versions={}, content_hashes={},
        model_sources=None, settings=settings, catalog_counts={}, per_model=[{"label": "<em>m</em>", "rows": 1,
        "error_rows": 1, "cells": 1, "ok_cells": 0, "error_cells": 1}], errors=[(evil, 1)], counts_sql="SELECT 1",
        errors_sql="SELECT 2", samples=[("asked <img src=x>", evil, "A")],
        headline=[HeadlineNumber("<em>m</em>", "n", 0.5, HeadlineSource("n", "defined <u>", "SELECT '<x>' AS value"))],
        analysis_text=evil, notes=(evil,), charts={}, analysis_dir=None))
    assert "<script" not in page and "<em>" not in page and "<img src=x" not in page and "<u>" not in page
    assert page.count(html.escape(evil)) >= 4   # description, error, response, analysis text, note
    assert "hunter2" not in page and "sk-secret" not in page and "host=db user=alice" in page


def test_lens_sources_name_the_positive_class_and_the_analysis_table_they_read():
    from mirrorscan.grid.instrument import Analysis, resolve
    from mirrorscan.grid.settings import Settings
    from mirrorscan.results.report import headline_numbers, Report
    from mirrorscan.results.report_html import render

    lens = resolve("lens")
    analysis = Analysis(text="", numbers={"positive_class": "deployment", "concordance": {"base": {"w": 0.25}},
                                          "models": {"a/base": {"variant": "base", "headline": {"median": 0.1, "sd": 0.02},
                                                                "label_floor": {"median": 0.05}}}})
    from mirrorscan.grid.instrument import ref_from_section

    frozen = ref_from_section("lens", {"extraction": {"layers": "all"}, "seed": 7, "null_permutations": 50}, ".").frozen
    frozen["framings"].update(evaluation=["e1", "e2"], deployment=["d1"])   # a complete section, these wrappers
    settings = Settings(instrument_settings=frozen)
    rows = headline_numbers(lens, analysis, settings, "1234abcd")
    values = {n.name: n.value for n in rows}
    assert values == {"median_max_auroc_minus_half": 0.1, "sd_over_wrappers": 0.02, "positive_class": "deployment",
                      "label_floor_median": 0.05, "kendall_w": 0.25}
    assert all(n.source is not None for n in rows)
    page = render(Report(invocation_id="1234abcd", experiment="l", instrument="lens", status="complete", description="",
                         provenance={}, package_versions={}, content_hashes={}, model_sources=None, settings={},
                         catalog_counts={}, per_model=[], errors=[], counts_sql="", errors_sql="", samples=[],
                         headline=rows, analysis_text="", notes=(), charts={}, analysis_dir="/s/l/1234abcd/analysis/lens/X"))
    assert "positive class &#x27;deployment&#x27;" in page
    assert ("mirrorscan stats kendall --input /s/l/1234abcd/analysis/lens/X/wrappers.parquet --score "
            "max_auroc_minus_half --object label --rater wrapper --permutations 50 --seed 7") in page
    assert ("mirrorscan lens headline --input vectors.csv --positive deployment --evaluation e1,e2 --deployment d1 "
            "--layers all --permutations 50 --seed 7") in page
    # the query's CSV for the headline, its spread and the floor: printed once, the other two rows link to it
    assert page.count("&gt; vectors.csv</pre>") == 1 and page.count('class="same-query"') == 2
    assert self_contained_problems(page) == []   # those links name the printed query on the same page
    assert "{analysis}" not in page


def test_the_self_contained_check_takes_links_within_the_page_only():
    """The check the report tests apply: a fragment naming an element of the same page passes; a link or an
    image from elsewhere, a relative one, a fragment naming nothing, a script or a stylesheet does not."""
    ok = ('<html><head><meta charset="utf-8"><style>b{color:red}</style></head><body><a id="q1"></a><pre>x</pre>'
          '<a href="#q1">above</a><img alt="c" src="data:image/png;base64,AAAA"><p>&lt;img src=x&gt; text</p>'
          '</body></html>')
    assert self_contained_problems(ok) == []
    for bad in ('<a href="https://example.org/">x</a>', '<a href="other.html#q1">x</a>', '<a href="#q9">x</a>',
                '<a href="#">x</a>', '<a href="//example.org">x</a>', '<img src="chart.png">',
                '<img src=" https://example.org/c.png">', '<script>1</script>', '<link rel="stylesheet" href="#q1">',
                '<style>b{background:url(https://example.org/b.png)}</style>', '<p style="background:url(b.png)">x</p>',
                '<meta http-equiv="refresh" content="0;url=https://example.org">', '<iframe srcdoc="x"></iframe>'):
        assert self_contained_problems(ok.replace("</body>", bad + "</body>")), bad


def test_the_printed_kendall_command_gives_the_lens_analysis_w(tmp_path, capsys):
    """What lens's source claims: `mirrorscan stats kendall` on the analysis's wrappers.parquet returns the W
    the lens analysis reports (its concordance over the same table), whatever the seed."""
    import json

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mirrorscan.instruments.lens.gstudy import concordance
    from mirrorscan.jobs import stats

    rng = np.random.default_rng(5)
    rows = [{"label": m, "variant": "base", "wrapper": f"e{i}×d{j}", "max_auroc_minus_half": float(rng.normal())}
            for m in ("a", "b", "c") for i in range(3) for j in range(2)]
    w = concordance(rows, ["base"], 20, 7)["base"]["w"]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "wrappers.parquet")
    assert stats.main(["kendall", "--input", str(tmp_path / "wrappers.parquet"), "--score", "max_auroc_minus_half",
                       "--object", "label", "--rater", "wrapper", "--permutations", "20", "--seed", "7"]) == 0
    got = json.loads(capsys.readouterr().out)["kendall_w"]["w_tie_corrected"]
    assert 0 < w < 1 and got == pytest.approx(w, rel=1e-12)
