"""OpenAI-compatible completions scorer (vLLM's server, TGI, llama.cpp …): target-token log-probabilities
from ``/v1/completions`` with ``echo`` and ``logprobs``. A model entry with ``"score_api": "chat"`` gets the
chat-completions scorer instead (``actors.http_chat_scorer``; ``actors.http_scorer`` chooses).

Request (POST ``<endpoint>/completions``): ``model`` = the API model name, ``max_tokens`` 1 (the generated
token is ignored), ``temperature`` 0, ``echo: true`` and ``logprobs: 0``, so that the answer carries the
log-probability of every prompt token given the ones before it. The prompt goes in one of two forms,
recorded per row in ``request_params.prompt_form``:

- ``ids`` — when the model entry names its ``tokenizer`` (a local folder, hub id or packaged alias of the
  served model's tokenizer): the prefix and target token ids by the rule every score engine shares
  (``actors.score_tokens``), so this engine scores exactly the tokens the HF and vLLM scorers score. A
  server that refuses token-id prompts (checked once per actor, with one short request) gets text instead.
- ``text`` — the prefix and target joined; the server tokenizes (BOS by its tokenizer's rule) and the
  target's tokens are those whose ``text_offset`` lies at or after the end of the prefix. A token that
  spans the boundary makes the cell an error row (the server merged prefix and target). Token ids are not
  known in this form: ``prefix_token_ids``/``target_token_ids``/``bos_added`` stay null.

Retries, timeouts, auth, concurrency and error rows are those of every HTTP engine (``actors.http_common``).
Timing: ``total_ms`` of the request (``timing_scope='request'``); nothing is streamed.
"""

from __future__ import annotations

import json

import httpx

from mirrorscan.actors.http_common import Fatal, HTTPSampler, Retryable
from mirrorscan.actors.score_tokens import ScoreIds, ScoreTokenError, score_fields, score_ids
from mirrorscan.actors.streaming import StreamClock
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant, InvocationContext
from mirrorscan.grid.engine_kinds import SCORE_COLUMNS
from mirrorscan.grid.trace_schema import trace_schema

SCORER_BODY_KEYS = frozenset({"prompt", "echo", "logprobs", "max_tokens", "temperature", "stream"})
"""Body fields the scorer sets itself; extra_body may not replace them."""


class OpenAICompletionsScorer(HTTPSampler):
    """Engine for backend "openai", kind ``score``: one OpenAI-compatible completions endpoint."""

    kind, backend = "score", "openai"
    model_keys = frozenset({"endpoint", "extra_body", "add_bos", "tokenizer", "score_api"})
    schema = trace_schema(SCORE_COLUMNS)

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext, **backoff):
        """Load the named tokenizer (if any), then ask the server once whether it takes token-id prompts."""
        for key in SCORER_BODY_KEYS & set(variant.extra_body):
            raise ConfigError("", f"models[{variant.label}].extra_body.{key}", "replaces a field the scorer sets "
                              "itself (prompt, echo, logprobs, max_tokens, temperature)", f"remove extra_body.{key}")
        super().__init__(variant, model_source, run, **backoff)
        self.tokenizer = None
        if variant.tokenizer:   # a folder or hub id: the run resolved the config's entry (cluster.models.resolve.engine_variant)
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(variant.tokenizer)
        self.prompt_form = "ids" if self.tokenizer is not None and self._takes_ids() else "text"
        """How prompts are sent: ``ids`` (our tokenization) or ``text`` (the server's)."""

    def post_url(self, base: str) -> str:
        """``<base>/completions`` (base: the API root ending in /v1)."""
        return f"{base}/completions"

    def provider_headers(self) -> dict:
        """JSON in and out."""
        return {"Content-Type": "application/json", "Accept": "application/json"}

    def auth_headers(self, key: str) -> dict:
        """Bearer token (never recorded)."""
        return {"Authorization": f"Bearer {key}"}

    def body(self, cell: dict) -> dict:
        """Completions body for ``cell``: its prompt (ids or text), echo with log-probs, one token, extras."""
        if self.prompt_form == "ids":
            prefix_ids, target_ids, *_ = self._ids(cell)
            prompt = prefix_ids + target_ids
        else:
            prompt = cell["prefix"] + cell["target"]
        return {"model": self.source, "prompt": prompt, "max_tokens": 1, "temperature": 0.0, "echo": True,
                "logprobs": 0, "stream": False, **self.variant.extra_body}

    def recorded_params(self, body: dict) -> dict:
        """The body sent minus the prompt (the text read is ``user_text``), plus the prompt form."""
        return {**{k: v for k, v in body.items() if k != "prompt"}, "prompt_form": self.prompt_form}

    async def read_stream(self, response: httpx.Response, clock: StreamClock) -> dict:
        """The JSON answer (not streamed), timed as one chunk; Retryable when it is not JSON."""
        raw = await response.aread()
        clock.chunk(text="\x00")
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise Retryable(f"unreadable answer {raw[:80]!r}") from exc

    def answer_fields(self, cell: dict, answer: dict, clock: StreamClock) -> dict:
        """Score columns of one answer: the target tokens' echoed log-probs (nats)."""
        try:
            logprobs = answer["choices"][0]["logprobs"]
            values = logprobs["token_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise Fatal("the answer carries no choices[0].logprobs.token_logprobs — fix: use a server whose "
                        "completions endpoint supports echo with logprobs (vLLM, TGI, llama.cpp)") from None
        usage = answer.get("usage") or {}
        timing = {"total_ms": clock.fields(0)["total_ms"], "started_at": clock.started_at}
        common = {"target_text": cell["target"], "completion_tokens": 0, **timing}
        if self.prompt_form == "ids":
            prefix_ids, target_ids, bos, space = self._ids(cell)
            first = len(prefix_ids)
            lps = values[first:first + len(target_ids)]
            if len(lps) != len(target_ids) or any(v is None for v in lps):
                raise Fatal(f"the answer echoes {len(values)} log-probs for a prompt of {first + len(target_ids)} tokens")
            return {**common, **score_fields(prefix_ids, target_ids, bos, [float(v) for v in lps], space)}
        offsets, prefix_len = logprobs.get("text_offset"), len(cell["prefix"])
        n_prompt = usage.get("prompt_tokens") or len(values) - 1
        if not offsets or len(offsets) < n_prompt:
            raise Fatal("the answer carries no text_offset for the echoed prompt, so the target cannot be found")
        text_len = len(cell["prefix"] + cell["target"])
        if len(offsets) > n_prompt and offsets[n_prompt] > text_len:
            # vLLM's server counts the text of special tokens it put first (a BOS) in the offsets: shift them
            # back so that offset 0 is the prompt's first character
            offsets = [o - (offsets[n_prompt] - text_len) for o in offsets]
        ends = offsets[1:n_prompt] + [text_len]
        if any(o < prefix_len < e for o, e in zip(offsets[:n_prompt], ends)):
            raise Fatal("the server's tokenizer merges a token across the end of the prefix — fix: name the "
                        f"model's tokenizer in models[{self.variant.label}].tokenizer so that token ids are sent")
        chosen = [i for i, o in enumerate(offsets[:n_prompt]) if o >= prefix_len and values[i] is not None]
        if not chosen:
            raise Fatal("no echoed token lies in the target")
        tokens = logprobs.get("tokens")
        if tokens and chosen[0] > 0 and tokens[chosen[0]] == "" and tokens[chosen[0] - 1].endswith("\ufffd"):
            # the prompt's first character split across tokens: vLLM echoes its first piece as U+FFFD (one
            # character of offset) and the rest as "", so the rest looks like the target's start; elsewhere a
            # split character's pieces are "" at the character's own offset and are read correctly
            raise Fatal("the prefix's last character is split across tokens, so the echoed offsets cannot say "
                        f"where the target starts — fix: name the model's tokenizer in models[{self.variant.label}]"
                        ".tokenizer so that token ids are sent")
        lps = [float(values[i]) for i in chosen]
        return {**common, "target_logprobs": lps, "lp_mean": sum(lps) / len(lps), "lp_min": min(lps),
                "prompt_tokens": n_prompt}

    def _row(self, cell: dict, **fields) -> dict:
        """The HTTP engines' row with the prefix as the text read."""
        return super()._row(cell, **{"system_text": "", "user_text": cell["prefix"], **fields})

    def _ids(self, cell: dict) -> ScoreIds:
        """Prefix and target ids by the shared rule; a cell that cannot be tokenized is a Fatal (its error row)."""
        from mirrorscan.actors.score_tokens import requested_bos

        try:
            return score_ids(self.tokenizer, cell["prefix"], cell["target"],
                             requested_bos(cell.get("add_bos"), self.variant.add_bos))
        except ScoreTokenError as exc:
            raise Fatal(f"ScoreTokenError: {exc}") from None

    def _takes_ids(self) -> bool:
        """Whether the server accepts a token-id prompt: one short request, retried like a cell's on 429/5xx
        (backoff 0.5, 1, 2 … s, ``max_retries`` times). A 400 or 422 is a refusal; a server that never answers
        the probe is sent text, which every completions server takes; a network failure counts as yes, so that
        the cells' own requests report it."""
        import time

        ids = self.tokenizer("Hello", add_special_tokens=False)["input_ids"]
        headers = {**self.provider_headers(), **(self.auth_headers(self._key) if self._key else {})}
        for attempt in range(self.variant.max_retries + 1):
            try:
                reply = httpx.post(self.url, json={"model": self.source, "prompt": ids, "max_tokens": 1,
                                                   "temperature": 0.0}, headers=headers, timeout=self.timeout_s)
            except httpx.HTTPError:
                return True
            if reply.status_code != 429 and reply.status_code < 500:
                return reply.status_code not in (400, 422)
            time.sleep(0.5 * 2 ** attempt)
        return False
