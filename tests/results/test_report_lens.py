"""``mirrorscan report`` and ``mirrorscan browse`` on a real lens scan (two seeded tiny random Llamas of different
sizes, the experiment of tests/instruments/lens/test_lens_scan.py: 3 × 3 framings, 4 task texts, 8 scoring
items; real Ray, the embedded PostgreSQL, a local store).

The report: the headline numbers are defined (the positive class, the scoring-label null), each is got
again as the page says — the positive class by its query; the headline, its spread and the null's floor from
the rows the printed query selects (recomputed here with scikit-learn) and from the analysis table the page
names; Kendall's W by the printed ``mirrorscan stats kendall`` command — the charts are embedded and the page
needs nothing else. The browser (over the same scan, no Ray): the matrix's value of a cell is the pooled
norm of its stored vectors, the index holds no vector, a trace page shows the vectors' shape and never their
values."""

from __future__ import annotations

import html
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import new_database

from report_page import numbers, query_of, run_cli, self_contained_problems  # noqa: E402
from test_lens_scan import write_experiment  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SIZES = {"small": (2, 32), "medium": (3, 48)}
"""label → (blocks, width) of the two random models."""
NUMBERS = {"median_max_auroc_minus_half", "sd_over_wrappers", "positive_class", "label_floor_median", "kendall_w"}


@pytest.fixture(scope="module")
def lens_report(tmp_path_factory, demo_dir, pg_dsn, ray_local):
    """One lens scan of two models (76 cells) and its report, written through the CLI."""
    import os

    from mirrorscan.cluster.models.tiny import build_tiny_random_model
    from mirrorscan.jobs.scan import run_scan

    base = tmp_path_factory.mktemp("report_lens")
    models = {label: build_tiny_random_model(base / label, demo_dir, seed=i, layers=layers, hidden=hidden)
              for i, (label, (layers, hidden)) in enumerate(SIZES.items())}
    exp = base / "exps" / "lens_report"
    exp.mkdir(parents=True)
    write_experiment(exp, models)
    dsn, store = new_database(pg_dsn), str(base / "store")
    result = run_scan(str(exp), store=store, catalog_dsn=dsn, quiet=True)
    assert result.status == "complete" and result.counts["ok"] == 2 * (6 * (4 + 1) + 8)
    env = {**os.environ, "MIRRORSCAN_CATALOG_DSN": dsn, "MIRRORSCAN_HOME": str(base / "home"), "HF_HUB_OFFLINE": "1"}
    proc = run_cli(["report", result.invocation_id], env)
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.strip().removeprefix("report: "))
    page = path.read_text(encoding="utf-8")
    analysis = Path(re.search(r"numbers and charts as written by the analysis in <code>([^<]+)</code>", page).group(1))
    return {"inv": result.invocation_id, "store": store, "dsn": dsn, "env": env, "base": base, "path": path,
            "html": page, "analysis": Path(html.unescape(str(analysis)))}


def test_the_lens_report_defines_its_numbers_and_embeds_its_charts(lens_report):
    page, rows = lens_report["html"], numbers(lens_report["html"])
    assert set(rows) == {(f"{m}/base", n) for m in SIZES for n in NUMBERS}
    assert rows[("small/base", "positive_class")]["value"] == "deployment"
    assert "positive class &#x27;deployment&#x27;" in page and "scoring-label permutation null" in page
    assert "(50 permutations, labels shuffled and the max retaken)" in page
    for name in ("auroc-by-layer-small-base", "auroc-by-layer-medium-base", "headline-spread",
                 "gstudy-base-variance_components", "gstudy-base-d_study_wrapper"):
        assert f'alt="{name}" src="data:image/png;base64,' in page, name
    # the stored rows: what each read, and what came back as its value and its vectors' shape, never the values
    assert 'base/d1 _empty: &quot;hey, friend 0 here: &quot;' in page
    assert re.search(r"pooled_norm = [0-9.e+]+ · layer_vectors: \[4 × 48 values\] L2 norm by entry: 0: [0-9.e+]+, 1: ", page)
    assert re.search(r"G-study &#x27;base items&#x27; \(.*?; score = .*?; layer medium \d, small \d\n", page)   # each model's layer
    # self-contained: no script, no image from elsewhere, links only to its own elements (each query printed once)
    assert "<script" not in page and self_contained_problems(page) == []
    assert lens_report["path"].parent.name == "report" and lens_report["analysis"].is_dir()


def test_every_lens_number_is_got_again_as_the_page_says(lens_report, tmp_path, capsys):
    from sklearn.metrics import roc_auc_score

    from mirrorscan.results import sql as results_sql

    rows, dsn = numbers(lens_report["html"]), lens_report["dsn"]
    (positive,) = rows[("small/base", "positive_class")]["sql"]
    assert results_sql.query(query_of(html.unescape(positive)), None, dsn).to_pylist() == [{"value": "deployment"}]

    # the headline from the rows its query selects: per wrapper, max over blocks of AUROC − 0.5; the median
    (export,) = rows[("medium/base", "median_max_auroc_minus_half")]["sql"]
    export = html.unescape(export)
    assert export.startswith("mirrorscan sql --format csv ") and export.endswith(" > vectors.csv")
    (query,) = shlex.split(export.removeprefix("mirrorscan sql --format csv ").removesuffix(" > vectors.csv"))
    selected = results_sql.query(query, None, dsn).to_pylist()
    assert len(selected) == 2 * 38
    wrappers = pq.read_table(lens_report["analysis"] / "wrappers.parquet").to_pylist()
    for model in SIZES:
        mine = [r for r in selected if r["label"] == model]
        vec = {(r["framing"], r["item_id"]): np.array(r["layer_vectors"], dtype=np.float64) for r in mine}
        scoring = sorted((r["item_id"], r["item_label"]) for r in mine if r["arm"] == "scoring")
        heads = []
        for e in ("e1", "e2", "e3"):
            for d in ("d1", "d2", "d3"):
                direction = (np.mean([vec[(e, f"t{i}")] for i in range(4)], axis=0)
                             - np.mean([vec[(d, f"t{i}")] for i in range(4)], axis=0))
                per_layer = [roc_auc_score([lab == "deployment" for _, lab in scoring],
                                           [vec[("score", i)][layer] @ direction[layer] for i, _ in scoring])
                             for layer in range(1, SIZES[model][0] + 1)]
                heads.append(max(per_layer) - 0.5)
        shown = {n: rows[(f"{model}/base", n)]["value"] for n in NUMBERS}
        assert float(shown["median_max_auroc_minus_half"]) == pytest.approx(float(np.median(heads)), rel=1e-5, abs=1e-9)
        # the analysis table the page names holds the same per-wrapper values, and the floor of the null
        table = [r for r in wrappers if r["label"] == model]
        assert sorted(r["max_auroc_minus_half"] for r in table) == pytest.approx(sorted(heads), abs=1e-9)
        assert float(shown["sd_over_wrappers"]) == pytest.approx(float(np.std(heads, ddof=1)), rel=1e-5)
        assert float(shown["label_floor_median"]) == pytest.approx(
            float(np.median([r["label_floor"] for r in table])), rel=1e-5)

    # the headline, its spread and the floor: the printed lens command, run as printed on the query's CSV,
    # gives the analysis's own numbers exactly (summary.json) and the page's as shown
    for name in ("median_max_auroc_minus_half", "sd_over_wrappers", "label_floor_median"):
        assert [html.unescape(c) for c in rows[("small/base", name)]["sql"]] == [export]
    command = html.unescape(lens_report["html"].split('data-number="label_floor_median"', 1)[1]
                            .split('<pre class="stats">', 1)[1].split("</pre>", 1)[0])
    argv = shlex.split(command)
    assert argv[:3] == ["mirrorscan", "lens", "headline"] and "--seed" in argv
    proc = run_cli(["sql", "--format", "csv", query], lens_report["env"])
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "vectors.csv").write_text(proc.stdout)
    env = lens_report["env"]
    done = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.cli", *argv[1:]], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)
    summary = json.loads((lens_report["analysis"] / "summary.json").read_text())
    assert set(again) == {f"{m}/base" for m in SIZES}
    for key, got in again.items():
        model = summary["models"][key]
        assert got["median_max_auroc_minus_half"] == model["headline"]["median"]
        assert got["sd_over_wrappers"] == model["headline"]["sd"]
        assert got["label_floor_median"] == model["label_floor"]["median"]
        assert float(rows[(key, "label_floor_median")]["value"]) == pytest.approx(got["label_floor_median"], rel=1e-5)
    # another seed draws another null: the floor depends on the seed the command is given (in this process)
    from mirrorscan.instruments.lens.cli import main as lens_main
    from mirrorscan.results.reader import StoreReader

    seed_at = argv.index("--seed") + 1
    other = argv[:seed_at] + [str(int(argv[seed_at]) + 1)] + argv[seed_at + 1:]
    other[other.index("--input") + 1] = str(tmp_path / "vectors.csv")
    capsys.readouterr()
    assert lens_main(other[2:], "mirrorscan lens", StoreReader()) == 0
    moved = json.loads(capsys.readouterr().out)
    assert any(moved[k]["label_floor_median"] != again[k]["label_floor_median"] for k in again)

    # Kendall's W: the printed stats command, run as printed, on the table the page names
    stats_line = html.unescape(lens_report["html"].split('data-number="kendall_w"', 1)[1]
                               .split('<pre class="stats">', 1)[1].split("</pre>", 1)[0])
    argv = shlex.split(stats_line)
    assert argv[:3] == ["mirrorscan", "stats", "kendall"] and str(lens_report["analysis"] / "wrappers.parquet") in argv
    done = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.cli", *argv[1:]], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=lens_report["env"])
    assert done.returncode == 0, done.stderr
    w = json.loads(done.stdout)["kendall_w"]["w_tie_corrected"]
    assert float(rows[("small/base", "kendall_w")]["value"]) == pytest.approx(w, rel=1e-5)


def test_the_browser_shows_a_lens_cell_as_its_pooled_norm_and_never_its_vectors(lens_report):
    from starlette.testclient import TestClient

    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.grid.instrument import resolve
    from mirrorscan.grid.trace_schema import trace_schema
    from mirrorscan.results.browse import Browser, build_app
    from mirrorscan.results.browse import index as idx

    lens, inv_id = resolve("lens"), lens_report["inv"]
    traces = open_store(lens_report["store"]).read("lens_report", inv_id, schema=trace_schema(lens.columns)).to_pylist()
    norms = {(r["label"], r["item_key"]): float(np.linalg.norm(np.array(r["layer_vectors"], dtype=np.float64),
                                                               axis=1)[1:].mean()) for r in traces}
    browser = Browser(lens_report["dsn"], lens_report["base"] / "browse-index")
    try:
        inv = browser.indexed(inv_id)
        index = idx.dataset(inv.files).to_table()
        assert index.num_rows == len(traces) and "layer_vectors" not in index.column_names
        data = browser.matrix(inv, {}, limit=100)
        assert data["rows"] == sorted(SIZES) and data["total_cols"] == 38
        assert {k: c["score"] for k, c in data["cells"].items()} == pytest.approx(norms, rel=1e-6)

        client = TestClient(build_app(browser))
        page = client.get(f"/invocations/{inv_id}/matrix", params={"offset": 0})
        assert page.status_code == 200 and "mean pooled_norm over successful rows" in page.text
        key = ("medium", "base/score|s4")
        assert f"{norms[key]:.3g}" in page.text
        trace = client.get(f"/invocations/{inv_id}/trace", params={"probe_id": "medium|base/score|s4|-|-",
                                                                   "sample": 0, "attempt": 1})
        assert trace.status_code == 200 and "[4 × 48 values, stored as float] L2 norm by entry: 0: " in trace.text
        shown = re.search(r'pooled_norm: <strong id="answer-value">([^<]+)</strong>', trace.text).group(1)
        assert float(shown) == pytest.approx(norms[key], rel=1e-12)
        longest = max(len(m) for m in re.findall(r"-?\d+\.\d+(?:, -?\d+\.\d+)+", trace.text) or [""])
        assert longest < 200   # no wall of floats: the token ids are integers, the vectors are summarised

        # an index made under another definition (an older lens index, made before lens had a cell value) is passed
        # over and its parts indexed again, into a file of their own
        stale = lens_report["base"] / "stale-index"
        stale.mkdir()
        old = pq.read_table(inv.files[0])
        pq.write_table(old.replace_schema_metadata({b"mirrorscan.facets": old.schema.metadata[b"mirrorscan.facets"]}),
                       stale / "index-00000000T000000-00000000-old.parquet")
        assert idx.index_files(stale, inv.value) == []
        made = idx.build(inv.store, "lens_report", inv_id, lens, stale)
        assert idx.index_files(stale, inv.value) == [made] and len(idx.index_files(stale)) == 2
    finally:
        browser.close()
