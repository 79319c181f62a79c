"""`mirrorscan stats intervals` and `mirrorscan stats plan` end to end: the JSON the issue names, rows without a
score, the bootstrap's seed, the plan against the table's own components, and costs measured from a real
catalog's inference log."""

from __future__ import annotations

import math
import uuid
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from conftest import new_database
from test_stats_cli import run, write_csv


@pytest.fixture
def scores(tmp_path):
    """3 models × 8 envelopes × 20 items with a big model × envelope interaction, 10 % of scores blank."""
    rng = np.random.default_rng(5)
    m, w, mw = rng.normal(0, 1, 3), rng.normal(0, 0.5, 8), rng.normal(0, 0.6, (3, 8))
    rows = []
    for a in range(3):
        for b in range(8):
            for c in range(20):
                s = m[a] + w[b] + mw[a, b] + rng.normal(0, 0.5)
                rows.append((f"model-{a}", f"env{b}", f"item{c}", "" if rng.random() < 0.1 else round(s, 6)))
    blank = sum(r[3] == "" for r in rows)
    return write_csv(tmp_path / "scores.csv", ["model", "envelope", "item", "score"], rows), blank


def test_intervals_json_has_every_object_and_every_pair_once(capsys, scores):
    path, blank = scores
    rc, out, err = run(capsys, "intervals", "--input", path, "--score", "score", "--object", "model",
                       "--facets", "envelope,item")
    assert rc == 0, err
    for key in ("level", "method", "facets", "n_rows", "missing_cells", "objects", "differences"):
        assert key in out
    assert out["method"] == "gstudy" and out["components_method"] == "reml" and out["level"] == 0.95
    assert out["missing_cells"] == blank and out["rows_without_score"] == blank and out["n_rows"] == 480 - blank
    assert [o["object"] for o in out["objects"]] == ["model-0", "model-1", "model-2"]
    assert sorted((d["a"], d["b"]) for d in out["differences"]) == [("model-0", "model-1"), ("model-0", "model-2"),
                                                                    ("model-1", "model-2")]
    for o in out["objects"]:
        lo, hi = o["interval"]
        nlo, nhi = o["naive_interval"]
        assert lo < o["estimate"] < hi and (hi - lo) > (nhi - nlo)       # the prompt widens it
    by = {o["object"]: o["estimate"] for o in out["objects"]}
    for d in out["differences"]:
        assert d["estimate"] == pytest.approx(by[d["a"]] - by[d["b"]])
        assert d["p_value"] <= d["p_holm"] <= 1
        assert d["verdict"] in ("indistinguishable at this design", f"{d['a']} higher", f"{d['b']} higher")
    assert out["warnings"] == []                                  # 8 envelopes, 20 items: enough levels


def test_bootstrap_method_is_reproducible_by_seed(capsys, scores):
    path, _ = scores
    args = ["intervals", "--input", path, "--score", "score", "--object", "model", "--facets", "envelope,item",
            "--method", "bootstrap", "--draws", "300", "--seed", "7"]
    rc, a, _ = run(capsys, *args)
    rc2, b, _ = run(capsys, *args)
    assert rc == rc2 == 0 and a == b and a["method"] == "bootstrap" and a["draws"] == 300


def test_few_levels_are_warned_about_in_words(capsys, tmp_path):
    rows = [(f"m{a}", f"e{b}", f"i{c}", float(a + b + (c % 3))) for a in range(2) for b in range(3) for c in range(8)]
    path = write_csv(tmp_path / "few.csv", ["model", "envelope", "item", "score"], rows)
    rc, out, _ = run(capsys, "intervals", "--input", path, "--score", "score", "--object", "model",
                     "--facets", "envelope,item")
    assert rc == 0
    assert any(w.startswith("envelope has 3 level(s), under 6: the interval rests on few degrees") for w in out["warnings"])


def test_plan_reaches_its_target_at_the_cost_it_names(capsys, scores):
    path, _ = scores
    rc, out, err = run(capsys, "plan", "--input", path, "--score", "score", "--object", "model",
                       "--facets", "envelope,item", "--target", "0.9", "--cost-per-cell", "0.25",
                       "--max", "envelope=30,item=60")
    assert rc == 0, err
    design = out["design"]
    assert out["cost"] == pytest.approx(3 * 0.25 * design["envelope"] * design["item"])
    assert out["value"] >= 0.9 and out["box"] == {"envelope": 30, "item": 60}
    # no frontier design cheaper than the chosen one reaches the target
    assert all(f["coefficient"] < 0.9 for f in out["frontier"] if f["cost"] < out["cost"])
    assert out["next_step"]["best_facet"] in ("envelope", "item")
    # with a big model × envelope interaction, envelopes are what the design needs more of than items
    assert out["next_step"]["best_facet"] == "envelope"


def test_plan_for_a_budget_and_refusals(capsys, scores):
    path, _ = scores
    base = ["plan", "--input", path, "--score", "score", "--object", "model", "--facets", "envelope,item"]
    rc, out, _ = run(capsys, *base, "--budget", "100", "--cost-per-cell", "1", "--max", "envelope=20,item=40")
    assert rc == 0 and out["cost"] <= 100 and out["budget"] == 100
    rc, _, err = run(capsys, *base, "--target", "0.8")
    assert rc == 2 and "--cost-per-cell" in err and len(err.strip().splitlines()) == 1
    rc, _, err = run(capsys, *base, "--target", "0.8", "--cost-per-cell", "1", "--max", "wrapper=4")
    assert rc == 2 and "not FACET=K for a random facet" in err


def test_costs_are_measured_from_the_inference_log(capsys, scores, pg_dsn, monkeypatch):
    """Each model's engine seconds per cell from a real catalog: a batch's time counts once for its cells."""
    from mirrorscan.cluster.catalog.client import Catalog

    dsn = new_database(pg_dsn)
    monkeypatch.setenv("MIRRORSCAN_CATALOG_DSN", dsn)
    inv = str(uuid.uuid4())
    t0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
    with Catalog(dsn) as catalog:
        catalog.create_invocation({"invocation_id": inv, "experiment": "costs", "instrument": "forced_choice",
                                   "settings": {"x": 1}, "settings_hash": "0" * 64, "status": "complete",
                                   "store_uri": "/nowhere", "counts": {"cells": 6}})
        rows = []
        for k, label in enumerate(["model-0", "model-1", "model-2"]):
            for batch in range(2):                         # two batches of 4 cells, 800 ms × (k + 1) each
                for cell in range(4):
                    rows.append((str(uuid.uuid4()), f"{label}|p{batch}{cell}|e|-", 0, 1, inv, label, "engine",
                                 t0 + timedelta(seconds=10 * batch), 800.0 * (k + 1), "batch", 20, 5, "ok"))
        with catalog.transaction():
            for r in rows:
                catalog.execute("INSERT INTO inference_log (row_uid, probe_id, sample, attempt, invocation_id, label, "
                                "source, started_at, total_ms, timing_scope, prompt_tokens, completion_tokens, "
                                "status) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", list(r))
    path, _ = scores
    rc, out, err = run(capsys, "plan", "--input", path, "--score", "score", "--object", "model",
                       "--facets", "envelope,item", "--target", "0.8", "--costs-from", inv,
                       "--max", "envelope=20,item=40")
    assert rc == 0, err
    per = out["cost_per_cell"]
    assert per == pytest.approx({"model-0": 0.2, "model-1": 0.4, "model-2": 0.6})   # 1.6 s / 8 cells × (k + 1)
    assert out["costs_from"]["labels"]["model-0"]["tokens_per_cell"] == 25
    assert out["cost"] == pytest.approx(1.2 * math.prod(out["design"].values()))
    rc, out, _ = run(capsys, "plan", "--input", path, "--score", "score", "--object", "model",
                     "--facets", "envelope,item", "--target", "0.8", "--costs-from", inv, "--cost-unit", "tokens",
                     "--max", "envelope=20,item=40")
    assert rc == 0 and out["cost_per_cell"] == {"model-0": 25.0, "model-1": 25.0, "model-2": 25.0}
