"""Scaling: does a score rise with model size — in every wrapper, or only in the one that was reported?

Per wrapper w, the Pearson and Spearman correlation across models of s[:, w] with log10(parameter
count). The result is the *distribution over wrappers* (how many positive, how many negative, their
quantiles), never one number: a single-wrapper correlation is mostly a property of that wrapper. For a
test of a pooled scaling claim see :class:`analysis.claims.ScalingCorrelation`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from mirrorscan.analysis.claims import correlate_rows
from mirrorscan.analysis.errors import AnalysisError


@dataclass(frozen=True)
class CorrelationSpread:
    """One correlation computed per wrapper, summarised over wrappers."""

    method: str
    """``pearson`` (linear, on log10 params) or ``spearman`` (rank)."""
    per_wrapper: np.ndarray
    """(wrappers,) correlation in [−1, 1]; NaN where a wrapper's scores do not vary across models."""

    @property
    def n_positive(self) -> int:
        """Wrappers with a correlation > 0."""
        return int(np.sum(self.per_wrapper > 0))

    @property
    def n_negative(self) -> int:
        """Wrappers with a correlation < 0."""
        return int(np.sum(self.per_wrapper < 0))

    @property
    def n_zero(self) -> int:
        """Wrappers with a correlation of exactly 0."""
        return int(np.sum(self.per_wrapper == 0))

    @property
    def n_undefined(self) -> int:
        """Wrappers where the correlation is undefined (constant scores)."""
        return int(np.sum(np.isnan(self.per_wrapper)))

    def quantiles(self) -> dict:
        """min, 25 %, median, 75 %, max over wrappers with a defined correlation (None if none)."""
        r = self.per_wrapper[~np.isnan(self.per_wrapper)]
        if r.size == 0:
            return {k: None for k in ("min", "p25", "median", "p75", "max")}
        q = np.quantile(r, [0.0, 0.25, 0.5, 0.75, 1.0])
        return dict(zip(("min", "p25", "median", "p75", "max"), map(float, q)))

    def to_json(self, wrappers: Sequence[str] | None = None) -> dict:
        """Plain dict: counts by sign, quantiles and every per-wrapper value."""
        names = [str(w) for w in wrappers] if wrappers is not None else \
            [str(k) for k in range(self.per_wrapper.size)]
        return {"method": self.method, "n_wrappers": int(self.per_wrapper.size),
                "n_positive": self.n_positive, "n_negative": self.n_negative, "n_zero": self.n_zero,
                "n_undefined": self.n_undefined, "quantiles": self.quantiles(),
                "per_wrapper": {w: (None if r != r else float(r)) for w, r in zip(names, self.per_wrapper)}}


@dataclass(frozen=True)
class ScalingByWrapper:
    """Per-wrapper correlations of a score with log10(parameters), Pearson and Spearman."""

    log10_params: np.ndarray
    """(models,) log10 of the parameter counts used."""
    pearson: CorrelationSpread
    """Pearson r per wrapper (linear in log10 parameters)."""
    spearman: CorrelationSpread
    """Spearman ρ per wrapper (monotone; same for params and log10 params)."""
    wrappers: tuple
    """Wrapper names, in column order."""

    def to_json(self) -> dict:
        """Plain dict with both spreads."""
        return {"n_models": int(self.log10_params.size), "pearson": self.pearson.to_json(self.wrappers),
                "spearman": self.spearman.to_json(self.wrappers)}


def scaling_by_wrapper(scores: Any, n_params: Any, wrappers: Sequence[str] | None = None) -> ScalingByWrapper:
    """Correlation of s[model, wrapper] with log10(n_params[model]) separately in each wrapper.

    ``n_params`` are raw parameter counts (> 0; e.g. 1.5e9). Returns both Pearson and Spearman spreads
    over wrappers; report the counts by sign, not one pooled value.
    """
    s = np.asarray(scores, dtype=np.float64)
    p = np.asarray(n_params, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] < 3:
        raise AnalysisError("scores", f"shape {s.shape}; expected (models ≥ 3, wrappers)",
                            "give one row per model and one column per wrapper")
    if p.shape != (s.shape[0],):
        raise AnalysisError("n_params", f"{p.size} parameter counts for {s.shape[0]} models",
                            "give one count per model, in row order")
    if not (p > 0).all():
        raise AnalysisError("n_params", "parameter counts must be positive", "give counts such as 1.5e9")
    if not np.isfinite(s).all():
        raise AnalysisError("scores", f"{int((~np.isfinite(s)).sum())} missing per-wrapper score(s)",
                            "complete the model × wrapper table (absence is not zero)")
    if len(np.unique(p)) < 2:
        raise AnalysisError("n_params", "every model has the same size", "compare models of different sizes")
    x = np.log10(p)
    names = tuple(range(s.shape[1])) if wrappers is None else tuple(wrappers)
    if len(names) != s.shape[1]:
        raise AnalysisError("wrappers", f"{len(names)} names for {s.shape[1]} wrappers", "one name per column")
    return ScalingByWrapper(x, CorrelationSpread("pearson", correlate_rows(x, s.T, "pearson")),
                            CorrelationSpread("spearman", correlate_rows(x, s.T, "spearman")), names)
