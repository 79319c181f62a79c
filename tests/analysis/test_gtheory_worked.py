"""G-theory worked examples: a hand-computed p × i, negative components, D-study algebra, refusals.

References: hand calculation (values in comments), Brennan (2001) ch. 3–4 formulas re-derived here
independently (uncorrected sums of squares and an explicit EMS linear system), and the ANOVA
identities that link nested and crossed analyses of the same array.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pyarrow as pa
import pytest

from mirrorscan.analysis.design import design_from_array, pivot_long
from mirrorscan.analysis.dstudy import (asymptote, d_study, dependability_coefficient, generalizability_coefficient,
                             smallest_n)
from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.gtheory import g_study, variance_components
from mirrorscan.analysis.gtheory_report import gtheory_report, parse_sizes
from mirrorscan.grid.errors import ConfigError

# 3 persons × 2 items. Grand mean 5; person means 3, 4, 8; item means 4, 6.
# SS_p = 2·(4+1+9) = 28, SS_i = 3·(1+1) = 6, SS_total = 38, SS_pi = 4.
# MS: p 14 (df 2), i 6 (df 1), pi 2 (df 2). σ²(pi) = 2, σ²(p) = (14−2)/2 = 6, σ²(i) = (6−2)/3 = 4/3.
HAND = np.array([[2.0, 4.0], [4.0, 4.0], [6.0, 10.0]])


def _hand():
    return g_study(HAND, ["p", "i"])


def test_hand_computed_p_x_i_table():
    g = _hand()
    got = {c.name: (c.sum_of_squares, c.df, c.mean_square, c.estimate) for c in g.components}
    assert got["p"] == pytest.approx((28, 2, 14, 6))
    assert got["i"] == pytest.approx((6, 1, 6, 4 / 3))
    assert got["residual"] == pytest.approx((4, 2, 2, 2))
    assert g.component("residual").label == "p:i"
    assert g.share("p") == pytest.approx(6 / (6 + 4 / 3 + 2))
    assert g.grand_mean == 5 and g.n_observations == 6


def test_hand_computed_coefficients_asymptote_and_sizes_needed():
    g = _hand()
    assert generalizability_coefficient(g) == pytest.approx(6 / 7)           # 6 / (6 + 2/2)
    assert dependability_coefficient(g) == pytest.approx(18 / 23)            # 6 / (6 + (4/3 + 2)/2)
    lim = asymptote(g, "i")
    assert lim.g_coefficient == 1.0 and lim.phi == 1.0 and lim.sizes["i"] == math.inf
    # Eρ² ≥ .8 ⇔ 2/n ≤ 1.5 ⇔ n ≥ 4/3 → 2;  Φ ≥ .8 ⇔ (10/3)/n ≤ 1.5 ⇔ n ≥ 20/9 → 3
    assert smallest_n(g, "i", 0.8, "g_coefficient").n == 2
    need = smallest_n(g, "i", 0.8, "phi")
    assert need.n == 3 and need.reachable
    assert d_study(g, {"i": 3}).phi == pytest.approx(54 / 64)


def test_negative_estimate_reported_raw_and_zeroed_for_coefficients():
    # item means equal → SS_i = 0, σ²(i) = (0 − MS_pi)/n_p = −0.5/3 < 0
    g = g_study(np.array([[1.0, 2.0], [2.0, 1.0], [3.0, 3.0]]), ["p", "i"])
    c = g.component("i")
    assert c.estimate == pytest.approx(-1 / 6) and c.negative and c.estimate_used == 0.0
    assert g.negative_components == ("i",)
    assert g.share("i") == 0.0
    d = d_study(g)
    assert d.absolute_error_variance == pytest.approx(0.5 / 2)               # σ²(i) counted as 0
    assert d.phi == pytest.approx(d.g_coefficient) == pytest.approx(2 / 3)
    report = gtheory_report(g).to_json()
    assert report["components"]["i"]["estimate"] == pytest.approx(-1 / 6)
    assert report["components"]["i"]["negative"] is True
    assert report["negative_components"] == ["i"]


def _uncorrected_ss(y, facets):
    """Independent route: T(B) = Σ_cells(B) (sum over the rest)² / (N / cells), crossed designs only."""
    N = y.size
    T = {}
    for k in range(len(facets) + 1):
        for sub in itertools.combinations(range(len(facets)), k):
            drop = tuple(a for a in range(len(facets)) if a not in sub)
            sums = y.sum(axis=drop) if drop else y
            cells = np.size(sums)
            T[sub] = float(np.sum(np.asarray(sums) ** 2)) / (N / cells)
    ss = {}
    for sub in T:
        if sub:
            ss[sub] = sum((-1) ** (len(sub) - len(b)) * T[b] for k in range(len(sub) + 1)
                          for b in itertools.combinations(sub, k))
    return ss


def test_four_facet_crossed_design_against_independent_ems_solution():
    rng = np.random.default_rng(7)
    facets = ["m", "w", "i", "l"]
    shape = (4, 3, 5, 2)
    y = rng.normal(size=shape) + rng.normal(size=(4, 1, 1, 1)) * 2 + rng.normal(size=(1, 3, 5, 1))
    comps = variance_components(y, facets)
    ss = _uncorrected_ss(y, facets)
    subsets = sorted(ss, key=lambda s: (len(s), s))
    ms = {}
    for c in comps:
        sub = tuple(sorted(facets.index(f) for f in c.facets))
        assert c.sum_of_squares == pytest.approx(ss[sub], rel=1e-10, abs=1e-9)
        assert c.df == int(np.prod([shape[a] - 1 for a in sub]))
        ms[sub] = c.mean_square
    # EMS as an explicit linear system: E[MS(α)] = Σ_{β ⊇ α} Π_{f ∉ β} n_f σ²(β)
    A = np.array([[np.prod([shape[a] for a in range(4) if a not in b]) if set(a_) <= set(b) else 0
                   for b in subsets] for a_ in subsets], dtype=float)
    sigma = np.linalg.solve(A, np.array([ms[s] for s in subsets]))
    est = {tuple(sorted(facets.index(f) for f in c.facets)): c.estimate for c in comps}
    assert [est[s] for s in subsets] == pytest.approx(list(sigma), rel=1e-9, abs=1e-12)
    assert len(comps) == 2 ** 4 - 1 and comps[-1].name == "residual"


def test_nested_sums_of_squares_pool_the_crossed_ones():
    # Analysing a p × r × t array as p × (r:t) pools r with rt, and pr with prt (ANOVA identity).
    rng = np.random.default_rng(3)
    y = rng.normal(size=(4, 3, 5))                          # axes p, t, r
    crossed = {c.label: c for c in variance_components(y, ["p", "t", "r"])}
    nested = {c.label: c for c in variance_components(y, ["p", "t", "r"], {"r": "t"})}
    assert set(nested) == {"p", "t", "p:t", "r:t", "p:r:t"}
    for pooled, parts in {"r:t": ["r", "t:r"], "p:r:t": ["p:r", "p:t:r"]}.items():
        assert nested[pooled].sum_of_squares == pytest.approx(sum(crossed[k].sum_of_squares for k in parts))
        assert nested[pooled].df == sum(crossed[k].df for k in parts)
    # three levels: p × (i:r:t) pools i, it, ir, irt
    y4 = rng.normal(size=(3, 2, 3, 4))                     # p, t, r, i
    c4 = {c.label: c for c in variance_components(y4, ["p", "t", "r", "i"])}
    n4 = {c.label: c for c in variance_components(y4, ["p", "t", "r", "i"], {"i": "r", "r": "t"})}
    assert n4["i:t:r"].sum_of_squares == pytest.approx(sum(c4[k].sum_of_squares for k in ["i", "t:i", "r:i", "t:r:i"]))
    assert n4["i:t:r"].df == 2 * 3 * (4 - 1)


def test_nested_design_estimates_are_unbiased_in_simulation():
    # p × (r:t) with σ²: p 1.0, t 0.5, pt 0.3, r:t 0.8, pr:t 1.2 ; 400 replications, mean within 4 SE
    rng = np.random.default_rng(11)
    n_p, n_t, n_r, reps = 8, 3, 4, 400
    truth = {"p": 1.0, "t": 0.5, "p:t": 0.3, "r:t": 0.8, "residual": 1.2}
    draws = {k: [] for k in truth}
    for _ in range(reps):
        y = (rng.normal(0, 1.0, (n_p, 1, 1)) + rng.normal(0, 0.5 ** 0.5, (1, n_t, 1))
             + rng.normal(0, 0.3 ** 0.5, (n_p, n_t, 1)) + rng.normal(0, 0.8 ** 0.5, (1, n_t, n_r))
             + rng.normal(0, 1.2 ** 0.5, (n_p, n_t, n_r)))
        g = g_study(y, ["p", "t", "r"], {"r": "t"})
        for k in truth:
            draws[k].append(g.component(k).estimate)
    for k, v in truth.items():
        d = np.array(draws[k])
        assert abs(d.mean() - v) < 4 * d.std(ddof=1) / reps ** 0.5, (k, d.mean(), v)


def test_asymptotes_and_smallest_n_match_direct_evaluation():
    rng = np.random.default_rng(5)
    y = (rng.normal(0, 0.4, (6, 1, 1)) + rng.normal(0, 1.0, (6, 5, 1)) + rng.normal(0, 0.3, (1, 1, 8))
         + rng.normal(0, 1.0, (6, 5, 8)))
    g = g_study(y, ["model", "wrapper", "item"])
    for facet in ("wrapper", "item"):
        lim = asymptote(g, facet)
        for coef in ("g_coefficient", "phi"):
            big = getattr(d_study(g, {facet: 10 ** 9}), coef)
            assert getattr(lim, coef) == pytest.approx(big, abs=1e-6)
            for target in (0.3, 0.5, 0.7, 0.8, 0.9):
                need = smallest_n(g, facet, target, coef)
                at = lambda n: getattr(d_study(g, {facet: n}), coef)
                if getattr(lim, coef) <= target:
                    assert need.n is None and not need.reachable and need.to_json()["unreachable"]
                    assert at(10 ** 6) < target
                else:                       # the coefficient rises with n: n reaches it, n − 1 does not
                    assert at(need.n) >= target, (facet, coef, target)
                    assert need.n == 1 or at(need.n - 1) < target, (facet, coef, target)
                assert need.asymptote == pytest.approx(getattr(lim, coef))
    # items alone cannot reach .8 when the model × wrapper interaction dominates
    assert smallest_n(g, "item", 0.8).n is None


def test_hypothetical_object_variance_is_marked_and_used():
    g = _hand()
    d = d_study(g, {"i": 1}, object_variance=0.5)
    assert d.hypothetical and d.universe_score_variance == 0.5
    assert d.g_coefficient == pytest.approx(0.5 / (0.5 + 2.0))
    rep = gtheory_report(g, [{"i": 1}], object_variance=0.5).to_json()
    assert rep["hypothetical"]["object_variance"] == 0.5
    assert rep["hypothetical"]["observed"]["hypothetical"] is True
    assert rep["hypothetical"]["d_study"][0]["g_coefficient"] == pytest.approx(0.2)
    assert rep["observed"]["hypothetical"] is False and rep["g_coefficient"] == pytest.approx(6 / 7)


def test_report_json_shape():
    y = np.random.default_rng(1).normal(size=(4, 3, 6))
    rep = gtheory_report(g_study(y, ["model", "wrapper", "item"]), [parse_sizes("wrapper=1,item=400")])
    js = json.loads(json.dumps(rep.to_json()))                     # JSON-serialisable as is
    assert list(js["components"]) == ["model", "wrapper", "item", "model:wrapper", "model:item",
                                      "wrapper:item", "residual"]
    for c in js["components"].values():
        assert {"estimate", "df", "mean_square", "share"} <= set(c)
    assert sum(c["share"] for c in js["components"].values()) == pytest.approx(1.0)
    assert js["sizes"] == {"wrapper": 3, "item": 6}
    assert js["d_study"][0]["sizes"] == {"wrapper": 1, "item": 400}
    assert set(js["asymptotes"]) == {"wrapper", "item"} and set(js["needed"]) == {"wrapper", "item"}
    assert js["needed"]["item"]["phi"]["coefficient"] == "phi" and js["target"] == 0.8
    assert [p["n"] for p in js["curves"]["wrapper"]][:3] == [1, 2, 3]
    assert js["hypothetical"] is None


def _long(y, names):
    idx = np.indices(y.shape).reshape(y.ndim, -1)
    cols = {n: [f"{n}{k}" for k in idx[a]] for a, n in enumerate(names)}
    cols["score"] = y.ravel().tolist()
    return cols


def test_pivot_long_dict_and_pyarrow_agree_and_round_trip():
    y = np.random.default_rng(2).normal(size=(3, 2, 4))
    cols = _long(y, ["model", "wrapper", "item"])
    order = np.random.default_rng(0).permutation(y.size)           # row order must not matter
    shuffled = {k: [v[i] for i in order] for k, v in cols.items()}
    d1 = pivot_long(shuffled, "score", "model", ["wrapper", "item"])
    d2 = pivot_long(pa.table(shuffled), "score", "model", ["wrapper", "item"])
    assert np.array_equal(d1.scores, y) and np.array_equal(d2.scores, y)
    assert d1.facets == ("model", "wrapper", "item") and d1.object == "model"


@pytest.mark.parametrize("mutate,match", [
    (lambda c: {k: v[:-1] for k, v in c.items()}, r"1 of 24 cells missing \(model=model2, wrapper=wrapper1, item=item3\)"),
    (lambda c: {k: v + v[:1] for k, v in c.items()}, "observed more than once"),
    (lambda c: {**c, "score": ["x"] + c["score"][1:]}, "non-numeric score 'x'"),
    (lambda c: {**c, "score": [None] + c["score"][1:]}, "missing or non-finite"),
    (lambda c: {**c, "score": [float("nan")] + c["score"][1:]}, "missing or non-finite"),
])
def test_unbalanced_or_bad_input_is_refused_with_what_is_wrong(mutate, match):
    cols = _long(np.arange(24.0).reshape(3, 2, 4), ["model", "wrapper", "item"])
    with pytest.raises(AnalysisError, match=match) as err:
        pivot_long(mutate(cols), "score", "model", ["wrapper", "item"])
    assert isinstance(err.value, ConfigError) and isinstance(err.value, ValueError)


def test_unknown_column_and_nested_imbalance_are_refused():
    cols = _long(np.arange(24.0).reshape(3, 2, 4), ["model", "wrapper", "item"])
    with pytest.raises(AnalysisError, match="no such column"):
        pivot_long(cols, "score", "model", ["wrapper", "prompt"])
    # item nested in wrapper, but wrapper0 has 4 items and wrapper1 only 3
    keep = [k for k in range(24) if not (cols["wrapper"][k] == "wrapper1" and cols["item"][k] == "item3")]
    bad = {k: [v[i] for i in keep] for k, v in cols.items()}
    with pytest.raises(AnalysisError, match="has 4 levels at wrapper=wrapper0 and 3 at wrapper=wrapper1"):
        pivot_long(bad, "score", "model", ["wrapper", "item"], nested={"item": "wrapper"})
    with pytest.raises(AnalysisError, match="object of measurement is nested"):
        g_study(np.zeros((2, 3)) + np.arange(3), ["p", "c"], {"p": "c"})
    with pytest.raises(AnalysisError, match="at least 2"):
        design_from_array(np.zeros((3, 1)), ["p", "i"])


def test_nested_labels_are_read_within_the_parent():
    # i:p with the same item labels 1..3 reused in every person: 2 × 3 cells, not a crossed design
    cols = {"p": ["a"] * 3 + ["b"] * 3, "i": [1, 2, 3, 1, 2, 3], "score": [1.0, 2, 3, 2, 4, 9]}
    d = pivot_long(cols, "score", "p", ["i"], nested={"i": "p"})
    assert d.scores.shape == (2, 3) and d.nested == {"i": ("p",)}
    g = g_study(d)
    assert [c.name for c in g.components] == ["p", "residual"] and g.component("residual").label == "i:p"


def test_parse_sizes():
    assert parse_sizes("wrapper=1, item=400") == {"wrapper": 1, "item": 400}
    with pytest.raises(AnalysisError, match="FACET=N"):
        parse_sizes("wrapper=0")
