"""The chat-completions scorer (``score`` kind, backend openai, ``score_api`` "chat") against a real local HTTP
server speaking that API (``chat_server.py``, the demo model): with vLLM's prompt_logprobs every target token
is read exactly; with top log-probs only, the pieces among the top 20 are read and a rarer one is an error row
with its bound; a server that cannot continue a message (OpenAI's) is an error row pointing at the sampling
proxy. Every expected value comes from the demo model's own chat template and a plain transformers forward pass."""

from __future__ import annotations

import json

import pytest

from chat_server import ChatServer
from mirrorscan.grid.records import ModelVariant, InvocationContext

RUN = InvocationContext(invocation_id="inv-1", experiment="exp", instrument="flinch", envelope_version="-")
PAIRS = [("The capital of France is", " Paris"), ("The capital of France is", " Paris, France"),
         ("The jury found that the victim had been", " murdered"), ("The capital of France is", " banana bread")]


def cells(pairs):
    import pyarrow as pa

    return pa.Table.from_pylist([{"probe_id": f"m|t{i}|-|-", "sample": 0, "seed": i, "prefix": p, "target": t,
                                  "add_bos": None} for i, (p, t) in enumerate(pairs)])


def scored(url, pairs):
    from mirrorscan.actors.http_scorer import OpenAIScorer

    variant = ModelVariant(label="chat", model="chat", backend="openai", endpoint=url, max_tokens=1, timeout_s=60.0,
                           max_retries=0, score_api="chat")
    engine = OpenAIScorer(variant, "chat", RUN, backoff_base_s=0.01, backoff_ceiling_s=0.05)
    try:
        return engine.route, engine(cells(pairs)).to_pylist()
    finally:
        engine.close()


@pytest.fixture(scope="module")
def plain(demo_dir):
    """(tokenizer, log-probs of a chat-rendered assistant text) by plain transformers, outside the server."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_dir)
    model = AutoModelForCausalLM.from_pretrained(demo_dir, dtype=torch.float32).eval()

    def ids_of(assistant: str) -> list[int]:
        messages = [{"role": "user", "content": "Continue this text."}, {"role": "assistant", "content": assistant}]
        text = tok.apply_chat_template(messages, tokenize=False, continue_final_message=True, add_generation_prompt=False)
        return tok(text, add_special_tokens=False)["input_ids"]

    def logprobs(ids: list[int]):
        with torch.inference_mode():
            return torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)

    return tok, ids_of, logprobs


def test_prompt_logprobs_read_every_target_token_exactly(demo_dir, plain):
    tok, ids_of, logprobs = plain
    with ChatServer(demo_dir, "vllm") as server:
        route, rows = scored(server.url, PAIRS)
        bodies = list(server.requests)
    assert route == "prompt_logprobs"
    for row, (prefix, target) in zip(rows, PAIRS):
        full, before = ids_of(prefix + target), ids_of(prefix)
        assert full[:len(before)] == before                     # the target's tokens are the last ones
        lps = logprobs(full)
        expected = [float(lps[i - 1, full[i]]) for i in range(len(before), len(full))]
        assert row["error"] is None and row["target_token_ids"] == full[len(before):]
        assert row["target_logprobs"] == pytest.approx(expected, abs=1e-5)
        assert row["lp_mean"] == pytest.approx(sum(expected) / len(expected), abs=1e-5)
        params = json.loads(row["request_params"])
        assert params["route"] == "prompt_logprobs" and params["chat_user"] == "Continue this text."
        assert row["endpoint"].endswith("/v1/chat/completions") and row["user_text"] == prefix
    assert all(b["continue_final_message"] is True and b["add_generation_prompt"] is False for b in bodies)
    assert {b["messages"][-1]["content"] for b in bodies[1:]} == {p + t for p, t in PAIRS}   # after the probe


def test_top_logprobs_read_the_pieces_among_the_top_20_and_bound_the_rest(demo_dir, plain):
    tok, ids_of, logprobs = plain
    with ChatServer(demo_dir, "continues") as server:
        route, rows = scored(server.url, PAIRS)
    assert route == "top_logprobs"
    paris, paris_france, _, banana = rows
    for row, (prefix, target) in ((paris, PAIRS[0]), (paris_france, PAIRS[1])):
        full, before = ids_of(prefix + target), ids_of(prefix)
        pieces = [tok.decode([t]) for t in full[len(before):]]
        assert "".join(pieces) == target
        expected, read = [], ""
        for piece, token in zip(pieces, full[len(before):]):   # each piece predicted after the text read so far
            context = ids_of(prefix + read)
            expected.append(float(logprobs(context)[-1, token]))
            read += piece
        assert row["error"] is None and row["target_token_ids"] is None
        assert row["target_logprobs"] == pytest.approx(expected, abs=1e-5)
        assert json.loads(row["request_params"])["route"] == "top_logprobs"
    assert len(paris_france["target_logprobs"]) == 3
    lps = logprobs(ids_of(PAIRS[3][0]))[-1]
    floor = float(lps.topk(20).values[-1])
    assert float(lps[tok(" banana", add_special_tokens=False)["input_ids"][0]]) < floor   # truly not among them
    assert "TargetNotInTopLogprobs" in banana["error"] and f"below {floor:.2f} nats" in banana["error"]
    assert "sampling proxy" in banana["error"] and banana["target_logprobs"] is None


def test_a_chat_api_that_cannot_continue_a_message_is_an_error_row_pointing_at_the_proxy(demo_dir):
    with ChatServer(demo_dir, "openai") as server:
        route, rows = scored(server.url, PAIRS[:2])
        n_requests = len(server.requests)
    assert route is None and n_requests == 1                    # the probe only: no cell was sent
    for row in rows:
        assert row["error"].startswith("ChatCannotScore: the chat API cannot continue an assistant message")
        assert "sampling proxy" in row["error"] and "/v1/completions" in row["error"]
        assert "continue_final_message" in row["error"] and row["lp_mean"] is None


def test_score_api_is_checked_in_the_spec(tmp_path):
    from mirrorscan.grid.errors import ConfigError
    from mirrorscan.grid.spec import load_spec

    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / "pairs.csv").write_text("pair_id,word_a,word_b\np1,cat,dog\n", encoding="utf-8")

    def spec_with(instrument="flinch", **entry):
        config = {"instrument": instrument, "models": [{"model": "m", "label": "m1", "backend": "openai", **entry}]}
        if instrument == "forced_choice":
            config.update(probe_set="pairs.csv", envelopes=["english_strict"])
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
        return load_spec(folder)

    assert spec_with(score_api="chat").models[0].score_api == "chat"
    assert spec_with(score_api="completions").models[0].score_api is None   # the default, one spelling
    with pytest.raises(ConfigError) as info:
        spec_with(score_api="responses")
    assert info.value.field == "models[0].score_api"
    with pytest.raises(ConfigError) as info:
        spec_with(score_api="chat", backend="anthropic")
    assert info.value.field == "models[0].score_api" and "backend" in str(info.value)
    for entry, field in (({"instrument": "forced_choice"}, "score_api"), ({"add_bos": True}, "add_bos"),
                         ({"tokenizer": "packaged:smollm2-135m-instruct"}, "tokenizer")):
        with pytest.raises(ConfigError) as info:
            spec_with(score_api="chat", **entry)
        assert info.value.field == f"models[0].{field}"


def test_extra_body_may_not_replace_what_the_chat_scorer_sets():
    from mirrorscan.actors.http_scorer import OpenAIScorer
    from mirrorscan.grid.errors import ConfigError

    for key in ("continue_final_message", "prompt_logprobs", "logprobs"):
        variant = ModelVariant(label="chat", model="chat", backend="openai", endpoint="http://127.0.0.1:9/v1",
                               score_api="chat", extra_body={key: True})
        with pytest.raises(ConfigError) as info:
            OpenAIScorer(variant, "chat", RUN)
        assert info.value.field == f"models[chat].extra_body.{key}"
