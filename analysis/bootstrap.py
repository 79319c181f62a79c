"""Bootstraps over items, stratified by label, and the stability of the best ("argmax") layer.

Items are resampled with replacement *within each label class*, so every resample keeps n₁ positives
and n₀ negatives (AUROC stays defined and comparable). For probe curves the question is often not
"how wide is the AUROC interval" but "is the best layer a property of the model or of the items": the
argmax-layer bootstrap gives the distribution of the best layer over resamples, how many distinct
layers win, and the spread

    spread = (max argmax − min argmax) / (layers entering the max − 1)

(0: one layer always wins; 1: winners span the whole depth scanned). Sharding follows
:mod:`analysis.resampling`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

import numpy as np

from mirrorscan.analysis.auroc import auroc_from_ranks, auroc_weighted, midranks, positive_mask
from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.resampling import DEFAULT_SHARD_SIZE, Seed, run_local


def stratified_bootstrap_indices(labels: Any, rng: Any, n_draws: int) -> np.ndarray:
    """(n_draws, items) resampling indices: each position is refilled from items of its own label.

    ``rng`` is a Generator or anything ``numpy.random.default_rng`` accepts (a shard's SeedSequence).
    """
    rng = np.random.default_rng(rng)
    labels = np.asarray(labels)
    idx = np.empty((n_draws, labels.size), dtype=np.int64)
    for value in np.unique(labels):
        members = np.flatnonzero(labels == value)
        idx[:, members] = members[rng.integers(0, members.size, size=(n_draws, members.size))]
    return idx


def multiplicities(indices: np.ndarray, n_items: int) -> np.ndarray:
    """(draws, items) counts: how often each item appears in each resample given as index rows."""
    idx = np.asarray(indices)
    flat = (np.arange(idx.shape[0])[:, None] * n_items + idx).ravel()
    return np.bincount(flat, minlength=idx.shape[0] * n_items).reshape(idx.shape[0], n_items)


@dataclass(frozen=True)
class ItemBootstrapData:
    """Input of a generic item-bootstrap shard."""

    scores: np.ndarray
    """(items, ...) scores."""
    labels: np.ndarray
    """(items,) labels; resampling is stratified by them."""
    statistic: Callable[[np.ndarray, np.ndarray], Any]
    """statistic(scores_resampled, labels_resampled) → number or array; must be picklable for Ray."""


def item_bootstrap_shard(data: ItemBootstrapData, seed_seq: Any, n_draws: int) -> np.ndarray:
    """(n_draws, ...) values of any statistic on label-stratified item resamples (a loop over draws)."""
    idx = stratified_bootstrap_indices(data.labels, seed_seq, n_draws)
    return np.stack([np.asarray(data.statistic(data.scores[i], data.labels[i]), dtype=np.float64)
                     for i in idx])


def item_bootstrap(scores: Any, labels: Any, statistic: Callable[[np.ndarray, np.ndarray], Any],
                   n_boot: int = 1000, seed: Seed = 0, shard_size: int = DEFAULT_SHARD_SIZE) -> np.ndarray:
    """Bootstrap draws of ``statistic(scores, labels)`` over items, stratified by label.

    Returns the raw draws (n_boot, ...) in shard order; summarise them with
    :func:`analysis.resampling.percentile_interval`. Units are the statistic's.
    """
    x, lab = np.asarray(scores), np.asarray(labels)
    if x.shape[0] != lab.size:
        raise AnalysisError("labels", f"{lab.size} labels for {x.shape[0]} items", "give one label per item")
    return run_local(item_bootstrap_shard, ItemBootstrapData(x, lab, statistic), n_boot, seed, shard_size)


@dataclass(frozen=True)
class AurocBootstrapData:
    """Input of the vectorised AUROC bootstrap shard."""

    scores: np.ndarray
    """(items, layers) scores."""
    mask: np.ndarray
    """(items,) True for the positive class; also the stratum of each item."""


def auroc_bootstrap_shard(data: AurocBootstrapData, seed_seq: Any, n_draws: int) -> np.ndarray:
    """(n_draws, layers) AUROC per layer on label-stratified item resamples (as multiplicities)."""
    idx = stratified_bootstrap_indices(data.mask, seed_seq, n_draws)
    w = multiplicities(idx, data.mask.size)
    return auroc_weighted(data.scores, data.mask, w)


def argmax_spread(argmax: Sequence[int] | np.ndarray, n_layers: int) -> float:
    """(max − min) of argmax positions ÷ (n_layers − 1): 0 = one layer, 1 = the full depth scanned.

    Positions are 0-based among the layers that entered the max; NaN when only one layer entered.
    """
    a = np.asarray(argmax)
    if a.size == 0:
        raise AnalysisError("argmax", "no draws", "give at least one argmax")
    if n_layers < 2:
        return float("nan")
    if a.min() < 0 or a.max() >= n_layers:
        raise AnalysisError("argmax", f"positions outside 0..{n_layers - 1}", "give 0-based layer positions")
    return float((a.max() - a.min()) / (n_layers - 1))


@dataclass(frozen=True)
class ArgmaxLayerBootstrap:
    """How stable the best layer is under item resampling."""

    kind: Literal["signed", "absolute"]
    """Which maximum picks the layer: AUROC − 0.5 for the positive class, or |AUROC − 0.5|."""
    positive: Any
    """The positive class."""
    layers: tuple
    """Labels of the layers entering the max, in order."""
    observed: int
    """Position of the best layer on the original items."""
    argmax: np.ndarray
    """(n_boot,) position of the best layer in each resample."""

    @property
    def n_layers(self) -> int:
        """Layers entering the max."""
        return len(self.layers)

    @property
    def counts(self) -> np.ndarray:
        """(layers,) how many resamples each layer won."""
        return np.bincount(self.argmax, minlength=self.n_layers)

    @property
    def n_distinct(self) -> int:
        """Number of different layers that won at least one resample."""
        return int(np.count_nonzero(self.counts))

    @property
    def spread(self) -> float:
        """(max − min argmax position) ÷ (n_layers − 1), in [0, 1]."""
        return argmax_spread(self.argmax, self.n_layers)

    def to_json(self) -> dict:
        """Plain dict: observed best layer, distribution of winners, distinct count and spread."""
        plain = lambda v: v.item() if isinstance(v, np.generic) else v
        counts = self.counts
        return {"kind": self.kind, "positive_class": plain(self.positive), "n_draws": int(self.argmax.size),
                "n_layers": self.n_layers, "observed_layer": plain(self.layers[self.observed]),
                "wins_by_layer": {str(plain(self.layers[k])): int(c) for k, c in enumerate(counts) if c},
                "n_distinct": self.n_distinct, "spread": self.spread,
                "min_layer": plain(self.layers[int(self.argmax.min())]),
                "max_layer": plain(self.layers[int(self.argmax.max())])}


def argmax_layer_bootstrap(scores: Any, labels: Any, positive: Any, n_boot: int = 1000, seed: Seed = 0,
                           kind: Literal["signed", "absolute"] = "absolute", layers: Sequence | None = None,
                           shard_size: int = DEFAULT_SHARD_SIZE) -> ArgmaxLayerBootstrap:
    """Distribution of the best layer over label-stratified item bootstraps of an AUROC curve.

    ``scores`` (items, layers). ``kind="absolute"`` picks the layer maximising |AUROC − 0.5|,
    ``"signed"`` the one maximising AUROC − 0.5 for ``positive``. First layer wins ties.
    """
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim != 2:
        raise AnalysisError("scores", f"shape {x.shape}", "give scores as (items, layers)")
    if kind not in ("signed", "absolute"):
        raise AnalysisError("kind", f"{kind!r}", "use 'signed' or 'absolute'")
    mask = positive_mask(labels, positive)
    if mask.size != x.shape[0]:
        raise AnalysisError("labels", f"{mask.size} labels for {x.shape[0]} items", "give one label per item")
    layers = tuple(range(x.shape[1])) if layers is None else tuple(layers)
    if len(layers) != x.shape[1]:
        raise AnalysisError("layers", f"{len(layers)} labels for {x.shape[1]} layers", "one label per layer")
    pick = (lambda a: np.argmax(np.abs(a - 0.5), axis=-1)) if kind == "absolute" else \
        (lambda a: np.argmax(a - 0.5, axis=-1))
    observed = int(pick(auroc_from_ranks(midranks(x), mask)))
    auc = run_local(auroc_bootstrap_shard, AurocBootstrapData(x, mask), n_boot, seed, shard_size)
    return ArgmaxLayerBootstrap(kind, positive, layers, observed, pick(auc).astype(np.int64))
