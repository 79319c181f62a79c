"""Radar chart of flinch per axis (matplotlib, Agg backend): one polygon per model on the fixed 0–100 scale."""

from __future__ import annotations

import math

from mirrorscan.analysis.plotting import png, pyplot


def radar(models: list[dict], axis_labels: dict[str, str], title: str) -> bytes:
    """PNG bytes: each model's axis flinch values (0–100) on one radar, axes in ``axis_labels`` order.
    An axis a model lacks is drawn at 0 and named in the legend; the legend gives each total with the number
    of axes it sums, and a partial total as partial."""
    plt = pyplot()
    keys = list(axis_labels)
    angles = [2 * math.pi * i / len(keys) for i in range(len(keys))] + [0.0]
    fig, ax = plt.subplots(figsize=(5.5, 5.5), subplot_kw={"projection": "polar"})
    for m in models:
        values = [m["axes"].get(k, {}).get("flinch", 0.0) for k in keys]
        lacking = [k for k in keys if k not in m["axes"]]
        name = f"{m['model']} ({_total_words(m, len(keys))})" + (f", lacks {', '.join(lacking)}" if lacking else "")
        ax.plot(angles, values + values[:1], linewidth=1.5, label=name)
        ax.fill(angles, values + values[:1], alpha=0.12)
    ax.set_xticks(angles[:-1])
    ax.set_xticklabels([axis_labels[k] for k in keys], fontsize=8)
    ax.set_ylim(0, 100)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    return png(fig)


def _total_words(model: dict, n_axes: int) -> str:
    """A model's total for the legend: ``total 258.1, 6 of 6 axes``, ``partial 97.2, 4 of 6 axes`` or
    ``no total``; ``total_of`` (``numbers.totals``) names the count where the model has it."""
    if model.get("total_flinch") is not None:
        return f"total {model['total_flinch']:.1f}, {model.get('total_of') or f'{n_axes} axes'}"
    if model.get("partial_total_flinch") is not None:
        return f"partial {model['partial_total_flinch']:.1f}, {model.get('total_of', '').split(';')[0].removeprefix('partial: ')}"
    return "no total"
