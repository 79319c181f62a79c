"""The records at the engine boundary: resolved once, frozen, and read back from any settings format."""

from __future__ import annotations

import dataclasses

import pytest

from mirrorscan.grid.records import ModelVariant, InvocationContext
from mirrorscan.grid.spec import load_spec


def test_variant_round_trips_through_frozen_settings(tmp_path):
    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / "config.json").write_text('{"instrument": "forced_choice", "max_tokens": 9, "actor_pool_size": 2, '
                                        '"models": [{"model": "m/tiny", "temperature": 0.7}]}')
    spec = load_spec(folder)
    stored = spec.settings().to_json()["models"][0]
    variant = ModelVariant.from_settings(stored)
    assert variant == spec.models[0]
    assert (variant.label, variant.max_tokens, variant.temperature, variant.min_actors) == ("tiny", 9, 0.7, 2)


def test_older_settings_entries_take_todays_defaults_in_one_place():
    old = {"label": "a", "model": "m", "temperature": 0.0, "top_p": 1.0, "max_tokens": 5}   # no engine keys yet
    variant = ModelVariant.from_settings(old)
    assert (variant.backend, variant.dtype, variant.timeout_s, variant.max_retries, variant.extra_body) == \
        ("hf", "float32", 120.0, 4, {})


def test_an_unknown_stored_key_is_refused_not_dropped():
    with pytest.raises(ValueError, match="unknown key.*kv_cache_bits"):
        ModelVariant.from_settings({"label": "a", "model": "m", "kv_cache_bits": 4})


def test_records_are_frozen():
    variant, run = ModelVariant(label="a", model="m"), InvocationContext(invocation_id="i", experiment="e", instrument="x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        variant.temperature = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.invocation_id = "j"
