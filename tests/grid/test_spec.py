"""Spec validation: every bad input is one ConfigError naming file, field and fix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant
from mirrorscan.grid.settings import settings_differences, settings_hash
from mirrorscan.grid.spec import default_label, load_spec

ROOT = Path(__file__).resolve().parents[2]
PAIRS = "pair_id,word_a,word_b\nvodka_whiskey,vodka,whiskey\ncat_dog,cat,dog\n"


def make_experiment(tmp_path: Path, config: dict, pairs: str = PAIRS, name: str = "exp") -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pairs.csv").write_text(pairs, encoding="utf-8")
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def base_config(**overrides) -> dict:
    config = {"instrument": "forced_choice", "models": [{"model": "/models/Some-Model", "label": "m1"}],
              "probe_set": "pairs.csv", "envelopes": ["english_strict", "json_schema"]}
    config.update(overrides)
    return config


def error_for(tmp_path: Path, config: dict, pairs: str = PAIRS) -> ConfigError:
    folder = make_experiment(tmp_path, config, pairs)
    with pytest.raises(ConfigError) as info:
        load_spec(folder)
    return info.value


def test_valid_spec_resolves_defaults(tmp_path):
    spec = load_spec(make_experiment(tmp_path, base_config()))
    assert spec.experiment == "exp"
    assert spec.instrument_spec.orderings == ("AB", "BA") and spec.samples == 1
    assert spec.models[0].temperature == 0.0 and spec.models[0].max_tokens == 64
    assert spec.n_cells() == 1 * 2 * 2 * 2 * 1
    settings = spec.settings().to_json()
    section = settings["instrument_settings"]
    assert section["envelope_set"]["texts"]["json_schema"]["user"].startswith('Return {"choice": "..."}')
    assert section["probe_set_sha256"] == spec.instrument_spec.pairs().sha256
    assert settings_hash(settings) == settings_hash(json.loads(json.dumps(settings)))


def test_default_label_from_model_and_effort(tmp_path):
    assert default_label("HuggingFaceTB/SmolLM2-135M-Instruct", None) == "smollm2-135m-instruct"
    assert default_label("openai/GPT-X", "high") == "gpt-x@high"
    spec = load_spec(make_experiment(tmp_path, base_config(models=[{"model": "org/Big-Model", "effort": "low"}])))
    assert spec.models[0].label == "big-model@low"


@pytest.mark.parametrize("config, field", [
    (base_config(colour="blue"), "colour"),
    (base_config(models=[{"model": "x", "labl": "typo"}]), "models[0].labl"),
    (base_config(samples="3"), "samples"),
    (base_config(temperature=True), "temperature"),
    (base_config(max_tokens=0), "max_tokens"),
    (base_config(top_p=1.5), "top_p"),
    (base_config(orderings=["AB", "AC"]), "orderings"),
    (base_config(envelopes=["english_strict", "no_such_envelope"]), "envelopes[1]"),
    (base_config(instrument="telepathy"), "instrument"),
    (base_config(models=[{"model": "a/m", "label": "same"}, {"model": "b/m", "label": "same"}]), "models[1].label"),
    (base_config(models=[{"model": "a/m", "label": "bad|label"}]), "models[0].label"),
    (base_config(models=[{"model": "a/m", "backend": "telegraph"}]), "models[0].backend"),
    (base_config(models=[{"model": "a/m", "api_key": "sk-secret"}]), "models[0].api_key"),
    (base_config(probe_set="missing.csv"), "probe_set"),
    (base_config(models=[]), "models"),
    (base_config(max_concurrent_models=0), "max_concurrent_models"),
    (base_config(max_concurrent_models="all"), "max_concurrent_models"),
])
def test_bad_config_names_file_field_and_fix(tmp_path, config, field):
    err = error_for(tmp_path, config)
    assert err.field == field
    assert err.file.endswith("config.json") or field == "probe_set"
    assert err.fix and "fix:" in str(err) and "\n" not in str(err)
    assert "sk-secret" not in str(err)


@pytest.mark.parametrize("pairs, field_part, problem_part", [
    ("pair_id,word_a,word_b\np1,vodka,whiskey\np1,cat,dog\n", "line 3:pair_id", "duplicate pair id"),
    ("pair_id,word_a,word_b\np1,vo|dka,whiskey\n", "line 2:word_a", "'|'"),
    ("pair_id,word_a,word_b\np|1,vodka,whiskey\n", "line 2:pair_id", "'|'"),
    ("pair_id,word_a,word_b\np1,vodka,whiskey\np2,whiskey,vodka\n", "line 3", "already appears"),
    ("id,a,b\np1,vodka,whiskey\n", "line 1", "header"),
    ("pair_id,word_a,word_b\np1,vodka\n", "line 2", "columns"),
    ("", "(file)", "is empty"),
    ("pair_id,word_a,word_b\np1,vod\x00ka,whiskey\n", "line 2:word_a", "U+0000"),
    ("pair_id,word_a,word_b\np1,\"vod\nka\",whiskey\n", "line 2:word_a", "U+000A"),
    ("pair_id,word_a,word_b\np1,vodka,whis\tkey\n", "line 2:word_b", "U+0009"),
    ("pair_id,word_a,word_b\np1,vodka," + "w" * 40000 + "\n", "line 2:word_b", "40000 characters"),
])
def test_bad_pair_sets(tmp_path, pairs, field_part, problem_part):
    err = error_for(tmp_path, base_config(), pairs)
    assert err.file.endswith("pairs.csv")
    assert err.field == field_part and problem_part in err.problem


@pytest.mark.parametrize("config, field, suggestion", [
    (base_config(max_token=5), "max_token", "did you mean max_tokens?"),
    (base_config(models=[{"model": "x", "labl": "typo"}]), "models[0].labl", "did you mean label?"),
    ({**base_config(), "forced_choice": {"envelope": ["json_schema"]}}, "forced_choice.envelope",
     "did you mean envelopes?"),
])
def test_a_mistyped_key_is_unknown_with_the_key_it_resembles(tmp_path, config, field, suggestion):
    if "forced_choice" in config:
        config = {k: v for k, v in config.items() if k not in ("probe_set", "envelopes")}
    err = error_for(tmp_path, config)
    assert (err.field, err.problem) == (field, "unknown key") and err.fix.startswith(suggestion)


def test_a_key_written_twice_is_refused_not_last_one_wins(tmp_path):
    folder = make_experiment(tmp_path, base_config())
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text[:-1] + ', "seed": 1, "seed": 2}')
    with pytest.raises(ConfigError, match="appears twice") as info:
        load_spec(folder)
    assert info.value.field == "seed"


def test_envelope_without_both_placeholders(tmp_path):
    folder = make_experiment(tmp_path, base_config(envelopes_file="envs.json", envelopes=["only_a"]))
    (folder / "envs.json").write_text(json.dumps({"version": "t", "envelopes": [
        {"id": "only_a", "system": "", "user": "Pick {a} please."}]}))
    with pytest.raises(ConfigError) as info:
        load_spec(folder)
    assert info.value.file.endswith("envs.json") and info.value.field == "envelopes[0].user"
    assert "{a} and {b}" in str(info.value)


def test_envelope_id_with_separator(tmp_path):
    folder = make_experiment(tmp_path, base_config(envelopes_file="envs.json", envelopes="all"))
    (folder / "envs.json").write_text(json.dumps({"version": "t", "envelopes": [
        {"id": "a|b", "system": "", "user": "{a} or {b}"}]}))
    with pytest.raises(ConfigError) as info:
        load_spec(folder)
    assert info.value.field == "envelopes[0].id"


def test_settings_differences_lists_paths():
    frozen = {"max_tokens": 64, "models": [{"label": "a", "dtype": "float32"}], "orderings": ["AB", "BA"]}
    current = {"max_tokens": 32, "models": [{"label": "a", "dtype": "bfloat16"}], "orderings": ["AB", "BA"]}
    assert settings_differences(frozen, current) == ["max_tokens", "models[0].dtype"]
    assert settings_differences(frozen, frozen) == []


def test_cli_exits_2_with_one_line_and_writes_nothing(tmp_path):
    folder = make_experiment(tmp_path, base_config(models=[{"model": "a/m", "label": "x", "dtpye": "float32"}]))
    home = tmp_path / "home"
    env = {"MIRRORSCAN_HOME": str(home), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.scan", str(folder)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "config.json" in lines[0] and "models[0].dtpye" in lines[0] and "fix:" in lines[0]
    assert "Traceback" not in proc.stderr
    written = [p for p in home.rglob("*")] if home.exists() else []
    assert written == []


def test_dsn_password_never_reaches_settings(tmp_path):
    spec = load_spec(make_experiment(tmp_path, base_config(catalog_dsn="postgresql://app:hunter2@127.0.0.1:5432/cat")))
    text = json.dumps(spec.settings().to_json())
    assert "hunter2" not in text and "catalog_dsn" not in text and spec.settings().to_json()["execution"]["catalog"] == "dsn"


def test_experiment_named_after_an_analyze_subcommand_is_refused(tmp_path):
    folder = make_experiment(tmp_path, base_config(), name="gstudy")
    with pytest.raises(ConfigError) as info:
        load_spec(folder)
    assert "reserved" in info.value.problem and info.value.field == "(experiment folder name)"


# ---- backends, endpoints and engine resources -----------------------------------------------------------

def one_model(**entry) -> dict:
    return base_config(models=[{"model": "some-model", "label": "m1", **entry}])


def test_api_backends_resolve_endpoints_and_keep_key_names_only(tmp_path):
    spec = load_spec(make_experiment(tmp_path, base_config(models=[
        {"model": "gpt-x", "backend": "openai", "api_key_env": "OPENAI_API_KEY"},
        {"model": "claude-x", "backend": "anthropic", "endpoint": "http://127.0.0.1:9999/"},
        {"model": "local-served", "label": "served", "backend": "openai", "endpoint": "http://127.0.0.1:8000/v1",
         "max_concurrency": 3, "timeout_s": 5, "max_retries": 0}])))
    gpt, claude, served = spec.models
    assert gpt.endpoint == "https://api.openai.com/v1" and gpt.api_key_env == "OPENAI_API_KEY"
    assert claude.endpoint == "http://127.0.0.1:9999"   # trailing slash removed: one spelling per endpoint
    assert (served.max_concurrency, served.timeout_s, served.max_retries) == (3, 5.0, 0)
    assert all(m.num_gpus == 0 for m in spec.models)
    assert "OPENAI_API_KEY" in json.dumps(spec.settings().to_json())   # the variable's name is recorded, never a value


@pytest.mark.parametrize("entry, field, words", [
    ({"backend": "openai_batch"}, "models[0].backend", "batch API"),
    ({"backend": "openai", "extra_body": {"batch": True}}, "models[0].backend", "online streaming"),
    ({"backend": "openai", "endpoint": "api.example.com/v1"}, "models[0].endpoint", "http"),
    ({"backend": "hf", "endpoint": "http://127.0.0.1:1/v1"}, "models[0].endpoint", "in-process"),
    ({"backend": "hf", "tensor_parallel_size": 2}, "models[0].tensor_parallel_size", "vllm"),
    ({"backend": "openai", "engine_args": {"max_model_len": 512}}, "models[0].engine_args", "vllm"),
    ({"backend": "openai", "max_concurrency": 0}, "models[0].max_concurrency", "positive"),
    ({"backend": "openai", "timeout_s": 0}, "models[0].timeout_s", "seconds"),
    ({"min_actors": 3, "max_actors": 2}, "models[0].max_actors", "min_actors"),
    ({"memory_gb": -1}, "models[0].memory_gb", "GiB"),
    ({"backend": "vllm", "tensor_parallel_size": 2, "max_actors": 2}, "models[0].max_actors", "one engine per model"),
    ({"backend": "grpc"}, "models[0].backend", "hf, vllm, openai, anthropic"),
])
def test_engine_keys_are_checked(tmp_path, entry, field, words):
    err = error_for(tmp_path, one_model(**entry))
    assert err.field == field and words in str(err)


def test_vllm_resources_and_pool_bounds_resolve(tmp_path):
    spec = load_spec(make_experiment(tmp_path, base_config(actor_pool_size=2, models=[
        {"model": "a", "backend": "vllm", "device": "cuda", "tensor_parallel_size": 4, "memory_gb": 64,
         "min_actors": 1, "max_actors": 1},
        {"model": "b", "backend": "vllm", "max_actors": 6},
        {"model": "c", "backend": "vllm", "device": "cuda", "num_gpus": 0.5, "min_actors": 1}])))
    a, b, c = spec.models
    assert (a.num_gpus, a.memory_gb, a.min_actors, a.max_actors) == (4.0, 64, 1, 1)
    assert (b.num_gpus, b.min_actors, b.max_actors) == (0.0, 2, 6)   # CPU build: no GPU asked for
    assert (c.num_gpus, c.min_actors, c.max_actors) == (0.5, 1, 2)


def test_model_pools_at_once_is_an_execution_setting(tmp_path):
    """max_concurrent_models says how a sweep runs, not what it answers: recorded under execution, left out
    of the hash, so a resume may change it; and resolved by where the sweep runs when left out."""
    from mirrorscan.cluster.scan.sweep import concurrent_models
    from mirrorscan.grid.settings import settings_hash

    one = load_spec(make_experiment(tmp_path, base_config(max_concurrent_models=1))).settings().to_json()
    three = load_spec(make_experiment(tmp_path, base_config(max_concurrent_models=3))).settings().to_json()
    assert one["execution"]["max_concurrent_models"] == 1 and "max_concurrent_models" not in one
    assert settings_hash(one) == settings_hash(three)
    local = [ModelVariant(label="a", model="m"), ModelVariant(label="b", model="m")]
    declared = [ModelVariant(label="a", model="m", memory_gb=2), ModelVariant(label="b", model="m", memory_gb=2)]
    assert concurrent_models(None, local, joined=False) == 1   # a local machine's memory is not declared
    assert concurrent_models(None, declared, joined=False) == 2
    assert concurrent_models(None, local, joined=True) == 2    # on a cluster: every model at once
    assert concurrent_models(1, local, joined=True) == 1


# ---- overrides a backend would drop are refused ---------------------------------------------------------

@pytest.mark.parametrize("entry, field, words", [
    ({"extra_body": {"top_k": 5}}, "models[0].extra_body", "sends no request"),
    ({"backend": "anthropic", "chat_template_kwargs": {"enable_thinking": True}}, "models[0].chat_template_kwargs",
     "renders its own prompt"),
    ({"backend": "anthropic", "extra_body": {"chat_template_kwargs": {"enable_thinking": True}}},
     "models[0].extra_body.chat_template_kwargs", "renders its own prompt"),
    ({"backend": "anthropic", "effort": "minimal"}, "models[0].effort", "low, medium, high, xhigh, max"),
    ({"backend": "anthropic", "effort": "high", "extra_body": {"output_config": {"effort": "low"}}},
     "models[0].effort", "set twice"),
    ({"backend": "vllm", "extra_body": {"chat_template_kwargs": "enable_thinking"}},
     "models[0].extra_body.chat_template_kwargs", "an object"),
])
def test_overrides_the_backend_would_drop_are_refused(tmp_path, entry, field, words):
    err = error_for(tmp_path, one_model(**entry))
    assert err.field == field and words in str(err) and "\n" not in str(err)


def test_overrides_a_backend_sends_are_accepted(tmp_path):
    spec = load_spec(make_experiment(tmp_path, base_config(models=[
        {"model": "gpt-x", "backend": "openai", "effort": "high", "chat_template_kwargs": {"enable_thinking": True}},
        {"model": "claude-x", "backend": "anthropic", "effort": "high", "extra_body": {"thinking": {"type": "enabled"}}},
        {"model": "local", "backend": "vllm", "effort": "low", "extra_body": {"top_k": 5}},
        {"model": "local", "label": "local-hf", "effort": "low", "chat_template_kwargs": {"enable_thinking": False}}])))
    assert [m.label for m in spec.models] == ["gpt-x@high", "claude-x@high", "local@low", "local-hf"]


def test_a_quoted_value_is_cut_at_a_word_boundary(tmp_path):
    from mirrorscan.grid.errors import shorten

    description = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    err = error_for(tmp_path, base_config(samples=description))
    assert "…" in err.problem
    quoted = err.problem.split("is ", 1)[1].split(", not", 1)[0]
    assert quoted.rstrip("…").split()[-1] in description.split() + ['"alpha']
    assert shorten("short") == "short" and len(shorten("x" * 500, 60)) == 60


def test_the_hf_sampler_version_shapes_results_only_where_the_hf_engine_samples(tmp_path):
    """A seed gives other text under another HF sampler version, so sampled grids on that engine hash it and a
    resume from older settings (without it) is refused; greedy grids and other engines are untouched by it."""
    from mirrorscan.grid.settings import SAMPLER_VERSION

    greedy = load_spec(make_experiment(tmp_path / "g", base_config())).settings().to_json()
    sampled = load_spec(make_experiment(tmp_path / "s", base_config(temperature=0.7))).settings().to_json()
    on_vllm = load_spec(make_experiment(tmp_path / "v", base_config(
        temperature=0.7, models=[{"model": "/models/Some-Model", "label": "m1", "backend": "vllm"}]))).settings().to_json()
    assert "sampler_version" not in greedy and "sampler_version" not in on_vllm
    assert sampled["sampler_version"] == SAMPLER_VERSION
    older = {k: v for k, v in sampled.items() if k != "sampler_version"}
    assert settings_differences(older, sampled) == ["sampler_version"]
    assert settings_hash(older) != settings_hash(sampled)
