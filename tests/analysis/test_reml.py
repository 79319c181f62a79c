"""REML variance components of designs with missing cells, against lme4 and against closed forms.

The lme4 values are fixtures made by ``tests/fixtures/lme4/make_fixtures.R`` (lme4 1.1.31, REML, bobyqa): Brennan's
synthetic data sets 3 (p × i × o) and 4 (p × (r:t)) with cells removed, a simulated model × wrapper × item design
with 10 % of cells missing, a model × envelope design with 1–3 replicates per cell, and a replicated model × probe
table whose optimum has two components on the boundary (the average information is singular there). The suite
never runs R.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.csv as pcsv
import pytest

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.gtheory import variance_components
from mirrorscan.analysis.long_design import long_design
from mirrorscan.analysis.reml import full_design_means, reml

LME4 = Path(__file__).resolve().parents[1] / "fixtures" / "lme4"
EXPECTED = json.loads((LME4 / "expected.json").read_text())
CASES = {
    "brennan3_missing": ("p", ["i", "o"], None),
    "brennan4_missing": ("p", ["t", "r"], {"r": "t"}),
    "simulated_mwi_missing": ("model", ["wrapper", "item"], None),
    "replicates_me": ("model", ["envelope"], None),
    "boundary_replicates": ("model", ["probe"], None),
}


def _design(name: str):
    obj, facets, nested = CASES[name]
    return long_design(pcsv.read_csv(LME4 / f"{name}.csv"), "score", obj, facets, nested)


@pytest.mark.parametrize("name", sorted(CASES))
def test_components_and_criterion_match_lme4(name):
    design = _design(name)
    assert design.missing_cells > 0 or design.replicated          # the fixtures are not complete tables
    fit = reml(design)
    want = EXPECTED[name]
    assert design.n_rows == want["n_rows"]
    assert sorted(fit.names) == sorted(want["components"])
    for comp, value in want["components"].items():
        # lme4 stops at its optimiser's tolerance (~1e-6 relative in θ); a small component moves most
        assert fit.estimate(comp) == pytest.approx(value, rel=5e-5, abs=2e-6 * sum(want["components"].values()))
    assert fit.deviance == pytest.approx(want["reml_criterion"], abs=1e-6)


def _simulated(shape, sds, seed, missing=0.0):
    rng = np.random.default_rng(seed)
    nm, nw, ni = shape
    y = (rng.normal(0, sds[0], (nm, 1, 1)) + rng.normal(0, sds[1], (1, nw, 1)) + rng.normal(0, sds[2], (1, 1, ni))
         + rng.normal(0, sds[3], (nm, nw, 1)) + rng.normal(0, sds[4], (nm, 1, ni)) + rng.normal(0, sds[5], (1, nw, ni))
         + rng.normal(0, sds[6], (nm, nw, ni)))
    m, w, i = (a.ravel() for a in np.meshgrid(range(nm), range(nw), range(ni), indexing="ij"))
    keep = rng.random(y.size) >= missing
    return y, {"y": y.ravel()[keep], "model": m[keep], "wrapper": w[keep], "item": i[keep]}


def test_complete_balanced_table_gives_the_anova_estimates():
    """Searle et al. (1992) §6.8: on balanced data with every ANOVA estimate positive, REML = ANOVA."""
    _, table = _simulated((4, 6, 10), (1, 0.7, 0.8, 0.5, 0.6, 0.4, 0.5), seed=1)
    design = long_design(table, "y", "model", ["wrapper", "item"])
    anova = {c.name: c.estimate for c in variance_components(design.balanced(), design.facets)}
    assert min(anova.values()) > 0
    fit = reml(design)
    for name, value in anova.items():
        assert fit.estimate(name) == pytest.approx(value, rel=1e-6)


def test_deviance_equals_the_dense_restricted_likelihood():
    """−2 log L_R by the textbook formula with V and P built densely (independent of the equations used)."""
    _, table = _simulated((3, 4, 5), (1, 0.5, 0.8, 0.4, 0.6, 0.3, 0.7), seed=4, missing=0.15)
    design = long_design(table, "y", "model", ["wrapper", "item"])
    fit = reml(design)
    n = design.n_rows
    zs = []
    for ef in fit.effects:
        z = np.zeros((n, ef.levels))
        z[np.arange(n), ef.codes] = 1
        zs.append(z)
    v = fit.estimates[-1] * np.eye(n) + sum(s * z @ z.T for s, z in zip(fit.estimates[:-1], zs))
    x = np.ones((n, 1))
    vi = np.linalg.inv(v)
    xvx = x.T @ vi @ x
    p = vi - vi @ x @ np.linalg.inv(xvx) @ x.T @ vi
    y = design.scores
    dense = np.linalg.slogdet(v)[1] + np.linalg.slogdet(xvx)[1] + y @ p @ y + (n - 1) * np.log(2 * np.pi)
    assert fit.deviance == pytest.approx(dense, rel=1e-10)
    # and it is the maximum: moving any component either way raises the deviance
    from mirrorscan.analysis.reml import _Equations, _Point

    eq = _Equations(design)
    for k in range(len(fit.estimates)):
        for factor in (0.9, 1.1):
            moved = fit.estimates.copy()
            moved[k] = max(moved[k] * factor, 1e-6)
            assert _Point(eq, moved).deviance > fit.deviance


def test_a_component_with_no_variance_lands_on_the_boundary_at_zero():
    y, table = _simulated((5, 6, 8), (1, 0.0, 0.8, 0.0, 0.5, 0.0, 0.6), seed=1)
    design = long_design(table, "y", "model", ["wrapper", "item"])
    anova = {c.name: c.estimate for c in variance_components(design.balanced(), design.facets)}
    negatives = [k for k, v in anova.items() if v < 0]
    assert negatives                                                    # the case this test is about
    fit = reml(design)
    assert all(fit.estimate(k) == 0.0 for k in negatives)
    assert np.all(fit.covariance[[fit.names.index(k) for k in negatives]] == 0)
    assert fit.estimate("model") > 0.2 and fit.estimate("residual") > 0.2


def test_full_design_mean_is_the_plain_mean_when_complete_and_imputes_when_not():
    y, table = _simulated((4, 6, 10), (1, 0.7, 0.8, 0.5, 0.6, 0.4, 0.5), seed=3)
    complete = long_design(table, "y", "model", ["wrapper", "item"])
    assert np.allclose(full_design_means(complete, reml(complete)), y.mean(axis=(1, 2)))
    # drop all of one model's cells in one wrapper (a failed variant): the plain mean over what is left moves
    # by that wrapper's effect; the full-design mean puts the wrapper back at its fitted value instead
    gone = (table["model"] == 0) & (table["wrapper"] == 2)
    partial = long_design({k: v[~gone] for k, v in table.items()}, "y", "model", ["wrapper", "item"])
    assert partial.missing_cells == 10
    means = full_design_means(partial, reml(partial))
    assert np.allclose(means[1:], y.mean(axis=(1, 2))[1:])            # complete models keep their plain mean
    plain = table["y"][(table["model"] == 0) & ~gone].mean()
    assert abs(means[0] - y[0].mean()) < abs(plain - y[0].mean())


def test_refuses_a_design_too_large_for_the_dense_complement(monkeypatch):
    import mirrorscan.analysis.reml as mod

    monkeypatch.setattr(mod, "MAX_DENSE_LEVELS", 20)
    _, table = _simulated((4, 6, 10), (1, 0.7, 0.8, 0.5, 0.6, 0.4, 0.5), seed=1)
    with pytest.raises(AnalysisError, match="levels outside the largest effect"):
        reml(long_design(table, "y", "model", ["wrapper", "item"]))
