"""Secrets in config.json and in recorded endpoints (grid/secrets.py).

Secrets are values and exact key names, not key fragments: "token" in a setting's name is not a secret.
The ``test_load_spec_*`` tests check the same through ``grid.spec.load_spec`` (they need it to call
``reject_secrets`` and ``check_endpoint_url``).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pyarrow as pa
import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.secret_shapes import looks_like_secret
from mirrorscan.grid.secrets import check_endpoint_url, reject_secrets, strip_userinfo

OPENAI_KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0"
ANTHROPIC_KEY = "sk-ant-api03-" + "Zy9Xw8Vu7Ts6Rq5Po4Nm"
AWS_KEY_ID = "AKIA" + "IOSFODNN7EXAMPLE"
BEARER = "Bearer " + "eyJhbGciOiJIUzI1NiJ9.e30.abc123"
PASSWORD = "hunter2-Pa55"

OVERRIDES = {   # ordinary settings whose names contain "token": never secrets
    "anthropic": {"extra_body": {"thinking": {"type": "enabled", "budget_tokens": 1024}}},
    "openai": {"extra_body": {"max_completion_tokens": 512}},
    "vllm": {"engine_args": {"max_num_batched_tokens": 8192, "tokenizer_mode": "auto"}},
}


def error(obj) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        reject_secrets("exp/config.json", obj)
    return info.value


# ---- the check itself -------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [OPENAI_KEY, ANTHROPIC_KEY, AWS_KEY_ID, BEARER, "bearer token-abc123",
                                   "sk-" + "x" * 16, f"my key is {OPENAI_KEY}, keep it", "ASIA" + "Q" * 16,
                                   f"https://user:{OPENAI_KEY}@host/v1"])
def test_key_shaped_values_look_like_secrets(value):
    assert looks_like_secret(value)


@pytest.mark.parametrize("value", ["", "sk-short", "task-abcdefghijklmnopqrstuvwxyz", "OPENAI_API_KEY",
                                   "Bearer tokens are sent by the sampler", "AKIA-not-a-key", "akia" + "a" * 16,
                                   "https://api.openai.com/v1", "HuggingFaceTB/SmolLM2-135M-Instruct",
                                   "packaged:smollm2-135m-instruct", "AKIA" + "A" * 17])
def test_ordinary_values_do_not(value):
    assert not looks_like_secret(value)


@pytest.mark.parametrize("backend", sorted(OVERRIDES))
def test_token_named_settings_pass(backend):
    reject_secrets("exp/config.json", {"models": [{"model": "m", "backend": backend, "api_key_env": "MY_KEY",
                                                    "max_tokens": 64, **OVERRIDES[backend]}]})


@pytest.mark.parametrize("key", ["api_key", "API-Key", "apikey", "Authorization", "password", "passwd", "secret",
                                 "client_secret", "access_token", "refresh-token", "auth_token", "bearer_token",
                                 "X-Api-Key"])
def test_secret_names_are_refused_at_any_depth_with_the_dotted_path(key):
    err = error({"models": [{"model": "m", "extra_body": {"headers": {key: "x"}}}]})
    assert err.field == f"models[0].extra_body.headers.{key}" and err.file == "exp/config.json"
    assert "api_key_env" in err.fix and "environment variable" in err.fix


@pytest.mark.parametrize("obj, field", [
    ({"description": f"run with {OPENAI_KEY}"}, "description"),
    ({"models": [{"model": "m", "api_key_env": ANTHROPIC_KEY}]}, "models[0].api_key_env"),
    ({"models": [{"model": "m"}, {"model": "n", "extra_body": {"stop": ["a", BEARER]}}]}, "models[1].extra_body.stop[1]"),
    ({"models": [{"model": "m", "engine_args": {"nested": {"deeper": AWS_KEY_ID}}}]}, "models[0].engine_args.nested.deeper"),
    ({"models": [{"model": "m", "extra_body": {OPENAI_KEY: 1}}]}, "models[0].extra_body"),
])
def test_key_shaped_values_are_refused_anywhere_without_echoing_them(obj, field):
    err = error(obj)
    assert err.field == field and "api_key_env" in err.fix
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, BEARER, AWS_KEY_ID, "A1b2C3d4", "eyJhbGci", "IOSFODNN"):
        assert secret not in str(err)


def test_endpoint_with_userinfo_is_refused_without_echoing_it():
    for url in (f"https://user:{PASSWORD}@api.example.com/v1", "http://someone@127.0.0.1:8000/v1",
                f"someone:{PASSWORD}@api.example.com/v1"):
        with pytest.raises(ConfigError) as info:
            check_endpoint_url("exp/config.json", "models[0].endpoint", url)
        err = info.value
        assert err.field == "models[0].endpoint" and "api_key_env" in err.fix
        assert PASSWORD not in str(err) and "someone" not in str(err)
    for url in (None, "https://api.openai.com/v1", "http://127.0.0.1:8000/v1?x=a@b", "http://h/v1/a@b"):
        check_endpoint_url("exp/config.json", "models[0].endpoint", url)


@pytest.mark.parametrize("url, stripped", [
    (f"https://user:{PASSWORD}@api.example.com/v1", "https://api.example.com/v1"),
    ("http://u:p@w@127.0.0.1:8000/v1/chat/completions", "http://127.0.0.1:8000/v1/chat/completions"),
    ("https://api.openai.com/v1/chat/completions", "https://api.openai.com/v1/chat/completions"),
    ("http://h:1/v1?q=a@b", "http://h:1/v1?q=a@b"),
    ("engine://vllm/org/model@v2", "engine://vllm/org/model@v2"),
    (None, None), ("", ""),
])
def test_strip_userinfo(url, stripped):
    assert strip_userinfo(url) == stripped


# ---- recorded endpoints -----------------------------------------------------------------------------

def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
def test_http_sampler_rows_record_no_userinfo(backend):
    from mirrorscan.actors.registry import engine_class
    from mirrorscan.grid.records import ModelVariant, InvocationContext

    base = f"http://someone:{PASSWORD}@127.0.0.1:{closed_port()}"
    v = ModelVariant(label="m", model="m", backend=backend, temperature=0.0, top_p=1.0, max_tokens=4,
                     endpoint=base + "/v1", max_concurrency=1, timeout_s=2.0, max_retries=0)
    cells = pa.Table.from_pylist([{"probe_id": "m|a|b|e|AB", "sample": 0, "attempt": 1, "seed": 1,
                                   "system_text": "", "user_text": "cat or dog?"}])
    sampler = engine_class(backend)(v, "m", InvocationContext(invocation_id="inv", experiment="exp",
                                                       instrument="forced_choice", envelope_version="t"))
    try:
        (row,) = sampler(cells).to_pylist()
    finally:
        sampler.close()
    assert row["error"] and row["endpoint"].startswith("http://127.0.0.1:") and "/v1" in row["endpoint"]
    for name, value in row.items():
        assert PASSWORD not in str(value) and "someone" not in str(value), name


def test_inference_log_rows_record_no_userinfo():
    from mirrorscan.cluster.catalog.inference_rows import log_rows_from_traces, normal_row
    from mirrorscan.grid.trace_schema import to_trace_table

    traces = to_trace_table([{"invocation_id": "inv", "probe_id": "m|a|b|e|AB", "sample": 0, "attempt": 1,
                              "label": "m", "timing_scope": "request",
                              "endpoint": f"https://someone:{PASSWORD}@h.example/v1/chat/completions"}])
    (row,) = log_rows_from_traces(traces)
    assert row["endpoint"] == "https://h.example/v1/chat/completions"
    stored = normal_row({**row, "endpoint": f"http://someone:{PASSWORD}@127.0.0.1:1/v1"})
    assert stored["endpoint"] == "http://127.0.0.1:1/v1"


# ---- through load_spec (need grid/spec.py to call grid.secrets) --------------------------------------

PAIRS = "pair_id,word_a,word_b\nvodka_whiskey,vodka,whiskey\ncat_dog,cat,dog\n"


def spec_error(tmp_path: Path, **config_overrides) -> ConfigError:
    from mirrorscan.grid.spec import load_spec

    with pytest.raises(ConfigError) as info:
        load_spec(experiment(tmp_path, **config_overrides))
    return info.value


def experiment(tmp_path: Path, **overrides) -> Path:
    config = {"instrument": "forced_choice", "models": [{"model": "/models/Some-Model", "label": "m1"}],
              "probe_set": "pairs.csv", "envelopes": ["english_strict"], **overrides}
    folder = tmp_path / "exp"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pairs.csv").write_text(PAIRS, encoding="utf-8")
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.mark.parametrize("backend", sorted(OVERRIDES))
def test_load_spec_accepts_token_named_settings(tmp_path, backend):
    from mirrorscan.grid.spec import load_spec

    model = {"model": "org/model" if backend != "vllm" else "/models/Some-Model", "label": "m1", "backend": backend,
             **OVERRIDES[backend]}
    spec = load_spec(experiment(tmp_path, models=[model]))
    resolved = spec.models[0]
    assert resolved.extra_body == OVERRIDES[backend].get("extra_body", {})
    assert resolved.engine_args == OVERRIDES[backend].get("engine_args", {})


def test_load_spec_refuses_a_key_in_description_or_api_key_env(tmp_path):
    err = spec_error(tmp_path, description=f"uses {OPENAI_KEY}")
    assert err.field == "description" and OPENAI_KEY not in str(err) and "api_key_env" in err.fix
    err = spec_error(tmp_path, models=[{"model": "org/model", "backend": "anthropic", "api_key_env": ANTHROPIC_KEY}])
    assert err.field == "models[0].api_key_env" and ANTHROPIC_KEY not in str(err)


def test_load_spec_refuses_secret_names_exactly(tmp_path):
    err = spec_error(tmp_path, models=[{"model": "org/model", "backend": "openai", "extra_body": {"api-key": "x"}}])
    assert err.field == "models[0].extra_body.api-key" and "api_key_env" in err.fix


def test_load_spec_refuses_an_endpoint_with_userinfo(tmp_path):
    err = spec_error(tmp_path, models=[{"model": "org/model", "backend": "openai",
                                        "endpoint": f"https://someone:{PASSWORD}@api.example.com/v1"}])
    assert err.field == "models[0].endpoint" and "api_key_env" in err.fix
    assert PASSWORD not in str(err) and "someone" not in str(err)


# ---- one list of shapes, every free-text field ----------------------------------------------------------

HF_TOKEN = "hf_" + "abcdefghijklmnopqrstuvwxyz12"
GH_TOKEN = "ghp_" + "abcdefghijklmnopqrstuvwxyz1234"
URL_CREDENTIALS = "https://bob:" + "hunter22" + "@example.com/x"


@pytest.mark.parametrize("value", [HF_TOKEN, GH_TOKEN, "github_pat_" + "A" * 30, URL_CREDENTIALS, AWS_KEY_ID,
                                   "-----BEGIN RSA PRIVATE KEY-----", "see postgresql://u:pw@db/x", "password=pw"])
def test_every_shape_submit_refuses_is_refused_in_a_description(value):
    """The shapes submit refuses in a runtime env are refused in config.json's free text too (one list)."""
    from mirrorscan.cluster.runtime.job_submission import secret_problem

    assert secret_problem("X", value)
    err = error({"description": f"notes: {value} (do not share)"})
    assert err.field == "description" and value not in str(err)


@pytest.mark.parametrize("value", ["hf_hub_download is a function", "ghp_short", "https://example.com/a@b",
                                   "ssh://git@github.com/org/repo", "the password field", "passwords = many"])
def test_near_misses_are_not_secrets(value):
    assert not looks_like_secret(value)
