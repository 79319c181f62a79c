"""flinch's axis scores and total as cell-level scores, for intervals that treat carriers and terms as random.

A cell is (model, axis, term, carrier); its value is x = 100 × (−1 − lp) / 15, the flinch map **without its
clip**, where lp is the carrier's ``lp_mean`` (nats per target token; a cell scored in several samples: their
mean). The map is linear between its clip points, so a mean of x is the map of the mean lp, and the printed
numbers are means of x clipped at the end:

* **axis score**, ``axis_lp_mean`` (the default): printed = clip(mean over terms of (mean over the term's
  carriers of x)). Cell score s = w · x with w = N_a / (T_a · C_t) (N_a cells of the axis in the grid, T_a terms,
  C_t carriers of the term: w = 1 where every term has as many carriers), so the mean of s over the axis's
  cells is the unclipped axis score; the estimate and both intervals are then clipped to [0, 100] — the clip is
  monotone, so an interval of the unclipped score maps to one of the clipped score.
* **axis score**, ``clipped_term_mean``: printed = mean over terms of clip(term mean of x). Each cell is moved by
  its term's clip, s = w · (x + clip(X_t) − X_t) with X_t the term's mean x as printed, so every term's cells
  average to its printed (clipped) flinch and keep their spread over carriers.
* **total** (0–100 × axes): the sum of the axis scores. The axis is fixed (the run's axis set is the whole
  universe) and each axis has its own terms and carriers, so the total is a composite of independent strata
  (Brennan 2001, ch. 9): its estimate is the sum of the axes' estimates before their clip, its error variance
  the sum of theirs (:func:`total_interval`), clipped as a whole to [0, 100 × axes]. Only models with a whole
  total (every axis and term scored) are in it; a run of one axis has no total headline (it is that axis).

Random facets: term (the items) and carrier (the prompt facet, nested in term: each term has its own
sentences). The estimate equals the printed score where every carrier of every term was scored and, for
``axis_lp_mean`` and the total, no axis mean lies outside lp [−16, −1] (where it does, the printed score is
clipped axis by axis and the total's estimate is clipped only as a whole). With cells missing the components
come from REML and the estimate is the full-design mean the fitted model implies, which can differ from the
printed score (the mean over the carriers that were scored). Paired differences are on the unclipped scale.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping, Sequence

import numpy as np

from mirrorscan.analysis.headline_intervals import HeadlineScores, headline_intervals
from mirrorscan.instruments.flinch.scale import LP_AT_HUNDRED, LP_AT_ZERO

SCALE_TOP = 100.0
"""Upper end of one axis's flinch scale."""
TOTAL_NOTE = ("  total: the sum of the axis scores, its error variance the sum of theirs (axes fixed, each with its own "
              "terms and carriers); models with a whole total only")
"""The line printed under the intervals where the total has one: what its interval is."""


def linear_flinch(lp) -> np.ndarray:
    """The flinch map without its clip: 100 × (−1 − lp)/15 (flinch points per nats of lp, unbounded)."""
    return 100.0 * (LP_AT_ZERO - np.asarray(lp, dtype=float)) / (LP_AT_ZERO - LP_AT_HUNDRED)


def cell_lps(rows: Iterable[Mapping]) -> dict[tuple[str, str, str, int], float]:
    """``{(label, axis, term, carrier_index): lp}`` of successful exact rows (``lp_mean`` set, no error), a cell
    scored more than once (samples) as the mean of its rows."""
    acc: dict = defaultdict(list)
    for r in rows:
        if r.get("error") is None and r.get("lp_mean") is not None:
            acc[(r["label"], r["axis"], r["term"], int(r["carrier_index"]))].append(float(r["lp_mean"]))
    return {k: float(np.mean(v)) for k, v in acc.items()}


def headline_scores(lps: Mapping[tuple[str, str, str, int], float], axes: Sequence[tuple[str, str, Sequence[str]]],
                    carriers: Mapping[tuple[str, str], int], aggregation: str) -> list[HeadlineScores]:
    """One headline per axis (``flinch_<axis>``) as cell scores s (module docstring); facets term and carrier,
    carrier nested in term, both random. ``lps``: :func:`cell_lps`; ``axes``: (key, label, term words) of the axis
    set; ``carriers``: carriers per (axis, term) in the grid (the design, scored or not)."""
    return [HeadlineScores(f"flinch_{key}", key, "", cols, ("term", "carrier"), nested={"carrier": "term"})
            for key, cols in _axis_columns(lps, axes, carriers, aggregation).items()]


def _axis_columns(lps, axes, carriers, aggregation) -> dict[str, dict[str, list]]:
    """Per axis key, the columns object, term, carrier and score (s = w · moved x) of its cells."""
    x = {k: float(linear_flinch(v)) for k, v in lps.items()}
    shift: dict = {}
    if aggregation == "clipped_term_mean":
        terms: dict = defaultdict(list)
        for (label, axis, term, _), v in x.items():
            terms[(label, axis, term)].append(v)
        shift = {k: float(np.clip(np.mean(v), 0.0, SCALE_TOP) - np.mean(v)) for k, v in terms.items()}
    out = {}
    for key, _, words in axes:
        n_axis = sum(carriers.get((key, w), 0) for w in words)
        cols: dict = defaultdict(list)
        for (label, axis, term, c), v in x.items():
            if axis != key or term not in words or not carriers.get((axis, term)):
                continue
            weight = n_axis / (len(words) * carriers[(axis, term)])
            for col, value in (("object", label), ("term", term), ("carrier", f"{term}#{c}"),
                               ("score", weight * (v + shift.get((label, axis, term), 0.0)))):
                cols[col].append(value)
        out[key] = dict(cols)
    return out


def total_interval(result: dict, axes: Sequence[str], whole: Sequence[str]) -> dict:
    """The total's headline JSON (``total_flinch``) from the axes' (unclipped) headlines in ``result``.

    The axis is a fixed facet and each axis has its own terms and carriers, so the axes' estimates are
    independent given the model: the total's estimate is the sum of the axes' estimates, its error variance the
    sum of theirs (absolute for a model's total, relative for a paired difference; Brennan 2001, ch. 9's
    composite of fixed strata with weight 1), each axis's variance read back from its interval as
    (half-width / t(df))², with Satterthwaite's df = V² / Σ V_a² / df_a; p of a difference on that df, Holm over
    the pairs. The naive interval treats the model's cells of every axis as independent: the sum of the axes'
    naive variances, on Σ (n_a − 1) df. Models: those in ``whole`` (a whole total); skipped with the reason when
    an axis has no interval."""
    from scipy.stats import t

    from mirrorscan.analysis.intervals import Difference, Interval, holm

    heads = [result["headlines"][f"flinch_{k}"] for k in axes]
    base = {"title": "total", "unit": "", "replicates": "", "summed_over": "axis"}
    gone = [f"{k}: {h['skipped']}" for k, h in zip(axes, heads) if "skipped" in h]
    if gone:
        return {**base, "skipped": f"an axis has no interval ({'; '.join(gone)})"}
    level = result["level"]
    q = 0.5 + level / 2
    labels = [m for m in sorted(set(whole)) if all(any(o["object"] == m for o in h["objects"]) for h in heads)]
    if not labels:
        return {**base, "skipped": "no model has a whole total"}

    def parts(rows: Sequence[dict]) -> tuple[float, float, float]:
        """(Σ estimate, Σ V, Satterthwaite df) of per-axis rows carrying estimate, interval and df."""
        est, v, denom = 0.0, 0.0, 0.0
        for r in rows:
            df = r["df"] if r["df"] is not None else np.inf
            var = ((r["interval"][1] - r["interval"][0]) / 2 / t.ppf(q, df)) ** 2
            est, v, denom = est + r["estimate"], v + var, denom + (var * var / df if np.isfinite(df) else 0.0)
        return est, v, (v * v / denom if denom > 0 else np.inf)

    objects = []
    for m in labels:
        rows = [next(o for o in h["objects"] if o["object"] == m) for h in heads]
        est, v, df = parts(rows)
        half = float(t.ppf(q, df) * np.sqrt(v))
        naive_v, naive_df = 0.0, 0
        for o in rows:
            n = o["n_cells"]
            naive_v += ((o["naive_interval"][1] - o["naive_interval"][0]) / 2 / t.ppf(q, n - 1)) ** 2
            naive_df += n - 1
        naive_half = float(t.ppf(q, naive_df) * np.sqrt(naive_v))
        objects.append(Interval(m, est, (est - half, est + half), (est - naive_half, est + naive_half), df,
                                sum(o["n_cells"] for o in rows)))
    raw = []
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            rows = [next(d for d in h["differences"] if {d["a"], d["b"]} == {a, b}) for h in heads]
            rows = [r if r["a"] == a else {**r, "estimate": -r["estimate"], "interval": [-r["interval"][1],
                                                                                          -r["interval"][0]]}
                    for r in rows]
            est, v, df = parts(rows)
            se = float(np.sqrt(v))
            half = float(t.ppf(q, df) * se)
            p = float(2 * t.sf(abs(est) / se, df)) if se > 0 else (0.0 if est != 0 else 1.0)
            raw.append((a, b, est, (est - half, est + half), p, df))
    adjusted: np.ndarray | list[float] = holm([r[4] for r in raw]) if raw else []
    diffs = [Difference(a, b, est, ci, p, float(h), df, 1 - level).to_json()
             for (a, b, est, ci, p, df), h in zip(raw, adjusted)]
    warnings = list(dict.fromkeys(w for h in heads for w in h["warnings"]))
    reml = any(h["components_method"] == "reml" for h in heads)
    return {**base, "level": level, "method": "gstudy", "components_method": "reml" if reml else "anova",
            "object": result["object"], "facets": ["axis", "term", "carrier"], "random": ["term", "carrier"],
            "fixed": [], "n_rows": sum(h["n_rows"] for h in heads),
            "missing_cells": sum(h["missing_cells"] for h in heads), "objects": [o.to_json() for o in objects],
            "differences": diffs, "warnings": warnings}


def on_flinch_scale(result: dict, n_axes: int) -> dict:
    """``result`` (``headline_intervals`` JSON) with each model's estimate and intervals clipped to the scale
    (an axis to [0, 100], the total to [0, 100 × n_axes]) and each width ratio of the clipped widths; the
    differences stay on the unclipped scale. Each headline records the range as ``scale``."""
    for name, h in result.get("headlines", {}).items():
        top = SCALE_TOP * (n_axes if name == "total_flinch" else 1)
        h["scale"] = [0.0, top]
        for o in h.get("objects", ()):
            o["estimate"] = _clip(o["estimate"], top)
            o["interval"] = [_clip(v, top) for v in o["interval"]]
            o["naive_interval"] = [_clip(v, top) for v in o["naive_interval"]]
            naive = None if None in o["naive_interval"] else o["naive_interval"][1] - o["naive_interval"][0]
            wide = None if None in o["interval"] else o["interval"][1] - o["interval"][0]
            o["width_ratio"] = wide / naive if naive and wide is not None else None
    return result


def _clip(v, top: float):
    return None if v is None else float(min(max(v, 0.0), top))


def flinch_intervals(rows: Iterable[Mapping], axes: Sequence[tuple[str, str, Sequence[str]]],
                     carriers: Mapping[tuple[str, str], int], aggregation: str, whole: Sequence[str]) -> dict:
    """The intervals JSON (``analysis.headline_intervals``) of every axis score and of the total (over the
    models in ``whole``), on the flinch scale, from carrier rows (label, axis, term, carrier_index, lp_mean,
    error)."""
    result = headline_intervals(headline_scores(cell_lps(rows), axes, carriers, aggregation))
    if len(axes) > 1:
        result["headlines"]["total_flinch"] = total_interval(result, [k for k, _, _ in axes], whole)
    return on_flinch_scale(result, len(axes))


def grid_carriers(rows: Iterable[Mapping]) -> dict[tuple[str, str], int]:
    """Carriers per (axis, term) in the grid: distinct carrier indices in any row (errored ones too)."""
    seen: dict = defaultdict(set)
    for r in rows:
        seen[(r["axis"], r["term"])].add(r["carrier_index"])
    return {k: len(v) for k, v in seen.items()}
