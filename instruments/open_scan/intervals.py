"""open_scan's self-report means as cell-level scores, for their intervals over probes.

``analyze`` prints per model the mean cold rating and the mean post-hoc rating (``numbers.model_summary``): each
the mean of the measured ratings of the model's triples. Each rating is therefore one score
(:class:`analysis.headline_intervals.HeadlineScores`), read from the same triples as the table:

* ``cold_mean`` — one cold rating per (model, probe version), the model rating the question before answering;
  facet ``probe`` (random). An imported file may hold one cold reply per sample: those samples are replicates.
* ``posthoc_mean`` — one post-hoc rating per answer, (model, probe version, sample); facet ``probe`` (random),
  samples as replicates.

open_scan has no prompt facet to generalise over: one template set (system, user, cold and post-hoc texts)
wraps every probe for every model of a series. The interval is for a claim about the model on new probes of
the same kind under these templates, and two models' paired difference cancels what the probes share.

A rating that was not measured (no integer inside the template's scale, an error row, a failed answer that
got no post-hoc) is no score. Where another model rated that probe, the model's (model, probe) cell is missing:
the components come from REML and the count of missing cells is printed. A probe no model rated is no level of
the design. The estimate is then the mean the fitted model implies over every probe some model rated (observed
cells at their mean, missing cells at their fitted value), which is not the table's mean over the measured
ratings. The two are equal exactly when every model has every such probe with the same number of measured
ratings; each object's JSON carries the table's mean beside the estimate (``table_mean``), and the text says
which estimates differ from it.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any, Mapping, Sequence

from mirrorscan.analysis.headline_intervals import HeadlineScores, format_intervals, headline_intervals
from mirrorscan.grid.formatting import fixed

PROBE = "probe"
"""The facet: one probe version (query_id and query_hash), as a cell's ``item_key`` names it."""


def headline_scores(groups: Mapping[str, Sequence[dict]]) -> list[HeadlineScores]:
    """The cold and post-hoc score tables of each object's triples (``numbers.triples``, current versions only;
    object → its triples, the object being the model label or the matrix row's name)."""
    cold: dict[str, list] = {"object": [], PROBE: [], "score": []}
    posthoc: dict[str, list] = {"object": [], PROBE: [], "score": []}
    cold_reps, posthoc_reps = False, False
    for name, items in groups.items():
        seen: dict[tuple, Any] = {}
        for t in items:   # one cold rating per (probe version, cold sample), as model_summary counts them
            seen[(t["query_id"], t["query_hash"], t.get("cold_sample", 0))] = t["cold_rating"]
        per_probe: dict[str, int] = defaultdict(int)
        for (query_id, query_hash, _), rating in seen.items():
            if rating is not None:
                _append(cold, name, f"{query_id}@{query_hash}", rating)
                per_probe[f"{query_id}@{query_hash}"] += 1
        cold_reps = cold_reps or any(n > 1 for n in per_probe.values())
        per_probe = defaultdict(int)
        for t in items:
            if t["posthoc_rating"] is not None:
                _append(posthoc, name, f"{t['query_id']}@{t['query_hash']}", t["posthoc_rating"])
                per_probe[f"{t['query_id']}@{t['query_hash']}"] += 1
        posthoc_reps = posthoc_reps or any(n > 1 for n in per_probe.values())
    return [HeadlineScores("cold_mean", "cold", "", cold, (PROBE,), replicates="samples" if cold_reps else ""),
            HeadlineScores("posthoc_mean", "posthoc", "", posthoc, (PROBE,),
                           replicates="samples" if posthoc_reps else "")]


def _append(table: dict, name: str, probe: str, rating) -> None:
    table["object"].append(name)
    table[PROBE].append(probe)
    table["score"].append(float(rating))


def by_object(items: Sequence[dict], key: str = "run_label") -> dict[str, list[dict]]:
    """Triples grouped by ``key`` (the model label), in first-seen order."""
    out: dict[str, list[dict]] = {}
    for t in items:
        out.setdefault(t[key], []).append(t)
    return out


def rating_intervals(groups: Mapping[str, Sequence[dict]]) -> dict:
    """The cold and post-hoc means' intervals and paired differences (``analysis.headline_intervals`` JSON),
    each object's entry with ``table_mean``: the mean of its measured ratings, as the table prints it."""
    headlines = headline_scores(groups)
    result = headline_intervals(headlines)
    for h in headlines:
        means = _table_means(h)
        entry = result["headlines"][h.name]
        for o in entry.get("objects", ()):
            o["table_mean"] = means.get(o["object"])
        entry["unrated"] = [name for name in groups if name not in means]
    return result


def _table_means(h: HeadlineScores) -> dict[str, float]:
    scores: dict[str, list[float]] = defaultdict(list)
    for name, score in zip(h.columns["object"], h.columns["score"]):
        scores[name].append(score)
    return {name: statistics.fmean(v) for name, v in scores.items()}


def differs(estimate: float, mean: float | None) -> bool:
    """Whether an interval's estimate is not the table's mean (beyond float rounding)."""
    return mean is not None and not math.isclose(estimate, mean, rel_tol=1e-9, abs_tol=1e-9)


def intervals_text(result: Mapping[str, Any], width: int | None = None) -> str:
    """The terminal block (``format_intervals``; ``width`` of the name column, default the longest name, at
    least 20), then a note per headline where a model has no measured rating (no interval) and where an estimate
    is not the table's mean (missing or unevenly rated cells)."""
    names = [o["object"] for h in result.get("headlines", {}).values() for o in h.get("objects", ())]
    lines = [format_intervals(result, width or max([len(n) for n in names] + [20]))]
    for h in result.get("headlines", {}).values():
        if h.get("unrated") and "objects" in h:
            lines.append(f"  note: {h['title']}: no measured rating for {', '.join(h['unrated'])}, so no interval")
        other = [f"{o['object']} {fixed(o['estimate'])} (table {fixed(o['table_mean'])})"
                 for o in h.get("objects", ()) if differs(o["estimate"], o.get("table_mean"))]
        if other:
            lines.append(f"  note: {h['title']}: estimate ≠ table mean for {', '.join(other)}: the estimate is the "
                         f"mean over every probe some model rated, each probe's ratings averaged first and a missing "
                         f"cell at its REML fitted value; the table averages the measured ratings")
    return "\n".join(line for line in lines if line)
