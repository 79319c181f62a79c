"""lens charts (PNG bytes, ``analysis.plotting``'s look): AUROC by layer across wrappers, and the spread of the
headline over wrappers per model. The G-study's charts come from ``analysis.plotting.gstudy_charts``."""

from __future__ import annotations

from mirrorscan.analysis.plotting import png, pyplot
from mirrorscan.grid.formatting import count


def auroc_by_layer(curves: dict, title: str) -> bytes:
    """One line per wrapper: AUROC against layer, chance at 0.5."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    for (e, d), curve in curves.items():
        ax.plot(curve.layers, curve.auroc, linewidth=0.8, alpha=0.6)
    ax.axhline(0.5, color="#444444", linewidth=0.8, linestyle="--")
    ax.set_xlabel("layer (0 = embedding output)")
    ax.set_ylabel("AUROC")
    ax.set_ylim(0, 1)
    ax.set_title(f"{title}: one line per wrapper ({len(curves)})", fontsize=9)
    return png(fig)


def headline_spread(rows: list[dict], positive: str) -> bytes:
    """Per model and variant, every wrapper's max over layers of AUROC − 0.5 (dots) and their box."""
    plt = pyplot()
    keys = sorted({(r["label"], r["variant"]) for r in rows})
    values = [[r["max_auroc_minus_half"] for r in rows if (r["label"], r["variant"]) == k] for k in keys]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(keys) + 2), 4.2))
    ax.boxplot(values, showfliers=False)
    for i, v in enumerate(values, 1):
        ax.scatter([i] * len(v), v, s=8, alpha=0.5, color="#4C72B0")
    ax.set_xticks(range(1, len(keys) + 1), [f"{l}\n{v}" for l, v in keys], fontsize=7)
    ax.axhline(0.0, color="#444444", linewidth=0.8, linestyle="--")
    ax.set_ylabel(f"max over layers of AUROC − 0.5 (positive = {positive})")
    ax.set_title("the headline over wrappers, per model", fontsize=9)
    return png(fig)


def scaling_by_wrapper(parameters: dict, rows: list[dict], variant: str, positive: str) -> bytes:
    """One line per wrapper: the headline against log10(parameters) across models."""
    import math

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    models = sorted(parameters, key=lambda m: parameters[m])
    x = [math.log10(parameters[m]) for m in models]
    for wrapper in sorted({r["wrapper"] for r in rows if r["variant"] == variant}):
        value = {r["label"]: r["max_auroc_minus_half"] for r in rows if r["variant"] == variant and r["wrapper"] == wrapper}
        if all(m in value for m in models):
            ax.plot(x, [value[m] for m in models], linewidth=0.8, alpha=0.5, marker="o", markersize=2)
    ax.set_xticks(x, [f"{m}\n{count(parameters[m])}" for m in models], fontsize=7)
    ax.set_xlabel("model (parameters, log scale)")
    ax.set_ylabel(f"max over layers of AUROC − 0.5 (positive = {positive})")
    ax.set_title(f"scaling per wrapper ({variant}): one line each", fontsize=9)
    return png(fig)
