"""The carrier G-study of flinch on worked examples: p × (c:t) with the model as object, components solved
by hand from the EMS equations (Brennan 2001, ch. 3)."""

from __future__ import annotations

import numpy as np
import pytest

from mirrorscan.instruments.flinch.gstudy import carrier_gstudy

MODELS, TERMS = ["m0", "m1", "m2"], ["t0", "t1", "t2"]
A = [0.0, -2.0, -4.0]                            # model effects: sample variance 4
B = [-1.0, -3.0, -5.0]                           # term effects: sample variance 4
E = [(0.5, -0.5), (1.0, -1.0), (1.5, -1.5)]      # carrier effects, zero mean within each term: Σe² = 7


def lps(score) -> dict:
    return {(m, t): {c: score(i, j, c) for c in (0, 1)} for i, m in enumerate(MODELS) for j, t in enumerate(TERMS)}


def test_without_a_carrier_effect_the_carrier_share_is_zero_and_one_carrier_suffices():
    out = carrier_gstudy(MODELS, TERMS, lps(lambda i, j, c: A[i] + B[j]))
    assert out["carrier_share"] == pytest.approx(0.0, abs=1e-12)
    assert out["components"]["model"] == pytest.approx(4.0) and out["components"]["term"] == pytest.approx(4.0)
    assert out["g_coefficient"] == pytest.approx(1.0) and out["carriers_for_target"] == 1


def test_a_carrier_effect_shared_by_all_models_has_its_hand_solved_components():
    out = carrier_gstudy(MODELS, TERMS, lps(lambda i, j, c: A[i] + B[j] + E[j][c]))
    comp = out["components"]
    # σ²(c:t) = Σ(e − ē_t)² / (n_t (n_c − 1)) = 7/3; σ²(t) = var(b) − σ²(c:t)/n_c = 17/6; residual 0
    assert comp["carrier:term"] == pytest.approx(7 / 3) and comp["term"] == pytest.approx(17 / 6)
    assert comp["model"] == pytest.approx(4.0) and comp["residual"] == pytest.approx(0.0, abs=1e-12)
    assert out["carrier_share"] == pytest.approx((7 / 3) / (4 + 17 / 6 + 7 / 3))   # = 14/55
    assert out["g_coefficient"] == pytest.approx(1.0)   # the same for every model: ranks are untouched


def test_a_carrier_effect_that_differs_by_model_costs_reliability():
    z = [1.0, -1.0, 0.0]   # per model, summing to zero: no model or model:term effect
    out = carrier_gstudy(MODELS, TERMS, lps(lambda i, j, c: A[i] + B[j] + (1.5 * z[i] if c == 0 else -1.5 * z[i])))
    assert out["components"]["residual"] > 0 and out["g_coefficient"] < 1
    assert out["carriers_for_target"] >= 1 and out["n_carriers"] == 2 and out["target"] == 0.8


@pytest.mark.parametrize("models, data, says", [
    (["m0"], {("m0", "t0"): {0: -1.0, 1: -2.0}, ("m0", "t1"): {0: -1.0, 1: -2.0}}, "at least 2 models"),
    (["m0", "m1"], {("m0", "t0"): {0: -1.0}, ("m0", "t1"): {0: -1.0},
                    ("m1", "t0"): {0: -1.0}, ("m1", "t1"): {0: -1.0}}, "at least 2 carriers"),
])
def test_what_is_missing_is_said(models, data, says):
    assert says in carrier_gstudy(models, ["t0", "t1"], data)["missing"]


def test_failed_carriers_are_missing_cells_estimated_by_reml():
    """Two (model, term, carrier) cells failed: the G-study still runs, by REML, and says how many are missing;
    with every cell there it is the ANOVA one."""
    rng = np.random.default_rng(3)
    models, terms = ["m0", "m1", "m2"], ["t0", "t1", "t2", "t3"]
    a, b = rng.normal(0, 1, 3), rng.normal(0, 1, 4)
    data = {(m, t): {c: a[i] + b[j] + rng.normal(0, 0.5) for c in range(3)}
            for i, m in enumerate(models) for j, t in enumerate(terms)}
    whole = carrier_gstudy(models, terms, data)
    assert whole["estimation"] == "anova" and whole["missing_cells"] == 0 and whole["n_carriers"] == 3
    del data[("m1", "t2")][1], data[("m2", "t0")][0]
    out = carrier_gstudy(models, terms, data)
    assert out["estimation"] == "reml" and out["missing_cells"] == 2
    assert all(v >= 0 for v in out["components"].values()) and 0 <= out["g_coefficient"] <= 1
    assert out["carriers_for_target"] is not None and out["n_carriers"] == 3
    assert out["components"]["model"] == pytest.approx(whole["components"]["model"], rel=0.5)
