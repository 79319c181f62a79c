"""G-study and D-study against Brennan (2001) Synthetic Data Sets 1–4 (../shared/reference-data).

Exact values in expected.json to 1e-6; the published (book/fixture) values within one unit of their last
printed digit. Reference: brennan2001_synthetic/expected.json and the four CSVs.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest
from analysis_refdata import last_digit_unit, load_columns, load_json, within

from mirrorscan.analysis.design import pivot_long
from mirrorscan.analysis.dstudy import d_study
from mirrorscan.analysis.gtheory import g_study, mixed_model_components
from mirrorscan.analysis.gtheory_report import gtheory_report

EXACT_TOL = Decimal("1e-6")
EXPECTED = load_json("brennan2001_synthetic", "expected.json", exact=True)

# data set → (csv, object, facets, nested, {expected-json effect key: our component name})
DESIGNS = {
    "synthetic1_p_x_i": ("synthetic1_p_x_i.csv", "p", ["i"], None,
                         {"p": "p", "i": "i", "pi": "residual"}),
    "synthetic2_i_in_p": ("synthetic2_i_in_p.csv", "p", ["i"], {"i": "p"},
                          {"p": "p", "i:p": "residual"}),
    "synthetic3_p_x_i_x_o": ("synthetic3_p_x_i_x_o.csv", "p", ["i", "o"], None,
                             {"p": "p", "i": "i", "o": "o", "pi": "p:i", "po": "p:o", "io": "i:o",
                              "pio": "residual"}),
    "synthetic4_p_x_r_in_t": ("synthetic4_p_x_r_in_t.csv", "p", ["t", "r"], {"r": "t"},
                              {"p": "p", "t": "t", "rt": "r:t", "pt": "p:t", "prt": "residual"}),
}
# published keys that differ from the exact-value keys (Brennan's notation)
PUBLISHED_KEYS = {"synthetic4_p_x_r_in_t": {"r:t": "r:t", "pt": "p:t", "pr:t": "residual"}}


def _study(name: str, fixed=()):
    csv_name, obj, facets, nested, _ = DESIGNS[name]
    cols = load_columns("brennan2001_synthetic", csv_name)
    cols["score"] = [float(v) for v in cols["score"]]
    return g_study(pivot_long(cols, "score", obj, facets, nested), fixed=fixed)


def _sizes(key: str) -> dict[str, int]:
    """'n_i=4,n_o=2' → {'i': 4, 'o': 2}."""
    return {part.split("=")[0][2:]: int(part.split("=")[1]) for part in key.split(",")}


@pytest.mark.parametrize("name", list(DESIGNS))
def test_anova_table_and_components_match_exact_values(name):
    g = _study(name)
    exp = EXPECTED[name]
    keys = DESIGNS[name][4]
    assert set(keys) == set(exp["variance_components"])
    assert len(g.components) == len(keys)
    for key, ours in keys.items():
        c = g.component(ours)
        assert c.df == int(exp["df"][key]), key
        assert within(c.sum_of_squares, exp["SS"][key], EXACT_TOL), (key, c.sum_of_squares)
        assert within(c.mean_square, exp["MS"][key], EXACT_TOL), (key, c.mean_square)
        assert within(c.estimate, exp["variance_components"][key], EXACT_TOL), (key, c.estimate)
    assert g.negative_components == ()


@pytest.mark.parametrize("name", list(DESIGNS))
def test_components_within_one_unit_of_published(name):
    g = _study(name)
    keys = {**DESIGNS[name][4], **PUBLISHED_KEYS.get(name, {})}
    published = EXPECTED[name]["published"]["variance_components"]
    for key, printed in published.items():
        ours = g.component(keys[key]).estimate
        assert within(ours, printed, last_digit_unit(printed)), (key, ours, printed)


@pytest.mark.parametrize("name", list(DESIGNS))
def test_d_study_grid_matches_exact_values(name):
    g = _study(name)
    grid = EXPECTED[name]["d_study"]
    assert grid
    for key, exp in grid.items():
        d = d_study(g, _sizes(key))
        assert within(d.g_coefficient, exp["Erho2"], EXACT_TOL), (key, d.g_coefficient)
        assert within(d.phi, exp["Phi"], EXACT_TOL), (key, d.phi)
        if "rel_error_var" in exp:
            assert within(d.relative_error_variance, exp["rel_error_var"], EXACT_TOL), key
            assert within(d.absolute_error_variance, exp["abs_error_var"], EXACT_TOL), key
        assert d.phi <= d.g_coefficient + 1e-15
        assert not d.hypothetical


def test_d_study_sizes_are_named_behind_every_coefficient():
    g = _study("synthetic3_p_x_i_x_o")
    d = d_study(g, {"i": 12, "o": 3})
    assert d.to_json()["sizes"] == {"i": 12, "o": 3}
    assert d_study(g).to_json()["sizes"] == {"i": 4, "o": 2}      # observed by default


def test_published_coefficients_data_set_1():
    g = _study("synthetic1_p_x_i")
    pub = EXPECTED["synthetic1_p_x_i"]["published"]
    d12 = d_study(g, {"i": 12})
    assert within(d12.g_coefficient, pub["Erho2_n12"], last_digit_unit(pub["Erho2_n12"]))
    assert within(d12.phi, pub["Phi_n12"], last_digit_unit(pub["Phi_n12"]))
    for key, (erho2, phi) in pub["d_study"].items():
        d = d_study(g, _sizes(key))
        assert within(d.g_coefficient, erho2, last_digit_unit(erho2)), (key, d.g_coefficient, erho2)
        assert within(d.phi, phi, last_digit_unit(phi)), (key, d.phi, phi)


def test_erho2_of_observed_p_x_i_equals_cronbach_alpha():
    # Brennan's note: with n'_i = n_i, Eρ² of p × i is KR-20 / Cronbach's α; computed here independently.
    cols = load_columns("brennan2001_synthetic", "synthetic1_p_x_i.csv")
    x = np.zeros((10, 12))
    for p, i, s in zip(cols["p"], cols["i"], cols["score"]):
        x[int(p) - 1, int(i) - 1] = float(s)
    k = x.shape[1]
    alpha = k / (k - 1) * (1 - x.var(axis=0, ddof=1).sum() / x.sum(axis=1).var(ddof=1))
    assert d_study(_study("synthetic1_p_x_i")).g_coefficient == pytest.approx(alpha, abs=1e-12)


@pytest.mark.parametrize("name,erho2_key,phi_key", [
    ("synthetic3_p_x_i_x_o", "Erho2_ni4_no2", "Phi_ni4_no2"),
    ("synthetic4_p_x_r_in_t", "Erho2", "Phi"),
    ("synthetic2_i_in_p", "Erho2", "Phi"),
])
def test_published_coefficients_of_observed_designs(name, erho2_key, phi_key):
    d = d_study(_study(name))
    pub = EXPECTED[name]["published"]
    assert within(d.g_coefficient, pub[erho2_key], last_digit_unit(pub[erho2_key]))
    assert within(d.phi, pub[phi_key], last_digit_unit(pub[phi_key]))


def test_i_within_p_relative_and_absolute_error_coincide():
    d = d_study(_study("synthetic2_i_in_p"))
    assert d.relative_error_variance == d.absolute_error_variance
    assert d.g_coefficient == d.phi


def test_fixed_items_data_set_3_exact_and_published():
    g = _study("synthetic3_p_x_i_x_o", fixed=["i"])
    d = d_study(g)
    exact = EXPECTED["synthetic3_p_x_i_x_o"]["i_fixed_ni4_no2"]
    pub = EXPECTED["synthetic3_p_x_i_x_o"]["published"]
    assert within(d.g_coefficient, exact["Erho2"], EXACT_TOL), d.g_coefficient
    assert within(d.phi, exact["Phi"], EXACT_TOL), d.phi
    assert within(d.g_coefficient, pub["I_fixed_Erho2"], last_digit_unit(pub["I_fixed_Erho2"]))
    assert within(d.phi, pub["I_fixed_Phi"], last_digit_unit(pub["I_fixed_Phi"]))
    # Brennan's approach: σ²(τ) = σ²(p) + σ²(pi)/n_i — the fixed facet's interaction joins the universe score
    random = _study("synthetic3_p_x_i_x_o")
    assert d.universe_score_variance == pytest.approx(
        random.component("p").estimate + random.component("p:i").estimate / 4, abs=1e-12)
    # the components themselves are the random-model estimates either way
    assert [c.estimate for c in g.components] == [c.estimate for c in random.components]
    # fixing a facet makes the coefficient higher than generalising over it
    assert d.g_coefficient > d_study(random).g_coefficient
    with pytest.raises(ValueError, match="fixed"):
        d_study(g, {"i": 8})


def test_mixed_model_components_with_items_fixed():
    # σ²(p|M) = σ²(p) + σ²(pi)/n_i is the universe-score variance; σ²(po|M)/n_o is the relative error
    g = _study("synthetic3_p_x_i_x_o", fixed=["i"])
    mixed = mixed_model_components(g)
    assert set(mixed) == {"p", "o", "p:o"}
    d = d_study(g)
    assert mixed["p"] == pytest.approx(d.universe_score_variance, abs=1e-12)
    assert mixed["p:o"] / 2 == pytest.approx(d.relative_error_variance, abs=1e-12)
    assert mixed["p"] / (mixed["p"] + mixed["p:o"] / 2) == pytest.approx(d.g_coefficient, abs=1e-12)
    rep = gtheory_report(g).to_json()
    assert rep["design"]["facets"]["i"]["role"] == "fixed" and "i" not in rep["needed"]
    assert rep["mixed_model_components"] == pytest.approx(mixed)
