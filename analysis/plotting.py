"""The one plotting module of ``analysis/``: matplotlib on the Agg backend (no display), figures as PNG bytes.

``pyplot()`` and ``png(fig)`` are what every chart in the project uses (instruments' charts too), so
all charts share one look and one resolution. Charts of the G-study report:

* :func:`variance_component_bars` — every component's share of the variance of one observation
  (negative raw estimates drawn at zero and flagged in the label);
* :func:`d_study_curve` — Eρ² and Φ against the D-study size of one random facet (the others at their
  observed sizes), with the asymptote and the target drawn in.

Each function takes a :class:`~analysis.gtheory_report.GTheoryReport` and returns PNG bytes; writing
files is the caller's business. One chart reads the headline-intervals JSON instead
(:func:`analysis.headline_intervals.headline_intervals`, any instrument's ``numbers["intervals"]``):

* :func:`interval_chart` — per headline one panel, each model's estimate with its interval over the random
  facets as a thick bar and the naive interval (cells as independent) as a thin one.
"""

from __future__ import annotations

import io
import math
from typing import Any, Mapping

from mirrorscan.analysis.gtheory_report import GTheoryReport

def png(fig) -> bytes:
    """The figure as PNG bytes (110 dpi, tight bounding box); the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (imported here, on first use)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


_BAR = "#4C72B0"
_OBJECT = "#DD8452"


def variance_component_bars(report: GTheoryReport) -> bytes:
    """Horizontal bars: share of total variance per effect (object in orange), estimate in the label."""
    plt = pyplot()
    g = report.g
    comps = list(g.components)
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * len(comps) + 1.4))
    names = [c.name + (" (neg., set to 0)" if c.negative else "") for c in comps]
    shares = [g.share(c.name) if g.total_variance > 0 else 0.0 for c in comps]
    colours = [_OBJECT if c.facets == frozenset({g.object}) else _BAR for c in comps]
    ys = list(range(len(comps)))[::-1]
    ax.barh(ys, shares, color=colours, edgecolor="#444444", linewidth=0.5)
    for y, s, c in zip(ys, shares, comps):
        ax.text(s, y, f"  {100 * s:.1f}%  (σ² = {c.estimate:.4g})", va="center", fontsize=8)
    ax.set_yticks(ys, names, fontsize=8)
    ax.set_xlim(0, max(shares + [0.01]) * 1.45)
    ax.set_xlabel("share of the variance of one observation")
    ax.set_title(f"variance components (object: {g.object}; {g.n_observations} observations)")
    return png(fig)


def d_study_curve(report: GTheoryReport, facet: str) -> bytes:
    """Eρ² and Φ against n' of ``facet`` (log axis), others at observed sizes; asymptote and target lines."""
    plt = pyplot()
    est = report.estimated
    if facet not in est.curves:
        from mirrorscan.analysis.errors import AnalysisError

        raise AnalysisError("facet", f"{facet!r} is not a random facet {list(est.curves)}", "plot a random facet")
    curve = est.curves[facet]
    ns = [d.sizes[facet] for d in curve]
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    ax.plot(ns, [d.g_coefficient for d in curve], marker="o", ms=3, color=_BAR, label="Eρ² (relative)")
    ax.plot(ns, [d.phi for d in curve], marker="s", ms=3, color=_OBJECT, label="Φ (absolute)")
    lim = est.asymptotes[facet]
    ax.axhline(lim.g_coefficient, color=_BAR, linestyle=":", linewidth=1,
               label=f"Eρ² asymptote {lim.g_coefficient:.3f}")
    ax.axhline(report.target, color="#888888", linestyle="--", linewidth=0.8, label=f"target {report.target:g}")
    observed = report.g.sizes[facet]
    ax.axvline(observed, color="#444444", linewidth=0.6)
    ax.text(observed, 0.02, f" observed {observed}", fontsize=7, rotation=90, va="bottom")
    ax.set_xscale("log")
    ax.set_ylim(0, 1)
    held = ", ".join(f"{f}={v}" for f, v in est.observed.sizes.items() if f != facet)
    ax.set_xlabel(f"number of {facet} levels (n')" + (f"; held: {held}" if held else ""))
    ax.set_ylabel("coefficient")
    ax.set_title(f"D-study: coefficients against {facet}")
    ax.legend(fontsize=7, frameon=False, loc="lower right")
    return png(fig)


def gstudy_charts(report: GTheoryReport) -> dict[str, bytes]:
    """File name → PNG bytes: the component bars and one D-study curve per random facet."""
    out = {"variance_components.png": variance_component_bars(report)}
    for facet in report.estimated.curves:
        out[f"d_study_{facet}.png"] = d_study_curve(report, facet)
    return out


def _finite(*xs) -> bool:
    return all(x is not None and math.isfinite(x) for x in xs)


def interval_chart(result: Mapping[str, Any]) -> bytes | None:
    """Error bars of every headline that carries intervals, one panel each (models down the side, in the JSON's
    order): the estimate as a point, its interval over the random facets as a thick bar, the naive interval (cells
    as independent) as a thin dark bar over it, its ends marked (so a zero-width one shows); a zero line for percentage points. Headlines skipped in the JSON
    get no panel; None when none is left (nothing to draw). Bounds that are not finite are left out."""
    heads = [(name, h) for name, h in result.get("headlines", {}).items() if h.get("objects")]
    if not heads:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(len(heads), 1, squeeze=False,
                             figsize=(6.4, sum(0.42 * len(h["objects"]) + 1.0 for _, h in heads) + 0.3))
    level = f"{100 * float(result.get('level', 0.95)):.0f} %"
    for ax, (name, h) in zip(axes[:, 0], heads):
        objects = h["objects"]
        ys = list(range(len(objects)))[::-1]
        for y, o in zip(ys, objects):
            (lo, hi), (nlo, nhi) = o.get("interval") or (None, None), o.get("naive_interval") or (None, None)
            est = o.get("estimate")
            if _finite(lo, hi):
                ax.plot([lo, hi], [y, y], color=_BAR, linewidth=6, alpha=0.55, solid_capstyle="butt",
                        label=f"{level} interval over {', '.join(h.get('random', ())) or 'the facets'}"
                        if y == ys[0] else None)
            if _finite(nlo, nhi):
                ax.plot([nlo, nhi], [y, y], color="#222222", linewidth=1.4, solid_capstyle="butt", marker="|", ms=9,
                        label="naive (cells as independent)" if y == ys[0] else None)
            if _finite(est):
                ax.plot([est], [y], marker="o", ms=5, color=_OBJECT, markeredgecolor="#444444", linestyle="none",
                        label="estimate" if y == ys[0] else None)
        if h.get("unit") == "pp":
            ax.axvline(0, color="#888888", linewidth=0.6, linestyle=":")
        ax.set_yticks(ys, [str(o["object"]) for o in objects], fontsize=8)
        ax.set_ylim(-0.7, len(objects) - 0.3)
        unit = {"%": "percent", "pp": "percentage points", "": ""}.get(h.get("unit", ""), h.get("unit", ""))
        ax.set_xlabel(f"{h.get('title', name)}" + (f" ({unit})" if unit else ""), fontsize=8)
        ax.set_title(f"{h.get('title', name)}", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return png(fig)


__all__ = ["d_study_curve", "gstudy_charts", "interval_chart", "variance_component_bars"]
