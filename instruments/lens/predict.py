"""Predictions for new texts from an invocation's wrapper directions, with the spread across wrappers as their
uncertainty.

At one layer (by default the model's median best layer over wrappers), each wrapper w has a unit direction
u_w (evaluation − deployment, length 1). The **prediction** for a text with pooled vector v is its projection
on the normalised mean direction ū = mean_w u_w / |mean_w u_w|; its **uncertainty** is the sd (ddof 1) over
wrappers of ⟨v, u_w⟩ — how much the answer depends on which wrapper one had happened to pick. Both are in
activation units along the direction. The scoring set's projections on ū give each class's mean and sd at
the same layer, so a prediction can be read against them (``nearest_class``: the class whose mean is
nearer). At least ``MIN_WRAPPERS`` wrappers are required: with fewer, the sd is not worth reporting.

``prediction_basis`` builds what analyze writes for this (a document and a ``directions`` table);
``predict`` applies it to new vectors. No I/O here: ``instruments.lens.cli`` reads files and runs the model.
"""

from __future__ import annotations

import numpy as np

from mirrorscan.grid.errors import ConfigError

MIN_WRAPPERS = 9
"""Fewest wrappers a prediction is made from."""


def unit_directions(framing_means: dict, wrappers: list[tuple[str, str]], layer: int) -> np.ndarray:
    """(wrappers, hidden): each wrapper's direction at ``layer`` scaled to length 1."""
    dirs = np.stack([framing_means[e][layer] - framing_means[d][layer] for e, d in wrappers])
    return dirs / np.linalg.norm(dirs, axis=1, keepdims=True)


def mean_direction(units: np.ndarray) -> np.ndarray:
    """The normalised mean of unit directions (hidden,)."""
    mean = units.mean(axis=0)
    return mean / np.linalg.norm(mean)


def prediction_basis(ex, wrappers: list[tuple[str, str]], layer: int, positive: str) -> tuple[dict, list[dict]]:
    """(document, directions rows) of one model × variant at ``layer``: the unit direction of every wrapper, and
    the scoring classes' projections on the mean direction."""
    units = unit_directions(ex.framing_means(), wrappers, layer)
    projected = ex.scoring[:, layer] @ mean_direction(units)
    labels = np.asarray(ex.labels)
    classes = {c: {"mean": float(projected[labels == c].mean()), "sd": float(projected[labels == c].std(ddof=1)),
                   "n": int((labels == c).sum())} for c in sorted(set(ex.labels))}
    document = {"layer": layer, "n_layers": ex.n_layers, "positive_class": positive, "classes": classes,
                "wrappers": [f"{e}×{d}" for e, d in wrappers], "model": ex.source, "dtype": ex.dtype,
                "units": "activation units along the direction (projection on a unit vector)"}
    rows = [{"wrapper": f"{e}×{d}", "layer": layer, "direction": u.astype(np.float32).tolist()}
            for (e, d), u in zip(wrappers, units)]
    return document, rows


def predict(vectors: np.ndarray, units: np.ndarray, classes: dict) -> list[dict]:
    """Per text (rows of ``vectors`` (texts, hidden) at the basis's layer): the projection on the mean direction,
    the sd over wrappers of its projections on each wrapper's direction, and the nearest scoring class."""
    if units.shape[0] < MIN_WRAPPERS:
        raise ConfigError("", "wrappers", f"the basis holds {units.shape[0]} wrappers, fewer than {MIN_WRAPPERS}",
                          "run the invocation with more framings (3 × 3 at least)")
    if vectors.shape[1] != units.shape[1]:
        raise ConfigError("", "model", f"the texts' vectors are {vectors.shape[1]} wide, the directions "
                          f"{units.shape[1]}", "extract with the model the invocation ran")
    scores = vectors @ mean_direction(units)
    per_wrapper = vectors @ units.T
    out = []
    for score, spread in zip(scores, per_wrapper):
        nearest = min(classes, key=lambda c: abs(classes[c]["mean"] - score))
        out.append({"score": float(score), "sd_over_wrappers": float(spread.std(ddof=1)), "nearest_class": nearest,
                    "min_over_wrappers": float(spread.min()), "max_over_wrappers": float(spread.max())})
    return out
