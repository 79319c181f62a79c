"""The chat-completions scorer against vLLM's own OpenAI-compatible server (CPU build, float32, the demo
model, the session's ``vllm_server``): vLLM continues the assistant message and returns prompt_logprobs, so
every target token is read, equal to a plain transformers forward pass over the same chat-rendered prompt
within 1e-4 nats."""

from __future__ import annotations

import json

import pytest

from conftest import VLLM_TEST_KEY_ENV
from mirrorscan.grid.records import ModelVariant, InvocationContext
from test_http_chat_scorer import PAIRS, cells, plain  # noqa: F401 - the plain-transformers fixture

RUN = InvocationContext(invocation_id="inv-1", experiment="exp", instrument="flinch", envelope_version="-")
SAME_NATS = 1e-4


def test_vllms_server_gives_every_target_token_through_chat(vllm_server, plain):
    from mirrorscan.actors.http_scorer import OpenAIScorer

    tok, ids_of, logprobs = plain
    variant = ModelVariant(label="srv", model="smollm2", backend="openai", endpoint=vllm_server, max_tokens=1,
                           api_key_env=VLLM_TEST_KEY_ENV, timeout_s=120.0, score_api="chat")
    engine = OpenAIScorer(variant, "smollm2", RUN, backoff_base_s=0.01, backoff_ceiling_s=0.05)
    try:
        assert engine.route == "prompt_logprobs"
        rows = engine(cells(PAIRS)).to_pylist()
    finally:
        engine.close()
    for row, (prefix, target) in zip(rows, PAIRS):
        full, before = ids_of(prefix + target), ids_of(prefix)
        lps = logprobs(full)
        assert row["error"] is None, row["error"]
        assert row["target_token_ids"] == full[len(before):]
        expected = [float(lps[i - 1, full[i]]) for i in range(len(before), len(full))]
        assert row["target_logprobs"] == pytest.approx(expected, abs=SAME_NATS)
        assert json.loads(row["request_params"])["route"] == "prompt_logprobs"
