"""Requests in flight per endpoint across a sweep (``cluster.scan.endpoints``): labels that share an endpoint share
its bound while their pools run side by side."""

from __future__ import annotations

import os
import uuid

import pytest

from mirrorscan.actors.http_common import per_actor_concurrency
from mirrorscan.cluster.scan.endpoints import share_endpoints
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant


def api(label: str, endpoint: str = "http://127.0.0.1:9/v1", *, bound: int = 8, actors: int = 1,
        backend: str = "openai") -> ModelVariant:
    return ModelVariant(label=label, model="m", backend=backend, endpoint=endpoint, max_concurrency=bound,
                        min_actors=actors, max_actors=actors)


def in_flight(variants: list[ModelVariant]) -> int:
    """Requests all of ``variants``' actors may keep in flight together (as the HTTP engines bound them)."""
    return sum(per_actor_concurrency(v) * (v.max_actors or 1) for v in variants)


def test_two_labels_on_one_endpoint_stay_within_its_bound_together():
    variants = [api("low", bound=8, actors=1), api("high", bound=8, actors=2)]
    assert in_flight(variants) == 16, "without sharing each label would use the whole bound"
    shared = share_endpoints(variants, concurrent_models=2)
    assert in_flight(shared) <= 8
    assert all(per_actor_concurrency(v) >= 1 for v in shared)
    assert [v.max_concurrency for v in shared] == [2, 5]   # 8 × 1/3 and 8 × 2/3, floored


def test_the_smallest_declared_bound_is_the_endpoints():
    shared = share_endpoints([api("a", bound=4), api("b", bound=10)], concurrent_models=2)
    assert in_flight(shared) <= 4


def test_alone_on_an_endpoint_or_one_pool_at_a_time_is_unchanged():
    variants = [api("a", "http://127.0.0.1:9/v1"), api("b", "http://127.0.0.1:10/v1"),
                ModelVariant(label="local", model="m")]
    assert share_endpoints(variants, concurrent_models=3) == variants
    same = [api("a"), api("b")]
    assert share_endpoints(same, concurrent_models=1) == same


def test_a_trailing_slash_is_the_same_endpoint_and_another_backend_is_not():
    shared = share_endpoints([api("a", "http://127.0.0.1:9/v1/"), api("b", "http://127.0.0.1:9/v1")], 2)
    assert in_flight(shared) <= 8
    other = [api("a"), api("b", backend="anthropic")]
    assert share_endpoints(other, 2) == other


def test_more_actors_than_the_bound_allows_is_refused_with_the_fix():
    with pytest.raises(ConfigError) as err:
        share_endpoints([api("a", bound=3, actors=2), api("b", bound=3, actors=2)], concurrent_models=2)
    assert "a, b" in str(err.value) and "max_concurrent_models to 1" in str(err.value)


# ---- on a real Ray, against a real local server -----------------------------------------------------

KEY_ENV = "MIRRORSCAN_TEST_SHARED_ENDPOINT_KEY"
os.environ.setdefault(KEY_ENV, "sk-ant-test-shared-endpoint")   # at collection: Ray workers inherit it
SLOW_PIECES = ["word "] * 30
"""A slow answer (30 deltas 0.1 s apart: ~3 s per request), so each label's requests pile up to its bound."""


def test_two_labels_on_one_endpoint_never_exceed_its_bound_when_their_pools_run_at_once(tmp_path, ray_local):
    """Two Anthropic labels (max_concurrency 4 each) on one local Messages server, their pools side by side:
    the server never sees more than 4 requests at once, and more than one label's share (2) at some
    moment, so both labels were in flight together. Without the shared bound it would see up to 8."""
    import sys

    from anthropic_server import FaultServer
    import standin_engine as standin

    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.cluster.scan.sweep import Sweep, run_grid

    labels = ("tier-low", "tier-high")
    cells, instrument = standin.grid_cells(list(labels), n_pairs=3)   # 12 cells per label: ~18 s each
    with FaultServer() as server:
        for probe_id in cells["probe_id"].to_pylist():
            server.faults[probe_id] = "slow"
            server.answers[probe_id] = SLOW_PIECES
        variants = [ModelVariant(label=label, model="claude-test", backend="anthropic", endpoint=server.url,
                                 api_key_env=KEY_ENV, max_concurrency=4, timeout_s=60.0, max_tokens=64,
                                 min_actors=1, max_actors=1) for label in labels]
        invocation_id, store_uri = str(uuid.uuid4()), str(tmp_path / "store")
        run_grid(cells, variants, {label: "claude-test" for label in labels},
                 Sweep(standin.run_identity(invocation_id, "shared-endpoint"), instrument, store_uri, batch_size=8,
                       pool_size=1, max_concurrent_models=2),
                 lambda rows, errors, label: None)
        peak = server.max_inflight
    rows = open_store(store_uri).read("shared-endpoint", invocation_id)
    assert rows.num_rows == cells.num_rows and rows["error"].null_count == rows.num_rows
    assert 2 < peak <= 4, f"peak requests in flight {peak}"
