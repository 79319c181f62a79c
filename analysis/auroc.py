"""AUROC of probe scores by mid-ranks, vectorised over layers, permutations and bootstrap weights.

AUROC here is the Mann–Whitney U of the positive class over the negative class divided by n₁·n₀:
the probability that a random positive item scores above a random negative one, ties counting ½
(scikit-learn's ``roc_auc_score`` for binary labels). The positive class is always an explicit
argument, because the two directions differ (AUROC(testing) = 1 − AUROC(deployment)).

Exactness: mid-ranks are multiples of ½, so rank sums, U and therefore every AUROC are exact in float64
(one final division by n₁·n₀) whatever the summation order — a batched product over many
permutations gives the same bits as a loop.

Shapes: ``scores`` is (items,) or (items, layers); a permutation batch of labels is a boolean
positive-mask of shape (draws, items) or integer index arrays (draws, items) that reorder the labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from scipy.stats import rankdata

from mirrorscan.analysis.errors import AnalysisError


def positive_mask(labels: Any, positive: Any) -> np.ndarray:
    """Boolean mask of items whose label equals ``positive``; both classes must be present."""
    labels = np.asarray(labels)
    mask = labels == positive
    if mask.ndim != 1:
        raise AnalysisError("labels", f"shape {labels.shape}; expected one label per item", "give a 1-D label list")
    n1 = int(mask.sum())
    if n1 == 0:
        raise AnalysisError("positive", f"no item has label {positive!r}; labels are "
                            f"{sorted(set(labels.tolist()))[:5]}", "name the positive class exactly")
    if n1 == mask.size:
        raise AnalysisError("labels", f"every item has label {positive!r}", "include both classes")
    return mask


def midranks(scores: Any) -> np.ndarray:
    """Mid-ranks (1-based, ties get the average rank) along axis 0 of (items,) or (items, layers)."""
    x = np.asarray(scores, dtype=np.float64)
    if np.isnan(x).any():
        raise AnalysisError("scores", f"{int(np.isnan(x).sum())} NaN score(s)",
                            "drop unscored items or layers before computing AUROC")
    return rankdata(x, method="average", axis=0)


def auroc_from_ranks(ranks: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """AUROC from precomputed mid-ranks and a positive mask; vectorised over layers and permutations.

    ``ranks``: (items,) or (items, layers). ``mask``: (items,) or (draws, items) booleans (rows may
    differ in their number of positives). Returns (), (layers,), (draws,) or (draws, layers).
    """
    mask = np.asarray(mask, dtype=bool)
    ranks = np.asarray(ranks, dtype=np.float64)
    n1 = mask.sum(axis=-1).astype(np.float64)                 # positives per row
    n0 = mask.shape[-1] - n1
    if np.any(n1 == 0) or np.any(n0 == 0):
        raise AnalysisError("labels", "only one class present", "include both classes")
    if ranks.ndim == 2 and mask.ndim == 2:
        n1, n0 = n1[:, None], n0[:, None]
    # exact: sums of half-integers. einsum without `optimize` runs its own loop, not BLAS: BLAS threads
    # spin badly when Ray workers (or test runners) share cores, and this product is memory-bound anyway.
    spec = {(1, 1): "i,i->", (1, 2): "i,il->l", (2, 1): "bi,i->b", (2, 2): "bi,il->bl"}[(mask.ndim, ranks.ndim)]
    rank_sum = np.einsum(spec, mask.astype(np.float64), ranks, optimize=False)
    u = rank_sum - n1 * (n1 + 1) / 2.0
    return u / (n1 * n0)


def auroc(scores: Any, labels: Any, positive: Any) -> np.ndarray:
    """AUROC of ``scores`` (items,) or (items, layers) for labels, ``positive`` the positive class.

    Dimensionless in [0, 1]; 0.5 is chance. Equals sklearn ``roc_auc_score(labels == positive, s)``
    per layer. It is not a deviation from chance (see :func:`max_deviation`) and not accuracy.
    """
    return auroc_from_ranks(midranks(scores), positive_mask(labels, positive))


def permuted_masks(mask: np.ndarray, permutations: np.ndarray) -> np.ndarray:
    """Positive masks for label permutations given as index arrays (draws, items): mask[perm]."""
    perms = np.asarray(permutations)
    if perms.ndim != 2 or perms.shape[1] != mask.shape[0]:
        raise AnalysisError("permutations", f"shape {perms.shape}; expected (draws, {mask.shape[0]})",
                            "give one index array per permutation")
    return np.asarray(mask)[perms]


def auroc_weighted(scores: Any, mask: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUROC when item i appears ``weights[b, i]`` times (a bootstrap resample as multiplicities).

    Equal to :func:`auroc` on the expanded resample, tie convention included, without expanding:
    U = Σ_pos w_i (Σ_neg w_j [s_j < s_i] + ½ Σ_neg w_j [s_j = s_i]). ``scores`` (items,) or
    (items, layers); ``weights`` (draws, items) of non-negative integers. Returns (draws,[layers]).
    """
    x = np.asarray(scores, dtype=np.float64)
    squeeze = x.ndim == 1
    x = x[:, None] if squeeze else x
    if np.isnan(x).any():
        raise AnalysisError("scores", "NaN score(s)", "drop unscored items or layers first")
    w = np.asarray(weights, dtype=np.float64)
    mask = np.asarray(mask, dtype=bool)
    wp, wn = w * mask, w * ~mask                          # (draws, items)
    n1, n0 = wp.sum(axis=1), wn.sum(axis=1)
    draws = w.shape[0]
    out = np.empty((draws, x.shape[1]))
    for layer in range(x.shape[1]):
        _, code = np.unique(x[:, layer], return_inverse=True)
        g = int(code.max()) + 1
        flat = (np.arange(draws)[:, None] * g + code.ravel()[None, :]).ravel()
        pos = np.bincount(flat, weights=wp.ravel(), minlength=draws * g).reshape(draws, g)
        neg = np.bincount(flat, weights=wn.ravel(), minlength=draws * g).reshape(draws, g)
        below = np.cumsum(neg, axis=1) - neg               # negatives strictly below each tie group
        u = np.sum(pos * (below + neg / 2.0), axis=1)
        out[:, layer] = u / (n1 * n0)
    return out[:, 0] if squeeze else out


@dataclass(frozen=True)
class MaxDeviation:
    """The best layer of a per-layer AUROC curve, in the two senses that differ."""

    signed: float
    """max over layers of (AUROC − 0.5) for the stated positive class; can be < 0."""
    signed_layer: int
    """Position (0-based, among the layers given) of that maximum; first one on ties."""
    absolute: float
    """max over layers of |AUROC − 0.5|: separation in either direction."""
    absolute_layer: int
    """Position (0-based) of that maximum; first one on ties."""
    n_layers: int
    """Layers entering the max (the selection the floor must account for)."""

    def to_json(self) -> dict:
        """Plain dict."""
        return {"max_auroc_minus_half": self.signed, "max_auroc_minus_half_layer": self.signed_layer,
                "max_abs_auroc_minus_half": self.absolute, "max_abs_auroc_minus_half_layer":
                self.absolute_layer, "n_layers": self.n_layers}


def max_signed_deviation(auc: np.ndarray) -> np.ndarray:
    """max over the last axis (layers) of AUROC − 0.5, vectorised over leading axes (permutations)."""
    return np.max(np.asarray(auc) - 0.5, axis=-1)


def max_abs_deviation(auc: np.ndarray) -> np.ndarray:
    """max over the last axis (layers) of |AUROC − 0.5|, vectorised over leading axes."""
    return np.max(np.abs(np.asarray(auc) - 0.5), axis=-1)


def max_deviation(auc: Sequence[float] | np.ndarray) -> MaxDeviation:
    """Both maxima over layers of one AUROC curve, with the layers where they occur.

    The signed one measures how far the *stated positive class* is ranked above chance at the best
    layer; the absolute one allows either direction (and therefore has a higher null floor).
    """
    a = np.asarray(auc, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise AnalysisError("auroc", f"shape {a.shape}", "give one AUROC per layer")
    s, ab = a - 0.5, np.abs(a - 0.5)
    return MaxDeviation(float(s.max()), int(s.argmax()), float(ab.max()), int(ab.argmax()), int(a.size))
