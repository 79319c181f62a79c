"""lens's per-model headline, and headline − floor, with intervals over framings and scoring items.

**What the estimate is.** Per (model, variant) the estimate is the *mean over wrappers* of the wrapper's
headline, max over the layers in the max of AUROC − 0.5 (the table above it prints the median over wrappers;
``models.<m>.headline.mean`` holds this mean). It is stated as cell scores whose mean is that number
(:class:`analysis.headline_intervals.HeadlineScores`), one per (model, evaluation framing, deployment framing,
scoring item):

* at the wrapper's best layer, each item's **placement value** (DeLong, DeLong & Clarke-Pearson 1988): for an
  item of the positive class the share of the other class's items it projects above (ties ½), for an item of
  the other class the share of positive items that project above it. Both classes' placement values average
  to the AUROC;
* the cell score is the item's **influence value** on that AUROC, A + (N / n_c)(V_i − A) − 0.5 (N items, n_c
  of the item's class, A the wrapper's AUROC): its mean over the items is exactly the wrapper's headline
  A − 0.5, and treating the N influence values as independent draws gives DeLong's variance of A
  (S₁₀/n₁ + S₀₁/n₀), so item sampling of both classes enters at its true size. (The placement values alone
  would understate it about fourfold: a positive's share and a negative's share of the same AUROC are not
  independent halves of it.)

**Which facets are random.** The evaluation framing, the deployment framing and the scoring item, all
crossed, all random: the interval is for the model's headline on new framings of each arm and new items of the
same kind. A wrapper is a pair of framings and the wrappers are the full cross of the two arms, so 6 × 6
framings give 36 wrappers but only 6 + 6 sampled prompts; the arms, not the 36 wrappers, are the facets
(treating the wrappers as 36 independent prompts would shrink the framings' part of the error about sixfold).
A model with missing cells (an errored scoring item, a framing with no successful row) gets REML components,
and its estimate is then the mean the fitted model implies for the full design (``analysis.intervals``).

**What it does not cover.** The best layer is taken as given: each wrapper's layer was picked as the max on
these same items, and that selection's optimism is what the scoring-label floor measures, not this interval.
The task texts that build each direction are not a facet (a direction is their mean), and the implementation
variant is not either (each variant is its own headline). Items enter through first-order influence values,
which is DeLong's approximation, good for tens of items per class and rough for a handful.

**headline − floor.** The floor is the mean over wrappers of the scoring-label null's mean (``label_floor``,
estimated separately by permutation): a constant per model, subtracted from the estimate and from both ends of
each interval; a paired difference moves by the two floors' difference, and its p (on the same standard error
and degrees of freedom) and the Holm adjustment are recomputed. The floor's own permutation error is not in the
interval.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from mirrorscan.analysis.auroc import positive_mask
from mirrorscan.analysis.headline_intervals import HeadlineScores, headline_intervals
from mirrorscan.analysis.intervals import DEFAULT_LEVEL, Difference, holm
from mirrorscan.instruments.lens.directions import framing_projections, wrapper_projections

FACETS = ("evaluation", "deployment", "item")
"""The random facets of every lens headline interval (module docstring)."""
CROSSED_REML_LEVELS = 3_000
"""With cells missing, REML on model × evaluation × deployment × item factors a dense matrix of the levels of every
effect but the largest (2 models × 6 × 6 framings × 64 items hold 2,642: about 30 s on 2 cores); past this many
the wrapper is taken as one facet instead, with a warning that the interval is then too narrow."""
WRAPPER_FALLBACK = ("wrapper taken as one facet (the {n:,} levels of evaluation × deployment × item with cells missing "
                    "are past REML's size here): wrappers sharing a framing are counted as independent, so the "
                    "interval is too narrow by the framings' share")
SCORE = ("per (model, evaluation framing, deployment framing, scoring item): the item's influence value on the "
         "wrapper's AUROC at its best layer, A + (N / n_class)(placement − A) − 0.5; its mean over the items is the "
         "wrapper's headline and its mean over the cells the mean over wrappers of the headline")
"""What a cell score is, as ``intervals.score`` says it."""


def influence_values(scores: np.ndarray, labels, positive: str) -> np.ndarray:
    """(items,): each item's influence value on the AUROC of ``scores`` (items,) minus 0.5, whose mean is AUROC −
    0.5 exactly (module docstring); positive class ``positive``, ties ½."""
    mask = positive_mask(labels, positive)
    s = np.asarray(scores, dtype=np.float64)
    pos, neg = s[mask], s[~mask]
    beats = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])   # (positives, negatives)
    a = float(beats.mean())
    out = np.empty(s.size)
    out[mask] = a + s.size / pos.size * (beats.mean(axis=1) - a)
    out[~mask] = a + s.size / neg.size * (beats.mean(axis=0) - a)
    return out - 0.5


def headline_scores(by_model: Mapping, rows: list[dict], positive: str, variant: str
                    ) -> tuple[HeadlineScores, str | None]:
    """(the cell scores of one variant's headline, a warning where the wrapper had to be taken as one facet):
    ``rows`` are the analysis's per-wrapper rows (``label``, ``variant``, ``evaluation``, ``deployment``,
    ``layer``), ``by_model`` its :class:`numbers.Extracted` per (label, variant)."""
    cols: dict[str, list] = {"object": [], "evaluation": [], "deployment": [], "item": [], "score": []}
    projected = {}
    for r in rows:
        if r["variant"] != variant:
            continue
        ex = by_model[(r["label"], variant)]
        if r["label"] not in projected:
            projected[r["label"]] = framing_projections(ex.scoring, ex.framing_means())
        at = wrapper_projections(projected[r["label"]], r["evaluation"], r["deployment"])[:, r["layer"]]
        values = influence_values(at, ex.labels, positive)
        n = len(values)
        cols["object"] += [r["label"]] * n
        cols["evaluation"] += [r["evaluation"]] * n
        cols["deployment"] += [r["deployment"]] * n
        cols["item"] += list(ex.item_ids)
        cols["score"] += values.tolist()
    levels = _dense_levels(cols)
    if levels <= CROSSED_REML_LEVELS:
        return HeadlineScores(f"headline/{variant}", f"headline ({variant})", "", cols, FACETS, plannable=False), None
    cols["wrapper"] = [f"{e}×{d}" for e, d in zip(cols["evaluation"], cols["deployment"])]
    return (HeadlineScores(f"headline/{variant}", f"headline ({variant})", "", cols, ("wrapper", "item"),
                           plannable=False),
            WRAPPER_FALLBACK.format(n=levels))


def _dense_levels(cols: Mapping[str, list]) -> int:
    """0 for a complete table (the ANOVA path), else the levels REML would hold densely on the crossed design:
    every effect's levels but the largest one's and the residual's."""
    from itertools import combinations

    names = ("object", *FACETS)
    sizes = {f: len(set(cols[f])) for f in names}
    if len(set(zip(*(cols[f] for f in names)))) == int(np.prod(list(sizes.values()))):
        return 0
    levels = [int(np.prod([sizes[f] for f in fs])) for k in range(1, len(names)) for fs in combinations(names, k)]
    return sum(levels) - max(levels)


def minus_floor(head: Mapping[str, Any], floors: Mapping[str, float | None], title: str,
                level: float = DEFAULT_LEVEL) -> dict:
    """The headline's intervals (one entry of ``headline_intervals``'s ``headlines``) with each model's floor
    subtracted as a constant: estimates and both intervals moved by the floor, differences by the floors'
    difference with p recomputed on the same standard error and df, and Holm's adjustment redone. The headline's
    variance components are left out: the other components are the same, the model's own is not."""
    from scipy.stats import t

    out = {k: v for k, v in head.items() if k not in ("components", "levels")}   # not this number's: a floor
    out["title"] = title                                 # per model moves σ²(model), so no plan is read from them
    if "skipped" in head:
        return out
    if any(floors.get(o["object"]) is None for o in head["objects"]):
        return {"title": title, "unit": head["unit"], "replicates": head.get("replicates", ""),
                "skipped": "no scoring-label floor (null_permutations: 0)"}
    shift = lambda xs, f: [None if x is None else x - f for x in xs]
    out["objects"] = [{**o, "estimate": o["estimate"] - floors[o["object"]],
                       "interval": shift(o["interval"], floors[o["object"]]),
                       "naive_interval": shift(o["naive_interval"], floors[o["object"]])} for o in head["objects"]]
    alpha = 1 - level
    q = 1 - alpha / 2
    raw: list[tuple[Any, ...]] = []   # from the headline's JSON: a bound may be null
    for d in head["differences"]:
        floor_a, floor_b = floors[d["a"]], floors[d["b"]]
        assert floor_a is not None and floor_b is not None   # every object's floor is checked above
        delta = floor_a - floor_b
        df = math.inf if d["df"] is None else d["df"]
        est = d["estimate"] - delta
        se = (d["interval"][1] - d["interval"][0]) / (2 * float(t.ppf(q, df)))
        p = float(2 * t.sf(abs(est) / se, df)) if se > 0 else (0.0 if est != 0 else 1.0)
        raw.append((d["a"], d["b"], est, tuple(shift(d["interval"], delta)), p, df))
    adjusted: np.ndarray | list[float] = holm([r[4] for r in raw]) if raw else []
    out["differences"] = [Difference(a, b, est, ci, p, float(h), df, alpha).to_json()
                          for (a, b, est, ci, p, df), h in zip(raw, adjusted)]
    return out


def lens_intervals(by_model: Mapping, rows: list[dict], models: Mapping[str, dict], positive: str,
                   variants: list[str], level: float = DEFAULT_LEVEL) -> dict:
    """``analysis.headline_intervals`` JSON of every variant's headline and headline − floor (keys
    ``headline/<variant>``, ``headline_minus_floor/<variant>``), with ``score`` saying what a cell score is.
    ``models`` is the analysis's ``models`` (``<label>/<variant>`` → numbers, whose ``layer_selection_floor``
    gives each floor)."""
    present = [v for v in variants if any(r["variant"] == v for r in rows)]
    stated = [headline_scores(by_model, rows, positive, v) for v in present]
    result = headline_intervals([h for h, _ in stated], "model", level)
    heads: dict[str, Any] = {}
    for v, (_, fallback) in zip(present, stated):
        head = result["headlines"][f"headline/{v}"]
        if fallback and "warnings" in head:
            head["warnings"] = [fallback, *head["warnings"]]
        heads[f"headline/{v}"] = head
        floors = {}
        for m in models.values():
            if m["variant"] == v:
                fl = m.get("layer_selection_floor")
                floors[m["label"]] = fl and fl["floor_mean"]
        heads[f"headline_minus_floor/{v}"] = minus_floor(head, floors, f"headline − floor ({v})", level)
    return {**result, "score": SCORE, "headlines": heads}


def paired_by_pair(intervals: Mapping[str, Any] | None, variant: str) -> dict[tuple[str, str], dict]:
    """(a, b) → the paired difference of the variant's headline (``Difference`` JSON), for the claims."""
    head = (intervals or {}).get("headlines", {}).get(f"headline/{variant}", {})
    return {(d["a"], d["b"]): d for d in head.get("differences", ())}
