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


def headline_intervals(headlines: Sequence[HeadlineScores], object: str = "model",
                       level: float = DEFAULT_LEVEL) -> dict:
    """Intervals and paired differences of every headline: plain JSON keyed by headline name."""
    out: dict[str, Any] = {"level": level, "method": "gstudy", "object": object, "headlines": {}}
    for h in headlines:
        head = {"title": h.title, "unit": h.unit, "replicates": h.replicates}
        cols = {k: np.asarray(v) for k, v in h.columns.items()}
        try:
            if "score" not in cols or len(cols["score"]) < 3:
                raise AnalysisError("score", f"{len(cols.get('score', ()))} scored cell(s)", "scan more cells")
            random = [f for f in h.facets if f not in h.fixed]
            table = _cell_means(cols, object, random)
            if np.ptp(table["score"]) == 0:
                raise AnalysisError("score", f"every scored cell is {_value(float(table['score'][0]), h.unit)}: nothing varies",
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


def _value(x: float | None, unit: str) -> str:
    if x is None:
        return "—"
    if unit == "%":
        return f"{x:.1f}%"
    if unit == "pp":
        return f"{x:+.1f} pp"
    return fixed_point(x)


def _span(iv, unit: str) -> str:
    return f"[{_value(iv[0], unit)}, {_value(iv[1], unit)}]"


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
            lines.append(f"    {o['object']:<{width}} {_value(o['estimate'], h['unit']):>9}  "
                         f"{_span(o['interval'], h['unit']):<24} naive {_span(o['naive_interval'], h['unit']):<24} "
                         f"× {ratio}")
        for d in h["differences"]:
            diffs.append(f"    {h['title']}: {d['a']} − {d['b']} {_value(d['estimate'], 'pp' if h['unit'] in ('%', 'pp') else '')} "
                         f"{_span(d['interval'], 'pp' if h['unit'] in ('%', 'pp') else '')}  p {fixed_point(d['p_value'])}, "
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
