"""Kendall's W against the irr `anxiety` data (../shared/reference-data/kendall_w) and worked cases.

expected.json exact values to 1e-6; irr's printed output within one unit of its last digit; scipy's
Friedman test as an independent cross-check of W_t and its χ².
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from analysis_refdata import last_digit_unit, load_columns, load_json, within
from scipy.stats import friedmanchisquare

from mirrorscan.analysis.concordance import (concordance_data, kendall_w, kendall_w_permutation_shard,
                                  kendall_w_permutation_test, simulate_w_reference)
from mirrorscan.analysis.resampling import plan_shards, reduce_in_order, run_local

EXACT_TOL = Decimal("1e-6")
EXPECTED = load_json("kendall_w", "expected.json", exact=True)


def _anxiety() -> np.ndarray:
    cols = load_columns("kendall_w", "anxiety_irr.csv")
    return np.array([[float(v) for v in cols[r]] for r in ("rater1", "rater2", "rater3")]).T   # 20 × 3


def test_tie_corrected_w_chi2_p_match_expected_exact_values():
    k = kendall_w(_anxiety())
    exp = EXPECTED["tie_corrected"]
    assert (k.n_objects, k.n_raters, k.df) == (20, 3, int(exp["df"]))
    assert within(k.w_tie_corrected, exp["Wt"], EXACT_TOL), k.w_tie_corrected
    assert within(k.chi2_tie_corrected, exp["chisq"], EXACT_TOL), k.chi2_tie_corrected
    assert within(k.p_value_tie_corrected, exp["p_value"], EXACT_TOL), k.p_value_tie_corrected


def test_uncorrected_chi2_matches_expected_and_w_equals_exact_rational():
    k = kendall_w(_anxiety())
    assert within(k.chi2, EXPECTED["uncorrected"]["chisq"], EXACT_TOL), k.chi2
    # hand route: S = Σ (R_i − mean R)² = 3004 for these ranks, W = 12 S / (m² (n³ − n))
    assert k.w == float(Fraction(12 * 3004, 9 * (20 ** 3 - 20)))
    assert k.chi2 == pytest.approx(3 * 19 * k.w, abs=1e-12)


def test_uncorrected_w_and_p_match_expected_exact_values():
    k = kendall_w(_anxiety())
    exp = EXPECTED["uncorrected"]
    assert within(k.w, exp["W"], EXACT_TOL) and within(k.p_value, exp["p_value"], EXACT_TOL)


def test_within_one_unit_of_irr_published_output():
    # irr: "W = 0.502, Chisq(19) = 28.6, p = 0.0724" and "Wt = 0.539, Chisq(19) = 30.8, p-value = 0.0429"
    k = kendall_w(_anxiety())
    for value, printed in [(k.w, "0.502"), (k.chi2, "28.6"), (k.p_value, "0.0724"),
                           (k.w_tie_corrected, "0.539"), (k.chi2_tie_corrected, "30.8"),
                           (k.p_value_tie_corrected, "0.0429")]:
        assert within(value, Decimal(printed), last_digit_unit(Decimal(printed))), (value, printed)
    assert "0.502" in EXPECTED["uncorrected"]["published_irr"] and "0.539" in EXPECTED["tie_corrected"]["published_irr"]


def test_tie_corrected_chi2_is_friedmans():
    x = _anxiety()
    k = kendall_w(x)
    fr = friedmanchisquare(*x)              # subjects as treatments, raters as blocks (expected.json's check)
    assert k.chi2_tie_corrected == pytest.approx(fr.statistic, rel=1e-12)
    assert k.p_value_tie_corrected == pytest.approx(fr.pvalue, rel=1e-9)


def test_identical_rankings_give_w_one_and_smallest_p():
    x = np.tile(np.arange(8.0)[:, None], (1, 5)) * [1, 2, 3, 10, 0.5]      # same order, different scales
    k = kendall_w(x)
    assert k.w == 1.0 and k.w_tie_corrected == 1.0
    res = kendall_w_permutation_test(x, n_permutations=999, seed=4)
    assert res.observed == 1.0 and res.p_value == 1 / 1000


def test_reversed_pair_of_raters_gives_w_zero():
    x = np.stack([np.arange(6.0), -np.arange(6.0)], axis=1)
    assert kendall_w(x).w == pytest.approx(0.0, abs=1e-15)


def test_permutation_null_of_w_has_the_exact_moments_and_shard_order_is_irrelevant():
    x = _anxiety()
    res = kendall_w_permutation_test(x, n_permutations=2000, seed=123, shard_size=500)
    m, n = 3, 20
    # under no agreement E[W] = 1/m and Var[W] = 2(m − 1)/(m³ (n − 1)) (no ties; ties shrink it slightly)
    assert res.null_mean == pytest.approx(1 / m, abs=0.006)
    assert res.null_sd ** 2 == pytest.approx(2 * (m - 1) / (m ** 3 * (n - 1)), rel=0.15)
    # with only 3 raters the null is narrower than χ²(19): the permutation p (≈ 0.012) is below χ²'s 0.043
    assert 0.005 < res.p_value < 0.025
    # a driver that runs the same shards in any order and reduces by index gets identical bytes
    data = concordance_data(x)
    shards = plan_shards(2000, 123, 500)
    done = {s.index: kendall_w_permutation_shard(data, s.seed, s.n_draws) for s in reversed(shards)}
    assert np.array_equal(reduce_in_order([done[k] for k in range(len(shards))]), res.null)
    assert np.array_equal(run_local(kendall_w_permutation_shard, data, 2000, 123, 500), res.null)


def test_w_reference_without_and_with_an_object_effect():
    none = simulate_w_reference(10, 6, object_sd=0.0, n_sims=2000, seed=1)
    assert none.w.mean() == pytest.approx(1 / 6, abs=0.01)                   # E[W] = 1/m
    strong = simulate_w_reference(10, 6, object_sd=3.0, n_sims=500, seed=1)
    assert strong.median > 0.85 and strong.fraction_at_or_below(none.median) < 0.01
    mid = simulate_w_reference(10, 6, object_sd=0.5, n_sims=500, seed=1)
    assert none.median < mid.median < strong.median
    assert mid.to_json()["n_sims"] == 500 and set(mid.quantiles()) == {"p05", "p25", "p50", "p75", "p95"}


def test_missing_rating_is_refused():
    x = _anxiety()
    x[3, 1] = np.nan
    with pytest.raises(ValueError, match="missing cell.*objects × raters"):
        kendall_w(x)
