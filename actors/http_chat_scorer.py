"""Target-token log-probabilities from an OpenAI-compatible **chat** completions endpoint
(``/v1/chat/completions``), for a model entry with ``"backend": "openai", "score_api": "chat"``.

A chat API returns log-probabilities of what the model *generates*, not of a text we choose; the target's
tokens can be read only where the server lets the assistant's message be continued (vLLM's and SGLang's
``continue_final_message``): the carrier's prefix, or the prefix and the target, is sent as a partial assistant
message after a fixed user turn (``CHAT_USER``), rendered by the server's chat template without a generation
prompt, so the next token is predicted right after the prefix — inside the template's assistant turn, not in
bare text as the completions scorer reads it (``request_params.route`` and ``chat_user`` record how). Two
routes, chosen once per actor by one short probe request:

- ``prompt_logprobs`` (vLLM's extension): the assistant message is the prefix and the target; the answer's
  ``prompt_logprobs`` give every prompt token's log-prob and id, and the target's tokens are the last ones,
  found by their decoded text (which must be exactly the target: a token that spans the end of the prefix
  makes the cell an error row). Exact, one request per cell, every token whatever its rank.
- ``top_logprobs`` (servers that continue a message but give no prompt log-probs): one request per target
  token, ``max_tokens`` 1 with ``logprobs`` and ``top_logprobs`` ``TOP_LOGPROBS``; the assistant message is
  the prefix and the part of the target read so far, and the next piece is the longest of the top tokens
  whose text begins the rest of the target. A piece that is not among them is an error row giving the bound
  the answer supports (its log-prob is below the lowest one listed): the words flinch measures are often
  that improbable, which is what the sampling proxy is for. Token ids are not known on this route.

A server that cannot continue an assistant message (OpenAI's own API refuses ``continue_final_message``)
gives no reading of the target at all: every cell is an error row saying so and naming the completions
endpoint and the sampling proxy. Retries, timeouts, auth and error rows are every HTTP engine's
(``actors.http_common``). Timing: the cell's requests (``timing_scope='request'``; on the top_logprobs route
the last request's).
"""

from __future__ import annotations

import json

import httpx

from mirrorscan.actors.http_common import Fatal
from mirrorscan.actors.http_completions import OpenAICompletionsScorer
from mirrorscan.actors.streaming import StreamClock
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant, InvocationContext

CHAT_USER = "Continue this text."
"""The user turn before the partial assistant message (some chat templates require a user turn first)."""
TOP_LOGPROBS = 20
"""Alternatives asked for per position on the top_logprobs route (OpenAI's maximum)."""
CHAT_BODY_KEYS = frozenset({"continue_final_message", "add_generation_prompt", "prompt_logprobs", "top_logprobs"})
"""Body fields of the chat routes that extra_body may not replace (besides the completions scorer's own)."""
CANNOT_SCORE = ("the chat API cannot continue an assistant message, so the target's tokens cannot be read "
                "from its log-probs — fix: score through the server's /v1/completions endpoint (leave "
                "models[{label}].score_api out), or measure the model with flinch's sampling proxy")


class OpenAIChatScorer(OpenAICompletionsScorer):
    """Engine for backend "openai", kind ``score``, ``score_api`` "chat" (module docstring)."""

    model_keys = frozenset({"endpoint", "extra_body", "score_api"})
    """Text messages are sent and the server tokenizes them: ``add_bos`` and ``tokenizer`` are not read."""

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext, **backoff):
        """Ask the server once which route it supports (``probe``)."""
        for key in CHAT_BODY_KEYS & set(variant.extra_body):
            raise ConfigError("", f"models[{variant.label}].extra_body.{key}", "replaces a field the chat scorer "
                              "sets itself", f"remove extra_body.{key}")
        super().__init__(variant, model_source, run, **backoff)
        self.route, self.refusal = self.probe()
        """``prompt_logprobs``, ``top_logprobs``, or None with the server's refusal (``refusal``)."""

    def _takes_ids(self) -> bool:
        """Chat messages are text: token ids are never sent."""
        return False

    def post_url(self, base: str) -> str:
        """``<base>/chat/completions``."""
        return f"{base}/chat/completions"

    def messages(self, assistant: str) -> list[dict]:
        """The fixed user turn, then ``assistant`` as the message to continue."""
        return [{"role": "user", "content": CHAT_USER}, {"role": "assistant", "content": assistant}]

    def body(self, cell: dict) -> dict:
        """The request of ``cell`` on this actor's route (on top_logprobs, of its next target piece)."""
        common = {"model": self.source, "max_tokens": 1, "temperature": 0.0, "stream": False,
                  "continue_final_message": True, "add_generation_prompt": False}
        if self.route == "prompt_logprobs":
            return {**common, "messages": self.messages(cell["prefix"] + cell["target"]), "prompt_logprobs": 0,
                    **self.variant.extra_body}
        return {**common, "messages": self.messages(cell["prefix"] + cell.get("_read", "")), "logprobs": True,
                "top_logprobs": TOP_LOGPROBS, **self.variant.extra_body}

    def recorded_params(self, body: dict) -> dict:
        """The body minus the messages, with the route and the user turn."""
        return {**{k: v for k, v in body.items() if k != "messages"}, "route": self.route, "chat_user": CHAT_USER}

    def answer_fields(self, cell: dict, answer: dict, clock: StreamClock) -> dict:
        """The target's log-probs (prompt_logprobs route), or the next piece's (top_logprobs route:
        ``target_text`` is the piece, ``target_logprobs`` its one value)."""
        timing = {"total_ms": clock.fields(0)["total_ms"], "started_at": clock.started_at, "completion_tokens": 0}
        if self.route == "top_logprobs":
            piece, lp = next_piece(answer, cell["target"][len(cell.get("_read", "")):])
            return {**timing, "target_text": piece, "target_logprobs": [lp]}
        ids, lps = target_prompt_logprobs(answer, cell["target"])
        return {**timing, "target_text": cell["target"], "target_token_ids": ids, "target_logprobs": lps,
                "lp_mean": sum(lps) / len(lps), "lp_min": min(lps), "prompt_tokens": len(answer["prompt_logprobs"])}

    async def _answer(self, cell: dict) -> dict:
        """One cell's row: an error row when the server cannot continue a message; one request on the
        prompt_logprobs route; one per target piece on the top_logprobs route."""
        if self.route is None:
            return self._row(cell, error=f"ChatCannotScore: {CANNOT_SCORE.format(label=self.variant.label)} "
                                         f"(the server answered: {self.refusal})")
        if self.route == "prompt_logprobs":
            return await super()._answer(cell)
        target, read, lps, attempts = cell["target"], "", [], 0
        while len(read) < len(target):
            row = await super()._answer({**cell, "_read": read})
            params = json.loads(row.get("request_params") or "{}")
            attempts += params.get("http_attempts", 0)
            row["request_params"] = json.dumps({**params, "http_attempts": attempts, "pieces_read": len(lps)},
                                               sort_keys=True)
            if row.get("error") is not None:
                return {**row, "target_text": target, "target_logprobs": None}
            read += row["target_text"]
            lps += row["target_logprobs"]
        return {**row, "target_text": target, "target_logprobs": lps, "lp_mean": sum(lps) / len(lps),
                "lp_min": min(lps)}

    def probe(self) -> tuple[str | None, str | None]:
        """(route, refusal): one short request continuing "Hello" with prompt_logprobs asked; a field the server
        refuses (400/422 naming it) is dropped and asked again without. Retried like a cell on 429/5xx; a server
        that cannot be reached gets the prompt_logprobs route, so that the cells' own requests report it."""
        import time

        body = {"model": self.source, "messages": self.messages("Hello"), "max_tokens": 1, "temperature": 0.0,
                "stream": False, "continue_final_message": True, "add_generation_prompt": False,
                "prompt_logprobs": 0, "logprobs": True, "top_logprobs": 1}
        headers = {**self.provider_headers(), **(self.auth_headers(self._key) if self._key else {})}
        attempt = 0
        while True:
            try:
                reply = httpx.post(self.url, json=body, headers=headers, timeout=self.timeout_s)
            except httpx.HTTPError:
                return "prompt_logprobs", None
            if (reply.status_code == 429 or reply.status_code >= 500) and attempt < self.variant.max_retries:
                time.sleep(0.5 * 2 ** attempt)
                attempt += 1
                continue
            text = reply.text[:300]
            if reply.status_code in (400, 422):
                if "prompt_logprobs" in text and "prompt_logprobs" in body:
                    body.pop("prompt_logprobs")
                    continue
                return None, f"HTTP {reply.status_code}: {text}"
            if reply.status_code != 200:   # auth and the like: the cells' rows say it with their fix
                return "prompt_logprobs", None
            try:
                answer = reply.json()
            except ValueError:
                return "prompt_logprobs", None
            if isinstance(answer.get("prompt_logprobs"), list):
                return "prompt_logprobs", None
            try:
                answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            except (KeyError, IndexError, TypeError):
                return None, "an answer without prompt_logprobs or choices[0].logprobs.content[0].top_logprobs"
            return "top_logprobs", None


def target_prompt_logprobs(answer: dict, target: str) -> tuple[list[int], list[float]]:
    """(ids, log-probs in nats) of the prompt's last tokens whose decoded texts make up ``target`` exactly,
    from a vLLM-style ``prompt_logprobs`` answer (one ``{token_id: {logprob, decoded_token}}`` per prompt
    token, the first null); Fatal when they cannot be read or the boundary falls inside a token."""
    entries = answer.get("prompt_logprobs")
    if not isinstance(entries, list) or not entries:
        raise Fatal("the answer carries no prompt_logprobs — fix: use a server that returns them (vLLM), or "
                    "leave score_api out to use /v1/completions")
    ids, lps, texts = [], [], []
    for entry in reversed(entries[1:]):
        if not isinstance(entry, dict) or len(entry) != 1:
            raise Fatal("a prompt_logprobs entry does not hold exactly the prompt's token (ask for prompt_logprobs 0)")
        (token_id, value), = entry.items()
        ids.insert(0, int(token_id))
        lps.insert(0, float(value["logprob"]))
        texts.insert(0, value.get("decoded_token") or "")
        if sum(len(t) for t in texts) >= len(target):
            break
    if "".join(texts) != target:
        raise Fatal(f"the prompt's last tokens read {''.join(texts)!r}, not the target {target!r}: the server's "
                    "tokenizer merges the target with the end of the prefix, or its chat template changed the "
                    "assistant text")
    return ids, lps


def next_piece(answer: dict, rest: str) -> tuple[str, float]:
    """(text, log-prob in nats) of the longest top-logprob token at the first generated position whose text
    begins ``rest``; Fatal naming the bound when none does."""
    try:
        top = answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise Fatal("the answer carries no choices[0].logprobs.content[0].top_logprobs") from None
    fits = [t for t in top if t.get("token") and rest.startswith(t["token"])]
    if not fits:
        floor = min((t["logprob"] for t in top), default=None)
        bound = f"below {floor:.2f} nats, " if floor is not None else ""
        raise Fatal(f"TargetNotInTopLogprobs: {rest!r} does not begin with any of the top {len(top)} tokens, so "
                    f"its log-prob is only bounded ({bound}the lowest listed) — fix: use a server that returns "
                    "prompt_logprobs (vLLM), its /v1/completions endpoint, or flinch's sampling proxy")
    best = max(fits, key=lambda t: len(t["token"]))
    return best["token"], float(best["logprob"])
