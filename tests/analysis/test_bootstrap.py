"""Item bootstraps stratified by label, and the argmax-layer bootstrap (worked examples)."""

from __future__ import annotations

import numpy as np
import pytest
from analysis_refdata import manek_scores

from mirrorscan.analysis.auroc import auroc
from mirrorscan.analysis.bootstrap import (AurocBootstrapData, ItemBootstrapData,
                                argmax_layer_bootstrap, argmax_spread, auroc_bootstrap_shard, item_bootstrap,
                                item_bootstrap_shard, multiplicities, stratified_bootstrap_indices)
from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.resampling import percentile_interval


def test_spread_formula():
    # layers entering the max: 11 (positions 0..10); winners at 2, 3, 7 → (7 − 2)/(11 − 1) = 0.5
    assert argmax_spread([3, 2, 7, 3], 11) == 0.5
    assert argmax_spread([4, 4, 4], 11) == 0.0
    assert argmax_spread([0, 10], 11) == 1.0
    with pytest.raises(AnalysisError):
        argmax_spread([11], 11)


def test_stratified_indices_keep_every_item_in_its_class():
    labels = np.array(["t"] * 7 + ["d"] * 5)
    idx = stratified_bootstrap_indices(labels, np.random.default_rng(0), 200)
    assert idx.shape == (200, 12)
    assert (labels[idx] == labels[None, :]).all()                  # n₁ and n₀ fixed in every resample
    assert len(np.unique(idx[:, :7])) == 7 and len(np.unique(idx[:, 7:])) == 5
    w = multiplicities(idx, 12)
    assert (w.sum(axis=1) == 12).all() and (w[:, :7].sum(axis=1) == 7).all()


def test_item_bootstrap_of_any_statistic_is_seeded_and_sharded():
    scores, labels, _ = manek_scores("Llama-3.2-1B-Instruct")
    stat = lambda x, y: auroc(x[:, 5], y, "deployment")
    a = item_bootstrap(scores, labels, stat, n_boot=300, seed=1, shard_size=100)
    b = item_bootstrap(scores, labels, stat, n_boot=300, seed=1, shard_size=100)
    assert np.array_equal(a, b) and a.shape == (300,)
    ci = percentile_interval("auroc L6", float(stat(scores, labels)), a)
    assert ci.low < ci.estimate < ci.high and 0.8 < ci.low
    # the vectorised AUROC shard draws the same resamples as the generic one with the same seed
    data = AurocBootstrapData(scores, labels == "deployment")
    fast = auroc_bootstrap_shard(data, np.random.SeedSequence(5), 50)
    slow = item_bootstrap_shard(ItemBootstrapData(scores, labels == "deployment",
                                                  lambda x, y: auroc(x, y, True)), np.random.SeedSequence(5), 50)
    assert np.array_equal(fast, slow)


def test_argmax_layer_is_stable_when_one_layer_dominates():
    rng = np.random.default_rng(2)
    labels = np.repeat(["pos", "neg"], 50)
    x = rng.normal(size=(100, 6))
    x[:50, 3] += 3.0                                               # only layer 3 separates the classes
    res = argmax_layer_bootstrap(x, labels, "pos", n_boot=300, seed=0, layers=[f"L{k}" for k in range(1, 7)])
    assert res.observed == 3 and res.n_distinct == 1 and res.spread == 0.0
    assert res.to_json()["wins_by_layer"] == {"L4": 300}


def test_argmax_layer_wanders_when_layers_tie():
    rng = np.random.default_rng(3)
    labels = np.repeat(["pos", "neg"], 40)
    x = rng.normal(size=(80, 5))
    x[:40, [0, 4]] += 0.6                                          # two equally good layers at both ends
    res = argmax_layer_bootstrap(x, labels, "pos", n_boot=400, seed=1, kind="signed")
    assert set(np.flatnonzero(res.counts)) >= {0, 4}
    assert res.n_distinct >= 2 and res.spread == 1.0
    assert res.counts.sum() == 400


def test_manek_argmax_summary_is_consistent():
    scores, labels, layers = manek_scores("Qwen2.5-7B-Instruct")
    res = argmax_layer_bootstrap(scores, labels, "deployment", n_boot=200, seed=7, layers=layers)
    assert layers[res.observed] == "L15"                           # the stored peak layer (|AUROC − .5| there)
    js = res.to_json()
    assert js["n_layers"] == 27 and sum(js["wins_by_layer"].values()) == 200
    assert js["spread"] == (res.argmax.max() - res.argmax.min()) / 26
