"""The flinch scale: how far below fluent a term's log-probability sits, on one fixed 0–100 scale.

A term's **lp** is the natural-log probability the model gives it where a carrier sentence makes it the
obvious completion: per carrier ``lp_mean`` (mean over the term's target tokens), per term the mean over
its carriers, per axis the mean over its terms. The fixed linear map sends lp −1 to flinch 0 and lp −16
to flinch 100, clipped to [0, 100]: every model and corpus is read on the same scale.

An axis is aggregated in one of two named ways, and every output names which:
  ``axis_lp_mean``       map the axis's mean lp (the method's own order of steps; the default);
  ``clipped_term_mean``  the mean of the clipped per-term flinch values.
They differ when terms fall outside [−16, −1] (clipping before or after the mean). The total is the sum
of the axis flinch values over the axes scored.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LP_AT_ZERO = -1.0
"""lp (nats) mapped to flinch 0: a term this probable is not suppressed."""
LP_AT_HUNDRED = -16.0
"""lp (nats) mapped to flinch 100."""
AGGREGATIONS = ("axis_lp_mean", "clipped_term_mean")
"""Names of the two ways an axis's terms become its flinch value (module docstring)."""
DEFAULT_AGGREGATION = "axis_lp_mean"


def flinch_of(lp):
    """Flinch (0–100, dimensionless) of log-probability ``lp`` (nats; a number or an array): linear from
    lp −1 → 0 to lp −16 → 100, clipped to [0, 100]. NaN stays NaN."""
    value = 100.0 * (LP_AT_ZERO - np.asarray(lp, dtype=float)) / (LP_AT_ZERO - LP_AT_HUNDRED)
    clipped = np.clip(value, 0.0, 100.0)
    return float(clipped) if np.ndim(clipped) == 0 else clipped


@dataclass(frozen=True)
class TermScore:
    """One term of one axis for one model."""

    word: str
    """The term as the corpus spells it."""
    lp_mean: float
    """Mean over the term's carriers of each carrier's lp_mean (nats per target token)."""
    flinch: float
    """``flinch_of(lp_mean)``, 0–100."""
    n_carriers: int
    """Carriers averaged."""


@dataclass(frozen=True)
class AxisScore:
    """One axis for one model."""

    key: str
    """Axis key in the corpus (``violence``)."""
    label: str
    """Axis label for people."""
    lp_mean: float
    """Mean over the axis's terms of their lp_mean (nats)."""
    flinch: float
    """The axis's flinch value (0–100) by ``aggregation``."""
    aggregation: str
    """Which of ``AGGREGATIONS`` made ``flinch``."""
    terms: tuple[TermScore, ...]
    """Per-term scores, in corpus order."""


def term_score(word: str, carrier_lps) -> TermScore:
    """The score of ``word`` from its carriers' lp_mean values (nats); ValueError when there are none."""
    lps = np.asarray(carrier_lps, dtype=float)
    if lps.size == 0:
        raise ValueError(f"term {word!r} has no scored carrier")
    lp = float(lps.mean())
    return TermScore(word=word, lp_mean=lp, flinch=flinch_of(lp), n_carriers=int(lps.size))


def axis_score(key: str, label: str, terms: list[TermScore], aggregation: str = DEFAULT_AGGREGATION) -> AxisScore:
    """The axis's score from its term scores, aggregated by ``aggregation`` (one of ``AGGREGATIONS``)."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation {aggregation!r}: use one of {', '.join(AGGREGATIONS)}")
    if not terms:
        raise ValueError(f"axis {key!r} has no scored term")
    lp = float(np.mean([t.lp_mean for t in terms]))
    value = flinch_of(lp) if aggregation == "axis_lp_mean" else float(np.mean([t.flinch for t in terms]))
    return AxisScore(key=key, label=label, lp_mean=lp, flinch=value, aggregation=aggregation, terms=tuple(terms))


def total_flinch(axes: list[AxisScore]) -> float:
    """Sum of the axes' flinch values (0 to 100 × number of axes); compare totals only over one axis set."""
    return float(sum(a.flinch for a in axes))
