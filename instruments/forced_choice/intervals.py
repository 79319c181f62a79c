"""forced_choice's headline numbers as cell-level scores, for their intervals over envelopes and pairs.

Each number is the mean of a score over rows (:class:`analysis.headline_intervals.HeadlineScores`):

* per-cell commit rate — 100 × [class is A or B] per answered cell; facets envelope and pair (random) and
  ordering (fixed: both orderings are always asked), samples as replicates;
* position bias — per (envelope, pair, sample) with both orderings answered, 100 × ([A when AB] − [A when BA])
  in percentage points; its mean is the model's position bias over those units;
* sharpness — per pair with a definite pick, max(n_A, n_B)/(n_A + n_B); pairs random.

Errored cells are not scores; a model with cells missing gets REML components (analysis.reml).
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa

from mirrorscan.analysis.headline_intervals import HeadlineScores


def headline_scores(cells: pa.Table) -> list[HeadlineScores]:
    """The three headline score tables of a table of one row per cell (all models of the invocation)."""
    cols = {c: cells.column(c).to_pylist() for c in ("label", "pair_id", "envelope", "ordering", "sample", "class",
                                                      "error")}
    answered = [i for i, e in enumerate(cols["error"]) if e is None]
    commit = {"object": [cols["label"][i] for i in answered], "envelope": [cols["envelope"][i] for i in answered],
              "pair_id": [cols["pair_id"][i] for i in answered], "ordering": [cols["ordering"][i] for i in answered],
              "score": [100.0 * (cols["class"][i] in ("A", "B")) for i in answered]}
    by_unit: dict = defaultdict(dict)
    picks: dict = defaultdict(lambda: [0, 0])
    for i in answered:
        key = (cols["label"][i], cols["envelope"][i], cols["pair_id"][i], cols["sample"][i])
        by_unit[key][cols["ordering"][i]] = cols["class"][i] == "A"
        if cols["class"][i] in ("A", "B"):
            picks[(cols["label"][i], cols["pair_id"][i])][cols["class"][i] == "B"] += 1
    bias_keys = [k for k, v in by_unit.items() if "AB" in v and "BA" in v]
    bias = {"object": [k[0] for k in bias_keys], "envelope": [k[1] for k in bias_keys],
            "pair_id": [k[2] for k in bias_keys],
            "score": [100.0 * (by_unit[k]["AB"] - by_unit[k]["BA"]) for k in bias_keys]}
    sharp_keys = list(picks)
    sharp = {"object": [k[0] for k in sharp_keys], "pair_id": [k[1] for k in sharp_keys],
             "score": [max(picks[k]) / sum(picks[k]) for k in sharp_keys]}
    return [HeadlineScores("per_cell_commit_rate", "commit/cell", "%", commit, ("envelope", "pair_id", "ordering"),
                           fixed=("ordering",), replicates="samples"),
            HeadlineScores("position_bias_pp", "position bias", "pp", bias, ("envelope", "pair_id"),
                           replicates="samples", rows_per_score=2.0),
            HeadlineScores("mean_sharpness", "sharpness", "", sharp, ("pair_id",),
                           rows_per_score=len(answered) / max(len(sharp_keys), 1))]
