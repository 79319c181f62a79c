"""The OpenAI-compatible sampler against vLLM's own OpenAI server (demo model, CPU, float32) and, for
faults, the local fault server in its OpenAI SSE framing (tests/actors/anthropic_server.py)."""

from __future__ import annotations

import json
import urllib.parse

import pyarrow as pa
import pytest
from anthropic_server import ANSWER_PIECES, THINKING_PIECES, FaultServer

from mirrorscan.actors.http_common import header_value
from mirrorscan.actors.http_openai import OpenAISampler
from mirrorscan.actors.registry import engine_class
from mirrorscan.actors.streaming import timing_problems
from fc_grid import fc_rendered
from mirrorscan.grid.records import ModelVariant, InvocationContext

RUN = InvocationContext(invocation_id="inv-oai", experiment="exp", instrument="forced_choice", envelope_version="t")
PAIRS = pa.table({"pair_id": ["cd", "tc"], "word_a": ["cat", "tea"], "word_b": ["dog", "coffee"]})
KEY_ENV = "MIRRORSCAN_TEST_OPENAI_KEY"
KEY = "sk-proj-test-91ab2cd3ef45-secret"
FAST = {"backoff_base_s": 0.01, "backoff_ceiling_s": 0.05}


def grid_cells(label: str, samples: int = 1) -> pa.Table:
    """Real rendered forced-choice cells (2 pairs × 1 envelope × 2 orderings × samples)."""
    return fc_rendered([label], PAIRS, ["english_strict"], ["AB", "BA"], samples, 7)


VLLM_KEY_ENV = "MIRRORSCAN_TEST_VLLM_KEY"
"""Where the session ``vllm_server`` fixture keeps its API key (tests/conftest.py)."""


def variant(endpoint: str, **kw) -> ModelVariant:
    return ModelVariant(**{"label": "smollm2", "model": "smollm2", "backend": "openai", "temperature": 0.0, "top_p": 1.0,
            "max_tokens": 12, "endpoint": endpoint, "api_key_env": None, "max_concurrency": 4, "timeout_s": 60.0,
            "max_retries": 2, "effort": None, "extra_body": {}, **kw})


def answer(v: ModelVariant, table: pa.Table) -> list[dict]:
    sampler = OpenAISampler(v, v.model, RUN, **FAST)
    try:
        return sampler(table).to_pylist()
    finally:
        sampler.close()


# ---- against vLLM's own OpenAI-compatible server ----------------------------------------------------

def test_vllm_server_rows_have_text_usage_tokens_and_honest_timing(vllm_server):
    table = grid_cells("smollm2")
    v = variant(vllm_server, api_key_env=VLLM_KEY_ENV)
    rows = answer(v, table)
    assert [r["probe_id"] for r in rows] == table["probe_id"].to_pylist()
    for row in rows:
        print(f"vllm {row['probe_id']}: ttft {row['ttft_ms']:.1f} ms, total {row['total_ms']:.1f} ms, "
              f"{row['n_chunks']} chunks, {row['completion_tokens']} tokens, {row['decode_tok_s']} tok/s")
        assert row["error"] is None and row["response"], row["error"]
        assert timing_problems(row) == [] and row["n_chunks"] >= 1 and row["timing_scope"] == "request"
        assert row["ttft_answer_ms"] == row["ttft_ms"] and row["reasoning"] is None
        # completion_tokens comes from the usage chunk: at most max_tokens, exactly max_tokens when cut at length
        assert 1 <= row["completion_tokens"] <= 12 and row["prompt_tokens"] > 10
        assert row["finish_reason"] in ("stop", "length")
        assert row["finish_reason"] != "length" or row["completion_tokens"] == 12
        assert row["n_chunks"] <= row["completion_tokens"] + 1
        assert row["endpoint"] == f"{vllm_server}/chat/completions" and row["backend"] == "openai"
        headers = json.loads(row["request_headers"])
        assert headers["X-Probe-Id"] == header_value(row["probe_id"]) and headers["X-Invocation-Id"] == "inv-oai"
        params = json.loads(row["request_params"])
        assert params["temperature"] == 0.0 and params["seed"] == row["seed"] and params["http_attempts"] == 1
        assert params["stream_options"] == {"include_usage": True} and "messages" not in params
    again = answer(v, table)   # greedy is deterministic across calls
    assert [r["response"] for r in again] == [r["response"] for r in rows]


def test_vllm_server_seeded_sampling_repeats_per_cell_seed(vllm_server):
    table = grid_cells("smollm2", samples=2)
    v = variant(vllm_server, temperature=1.0, top_p=0.95, max_tokens=10, api_key_env=VLLM_KEY_ENV)
    first = answer(v, table)
    second = answer(v, table.take([3, 1, 6, 0, 7, 2, 5, 4]))   # other order, other neighbours
    by_key = {(r["probe_id"], r["sample"]): r["response"] for r in second}
    assert all(r["error"] is None for r in first + second)
    assert all(by_key[(r["probe_id"], r["sample"])] == r["response"] for r in first)
    assert len({r["seed"] for r in first}) == len(first)   # each cell sent its own seed


def test_vllm_server_accepts_chat_template_kwargs(vllm_server):
    v = variant(vllm_server, api_key_env=VLLM_KEY_ENV, chat_template_kwargs={"enable_thinking": False})
    rows = answer(v, grid_cells("smollm2").slice(0, 1))
    assert rows[0]["error"] is None and rows[0]["response"], rows[0]["error"]   # an extra parameter it takes
    assert json.loads(rows[0]["request_params"])["chat_template_kwargs"] == {"enable_thinking": False}


# ---- against the fault server (OpenAI SSE framing) --------------------------------------------------

@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with FaultServer() as s:
        yield s


def test_faults_end_as_one_row_each_and_the_key_stays_out_of_rows(server):
    modes = ["ok", "429_once", "500_twice", "cut_once", "stall_once", "overloaded_once", "500_always", "401_echo"]
    ids = [f"gpt|{m}|envelope|AB" for m in modes]
    server.faults.update(dict(zip(ids, modes)))
    table = pa.Table.from_pylist([{"probe_id": p, "sample": 0, "attempt": 1, "seed": i, "system_text": "",
                                   "user_text": "cat or dog?"} for i, p in enumerate(ids)])
    rows = answer(variant(f"{server.url}/v1", api_key_env=KEY_ENV, timeout_s=2.0), table)
    assert [r["probe_id"] for r in rows] == ids
    expected = {"ok": 1, "429_once": 2, "500_twice": 3, "cut_once": 2, "stall_once": 2, "overloaded_once": 2,
                "500_always": 3, "401_echo": 1}
    for row, mode in zip(rows, modes):
        assert server.counts[row["probe_id"]] == expected[mode] == json.loads(row["request_params"])["http_attempts"]
        if mode in ("500_always", "401_echo"):
            assert row["response"] is None and row["error"]
            continue
        assert row["error"] is None and row["response"] == "".join(ANSWER_PIECES), mode
        assert row["completion_tokens"] == len(ANSWER_PIECES) and row["n_chunks"] == len(ANSWER_PIECES)
        assert timing_problems(row) == []
    assert {r["headers"]["Authorization"] for r in server.requests} == {f"Bearer {KEY}"}
    assert all(r["body"]["messages"] == [{"role": "user", "content": "cat or dog?"}] for r in server.requests)
    assert {urllib.parse.unquote(r["headers"]["X-Probe-Id"]) for r in server.requests} == set(ids)
    for row in rows:
        for name, value in row.items():
            assert KEY not in str(value), name
        assert "authorization" not in row["request_headers"].lower()


def test_reasoning_and_a_refused_temperature(server):
    ids = ["o|cat|dog|e|AB", "o|tea|coffee|e|AB"]
    table = pa.Table.from_pylist([{"probe_id": p, "sample": 0, "attempt": 1, "seed": 3, "system_text": "S",
                                   "user_text": "U"} for p in ids])
    refused = answer(variant(f"{server.url}/v1", api_key_env=KEY_ENV, effort="high"), table.slice(0, 1))[0]
    assert "HTTP 400" in refused["error"] and "field: temperature (sent 0.0)" in refused["error"]
    assert "models[smollm2].temperature" in refused["error"] and server.counts[ids[0]] == 1
    assert json.loads(refused["request_params"])["reasoning_effort"] == "high"
    rows = answer(variant(f"{server.url}/v1", api_key_env=KEY_ENV, effort="high", temperature=1.0), table)
    for row in rows:
        assert row["error"] is None and row["reasoning"] == "".join(THINKING_PIECES)
        assert row["ttft_ms"] < row["ttft_answer_ms"] and timing_problems(row) == []
        assert row["n_chunks"] == len(THINKING_PIECES) + len(ANSWER_PIECES)
    sent = server.requests[-1]["body"]
    assert sent["messages"][0] == {"role": "system", "content": "S"} and sent["reasoning_effort"] == "high"


def test_chat_template_kwargs_are_sent_and_recorded_as_sent(server):
    table = pa.Table.from_pylist([{"probe_id": "m|cat|dog|e|AB", "sample": 0, "attempt": 1, "seed": 5,
                                   "system_text": "S", "user_text": "U"}])
    v = variant(f"{server.url}/v1", api_key_env=KEY_ENV, chat_template_kwargs={"enable_thinking": False},
                extra_body={"chat_template_kwargs": {"custom_flag": "x"}, "top_k": 5})
    row = answer(v, table)[0]
    assert row["error"] is None, row["error"]
    template = {"enable_thinking": False, "custom_flag": "x"}   # extra_body's kwargs merged last
    sent = server.requests[-1]["body"]
    assert sent["chat_template_kwargs"] == template and sent["top_k"] == 5 and "reasoning_effort" not in sent
    assert json.loads(row["request_params"])["chat_template_kwargs"] == template
    assert json.loads(row["generation_overrides"]) == {"effort": None, "chat_template_kwargs": template,
                                                        "extra_body": {"top_k": 5}}
    row = answer(variant(f"{server.url}/v1", api_key_env=KEY_ENV, effort="low", temperature=1.0), table)[0]
    assert server.requests[-1]["body"]["reasoning_effort"] == "low" and "chat_template_kwargs" not in server.requests[-1]["body"]
    assert json.loads(row["generation_overrides"]) == {"effort": "low", "chat_template_kwargs": {}, "extra_body": {}}


def test_registry_and_resources():
    cls = engine_class("openai")
    assert cls is OpenAISampler and cls.ray_resources(variant("http://127.0.0.1:9/v1")) == {"num_cpus": 0.25}
