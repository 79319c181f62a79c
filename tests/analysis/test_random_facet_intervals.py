"""Intervals over random facets against closed forms written out here from mean squares, and their behaviour.

The balanced m × w × i design's mean squares are computed in this file with numpy (not by analysis.gtheory);
the G-study interval of a paired difference is then (MS_w + MS_i − MS_wi)/(n_w n_i) of the two models' difference
table (Cronbach–Gleser's variance of a crossed table's mean), with Satterthwaite's df on the three mean squares.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import t as student

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.intervals import gstudy_intervals, holm
from mirrorscan.analysis.long_design import long_design
from mirrorscan.analysis.pigeonhole import pigeonhole_intervals


def _table(y: np.ndarray, keep: np.ndarray | None = None) -> dict:
    m, w, i = (a.ravel() for a in np.meshgrid(*[range(n) for n in y.shape], indexing="ij"))
    keep = np.ones(y.size, bool) if keep is None else keep
    return {"y": y.ravel()[keep], "model": m[keep], "wrapper": w[keep], "item": i[keep]}


def _simulate(shape, sds, seed):
    rng = np.random.default_rng(seed)
    nm, nw, ni = shape
    return (rng.normal(0, sds[0], (nm, 1, 1)) + rng.normal(0, sds[1], (1, nw, 1)) + rng.normal(0, sds[2], (1, 1, ni))
            + rng.normal(0, sds[3], (nm, nw, 1)) + rng.normal(0, sds[4], (nm, 1, ni))
            + rng.normal(0, sds[5], (1, nw, ni)) + rng.normal(0, sds[6], (nm, nw, ni)))


def _two_way_ms(d: np.ndarray):
    """Mean squares of a complete rows × columns table (one observation per cell)."""
    r, c = d.shape
    g = d.mean()
    ms_r = c * np.sum((d.mean(1) - g) ** 2) / (r - 1)
    ms_c = r * np.sum((d.mean(0) - g) ** 2) / (c - 1)
    res = d - d.mean(1, keepdims=True) - d.mean(0, keepdims=True) + g
    ms_rc = np.sum(res ** 2) / ((r - 1) * (c - 1))
    return (ms_r, r - 1), (ms_c, c - 1), (ms_rc, (r - 1) * (c - 1))


def test_paired_difference_of_two_models_matches_the_closed_form():
    y = _simulate((2, 7, 15), (1, 0.6, 0.8, 0.5, 0.6, 0.4, 0.5), seed=11)
    rep = gstudy_intervals(long_design(_table(y), "y", "model", ["wrapper", "item"]))
    (diff,) = rep.differences
    d = y[0] - y[1]
    (ms_w, df_w), (ms_i, df_i), (ms_wi, df_wi) = _two_way_ms(d)
    var = (ms_w + ms_i - ms_wi) / d.size
    df = (ms_w + ms_i - ms_wi) ** 2 / (ms_w ** 2 / df_w + ms_i ** 2 / df_i + ms_wi ** 2 / df_wi)
    half = student.ppf(0.975, df) * math.sqrt(var)
    assert diff.estimate == pytest.approx(d.mean(), rel=1e-12)
    assert diff.df == pytest.approx(df, rel=1e-9)
    assert diff.interval == pytest.approx((d.mean() - half, d.mean() + half), rel=1e-9)
    assert diff.p_value == pytest.approx(2 * student.sf(abs(d.mean()) / math.sqrt(var), df), rel=1e-9)
    assert diff.p_holm == diff.p_value                                  # one pair: nothing to adjust


def test_object_interval_matches_the_mean_square_formula():
    """σ²(Δ) of one model's mean in m × w × i, from the EMS solution written out by hand."""
    y = _simulate((3, 6, 9), (1, 0.7, 0.8, 0.5, 0.6, 0.4, 0.5), seed=2)
    nm, nw, ni = y.shape
    g = y.mean()
    mean = lambda axes: y.mean(axis=axes, keepdims=True)                                   # noqa: E731
    m, w, i = mean((1, 2)), mean((0, 2)), mean((0, 1))
    mw, mi, wi = mean(2), mean(1), mean(0)
    ms = {"w": nm * ni * np.sum((w - g) ** 2) / (nw - 1), "i": nm * nw * np.sum((i - g) ** 2) / (ni - 1),
          "mw": ni * np.sum((mw - m - w + g) ** 2) / ((nm - 1) * (nw - 1)),
          "mi": nw * np.sum((mi - m - i + g) ** 2) / ((nm - 1) * (ni - 1)),
          "wi": nm * np.sum((wi - w - i + g) ** 2) / ((nw - 1) * (ni - 1)),
          "e": np.sum((y - mw - mi - wi + m + w + i - g) ** 2) / ((nm - 1) * (nw - 1) * (ni - 1))}
    s = {"e": ms["e"], "wi": (ms["wi"] - ms["e"]) / nm, "mi": (ms["mi"] - ms["e"]) / nw,
         "mw": (ms["mw"] - ms["e"]) / ni}
    s["w"] = (ms["w"] - ms["mw"] - ms["wi"] + ms["e"]) / (nm * ni)
    s["i"] = (ms["i"] - ms["mi"] - ms["wi"] + ms["e"]) / (nm * nw)
    assert min(s.values()) > 0                                               # no zeroing in this case
    var = (s["w"] + s["mw"]) / nw + (s["i"] + s["mi"]) / ni + (s["wi"] + s["e"]) / (nw * ni)
    rep = gstudy_intervals(long_design(_table(y), "y", "model", ["wrapper", "item"]))
    o = rep.objects[1]
    half = (o.interval[1] - o.interval[0]) / 2
    assert o.estimate == pytest.approx(y[1].mean(), rel=1e-12)
    assert half == pytest.approx(student.ppf(0.975, o.df) * math.sqrt(var), rel=1e-9)
    assert rep.components_method == "anova" and rep.missing_cells == 0


def test_naive_interval_is_far_too_narrow_where_the_prompt_matters():
    """Big envelope and model × envelope effects, many items: cells are far from independent. Over repeated
    designs the naive 95 % interval misses the model's universe score most of the time, the G-study one seldom."""
    naive_hits = g_hits = 0
    ratios = []
    for seed in range(60):
        rng = np.random.default_rng(seed)
        nm, nw, ni = 3, 8, 60
        um = rng.normal(0, 1, nm)
        y = (um[:, None, None] + rng.normal(0, 1.0, (1, nw, 1)) + rng.normal(0, 0.8, (nm, nw, 1))
             + rng.normal(0, 0.3, (1, 1, ni)) + rng.normal(0, 0.5, (nm, nw, ni)))
        rep = gstudy_intervals(long_design(_table(y), "y", "model", ["wrapper", "item"]))
        o = rep.objects[0]
        ratios.append(o.width_ratio)
        naive_hits += o.naive_interval[0] <= um[0] <= o.naive_interval[1]
        g_hits += o.interval[0] <= um[0] <= o.interval[1]
    assert np.median(ratios) > 3
    assert naive_hits / 60 < 0.5 and g_hits / 60 > 0.85


def test_shared_facets_cancel_in_differences():
    """A huge envelope main effect widens each model's own interval but not the paired difference."""
    base = _simulate((3, 8, 20), (1, 0.0, 0.3, 0.2, 0.3, 0.0, 0.4), seed=5)
    shift = np.random.default_rng(6).normal(0, 5.0, (1, 8, 1))
    quiet = gstudy_intervals(long_design(_table(base), "y", "model", ["wrapper", "item"]))
    loud = gstudy_intervals(long_design(_table(base + shift), "y", "model", ["wrapper", "item"]))
    width = lambda iv: iv[1] - iv[0]                                                       # noqa: E731
    assert width(loud.objects[0].interval) > 5 * width(quiet.objects[0].interval)
    for a, b in zip(quiet.differences, loud.differences):
        assert width(b.interval) == pytest.approx(width(a.interval), rel=1e-9)
        assert b.estimate == pytest.approx(a.estimate, abs=1e-12)


def test_fixed_facet_is_part_of_the_score_not_the_error():
    y = _simulate((3, 2, 30), (1, 0.3, 0.8, 1.5, 0.6, 0.3, 0.5), seed=8)      # wrapper has 2 levels, fixed
    design = long_design(_table(y), "y", "model", ["wrapper", "item"])
    random = gstudy_intervals(design)
    fixed = gstudy_intervals(design, fixed=["wrapper"])
    assert fixed.fixed == ("wrapper",) and fixed.random == ("item",)
    w = lambda iv: iv[1] - iv[0]                                                           # noqa: E731
    assert w(fixed.objects[0].interval) < w(random.objects[0].interval) / 2
    assert any("wrapper has 2 level(s)" in s for s in random.warnings)
    assert not any("wrapper" in s for s in fixed.warnings)


def test_missing_cells_use_reml_and_count_what_is_missing():
    y = _simulate((3, 8, 20), (1, 0.5, 0.8, 0.4, 0.6, 0.3, 0.7), seed=5)
    keep = np.random.default_rng(0).random(y.size) > 0.1
    rep = gstudy_intervals(long_design(_table(y, keep), "y", "model", ["wrapper", "item"]))
    assert rep.components_method == "reml"
    assert rep.missing_cells == int((~keep).sum())
    full = gstudy_intervals(long_design(_table(y), "y", "model", ["wrapper", "item"]))
    for a, b in zip(rep.objects, full.objects):
        assert a.interval[0] < a.estimate < a.interval[1]
        assert abs(a.estimate - b.estimate) < (b.interval[1] - b.interval[0]) / 4
        assert (a.interval[1] - a.interval[0]) == pytest.approx(b.interval[1] - b.interval[0], rel=0.3)


def test_holm_against_a_worked_example():
    # sorted p 0.005, 0.01, 0.03, 0.04 × 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 → monotone 0.02, 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_verdict_says_indistinguishable_after_adjustment():
    y = _simulate((4, 6, 10), (0.0, 0.5, 0.5, 0.5, 0.5, 0.3, 0.5), seed=21)   # no model effect at all
    rep = gstudy_intervals(long_design(_table(y), "y", "model", ["wrapper", "item"]))
    assert len(rep.differences) == 6
    assert all(d.p_holm >= d.p_value for d in rep.differences)
    assert all(d.verdict == "indistinguishable at this design" for d in rep.differences if d.p_holm >= 0.05)
    y2 = y.copy()
    y2[0] += 5
    rep2 = gstudy_intervals(long_design(_table(y2), "y", "model", ["wrapper", "item"]))
    assert [d.verdict for d in rep2.differences[:3]] == ["0 higher"] * 3


def test_pigeonhole_bootstrap_is_seeded_pairs_its_draws_and_agrees_in_scale():
    y = _simulate((3, 10, 30), (1, 0.6, 0.6, 0.4, 0.5, 0.3, 0.6), seed=4)
    design = long_design(_table(y), "y", "model", ["wrapper", "item"])
    a = pigeonhole_intervals(design, draws=400, seed=3)
    assert a.to_json() == pigeonhole_intervals(design, draws=400, seed=3).to_json()
    assert a.to_json() != pigeonhole_intervals(design, draws=400, seed=4).to_json()
    g = gstudy_intervals(design)
    for bo, go in zip(a.objects, g.objects):
        assert bo.estimate == pytest.approx(go.estimate)
        ratio = (bo.interval[1] - bo.interval[0]) / (go.interval[1] - go.interval[0])
        assert 0.6 < ratio < 1.6
    # shared facets cancel in the bootstrap too: a big envelope effect leaves differences' widths alone
    shifted = long_design(_table(y + np.random.default_rng(1).normal(0, 5, (1, 10, 1))), "y", "model",
                          ["wrapper", "item"])
    b = pigeonhole_intervals(shifted, draws=400, seed=3)
    for da, db in zip(a.differences, b.differences):
        assert (db.interval[1] - db.interval[0]) == pytest.approx(da.interval[1] - da.interval[0], rel=1e-6)


def test_bad_requests_are_refused():
    y = _simulate((3, 4, 5), (1, 0.5, 0.5, 0.5, 0.5, 0.3, 0.5), seed=1)
    design = long_design(_table(y), "y", "model", ["wrapper", "item"])
    with pytest.raises(AnalysisError, match="every facet is fixed"):
        gstudy_intervals(design, fixed=["wrapper", "item"])
    with pytest.raises(AnalysisError, match="not one of the facets"):
        gstudy_intervals(design, fixed=["envelope"])
    with pytest.raises(AnalysisError, match="coverage level"):
        gstudy_intervals(design, level=95)
    nested = long_design({"y": np.arange(8.0), "m": [0, 0, 0, 0, 1, 1, 1, 1], "t": [0, 0, 1, 1] * 2,
                          "r": [0, 1, 2, 3] * 2}, "y", "m", ["t", "r"], {"r": "t"})
    with pytest.raises(AnalysisError, match="crossed facets only"):
        pigeonhole_intervals(nested, draws=100)


def test_a_single_model_gets_its_interval_from_the_facets_alone():
    """One model: its interactions are confounded with the facets' effects, so the error variance of its mean
    is that of a crossed wrapper × item table's mean, (MS_w + MS_i − MS_wi)/(n_w n_i), written out here."""
    y = _simulate((1, 7, 15), (1, 0.6, 0.8, 0.5, 0.6, 0.4, 0.5), seed=12)
    rep = gstudy_intervals(long_design(_table(y), "y", "model", ["wrapper", "item"]))
    (o,) = rep.objects
    assert rep.differences == ()
    (ms_w, df_w), (ms_i, df_i), (ms_wi, df_wi) = _two_way_ms(y[0])
    var = (ms_w + ms_i - ms_wi) / y.size
    df = (ms_w + ms_i - ms_wi) ** 2 / (ms_w ** 2 / df_w + ms_i ** 2 / df_i + ms_wi ** 2 / df_wi)
    assert o.estimate == pytest.approx(y.mean())
    assert o.df == pytest.approx(df, rel=1e-9)
    assert (o.interval[1] - o.interval[0]) / 2 == pytest.approx(student.ppf(0.975, df) * math.sqrt(var), rel=1e-9)
    # with cells missing, REML on the facets' effects alone
    keep = np.random.default_rng(2).random(y.size) > 0.15
    rep2 = gstudy_intervals(long_design(_table(y, keep), "y", "model", ["wrapper", "item"]))
    assert rep2.components_method == "reml" and rep2.objects[0].interval[0] < rep2.objects[0].estimate
    assert (rep2.objects[0].interval[1] - rep2.objects[0].interval[0]) == pytest.approx(2 * o.interval[1] - 2 * o.estimate, rel=0.35)


def test_warnings_follow_each_methods_coverage():
    """8 envelopes: enough for the G-study interval (≥ 6), too few for the bootstrap's (< 12)."""
    y = _simulate((3, 8, 20), (1, 0.5, 0.5, 0.4, 0.4, 0.3, 0.6), seed=2)
    design = long_design(_table(y), "y", "model", ["wrapper", "item"])
    assert gstudy_intervals(design).warnings == ()
    (warning,) = pigeonhole_intervals(design, draws=200).warnings
    assert warning.startswith("wrapper has 8 level(s), under 12") and "prefer --method gstudy" in warning
