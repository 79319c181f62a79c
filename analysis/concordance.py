"""Kendall's W: do the raters (wrappers) agree on the ranking of the objects (models)?

Input ``ratings`` is (objects, raters): in mirrorscan, rows are models and columns are wrappers, and
each wrapper ranks the models by their score. Ranks are mid-ranks within each rater.

    S   = Σ_i (R_i − mean R)²,  R_i = sum over raters of object i's rank
    W   = 12 S / (m² (n³ − n))                                   (no tie correction)
    W_t = 12 S / (m² (n³ − n) − m Σ_raters Σ_ties (t³ − t))      (tie-corrected)
    χ²  = m (n − 1) W  on n − 1 df (Friedman's statistic for W_t)

with n objects and m raters. W ∈ [0, 1]: 1 = every rater gives the same ranking; under no agreement
E[W] = 1/m. The permutation p-value shuffles each rater's ranks independently (ties stay inside a
rater, so W and W_t give the same p). The reference distribution simulates designs of the same shape
*with* a real object effect, to say what W would look like if the objects truly differed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import chi2, rankdata

from mirrorscan.analysis.design import complete_table
from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.resampling import DEFAULT_SHARD_SIZE, NullSummary, Seed, run_local, summarise_null


@dataclass(frozen=True)
class KendallW:
    """Kendall's coefficient of concordance with its χ² approximation, both with and without ties."""

    w: float
    """W without tie correction, in [0, 1]."""
    w_tie_corrected: float
    """W_t, corrected for tied ranks within raters; equals W when there are no ties."""
    chi2: float
    """m (n − 1) W (uncorrected)."""
    chi2_tie_corrected: float
    """m (n − 1) W_t (= Friedman's χ² with tie correction)."""
    df: int
    """n − 1."""
    p_value: float
    """Upper tail of χ²(df) at ``chi2``: large-sample test of W = 0."""
    p_value_tie_corrected: float
    """Upper tail of χ²(df) at ``chi2_tie_corrected``."""
    n_objects: int
    """n, objects ranked (models)."""
    n_raters: int
    """m, raters (wrappers)."""

    def to_json(self) -> dict:
        """Plain dict of every field."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _ratings(ratings: Any) -> np.ndarray:
    return complete_table(ratings, "ratings", "objects", "raters",
                          "give one column per rater (wrapper) and one row per object (model)")


def _tie_term(ranks: np.ndarray) -> float:
    """Σ over raters and tie groups of (t³ − t)."""
    total = 0.0
    for col in ranks.T:
        _, t = np.unique(col, return_counts=True)
        total += float(np.sum(t.astype(np.float64) ** 3 - t))
    return total


def _s(rank_sums: np.ndarray) -> np.ndarray:
    """S = Σ (R_i − mean R)² along the last axis."""
    return np.sum((rank_sums - rank_sums.mean(axis=-1, keepdims=True)) ** 2, axis=-1)


def kendall_w(ratings: Any) -> KendallW:
    """Kendall's W (and tie-corrected W_t) of an (objects, raters) table, with χ² tests.

    Measures agreement of rankings across raters (dimensionless, 0–1). It is not a correlation between
    two raters and not a G-theory coefficient (Eρ² also weighs the size of the object variance).
    """
    x = _ratings(ratings)
    n, m = x.shape
    ranks = rankdata(x, method="average", axis=0)
    s = float(_s(ranks.sum(axis=1)))
    base = m * m * (n ** 3 - n)
    w = 12.0 * s / base
    tied = base - m * _tie_term(ranks)
    wt = 12.0 * s / tied if tied > 0 else float("nan")   # every rater ties every object: no ranking to agree on
    df = n - 1
    return KendallW(w, wt, m * df * w, m * df * wt, df, float(chi2.sf(m * df * w, df)),
                    float(chi2.sf(m * df * wt, df)), n, m)


@dataclass(frozen=True)
class ConcordanceData:
    """Input of a permutation shard: mid-ranks (objects, raters) and the tie-corrected denominator."""

    ranks: np.ndarray
    """(objects, raters) mid-ranks within raters."""
    denominator: float
    """m² (n³ − n) − m Σ (t³ − t): unchanged by permuting within raters."""


def concordance_data(ratings: Any) -> ConcordanceData:
    """Prepare a ratings table for :func:`kendall_w_permutation_shard`."""
    x = _ratings(ratings)
    n, m = x.shape
    ranks = rankdata(x, method="average", axis=0)
    return ConcordanceData(ranks, float(m * m * (n ** 3 - n) - m * _tie_term(ranks)))


def kendall_w_permutation_shard(data: ConcordanceData, seed_seq: Any, n_draws: int) -> np.ndarray:
    """(n_draws,) tie-corrected W with every rater's ranks shuffled independently (no agreement)."""
    rng = np.random.default_rng(seed_seq)
    cols = rng.permuted(np.broadcast_to(data.ranks.T, (n_draws, *data.ranks.T.shape)), axis=2)
    return 12.0 * _s(cols.sum(axis=1)) / data.denominator


def kendall_w_permutation_test(ratings: Any, n_permutations: int = 10_000, seed: Seed = 0,
                               shard_size: int = DEFAULT_SHARD_SIZE) -> NullSummary:
    """Permutation null of W_t: p = (b + 1)/(m + 1), b = shuffles with W_t ≥ observed.

    Exact in small samples where the χ² approximation is not; the same p holds for uncorrected W.
    """
    data = concordance_data(ratings)
    n, m = data.ranks.shape
    observed = 12.0 * float(_s(data.ranks.sum(axis=1))) / data.denominator
    null = run_local(kendall_w_permutation_shard, data, n_permutations, seed, shard_size)
    return summarise_null(f"Kendall's W_t, {n} objects x {m} raters; null: ranks shuffled within raters",
                          observed, null, "greater")


@dataclass(frozen=True)
class WReferenceDesign:
    """A simulated design: object effect plus independent noise, ranked within each rater."""

    n_objects: int
    """Objects per design (models)."""
    n_raters: int
    """Raters per design (wrappers)."""
    object_sd: float
    """SD of the true object effect, in score units (the stated effect size)."""
    noise_sd: float = 1.0
    """SD of everything else in one object × rater score (interaction + error), in score units."""


def w_reference_shard(design: WReferenceDesign, seed_seq: Any, n_draws: int) -> np.ndarray:
    """(n_draws,) W of simulated designs: score[i, j] = a_i + e_ij, a ~ N(0, object_sd²), e ~ N(0, noise_sd²)."""
    rng = np.random.default_rng(seed_seq)
    n, m = design.n_objects, design.n_raters
    a = rng.normal(0.0, design.object_sd, size=(n_draws, n, 1))
    e = rng.normal(0.0, design.noise_sd, size=(n_draws, n, m))
    ranks = rankdata(a + e, method="average", axis=1)
    return 12.0 * _s(ranks.sum(axis=2)) / (m * m * (n ** 3 - n))


@dataclass(frozen=True)
class WReference:
    """Simulated distribution of W for a design of a given shape with a stated object effect."""

    design: WReferenceDesign
    """Shape and effect size simulated."""
    w: np.ndarray
    """(n_sims,) simulated W values, in shard order."""

    @property
    def median(self) -> float:
        """Median simulated W: what a real object effect of this size typically gives."""
        return float(np.median(self.w))

    def quantiles(self) -> dict:
        """Quantiles 0.05, 0.25, 0.5, 0.75, 0.95 of the simulated W."""
        q = np.quantile(self.w, [0.05, 0.25, 0.5, 0.75, 0.95])
        return dict(zip(("p05", "p25", "p50", "p75", "p95"), map(float, q)))

    def fraction_at_or_below(self, w: float) -> float:
        """Share of simulated designs whose W is ≤ w (how unusual an observed W is under this effect)."""
        return float(np.mean(self.w <= w))

    def to_json(self) -> dict:
        """Plain dict: the design simulated and quantiles of W."""
        return {"n_objects": self.design.n_objects, "n_raters": self.design.n_raters,
                "object_sd": self.design.object_sd, "noise_sd": self.design.noise_sd,
                "n_sims": int(self.w.size), "median": self.median, "quantiles": self.quantiles()}


def simulate_w_reference(n_objects: int, n_raters: int, object_sd: float, noise_sd: float = 1.0,
                         n_sims: int = 2000, seed: Seed = 0, shard_size: int = DEFAULT_SHARD_SIZE
                         ) -> WReference:
    """W for simulated designs of this shape in which the objects really differ (object_sd > 0).

    Effect size is object_sd/noise_sd; with G-study components use object_sd² = σ²(model) and
    noise_sd² = σ²(model:wrapper) + σ²(residual) of a one-item score. object_sd = 0 gives the
    no-agreement null (E[W] = 1/n_raters).
    """
    if n_objects < 2 or n_raters < 2:
        raise AnalysisError("design", f"{n_objects} objects × {n_raters} raters", "need at least 2 of each")
    if object_sd < 0 or noise_sd <= 0:
        raise AnalysisError("object_sd", f"object_sd={object_sd}, noise_sd={noise_sd}",
                            "give object_sd ≥ 0 and noise_sd > 0")
    design = WReferenceDesign(int(n_objects), int(n_raters), float(object_sd), float(noise_sd))
    return WReference(design, run_local(w_reference_shard, design, n_sims, seed, shard_size))
