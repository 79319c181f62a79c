"""Nulls: the label-permutation floor of max-over-layers AUROC (against the stored Monte Carlo floors of
recomputed_auroc_by_layer.json, ±0.01, 1000 permutations as there), and the wrapper-permutation null and
wrapper bootstrap of model-comparison claims (worked examples with known answers).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from analysis_refdata import MANEK, load_json, manek_models, manek_scores

from mirrorscan.analysis.claims import (ClaimData, MeanDifference, ScalingCorrelation, wrapper_bootstrap,
                             wrapper_permutation_null, wrapper_permutation_shard)
from mirrorscan.analysis.nulls import label_permutation_data, label_permutation_null, label_permutation_shard
from mirrorscan.analysis.resampling import permutation_p_value, plan_shards, reduce_in_order, summarise_null

FLOORS = {m: v["label_permutation_floor_computed_here"]
          for m, v in load_json(*MANEK, "recomputed_auroc_by_layer.json")["models"].items()}
N_PERM = 1000          # as the stored floors (B = 1000); the floor's Monte Carlo SE is ~0.0005


@pytest.mark.parametrize("model", manek_models())
def test_label_permutation_floors_match_stored_monte_carlo(model):
    scores, labels, layers = manek_scores(model)
    res = label_permutation_null(scores, labels, "deployment", N_PERM, seed=20260915, layers=layers)
    ref = FLOORS[model]
    assert res.absolute.n_draws == N_PERM == ref["B"]
    assert abs(res.absolute.floor - ref["null_max_abs_dev_mean"]) <= 0.01, res.absolute.floor
    assert abs(res.signed.floor - ref["null_max_signed_dev_mean"]) <= 0.01, res.signed.floor
    assert abs(res.absolute.quantiles["p95"] - ref["null_max_abs_dev_p95"]) <= 0.01
    assert abs(res.signed.quantiles["p95"] - ref["null_max_signed_dev_p95"]) <= 0.01
    assert res.absolute.p_value == pytest.approx(ref["p_value_(b+1)/(B+1)"], abs=5e-4)
    assert res.absolute.p_value == 1 / (N_PERM + 1)                      # no shuffle reaches the observed max
    # selection inflates the max: the floor is far above 0, and the absolute floor is above the signed one
    assert 0.03 < res.signed.floor < res.absolute.floor < 0.08
    assert res.absolute.floor_corrected == pytest.approx(res.best.absolute - res.absolute.floor)
    assert res.absolute.z == pytest.approx((res.best.absolute - res.absolute.null_mean) / res.absolute.null_sd)


def test_label_null_is_calibrated_for_uninformative_scores():
    # scores independent of labels: the observed max is a draw from its own null, p roughly uniform
    rng = np.random.default_rng(0)
    ps = []
    for rep in range(20):
        x = rng.normal(size=(60, 8))
        labels = np.repeat(["a", "b"], 30)
        ps.append(label_permutation_null(x, labels, "a", 200, seed=rep).absolute.p_value)
    ps = np.array(ps)
    assert 0.25 < ps.mean() < 0.75 and (ps < 0.05).sum() <= 4


def test_label_null_shards_give_identical_bytes_in_any_order():
    scores, labels, _ = manek_scores("gemma-2-2b-it")
    data = label_permutation_data(scores, labels, "deployment")
    full = label_permutation_null(scores, labels, "deployment", 2500, seed=42, shard_size=1000)
    shards = plan_shards(2500, 42, 1000)
    assert [s.n_draws for s in shards] == [1000, 1000, 500]
    order = [2, 0, 1]                                     # as if three workers finished in another order
    parts = {k: label_permutation_shard(data, shards[k].seed, shards[k].n_draws) for k in order}
    null = reduce_in_order([parts[k] for k in range(3)])
    assert np.array_equal(null[:, 1], full.absolute.null) and np.array_equal(null[:, 0], full.signed.null)


def test_p_value_formula():
    null = np.array([0.1, 0.2, 0.3, 0.4])
    assert permutation_p_value(0.3, null) == (2 + 1) / (4 + 1)
    assert permutation_p_value(0.5, null) == 1 / 5
    assert permutation_p_value(0.1, null, "less") == 2 / 5
    assert permutation_p_value(-0.35, null, "two-sided") == 2 / 5
    s = summarise_null("t", 0.5, null)
    assert s.z == pytest.approx((0.5 - 0.25) / np.std(null, ddof=1)) and s.floor == 0.25


def test_sign_flip_null_of_a_zero_mean_difference():
    d = np.array([1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 1.5, -1.5])       # mean difference exactly 0
    s = np.stack([d, np.zeros_like(d)])
    res = wrapper_permutation_null(s, MeanDifference(0, 1), n_permutations=4000, seed=1)
    assert res.observed == 0.0 and res.p_value == 1.0                  # every flip is as extreme as 0
    assert abs(res.null_mean) < 0.05
    # the sign-flip null is symmetric and its variance is Σd²/W² (independent signs)
    assert res.null_sd ** 2 == pytest.approx(np.sum(d ** 2) / d.size ** 2, rel=0.1)


def test_sign_flip_null_of_a_consistent_difference_is_exact():
    # all d_w = 1: only the all-plus and all-minus flips reach |mean| = 1; exact p = 2/2^W
    s = np.stack([np.ones(10), np.zeros(10)])
    res = wrapper_permutation_null(s, MeanDifference(0, 1), n_permutations=20000, seed=3)
    b = (res.p_value * (20000 + 1)) - 1
    assert res.observed == 1.0 and b == pytest.approx(20000 * 2 / 2 ** 10, abs=4 * np.sqrt(20000 * 2 / 2 ** 10))
    # enumerate all 2^W flips as an independent check of the two-sided count
    flips = np.array(list(itertools.product([-1, 1], repeat=10)))
    assert np.count_nonzero(np.abs(flips.mean(axis=1)) >= 1.0) == 2


def test_within_wrapper_permutation_for_three_models_and_scaling_claim():
    rng = np.random.default_rng(8)
    log10_params = np.log10([0.5e9, 1.5e9, 3e9, 7e9, 14e9])
    noise = rng.normal(0, 1.0, size=(5, 12))
    s_up = noise + 2.0 * log10_params[:, None]                   # score rises with size in every wrapper
    claim = ScalingCorrelation(log10_params)
    res = wrapper_permutation_null(s_up, claim, n_permutations=2000, seed=2)
    assert res.observed > 0.9 and res.p_value < 0.02
    flat = wrapper_permutation_null(noise, claim, n_permutations=2000, seed=2)
    assert flat.p_value > 0.05 and abs(flat.null_mean) < 0.05
    # permuting within wrappers keeps each wrapper's set of scores
    batch = wrapper_permutation_shard(ClaimData(s_up, lambda b: b), np.random.SeedSequence(0), 3)
    assert np.array_equal(np.sort(batch, axis=1), np.broadcast_to(np.sort(s_up, axis=0), batch.shape))
    three = wrapper_permutation_null(noise[:3] + [[2.0], [0.0], [0.0]], MeanDifference(0, 1), 2000, seed=5)
    assert three.p_value < 0.05


def test_wrapper_bootstrap_interval():
    rng = np.random.default_rng(4)
    d = rng.normal(0.3, 1.0, size=40)
    s = np.stack([d, np.zeros(40)])
    ci = wrapper_bootstrap(s, MeanDifference(0, 1), n_boot=3000, seed=9)
    assert ci.estimate == pytest.approx(d.mean()) and ci.low < ci.estimate < ci.high
    assert ci.se == pytest.approx(d.std(ddof=1) / np.sqrt(40), rel=0.1)   # bootstrap SE ≈ s/√W
    again = wrapper_bootstrap(s, MeanDifference(0, 1), n_boot=3000, seed=9)
    assert np.array_equal(again.draws, ci.draws)
