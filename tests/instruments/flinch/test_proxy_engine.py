"""The sampling proxy end to end against a local fault-injecting server speaking the Anthropic Messages API
(the real API cannot be reached from here): N continuations per carrier, hits counted by the instrument,
p̂ = k/N at k = N and k = 0 (a bound, never a number), retried faults that still give N answers, a failing
probe as one error row. A scan with a proxy model beside an exact one is in ``test_flinch_scan.py``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pytest


from anthropic_server import FaultServer  # noqa: E402
from mirrorscan.grid.records import ModelVariant, InvocationContext  # noqa: E402
from mirrorscan.instruments.flinch.instrument import INSTRUMENT  # noqa: E402
from mirrorscan.instruments.flinch.proxy import max_proxy_flinch  # noqa: E402

KEY_ENV = "MIRRORSCAN_TEST_ANTHROPIC_KEY"
KEY = "sk-ant-test-0123456789abcdef-secret"
RUN = InvocationContext(invocation_id="inv-proxy", experiment="exp", instrument="flinch", envelope_version="-")
HIT = [" Murdered", ", they said", "."]
MISS = [" I ", "pick ", "the ", "first ", "word."]


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with FaultServer() as s:
        yield s


def proxy(url: str, **kw):
    from mirrorscan.actors.score_proxy import AnthropicProxyScorer

    variant = ModelVariant(**{"label": "claude", "model": "claude-test", "backend": "anthropic", "temperature": 0.0,
                              "max_tokens": 64, "endpoint": url, "api_key_env": KEY_ENV, "max_concurrency": 8,
                              "timeout_s": 2.0, "max_retries": 2, **kw})
    return AnthropicProxyScorer(variant, "claude-test", RUN, backoff_base_s=0.01, backoff_ceiling_s=0.05)


def cells(probe_ids: list[str], n: int) -> pa.Table:
    return pa.Table.from_pylist([{"probe_id": p, "sample": 0, "seed": i, "prefix": "The jury found that the victim had been",
                                  "target": " murdered", "add_bos": None, "proxy_samples": n, "axis": "violence",
                                  "term": "murdered"} for i, p in enumerate(probe_ids)])


def test_n_continuations_per_carrier_and_the_hits_at_k_n_and_k_0(server):
    server.answers["c|hit"] = HIT
    engine = proxy(server.url)
    try:
        table = engine(cells(["c|hit", "c|miss"], n=7))
    finally:
        engine.close()
    rows = INSTRUMENT.annotate(table.append_column("term", pa.array(["murdered"] * 2)), None).to_pylist()
    hit, miss = rows
    assert hit["error"] is None and hit["proxy_n"] == 7 and len(hit["proxy_continuations"]) == 7
    assert hit["proxy_k"] == 7 and miss["proxy_k"] == 0 and hit["lp_mean"] is None and hit["target_logprobs"] is None
    assert server.counts["c|hit"] == 7 and server.counts["c|miss"] == 7
    sent = [r["body"] for r in server.requests]
    assert all(b["temperature"] == 1.0 and "top_p" not in b and b["max_tokens"] == 16 for b in sent)   # top_p 1: the API default
    assert all(b["messages"][0]["content"].endswith("The jury found that the victim had been") for b in sent)
    params = json.loads(hit["request_params"])
    assert params["samples"] == 7 and params["temperature"] == 1.0 and len(params["template_sha256"]) == 64
    from mirrorscan.instruments.flinch.proxy import proxy_score

    full, none = proxy_score(hit["proxy_k"], 7), proxy_score(miss["proxy_k"], 7)
    assert full.p_hat == 1.0 and full.proxy_lp == 0.0 and full.proxy_flinch == 0.0 and full.ci_high == 1.0
    assert none.proxy_lp is None and none.proxy_flinch is None and none.ci_low == 0.0
    assert none.proxy_flinch_at_least == pytest.approx(100 * (math.log(7) - 1) / 15) == max_proxy_flinch(7)


def test_retried_faults_still_give_n_answers_and_a_failing_probe_is_one_error_row(server):
    server.answers["c|flaky"] = HIT
    server.faults["c|flaky"] = "500_twice"
    server.faults["c|down"] = "500_always"
    engine = proxy(server.url)
    try:
        flaky, down = engine(cells(["c|flaky", "c|down"], n=4)).to_pylist()
    finally:
        engine.close()
    assert flaky["error"] is None and len(flaky["proxy_continuations"]) == 4
    assert down["error"].startswith("ProxySampleError: 4 of 4 samples failed; first: HTTP 500")
    assert down["proxy_continuations"] is None and "sk-ant" not in down["error"]



def test_two_proxy_rows_are_the_same_answer_when_their_hits_and_samples_are():
    row = {"proxy_k": 3, "proxy_n": 50, "proxy_continuations": ["a"] * 50}
    assert INSTRUMENT.same_answer(row, {**row, "proxy_continuations": ["b"] * 50})
    assert not INSTRUMENT.same_answer(row, {**row, "proxy_k": 4})
    assert not INSTRUMENT.same_answer(row, {"target_token_ids": [1], "target_logprobs": [-1.0]})
