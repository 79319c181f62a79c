"""The OpenAI-compatible completions scorer (``score`` kind, backend openai) against vLLM's own server
(CPU build, float32, demo model, the session's ``vllm_server``): token-id prompts score the same tokens as
the HF scorer within 1e-4 nats; text prompts are split at the end of the prefix by the echoed offsets; a
server without echoed log-probs, a bad key and an unscorable cell are error rows naming the fix."""

from __future__ import annotations

import json

import pytest

from mirrorscan.actors.hf_scorer import HFScorer
from conftest import VLLM_TEST_KEY_ENV
from mirrorscan.grid.records import ModelVariant, InvocationContext
from test_hf_scorer import TEXTS, cells

RUN = InvocationContext(invocation_id="inv-1", experiment="exp", instrument="flinch", envelope_version="-")
SAME_NATS = 1e-4


def scorer(url, **kw):
    from mirrorscan.actors.http_completions import OpenAICompletionsScorer

    variant = ModelVariant(**{"label": "srv", "model": "smollm2", "backend": "openai", "endpoint": url,
                              "api_key_env": VLLM_TEST_KEY_ENV, "max_tokens": 1, "timeout_s": 120.0, **kw})
    return OpenAICompletionsScorer(variant, "smollm2", RUN, backoff_base_s=0.01, backoff_ceiling_s=0.05)


def scored(url, texts, **kw) -> tuple[list[dict], str]:
    """Rows of ``texts`` from a fresh scorer (closed afterwards), and the prompt form it chose."""
    engine = scorer(url, **kw)
    try:
        return engine(cells(texts)).to_pylist(), engine.prompt_form
    finally:
        engine.close()


@pytest.fixture(scope="module")
def hf_rows(demo_dir):
    variant = ModelVariant(label="demo", model=str(demo_dir), max_tokens=1, dtype="float32")
    return HFScorer(variant, str(demo_dir), RUN)(cells(TEXTS)).to_pylist()


def test_token_id_prompts_score_what_the_hf_scorer_scores(vllm_server, demo_dir, hf_rows):
    rows, form = scored(vllm_server, TEXTS, tokenizer=str(demo_dir))
    assert form == "ids"
    for r, h in zip(rows, hf_rows):
        assert r["error"] is None, r["error"]
        assert r["prefix_token_ids"] == h["prefix_token_ids"] and r["target_token_ids"] == h["target_token_ids"]
        assert r["target_logprobs"] == pytest.approx(h["target_logprobs"], abs=SAME_NATS)
        assert r["user_text"] == h["user_text"] and r["endpoint"] == vllm_server + "/completions"
        params = json.loads(r["request_params"])
        assert params["prompt_form"] == "ids" and params["echo"] is True and "prompt" not in params
        assert r["total_ms"] > 0 and r["backend"] == "openai"


def test_text_prompts_are_split_at_the_end_of_the_prefix(vllm_server, hf_rows):
    rows, form = scored(vllm_server, TEXTS)   # no tokenizer named: the server tokenizes the joined text
    assert form == "text"
    for r, h in zip(rows, hf_rows):
        assert r["error"] is None, r["error"]
        assert r["target_token_ids"] is None and json.loads(r["request_params"])["prompt_form"] == "text"
        if len(r["target_logprobs"]) == len(h["target_logprobs"]):   # the joined text split where ours did
            assert r["target_logprobs"] == pytest.approx(h["target_logprobs"], abs=SAME_NATS)
    assert sum(len(r["target_logprobs"]) == len(h["target_logprobs"]) for r, h in zip(rows, hf_rows)) >= 5


def test_what_cannot_be_scored_is_an_error_row_naming_the_fix(vllm_server, demo_dir, monkeypatch):
    rows, _ = scored(vllm_server, [("", " Cats"), ("Cats", " purr")], tokenizer=str(demo_dir))
    assert rows[0]["error"].startswith("ScoreTokenError: empty prefix") and rows[1]["error"] is None
    monkeypatch.setenv(VLLM_TEST_KEY_ENV, "sk-wrong-key-0000000000000000")
    row = scored(vllm_server, [("Cats", " purr")], tokenizer=str(demo_dir))[0][0]
    assert row["error"].startswith("HTTP 401") and "api_key_env" in row["error"] and "sk-wrong" not in row["error"]
