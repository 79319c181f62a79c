"""Shared machinery of every permutation and bootstrap: shards, seeds, p-values and null summaries.

Determinism contract (what lets a Ray driver stay thin): a resampling run of ``n_draws`` is cut into
fixed-size shards (``DEFAULT_SHARD_SIZE`` draws, the last one shorter); shard k draws from
``SeedSequence(root).spawn(n_shards)[k]``; each shard is computed by a pure function
``fn(data, seed_seq, n_draws) -> array`` whose first axis is the draw; the shard results are joined in
shard order. Which worker ran which shard, and how many workers there were, cannot change a byte.
:func:`run_local` is that loop on one process; a Ray driver maps the same function over the same
:func:`plan_shards` and calls :func:`reduce_in_order`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

import numpy as np

from mirrorscan.analysis.errors import AnalysisError

DEFAULT_SHARD_SIZE = 1000   # draws per shard: big enough to vectorise, small enough to spread over workers
_P_EPS = 1e-14              # relative tolerance for "as extreme as observed" (scipy.stats.permutation_test's)

Seed = int | Sequence[int] | np.random.SeedSequence | np.random.Generator
Alternative = Literal["greater", "less", "two-sided"]


@dataclass(frozen=True)
class Shard:
    """One unit of resampling work: its position, its own seed, and how many draws it makes."""

    index: int
    """Position in the run; results are reduced in this order."""
    seed: np.random.SeedSequence
    """``SeedSequence(root).spawn(n_shards)[index]``."""
    n_draws: int
    """Number of draws (permutations or bootstrap resamples) in this shard."""


def as_seed_sequence(seed: Seed) -> np.random.SeedSequence:
    """A root SeedSequence from an int, int sequence, SeedSequence (copied) or Generator.

    A Generator is consumed: two 63-bit draws from it become the root entropy, so passing the same
    Generator twice gives different (but reproducible) runs, as with any draw.
    """
    if isinstance(seed, np.random.Generator):
        return np.random.SeedSequence([int(x) for x in seed.integers(0, 2**63 - 1, size=2)])
    if isinstance(seed, np.random.SeedSequence):    # a fresh copy: spawning never depends on past spawns
        return np.random.SeedSequence(seed.entropy, spawn_key=seed.spawn_key, pool_size=seed.pool_size)
    if seed is None:
        raise AnalysisError("seed", "no seed given", "pass an int seed so the run can be reproduced")
    return np.random.SeedSequence(seed)


def plan_shards(n_draws: int, seed: Seed, shard_size: int = DEFAULT_SHARD_SIZE) -> tuple[Shard, ...]:
    """Cut ``n_draws`` into shards of ``shard_size`` with seeds spawned from ``seed``, in order."""
    if int(n_draws) < 1:
        raise AnalysisError("n_draws", f"{n_draws} draws", "ask for at least one draw")
    if int(shard_size) < 1:
        raise AnalysisError("shard_size", f"{shard_size}", "use a shard size of at least one draw")
    n_shards = math.ceil(n_draws / shard_size)
    seeds = as_seed_sequence(seed).spawn(n_shards)
    return tuple(Shard(k, s, min(shard_size, n_draws - k * shard_size)) for k, s in enumerate(seeds))


def reduce_in_order(parts: Sequence[np.ndarray]) -> np.ndarray:
    """Join shard results along the draw axis, in shard order (the caller keeps that order)."""
    return np.concatenate([np.asarray(p) for p in parts], axis=0)


def run_local(fn: Callable[[Any, np.random.SeedSequence, int], np.ndarray], data: Any,
              n_draws: int, seed: Seed, shard_size: int = DEFAULT_SHARD_SIZE) -> np.ndarray:
    """Run every shard of ``fn`` here, one after another, and reduce: the single-process driver."""
    return reduce_in_order([fn(data, s.seed, s.n_draws) for s in plan_shards(n_draws, seed, shard_size)])


def permutation_p_value(observed: float, null: np.ndarray, alternative: Alternative = "greater") -> float:
    """(b + 1) / (m + 1), b = draws at least as extreme as observed among m (never 0, never above 1).

    "greater": null ≥ observed; "less": null ≤ observed; "two-sided": |null| ≥ |observed| (for
    statistics centred on 0 under the null, such as a sign-flipped mean difference).
    """
    null = np.asarray(null, dtype=np.float64)
    tol = max(_P_EPS, abs(_P_EPS * observed))
    if alternative == "greater":
        b = np.count_nonzero(null >= observed - tol)
    elif alternative == "less":
        b = np.count_nonzero(null <= observed + tol)
    elif alternative == "two-sided":
        b = np.count_nonzero(np.abs(null) >= abs(observed) - tol)
    else:
        raise AnalysisError("alternative", f"{alternative!r}", "use 'greater', 'less' or 'two-sided'")
    return (int(b) + 1) / (null.size + 1)


@dataclass(frozen=True)
class NullSummary:
    """An observed statistic against its resampled null distribution."""

    statistic: str
    """What was measured, e.g. ``max_over_layers(AUROC - 0.5), positive=deployment``."""
    observed: float
    """The statistic on the data as labelled."""
    null: np.ndarray
    """The m null draws, in shard order (same bytes for any number of workers)."""
    alternative: Alternative
    """Which tail counts as extreme."""
    p_value: float
    """(b + 1)/(m + 1)."""
    null_mean: float
    """Mean of the null. For a max-over-layers statistic this is the layer-selection floor."""
    null_sd: float
    """Standard deviation of the null (ddof = 1)."""
    z: float
    """(observed − null_mean) / null_sd; NaN when the null has no spread."""
    quantiles: dict
    """Null quantiles at 0.05, 0.5, 0.95 and 0.99 (keys ``"p05"``...)."""

    @property
    def n_draws(self) -> int:
        """m, the number of null draws."""
        return int(self.null.size)

    @property
    def floor(self) -> float:
        """Null mean: what the statistic reaches on shuffled labels alone (layer-selection floor)."""
        return self.null_mean

    @property
    def floor_corrected(self) -> float:
        """observed − floor: the part of the statistic not explained by selecting the best of many."""
        return self.observed - self.null_mean

    def to_json(self) -> dict:
        """Plain dict without the raw draws (those go to Parquet beside it)."""
        return {"statistic": self.statistic, "observed": self.observed, "n_draws": self.n_draws,
                "alternative": self.alternative, "p_value": self.p_value, "null_mean": self.null_mean,
                "floor": self.floor, "floor_corrected": self.floor_corrected, "null_sd": self.null_sd,
                "z": None if self.z != self.z else self.z, "quantiles": dict(self.quantiles)}


def summarise_null(statistic: str, observed: float, null: np.ndarray,
                   alternative: Alternative = "greater") -> NullSummary:
    """p-value, mean, sd, z and quantiles of a null distribution for one observed statistic."""
    null = np.asarray(null, dtype=np.float64).ravel()
    mean = float(null.mean())
    sd = float(null.std(ddof=1)) if null.size > 1 else float("nan")
    z = (observed - mean) / sd if sd > 0 else float("nan")
    q = np.quantile(null, [0.05, 0.5, 0.95, 0.99])
    return NullSummary(statistic, float(observed), null, alternative,
                       permutation_p_value(observed, null, alternative), mean, sd, float(z),
                       {"p05": float(q[0]), "p50": float(q[1]), "p95": float(q[2]), "p99": float(q[3])})


@dataclass(frozen=True)
class BootstrapInterval:
    """A percentile bootstrap interval of one statistic."""

    statistic: str
    """What was measured."""
    estimate: float
    """The statistic on the original data."""
    low: float
    """Lower percentile bound."""
    high: float
    """Upper percentile bound."""
    level: float
    """Coverage, e.g. 0.95."""
    se: float
    """Bootstrap standard error (sd of the draws, ddof = 1)."""
    draws: np.ndarray
    """The bootstrap draws in shard order."""

    def to_json(self) -> dict:
        """Plain dict without the draws."""
        return {"statistic": self.statistic, "estimate": self.estimate, "low": self.low,
                "high": self.high, "level": self.level, "se": self.se, "n_draws": int(self.draws.size)}


def percentile_interval(statistic: str, estimate: float, draws: np.ndarray, level: float = 0.95
                        ) -> BootstrapInterval:
    """Percentile interval [q(α/2), q(1 − α/2)] of the draws, α = 1 − level; NaN draws are refused."""
    draws = np.asarray(draws, dtype=np.float64).ravel()
    if not 0 < level < 1:
        raise AnalysisError("level", f"{level}", "give a coverage in (0, 1), e.g. 0.95")
    if np.isnan(draws).any():
        raise AnalysisError(statistic, f"{int(np.isnan(draws).sum())} undefined bootstrap draws",
                            "use a statistic defined on every resample (e.g. more wrappers)")
    lo, hi = np.quantile(draws, [(1 - level) / 2, 1 - (1 - level) / 2])
    se = float(draws.std(ddof=1)) if draws.size > 1 else float("nan")
    return BootstrapInterval(statistic, float(estimate), float(lo), float(hi), level, se, draws)
