"""analyze prints, after the headline intervals, the cheapest design reaching Eρ² 0.8 under each number's own
G-study, costed in rows, or in engine seconds where the invocation's inference log measured them.

The invocation is the varied three-model forced_choice world of test_report_intervals (written as a scan writes
it; no Ray)."""

from __future__ import annotations

import json
import math
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from test_report_intervals import made  # noqa: F401  (the fixture)


def _summary(report) -> dict:
    return json.loads(Path(next(p for p in report.outputs if p.endswith("summary.json"))).read_text())


def test_plan_in_rows_without_an_inference_log(made):  # noqa: F811
    from mirrorscan.jobs.analyze import analyze_invocation, format_report

    report = analyze_invocation(made["invocation_id"], catalog_dsn=made["dsn"])
    text = format_report(report)
    assert "plan (the cheapest design whose Eρ² reaches 0.80" in text
    plans = _summary(report)["intervals"]["plans"]
    assert plans["cost_unit"] == "rows" and plans["headlines"]
    heads = _summary(report)["intervals"]["headlines"]
    # a position-bias score is made of both orderings' rows; the observed design costs every answered row once
    answered = heads["per_cell_commit_rate"]["n_scores"]            # one score per answered row
    assert plans["headlines"]["position_bias_pp"]["observed"]["cost"] == pytest.approx(
        2 * heads["position_bias_pp"]["n_scores"])
    assert plans["headlines"]["per_cell_commit_rate"]["observed"]["cost"] == pytest.approx(answered)
    for name, p in plans["headlines"].items():
        assert p["cost_unit"] == "rows"
        if "design" in p:
            assert p["design"]["g_coefficient"] >= 0.8
            rows_per_cell = heads[name]["n_scores"] * heads[name]["rows_per_score"] / heads[name]["n_rows"]
            assert p["design"]["cost"] == pytest.approx(3 * rows_per_cell * math.prod(p["design"]["design"].values()))
            assert f"{heads[name]['title']}: now" in text


def test_plan_in_engine_seconds_from_the_inference_log(made):  # noqa: F811
    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.jobs.analyze import analyze_invocation

    t0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
    with Catalog(made["dsn"]) as catalog, catalog.transaction():
        for k, label in enumerate(["alpha", "beta", "gamma"]):
            for cell in range(4):                                # one batch of 4 rows: 2 s, 4 s, 6 s
                catalog.execute("INSERT INTO inference_log (row_uid, probe_id, sample, attempt, invocation_id, label, "
                                "source, started_at, total_ms, timing_scope, status) VALUES "
                                "(%s,%s,0,1,%s,%s,'engine',%s,%s,'batch','ok')",
                                [str(uuid.uuid4()), f"{label}|p{cell}|e|AB", made["invocation_id"], label, t0,
                                 2000.0 * (k + 1)])
    report = analyze_invocation(made["invocation_id"], catalog_dsn=made["dsn"])
    plans = _summary(report)["intervals"]["plans"]
    heads = _summary(report)["intervals"]["headlines"]
    commit = plans["headlines"]["per_cell_commit_rate"]
    assert commit["cost_unit"] == "engine seconds"
    per_cell = heads["per_cell_commit_rate"]["n_scores"] / heads["per_cell_commit_rate"]["n_rows"]
    observed = math.prod(commit["observed"]["design"].values())
    # 0.5 + 1.0 + 1.5 engine seconds per row over the three models
    assert commit["observed"]["cost"] == pytest.approx(3.0 * per_cell * observed)


def test_no_plan_where_cost_does_not_grow_with_cells():
    """A headline marked not plannable (lens: an item is extracted once per model, not once per framing pair)
    gets no plan; the same scores marked plannable do."""
    import numpy as np

    from mirrorscan.analysis.headline_intervals import HeadlineScores, headline_intervals, headline_plans

    rng = np.random.default_rng(0)
    cols = {"object": [], "wrapper": [], "item": [], "score": []}
    for m in range(3):
        for w in range(6):
            for i in range(8):
                cols["object"].append(f"m{m}")
                cols["wrapper"].append(f"w{w}")
                cols["item"].append(f"i{i}")
                cols["score"].append(m + rng.normal())
    for plannable, planned in ((True, True), (False, False)):
        result = headline_intervals([HeadlineScores("h", "h", "", cols, ("wrapper", "item"), plannable=plannable)])
        assert ("h" in headline_plans(result)["headlines"]) is planned
