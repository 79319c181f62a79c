"""Per-endpoint timing over time, from the inference log: the distributions of time to first token and of
decode rate, in equal slices of wall-clock time, and the SVG chart of each.

Rows come from the catalog's ``inference_log`` and from the parts spilled beside the traces when the catalog
was unreachable (a spilled row the catalog also holds, by ``row_uid``, is counted once). ``ttft_ms`` is the
engine's monotonic time from the request (or batch) start to its first content chunk; ``decode_tok_s`` is
(completion_tokens − 1) ÷ (total − ttft) in tokens per second; ``started_at`` is the engine's wall clock.
Quantiles are of the rows in a slice whose value is not null (a request that produced one token has no
decode rate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from mirrorscan.grid.formatting import fixed

METRICS = (("ttft_ms", "time to first token", "ms"), ("decode_tok_s", "decode rate", "tokens/s"))
"""(column, name, unit) of each distribution shown."""
QUANTILES = (0.1, 0.5, 0.9)
"""The quantiles drawn per slice (the band is p10–p90, the line p50)."""


@dataclass(frozen=True)
class Slice:
    """One slice of wall-clock time of one endpoint."""

    start: datetime
    """Wall clock (UTC) where the slice starts."""
    n: int
    """Requests started in the slice."""
    q: dict
    """metric → (p10, p50, p90), None where no row of the slice has the metric."""


@dataclass(frozen=True)
class EndpointTiming:
    """One endpoint's timing: its slices and its overall quantiles."""

    endpoint: str
    n: int
    """Requests logged for the endpoint."""
    overall: dict
    """metric → (p10, p50, p90) over all its rows (None when no row has it)."""
    slices: list[Slice]
    slice_s: float
    """Width of a slice, seconds."""


def gather(catalog_rows: list[tuple], spill_rows: list[tuple]) -> list[tuple]:
    """The catalog's rows plus the spilled rows whose row_uid the catalog does not hold; each row is
    (endpoint, started_at, ttft_ms, decode_tok_s, row_uid)."""
    seen = {r[4] for r in catalog_rows}
    extra, out = [], list(catalog_rows)
    for r in spill_rows:
        if r[4] not in seen:
            seen.add(r[4])
            extra.append(r)
    return out + extra


def _quantiles(values: np.ndarray) -> tuple | None:
    values = values[~np.isnan(values)]
    return tuple(float(x) for x in np.quantile(values, QUANTILES)) if values.size else None


def per_endpoint(rows: list[tuple], n_slices: int = 24) -> list[EndpointTiming]:
    """Group rows (as ``gather`` returns them) by endpoint, cut each endpoint's time span into ``n_slices``
    equal slices and take the quantiles of each metric per slice; rows without a start time count only in the
    overall quantiles. Endpoints by request count, most first."""
    groups: dict[str, list[tuple]] = {}
    for r in rows:
        groups.setdefault(r[0] or "(no endpoint)", []).append(r)
    out = []
    for endpoint, mine in groups.items():
        values = {m: np.array([math.nan if r[i] is None else float(r[i]) for r in mine])
                  for i, (m, _, _) in zip((2, 3), METRICS)}
        overall = {m: _quantiles(v) for m, v in values.items()}
        stamps = np.array([math.nan if r[1] is None else r[1].timestamp() for r in mine])
        timed = ~np.isnan(stamps)
        slices, width = [], 0.0
        if timed.any():
            lo, hi = float(stamps[timed].min()), float(stamps[timed].max())
            width = max((hi - lo) / n_slices, 1e-3)
            which = np.full(len(mine), -1, dtype=np.int64)
            which[timed] = np.minimum(np.floor((stamps[timed] - lo) / width).astype(np.int64), n_slices - 1)
            for k in range(n_slices):
                member = which == k
                if member.any():
                    slices.append(Slice(datetime.fromtimestamp(lo + k * width, timezone.utc), int(member.sum()),
                                        {m: _quantiles(v[member]) for m, v in values.items()}))
        out.append(EndpointTiming(endpoint, len(mine), overall, slices, width))
    return sorted(out, key=lambda e: (-e.n, e.endpoint))


def round_ceiling(value: float) -> float:
    """The axis top for a largest value of ``value`` (> 0): the smallest 1, 2, 4, 5 or 10 × 10^k at or above it,
    so that the axis's ticks (0, half, top) read as round numbers (8.4 ms → 10, 0.37 → 0.4, 230 → 400)."""
    scale = 10.0 ** math.floor(math.log10(value))
    return next(step * scale for step in (1, 2, 4, 5, 10) if step * scale >= value * (1 - 1e-12))


def chart(timing: EndpointTiming, metric: str, unit: str, width: int = 640, height: int = 180) -> str:
    """An SVG of one metric over time: the p10–p90 band and the p50 line per slice (presentation attributes
    only, no script, no style attribute), or "" when no slice has the metric."""
    points = [(s, s.q[metric]) for s in timing.slices if s.q.get(metric)]
    if not points:
        return ""
    pad_l, pad_b, pad_t = 56, 22, 8
    t0 = timing.slices[0].start.timestamp()
    span = max(timing.slices[-1].start.timestamp() + timing.slice_s - t0, 1e-3)
    top = round_ceiling(max(q[2] for _, q in points) * 1.05 or 1.0)

    def x(s: Slice) -> float:
        return pad_l + (s.start.timestamp() + timing.slice_s / 2 - t0) / span * (width - pad_l - 8)

    def y(v: float) -> float:
        return pad_t + (1 - v / top) * (height - pad_t - pad_b)

    band = [f"{x(s):.1f},{y(q[2]):.1f}" for s, q in points] + [f"{x(s):.1f},{y(q[0]):.1f}" for s, q in reversed(points)]
    line = " ".join(f"{x(s):.1f},{y(q[1]):.1f}" for s, q in points)
    dots = "".join(f'<circle cx="{x(s):.1f}" cy="{y(q[1]):.1f}" r="2.5" class="p50"/>' for s, q in points)
    axis = (f'<line x1="{pad_l}" y1="{height - pad_b}" x2="{width - 8}" y2="{height - pad_b}" class="axis"/>'
            f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{height - pad_b}" class="axis"/>')
    ticks = "".join(f'<text x="{pad_l - 4}" y="{y(v) + 4:.1f}" text-anchor="end" class="tick">{fixed(v)}</text>'
                    for v in (0.0, top / 2, top))
    first, last = timing.slices[0].start, timing.slices[-1].start
    labels = (f'<text x="{pad_l}" y="{height - 6}" class="tick">{first:%Y-%m-%d %H:%M:%S}</text>'
              f'<text x="{width - 8}" y="{height - 6}" text-anchor="end" class="tick">{last:%H:%M:%S} UTC</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img" aria-label="{metric} over time ({unit}): p10 to p90 band, p50 line">'
            f'<polygon points="{" ".join(band)}" class="band"/><polyline points="{line}" class="median"/>{dots}'
            f'{axis}{ticks}{labels}</svg>')
