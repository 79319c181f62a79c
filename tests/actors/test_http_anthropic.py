"""The Anthropic sampler against a real local HTTP server speaking the Messages SSE protocol with injected
faults (tests/actors/anthropic_server.py says which parts of the protocol it covers): retries, cut and
stalled streams, refused parameters, thinking, headers, concurrency bound and secrets."""

from __future__ import annotations

import json
import random
import urllib.parse

import pyarrow as pa
import pytest

from mirrorscan.actors.http_anthropic import AnthropicSampler
from mirrorscan.actors.http_common import backoff_s, header_value, parse_retry_after, per_actor_concurrency
from mirrorscan.actors.registry import engine_class
from mirrorscan.actors.streaming import timing_problems
from mirrorscan.grid.errors import ConfigError
from anthropic_server import ANSWER_PIECES, THINKING_PIECES, FaultServer
from mirrorscan.grid.records import ModelVariant, InvocationContext

RUN = InvocationContext(invocation_id="inv-anth", experiment="exp", instrument="forced_choice", envelope_version="t")
ANSWER = "".join(ANSWER_PIECES)
KEY_ENV = "MIRRORSCAN_TEST_ANTHROPIC_KEY"
KEY = "sk-ant-test-7f3c9d1e2b4a5f60-secret"
FAST = {"backoff_base_s": 0.01, "backoff_ceiling_s": 0.05}


def variant(url: str, **kw) -> ModelVariant:
    return ModelVariant(**{"label": "claude", "model": "claude-test", "backend": "anthropic", "temperature": 0.0, "top_p": 1.0,
            "max_tokens": 32, "endpoint": url, "api_key_env": KEY_ENV, "max_concurrency": 8, "timeout_s": 2.0,
            "max_retries": 2, "effort": None, "extra_body": {}, **kw})


def cells(probe_ids: list[str], samples: int = 1) -> pa.Table:
    return pa.Table.from_pylist([
        {"probe_id": p, "sample": s, "attempt": 1, "seed": 1000 + i, "system_text": "Answer in one line.",
         "user_text": "Which do you prefer, cat or dog?", "word_a": "cat", "word_b": "dog"}
        for i, (p, s) in enumerate((p, s) for p in probe_ids for s in range(samples))])


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with FaultServer() as s:
        yield s


def run(server: FaultServer, table: pa.Table, **kw) -> list[dict]:
    sampler = AnthropicSampler(variant(server.url, **kw), "claude-test", RUN, **FAST)
    try:
        return sampler(table).to_pylist()
    finally:
        sampler.close()


def test_every_fault_ends_as_exactly_one_correct_row_with_the_expected_attempts(server):
    modes = ["ok", "429_once", "500_twice", "cut_once", "stall_once", "overloaded_once", "500_always"]
    ids = [f"claude|{m}|envelope|AB" for m in modes]
    for pid, mode in zip(ids, modes):
        server.faults[pid] = mode
    table = cells(ids)
    rows = run(server, table)
    assert [(r["probe_id"], r["sample"]) for r in rows] == list(zip(table["probe_id"].to_pylist(), table["sample"].to_pylist()))
    expected = {"ok": 1, "429_once": 2, "500_twice": 3, "cut_once": 2, "stall_once": 2, "overloaded_once": 2,
                "500_always": 3}   # max_retries = 2 → at most 3 HTTP attempts
    for row, mode in zip(rows, modes):
        params = json.loads(row["request_params"])
        assert server.counts[row["probe_id"]] == expected[mode], mode
        assert params["http_attempts"] == expected[mode], mode
        assert row["endpoint"] == f"{server.url}/v1/messages" and row["backend"] == "anthropic"
        if mode == "500_always":
            assert row["response"] is None and "HTTP 500" in row["error"] and "after 3 HTTP attempts" in row["error"]
            continue
        assert row["error"] is None, (mode, row["error"])
        assert row["response"] == ANSWER, mode   # a cut attempt's partial text is discarded, never stitched
        assert row["n_chunks"] == len(ANSWER_PIECES) and row["completion_tokens"] == len(ANSWER_PIECES)
        assert row["prompt_tokens"] == 11 and row["finish_reason"] == "stop" and row["reasoning"] is None
        assert row["timing_scope"] == "request" and timing_problems(row) == [], mode
        assert row["ttft_answer_ms"] == row["ttft_ms"] and row["started_at"] is not None
        assert params["seeded"] is False and params["temperature"] == 0.0 and "top_p" not in params
        assert "messages" not in params and "system" not in params


def test_temperature_zero_with_thinking_is_an_error_row_naming_the_field_and_the_fix(server):
    thinking = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    pid = "claude|cat|dog|english_strict|AB"
    rows = run(server, cells([pid]), extra_body=thinking)
    assert len(rows) == 1 and rows[0]["response"] is None
    error = rows[0]["error"]
    assert "HTTP 400 invalid_request_error" in error and "field: temperature (sent 0.0)" in error
    assert "models[claude].temperature" in error and "≥ 5 samples at default sampling" in error
    assert server.counts[pid] == 1   # a refused parameter is not retried
    params = json.loads(rows[0]["request_params"])
    assert params["temperature"] == 0.0 and params["thinking"] == thinking["thinking"]   # what was sent, unchanged
    assert server.requests[-1]["body"]["temperature"] == 0.0


def test_thinking_goes_to_reasoning_and_counts_for_ttft_but_not_ttft_answer(server):
    thinking = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    rows = run(server, cells(["claude|think|x|e|AB"], samples=2), temperature=1.0, extra_body=thinking)
    for row in rows:
        assert row["error"] is None and row["response"] == ANSWER
        assert row["reasoning"] == "".join(THINKING_PIECES)
        assert row["n_chunks"] == len(THINKING_PIECES) + len(ANSWER_PIECES)
        assert row["completion_tokens"] == len(THINKING_PIECES) + len(ANSWER_PIECES)
        assert row["ttft_ms"] < row["ttft_answer_ms"] <= row["total_ms"] and timing_problems(row) == []


def test_probe_headers_reach_the_server_and_are_recorded_without_auth(server):
    pid = "claude|café|thé|english_strict|BA"   # non-ASCII words travel percent-encoded
    table = cells([pid], samples=2).set_column(2, "attempt", pa.array([3, 3], pa.int32()))
    rows = run(server, table)
    seen = sorted((r["headers"]["X-Probe-Sample"], r) for r in server.requests)
    assert len(seen) == 2
    for sample, (_, req) in enumerate(seen):
        h = req["headers"]
        assert urllib.parse.unquote(h["X-Probe-Id"]) == pid and h["X-Probe-Attempt"] == "3"
        assert h["X-Invocation-Id"] == "inv-anth" and h["x-api-key"] == KEY and h["anthropic-version"]
        assert req["body"]["system"] == "Answer in one line." and req["body"]["stream"] is True
        assert req["body"]["messages"] == [{"role": "user", "content": "Which do you prefer, cat or dog?"}]
    for row in rows:
        recorded = json.loads(row["request_headers"])
        assert recorded["X-Probe-Id"] == header_value(pid) and recorded["X-Probe-Sample"] == str(row["sample"])
        assert not {k.lower() for k in recorded} & {"x-api-key", "authorization"}


def test_the_key_reaches_the_server_and_no_row_field(server):
    ids = ["claude|ok|a|e|AB", "claude|echo|a|e|AB", "claude|down|a|e|AB"]
    server.faults.update({ids[1]: "401_echo", ids[2]: "500_always"})
    rows = run(server, cells(ids))
    assert {r["headers"]["x-api-key"] for r in server.requests} == {KEY}
    assert rows[0]["error"] is None and "HTTP 401" in rows[1]["error"] and KEY_ENV in rows[1]["error"]
    assert "[redacted]" in rows[1]["error"]   # the server echoed the key; the row does not carry it
    for row in rows:
        for name, value in row.items():
            assert KEY not in str(value), name


def test_a_missing_key_variable_gives_error_rows_naming_it_and_sends_nothing(server, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    rows = run(server, cells(["claude|a|b|e|AB", "claude|c|d|e|AB"]))
    assert len(rows) == 2 and not server.requests
    for row in rows:
        assert row["response"] is None and f"environment variable {KEY_ENV} is not set" in row["error"]
        assert json.loads(row["request_params"])["http_attempts"] == 0
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)   # no api_key_env: the documented default variable
    rows = run(server, cells(["claude|a|b|e|AB"]), api_key_env=None)
    assert "environment variable ANTHROPIC_API_KEY is not set" in rows[0]["error"] and not server.requests


def test_requests_in_flight_stay_within_max_concurrency(server):
    ids = [f"claude|slow{i}|x|e|AB" for i in range(6)]
    server.faults.update({pid: "slow" for pid in ids})
    rows = run(server, cells(ids), max_concurrency=2)
    assert all(r["error"] is None and r["response"] == ANSWER for r in rows)
    assert len(server.requests) == 6 and 1 <= server.max_inflight <= 2


def test_extra_body_may_not_replace_the_prompt(server):
    with pytest.raises(ConfigError, match=r"models\[claude\]\.extra_body\.messages"):
        AnthropicSampler(variant(server.url, extra_body={"messages": []}), "claude-test", RUN)


def test_effort_is_sent_as_output_config_effort_and_recorded(server):
    schema = {"format": {"type": "json_schema", "schema": {"type": "object"}}}
    rows = run(server, cells(["claude|e|x|e|AB"]), effort="high", extra_body={"output_config": schema})
    assert rows[0]["error"] is None, rows[0]["error"]
    sent = {**schema, "effort": "high"}   # merged into extra_body's output_config
    assert server.requests[-1]["body"]["output_config"] == sent
    assert json.loads(rows[0]["request_params"])["output_config"] == sent
    assert json.loads(rows[0]["generation_overrides"]) == {"effort": "high", "chat_template_kwargs": {},
                                                           "extra_body": {"output_config": sent}}
    rows = run(server, cells(["claude|n|x|e|AB"]))
    assert "output_config" not in server.requests[-1]["body"]
    assert json.loads(rows[0]["generation_overrides"]) == {"effort": None, "chat_template_kwargs": {}, "extra_body": {}}


@pytest.mark.parametrize("kw, field", [
    ({"chat_template_kwargs": {"enable_thinking": True}}, "chat_template_kwargs"),
    ({"extra_body": {"chat_template_kwargs": {"enable_thinking": True}}}, "extra_body.chat_template_kwargs"),
])
def test_chat_template_kwargs_cannot_be_sent_and_are_refused(server, kw, field):
    with pytest.raises(ConfigError, match=rf"models\[claude\]\.{field}: .*renders its own prompt"):
        AnthropicSampler(variant(server.url, **kw), "claude-test", RUN)
    assert not server.requests


def test_backoff_retry_after_and_shares_are_bounded():
    rng = random.Random(0)
    waits = [backoff_s(k, 0.5, 4.0, None, 60.0, rng) for k in range(1, 12) for _ in range(20)]
    assert all(0 <= w <= 4.0 for w in waits) and max(waits) > 2.0   # grows, then the ceiling holds
    assert backoff_s(1, 0.5, 4.0, 7.0, 60.0, rng) == 7.0   # Retry-After obeyed …
    assert backoff_s(1, 0.5, 4.0, 600.0, 60.0, rng) == 60.0   # … up to the cap
    assert parse_retry_after("3") == 3.0 and parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert per_actor_concurrency(ModelVariant(label="a", model="m", max_concurrency=8, max_actors=3)) == 2
    assert per_actor_concurrency(ModelVariant(label="a", model="m", max_concurrency=2, max_actors=4)) == 1


def test_registry_and_resources():
    cls = engine_class("anthropic")
    assert cls is AnthropicSampler and cls.ray_resources(variant("http://127.0.0.1:9")) == {"num_cpus": 0.25}
