"""Model-comparison claims tested against the wrappers: wrapper-permutation null and wrapper bootstrap.

A claim ("model A scores higher than B", "the score rises with parameter count") is computed from
per-wrapper scores ``s[model, wrapper]``. Because wrappers move scores a lot, the unit of replication is
the wrapper, not the item:

* **Null**: within each wrapper the model labels are exchangeable under "no model effect", so model
  labels are permuted independently inside every wrapper and the claim's statistic recomputed. With two
  models that is a random sign flip of d_w = s[A, w] − s[B, w] per wrapper.
* **Interval**: wrappers are resampled with replacement and the statistic recomputed (percentile
  interval) — how much the claim depends on which wrappers happened to be used.

Claims are small picklable objects whose ``__call__`` is vectorised over leading axes
(``(..., models, wrappers) → (...)``), so a shard computes a whole batch at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from scipy.stats import rankdata

from mirrorscan.analysis.design import complete_table
from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.resampling import (DEFAULT_SHARD_SIZE, Alternative, BootstrapInterval, NullSummary, Seed,
                                 percentile_interval, run_local, summarise_null)


@dataclass(frozen=True)
class MeanDifference:
    """Claim statistic: mean over wrappers of s[a, w] − s[b, w], in score units (not standardised)."""

    a: int
    """Row of model A."""
    b: int
    """Row of model B."""

    def __call__(self, s: np.ndarray) -> np.ndarray:
        """(..., models, wrappers) → (...) mean difference A − B."""
        return np.mean(s[..., self.a, :] - s[..., self.b, :], axis=-1)

    @property
    def name(self) -> str:
        """Human-readable statistic name."""
        return f"mean over wrappers of s[{self.a}] - s[{self.b}]"


@dataclass(frozen=True)
class ScalingCorrelation:
    """Claim statistic: correlation across models of the score with log10(parameter count).

    ``aggregate="wrapper_mean"`` correlates the wrapper-averaged score; ``"mean_of_wrappers"`` averages
    the per-wrapper correlations. Dimensionless in [−1, 1]; NaN where a score has no spread.
    """

    log10_params: np.ndarray = field(compare=False)
    """log10 of each model's parameter count, in model order."""
    method: Literal["pearson", "spearman"] = "pearson"
    """Pearson (linear) or Spearman (rank) correlation."""
    aggregate: Literal["wrapper_mean", "mean_of_wrappers"] = "wrapper_mean"
    """Correlate the wrapper mean, or average the per-wrapper correlations."""

    def __call__(self, s: np.ndarray) -> np.ndarray:
        """(..., models, wrappers) → (...) correlation."""
        x = np.asarray(self.log10_params, dtype=np.float64)
        if self.aggregate == "wrapper_mean":
            return correlate_rows(x, np.mean(s, axis=-1), self.method)
        return np.mean(correlate_rows(x, np.swapaxes(s, -1, -2), self.method), axis=-1)

    @property
    def name(self) -> str:
        """Human-readable statistic name."""
        return f"{self.method} correlation with log10 parameters ({self.aggregate})"


def correlate_rows(x: np.ndarray, y: np.ndarray, method: str = "pearson") -> np.ndarray:
    """Correlation of ``x`` (k,) with every row y[..., :] (k,) along the last axis; NaN if constant."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if method == "spearman":
        x, y = rankdata(x), rankdata(y, axis=-1)
    elif method != "pearson":
        raise AnalysisError("method", f"{method!r}", "use 'pearson' or 'spearman'")
    xc = x - x.mean()
    yc = y - y.mean(axis=-1, keepdims=True)
    den = np.sqrt(np.sum(xc * xc) * np.sum(yc * yc, axis=-1))
    num = np.sum(xc * yc, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return np.clip(r, -1.0, 1.0)


@dataclass(frozen=True)
class ClaimData:
    """Input of a claim shard: per-wrapper scores and the statistic."""

    scores: np.ndarray
    """s[model, wrapper], score units."""
    claim: Any
    """A claim object (MeanDifference, ScalingCorrelation or any picklable vectorised callable)."""


def _check(scores: Any) -> np.ndarray:
    return complete_table(scores, "scores", "models", "wrappers", "give one score per model and wrapper")


def wrapper_permutation_shard(data: ClaimData, seed_seq: Any, n_draws: int) -> np.ndarray:
    """(n_draws,) claim statistics with model labels permuted independently within every wrapper.

    Two models and a MeanDifference: a random sign per wrapper on d_w = s[A, w] − s[B, w] (the same
    distribution, drawn directly).
    """
    rng = np.random.default_rng(seed_seq)
    s = data.scores
    if isinstance(data.claim, MeanDifference) and s.shape[0] == 2:
        d = s[data.claim.a] - s[data.claim.b]
        signs = rng.choice(np.array([-1.0, 1.0]), size=(n_draws, d.size))
        return np.mean(signs * d, axis=-1)
    batch = rng.permuted(np.broadcast_to(s, (n_draws, *s.shape)), axis=1)
    return np.asarray(data.claim(batch), dtype=np.float64)


def wrapper_bootstrap_shard(data: ClaimData, seed_seq: Any, n_draws: int) -> np.ndarray:
    """(n_draws,) claim statistics on wrappers resampled with replacement (models kept together)."""
    rng = np.random.default_rng(seed_seq)
    s = data.scores
    idx = rng.integers(0, s.shape[1], size=(n_draws, s.shape[1]))
    return np.asarray(data.claim(s[:, idx].transpose(1, 0, 2)), dtype=np.float64)


def wrapper_permutation_null(scores: Any, claim: Any, n_permutations: int = 10_000, seed: Seed = 0,
                             alternative: Alternative = "two-sided",
                             shard_size: int = DEFAULT_SHARD_SIZE) -> NullSummary:
    """Is the claim's statistic larger than relabelling models within wrappers gives?

    ``scores`` s[model, wrapper]; ``claim`` e.g. ``MeanDifference(0, 1)`` or
    ``ScalingCorrelation(log10_params)``. Two-sided by default (p counts |null| ≥ |observed|; both claims
    are centred on 0 under the null). This tests the model effect against wrapper-to-wrapper variation,
    not against item sampling.
    """
    s = _check(scores)
    observed = float(claim(s))
    if observed != observed:
        raise AnalysisError("scores", "the claim's statistic is undefined on the data (no spread)",
                            "check that scores vary across models")
    null = run_local(wrapper_permutation_shard, ClaimData(s, claim), n_permutations, seed, shard_size)
    name = getattr(claim, "name", type(claim).__name__)
    return summarise_null(f"{name}; null: model labels permuted within wrappers", observed, null, alternative)


def wrapper_bootstrap(scores: Any, claim: Any, n_boot: int = 10_000, seed: Seed = 0, level: float = 0.95,
                      shard_size: int = DEFAULT_SHARD_SIZE) -> BootstrapInterval:
    """Percentile interval of the claim's statistic over wrappers resampled with replacement."""
    s = _check(scores)
    draws = run_local(wrapper_bootstrap_shard, ClaimData(s, claim), n_boot, seed, shard_size)
    name = getattr(claim, "name", type(claim).__name__)
    return percentile_interval(f"{name}; bootstrap over wrappers", float(claim(s)), draws, level)
