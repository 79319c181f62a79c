"""Every instrument's headline numbers with intervals over its random facets, in one shape for analyze and report.

An instrument states each headline number as cell-level scores whose mean per object is the number
(:class:`HeadlineScores`): forced_choice's commit rate is the mean of 100 × [cell committed], flinch's axis
score the mean of the carriers' 0–100 scores, and so on, with the facets that vary (its prompt facet, its items)
and those that are fixed. :func:`headline_intervals` gives each its intervals and paired differences by
:func:`analysis.intervals.gstudy_intervals` (ANOVA on complete tables, REML where cells are missing);
:func:`format_intervals` prints them for the terminal and :func:`interval_rows` flattens them for charts and pages.
A headline whose table cannot carry an interval (a facet with one level, no rows) is reported as skipped, with why.

Before the G-study the scores are averaged within each cell of the object and the random facets: replicates
(samples) and fixed facets (forced_choice's orderings) are averaged over, as Brennan (2001, ch. 4) treats a fixed
facet. The interval is then the same as over the full table on a balanced design, the G-study stays three-way at
most for the instruments here (REML on a 10 × 36 × 400 table takes under a minute, bench/reml.py), and a cell is
missing only when every row of it failed. The estimate is the mean of those cell means: the printed number
itself when no cell lost a row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.intervals import DEFAULT_LEVEL, gstudy_intervals
from mirrorscan.analysis.long_design import long_design
from mirrorscan.grid.formatting import fixed as fixed_point


@dataclass(frozen=True)
class HeadlineScores:
    """One headline number as scores per cell: the mean of ``score`` over an object's rows is the number."""

    name: str
    """Key of the number in the instrument's summary, e.g. ``per_cell_commit_rate``."""
    title: str
    """How the terminal table names it, e.g. ``commit/cell``."""
    unit: str
    """Unit of the scores and intervals as printed after the value: ``%``, ``pp``, ``/100`` or ``""``."""
    columns: Mapping[str, Any] = field(repr=False)
    """Equal-length columns: ``object`` (the model label), each facet, and ``score``."""
    facets: tuple[str, ...]
    """Facet columns; every one is random unless in ``fixed``."""
    fixed: tuple[str, ...] = ()
    """Facets whose observed levels are the whole universe (not generalised over): averaged within each cell."""
    nested: Mapping[str, str] = field(default_factory=dict)
    """Facet → the facet it is nested in."""
    replicates: str = ""
    """What repeated rows of one cell are (e.g. ``samples``; averaged within the cell), for the description."""
    rows_per_score: float = 1.0
    """Stored rows (engine requests) behind one score, for a plan's cost: 2 for a score made of both orderings, the
    rows of a whole pair for a per-pair score."""
    plannable: bool = True
    """Whether a design's cost grows with its cells (models × levels), so ``headline_plans`` may cost one; False
    where the instrument's work does not (lens extracts an item once per model and a framing once per task)."""


def headline_intervals(headlines: Sequence[HeadlineScores], object: str = "model",
                       level: float = DEFAULT_LEVEL) -> dict:
    """Intervals and paired differences of every headline: plain JSON keyed by headline name."""
    out: dict[str, Any] = {"level": level, "method": "gstudy", "object": object, "headlines": {}}
    for h in headlines:
        head = {"title": h.title, "unit": h.unit, "replicates": h.replicates, "plannable": h.plannable,
                "rows_per_score": h.rows_per_score}
        cols = {k: np.asarray(v) for k, v in h.columns.items()}
        try:
            if "score" not in cols or len(cols["score"]) < 3:
                raise AnalysisError("score", f"{len(cols.get('score', ()))} scored cell(s)", "scan more cells")
            random = [f for f in h.facets if f not in h.fixed]
            table = _cell_means(cols, object, random)
            if np.ptp(table["score"]) == 0:
                raise AnalysisError("score", f"every scored cell is {value(float(table['score'][0]), h.unit)}: nothing varies",
                                    "nothing varies, so there is no spread to give an interval")
            nested = {c: p for c, p in h.nested.items() if c in random and p in random}
            design = long_design(table, "score", object, random, nested)
            report = gstudy_intervals(design, (), level)
        except AnalysisError as exc:
            out["headlines"][h.name] = {**head, "skipped": exc.problem if exc.field == "score" else
                                        f"{exc.field}: {exc.problem}"}
            continue
        out["headlines"][h.name] = {**head, **report.to_json(), "fixed": list(h.fixed),
                                    "facets": list(h.facets), "n_scores": int(len(cols["score"]))}
    return out


def _cell_means(cols: Mapping[str, np.ndarray], object: str, random: Sequence[str]) -> dict[str, np.ndarray]:
    """Scores averaged within each (object, random facets…) cell: replicates and fixed facets averaged over."""
    keys = [cols["object"].astype(str)] + [cols[f].astype(str) for f in random]
    cells, inv = np.unique(np.stack(keys, axis=1), axis=0, return_inverse=True)
    inv = inv.ravel()
    score = cols["score"].astype(np.float64)
    means = np.bincount(inv, weights=score, minlength=len(cells)) / np.bincount(inv, minlength=len(cells))
    return {object: cells[:, 0], "score": means, **{f: cells[:, k + 1] for k, f in enumerate(random)}}


def value(x: float | None, unit: str) -> str:
    """One estimate or bound in its headline's unit (``12.5%``, ``+3.1 pp``, ``0.712``); ``—`` when absent or NaN."""
    if x is None or x != x:
        return "—"
    if unit == "%":
        return f"{x:.1f}%"
    if unit == "pp":
        return f"{x:+.1f} pp"
    return fixed_point(x)


def span(interval, unit: str) -> str:
    """``[lo, hi]`` in the unit; both — when there is no interval."""
    lo, hi = interval if interval else (None, None)
    return f"[{value(lo, unit)}, {value(hi, unit)}]"




def format_intervals(result: Mapping[str, Any], width: int = 26) -> str:
    """The terminal block: per headline, each model's estimate, interval, naive interval and width ratio; then
    the paired differences with Holm p and verdicts; then the warnings, once each."""
    heads = result.get("headlines", {})
    if not heads:
        return ""
    level = f"{100 * result['level']:.0f} %"
    lines = [f"intervals ({level}) for a claim about the model on new prompts and items of the same kind; "
             f"naive = cells as independent:"]
    warnings: list[str] = []
    diffs: list[str] = []
    for name, h in heads.items():
        if "skipped" in h:
            lines.append(f"  {h['title']}: no interval ({h['skipped']})")
            continue
        random = ", ".join(h["random"])
        averaged = [*h["fixed"], *([h["replicates"]] if h.get("replicates") else [])]
        reps = f"; averaged within cells: {', '.join(averaged)}" if averaged else ""
        how = "REML, " + f"{h['missing_cells']} cell(s) missing" if h["components_method"] == "reml" else "ANOVA"
        lines.append(f"  {h['title']}  (random: {random}{reps}; {how})")
        for o in h["objects"]:
            ratio = "—" if o["width_ratio"] is None else f"{o['width_ratio']:.1f}"
            lines.append(f"    {o['object']:<{width}} {value(o['estimate'], h['unit']):>9}  "
                         f"{span(o['interval'], h['unit']):<24} naive {span(o['naive_interval'], h['unit']):<24} "
                         f"× {ratio}")
        for d in h["differences"]:
            diffs.append(f"    {h['title']}: {d['a']} − {d['b']} {value(d['estimate'], 'pp' if h['unit'] in ('%', 'pp') else '')} "
                         f"{span(d['interval'], 'pp' if h['unit'] in ('%', 'pp') else '')}  p {fixed_point(d['p_value'])}, "
                         f"Holm {fixed_point(d['p_holm'])}: {d['verdict']}")
        warnings += [w for w in h["warnings"] if w not in warnings]
    if diffs:
        lines.append("  paired differences (shared prompts and items cancel; p adjusted over the pairs by Holm):")
        lines += diffs
    lines += [f"  warning: {w}" for w in warnings]
    return "\n".join(lines)


def interval_rows(result: Mapping[str, Any]) -> list[dict]:
    """One flat row per (headline, model): name, title, unit, estimate, interval and naive bounds, df."""
    rows = []
    for name, h in result.get("headlines", {}).items():
        for o in h.get("objects", ()):
            rows.append({"headline": name, "title": h["title"], "unit": h["unit"], "object": o["object"],
                         "estimate": o["estimate"], "low": o["interval"][0], "high": o["interval"][1],
                         "naive_low": o["naive_interval"][0], "naive_high": o["naive_interval"][1], "df": o["df"]})
    return rows


PLAN_TARGET = 0.8
"""Eρ² the plan printed after the intervals aims at (the conventional reliability for ranking models)."""


def headline_plans(result: Mapping[str, Any], cost_per_row: Mapping[str, float] | None = None,
                   target: float = PLAN_TARGET) -> dict:
    """For every headline with an interval and at least two models: the cheapest design (levels per random
    facet) whose relative Eρ² reaches ``target`` under the headline's own G-study, beside the observed design,
    and the facet whose next level buys the most (:mod:`analysis.design_plan`). Cost of a cell = the model's
    cost per stored row (``cost_per_row``, e.g. engine seconds from the inference log) × rows per cell; without
    costs, rows. The box searched is four times the observed levels (at least ten more)."""
    from mirrorscan.analysis.design_plan import ErrorModel, _Evaluator, cheapest_design, next_step

    out: dict[str, Any] = {"target": target, "cost_unit": "engine seconds" if cost_per_row else "rows",
                           "headlines": {}}
    for name, h in result.get("headlines", {}).items():
        if "skipped" in h or len(h.get("objects", ())) < 2 or not h.get("components") or not h.get("plannable", True):
            continue
        comps = h["components"]
        model = ErrorModel.from_components(h["object"], [c["effect"] for c in comps],
                                           [frozenset(c["facets"]) for c in comps], [c["estimate"] for c in comps])
        if not model.random:
            continue
        per_cell = h.get("n_scores", h["n_rows"]) * h.get("rows_per_score", 1.0) / h["n_rows"]
        objects = [o["object"] for o in h["objects"]]
        if cost_per_row and all(o in cost_per_row for o in objects):
            unit = sum(cost_per_row[o] for o in objects) * per_cell
            cost_unit = out["cost_unit"]
        else:
            unit, cost_unit = len(objects) * per_cell, "rows"
        observed = {f: int(h["levels"][f]) for f in model.random}
        box = {f: max(4 * n, n + 10) for f, n in observed.items()}
        now = _Evaluator(model, unit, h["level"]).design(observed)
        entry: dict[str, Any] = {"cost_unit": cost_unit, "observed": now.to_json()}
        if not model.tau > 0:
            entry["unreachable"] = "the models' own variance is estimated at 0: no design tells them apart"
        else:
            best = cheapest_design(model, "g", target, box, unit)
            if best is None:
                entry["unreachable"] = f"no design within {', '.join(f'{f} ≤ {n}' for f, n in box.items())}"
            else:
                step = next_step(model, "g", best, unit)
                entry |= {"design": best.to_json(), "next_step": step,
                          "best_facet": max(step, key=lambda f: step[f]) if step else None}
        out["headlines"][name] = entry
    return out


def format_plans(plans: Mapping[str, Any], titles: Mapping[str, str]) -> str:
    """One line per headline: the cheapest design reaching the target, the observed one, where to add next."""
    heads = plans.get("headlines", {})
    if not heads:
        return ""
    lines = [f"plan (the cheapest design whose Eρ² reaches {plans['target']:.2f} under each number's own G-study; "
             f"cost = rows × cost per row):"]
    for name, p in heads.items():
        seen = p["observed"]
        now = ", ".join(f"{f} {n}" for f, n in seen["design"].items())
        g_now = "—" if seen["g_coefficient"] is None else f"{seen['g_coefficient']:.2f}"
        head = f"  {titles.get(name, name)}: now {now} (Eρ² {g_now}, cost {fixed_point(seen['cost'])} {p['cost_unit']})"
        if "unreachable" in p:
            lines.append(f"{head}; {PLAN_TARGET:.2f} not reachable: {p['unreachable']}")
            continue
        d = p["design"]
        lines.append(f"{head} → {', '.join(f'{f} {n}' for f, n in d['design'].items())} (Eρ² {d['g_coefficient']:.2f}, "
                     f"cost {fixed_point(d['cost'])}); the next level buys most as {p['best_facet']}")
    return "\n".join(lines)
