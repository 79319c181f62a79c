"""D-study: generalizability (Eρ², relative) and dependability (Φ, absolute) coefficients for any sizes.

From a :class:`~analysis.gtheory.GStudy` and D-study sample sizes n' per facet (Brennan 2001, ch. 4),
with components set to zero where their raw estimate was negative. For an effect α with divisor
d(α) = Π n' over the facets of α other than the object:

* α holds the object and every other facet of α is fixed → universe-score variance σ²(τ) += σ²(α)/d(α)
  (Brennan's fixed-facet approach: a fixed facet's interactions with the object are part of what is
  measured);
* α holds the object and a random facet → relative error σ²(δ) and absolute error σ²(Δ) += σ²(α)/d(α);
* α lacks the object and holds a random facet → absolute error only;
* α lacks the object and holds fixed facets only → neither (a constant over the fixed universe).

Eρ² = σ²(τ) / (σ²(τ) + σ²(δ)) and Φ = σ²(τ) / (σ²(τ) + σ²(Δ)). Sizes of nested facets are per ancestor
cell (raters per task). The D-study keeps the G-study's structure (no crossed → nested change). A fixed
facet's D-study size must equal its observed number of levels.

``object_variance=V`` replaces σ²(τ) by a hypothesised V (e.g. the spread of published per-model
scores); results are then marked ``hypothetical``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

import numpy as np

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.gtheory import GStudy

DEFAULT_TARGET = 0.80     # conventional reliability threshold for "dependable enough to rank objects"


@dataclass(frozen=True)
class DStudy:
    """Coefficients of one D-study design; every number names the sizes it was computed for."""

    sizes: Mapping[str, float]
    """D-study n' per facet other than the object (math.inf for an asymptote)."""
    universe_score_variance: float
    """σ²(τ), squared score units: observed (from components) or hypothesised (``hypothetical``)."""
    relative_error_variance: float
    """σ²(δ), squared score units: error for rank-ordering objects."""
    absolute_error_variance: float
    """σ²(Δ), squared score units: error for absolute decisions (adds facet main effects etc.)."""
    hypothetical: bool = False
    """True when σ²(τ) is a hypothesised object variance, not estimated from these data."""

    @property
    def g_coefficient(self) -> float:
        """Relative Eρ² (generalizability coefficient) in [0, 1]; not Φ. NaN when undefined (0/0)."""
        den = self.universe_score_variance + self.relative_error_variance
        return self.universe_score_variance / den if den > 0 else float("nan")

    @property
    def phi(self) -> float:
        """Absolute Φ (dependability coefficient) in [0, 1], ≤ Eρ²; not Eρ². NaN when undefined."""
        den = self.universe_score_variance + self.absolute_error_variance
        return self.universe_score_variance / den if den > 0 else float("nan")

    def to_json(self) -> dict:
        """Plain dict: sizes, both coefficients, the three variances and the hypothetical flag."""
        return {"sizes": {k: _size(v) for k, v in self.sizes.items()},
                "g_coefficient": _num(self.g_coefficient), "phi": _num(self.phi),
                "universe_score_variance": self.universe_score_variance,
                "relative_error_variance": self.relative_error_variance,
                "absolute_error_variance": self.absolute_error_variance,
                "hypothetical": self.hypothetical}


@dataclass(frozen=True)
class NeededSize:
    """Smallest D-study size of one facet reaching a target coefficient, others held fixed."""

    facet: str
    """The facet being grown."""
    coefficient: Literal["g_coefficient", "phi"]
    """Which coefficient must reach the target: relative Eρ² or absolute Φ."""
    target: float
    """The target value, e.g. 0.80."""
    n: int | None
    """Smallest n' reaching the target; None when unreachable."""
    asymptote: float
    """Limit of the coefficient as this facet grows without bound (others at ``holding``)."""
    holding: Mapping[str, float]
    """Sizes of the other facets while this one grows."""
    hypothetical: bool = False
    """True when computed under a hypothesised object variance."""

    @property
    def reachable(self) -> bool:
        """Whether any finite size reaches the target."""
        return self.n is not None

    def to_json(self) -> dict:
        """Plain dict; ``unreachable`` is spelled out with the asymptote when no size suffices."""
        return {"facet": self.facet, "coefficient": self.coefficient, "target": self.target,
                "n": self.n, "unreachable": self.n is None, "asymptote": _num(self.asymptote),
                "holding": dict(self.holding), "hypothetical": self.hypothetical}


def _size(v: float) -> int | float | str:
    """A size for JSON: int where whole, "inf" for an unbounded facet (JSON has no infinity)."""
    if math.isinf(v):
        return "inf"
    return int(v) if float(v).is_integer() else float(v)


def _num(x: float) -> float | None:
    return None if x != x else float(x)


def resolve_sizes(g: GStudy, sizes: Mapping[str, float] | None = None) -> dict[str, float]:
    """Full D-study sizes: the observed size for every facet not given; checks names and fixed facets."""
    out: dict[str, float] = {f: g.sizes[f] for f in g.facets if f != g.object}
    for f, v in (sizes or {}).items():
        if f == g.object:
            raise AnalysisError("d-study", f"{f!r} is the object of measurement; it has no D-study size",
                                "give sizes of the other facets only")
        if f not in out:
            raise AnalysisError("d-study", f"{f!r} is not a facet of {list(g.facets)}", "name a facet")
        if not (v >= 1):
            raise AnalysisError("d-study", f"{f}={v}: a D-study size must be at least 1", "use n' ≥ 1")
        if f in g.fixed and v != g.sizes[f]:
            raise AnalysisError("d-study", f"{f} is fixed with {g.sizes[f]} levels; cannot set {f}={v}",
                                f"drop {f} from the D-study sizes or do not fix it")
        out[f] = v if math.isinf(v) else int(v) if float(v).is_integer() else float(v)
    return out


def d_study(g: GStudy, sizes: Mapping[str, float] | None = None,
            object_variance: float | None = None) -> DStudy:
    """Universe-score, relative- and absolute-error variance and Eρ², Φ for D-study sizes ``sizes``.

    Facets not named keep their observed sizes, so ``d_study(g)`` is the observed design. Sizes may be
    ``math.inf`` (asymptote). With ``object_variance`` the universe-score variance is that hypothesised
    value (squared score units) and the result is marked hypothetical.
    """
    full = resolve_sizes(g, sizes)
    fixed = set(g.fixed)
    tau = rel = ab = 0.0
    for c in g.components:
        others = c.facets - {g.object}
        div = float(np.prod([full[f] for f in others])) if others else 1.0
        part = c.estimate_used / div if c.estimate_used else 0.0
        random_facets = others - fixed
        if g.object in c.facets:
            if random_facets:
                rel += part
                ab += part
            else:
                tau += part
        elif random_facets:
            ab += part
    hypothetical = object_variance is not None
    if object_variance is not None:
        if not (object_variance >= 0):
            raise AnalysisError("object-variance", f"{object_variance} is not a variance",
                                "give a number ≥ 0 (squared score units)")
        tau = float(object_variance)
    return DStudy(full, tau, rel, ab, hypothetical)


def generalizability_coefficient(g: GStudy, sizes: Mapping[str, float] | None = None,
                                 object_variance: float | None = None) -> float:
    """Relative Eρ² = σ²(τ)/(σ²(τ)+σ²(δ)) for the given D-study sizes (observed by default).

    Dimensionless in [0, 1]; for rank-ordering objects. It is not Φ (which also charges facet main
    effects) and not a share of variance in a single observation.
    """
    return d_study(g, sizes, object_variance).g_coefficient


def dependability_coefficient(g: GStudy, sizes: Mapping[str, float] | None = None,
                              object_variance: float | None = None) -> float:
    """Absolute Φ = σ²(τ)/(σ²(τ)+σ²(Δ)) for the given D-study sizes (observed by default).

    Dimensionless in [0, 1], never above Eρ²; for absolute decisions (is the score itself right). It is
    not the relative Eρ².
    """
    return d_study(g, sizes, object_variance).phi


def random_facets(g: GStudy) -> tuple[str, ...]:
    """Facets other than the object that are random (the ones a D-study may grow)."""
    return tuple(f for f in g.facets if f != g.object and f not in g.fixed)


def asymptote(g: GStudy, facet: str, base_sizes: Mapping[str, float] | None = None,
              object_variance: float | None = None) -> DStudy:
    """The D-study limit as ``facet`` grows without bound, the others held at ``base_sizes``.

    Its ``g_coefficient`` and ``phi`` are the ceilings no number of levels of that facet alone can pass.
    """
    if facet not in random_facets(g):
        raise AnalysisError("facet", f"{facet!r} is not a random facet {list(random_facets(g))}",
                            "grow a random facet")
    return d_study(g, {**(base_sizes or {}), facet: math.inf}, object_variance)


def smallest_n(g: GStudy, facet: str, target: float = DEFAULT_TARGET,
               coefficient: Literal["g_coefficient", "phi"] = "g_coefficient",
               base_sizes: Mapping[str, float] | None = None,
               object_variance: float | None = None) -> NeededSize:
    """Smallest n' of ``facet`` with the coefficient ≥ target, others at ``base_sizes`` (observed).

    Solved in closed form (error = A + B/n') and checked directly; ``n=None`` (unreachable) when the
    asymptote does not exceed the target. Counts levels of the facet (per ancestor cell if nested).
    """
    if not 0 < target < 1:
        raise AnalysisError("target", f"{target} is not in (0, 1)", "give a coefficient target such as 0.8")
    if coefficient not in ("g_coefficient", "phi"):
        raise AnalysisError("coefficient", f"{coefficient!r}", "use 'g_coefficient' or 'phi'")
    lim = asymptote(g, facet, base_sizes, object_variance)
    holding = {f: v for f, v in resolve_sizes(g, base_sizes).items() if f != facet}
    at = lambda n: getattr(d_study(g, {**holding, facet: n}, object_variance), coefficient)
    err = "relative_error_variance" if coefficient == "g_coefficient" else "absolute_error_variance"
    tau, A = lim.universe_score_variance, getattr(lim, err)
    B = getattr(d_study(g, {**holding, facet: 1}, object_variance), err) - A
    allowed = tau * (1 - target) / target - A
    hyp = object_variance is not None
    asym = getattr(lim, coefficient)
    if tau <= 0 or allowed < 0 or (allowed == 0 and B > 0):
        return NeededSize(facet, coefficient, target, None, asym, holding, hyp)
    n = 1 if B <= 0 else max(1, math.ceil(B / allowed))
    for _ in range(8):                             # guard the closed form against rounding
        if n > 1 and at(n - 1) >= target:
            n -= 1
        elif at(n) < target:
            n += 1
        else:
            break
    return NeededSize(facet, coefficient, target, n, asym, holding, hyp)


def d_study_curve(g: GStudy, facet: str, ns: Sequence[float], base_sizes: Mapping[str, float] | None = None,
                  object_variance: float | None = None) -> tuple[DStudy, ...]:
    """D-studies with ``facet`` at each size in ``ns`` and the other facets at ``base_sizes``.

    For plotting Eρ² and Φ against the number of wrappers or items.
    """
    return tuple(d_study(g, {**(base_sizes or {}), facet: n}, object_variance) for n in ns)
