"""Anthropic Messages API sampler, streamed (server-sent events).

Request (POST ``<endpoint>/v1/messages``; an endpoint already ending in ``/v1`` gets ``/messages``):
``model`` = the API model name, top-level ``system`` = the system text (left out when empty), one user
message, ``max_tokens``, ``temperature`` from the cell where it carries them, else the variant (0 is sent as 0: greedy-like, and refused by the
API with extended thinking — that refusal becomes an error row naming the field and the fix, nothing is
changed silently); ``top_p`` only when it is not 1.0 (1.0 is the API's default, and newer models refuse
temperature and top_p together); ``stream: true``; ``extra_body`` merged last. The variant's ``effort`` is
sent as the Messages API's own effort parameter, ``output_config.effort`` (merged into an
``extra_body.output_config``; the spec takes low/medium/high/xhigh/max and refuses a second effort there);
a model without it refuses the request, and that is an error row naming ``output_config.effort``.
Extended thinking is asked for in extra_body (e.g. ``{"thinking": {"type": "enabled", "budget_tokens":
1024}}``, with temperature 1). ``chat_template_kwargs`` cannot be sent (the API renders its own prompt):
the spec refuses it, and so does this class. The API has no seed: sampling is unseeded, and
request_params says so (``"seeded": false``). Headers: ``x-api-key`` (key from ``api_key_env``, default
``ANTHROPIC_API_KEY``; never recorded), ``anthropic-version: 2023-06-01``.

Stream events read: message_start (input_tokens), content_block_delta with text_delta (answer) or
thinking_delta (reasoning: counted for ttft_ms, not ttft_answer_ms), message_delta (stop_reason and
cumulative output_tokens → completion_tokens), message_stop (the end), ping (ignored), error
(overloaded_error / api_error / rate_limit_error / timeout_error: retried; others: error row).
content_block_start/stop and signature_delta carry no text and are not chunks. A stream without
message_stop is cut and retried from scratch. Shared behaviour is in ``actors.http_common``.
"""

from __future__ import annotations

import json
from contextlib import aclosing

import httpx

from mirrorscan.actors.http_common import Answer, Fatal, HTTPSampler, Retryable, sse_events
from mirrorscan.actors.rows import cell_sampling
from mirrorscan.actors.streaming import StreamClock
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.records import ModelVariant, InvocationContext

ANTHROPIC_VERSION = "2023-06-01"
"""Value of the anthropic-version header (the Messages API version this reader speaks)."""
TRANSIENT_STREAM_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})
"""Mid-stream error event types that are retried."""
STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length"}
"""stop_reason → finish_reason (others are kept as the API wrote them)."""


class AnthropicSampler(HTTPSampler):
    """Engine for backend "anthropic": the Messages API, streamed."""

    kind, backend = "generate", "anthropic"
    model_keys = frozenset({"endpoint", "extra_body"})
    default_key_env = "ANTHROPIC_API_KEY"
    effort_path = ("output_config", "effort")

    def __init__(self, variant: ModelVariant, model_source: str, run: InvocationContext, **backoff):
        """As ``HTTPSampler``; a ConfigError for chat-template kwargs, which this API has no place for."""
        extra = variant.extra_body
        for field, value in (("chat_template_kwargs", variant.chat_template_kwargs),
                             ("extra_body.chat_template_kwargs", extra.get("chat_template_kwargs"))):
            if value:
                raise ConfigError("", f"models[{variant.label}].{field}", "the Anthropic Messages API renders "
                                  "its own prompt, so chat-template kwargs cannot be sent",
                                  "remove it (effort and extra_body.thinking ask for reasoning)")
        super().__init__(variant, model_source, run, **backoff)

    def post_url(self, base: str) -> str:
        """``<base>/v1/messages`` (or ``<base>/messages`` when the base already ends in /v1)."""
        return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"

    def provider_headers(self) -> dict:
        """API version, content type and SSE accept header."""
        return {"anthropic-version": ANTHROPIC_VERSION, "content-type": "application/json",
                "accept": "text/event-stream"}

    def auth_headers(self, key: str) -> dict:
        """The x-api-key header (never recorded)."""
        return {"x-api-key": key}

    def body(self, cell: dict) -> dict:
        """Messages body for ``cell``: system, user message, max_tokens, temperature (top_p unless 1), extras,
        the effort as output_config.effort."""
        v = self.variant
        temperature, top_p, max_tokens = cell_sampling(v, cell)
        body = {"model": self.source, "max_tokens": max_tokens,
                "messages": [{"role": "user", "content": cell["user_text"]}]}
        if cell.get("system_text"):
            body["system"] = cell["system_text"]
        body["temperature"] = temperature
        if top_p != 1.0:
            body["top_p"] = top_p
        body["stream"] = True
        extra = v.extra_body
        body.update(extra)
        if v.effort:
            body["output_config"] = {**(extra.get("output_config") or {}), "effort": v.effort}
        return body

    def recorded_params(self, body: dict) -> dict:
        """The body minus the prompt, plus ``seeded: false`` (the Messages API takes no seed)."""
        return {**super().recorded_params(body), "seeded": False}

    async def read_stream(self, response: httpx.Response, clock: StreamClock) -> Answer:
        """Read Messages events until message_stop; raise Retryable for a cut stream or a transient error event."""
        answer = Answer()
        async with aclosing(sse_events(response)) as events:
            async for event, data in events:
                try:
                    obj = json.loads(data)
                except ValueError as exc:
                    raise Retryable(f"unreadable stream event {event!r}: {data[:80]!r}") from exc
                if take_event(obj.get("type") or event, obj, answer, clock):
                    return answer
        raise Retryable(f"stream cut before message_stop after {clock.n_chunks} chunks (partial answer discarded)")


def take_event(kind: str, obj: dict, answer: Answer, clock: StreamClock) -> bool:
    """Apply one Messages stream event to ``answer`` and ``clock``; True at message_stop."""
    if kind == "message_start":
        answer.prompt_tokens = ((obj.get("message") or {}).get("usage") or {}).get("input_tokens")
    elif kind == "content_block_delta":
        delta = obj.get("delta") or {}
        if delta.get("type") == "text_delta" and delta.get("text"):
            clock.chunk(text=delta["text"])
            answer.text.append(delta["text"])
        elif delta.get("type") == "thinking_delta" and delta.get("thinking"):
            clock.chunk(reasoning=delta["thinking"])
            answer.reasoning.append(delta["thinking"])
    elif kind == "message_delta":
        reason = (obj.get("delta") or {}).get("stop_reason")
        if reason:
            answer.finish_reason = STOP_REASONS.get(reason, reason)
        if (obj.get("usage") or {}).get("output_tokens") is not None:
            answer.completion_tokens = obj["usage"]["output_tokens"]   # cumulative: the last one is the total
    elif kind == "error":
        err = obj.get("error") or {}
        text = f"stream error event {err.get('type')}: {err.get('message')}"
        raise Retryable(text) if err.get("type") in TRANSIENT_STREAM_ERRORS else Fatal(text)
    return kind == "message_stop"
