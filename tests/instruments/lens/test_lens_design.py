"""The lens D-study asks for the paper's design: fed the variance components that reproduce the prompt-facet
paper's printed coefficients, the report gives back 0.018, 0.014, 0.021 and 0.541; the wrappers needed, the
ratio and the hypothesised-variance figures match the closed form of Eρ² computed here in plain arithmetic."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mirrorscan.analysis.gtheory import RESIDUAL, Component, GStudy
from mirrorscan.instruments.lens.design import design_lines, design_numbers, published_object_variance

PAPER = Path(__file__).resolve().parents[4] / "shared" / "reference-data" / "prompt_facet_paper" / "headline.json"


def paper() -> dict:
    assert PAPER.is_file(), f"reference data missing: {PAPER}"
    return json.loads(PAPER.read_text())


def study(components: dict[str, float], sizes: dict[str, int]) -> GStudy:
    """A G-study holding the given components (the D-study reads nothing else)."""
    facets = tuple(sizes)
    comps = []
    for name, value in components.items():
        label = ":".join(facets) if name == RESIDUAL else name
        parts = tuple(label.split(":"))
        comps.append(Component(name, label, frozenset(parts), parts, (), 1, value, value, value))
    return GStudy(facets[0], facets, sizes, {}, (), tuple(comps), 0.0, math.prod(sizes.values()))


def paper_study() -> GStudy:
    c = paper()["components_implied_by_the_four_coefficients"]
    # the main effects without the model enter Φ only, through their sum at k = n = 1
    absolute = c["absolute_only_error_at_k1_n1"]
    return study({"model": c["s2_m"], "wrapper": 0.5 * absolute, "item_sample": 0.3 * absolute,
                  "model:wrapper": c["s2_mw"], "model:item_sample": c["s2_mi"], "wrapper:item_sample": 0.2 * absolute,
                  RESIDUAL: c["s2_res"]}, {"model": 4, "wrapper": 36, "item_sample": 4})


def test_the_single_wrapper_design_gives_the_papers_printed_coefficients():
    printed = paper()["printed"]
    d = design_numbers(paper_study())

    assert d["single_wrapper"]["sizes"] == {"wrapper": 1, "item_sample": 1}
    assert round(d["single_wrapper"]["g_coefficient"], 3) == printed["single_wrapper_single_item_sample"]["g_coefficient"]
    assert round(d["single_wrapper"]["phi"], 3) == printed["single_wrapper_single_item_sample"]["phi"]
    assert round(d["asymptote_items_at_one_wrapper"]["g_coefficient"], 3) == \
        printed["asymptote_items_to_infinity_at_one_wrapper"]
    assert round(d["asymptote_wrappers_at_one_item_sample"]["g_coefficient"], 3) == \
        printed["asymptote_wrappers_to_infinity_at_one_item_sample"]
    # the observed design (36 wrappers × 4 samples) is a different, much higher number, never the headline
    assert d["observed"]["g_coefficient"] > 0.3


def test_wrappers_needed_ratio_and_hypothesised_variance_follow_the_closed_form():
    c = paper()["components_implied_by_the_four_coefficients"]
    m, mw, mi, res = c["s2_m"], c["s2_mw"], c["s2_mi"], c["s2_res"]
    d = design_numbers(paper_study(), object_variance=30.0)

    # at one item sample the ceiling is 1/(1 + σ²mi) < 0.8: never, with that asymptote
    at_one = d["wrappers_needed"]["wrapper"]["at_one_item_sample"]
    assert at_one["n"] is None and at_one["asymptote"] == pytest.approx(m / (m + mi))
    # at the 4 observed item samples: Eρ²(k) = m / (m + (mw + res/4)/k + mi/4) ≥ 0.8
    allowed = m * 0.25 - mi / 4
    assert d["wrappers_needed"]["wrapper"]["at_observed_items"]["n"] == math.ceil((mw + res / 4) / allowed)
    assert d["ratio_model_wrapper_to_model_item"] == pytest.approx(mw / mi)
    # under σ²m = 30: Eρ²(k, 1) = 30 / (30 + (mw + res)/k + mi)
    h = d["hypothetical"]
    assert h["single_wrapper"]["g_coefficient"] == pytest.approx(30 / (30 + mw + mi + res))
    k = math.ceil((mw + res) / (30 * 0.25 - mi))
    assert h["wrappers_needed"]["wrapper"]["at_one_item_sample"]["n"] == k == 9   # the paper's k ≈ 9
    shares = {x["effect"]: x["share"] for x in d["components"]}
    total = m + mw + mi + res + c["absolute_only_error_at_k1_n1"]
    assert shares["model"] == pytest.approx(m / total) and shares["model:wrapper"] == pytest.approx(mw / total)


def test_crossed_arms_report_the_framings_of_each_arm_needed():
    # model × evaluation × deployment × item_sample; σ²(model × arm) at 1, the rest small
    names = ["model", "evaluation", "deployment", "item_sample", "model:evaluation", "model:deployment",
             "model:item_sample", "evaluation:deployment", "evaluation:item_sample", "deployment:item_sample",
             "model:evaluation:deployment", "model:evaluation:item_sample", "model:deployment:item_sample",
             "evaluation:deployment:item_sample", RESIDUAL]
    values = dict.fromkeys(names, 0.0)
    values.update({"model": 1.0, "model:evaluation": 2.0, "model:deployment": 0.5, "model:item_sample": 0.1,
                   "model:evaluation:deployment": 0.4, RESIDUAL: 0.2})
    d = design_numbers(study(values, {"model": 3, "evaluation": 6, "deployment": 6, "item_sample": 4}))

    assert d["single_wrapper"]["g_coefficient"] == pytest.approx(1 / (1 + 2 + 0.5 + 0.1 + 0.4 + 0.2))
    # evaluation framings grown, one deployment framing, one item sample:
    # 1 / (1 + (2 + 0.4 + 0.2)/k + 0.5 + 0.1) ≥ 0.8  →  k ≥ 2.6 / (0.25 − 0.6) : never (0.25 < 0.6)
    assert d["wrappers_needed"]["evaluation"]["at_one_item_sample"]["n"] is None
    assert d["wrappers_needed"]["evaluation"]["at_one_item_sample"]["asymptote"] == pytest.approx(1 / 1.6)
    assert d["ratio_model_wrapper_to_model_item"] == pytest.approx((2 + 0.5 + 0.4) / 0.1)
    text = "\n".join(design_lines("base", {"design_numbers": d}, "x"))
    assert "evaluation framings needed for Eρ² 0.80: at 1 item sample: never (asymptote 0.625)" in text


def test_the_published_spread_is_the_sample_variance():
    scores = [0.61, 0.70, 0.66, 0.58]
    mean = sum(scores) / 4
    assert published_object_variance(scores) == pytest.approx(sum((s - mean) ** 2 for s in scores) / 3)
    assert published_object_variance([0.6]) is None


def test_a_negative_estimate_has_no_share_and_the_shares_sum_to_one():
    """Shares are of the total with negative estimates counted as zero (computed here by hand): they sum to 1,
    the negative component's is 0, and the table says it was counted as 0."""
    values = {"model": 2.0, "wrapper": 1.0, "item_sample": 0.5, "model:wrapper": 3.0, "model:item_sample": -0.4,
              "wrapper:item_sample": 0.5, RESIDUAL: 3.0}
    d = design_numbers(study(values, {"model": 3, "wrapper": 4, "item_sample": 2}))
    shares = {c["effect"]: c["share"] for c in d["components"]}
    total = 2.0 + 1.0 + 0.5 + 3.0 + 0.5 + 3.0
    assert shares["model:item_sample"] == 0 and shares["model:wrapper"] == pytest.approx(3.0 / total)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert d["single_wrapper"]["g_coefficient"] == pytest.approx(2.0 / (2.0 + 3.0 + 0.0 + 3.0))
    text = "\n".join(design_lines("base", {"design_numbers": d}, "x"))
    assert "(negative estimate, counted as 0)" in text
