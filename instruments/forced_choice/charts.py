"""PNG charts of the forced-choice numbers (matplotlib, Agg backend: no display needed).

Each function takes the summaries and returns PNG bytes; writing them is the caller's business.
"""

from __future__ import annotations

from mirrorscan.analysis.plotting import png as _png
from mirrorscan.analysis.plotting import pyplot as _pyplot
from mirrorscan.instruments.forced_choice.fingerprint import compare_fingerprints
from mirrorscan.instruments.forced_choice.numbers import ModelSummary

_COLOURS = {"word_a": "#4C72B0", "word_b": "#DD8452", "unclear": "#BBBBBB", "incomplete": "#FFFFFF"}


def pair_commit_split(summaries: tuple[ModelSummary, ...]) -> bytes:
    """Stacked bars per model and rule: pairs committed to word_a / word_b / unclear / incomplete (counts)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(summaries) + 2), 3.6))
    names, rows = [], []
    for s in summaries:
        for pc in (s.pair_commit_unanimity, s.pair_commit_per_envelope_majority):
            names.append(f"{s.label}\n{pc.rule.replace('per_envelope_majority', 'per-env. majority')}")
            rows.append({"word_a": pc.n_word_a, "word_b": pc.n_word_b, "unclear": pc.n_unclear,
                         "incomplete": pc.n_incomplete})
    bottom = [0] * len(rows)
    for key, colour in _COLOURS.items():
        values = [r[key] for r in rows]
        ax.bar(names, values, bottom=bottom, color=colour, edgecolor="#444444", linewidth=0.5, label=key)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("pairs")
    ax.set_title("pair-commit split (committed to word_a / word_b / unclear)")
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    ax.tick_params(axis="x", labelsize=8)
    return _png(fig)


def position_bias_by_envelope(summaries: tuple[ModelSummary, ...]) -> bytes:
    """Grouped bars: position bias (percentage points, first-named minus second-named word_a share) per envelope."""
    plt = _pyplot()
    envelopes = sorted({e.scope for s in summaries for e in s.position_bias.per_envelope})
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(envelopes) * max(1, len(summaries)) + 2), 3.6))
    width = 0.8 / max(1, len(summaries))
    for k, s in enumerate(summaries):
        by_env = {e.scope: e.position_bias_pp for e in s.position_bias.per_envelope}
        xs = [i + k * width for i in range(len(envelopes))]
        ax.bar(xs, [by_env.get(e) or 0.0 for e in envelopes], width=width, label=s.label)
    ax.axhline(0, color="#444444", linewidth=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(envelopes))], envelopes, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(-105, 105)
    ax.set_ylabel("position bias (pp)")
    ax.set_title("position bias per envelope (+ = the first-named word is favoured)")
    ax.legend(fontsize=8, frameon=False)
    return _png(fig)


def fingerprint_agreement(summaries: tuple[ModelSummary, ...]) -> bytes:
    """Heat map of fingerprint agreement (share of pairs with the same verdict) between every two models."""
    plt = _pyplot()
    n = len(summaries)
    grid = [[compare_fingerprints(a.fingerprint, b.fingerprint).agreement for b in summaries] for a in summaries]
    fig, ax = plt.subplots(figsize=(2 + 0.9 * n, 1.6 + 0.8 * n))
    image = ax.imshow([[v if v is not None else float("nan") for v in row] for row in grid], vmin=0, vmax=1, cmap="viridis")
    labels = [s.label for s in summaries]
    ax.set_xticks(range(n), labels, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(n), labels, fontsize=8)
    for i in range(n):
        for j in range(n):
            if grid[i][j] is not None:
                ax.text(j, i, f"{grid[i][j]:.2f}", ha="center", va="center", color="white", fontsize=8)
    fig.colorbar(image, ax=ax, fraction=0.046)
    ax.set_title("fingerprint agreement")
    return _png(fig)
