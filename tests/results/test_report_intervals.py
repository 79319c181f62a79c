"""The headline intervals on the report page and in ``compare`` of two models of one invocation.

A forced_choice invocation of three models is written as a scan writes it (``tests/store_world.py``, the browse
world's grid with other answers: alpha reads the first word shown, beta mostly says the
second word, gamma mostly the first, with some UNCLEAR answers), so every headline varies and carries an interval,
and three models give Holm-adjusted p values that differ from the raw ones. The page must show each model's
estimate, interval and naive interval as the analysis's JSON holds them, each pair's verdict, the warnings and an
error-bar chart embedded as PNG data, and stay self-contained; compare of two labels must print the pair's
difference and verdict as the same JSON holds them. No Ray: the analysis runs in this process."""

from __future__ import annotations

import base64
import html
import io
import json
import re
from pathlib import Path

import pytest

from conftest import new_database

import browse_world  # noqa: E402
import store_world  # noqa: E402
from report_page import self_contained_problems  # noqa: E402

LABELS = ["alpha", "beta", "gamma"]


def answer_of(label: str, pair: int, envelope: str, ordering: str) -> tuple[str, str]:
    """(response, class) of one made-up cell of the varied world."""
    a, b = browse_world.PAIRS[pair]
    if label == "alpha":
        cls = ("A" if ordering == "AB" else "B") if (pair < 3 or envelope == "english_strict") else \
            "UNCLEAR" if ordering == "BA" else "A"
    elif label == "beta":
        if pair == 0 and envelope == "english_strict" and ordering == "AB":
            return browse_world.SCRIPT_ANSWER, "UNCLEAR"
        cls = "A" if pair == 3 else "UNCLEAR" if (pair == 2 and envelope == "json_schema") else "B"
    else:
        cls = "B" if (pair == 0 and ordering == "BA") else \
            "UNCLEAR" if (pair == 1 and envelope == "english_strict" and ordering == "AB") else "A"
    word = {"A": a, "B": b}.get(cls)
    return (f"I choose {word}." if word else "Both are fine."), cls


@pytest.fixture
def made(tmp_path, pg_dsn, monkeypatch):
    """The varied three-model invocation in a local store and a catalog naming it."""
    monkeypatch.setattr(browse_world, "answer_of", answer_of)
    monkeypatch.setattr(browse_world, "LABELS", LABELS)
    monkeypatch.setattr(store_world, "LABELS", LABELS)
    dsn = new_database(pg_dsn)
    return {**store_world.build(tmp_path, dsn), "dsn": dsn}


def reported(made) -> tuple[str, dict]:
    """(page, intervals JSON as the analysis the page was built from stored it) of one ``report``."""
    from mirrorscan.jobs.report import report_invocations

    (path,) = report_invocations(made["invocation_id"], catalog_dsn=made["dsn"])
    base = made["store_dir"] / store_world.EXPERIMENT / made["invocation_id"] / "analysis" / "forced_choice"
    (folder,) = list(base.iterdir())
    intervals = json.loads((folder / "summary.json").read_text())["intervals"]
    return Path(path).read_text(encoding="utf-8"), intervals


def shown(x: float, unit: str) -> str:
    """How the page writes one value of a headline in ``unit`` (as analyze's intervals block prints it)."""
    return f"{x:.1f}%" if unit == "%" else f"{x:+.1f} pp" if unit == "pp" else f"{x:.3f}"


def cells(page: str, cls: str) -> dict:
    """Rows of class ``cls`` in the intervals section: their data attributes → the texts of their cells."""
    out = {}
    for attrs, body in re.findall(rf'<tr class="{cls}" ([^>]*)>(.*?)</tr>', page):
        key = tuple(html.unescape(v) for v in re.findall(r'data-[a-z]+="([^"]*)"', attrs))
        out[key] = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", body)]
    return out


def test_the_page_shows_every_models_interval_each_pairs_verdict_and_an_error_bar_chart(made):
    page, intervals = reported(made)
    heads = intervals["headlines"]
    assert set(heads) == {"per_cell_commit_rate", "position_bias_pp", "mean_sharpness"}
    assert not any("skipped" in h for h in heads.values())   # the answers vary: every headline has an interval
    section = page[page.index("<h2>intervals over the random facets (95 %)</h2>"):page.index("<h2>counts and errors")]
    assert "claim about the model on new levels of the random facets" in section and "method: gstudy" in section
    assert "random (generalised over): envelope, pair_id; fixed (not generalised over): ordering" in section
    rows, diffs = cells(section, "interval"), cells(section, "difference")
    assert len(rows) == 3 * 3 and len(diffs) == 3 * 3   # 3 headlines × 3 models, 3 headlines × 3 pairs
    for name, h in heads.items():
        unit = h["unit"]
        for o in h["objects"]:
            model, estimate, interval, naive = rows[(name, o["object"])][:4]
            assert estimate == shown(o["estimate"], unit)
            assert interval == f"[{shown(o['interval'][0], unit)}, {shown(o['interval'][1], unit)}]"
            assert naive == f"[{shown(o['naive_interval'][0], unit)}, {shown(o['naive_interval'][1], unit)}]"
        for d in h["differences"]:
            row = diffs[(name, d["a"], d["b"])]
            assert row[0] == f"{d['a']} − {d['b']}" and row[-1] == d["verdict"]
            assert float(row[4]) == pytest.approx(d["p_holm"], rel=2e-3, abs=1e-3)
    verdicts = {d["verdict"] for h in heads.values() for d in h["differences"]}
    assert "indistinguishable at this design" in verdicts and verdicts & {"alpha higher", "beta higher", "gamma higher"}
    assert "indistinguishable at this design" in section and "alpha higher" in section
    assert "envelope has 2 level(s), under 6" in section   # the warning, once
    assert section.count("envelope has 2 level(s)") == 1
    # the error-bar chart: a real PNG of three panels, embedded as data
    (data,) = re.findall(r'<img alt="intervals" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', section)
    png = base64.b64decode(data)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    import matplotlib.image

    height, width = matplotlib.image.imread(io.BytesIO(png)).shape[:2]
    assert height > 400 and width > 400
    assert self_contained_problems(page) == []
    assert "<script>" not in page   # the stored answer that is a script tag is shown escaped


def test_compare_of_two_labels_of_one_invocation_prints_their_differences_as_the_analysis_holds_them(made, capsys):
    from mirrorscan.jobs.compare import main
    from mirrorscan.results.analyses import analyze
    from mirrorscan.results.invocations import load

    intervals = analyze(load(made["invocation_id"], dsn=made["dsn"])).numbers["intervals"]
    inv, dsn = made["invocation_id"], made["dsn"]
    # asked the other way round from the JSON's (label-ordered) pair: the difference is turned, p and verdict kept
    assert main([inv, inv, "--label-a", "gamma", "--label-b", "alpha", "--catalog-dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert "hamming" in out   # the instrument's own comparison first
    assert "paired differences gamma − alpha (95 % intervals over the random facets" in out
    holm_differs = False
    for name, h in intervals["headlines"].items():
        (d,) = [d for d in h["differences"] if (d["a"], d["b"]) == ("alpha", "gamma")]
        unit = "pp" if h["unit"] in ("%", "pp") else ""
        value = (lambda x: f"{x:+.1f} pp") if unit else (lambda x: f"{x:.3f}")
        (line,) = [x for x in out.splitlines() if x.startswith(f"  {h['title']}: ")]
        assert line.startswith(f"  {h['title']}: {value(-d['estimate'])} "
                               f"[{value(-d['interval'][1])}, {value(-d['interval'][0])}]"), line
        assert line.endswith(f": {d['verdict']}"), line
        p, holm = re.search(r"p ([0-9.]+), Holm ([0-9.]+):", line).groups()
        assert float(p) == pytest.approx(d["p_value"], rel=2e-3, abs=1e-3)
        assert float(holm) == pytest.approx(d["p_holm"], rel=2e-3, abs=1e-3)
        holm_differs |= abs(d["p_holm"] - d["p_value"]) > 1e-3
    assert holm_differs   # three models: the Holm p of the invocation, not the pair's own p
    # --json: the same pair as numbers
    assert main([inv, inv, "--label-a", "gamma", "--label-b", "alpha", "--catalog-dsn", dsn, "--json"]) == 0
    pairs = json.loads(capsys.readouterr().out)["paired_differences"]
    for got in pairs:
        (d,) = [d for d in intervals["headlines"][got["headline"]]["differences"] if (d["a"], d["b"]) == ("alpha", "gamma")]
        assert got["estimate"] == pytest.approx(-d["estimate"]) and got["p_holm"] == d["p_holm"]
        assert got["verdict"] == d["verdict"]


def test_compare_of_one_label_against_itself_or_of_one_model_prints_no_differences(made, capsys):
    from mirrorscan.jobs.compare import main

    inv, dsn = made["invocation_id"], made["dsn"]
    assert main([inv, inv, "--label-a", "beta", "--label-b", "beta", "--catalog-dsn", dsn]) == 0
    assert "paired differences" not in capsys.readouterr().out


def test_the_section_escapes_every_text_and_says_why_a_number_has_no_interval():
    from mirrorscan.results.report import Report
    from mirrorscan.results.report_html import render

    evil = '<script>alert("i")</script>'
    intervals = {"level": 0.95, "method": "gstudy", "object": "model", "headlines": {
        "n<q>": {"title": "t<i>", "unit": "%", "replicates": "", "components_method": "reml", "missing_cells": 2,
                 "random": ["env<u>"], "fixed": [], "objects": [
                     {"object": "<em>m</em>", "estimate": 50.0, "interval": [40.0, 60.0], "naive_interval": [45.0, 55.0],
                      "width_ratio": 2.0, "df": 3.5, "n_cells": 8}],
                 "differences": [{"a": "<em>m</em>", "b": evil, "estimate": 1.0, "interval": [-1.0, 3.0],
                                  "p_value": 0.2, "p_holm": 0.4, "df": 3.0, "verdict": f"{evil} higher"}],
                 "warnings": [evil]},
        "skip": {"title": "s", "unit": "", "skipped": f"0 scored cell(s) {evil}"}}}
    page = render(Report(
        invocation_id="0" * 8, experiment="e", instrument="forced_choice", status="complete", description="",
        provenance={}, package_versions={}, content_hashes={}, model_sources=None, settings={}, catalog_counts={},
        per_model=[], errors=[], counts_sql="", errors_sql="", samples=[], headline=[], analysis_text="", notes=(),
        charts={}, analysis_dir=None, intervals=intervals, interval_chart=None))
    assert "<script" not in page and "<em>" not in page and "<u>" not in page and "<q>" not in page and "<i>" not in page
    assert "no interval: 0 scored cell(s) &lt;script&gt;" in page
    assert "variance components by REML (cells missing), 2 cell(s) missing" in page
    assert "[40.0%, 60.0%]" in page and "+1.0 pp" in page and self_contained_problems(page) == []
    # without intervals the page has no such section
    bare = render(Report(
        invocation_id="0" * 8, experiment="e", instrument="forced_choice", status="complete", description="",
        provenance={}, package_versions={}, content_hashes={}, model_sources=None, settings={}, catalog_counts={},
        per_model=[], errors=[], counts_sql="", errors_sql="", samples=[], headline=[], analysis_text="", notes=(),
        charts={}, analysis_dir=None))
    assert "intervals over the random facets" not in bare


def test_the_chart_draws_one_panel_per_headline_with_an_interval_and_none_without():
    from mirrorscan.analysis.plotting import interval_chart

    def head(n):
        return {"title": f"h{n}", "unit": "pp", "random": ["envelope"], "objects": [
            {"object": f"m{i}", "estimate": float(i), "interval": [i - 2.0, i + 2.0],
             "naive_interval": [i - 1.0, float("nan")] if i == 1 else [i - 1.0, i + 1.0]} for i in range(3)]}

    one = interval_chart({"level": 0.95, "headlines": {"a": head(1), "s": {"title": "s", "unit": "", "skipped": "x"}}})
    two = interval_chart({"level": 0.95, "headlines": {"a": head(1), "b": head(2)}})
    import matplotlib.image

    h1 = matplotlib.image.imread(io.BytesIO(one)).shape[0]
    h2 = matplotlib.image.imread(io.BytesIO(two)).shape[0]
    assert one[:8] == two[:8] == b"\x89PNG\r\n\x1a\n" and h2 > 1.6 * h1   # the skipped one gets no panel
    assert interval_chart({"level": 0.95, "headlines": {"s": {"title": "s", "unit": "", "skipped": "x"}}}) is None
