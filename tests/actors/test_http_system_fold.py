"""A server whose chat template rejects a system role gets the system text folded into the user turn, by
every HTTP backend, byte for byte as the in-process path folds it (``actors.chat.render_chat``), and the row
says so (``system_folded``). The server is the local fault server rendering each request through the demo
tokenizer with a Gemma-style template that raises on a system turn (as vLLM's server does, answering 400)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from anthropic_server import FaultServer

from mirrorscan.actors.chat import render_chat
from mirrorscan.actors.http_anthropic import AnthropicSampler
from mirrorscan.actors.http_common import rejects_system_role
from mirrorscan.actors.http_openai import OpenAISampler
from fc_grid import fc_rendered
from mirrorscan.grid.records import ModelVariant, InvocationContext

RUN = InvocationContext(invocation_id="inv-fold", experiment="exp", instrument="forced_choice", envelope_version="t")
KEY_ENV = "MIRRORSCAN_TEST_FOLD_KEY"
PAIRS = pa.table({"pair_id": ["cd", "tc"], "word_a": ["cat", "tea"], "word_b": ["dog", "coffee"]})
NO_SYSTEM_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
FAST = {"backoff_base_s": 0.01, "backoff_ceiling_s": 0.05}
SAMPLERS = {"openai": (OpenAISampler, "/v1"), "anthropic": (AnthropicSampler, "")}


@pytest.fixture(scope="module")
def tokenizers(demo_dir):
    """(a tokenizer whose template rejects a system turn, one whose template accepts it)."""
    from transformers import AutoTokenizer

    strict = AutoTokenizer.from_pretrained(demo_dir)
    strict.chat_template = NO_SYSTEM_TEMPLATE
    return strict, AutoTokenizer.from_pretrained(demo_dir)


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-fold-key")
    with FaultServer() as s:
        yield s


def run(backend: str, url: str, table: pa.Table) -> list[dict]:
    cls, suffix = SAMPLERS[backend]
    v = ModelVariant(label="m", model="m", backend=backend, temperature=0.0, top_p=1.0, max_tokens=8,
                     endpoint=url + suffix, api_key_env=KEY_ENV, max_concurrency=1, timeout_s=5.0, max_retries=1)
    sampler = cls(v, v.model, RUN, **FAST)
    try:
        return sampler(table).to_pylist()
    finally:
        sampler.close()


@pytest.mark.parametrize("backend", sorted(SAMPLERS))
def test_a_template_without_a_system_role_gets_the_same_folded_bytes(backend, server, tokenizers):
    strict, _ = tokenizers
    server.tokenizer = strict
    table = fc_rendered(["m"], PAIRS, ["english_strict"], ["AB", "BA"], 1, 7)
    assert all(table["system_text"].to_pylist())   # the envelope has a system text to fold
    rows = run(backend, server.url, table)
    for row, cell in zip(rows, table.to_pylist()):
        assert row["error"] is None, row["error"]
        assert row["system_folded"] is True
        # the row keeps the envelope's texts; the server saw the in-process path's folded prompt exactly
        assert (row["system_text"], row["user_text"]) == (cell["system_text"], cell["user_text"])
        expected, folded = render_chat(strict, cell["system_text"], cell["user_text"])
        assert folded and server.prompts[cell["probe_id"]] == expected
    # the first cell was refused once, then resent folded; the actor folds the later cells at once
    first = table["probe_id"][0].as_py()
    assert server.counts[first] == 2 == json.loads(rows[0]["request_params"])["http_attempts"]
    assert all(server.counts[p] == 1 for p in table["probe_id"].to_pylist()[1:])


@pytest.mark.parametrize("backend", sorted(SAMPLERS))
def test_a_template_with_a_system_role_is_sent_the_system_turn(backend, server, tokenizers):
    _, plain = tokenizers
    server.tokenizer = plain
    table = fc_rendered(["m"], PAIRS, ["english_strict"], ["AB"], 1, 7)
    rows = run(backend, server.url, table)
    for row, cell in zip(rows, table.to_pylist()):
        assert row["error"] is None and row["system_folded"] is False
        assert server.prompts[cell["probe_id"]] == render_chat(plain, cell["system_text"], cell["user_text"])[0]
        assert server.counts[cell["probe_id"]] == 1


def test_only_a_refused_system_role_counts_as_one():
    assert rejects_system_role(400, "System role not supported")
    assert rejects_system_role(400, "Conversation roles must alternate; the system role is not allowed here")
    assert not rejects_system_role(400, "max_tokens: Field required")
    assert not rejects_system_role(401, "system role not supported")       # an auth failure is never a fold
    assert not rejects_system_role(500, "System role not supported")
    assert not rejects_system_role(400, None)
