"""Benchmark: the statistics (G-study, nulls, AUROC) at the sizes a real experiment has (one run, prints ratios).

1. Label-permutation AUROC null, 10,000 permutations × 30 layers × 400 items (200 positive):
   A (vectorised) ``analysis.nulls.label_permutation_null`` — mid-ranks once, every shard of 1,000
     permutations one (draws × items) @ (items × layers) product, max over layers per draw;
   B (loop)       ``sklearn.metrics.roc_auc_score`` per permutation and layer on the same permuted
     labels, then the same two maxima — timed on the first ``--loop-permutations`` permutations
     (all 30 layers each) and scaled linearly to 10,000.
   The loop's AUROCs are checked equal (to 1e-12) to the vectorised ones on that subset.
   Targets: A/B speed-up ≥ 100× and A under 60 s.
2. G-study of a 50 × 36 × 400 (model × wrapper × item) random-effects design: ``analysis.gtheory.g_study``
   on the array plus the full report (``gtheory_report``): target under 5 s.

Clock: ``time.perf_counter`` (monotonic, wall), around the call only; data generation is not timed.
Run: ``.venv/bin/python bench/stats.py`` from the repository root (exit 1 when a target is missed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402


def bench_null(n_perm: int, n_layers: int, n_items: int, loop_perms: int) -> tuple[float, float, float]:
    """(vectorised seconds, scaled loop seconds, measured loop seconds) and a correctness check."""
    from sklearn.metrics import roc_auc_score

    from mirrorscan.analysis.auroc import auroc_from_ranks
    from mirrorscan.analysis.nulls import label_permutation_data, label_permutation_null
    from mirrorscan.analysis.resampling import plan_shards

    rng = np.random.default_rng(0)
    scores = rng.normal(0, 1, (n_items, n_layers))
    labels = np.array(["deployment"] * (n_items // 2) + ["testing"] * (n_items - n_items // 2))
    scores[labels == "deployment", n_layers // 2] += 0.3

    t0 = time.perf_counter()
    res = label_permutation_null(scores, labels, "deployment", n_perm, seed=1)
    vec = time.perf_counter() - t0

    # the loop gets the very same permuted labels as the first permutations of shard 0
    data = label_permutation_data(scores, labels, "deployment")
    first = plan_shards(n_perm, 1)[0]
    masks = np.random.default_rng(first.seed).permuted(
        np.broadcast_to(data.mask, (first.n_draws, data.mask.size)), axis=1)[:loop_perms]
    t0 = time.perf_counter()
    loop_auc = np.empty((loop_perms, n_layers))
    for b in range(loop_perms):
        for layer in range(n_layers):
            loop_auc[b, layer] = roc_auc_score(masks[b], scores[:, layer])
    loop_max = np.stack([np.max(loop_auc - 0.5, axis=1), np.max(np.abs(loop_auc - 0.5), axis=1)], axis=1)
    loop = time.perf_counter() - t0

    vec_auc = auroc_from_ranks(data.ranks, masks)
    assert np.allclose(loop_auc, vec_auc, rtol=0, atol=1e-12), "sklearn and vectorised AUROC differ"
    assert np.allclose(loop_max[:, 1], res.absolute.null[:loop_perms], rtol=0, atol=1e-12)
    return vec, loop * n_perm / loop_perms, loop


def bench_gstudy(shape: tuple[int, int, int]) -> tuple[float, float]:
    """(g_study seconds, g_study + report seconds) on a random model × wrapper × item array."""
    from mirrorscan.analysis.gtheory import g_study
    from mirrorscan.analysis.gtheory_report import gtheory_report

    rng = np.random.default_rng(2)
    p, w, i = shape
    y = (rng.normal(0, 0.1, (p, 1, 1)) + rng.normal(0, 1, (1, w, 1)) + rng.normal(0, 0.5, (1, 1, i))
         + rng.normal(0, 0.4, (p, w, 1)) + rng.normal(0, 1, shape))
    t0 = time.perf_counter()
    g = g_study(y, ["model", "wrapper", "item"])
    t1 = time.perf_counter()
    gtheory_report(g, [{"wrapper": 1, "item": 400}])
    return t1 - t0, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--permutations", type=int, default=10_000)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--items", type=int, default=400)
    ap.add_argument("--loop-permutations", type=int, default=50, help="permutations the sklearn loop times")
    args = ap.parse_args()
    import sklearn

    vec, loop_scaled, loop = bench_null(args.permutations, args.layers, args.items, args.loop_permutations)
    ratio = loop_scaled / vec
    print(f"label-permutation AUROC null, {args.permutations} perms x {args.layers} layers x {args.items} items")
    print(f"  vectorised (analysis.nulls)   {vec:8.2f} s")
    print(f"  sklearn {sklearn.__version__} roc_auc_score loop {loop_scaled:8.1f} s  (measured {loop:.2f} s on "
          f"{args.loop_permutations} perms x {args.layers} layers, scaled x{args.permutations / args.loop_permutations:g})")
    print(f"  speed-up                      {ratio:8.0f} x   (target >= 100 x; vectorised target < 60 s)")
    g_s, report_s = bench_gstudy((50, 36, 400))
    print("G-study 50 x 36 x 400 (720,000 scores)")
    print(f"  g_study {g_s:.2f} s; with the full D-study report {report_s:.2f} s   (target < 5 s)")
    ok = ratio >= 100 and vec < 60 and report_s < 5
    print("all targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
