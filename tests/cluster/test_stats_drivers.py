"""Ray drivers: the same bytes as run_local for 1 worker, 3 workers and shards submitted in any order.

Every Ray-using statistics test lives in this module, sharing one local Ray (``ray_local``).
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from mirrorscan.analysis.bootstrap import AurocBootstrapData, auroc_bootstrap_shard
from mirrorscan.analysis.concordance import concordance_data, kendall_w_permutation_shard
from mirrorscan.analysis.nulls import label_permutation_data, label_permutation_null, label_permutation_shard
from mirrorscan.analysis.resampling import plan_shards, run_local
from mirrorscan.cluster.runtime.stats_drivers import auroc_per_model_ray, label_permutation_null_ray, run_ray

N_DRAWS, SHARD, SEED = 2300, 500, 20261129       # 5 shards, the last one short


@pytest.fixture(scope="module")
def probe():
    rng = np.random.default_rng(5)
    scores = rng.normal(0, 1, (60, 8))
    labels = np.array(["deployment"] * 25 + ["testing"] * 35)
    scores[:25, 3] += 0.8
    scores[:, 5] = np.round(scores[:, 5])                  # ties
    return scores, labels


def _all_ways(fn, data):
    """run_local, Ray with 1 and 3 tasks in flight, and Ray with the shards submitted shuffled."""
    n_shards = len(plan_shards(N_DRAWS, SEED, SHARD))
    shuffled = np.random.default_rng(0).permutation(n_shards)
    assert list(shuffled) != list(range(n_shards))
    return [run_local(fn, data, N_DRAWS, SEED, SHARD),
            run_ray(fn, data, N_DRAWS, SEED, SHARD, max_concurrency=1),
            run_ray(fn, data, N_DRAWS, SEED, SHARD, max_concurrency=3),
            run_ray(fn, data, N_DRAWS, SEED, SHARD, max_concurrency=3, submit_order=shuffled)]


def _identical(results):
    first = results[0]
    for other in results[1:]:
        assert other.dtype == first.dtype and other.shape == first.shape
        assert other.tobytes() == first.tobytes()
        assert np.array_equal(other, first)


def test_label_permutation_null_same_bytes_for_any_workers_and_order(ray_local, probe):
    scores, labels = probe
    results = _all_ways(label_permutation_shard, label_permutation_data(scores, labels, "deployment"))
    assert results[0].shape == (N_DRAWS, 2)
    _identical(results)


def test_auroc_bootstrap_same_bytes_for_any_workers_and_order(ray_local, probe):
    scores, labels = probe
    results = _all_ways(auroc_bootstrap_shard, AurocBootstrapData(scores, labels == "deployment"))
    assert results[0].shape == (N_DRAWS, 8)
    _identical(results)


def test_kendall_permutation_same_bytes(ray_local):
    ratings = np.random.default_rng(2).normal(0, 1, (6, 9))
    _identical(_all_ways(kendall_w_permutation_shard, concordance_data(ratings)))


def test_null_driver_equals_the_local_function(ray_local, probe):
    scores, labels = probe
    local = label_permutation_null(scores, labels, "deployment", N_DRAWS, SEED, SHARD)
    remote = label_permutation_null_ray(scores, labels, "deployment", N_DRAWS, SEED, SHARD, max_concurrency=2)
    assert remote.signed.null.tobytes() == local.signed.null.tobytes()
    assert remote.absolute.null.tobytes() == local.absolute.null.tobytes()
    assert remote.to_json() == local.to_json()


def test_auroc_per_model_as_ray_tasks(ray_local, probe):
    from mirrorscan.analysis.auroc import auroc

    scores, labels = probe
    per_model = {"m1": (scores, labels), "m0": (-scores[:, ::-1], labels), "m2": (scores[:40], labels[:40])}
    curves = auroc_per_model_ray(per_model, "deployment", max_concurrency=2)
    assert list(curves) == ["m1", "m0", "m2"]
    for m, (s, lab) in per_model.items():
        assert curves[m].tobytes() == auroc(s, lab, "deployment").tobytes()


def test_cli_null_with_ray_equals_local(ray_local, probe, tmp_path, capsys):
    from mirrorscan.jobs import cli

    scores, labels = probe
    path = tmp_path / "probe.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["item", "layer", "type", "score"])
        w.writerows((i, f"L{l}", labels[i], repr(float(scores[i, l]))) for l in range(8) for i in range(60))
    argv = ["analyze", "null", "--input", str(path), "--score", "score", "--label", "type", "--positive",
            "deployment", "--layer", "layer", "--item", "item", "--permutations", "1200", "--seed", "4",
            "--shard-size", "300"]
    outs = []
    for extra in ([], ["--ray"]):
        assert cli.main(argv + extra) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[1].pop("driver") == "ray" and outs[0].pop("driver") == "local"
    assert outs[0] == outs[1]
