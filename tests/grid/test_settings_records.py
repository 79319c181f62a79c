"""The typed records of a run: the validated spec and the frozen settings are immutable, and the settings'
stored JSON (format 2 written, format 1 read) is byte for byte what the catalog holds."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from mirrorscan.grid.records import ModelVariant
from mirrorscan.grid.settings import EXECUTION_MODEL_KEYS, FORMAT, SAMPLER_VERSION, Execution, Settings, \
    settings_hash, upgrade
from mirrorscan.grid.config_keys import MODEL_KEYS
from mirrorscan.grid.spec import load_spec
from test_spec import base_config, make_experiment

MODEL = {"label": "m1", "model": "/models/Some-Model", "backend": "hf", "dtype": "float32", "device": "cpu",
         "effort": None, "extra_body": {}, "chat_template_kwargs": {}, "temperature": 0.7, "top_p": 1.0,
         "max_tokens": 9, "api_key_env": None, "endpoint": None, "max_concurrency": 8, "timeout_s": 120.0,
         "max_retries": 4, "tensor_parallel_size": 1, "engine_args": {}, "batch_invariant": None, "num_gpus": 0.0,
         "device_map": None,
         "memory_gb": None, "min_actors": 2, "max_actors": 2, "tokenizer": None, "score_api": None, "add_bos": None}
"""The model entry a new invocation writes for ``base_config``'s model at max_tokens 9, temperature 0.7 and
actor_pool_size 2: every key, in this order."""


def _sha256_of_shaping(stored: dict) -> str:
    """The hash the catalog pins, computed here from the JSON itself: the result-shaping part (no
    ``execution``, no per-model execution keys), canonical JSON."""
    shaping = {k: v for k, v in stored.items() if k != "execution"}
    shaping["models"] = [{k: v for k, v in m.items() if k not in EXECUTION_MODEL_KEYS} for m in stored["models"]]
    return hashlib.sha256(json.dumps(shaping, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def test_new_settings_serialise_byte_for_byte_as_the_catalog_stores_them(tmp_path):
    spec = load_spec(make_experiment(tmp_path, base_config(samples=2, temperature=0.7, max_tokens=9,
                                                           actor_pool_size=2, store="/data/store")))
    expected = {"format": 2, "experiment": "exp", "instrument": "forced_choice", "description": "", "samples": 2,
                "temperature": 0.7, "top_p": 1.0, "max_tokens": 9, "seed": 0, "batch_size": 16, "models": [MODEL],
                # the pair file by its path relative to the experiment folder (grid.input_paths), with its hash
                "instrument_settings": {**spec.instrument.frozen(spec.instrument_spec), "probe_set": "./pairs.csv"},
                "sampler_version": SAMPLER_VERSION,   # sampled on the hf engine
                "execution": {"store": "/data/store", "actor_pool_size": 2, "max_concurrent_models": None,
                              "catalog": "embedded"}}
    written = spec.settings().to_json()
    assert json.dumps(written, ensure_ascii=False) == json.dumps(expected, ensure_ascii=False)   # keys in order
    assert settings_hash(written) == _sha256_of_shaping(expected) == spec.settings().settings_hash()
    # read back from the catalog's JSON: the same record, the same bytes
    assert Settings.from_json(json.loads(json.dumps(written))) == spec.settings()
    assert json.dumps(Settings.from_json(written).to_json()) == json.dumps(written)


FORMAT_1 = {"seed": 7, "store": "/old/store", "top_p": 1.0, "format": 1, "catalog": "embedded", "n_items": 3,
            "samples": 1, "orderings": ["AB", "BA"], "probe_set": "/old/pairs.csv", "batch_size": 4,
            "experiment": "legacy_fc", "instrument": "forced_choice", "max_tokens": 12, "temperature": 0.0,
            "actor_pool_size": 1, "probe_set_sha256": "18fb" * 16,
            "models": [{"dtype": "float32", "label": "smollm2", "model": "packaged:smollm2-135m-instruct",
                        "top_p": 1.0, "device": "cpu", "effort": None, "backend": "hf", "endpoint": None,
                        "num_gpus": 0.0, "timeout_s": 120.0, "extra_body": {}, "max_actors": 1, "max_tokens": 12,
                        "min_actors": 1, "api_key_env": None, "engine_args": {}, "max_retries": 4,
                        "temperature": 0.0, "max_concurrency": 8, "chat_template_kwargs": {},
                        "tensor_parallel_size": 1}]}
"""Settings as format 1 stored them (a catalog row of the previous release, keys in jsonb's order): no
``description``, no ``execution``, model entries without the keys added since (device_map, tokenizer …)."""


def test_format_1_settings_read_as_fields_and_hash_as_stored():
    frozen = Settings.from_json(FORMAT_1)
    assert (frozen.experiment, frozen.seed, frozen.batch_size, frozen.max_tokens) == ("legacy_fc", 7, 4, 12)
    assert frozen.description == "" and frozen.sampler_version is None   # absent: the defaults
    assert frozen.execution.store == "/old/store" and frozen.execution.catalog == "embedded"
    assert frozen.instrument_settings["probe_set"] == "/old/pairs.csv" and frozen.instrument_settings["n_items"] == 3
    m = frozen.model("smollm2")
    assert m.device_map is None and m.min_actors == 1 and m.num_gpus == 0.0   # a key it lacked: today's default
    # the keys it did not hold stay out of its JSON, so its hash is the one computed from the stored dict
    assert frozen.to_json() == upgrade(FORMAT_1)
    assert "description" not in frozen.to_json() and "device_map" not in frozen.to_json()["models"][0]
    assert frozen.settings_hash() == settings_hash(FORMAT_1) == _sha256_of_shaping(upgrade(FORMAT_1))
    assert frozen.to_json()["format"] == FORMAT
    assert FORMAT_1["format"] == 1 and "execution" not in FORMAT_1   # the input is not touched


def test_a_key_this_code_does_not_know_is_refused_not_dropped():
    with pytest.raises(ValueError, match="unknown key.*warp_factor"):
        Settings.from_json({"format": 2, "experiment": "x", "instrument": "forced_choice", "warp_factor": 9})
    with pytest.raises(ValueError, match="unknown key.*nodes"):
        Settings.from_json({"format": 2, "experiment": "x", "execution": {"nodes": 3}})


def test_execution_notes_are_recorded_after_the_keys_written_and_not_hashed(tmp_path):
    settings = load_spec(make_experiment(tmp_path, base_config())).settings()
    noted = settings.with_execution(reproduces="abc", reproduce_warnings=("one",))
    assert list(noted.to_json()["execution"])[-2:] == ["reproduces", "reproduce_warnings"]
    assert noted.to_json()["execution"]["reproduce_warnings"] == ["one"]
    assert noted.settings_hash() == settings.settings_hash() and settings.execution.reproduces is None


def test_the_spec_and_its_settings_cannot_be_changed_after_load(tmp_path):
    spec = load_spec(make_experiment(tmp_path, base_config()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.store = "/elsewhere"   # a scan resolves its store into a copy: dataclasses.replace
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.samples = 5
    with pytest.raises(AttributeError):
        spec.values   # noqa: B018 - no dict of values to write into any more
    settings = spec.settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seed = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.execution.store = "/elsewhere"
    moved = dataclasses.replace(spec, store="/elsewhere")
    assert moved.store == "/elsewhere" and spec.store is None and moved.settings().execution.store == "/elsewhere"


def test_model_defaults_live_on_the_record_alone():
    """A config's model keys and frozen settings' model entries take their defaults from ModelVariant."""
    for f in dataclasses.fields(ModelVariant):
        default, _ = MODEL_KEYS[f.name]
        if f.name in ("label", "model", "temperature", "top_p", "max_tokens"):
            assert default is None   # required, derived from the model, or the experiment's value
        else:
            record = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            assert default == record, f.name
    assert set(MODEL_KEYS) == {f.name for f in dataclasses.fields(ModelVariant)}
    assert Execution().actor_pool_size == 1 and Settings().batch_size == 16


def test_the_record_answers_what_resume_and_the_driver_run_ask(tmp_path):
    spec = load_spec(make_experiment(tmp_path, base_config()))
    settings = spec.settings()
    assert settings.shaping_differences(settings.to_json()) == [] and settings.shaping_differences(settings) == []
    other = load_spec(make_experiment(tmp_path, base_config(seed=3))).settings()   # the same folder, rewritten
    assert settings.shaping_differences(other) == ["seed"]
    moved = dataclasses.replace(spec, store="/elsewhere").settings()
    assert settings.shaping_differences(moved) == []   # where it runs shapes nothing
    assert moved.execution_json()["store"] == "/elsewhere" and moved.execution_json()["models"][0]["label"] == "m1"


def test_every_stored_manifest_in_the_fixtures_reads_back_byte_for_byte():
    """The settings the previous releases wrote beside their traces (format 1 and 2) read into the record and
    back to the same JSON, so their hashes and what a resume compares are unchanged."""
    from pathlib import Path

    manifests = sorted(Path(__file__).resolve().parents[1].glob("fixtures/*/store/*/*/invocation.json"))
    assert len(manifests) >= 2   # the legacy (format 1) fixture's invocations at least
    formats = set()
    for path in manifests:
        stored = json.loads(path.read_text(encoding="utf-8"))["settings"]
        formats.add(stored.get("format", 1))
        frozen = Settings.from_json(stored)
        assert json.dumps(frozen.to_json(), ensure_ascii=False) == json.dumps(upgrade(stored), ensure_ascii=False), path
        assert frozen.settings_hash() == settings_hash(stored), path
    assert 1 in formats
