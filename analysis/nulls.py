"""Label-permutation null of a max-over-layers probe statistic, and its layer-selection floor.

Reporting the best of L layers inflates the number: even with labels that carry no information, the
maximum over layers of |AUROC − 0.5| is well above 0. The null here permutes the item labels (scores
fixed), recomputes AUROC at every layer, and **retakes the max inside every permutation**, so the null
includes the selection. From it:

* p = (b + 1)/(m + 1), b = permutations whose max is ≥ the observed max;
* z = (observed − null mean)/null sd;
* floor = null mean of the max (what selection alone gives) and floor_corrected = observed − floor.

Two statistics, always both: the signed max of (AUROC − 0.5) for the stated positive class, and the
max of |AUROC − 0.5| (either direction). Sharding follows :mod:`analysis.resampling`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from mirrorscan.analysis.auroc import (MaxDeviation, auroc_from_ranks, max_abs_deviation, max_deviation,
                            max_signed_deviation, midranks, positive_mask)
from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.resampling import DEFAULT_SHARD_SIZE, NullSummary, Seed, run_local, summarise_null


@dataclass(frozen=True)
class LabelPermutationData:
    """What a label-permutation shard needs, computed once: mid-ranks per layer and the labels."""

    ranks: np.ndarray
    """(items, layers) mid-ranks of the scores (they do not change when labels are permuted)."""
    mask: np.ndarray
    """(items,) True for the positive class."""


def label_permutation_data(scores: Any, labels: Any, positive: Any) -> LabelPermutationData:
    """Prepare scores (items, layers) and labels for :func:`label_permutation_shard`."""
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2:
        raise AnalysisError("scores", f"shape {x.shape}", "give scores as (items, layers)")
    mask = positive_mask(labels, positive)
    if mask.size != x.shape[0]:
        raise AnalysisError("labels", f"{mask.size} labels for {x.shape[0]} items", "give one label per item")
    return LabelPermutationData(midranks(x), mask)


def label_permutation_shard(data: LabelPermutationData, seed_seq: Any, n_draws: int) -> np.ndarray:
    """One shard of the null: (n_draws, 2) array of [max (AUROC − 0.5), max |AUROC − 0.5|] per draw.

    Each draw permutes the labels uniformly (``Generator.permuted`` row by row) and takes both maxima
    over all layers of that draw. Pure: same inputs and seed, same bytes.
    """
    rng = np.random.default_rng(seed_seq)
    masks = rng.permuted(np.broadcast_to(data.mask, (n_draws, data.mask.size)), axis=1)
    auc = auroc_from_ranks(data.ranks, masks)                  # (draws, layers)
    return np.stack([max_signed_deviation(auc), max_abs_deviation(auc)], axis=1)


@dataclass(frozen=True)
class MaxOverLayersNull:
    """Observed per-layer AUROC, its two maxima, and their label-permutation nulls."""

    positive: Any
    """The positive class the AUROCs are computed for."""
    auroc: np.ndarray
    """Observed AUROC per layer (positive class above)."""
    layers: tuple
    """Layer labels, in the order of ``auroc``."""
    best: MaxDeviation
    """Observed maxima over layers and where they occur."""
    signed: NullSummary
    """Null of max (AUROC − 0.5): p, z, floor, floor-corrected."""
    absolute: NullSummary
    """Null of max |AUROC − 0.5|: p, z, floor, floor-corrected."""

    def to_json(self) -> dict:
        """Plain dict: per-layer AUROC, both maxima with their layers, both null summaries."""
        return {"positive_class": _plain(self.positive),
                "auroc_by_layer": {str(_plain(l)): float(a) for l, a in zip(self.layers, self.auroc)},
                "best": {**self.best.to_json(),
                         "max_auroc_minus_half_layer": _plain(self.layers[self.best.signed_layer]),
                         "max_abs_auroc_minus_half_layer": _plain(self.layers[self.best.absolute_layer])},
                "null_signed": self.signed.to_json(), "null_absolute": self.absolute.to_json()}


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def label_permutation_null(scores: Any, labels: Any, positive: Any, n_permutations: int = 1000,
                           seed: Seed = 0, shard_size: int = DEFAULT_SHARD_SIZE,
                           layers: Sequence | None = None) -> MaxOverLayersNull:
    """Max-over-layers AUROC statistics with their label-permutation nulls (max retaken per draw).

    ``scores`` (items, layers), ``labels`` one per item, ``positive`` the positive class. Both null
    means are layer-selection floors: the expected best-layer deviation from 0.5 with labels that carry
    no information. The p-values are one-sided (a max can only be too large).
    """
    data = label_permutation_data(scores, labels, positive)
    auc = auroc_from_ranks(data.ranks, data.mask)
    best = max_deviation(auc)
    null = run_local(label_permutation_shard, data, n_permutations, seed, shard_size)
    layers = tuple(range(auc.size)) if layers is None else tuple(layers)
    if len(layers) != auc.size:
        raise AnalysisError("layers", f"{len(layers)} labels for {auc.size} layers", "one label per layer")
    pos = _plain(positive)
    return MaxOverLayersNull(
        positive, auc, layers, best,
        summarise_null(f"max over {auc.size} layers of (AUROC - 0.5), positive={pos}", best.signed, null[:, 0]),
        summarise_null(f"max over {auc.size} layers of |AUROC - 0.5|", best.absolute, null[:, 1]))
