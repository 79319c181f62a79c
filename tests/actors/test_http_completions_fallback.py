"""The OpenAI-compatible completions scorer against a provider that refuses token-id prompts (the local
``completions_server``: real HTTP on 127.0.0.1, real log-probs of the tiny random model). With a tokenizer
named, the ids probe sees the 400 and the scorer sends text, splitting the echoed tokens at the end of the
prefix by ``text_offset``; the values equal the HF scorer's where the joined text splits where ours does, a
token spanning the boundary is an error row, and the server sees one request per cell plus the one probe.

"""

from __future__ import annotations

import json
import urllib.parse

import pytest

from mirrorscan.actors.hf_scorer import HFScorer
from completions_server import CompletionsServer
from mirrorscan.grid.records import ModelVariant, InvocationContext
from test_hf_scorer import TEXTS, cells

RUN = InvocationContext(invocation_id="inv-fallback", experiment="exp", instrument="flinch", envelope_version="-")
SAME_NATS = 1e-5
KEY_ENV = "MIRRORSCAN_TEST_FALLBACK_KEY"
KEY = "sk-fallback-test-0123456789"


@pytest.fixture(scope="module")
def server(tiny_dir):
    """The refusing provider serving the tiny model as "tiny", key required."""
    with CompletionsServer(tiny_dir, api_key=KEY) as srv:
        yield srv


@pytest.fixture
def srv(server, monkeypatch):
    """The module's server with its request log emptied, and its key in the environment."""
    monkeypatch.setenv(KEY_ENV, KEY)
    server.reset()
    return server


def hf_scorer(model_dir) -> HFScorer:
    return HFScorer(ModelVariant(label="hf", model=str(model_dir), max_tokens=1, dtype="float32"), str(model_dir), RUN)


@pytest.fixture(scope="module")
def tiny_hf(tiny_dir):
    """The HF scorer on the tiny model: the reference values."""
    return hf_scorer(tiny_dir)


@pytest.fixture(scope="module")
def tiny_hf_rows(tiny_hf):
    return tiny_hf(cells(TEXTS)).to_pylist()


def scored(url, texts, **kw) -> tuple[list[dict], str]:
    """Rows of ``texts`` from a fresh scorer (closed afterwards), and the prompt form it chose."""
    from mirrorscan.actors.http_completions import OpenAICompletionsScorer

    variant = ModelVariant(**{"label": "srv", "model": "tiny", "backend": "openai", "endpoint": url,
                              "api_key_env": KEY_ENV, "max_tokens": 1, "timeout_s": 30.0, "max_retries": 2, **kw})
    engine = OpenAICompletionsScorer(variant, "tiny", RUN, backoff_base_s=0.01, backoff_ceiling_s=0.05)
    try:
        return engine(cells(texts)).to_pylist(), engine.prompt_form
    finally:
        engine.close()


def splits_alike(tokenizer, prefix: str, target: str) -> bool:
    """Whether the joined text tokenizes as the prefix's tokens followed by the target's."""
    def ids(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids(prefix + target) == ids(prefix) + ids(target)


def is_ids(prompt) -> bool:
    return isinstance(prompt, list) and any(isinstance(p, (int, list)) for p in prompt)


def test_a_refused_ids_probe_falls_back_to_text_and_scores_what_the_hf_scorer_scores(srv, tiny_dir, tiny_hf_rows):
    rows, form = scored(srv.url, TEXTS, tokenizer=str(tiny_dir))
    assert form == "text"
    probe = srv.requests[0]
    assert is_ids(probe["body"]["prompt"]) and probe["status"] == 400   # the probe was refused …
    sent = srv.requests[1:]
    assert all(r["status"] == 200 and isinstance(r["body"]["prompt"], str) for r in sent)   # … and text followed
    assert sorted(r["body"]["prompt"] for r in sent) == sorted(p + t for p, t in TEXTS)
    assert all(r["body"]["echo"] is True and r["body"]["logprobs"] == 0 and r["body"]["max_tokens"] == 1 for r in sent)
    assert all(splits_alike(srv.tokenizer, p, t) for p, t in TEXTS)   # so every cell must match the HF scorer
    for r, h, (prefix, target) in zip(rows, tiny_hf_rows, TEXTS):
        assert r["error"] is None, r["error"]
        params = json.loads(r["request_params"])
        assert params["prompt_form"] == "text" and params["echo"] is True and "prompt" not in params
        assert params["http_attempts"] == 1
        assert r["target_token_ids"] is None and r["prefix_token_ids"] is None and r["bos_added"] is None
        assert len(r["target_logprobs"]) == len(h["target_logprobs"])
        assert r["target_logprobs"] == pytest.approx(h["target_logprobs"], abs=SAME_NATS)
        assert r["lp_mean"] == pytest.approx(sum(r["target_logprobs"]) / len(r["target_logprobs"]))
        assert r["lp_min"] == min(r["target_logprobs"])
        assert r["prompt_tokens"] == h["prompt_tokens"]
        assert r["user_text"] == prefix and r["target_text"] == target and r["endpoint"] == srv.url + "/completions"
    assert any(len(r["target_logprobs"]) > 1 for r in rows)   # a multi-token target was split token by token


@pytest.mark.parametrize("prefix,target", [("The cat", "s"), ("The cat ", "sat")])
def test_a_token_across_the_prefix_boundary_is_an_error_row(srv, tiny_dir, prefix, target):
    def n(text):
        return len(srv.tokenizer(text, add_special_tokens=False)["input_ids"])
    assert n(prefix + target) < n(prefix) + n(target)   # the joined text merges across the boundary
    rows, form = scored(srv.url, [(prefix, target), ("Cats", " purr")], tokenizer=str(tiny_dir))
    assert form == "text"
    bad, good = rows
    assert bad["error"] is not None and "merges a token across the end of the prefix" in bad["error"]
    assert "models[srv].tokenizer" in bad["error"] and bad["target_logprobs"] is None
    assert json.loads(bad["request_params"])["prompt_form"] == "text"
    assert good["error"] is None and len(good["target_logprobs"]) == 2   # " purr" is " pur" + "r"


def test_without_a_tokenizer_text_is_sent_from_the_start(srv, tiny_hf_rows):
    rows, form = scored(srv.url, TEXTS)
    assert form == "text"
    assert len(srv.requests) == len(TEXTS)   # no probe
    assert not any(is_ids(r["body"]["prompt"]) for r in srv.requests)
    assert all(r["status"] == 200 for r in srv.requests)
    for r, h in zip(rows, tiny_hf_rows):
        assert r["error"] is None, r["error"]
        assert r["target_logprobs"] == pytest.approx(h["target_logprobs"], abs=SAME_NATS)


def test_one_request_per_cell_plus_the_probe_with_the_probe_headers(srv, tiny_dir):
    rows, _ = scored(srv.url, TEXTS, tokenizer=str(tiny_dir))
    assert len(srv.requests) == 1 + len(TEXTS)
    assert [r["method"] for r in srv.requests] == ["POST"] * len(srv.requests)   # no GET /v1/models
    probe, *sent = srv.requests
    assert "X-Probe-Id" not in probe["headers"]
    assert probe["body"]["prompt"] == srv.tokenizer("Hello", add_special_tokens=False)["input_ids"]
    assert all(r["headers"]["Authorization"] == f"Bearer {KEY}" for r in srv.requests)   # the probe too
    ids = [urllib.parse.unquote(r["headers"]["X-Probe-Id"]) for r in sent]
    assert sorted(ids) == sorted(row["probe_id"] for row in rows) and len(set(ids)) == len(TEXTS)
    assert all(r["headers"]["X-Invocation-Id"] == RUN.invocation_id and r["headers"]["X-Probe-Sample"] == "0"
               for r in sent)
    for row in rows:
        recorded = json.loads(row["request_headers"])
        assert recorded["X-Probe-Id"] == row["probe_id"] and "Authorization" not in recorded
        assert KEY not in json.dumps(row, default=str)


def test_non_ascii_text_split_at_a_character_boundary_scores_what_the_hf_scorer_scores(srv, tiny_dir, tiny_hf):
    texts = [("日本", "語の文"), ("I ❤️", " cats"), ("Le café est", " fermé")]
    assert all(splits_alike(srv.tokenizer, p, t) for p, t in texts)
    expected = tiny_hf(cells(texts)).to_pylist()
    rows, form = scored(srv.url, texts, tokenizer=str(tiny_dir))
    assert form == "text"
    for r, h in zip(rows, expected):
        assert r["error"] is None, r["error"]
        assert r["target_logprobs"] == pytest.approx(h["target_logprobs"], abs=SAME_NATS)
    assert len(rows[0]["target_logprobs"]) == 5   # the three byte tokens of 語, の, 文


# ---- servers that add BOS, split characters at the boundary, or rate-limit the probe ---------------------

def test_a_server_that_adds_bos_is_split_where_the_prefix_ends(bos_tiny_dir, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    expected = hf_scorer(bos_tiny_dir)(cells(TEXTS)).to_pylist()   # same weights; the tokenizer adds BOS
    assert all(h["bos_added"] for h in expected)
    with CompletionsServer(bos_tiny_dir, api_key=KEY) as bos_server:
        rows, form = scored(bos_server.url, TEXTS, tokenizer=str(bos_tiny_dir))
    assert form == "text"
    paris = rows[TEXTS.index(("The capital of France is", " Paris"))]
    assert paris["error"] is not None or len(paris["target_logprobs"]) == 1   # " Paris" is one token
    for r, h in zip(rows, expected):
        assert r["error"] is None, r["error"]
        assert r["target_logprobs"] == pytest.approx(h["target_logprobs"], abs=SAME_NATS)


def test_a_prefix_whose_last_character_spans_tokens_is_refused_not_misread(srv, tiny_dir):
    """vLLM echoes the first piece of a character split across tokens as U+FFFD and the rest as '': from the
    offsets alone the second piece of 日 would look like the target's first token. The row says so instead of
    scoring one token too many."""
    texts = [("日", "本語")]
    assert splits_alike(srv.tokenizer, *texts[0]) and len(srv.tokenizer("日")["input_ids"]) == 2
    row = scored(srv.url, texts, tokenizer=str(tiny_dir))[0][0]
    assert row["target_logprobs"] is None
    assert "last character is split across tokens" in row["error"] and "tokenizer" in row["error"]


def test_a_rate_limited_probe_still_finds_that_ids_are_refused(srv, tiny_dir, tiny_hf_rows):
    srv.script.append(429)   # the provider is briefly rate-limited when the probe arrives
    rows, form = scored(srv.url, TEXTS, tokenizer=str(tiny_dir))
    assert form == "text"
    for r, h in zip(rows, tiny_hf_rows):
        assert r["error"] is None, r["error"]
        assert r["target_logprobs"] == pytest.approx(h["target_logprobs"], abs=SAME_NATS)
