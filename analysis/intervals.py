"""Intervals that generalise over the random facets: a model's score on new prompts and items of the same kind.

A headline number is one object's mean over the cells of a design (model × envelope × item × sample, …). Read
as a claim about the model, its error is not the spread of its cells divided by √n: the envelopes and items
it happened to be asked in are a sample too, and every cell shares them. Generalizability theory gives the
error variance of that mean for the observed design (Brennan 2001, ch. 4–5), with each random facet's
components divided by the number of its levels the object was observed in:

* **absolute** error variance of object m's own score, σ²(Δ_m) = Σ_α σ²_α / d_m(α) over every effect α other
  than the object's main effect that holds a random facet (a facet's main effect included: another sample
  of envelopes moves every model's score);
* **relative** error variance of a difference between two objects a, b on the same grid:
  σ²(δ_a) + σ²(δ_b), summing only effects that hold the object: effects shared by both (envelope, item,
  envelope × item) cancel in the paired difference.

d_m(α) is the number of distinct levels of α's other facets among object m's observed cells (on a complete
design, the product of their sizes, as in :mod:`analysis.dstudy`); effects whose other facets are all fixed
count as part of the score (Brennan's fixed-facet rule), not as error. The components come from the ANOVA
G-study on a complete table and from REML (:mod:`analysis.reml`) when cells are missing or repeated; on a table
with missing cells the estimate is the mean the fitted model implies for the full design.

The interval is estimate ± t(df) √V with Satterthwaite's degrees of freedom df = 2V² / Var(V̂), Var(V̂) = a'Σa
from the covariance Σ of the component estimates (for ANOVA the exact mean-square form, for REML the inverse
average information); this is Satterthwaite's (1946) approximation, which on a balanced design is the usual
Σ(c_k MS_k)²/df_k. The naive interval treats the object's cells as independent (sd/√n, t on n − 1). p-values
of paired differences are two-sided t tests on the same df, adjusted over all pairs by Holm's step-down.
The second method, the pigeonhole bootstrap, is in :mod:`analysis.pigeonhole`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.gtheory import RESIDUAL, variance_components
from mirrorscan.analysis.long_design import LongDesign

DEFAULT_LEVEL = 0.95
MIN_TRUSTED_LEVELS = {"gstudy": 6, "bootstrap": 12}
"""Per method, the levels of a random facet below which a warning is given (bench/coverage.py, docs/statistics.md):
the G-study interval kept 0.94–0.96 coverage down to 3 levels but, resting on few degrees of freedom, came out
1.2–1.3 times as wide as the true components need below 6; the pigeonhole bootstrap covered 0.81–0.92 below 12
levels (it draws as many levels as it has, so its spread lacks the n/(n − 1) of a small sample)."""


@dataclass(frozen=True)
class FittedComponents:
    """Variance components of a design with the covariance of their estimates, from ANOVA or REML."""

    names: tuple[str, ...]
    """Effect names (``model``, ``model:wrapper``, …), the residual last."""
    facets: tuple[frozenset[str], ...]
    """Facets of each effect; the residual holds every facet."""
    estimates: np.ndarray
    """Raw estimates in squared score units (ANOVA's may be negative; they count as 0)."""
    covariance: np.ndarray = field(repr=False)
    """Covariance of the estimates (squared squared-score units)."""
    method: str
    """``anova`` (complete, balanced table; Brennan's EMS) or ``reml`` (missing cells or replicates)."""
    object_means: np.ndarray = field(repr=False)
    """Each object's estimate: its mean (full-design mean under the fitted model when cells are missing)."""

    def estimate(self, name: str) -> float:
        """Raw estimate of one component."""
        return float(self.estimates[self.names.index(name)])


def fit_components(design: LongDesign) -> FittedComponents:
    """ANOVA components (with their exact mean-square covariance) for a complete, balanced table; REML otherwise
    (missing cells, replicates, or nested facets with unequal numbers of levels, e.g. more carriers for one term)."""
    balanced = None
    if design.complete:
        try:
            balanced = design.balanced()
        except AnalysisError:
            balanced = None                       # unequal nesting: complete but not balanced
    if balanced is not None:
        comps = variance_components(balanced, balanced.facets)
        sizes = dict(zip(balanced.facets, balanced.scores.shape))
        n = len(comps)
        ems = np.zeros((n, n))
        for k, a in enumerate(comps):
            for j, b in enumerate(comps):
                if a.facets <= b.facets:
                    ems[k, j] = np.prod([v for f, v in sizes.items() if f not in b.facets])
        inv = np.linalg.inv(ems)
        ms_var = np.array([2 * c.mean_square ** 2 / c.df for c in comps])
        cov = inv @ np.diag(ms_var) @ inv.T
        means = (np.array([balanced.scores.mean()]) if design.single_object
                 else balanced.scores.mean(axis=tuple(range(1, balanced.scores.ndim))))
        return FittedComponents(tuple(c.name for c in comps), tuple(c.facets for c in comps),
                                np.array([c.estimate for c in comps]), cov, "anova", means)
    from mirrorscan.analysis.reml import full_design_means, reml

    fit = reml(design)
    top = frozenset(design.facets[1:]) if design.single_object and not design.replicated else frozenset(design.facets)
    facets = tuple(ef.facets for ef in fit.effects) + (top,)
    return FittedComponents(fit.names, facets, fit.estimates, fit.covariance, "reml", full_design_means(design, fit))


@dataclass(frozen=True)
class Interval:
    """One object's estimate with the interval over random facets and the naive one beside it."""

    object: str
    """The object's label (e.g. the model)."""
    estimate: float
    """Its mean over its cells (full-design mean under the fitted model when cells are missing), score units."""
    interval: tuple[float, float]
    """The interval generalising over the random facets, score units."""
    naive_interval: tuple[float, float]
    """Cells as independent: mean ± t(n − 1) sd/√n, score units."""
    df: float
    """Degrees of freedom of ``interval`` (Satterthwaite; the bootstrap reports NaN)."""
    n_cells: int
    """Observations of this object."""

    @property
    def width_ratio(self) -> float:
        """Width of ``interval`` over the naive width: how much the naive interval understates the error."""
        naive = self.naive_interval[1] - self.naive_interval[0]
        return (self.interval[1] - self.interval[0]) / naive if naive > 0 else float("inf")

    def to_json(self) -> dict:
        """Plain dict with the estimate, both intervals, their width ratio, df and cell count."""
        return {"object": self.object, "estimate": self.estimate, "interval": list(self.interval),
                "naive_interval": list(self.naive_interval), "width_ratio": _num(self.width_ratio),
                "df": _num(self.df), "n_cells": self.n_cells}


@dataclass(frozen=True)
class Difference:
    """A paired difference between two objects on the same grid."""

    a: str
    """First object."""
    b: str
    """Second object."""
    estimate: float
    """Estimate of a − b, score units."""
    interval: tuple[float, float]
    """Interval of a − b generalising over the random facets (unadjusted), score units."""
    p_value: float
    """Two-sided p of a − b = 0."""
    p_holm: float
    """p adjusted over every pair by Holm's step-down."""
    df: float
    """Degrees of freedom (Satterthwaite; NaN for the bootstrap)."""
    alpha: float
    """1 − level: the threshold of the verdict."""

    @property
    def verdict(self) -> str:
        """Plain words: whether the design tells the two apart after the adjustment, and which is higher."""
        if not self.p_holm < self.alpha:
            return "indistinguishable at this design"
        return f"{self.a} higher" if self.estimate > 0 else f"{self.b} higher"

    def to_json(self) -> dict:
        """Plain dict with the difference, its interval, p, Holm p, df and the verdict."""
        return {"a": self.a, "b": self.b, "estimate": self.estimate, "interval": list(self.interval),
                "p_value": self.p_value, "p_holm": self.p_holm, "df": _num(self.df), "verdict": self.verdict}


@dataclass(frozen=True)
class IntervalReport:
    """Every object's interval and every pair's difference for one score on one design."""

    level: float
    """Coverage level of every interval (e.g. 0.95)."""
    method: str
    """``gstudy`` (variance components, Satterthwaite t) or ``bootstrap`` (pigeonhole, percentile)."""
    components_method: str
    """How the components were estimated: ``anova`` or ``reml`` (``none`` for the bootstrap)."""
    object: str
    """The object facet."""
    random: tuple[str, ...]
    """Facets treated as random (generalised over)."""
    fixed: tuple[str, ...]
    """Facets treated as fixed (their observed levels are the whole universe)."""
    n_rows: int
    """Observations in the table."""
    missing_cells: int
    """Cells of the full design with no observation."""
    objects: tuple[Interval, ...]
    """One per object, in label order."""
    differences: tuple[Difference, ...]
    """Every pair once (a before b in label order)."""
    warnings: tuple[str, ...]
    """Plain sentences: facets with too few levels for the interval to be trusted, and the like."""
    components: tuple[tuple[str, tuple[str, ...], float], ...] = ()
    """(effect name, its facets, estimate in squared score units) of the G-study behind the intervals; empty for
    the bootstrap. What a design plan needs (``analysis.design_plan``)."""
    levels: tuple[tuple[str, int], ...] = ()
    """(facet, observed levels) of the object and every facet."""

    def to_json(self) -> dict:
        """The JSON of ``mirrorscan stats intervals``."""
        return {"level": self.level, "method": self.method, "components_method": self.components_method,
                "components": [{"effect": n, "facets": list(f), "estimate": e} for n, f, e in self.components],
                "levels": dict(self.levels),
                "object": self.object, "facets": [*self.random, *self.fixed], "random": list(self.random),
                "fixed": list(self.fixed), "n_rows": self.n_rows, "missing_cells": self.missing_cells,
                "objects": [o.to_json() for o in self.objects],
                "differences": [d.to_json() for d in self.differences], "warnings": list(self.warnings)}


def _num(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's (1979) step-down adjustment: p_(k) × (m − k + 1), made monotone and capped at 1."""
    p = np.asarray(p_values, dtype=np.float64)
    order = np.argsort(p, kind="stable")
    m = len(p)
    adj = np.empty(m)
    running = 0.0
    for rank, k in enumerate(order):
        running = max(running, min(1.0, p[k] * (m - rank)))
        adj[k] = running
    return adj


def check_facets(design: LongDesign, fixed: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(random, fixed) facets other than the object; refuses an unknown or object facet, or none random."""
    fixed = tuple(fixed)
    for f in fixed:
        if f not in design.facets[1:]:
            raise AnalysisError("--fixed", f"{f!r} is not one of the facets {list(design.facets[1:])}", "name a facet")
    random = tuple(f for f in design.facets[1:] if f not in fixed)
    if not random:
        raise AnalysisError("--fixed", "every facet is fixed: nothing is generalised over", "leave a facet random")
    return random, fixed


def level_warnings(design: LongDesign, random: Sequence[str], method: str = "gstudy") -> tuple[str, ...]:
    """A sentence per random facet observed at fewer than MIN_TRUSTED_LEVELS[method] levels (per ancestor for a
    nested facet), saying what the coverage study found there."""
    from mirrorscan.analysis.reml_gstudy import observed_sizes

    out = []
    least = MIN_TRUSTED_LEVELS[method]
    sizes = observed_sizes(design)
    for f in random:
        n = sizes[f]
        if n >= least:
            continue
        if method == "gstudy":
            out.append(f"{f} has {n:g} level(s), under {least}: the interval rests on few degrees of freedom and "
                       f"comes out wider than the truth needs (coverage study, docs/statistics.md)")
        else:
            out.append(f"{f} has {n:g} level(s), under {least}: the bootstrap interval is too narrow there (it "
                       f"covered 81–92 % at 95 % in the coverage study, docs/statistics.md); prefer --method gstudy")
    return tuple(out)


def _divisors(design: LongDesign, comps: FittedComponents) -> np.ndarray:
    """d_m(α): distinct levels of each effect's non-object facets among each object's rows (objects × effects)."""
    obj = design.codes[design.object]
    n_obj = len(design.labels[design.object])
    out = np.ones((n_obj, len(comps.names)))
    for j, (name, fs) in enumerate(zip(comps.names, comps.facets)):
        others = fs - {design.object}
        if not others:
            continue
        if name == RESIDUAL:
            out[:, j] = np.bincount(obj, minlength=n_obj)
            continue
        pairs = np.unique(np.stack([obj, design.key(others, design.codes)], axis=1), axis=0)
        out[:, j] = np.bincount(pairs[:, 0], minlength=n_obj)
    return out


def _error_weights(design: LongDesign, comps: FittedComponents, fixed: Sequence[str]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Weights a (objects × components) of the absolute and of the relative error variance."""
    div = _divisors(design, comps)
    fixed_facets = set(fixed)
    absolute = np.zeros_like(div)
    relative = np.zeros_like(div)
    for j, fs in enumerate(comps.facets):
        random_others = fs - {design.object} - fixed_facets
        if not random_others:
            continue                                  # the object's own effect, or fixed-only: part of the score
        absolute[:, j] = 1.0 / div[:, j]
        if design.object in fs:
            relative[:, j] = 1.0 / div[:, j]
    return absolute, relative


def _satterthwaite(a: np.ndarray, comps: FittedComponents) -> tuple[float, float]:
    """V = a · max(σ², 0) and its Satterthwaite df = 2V²/(a'Σa) over the components counted (positive ones)."""
    used = np.maximum(comps.estimates, 0.0)
    v = float(a @ used)
    live = a * (comps.estimates > 0)
    var_v = float(live @ comps.covariance @ live)
    df = 2 * v * v / var_v if var_v > 0 and v > 0 else float("inf")
    return v, max(df, 1.0)


def naive_interval(y: np.ndarray, level: float) -> tuple[float, float]:
    """Mean ± t(n − 1) sd/√n: the interval that treats cells as independent draws."""
    from scipy.stats import t

    n = y.size
    if n < 2:
        return (float("nan"), float("nan"))
    half = float(t.ppf(0.5 + level / 2, n - 1) * np.std(y, ddof=1) / math.sqrt(n))
    return (float(y.mean() - half), float(y.mean() + half))


def naive_intervals(design: LongDesign, level: float) -> list[tuple[float, float]]:
    """naive_interval of each object's rows, in label order."""
    obj = design.codes[design.object]
    return [naive_interval(design.scores[obj == k], level) for k in range(len(design.labels[design.object]))]


def gstudy_intervals(design: LongDesign, fixed: Sequence[str] = (), level: float = DEFAULT_LEVEL,
                     comps: FittedComponents | None = None) -> IntervalReport:
    """Every object's estimate and interval, and every pair's difference, from the variance components.

    Absolute error variance for each object's own score, relative (shared facets cancel) for differences,
    t quantiles on Satterthwaite df; see the module docstring. Score units throughout.
    """
    from scipy.stats import t

    if not 0 < level < 1:
        raise AnalysisError("--level", f"{level} is not a coverage level", "give a level between 0 and 1, e.g. 0.95")
    random, fixed = check_facets(design, fixed)
    comps = comps or fit_components(design)
    absolute, relative = _error_weights(design, comps, fixed)
    labels = [str(v) for v in design.labels[design.object]]
    obj = design.codes[design.object]
    naive = naive_intervals(design, level)
    q = 0.5 + level / 2
    objects = []
    for k, label in enumerate(labels):
        v, df = _satterthwaite(absolute[k], comps)
        half = float(t.ppf(q, df) * math.sqrt(v))
        est = float(comps.object_means[k])
        objects.append(Interval(label, est, (est - half, est + half), naive[k], df, int(np.sum(obj == k))))
    raw = []
    for i in range(len(labels)):
        for j in range(i + 1, len(labels)):
            v, df = _satterthwaite(relative[i] + relative[j], comps)
            est = objects[i].estimate - objects[j].estimate
            se = math.sqrt(v)
            half = float(t.ppf(q, df) * se)
            p = float(2 * t.sf(abs(est) / se, df)) if se > 0 else (0.0 if est != 0 else 1.0)
            raw.append((labels[i], labels[j], est, (est - half, est + half), p, df))
    adjusted: np.ndarray | list[float] = holm([r[4] for r in raw]) if raw else []
    diffs = tuple(Difference(a, b, est, ci, p, float(h), df, 1 - level)
                  for (a, b, est, ci, p, df), h in zip(raw, adjusted))
    components = tuple((n, tuple(f for f in design.facets if f in fs), float(e))
                       for n, fs, e in zip(comps.names, comps.facets, comps.estimates))
    levels = tuple((f, len(design.labels[f])) for f in design.facets)
    return IntervalReport(level, "gstudy", comps.method, design.object, random, fixed, design.n_rows,
                          design.missing_cells, tuple(objects), diffs, level_warnings(design, random),
                          components, levels)
