"""From stored per-layer vectors to each wrapper's direction, the scoring items' projections, and the AUROC curve.

For one model and variant, at every layer l:

    direction(e, d)[l] = mean over task texts t of v(e ∘ t)[l]  −  mean over t of v(d ∘ t)[l]
    projection(i)[l]   = ⟨v(i)[l], direction[l]⟩        (scoring item i in its fixed rendering)

where v(x)[l] is the pooled activation of text x at layer l (layer 0 the embedding output, 1…L the blocks)
and e ∘ t is task text t in evaluation framing e. Since the projection is linear in the direction, a
framing's mean is projected once and a wrapper's projections are the difference of its two framings'
(``framing_projections``): 36 wrappers cost 12 projections. AUROC is invariant to the direction's
length, so directions are not normalised here; ``unit_direction`` gives the normalised one.

The headline of one curve is the max over the layers that enter the max (the blocks 1…L by default) of
AUROC − 0.5 for the configured positive class, and of |AUROC − 0.5|, with the layer and its relative depth
layer / L (Manek 2026 reports the same depth).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mirrorscan.analysis.auroc import auroc, max_deviation


@dataclass(frozen=True)
class Curve:
    """One AUROC-by-layer curve and its maxima."""

    layers: tuple[int, ...]
    """Layer numbers that entered the max (0 = embedding output)."""
    auroc: np.ndarray
    """AUROC per entry of ``layers``, positive class as configured (dimensionless, 0.5 = chance)."""
    max_auroc_minus_half: float
    """max over ``layers`` of AUROC − 0.5 (signed: the positive class ranked above the other)."""
    max_layer: int
    """The layer of that maximum (first on ties)."""
    max_abs_auroc_minus_half: float
    """max over ``layers`` of |AUROC − 0.5| (separation in either direction)."""
    max_abs_layer: int
    relative_depth: float
    """max_layer / L, L the number of blocks."""

    def to_json(self) -> dict:
        """Plain dict: AUROC per layer and both maxima with their layers and the relative depth."""
        return {"auroc_by_layer": {str(l): float(a) for l, a in zip(self.layers, self.auroc)},
                "max_auroc_minus_half": self.max_auroc_minus_half, "layer": self.max_layer,
                "relative_depth": self.relative_depth, "max_abs_auroc_minus_half": self.max_abs_auroc_minus_half,
                "abs_layer": self.max_abs_layer}


def layer_curve(projections: np.ndarray, labels: Sequence, positive: str, layers: Sequence[int],
                n_blocks: int) -> Curve:
    """The curve of scores ``projections`` (items, len(layers)) for ``labels``; ``n_blocks`` = L."""
    auc = np.atleast_1d(auroc(projections, labels, positive))
    best = max_deviation(auc)
    layers = tuple(int(l) for l in layers)
    return Curve(layers, auc, float(best.signed), layers[best.signed_layer], float(best.absolute),
                 layers[best.absolute_layer], layers[best.signed_layer] / n_blocks)


def layers_in_max(n_layers: int, layer_set: str) -> list[int]:
    """Layer numbers entering the max (``n_layers`` = L + 1 vectors per text): ``blocks`` 1…L, ``all`` 0…L,
    ``manek`` 1…L−1 (Manek's reference code: the blocks without the last, whose output transformers returns
    after the final norm). Raises ValueError for another name, or a set with no layer in it."""
    if layer_set not in ("blocks", "all", "manek"):
        raise ValueError(f"unknown layer set {layer_set!r}")
    layers = list(range(0 if layer_set == "all" else 1, n_layers - 1 if layer_set == "manek" else n_layers))
    if not layers:
        raise ValueError(f"layer set {layer_set!r} holds no layer of a model with {n_layers - 1} block(s)")
    return layers


def framing_projections(scoring: np.ndarray, framing_means: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """framing → (items, layers): ⟨v(i)[l], mean task vector of the framing at l⟩ for every scoring item."""
    return {f: np.einsum("ild,ld->il", scoring, m) for f, m in framing_means.items()}


def wrapper_projections(projected: dict[str, np.ndarray], evaluation: str, deployment: str) -> np.ndarray:
    """(items, layers): the scoring items projected onto the wrapper's direction (evaluation − deployment)."""
    return projected[evaluation] - projected[deployment]


def unit_direction(evaluation_mean: np.ndarray, deployment_mean: np.ndarray) -> np.ndarray:
    """(layers, hidden): the wrapper's direction at each layer scaled to length 1 (NaN where it is zero)."""
    diff = evaluation_mean - deployment_mean
    norm = np.linalg.norm(diff, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return diff / norm


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of (layers, hidden) directions, per layer (NaN where one is zero)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
