"""The sampling proxy's 95 % interval on the flinch scale, per term and per axis, against an independent
computation: Clopper–Pearson bounds found by bisection on the binomial tail sums (not the beta quantiles the
code uses), mapped by the scale's formula written out; and their coverage summed exactly over every outcome."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mirrorscan.instruments.flinch.proxy import RESOLUTION, axis_proxy, difference_text, interval_text, proxy_score


def tail_le(k: int, n: int, p: float) -> float:
    """P(X ≤ k) for X ~ Binomial(n, p), summed term by term."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))


def bisect(f, lo=0.0, hi=1.0, steps=200) -> float:
    """The root of a function that falls across [lo, hi], by bisection."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    return (lo + hi) / 2


def exact_interval(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Clopper–Pearson by definition: low solves P(X ≥ k) = α/2, high solves P(X ≤ k) = α/2."""
    low = 0.0 if k == 0 else bisect(lambda p: alpha / 2 - (1 - tail_le(k - 1, n, p)))   # P(X ≥ k) rises with p
    high = 1.0 if k == n else bisect(lambda p: tail_le(k, n, p) - alpha / 2)
    return low, high


def flinch(lp: float) -> float:
    """The method's map: 100 × (−1 − lp) / 15, clipped to [0, 100]; lp = −∞ → 100."""
    return 100.0 if lp == -math.inf else min(100.0, max(0.0, 100.0 * (-1.0 - lp) / 15.0))


def ln(p: float) -> float:
    return -math.inf if p == 0 else math.log(p)


@pytest.mark.parametrize("k, n", [(0, 50), (1, 50), (5, 50), (17, 50), (50, 50), (3, 8), (0, 200), (120, 200)])
def test_a_terms_interval_is_its_clopper_pearson_interval_on_the_flinch_scale(k, n):
    score = proxy_score(k, n)
    low, high = exact_interval(k, n, 0.05)
    assert (score.ci_low, score.ci_high) == pytest.approx((low, high), abs=1e-9)
    assert score.flinch_low == pytest.approx(flinch(ln(high)), abs=1e-7)   # flinch falls as p rises
    assert score.flinch_high == pytest.approx(flinch(ln(low)), abs=1e-7)
    assert score.flinch_low <= (score.proxy_flinch if k else score.proxy_flinch_at_least) <= score.flinch_high
    if k == 0:
        assert score.flinch_high == 100.0 and score.proxy_flinch is None


@pytest.mark.parametrize("counts", [[(5, 50), (10, 50)], [(1, 50), (49, 50), (20, 50)], [(0, 50), (12, 50)],
                                    [(3, 200), (3, 200), (40, 200), (200, 200)]])
def test_an_axis_interval_is_the_bonferroni_mean_of_its_terms_bounds(counts):
    axis = axis_proxy(counts)
    m = len(counts)
    bounds = [exact_interval(k, n, 0.05 / m) for k, n in counts]
    assert axis.flinch_low == pytest.approx(flinch(sum(ln(h) for _, h in bounds) / m), abs=1e-6)
    assert axis.flinch_high == pytest.approx(flinch(sum(ln(lo) for lo, _ in bounds) / m), abs=1e-6)
    if any(k == 0 for k, _ in counts):
        assert axis.proxy_flinch is None and axis.flinch_high == 100.0
    else:
        point = flinch(sum(math.log(k / n) for k, n in counts) / m)
        assert axis.proxy_flinch == pytest.approx(point) and axis.flinch_low <= point <= axis.flinch_high


@pytest.mark.parametrize("ps, n", [([0.1, 0.3], 20), ([0.02, 0.5], 30), ([0.6, 0.05], 15)])
def test_the_axis_interval_covers_the_true_axis_flinch_at_least_95_percent(ps, n):
    """Coverage summed exactly over every pair of outcomes (no sampling): the probability that the interval
    holds the flinch of the mean true ln p."""
    truth = flinch(sum(math.log(p) for p in ps) / len(ps))
    pmf = [np.array([math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)]) for p in ps]
    covered = 0.0
    for k0 in range(n + 1):
        for k1 in range(n + 1):
            axis = axis_proxy([(k0, n), (k1, n)])
            if axis.flinch_low - 1e-9 <= truth <= axis.flinch_high + 1e-9:
                covered += pmf[0][k0] * pmf[1][k1]
    assert covered >= 0.95


def test_each_proxy_flinch_prints_with_its_interval_and_each_difference_with_the_resolution():
    assert interval_text(19.41, 12.04, 27.3) == "19.4 [12.0–27.3]"
    assert interval_text(None, 16.4, 100.0) == "n/a [16.4–100.0]"
    assert difference_text(30.0, 18.5) == f"Δ +11.5 (proxy resolution {RESOLUTION:g}: resolved)"
    assert difference_text(12.0, 18.5) == f"Δ -6.5 (proxy resolution {RESOLUTION:g}: below the proxy's resolution)"
    assert "resolution" in difference_text(None, 3.0) and "n/a" in difference_text(None, 3.0)


def test_the_proxy_models_numbers_carry_each_flinch_with_its_interval():
    import pyarrow as pa

    from mirrorscan.instruments.flinch.numbers import proxy_scores

    hits = {("a", "x"): [(2, 10), (3, 10)], ("a", "y"): [(0, 10), (1, 10)], ("b", "z"): [(0, 10), (0, 10)]}
    rows = [{"label": "api", "probe_id": f"api|{axis}|{term}|{c}|-|-", "sample": 0, "axis": axis, "term": term,
             "proxy_k": k, "proxy_n": n, "error": None}
            for (axis, term), carriers in hits.items() for c, (k, n) in enumerate(carriers)]
    (model,) = proxy_scores(pa.Table.from_pylist(rows), [("a", "A", ["x", "y"]), ("b", "B", ["z"])])
    a, b = model["axes"]["a"], model["axes"]["b"]
    x, y = a["terms"]
    assert (x["k"], x["n"], y["k"], y["n"]) == (5, 20, 1, 20)   # carriers pooled
    lo, hi = exact_interval(5, 20, 0.05)
    assert (x["flinch_low"], x["flinch_high"]) == pytest.approx((flinch(ln(hi)), flinch(ln(lo))), abs=1e-6)
    bounds = [exact_interval(5, 20, 0.025), exact_interval(1, 20, 0.025)]
    assert a["flinch_low"] == pytest.approx(flinch(sum(ln(h) for _, h in bounds) / 2), abs=1e-6)
    assert a["flinch_high"] == pytest.approx(flinch(sum(ln(v) for v, _ in bounds) / 2), abs=1e-6)
    assert a["proxy_flinch"] == pytest.approx(flinch((math.log(5 / 20) + math.log(1 / 20)) / 2))
    assert b["proxy_flinch"] is None and b["flinch_high"] == 100.0
    assert b["flinch_low"] == pytest.approx(flinch(ln(exact_interval(0, 20, 0.05)[1])), abs=1e-6)


def test_differences_between_proxy_models_print_with_the_resolution_beside_each():
    from mirrorscan.instruments.flinch.proxy import difference_lines

    def model(name, **axes):
        return {"model": name, "axes": {k: {"proxy_flinch": v} for k, v in axes.items()}}

    models = [model("a", violence=12.0, sexual=None), model("b", violence=25.5, sexual=3.0, extra=1.0)]
    (line,) = difference_lines(models, ["violence", "sexual", "extra"])
    assert line.startswith("proxy b − a: violence Δ +13.5 (proxy resolution 10: resolved); sexual Δ n/a")
    assert "extra" not in line                                # an axis the first model lacks is left out
    assert difference_lines(models[:1], ["violence"]) == []   # one proxy model: no difference shown
