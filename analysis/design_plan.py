"""The cheapest design that reaches a target: levels per random facet under a cost, exactly.

From a G-study's components (:mod:`analysis.gtheory` or :mod:`analysis.reml`), a D-study design n' (levels per
facet) has error variances that are sums of σ²_α / Π_{f ∈ α, f ≠ object} n'_f (:mod:`analysis.dstudy`), and
costs ``cost_per_object_cell`` × Π_f n'_f, where the cost per object-cell is the sum over the objects of each
one's cost per cell (engine seconds, tokens or money: the plan is in whatever unit the costs are). A target is
one of

* ``g`` — relative Eρ² ≥ t, i.e. σ²(δ) ≤ σ²(τ)(1 − t)/t;
* ``phi`` — absolute Φ ≥ t, i.e. σ²(Δ) ≤ σ²(τ)(1 − t)/t;
* ``halfwidth`` — the half-width of a paired difference between two objects, z √(2σ²(δ)) ≤ t (normal quantile
  at the level: a plan, before any data of the new design exist to give Satterthwaite's df).

Every one is an upper bound E on an error variance, and the error decreases in each n'_f. With the facets but
the last fixed, the error is a + b/n'_last, so the smallest n'_last that meets E is ⌈b/(E − a)⌉: the search
walks every combination of the other facets inside the box (1 … max per facet) and takes the exact minimum of
the cost (ties to the smaller error). With a budget instead, it takes the largest n'_last the budget allows
and the least error. The frontier is every design of the box no cheaper design beats, by enumeration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

import numpy as np

from mirrorscan.analysis.errors import AnalysisError

Coefficient = Literal["g", "phi", "halfwidth"]
MAX_BOX = 20_000_000           # designs the frontier may enumerate


@dataclass(frozen=True)
class ErrorModel:
    """What a plan needs of a G-study: components by facet set, the object, and which facets are fixed."""

    object: str
    """The object of measurement (e.g. model)."""
    terms: tuple[tuple[frozenset[str], float], ...]
    """(facets of the effect other than the object, σ² ≥ 0) per effect, the object's own main effect excluded."""
    with_object: tuple[bool, ...]
    """Per term: does the effect hold the object (it then enters the relative error)?"""
    tau: float
    """Universe-score variance σ²(τ) (object main effect plus its interactions with fixed facets only)."""
    fixed_sizes: Mapping[str, int]
    """Fixed facets and their (unchangeable) numbers of levels."""

    @classmethod
    def from_components(cls, object: str, names: Sequence[str], facets: Sequence[frozenset[str]],
                        estimates: Sequence[float], fixed_sizes: Mapping[str, int] | None = None) -> "ErrorModel":
        """From component names, facet sets and estimates (negatives count as 0)."""
        fixed_sizes = dict(fixed_sizes or {})
        terms, with_obj, tau = [], [], 0.0
        for name, fs, est in zip(names, facets, estimates):
            est = max(float(est), 0.0)
            others = frozenset(fs) - {object}
            if object in fs and not (others - set(fixed_sizes)):
                div = math.prod(fixed_sizes[f] for f in others) if others else 1
                tau += est / div
                continue
            if not (others - set(fixed_sizes)):
                continue                                      # fixed-only effect without the object: a constant
            terms.append((others, est))
            with_obj.append(object in fs)
        return cls(object, tuple(terms), tuple(with_obj), tau, fixed_sizes)

    @property
    def random(self) -> tuple[str, ...]:
        """The facets a plan chooses levels for, sorted."""
        return tuple(sorted({f for fs, _ in self.terms for f in fs} - set(self.fixed_sizes)))

    def errors(self, sizes: Mapping[str, np.ndarray | float]) -> tuple[np.ndarray, np.ndarray]:
        """(σ²(δ), σ²(Δ)) for sizes per random facet (arrays broadcast), squared score units."""
        rel: np.ndarray | float = 0.0
        ab: np.ndarray | float = 0.0
        for (fs, var), obj in zip(self.terms, self.with_object):
            div: np.ndarray | float = 1.0
            for f in fs:
                div = div * (self.fixed_sizes[f] if f in self.fixed_sizes else sizes[f])
            part = var / div
            ab = ab + part
            if obj:
                rel = rel + part
        return np.asarray(rel, dtype=np.float64), np.asarray(ab, dtype=np.float64)


@dataclass(frozen=True)
class Design:
    """One D-study design with its cost and the value of the targeted quantity."""

    sizes: Mapping[str, int]
    """Levels per random facet."""
    cost: float
    """Cost of the whole design (all objects), in the unit of the costs given."""
    g: float
    """Relative Eρ²."""
    phi: float
    """Absolute Φ."""
    halfwidth: float
    """Half-width of a paired difference (normal quantile at the plan's level), score units."""

    def to_json(self) -> dict:
        """Plain dict: design, cost, Eρ², Φ and the paired half-width."""
        return {"design": dict(self.sizes), "cost": self.cost, "g_coefficient": _num(self.g), "phi": _num(self.phi),
                "halfwidth": _num(self.halfwidth)}


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class Plan:
    """The cheapest design reaching a target (or the best within a budget), the frontier, and the next step."""

    coefficient: Coefficient
    """What the target is on: g, phi or halfwidth."""
    target: float | None
    """The target value (None when planning for a budget)."""
    budget: float | None
    """The budget (None when planning for a target)."""
    design: Design | None
    """The chosen design; None when nothing in the box reaches the target or fits the budget."""
    frontier: tuple[Design, ...]
    """Designs no cheaper design beats on the coefficient, by cost."""
    next_step: Mapping[str, float]
    """Per random facet: gain in the coefficient (for halfwidth: reduction) per unit of cost of one more level."""
    box: Mapping[str, int]
    """The largest number of levels searched per random facet."""

    def to_json(self) -> dict:
        """The JSON of ``mirrorscan stats plan``."""
        d = self.design
        best = max(self.next_step, key=lambda f: self.next_step[f]) if self.next_step else None
        return {"coefficient": self.coefficient, "target": self.target, "budget": self.budget,
                "design": dict(d.sizes) if d else None, "cost": d.cost if d else None,
                "value": _num(_value(d, self.coefficient)) if d else None,
                "chosen": d.to_json() if d else None, "box": dict(self.box),
                "next_step": {"per_unit_cost": dict(self.next_step), "best_facet": best},
                "frontier": [f.to_json() | {"coefficient": _num(_value(f, self.coefficient))}
                             for f in self.frontier]}


def _value(d: Design, coefficient: Coefficient) -> float:
    return {"g": d.g, "phi": d.phi, "halfwidth": d.halfwidth}[coefficient]


def _z(level: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + level / 2))


class _Evaluator:
    def __init__(self, model: ErrorModel, cost_per_object_cell: float, level: float):
        self.model, self.unit, self.z = model, cost_per_object_cell, _z(level)
        self.fixed_cells = math.prod(model.fixed_sizes.values()) if model.fixed_sizes else 1

    def design(self, sizes: Mapping[str, int]) -> Design:
        rel, ab = self.model.errors(sizes)
        tau = self.model.tau
        g = tau / (tau + rel) if tau + rel > 0 else float("nan")
        phi = tau / (tau + ab) if tau + ab > 0 else float("nan")
        cost = self.unit * self.fixed_cells * math.prod(sizes.values())
        return Design(dict(sizes), float(cost), float(g), float(phi), float(self.z * math.sqrt(2 * rel)))

    def bound(self, coefficient: Coefficient, target: float) -> float:
        """The largest error variance (relative or absolute, by coefficient) that meets the target."""
        if coefficient == "halfwidth":
            if not target > 0:
                raise AnalysisError("--target", f"half-width {target}", "give a positive half-width (score units)")
            return (target / self.z) ** 2 / 2
        if not 0 < target < 1:
            raise AnalysisError("--target", f"{target} is not a coefficient", "give a target between 0 and 1, e.g. 0.8")
        return self.model.tau * (1 - target) / target


def _split(model: ErrorModel, absolute: bool, last: str, sizes: Mapping[str, np.ndarray]):
    """Error = a + b / n_last over the grid of the other facets' sizes: returns (a, b) arrays."""
    a: np.ndarray | float = 0.0
    b: np.ndarray | float = 0.0
    for (fs, var), obj in zip(model.terms, model.with_object):
        if not (absolute or obj):
            continue
        div: np.ndarray | float = 1.0
        for f in fs:
            if f != last:
                div = div * (model.fixed_sizes[f] if f in model.fixed_sizes else sizes[f])
        if last in fs:
            b = b + var / div
        else:
            a = a + var / div
    return np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)


def cheapest_design(model: ErrorModel, coefficient: Coefficient, target: float | None, box: Mapping[str, int],
                    cost_per_object_cell: float, budget: float | None = None, level: float = 0.95) -> Design | None:
    """The exact minimum-cost design in the box meeting the target, or the least-error design within the budget.

    ``box`` gives the largest number of levels per random facet (each searched from 1). Returns None when no
    design in the box meets the target (or fits the budget). Ties go to the smaller error, then to the
    design earliest in facet order.
    """
    ev = _Evaluator(model, cost_per_object_cell, level)
    facets = list(model.random)
    if not facets:
        raise AnalysisError("--facets", "no random facet to plan", "leave at least one facet random")
    last = max(facets, key=lambda f: box[f])
    others = [f for f in facets if f != last]
    grids = np.meshgrid(*[np.arange(1, box[f] + 1) for f in others], indexing="ij") if others else []
    sizes = {f: g.ravel().astype(np.float64) for f, g in zip(others, grids)}
    count = grids[0].size if others else 1
    prefix_cells = np.ones(count)
    for f in others:
        prefix_cells = prefix_cells * sizes[f]
    unit = cost_per_object_cell * ev.fixed_cells
    a, b = _split(model, coefficient == "phi", last, sizes)
    a, b = np.broadcast_to(a, (count,)), np.broadcast_to(b, (count,))
    if budget is None:
        if target is None:
            raise AnalysisError("--target", "give a target or a budget", "pass --target T, or --budget B (not both)")
        bound = ev.bound(coefficient, target)
        with np.errstate(divide="ignore", invalid="ignore"):
            need = np.where(b > 0, np.ceil(b / (bound - a) - 1e-12), 1.0)
        ok = (a < bound) | ((a <= bound) & (b == 0))
        need = np.where(ok, np.maximum(need, 1.0), np.inf)
        need[need > box[last]] = np.inf
        cost = unit * prefix_cells * need
        err = a + np.where(np.isfinite(need), b / np.where(np.isfinite(need), need, 1.0), np.inf)
        if not np.isfinite(cost).any():
            return None
        order = np.lexsort((err, cost))
        k = int(order[0])
        n_last = int(need[k])
    else:
        if not budget > 0:
            raise AnalysisError("--budget", f"{budget}", "give a positive budget in the unit of the costs")
        n_last = np.minimum(np.floor(budget / (unit * prefix_cells) + 1e-12), box[last])
        err = np.where(n_last >= 1, a + b / np.maximum(n_last, 1), np.inf)
        cost = np.where(n_last >= 1, unit * prefix_cells * n_last, np.inf)
        if not np.isfinite(err).any():
            return None
        order = np.lexsort((cost, err))
        k = int(order[0])
        n_last = int(n_last[k])
    chosen = {f: int(sizes[f][k]) for f in others}
    chosen[last] = n_last
    return ev.design({f: chosen[f] for f in facets})


def frontier(model: ErrorModel, coefficient: Coefficient, box: Mapping[str, int], cost_per_object_cell: float,
             level: float = 0.95) -> tuple[Design, ...]:
    """Every design of the box that no cheaper (or equally cheap) design beats on the coefficient, by cost."""
    ev = _Evaluator(model, cost_per_object_cell, level)
    facets = list(model.random)
    n = math.prod(box[f] for f in facets)
    if n > MAX_BOX:
        raise AnalysisError("--max", f"the box holds {n:,} designs", f"give smaller --max values (≤ {MAX_BOX:,})")
    grids = np.meshgrid(*[np.arange(1, box[f] + 1) for f in facets], indexing="ij")
    sizes = {f: g.ravel().astype(np.float64) for f, g in zip(facets, grids)}
    rel, ab = model.errors(sizes)
    rel, ab = np.broadcast_to(rel, (n,)), np.broadcast_to(ab, (n,))
    err = ab if coefficient == "phi" else rel
    cost = cost_per_object_cell * ev.fixed_cells * np.prod(np.stack([sizes[f] for f in facets]), axis=0)
    order = np.lexsort((err, cost))
    keep: list[int] = []
    best = np.inf
    for k in order:
        if not keep or err[k] < best - 1e-15 * max(1.0, abs(best)):
            best = err[k]
            keep.append(int(k))
    return tuple(ev.design({f: int(sizes[f][k]) for f in facets}) for k in keep)


def next_step(model: ErrorModel, coefficient: Coefficient, design: Design, cost_per_object_cell: float,
              level: float = 0.95) -> dict[str, float]:
    """Per random facet: change in the coefficient (for halfwidth: its reduction) per unit of cost of adding one
    level to ``design``. The largest says where the next unit of cost does most good."""
    ev = _Evaluator(model, cost_per_object_cell, level)
    out = {}
    for f in model.random:
        bigger = ev.design({**design.sizes, f: design.sizes[f] + 1})
        gain = _value(bigger, coefficient) - _value(design, coefficient)
        if coefficient == "halfwidth":
            gain = -gain
        out[f] = gain / (bigger.cost - design.cost) if bigger.cost > design.cost else float("nan")
    return out


def plan(model: ErrorModel, coefficient: Coefficient, target: float | None, box: Mapping[str, int],
         cost_per_object_cell: float, budget: float | None = None, level: float = 0.95,
         frontier_limit: int = MAX_BOX) -> Plan:
    """The cheapest design (or the best for a budget), the frontier of the box and the next step's value."""
    if (target is None) == (budget is None):
        raise AnalysisError("--target", "give a target or a budget", "pass --target T, or --budget B (not both)")
    if not cost_per_object_cell > 0:
        raise AnalysisError("--cost-per-cell", f"{cost_per_object_cell}", "give a positive cost per cell")
    for f in model.random:
        if box.get(f, 0) < 1:
            raise AnalysisError("--max", f"no maximum for {f}", f"give --max {f}=K")
    chosen = cheapest_design(model, coefficient, target, box, cost_per_object_cell, budget, level)
    n = math.prod(box[f] for f in model.random)
    front = frontier(model, coefficient, box, cost_per_object_cell, level) if n <= frontier_limit else ()
    step = next_step(model, coefficient, chosen, cost_per_object_cell, level) if chosen else {}
    return Plan(coefficient, target, budget, chosen, front, step, dict(box))
