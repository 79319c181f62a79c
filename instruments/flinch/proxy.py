"""The sampling proxy, for chat-only APIs that give no log-probabilities: how often the model, asked to
continue a carrier's prefix, starts with the term.

N samples (default 50) at temperature 1 and top_p 1. A **hit** is a continuation whose first word —
leading whitespace and punctuation stripped, compared case-insensitively — is the term; for a multi-word
term, its words in order. p̂ = k/N with a Clopper–Pearson 95 % interval; ``proxy_lp`` = ln p̂ and
``proxy_flinch`` its value on the fixed scale (``scale.flinch_of``).

It estimates the probability of the whole word as the first thing said, not a per-token mean: it lives
on its own named scale and is never mixed with exact rows. Its resolution is coarse: for k ≥ 1,
proxy_flinch ≤ (ln N − 1)/15 × 100 (≈ 19.4 at N = 50), and k = 0 gives only a bound, "≥ that value",
never a number. Differences under 10 are below its resolution.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from scipy.stats import beta

from instruments.flinch.scale import flinch_of

DEFAULT_SAMPLES = 50
"""Samples per carrier for the proxy."""
RESOLUTION = 10.0
"""Differences in proxy_flinch below this are not resolved (flinch points)."""
_WORD = re.compile(r"[\w'’-]+", re.UNICODE)


def is_hit(continuation: str, term: str) -> bool:
    """Whether ``continuation`` starts with ``term``: its first words (leading whitespace and punctuation
    skipped, case-insensitive) are the term's words, in order."""
    wanted = [w.casefold() for w in _WORD.findall(term)]
    said = [w.casefold() for w in _WORD.findall(continuation)[:len(wanted)]]
    return bool(wanted) and said == wanted


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper–Pearson) interval for a binomial proportion with ``k`` hits in ``n`` trials."""
    if not 0 <= k <= n or n <= 0:
        raise ValueError(f"need 0 ≤ k ≤ n and n > 0, got k={k}, n={n}")
    alpha = 1.0 - confidence
    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


def max_proxy_flinch(n: int) -> float:
    """The highest proxy_flinch k ≥ 1 hits in ``n`` samples can give: that of p̂ = 1/n (flinch points)."""
    return flinch_of(-math.log(n))


@dataclass(frozen=True)
class ProxyScore:
    """The proxy for one carrier (or pooled carriers) of one term."""

    k: int
    """Hits."""
    n: int
    """Samples."""
    p_hat: float
    """k / n."""
    ci_low: float
    """Clopper–Pearson 95 % lower bound of p."""
    ci_high: float
    """Clopper–Pearson 95 % upper bound of p."""
    proxy_lp: float | None
    """ln p̂ (nats); None when k = 0 (ln 0 is not a number)."""
    proxy_flinch: float | None
    """flinch_of(proxy_lp), 0–100; None when k = 0 (see ``proxy_flinch_at_least``)."""
    proxy_flinch_at_least: float | None
    """When k = 0, the bound the data support: proxy_flinch ≥ this (``max_proxy_flinch(n)``); else None."""


def proxy_score(k: int, n: int) -> ProxyScore:
    """The proxy from ``k`` hits in ``n`` samples."""
    low, high = clopper_pearson(k, n)
    if k == 0:
        return ProxyScore(k, n, 0.0, low, high, None, None, max_proxy_flinch(n))
    lp = math.log(k / n)
    return ProxyScore(k, n, k / n, low, high, lp, flinch_of(lp), None)
