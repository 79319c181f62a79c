"""The G-study/D-study report: one object that holds every number `analyze gstudy` prints, and its JSON.

Kept apart from :mod:`analysis.gtheory` (estimation) and :mod:`analysis.dstudy` (coefficients) so each
module does one thing; this one only assembles and serialises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from mirrorscan.analysis.dstudy import (DEFAULT_TARGET, DStudy, NeededSize, asymptote, d_study, d_study_curve,
                             random_facets, smallest_n)
from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.gtheory import GStudy, mixed_model_components

# Sizes at which D-study curves (Eρ² and Φ against one facet) are tabulated, besides the observed size.
DEFAULT_CURVE_SIZES = (1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000)

ESTIMATION = ("ANOVA expected mean squares, random-effects model, balanced design (Brennan 2001 ch. 3); "
              "negative estimates reported raw and set to zero for shares and coefficients")


@dataclass(frozen=True)
class DecisionSet:
    """Coefficients of one universe-score assumption (observed, or a hypothesised object variance)."""

    observed: DStudy
    """The design as observed (every random facet at its observed number of levels)."""
    d_studies: tuple[DStudy, ...]
    """Extra designs the user asked for (``--d-study``)."""
    asymptotes: Mapping[str, DStudy]
    """Random facet → limit as that facet alone grows, the others at observed sizes."""
    needed: Mapping[str, tuple[NeededSize, NeededSize]]
    """Random facet → (smallest n' for Eρ² ≥ target, smallest n' for Φ ≥ target)."""
    curves: Mapping[str, tuple[DStudy, ...]]
    """Random facet → D-studies along DEFAULT_CURVE_SIZES ∪ observed, the others at observed sizes."""

    def to_json(self) -> dict:
        """Plain dict of all coefficients, each with the sizes behind it."""
        return {
            "observed": self.observed.to_json(),
            "d_study": [d.to_json() for d in self.d_studies],
            "asymptotes": {f: {"g_coefficient": _num(a.g_coefficient), "phi": _num(a.phi),
                               "sizes": a.to_json()["sizes"]} for f, a in self.asymptotes.items()},
            "needed": {f: {"g_coefficient": g.to_json(), "phi": p.to_json()}
                       for f, (g, p) in self.needed.items()},
            "curves": {f: [{"n": d.to_json()["sizes"][f], "g_coefficient": _num(d.g_coefficient),
                            "phi": _num(d.phi)} for d in c] for f, c in self.curves.items()},
        }


@dataclass(frozen=True)
class GTheoryReport:
    """A G-study with its D-studies, asymptotes, sizes needed, curves and an optional hypothetical set."""

    g: GStudy
    """The estimated variance components."""
    target: float
    """Coefficient target for the sizes needed (default 0.80)."""
    estimated: DecisionSet
    """Coefficients with the universe-score variance estimated from the data."""
    hypothetical: DecisionSet | None
    """The same under ``object_variance`` (hypothesised σ² of the object), or None."""
    object_variance: float | None
    """The hypothesised object variance, squared score units, or None."""

    def to_json(self) -> dict:
        """JSON for `analyze gstudy`: components keyed by effect, g_coefficient/phi, D-studies, needs."""
        g = self.g
        comps = {c.name: {"estimate": c.estimate, "estimate_used": c.estimate_used,
                          "negative": c.negative, "df": c.df, "sum_of_squares": c.sum_of_squares,
                          "mean_square": c.mean_square, "share": _num(g.share(c.name)),
                          "effect": c.label, "nested_in": list(c.nesting)}
                 for c in g.components}
        est = self.estimated
        out = {
            "design": {"object": g.object, "n_observations": g.n_observations,
                       "grand_mean": g.grand_mean,
                       "facets": {f: {"n": g.sizes[f], "role": "object" if f == g.object else
                                      "fixed" if f in g.fixed else "random",
                                      "nested_in": list(g.nested.get(f, ()))} for f in g.facets}},
            "estimation": ESTIMATION,
            "components": comps,
            "negative_components": list(g.negative_components),
            "total_variance": g.total_variance,
            "g_coefficient": _num(est.observed.g_coefficient),
            "phi": _num(est.observed.phi),
            "sizes": est.observed.to_json()["sizes"],
            "target": self.target,
            "reaches_target": {"g_coefficient": _ge(est.observed.g_coefficient, self.target),
                               "phi": _ge(est.observed.phi, self.target)},
            **est.to_json(),
            "hypothetical": None,
        }
        if g.fixed:
            out["mixed_model_components"] = mixed_model_components(g)
        if self.hypothetical is not None:
            out["hypothetical"] = {"object_variance": self.object_variance,
                                   "note": "universe-score variance replaced by a hypothesised value",
                                   **self.hypothetical.to_json()}
        return out


def _num(x: float) -> float | None:
    return None if x != x else float(x)


def _ge(x: float, t: float) -> bool | None:
    return None if x != x else bool(x >= t)


def _decisions(g: GStudy, d_studies: Sequence[Mapping[str, float]], target: float,
               object_variance: float | None, curve_sizes: Sequence[int]) -> DecisionSet:
    facets = random_facets(g)
    return DecisionSet(
        observed=d_study(g, None, object_variance),
        d_studies=tuple(d_study(g, s, object_variance) for s in d_studies),
        asymptotes={f: asymptote(g, f, None, object_variance) for f in facets},
        needed={f: (smallest_n(g, f, target, "g_coefficient", None, object_variance),
                    smallest_n(g, f, target, "phi", None, object_variance)) for f in facets},
        curves={f: d_study_curve(g, f, sorted({*curve_sizes, g.sizes[f]}), None, object_variance)
                for f in facets},
    )


def gtheory_report(g: GStudy, d_studies: Sequence[Mapping[str, float]] = (), target: float = DEFAULT_TARGET,
                   object_variance: float | None = None,
                   curve_sizes: Sequence[int] = DEFAULT_CURVE_SIZES) -> GTheoryReport:
    """Assemble every G/D-study number for one design; nothing is estimated beyond ``g``.

    ``d_studies`` are extra size sets (facet → n'); ``object_variance`` adds a hypothetical set of the
    same coefficients with σ²(τ) replaced (marked hypothetical, never mixed with the estimated set).
    """
    est = _decisions(g, d_studies, target, None, curve_sizes)
    hyp = None if object_variance is None else _decisions(g, d_studies, target, object_variance, curve_sizes)
    return GTheoryReport(g, target, est, hyp, object_variance)


def parse_sizes(text: str) -> dict[str, int]:
    """``"wrapper=1,item=400"`` → ``{"wrapper": 1, "item": 400}`` (the ``--d-study`` syntax)."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, eq, value = part.partition("=")
        try:
            n = int(value)
        except ValueError:
            n = 0
        if not eq or not name.strip() or n < 1:
            raise AnalysisError("d-study", f"{part!r} is not FACET=N with N ≥ 1",
                                "write sizes like wrapper=1,item=400")
        out[name.strip()] = n
    if not out:
        raise AnalysisError("d-study", "no sizes given", "write sizes like wrapper=1,item=400")
    return out


__all__ = ["DEFAULT_CURVE_SIZES", "DecisionSet", "GTheoryReport", "gtheory_report", "parse_sizes"]
