"""``models[].device_map`` and ``num_gpus`` for HF models larger than one GPU: what the spec accepts, resolves
and refuses (one line naming the field)."""

from __future__ import annotations

import json

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.spec import load_spec


def spec_of(tmp_path, **entry):
    folder = tmp_path / "exp"
    folder.mkdir(exist_ok=True)
    (folder / "pairs.csv").write_text("pair_id,word_a,word_b\np1,cat,dog\n", encoding="utf-8")
    config = {"instrument": "forced_choice", "probe_set": "pairs.csv", "envelopes": ["english_strict"],
              "models": [{"model": "some-model", "label": "m1", **entry}]}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return load_spec(folder)


@pytest.mark.parametrize("entry, num_gpus, device_map", [
    ({}, 0.0, None),
    ({"device": "cuda"}, 1.0, None),                                   # an HF model on CUDA holds its GPU
    ({"device": "cuda", "device_map": "auto", "num_gpus": 2}, 2.0, "auto"),
    ({"device_map": "cpu"}, 0.0, "cpu"),
    ({"device_map": "auto"}, 0.0, "auto"),                            # no GPU reserved: accelerate keeps it on the CPU
    ({"device": "cuda", "num_gpus": 2, "device_map": {"model.embed_tokens": 0, "model.layers": "cuda:1",
                                                      "lm_head": 1, "model.norm": "cpu"}}, 2.0, None),
    ({"backend": "vllm", "device": "cuda", "tensor_parallel_size": 2}, 2.0, None),
])
def test_num_gpus_and_device_map_resolve(tmp_path, entry, num_gpus, device_map):
    (model,) = spec_of(tmp_path, **entry).models
    assert model.num_gpus == num_gpus
    assert model.device_map == (entry.get("device_map") if device_map is None else device_map)


@pytest.mark.parametrize("entry, field, words", [
    ({"backend": "vllm", "device_map": "auto"}, "models[0].device_map", "only read by the hf backend"),
    ({"backend": "openai", "device_map": "auto"}, "models[0].device_map", "only read by the hf backend"),
    ({"device_map": "everywhere"}, "models[0].device_map", "not a device"),
    ({"device_map": {}}, "models[0].device_map", "empty object"),
    ({"device_map": {"lm_head": "disk"}}, "models[0].device_map.lm_head", "not a device"),
    ({"device_map": {"lm_head": -1}}, "models[0].device_map.lm_head", "not a device"),
    ({"device_map": ["auto"]}, "models[0].device_map", "not a string or an object"),
    ({"device": "cuda", "device_map": {"model": 0, "lm_head": 1}}, "models[0].num_gpus", "set num_gpus to 2"),
    ({"device_map": "cuda:2", "num_gpus": 2}, "models[0].num_gpus", "set num_gpus to 3"),
    ({"device": "cuda", "num_gpus": 1.5}, "models[0].num_gpus", "whole number"),
])
def test_a_device_map_that_cannot_load_is_refused_naming_the_field(tmp_path, entry, field, words):
    with pytest.raises(ConfigError) as info:
        spec_of(tmp_path, **entry)
    assert info.value.field == field and words in str(info.value)


def test_device_map_is_an_execution_setting(tmp_path):
    from mirrorscan.grid.settings import settings_hash

    auto = spec_of(tmp_path, device="cuda", device_map="auto", num_gpus=2).settings().to_json()
    whole = spec_of(tmp_path, device="cuda").settings().to_json()
    assert auto["models"][0]["device_map"] == "auto" and whole["models"][0]["device_map"] is None
    assert settings_hash(auto) == settings_hash(whole)   # where the layers sit does not change what is measured
