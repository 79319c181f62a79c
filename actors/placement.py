"""Placement groups for engines that span several accelerators (tensor parallelism).

An engine of ``tensor_parallel_size`` k > 1 runs in a placement group of its own: one bundle for the
actor (a CPU, plus the model's memory request) and k one-accelerator bundles, packed on one node
(STRICT_PACK), capturing child tasks so that the engine's own Ray workers (vLLM's executor) land in the
group. The group is created when the model's pool is planned and must be removed when that pool ends
(``cluster.scan.pipeline.release_engine_resources``), or its accelerators stay reserved for the rest of the
sweep and the autoscaler can never remove their node.
"""

from __future__ import annotations

import uuid

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant


class NoRoom(ConfigError):
    """No node offered a placement group's bundles in time: the cluster lacks room now (other pools may
    hold it) or ever (no node type is that big)."""


def tensor_parallel_group(variant: ModelVariant, accelerator: str, timeout_s: float) -> dict:
    """Ray remote args placing one engine actor of ``variant`` in a new placement group of one actor bundle
    and ``tensor_parallel_size`` bundles of ``{accelerator: 1}`` on one node. Waits up to ``timeout_s``
    seconds for the group; removes it and raises ConfigError naming the field when no node offers it."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    tp = variant.tensor_parallel_size
    actor_bundle: dict = {"CPU": 1}
    if variant.memory_gb:   # the pipeline adds the actor's memory request; it must fit its bundle
        actor_bundle["memory"] = int(variant.memory_gb * 2**30)
    bundles = [actor_bundle] + [{accelerator: 1} for _ in range(tp)]
    pg = placement_group(bundles, strategy="STRICT_PACK", name=f"engine-{variant.label}-{uuid.uuid4().hex[:8]}")
    try:
        ray.get(pg.ready(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(pg)
        have = ray.cluster_resources().get(accelerator, 0)
        raise NoRoom(
            "", f"models[{variant.label}].tensor_parallel_size",
            f"no node offered {tp} × {accelerator} and 1 CPU together within {timeout_s:g} s "
            f"(cluster {accelerator} now: {have:g})",
            "lower tensor_parallel_size to the GPUs of one node, or add a worker type with that many GPUs "
            "to cluster.yaml") from None
    return {"num_cpus": 1, "num_gpus": 0, "scheduling_strategy": PlacementGroupSchedulingStrategy(
        pg, placement_group_bundle_index=0, placement_group_capture_child_tasks=True)}
