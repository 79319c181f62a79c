"""Claims across models, with the wrapper as the unit of replication: model comparisons against the
wrapper-permutation null (null c), and scaling with parameter count per wrapper.

* **Model comparison** (``analysis.claims``): for every pair of models, the mean over wrappers of the
  headline difference A − B, its two-sided p under model labels permuted within each wrapper, and its
  percentile interval over wrappers resampled with replacement; beside them (``paired``) the same pair's
  paired difference from the headline intervals (``intervals``, ``analysis.intervals``): the mean over wrappers
  of A − B with its interval over framings and scoring items, its t-test p and that p Holm-adjusted over every
  pair of the variant's models, and a verdict. The permutation null and the bootstrap treat only the wrapper as
  sampled; the paired difference also the items, and the two arms' framings as the crossed facets they are.
* **Scaling**: per wrapper, Pearson and Spearman correlation of the headline with log10(parameters) across
  models (``analysis.scaling``: the spread over wrappers, never one wrapper's value); and the OLS slope of
  the wrapper-mean headline on log10(parameters) (headline units per decade of parameters) with a
  percentile interval from a wrapper × item bootstrap: each draw resamples the wrappers with replacement
  and the scoring items within class, recomputes every model's headlines on those items, and refits.
  The Pearson r across models of the wrapper-mean headline with log10(parameters), raw and floor-corrected
  (each cell's scoring-label floor subtracted before the mean), the paper's +0.600 → +0.561.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from mirrorscan.analysis.bootstrap import stratified_bootstrap_indices
from mirrorscan.analysis.claims import MeanDifference, wrapper_bootstrap, wrapper_permutation_null
from mirrorscan.analysis.resampling import percentile_interval
from mirrorscan.analysis.scaling import scaling_by_wrapper
from mirrorscan.instruments.lens.directions import layer_curve
from mirrorscan.instruments.lens.spec import LensConfig


def model_comparisons(scores: np.ndarray, models: list[str], n_draws: int, seed: int, variant: str,
                      paired: dict | None = None) -> list[dict]:
    """Every pair (A, B) of ``models`` (rows of ``scores`` (models, wrappers)): mean difference, permutation p,
    bootstrap interval, and ``paired[(A, B)]`` (the paired difference over framings and items, Holm-adjusted)
    as ``paired`` where given; empty with fewer than 2 wrappers or no draws."""
    from mirrorscan.instruments.lens.resampling import seed_for

    out: list[dict] = []
    if scores.shape[1] < 2 or n_draws < 1:
        return out
    paired = paired or {}
    for a in range(len(models)):
        for b in range(a + 1, len(models)):
            claim = MeanDifference(a, b)
            diff = scores[a] - scores[b]
            beside = {"paired": paired[(models[a], models[b])]} if (models[a], models[b]) in paired else {}
            if np.all(diff == diff[0]):   # no spread over wrappers: the permutation null is degenerate
                out.append({"a": models[a], "b": models[b], "mean_difference": float(diff.mean()), "p_value": None,
                            "interval": None, "note": "the difference is the same in every wrapper", **beside})
                continue
            null = wrapper_permutation_null(scores, claim, n_draws, seed_for(seed, variant, "compare", models[a], models[b]))
            boot = wrapper_bootstrap(scores, claim, n_draws, seed_for(seed, variant, "compare-boot", models[a], models[b]))
            out.append({"a": models[a], "b": models[b], "mean_difference": null.observed, "p_value": null.p_value,
                        "interval": [boot.low, boot.high], "level": boot.level, **beside})
    return out


def slope(log_params: np.ndarray, values: np.ndarray) -> float:
    """OLS slope of ``values`` on ``log_params`` (units of values per decade)."""
    x = log_params - log_params.mean()
    return float((x * (values - values.mean())).sum() / (x * x).sum())


def pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    """Pearson r of two equal-length vectors; None where either does not vary."""
    x, y = x - x.mean(), y - y.mean()
    den = float(np.sqrt((x * x).sum() * (y * y).sum()))
    return float((x * y).sum() / den) if den > 0 else None


def scaling(scores: np.ndarray, n_params: np.ndarray, wrappers: list[str], projections: list[list[np.ndarray]],
            labels: list, positive: str, layers: Sequence[Sequence[int]], n_blocks: list[int], n_draws: int, seed,
            floors: np.ndarray | None = None) -> dict:
    """Per-wrapper correlations and the slope with its wrapper × item bootstrap interval (module docstring).
    ``projections[m][w]`` is model m's (items, layers) projections on wrapper w; ``n_blocks[m]`` its L.
    With ``floors`` (models, wrappers: each cell's scoring-label floor) also the floor-corrected figures:
    the Pearson r across models of the wrapper-mean headline with log10(parameters), raw and with each
    cell's floor subtracted first, and the per-wrapper spread of the corrected correlation."""
    log_params = np.log10(np.asarray(n_params, dtype=np.float64))
    out: dict[str, Any] = {"by_wrapper": scaling_by_wrapper(scores, n_params, wrappers).to_json(),
           "slope_per_decade": slope(log_params, scores.mean(axis=1)),
           "correlation_raw": pearson(log_params, scores.mean(axis=1))}
    if floors is not None:
        corrected = scores - floors
        out["correlation_floor_corrected"] = pearson(log_params, corrected.mean(axis=1))
        out["by_wrapper_floor_corrected"] = scaling_by_wrapper(corrected, n_params, wrappers).to_json()
    if n_draws < 1 or np.ptp(log_params) == 0:
        return out
    rng = np.random.default_rng(seed)
    items = stratified_bootstrap_indices(labels, rng, n_draws)
    draws = np.empty(n_draws)
    label_array = np.asarray(labels)
    for k in range(n_draws):
        picked = rng.integers(0, len(wrappers), size=len(wrappers))
        idx = items[k]
        means = [np.mean([layer_curve(projections[m][w][idx][:, layers[m]], label_array[idx], positive, layers[m],
                                      n_blocks[m]).max_auroc_minus_half for w in picked])
                 for m in range(len(projections))]
        draws[k] = slope(log_params, np.asarray(means))
    interval = percentile_interval("slope of the wrapper-mean headline on log10(parameters)", out["slope_per_decade"],
                                   draws)
    out["slope_interval"] = [interval.low, interval.high]
    out["slope_level"] = interval.level
    out["slope_draws"] = n_draws
    return out


def claims_by_variant(by_model: dict, wrappers: list[tuple[str, str]], settings: LensConfig, headlines: dict,
                      floors: dict | None = None, intervals: dict | None = None) -> dict:
    """variant → {"comparisons": [...], "scaling": {...}} over the models that ran it (≥ 2 models; scaling also
    needs every model's parameter count and ≥ 3 models). ``headlines[(label, variant, wrapper)]`` is each
    wrapper's headline as the analysis computed it, ``floors`` (same keys) its scoring-label floor when the null
    ran, ``intervals`` the headline intervals (``intervals.lens_intervals``) whose paired differences each
    comparison carries; projections are rebuilt only for the scaling bootstrap."""
    from mirrorscan.instruments.lens.directions import framing_projections, layers_in_max, wrapper_projections
    from mirrorscan.instruments.lens.intervals import paired_by_pair
    from mirrorscan.instruments.lens.resampling import seed_for

    positive, draws, seed = settings.positive, settings.bootstrap_draws, settings.seed
    names = [f"{e}×{d}" for e, d in wrappers]
    out = {}
    for variant in settings.variants:
        models = sorted(label for label, v in by_model if v == variant)
        if len(models) < 2 or any((m, variant, w) not in headlines for m in models for w in names):
            continue
        scores = np.array([[headlines[(m, variant, w)] for w in names] for m in models])
        result: dict[str, Any] = {"models": models, "comparisons": model_comparisons(
            scores, models, draws, seed, variant, paired_by_pair(intervals, variant))}
        exs = [by_model[(m, variant)] for m in models]
        params = [ex.parameters for ex in exs]
        if len(models) >= 3 and None not in params and all(ex.item_ids == exs[0].item_ids for ex in exs):
            layers = [layers_in_max(ex.n_layers, settings.variants[variant].layers) for ex in exs]
            projections = []
            for ex in exs:
                projected = framing_projections(ex.scoring, ex.framing_means())
                projections.append([wrapper_projections(projected, e, d) for e, d in wrappers])
            floor = (np.array([[floors[(m, variant, w)] for w in names] for m in models])
                     if floors and all((m, variant, w) in floors for m in models for w in names) else None)
            result["scaling"] = {"parameters": dict(zip(models, params)),
                                 **scaling(scores, np.asarray(params), names, projections, exs[0].labels, positive,
                                           layers, [ex.n_layers - 1 for ex in exs], draws,
                                           seed_for(seed, variant, "scaling"), floor)}
        else:
            result["scaling"] = {"missing": "needs ≥ 3 models with recorded parameter counts and the same scoring items"}
        out[variant] = result
    return out
