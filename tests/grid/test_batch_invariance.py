"""``"batch_invariant": true`` on a vLLM model: refused on the CPU (vLLM's CPU build crashes under it), on another
backend and for seedless sampling, each in one line; where it is accepted it is part of the frozen, hashed model
settings, comes back from them as it was (what ``reproduce`` runs with), and sets ``VLLM_BATCH_INVARIANT`` in the
engine actor's own environment."""

from __future__ import annotations

import json
import os

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.settings import Settings
from mirrorscan.grid.spec import load_spec


def config(tmp_path, model: dict, **top) -> str:
    folder = tmp_path / "exp"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"instrument": "lens", "models": [model], **top}))
    return str(folder / "config.json")


def refusal(path: str) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        load_spec(path)
    assert "\n" not in str(err.value)
    return err.value


def test_a_cpu_engine_is_refused_in_one_line(tmp_path):
    err = refusal(config(tmp_path, {"model": "packaged:tiny-random-llama", "backend": "vllm", "batch_invariant": True}))
    assert err.field == "models[0].batch_invariant" and "GPU" in err.problem and "'cpu'" in err.problem
    assert 'device": "cuda' in err.fix


def test_another_backend_and_seedless_sampling_are_refused(tmp_path):
    err = refusal(config(tmp_path, {"model": "packaged:tiny-random-llama", "backend": "hf", "batch_invariant": True}))
    assert "only read by the vllm backend" in err.problem
    path = config(tmp_path, {"model": "packaged:tiny-random-llama", "backend": "vllm", "device": "cuda",
                             "batch_invariant": True}, temperature=0.7)
    assert "explicit seed" in refusal(path).problem
    assert load_spec(config(tmp_path, {"model": "packaged:tiny-random-llama", "backend": "vllm", "device": "cuda",
                                       "batch_invariant": True}, temperature=0.7, seed=11)).models[0].batch_invariant


def test_it_is_frozen_hashed_and_read_back(tmp_path):
    model = {"model": "packaged:tiny-random-llama", "backend": "vllm", "device": "cuda"}
    on = load_spec(config(tmp_path, {**model, "batch_invariant": True})).settings()
    off = load_spec(config(tmp_path, model)).settings()
    assert on.to_json()["models"][0]["batch_invariant"] is True
    assert off.to_json()["models"][0]["batch_invariant"] is None   # off, as settings written before the key read
    assert on.settings_hash() != off.settings_hash()
    back = Settings.from_json(json.loads(json.dumps(on.to_json())))
    assert back.models[0].batch_invariant is True and back.settings_hash() == on.settings_hash()


def test_the_engine_environment_gets_it_only_when_asked_and_never_on_a_cpu(monkeypatch, tmp_path):
    from mirrorscan.actors.vllm_env import apply_vllm_env

    # setenv first, so that monkeypatch removes the variable again after the test: set in this process, it would
    # put every later vLLM (and the torch ops it patches) of this test worker in batch-invariant mode
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "0")
    monkeypatch.delenv("VLLM_BATCH_INVARIANT")
    for key in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK",
                "HF_HUB_OFFLINE"):
        monkeypatch.setenv(key, os.environ.get(key, "x"))   # restored after the test
    apply_vllm_env("cuda", tmp_path)
    assert "VLLM_BATCH_INVARIANT" not in os.environ
    with pytest.raises(ValueError, match="needs a GPU"):
        apply_vllm_env("cpu", tmp_path, batch_invariant=True)
    assert "VLLM_BATCH_INVARIANT" not in os.environ
    apply_vllm_env("cuda", tmp_path, batch_invariant=True)
    assert os.environ["VLLM_BATCH_INVARIANT"] == "1"


def test_the_batch_invariance_test_leaves_no_variable_behind():
    """Runs after the test above in the same process (file order): the variable it set is gone."""
    assert "VLLM_BATCH_INVARIANT" not in os.environ
