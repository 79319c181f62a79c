"""Ray drivers of the resampling statistics: shards and per-model work as Ray tasks.

Every statistic in :mod:`analysis` runs without Ray (:func:`analysis.resampling.run_local`), and
:mod:`analysis` starts no Ray. This module, in the runtime's layer, spreads the same work over Ray:

* :func:`run_ray` maps a pure shard function ``fn(data, seed_seq, n_draws) -> array`` over
  :func:`~analysis.resampling.plan_shards` as Ray tasks, at most ``max_concurrency`` in flight, and
  joins the results with :func:`~analysis.resampling.reduce_in_order` **in shard order**. A shard's
  seed is fixed by its position, so the number of workers, the order the shards are submitted in
  (``submit_order``) and which worker ran which shard cannot change a byte: the result equals
  ``run_local(fn, data, n_draws, seed, shard_size)`` exactly.
* :func:`map_ray` runs one task per key (per-model work such as a model's AUROC curve) and returns
  the results keyed in the input order.
* :func:`label_permutation_null_ray` and :func:`auroc_per_model_ray` are the two drivers the CLI uses.

Ray is imported inside the functions, never at module import; :func:`cluster.runtime.ray_session.ensure_ray`
starts or joins Ray when none is initialised in this process.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from mirrorscan.analysis.resampling import DEFAULT_SHARD_SIZE, Seed, plan_shards, reduce_in_order


def _call(fn: Callable, *args: Any) -> Any:
    """What a Ray task runs: ``fn(*args)`` (kept trivial so the task function is tiny to ship)."""
    return fn(*args)


def _remote(num_cpus: float):
    import ray

    from mirrorscan.cluster.runtime.ray_session import ensure_ray

    ensure_ray()
    return ray, ray.remote(num_cpus=num_cpus)(_call)


def _gather(ray, pending: list[tuple[Any, Callable[[], Any]]],
            max_concurrency: int | None) -> dict[Any, Any]:
    """Submit ``pending`` (key, submit()) keeping at most ``max_concurrency`` tasks in flight; key → result."""
    limit = max(1, int(max_concurrency)) if max_concurrency else len(pending) or 1
    in_flight: dict[Any, Any] = {}            # ObjectRef → key
    out: dict[Any, Any] = {}
    queue = list(pending)
    while queue or in_flight:
        while queue and len(in_flight) < limit:
            key, submit = queue.pop(0)
            in_flight[submit()] = key
        done, _ = ray.wait(list(in_flight), num_returns=1)
        for ref in done:
            out[in_flight.pop(ref)] = ray.get(ref)
    return out


def run_ray(fn: Callable[[Any, np.random.SeedSequence, int], np.ndarray], data: Any, n_draws: int,
            seed: Seed, shard_size: int = DEFAULT_SHARD_SIZE, max_concurrency: int | None = None,
            submit_order: Sequence[int] | None = None, num_cpus: float = 1) -> np.ndarray:
    """Run every shard of ``fn`` as a Ray task and reduce in shard order: same bytes as ``run_local``.

    ``max_concurrency`` caps the tasks in flight (1 = one shard at a time; None = all at once).
    ``submit_order`` is a permutation of shard positions giving the order tasks are submitted in
    (for testing that order does not matter); results are still reduced by shard position.
    ``data`` is put in the object store once and shared by every task.
    """
    shards = plan_shards(n_draws, seed, shard_size)
    order = list(range(len(shards))) if submit_order is None else [int(k) for k in submit_order]
    if sorted(order) != list(range(len(shards))):
        from mirrorscan.analysis.errors import AnalysisError

        raise AnalysisError("submit_order", f"{order} is not a permutation of the {len(shards)} shards",
                            "give each shard position exactly once")
    ray, task = _remote(num_cpus)
    data_ref = ray.put(data)
    pending = [(k, (lambda s=shards[k]: task.remote(fn, data_ref, s.seed, s.n_draws))) for k in order]
    results = _gather(ray, pending, max_concurrency)
    return reduce_in_order([results[k] for k in range(len(shards))])


def map_ray(fn: Callable[..., Any], work: Mapping[Any, tuple], max_concurrency: int | None = None,
            num_cpus: float = 1) -> dict[Any, Any]:
    """``{key: fn(*args)}`` for every ``key, args`` of ``work``, one Ray task each, in ``work``'s order."""
    ray, task = _remote(num_cpus)
    pending = [(key, (lambda a=args: task.remote(fn, *a))) for key, args in work.items()]
    results = _gather(ray, pending, max_concurrency)
    return {key: results[key] for key in work}


def label_permutation_null_ray(scores: Any, labels: Any, positive: Any, n_permutations: int = 1000,
                               seed: Seed = 0, shard_size: int = DEFAULT_SHARD_SIZE,
                               layers: Sequence | None = None, max_concurrency: int | None = None):
    """:func:`analysis.nulls.label_permutation_null` with its permutation shards run as Ray tasks.

    Returns the same :class:`~analysis.nulls.MaxOverLayersNull`, byte for byte, as the local function.
    """
    from mirrorscan.analysis.auroc import auroc_from_ranks, max_deviation
    from mirrorscan.analysis.errors import AnalysisError
    from mirrorscan.analysis.nulls import (MaxOverLayersNull, label_permutation_data, label_permutation_shard)
    from mirrorscan.analysis.resampling import summarise_null

    data = label_permutation_data(scores, labels, positive)
    auc = auroc_from_ranks(data.ranks, data.mask)
    best = max_deviation(auc)
    layers = tuple(range(auc.size)) if layers is None else tuple(layers)
    if len(layers) != auc.size:
        raise AnalysisError("layers", f"{len(layers)} labels for {auc.size} layers", "one label per layer")
    null = run_ray(label_permutation_shard, data, n_permutations, seed, shard_size, max_concurrency)
    pos = positive.item() if isinstance(positive, np.generic) else positive
    # the statistic names are those of analysis.nulls.label_permutation_null, so the JSON is identical
    return MaxOverLayersNull(
        positive, auc, layers, best,
        summarise_null(f"max over {auc.size} layers of (AUROC - 0.5), positive={pos}", best.signed, null[:, 0]),
        summarise_null(f"max over {auc.size} layers of |AUROC - 0.5|", best.absolute, null[:, 1]))


def auroc_per_model_ray(per_model: Mapping[str, tuple[Any, Any]], positive: Any,
                        max_concurrency: int | None = None) -> dict[str, np.ndarray]:
    """AUROC curve per model, one Ray task per model: ``{model: (scores (items, layers), labels)}``."""
    from mirrorscan.analysis.auroc import auroc

    return map_ray(auroc, {m: (s, lab, positive) for m, (s, lab) in per_model.items()}, max_concurrency)


__all__ = ["auroc_per_model_ray", "label_permutation_null_ray", "map_ray", "run_ray"]
