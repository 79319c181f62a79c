"""The cheapest design: the exact search against exhaustive enumeration over a bounded box, and its edges."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mirrorscan.analysis.design_plan import ErrorModel, cheapest_design, frontier, next_step, plan
from mirrorscan.analysis.errors import AnalysisError
from scipy.stats import norm


def _model(rng, fixed=None):
    names = ["model", "wrapper", "item", "model:wrapper", "model:item", "wrapper:item", "residual"]
    facets = [frozenset(n.split(":")) for n in names[:-1]] + [frozenset({"model", "wrapper", "item"})]
    est = rng.gamma(1.0, 1.0, len(names))
    return ErrorModel.from_components("model", names, facets, est, fixed)


def _exhaustive(model, coefficient, target, box, unit, budget=None, level=0.95):
    """Every design of the box, its errors written out from the components here (not by the module)."""
    z = norm.ppf(0.5 + level / 2)
    facets = sorted(box)
    best = None
    for combo in itertools.product(*[range(1, box[f] + 1) for f in facets]):
        n = dict(zip(facets, combo))
        rel = ab = 0.0
        for (fs, var), obj in zip(model.terms, model.with_object):
            part = var / math.prod(n[f] for f in fs)
            ab += part
            rel += part if obj else 0.0
        tau = model.tau
        value = {"g": tau / (tau + rel), "phi": tau / (tau + ab), "halfwidth": z * math.sqrt(2 * rel)}[coefficient]
        err = ab if coefficient == "phi" else rel
        cost = unit * math.prod(combo)
        if budget is None:
            ok = value <= target if coefficient == "halfwidth" else value >= target
            key = (cost, err)
        else:
            ok = cost <= budget
            key = (err, cost)
        if ok and (best is None or key < best[0]):
            best = (key, n)
    return best[1] if best else None


@pytest.mark.parametrize("seed", range(12))
def test_cheapest_design_equals_exhaustive_enumeration(seed):
    rng = np.random.default_rng(seed)
    model = _model(rng)
    box = {"wrapper": int(rng.integers(3, 15)), "item": int(rng.integers(5, 40))}
    unit = float(rng.uniform(0.5, 3))
    for coefficient in ("g", "phi"):
        for target in (0.5, 0.7, 0.8, 0.9):
            got = cheapest_design(model, coefficient, target, box, unit)
            want = _exhaustive(model, coefficient, target, box, unit)
            assert (got.sizes if got else None) == want, (coefficient, target)
    half = cheapest_design(model, "halfwidth", 0.8, box, unit)
    assert (half.sizes if half else None) == _exhaustive(model, "halfwidth", 0.8, box, unit)
    for budget in (5.0, 50.0, 300.0):
        got = cheapest_design(model, "g", None, box, unit, budget=budget)
        assert (got.sizes if got else None) == _exhaustive(model, "g", None, box, unit, budget=budget)


def test_three_facets_and_a_fixed_one_against_enumeration():
    rng = np.random.default_rng(40)
    names = ["model", "wrapper", "item", "ordering", "model:wrapper", "model:item", "model:ordering", "residual"]
    facets = [frozenset(n.split(":")) for n in names[:-1]] + [frozenset({"model", "wrapper", "item", "ordering"})]
    est = rng.gamma(1.0, 1.0, len(names))
    # ordering random: three random facets
    model = ErrorModel.from_components("model", names, facets, est)
    box = {"wrapper": 6, "item": 12, "ordering": 4}
    for target in (0.6, 0.85):
        got = cheapest_design(model, "g", target, box, 1.0)
        assert (got.sizes if got else None) == _exhaustive(model, "g", target, box, 1.0)
    # ordering fixed at 2 levels: model:ordering moves into the universe score, cost doubles per cell
    fixed = ErrorModel.from_components("model", names, facets, est, {"ordering": 2})
    assert fixed.random == ("item", "wrapper")
    assert fixed.tau == pytest.approx(est[0] + est[6] / 2)
    d = cheapest_design(fixed, "g", 0.7, {"wrapper": 6, "item": 12}, 1.0)
    assert d is None or d.cost == 2 * math.prod(d.sizes.values())


def test_unreachable_target_gives_none_and_the_frontier_is_monotone():
    rng = np.random.default_rng(3)
    model = _model(rng)
    box = {"wrapper": 4, "item": 5}
    assert cheapest_design(model, "g", 0.999999, box, 1.0) is None
    front = frontier(model, "g", box, 1.0)
    costs = [d.cost for d in front]
    gs = [d.g for d in front]
    assert costs == sorted(costs) and all(a < b for a, b in zip(gs, gs[1:]))
    assert front[0].sizes == {"item": 1, "wrapper": 1}
    # the frontier is exactly the designs that beat every design at most as costly (written out here)
    def g_of(n):
        rel = sum(var / math.prod(n[f] for f in fs) for (fs, var), obj in zip(model.terms, model.with_object) if obj)
        return model.tau / (model.tau + rel)
    designs = [({"wrapper": w, "item": i}, w * i) for w in range(1, 5) for i in range(1, 6)]
    undominated = {tuple(sorted(n.items())) for n, c in designs
                   if all(g_of(m) < g_of(n) for m, c2 in designs if c2 <= c and m != n and
                          not (c2 == c and g_of(m) == g_of(n)))}
    assert {tuple(sorted(d.sizes.items())) for d in front} == undominated


def test_next_step_names_the_facet_whose_level_buys_most():
    names = ["model", "wrapper", "item", "model:wrapper", "model:item", "residual"]
    facets = [frozenset(n.split(":")) for n in names[:-1]] + [frozenset({"model", "wrapper", "item"})]
    # a big model × wrapper interaction: another wrapper helps far more than another item
    model = ErrorModel.from_components("model", names, facets, [1.0, 0.1, 0.1, 2.0, 0.01, 0.5])
    p = plan(model, "g", 0.8, {"wrapper": 30, "item": 30}, 1.0)
    assert p.design is not None and p.design.g >= 0.8
    assert max(p.next_step, key=p.next_step.get) == "wrapper"
    assert p.to_json()["next_step"]["best_facet"] == "wrapper"


def test_bad_requests_are_refused():
    model = _model(np.random.default_rng(1))
    with pytest.raises(AnalysisError, match="target or a budget"):
        plan(model, "g", None, {"wrapper": 3, "item": 3}, 1.0)
    with pytest.raises(AnalysisError, match="between 0 and 1"):
        plan(model, "g", 1.5, {"wrapper": 3, "item": 3}, 1.0)
    with pytest.raises(AnalysisError, match="positive cost"):
        plan(model, "g", 0.8, {"wrapper": 3, "item": 3}, 0.0)
    with pytest.raises(AnalysisError, match="no maximum for item"):
        plan(model, "g", 0.8, {"wrapper": 3}, 1.0)
