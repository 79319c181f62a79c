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

Every proxy flinch carries its 95 % interval on the flinch scale: a term's is its Clopper–Pearson interval
of p mapped by the same map (flinch falls as p rises, so the interval's low end comes from p's upper bound;
p = 0 maps to 100), and holds even at k = 0, where the point value does not exist. An axis's interval holds
for all its m terms at once: each term's Clopper–Pearson interval at confidence 1 − 0.05/m (Bonferroni), the
ln-bounds averaged over the terms and mapped; since every term lies in its interval with probability at
least 1 − 0.05/m, the mean of their ln p lies in the averaged bounds with probability at least 95 %.
A difference between proxy flinch values is printed with the resolution beside it (``difference_text``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from mirrorscan.instruments.flinch.scale import flinch_of

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
    from scipy.stats import beta   # here, not at import: scipy.stats costs about a second to import

    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


def flinch_interval(low: float, high: float) -> tuple[float, float]:
    """The flinch-scale interval (points) of a probability interval [``low``, ``high``]: (flinch of ln high,
    flinch of ln low); a bound of 0 maps to 100 (ln 0 = −∞, clipped)."""
    return (flinch_of(math.log(high)) if high > 0 else 100.0, flinch_of(math.log(low)) if low > 0 else 100.0)


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
    flinch_low: float
    """Lower end of proxy_flinch's 95 % interval (flinch points): ``flinch_interval(ci_low, ci_high)``."""
    flinch_high: float
    """Upper end of proxy_flinch's 95 % interval (flinch points); 100 when k = 0."""


def proxy_score(k: int, n: int) -> ProxyScore:
    """The proxy from ``k`` hits in ``n`` samples, with its interval on both scales."""
    low, high = clopper_pearson(k, n)
    f_low, f_high = flinch_interval(low, high)
    if k == 0:
        return ProxyScore(k, n, 0.0, low, high, None, None, max_proxy_flinch(n), f_low, f_high)
    lp = math.log(k / n)
    return ProxyScore(k, n, k / n, low, high, lp, flinch_of(lp), None, f_low, f_high)


@dataclass(frozen=True)
class AxisProxy:
    """The proxy for one axis: its terms' ln p̂ averaged and mapped, with a simultaneous 95 % interval."""

    proxy_lp: float | None
    """Mean over the terms of ln p̂ (nats); None when a term had no hit."""
    proxy_flinch: float | None
    """flinch_of(proxy_lp), 0–100; None when a term had no hit."""
    flinch_low: float
    """Lower end of the axis's 95 % interval (flinch points; module docstring)."""
    flinch_high: float
    """Upper end of the axis's 95 % interval (flinch points); 100 when a term had no hit."""


def axis_proxy(counts: list[tuple[int, int]], confidence: float = 0.95) -> AxisProxy:
    """The proxy of an axis from its terms' (hits, samples): ``proxy_flinch`` maps the mean of the terms' ln p̂;
    the interval holds for all terms at once (each term's Clopper–Pearson interval at 1 − (1 − confidence)/m,
    its ln-bounds averaged, then mapped)."""
    if not counts:
        raise ValueError("an axis needs at least one term")
    per_term = 1.0 - (1.0 - confidence) / len(counts)
    bounds = [clopper_pearson(k, n, per_term) for k, n in counts]
    ln_low = sum(math.log(lo) if lo > 0 else -math.inf for lo, _ in bounds) / len(bounds)
    ln_high = sum(math.log(hi) for _, hi in bounds) / len(bounds)
    lp = None if any(k == 0 for k, _ in counts) else sum(math.log(k / n) for k, n in counts) / len(counts)
    return AxisProxy(lp, None if lp is None else flinch_of(lp), flinch_of(ln_high),
                     100.0 if ln_low == -math.inf else flinch_of(ln_low))


def interval_text(value: float | None, low: float, high: float) -> str:
    """A proxy flinch as printed: ``19.4 [12.0–27.3]``, or ``n/a [16.4–100]`` when the point value does not exist."""
    return f"{'n/a' if value is None else f'{value:.1f}'} [{low:.1f}–{high:.1f}]"


def difference_text(a: float | None, b: float | None) -> str:
    """The difference a − b of two proxy flinch values (points) as printed, the resolution beside it: the
    number and whether it is resolved, or why there is none."""
    if a is None or b is None:
        return f"Δ n/a (a term without hits has only a bound; proxy resolution {RESOLUTION:g})"
    delta = a - b
    verdict = "resolved" if abs(delta) >= RESOLUTION else "below the proxy's resolution"
    return f"Δ {delta:+.1f} (proxy resolution {RESOLUTION:g}: {verdict})"


def difference_lines(models: list[dict], keys: list[str]) -> list[str]:
    """With two or more proxy models (``numbers.proxy_scores``), each later one's per-axis difference from the
    first, each with the resolution beside it (``difference_text``); axes either lacks are left out."""
    if len(models) < 2:
        return []
    first = models[0]
    return [f"proxy {m['model']} − {first['model']}: " + "; ".join(
                f"{k} {difference_text(m['axes'][k]['proxy_flinch'], first['axes'][k]['proxy_flinch'])}"
                for k in keys if k in m["axes"] and k in first["axes"])
            for m in models[1:]]
