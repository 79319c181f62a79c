"""The pigeonhole bootstrap of a crossed design: every random facet's levels resampled independently.

Owen (2007, "The pigeonhole bootstrap", *Ann. Appl. Stat.* 1(2)) for crossed random effects: draw, with
replacement, as many levels of each random facet as were observed, independently per facet, and keep every
cell whose levels were all drawn, with the product of the draw counts as its weight. The object facet is not
resampled (it is what is compared) and neither is a fixed facet. Each object's weighted mean over its drawn
cells is one bootstrap replicate; the interval is the percentile interval, and a paired difference uses the
same draws for both objects, so shared facets cancel as they do in the data. Owen shows the variance it
gives is conservative (it counts the highest-order interaction more than once); bench/coverage.py measures how
much.

Missing cells drop out of a replicate's mean (a weighted mean over the cells that exist), so the estimate
reported beside the interval is each object's plain mean over its cells. Nested facets are not resampled
here (a two-stage scheme would be needed): use the G-study method for them.

Draws run in chunks seeded from ``SeedSequence(seed).spawn``: the same seed gives the same bytes.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.intervals import (DEFAULT_LEVEL, Difference, Interval, IntervalReport, check_facets, holm,
                                           level_warnings, naive_intervals)
from mirrorscan.analysis.long_design import LongDesign

CHUNK = 64          # draws per chunk: bounds memory to about CHUNK × cells × 8 bytes


def _cell_arrays(design: LongDesign, random: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Sums and counts of the scores per (object, random facet levels…), fixed facets summed over."""
    axes = (design.object, *random)
    shape = tuple(len(design.labels[f]) for f in axes)
    flat = np.ravel_multi_index(tuple(design.codes[f] for f in axes), shape)
    size = int(np.prod(shape))
    if size > 50_000_000:
        raise AnalysisError(",".join(axes), f"{size:,} cells to resample", "use --method gstudy for so large a design")
    sums = np.bincount(flat, weights=design.scores, minlength=size).reshape(shape)
    counts = np.bincount(flat, minlength=size).astype(np.float64).reshape(shape)
    return sums, counts


def _replicates(sums: np.ndarray, counts: np.ndarray, draws: int, seed: int) -> np.ndarray:
    """Bootstrap replicates of each object's weighted mean: array (draws, objects)."""
    sizes = sums.shape[1:]
    n_chunks = -(-draws // CHUNK)
    out = np.empty((draws, sums.shape[0]))
    for c, child in enumerate(np.random.SeedSequence(seed).spawn(n_chunks)):
        rng = np.random.default_rng(child)
        b = min(CHUNK, draws - c * CHUNK)
        weights = [np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(b)]).astype(np.float64)
                   for n in sizes]
        s = np.broadcast_to(sums, (b, *sums.shape))
        k = np.broadcast_to(counts, (b, *counts.shape))
        for w in reversed(weights):                       # contract the last facet axis first
            s = np.einsum("b...f,bf->b...", s, w)
            k = np.einsum("b...f,bf->b...", k, w)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[c * CHUNK:c * CHUNK + b] = s / k
    return out


def pigeonhole_intervals(design: LongDesign, fixed: Sequence[str] = (), level: float = DEFAULT_LEVEL,
                         draws: int = 2000, seed: int = 0) -> IntervalReport:
    """Percentile intervals of each object's mean and of every paired difference, by the pigeonhole bootstrap.

    Two-sided p of a difference = 2 × the smaller share of replicates on either side of 0 (at least 1/draws),
    Holm-adjusted over the pairs. Score units throughout.
    """
    if not 0 < level < 1:
        raise AnalysisError("--level", f"{level} is not a coverage level", "give a level between 0 and 1, e.g. 0.95")
    if draws < 100:
        raise AnalysisError("--draws", f"{draws} draws", "give at least 100 (2000 is the default)")
    random, fixed = check_facets(design, fixed)
    nested = [f for f in design.facets[1:] if f in design.nested or any(f in a for a in design.nested.values())]
    if nested:
        raise AnalysisError("--method", f"the bootstrap resamples crossed facets only; {nested} are nested",
                            "use --method gstudy for nested designs")
    sums, counts = _cell_arrays(design, random)
    reps = _replicates(sums, counts, draws, seed)
    lo_q, hi_q = (1 - level) / 2, 0.5 + level / 2
    labels = [str(v) for v in design.labels[design.object]]
    obj = design.codes[design.object]
    naive = naive_intervals(design, level)
    objects = []
    for k, label in enumerate(labels):
        r = reps[:, k][np.isfinite(reps[:, k])]
        est = float(design.scores[obj == k].mean())
        objects.append(Interval(label, est, (float(np.quantile(r, lo_q)), float(np.quantile(r, hi_q))), naive[k],
                                float("nan"), int(np.sum(obj == k))))
    raw = []
    for i in range(len(labels)):
        for j in range(i + 1, len(labels)):
            d = reps[:, i] - reps[:, j]
            d = d[np.isfinite(d)]
            p = min(1.0, max(2 * min(np.mean(d <= 0), np.mean(d >= 0)), 1.0 / len(d)))
            raw.append((labels[i], labels[j], objects[i].estimate - objects[j].estimate,
                        (float(np.quantile(d, lo_q)), float(np.quantile(d, hi_q))), float(p)))
    adjusted: np.ndarray | list[float] = holm([r[4] for r in raw]) if raw else []
    diffs = tuple(Difference(a, b, est, ci, p, float(h), float("nan"), 1 - level)
                  for (a, b, est, ci, p), h in zip(raw, adjusted))
    return IntervalReport(level, "bootstrap", "none", design.object, random, fixed, design.n_rows,
                          design.missing_cells, tuple(objects), diffs, level_warnings(design, random, "bootstrap"))
