"""Resampling of one wrapper's headline: the estimator-level contrastive null and the argmax-layer bootstrap.

**Contrastive null** (null b). The direction is the mean over task texts of δ_t = v(e ∘ t) − v(d ∘ t). If
the framings carried nothing the model represents, which of a text's two framings counts as evaluation
would not matter: each draw flips the sign of every δ_t with probability ½, rebuilds the direction,
rescores the items and retakes the max over layers. Projections are linear in the direction, so each
text's projections P_t = ⟨v(i), δ_t⟩ are computed once and a draw is a signed mean of them. Per
(model, wrapper): the null's mean (the floor), sd, z and p = (b + 1)/(B + 1); per model, the same for the
mean over wrappers. Every wrapper of a model draws the same sign vectors (one seed per model, the task texts
in sorted id order), so draw b swaps the same texts' framings in every wrapper and the wrappers' draws b
average into one draw of the mean's null; independent draws per wrapper would ignore that wrappers sharing a
framing move together and make that null too narrow.

It differs from the scoring-label floor (null a, ``analysis.nulls``): that one asks whether the items'
labels matter for a fixed direction; this one whether the direction itself is more than chance.

**Argmax-layer bootstrap** (``analysis.bootstrap``): items resampled within class, the best layer retaken;
reported as the share of the layer stack the best layer moves across and the number of distinct best layers.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from mirrorscan.analysis.auroc import auroc_from_ranks, positive_mask
from mirrorscan.analysis.bootstrap import argmax_layer_bootstrap
from mirrorscan.analysis.resampling import permutation_p_value, run_local, summarise_null


def seed_for(seed: int, *parts: str) -> np.random.SeedSequence:
    """A seed sequence for one named piece of work (stable across runs and processes)."""
    return np.random.SeedSequence([seed, *(zlib.crc32(p.encode()) for p in parts)])


@dataclass(frozen=True)
class ContrastiveData:
    """Input of a contrastive-null shard."""

    per_text: np.ndarray
    """(texts, items, layers): scoring items projected on each task text's own difference δ_t."""
    mask: np.ndarray
    """(items,) True for the positive class."""


def contrastive_shard(data: ContrastiveData, seed_seq, n_draws: int) -> np.ndarray:
    """(n_draws, 2): max over layers of AUROC − 0.5 and of |AUROC − 0.5| with each text's sign flipped at random."""
    from scipy.stats import rankdata

    rng = np.random.default_rng(seed_seq)
    texts, items, layers = data.per_text.shape
    signs = rng.choice(np.array([-1.0, 1.0]), size=(n_draws, texts))
    scores = np.einsum("bt,til->ibl", signs, data.per_text) / texts        # (items, draws, layers)
    ranks = rankdata(scores.reshape(items, -1), method="average", axis=0).reshape(items, n_draws, layers)
    auc = auroc_from_ranks(ranks.reshape(items, -1), data.mask).reshape(n_draws, layers)
    return np.stack([np.max(auc - 0.5, axis=1), np.max(np.abs(auc - 0.5), axis=1)], axis=1)


def per_text_projections(scoring: np.ndarray, evaluation: dict, deployment: dict, layers: list[int]) -> np.ndarray:
    """(texts, items, len(layers)): ⟨v(i)[l], v(e ∘ t)[l] − v(d ∘ t)[l]⟩ for the task texts both framings hold."""
    shared = sorted(set(evaluation) & set(deployment))
    deltas = np.stack([evaluation[t][layers] - deployment[t][layers] for t in shared])   # (texts, layers, hidden)
    return np.einsum("ild,tld->til", scoring[:, layers], deltas)


def contrastive_null(per_text: np.ndarray, labels: list, positive: str, n_draws: int, seed) -> np.ndarray:
    """(n_draws, 2) null draws of the signed and absolute maxima (module docstring)."""
    return run_local(contrastive_shard, ContrastiveData(per_text, positive_mask(labels, positive)), n_draws, seed)


def contrastive_summary(observed: float, null: np.ndarray, what: str) -> dict:
    """floor (null mean), sd, z, one-sided p (above the null) and two-sided p (2 × the smaller tail, at most 1)
    of ``observed`` against the signed null draws ``null`` (draws,)."""
    s = summarise_null(f"{what}; null: task texts' framings swapped at random", observed, null, "greater")
    below = permutation_p_value(observed, null, "less")
    return {"observed": observed, "floor": s.null_mean, "sd": s.null_sd, "z": None if s.z != s.z else s.z,
            "p_value": s.p_value, "p_two_sided": min(1.0, 2 * min(s.p_value, below)), "draws": int(null.size)}


def argmax_stability(scores: np.ndarray, labels: list, positive: str, layers: list[int], n_boot: int, seed) -> dict:
    """Share of the layer stack the best layer (max of AUROC − 0.5) moves across over item bootstraps
    ((max − min position) ÷ (layers − 1), ``analysis.bootstrap.argmax_spread``), and the number of distinct
    best layers."""
    boot = argmax_layer_bootstrap(scores, labels, positive, n_boot, seed, kind="signed", layers=layers)
    return {"spread": boot.spread, "distinct_layers": boot.n_distinct, "draws": int(n_boot)}
