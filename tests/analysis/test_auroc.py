"""AUROC by mid-ranks: scikit-learn tie cases, the 11 Manek (2026) models, and vectorisation identities.

References: auroc_ties/cases.json (sklearn 1.9.1 output, to 1e-12);
sad_oversight_probe_scores_manek2026/*.csv with recomputed_auroc_by_layer.json (per-layer AUROC stored
to 6 decimals: within 5e-7, decided exactly; deployment is the positive class) and Manek's published peaks
(3 decimals). Each per-layer AUROC must also be bit-identical to an independent pairwise U/(n₁n₀).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from analysis_refdata import MANEK, load_json, manek_models, manek_scores, within

from mirrorscan.analysis.auroc import (auroc, auroc_from_ranks, auroc_weighted, max_abs_deviation, max_deviation,
                            max_signed_deviation, midranks, permuted_masks, positive_mask)
from mirrorscan.analysis.errors import AnalysisError

CASES = load_json("auroc_ties", "cases.json")["cases"]
MANEK_REF = load_json(*MANEK, "recomputed_auroc_by_layer.json", exact=True)["models"]
POSITIVE = "deployment"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_sklearn_tie_cases(case):
    got = auroc(np.array(case["y_score"], dtype=float), np.array(case["y_true"]), positive=1)
    assert abs(float(got) - case["roc_auc_score"]) <= 1e-12, (float(got), case["roc_auc_score"])
    flipped = auroc(np.array(case["y_score"], dtype=float), np.array(case["y_true"]), positive=0)
    assert float(got) + float(flipped) == pytest.approx(1.0, abs=1e-15)    # the positive class matters


def _pairwise_u(pos: np.ndarray, neg: np.ndarray) -> tuple[int, int]:
    """Independent Mann–Whitney: 2U = 2·#(pos > neg) + #(pos == neg), as an exact integer."""
    gt = int(np.count_nonzero(pos[:, None] > neg[None, :]))
    eq = int(np.count_nonzero(pos[:, None] == neg[None, :]))
    return 2 * gt + eq, pos.size * neg.size


def test_there_are_eleven_models():
    assert len(manek_models()) == 11


@pytest.mark.parametrize("model", manek_models())
def test_manek_per_layer_auroc(model):
    scores, labels, layers = manek_scores(model)
    ref = MANEK_REF[model]
    stored = ref["auroc_by_layer_deployment_positive"]
    assert scores.shape == (400, len(stored)) and len(layers) == int(ref["n_layers_model"]) - 1
    assert (labels == POSITIVE).sum() == 200
    got = auroc(scores, labels, POSITIVE)
    mask = labels == POSITIVE
    for k in range(scores.shape[1]):
        u2, n1n0 = _pairwise_u(scores[mask, k], scores[~mask, k])
        independent = (u2 / 2) / n1n0                                   # U/(n₁n₀) in float64
        assert got[k] == independent, (layers[k], got[k], independent)  # bit-identical
        # within 5e-7 of the 6-decimal value, decided exactly (some AUROCs end in ...5 at the 7th decimal)
        assert abs(Fraction(u2, 2 * n1n0) - Fraction(stored[k])) <= Fraction(5, 10 ** 7), (layers[k], stored[k])
        assert abs(got[k] - float(stored[k])) < 5e-7 + 1e-15


@pytest.mark.parametrize("model", manek_models())
def test_manek_published_peak_and_best_layers(model):
    scores, labels, layers = manek_scores(model)
    ref = MANEK_REF[model]
    got = auroc(scores, labels, POSITIVE)
    best = max_deviation(got)
    mask = labels == POSITIVE
    k = best.signed_layer
    peak = Fraction(_pairwise_u(scores[mask, k], scores[~mask, k])[0], 2 * 200 * 200)   # exact peak AUROC
    published = ref["published_manek2026"]["peak_auroc"]
    assert abs(peak - Fraction(published)) <= Fraction(5, 10 ** 4), (model, float(peak), published)  # 3 decimals
    assert abs(peak - Fraction(ref["peak_auroc_deployment_positive"])) <= Fraction(5, 10 ** 5)
    assert layers[k] == f"L{int(ref['peak_layer'])}"
    assert within(int(ref["peak_layer"]) / int(ref["n_layers_model"]), ref["peak_relative_depth"], "0.0005")
    # the stored 4-decimal maxima (half a unit, decided on the exact rationals: several sit exactly on .5)
    exact = [Fraction(_pairwise_u(scores[mask, j], scores[~mask, j])[0], 2 * 200 * 200)
             for j in range(scores.shape[1])]
    half = Fraction(1, 2)
    exact_signed, exact_abs = max(exact) - half, max(abs(a - half) for a in exact)
    exact_testing = half - min(exact)
    testing = max_deviation(auroc(scores, labels, "testing"))
    for ours, exact_value, key in [
            (best.signed, exact_signed, "max_over_layers_auroc_minus_half_deployment_positive"),
            (best.absolute, exact_abs, "max_over_layers_abs_auroc_minus_half"),
            (testing.signed, exact_testing, "max_over_layers_auroc_minus_half_testing_positive")]:
        assert abs(exact_value - Fraction(ref[key])) <= Fraction(5, 10 ** 5), (key, float(exact_value), ref[key])
        assert ours == pytest.approx(float(exact_value), abs=1e-15)
    assert best.absolute == max(best.signed, testing.signed)


def test_published_relative_depth_matches_except_qwen_7b():
    # Manek's published peak depths vs peak_layer / n_layers (one unit of the printed digit). Qwen2.5-7B
    # is the one that does not match: published 0.56, but peak layer 15 of 28 gives 0.536.
    off = []
    for model in manek_models():
        ref = MANEK_REF[model]
        printed = ref["published_manek2026"]["peak_relative_depth"]
        depth = int(ref["peak_layer"]) / int(ref["n_layers_model"])
        if not within(depth, printed, Fraction(1, 10 ** max(-printed.as_tuple().exponent, 0))):
            off.append((model, round(depth, 3), str(printed)))
    assert off == [("Qwen2.5-7B-Instruct", 0.536, "0.56")]


def test_vectorised_permutations_equal_a_loop_bit_for_bit():
    scores, labels, _ = manek_scores("Llama-3.2-1B-Instruct")
    mask = positive_mask(labels, POSITIVE)
    ranks = midranks(scores)
    perms = np.stack([np.random.default_rng(s).permutation(mask.size) for s in range(20)])
    masks = permuted_masks(mask, perms)
    batch = auroc_from_ranks(ranks, masks)
    assert batch.shape == (20, scores.shape[1])
    for b in range(20):
        assert np.array_equal(batch[b], auroc(scores, np.where(masks[b], POSITIVE, "testing"), POSITIVE))
    assert np.array_equal(max_abs_deviation(batch), np.abs(batch - 0.5).max(axis=1))
    assert np.array_equal(max_signed_deviation(batch), (batch - 0.5).max(axis=1))


def test_weighted_auroc_equals_the_expanded_resample():
    rng = np.random.default_rng(0)
    x = np.round(rng.normal(size=(30, 4)), 1)                  # rounding makes plenty of ties
    mask = np.arange(30) < 12
    idx = np.concatenate([rng.integers(0, 12, size=(5, 12)), rng.integers(12, 30, size=(5, 18))], axis=1)
    w = np.stack([np.bincount(r, minlength=30) for r in idx])
    got = auroc_weighted(x, mask, w)
    for b in range(5):
        assert np.array_equal(got[b], auroc(x[idx[b]], mask[idx[b]], True))


def test_max_deviation_reports_both_senses_and_their_layers():
    best = max_deviation([0.52, 0.30, 0.61, 0.45])
    assert best.signed == pytest.approx(0.11) and best.signed_layer == 2
    assert best.absolute == pytest.approx(0.20) and best.absolute_layer == 1 and best.n_layers == 4


def test_bad_labels_are_refused():
    with pytest.raises(AnalysisError, match="no item has label 'deploy'"):
        auroc([0.1, 0.2], ["testing", "deployment"], "deploy")
    with pytest.raises(AnalysisError, match="every item"):
        auroc([0.1, 0.2], ["a", "a"], "a")
    with pytest.raises(AnalysisError, match="NaN"):
        auroc([0.1, np.nan], ["a", "b"], "a")
