"""G-study: variance components of a balanced random design by ANOVA expected mean squares.

Method (Brennan 2001, *Generalizability Theory*, ch. 3, "algorithms for any balanced design"):

* Every effect is a set of facets closed under nesting (if ``r`` is nested in ``t``, an effect that
  holds ``r`` holds ``t``). Its *primary* facets are those no other facet of the set is nested in; the
  rest are its *nesting* facets. Brennan's ``pr:t`` is the set {p, r, t} with primary {p, r}, nesting {t}.
* The effect's score is the inclusion–exclusion of marginal means over the sets between its nesting
  facets and itself; its sum of squares is N / (cells of the effect) × Σ score², its degrees of freedom
  Π(n − 1) over primary facets × Π n over nesting facets. (Computing the effect scores rather than
  differences of uncorrected sums of squares keeps large main effects from cancelling digits away.)
* EMS rule: E[MS(α)] = Σ over effects β ⊇ α of π(β̄) σ²(β), where π(β̄) is the product of the sample sizes
  of the facets *not* in β. Solved from the highest-order effect down, with the raw (possibly negative)
  estimates kept in the recursion, as Brennan does; negatives are set to zero only where coefficients are
  formed (``Component.estimate_used``) and are flagged.
* The highest-order effect is confounded with error (one observation per cell) and is named ``residual``.

Components are always estimated under the random-effects model. Fixed facets (Brennan's approach, ch. 4)
act in the D-study (:mod:`analysis.dstudy`): a fixed facet's interactions with the object are averaged
into universe-score variance; :func:`mixed_model_components` gives the corresponding mixed-model
components for reporting.

Effect names: the facets of the effect joined with ``:``, primary facets first then nesting facets,
each in facet order — ``model``, ``model:wrapper`` (an interaction), ``item:model`` (item nested in
model, Brennan's i:p), ``r:t``; this is also the R/lme4 reading of ``:``. The highest-order effect is
``residual``; ``Component.label`` keeps its facet name.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any, Mapping, Sequence

import numpy as np

from mirrorscan.analysis.design import BalancedDesign, design_from_array
from mirrorscan.analysis.errors import AnalysisError

RESIDUAL = "residual"


@dataclass(frozen=True)
class Component:
    """One variance component of a G-study (random-effects model, ANOVA/EMS estimate)."""

    name: str
    """Key in reports: ``model``, ``model:wrapper``, ``r:t``, ..., or ``residual`` for the top effect."""
    label: str
    """Facet label of the effect even for the residual, e.g. ``model:wrapper:item``."""
    facets: frozenset[str]
    """Every facet the effect's index carries (primary and nesting)."""
    primary: tuple[str, ...]
    """Facets the effect varies over (not nesting facets), in facet order."""
    nesting: tuple[str, ...]
    """Facets the primary ones are nested in, in facet order; empty for crossed effects."""
    df: int
    """Degrees of freedom."""
    sum_of_squares: float
    """Sum of squares, in squared score units."""
    mean_square: float
    """Mean square = sum_of_squares / df, in squared score units."""
    estimate: float
    """Raw ANOVA estimate of σ²(effect) for one level of each facet; may be negative."""

    @property
    def negative(self) -> bool:
        """True when the raw estimate is below zero (it is then set to zero for coefficients)."""
        return self.estimate < 0

    @property
    def estimate_used(self) -> float:
        """The estimate as used in coefficients and shares: max(estimate, 0)."""
        return max(self.estimate, 0.0)


@dataclass(frozen=True)
class GStudy:
    """Variance components of one balanced design, and the design they came from."""

    object: str
    """The object of measurement (facet of differentiation), e.g. ``model``."""
    facets: tuple[str, ...]
    """All facets in axis order, the object first."""
    sizes: Mapping[str, float]
    """Observed levels per facet (per ancestor cell for a nested facet; in an unbalanced design its mean)."""
    nested: Mapping[str, tuple[str, ...]]
    """Facet → facets it is nested in (transitively)."""
    fixed: tuple[str, ...]
    """Facets treated as fixed in D-studies (their observed levels are the whole universe)."""
    components: tuple[Component, ...]
    """Every effect of the design, main effects first, the residual last."""
    grand_mean: float
    """Mean of all scores, in score units."""
    n_observations: int
    """Number of scores (cells) in the design."""

    def component(self, name: str) -> Component:
        """The component with this report name (or facet label), e.g. ``"model:wrapper"``."""
        for c in self.components:
            if name in (c.name, c.label):
                return c
        raise KeyError(f"no effect {name!r}; effects are {[c.name for c in self.components]}")

    @property
    def total_variance(self) -> float:
        """Sum of the components after negatives are set to zero: variance of a single observation."""
        return float(sum(c.estimate_used for c in self.components))

    def share(self, name: str) -> float:
        """Fraction of total_variance in one component (negatives counted as zero); NaN if total is 0."""
        total = self.total_variance
        return self.component(name).estimate_used / total if total > 0 else float("nan")

    @property
    def negative_components(self) -> tuple[str, ...]:
        """Names of components whose raw estimate was negative (set to zero for coefficients)."""
        return tuple(c.name for c in self.components if c.negative)


def _effects(facets: Sequence[str], nested: Mapping[str, tuple[str, ...]]
             ) -> list[tuple[frozenset[str], tuple[str, ...], tuple[str, ...]]]:
    """All effects as (facet set, primary, nesting): non-empty facet subsets closed under nesting."""
    out = []
    for k in range(1, len(facets) + 1):
        for subset in combinations(facets, k):
            s = set(subset)
            if any(a not in s for f in subset for a in nested.get(f, ())):
                continue
            nest = {a for f in subset for a in nested.get(f, ())}
            out.append((frozenset(s), tuple(f for f in facets if f in s and f not in nest),
                        tuple(f for f in facets if f in nest)))
    return out


def variance_components(scores: Any, facets: Sequence[str], nested: Mapping[str, Any] | None = None
                        ) -> tuple[Component, ...]:
    """ANOVA sums of squares, mean squares and EMS variance-component estimates of a balanced array.

    ``scores`` has one axis per facet (nested facets index levels within their ancestor cell); all
    facets are random here. Estimates are in squared score units, raw (negatives kept); the last
    component is the highest-order effect, named ``residual``. This is the G-study table only: no
    universe-score or error variance, no coefficient (see :mod:`analysis.dstudy`).
    """
    design = scores if isinstance(scores, BalancedDesign) else design_from_array(scores, facets, nested)
    y, facets, nested = design.scores, design.facets, design.nested
    n = dict(zip(facets, y.shape))
    axis = {f: k for k, f in enumerate(facets)}
    N = y.size
    y = y - y.mean()                      # effects of non-empty sets do not depend on the grand mean

    means: dict[frozenset[str], np.ndarray] = {}

    def marginal(keep: frozenset[str]) -> np.ndarray:
        if keep not in means:
            drop = tuple(axis[f] for f in facets if f not in keep)
            means[keep] = y.mean(axis=drop, keepdims=True) if drop else y
        return means[keep]

    raw = []
    for fs, primary, nesting in _effects(facets, nested):
        eff = np.zeros(())
        base = frozenset(nesting)
        for k in range(len(primary) + 1):
            for extra in combinations(primary, k):
                sign = -1.0 if (len(primary) - k) % 2 else 1.0
                eff = eff + sign * marginal(base | frozenset(extra))
        cells = int(np.prod([n[f] for f in fs]))
        ss = float(N / cells * np.sum(eff * eff))   # eff has exactly the effect's cells as its shape
        df = int(np.prod([n[f] - 1 for f in primary]) * np.prod([n[f] for f in nesting]))
        raw.append((fs, primary, nesting, df, ss))

    # EMS: solve from the highest-order effect down (supersets first)
    estimates: dict[frozenset[str], float] = {}
    for fs, primary, nesting, df, ss in sorted(raw, key=lambda r: -len(r[0])):
        ms = ss / df
        acc = ms
        for other in estimates:
            if fs < other:
                acc -= _pi_outside(other, n) * estimates[other]
        estimates[fs] = acc / _pi_outside(fs, n)

    top = frozenset(facets)
    comps = []
    for fs, primary, nesting, df, ss in raw:
        label = ":".join(primary + nesting)
        comps.append(Component(RESIDUAL if fs == top else label, label, fs, primary, nesting, df, ss,
                               ss / df, float(estimates[fs])))
    return tuple(comps)


def _pi_outside(fs: frozenset[str], n: Mapping[str, int]) -> int:
    """π(ᾱ): product of the sample sizes of the facets not in the effect."""
    return int(np.prod([v for f, v in n.items() if f not in fs]))


def g_study(design: BalancedDesign | Any, facets: Sequence[str] | None = None,
            nested: Mapping[str, Any] | None = None, fixed: Sequence[str] = ()) -> GStudy:
    """Estimate the G-study of a balanced design whose first facet is the object of measurement.

    Accepts a :class:`BalancedDesign` (from :func:`analysis.design.pivot_long`) or an array with
    ``facets`` (and ``nested``). ``fixed`` names facets whose observed levels are the whole universe;
    components are still estimated under the random model (Brennan's recommendation), and fixedness is
    carried to D-studies. The object may not be nested in another facet, nor be fixed.
    """
    if not isinstance(design, BalancedDesign):
        if facets is None:
            raise AnalysisError("facets", "an array needs facet names", "pass facets=[object, ...]")
        design = design_from_array(design, facets, nested)
    obj = design.object
    if obj in design.nested:
        raise AnalysisError(obj, f"the object of measurement is nested in {list(design.nested[obj])}",
                            "analyse the outer facet as the object, or analyse each stratum separately")
    fixed = tuple(fixed)
    for f in fixed:
        if f not in design.facets:
            raise AnalysisError("fixed", f"{f!r} is not a facet of {list(design.facets)}", "name a facet")
        if f == obj:
            raise AnalysisError("fixed", f"the object {obj!r} cannot be fixed", "fix a different facet")
    if len(fixed) == len(design.facets) - 1:
        raise AnalysisError("fixed", "every facet is fixed: nothing is generalised over",
                            "leave at least one facet random")
    comps = variance_components(design, design.facets)
    return GStudy(obj, design.facets, design.sizes, dict(design.nested), fixed, comps,
                  float(design.scores.mean()), int(design.scores.size))


def mixed_model_components(g: GStudy) -> dict[str, float]:
    """Mixed-model components σ²(α|M) for effects without fixed facets (Brennan 2001, ch. 4).

    σ²(α|M) = Σ over effects β = α ∪ (fixed facets only) of σ²(β) / Π n(fixed facets in β \\ α), using the
    zero-set estimates. With no fixed facet this returns the random-model components unchanged. Squared
    score units. ``σ²(object|M)`` is the universe-score variance of the observed fixed-facet levels; it is
    not a generalizability coefficient.
    """
    fixed = set(g.fixed)
    out = {}
    for a in g.components:
        if a.facets & fixed:
            continue
        total = 0.0
        for b in g.components:
            extra = b.facets - a.facets
            if a.facets <= b.facets and extra <= fixed:
                total += b.estimate_used / float(np.prod([g.sizes[f] for f in extra]) if extra else 1)
        out[a.name] = total
    return out
