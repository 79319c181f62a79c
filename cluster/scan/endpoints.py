"""Requests in flight per endpoint across a sweep, when several model pools run at once.

An HTTP model's ``max_concurrency`` bounds the requests in flight to its endpoint; its actor pool shares
it (``actors.http_common.per_actor_concurrency``: ``max_concurrency ÷ max_actors`` per actor). When pools run
side by side (``max_concurrent_models`` > 1), two labels on one endpoint (effort tiers, reruns of one
model) would each use the whole bound. ``share_endpoints`` therefore splits each endpoint's bound among
the labels that reach it, in proportion to their actors: the endpoint's bound is the smallest
``max_concurrency`` its labels declare, and the shares add up to at most that bound whichever of the
labels run together. The split is static (a label that finishes early does not hand its share to the
others): it costs nothing per request and holds even when an actor dies mid-request.
"""

from __future__ import annotations

import dataclasses

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant
from mirrorscan.grid.spec import API_BACKENDS


def endpoint_key(variant: ModelVariant) -> str | None:
    """The endpoint a variant's requests go to (backend and base URL), or None for an in-process engine."""
    if variant.backend not in API_BACKENDS or not variant.endpoint:
        return None
    return f"{variant.backend} {variant.endpoint.rstrip('/')}"


def share_endpoints(variants: list[ModelVariant], concurrent_models: int) -> list[ModelVariant]:
    """``variants`` with each HTTP label's ``max_concurrency`` replaced by its share of its endpoint's bound
    (requests in flight), so that the labels of one endpoint together stay within it when up to
    ``concurrent_models`` pools run at once. Unchanged when pools run one at a time or a label is alone on
    its endpoint. Raises ConfigError when an endpoint's labels have more actors than its bound allows
    requests (each actor needs at least one)."""
    if concurrent_models <= 1:
        return list(variants)
    groups: dict[str, list[ModelVariant]] = {}
    for v in variants:
        key = endpoint_key(v)
        if key is not None:
            groups.setdefault(key, []).append(v)
    shares: dict[str, int] = {}
    for key, members in groups.items():
        if len(members) < 2:
            continue
        bound = min(v.max_concurrency for v in members)
        actors = sum(v.max_actors or 1 for v in members)
        if actors > bound:
            labels = ", ".join(v.label for v in members)
            raise ConfigError("", "max_concurrent_models",
                              f"models {labels} share the endpoint {key.split(' ', 1)[1]} (max_concurrency {bound}) "
                              f"with {actors} actors in all, more than the requests it allows in flight",
                              "raise max_concurrency, lower those models' max_actors, or set max_concurrent_models to 1")
        for v in members:
            shares[v.label] = bound * (v.max_actors or 1) // actors
    return [dataclasses.replace(v, max_concurrency=shares[v.label]) if v.label in shares else v for v in variants]
