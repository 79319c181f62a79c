"""Radar chart of flinch per axis (matplotlib, Agg backend): one polygon per model on the fixed 0–100 scale, and the\nmethod's reference rows dashed beside them where given."""

from __future__ import annotations

import math
from collections.abc import Sequence

from mirrorscan.analysis.plotting import png, pyplot


def radar(models: list[dict], axis_labels: dict[str, str], title: str, references: Sequence[dict] = ()) -> bytes:
    """PNG bytes of ``radar_figure``."""
    return png(radar_figure(models, axis_labels, title, references))


def radar_figure(models: list[dict], axis_labels: dict[str, str], title: str, references: Sequence[dict] = ()):
    """The figure: each model's axis flinch values (0–100) on one radar, axes in ``axis_labels`` order, and each of
    ``references`` (``reference.radar_rows``: the method's table, scored on another corpus) dashed and unfilled
    after them. An axis a model lacks is drawn at 0 and named in the legend; the legend gives each total with the
    number of axes it sums, and a partial total as partial."""
    plt = pyplot()
    keys = list(axis_labels)
    angles = [2 * math.pi * i / len(keys) for i in range(len(keys))] + [0.0]
    fig, ax = plt.subplots(figsize=(5.5, 5.5), subplot_kw={"projection": "polar"})
    for m in models:
        values, name = _polygon(m, keys)
        ax.plot(angles, values + values[:1], linewidth=1.5, label=name)
        ax.fill(angles, values + values[:1], alpha=0.12)
    for m in references:
        values, name = _polygon(m, keys)
        ax.plot(angles, values + values[:1], linewidth=0.9, linestyle="--", alpha=0.7, label=name)
    ax.set_xticks(angles[:-1])
    ax.set_xticklabels([axis_labels[k] for k in keys], fontsize=8)
    ax.set_ylim(0, 100)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    return fig


def _polygon(model: dict, keys: list[str]) -> tuple[list[float], str]:
    """A model's values over ``keys`` (0 where it lacks an axis) and its legend entry."""
    values = [model["axes"].get(k, {}).get("flinch", 0.0) for k in keys]
    lacking = [k for k in keys if k not in model["axes"]]
    name = f"{model['model']} ({_total_words(model, len(keys))})" + (f", lacks {', '.join(lacking)}" if lacking else "")
    return values, name


def _total_words(model: dict, n_axes: int) -> str:
    """A model's total for the legend: ``total 258.1, 6 of 6 axes``, ``partial 97.2, 4 of 6 axes`` or
    ``no total``; ``total_of`` (``numbers.totals``) names the count where the model has it."""
    if model.get("total_flinch") is not None:
        return f"total {model['total_flinch']:.1f}, {model.get('total_of') or f'{n_axes} axes'}"
    if model.get("partial_total_flinch") is not None:
        return f"partial {model['partial_total_flinch']:.1f}, {model.get('total_of', '').split(';')[0].removeprefix('partial: ')}"
    return "no total"
